//! What each class needs, zone by zone: reads, the write and delete
//! policies, a rename's two, `ask_read`, and a staged zone, whose stage
//! takes what would be asked.

use super::*;

#[test]
fn reads_are_allowed_everywhere() {
    let (r, w) = (ro(), rw());
    for z in [&r, &w] {
        assert_eq!(
            decide(&Op::Read {
                at: at(z, "f"),
                size: 5
            }),
            Decision::Allow
        );
    }
    assert_eq!(
        decide(&Op::Read {
            at: Loc::root(),
            size: 0
        }),
        Decision::Allow
    );
}

#[test]
fn rw_zone_follows_write_policy() {
    for (level, want) in [
        (PreApproved, Decision::Allow),
        (Blocked, Decision::Refuse(Refusal::Blocked)),
    ] {
        let z = zone(Access::Rw, level, PreApproved);
        let f = at(&z, "f");
        for op in [
            Op::WriteContent {
                at: f,
                new_size: Some(3),
            },
            Op::NewName {
                at: f,
                is_dir: false,
            },
            Op::NewName {
                at: f,
                is_dir: true,
            },
            meta(f),
            Op::Link {
                from: at(&z, "a"),
                to: f,
            },
        ] {
            assert_eq!(decide(&op), want, "{op:?}");
        }
        // delete is not a write
        assert_eq!(decide(&remove(f)), Decision::Allow);
    }
    let z = zone(Access::Rw, Ask, PreApproved);
    match decide(&Op::NewName {
        at: at(&z, "x/y"),
        is_dir: false,
    }) {
        Decision::Ask(items) => {
            assert_eq!(
                items,
                vec![AskItem {
                    class: Class::Write,
                    zone: "z".into(),
                    path: "x/y".into()
                }]
            )
        }
        d => panic!("{d:?}"),
    }
    assert_eq!(Refusal::Blocked.errno(), libc::EPERM);
}

#[test]
fn rw_zone_follows_delete_policy() {
    let z = zone(Access::Rw, PreApproved, Blocked);
    assert_eq!(refused(remove(at(&z, "f"))), Refusal::Blocked);
    assert_eq!(
        decide(&Op::NewName {
            at: at(&z, "f"),
            is_dir: false
        }),
        Decision::Allow
    );
    let z = zone(Access::Rw, PreApproved, Ask);
    assert!(
        matches!(decide(&remove(at(&z, "f"))), Decision::Ask(v) if v[0].class == Class::Delete)
    );
}

#[test]
fn rename_needs_write_and_delete() {
    let z = zone(Access::Rw, PreApproved, Blocked);
    let op = Op::Rename {
        from: at(&z, "a"),
        to: at(&z, "b"),
        is_dir: false,
        to_is_dir: None,
        exchange: false,
    };
    assert_eq!(refused(op), Refusal::Blocked);
    let z = zone(Access::Rw, Ask, Ask);
    let op = Op::Rename {
        from: at(&z, "a"),
        to: at(&z, "b"),
        is_dir: false,
        to_is_dir: Some(false),
        exchange: false,
    };
    match decide(&op) {
        Decision::Ask(items) => {
            let got: Vec<_> = items
                .iter()
                .map(|i| (i.class, i.path.to_str().unwrap().to_string()))
                .collect();
            assert_eq!(
                got,
                vec![
                    (Class::Write, "b".into()),
                    (Class::Delete, "a".into()),
                    (Class::Delete, "b".into())
                ]
            );
        }
        d => panic!("{d:?}"),
    }
    // blocked beats ask
    let z = zone(Access::Rw, Ask, Blocked);
    let op = Op::Rename {
        from: at(&z, "a"),
        to: at(&z, "b"),
        is_dir: false,
        to_is_dir: None,
        exchange: false,
    };
    assert_eq!(refused(op), Refusal::Blocked);
}

#[test]
fn a_staged_zone_lets_asks_into_the_stage_and_still_refuses_blocked() {
    let mut z = zone(Access::Rw, Ask, Ask);
    z.staged = true;
    let f = at(&z, "f");
    for op in [
        Op::WriteContent {
            at: f,
            new_size: Some(3),
        },
        Op::NewName {
            at: f,
            is_dir: false,
        },
        meta(f),
        remove(f),
    ] {
        assert_eq!(decide(&op), Decision::Allow, "{op:?}");
    }
    let mut z = zone(Access::Rw, Blocked, Blocked);
    z.staged = true;
    assert_eq!(refused(remove(at(&z, "f"))), Refusal::Blocked);
    assert_eq!(refused(meta(at(&z, "f"))), Refusal::Blocked);
    // Every other rule holds as on a plain zone: protect, suffixes, size.
    let mut z = zone_with(Access::Rw, Ask, Ask, Some(&[".md"]), Some(2), &[".git"]);
    z.staged = true;
    assert_eq!(
        refused(Op::NewName {
            at: at(&z, "a.txt"),
            is_dir: false
        }),
        Refusal::Suffix
    );
    assert_eq!(refused(meta(at(&z, ".git/x"))), Refusal::Protected);
}

#[test]
fn reads_ask_where_the_zone_or_an_ask_read_pattern_says() {
    let compile = |read: Approval, ask_read: &[&str]| {
        ZoneRules::compile(&Zone {
            name: "z".into(),
            backing: PathBuf::from("/nonexistent"),
            policy: ZonePolicy {
                approval: ApprovalPolicy {
                    read,
                    ..ApprovalPolicy::default()
                },
                ask_read: ask_read.iter().map(|s| s.to_string()).collect(),
                ..ZonePolicy::plain(Access::Ro)
            },
        })
        .unwrap()
    };
    let read = |z: &ZoneRules, p: &str| {
        decide(&Op::Read {
            at: at(z, p),
            size: 1,
        })
    };
    let z = compile(Ask, &[]);
    assert!(matches!(read(&z, "any"), Decision::Ask(ref i) if i[0].class == Class::Read));
    let z = compile(Blocked, &[]);
    assert_eq!(read(&z, "any"), Decision::Refuse(Refusal::Blocked));
    let z = compile(PreApproved, &[".env", "/config/prod/**"]);
    assert!(matches!(read(&z, "a/.env"), Decision::Ask(_)));
    assert!(matches!(read(&z, "config/prod/db.yaml"), Decision::Ask(_)));
    assert_eq!(read(&z, "config/dev/db.yaml"), Decision::Allow);
    assert_eq!(read(&z, "notes"), Decision::Allow);
    // Listing and stat are not gated.
    assert_eq!(look(&z, ".env", None), None);
}

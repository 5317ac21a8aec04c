//! Unit tests of the pure policy: every row of DESIGN §3.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use super::*;
use crate::config::{Access, Approval, ApprovalPolicy, Zone, ZonePolicy};

fn zone(access: Access, write: Approval, delete: Approval) -> ZoneRules {
    zone_with(access, write, delete, None, None, &[])
}

fn zone_with(
    access: Access,
    write: Approval,
    delete: Approval,
    suffixes: Option<&[&str]>,
    max: Option<u64>,
    protect: &[&str],
) -> ZoneRules {
    ZoneRules::compile(&Zone {
        name: "z".into(),
        backing: PathBuf::from("/nonexistent"),
        policy: ZonePolicy {
            access,
            approval: ApprovalPolicy {
                write,
                delete,
                read: Approval::PreApproved,
            },
            suffixes: suffixes.map(|s| s.iter().map(|x| x.to_string()).collect()),
            max_file_bytes: max,
            protect: protect.iter().map(|x| x.to_string()).collect(),
            hidden: vec![],
            hide: vec![],
            ask_read: vec![],
            staged: false,
        },
    })
    .unwrap()
}

use Approval::{Ask, Blocked, PreApproved};

fn with_hidden(access: Access, hidden: &[&str]) -> ZoneRules {
    ZoneRules::compile(&Zone {
        name: "home".into(),
        backing: PathBuf::from("/nonexistent"),
        policy: ZonePolicy {
            access,
            approval: ApprovalPolicy::default(),
            suffixes: Some(vec![".md".into()]),
            max_file_bytes: Some(1),
            protect: vec![".git".into()],
            hidden: hidden.iter().map(PathBuf::from).collect(),
            hide: vec![],
            ask_read: vec![],
            staged: false,
        },
    })
    .unwrap()
}

#[test]
fn sensitive_roots_are_enoent_for_everything_first() {
    for access in [Access::Rw, Access::Ro] {
        let z = with_hidden(access, &[".ssh", ".config/gh"]);
        for p in [".ssh", ".ssh/id_rsa", ".config/gh", ".config/gh/hosts.yml"] {
            let f = at(&z, p);
            for op in [
                Op::Read { at: f, size: 100 },
                Op::WriteContent {
                    at: f,
                    new_size: Some(100),
                },
                Op::NewName {
                    at: f,
                    is_dir: false,
                },
                Op::NewName {
                    at: f,
                    is_dir: true,
                },
                Op::Metadata { at: f },
                Op::Remove { at: f },
                Op::Rename {
                    from: at(&z, "x.md"),
                    to: f,
                    is_dir: false,
                    to_is_dir: None,
                    exchange: false,
                },
                Op::Rename {
                    from: f,
                    to: at(&z, "x.md"),
                    is_dir: true,
                    to_is_dir: None,
                    exchange: false,
                },
                Op::Link {
                    from: at(&z, "x.md"),
                    to: f,
                },
            ] {
                assert_eq!(refused(op), Refusal::Sensitive, "{access:?} {op:?}");
            }
        }
        // Neighbours and look-alikes are not hidden.
        for p in [".sshx", ".config", ".config/ghx", "sub/.ssh", "ssh"] {
            assert!(!z.is_sensitive(Path::new(p)), "{p}");
        }
    }
    assert_eq!(Refusal::Sensitive.errno(), libc::ENOENT);
    let z = with_hidden(Access::Rw, &[".ssh", ".config/gh"]);
    assert_eq!(
        look(&z, ".ssh", Some(true)),
        Some(Refusal::Sensitive),
        "directories too"
    );
    assert_eq!(look(&z, "a.txt", Some(false)), Some(Refusal::Hidden));
    assert_eq!(look(&z, "a.md", Some(false)), None);
    assert_eq!(look(&z, "dir", Some(true)), None);
    // Before the entry is opened, only a sensitive root is decided.
    assert_eq!(look(&z, "a.txt", None), None);
    assert_eq!(look(&z, ".config/gh/x", None), Some(Refusal::Sensitive));
}

#[test]
fn renaming_a_dir_that_holds_a_sensitive_root_is_refused() {
    let z = with_hidden(Access::Rw, &[".config/gh"]);
    let mv = |from: &'static str, to: &'static str, is_dir: bool, exchange: bool| {
        decide(&Op::Rename {
            from: Loc::in_zone(&z, Path::new(from)),
            to: Loc::in_zone(&z, Path::new(to)),
            is_dir,
            to_is_dir: exchange.then_some(true),
            exchange,
        })
    };
    assert_eq!(
        mv(".config", "cfg", true, false),
        Decision::Refuse(Refusal::SensitiveInside)
    );
    assert_eq!(
        mv("cfg", ".config", true, true),
        Decision::Refuse(Refusal::SensitiveInside)
    );
    assert_eq!(mv("other", "o2", true, false), Decision::Allow);
    // A directory moved *onto* `.config` only gets hidden content.
    assert_eq!(mv("other", ".config", true, false), Decision::Allow);
    assert_eq!(Refusal::SensitiveInside.errno(), libc::EACCES);
    // Read-only wins over it.
    let z = with_hidden(Access::Ro, &[".config/gh"]);
    assert_eq!(
        refused(Op::Rename {
            from: at(&z, ".config"),
            to: at(&z, "cfg"),
            is_dir: true,
            to_is_dir: None,
            exchange: false,
        }),
        Refusal::ReadOnly
    );
}

fn rw() -> ZoneRules {
    zone(Access::Rw, PreApproved, PreApproved)
}
fn ro() -> ZoneRules {
    zone(Access::Ro, PreApproved, PreApproved)
}
fn at<'a>(z: &'a ZoneRules, p: &'a str) -> Loc<'a> {
    Loc::in_zone(z, Path::new(p))
}
/// What a lookup of `p` meets (None: visible).
fn look(z: &ZoneRules, p: &str, is_dir: Option<bool>) -> Option<Refusal> {
    match decide(&Op::Look {
        at: at(z, p),
        is_dir,
    }) {
        Decision::Refuse(r) => Some(r),
        Decision::Allow => None,
        d => panic!("a lookup is never asked about: {d:?}"),
    }
}

fn refused(op: Op<'_>) -> Refusal {
    match decide(&op) {
        Decision::Refuse(r) => r,
        d => panic!("expected a refusal, got {d:?}"),
    }
}

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
fn ro_zone_refuses_every_change_with_erofs() {
    let z = ro();
    let f = at(&z, "d/f");
    for op in [
        Op::WriteContent {
            at: f,
            new_size: None,
        },
        Op::NewName {
            at: f,
            is_dir: false,
        },
        Op::NewName {
            at: f,
            is_dir: true,
        },
        Op::Metadata { at: f },
        Op::Remove { at: f },
        Op::Rename {
            from: f,
            to: at(&z, "g"),
            is_dir: false,
            to_is_dir: None,
            exchange: false,
        },
        Op::Link {
            from: f,
            to: at(&z, "g"),
        },
    ] {
        assert_eq!(refused(op), Refusal::ReadOnly, "{op:?}");
        assert_eq!(Refusal::ReadOnly.errno(), libc::EROFS);
    }
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
            Op::Metadata { at: f },
            Op::Link {
                from: at(&z, "a"),
                to: f,
            },
        ] {
            assert_eq!(decide(&op), want, "{op:?}");
        }
        // delete is not a write
        assert_eq!(decide(&Op::Remove { at: f }), Decision::Allow);
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
    assert_eq!(refused(Op::Remove { at: at(&z, "f") }), Refusal::Blocked);
    assert_eq!(
        decide(&Op::NewName {
            at: at(&z, "f"),
            is_dir: false
        }),
        Decision::Allow
    );
    let z = zone(Access::Rw, PreApproved, Ask);
    assert!(
        matches!(decide(&Op::Remove { at: at(&z, "f") }), Decision::Ask(v) if v[0].class == Class::Delete)
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
fn cross_zone_rename_and_link_are_exdev_even_from_ro() {
    let (a, b) = (rw(), ro());
    let op = Op::Rename {
        from: at(&a, "f"),
        to: at(&b, "f"),
        is_dir: false,
        to_is_dir: None,
        exchange: false,
    };
    assert_eq!(refused(op), Refusal::CrossZone);
    assert_eq!(
        refused(Op::Link {
            from: at(&b, "f"),
            to: at(&a, "f")
        }),
        Refusal::CrossZone
    );
    assert_eq!(Refusal::CrossZone.errno(), libc::EXDEV);
}

#[test]
fn root_level_changes_are_eacces_and_beat_everything_else() {
    let (a, r) = (rw(), ro());
    let root_entry = Loc::root();
    assert_eq!(
        refused(Op::NewName {
            at: root_entry,
            is_dir: true
        }),
        Refusal::RootLevel
    );
    assert_eq!(refused(Op::Remove { at: root_entry }), Refusal::RootLevel);
    assert_eq!(refused(Op::Metadata { at: root_entry }), Refusal::RootLevel);
    // a zone dir renamed, removed: root-level, also for a ro zone
    assert_eq!(refused(Op::Remove { at: at(&r, "") }), Refusal::RootLevel);
    let op = Op::Rename {
        from: at(&a, ""),
        to: at(&r, "x"),
        is_dir: true,
        to_is_dir: None,
        exchange: false,
    };
    assert_eq!(refused(op), Refusal::RootLevel);
    let op = Op::Rename {
        from: at(&a, "x"),
        to: root_entry,
        is_dir: false,
        to_is_dir: None,
        exchange: false,
    };
    assert_eq!(refused(op), Refusal::RootLevel);
    assert_eq!(Refusal::RootLevel.errno(), libc::EACCES);
    // metadata of a zone dir itself (chmod, chown, utimes, xattrs) is a
    // root-level change, in a rw zone too; inside it, a zone matter
    assert_eq!(refused(Op::Metadata { at: at(&r, "") }), Refusal::RootLevel);
    assert_eq!(refused(Op::Metadata { at: at(&a, "") }), Refusal::RootLevel);
    assert_eq!(decide(&Op::Metadata { at: at(&a, "x") }), Decision::Allow);
}

#[test]
fn suffixes_hide_names_and_refuse_new_ones() {
    let z = zone_with(
        Access::Rw,
        PreApproved,
        PreApproved,
        Some(&[".md", ".pdf"]),
        None,
        &[],
    );
    assert!(z.visible(OsStr::new("a.md"), false));
    assert!(!z.visible(OsStr::new("a.txt"), false));
    assert!(z.visible(OsStr::new("dir.txt"), true));
    assert_eq!(
        refused(Op::NewName {
            at: at(&z, "a.txt"),
            is_dir: false
        }),
        Refusal::Suffix
    );
    assert_eq!(
        decide(&Op::NewName {
            at: at(&z, "d.txt"),
            is_dir: true
        }),
        Decision::Allow
    );
    let op = Op::Rename {
        from: at(&z, "a.md"),
        to: at(&z, "a.txt"),
        is_dir: false,
        to_is_dir: None,
        exchange: false,
    };
    assert_eq!(refused(op), Refusal::Suffix);
    assert_eq!(
        refused(Op::Link {
            from: at(&z, "a.md"),
            to: at(&z, "b")
        }),
        Refusal::Suffix
    );
    // read-only beats suffix
    let z = zone_with(
        Access::Ro,
        PreApproved,
        PreApproved,
        Some(&[".md"]),
        None,
        &[],
    );
    assert_eq!(
        refused(Op::NewName {
            at: at(&z, "a.txt"),
            is_dir: false
        }),
        Refusal::ReadOnly
    );
}

#[test]
fn protect_makes_subtrees_read_only() {
    let z = zone_with(
        Access::Rw,
        PreApproved,
        PreApproved,
        None,
        None,
        &[".git", "/docs/final"],
    );
    assert!(z.is_protected(Path::new(".git"), true));
    assert!(z.is_protected(Path::new("sub/.git/config"), false));
    assert!(z.is_protected(Path::new("docs/final/a.md"), false));
    assert!(!z.is_protected(Path::new("x/docs/final"), true));
    assert!(!z.is_protected(Path::new("src/main.rs"), false));
    assert_eq!(
        refused(Op::NewName {
            at: at(&z, ".git/objects/x"),
            is_dir: false
        }),
        Refusal::Protected
    );
    assert_eq!(
        refused(Op::NewName {
            at: at(&z, ".git"),
            is_dir: true
        }),
        Refusal::Protected
    );
    assert_eq!(
        refused(Op::WriteContent {
            at: at(&z, ".git/HEAD"),
            new_size: None
        }),
        Refusal::Protected
    );
    assert_eq!(
        refused(Op::Remove {
            at: at(&z, "docs/final/a")
        }),
        Refusal::Protected
    );
    let op = Op::Rename {
        from: at(&z, ".git/HEAD"),
        to: at(&z, "h"),
        is_dir: false,
        to_is_dir: None,
        exchange: false,
    };
    assert_eq!(refused(op), Refusal::Protected);
    let op = Op::Rename {
        from: at(&z, "h"),
        to: at(&z, ".git/HEAD"),
        is_dir: false,
        to_is_dir: Some(false),
        exchange: false,
    };
    assert_eq!(refused(op), Refusal::Protected);
    assert_eq!(
        decide(&Op::NewName {
            at: at(&z, "src/a.rs"),
            is_dir: false
        }),
        Decision::Allow
    );
}

#[test]
fn size_limit_is_efbig_past_the_limit_only() {
    let z = zone_with(Access::Rw, Blocked, PreApproved, None, Some(10), &[]);
    assert_eq!(
        decide(&Op::Read {
            at: at(&z, "f"),
            size: 10
        }),
        Decision::Allow
    );
    assert_eq!(
        refused(Op::Read {
            at: at(&z, "f"),
            size: 11
        }),
        Refusal::TooBig
    );
    // size beats the approval policy
    assert_eq!(
        refused(Op::WriteContent {
            at: at(&z, "f"),
            new_size: Some(11)
        }),
        Refusal::TooBig
    );
    assert_eq!(
        refused(Op::WriteContent {
            at: at(&z, "f"),
            new_size: Some(10)
        }),
        Refusal::Blocked
    );
    assert_eq!(Refusal::TooBig.errno(), libc::EFBIG);
}

#[test]
fn precedence_follows_the_design_order() {
    let mut all = [
        Refusal::Blocked,
        Refusal::TooBig,
        Refusal::Suffix,
        Refusal::Protected,
        Refusal::ReadOnly,
        Refusal::CrossZone,
        Refusal::RootLevel,
        Refusal::Hidden,
        Refusal::Sensitive,
        Refusal::SensitiveInside,
    ];
    all.sort();
    assert_eq!(all[0], Refusal::Sensitive);
    assert_eq!(all[1], Refusal::Hidden);
    assert_eq!(all[2], Refusal::RootLevel);
    assert_eq!(all[3], Refusal::CrossZone);
    assert_eq!(all.last(), Some(&Refusal::Blocked));
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
        Op::Metadata { at: f },
        Op::Remove { at: f },
    ] {
        assert_eq!(decide(&op), Decision::Allow, "{op:?}");
    }
    let mut z = zone(Access::Rw, Blocked, Blocked);
    z.staged = true;
    assert_eq!(refused(Op::Remove { at: at(&z, "f") }), Refusal::Blocked);
    assert_eq!(refused(Op::Metadata { at: at(&z, "f") }), Refusal::Blocked);
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
    assert_eq!(
        refused(Op::Metadata {
            at: at(&z, ".git/x")
        }),
        Refusal::Protected
    );
}

#[test]
fn hide_patterns_hide_as_sensitive_roots_do() {
    let mut z = zone(Access::Rw, PreApproved, PreApproved);
    z = ZoneRules::compile(&Zone {
        name: "z".into(),
        backing: PathBuf::from("/nonexistent"),
        policy: ZonePolicy {
            hide: vec![
                ".env".into(),
                "/config/creds.json".into(),
                "secrets/".into(),
            ],
            ..ZonePolicy::plain(Access::Rw)
        },
    })
    .unwrap_or(z);
    for p in [
        ".env",
        "a/b/.env",
        "config/creds.json",
        "secrets",
        "secrets/x",
        "a/secrets/y",
    ] {
        assert_eq!(look(&z, p, None), Some(Refusal::HiddenByPattern), "{p}");
        assert_eq!(
            refused(Op::NewName {
                at: at(&z, p),
                is_dir: false
            }),
            Refusal::HiddenByPattern,
            "{p}"
        );
    }
    assert_eq!(
        look(&z, "a/creds.json", None),
        None,
        "anchored: only at the root"
    );
    assert_eq!(look(&z, "notes", None), None);
    // Renaming a dir that carries an anchored pattern's match: EACCES.
    assert_eq!(
        refused(Op::Rename {
            from: at(&z, "config"),
            to: at(&z, "cfg"),
            is_dir: true,
            to_is_dir: None,
            exchange: false
        }),
        Refusal::SensitiveInside
    );
    assert_eq!(Refusal::HiddenByPattern.errno(), libc::ENOENT);
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

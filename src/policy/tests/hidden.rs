//! What a worker can't see: sensitive roots and `hide` patterns are
//! ENOENT for everything, first, and a directory that holds one can't move.

use super::*;

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
                meta(f),
                remove(f),
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

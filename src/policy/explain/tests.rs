//! Every refusal explained: the words `check`, `status` and the ledger give.

use super::*;
use crate::config::{Access, Approval, ApprovalPolicy, Zone, ZonePolicy};
use crate::error::Refusal;
use crate::policy::tests::remove;
use crate::policy::{Decision, Loc, Op, ZoneRules};
use std::path::{Path, PathBuf};

struct Z {
    name: &'static str,
    access: Access,
    write: Approval,
    delete: Approval,
    suffixes: Option<&'static [&'static str]>,
    max: Option<u64>,
    protect: &'static [&'static str],
    hidden: &'static [&'static str],
}

const BASE: Z = Z {
    name: "",
    access: Access::Rw,
    write: Approval::PreApproved,
    delete: Approval::PreApproved,
    suffixes: None,
    max: None,
    protect: &[],
    hidden: &[],
};

fn compile(z: Z) -> ZoneRules {
    ZoneRules::compile(&Zone {
        name: z.name.into(),
        backing: PathBuf::from("/nonexistent"),
        policy: ZonePolicy {
            access: z.access,
            approval: ApprovalPolicy {
                write: z.write,
                delete: z.delete,
                read: Approval::PreApproved,
            },
            suffixes: z
                .suffixes
                .map(|s| s.iter().map(|x| x.to_string()).collect()),
            max_file_bytes: z.max,
            protect: z.protect.iter().map(|x| x.to_string()).collect(),
            hidden: z.hidden.iter().map(PathBuf::from).collect(),
            hide: vec![],
            ask_read: vec![],
            staged: false,
        },
    })
    .unwrap()
}

/// data ro, workspace rw, final rw+ask with suffixes, home rw with
/// hidden roots and a protected .git, lim rw with a size limit, arch
/// rw with everything blocked.
fn table() -> Vec<ZoneRules> {
    vec![
        compile(Z {
            name: "data",
            access: Access::Ro,
            ..BASE
        }),
        compile(Z {
            name: "workspace",
            ..BASE
        }),
        compile(Z {
            name: "final",
            write: Approval::Ask,
            delete: Approval::Blocked,
            suffixes: Some(&[".md", ".pdf"]),
            ..BASE
        }),
        compile(Z {
            name: "home",
            protect: &[".git", "/docs/final"],
            hidden: &[".ssh", ".config/gh"],
            ..BASE
        }),
        compile(Z {
            name: "lim",
            max: Some(10),
            ..BASE
        }),
        compile(Z {
            name: "arch",
            write: Approval::Blocked,
            delete: Approval::Blocked,
            ..BASE
        }),
    ]
}

fn at<'a>(t: &'a [ZoneRules], zone: &str, p: &'a str) -> Loc<'a> {
    let z = t.iter().find(|z| z.name == zone).unwrap();
    Loc::in_zone(z, Path::new(p))
}

/// Decide `op` and explain it; the decision must be a refusal `want`.
fn refusal_message(t: &[ZoneRules], op: Op<'_>, want: Refusal) -> String {
    let d = super::super::decide(&op);
    assert_eq!(d, Decision::Refuse(want), "{op:?}");
    let e = explain_decision(&Subject::of(&op), &d, t);
    assert!(e.message.contains(&e.reason), "{e:?}");
    assert!(!e.message.contains('\n'), "one line: {e:?}");
    e.message
}

#[test]
fn read_only_names_the_writable_zones() {
    let t = table();
    let m = refusal_message(
        &t,
        Op::NewName {
            at: at(&t, "data", "new.txt"),
            is_dir: false,
        },
        Refusal::ReadOnly,
    );
    assert_eq!(
        m,
        "Cannot create '/data/new.txt': /data is read-only. Writable: /workspace, \
         /final (asks for approval; only names ending in .md or .pdf), /home, /lim."
    );
    let m = refusal_message(
        &t,
        Op::WriteContent {
            at: at(&t, "data", "new.txt"),
            new_size: None,
        },
        Refusal::ReadOnly,
    );
    assert!(
        m.starts_with("Cannot write '/data/new.txt': /data is read-only. Writable: /workspace, /final (asks for approval"),
        "{m}"
    );
    // No writable zone at all.
    let only = vec![compile(Z {
        name: "data",
        access: Access::Ro,
        ..BASE
    })];
    let op = remove(Loc::in_zone(&only[0], Path::new("x")));
    let e = explain(&Subject::of(&op), Refusal::ReadOnly, &only);
    assert!(
        e.message
            .ends_with("/data is read-only. No zone of this mount is writable."),
        "{e:?}"
    );
}

#[test]
fn sensitive_and_hidden_say_it_appears_absent() {
    let t = table();
    let m = refusal_message(
        &t,
        Op::Read {
            at: at(&t, "home", ".ssh/id_rsa"),
            size: 3,
        },
        Refusal::Sensitive,
    );
    assert!(
        m.starts_with(
            "Cannot read '/home/.ssh/id_rsa': /home/.ssh holds credentials and is hidden"
        ),
        "{m}"
    );
    assert!(m.contains("--allow-sensitive-roots"), "{m}");
    let m = refusal_message(
        &t,
        Op::NewName {
            at: at(&t, "home", ".config/gh"),
            is_dir: true,
        },
        Refusal::Sensitive,
    );
    assert!(m.contains("/home/.config/gh holds credentials"), "{m}");
    // A lookup of a name outside the suffixes.
    let s = Subject::new(Action::Access, at(&t, "final", "notes.txt"));
    let e = explain(&s, Refusal::Hidden, &t);
    assert_eq!(
        e.message,
        "Cannot access '/final/notes.txt': /final shows only files with names ending in .md \
         or .pdf, so 'notes.txt' is not visible (it appears not to exist). Directories are \
         visible whatever their names."
    );
}

#[test]
fn sensitive_inside_and_protected_renames() {
    let t = table();
    let m = refusal_message(
        &t,
        Op::Rename {
            from: at(&t, "home", ".config"),
            to: at(&t, "home", "cfg"),
            is_dir: true,
            to_is_dir: None,
            exchange: false,
        },
        Refusal::SensitiveInside,
    );
    assert!(
        m.starts_with("Cannot rename '/home/.config' to '/home/cfg': it holds /home/.config/gh"),
        "{m}"
    );
    let m = refusal_message(
        &t,
        Op::NewName {
            at: at(&t, "home", "src/.git/objects/x"),
            is_dir: false,
        },
        Refusal::Protected,
    );
    assert_eq!(
        m,
        "Cannot create '/home/src/.git/objects/x': /home/src/.git is protected (read-only) \
         in /home by the pattern '.git'. Paths of /home that no protect pattern \
         covers are writable."
    );
    let m = refusal_message(
        &t,
        Op::Rename {
            from: at(&t, "home", "docs"),
            to: at(&t, "home", "d2"),
            is_dir: true,
            to_is_dir: None,
            exchange: false,
        },
        Refusal::Protected,
    );
    assert!(
        m.contains("it holds a protected (read-only) path of /home, '/docs/final'"),
        "{m}"
    );
}

#[test]
fn root_cross_zone_suffix_size_blocked() {
    let t = table();
    let m = refusal_message(
        &t,
        Op::NewName {
            at: Loc {
                zone: None,
                path: Path::new("new"),
            },
            is_dir: true,
        },
        Refusal::RootLevel,
    );
    assert!(
        m.starts_with("Cannot create '/new': the mount's root"),
        "{m}"
    );
    assert!(
        m.contains("Work inside a zone: /data (read-only), /workspace (writable), /final (writable; asks for approval; only names ending in .md or .pdf)"),
        "{m}"
    );
    assert!(m.contains("/arch (writes blocked)"), "{m}");
    let m = refusal_message(
        &t,
        Op::Rename {
            from: at(&t, "workspace", "a"),
            to: at(&t, "lim", "a"),
            is_dir: false,
            to_is_dir: None,
            exchange: false,
        },
        Refusal::CrossZone,
    );
    assert_eq!(
        m,
        "Cannot rename '/workspace/a' to '/lim/a': renames and links cannot cross zones \
         (/workspace and /lim). Copy it, then delete the original (mv does this by itself)."
    );
    let m = refusal_message(
        &t,
        Op::NewName {
            at: at(&t, "final", "a.txt"),
            is_dir: false,
        },
        Refusal::Suffix,
    );
    assert_eq!(
        m,
        "Cannot create '/final/a.txt': /final accepts only file names ending in .md or .pdf. \
         Use such a name; directories may have any name."
    );
    let m = refusal_message(
        &t,
        Op::Read {
            at: at(&t, "lim", "big"),
            size: 11,
        },
        Refusal::TooBig,
    );
    assert_eq!(
        m,
        "Cannot read '/lim/big': the file (11 bytes) is larger than /lim's limit of 10 bytes \
         (max_file_bytes). Keep files in /lim at or under 10 bytes."
    );
    let m = refusal_message(
        &t,
        Op::WriteContent {
            at: at(&t, "lim", "f"),
            new_size: Some(20),
        },
        Refusal::TooBig,
    );
    assert!(m.contains("may not grow past 10 bytes"), "{m}");
    let m = refusal_message(
        &t,
        Op::NewName {
            at: at(&t, "arch", "f"),
            is_dir: false,
        },
        Refusal::Blocked,
    );
    assert!(
        m.starts_with(
            "Cannot create '/arch/f': /arch's write policy is 'blocked'. Writable: /workspace"
        ),
        "{m}"
    );
    let m = refusal_message(&t, remove(at(&t, "final", "a.md")), Refusal::Blocked);
    assert!(
        m.starts_with("Cannot delete '/final/a.md': /final's delete policy is 'blocked'. Deleting is allowed in: /workspace, /home, /lim."),
        "{m}"
    );
}

#[test]
fn denied_and_not_allowed() {
    let t = table();
    let s = Subject::new(Action::Write, at(&t, "final", "a.md"));
    let e = explain(&s, Refusal::Denied, &t);
    assert!(e.message.contains("denied again at once"), "{e:?}");
    assert!(
        e.message.contains("Writable: /workspace, /home, /lim."),
        "{e:?}"
    );
    let e = explain(&s, Refusal::NotAllowed, &t);
    assert!(e.message.contains("--allow-uid"), "{e:?}");
    // Nowhere else to go.
    let one = vec![compile(Z {
        name: "only",
        delete: Approval::Ask,
        ..BASE
    })];
    let s = Subject::new(Action::Delete, Loc::in_zone(&one[0], Path::new("f")));
    let e = explain(&s, Refusal::Denied, &one);
    assert!(
        e.message
            .ends_with("No other zone of this mount allows deleting."),
        "{e:?}"
    );
}

#[test]
fn allow_and_ask_are_explained_too() {
    let t = table();
    let op = Op::NewName {
        at: at(&t, "final", "r.md"),
        is_dir: false,
    };
    let d = super::super::decide(&op);
    let e = explain_decision(&Subject::of(&op), &d, &t);
    assert_eq!(e.reason, "/final's write policy is 'ask'");
    assert!(
        e.message.starts_with("Would ask to create '/final/r.md'"),
        "{e:?}"
    );
    let op = Op::WriteContent {
        at: at(&t, "lim", "f"),
        new_size: None,
    };
    let e = explain_decision(&Subject::of(&op), &Decision::Allow, &t);
    assert_eq!(
        e.message,
        "Can write '/lim/f': /lim is writable and its write policy is 'preApproved'. Writes \
         that would make a file larger than 10 bytes fail with EFBIG."
    );
    let op = Op::Read {
        at: at(&t, "data", "x"),
        size: 1,
    };
    let e = explain_decision(&Subject::of(&op), &Decision::Allow, &t);
    assert_eq!(e.message, "Can read '/data/x': reading is allowed.");
}

#[test]
fn every_refusal_has_a_message() {
    let t = table();
    let all = [
        Refusal::Sensitive,
        Refusal::Hidden,
        Refusal::RootLevel,
        Refusal::CrossZone,
        Refusal::ReadOnly,
        Refusal::Protected,
        Refusal::SensitiveInside,
        Refusal::Suffix,
        Refusal::TooBig,
        Refusal::Blocked,
        Refusal::Denied,
        Refusal::NotAllowed,
    ];
    for r in all {
        for s in [
            Subject::new(Action::Write, at(&t, "home", "x")),
            Subject::new(Action::Create, Loc::root()),
        ] {
            let e = explain(&s, r, &t);
            assert!(e.message.starts_with("Cannot "), "{r:?}: {e:?}");
            assert!(e.message.ends_with('.'), "{r:?}: {e:?}");
            assert!(!e.reason.is_empty() && !e.reason.contains('\n'), "{r:?}");
        }
    }
}

#[test]
fn a_staged_zone_says_the_commit_decides() {
    let mut z = compile(Z {
        name: "st",
        write: Approval::Ask,
        delete: Approval::Blocked,
        ..BASE
    });
    z.staged = true;
    let t = vec![z];
    let op = Op::WriteContent {
        at: at(&t, "st", "f"),
        new_size: None,
    };
    let d = super::super::decide(&op);
    assert_eq!(d, Decision::Allow);
    let e = explain_decision(&Subject::of(&op), &d, &t);
    assert_eq!(
        e.reason,
        "/st is staged: the change goes to its stage, and the host's files change only when \
         the supervisor commits it (the commit is the decision; the write policy is 'ask')"
    );
    let op = remove(at(&t, "st", "f"));
    let d = super::super::decide(&op);
    assert!(matches!(d, Decision::Refuse(Refusal::Blocked)), "{d:?}");
}

/// A worker's name holds ESC, CR, a bidi override and a byte that is not
/// UTF-8: every explanation (check, status, the ledger) and the line of
/// the refusal log the worker reads show it escaped, never raw.
#[test]
fn names_in_explanations_are_escaped() {
    use std::os::unix::ffi::OsStrExt;
    let t = table();
    let name = std::ffi::OsStr::from_bytes(b"a\x1b[2K\r\xe2\x80\xae\xffb.txt");
    let op = Op::NewName {
        at: Loc::in_zone(&t[0], Path::new(name)),
        is_dir: false,
    };
    let m = refusal_message(&t, op, Refusal::ReadOnly);
    assert!(
        m.starts_with("Cannot create '/data/a\\x1b[2K\\r\\u{202e}\\xffb.txt': "),
        "{m}"
    );
    let line =
        for_worker(&Subject::of(&op), Refusal::ReadOnly, &t, Path::new("/m")).unwrap_or_default();
    assert!(
        line.contains("/m/data/a\\x1b[2K\\r\\u{202e}\\xffb.txt"),
        "{line}"
    );
    for text in [&m, &line] {
        assert!(
            !text
                .chars()
                .any(|c| crate::text::unsafe_for_terminal(c) || c == '\u{fffd}'),
            "{text:?}"
        );
    }
}

//! The plain rw zones' change report through the core: what each gate
//! expects travels with its request and is recorded only when the request
//! is done and succeeds (at once, after an allow, or for a create made
//! while its approval was pending); never for a refusal, a denial or an
//! action that fails.

use super::*;
use crate::fs::changes::Kind;

/// Zone `work` (preApproved) and zone `asked` (writes and deletes ask)
/// over fresh dirs, with `broker`.
fn two_zones(broker: Arc<dyn Broker>) -> (tempfile::TempDir, Arc<Core>) {
    let tmp = tempfile::tempdir().unwrap();
    let (work, asked) = (tmp.path().join("work"), tmp.path().join("asked"));
    for d in [&work, &asked] {
        std::fs::create_dir(d).unwrap();
    }
    std::fs::write(work.join("f"), "old").unwrap();
    std::fs::write(work.join("x"), "x").unwrap();
    std::fs::write(work.join("gone"), "bye").unwrap();
    std::fs::create_dir(work.join("full")).unwrap();
    std::fs::write(work.join("full/in"), "in").unwrap();
    let mut ask = zone("asked", &asked, Access::Rw);
    ask.policy.approval = ApprovalPolicy {
        write: Approval::Ask,
        delete: Approval::Ask,
        read: Approval::PreApproved,
    };
    let table = ZoneTable {
        mode: SandboxMode::Direct,
        zones: vec![zone("work", &work, Access::Rw), ask],
        source: None,
        max_checkpoints: None,
    };
    (tmp, core_with(&table, broker))
}

/// Zone `zone`'s report as (path, kind).
fn report(c: &Core, zone: &str) -> Vec<(String, Kind)> {
    let (list, truncated) = c.changelog().changes(zone, &[]);
    assert!(!truncated);
    list.into_iter()
        .map(|ch| (ch.path.to_string_lossy().into_owned(), ch.kind))
        .collect()
}

const ASKED: u64 = 3;

#[test]
fn what_succeeds_is_recorded_and_nothing_else() {
    let (_tmp, c) = two_zones(Arc::new(AllowAll::default()));
    create(&c, WORK, "a", libc::O_WRONLY).unwrap();
    mkdir(&c, WORK, "d").unwrap();
    let f = found(&c, WORK, "f").unwrap().ino.0;
    let set = SetAttr {
        size: Some(1),
        mode: Some(0o600),
        ..SetAttr::default()
    };
    setattr(&c, f, set).unwrap();
    rename(&c, WORK, "x", WORK, "y").unwrap();
    remove(&c, WORK, "gone", false).unwrap();
    // Allowed by the policy, failed by the backing dir: no change.
    found(&c, WORK, "full").unwrap();
    assert_eq!(
        remove(&c, WORK, "full", true).unwrap_err(),
        FsError::Os(libc::ENOTEMPTY)
    );
    // Refused by the policy (no zone at the root): no change.
    assert!(mkdir(&c, ROOT, "no").is_err());
    assert_eq!(
        report(&c, "work"),
        [
            ("a".into(), Kind::Added),
            ("d".into(), Kind::Added),
            ("f".into(), Kind::Modified),
            ("gone".into(), Kind::Deleted),
            ("x".into(), Kind::Deleted),
            ("y".into(), Kind::Added),
        ]
    );
    // Asked and allowed: a mkdir, and a create made while it was asked.
    mkdir(&c, ASKED, "m").unwrap();
    create(&c, ASKED, "c", libc::O_WRONLY).unwrap();
    assert_eq!(
        report(&c, "asked"),
        [("c".into(), Kind::Added), ("m".into(), Kind::Added)]
    );
}

#[test]
fn what_is_denied_is_not_recorded() {
    let (_tmp, c) = two_zones(Arc::new(DenyAll));
    assert!(mkdir(&c, ASKED, "m").is_err());
    assert!(create(&c, ASKED, "c", libc::O_WRONLY).is_err());
    assert_eq!(report(&c, "asked"), []);
    // The same core records what needs no asking.
    mkdir(&c, WORK, "d").unwrap();
    assert_eq!(report(&c, "work"), [("d".into(), Kind::Added)]);
}

//! Refusals: root-level changes, ro zones and cross-zone moves, device
//! nodes, `ask` handed to the broker (its verdict final), and the bounded,
//! explained record of recent refusals.

use super::*;

#[test]
pub(super) fn root_level_changes_are_refused() {
    let f = fixture();
    assert_eq!(
        refusal(mkdir(&f.core, ROOT, "z").unwrap_err()),
        Refusal::RootLevel
    );
    assert_eq!(
        refusal(remove(&f.core, ROOT, "work", true).unwrap_err()),
        Refusal::RootLevel
    );
    let e = rename(&f.core, ROOT, "work", ROOT, "w2").unwrap_err();
    assert_eq!(refusal(e), Refusal::RootLevel);
    let chmod = SetAttr {
        mode: Some(0o777),
        ..SetAttr::default()
    };
    assert_eq!(
        refusal(setattr(&f.core, ROOT, chmod).unwrap_err()),
        Refusal::RootLevel
    );
    // even if the gate let it through, the action itself refuses
    let dir = f.core.node(ROOT).unwrap();
    let made = f
        .core
        .make_entry(&CTX.caller(), &dir, OsStr::new("z"), |_| Ok(()));
    assert_eq!(refusal(made.unwrap_err()), Refusal::RootLevel);
    assert_eq!(f.core.recent_refusals().len(), 4, "each refusal kept once");
}

#[test]
pub(super) fn ro_zone_and_cross_zone() {
    let f = fixture();
    let r = found(&f.core, DATA, "r.txt").unwrap().ino.0;
    assert_eq!(
        refusal(open(&f.core, r, libc::O_WRONLY).unwrap_err()),
        Refusal::ReadOnly
    );
    let (fh, _) = open(&f.core, r, libc::O_RDONLY).unwrap();
    assert_eq!(read(&f.core, fh, 0, 100).unwrap(), b"read me");
    f.core.release(fh);
    assert_eq!(
        refusal(link(&f.core, r, WORK, "l").unwrap_err()),
        Refusal::CrossZone
    );
    let e = rename(&f.core, DATA, "r.txt", WORK, "r").unwrap_err();
    assert_eq!(refusal(e), Refusal::CrossZone);
    assert!(!f.rw.join("l").exists());
    assert!(!f.rw.join("r").exists());
}

#[test]
pub(super) fn refusals_are_kept_explained_and_bounded() {
    let f = fixture();
    let c = &f.core;
    assert!(c.recent_refusals().is_empty());
    let e = create(c, DATA, "new.txt", libc::O_WRONLY).unwrap_err();
    assert_eq!(refusal(e), Refusal::ReadOnly);
    let recent = c.recent_refusals();
    assert_eq!(recent.len(), 1);
    let r = &recent[0];
    assert_eq!(r.path, Path::new("/data/new.txt"));
    assert_eq!(r.errno, "EROFS");
    assert_eq!(r.reason, "/data is read-only");
    assert_eq!(
        r.message,
        "Cannot create '/data/new.txt': /data is read-only. Writable: /work."
    );
    for i in 0..(crate::fs::core::RECENT_REFUSALS + 5) {
        mkdir(c, ROOT, &format!("n{i}")).unwrap_err();
    }
    let recent = c.recent_refusals();
    assert_eq!(recent.len(), crate::fs::core::RECENT_REFUSALS);
    let last = recent.last().unwrap();
    assert_eq!(
        last.path,
        std::path::PathBuf::from(format!("/n{}", crate::fs::core::RECENT_REFUSALS + 4))
    );
    assert_eq!(last.errno, "EACCES");
}

/// An `ask` goes to the broker once per operation; a denial is EACCES,
/// kept explained, and nothing is done; an allow acts.
#[test]
pub(super) fn asks_go_to_the_broker_and_its_verdict_is_final() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("w");
    std::fs::create_dir_all(dir.join("a")).unwrap();
    std::fs::write(dir.join("a/b"), "x").unwrap();
    let mut z = zone("work", &dir, Access::Rw);
    z.policy.approval = ApprovalPolicy {
        write: Approval::Ask,
        delete: Approval::Ask,
        read: Approval::PreApproved,
    };
    let table = ZoneTable {
        mode: SandboxMode::Direct,
        zones: vec![z],
        source: None,
        max_checkpoints: None,
    };
    let c = core_of(&table);
    let a = found(&c, WORK, "a").unwrap().ino.0;
    let e = remove(&c, a, "b", false).unwrap_err();
    assert_eq!(refusal(e), Refusal::Denied);
    assert!(dir.join("a/b").exists(), "nothing done on a denial");
    let last = c.recent_refusals().pop().unwrap();
    assert_eq!(last.path, Path::new("/work/a/b"));
    assert!(
        last.message
            .starts_with("Cannot delete '/work/a/b': approval was asked for and denied"),
        "{}",
        last.message
    );
    let broker = Arc::new(AllowAll::default());
    let c = core_with(&table, broker.clone());
    let a = found(&c, WORK, "a").unwrap().ino.0;
    remove(&c, a, "b", false).unwrap();
    assert!(!dir.join("a/b").exists(), "allowed: done");
    mkdir(&c, a, "d").unwrap();
    assert!(dir.join("a/d").is_dir());
    assert_eq!(broker.0.load(Ordering::Relaxed), 2, "one ask per operation");
    assert!(c.recent_refusals().is_empty());
}

#[test]
pub(super) fn device_nodes_are_refused_explained_before_any_approval() {
    let f = fixture();
    let e = mknod(&f.core, WORK, "null", libc::S_IFCHR | 0o644).unwrap_err();
    assert_eq!(refusal(e), Refusal::Device);
    assert_eq!(Refusal::Device.errno(), libc::EPERM);
    assert!(!f.rw.join("null").exists());
    let last = f.core.recent_refusals().pop().unwrap();
    assert_eq!(last.errno, "EPERM");
    assert!(last.message.contains("device nodes"), "{}", last.message);
    // A FIFO is an ordinary new name.
    let fifo = mknod(&f.core, WORK, "fifo", libc::S_IFIFO | 0o644).unwrap();
    assert_eq!(fifo.attr.kind, crate::fuse::FileType::NamedPipe);
    // In a ro zone, EROFS answers first.
    let e = mknod(&f.core, DATA, "null", libc::S_IFCHR | 0o644).unwrap_err();
    assert_eq!(refusal(e), Refusal::ReadOnly);
    // In an `ask` zone, nobody is asked about a device node.
    let broker = Arc::new(AllowAll::default());
    let mut z = zone("work", &f.rw, Access::Rw);
    z.policy.approval.write = Approval::Ask;
    let table = ZoneTable {
        mode: SandboxMode::Direct,
        zones: vec![z],
        source: None,
        max_checkpoints: None,
    };
    let c = core_with(&table, broker.clone());
    let e = mknod(&c, WORK, "null", libc::S_IFBLK | 0o644).unwrap_err();
    assert_eq!(refusal(e), Refusal::Device);
    assert_eq!(broker.0.load(Ordering::Relaxed), 0);
}

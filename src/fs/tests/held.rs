//! Asks that the kernel would wait for holding a directory's lock, with
//! the real broker and no kernel: a create made at once with its write
//! held, a mkdir told to retry, interrupts.

use super::*;
use crate::approval::{Approvals, Decision, Scope, Settings};

fn asking() -> (tempfile::TempDir, std::path::PathBuf, Approvals, Arc<Core>) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("w");
    std::fs::create_dir_all(&dir).unwrap();
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
    let b = Approvals::new(
        Settings {
            mountpoint: "/m".into(),
            timeout: Duration::from_secs(60),
            no_approvals: false,
            owner_uid: 0,
        },
        None,
    );
    let c = core_with(&table, Arc::new(b.clone()));
    (tmp, dir, b, c)
}

/// This process's call number `unique`.
fn call(unique: u64) -> Ctx {
    Ctx {
        unique,
        pid: std::process::id(),
        ..CTX
    }
}

/// A write of `data` through `fh` as call `unique`, held or not; its
/// answer arrives on the receiver.
fn write(
    c: &Arc<Core>,
    fh: u64,
    unique: u64,
    data: &'static [u8],
) -> mpsc::Receiver<FsResult<u32>> {
    let (tx, rx) = mpsc::channel();
    let respond = move |r| tx.send(r).unwrap();
    match c.held(fh) {
        Some(h) => c.after_held(h, &call(unique), respond, move |c| {
            c.write(fh, 0, data, false)
        }),
        None => respond(c.write(fh, 0, data, false)),
    }
    rx
}

fn create_at_once(c: &Arc<Core>, name: &str) -> u64 {
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC;
    let (r, registered) =
        opening(|reply| c.create(call(2), WORK, OsStr::new(name), 0o644, flags, reply));
    let created: crate::fs::core::Created = r.unwrap();
    assert!(
        created.open.held && !registered,
        "its data goes through the daemon"
    );
    created.open.fh
}

fn waits<T>(rx: &mpsc::Receiver<T>) -> bool {
    rx.recv_timeout(Duration::from_millis(100)).is_err()
}

fn got<T>(rx: &mpsc::Receiver<T>) -> T {
    rx.recv_timeout(Duration::from_secs(10)).expect("answered")
}

#[test]
fn a_create_is_made_at_once_and_its_write_waits_for_the_allow() {
    let (_tmp, dir, b, c) = asking();
    let fh = create_at_once(&c, "f");
    assert_eq!(std::fs::read(dir.join("f")).unwrap(), b"", "made, empty");
    let w = write(&c, fh, 4, b"data");
    assert!(waits(&w));
    assert_eq!(std::fs::read(dir.join("f")).unwrap(), b"");
    let p = b.pending();
    assert_eq!((p.len(), p[0].op.as_str()), (1, "test"));
    b.decide(p[0].id, Decision::Allow(Scope::Once), 0).unwrap();
    assert_eq!(got(&w), Ok(4));
    assert_eq!(std::fs::read(dir.join("f")).unwrap(), b"data");
    assert!(c.held(fh).is_none(), "allowed: a handle like any other");
    assert_eq!(got(&write(&c, fh, 6, b"more")), Ok(4));
}

/// A call held on a file whose create is pending holds the file's lock in
/// the kernel, and an unlink or rename of the file would wait for it
/// holding its directory's: the kernel keeps no entry of the file (TTL
/// 0), so it looks the name up first; a lookup by a thread that then
/// sleeps in the kernel, or one the daemon can't see, lets the held call
/// go, told to retry. The request stays pending. (The sleeping thread is
/// tested through a real mount: `tests/ask_lock.rs`.)
#[test]
fn a_lookup_of_a_pending_file_lets_its_held_write_go_with_eagain() {
    let (_tmp, dir, b, c) = asking();
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC;
    let (r, _) = opening(|reply| c.create(call(2), WORK, OsStr::new("f"), 0o644, flags, reply));
    let created: crate::fs::core::Created = r.unwrap();
    assert_eq!(created.entry.ttl, Duration::ZERO, "no entry kept");
    let fh = created.open.fh;
    let id = b.pending()[0].id;
    let w = write(&c, fh, 4, b"data");
    assert!(waits(&w));
    // This thread looks it up and goes on (a stat): the write waits on.
    let e = c.lookup(&call(5), WORK, OsStr::new("f")).unwrap();
    assert_eq!(e.ttl, Duration::ZERO, "still none while pending");
    assert!(
        w.recv_timeout(Duration::from_millis(400)).is_err(),
        "longer than the watch"
    );
    // A thread the daemon can't see (pid 0): at once.
    let unseen = Ctx { pid: 0, ..call(7) };
    c.lookup(&unseen, WORK, OsStr::new("f")).unwrap();
    let e = got(&w).unwrap_err();
    assert_eq!(e, FsError::Refused(Refusal::Awaiting(id)));
    assert_eq!(e.errno(), libc::EAGAIN);
    let p = b.pending();
    assert_eq!(
        (p.len(), p[0].id, p[0].retry),
        (1, id, true),
        "still pending"
    );
    // A listing does not let calls go (no lock-taking call follows it).
    let w = write(&c, fh, 6, b"data");
    assert!(waits(&w));
    let h = c.opendir(&call(9), WORK).unwrap();
    let mut listed = Vec::new();
    c.readdirplus(&unseen, WORK, h, 0, |it, _| {
        listed.push(it.name.clone());
        false
    })
    .unwrap();
    c.releasedir(h);
    assert!(listed.iter().any(|n| n == "f"), "{listed:?}");
    assert!(waits(&w), "a listing lets nothing go");
    b.decide(id, Decision::Allow(Scope::Once), 0).unwrap();
    assert_eq!(got(&w), Ok(4));
    assert_eq!(std::fs::read(dir.join("f")).unwrap(), b"data");
    let e = c.lookup(&call(8), WORK, OsStr::new("f")).unwrap();
    assert!(e.ttl > Duration::ZERO, "allowed: kept as any other");
}

#[test]
fn a_denied_create_fails_its_write_and_leaves_no_file() {
    let (_tmp, dir, b, c) = asking();
    let fh = create_at_once(&c, "f");
    let w = write(&c, fh, 4, b"data");
    assert!(waits(&w));
    b.decide(b.pending()[0].id, Decision::Deny, 0).unwrap();
    assert_eq!(got(&w), Err(FsError::Refused(Refusal::Denied)));
    assert!(!dir.join("f").exists());
    // Later calls on the handle are refused at once.
    assert_eq!(
        got(&write(&c, fh, 6, b"x")),
        Err(FsError::Refused(Refusal::Denied))
    );
}

#[test]
fn an_interrupted_write_then_its_release_withdraw_the_create() {
    let (_tmp, dir, b, c) = asking();
    let fh = create_at_once(&c, "f");
    let w = write(&c, fh, 4, b"data");
    assert!(waits(&w));
    c.interrupt(4);
    assert_eq!(got(&w), Err(FsError::Os(libc::EINTR)));
    assert_eq!(b.pending().len(), 1, "the create still waits");
    c.release(fh);
    assert!(b.pending().is_empty(), "withdrawn with its handle");
    assert!(!dir.join("f").exists());
    assert_eq!(b.counters().withdrawn.load(Ordering::Relaxed), 1);
}

/// Told to retry by a lookup, then an interrupted retry and the file's
/// close: the request is withdrawn though a retry could have joined it.
#[test]
fn a_write_told_to_retry_then_an_interrupted_one_withdraw_the_create_on_release() {
    let (_tmp, dir, b, c) = asking();
    let fh = create_at_once(&c, "f");
    let w = write(&c, fh, 4, b"data");
    assert!(waits(&w));
    c.lookup(&Ctx { pid: 0, ..call(5) }, WORK, OsStr::new("f"))
        .unwrap();
    assert!(matches!(
        got(&w),
        Err(FsError::Refused(Refusal::Awaiting(_)))
    ));
    let w = write(&c, fh, 6, b"data");
    assert!(waits(&w));
    c.interrupt(6);
    assert_eq!(got(&w), Err(FsError::Os(libc::EINTR)));
    c.release(fh);
    assert!(b.pending().is_empty(), "withdrawn with its handle");
    assert!(!dir.join("f").exists());
}

#[test]
fn an_interrupt_that_comes_first_is_applied_when_the_call_waits() {
    let (_tmp, dir, b, c) = asking();
    std::fs::write(dir.join("e"), "e").unwrap();
    let e = found(&c, WORK, "e").unwrap().ino.0;
    c.interrupt(8);
    let (r, _) = opening(|reply| c.open(call(8), e, libc::O_WRONLY, reply));
    assert_eq!(r.unwrap_err(), FsError::Os(libc::EINTR));
    assert!(b.pending().is_empty());
}

#[test]
fn a_mkdir_is_told_to_retry_and_its_retry_gets_the_allow() {
    let (_tmp, dir, b, c) = asking();
    let e = mkdir(&c, WORK, "d").unwrap_err();
    let id = b.pending()[0].id;
    assert_eq!(e, FsError::Refused(Refusal::Awaiting(id)));
    assert_eq!(e.errno(), libc::EAGAIN);
    assert!(!dir.join("d").exists());
    assert!(b.pending()[0].retry);
    b.decide(id, Decision::Allow(Scope::Once), 0).unwrap();
    mkdir(&c, WORK, "d").unwrap();
    assert!(dir.join("d").is_dir());
    assert!(b.pending().is_empty());
}

/// A call whose transport can't let it wait (an io_uring queue all but
/// full of waiting calls: `fuse::uring::QUEUE_KEPT`) is refused at once
/// where it would wait for a decision, and let through where an earlier
/// decision covers it; nothing of it stays pending.
#[test]
fn a_call_that_may_not_wait_is_refused_at_once_unless_a_decision_covers_it() {
    let (_tmp, dir, b, c) = asking();
    let unheld = |unique| Ctx {
        may_wait: false,
        ..call(unique)
    };
    // An ask that would wait (told to retry after a moment, here).
    let e = answer(|r| c.mkdir(unheld(3), WORK, OsStr::new("d"), 0o755, r)).unwrap_err();
    assert_eq!(e, FsError::Refused(Refusal::Denied));
    assert!(b.pending().is_empty(), "{:?}", b.pending());
    assert!(!dir.join("d").exists());
    // A write held on a create that waits for its decision.
    let fh = create_at_once(&c, "f");
    let (tx, rx) = mpsc::channel();
    let held = c.held(fh).expect("held");
    c.after_held(
        held,
        &unheld(4),
        move |r| tx.send(r).unwrap(),
        move |c| c.write(fh, 0, b"x", false),
    );
    assert_eq!(got(&rx), Err(FsError::Refused(Refusal::Denied)));
    assert_eq!(b.pending().len(), 1, "the create's own request waits on");
    // Covered by an earlier decision: let through.
    let id = b.pending()[0].id;
    b.decide(id, Decision::Allow(Scope::Zone), 0).unwrap();
    answer(|r| c.mkdir(unheld(5), WORK, OsStr::new("d"), 0o755, r)).unwrap();
    assert!(dir.join("d").is_dir());
}

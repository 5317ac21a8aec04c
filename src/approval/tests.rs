//! Broker tests without the kernel: continuations capture their verdicts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use super::*;
use crate::policy::{AskItem, Class};

fn broker(timeout: Duration) -> Approvals {
    Approvals::new(
        Settings {
            mountpoint: "/m".into(),
            timeout,
            no_approvals: false,
            // The uid the tests ask as (`ask_as`).
            owner_uid: 1000,
        },
        None,
    )
}

fn item(class: Class, path: &str) -> AskItem {
    AskItem {
        class,
        zone: "final".into(),
        path: PathBuf::from(path),
    }
}

fn ask_as(b: &Approvals, pid: u32, items: Vec<AskItem>) -> mpsc::Receiver<Verdict> {
    let (tx, rx) = mpsc::channel();
    b.ask(
        AskRequest {
            items,
            op: "create",
            target: None,
            source: None,
            pid,
            uid: 1000,
            unique: 0,
            wait: Wait::Decision,
        },
        Box::new(move |v| {
            let _ = tx.send(v);
        }),
    );
    rx
}

/// An ask of `write` on `path` by uid `uid`.
fn ask_by(b: &Approvals, uid: u32, path: &str) -> mpsc::Receiver<Verdict> {
    let (tx, rx) = mpsc::channel();
    b.ask(
        AskRequest {
            items: vec![item(Class::Write, path)],
            op: "create",
            target: None,
            source: None,
            pid: std::process::id(),
            uid,
            unique: 0,
            wait: Wait::Decision,
        },
        Box::new(move |v| {
            let _ = tx.send(v);
        }),
    );
    rx
}

fn ask(b: &Approvals, class: Class, path: &str) -> mpsc::Receiver<Verdict> {
    ask_as(b, std::process::id(), vec![item(class, path)])
}

fn got(rx: &mpsc::Receiver<Verdict>) -> Option<Verdict> {
    rx.recv_timeout(Duration::from_secs(5)).ok()
}

fn waiting(rx: &mpsc::Receiver<Verdict>) -> bool {
    rx.recv_timeout(Duration::from_millis(50)).is_err()
}

fn only_pending(b: &Approvals) -> u64 {
    let p = b.pending();
    assert_eq!(p.len(), 1, "{p:?}");
    p[0].id
}

#[test]
fn allow_once_answers_that_request_only() {
    let b = broker(Duration::from_secs(60));
    let rx = ask(&b, Class::Write, "a.md");
    assert!(waiting(&rx));
    let id = only_pending(&b);
    let info = &b.pending()[0];
    assert_eq!(info.path, "/final/a.md");
    assert_eq!(info.pid, std::process::id());
    assert!(!info.cmdline.is_empty());
    b.decide(id, Decision::Allow(Scope::Once), 0).unwrap();
    assert_eq!(got(&rx), Some(Verdict::Allow));
    // Deciding again is a clear error.
    assert_eq!(
        b.decide(id, Decision::Deny, 0),
        Err(DecideError::NotPending(id))
    );
    // Once means once: the same write asks again.
    let rx = ask(&b, Class::Write, "a.md");
    assert!(waiting(&rx));
    assert_eq!(b.pending().len(), 1);
    b.shutdown("test over");
    assert_eq!(got(&rx), Some(Verdict::Deny));
}

#[test]
fn path_and_zone_scopes_last_for_the_mount() {
    let b = broker(Duration::from_secs(60));
    let rx = ask(&b, Class::Write, "a.md");
    b.decide(only_pending(&b), Decision::Allow(Scope::Path), 0)
        .unwrap();
    assert_eq!(got(&rx), Some(Verdict::Allow));
    // Same class and path: at once. Other path or class: asks.
    assert_eq!(got(&ask(&b, Class::Write, "a.md")), Some(Verdict::Allow));
    let other = ask(&b, Class::Write, "b.md");
    let delete = ask(&b, Class::Delete, "a.md");
    assert!(waiting(&other) && waiting(&delete));
    let id = b
        .pending()
        .iter()
        .find(|p| p.path == "/final/b.md")
        .unwrap()
        .id;
    b.decide(id, Decision::Allow(Scope::Zone), 0).unwrap();
    assert_eq!(got(&other), Some(Verdict::Allow));
    assert_eq!(got(&ask(&b, Class::Write, "x/y.md")), Some(Verdict::Allow));
    // The zone scope covers writes only: the delete still waits.
    assert!(waiting(&delete));
    assert_eq!(
        b.counters()
            .cached_allows
            .load(std::sync::atomic::Ordering::Relaxed),
        2
    );
    b.shutdown("test over");
    assert_eq!(got(&delete), Some(Verdict::Deny));
}

#[test]
fn a_denied_fingerprint_is_denied_at_once_afterwards() {
    let b = broker(Duration::from_secs(60));
    let rx = ask(&b, Class::Write, "a.md");
    let id = only_pending(&b);
    b.decide(id, Decision::Deny, 0).unwrap();
    assert_eq!(got(&rx), Some(Verdict::Deny));
    assert_eq!(got(&ask(&b, Class::Write, "a.md")), Some(Verdict::Deny));
    assert!(
        b.pending().is_empty(),
        "no new request for a denied fingerprint"
    );
    // Another class on the same path is another question.
    let rx = ask(&b, Class::Delete, "a.md");
    assert!(waiting(&rx));
    b.shutdown("test over");
}

#[test]
fn identical_requests_from_one_process_are_one_request() {
    let b = broker(Duration::from_secs(60));
    let me = std::process::id();
    let r1 = ask_as(&b, me, vec![item(Class::Write, "a.md")]);
    let r2 = ask_as(&b, me, vec![item(Class::Write, "a.md")]);
    assert_eq!(b.pending().len(), 1);
    // Another process asking the same is its own request.
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let r3 = ask_as(&b, child.id(), vec![item(Class::Write, "a.md")]);
    assert_eq!(b.pending().len(), 2);
    let mine = b.pending().iter().find(|p| p.pid == me).unwrap().id;
    b.decide(mine, Decision::Allow(Scope::Once), 0).unwrap();
    assert_eq!(got(&r1), Some(Verdict::Allow));
    assert_eq!(got(&r2), Some(Verdict::Allow));
    assert!(waiting(&r3));
    b.shutdown("test over");
    assert_eq!(got(&r3), Some(Verdict::Deny));
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn a_path_allow_settles_other_waiting_requests_it_covers() {
    let b = broker(Duration::from_secs(60));
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let mine = ask(&b, Class::Write, "a.md");
    let theirs = ask_as(&b, child.id(), vec![item(Class::Write, "a.md")]);
    let id = b.pending()[0].id;
    b.decide(id, Decision::Allow(Scope::Path), 0).unwrap();
    assert_eq!(got(&mine), Some(Verdict::Allow));
    assert_eq!(got(&theirs), Some(Verdict::Allow));
    assert!(b.pending().is_empty());
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn timeouts_deny_and_are_not_remembered() {
    let b = broker(Duration::from_millis(300));
    let rx = ask(&b, Class::Write, "a.md");
    assert_eq!(got(&rx), Some(Verdict::Deny));
    assert_eq!(
        b.counters()
            .timeouts
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    // A retry asks again.
    let rx = ask(&b, Class::Write, "a.md");
    assert!(waiting(&rx));
    assert_eq!(b.pending().len(), 1);
    assert_eq!(got(&rx), Some(Verdict::Deny));
}

#[test]
fn a_killed_caller_is_withdrawn() {
    let b = broker(Duration::from_secs(60));
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let rx = ask_as(&b, child.id(), vec![item(Class::Write, "a.md")]);
    assert!(waiting(&rx));
    child.kill().unwrap();
    // Still a zombie until reaped: that counts as gone too.
    assert_eq!(got(&rx), Some(Verdict::Withdrawn));
    assert!(b.pending().is_empty());
    let _ = child.wait();
}

#[test]
fn shutdown_and_drop_deny_everything_pending() {
    let b = broker(Duration::from_secs(60));
    let rx = ask(&b, Class::Write, "a.md");
    b.shutdown("unmounting");
    assert_eq!(got(&rx), Some(Verdict::Deny));
    assert_eq!(got(&ask(&b, Class::Write, "b.md")), Some(Verdict::Deny));

    let b = broker(Duration::from_secs(60));
    let rx = ask(&b, Class::Write, "a.md");
    drop(b);
    assert_eq!(got(&rx), Some(Verdict::Deny));
}

#[test]
fn no_approvals_denies_at_once() {
    let b = Approvals::new(
        Settings {
            mountpoint: "/m".into(),
            timeout: Duration::from_secs(60),
            no_approvals: true,
            owner_uid: 0,
        },
        None,
    );
    assert_eq!(got(&ask(&b, Class::Write, "a.md")), Some(Verdict::Deny));
    assert!(b.pending().is_empty());
}

#[test]
fn a_panicking_continuation_costs_only_its_request() {
    let b = broker(Duration::from_secs(60));
    b.ask(
        AskRequest {
            items: vec![item(Class::Write, "a.md")],
            op: "create",
            target: None,
            source: None,
            pid: std::process::id(),
            uid: 0,
            unique: 0,
            wait: Wait::Decision,
        },
        Box::new(|_| panic!("boom")),
    );
    let id = only_pending(&b);
    b.decide(id, Decision::Allow(Scope::Once), 0).unwrap();
    let rx = ask(&b, Class::Write, "b.md");
    b.decide(only_pending(&b), Decision::Allow(Scope::Once), 0)
        .unwrap();
    assert_eq!(got(&rx), Some(Verdict::Allow));
}

#[test]
fn the_api_channel_hears_requests_and_its_drop_denies() {
    let b = broker(Duration::from_secs(60));
    let requests = channel::channel(&b);
    let rx = ask(&b, Class::Write, "a.md");
    let req = requests.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(req.info().path, "/final/a.md");
    assert!(req.allow(Scope::Once));
    assert!(
        !req.allow(Scope::Once),
        "idempotent: the second answer is a no-op"
    );
    assert!(!req.deny());
    assert_eq!(got(&rx), Some(Verdict::Allow));
    let rx = ask(&b, Class::Write, "b.md");
    assert!(requests.recv_timeout(Duration::from_secs(5)).is_some());
    drop(requests);
    assert_eq!(got(&rx), Some(Verdict::Deny));
    assert_eq!(got(&ask(&b, Class::Write, "c.md")), Some(Verdict::Deny));
}

#[test]
fn rename_requests_show_source_and_target() {
    let b = broker(Duration::from_secs(60));
    let (tx, _rx) = mpsc::channel();
    b.ask(
        AskRequest {
            items: vec![item(Class::Write, "new.md"), item(Class::Delete, "old.md")],
            op: "rename",
            target: None,
            source: None,
            pid: std::process::id(),
            uid: 0,
            unique: 0,
            wait: Wait::Decision,
        },
        Box::new(move |v| {
            let _ = tx.send(v);
        }),
    );
    let p = &b.pending()[0];
    assert_eq!(p.class, "write+delete");
    assert_eq!(p.path, "/final/old.md");
    assert_eq!(p.target.as_deref(), Some("/final/new.md"));
    assert_eq!(p.items.len(), 2);
    b.shutdown("test over");
}

#[test]
fn the_timeout_stays_below_the_kernels() {
    let w = Duration::from_secs(300);
    assert_eq!(cap_timeout(w, 0, 0), (w, false));
    assert_eq!(cap_timeout(w, 120, 0), (Duration::from_secs(90), true));
    assert_eq!(cap_timeout(w, 0, 600), (w, false));
    assert_eq!(cap_timeout(w, 1000, 200), (Duration::from_secs(170), true));
    assert_eq!(cap_timeout(w, 2, 0), (Duration::from_secs(1), true));
    assert_eq!(
        cap_timeout(Duration::from_secs(10), 120, 0),
        (Duration::from_secs(10), false)
    );
}

/// An ask made as `pid`, FUSE request `unique`, waiting as `wait`.
fn ask_waiting(b: &Approvals, path: &str, unique: u64, wait: Wait) -> mpsc::Receiver<Verdict> {
    let (tx, rx) = mpsc::channel();
    b.ask(
        AskRequest {
            items: vec![item(Class::Write, path)],
            op: "create",
            target: None,
            source: None,
            pid: std::process::id(),
            uid: 1000,
            unique,
            wait,
        },
        Box::new(move |v| {
            let _ = tx.send(v);
        }),
    );
    rx
}

const HOLD: Wait = Wait::Bounded(Duration::from_millis(30));

#[test]
fn a_bounded_wait_is_told_to_retry_and_the_request_stays() {
    let b = broker(Duration::from_secs(60));
    let rx = ask_waiting(&b, "d", 2, HOLD);
    let id = only_pending(&b);
    assert_eq!(got(&rx), Some(Verdict::Later(id)));
    let p = b.pending();
    assert_eq!(p.len(), 1, "still pending with nobody waiting");
    assert!(p[0].retry, "marked as told to retry");
    assert_eq!(p[0].waiting, 0, "no call waits once told to retry");
    // A retry (another process of the same uid would do) joins it.
    let rx = ask_waiting(&b, "d", 4, HOLD);
    assert_eq!(got(&rx), Some(Verdict::Later(id)));
    assert_eq!(only_pending(&b), id);
    // Allowed once with nobody waiting: kept for the next retry only.
    b.decide(id, Decision::Allow(Scope::Once), 0).unwrap();
    assert_eq!(got(&ask_waiting(&b, "d", 6, HOLD)), Some(Verdict::Allow));
    let rx = ask_waiting(&b, "d", 8, HOLD);
    let again = only_pending(&b);
    assert_ne!(again, id, "an allow-once lets one retry through");
    assert_eq!(got(&rx), Some(Verdict::Later(again)));
    // Denied: the retry is refused at once.
    b.decide(again, Decision::Deny, 0).unwrap();
    assert_eq!(got(&ask_waiting(&b, "d", 10, HOLD)), Some(Verdict::Deny));
    assert!(b.pending().is_empty());
}

/// An ask of `write` on `path` by `op` showing `target`, told to retry
/// after [`HOLD`].
fn ask_shown(
    b: &Approvals,
    path: &str,
    op: &'static str,
    target: Option<&str>,
    unique: u64,
) -> mpsc::Receiver<Verdict> {
    let (tx, rx) = mpsc::channel();
    b.ask(
        AskRequest {
            items: vec![item(Class::Write, path)],
            op,
            target: target.map(PathBuf::from),
            source: None,
            pid: std::process::id(),
            uid: 1000,
            unique,
            wait: HOLD,
        },
        Box::new(move |v| {
            let _ = tx.send(v);
        }),
    );
    rx
}

/// An allow-once kept for a retry is for what the approver saw: a retry
/// that makes another kind of entry at the path (a symlink where a
/// directory was asked for), or the same kind with another target (a
/// symlink's text, a link's existing file), asks anew; the same one goes
/// through.
#[test]
fn an_allow_once_kept_for_a_retry_is_for_what_was_shown() {
    let b = broker(Duration::from_secs(60));
    let told = |rx: mpsc::Receiver<Verdict>| match got(&rx) {
        Some(Verdict::Later(id)) => id,
        v => panic!("not told to retry: {v:?}"),
    };
    let cases: [(&str, Option<&str>, &str, Option<&str>); 5] = [
        ("exchange", Some("/w/b"), "rename", Some("/w/b")),
        ("mkdir", None, "symlink", Some("/root")),
        (
            "symlink",
            Some("notes.md"),
            "symlink",
            Some("/root/.ssh/authorized_keys"),
        ),
        (
            "link",
            Some("/w/existing.txt"),
            "link",
            Some("/w/private.txt"),
        ),
        ("mkdir", None, "mknod", None),
    ];
    for (n, (op, target, other_op, other_target)) in cases.into_iter().enumerate() {
        let (path, unique) = (format!("d{n}"), 10 * n as u64);
        let id = told(ask_shown(&b, &path, op, target, unique + 2));
        b.decide(id, Decision::Allow(Scope::Once), 0).unwrap();
        let other = told(ask_shown(&b, &path, other_op, other_target, unique + 4));
        assert_ne!(
            other, id,
            "{other_op} {other_target:?} took the allow of {op} {target:?}"
        );
        assert_eq!(
            got(&ask_shown(&b, &path, op, target, unique + 6)),
            Some(Verdict::Allow),
            "{op} {target:?} retried goes through"
        );
        b.decide(other, Decision::Deny, 0).unwrap();
        assert!(b.pending().is_empty(), "{:?}", b.pending());
    }
}

#[test]
fn a_decision_within_the_hold_answers_the_call_itself() {
    let b = broker(Duration::from_secs(60));
    let rx = ask_waiting(&b, "d", 2, Wait::Bounded(Duration::from_secs(30)));
    let id = only_pending(&b);
    b.decide(id, Decision::Allow(Scope::Once), 0).unwrap();
    assert_eq!(got(&rx), Some(Verdict::Allow));
    // No grant is left over: the next one asks.
    let rx = ask_waiting(&b, "d", 4, HOLD);
    assert!(matches!(got(&rx), Some(Verdict::Later(_))));
}

#[test]
fn an_interrupt_withdraws_only_the_call_it_names() {
    let b = broker(Duration::from_secs(60));
    let create = ask_waiting(&b, "f", 2, Wait::Detached);
    let id = only_pending(&b);
    let held = |b: &Approvals| b.pending()[0].waiting;
    assert_eq!(held(&b), 0, "the create's own call was answered");
    // A later call of the same work joins the request, then is interrupted.
    let (tx, write) = mpsc::channel();
    let joined = b.join(
        2,
        4,
        std::process::id(),
        Box::new(move |v| {
            let _ = tx.send(v);
        }),
    );
    assert!(joined.is_ok());
    assert_eq!(held(&b), 1, "the write waits");
    assert!(!b.interrupt(99), "no call 99 waits");
    assert!(b.interrupt(4));
    assert_eq!(got(&write), Some(Verdict::Withdrawn));
    assert!(waiting(&create));
    assert_eq!(held(&b), 0, "the write was withdrawn");
    assert_eq!(only_pending(&b), id, "the create still waits");
    // Interrupting the create's own (answered) call withdraws the request.
    assert!(b.interrupt(2));
    assert_eq!(got(&create), Some(Verdict::Withdrawn));
    assert!(b.pending().is_empty());
    assert_eq!(
        b.counters()
            .withdrawn
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    assert!(
        b.join(2, 6, 1, Box::new(|_| {})).is_err(),
        "nothing to join"
    );
}

/// A later step of a pending create let go (its first write, which holds
/// the file's lock in the kernel, when an rm of the file waits): told to
/// retry, the request stays pending, and a retry of the same path by the
/// same uid from another process joins it instead of asking again.
#[test]
fn a_later_step_let_go_is_told_to_retry_and_its_retry_joins() {
    let b = broker(Duration::from_secs(60));
    let create = ask_waiting(&b, "f", 2, Wait::Detached);
    let id = only_pending(&b);
    let (tx, write) = mpsc::channel();
    let joined = b.join(
        2,
        4,
        std::process::id(),
        Box::new(move |v| {
            let _ = tx.send(v);
        }),
    );
    assert!(joined.is_ok());
    assert!(waiting(&write));
    // Let go: the live call only (the create's own was answered).
    assert_eq!(b.release(2), 1);
    assert_eq!(got(&write), Some(Verdict::Later(id)));
    assert_eq!(b.release(2), 0, "nothing left to let go");
    assert_eq!(only_pending(&b), id, "the create still waits");
    assert!(b.pending()[0].retry, "shown as waiting for a retry");
    assert!(waiting(&create));
    // The retry: another process of the same uid opens the file again.
    let mut other = std::process::Command::new("sleep")
        .arg("10")
        .spawn()
        .unwrap();
    let (tx, retry) = mpsc::channel();
    b.ask(
        AskRequest {
            items: vec![item(Class::Write, "f")],
            op: "open",
            target: None,
            source: None,
            pid: other.id(),
            uid: 1000,
            unique: 8,
            wait: Wait::Decision,
        },
        Box::new(move |v| {
            let _ = tx.send(v);
        }),
    );
    assert_eq!(only_pending(&b), id, "joined: no second request");
    assert!(waiting(&retry));
    b.decide(id, Decision::Allow(Scope::Once), 0).unwrap();
    assert_eq!(got(&retry), Some(Verdict::Allow));
    assert_eq!(got(&create), Some(Verdict::Allow));
    let _ = other.kill();
    let _ = other.wait();
}

/// Allowed once while nobody waits (the create's own call was answered,
/// its write told to retry): the allow is kept for the retry, once.
#[test]
fn an_allow_once_nobody_waits_for_is_kept_for_the_retry_of_a_pending_create() {
    let b = broker(Duration::from_secs(60));
    let create = ask_waiting(&b, "g", 2, Wait::Detached);
    let id = only_pending(&b);
    let (tx, write) = mpsc::channel();
    assert!(
        b.join(
            2,
            4,
            std::process::id(),
            Box::new(move |v| {
                let _ = tx.send(v);
            })
        )
        .is_ok()
    );
    assert_eq!(b.release(2), 1);
    assert_eq!(got(&write), Some(Verdict::Later(id)));
    b.decide(id, Decision::Allow(Scope::Once), 0).unwrap();
    assert_eq!(got(&create), Some(Verdict::Allow));
    let rx = ask_waiting(&b, "g", 9, HOLD);
    assert_eq!(got(&rx), Some(Verdict::Allow), "the retry goes through");
    let rx = ask_waiting(&b, "g", 10, HOLD);
    assert!(matches!(got(&rx), Some(Verdict::Later(_))), "once only");
}

/// A pending create's request with no step told to retry keeps no allow:
/// the create's own call took it.
#[test]
fn an_allow_once_of_a_create_nobody_retries_is_not_kept() {
    let b = broker(Duration::from_secs(60));
    let create = ask_waiting(&b, "h", 2, Wait::Detached);
    let id = only_pending(&b);
    b.decide(id, Decision::Allow(Scope::Once), 0).unwrap();
    assert_eq!(got(&create), Some(Verdict::Allow));
    let rx = ask_waiting(&b, "h", 9, HOLD);
    assert!(matches!(got(&rx), Some(Verdict::Later(_))));
}

#[test]
fn a_detached_request_outlives_its_caller() {
    let b = broker(Duration::from_secs(60));
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let _ = child.wait();
    let (tx, rx) = mpsc::channel();
    b.ask(
        AskRequest {
            items: vec![item(Class::Write, "f")],
            op: "create",
            target: None,
            source: None,
            pid: child.id(),
            uid: 0,
            unique: 2,
            wait: Wait::Detached,
        },
        Box::new(move |v| {
            let _ = tx.send(v);
        }),
    );
    // The watcher looks at callers every 100 ms: several looks.
    std::thread::sleep(Duration::from_millis(350));
    assert!(waiting(&rx), "not withdrawn though its process is gone");
    let id = only_pending(&b);
    b.decide(id, Decision::Allow(Scope::Once), 0).unwrap();
    assert_eq!(got(&rx), Some(Verdict::Allow));
}

#[test]
fn an_allow_from_an_earlier_decision_names_its_maker_in_the_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let audit = std::sync::Arc::new(crate::audit::Audit::open(&path, "/m".as_ref()).unwrap());
    let b = Approvals::new(
        Settings {
            mountpoint: "/m".into(),
            timeout: Duration::from_secs(60),
            no_approvals: false,
            owner_uid: 0,
        },
        Some(audit),
    );
    let rx = ask(&b, Class::Write, "a.md");
    b.decide(only_pending(&b), Decision::Allow(Scope::Path), 0)
        .unwrap();
    assert_eq!(got(&rx), Some(Verdict::Allow));
    assert_eq!(got(&ask(&b, Class::Write, "a.md")), Some(Verdict::Allow));
    let text = std::fs::read_to_string(&path).unwrap();
    let rec: serde_json::Value = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|r| r["event"] == "mutation")
        .unwrap_or_else(|| panic!("no mutation in {text}"));
    assert_eq!(rec["actor"]["pid"], std::process::id(), "{rec}");
    assert_eq!(rec["actor"]["uid"], 1000, "{rec}");
    assert!(rec["actor"]["comm"].is_string(), "{rec}");
    assert!(rec["actor"]["argv"].is_string(), "{rec}");
    b.shutdown("test over");
}

/// Past [`MAX_PENDING`] requests, a new ask is refused at once; one that
/// joins a pending request still joins it, and once some are decided
/// new ones are asked again.
#[test]
fn pending_requests_are_bounded() {
    let b = broker(Duration::from_secs(60));
    let rxs: Vec<_> = (0..MAX_PENDING)
        .map(|i| ask(&b, Class::Write, &format!("/final/f{i}")))
        .collect();
    assert_eq!(b.pending().len(), MAX_PENDING);
    assert_eq!(
        got(&ask(&b, Class::Write, "/final/one-more")),
        Some(Verdict::Deny)
    );
    assert_eq!(b.pending().len(), MAX_PENDING);
    let joins = ask(&b, Class::Write, "/final/f7");
    assert!(waiting(&joins), "a joining ask is not refused");
    let id = b
        .pending()
        .iter()
        .find(|p| p.path.ends_with("/f7"))
        .unwrap()
        .id;
    b.decide(id, Decision::Deny, 0).unwrap();
    assert_eq!(got(&joins), Some(Verdict::Deny));
    let asked = ask(&b, Class::Write, "/final/one-more");
    assert!(waiting(&asked), "room again: asked");
    drop(rxs);
}

/// A user other than the mount's owner and root may have a quarter of
/// [`MAX_PENDING`] requests pending, and all such users together half:
/// then its asks are refused at once while the owner's and root's are
/// still asked (one uid held all 1,024 before: found by an attack pass).
#[test]
fn other_users_have_a_share_of_the_pending_requests() {
    let b = broker(Duration::from_secs(60));
    let (one, all) = OTHERS_PENDING;
    let mut held = Vec::new();
    for i in 0..one {
        held.push(ask_by(&b, 4242, &format!("/final/a{i}")));
    }
    assert_eq!(b.pending().len(), one);
    assert_eq!(got(&ask_by(&b, 4242, "/final/a-more")), Some(Verdict::Deny));
    for i in 0..all - one {
        held.push(ask_by(&b, 4243, &format!("/final/b{i}")));
    }
    assert_eq!(b.pending().len(), all);
    assert_eq!(
        got(&ask_by(&b, 4244, "/final/c")),
        Some(Verdict::Deny),
        "a third user past the joint share"
    );
    let owner = ask_by(&b, 1000, "/final/owner");
    let root = ask_by(&b, 0, "/final/root");
    assert!(
        waiting(&owner) && waiting(&root),
        "the owner and root are asked"
    );
    assert_eq!(b.pending().len(), all + 2);
    drop(held);
}

//! The broker's table, kept under its state lock: pending requests and
//! their waiters, the allow and deny caches for the rest of the mount,
//! allow-onces kept for a retry; and the answers collected under the lock
//! to be delivered after it is released.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::time::Instant;

use super::super::{Continuation, Event, RequestInfo, Verdict, class_name};
use crate::isolate::pidns::NsId;

/// A fingerprint: (class, zone, path inside the zone).
pub(super) type Fp = (&'static str, String, PathBuf);
/// Identical requests: same fingerprints, same calling process, the same
/// thing shown.
pub(super) type Key = (Vec<Fp>, u32, Shown);
/// What an approver was shown beside the paths, besides the classes: the
/// kind of entry the operation makes ([`kind_made`]), and its target and
/// source (a symlink's text, a link's existing file, a rename's ends).
pub(super) type Shown = (&'static str, Option<PathBuf>, Option<PathBuf>);
/// A retry: same fingerprints, same uid (a retry is often a new process),
/// the same thing shown. An allow kept for a retry is for what the
/// approver saw, not a symlink to elsewhere at the same path.
pub(super) type RetryKey = (Vec<Fp>, u32, Shown);

/// The kind of entry `op` makes, where that is more than its class says
/// (a directory, a symlink, a hard link, a device or FIFO, a move, an
/// exchange); "" for the rest (a file made, written or truncated,
/// metadata, removals): a create retried as an open for writing is the
/// same ask, and so is any other change of the same file's content or
/// metadata (the approver decides on the class and the path).
pub(super) fn kind_made(op: &'static str) -> &'static str {
    match op {
        "mkdir" | "symlink" | "link" | "mknod" | "rename" | "exchange" => op,
        _ => "",
    }
}

/// What `req` shows ([`Shown`]).
pub(super) fn shown(req: &super::super::AskRequest) -> Shown {
    (kind_made(req.op), req.target.clone(), req.source.clone())
}

pub(super) struct Waiter {
    /// The calling thread; 0 for none (see the invariants).
    pub(super) tid: u32,
    /// The FUSE request it answers (0: none).
    pub(super) unique: u64,
    /// [`Wait::Bounded`](super::super::Wait::Bounded): when it is answered
    /// [`Verdict::Later`].
    pub(super) until: Option<Instant>,
    pub(super) then: Continuation,
    /// Its call was interrupted by a stop only and waits on: the kernel
    /// sends one interrupt per call, so a signal that should end it later
    /// (a fatal or caught one) is seen by the watcher instead.
    pub(super) stopped: bool,
}

pub(super) struct Pending {
    pub(super) info: RequestInfo,
    pub(super) fps: Vec<Fp>,
    pub(super) key: Key,
    /// Set for a request whose caller may be told to retry.
    pub(super) retry: Option<RetryKey>,
    pub(super) deadline: Instant,
    pub(super) waiters: Vec<Waiter>,
    /// The session and PID namespace the asker was in when it asked: a
    /// decider there is on the worker's side even once the asker has
    /// exited (most asks outlive their callers: EAGAIN, a create answered
    /// at once).
    pub(super) asker_session: Option<u32>,
    pub(super) asker_ns: Option<NsId>,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) next_id: u64,
    pub(super) pending: BTreeMap<u64, Pending>,
    pub(super) by_key: HashMap<Key, u64>,
    pub(super) by_retry: HashMap<RetryKey, u64>,
    /// Allow-once decisions of requests whose callers were told to retry
    /// and had not yet: (request, until when it is kept).
    pub(super) grants: HashMap<RetryKey, (u64, Instant)>,
    pub(super) allow_path: HashSet<Fp>,
    pub(super) allow_zone: HashSet<(&'static str, String)>,
    /// Denied fingerprints, with the request that denied them.
    pub(super) denied: HashMap<Fp, u64>,
    /// Set once approvals are over (shutdown, or the approver is gone).
    pub(super) closing: Option<String>,
}

impl State {
    pub(super) fn covered(&self, fp: &Fp) -> bool {
        self.allow_path.contains(fp) || self.allow_zone.contains(&(fp.0, fp.1.clone()))
    }

    pub(super) fn denied_by(&self, fps: &[Fp]) -> Option<u64> {
        fps.iter().find_map(|fp| self.denied.get(fp).copied())
    }

    pub(super) fn take(&mut self, id: u64) -> Option<Pending> {
        let p = self.pending.remove(&id)?;
        self.by_key.remove(&p.key);
        if let Some(rk) = &p.retry {
            self.by_retry.remove(rk);
        }
        Some(p)
    }

    /// Request `id`'s callers were told to retry: it says so, and a retry
    /// of its paths by the same uid joins it (also one asked unbounded
    /// whose later step was told so: a pending create's write).
    pub(super) fn told_to_retry(&mut self, id: u64) {
        let Some(p) = self.pending.get_mut(&id) else {
            return;
        };
        p.info.retry = true;
        if p.retry.is_none() {
            let rk = (p.key.0.clone(), p.info.uid, p.key.2.clone());
            if !self.by_retry.contains_key(&rk) {
                self.by_retry.insert(rk.clone(), id);
                p.retry = Some(rk);
            }
        }
    }

    /// The pending request with a waiter for FUSE request `unique`.
    pub(super) fn waiting(&self, unique: u64) -> Option<(u64, usize)> {
        self.pending.iter().find_map(|(id, p)| {
            let i = p.waiters.iter().position(|w| w.unique == unique)?;
            Some((*id, i))
        })
    }
}

/// Answers collected under the lock, delivered after it is released.
#[derive(Default)]
pub(super) struct Outbox {
    pub(super) answers: Vec<(Vec<Waiter>, Verdict)>,
    pub(super) events: Vec<Event>,
}

/// Call each continuation once; a panic in one is logged and contained.
pub(super) fn answer(waiters: Vec<Waiter>, v: Verdict) {
    for w in waiters {
        let then = w.then;
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || then(v))).is_err() {
            tracing::error!(?v, "panic while answering an approval; the request got EIO");
        }
    }
}

pub(super) fn waiter(tid: u32, unique: u64, then: Continuation) -> Waiter {
    Waiter {
        tid,
        unique,
        until: None,
        then,
        stopped: false,
    }
}

pub(super) fn fingerprint(item: &crate::policy::AskItem) -> Fp {
    (class_name(item.class), item.zone.clone(), item.path.clone())
}

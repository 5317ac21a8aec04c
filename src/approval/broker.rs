//! The approval broker: pending requests, decisions and their caches,
//! timeouts, withdrawal of requests whose caller is being killed.
//!
//! Invariants:
//! - Every continuation handed to [`Approvals::ask`] is called exactly once:
//!   by a decision, a cache hit, a timeout, a withdrawal, shutdown, or the
//!   broker's `Drop`. Each call is guarded: a panic in one costs only that
//!   request.
//! - The `request` record is in the ledger before anyone can see the
//!   request, and the decision (or timeout, withdrawal) record before any
//!   continuation runs: both are written under the state lock.
//! - Listeners and continuations run with no lock held, so either may call
//!   back into the broker (an API approver deciding from a listener).
//! - A request asked with [`Wait::Bounded`] may stay pending with no waiter
//!   (its caller was told to retry); a retry of the same fingerprints by
//!   the same uid joins it, and an allow-once nobody was there to take is
//!   kept for that retry ([`GRANT_KEPT`]). Any other request ends as soon
//!   as it has no waiter left.
//! - A waiter with thread id 0 is no thread's: the call that asked was
//!   answered already ([`Wait::Detached`]); `/proc` never withdraws it.
//!
//! Lock order: `state`, then the audit file's own lock. `listeners` is
//! never held while anything else is taken.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::caller::{self, Caller};
use super::records::{ask_record, describe, end_record, request_record};
use super::side::WorkerSide;
use super::{
    AskRequest, Broker, Continuation, Counters, DecideError, Decision, Event, GRANT_KEPT, ItemInfo,
    Listener, Note, RequestInfo, Resolution, Scope, Settings, Verdict, Wait, class_name,
    virtual_path,
};
use crate::audit::{self, Audit, Kind};
use crate::text;

/// How often the watcher looks for timeouts, killed callers and gone
/// listeners.
const TICK: Duration = Duration::from_millis(100);

fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// A fingerprint: (class, zone, path inside the zone).
type Fp = (&'static str, String, PathBuf);
/// Identical requests: same fingerprints, same calling process.
type Key = (Vec<Fp>, u32);
/// A retry: same fingerprints, same uid (a retry is often a new process).
type RetryKey = (Vec<Fp>, u32);

struct Waiter {
    /// The calling thread; 0 for none (see the invariants).
    tid: u32,
    /// The FUSE request it answers (0: none).
    unique: u64,
    /// [`Wait::Bounded`]: when it is answered [`Verdict::Later`].
    until: Option<Instant>,
    then: Continuation,
}

struct Pending {
    info: RequestInfo,
    fps: Vec<Fp>,
    key: Key,
    /// Set for a request whose caller may be told to retry.
    retry: Option<RetryKey>,
    deadline: Instant,
    waiters: Vec<Waiter>,
}

#[derive(Default)]
struct State {
    next_id: u64,
    pending: BTreeMap<u64, Pending>,
    by_key: HashMap<Key, u64>,
    by_retry: HashMap<RetryKey, u64>,
    /// Allow-once decisions of requests whose callers were told to retry
    /// and had not yet: (request, until when it is kept).
    grants: HashMap<RetryKey, (u64, Instant)>,
    allow_path: HashSet<Fp>,
    allow_zone: HashSet<(&'static str, String)>,
    /// Denied fingerprints, with the request that denied them.
    denied: HashMap<Fp, u64>,
    /// Set once approvals are over (shutdown, or the approver is gone).
    closing: Option<String>,
}

impl State {
    fn covered(&self, fp: &Fp) -> bool {
        self.allow_path.contains(fp) || self.allow_zone.contains(&(fp.0, fp.1.clone()))
    }

    fn denied_by(&self, fps: &[Fp]) -> Option<u64> {
        fps.iter().find_map(|fp| self.denied.get(fp).copied())
    }

    fn take(&mut self, id: u64) -> Option<Pending> {
        let p = self.pending.remove(&id)?;
        self.by_key.remove(&p.key);
        if let Some(rk) = &p.retry {
            self.by_retry.remove(rk);
        }
        Some(p)
    }

    /// The pending request with a waiter for FUSE request `unique`.
    fn waiting(&self, unique: u64) -> Option<(u64, usize)> {
        self.pending.iter().find_map(|(id, p)| {
            let i = p.waiters.iter().position(|w| w.unique == unique)?;
            Some((*id, i))
        })
    }
}

struct Inner {
    settings: Settings,
    audit: Option<Arc<Audit>>,
    state: Mutex<State>,
    tick: Condvar,
    listeners: Mutex<Vec<Arc<dyn Listener>>>,
    counters: Counters,
    side: Arc<WorkerSide>,
}

/// The broker. Cheap to clone; all clones are one broker.
#[derive(Clone)]
pub struct Approvals {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Approvals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Approvals")
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}

/// Answers collected under the lock, delivered after it is released.
#[derive(Default)]
struct Outbox {
    answers: Vec<(Vec<Waiter>, Verdict)>,
    events: Vec<Event>,
}

/// Call each continuation once; a panic in one is logged and contained.
fn answer(waiters: Vec<Waiter>, v: Verdict) {
    for w in waiters {
        let then = w.then;
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || then(v))).is_err() {
            tracing::error!(?v, "panic while answering an approval; the request got EIO");
        }
    }
}

fn waiter(tid: u32, unique: u64, then: Continuation) -> Waiter {
    Waiter {
        tid,
        unique,
        until: None,
        then,
    }
}

fn fingerprint(item: &crate::policy::AskItem) -> Fp {
    (class_name(item.class), item.zone.clone(), item.path.clone())
}

impl Approvals {
    /// A broker; starts its watcher thread.
    pub fn new(settings: Settings, audit: Option<Arc<Audit>>) -> Approvals {
        let inner = Arc::new(Inner {
            settings,
            audit,
            state: Mutex::new(State {
                next_id: 1,
                ..State::default()
            }),
            tick: Condvar::new(),
            listeners: Mutex::new(Vec::new()),
            counters: Counters::default(),
            side: Arc::new(WorkerSide::new()),
        });
        let weak = Arc::downgrade(&inner);
        let spawned = std::thread::Builder::new()
            .name("zm-approvals".into())
            .spawn(move || watch(weak));
        if let Err(e) = spawned {
            // Without the watcher nothing times out: refuse to ask at all.
            tracing::error!("cannot start the approval watcher ({e}); denying every ask");
            inner.state.lock().closing = Some("the approval watcher could not start".into());
        }
        Approvals { inner }
    }

    pub fn settings(&self) -> &Settings {
        &self.inner.settings
    }

    pub fn audit(&self) -> Option<&Arc<Audit>> {
        self.inner.audit.as_ref()
    }

    pub fn counters(&self) -> &Counters {
        &self.inner.counters
    }

    /// Who is on the worker's side (shared with the stage commands).
    pub fn side(&self) -> &Arc<WorkerSide> {
        &self.inner.side
    }

    /// Hear about every request from now on.
    pub fn subscribe(&self, l: Arc<dyn Listener>) {
        self.inner.listeners.lock().push(l);
    }

    /// The requests waiting now, oldest first.
    pub fn pending(&self) -> Vec<RequestInfo> {
        let st = self.inner.state.lock();
        let now = Instant::now();
        st.pending
            .values()
            .map(|p| {
                let mut info = p.info.clone();
                info.timeout_secs = p.deadline.saturating_duration_since(now).as_secs();
                info
            })
            .collect()
    }

    /// Apply the decision of process `approver_pid` (a control-socket
    /// peer) to request `id`, unless that process is on the asking
    /// worker's side: inside its PID namespace, in its session or
    /// descended from it ([`WorkerSide::refusal`]).
    pub fn decide_as(
        &self,
        id: u64,
        d: Decision,
        approver_uid: u32,
        approver_pid: u32,
    ) -> Result<(), DecideError> {
        let asker = {
            let st = self.inner.state.lock();
            st.pending.get(&id).map(|p| p.info.pid)
        };
        let Some(asker) = asker else {
            return Err(DecideError::NotPending(id));
        };
        if let Some(why) = self
            .inner
            .side
            .refusal(Some(approver_pid), approver_uid, &[asker], &[])
        {
            return Err(DecideError::OwnSide { id, why });
        }
        self.decide(id, d, approver_uid)
    }

    /// Apply an approver's decision to request `id`.
    pub fn decide(&self, id: u64, d: Decision, approver_uid: u32) -> Result<(), DecideError> {
        let mut out = Outbox::default();
        {
            let mut st = self.inner.state.lock();
            let p = st.take(id).ok_or(DecideError::NotPending(id))?;
            let resolution = match d {
                Decision::Allow(scope) => {
                    if let (Scope::Once, Some(rk), true) = (scope, &p.retry, p.waiters.is_empty()) {
                        st.grants
                            .insert(rk.clone(), (id, Instant::now() + GRANT_KEPT));
                    }
                    for fp in &p.fps {
                        match scope {
                            Scope::Once => {}
                            Scope::Path => {
                                st.allow_path.insert(fp.clone());
                            }
                            Scope::Zone => {
                                st.allow_zone.insert((fp.0, fp.1.clone()));
                            }
                        }
                    }
                    Resolution::Allow {
                        scope,
                        approver_uid: Some(approver_uid),
                    }
                }
                Decision::Deny => {
                    for fp in &p.fps {
                        st.denied.insert(fp.clone(), id);
                    }
                    Resolution::Deny {
                        approver_uid: Some(approver_uid),
                        reason: None,
                    }
                }
            };
            self.end(p, resolution, &mut out);
            if matches!(
                d,
                Decision::Deny | Decision::Allow(Scope::Path | Scope::Zone)
            ) {
                self.sweep(&mut st, id, approver_uid, &mut out);
            }
        }
        self.deliver(out);
        Ok(())
    }

    /// Settle other pending requests that the caches now answer.
    fn sweep(&self, st: &mut State, by: u64, approver_uid: u32, out: &mut Outbox) {
        let ids: Vec<u64> = st.pending.keys().copied().collect();
        for other in ids {
            let Some(p) = st.pending.get(&other) else {
                continue;
            };
            let resolution = if st.denied_by(&p.fps).is_some() {
                Resolution::Deny {
                    approver_uid: Some(approver_uid),
                    reason: Some(format!("denied with request {by}")),
                }
            } else if p.fps.iter().all(|fp| st.covered(fp)) {
                Resolution::Allow {
                    scope: Scope::Once,
                    approver_uid: Some(approver_uid),
                }
            } else {
                continue;
            };
            if let Some(p) = st.take(other) {
                self.end(p, resolution, out);
            }
        }
    }

    /// Log the end of a request and queue its answers and event. Called
    /// under the state lock.
    fn end(&self, p: Pending, r: Resolution, out: &mut Outbox) {
        let c = &self.inner.counters;
        let verdict = match &r {
            Resolution::Allow { .. } => {
                bump(&c.allowed, 1);
                Verdict::Allow
            }
            Resolution::Deny { .. } => {
                bump(&c.denied, 1);
                Verdict::Deny
            }
            Resolution::Timeout => {
                bump(&c.timeouts, 1);
                Verdict::Deny
            }
            Resolution::Withdrawn => {
                bump(&c.withdrawn, 1);
                Verdict::Withdrawn
            }
        };
        let (kind, rec) = end_record(&p.info, &r);
        self.ledger(kind, rec);
        tracing::info!(id = p.info.id, resolution = ?r, "approval request ended");
        out.answers.push((p.waiters, verdict));
        out.events.push(Event::Resolved {
            id: p.info.id,
            resolution: r,
        });
    }

    fn deliver(&self, out: Outbox) {
        for (waiters, v) in out.answers {
            answer(waiters, v);
        }
        if out.events.is_empty() {
            return;
        }
        let listeners: Vec<Arc<dyn Listener>> = self.inner.listeners.lock().clone();
        for ev in &out.events {
            for l in &listeners {
                l.event(ev);
            }
        }
    }

    /// Deny every pending request (`zonemount unmount` does this before it
    /// unmounts, so no waiting syscall keeps the mount busy). Returns how
    /// many were denied.
    pub fn deny_pending(&self, reason: &str) -> usize {
        let mut out = Outbox::default();
        let n = {
            let mut st = self.inner.state.lock();
            let ids: Vec<u64> = st.pending.keys().copied().collect();
            for id in &ids {
                if let Some(p) = st.take(*id) {
                    let r = Resolution::Deny {
                        approver_uid: None,
                        reason: Some(reason.to_string()),
                    };
                    self.end(p, r, &mut out);
                }
            }
            ids.len()
        };
        self.deliver(out);
        n
    }

    /// Stop asking: deny what is pending and every later `ask`.
    pub fn shutdown(&self, reason: &str) {
        self.inner
            .state
            .lock()
            .closing
            .get_or_insert_with(|| reason.to_string());
        self.deny_pending(reason);
        self.inner.tick.notify_all();
    }

    /// Refuse at once, with a ledger record (no request is made).
    fn refuse_now(&self, req: &AskRequest, caller: &Caller, reason: String, then: Continuation) {
        bump(&self.inner.counters.cached_denials, 1);
        self.ledger(
            Kind::Refusal,
            audit::Record {
                errno: Some("EACCES".into()),
                reason: Some(reason),
                ..ask_record(req, caller)
            },
        );
        answer(vec![waiter(0, 0, then)], Verdict::Deny);
    }

    fn ask_inner(&self, req: AskRequest, then: Continuation) {
        let caller = Caller::read(req.pid);
        let tid = match req.wait {
            Wait::Detached => 0,
            Wait::Decision | Wait::Bounded(_) => req.pid,
        };
        let until = match req.wait {
            Wait::Bounded(d) => Some(Instant::now() + d),
            Wait::Decision | Wait::Detached => None,
        };
        let me = Waiter {
            tid,
            unique: req.unique,
            until,
            then,
        };
        let fps: Vec<Fp> = req.items.iter().map(fingerprint).collect();
        let mut st = self.inner.state.lock();
        if self.inner.settings.no_approvals {
            drop(st);
            let reason = "approvals are off (--no-approvals): every ask is denied".to_string();
            return self.refuse_now(&req, &caller, reason, me.then);
        }
        if let Some(why) = st.closing.clone() {
            drop(st);
            return self.refuse_now(&req, &caller, format!("not asking: {why}"), me.then);
        }
        if let Some(by) = st.denied_by(&fps) {
            drop(st);
            let reason = format!("denied for the rest of the mount by request {by}");
            return self.refuse_now(&req, &caller, reason, me.then);
        }
        let open: Vec<Fp> = fps.iter().filter(|fp| !st.covered(fp)).cloned().collect();
        if open.is_empty() {
            drop(st);
            bump(&self.inner.counters.cached_allows, 1);
            self.log_mutation(&req, &caller, "allowed by an earlier path or zone decision");
            return answer(vec![me], Verdict::Allow);
        }
        let mut sorted = open.clone();
        sorted.sort();
        let retry_key: RetryKey = (sorted.clone(), req.uid);
        if let Some((by, until)) = st.grants.remove(&retry_key) {
            if until > Instant::now() {
                drop(st);
                bump(&self.inner.counters.cached_allows, 1);
                let why = format!(
                    "allowed once by request {by}, decided after the caller was told to retry"
                );
                self.log_mutation(&req, &caller, &why);
                return answer(vec![me], Verdict::Allow);
            }
        }
        let key: Key = (sorted, caller.pid);
        let joined = st
            .by_key
            .get(&key)
            .or_else(|| st.by_retry.get(&retry_key))
            .copied();
        if let Some(id) = joined {
            if let Some(p) = st.pending.get_mut(&id) {
                p.waiters.push(me);
                drop(st);
                // A bounded waiter needs the watcher to wake in time.
                self.inner.tick.notify_all();
                return;
            }
        }
        let id = st.next_id;
        st.next_id += 1;
        let items: Vec<_> = req
            .items
            .iter()
            .filter(|i| open.contains(&fingerprint(i)))
            .cloned()
            .collect();
        let open_req = AskRequest { items, ..req };
        let (zone, class, path, target) = describe(&open_req);
        let timeout = self.inner.settings.timeout;
        let (path, path_b64) = text::path_for_json(&path);
        let (target, target_b64) = match target.as_deref().map(text::path_for_json) {
            Some((t, b)) => (Some(t), b),
            None => (None, None),
        };
        let (cmdline, cmdline_b64) = text::for_json(&caller.cmdline);
        let info = RequestInfo {
            id,
            zone,
            class,
            op: open_req.op.to_string(),
            path,
            path_b64,
            target,
            target_b64,
            pid: caller.pid,
            uid: open_req.uid,
            cmdline,
            cmdline_b64,
            time: audit::now_rfc3339(),
            timeout_secs: timeout.as_secs(),
            retry: false,
            items: open_req
                .items
                .iter()
                .map(|i| {
                    ItemInfo::new(
                        class_name(i.class),
                        &i.zone,
                        &virtual_path(&i.zone, &i.path),
                    )
                })
                .collect(),
        };
        if let Some(a) = &self.inner.audit {
            if let Err(e) = a.write(Kind::Request, &request_record(&info)) {
                // Unlogged is unaccountable: refuse rather than ask.
                drop(st);
                tracing::error!("audit log write failed ({e}); denying request {id}");
                return answer(vec![me], Verdict::Deny);
            }
        }
        bump(&self.inner.counters.requests, 1);
        tracing::info!(id, op = %info.op, path = %info.shown_path(), pid = info.pid, "approval requested");
        st.by_key.insert(key.clone(), id);
        let retry = matches!(open_req.wait, Wait::Bounded(_)).then_some(retry_key);
        if let Some(rk) = &retry {
            st.by_retry.insert(rk.clone(), id);
        }
        st.pending.insert(
            id,
            Pending {
                info: info.clone(),
                fps: open,
                key,
                retry,
                deadline: Instant::now() + timeout,
                waiters: vec![me],
            },
        );
        drop(st);
        self.inner.tick.notify_all();
        self.deliver(Outbox {
            answers: Vec::new(),
            events: vec![Event::Requested(info)],
        });
    }

    fn log_mutation(&self, req: &AskRequest, caller: &Caller, reason: &str) {
        bump(&self.inner.counters.mutations, 1);
        self.ledger(
            Kind::Mutation,
            audit::Record {
                decision: Some("allow".into()),
                reason: Some(reason.into()),
                ..ask_record(req, caller)
            },
        );
    }

    /// Write `rec` to the ledger, when there is one.
    fn ledger(&self, kind: Kind, rec: audit::Record) {
        if let Some(a) = &self.inner.audit {
            a.log(kind, &rec);
        }
    }

    /// One watcher step: wait a little, then time out, withdraw, and check
    /// listeners. Returns false once there is nothing left to watch.
    fn step(&self) -> bool {
        let mut out = Outbox::default();
        let gone = {
            let mut st = self.inner.state.lock();
            let next = st
                .pending
                .values()
                .flat_map(|p| {
                    std::iter::once(p.deadline).chain(p.waiters.iter().filter_map(|w| w.until))
                })
                .min();
            let wait = next
                .map(|d| d.saturating_duration_since(Instant::now()).min(TICK))
                .unwrap_or(TICK);
            if !wait.is_zero() {
                self.inner.tick.wait_for(&mut st, wait);
            }
            let now = Instant::now();
            let expired: Vec<u64> = st
                .pending
                .iter()
                .filter(|(_, p)| p.deadline <= now)
                .map(|(id, _)| *id)
                .collect();
            for id in expired {
                if let Some(p) = st.take(id) {
                    self.end(p, Resolution::Timeout, &mut out);
                }
            }
            Self::release_bounded(&mut st, now, &mut out);
            st.grants.retain(|_, (_, until)| *until > now);
            self.withdraw_dying(&mut st, &mut out);
            self.listeners_gone()
        };
        self.deliver(out);
        if gone {
            self.shutdown("the supervisor stopped listening for requests");
        }
        let st = self.inner.state.lock();
        !(st.closing.is_some() && st.pending.is_empty())
    }

    /// Tell bounded waiters whose hold is over to retry later; their
    /// requests stay pending (marked as such for approvers).
    fn release_bounded(st: &mut State, now: Instant, out: &mut Outbox) {
        for (id, p) in st.pending.iter_mut() {
            if !p.waiters.iter().any(|w| w.until.is_some_and(|u| u <= now)) {
                continue;
            }
            let (due, rest): (Vec<Waiter>, Vec<Waiter>) = std::mem::take(&mut p.waiters)
                .into_iter()
                .partition(|w| w.until.is_some_and(|u| u <= now));
            p.waiters = rest;
            p.info.retry = true;
            out.answers.push((due, Verdict::Later(*id)));
        }
    }

    /// Answer EINTR to callers being killed; drop requests left with none
    /// (but one whose caller may retry).
    fn withdraw_dying(&self, st: &mut State, out: &mut Outbox) {
        let mut emptied = Vec::new();
        for (id, p) in st.pending.iter_mut() {
            let (dying, alive): (Vec<Waiter>, Vec<Waiter>) = std::mem::take(&mut p.waiters)
                .into_iter()
                .partition(|w| w.tid != 0 && caller::is_dying(w.tid));
            p.waiters = alive;
            if p.waiters.is_empty() && p.retry.is_none() && !dying.is_empty() {
                emptied.push((*id, dying));
            } else if !dying.is_empty() {
                out.answers.push((dying, Verdict::Withdrawn));
            }
        }
        for (id, dying) in emptied {
            if let Some(mut p) = st.take(id) {
                p.waiters = dying;
                self.end(p, Resolution::Withdrawn, out);
            }
        }
    }

    fn listeners_gone(&self) -> bool {
        let mut ls = self.inner.listeners.lock();
        let before = ls.len();
        ls.retain(|l| !l.gone());
        ls.len() != before
    }
}

fn watch(weak: Weak<Inner>) {
    loop {
        let Some(inner) = weak.upgrade() else { return };
        let me = Approvals { inner };
        if !me.step() {
            return;
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The last handle is gone: nobody can decide any more. Deny rather
        // than drop the replies (a dropped reply would be EIO).
        let st = std::mem::take(&mut *self.state.lock());
        for (_, p) in st.pending {
            answer(p.waiters, Verdict::Deny);
        }
    }
}

impl Broker for Approvals {
    fn ask(&self, req: AskRequest, then: Continuation) {
        self.ask_inner(req, then)
    }

    fn interrupt(&self, unique: u64) -> bool {
        if unique == 0 {
            return false;
        }
        let mut out = Outbox::default();
        {
            let mut st = self.inner.state.lock();
            let Some((id, i)) = st.waiting(unique) else {
                return false;
            };
            let Some(p) = st.pending.get_mut(&id) else {
                return false;
            };
            let w = p.waiters.remove(i);
            tracing::info!(id, unique, "a waiting call was interrupted");
            if p.waiters.is_empty() && p.retry.is_none() {
                if let Some(mut p) = st.take(id) {
                    p.waiters = vec![w];
                    self.end(p, Resolution::Withdrawn, &mut out);
                }
            } else {
                out.answers.push((vec![w], Verdict::Withdrawn));
            }
        }
        self.deliver(out);
        true
    }

    fn join(
        &self,
        with: u64,
        unique: u64,
        tid: u32,
        then: Continuation,
    ) -> Result<(), Continuation> {
        if with == 0 {
            return Err(then);
        }
        let mut st = self.inner.state.lock();
        let Some((id, _)) = st.waiting(with) else {
            return Err(then);
        };
        match st.pending.get_mut(&id) {
            Some(p) => {
                p.waiters.push(waiter(tid, unique, then));
                Ok(())
            }
            None => Err(then),
        }
    }

    fn note(&self, note: &Note) {
        let c = &self.inner.counters;
        match note.refusal {
            Some(_) => bump(&c.refusals, 1),
            None => bump(&c.mutations, 1),
        }
        let Some(a) = &self.inner.audit else { return };
        let pid = Caller::read(note.pid).pid;
        let mut rec = audit::Record {
            zone: note.zone.clone(),
            op: Some(note.op.to_string()),
            pid: Some(pid),
            uid: Some(note.uid),
            ..audit::Record::default()
        }
        .path(&note.path)
        .target(note.target.as_deref());
        match note.refusal {
            Some(r) => {
                rec.errno = Some(r.errno_name().into());
                rec.reason = Some(note.message.clone().unwrap_or_else(|| r.to_string()));
                a.log(Kind::Refusal, &rec);
            }
            None => {
                rec.decision = Some("allow".into());
                rec.reason = Some("preApproved".into());
                a.log(Kind::Mutation, &rec);
            }
        }
    }
}

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
//! - A request asked with [`Wait::Bounded`](super::Wait::Bounded) may stay
//!   pending with no waiter (its caller was told to retry); a retry of the
//!   same fingerprints by the same uid joins it, and an allow-once nobody
//!   was there to take is kept for that retry ([`GRANT_KEPT`]). Any other
//!   request ends as soon as it has no waiter left.
//! - A waiter with thread id 0 is no thread's: the call that asked was
//!   answered already ([`Wait::Detached`](super::Wait::Detached)); `/proc`
//!   never withdraws it.
//!
//! Lock order: `state`, then the audit file's own lock. `listeners` is
//! never held while anything else is taken.
//!
//! This file holds the broker itself and its decisions; beside it:
//! - `table`: what is kept under the state lock (pending requests, their
//!   waiters, the caches) and the answers delivered after it;
//! - `asking`: a new ask, from the caches or as a new request;
//! - `watcher`: the thread that times out, releases and withdraws.

mod asking;
mod table;
mod watcher;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use super::caller::Caller;
use super::records::end_record;
use super::side::{AskedFrom, Worker, WorkerSide};
use super::{
    AskRequest, Broker, Continuation, Counters, DecideError, Decision, Event, GRANT_KEPT, Listener,
    Note, RequestInfo, Resolution, Scope, Settings, Verdict,
};
use crate::audit::{self, Audit, Kind};
use table::{Outbox, Pending, State, answer, waiter};

fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
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
        let me = Approvals { inner };
        if let Err(e) = me.start_watcher() {
            // Without the watcher nothing times out: refuse to ask at all.
            tracing::error!("cannot start the approval watcher ({e}); denying every ask");
            me.inner.state.lock().closing = Some("the approval watcher could not start".into());
        }
        me
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
                // A waiter of thread 0 was answered already (see above).
                let held = p.waiters.iter().filter(|w| w.tid != 0).count();
                info.waiting = u32::try_from(held).unwrap_or(u32::MAX);
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
            st.pending
                .get(&id)
                .map(|p| (p.info.pid, p.asker_session, p.asker_ns, p.deadline))
        };
        let Some((asker, session, ns, deadline)) = asker else {
            return Err(DecideError::NotPending(id));
        };
        let asked_from = AskedFrom {
            pid: asker,
            session,
        };
        if let Some(why) = self.inner.side.refusal(
            Some(approver_pid),
            approver_uid,
            &[asked_from],
            ns.as_slice(),
            Worker::Asked,
        ) {
            // The request goes on waiting for a decider who may.
            let left = deadline.saturating_duration_since(Instant::now()).as_secs();
            return Err(DecideError::OwnSide { id, left, why });
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
                    // Nobody waits (a call answered already, tid 0, took
                    // nothing): the allow is kept for the retry.
                    let unclaimed = p.waiters.iter().all(|w| w.tid == 0);
                    if let (Scope::Once, Some(rk), true) = (scope, &p.retry, unclaimed) {
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

    /// Stop asking: deny what is pending and every later `ask`; then tell
    /// listeners to end what they started (`--on-ask` hooks), which may
    /// wait a moment.
    pub fn shutdown(&self, reason: &str) {
        self.inner
            .state
            .lock()
            .closing
            .get_or_insert_with(|| reason.to_string());
        self.deny_pending(reason);
        self.inner.tick.notify_all();
        // What listeners started (the `--on-ask` hooks) ends with the
        // mount.
        let listeners: Vec<Arc<dyn Listener>> = self.inner.listeners.lock().clone();
        for l in &listeners {
            l.close();
        }
    }

    /// Write `rec` to the ledger, when there is one.
    fn ledger(&self, kind: Kind, rec: audit::Record) {
        if let Some(a) = &self.inner.audit {
            a.log(kind, &rec);
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
            // `kill -STOP` (or ^Z) interrupts the call in the kernel too:
            // the call waits on, as it would for a signal it ignores.
            let tid = p.waiters[i].tid;
            if tid != 0 && super::caller::only_stopping_tid(tid) {
                tracing::info!(
                    id,
                    unique,
                    tid,
                    "interrupted by a stop signal only: the call waits on"
                );
                p.waiters[i].stopped = true;
                return true;
            }
            let w = p.waiters.remove(i);
            tracing::info!(id, unique, "a waiting call was interrupted");
            // A request ends with its last waiter, unless a retry may come;
            // but the withdrawal of the call that asked and was answered
            // already (a create whose file is being removed) ends it.
            if p.waiters.is_empty() && (p.retry.is_none() || w.tid == 0) {
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

    fn release(&self, with: u64) -> usize {
        if with == 0 {
            return 0;
        }
        let mut out = Outbox::default();
        let n = {
            let mut st = self.inner.state.lock();
            let Some((id, _)) = st.waiting(with) else {
                return 0;
            };
            let Some(p) = st.pending.get_mut(&id) else {
                return 0;
            };
            let (live, answered): (Vec<_>, Vec<_>) = std::mem::take(&mut p.waiters)
                .into_iter()
                .partition(|w| w.tid != 0);
            p.waiters = answered;
            let n = live.len();
            if n > 0 {
                st.told_to_retry(id);
                out.answers.push((live, Verdict::Later(id)));
            }
            n
        };
        self.deliver(out);
        n
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
        let Some(p) = st.pending.get_mut(&id) else {
            return Err(then);
        };
        p.waiters.push(waiter(tid, unique, then));
        Ok(())
    }

    fn note(&self, note: &Note) {
        let c = &self.inner.counters;
        match note.refusal {
            Some(_) => bump(&c.refusals, 1),
            None => bump(&c.mutations, 1),
        }
        let Some(a) = &self.inner.audit else { return };
        let pid = match &note.actor {
            Some(a) => a.pid,
            None => Caller::read(note.pid).pid,
        };
        let mut rec = audit::Record {
            zone: note.zone.clone(),
            op: Some(note.op.to_string()),
            pid: Some(pid),
            uid: Some(note.uid),
            actor: note.actor.clone(),
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

//! The broker's watcher thread: times requests out, tells bounded waiters
//! to retry later, withdraws the waiters of callers being killed, and
//! stops asking once every listener's approver is gone.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::super::caller;
use super::super::{Resolution, Verdict};
use super::table::{Outbox, State, Waiter};
use super::{Approvals, Inner};

/// How often the watcher looks for timeouts, killed callers and gone
/// listeners.
const TICK: Duration = Duration::from_millis(100);

impl Approvals {
    /// Start the watcher thread. It holds the broker weakly: it ends once
    /// the last handle is gone, or approvals are over and nothing waits.
    pub(super) fn start_watcher(&self) -> std::io::Result<()> {
        let weak = Arc::downgrade(&self.inner);
        std::thread::Builder::new()
            .name("zm-approvals".into())
            .spawn(move || watch(weak))
            .map(drop)
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
        let mut told = Vec::new();
        for (id, p) in st.pending.iter_mut() {
            if !p.waiters.iter().any(|w| w.until.is_some_and(|u| u <= now)) {
                continue;
            }
            let (due, rest): (Vec<Waiter>, Vec<Waiter>) = std::mem::take(&mut p.waiters)
                .into_iter()
                .partition(|w| w.until.is_some_and(|u| u <= now));
            p.waiters = rest;
            told.push(*id);
            out.answers.push((due, Verdict::Later(*id)));
        }
        for id in told {
            st.told_to_retry(id);
        }
    }

    /// Answer EINTR to callers being killed; drop requests left with none
    /// (but one whose caller may retry).
    fn withdraw_dying(&self, st: &mut State, out: &mut Outbox) {
        let mut emptied = Vec::new();
        for (id, p) in st.pending.iter_mut() {
            let (dying, alive): (Vec<Waiter>, Vec<Waiter>) =
                std::mem::take(&mut p.waiters).into_iter().partition(|w| {
                    w.tid != 0
                        && (caller::is_dying(w.tid) || w.stopped && caller::interrupting_tid(w.tid))
                });
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

//! Approval requests on a channel, for supervisors that embed the crate:
//! subscribe a channel to a broker, receive each request and answer it.
//!
//! Each [`Request`]'s `allow`/`deny` is idempotent: the first answer (from
//! here, the CLI or the control socket) wins, later ones return false.
//! Dropping the [`Requests`] receiver denies everything pending and every
//! later request.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use super::Listener;
use super::{Approvals, Decision, Event, RequestInfo, Scope};

/// One waiting request, with its answer buttons.
#[derive(Debug)]
pub struct Request {
    info: RequestInfo,
    broker: Approvals,
    uid: u32,
}

impl Request {
    pub fn info(&self) -> &RequestInfo {
        &self.info
    }

    pub fn id(&self) -> u64 {
        self.info.id
    }

    /// Allow it (once, or for the path or zone for the rest of the mount).
    /// False if it was already answered, timed out or withdrawn.
    pub fn allow(&self, scope: Scope) -> bool {
        self.broker
            .decide(self.info.id, Decision::Allow(scope), self.uid)
            .is_ok()
    }

    /// Deny it: the syscall gets EACCES, and the same class on the same
    /// path is denied at once for the rest of the mount.
    pub fn deny(&self) -> bool {
        self.broker
            .decide(self.info.id, Decision::Deny, self.uid)
            .is_ok()
    }
}

/// The receiving end. Dropping it denies what is pending and stops asking.
#[derive(Debug)]
pub struct Requests {
    rx: mpsc::Receiver<Request>,
    alive: Arc<AtomicBool>,
}

impl Requests {
    /// Wait for the next request; None once the mount is gone.
    pub fn recv(&self) -> Option<Request> {
        self.rx.recv().ok()
    }

    /// Wait at most `d`; None on timeout or once the mount is gone.
    pub fn recv_timeout(&self, d: Duration) -> Option<Request> {
        self.rx.recv_timeout(d).ok()
    }

    pub fn try_recv(&self) -> Option<Request> {
        self.rx.try_recv().ok()
    }

    /// Every request until the mount is gone.
    pub fn iter(&self) -> impl Iterator<Item = Request> + '_ {
        self.rx.iter()
    }
}

impl Drop for Requests {
    fn drop(&mut self) {
        self.alive.store(false, Ordering::Release);
    }
}

struct Channel {
    tx: mpsc::Sender<Request>,
    alive: Arc<AtomicBool>,
    broker: Approvals,
    uid: u32,
}

impl Listener for Channel {
    fn event(&self, ev: &Event) {
        if let Event::Requested(info) = ev {
            let req = Request {
                info: info.clone(),
                broker: self.broker.clone(),
                uid: self.uid,
            };
            if self.tx.send(req).is_err() {
                self.alive.store(false, Ordering::Release);
            }
        }
    }

    fn gone(&self) -> bool {
        !self.alive.load(Ordering::Acquire)
    }
}

/// Requests of `broker` on a channel. The broker holds the sending end;
/// the returned receiver's drop denies what is pending.
pub fn channel(broker: &Approvals) -> Requests {
    let (tx, rx) = mpsc::channel();
    let alive = Arc::new(AtomicBool::new(true));
    broker.subscribe(Arc::new(Channel {
        tx,
        alive: alive.clone(),
        broker: broker.clone(),
        uid: rustix::process::geteuid().as_raw(),
    }));
    Requests { rx, alive }
}

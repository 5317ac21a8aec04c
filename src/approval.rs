//! The approval broker: where an `ask` decision is sent.
//!
//! The filesystem never waits for a human on a FUSE thread: it hands the
//! request and a continuation to a [`Broker`], which calls the continuation
//! exactly once — at once, or later from another thread — with the verdict.
//! Until the interactive broker exists, [`DenyAll`] answers every request
//! with a denial at once (the behaviour of `--no-approvals`).

use crate::policy::AskItem;

/// What the filesystem asks the broker to decide.
#[derive(Clone, Debug)]
pub struct AskRequest {
    /// Every (class, path) the operation needs approved.
    pub items: Vec<AskItem>,
    /// The FUSE call, for information.
    pub op: &'static str,
    /// Rename or link target, for information.
    pub target: Option<String>,
    pub pid: u32,
    pub uid: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    Deny,
}

/// Called exactly once with the verdict.
pub type Continuation = Box<dyn FnOnce(Verdict) + Send + 'static>;

pub trait Broker: Send + Sync + 'static {
    /// Decide `req`, now or later; call `then` exactly once.
    fn ask(&self, req: AskRequest, then: Continuation);
}

/// Denies every request at once (`--no-approvals`, and the default until
/// interactive approvals exist).
#[derive(Debug, Default, Clone, Copy)]
pub struct DenyAll;

impl Broker for DenyAll {
    fn ask(&self, req: AskRequest, then: Continuation) {
        tracing::info!(op = req.op, pid = req.pid, uid = req.uid, items = ?req.items, "ask denied: no approver");
        then(Verdict::Deny)
    }
}

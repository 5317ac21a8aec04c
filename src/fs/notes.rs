//! What the policy concluded on this thread, for the audit ledger.
//!
//! `Core::gate` knows where an operation lands and what the policy said;
//! the adapter knows the FUSE call and the caller. Rather than thread
//! those through every `check_*`, the core leaves a note on its thread and
//! the adapter's `gated` (which runs right after the check, on the same
//! thread) takes it. Only refusals and mutations allowed in gated zones are
//! noted; the buffer is bounded for checks nobody collects.

use std::cell::RefCell;

use crate::approval::virtual_path;
use crate::config::Approval;
use crate::error::Refusal;
use crate::policy::{Loc, Op};

/// At most this many notes wait on a thread.
const LIMIT: usize = 8;

/// One conclusion of the policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyNote {
    pub zone: Option<String>,
    /// As the worker sees it.
    pub path: String,
    pub target: Option<String>,
    /// `None`: allowed.
    pub refusal: Option<Refusal>,
    /// For a refusal: its explanation.
    pub message: Option<String>,
}

thread_local! {
    static NOTES: RefCell<Vec<PolicyNote>> = const { RefCell::new(Vec::new()) };
}

fn show(at: &Loc<'_>) -> String {
    match at.zone {
        Some(z) => virtual_path(&z.name, at.path),
        None => format!("/{}", at.path.display()),
    }
}

/// The subject of an operation, and its target if it has one.
fn subject<'a>(op: &Op<'a>) -> (Loc<'a>, Option<Loc<'a>>) {
    match *op {
        Op::Read { at, .. }
        | Op::WriteContent { at, .. }
        | Op::NewName { at, .. }
        | Op::Metadata { at }
        | Op::Remove { at } => (at, None),
        Op::Rename { from, to, .. } | Op::Link { from, to } => (from, Some(to)),
    }
}

fn push(op: &Op<'_>, refusal: Option<Refusal>, message: Option<String>) {
    let (at, to) = subject(op);
    let note = PolicyNote {
        zone: at.zone.or(to.and_then(|t| t.zone)).map(|z| z.name.clone()),
        path: show(&at),
        target: to.as_ref().map(show),
        refusal,
        message,
    };
    NOTES.with(|n| {
        let mut n = n.borrow_mut();
        if n.len() >= LIMIT {
            n.remove(0);
        }
        n.push(note);
    });
}

/// A refusal.
pub(crate) fn refused(op: &Op<'_>, r: Refusal, message: String) {
    push(op, Some(r), Some(message));
}

/// An allowed operation: noted only when it changes something in a zone
/// whose write or delete policy is not `preApproved`.
pub(crate) fn allowed(op: &Op<'_>) {
    if matches!(op, Op::Read { .. }) {
        return;
    }
    let (at, _) = subject(op);
    let gated = at.zone.is_some_and(|z| {
        z.approval.write != Approval::PreApproved || z.approval.delete != Approval::PreApproved
    });
    if gated {
        push(op, None, None);
    }
}

/// Take this thread's notes.
pub fn take_notes() -> Vec<PolicyNote> {
    NOTES.with(|n| std::mem::take(&mut *n.borrow_mut()))
}

//! The request path every operation that may be refused or asked about
//! takes: [`Core::gate`] asks the pure policy and keeps what it said (the
//! one place refusals are recorded), [`Core::request_with`] runs the action now
//! or hands it, with its reply, to the broker, so a FUSE thread never
//! waits for a human.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::{Core, Ctx, Respond};
use crate::approval::{AskRequest, Note, Verdict, Wait};
use crate::error::{FsError, FsResult, Refusal};
use crate::fs::changes::Expected;
use crate::policy::{self, Action, AskItem, Class, Decision, Loc, Op, Subject};

/// How long a call the kernel makes holding a lock other calls need waits
/// for a decision before it is told to retry (EAGAIN) and its request
/// stays pending (DESIGN §4). A directory's lock (mkdir, mknod, symlink,
/// link, unlink, rmdir, rename in it): everything else in that directory
/// waits behind the call. A file's or directory's own lock (chmod,
/// chown, utimes, truncate, xattr changes; a pending create's first
/// write): an unlink, rename or link of it waits for that lock while
/// holding its directory's, unkillably, and a rename across directories
/// holds the filesystem's rename lock meanwhile. Long enough for an
/// approver that answers at once (the Rust API, a cached decision in
/// flight), well under the 100 ms the rest of the directory may wait.
pub const LOCK_HOLD: Duration = Duration::from_millis(40);

/// How long an asked call may wait for its decision.
#[derive(Debug, Clone)]
pub(super) enum Hold {
    /// Until the decision (killable): the kernel holds no lock across the
    /// call that another call would wait for (an open).
    Decision,
    /// At most [`LOCK_HOLD`], then EAGAIN and the request stays pending
    /// for the retry: the kernel holds a lock across the call, its
    /// directory's (mkdir, mknod, symlink, link, unlink, rmdir, rename)
    /// or the node's own (chmod, chown, utimes, truncate, setxattr,
    /// removexattr; an open that truncates under the writeback cache).
    Locked,
    /// Until the decision, as [`Hold::Decision`]: a metadata change of a
    /// file whose create is pending (it reaches the daemon by node, not
    /// through the create's handle). Withdrawn (interrupted, its caller
    /// killed), it marks that create as given up, as a held write does:
    /// the request is withdrawn when the file is closed for the last time.
    OnCreate(Arc<super::held::HeldCreate>),
}

/// How many refusals [`Core::recent_refusals`] keeps.
pub const RECENT_REFUSALS: usize = 32;

/// One refusal as `status` and the audit log show it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RecentRefusal {
    pub at: SystemTime,
    pub action: Action,
    /// The path as the worker sees it (a rename's source), exact.
    #[serde(serialize_with = "crate::text::serialize_lossy")]
    pub path: std::path::PathBuf,
    #[serde(skip)]
    pub refusal: Refusal,
    /// The errno's name, e.g. `EROFS`.
    pub errno: &'static str,
    /// One line, as `check` would say it.
    pub reason: String,
    /// The whole explanation, with what would work instead.
    pub message: String,
}

/// What the policy said of an operation that may proceed, and what it
/// will change: the request carries both to its end, and records
/// `expected` in the change report if the operation is done and succeeds.
#[derive(Debug)]
pub struct Gate {
    pub pass: Pass,
    pub expected: Expected,
    /// Shown with an ask, and part of what an allow for a retry is kept
    /// for: a rename's destination, a link's existing file (the items
    /// name only the new name), a symlink's text.
    pub target: Option<std::path::PathBuf>,
    /// A rename's source, shown with an ask.
    pub source: Option<std::path::PathBuf>,
}

/// Whether an operation may proceed now.
#[derive(Debug)]
pub enum Pass {
    Go,
    /// Only once every item is approved.
    Ask(Vec<AskItem>),
}

impl Gate {
    /// Go, changing nothing.
    pub fn go() -> Gate {
        Gate {
            pass: Pass::Go,
            expected: Expected::default(),
            target: None,
            source: None,
        }
    }

    /// Both gates: go when both go, else ask for everything either asks;
    /// expect what both expect.
    pub fn and(self, other: Gate) -> Gate {
        let pass = match (self.pass, other.pass) {
            (Pass::Go, Pass::Go) => Pass::Go,
            (Pass::Ask(a), Pass::Go) | (Pass::Go, Pass::Ask(a)) => Pass::Ask(a),
            (Pass::Ask(mut a), Pass::Ask(b)) => {
                a.extend(b);
                Pass::Ask(a)
            }
        };
        Gate {
            pass,
            expected: self.expected.and(other.expected),
            target: self.target.or(other.target),
            source: self.source.or(other.source),
        }
    }
}

/// How much of a refusal is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keep {
    /// Nothing: a listing leaving a hidden name out, the existence check
    /// before a removal, a probe (`access`), a write through a handle.
    Nothing,
    /// The daemon's log and the recent refusals (`status`): a lookup.
    Status,
    /// Those, the ledger and the counters: an operation that would have
    /// changed something.
    Ledger,
}

impl Core {
    /// Decide `op` for `ctx` and keep what the decision says, as `keep`
    /// asks: a refusal becomes the error to answer with.
    pub(super) fn gate(&self, ctx: &Ctx, op: &Op<'_>, keep: Keep) -> FsResult<Gate> {
        self.settle(ctx, op, policy::decide(op), keep)
    }

    /// [`gate`](Self::gate) with the policy's `decision` already taken.
    pub(super) fn settle(
        &self,
        ctx: &Ctx,
        op: &Op<'_>,
        decision: Decision,
        keep: Keep,
    ) -> FsResult<Gate> {
        // Recorded in the change report only if allowed, done and
        // successful; who makes it is read now, while the caller waits.
        let expected = || match op.changes() {
            true => {
                let e = Expected::of(op);
                match e.is_empty() {
                    true => e,
                    false => e.by(self.who.actor(ctx.pid, ctx.uid)),
                }
            }
            false => Expected::default(),
        };
        match decision {
            Decision::Allow => {
                if keep == Keep::Ledger && op.changes() {
                    self.note_mutation(ctx, op);
                }
                if op.changes() {
                    self.note_staged(ctx, op);
                }
                Ok(Gate {
                    pass: Pass::Go,
                    expected: expected(),
                    target: None,
                    source: None,
                })
            }
            Decision::Ask(items) => Ok(Gate {
                pass: Pass::Ask(items),
                expected: expected(),
                target: match op {
                    Op::Link { from, .. } => Some(policy::exact(*from)),
                    Op::Rename { to, .. } => Some(policy::exact(*to)),
                    _ => None,
                },
                source: match op {
                    Op::Rename { from, .. } => Some(policy::exact(*from)),
                    _ => None,
                },
            }),
            Decision::Refuse(r) => Err(self.refuse(ctx, &Subject::of(op), r, keep)),
        }
    }

    /// Whether `ctx`'s caller may use the mount at all: with `--allow-uid`,
    /// only the listed users, the mounting user and root.
    pub(super) fn admit(&self, ctx: &Ctx) -> FsResult<()> {
        if self.opts.admission.admits(ctx.uid) {
            return Ok(());
        }
        tracing::info!(
            uid = ctx.uid,
            pid = ctx.pid,
            op = ctx.op,
            "refused: not allowed to use this mount"
        );
        Err(FsError::Refused(Refusal::NotAllowed))
    }

    /// Decide a question that is never asked about nor recorded: a write
    /// through a handle approved at its open, or a probe (`access`).
    pub(super) fn question(op: &Op<'_>) -> FsResult<()> {
        match policy::decide(op) {
            Decision::Refuse(r) => Err(FsError::Refused(r)),
            Decision::Allow | Decision::Ask(_) => Ok(()),
        }
    }

    /// Run an operation that `plan` resolves and gates (returning the
    /// action, which holds the resolved nodes), for an admitted caller: act
    /// now, or once the broker's verdict is in (an ask waiting for it as
    /// `hold` says); answer `respond` exactly once either way.
    pub(super) fn request_with<T, A, R>(
        self: &Arc<Self>,
        ctx: Ctx,
        hold: Hold,
        plan: impl FnOnce() -> FsResult<(Gate, A)>,
        respond: R,
    ) where
        T: Send + 'static,
        A: FnOnce(&Core) -> FsResult<T> + Send + 'static,
        R: Respond<T>,
    {
        let wait = match hold {
            _ if !ctx.may_wait => Wait::Unheld,
            Hold::Decision | Hold::OnCreate(_) => Wait::Decision,
            Hold::Locked => Wait::Bounded(LOCK_HOLD),
        };
        let on_create = match hold {
            Hold::OnCreate(held) => Some(held),
            Hold::Decision | Hold::Locked => None,
        };
        let planned = self.admit(&ctx).and_then(|()| plan());
        let (
            Gate {
                pass,
                expected,
                target,
                source,
            },
            act,
        ) = match planned {
            Ok(p) => p,
            Err(e) => return respond.respond(Err(e)),
        };
        let items = match pass {
            Pass::Go => {
                let _still = self.acting();
                let r = act(self);
                if r.is_ok() {
                    self.changelog.record(expected);
                }
                return respond.respond(r);
            }
            Pass::Ask(items) => items,
        };
        let core = Arc::clone(self);
        let first = items.first().cloned();
        let ask = AskRequest {
            items,
            op: ctx.op,
            target,
            source,
            pid: ctx.pid,
            uid: ctx.uid,
            unique: ctx.unique,
            wait,
        };
        self.broker.ask(
            ask,
            Box::new(move |verdict| {
                respond.respond(match verdict {
                    Verdict::Allow => {
                        let _still = core.acting();
                        let r = act(&core);
                        if r.is_ok() {
                            core.changelog.record(expected);
                        }
                        r
                    }
                    v => {
                        if let (Verdict::Withdrawn, Some(held)) = (v, &on_create) {
                            held.gave_up();
                        }
                        Err(core.not_allowed(&ctx, first.as_ref(), v))
                    }
                })
            }),
        );
        self.interrupted_meanwhile(ctx.unique);
    }

    /// The error for a verdict other than allow, kept as it asks.
    pub(super) fn not_allowed(&self, ctx: &Ctx, first: Option<&AskItem>, v: Verdict) -> FsError {
        match v {
            Verdict::Deny | Verdict::Allow => self.denied(ctx, first, Refusal::Denied),
            Verdict::Later(id) => self.denied(ctx, first, Refusal::Awaiting(id)),
            // Interrupted, or being killed: the caller goes on (EINTR).
            Verdict::Withdrawn => FsError::Os(libc::EINTR),
        }
    }

    /// Keep a refusal of `s` as `keep` asks; the error to answer with.
    pub(super) fn refuse(&self, ctx: &Ctx, s: &Subject<'_>, r: Refusal, keep: Keep) -> FsError {
        if keep == Keep::Nothing {
            return FsError::Refused(r);
        }
        if let Some(log) = &self.opts.refusal_log {
            log.note(s, r, &self.zones);
        }
        let e = policy::explain(s, r, &self.zones);
        tracing::info!(refusal = ?r, errno = r.errno_name(), message = %e.message, "refused");
        if keep == Keep::Ledger {
            self.broker.note(&Note {
                refusal: Some(r),
                message: Some(e.message.clone()),
                ..note(ctx, s.at, s.to)
            });
        }
        let mut recent = self.recent.lock();
        if recent.len() == RECENT_REFUSALS {
            recent.pop_front();
        }
        recent.push_back(RecentRefusal {
            at: SystemTime::now(),
            action: s.action,
            path: policy::exact(s.at),
            refusal: r,
            errno: r.errno_name(),
            reason: e.reason,
            message: e.message,
        });
        FsError::Refused(r)
    }

    /// A change allowed without asking, in a zone whose write or delete
    /// policy is not `preApproved`: the ledger lists it.
    fn note_mutation(&self, ctx: &Ctx, op: &Op<'_>) {
        let [at, to] = op.places();
        let Some(at) = at else { return };
        if at.zone.is_some_and(|z| z.gated()) {
            self.broker.note(&Note {
                actor: Some(self.who.actor(ctx.pid, ctx.uid)),
                ..note(ctx, at, to)
            });
        }
    }

    /// A denied (or unanswered, or not yet answered) approval, explained
    /// for `status` and the worker's refusal log; the ledger has the
    /// decision already.
    fn denied(&self, ctx: &Ctx, item: Option<&AskItem>, why: Refusal) -> FsError {
        let Some((item, zone)) =
            item.and_then(|i| Some((i, self.zones.iter().find(|z| z.name == i.zone)?)))
        else {
            return FsError::Refused(why);
        };
        let action = match item.class {
            Class::Write => Action::Write,
            Class::Delete => Action::Delete,
            Class::Read => Action::Read,
        };
        let at = Loc::in_zone(zone, &item.path);
        self.refuse(ctx, &Subject::new(action, at), why, Keep::Status)
    }

    /// The last refusals, oldest first (at most [`RECENT_REFUSALS`]).
    /// The requests answered so far, by opcode.
    pub fn requests(&self) -> &crate::fuse::OpCounts {
        &self.requests
    }

    pub fn recent_refusals(&self) -> Vec<RecentRefusal> {
        self.recent.lock().iter().cloned().collect()
    }
}

/// A ledger note about an operation on `at` (and `to`) for `ctx`.
fn note(ctx: &Ctx, at: Loc<'_>, to: Option<Loc<'_>>) -> Note {
    Note {
        op: ctx.op,
        pid: ctx.pid,
        uid: ctx.uid,
        zone: at.zone.or(to.and_then(|t| t.zone)).map(|z| z.name.clone()),
        path: policy::exact(at),
        target: to.map(policy::exact),
        refusal: None,
        message: None,
        actor: None,
    }
}

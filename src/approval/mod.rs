//! Approvals: where an `ask` decision is sent, and who answers it.
//!
//! The filesystem never waits for a human on a FUSE thread: it hands the
//! request and a continuation to a [`Broker`], which calls the continuation
//! exactly once — at once, or later from another thread — with the verdict.
//!
//! - [`Approvals`] (in `broker/`) is the real broker: a table of pending
//!   requests, allow/deny caches for the rest of the mount, timeouts, and a
//!   watcher that withdraws requests whose caller is being killed.
//! - `caller` reads the facts about a calling process from `/proc`.
//! - [`side`] says who is on the worker's side and may not decide for it.
//! - [`channel`] hands requests to a supervisor that embeds the crate.
//! - `on_ask` and `prompt` are the `--on-ask` hook and the `--prompt` TTY.
//! - [`DenyAll`] answers every request with a denial at once.

mod broker;
pub mod caller;
pub mod channel;
pub mod on_ask;
pub mod prompt;
mod records;
pub mod side;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use broker::Approvals;

use crate::policy::{AskItem, Class};
use crate::text;

/// What the filesystem asks the broker to decide.
#[derive(Clone, Debug)]
pub struct AskRequest {
    /// Every (class, path) the operation needs approved.
    pub items: Vec<AskItem>,
    /// The FUSE call, for information.
    pub op: &'static str,
    /// What the approver is shown beside the path, and what an allow for
    /// a retry is kept for (with `op` and `source`): a rename's
    /// destination, a link's existing file, a symlink's text.
    pub target: Option<PathBuf>,
    /// A rename's source (its items may name only the destination, or
    /// only what it removes).
    pub source: Option<PathBuf>,
    /// FUSE's pid: the calling *thread* id.
    pub pid: u32,
    pub uid: u32,
    /// The FUSE request's id (0: none), which a `FUSE_INTERRUPT` names.
    pub unique: u64,
    /// How the caller waits for the decision.
    pub wait: Wait,
}

/// How the caller of an ask waits (DESIGN §4: an ask holds only the asking
/// call, and never a directory the kernel locked for it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Until the decision (or a timeout, withdrawal, shutdown).
    Decision,
    /// At most this long; then it is answered [`Verdict::Later`] and the
    /// request stays pending for a retry of the same (class, path) by the
    /// same uid, which joins it, or, once allowed, is let through
    /// (see [`GRANT_KEPT`]).
    Bounded(Duration),
    /// The call was answered already (a create made at once, its first
    /// write held): the request stays until decided, timed out, or
    /// withdrawn by [`Broker::interrupt`] of this request's `unique`; a
    /// process that goes away does not withdraw it.
    Detached,
    /// The call may not wait: its transport could not serve other
    /// requests meanwhile (an io_uring queue all but full of calls
    /// waiting for decisions). Allowed if an earlier decision covers it,
    /// else refused at once and logged why.
    Unheld,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    /// Denied, timed out, or no approver: EACCES.
    Deny,
    /// The caller is being killed or is gone, or was interrupted: EINTR.
    Withdrawn,
    /// Not decided within a [`Wait::Bounded`] hold: request `id` stays
    /// pending; retry once it is decided (EAGAIN).
    Later(u64),
}

/// How long an allow-once of a request nobody waits for any more (its
/// caller was told to retry) is kept for that retry.
pub const GRANT_KEPT: Duration = Duration::from_secs(300);

/// The most requests pending at once on one mount. Past it, an ask that
/// joins no pending request is refused at once (EACCES, in the ledger
/// with its reason): a worker can't grow the daemon's memory, the ledger
/// and the approver's list without bound (each told-to-retry mkdir of a
/// new name would otherwise leave one more request until its timeout).
pub const MAX_PENDING: usize = 1024;

/// Called exactly once with the verdict.
pub type Continuation = Box<dyn FnOnce(Verdict) + Send + 'static>;

/// Something the policy concluded without asking anyone, for the ledger and
/// the counters: a refusal, or a mutation allowed in a gated zone.
#[derive(Clone, Debug)]
pub struct Note {
    pub op: &'static str,
    /// FUSE's pid (thread id).
    pub pid: u32,
    pub uid: u32,
    pub zone: Option<String>,
    /// The path as the worker sees it (`/zone/dir/name`), exact.
    pub path: PathBuf,
    pub target: Option<PathBuf>,
    /// `None`: allowed (a mutation); `Some`: refused.
    pub refusal: Option<crate::error::Refusal>,
    /// For a refusal: the explanation, as `check` would give it.
    pub message: Option<String>,
    /// For a mutation: who made it (read when it was allowed).
    pub actor: Option<crate::actor::Actor>,
}

pub trait Broker: Send + Sync + 'static {
    /// Decide `req`, now or later; call `then` exactly once.
    fn ask(&self, req: AskRequest, then: Continuation);

    /// Record a refusal or an allowed mutation (default: nothing).
    fn note(&self, _note: &Note) {}

    /// The FUSE request `unique` was interrupted (`FUSE_INTERRUPT`: its
    /// caller got a signal): answer its waiting continuation
    /// [`Verdict::Withdrawn`]. False when no waiting call has that id.
    fn interrupt(&self, _unique: u64) -> bool {
        false
    }

    /// Answer every call waiting on the pending request that the call
    /// `with` asked (but that call itself, answered already)
    /// [`Verdict::Later`]: the request stays pending, joined by a retry
    /// of the same paths by the same uid. How many were answered.
    fn release(&self, _with: u64) -> usize {
        0
    }

    /// Make `then` wait on the pending request that the call `with`
    /// (a `unique`) asked, as the call `unique` of thread `tid`: a later
    /// step of the same work (the first write of a file whose create is
    /// pending). `Err(then)` when no pending request has that call.
    fn join(
        &self,
        _with: u64,
        _unique: u64,
        _tid: u32,
        then: Continuation,
    ) -> Result<(), Continuation> {
        Err(then)
    }
}

/// Denies every request at once (a mount started without a broker).
#[derive(Debug, Default, Clone, Copy)]
pub struct DenyAll;

impl Broker for DenyAll {
    fn ask(&self, req: AskRequest, then: Continuation) {
        tracing::info!(op = req.op, pid = req.pid, uid = req.uid, items = ?req.items, "ask denied: no approver");
        then(Verdict::Deny)
    }
}

/// How long an allow lasts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// This one request.
    #[default]
    Once,
    /// The same class on the same path, for the rest of the mount.
    Path,
    /// The same class anywhere in the zone, for the rest of the mount.
    Zone,
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Scope::Once => "once",
            Scope::Path => "path",
            Scope::Zone => "zone",
        })
    }
}

impl std::str::FromStr for Scope {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "once" => Ok(Scope::Once),
            "path" => Ok(Scope::Path),
            "zone" => Ok(Scope::Zone),
            _ => Err(format!("unknown scope '{s}': use once, path or zone")),
        }
    }
}

/// An approver's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Allow(Scope),
    Deny,
}

pub fn class_name(c: Class) -> &'static str {
    match c {
        Class::Write => "write",
        Class::Delete => "delete",
        Class::Read => "read",
    }
}

/// A path as the worker sees it: `/zone/rel`, its exact bytes.
pub fn virtual_path(zone: &str, rel: &Path) -> PathBuf {
    crate::policy::worker_path_exact(Some(zone), rel)
}

/// One (class, path) a request needs approved.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemInfo {
    pub class: String,
    pub zone: String,
    pub path: String,
    /// `path`'s exact bytes (base64) when they are not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_b64: Option<String>,
}

impl ItemInfo {
    pub fn new(class: &str, zone: &str, path: &Path) -> Self {
        let (path, path_b64) = text::path_for_json(path);
        ItemInfo {
            class: class.into(),
            zone: zone.into(),
            path,
            path_b64,
        }
    }
}

/// A pending request as approvers see it (control socket, API, hook).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestInfo {
    pub id: u64,
    pub zone: String,
    /// `write`, `delete`, or both joined by `+` (a rename).
    pub class: String,
    /// The FUSE call, for information.
    pub op: String,
    /// The path as the worker sees it (the source of a rename).
    pub path: String,
    /// `path`'s exact bytes (base64) when they are not UTF-8 (`path` then
    /// holds U+FFFD in their place); likewise `target_b64`, `cmdline_b64`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_b64: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_b64: Option<String>,
    /// The calling process (thread group) id.
    pub pid: u32,
    pub uid: u32,
    /// `/proc/PID/cmdline`, arguments joined by spaces.
    pub cmdline: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmdline_b64: Option<String>,
    /// When it was asked (RFC 3339, UTC).
    pub time: String,
    /// Seconds until it times out (at the time it was listed).
    #[serde(default)]
    pub timeout_secs: u64,
    /// Everything the operation needs approved.
    pub items: Vec<ItemInfo>,
    /// The worker was told to retry once this is decided (the call held a
    /// directory's lock, so it could not wait): an allow-once is kept for
    /// that retry.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub retry: bool,
    /// Calls held now until this is decided (at the time it was listed):
    /// the asking call itself, or, for a create whose empty file was made
    /// at once, the writes (fsync, truncate...) on that file. 0 (left out)
    /// when nothing waits: a create's file not written yet, or a caller
    /// told to retry.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub waiting: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl RequestInfo {
    /// The path for people: escaped ([`text::escape`]).
    pub fn shown_path(&self) -> String {
        text::shown_path(&self.path, self.path_b64.as_deref())
    }

    /// The target for people, escaped.
    pub fn shown_target(&self) -> Option<String> {
        let t = self.target.as_deref()?;
        Some(text::shown_path(t, self.target_b64.as_deref()))
    }

    /// The command line for people, escaped ([`text::cmdline`]).
    pub fn shown_cmdline(&self) -> String {
        text::shown_cmdline(&self.cmdline, self.cmdline_b64.as_deref())
    }

    /// The exact bytes of the path.
    pub fn path_bytes(&self) -> Vec<u8> {
        text::from_json(&self.path, self.path_b64.as_deref())
    }

    /// The exact bytes of the command line.
    pub fn cmdline_bytes(&self) -> Vec<u8> {
        text::from_json(&self.cmdline, self.cmdline_b64.as_deref())
    }
}

/// Where the kernel aborts a FUSE connection whose request outlives a
/// limit, keep the approval timeout below it. `default_secs`/`max_secs` are
/// `/proc/sys/fs/fuse/{default,max}_request_timeout` (0: no limit). Returns
/// the timeout to use and whether it was capped.
pub fn cap_timeout(wanted: Duration, default_secs: u64, max_secs: u64) -> (Duration, bool) {
    let limit = [default_secs, max_secs]
        .into_iter()
        .filter(|&s| s > 0)
        .min();
    let Some(limit) = limit else {
        return (wanted, false);
    };
    // The kernel checks its timeouts periodically, not to the second:
    // leave a quarter (at most 30 s) of margin, and at least 1 s.
    let margin = (limit / 4).clamp(1, 30);
    let cap = Duration::from_secs(limit.saturating_sub(margin).max(1));
    if wanted > cap {
        (cap, true)
    } else {
        (wanted, false)
    }
}

/// [`cap_timeout`] with the kernel's current settings.
pub fn cap_timeout_for_kernel(wanted: Duration) -> (Duration, bool) {
    let read = |name: &str| {
        std::fs::read_to_string(format!("/proc/sys/fs/fuse/{name}"))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    cap_timeout(
        wanted,
        read("default_request_timeout"),
        read("max_request_timeout"),
    )
}

/// A broker's settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The mountpoint (for the ledger and the hook).
    pub mountpoint: PathBuf,
    /// How long a request waits before it is denied.
    pub timeout: Duration,
    /// `--no-approvals`: every `ask` is denied at once.
    pub no_approvals: bool,
    /// The mount's owner: its requests and root's are not held to a
    /// share of [`MAX_PENDING`] ([`OTHERS_PENDING`]).
    pub owner_uid: u32,
}

/// How many requests a user other than the mount's owner and root may
/// have pending at once, and all such users together: a quarter and half
/// of [`MAX_PENDING`], so that users let in with `--allow-other` can't
/// fill the table and have the owner's asks refused (found by an attack
/// pass: ten processes of one uid held all 1,024).
pub const OTHERS_PENDING: (usize, usize) = (MAX_PENDING / 4, MAX_PENDING / 2);

/// What happened to a request, for watchers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "lowercase")]
pub enum Resolution {
    Allow {
        scope: Scope,
        #[serde(skip_serializing_if = "Option::is_none")]
        approver_uid: Option<u32>,
    },
    Deny {
        #[serde(skip_serializing_if = "Option::is_none")]
        approver_uid: Option<u32>,
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    Timeout,
    Withdrawn,
}

/// What listeners hear.
#[derive(Clone, Debug)]
// A request (with its exact names) outweighs the other variants; events
// are few and short-lived, and boxing it would change a public type.
#[allow(clippy::large_enum_variant)]
pub enum Event {
    /// A new request is waiting.
    Requested(RequestInfo),
    /// A request is no longer waiting.
    Resolved { id: u64, resolution: Resolution },
}

/// Someone who hears about requests: the control socket's watchers, the
/// Rust API's channel, the `--on-ask` hook, the prompt.
pub trait Listener: Send + Sync + 'static {
    fn event(&self, ev: &Event);
    /// True once this listener's approver is gone for good. The broker then
    /// stops asking: it denies what is pending and every later `ask` (the
    /// Rust API's "dropping the receiver denies what is pending").
    fn gone(&self) -> bool {
        false
    }
    /// The broker is closing (the unmount, the daemon's end): end what
    /// this listener started (the `--on-ask` hooks). May wait a moment;
    /// never called on a FUSE request's thread.
    fn close(&self) {}
}

/// Why a decision could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecideError {
    #[error("no pending request {0}: it was decided, timed out or withdrawn, or never existed")]
    NotPending(u64),
    #[error("request {id} can't be decided from here (it still waits, {left} s left): {why}")]
    OwnSide { id: u64, left: u64, why: String },
}

/// Running totals for `status`.
#[derive(Debug, Default)]
pub struct Counters {
    pub requests: AtomicU64,
    pub allowed: AtomicU64,
    pub denied: AtomicU64,
    pub timeouts: AtomicU64,
    pub withdrawn: AtomicU64,
    pub cached_allows: AtomicU64,
    pub cached_denials: AtomicU64,
    pub refusals: AtomicU64,
    pub mutations: AtomicU64,
    /// Requests that got no `--on-ask` hook: as many ran already
    /// ([`on_ask::MAX_RUNNING`]). Shared with the hook's listener.
    pub hooks_skipped: std::sync::Arc<AtomicU64>,
}

impl Counters {
    pub fn snapshot(&self) -> BTreeMap<&'static str, u64> {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        BTreeMap::from([
            ("requests", g(&self.requests)),
            ("allowed", g(&self.allowed)),
            ("denied", g(&self.denied)),
            ("timeouts", g(&self.timeouts)),
            ("withdrawn", g(&self.withdrawn)),
            ("cached_allows", g(&self.cached_allows)),
            ("cached_denials", g(&self.cached_denials)),
            ("refusals", g(&self.refusals)),
            ("mutations", g(&self.mutations)),
            ("hooks_skipped", g(&self.hooks_skipped)),
        ])
    }
}

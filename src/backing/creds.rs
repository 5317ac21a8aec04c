//! Switching a FUSE thread to the caller's credentials.
//!
//! [`AsCaller`] makes the host kernel check each request with the rights of
//! the [`Caller`] the FUSE kernel module names (uid, gid, supplementary
//! groups from `/proc/PID/status`), and restores the daemon's on drop;
//! `as_daemon` briefly takes the daemon's uid back for the one call that
//! needs its capability (`open_by_handle_at`).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, OnceLock};

use parking_lot::Mutex;

use super::Sys;

/// Who is making a request, as the kernel tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    /// The calling thread (FUSE passes the thread id).
    pub pid: u32,
}

/// The supplementary groups of a thread, from `/proc/PID/status` (None
/// when it is gone).
fn groups_of(pid: u32) -> Option<Vec<rustix::fs::Gid>> {
    let status = crate::text::read_lossy(format!("/proc/{pid}/status"))?;
    let groups = status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| {
            g.split_whitespace()
                .filter_map(|n| n.parse::<u32>().ok())
                .map(rustix::fs::Gid::from_raw)
                .collect()
        })
        .unwrap_or_default();
    Some(groups)
}

/// How long a caller's supplementary groups, once read, are used for its
/// requests. Reading `/proc/PID/status` is most of what switching to a
/// caller costs (the kernel formats the whole status: about a sixth of the
/// daemon's time for a non-root caller's creates); a thread's groups
/// rarely change, and when they do the kernel's own check
/// (`default_permissions`, with the caller's current groups) still comes
/// first, so a stale set is never the only check for longer than this.
const GROUPS_KEPT_FOR: std::time::Duration = std::time::Duration::from_secs(1);

/// Callers whose groups are kept at most (then the expired ones go, or all).
const GROUPS_KEPT_MAX: usize = 1024;

type GroupsKept = HashMap<(u32, u32, u32), (std::time::Instant, Arc<[rustix::fs::Gid]>)>;

/// A caller's supplementary groups, read again once [`GROUPS_KEPT_FOR`]
/// has passed, keyed by thread id, uid and gid (a thread that changes its
/// uid or gid is read afresh at once).
pub(super) fn groups_for(c: &Caller) -> Arc<[rustix::fs::Gid]> {
    static KEPT: LazyLock<Mutex<GroupsKept>> = LazyLock::new(Mutex::default);
    let key = (c.pid, c.uid, c.gid);
    let now = std::time::Instant::now();
    if let Some((at, groups)) = KEPT.lock().get(&key) {
        if now.duration_since(*at) < GROUPS_KEPT_FOR {
            return groups.clone();
        }
    }
    let Some(groups) = groups_of(c.pid) else {
        return Arc::from([]);
    };
    let groups: Arc<[rustix::fs::Gid]> = groups.into();
    let mut kept = KEPT.lock();
    if kept.len() >= GROUPS_KEPT_MAX {
        kept.retain(|_, (at, _)| now.duration_since(*at) < GROUPS_KEPT_FOR);
        if kept.len() >= GROUPS_KEPT_MAX {
            kept.clear();
        }
    }
    kept.insert(key, (now, groups.clone()));
    groups
}

/// Whether the calling thread holds CAP_SYS_ADMIN in the daemon's user
/// namespace: what the kernel asks (`capable()`) before it shows a
/// `trusted.*` xattr. A thread that is gone, unnamed (pid 0: outside the
/// daemon's pid namespace), in another user namespace or unreadable counts
/// as without it.
pub fn caller_has_sys_admin(c: &Caller) -> bool {
    caller_has(c, rustix::thread::CapabilitySet::SYS_ADMIN)
}

/// Whether the calling thread holds every capability of `caps` in the
/// daemon's user namespace (as [`caller_has_sys_admin`]).
pub fn caller_has(c: &Caller, caps: rustix::thread::CapabilitySet) -> bool {
    let Some(pid) = rustix::process::Pid::from_raw(c.pid as i32) else {
        return false;
    };
    let effective =
        rustix::thread::capabilities(Some(pid)).is_ok_and(|held| held.effective.contains(caps));
    let user_ns = |p: &str| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()))
    };
    effective && {
        let theirs = user_ns(&format!("/proc/{}/ns/user", c.pid));
        theirs.is_some() && theirs == user_ns("/proc/thread-self/ns/user")
    }
}

/// The daemon's own supplementary groups, restored after each caller's
/// (read once: nothing in the daemon changes them).
fn daemon_groups() -> &'static [rustix::fs::Gid] {
    static GROUPS: OnceLock<Vec<rustix::fs::Gid>> = OnceLock::new();
    GROUPS.get_or_init(|| rustix::process::getgroups().unwrap_or_default())
}

/// While alive, this thread's file-system credentials are the caller's:
/// effective uid/gid (and so fsuid/fsgid) and supplementary groups. A
/// non-zero effective uid also drops the thread's effective capabilities,
/// so the host kernel checks the caller's rights as if it acted itself.
/// Only a daemon running as root switches, and only for callers other than
/// root; the previous credentials come back on drop.
#[derive(Debug)]
#[must_use]
pub struct AsCaller {
    /// Whether the thread switched (and so switches back on drop).
    switched: bool,
}

thread_local! {
    /// The uid this thread acts as while an [`AsCaller`] is alive.
    static ACTING_AS: std::cell::Cell<Option<u32>> = const { std::cell::Cell::new(None) };
}

/// Run `f` with the daemon's effective uid (and so its capabilities) even
/// if this thread is acting as a caller, then act as the caller again.
pub(super) fn as_daemon<T>(f: impl FnOnce() -> T) -> T {
    let Some(uid) = ACTING_AS.get() else {
        return f();
    };
    if let Err(e) = rustix::thread::set_thread_res_uid(None, Some(rustix::fs::Uid::ROOT), None) {
        // Still the caller: `f` fails with the caller's rights, no worse.
        tracing::warn!("cannot take back the daemon's uid: {e}");
        return f();
    }
    let r = f();
    let back = rustix::thread::set_thread_res_uid(None, Some(rustix::fs::Uid::from_raw(uid)), None);
    if let Err(e) = back {
        // Going on as root would act for the caller with the daemon's
        // rights: stopping is the only safe answer.
        tracing::error!("cannot act as uid {uid} again: {e}; aborting");
        std::process::abort();
    }
    r
}

impl AsCaller {
    /// Whether this thread now acts with the caller's ids (false: the
    /// daemon's own serve, as for a caller of the daemon's uid or root).
    pub fn switched(&self) -> bool {
        self.switched
    }

    pub fn enter(c: &Caller) -> Sys<AsCaller> {
        // The process's euid, read once (a thread's own changes only while
        // an `AsCaller` is alive, and they never nest).
        static DAEMON_IS_ROOT: OnceLock<bool> = OnceLock::new();
        let daemon_is_root = *DAEMON_IS_ROOT.get_or_init(|| rustix::process::geteuid().is_root());
        if !daemon_is_root || c.uid == 0 {
            return Ok(AsCaller { switched: false });
        }
        // Never nested: the daemon's groups are read, once, as the daemon.
        debug_assert!(ACTING_AS.get().is_none(), "AsCaller entered twice");
        daemon_groups();
        let groups = groups_for(c);
        // Order matters: groups and gid while still root, then the uid.
        rustix::thread::set_thread_groups(&groups)?;
        let undo = AsCaller { switched: true };
        rustix::thread::set_thread_res_gid(None, Some(rustix::fs::Gid::from_raw(c.gid)), None)?;
        rustix::thread::set_thread_res_uid(None, Some(rustix::fs::Uid::from_raw(c.uid)), None)?;
        ACTING_AS.set(Some(c.uid));
        Ok(undo)
    }
}

impl Drop for AsCaller {
    fn drop(&mut self) {
        if !std::mem::take(&mut self.switched) {
            return;
        }
        ACTING_AS.set(None);
        let root_uid = rustix::fs::Uid::ROOT;
        let root_gid = rustix::fs::Gid::ROOT;
        let restored = rustix::thread::set_thread_res_uid(None, Some(root_uid), None)
            .and_then(|()| rustix::thread::set_thread_res_gid(None, Some(root_gid), None))
            .and_then(|()| rustix::thread::set_thread_groups(daemon_groups()));
        if let Err(e) = restored {
            // A FUSE thread left with a worker's identity would act for the
            // next caller with the wrong rights: stopping is the only safe
            // answer.
            tracing::error!("cannot restore the daemon's credentials: {e}; aborting");
            std::process::abort();
        }
    }
}

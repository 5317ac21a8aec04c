//! Switching a FUSE thread to the caller's credentials.
//!
//! [`AsCaller`] makes the host kernel check each request with the rights of
//! the [`Caller`] the FUSE kernel module names (uid, gid, supplementary
//! groups from `/proc/PID/status`), and restores the daemon's on drop;
//! `as_daemon` briefly takes the daemon's uid back for the one call that
//! needs its capability (`open_by_handle_at`).

use super::Sys;

/// Who is making a request, as the kernel tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    /// The calling thread (FUSE passes the thread id).
    pub pid: u32,
}

/// The supplementary groups of a thread, from `/proc/PID/status`
/// (empty when it is gone).
fn groups_of(pid: u32) -> Vec<rustix::fs::Gid> {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return Vec::new();
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| {
            g.split_whitespace()
                .filter_map(|n| n.parse::<u32>().ok())
                .map(rustix::fs::Gid::from_raw)
                .collect()
        })
        .unwrap_or_default()
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
    /// The daemon's own supplementary groups, when switched.
    saved: Option<Vec<rustix::fs::Gid>>,
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
    pub fn enter(c: &Caller) -> Sys<AsCaller> {
        // The process's euid, read once (a thread's own changes only while
        // an `AsCaller` is alive, and they never nest).
        static DAEMON_IS_ROOT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let daemon_is_root = *DAEMON_IS_ROOT.get_or_init(|| rustix::process::geteuid().is_root());
        if !daemon_is_root || c.uid == 0 {
            return Ok(AsCaller { saved: None });
        }
        let saved = rustix::process::getgroups()?;
        let groups = groups_of(c.pid);
        // Order matters: groups and gid while still root, then the uid.
        rustix::thread::set_thread_groups(&groups)?;
        let undo = AsCaller { saved: Some(saved) };
        rustix::thread::set_thread_res_gid(None, Some(rustix::fs::Gid::from_raw(c.gid)), None)?;
        rustix::thread::set_thread_res_uid(None, Some(rustix::fs::Uid::from_raw(c.uid)), None)?;
        ACTING_AS.set(Some(c.uid));
        Ok(undo)
    }
}

impl Drop for AsCaller {
    fn drop(&mut self) {
        let Some(saved) = self.saved.take() else {
            return;
        };
        ACTING_AS.set(None);
        let root_uid = rustix::fs::Uid::ROOT;
        let root_gid = rustix::fs::Gid::ROOT;
        let restored = rustix::thread::set_thread_res_uid(None, Some(root_uid), None)
            .and_then(|()| rustix::thread::set_thread_res_gid(None, Some(root_gid), None))
            .and_then(|()| rustix::thread::set_thread_groups(&saved));
        if let Err(e) = restored {
            // A FUSE thread left with a worker's identity would act for the
            // next caller with the wrong rights: stopping is the only safe
            // answer.
            tracing::error!("cannot restore the daemon's credentials: {e}; aborting");
            std::process::abort();
        }
    }
}

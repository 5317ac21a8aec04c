//! `run --isolate`: the zones bound straight from their backing dirs
//! (those `policy::direct` finds no rule the daemon must enforce in, less
//! the ones `--no-direct`/`--via-daemon` keep on it), each backing dir
//! opened and checked for bwrap, and the lines that say which zone went
//! which way.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use rustix::fs::{Mode, OFlags};
use rustix::io::FdFlags;

use super::super::Failure;
use crate::config::{Access, ZoneTable};
use crate::control::protocol::IsolateRoute;
use crate::policy::direct::{self, Route};

/// What keeps zones on the daemon though nothing needs it there.
#[derive(Debug, Clone, Default)]
pub(super) struct Keep {
    /// `--no-direct`: every zone.
    pub(super) all: bool,
    /// `--via-daemon ZONE`, repeatable.
    pub(super) zones: Vec<String>,
    /// `--user`: the worker is another uid, which may not reach the
    /// backing dir the mount's daemon reaches for it.
    pub(super) other_user: bool,
    /// The installed bwrap has no `--bind-fd` (before 0.10, unless
    /// backported): a bind by path could be swapped under it.
    pub(super) no_bind_fd: bool,
    /// CMD runs as root (uid 0 on the host, without capabilities): in a
    /// rw zone bound straight it could make a file setuid root, which
    /// any user of the host could then run as root; the daemon refuses
    /// that. Read-only zones are bound all the same.
    pub(super) root_worker: bool,
}

/// For each zone of `table`, in order, whether it is bound straight from
/// its backing dir. A `--via-daemon` that names no zone is refused.
pub(super) fn chosen(table: &ZoneTable, keep: &Keep) -> Result<Vec<bool>, Failure> {
    if let Some(n) = keep
        .zones
        .iter()
        .find(|n| !table.zones.iter().any(|z| &z.name == *n))
    {
        let names: Vec<&str> = table.zones.iter().map(|z| z.name.as_str()).collect();
        return Err(Failure::new(
            2,
            format!(
                "run: --via-daemon {n}: no such zone (the zones: {})",
                if names.is_empty() {
                    "none".to_owned()
                } else {
                    names.join(", ")
                }
            ),
        ));
    }
    Ok(table
        .zones
        .iter()
        .map(|z| {
            let kept = keep.all
                || keep.other_user
                || keep.no_bind_fd
                || keep.zones.contains(&z.name)
                || keep.root_worker && z.policy.access == Access::Rw;
            !kept && direct::route(&z.policy) == Route::Direct
        })
        .collect())
}

/// One line per zone for `run`'s start: which way it went and why.
pub(super) fn lines(table: &ZoneTable, chosen: &[bool], keep: &Keep) -> Vec<String> {
    table
        .zones
        .iter()
        .zip(chosen)
        .map(|(z, bound)| {
            let mut r = IsolateRoute::of(&z.policy, *bound);
            if !bound && direct::route(&z.policy) == Route::Direct {
                if keep.all {
                    r.why = "kept on the daemon: --no-direct".into();
                } else if keep.zones.contains(&z.name) {
                    r.why = format!("kept on the daemon: --via-daemon {}", z.name);
                } else if keep.other_user {
                    r.why = "kept on the daemon: --user runs CMD as a uid that may not reach the backing dir".into();
                } else if keep.no_bind_fd {
                    r.why = "kept on the daemon: this bwrap has no --bind-fd (bubblewrap 0.10 or later has)".into();
                } else if keep.root_worker && z.policy.access == Access::Rw {
                    r.why = "kept on the daemon: CMD runs as root, and bound straight it could make files setuid root on the host (the daemon refuses that; --user UID runs it as another uid)".into();
                }
            }
            r.line(&z.name, &z.backing)
        })
        .collect()
}

/// `backing` opened for bwrap's `--bind-fd`: a directory fd, checked to
/// be the directory at that (resolved) path now, so a path component
/// swapped for a symlink since the config was read is refused, not
/// followed; left open across exec (bwrap binds it, then closes it before
/// CMD runs).
pub(super) fn open_backing(zone: &str, backing: &Path) -> Result<OwnedFd, Failure> {
    let fail = |why: String| {
        Failure::new(
            1,
            format!(
                "run: zone {zone}: cannot bind {} straight from the host ({why}); --via-daemon {zone} keeps it on the daemon",
                crate::text::path(backing)
            ),
        )
    };
    let fd = rustix::fs::open(
        backing,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| fail(e.to_string()))?;
    let at = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map_err(|e| fail(e.to_string()))?;
    if at != backing {
        return Err(fail(format!(
            "the path now leads to {}",
            crate::text::path(&at)
        )));
    }
    rustix::io::fcntl_setfd(&fd, FdFlags::empty()).map_err(|e| fail(e.to_string()))?;
    Ok(fd)
}

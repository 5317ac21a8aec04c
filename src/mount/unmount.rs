//! Taking a mount down: detach exactly one path (umount2 as root,
//! `fusermount3 -u` otherwise), refuse anything that is not a zonemount
//! mount, and wait for the daemon to exit.

use std::path::Path;
use std::time::{Duration, Instant};

use super::mountinfo::{absolute, find_mount};
use super::registry::{forget, read_record};
use super::show;

#[derive(Debug, thiserror::Error)]
pub enum UnmountError {
    #[error("{0} is a {1} mount, not a zonemount mount: not touching it")]
    NotOurs(String, String),
    #[error(
        "{0} is busy (a process has a file open or its working directory inside): close them, or use --lazy"
    )]
    Busy(String),
    #[error("unmounting {0} failed: {1}")]
    Failed(String, String),
}

#[derive(Debug, PartialEq, Eq)]
pub enum Unmounted {
    Done,
    NotMounted,
    /// Unmounted, but the daemon had not exited within the wait.
    DaemonLingers(u32),
}

/// Why a daemon may outlive its unmount, in words (empty when no cause
/// is seen): a copy of the mount in another mount namespace.
pub fn lingers_because(path: &Path) -> String {
    let others = super::mountinfo::elsewhere(&absolute(path));
    let Some(first) = others.first() else {
        return String::new();
    };
    let more = match others.len() {
        1 => String::new(),
        n => format!(" and {} more", n - 1),
    };
    format!(
        ": the mount lives on in another mount namespace, that of pid {} ({}){more}, made while it was mounted; the daemon serves it there until that namespace ends or unmounts it",
        first.pid,
        crate::text::message(&first.comm),
    )
}

/// How long [`unmount`] waits for the daemon to exit.
pub const DAEMON_EXIT_WAIT: Duration = Duration::from_secs(10);

pub fn process_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| !s.contains(") Z "))
            .unwrap_or(false)
}

/// Unmount exactly `path` (root: umount2; others: fusermount3 -u).
pub fn detach(path: &Path, lazy: bool) -> Result<(), UnmountError> {
    if rustix::process::geteuid().is_root() {
        let flags = if lazy {
            rustix::mount::UnmountFlags::DETACH
        } else {
            rustix::mount::UnmountFlags::empty()
        };
        return match rustix::mount::unmount(path, flags) {
            Ok(()) => Ok(()),
            Err(rustix::io::Errno::BUSY) => Err(UnmountError::Busy(show(path))),
            Err(e) => Err(UnmountError::Failed(show(path), e.to_string())),
        };
    }
    let mut cmd = std::process::Command::new("fusermount3");
    cmd.arg("-u");
    if lazy {
        cmd.arg("-z");
    }
    let out = cmd
        .arg("--")
        .arg(path)
        .output()
        .map_err(|e| UnmountError::Failed(show(path), format!("fusermount3: {e}")))?;
    if out.status.success() {
        return Ok(());
    }
    let msg = String::from_utf8_lossy(&out.stderr).trim().to_string();
    if msg.contains("busy") {
        Err(UnmountError::Busy(show(path)))
    } else {
        Err(UnmountError::Failed(show(path), msg))
    }
}

/// [`detach`], lazily when that fails: how a daemon (or the Rust API)
/// unmounts its own mount (a mount made with mount(2) has no `fusermount3 -u`
/// to fall back on).
pub fn detach_or_lazily(path: &Path) -> Result<(), UnmountError> {
    detach(path, false).or_else(|e| {
        tracing::warn!("unmount failed ({e}); detaching lazily");
        detach(path, true)
    })
}

/// Unmount a zonemount mount at exactly `path` and wait for its daemon.
pub fn unmount(path: &Path, lazy: bool) -> Result<Unmounted, UnmountError> {
    let path = absolute(path);
    let Some(entry) = find_mount(&path) else {
        forget(&path);
        return Ok(Unmounted::NotMounted);
    };
    if !entry.is_zonemount() {
        return Err(UnmountError::NotOurs(show(&path), entry.fstype));
    }
    let record = read_record(&path);
    if let Err(e) = detach(&path, lazy) {
        // Gone meanwhile (its watcher took a dead daemon's mount down
        // between the look and the detach): what was asked is done.
        if find_mount(&path).is_none_or(|m| !m.is_zonemount()) {
            forget(&path);
            return Ok(Unmounted::NotMounted);
        }
        return Err(e);
    }
    let Some(rec) = record else {
        return Ok(Unmounted::Done);
    };
    let deadline = Instant::now() + DAEMON_EXIT_WAIT;
    while process_alive(rec.pid) {
        if Instant::now() > deadline {
            return Ok(Unmounted::DaemonLingers(rec.pid));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    forget(&path);
    Ok(Unmounted::Done)
}

//! Taking a mount down: detach exactly one path (umount2 as root,
//! `fusermount3 -u` otherwise), refuse anything that is not a zonemount
//! mount, and wait for the daemon to exit.

use std::path::Path;
use std::time::{Duration, Instant};

use super::mountinfo::{MountEntry, absolute, find_mount};
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

/// Why a daemon is not gone though its main thread has exited, in words
/// (empty otherwise): threads of it still ending, which hold its files.
pub fn still_ending(pid: u32) -> String {
    if process_alive(pid) || process_ended(pid) {
        return String::new();
    }
    let left = crate::text::read_lossy(format!("/proc/{pid}/status"))
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|t| t.trim().parse::<u32>().ok())
        })
        .map_or(1, |n| n.saturating_sub(1));
    let threads = if left == 1 { "thread" } else { "threads" };
    format!(
        ": its main thread has exited, but {left} other {threads} of it had not ended yet; until they do, it can still hold its files (a stage dir's lock among them)"
    )
}

/// How long [`unmount`] waits for the daemon to exit.
pub const DAEMON_EXIT_WAIT: Duration = Duration::from_secs(10);

/// Whether process `pid`'s main thread is alive (not gone, not a zombie):
/// a daemon that still serves. One whose main thread has exited may still
/// be ending (see [`wait_ended`]); it serves nothing any more.
pub fn process_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && crate::text::read_lossy(format!("/proc/{pid}/stat")).is_some_and(|s| !s.contains(") Z "))
}

/// Whether process `pid` has ended entirely: gone, or a zombie with no
/// thread left. A process whose main thread has exited while other
/// threads still run (each thread is torn down in turn once the process
/// exits) reads `State: Z` with `Threads:` above 1, and keeps its files
/// open until its last thread ends: a stage dir's lock among them.
pub fn process_ended(pid: u32) -> bool {
    let Some(status) = crate::text::read_lossy(format!("/proc/{pid}/status")) else {
        return true;
    };
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .map(str::trim)
    };
    let zombie = field("State:").is_some_and(|s| s.starts_with('Z') || s.starts_with('X'));
    let threads: u32 = field("Threads:").and_then(|t| t.parse().ok()).unwrap_or(1);
    zombie && threads <= 1
}

/// A process to wait for: a pidfd of it where the kernel has them (it
/// stays that process's even once its pid is reused), else its pid.
#[derive(Debug)]
pub struct Exiting {
    pid: u32,
    pidfd: Option<std::os::fd::OwnedFd>,
}

impl Exiting {
    /// Take hold of process `pid` (do it while it is known to be alive).
    pub fn of(pid: u32) -> Exiting {
        let pidfd = rustix::process::Pid::from_raw(pid as i32).and_then(|p| {
            rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok()
        });
        Exiting { pid, pidfd }
    }

    /// Wait up to `limit` for the process to end entirely, its last thread
    /// included ([`process_ended`]); true when it has. A pidfd turns
    /// readable exactly then; without one, `/proc` is read every 20 ms.
    pub fn wait(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let Some(fd) = &self.pidfd else {
            while !process_ended(self.pid) {
                if Instant::now() >= deadline {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            return true;
        };
        use rustix::event::{PollFd, PollFlags, Timespec};
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let timeout = Timespec {
                tv_sec: i64::try_from(left.as_secs()).unwrap_or(i64::MAX),
                tv_nsec: i64::from(left.subsec_nanos()),
            };
            let mut fds = [PollFd::new(fd, PollFlags::IN)];
            match rustix::event::poll(&mut fds, Some(&timeout)) {
                Ok(_) if !fds[0].revents().is_empty() => return true,
                Err(rustix::io::Errno::INTR) => {}
                Ok(_) if left.is_zero() => return false,
                Ok(_) => {}
                // Can't wait on it: read /proc instead.
                Err(_) => {
                    return Exiting {
                        pid: self.pid,
                        pidfd: None,
                    }
                    .wait(left);
                }
            }
        }
    }
}

/// Wait up to `limit` for process `pid` to end entirely (see
/// [`Exiting::wait`]).
pub fn wait_ended(pid: u32, limit: Duration) -> bool {
    Exiting::of(pid).wait(limit)
}

/// Unmount exactly the mount `entry` (root: umount2; others: fusermount3
/// -u, which does its own checks).
///
/// As root, by its path but never past a symlink, and only that mount: the
/// path's parent is opened with no symlink anywhere on the way
/// (`RESOLVE_NO_SYMLINKS`), the mount is named through that fd
/// (`/proc/self/fd/N/NAME`, `UMOUNT_NOFOLLOW`), and only once the mount
/// found there is `entry` (its mount id, read without asking its daemon).
/// So a directory on the path renamed, or a symlink put in its place,
/// between the look and the unmount (a user who owns a directory above a
/// root mount can do both) can't turn the unmount onto another mount.
pub fn detach(entry: &MountEntry, lazy: bool) -> Result<(), UnmountError> {
    let path = entry.mountpoint.as_path();
    if rustix::process::geteuid().is_root() {
        let mut flags = rustix::mount::UnmountFlags::NOFOLLOW;
        if lazy {
            flags |= rustix::mount::UnmountFlags::DETACH;
        }
        let through = pinned(entry)?;
        return match rustix::mount::unmount(&through.path, flags) {
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

/// `entry`'s mountpoint named through an fd of its parent (see
/// [`detach`]), held open while the path is used.
struct Pinned {
    _dir: rustix::fd::OwnedFd,
    path: std::path::PathBuf,
}

fn pinned(entry: &MountEntry) -> Result<Pinned, UnmountError> {
    use rustix::fs::{AtFlags, StatxFlags};
    use std::os::fd::AsRawFd;
    let path = entry.mountpoint.as_path();
    let fail = |why: String| UnmountError::Failed(show(path), why);
    let (dir, name) = crate::trust::parent_without_symlinks(path).map_err(|e| {
        fail(format!(
            "cannot reach its directory without following a symlink ({e}): not unmounting by a path that may lead elsewhere"
        ))
    })?;
    // No request to the daemon (it may be stuck, or gone): the mount id
    // comes from the VFS, the rest from the kernel's cache.
    let found = rustix::fs::statx(
        &dir,
        name,
        AtFlags::SYMLINK_NOFOLLOW | AtFlags::STATX_DONT_SYNC,
        StatxFlags::MNT_ID,
    )
    .map_err(|e| fail(format!("cannot look at it: {e}")))?;
    if found.stx_mnt_id != entry.id {
        return Err(fail(format!(
            "another mount (id {}) is at that path now, not the {} mount (id {}) looked up a moment ago (a directory on the path was renamed or replaced): not touching it",
            found.stx_mnt_id, entry.fstype, entry.id
        )));
    }
    let through = std::path::PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd())).join(name);
    Ok(Pinned {
        _dir: dir,
        path: through,
    })
}

/// [`detach`], lazily when that fails: how a daemon (or the Rust API)
/// unmounts its own mount (a mount made with mount(2) has no `fusermount3 -u`
/// to fall back on).
pub fn detach_or_lazily(entry: &MountEntry) -> Result<(), UnmountError> {
    detach(entry, false).or_else(|e| {
        tracing::warn!("unmount failed ({e}); detaching lazily");
        detach(entry, true)
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
    // Held from before the detach: the daemon exits once it is done.
    let daemon = record.as_ref().map(|r| Exiting::of(r.pid));
    if let Err(e) = detach(&entry, lazy) {
        // Gone meanwhile (its watcher took a dead daemon's mount down
        // between the look and the detach): what was asked is done.
        if find_mount(&path).is_none_or(|m| !m.is_zonemount()) {
            forget(&path);
            return Ok(Unmounted::NotMounted);
        }
        return Err(e);
    }
    let (Some(rec), Some(daemon)) = (record, daemon) else {
        return Ok(Unmounted::Done);
    };
    // Its last thread, not only its main one: until then it holds its
    // files (a stage dir's lock: `changes STAGE` right after `run` must
    // find it free).
    if !daemon.wait(DAEMON_EXIT_WAIT) {
        return Ok(Unmounted::DaemonLingers(rec.pid));
    }
    forget(&path);
    Ok(Unmounted::Done)
}

//! The clean-up after a dead parent, in order: the process group, the
//! process to stop, files, dead sockets, a dead FUSE mount, empty dirs.
//! Only system calls on data prepared before the fork.

use std::ffi::CString;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
use rustix::process::Signal;

use super::messages::{Messages, pid};
use super::prepared::Prepared;
use super::sys::{self, InChild};
use super::{DEAD_MOUNT_RETRY, DEAD_MOUNT_TRIES, RMDIR_PATIENCE, STOP_GRACE};

pub(super) fn clean_up(c: &InChild, p: &Prepared, msgs: &Messages) {
    if let Some(pgid) = msgs.group.and_then(pid) {
        // No such group yet: the child announced itself before its
        // `setsid` made one; then it is the process alone (by pidfd: never
        // a reused pid).
        if let Err(Errno::SRCH) = rustix::process::kill_process_group(pgid, Signal::KILL) {
            if let Some(leader) = &msgs.leader {
                let _ = rustix::process::pidfd_send_signal(leader, Signal::KILL);
            }
        }
    }
    if let Some(pidfd) = &msgs.stop {
        stop(pidfd.as_fd());
    }
    for f in &p.files {
        let _ = rustix::fs::unlink(f.as_c_str());
    }
    if let Some((path, pid)) = &p.record {
        if names(path, pid) {
            let _ = rustix::fs::unlink(path.as_c_str());
        }
    }
    for ((dir, name), addr) in &p.sockets {
        // Only a socket, looked at and removed through its directory
        // reached with no symlink on the way: a directory above it renamed
        // or swapped for a symlink must not lead the unlink elsewhere.
        let Ok(dir) = rustix::fs::openat2(
            rustix::fs::CWD,
            dir.as_c_str(),
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
            rustix::fs::ResolveFlags::NO_SYMLINKS,
        ) else {
            continue;
        };
        let is_socket =
            rustix::fs::statat(&dir, name.as_c_str(), rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|st| {
                    rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Socket
                });
        if is_socket && !listening(addr) {
            let _ = rustix::fs::unlinkat(&dir, name.as_c_str(), rustix::fs::AtFlags::empty());
        }
    }
    if let Some((parent, name)) = &p.mountpoint {
        // Named from its parent, reached with no symlink on the way, as
        // the working directory (this child has one thread); no symlink
        // followed at the end either.
        let at_parent = rustix::fs::openat2(
            rustix::fs::CWD,
            parent.as_c_str(),
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
            rustix::fs::ResolveFlags::NO_SYMLINKS,
        )
        .and_then(|dir| rustix::process::fchdir(&dir));
        // statfs, not stat: the kernel answers a stat of the mount's root
        // from its attribute cache even once the daemon is gone, but
        // always asks the daemon for statfs. ECONNABORTED and ECANCELED:
        // a request caught in the teardown of a dead daemon's io_uring
        // queues (both seen here).
        if at_parent.is_ok() && mount_is_dead(name) {
            match &p.fusermount {
                Some((_, argv)) => sys::exec_and_wait(c, argv),
                None => {
                    let _ = rustix::mount::unmount(
                        name.as_c_str(),
                        rustix::mount::UnmountFlags::DETACH | rustix::mount::UnmountFlags::NOFOLLOW,
                    );
                }
            }
        }
    }
    for d in &p.dirs {
        rmdir_patiently(d);
    }
}

/// Whether the file at `path` holds `needle` not followed by a digit
/// (`"pid": 12` is not `"pid": 123`), read into a buffer on the stack (the
/// child may not allocate). A record is a few hundred bytes with its pid
/// near the start; of a longer file only the first 16 KiB are looked at,
/// and one that can't be read is left alone.
fn names(path: &CString, needle: &[u8]) -> bool {
    let Ok(fd) = rustix::fs::open(
        path.as_c_str(),
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    ) else {
        return false;
    };
    let mut buf = [0u8; 16 * 1024];
    let mut len = 0;
    while len < buf.len() {
        match rustix::io::read(&fd, &mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(Errno::INTR) => {}
            Err(_) => return false,
        }
    }
    let text = &buf[..len];
    (0..text.len().saturating_sub(needle.len() - 1)).any(|i| {
        text[i..].starts_with(needle) && !text.get(i + needle.len()).is_some_and(u8::is_ascii_digit)
    })
}

/// Whether a dead FUSE connection is on top of `mp`. Any other error
/// (the connection still being torn down) is asked again, a bounded
/// number of times; a success is a live mount: never ours to touch.
fn mount_is_dead(mp: &CString) -> bool {
    for _ in 0..DEAD_MOUNT_TRIES {
        match rustix::fs::statfs(mp.as_c_str()) {
            Err(Errno::NOTCONN | Errno::CONNABORTED | Errno::CANCELED) => return true,
            Ok(_) => return false,
            Err(_) => sleep(DEAD_MOUNT_RETRY),
        }
    }
    false
}

/// SIGTERM the process, wait up to [`STOP_GRACE`], then SIGKILL it and
/// wait a little more.
fn stop(pidfd: BorrowedFd<'_>) {
    if rustix::process::pidfd_send_signal(pidfd, Signal::TERM).is_err() {
        return;
    }
    if wait_readable(pidfd, STOP_GRACE) {
        return;
    }
    let _ = rustix::process::pidfd_send_signal(pidfd, Signal::KILL);
    wait_readable(pidfd, Duration::from_secs(5));
}

/// Whether `fd` turns readable within `limit`.
fn wait_readable(fd: BorrowedFd<'_>, limit: Duration) -> bool {
    let t = Timespec {
        tv_sec: i64::try_from(limit.as_secs()).unwrap_or(i64::MAX),
        tv_nsec: i64::from(limit.subsec_nanos()),
    };
    for _ in 0..64 {
        let mut fds = [PollFd::from_borrowed_fd(fd, PollFlags::IN)];
        match rustix::event::poll(&mut fds, Some(&t)) {
            Ok(n) => return n > 0,
            Err(Errno::INTR) => {}
            Err(_) => return false,
        }
    }
    false
}

/// Whether something accepts connections on this Unix socket. Only a
/// refusal (or no such file) counts as dead: on any other answer the
/// socket is left alone.
fn listening(addr: &SocketAddrUnix) -> bool {
    let Ok(sock) = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    ) else {
        return true;
    };
    !matches!(
        rustix::net::connect(&sock, addr),
        Err(Errno::CONNREFUSED | Errno::NOENT)
    )
}

/// rmdir `dir`, retrying while it is busy (a lazy unmount still going).
fn rmdir_patiently(dir: &CString) {
    let step = Duration::from_millis(100);
    let tries = RMDIR_PATIENCE.as_millis() / step.as_millis();
    for _ in 0..tries {
        match rustix::fs::rmdir(dir.as_c_str()) {
            Err(Errno::BUSY | Errno::NOTCONN | Errno::INTR) => sleep(step),
            _ => return,
        }
    }
}

/// Sleep for `d` (under a second), with a system call only.
fn sleep(d: Duration) {
    let ts = Timespec {
        tv_sec: 0,
        tv_nsec: i64::from(d.subsec_nanos()),
    };
    let _ = rustix::thread::nanosleep(&ts);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_socket_nobody_listens_on_is_dead() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let addr = SocketAddrUnix::new(path.as_path()).unwrap();
        assert!(!listening(&addr), "no file");
        let l = std::os::unix::net::UnixListener::bind(&path).unwrap();
        assert!(listening(&addr), "live");
        drop(l);
        assert!(path.exists());
        assert!(!listening(&addr), "the file of a closed listener");
    }
}

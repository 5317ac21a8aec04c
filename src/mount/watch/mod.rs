//! The watcher: a tiny process that outlives the one that started it and,
//! when that one dies without saying goodbye, cleans up after it — so a
//! SIGKILLed daemon (or `zonemount run`) leaves no mount, socket, record,
//! temp dir or worker behind, with or without `fusermount3`.
//!
//! [`Watcher::spawn`] double-forks a child (reparented to init, so it is
//! never a zombie of a long-lived supervisor) that:
//! - holds nothing of its parent but a pidfd of it and the read end of a
//!   pipe: every other fd is closed (a held `/dev/fuse` would keep a dead
//!   mount alive; a held stdout would hang `$(zonemount mount …)`), and
//!   0, 1, 2 are `/dev/null`;
//! - starts a session of its own (a signal to its parent's group or
//!   terminal doesn't reach it), runs in `/`, and calls itself `zm-watch`
//!   (`/proc/PID/comm`);
//! - waits until the parent process has exited (its pidfd turns readable;
//!   where pidfds are missing, until the pipe's write end closes).
//!
//! A child can announce itself from just before its exec
//! ([`Watcher::announce_on_exec`]), so no instant is left between its
//! start and the watcher knowing it: as a process group to SIGKILL if the
//! parent dies, or as a process to stop then (the watcher opens a pidfd
//! of it as soon as it hears, so a reused pid is never signalled). The
//! parent says [`Watcher::disarm`] ("all clean") over the same pipe:
//! once disarmed, the watcher exits without touching anything. Otherwise,
//! in this order, it:
//! 1. SIGKILLs the process group it was told of;
//! 2. stops the process it was told of (SIGTERM, then SIGKILL after
//!    [`STOP_GRACE`]) and waits for it to exit;
//! 3. removes [`Plan::files`], and each of [`Plan::sockets`] that nothing
//!    listens on (a live socket is someone else's);
//! 4. unmounts [`Plan::mountpoint`] lazily — only if a statfs of it (which,
//!    unlike a stat, no kernel cache answers) says ENOTCONN (or
//!    ECONNABORTED, as io_uring queues are torn down), i.e. a dead
//!    FUSE mount is on top (a live or foreign mount is never touched): umount2(MNT_DETACH), or `fusermount3 -u -z` when
//!    [`Plan::fusermount`] says so (a user's mount);
//! 5. removes the (empty) [`Plan::dirs`], retrying for a bounded while
//!    when busy.
//!
//! The watcher forks a guard (`zm-guard`) of its own, which does the same
//! work if the watcher is killed before it is done (see `child::spawn_guard`):
//! a SIGKILL of the daemon and its watcher together still leaves no mount.
//! Only the three killed at once do.
//!
//! After the fork the child is single-threaded in a copy of a possibly
//! multithreaded process: it makes system calls only (rustix on the raw
//! Linux syscall ABI, or libc's async-signal-safe functions), on C strings,
//! socket addresses and argv arrays prepared before the fork; it never
//! allocates, locks, formats or unwinds, and leaves through `_exit`.
//!
//! - this file: what the daemon and `run` use ([`Watcher`], [`Plan`]).
//! - `prepared`: everything the child needs, made before the fork.
//! - `child`: the watcher's and the guard's lives: fork, wait, clean up.
//! - `messages`: what the parent says over the pipe.
//! - `clean`: the clean-up itself (processes, files, sockets, the mount,
//!   dirs).
//! - `sys`: fork, exec, `close_range`, signal dispositions, `_exit` and
//!   the pre-exec announcement: the watcher's only `unsafe`, a leaf
//!   allowed it (`#[allow(unsafe_code)]` on `mod sys` here).

mod child;
mod clean;
mod messages;
mod prepared;
#[allow(unsafe_code)]
mod sys;

use std::io;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::time::Duration;

use rustix::process::WaitOptions;

use prepared::Prepared;

/// How long a process to stop ([`Announce::Stop`]) gets between SIGTERM and SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(10);
/// How long the watcher keeps retrying to remove a busy directory.
pub const RMDIR_PATIENCE: Duration = Duration::from_secs(10);

/// How many times, and how far apart, a mountpoint whose statfs fails
/// with neither ENOTCONN nor a torn-down queue's error is asked again.
const DEAD_MOUNT_TRIES: u32 = 40;
const DEAD_MOUNT_RETRY: Duration = Duration::from_millis(50);

/// The name the watcher gives itself (`/proc/PID/comm`, `ps -o comm`).
pub const WATCHER_NAME: &str = "zm-watch";
/// The name the guard gives itself (`/proc/PID/comm`).
pub const GUARD_NAME: &str = "zm-guard";

/// What to clean up when the parent dies without [`Watcher::disarm`].
#[derive(Debug, Default, Clone)]
pub struct Plan {
    /// A FUSE mountpoint to unmount lazily once it is dead (ENOTCONN).
    pub mountpoint: Option<PathBuf>,
    /// Unmount with this `fusermount3` (`-u -z`) instead of umount2.
    pub fusermount: Option<PathBuf>,
    /// Files to remove.
    pub files: Vec<PathBuf>,
    /// The mount's record, removed only while it still names the watched
    /// process (`"pid": N`): a mount made at the same mountpoint after the
    /// watched daemon died writes a record of its own at that path, which
    /// is not this watcher's to remove.
    pub record: Option<PathBuf>,
    /// Unix sockets to remove when nothing accepts connections on them.
    pub sockets: Vec<PathBuf>,
    /// Empty directories to remove, last.
    pub dirs: Vec<PathBuf>,
}

/// A running watcher: the write end of its pipe.
#[derive(Debug)]
pub struct Watcher {
    tx: OwnedFd,
}

/// What a child announces itself as ([`Watcher::announce_on_exec`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Announce {
    /// A process group to SIGKILL if the parent dies.
    Group,
    /// A process to stop (SIGTERM, then SIGKILL) and wait for.
    Stop,
}

/// The pipe's messages.
const MSG_CLEAN: u8 = b'C';
const MSG_GROUP: u8 = b'G';
const MSG_STOP: u8 = b'P';

impl Watcher {
    /// Start a watcher of this process with `plan`.
    pub fn spawn(plan: &Plan) -> io::Result<Watcher> {
        let prep = Prepared::new(plan)?;
        let tx = prep.tx.try_clone()?;
        // The child (and its child) only run `intermediate`/`watch`, which
        // make system calls on data prepared above and leave through
        // `_exit`.
        let pid = sys::fork(|c| child::intermediate(&prep, c))?;
        // Reap the intermediate child (it exits at once). ECHILD: a
        // supervisor reaped it first; the watcher is started either way
        // unless the intermediate said otherwise.
        let reaped = rustix::process::waitpid(Some(pid), WaitOptions::empty());
        if let Ok(Some((_, status))) = reaped {
            if status.exit_status() != Some(0) {
                return Err(io::Error::other("cannot fork the mount's watcher"));
            }
        }
        drop(prep);
        Ok(Watcher { tx })
    }

    /// Make the process `cmd` spawns announce itself to the watcher,
    /// from the child just before its exec: as a process group to kill
    /// (`Announce::Group`: the child must lead its group, e.g.
    /// `process_group(0)` or a `setsid` that execs in place) or as a
    /// process to stop (`Announce::Stop`). The watcher knows before
    /// `spawn` returns, so no death of ours in between is missed.
    pub fn announce_on_exec(&self, cmd: &mut std::process::Command, what: Announce) {
        let kind = match what {
            Announce::Group => MSG_GROUP,
            Announce::Stop => MSG_STOP,
        };
        sys::write_pid_before_exec(cmd, &self.tx, kind);
    }

    /// All is clean: the watcher exits without doing anything.
    pub fn disarm(&self) -> io::Result<()> {
        self.send(&[MSG_CLEAN])
    }

    fn send(&self, msg: &[u8]) -> io::Result<()> {
        // One write of at most PIPE_BUF bytes: atomic.
        let n = rustix::io::write(&self.tx, msg)?;
        if n != msg.len() {
            return Err(io::Error::other("short write to the watcher"));
        }
        Ok(())
    }
}

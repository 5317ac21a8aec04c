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
//! work if the watcher is killed before it is done (see [`spawn_guard`]):
//! a SIGKILL of the daemon and its watcher together still leaves no mount.
//! Only the three killed at once do.
//!
//! After the fork the child is single-threaded in a copy of a possibly
//! multithreaded process: it makes system calls only (rustix on the raw
//! Linux syscall ABI, or libc's async-signal-safe functions), on C strings,
//! socket addresses and argv arrays prepared before the fork; it never
//! allocates, locks, formats or unwinds, and leaves through `_exit`.

use std::ffi::{CString, c_char};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
use rustix::process::{Pid, PidfdFlags, Signal, WaitOptions};

/// How long a process in [`Plan::stop`] gets between SIGTERM and SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(10);
/// How long the watcher keeps retrying to remove a busy directory.
pub const RMDIR_PATIENCE: Duration = Duration::from_secs(10);

/// How many times, and how far apart, a mountpoint whose statfs fails
/// with neither ENOTCONN nor a torn-down queue's error is asked again.
const DEAD_MOUNT_TRIES: u32 = 40;
const DEAD_MOUNT_RETRY: Duration = Duration::from_millis(50);

/// The name the watcher gives itself (`/proc/PID/comm`, `ps -o comm`).
pub const WATCHER_NAME: &str = "zm-watch";

/// What to clean up when the parent dies without [`Watcher::disarm`].
#[derive(Debug, Default, Clone)]
pub struct Plan {
    /// A FUSE mountpoint to unmount lazily once it is dead (ENOTCONN).
    pub mountpoint: Option<PathBuf>,
    /// Unmount with this `fusermount3` (`-u -z`) instead of umount2.
    pub fusermount: Option<PathBuf>,
    /// Files to remove.
    pub files: Vec<PathBuf>,
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
        // SAFETY: fork(2) in a possibly multithreaded process. The child
        // (and its child) only run `intermediate`/`watch`, which make
        // system calls on data prepared above and leave through `_exit`:
        // no allocation, no lock, no unwinding, no destructor.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            intermediate(&prep);
        }
        // Reap the intermediate child (it exits at once). ECHILD: a
        // supervisor reaped it first; the watcher is started either way
        // unless the intermediate said otherwise.
        let reaped = rustix::process::waitpid(Some(pid_of(pid)), WaitOptions::empty());
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
        use std::os::unix::process::CommandExt;
        let fd = self.tx.as_raw_fd();
        let kind = match what {
            Announce::Group => MSG_GROUP,
            Announce::Stop => MSG_STOP,
        };
        let hook = move || -> io::Result<()> {
            // SAFETY: `fd` is the write end of the watcher's pipe, open
            // in the parent (the `Watcher` outlives `spawn`) and so in
            // this child until its exec (it is O_CLOEXEC); nothing in the
            // child closes it before then.
            let tx = unsafe { BorrowedFd::borrow_raw(fd) };
            let me = rustix::process::getpid().as_raw_nonzero().get();
            let b = me.to_le_bytes();
            // One atomic write; a failure must not stop CMD.
            let _ = rustix::io::write(tx, &[kind, b[0], b[1], b[2], b[3]]);
            Ok(())
        };
        // SAFETY: the hook runs in the forked child before exec; it only
        // calls getpid(2) and write(2) (async-signal-safe) on a stack
        // buffer, with no allocation or lock.
        unsafe {
            cmd.pre_exec(hook);
        }
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

fn pid_of(raw: libc::pid_t) -> Pid {
    // fork returned a positive pid here.
    Pid::from_raw(raw).unwrap_or(Pid::INIT)
}

fn cstring(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))
}

/// Everything the child needs, made before the fork.
struct Prepared {
    tx: OwnedFd,
    rx: OwnedFd,
    /// A pidfd of the watched process (None where pidfds are missing).
    parent: Option<OwnedFd>,
    null: OwnedFd,
    mountpoint: Option<CString>,
    /// `fusermount3 -u -z -- MNT` as an argv (the CStrings and the
    /// null-terminated pointer array into them).
    fusermount: Option<(Vec<CString>, Vec<*const c_char>)>,
    files: Vec<CString>,
    sockets: Vec<(CString, SocketAddrUnix)>,
    dirs: Vec<CString>,
}

impl Prepared {
    fn new(plan: &Plan) -> io::Result<Prepared> {
        let (rx, tx) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        // Only the read end: the watcher drains it after its parent died.
        rustix::fs::fcntl_setfl(&rx, OFlags::NONBLOCK)?;
        let me = rustix::process::getpid();
        let parent = rustix::process::pidfd_open(me, PidfdFlags::empty()).ok();
        let null = rustix::fs::open("/dev/null", OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())?;
        let mountpoint = plan.mountpoint.as_deref().map(cstring).transpose()?;
        let fusermount = match (&plan.fusermount, &plan.mountpoint) {
            (Some(bin), Some(mp)) => {
                let args = vec![
                    cstring(bin)?,
                    CString::from(c"-u"),
                    CString::from(c"-z"),
                    CString::from(c"--"),
                    cstring(mp)?,
                ];
                let mut ptrs: Vec<*const c_char> = args.iter().map(|a| a.as_ptr()).collect();
                ptrs.push(std::ptr::null());
                Some((args, ptrs))
            }
            _ => None,
        };
        let files = plan
            .files
            .iter()
            .map(|p| cstring(p))
            .collect::<io::Result<_>>()?;
        let sockets = plan
            .sockets
            .iter()
            .map(|p| Ok((cstring(p)?, SocketAddrUnix::new(p.as_path())?)))
            .collect::<io::Result<_>>()?;
        let dirs = plan
            .dirs
            .iter()
            .map(|p| cstring(p))
            .collect::<io::Result<_>>()?;
        Ok(Prepared {
            tx,
            rx,
            parent,
            null,
            mountpoint,
            fusermount,
            files,
            sockets,
            dirs,
        })
    }
}

/// Leave the process now, without atexit handlers or destructors (which
/// belong to the parent's copy of the program).
fn exit(code: i32) -> ! {
    // SAFETY: _exit(2) ends the process at once; nothing runs after it.
    unsafe { libc::_exit(code) }
}

/// The first child: fork the watcher and exit, so the watcher is
/// reparented and never waits as a zombie of our parent.
fn intermediate(p: &Prepared) -> ! {
    // Named before the fork, so the watcher carries its name from its
    // first instant: by the time `spawn` returns, nothing that is not the
    // daemon looks like it in `ps` (a test that counted the daemon's
    // processes once saw the unnamed watcher).
    let _ = rustix::thread::set_name(c"zm-watch");
    // SAFETY: this process is a single-threaded fork child; the grandchild
    // runs only `watch` (system calls on prepared data, then `_exit`).
    let pid = unsafe { libc::fork() };
    match pid {
        0 => watch(p),
        n if n > 0 => exit(0),
        _ => exit(1),
    }
}

/// Close every fd from 3 up except those in `keep`.
fn close_all_but(keep: &mut [i32]) {
    keep.sort_unstable();
    let mut low: u32 = 3;
    for &fd in keep.iter() {
        let Ok(fd) = u32::try_from(fd) else { continue };
        if fd < low {
            continue;
        }
        if fd > low {
            close_range(low, fd - 1);
        }
        low = fd + 1;
    }
    close_range(low, u32::MAX);
}

fn close_range(first: u32, last: u32) {
    // SAFETY: close_range(2) only closes fds of this (forked, single-
    // threaded) process; the Rust objects owning them are never used or
    // dropped again (the process leaves through `_exit`).
    unsafe {
        libc::close_range(first, last, 0);
    }
}

/// Reset the signals the parent may have handled to their defaults, so
/// SIGTERM ends a watcher like any process.
fn default_signals() {
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGPIPE] {
        // SAFETY: signal(2) with SIG_DFL installs no handler; it is
        // async-signal-safe.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
        }
    }
}

fn watch(p: &Prepared) -> ! {
    let _ = rustix::process::setsid();
    let _ = rustix::process::chdir(c"/");
    let _ = rustix::stdio::dup2_stdin(&p.null);
    let _ = rustix::stdio::dup2_stdout(&p.null);
    let _ = rustix::stdio::dup2_stderr(&p.null);
    let raw = |f: Option<&OwnedFd>| f.map_or(-1, |f| f.as_raw_fd());
    close_all_but(&mut [p.rx.as_raw_fd(), raw(p.parent.as_ref())]);
    default_signals();
    let _ = rustix::thread::set_name(c"zm-watch");

    let guard = spawn_guard(p);
    let mut msgs = Messages::default();
    wait_for_parent(p, &mut msgs);
    // Whatever the parent said before it went.
    msgs.drain(p.rx.as_fd());
    if !msgs.clean {
        clean_up(p, &msgs);
    }
    // Done, either way: the guard has nothing left to stand in for. Our
    // own unreaped child, so the pid is still its.
    if let Some(g) = guard {
        let _ = rustix::process::kill_process(g, Signal::KILL);
    }
    exit(0)
}

/// The name the guard gives itself (`/proc/PID/comm`).
pub const GUARD_NAME: &str = "zm-guard";

/// Fork the guard: a second watcher, in a session of its own, that waits
/// for this one to go. The watcher SIGKILLs it once its work is done, so a
/// guard that sees the watcher gone knows it was killed (with the daemon,
/// say, by one `kill -9` of both) and does the watcher's work in its place:
/// it waits for the watched process as the watcher did, and cleans up
/// unless told all is clean. What the watcher had already read of the pipe
/// (a process group or process to stop, which `run` announces) is lost
/// with it. None when the fork fails: one watcher then, as before.
fn spawn_guard(p: &Prepared) -> Option<Pid> {
    let watcher = rustix::process::getpid();
    // SAFETY: this process (the watcher) is a single-threaded fork child;
    // the new child runs only `guard` (system calls on prepared data, then
    // `_exit`), like the watcher itself.
    let pid = unsafe { libc::fork() };
    match pid {
        0 => guard(p, watcher),
        n if n > 0 => Some(pid_of(n)),
        _ => None,
    }
}

fn guard(p: &Prepared, watcher: Pid) -> ! {
    let _ = rustix::process::setsid();
    let _ = rustix::thread::set_name(c"zm-guard");
    // Without pidfds there is no waiting for the watcher: no guard.
    let Ok(w) = rustix::process::pidfd_open(watcher, PidfdFlags::empty()) else {
        exit(0)
    };
    // Still the watcher's child: it was alive when the pidfd was made, so
    // the pidfd is its (not a reused pid's).
    if rustix::process::getppid() == Some(watcher) {
        let mut fds = [PollFd::new(&w, PollFlags::IN)];
        poll_ok(&mut fds);
    }
    let mut msgs = Messages::default();
    wait_for_parent(p, &mut msgs);
    msgs.drain(p.rx.as_fd());
    if !msgs.clean {
        clean_up(p, &msgs);
    }
    exit(0)
}

/// What the parent said over the pipe.
#[derive(Default)]
struct Messages {
    clean: bool,
    group: Option<u32>,
    /// The group's leader, held as a pidfd from the moment we heard.
    leader: Option<OwnedFd>,
    /// The process to stop, held as a pidfd from the moment we heard.
    stop: Option<OwnedFd>,
    /// A message with a pid being read: its kind and the bytes so far.
    partial: Option<(u8, [u8; 4], usize)>,
    closed: bool,
}

impl Messages {
    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            match &mut self.partial {
                Some((kind, acc, n)) => {
                    acc[*n] = b;
                    *n += 1;
                    if *n == 4 {
                        let id = u32::from_le_bytes(*acc);
                        if *kind == MSG_GROUP {
                            self.group = Some(id);
                            self.leader = pidfd(id);
                        } else {
                            self.stop = pidfd(id);
                        }
                        self.partial = None;
                    }
                }
                None if b == MSG_CLEAN => self.clean = true,
                None if b == MSG_GROUP || b == MSG_STOP => self.partial = Some((b, [0; 4], 0)),
                None => {}
            }
        }
    }

    /// Read what is there without blocking; note EOF.
    fn drain(&mut self, rx: BorrowedFd<'_>) {
        let mut buf = [0u8; 64];
        for _ in 0..1024 {
            match rustix::io::read(rx, &mut buf) {
                Ok(0) => {
                    self.closed = true;
                    return;
                }
                Ok(n) => self.feed(&buf[..n]),
                Err(Errno::INTR) => {}
                Err(_) => return,
            }
        }
    }
}

/// Block until the watched process has exited (or said it is clean).
fn wait_for_parent(p: &Prepared, msgs: &mut Messages) {
    while !msgs.clean {
        let (pipe_ready, parent_gone) = match (&p.parent, msgs.closed) {
            // No pidfd and the pipe closed: the parent is gone.
            (None, true) => return,
            (None, false) => {
                let mut fds = [PollFd::new(&p.rx, PollFlags::IN)];
                poll_ok(&mut fds);
                (!fds[0].revents().is_empty(), false)
            }
            // The pipe closed early (its write end dropped): only the
            // pidfd can say more.
            (Some(pidfd), true) => {
                let mut fds = [PollFd::new(pidfd, PollFlags::IN)];
                poll_ok(&mut fds);
                (false, !fds[0].revents().is_empty())
            }
            (Some(pidfd), false) => {
                let mut fds = [
                    PollFd::new(&p.rx, PollFlags::IN),
                    PollFd::new(pidfd, PollFlags::IN),
                ];
                poll_ok(&mut fds);
                (!fds[0].revents().is_empty(), !fds[1].revents().is_empty())
            }
        };
        if pipe_ready {
            msgs.drain(p.rx.as_fd());
        }
        if parent_gone {
            return;
        }
    }
}

/// Wait for `fds` without a timeout. When waiting is impossible the
/// watcher can't tell a live parent from a dead one, so it leaves without
/// touching anything.
fn poll_ok(fds: &mut [PollFd<'_>]) {
    loop {
        match rustix::event::poll(fds, None) {
            Ok(_) => return,
            Err(Errno::INTR) => {}
            Err(_) => exit(1),
        }
    }
}

fn pid(raw: u32) -> Option<Pid> {
    i32::try_from(raw).ok().and_then(Pid::from_raw)
}

fn pidfd(raw: u32) -> Option<OwnedFd> {
    rustix::process::pidfd_open(pid(raw)?, PidfdFlags::empty()).ok()
}

fn clean_up(p: &Prepared, msgs: &Messages) {
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
    for (path, addr) in &p.sockets {
        if !listening(addr) {
            let _ = rustix::fs::unlink(path.as_c_str());
        }
    }
    if let Some(mp) = &p.mountpoint {
        // statfs, not stat: the kernel answers a stat of the mount's root
        // from its attribute cache even once the daemon is gone, but
        // always asks the daemon for statfs. ECONNABORTED and ECANCELED:
        // a request caught in the teardown of a dead daemon's io_uring
        // queues (both seen here).
        if mount_is_dead(mp) {
            match &p.fusermount {
                Some((_, argv)) => run_and_wait(argv),
                None => {
                    let _ =
                        rustix::mount::unmount(mp.as_c_str(), rustix::mount::UnmountFlags::DETACH);
                }
            }
        }
    }
    for d in &p.dirs {
        rmdir_patiently(d);
    }
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

/// Fork, exec `argv` with an empty environment, and wait for it.
fn run_and_wait(argv: &[*const c_char]) {
    let envp: [*const c_char; 1] = [std::ptr::null()];
    // SAFETY: this process is single-threaded (a fork child); the new
    // child only calls execve(2) on the prepared, null-terminated argv
    // (pointers into CStrings that live until `_exit`) and `_exit`.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: argv[0] and every pointer up to the final null point to
        // live NUL-terminated strings; envp is an empty, null-terminated
        // array. On failure, leave at once.
        unsafe {
            libc::execve(argv[0], argv.as_ptr(), envp.as_ptr());
        }
        exit(127);
    }
    if pid > 0 {
        let _ = rustix::process::waitpid(Some(pid_of(pid)), WaitOptions::empty());
    }
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
    fn messages_survive_any_split() {
        let me = std::process::id().to_le_bytes();
        let stream = [
            MSG_GROUP, 0x39, 0x30, 0, 0, MSG_STOP, me[0], me[1], me[2], me[3], MSG_CLEAN,
        ];
        for cut in 0..stream.len() {
            let mut m = Messages::default();
            m.feed(&stream[..cut]);
            m.feed(&stream[cut..]);
            assert_eq!(m.group, Some(12345), "cut at {cut}");
            assert!(m.stop.is_some(), "a pidfd of this process, cut at {cut}");
            assert!(m.clean);
        }
        let mut m = Messages::default();
        m.feed(&[MSG_GROUP, 1, 0, 0, 0]);
        assert!(!m.clean && m.group == Some(1));
    }

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

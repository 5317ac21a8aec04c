//! A forked child, for the two capabilities that need one (the watcher in
//! `mount::watch`, the overlay's user-namespace child in `stage::sys`):
//! fork(2), `_exit(2)`, and the [`InChild`] proof that code runs in such a
//! child; and [`cloexec_inherited`], so that no fd the process inherited
//! reaches a program it starts. A leaf allowed `unsafe`
//! (`#[allow(unsafe_code)]` on `mod fork` in `lib.rs`).
//!
//! The rule for every caller: the child makes system calls on data
//! prepared before the fork and leaves through [`exit`]: no allocation, no
//! lock, no unwinding, no destructor (another thread of the parent may
//! have held a lock at the fork).

use std::convert::Infallible;
use std::io;

use rustix::process::Pid;

/// Proof that this code runs in a child made by [`fork`]: a
/// single-threaded process whose Rust objects are never dropped (it
/// leaves through [`exit`]). Only [`fork`] makes one.
pub struct InChild(());

/// fork(2): the parent gets the child's pid; the child runs `child`,
/// which never returns (`Infallible`: it leaves through [`exit`]).
pub fn fork(child: impl FnOnce(InChild) -> Infallible) -> io::Result<Pid> {
    // SAFETY: fork(2) in a possibly multithreaded process. The child runs
    // only `child`, which (by this module's rule, kept by its callers in
    // `mount::watch` and `stage::sys::overlay`) makes system calls on data
    // prepared before the fork and leaves through `_exit`: no allocation,
    // no lock, no unwinding, no destructor.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        child(InChild(()));
    }
    // fork returned a positive pid here.
    Ok(Pid::from_raw(pid).unwrap_or(Pid::INIT))
}

/// Leave the process now, without atexit handlers or destructors (which
/// belong to the parent's copy of the program).
pub fn exit(code: i32) -> ! {
    // SAFETY: _exit(2) ends the process at once; nothing runs after it.
    unsafe { libc::_exit(code) }
}

/// Make the child `cmd` starts leave this process's session before it runs
/// its program (setsid(2)): it then has no controlling terminal, so it
/// can't push keys into this process's terminal (`--prompt`), and it leads
/// a process group of its own, whose every member can be signalled
/// together.
pub fn new_session_before_exec(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the hook runs in the forked child before exec and calls only
    // setsid(2), which is async-signal-safe: no allocation, no lock.
    unsafe {
        cmd.pre_exec(|| rustix::process::setsid().map(drop).map_err(io::Error::from));
    }
}

/// Mark every fd above stderr that this process holds now close-on-exec:
/// what it inherited from whoever started it (an open directory, a pipe)
/// then reaches no program it starts (bwrap and the worker of `run`, a
/// daemon it re-executes), where it would be a way past the sandbox (an
/// fd on `/root`, walked up to `/etc/shadow`). Fds made later for a child
/// on purpose are made inheritable one by one (fusermount3's
/// `_FUSE_COMMFD`, bwrap's `--bind-fd`). Called first thing in `main`,
/// while the process has one thread.
pub fn cloexec_inherited() -> io::Result<()> {
    // SAFETY: close_range(2) with CLOSE_RANGE_CLOEXEC sets a flag on the
    // open fds in the range; it closes none, so no Rust object's fd goes
    // away under it, and it touches no memory of this process.
    let r = unsafe { libc::close_range(3, u32::MAX, libc::CLOSE_RANGE_CLOEXEC as libc::c_int) };
    match r {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

//! The watcher's raw calls: the one leaf of `mount::watch` allowed
//! `unsafe`. Each is a small safe function for the rest of the watcher.
//!
//! A fork child of a multithreaded process may only make system calls
//! (no allocation, lock, formatting or unwinding) and must leave through
//! `_exit`. [`fork`] runs its child with an [`InChild`], which nothing
//! else can make: what is sound only in such a child (closing every fd,
//! resetting signals, exec) asks for one.

use std::ffi::c_char;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::process::CommandExt;

use rustix::process::{Pid, WaitOptions};

pub(super) use crate::fork::{InChild, exit, fork};

fn pid_of(raw: libc::pid_t) -> Pid {
    // fork returned a positive pid here.
    Pid::from_raw(raw).unwrap_or(Pid::INIT)
}

/// Close every fd from 3 up except those in `keep`.
pub(super) fn close_all_but(_: &InChild, keep: &mut [i32]) {
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
    // threaded: `close_all_but` asks for an `InChild`) process; the Rust
    // objects owning them are never used or dropped again (the process
    // leaves through `_exit`).
    unsafe {
        libc::close_range(first, last, 0);
    }
}

/// Reset the signals the parent may have handled to their defaults, so
/// SIGTERM ends a watcher like any process.
pub(super) fn default_signals(_: &InChild) {
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGPIPE] {
        // SAFETY: signal(2) with SIG_DFL installs no handler; it is
        // async-signal-safe.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
        }
    }
}

/// Fork, exec `argv` with an empty environment, and wait for it.
/// `argv` is null-terminated, its pointers into C strings that live as
/// long as this process (prepared before the watcher's fork).
pub(super) fn exec_and_wait(_: &InChild, argv: &[*const c_char]) {
    let envp: [*const c_char; 1] = [std::ptr::null()];
    // SAFETY: this process is single-threaded (a fork child, as the
    // `InChild` says); the new child only calls execve(2) on the prepared,
    // null-terminated argv (pointers into CStrings that live until
    // `_exit`) and `_exit`.
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

/// Make the process `cmd` spawns write `kind` and its pid (4 bytes, little
/// endian) to `tx` just before its exec. `tx` must stay open until `cmd`
/// is spawned (the watcher's pipe, which the `Watcher` owns).
pub(super) fn write_pid_before_exec(cmd: &mut std::process::Command, tx: &OwnedFd, kind: u8) {
    let fd = tx.as_raw_fd();
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

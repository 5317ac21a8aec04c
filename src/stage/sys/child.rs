//! The raw calls of the child that mounts a stage's overlay in a user
//! namespace: the one part of `overlay` allowed `unsafe`
//! (`#[allow(unsafe_code)]` on `mod child` in `stage/sys/mod.rs`).
//!
//! A fork child of a multithreaded process may only make system calls
//! (no allocation, lock, formatting or unwinding) and must leave through
//! `_exit`. [`fork`] runs its child with an [`InChild`], which nothing
//! else can make: what is sound only in such a child (`unshare` of a user
//! namespace) asks for one.

use std::convert::Infallible;
use std::io;

use rustix::io::Errno;
use rustix::process::Pid;
use rustix::thread::UnshareFlags;

/// Proof that this code runs in a child made by [`fork`]: a
/// single-threaded process that leaves through [`exit`].
pub(super) struct InChild(());

/// fork(2): the parent gets the child's pid; the child runs `child`,
/// which never returns (`Infallible`: it leaves through [`exit`]).
///
/// The one caller, `overlay::in_user_namespace`, passes a child that
/// makes system calls on data prepared before the fork and leaves through
/// [`exit`].
pub(super) fn fork(child: impl FnOnce(InChild) -> Infallible) -> io::Result<Pid> {
    // SAFETY: fork(2) in a possibly multithreaded process. The child runs
    // only `child`, which (by this module's contract with its one caller)
    // makes system calls on data prepared before the fork and leaves
    // through `_exit`: no allocation, no lock, no unwinding.
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

/// Move this process into a new user namespace and a new mount namespace.
pub(super) fn unshare_user_and_mount(_: &InChild) -> Result<(), Errno> {
    let flags = UnshareFlags::NEWUSER | UnshareFlags::NEWNS;
    // SAFETY: unshare(2) in a single-threaded fork child (the `InChild`
    // says so): no other thread shares its fd table or its cwd.
    unsafe { rustix::thread::unshare_unsafe(flags) }
}

/// Leave the process now, without atexit handlers or destructors (which
/// belong to the parent's copy of the program).
pub(super) fn exit(code: i32) -> ! {
    // SAFETY: _exit(2) ends the process at once; nothing runs after it.
    unsafe { libc::_exit(code) }
}

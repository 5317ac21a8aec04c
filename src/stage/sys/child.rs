//! The raw calls of the child that mounts a stage's overlay in a user
//! namespace: the one part of `overlay` allowed `unsafe`
//! (`#[allow(unsafe_code)]` on `mod child` in `stage/sys/mod.rs`).
//!
//! A fork child of a multithreaded process may only make system calls
//! (no allocation, lock, formatting or unwinding) and must leave through
//! `_exit`. [`fork`] runs its child with an [`InChild`], which nothing
//! else can make: what is sound only in such a child (`unshare` of a user
//! namespace) asks for one.

use rustix::io::Errno;
use rustix::thread::UnshareFlags;

pub(super) use crate::fork::{InChild, exit, fork};

/// Move this process into a new user namespace and a new mount namespace.
pub(super) fn unshare_user_and_mount(_: &InChild) -> Result<(), Errno> {
    let flags = UnshareFlags::NEWUSER | UnshareFlags::NEWNS;
    // SAFETY: unshare(2) in a single-threaded fork child (the `InChild`
    // says so): no other thread shares its fd table or its cwd.
    unsafe { rustix::thread::unshare_unsafe(flags) }
}

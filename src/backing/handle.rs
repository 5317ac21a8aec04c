//! Kernel file handles: an inode named by a few bytes
//! (`name_to_handle_at`) and reopened from them (`open_by_handle_at`), so a
//! node need not hold an fd.

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use rustix::io::Errno;

use super::Sys;
use super::creds::as_daemon;

/// A kernel file handle for an inode (`name_to_handle_at`): a few bytes
/// that reopen it later, so a node need not hold an fd.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InodeHandle {
    pub mount_id: i32,
    handle_type: i32,
    bytes: Box<[u8]>,
}

impl InodeHandle {
    /// The handle's bytes (`f_handle`).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

const MAX_HANDLE_SZ: usize = 128;

/// `struct file_handle` with room for the largest handle.
#[repr(C)]
struct RawHandle {
    handle_bytes: u32,
    handle_type: i32,
    f_handle: [u8; MAX_HANDLE_SZ],
}

/// The handle of the inode `fd` refers to (`O_PATH` fds work).
pub fn handle_of(fd: BorrowedFd<'_>) -> Sys<InodeHandle> {
    let mut raw = RawHandle {
        handle_bytes: MAX_HANDLE_SZ as u32,
        handle_type: 0,
        f_handle: [0; MAX_HANDLE_SZ],
    };
    let mut mount_id: libc::c_int = 0;
    // SAFETY: `raw` is a live, writable `struct file_handle` whose
    // `handle_bytes` says how much room follows the header (the kernel
    // writes at most that much); the path is a NUL-terminated empty string,
    // which with AT_EMPTY_PATH names `fd` itself; `mount_id` is a valid
    // out-pointer. Nothing is retained after the call.
    let rc = unsafe {
        libc::name_to_handle_at(
            fd.as_raw_fd(),
            c"".as_ptr(),
            (&raw mut raw).cast::<libc::file_handle>(),
            &mut mount_id,
            libc::AT_EMPTY_PATH,
        )
    };
    if rc != 0 {
        return Err(Errno::from_raw_os_error(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        ));
    }
    let len = (raw.handle_bytes as usize).min(MAX_HANDLE_SZ);
    Ok(InodeHandle {
        mount_id,
        handle_type: raw.handle_type,
        bytes: raw.f_handle[..len].into(),
    })
}

/// Reopen an inode from its handle, as `O_PATH` (needs
/// CAP_DAC_READ_SEARCH). `mount_fd` is any fd on the same filesystem that
/// is not `O_PATH` (the kernel refuses those here).
pub fn open_by_handle(mount_fd: BorrowedFd<'_>, h: &InodeHandle) -> Sys<OwnedFd> {
    // open_by_handle_at needs CAP_DAC_READ_SEARCH: with the daemon's own
    // rights even while the thread acts as a caller (the handle names an
    // object the daemon already reached; the O_PATH fd grants no access,
    // what is done with it next runs as the caller again).
    as_daemon(|| open_handle(mount_fd, h, libc::O_PATH | libc::O_NOFOLLOW))
}

/// Open a regular file from its handle for reading, with the thread's
/// current rights: it needs CAP_DAC_READ_SEARCH, so it fails (EPERM) on a
/// thread acting as an unprivileged caller rather than open as the daemon.
/// The usual check of the inode's permissions applies.
pub fn open_handle_for_reading(mount_fd: BorrowedFd<'_>, h: &InodeHandle) -> Sys<OwnedFd> {
    open_handle(mount_fd, h, libc::O_RDONLY | libc::O_NOFOLLOW)
}

fn open_handle(mount_fd: BorrowedFd<'_>, h: &InodeHandle, flags: i32) -> Sys<OwnedFd> {
    let mut raw = RawHandle {
        handle_bytes: h.bytes.len() as u32,
        handle_type: h.handle_type,
        f_handle: [0; MAX_HANDLE_SZ],
    };
    raw.f_handle[..h.bytes.len()].copy_from_slice(&h.bytes);
    // SAFETY: `raw` is a valid `struct file_handle` whose `handle_bytes`
    // matches the bytes copied after the header (at most MAX_HANDLE_SZ, as
    // produced by `handle_of`); the kernel only reads it.
    let fd = unsafe {
        libc::open_by_handle_at(
            mount_fd.as_raw_fd(),
            (&raw mut raw).cast::<libc::file_handle>(),
            flags | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(Errno::from_raw_os_error(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        ));
    }
    // SAFETY: `fd` was just returned by open_by_handle_at, is open, and is
    // owned by nobody else.
    Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

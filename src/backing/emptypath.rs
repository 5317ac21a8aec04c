//! Metadata calls on a held `O_PATH` fd itself (`AT_EMPTY_PATH`), without
//! a walk through `/proc/self/fd/N`: `fchmodat2` (Linux 6.6) and
//! `utimensat`. Each returns `None` when this kernel can't do it that way
//! (too old, or an `O_PATH` fd it refuses), so the caller goes through
//! `/proc/self/fd` instead; a kernel found wanting is remembered and not
//! asked again.
//!
//! Extended attributes stay on `/proc/self/fd`: the `*xattrat` calls of
//! Linux 6.13 answer EBADF for an `O_PATH` fd with `AT_EMPTY_PATH`
//! (measured on 6.18), and the daemon holds nodes as `O_PATH` fds. Called
//! relative to a held fd on `/proc/self/fd` instead (name "N"), a
//! `getxattrat` took 1.8 µs against `getxattr("/proc/self/fd/N")`'s 2.4 µs
//! (C loop, 500,000 calls, 6.18): 0.6 µs of a GETXATTR's 15–18 µs round
//! trip, not worth a raw syscall that libc does not yet bind on x86_64.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{AtFlags, Timestamps};
use rustix::io::Errno;

use super::Sys;

/// A family of calls this kernel may lack.
struct Family(AtomicBool);

static CHMOD: Family = Family(AtomicBool::new(true));
static UTIMES: Family = Family(AtomicBool::new(true));

impl Family {
    /// Run `f` unless the family is known missing; `None` when it is (or
    /// `f` finds it so: ENOSYS, EINVAL, or EBADF for an `O_PATH` fd).
    fn try_with<T>(&self, f: impl FnOnce() -> Sys<T>) -> Option<Sys<T>> {
        if !self.0.load(Ordering::Relaxed) {
            return None;
        }
        match f() {
            Err(Errno::NOSYS | Errno::INVAL | Errno::BADF) => {
                self.0.store(false, Ordering::Relaxed);
                None
            }
            r => Some(r),
        }
    }
}

/// The result of a raw syscall: its value, or errno.
fn ret(r: libc::c_long) -> Sys<usize> {
    if r < 0 {
        Err(Errno::from_raw_os_error(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        ))
    } else {
        Ok(r as usize)
    }
}

const EMPTY: &std::ffi::CStr = c"";

pub fn chmod(fd: BorrowedFd<'_>, mode: u32) -> Option<Sys<()>> {
    CHMOD.try_with(|| {
        // SAFETY: fchmodat2(dirfd, path, mode, flags) with a valid fd, a
        // NUL-terminated empty path that lives for the call, and
        // AT_EMPTY_PATH: the fd's own inode.
        let r = unsafe {
            libc::syscall(
                libc::SYS_fchmodat2,
                fd.as_raw_fd(),
                EMPTY.as_ptr(),
                mode,
                libc::AT_EMPTY_PATH,
            )
        };
        ret(r).map(|_| ())
    })
}

pub fn utimens(fd: BorrowedFd<'_>, times: &Timestamps) -> Option<Sys<()>> {
    UTIMES.try_with(|| rustix::fs::utimensat(fd, EMPTY, times, AtFlags::EMPTY_PATH))
}

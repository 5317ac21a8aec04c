//! The FUSE device (`/dev/fuse`): reading requests, writing replies, and
//! its ioctls — a clone of the session for each serving thread, and the
//! registration of backing files for kernel passthrough.

use std::io::{self, IoSlice};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use rustix::fs::{Mode, OFlags};
use rustix::ioctl::opcode;

use crate::fuse::abi::BackingMap;

const MAGIC: u8 = 229;
/// The sizes asked for a splice pipe, in turn: room for a 1 MiB reply
/// (root may have it), then what an unprivileged process may have
/// (`/proc/sys/fs/pipe-max-size`'s default: a 1 MiB reply less a page).
const SPLICE_PIPE_BYTES: [usize; 2] = [2 << 20, 1 << 20];
const IOC_CLONE: rustix::ioctl::Opcode = opcode::read::<u32>(MAGIC, 0);
const IOC_BACKING_OPEN: rustix::ioctl::Opcode = opcode::write::<BackingMap>(MAGIC, 1);
const IOC_BACKING_CLOSE: rustix::ioctl::Opcode = opcode::write::<u32>(MAGIC, 2);

/// An open `/dev/fuse`: one connection (or a clone of one).
#[derive(Debug)]
pub struct Device(OwnedFd);

impl Device {
    /// A fresh device, not yet mounted.
    pub fn open() -> io::Result<Device> {
        let fd = rustix::fs::open("/dev/fuse", OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())?;
        Ok(Device(fd))
    }

    /// The device of a mount made elsewhere (fusermount3 passes it).
    pub fn from_fd(fd: OwnedFd) -> Device {
        Device(fd)
    }

    /// Another fd on the same connection, so that each serving thread
    /// reads its own queue (`FUSE_DEV_IOC_CLONE`): requests are answered
    /// on the fd they came from.
    pub fn clone_session(&self) -> io::Result<Device> {
        let new = Device::open()?;
        let old: u32 = self.0.as_raw_fd() as u32;
        // SAFETY: FUSE_DEV_IOC_CLONE reads one u32 (the fd to clone) from
        // the pointer, which points to a live u32 for the whole call.
        let r = unsafe { libc::ioctl(new.0.as_raw_fd(), IOC_CLONE as _, std::ptr::from_ref(&old)) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(new)
    }

    /// Read one request into `buf` (which must hold the largest request
    /// the connection allows). EINTR is retried; ENOENT (a request that
    /// was interrupted before it was read) is read past.
    pub fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match rustix::io::read(&self.0, &mut *buf) {
                Ok(n) => return Ok(n),
                Err(rustix::io::Errno::INTR) | Err(rustix::io::Errno::NOENT) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Make reads return EAGAIN instead of waiting (this fd only: each
    /// serving thread has its own clone).
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        let mut fl = rustix::fs::fcntl_getfl(&self.0)?;
        fl.set(OFlags::NONBLOCK, on);
        Ok(rustix::fs::fcntl_setfl(&self.0, fl)?)
    }

    /// Write one reply or notification, whole.
    pub fn write(&self, parts: &[IoSlice<'_>]) -> io::Result<usize> {
        Ok(rustix::io::writev(&self.0, parts)?)
    }

    /// Write a reply whose body is `len` bytes of `file` at `offset`: `head`
    /// (its header, counting those bytes) and then the file's pages go
    /// through a pipe of this thread's (`splice`) instead of being copied
    /// into the daemon and out again; the kernel copies them once, into
    /// the mount's page cache (without `SPLICE_F_MOVE`, which would take
    /// the pages out of the backing file's cache). `Ok(false)`: nothing
    /// was written (the pipe can't hold it, or the file gave fewer bytes,
    /// say cut short meanwhile), the caller answers by copying; `Err`: the
    /// reply was written and failed, as [`Device::write`] can.
    pub fn write_spliced(
        &self,
        head: &[u8],
        file: BorrowedFd<'_>,
        offset: u64,
        len: usize,
    ) -> io::Result<bool> {
        SPLICE_PIPE.with_borrow_mut(|pipe| {
            let Some(p) = pipe.get_or_insert_with(SplicePipe::new) else {
                return Ok(false);
            };
            // A pipe slot per page the bytes touch, and one for the header.
            let page = rustix::param::page_size();
            let pages = (offset as usize % page + len).div_ceil(page) + 1;
            if pages > p.slots {
                return Ok(false);
            }
            let r = p.reply(&self.0, head, file, offset, len);
            // A pipe that can't be emptied is dropped (a new one is made
            // for the next reply): nothing left in it may lead another
            // reply.
            if !matches!(r, Ok(true)) && !p.drain() {
                *pipe = None;
            }
            r
        })
    }

    /// Register `fd` as a passthrough backing file; the kernel's id for it.
    pub fn backing_open(&self, fd: BorrowedFd<'_>) -> io::Result<u32> {
        let map = BackingMap {
            fd: fd.as_raw_fd(),
            flags: 0,
            padding: 0,
        };
        // SAFETY: FUSE_DEV_IOC_BACKING_OPEN reads a struct fuse_backing_map
        // (16 bytes, `BackingMap` has its layout) from the pointer, live
        // for the call; it returns the new id or -1 with errno.
        let r = unsafe {
            libc::ioctl(
                self.0.as_raw_fd(),
                IOC_BACKING_OPEN as _,
                std::ptr::from_ref(&map),
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(r as u32)
    }

    /// Drop a backing file registration.
    pub fn backing_close(&self, id: u32) -> io::Result<()> {
        // SAFETY: FUSE_DEV_IOC_BACKING_CLOSE reads one u32 (the id) from
        // the pointer, live for the call.
        let r = unsafe {
            libc::ioctl(
                self.0.as_raw_fd(),
                IOC_BACKING_CLOSE as _,
                std::ptr::from_ref(&id),
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl AsFd for Device {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The request numbers `<linux/fuse.h>` defines.
    #[test]
    fn ioctl_numbers_are_the_kernels() {
        assert_eq!(IOC_CLONE as u64, 0x8004_e500);
        assert_eq!(IOC_BACKING_OPEN as u64, 0x4010_e501);
        assert_eq!(IOC_BACKING_CLOSE as u64, 0x4004_e502);
    }
}

thread_local! {
    /// This thread's splice pipe: made at its first spliced reply; None
    /// when one can't be made (then replies are copied).
    static SPLICE_PIPE: std::cell::RefCell<Option<Option<SplicePipe>>> =
        const { std::cell::RefCell::new(None) };
}

/// A non-blocking pipe that carries one reply at a time from a backing
/// file to the device.
struct SplicePipe {
    r: OwnedFd,
    w: OwnedFd,
    /// Its capacity in page-sized slots.
    slots: usize,
}

impl SplicePipe {
    fn new() -> Option<SplicePipe> {
        use rustix::pipe::{PipeFlags, fcntl_getpipe_size, fcntl_setpipe_size, pipe_with};
        let (r, w) = pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)
            .inspect_err(|e| tracing::debug!("no splice pipe: {e}"))
            .ok()?;
        let bytes = SPLICE_PIPE_BYTES
            .iter()
            .find_map(|b| fcntl_setpipe_size(&w, *b).ok())
            .or_else(|| fcntl_getpipe_size(&w).ok())?;
        Some(SplicePipe {
            r,
            w,
            slots: bytes / rustix::param::page_size(),
        })
    }

    /// Put `head` and `len` bytes of `file` at `offset` in the pipe and
    /// move them to `dev` as one write.
    fn reply(
        &self,
        dev: &OwnedFd,
        head: &[u8],
        file: BorrowedFd<'_>,
        offset: u64,
        len: usize,
    ) -> io::Result<bool> {
        use rustix::io::Errno;
        use rustix::pipe::{SpliceFlags, splice};
        match rustix::io::write(&self.w, head) {
            Ok(n) if n == head.len() => {}
            _ => return Ok(false),
        }
        let mut at = offset;
        let mut moved = 0;
        while moved < len {
            match splice(
                file,
                Some(&mut at),
                &self.w,
                None,
                len - moved,
                SpliceFlags::empty(),
            ) {
                Ok(0) => return Ok(false),
                Ok(n) => moved += n,
                Err(Errno::INTR) => {}
                Err(_) => return Ok(false),
            }
        }
        let whole = head.len() + len;
        loop {
            match splice(&self.r, None, dev, None, whole, SpliceFlags::empty()) {
                Ok(n) if n == whole => return Ok(true),
                Ok(n) => {
                    return Err(io::Error::other(format!(
                        "a reply spliced {n} of {whole} bytes"
                    )));
                }
                Err(Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Empty the pipe of whatever a reply that was not completed left;
    /// false when it could not be emptied.
    fn drain(&self) -> bool {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match rustix::io::read(&self.r, &mut buf) {
                Ok(n) if n > 0 => {}
                Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::AGAIN) => return true,
                _ => return false,
            }
        }
    }
}

//! An append-only file written through a shared mapping ([`MappedLog`]):
//! an append is a copy into the file's pages, no system call. The kernel
//! holds every byte once it is copied, so a crash of the process loses
//! nothing appended (a crash of the machine may lose what was not yet
//! written back, as with `write`).
//!
//! The file is grown ahead in steps and its unused tail is zeros; its
//! content is what precedes the first zero byte, cut after the last
//! newline (a line torn by a crash mid-copy is dropped and overwritten).
//! Dropping the log cuts the file to its content. Only one log may be
//! open on a file at a time (its owner's lock sees to that): a file cut
//! shorter under a mapping kills the process that touches the lost pages.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::ptr::NonNull;

use rustix::mm::{MapFlags, MremapFlags, ProtFlags};

/// The smallest mapping, and the step it grows by at least.
const STEP: usize = 64 << 10;

#[derive(Debug)]
pub struct MappedLog {
    file: File,
    /// `cap` bytes mapped shared, read and write, from the file's start.
    map: NonNull<u8>,
    cap: usize,
    /// Bytes of content (the rest of the mapping is zeros).
    len: usize,
}

// SAFETY: the mapping is owned by this value alone (no other pointer to it
// leaves it but borrows of `self`), so moving it to another thread is as
// safe as moving a `Vec<u8>`.
unsafe impl Send for MappedLog {}

impl MappedLog {
    /// Open `path` for appending (made with `mode` if missing) and map it.
    pub fn open(path: &Path, mode: u32) -> io::Result<MappedLog> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(mode)
            .open(path)?;
        let size = usize::try_from(file.metadata()?.len()).map_err(io::Error::other)?;
        let cap = round_up(size.max(STEP));
        if cap != size {
            file.set_len(cap as u64)?;
        }
        // SAFETY: a fresh shared mapping of `cap` bytes of `file`, which is
        // `cap` bytes long now and is cut only by `Drop` after the
        // mapping is gone (see the module's note on other writers).
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                cap,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                &file,
                0,
            )?
        };
        let map =
            NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::other("mmap gave null"))?;
        let mut log = MappedLog {
            file,
            map,
            cap,
            len: 0,
        };
        let bytes = log.mapped();
        let used = bytes.iter().position(|b| *b == 0).unwrap_or(cap);
        let len = bytes[..used]
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |i| i + 1);
        // A torn last line: zeros again, to be written over.
        log.mapped_mut()[len..used].fill(0);
        log.len = len;
        Ok(log)
    }

    /// The content: whole lines.
    pub fn contents(&self) -> &[u8] {
        &self.mapped()[..self.len]
    }

    /// Append `bytes` (which must not hold a zero byte; a log of lines
    /// ends each with a newline).
    pub fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        debug_assert!(!bytes.contains(&0));
        let end = self.len + bytes.len();
        if end > self.cap {
            self.grow(round_up(end.max(self.cap + self.cap.max(STEP))))?;
        }
        let start = self.len;
        self.mapped_mut()[start..end].copy_from_slice(bytes);
        self.len = end;
        Ok(())
    }

    fn grow(&mut self, cap: usize) -> io::Result<()> {
        self.file.set_len(cap as u64)?;
        // SAFETY: the old mapping is this value's own, of `self.cap`
        // bytes, and no borrow of it is alive (`&mut self`); the file is
        // now `cap` bytes long, so every page of the new mapping is backed.
        let ptr = unsafe {
            rustix::mm::mremap(
                self.map.as_ptr().cast(),
                self.cap,
                cap,
                MremapFlags::MAYMOVE,
            )?
        };
        self.map =
            NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::other("mremap gave null"))?;
        self.cap = cap;
        Ok(())
    }

    fn mapped(&self) -> &[u8] {
        // SAFETY: `map` points at `cap` mapped, readable bytes for as long
        // as `self` lives, and the file is at least `cap` long.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr(), self.cap) }
    }

    fn mapped_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `mapped`, and writable; `&mut self` makes this
        // the only borrow.
        unsafe { std::slice::from_raw_parts_mut(self.map.as_ptr(), self.cap) }
    }
}

impl Drop for MappedLog {
    fn drop(&mut self) {
        // SAFETY: the mapping is this value's own and is not used again.
        let _ = unsafe { rustix::mm::munmap(self.map.as_ptr().cast(), self.cap) };
        // The file keeps its content only (best effort: a process that
        // dies skips this, and the zeros are read as the end).
        let _ = self.file.set_len(self.len as u64);
    }
}

fn round_up(n: usize) -> usize {
    let page = rustix::param::page_size();
    n.div_ceil(page) * page
}

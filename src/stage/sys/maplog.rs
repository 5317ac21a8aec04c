//! An append-only file of lines ([`AppendLog`]), written where it can be
//! through a shared mapping: an append is then a copy into the file's
//! pages, no system call. The kernel holds every byte once it is copied,
//! so a crash of the process loses nothing appended (a crash of the
//! machine may lose what was not yet written back, as with `write`).
//!
//! The mapped file is grown ahead in steps, its blocks reserved first
//! (`fallocate`), and its unused tail is zeros. A write into a mapping
//! that the filesystem can't back (a full disk) kills the process with
//! SIGBUS instead of failing, so a file is mapped only on a filesystem
//! that allocates the reserved blocks for good (ext4, xfs, tmpfs); on
//! any other (btrfs, whose copy-on-write needs new blocks for every
//! write; an overlay; NFS) each line is appended with `write`, and a full
//! disk is an error as it should be.
//!
//! The content is what precedes the first zero byte, cut after the last
//! newline: a line torn by a crash mid-copy is dropped and overwritten.
//! Dropping the log cuts the file to its content. Only one log may be
//! open on a file at a time (its owner's lock sees to that): a file cut
//! shorter under a mapping kills the process that touches the lost pages.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::ptr::NonNull;

use rustix::fs::FallocateFlags;
use rustix::mm::{MapFlags, MremapFlags, ProtFlags};

/// The smallest mapping, and the step it grows by at least.
const STEP: usize = 64 << 10;

/// Filesystems whose reserved blocks a write through a mapping never
/// needs more space for: ext4, xfs, tmpfs.
const MAPPABLE: [i64; 3] = [0xef53, 0x5846_5342, 0x0102_1994];

#[derive(Debug)]
pub struct AppendLog {
    file: File,
    /// Bytes of content.
    len: usize,
    /// The mapping, where the file is written through one.
    map: Option<Mapping>,
}

/// `cap` bytes of the file mapped shared, read and write, from its start;
/// the file is `cap` bytes long with its blocks reserved.
#[derive(Debug)]
struct Mapping {
    ptr: NonNull<u8>,
    cap: usize,
}

// SAFETY: the mapping is owned by this value alone (no pointer to it
// leaves it but borrows of `self`), so moving it to another thread is as
// safe as moving a `Vec<u8>`.
unsafe impl Send for AppendLog {}

impl AppendLog {
    /// Open `path` for appending (made with `mode` if missing): mapped
    /// where its filesystem allows (see the module's note), else written.
    pub fn open(path: &Path, mode: u32) -> io::Result<AppendLog> {
        Self::open_as(path, mode, true)
    }

    /// `open`, never mapped unless `may_map`.
    pub(super) fn open_as(path: &Path, mode: u32, may_map: bool) -> io::Result<AppendLog> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)?;
        if may_map && on_mappable_fs(&file) {
            match Self::map(file) {
                Ok(log) => return Ok(log),
                Err((file, e)) => {
                    tracing::debug!("{}: appended with write: {e}", path.display());
                    return Self::written(file);
                }
            }
        }
        Self::written(file)
    }

    /// Whether appends are copies into a mapping.
    pub fn is_mapped(&self) -> bool {
        self.map.is_some()
    }

    fn written(mut file: File) -> io::Result<AppendLog> {
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let len = content_len(&bytes);
        // A torn last line, or a mapped run's zeros: cut off, so that
        // appends follow the last whole line.
        if len != bytes.len() {
            file.set_len(len as u64)?;
        }
        Ok(AppendLog {
            file,
            len,
            map: None,
        })
    }

    fn map(file: File) -> Result<AppendLog, (File, io::Error)> {
        let size = match file.metadata() {
            Ok(m) => m.len() as usize,
            Err(e) => return Err((file, e)),
        };
        let cap = round_up(size.max(STEP));
        if let Err(e) = reserve(&file, cap) {
            return Err((file, e));
        }
        // SAFETY: a fresh shared mapping of `cap` bytes of `file`, which is
        // `cap` bytes long with its blocks reserved on a filesystem that
        // keeps them (`MAPPABLE`), and is cut only by `Drop` once the
        // mapping is gone (see the module's note on other writers).
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                cap,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                &file,
                0,
            )
        };
        let ptr = match ptr.map(|p| NonNull::new(p.cast::<u8>())) {
            Ok(Some(ptr)) => ptr,
            Ok(None) => return Err((file, io::Error::other("mmap gave null"))),
            Err(e) => return Err((file, e.into())),
        };
        let mut log = AppendLog {
            file,
            len: 0,
            map: Some(Mapping { ptr, cap }),
        };
        let bytes = log.mapped();
        let len = content_len(bytes);
        // Past it: a torn last line, and whatever a copy interrupted
        // mid-way wrote further on (a copy needn't go front to back):
        // zeros again, to be written over.
        let end = bytes.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
        if end > len {
            log.mapped_mut()[len..end].fill(0);
        }
        log.len = len;
        Ok(log)
    }

    /// The content: whole lines.
    pub fn contents(&self) -> io::Result<Vec<u8>> {
        if self.map.is_some() {
            return Ok(self.mapped()[..self.len].to_vec());
        }
        let mut bytes = vec![0; self.len];
        self.file.read_exact_at(&mut bytes, 0)?;
        Ok(bytes)
    }

    /// Append `bytes` (which must not hold a zero byte; a log of lines
    /// ends each with a newline).
    pub fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        debug_assert!(!bytes.contains(&0));
        let end = self.len + bytes.len();
        let Some(cap) = self.map.as_ref().map(|m| m.cap) else {
            // O_APPEND is not set: `written` may have cut a tail first.
            rustix::io::pwrite(&self.file, bytes, self.len as u64)
                .map_err(io::Error::from)
                .and_then(|n| {
                    (n == bytes.len())
                        .then_some(())
                        .ok_or_else(|| io::Error::from(io::ErrorKind::WriteZero))
                })?;
            self.len = end;
            return Ok(());
        };
        if end > cap {
            self.grow(round_up(end.max(cap + cap.max(STEP))))?;
        }
        let start = self.len;
        self.mapped_mut()[start..end].copy_from_slice(bytes);
        self.len = end;
        Ok(())
    }

    fn grow(&mut self, cap: usize) -> io::Result<()> {
        let Some(map) = &mut self.map else {
            return Ok(());
        };
        reserve(&self.file, cap)?;
        // SAFETY: the old mapping is this value's own, of `map.cap` bytes,
        // and no borrow of it is alive (`&mut self`); the file is now
        // `cap` bytes long with its blocks reserved, so every page of the
        // new mapping is backed.
        let ptr = unsafe {
            rustix::mm::mremap(map.ptr.as_ptr().cast(), map.cap, cap, MremapFlags::MAYMOVE)?
        };
        map.ptr =
            NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::other("mremap gave null"))?;
        map.cap = cap;
        Ok(())
    }

    fn mapped(&self) -> &[u8] {
        match &self.map {
            // SAFETY: `ptr` points at `cap` mapped, readable bytes for as
            // long as `self` lives, and the file is at least `cap` long.
            Some(m) => unsafe { std::slice::from_raw_parts(m.ptr.as_ptr(), m.cap) },
            None => &[],
        }
    }

    fn mapped_mut(&mut self) -> &mut [u8] {
        match &mut self.map {
            // SAFETY: as in `mapped`, and writable; `&mut self` makes this
            // the only borrow.
            Some(m) => unsafe { std::slice::from_raw_parts_mut(m.ptr.as_ptr(), m.cap) },
            None => &mut [],
        }
    }
}

impl Drop for AppendLog {
    fn drop(&mut self) {
        if let Some(m) = self.map.take() {
            // SAFETY: the mapping is this value's own and is not used again.
            let _ = unsafe { rustix::mm::munmap(m.ptr.as_ptr().cast(), m.cap) };
            // The file keeps its content only (best effort: a process that
            // dies skips this, and the zeros are read as the end).
            let _ = self.file.set_len(self.len as u64);
        }
    }
}

/// Whether `file` is on one of the `MAPPABLE` filesystems (`f_type` is
/// as wide as a C long on most architectures, a 32-bit one on others).
#[allow(clippy::useless_conversion)]
fn on_mappable_fs(file: &File) -> bool {
    rustix::fs::fstatfs(file).is_ok_and(|st| MAPPABLE.contains(&i64::from(st.f_type)))
}

/// Make `file` `cap` bytes long with every block allocated.
fn reserve(file: &File, cap: usize) -> io::Result<()> {
    rustix::fs::fallocate(file, FallocateFlags::empty(), 0, cap as u64)?;
    Ok(())
}

/// Where the whole lines of `bytes` end: before the first zero byte,
/// after the last newline.
fn content_len(bytes: &[u8]) -> usize {
    let used = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
    bytes[..used]
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |i| i + 1)
}

fn round_up(n: usize) -> usize {
    let page = rustix::param::page_size();
    n.div_ceil(page) * page
}

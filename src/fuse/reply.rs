//! Encoding replies. A [`Reply`] answers one request exactly once, from
//! whichever thread holds it (an approval answers later, from another);
//! one dropped unanswered answers EIO, so no request is left hanging.

use std::io;
use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::Duration;

use zerocopy::IntoBytes;

use super::abi;
use super::types::{FileAttr, FileType, valid};
use crate::fuse::sys::Device;

/// Where a reply goes: the device it came from, or its io_uring entry.
pub trait Sink: Send + Sync {
    /// Send the reply to request `unique` held in `slot`: `error` is 0
    /// or a negative errno; `body` the reply's bytes, in parts.
    fn send(&self, slot: u32, unique: u64, error: i32, body: &[&[u8]]);
    /// Answer request `unique` with up to `size` bytes of `file` at
    /// `offset` (fewer at its end), or with the errno reading them fails
    /// with (passed on as it is, as every backing call's errno is).
    fn send_file(&self, slot: u32, unique: u64, file: BorrowedFd<'_>, offset: u64, size: u32) {
        send_file_copied(self, slot, unique, file, offset, size);
    }
    /// The connection's device (for passthrough registrations); none
    /// where no kernel is behind the replies (a test's channel).
    fn device(&self) -> Option<&Arc<Device>>;
}

/// [`Sink::send_file`] by reading the bytes into a buffer this thread
/// keeps between requests (a READ of 128 KiB to 1 MiB would otherwise
/// allocate and zero that much every time).
pub fn send_file_copied<S: Sink + ?Sized>(
    sink: &S,
    slot: u32,
    unique: u64,
    file: BorrowedFd<'_>,
    offset: u64,
    size: u32,
) {
    thread_local! {
        static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    BUF.with_borrow_mut(|buf| {
        let size = size as usize;
        if buf.len() < size {
            buf.resize(size, 0);
        }
        match crate::backing::pread(file, &mut buf[..size], offset) {
            Ok(n) => sink.send(slot, unique, 0, &[&buf[..n]]),
            Err(e) => {
                tracing::debug!(unique, "read failed: {e}");
                sink.send(slot, unique, -e.raw_os_error(), &[]);
            }
        }
    });
}

/// A passthrough registration: the kernel's id for a backing file, held
/// while some open file uses it.
#[derive(Debug)]
pub struct BackingId {
    id: u32,
    dev: Arc<Device>,
}

impl BackingId {
    pub fn id(&self) -> u32 {
        self.id
    }
}

impl Drop for BackingId {
    fn drop(&mut self) {
        if let Err(e) = self.dev.backing_close(self.id) {
            tracing::debug!(id = self.id, "cannot close a passthrough backing id: {e}");
        }
    }
}

/// The answer to one request.
pub struct Reply {
    unique: u64,
    slot: u32,
    sink: Arc<dyn Sink>,
    sent: bool,
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reply")
            .field("unique", &self.unique)
            .finish()
    }
}

impl Reply {
    /// The reply to request `unique`; `expects` false for the requests
    /// the kernel wants no answer to (FORGET), whose reply sends nothing.
    pub fn new(unique: u64, slot: u32, sink: Arc<dyn Sink>, expects: bool) -> Reply {
        Reply {
            unique,
            slot,
            sink,
            sent: !expects,
        }
    }

    /// Send the answer, unless the kernel expects none: then nothing,
    /// whatever the answer (a FORGET the decoder could not read is not
    /// answered EIO).
    fn send(mut self, error: i32, body: &[&[u8]]) {
        let expected = !self.sent;
        self.sent = true;
        if expected {
            self.sink.send(self.slot, self.unique, error, body);
        }
    }

    /// Fail with `errno` (positive).
    pub fn error(self, errno: i32) {
        self.send(-errno, &[]);
    }

    pub fn ok(self) {
        self.send(0, &[]);
    }

    pub fn data(self, d: &[u8]) {
        self.send(0, &[d]);
    }

    /// Answer with up to `size` bytes of `file` at `offset` (a READ).
    pub fn file_data(mut self, file: BorrowedFd<'_>, offset: u64, size: u32) {
        let expected = !self.sent;
        self.sent = true;
        if expected {
            self.sink
                .send_file(self.slot, self.unique, file, offset, size);
        }
    }

    /// A looked-up (or made) entry: the node id the kernel keeps it
    /// under, and its attributes (whose `ino` is what `stat` shows; most
    /// often the node id too).
    pub fn entry(self, ttl: Duration, node: u64, attr: &FileAttr) {
        self.send(0, &[entry_out(ttl, node, attr).as_bytes()]);
    }

    pub fn attr(self, ttl: Duration, attr: &FileAttr) {
        let (s, ns) = valid(ttl);
        let out = abi::AttrOut {
            attr_valid: s,
            attr_valid_nsec: ns,
            dummy: 0,
            attr: attr.to_abi(),
        };
        self.send(0, &[out.as_bytes()]);
    }

    pub fn written(self, n: u32) {
        let out = abi::WriteOut {
            size: n,
            padding: 0,
        };
        self.send(0, &[out.as_bytes()]);
    }

    pub fn offset(self, offset: i64) {
        let out = abi::LseekOut {
            offset: offset as u64,
        };
        self.send(0, &[out.as_bytes()]);
    }

    pub fn xattr_size(self, size: u32) {
        let out = abi::GetxattrOut { size, padding: 0 };
        self.send(0, &[out.as_bytes()]);
    }

    pub fn statfs(self, out: &abi::StatfsOut) {
        self.send(0, &[out.as_bytes()]);
    }

    /// An opened file or directory: its handle, open flags and (with
    /// `FOPEN_PASSTHROUGH`) the backing id.
    pub fn opened(self, fh: u64, flags: u32, backing: Option<&BackingId>) {
        self.send(0, &[open_out(fh, flags, backing).as_bytes()]);
    }

    pub fn created(
        self,
        ttl: Duration,
        node: u64,
        attr: &FileAttr,
        fh: u64,
        flags: u32,
        backing: Option<&BackingId>,
    ) {
        let e = entry_out(ttl, node, attr);
        let o = open_out(fh, flags, backing);
        self.send(0, &[e.as_bytes(), o.as_bytes()]);
    }

    /// Register `fd` for passthrough on this reply's connection.
    pub fn register(&self, fd: BorrowedFd<'_>) -> io::Result<BackingId> {
        // A connection without a device has no kernel to pass files to.
        let dev = self
            .sink
            .device()
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EOPNOTSUPP))?;
        let id = dev.backing_open(fd)?;
        Ok(BackingId {
            id,
            dev: dev.clone(),
        })
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        if !self.sent {
            self.sent = true;
            self.sink.send(self.slot, self.unique, -libc::EIO, &[]);
        }
    }
}

fn entry_out(ttl: Duration, node: u64, attr: &FileAttr) -> abi::EntryOut {
    let (s, ns) = valid(ttl);
    abi::EntryOut {
        nodeid: node,
        generation: 0,
        entry_valid: s,
        attr_valid: s,
        entry_valid_nsec: ns,
        attr_valid_nsec: ns,
        attr: attr.to_abi(),
    }
}

fn open_out(fh: u64, flags: u32, backing: Option<&BackingId>) -> abi::OpenOut {
    match backing {
        Some(b) => abi::OpenOut {
            fh,
            open_flags: flags | abi::fopen::PASSTHROUGH,
            backing_id: b.id as i32,
        },
        None => abi::OpenOut {
            fh,
            open_flags: flags,
            backing_id: 0,
        },
    }
}

/// A READDIR or READDIRPLUS answer, filled up to the size the kernel asked.
#[derive(Debug)]
pub struct DirBuf {
    buf: Vec<u8>,
    max: usize,
}

impl DirBuf {
    pub fn new(max: u32) -> DirBuf {
        DirBuf {
            buf: Vec::with_capacity(max as usize),
            max: max as usize,
        }
    }

    fn push(&mut self, head: &[&[u8]], name: &[u8]) -> bool {
        let len: usize = head.iter().map(|h| h.len()).sum::<usize>() + name.len();
        let padded = len.next_multiple_of(8);
        if self.buf.len() + padded > self.max {
            return true;
        }
        for h in head {
            self.buf.extend_from_slice(h);
        }
        self.buf.extend_from_slice(name);
        self.buf.resize(self.buf.len() + padded - len, 0);
        false
    }

    /// Add a READDIR entry; true when it did not fit (the buffer is full).
    pub fn add(&mut self, ino: u64, offset: u64, kind: FileType, name: &[u8]) -> bool {
        let d = abi::Dirent {
            ino,
            off: offset,
            namelen: name.len() as u32,
            typ: kind.dirent_type(),
        };
        self.push(&[d.as_bytes()], name)
    }

    /// Add a READDIRPLUS entry; true when it did not fit.
    pub fn add_plus(
        &mut self,
        offset: u64,
        name: &[u8],
        ttl: Duration,
        node: u64,
        attr: &FileAttr,
    ) -> bool {
        let e = entry_out(ttl, node, attr);
        let d = abi::Dirent {
            ino: attr.ino.0,
            off: offset,
            namelen: name.len() as u32,
            typ: attr.kind.dirent_type(),
        };
        self.push(&[e.as_bytes(), d.as_bytes()], name)
    }

    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directory_entries_are_padded_to_eight_and_stop_when_full() {
        let mut b = DirBuf::new(128);
        assert!(!b.add(5, 1, FileType::RegularFile, b"abc"));
        assert_eq!(b.bytes().len(), 32, "24-byte dirent + 3 + padding");
        assert!(!b.add(6, 2, FileType::Directory, b"0123456789"));
        assert_eq!(b.bytes().len(), 32 + 40);
        let mut b = DirBuf::new(40);
        assert!(!b.add(5, 1, FileType::RegularFile, b"abc"));
        assert!(b.add(6, 2, FileType::RegularFile, b"def"), "full");
        assert_eq!(b.bytes().len(), 32);
    }
}

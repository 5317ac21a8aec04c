//! The `/dev/fuse` transport's side of a connection, as the serving code
//! sees it: a [`Channel`] reads one request and writes one reply, and
//! [`DevSink`] writes each reply back to the channel its request came from.
//!
//! The real channel is the FUSE device (`sys::Device`); tests drive the
//! handshake and the serving loop with a scripted one, without a kernel.
//! The loop is generic over the channel (no dynamic dispatch, no copy more
//! than the device itself makes).

use std::io::{self, IoSlice};
use std::os::fd::BorrowedFd;
use std::sync::Arc;

use zerocopy::IntoBytes;

use super::abi::OutHeader;
use super::reply::{Sink, send_file_copied};
use super::sys::Device;

/// One FUSE connection's request and reply stream, as `/dev/fuse` carries
/// it: each read returns exactly one whole request, each write takes
/// exactly one whole reply.
pub trait Channel: Send + Sync + 'static {
    /// Read one request into `buf` (which holds the largest request the
    /// connection allows). `ENODEV` or `ECONNABORTED`: the connection ended.
    fn read(&self, buf: &mut [u8]) -> io::Result<usize>;
    /// Write one reply or notification, whole.
    fn write(&self, parts: &[IoSlice<'_>]) -> io::Result<usize>;
    /// Make `read` return EAGAIN instead of waiting; `Ok(false)`: this
    /// channel can't.
    fn set_nonblocking(&self, _on: bool) -> io::Result<bool> {
        Ok(false)
    }
    /// Write a reply whose body is `len` bytes of `file` at `offset`
    /// without copying them through the daemon; `Ok(false)`: nothing was
    /// written, the caller copies instead (see `Device::write_spliced`).
    fn write_spliced(
        &self,
        _head: &[u8],
        _file: BorrowedFd<'_>,
        _offset: u64,
        _len: usize,
    ) -> io::Result<bool> {
        Ok(false)
    }
    /// The device that registers passthrough backing files for this
    /// connection; none for a channel without a kernel behind it.
    fn passthrough(self: &Arc<Self>) -> Option<&Arc<Device>> {
        None
    }
}

impl Channel for Device {
    fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        Device::read(self, buf)
    }

    fn write(&self, parts: &[IoSlice<'_>]) -> io::Result<usize> {
        Device::write(self, parts)
    }

    fn set_nonblocking(&self, on: bool) -> io::Result<bool> {
        Device::set_nonblocking(self, on).map(|()| true)
    }

    fn write_spliced(
        &self,
        head: &[u8],
        file: BorrowedFd<'_>,
        offset: u64,
        len: usize,
    ) -> io::Result<bool> {
        Device::write_spliced(self, head, file, offset, len)
    }

    fn passthrough(self: &Arc<Self>) -> Option<&Arc<Device>> {
        Some(self)
    }
}

/// Replies written to the channel they came from.
pub(crate) struct DevSink<C>(pub(crate) Arc<C>);

impl<C: Channel> Sink for DevSink<C> {
    fn send(&self, _slot: u32, unique: u64, error: i32, body: &[&[u8]]) {
        let len = std::mem::size_of::<OutHeader>() + body.iter().map(|b| b.len()).sum::<usize>();
        let h = OutHeader {
            len: len as u32,
            error,
            unique,
        };
        let head = IoSlice::new(h.as_bytes());
        // Every reply but a directory listing has at most two parts: no
        // allocation on the way out.
        let written = match body {
            [] => self.0.write(&[head]),
            [a] => self.0.write(&[head, IoSlice::new(a)]),
            [a, b] => self.0.write(&[head, IoSlice::new(a), IoSlice::new(b)]),
            _ => {
                let mut parts = Vec::with_capacity(1 + body.len());
                parts.push(head);
                parts.extend(body.iter().map(|b| IoSlice::new(b)));
                self.0.write(&parts)
            }
        };
        if let Err(e) = written {
            // ENOENT: the request was interrupted and is gone.
            if e.raw_os_error() != Some(libc::ENOENT) {
                tracing::debug!(unique, "cannot write a reply: {e}");
            }
        }
    }

    /// File data of at least [`SPLICE_MIN`] bytes goes from the backing
    /// file to the device through a pipe, not through the daemon's memory.
    fn send_file(&self, slot: u32, unique: u64, file: BorrowedFd<'_>, offset: u64, size: u32) {
        if let Some(len) = splice_len(file, offset, size) {
            let h = OutHeader {
                len: (std::mem::size_of::<OutHeader>() + len) as u32,
                error: 0,
                unique,
            };
            match self.0.write_spliced(h.as_bytes(), file, offset, len) {
                Ok(true) => return,
                Ok(false) => {}
                // The request was interrupted and is gone.
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return,
                // Answered by copying instead: a request never gets two
                // answers (the kernel refuses a second one with ENOENT).
                Err(e) => tracing::debug!(unique, "cannot splice a reply: {e}"),
            }
        }
        send_file_copied(self, slot, unique, file, offset, size);
    }

    fn device(&self) -> Option<&Arc<Device>> {
        self.0.passthrough()
    }
}

/// Replies of file data shorter than this are copied: moving a few pages
/// through a pipe costs more calls than copying them.
const SPLICE_MIN: usize = 32 * 1024;

/// How many bytes a READ of `size` at `offset` gets from `file` as it is
/// now, when that is worth splicing.
fn splice_len(file: BorrowedFd<'_>, offset: u64, size: u32) -> Option<usize> {
    if (size as usize) < SPLICE_MIN {
        return None;
    }
    let st = crate::backing::stat(file).ok()?;
    let left = (st.st_size as u64).saturating_sub(offset);
    let len = left.min(u64::from(size)) as usize;
    (len >= SPLICE_MIN).then_some(len)
}

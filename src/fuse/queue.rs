//! What the io_uring serving loop (`uring`) needs of one queue: its
//! entries' requests, their commits, waiting, growing, and what wakes it.
//! The real queue is a `FuseRing` (one io_uring on the FUSE device);
//! tests drive the loop with a scripted one, without a ring or a kernel.
//! The loop is generic over it: no dynamic dispatch on the ring's path.

use std::io;
use std::sync::Arc;

use super::abi::InHeader;
use super::channel::Channel;
use crate::backing::{Device, FuseRing, RingEvent, Waker};

/// Wakes a queue's thread from another thread (a reply made there).
pub(crate) trait Wake: Clone + Send + Sync + 'static {
    fn wake(&self);
}

impl Wake for Waker {
    fn wake(&self) {
        Waker::wake(self)
    }
}

/// One FUSE-over-io_uring queue: entries that each carry one request at a
/// time, answered by committing the entry (which also asks for the next).
pub(crate) trait Queue: Send + 'static {
    /// The connection's device: notifications go there (a nudge).
    type Dev: Channel;
    type Waker: Wake;
    fn waker(&self) -> Self::Waker;
    fn device(&self) -> &Arc<Self::Dev>;
    /// Hand every entry to the kernel.
    fn register_all(&mut self) -> io::Result<()>;
    /// Submit what is queued and wait for at least one event.
    fn wait(&mut self, out: &mut Vec<RingEvent>) -> io::Result<()>;
    /// Submit what is queued; the events already there.
    fn poll(&mut self, out: &mut Vec<RingEvent>) -> io::Result<()>;
    /// Entry `n`'s request: in-header, the opcode's header, the payload.
    fn request(&self, n: usize) -> io::Result<(InHeader, &[u8], &[u8])>;
    /// Answer entry `n`'s request and ask for the next.
    fn commit(&mut self, n: usize, unique: u64, error: i32, body: &[&[u8]]) -> io::Result<()>;
    /// The entries the kernel has been given.
    fn entries(&self) -> usize;
    /// The entries holding a request not answered yet.
    fn held(&self) -> usize;
    /// Add up to `n` entries; how many were added.
    fn grow(&mut self, n: usize) -> io::Result<usize>;
    /// Submit what is queued without waiting.
    fn flush(&mut self) -> io::Result<()>;
}

impl Queue for FuseRing {
    type Dev = Device;
    type Waker = Waker;

    fn waker(&self) -> Waker {
        FuseRing::waker(self)
    }

    fn device(&self) -> &Arc<Device> {
        FuseRing::device(self)
    }

    fn register_all(&mut self) -> io::Result<()> {
        FuseRing::register_all(self)
    }

    fn wait(&mut self, out: &mut Vec<RingEvent>) -> io::Result<()> {
        FuseRing::wait(self, out)
    }

    fn poll(&mut self, out: &mut Vec<RingEvent>) -> io::Result<()> {
        FuseRing::poll(self, out)
    }

    fn request(&self, n: usize) -> io::Result<(InHeader, &[u8], &[u8])> {
        FuseRing::request(self, n)
    }

    fn commit(&mut self, n: usize, unique: u64, error: i32, body: &[&[u8]]) -> io::Result<()> {
        FuseRing::commit(self, n, unique, error, body)
    }

    fn entries(&self) -> usize {
        FuseRing::entries(self)
    }

    fn held(&self) -> usize {
        FuseRing::held(self)
    }

    fn grow(&mut self, n: usize) -> io::Result<usize> {
        FuseRing::grow(self, n)
    }

    fn flush(&mut self) -> io::Result<()> {
        FuseRing::flush(self)
    }
}

//! One FUSE-over-io_uring queue: the kernel's ring entries for one CPU's
//! FUSE requests, over a [`Ring`](super::sys::Ring) (the io_uring and the
//! entries' shared buffers, `fuse::sys`).
//!
//! Each entry is registered with the kernel once (`REGISTER`). The kernel
//! fills its buffers with a request and completes the entry's command;
//! the answer goes into the same buffers and `COMMIT_AND_FETCH` hands
//! the entry back for the next request. An eventfd polled on the same
//! ring wakes the queue's thread when another thread has a reply ready.
//!
//! A queue starts with a few entries and grows on demand
//! ([`FuseRing::grow`]): the kernel takes a newly registered entry at
//! once. It has no way to take one back, so a queue never shrinks.
//!
//! An entry's buffers are read or written only between its completion
//! and its next submission: [`FuseRing::request`] after
//! [`Event::Request`], [`FuseRing::commit`] once.
//!
//! What the io_uring serving loop (`uring`) needs of a queue is the
//! [`Queue`] trait: its entries' requests, their commits, waiting,
//! growing, and what wakes it. [`FuseRing`] is the real one; tests drive
//! the loop with a scripted queue, without a ring or a kernel. The loop
//! is generic over it: no dynamic dispatch on the ring's path.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use zerocopy::{FromBytes, IntoBytes};

use super::abi::{
    InHeader, OutHeader, URING_CMD_COMMIT_AND_FETCH, URING_CMD_REGISTER, URING_ENT_OFFSET,
    URING_HEADER_SZ, URING_IN_OUT_HEADER_SZ, URING_OP_IN_OUT_SZ, UringEntInOut,
};
use super::channel::Channel;
use super::sys::{Device, Ring};

/// The completion user-data of the eventfd poll.
const WAKE: u64 = u64::MAX;

/// What a wait brought.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Entry `n` holds a request.
    Request(usize),
    /// Another thread has replies for this queue.
    Wake,
    /// Entry `n`'s command failed (ENOTCONN: the connection ended).
    Failed(usize, i32),
}

/// A queue's ring and entries.
pub struct FuseRing {
    ring: Ring,
    /// What a commit of each entry quotes (its request's unique).
    commit_ids: Vec<u64>,
    /// Entries handed to the kernel so far (the first `registered`; the
    /// rest wait for [`FuseRing::register_all`]).
    registered: usize,
    /// Entries that brought a request not committed yet.
    held: usize,
    qid: u16,
    dev: Arc<Device>,
    wake: Arc<OwnedFd>,
    wake_armed: bool,
}

/// Wakes a queue's thread (an eventfd the ring polls).
#[derive(Debug, Clone)]
pub struct Waker(Arc<OwnedFd>);

impl Waker {
    pub fn wake(&self) {
        let _ = rustix::io::write(&*self.0, &1u64.to_ne_bytes());
    }
}

impl FuseRing {
    /// A ring for queue `qid` of `dev`'s connection with `depth` entries
    /// to start with, each with a payload buffer of at least `payload`
    /// bytes.
    pub fn new(dev: &Arc<Device>, qid: u16, depth: usize, payload: usize) -> io::Result<FuseRing> {
        let ring = Ring::new(depth, payload)?;
        let wake = rustix::event::eventfd(
            0,
            rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
        )?;
        Ok(FuseRing {
            commit_ids: vec![0; ring.len()],
            ring,
            registered: 0,
            held: 0,
            qid,
            dev: dev.clone(),
            wake: Arc::new(wake),
            wake_armed: false,
        })
    }

    pub fn waker(&self) -> Waker {
        Waker(self.wake.clone())
    }

    pub fn device(&self) -> &Arc<Device> {
        &self.dev
    }

    /// The entries the kernel has been given.
    pub fn entries(&self) -> usize {
        self.registered
    }

    /// The entries that brought a request not answered yet (a request
    /// whose answer waits elsewhere, as an approval does, holds its entry
    /// until then).
    pub fn held(&self) -> usize {
        self.held
    }

    /// Queue the command `op` for entry `n`.
    fn push_cmd(&mut self, n: usize, op: u32, commit_id: u64) -> io::Result<()> {
        self.ring
            .push_cmd(self.dev.as_fd(), self.qid, n, op, commit_id)
    }

    fn arm_wake(&mut self) -> io::Result<()> {
        if !self.wake_armed {
            self.ring.push_poll(self.wake.as_fd(), WAKE)?;
            self.wake_armed = true;
        }
        Ok(())
    }

    /// Hand every entry to the kernel (the connection's INIT is done).
    pub fn register_all(&mut self) -> io::Result<()> {
        self.register_new()?;
        self.arm_wake()?;
        self.ring.submit()?;
        Ok(())
    }

    /// Queue a REGISTER of each entry not handed to the kernel yet.
    fn register_new(&mut self) -> io::Result<()> {
        while self.registered < self.ring.len() {
            self.push_cmd(self.registered, URING_CMD_REGISTER, 0)?;
            self.registered += 1;
        }
        Ok(())
    }

    /// Add `n` entries and hand them to the kernel with the next
    /// submission; the kernel gives the next requests of this queue to
    /// them (requests it already holds back for want of an entry go to
    /// the next entry committed). Returns how many were added: fewer when
    /// memory for their buffers can't be had.
    pub fn grow(&mut self, n: usize) -> io::Result<usize> {
        let before = self.ring.len();
        for _ in 0..n {
            match self.ring.add() {
                Ok(()) => self.commit_ids.push(0),
                Err(e) => {
                    tracing::warn!(qid = self.qid, "cannot add a ring entry: {e}");
                    break;
                }
            }
        }
        self.register_new()?;
        Ok(self.ring.len() - before)
    }

    /// Submit what is queued and wait for at least one completion; the
    /// completions in `out`.
    pub fn wait(&mut self, out: &mut Vec<Event>) -> io::Result<()> {
        match self.ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
            Err(e) => return Err(e),
        }
        self.reap(out)
    }

    /// Submit what is queued without waiting; the completions there are
    /// now in `out` (a commit that found a request waiting for an entry
    /// completes within the submission).
    pub fn poll(&mut self, out: &mut Vec<Event>) -> io::Result<()> {
        match self.ring.submit() {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
            Err(e) => return Err(e),
        }
        self.reap(out)
    }

    fn reap(&mut self, out: &mut Vec<Event>) -> io::Result<()> {
        for (data, res) in self.ring.completions() {
            if data == WAKE {
                self.wake_armed = false;
                let mut b = [0u8; 8];
                let _ = rustix::io::read(&*self.wake, &mut b);
                self.arm_wake()?;
                out.push(Event::Wake);
                continue;
            }
            let n = data as usize;
            if res == -libc::EAGAIN || res == -libc::EINTR {
                // Not ready yet (registration before INIT settled): again.
                self.push_cmd(n, URING_CMD_REGISTER, 0)?;
                continue;
            }
            if res < 0 {
                out.push(Event::Failed(n, -res));
                continue;
            }
            let io = UringEntInOut::read_from_bytes(
                &self.ring.header(n)[URING_ENT_OFFSET..URING_HEADER_SZ],
            )
            .map_err(|_| io::Error::other("ring entry header"))?;
            self.commit_ids[n] = io.commit_id;
            self.held += 1;
            out.push(Event::Request(n));
        }
        Ok(())
    }

    /// Entry `n`'s request: its in-header, the opcode's header and the
    /// payload. Valid after `Event::Request(n)` until `commit(n, ..)`.
    pub fn request(&self, n: usize) -> io::Result<(InHeader, &[u8], &[u8])> {
        let h = self.ring.header(n);
        let (ih, _) = InHeader::read_from_prefix(&h[..URING_IN_OUT_HEADER_SZ])
            .map_err(|_| io::Error::other("ring in-header"))?;
        let io = UringEntInOut::read_from_bytes(&h[URING_ENT_OFFSET..URING_HEADER_SZ])
            .map_err(|_| io::Error::other("ring entry header"))?;
        let op = &h[URING_IN_OUT_HEADER_SZ..URING_IN_OUT_HEADER_SZ + URING_OP_IN_OUT_SZ];
        let payload = self.ring.payload(n);
        let payload = &payload[..(io.payload_sz as usize).min(payload.len())];
        Ok((ih, op, payload))
    }

    /// Answer entry `n`'s request and ask for the next (queued; sent with
    /// the next `wait`).
    pub fn commit(&mut self, n: usize, unique: u64, error: i32, body: &[&[u8]]) -> io::Result<()> {
        let p = self.ring.payload_mut(n);
        let cap = p.len();
        let size: usize = body.iter().map(|b| b.len()).sum();
        let (error, size) = if size > cap {
            tracing::warn!(
                size,
                cap,
                "a reply larger than the ring's payload buffer; answered EIO"
            );
            (-libc::EIO, 0)
        } else {
            let mut at = 0;
            for b in body {
                p[at..at + b.len()].copy_from_slice(b);
                at += b.len();
            }
            (error, size)
        };
        let h = self.ring.header_mut(n);
        let out = OutHeader {
            len: (std::mem::size_of::<OutHeader>() + size) as u32,
            error,
            unique,
        };
        h[..std::mem::size_of::<OutHeader>()].copy_from_slice(out.as_bytes());
        let io = UringEntInOut {
            payload_sz: size as u32,
            ..Default::default()
        };
        h[URING_ENT_OFFSET..URING_HEADER_SZ].copy_from_slice(io.as_bytes());
        self.push_cmd(n, URING_CMD_COMMIT_AND_FETCH, self.commit_ids[n])?;
        self.held = self.held.saturating_sub(1);
        Ok(())
    }

    /// Submit what is queued without waiting.
    pub fn flush(&mut self) -> io::Result<()> {
        self.ring.submit().map(|_| ())
    }
}

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
    fn wait(&mut self, out: &mut Vec<Event>) -> io::Result<()>;
    /// Submit what is queued; the events already there.
    fn poll(&mut self, out: &mut Vec<Event>) -> io::Result<()>;
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

    fn wait(&mut self, out: &mut Vec<Event>) -> io::Result<()> {
        FuseRing::wait(self, out)
    }

    fn poll(&mut self, out: &mut Vec<Event>) -> io::Result<()> {
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

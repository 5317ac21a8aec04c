//! One FUSE-over-io_uring queue: an io_uring whose entries are the
//! kernel's ring entries for one CPU's FUSE requests.
//!
//! Each entry owns a header buffer (`struct fuse_uring_req_header`: the
//! in/out header, the opcode's header, the entry's in/out record) and a
//! payload buffer, registered with the kernel once (`REGISTER`). The
//! kernel fills them with a request and completes the entry's command;
//! the answer goes into the same buffers and `COMMIT_AND_FETCH` hands
//! the entry back for the next request. An eventfd polled on the same
//! ring wakes the queue's thread when another thread has a reply ready.
//!
//! The kernel wants every payload buffer as large as the largest request
//! (`max_write`, 1 MiB here). Each entry's buffers are one anonymous
//! mapping, which takes memory only page by page as the kernel copies a
//! request in or the daemon writes a reply: an entry costs what its
//! requests used, an entry never used costs nothing. A queue starts with
//! a few entries and grows on demand ([`FuseRing::grow`]): the kernel
//! takes a newly registered entry at once. It has no way to take one
//! back, so a queue never shrinks.
//!
//! The buffers are shared with the kernel while an entry is registered or
//! committed: this module reads or writes them only between the entry's
//! completion and its next submission, and never moves or frees them
//! while the ring lives.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Arc;

use io_uring::{IoUring, cqueue, opcode, squeue, types};
use rustix::mm::{MapFlags, ProtFlags};
use zerocopy::{FromBytes, IntoBytes};

use super::Device;
use crate::fuse::abi::{
    InHeader, OutHeader, URING_CMD_COMMIT_AND_FETCH, URING_CMD_REGISTER, URING_ENT_OFFSET,
    URING_HEADER_SZ, URING_IN_OUT_HEADER_SZ, URING_OP_IN_OUT_SZ, UringCmdReq, UringEntInOut,
};

const PAGE: usize = 4096;

/// The completion user-data of the eventfd poll.
const WAKE: u64 = u64::MAX;

/// Submission slots of a queue's ring: commands beyond this many in one
/// round are handed to the kernel in turn ([`FuseRing::push`]).
const SQ_ENTRIES: u32 = 32;
/// Completion slots. A queue with more entries than this completing at
/// once leaves the rest with the kernel until there is room (no
/// completion is dropped: `IORING_FEAT_NODROP`, Linux 5.5).
const CQ_ENTRIES: u32 = 128;

/// One ring entry's buffers: one anonymous mapping, the header (one page,
/// `struct fuse_uring_req_header`) first, then `pages` pages of payload.
struct Ent {
    map: *mut u8,
    pages: usize,
    /// The two iovecs REGISTER points the kernel at.
    iov: Box<[libc::iovec; 2]>,
    /// What a commit of this entry quotes (the request's unique).
    commit_id: u64,
}

impl Ent {
    fn new(pages: usize) -> io::Result<Ent> {
        let len = (1 + pages) * PAGE;
        // SAFETY: a new private anonymous mapping with no address hint
        // aliases nothing; it is unmapped once, in `Drop`.
        let map = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE,
            )
        }?
        .cast::<u8>();
        let iov = Box::new([
            libc::iovec {
                iov_base: map.cast(),
                iov_len: URING_HEADER_SZ,
            },
            libc::iovec {
                // SAFETY: one page past the start is inside the mapping.
                iov_base: unsafe { map.add(PAGE) }.cast(),
                iov_len: pages * PAGE,
            },
        ]);
        Ok(Ent {
            map,
            pages,
            iov,
            commit_id: 0,
        })
    }

    fn header(&self) -> &[u8] {
        // SAFETY: the mapping's first page, live while the entry is;
        // callers only reach it while the kernel does not own the entry.
        unsafe { std::slice::from_raw_parts(self.map, PAGE) }
    }

    fn header_mut(&mut self) -> &mut [u8] {
        // SAFETY: as `header`, and `&mut self` makes the borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.map, PAGE) }
    }

    fn payload(&self) -> &[u8] {
        // SAFETY: the `pages` pages after the header, inside the mapping;
        // reached only while userspace owns the entry.
        unsafe { std::slice::from_raw_parts(self.map.add(PAGE), self.pages * PAGE) }
    }

    fn payload_mut(&mut self) -> &mut [u8] {
        // SAFETY: as `payload`, unique through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.map.add(PAGE), self.pages * PAGE) }
    }
}

impl Drop for Ent {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `Ent::new`, of this length, unmapped
        // once, here, after the ring (which the kernel used it through)
        // is gone: `FuseRing` drops its `IoUring` before its entries.
        if let Err(e) = unsafe { rustix::mm::munmap(self.map.cast(), (1 + self.pages) * PAGE) } {
            tracing::warn!("cannot unmap a ring entry's buffers: {e}");
        }
    }
}

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
    // Dropped first: the kernel lets go of the buffers with the ring.
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    ents: Vec<Ent>,
    /// Entries handed to the kernel so far (the first `registered` of
    /// `ents`; the rest wait for [`FuseRing::register_all`]).
    registered: usize,
    /// Entries that brought a request not committed yet.
    held: usize,
    /// Payload pages per entry.
    pages: usize,
    qid: u16,
    dev: Arc<Device>,
    wake: Arc<OwnedFd>,
    wake_armed: bool,
}

// SAFETY: the raw pointers are owned buffers, used only by the thread that
// holds the `FuseRing` (and by the kernel); nothing else aliases them.
unsafe impl Send for FuseRing {}

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
        let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder()
            .setup_cqsize(CQ_ENTRIES)
            .build(SQ_ENTRIES)?;
        let wake = rustix::event::eventfd(
            0,
            rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
        )?;
        let pages = payload.div_ceil(PAGE);
        Ok(FuseRing {
            ring,
            ents: (0..depth)
                .map(|_| Ent::new(pages))
                .collect::<io::Result<_>>()?,
            registered: 0,
            held: 0,
            pages,
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

    /// The command SQE for entry `n`.
    fn cmd(&self, n: usize, op: u32, commit_id: u64) -> squeue::Entry128 {
        let req = UringCmdReq {
            flags: 0,
            commit_id,
            qid: self.qid,
            padding: [0; 6],
        };
        let mut cmd = [0u8; 80];
        cmd[..std::mem::size_of::<UringCmdReq>()].copy_from_slice(req.as_bytes());
        let mut b = opcode::UringCmd80::new(types::Fd(self.dev.as_fd().as_raw_fd()), op).cmd(cmd);
        if op == URING_CMD_REGISTER {
            b = b.addr(Some(self.ents[n].iov.as_ptr() as u64));
        }
        let e = b.build().user_data(n as u64);
        if op == URING_CMD_REGISTER {
            with_len(e, 2)
        } else {
            e
        }
    }

    fn push(&mut self, e: &squeue::Entry128) -> io::Result<()> {
        loop {
            // SAFETY: the entry points the kernel at an entry's iovecs and
            // buffers (or at nothing), which live as long as the ring.
            if unsafe { self.ring.submission().push(e) }.is_ok() {
                return Ok(());
            }
            // Full: hand what is queued to the kernel first.
            self.ring.submit()?;
        }
    }

    fn arm_wake(&mut self) -> io::Result<()> {
        if !self.wake_armed {
            let poll = opcode::PollAdd::new(types::Fd(self.wake.as_raw_fd()), libc::POLLIN as u32)
                .build()
                .user_data(WAKE);
            self.push(&squeue::Entry128::from(poll))?;
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
        while self.registered < self.ents.len() {
            let e = self.cmd(self.registered, URING_CMD_REGISTER, 0);
            self.push(&e)?;
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
        let before = self.ents.len();
        for _ in 0..n {
            match Ent::new(self.pages) {
                Ok(e) => self.ents.push(e),
                Err(e) => {
                    tracing::warn!(qid = self.qid, "cannot add a ring entry: {e}");
                    break;
                }
            }
        }
        self.register_new()?;
        Ok(self.ents.len() - before)
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
        let done: Vec<(u64, i32)> = self
            .ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        for (data, res) in done {
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
                let e = self.cmd(n, URING_CMD_REGISTER, 0);
                self.push(&e)?;
                continue;
            }
            if res < 0 {
                out.push(Event::Failed(n, -res));
                continue;
            }
            let ent = &mut self.ents[n];
            let io =
                UringEntInOut::read_from_bytes(&ent.header()[URING_ENT_OFFSET..URING_HEADER_SZ])
                    .map_err(|_| io::Error::other("ring entry header"))?;
            ent.commit_id = io.commit_id;
            self.held += 1;
            out.push(Event::Request(n));
        }
        Ok(())
    }

    /// Entry `n`'s request: its in-header, the opcode's header and the
    /// payload. Valid after `Event::Request(n)` until `commit(n, ..)`.
    pub fn request(&self, n: usize) -> io::Result<(InHeader, &[u8], &[u8])> {
        let ent = &self.ents[n];
        let h = ent.header();
        let (ih, _) = InHeader::read_from_prefix(&h[..URING_IN_OUT_HEADER_SZ])
            .map_err(|_| io::Error::other("ring in-header"))?;
        let io = UringEntInOut::read_from_bytes(&h[URING_ENT_OFFSET..URING_HEADER_SZ])
            .map_err(|_| io::Error::other("ring entry header"))?;
        let op = &h[URING_IN_OUT_HEADER_SZ..URING_IN_OUT_HEADER_SZ + URING_OP_IN_OUT_SZ];
        let payload = &ent.payload()[..(io.payload_sz as usize).min(ent.pages * PAGE)];
        Ok((ih, op, payload))
    }

    /// Answer entry `n`'s request and ask for the next (queued; sent with
    /// the next `wait`).
    pub fn commit(&mut self, n: usize, unique: u64, error: i32, body: &[&[u8]]) -> io::Result<()> {
        let ent = &mut self.ents[n];
        let cap = ent.pages * PAGE;
        let size: usize = body.iter().map(|b| b.len()).sum();
        let (error, size) = if size > cap {
            tracing::warn!(
                size,
                cap,
                "a reply larger than the ring's payload buffer; answered EIO"
            );
            (-libc::EIO, 0)
        } else {
            let p = ent.payload_mut();
            let mut at = 0;
            for b in body {
                p[at..at + b.len()].copy_from_slice(b);
                at += b.len();
            }
            (error, size)
        };
        let h = ent.header_mut();
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
        let commit_id = ent.commit_id;
        let e = self.cmd(n, URING_CMD_COMMIT_AND_FETCH, commit_id);
        self.push(&e)?;
        self.held = self.held.saturating_sub(1);
        Ok(())
    }

    /// Submit what is queued without waiting.
    pub fn flush(&mut self) -> io::Result<()> {
        self.ring.submit().map(|_| ())
    }
}

/// `e` with the SQE's `len` field set: `IORING_OP_URING_CMD` has no setter
/// for it in the io_uring crate, and FUSE's REGISTER wants the iovec count
/// there.
fn with_len(e: squeue::Entry128, len: u32) -> squeue::Entry128 {
    // SAFETY: `Entry128` is `#[repr(C)]` over `struct io_uring_sqe` (64
    // bytes) and 64 more bytes: 128 plain bytes with no invalid values.
    // `len` is the u32 at offset 24 of `struct io_uring_sqe`.
    let mut raw: [u8; 128] = unsafe { std::mem::transmute(e) };
    raw[24..28].copy_from_slice(&len.to_ne_bytes());
    // SAFETY: as above, every 128-byte pattern is a valid `Entry128`.
    unsafe { std::mem::transmute::<[u8; 128], squeue::Entry128>(raw) }
}

/// Whether this kernel lets a process set up an io_uring at all
/// (`kernel.io_uring_disabled` may forbid it).
pub fn io_uring_allowed() -> bool {
    IoUring::<squeue::Entry128, cqueue::Entry>::builder()
        .build(2)
        .is_ok()
}

/// The number of possible CPUs: the kernel makes one queue per possible
/// CPU and routes each request to the queue of the CPU it was made on.
pub fn possible_cpus() -> usize {
    std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|s| {
            s.trim()
                .split(',')
                .filter_map(|r| r.rsplit('-').next()?.parse::<usize>().ok())
                .max()
        })
        .map(|m| m + 1)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_len_field_is_set_where_the_kernel_reads_it() {
        let e = opcode::UringCmd80::new(types::Fd(3), URING_CMD_REGISTER)
            .addr(Some(0x1000))
            .build();
        let raw: [u8; 128] = unsafe_free_bytes(with_len(e, 2));
        assert_eq!(raw[0], io_uring::opcode::UringCmd80::CODE);
        assert_eq!(u32::from_ne_bytes(raw[24..28].try_into().unwrap()), 2);
        assert_eq!(u64::from_ne_bytes(raw[16..24].try_into().unwrap()), 0x1000);
        assert_eq!(i32::from_ne_bytes(raw[4..8].try_into().unwrap()), 3);
    }

    fn unsafe_free_bytes(e: squeue::Entry128) -> [u8; 128] {
        // SAFETY: as in `with_len`.
        unsafe { std::mem::transmute(e) }
    }

    #[test]
    fn possible_cpus_counts_at_least_the_online_ones() {
        let online = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert!(possible_cpus() >= online);
    }

    /// How many of the `pages` pages from `addr` are resident (mincore).
    fn resident(addr: *mut u8, pages: usize) -> usize {
        let mut v = vec![0u8; pages];
        // SAFETY: `addr` starts a live mapping of at least `pages` pages
        // (page-aligned, as mmap returns), and `v` holds one byte per page.
        let r = unsafe { libc::mincore(addr.cast(), pages * PAGE, v.as_mut_ptr()) };
        assert_eq!(r, 0, "mincore: {}", io::Error::last_os_error());
        v.iter().filter(|&&b| b & 1 != 0).count()
    }

    /// An entry's buffers take memory as they are written, not before:
    /// each was 1 MiB written at start, per entry and per possible CPU.
    #[test]
    fn an_entry_costs_what_its_requests_use() {
        let mut e = Ent::new(256).unwrap();
        assert_eq!(resident(e.map, 257), 0);
        e.header_mut()[0] = 1;
        e.payload_mut()[..5000].fill(1);
        assert_eq!(
            resident(e.map, 257),
            3,
            "the header page, two payload pages"
        );
        assert_eq!(e.payload().len(), 256 * PAGE);
        assert_eq!(e.header()[0], 1);
    }

    /// The header buffer (one page) holds `struct fuse_uring_req_header`.
    const _: () = assert!(URING_HEADER_SZ == 288 && URING_HEADER_SZ <= PAGE);
}

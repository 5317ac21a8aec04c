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
//! The buffers are shared with the kernel while an entry is registered or
//! committed: this module reads or writes them only between the entry's
//! completion and its next submission, and never moves or frees them
//! while the ring lives.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Arc;

use io_uring::{IoUring, cqueue, opcode, squeue, types};
use zerocopy::{FromBytes, IntoBytes};

use super::Device;
use crate::fuse::abi::{
    InHeader, OutHeader, URING_CMD_COMMIT_AND_FETCH, URING_CMD_REGISTER, URING_ENT_OFFSET,
    URING_HEADER_SZ, URING_IN_OUT_HEADER_SZ, URING_OP_IN_OUT_SZ, UringCmdReq, UringEntInOut,
};

const PAGE: usize = 4096;

/// A page-aligned page (the kernel pins the header buffer's pages).
#[repr(C, align(4096))]
#[derive(Clone, Copy)]
struct Page([u8; PAGE]);

/// The completion user-data of the eventfd poll.
const WAKE: u64 = u64::MAX;

/// One ring entry's buffers.
struct Ent {
    /// `struct fuse_uring_req_header` (one page).
    header: *mut Page,
    /// The payload buffer (`pages` pages).
    payload: *mut Page,
    pages: usize,
    /// The two iovecs REGISTER points the kernel at.
    iov: *mut [libc::iovec; 2],
    /// What a commit of this entry quotes (the request's unique).
    commit_id: u64,
}

impl Ent {
    fn new(pages: usize) -> Ent {
        let header = Box::into_raw(Box::new(Page([0; PAGE])));
        let payload = Box::into_raw(vec![Page([0; PAGE]); pages].into_boxed_slice()).cast::<Page>();
        let iov = Box::into_raw(Box::new([
            libc::iovec {
                iov_base: header.cast(),
                iov_len: URING_HEADER_SZ,
            },
            libc::iovec {
                iov_base: payload.cast(),
                iov_len: pages * PAGE,
            },
        ]));
        Ent {
            header,
            payload,
            pages,
            iov,
            commit_id: 0,
        }
    }

    fn header(&self) -> &[u8] {
        // SAFETY: `header` is a live page owned by this entry; callers
        // only reach it while the kernel does not own the entry.
        unsafe { &(*self.header).0 }
    }

    fn header_mut(&mut self) -> &mut [u8] {
        // SAFETY: as `header`, and `&mut self` makes the borrow unique.
        unsafe { &mut (*self.header).0 }
    }

    fn payload(&self) -> &[u8] {
        // SAFETY: `payload` points to `pages` live pages owned by this
        // entry (one allocation); reached only while userspace owns it.
        unsafe { std::slice::from_raw_parts(self.payload.cast::<u8>(), self.pages * PAGE) }
    }

    fn payload_mut(&mut self) -> &mut [u8] {
        // SAFETY: as `payload`, unique through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.payload.cast::<u8>(), self.pages * PAGE) }
    }
}

impl Drop for Ent {
    fn drop(&mut self) {
        // SAFETY: each pointer came from `Box::into_raw` in `Ent::new`
        // with these types and lengths, and is freed once, here, after
        // the ring (which the kernel used them through) is gone: `FuseRing`
        // drops its `IoUring` before its entries.
        unsafe {
            drop(Box::from_raw(self.iov));
            drop(Box::from_raw(self.header));
            drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                self.payload,
                self.pages,
            )));
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
    /// A ring for queue `qid` of `dev`'s connection with `depth` entries,
    /// each with a payload buffer of at least `payload` bytes.
    pub fn new(dev: &Arc<Device>, qid: u16, depth: usize, payload: usize) -> io::Result<FuseRing> {
        let sq = (depth + 1).next_power_of_two() as u32;
        let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder()
            .setup_cqsize(sq * 2)
            .build(sq)?;
        let wake = rustix::event::eventfd(
            0,
            rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
        )?;
        let pages = payload.div_ceil(PAGE);
        Ok(FuseRing {
            ring,
            ents: (0..depth).map(|_| Ent::new(pages)).collect(),
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
            b = b.addr(Some(self.ents[n].iov as u64));
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
        for n in 0..self.ents.len() {
            let e = self.cmd(n, URING_CMD_REGISTER, 0);
            self.push(&e)?;
        }
        self.arm_wake()?;
        self.ring.submit()?;
        Ok(())
    }

    /// Submit what is queued and wait for at least one completion; the
    /// completions in `out`.
    pub fn wait(&mut self, out: &mut Vec<Event>) -> io::Result<()> {
        match self.ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
            Err(e) => return Err(e),
        }
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
        self.push(&e)
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

    /// The header buffer (one page) holds `struct fuse_uring_req_header`.
    const _: () = assert!(URING_HEADER_SZ == 288 && URING_HEADER_SZ <= PAGE);
}

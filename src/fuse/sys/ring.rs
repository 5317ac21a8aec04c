//! One FUSE-over-io_uring ring's system side: an io_uring whose entries
//! are the kernel's ring entries for one CPU's FUSE requests, and their
//! buffers, shared with the kernel ([`Ring`]). What the entries mean
//! (registering, fetching, committing, the queue's growth) is
//! `fuse::queue`'s.
//!
//! Each entry owns a header buffer (`struct fuse_uring_req_header`: the
//! in/out header, the opcode's header, the entry's in/out record) and a
//! payload buffer, registered with the kernel once (`REGISTER`). The
//! kernel wants every payload buffer as large as the largest request
//! (`max_write`, 1 MiB here). Each entry's buffers are one anonymous
//! mapping, which takes memory only page by page as the kernel copies a
//! request in or the daemon writes a reply: an entry costs what its
//! requests used, an entry never used costs nothing.
//!
//! The buffers are shared with the kernel while an entry is registered or
//! committed: they are read or written only between the entry's
//! completion and its next submission (the queue's rule), and never moved
//! or freed while the ring lives: the ring is dropped before them.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use io_uring::{IoUring, cqueue, opcode, squeue, types};
use rustix::mm::{MapFlags, ProtFlags};
use zerocopy::IntoBytes;

use crate::fuse::abi::{URING_CMD_REGISTER, URING_HEADER_SZ, UringCmdReq};

const PAGE: usize = 4096;

/// Submission slots of a queue's ring: commands beyond this many in one
/// round are handed to the kernel in turn ([`Ring::push`]).
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
        Ok(Ent { map, pages, iov })
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

/// An io_uring and its FUSE entries' buffers.
pub struct Ring {
    // Dropped first: the kernel lets go of the buffers with the ring.
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    ents: Vec<Ent>,
    /// Payload pages per entry.
    pages: usize,
}

// SAFETY: the raw pointers are owned buffers, used only by the thread that
// holds the `Ring` (and by the kernel); nothing else aliases them.
unsafe impl Send for Ring {}

impl Ring {
    /// A ring with `depth` entries, each with a payload buffer of at least
    /// `payload` bytes.
    pub fn new(depth: usize, payload: usize) -> io::Result<Ring> {
        let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder()
            .setup_cqsize(CQ_ENTRIES)
            .build(SQ_ENTRIES)?;
        let pages = payload.div_ceil(PAGE);
        Ok(Ring {
            ring,
            ents: (0..depth)
                .map(|_| Ent::new(pages))
                .collect::<io::Result<_>>()?,
            pages,
        })
    }

    /// The entries made so far.
    pub fn len(&self) -> usize {
        self.ents.len()
    }

    /// Whether there is no entry.
    pub fn is_empty(&self) -> bool {
        self.ents.is_empty()
    }

    /// Make one more entry (not yet handed to the kernel).
    pub fn add(&mut self) -> io::Result<()> {
        self.ents.push(Ent::new(self.pages)?);
        Ok(())
    }

    /// Queue the FUSE command `op` for entry `n` of queue `qid` of the
    /// connection `dev` (REGISTER points the kernel at the entry's
    /// buffers; COMMIT_AND_FETCH quotes `commit_id`).
    pub fn push_cmd(
        &mut self,
        dev: BorrowedFd<'_>,
        qid: u16,
        n: usize,
        op: u32,
        commit_id: u64,
    ) -> io::Result<()> {
        let req = UringCmdReq {
            flags: 0,
            commit_id,
            qid,
            padding: [0; 6],
        };
        let mut cmd = [0u8; 80];
        cmd[..std::mem::size_of::<UringCmdReq>()].copy_from_slice(req.as_bytes());
        let mut b = opcode::UringCmd80::new(types::Fd(dev.as_raw_fd()), op).cmd(cmd);
        if op == URING_CMD_REGISTER {
            b = b.addr(Some(self.ents[n].iov.as_ptr() as u64));
        }
        let e = b.build().user_data(n as u64);
        let e = if op == URING_CMD_REGISTER {
            with_len(e, 2)
        } else {
            e
        };
        self.push(&e)
    }

    /// Queue a poll for `fd` turning readable, completing as `user_data`.
    pub fn push_poll(&mut self, fd: BorrowedFd<'_>, user_data: u64) -> io::Result<()> {
        let poll = opcode::PollAdd::new(types::Fd(fd.as_raw_fd()), libc::POLLIN as u32)
            .build()
            .user_data(user_data);
        self.push(&squeue::Entry128::from(poll))
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

    /// Hand what is queued to the kernel.
    pub fn submit(&mut self) -> io::Result<usize> {
        self.ring.submit()
    }

    /// Hand what is queued to the kernel and wait for `want` completions.
    pub fn submit_and_wait(&mut self, want: usize) -> io::Result<usize> {
        self.ring.submit_and_wait(want)
    }

    /// The completions there: each one's user data and result.
    pub fn completions(&mut self) -> Vec<(u64, i32)> {
        self.ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect()
    }

    /// Entry `n`'s header buffer.
    pub fn header(&self, n: usize) -> &[u8] {
        self.ents[n].header()
    }

    pub fn header_mut(&mut self, n: usize) -> &mut [u8] {
        self.ents[n].header_mut()
    }

    /// Entry `n`'s payload buffer.
    pub fn payload(&self, n: usize) -> &[u8] {
        self.ents[n].payload()
    }

    pub fn payload_mut(&mut self, n: usize) -> &mut [u8] {
        self.ents[n].payload_mut()
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

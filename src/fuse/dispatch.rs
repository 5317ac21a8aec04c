//! What a filesystem served by this layer implements, and the one step
//! every transport shares: a request's bytes decoded and handed to the
//! filesystem with its reply.
//!
//! Both transports use it (`session` for `/dev/fuse`, `uring` for the
//! rings); it uses neither, so the two never import each other.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::abi::InHeader;
use super::reply::{Reply, Sink};
use super::request::{Args, Malformed, Request, has_reply};

/// How many requests of each opcode a filesystem answered: one relaxed
/// atomic add per request (`status --json` shows them, so a workload's
/// round trips can be counted without tracing).
#[derive(Debug)]
pub struct OpCounts([AtomicU64; OP_SLOTS]);

/// Opcodes below this are counted by opcode; the rest together in the
/// last slot.
const OP_SLOTS: usize = 64;

impl Default for OpCounts {
    fn default() -> Self {
        OpCounts(std::array::from_fn(|_| AtomicU64::new(0)))
    }
}

impl OpCounts {
    pub fn count(&self, opcode: u32) {
        let i = (opcode as usize).min(OP_SLOTS - 1);
        self.0[i].fetch_add(1, Ordering::Relaxed);
    }

    /// The opcodes seen, by name (`OTHER`: those this daemon does not
    /// speak), with their counts.
    pub fn snapshot(&self) -> BTreeMap<&'static str, u64> {
        let mut out = BTreeMap::new();
        for (i, n) in self.0.iter().enumerate() {
            let n = n.load(Ordering::Relaxed);
            if n == 0 {
                continue;
            }
            let name = match i {
                i if i == OP_SLOTS - 1 => "OTHER",
                i => super::abi::op::name(i as u32).unwrap_or("OTHER"),
            };
            *out.entry(name).or_insert(0) += n;
        }
        out
    }
}

/// What the kernel offered at INIT.
#[derive(Debug, Clone, Copy)]
pub struct Offer {
    pub minor: u32,
    pub flags: u64,
    pub max_readahead: u32,
}

/// What the filesystem asks for in INIT's reply. Flags the kernel did not
/// offer are dropped.
#[derive(Debug, Clone, Copy)]
pub struct Wants {
    pub flags: u64,
    pub max_write: u32,
    pub max_pages: u16,
    pub max_stack_depth: u32,
    /// How many requests the kernel may have in flight in the background
    /// (reads ahead, writeback).
    pub max_background: u16,
}

/// The settled connection parameters.
#[derive(Debug, Clone, Copy)]
pub struct Agreed {
    pub minor: u32,
    pub flags: u64,
    pub max_write: u32,
    pub max_pages: u16,
}

impl Agreed {
    pub fn has(&self, flag: u64) -> bool {
        self.flags & flag != 0
    }

    /// The largest request: a write of `max_write` bytes with its headers.
    pub fn request_size(&self) -> usize {
        let pages = usize::from(self.max_pages.max(1)) * 4096;
        (self.max_write as usize).max(pages) + 4096
    }

    /// The most data a READ or READDIR(PLUS) asks for under this
    /// agreement: `max_pages` pages (the kernel's default of 32 when it
    /// did not agree to `FUSE_MAX_PAGES`), or `max_write` if that is
    /// more. A kernel never asks for more (it takes at most the pages we
    /// offered); a request that does is held to this before the
    /// filesystem sees it, so its answer is never allocated larger.
    pub fn max_data(&self) -> u32 {
        let pages = match self.max_pages {
            0 => DEFAULT_MAX_PAGES,
            n => u32::from(n),
        };
        let page = u32::try_from(rustix::param::page_size()).unwrap_or(u32::MAX);
        pages.saturating_mul(page).max(self.max_write)
    }
}

/// The pages per request of a kernel that did not agree to
/// `FUSE_MAX_PAGES` (its `FUSE_DEFAULT_MAX_PAGES_PER_REQ`).
const DEFAULT_MAX_PAGES: u32 = 32;

/// A filesystem served by a [`Session`](super::Session).
pub trait Filesystem: Send + Sync + 'static {
    /// What to ask of the kernel, given its offer.
    fn init(&self, offer: &Offer) -> Wants;
    /// What the kernel agreed to (called once, before any request).
    fn agreed(&self, agreed: &Agreed);
    /// Answer one request (INIT aside). Requests the kernel expects no
    /// answer to come with a reply that sends nothing.
    fn dispatch(&self, req: Request<'_>, reply: Reply);
}

/// Decode one request and hand it to `fs` with its reply, the data it
/// asks for held to `max_data` ([`Agreed::max_data`]); `may_wait`: see
/// [`Request::may_wait`].
pub(crate) fn handle(
    fs: &dyn Filesystem,
    h: &InHeader,
    args: Args<'_>,
    slot: u32,
    sink: &Arc<dyn Sink>,
    max_data: u32,
    may_wait: bool,
) {
    let reply = Reply::new(h.unique, slot, sink.clone(), has_reply(h.opcode));
    match Request::parse(h, args) {
        Ok(mut req) => {
            req.cap_data(max_data);
            req.may_wait = may_wait;
            fs.dispatch(req, reply)
        }
        Err(Malformed) => {
            tracing::warn!(opcode = h.opcode, "a malformed request; answered EIO");
            reply.error(libc::EIO);
        }
    }
}

#[cfg(test)]
mod op_counts_tests {
    use super::*;
    use crate::fuse::abi::op;

    #[test]
    fn counts_by_name_and_folds_unknown_opcodes() {
        let c = OpCounts::default();
        c.count(op::LOOKUP);
        c.count(op::LOOKUP);
        c.count(op::RELEASE);
        c.count(40); // not spoken here
        c.count(4096); // CUSE_INIT, past the slots
        let s = c.snapshot();
        assert_eq!(s.get("LOOKUP"), Some(&2));
        assert_eq!(s.get("RELEASE"), Some(&1));
        assert_eq!(s.get("OTHER"), Some(&2));
        assert_eq!(s.len(), 3);
    }
}

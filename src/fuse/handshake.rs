//! The INIT handshake: the kernel's offer read, checked and answered with
//! what the filesystem wants of it, once, before any other request.
//!
//! Generic over the [`Channel`] so that recorded INIT requests of older
//! and newer kernels can be fed to it in tests, and over what sets up the
//! io_uring queues (which need a real device).

use std::io;
use std::sync::Arc;

use zerocopy::{FromBytes, IntoBytes};

use super::abi::{self, InHeader, init};
use super::channel::{Channel, DevSink};
use super::dispatch::{Agreed, Filesystem, Offer};
use super::reply::{Reply, Sink};
use super::request::{Args, Op, Request};

/// The buffer INIT is read into: the largest INIT (64 bytes after the
/// in-header since 7.36) with room to spare, as the kernel wants a read
/// buffer of at least `FUSE_MIN_READ_BUFFER` (8 KiB).
const INIT_READ: usize = 64 * 1024;

/// Read INIT from `chan` (mounted, its INIT pending), answer it and say
/// what was agreed. `uring`: ask for FUSE over io_uring when the kernel
/// offers it; `prepare_rings` then sets the queues up for payloads of the
/// given size before the answer, and when it fails the answer declines
/// io_uring. The queues come back with the agreement, if agreed.
pub(crate) fn handshake<C: Channel, R>(
    chan: &Arc<C>,
    fs: &dyn Filesystem,
    uring: bool,
    prepare_rings: impl FnOnce(usize) -> io::Result<R>,
) -> io::Result<(Agreed, Option<R>)> {
    let mut buf = vec![0u8; INIT_READ];
    let n = chan.read(&mut buf)?;
    let (h, body) = InHeader::read_from_prefix(&buf[..n])
        .map_err(|_| io::Error::other("a short first request"))?;
    if h.opcode != abi::op::INIT {
        return Err(io::Error::other(format!(
            "the first request was opcode {}, not INIT",
            h.opcode
        )));
    }
    let Ok(Request {
        op: Op::Init(i, flags2),
        ..
    }) = Request::parse(&h, Args::joined(body))
    else {
        return Err(io::Error::other("a malformed INIT"));
    };
    let sink: Arc<dyn Sink> = Arc::new(DevSink(chan.clone()));
    let reply = Reply::new(h.unique, 0, sink, true);
    if i.major != abi::KERNEL_VERSION || i.minor < abi::MIN_MINOR_VERSION {
        reply.error(libc::EPROTO);
        return Err(io::Error::other(format!(
            "the kernel speaks FUSE {}.{}; zonemount needs 7.{} or later",
            i.major,
            i.minor,
            abi::MIN_MINOR_VERSION
        )));
    }
    let mut offered = u64::from(i.flags);
    if offered & init::INIT_EXT != 0 {
        offered |= u64::from(flags2) << 32;
    }
    let offer = Offer {
        minor: i.minor,
        flags: offered,
        max_readahead: i.max_readahead,
    };
    let mut wants = fs.init(&offer);
    if uring {
        wants.flags |= init::OVER_IO_URING;
    }
    let mut flags = (wants.flags & offered) | (offered & init::INIT_EXT);
    let payload = (wants.max_write as usize)
        .max(usize::from(wants.max_pages) * 4096)
        .max(8192);
    let mut rings = None;
    if flags & init::OVER_IO_URING != 0 {
        match prepare_rings(payload) {
            Ok(r) => rings = Some(r),
            Err(e) => {
                tracing::warn!("cannot set up io_uring queues ({e}); serving /dev/fuse");
                flags &= !init::OVER_IO_URING;
            }
        }
    }
    let agreed = Agreed {
        minor: i.minor.min(abi::KERNEL_MINOR_VERSION),
        flags,
        max_write: wants.max_write,
        max_pages: if flags & init::MAX_PAGES != 0 {
            wants.max_pages
        } else {
            0
        },
    };
    let out = abi::InitOut {
        major: abi::KERNEL_VERSION,
        minor: abi::KERNEL_MINOR_VERSION,
        max_readahead: i.max_readahead,
        flags: flags as u32,
        max_background: wants.max_background,
        congestion_threshold: wants.max_background.saturating_mul(3) / 4,
        max_write: wants.max_write,
        time_gran: 1,
        max_pages: agreed.max_pages,
        map_alignment: 0,
        flags2: (flags >> 32) as u32,
        max_stack_depth: if flags & init::PASSTHROUGH != 0 {
            wants.max_stack_depth
        } else {
            0
        },
        request_timeout: 0,
        unused: [0; 11],
    };
    fs.agreed(&agreed);
    reply.data(out.as_bytes());
    Ok((agreed, rings))
}

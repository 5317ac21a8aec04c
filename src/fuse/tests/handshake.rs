//! INIT as kernels of several FUSE protocol minors send it, fed to the
//! handshake over a scripted device; the reply's bytes checked field by
//! field.
//!
//! Where the layouts come from: `include/uapi/linux/fuse.h` (its
//! changelog, and `struct fuse_init_in` / `fuse_init_out`). Up to 7.35
//! `fuse_init_in` is 16 bytes (major, minor, max_readahead, flags); 7.36
//! added `flags2` and `unused[11]` (64 bytes), and the kernel sends the
//! whole struct it has. `fuse_init_out` is 24 bytes up to 7.22
//! (`FUSE_COMPAT_22_INIT_OUT_SIZE`) and 64 from 7.23 on (`time_gran` and
//! reserved space); a kernel refuses a reply longer than its own struct.
//! The flags each kernel offers are those the changelog adds up to its
//! minor (bits of the later minors as `abi` has them: 7.39
//! DIRECT_IO_ALLOW_MMAP, 7.40 PASSTHROUGH, 7.42 OVER_IO_URING); the ones
//! that depend on the kernel's configuration (DAX, MAP_ALIGNMENT) are left
//! out, as zonemount asks for none of them.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use zerocopy::{FromBytes, IntoBytes};

use super::{Script, Toy, parse_reply, request};
use crate::fuse::abi::{self, InitInCompat, InitOut, init::*, op};
use crate::fuse::dispatch::{Agreed, Wants};
use crate::fuse::handshake::handshake;

// INIT flags `abi` does not name (zonemount asks for none of them).
const POSIX_LOCKS: u64 = 1 << 1;
const EXPORT_SUPPORT: u64 = 1 << 4;
const DONT_MASK: u64 = 1 << 6;
const SPLICE_WRITE: u64 = 1 << 7;
const SPLICE_MOVE: u64 = 1 << 8;
const SPLICE_READ: u64 = 1 << 9;
const FLOCK_LOCKS: u64 = 1 << 10;
const HAS_IOCTL_DIR: u64 = 1 << 11;
const NO_OPEN_SUPPORT: u64 = 1 << 17;
const POSIX_ACL: u64 = 1 << 20;
const ABORT_ERROR: u64 = 1 << 21;
const NO_OPENDIR_SUPPORT: u64 = 1 << 24;
const EXPLICIT_INVAL_DATA: u64 = 1 << 25;
const SUBMOUNTS: u64 = 1 << 27;
const SETXATTR_EXT: u64 = 1 << 29;
const SECURITY_CTX: u64 = 1 << 32;
const HAS_EXPIRE_ONLY: u64 = 1 << 35;

/// What kernels offer, by the minor that added it.
const K19: u64 = ASYNC_READ
    | POSIX_LOCKS
    | ATOMIC_O_TRUNC
    | EXPORT_SUPPORT
    | BIG_WRITES
    | DONT_MASK
    | SPLICE_WRITE
    | SPLICE_MOVE
    | SPLICE_READ
    | FLOCK_LOCKS
    | HAS_IOCTL_DIR;
const K23: u64 = K19
    | AUTO_INVAL_DATA // 7.20
    | DO_READDIRPLUS // 7.21
    | READDIRPLUS_AUTO
    | ASYNC_DIO // 7.22
    | WRITEBACK_CACHE // 7.23
    | NO_OPEN_SUPPORT;
const K31: u64 = K23
    | PARALLEL_DIROPS // 7.25
    | HANDLE_KILLPRIV // 7.26
    | POSIX_ACL
    | ABORT_ERROR // 7.27
    | MAX_PAGES // 7.28
    | CACHE_SYMLINKS
    | NO_OPENDIR_SUPPORT // 7.29
    | EXPLICIT_INVAL_DATA; // 7.30
const K36: u64 = K31
    | SUBMOUNTS // 7.32
    | HANDLE_KILLPRIV_V2 // 7.33
    | SETXATTR_EXT
    | INIT_EXT // 7.36
    | SECURITY_CTX;
const K38: u64 = K36 | HAS_EXPIRE_ONLY;
const K39: u64 = K38 | DIRECT_IO_ALLOW_MMAP;
const K40: u64 = K39 | PASSTHROUGH;
const K45: u64 = K40 | OVER_IO_URING; // 7.42

/// INIT as a kernel of protocol 7.`minor` writes it: the in-header, then
/// `fuse_init_in` in that kernel's size.
fn init_request(major: u32, minor: u32, flags: u64) -> Vec<u8> {
    let compat = InitInCompat {
        major,
        minor,
        max_readahead: 128 * 1024,
        flags: flags as u32,
    };
    let mut body = compat.as_bytes().to_vec();
    if minor >= 36 {
        body.extend_from_slice(((flags >> 32) as u32).as_bytes()); // flags2
        body.extend_from_slice([0u32; 11].as_bytes()); // unused[11]
        assert_eq!(body.len(), 64);
    } else {
        assert_eq!(body.len(), 16);
    }
    request(op::INIT, 2, 0, &body)
}

/// What zonemount's filesystem asks for when passthrough is possible
/// (`fs::adapter`), and the three splice flags besides.
fn wants() -> Wants {
    Wants {
        flags: ASYNC_READ
            | BIG_WRITES
            | MAX_PAGES
            | ATOMIC_O_TRUNC
            | DO_READDIRPLUS
            | READDIRPLUS_AUTO
            | PARALLEL_DIROPS
            | AUTO_INVAL_DATA
            | HANDLE_KILLPRIV
            | HANDLE_KILLPRIV_V2
            | PASSTHROUGH
            | SPLICE_READ
            | SPLICE_WRITE
            | SPLICE_MOVE,
        max_write: 1 << 20,
        max_pages: 256,
        max_stack_depth: 2,
        max_background: 16,
    }
}

/// The flags every kernel from 7.31 on agrees to of [`wants`].
const AGREED_31: u64 = ASYNC_READ
    | BIG_WRITES
    | MAX_PAGES
    | ATOMIC_O_TRUNC
    | DO_READDIRPLUS
    | READDIRPLUS_AUTO
    | PARALLEL_DIROPS
    | AUTO_INVAL_DATA
    | HANDLE_KILLPRIV
    | SPLICE_READ
    | SPLICE_WRITE
    | SPLICE_MOVE;

struct Outcome {
    result: io::Result<(Agreed, Option<&'static str>)>,
    replies: Vec<Vec<u8>>,
    toy: Arc<Toy>,
    /// How often the io_uring queues were set up.
    prepared: usize,
}

/// Run the handshake on `req`: io_uring asked for or not, and whether
/// setting its queues up works.
fn shake(req: Vec<u8>, uring: bool, rings_work: bool) -> Outcome {
    let chan = Arc::new(Script::new(vec![req]));
    let toy = Arc::new(Toy::new(wants()));
    let prepared = AtomicUsize::new(0);
    let result = handshake(&chan, toy.as_ref(), uring, |payload| {
        prepared.fetch_add(1, Ordering::Relaxed);
        assert_eq!(payload, 1 << 20, "queues sized for the largest write");
        if rings_work {
            Ok("rings")
        } else {
            Err(io::Error::from_raw_os_error(libc::EPERM))
        }
    });
    Outcome {
        result,
        replies: chan.replies(),
        toy,
        prepared: prepared.load(Ordering::Relaxed),
    }
}

/// The one reply, an accepted INIT's: its `fuse_init_out`.
fn init_out(o: &Outcome) -> InitOut {
    assert_eq!(o.replies.len(), 1, "one reply");
    let (h, body) = parse_reply(&o.replies[0]);
    assert_eq!((h.error, h.unique), (0, 2));
    assert_eq!(
        body.len(),
        64,
        "the 64-byte fuse_init_out of 7.23 and later"
    );
    InitOut::read_from_bytes(body).unwrap()
}

/// The reply to a refused INIT: the error alone, no `fuse_init_out`.
fn refused(o: &Outcome) {
    assert!(o.result.is_err());
    assert_eq!(o.replies.len(), 1, "one reply");
    let (h, body) = parse_reply(&o.replies[0]);
    assert_eq!((h.error, h.unique, body.len()), (-libc::EPROTO, 2, 0));
    assert!(o.toy.offer.lock().unwrap().is_none(), "not asked");
    assert!(o.toy.agreed.lock().unwrap().is_none());
    assert_eq!(o.prepared, 0);
}

/// Check an accepted INIT of minor `minor`: the reply's fields and the
/// agreement, which flags (`flags`, `flags2` for bits 32 and up) were
/// agreed, and the stack depth passthrough gets.
fn accepted(o: &Outcome, minor: u32, flags: u64, stack_depth: u32) {
    let out = init_out(o);
    assert_eq!((out.major, out.minor), (7, abi::KERNEL_MINOR_VERSION));
    assert_eq!(out.max_readahead, 128 * 1024, "the kernel's, echoed");
    assert_eq!(
        (out.flags, out.flags2),
        (flags as u32, (flags >> 32) as u32),
        "agreed {:#x}, expected {flags:#x}",
        u64::from(out.flags) | (u64::from(out.flags2) << 32)
    );
    assert_eq!((out.max_background, out.congestion_threshold), (16, 12));
    assert_eq!((out.max_write, out.time_gran), (1 << 20, 1));
    assert_eq!((out.max_pages, out.map_alignment), (256, 0));
    assert_eq!(out.max_stack_depth, stack_depth);
    assert_eq!((out.request_timeout, out.unused), (0, [0; 11]));
    let (agreed, _) = o.result.as_ref().unwrap();
    assert_eq!(agreed.minor, minor.min(abi::KERNEL_MINOR_VERSION));
    assert_eq!(
        (agreed.flags, agreed.max_write, agreed.max_pages),
        (flags, 1 << 20, 256)
    );
    let seen = o.toy.agreed.lock().unwrap().unwrap();
    assert_eq!((seen.minor, seen.flags), (agreed.minor, agreed.flags));
}

/// Kernels older than 7.31 lack what the adapter relies on (see
/// `abi::MIN_MINOR_VERSION`): INIT is answered EPROTO, which every kernel
/// takes (a 64-byte `fuse_init_out` would be too long for 7.19's 24).
#[test]
fn kernels_before_7_31_are_refused_with_eproto() {
    refused(&shake(init_request(7, 19, K19), false, true));
    refused(&shake(init_request(7, 23, K23), false, true));
    refused(&shake(init_request(7, 30, K23), true, true));
}

#[test]
fn another_major_is_refused_with_eproto() {
    refused(&shake(init_request(8, 0, K45), false, true));
    refused(&shake(init_request(6, 40, K45), false, true));
}

#[test]
fn kernel_7_31_gets_what_it_offers_of_what_is_wanted() {
    // No INIT_EXT: no flags2 either way, no passthrough, no stack depth.
    let o = shake(init_request(7, 31, K31), true, true);
    accepted(&o, 31, AGREED_31, 0);
    let offer = o.toy.offer.lock().unwrap().unwrap();
    assert_eq!((offer.minor, offer.flags), (31, K31));
    assert_eq!(o.prepared, 0, "io_uring not offered: no queues");
}

#[test]
fn flags2_counts_only_with_init_ext() {
    // A 7.31 kernel sends no flags2; were the bytes there, without
    // INIT_EXT they mean nothing.
    let mut req = init_request(7, 36, K36 & !INIT_EXT | PASSTHROUGH);
    let o = shake(req.clone(), false, true);
    accepted(&o, 36, AGREED_31 | HANDLE_KILLPRIV_V2, 0);
    assert_eq!(o.toy.offer.lock().unwrap().unwrap().flags >> 32, 0);
    // The same INIT with INIT_EXT: PASSTHROUGH (bit 37) is offered.
    req[40 + 12..40 + 16].copy_from_slice(((K36 | PASSTHROUGH) as u32).as_bytes());
    let o = shake(req, false, true);
    accepted(
        &o,
        36,
        AGREED_31 | HANDLE_KILLPRIV_V2 | INIT_EXT | PASSTHROUGH,
        2,
    );
}

#[test]
fn kernels_7_36_to_7_39_agree_to_killpriv_v2_and_init_ext() {
    for (minor, offered) in [(36, K36), (38, K38), (39, K39)] {
        let o = shake(init_request(7, minor, offered), true, true);
        accepted(&o, minor, AGREED_31 | HANDLE_KILLPRIV_V2 | INIT_EXT, 0);
        assert_eq!(o.toy.offer.lock().unwrap().unwrap().flags, offered);
        assert_eq!(o.prepared, 0);
    }
}

#[test]
fn passthrough_and_its_stack_depth_only_where_offered() {
    let o = shake(init_request(7, 40, K40), false, true);
    accepted(
        &o,
        40,
        AGREED_31 | HANDLE_KILLPRIV_V2 | INIT_EXT | PASSTHROUGH,
        2,
    );
    // A newer kernel built without passthrough.
    let o = shake(init_request(7, 45, K45 & !PASSTHROUGH), false, true);
    accepted(&o, 45, AGREED_31 | HANDLE_KILLPRIV_V2 | INIT_EXT, 0);
}

#[test]
fn io_uring_only_where_offered_asked_for_and_set_up() {
    let all = AGREED_31 | HANDLE_KILLPRIV_V2 | INIT_EXT | PASSTHROUGH;
    // Offered and asked for: the queues are set up before the reply.
    let o = shake(init_request(7, 45, K45), true, true);
    accepted(&o, 45, all | OVER_IO_URING, 2);
    assert_eq!(o.prepared, 1);
    assert_eq!(o.result.as_ref().unwrap().1, Some("rings"));
    // Not asked for (`--transport dev-fuse`, or not allowed).
    let o = shake(init_request(7, 45, K45), false, true);
    accepted(&o, 45, all, 2);
    assert_eq!((o.prepared, o.result.as_ref().unwrap().1), (0, None));
    // Asked for, but the queues can't be set up: declined, /dev/fuse.
    let o = shake(init_request(7, 45, K45), true, false);
    accepted(&o, 45, all, 2);
    assert_eq!((o.prepared, o.result.as_ref().unwrap().1), (1, None));
    // Asked for, not offered (7.40, or the module's enable_uring off).
    let o = shake(init_request(7, 45, K40), true, true);
    accepted(&o, 45, all, 2);
    assert_eq!(o.prepared, 0);
    // A kernel newer than this daemon: its minor is the daemon's.
    let o = shake(init_request(7, 50, K45), true, true);
    accepted(&o, 50, all | OVER_IO_URING, 2);
}

#[test]
fn a_first_request_that_is_not_a_whole_init_gets_no_reply() {
    for req in [
        request(op::LOOKUP, 2, 1, b"hello\0"),
        request(op::INIT, 2, 0, &[7, 0, 0, 0, 31, 0]),
        init_request(7, 31, K31)[..20].to_vec(),
    ] {
        let o = shake(req, false, true);
        assert!(o.result.is_err());
        assert!(o.replies.is_empty(), "{:?}", o.replies);
        assert!(o.toy.agreed.lock().unwrap().is_none());
    }
    // And a device that ends before INIT: its error.
    let chan = Arc::new(Script::new(vec![]));
    let toy = Toy::new(wants());
    let r = handshake(&chan, &toy, false, |_| Ok(()));
    assert_eq!(r.err().and_then(|e| e.raw_os_error()), Some(libc::ENODEV));
}

//! The request decoder on malformed input: arbitrary bytes, and headers
//! of every opcode it knows with random fields, lengths and bodies. It
//! must never panic (the daemon answers EIO to what it can't decode and
//! goes on), and nothing it decodes may reach past the bytes it was given.
//!
//! Bounded: `PROPTEST_CASES` cases per property (4096 unless set), well
//! under a second each in a debug build; failures are not persisted (the
//! failing input is printed).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use proptest::prelude::*;
use zerocopy::{FromBytes, IntoBytes};

use crate::fuse::abi::{self, InHeader, op};
use crate::fuse::request::{Args, Op, Request};

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4096);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn header(opcode: u32, len: usize) -> InHeader {
    InHeader {
        len: (std::mem::size_of::<InHeader>() + len) as u32,
        opcode,
        unique: 2,
        nodeid: 1,
        uid: 0,
        gid: 0,
        pid: 1,
        total_extlen: 0,
        padding: 0,
    }
}

/// The opcodes the decoder knows and the size of each one's fixed header
/// (the structs of `<linux/fuse.h>`, as `abi` has them).
fn known() -> Vec<(u32, usize)> {
    use std::mem::size_of;
    vec![
        (op::INIT, size_of::<abi::InitInCompat>() + 4),
        (op::DESTROY, 0),
        (op::LOOKUP, 0),
        (op::FORGET, size_of::<abi::ForgetIn>()),
        (op::BATCH_FORGET, size_of::<abi::BatchForgetIn>()),
        (op::GETATTR, size_of::<abi::GetattrIn>()),
        (op::SETATTR, size_of::<abi::SetattrIn>()),
        (op::READLINK, 0),
        (op::MKNOD, size_of::<abi::MknodIn>()),
        (op::MKDIR, size_of::<abi::MkdirIn>()),
        (op::UNLINK, 0),
        (op::RMDIR, 0),
        (op::SYMLINK, 0),
        (op::RENAME, size_of::<abi::RenameIn>()),
        (op::RENAME2, size_of::<abi::Rename2In>()),
        (op::LINK, size_of::<abi::LinkIn>()),
        (op::OPEN, size_of::<abi::OpenIn>()),
        (op::READ, size_of::<abi::ReadIn>()),
        (op::WRITE, size_of::<abi::WriteIn>()),
        (op::STATFS, 0),
        (op::RELEASE, size_of::<abi::ReleaseIn>()),
        (op::FSYNC, size_of::<abi::FsyncIn>()),
        (op::SETXATTR, size_of::<abi::SetxattrIn>()),
        (op::GETXATTR, size_of::<abi::GetxattrIn>()),
        (op::LISTXATTR, size_of::<abi::GetxattrIn>()),
        (op::REMOVEXATTR, 0),
        (op::FLUSH, size_of::<abi::FlushIn>()),
        (op::OPENDIR, 0),
        (op::READDIR, size_of::<abi::ReadIn>()),
        (op::READDIRPLUS, size_of::<abi::ReadIn>()),
        (op::RELEASEDIR, size_of::<abi::ReleaseIn>()),
        (op::FSYNCDIR, size_of::<abi::FsyncIn>()),
        (op::ACCESS, size_of::<abi::AccessIn>()),
        (op::CREATE, size_of::<abi::CreateIn>()),
        (op::INTERRUPT, size_of::<abi::InterruptIn>()),
        (op::FALLOCATE, size_of::<abi::FallocateIn>()),
        (op::LSEEK, size_of::<abi::LseekIn>()),
        (op::COPY_FILE_RANGE, size_of::<abi::CopyFileRangeIn>()),
        (op::NOTIFY_REPLY, 0),
    ]
}

/// Every byte slice a decoded operation borrows from its request.
fn borrowed<'a>(op: &Op<'a>) -> Vec<&'a [u8]> {
    fn b(s: &OsStr) -> &[u8] {
        s.as_bytes()
    }
    match *op {
        Op::Lookup { name }
        | Op::Unlink { name }
        | Op::Rmdir { name }
        | Op::Removexattr { name }
        | Op::Mknod { name, .. }
        | Op::Mkdir { name, .. }
        | Op::Create { name, .. }
        | Op::Getxattr { name, .. } => vec![b(name)],
        Op::Symlink { name, target } => vec![b(name), b(target)],
        Op::Rename { name, newname, .. } => vec![b(name), b(newname)],
        Op::Link { newname, .. } => vec![b(newname)],
        Op::Write { data, .. } => vec![data],
        Op::Setxattr { name, value, .. } => vec![b(name), value],
        _ => vec![],
    }
}

fn within(part: &[u8], whole: &[u8]) -> bool {
    let (p, w) = (part.as_ptr_range(), whole.as_ptr_range());
    // An empty slice may point anywhere; a non-empty one must lie inside.
    part.is_empty() || (w.start <= p.start && p.end <= w.end)
}

/// Decode `opcode` with `body` as `/dev/fuse` gives it (one buffer) and
/// as io_uring does (the first `split` bytes as the opcode's header, the
/// rest as the payload), each from a buffer that goes on past the request
/// (a guard of NULs and bytes that would make any name or count read too
/// far look valid), and check what was decoded.
fn check(opcode: u32, body: &[u8], split: usize) -> Result<(), TestCaseError> {
    const GUARD: [u8; 64] = [0; 64];
    let h = header(opcode, body.len());
    let mut guarded = body.to_vec();
    guarded.extend_from_slice(&GUARD);
    let exact = &guarded[..body.len()];
    let joined = Request::parse(&h, Args::joined(exact));
    if let Ok(req) = &joined {
        for part in borrowed(&req.op) {
            prop_assert!(within(part, exact), "{opcode}: {part:?} beyond the request");
        }
        consistent(&req.op)?;
    }
    // Decoding does not depend on what lies past the request.
    let alone = Request::parse(&h, Args::joined(body));
    prop_assert_eq!(format!("{joined:?}"), format!("{alone:?}"));

    let split = split.min(body.len());
    let mut head = body[..split].to_vec();
    head.extend_from_slice(&GUARD);
    let head = &head[..split];
    let payload = &exact[split..];
    if let Ok(req) = Request::parse(&h, Args::split(head, payload)) {
        for part in borrowed(&req.op) {
            prop_assert!(
                within(part, payload),
                "{opcode}: {part:?} beyond the payload"
            );
        }
        consistent(&req.op)?;
    }
    Ok(())
}

/// What a decoded operation says of its own lengths holds.
fn consistent(op: &Op<'_>) -> Result<(), TestCaseError> {
    for part in borrowed(op) {
        if let Op::Write { .. } = op {
            continue;
        }
        if let Op::Setxattr { value, .. } = op {
            if std::ptr::eq(part, *value) {
                continue;
            }
        }
        prop_assert!(!part.contains(&0), "a name holds a NUL: {part:?}");
    }
    match op {
        Op::Write { arg, data } => prop_assert_eq!(data.len(), arg.size as usize),
        Op::Setxattr { value, .. } => {
            // `size` is the fixed header's; checked by the caller's bytes.
            prop_assert!(value.len() <= u32::MAX as usize);
        }
        _ => {}
    }
    Ok(())
}

/// A body for `opcode`: its fixed header of random bytes, the length it
/// announces (a WRITE's or SETXATTR's size, a BATCH_FORGET's count) set
/// near what follows or anywhere, then names and data where NULs are
/// frequent, cut short or not.
fn well_formed() -> impl Strategy<Value = (u32, Vec<u8>, usize)> {
    let ops = known();
    (
        prop::sample::select(ops),
        prop::collection::vec(any::<u8>(), 128),
        prop_oneof![0u32..64, any::<u32>()],
        prop::collection::vec(any::<u8>(), 0..400),
        prop::collection::vec(any::<prop::sample::Index>(), 0..6),
        any::<prop::sample::Index>(),
        any::<bool>(),
        any::<prop::sample::Index>(),
    )
        .prop_map(
            |((opcode, size), random, announced, mut tail, nuls, cut, do_cut, split)| {
                // Names end where a NUL is: a few, anywhere.
                for at in nuls {
                    if !tail.is_empty() {
                        let i = at.index(tail.len());
                        tail[i] = 0;
                    }
                }
                let mut fixed = random[..size].to_vec();
                announce(opcode, &mut fixed, announced);
                let mut body = fixed;
                body.extend_from_slice(&tail);
                if do_cut {
                    body.truncate(cut.index(body.len() + 1));
                }
                let split = if split.index(2) == 0 {
                    size
                } else {
                    split.index(body.len() + 1)
                };
                (opcode, body, split)
            },
        )
}

/// Set the length `opcode`'s fixed header announces for what follows.
fn announce(opcode: u32, fixed: &mut [u8], n: u32) {
    match opcode {
        op::WRITE => {
            if let Ok(mut w) = abi::WriteIn::read_from_bytes(fixed) {
                w.size = n;
                fixed.copy_from_slice(w.as_bytes());
            }
        }
        op::SETXATTR => {
            if let Ok(mut s) = abi::SetxattrIn::read_from_bytes(fixed) {
                s.size = n;
                fixed.copy_from_slice(s.as_bytes());
            }
        }
        op::BATCH_FORGET => {
            if let Ok(mut b) = abi::BatchForgetIn::read_from_bytes(fixed) {
                b.count = n;
                fixed.copy_from_slice(b.as_bytes());
            }
        }
        _ => {}
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_bytes_decode_or_are_malformed_never_more(
        opcode in prop_oneof![0u32..64, any::<u32>()],
        body in prop::collection::vec(any::<u8>(), 0..1024),
        split in 0usize..1100,
    ) {
        check(opcode, &body, split)?;
    }

    #[test]
    fn every_opcode_with_random_fields_and_lengths(case in well_formed()) {
        let (opcode, body, split) = case;
        check(opcode, &body, split)?;
    }
}

/// A BATCH_FORGET that announces more entries than it carries is
/// malformed, however many it announces (the daemon must not reserve room
/// for four billion entries on the kernel's word).
#[test]
fn a_batch_forget_announcing_more_than_it_holds_is_malformed() {
    let one = abi::ForgetOne {
        nodeid: 7,
        nlookup: 1,
    };
    for count in [2, 1 << 20, u32::MAX] {
        let mut body = abi::BatchForgetIn { count, dummy: 0 }.as_bytes().to_vec();
        body.extend_from_slice(one.as_bytes());
        let r = Request::parse(&header(op::BATCH_FORGET, body.len()), Args::joined(&body));
        assert!(r.is_err(), "count {count}: {r:?}");
    }
    let mut body = abi::BatchForgetIn { count: 1, dummy: 0 }
        .as_bytes()
        .to_vec();
    body.extend_from_slice(one.as_bytes());
    match Request::parse(&header(op::BATCH_FORGET, body.len()), Args::joined(&body)) {
        Ok(Request {
            op: Op::BatchForget(v),
            ..
        }) => assert_eq!((v.len(), v[0].nodeid, v[0].nlookup), (1, 7, 1)),
        other => panic!("{other:?}"),
    }
}

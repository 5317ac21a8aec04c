//! The `/dev/fuse` serving loop over a scripted device: INIT, then
//! requests answered by a toy filesystem, malformed ones among them, until
//! DESTROY or the device's end. Every loop runs under a time limit.

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use zerocopy::{FromBytes, IntoBytes};

use super::{HELLO, Script, TTL, Toy, parse_reply, request, within};
use crate::fuse::abi::{self, AttrOut, EntryOut, ForgetIn, GetattrIn, InitInCompat, WriteIn, op};
use crate::fuse::dispatch::{Agreed, Filesystem, Wants};
use crate::fuse::handshake::handshake;
use crate::fuse::request::has_reply;
use crate::fuse::session::serve;

const LIMIT: Duration = Duration::from_secs(20);

fn wants() -> Wants {
    Wants {
        flags: abi::init::ASYNC_READ | abi::init::MAX_PAGES,
        max_write: 128 * 1024,
        max_pages: 32,
        max_stack_depth: 0,
        max_background: 16,
    }
}

/// INIT as a 7.31 kernel sends it (16-byte `fuse_init_in`).
fn init() -> Vec<u8> {
    let i = InitInCompat {
        major: 7,
        minor: 31,
        max_readahead: 128 * 1024,
        flags: (abi::init::ASYNC_READ | abi::init::MAX_PAGES) as u32,
    };
    request(op::INIT, 1, 0, i.as_bytes())
}

/// The handshake and then the serving loop on `script`, as
/// `Session::new` and `Session::run` do for one device thread; the
/// loop's result and the device.
fn session(script: Script) -> (std::io::Result<()>, Arc<Script>) {
    let chan = Arc::new(script);
    let c = chan.clone();
    let result = within(LIMIT, move || {
        let toy = Arc::new(Toy::new(wants()));
        let (agreed, _): (Agreed, Option<()>) =
            handshake(&c, toy.as_ref(), false, |_| panic!("no io_uring asked for"))?;
        let fs: Arc<dyn Filesystem> = toy;
        serve(c, fs, agreed.request_size(), false)
    });
    (result, chan)
}

/// A WRITE's body: `fuse_write_in` and `size` bytes of data.
fn write(size: u32) -> Vec<u8> {
    let w = WriteIn {
        fh: 1,
        offset: 0,
        size,
        write_flags: 0,
        lock_owner: 0,
        flags: 0,
        padding: 0,
    };
    let mut v = w.as_bytes().to_vec();
    v.resize(v.len() + size as usize, b'x');
    v
}

#[test]
fn a_scripted_session_is_answered_request_by_request_and_ends_at_destroy() {
    let getattr = GetattrIn {
        getattr_flags: 0,
        dummy: 0,
        fh: 0,
    };
    let script = Script::new(vec![
        init(),
        request(op::LOOKUP, 10, abi::ROOT_ID, b"hello\0"),
        request(op::LOOKUP, 12, abi::ROOT_ID, b"nope\0"),
        request(op::GETATTR, 14, HELLO, getattr.as_bytes()),
        // FORGET: no answer.
        request(op::FORGET, 16, HELLO, ForgetIn { nlookup: 1 }.as_bytes()),
        // A name without its NUL: EIO, and the loop goes on.
        request(op::LOOKUP, 18, abi::ROOT_ID, b"hello"),
        // Shorter than an in-header: read past, no answer.
        vec![1, 2, 3, 4, 5, 6, 7],
        // An opcode nobody knows: the filesystem's answer (ENOSYS).
        request(999, 20, abi::ROOT_ID, &[]),
        // The largest WRITE the agreement allows fits the loop's buffer.
        request(op::WRITE, 21, HELLO, &write(128 * 1024)),
        request(op::DESTROY, 22, 0, &[]),
        // Never read: DESTROY ends the loop.
        request(op::GETATTR, 24, HELLO, getattr.as_bytes()),
    ]);
    let (result, chan) = session(script);
    result.unwrap();
    assert_eq!(chan.unread(), 1);
    let replies = chan.replies();
    let heads: Vec<(u64, i32)> = replies
        .iter()
        .map(|r| {
            let (h, _) = parse_reply(r);
            (h.unique, h.error)
        })
        .collect();
    assert_eq!(
        heads,
        [
            (1, 0),
            (10, 0),
            (12, -libc::ENOENT),
            (14, 0),
            (18, -libc::EIO),
            (20, -libc::ENOSYS),
            (21, -libc::ENOSYS),
            (22, 0),
        ]
    );
    // LOOKUP's entry: node 2, a regular file, valid for the TTL.
    let (_, body) = parse_reply(&replies[1]);
    let e = EntryOut::read_from_bytes(body).unwrap();
    assert_eq!((e.nodeid, e.attr.ino, e.attr.size), (HELLO, HELLO, 6));
    assert_eq!(e.attr.mode, libc::S_IFREG | 0o644);
    assert_eq!(
        (e.entry_valid, e.attr_valid),
        (TTL.as_secs(), TTL.as_secs())
    );
    assert_eq!(e.attr.mtime, 1_700_000_000);
    // GETATTR's attributes, byte for byte what the reply encoder makes.
    let (_, body) = parse_reply(&replies[3]);
    let a = AttrOut::read_from_bytes(body).unwrap();
    assert_eq!((a.attr_valid, a.attr.ino, a.attr.nlink), (1, HELLO, 1));
    assert_eq!(a.attr.as_bytes(), Toy::attr(HELLO).to_abi().as_bytes());
    // Errors and DESTROY carry no body.
    for i in [2, 4, 5, 6, 7] {
        assert_eq!(parse_reply(&replies[i]).1.len(), 0);
    }
}

#[test]
fn the_loop_ends_cleanly_when_the_device_ends_and_fails_on_other_errors() {
    let lookup = || request(op::LOOKUP, 10, abi::ROOT_ID, b"hello\0");
    // Unmounted (ENODEV) or aborted through fusectl (ECONNABORTED).
    for end in [libc::ENODEV, libc::ECONNABORTED] {
        let (result, chan) = session(Script::ending(vec![init(), lookup()], end));
        result.unwrap();
        assert_eq!(chan.replies().len(), 2);
    }
    let (result, _) = session(Script::ending(vec![init(), lookup()], libc::EIO));
    assert_eq!(result.unwrap_err().raw_os_error(), Some(libc::EIO));
}

/// Random requests after INIT: headers with any opcode and bodies of any
/// bytes, some shorter than a header. The loop must answer each request
/// the kernel expects an answer to exactly once (EIO if it can't be
/// decoded), nothing else, and end at the device's end.
fn requests() -> impl Strategy<Value = Vec<(u32, Vec<u8>, bool)>> {
    prop::collection::vec(
        (
            prop_oneof![0u32..64, any::<u32>()],
            prop::collection::vec(any::<u8>(), 0..256),
            prop::bool::weighted(0.05),
        ),
        0..24,
    )
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_requests_each_get_one_answer_or_none(reqs in requests()) {
        let mut script = vec![init()];
        let mut expected = Vec::new();
        for (i, (opcode, body, short)) in reqs.iter().enumerate() {
            // Uniques apart from INIT's, one per request.
            let unique = 100 + 2 * i as u64;
            if *short {
                script.push(body[..body.len().min(39)].to_vec());
                continue;
            }
            if *opcode == op::DESTROY {
                continue; // it would end the loop; tested above
            }
            script.push(request(*opcode, unique, HELLO, body));
            if has_reply(*opcode) {
                expected.push(unique);
            }
        }
        let (result, chan) = session(Script::new(script));
        prop_assert!(result.is_ok(), "{result:?}");
        let answered: Vec<u64> = chan.replies()[1..]
            .iter()
            .map(|r| parse_reply(r).0.unique)
            .collect();
        prop_assert_eq!(answered, expected);
    }
}

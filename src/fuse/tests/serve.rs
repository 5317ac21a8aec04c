//! The `/dev/fuse` serving loop over a scripted device: INIT, then
//! requests answered by a toy filesystem, malformed ones among them, until
//! DESTROY or the device's end. Every loop runs under a time limit.

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use zerocopy::{FromBytes, IntoBytes};

use super::{Filler, HELLO, Script, TTL, Toy, parse_reply, request, within};
use crate::fuse::abi::{
    self, AttrOut, EntryOut, ForgetIn, GetattrIn, InitInCompat, ReadIn, WriteIn, op,
};
use crate::fuse::busy_poll::BusyPoll;
use crate::fuse::dispatch::{Agreed, Filesystem, Wants};
use crate::fuse::handshake::handshake;
use crate::fuse::request::has_reply;
use crate::fuse::session::serve;

const LIMIT: Duration = Duration::from_secs(20);

pub(super) fn wants() -> Wants {
    Wants {
        flags: abi::init::ASYNC_READ | abi::init::MAX_PAGES,
        max_write: 128 * 1024,
        max_pages: 32,
        max_stack_depth: 0,
        max_background: 16,
    }
}

/// INIT as a 7.31 kernel sends it (16-byte `fuse_init_in`).
pub(super) fn init() -> Vec<u8> {
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
    session_of(script, Arc::new(Toy::new(wants())))
}

/// [`session`] serving `fs`.
fn session_of<F: Filesystem>(script: Script, fs: Arc<F>) -> (std::io::Result<()>, Arc<Script>) {
    let chan = Arc::new(script);
    let c = chan.clone();
    let result = within(LIMIT, move || {
        let (agreed, _): (Agreed, Option<()>) =
            handshake(&c, fs.as_ref(), false, |_| panic!("no io_uring asked for"))?;
        let fs: Arc<dyn Filesystem> = fs;
        serve(
            c,
            fs,
            agreed,
            false,
            &BusyPoll::new(Duration::ZERO),
            &super::no_idle_poll(),
        )
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

/// A READ's or READDIR's `fuse_read_in` asking for `size` bytes at 0.
fn read_in(size: u32) -> ReadIn {
    ReadIn {
        fh: 1,
        offset: 0,
        size,
        read_flags: 0,
        lock_owner: 0,
        flags: 0,
        padding: 0,
    }
}

/// A READ, READDIR or READDIRPLUS asking for 4 GiB (a kernel asks for no
/// more than it agreed to at INIT) reaches the filesystem held to what
/// was agreed, which its answer then holds at most: its buffer is never
/// made that large. What a kernel asks for is passed on as it is.
#[test]
fn a_read_or_readdir_asking_for_4_gib_is_held_to_what_init_agreed() {
    // wants(): 32 pages agreed, max_write 128 KiB.
    let page = u32::try_from(rustix::param::page_size()).unwrap();
    let max = (32 * page).max(128 * 1024);
    let huge = read_in(u32::MAX);
    let script = Script::new(vec![
        init(),
        request(op::READ, 10, HELLO, huge.as_bytes()),
        request(op::READDIR, 12, abi::ROOT_ID, huge.as_bytes()),
        request(op::READDIRPLUS, 14, abi::ROOT_ID, huge.as_bytes()),
        request(op::READ, 16, HELLO, read_in(4096).as_bytes()),
        request(op::READ, 18, HELLO, read_in(max).as_bytes()),
        request(op::READ, 20, HELLO, read_in(max + 1).as_bytes()),
    ]);
    let fs = Arc::new(Filler::new(wants()));
    let (result, chan) = session_of(script, fs.clone());
    result.unwrap();
    assert_eq!(*fs.sizes.lock().unwrap(), [max, max, max, 4096, max, max]);
    let replies: Vec<(u64, i32, usize)> = chan.replies()[1..]
        .iter()
        .map(|r| {
            let (h, body) = parse_reply(r);
            (h.unique, h.error, body.len())
        })
        .collect();
    let max = max as usize;
    assert!(Filler::FILE as usize > max, "a READ could fill more");
    assert_eq!(replies[0], (10, 0, max), "READ");
    assert_eq!(&replies[3..], [(16, 0, 4096), (18, 0, max), (20, 0, max)]);
    // The listings filled up to the agreement: a 40-byte READDIR entry,
    // a 168-byte READDIRPLUS entry would not fit any more.
    let (u, e, len) = replies[1];
    assert!(
        (u, e) == (12, 0) && len <= max && len + 40 > max,
        "READDIR {len}"
    );
    let (u, e, len) = replies[2];
    assert!(
        (u, e) == (14, 0) && len <= max && len + 168 > max,
        "READDIRPLUS {len}"
    );
}

/// [`Agreed::max_data`]: the pages agreed at INIT (32 without
/// `FUSE_MAX_PAGES`) of the system's page size, or `max_write` if more.
#[test]
fn max_data_is_the_most_a_kernel_asks_for_under_the_agreement() {
    let page = u32::try_from(rustix::param::page_size()).unwrap();
    let max_data = |max_write, max_pages| {
        Agreed {
            minor: 31,
            flags: 0,
            max_write,
            max_pages,
        }
        .max_data()
    };
    assert_eq!(max_data(4096, 0), 32 * page);
    assert_eq!(max_data(4096, 256), 256 * page);
    assert_eq!(max_data(1 << 20, 1), (1 << 20).max(page));
    assert_eq!(max_data(u32::MAX, u16::MAX), u32::MAX);
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

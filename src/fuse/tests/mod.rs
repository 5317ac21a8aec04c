//! The FUSE layer driven without a kernel: the request decoder on
//! malformed input (`decoder`), INIT as kernels of several protocol
//! minors send it (`handshake`), and the serving loop over a scripted
//! device (`serve`) and its busy polling (`busy_poll`), idle polling's
//! keeper over a recording knob (`idle_poll`), and the io_uring
//! queue's loop over a scripted queue (`ring`). This file holds what they share: the scripted
//! [`Script`] channel, request builders and a toy [`Toy`] filesystem.

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::os::fd::AsFd;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, UNIX_EPOCH};

use zerocopy::{FromBytes, IntoBytes};

use super::abi::{self, InHeader, OutHeader};
use super::channel::Channel;
use super::dispatch::{Agreed, Filesystem, Offer, Wants};
use super::reply::{DirBuf, Reply};
use super::request::{Op, Request};
use super::types::{FileAttr, FileType, INodeNo};

mod busy_poll;
mod decoder;
mod handshake;
mod idle_poll;
mod ring;
mod serve;

/// Idle polling with nothing to ask through (the serving loops' tests).
pub(super) fn no_idle_poll() -> super::idle_poll::IdlePoll {
    super::idle_poll::IdlePoll::with(Err("a test".into()), Duration::ZERO, Duration::ZERO, || {
        None
    })
}

/// A device that hands out a fixed list of requests, one per read, then
/// answers reads as an unmounted device does (`ENODEV`), and keeps every
/// reply written to it.
pub(super) struct Script {
    requests: Mutex<VecDeque<Vec<u8>>>,
    replies: Mutex<Vec<Vec<u8>>>,
    /// The errno of reads once the requests are used up.
    end: i32,
    /// Made non-blocking (by a busy poll): `Some(stall)`, each read says
    /// EAGAIN `stall` times before it gives a request, and always once
    /// the requests are used up. None: a device that can't be.
    stall: Option<usize>,
    nonblocking: AtomicBool,
    /// Reads answered while non-blocking: (requests, EAGAINs).
    polled: Mutex<(usize, usize)>,
    stalled: AtomicUsize,
    /// Every `set_nonblocking`, in order.
    toggles: Mutex<Vec<bool>>,
}

impl Script {
    pub(super) fn new(requests: Vec<Vec<u8>>) -> Script {
        Script::ending(requests, libc::ENODEV)
    }

    pub(super) fn ending(requests: Vec<Vec<u8>>, end: i32) -> Script {
        Script {
            requests: Mutex::new(requests.into()),
            replies: Mutex::new(Vec::new()),
            end,
            stall: None,
            nonblocking: AtomicBool::new(false),
            polled: Mutex::new((0, 0)),
            stalled: AtomicUsize::new(0),
            toggles: Mutex::new(Vec::new()),
        }
    }

    /// [`Script::new`] that can be made non-blocking, then says EAGAIN
    /// `stall` times before each request.
    pub(super) fn pollable(requests: Vec<Vec<u8>>, stall: usize) -> Script {
        Script {
            stall: Some(stall),
            ..Script::new(requests)
        }
    }

    /// Reads answered while non-blocking: (requests, EAGAINs).
    pub(super) fn polled(&self) -> (usize, usize) {
        *self.polled.lock().unwrap()
    }

    /// Every `set_nonblocking` so far, in order.
    pub(super) fn toggles(&self) -> Vec<bool> {
        self.toggles.lock().unwrap().clone()
    }

    /// The replies written so far, each as the bytes of one write.
    pub(super) fn replies(&self) -> Vec<Vec<u8>> {
        self.replies.lock().unwrap().clone()
    }

    /// Requests not read yet.
    pub(super) fn unread(&self) -> usize {
        self.requests.lock().unwrap().len()
    }
}

impl Channel for Script {
    fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut requests = self.requests.lock().unwrap();
        if self.nonblocking.load(Ordering::Relaxed) {
            let stall = self.stall.unwrap_or(0);
            let mut polled = self.polled.lock().unwrap();
            if requests.is_empty() || self.stalled.load(Ordering::Relaxed) < stall {
                self.stalled.fetch_add(1, Ordering::Relaxed);
                polled.1 += 1;
                return Err(io::Error::from_raw_os_error(libc::EAGAIN));
            }
            self.stalled.store(0, Ordering::Relaxed);
            polled.0 += 1;
        }
        match requests.pop_front() {
            Some(r) => {
                // The kernel fails a request that does not fit the
                // reader's buffer (EIO to its caller): the loop's buffer
                // must hold the largest request the agreement allows.
                assert!(r.len() <= buf.len(), "{} > {}", r.len(), buf.len());
                buf[..r.len()].copy_from_slice(&r);
                Ok(r.len())
            }
            None => Err(io::Error::from_raw_os_error(self.end)),
        }
    }

    fn write(&self, parts: &[IoSlice<'_>]) -> io::Result<usize> {
        let bytes: Vec<u8> = parts.iter().flat_map(|p| p.iter().copied()).collect();
        let n = bytes.len();
        self.replies.lock().unwrap().push(bytes);
        Ok(n)
    }

    fn set_nonblocking(&self, on: bool) -> io::Result<bool> {
        if self.stall.is_none() {
            return Ok(false);
        }
        self.toggles.lock().unwrap().push(on);
        self.nonblocking.store(on, Ordering::Relaxed);
        Ok(true)
    }
}

/// The in-header of a request from uid and gid 1000, pid 4242, with
/// `after` bytes after it.
pub(super) fn header(opcode: u32, unique: u64, nodeid: u64, after: usize) -> InHeader {
    InHeader {
        len: (std::mem::size_of::<InHeader>() + after) as u32,
        opcode,
        unique,
        nodeid,
        uid: 1000,
        gid: 1000,
        pid: 4242,
        total_extlen: 0,
        padding: 0,
    }
}

/// A request as the kernel writes it to `/dev/fuse`: the in-header
/// (`struct fuse_in_header`, 40 bytes) and then `body`.
pub(super) fn request(opcode: u32, unique: u64, nodeid: u64, body: &[u8]) -> Vec<u8> {
    let mut v = header(opcode, unique, nodeid, body.len())
        .as_bytes()
        .to_vec();
    v.extend_from_slice(body);
    v
}

/// A reply split into its out-header and body; panics on a reply shorter
/// than the header or whose header's length is not its own.
pub(super) fn parse_reply(bytes: &[u8]) -> (OutHeader, &[u8]) {
    let (h, body) = OutHeader::read_from_prefix(bytes).unwrap();
    assert_eq!(h.len as usize, bytes.len(), "a reply's length is its own");
    (h, body)
}

/// A filesystem of one file, `/hello` (node 2): what the handshake
/// offered and agreed, for the tests to see.
pub(super) struct Toy {
    pub(super) wants: Wants,
    /// Answer READs later, from another thread (as an approval does).
    pub(super) hold_reads: bool,
    pub(super) offer: Mutex<Option<Offer>>,
    pub(super) agreed: Mutex<Option<Agreed>>,
}

pub(super) const HELLO: u64 = 2;

impl Toy {
    pub(super) fn new(wants: Wants) -> Toy {
        Toy {
            wants,
            hold_reads: false,
            offer: Mutex::new(None),
            agreed: Mutex::new(None),
        }
    }

    pub(super) fn attr(ino: u64) -> FileAttr {
        let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let (kind, perm) = if ino == abi::ROOT_ID {
            (FileType::Directory, 0o755)
        } else {
            (FileType::RegularFile, 0o644)
        };
        FileAttr {
            ino: INodeNo(ino),
            size: 6,
            blocks: 1,
            atime: t,
            mtime: t,
            ctime: t,
            crtime: t,
            kind,
            perm,
            nlink: 1,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }
}

pub(super) const TTL: Duration = Duration::from_secs(1);

impl Filesystem for Toy {
    fn init(&self, offer: &Offer) -> Wants {
        *self.offer.lock().unwrap() = Some(*offer);
        self.wants
    }

    fn agreed(&self, agreed: &Agreed) {
        *self.agreed.lock().unwrap() = Some(*agreed);
    }

    fn dispatch(&self, req: Request<'_>, reply: Reply) {
        match req.op {
            Op::Lookup { name } if req.nodeid == abi::ROOT_ID && name == "hello" => {
                reply.entry(TTL, HELLO, &Toy::attr(HELLO));
            }
            Op::Lookup { .. } => reply.error(libc::ENOENT),
            Op::Getattr { .. } if req.nodeid == abi::ROOT_ID || req.nodeid == HELLO => {
                reply.attr(TTL, &Toy::attr(req.nodeid));
            }
            Op::Getattr { .. } => reply.error(libc::ENOENT),
            Op::Read(_) if self.hold_reads => {
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(20));
                    reply.data(b"hello\n");
                });
            }
            // No answer is expected: the reply sends nothing.
            Op::Forget { .. } | Op::BatchForget(_) | Op::Interrupt { .. } => drop(reply),
            _ => reply.error(libc::ENOSYS),
        }
    }
}

/// A filesystem that fills whatever a READ or READDIR(PLUS) asks for (a
/// READ from a sparse file of [`Filler::FILE`] bytes, a directory of
/// endless entries) and notes the sizes it was handed. A size over
/// [`Filler::REFUSE`] it answers EFBIG without allocating it, so that an
/// uncapped request fails a test instead of exhausting the machine.
pub(super) struct Filler {
    wants: Wants,
    file: std::fs::File,
    pub(super) sizes: Mutex<Vec<u32>>,
}

impl Filler {
    pub(super) const FILE: u64 = 4 << 20;
    const REFUSE: u32 = 16 << 20;

    pub(super) fn new(wants: Wants) -> Filler {
        let file = tempfile::tempfile().unwrap();
        file.set_len(Filler::FILE).unwrap();
        Filler {
            wants,
            file,
            sizes: Mutex::new(Vec::new()),
        }
    }
}

impl Filesystem for Filler {
    fn init(&self, _offer: &Offer) -> Wants {
        self.wants
    }

    fn agreed(&self, _agreed: &Agreed) {}

    fn dispatch(&self, req: Request<'_>, reply: Reply) {
        let r = match req.op {
            Op::Read(r) | Op::Readdir(r) | Op::Readdirplus(r) => r,
            Op::Forget { .. } | Op::BatchForget(_) | Op::Interrupt { .. } => return drop(reply),
            _ => return reply.error(libc::ENOSYS),
        };
        self.sizes.lock().unwrap().push(r.size);
        if r.size > Filler::REFUSE {
            return reply.error(libc::EFBIG);
        }
        let name = |i: u64| format!("f{i:08}");
        match req.op {
            Op::Read(_) => reply.file_data(self.file.as_fd(), r.offset, r.size),
            Op::Readdir(_) => {
                let mut buf = DirBuf::new(r.size);
                for i in 0u64.. {
                    if buf.add(10 + i, i + 1, FileType::RegularFile, name(i).as_bytes()) {
                        break;
                    }
                }
                reply.data(buf.bytes());
            }
            _ => {
                let mut buf = DirBuf::new(r.size);
                for i in 0u64.. {
                    if buf.add_plus(i + 1, name(i).as_bytes(), TTL, HELLO, &Toy::attr(HELLO)) {
                        break;
                    }
                }
                reply.data(buf.bytes());
            }
        }
    }
}

/// Run `f` on its own thread; its result, or a failure when it has not
/// returned within `limit` (a loop that does not end must fail the test,
/// not hang it).
pub(super) fn within<T: Send + 'static>(
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => v,
        Err(RecvTimeoutError::Timeout) => panic!("not done within {limit:?}"),
        Err(RecvTimeoutError::Disconnected) => panic!("the thread panicked (above)"),
    }
}

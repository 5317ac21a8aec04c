//! The io_uring queue's serving loop (`uring::serve_queue`) over a
//! scripted queue: requests arrive in entries (the opcode's header and
//! the payload apart), answers are commits of the entry they came in,
//! answers made on other threads wake the loop, and a queue with few
//! free entries grows and nudges the kernel through the device.
//!
//! The scripted queue behaves as the kernel's side does where the loop
//! relies on it: a request goes to a free entry, or waits for the next
//! entry committed (never a new one); the connection ends (`ENOTCONN`)
//! once the script is done and nothing is held.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use zerocopy::{FromBytes, IntoBytes};

use super::{Filler, HELLO, Script, Toy, header, parse_reply, within};
use crate::fuse::abi::{self, EntryOut, GetattrIn, InHeader, NotifyRetrieveOut, ReadIn, op};
use crate::fuse::dispatch::{Filesystem, Wants};
use crate::fuse::queue::Event as RingEvent;
use crate::fuse::queue::{Queue, Wake};
use crate::fuse::uring::{QUEUE_START, serve_queue};

const LIMIT: Duration = Duration::from_secs(20);

/// A request as a ring entry holds it.
struct Req {
    h: InHeader,
    op: Vec<u8>,
    payload: Vec<u8>,
}

fn req(opcode: u32, unique: u64, nodeid: u64, op: &[u8], payload: &[u8]) -> Req {
    Req {
        h: header(opcode, unique, nodeid, op.len() + payload.len()),
        op: op.to_vec(),
        payload: payload.to_vec(),
    }
}

/// One commit: the entry, and the answer's unique, error and bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Commit {
    entry: usize,
    unique: u64,
    error: i32,
    body: Vec<u8>,
}

#[derive(Clone)]
struct FakeWaker(Sender<()>);

impl Wake for FakeWaker {
    fn wake(&self) {
        let _ = self.0.send(());
    }
}

/// What the test sees of the queue afterwards.
#[derive(Default)]
struct Log {
    commits: Vec<Commit>,
    entries: usize,
}

struct FakeRing {
    dev: Arc<Script>,
    ents: Vec<Option<Req>>,
    /// Entries with a request not reported yet.
    ready: VecDeque<usize>,
    /// Requests held back for want of a free entry.
    backlog: VecDeque<Req>,
    /// What arrives next, once nothing is held.
    rounds: VecDeque<Vec<Req>>,
    wake_tx: Sender<()>,
    wake_rx: Receiver<()>,
    log: Arc<Mutex<Log>>,
}

impl FakeRing {
    fn new(rounds: Vec<Vec<Req>>) -> (FakeRing, Arc<Mutex<Log>>, Arc<Script>) {
        let (wake_tx, wake_rx) = channel();
        let log = Arc::new(Mutex::new(Log::default()));
        let dev = Arc::new(Script::new(vec![]));
        let ring = FakeRing {
            dev: dev.clone(),
            ents: (0..QUEUE_START).map(|_| None).collect(),
            ready: VecDeque::new(),
            backlog: VecDeque::new(),
            rounds: rounds.into(),
            wake_tx,
            wake_rx,
            log: log.clone(),
        };
        (ring, log, dev)
    }

    fn place(&mut self, r: Req, n: usize) {
        self.ents[n] = Some(r);
        self.ready.push_back(n);
    }

    fn arrive(&mut self, r: Req) {
        match self.ents.iter().position(Option::is_none) {
            Some(n) => self.place(r, n),
            None => self.backlog.push_back(r),
        }
    }

    fn report(&mut self, out: &mut Vec<RingEvent>) {
        out.extend(self.ready.drain(..).map(RingEvent::Request));
    }
}

impl Queue for FakeRing {
    type Dev = Script;
    type Waker = FakeWaker;

    fn waker(&self) -> FakeWaker {
        FakeWaker(self.wake_tx.clone())
    }

    fn device(&self) -> &Arc<Script> {
        &self.dev
    }

    fn register_all(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn wait(&mut self, out: &mut Vec<RingEvent>) -> io::Result<()> {
        loop {
            self.report(out);
            if !out.is_empty() {
                return Ok(());
            }
            if self.held() == 0 && self.backlog.is_empty() {
                match self.rounds.pop_front() {
                    Some(round) => round.into_iter().for_each(|r| self.arrive(r)),
                    None => {
                        out.push(RingEvent::Failed(0, libc::ENOTCONN));
                        return Ok(());
                    }
                }
                continue;
            }
            // Something is held: its answer comes from another thread.
            return match self.wake_rx.recv_timeout(Duration::from_secs(5)) {
                Ok(()) => {
                    out.push(RingEvent::Wake);
                    Ok(())
                }
                Err(e) => Err(io::Error::other(format!("held, and no wake: {e}"))),
            };
        }
    }

    fn poll(&mut self, out: &mut Vec<RingEvent>) -> io::Result<()> {
        self.report(out);
        Ok(())
    }

    fn request(&self, n: usize) -> io::Result<(InHeader, &[u8], &[u8])> {
        match self.ents.get(n) {
            Some(Some(r)) => Ok((r.h, &r.op, &r.payload)),
            _ => Err(io::Error::other(format!("entry {n} holds no request"))),
        }
    }

    fn commit(&mut self, n: usize, unique: u64, error: i32, body: &[&[u8]]) -> io::Result<()> {
        let held = self.ents.get_mut(n).and_then(Option::take);
        match held {
            Some(r) if r.h.unique == unique => {}
            other => {
                return Err(io::Error::other(format!(
                    "commit of {unique} to entry {n}, which holds {:?}",
                    other.map(|r| r.h.unique)
                )));
            }
        }
        self.log.lock().unwrap().commits.push(Commit {
            entry: n,
            unique,
            error,
            body: body.concat(),
        });
        if let Some(r) = self.backlog.pop_front() {
            self.place(r, n);
        }
        Ok(())
    }

    fn entries(&self) -> usize {
        self.ents.len()
    }

    fn held(&self) -> usize {
        self.ents.iter().filter(|e| e.is_some()).count()
    }

    fn grow(&mut self, n: usize) -> io::Result<usize> {
        self.ents.extend((0..n).map(|_| None));
        self.log.lock().unwrap().entries = self.ents.len();
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Serve `rounds` on queue 0 with a toy filesystem; the loop's result.
fn serve(ring: FakeRing, hold_reads: bool) -> io::Result<()> {
    within(LIMIT, move || {
        let mut toy = Toy::new(Wants {
            flags: 0,
            max_write: 4096,
            max_pages: 1,
            max_stack_depth: 0,
            max_background: 16,
        });
        toy.hold_reads = hold_reads;
        let fs: Arc<dyn Filesystem> = Arc::new(toy);
        serve_queue(
            ring,
            fs,
            4096,
            0,
            &AtomicBool::new(false),
            None,
            &super::no_idle_poll(),
        )
    })
}

#[test]
fn each_answer_is_committed_to_the_entry_its_request_came_in() {
    let getattr = GetattrIn {
        getattr_flags: 0,
        dummy: 0,
        fh: 0,
    };
    let (ring, log, dev) = FakeRing::new(vec![vec![
        req(op::LOOKUP, 10, abi::ROOT_ID, &[], b"hello\0"),
        req(op::GETATTR, 12, HELLO, getattr.as_bytes(), &[]),
        // The name without its NUL: EIO.
        req(op::LOOKUP, 14, abi::ROOT_ID, &[], b"hello"),
        // The name in the opcode's header area, not the payload: no name.
        req(op::LOOKUP, 16, abi::ROOT_ID, b"hello\0", &[]),
        req(op::DESTROY, 18, 0, &[], &[]),
        // A nudge's answer: its entry is committed with nothing.
        req(op::NOTIFY_REPLY, 20, HELLO, &[], &[]),
        req(999, 22, abi::ROOT_ID, &[], &[]),
    ]]);
    serve(ring, false).unwrap();
    let log = log.lock().unwrap();
    let mut commits = log.commits.clone();
    commits.sort_by_key(|c| c.unique);
    let heads: Vec<(usize, u64, i32)> = commits
        .iter()
        .map(|c| (c.entry, c.unique, c.error))
        .collect();
    assert_eq!(
        heads,
        [
            (0, 10, 0),
            (1, 12, 0),
            (2, 14, -libc::EIO),
            (3, 16, -libc::EIO),
            (4, 18, 0),
            (5, 20, 0),
            (6, 22, -libc::ENOSYS),
        ]
    );
    let e = EntryOut::read_from_bytes(&commits[0].body).unwrap();
    assert_eq!((e.nodeid, e.attr.mode), (HELLO, libc::S_IFREG | 0o644));
    let a = abi::AttrOut::read_from_bytes(&commits[1].body).unwrap();
    assert_eq!(a.attr.as_bytes(), Toy::attr(HELLO).to_abi().as_bytes());
    for c in &commits[2..] {
        assert!(c.body.is_empty(), "{c:?}");
    }
    assert!(dev.replies().is_empty(), "nothing through the device");
}

#[test]
fn a_queue_short_of_free_entries_grows_nudges_and_answers_everything() {
    let read = ReadIn {
        fh: 1,
        offset: 0,
        size: 4096,
        read_flags: 0,
        lock_owner: 0,
        flags: 0,
        padding: 0,
    };
    // Ten reads answered later, on a queue of eight entries: two wait for
    // an entry; with none free the queue grows, and a nudge names the
    // file the reads were on.
    let reads: Vec<Req> = (0..10)
        .map(|i| req(op::READ, 100 + 2 * i, HELLO, read.as_bytes(), &[]))
        .collect();
    let (ring, log, dev) = FakeRing::new(vec![reads]);
    serve(ring, true).unwrap();
    let log = log.lock().unwrap();
    assert_eq!(log.entries, 2 * QUEUE_START, "grown once, doubled");
    let mut answered: Vec<u64> = log.commits.iter().map(|c| c.unique).collect();
    answered.sort_unstable();
    assert_eq!(answered, (0..10).map(|i| 100 + 2 * i).collect::<Vec<_>>());
    for c in &log.commits {
        assert_eq!((c.error, c.body.as_slice()), (0, &b"hello\n"[..]), "{c:?}");
    }
    let nudges = dev.replies();
    assert_eq!(nudges.len(), 1, "one nudge");
    let (h, body) = parse_reply(&nudges[0]);
    assert_eq!((h.error, h.unique), (abi::notify::RETRIEVE, 0));
    let n = NotifyRetrieveOut::read_from_bytes(body).unwrap();
    assert_eq!((n.nodeid, n.offset, n.size), (HELLO, 0, 0));
    assert_eq!(n.notify_unique % 2, 0);
}

/// Over io_uring too, a READ or READDIR asking for 4 GiB reaches the
/// filesystem held to the `max_data` the queue serves with, and its
/// answer holds at most that.
#[test]
fn a_read_or_readdir_asking_for_4_gib_is_held_to_max_data() {
    let huge = ReadIn {
        fh: 1,
        offset: 0,
        size: u32::MAX,
        read_flags: 0,
        lock_owner: 0,
        flags: 0,
        padding: 0,
    };
    let (ring, log, _) = FakeRing::new(vec![vec![
        req(op::READ, 10, HELLO, huge.as_bytes(), &[]),
        req(op::READDIR, 12, abi::ROOT_ID, huge.as_bytes(), &[]),
    ]]);
    let filler = Arc::new(Filler::new(Wants {
        flags: 0,
        max_write: 8192,
        max_pages: 2,
        max_stack_depth: 0,
        max_background: 16,
    }));
    let fs: Arc<dyn Filesystem> = filler.clone();
    within(LIMIT, move || {
        serve_queue(
            ring,
            fs,
            8192,
            0,
            &AtomicBool::new(false),
            None,
            &super::no_idle_poll(),
        )
    })
    .unwrap();
    assert_eq!(*filler.sizes.lock().unwrap(), [8192, 8192]);
    let mut got: Vec<(u64, i32, usize)> = log
        .lock()
        .unwrap()
        .commits
        .iter()
        .map(|c| (c.unique, c.error, c.body.len()))
        .collect();
    got.sort_unstable();
    assert_eq!(got[0], (10, 0, 8192), "READ");
    let (u, e, len) = got[1];
    assert!(
        (u, e) == (12, 0) && len <= 8192 && len + 40 > 8192,
        "READDIR {len}"
    );
}

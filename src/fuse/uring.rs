//! The FUSE-over-io_uring transport: one queue per possible CPU, each
//! served by its own thread (kept on its CPU) from its own ring.
//!
//! The kernel queues each request on the ring of the CPU the caller runs
//! on, so a request and its answer stay on one CPU, and a queue's thread
//! answers and fetches in one submission. Replies made on the queue's
//! thread are committed when the request's handler returns; replies made
//! elsewhere (an approval decided later) are handed to the queue's thread,
//! which an eventfd on the ring wakes.
//!
//! A request whose answer waits (an ask) keeps its ring entry until it is
//! answered, and the kernel holds a CPU's next requests back while that
//! CPU's queue has no free entry. So a queue starts small
//! ([`QUEUE_START`] entries, whose buffers take memory only as requests
//! use them) and grows, by doubling up to [`QUEUE_MAX`], whenever fewer
//! than [`QUEUE_SPARE`] of its entries are free. Requests the kernel held
//! back before the queue grew go to the next entry committed, not to the
//! new ones: the queue's thread then makes the kernel send it a request
//! of its own on that CPU (a `NOTIFY_RETRIEVE` of no bytes of a regular
//! file the queue saw lately, answered by a `NOTIFY_REPLY`; where it knows
//! none, a `statfs` of the mountpoint by a thread moved to that CPU),
//! whose commit hands the first of them over, and again while commits
//! keep finding one.
//!
//! Used when the kernel offers `FUSE_OVER_IO_URING` at INIT (the fuse
//! module's `enable_uring` parameter) and the daemon may set up io_urings;
//! otherwise the `/dev/fuse` transport serves.

use std::io;
use std::io::IoSlice;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::{JoinHandle, ThreadId};

use zerocopy::{FromBytes, IntoBytes};

use super::abi::{self, NotifyRetrieveOut, OutHeader};
use super::channel::Channel;
use super::dispatch::{Filesystem, handle};
use super::idle_poll::IdlePoll;
use super::queue::{Event as RingEvent, FuseRing, Queue, Wake, Waker};
use super::reply::{Reply, Sink};
use super::request::Args;
use crate::fuse::sys::{Device, io_uring_allowed, possible_cpus};

/// Ring entries a queue starts with.
pub const QUEUE_START: usize = 8;
/// A queue grows when fewer of its entries than this are free.
pub const QUEUE_SPARE: usize = 4;
/// The most entries a queue grows to.
pub const QUEUE_MAX: usize = 1024;
/// Entries a queue grown to [`QUEUE_MAX`] keeps for answers that don't
/// wait: past `QUEUE_MAX - QUEUE_KEPT` waiting at once, a request whose
/// answer would wait for a decision is refused at once instead
/// ([`Request::may_wait`](super::request::Request::may_wait)). Were every
/// entry held, the kernel would hold back every next request of that CPU,
/// from any process and zone, until one was answered (found by an attack
/// pass: 1,024 held opens of one worker stopped a CPU's requests).
pub const QUEUE_KEPT: usize = 64;

/// One ring per possible CPU, set up before INIT's reply so that agreeing
/// to io_uring never leaves the kernel waiting for queues that can't come.
pub(crate) fn prepare(dev: &Arc<Device>, payload: usize) -> io::Result<Vec<FuseRing>> {
    if !io_uring_allowed() {
        return Err(io::Error::other(
            "io_uring is not allowed here (kernel.io_uring_disabled?)",
        ));
    }
    (0..possible_cpus())
        .map(|q| FuseRing::new(dev, q as u16, QUEUE_START, payload))
        .collect()
}

/// How long [`Rings::stop`] waits for the queues' threads.
const STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// The queues' threads.
pub(crate) struct Rings {
    threads: Vec<(JoinHandle<()>, Waker)>,
    stop: Arc<AtomicBool>,
}

impl Rings {
    /// Wait for the queues to end (the connection is gone), at most
    /// [`STOP_WAIT`]: a queue thread still inside a request then must not
    /// keep the daemon (and `zonemount unmount`, which waits for it) from
    /// exiting; what it was doing ends with the process.
    pub fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for (_, w) in &self.threads {
            w.wake();
        }
        let deadline = std::time::Instant::now() + STOP_WAIT;
        for (t, _) in self.threads {
            while !t.is_finished() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            if t.is_finished() {
                let _ = t.join();
            } else {
                tracing::warn!(
                    "an io_uring queue thread did not end within {STOP_WAIT:?} of the connection's end; exiting without it"
                );
            }
        }
    }
}

/// Start serving from `rings`, the data a request asks for held to
/// `max_data` ([`super::Agreed::max_data`]); `mountpoint` (as this
/// process sees it) for the nudge of last resort.
pub(crate) fn start(
    rings: Vec<FuseRing>,
    fs: &Arc<dyn Filesystem>,
    max_data: u32,
    mountpoint: Option<PathBuf>,
    idle: &Arc<IdlePoll>,
) -> io::Result<Rings> {
    let stop = Arc::new(AtomicBool::new(false));
    let statfs = match mountpoint.map(StatfsNudger::start).transpose() {
        Ok(n) => n.map(Arc::new),
        Err(e) => {
            tracing::debug!("no statfs nudger: {e}");
            None
        }
    };
    let mut threads = Vec::new();
    for (qid, ring) in rings.into_iter().enumerate() {
        let waker = ring.waker();
        let fs = fs.clone();
        let stop2 = stop.clone();
        let statfs = statfs.clone();
        let idle = idle.clone();
        let t = std::thread::Builder::new()
            .name(format!("fuse-ring-{qid}"))
            .spawn(move || {
                if let Err(e) =
                    serve_queue(ring, fs, max_data, qid, &stop2, statfs.as_deref(), &idle)
                {
                    tracing::warn!(qid, "io_uring queue ended: {e}");
                }
            })?;
        threads.push((t, waker));
    }
    Ok(Rings { threads, stop })
}

/// The nudge of last resort, when a queue knows no regular file to name:
/// a thread that `statfs`es the mountpoint from the CPU it is asked for,
/// which the kernel queues there as any caller's request. It ends with
/// the queues (its channel closes).
pub(crate) struct StatfsNudger {
    tx: Mutex<Sender<usize>>,
    /// Its thread id: FUSE's `pid` of its requests.
    tid: Arc<AtomicU32>,
}

impl StatfsNudger {
    fn start(mountpoint: PathBuf) -> io::Result<StatfsNudger> {
        let (tx, rx) = channel::<usize>();
        let tid = Arc::new(AtomicU32::new(0));
        let tid2 = tid.clone();
        std::thread::Builder::new()
            .name("fuse-ring-nudge".into())
            .spawn(move || {
                tid2.store(
                    rustix::thread::gettid().as_raw_nonzero().get() as u32,
                    Ordering::Relaxed,
                );
                while let Ok(cpu) = rx.recv() {
                    pin_to(cpu);
                    if let Err(e) = rustix::fs::statfs(&mountpoint) {
                        tracing::debug!(cpu, "the statfs nudge failed: {e}");
                    }
                }
            })?;
        Ok(StatfsNudger {
            tx: Mutex::new(tx),
            tid,
        })
    }

    fn nudge(&self, cpu: usize) -> bool {
        self.tx
            .lock()
            .map(|tx| tx.send(cpu).is_ok())
            .unwrap_or(false)
    }

    /// Whether `h` is one of its requests.
    fn made(&self, h: &abi::InHeader) -> bool {
        h.opcode == abi::op::STATFS && h.pid != 0 && h.pid == self.tid.load(Ordering::Relaxed)
    }
}

/// A reply waiting for its queue's thread.
struct Pending {
    slot: u32,
    unique: u64,
    error: i32,
    body: Vec<u8>,
}

/// Replies to one queue's requests.
struct RingSink<W, D> {
    tx: Sender<Pending>,
    owner: ThreadId,
    waker: W,
    dev: Arc<D>,
}

impl<W: Wake, D: Channel> Sink for RingSink<W, D> {
    fn send(&self, slot: u32, unique: u64, error: i32, body: &[&[u8]]) {
        let body = body.concat();
        if self
            .tx
            .send(Pending {
                slot,
                unique,
                error,
                body,
            })
            .is_err()
        {
            return; // the queue has ended, and the connection with it
        }
        if std::thread::current().id() != self.owner {
            self.waker.wake();
        }
    }

    fn device(&self) -> Option<&Arc<Device>> {
        self.dev.passthrough()
    }
}

fn pin_to(cpu: usize) {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    if let Err(e) = rustix::thread::sched_setaffinity(None, &set) {
        tracing::debug!(cpu, "cannot keep the queue's thread on its CPU: {e}");
    }
}

/// The `notify_unique` of the next nudge: even, as the kernel's own
/// uniques are (an odd one reads as an interrupt's), counted down from
/// the top of the range, which the kernel's count (up from 2) never
/// reaches; no two alike, so a commit never finds another's request.
static NUDGE_UNIQUE: AtomicU64 = AtomicU64::new(u64::MAX - 1);

/// Regular files this queue's requests and replies named lately, newest
/// first: what a nudge names (the kernel retrieves from regular files
/// only, and only from those it still knows).
#[derive(Default)]
struct Files([u64; 4]);

impl Files {
    fn note(&mut self, nodeid: u64) {
        if nodeid != 0 && self.0[0] != nodeid {
            let at = self.0.iter().position(|&n| n == nodeid).unwrap_or(3);
            self.0.copy_within(0..at, 1);
            self.0[0] = nodeid;
        }
    }

    /// Note the node of a request on an open file (only a regular file
    /// is opened through FUSE: devices and fifos open on the kernel's side).
    fn saw(&mut self, h: &abi::InHeader) {
        use abi::op;
        if matches!(
            h.opcode,
            op::OPEN | op::READ | op::WRITE | op::FLUSH | op::FSYNC | op::FALLOCATE | op::LSEEK
        ) {
            self.note(h.nodeid);
        }
    }

    /// Note the regular file a LOOKUP or CREATE reply gives the kernel.
    fn answered(&mut self, opcode: u32, error: i32, body: &[u8]) {
        if error != 0 || !matches!(opcode, abi::op::LOOKUP | abi::op::CREATE) {
            return;
        }
        if let Ok((e, _)) = abi::EntryOut::read_from_prefix(body) {
            if e.attr.mode & libc::S_IFMT == libc::S_IFREG {
                self.note(e.nodeid);
            }
        }
    }
}

/// Make the kernel send this thread's CPU's queue a request: a
/// `NOTIFY_RETRIEVE` of no bytes of a regular file it knows, which it
/// answers with a `NOTIFY_REPLY` request on the queue of the CPU the
/// writer runs on. Its entry's commit hands over the first request held
/// back for want of an entry, if any. False when no file would do (the
/// kernel forgot them all, or none was seen yet).
fn nudge<D: Channel>(dev: &D, files: &Files) -> bool {
    for &nodeid in files.0.iter().filter(|&&n| n != 0) {
        let out = NotifyRetrieveOut {
            notify_unique: NUDGE_UNIQUE.fetch_sub(2, Ordering::Relaxed),
            nodeid,
            offset: 0,
            size: 0,
            padding: 0,
        };
        let h = OutHeader {
            len: (std::mem::size_of::<OutHeader>() + std::mem::size_of::<NotifyRetrieveOut>())
                as u32,
            error: abi::notify::RETRIEVE,
            unique: 0,
        };
        match dev.write(&[IoSlice::new(h.as_bytes()), IoSlice::new(out.as_bytes())]) {
            Ok(_) => return true,
            Err(e) => tracing::debug!(
                nodeid,
                "cannot nudge the io_uring queue with this node: {e}"
            ),
        }
    }
    false
}

/// One queue's loop (as [`start`] runs it on its own thread).
pub(crate) fn serve_queue<Q: Queue>(
    mut ring: Q,
    fs: Arc<dyn Filesystem>,
    max_data: u32,
    qid: usize,
    stop: &AtomicBool,
    statfs: Option<&StatfsNudger>,
    idle: &IdlePoll,
) -> io::Result<()> {
    pin_to(qid);
    let (tx, rx): (Sender<Pending>, Receiver<Pending>) = channel();
    let sink: Arc<dyn Sink> = Arc::new(RingSink {
        tx,
        owner: std::thread::current().id(),
        waker: ring.waker(),
        dev: ring.device().clone(),
    });
    let dev = ring.device().clone();
    ring.register_all()?;
    let mut files = Files::default();
    // Each entry's request's opcode, for `Files::answered`.
    let mut ops: Vec<u32> = Vec::new();
    let mut events = Vec::new();
    loop {
        if events.is_empty() {
            ring.wait(&mut events)?;
        }
        // The entry a nudge came in, committed in this round.
        let mut nudged = None;
        for ev in std::mem::take(&mut events) {
            match ev {
                RingEvent::Request(n) => {
                    let (h, op, payload) = ring.request(n)?;
                    if h.opcode == abi::op::DESTROY {
                        Reply::new(h.unique, n as u32, sink.clone(), true).ok();
                        continue;
                    }
                    if h.opcode == abi::op::NOTIFY_REPLY {
                        // A nudge: nothing to do but free its entry.
                        ring.commit(n, h.unique, 0, &[])?;
                        nudged = Some(n);
                        continue;
                    }
                    files.saw(&h);
                    idle.request();
                    if statfs.is_some_and(|s| s.made(&h)) {
                        // Answered below, with the other replies.
                        nudged = Some(n);
                    }
                    if ops.len() <= n {
                        ops.resize(n + 1, 0);
                    }
                    ops[n] = h.opcode;
                    let may_wait =
                        ring.entries() < QUEUE_MAX || ring.held() < QUEUE_MAX - QUEUE_KEPT;
                    handle(
                        fs.as_ref(),
                        &h,
                        Args::split(op, payload),
                        n as u32,
                        &sink,
                        max_data,
                        may_wait,
                    );
                }
                RingEvent::Wake => {}
                RingEvent::Failed(_, e) if e == libc::ENOTCONN || e == libc::ECANCELED => {
                    return Ok(());
                }
                RingEvent::Failed(n, e) => {
                    tracing::warn!(
                        qid,
                        entry = n,
                        "a ring command failed: {}",
                        io::Error::from_raw_os_error(e)
                    );
                }
            }
        }
        while let Ok(p) = rx.try_recv() {
            let op = ops.get(p.slot as usize).copied().unwrap_or(0);
            files.answered(op, p.error, &p.body);
            ring.commit(p.slot as usize, p.unique, p.error, &[&p.body])?;
        }
        if stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        // A nudge's commit that came back with a request at once found
        // one held back: there may be more.
        let mut again = false;
        if let Some(n) = nudged {
            ring.poll(&mut events)?;
            again = events.contains(&RingEvent::Request(n));
            tracing::debug!(qid, again, "a nudge's entry committed");
        }
        let entries = ring.entries();
        if entries - ring.held().min(entries) < QUEUE_SPARE && entries < QUEUE_MAX {
            let added = ring.grow(entries.min(QUEUE_MAX - entries))?;
            if added > 0 {
                tracing::info!(
                    qid,
                    entries = ring.entries(),
                    waiting = ring.held(),
                    "io_uring queue grown: requests wait for answers (asks)"
                );
                again = true;
            }
            if ring.entries() >= QUEUE_MAX {
                tracing::warn!(
                    qid,
                    entries = ring.entries(),
                    "io_uring queue at its largest: this CPU's next requests wait for one of its waiting requests to be answered"
                );
            }
        }
        if again {
            // The new entries first: a nudge must find one free.
            ring.flush()?;
            if !nudge(dev.as_ref(), &files) && !statfs.is_some_and(|s| s.nudge(qid)) {
                tracing::debug!(
                    qid,
                    "no nudge: requests held back for want of an entry wait for the next answer on this CPU"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::FromZeros;

    fn req(opcode: u32, nodeid: u64) -> abi::InHeader {
        abi::InHeader {
            len: 0,
            opcode,
            unique: 2,
            nodeid,
            uid: 0,
            gid: 0,
            pid: 0,
            total_extlen: 0,
            padding: 0,
        }
    }

    #[test]
    fn a_nudge_names_the_regular_files_seen_last_newest_first() {
        let mut f = Files::default();
        // Requests on directories or names name no file to retrieve from.
        for op in [
            abi::op::LOOKUP,
            abi::op::GETATTR,
            abi::op::READDIR,
            abi::op::CREATE,
        ] {
            f.saw(&req(op, 9));
        }
        assert_eq!(f.0, [0; 4]);
        f.saw(&req(abi::op::OPEN, 5));
        f.saw(&req(abi::op::WRITE, 6));
        f.saw(&req(abi::op::READ, 7));
        f.saw(&req(abi::op::FLUSH, 8));
        assert_eq!(f.0, [8, 7, 6, 5]);
        // Seen again: first, without a second place; a new one pushes the
        // oldest out.
        f.saw(&req(abi::op::FSYNC, 6));
        assert_eq!(f.0, [6, 8, 7, 5]);
        f.saw(&req(abi::op::LSEEK, 6));
        assert_eq!(f.0, [6, 8, 7, 5]);
        f.saw(&req(abi::op::FALLOCATE, 11));
        assert_eq!(f.0, [11, 6, 8, 7]);
    }

    fn entry(nodeid: u64, mode: u32) -> Vec<u8> {
        let mut e = abi::EntryOut::new_zeroed();
        e.nodeid = nodeid;
        e.attr.mode = mode;
        e.as_bytes().to_vec()
    }

    #[test]
    fn a_lookup_or_create_of_a_regular_file_is_noted_too() {
        let mut f = Files::default();
        let file = entry(21, libc::S_IFREG | 0o644);
        let dir = entry(22, libc::S_IFDIR | 0o755);
        f.answered(abi::op::LOOKUP, 0, &dir);
        f.answered(abi::op::LOOKUP, -libc::ENOENT, &file);
        f.answered(abi::op::MKDIR, 0, &file);
        f.answered(abi::op::LOOKUP, 0, &file[..40]);
        assert_eq!(f.0, [0; 4]);
        f.answered(abi::op::LOOKUP, 0, &file);
        // CREATE's reply is the entry and then the open.
        let mut created = entry(23, libc::S_IFREG | 0o600);
        created.extend_from_slice(&[0; 16]);
        f.answered(abi::op::CREATE, 0, &created);
        assert_eq!(f.0, [23, 21, 0, 0]);
    }

    #[test]
    fn nudge_uniques_are_even_distinct_and_far_above_the_kernels() {
        let a = NUDGE_UNIQUE.fetch_sub(2, Ordering::Relaxed);
        let b = NUDGE_UNIQUE.fetch_sub(2, Ordering::Relaxed);
        assert_ne!(a, b);
        assert_eq!(a % 2, 0);
        assert_eq!(b % 2, 0);
        assert!(b > u64::MAX / 2);
    }
}

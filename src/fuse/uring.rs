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
//! Used when the kernel offers `FUSE_OVER_IO_URING` at INIT (the fuse
//! module's `enable_uring` parameter) and the daemon may set up io_urings;
//! otherwise the `/dev/fuse` transport serves.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::{JoinHandle, ThreadId};

use super::abi;
use super::reply::{Reply, Sink};
use super::request::Args;
use super::session::{Filesystem, handle};
use crate::backing::{Device, FuseRing, RingEvent, Waker, io_uring_allowed, possible_cpus};

/// Ring entries per queue. A request whose answer waits (an approval)
/// holds its entry until then; requests beyond this many on one CPU wait
/// in the kernel for an entry.
pub const QUEUE_DEPTH: usize = 32;

/// One ring per possible CPU, set up before INIT's reply so that agreeing
/// to io_uring never leaves the kernel waiting for queues that can't come.
pub(crate) fn prepare(dev: &Arc<Device>, payload: usize) -> io::Result<Vec<FuseRing>> {
    if !io_uring_allowed() {
        return Err(io::Error::other(
            "io_uring is not allowed here (kernel.io_uring_disabled?)",
        ));
    }
    (0..possible_cpus())
        .map(|q| FuseRing::new(dev, q as u16, QUEUE_DEPTH, payload))
        .collect()
}

/// The queues' threads.
pub(crate) struct Rings {
    threads: Vec<(JoinHandle<()>, Waker)>,
    stop: Arc<AtomicBool>,
}

impl Rings {
    /// Wait for the queues to end (the connection is gone).
    pub fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for (t, w) in self.threads {
            w.wake();
            let _ = t.join();
        }
    }
}

/// Start serving from `rings`.
pub(crate) fn start(rings: Vec<FuseRing>, fs: &Arc<dyn Filesystem>) -> io::Result<Rings> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for (qid, ring) in rings.into_iter().enumerate() {
        let waker = ring.waker();
        let fs = fs.clone();
        let stop2 = stop.clone();
        let t = std::thread::Builder::new()
            .name(format!("fuse-ring-{qid}"))
            .spawn(move || {
                if let Err(e) = serve_queue(ring, fs, qid, &stop2) {
                    tracing::warn!(qid, "io_uring queue ended: {e}");
                }
            })?;
        threads.push((t, waker));
    }
    Ok(Rings { threads, stop })
}

/// A reply waiting for its queue's thread.
struct Pending {
    slot: u32,
    unique: u64,
    error: i32,
    body: Vec<u8>,
}

/// Replies to one queue's requests.
struct RingSink {
    tx: Sender<Pending>,
    owner: ThreadId,
    waker: Waker,
    dev: Arc<Device>,
}

impl Sink for RingSink {
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

    fn device(&self) -> &Arc<Device> {
        &self.dev
    }
}

fn pin_to(cpu: usize) {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    if let Err(e) = rustix::thread::sched_setaffinity(None, &set) {
        tracing::debug!(cpu, "cannot keep the queue's thread on its CPU: {e}");
    }
}

fn serve_queue(
    mut ring: FuseRing,
    fs: Arc<dyn Filesystem>,
    qid: usize,
    stop: &AtomicBool,
) -> io::Result<()> {
    pin_to(qid);
    let (tx, rx): (Sender<Pending>, Receiver<Pending>) = channel();
    let sink: Arc<dyn Sink> = Arc::new(RingSink {
        tx,
        owner: std::thread::current().id(),
        waker: ring.waker(),
        dev: ring.device().clone(),
    });
    ring.register_all()?;
    let mut events = Vec::new();
    loop {
        events.clear();
        ring.wait(&mut events)?;
        for ev in &events {
            match *ev {
                RingEvent::Request(n) => {
                    let (h, op, payload) = ring.request(n)?;
                    if h.opcode == abi::op::DESTROY {
                        Reply::new(h.unique, n as u32, sink.clone(), true).ok();
                        continue;
                    }
                    handle(fs.as_ref(), &h, Args::split(op, payload), n as u32, &sink);
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
            ring.commit(p.slot as usize, p.unique, p.error, &[&p.body])?;
        }
        if stop.load(Ordering::Relaxed) {
            return Ok(());
        }
    }
}

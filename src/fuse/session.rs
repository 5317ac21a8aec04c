//! A FUSE connection from the handshake to the unmount: INIT, then the
//! serving threads of the chosen transport, then the end.
//!
//! The `/dev/fuse` transport: each thread reads requests from its own
//! clone of the device (`FUSE_DEV_IOC_CLONE`) and writes each reply back
//! to the fd the request came from. The io_uring transport (`uring`)
//! serves from one ring per CPU once the kernel has agreed to it; a
//! device thread stays for what the kernel still sends there.

use std::io::{self, IoSlice};
use std::sync::Arc;
use std::thread::JoinHandle;

use zerocopy::{FromBytes, IntoBytes};

use super::abi::{self, InHeader, OutHeader, init};
use super::busy_poll::{BusyPoll, PollerState};
use super::channel::{Channel, DevSink};
use super::dispatch::{Agreed, Filesystem, handle};
use super::handshake::handshake;
use super::idle_poll::IdlePoll;
use super::queue::FuseRing;
use super::reply::{Reply, Sink};
use super::request::Args;
use super::uring;
use crate::fuse::sys::Device;

/// How requests reach the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// read(2)/write(2) on `/dev/fuse`.
    Device,
    /// FUSE over io_uring, one ring per CPU.
    Uring,
}

impl Transport {
    pub fn name(self) -> &'static str {
        match self {
            Transport::Device => "dev-fuse",
            Transport::Uring => "io-uring",
        }
    }

    /// One line for people.
    pub fn describe(self) -> &'static str {
        match self {
            Transport::Device => "/dev/fuse (requests read and answered by the daemon's threads)",
            Transport::Uring => {
                "io_uring (one ring per CPU: a request is answered on the CPU it was made on)"
            }
        }
    }
}

/// How to serve.
#[derive(Debug, Clone)]
pub struct Options {
    /// Device threads (with io_uring: one, besides the rings).
    pub threads: usize,
    /// Use io_uring when the kernel offers it.
    pub uring: bool,
    /// Where the connection is mounted, as this process sees it: with
    /// io_uring, a `statfs` there is the nudge of last resort (`uring`).
    pub mountpoint: Option<std::path::PathBuf>,
    /// How long a `/dev/fuse` thread polls for the next request after a
    /// reply before it sleeps ([`busy_poll`](super::busy_poll)); zero:
    /// never. Not used with io_uring.
    pub busy_poll: std::time::Duration,
}

/// A connection whose handshake is done, not yet serving.
pub struct Session {
    dev: Arc<Device>,
    fs: Arc<dyn Filesystem>,
    agreed: Agreed,
    transport: Transport,
    threads: usize,
    rings: Option<Vec<FuseRing>>,
    mountpoint: Option<std::path::PathBuf>,
    busy_poll: std::time::Duration,
    idle_poll: Arc<IdlePoll>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("agreed", &self.agreed)
            .field("transport", &self.transport)
            .finish_non_exhaustive()
    }
}

impl Session {
    /// Do the INIT handshake on `dev` (mounted, its INIT pending).
    pub fn new(dev: Device, fs: Arc<dyn Filesystem>, opts: Options) -> io::Result<Session> {
        let dev = Arc::new(dev);
        let (agreed, rings) = handshake(&dev, fs.as_ref(), opts.uring, |payload| {
            uring::prepare(&dev, payload)
        })?;
        let transport = if agreed.has(init::OVER_IO_URING) {
            Transport::Uring
        } else {
            Transport::Device
        };
        Ok(Session {
            dev,
            fs,
            agreed,
            transport,
            threads: opts.threads.max(1),
            rings,
            mountpoint: opts.mountpoint,
            busy_poll: opts.busy_poll,
            idle_poll: Arc::new(IdlePoll::open(opts.busy_poll)),
        })
    }

    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// How long a `/dev/fuse` thread polls for the next request after a
    /// reply (zero: never, and always with io_uring).
    pub fn busy_poll(&self) -> std::time::Duration {
        match self.transport {
            Transport::Device => self.busy_poll,
            Transport::Uring => std::time::Duration::ZERO,
        }
    }

    /// The connection's idle polling ([`super::idle_poll`]), on either
    /// transport.
    pub fn idle_poll(&self) -> Arc<IdlePoll> {
        self.idle_poll.clone()
    }

    pub fn agreed(&self) -> &Agreed {
        &self.agreed
    }

    /// What tells the kernel to forget cached names and attributes.
    pub fn notifier(&self) -> Notifier {
        Notifier(self.dev.clone())
    }

    /// Serve until the mount goes away.
    pub fn run(mut self) -> io::Result<()> {
        let mut threads: Vec<JoinHandle<io::Result<()>>> = Vec::new();
        let idle = self.idle_poll.clone();
        let keeper = if idle.usable() {
            let idle = idle.clone();
            Some(
                std::thread::Builder::new()
                    .name("fuse-idle".into())
                    .spawn(move || idle.keep())?,
            )
        } else {
            None
        };
        // However serving ends, the keeper stops (and gives its request
        // back) before this returns.
        let _stop_keeper = StopKeeper(&idle, keeper);
        // With io_uring the device still carries FORGET and INTERRUPT
        // (and everything, should a queue fail to register): one thread.
        let rings = match self.rings.take() {
            Some(r) => Some(uring::start(
                r,
                &self.fs,
                self.agreed.max_data(),
                self.mountpoint.take(),
                &idle,
            )?),
            None => None,
        };
        let device_threads = if rings.is_some() { 1 } else { self.threads };
        // With io_uring the device thread serves FORGET and INTERRUPT only.
        let poll = Arc::new(BusyPoll::new(if rings.is_some() {
            std::time::Duration::ZERO
        } else {
            self.busy_poll
        }));
        for i in 1..device_threads {
            let dev = match self.dev.clone_session() {
                Ok(d) => Arc::new(d),
                Err(e) => {
                    tracing::warn!("cannot clone the FUSE device ({e}); serving with {i} threads");
                    break;
                }
            };
            let fs = self.fs.clone();
            let agreed = self.agreed;
            let poll = poll.clone();
            let idle = idle.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("fuse-{i}"))
                    .spawn(move || serve(dev, fs, agreed, false, &poll, &idle))?,
            );
        }
        let result = serve(
            self.dev.clone(),
            self.fs.clone(),
            self.agreed,
            rings.is_some(),
            &poll,
            &idle,
        );
        for t in threads {
            let _ = t.join();
        }
        if let Some(r) = rings {
            r.stop();
        }
        result
    }

    /// Serve on a background thread.
    pub fn spawn(self) -> io::Result<BackgroundSession> {
        let t = std::thread::Builder::new()
            .name("fuse-0".into())
            .spawn(move || self.run())?;
        Ok(BackgroundSession(t))
    }
}

/// Stops the idle polling keeper and waits for it, when dropped.
struct StopKeeper<'a>(&'a IdlePoll, Option<JoinHandle<()>>);

impl Drop for StopKeeper<'_> {
    fn drop(&mut self) {
        self.0.stop();
        if let Some(t) = self.1.take() {
            let _ = t.join();
        }
    }
}

/// A session served by background threads.
#[derive(Debug)]
pub struct BackgroundSession(JoinHandle<io::Result<()>>);

impl BackgroundSession {
    /// Wait for the serving threads (the mount must be gone first).
    pub fn join(self) -> io::Result<()> {
        self.0
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("a FUSE thread panicked")))
    }
}

/// How long the device thread of an io_uring session waits after a
/// FORGET before it reads again: the kernel queues one FORGET per dropped
/// inode and wakes the reader for each (every `unlink` is two wake-ups
/// otherwise); waiting lets them pile up into one BATCH_FORGET. An
/// INTERRUPT, the only other request there, waits at most this long.
const FORGET_LINGER: std::time::Duration = std::time::Duration::from_millis(2);

/// One device thread: read, dispatch, until the connection ends, within
/// the limits `agreed` at INIT. `batch_forgets`: wait [`FORGET_LINGER`]
/// after each FORGET (io_uring serves everything else). `poll`: the
/// connection's busy polling, and `idle` its idle polling, shared by its
/// threads.
pub(crate) fn serve<C: Channel>(
    dev: Arc<C>,
    fs: Arc<dyn Filesystem>,
    agreed: Agreed,
    batch_forgets: bool,
    poll: &BusyPoll,
    idle: &IdlePoll,
) -> io::Result<()> {
    let sink: Arc<dyn Sink> = Arc::new(DevSink(dev.clone()));
    let mut buf = vec![0u8; agreed.request_size()];
    let max_data = agreed.max_data();
    // However this thread stops serving (unmounted, an error, a panic),
    // it stops being the reader, so the threads standing by read again.
    let mut me = Reader(poll, PollerState::default());
    let mut polled = None;
    loop {
        let got = match polled.take() {
            Some(got) => got,
            None => {
                poll.before_read(&me.1);
                let got = read_sleeping(dev.as_ref(), &mut buf, &mut me.1);
                if got.is_ok() {
                    poll.woke(&me.1);
                }
                got
            }
        };
        let n = match got {
            Ok(n) => n,
            // ENODEV: unmounted. ECONNABORTED: aborted through fusectl.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ENODEV) | Some(libc::ECONNABORTED)
                ) =>
            {
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let Ok((h, body)) = InHeader::read_from_prefix(&buf[..n]) else {
            tracing::warn!(n, "a request shorter than its header");
            continue;
        };
        if h.opcode == abi::op::DESTROY {
            Reply::new(h.unique, 0, sink.clone(), true).ok();
            return Ok(());
        }
        let opcode = h.opcode;
        if !matches!(
            opcode,
            abi::op::FORGET | abi::op::BATCH_FORGET | abi::op::INTERRUPT
        ) {
            idle.request();
        }
        // A thread waiting on an answer holds nothing the others need.
        handle(
            fs.as_ref(),
            &h,
            Args::joined(body),
            0,
            &sink,
            max_data,
            true,
        );
        if batch_forgets && matches!(opcode, abi::op::FORGET | abi::op::BATCH_FORGET) {
            std::thread::sleep(FORGET_LINGER);
        }
        polled = poll.after_reply(dev.as_ref(), &mut buf, &mut me.1);
    }
}

/// A serving thread's polling state, given up when the thread stops.
struct Reader<'a>(&'a BusyPoll, PollerState);

impl Drop for Reader<'_> {
    fn drop(&mut self) {
        self.0.leave(&mut self.1);
    }
}

/// Read one request, sleeping until there is one. A device a poll left
/// non-blocking (it caught a request, or making the device blocking at
/// its end failed) gives a request waiting already; else it is made
/// blocking and read again.
pub(crate) fn read_sleeping<C: Channel>(
    dev: &C,
    buf: &mut [u8],
    me: &mut PollerState,
) -> io::Result<usize> {
    match dev.read(buf) {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
            me.make_blocking(dev)?;
            dev.read(buf)
        }
        got => got,
    }
}

/// Tells the kernel to drop what it cached.
#[derive(Debug, Clone)]
pub struct Notifier(Arc<Device>);

impl Notifier {
    fn notify(&self, code: i32, parts: &[&[u8]]) -> io::Result<()> {
        let len = std::mem::size_of::<OutHeader>() + parts.iter().map(|p| p.len()).sum::<usize>();
        let h = OutHeader {
            len: len as u32,
            error: code,
            unique: 0,
        };
        let mut v = vec![IoSlice::new(h.as_bytes())];
        v.extend(parts.iter().map(|p| IoSlice::new(p)));
        self.0.write(&v).map(|_| ())
    }

    /// Forget the name `name` in directory `parent`.
    pub fn inval_entry(&self, parent: super::INodeNo, name: &std::ffi::OsStr) -> io::Result<()> {
        use std::os::unix::ffi::OsStrExt;
        let out = abi::NotifyInvalEntryOut {
            parent: parent.0,
            namelen: name.len() as u32,
            flags: 0,
        };
        self.notify(
            abi::notify::INVAL_ENTRY,
            &[out.as_bytes(), name.as_bytes(), &[0]],
        )
    }

    /// Forget the attributes (and cached data in `offset..offset+len`,
    /// 0 meaning to the end) of node `ino`.
    pub fn inval_inode(&self, ino: super::INodeNo, offset: i64, len: i64) -> io::Result<()> {
        let out = abi::NotifyInvalInodeOut {
            ino: ino.0,
            off: offset,
            len,
        };
        self.notify(abi::notify::INVAL_INODE, &[out.as_bytes()])
    }
}

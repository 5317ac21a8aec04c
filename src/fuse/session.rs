//! A FUSE connection from the handshake to the unmount: INIT, then the
//! serving threads of the chosen transport, then the end.
//!
//! The `/dev/fuse` transport: each thread reads requests from its own
//! clone of the device (`FUSE_DEV_IOC_CLONE`) and writes each reply back
//! to the fd the request came from. The io_uring transport (`uring`)
//! serves from one ring per CPU once the kernel has agreed to it; a
//! device thread stays for what the kernel still sends there.

use std::io::{self, IoSlice};
use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::thread::JoinHandle;

use zerocopy::{FromBytes, IntoBytes};

use super::abi::{self, InHeader, OutHeader, init};
use super::queue::FuseRing;
use super::reply::{Reply, Sink, send_file_copied};
use super::request::{Args, Malformed, Op, Request, has_reply};
use super::uring;
use crate::fuse::sys::Device;

/// What the kernel offered at INIT.
#[derive(Debug, Clone, Copy)]
pub struct Offer {
    pub minor: u32,
    pub flags: u64,
    pub max_readahead: u32,
}

/// What the filesystem asks for in INIT's reply. Flags the kernel did not
/// offer are dropped.
#[derive(Debug, Clone, Copy)]
pub struct Wants {
    pub flags: u64,
    pub max_write: u32,
    pub max_pages: u16,
    pub max_stack_depth: u32,
    /// How many requests the kernel may have in flight in the background
    /// (reads ahead, writeback).
    pub max_background: u16,
}

/// The settled connection parameters.
#[derive(Debug, Clone, Copy)]
pub struct Agreed {
    pub minor: u32,
    pub flags: u64,
    pub max_write: u32,
    pub max_pages: u16,
}

impl Agreed {
    pub fn has(&self, flag: u64) -> bool {
        self.flags & flag != 0
    }

    /// The largest request: a write of `max_write` bytes with its headers.
    pub fn request_size(&self) -> usize {
        let pages = usize::from(self.max_pages.max(1)) * 4096;
        (self.max_write as usize).max(pages) + 4096
    }
}

/// A filesystem served by a [`Session`].
pub trait Filesystem: Send + Sync + 'static {
    /// What to ask of the kernel, given its offer.
    fn init(&self, offer: &Offer) -> Wants;
    /// What the kernel agreed to (called once, before any request).
    fn agreed(&self, agreed: &Agreed);
    /// Answer one request (INIT aside). Requests the kernel expects no
    /// answer to come with a reply that sends nothing.
    fn dispatch(&self, req: Request<'_>, reply: Reply);
}

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
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("agreed", &self.agreed)
            .field("transport", &self.transport)
            .finish_non_exhaustive()
    }
}

/// Replies written to the device they came from.
struct DevSink(Arc<Device>);

impl Sink for DevSink {
    fn send(&self, _slot: u32, unique: u64, error: i32, body: &[&[u8]]) {
        let len = std::mem::size_of::<OutHeader>() + body.iter().map(|b| b.len()).sum::<usize>();
        let h = OutHeader {
            len: len as u32,
            error,
            unique,
        };
        let head = IoSlice::new(h.as_bytes());
        // Every reply but a directory listing has at most two parts: no
        // allocation on the way out.
        let written = match body {
            [] => self.0.write(&[head]),
            [a] => self.0.write(&[head, IoSlice::new(a)]),
            [a, b] => self.0.write(&[head, IoSlice::new(a), IoSlice::new(b)]),
            _ => {
                let mut parts = Vec::with_capacity(1 + body.len());
                parts.push(head);
                parts.extend(body.iter().map(|b| IoSlice::new(b)));
                self.0.write(&parts)
            }
        };
        if let Err(e) = written {
            // ENOENT: the request was interrupted and is gone.
            if e.raw_os_error() != Some(libc::ENOENT) {
                tracing::debug!(unique, "cannot write a reply: {e}");
            }
        }
    }

    /// File data of at least [`SPLICE_MIN`] bytes goes from the backing
    /// file to the device through a pipe, not through the daemon's memory.
    fn send_file(&self, slot: u32, unique: u64, file: BorrowedFd<'_>, offset: u64, size: u32) {
        if let Some(len) = splice_len(file, offset, size) {
            let h = OutHeader {
                len: (std::mem::size_of::<OutHeader>() + len) as u32,
                error: 0,
                unique,
            };
            match self.0.write_spliced(h.as_bytes(), file, offset, len) {
                Ok(true) => return,
                Ok(false) => {}
                // The request was interrupted and is gone.
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return,
                // Answered by copying instead: a request never gets two
                // answers (the kernel refuses a second one with ENOENT).
                Err(e) => tracing::debug!(unique, "cannot splice a reply: {e}"),
            }
        }
        send_file_copied(self, slot, unique, file, offset, size);
    }

    fn device(&self) -> &Arc<Device> {
        &self.0
    }
}

/// Replies of file data shorter than this are copied: moving a few pages
/// through a pipe costs more calls than copying them.
const SPLICE_MIN: usize = 32 * 1024;

/// How many bytes a READ of `size` at `offset` gets from `file` as it is
/// now, when that is worth splicing.
fn splice_len(file: BorrowedFd<'_>, offset: u64, size: u32) -> Option<usize> {
    if (size as usize) < SPLICE_MIN {
        return None;
    }
    let st = crate::backing::stat(file).ok()?;
    let left = (st.st_size as u64).saturating_sub(offset);
    let len = left.min(u64::from(size)) as usize;
    (len >= SPLICE_MIN).then_some(len)
}

impl Session {
    /// Do the INIT handshake on `dev` (mounted, its INIT pending).
    pub fn new(dev: Device, fs: Arc<dyn Filesystem>, opts: Options) -> io::Result<Session> {
        let dev = Arc::new(dev);
        let mut buf = vec![0u8; 64 * 1024];
        let n = dev.read(&mut buf)?;
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
        let sink: Arc<dyn Sink> = Arc::new(DevSink(dev.clone()));
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
        if opts.uring {
            wants.flags |= init::OVER_IO_URING;
        }
        let mut flags = (wants.flags & offered) | (offered & init::INIT_EXT);
        let payload = (wants.max_write as usize)
            .max(usize::from(wants.max_pages) * 4096)
            .max(8192);
        let mut rings = None;
        if flags & init::OVER_IO_URING != 0 {
            match uring::prepare(&dev, payload) {
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
        let transport = if agreed.has(init::OVER_IO_URING) {
            Transport::Uring
        } else {
            Transport::Device
        };
        reply.data(out.as_bytes());
        Ok(Session {
            dev,
            fs,
            agreed,
            transport,
            threads: opts.threads.max(1),
            rings,
            mountpoint: opts.mountpoint,
        })
    }

    pub fn transport(&self) -> Transport {
        self.transport
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
        // With io_uring the device still carries FORGET and INTERRUPT
        // (and everything, should a queue fail to register): one thread.
        let rings = match self.rings.take() {
            Some(r) => Some(uring::start(r, &self.fs, self.mountpoint.take())?),
            None => None,
        };
        let device_threads = if rings.is_some() { 1 } else { self.threads };
        for i in 1..device_threads {
            let dev = match self.dev.clone_session() {
                Ok(d) => Arc::new(d),
                Err(e) => {
                    tracing::warn!("cannot clone the FUSE device ({e}); serving with {i} threads");
                    break;
                }
            };
            let fs = self.fs.clone();
            let size = self.agreed.request_size();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("fuse-{i}"))
                    .spawn(move || serve(dev, fs, size, false))?,
            );
        }
        let result = serve(
            self.dev.clone(),
            self.fs.clone(),
            self.agreed.request_size(),
            rings.is_some(),
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

/// Decode one request and hand it to `fs` with its reply.
pub(crate) fn handle(
    fs: &dyn Filesystem,
    h: &InHeader,
    args: Args<'_>,
    slot: u32,
    sink: &Arc<dyn Sink>,
) {
    let reply = Reply::new(h.unique, slot, sink.clone(), has_reply(h.opcode));
    match Request::parse(h, args) {
        Ok(req) => fs.dispatch(req, reply),
        Err(Malformed) => {
            tracing::warn!(opcode = h.opcode, "a malformed request; answered EIO");
            reply.error(libc::EIO);
        }
    }
}

/// How long the device thread of an io_uring session waits after a
/// FORGET before it reads again: the kernel queues one FORGET per dropped
/// inode and wakes the reader for each (every `unlink` is two wake-ups
/// otherwise); waiting lets them pile up into one BATCH_FORGET. An
/// INTERRUPT, the only other request there, waits at most this long.
const FORGET_LINGER: std::time::Duration = std::time::Duration::from_millis(2);

/// One device thread: read, dispatch, until the connection ends.
/// `batch_forgets`: wait [`FORGET_LINGER`] after each FORGET (io_uring
/// serves everything else).
fn serve(
    dev: Arc<Device>,
    fs: Arc<dyn Filesystem>,
    size: usize,
    batch_forgets: bool,
) -> io::Result<()> {
    let sink: Arc<dyn Sink> = Arc::new(DevSink(dev.clone()));
    let mut buf = vec![0u8; size];
    loop {
        let n = match dev.read(&mut buf) {
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
        handle(fs.as_ref(), &h, Args::joined(body), 0, &sink);
        if batch_forgets && matches!(opcode, abi::op::FORGET | abi::op::BATCH_FORGET) {
            std::thread::sleep(FORGET_LINGER);
        }
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

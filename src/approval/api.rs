//! The Rust API for supervisors that embed the crate: mount, then receive
//! each approval request on a channel and answer it.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use zonemount::approval::{Scope, api};
//! let table = zonemount::config::load_project(
//!     Some(std::path::Path::new("project.yaml")),
//!     std::path::Path::new("."),
//!     &zonemount::config::LoadOptions::from_host(false),
//! )?;
//! let (mount, requests) = api::mount(&table, api::Options::new("/tmp/task-42"))?;
//! for req in requests.iter() {
//!     println!("{} wants to {} {}", req.info().cmdline, req.info().class, req.info().path);
//!     if req.info().path.ends_with(".md") { req.allow(Scope::Once); } else { req.deny(); }
//! }
//! drop(mount); // denies whatever is still pending, then unmounts
//! # Ok(()) }
//! ```
//!
//! Each [`Request`]'s `allow`/`deny` is idempotent: the first answer (from
//! here, the CLI or the control socket) wins, later ones return false.
//! Dropping the [`Requests`] receiver denies everything pending and every
//! later request; dropping the [`Mount`] does too, then unmounts.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use super::Listener;
use super::{Approvals, Decision, Event, RequestInfo, Scope, Settings};
use crate::audit::{Audit, Kind, Record as AuditRecord};
use crate::config::ZoneTable;
use crate::mount::{self, MountError, MountSpec};

/// One waiting request, with its answer buttons.
#[derive(Debug)]
pub struct Request {
    info: RequestInfo,
    broker: Approvals,
    uid: u32,
}

impl Request {
    pub fn info(&self) -> &RequestInfo {
        &self.info
    }

    pub fn id(&self) -> u64 {
        self.info.id
    }

    /// Allow it (once, or for the path or zone for the rest of the mount).
    /// False if it was already answered, timed out or withdrawn.
    pub fn allow(&self, scope: Scope) -> bool {
        self.broker
            .decide(self.info.id, Decision::Allow(scope), self.uid)
            .is_ok()
    }

    /// Deny it: the syscall gets EACCES, and the same class on the same
    /// path is denied at once for the rest of the mount.
    pub fn deny(&self) -> bool {
        self.broker
            .decide(self.info.id, Decision::Deny, self.uid)
            .is_ok()
    }
}

/// The receiving end. Dropping it denies what is pending and stops asking.
#[derive(Debug)]
pub struct Requests {
    rx: mpsc::Receiver<Request>,
    alive: Arc<AtomicBool>,
}

impl Requests {
    /// Wait for the next request; None once the mount is gone.
    pub fn recv(&self) -> Option<Request> {
        self.rx.recv().ok()
    }

    /// Wait at most `d`; None on timeout or once the mount is gone.
    pub fn recv_timeout(&self, d: Duration) -> Option<Request> {
        self.rx.recv_timeout(d).ok()
    }

    pub fn try_recv(&self) -> Option<Request> {
        self.rx.try_recv().ok()
    }

    /// Every request until the mount is gone.
    pub fn iter(&self) -> impl Iterator<Item = Request> + '_ {
        self.rx.iter()
    }
}

impl Drop for Requests {
    fn drop(&mut self) {
        self.alive.store(false, Ordering::Release);
    }
}

struct Channel {
    tx: mpsc::Sender<Request>,
    alive: Arc<AtomicBool>,
    broker: Approvals,
    uid: u32,
}

impl Listener for Channel {
    fn event(&self, ev: &Event) {
        if let Event::Requested(info) = ev {
            let req = Request {
                info: info.clone(),
                broker: self.broker.clone(),
                uid: self.uid,
            };
            if self.tx.send(req).is_err() {
                self.alive.store(false, Ordering::Release);
            }
        }
    }

    fn gone(&self) -> bool {
        !self.alive.load(Ordering::Acquire)
    }
}

/// Requests of `broker` on a channel. The broker holds the sending end;
/// the returned receiver's drop denies what is pending.
pub fn channel(broker: &Approvals) -> Requests {
    let (tx, rx) = mpsc::channel();
    let alive = Arc::new(AtomicBool::new(true));
    broker.subscribe(Arc::new(Channel {
        tx,
        alive: alive.clone(),
        broker: broker.clone(),
        uid: rustix::process::geteuid().as_raw(),
    }));
    Requests { rx, alive }
}

/// How to mount.
#[derive(Debug, Clone)]
pub struct Options {
    pub mountpoint: PathBuf,
    /// How long a request may wait (default 300 s; capped below the
    /// kernel's FUSE request timeout where one is set).
    pub timeout: Duration,
    /// Append the audit ledger here.
    pub audit_log: Option<PathBuf>,
    /// Seconds the kernel may cache names and attributes.
    pub ttl: Duration,
}

impl Options {
    pub fn new(mountpoint: impl Into<PathBuf>) -> Options {
        Options {
            mountpoint: mountpoint.into(),
            timeout: Duration::from_secs(300),
            audit_log: None,
            ttl: Duration::from_secs(1),
        }
    }
}

/// Why [`mount`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error(transparent)]
    Mount(#[from] MountError),
    #[error(transparent)]
    Audit(#[from] crate::audit::OpenError),
    #[error("cannot start the FUSE session: {0}")]
    Spawn(std::io::Error),
}

/// A live mount served by background threads of this process.
pub struct Mount {
    session: Option<fuser::BackgroundSession>,
    broker: Approvals,
    mountpoint: PathBuf,
}

impl std::fmt::Debug for Mount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mount")
            .field("mountpoint", &self.mountpoint)
            .finish_non_exhaustive()
    }
}

impl Mount {
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// The broker, e.g. to list what is pending.
    pub fn approvals(&self) -> &Approvals {
        &self.broker
    }

    /// Deny what is pending, unmount, and wait for the session to end.
    pub fn unmount(mut self) -> std::io::Result<()> {
        self.close()
    }

    fn close(&mut self) -> std::io::Result<()> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        // First answer every waiting syscall: a pending one keeps the
        // mount busy.
        self.broker.shutdown("the mount is closing");
        // Unmount ourselves, as the daemon does (fuser's own unmount leaves
        // an auto_unmount mount to fusermount3, which may not act).
        if let Err(e) = mount::detach(&self.mountpoint, false) {
            tracing::warn!("unmount failed ({e}); detaching lazily");
            mount::detach(&self.mountpoint, true).map_err(std::io::Error::other)?;
        }
        let joined = session.join();
        if let Some(a) = self.broker.audit() {
            a.log(Kind::Unmount, &AuditRecord::default());
        }
        joined
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            tracing::warn!("unmounting {} failed: {e}", self.mountpoint.display());
        }
    }
}

/// Mount `table` at `opts.mountpoint`, served by threads of this process;
/// every `ask` arrives on the returned receiver.
pub fn mount(table: &ZoneTable, opts: Options) -> Result<(Mount, Requests), ApiError> {
    let mp = mount::preflight(&opts.mountpoint, table)?;
    let audit = match &opts.audit_log {
        Some(p) => Some(Arc::new(Audit::open(p, &mp)?)),
        None => None,
    };
    let (timeout, capped) = super::cap_timeout_for_kernel(opts.timeout);
    if capped {
        tracing::warn!(
            ?timeout,
            "approval timeout capped below the kernel's FUSE request timeout"
        );
    }
    let broker = Approvals::new(
        Settings {
            mountpoint: mp.clone(),
            timeout,
            no_approvals: false,
        },
        audit,
    );
    let requests = channel(&broker);
    let spec = MountSpec {
        mountpoint: mp.clone(),
        ttl: opts.ttl,
        // ro zones change only from the host side: cached longer, as the
        // CLI does.
        ttl_ro: opts.ttl.saturating_mul(6),
        passthrough: true,
        threads: 4,
        config: table.source.clone(),
        workers: Vec::new(),
        allow_other: false,
        allow_uids: Vec::new(),
    };
    let (session, _core) = mount::start(&mp, table, &spec, Some(Arc::new(broker.clone())))?;
    let session = session.spawn().map_err(ApiError::Spawn)?;
    if let Some(a) = broker.audit() {
        a.log(Kind::Mount, &AuditRecord::default());
    }
    Ok((
        Mount {
            session: Some(session),
            broker,
            mountpoint: mp,
        },
        requests,
    ))
}

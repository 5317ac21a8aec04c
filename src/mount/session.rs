//! The one composition root: a zone table and [`Settings`] become a live
//! mount — filesystem core, approval broker, audit ledger, FUSE session —
//! for every entry point (the `zonemount mount` daemon and the Rust API).
//! A mount's defaults are defined here, once.
//!
//! Assumes the mountpoint passed [`preflight`](super::preflight). A built
//! [`Session`] is mounted (the FUSE handshake is done) but answers nothing
//! until [`Session::run`] or [`Session::spawn`]: approvers subscribe to its
//! broker in between, before any request can reach it.

use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use fuser::{Config, MountOption, SessionACL};

use super::preflight::{MountError, have_dev_fuse};
use super::show;
use super::unmount::{UnmountError, detach_or_lazily};
use crate::approval::{self, Approvals, Broker};
use crate::audit::{self, Audit, Kind};
use crate::config::ZoneTable;
use crate::fs::core::{Core, CoreOptions};
use crate::fs::{Admission, ZoneFs};

/// How long the kernel may cache names and attributes of rw zones.
pub const DEFAULT_CACHE_TTL: Duration = Duration::from_secs(30);
/// ro zones (and the mount root) change only from the host side, and less
/// often: their names and attributes are cached this many times longer
/// than rw zones' (`--cache-ttl`'s help says "6 times").
pub const RO_TTL_FACTOR: u32 = 6;
/// FUSE threads serving requests.
pub const DEFAULT_THREADS: usize = 4;
/// More threads than this only add cross-CPU wake-ups.
pub const MAX_THREADS: usize = 64;
/// How long an approval request waits for a decision (capped below the
/// kernel's FUSE request timeout where one is set).
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(300);

/// How to mount, beyond the zone table and the mountpoint.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Cache TTL of rw zones; ro zones and the root get
    /// [`RO_TTL_FACTOR`] times as long.
    pub ttl: Duration,
    /// FUSE threads serving requests (clamped to 1..=[`MAX_THREADS`]).
    pub threads: usize,
    /// Use kernel passthrough for file data where possible.
    pub passthrough: bool,
    /// How long a request may wait for a decision.
    pub approval_timeout: Duration,
    /// Deny every `ask` at once.
    pub no_approvals: bool,
    /// Append the audit ledger (JSON Lines) here.
    pub audit_log: Option<PathBuf>,
    /// Let users other than the mounting one (and root) in.
    pub allow_other: bool,
    /// With `allow_other`: only these users (plus the mounting user and
    /// root). Empty: everyone.
    pub allow_uids: Vec<u32>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            ttl: DEFAULT_CACHE_TTL,
            threads: DEFAULT_THREADS,
            passthrough: true,
            approval_timeout: DEFAULT_APPROVAL_TIMEOUT,
            no_approvals: false,
            audit_log: None,
            allow_other: false,
            allow_uids: Vec::new(),
        }
    }
}

impl Settings {
    /// Cache TTL of ro zones and the mount root.
    pub fn ttl_ro(&self) -> Duration {
        self.ttl.saturating_mul(RO_TTL_FACTOR)
    }
}

/// Why [`build`] failed.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Mount(#[from] MountError),
    #[error(transparent)]
    Audit(#[from] audit::OpenError),
}

/// A mounted filesystem with its broker and ledger, not yet serving.
pub struct Session {
    mountpoint: PathBuf,
    broker: Approvals,
    audit: Option<Arc<Audit>>,
    core: Arc<Core>,
    fuse: fuser::Session<ZoneFs>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("mountpoint", &self.mountpoint)
            .finish_non_exhaustive()
    }
}

/// The user the daemon runs as: the mount's owner.
#[derive(Debug, Clone, Copy)]
struct Owner {
    uid: u32,
    gid: u32,
}

impl Owner {
    fn current() -> Owner {
        Owner {
            uid: rustix::process::geteuid().as_raw(),
            gid: rustix::process::getegid().as_raw(),
        }
    }
}

/// Mount `table` at `mountpoint` (canonical, as [`preflight`] returns it):
/// ledger, broker, filesystem, FUSE session, in that order. The ledger
/// records the mount once the handshake is done.
///
/// [`preflight`]: super::preflight
pub fn build(
    table: &ZoneTable,
    mountpoint: &Path,
    settings: &Settings,
) -> Result<Session, SessionError> {
    let audit = match &settings.audit_log {
        Some(p) => Some(Arc::new(Audit::open(p, mountpoint)?)),
        None => None,
    };
    let broker = Approvals::new(
        approval::Settings {
            mountpoint: mountpoint.to_path_buf(),
            timeout: approval_timeout(settings.approval_timeout),
            no_approvals: settings.no_approvals,
        },
        audit.clone(),
    );
    let owner = Owner::current();
    let fs = filesystem(table, settings, Arc::new(broker.clone()), owner)?;
    let core = fs.core().clone();
    let config = fuse_config(settings, owner)?;
    crate::backing::clear_umask();
    crate::backing::raise_nofile_limit();
    let fuse = fuser::Session::new(fs, mountpoint, &config).map_err(|e| {
        if e.kind() == io::ErrorKind::NotFound && !have_dev_fuse() {
            MountError::NoFuse
        } else {
            MountError::Mount(show(mountpoint), e)
        }
    })?;
    // The handshake is done: the I/O mode is settled.
    tracing::info!(
        mountpoint = %mountpoint.display(),
        io = core.io_mode().describe(),
        ttl = ?settings.ttl,
        ttl_ro = ?settings.ttl_ro(),
        threads = threads(settings),
        "mounted"
    );
    if let Some(a) = &audit {
        a.log(Kind::Mount, &audit::Record::default());
    }
    Ok(Session {
        mountpoint: mountpoint.to_path_buf(),
        broker,
        audit,
        core,
        fuse,
    })
}

/// The approval timeout to use: `wanted`, capped below the kernel's FUSE
/// request timeout (which would abort the whole connection).
fn approval_timeout(wanted: Duration) -> Duration {
    let (timeout, capped) = approval::cap_timeout_for_kernel(wanted);
    if capped {
        tracing::warn!(
            "approval timeout capped to {} s: the kernel aborts FUSE requests that wait longer (fs.fuse.default_request_timeout / max_request_timeout)",
            timeout.as_secs()
        );
    }
    timeout
}

fn threads(settings: &Settings) -> usize {
    settings.threads.clamp(1, MAX_THREADS)
}

/// The filesystem over `table`: core and FUSE adapter. The one place they
/// are built.
fn filesystem(
    table: &ZoneTable,
    settings: &Settings,
    broker: Arc<dyn Broker>,
    owner: Owner,
) -> Result<ZoneFs, MountError> {
    let mut admission = Admission::default();
    if settings.allow_other && !settings.allow_uids.is_empty() {
        let mut only: HashSet<u32> = settings.allow_uids.iter().copied().collect();
        only.insert(owner.uid);
        admission.only = Some(only);
    }
    let opts = CoreOptions {
        ttl: settings.ttl,
        ttl_ro: settings.ttl_ro(),
        passthrough: settings.passthrough,
        owner_uid: owner.uid,
        owner_gid: owner.gid,
        admission,
    };
    let core = Core::new(table, opts, broker).map_err(|e| MountError::Backing(e.to_string()))?;
    Ok(ZoneFs::new(Arc::new(core)))
}

fn fusermount3() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join("fusermount3"))
        .find(|p| p.is_file())
}

/// Whether /etc/fuse.conf lets non-root users mount with allow_other.
fn fuse_conf_allows_other() -> bool {
    std::fs::read_to_string("/etc/fuse.conf")
        .map(|t| {
            t.lines()
                .map(|l| l.split('#').next().unwrap_or("").trim())
                .any(|l| l == "user_allow_other")
        })
        .unwrap_or(false)
}

/// Mount options and who gets in (DESIGN §6: nosuid, nodev, kernel
/// permission checks; others only with `allow_other`).
fn fuse_config(settings: &Settings, owner: Owner) -> Result<Config, MountError> {
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName("zonemount".into()),
        MountOption::Subtype("zonemount".into()),
        MountOption::DefaultPermissions,
        MountOption::NoSuid,
        MountOption::NoDev,
    ];
    let have_fusermount = fusermount3().is_some();
    if owner.uid != 0 && !have_fusermount {
        return Err(MountError::NoFusermount);
    }
    if settings.allow_other && owner.uid != 0 && !fuse_conf_allows_other() {
        return Err(MountError::AllowOtherNotPermitted);
    }
    // Both ACLs below mount with allow_other; fuser then filters in the
    // daemon: RootAndOwner admits root and the mounting user only.
    if settings.allow_other {
        config.acl = SessionACL::All;
    }
    if owner.uid == 0 && have_fusermount {
        // auto_unmount: fusermount3 unmounts if the daemon dies. It needs
        // allow_other, so without --allow-other fuser keeps others out.
        config.mount_options.push(MountOption::AutoUnmount);
        if !settings.allow_other {
            config.acl = SessionACL::RootAndOwner;
        }
    }
    config.n_threads = Some(threads(settings));
    config.clone_fd = true;
    Ok(config)
}

impl Session {
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// The broker: subscribe approvers here before serving.
    pub fn broker(&self) -> &Approvals {
        &self.broker
    }

    pub fn audit(&self) -> Option<&Arc<Audit>> {
        self.audit.as_ref()
    }

    /// The filesystem core, for what `status` reads of it.
    pub fn core(&self) -> &Arc<Core> {
        &self.core
    }

    /// What stops this mount from another thread (a signal handler).
    pub fn stopper(&self) -> Stopper {
        Stopper {
            broker: self.broker.clone(),
            mountpoint: self.mountpoint.clone(),
        }
    }

    /// Serve on this thread until the mount goes away; then deny whatever
    /// is pending and record the unmount.
    pub fn run(self) -> io::Result<()> {
        let result = self.fuse.run();
        self.broker.shutdown("the mount is gone");
        log_unmount(self.audit.as_ref());
        result
    }

    /// Serve on background threads of this process.
    pub fn spawn(self) -> io::Result<Background> {
        let fuse = self.fuse.spawn()?;
        Ok(Background {
            fuse: Some(fuse),
            stopper: Stopper {
                broker: self.broker,
                mountpoint: self.mountpoint,
            },
            audit: self.audit,
        })
    }
}

fn log_unmount(audit: Option<&Arc<Audit>>) {
    if let Some(a) = audit {
        a.log(Kind::Unmount, &audit::Record::default());
    }
}

/// Ends a mount from outside its serving threads.
#[derive(Debug, Clone)]
pub struct Stopper {
    broker: Approvals,
    mountpoint: PathBuf,
}

impl Stopper {
    /// First answer every waiting syscall (a pending one keeps the mount
    /// busy, and nobody may be left to decide it), then unmount, lazily if
    /// need be. The serving threads then end.
    pub fn stop(&self, reason: &str) -> Result<(), UnmountError> {
        self.broker.shutdown(reason);
        detach_or_lazily(&self.mountpoint)
    }
}

/// A mount served by background threads (see [`Session::spawn`]).
pub struct Background {
    fuse: Option<fuser::BackgroundSession>,
    stopper: Stopper,
    audit: Option<Arc<Audit>>,
}

impl Background {
    pub fn mountpoint(&self) -> &Path {
        &self.stopper.mountpoint
    }

    pub fn broker(&self) -> &Approvals {
        &self.stopper.broker
    }

    /// Deny what is pending, unmount, wait for the serving threads and
    /// record the unmount. Later calls do nothing.
    pub fn close(&mut self, reason: &str) -> io::Result<()> {
        let Some(fuse) = self.fuse.take() else {
            return Ok(());
        };
        self.stopper.stop(reason).map_err(io::Error::other)?;
        let joined = fuse.join();
        log_unmount(self.audit.as_ref());
        joined
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ro_zones_are_cached_longer_and_threads_stay_in_range() {
        let mut s = Settings::default();
        assert_eq!(s.ttl_ro(), s.ttl * RO_TTL_FACTOR);
        s.ttl = Duration::MAX;
        assert_eq!(s.ttl_ro(), Duration::MAX, "saturates");
        s.threads = 0;
        assert_eq!(threads(&s), 1);
        s.threads = 1000;
        assert_eq!(threads(&s), MAX_THREADS);
    }
}

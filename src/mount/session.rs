//! The one composition root: a zone table and [`Settings`] become a live
//! mount — filesystem core, approval broker, audit ledger, FUSE session —
//! for every entry point (the `zonemount mount` daemon and the Rust API).
//! A mount's defaults are defined here, once.
//!
//! How the mount is made: with CAP_SYS_ADMIN (root) the session opens
//! `/dev/fuse` and calls mount(2) itself, as `fuse.zonemount` with fsname
//! `zonemount`, whether or not `fusermount3` exists; others go through
//! `fusermount3` (it mounts and passes the device back over a socket),
//! which gives the same type. Either way a
//! [`Watcher`] is forked right after the mount exists: if this process
//! dies without [`Session`]'s clean end, the watcher unmounts the dead
//! mount lazily and removes the daemon's control socket and registry
//! record (see `mount::watch`). That replaces fusermount3's
//! `auto_unmount`, which needed `allow_other` (and so an in-daemon ACL)
//! and did nothing without fusermount3.
//!
//! Who gets in is the kernel's decision: without `allow_other` only the
//! mount's owner (for root's mounts: root) passes; with it, everyone, and
//! the daemon's admission narrows that to `--allow-uid`.
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

use super::preflight::{MountError, have_dev_fuse};
use super::unmount::{UnmountError, detach_or_lazily};
use super::watch::{Plan as WatchPlan, Watcher};
use super::{probe, show};
use crate::approval::{self, Approvals, Broker};
use crate::audit::{self, Audit, Kind};
use crate::config::ZoneTable;
use crate::fs::core::{Core, CoreOptions, OpenError};
use crate::fs::refusal_log::RefusalLog;
use crate::fs::{Admission, ZoneFs};
use crate::fuse::sys::{Device, FuseMount};
use crate::fuse::{self, Transport};
use crate::stage::Stages;

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
    /// Where file data goes through the daemon, let the kernel gather
    /// writes in its page cache (`--writeback-cache`; see
    /// [`CoreOptions::writeback_cache`]).
    pub writeback_cache: bool,
    /// `--kernel-opens`: asked for (see [`kernel_opens`]).
    pub kernel_opens: bool,
    /// Serve over FUSE-over-io_uring when the kernel offers it (off by
    /// default: io_uring was not ahead on every workload on the machines
    /// we have).
    pub io_uring: bool,
    /// How long a `/dev/fuse` thread polls for the next request after a
    /// reply before it sleeps (`--busy-poll`; zero: never).
    pub busy_poll: Duration,
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
    /// The daemon's registry record, which the watcher removes if this
    /// process dies without ending the session. None for the Rust API.
    pub record: Option<PathBuf>,
    /// The control socket the watcher removes (when nothing listens on it
    /// any more) if this process dies.
    pub control: Option<PathBuf>,
    /// Where staged zones keep their changes (None: the default for the
    /// mountpoint, see `stage::dir::default_for`).
    pub stage_dir: Option<PathBuf>,
    /// How many checkpoints a staged zone keeps (`--max-checkpoints`;
    /// None: the project file's `sandbox.max_checkpoints`, else
    /// `stage::service::MAX_CHECKPOINTS`).
    pub max_checkpoints: Option<usize>,
    /// Tell the worker of each refusal in this file (`--refusal-log`),
    /// paths written as under `refusal_log_root` (default: the
    /// mountpoint).
    pub refusal_log: Option<PathBuf>,
    pub refusal_log_root: Option<PathBuf>,
    /// A `zonemount run` task's mount: its init may register the worker's
    /// boundary (`approval::side`).
    pub run_task: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            ttl: DEFAULT_CACHE_TTL,
            threads: DEFAULT_THREADS,
            passthrough: true,
            writeback_cache: false,
            kernel_opens: false,
            io_uring: false,
            busy_poll: fuse::BUSY_POLL_DEFAULT,
            approval_timeout: DEFAULT_APPROVAL_TIMEOUT,
            no_approvals: false,
            audit_log: None,
            allow_other: false,
            allow_uids: Vec::new(),
            record: None,
            control: None,
            stage_dir: None,
            max_checkpoints: None,
            refusal_log: None,
            refusal_log_root: None,
            run_task: false,
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
    /// The mount's device (`major:minor`), read when it was made: how it
    /// is found to be unmounted wherever its mountpoint is by then.
    device: Option<String>,
    broker: Approvals,
    audit: Option<Arc<Audit>>,
    core: Arc<Core>,
    fuse: fuse::Session,
    watcher: Option<Watcher>,
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
    let owner = Owner::current();
    let broker = Approvals::new(
        approval::Settings {
            mountpoint: mountpoint.to_path_buf(),
            timeout: approval_timeout(settings.approval_timeout),
            no_approvals: settings.no_approvals,
            owner_uid: owner.uid,
        },
        audit.clone(),
    );
    if settings.run_task {
        broker.side().accept_claims();
    }
    // Before the filesystem: its fd cache is sized from this limit.
    crate::backing::raise_nofile_limit();
    let stages = Stages::open(table, mountpoint, settings.stage_dir.as_deref())
        .map_err(|e| MountError::Stage(e.to_string()))?
        .map(|mut s| {
            s.max_checkpoints = settings
                .max_checkpoints
                .or(table.max_checkpoints.map(usize::from))
                .unwrap_or(crate::stage::service::MAX_CHECKPOINTS);
            Arc::new(s)
        });
    let fs = filesystem(
        table,
        mountpoint,
        settings,
        Arc::new(broker.clone()),
        owner,
        stages,
    )?;
    let core = fs.core().clone();
    let way = mount_way(settings, owner)?;
    crate::backing::clear_umask();
    let how = FuseMount {
        fsname: "zonemount",
        subtype: "zonemount",
        uid: owner.uid,
        gid: owner.gid,
        allow_other: settings.allow_other,
        read_only: core.kernel_opens().is_ok(),
    };
    let dev = match &way {
        Way::Direct => how
            .mount(mountpoint)
            .map_err(|e| mount_error(mountpoint, e.into()))?,
        Way::Fusermount(program) => how
            .mount_with(program, mountpoint)
            .map_err(|e| mount_error(mountpoint, e))?,
    };
    let watcher = watch(
        mountpoint,
        settings,
        match &way {
            Way::Direct => None,
            Way::Fusermount(p) => Some(p.clone()),
        },
    );
    let opts = fuse::Options {
        threads: threads(settings),
        uring: settings.io_uring,
        mountpoint: Some(mountpoint.to_path_buf()),
        busy_poll: settings.busy_poll,
    };
    let fuse = match fuse::Session::new(Device::from_fd(dev), Arc::new(fs), opts) {
        Ok(f) => f,
        Err(e) => {
            if let Some(made) = own_mount(None, mountpoint) {
                if let Err(u) = detach_or_lazily(&made) {
                    tracing::warn!("cannot take down the half-made mount: {u}");
                }
            }
            disarm(watcher.as_ref());
            return Err(MountError::Mount(show(mountpoint), e).into());
        }
    };
    // Staged zones tell the kernel to forget what a commit or discard
    // made stale; a refused create, the name it made.
    core.set_notifier(fuse.notifier());
    if core.kernel_opens().is_ok() {
        read_ahead(mountpoint);
    }
    // The handshake is done: the I/O mode is settled.
    tracing::info!(
        mountpoint = %mountpoint.display(),
        io = core.io_mode().describe_with(core.writeback()),
        transport = fuse.transport().name(),
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
        device: super::mountinfo::device_of(mountpoint),
        broker,
        audit,
        core,
        fuse,
        watcher,
    })
}

fn mount_error(mountpoint: &Path, e: io::Error) -> MountError {
    if e.kind() == io::ErrorKind::NotFound && !have_dev_fuse() {
        MountError::NoFuse
    } else {
        MountError::Mount(show(mountpoint), e)
    }
}

/// Start the watcher of this mount (`fusermount`: how a user unmounts).
/// A mount without one still works; only a crash would leave it behind.
fn watch(mountpoint: &Path, settings: &Settings, fusermount: Option<PathBuf>) -> Option<Watcher> {
    let plan = WatchPlan {
        mountpoint: Some(mountpoint.to_path_buf()),
        fusermount,
        record: settings.record.clone(),
        sockets: settings.control.iter().cloned().collect(),
        ..WatchPlan::default()
    };
    match Watcher::spawn(&plan) {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!(
                "cannot start the mount's watcher ({e}): if this daemon dies, unmount {} by hand",
                mountpoint.display()
            );
            None
        }
    }
}

/// Tell the watcher the mount ended cleanly.
fn disarm(watcher: Option<&Watcher>) {
    if let Some(w) = watcher {
        if let Err(e) = w.disarm() {
            tracing::warn!("cannot tell the watcher the mount is gone: {e}");
        }
    }
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
    mountpoint: &Path,
    settings: &Settings,
    broker: Arc<dyn Broker>,
    owner: Owner,
    stages: Option<Arc<Stages>>,
) -> Result<ZoneFs, MountError> {
    let mut admission = Admission::default();
    if settings.allow_other && !settings.allow_uids.is_empty() {
        let mut only: HashSet<u32> = settings.allow_uids.iter().copied().collect();
        only.insert(owner.uid);
        admission.only = Some(only);
    }
    let refusal_log = match &settings.refusal_log {
        None => None,
        Some(p) => {
            let root = settings.refusal_log_root.as_deref().unwrap_or(mountpoint);
            Some(Arc::new(RefusalLog::open(p, root).map_err(|e| {
                MountError::RefusalLog(format!("cannot open the refusal log {}: {e}", p.display()))
            })?))
        }
    };
    let opts = CoreOptions {
        kernel_opens: kernel_opens(table, settings, stages.is_some()),
        refusal_log,
        ttl: settings.ttl,
        ttl_ro: settings.ttl_ro(),
        passthrough: settings.passthrough,
        writeback_cache: settings.writeback_cache,
        owner_uid: owner.uid,
        owner_gid: owner.gid,
        admission,
    };
    let core = Core::with_stages(table, opts, broker, stages).map_err(|e| match e {
        OpenError::Stage { .. } => MountError::StageHost(e.to_string()),
        _ => MountError::Backing(e.to_string()),
    })?;
    Ok(ZoneFs::new(Arc::new(core)))
}

/// Whether the kernel may open files itself on this mount, which is then
/// mounted read-only (see `policy::direct::kernel_opens`), or why not.
/// Besides the zones: only the mounting user gets in (no
/// `--allow-other`). A file the kernel opens itself is checked against
/// its mode bits as the kernel last saw them, and its cached pages are
/// served to whoever opens it next; the daemon checks each caller
/// against the host file itself (ACLs, a mode the host just changed,
/// `--allow-uid`), which matters once several users share the mount. No
/// ledger and no refusal log: on a read-only mount the kernel refuses a
/// change with EROFS before the daemon hears of it, so the refusal could
/// be neither recorded nor told to the worker (`run` always keeps a
/// refusal log). A stage is never read-only.
fn kernel_opens(table: &ZoneTable, settings: &Settings, staged: bool) -> Result<(), String> {
    // Asked for only: the mount then answers EROFS at its root and
    // between its zones, where the errno table says EACCES and EXDEV.
    if !settings.kernel_opens {
        return Err("not asked for (--kernel-opens)".to_owned());
    }
    if settings.audit_log.is_some() {
        return Err("--audit-log: the daemon records each refused change".to_owned());
    }
    if settings.refusal_log.is_some() {
        return Err("--refusal-log: the daemon tells the worker of each refused change".to_owned());
    }
    if settings.allow_other {
        return Err(
            "--allow-other: the daemon checks each user's opens against the host file".to_owned(),
        );
    }
    if staged {
        return Err("a zone is staged".to_owned());
    }
    crate::policy::direct::kernel_opens(&table.zones)
}

/// Let the kernel read ahead up to one READ's worth (1 MiB, not its
/// default 128 KiB) on a mount whose file data all comes through the page
/// cache (`kernel_opens`): a cold sequential read then costs one READ
/// round trip per MiB, not eight (measured: 256 MiB cold, 2,048 READs →
/// 256, 0.36 s → 0.26 s pinned; the backing file read natively 0.17 s).
/// The mount's own readahead setting in sysfs, writable by root only;
/// best effort: without it reads are only slower.
fn read_ahead(mountpoint: &Path) {
    // Not a stat of the mountpoint: that would be a request to this
    // daemon, which may not serve yet.
    let Some(dev) = super::mountinfo::device_of(mountpoint) else {
        return;
    };
    let knob = format!("/sys/class/bdi/{dev}/read_ahead_kb");
    let kb = (crate::fs::adapter::MAX_WRITE / 1024).to_string();
    if let Err(e) = std::fs::write(&knob, kb) {
        tracing::debug!(knob, error = %e, "readahead left at the kernel's default");
    }
}

/// How the mount is made.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Way {
    /// mount(2) by this process (it holds CAP_SYS_ADMIN).
    Direct,
    /// Through the setuid `fusermount3` at this path.
    Fusermount(PathBuf),
}

/// How to mount (DESIGN §6: nosuid, nodev, kernel permission checks;
/// others only with `allow_other`), or why this user can't.
fn mount_way(settings: &Settings, owner: Owner) -> Result<Way, MountError> {
    if crate::backing::has_sys_admin() {
        return Ok(Way::Direct);
    }
    let Some(program) = probe::fusermount3() else {
        return Err(MountError::NoFusermount);
    };
    if settings.allow_other && owner.uid != 0 && !probe::fuse_conf_allows_other() {
        return Err(MountError::AllowOtherNotPermitted);
    }
    Ok(Way::Fusermount(program))
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

    /// How requests reach the daemon.
    pub fn transport(&self) -> Transport {
        self.fuse.transport()
    }

    /// How long a `/dev/fuse` thread polls for the next request after a
    /// reply (zero: never).
    pub fn busy_poll(&self) -> Duration {
        self.fuse.busy_poll()
    }

    /// Whether idle CPUs are kept polling while requests come close
    /// together, and why not (`fuse::IdlePoll`).
    pub fn idle_poll(&self) -> std::sync::Arc<crate::fuse::IdlePoll> {
        self.fuse.idle_poll()
    }

    /// What stops this mount from another thread (a signal handler).
    pub fn stopper(&self) -> Stopper {
        Stopper {
            broker: self.broker.clone(),
            mountpoint: self.mountpoint.clone(),
            device: self.device.clone(),
        }
    }

    /// Serve on this thread until the mount goes away; then deny whatever
    /// is pending and record the unmount.
    pub fn run(self) -> io::Result<()> {
        self.run_then(|| ())
    }

    /// [`Session::run`], then `tidy` (what the daemon removes: its record
    /// and socket), then tell the watcher all is clean.
    pub fn run_then(self, tidy: impl FnOnce()) -> io::Result<()> {
        let result = self.fuse.run();
        self.broker.shutdown("the mount is gone");
        log_unmount(self.audit.as_ref(), &self.core);
        tidy();
        Ended(self.watcher).clean();
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
                device: self.device,
            },
            audit: self.audit,
            watcher: Ended(self.watcher),
            core: self.core,
        })
    }
}

/// The mount's watcher, to be told once the mount has ended cleanly.
#[derive(Debug)]
struct Ended(Option<Watcher>);

impl Ended {
    /// The mount is gone and the session ended: the watcher may go too.
    /// A daemon that dies after this leaves nothing the watcher could
    /// clean (its record and socket go with [`Daemon::run`]).
    ///
    /// [`Daemon::run`]: super::daemon::Daemon::run
    fn clean(&mut self) {
        disarm(self.0.take().as_ref());
    }
}

/// The ledger's last records of a mount: each rw zone's change report,
/// then the unmount.
fn log_unmount(audit: Option<&Arc<Audit>>, core: &Arc<Core>) {
    if let Some(a) = audit {
        super::staging::service(core, None, Arc::default()).log_changes(a);
        a.log(Kind::Unmount, &audit::Record::default());
    }
}

/// Ends a mount from outside its serving threads.
#[derive(Debug, Clone)]
pub struct Stopper {
    broker: Approvals,
    mountpoint: PathBuf,
    device: Option<String>,
}

impl Stopper {
    /// First answer every waiting syscall (a pending one keeps the mount
    /// busy, and nobody may be left to decide it), then unmount, lazily if
    /// need be. The serving threads then end.
    pub fn stop(&self, reason: &str) -> Result<(), UnmountError> {
        self.broker.shutdown(reason);
        match own_mount(self.device.as_deref(), &self.mountpoint) {
            Some(m) => detach_or_lazily(&m),
            None => Ok(()),
        }
    }
}

/// This daemon's mount: the topmost of its `device` wherever it is now (a
/// directory above it may have been renamed), else the zonemount mount at
/// `mountpoint` when the device is not known. None once it is gone.
fn own_mount(device: Option<&str>, mountpoint: &Path) -> Option<super::mountinfo::MountEntry> {
    match device {
        Some(dev) => super::mountinfo::find_device(dev),
        None => super::mountinfo::find_mount(mountpoint).filter(|m| m.is_zonemount()),
    }
}

/// A mount served by background threads (see [`Session::spawn`]).
pub struct Background {
    fuse: Option<fuse::BackgroundSession>,
    stopper: Stopper,
    audit: Option<Arc<Audit>>,
    watcher: Ended,
    core: Arc<Core>,
}

impl Background {
    pub fn mountpoint(&self) -> &Path {
        &self.stopper.mountpoint
    }

    pub fn broker(&self) -> &Approvals {
        &self.stopper.broker
    }

    pub fn core(&self) -> &Arc<Core> {
        &self.core
    }

    pub fn audit(&self) -> Option<&Arc<Audit>> {
        self.audit.as_ref()
    }

    /// Deny what is pending, unmount, wait for the serving threads and
    /// record the unmount. Later calls do nothing.
    pub fn close(&mut self, reason: &str) -> io::Result<()> {
        let Some(fuse) = self.fuse.take() else {
            return Ok(());
        };
        self.stopper.stop(reason).map_err(io::Error::other)?;
        let joined = fuse.join();
        log_unmount(self.audit.as_ref(), &self.core);
        self.watcher.clean();
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

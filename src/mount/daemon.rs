//! What the `zonemount mount` daemon adds around a [`Session`]: its record
//! in the registry, its control socket answering with the mount's
//! [`Status`], and unmount on SIGTERM, SIGINT and SIGHUP. The readiness
//! line, the prompt and the arguments stay with the CLI.
//!
//! [`Control::bind`] runs before [`super::session::build`]: a control
//! socket that can't be made stops the mount before anything is mounted.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::registry::{self, Record};
use super::session::{Session, Stopper};
use crate::config::ZoneTable;
use crate::control::protocol::{
    CacheTtls, Degraded, IoStatus, IsolateRoute, RecentRefusalInfo, Status, ZoneStatus,
};
use crate::control::{self, BindError, StatusFn};

/// How long a new daemon waits for the control socket of one that is
/// ending to go (a mount made again at once after a plain `umount`).
const SOCKET_HANDOVER: Duration = Duration::from_secs(5);

/// The daemon's control socket, bound; the socket file goes when this is
/// dropped.
#[derive(Debug)]
pub struct Control {
    path: PathBuf,
    bound: control::Bound,
}

impl Control {
    /// Bind the socket at `path`, making its directory as the registry's
    /// when missing; the runtime directory is checked even when it exists
    /// (see [`registry::private_dir`]); see [`control::bind`].
    pub fn bind(path: &Path) -> Result<Control, BindError> {
        let runtime = registry::runtime_dir();
        if let Some(dir) = path.parent().filter(|d| !d.exists() || *d == runtime) {
            registry::private_dir(dir).map_err(|e| BindError::Io(path.to_path_buf(), e))?;
        }
        // A live daemon on it: the one a plain `umount` (or fusermount3
        // -u) of this mountpoint just ended, still on its way out (this
        // mount's checks found nothing mounted there). Give it a moment.
        let deadline = std::time::Instant::now() + SOCKET_HANDOVER;
        let bound = loop {
            match control::bind_pinned(path) {
                Err(BindError::InUse(_)) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                r => break r?,
            }
        };
        Ok(Control {
            path: path.to_path_buf(),
            bound,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        self.bound.remove();
    }
}

/// Where the mount came from, for its record: the files as given
/// (absolute), and the switch that changes what zones hide.
#[derive(Debug, Clone, Default)]
pub struct Origin {
    pub config: Option<PathBuf>,
    pub workers: Vec<PathBuf>,
    /// The `--zone` arguments, as given.
    pub zone_args: Vec<String>,
    pub allow_sensitive_roots: bool,
    /// A mount made by `run --isolate`: the zones it bound straight from
    /// their backing dirs (the others reach the worker through this mount).
    pub isolate_direct: Option<Vec<String>>,
}

/// Why the daemon could not start serving.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("cannot start the control runtime: {0}")]
    Runtime(io::Error),
    #[error("control socket: {0}")]
    Control(io::Error),
    #[error("cannot install signal handlers: {0}")]
    Signals(io::Error),
}

/// A mounted session with its record written, its control socket served
/// and its signals handled; [`Daemon::run`] serves the filesystem.
pub struct Daemon {
    session: Session,
    control: Control,
    runtime: tokio::runtime::Runtime,
}

impl Daemon {
    /// Write the record, serve the control socket, handle signals.
    pub fn start(
        session: Session,
        table: &ZoneTable,
        control: Control,
        origin: Origin,
    ) -> Result<Daemon, DaemonError> {
        let isolate_direct = origin.isolate_direct.clone();
        let record = Record {
            mountpoint: session.mountpoint().to_path_buf(),
            pid: std::process::id(),
            config: origin.config,
            workers: origin.workers,
            zone_args: origin.zone_args,
            started: registry::now_secs(),
            zones: table.zones.iter().map(|z| z.name.clone()).collect(),
            control: Some(control.path().to_path_buf()),
            cwd: std::env::current_dir().ok(),
            allow_sensitive_roots: origin.allow_sensitive_roots,
            mntns: registry::mount_namespace(),
        };
        if let Err(e) = registry::write_record(&record) {
            tracing::warn!("cannot write the mount record: {e}");
        }
        let started = serve_control(&session, table, &record, &control, isolate_direct)
            .and_then(|runtime| unmount_on_signals(session.stopper()).map(|()| runtime));
        match started {
            Ok(runtime) => Ok(Daemon {
                session,
                control,
                runtime,
            }),
            Err(e) => {
                registry::remove_record(&record.mountpoint);
                Err(e)
            }
        }
    }

    pub fn broker(&self) -> &crate::approval::Approvals {
        self.session.broker()
    }

    /// Serve until the mount goes away, then remove the record and the
    /// socket. Runs in `/`, so the daemon keeps no directory busy.
    pub fn run(self) -> io::Result<()> {
        let _ = std::env::set_current_dir("/");
        let mountpoint = self.session.mountpoint().to_path_buf();
        let control = self.control;
        let result = self.session.run_then(|| {
            registry::remove_record(&mountpoint);
            drop(control);
        });
        self.runtime.shutdown_timeout(Duration::from_secs(1));
        result
    }
}

/// Serve the control socket on a runtime of its own (one thread).
fn serve_control(
    session: &Session,
    table: &ZoneTable,
    record: &Record,
    control: &Control,
    isolate_direct: Option<Vec<String>>,
) -> Result<tokio::runtime::Runtime, DaemonError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("zm-control")
        .enable_all()
        .build()
        .map_err(DaemonError::Runtime)?;
    let owner_uid = rustix::process::geteuid().as_raw();
    let server = control::Server::with_stage(
        session.broker().clone(),
        owner_uid,
        status_fn(
            session,
            table,
            record,
            control.path(),
            owner_uid,
            isolate_direct,
        ),
        Some(super::staging::stage_fn(super::staging::service(
            session.core(),
            session.audit().cloned(),
            session.broker().side().clone(),
        ))),
    );
    let listener = control
        .bound
        .listener
        .try_clone()
        .map_err(DaemonError::Control)?;
    runtime.spawn(control::serve(listener, server));
    Ok(runtime)
}

/// The mount's status, read afresh on each call: the fixed facts, the
/// broker's pending requests and counters, and what the filesystem core
/// knows (how file data moves, the cache TTLs, the last refusals).
fn status_fn(
    session: &Session,
    table: &ZoneTable,
    record: &Record,
    control: &Path,
    owner_uid: u32,
    isolate_direct: Option<Vec<String>>,
) -> StatusFn {
    let broker = session.broker().clone();
    let core = session.core().clone();
    let busy_poll = session.busy_poll();
    let idle_poll = session.idle_poll();
    let fixed = Status {
        mountpoint: record.mountpoint.clone(),
        pid: record.pid,
        started: record.started,
        config: record.config.clone(),
        workers: record.workers.clone(),
        zone_args: record.zone_args.clone(),
        control: control.to_path_buf(),
        audit_log: session.audit().map(|a| a.path().to_path_buf()),
        approval_timeout_secs: broker.settings().timeout.as_secs(),
        no_approvals: broker.settings().no_approvals,
        owner_uid,
        sandbox_mode: table.mode,
        zones: table
            .zones
            .iter()
            .map(|z| {
                let mut s = ZoneStatus::from(z);
                s.isolate = isolate_direct
                    .as_ref()
                    .map(|d| IsolateRoute::of(&z.policy, d.contains(&z.name)));
                s
            })
            .collect(),
        pending: Vec::new(),
        counters: Default::default(),
        io: None,
        cache_ttl_secs: None,
        fuse_requests: None,
        recent_refusals: Vec::new(),
        degraded: None,
        stage_dir: core.stages().map(|s| s.dir.clone()),
        worker_boundary: None,
    };
    Box::new(move || {
        let io = core.io_mode();
        // Why polling is off now; only a `/dev/fuse` transport polls.
        let polls =
            !busy_poll.is_zero() && core.transport() == Some(crate::fuse::Transport::Device);
        let poll_off = polls.then(crate::fuse::busy_poll_held_back).flatten();
        // Idle polling serves both transports; held back as busy polling
        // would be.
        let idle_off = idle_poll.off().or_else(crate::fuse::busy_poll_held_back);
        let (rw, ro) = core.ttls();
        Status {
            pending: broker.pending(),
            counters: broker
                .counters()
                .snapshot()
                .into_iter()
                .map(|(name, n)| (name.to_string(), n))
                .collect(),
            io: Some(IoStatus {
                mode: io.name().to_string(),
                detail: match core.kernel_opens() {
                    Ok(()) => io.describe_with(core.writeback()),
                    Err(why) => format!(
                        "{}; every open and close a round trip to the daemon ({why})",
                        io.describe_with(core.writeback())
                    ),
                },
                transport: core.transport().map(|t| t.name().to_string()),
                transport_detail: core.transport().map(|t| {
                    let t = t.describe();
                    let mut d = match busy_poll.as_micros() {
                        0 => t.to_string(),
                        us => {
                            let mut d = format!(
                                "{t}; a thread polls up to {us} µs for the next request after a reply"
                            );
                            if let Some(why) = &poll_off {
                                d.push_str(&format!(" (now {why})"));
                            }
                            d
                        }
                    };
                    match &idle_off {
                        None => d.push_str(&format!(
                            "; idle CPUs poll while requests come close together (now {})",
                            if idle_poll.held() { "held" } else { "not held" }
                        )),
                        Some(why) => d.push_str(&format!("; idle CPUs halt ({why})")),
                    }
                    d
                }),
                busy_poll_us: Some(busy_poll.as_micros() as u64),
                busy_poll_off: poll_off.clone(),
                idle_poll_held: Some(idle_poll.held()),
                idle_poll_off: idle_off.clone(),
            }),
            cache_ttl_secs: Some(CacheTtls {
                rw: rw.as_secs_f64(),
                ro: ro.as_secs_f64(),
            }),
            fuse_requests: Some(
                core.requests()
                    .snapshot()
                    .into_iter()
                    .map(|(op, n)| (op.to_string(), n))
                    .collect(),
            ),
            recent_refusals: core
                .recent_refusals()
                .into_iter()
                .map(|r| {
                    let (path, path_b64) = crate::text::path_for_json(&r.path);
                    RecentRefusalInfo {
                        time: humantime::format_rfc3339_seconds(r.at).to_string(),
                        path,
                        path_b64,
                        errno: r.errno.to_string(),
                        reason: r.reason,
                        message: r.message,
                    }
                })
                .collect(),
            degraded: Some(
                core.without()
                    .into_iter()
                    .map(|w| Degraded {
                        feature: w.feature.to_string(),
                        needs: w.needs.to_string(),
                        cost: w.cost.to_string(),
                    })
                    .collect(),
            ),
            worker_boundary: broker.side().boundary(),
            ..fixed.clone()
        }
    })
}

/// SIGTERM, SIGINT, SIGHUP: deny what is pending, then unmount (the
/// session then ends and [`Daemon::run`] returns).
fn unmount_on_signals(stopper: Stopper) -> Result<(), DaemonError> {
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ])
    .map_err(DaemonError::Signals)?;
    std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            tracing::info!(sig, "signal: unmounting");
            if let Err(e) = stopper.stop("the daemon got a signal and is unmounting") {
                tracing::error!("lazy unmount failed too: {e}");
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// A daemon still on its way out holds the control socket for a
    /// moment (a mount made again at once after a plain `umount`): the
    /// new one waits for it rather than failing; a socket that stays in
    /// use is still refused once the wait is over.
    #[test]
    fn a_socket_an_ending_daemon_holds_is_taken_once_it_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.sock");
        let old = control::bind(&path).unwrap();
        let t0 = std::time::Instant::now();
        let letting_go = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            drop(old);
        });
        let c = Control::bind(&path).expect("bound once the old one let go");
        assert!(t0.elapsed() >= Duration::from_millis(250), "it waited");
        letting_go.join().unwrap();
        drop(c);
        let _held = control::bind(&path).unwrap();
        let t0 = std::time::Instant::now();
        assert!(matches!(Control::bind(&path), Err(BindError::InUse(_))));
        assert!(t0.elapsed() >= SOCKET_HANDOVER);
    }
}

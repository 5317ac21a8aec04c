//! The Rust API for supervisors that embed the crate: mount in this
//! process, then receive each approval request on a channel and answer it.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use zonemount::approval::Scope;
//! use zonemount::mount::api;
//! let table = zonemount::config::load_project(
//!     Some(std::path::Path::new("project.yaml")),
//!     std::path::Path::new("."),
//!     &zonemount::config::LoadOptions::from_host(false),
//! )?;
//! let (mount, requests) = api::mount(&table, api::Options::new("/tmp/task-42"))?;
//! for req in requests.iter() {
//!     // Names and command lines are the worker's: shown escaped, never raw.
//!     println!("{} wants to {} {}", req.info().shown_cmdline(), req.info().class, req.info().shown_path());
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
//!
//! The mount is built by the same root as `zonemount mount`'s daemon
//! ([`session`](super::session)), with its defaults.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::MountError;
use super::session::{self, Background, SessionError, Settings};
use crate::approval::Approvals;
pub use crate::approval::channel::{Request, Requests, channel};
use crate::config::ZoneTable;
use crate::stage::service::{Caller, Reports, StageService};

/// How to mount.
#[derive(Debug, Clone)]
pub struct Options {
    pub mountpoint: PathBuf,
    /// How long a request may wait (default 300 s, as `zonemount mount`;
    /// capped below the kernel's FUSE request timeout where one is set).
    pub timeout: Duration,
    /// Append the audit ledger here.
    pub audit_log: Option<PathBuf>,
    /// How long the kernel may cache names and attributes of rw zones;
    /// ro zones get 6 times as long. Default 30 s, as `zonemount mount
    /// --cache-ttl` (it was 1 s before the API and the daemon shared
    /// their defaults): a change made on the host side shows through the
    /// mount after at most this long.
    pub ttl: Duration,
    /// Where staged zones keep their changes (default: per mountpoint in
    /// the state directory).
    pub stage_dir: Option<PathBuf>,
    /// Mount even on a directory that holds files (hidden, untouched,
    /// until the unmount); otherwise such a mountpoint is refused, as by
    /// `zonemount mount` without `--nonempty`.
    pub nonempty: bool,
}

impl Options {
    pub fn new(mountpoint: impl Into<PathBuf>) -> Options {
        let defaults = Settings::default();
        Options {
            mountpoint: mountpoint.into(),
            timeout: defaults.approval_timeout,
            audit_log: None,
            ttl: defaults.ttl,
            stage_dir: None,
            nonempty: false,
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

impl From<SessionError> for ApiError {
    fn from(e: SessionError) -> Self {
        match e {
            SessionError::Mount(e) => ApiError::Mount(e),
            SessionError::Audit(e) => ApiError::Audit(e),
        }
    }
}

/// A live mount served by background threads of this process.
pub struct Mount {
    session: Background,
}

impl std::fmt::Debug for Mount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mount")
            .field("mountpoint", &self.mountpoint())
            .finish_non_exhaustive()
    }
}

impl Mount {
    pub fn mountpoint(&self) -> &Path {
        self.session.mountpoint()
    }

    /// The broker, e.g. to list what is pending.
    pub fn approvals(&self) -> &Approvals {
        self.session.broker()
    }

    /// Each rw zone's change report (`paths` as a worker sees them,
    /// `/zone/...`; empty: all), with diffs of staged text files when
    /// `diff`: the control socket's `changes` answer (`{"zones": [...]}`,
    /// a [`ChangesReport`](crate::stage::report::ChangesReport) as JSON).
    pub fn changes(&self, paths: &[String], diff: bool) -> Result<serde_json::Value, String> {
        json(self.service().changes(&worker_paths(paths), diff)?)
    }

    /// [`Self::changes`] with each staged zone's changes as one patch in
    /// git's extended diff format (`patch`; see `zonemount changes
    /// --patch`).
    pub fn patch(&self, paths: &[String]) -> Result<serde_json::Value, String> {
        json(self.service().patch(&worker_paths(paths))?)
    }

    /// Apply the staged changes under `paths` to the backing dirs (see
    /// `zonemount commit`): the socket's `commit` answer, each zone's
    /// `applied` and `conflicts`.
    pub fn commit(&self, paths: &[String], force: bool) -> Result<serde_json::Value, String> {
        json(
            self.service()
                .commit(&worker_paths(paths), force, supervisor())?,
        )
    }

    /// Drop the staged changes under `paths`.
    pub fn discard(&self, paths: &[String]) -> Result<serde_json::Value, String> {
        json(self.service().discard(&worker_paths(paths), supervisor())?)
    }

    fn service(&self) -> StageService {
        super::staging::service(
            self.session.core(),
            self.session.audit().cloned(),
            self.session.broker().side().clone(),
        )
    }

    /// Deny what is pending, unmount, and wait for the session to end.
    pub fn unmount(mut self) -> std::io::Result<()> {
        self.close()
    }

    fn close(&mut self) -> std::io::Result<()> {
        self.session.close("the mount is closing")
    }
}

fn worker_paths(paths: &[String]) -> Vec<PathBuf> {
    paths.iter().map(PathBuf::from).collect()
}

/// This process is the supervisor: no worker kin to refuse.
fn supervisor() -> Caller {
    Caller {
        uid: rustix::process::geteuid().as_raw(),
        pid: None,
    }
}

fn json(report: impl serde::Serialize) -> Result<serde_json::Value, String> {
    serde_json::to_value(report).map_err(|e| e.to_string())
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            tracing::warn!("unmounting {} failed: {e}", self.mountpoint().display());
        }
    }
}

/// Mount `table` at `opts.mountpoint`, served by threads of this process;
/// every `ask` arrives on the returned receiver.
pub fn mount(table: &ZoneTable, opts: Options) -> Result<(Mount, Requests), ApiError> {
    let mp = super::preflight(&opts.mountpoint, table, false)?;
    if !opts.nonempty {
        super::check_empty(&mp)?;
    }
    let settings = Settings {
        ttl: opts.ttl,
        approval_timeout: opts.timeout,
        audit_log: opts.audit_log,
        stage_dir: opts.stage_dir,
        ..Settings::default()
    };
    let built = session::build(table, &mp, &settings)?;
    let requests = channel(built.broker());
    let session = built.spawn().map_err(ApiError::Spawn)?;
    Ok((Mount { session }, requests))
}

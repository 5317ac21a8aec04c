//! Mounting, serving and unmounting one zonemount filesystem, and the
//! facts around a mount. Each file holds one job:
//! - `session`: the one composition root (core, broker, ledger, FUSE
//!   session) and a mount's defaults; every entry point goes through it.
//! - `api`: the Rust API for supervisors that embed the crate.
//! - `daemon`: what `zonemount mount` adds around a session: its registry
//!   record, its control socket and the status it answers, signals.
//! - `preflight`: the checks before mounting, and why a mount fails.
//! - `probe`: what this machine allows (FUSE device, fusermount3,
//!   privilege, passthrough, io_uring, file handles, the sandbox).
//! - `registry`: the JSON records of live mounts in the runtime directory.
//! - `mountinfo`: which paths are mounted (`/proc/self/mountinfo`).
//! - `unmount`: detaching a mount and waiting for its daemon.
//! - `staging`: the stage service (`stage::service`) composed for a mount,
//!   and the control socket's handler that hands it `changes`, `commit`
//!   and `discard`.
//! - `watch`: the process that cleans up after a dead daemon or `run`.

pub mod api;
pub mod daemon;
mod mountinfo;
mod preflight;
pub mod probe;
mod registry;
pub mod session;
pub mod staging;
mod unmount;
pub mod watch;

use std::path::Path;

/// Where what outlives a mount is kept (its stages).
pub use crate::stage::dir::state_dir;
pub use mountinfo::{Elsewhere, MountEntry, absolute, elsewhere, find_mount, mounts};
pub use preflight::{
    HOST_FORBIDS, MountError, check_empty, check_mountpoint, have_dev_fuse, host_allows, preflight,
};
pub use registry::{
    Record, check_runtime_dir, default_control_path, find_record, forget, mount_namespace,
    now_secs, private_dir, read_record, record_file, records, remove_record, runtime_dir,
    sweep_dead_sockets, write_record,
};
pub use unmount::{
    DAEMON_EXIT_WAIT, Exiting, UnmountError, Unmounted, detach, detach_or_lazily, lingers_because,
    process_alive, process_ended, still_ending, unmount, wait_ended,
};

/// The filesystem type mounts show in /proc/mounts.
pub const FSTYPE: &str = "fuse.zonemount";

fn show(p: &Path) -> String {
    p.display().to_string()
}

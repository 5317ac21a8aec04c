//! zonemount: a FUSE filesystem that presents *zones* (host directories with
//! ro/rw access and approval policies) as one mounted tree.
//!
//! The binary in `main.rs` is a thin shell over [`cli::run`]. The rooms:
//! - [`config`]: project and worker files, validation, derivation.
//! - [`policy`]: the pure decision "may this operation proceed here?".
//! - [`backing`]: fd-relative access to backing dirs.
//! - [`fs`]: the filesystem: a testable core, and the adapter that turns
//!   each FUSE request into one core call.
//! - [`fuse`]: the FUSE session layer: protocol, handshake, the
//!   `/dev/fuse` and io_uring transports, mounting.
//! - [`approval`]: the broker an `ask` decision is handed to, its
//!   approvers (prompt, hook, a channel for the Rust API) and their caches.
//! - [`actor`]: who made a change (the process read from `/proc`, cached),
//!   and each changed path's first and last change.
//! - [`audit`]: the JSON Lines ledger.
//! - [`control`]: the per-mount control socket: typed protocol, server,
//!   client.
//! - [`mount`]: the one composition root that builds every mount (and a
//!   mount's defaults), the Rust API, the daemon's record, socket and
//!   signals, the mount registry, mountinfo, unmounting, the watcher
//!   that cleans up after a dead daemon.
//! - [`error`]: the one place errors become errnos.
//! - [`cli`]: commands, daemonizing, readiness, exit codes, `run`, `list`.
//! - [`isolate`]: the worker boundary: the bubblewrap command line for
//!   `run --isolate`, and `run`'s PID namespace.
//! - [`stage`]: staged zones: the stage, its change report, commit and
//!   discard, the overlay and the mapped log.
//! - [`text`]: what a worker names, escaped for people, exact in JSON.
//!
//! # Unsafe
//!
//! `unsafe_code` is denied for the crate (`Cargo.toml`) and allowed only
//! on these leaves, the modules that hold the raw system calls of one
//! capability each; every `unsafe` in them has a `// SAFETY:` note,
//! and `docs/layout.md` ("Unsafe inventory") lists each one
//! (`tests/unsafe_inventory.rs` holds the code to this list and to that
//! table):
//! - `backing`: fd-relative access to backing dirs (kernel file handles,
//!   `fchmodat2`).
//! - `fuse::sys`: the FUSE transport (the device's ioctls, the io_uring
//!   ring's shared buffers).
//! - `fork`: a forked child (fork, `_exit`, the `InChild` proof), for the
//!   watcher and the overlay's user-namespace child; and marking the fds
//!   the process inherited close-on-exec (`close_range`).
//! - `mount::watch::sys`: the watcher's exec, `close_range`, signal
//!   dispositions and pre-exec announcement.
//! - `stage::sys::child`: the `unshare` of the child that mounts a
//!   stage's overlay in a user namespace.
//! - `stage::sys::maplog`: the stage's append log, written through a
//!   shared mapping.
//! - `isolate::pidns`: `run`'s PID namespace (`unshare`, `NS_GET_PARENT`).

pub mod actor;
pub mod approval;
pub mod audit;
#[allow(unsafe_code)]
pub mod backing;
pub mod cli;
pub mod config;
pub mod control;
pub mod error;
#[allow(unsafe_code)]
pub mod fork;
pub mod fs;
pub mod fuse;
pub mod isolate;
pub mod logfile;
pub mod mount;
pub mod policy;
pub mod stage;
pub mod text;
pub mod trust;

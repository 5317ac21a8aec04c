//! Harness for the integration tests: real mounts of the `zonemount` binary
//! in temporary directories, torn down on every path out of a test.
//!
//! A [`Setup`] builds a fixture (config file, worker files, backing files,
//! mountpoint) inside one `TempDir`; [`Setup::mount`] runs `zonemount mount`
//! and polls `/proc/mounts` (bounded) until the exact mountpoint is live. The
//! resulting [`TestMount`] owns the temp dir; its `Drop` runs `zonemount
//! unmount` and, if the mount is still listed, `umount -l` on that exact path
//! only — on panic too. Nothing else on the host is ever unmounted.
//!
//! Assumes Linux, `/dev/fuse`, and the usual coreutils. What a test needs
//! from the machine (root, `/dev/fuse`, a tool such as `setfattr`) goes
//! through [`require`]: without it the test skips with a visible
//! `ZONEMOUNT-SKIP:` line that `scripts/test.sh` counts, except under
//! `CI=true`, where it fails: a CI run that silently skipped every mount
//! would prove nothing.
//!
//! Commands run with `LC_ALL=C` so their error messages carry the C-locale
//! `strerror` text that [`assert_sh_errno`] looks for, and with stdout/stderr
//! sent to anonymous temp files rather than pipes: a daemon that detaches
//! while still holding an inherited pipe would otherwise hang the reader.
//!
//! One file per job. The files are private modules and everything public
//! in them is re-exported here, so a test needs only `mod common; use
//! common::*;` and sees the same names as before the split:
//!  - [`need`]: what a test needs from the machine, and [`require`];
//!  - [`run`](mod@run): running commands, bounded ([`Out`], [`try_run`], [`sh_at`]…);
//!  - [`mount`]: `/proc/mounts`, waiting, cleanup, [`TestMount`], [`Foreground`];
//!  - [`fixtures`]: [`Mode`], `both_modes!`, [`zones_yaml`], [`Setup`];
//!  - [`assertions`]: errno names and outcome assertions;
//!  - [`files`]: directory listings, existence, content hashes;
//!  - [`ns`]: scripts in a private mount namespace, fusermount3 hidden or not.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

mod assertions;
mod files;
mod fixtures;
mod mount;
mod need;
mod ns;
mod run;

// Each suite compiles the harness on its own and uses only part of it; a
// glob it draws nothing from would otherwise warn (`dead_code` above covers
// the items themselves, not their re-exports).
#[allow(unused_imports)]
pub use self::{assertions::*, files::*, fixtures::*, mount::*, need::*, ns::*, run::*};

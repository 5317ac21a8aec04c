//! Staging's system calls. Two leaves here are allowed `unsafe`
//! (`#[allow(unsafe_code)]` on their `mod` lines; the crate's unsafe
//! inventory is in `lib.rs` and `docs/layout.md`): `maplog` and `child`.
//!
//! - [`overlay`]: the detached overlayfs of a staged zone (root, or a
//!   user namespace made by a forked child).
//! - `child`: that forked child's raw calls (fork, `unshare`, `_exit`).
//! - `maplog`: an append-only file of lines, written through a shared
//!   mapping where the filesystem allows ([`AppendLog`]; a stage's
//!   fingerprints).

#[allow(unsafe_code)]
mod child;
#[allow(unsafe_code)]
mod maplog;
pub mod overlay;

pub use maplog::AppendLog;

#[cfg(test)]
mod tests;

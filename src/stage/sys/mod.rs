//! Staging's system calls: the leaf of `stage` allowed `unsafe`
//! (`#[allow(unsafe_code)]` on `mod sys` in `stage/mod.rs`; the crate's
//! unsafe inventory is in `lib.rs` and `docs/layout.md`).
//!
//! - [`overlay`]: the detached overlayfs of a staged zone (root, or a
//!   user namespace made by a forked child).
//! - `maplog`: an append-only file of lines, written through a shared
//!   mapping where the filesystem allows ([`AppendLog`]; a stage's
//!   fingerprints).

mod maplog;
pub mod overlay;

pub use maplog::AppendLog;

#[cfg(test)]
mod tests;

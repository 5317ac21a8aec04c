//! The filesystem: the kernel's requests answered from the zones.
//!
//! - `adapter`: the [`crate::fuse::Filesystem`] implementation: each
//!   decoded request becomes one core call; INIT's wishes.
//! - `core`: every operation, testable without the kernel; the one
//!   request path (resolve → decide → ask → act → answer).
//! - `inodes`: the node table (ids, lookup counts, where each node is).
//! - `reach`: how a node reaches its backing object with bounded fds.
//! - `handles`: open files and directories.
//! - `reply`: core results as the FUSE layer's replies (open flags, TTLs).
//! - `attr`: backing `stat` as FUSE attributes.

pub mod adapter;
mod attr;
pub mod changes;
pub mod core;
mod handles;
pub mod inodes;
mod reach;
pub mod refusal_log;
mod reply;
#[cfg(test)]
mod tests;

pub use adapter::ZoneFs;
pub use core::Admission;
pub use handles::DirItem;

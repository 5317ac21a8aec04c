//! The filesystem: the kernel's requests answered from the zones.
//!
//! - `adapter`: the `fuser::Filesystem` implementation — decode, call the
//!   core, encode the reply; nothing else.
//! - `core`: every operation, testable without the kernel; the one
//!   request path (resolve → decide → ask → act → answer).
//! - `inodes`: the node table (ids, lookup counts, where each node is).
//! - `reach`: how a node reaches its backing object with bounded fds.
//! - `handles`: open files and directories.
//! - `attr`: backing `stat` as FUSE attributes.

pub mod adapter;
mod attr;
pub mod core;
mod handles;
pub mod inodes;
mod reach;
#[cfg(test)]
mod tests;

pub use adapter::{Admission, ZoneFs};
pub use handles::DirItem;

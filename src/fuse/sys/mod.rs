//! The FUSE transport's system calls: the one leaf of `fuse` allowed
//! `unsafe` (`#[allow(unsafe_code)]` on `mod sys` in `fuse/mod.rs`; the
//! crate's unsafe inventory is in `lib.rs` and `docs/layout.md`).
//!
//! - `dev`: the FUSE device, `/dev/fuse`: reading requests, writing
//!   replies (or splicing them), its ioctls (a clone per serving thread,
//!   backing files for passthrough) ([`Device`]).
//! - `ring`: one FUSE-over-io_uring ring and its entries' buffers,
//!   shared with the kernel ([`Ring`]).
//! - `mount`: mount(2) of a FUSE device as `fuse.zonemount`, or through
//!   `fusermount3` for an unprivileged daemon ([`FuseMount`]).
//!
//! What uses them is outside: the handshake and the `/dev/fuse` threads
//! in `fuse::session`, a queue's bookkeeping (register, fetch, commit,
//! growth) in `fuse::queue`, the io_uring threads in `fuse::uring`.

mod dev;
mod mount;
mod ring;

pub use dev::Device;
pub use mount::FuseMount;
pub use ring::{Ring, io_uring_allowed, possible_cpus};

/// Result of a raw call: the errno on failure.
type Sys<T> = Result<T, rustix::io::Errno>;

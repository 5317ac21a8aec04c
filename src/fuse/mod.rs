//! The FUSE session layer, owned by the project: the kernel protocol
//! (`abi`), decoding requests (`request`), encoding replies (`reply`),
//! the handshake and the serving threads (`session`) over either
//! transport — `/dev/fuse` reads and writes, or FUSE over io_uring
//! (`uring`, one ring per CPU, Linux 6.14 and later with the fuse module's
//! `enable_uring` on; `queue`, one such ring's entries), and the
//! `/dev/fuse` threads' short polling for the next request (`busy_poll`,
//! held back under a cgroup CPU quota read by `cpu_quota`), and idle CPUs
//! kept polling while requests come close together (`idle_poll`).
//!
//! It knows nothing of zones or policy: a [`Filesystem`] gets each decoded
//! request with its [`Reply`]. The system calls it needs (the device and
//! its ioctls, the ring's shared buffers, mounting) are its leaf `sys`,
//! the only part of `fuse` allowed `unsafe`.

pub mod abi;
mod busy_poll;
mod channel;
mod cpu_quota;
mod dispatch;
mod handshake;
mod idle_poll;
mod queue;
mod reply;
mod request;
mod session;
#[allow(unsafe_code)]
pub mod sys;
mod types;
mod uring;

pub use busy_poll::{
    DEFAULT_WINDOW as BUSY_POLL_DEFAULT, MAX_WINDOW as BUSY_POLL_MAX,
    held_back_now as busy_poll_held_back,
};
pub use dispatch::{Agreed, Filesystem, Offer, OpCounts, Wants};
pub use idle_poll::{DEVICE as IDLE_POLL_DEVICE, IdlePoll};
pub use reply::{BackingId, DirBuf, Reply, Sink};
pub use request::{Op, Request};
pub use session::{BackgroundSession, Notifier, Options, Session, Transport};
pub use types::{FileAttr, FileType, INodeNo, TimeOrNow};
pub use uring::{QUEUE_MAX, QUEUE_SPARE, QUEUE_START};

#[cfg(test)]
mod tests;

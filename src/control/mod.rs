//! The control socket: a Unix socket per mount over which the mounting user
//! (and root) list and decide approval requests and read the mount's
//! status.
//! - `protocol`: the messages as types (v1, JSON Lines), shared by both
//!   ends; the protocol is described there.
//! - `server`: binding the socket and serving it on tokio in the daemon.
//! - `client`: the blocking client the CLI uses.

mod client;
pub mod protocol;
mod server;
#[cfg(test)]
mod wire_table;

pub use client::{Client, ClientError};
pub use protocol::{Status, VERSION, event_json};
pub use server::{
    BindError, Bound, Peer, Server, StageFn, StatusFn, bind, bind_pinned, handle, remove_socket,
    serve,
};

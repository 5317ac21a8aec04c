//! The control socket's client: plain blocking std, one call at a time
//! (the CLI's way), typed by [`super::protocol`].

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream as StdStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::protocol::{Denied, Done, Listed, Request, Status, StatusAnswer, VERSION};
use crate::approval::{Decision, RequestInfo};

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot connect to the control socket {0}: {1}")]
    Connect(PathBuf, io::Error),
    #[error("the control socket {0} broke off: {1}")]
    Io(PathBuf, io::Error),
    #[error("the daemon sent something that is not protocol v1: {0}")]
    Protocol(String),
    /// The daemon answered `ok: false`.
    #[error("{0}")]
    Refused(String),
}

/// A connection to one daemon.
pub struct Client {
    path: PathBuf,
    reader: BufReader<StdStream>,
    writer: StdStream,
}

impl Client {
    pub fn connect(path: &Path) -> Result<Client, ClientError> {
        let s = StdStream::connect(path).map_err(|e| ClientError::Connect(path.into(), e))?;
        let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
        let writer = s
            .try_clone()
            .map_err(|e| ClientError::Connect(path.into(), e))?;
        Ok(Client {
            path: path.into(),
            reader: BufReader::new(s),
            writer,
        })
    }

    /// Send one request and read its answer; `ok: false` is an error.
    pub fn call(&mut self, req: Request) -> Result<Value, ClientError> {
        let mut line = serde_json::to_vec(&req.to_value())
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        line.push(b'\n');
        // A refused peer may find the connection closed before it writes:
        // the daemon's one-line answer is still there to read.
        let sent = self.writer.write_all(&line);
        let answer = self.next_line();
        let v = match (sent, answer) {
            (_, Ok(Some(v))) => v,
            (Err(e), _) => return Err(ClientError::Io(self.path.clone(), e)),
            (Ok(()), Err(e)) => return Err(e),
            (Ok(()), Ok(None)) => {
                return Err(ClientError::Protocol(
                    "the daemon closed the connection".into(),
                ));
            }
        };
        if v["ok"] == true {
            Ok(v)
        } else {
            Err(ClientError::Refused(
                v["error"].as_str().unwrap_or("refused").to_string(),
            ))
        }
    }

    /// [`Client::call`], its answer read as `T`.
    fn call_as<T: DeserializeOwned>(&mut self, req: Request) -> Result<T, ClientError> {
        let v = self.call(req)?;
        serde_json::from_value(v).map_err(|e| ClientError::Protocol(e.to_string()))
    }

    /// The requests waiting now.
    pub fn list(&mut self) -> Result<Vec<RequestInfo>, ClientError> {
        self.call_as::<Listed>(Request::List).map(|l| l.requests)
    }

    pub fn status(&mut self) -> Result<Status, ClientError> {
        self.call_as::<StatusAnswer>(Request::Status)
            .map(|a| a.status)
    }

    pub fn decide(&mut self, id: u64, decision: Decision) -> Result<(), ClientError> {
        self.call_as::<Done>(Request::Decide { id, decision })
            .map(|_| ())
    }

    /// Deny everything pending; how many were.
    pub fn deny_pending(&mut self) -> Result<u64, ClientError> {
        self.call_as::<Denied>(Request::DenyPending)
            .map(|d| d.denied)
    }

    /// A `changes`, `commit` or `discard` ([`Request::Changes`], ...):
    /// the answer as its type (`stage::report`). A commit copies files and may take a while:
    /// no read timeout.
    pub fn stage<T: DeserializeOwned>(&mut self, req: Request) -> Result<T, ClientError> {
        let _ = self.reader.get_ref().set_read_timeout(None);
        self.call_as(req)
    }

    /// The next line from the daemon; None at end of stream.
    pub fn next_line(&mut self) -> Result<Option<Value>, ClientError> {
        let mut line = String::new();
        let n = self
            .reader
            .read_line(&mut line)
            .map_err(|e| ClientError::Io(self.path.clone(), e))?;
        if n == 0 {
            return Ok(None);
        }
        let v: Value =
            serde_json::from_str(&line).map_err(|e| ClientError::Protocol(e.to_string()))?;
        if v["v"].as_u64() != Some(VERSION) {
            return Err(ClientError::Protocol(line.trim().to_string()));
        }
        Ok(Some(v))
    }

    /// Start watching: after this, read events with [`Client::next_line`]
    /// (each a [`super::protocol::WatchEvent`]).
    pub fn watch(&mut self) -> Result<(), ClientError> {
        let _ = self.reader.get_ref().set_read_timeout(None);
        self.call(Request::Watch).map(|_| ())
    }
}

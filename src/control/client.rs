//! The control socket's client: plain blocking std, one call at a time
//! (the CLI's way), typed by [`super::protocol`].

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream as StdStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
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

/// What the client reads of every line from the daemon before handing
/// it on: the protocol version.
#[derive(Deserialize)]
struct Head {
    v: u64,
}

/// What the client reads of an answer besides its body: whether it
/// succeeded (only `true` counts), and if not, why.
#[derive(Deserialize)]
struct Outcome {
    #[serde(default)]
    ok: bool,
    #[serde(default)]
    error: Option<String>,
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

    /// Wait at most `d` for each answer (30 s by default): for a scan of
    /// every mount, where one stopped daemon must not hold up the rest.
    pub fn answer_within(self, d: Duration) -> Client {
        let _ = self.reader.get_ref().set_read_timeout(Some(d));
        let _ = self.writer.set_write_timeout(Some(d));
        self
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
        match Outcome::deserialize(&v) {
            Ok(Outcome { ok: true, .. }) => Ok(v),
            Ok(Outcome { error, .. }) => Err(ClientError::Refused(
                error.unwrap_or_else(|| "refused".to_string()),
            )),
            Err(e) => Err(ClientError::Protocol(e.to_string())),
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
        // An object only (serde would read a struct from an array too).
        let head = match v {
            Value::Object(_) => Head::deserialize(&v).ok(),
            _ => None,
        };
        if head.map(|h| h.v) != Some(VERSION) {
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use std::os::unix::net::UnixListener;

    use super::*;

    /// What [`Client::deny_pending`] makes of `answer`, sent by a daemon
    /// that reads one request line and answers with it.
    fn deny_pending_answered(answer: &str) -> Result<u64, ClientError> {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("control.sock");
        let listener = UnixListener::bind(&sock).unwrap();
        let answer = format!("{answer}\n");
        let daemon = std::thread::spawn(move || {
            let (s, _) = listener.accept().unwrap();
            let mut request = String::new();
            BufReader::new(&s).read_line(&mut request).unwrap();
            (&s).write_all(answer.as_bytes()).unwrap();
            request
        });
        let got = Client::connect(&sock).unwrap().deny_pending();
        let request = daemon.join().unwrap();
        assert_eq!(request, "{\"op\":\"deny_pending\",\"v\":1}\n");
        got
    }

    fn refusal(answer: &str) -> String {
        match deny_pending_answered(answer) {
            Err(ClientError::Refused(why)) => why,
            other => panic!("{answer}: {other:?}"),
        }
    }

    fn protocol_error(answer: &str) -> String {
        match deny_pending_answered(answer) {
            Err(e @ ClientError::Protocol(_)) => e.to_string(),
            other => panic!("{answer}: {other:?}"),
        }
    }

    #[test]
    fn an_answer_is_read_by_its_type() {
        assert_eq!(
            deny_pending_answered(r#"{"denied":2,"ok":true,"v":1}"#).unwrap(),
            2
        );
    }

    #[test]
    fn a_refusal_keeps_the_daemons_words() {
        assert_eq!(
            refusal(r#"{"error":"no pending request 9","ok":false,"v":1}"#),
            "no pending request 9"
        );
        // Without a reason, or without `ok` at all: refused all the same.
        assert_eq!(refusal(r#"{"ok":false,"v":1}"#), "refused");
        assert_eq!(refusal(r#"{"error":null,"ok":false,"v":1}"#), "refused");
        assert_eq!(refusal(r#"{"denied":2,"v":1}"#), "refused");
    }

    #[test]
    fn a_line_of_another_version_is_a_protocol_error() {
        for line in [r#"{"ok":true,"v":2}"#, r#"{"ok":true}"#, "[1]", "1"] {
            assert_eq!(
                protocol_error(line),
                format!("the daemon sent something that is not protocol v1: {line}")
            );
        }
        // A refusal's reason that is no text is no protocol answer.
        assert!(protocol_error(r#"{"error":7,"ok":false,"v":1}"#).contains("invalid type"));
    }
}

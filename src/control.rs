//! The control socket: a Unix socket per mount over which the mounting user
//! (and root) list and decide approval requests and read the mount's
//! status. The server runs on tokio inside the daemon; the client is plain
//! blocking std (the CLI makes one call at a time).
//!
//! Protocol v1, JSON Lines: each request is one object with `"v": 1` and an
//! `op`; each answer is one object with `"v": 1` and `"ok"`.
//! - `{"v":1,"op":"list"}` → `{"v":1,"ok":true,"requests":[REQUEST...]}`
//! - `{"v":1,"op":"decide","id":7,"decision":"allow","scope":"path"}` (scope
//!   `once` by default; `"decision":"deny"` takes no scope) →
//!   `{"v":1,"ok":true}`, or `{"v":1,"ok":false,"error":"no pending request 7: ..."}`
//! - `{"v":1,"op":"status"}` → `{"v":1,"ok":true,"status":{...}}`
//! - `{"v":1,"op":"watch"}` → `{"v":1,"ok":true}`, then one line per event
//!   for as long as the connection stays open: every request already
//!   pending and each new one as `{"v":1,"event":"request","request":REQUEST}`,
//!   and each end as `{"v":1,"event":"resolved","id":7,"outcome":"allow",...}`.
//! - `{"v":1,"op":"deny_pending"}` → `{"v":1,"ok":true,"denied":N}` (what
//!   `zonemount unmount` sends first, so no waiting syscall keeps the mount
//!   busy).
//!
//! A peer whose uid (SO_PEERCRED) is neither the mount's owner nor root
//! gets one `{"ok":false,...}` line and the connection is closed.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::UnixStream as StdStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader as AsyncBufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::broadcast;

use crate::approval::{Approvals, Decision, Event, Listener, Scope};

/// Protocol version.
pub const VERSION: u64 = 1;

// ---- server ----------------------------------------------------------------

/// Why the socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("control socket {0} is in use by a live daemon: choose another --control path")]
    InUse(PathBuf),
    #[error("cannot create the control socket {0}: {1}")]
    Io(PathBuf, io::Error),
}

/// Bind `path` (mode 0600; a stale socket left by a dead daemon is
/// replaced). Call before any other thread runs: the umask is narrowed
/// around `bind` so the socket is never reachable by others.
pub fn bind(path: &Path) -> Result<std::os::unix::net::UnixListener, BindError> {
    let err = |e| BindError::Io(path.to_path_buf(), e);
    if let Some(dir) = path.parent() {
        if !dir.exists() {
            crate::mount::private_dir(dir).map_err(err)?;
        }
    }
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if !m.file_type().is_socket() {
            return Err(err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "a file that is not a socket is in the way",
            )));
        }
        if StdStream::connect(path).is_ok() {
            return Err(BindError::InUse(path.to_path_buf()));
        }
        std::fs::remove_file(path).map_err(err)?;
    }
    let old = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o177));
    let bound = std::os::unix::net::UnixListener::bind(path);
    rustix::process::umask(old);
    let l = bound.map_err(err)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(err)?;
    l.set_nonblocking(true).map_err(err)?;
    Ok(l)
}

/// What the server needs.
pub struct Server {
    approvals: Approvals,
    owner_uid: u32,
    /// The fixed part of `status` (zones, paths, settings).
    status: Value,
    /// The parts of `status` that change (from the filesystem core: the
    /// last refusals explained, the file data mode): an object whose
    /// entries are added to each answer.
    live: Option<Box<dyn Fn() -> Value + Send + Sync>>,
    events: broadcast::Sender<Event>,
}

struct Bridge(broadcast::Sender<Event>);

impl Listener for Bridge {
    fn event(&self, ev: &Event) {
        // No watcher connected is fine.
        let _ = self.0.send(ev.clone());
    }
}

impl Server {
    pub fn new(
        approvals: Approvals,
        owner_uid: u32,
        status: Value,
        live: Option<Box<dyn Fn() -> Value + Send + Sync>>,
    ) -> Arc<Server> {
        let (tx, _) = broadcast::channel(1024);
        approvals.subscribe(Arc::new(Bridge(tx.clone())));
        Arc::new(Server {
            approvals,
            owner_uid,
            status,
            live,
            events: tx,
        })
    }

    /// Whether a peer with `uid` may list and decide.
    pub fn admits(&self, uid: u32) -> bool {
        uid == self.owner_uid || uid == 0
    }

    fn status(&self) -> Value {
        let mut s = self.status.clone();
        if let Value::Object(m) = &mut s {
            m.insert("pending".into(), json!(self.approvals.pending()));
            m.insert(
                "counters".into(),
                json!(self.approvals.counters().snapshot()),
            );
            if let Some(Value::Object(live)) = self.live.as_ref().map(|f| f()) {
                m.extend(live);
            }
        }
        s
    }
}

/// Serve connections until the runtime is shut down.
pub async fn serve(listener: std::os::unix::net::UnixListener, srv: Arc<Server>) {
    let listener = match UnixListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("control socket: {e}");
            return;
        }
    };
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let srv = srv.clone();
                tokio::spawn(async move {
                    if let Err(e) = connection(stream, srv).await {
                        tracing::debug!("control connection ended: {e}");
                    }
                });
            }
            Err(e) => {
                tracing::warn!("control socket accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

fn fail(msg: impl Into<String>) -> Value {
    json!({"v": VERSION, "ok": false, "error": msg.into()})
}

async fn send(w: &mut tokio::net::unix::OwnedWriteHalf, v: &Value) -> io::Result<()> {
    let mut line = serde_json::to_vec(v).map_err(io::Error::other)?;
    line.push(b'\n');
    w.write_all(&line).await
}

async fn connection(stream: UnixStream, srv: Arc<Server>) -> io::Result<()> {
    let uid = stream.peer_cred()?.uid();
    let (r, mut w) = stream.into_split();
    if !srv.admits(uid) {
        tracing::warn!(uid, "control socket: refused a peer");
        let msg = format!(
            "permission denied: uid {uid} may not use this mount's control socket (only uid {} and root may)",
            srv.owner_uid
        );
        return send(&mut w, &fail(msg)).await;
    }
    let mut lines = AsyncBufReader::new(r).lines();
    while let Some(line) = lines.next_line().await? {
        if line.trim().is_empty() {
            continue;
        }
        let req: Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => {
                send(&mut w, &fail(format!("not a JSON object: {e}"))).await?;
                continue;
            }
        };
        if req["v"].as_u64() != Some(VERSION) {
            send(
                &mut w,
                &fail(format!(
                    "unsupported protocol version {}: this daemon speaks v{VERSION}",
                    req["v"]
                )),
            )
            .await?;
            continue;
        }
        if req["op"] == "watch" {
            return watch(&srv, &mut lines, &mut w).await;
        }
        let answer = handle(&srv, &req, uid);
        send(&mut w, &answer).await?;
    }
    Ok(())
}

/// Answer one non-streaming request.
pub fn handle(srv: &Server, req: &Value, uid: u32) -> Value {
    match req["op"].as_str().unwrap_or("") {
        "list" => json!({"v": VERSION, "ok": true, "requests": srv.approvals.pending()}),
        "status" => json!({"v": VERSION, "ok": true, "status": srv.status()}),
        "deny_pending" => {
            let n = srv.approvals.deny_pending("the mount is being unmounted");
            json!({"v": VERSION, "ok": true, "denied": n})
        }
        "decide" => {
            let Some(id) = req["id"].as_u64() else {
                return fail("decide needs a numeric \"id\"");
            };
            let decision = match (req["decision"].as_str(), req["scope"].as_str()) {
                (Some("deny"), None) => Decision::Deny,
                (Some("deny"), Some(_)) => return fail("a deny takes no scope"),
                (Some("allow"), s) => match s.unwrap_or("once").parse::<Scope>() {
                    Ok(scope) => Decision::Allow(scope),
                    Err(e) => return fail(e),
                },
                _ => return fail("decide needs \"decision\": \"allow\" or \"deny\""),
            };
            match srv.approvals.decide(id, decision, uid) {
                Ok(()) => json!({"v": VERSION, "ok": true}),
                Err(e) => fail(e.to_string()),
            }
        }
        other => fail(format!(
            "unknown op '{other}': use list, watch, decide, status or deny_pending"
        )),
    }
}

/// The JSON line for an event.
pub fn event_json(ev: &Event) -> Value {
    match ev {
        Event::Requested(info) => json!({"v": VERSION, "event": "request", "request": info}),
        Event::Resolved { id, resolution } => {
            let mut v = json!({"v": VERSION, "event": "resolved", "id": id});
            if let (Value::Object(m), Ok(Value::Object(r))) =
                (&mut v, serde_json::to_value(resolution))
            {
                m.extend(r);
            }
            v
        }
    }
}

async fn watch(
    srv: &Server,
    lines: &mut tokio::io::Lines<AsyncBufReader<tokio::net::unix::OwnedReadHalf>>,
    w: &mut tokio::net::unix::OwnedWriteHalf,
) -> io::Result<()> {
    // Subscribe before the snapshot: an event in between shows twice
    // rather than never.
    let mut rx = srv.events.subscribe();
    send(w, &json!({"v": VERSION, "ok": true})).await?;
    for info in srv.approvals.pending() {
        send(w, &event_json(&Event::Requested(info))).await?;
    }
    loop {
        tokio::select! {
            ev = rx.recv() => match ev {
                Ok(ev) => send(w, &event_json(&ev)).await?,
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    send(w, &json!({"v": VERSION, "event": "lagged", "missed": n})).await?;
                }
                Err(broadcast::error::RecvError::Closed) => return Ok(()),
            },
            line = lines.next_line() => {
                // The client closed: watching ends. Anything it says is ignored.
                if line?.is_none() {
                    return Ok(());
                }
            }
        }
    }
}

// ---- client ----------------------------------------------------------------

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
    pub fn call(&mut self, req: Value) -> Result<Value, ClientError> {
        let mut line =
            serde_json::to_vec(&req).map_err(|e| ClientError::Protocol(e.to_string()))?;
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

    /// Start watching: after this, read events with [`Client::next_line`].
    pub fn watch(&mut self) -> Result<(), ClientError> {
        let _ = self.reader.get_ref().set_read_timeout(None);
        self.call(json!({"v": VERSION, "op": "watch"})).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approval::Settings;

    fn server() -> Arc<Server> {
        let a = Approvals::new(
            Settings {
                mountpoint: "/m".into(),
                timeout: Duration::from_secs(5),
                no_approvals: false,
            },
            None,
        );
        Server::new(a, 1000, json!({"mountpoint": "/m"}), None)
    }

    #[test]
    fn only_the_owner_and_root_are_admitted() {
        let s = server();
        assert!(s.admits(1000));
        assert!(s.admits(0));
        assert!(!s.admits(65534));
    }

    #[test]
    fn bad_requests_get_clear_errors() {
        let s = server();
        let e = handle(
            &s,
            &json!({"v":1,"op":"decide","id":99,"decision":"allow"}),
            0,
        );
        assert_eq!(e["ok"], false);
        assert!(
            e["error"]
                .as_str()
                .unwrap_or("")
                .contains("no pending request 99")
        );
        let e = handle(
            &s,
            &json!({"v":1,"op":"decide","id":1,"decision":"allow","scope":"galaxy"}),
            0,
        );
        assert!(e["error"].as_str().unwrap_or("").contains("unknown scope"));
        let e = handle(&s, &json!({"v":1,"op":"frobnicate"}), 0);
        assert!(e["error"].as_str().unwrap_or("").contains("unknown op"));
        let st = handle(&s, &json!({"v":1,"op":"status"}), 0);
        assert_eq!(st["status"]["mountpoint"], "/m");
        assert_eq!(st["status"]["pending"], json!([]));
        assert_eq!(st["status"]["counters"]["requests"], 0);
    }
}

//! The control socket's server: bound once per mount (mode 0600), served
//! on tokio inside the daemon. It admits the mount's owner and root
//! (SO_PEERCRED), answers list, decide, status and deny_pending, and
//! streams events to watchers. The messages are in [`super::protocol`].

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream as StdStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader as AsyncBufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::broadcast;

use super::protocol::{
    Denied, Done, Listed, Request, Status, StatusAnswer, WatchEvent, check_version, event_json,
    fail_answer as fail, ok_answer,
};
use crate::approval::{Approvals, Event, Listener};
use crate::stage::report::Answer;

/// Why the socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("control socket {0} is in use by a live daemon: choose another --control path")]
    InUse(PathBuf),
    #[error("cannot create the control socket {0}: {1}")]
    Io(PathBuf, io::Error),
}

/// Bind `path` (mode 0600; a stale socket left by a dead daemon is
/// replaced) in a directory that exists. The socket is bound in a private
/// directory (0700) made beside `path`, made 0600 there and renamed into
/// place, so it is never reachable by others, and nothing is done by
/// `path` after it exists: a directory others may write can't lead the
/// chmod to another file (a symlink swapped in), and no umask is changed
/// (other threads may be running).
pub fn bind(path: &Path) -> Result<std::os::unix::net::UnixListener, BindError> {
    bind_pinned(path).map(|b| b.listener)
}

/// A socket [`bind_pinned`] made: its listener, and where it is (its
/// directory held open, its name and inode) so that [`Bound::remove`]
/// finds it there whatever happens to the path meanwhile.
#[derive(Debug)]
pub struct Bound {
    pub listener: std::os::unix::net::UnixListener,
    dir: OwnedFd,
    name: std::ffi::OsString,
    ino: u64,
}

impl Bound {
    /// Remove the socket, only if the name in its directory is still it
    /// (a directory above it renamed, or swapped for a symlink, can't lead
    /// the removal elsewhere).
    pub fn remove(&self) {
        if let Ok(st) =
            rustix::fs::statat(&self.dir, &self.name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
        {
            if st.st_ino == self.ino
                && rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Socket
            {
                let _ = rustix::fs::unlinkat(&self.dir, &self.name, rustix::fs::AtFlags::empty());
            }
        }
    }
}

/// Remove the socket at `path`, and only a socket: its directory reached
/// with no symlink on the way (`RESOLVE_NO_SYMLINKS`), the entry itself
/// not followed. A directory above it renamed or swapped for a symlink by
/// whoever may write there can't lead the removal to another file; then
/// nothing is removed.
pub fn remove_socket(path: &Path) -> io::Result<()> {
    use rustix::fs::{AtFlags, FileType};
    let (dir, name) = crate::trust::parent_without_symlinks(path)?;
    let st = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Socket {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a socket"));
    }
    rustix::fs::unlinkat(&dir, name, AtFlags::empty())?;
    Ok(())
}

/// [`bind`], keeping where the socket is ([`Bound`]).
pub fn bind_pinned(path: &Path) -> Result<Bound, BindError> {
    use rustix::fs::{AtFlags, FileType, Mode, OFlags};
    let err = |e| BindError::Io(path.to_path_buf(), e);
    let Some(name) = path.file_name() else {
        return Err(err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the path names no file",
        )));
    };
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    // The directory as given (a `/var/run` on the way is the admin's):
    // what is found there, removed and bound, is through this one fd.
    let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let parent = rustix::fs::open(parent, dir_flags, Mode::empty()).map_err(|e| err(e.into()))?;
    match rustix::fs::statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) if FileType::from_raw_mode(st.st_mode) != FileType::Socket => {
            return Err(err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "a file that is not a socket is in the way",
            )));
        }
        Ok(_) => {
            if StdStream::connect(path).is_ok() {
                return Err(BindError::InUse(path.to_path_buf()));
            }
            rustix::fs::unlinkat(&parent, name, AtFlags::empty()).map_err(|e| err(e.into()))?;
        }
        Err(rustix::io::Errno::NOENT) => {}
        Err(e) => return Err(err(e.into())),
    }
    bind_in(parent, name).map_err(err)
}

/// [`bind`]'s socket `name` in `parent`, by way of a private directory.
fn bind_in(parent: OwnedFd, name: &std::ffi::OsStr) -> io::Result<Bound> {
    use rustix::fs::{AtFlags, Mode};
    let (private, private_fd) = private_dir(&parent)?;
    let bound = (|| {
        // No bindat: the socket is made through the private dir's fd.
        let at = format!("/proc/self/fd/{}/s", private_fd.as_raw_fd());
        let l = std::os::unix::net::UnixListener::bind(at)?;
        // Only we may write in the private dir: `s` is the socket.
        rustix::fs::chmodat(
            &private_fd,
            "s",
            Mode::from_raw_mode(0o600),
            AtFlags::empty(),
        )?;
        match rustix::fs::renameat_with(
            &private_fd,
            "s",
            &parent,
            name,
            rustix::fs::RenameFlags::NOREPLACE,
        ) {
            // A file system without RENAME_NOREPLACE.
            Err(rustix::io::Errno::INVAL) => {
                rustix::fs::renameat(&private_fd, "s", &parent, name)?;
            }
            Err(rustix::io::Errno::EXIST) => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    "a file appeared in the way while binding",
                ));
            }
            r => r?,
        }
        Ok(l)
    })();
    if bound.is_err() {
        let _ = rustix::fs::unlinkat(&private_fd, "s", AtFlags::empty());
    }
    let _ = rustix::fs::unlinkat(&parent, &private, AtFlags::REMOVEDIR);
    let l = bound?;
    l.set_nonblocking(true)?;
    let ino = rustix::fs::statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW)?.st_ino;
    Ok(Bound {
        listener: l,
        dir: parent,
        name: name.to_owned(),
        ino,
    })
}

/// A fresh directory of ours in `parent`, mode 0700: its name and an fd
/// of it (checked to be the one we made, not a symlink or another's).
fn private_dir(parent: &impl AsFd) -> io::Result<(String, OwnedFd)> {
    use rustix::fs::{Mode, OFlags};
    static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let me = rustix::process::geteuid().as_raw();
    for _ in 0..100 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!(".zonemount-bind.{}.{seq}.{nanos:08x}", std::process::id());
        match rustix::fs::mkdirat(parent, &*name, Mode::from_raw_mode(0o700)) {
            Ok(()) => {}
            Err(rustix::io::Errno::EXIST) => continue,
            Err(e) => return Err(e.into()),
        }
        let fd = rustix::fs::openat(
            parent,
            &*name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let st = rustix::fs::fstat(&fd)?;
        if st.st_uid != me || st.st_mode & 0o077 != 0 {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{name} was replaced while binding"),
            ));
        }
        return Ok((name, fd));
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        "no fresh private directory could be made beside it",
    ))
}

/// Makes the answer to `status`, afresh each time.
pub type StatusFn = Box<dyn Fn() -> Status + Send + Sync>;

/// Runs a `changes`, `commit` or `discard` for a peer: the typed answer
/// (serialized here, once), or the one-line error. May take a while.
pub type StageFn = Box<dyn Fn(&Request, Peer) -> Result<Answer, String> + Send + Sync>;

/// What the server needs.
pub struct Server {
    approvals: Approvals,
    owner_uid: u32,
    /// The daemon's status: its settings, the broker's pending requests
    /// and counters, what the filesystem core knows.
    status: StatusFn,
    events: broadcast::Sender<Event>,
    /// The staged zones' operations (None: no zone is staged).
    stage: Option<StageFn>,
}

struct Bridge(broadcast::Sender<Event>);

impl Listener for Bridge {
    fn event(&self, ev: &Event) {
        // No watcher connected is fine.
        let _ = self.0.send(ev.clone());
    }
}

impl Server {
    pub fn new(approvals: Approvals, owner_uid: u32, status: StatusFn) -> Arc<Server> {
        Server::with_stage(approvals, owner_uid, status, None)
    }

    /// [`Server::new`], answering `changes`, `commit` and `discard` with
    /// `stage`.
    pub fn with_stage(
        approvals: Approvals,
        owner_uid: u32,
        status: StatusFn,
        stage: Option<StageFn>,
    ) -> Arc<Server> {
        let (tx, _) = broadcast::channel(1024);
        approvals.subscribe(Arc::new(Bridge(tx.clone())));
        Arc::new(Server {
            approvals,
            owner_uid,
            status,
            events: tx,
            stage,
        })
    }

    /// Whether a peer with `uid` may list and decide.
    pub fn admits(&self, uid: u32) -> bool {
        uid == self.owner_uid || uid == 0
    }
}

/// The longest request line read: a request is a few paths at most. A
/// peer that sends more without a newline is answered so and cut off,
/// rather than the daemon holding what it sends.
pub const MAX_LINE: usize = 1 << 20;

/// Connections served at once. A new one past this closes the one that
/// has gone longest without a request (a watch counts from its start): the
/// daemon's fds are the mount's too (its cache of open backing files), a
/// peer holding thousands of idle connections had the supervisor's
/// commands wait 30 s and fail, and one holding all of a fixed number
/// would keep the supervisor out for good.
pub const MAX_CONNECTIONS: usize = 256;

/// The connections served now, each with when it last sent a request
/// and how to close it.
#[derive(Default)]
struct Slots {
    next: std::sync::atomic::AtomicU64,
    open: parking_lot::Mutex<std::collections::HashMap<u64, (Instant, Arc<tokio::sync::Notify>)>>,
}

/// One connection's place in [`Slots`]; given back when dropped.
struct Slot {
    id: u64,
    slots: Arc<Slots>,
    close: Arc<tokio::sync::Notify>,
}

impl Slots {
    /// A place for a new connection; when all are taken, the longest idle
    /// connection is told to close first.
    fn take(self: &Arc<Self>) -> Slot {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let close = Arc::new(tokio::sync::Notify::new());
        let mut open = self.open.lock();
        if open.len() >= MAX_CONNECTIONS {
            let oldest = open
                .iter()
                .min_by_key(|(_, (last, _))| *last)
                .map(|(id, _)| *id);
            if let Some((_, c)) = oldest.and_then(|o| open.remove(&o)) {
                tracing::warn!(
                    "control socket: {MAX_CONNECTIONS} connections open; closed the one idle longest"
                );
                c.notify_one();
            }
        }
        open.insert(id, (Instant::now(), close.clone()));
        Slot {
            id,
            slots: self.clone(),
            close,
        }
    }
}

impl Slot {
    /// A request came on this connection.
    fn touch(&self) {
        if let Some(s) = self.slots.open.lock().get_mut(&self.id) {
            s.0 = Instant::now();
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.open.lock().remove(&self.id);
    }
}

/// How long a connection may take over its first request, and over the
/// rest of a line once it has begun: a peer that connects and sends
/// nothing, or half a line, gives its slot back. Between requests a
/// client may wait as long as it likes (a supervisor's client keeps its
/// connection), and a watch only listens.
pub const IDLE: Duration = Duration::from_secs(60);

/// Serve connections until the runtime is shut down.
pub async fn serve(listener: std::os::unix::net::UnixListener, srv: Arc<Server>) {
    serve_idle(listener, srv, IDLE).await;
}

/// [`serve`], closing a connection that sends no request for `idle`.
async fn serve_idle(listener: std::os::unix::net::UnixListener, srv: Arc<Server>, idle: Duration) {
    let listener = match UnixListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("control socket: {e}");
            return;
        }
    };
    let slots = Arc::new(Slots::default());
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let srv = srv.clone();
                let slot = slots.take();
                tokio::spawn(async move {
                    tokio::select! {
                        r = connection(stream, srv, idle, &slot) => {
                            if let Err(e) = r {
                                tracing::debug!("control connection ended: {e}");
                            }
                        }
                        () = slot.close.notified() => {}
                    }
                    drop(slot);
                });
            }
            Err(e) => {
                tracing::warn!("control socket accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn send(w: &mut tokio::net::unix::OwnedWriteHalf, v: &Value) -> io::Result<()> {
    let mut line = serde_json::to_vec(v).map_err(io::Error::other)?;
    line.push(b'\n');
    w.write_all(&line).await
}

async fn connection(
    stream: UnixStream,
    srv: Arc<Server>,
    idle: Duration,
    slot: &Slot,
) -> io::Result<()> {
    let cred = stream.peer_cred()?;
    let uid = cred.uid();
    let peer = Peer {
        uid,
        pid: cred.pid().and_then(|p| u32::try_from(p).ok()),
    };
    let (r, mut w) = stream.into_split();
    if !srv.admits(uid) {
        tracing::warn!(uid, "control socket: refused a peer");
        let msg = format!(
            "permission denied: uid {uid} may not use this mount's control socket (only uid {owner}, the user who mounted it, and root may); run this as uid {owner} or as root",
            owner = srv.owner_uid
        );
        return send(&mut w, &fail(msg)).await;
    }
    let mut lines = AsyncBufReader::new(r);
    let mut served = false;
    loop {
        if served {
            // The next request may come whenever; once it begins, it must
            // end within `idle`.
            if tokio::io::AsyncBufReadExt::fill_buf(&mut lines)
                .await?
                .is_empty()
            {
                break;
            }
        }
        served = true;
        slot.touch();
        let line = match next_line(&mut lines, Some(idle)).await {
            Ok(Some(line)) => line,
            Ok(None) => break,
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                // Said once, then the connection ends: what follows can't
                // be told apart from the rest of the line.
                let _ = send(&mut w, &fail(e.to_string())).await;
                return Err(e);
            }
            Err(e) => return Err(e),
        };
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
        let req = match check_version(&req).and_then(|()| Request::from_value(&req)) {
            Ok(r) => r,
            Err(e) => {
                send(&mut w, &fail(e)).await?;
                continue;
            }
        };
        let reply = match req {
            Request::Watch => return watch(&srv, &mut lines, &mut w).await,
            // A commit copies files: off the async workers.
            Request::Changes { .. }
            | Request::Commit { .. }
            | Request::Discard { .. }
            | Request::ChangesIn { .. }
            | Request::CommitUpto { .. }
            | Request::Checkpoint { .. }
            | Request::Checkpoints { .. }
            | Request::Rewind { .. } => tokio::task::block_in_place(|| answer(&srv, req, peer)),
            _ => answer(&srv, req, peer),
        };
        send(&mut w, &reply).await?;
    }
    Ok(())
}

/// Who is on the other end of a connection (SO_PEERCRED).
#[derive(Debug, Clone, Copy)]
pub struct Peer {
    pub uid: u32,
    /// Unknown when the peer is in another pid namespace.
    pub pid: Option<u32>,
}

/// Answer one non-streaming request.
pub fn handle(srv: &Server, req: &Value, peer: Peer) -> Value {
    match Request::from_value(req) {
        Ok(req) => answer(srv, req, peer),
        Err(e) => fail(e),
    }
}

/// Answer one non-streaming request, read.
fn answer(srv: &Server, req: Request, peer: Peer) -> Value {
    match req {
        Request::List => ok_answer(&Listed {
            requests: srv.approvals.pending(),
        }),
        Request::Status => ok_answer(&StatusAnswer {
            status: (srv.status)(),
        }),
        Request::DenyPending => {
            let n = srv.approvals.deny_pending("the mount is being unmounted");
            ok_answer(&Denied { denied: n as u64 })
        }
        // A peer whose pid we can't see (another pid namespace) is not on
        // the worker's side as far as the kin rule can tell.
        Request::Decide { id, decision } => match match peer.pid {
            Some(pid) => srv.approvals.decide_as(id, decision, peer.uid, pid),
            None => srv.approvals.decide(id, decision, peer.uid),
        } {
            Ok(()) => ok_answer(&Done {}),
            Err(e) => fail(e.to_string()),
        },
        Request::Worker(claim) => match srv.approvals.side().register(peer.pid, claim) {
            Ok(b) => {
                tracing::info!(boundary = ?b, "the worker's boundary");
                ok_answer(&Done {})
            }
            Err(e) => fail(e),
        },
        // A watch streams: the connection handles it before it gets here.
        Request::Watch => fail("watch is a stream: send it as the first request of a connection"),
        Request::Changes { .. }
        | Request::Commit { .. }
        | Request::Discard { .. }
        | Request::ChangesIn { .. }
        | Request::CommitUpto { .. }
        | Request::Checkpoint { .. }
        | Request::Checkpoints { .. }
        | Request::Rewind { .. } => match &srv.stage {
            None => fail("this mount has no staged zone"),
            Some(run) => match run(&req, peer) {
                Ok(answer) => ok_answer(&answer),
                Err(e) => fail(e),
            },
        },
    }
}

/// The next request line from `r` (without its newline), of at most
/// [`MAX_LINE`] bytes, within `idle` if given; None when the peer closed.
/// A longer line, or one that is not UTF-8, is an `InvalidData` error;
/// no line within `idle`, `TimedOut`.
async fn next_line<R: tokio::io::AsyncBufRead + Unpin>(
    r: &mut R,
    idle: Option<Duration>,
) -> io::Result<Option<String>> {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::new();
    let mut limited = (&mut *r).take(MAX_LINE as u64 + 1);
    let read = limited.read_until(b'\n', &mut buf);
    let n = match idle {
        Some(d) => tokio::time::timeout(d, read).await.map_err(|_| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no request in {} s", d.as_secs()),
            )
        })??,
        None => read.await?,
    };
    if n == 0 {
        return Ok(None);
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
    } else if buf.len() > MAX_LINE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a request line of more than {MAX_LINE} bytes"),
        ));
    }
    String::from_utf8(buf).map(Some).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "a request line that is not UTF-8",
        )
    })
}

async fn watch(
    srv: &Server,
    lines: &mut AsyncBufReader<tokio::net::unix::OwnedReadHalf>,
    w: &mut tokio::net::unix::OwnedWriteHalf,
) -> io::Result<()> {
    // Subscribe before the snapshot, so nothing in between is missed; a
    // request that is both in the snapshot and in the stream is sent once.
    let mut rx = srv.events.subscribe();
    send(w, &ok_answer(&Done {})).await?;
    let mut sent = std::collections::HashSet::new();
    for info in srv.approvals.pending() {
        sent.insert(info.id);
        send(w, &event_json(&Event::Requested(info))).await?;
    }
    loop {
        tokio::select! {
            ev = rx.recv() => match ev {
                Ok(Event::Requested(info)) if sent.remove(&info.id) => {}
                Ok(ev) => send(w, &event_json(&ev)).await?,
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    send(w, &WatchEvent::Lagged { missed: n }.to_value()).await?;
                }
                Err(broadcast::error::RecvError::Closed) => return Ok(()),
            },
            line = next_line(lines, None) => {
                // The client closed: watching ends. Anything it says is ignored.
                if line?.is_none() {
                    return Ok(());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::approval::Settings;
    use crate::config::SandboxMode;

    fn server() -> Arc<Server> {
        server_of(1000)
    }

    fn server_of(owner_uid: u32) -> Arc<Server> {
        let a = Approvals::new(
            Settings {
                mountpoint: "/m".into(),
                timeout: Duration::from_secs(5),
                no_approvals: false,
                owner_uid: 0,
            },
            None,
        );
        let broker = a.clone();
        let status = move || Status {
            mountpoint: "/m".into(),
            pid: 1,
            started: 0,
            config: None,
            workers: Vec::new(),
            zone_args: Vec::new(),
            control: "/m.sock".into(),
            audit_log: None,
            approval_timeout_secs: 5,
            no_approvals: false,
            owner_uid: 1000,
            sandbox_mode: SandboxMode::Direct,
            zones: Vec::new(),
            pending: broker.pending(),
            counters: broker
                .counters()
                .snapshot()
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            io: None,
            cache_ttl_secs: None,
            fuse_requests: None,
            recent_refusals: Vec::new(),
            degraded: None,
            stage_dir: None,
            worker_boundary: None,
        };
        Server::new(a, owner_uid, Box::new(status))
    }

    const ROOT: Peer = Peer { uid: 0, pid: None };

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
            ROOT,
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
            ROOT,
        );
        assert!(e["error"].as_str().unwrap_or("").contains("unknown scope"));
        let e = handle(&s, &json!({"v":1,"op":"frobnicate"}), ROOT);
        assert!(e["error"].as_str().unwrap_or("").contains("unknown op"));
        let st = handle(&s, &json!({"v":1,"op":"status"}), ROOT);
        assert_eq!(st["status"]["mountpoint"], "/m");
        assert_eq!(st["status"]["pending"], json!([]));
        assert_eq!(st["status"]["counters"]["requests"], 0);
    }

    /// A connection that sends nothing, or half a line, for the idle time
    /// is closed (its slot given back); one waiting between requests, or
    /// a watch, which only listens, is not.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_silent_at_first_or_mid_line_is_closed_a_waiting_client_or_watch_is_not() {
        let s = server_of(rustix::process::geteuid().as_raw());
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        tokio::spawn(serve_idle(listener, s.clone(), Duration::from_millis(200)));
        let closed = async |half: &[u8]| {
            let mut c = UnixStream::connect(&path).await.expect("connect");
            c.write_all(half).await.expect("write");
            let (r, _w) = c.into_split();
            let mut lines = AsyncBufReader::new(r).lines();
            // Answers to whole requests first, then the close.
            tokio::time::timeout(Duration::from_secs(5), async {
                while let Ok(Some(_)) = lines.next_line().await {}
            })
            .await
            .is_ok()
        };
        assert!(closed(b"").await, "a silent connection stayed open");
        assert!(closed(b"{\"v\":1,").await, "half a line kept it open");
        assert!(
            closed(b"{\"v\":1,\"op\":\"list\"}\n{\"v\":1,").await,
            "half a second line kept it open"
        );
        // Between two requests a client may wait past the idle time.
        let mut c = UnixStream::connect(&path).await.expect("connect");
        c.write_all(b"{\"v\":1,\"op\":\"list\"}\n")
            .await
            .expect("write");
        let (r, mut w) = c.into_split();
        let mut lines = AsyncBufReader::new(r).lines();
        let first = lines.next_line().await.expect("read").expect("line");
        assert!(first.contains("\"ok\":true"), "{first}");
        tokio::time::sleep(Duration::from_millis(600)).await;
        w.write_all(b"{\"v\":1,\"op\":\"list\"}\n")
            .await
            .expect("write");
        let second = tokio::time::timeout(Duration::from_secs(5), lines.next_line())
            .await
            .expect("an answer")
            .expect("read")
            .expect("a line: the connection stayed");
        assert!(second.contains("\"ok\":true"), "{second}");
        let mut c = UnixStream::connect(&path).await.expect("connect");
        c.write_all(b"{\"v\":1,\"op\":\"watch\"}\n")
            .await
            .expect("write");
        let (r, _w) = c.into_split();
        let mut lines = AsyncBufReader::new(r).lines();
        let first = lines.next_line().await.expect("read").expect("line");
        assert!(first.contains("\"ok\":true"), "{first}");
        let still = tokio::time::timeout(Duration::from_millis(800), lines.next_line()).await;
        assert!(still.is_err(), "the watch was closed: {still:?}");
    }

    /// A served socket of `s` in a fresh dir (kept alive by the result).
    fn served(s: &Arc<Server>) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        tokio::spawn(serve(listener, s.clone()));
        (dir, path)
    }

    async fn reply_of(stream: UnixStream) -> Option<Value> {
        let (r, _w) = stream.into_split();
        let mut lines = AsyncBufReader::new(r).lines();
        let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
            .await
            .expect("an answer within 10 s")
            .ok()??;
        serde_json::from_str(&line).ok()
    }

    /// A peer that sends a line without end is answered and cut off once
    /// it passes MAX_LINE (found by an attack pass: 1 GiB sent without a
    /// newline stayed in the daemon's memory while the connection lived).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_line_past_the_limit_is_refused_and_the_connection_closed() {
        let s = server_of(rustix::process::geteuid().as_raw());
        let (_dir, path) = served(&s);
        let stream = UnixStream::connect(&path).await.expect("connect");
        let (r, mut w) = stream.into_split();
        let chunk = vec![b'A'; 64 * 1024];
        let mut sent = 0;
        // The server stops reading past the limit: writes then fail or
        // block; bounded either way.
        while sent <= MAX_LINE + chunk.len() {
            match tokio::time::timeout(Duration::from_secs(5), w.write_all(&chunk)).await {
                Ok(Ok(())) => sent += chunk.len(),
                _ => break,
            }
        }
        let mut lines = AsyncBufReader::new(r).lines();
        let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
            .await
            .expect("an answer")
            .expect("read")
            .expect("a line");
        let v: Value = serde_json::from_str(&line).expect("JSON");
        assert_eq!(v["ok"], false, "{v}");
        assert!(
            v["error"]
                .as_str()
                .is_some_and(|e| e.contains(&format!("more than {MAX_LINE} bytes"))),
            "{v}"
        );
        let end = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
            .await
            .expect("closed within 10 s");
        assert!(matches!(end, Ok(None) | Err(_)), "{end:?}");
    }

    /// Past MAX_CONNECTIONS open at once, a new connection is served and
    /// the one idle longest is closed (found by attack passes: 19,995
    /// idle connections took the daemon's fds and `approvals list` failed
    /// after 30 s; with a fixed limit instead, 256 connections that each
    /// sent one request kept every later one out).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn past_the_limit_the_connection_idle_longest_makes_room() {
        let s = server_of(rustix::process::geteuid().as_raw());
        let (_dir, path) = served(&s);
        let mut held = Vec::new();
        for _ in 0..MAX_CONNECTIONS {
            let mut c = UnixStream::connect(&path).await.expect("connect");
            // Answered: the connection has its slot.
            c.write_all(b"{\"v\":1,\"op\":\"list\"}\n")
                .await
                .expect("write");
            let (r, w) = c.into_split();
            let mut lines = AsyncBufReader::new(r).lines();
            let line = lines.next_line().await.expect("read").expect("line");
            assert!(line.contains("\"ok\":true"), "{line}");
            held.push((lines, w));
            // Each a little later than the one before.
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // The second one asks again: the first is now idle longest.
        let (lines, w) = &mut held[1];
        w.write_all(b"{\"v\":1,\"op\":\"list\"}\n")
            .await
            .expect("write");
        assert!(lines.next_line().await.expect("read").is_some());
        for _ in 0..3 {
            let mut c = UnixStream::connect(&path).await.expect("connect");
            c.write_all(b"{\"v\":1,\"op\":\"list\"}\n")
                .await
                .expect("write");
            let v = reply_of(c).await.expect("an answer");
            assert_eq!(v["ok"], true, "{v}");
        }
        let first = tokio::time::timeout(Duration::from_secs(5), held[0].0.next_line()).await;
        assert!(
            first.as_ref().is_ok_and(|l| matches!(l, Ok(None) | Err(_))),
            "the connection idle longest stayed open: {first:?}"
        );
        let still = tokio::time::timeout(Duration::from_millis(300), held[1].0.next_line()).await;
        assert!(
            still.is_err(),
            "the one that asked again was closed: {still:?}"
        );
    }

    /// A request that is both pending when a watch starts and in the
    /// event stream it subscribed to (the two overlap for an instant) is
    /// sent once: a client that allows every request it sees must never
    /// allow the same one twice.
    #[tokio::test]
    async fn a_watch_shows_each_request_once() {
        use crate::approval::{AskRequest, Broker, Decision, Scope};
        use crate::policy::{AskItem, Class};

        let s = server_of(rustix::process::geteuid().as_raw());
        let (tx, verdict) = std::sync::mpsc::channel();
        s.approvals.ask(
            AskRequest {
                items: vec![AskItem {
                    class: Class::Write,
                    zone: "final".into(),
                    path: PathBuf::from("a.md"),
                }],
                op: "create",
                target: None,
                source: None,
                pid: std::process::id(),
                uid: 1000,
                unique: 0,
                wait: crate::approval::Wait::Decision,
            },
            Box::new(move |v| {
                let _ = tx.send(v);
            }),
        );
        let pending = s.approvals.pending();
        assert_eq!(pending.len(), 1);
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        tokio::spawn(serve(listener, s.clone()));
        let (r, mut w) = UnixStream::connect(&path)
            .await
            .expect("connect")
            .into_split();
        let mut lines = AsyncBufReader::new(r).lines();
        w.write_all(b"{\"v\":1,\"op\":\"watch\"}\n")
            .await
            .expect("write");
        let mut next = async || -> Value {
            let line = tokio::time::timeout(Duration::from_secs(5), lines.next_line())
                .await
                .expect("a line within 5 s")
                .expect("read")
                .expect("not closed");
            serde_json::from_str(&line).expect("JSON")
        };
        assert_eq!(next().await["ok"], true);
        let first = next().await;
        assert_eq!(first["event"], "request");
        assert_eq!(first["request"]["id"], pending[0].id);
        // The same request arriving through the stream, as it does when it
        // was asked between the subscription and the snapshot.
        let _ = s.events.send(Event::Requested(pending[0].clone()));
        s.approvals
            .decide(pending[0].id, Decision::Allow(Scope::Once), 0)
            .expect("decide");
        let second = next().await;
        assert_eq!(second["event"], "resolved", "{second}");
        assert_eq!(second["id"], pending[0].id);
        assert!(verdict.recv_timeout(Duration::from_secs(5)).is_ok());
    }

    /// A stale socket under a path with a symlink on the way (`/var/run`)
    /// is replaced, and a file that is not a socket is refused: both
    /// through the one directory fd the socket is then bound in.
    #[test]
    fn a_stale_socket_behind_a_symlinked_dir_is_replaced() {
        let dir = tempfile::tempdir().expect("tempdir");
        let real = dir.path().join("real");
        std::fs::create_dir(&real).expect("mkdir");
        std::os::unix::fs::symlink(&real, dir.path().join("run")).expect("symlink");
        drop(std::os::unix::net::UnixListener::bind(real.join("c.sock")).expect("stale"));
        let bound = bind(&dir.path().join("run/c.sock")).expect("a stale socket is replaced");
        drop(bound);
        std::fs::write(real.join("f.sock"), "x").expect("file");
        let e = bind(&dir.path().join("run/f.sock")).expect_err("a file in the way");
        assert!(e.to_string().contains("not a socket"), "{e}");
        assert_eq!(
            std::fs::read_to_string(real.join("f.sock")).expect("kept"),
            "x"
        );
    }

    /// The socket appears at its path whole, already 0600 (renamed into
    /// place): nothing is done by that path once it exists (F7b of an
    /// attack pass: a chmod by path after `bind` would follow a symlink
    /// swapped in, in a directory others may write). Seen with inotify on
    /// the directory: no create and no attribute change under its name.
    #[test]
    fn bind_makes_the_socket_elsewhere_and_renames_it_into_place() {
        use rustix::fs::inotify;
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.sock");
        // A stale socket is replaced the same way.
        for round in 0..2 {
            let ino = inotify::init(inotify::CreateFlags::NONBLOCK | inotify::CreateFlags::CLOEXEC)
                .expect("inotify");
            inotify::add_watch(
                &ino,
                dir.path(),
                inotify::WatchFlags::CREATE
                    | inotify::WatchFlags::ATTRIB
                    | inotify::WatchFlags::MOVED_TO,
            )
            .expect("watch");
            let l = bind(&path).expect("bind");
            let mut buf = [std::mem::MaybeUninit::uninit(); 4096];
            let mut events = inotify::Reader::new(&ino, &mut buf);
            let mut seen = Vec::new();
            while let Ok(ev) = events.next() {
                if ev.file_name().is_some_and(|n| n.to_bytes() == b"c.sock") {
                    seen.push(ev.events());
                }
            }
            assert_eq!(seen, [inotify::ReadFlags::MOVED_TO], "round {round}");
            let mode = std::fs::symlink_metadata(&path)
                .expect("stat")
                .permissions()
                .mode();
            assert_eq!(mode & 0o7777, 0o600);
            StdStream::connect(&path).expect("connect");
            // Nothing but the socket is left beside it.
            let names: Vec<_> = std::fs::read_dir(dir.path())
                .expect("read_dir")
                .map(|e| e.expect("entry").file_name())
                .collect();
            assert_eq!(names, ["c.sock"]);
            drop(l);
        }
    }
}

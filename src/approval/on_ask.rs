//! `--on-ask CMD`: tell someone that a worker is waiting on them.
//!
//! CMD is split like a shell would split words (quotes respected) but runs
//! without a shell. It gets the request in its environment (`ZONEMOUNT_ID`,
//! `ZONEMOUNT_ZONE`, `ZONEMOUNT_CLASS`, `ZONEMOUNT_OP`, `ZONEMOUNT_PATH`,
//! `ZONEMOUNT_TARGET`, `ZONEMOUNT_PID`, `ZONEMOUNT_UID`, `ZONEMOUNT_CMDLINE`,
//! `ZONEMOUNT_TIME`, `ZONEMOUNT_MOUNT`) and as one JSON line on stdin. It
//! never blocks or decides the request, and its failure is only logged.
//! What the worker named (path, target, command line) is escaped in the
//! environment, as in every human view (a hook tends to show it: a
//! notification, a chat message); the JSON line has it exact.
//!
//! A worker decides how often a hook runs (each ask of its own is a
//! request), so hooks are bounded (found by an attack pass: a loop of
//! creates whose callers were killed at once ran 871 hooks in 5 s, which
//! outlived the unmount):
//! - At most [`MAX_RUNNING`] run at once. A request that comes while that
//!   many run gets no hook: it is logged, counted (`hooks_skipped` in
//!   `status`), and waits for its decision as any other.
//! - Each runs in a session (so a process group) of its own, with no
//!   controlling terminal, and the whole group is ended
//!   (SIGTERM, then SIGKILL after [`GRACE`]) when its request ends
//!   (decided, timed out, withdrawn: nobody waits to be told any more),
//!   after [`HOOK_LIMIT`], and when the broker closes (the unmount, the
//!   daemon's end), which waits for them: none outlives the mount. What a
//!   hook leaves running in its group when it exits goes with it.
//! - Nothing of it runs on the caller's thread: a listener's event (on a
//!   FUSE thread) only takes a slot and queues the request; one thread of
//!   the hook's own starts, feeds, watches and reaps the processes.

use std::collections::{HashSet, VecDeque};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rustix::process::{Pid, Signal, WaitId, WaitIdOptions};

use super::Listener;
use super::{Event, RequestInfo};

/// How long a hook may run before it is ended.
const HOOK_LIMIT: Duration = Duration::from_secs(60);

/// The most hooks running at once.
pub const MAX_RUNNING: usize = 16;

/// How long a hook told to end (SIGTERM) has before it is killed.
pub const GRACE: Duration = Duration::from_secs(1);

/// How often running hooks are looked at.
const TICK: Duration = Duration::from_millis(20);

/// How many ended requests without a hook are remembered, so that a
/// request that ended before its start was heard of gets none.
const ENDED_KEPT: usize = 256;

/// Split `cmd` into program and arguments; None if empty or unbalanced.
pub fn parse(cmd: &str) -> Option<Vec<String>> {
    let argv = shlex::split(cmd)?;
    (!argv.is_empty()).then_some(argv)
}

/// The environment a hook gets for `info`.
pub fn environment(info: &RequestInfo, mountpoint: &std::path::Path) -> Vec<(String, String)> {
    let mut env = vec![
        ("ZONEMOUNT_ID", info.id.to_string()),
        ("ZONEMOUNT_ZONE", info.zone.clone()),
        ("ZONEMOUNT_CLASS", info.class.clone()),
        ("ZONEMOUNT_OP", info.op.clone()),
        ("ZONEMOUNT_PATH", info.shown_path()),
        ("ZONEMOUNT_PID", info.pid.to_string()),
        ("ZONEMOUNT_UID", info.uid.to_string()),
        ("ZONEMOUNT_CMDLINE", info.shown_cmdline()),
        ("ZONEMOUNT_TIME", info.time.clone()),
        ("ZONEMOUNT_MOUNT", mountpoint.display().to_string()),
    ];
    if let Some(t) = info.shown_target() {
        env.push(("ZONEMOUNT_TARGET", t));
    }
    env.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// What the hook's thread is told.
enum Msg {
    /// Run a hook for request `id` (its slot is taken).
    Run {
        id: u64,
        env: Vec<(String, String)>,
        json: String,
    },
    /// Request `id` ended: its hook, if it still runs, is ended.
    End(u64),
    /// End every hook, then say so.
    Close(mpsc::Sender<()>),
}

/// What the listener and the hook's thread share.
#[derive(Default)]
struct Slots {
    /// Requests with a hook started or about to be: at most
    /// [`MAX_RUNNING`].
    taken: HashSet<u64>,
    /// Requests that ended with no hook (see [`ENDED_KEPT`]).
    ended: VecDeque<u64>,
    /// Skipped since a hook last started: the first is warned of.
    skipping: u64,
    closing: bool,
}

/// The `--on-ask` listener.
pub struct Hooks {
    slots: Arc<Mutex<Slots>>,
    tx: Mutex<Option<mpsc::Sender<Msg>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    skipped: Arc<AtomicU64>,
    max: usize,
}

impl Hooks {
    /// Hooks running `argv`, at most `max` at once; `skipped` counts the
    /// requests that got none because `max` ran.
    pub fn new(argv: Vec<String>, max: usize, skipped: Arc<AtomicU64>) -> Hooks {
        let slots = Arc::new(Mutex::new(Slots::default()));
        let (tx, rx) = mpsc::channel();
        let runner = Runner {
            argv,
            slots: Arc::clone(&slots),
            running: Vec::new(),
        };
        let thread = std::thread::Builder::new()
            .name("zm-on-ask".into())
            .spawn(move || runner.serve(rx));
        let (tx, thread) = match thread {
            Ok(t) => (Some(tx), Some(t)),
            Err(e) => {
                tracing::warn!("--on-ask: cannot start the hooks' thread ({e}); no hook will run");
                (None, None)
            }
        };
        Hooks {
            slots,
            tx: Mutex::new(tx),
            thread: Mutex::new(thread),
            skipped,
            max,
        }
    }

    fn send(&self, m: Msg) -> bool {
        self.tx.lock().as_ref().is_some_and(|tx| tx.send(m).is_ok())
    }

    /// Request `info` started waiting: take a slot and have its hook
    /// started, or count it skipped.
    pub fn requested(&self, info: &RequestInfo, mountpoint: &std::path::Path) {
        let id = info.id;
        {
            let mut s = self.slots.lock();
            if s.closing {
                return;
            }
            if let Some(i) = s.ended.iter().position(|e| *e == id) {
                // Over before it was heard of: nobody waits to be told.
                s.ended.remove(i);
                return;
            }
            if s.taken.len() >= self.max {
                s.skipping += 1;
                let total = self.skipped.fetch_add(1, Ordering::Relaxed) + 1;
                if s.skipping == 1 {
                    tracing::warn!(
                        id,
                        total,
                        "--on-ask: {} hooks run already (the most at once); none runs for request {id} \
                         (it still waits for its decision); further skips are counted (`hooks_skipped` in status)",
                        self.max
                    );
                } else {
                    tracing::debug!(id, total, "--on-ask: hook skipped");
                }
                return;
            }
            s.skipping = 0;
            s.taken.insert(id);
        }
        let env = environment(info, mountpoint);
        let json = crate::text::json_line(info).unwrap_or_default();
        if !self.send(Msg::Run { id, env, json }) {
            self.slots.lock().taken.remove(&id);
        }
    }

    /// Request `id` ended: its hook, if it still runs, is ended.
    pub fn ended(&self, id: u64) {
        let hooked = {
            let mut s = self.slots.lock();
            let hooked = s.taken.contains(&id);
            if !hooked && !s.closing {
                if s.ended.len() >= ENDED_KEPT {
                    s.ended.pop_front();
                }
                s.ended.push_back(id);
            }
            hooked
        };
        if hooked {
            self.send(Msg::End(id));
        }
    }

    /// End every hook still running (SIGTERM to its group, SIGKILL after
    /// [`GRACE`]) and wait for them; no hook starts after. Later calls do
    /// nothing.
    pub fn close(&self) {
        self.slots.lock().closing = true;
        let Some(tx) = self.tx.lock().take() else {
            return;
        };
        let (ack, done) = mpsc::channel();
        if tx.send(Msg::Close(ack)).is_ok() {
            // Bounded: the thread ends each hook within the grace, then
            // kills; a process it can't reap (stuck in the kernel) is not
            // waited for past this.
            let _ = done.recv_timeout(GRACE * 3);
        }
        drop(tx);
        if let Some(t) = self.thread.lock().take() {
            if t.is_finished() {
                let _ = t.join();
            }
        }
    }

    /// How many hooks run now (or are about to).
    pub fn running(&self) -> usize {
        self.slots.lock().taken.len()
    }
}

impl Drop for Hooks {
    fn drop(&mut self) {
        self.close();
    }
}

/// A [`Hooks`] with its mountpoint, as the broker's listener.
struct Hook {
    hooks: Hooks,
    mountpoint: PathBuf,
}

impl Listener for Hook {
    fn event(&self, ev: &Event) {
        match ev {
            Event::Requested(info) => self.hooks.requested(info, &self.mountpoint),
            Event::Resolved { id, .. } => self.hooks.ended(*id),
        }
    }

    fn close(&self) {
        self.hooks.close();
    }
}

/// A hook's process (the leader of its group) and its state.
struct Running {
    id: u64,
    child: Child,
    pgid: Option<Pid>,
    started: Instant,
    /// What is left of its stdin to write (written without blocking).
    stdin: Option<(ChildStdin, Vec<u8>)>,
    /// When it was told to end (SIGTERM), and whether it was then killed.
    ending: Option<Instant>,
    killed: bool,
    /// Why it was ended, if it was (then its exit is not a failure).
    why: Option<&'static str>,
}

impl Running {
    fn signal(&self, sig: Signal) {
        if let Some(pgid) = self.pgid {
            let _ = rustix::process::kill_process_group(pgid, sig);
        }
    }

    /// Tell it to end, once.
    fn end(&mut self, why: &'static str) {
        if self.ending.is_none() {
            self.signal(Signal::TERM);
            self.ending = Some(Instant::now());
            self.why = Some(why);
        }
    }

    /// Write what fits of its stdin; close it once all is written or the
    /// hook stopped reading (it need not read it).
    fn feed(&mut self) {
        let Some((pipe, left)) = &mut self.stdin else {
            return;
        };
        loop {
            if left.is_empty() {
                self.stdin = None;
                return;
            }
            match pipe.write(left) {
                Ok(0) => {
                    self.stdin = None;
                    return;
                }
                Ok(n) => {
                    left.drain(..n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                // A hook that ignores its stdin is fine: a broken pipe is
                // not a failure.
                Err(_) => {
                    self.stdin = None;
                    return;
                }
            }
        }
    }

    /// Whether its leader has exited: then what it left in its group is
    /// killed (the zombie, not yet reaped, keeps the group's id from being
    /// reused meanwhile) and it is reaped.
    fn reaped(&mut self, prog: &str) -> bool {
        let Some(pid) = self.pgid else {
            return matches!(self.child.try_wait(), Ok(Some(_)) | Err(_));
        };
        let opts = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
        match rustix::process::waitid(WaitId::Pid(pid), opts) {
            Ok(None) => return false,
            Ok(Some(_)) => self.signal(Signal::KILL),
            Err(_) => {}
        }
        let st = match self.child.wait() {
            Ok(st) => st,
            Err(e) => {
                tracing::warn!(id = self.id, "--on-ask: waiting for {prog}: {e}");
                return true;
            }
        };
        match self.why {
            Some(why) => tracing::debug!(id = self.id, "--on-ask: {prog} ended ({why}): {st}"),
            None if st.success() => {}
            None => tracing::warn!(id = self.id, "--on-ask: {prog} failed: {st}"),
        }
        true
    }
}

/// The hooks' thread: starts, feeds, ends and reaps them.
struct Runner {
    argv: Vec<String>,
    slots: Arc<Mutex<Slots>>,
    running: Vec<Running>,
}

impl Runner {
    fn serve(mut self, rx: mpsc::Receiver<Msg>) {
        loop {
            let msg = if self.running.is_empty() {
                rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected)
            } else {
                rx.recv_timeout(TICK)
            };
            match msg {
                Ok(Msg::Run { id, env, json }) => self.start(id, &env, json),
                Ok(Msg::End(id)) => {
                    if let Some(r) = self.running.iter_mut().find(|r| r.id == id) {
                        r.end("its request ended");
                    }
                }
                Ok(Msg::Close(ack)) => {
                    self.end_all();
                    let _ = ack.send(());
                    return;
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return self.end_all(),
            }
            self.look();
        }
    }

    fn prog(&self) -> &str {
        self.argv.first().map(String::as_str).unwrap_or_default()
    }

    fn start(&mut self, id: u64, env: &[(String, String)], json: String) {
        let Some((prog, args)) = self.argv.split_first() else {
            self.slots.lock().taken.remove(&id);
            return;
        };
        let mut cmd = Command::new(prog);
        cmd.args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .current_dir("/");
        // Its own session, so its own group: the whole hook (a shell and
        // what it starts) is ended together, and it has no controlling
        // terminal to push keys into (`--prompt` takes none while another
        // process of its terminal's session runs).
        crate::fork::new_session_before_exec(&mut cmd);
        let child = cmd.spawn();
        let mut child = match child {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(id, "--on-ask: cannot run {prog}: {e}");
                self.slots.lock().taken.remove(&id);
                return;
            }
        };
        let stdin = child.stdin.take().and_then(|pipe| {
            let nonblocking = rustix::fs::fcntl_getfl(&pipe)
                .and_then(|fl| rustix::fs::fcntl_setfl(&pipe, fl | rustix::fs::OFlags::NONBLOCK));
            let mut line = json.into_bytes();
            line.push(b'\n');
            nonblocking.is_ok().then_some((pipe, line))
        });
        let pgid = i32::try_from(child.id()).ok().and_then(Pid::from_raw);
        tracing::debug!(id, pid = child.id(), "--on-ask: {prog} started");
        let mut r = Running {
            id,
            child,
            pgid,
            started: Instant::now(),
            stdin,
            ending: None,
            killed: false,
            why: None,
        };
        r.feed();
        self.running.push(r);
    }

    /// Feed, time out, kill and reap what runs.
    fn look(&mut self) {
        let now = Instant::now();
        let prog = self.prog().to_string();
        let mut done = Vec::new();
        for (i, r) in self.running.iter_mut().enumerate() {
            r.feed();
            if r.reaped(&prog) {
                done.push(i);
                continue;
            }
            match r.ending {
                None if now.duration_since(r.started) >= HOOK_LIMIT => {
                    tracing::warn!(
                        id = r.id,
                        "--on-ask: {prog} still running after {HOOK_LIMIT:?}; ended"
                    );
                    r.end("it ran too long");
                }
                Some(t) if !r.killed && now.duration_since(t) >= GRACE => {
                    r.signal(Signal::KILL);
                    r.killed = true;
                }
                _ => {}
            }
        }
        if done.is_empty() {
            return;
        }
        let mut slots = self.slots.lock();
        for i in done.into_iter().rev() {
            let r = self.running.swap_remove(i);
            slots.taken.remove(&r.id);
        }
    }

    /// End every hook: SIGTERM to each group, SIGKILL to those left after
    /// [`GRACE`]; then wait a moment more for them to be reaped.
    fn end_all(&mut self) {
        for r in &mut self.running {
            r.end("the mount is closing");
        }
        let deadline = Instant::now() + GRACE * 2;
        while !self.running.is_empty() && Instant::now() < deadline {
            self.look();
            if !self.running.is_empty() {
                std::thread::sleep(TICK.min(Duration::from_millis(10)));
            }
        }
        for r in &self.running {
            r.signal(Signal::KILL);
            tracing::warn!(
                id = r.id,
                "--on-ask: a hook could not be reaped after it was killed"
            );
        }
    }
}

/// A listener that runs `argv` for every new request, at most
/// [`MAX_RUNNING`] at once; `skipped` counts the requests that got none.
pub fn listener(
    argv: Vec<String>,
    mountpoint: PathBuf,
    skipped: Arc<AtomicU64>,
) -> Arc<dyn Listener> {
    let hooks = Hooks::new(argv, MAX_RUNNING, skipped);
    Arc::new(Hook { hooks, mountpoint })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `pid` is alive (not gone, not a zombie).
    fn alive(pid: u32) -> bool {
        crate::text::read_lossy(format!("/proc/{pid}/stat")).is_some_and(|s| !s.contains(") Z "))
    }

    /// (request id, pid) of each hook started, from what they wrote.
    fn started(log: &std::path::Path) -> Vec<(u64, u32)> {
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let (id, pid) = l.split_once(' ')?;
                Some((id.parse().ok()?, pid.parse().ok()?))
            })
            .collect()
    }

    fn until(what: &str, mut f: impl FnMut() -> bool) {
        let t = Instant::now();
        while !f() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "not within 10 s: {what}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn hooks_are_bounded_ended_with_their_request_and_all_gone_on_close() {
        let dir = std::env::temp_dir().join(format!(
            "zm-on-ask-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("started");
        let argv = vec![
            "sh".to_string(),
            "-c".into(),
            format!(
                "echo \"$ZONEMOUNT_ID $$\" >> {}; exec sleep 30",
                log.display()
            ),
        ];
        let skipped = Arc::new(AtomicU64::new(0));
        let hooks = Hooks::new(argv, 4, Arc::clone(&skipped));
        let mp = std::path::Path::new("/m");
        let req = |id| RequestInfo {
            id,
            ..RequestInfo::default()
        };
        // A request over before it was heard of gets none.
        hooks.ended(99);
        hooks.requested(&req(99), mp);
        for id in 1..=10 {
            hooks.requested(&req(id), mp);
        }
        until("4 hooks start", || started(&log).len() == 4);
        assert_eq!(skipped.load(Ordering::Relaxed), 6);
        assert_eq!(hooks.running(), 4);
        let first = started(&log);
        assert!(
            first
                .iter()
                .all(|(id, pid)| (1..=4).contains(id) && alive(*pid))
        );
        // Its request ended: the hook goes, and its slot serves the next.
        hooks.ended(2);
        let pid2 = first.iter().find(|(id, _)| *id == 2).unwrap().1;
        until("hook 2 ends", || !alive(pid2) && hooks.running() == 3);
        hooks.requested(&req(11), mp);
        until("hook 11 starts", || started(&log).len() == 5);
        // Closing ends every hook before it returns; none starts after.
        hooks.close();
        for (id, pid) in started(&log) {
            assert!(!alive(pid), "hook {id} (pid {pid}) outlived close");
        }
        hooks.requested(&req(12), mp);
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(started(&log).len(), 5);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn commands_split_like_words_without_a_shell() {
        assert_eq!(
            parse("notify-send 'agent blocked' --urgency=critical"),
            Some(vec![
                "notify-send".to_string(),
                "agent blocked".into(),
                "--urgency=critical".into()
            ])
        );
        assert_eq!(parse("   "), None);
        assert_eq!(parse("echo 'unbalanced"), None);
    }

    #[test]
    fn the_environment_has_names_escaped_and_the_json_has_them_exact() {
        let (path, path_b64) = crate::text::for_json(b"/w/a\x1b[2K\xff");
        let info = RequestInfo {
            path,
            path_b64,
            target: Some("/w/b\u{202e}".into()),
            cmdline: "vim\rnotes.md".into(),
            ..RequestInfo::default()
        };
        let env = environment(&info, std::path::Path::new("/m"));
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("ZONEMOUNT_PATH"), Some("/w/a\\x1b[2K\\xff"));
        assert_eq!(get("ZONEMOUNT_TARGET"), Some("/w/b\\u{202e}"));
        assert_eq!(get("ZONEMOUNT_CMDLINE"), Some("vim\\rnotes.md"));
        let json = serde_json::to_string(&info).unwrap_or_default();
        let back: RequestInfo = serde_json::from_str(&json).unwrap_or_default();
        assert_eq!(back.path_bytes(), b"/w/a\x1b[2K\xff");
    }
}

//! Who made a change (DESIGN §5): the process behind a request, and each
//! changed path's record of its first and last change.
//!
//! - [`Actor`]: one change's maker: the process id (in the daemon's PID
//!   namespace), its command (`comm`, and the first [`ARGV_MAX`] bytes of
//!   its argv with NULs as spaces), the caller's uid and the time. The
//!   command is "unknown" (`None`) when the process was gone before it
//!   could be read (or FUSE gave no pid).
//! - [`Who`]: reads them from `/proc`, cached per thread and per
//!   (process, start time), bounded, so a burst of changes by one program
//!   reads `/proc` about once (see [`TRUST`]).
//! - [`Trails`]: per path, its first and last change's actor, and the last
//!   change before each mark (a checkpoint) the path's changes crossed:
//!   bounded by paths and marks, not by writes. Kept in memory for plain rw
//!   zones (`fs::changes`), with the stage for staged ones
//!   (`stage::actors`).
//!
//! A worker chooses its own argv and comm (`exec -a`, `prctl`): an actor
//! names the program as it presented itself, which is not proof against a
//! hostile worker. Everything here is shown escaped (`text`).

mod key;
pub use key::PathKey;

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// How much of a process's argv is kept.
pub const ARGV_MAX: usize = 512;

/// How long a thread's process, once read, is taken as still the same
/// without reading `/proc` again. Past it, one small read (the thread's
/// `stat`: its start time and name) tells a reused pid or an `exec` from
/// the same process. Within it, a process that `exec`s another program
/// right after a change of its own is still named by the former command.
pub const TRUST: Duration = Duration::from_millis(250);

/// Most threads and processes remembered (each cache is emptied when full).
const THREADS_MAX: usize = 4096;
const PROCESSES_MAX: usize = 1024;

/// Most paths a [`Trails`] keeps (a path beyond it has no record).
pub const PATHS_MAX: usize = 200_000;

/// What a process ran: its name (`comm`, at most 15 bytes) and the start
/// of its argv, exact bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    pub comm: Vec<u8>,
    /// At most [`ARGV_MAX`] bytes, NULs as spaces, trailing NULs cut.
    pub argv: Vec<u8>,
}

/// Who made one change, and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    /// The process (thread group) id as the daemon sees it; the thread id
    /// FUSE gave when the process could not be read; 0 when FUSE gave none.
    pub pid: u32,
    pub uid: u32,
    pub time: SystemTime,
    /// None: unknown (the process was gone before it could be read).
    pub command: Option<Arc<Command>>,
}

impl Actor {
    /// An actor whose command is unknown.
    pub fn unknown(pid: u32, uid: u32) -> Actor {
        Actor {
            pid,
            uid,
            time: SystemTime::now(),
            command: None,
        }
    }

    /// Who is behind a request of thread `tid` for `uid`, read now
    /// (uncached: for a call that is rare, such as an approved ask).
    pub fn read(tid: u32, uid: u32) -> Actor {
        Who::default().actor(tid, uid)
    }

    /// For people, escaped as a command line ([`crate::text::cmdline`]):
    /// the argv, or the name when the argv is empty
    /// (a kernel thread, a process exiting), or `unknown (pid N)`.
    pub fn shown(&self) -> String {
        match self.command.as_deref() {
            Some(c) if !c.argv.is_empty() => crate::text::cmdline(&c.argv),
            Some(c) if !c.comm.is_empty() => format!("[{}]", crate::text::cmdline(&c.comm)),
            _ => format!("unknown (pid {})", self.pid),
        }
    }

    /// Whether `other` is the same process running the same command.
    pub fn same_process(&self, other: &Actor) -> bool {
        self.pid == other.pid
            && self.uid == other.uid
            && match (&self.command, &other.command) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a == b,
                (None, None) => true,
                _ => false,
            }
    }
}

/// An actor in JSON (keys in alphabetical order, as the protocol's):
/// `{"argv", "argv_b64"?, "comm", "comm_b64"?, "pid", "time", "uid"}`,
/// `argv` and `comm` absent when the command is unknown, `time` RFC 3339.
#[derive(Serialize, Deserialize)]
struct Wire {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    argv: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    argv_b64: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    comm: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    comm_b64: Option<String>,
    pid: u32,
    time: String,
    uid: u32,
}

impl Serialize for Actor {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (mut argv, mut argv_b64, mut comm, mut comm_b64) = (None, None, None, None);
        if let Some(c) = &self.command {
            (argv, argv_b64) = split(crate::text::for_json(&c.argv));
            (comm, comm_b64) = split(crate::text::for_json(&c.comm));
        }
        Wire {
            argv,
            argv_b64,
            comm,
            comm_b64,
            pid: self.pid,
            time: humantime::format_rfc3339_millis(self.time).to_string(),
            uid: self.uid,
        }
        .serialize(s)
    }
}

fn split((text, b64): (String, Option<String>)) -> (Option<String>, Option<String>) {
    (Some(text), b64)
}

impl<'de> Deserialize<'de> for Actor {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Actor, D::Error> {
        let w = Wire::deserialize(d)?;
        let time = humantime::parse_rfc3339(&w.time).map_err(serde::de::Error::custom)?;
        let command = match (w.argv, w.comm) {
            (None, None) => None,
            (argv, comm) => Some(Arc::new(Command {
                argv: argv.map_or_else(Vec::new, |t| {
                    crate::text::from_json(&t, w.argv_b64.as_deref())
                }),
                comm: comm.map_or_else(Vec::new, |t| {
                    crate::text::from_json(&t, w.comm_b64.as_deref())
                }),
            })),
        };
        Ok(Actor {
            pid: w.pid,
            uid: w.uid,
            time,
            command,
        })
    }
}

/// A path's first and last change, as a report shows them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FirstLast {
    pub first: Actor,
    pub last: Actor,
}

/// The process behind a FUSE request, read from `/proc` and cached.
#[derive(Debug, Default)]
pub struct Who {
    cache: Mutex<Cache>,
}

#[derive(Debug, Default)]
struct Cache {
    /// By thread id (what FUSE gives).
    threads: HashMap<u32, Seen>,
    /// By (process id, start time): its command.
    processes: HashMap<(u32, u64), Arc<Command>>,
}

#[derive(Debug, Clone)]
struct Seen {
    /// The thread's start time and name, when last read.
    start: u64,
    comm: Vec<u8>,
    checked: Instant,
    pid: u32,
    command: Arc<Command>,
}

impl Who {
    /// Who is behind a request of thread `tid` (FUSE's pid) for `uid`, now.
    pub fn actor(&self, tid: u32, uid: u32) -> Actor {
        let mut actor = Actor::unknown(tid, uid);
        if tid == 0 {
            return actor;
        }
        let now = Instant::now();
        if let Some(s) = self.cache.lock().threads.get_mut(&tid) {
            if now.duration_since(s.checked) < TRUST {
                actor.pid = s.pid;
                actor.command = Some(Arc::clone(&s.command));
                return actor;
            }
        }
        // Read without the lock: a slow /proc holds back no other caller.
        let Some((comm, start)) = read_stat(tid) else {
            return actor;
        };
        {
            let mut c = self.cache.lock();
            if let Some(s) = c.threads.get_mut(&tid) {
                if s.start == start && s.comm == comm {
                    s.checked = now;
                    actor.pid = s.pid;
                    actor.command = Some(Arc::clone(&s.command));
                    return actor;
                }
            }
        }
        let Some((pid, command)) = self.process(tid, &comm, start) else {
            return actor;
        };
        let mut c = self.cache.lock();
        if c.threads.len() >= THREADS_MAX {
            c.threads.clear();
        }
        c.threads.insert(
            tid,
            Seen {
                start,
                comm,
                checked: now,
                pid,
                command: Arc::clone(&command),
            },
        );
        actor.pid = pid;
        actor.command = Some(command);
        actor
    }

    /// Thread `tid`'s process and its command (read once per process and
    /// program); None when it is gone.
    fn process(&self, tid: u32, comm: &[u8], start: u64) -> Option<(u32, Arc<Command>)> {
        let pid = tgid(tid)?;
        let (pcomm, pstart) = match pid == tid {
            true => (comm.to_vec(), start),
            false => read_stat(pid)?,
        };
        if let Some(cmd) = self.cache.lock().processes.get(&(pid, pstart)) {
            // The same process; the same program unless it `exec`ed since.
            if cmd.comm == pcomm {
                return Some((pid, Arc::clone(cmd)));
            }
        }
        let argv = read_argv(pid)?;
        let cmd = Arc::new(Command { comm: pcomm, argv });
        let mut c = self.cache.lock();
        if c.processes.len() >= PROCESSES_MAX {
            c.processes.clear();
        }
        c.processes.insert((pid, pstart), Arc::clone(&cmd));
        Some((pid, cmd))
    }
}

/// (comm, start time) of `/proc/PID/stat`.
fn read_stat(pid: u32) -> Option<(Vec<u8>, u64)> {
    let mut buf = [0u8; 1024];
    let n = read_some(&format!("/proc/{pid}/stat"), &mut buf)?;
    parse_stat(&buf[..n])
}

/// The thread group of thread `tid`.
fn tgid(tid: u32) -> Option<u32> {
    let status = std::fs::read(format!("/proc/{tid}/status")).ok()?;
    status
        .split(|b| *b == b'\n')
        .find_map(|l| l.strip_prefix(b"Tgid:"))
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| v.trim().parse().ok())
}

/// The first [`ARGV_MAX`] bytes of `/proc/PID/cmdline`, NULs as spaces;
/// None when the process is gone.
fn read_argv(pid: u32) -> Option<Vec<u8>> {
    let mut buf = [0u8; ARGV_MAX];
    let n = read_some(&format!("/proc/{pid}/cmdline"), &mut buf)?;
    Some(argv_of(&buf[..n]))
}

/// Read up to `buf.len()` bytes of `path`.
fn read_some(path: &str, buf: &mut [u8]) -> Option<usize> {
    let mut f = std::fs::File::open(path).ok()?;
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    Some(n)
}

/// `cmdline` bytes as kept: trailing NULs cut, the others as spaces.
pub fn argv_of(raw: &[u8]) -> Vec<u8> {
    let end = raw.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
    raw[..end]
        .iter()
        .map(|b| if *b == 0 { b' ' } else { *b })
        .collect()
}

/// (comm, start time) from the text of `/proc/PID/stat`: the name is in
/// parentheses and may hold anything (up to the last `)`); the start time
/// is the 22nd field.
pub fn parse_stat(stat: &[u8]) -> Option<(Vec<u8>, u64)> {
    let open = stat.iter().position(|b| *b == b'(')?;
    let close = stat.iter().rposition(|b| *b == b')')?;
    let comm = stat.get(open + 1..close)?.to_vec();
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    // After the name: state (3rd field) .. starttime (22nd).
    let start = rest.split_whitespace().nth(19)?.parse().ok()?;
    Some((comm, start))
}

/// One path's kept changes, oldest first: between two marks its changes
/// crossed (and before the first, and after the last), the first and the
/// last change there; each with the sequence number it was recorded
/// under.
pub type Trail = Vec<(u64, Actor)>;

/// A trail carried to a new name by a rename numbered `seq`: its first
/// and last change, both under the rename's number (the name had none of
/// them before it).
fn moved(t: &[(u64, Actor)], seq: u64) -> Trail {
    let mut out: Trail = t
        .first()
        .map(|(_, a)| (seq, a.clone()))
        .into_iter()
        .collect();
    if t.len() > 1 {
        out.extend(t.last().map(|(_, a)| (seq, a.clone())));
    }
    out
}

/// Each changed path's [`Trail`], by path (relative to the zone dir), and
/// the marks (sequence numbers a checkpoint took with [`Trails::mark`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trails {
    map: BTreeMap<PathKey, Trail>,
    /// The sequence numbers at which a path's record was replaced (a
    /// rename over it) while a mark still needed the record before: its
    /// first and last are those from the latest on.
    starts: BTreeMap<PathKey, Vec<u64>>,
    marks: Vec<u64>,
    /// The last sequence number given.
    seq: u64,
    /// A path went unrecorded ([`PATHS_MAX`]).
    pub full: bool,
}

impl Trails {
    /// The last sequence number given (0: none yet).
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// How many paths have a record.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The marks, oldest first.
    pub fn marks(&self) -> &[u64] {
        &self.marks
    }

    /// Each path's trail, in path order.
    pub fn iter(&self) -> impl Iterator<Item = (&PathBuf, &Trail)> {
        self.map.iter().map(|(k, t)| (k.path(), t))
    }

    /// A change to `rel` by `by`; its sequence number.
    pub fn change(&mut self, rel: &Path, by: Actor) -> u64 {
        self.numbered(|t, seq| t.change_at(rel, seq, by))
    }

    /// [`Self::change`] under a given sequence number (replaying a log).
    pub fn change_at(&mut self, rel: &Path, seq: u64, by: Actor) {
        self.seq = self.seq.max(seq);
        let mark = self.mark_before(seq);
        let key = PathKey::from(rel);
        let start = self.start_of(&key);
        let len = self.map.len();
        match self.map.get_mut(&key) {
            None if len >= PATHS_MAX => self.full = true,
            None => {
                self.map.insert(key, vec![(seq, by)]);
            }
            Some(t) => {
                let n = t.len();
                // The last two changes are newer than the latest mark (and
                // than the path's latest start): the last is replaced (the
                // first after the mark stays).
                if n >= 2 && t[n - 2].0 > mark && t[n - 2].0 >= start {
                    t[n - 1] = (seq, by);
                } else {
                    t.push((seq, by));
                }
            }
        }
    }

    /// A trail's entry as it was kept (reading back a record written out
    /// whole): appended as is, nothing replaced.
    pub fn push_at(&mut self, rel: &Path, seq: u64, by: Actor) {
        self.seq = self.seq.max(seq);
        let len = self.map.len();
        let key = PathKey::from(rel);
        match self.map.get_mut(&key) {
            None if len >= PATHS_MAX => self.full = true,
            None => {
                self.map.insert(key, vec![(seq, by)]);
            }
            Some(t) => t.push((seq, by)),
        }
    }

    /// The latest mark before `seq` (0: none).
    fn mark_before(&self, seq: u64) -> u64 {
        let i = self.marks.partition_point(|m| *m < seq);
        if i == 0 { 0 } else { self.marks[i - 1] }
    }

    /// A rename of `from` to `to` by `by`: `to` (and what was under `from`,
    /// now under `to`) takes `from`'s record, then both get the rename as
    /// their last change (`from`'s record stays: the report may show it
    /// deleted). A record under `to` that nothing lands on stays (what was
    /// removed there: `to` was empty). Its sequence number.
    pub fn rename(&mut self, from: &Path, to: &Path, by: Actor) -> u64 {
        self.numbered(|t, seq| t.rename_at(from, to, seq, by))
    }

    /// [`Self::rename`] under a given sequence number.
    pub fn rename_at(&mut self, from: &Path, to: &Path, seq: u64, by: Actor) {
        self.move_where(from, to, false, seq, by, &|_| true);
    }

    /// An exchange of `a` and `b` by `by` (`renameat2` with
    /// `RENAME_EXCHANGE`): each name (and what is under it) takes the
    /// other's record, then both get the exchange as their last change.
    /// Its sequence number.
    pub fn exchange(&mut self, a: &Path, b: &Path, by: Actor) -> u64 {
        self.numbered(|t, seq| t.exchange_at(a, b, seq, by))
    }

    /// [`Self::exchange`] under a given sequence number.
    pub fn exchange_at(&mut self, a: &Path, b: &Path, seq: u64, by: Actor) {
        self.move_where(a, b, true, seq, by, &|_| true);
    }

    /// A rename of `from` to `to` (with `exchange`: of `to` to `from` as
    /// well) at `seq` by `by`, where of the records under the moved names
    /// only those `carry` says go with them (the others stay where they
    /// are: a plain zone's record of what was deleted there).
    pub fn move_where(
        &mut self,
        from: &Path,
        to: &Path,
        exchange: bool,
        seq: u64,
        by: Actor,
        carry: &dyn Fn(&Path) -> bool,
    ) {
        self.seq = self.seq.max(seq);
        // (The kernel moves no directory under itself, nor over one that
        // holds it: the two trees are apart.)
        if from != to && !from.starts_with(to) && !to.starts_with(from) {
            let both = [(from, to), (to, from)];
            let moves = if exchange { &both[..] } else { &both[..1] };
            self.carry(moves, seq, carry);
            let taken: Vec<(&Path, Trail)> = moves
                .iter()
                .map(|(old, new)| (*new, moved(self.current(old), seq)))
                .collect();
            // What a checkpoint before it saw stays, behind a start.
            let mark = self.mark_before(seq);
            for (name, t) in taken {
                self.replace(name, mark, seq);
                if !t.is_empty() {
                    self.map.entry(PathKey::from(name)).or_default().extend(t);
                }
            }
        }
        self.change_at(from, seq, by.clone());
        self.change_at(to, seq, by);
    }

    /// Give the next sequence number to `f`; that number.
    fn numbered(&mut self, f: impl FnOnce(&mut Self, u64)) -> u64 {
        self.seq += 1;
        let seq = self.seq;
        f(self, seq);
        seq
    }

    /// The records strictly under each `(from, to)`'s `from` that `carry`
    /// says, moved to the same place under `to` (all taken before any is
    /// put: under an exchange a path is one record's old place and
    /// another's new one). What a checkpoint before `seq` saw stays with
    /// each place, behind a start; the moved records start at `seq`, so a
    /// rewind to before it drops them.
    fn carry(&mut self, moves: &[(&Path, &Path)], seq: u64, carry: &dyn Fn(&Path) -> bool) {
        let mark = self.mark_before(seq);
        let mut carried = Vec::new();
        for (from, to) in moves {
            let below: Vec<PathBuf> = self
                .map
                .range((Bound::Excluded(PathKey::from(*from)), Bound::Unbounded))
                .map(|(p, _)| p.path())
                .take_while(|p| p.starts_with(from))
                .filter(|p| carry(p))
                .cloned()
                .collect();
            for p in below {
                let Ok(tail) = p.strip_prefix(from) else {
                    continue;
                };
                // (A record kept only for a checkpoint has nothing to carry.)
                let t = moved(self.current(&p), seq);
                if !t.is_empty() {
                    carried.push((p.clone(), to.join(tail), t));
                }
            }
        }
        for (old, _, _) in &carried {
            self.replace(old, mark, seq);
        }
        for (_, new, t) in carried {
            self.replace(&new, mark, seq);
            self.map.entry(PathKey::from(new)).or_default().extend(t);
        }
    }

    /// `rel`'s record replaced at `seq` (a rename over it): dropped, but
    /// for what the latest mark (`mark`) needs, kept behind a start.
    fn replace(&mut self, rel: &Path, mark: u64, seq: u64) {
        let key = PathKey::from(rel);
        let Some(t) = self.map.get_mut(&key) else {
            return;
        };
        t.retain(|(s, _)| *s <= mark);
        if t.is_empty() {
            self.map.remove(&key);
            self.starts.remove(&key);
        } else {
            self.start_at(rel, seq);
        }
    }

    /// A start of `rel`'s record at `seq` (replaying a log).
    pub fn start_at(&mut self, rel: &Path, seq: u64) {
        let s = self.starts.entry(PathKey::from(rel)).or_default();
        if s.last().is_none_or(|l| *l < seq) {
            s.push(seq);
        }
    }

    /// Each path's starts (see [`Self::start_at`]), in path order.
    pub fn starts(&self) -> impl Iterator<Item = (&PathBuf, &Vec<u64>)> {
        self.starts.iter().map(|(k, s)| (k.path(), s))
    }

    /// The latest start of the path `key` (0: none).
    fn start_of(&self, key: &PathKey) -> u64 {
        self.starts
            .get(key)
            .and_then(|s| s.last())
            .copied()
            .unwrap_or(0)
    }

    /// `rel`'s trail from its latest start.
    fn current(&self, rel: &Path) -> &[(u64, Actor)] {
        let key = PathKey::from(rel);
        let Some(t) = self.map.get(&key) else {
            return &[];
        };
        let start = self.start_of(&key);
        &t[t.partition_point(|(s, _)| *s < start)..]
    }

    /// Keep only what `keep` says of the trails of `paths` (and their
    /// starts); a path left with no change loses its record. Whether any
    /// change was dropped.
    fn retain_in(&mut self, paths: Vec<PathBuf>, keep: impl Fn(u64) -> bool) -> bool {
        let mut dropped = false;
        for p in paths {
            let p = PathKey::from(p);
            if let Some(t) = self.map.get_mut(&p) {
                let had = t.len();
                t.retain(|(s, _)| keep(*s));
                dropped |= t.len() != had;
                if t.is_empty() {
                    self.map.remove(&p);
                }
            }
            match self.starts.get_mut(&p) {
                Some(s) if self.map.contains_key(&p) => {
                    s.retain(|s| keep(*s));
                    if s.is_empty() {
                        self.starts.remove(&p);
                    }
                }
                Some(_) => {
                    self.starts.remove(&p);
                }
                None => {}
            }
        }
        dropped
    }

    /// The paths with a record at or under `tree`.
    fn under(&self, tree: &Path) -> Vec<PathBuf> {
        self.map
            .range((Bound::Included(PathKey::from(tree)), Bound::Unbounded))
            .map(|(p, _)| p.path())
            .take_while(|p| p.starts_with(tree))
            .cloned()
            .collect()
    }

    /// Drop the changes after sequence number `seq` of `tree` and of
    /// every path under it (a rewind of those paths to the mark `seq`).
    pub fn rewind_tree(&mut self, tree: &Path, seq: u64) {
        let under = self.under(tree);
        self.retain_in(under, |s| s <= seq);
        self.seq = self.seq.max(seq);
    }

    /// `rel`'s first and last change, if it has a record.
    pub fn first_last(&self, rel: &Path) -> Option<FirstLast> {
        let t = self.current(rel);
        Some(FirstLast {
            first: t.first()?.1.clone(),
            last: t.last()?.1.clone(),
        })
    }

    /// Mark this point (a checkpoint): the last change of each path before
    /// it is kept from now on, for [`Self::as_of`] and [`Self::rewind`].
    /// The mark's sequence number.
    pub fn mark(&mut self) -> u64 {
        let seq = self.seq;
        self.mark_at(seq);
        seq
    }

    /// [`Self::mark`] at a given sequence number (replaying a log).
    pub fn mark_at(&mut self, seq: u64) {
        // Changes after it number higher, whatever was dropped since.
        self.seq = self.seq.max(seq);
        if self.marks.last().is_none_or(|m| *m < seq) {
            self.marks.push(seq);
        }
    }

    /// Keep only the marks `keep` says (those of checkpoints still kept),
    /// and of each trail only what they need: between two marks left
    /// (and a path's starts), the first and last change there.
    pub fn drop_marks(&mut self, keep: impl Fn(u64) -> bool) {
        self.marks.retain(|m| keep(*m));
        let marks = &self.marks;
        for (p, t) in self.map.iter_mut() {
            let starts = self.starts.get(p);
            let group = |s: u64| {
                (
                    marks.partition_point(|m| *m < s),
                    starts.map_or(0, |st| st.partition_point(|x| *x <= s)),
                )
            };
            let groups: Vec<_> = t.iter().map(|(s, _)| group(*s)).collect();
            let mut i = 0;
            t.retain(|_| {
                let g = groups[i];
                let inner = i > 0 && groups[i - 1] == g && groups.get(i + 1) == Some(&g);
                i += 1;
                !inner
            });
        }
    }

    /// The record as it was at sequence number `seq` (exact at a mark).
    pub fn as_of(&self, seq: u64) -> Trails {
        let mut t = self.clone();
        t.rewind(seq);
        t
    }

    /// Drop every change after sequence number `seq` (a rewind to the
    /// mark `seq`): a path first changed after it loses its record; later
    /// marks go. Renames after `seq` are not undone: their paths keep
    /// the record they had before it, if any.
    pub fn rewind(&mut self, seq: u64) {
        let all: Vec<PathBuf> = self.map.keys().map(|k| k.path().clone()).collect();
        self.retain_in(all, |s| s <= seq);
        self.marks.retain(|m| *m <= seq);
        self.seq = self.seq.max(seq);
    }

    /// Drop the records of `exact` (those paths only) and of `trees` (with
    /// everything under them): what a commit or discard cleared.
    pub fn forget(&mut self, exact: &[PathBuf], trees: &[PathBuf]) -> bool {
        self.forget_upto(exact, trees, None)
    }

    /// [`Self::forget`] of the changes up to sequence number `upto` only
    /// (none: all): what a `commit --upto` applied; a path changed after
    /// it keeps those later changes (its first now the first after it).
    /// Whether any change was dropped. Costs what the paths named hold,
    /// not what the whole log holds: a file made and removed again through
    /// the mount forgets its record on every unlink.
    pub fn forget_upto(&mut self, exact: &[PathBuf], trees: &[PathBuf], upto: Option<u64>) -> bool {
        let mut gone: Vec<PathBuf> = exact.to_vec();
        for t in trees {
            gone.extend(self.under(t));
        }
        let upto = upto.unwrap_or(u64::MAX);
        let dropped = self.retain_in(gone, |s| s > upto);
        if self.map.len() < PATHS_MAX {
            self.full = false;
        }
        dropped
    }
}

#[cfg(test)]
mod tests;

//! Creates whose approval is pending, and interrupted calls.
//!
//! The kernel holds a directory's lock across CREATE: a create held there
//! for a human's decision would freeze every lookup, listing, create and
//! delete in that directory (DESIGN §4). So a create that must be asked
//! about is asked, the empty file made at once (`O_EXCL`, as the caller),
//! and the CREATE answered with a handle whose data goes through the
//! daemon (`FOPEN_DIRECT_IO`: no passthrough, no page cache). The work is
//! held a step later: that handle's writes, fsync, fallocate, truncate and
//! copies into it wait on the same request, each withdrawable on its own
//! (so does a metadata change of the file by path, `touch`'s times). Each
//! of those holds the file's lock in the kernel, which an unlink, rename
//! or link of the file would wait for holding its directory's: see
//! [`PendingCreates`] for how they are let go then.
//! Its close is not held: a close may come from a process in the middle of
//! an exec (a close-on-exec file, in the creator or a child that inherited
//! it) or an exit, which nothing can interrupt and which even blocks
//! readers of its `/proc/PID/stat` meanwhile. Allow: they proceed. Deny,
//! timeout or withdrawal: they fail (EACCES), the file is removed if it is
//! still the one made, and the kernel is told to forget the name.
//!
//! A `FUSE_INTERRUPT` names the request it interrupts; the waiting call it
//! names is answered EINTR ([`Core::interrupt`]). One that arrives before
//! its call is waiting is kept for a moment and applied once it is.
//!
//! Lock order: a [`HeldCreate`]'s state, then the broker's.

use std::collections::{HashMap, VecDeque};
use std::ffi::OsString;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::gate::Hold;
use super::{Core, Created, Ctx, FileOpen, Handle, Opening, Respond};
use crate::approval::{AskRequest, Continuation, Verdict, Wait};
use crate::backing;
use crate::error::{FsError, FsResult, Refusal};
use crate::fs::changes;
use crate::fs::inodes::Node;
use crate::policy::AskItem;

/// How long an interrupt whose call is not (yet) waiting is kept.
const EARLY_KEPT: Duration = Duration::from_secs(10);
/// The most such interrupts kept.
const EARLY_MAX: usize = 1024;

/// A file made at once for a create whose approval is pending.
#[derive(Debug)]
pub struct HeldCreate {
    /// The CREATE's FUSE request id: its (answered) waiter in the broker,
    /// which later calls join.
    unique: u64,
    state: Mutex<HeldState>,
    /// A call held on this file was interrupted: if its handle is released
    /// before the decision, the request is withdrawn (the caller gave up,
    /// or was killed).
    interrupted: AtomicBool,
}

impl HeldCreate {
    /// A call held on this file was withdrawn (interrupted, or its caller
    /// killed): the caller gave up, and the request goes when the file's
    /// last handle is released ([`Core::let_go`]).
    pub(super) fn gave_up(&self) {
        self.interrupted.store(true, Ordering::Relaxed);
    }
}

enum HeldState {
    /// Asked; the file not made yet. A verdict that came at once.
    Asking(Option<Verdict>),
    /// Made; the decision pending. `queue`: calls that came after the
    /// broker took the decision and before it told this file.
    Waiting {
        made: Made,
        queue: Vec<Continuation>,
    },
    Decided(Verdict),
    /// The file could not be made; the request was withdrawn.
    Abandoned,
}

impl std::fmt::Debug for HeldState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeldState::Asking(v) => write!(f, "Asking({v:?})"),
            HeldState::Waiting { queue, .. } => write!(f, "Waiting({} queued)", queue.len()),
            HeldState::Decided(v) => write!(f, "Decided({v:?})"),
            HeldState::Abandoned => f.write_str("Abandoned"),
        }
    }
}

/// What was made, to record once allowed or remove once not.
struct Made {
    dir: Arc<Node>,
    name: OsString,
    /// (dev, ino) of the file made.
    key: (u64, u64),
    /// Its node.
    node: u64,
    expected: changes::Expected,
    ctx: Ctx,
    first: Option<AskItem>,
}

/// Files whose create is pending, by node. Their held calls (a write,
/// fsync, fallocate, truncate, copy into the file, utimes) hold the
/// file's lock in the kernel, and an unlink, rename or link of the file
/// waits for that lock unkillably while holding its directory's (across
/// directories, the filesystem's rename lock too): the whole directory
/// would wait for a human. So the kernel keeps no entry of such a file
/// (TTL 0) and looks its name up before each use, and while one is
/// pending every thread that looks a name up is watched for a moment: one
/// that then sleeps in the kernel (`D`) at two looks in a row lets every
/// held call go, told to retry (EAGAIN; the requests stay pending and a
/// retry by the same uid joins them). A process that only writes to the
/// file it made, or a `stat` of it, lets the calls wait on. The watch
/// reads `/proc/TID/stat`: a thread it can't read there (gone, or hidden
/// by `hidepid`) is not watched.
#[derive(Debug, Default)]
pub(crate) struct PendingCreates {
    /// How many there are: the lookup path checks it without the lock.
    count: AtomicUsize,
    by_node: Mutex<HashMap<u64, Arc<HeldCreate>>>,
    /// Threads that looked a name up meanwhile (with when they last
    /// did), and whether a watch of them is on.
    watched: Mutex<HashMap<u32, Instant>>,
    /// Metadata calls made by path on such a file (`touch`'s setting of
    /// its times): they wait for the decision too, and go with the rest.
    by_path: Mutex<Vec<u64>>,
    watching: AtomicBool,
}

/// The most metadata calls by path on files whose create is pending that
/// wait for the decision (more are told to retry after a moment).
const MAX_HELD_BY_PATH: usize = 1024;

/// How often, and how many times, a thread that looked a name up is
/// looked at: it is stuck when it sleeps in the kernel at two looks in a
/// row.
const LOOK_EVERY: Duration = Duration::from_millis(10);
const LOOKS: u32 = 20;

impl PendingCreates {
    fn add(&self, node: u64, held: Arc<HeldCreate>) {
        let mut m = self.by_node.lock();
        m.insert(node, held);
        self.count.store(m.len(), Ordering::Release);
    }

    fn remove(&self, node: u64) {
        let mut m = self.by_node.lock();
        m.remove(&node);
        self.count.store(m.len(), Ordering::Release);
        if m.is_empty() {
            self.by_path.lock().clear();
        }
    }

    fn any(&self) -> bool {
        self.count.load(Ordering::Acquire) > 0
    }

    /// Whether node `node` is a file whose create is pending.
    pub(super) fn holds(&self, node: u64) -> bool {
        self.any() && self.by_node.lock().contains_key(&node)
    }

    /// The pending create of node `node`, if it is one.
    fn of(&self, node: u64) -> Option<Arc<HeldCreate>> {
        if !self.any() {
            return None;
        }
        self.by_node.lock().get(&node).cloned()
    }

    /// The calls whose requests' waiting calls go when a watched thread
    /// is stuck: every pending create's, and the metadata calls by path
    /// on those files (kept until no create is pending: one may not be
    /// waiting yet; letting a call go that no longer waits does nothing).
    fn uniques(&self) -> Vec<u64> {
        let mut u: Vec<u64> = self.by_node.lock().values().map(|h| h.unique).collect();
        u.extend(self.by_path.lock().iter().copied());
        u
    }

    /// Watch the threads in `watched` (more may be added meanwhile), each
    /// until [`LOOKS`] looks have passed since its last lookup, until none
    /// is left; true (and none left) as soon as one sleeps in the kernel
    /// at two looks in a row.
    fn watch(&self) -> bool {
        // Looks in a row that found each thread asleep.
        let mut asleep: HashMap<u32, u32> = HashMap::new();
        let watched_for = LOOK_EVERY * LOOKS;
        loop {
            std::thread::sleep(LOOK_EVERY);
            let tids: Vec<u32> = self.watched.lock().keys().copied().collect();
            if tids.is_empty() {
                return false;
            }
            let mut gone = Vec::new();
            for tid in tids {
                let n = asleep.entry(tid).or_default();
                match crate::approval::caller::blocked_in_kernel(tid) {
                    Some(true) => *n += 1,
                    Some(false) => *n = 0,
                    None => gone.push(tid),
                }
                if *n >= 2 {
                    self.watched.lock().clear();
                    return true;
                }
            }
            let now = Instant::now();
            let mut w = self.watched.lock();
            // A thread that looked a name up again meanwhile stays.
            w.retain(|tid, last| !gone.contains(tid) && now.duration_since(*last) < watched_for);
            asleep.retain(|tid, _| w.contains_key(tid));
            if w.is_empty() {
                return false;
            }
        }
    }
}

/// Interrupts that came before their call was waiting.
#[derive(Debug, Default)]
pub(crate) struct EarlyInterrupts(Mutex<VecDeque<(u64, Instant)>>);

/// A create to ask about: what `create` resolved and gated.
pub(super) struct CreateAsk {
    pub ctx: Ctx,
    pub items: Vec<AskItem>,
    pub dir: Arc<Node>,
    pub name: OsString,
    pub mode: u32,
    pub flags: i32,
    pub expected: changes::Expected,
}

impl Core {
    /// Ask about a create without holding the CREATE (see the module
    /// header); answer `reply` at once either way.
    pub(super) fn create_asking(self: &Arc<Self>, c: CreateAsk, reply: impl Opening<Created>) {
        let held = Arc::new(HeldCreate {
            unique: c.ctx.unique,
            state: Mutex::new(HeldState::Asking(None)),
            interrupted: AtomicBool::new(false),
        });
        let first = c.items.first().cloned();
        let (core, h) = (Arc::clone(self), Arc::clone(&held));
        let ask = AskRequest {
            items: c.items,
            op: c.ctx.op,
            target: None,
            source: None,
            pid: c.ctx.pid,
            uid: c.ctx.uid,
            unique: c.ctx.unique,
            wait: Wait::Detached,
        };
        self.broker
            .ask(ask, Box::new(move |v| core.create_decided(&h, v)));
        let mut st = held.state.lock();
        if let HeldState::Asking(Some(v)) = *st {
            // Answered at once (a cached decision, no approvals): as any
            // other create.
            drop(st);
            let r = match v {
                Verdict::Allow => {
                    let _still = self.acting();
                    let r = self.create_as(&c.ctx.caller(), &c.dir, &c.name, c.mode, c.flags, None);
                    if r.is_ok() {
                        self.changelog.record(c.expected);
                    }
                    r
                }
                v => Err(self.not_allowed(&c.ctx, first.as_ref(), v)),
            };
            return self.answer_create(r, false, reply);
        }
        let made = {
            let _still = self.acting();
            let flags = c.flags | libc::O_EXCL;
            let held = Some(Arc::clone(&held));
            self.create_as(&c.ctx.caller(), &c.dir, &c.name, c.mode, flags, held)
        };
        match made {
            Ok((entry, node, fh, direct)) => {
                self.pending_creates.add(node.ino, Arc::clone(&held));
                // Its entry goes to the kernel with TTL 0 (see
                // `PendingCreates`).
                let entry = super::Entry {
                    ttl: Duration::ZERO,
                    ..entry
                };
                *st = HeldState::Waiting {
                    made: Made {
                        dir: c.dir,
                        name: c.name,
                        key: node.key(),
                        node: node.ino,
                        expected: c.expected,
                        ctx: c.ctx,
                        first,
                    },
                    queue: Vec::new(),
                };
                drop(st);
                self.answer_create(Ok((entry, node, fh, direct)), true, reply);
            }
            Err(e) => {
                *st = HeldState::Abandoned;
                drop(st);
                // Nothing was made: nothing to decide.
                self.broker.interrupt(c.ctx.unique);
                // The name exists in the backing dir though the kernel
                // thought it missing (made on the host meanwhile): ESTALE
                // makes the kernel look it up again and open it as an
                // existing file, which asks without holding the directory.
                let e = match e {
                    FsError::Os(libc::EEXIST) if c.flags & libc::O_EXCL == 0 => {
                        FsError::Os(libc::ESTALE)
                    }
                    e => e,
                };
                reply.respond(Err(e));
            }
        }
    }

    /// Answer a CREATE; `held`: its file's approval is pending.
    pub(super) fn answer_create(
        &self,
        r: FsResult<(super::Entry, Arc<Node>, u64, bool)>,
        held: bool,
        reply: impl Opening<Created>,
    ) {
        let r = r.map(|(entry, node, fh, direct)| {
            let backing = match held {
                true => None,
                false => self.passthrough_id(&node, fh, |fd| reply.register(fd)),
            };
            Created {
                entry,
                open: FileOpen {
                    fh,
                    backing,
                    direct,
                    held,
                },
            }
        });
        reply.respond(r)
    }

    /// The broker's verdict on a create asked by [`Core::create_asking`].
    fn create_decided(&self, held: &HeldCreate, v: Verdict) {
        let mut st = held.state.lock();
        match std::mem::replace(&mut *st, HeldState::Decided(v)) {
            HeldState::Asking(_) => *st = HeldState::Asking(Some(v)),
            HeldState::Waiting { made, queue } => {
                drop(st);
                self.pending_creates.remove(made.node);
                tracing::info!(verdict = ?v, name = ?made.name, "pending create decided");
                match v {
                    Verdict::Allow => self.changelog.record(made.expected),
                    v => {
                        self.unmake(&made);
                        if v != Verdict::Withdrawn {
                            self.not_allowed(&made.ctx, made.first.as_ref(), v);
                        }
                    }
                }
                for then in queue {
                    then(v);
                }
            }
            HeldState::Abandoned => *st = HeldState::Abandoned,
            HeldState::Decided(before) => *st = HeldState::Decided(before),
        }
    }

    /// Remove the file a refused create made, if its name still names it,
    /// and tell the kernel to forget the name.
    fn unmake(&self, made: &Made) {
        if let Ok(dir) = self.reach.fd_of(&made.dir) {
            let same = backing::stat_at(dir.as_fd(), &made.name)
                .is_ok_and(|st| (st.st_dev, st.st_ino) == made.key);
            if same {
                if let Err(e) = backing::unlink(dir.as_fd(), &made.name) {
                    tracing::warn!(name = ?made.name, "cannot remove a refused create: {e}");
                }
            }
        }
        // Not on this thread: the kernel takes the directory's lock to
        // forget a name, and this may be the broker's watcher, which a
        // call holding that lock (a mkdir there, within its short hold)
        // waits for.
        if let Some(n) = self.notifier.get().cloned() {
            let (dir, name) = (made.dir.ino, made.name.clone());
            let spawned = std::thread::Builder::new()
                .name("zm-forget".into())
                .spawn(move || {
                    let _ = n.inval_entry(crate::fuse::INodeNo(dir), &name);
                });
            if let Err(e) = spawned {
                tracing::warn!("cannot tell the kernel to forget a refused create's name: {e}");
            }
        }
    }

    /// The pending create that calls on open file `fh` wait for; None for
    /// a handle like any other (or one whose create was allowed).
    pub fn held(&self, fh: u64) -> Option<Arc<HeldCreate>> {
        let h = self.handles.get(fh).ok()?;
        let Handle::File {
            held: Some(held), ..
        } = &*h
        else {
            return None;
        };
        match *held.state.lock() {
            HeldState::Decided(Verdict::Allow) => None,
            _ => Some(Arc::clone(held)),
        }
    }

    /// Run `op` for call `ctx` once the pending create `held` is allowed;
    /// answer `respond` EACCES if it is not, EINTR if this call is
    /// interrupted first.
    pub fn after_held<T: Send + 'static>(
        self: &Arc<Self>,
        held: Arc<HeldCreate>,
        ctx: &Ctx,
        respond: impl Respond<T>,
        op: impl FnOnce(&Core) -> FsResult<T> + Send + 'static,
    ) {
        let core = Arc::clone(self);
        self.when_held(held, ctx, move |r| {
            respond.respond(r.and_then(|()| op(&core)))
        });
    }

    /// Call `go` with Ok once the pending create `held` is allowed, with
    /// EACCES if it is not, EINTR if call `ctx` is interrupted first, and
    /// EAGAIN if a thread that looked a name up meanwhile then sleeps in
    /// the kernel (see [`PendingCreates`]).
    pub(super) fn when_held(
        self: &Arc<Self>,
        held: Arc<HeldCreate>,
        ctx: &Ctx,
        go: impl FnOnce(FsResult<()>) + Send + 'static,
    ) {
        let h = Arc::clone(&held);
        let (core, call) = (Arc::clone(self), *ctx);
        let mut st = held.state.lock();
        let first = match &*st {
            HeldState::Waiting { made, .. } => made.first.clone(),
            _ => None,
        };
        let then: Continuation = Box::new(move |v| {
            go(match v {
                Verdict::Allow => Ok(()),
                Verdict::Withdrawn => {
                    h.gave_up();
                    Err(FsError::Os(libc::EINTR))
                }
                // Told to retry: logged as any call told so.
                Verdict::Later(_) => Err(core.not_allowed(&call, first.as_ref(), v)),
                Verdict::Deny => Err(FsError::Refused(Refusal::Denied)),
            })
        });
        match &mut *st {
            // This call may not wait (see `Ctx::may_wait`): refused now.
            HeldState::Waiting { .. } if !ctx.may_wait => {
                drop(st);
                tracing::warn!(
                    op = ctx.op,
                    "refused: a call on a file whose create waits for a decision, and its io_uring queue is all but full of waiting calls"
                );
                then(Verdict::Deny)
            }
            HeldState::Waiting { queue, .. } => {
                tracing::debug!(
                    op = ctx.op,
                    unique = ctx.unique,
                    "held until its create is decided, or for a moment"
                );
                match self.broker.join(held.unique, ctx.unique, ctx.pid, then) {
                    Ok(()) => {
                        drop(st);
                        self.interrupted_meanwhile(ctx.unique);
                    }
                    // Decided, and about to tell this file.
                    Err(then) => queue.push(then),
                }
            }
            HeldState::Decided(v) => {
                let v = match v {
                    Verdict::Allow => Verdict::Allow,
                    _ => Verdict::Deny,
                };
                drop(st);
                then(v)
            }
            HeldState::Asking(_) | HeldState::Abandoned => {
                drop(st);
                then(Verdict::Deny)
            }
        }
    }

    /// Thread `tid` looked a name up (found or not): while a create is
    /// pending, it is watched for a moment, and one that then sleeps in
    /// the kernel lets every held call go (see [`PendingCreates`]).
    pub(super) fn looked_up(self: &Arc<Self>, tid: u32) {
        let pc = &self.pending_creates;
        if !pc.any() {
            return;
        }
        // A thread the daemon can't see (another PID namespace): at once.
        if tid == 0 {
            return self.let_held_calls_go("a thread the daemon can't see looked a name up");
        }
        // Under the list's lock: a watch ending now either sees this
        // thread or has said it ended (below).
        let start = {
            let mut w = pc.watched.lock();
            w.insert(tid, Instant::now());
            !pc.watching.swap(true, Ordering::AcqRel)
        };
        if !start {
            return;
        }
        let core = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("zm-held-watch".into())
            .spawn(move || {
                let pc = &core.pending_creates;
                loop {
                    if pc.watch() {
                        core.let_held_calls_go(
                            "a thread that looked a name up sleeps in the kernel",
                        );
                    }
                    let w = pc.watched.lock();
                    if w.is_empty() {
                        pc.watching.store(false, Ordering::Release);
                        return;
                    }
                }
            });
        if let Err(e) = spawned {
            pc.watching.store(false, Ordering::Release);
            pc.watched.lock().clear();
            self.let_held_calls_go(&format!(
                "cannot watch the threads that look names up ({e})"
            ));
        }
    }

    /// How a metadata change of node `ino` (chmod, chown, utimes,
    /// truncate, an xattr change) by call `ctx` waits for its decision:
    /// the kernel holds the node's lock across it, so at most a moment
    /// ([`Hold::Locked`]); on a file whose create is pending, until the
    /// decision or until a watched thread is stuck, as the file's other
    /// held calls (see [`PendingCreates`]), and withdrawn as they are: a
    /// caller interrupted or killed meanwhile marks the create given up
    /// ([`Hold::OnCreate`]). The kernel sends these without the file's
    /// handle (fchmod, fchown, futimens and fsetxattr too), so they can't
    /// go through [`Core::when_held`].
    pub(super) fn metadata_hold(&self, ino: u64, ctx: &Ctx) -> Hold {
        let pc = &self.pending_creates;
        let Some(held) = pc.of(ino) else {
            return Hold::Locked;
        };
        let mut by_path = pc.by_path.lock();
        if by_path.len() >= MAX_HELD_BY_PATH {
            return Hold::Locked;
        }
        by_path.push(ctx.unique);
        Hold::OnCreate(held)
    }

    /// Tell every call held on a pending create to retry.
    fn let_held_calls_go(&self, why: &str) {
        for unique in self.pending_creates.uniques() {
            let released = self.broker.release(unique);
            if released > 0 {
                tracing::info!(
                    released,
                    "calls held on a pending create told to retry: {why}"
                );
            }
        }
    }

    /// Open file handle `h` is being released (its last close): when a
    /// call held on its pending create was interrupted, the caller gave up
    /// (or was killed): withdraw the request, which removes the file. A
    /// file closed with nothing interrupted (`: > f`, a process that
    /// exits) leaves the request to its decision: the approver may still
    /// want the file.
    pub(super) fn let_go(&self, h: &Handle) {
        let Handle::File {
            held: Some(held), ..
        } = h
        else {
            return;
        };
        let waiting = matches!(*held.state.lock(), HeldState::Waiting { .. });
        tracing::debug!(
            waiting,
            interrupted = held.interrupted.load(Ordering::Relaxed),
            "a pending create's file is released"
        );
        if waiting && held.interrupted.load(Ordering::Relaxed) {
            self.broker.interrupt(held.unique);
        }
    }

    /// `FUSE_INTERRUPT` of request `unique`: the call, if it waits for a
    /// decision, is answered EINTR; if it is not waiting yet, it is when
    /// it starts to.
    pub fn interrupt(&self, unique: u64) {
        tracing::debug!(unique, "interrupt");
        let mut early = self.early.0.lock();
        if self.broker.interrupt(unique) {
            return;
        }
        let now = Instant::now();
        while early
            .front()
            .is_some_and(|(_, t)| now.duration_since(*t) > EARLY_KEPT)
            || early.len() >= EARLY_MAX
        {
            early.pop_front();
        }
        early.push_back((unique, now));
    }

    /// Call `unique` now waits: apply an interrupt that came before.
    pub(super) fn interrupted_meanwhile(&self, unique: u64) {
        let hit = {
            let mut early = self.early.0.lock();
            match early.iter().position(|(u, _)| *u == unique) {
                Some(i) => early.remove(i).is_some(),
                None => false,
            }
        };
        if hit {
            self.broker.interrupt(unique);
        }
    }
}

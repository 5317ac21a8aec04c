//! Busy polling of the `/dev/fuse` transport: after answering a request,
//! one serving thread keeps reading the device without sleeping, for a
//! short window, before it goes back to a sleeping read.
//!
//! Why: a request that finds every serving thread asleep wakes one, and
//! when that thread's CPU sits idle the wake-up costs the CPU's way out
//! of idle. On the VMs measured here (the host wakes a halted vCPU) that
//! is tens of microseconds per request, more than the request's own work;
//! a thread already running picks the request up at once. Pinned to one
//! CPU there is nothing to gain (the caller and the daemon take turns on
//! it), and polling would only delay the caller: a thread that may run on
//! one CPU only never polls.
//!
//! While polling pays, one thread is the reader: it alone reads the
//! device, polling after each reply and sleeping in `read` when a window
//! ends with nothing; the others stand by in the daemon, out of the
//! kernel's queue of readers. The kernel wakes a sleeping reader for every
//! request it queues, even one the polling thread then takes, and on the
//! VMs measured here that wake-up (another CPU brought out of idle) cost
//! more than the poll saved: unpinned, a mount serving with four threads
//! ran unlink and create at 1.6–1.7× the time of the same mount with one.
//! A thread standing by reads beside the reader when the reader's request
//! in hand has taken [`STANDBY_LIMIT`] (a slow call on the backing store
//! doesn't hold the rest of the mount up; after an idle spell, for up to
//! [`IDLE_LOOK`]), and all read again when the reader may no longer poll.
//!
//! On one CPU a thread still becomes the reader, and reads alone without
//! polling: with every serving thread in the kernel's queue, the caller
//! and several of them took turns on that CPU (pinned, 10,000 creates
//! switched tasks about 65,000 times with four threads reading, about
//! 60,000 with one, which took 6–8% less time to create and unlink).
//!
//! What it costs: CPU while requests come close together (at most the
//! window after each reply, one thread at a time). It stops by itself when
//! they don't: a window that ends with no request turns polling off until
//! a request again follows the previous reply within the window. Under a
//! cgroup CPU quota smaller than the CPUs a thread may run on, the time
//! spent polling counts against the quota and polling measured slower
//! than sleeping: there it never polls either ([`super::cpu_quota`]).

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::channel::Channel;

/// The window mounts get unless told otherwise (`--busy-poll`).
pub const DEFAULT_WINDOW: Duration = Duration::from_micros(50);

/// The longest window a mount may ask for (`--busy-poll`).
pub const MAX_WINDOW: Duration = Duration::from_millis(1);

/// How many polling chances a thread takes between two looks at the CPUs
/// it may run on (a `taskset` may change them while it serves).
const AFFINITY_EVERY: u32 = 16;

/// How long the other threads stand by while the reader answers one
/// request: past this they read the device beside it. Also how often a
/// thread standing by looks again while the reader is busy.
pub(crate) const STANDBY_LIMIT: Duration = Duration::from_millis(1);

/// The longest the watching thread sleeps between two looks, while the
/// reader sleeps in `read` (an idle mount): it looks less often the longer
/// the mount is idle, up to this. A request that then keeps the reader
/// busy waits at most about this long for another reader.
pub(crate) const IDLE_LOOK: Duration = Duration::from_millis(100);

/// How often the threads standing by that don't watch look anyway (they
/// are woken when the reader goes, and one when the watcher leaves).
const OTHERS_LOOK: Duration = Duration::from_secs(1);

/// One connection's polling state, shared by its serving threads.
#[derive(Debug)]
pub(crate) struct BusyPoll {
    window: Duration,
    /// A thread is the reader: the one thread that reads the device while
    /// polling pays (the others stand by, see [`BusyPoll::before_read`]).
    hot: AtomicBool,
    /// When the reader began answering the request in hand, in ns since
    /// `epoch`; 0 while it reads.
    busy_since: AtomicU64,
    /// When the reader began a sleeping read, in ns since `epoch`; 0 while
    /// it polls or answers.
    idle_since: AtomicU64,
    /// A thread standing by watches the reader (see
    /// [`BusyPoll::before_read`]).
    watcher: AtomicBool,
    /// Where the other threads stand by.
    standby_lock: Mutex<()>,
    standby_cv: Condvar,
    /// The last request came within the window after the reply before it
    /// (or the last poll caught one): polling pays.
    worth_it: AtomicBool,
    /// When the last reply went out, in ns since `epoch`.
    last_reply: AtomicU64,
    epoch: Instant,
}

/// What one serving thread remembers between requests.
#[derive(Debug)]
pub(crate) struct PollerState {
    /// Chances taken since the CPUs were last looked at.
    since_check: u32,
    /// This thread is the reader ([`BusyPoll::hot`]).
    owns: bool,
    /// What holds this thread back from polling (as last looked at).
    held: Option<HeldBack>,
    /// This thread's device is non-blocking: a poll that caught a request
    /// leaves it so, and the poll after the next reply starts without a
    /// `fcntl` (two per switch); it is made blocking when a window ends
    /// with nothing, or by a sleeping read that finds it non-blocking
    /// ([`PollerState::make_blocking`]).
    nonblocking: bool,
    /// How to look (tests put in their own answers).
    cpus_of: fn() -> usize,
    quota_of: fn() -> Option<f64>,
}

impl Default for PollerState {
    fn default() -> Self {
        PollerState::looking_with(cpus_here, super::cpu_quota::of_this_process_lately)
    }
}

/// How many CPUs the calling thread may run on.
pub(crate) fn cpus_here() -> usize {
    rustix::thread::sched_getaffinity(None).map_or(1, |cpus| cpus.count() as usize)
}

/// Why a thread doesn't poll.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum HeldBack {
    /// It may run on one CPU only.
    OneCpu,
    /// Its cgroup's CPU quota, in CPUs, is below the CPUs it may run on.
    Quota { quota: f64, cpus: usize },
}

impl std::fmt::Display for HeldBack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeldBack::OneCpu => write!(f, "off: the daemon may run on one CPU only"),
            HeldBack::Quota { quota, cpus } => write!(
                f,
                "off: its cgroup's CPU quota ({quota:.2} CPUs) is below the {cpus} CPUs it may run on"
            ),
        }
    }
}

/// What holds back a thread that may run on `cpus` CPUs under a CPU
/// quota of `quota` CPUs (None: no quota); None: it polls.
pub(crate) fn held_back(cpus: usize, quota: Option<f64>) -> Option<HeldBack> {
    match quota {
        _ if cpus <= 1 => Some(HeldBack::OneCpu),
        Some(q) if q < cpus as f64 => Some(HeldBack::Quota { quota: q, cpus }),
        _ => None,
    }
}

/// Why this process's `/dev/fuse` threads don't poll now, for `zonemount
/// status`; None where they may.
pub fn held_back_now() -> Option<String> {
    held_back_by(cpus_here(), super::cpu_quota::of_this_process).map(|why| why.to_string())
}

/// [`held_back`] for a thread that may run on `cpus` CPUs, reading the
/// quota (a few files) only where it can matter: not on one CPU.
pub(crate) fn held_back_by(cpus: usize, quota_of: fn() -> Option<f64>) -> Option<HeldBack> {
    match cpus {
        0 | 1 => Some(HeldBack::OneCpu),
        _ => held_back(cpus, quota_of()),
    }
}

/// Whether the calling thread would poll now, as a serving thread looks.
#[cfg(test)]
pub(crate) fn polls_here() -> bool {
    held_back(cpus_here(), super::cpu_quota::of_this_process()).is_none()
}

impl BusyPoll {
    /// Polling for at most `window` after each reply; zero: never.
    pub(crate) fn new(window: Duration) -> BusyPoll {
        BusyPoll {
            window,
            hot: AtomicBool::new(false),
            busy_since: AtomicU64::new(0),
            idle_since: AtomicU64::new(0),
            watcher: AtomicBool::new(false),
            standby_lock: Mutex::new(()),
            standby_cv: Condvar::new(),
            worth_it: AtomicBool::new(true),
            last_reply: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Before a sleeping read. The reader ([`BusyPoll::hot`]) reads, and
    /// says it is idle; any other thread first stands by: it waits here,
    /// out of the kernel's queue of readers (each of which the kernel
    /// would wake for every request), until there is no reader or the
    /// reader's request in hand has taken [`STANDBY_LIMIT`]. One thread
    /// standing by watches: it looks again every STANDBY_LIMIT while the
    /// reader polls or answers, and less often the longer the reader
    /// sleeps ([`IDLE_LOOK`] at most); the others are woken when the
    /// reader goes, one of them takes the watch over when the watcher
    /// leaves, and each looks anyway once a second.
    pub(crate) fn before_read(&self, me: &PollerState) {
        if self.window.is_zero() {
            return;
        }
        if me.owns {
            self.busy_since.store(0, Ordering::Release);
            self.idle_since
                .store(self.now_ns().max(1), Ordering::Release);
            return;
        }
        // No reader (polling not paying, a CPU quota): no lock taken.
        if !self.hot.load(Ordering::Acquire) {
            return;
        }
        let limit = STANDBY_LIMIT.as_nanos() as u64;
        let mut g = self.standby_lock.lock();
        // One thread standing by watches the reader (the others sleep
        // longer): fewer wake-ups while requests come.
        let mut watching = false;
        while self.hot.load(Ordering::Acquire) {
            let now = self.now_ns();
            let busy = self.busy_since.load(Ordering::Acquire);
            if busy != 0 && now.saturating_sub(busy) >= limit {
                break;
            }
            if !watching {
                watching = !self.watcher.swap(true, Ordering::AcqRel);
            }
            let idle = self.idle_since.load(Ordering::Acquire);
            let wait = match (watching, idle) {
                // Woken when the reader goes or the watcher leaves; the
                // look is only a backstop.
                (false, _) => OTHERS_LOOK,
                (true, 0) => STANDBY_LIMIT,
                (true, t) => {
                    Duration::from_nanos(now.saturating_sub(t)).clamp(STANDBY_LIMIT, IDLE_LOOK)
                }
            };
            self.standby_cv.wait_for(&mut g, wait);
        }
        if watching {
            // Another thread standing by takes the watch over.
            self.watcher.store(false, Ordering::Release);
            self.standby_cv.notify_one();
        }
    }

    /// A request came through a sleeping read: would a poll after the last
    /// reply have caught it? The reader is now busy with it.
    pub(crate) fn woke(&self, me: &PollerState) {
        if self.window.is_zero() {
            return;
        }
        let now = self.now_ns();
        let gap = now.saturating_sub(self.last_reply.load(Ordering::Relaxed));
        self.worth_it
            .store(gap <= self.window.as_nanos() as u64, Ordering::Relaxed);
        if me.owns {
            self.idle_since.store(0, Ordering::Release);
            self.busy_since.store(now.max(1), Ordering::Release);
        }
    }

    /// A request was answered (or needed no answer). The first thread to
    /// get here while polling pays and nothing holds it back
    /// ([`held_back`]), or while it may run on one CPU only, becomes the
    /// reader, and stays it until neither holds or it stops serving
    /// ([`BusyPoll::leave`]). The reader polls for the next request when
    /// that pays and it may. `Some`: what the device
    /// gave while polling (a request's length, or the error that ends
    /// serving).
    pub(crate) fn after_reply<C: Channel>(
        &self,
        dev: &C,
        buf: &mut [u8],
        me: &mut PollerState,
    ) -> Option<io::Result<usize>> {
        if self.window.is_zero() {
            return None;
        }
        self.last_reply.store(self.now_ns(), Ordering::Relaxed);
        let held = me.held_back();
        let polls = held.is_none();
        // On one CPU the reader reads alone but never polls (see the
        // module's doc); under a CPU quota all threads read.
        let reads_alone = polls || held == Some(HeldBack::OneCpu);
        if !me.owns {
            if !reads_alone || (polls && !self.worth_it.load(Ordering::Relaxed)) {
                return None;
            }
            if self.hot.swap(true, Ordering::Acquire) {
                return None;
            }
            me.owns = true;
        } else if !reads_alone {
            self.leave(me);
            return None;
        }
        self.busy_since.store(0, Ordering::Release);
        if !polls || !self.worth_it.load(Ordering::Relaxed) {
            return None;
        }
        match self.poll(dev, buf, me) {
            Polled::Got(n) => {
                self.busy_since
                    .store(self.now_ns().max(1), Ordering::Release);
                Some(Ok(n))
            }
            Polled::Nothing => None,
            Polled::Cannot => {
                self.leave(me);
                None
            }
            Polled::Failed(e) => {
                self.leave(me);
                Some(Err(e))
            }
        }
    }

    /// This thread stops being the reader (it may no longer poll, or it
    /// stops serving): the threads standing by read the device again.
    pub(crate) fn leave(&self, me: &mut PollerState) {
        if !me.owns {
            return;
        }
        me.owns = false;
        self.busy_since.store(0, Ordering::Release);
        self.idle_since.store(0, Ordering::Release);
        self.hot.store(false, Ordering::Release);
        let _g = self.standby_lock.lock();
        self.standby_cv.notify_all();
    }

    /// Read the device without sleeping until a request comes or the
    /// window ends. A request caught leaves the device non-blocking (the
    /// reader polls again after its reply, with no `fcntl` between); a
    /// window that ends with nothing, or an error, makes it blocking for
    /// the sleeping read that follows.
    fn poll<C: Channel>(&self, dev: &C, buf: &mut [u8], me: &mut PollerState) -> Polled {
        if !me.nonblocking {
            match dev.set_nonblocking(true) {
                Ok(true) => me.nonblocking = true,
                // A channel that can't: no polling on it.
                Ok(false) | Err(_) => return Polled::Cannot,
            }
        }
        let until = Instant::now() + self.window;
        let got = loop {
            match dev.read(buf) {
                Ok(n) => return Polled::Got(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if Instant::now() >= until {
                        self.worth_it.store(false, Ordering::Relaxed);
                        break Polled::Nothing;
                    }
                    std::hint::spin_loop();
                }
                Err(e) => break Polled::Failed(e),
            }
        };
        if let Err(e) = me.make_blocking(dev) {
            // The next sleeping read (`session::read_sleeping`) gets
            // EAGAIN and tries once more to make the device blocking.
            tracing::warn!("cannot make the FUSE device blocking again: {e}");
        }
        got
    }
}

/// What a poll found.
enum Polled {
    Got(usize),
    /// The window ended with no request.
    Nothing,
    /// The device can't be made non-blocking.
    Cannot,
    Failed(io::Error),
}

impl PollerState {
    /// A thread's state that asks `cpus_of` how many CPUs it may run on
    /// and `quota_of` its CPU quota.
    pub(crate) fn looking_with(
        cpus_of: fn() -> usize,
        quota_of: fn() -> Option<f64>,
    ) -> PollerState {
        PollerState {
            since_check: 0,
            owns: false,
            held: None,
            nonblocking: false,
            cpus_of,
            quota_of,
        }
    }

    /// Make this thread's device blocking, for a sleeping read. Until it
    /// succeeds the device counts as non-blocking (the next sleeping read
    /// finds out and tries again).
    pub(crate) fn make_blocking<C: Channel>(&mut self, dev: &C) -> io::Result<()> {
        dev.set_nonblocking(false)?;
        self.nonblocking = false;
        Ok(())
    }

    /// What holds this thread back from polling (None: it may poll),
    /// looked at again every [`AFFINITY_EVERY`] calls.
    fn held_back(&mut self) -> Option<HeldBack> {
        if self.since_check == 0 {
            self.held = held_back_by((self.cpus_of)(), self.quota_of);
        }
        self.since_check = (self.since_check + 1) % AFFINITY_EVERY;
        self.held
    }
}

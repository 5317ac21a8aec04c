//! Idle polling: while requests come close together, the daemon asks the
//! kernel to keep idle CPUs polling instead of halting (the CPU latency
//! QoS, `/dev/cpu_dma_latency`), and lets them halt again when requests
//! thin out.
//!
//! Why: a caller that sends a request sleeps until the reply, and its CPU
//! goes idle. On the VMs measured here an idle CPU halts at once, and the
//! reply's wake-up then waits for the host to run that virtual CPU again:
//! 30–50 µs per request, more than most requests' own work (an untar
//! spent more time in those wake-ups than in the daemon). A CPU that polls
//! in idle sees the wake-up at once. Busy polling ([`super::busy_poll`])
//! keeps the daemon's side awake; this keeps the caller's.
//!
//! The request is the kernel's own, held through an open file: a value of
//! 0 µs keeps every CPU in its polling idle state, and the file's close
//! (or the daemon's end, however it ends) drops it. Only root may open
//! the device, and containers often don't have it: then nothing is asked,
//! and `zonemount status` says why.
//!
//! What it costs: every idle CPU's time while it is held (on a VM, the
//! host's CPU time too). So it is held only while a mount's requests keep
//! coming close together: it is taken when a request follows the one
//! before within the busy-poll window, and given back once a period of
//! [`PERIOD`] brings fewer requests than one per four windows. Never when
//! busy polling is off (`--busy-poll 0`), nor where busy polling is held
//! back (the daemon may run on one CPU only, or a cgroup CPU quota is
//! below its CPUs).

use std::fs::File;
use std::io::{self, Write};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::busy_poll::{HeldBack, cpus_here, held_back_by};

/// The device through which the kernel takes CPU latency requests.
pub const DEVICE: &str = "/dev/cpu_dma_latency";

/// How often the keeper counts the requests that came, while held.
pub(crate) const PERIOD: Duration = Duration::from_millis(5);

/// How long the keeper leaves it after finding busy polling held back
/// (a `taskset` or a quota may change while the mount serves).
const HELD_BACK_LOOK: Duration = Duration::from_secs(1);

/// Where a latency request goes (the device, or a test's record).
pub(crate) trait Knob: Send + Sync {
    /// Ask that no CPU take longer than `limit` µs to wake; None: no limit.
    fn set(&self, limit: Option<i32>) -> io::Result<()>;
}

/// `/dev/cpu_dma_latency`, open: a request of the kernel's, dropped with
/// the file.
struct Device(File);

impl Knob for Device {
    fn set(&self, limit: Option<i32>) -> io::Result<()> {
        // The device takes a native-endian 32-bit value; i32::MAX is the
        // kernel's "no limit".
        (&self.0).write_all(&limit.unwrap_or(i32::MAX).to_ne_bytes())
    }
}

const IDLE: u8 = 0;
const WANTED: u8 = 1;
const HELD: u8 = 2;

/// One connection's idle polling, shared by its serving threads and the
/// keeper thread that takes and gives back the kernel's request.
pub struct IdlePoll {
    /// None: nothing to ask through (and why).
    knob: Result<Box<dyn Knob>, String>,
    window_ns: u64,
    /// How often the keeper counts ([`PERIOD`]).
    period: Duration,
    /// Requests per period below which it is given back.
    min_per_period: u64,
    state: AtomicU8,
    /// When the last request came while idle, ns since `epoch` (0: none).
    last: AtomicU64,
    /// Requests since the keeper last counted, while held.
    count: AtomicU64,
    epoch: Instant,
    /// Set to stop the keeper.
    stop: Mutex<bool>,
    cv: Condvar,
    /// Why it could not be taken the last time it was wanted (the
    /// device refused the write).
    off: Mutex<Option<String>>,
    held_back: fn() -> Option<HeldBack>,
}

impl std::fmt::Debug for IdlePoll {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdlePoll")
            .field("window_ns", &self.window_ns)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

/// What holds busy polling back for this process now (read as a serving
/// thread would: its CPUs and its cgroup's quota).
fn held_back_here() -> Option<HeldBack> {
    held_back_by(cpus_here(), super::cpu_quota::of_this_process_lately)
}

impl IdlePoll {
    /// Idle polling after requests within `window` of each other (zero:
    /// never), through [`DEVICE`] when this process may open it.
    pub(crate) fn open(window: Duration) -> IdlePoll {
        let knob = if window.is_zero() {
            Err("off: busy polling is off (--busy-poll 0)".to_string())
        } else {
            std::fs::OpenOptions::new()
                .write(true)
                .open(DEVICE)
                .map(|f| Box::new(Device(f)) as Box<dyn Knob>)
                .map_err(|e| format!("off: cannot open {DEVICE} ({e}); root can"))
        };
        IdlePoll::with(knob, window, PERIOD, held_back_here)
    }

    /// Idle polling through `knob`, counted every `period`, held back as
    /// `held_back` says.
    pub(crate) fn with(
        knob: Result<Box<dyn Knob>, String>,
        window: Duration,
        period: Duration,
        held_back: fn() -> Option<HeldBack>,
    ) -> IdlePoll {
        let window_ns = window.as_nanos() as u64;
        IdlePoll {
            knob,
            window_ns,
            period,
            min_per_period: (period.as_nanos() as u64 / (4 * window_ns.max(1))).max(1),
            state: AtomicU8::new(IDLE),
            last: AtomicU64::new(0),
            count: AtomicU64::new(0),
            epoch: Instant::now(),
            stop: Mutex::new(false),
            cv: Condvar::new(),
            off: Mutex::new(None),
            held_back,
        }
    }

    /// Whether there is anything to ask through (else the keeper need not
    /// run).
    pub(crate) fn usable(&self) -> bool {
        self.knob.is_ok() && self.window_ns > 0
    }

    /// Whether the kernel is asked to keep idle CPUs polling now.
    pub fn held(&self) -> bool {
        self.state.load(Ordering::Relaxed) == HELD
    }

    /// For `zonemount status`: why it is never taken (nothing to ask
    /// through), or could not be the last time; None otherwise. Whether
    /// busy polling is held back now is the caller's to add
    /// (`busy_poll_held_back`): it is read live, not remembered.
    pub fn off(&self) -> Option<String> {
        match &self.knob {
            Err(why) => Some(why.clone()),
            Ok(_) => self.off.lock().clone(),
        }
    }

    /// A request came (on any serving thread). Cheap: an atomic or two,
    /// and a wake-up of the keeper when it is wanted.
    pub(crate) fn request(&self) {
        if !self.usable() {
            return;
        }
        match self.state.load(Ordering::Relaxed) {
            HELD => {
                self.count.fetch_add(1, Ordering::Relaxed);
            }
            IDLE => {
                let now = (self.epoch.elapsed().as_nanos() as u64).max(1);
                let prev = self.last.swap(now, Ordering::Relaxed);
                if prev != 0
                    && now.saturating_sub(prev) <= self.window_ns
                    && self
                        .state
                        .compare_exchange(IDLE, WANTED, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                {
                    let _g = self.stop.lock();
                    self.cv.notify_one();
                }
            }
            _ => {}
        }
    }

    /// The keeper's loop (on a thread of its own, until [`IdlePoll::stop`]):
    /// take the kernel's request when wanted, give it back when requests
    /// thin out.
    pub(crate) fn keep(&self) {
        let Ok(knob) = &self.knob else { return };
        let mut stopped = self.stop.lock();
        loop {
            while !*stopped && self.state.load(Ordering::Acquire) != WANTED {
                self.cv.wait(&mut stopped);
            }
            if *stopped {
                return;
            }
            if (self.held_back)().is_some() {
                self.cv.wait_for(&mut stopped, HELD_BACK_LOOK);
                self.idle();
                continue;
            }
            if let Err(e) = knob.set(Some(0)) {
                *self.off.lock() = Some(format!("off: cannot write to {DEVICE} ({e})"));
                self.cv.wait_for(&mut stopped, HELD_BACK_LOOK);
                self.idle();
                continue;
            }
            *self.off.lock() = None;
            self.count.store(0, Ordering::Relaxed);
            self.state.store(HELD, Ordering::Release);
            let mut looked = Instant::now();
            while !*stopped {
                self.cv.wait_for(&mut stopped, self.period);
                if *stopped || self.count.swap(0, Ordering::Relaxed) < self.min_per_period {
                    break;
                }
                // Pinned or put under a quota while held.
                if looked.elapsed() >= HELD_BACK_LOOK {
                    looked = Instant::now();
                    if (self.held_back)().is_some() {
                        break;
                    }
                }
            }
            if let Err(e) = knob.set(None) {
                tracing::warn!("cannot give back the CPU latency request ({e})");
            }
            self.idle();
        }
    }

    fn idle(&self) {
        self.last.store(0, Ordering::Relaxed);
        self.state.store(IDLE, Ordering::Release);
    }

    /// Stop the keeper (it gives the request back first).
    pub(crate) fn stop(&self) {
        *self.stop.lock() = true;
        self.cv.notify_all();
    }
}

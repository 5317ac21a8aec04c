//! Idle polling's keeper over a recording knob: the kernel's request is
//! taken when requests come within the window of each other and given
//! back when they thin out or serving ends; never for requests further
//! apart, never while busy polling is held back; and the serving loop
//! tells it of each request.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use zerocopy::IntoBytes;

use super::serve::{init, wants};
use super::{HELLO, Script, Toy, request, within};
use crate::fuse::abi::{GetattrIn, op};
use crate::fuse::busy_poll::{BusyPoll, HeldBack};
use crate::fuse::dispatch::{Agreed, Filesystem};
use crate::fuse::handshake::handshake;
use crate::fuse::idle_poll::{IdlePoll, Knob, PERIOD};

/// The keeper's period in these tests: long enough that a test thread
/// descheduled under load doesn't miss a whole one.
const SLOW: Duration = Duration::from_millis(200);
use crate::fuse::session::serve;

const LIMIT: Duration = Duration::from_secs(20);

/// Keeps every value asked for.
#[derive(Clone, Default)]
struct Record(Arc<Mutex<Vec<Option<i32>>>>);

impl Knob for Record {
    fn set(&self, limit: Option<i32>) -> std::io::Result<()> {
        self.0.lock().unwrap().push(limit);
        Ok(())
    }
}

impl Record {
    fn values(&self) -> Vec<Option<i32>> {
        self.0.lock().unwrap().clone()
    }

    /// Wait (at most `LIMIT`) until the record holds `n` values.
    fn wait_for(&self, n: usize) -> Vec<Option<i32>> {
        let t0 = Instant::now();
        while self.values().len() < n && t0.elapsed() < LIMIT {
            std::thread::sleep(Duration::from_millis(1));
        }
        self.values()
    }
}

fn free() -> Option<HeldBack> {
    None
}

fn pinned() -> Option<HeldBack> {
    Some(HeldBack::OneCpu)
}

/// Idle polling through a fresh record, its keeper running.
fn kept(
    window: Duration,
    period: Duration,
    held_back: fn() -> Option<HeldBack>,
) -> (Arc<IdlePoll>, Record, std::thread::JoinHandle<()>) {
    let rec = Record::default();
    let idle = Arc::new(IdlePoll::with(
        Ok(Box::new(rec.clone())),
        window,
        period,
        held_back,
    ));
    let k = idle.clone();
    let keeper = std::thread::spawn(move || k.keep());
    (idle, rec, keeper)
}

#[test]
fn requests_close_together_take_it_and_a_quiet_spell_gives_it_back() {
    let (idle, rec, keeper) = kept(Duration::from_secs(1), SLOW, free);
    idle.request();
    assert!(rec.values().is_empty(), "one request alone takes nothing");
    idle.request();
    assert_eq!(rec.wait_for(1), vec![Some(0)], "taken at a latency of 0 µs");
    let t0 = Instant::now();
    while !idle.held() && t0.elapsed() < LIMIT {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(idle.held());
    assert_eq!(idle.off(), None);
    // No request for a period: given back (one per four windows of 1 s
    // is one per period at least, and none came).
    assert_eq!(rec.wait_for(2), vec![Some(0), None]);
    let t0 = Instant::now();
    while idle.held() && t0.elapsed() < LIMIT {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(!idle.held());
    // And taken again by the next two.
    idle.request();
    idle.request();
    assert_eq!(rec.wait_for(3), vec![Some(0), None, Some(0)]);
    idle.stop();
    keeper.join().unwrap();
    assert_eq!(
        rec.values(),
        vec![Some(0), None, Some(0), None],
        "given back when serving ends"
    );
}

#[test]
fn it_stays_held_while_requests_keep_coming() {
    let (idle, rec, keeper) = kept(Duration::from_secs(1), SLOW, free);
    idle.request();
    idle.request();
    rec.wait_for(1);
    // Requests for eight periods, one every millisecond: still held.
    let t0 = Instant::now();
    while t0.elapsed() < SLOW * 8 {
        idle.request();
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(rec.values(), vec![Some(0)]);
    idle.stop();
    keeper.join().unwrap();
    assert_eq!(rec.values(), vec![Some(0), None]);
}

#[test]
fn requests_further_apart_than_the_window_take_nothing() {
    let (idle, rec, keeper) = kept(Duration::from_millis(1), PERIOD, free);
    for _ in 0..5 {
        idle.request();
        std::thread::sleep(Duration::from_millis(20));
    }
    idle.stop();
    keeper.join().unwrap();
    assert!(rec.values().is_empty(), "{:?}", rec.values());
    assert!(!idle.held());
}

#[test]
fn held_back_busy_polling_takes_nothing() {
    let (idle, rec, keeper) = kept(Duration::from_secs(1), PERIOD, pinned);
    // Wanted several times over: the keeper looks, and takes nothing.
    for _ in 0..5 {
        idle.request();
        idle.request();
        std::thread::sleep(Duration::from_millis(20));
    }
    idle.stop();
    keeper.join().unwrap();
    assert!(rec.values().is_empty(), "{:?}", rec.values());
    assert!(!idle.held());
    // Nothing is wrong with the knob: status adds the live reason.
    assert_eq!(idle.off(), None);
}

#[test]
fn nothing_to_ask_through_is_said_and_costs_nothing() {
    let idle = IdlePoll::with(
        Err("off: no device here".into()),
        Duration::from_secs(1),
        PERIOD,
        free,
    );
    assert!(!idle.usable());
    idle.request();
    idle.request();
    // Its keeper returns at once.
    idle.keep();
    assert_eq!(idle.off().as_deref(), Some("off: no device here"));
    assert!(!idle.held());
    let zero = IdlePoll::open(Duration::ZERO);
    assert!(!zero.usable());
    assert_eq!(
        zero.off().as_deref(),
        Some("off: busy polling is off (--busy-poll 0)")
    );
}

#[test]
fn the_serving_loop_tells_it_of_each_request() {
    let mut requests = vec![init()];
    let g = GetattrIn {
        getattr_flags: 0,
        dummy: 0,
        fh: 0,
    };
    requests.extend((0..20).map(|i| request(op::GETATTR, 10 + i, HELLO, g.as_bytes())));
    let chan = Arc::new(Script::new(requests));
    let (idle, rec, keeper) = kept(Duration::from_secs(1), SLOW, free);
    let c = chan.clone();
    let i2 = idle.clone();
    within(LIMIT, move || {
        let fs = Arc::new(Toy::new(wants()));
        let (agreed, _): (Agreed, Option<()>) =
            handshake(&c, fs.as_ref(), false, |_| panic!("no io_uring asked for")).unwrap();
        let fs: Arc<dyn Filesystem> = fs;
        serve(c, fs, agreed, false, &BusyPoll::new(Duration::ZERO), &i2)
    })
    .unwrap();
    assert_eq!(rec.wait_for(1).first(), Some(&Some(0)));
    idle.stop();
    keeper.join().unwrap();
    assert_eq!(rec.values().last(), Some(&None));
}

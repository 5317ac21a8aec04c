//! Busy polling over a scripted device that can be made non-blocking:
//! every request is still answered once and in order, the device is made
//! non-blocking once for polls in a row and blocking before a sleeping
//! read, a window with no request turns polling off
//! until requests come close together again, and a thread that may run on
//! one CPU only, or under a CPU quota below its CPUs, never polls.

use std::sync::Arc;
use std::time::{Duration, Instant};

use zerocopy::IntoBytes;

use super::serve::{init, wants};
use super::{HELLO, Script, Toy, parse_reply, request, within};
use crate::fuse::abi::{GetattrIn, op};
use crate::fuse::busy_poll::{BusyPoll, HeldBack, PollerState, cpus_here, held_back, polls_here};
use crate::fuse::dispatch::{Agreed, Filesystem};
use crate::fuse::handshake::handshake;
use crate::fuse::session::{read_sleeping, serve};

const LIMIT: Duration = Duration::from_secs(20);

fn getattr(unique: u64) -> Vec<u8> {
    let g = GetattrIn {
        getattr_flags: 0,
        dummy: 0,
        fh: 0,
    };
    request(op::GETATTR, unique, HELLO, g.as_bytes())
}

fn many() -> usize {
    2
}

fn one() -> usize {
    1
}

fn no_quota() -> Option<f64> {
    None
}

fn one_cpu_quota() -> Option<f64> {
    Some(1.0)
}

fn two_cpu_quota() -> Option<f64> {
    Some(2.0)
}

#[test]
fn a_polled_device_answers_every_request_once_in_order_and_is_left_blocking() {
    let mut requests = vec![init()];
    requests.extend((0..50).map(|i| getattr(10 + i)));
    let chan = Arc::new(Script::pollable(requests, 3));
    let c = chan.clone();
    // The serving thread looks at its own CPUs, as in a mount.
    let (result, polls_here) = within(LIMIT, move || {
        let fs = Arc::new(Toy::new(wants()));
        let (agreed, _): (Agreed, Option<()>) =
            handshake(&c, fs.as_ref(), false, |_| panic!("no io_uring asked for")).unwrap();
        let fs: Arc<dyn Filesystem> = fs;
        let polls_here = polls_here();
        // A window far longer than the scripted stalls: every request
        // after the first GETATTR is caught by a poll.
        let r = serve(
            c,
            fs,
            agreed,
            false,
            &BusyPoll::new(Duration::from_millis(200)),
            &super::no_idle_poll(),
        );
        (r, polls_here)
    });
    result.unwrap();
    let uniques: Vec<u64> = chan
        .replies()
        .iter()
        .map(|r| parse_reply(r).0.unique)
        .collect();
    let want: Vec<u64> = std::iter::once(1).chain(10..60).collect();
    assert_eq!(uniques, want);
    let toggles = chan.toggles();
    let (caught, eagains) = chan.polled();
    if polls_here {
        // INIT is answered by the handshake, before the loop; the first
        // GETATTR comes through a sleeping read, the other 49 by polls.
        assert_eq!(caught, 49, "requests a poll read");
        // 3 EAGAINs before each, and the last poll's until its window
        // ended (the script then said EAGAIN on every read).
        assert!(eagains > 49 * 3, "{eagains} EAGAINs");
        // Made non-blocking once, for the first poll; polls that caught
        // a request left it so, and the last one, whose window ended,
        // made it blocking for the sleeping read after it.
        assert_eq!(toggles, [true, false]);
    } else {
        // This thread may run on one CPU only: it never polled.
        assert_eq!((caught, eagains), (0, 0));
        assert!(toggles.is_empty(), "{toggles:?}");
    }
}

#[test]
fn a_window_with_no_request_stops_polling_until_requests_come_close_again() {
    let window = Duration::from_millis(20);
    let poll = BusyPoll::new(window);
    let chan = Script::pollable(Vec::new(), 0);
    let mut buf = vec![0u8; 4096];
    let mut me = PollerState::looking_with(many, no_quota);

    // Polls the whole window, finds nothing.
    let t = Instant::now();
    assert!(poll.after_reply(&chan, &mut buf, &mut me).is_none());
    assert!(t.elapsed() >= window);
    let (_, tried) = chan.polled();
    assert!(tried > 0);
    assert_eq!(chan.toggles(), [true, false]);

    // So the next reply is followed by a sleeping read at once.
    let t = Instant::now();
    assert!(poll.after_reply(&chan, &mut buf, &mut me).is_none());
    assert!(t.elapsed() < window);
    assert_eq!(chan.polled().1, tried);
    assert_eq!(chan.toggles().len(), 2);

    // A request that came through that read within the window: polling
    // pays again.
    poll.woke(&me);
    assert!(poll.after_reply(&chan, &mut buf, &mut me).is_none());
    assert!(chan.polled().1 > tried);
    assert_eq!(chan.toggles().len(), 4);

    // That poll found nothing either: the request after it came through
    // a sleeping read, long after the reply before it. No poll.
    poll.woke(&me);
    let tried = chan.polled().1;
    assert!(poll.after_reply(&chan, &mut buf, &mut me).is_none());
    // Nor after one that came long after that reply.
    std::thread::sleep(window * 2);
    poll.woke(&me);
    assert!(poll.after_reply(&chan, &mut buf, &mut me).is_none());
    assert_eq!(chan.toggles().len(), 4);
    assert_eq!(chan.polled().1, tried);
}

#[test]
fn a_thread_that_may_run_on_one_cpu_never_polls() {
    let poll = BusyPoll::new(Duration::from_millis(20));
    let chan = Script::pollable(vec![getattr(10)], 0);
    let mut buf = vec![0u8; 4096];
    let mut me = PollerState::looking_with(one, no_quota);
    assert!(poll.after_reply(&chan, &mut buf, &mut me).is_none());
    assert!(chan.toggles().is_empty());
    assert_eq!(chan.polled(), (0, 0));
    // The same with the real look, from a thread kept on one CPU.
    let mine = rustix::thread::sched_getaffinity(None).unwrap();
    let cpu = (0..rustix::thread::CpuSet::MAX_CPU)
        .find(|&c| mine.is_set(c))
        .expect("this thread may run on some CPU");
    let chan = Arc::new(chan);
    let c = chan.clone();
    let looked = within(LIMIT, move || {
        let mut only = rustix::thread::CpuSet::new();
        only.set(cpu);
        rustix::thread::sched_setaffinity(None, &only).unwrap();
        let mut me = PollerState::default();
        let mut buf = vec![0u8; 4096];
        let got = poll.after_reply(c.as_ref(), &mut buf, &mut me);
        (got.is_none(), cpus_here())
    });
    assert_eq!(looked, (true, 1));
    assert!(chan.toggles().is_empty());
}

#[test]
fn a_zero_window_or_a_device_that_cant_poll_is_never_polled() {
    let chan = Script::pollable(vec![getattr(10)], 0);
    let mut buf = vec![0u8; 4096];
    let mut me = PollerState::looking_with(many, no_quota);
    assert!(
        BusyPoll::new(Duration::ZERO)
            .after_reply(&chan, &mut buf, &mut me)
            .is_none()
    );
    assert!(chan.toggles().is_empty());
    // A device that can't be made non-blocking: read as before.
    let plain = Script::new(vec![getattr(10)]);
    assert!(
        BusyPoll::new(Duration::from_millis(20))
            .after_reply(&plain, &mut buf, &mut me)
            .is_none()
    );
    assert_eq!(plain.unread(), 1);
}

#[test]
fn a_poll_hands_over_the_request_it_read() {
    let chan = Script::pollable(vec![getattr(10)], 2);
    let mut buf = vec![0u8; 4096];
    let mut me = PollerState::looking_with(many, no_quota);
    let got = BusyPoll::new(Duration::from_millis(200)).after_reply(&chan, &mut buf, &mut me);
    let n = got.expect("a request read while polling").unwrap();
    assert_eq!(&buf[..n], &getattr(10)[..]);
    assert_eq!(chan.polled(), (1, 2));
    // Left non-blocking for the poll after the next reply.
    assert_eq!(chan.toggles(), [true]);
}

#[test]
fn polls_in_a_row_switch_the_device_once_and_a_sleeping_read_makes_it_blocking() {
    let requests: Vec<Vec<u8>> = (0..3).map(|i| getattr(10 + i)).collect();
    let chan = Script::pollable(requests, 0);
    let mut buf = vec![0u8; 4096];
    let mut me = PollerState::looking_with(many, no_quota);
    let poll = BusyPoll::new(Duration::from_millis(200));
    for _ in 0..2 {
        let got = poll.after_reply(&chan, &mut buf, &mut me);
        assert!(got.expect("a request read while polling").is_ok());
    }
    assert_eq!(chan.toggles(), [true], "no switch between two polls");
    // A sleeping read on the device left non-blocking takes the request
    // waiting; with none, it makes the device blocking and reads again.
    assert_eq!(chan.polled(), (2, 0));
    let n = read_sleeping(&chan, &mut buf, &mut me).unwrap();
    assert_eq!(&buf[..n], &getattr(12)[..]);
    assert_eq!(chan.toggles(), [true], "it found a request at once");
    let end = read_sleeping(&chan, &mut buf, &mut me).unwrap_err();
    assert_eq!(end.raw_os_error(), Some(libc::ENODEV));
    assert_eq!(chan.toggles(), [true, false]);
    // The next poll makes it non-blocking again.
    assert!(poll.after_reply(&chan, &mut buf, &mut me).is_none());
    assert_eq!(chan.toggles(), [true, false, true, false]);
}

#[test]
fn a_cpu_quota_below_the_cpus_a_thread_may_use_stops_polling() {
    // Two CPUs under a quota of one: the time spent polling would count
    // against the quota. Never polls.
    let poll = BusyPoll::new(Duration::from_millis(20));
    let chan = Script::pollable(vec![getattr(10)], 0);
    let mut buf = vec![0u8; 4096];
    let mut me = PollerState::looking_with(many, one_cpu_quota);
    assert!(poll.after_reply(&chan, &mut buf, &mut me).is_none());
    assert!(chan.toggles().is_empty());
    assert_eq!(chan.polled(), (0, 0));
    // A quota that covers both CPUs holds nothing back.
    let mut me = PollerState::looking_with(many, two_cpu_quota);
    let got = poll.after_reply(&chan, &mut buf, &mut me);
    assert!(got.expect("a request read while polling").is_ok());
    assert_eq!(chan.toggles(), [true]);

    assert_eq!(held_back(2, None), None);
    assert_eq!(held_back(2, Some(2.0)), None);
    assert_eq!(held_back(4, Some(4.0)), None);
    assert_eq!(
        held_back(4, Some(3.5)),
        Some(HeldBack::Quota {
            quota: 3.5,
            cpus: 4
        })
    );
    assert_eq!(held_back(1, None), Some(HeldBack::OneCpu));
    assert_eq!(
        held_back(2, Some(0.5)).unwrap().to_string(),
        "off: its cgroup's CPU quota (0.50 CPUs) is below the 2 CPUs it may run on"
    );
    assert_eq!(
        HeldBack::OneCpu.to_string(),
        "off: the daemon may run on one CPU only"
    );
}

/// What a serving thread that is not the reader does before a sleeping
/// read: stand by while there is a reader.
fn stand_by(poll: &BusyPoll) {
    poll.before_read(&PollerState::looking_with(many, no_quota));
}

/// A thread come to read, standing by from now: its join gives when,
/// after `t`, it went on to read.
fn come_to_read(poll: &Arc<BusyPoll>, t: Instant) -> std::thread::JoinHandle<Duration> {
    let poll = poll.clone();
    std::thread::spawn(move || {
        stand_by(&poll);
        t.elapsed()
    })
}

/// `me`, the reader, goes to sleep in `read` (idle): a thread come to
/// read stands by for all of `idle`; then a request keeps `me` busy, and
/// the thread reads within about IDLE_LOOK. Then `me` leaves.
fn idle_reader_holds_the_others_until_busy(
    poll: &Arc<BusyPoll>,
    me: &mut PollerState,
    idle: Duration,
) {
    poll.before_read(me);
    let t = Instant::now();
    let standing = come_to_read(poll, t);
    std::thread::sleep(idle);
    assert!(
        !standing.is_finished(),
        "a thread read beside an idle reader"
    );
    let busy_at = t.elapsed();
    poll.woke(me);
    let waited = within(LIMIT, move || standing.join().unwrap());
    assert!(waited >= busy_at, "{waited:?} {busy_at:?}");
    assert!(
        waited - busy_at < crate::fuse::busy_poll::IDLE_LOOK + Duration::from_millis(400),
        "{waited:?} {busy_at:?}"
    );
    poll.leave(me);
}

#[test]
fn while_a_thread_is_the_reader_the_others_stand_by_until_it_stops() {
    // The first thread to poll becomes the reader; nothing comes, so it
    // polls its whole window and stays the reader. Another thread, come to
    // read meanwhile, stands by until the reader stops serving.
    let window = Duration::from_millis(300);
    let poll = Arc::new(BusyPoll::new(window));
    let chan = Arc::new(Script::pollable(Vec::new(), 0));
    let (p, c) = (poll.clone(), chan.clone());
    let started = Instant::now();
    let reader = std::thread::spawn(move || {
        let mut buf = vec![0u8; 4096];
        let mut me = PollerState::looking_with(many, no_quota);
        let got = p.after_reply(c.as_ref(), &mut buf, &mut me);
        let polled_for = started.elapsed();
        // Still the reader: it would sleep in `read` now. Then it stops.
        std::thread::sleep(Duration::from_millis(200));
        let leaving = started.elapsed();
        p.leave(&mut me);
        (got.is_none(), polled_for, leaving)
    });
    // Let it start polling.
    while chan.polled().1 == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let waited = within(LIMIT, {
        let poll = poll.clone();
        move || {
            stand_by(&poll);
            started.elapsed()
        }
    });
    let (nothing, polled_for, left) = reader.join().unwrap();
    assert!(nothing);
    assert!(polled_for >= window, "{polled_for:?}");
    // It stood by until the reader began to leave (a little after: the
    // wake-up).
    assert!(
        waited >= left,
        "stood by {waited:?}, the reader began to leave at {left:?}"
    );
    // No reader: no waiting now.
    let t = Instant::now();
    stand_by(&poll);
    assert!(t.elapsed() < Duration::from_millis(100));
}

#[test]
fn an_idle_reader_keeps_the_others_standing_by_until_a_request_keeps_it_busy() {
    let poll = Arc::new(BusyPoll::new(Duration::from_millis(5)));
    let chan = Script::pollable(Vec::new(), 0);
    let mut buf = vec![0u8; 4096];
    let mut me = PollerState::looking_with(many, no_quota);
    // Becomes the reader; its window ends with nothing; it goes to sleep
    // in `read` (idle): nobody else reads until a request keeps it busy.
    assert!(poll.after_reply(&chan, &mut buf, &mut me).is_none());
    idle_reader_holds_the_others_until_busy(&poll, &mut me, Duration::from_millis(400));
}

#[test]
fn a_request_answered_longer_than_the_limit_lets_the_others_read() {
    // The poll catches a request and its thread, the reader, answers it:
    // the others stand by for at most about STANDBY_LIMIT of that.
    let poll = Arc::new(BusyPoll::new(Duration::from_millis(200)));
    let chan = Script::pollable(vec![getattr(10)], 1);
    let mut buf = vec![0u8; 4096];
    let mut me = PollerState::looking_with(many, no_quota);
    let got = poll.after_reply(&chan, &mut buf, &mut me);
    assert!(got.expect("a request read while polling").is_ok());
    let t = Instant::now();
    let waited = within(LIMIT, {
        let poll = poll.clone();
        move || {
            stand_by(&poll);
            t.elapsed()
        }
    });
    assert!(waited < Duration::from_millis(500), "stood by {waited:?}");
    // It answered; the next poll finds nothing. Once the reader stops
    // serving, nobody stands by at all.
    assert!(poll.after_reply(&chan, &mut buf, &mut me).is_none());
    poll.leave(&mut me);
    let t = Instant::now();
    stand_by(&poll);
    assert!(t.elapsed() < Duration::from_millis(100));
    // A zero window never polls, so never makes anyone stand by.
    let t = Instant::now();
    stand_by(&BusyPoll::new(Duration::ZERO));
    assert!(t.elapsed() < Duration::from_millis(100));
}

static CPUS_NOW: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(2);

fn cpus_now() -> usize {
    CPUS_NOW.load(std::sync::atomic::Ordering::Relaxed)
}

#[test]
fn a_reader_kept_to_one_cpu_stays_the_reader_without_polling() {
    // The reader is later kept to one CPU (it looks every 16 replies): at
    // its next reply it polls no more, but stays the reader, so the
    // others still stand by. Widened again, it polls again.
    let poll = Arc::new(BusyPoll::new(Duration::from_millis(200)));
    let chan = Script::pollable((0..17).map(|i| getattr(10 + i)).collect(), 0);
    let mut buf = vec![0u8; 4096];
    let mut me = PollerState::looking_with(cpus_now, no_quota);
    for _ in 0..16 {
        assert!(
            poll.after_reply(&chan, &mut buf, &mut me)
                .is_some_and(|r| r.is_ok())
        );
    }
    // Another thread can't become the reader meanwhile.
    let mut other = PollerState::looking_with(many, no_quota);
    assert!(poll.after_reply(&chan, &mut buf, &mut other).is_none());
    CPUS_NOW.store(1, std::sync::atomic::Ordering::Relaxed);
    let toggles = chan.toggles().len();
    for _ in 0..16 {
        assert!(poll.after_reply(&chan, &mut buf, &mut me).is_none());
    }
    assert_eq!(chan.toggles().len(), toggles, "no poll on one CPU");
    let standing = come_to_read(&poll, Instant::now());
    std::thread::sleep(Duration::from_millis(150));
    assert!(
        !standing.is_finished(),
        "another thread read beside a reader on one CPU"
    );
    // Widened again: it polls again (and catches the request queued).
    // (It looks at its CPUs again at the 17th reply since the last look.)
    CPUS_NOW.store(2, std::sync::atomic::Ordering::Relaxed);
    assert!(
        poll.after_reply(&chan, &mut buf, &mut me)
            .is_some_and(|r| r.is_ok()),
        "polls again once it may run on two CPUs"
    );
    poll.leave(&mut me);
    let waited = within(LIMIT, move || standing.join().unwrap());
    assert!(waited >= Duration::from_millis(150), "{waited:?}");
}

#[test]
fn on_one_cpu_a_thread_reads_alone_and_the_others_stand_by() {
    // Two serving threads kept to one CPU: the first to answer becomes the
    // reader without polling; the other stands by while the reader sleeps
    // in `read` (idle) or answers quickly, and reads beside it once its
    // request in hand has taken STANDBY_LIMIT.
    let poll = Arc::new(BusyPoll::new(Duration::from_millis(50)));
    let chan = Script::pollable(vec![getattr(10)], 0);
    let mut buf = vec![0u8; 4096];
    let mut me = PollerState::looking_with(one, no_quota);
    assert!(poll.after_reply(&chan, &mut buf, &mut me).is_none());
    assert!(chan.toggles().is_empty(), "no poll on one CPU");
    assert_eq!(chan.polled(), (0, 0));
    idle_reader_holds_the_others_until_busy(&poll, &mut me, Duration::from_millis(300));
}

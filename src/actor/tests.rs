#![allow(clippy::unwrap_used)]

use super::*;

fn who(pid: u32, argv: &str) -> Actor {
    Actor {
        pid,
        uid: 1000,
        time: SystemTime::UNIX_EPOCH + Duration::from_secs(u64::from(pid)),
        command: Some(Arc::new(Command {
            comm: argv.split(' ').next().unwrap().as_bytes().to_vec(),
            argv: argv.as_bytes().to_vec(),
        })),
    }
}

fn first_last(t: &Trails, p: &str) -> Option<(u32, u32)> {
    t.first_last(Path::new(p))
        .map(|f| (f.first.pid, f.last.pid))
}

#[test]
fn stat_name_and_start_time_after_an_awkward_name() {
    let stat = b"4242 (a) b (c) S 17 4242 99 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 987654 100 200";
    assert_eq!(parse_stat(stat), Some((b"a) b (c".to_vec(), 987654)));
    assert_eq!(parse_stat(b"garbage"), None);
    assert_eq!(parse_stat(b"1 (x) S 1"), None, "too short");
}

#[test]
fn argv_nuls_become_spaces_and_trailing_ones_go() {
    assert_eq!(argv_of(b"sed\0-i\0s/a/b/\0f\0"), b"sed -i s/a/b/ f");
    assert_eq!(argv_of(b"a\0\0b\0\0"), b"a  b");
    assert_eq!(argv_of(b""), b"");
}

#[test]
fn this_process_is_read_and_cached_a_gone_one_is_unknown() {
    let w = Who::default();
    let me = std::process::id();
    let a = w.actor(me, 7);
    assert_eq!(a.pid, me);
    assert_eq!(a.uid, 7);
    let c = a.command.clone().unwrap();
    assert!(!c.comm.is_empty());
    assert!(!c.argv.is_empty() && c.argv.len() <= ARGV_MAX);
    let b = w.actor(me, 7);
    assert!(Arc::ptr_eq(&c, b.command.as_ref().unwrap()), "cached");
    let gone = w.actor(u32::MAX - 1, 7);
    assert_eq!(gone.command, None);
    assert_eq!(gone.pid, u32::MAX - 1);
    assert_eq!(gone.shown(), format!("unknown (pid {})", u32::MAX - 1));
    assert_eq!(w.actor(0, 7).command, None);
}

#[test]
fn another_thread_is_its_process() {
    let w = Who::default();
    let me = std::process::id();
    let tid = std::thread::spawn(|| rustix::thread::gettid().as_raw_nonzero().get() as u32)
        .join()
        .unwrap();
    // The thread is gone now: unknown, under its own id.
    assert_eq!(w.actor(tid, 0).command, None);
    let (tx, rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let h = std::thread::spawn(move || {
        tx.send(rustix::thread::gettid().as_raw_nonzero().get() as u32)
            .unwrap();
        let _ = done_rx.recv();
    });
    let tid = rx.recv().unwrap();
    let a = w.actor(tid, 0);
    done_tx.send(()).unwrap();
    h.join().unwrap();
    assert_eq!(a.pid, me);
    assert!(a.command.is_some());
}

#[test]
fn shown_is_escaped() {
    let mut a = who(1, "printf \x1b]0;pwned\x07");
    assert_eq!(a.shown(), "printf \\x1b]0;pwned\\x07");
    a.command = Some(Arc::new(Command {
        comm: b"k\x1bthread".to_vec(),
        argv: Vec::new(),
    }));
    assert_eq!(a.shown(), "[k\\x1bthread]");
}

#[test]
fn json_round_trip_exact_with_b64() {
    let mut a = who(5, "x");
    a.command = Some(Arc::new(Command {
        comm: b"c\xff".to_vec(),
        argv: b"c\xff \x1b".to_vec(),
    }));
    let j = serde_json::to_value(&a).unwrap();
    assert_eq!(j["pid"], 5);
    assert!(j["argv_b64"].is_string() && j["comm_b64"].is_string());
    assert_eq!(j["time"], "1970-01-01T00:00:05.000Z");
    let back: Actor = serde_json::from_value(j).unwrap();
    assert_eq!(back, a);
    let unknown = Actor {
        command: None,
        ..a.clone()
    };
    let j = serde_json::to_value(&unknown).unwrap();
    assert!(j.get("argv").is_none() && j.get("comm").is_none());
    assert_eq!(serde_json::from_value::<Actor>(j).unwrap(), unknown);
}

#[test]
fn many_writes_are_one_entry_with_first_and_last() {
    let mut t = Trails::default();
    for i in 1..=1000 {
        t.change(Path::new("f"), who(i, "w"));
    }
    assert_eq!(t.len(), 1);
    assert_eq!(t.iter().next().unwrap().1.len(), 2);
    assert_eq!(first_last(&t, "f"), Some((1, 1000)));
}

#[test]
fn marks_keep_what_a_rewind_needs() {
    let mut t = Trails::default();
    t.change(Path::new("a"), who(1, "one"));
    t.change(Path::new("a"), who(2, "two"));
    t.change(Path::new("a"), who(3, "three"));
    let m1 = t.mark();
    t.change(Path::new("a"), who(4, "four"));
    t.change(Path::new("a"), who(5, "five"));
    t.change(Path::new("b"), who(6, "six"));
    assert_eq!(first_last(&t, "a"), Some((1, 5)));
    let then = t.as_of(m1);
    assert_eq!(first_last(&then, "a"), Some((1, 3)));
    assert_eq!(first_last(&then, "b"), None);
    assert_eq!(
        t.iter().next().unwrap().1.len(),
        4,
        "first and last before the mark, first and last after it"
    );
    let mut after = t.clone();
    after.change(Path::new("a"), who(8, "eight"));
    assert_eq!(after.iter().next().unwrap().1.len(), 4, "the last replaced");
    after.forget_upto(&[PathBuf::from("a"), PathBuf::from("b")], &[], Some(m1));
    assert_eq!(
        first_last(&after, "a"),
        Some((4, 8)),
        "the changes after the mark"
    );
    assert_eq!(first_last(&after, "b"), Some((6, 6)));
    t.rewind(m1);
    assert_eq!(t, then);
    // Numbers go on after a rewind.
    assert!(t.change(Path::new("c"), who(7, "seven")) > m1);
}

#[test]
fn a_rename_carries_the_record_and_the_tree_under_it() {
    let mut t = Trails::default();
    t.change(Path::new("d/x"), who(1, "mk"));
    t.change(Path::new("d"), who(1, "mk"));
    t.change(Path::new("e"), who(2, "old"));
    t.change(Path::new("e/y"), who(2, "old"));
    t.rename(Path::new("d"), Path::new("e"), who(3, "mv"));
    assert_eq!(first_last(&t, "e"), Some((1, 3)));
    assert_eq!(first_last(&t, "e/x"), Some((1, 1)));
    // (`e` was empty: `e/y` was removed before; its record stays.)
    assert_eq!(first_last(&t, "e/y"), Some((2, 2)), "nothing landed on it");
    assert_eq!(first_last(&t, "d"), Some((1, 3)), "deleted by the rename");
    assert_eq!(first_last(&t, "d/x"), None);
}

#[test]
fn an_exchange_swaps_the_records_and_the_trees_under_them() {
    let mut t = Trails::default();
    t.change(Path::new("a"), who(1, "mk"));
    t.change(Path::new("a/x"), who(1, "mk"));
    t.change(Path::new("a-b/y"), who(2, "mk"));
    t.change(Path::new("c"), who(5, "other"));
    t.exchange(Path::new("a"), Path::new("a-b"), who(3, "swap"));
    assert_eq!(
        first_last(&t, "a-b"),
        Some((1, 3)),
        "a's object, now at a-b"
    );
    assert_eq!(first_last(&t, "a-b/x"), Some((1, 1)));
    assert_eq!(first_last(&t, "a/y"), Some((2, 2)));
    assert_eq!(first_last(&t, "a"), Some((3, 3)), "the exchange alone");
    assert_eq!(first_last(&t, "a/x"), None);
    assert_eq!(first_last(&t, "a-b/y"), None);
    assert_eq!(first_last(&t, "c"), Some((5, 5)), "untouched");
}

#[test]
fn forget_drops_paths_and_trees_only() {
    let mut t = Trails::default();
    for p in ["a", "a/b", "a-b", "ab", "c/d"] {
        t.change(Path::new(p), who(1, "w"));
    }
    assert!(t.forget(&[PathBuf::from("ab")], &[PathBuf::from("a")]));
    let left: Vec<_> = t
        .iter()
        .map(|(p, _)| p.to_str().unwrap().to_owned())
        .collect();
    assert_eq!(left, ["a-b", "c/d"]);
    assert!(!t.forget(&[PathBuf::from("zz")], &[]));
    t.forget(&[], &[PathBuf::new()]);
    assert!(t.is_empty());
}

/// A rename over a path after a mark (`sed -i`, an editor's save): now the
/// path's record is the new file's; rewound to the mark, the one before.
#[test]
fn a_rename_over_a_path_after_a_mark_keeps_its_record_for_a_rewind() {
    let mut t = Trails::default();
    t.change(Path::new("f"), who(1, "tee"));
    t.change(Path::new("d/x"), who(1, "tee"));
    let m = t.mark();
    let then = t.clone();
    t.change(Path::new("tmp"), who(2, "sed"));
    t.rename(Path::new("tmp"), Path::new("f"), who(2, "sed"));
    t.change(Path::new("e/x"), who(3, "mk"));
    t.rename(Path::new("e"), Path::new("d"), who(4, "mv"));
    assert_eq!(first_last(&t, "f"), Some((2, 2)), "the new file's");
    assert_eq!(first_last(&t, "d/x"), Some((3, 3)), "replaced by e/x");
    t.change(Path::new("f"), who(5, "cp"));
    assert_eq!(first_last(&t, "f"), Some((2, 5)));
    let mut rewound = t.clone();
    rewound.rewind(m);
    assert_eq!(first_last(&rewound, "f"), Some((1, 1)));
    assert_eq!(first_last(&rewound, "d/x"), Some((1, 1)));
    assert_eq!(first_last(&rewound, "tmp"), None);
    assert_eq!(first_last(&rewound, "e/x"), None);
    assert_eq!(
        rewound.iter().collect::<Vec<_>>(),
        then.iter().collect::<Vec<_>>()
    );
    // A commit of everything up to the mark: the changes after it stay.
    t.forget_upto(&[PathBuf::from("f")], &[], Some(m));
    assert_eq!(first_last(&t, "f"), Some((2, 5)));
}

/// What a sequence of operations does to a record, for the property below.
#[derive(Debug, Clone)]
enum Op {
    Change(usize),
    Rename(usize, usize),
    Exchange(usize, usize),
    Mark,
    /// A rewind to the kept mark this picks.
    Rewind(usize),
    /// The oldest kept mark's checkpoint merged away.
    DropOldest,
}

const NAMES: [&str; 6] = ["a", "b", "a/x", "b/x", "a/x/y", "c"];

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        4 => (0..NAMES.len()).prop_map(Op::Change),
        2 => (0..NAMES.len(), 0..NAMES.len()).prop_map(|(a, b)| Op::Rename(a, b)),
        1 => (0..NAMES.len(), 0..NAMES.len()).prop_map(|(a, b)| Op::Exchange(a, b)),
        2 => Just(Op::Mark),
        1 => (0..8usize).prop_map(Op::Rewind),
        1 => Just(Op::DropOldest),
    ]
}

/// The record as it should read: each path's (first, last) pid, with a
/// rename's meaning (the new name takes the old one's record and what was
/// under it; what was at the new name, and under it where a moved record
/// lands, is replaced).
type Model = BTreeMap<PathBuf, (u32, u32)>;

fn model_change(m: &mut Model, p: &Path, pid: u32) {
    m.entry(p.to_path_buf())
        .and_modify(|fl| fl.1 = pid)
        .or_insert((pid, pid));
}

fn now(t: &Trails) -> Model {
    t.iter()
        .filter_map(|(p, _)| {
            t.first_last(p)
                .map(|f| (p.clone(), (f.first.pid, f.last.pid)))
        })
        .collect()
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2048),
        failure_persistence: None,
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// Whatever the changes, renames, marks, merges and rewinds, the
    /// record reads as the model does now, and a rewind to a mark gives
    /// back exactly what it read at that mark.
    #[test]
    fn a_rewind_gives_back_the_record_at_its_mark(ops in proptest::collection::vec(op(), 1..60)) {
        let mut t = Trails::default();
        let mut model = Model::new();
        // Each kept mark with the record read when it was taken.
        let mut kept: Vec<(u64, Model)> = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            let pid = i as u32 + 1;
            match *op {
                Op::Change(p) => {
                    t.change(Path::new(NAMES[p]), who(pid, "w"));
                    model_change(&mut model, Path::new(NAMES[p]), pid);
                }
                Op::Rename(a, b) => {
                    let (from, to) = (Path::new(NAMES[a]), Path::new(NAMES[b]));
                    if from != to && (from.starts_with(to) || to.starts_with(from)) {
                        continue;
                    }
                    t.rename(from, to, who(pid, "mv"));
                    if from != to {
                        model.remove(to);
                        let under: Vec<PathBuf> = model.keys().filter(|p| p.starts_with(from) && *p != from).cloned().collect();
                        for p in under {
                            let fl = model.remove(&p).unwrap();
                            model.insert(to.join(p.strip_prefix(from).unwrap()), fl);
                        }
                        if let Some(fl) = model.get(from).copied() {
                            model.insert(to.to_path_buf(), fl);
                        }
                    }
                    model_change(&mut model, from, pid);
                    model_change(&mut model, to, pid);
                }
                Op::Exchange(a, b) => {
                    let (a, b) = (Path::new(NAMES[a]), Path::new(NAMES[b]));
                    if a == b || a.starts_with(b) || b.starts_with(a) {
                        continue;
                    }
                    t.exchange(a, b, who(pid, "mv"));
                    let tree = |m: &Model, of: &Path| -> Vec<PathBuf> {
                        m.keys().filter(|p| p.starts_with(of)).cloned().collect()
                    };
                    let (under_a, under_b) = (tree(&model, a), tree(&model, b));
                    let mut swapped = Vec::new();
                    for (list, from, to) in [(under_a, a, b), (under_b, b, a)] {
                        for p in list {
                            let fl = model.remove(&p).unwrap();
                            swapped.push((to.join(p.strip_prefix(from).unwrap()), fl));
                        }
                    }
                    for (p, fl) in swapped {
                        // (`join` of an empty tail leaves a trailing `/`.)
                        model.insert(p.components().collect(), fl);
                    }
                    model_change(&mut model, a, pid);
                    model_change(&mut model, b, pid);
                }
                Op::Mark => {
                    let seq = t.mark();
                    kept.retain(|(m, _)| *m != seq);
                    kept.push((seq, model.clone()));
                }
                Op::Rewind(k) => {
                    if kept.is_empty() {
                        continue;
                    }
                    let k = k % kept.len();
                    let (seq, then) = kept[k].clone();
                    t.rewind(seq);
                    kept.truncate(k + 1);
                    model = then;
                }
                Op::DropOldest => {
                    if !kept.is_empty() {
                        kept.remove(0);
                    }
                    let live: Vec<u64> = kept.iter().map(|(m, _)| *m).collect();
                    t.drop_marks(|m| live.contains(&m));
                }
            }
            proptest::prop_assert_eq!(now(&t), model.clone(), "after {:?} (op {})", op, i);
        }
    }
}

#[test]
fn forgetting_one_path_costs_that_path_not_the_whole_log() {
    // A file made and removed again through the mount forgets its record
    // on every unlink: that must not walk every record kept (it did, and
    // an unlink loop over a mount that had seen 100,000 changes then spent
    // most of the daemon's time summing trails).
    let mut t = Trails::default();
    let n = 20_000;
    let paths: Vec<PathBuf> = (0..n).map(|i| PathBuf::from(format!("d/f{i}"))).collect();
    for p in &paths {
        t.change(p, who(1, "tar"));
    }
    let started = std::time::Instant::now();
    for p in &paths {
        assert!(t.forget(std::slice::from_ref(p), &[]), "a record dropped");
    }
    let took = started.elapsed();
    assert_eq!(t.len(), 0);
    assert!(
        !t.forget(&[PathBuf::from("d/f0")], &[]),
        "nothing left to drop"
    );
    // 0.1 s unoptimized here; summing every trail per forget took 20 s.
    assert!(took < Duration::from_secs(5), "{n} forgets took {took:?}");
}

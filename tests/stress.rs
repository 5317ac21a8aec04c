//! Concurrency stress: several workers create, replace (write + rename),
//! link, rename, delete and read in one tree for a bounded number of
//! operations and time; every operation's result is checked (only the
//! errors a race explains are accepted) and each kind must have succeeded
//! often enough; then every surviving file is checked through the mount
//! against the backing store.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;

const WORKERS: u64 = 4;
const NAMES: u64 = 40;
const MAX_OPS: u64 = 4000;
/// Each worker stops at MAX_OPS operations or after MAX_TIME, whichever comes
/// first (about 1,400 operations a second in all on 2 loaded cores).
const MAX_TIME: Duration = Duration::from_secs(10);

/// xorshift: reproducible per worker.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A self-checking body: one line repeated.
fn body(line: &str, reps: usize) -> String {
    line.repeat(reps)
}

fn well_formed(data: &[u8]) -> bool {
    let text = String::from_utf8_lossy(data);
    let Some(first) = text.split_inclusive('\n').next() else {
        return data.is_empty();
    };
    !first.is_empty()
        && text.len() % first.len() == 0
        && text == first.repeat(text.len() / first.len())
}

/// What one worker did: operations tried, successes of each kind, torn
/// reads seen.
#[derive(Default)]
struct Tally {
    ops: u64,
    ok: BTreeMap<&'static str, u64>,
    bad_reads: u64,
}

impl Tally {
    /// Count `r` under `kind` when it succeeded; an error is fine only when
    /// it is one of `expected` (what another worker's race can cause: the
    /// name is gone, or already taken). Anything else fails the test.
    #[track_caller]
    fn note<T: std::fmt::Debug>(
        &mut self,
        kind: &'static str,
        r: std::io::Result<T>,
        expected: &[i32],
    ) -> bool {
        match r {
            Ok(_) => {
                *self.ok.entry(kind).or_default() += 1;
                true
            }
            Err(e) if e.raw_os_error().is_some_and(|n| expected.contains(&n)) => false,
            Err(e) => panic!("{kind}: unexpected error {e}"),
        }
    }

    fn add(&mut self, other: Tally) {
        self.ops += other.ops;
        self.bad_reads += other.bad_reads;
        for (k, n) in other.ok {
            *self.ok.entry(k).or_default() += n;
        }
    }
}

const KINDS: [&str; 7] = [
    "replace", "link", "unlink", "rename", "mkdir", "rmdir", "read",
];
/// Each kind of operation must have succeeded at least this often, in
/// total: a run where, say, every link failed proves nothing about links.
const MIN_OK: u64 = 25;

fn worker(dir: &Path, w: u64) -> Tally {
    use libc::{EEXIST, ENOENT};
    let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ ((w + 1) * 0x9e37_79b9));
    let mut t = Tally::default();
    let start = Instant::now();
    while t.ops < MAX_OPS && start.elapsed() < MAX_TIME {
        t.ops += 1;
        let ops = t.ops;
        let k = rng.below(NAMES);
        let j = rng.below(NAMES);
        let name = dir.join(format!("n{k}"));
        let other = dir.join(format!("n{j}"));
        match rng.below(10) {
            0..=3 => {
                // A temp name of this worker's own, renamed over `name`:
                // neither step has a reason to fail.
                let tmp = dir.join(format!(".t{w}-{ops}"));
                let line = format!("n{k}:{w}:{ops}\n");
                fs::write(&tmp, body(&line, 1 + rng.below(300) as usize)).unwrap();
                t.note("replace", fs::rename(&tmp, &name), &[]);
            }
            4 => {
                t.note("link", fs::hard_link(&name, &other), &[ENOENT, EEXIST]);
            }
            5 => {
                t.note("unlink", fs::remove_file(&name), &[ENOENT]);
            }
            6 => {
                t.note("rename", fs::rename(&name, &other), &[ENOENT]);
            }
            7 => {
                let d = dir.join(format!("d{k}"));
                if !t.note("mkdir", fs::create_dir(&d), &[EEXIST]) {
                    t.note("rmdir", fs::remove_dir(&d), &[ENOENT]);
                }
            }
            _ => {
                let r = fs::read(&name);
                if let Ok(data) = &r {
                    if !well_formed(data) {
                        t.bad_reads += 1;
                    }
                }
                t.note("read", r, &[ENOENT]);
            }
        }
    }
    t
}

#[test]
fn concurrent_workers_keep_every_file_whole() {
    if !fuse_ok() {
        return;
    }
    let m = Setup::zones(Mode::Direct, &[("ws", "mode: rw")])
        .dir("ws", "s")
        .mount();
    let dir = m.path("ws/s");
    let handles: Vec<_> = (0..WORKERS)
        .map(|w| {
            let dir = dir.clone();
            std::thread::spawn(move || worker(&dir, w))
        })
        .collect();
    let mut all = Tally::default();
    for h in handles {
        all.add(h.join().unwrap());
    }
    let total = all.ops;
    assert_eq!(all.bad_reads, 0, "a reader saw a torn file");
    for kind in KINDS {
        let n = all.ok.get(kind).copied().unwrap_or(0);
        assert!(
            n >= MIN_OK,
            "{kind} succeeded {n} times in {total} operations (want >= {MIN_OK}): {:?}",
            all.ok
        );
    }

    // Every change went through the mount, so what it shows must match the
    // backing store now, cached attributes (nlink) included: no waiting
    // for caches to expire.
    let backing = m.backing("ws", "s");
    let list = |d: &Path| -> BTreeMap<String, (bool, u64)> {
        fs::read_dir(d)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let md = fs::symlink_metadata(e.path()).unwrap();
                (
                    e.file_name().to_string_lossy().into_owned(),
                    (md.is_dir(), md.nlink()),
                )
            })
            .collect()
    };
    let (seen, truth) = (list(&dir), list(&backing));
    assert_eq!(
        seen, truth,
        "listing through the mount differs from the backing dir"
    );
    for (name, (is_dir, _)) in &truth {
        if *is_dir {
            continue;
        }
        let via_mount = fs::read(dir.join(name)).unwrap();
        let on_host = fs::read(backing.join(name)).unwrap();
        assert_eq!(via_mount, on_host, "{name}: content differs");
        assert!(well_formed(&on_host), "{name}: torn content");
        assert!(!name.starts_with(".t"), "a temp file was left: {name}");
    }
    eprintln!(
        "stress: {total} operations, successes {:?}, {} entries left",
        all.ok,
        truth.len()
    );
}

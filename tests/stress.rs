//! Concurrency stress: several workers create, replace (write + rename),
//! link, rename, delete and read in one tree for a bounded time; then every
//! surviving file is checked through the mount against the backing store.
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
const MAX_TIME: Duration = Duration::from_secs(4);

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

fn worker(dir: &Path, w: u64) -> (u64, u64) {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ ((w + 1) * 0x9e37_79b9));
    let (mut ops, mut bad_reads) = (0, 0);
    let start = Instant::now();
    while ops < MAX_OPS && start.elapsed() < MAX_TIME {
        ops += 1;
        let k = rng.below(NAMES);
        let j = rng.below(NAMES);
        let name = dir.join(format!("n{k}"));
        let other = dir.join(format!("n{j}"));
        match rng.below(10) {
            0..=3 => {
                let tmp = dir.join(format!(".t{w}-{ops}"));
                let line = format!("n{k}:{w}:{ops}\n");
                fs::write(&tmp, body(&line, 1 + rng.below(300) as usize)).unwrap();
                if fs::rename(&tmp, &name).is_err() {
                    let _ = fs::remove_file(&tmp);
                }
            }
            4 => {
                let _ = fs::hard_link(&name, &other);
            }
            5 => {
                let _ = fs::remove_file(&name);
            }
            6 => {
                let _ = fs::rename(&name, &other);
            }
            7 => {
                let d = dir.join(format!("d{k}"));
                if fs::create_dir(&d).is_err() {
                    let _ = fs::remove_dir(&d);
                }
            }
            _ => {
                if let Ok(data) = fs::read(&name) {
                    if !well_formed(&data) {
                        bad_reads += 1;
                    }
                }
            }
        }
    }
    (ops, bad_reads)
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
    let mut total = 0;
    for h in handles {
        let (ops, bad) = h.join().unwrap();
        assert_eq!(bad, 0, "a reader saw a torn file");
        total += ops;
    }
    assert!(total > 100, "only {total} operations ran");

    // Let cached attributes expire, then compare mount and backing store.
    std::thread::sleep(Duration::from_millis(1100));
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
    eprintln!("stress: {total} operations, {} entries left", truth.len());
}

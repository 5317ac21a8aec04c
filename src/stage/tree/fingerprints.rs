//! What each backing path was when the worker first changed it, so a
//! commit can tell a host change made meanwhile (a conflict) from the
//! worker's own. An append-only file in the zone's stage dir, one JSON
//! object per line, written before the change it precedes: a daemon crash
//! loses none (the kernel has each line). A machine crash may lose the
//! last lines; a path without a fingerprint is then judged by the stage's
//! creation time (see `apply`), which can only call more conflicts.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use rustix::fs::Stat;
use serde::{Deserialize, Serialize};

const FILE: &str = "fingerprints";
const CREATED: &str = "created";

/// A backing object as it was (what a host change would alter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint {
    pub dev: u64,
    pub ino: u64,
    pub size: i64,
    pub mtime: (i64, i64),
    pub ctime: (i64, i64),
    pub mode: u32,
}

impl Fingerprint {
    pub fn of(st: &Stat) -> Fingerprint {
        Fingerprint {
            dev: st.st_dev,
            ino: st.st_ino,
            size: st.st_size,
            mtime: (st.st_mtime, st.st_mtime_nsec as i64),
            ctime: (st.st_ctime, st.st_ctime_nsec as i64),
            mode: st.st_mode,
        }
    }
}

#[derive(Serialize, Deserialize)]
struct Line {
    p: PathBuf,
    /// None: nothing was there.
    s: Option<Fingerprint>,
}

#[derive(Debug)]
pub struct Fingerprints {
    path: PathBuf,
    known: Mutex<Known>,
    created: (i64, i64),
}

#[derive(Debug, Default)]
struct Known {
    map: HashMap<PathBuf, Option<Fingerprint>>,
    file: Option<File>,
}

impl Fingerprints {
    /// The fingerprints kept in `zone_dir` (made on first use).
    pub fn open(zone_dir: &Path) -> io::Result<Fingerprints> {
        let path = zone_dir.join(FILE);
        let mut map = HashMap::new();
        match File::open(&path) {
            Ok(f) => {
                for line in BufReader::new(f).lines() {
                    // A torn last line (a crash mid-append) is skipped.
                    if let Ok(l) = serde_json::from_str::<Line>(&line?) {
                        map.entry(l.p).or_insert(l.s);
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let created_file = zone_dir.join(CREATED);
        if !created_file.exists() {
            File::create(&created_file)?.sync_all()?;
        }
        let st = rustix::fs::stat(&created_file)?;
        Ok(Fingerprints {
            path,
            known: Mutex::new(Known { map, file: None }),
            created: (st.st_mtime, st.st_mtime_nsec as i64),
        })
    }

    /// When the stage was made.
    pub fn created_at(&self) -> (i64, i64) {
        self.created
    }

    /// Whether `rel` has a fingerprint already.
    pub fn has(&self, rel: &Path) -> bool {
        self.known.lock().map.contains_key(rel)
    }

    /// Keep what `rel` was (`None`: nothing) unless it has a fingerprint
    /// already; written (not synced) when this returns.
    pub fn note(&self, rel: &Path, was: Option<Fingerprint>) -> io::Result<()> {
        let mut k = self.known.lock();
        if k.map.contains_key(rel) {
            return Ok(());
        }
        if k.file.is_none() {
            k.file = Some(
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .mode(0o600)
                    .open(&self.path)?,
            );
        }
        let mut line = serde_json::to_vec(&Line {
            p: rel.to_path_buf(),
            s: was,
        })
        .map_err(io::Error::other)?;
        line.push(b'\n');
        if let Some(f) = k.file.as_mut() {
            f.write_all(&line)?;
        }
        k.map.insert(rel.to_path_buf(), was);
        Ok(())
    }

    /// `rel`'s fingerprint: None when it has none; Some(None) when
    /// nothing was there.
    pub fn get(&self, rel: &Path) -> Option<Option<Fingerprint>> {
        self.known.lock().map.get(rel).copied()
    }

    /// Drop the fingerprints of `paths` and everything under them (after
    /// a commit or discard), rewriting the file atomically.
    pub fn forget(&self, paths: &[PathBuf]) -> io::Result<()> {
        let mut k = self.known.lock();
        let before = k.map.len();
        let all = paths.iter().any(|p| p.as_os_str().is_empty());
        k.map
            .retain(|p, _| !all && !paths.iter().any(|f| p.starts_with(f)));
        if k.map.len() == before {
            return Ok(());
        }
        let tmp = self.path.with_extension("tmp");
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        let mut seen = HashSet::new();
        for (p, s) in &k.map {
            if seen.insert(p) {
                let mut line = serde_json::to_vec(&Line {
                    p: p.clone(),
                    s: *s,
                })
                .map_err(io::Error::other)?;
                line.push(b'\n');
                f.write_all(&line)?;
            }
        }
        f.sync_all()?;
        std::fs::rename(&tmp, &self.path)?;
        k.file = None;
        Ok(())
    }
}

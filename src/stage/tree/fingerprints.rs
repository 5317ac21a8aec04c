//! What each backing path was when the worker first changed it, so a
//! commit can tell a host change made meanwhile (a conflict) from the
//! worker's own. An append-only file in the zone's stage dir, one JSON
//! object per line, written before the change it precedes: a daemon crash
//! loses none (the kernel has each line). A machine crash may lose the
//! last lines; a path without a fingerprint is then judged by the stage's
//! creation time (see `apply`), which can only call more conflicts.
//!
//! The file is appended to through a shared mapping where its filesystem
//! allows ([`AppendLog`](crate::stage::sys::AppendLog)): a first change to a
//! host file is on the request path of every deletion of one, and a
//! `write` per line cost a tenth of a staged unlink.

use std::collections::{HashMap, HashSet};
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use rustix::fs::Stat;
use serde::{Deserialize, Serialize};

use crate::stage::sys::AppendLog;

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

/// A line of the file, as read (`line` writes it).
#[derive(Deserialize)]
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
    /// Opened on the first note.
    log: Option<AppendLog>,
    line: Vec<u8>,
}

impl Fingerprints {
    /// The fingerprints kept in `zone_dir` (made on first use).
    pub fn open(zone_dir: &Path) -> io::Result<Fingerprints> {
        let path = zone_dir.join(FILE);
        let mut map = HashMap::new();
        match crate::stage::dir::read_nofollow(&path) {
            Ok(bytes) => {
                // The log's unused tail is zeros (after a crash: see
                // `AppendLog`); a torn last line is skipped.
                let used = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
                for line in bytes[..used].split(|b| *b == b'\n') {
                    if let Ok(l) = serde_json::from_slice::<Line>(line) {
                        map.entry(l.p).or_insert(l.s);
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        // When the stage was made: the file's mtime (made now when
        // missing; a symlink is not followed).
        let created_file = zone_dir.join(CREATED);
        let st = match rustix::fs::lstat(&created_file) {
            Ok(st) => st,
            Err(rustix::io::Errno::NOENT) => {
                let f = OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(&created_file)?;
                f.sync_all()?;
                rustix::fs::fstat(&f)?
            }
            Err(e) => return Err(e.into()),
        };
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(io::Error::other(format!(
                "{}: not a regular file",
                created_file.display()
            )));
        }
        Ok(Fingerprints {
            path,
            known: Mutex::new(Known {
                map,
                ..Known::default()
            }),
            created: (st.st_mtime, st.st_mtime_nsec as i64),
        })
    }

    /// When the stage was made.
    pub fn created_at(&self) -> (i64, i64) {
        self.created
    }

    /// Keep what `rel` was (`None`: nothing) unless it has a fingerprint
    /// already; written (not synced) when this returns.
    pub fn note(&self, rel: &Path, was: Option<Fingerprint>) -> io::Result<()> {
        self.note_first(rel, || was)
    }

    /// As `note`, asking `was` only when `rel` has no fingerprint yet. It
    /// is asked without the lock, so that a slow backing filesystem holds
    /// back no other note; two first changes racing to one path both ask,
    /// and the first to write its line wins (a change through the mount
    /// never alters the backing dir, so both see the same).
    pub fn note_first(
        &self,
        rel: &Path,
        was: impl FnOnce() -> Option<Fingerprint>,
    ) -> io::Result<()> {
        if self.known.lock().map.contains_key(rel) {
            return Ok(());
        }
        let was = was();
        let mut guard = self.known.lock();
        let k = &mut *guard;
        if k.map.contains_key(rel) {
            return Ok(());
        }
        let log = match &mut k.log {
            Some(log) => log,
            None => k.log.insert(AppendLog::open(&self.path, 0o600)?),
        };
        k.line.clear();
        line(&mut k.line, rel, was)?;
        log.append(&k.line)?;
        k.map.insert(rel.to_path_buf(), was);
        Ok(())
    }

    /// `rel`'s fingerprint: None when it has none; Some(None) when
    /// nothing was there.
    pub fn get(&self, rel: &Path) -> Option<Option<Fingerprint>> {
        self.known.lock().map.get(rel).copied()
    }

    /// Drop the fingerprints of `paths` and everything under them (after
    /// a commit or discard; the backing dir's own stays), rewriting the
    /// file atomically.
    pub fn forget(&self, paths: &[PathBuf]) -> io::Result<()> {
        self.settle(&[], paths, &[])
    }

    /// After a commit: drop the fingerprints of `exact` (those paths
    /// only) and of `trees` (with everything under them), and set those
    /// of `set` (a path the commit left as the worker's); the file is
    /// rewritten atomically, once.
    pub fn settle(
        &self,
        exact: &[PathBuf],
        trees: &[PathBuf],
        set: &[(PathBuf, Option<Fingerprint>)],
    ) -> io::Result<()> {
        let mut k = self.known.lock();
        let before = k.map.len();
        let exact: HashSet<&PathBuf> = exact.iter().collect();
        // The backing dir's own note (the dir the stage is made over)
        // outlives what is under it.
        k.map.retain(|p, _| {
            p.as_os_str().is_empty()
                || (!exact.contains(p) && !trees.iter().any(|f| p.starts_with(f)))
        });
        let mut changed = k.map.len() != before;
        for (p, s) in set {
            changed |= k.map.insert(p.clone(), *s) != Some(*s);
        }
        if !changed {
            return Ok(());
        }
        let tmp = self.path.with_extension("tmp");
        let mut f = crate::stage::dir::create_fresh(&tmp, 0o600)?;
        let mut seen = HashSet::new();
        for (p, s) in &k.map {
            if seen.insert(p) {
                let mut l = Vec::new();
                line(&mut l, p, *s)?;
                f.write_all(&l)?;
            }
        }
        f.sync_all()?;
        std::fs::rename(&tmp, &self.path)?;
        // The old file's log goes with it; the next note opens the new one.
        k.log = None;
        Ok(())
    }
}

/// Append `rel`'s line to `out`: `{"p":<path>,"s":<fingerprint or null>}`
/// and a newline, as `Line` reads it. Written by hand: a first change to
/// a host file (every deletion of one in a staged zone) waits for it, and
/// serde's generic map took ten times as long. A path that is not UTF-8
/// can't be written (JSON strings are text): an error.
fn line(out: &mut Vec<u8>, rel: &Path, was: Option<Fingerprint>) -> io::Result<()> {
    out.extend_from_slice(b"{\"p\":");
    serde_json::to_writer(&mut *out, rel).map_err(io::Error::other)?;
    let Some(f) = was else {
        out.extend_from_slice(b",\"s\":null}\n");
        return Ok(());
    };
    let mut n = itoa::Buffer::new();
    let mut put = |key: &[u8], v: &str| {
        out.extend_from_slice(key);
        out.extend_from_slice(v.as_bytes());
    };
    put(b",\"s\":{\"dev\":", n.format(f.dev));
    put(b",\"ino\":", n.format(f.ino));
    put(b",\"size\":", n.format(f.size));
    put(b",\"mtime\":[", n.format(f.mtime.0));
    put(b",", n.format(f.mtime.1));
    put(b"],\"ctime\":[", n.format(f.ctime.0));
    put(b",", n.format(f.ctime.1));
    put(b"],\"mode\":", n.format(f.mode));
    out.extend_from_slice(b"}}\n");
    Ok(())
}

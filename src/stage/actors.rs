//! Who changed each path of a staged zone (`actor::Trails`), kept with the
//! stage: an append-only file `actors` in the zone's stage dir, one JSON
//! object per line, appended when the change has been made and before it
//! is answered (through a shared mapping where the filesystem allows, as
//! the fingerprints: a daemon killed loses none of what it answered).
//!
//! Lines: `{"s":SEQ,"p":PATH,"a":ACTOR}` a change of `p`;
//! `{"s":SEQ,"p":FROM,"t":TO,"a":ACTOR}` a rename; `{"m":SEQ}` a mark (a
//! checkpoint). A path that is not UTF-8 has its bytes in `p_b64`/`t_b64`.
//! Read back in order, they give the same record. The file is rewritten
//! from the record (atomically, once) when a commit or discard drops
//! paths, and when it holds many more lines than the record has entries,
//! so its size follows the paths changed, not the writes made.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::actor::{Actor, FirstLast, Trails};
use crate::stage::report::Change;
use crate::stage::sys::AppendLog;

const FILE: &str = "actors";

/// Rewrite the file when it has this many more lines than twice the
/// entries (each entry is one to a few lines).
const SLACK: usize = 4096;

#[derive(Serialize, Deserialize)]
struct Line {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    m: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    s: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    p: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    p_b64: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    t: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    t_b64: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    a: Option<Actor>,
}

impl Line {
    fn path(rel: &Path) -> (Option<String>, Option<String>) {
        let (text, b64) = crate::text::path_for_json(rel);
        (Some(text), b64)
    }

    fn change(seq: u64, rel: &Path, a: &Actor) -> Line {
        let (p, p_b64) = Line::path(rel);
        Line {
            m: None,
            s: Some(seq),
            p,
            p_b64,
            t: None,
            t_b64: None,
            a: Some(a.clone()),
        }
    }

    fn write(&self, out: &mut Vec<u8>) -> io::Result<()> {
        serde_json::to_writer(&mut *out, self).map_err(io::Error::other)?;
        out.push(b'\n');
        Ok(())
    }
}

/// A staged zone's record of who changed what.
#[derive(Debug)]
pub struct StageActors {
    path: PathBuf,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    trails: Trails,
    /// Opened on the first change.
    log: Option<AppendLog>,
    lines: usize,
    buf: Vec<u8>,
}

impl StageActors {
    /// The record kept in `zone_dir` (the file made on the first change).
    pub fn open(zone_dir: &Path) -> io::Result<StageActors> {
        let path = zone_dir.join(FILE);
        let mut trails = Trails::default();
        let mut lines = 0;
        match std::fs::read(&path) {
            Ok(bytes) => {
                // A mapped log's unused tail is zeros; a torn last line
                // (a crash mid-copy) is skipped.
                let used = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
                for l in bytes[..used].split(|b| *b == b'\n') {
                    if let Ok(l) = serde_json::from_slice::<Line>(l) {
                        lines += 1;
                        replay(&mut trails, l);
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        Ok(StageActors {
            path,
            inner: Mutex::new(Inner {
                trails,
                lines,
                ..Inner::default()
            }),
        })
    }

    /// A change of `rel` by `by`, made.
    pub fn change(&self, rel: &Path, by: &Actor) -> io::Result<()> {
        let mut k = self.inner.lock();
        let seq = k.trails.change(rel, by.clone());
        self.append(&mut k, &Line::change(seq, rel, by))
    }

    /// A rename of `from` to `to` by `by`, made (see `Trails::rename`).
    pub fn rename(&self, from: &Path, to: &Path, by: &Actor) -> io::Result<()> {
        let mut k = self.inner.lock();
        let seq = k.trails.rename(from, to, by.clone());
        let mut line = Line::change(seq, from, by);
        (line.t, line.t_b64) = Line::path(to);
        self.append(&mut k, &line)
    }

    fn append(&self, k: &mut Inner, line: &Line) -> io::Result<()> {
        if k.lines > 2 * k.trails.len() + SLACK {
            return self.rewrite(k);
        }
        let Inner { log, buf, .. } = k;
        buf.clear();
        line.write(buf)?;
        let log = match log {
            Some(log) => log,
            None => log.insert(AppendLog::open(&self.path, 0o600)?),
        };
        log.append(buf)?;
        k.lines += 1;
        Ok(())
    }

    /// `rel`'s first and last change, if recorded.
    pub fn first_last(&self, rel: &Path) -> Option<FirstLast> {
        self.inner.lock().trails.first_last(rel)
    }

    /// Give each change of a report its first and last actor.
    pub fn fill(&self, changes: &mut [Change]) {
        let k = self.inner.lock();
        for c in changes {
            if let Some(fl) = k.trails.first_last(&c.path) {
                c.first = Some(fl.first);
                c.last = Some(fl.last);
            }
        }
    }

    /// Drop the records of the changes a commit applied or a discard
    /// dropped (and of their renames' sources), and of the `trees` a
    /// discard named whole; the file is rewritten once.
    pub fn forget(&self, done: &[Change], trees: &[PathBuf]) -> io::Result<()> {
        let mut exact: Vec<PathBuf> = Vec::new();
        let mut whole: Vec<PathBuf> = trees.to_vec();
        for c in done {
            exact.push(c.path.clone());
            exact.extend(c.from.clone());
            // A deleted or renamed-away tree takes its contents with it.
            if c.kind == crate::stage::report::Kind::Deleted {
                whole.push(c.path.clone());
            }
        }
        let mut k = self.inner.lock();
        if k.trails.forget(&exact, &whole) {
            self.rewrite(&mut k)?;
        }
        Ok(())
    }

    /// Mark this point (for a checkpoint); its sequence number.
    pub fn mark(&self) -> io::Result<u64> {
        let mut k = self.inner.lock();
        let seq = k.trails.mark();
        let line = Line {
            m: Some(seq),
            s: None,
            p: None,
            p_b64: None,
            t: None,
            t_b64: None,
            a: None,
        };
        self.append(&mut k, &line)?;
        Ok(seq)
    }

    /// The record as it was at mark `seq`.
    pub fn as_of(&self, seq: u64) -> Trails {
        self.inner.lock().trails.as_of(seq)
    }

    /// Drop every change after mark `seq` (a rewind to it).
    pub fn rewind(&self, seq: u64) -> io::Result<()> {
        let mut k = self.inner.lock();
        k.trails.rewind(seq);
        self.rewrite(&mut k)
    }

    /// The whole record, as it is.
    pub fn trails(&self) -> Trails {
        self.inner.lock().trails.clone()
    }

    /// Write the file afresh from the record: a temporary file synced,
    /// renamed over it (the open log goes with the old file).
    fn rewrite(&self, k: &mut Inner) -> io::Result<()> {
        let tmp = self.path.with_extension("tmp");
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        let mut out = Vec::new();
        let mut lines = 0;
        for m in k.trails.marks() {
            Line {
                m: Some(*m),
                s: None,
                p: None,
                p_b64: None,
                t: None,
                t_b64: None,
                a: None,
            }
            .write(&mut out)?;
            lines += 1;
        }
        for (p, trail) in k.trails.iter() {
            for (seq, a) in trail {
                Line::change(*seq, p, a).write(&mut out)?;
                lines += 1;
            }
            if out.len() > 1 << 20 {
                f.write_all(&out)?;
                out.clear();
            }
        }
        f.write_all(&out)?;
        f.sync_all()?;
        k.log = None;
        std::fs::rename(&tmp, &self.path)?;
        k.lines = lines;
        Ok(())
    }
}

/// One line read back into `t`.
fn replay(t: &mut Trails, l: Line) {
    if let Some(m) = l.m {
        t.mark_at(m);
        return;
    }
    let (Some(seq), Some(p), Some(a)) = (l.s, l.p, l.a) else {
        return;
    };
    let p = crate::text::path_from_json(&p, l.p_b64.as_deref());
    match l.t {
        Some(to) => {
            let to = crate::text::path_from_json(&to, l.t_b64.as_deref());
            t.rename_at(&p, &to, seq, a);
        }
        None => t.change_at(&p, seq, a),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;

    use super::*;
    use crate::stage::report::Kind;

    fn by(pid: u32) -> Actor {
        Actor::unknown(pid, 0)
    }

    fn pids(s: &StageActors, p: &Path) -> Option<(u32, u32)> {
        s.first_last(p).map(|f| (f.first.pid, f.last.pid))
    }

    #[test]
    fn read_back_after_a_drop_without_clean_up() {
        let dir = tempfile::tempdir().unwrap();
        let odd = PathBuf::from(OsString::from_vec(b"x\xff".to_vec()));
        {
            let s = StageActors::open(dir.path()).unwrap();
            s.change(Path::new("a"), &by(1)).unwrap();
            s.change(Path::new("a"), &by(2)).unwrap();
            let m = s.mark().unwrap();
            s.change(Path::new("a"), &by(3)).unwrap();
            s.change(&odd, &by(4)).unwrap();
            s.rename(&odd, Path::new("d/b"), &by(5)).unwrap();
            assert_eq!(m, 2);
            // As a SIGKILL would: the mapping's pages are the kernel's.
            std::mem::forget(s);
        }
        let s = StageActors::open(dir.path()).unwrap();
        assert_eq!(pids(&s, Path::new("a")), Some((1, 3)));
        assert_eq!(pids(&s, Path::new("d/b")), Some((4, 5)));
        assert_eq!(pids(&s, &odd), Some((4, 5)));
        assert_eq!(s.as_of(2).first_last(Path::new("a")).unwrap().last.pid, 2);
        let mut done = Change::plain(PathBuf::from("d/b"), Kind::Renamed);
        done.from = Some(odd.clone());
        s.forget(&[done], &[]).unwrap();
        drop(s);
        let s = StageActors::open(dir.path()).unwrap();
        assert_eq!(pids(&s, Path::new("d/b")), None);
        assert_eq!(pids(&s, &odd), None);
        assert_eq!(pids(&s, Path::new("a")), Some((1, 3)), "kept");
        assert_eq!(s.trails().marks(), [2]);
    }

    #[test]
    fn twenty_thousand_changes_of_one_path_keep_the_file_small() {
        let dir = tempfile::tempdir().unwrap();
        let s = StageActors::open(dir.path()).unwrap();
        for i in 0..20_000 {
            s.change(Path::new("f"), &by(i)).unwrap();
        }
        drop(s);
        let len = std::fs::metadata(dir.path().join(FILE)).unwrap().len();
        assert!(len < (SLACK as u64 + 16) * 200, "{len} bytes");
        let s = StageActors::open(dir.path()).unwrap();
        assert_eq!(pids(&s, Path::new("f")), Some((0, 19_999)));
    }

    #[test]
    fn rewind_persists() {
        let dir = tempfile::tempdir().unwrap();
        let s = StageActors::open(dir.path()).unwrap();
        s.change(Path::new("a"), &by(1)).unwrap();
        let m = s.mark().unwrap();
        s.change(Path::new("a"), &by(2)).unwrap();
        s.change(Path::new("b"), &by(3)).unwrap();
        s.rewind(m).unwrap();
        s.change(Path::new("c"), &by(4)).unwrap();
        drop(s);
        let s = StageActors::open(dir.path()).unwrap();
        assert_eq!(pids(&s, Path::new("a")), Some((1, 1)));
        assert_eq!(pids(&s, Path::new("b")), None);
        assert_eq!(pids(&s, Path::new("c")), Some((4, 4)));
    }
}

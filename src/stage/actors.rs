//! Who changed each path of a staged zone (`actor::Trails`), kept with the
//! stage: an append-only file `actors` in the zone's stage dir, one JSON
//! object per line, appended when the change has been made and before it
//! is answered (through a shared mapping where the filesystem allows, as
//! the fingerprints: a daemon killed loses none of what it answered).
//!
//! Lines: `{"s":SEQ,"p":PATH,"a":ACTOR}` a change of `p`;
//! `{"s":SEQ,"p":FROM,"t":TO,"a":ACTOR}` a rename, and with `"e":true`
//! an exchange (`RENAME_EXCHANGE`) of `p` and `t`; `{"m":SEQ,"c":ID}` a
//! mark (checkpoint ID; a stage made before marks carried ids has `m`
//! alone); `{"r":SEQ,"c":ID}` a rewind to checkpoint ID (mark SEQ), and
//! `{"r":SEQ,"c":ID,"p":PATH}` a rewind of `p` (and what is under it)
//! only. A rewrite writes each entry kept of a path's trail as a change
//! line with `"k":true` (read back as is), and `{"x":SEQ,"p":PATH}`: the
//! record of `p` started afresh at SEQ (a rename over it; what came
//! before is kept for a checkpoint). A path that is not UTF-8 has its
//! bytes in `p_b64`/`t_b64`.
//! Read back in order, they give the same record. The file is rewritten
//! from the record (atomically, once) when a commit or discard drops
//! paths, and when it holds many more lines than the record has entries,
//! so its size follows the paths changed, not the writes made.
//!
//! A checkpoint's mark is appended while the worker's changes are held
//! still, before its layer is frozen; a rewind's line is appended while
//! the rewind is journaled in the manifest, before the layers change, and
//! again if the journal is found after a crash (a rewind line read twice
//! gives the same record): the record and the view agree after a SIGKILL
//! at any point of a whole rewind.

use std::collections::BTreeMap;
use std::io::{self, Write};
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

/// Trim the marks of checkpoints no longer kept when there are this many
/// more than twice the kept ones.
const MARKS_SLACK: usize = 16;

#[derive(Serialize, Deserialize, Default)]
struct Line {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    m: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    r: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    x: Option<u64>,
    /// A trail's entry written out whole (by a rewrite): read back as is.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    k: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    c: Option<u64>,
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
    /// With `t`: an exchange, not a rename.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    e: bool,
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
            s: Some(seq),
            p,
            p_b64,
            a: Some(a.clone()),
            ..Line::default()
        }
    }

    fn mark(seq: u64, id: Option<u64>) -> Line {
        Line {
            m: Some(seq),
            c: id,
            ..Line::default()
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
    /// Each checkpoint's mark: id → sequence number.
    ids: BTreeMap<u64, u64>,
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
        let mut ids = BTreeMap::new();
        let mut lines = 0;
        match crate::stage::dir::read_nofollow(&path) {
            Ok(bytes) => {
                // A mapped log's unused tail is zeros; a torn last line
                // (a crash mid-copy) is skipped.
                let used = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
                for l in bytes[..used].split(|b| *b == b'\n') {
                    if let Ok(l) = serde_json::from_slice::<Line>(l) {
                        lines += 1;
                        replay(&mut trails, &mut ids, l);
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
                ids,
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

    /// An exchange of `a` and `b` by `by`, made (see `Trails::exchange`).
    pub fn exchange(&self, a: &Path, b: &Path, by: &Actor) -> io::Result<()> {
        let mut k = self.inner.lock();
        let seq = k.trails.exchange(a, b, by.clone());
        let mut line = Line::change(seq, a, by);
        (line.t, line.t_b64) = Line::path(b);
        line.e = true;
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
        self.forget_upto(done, trees, None)
    }

    /// [`Self::forget`] of the changes up to checkpoint `upto` only (none:
    /// all; what `commit --upto` applied): a path changed after it keeps
    /// the record of those later changes.
    pub fn forget_upto(
        &self,
        done: &[Change],
        trees: &[PathBuf],
        upto: Option<u64>,
    ) -> io::Result<()> {
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
        let seq = match upto {
            // A checkpoint without a mark: the whole record of those paths
            // goes, as before marks carried ids.
            Some(id) => k.ids.get(&id).copied(),
            None => None,
        };
        if k.trails.forget_upto(&exact, &whole, seq) {
            self.rewrite(&mut k)?;
        }
        Ok(())
    }

    /// Mark this point for checkpoint `id` (the worker's changes held
    /// still); its sequence number.
    pub fn mark(&self, id: u64) -> io::Result<u64> {
        let mut k = self.inner.lock();
        let seq = k.trails.mark();
        k.ids.insert(id, seq);
        self.append(&mut k, &Line::mark(seq, Some(id)))?;
        Ok(seq)
    }

    /// Checkpoint `id`'s mark, when it has one (a checkpoint taken before
    /// marks carried ids has none).
    pub fn mark_of(&self, id: u64) -> Option<u64> {
        self.inner.lock().ids.get(&id).copied()
    }

    /// The record as it was at checkpoint `id` (None: it has no mark).
    pub fn as_of(&self, id: u64) -> Option<Trails> {
        let k = self.inner.lock();
        let seq = k.ids.get(&id)?;
        Some(k.trails.as_of(*seq))
    }

    /// Drop every change after checkpoint `id` (a whole rewind to it),
    /// and the later checkpoints' marks. False when `id` has no mark (the
    /// record is left as it is). Done twice, the same.
    pub fn rewind(&self, id: u64) -> io::Result<bool> {
        let mut k = self.inner.lock();
        let Some(seq) = k.ids.get(&id).copied() else {
            return Ok(false);
        };
        k.trails.rewind(seq);
        k.ids.retain(|c, _| *c <= id);
        let line = Line {
            r: Some(seq),
            c: Some(id),
            ..Line::default()
        };
        self.append(&mut k, &line)?;
        Ok(true)
    }

    /// Make the record of `tree` (and of every path under it) what it was
    /// at checkpoint `id` (a rewind of those paths). False when `id` has no
    /// mark.
    pub fn rewind_tree(&self, id: u64, tree: &Path) -> io::Result<bool> {
        let mut k = self.inner.lock();
        let Some(seq) = k.ids.get(&id).copied() else {
            return Ok(false);
        };
        k.trails.rewind_tree(tree, seq);
        let (p, p_b64) = Line::path(tree);
        let line = Line {
            r: Some(seq),
            c: Some(id),
            p,
            p_b64,
            ..Line::default()
        };
        self.append(&mut k, &line)?;
        Ok(true)
    }

    /// Give each change of a report its first and last actor as recorded
    /// at checkpoint `id` (None: now). A checkpoint with no mark: as now.
    pub fn fill_at(&self, changes: &mut [Change], id: Option<u64>) {
        match id.and_then(|id| self.as_of(id)) {
            Some(then) => {
                for c in changes {
                    if let Some(fl) = then.first_last(&c.path) {
                        c.first = Some(fl.first);
                        c.last = Some(fl.last);
                    }
                }
            }
            None => self.fill(changes),
        }
    }

    /// Only checkpoints `kept` are left (the others merged, committed or
    /// discarded): their marks go; once they are many, the record is
    /// trimmed to what the kept ones need and the file rewritten (so a
    /// task checkpointed at every step keeps a bounded record).
    pub fn keep_checkpoints(&self, kept: &[u64]) -> io::Result<()> {
        let mut k = self.inner.lock();
        k.ids.retain(|id, _| kept.contains(id));
        let live: Vec<u64> = k.ids.values().copied().collect();
        if k.trails.marks().len() <= 2 * live.len() + MARKS_SLACK {
            return Ok(());
        }
        k.trails.drop_marks(|m| live.contains(&m));
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
        let mut f = crate::stage::dir::create_fresh(&tmp, 0o600)?;
        let mut out = Vec::new();
        let mut lines = 0;
        // The marks in order, each with the checkpoints that took it.
        let mut marks: Vec<(u64, Option<u64>)> =
            k.ids.iter().map(|(c, m)| (*m, Some(*c))).collect();
        for m in k.trails.marks() {
            if !k.ids.values().any(|v| v == m) {
                marks.push((*m, None));
            }
        }
        marks.sort_unstable();
        for (m, id) in marks {
            Line::mark(m, id).write(&mut out)?;
            lines += 1;
        }
        let mut starts = k.trails.starts().peekable();
        for (p, trail) in k.trails.iter() {
            for (seq, a) in trail {
                Line {
                    k: true,
                    ..Line::change(*seq, p, a)
                }
                .write(&mut out)?;
                lines += 1;
            }
            // (A start without a trail goes with it.)
            while starts.next_if(|(q, _)| *q < p).is_some() {}
            if let Some((_, list)) = starts.next_if(|(q, _)| *q == p) {
                for x in list {
                    let (lp, p_b64) = Line::path(p);
                    Line {
                        x: Some(*x),
                        p: lp,
                        p_b64,
                        ..Line::default()
                    }
                    .write(&mut out)?;
                    lines += 1;
                }
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

/// One line read back into `t` (and the checkpoints' marks, `ids`).
fn replay(t: &mut Trails, ids: &mut BTreeMap<u64, u64>, l: Line) {
    if let Some(m) = l.m {
        t.mark_at(m);
        if let Some(id) = l.c {
            ids.insert(id, m);
        }
        return;
    }
    if let (Some(x), Some(p)) = (l.x, &l.p) {
        t.start_at(&crate::text::path_from_json(p, l.p_b64.as_deref()), x);
        return;
    }
    if let Some(r) = l.r {
        match l.p {
            Some(p) => t.rewind_tree(&crate::text::path_from_json(&p, l.p_b64.as_deref()), r),
            None => {
                t.rewind(r);
                if let Some(id) = l.c {
                    ids.retain(|c, _| *c <= id);
                }
            }
        }
        return;
    }
    let (Some(seq), Some(p), Some(a)) = (l.s, l.p, l.a) else {
        return;
    };
    let p = crate::text::path_from_json(&p, l.p_b64.as_deref());
    match l.t {
        Some(to) => {
            let to = crate::text::path_from_json(&to, l.t_b64.as_deref());
            match l.e {
                true => t.exchange_at(&p, &to, seq, a),
                false => t.rename_at(&p, &to, seq, a),
            }
        }
        None if l.k => t.push_at(&p, seq, a),
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
            let m = s.mark(7).unwrap();
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
        assert_eq!(
            s.as_of(7)
                .unwrap()
                .first_last(Path::new("a"))
                .unwrap()
                .last
                .pid,
            2
        );
        assert!(s.as_of(8).is_none(), "no such checkpoint");
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
        s.mark(1).unwrap();
        s.change(Path::new("a"), &by(2)).unwrap();
        s.change(Path::new("b"), &by(3)).unwrap();
        s.mark(2).unwrap();
        assert!(s.rewind(1).unwrap());
        assert_eq!(s.mark_of(2), None, "a later checkpoint's mark goes");
        s.change(Path::new("c"), &by(4)).unwrap();
        drop(s);
        let s = StageActors::open(dir.path()).unwrap();
        assert_eq!(pids(&s, Path::new("a")), Some((1, 1)));
        assert_eq!(pids(&s, Path::new("b")), None);
        assert_eq!(pids(&s, Path::new("c")), Some((4, 4)));
    }

    /// A rewind done twice (a crash after its line, the journal found at
    /// the next mount) is one rewind; ids and marks outlive a rewrite.
    #[test]
    fn a_rewind_again_is_the_same_and_marks_outlive_a_rewrite() {
        let dir = tempfile::tempdir().unwrap();
        let s = StageActors::open(dir.path()).unwrap();
        s.change(Path::new("a"), &by(1)).unwrap();
        s.change(Path::new("gone"), &by(1)).unwrap();
        s.mark(3).unwrap();
        s.change(Path::new("a"), &by(2)).unwrap();
        s.mark(4).unwrap();
        s.change(Path::new("b"), &by(3)).unwrap();
        // A rewrite (a commit of `gone`) keeps both marks and their ids.
        s.forget(&[Change::plain(PathBuf::from("gone"), Kind::Added)], &[])
            .unwrap();
        drop(s);
        let s = StageActors::open(dir.path()).unwrap();
        assert!(s.mark_of(3).is_some() && s.mark_of(4).is_some());
        let before = s.trails();
        assert!(s.rewind(4).unwrap());
        let once = s.trails();
        assert_ne!(once, before);
        assert!(s.rewind(4).unwrap());
        assert_eq!(s.trails(), once);
        drop(s);
        let s = StageActors::open(dir.path()).unwrap();
        assert_eq!(s.trails(), once);
        assert_eq!(pids(&s, Path::new("a")), Some((1, 2)));
        assert_eq!(pids(&s, Path::new("b")), None);
        assert!(!s.rewind(9).unwrap(), "no mark: left as it is");
    }

    /// A rewind of some paths gives those paths (and what is under them)
    /// their record at the checkpoint, and no other.
    #[test]
    fn a_rewind_of_a_tree_touches_only_it() {
        let dir = tempfile::tempdir().unwrap();
        let s = StageActors::open(dir.path()).unwrap();
        s.change(Path::new("d/x"), &by(1)).unwrap();
        s.change(Path::new("e"), &by(1)).unwrap();
        s.mark(1).unwrap();
        s.change(Path::new("d/x"), &by(2)).unwrap();
        s.change(Path::new("d/new"), &by(2)).unwrap();
        s.change(Path::new("e"), &by(2)).unwrap();
        assert!(s.rewind_tree(1, Path::new("d")).unwrap());
        drop(s);
        let s = StageActors::open(dir.path()).unwrap();
        assert_eq!(pids(&s, Path::new("d/x")), Some((1, 1)));
        assert_eq!(pids(&s, Path::new("d/new")), None);
        assert_eq!(pids(&s, Path::new("e")), Some((1, 2)), "not rewound");
    }

    /// Renames after a checkpoint: rewound to it, each name has the record
    /// it had then (the new names none, the old ones theirs).
    #[test]
    fn renames_after_a_checkpoint_rewind_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let s = StageActors::open(dir.path()).unwrap();
        s.change(Path::new("d"), &by(1)).unwrap();
        s.change(Path::new("d/x"), &by(1)).unwrap();
        s.mark(1).unwrap();
        let then = s.trails();
        s.rename(Path::new("d"), Path::new("e"), &by(2)).unwrap();
        s.change(Path::new("e/x"), &by(3)).unwrap();
        assert_eq!(pids(&s, Path::new("e/x")), Some((1, 3)), "carried");
        assert_eq!(pids(&s, Path::new("e")), Some((1, 2)));
        assert!(s.rewind(1).unwrap());
        assert_eq!(
            s.trails().iter().collect::<Vec<_>>(),
            then.iter().collect::<Vec<_>>()
        );
        drop(s);
        let s = StageActors::open(dir.path()).unwrap();
        assert_eq!(pids(&s, Path::new("d/x")), Some((1, 1)));
        assert_eq!(pids(&s, Path::new("e")), None);
        assert_eq!(pids(&s, Path::new("e/x")), None);
    }

    /// A rename over a path after a checkpoint, read back after a rewrite:
    /// the path's record now, and at the checkpoint, are still right.
    #[test]
    fn a_rename_over_a_path_survives_a_rewrite() {
        let dir = tempfile::tempdir().unwrap();
        let s = StageActors::open(dir.path()).unwrap();
        s.change(Path::new("f"), &by(1)).unwrap();
        s.change(Path::new("x"), &by(1)).unwrap();
        s.mark(1).unwrap();
        s.change(Path::new("tmp"), &by(2)).unwrap();
        s.rename(Path::new("tmp"), Path::new("f"), &by(2)).unwrap();
        // A rewrite (a discard of x).
        s.forget(&[Change::plain(PathBuf::from("x"), Kind::Added)], &[])
            .unwrap();
        drop(s);
        let s = StageActors::open(dir.path()).unwrap();
        assert_eq!(pids(&s, Path::new("f")), Some((2, 2)));
        assert!(s.rewind(1).unwrap());
        assert_eq!(pids(&s, Path::new("f")), Some((1, 1)));
    }

    /// A task checkpointed at every step, its oldest checkpoints merged
    /// away: the record stays bounded, and right at each kept checkpoint.
    #[test]
    fn marks_of_checkpoints_merged_away_go() {
        let dir = tempfile::tempdir().unwrap();
        let s = StageActors::open(dir.path()).unwrap();
        for id in 1..=300u64 {
            s.change(Path::new("f"), &by(id as u32)).unwrap();
            s.mark(id).unwrap();
            let kept: Vec<u64> = (id.saturating_sub(2).max(1)..=id).collect();
            s.keep_checkpoints(&kept).unwrap();
        }
        s.change(Path::new("f"), &by(301)).unwrap();
        let t = s.trails();
        assert!(t.marks().len() <= 2 * 3 + MARKS_SLACK, "{:?}", t.marks());
        let len = t.iter().next().unwrap().1.len();
        assert!(len <= 2 * (t.marks().len() + 1), "{len} entries");
        let check = |s: &StageActors| {
            assert_eq!(pids(s, Path::new("f")), Some((1, 301)));
            for id in 298..=300u64 {
                let then = s.as_of(id).unwrap();
                let fl = then.first_last(Path::new("f")).unwrap();
                assert_eq!((fl.first.pid, fl.last.pid), (1, id as u32), "at {id}");
            }
        };
        check(&s);
        drop(s);
        check(&StageActors::open(dir.path()).unwrap());
    }

    /// A rename over a path after a checkpoint, then that checkpoint
    /// merged away and the file rewritten: read back, the path is still
    /// named by the program of its first change since the rename.
    #[test]
    fn a_start_outlives_the_mark_it_was_kept_for() {
        let dir = tempfile::tempdir().unwrap();
        let s = StageActors::open(dir.path()).unwrap();
        s.change(Path::new("f"), &by(1)).unwrap();
        s.change(Path::new("f"), &by(2)).unwrap();
        s.mark(1).unwrap();
        s.change(Path::new("tmp"), &by(3)).unwrap();
        s.rename(Path::new("tmp"), Path::new("f"), &by(4)).unwrap();
        // Checkpoint 1 merged away; enough later ones for a trim.
        for id in 2..=(2 * MARKS_SLACK as u64) {
            s.change(Path::new("g"), &by(9)).unwrap();
            s.mark(id).unwrap();
        }
        s.keep_checkpoints(&[]).unwrap();
        assert!(s.trails().marks().is_empty(), "trimmed");
        drop(s);
        let s = StageActors::open(dir.path()).unwrap();
        assert_eq!(pids(&s, Path::new("f")), Some((3, 4)));
        s.change(Path::new("f"), &by(5)).unwrap();
        assert_eq!(pids(&s, Path::new("f")), Some((3, 5)));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Change(usize),
        Rename(usize, usize),
        Exchange(usize, usize),
        Checkpoint,
        Rewind(usize),
        RewindTree(usize, usize),
        MergeOldest,
        Rewrite,
        Reopen,
    }

    const NAMES: [&str; 5] = ["a", "b", "a/x", "b/x", "c"];

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        let n = NAMES.len();
        prop_oneof![
            4 => (0..n).prop_map(Op::Change),
            2 => (0..n, 0..n).prop_map(|(a, b)| Op::Rename(a, b)),
            1 => (0..n, 0..n).prop_map(|(a, b)| Op::Exchange(a, b)),
            2 => Just(Op::Checkpoint),
            1 => (0..8usize).prop_map(Op::Rewind),
            1 => (0..8usize, 0..n).prop_map(|(k, p)| Op::RewindTree(k, p)),
            1 => Just(Op::MergeOldest),
            1 => Just(Op::Rewrite),
            1 => Just(Op::Reopen),
        ]
    }

    /// Every path's (first, last) pid.
    fn read(t: &Trails) -> Vec<(PathBuf, u32, u32)> {
        t.iter()
            .filter_map(|(p, _)| {
                t.first_last(p)
                    .map(|f| (p.clone(), f.first.pid, f.last.pid))
            })
            .collect()
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256),
            failure_persistence: None,
            ..proptest::prelude::ProptestConfig::default()
        })]

        /// The file read back (after appends, rewrites, trims and rewinds
        /// of both kinds, as a SIGKILL leaves it) gives the record the
        /// daemon had: now, and at each checkpoint kept.
        #[test]
        fn the_file_read_back_is_the_record(ops in proptest::collection::vec(op(), 1..50)) {
            let dir = tempfile::tempdir().unwrap();
            let mut s = StageActors::open(dir.path()).unwrap();
            let mut kept: Vec<u64> = Vec::new();
            let mut next = 1u64;
            for (i, op) in ops.iter().enumerate() {
                let pid = i as u32 + 1;
                match *op {
                    Op::Change(p) => s.change(Path::new(NAMES[p]), &by(pid)).unwrap(),
                    Op::Rename(a, b) => {
                        let (from, to) = (Path::new(NAMES[a]), Path::new(NAMES[b]));
                        if from != to && (from.starts_with(to) || to.starts_with(from)) {
                            continue;
                        }
                        s.rename(from, to, &by(pid)).unwrap();
                    }
                    Op::Exchange(a, b) => {
                        let (a, b) = (Path::new(NAMES[a]), Path::new(NAMES[b]));
                        if a == b || a.starts_with(b) || b.starts_with(a) {
                            continue;
                        }
                        s.exchange(a, b, &by(pid)).unwrap();
                    }
                    Op::Checkpoint => {
                        s.mark(next).unwrap();
                        kept.push(next);
                        next += 1;
                    }
                    Op::Rewind(k) if !kept.is_empty() => {
                        let id = kept[k % kept.len()];
                        proptest::prop_assert!(s.rewind(id).unwrap());
                        kept.retain(|c| *c <= id);
                    }
                    Op::RewindTree(k, p) if !kept.is_empty() => {
                        let id = kept[k % kept.len()];
                        proptest::prop_assert!(s.rewind_tree(id, Path::new(NAMES[p])).unwrap());
                    }
                    Op::MergeOldest if !kept.is_empty() => {
                        kept.remove(0);
                        s.keep_checkpoints(&kept).unwrap();
                    }
                    Op::Rewrite => {
                        let mut k = s.inner.lock();
                        s.rewrite(&mut k).unwrap();
                    }
                    Op::Reopen => {
                        std::mem::forget(s);
                        s = StageActors::open(dir.path()).unwrap();
                    }
                    _ => continue,
                }
                let had = (read(&s.trails()), kept.iter().map(|id| read(&s.as_of(*id).unwrap())).collect::<Vec<_>>());
                let again = StageActors::open(dir.path()).unwrap();
                let got = (read(&again.trails()), kept.iter().map(|id| read(&again.as_of(*id).unwrap())).collect::<Vec<_>>());
                std::mem::forget(again);
                proptest::prop_assert_eq!(got, had, "after {:?} (op {})", op, i);
            }
        }
    }
}

//! What a stage holds compared to its backing dir, and how it is applied
//! (commit) or dropped (discard). Works on two directory trees: the
//! backing dir (the overlay's lower layer) and the stage's upper dir, read
//! as overlayfs writes it: a deleted name is a whiteout (a character
//! device 0/0, or a file marked `<prefix>whiteout`), a directory that
//! replaced a deleted one is marked `<prefix>opaque` = `y`, a file the
//! worker changed is there whole.
//!
//! - `fsops`: fd-relative, symlink-free operations under one root.
//! - `diff`: unified diffs of text files.
//! - `patch`: the changes in git's extended diff format (`git apply`).
//! - `fingerprints`: what each backing file was when first changed.
//! - `conflict`: whether a change can be applied without touching a
//!   host change (on its path, a parent, or under it).
//! - `apply`: commit (checks, journal, the order of its steps).
//! - `write`: the backing dir written, one applied change at a time.
//! - `unstage`: discard, and what a commit applied taken out of the
//!   stage.
//!
//! Directory times are not part of a change (any change inside a
//! directory moves them); a directory is modified when its mode, owner or
//! user xattrs differ.

mod apply;
mod conflict;
mod diff;
mod fingerprints;
mod fsops;
mod patch;
#[cfg(test)]
mod tests;
mod unstage;
mod write;

pub use apply::{applies_nothing, commit, commit_keeping_journal, end_journal, journal_of};
pub use diff::diff;
pub use fingerprints::{Fingerprint, Fingerprints};
pub use patch::patch;
pub use unstage::discard;

use std::ffi::{OsStr, OsString};
use std::io;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

pub use crate::stage::report::{Change, Conflict, FileType as ChangeType, Kind, What};
pub(crate) use fsops::{Root, remove_all};
use rustix::fs::{FileType, OFlags, Stat};
use rustix::io::Errno;

use crate::stage::walk::{self, DirStack};

/// What a commit applied, and what it left out (conflicts).
#[derive(Debug, Clone, Default)]
pub struct CommitReport {
    pub applied: Vec<Change>,
    pub conflicts: Vec<Conflict>,
}

/// A stage's two trees and where overlayfs keeps its markers.
#[derive(Debug)]
pub struct Layers {
    pub(crate) lower: Root,
    pub(crate) upper: Root,
    /// `trusted.overlay.` or `user.overlay.`.
    pub(crate) prefix: String,
}

impl Layers {
    pub fn open(lower: &Path, upper: &Path, prefix: &str) -> io::Result<Layers> {
        Ok(Layers {
            lower: Root::open(lower)?,
            upper: Root::open(upper)?,
            prefix: prefix.to_owned(),
        })
    }

    /// `upper` over a tree already open (a checkpoint's view).
    pub fn over(lower: Root, upper: &Path, prefix: &str) -> io::Result<Layers> {
        Ok(Layers {
            lower,
            upper: Root::open(upper)?,
            prefix: prefix.to_owned(),
        })
    }
}

fn type_of(st: &Stat) -> ChangeType {
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => ChangeType::File,
        FileType::Directory => ChangeType::Dir,
        FileType::Symlink => ChangeType::Symlink,
        _ => ChangeType::Special,
    }
}

/// `file`, `dir`, `symlink` or `special`.
fn type_name(st: &Stat) -> &'static str {
    type_of(st).as_str()
}

fn is_dir(st: &Stat) -> bool {
    FileType::from_raw_mode(st.st_mode) == FileType::Directory
}

/// Whether `name` in upper dir `dir` is a whiteout.
fn whiteout(l: &Layers, dir: BorrowedFd<'_>, name: &OsStr, st: &Stat) -> bool {
    match FileType::from_raw_mode(st.st_mode) {
        FileType::CharacterDevice => st.st_rdev == 0,
        FileType::RegularFile if st.st_size == 0 => {
            fsops::xattr_at(dir, name, &format!("{}whiteout", l.prefix))
                .ok()
                .flatten()
                .is_some()
        }
        _ => false,
    }
}

/// Whether upper dir `name` in `dir` is opaque.
fn opaque(l: &Layers, dir: BorrowedFd<'_>, name: &OsStr) -> bool {
    fsops::xattr_at(dir, name, &format!("{}opaque", l.prefix))
        .ok()
        .flatten()
        .is_some_and(|v| v.first() == Some(&b'y'))
}

/// How many entries the backing tree at `name` in `dir` holds.
fn count_at(dir: BorrowedFd<'_>, name: &OsStr) -> u64 {
    walk::open_dir_at(dir, name).map_or(0, |d| fsops::count_in(d.as_fd()))
}

fn in_filter(path: &Path, filter: &[PathBuf]) -> bool {
    filter.is_empty() || filter.iter().any(|f| path.starts_with(f))
}

/// Whether a walk of `dir` can hold something the filter wants.
fn filter_reaches(dir: &Path, filter: &[PathBuf]) -> bool {
    filter.is_empty()
        || filter
            .iter()
            .any(|f| f.starts_with(dir) || dir.starts_with(f))
}

fn change(path: PathBuf, kind: Kind, new: Option<&Stat>, old: Option<&Stat>) -> Change {
    let shown = new.or(old);
    Change {
        path,
        kind,
        from: None,
        file_type: Some(shown.map_or(ChangeType::File, type_of)),
        size: new.filter(|s| !is_dir(s)).map(|s| s.st_size as u64),
        mode: new.map(|s| s.st_mode & 0o7777),
        old_size: old.filter(|s| !is_dir(s)).map(|s| s.st_size as u64),
        old_mode: old.map(|s| s.st_mode & 0o7777),
        entries: None,
        what: Vec::new(),
        diff: None,
        first: None,
        last: None,
    }
}

/// Every change in the stage under the `filter` paths (empty: all), in
/// path order.
pub fn changes(l: &Layers, filter: &[PathBuf]) -> io::Result<Vec<Change>> {
    let mut out = Vec::new();
    walk(l, filter, &mut out)?;
    detect_renames(l, &mut out);
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// A directory of the upper tree the walk is in.
struct Frame {
    /// Its entries still to look at (the next one last).
    names: Vec<OsString>,
    /// Whether the backing dir's entries show through it (not under an
    /// opaque or added dir).
    lower_visible: bool,
}

/// Walk the upper tree (any depth: a loop, each directory reached from
/// its parent by name), the backing dir's same directory beside it
/// while it has one.
fn walk(l: &Layers, filter: &[PathBuf], out: &mut Vec<Change>) -> io::Result<()> {
    let up_err = |e: Errno, what: &str, rel: &Path| fsops::err(e, what, &l.upper.path.join(rel));
    let low_err = |e: Errno, what: &str, rel: &Path| fsops::err(e, what, &l.lower.path.join(rel));
    let mut up = DirStack::new(l.upper.fd()).map_err(|e| up_err(e, "open", Path::new("")))?;
    // At the upper stack's depth when the backing dir has the directory
    // the walk is in; above it when not.
    let mut low = DirStack::new(l.lower.fd()).map_err(|e| low_err(e, "open", Path::new("")))?;
    let mut rel = PathBuf::new();
    let mut first = walk::names(up.fd()).map_err(|e| up_err(e, "list", &rel))?;
    first.reverse();
    let mut frames = vec![Frame {
        names: first,
        lower_visible: true,
    }];
    while let Some(frame) = frames.last_mut() {
        let Some(n) = frame.names.pop() else {
            frames.pop();
            if frames.is_empty() {
                break;
            }
            if low.depth() == up.depth() {
                low.pop().map_err(|e| low_err(e, "open", &rel))?;
            }
            up.pop().map_err(|e| up_err(e, "open", &rel))?;
            rel.pop();
            continue;
        };
        let lower_visible = frame.lower_visible;
        let p = rel.join(&n);
        if !filter_reaches(&p, filter) {
            continue;
        }
        let ud = up.fd();
        let ld = (low.depth() == up.depth()).then(|| low.fd());
        let Some(ust) = walk::stat_at(ud, &n).map_err(|e| up_err(e, "stat", &p))? else {
            continue;
        };
        let lst = match ld {
            Some(ld) => walk::stat_at(ld, &n).map_err(|e| low_err(e, "stat", &p))?,
            None => None,
        };
        let wanted = in_filter(&p, filter);
        if whiteout(l, ud, &n, &ust) {
            if let (Some(low), Some(ld), true) = (lst, ld, wanted) {
                let mut c = change(p, Kind::Deleted, None, Some(&low));
                if is_dir(&low) {
                    c.entries = Some(count_at(ld, &n));
                }
                out.push(c);
            }
            continue;
        }
        if !is_dir(&ust) {
            if !wanted {
                continue;
            }
            // Under an opaque dir a backing file of the same name is
            // hidden, but the commit replaces it all the same: compare
            // with it.
            match (lst, ld) {
                (Some(low), Some(ld)) => {
                    let what = differs(ud, ld, &n, &ust, &low, true)
                        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))?;
                    if !what.is_empty() {
                        let mut c = change(p, Kind::Modified, Some(&ust), Some(&low));
                        c.what = what;
                        if is_dir(&low) {
                            // A dir replaced by a file or symlink: the
                            // commit removes its whole tree, which the
                            // report says.
                            c.entries = Some(count_at(ld, &n));
                        }
                        out.push(c);
                    }
                }
                _ => out.push(change(p, Kind::Added, Some(&ust), None)),
            }
            continue;
        }
        let is_opaque = opaque(l, ud, &n);
        let inner_visible = match (lst.filter(is_dir), ld) {
            (Some(low), Some(ld)) => {
                // A dir deleted and made again (opaque, or under one):
                // its old entries are deleted (listed below), the dir
                // itself is modified only if its attributes differ.
                let what = differs(ud, ld, &n, &ust, &low, false)
                    .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))?;
                if wanted && !what.is_empty() {
                    let mut c = change(p.clone(), Kind::Modified, Some(&ust), Some(&low));
                    c.what = what;
                    out.push(c);
                }
                !is_opaque && lower_visible
            }
            _ => {
                if wanted {
                    let mut c = change(p.clone(), Kind::Added, Some(&ust), None);
                    if let Some(low) = lst {
                        // A file replaced by a dir.
                        c.kind = Kind::Modified;
                        c.old_size = Some(low.st_size as u64);
                        c.old_mode = Some(low.st_mode & 0o7777);
                        c.what = vec![What::Type];
                    }
                    out.push(c);
                }
                false
            }
        };
        // Into it: the backing dir's beside it when it has one there.
        let lower_dir = ld.is_some() && lst.is_some_and(|s| is_dir(&s));
        up.push(&n).map_err(|e| up_err(e, "open", &p))?;
        if lower_dir {
            match low.push(&n) {
                Ok(()) | Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) => {}
                Err(e) => return Err(low_err(e, "open", &p)),
            }
        }
        rel = p;
        let names = walk::names(up.fd()).map_err(|e| up_err(e, "list", &rel))?;
        if !inner_visible && low.depth() == up.depth() {
            // Under an opaque dir the backing dir's other entries are gone.
            if let Ok(lower_names) = walk::names(low.fd()) {
                for ln in lower_names {
                    let q = rel.join(&ln);
                    if names.binary_search(&ln).is_ok() || !in_filter(&q, filter) {
                        continue;
                    }
                    if let Ok(Some(st)) = walk::stat_at(low.fd(), &ln) {
                        let mut c = change(q, Kind::Deleted, None, Some(&st));
                        if is_dir(&st) {
                            c.entries = Some(count_at(low.fd(), &ln));
                        }
                        out.push(c);
                    }
                }
            }
        }
        let mut names = names;
        names.reverse();
        frames.push(Frame {
            names,
            lower_visible: inner_visible,
        });
    }
    Ok(())
}

/// What differs between `name` in upper dir `ud` (`up`) and in backing
/// dir `ld` (`low`).
fn differs(
    ud: BorrowedFd<'_>,
    ld: BorrowedFd<'_>,
    name: &OsStr,
    up: &Stat,
    low: &Stat,
    times: bool,
) -> io::Result<Vec<What>> {
    let mut what = Vec::new();
    let (tu, tl) = (
        FileType::from_raw_mode(up.st_mode),
        FileType::from_raw_mode(low.st_mode),
    );
    if tu != tl {
        return Ok(vec![What::Type]);
    }
    match tu {
        FileType::RegularFile if up.st_size != low.st_size || !same_content(ud, ld, name)? => {
            what.push(What::Content);
        }
        FileType::Symlink
            if fsops::readlink_at(ud, name).ok() != fsops::readlink_at(ld, name).ok() =>
        {
            what.push(What::Target);
        }
        _ => {}
    }
    if tu != FileType::Symlink && up.st_mode & 0o7777 != low.st_mode & 0o7777 {
        what.push(What::Mode);
    }
    if (up.st_uid, up.st_gid) != (low.st_uid, low.st_gid) {
        what.push(What::Owner);
    }
    if times
        && tu != FileType::Symlink
        && (up.st_mtime, up.st_mtime_nsec) != (low.st_mtime, low.st_mtime_nsec)
    {
        what.push(What::Times);
    }
    if tu != FileType::Symlink
        && fsops::user_xattrs_at(ud, name).unwrap_or_default()
            != fsops::user_xattrs_at(ld, name).unwrap_or_default()
    {
        what.push(What::Xattrs);
    }
    Ok(what)
}

/// Whether two regular files of the same size (`name` in `ud` and in
/// `ld`) hold the same bytes.
fn same_content(ud: BorrowedFd<'_>, ld: BorrowedFd<'_>, name: &OsStr) -> io::Result<bool> {
    let open = |d: BorrowedFd<'_>| -> io::Result<std::fs::File> {
        fsops::open_in(d, name, OFlags::RDONLY)
            .map(std::fs::File::from)
            .map_err(|e| io::Error::new(io::Error::from(e).kind(), format!("open: {e}")))
    };
    let (mut a, mut b) = (open(ud)?, open(ld)?);
    let mut ba = vec![0u8; 64 * 1024];
    let mut bb = vec![0u8; 64 * 1024];
    loop {
        let n = read_full(&mut a, &mut ba)?;
        let m = read_full(&mut b, &mut bb)?;
        if n != m || ba[..n] != bb[..m] {
            return Ok(false);
        }
        if n == 0 {
            return Ok(true);
        }
    }
}

fn read_full(f: &mut std::fs::File, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// An added file whose overlay origin is a deleted backing file was
/// renamed from it: the two changes become one rename.
fn detect_renames(l: &Layers, out: &mut Vec<Change>) {
    let deleted: Vec<(usize, Vec<u8>)> = out
        .iter()
        .enumerate()
        .filter(|(_, c)| c.kind == Kind::Deleted && c.file_type == Some(ChangeType::File))
        .filter_map(|(i, c)| {
            let fd = l.lower.open_at(&c.path, OFlags::PATH).ok()?;
            let h = crate::backing::handle_of(fd.as_fd()).ok()?;
            Some((i, h.bytes().to_vec()))
        })
        .collect();
    if deleted.is_empty() {
        return;
    }
    let origin = format!("{}origin", l.prefix);
    let mut gone = Vec::new();
    for c in out
        .iter_mut()
        .filter(|c| c.kind == Kind::Added && c.file_type == Some(ChangeType::File))
    {
        let Ok(Some(o)) = l.upper.xattr(&c.path, &origin) else {
            continue;
        };
        if let Some((i, _)) = deleted
            .iter()
            .find(|(i, h)| h.len() >= 8 && o.ends_with(h) && !gone.contains(i))
        {
            gone.push(*i);
            c.kind = Kind::Renamed;
            c.from = Some(PathBuf::new());
            c.what = vec![];
            // Filled in below (the deleted entry's path).
            c.entries = Some(*i as u64);
        }
    }
    if gone.is_empty() {
        return;
    }
    let from: Vec<PathBuf> = out.iter().map(|c| c.path.clone()).collect();
    let old: Vec<(Option<u64>, Option<u32>)> =
        out.iter().map(|c| (c.old_size, c.old_mode)).collect();
    for c in out.iter_mut().filter(|c| c.kind == Kind::Renamed) {
        if let Some(i) = c.entries.take() {
            c.from = Some(from[i as usize].clone());
            (c.old_size, c.old_mode) = old[i as usize];
        }
    }
    let mut i = 0;
    out.retain(|_| {
        let keep = !gone.contains(&i);
        i += 1;
        keep
    });
}

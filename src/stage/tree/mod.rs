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

pub use apply::{commit, commit_keeping_journal, end_journal, journal_of};
pub use diff::diff;
pub use fingerprints::{Fingerprint, Fingerprints};
pub use patch::patch;
pub use unstage::discard;

use std::io;
use std::io::Read;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

pub use crate::stage::report::{Change, Conflict, FileType as ChangeType, Kind, What};
pub(crate) use fsops::{Root, remove_all};
use rustix::fs::{FileType, OFlags, Stat};

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

/// Whether `rel` in upper is a whiteout.
fn whiteout(l: &Layers, rel: &Path, st: &Stat) -> bool {
    match FileType::from_raw_mode(st.st_mode) {
        FileType::CharacterDevice => st.st_rdev == 0,
        FileType::RegularFile if st.st_size == 0 => l
            .upper
            .xattr(rel, &format!("{}whiteout", l.prefix))
            .ok()
            .flatten()
            .is_some(),
        _ => false,
    }
}

fn opaque(l: &Layers, rel: &Path) -> bool {
    l.upper
        .xattr(rel, &format!("{}opaque", l.prefix))
        .ok()
        .flatten()
        .is_some_and(|v| v.first() == Some(&b'y'))
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
    walk(l, Path::new(""), true, filter, &mut out)?;
    detect_renames(l, &mut out);
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// Walk upper dir `rel`; `lower_visible`: whether the backing dir's
/// entries show through it (not under an opaque or added dir).
fn walk(
    l: &Layers,
    rel: &Path,
    lower_visible: bool,
    filter: &[PathBuf],
    out: &mut Vec<Change>,
) -> io::Result<()> {
    let names = l
        .upper
        .names(rel)
        .map_err(|e| fsops::err(e, "list", &l.upper.path.join(rel)))?;
    if !lower_visible && !rel.as_os_str().is_empty() {
        // Under an opaque dir the backing dir's other entries are gone.
        if let Ok(lower_names) = l.lower.names(rel) {
            for n in lower_names {
                let p = rel.join(&n);
                if names.contains(&n) || !in_filter(&p, filter) {
                    continue;
                }
                if let Ok(Some(st)) = l.lower.stat(&p) {
                    let mut c = change(p.clone(), Kind::Deleted, None, Some(&st));
                    if is_dir(&st) {
                        c.entries = Some(fsops::count_entries(&l.lower, &p));
                    }
                    out.push(c);
                }
            }
        }
    }
    for n in names {
        let p = rel.join(&n);
        if !filter_reaches(&p, filter) {
            continue;
        }
        let Some(up) = l
            .upper
            .stat(&p)
            .map_err(|e| fsops::err(e, "stat", &l.upper.path.join(&p)))?
        else {
            continue;
        };
        let low = l
            .lower
            .stat(&p)
            .map_err(|e| fsops::err(e, "stat", &l.lower.path.join(&p)))?;
        let wanted = in_filter(&p, filter);
        if whiteout(l, &p, &up) {
            if let (Some(low), true) = (low, wanted) {
                let mut c = change(p.clone(), Kind::Deleted, None, Some(&low));
                if is_dir(&low) {
                    c.entries = Some(fsops::count_entries(&l.lower, &p));
                }
                out.push(c);
            }
            continue;
        }
        if is_dir(&up) {
            let is_opaque = opaque(l, &p);
            match low.filter(is_dir) {
                Some(low) if !is_opaque && lower_visible => {
                    let what = differs(l, &p, &up, &low, false)?;
                    if wanted && !what.is_empty() {
                        let mut c = change(p.clone(), Kind::Modified, Some(&up), Some(&low));
                        c.what = what;
                        out.push(c);
                    }
                    walk(l, &p, true, filter, out)?;
                }
                Some(low) => {
                    // A dir deleted and made again: its old entries are
                    // deleted (listed by the walk), the dir itself is
                    // modified only if its attributes differ.
                    let what = differs(l, &p, &up, &low, false)?;
                    if wanted && !what.is_empty() {
                        let mut c = change(p.clone(), Kind::Modified, Some(&up), Some(&low));
                        c.what = what;
                        out.push(c);
                    }
                    walk(l, &p, false, filter, out)?;
                }
                None => {
                    if wanted {
                        let mut c = change(p.clone(), Kind::Added, Some(&up), None);
                        if let Some(low) = low {
                            // A file replaced by a dir.
                            c.kind = Kind::Modified;
                            c.old_size = Some(low.st_size as u64);
                            c.old_mode = Some(low.st_mode & 0o7777);
                            c.what = vec![What::Type];
                        }
                        out.push(c);
                    }
                    walk(l, &p, false, filter, out)?;
                }
            }
            continue;
        }
        if !wanted {
            continue;
        }
        // Under an opaque dir a backing file of the same name is hidden,
        // but the commit replaces it all the same: compare with it.
        match low {
            None => out.push(change(p.clone(), Kind::Added, Some(&up), None)),
            Some(low) => {
                let what = differs(l, &p, &up, &low, true)?;
                if !what.is_empty() {
                    let mut c = change(p.clone(), Kind::Modified, Some(&up), Some(&low));
                    c.what = what;
                    if is_dir(&low) {
                        // A dir replaced by a file or symlink: the commit
                        // removes its whole tree, which the report says.
                        c.entries = Some(fsops::count_entries(&l.lower, &p));
                    }
                    out.push(c);
                }
            }
        }
    }
    Ok(())
}

/// What differs between upper's and lower's `rel`.
fn differs(l: &Layers, rel: &Path, up: &Stat, low: &Stat, times: bool) -> io::Result<Vec<What>> {
    let mut what = Vec::new();
    let (tu, tl) = (
        FileType::from_raw_mode(up.st_mode),
        FileType::from_raw_mode(low.st_mode),
    );
    if tu != tl {
        return Ok(vec![What::Type]);
    }
    match tu {
        FileType::RegularFile if up.st_size != low.st_size || !same_content(l, rel)? => {
            what.push(What::Content);
        }
        FileType::Symlink if l.upper.readlink(rel).ok() != l.lower.readlink(rel).ok() => {
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
        && l.upper.user_xattrs(rel).unwrap_or_default()
            != l.lower.user_xattrs(rel).unwrap_or_default()
    {
        what.push(What::Xattrs);
    }
    Ok(what)
}

/// Whether two regular files of the same size hold the same bytes.
fn same_content(l: &Layers, rel: &Path) -> io::Result<bool> {
    let open = |r: &Root| -> io::Result<std::fs::File> {
        r.open_at(rel, OFlags::RDONLY)
            .map(std::fs::File::from)
            .map_err(|e| fsops::err(e, "open", &r.path.join(rel)))
    };
    let (mut a, mut b) = (open(&l.upper)?, open(&l.lower)?);
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

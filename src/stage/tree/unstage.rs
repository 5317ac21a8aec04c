//! Taking changes out of the stage: a discard drops them; a commit
//! removes what it applied. Either way a sweep then removes what the
//! stage still holds that is no change, so it holds exactly what is left.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{self as rfs, AtFlags, FileType};
use rustix::io::Errno;

use super::fingerprints::Fingerprints;
use super::fsops::{self, split};
use super::{Change, Layers, changes};
use crate::stage::walk::{self, Visit};

fn io_err(e: Errno, what: &str, p: &Path) -> io::Error {
    fsops::err(e, what, p)
}

/// Drop the stage's changes under `filter` (empty: all); returns them.
pub fn discard(l: &Layers, fp: &Fingerprints, filter: &[PathBuf]) -> io::Result<Vec<Change>> {
    let dropped = changes(l, filter)?;
    if filter.is_empty() {
        for n in l
            .upper
            .names(Path::new(""))
            .map_err(|e| io_err(e, "list", &l.upper.path))?
        {
            fsops::remove_all(l.upper.fd(), &n)
                .map_err(|e| io_err(e, "remove", &l.upper.path.join(&n)))?;
        }
        fp.forget(&[PathBuf::new()])?;
        return Ok(dropped);
    }
    for f in filter {
        unstage_tree(l, f)?;
    }
    for c in &dropped {
        if let Some(from) = &c.from {
            unstage_tree(l, from)?;
        }
    }
    sweep(l, filter, &HashSet::new())?;
    let mut forget = filter.to_vec();
    forget.extend(dropped.iter().filter_map(|c| c.from.clone()));
    fp.forget(&forget)?;
    Ok(dropped)
}

/// Take an applied `rel` out of the stage: a file, symlink or whiteout is
/// removed; a directory loses its opaque mark (its backing dir now holds
/// exactly what the stage showed) and goes in the sweep when empty.
pub(super) fn unstage(l: &Layers, rel: &Path) -> io::Result<()> {
    // Its directory looked up once (a path of any depth), then by name.
    let (parent, name) = split(rel);
    let Ok(dir) = l.upper.dir(parent) else {
        return Ok(());
    };
    let Some(st) = walk::stat_at(dir.as_fd(), name).ok().flatten() else {
        return Ok(());
    };
    if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
        if let Ok(fd) = walk::open_dir_at(dir.as_fd(), name) {
            let _ = rfs::fremovexattr(&fd, format!("{}opaque", l.prefix).as_str());
        }
        return Ok(());
    }
    match rfs::unlinkat(&dir, name, AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(e) => Err(io_err(e, "remove", &l.upper.path.join(rel))),
    }
}

/// Drop `rel` and everything under it from the stage.
fn unstage_tree(l: &Layers, rel: &Path) -> io::Result<()> {
    let (parent, name) = split(rel);
    match l.upper.dir(parent) {
        Ok(dir) => fsops::remove_all(dir.as_fd(), name)
            .map_err(|e| io_err(e, "remove", &l.upper.path.join(rel))),
        Err(Errno::NOENT | Errno::NOTDIR) => Ok(()),
        Err(e) => Err(io_err(e, "open", &l.upper.path.join(parent))),
    }
}

/// After a commit or discard: what the stage still holds under `filter`
/// that is no change (a file equal to the backing one, a whiteout of
/// nothing, a directory that only held applied changes) is removed, so
/// the stage holds exactly the changes left (`keep`: conflicts).
pub(super) fn sweep(l: &Layers, filter: &[PathBuf], keep: &HashSet<PathBuf>) -> io::Result<()> {
    // With nothing kept, every change under the filter was applied: what
    // is left there is no change (no need to walk both trees again).
    let left: HashSet<PathBuf> = if keep.is_empty() {
        HashSet::new()
    } else {
        changes(l, filter)?.into_iter().map(|c| c.path).collect()
    };
    let starts: Vec<PathBuf> = if filter.is_empty() {
        vec![PathBuf::new()]
    } else {
        // The filter paths and their ancestors (a parent that only held
        // them may be empty now).
        let mut s: Vec<PathBuf> = filter.to_vec();
        for f in filter {
            s.extend(f.ancestors().skip(1).map(Path::to_path_buf));
        }
        s.sort();
        s.dedup();
        s
    };
    for start in starts.iter().rev() {
        sweep_at(l, start, &left, keep, filter)?;
    }
    Ok(())
}

fn sweep_at(
    l: &Layers,
    rel: &Path,
    left: &HashSet<PathBuf>,
    keep: &HashSet<PathBuf>,
    filter: &[PathBuf],
) -> io::Result<()> {
    let Some(st) = l.upper.stat(rel).ok().flatten() else {
        return Ok(());
    };
    let wanted = super::in_filter(rel, filter);
    let stays = |p: &Path| left.contains(p) || keep.contains(p);
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        if wanted && !stays(rel) {
            let (parent, name) = split(rel);
            if let Ok(dir) = l.upper.dir(parent) {
                let _ = rfs::unlinkat(&dir, name, AtFlags::empty());
            }
        }
        return Ok(());
    }
    if wanted {
        // Everything under it is wanted too: what is no change goes,
        // deepest first (a loop, any depth).
        if let Ok(top) = l.upper.dir(rel) {
            let _ = walk::walk::<Errno>(
                top.as_fd(),
                &mut |e| {
                    if e.is_dir()? {
                        return Ok(Visit::Enter);
                    }
                    if !stays(&rel.join(e.rel)) {
                        let _ = rfs::unlinkat(e.dir, e.name, AtFlags::empty());
                    }
                    Ok(Visit::Next)
                },
                &mut |parent, sub, name| {
                    let p = rel.join(sub);
                    if empty_dir(parent, name) && lower_dir(l, &p) && !stays(&p) {
                        let _ = rfs::unlinkat(parent, name, AtFlags::REMOVEDIR);
                    }
                    Ok(())
                },
            );
        }
    }
    let empty = l.upper.names(rel).map(|n| n.is_empty()).unwrap_or(false);
    // Outside the filter a directory may be a change of its own (a
    // chmod) that nobody applied: it stays unless it equals the backing
    // one.
    let same = wanted || same_dir(l, rel);
    if !rel.as_os_str().is_empty() && empty && lower_dir(l, rel) && same && !stays(rel) {
        let (parent, name) = split(rel);
        if let Ok(dir) = l.upper.dir(parent) {
            let _ = rfs::unlinkat(&dir, name, AtFlags::REMOVEDIR);
        }
    }
    Ok(())
}

/// Whether directory `name` in `dir` is empty.
fn empty_dir(dir: BorrowedFd<'_>, name: &OsStr) -> bool {
    walk::open_dir_at(dir, name)
        .and_then(|d| walk::names(d.as_fd()))
        .is_ok_and(|n| n.is_empty())
}

/// Whether the backing dir has a directory at `rel`.
fn lower_dir(l: &Layers, rel: &Path) -> bool {
    l.lower
        .stat(rel)
        .ok()
        .flatten()
        .is_some_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Directory)
}

/// Whether directory `rel` has the same mode, owner and user xattrs in
/// the stage as in the backing dir.
fn same_dir(l: &Layers, rel: &Path) -> bool {
    match (l.upper.stat(rel), l.lower.stat(rel)) {
        (Ok(Some(u)), Ok(Some(w))) => {
            (u.st_mode, u.st_uid, u.st_gid) == (w.st_mode, w.st_uid, w.st_gid)
                && l.upper.user_xattrs(rel).unwrap_or_default()
                    == l.lower.user_xattrs(rel).unwrap_or_default()
        }
        _ => false,
    }
}

//! Commit (the stage applied to the backing dir) and discard (the stage
//! dropped).
//!
//! A commit checks every change for a conflict first (a host change on
//! its path, a parent, or under a dir it removes: see `conflict`), then
//! applies the rest, each step looking again at what it would remove or
//! overwrite, in an order that never leaves a torn file: directories made,
//! each file and symlink written to a temp name beside its target and
//! renamed over it (mode, owner when root, times and user xattrs set
//! before the rename), then deletions deepest first, then directories'
//! own attributes. The backing filesystem is synced once; only then is
//! what was applied removed from the stage. A journal
//! names the paths being applied until the commit ends, so a commit
//! interrupted halfway (its own writes now differ from the fingerprints)
//! completes when run again instead of reporting conflicts with itself.

use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::iter;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, Stat, Timespec, Timestamps};
use rustix::io::Errno;
use serde::Serialize;

use super::conflict::{Check, host_changed};
use super::fingerprints::{Fingerprint, Fingerprints};
use super::fsops::{self, split};
use super::{Change, Kind, Layers, changes};

const JOURNAL: &str = "commit.journal";

/// A path left out of a commit, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Conflict {
    #[serde(serialize_with = "crate::text::serialize_lossy")]
    pub path: PathBuf,
    pub why: String,
    /// Where the host's change is, when not at `path` itself: a dir
    /// above it, or an entry inside a dir it would remove.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::text::serialize_lossy_opt"
    )]
    pub at: Option<PathBuf>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct CommitReport {
    pub applied: Vec<Change>,
    pub conflicts: Vec<Conflict>,
}

fn io_err(e: Errno, what: &str, p: &Path) -> io::Error {
    fsops::err(e, what, p)
}

fn journal_paths(dir: &Path) -> HashSet<PathBuf> {
    std::fs::read(dir.join(JOURNAL))
        .map(|b| {
            b.split(|c| *c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| PathBuf::from(OsStr::from_bytes(s)))
                .collect()
        })
        .unwrap_or_default()
}

/// The paths a commit applying `todo` names in its journal.
fn journaled<'a>(todo: &'a [Change], resuming: &'a HashSet<PathBuf>) -> Vec<&'a Path> {
    let mut journal: Vec<&Path> = todo.iter().map(|c| c.path.as_path()).collect();
    journal.extend(todo.iter().filter_map(|c| c.from.as_deref()));
    journal.extend(resuming.iter().map(PathBuf::as_path));
    journal
}

fn write_journal(dir: &Path, paths: &[&Path]) -> io::Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(dir.join(JOURNAL))?;
    for p in paths {
        f.write_all(p.as_os_str().as_bytes())?;
        f.write_all(&[0])?;
    }
    f.sync_all()
}

/// Apply the stage's changes under `filter` (empty: all) to the backing
/// dir; `journal_dir` is the zone's stage dir. Conflicts are left out
/// unless `force`.
pub fn commit(
    l: &Layers,
    fp: &Fingerprints,
    journal_dir: &Path,
    filter: &[PathBuf],
    force: bool,
) -> io::Result<CommitReport> {
    commit_with(l, fp, journal_dir, filter, force, &mut || {})
}

/// [`commit`], calling `between` after the checks, before anything is
/// applied (tests: a host change made while a commit runs).
pub(super) fn commit_with(
    l: &Layers,
    fp: &Fingerprints,
    journal_dir: &Path,
    filter: &[PathBuf],
    force: bool,
    between: &mut dyn FnMut(),
) -> io::Result<CommitReport> {
    let resuming = journal_paths(journal_dir);
    let all = changes(l, filter)?;
    let mut report = CommitReport::default();
    let mut todo = Vec::new();
    let mut check = Check::new(l, fp);
    for c in all {
        let conflict = if force {
            None
        } else {
            check.change(&c, |p| resuming.contains(p))?
        };
        match conflict {
            Some(conflict) => report.conflicts.push(conflict),
            None => todo.push(c),
        }
    }
    let guard = (!force).then(|| check.guard());
    let parents_noted = renote(l, fp, &todo)?;
    write_journal(journal_dir, &journaled(&todo, &resuming))?;
    between();
    // Each step looks again at what it would remove or overwrite (a host
    // change made since the checks is a conflict too).
    let mut late = Vec::new();
    let mut is_late = |c: &Change| -> io::Result<bool> {
        let Some(g) = &guard else { return Ok(false) };
        Ok(match g.late(l, c, |p| resuming.contains(p))? {
            Some(conflict) => {
                late.push(conflict);
                true
            }
            None => false,
        })
    };
    let root = rustix::process::geteuid().is_root();
    let mut links: HashMap<(u64, u64), PathBuf> = HashMap::new();
    // Directories first (parents before children), then everything else
    // but deletions, then deletions deepest first, then directories' own
    // attributes deepest first.
    let (dirs, rest): (Vec<&Change>, Vec<&Change>) = todo
        .iter()
        .partition(|c| c.file_type == "dir" && c.kind != Kind::Deleted);
    for c in &dirs {
        if is_late(c)? {
            continue;
        }
        ensure_dir(l, &c.path)?;
    }
    for c in rest.iter().filter(|c| c.kind != Kind::Deleted) {
        if is_late(c)? {
            continue;
        }
        put(l, &c.path, root, &mut links)?;
        if let Some(from) = &c.from {
            delete(l, from)?;
        }
    }
    let mut deletions: Vec<&Change> = rest
        .iter()
        .copied()
        .filter(|c| c.kind == Kind::Deleted)
        .collect();
    deletions.sort_by(|a, b| b.path.cmp(&a.path));
    for c in deletions {
        if is_late(c)? {
            continue;
        }
        delete(l, &c.path)?;
    }
    let mut dirs = dirs;
    dirs.sort_by(|a, b| b.path.cmp(&a.path));
    for c in &dirs {
        if late.iter().any(|x| x.path == c.path) {
            continue;
        }
        if let Some(g) = &guard {
            if let Some(conflict) = g.late_attrs(l, c)? {
                late.push(conflict);
                continue;
            }
        }
        dir_attrs(l, &c.path, root)?;
    }
    let late_paths: HashSet<PathBuf> = late.iter().map(|c| c.path.clone()).collect();
    if !late.is_empty() {
        // Left in the stage as conflicts: a re-run checks them again.
        todo.retain(|c| !late_paths.contains(&c.path));
        report.conflicts.append(&mut late);
        write_journal(journal_dir, &journaled(&todo, &resuming))?;
    }
    // Durable before the stage lets go of anything (one sync of the
    // backing filesystem, not one per file): a crash before this point
    // leaves every change staged, and the re-run applies it again.
    rfs::syncfs(l.lower.fd()).map_err(|e| io_err(e, "sync", &l.lower.path))?;
    // The stage no longer holds what was applied.
    for c in &todo {
        unstage(l, &c.path)?;
        if let Some(from) = &c.from {
            unstage(l, from)?;
        }
    }
    let keep: HashSet<PathBuf> = report.conflicts.iter().map(|c| c.path.clone()).collect();
    sweep(l, filter, &keep)?;
    // What was applied is no change any more (a deleted tree with all
    // under it); a parent that keeps a note is noted as the commit left
    // it, so that a dir the commit made is its own at the next one.
    let (gone, stay): (Vec<&Change>, Vec<&Change>) =
        todo.iter().partition(|c| c.kind == Kind::Deleted);
    let exact: Vec<PathBuf> = stay.iter().map(|c| c.path.clone()).collect();
    let mut trees: Vec<PathBuf> = gone.iter().map(|c| c.path.clone()).collect();
    trees.extend(todo.iter().filter_map(|c| c.from.clone()));
    let mut set = Vec::with_capacity(parents_noted.len());
    for p in parents_noted {
        if trees.iter().any(|t| p.starts_with(t)) {
            continue;
        }
        // Only as a dir (what the commit makes): anything else there is
        // the host's, and keeps the note that says so.
        match l.lower.stat(&p) {
            Ok(Some(now)) if FileType::from_raw_mode(now.st_mode) == FileType::Directory => {
                set.push((p, Some(Fingerprint::of(&now))));
            }
            _ => {}
        }
    }
    fp.settle(&exact, &trees, &set)?;
    let _ = std::fs::remove_file(journal_dir.join(JOURNAL));
    report.applied = todo;
    Ok(report)
}

/// The parents of what `todo` applies that have a note the host has not
/// made stale: the commit may make them (a dir the worker made) or
/// replace them (a file the worker replaced with a dir).
fn renote(l: &Layers, fp: &Fingerprints, todo: &[Change]) -> io::Result<Vec<PathBuf>> {
    let applied: HashSet<&Path> = todo.iter().map(|c| c.path.as_path()).collect();
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for p in todo
        .iter()
        .flat_map(|c| iter::once(&c.path).chain(c.from.as_ref()))
    {
        for a in p.ancestors().skip(1) {
            if a.as_os_str().is_empty() || applied.contains(a) || !seen.insert(a) {
                continue;
            }
            if fp.get(a).is_some() && host_changed(l, fp, a)?.is_none() {
                out.push(a.to_path_buf());
            }
        }
    }
    Ok(out)
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

/// Make the backing dir's parents of `rel` exist (as the stage has them).
fn parents(l: &Layers, rel: &Path) -> io::Result<()> {
    let mut missing = Vec::new();
    let mut p = rel.parent();
    while let Some(d) = p.filter(|d| !d.as_os_str().is_empty()) {
        match l
            .lower
            .stat(d)
            .map_err(|e| io_err(e, "stat", &l.lower.path.join(d)))?
        {
            Some(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => break,
            _ => missing.push(d.to_path_buf()),
        }
        p = d.parent();
    }
    for d in missing.iter().rev() {
        ensure_dir(l, d)?;
    }
    Ok(())
}

/// Directory `rel` exists in the backing dir (replacing a non-directory).
fn ensure_dir(l: &Layers, rel: &Path) -> io::Result<()> {
    parents(l, rel)?;
    let (parent, name) = split(rel);
    let dir = l
        .lower
        .dir(parent)
        .map_err(|e| io_err(e, "open", &l.lower.path.join(parent)))?;
    match l
        .lower
        .stat(rel)
        .map_err(|e| io_err(e, "stat", &l.lower.path.join(rel)))?
    {
        Some(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => return Ok(()),
        Some(_) => fsops::remove_all(dir.as_fd(), name)
            .map_err(|e| io_err(e, "remove", &l.lower.path.join(rel)))?,
        None => {}
    }
    let mode = l
        .upper
        .stat(rel)
        .ok()
        .flatten()
        .map_or(0o755, |s| s.st_mode & 0o7777);
    match rfs::mkdirat(&dir, name, Mode::from_raw_mode(mode | 0o700)) {
        Ok(()) | Err(Errno::EXIST) => Ok(()),
        Err(e) => Err(io_err(e, "mkdir", &l.lower.path.join(rel))),
    }
}

/// A temp name beside `name` in the same directory.
fn temp_name(name: &OsStr) -> OsString {
    let mut t = OsString::from(".zm-commit.");
    t.push(name);
    t.push(format!(".{}", std::process::id()));
    t
}

/// Write the stage's `rel` (file, symlink, fifo or socket) into the
/// backing dir: at a temp name, then renamed over the target.
fn put(
    l: &Layers,
    rel: &Path,
    root: bool,
    links: &mut HashMap<(u64, u64), PathBuf>,
) -> io::Result<()> {
    let lower_p = l.lower.path.join(rel);
    let up = l
        .upper
        .stat(rel)
        .map_err(|e| io_err(e, "stat", &l.upper.path.join(rel)))?
        .ok_or_else(|| io::Error::other(format!("{}: gone from the stage", rel.display())))?;
    parents(l, rel)?;
    let (parent, name) = split(rel);
    let dir = l
        .lower
        .dir(parent)
        .map_err(|e| io_err(e, "open", &l.lower.path.join(parent)))?;
    // A directory in the way of a file goes first.
    if let Some(st) = l.lower.stat(rel).map_err(|e| io_err(e, "stat", &lower_p))? {
        if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
            fsops::remove_all(dir.as_fd(), name).map_err(|e| io_err(e, "remove", &lower_p))?;
        }
    }
    let tmp = temp_name(name);
    let _ = rfs::unlinkat(&dir, &tmp, AtFlags::empty());
    let times = Timestamps {
        last_access: Timespec {
            tv_sec: up.st_atime,
            tv_nsec: up.st_atime_nsec as _,
        },
        last_modification: Timespec {
            tv_sec: up.st_mtime,
            tv_nsec: up.st_mtime_nsec as _,
        },
    };
    match FileType::from_raw_mode(up.st_mode) {
        // Same filesystem: the staged file itself moves into place (one
        // atomic rename: no copy, its mode, owner, times and hard links
        // kept, and it leaves the stage at once).
        FileType::RegularFile if move_into(l, rel, dir.as_fd(), name).is_ok() => return Ok(()),
        FileType::RegularFile => {
            let key = (up.st_dev, up.st_ino);
            let linked = match links.get(&key) {
                Some(first) if up.st_nlink > 1 => {
                    let (fp, fname) = split(first);
                    let fdir = l
                        .lower
                        .dir(fp)
                        .map_err(|e| io_err(e, "open", &l.lower.path.join(fp)))?;
                    rfs::linkat(&fdir, fname, &dir, &tmp, AtFlags::empty())
                        .map_err(|e| io_err(e, "link", &lower_p))?;
                    true
                }
                _ => false,
            };
            if !linked {
                copy_file(l, rel, &up, dir.as_fd(), &tmp, root, &times).inspect_err(|_| {
                    let _ = rfs::unlinkat(&dir, &tmp, AtFlags::empty());
                })?;
                if up.st_nlink > 1 {
                    links.insert(key, rel.to_path_buf());
                }
            }
        }
        FileType::Symlink => {
            let target = l
                .upper
                .readlink(rel)
                .map_err(|e| io_err(e, "readlink", &l.upper.path.join(rel)))?;
            rfs::symlinkat(target.as_os_str(), &dir, &tmp)
                .map_err(|e| io_err(e, "symlink", &lower_p))?;
            if root {
                let _ = rfs::chownat(
                    &dir,
                    &tmp,
                    Some(rfs::Uid::from_raw(up.st_uid)),
                    Some(rfs::Gid::from_raw(up.st_gid)),
                    AtFlags::SYMLINK_NOFOLLOW,
                );
            }
            let _ = rfs::utimensat(&dir, &tmp, &times, AtFlags::SYMLINK_NOFOLLOW);
        }
        FileType::Fifo | FileType::Socket => {
            rfs::mknodat(
                &dir,
                &tmp,
                FileType::from_raw_mode(up.st_mode),
                Mode::from_raw_mode(up.st_mode & 0o7777),
                0,
            )
            .map_err(|e| io_err(e, "mknod", &lower_p))?;
        }
        _ => return Ok(()),
    }
    rfs::renameat(&dir, &tmp, &dir, name).map_err(|e| io_err(e, "rename", &lower_p))
}

/// Rename the stage's regular file `rel` over `dir/name` in the backing
/// dir, the overlay's own xattrs taken off it first. Fails (EXDEV) when
/// the stage is on another filesystem.
fn move_into(l: &Layers, rel: &Path, dir: BorrowedFd<'_>, name: &OsStr) -> Result<(), Errno> {
    let (parent, _) = split(rel);
    let from = l.upper.dir(parent)?;
    let fd = l.upper.open_at(rel, OFlags::PATH)?;
    let p = PathBuf::from(format!("/proc/self/fd/{}", {
        use std::os::fd::AsRawFd;
        fd.as_raw_fd()
    }));
    let mut buf = vec![0u8; 64 * 1024];
    let n = rfs::listxattr(&p, &mut buf[..]).unwrap_or(0);
    for x in buf[..n].split(|b| *b == 0).filter(|s| !s.is_empty()) {
        if x.starts_with(l.prefix.as_bytes()) {
            rfs::removexattr(&p, OsStr::from_bytes(x))?;
        }
    }
    rfs::renameat(&from, name, dir, name)
}

/// The stage's regular file `rel` into `dir/tmp`: cloned where the
/// filesystem can, else copied; attributes set; flushed.
fn copy_file(
    l: &Layers,
    rel: &Path,
    up: &Stat,
    dir: BorrowedFd<'_>,
    tmp: &OsStr,
    root: bool,
    times: &Timestamps,
) -> io::Result<()> {
    let lower_p = l.lower.path.join(rel);
    let src = l
        .upper
        .open_at(rel, OFlags::RDONLY)
        .map_err(|e| io_err(e, "open", &l.upper.path.join(rel)))?;
    let dst: OwnedFd = rfs::openat(
        dir,
        tmp,
        OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .map_err(|e| io_err(e, "create", &lower_p))?;
    if rfs::ioctl_ficlone(&dst, &src).is_err() {
        let mut left = up.st_size as u64;
        while left > 0 {
            match rfs::copy_file_range(&src, None, &dst, None, left.min(1 << 30) as usize) {
                Ok(0) => break,
                Ok(n) => left -= n as u64,
                // Between filesystems of different kinds: read and write.
                Err(Errno::XDEV | Errno::OPNOTSUPP | Errno::INVAL | Errno::NOSYS) => {
                    let mut from = std::fs::File::from(src.try_clone()?);
                    let mut to = std::fs::File::from(dst.try_clone()?);
                    use std::io::Seek;
                    let done = up.st_size as u64 - left;
                    from.seek(std::io::SeekFrom::Start(done))?;
                    to.seek(std::io::SeekFrom::Start(done))?;
                    std::io::copy(&mut from, &mut to).map_err(|e| {
                        io::Error::new(e.kind(), format!("copy {}: {e}", lower_p.display()))
                    })?;
                    break;
                }
                Err(e) => return Err(io_err(e, "copy", &lower_p)),
            }
        }
    }
    if root {
        rfs::fchown(
            &dst,
            Some(rfs::Uid::from_raw(up.st_uid)),
            Some(rfs::Gid::from_raw(up.st_gid)),
        )
        .map_err(|e| io_err(e, "chown", &lower_p))?;
    }
    rfs::fchmod(&dst, Mode::from_raw_mode(up.st_mode & 0o7777))
        .map_err(|e| io_err(e, "chmod", &lower_p))?;
    for (name, value) in l.upper.user_xattrs(rel).unwrap_or_default() {
        rfs::fsetxattr(&dst, name.as_str(), &value, rfs::XattrFlags::empty())
            .map_err(|e| io_err(e, "setxattr", &lower_p))?;
    }
    rfs::futimens(&dst, times).map_err(|e| io_err(e, "set times of", &lower_p))
}

/// Remove `rel` (a whole tree) from the backing dir.
fn delete(l: &Layers, rel: &Path) -> io::Result<()> {
    let (parent, name) = split(rel);
    match l.lower.dir(parent) {
        Ok(dir) => fsops::remove_all(dir.as_fd(), name)
            .map_err(|e| io_err(e, "remove", &l.lower.path.join(rel))),
        Err(Errno::NOENT | Errno::NOTDIR) => Ok(()),
        Err(e) => Err(io_err(e, "open", &l.lower.path.join(parent))),
    }
}

/// A directory's mode (and owner, as root) and user xattrs as staged.
fn dir_attrs(l: &Layers, rel: &Path, root: bool) -> io::Result<()> {
    let Some(up) = l.upper.stat(rel).ok().flatten() else {
        return Ok(());
    };
    let p = l.lower.path.join(rel);
    let fd = l.lower.dir(rel).map_err(|e| io_err(e, "open", &p))?;
    if root {
        rfs::fchown(
            &fd,
            Some(rfs::Uid::from_raw(up.st_uid)),
            Some(rfs::Gid::from_raw(up.st_gid)),
        )
        .map_err(|e| io_err(e, "chown", &p))?;
    }
    rfs::fchmod(&fd, Mode::from_raw_mode(up.st_mode & 0o7777))
        .map_err(|e| io_err(e, "chmod", &p))?;
    let want = l.upper.user_xattrs(rel).unwrap_or_default();
    for (name, _) in l.lower.user_xattrs(rel).unwrap_or_default() {
        if !want.iter().any(|(n, _)| *n == name) {
            let _ = rfs::fremovexattr(&fd, name.as_str());
        }
    }
    for (name, value) in want {
        rfs::fsetxattr(&fd, name.as_str(), &value, rfs::XattrFlags::empty())
            .map_err(|e| io_err(e, "setxattr", &p))?;
    }
    Ok(())
}

/// Take an applied `rel` out of the stage: a file, symlink or whiteout is
/// removed; a directory loses its opaque mark (its backing dir now holds
/// exactly what the stage showed) and goes in the sweep when empty.
fn unstage(l: &Layers, rel: &Path) -> io::Result<()> {
    let Some(st) = l.upper.stat(rel).ok().flatten() else {
        return Ok(());
    };
    let (parent, name) = split(rel);
    let Ok(dir) = l.upper.dir(parent) else {
        return Ok(());
    };
    if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
        if let Ok(fd) = l.upper.dir(rel) {
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
fn sweep(l: &Layers, filter: &[PathBuf], keep: &HashSet<PathBuf>) -> io::Result<()> {
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
    if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
        if wanted {
            for n in l.upper.names(rel).unwrap_or_default() {
                sweep_at(l, &rel.join(n), left, keep, filter)?;
            }
        }
        let empty = l.upper.names(rel).map(|n| n.is_empty()).unwrap_or(false);
        let lower_dir = l
            .lower
            .stat(rel)
            .ok()
            .flatten()
            .is_some_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Directory);
        // Outside the filter a directory may be a change of its own (a
        // chmod) that nobody applied: it stays unless it equals the
        // backing one.
        let same = wanted || same_dir(l, rel);
        if !rel.as_os_str().is_empty()
            && empty
            && lower_dir
            && same
            && !left.contains(rel)
            && !keep.contains(rel)
        {
            let (parent, name) = split(rel);
            if let Ok(dir) = l.upper.dir(parent) {
                let _ = rfs::unlinkat(&dir, name, AtFlags::REMOVEDIR);
            }
        }
        return Ok(());
    }
    if wanted && !left.contains(rel) && !keep.contains(rel) {
        let (parent, name) = split(rel);
        if let Ok(dir) = l.upper.dir(parent) {
            let _ = rfs::unlinkat(&dir, name, AtFlags::empty());
        }
    }
    Ok(())
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

/// Tests: a journal as an interrupted commit leaves it.
#[cfg(test)]
pub(super) fn tests_only_journal(dir: &Path, paths: &[&Path]) {
    write_journal(dir, paths).expect("write the journal");
}

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
use std::ffi::OsStr;
use std::io::{self, Write};
use std::iter;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{self as rfs, FileType};
use rustix::io::Errno;

use super::conflict::{Check, Guard, host_changed};
use super::fingerprints::{Fingerprint, Fingerprints};
use super::fsops;
use super::unstage::{sweep, unstage};
use super::write::{delete, dir_attrs, ensure_dir, put};
use super::{Change, ChangeType, CommitReport, Conflict, Kind, Layers, changes};

const JOURNAL: &str = "commit.journal";

fn io_err(e: Errno, what: &str, p: &Path) -> io::Error {
    fsops::err(e, what, p)
}

fn journal_paths(dir: &Path) -> HashSet<PathBuf> {
    crate::stage::dir::read_nofollow(&dir.join(JOURNAL))
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
    let mut f = crate::stage::dir::create_fresh(&dir.join(JOURNAL), 0o600)?;
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

/// [`commit`] that leaves its journal for the caller to end
/// ([`end_journal`]) once it has done what must follow it: a commit up to
/// a checkpoint notes the later layers' paths it applied under
/// (`stage::work`), and a cut-short one's paths must still be named then.
pub fn commit_keeping_journal(
    l: &Layers,
    fp: &Fingerprints,
    journal_dir: &Path,
    filter: &[PathBuf],
    force: bool,
) -> io::Result<CommitReport> {
    commit_in(l, fp, journal_dir, filter, force, &mut || {}, true)
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
    commit_in(l, fp, journal_dir, filter, force, between, false)
}

/// The changes under `filter` a commit would apply, each judged against
/// the host (unless `force`): those it would leave out go to `conflicts`.
fn judged<'a>(
    l: &'a Layers,
    fp: &'a Fingerprints,
    filter: &[PathBuf],
    force: bool,
    resuming: &HashSet<PathBuf>,
    conflicts: &mut Vec<Conflict>,
) -> io::Result<(Vec<Change>, Check<'a>)> {
    let mut todo = Vec::new();
    let mut check = Check::new(l, fp);
    for c in changes(l, filter)? {
        let conflict = if force {
            None
        } else {
            check.change(&c, |p| resuming.contains(p))?
        };
        match conflict {
            Some(conflict) => conflicts.push(conflict),
            None => todo.push(c),
        }
    }
    Ok((todo, check))
}

/// What a commit of `filter` (as [`commit`]) would refuse, when it would
/// apply nothing at all (no change, or every one a conflict); None when
/// it would apply something. Touches nothing: a stage with checkpoints
/// asks it first, and keeps them when the answer is Some (a commit that
/// applies nothing has no reason to merge the undo points away).
pub fn applies_nothing(
    l: &Layers,
    fp: &Fingerprints,
    journal_dir: &Path,
    filter: &[PathBuf],
    force: bool,
) -> io::Result<Option<Vec<Conflict>>> {
    let resuming = journal_paths(journal_dir);
    let mut conflicts = Vec::new();
    let (todo, _) = judged(l, fp, filter, force, &resuming, &mut conflicts)?;
    Ok(todo.is_empty().then_some(conflicts))
}

/// [`commit_with`], its journal left in place when `keep_journal`.
fn commit_in(
    l: &Layers,
    fp: &Fingerprints,
    journal_dir: &Path,
    filter: &[PathBuf],
    force: bool,
    between: &mut dyn FnMut(),
    keep_journal: bool,
) -> io::Result<CommitReport> {
    let resuming = journal_paths(journal_dir);
    let mut report = CommitReport::default();
    let (mut todo, check) = judged(l, fp, filter, force, &resuming, &mut report.conflicts)?;
    let mut guard = (!force).then(|| check.guard());
    let parents_noted = renote(l, fp, &todo)?;
    write_journal(journal_dir, &journaled(&todo, &resuming))?;
    between();
    // Each step looks again at what it would remove or overwrite (a host
    // change made since the checks is a conflict too).
    let mut late = Vec::new();
    let mut is_late = |guard: &Option<Guard>, c: &Change| -> io::Result<bool> {
        let Some(g) = guard else { return Ok(false) };
        Ok(match g.late(l, c, |p| resuming.contains(p))? {
            Some(conflict) => {
                late.push(conflict);
                true
            }
            None => false,
        })
    };
    // The dirs a step made are the commit's, not the host's.
    let made = |guard: &mut Option<Guard>, rel: &Path| match guard {
        Some(g) => g.made(l, rel),
        None => Ok(()),
    };
    let root = rustix::process::geteuid().is_root();
    let mut links: HashMap<(u64, u64), PathBuf> = HashMap::new();
    // Directories first (parents before children), then everything else
    // but deletions, then deletions deepest first, then directories' own
    // attributes deepest first.
    let (dirs, rest): (Vec<&Change>, Vec<&Change>) = todo
        .iter()
        .partition(|c| c.file_type == Some(ChangeType::Dir) && c.kind != Kind::Deleted);
    for c in &dirs {
        if is_late(&guard, c)? {
            continue;
        }
        ensure_dir(l, &c.path)?;
        made(&mut guard, &c.path)?;
    }
    for c in rest.iter().filter(|c| c.kind != Kind::Deleted) {
        if is_late(&guard, c)? {
            continue;
        }
        put(l, &c.path, root, &mut links)?;
        made(&mut guard, &c.path)?;
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
        if is_late(&guard, c)? {
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
    if !keep_journal {
        end_journal(journal_dir);
    }
    report.applied = todo;
    Ok(report)
}

/// The paths the journal in `dir` names: what a commit there is applying,
/// or one cut short was (empty when none is).
pub fn journal_of(dir: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = journal_paths(dir).into_iter().collect();
    paths.sort();
    paths
}

/// The commit in `dir` is over: its journal goes.
pub fn end_journal(dir: &Path) {
    let _ = std::fs::remove_file(dir.join(JOURNAL));
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
            // One seen had its own ancestors looked at then: each path is
            // looked at once, whatever the depth.
            if a.as_os_str().is_empty() || !seen.insert(a) {
                break;
            }
            if applied.contains(a) {
                continue;
            }
            if fp.get(a).is_some() && host_changed(l, fp, a)?.is_none() {
                out.push(a.to_path_buf());
            }
        }
    }
    Ok(out)
}

/// Tests: a journal as an interrupted commit leaves it.
#[cfg(test)]
pub(super) fn tests_only_journal(dir: &Path, paths: &[&Path]) {
    write_journal(dir, paths).expect("write the journal");
}

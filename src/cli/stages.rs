//! `stages [--json] [--prune] [DIR]`: the stage dirs under the state dir
//! (or DIR), each with the mountpoint it was made for, whether a live
//! mount holds it, how many changes it keeps, its size and when anything
//! in it last changed; `--prune` removes the ones no mount holds and that
//! keep no change and no checkpoint.
//!
//! Whether a mount holds a stage is what its lock says (the daemon keeps
//! it flock'ed while mounted), so each stage no mount holds is locked here
//! for as long as it takes to count its changes (and, pruning, to move it
//! aside); a mount of it started in that moment is refused as "in use",
//! as by any other `changes`. A stage that keeps changes is never
//! removed: `zonemount discard STAGE_DIR` drops them first, on purpose.

use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use clap::Args;
use serde::Serialize;

use super::Failure;
use super::columns::columns;
use crate::control::protocol::Request;
use crate::stage::dir::{self, StageError};
use crate::stage::report::ChangesReport;
use crate::stage::service::{OfflineStage, Reports};
use crate::stage::walk;
use crate::text;

#[derive(Debug, Args)]
pub(crate) struct StagesArgs {
    /// One JSON array instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
    /// Remove the stage dirs no mount holds and that keep no change and no
    /// checkpoint.
    #[arg(long)]
    pub(crate) prune: bool,
    /// Where the stage dirs are (default: `stages` in the state dir,
    /// where a mount without --stage-dir keeps its stage).
    #[arg(value_name = "DIR")]
    pub(crate) dir: Option<PathBuf>,
}

/// One stage dir, as `stages` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct StageRow {
    pub(crate) path: PathBuf,
    /// The mountpoint it was made for (from its manifest; `None` when it
    /// has none yet, or an unreadable one).
    pub(crate) mountpoint: Option<PathBuf>,
    /// A live mount holds it (its lock is taken).
    pub(crate) in_use: bool,
    /// The process that holds it, when the lock file names it.
    pub(crate) pid: Option<u32>,
    /// How many changes it keeps (`None`: could not be counted).
    pub(crate) changes: Option<usize>,
    /// Bytes on disk (allocated blocks, as `du` counts).
    pub(crate) bytes: u64,
    /// When anything in it last changed, seconds since the epoch.
    pub(crate) modified: Option<u64>,
    /// Removed by this `--prune`.
    pub(crate) pruned: bool,
    /// What went wrong looking at it, or why `--prune` kept it.
    pub(crate) note: Option<String>,
}

pub(crate) fn stages(a: &StagesArgs) -> Result<u8, Failure> {
    let root = match &a.dir {
        Some(d) => d.clone(),
        None => dir::check_state_dir()
            .map_err(|e| Failure::new(1, e.to_string()))?
            .join("stages"),
    };
    let mut rows = Vec::new();
    let mut failed = false;
    if let Some(top) = open_root(&root)? {
        for name in stage_dirs(&top)? {
            let (row, ok) = look(&top, &name, a.prune);
            failed |= !ok;
            rows.push(row);
        }
    }
    let out = if a.json {
        format!(
            "{}\n",
            text::json_pretty(&rows).map_err(|e| Failure::new(1, e.to_string()))?
        )
    } else if a.prune {
        render_pruned(&rows)
    } else {
        render(&root, &rows)
    };
    print!("{out}");
    Ok(u8::from(failed))
}

/// The dir of stage dirs, opened once: `shown` is the path as given (the
/// rows name each stage under it), `canon` its canonical path and `fd` the
/// directory itself, opened without following a symlink. It must be this
/// user's, writable by nobody else, under directories only root or this
/// user may change (see [`dir::check_dir`]): then nobody else can swap it
/// or a stage in it while it is looked at, and every removal is made
/// relative to `fd`.
struct Root {
    shown: PathBuf,
    canon: PathBuf,
    fd: rustix::fd::OwnedFd,
}

/// `root` opened as [`Root`] says; None when it does not exist.
fn open_root(root: &Path) -> Result<Option<Root>, Failure> {
    use rustix::fs::{Mode, OFlags};
    if std::fs::symlink_metadata(root).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
        return Ok(None);
    }
    let canon = dir::check_dir(root, "the stages dir")
        .map_err(|e| Failure::new(1, text::message(&e.to_string())))?;
    let fd = rustix::fs::open(
        &canon,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| Failure::new(1, format!("cannot read {}: {e}", text::path(root))))?;
    let st = rustix::fs::fstat(&fd)
        .map_err(|e| Failure::new(1, format!("cannot read {}: {e}", text::path(root))))?;
    let seen = rustix::fs::lstat(&canon).ok();
    if let Some(why) = dir::unfit(&st, rustix::process::geteuid().as_raw()).or_else(|| {
        (seen.map(|s| (s.st_dev, s.st_ino)) != Some((st.st_dev, st.st_ino)))
            .then(|| "changed while it was checked".to_owned())
    }) {
        return Err(Failure::new(
            1,
            format!("the stages dir {} {why}", text::path(root)),
        ));
    }
    Ok(Some(Root {
        shown: root.to_path_buf(),
        canon,
        fd,
    }))
}

/// The stage dirs directly under `root`, by name, sorted: directories
/// that hold a manifest, so that nothing else in a DIR given by mistake
/// is looked at, let alone pruned. A symlink is not followed; dot-names
/// are not stages.
fn stage_dirs(root: &Root) -> Result<Vec<std::ffi::OsString>, Failure> {
    use rustix::fs::{AtFlags, FileType, Mode, OFlags};
    let fail = |e: rustix::io::Errno| {
        Failure::new(1, format!("cannot read {}: {e}", text::path(&root.shown)))
    };
    let fd = rustix::fs::openat(
        &root.fd,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(fail)?;
    let mut dirs = Vec::new();
    for e in rustix::fs::Dir::read_from(&fd).map_err(fail)? {
        let e = e.map_err(fail)?;
        let name = std::ffi::OsStr::from_bytes(e.file_name().to_bytes()).to_os_string();
        if name.as_encoded_bytes().starts_with(b".") {
            continue;
        }
        let is_dir = rustix::fs::statat(&root.fd, &name, AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory);
        let manifest = Path::new(&name).join(dir::MANIFEST);
        let has_manifest = is_dir
            && rustix::fs::statat(&root.fd, &manifest, AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::RegularFile);
        if has_manifest {
            dirs.push(name);
        }
    }
    dirs.sort();
    Ok(dirs)
}

/// One stage dir, `name` in `root`, looked at (and removed when `prune`
/// and nothing keeps it); false when a removal failed.
fn look(root: &Root, name: &std::ffi::OsStr, prune: bool) -> (StageRow, bool) {
    let shown = root.shown.join(name);
    let path = &root.canon.join(name);
    let manifest = dir::read_manifest(path);
    let (bytes, modified) = usage(path);
    let mut row = StageRow {
        path: shown,
        mountpoint: manifest.as_ref().ok().map(|m| m.mountpoint.clone()),
        in_use: false,
        pid: None,
        changes: None,
        bytes,
        modified,
        pruned: false,
        note: None,
    };
    // Held by a mount? Taking the lock says; it is let go at once and
    // taken again, with the zones read, to count the changes.
    match dir::hold(path, Path::new("")) {
        Err(StageError::InUse { .. }) => {
            row.in_use = true;
            row.pid = holder(path);
            row.changes = row
                .mountpoint
                .as_deref()
                .and_then(|mp| live_changes(mp, path));
            if prune {
                row.note = Some(match row.pid {
                    Some(pid) => format!("in use by a mount (pid {pid})"),
                    None => "in use by a mount".to_owned(),
                });
            }
            return (row, true);
        }
        Err(e) => {
            row.note = Some(e.to_string());
            return (row, true);
        }
        Ok(held) => drop(held),
    }
    let stage = match OfflineStage::open(path) {
        Ok(s) => s,
        Err(e) => {
            row.note = Some(e);
            return (row, true);
        }
    };
    match stage.changes(&[], false) {
        Ok(report) => row.changes = Some(report.count()),
        Err(e) => {
            row.note = Some(format!("cannot count its changes: {e}"));
            return (row, true);
        }
    }
    if !prune {
        return (row, true);
    }
    if row.changes != Some(0) {
        row.note = Some(format!(
            "keeps {} change(s): commit or discard them first",
            row.changes.unwrap_or_default()
        ));
        return (row, true);
    }
    // Checkpoints are kept too, even where the view is the backing dir's
    // again: each may hold a state the worker had.
    let kept = match stage.checkpoints(&[]) {
        Ok(r) => r.zones.iter().map(|z| z.checkpoints.len()).sum::<usize>(),
        Err(e) => {
            row.note = Some(format!("cannot list its checkpoints: {e}"));
            return (row, true);
        }
    };
    if kept > 0 {
        row.note = Some(format!(
            "keeps {kept} checkpoint(s): discard the stage first to drop them"
        ));
        return (row, true);
    }
    // Moved aside under the lock, then removed: a mount started meanwhile
    // makes a fresh stage at the old name, never one half removed. Both
    // relative to the dir opened at the start, following no symlink.
    let mut aside = std::ffi::OsString::from(".pruning-");
    aside.push(name);
    let removed = rustix::fs::renameat(&root.fd, name, &root.fd, &aside)
        .map_err(std::io::Error::from)
        .and_then(|()| dir::remove_at(root.fd.as_fd(), &aside, &root.canon.join(&aside)));
    drop(stage);
    match removed {
        Ok(()) => {
            row.pruned = true;
            (row, true)
        }
        Err(e) => {
            row.note = Some(format!("could not remove it: {e}"));
            (row, false)
        }
    }
}

/// The pid the lock file names (the daemon writes its own on taking it).
fn holder(stage: &Path) -> Option<u32> {
    String::from_utf8(dir::read_nofollow(&stage.join("lock")).ok()?)
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// How many changes the live mount at `mountpoint` keeps in `stage`,
/// asked over its control socket (`None` when it can't be asked, or it
/// is not that mount's stage).
fn live_changes(mountpoint: &Path, stage: &Path) -> Option<usize> {
    let mut client = super::approvals::connect(mountpoint).ok()?;
    let status = client.status().ok()?;
    let same = status
        .stage_dir
        .as_deref()
        .and_then(|d| d.canonicalize().ok())
        .is_some_and(|d| stage.canonicalize().is_ok_and(|s| s == d));
    if !same {
        return None;
    }
    let report: ChangesReport = client
        .stage(Request::Changes {
            paths: Vec::new(),
            diff: false,
            patch: false,
        })
        .ok()?;
    Some(report.count())
}

/// Bytes on disk under `root` (allocated blocks) and the newest change
/// time of anything in it but its lock file (which taking the lock
/// writes). Nothing is followed; what can't be read is left out.
fn usage(root: &Path) -> (u64, Option<u64>) {
    use rustix::fs::{Mode, OFlags};
    let Ok(top) = rustix::fs::open(
        root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        let md = std::fs::symlink_metadata(root);
        return (
            md.as_ref().map_or(0, |m| m.blocks().saturating_mul(512)),
            md.ok().and_then(|m| u64::try_from(m.mtime()).ok()),
        );
    };
    let mut bytes = 0u64;
    let mut newest: Option<i64> = None;
    if let Ok(st) = rustix::fs::fstat(&top) {
        bytes = u64::try_from(st.st_blocks).unwrap_or(0).saturating_mul(512);
        newest = Some(st.st_mtime);
    }
    // Any depth: a loop, each directory reached from its parent by name.
    let _ = walk::walk::<rustix::io::Errno>(
        top.as_fd(),
        &mut |e| {
            if let Ok(Some(st)) = e.stat() {
                bytes = bytes
                    .saturating_add(u64::try_from(st.st_blocks).unwrap_or(0).saturating_mul(512));
                if e.rel != Path::new("lock") {
                    newest = newest.max(Some(st.st_mtime));
                }
            }
            Ok(walk::Visit::Enter)
        },
        &mut |_, _, _| Ok(()),
    );
    (bytes, newest.and_then(|t| u64::try_from(t).ok()))
}

/// `n` bytes for people: B, KiB, MiB, GiB.
fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = UNITS[0];
    for u in &UNITS[1..] {
        if v < 1024.0 {
            break;
        }
        v /= 1024.0;
        unit = u;
    }
    format!("{v:.1} {unit}")
}

fn time(secs: Option<u64>) -> String {
    secs.map_or_else(
        || "?".to_owned(),
        |s| {
            humantime::format_rfc3339_seconds(
                std::time::UNIX_EPOCH + std::time::Duration::from_secs(s),
            )
            .to_string()
        },
    )
}

fn mountpoint(r: &StageRow) -> String {
    r.mountpoint
        .as_deref()
        .filter(|m| !m.as_os_str().is_empty())
        .map_or_else(|| "?".to_owned(), text::path)
}

/// The table `stages` prints.
pub(crate) fn render(root: &Path, rows: &[StageRow]) -> String {
    if rows.is_empty() {
        return format!("no stage dirs in {}\n", text::path(root));
    }
    let mut table = vec![[
        "STAGE".to_string(),
        "MOUNTPOINT".into(),
        "IN USE".into(),
        "CHANGES".into(),
        "SIZE".into(),
        "MODIFIED".into(),
    ]];
    for r in rows {
        table.push([
            text::path(&r.path),
            mountpoint(r),
            match (r.in_use, r.pid) {
                (true, Some(pid)) => format!("pid {pid}"),
                (true, None) => "yes".into(),
                (false, _) => "no".into(),
            },
            r.changes.map_or_else(|| "?".into(), |n| n.to_string()),
            human_bytes(r.bytes),
            time(r.modified),
        ]);
    }
    let mut out = columns(&table);
    for r in rows.iter().filter(|r| r.note.is_some()) {
        out.push_str(&format!(
            "{}: {}\n",
            text::path(&r.path),
            text::message(r.note.as_deref().unwrap_or_default())
        ));
    }
    out
}

/// What `stages --prune` did, one line per stage dir, then the count.
pub(crate) fn render_pruned(rows: &[StageRow]) -> String {
    let mut out = String::new();
    for r in rows {
        let what = if r.pruned {
            "removed".to_owned()
        } else {
            format!(
                "kept: {}",
                text::message(r.note.as_deref().unwrap_or("not counted"))
            )
        };
        out.push_str(&format!(
            "{} (for {}): {what}\n",
            text::path(&r.path),
            mountpoint(r)
        ));
    }
    let removed = rows.iter().filter(|r| r.pruned).count();
    out.push_str(&format!(
        "removed {removed} of {} stage dir(s)\n",
        rows.len()
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str) -> StageRow {
        StageRow {
            path: PathBuf::from(format!("/s/{name}")),
            mountpoint: Some(PathBuf::from(format!("/tmp/{name}"))),
            in_use: false,
            pid: None,
            changes: Some(0),
            bytes: 8192,
            modified: Some(1_700_000_000),
            pruned: false,
            note: None,
        }
    }

    #[test]
    fn the_table_shows_each_stage() {
        let mut live = row("a");
        live.in_use = true;
        live.pid = Some(42);
        live.changes = Some(3);
        let mut odd = row("b");
        odd.mountpoint = None;
        odd.changes = None;
        odd.note = Some("stage dir /s/b: stage.json: bad".into());
        assert_eq!(
            render(Path::new("/s"), &[live, odd]),
            "STAGE  MOUNTPOINT  IN USE  CHANGES  SIZE     MODIFIED\n\
             /s/a   /tmp/a      pid 42  3        8.0 KiB  2023-11-14T22:13:20Z\n\
             /s/b   ?           no      ?        8.0 KiB  2023-11-14T22:13:20Z\n\
             /s/b: stage dir /s/b: stage.json: bad\n"
        );
        assert_eq!(render(Path::new("/s"), &[]), "no stage dirs in /s\n");
    }

    #[test]
    fn prune_says_what_it_removed_and_why_it_kept_the_rest() {
        let mut gone = row("a");
        gone.pruned = true;
        let mut kept = row("b");
        kept.note = Some("keeps 2 change(s): commit or discard them first".into());
        assert_eq!(
            render_pruned(&[gone, kept]),
            "/s/a (for /tmp/a): removed\n\
             /s/b (for /tmp/b): kept: keeps 2 change(s): commit or discard them first\n\
             removed 1 of 2 stage dir(s)\n"
        );
    }

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(5 * 1024 * 1024 * 1024), "5.0 GiB");
    }
}

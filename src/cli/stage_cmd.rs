//! `changes`, `commit` and `discard`: a staged zone's change report, and
//! applying it to the backing dir or dropping it; `checkpoint`,
//! `checkpoints` and `rewind`: its checkpoints. TARGET is a live mount
//! (asked over its control socket) or a stage dir no mount holds (worked
//! on here, under the stage's lock).

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use clap::Args;
use serde::Serialize;

use super::Failure;
use crate::control::protocol::Request;
use crate::mount;
use crate::stage::report::{
    Change, ChangesReport, CheckpointsReport, CommitReport, DiscardReport, FileType, Kind,
    RewindReport, What,
};
use crate::stage::service::{OfflineStage, Reports, Span};
use crate::stage::{self, dir::MANIFEST};
use crate::text;

/// Exit status of a `commit` that left conflicts (or busy zones) out.
pub const EXIT_CONFLICT: u8 = 6;

#[derive(Debug, Args)]
pub(crate) struct ChangesArgs {
    /// One JSON object: each zone's changes.
    #[arg(long)]
    pub(crate) json: bool,
    /// Add a unified diff of each changed text file.
    #[arg(long, conflicts_with = "patch")]
    pub(crate) diff: bool,
    /// Print the staged changes as one patch in git's extended diff format
    /// (what `git apply` applies to a copy of the backing dir).
    #[arg(long, conflicts_with_all = ["since", "between", "diff"])]
    pub(crate) patch: bool,
    /// What changed since checkpoint ID (its view against the zone now).
    #[arg(long, value_name = "ID", conflicts_with = "between")]
    pub(crate) since: Option<u64>,
    /// What changed from checkpoint A to the later checkpoint B.
    #[arg(long, num_args = 2, value_names = ["A", "B"])]
    pub(crate) between: Option<Vec<u64>>,
    /// A mount's directory, or a stage dir no mount is using.
    pub(crate) target: PathBuf,
    /// Only these paths (and what is under them): in the mount, or as a
    /// worker sees them (/zone/...).
    pub(crate) paths: Vec<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct CheckpointArgs {
    /// One JSON object: the checkpoint's id, and each zone's.
    #[arg(long)]
    pub(crate) json: bool,
    /// A label for it (shown by `checkpoints`).
    #[arg(long, value_name = "TEXT")]
    pub(crate) label: Option<String>,
    /// A mount's directory (every staged zone), or a staged zone's dir in
    /// it (that zone).
    pub(crate) target: PathBuf,
}

#[derive(Debug, Args)]
pub(crate) struct CheckpointsArgs {
    /// One JSON object: each zone's checkpoints.
    #[arg(long)]
    pub(crate) json: bool,
    /// A mount's directory, a staged zone's dir in it, or a stage dir no
    /// mount is using.
    pub(crate) target: PathBuf,
}

#[derive(Debug, Args)]
pub(crate) struct RewindArgs {
    /// One JSON object: what each zone now shows, and the checkpoints
    /// dropped.
    #[arg(long)]
    pub(crate) json: bool,
    /// A mount's directory, a staged zone's dir in it, or a stage dir no
    /// mount is using (whole zones only).
    pub(crate) target: PathBuf,
    /// The checkpoint (`zonemount checkpoints` lists them).
    pub(crate) id: u64,
    /// Only these paths (and what is under them): the rest, and the
    /// checkpoints, are kept.
    pub(crate) paths: Vec<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct CommitArgs {
    /// One JSON object: what was applied, and each conflict.
    #[arg(long)]
    pub(crate) json: bool,
    /// Apply conflicts too: the host's change is overwritten, and what
    /// the host made in the way (a file where the stage has a dir, files
    /// in a dir the worker deleted) is removed.
    #[arg(long)]
    pub(crate) force: bool,
    /// Apply the state at checkpoint ID, not the zone now (the zone's
    /// view does not change; the checkpoints before ID are dropped).
    #[arg(long, value_name = "ID")]
    pub(crate) upto: Option<u64>,
    /// A mount's directory, or a stage dir no mount is using.
    pub(crate) target: PathBuf,
    /// Only these paths (and what is under them).
    pub(crate) paths: Vec<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct DiscardArgs {
    /// One JSON object: what was dropped.
    #[arg(long)]
    pub(crate) json: bool,
    /// A mount's directory, or a stage dir no mount is using.
    pub(crate) target: PathBuf,
    /// Only these paths (and what is under them).
    pub(crate) paths: Vec<PathBuf>,
}

/// Where the operation runs: a live mount, asked over its control
/// socket, or a stage dir no mount holds, locked and worked on here.
pub(crate) enum Target {
    Mount(crate::control::Client),
    Stage(OfflineStage),
}

pub(crate) fn changes(a: &ChangesArgs) -> Result<u8, Failure> {
    let span = match (a.since, a.between.as_deref()) {
        (Some(id), _) => Span {
            from: Some(id),
            to: None,
        },
        (None, Some([x, y])) => Span {
            from: Some(*x),
            to: Some(*y),
        },
        _ => Span::default(),
    };
    let (target, paths) = open(
        "changes",
        &a.target,
        &a.paths,
        a.patch || span != Span::default(),
    )?;
    let report: ChangesReport = match target {
        Target::Mount(mut c) if span == Span::default() => c
            .stage(Request::Changes {
                paths,
                diff: a.diff,
                patch: a.patch,
            })
            .map_err(refused)?,
        Target::Mount(mut c) => c
            .stage(Request::ChangesIn {
                paths,
                diff: a.diff,
                span,
            })
            .map_err(refused)?,
        Target::Stage(s) if a.patch => s.patch(&paths).map_err(offline)?,
        Target::Stage(s) => s.changes_in(&paths, a.diff, span).map_err(offline)?,
    };
    if a.patch && !a.json {
        return patch_out(&a.target, &report);
    }
    show(a.json, &report, render_changes)?;
    Ok(0)
}

/// `changes --patch`: the staged zone's patch on stdout, exact (escaped
/// as every human view only when stdout is a terminal); on stderr, what
/// the patch can't carry. A patch's paths are relative to one zone's
/// dir: with several staged zones, one must be named.
fn patch_out(target: &Path, report: &ChangesReport) -> Result<u8, Failure> {
    let staged: Vec<_> = report.zones.iter().filter(|z| z.staged).collect();
    let [zone] = staged[..] else {
        let names: Vec<String> = staged.iter().map(|z| format!("/{}", z.zone)).collect();
        return Err(Failure::new(
            2,
            format!(
                "changes --patch: {} staged zones ({}); a patch's paths are relative to one zone's dir: name one, e.g. `zonemount changes --patch {} {}`",
                staged.len(),
                names.join(", "),
                text::path(target),
                names.first().map_or("/ZONE", String::as_str)
            ),
        ));
    };
    for z in report
        .zones
        .iter()
        .filter(|z| !z.staged && !z.changes.is_empty())
    {
        eprintln!(
            "zonemount: changes --patch: /{} is not staged: its {} change(s) are in its backing dir already, not in the patch",
            z.zone,
            z.changes.len()
        );
    }
    for c in &zone.changes {
        if let Some(why) = not_in_patch(c, &zone.changes) {
            eprintln!(
                "zonemount: changes --patch: /{}/{}: not in the patch: {why}",
                zone.zone,
                name(&c.path)
            );
        }
    }
    let p = zone.patch.as_deref().unwrap_or_default();
    let mut out = std::io::stdout().lock();
    let shown = if out.is_terminal() {
        std::borrow::Cow::Owned(text::message(p))
    } else {
        std::borrow::Cow::Borrowed(p)
    };
    out.write_all(shown.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| Failure::new(1, format!("cannot write to stdout: {e}")))?;
    Ok(0)
}

/// What of change `c` git's format can't carry, if anything: special
/// files, a directory with nothing in the patch below it, owners,
/// xattrs, mode bits beyond the owner's execute bit (times are not
/// reported: every change moves them).
fn not_in_patch(c: &Change, all: &[Change]) -> Option<String> {
    let mut lost = Vec::new();
    match c.file_type {
        Some(FileType::Special) => lost.push("a special file".to_owned()),
        Some(FileType::Dir) if c.kind == Kind::Added => {
            let below = all.iter().any(|o| {
                o.path != c.path
                    && o.path.starts_with(&c.path)
                    && matches!(o.file_type, Some(FileType::File | FileType::Symlink))
            });
            if !below {
                lost.push("an empty directory".to_owned());
            }
        }
        _ => {}
    }
    // A change of type is a deletion and a creation in the patch.
    if (c.kind == Kind::Modified || c.kind == Kind::Renamed) && !c.what.contains(&What::Type) {
        if let (Some(a), Some(b)) = (c.old_mode, c.mode) {
            // `git apply` makes a file 0644 or 0755 (less the umask).
            let kept = c.file_type == Some(FileType::File)
                && (a ^ b) & 0o100 != 0
                && (b == 0o644 || b == 0o755);
            if a != b && !kept {
                lost.push(format!(
                    "mode {a:04o} -> {b:04o} (git keeps only a file's execute bit)"
                ));
            }
        }
        for (w, what) in [(What::Owner, "its owner"), (What::Xattrs, "its xattrs")] {
            if c.what.contains(&w) {
                lost.push(what.to_owned());
            }
        }
    }
    (!lost.is_empty()).then(|| lost.join(", "))
}

pub(crate) fn commit(a: &CommitArgs) -> Result<u8, Failure> {
    let (target, paths) = open("commit", &a.target, &a.paths, true)?;
    let report: CommitReport = match (target, a.upto) {
        (Target::Mount(mut c), None) => c
            .stage(Request::Commit {
                paths,
                force: a.force,
            })
            .map_err(refused)?,
        (Target::Mount(mut c), Some(upto)) => c
            .stage(Request::CommitUpto {
                paths,
                force: a.force,
                upto,
            })
            .map_err(refused)?,
        (Target::Stage(s), upto) => s.commit_upto(&paths, a.force, upto).map_err(offline)?,
    };
    show(a.json, &report, render_commit)?;
    Ok(if report.conflicts() > 0 {
        EXIT_CONFLICT
    } else {
        0
    })
}

pub(crate) fn discard(a: &DiscardArgs) -> Result<u8, Failure> {
    let (target, paths) = open("discard", &a.target, &a.paths, true)?;
    let report: DiscardReport = match target {
        Target::Mount(mut c) => c.stage(Request::Discard { paths }).map_err(refused)?,
        Target::Stage(s) => s.discard(&paths).map_err(offline)?,
    };
    show(a.json, &report, render_discard)?;
    Ok(if report.conflicts() > 0 {
        EXIT_CONFLICT
    } else {
        0
    })
}

pub(crate) fn checkpoint(a: &CheckpointArgs) -> Result<u8, Failure> {
    let (target, zone) = locate(&a.target)?;
    let (target, paths) = open("checkpoint", &target, &zone, true)?;
    let report: CheckpointsReport = match target {
        Target::Mount(mut c) => c
            .stage(Request::Checkpoint {
                paths,
                label: a.label.clone(),
            })
            .map_err(refused)?,
        Target::Stage(_) => {
            return Err(Failure::new(
                2,
                format!(
                    "{}: a checkpoint is taken of a live mount: give its mountpoint",
                    a.target.display()
                ),
            ));
        }
    };
    if a.json {
        show(true, &report, render_checkpoint)?;
    } else {
        // What was taken, for people, on stderr; the id alone on stdout,
        // for `id=$(zonemount checkpoint ...)`.
        eprint!("{}", render_checkpoint(&report));
        if let Some(id) = report.id {
            println!("{id}");
        }
    }
    Ok(0)
}

pub(crate) fn checkpoints(a: &CheckpointsArgs) -> Result<u8, Failure> {
    let (target, zone) = locate(&a.target)?;
    let (target, paths) = open("checkpoints", &target, &zone, true)?;
    let report: CheckpointsReport = match target {
        Target::Mount(mut c) => c.stage(Request::Checkpoints { paths }).map_err(refused)?,
        Target::Stage(s) => s.checkpoints(&paths).map_err(offline)?,
    };
    show(a.json, &report, render_checkpoints)?;
    Ok(0)
}

pub(crate) fn rewind(a: &RewindArgs) -> Result<u8, Failure> {
    let (target, zone) = locate(&a.target)?;
    let given: Vec<PathBuf> = zone.into_iter().chain(a.paths.iter().cloned()).collect();
    let (target, paths) = open("rewind", &target, &given, true)?;
    let report: RewindReport = match target {
        Target::Mount(mut c) => c
            .stage(Request::Rewind { id: a.id, paths })
            .map_err(refused)?,
        Target::Stage(s) => s.rewind(a.id, &paths).map_err(offline)?,
    };
    show(a.json, &report, render_rewind)?;
    Ok(if report.left_alone() > 0 {
        EXIT_CONFLICT
    } else {
        0
    })
}

/// TARGET as given: a mount or a stage dir, or a dir inside a live mount
/// (its mount, and the dir as a path in it).
fn locate(t: &Path) -> Result<(PathBuf, Vec<PathBuf>), Failure> {
    if t.join(MANIFEST).is_file() {
        return Ok((t.to_path_buf(), Vec::new()));
    }
    let abs = mount::absolute(t);
    if mount::find_record(&abs).is_some() {
        return Ok((t.to_path_buf(), Vec::new()));
    }
    for up in abs.ancestors().skip(1) {
        if mount::find_record(up).is_some() {
            return Ok((up.to_path_buf(), vec![abs.clone()]));
        }
    }
    Ok((t.to_path_buf(), Vec::new()))
}

fn refused(e: crate::control::ClientError) -> Failure {
    Failure::new(1, e.to_string())
}

fn offline(e: String) -> Failure {
    Failure::new(1, e)
}

/// The mount or stage dir `t`, and the worker-form paths of `paths` there
/// (a path outside the mount refused in the name of `cmd`).
pub(crate) fn open(
    cmd: &str,
    t: &Path,
    paths: &[PathBuf],
    needs_stage: bool,
) -> Result<(Target, Vec<PathBuf>), Failure> {
    if !t.join(MANIFEST).is_file() {
        let mp = mount::absolute(t);
        let mut client = super::approvals::connect(t)?;
        let status = client.status().map_err(refused)?;
        if needs_stage && status.stage_dir.is_none() {
            return Err(Failure::new(
                2,
                format!(
                    "{} has no staged zone: nothing is staged there (a zone is staged with 'staged: true')",
                    mp.display()
                ),
            ));
        }
        let zones: Vec<&str> = status.zones.iter().map(|z| z.name.as_str()).collect();
        let cwd = super::cwd()?;
        let paths = paths
            .iter()
            .map(|p| worker_form(cmd, &mp, t, p, &cwd, &zones))
            .collect::<Result<Vec<_>, _>>()?;
        return Ok((Target::Mount(client), paths));
    }
    let dir = mount::absolute(t);
    let manifest = stage::dir::read_manifest(&dir).map_err(|e| Failure::new(1, e.to_string()))?;
    let zones: Vec<&str> = manifest.zones.keys().map(String::as_str).collect();
    let paths = paths
        .iter()
        .map(|p| {
            let first = p.components().nth(1).and_then(|c| c.as_os_str().to_str());
            if p.is_absolute() && first.is_some_and(|f| zones.contains(&f)) {
                Ok(p.clone())
            } else {
                Err(Failure::new(
                    2,
                    format!(
                        "{}: on a stage dir, give paths as a worker sees them: {}",
                        text::path(p),
                        zones
                            .iter()
                            .map(|z| format!("/{z}/..."))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ))
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((
        Target::Stage(OfflineStage::open(&dir).map_err(offline)?),
        paths,
    ))
}

/// `p` (in the mount, or `/zone/...`) as the worker sees it, exact.
fn worker_form(
    cmd: &str,
    mp: &Path,
    given: &Path,
    p: &Path,
    cwd: &Path,
    zones: &[&str],
) -> Result<PathBuf, Failure> {
    let comps = super::check::worker_path(cmd, mp, given, p, cwd, zones)?;
    Ok(std::iter::once(std::ffi::OsStr::new("/"))
        .chain(comps.iter().map(|c| c.as_os_str()))
        .collect())
}

fn show<T: Serialize>(json: bool, report: &T, render: fn(&T) -> String) -> Result<(), Failure> {
    let text = if json {
        // Through a `Value`: its keys in alphabetical order, as the
        // control socket writes them.
        let v = serde_json::to_value(report).map_err(|e| Failure::new(1, e.to_string()))?;
        format!("{}\n", text::json_pretty(&v).unwrap_or_default())
    } else {
        render(report)
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| Failure::new(1, format!("cannot write to stdout: {e}")))
}

/// One letter per kind of change, as `git status --short` writes them.
fn letter(kind: Kind) -> &'static str {
    match kind {
        Kind::Added => "A",
        Kind::Modified => "M",
        Kind::Deleted => "D",
        Kind::Renamed => "R",
    }
}

/// A name for people: escaped ([`text::escape`]).
fn name(p: &Path) -> String {
    text::path(p)
}

/// One change for people: `M  /work/src/a.rs  (0644, 120 → 130 bytes)  by
/// sed -i s/a/b/ a.rs` (the last change's command, escaped).
pub(crate) fn change_line(zone: &str, c: &Change) -> String {
    let path = format!("/{zone}/{}", name(&c.path));
    let mut line = format!("{}  {path}", letter(c.kind));
    if let Some(from) = &c.from {
        line = format!("{}  /{zone}/{} -> {path}", letter(c.kind), name(from));
    }
    let mut facts = Vec::new();
    if let Some(t) = c.file_type {
        if t != FileType::File {
            facts.push(t.as_str().to_owned());
        }
    }
    if let Some(m) = c.mode {
        facts.push(format!("{:04o}", m & 0o7777));
    }
    match (c.old_size, c.size) {
        (Some(a), Some(b)) if a != b => facts.push(format!("{a} -> {b} bytes")),
        (_, Some(b)) => facts.push(format!("{b} bytes")),
        _ => {}
    }
    if c.what.contains(&What::Type) {
        // What the path was: a dir's whole tree goes with it.
        facts.push(match c.entries {
            Some(n) => format!("replaces a dir of {n} entries"),
            None => "type changed".to_owned(),
        });
    } else if let Some(n) = c.entries {
        facts.push(format!("{n} entries"));
    }
    // Changed along with (or instead of) the content: `--diff` says how.
    if c.what.contains(&What::Owner) {
        facts.push("owner changed".to_owned());
    }
    if c.what.contains(&What::Xattrs) {
        facts.push("xattrs changed".to_owned());
    }
    if !facts.is_empty() {
        line.push_str(&format!("  ({})", facts.join(", ")));
    }
    // Who made the last change: a worker's argv, escaped like its names.
    if let Some(by) = &c.last {
        line.push_str("  by ");
        line.push_str(&by.shown());
    }
    line
}

/// The change list; with `--diff`, the diffs after it (so no summary
/// line stands between one diff's hunks and the next).
pub(crate) fn render_changes(report: &ChangesReport) -> String {
    let mut out = String::new();
    let mut diffs = String::new();
    for z in &report.zones {
        for c in &z.changes {
            out.push_str(&change_line(&z.zone, c));
            out.push('\n');
            if let Some(d) = c.diff.as_deref().filter(|d| !d.is_empty()) {
                // The worker's file content: nothing in it may draw on
                // the terminal either (backslashes are left as they are).
                let d = text::message(d);
                diffs.push_str(&d);
                if !d.ends_with('\n') {
                    diffs.push('\n');
                }
            }
        }
    }
    if report.count() == 0 {
        out.push_str("no changes\n");
    }
    if !diffs.is_empty() {
        out.push('\n');
        out.push_str(&diffs);
    }
    out
}

fn render_commit(report: &CommitReport) -> String {
    let mut out = String::new();
    let (mut applied, mut refused) = (0, 0);
    for z in &report.zones {
        let zone = &z.zone;
        for c in &z.applied {
            applied += 1;
            out.push_str(&format!("committed {}\n", change_line(zone, c)));
        }
        for c in &z.conflicts {
            refused += 1;
            let at =
                c.at.as_deref()
                    .map(|at| format!(" (/{zone}/{})", name(at)))
                    .unwrap_or_default();
            out.push_str(&format!(
                "conflict  /{zone}/{}: {}{at}\n",
                name(&c.path),
                text::message(&c.why)
            ));
        }
    }
    out.push_str(&format!("{applied} committed"));
    // A zone with files open for writing (a conflict of the whole zone) is
    // left as it is even with --force: only the host's changes give way.
    let busy = report
        .zones
        .iter()
        .flat_map(|z| &z.conflicts)
        .filter(|c| c.path.as_os_str().is_empty())
        .count();
    match (refused - busy, busy) {
        (0, 0) => {}
        (_, 0) => out.push_str(&format!(
            ", {refused} not (left in the stage; --force applies them anyway)"
        )),
        (0, _) => out.push_str(&format!(
            ", {refused} not (left in the stage until its files are closed; --force does not change that)"
        )),
        (host, _) => out.push_str(&format!(
            ", {refused} not (left in the stage; --force applies the {host} the host changed, not a zone whose files are open for writing)"
        )),
    }
    out.push('\n');
    out
}

fn render_discard(report: &DiscardReport) -> String {
    let mut out = String::new();
    let mut n = 0;
    for z in &report.zones {
        for c in &z.discarded {
            n += 1;
            out.push_str(&format!("discarded {}\n", change_line(&z.zone, c)));
        }
        for c in z.conflicts.iter().flatten() {
            out.push_str(&format!(
                "left alone /{}: {}\n",
                z.zone,
                text::message(&c.why)
            ));
        }
    }
    out.push_str(&format!("{n} discarded\n"));
    out
}

fn render_checkpoint(report: &CheckpointsReport) -> String {
    let mut out = String::new();
    for z in &report.zones {
        for c in &z.checkpoints {
            out.push_str(&format!("checkpoint {}  /{}  {}\n", c.id, z.zone, c.time));
        }
    }
    out
}

fn render_checkpoints(report: &CheckpointsReport) -> String {
    let mut out = String::new();
    for z in &report.zones {
        out.push_str(&format!("/{}\n", z.zone));
        if z.checkpoints.is_empty() {
            out.push_str("  no checkpoints\n");
        }
        for c in &z.checkpoints {
            out.push_str(&format!(
                "  {:>4}  {}  {:>6} paths{}\n",
                c.id,
                c.time,
                c.paths.unwrap_or(0),
                c.label
                    .as_deref()
                    .map(|l| format!("  {}", text::escape(l.as_bytes())))
                    .unwrap_or_default()
            ));
        }
    }
    out
}

fn render_rewind(report: &RewindReport) -> String {
    let mut out = String::new();
    for z in &report.zones {
        if let Some(why) = &z.left_alone {
            out.push_str(&format!("left alone /{}: {}\n", z.zone, text::message(why)));
            continue;
        }
        for p in &z.unchanged {
            out.push_str(&format!(
                "unchanged since checkpoint {}: /{}/{}\n",
                z.to,
                z.zone,
                name(p)
            ));
        }
        if z.paths.is_empty() && z.unchanged.is_empty() {
            out.push_str(&format!("rewound /{} to checkpoint {}", z.zone, z.to));
            if !z.dropped.is_empty() {
                let ids: Vec<String> = z.dropped.iter().map(u64::to_string).collect();
                out.push_str(&format!(" (dropped checkpoints {})", ids.join(", ")));
            }
            out.push('\n');
        } else {
            for p in &z.paths {
                out.push_str(&format!(
                    "rewound /{}/{} to checkpoint {}\n",
                    z.zone,
                    name(p),
                    z.to
                ));
            }
        }
    }
    out
}

/// The arguments a user would type for `cmd` on a stage dir.
pub(crate) fn finish_line(cmd: &str, dir: &Path) -> String {
    let quoted = shlex::try_quote(&dir.to_string_lossy())
        .map(|q| q.into_owned())
        .unwrap_or_else(|_| dir.display().to_string());
    format!("zonemount {cmd} {quoted}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stage::report::{Conflict, ZoneCommit};

    fn host_conflict(p: &str) -> Conflict {
        Conflict {
            path: PathBuf::from(p),
            why: "the host changed it after the worker did".into(),
            at: None,
        }
    }

    /// `--force` gives way to the host's changes only: the summary says
    /// so when a zone was left alone for its files open for writing.
    #[test]
    fn the_summary_says_what_force_would_apply() {
        let report = |zones| render_commit(&CommitReport { zones });
        let host = ZoneCommit {
            zone: "w".into(),
            applied: Vec::new(),
            conflicts: vec![host_conflict("a")],
            discarded: None,
        };
        assert!(
            report(vec![host.clone()])
                .ends_with("0 committed, 1 not (left in the stage; --force applies them anyway)\n")
        );
        let busy = ZoneCommit::left_alone("v", 2);
        assert!(report(vec![busy.clone()]).ends_with(
            "0 committed, 1 not (left in the stage until its files are closed; --force does not change that)\n"
        ));
        assert!(report(vec![host, busy]).ends_with(
            "0 committed, 2 not (left in the stage; --force applies the 1 the host changed, not a zone whose files are open for writing)\n"
        ));
    }
}

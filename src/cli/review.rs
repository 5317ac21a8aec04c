//! `zonemount review TARGET` and `run --review`: the staged changes, walked
//! like `git add -p`. Each file (or a directory's changes at once) is
//! shown as its summary line and decided: commit, discard or keep, after
//! a look at its diff if wanted; or all the rest at once. A decision is
//! applied as it is made, with the same per-path operation as `commit
//! TARGET PATH` / `discard TARGET PATH` (so the same refusals: the
//! worker's side may not decide), and the list is read again after it.
//! Without a terminal on stdin nothing is decided: the commands to run
//! are printed.

use std::collections::BTreeSet;
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};

use clap::Args;

use super::Failure;
use super::stage_cmd::{self, EXIT_CONFLICT, Target};
use crate::control::protocol::Request;
use crate::stage::report::{
    Change, ChangesReport, CheckpointsReport, CommitReport, DiscardReport, FileType, RewindReport,
};
use crate::stage::service::{Reports, Span};
use crate::text;

#[derive(Debug, Args)]
pub(crate) struct ReviewArgs {
    /// A mount's directory, or a stage dir no mount is using.
    pub(crate) target: PathBuf,
}

/// `zonemount review TARGET`.
pub(crate) fn review(a: &ReviewArgs) -> Result<u8, Failure> {
    let (target, _) = stage_cmd::open("review", &a.target, &[], true)?;
    let mut stage = Stage {
        target,
        who: "review",
    };
    let changes = stage.changes(&[], false).map_err(|e| Failure::new(1, e))?;
    let mut err = std::io::stderr().lock();
    if changes.count() == 0 {
        let _ = writeln!(err, "no changes");
        return Ok(0);
    }
    let _ = write!(err, "{}", stage_cmd::render_changes(&changes));
    if !std::io::stdin().is_terminal() {
        let _ = writeln!(
            err,
            "zonemount: review: stdin is not a terminal: nothing decided; review and finish with:\n  {}\n  {}\n  {}\n  {}",
            stage_cmd::finish_line("changes --diff", &a.target),
            stage_cmd::finish_line("commit", &a.target),
            stage_cmd::finish_line("discard", &a.target),
            stage_cmd::finish_line("review", &a.target),
        );
        return Ok(0);
    }
    drop(err);
    let mut input = std::io::stdin().lock();
    let outcome = walk(&mut stage, &mut input);
    Ok(outcome.code.unwrap_or(0))
}

/// What a walk did: its exit status (`None`: fine; 6: a commit left
/// conflicts; 1: an operation failed or was refused) and whether the
/// stage still holds changes.
pub(crate) struct Outcome {
    pub(crate) code: Option<u8>,
    pub(crate) left: bool,
}

/// A staged zone's operations, over the control socket or on a stage dir.
pub(crate) struct Stage {
    target: Target,
    /// The command's name in messages (`review`, `run`).
    who: &'static str,
}

impl Stage {
    /// A live mount's stage, reached over its control socket.
    pub(crate) fn mount(client: crate::control::Client, who: &'static str) -> Stage {
        Stage {
            target: Target::Mount(client),
            who,
        }
    }

    fn changes(&mut self, paths: &[PathBuf], diff: bool) -> Result<ChangesReport, String> {
        match &mut self.target {
            Target::Mount(c) => c
                .stage(Request::Changes {
                    paths: paths.to_vec(),
                    diff,
                    patch: false,
                })
                .map_err(|e| e.to_string()),
            Target::Stage(s) => s.changes_in(paths, diff, Span::default()),
        }
    }

    fn commit(&mut self, paths: &[PathBuf]) -> Result<CommitReport, String> {
        match &mut self.target {
            Target::Mount(c) => c
                .stage(Request::Commit {
                    paths: paths.to_vec(),
                    force: false,
                })
                .map_err(|e| e.to_string()),
            Target::Stage(s) => s.commit_upto(paths, false, None),
        }
    }

    fn discard(&mut self, paths: &[PathBuf]) -> Result<DiscardReport, String> {
        match &mut self.target {
            Target::Mount(c) => c
                .stage(Request::Discard {
                    paths: paths.to_vec(),
                })
                .map_err(|e| e.to_string()),
            Target::Stage(s) => s.discard(paths),
        }
    }

    fn checkpoints(&mut self) -> Vec<u64> {
        let r: Result<CheckpointsReport, String> = match &mut self.target {
            Target::Mount(c) => c
                .stage(Request::Checkpoints { paths: Vec::new() })
                .map_err(|e| e.to_string()),
            Target::Stage(s) => s.checkpoints(&[]),
        };
        let mut ids: Vec<u64> = r
            .map(|r| {
                r.zones
                    .iter()
                    .flat_map(|z| z.checkpoints.iter().map(|c| c.id))
                    .collect()
            })
            .unwrap_or_default();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    fn rewind(&mut self, id: u64) -> Result<RewindReport, String> {
        match &mut self.target {
            Target::Mount(c) => c
                .stage(Request::Rewind {
                    id,
                    paths: Vec::new(),
                })
                .map_err(|e| e.to_string()),
            Target::Stage(s) => s.rewind(id, &[]),
        }
    }
}

/// One staged change, as the walk sees it: its path as a worker names
/// it (`/zone/...`), its summary line, and the whole change record (sizes,
/// modes, who made its last change and when), to tell whether it is
/// still what was shown.
struct Item {
    path: PathBuf,
    line: String,
    dir: bool,
    record: String,
}

/// The staged zones' changes, in path order.
fn items(report: &ChangesReport) -> Vec<Item> {
    let mut out: Vec<Item> = report
        .zones
        .iter()
        .filter(|z| z.staged)
        .flat_map(|z| {
            z.changes.iter().map(move |c: &Change| Item {
                path: Path::new("/").join(&z.zone).join(&c.path),
                line: stage_cmd::change_line(&z.zone, c),
                dir: c.file_type == Some(FileType::Dir),
                record: serde_json::to_string(c).unwrap_or_default(),
            })
        })
        .collect();
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

const HELP: &str = "\
c - commit it (the same as `zonemount commit TARGET PATH`)
d - discard it (the stage drops it; the view shows the backing dir's again)
k - keep it in the stage, undecided
v - view its diff (`changes --diff TARGET PATH`; through $PAGER on a terminal)
o - one by one: decide this directory's changes each (on a directory)
C - commit all the rest
D - discard all the rest
K - keep all the rest (the same as q)
r - rewind the stage to a checkpoint, then go on (when it has checkpoints)
q - quit: keep the rest
? - this help
";

/// Walk the changes, deciding each as the answers in `input` say.
pub(crate) fn walk(stage: &mut Stage, input: &mut dyn BufRead) -> Outcome {
    let who = stage.who;
    let mut kept: BTreeSet<PathBuf> = BTreeSet::new();
    // A dir's own change, kept while what is under it is decided one by one.
    let mut only: BTreeSet<PathBuf> = BTreeSet::new();
    let mut opened: BTreeSet<PathBuf> = BTreeSet::new();
    let (mut committed, mut discarded) = (Vec::<String>::new(), Vec::<String>::new());
    let mut code = None;
    'walk: loop {
        let report = match stage.changes(&[], false) {
            Ok(r) => r,
            Err(e) => {
                eprintln!(
                    "zonemount: {who}: cannot list the staged changes: {}",
                    text::message(&e)
                );
                code = Some(1);
                break;
            }
        };
        let all = items(&report);
        let rest: Vec<&Item> = all
            .iter()
            .filter(|i| !only.contains(&i.path) && !kept.iter().any(|k| i.path.starts_with(k)))
            .collect();
        let Some(first) = rest.first() else { break };
        // What is asked about: a directory's changes at once (a changed
        // dir with changes under it, or a dir two changes or more are in),
        // or one change.
        let under = |d: &Path| rest.iter().filter(|i| i.path.starts_with(d)).count();
        let group: Option<PathBuf> =
            if first.dir && !opened.contains(&first.path) && under(&first.path) > 1 {
                Some(first.path.clone())
            } else {
                first
                    .path
                    .ancestors()
                    .skip(1)
                    .filter(|d| d.components().count() > 2)
                    .filter(|d| !opened.contains(*d) && under(d) > 1)
                    .last()
                    .map(Path::to_path_buf)
            };
        let subject = group.clone().unwrap_or_else(|| first.path.clone());
        let checkpoints = stage.checkpoints();
        if let Some(d) = &group {
            eprintln!(
                "{}/  ({} changes)",
                text::path(d),
                rest.iter().filter(|i| i.path.starts_with(d)).count()
            );
            for i in rest.iter().filter(|i| i.path.starts_with(d)) {
                eprintln!("  {}", i.line);
            }
        } else {
            eprintln!("{}", first.line);
        }
        let answer = loop {
            let keys = if checkpoints.is_empty() { "" } else { ",r" };
            let one = if group.is_some() { ",o" } else { "" };
            if group.is_some() {
                eprint!("Decide the whole directory [c,d,k,v{one},C,D,K{keys},q,?]? ");
            } else {
                eprint!("Decide [c,d,k,v,C,D,K{keys},q,?]? ");
            }
            let _ = std::io::stderr().flush();
            let mut line = String::new();
            if input.read_line(&mut line).unwrap_or(0) == 0 {
                eprintln!();
                break 'walk;
            }
            let a = line.trim().to_owned();
            match a.as_str() {
                "v" => view(stage, &subject),
                "?" => eprint!("{HELP}"),
                "o" if group.is_some() => break a,
                "r" if !checkpoints.is_empty() => break a,
                "c" | "d" | "k" | "C" | "D" | "K" | "q" => break a,
                _ => eprint!("{HELP}"),
            }
        };
        let rest_paths = || -> Vec<PathBuf> { rest.iter().map(|i| i.path.clone()).collect() };
        // A commit applies what was shown or nothing: on a live mount the
        // worker may change a path (or add one in a directory) while the
        // reviewer looks.
        let decided: Vec<PathBuf> = match answer.as_str() {
            "c" => vec![subject.clone()],
            "C" => top(rest_paths()),
            _ => Vec::new(),
        };
        if !decided.is_empty() {
            let is_left = |i: &Item| {
                !only.contains(&i.path)
                    && !kept.iter().any(|k| i.path.starts_with(k))
                    && decided.iter().any(|d| i.path.starts_with(d))
            };
            let shown: Vec<(&Path, &str)> = rest
                .iter()
                .filter(|i| is_left(i))
                .map(|i| (i.path.as_path(), i.record.as_str()))
                .collect();
            let now = stage.changes(&decided, false).map(|r| items(&r));
            let same = now.as_ref().is_ok_and(|now| {
                let now: Vec<(&Path, &str)> = now
                    .iter()
                    .filter(|i| is_left(i))
                    .map(|i| (i.path.as_path(), i.record.as_str()))
                    .collect();
                now == shown
            });
            if !same {
                eprintln!("changed since it was shown: not committed; shown again");
                continue;
            }
        }
        let result = match answer.as_str() {
            "c" => apply_commit(
                stage,
                std::slice::from_ref(&subject),
                &mut committed,
                &mut kept,
            ),
            "d" => apply_discard(stage, std::slice::from_ref(&subject), &mut discarded),
            "C" => apply_commit(stage, &top(rest_paths()), &mut committed, &mut kept),
            "D" => apply_discard(stage, &top(rest_paths()), &mut discarded),
            "k" => {
                kept.insert(subject.clone());
                Ok(None)
            }
            "o" => {
                opened.insert(subject.clone());
                if first.dir && first.path == subject {
                    // The dir's own change is kept: deciding it would decide
                    // everything under it.
                    only.insert(first.path.clone());
                }
                Ok(None)
            }
            "r" => {
                ask_rewind(stage, &checkpoints, input);
                Ok(None)
            }
            _ => break 'walk, // K, q
        };
        match result {
            Ok(None) => {}
            Ok(Some(c)) => code = Some(c),
            Err(e) => {
                eprintln!("zonemount: {who}: {}", text::message(&e));
                code = Some(1);
                break;
            }
        }
    }
    let left = stage.changes(&[], false).map(|r| items(&r));
    let mut out = String::new();
    for c in &committed {
        out.push_str(&format!("committed {c}\n"));
    }
    for d in &discarded {
        out.push_str(&format!("discarded {d}\n"));
    }
    let n_left = match &left {
        Ok(l) => {
            for i in l {
                out.push_str(&format!("kept      {}\n", i.line));
            }
            l.len()
        }
        Err(_) => 0,
    };
    out.push_str(&format!(
        "{} committed, {} discarded, {} kept in the stage\n",
        committed.len(),
        discarded.len(),
        n_left
    ));
    eprint!("{out}");
    Outcome {
        code,
        left: left.map_or(true, |l| !l.is_empty()),
    }
}

/// `paths` without those under another of them.
fn top(paths: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for p in paths {
        if !out.iter().any(|o| p.starts_with(o)) {
            out.push(p);
        }
    }
    out
}

/// Commit `paths`; a conflict is said, left staged and not asked again
/// (it is among what is kept).
fn apply_commit(
    stage: &mut Stage,
    paths: &[PathBuf],
    done: &mut Vec<String>,
    kept: &mut BTreeSet<PathBuf>,
) -> Result<Option<u8>, String> {
    let r = stage.commit(paths)?;
    let mut code = None;
    for z in &r.zones {
        for c in &z.applied {
            done.push(stage_cmd::change_line(&z.zone, c));
        }
        for c in &z.conflicts {
            code = Some(EXIT_CONFLICT);
            kept.insert(Path::new("/").join(&z.zone).join(&c.path));
            eprintln!(
                "conflict  /{}/{}: {} (left in the stage; `zonemount commit --force` applies it anyway)",
                z.zone,
                text::path(&c.path),
                text::message(&c.why)
            );
        }
    }
    Ok(code)
}

fn apply_discard(
    stage: &mut Stage,
    paths: &[PathBuf],
    done: &mut Vec<String>,
) -> Result<Option<u8>, String> {
    let r = stage.discard(paths)?;
    let mut code = None;
    for z in &r.zones {
        for c in &z.discarded {
            done.push(stage_cmd::change_line(&z.zone, c));
        }
        for c in z.conflicts.iter().flatten() {
            code = Some(EXIT_CONFLICT);
            eprintln!("left alone /{}: {}", z.zone, text::message(&c.why));
        }
    }
    Ok(code)
}

/// `v`: the diff of `path` (what `changes --diff TARGET PATH` prints),
/// through `$PAGER` when stdout is a terminal and it is set.
fn view(stage: &mut Stage, path: &Path) {
    let shown = match stage.changes(&[path.to_path_buf()], true) {
        Ok(r) => stage_cmd::render_changes(&r),
        Err(e) => {
            eprintln!(
                "zonemount: {}: cannot show the diff: {}",
                stage.who,
                text::message(&e)
            );
            return;
        }
    };
    let pager = std::env::var("PAGER")
        .ok()
        .filter(|p| !p.trim().is_empty() && std::io::stdout().is_terminal());
    if let Some(pager) = pager {
        let child = std::process::Command::new("sh")
            .args(["-c", &pager])
            .stdin(std::process::Stdio::piped())
            .spawn();
        if let Ok(mut child) = child {
            if let Some(mut w) = child.stdin.take() {
                let _ = w.write_all(shown.as_bytes());
            }
            let _ = child.wait();
            return;
        }
    }
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(shown.as_bytes()).and_then(|()| out.flush());
}

/// `r`: which checkpoint, then rewind to it and show what the stage holds.
fn ask_rewind(stage: &mut Stage, ids: &[u64], input: &mut dyn BufRead) {
    let list: Vec<String> = ids.iter().map(u64::to_string).collect();
    eprint!("Rewind to which checkpoint ({})? ", list.join(", "));
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    if input.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let Some(id) = line.trim().parse().ok().filter(|id| ids.contains(id)) else {
        eprintln!("no such checkpoint: nothing rewound");
        return;
    };
    match stage.rewind(id) {
        Ok(r) => {
            for z in &r.zones {
                match &z.left_alone {
                    Some(why) => eprintln!("left alone /{}: {}", z.zone, text::message(why)),
                    None => eprintln!("rewound /{} to checkpoint {id}", z.zone),
                }
            }
        }
        Err(e) => eprintln!(
            "zonemount: {}: rewind failed: {}",
            stage.who,
            text::message(&e)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stage::report::{Kind, ZoneChanges};

    #[test]
    fn the_rest_is_decided_by_its_topmost_paths() {
        let p = |s: &str| PathBuf::from(s);
        assert_eq!(
            top(vec![
                p("/w/d"),
                p("/w/d/x"),
                p("/w/d/y"),
                p("/w/dx"),
                p("/w/f")
            ]),
            vec![p("/w/d"), p("/w/dx"), p("/w/f")]
        );
    }

    #[test]
    fn items_are_the_staged_zones_changes_in_path_order_as_a_worker_names_them() {
        let mut dir = Change::plain(PathBuf::from("src"), Kind::Added);
        dir.file_type = Some(FileType::Dir);
        let zone = |name: &str, staged: bool, changes: Vec<Change>| ZoneChanges {
            zone: name.to_owned(),
            staged,
            changes,
            incomplete: false,
            patch: None,
        };
        let report = ChangesReport {
            zones: vec![
                zone(
                    "work",
                    true,
                    vec![
                        Change::plain(PathBuf::from("src/b"), Kind::Added),
                        Change::plain(PathBuf::from("a"), Kind::Modified),
                        dir,
                    ],
                ),
                zone(
                    "plain",
                    false,
                    vec![Change::plain(PathBuf::from("x"), Kind::Added)],
                ),
            ],
        };
        let got: Vec<(PathBuf, bool)> = items(&report)
            .into_iter()
            .map(|i| (i.path, i.dir))
            .collect();
        assert_eq!(
            got,
            vec![
                (PathBuf::from("/work/a"), false),
                (PathBuf::from("/work/src"), true),
                (PathBuf::from("/work/src/b"), false),
            ]
        );
    }
}

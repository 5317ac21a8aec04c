//! What `run` does with a staged zone's changes when CMD has exited, before
//! the mount goes: `--commit-on-success` commits them when CMD exited 0;
//! `--review` prints the change summary and, on a terminal, walks it as
//! `zonemount review` does (per file or directory, like `git add -p`:
//! `cli::review`); otherwise the stage is kept (when it holds anything)
//! and the commands to finish are printed. An empty stage
//! is removed once the mount is gone.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use super::super::approvals::connect;
use super::super::stage_cmd::{self, EXIT_CONFLICT};
use crate::control::protocol::Request;
use crate::stage::report::{Change, ChangesReport, CommitReport};
use crate::text;

/// What `run` asked for.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Wanted {
    pub review: bool,
    pub commit_on_success: bool,
}

/// What became of the stage (to finish after the unmount).
pub(super) enum After {
    /// No staged zone.
    Nothing,
    /// Nothing staged: remove this (empty) stage dir once unmounted.
    Remove(PathBuf),
    /// Kept: say so (with the commands to finish) once unmounted.
    Kept(PathBuf),
    /// Committed or discarded: the stage dir may go once unmounted.
    Done(PathBuf),
}

/// Decide about the task's staged changes on `mountpoint` (still
/// mounted); `success`: CMD exited 0. Returns what to do after the
/// unmount, and an exit status that overrides CMD's (a commit that left
/// conflicts: 6).
pub(super) fn decide(mountpoint: &Path, wanted: Wanted, success: bool) -> (After, Option<u8>) {
    let mut client = match connect(mountpoint) {
        Ok(c) => c,
        Err(e) => {
            eprintln!(
                "zonemount: run: cannot reach the mount to review its stage: {}",
                e.msg
            );
            return (After::Nothing, None);
        }
    };
    let Some(dir) = client.status().ok().and_then(|s| s.stage_dir) else {
        return (After::Nothing, None);
    };
    let changes: ChangesReport = match client.stage(Request::Changes {
        paths: Vec::new(),
        diff: false,
        patch: false,
    }) {
        Ok(v) => v,
        Err(e) => {
            eprintln!(
                "zonemount: run: cannot list the staged changes: {}; the stage is kept in {}",
                text::message(&e.to_string()),
                dir.display()
            );
            return (After::Kept(dir), None);
        }
    };
    if changes.count() == 0 {
        return (After::Remove(dir), None);
    }
    if wanted.commit_on_success && success {
        return commit(&mut client, dir);
    }
    if !wanted.review {
        return (After::Kept(dir), None);
    }
    eprint!(
        "zonemount: run: staged changes:\n{}",
        stage_cmd::render_changes(&changes)
    );
    if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
        return (After::Kept(dir), None);
    }
    // The same walk as `zonemount review` (per file or directory).
    let mut stage = super::super::review::Stage::mount(client, "run");
    let outcome = super::super::review::walk(&mut stage, &mut std::io::stdin().lock());
    let after = if outcome.left {
        After::Kept(dir)
    } else {
        After::Done(dir)
    };
    (after, outcome.code)
}

fn commit(client: &mut crate::control::Client, dir: PathBuf) -> (After, Option<u8>) {
    match client.stage::<CommitReport>(Request::Commit {
        paths: Vec::new(),
        force: false,
    }) {
        Ok(r) => {
            let conflicts = r.conflicts();
            let applied = r
                .zones
                .iter()
                .flat_map(|z| z.applied.iter().map(move |c| (z.zone.as_str(), c)));
            eprint!("{}", indent(applied, "committed"));
            if conflicts > 0 {
                eprintln!(
                    "zonemount: run: {conflicts} path(s) not committed (changed on the host meanwhile); the stage keeps them"
                );
                (After::Kept(dir), Some(EXIT_CONFLICT))
            } else {
                (After::Done(dir), None)
            }
        }
        Err(e) => {
            eprintln!(
                "zonemount: run: commit failed: {}",
                text::message(&e.to_string())
            );
            (After::Kept(dir), Some(1))
        }
    }
}

/// The applied or discarded changes of an answer (with their zones), one
/// per line.
fn indent<'a>(changes: impl Iterator<Item = (&'a str, &'a Change)>, what: &str) -> String {
    let mut out = String::new();
    for (zone, c) in changes {
        out.push_str(&format!(
            "zonemount: run: {what} {}\n",
            stage_cmd::change_line(zone, c)
        ));
    }
    out
}

/// After the unmount: remove an empty or finished stage, or say where a
/// kept one is and how to finish it.
pub(super) fn finish(after: After) {
    match after {
        After::Nothing => {}
        After::Remove(dir) | After::Done(dir) => {
            if let Err(e) = crate::stage::dir::remove(&dir) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    eprintln!(
                        "zonemount: run: cannot remove the stage {}: {e}",
                        dir.display()
                    );
                }
            }
        }
        After::Kept(dir) => eprintln!(
            "zonemount: run: the task's changes are staged in {}; review and finish with:\n  {}\n  {}\n  {}\n  {}",
            dir.display(),
            stage_cmd::finish_line("review", &dir),
            stage_cmd::finish_line("changes --diff", &dir),
            stage_cmd::finish_line("commit", &dir),
            stage_cmd::finish_line("discard", &dir),
        ),
    }
}

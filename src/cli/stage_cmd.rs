//! `changes`, `commit` and `discard`: a staged zone's change report, and
//! applying it to the backing dir or dropping it. TARGET is a live mount
//! (asked over its control socket) or a stage dir no mount holds (worked
//! on here, under the stage's lock).

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Args;
use serde_json::Value;

use super::Failure;
use crate::control::protocol::Request;
use crate::mount;
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
    #[arg(long)]
    pub(crate) diff: bool,
    /// A mount's directory, or a stage dir no mount is using.
    pub(crate) target: PathBuf,
    /// Only these paths (and what is under them): in the mount, or as a
    /// worker sees them (/zone/...).
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

/// Where the operation runs.
enum Target {
    Mount(PathBuf),
    Stage(PathBuf),
}

fn target(t: &Path) -> Target {
    if t.join(MANIFEST).is_file() {
        Target::Stage(mount::absolute(t))
    } else {
        Target::Mount(mount::absolute(t))
    }
}

pub(crate) fn changes(a: &ChangesArgs) -> Result<u8, Failure> {
    let answer = ask(&a.target, &a.paths, false, |paths| Request::Changes {
        paths,
        diff: a.diff,
    })?;
    show(a.json, &answer, render_changes)?;
    Ok(0)
}

pub(crate) fn commit(a: &CommitArgs) -> Result<u8, Failure> {
    let answer = ask(&a.target, &a.paths, true, |paths| Request::Commit {
        paths,
        force: a.force,
    })?;
    show(a.json, &answer, render_commit)?;
    Ok(if conflicts(&answer) > 0 {
        EXIT_CONFLICT
    } else {
        0
    })
}

pub(crate) fn discard(a: &DiscardArgs) -> Result<u8, Failure> {
    let answer = ask(&a.target, &a.paths, true, |paths| Request::Discard {
        paths,
    })?;
    show(a.json, &answer, render_discard)?;
    Ok(if conflicts(&answer) > 0 {
        EXIT_CONFLICT
    } else {
        0
    })
}

/// Run the request made of the worker-form paths, on the mount or the
/// stage dir `t`.
fn ask(
    t: &Path,
    paths: &[PathBuf],
    needs_stage: bool,
    request: impl FnOnce(Vec<PathBuf>) -> Request,
) -> Result<Value, Failure> {
    match target(t) {
        Target::Mount(mp) => {
            let mut client = super::approvals::connect(t)?;
            let status = client
                .status()
                .map_err(|e| Failure::new(1, e.to_string()))?;
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
                .map(|p| worker_form(&mp, t, p, &cwd, &zones))
                .collect::<Result<Vec<_>, _>>()?;
            client
                .stage(request(paths))
                .map_err(|e| Failure::new(1, e.to_string()))
        }
        Target::Stage(dir) => {
            let manifest =
                stage::dir::read_manifest(&dir).map_err(|e| Failure::new(1, e.to_string()))?;
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
            mount::staging::offline(&dir, &request(paths)).map_err(|e| Failure::new(1, e))
        }
    }
}

/// `p` (in the mount, or `/zone/...`) as the worker sees it, exact.
fn worker_form(
    mp: &Path,
    given: &Path,
    p: &Path,
    cwd: &Path,
    zones: &[&str],
) -> Result<PathBuf, Failure> {
    let comps = super::check::worker_path(mp, given, p, cwd, zones)?;
    Ok(std::iter::once(std::ffi::OsStr::new("/"))
        .chain(comps.iter().map(|c| c.as_os_str()))
        .collect())
}

fn show(json: bool, answer: &Value, render: fn(&Value) -> String) -> Result<(), Failure> {
    let text = if json {
        let mut v = answer.clone();
        if let Value::Object(m) = &mut v {
            m.remove("v");
            m.remove("ok");
        }
        format!("{}\n", text::json_pretty(&v).unwrap_or_default())
    } else {
        render(answer)
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| Failure::new(1, format!("cannot write to stdout: {e}")))
}

fn zones(answer: &Value) -> impl Iterator<Item = &Value> {
    answer["zones"].as_array().into_iter().flatten()
}

fn conflicts(answer: &Value) -> usize {
    zones(answer)
        .map(|z| z["conflicts"].as_array().map_or(0, Vec::len))
        .sum()
}

/// One letter per kind of change, as `git status --short` writes them.
fn letter(kind: &str) -> &'static str {
    match kind {
        "added" => "A",
        "modified" => "M",
        "deleted" => "D",
        "renamed" => "R",
        _ => "?",
    }
}

/// A name of an answer's item for people: escaped ([`text::escape`]).
fn name(c: &Value, key: &str) -> Option<String> {
    text::shown_field(c, key)
}

/// One change for people: `M  /work/src/a.rs  (0644, 120 → 130 bytes)`.
pub(crate) fn change_line(zone: &str, c: &Value) -> String {
    let path = format!("/{zone}/{}", name(c, "path").unwrap_or("?".into()));
    let kind = c["kind"].as_str().unwrap_or("?");
    let mut line = format!("{}  {path}", letter(kind));
    if let Some(from) = name(c, "from") {
        line = format!("{}  /{zone}/{from} -> {path}", letter(kind));
    }
    let mut facts = Vec::new();
    if let Some(t) = c["file_type"].as_str() {
        if t != "file" {
            facts.push(t.to_owned());
        }
    }
    if let Some(m) = c["mode"].as_u64() {
        facts.push(format!("{:04o}", m & 0o7777));
    }
    match (c["old_size"].as_u64(), c["size"].as_u64()) {
        (Some(a), Some(b)) if a != b => facts.push(format!("{a} -> {b} bytes")),
        (_, Some(b)) => facts.push(format!("{b} bytes")),
        _ => {}
    }
    if let Some(n) = c["entries"].as_u64() {
        facts.push(format!("{n} entries"));
    }
    if !facts.is_empty() {
        line.push_str(&format!("  ({})", facts.join(", ")));
    }
    line
}

pub(crate) fn render_changes(answer: &Value) -> String {
    let mut out = String::new();
    let mut total = 0;
    for z in zones(answer) {
        let name = z["zone"].as_str().unwrap_or("?");
        for c in z["changes"].as_array().into_iter().flatten() {
            total += 1;
            out.push_str(&change_line(name, c));
            out.push('\n');
            if let Some(d) = c["diff"].as_str() {
                // The worker's file content: nothing in it may draw on
                // the terminal either (backslashes are left as they are).
                let d = text::message(d);
                out.push_str(&d);
                if !d.ends_with('\n') {
                    out.push('\n');
                }
            }
        }
    }
    if total == 0 {
        out.push_str("no changes\n");
    }
    out
}

fn render_commit(answer: &Value) -> String {
    let mut out = String::new();
    let (mut applied, mut refused) = (0, 0);
    for z in zones(answer) {
        let name = z["zone"].as_str().unwrap_or("?");
        for c in z["applied"].as_array().into_iter().flatten() {
            applied += 1;
            out.push_str(&format!("committed {}\n", change_line(name, c)));
        }
        for c in z["conflicts"].as_array().into_iter().flatten() {
            refused += 1;
            let at = self::name(c, "at")
                .map(|at| format!(" (/{name}/{at})"))
                .unwrap_or_default();
            out.push_str(&format!(
                "conflict  /{name}/{}: {}{at}\n",
                self::name(c, "path").unwrap_or("?".into()),
                text::message(c["why"].as_str().unwrap_or("?"))
            ));
        }
    }
    out.push_str(&format!("{applied} committed"));
    if refused > 0 {
        out.push_str(&format!(
            ", {refused} not (left in the stage; --force applies them anyway)"
        ));
    }
    out.push('\n');
    out
}

fn render_discard(answer: &Value) -> String {
    let mut out = String::new();
    let mut n = 0;
    for z in zones(answer) {
        let name = z["zone"].as_str().unwrap_or("?");
        for c in z["discarded"].as_array().into_iter().flatten() {
            n += 1;
            out.push_str(&format!("discarded {}\n", change_line(name, c)));
        }
        for c in z["conflicts"].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "left alone /{name}: {}\n",
                text::message(c["why"].as_str().unwrap_or("?"))
            ));
        }
    }
    out.push_str(&format!("{n} discarded\n"));
    out
}

/// How many changes a `changes` answer lists.
pub(crate) fn count(answer: &Value) -> usize {
    zones(answer)
        .map(|z| z["changes"].as_array().map_or(0, Vec::len))
        .sum()
}

/// The arguments a user would type for `cmd` on a stage dir.
pub(crate) fn finish_line(cmd: &str, dir: &Path) -> String {
    let quoted = shlex::try_quote(&dir.to_string_lossy())
        .map(|q| q.into_owned())
        .unwrap_or_else(|_| dir.display().to_string());
    format!("zonemount {cmd} {quoted}")
}

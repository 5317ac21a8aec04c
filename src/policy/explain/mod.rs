//! Words for decisions: every refusal (and, for `zonemount check`, every
//! allow and ask) explained in one message written for an LLM — the path,
//! the reason, and what would work instead.
//!
//! Pure like the rest of `policy`: the zone table (to list alternatives)
//! and the facts of the operation come in as arguments. One place builds
//! every message, so `check`, `status` and the audit log say the same.

use std::fmt::Write as _;
use std::path::Path;

use super::{Class, Decision, Loc, Op, ZoneRules};
use crate::config::{Access, Approval};
use crate::error::Refusal;

/// What an operation does, in the words of an explanation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Look a name up (the operation behind a refused lookup).
    Access,
    Read,
    /// Change a file's content.
    Write,
    /// Add a new name.
    Create,
    /// Change metadata (mode, owner, times, xattrs).
    Change,
    Delete,
    Rename,
    Link,
}

impl Action {
    pub fn verb(self) -> &'static str {
        match self {
            Action::Access => "access",
            Action::Read => "read",
            Action::Write => "write",
            Action::Create => "create",
            Action::Change => "change",
            Action::Delete => "delete",
            Action::Rename => "rename",
            Action::Link => "link",
        }
    }

    /// The approval class the action needs (renames need both; the write
    /// of the destination is the one named).
    fn class(self) -> Class {
        match self {
            Action::Delete => Class::Delete,
            Action::Read | Action::Access => Class::Read,
            _ => Class::Write,
        }
    }
}

/// What an explanation is about.
#[derive(Clone, Copy, Debug)]
pub struct Subject<'a> {
    pub action: Action,
    /// The path acted on (a rename's or link's source).
    pub at: Loc<'a>,
    /// A rename's or link's destination.
    pub to: Option<Loc<'a>>,
    /// The size the file has (read) or would get (write), when known.
    pub size: Option<u64>,
    /// Whether the path is a directory (suffixes exempt directories).
    pub is_dir: bool,
}

impl<'a> Subject<'a> {
    pub fn new(action: Action, at: Loc<'a>) -> Self {
        Subject {
            action,
            at,
            to: None,
            size: None,
            is_dir: false,
        }
    }

    /// What `op` does, in these terms.
    pub fn of(op: &Op<'a>) -> Self {
        match *op {
            Op::Read { at, size } => Subject {
                size: Some(size),
                ..Subject::new(Action::Read, at)
            },
            Op::WriteContent { at, new_size } => Subject {
                size: new_size,
                ..Subject::new(Action::Write, at)
            },
            Op::NewName { at, is_dir } => Subject {
                is_dir,
                ..Subject::new(Action::Create, at)
            },
            Op::Metadata { at } => Subject::new(Action::Change, at),
            Op::Remove { at } => Subject::new(Action::Delete, at),
            Op::Rename {
                from, to, is_dir, ..
            } => Subject {
                to: Some(to),
                is_dir,
                ..Subject::new(Action::Rename, from)
            },
            Op::Link { from, to } => Subject {
                to: Some(to),
                ..Subject::new(Action::Link, from)
            },
            Op::Device { at } => Subject::new(Action::Create, at),
            Op::Look { at, is_dir } => Subject {
                is_dir: is_dir.unwrap_or(false),
                ..Subject::new(Action::Access, at)
            },
            Op::MayWrite { at, is_dir } => Subject {
                is_dir,
                ..Subject::new(Action::Write, at)
            },
            Op::Grow { zone, new_size } => Subject {
                size: Some(new_size),
                ..Subject::new(Action::Write, Loc::in_zone(zone, Path::new("")))
            },
        }
    }

    /// "write '/data/x'", "rename '/a/x' to '/a/y'".
    fn doing(&self) -> String {
        let mut s = format!("{} '{}'", self.action.verb(), shown(self.at));
        if let Some(to) = self.to {
            let join = if self.action == Action::Link {
                "as"
            } else {
                "to"
            };
            let _ = write!(s, " {join} '{}'", shown(to));
        }
        s
    }

    fn places(&self) -> impl Iterator<Item = Loc<'a>> {
        std::iter::once(self.at).chain(self.to)
    }
}

/// A decision in words: `reason` is one line (the audit log's `reason`),
/// `message` the whole explanation.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Explanation {
    pub reason: String,
    pub message: String,
}

impl Explanation {
    fn new(head: String, reason: String, instead: String) -> Self {
        let mut message = format!("{head}: {reason}.");
        if !instead.is_empty() {
            message.push(' ');
            message.push_str(&instead);
        }
        Explanation { reason, message }
    }
}

/// The path a worker sees: `/zone/rel`, `/name` at the root, escaped for
/// people ([`crate::text::escape`]): explanations hold no raw name.
pub fn shown(at: Loc<'_>) -> String {
    super::worker_path(at.zone.map(|z| z.name.as_str()), at.path)
}

/// The path a worker sees, its exact bytes (for the ledger and JSON).
pub fn exact(at: Loc<'_>) -> std::path::PathBuf {
    super::worker_path_exact(at.zone.map(|z| z.name.as_str()), at.path)
}

fn zone_dir(z: &ZoneRules) -> String {
    format!("/{}", z.name)
}

fn in_zone(z: &ZoneRules, rel: &Path) -> String {
    shown(Loc::in_zone(z, rel))
}

/// "names ending in .md or .pdf".
fn suffix_words(list: &[String]) -> String {
    match list {
        [] => "no file names at all".to_owned(),
        [one] => format!("names ending in {one}"),
        [init @ .., last] => format!("names ending in {} or {last}", init.join(", ")),
    }
}

/// "/final (asks for approval; only names ending in .md)"; `lead` first.
fn described(z: &ZoneRules, class: Class, lead: Option<&str>) -> String {
    let mut notes: Vec<String> = lead.into_iter().map(str::to_owned).collect();
    if z.level(class) == Approval::Ask {
        notes.push("asks for approval".to_owned());
    }
    if let (Class::Write, Some(list)) = (class, &z.suffixes) {
        notes.push(format!("only {}", suffix_words(list)));
    }
    if notes.is_empty() {
        zone_dir(z)
    } else {
        format!("{} ({})", zone_dir(z), notes.join("; "))
    }
}

/// Zones where `class` may happen at all (rw, not blocked), except `not`.
fn open_for(zones: &[ZoneRules], class: Class, not: Option<&ZoneRules>) -> Vec<String> {
    zones
        .iter()
        .filter(|z| {
            (class == Class::Read || z.access == Access::Rw) && z.level(class) != Approval::Blocked
        })
        .filter(|z| !not.is_some_and(|n| std::ptr::eq(n, *z)))
        .map(|z| described(z, class, None))
        .collect()
}

/// "Writable: /workspace, /final (asks for approval)".
fn alternatives(zones: &[ZoneRules], class: Class, not: Option<&ZoneRules>) -> String {
    let list = open_for(zones, class, not);
    let what = match class {
        Class::Write => "is writable",
        Class::Delete => "allows deleting",
        Class::Read => "allows reading",
    };
    match (list.is_empty(), not.is_some()) {
        (true, true) => format!("No other zone of this mount {what}."),
        (true, false) => format!("No zone of this mount {what}."),
        (false, _) => {
            let head = match class {
                Class::Write => "Writable",
                Class::Delete => "Deleting is allowed in",
                Class::Read => "Reading is allowed in",
            };
            format!("{head}: {}.", list.join(", "))
        }
    }
}

/// Every zone, with what it allows: for refusals at the root.
fn zone_list(zones: &[ZoneRules]) -> String {
    if zones.is_empty() {
        return "This mount has no zones: nothing in it can be used.".to_owned();
    }
    let all: Vec<String> = zones
        .iter()
        .map(|z| match z.access {
            Access::Ro => format!("{} (read-only)", zone_dir(z)),
            Access::Rw if z.level(Class::Write) == Approval::Blocked => {
                format!("{} (writes blocked)", zone_dir(z))
            }
            Access::Rw => described(z, Class::Write, Some("writable")),
        })
        .collect();
    format!("Work inside a zone: {}.", all.join(", "))
}

/// Explain a refusal of `s`.
pub fn explain(s: &Subject<'_>, r: Refusal, zones: &[ZoneRules]) -> Explanation {
    let head = format!("Cannot {}", s.doing());
    let zone = s.places().find_map(|l| l.zone);
    let (reason, instead) = match (r, zone) {
        (Refusal::Sensitive, Some(z)) => sensitive(s, z),
        (Refusal::HiddenByPattern, Some(z)) => {
            let (path, pattern) = s
                .places()
                .find_map(|l| z.hidden_by(l.path).map(|p| (l.path, p)))
                .map_or_else(
                    || (zone_dir(z), String::new()),
                    |(l, p)| (in_zone(z, l), p.to_owned()),
                );
            (
                format!(
                    "{path} is hidden from this mount (it matches '{pattern}' and appears not to exist)"
                ),
                "Use other paths; only whoever starts the mount can show it.".to_owned(),
            )
        }
        (Refusal::Hidden, Some(z)) => hidden(s, z),
        (Refusal::RootLevel, _) | (_, None) => root_level(r, zones),
        (Refusal::CrossZone, Some(_)) => cross_zone(s),
        (Refusal::ReadOnly, Some(z)) => (
            format!("{} is read-only", zone_dir(z)),
            alternatives(zones, Class::Write, None),
        ),
        (Refusal::Protected, Some(z)) => protected(s, z),
        (Refusal::SensitiveInside, Some(_)) if s.action == Action::Delete => (
            "it holds entries this mount doesn't show, which must stay".to_owned(),
            "Remove what you can see in it; leave the directory.".to_owned(),
        ),
        (Refusal::SensitiveInside, Some(z)) => {
            let root = z
                .sensitive_below(s.at.path)
                .or_else(|| s.to.and_then(|t| z.sensitive_below(t.path)));
            let reason = match root {
                Some(p) => format!(
                    "it holds {}, a credential path this mount hides, which must stay where it is",
                    in_zone(z, p)
                ),
                None => {
                    let pattern = z
                        .hidden_below(s.at.path)
                        .or_else(|| s.to.and_then(|t| z.hidden_below(t.path)))
                        .unwrap_or_default();
                    format!(
                        "it may hold paths this mount hides ('{pattern}'), which must stay where they are"
                    )
                }
            };
            (reason, "Move or copy the other entries instead.".to_owned())
        }
        (Refusal::Suffix, Some(z)) => (
            format!(
                "{} accepts only file {}",
                zone_dir(z),
                suffix_words(z.suffixes.as_deref().unwrap_or_default())
            ),
            "Use such a name; directories may have any name.".to_owned(),
        ),
        (Refusal::TooBig, Some(z)) => too_big(s, z),
        (Refusal::Device, Some(_)) => (
            "device nodes (block or character) cannot be made in this mount".to_owned(),
            "Regular files, FIFOs and sockets can be.".to_owned(),
        ),
        (Refusal::Blocked, Some(z)) => blocked(s, z, zones),
        (Refusal::Denied, Some(z)) => (
            "approval was asked for and denied, or not given in time".to_owned(),
            format!(
                "Do not retry it: a denied request is denied again at once. {}",
                alternatives(zones, s.action.class(), Some(z))
            ),
        ),
        (Refusal::Awaiting(id), Some(_)) => (
            format!("approval request #{id} is waiting for a decision, and this call can't wait for it (the directory would be locked meanwhile)"),
            "Retry the same operation once it is decided: an allow lets the retry through, a deny refuses it at once.".to_owned(),
        ),
        (Refusal::NotAllowed, Some(_)) => (
            "this user may not use the mount".to_owned(),
            "Only the user who mounted it, root, and users given with --allow-uid may.".to_owned(),
        ),
    };
    Explanation::new(head, reason, instead)
}

fn sensitive(s: &Subject<'_>, z: &ZoneRules) -> (String, String) {
    let root = s
        .places()
        .find_map(|l| z.sensitive_root_of(l.path))
        .map_or_else(|| zone_dir(z), |p| in_zone(z, p));
    (
        format!("{root} holds credentials and is hidden from this mount (it appears not to exist)"),
        format!(
            "Use other paths in {}; only whoever starts the mount can expose it (--allow-sensitive-roots).",
            zone_dir(z)
        ),
    )
}

fn hidden(s: &Subject<'_>, z: &ZoneRules) -> (String, String) {
    let name =
        s.at.path
            .file_name()
            .map_or_else(String::new, |n| crate::text::path(Path::new(n)));
    let list = z.suffixes.as_deref().unwrap_or_default();
    (
        format!(
            "{} shows only files with {}, so '{name}' is not visible (it appears not to exist)",
            zone_dir(z),
            suffix_words(list)
        ),
        "Directories are visible whatever their names.".to_owned(),
    )
}

fn root_level(r: Refusal, zones: &[ZoneRules]) -> (String, String) {
    let reason = match r {
        Refusal::NotAllowed => "this user may not use the mount",
        Refusal::Denied => "approval was asked for and denied, or not given in time",
        _ => {
            "the mount's root and its zone directories cannot be created, removed, renamed or changed"
        }
    };
    (reason.to_owned(), zone_list(zones))
}

fn cross_zone(s: &Subject<'_>) -> (String, String) {
    let names: Vec<String> = s.places().filter_map(|l| l.zone.map(zone_dir)).collect();
    let instead = if s.action == Action::Link {
        "Copy the file instead."
    } else {
        "Copy it, then delete the original (mv does this by itself)."
    };
    (
        format!(
            "renames and links cannot cross zones ({})",
            names.join(" and ")
        ),
        instead.to_owned(),
    )
}

fn protected(s: &Subject<'_>, z: &ZoneRules) -> (String, String) {
    let covered = s
        .places()
        .find_map(|l| z.protected_by(l.path, s.is_dir).map(|p| (l.path, p)));
    let reason = match covered {
        Some((path, pat)) => {
            // Name the protected dir itself, the shortest covered ancestor.
            let mut ancestors: Vec<&Path> = path.ancestors().collect();
            ancestors.reverse();
            let top = ancestors
                .into_iter()
                .filter(|a| !a.as_os_str().is_empty())
                .find(|a| z.is_protected(a, *a != path || s.is_dir))
                .unwrap_or(path);
            format!(
                "{} is protected (read-only) in {} by the pattern '{pat}'",
                in_zone(z, top),
                zone_dir(z)
            )
        }
        None => {
            let pat = s
                .places()
                .find_map(|l| z.protected_below(l.path))
                .unwrap_or_default();
            format!(
                "it holds a protected (read-only) path of {}, '{pat}', which must stay where it is",
                zone_dir(z)
            )
        }
    };
    (
        reason,
        format!(
            "Paths of {} that no protect pattern covers are writable.",
            zone_dir(z)
        ),
    )
}

fn too_big(s: &Subject<'_>, z: &ZoneRules) -> (String, String) {
    let max = z.max_file_bytes.unwrap_or_default();
    let size = s.size.map_or_else(String::new, |n| format!(" ({n} bytes)"));
    let reason = match s.action {
        Action::Read => format!(
            "the file{size} is larger than {}'s limit of {max} bytes (max_file_bytes)",
            zone_dir(z)
        ),
        _ => format!(
            "files in {} may not grow past {max} bytes (max_file_bytes); this would make it{size} larger",
            zone_dir(z)
        ),
    };
    (
        reason,
        format!("Keep files in {} at or under {max} bytes.", zone_dir(z)),
    )
}

fn blocked(s: &Subject<'_>, z: &ZoneRules, zones: &[ZoneRules]) -> (String, String) {
    let class = match s.action {
        Action::Rename if z.level(Class::Write) != Approval::Blocked => Class::Delete,
        a => a.class(),
    };
    let word = class_word(class);
    (
        format!("{}'s {word} policy is 'blocked'", zone_dir(z)),
        alternatives(zones, class, Some(z)),
    )
}

fn class_word(c: Class) -> &'static str {
    match c {
        Class::Write => "write",
        Class::Delete => "delete",
        Class::Read => "read",
    }
}

/// Explain any decision about `s` (what `zonemount check` prints).
pub fn explain_decision(s: &Subject<'_>, d: &Decision, zones: &[ZoneRules]) -> Explanation {
    match d {
        Decision::Refuse(r) => explain(s, *r, zones),
        Decision::Allow => allowed(s),
        Decision::Ask(items) => {
            let mut parts: Vec<String> = Vec::new();
            for i in items {
                let z = zones.iter().find(|z| z.name == i.zone);
                let path = z.map_or_else(|| i.path.display().to_string(), |z| in_zone(z, &i.path));
                let mut p = format!(
                    "{}'s {} policy is 'ask'",
                    z.map_or_else(|| format!("/{}", i.zone), zone_dir),
                    class_word(i.class),
                );
                // A rename asks for two paths: say which is which.
                if path != shown(s.at) || s.to.is_some() {
                    let _ = write!(p, " (for {path})");
                }
                if !parts.contains(&p) {
                    parts.push(p);
                }
            }
            Explanation::new(
                format!("Would ask to {}", s.doing()),
                parts.join("; "),
                waiting(s.action).to_owned(),
            )
        }
    }
}

/// What a worker sees while an ask about `action` waits: the kernel
/// locks the directory for new names, removals, renames and links, so
/// those calls are not held (see `fs::core::held` and `gate::DIR_HOLD`).
fn waiting(action: Action) -> &'static str {
    match action {
        Action::Create => {
            "A file is made at once, empty, and its first write waits until the supervisor allows or denies it; a directory, symlink, FIFO or socket is not made: the call fails with EAGAIN (resource temporarily unavailable) and the request waits; retry once it is decided. Denied or unanswered, it fails with EACCES (permission denied)."
        }
        Action::Delete | Action::Rename | Action::Link => {
            "The call fails with EAGAIN (resource temporarily unavailable) and the request waits; retry once it is decided. Denied, the retry fails with EACCES (permission denied)."
        }
        Action::Access | Action::Read | Action::Write | Action::Change => {
            "The call waits until the supervisor allows or denies it; denied or unanswered, it fails with EACCES (permission denied)."
        }
    }
}

fn allowed(s: &Subject<'_>) -> Explanation {
    let head = format!("Can {}", s.doing());
    let Some(z) = s.at.zone else {
        return Explanation::new(head, "reading is always allowed".to_owned(), String::new());
    };
    let reason = match s.action {
        Action::Read | Action::Access
            if z.level_at(Class::Read, s.at.path) == Approval::PreApproved =>
        {
            "reading is allowed".to_owned()
        }
        Action::Read | Action::Access => "reading was approved".to_owned(),
        a if z.staged => {
            let configured = match a.class() {
                crate::policy::Class::Write => z.approval.write,
                crate::policy::Class::Delete => z.approval.delete,
                crate::policy::Class::Read => z.approval.read,
            };
            format!(
                "{} is staged: the change goes to its stage, and the host's files change only \
                 when the supervisor commits it (the commit is the decision; the {} policy is \
                 '{configured}')",
                zone_dir(z),
                class_word(a.class())
            )
        }
        a => format!(
            "{} is writable and its {} policy is 'preApproved'",
            zone_dir(z),
            class_word(a.class())
        ),
    };
    let note = match (s.action, z.max_file_bytes) {
        (Action::Write | Action::Create, Some(max)) => {
            format!("Writes that would make a file larger than {max} bytes fail with EFBIG.")
        }
        _ => String::new(),
    };
    Explanation::new(head, reason, note)
}

#[cfg(test)]
mod tests;

/// A refusal as the worker is told it (the refusal log, see `run`): one
/// line about paths and permissions, with paths as the worker sees them
/// under `root` (the mountpoint, or `/` in the sandbox). None for a path
/// hidden from the worker: telling would confirm it exists.
pub fn for_worker(s: &Subject<'_>, r: Refusal, zones: &[ZoneRules], root: &Path) -> Option<String> {
    if matches!(
        r,
        Refusal::Sensitive | Refusal::Hidden | Refusal::HiddenByPattern | Refusal::NotAllowed
    ) {
        return None;
    }
    let path = |l: Loc<'_>| {
        root.join(shown(l).trim_start_matches('/'))
            .display()
            .to_string()
    };
    let list = |class: Class| -> String {
        let dirs: Vec<String> = zones
            .iter()
            .filter(|z| z.access == Access::Rw && z.level(class) != Approval::Blocked)
            .map(|z| root.join(&z.name).display().to_string())
            .collect();
        if dirs.is_empty() {
            "none".to_owned()
        } else {
            dirs.join(", ")
        }
    };
    let at = path(s.at);
    let zone = s.at.zone;
    let why = match r {
        Refusal::ReadOnly => format!(
            "this path is read-only. Writable paths: {}",
            list(Class::Write)
        ),
        Refusal::Protected => "this path is protected (read-only)".to_owned(),
        Refusal::RootLevel => format!(
            "the top-level directories can't be added, removed or renamed. Work inside: {}",
            list(Class::Write)
        ),
        Refusal::CrossZone => {
            "moving or linking between these top-level directories isn't possible; copy, then delete"
                .to_owned()
        }
        Refusal::Suffix => format!(
            "only files with {} can be made or seen here",
            suffix_words(zone.and_then(|z| z.suffixes.as_deref()).unwrap_or_default())
        ),
        Refusal::SensitiveInside if s.action == Action::Delete => {
            "this directory can't be removed (it holds entries that must stay)".to_owned()
        }
        Refusal::SensitiveInside => {
            "this directory can't be moved (it holds paths that must stay where they are)".to_owned()
        }
        Refusal::TooBig => format!(
            "files here may not exceed {} bytes",
            zone.and_then(|z| z.max_file_bytes).unwrap_or(0)
        ),
        Refusal::Device => "device nodes can't be made".to_owned(),
        Refusal::Blocked => {
            let (what, class) = match s.action.class() {
                Class::Delete => ("deleting", Class::Delete),
                Class::Write => ("writing", Class::Write),
                Class::Read => ("reading", Class::Read),
            };
            let others: Vec<String> = zones
                .iter()
                .filter(|z| z.access == Access::Rw && z.level(class) != Approval::Blocked)
                .filter(|z| !zone.is_some_and(|n| std::ptr::eq(n, *z)))
                .map(|z| root.join(&z.name).display().to_string())
                .collect();
            if others.is_empty() {
                format!("{what} is not permitted here")
            } else {
                format!("{what} is not permitted here; it is under {}", others.join(", "))
            }
        }
        Refusal::Denied => {
            "the supervisor did not approve this (denied, or no answer in time); don't retry it"
                .to_owned()
        }
        Refusal::Awaiting(id) => format!("waiting for approval #{id}; retry once decided"),
        Refusal::Sensitive | Refusal::Hidden | Refusal::HiddenByPattern | Refusal::NotAllowed => {
            return None;
        }
    };
    let to = s.to.map(|t| format!(" -> {}", path(t))).unwrap_or_default();
    Some(format!(
        "{} {at}{to}: {} ({}): {why}.",
        s.action.verb(),
        r.errno_name(),
        std::io::Error::from_raw_os_error(r.errno())
            .to_string()
            .split(" (os error")
            .next()
            .unwrap_or("")
    ))
}

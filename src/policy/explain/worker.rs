//! A refusal as the worker is told it (the refusal log of `run`): one
//! line, paths as the worker sees them, nothing about what is hidden.

use std::path::Path;

use super::subject::{Action, Subject, shown};
use super::words::suffix_words;
use crate::config::{Access, Approval};
use crate::error::Refusal;
use crate::policy::{Class, Loc, ZoneRules};

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

//! The phrases every explanation shares: a zone as the worker sees it and
//! what it allows, lists of suffixes, the zones to use instead.

use std::path::Path;

use super::subject::shown;
use crate::config::{Access, Approval};
use crate::policy::{Class, Loc, ZoneRules};

pub(super) fn zone_dir(z: &ZoneRules) -> String {
    format!("/{}", z.name)
}

pub(super) fn in_zone(z: &ZoneRules, rel: &Path) -> String {
    shown(Loc::in_zone(z, rel))
}

/// "names ending in .md or .pdf".
pub(super) fn suffix_words(list: &[String]) -> String {
    match list {
        [] => "no file names at all".to_owned(),
        [one] => format!("names ending in {one}"),
        [init @ .., last] => format!("names ending in {} or {last}", init.join(", ")),
    }
}

/// "/final (asks for approval; only names ending in .md)"; `lead` first.
pub(super) fn described(z: &ZoneRules, class: Class, lead: Option<&str>) -> String {
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
pub(super) fn open_for(zones: &[ZoneRules], class: Class, not: Option<&ZoneRules>) -> Vec<String> {
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
pub(super) fn alternatives(zones: &[ZoneRules], class: Class, not: Option<&ZoneRules>) -> String {
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
pub(super) fn zone_list(zones: &[ZoneRules]) -> String {
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

pub(super) fn class_word(c: Class) -> &'static str {
    match c {
        Class::Write => "write",
        Class::Delete => "delete",
        Class::Read => "read",
    }
}

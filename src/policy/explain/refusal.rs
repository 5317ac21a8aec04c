//! A refusal explained: why this operation can't happen here, and what
//! would work instead (the words of `check`, `status` and the ledger).

use std::path::Path;

use super::subject::{Action, Explanation, Subject};
use super::words::{alternatives, class_word, in_zone, suffix_words, zone_dir, zone_list};
use crate::config::Approval;
use crate::error::Refusal;
use crate::policy::{Class, ZoneRules};

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

//! Any decision in words, allows and asks too (what `zonemount check`
//! prints), with what a worker meets while an ask waits.

use std::fmt::Write as _;

use super::refusal::explain;
use super::subject::{Action, Explanation, Subject, shown};
use super::words::{class_word, in_zone, zone_dir};
use crate::config::Approval;
use crate::policy::{Class, Decision, ZoneRules};

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
/// locks the directory for new names, removals, renames and links, and a
/// file's or directory's own lock for its metadata changes and a new
/// file's writes, so those calls are held only for a moment (see
/// `fs::core::held` and `gate::LOCK_HOLD`).
fn waiting(action: Action) -> &'static str {
    match action {
        Action::Create => {
            "A file is made at once, empty, and its first write waits until the supervisor allows or denies it (if the file is removed, renamed or linked meanwhile, the write fails with EAGAIN, resource temporarily unavailable, and the request waits for a retry); a directory, symlink, FIFO or socket is not made: the call fails with EAGAIN (resource temporarily unavailable) and the request waits; retry once it is decided. Denied or unanswered, it fails with EACCES (permission denied)."
        }
        Action::Delete | Action::Rename | Action::Link => {
            "The call fails with EAGAIN (resource temporarily unavailable) and the request waits; retry once it is decided. Denied, the retry fails with EACCES (permission denied)."
        }
        Action::Change => {
            "The call fails with EAGAIN (resource temporarily unavailable; EBUSY for an xattr set) and the request waits; retry once it is decided. Denied, the retry fails with EACCES (permission denied)."
        }
        Action::Access | Action::Read | Action::Write => {
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

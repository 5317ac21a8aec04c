//! What an explanation is about (an [`Action`] on one or two places, a
//! [`Subject`]) and what it is (an [`Explanation`]: a reason and a
//! message), and paths as the worker sees them.

use std::fmt::Write as _;
use std::path::Path;

use crate::policy::{Class, Loc, Op};

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
    pub(super) fn class(self) -> Class {
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
            Op::Metadata { at, .. } => Subject::new(Action::Change, at),
            Op::Remove { at, .. } => Subject::new(Action::Delete, at),
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
    pub(super) fn doing(&self) -> String {
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

    pub(super) fn places(&self) -> impl Iterator<Item = Loc<'a>> {
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
    pub(super) fn new(head: String, reason: String, instead: String) -> Self {
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
    crate::policy::worker_path(at.zone.map(|z| z.name.as_str()), at.path)
}

/// The path a worker sees, its exact bytes (for the ledger and JSON).
pub fn exact(at: Loc<'_>) -> std::path::PathBuf {
    crate::policy::worker_path_exact(at.zone.map(|z| z.name.as_str()), at.path)
}

//! The pure decision "may operation O on path P in zone Z proceed?".
//!
//! No I/O here: the filesystem tells [`decide`] where an operation lands
//! ([`Loc`]) and what it does ([`Op`]); the answer is allow, refuse with a
//! [`Refusal`], or ask for approval of one or more (class, path) pairs.
//! Every question the filesystem has about a path goes through `decide`:
//! whether a name is visible at all (hidden sensitive roots, `suffixes`),
//! whether it may be written, and what must be approved first.
//!
//! - `rules`: a zone's rules compiled once at mount ([`ZoneRules`]).
//! - `decide`: the decision, in DESIGN §3's order of precedence.
//! - `explain`: a refusal (or any decision) in words for an LLM.
//! - `direct`: which zones need the daemon at all (the rest are bound
//!   straight from their backing dirs under `run --isolate`).

mod decide;
pub mod direct;
mod explain;
mod rules;
#[cfg(test)]
mod tests;

pub use decide::decide;
pub use explain::{
    Action, Explanation, Subject, exact, explain, explain_decision, for_worker, shown,
};
pub use rules::ZoneRules;

use std::path::{Path, PathBuf};

use crate::error::Refusal;

/// Where an operation lands. `zone == None` means the mount root itself or
/// one of its entries (a zone dir seen from the root); `path` is relative to
/// the zone root, empty for the zone dir itself.
#[derive(Clone, Copy, Debug)]
pub struct Loc<'a> {
    pub zone: Option<&'a ZoneRules>,
    pub path: &'a Path,
}

impl<'a> Loc<'a> {
    pub fn root() -> Self {
        Loc {
            zone: None,
            path: Path::new(""),
        }
    }

    pub fn in_zone(zone: &'a ZoneRules, path: &'a Path) -> Self {
        Loc {
            zone: Some(zone),
            path,
        }
    }

    fn same_zone(&self, other: &Loc<'_>) -> bool {
        match (self.zone, other.zone) {
            (Some(a), Some(b)) => std::ptr::eq(a, b),
            _ => false,
        }
    }
}

/// The two approval classes of DESIGN §4.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    Write,
    Delete,
    /// Opening a file for reading (`approval.read`, `ask_read`).
    Read,
}

/// What an operation does, in the terms of DESIGN §3's rows.
#[derive(Clone, Copy, Debug)]
pub enum Op<'a> {
    /// Open an existing file for reading (`size` is its current size).
    Read { at: Loc<'a>, size: u64 },
    /// Change a file's content: open for writing or truncating, setattr
    /// size, fallocate, copy_file_range into. `new_size` when it is known.
    WriteContent { at: Loc<'a>, new_size: Option<u64> },
    /// Add a name: create, mkdir, symlink, mknod.
    NewName { at: Loc<'a>, is_dir: bool },
    /// chmod, chown, utimens, setxattr, removexattr of an entry of kind
    /// `is_dir` (a pattern for directories only, `keep/`, protects a
    /// directory's own mode, owner, times and xattrs too).
    Metadata { at: Loc<'a>, is_dir: bool },
    /// unlink (`is_dir` false), rmdir.
    Remove { at: Loc<'a>, is_dir: bool },
    /// rename (`exchange`: RENAME_EXCHANGE). `is_dir` is the kind of the
    /// source, `to_is_dir` the kind of what is already at the destination
    /// (None: nothing): a move is judged by what it moves *and* what it
    /// displaces.
    Rename {
        from: Loc<'a>,
        to: Loc<'a>,
        is_dir: bool,
        to_is_dir: Option<bool>,
        exchange: bool,
    },
    /// A hard link of `from` at the new name `to`.
    Link { from: Loc<'a>, to: Loc<'a> },
    /// mknod of a block or character device: checked as a new name, then
    /// refused whatever the zone allows, before anyone is asked.
    Device { at: Loc<'a> },
    /// Whether an existing entry is there for the worker at all: a lookup,
    /// a listing, the existence check before a removal or rename. `is_dir`
    /// is None before the entry is opened: then only what hides an entry
    /// of any kind (a sensitive root) applies, so nothing is opened for it.
    Look { at: Loc<'a>, is_dir: Option<bool> },
    /// `access(2)` with `W_OK`: could anything be written here? A question,
    /// not an operation: nothing is asked or recorded.
    MayWrite { at: Loc<'a>, is_dir: bool },
    /// A write, truncate or allocation through a handle already opened (and
    /// approved) for writing in `zone`: only the size limit still applies.
    Grow { zone: &'a ZoneRules, new_size: u64 },
}

impl<'a> Op<'a> {
    /// The one or two places an operation touches.
    pub fn places(&self) -> [Option<Loc<'a>>; 2] {
        match *self {
            Op::Read { at, .. }
            | Op::WriteContent { at, .. }
            | Op::NewName { at, .. }
            | Op::Metadata { at, .. }
            | Op::Remove { at, .. }
            | Op::Device { at }
            | Op::Look { at, .. }
            | Op::MayWrite { at, .. } => [Some(at), None],
            Op::Rename { from, to, .. } | Op::Link { from, to } => [Some(from), Some(to)],
            Op::Grow { .. } => [None, None],
        }
    }

    /// Whether the operation changes something (and so belongs in the
    /// ledger when allowed in a gated zone).
    pub fn changes(&self) -> bool {
        !matches!(
            self,
            Op::Read { .. } | Op::Look { .. } | Op::MayWrite { .. }
        )
    }
}

/// A path as the worker sees it: `/zone/rel`, `/zone` for the zone dir,
/// `/name` for an entry of the mount root (`zone` None), its exact bytes.
/// The one formatter of such paths: requests, the ledger and `status`
/// carry it; explanations show it escaped ([`worker_path`]).
pub fn worker_path_exact(zone: Option<&str>, rel: &Path) -> PathBuf {
    let mut s = std::ffi::OsString::from("/");
    if let Some(z) = zone {
        s.push(z);
        if !rel.as_os_str().is_empty() {
            s.push("/");
        }
    }
    s.push(rel.as_os_str());
    s.into()
}

/// [`worker_path_exact`] for people: escaped ([`crate::text::escape`]), so
/// a name the worker chose can't draw on a terminal or hide in a message.
pub fn worker_path(zone: Option<&str>, rel: &Path) -> String {
    crate::text::path(&worker_path_exact(zone, rel))
}

/// One approval that an operation needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AskItem {
    pub class: Class,
    pub zone: String,
    pub path: PathBuf,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Refuse(Refusal),
    /// Allowed only if every listed item is approved.
    Ask(Vec<AskItem>),
}

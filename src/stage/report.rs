//! The answers of `changes`, `commit` and `discard` as types: what the
//! stage service returns, the control socket sends (serialized once, its
//! keys in alphabetical order as every line of the protocol), and the CLI,
//! the Rust API and the Python client read back.
//!
//! ```text
//! {"zones": [{"zone": NAME, "staged": BOOL, "changes": [CHANGE...], "incomplete"?: true, "patch"?: TEXT}]}
//! {"zones": [{"zone": NAME, "applied": [CHANGE...], "conflicts": [CONFLICT...]}]}
//! {"zones": [{"zone": NAME, "discarded": [CHANGE...]}]}
//! ```
//!
//! A zone a commit or discard left alone (files open for writing) answers
//! `applied`, `discarded` and one `conflicts` item, whichever was asked.
//! Every name is exact: beside a `path`, `from` or `at` that is not UTF-8
//! (the text then has U+FFFD in place of what is not) stands its bytes in
//! base64, `path_b64`, `from_b64`, `at_b64`. A change carries who made its
//! first and its last change, `first` and `last` (`actor::Actor`: `pid`,
//! `comm`, `argv`, `uid`, `time`), when they were recorded.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::actor::Actor;

/// A name in JSON as the text and, when it is not UTF-8, its bytes in
/// base64 under `<key>_b64` (flattened into the item that holds it):
/// `exact_name!(module, "key", "key_b64")` for a name always there,
/// `exact_name!(opt module, ...)` for one that may be absent.
macro_rules! exact_name {
    ($module:ident, $key:literal, $b64:literal) => {
        mod $module {
            use std::path::{Path, PathBuf};

            use serde::{Deserialize, Deserializer, Serialize, Serializer};

            #[derive(Serialize, Deserialize)]
            struct Wire {
                #[serde(rename = $key)]
                text: String,
                #[serde(rename = $b64, default, skip_serializing_if = "Option::is_none")]
                b64: Option<String>,
            }

            pub fn serialize<S: Serializer>(p: &Path, s: S) -> Result<S::Ok, S::Error> {
                let (text, b64) = crate::text::path_for_json(p);
                Wire { text, b64 }.serialize(s)
            }

            pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
                let w = Wire::deserialize(d)?;
                Ok(crate::text::path_from_json(&w.text, w.b64.as_deref()))
            }
        }
    };
    (opt $module:ident, $key:literal, $b64:literal) => {
        mod $module {
            use std::path::PathBuf;

            use serde::{Deserialize, Deserializer, Serialize, Serializer};

            #[derive(Serialize, Deserialize)]
            struct Wire {
                #[serde(rename = $key, default, skip_serializing_if = "Option::is_none")]
                text: Option<String>,
                #[serde(rename = $b64, default, skip_serializing_if = "Option::is_none")]
                b64: Option<String>,
            }

            pub fn serialize<S: Serializer>(p: &Option<PathBuf>, s: S) -> Result<S::Ok, S::Error> {
                let (text, b64) = match p.as_deref().map(crate::text::path_for_json) {
                    Some((t, b)) => (Some(t), b),
                    None => (None, None),
                };
                Wire { text, b64 }.serialize(s)
            }

            pub fn deserialize<'de, D: Deserializer<'de>>(
                d: D,
            ) -> Result<Option<PathBuf>, D::Error> {
                let w = Wire::deserialize(d)?;
                Ok(w.text
                    .map(|t| crate::text::path_from_json(&t, w.b64.as_deref())))
            }
        }
    };
}

exact_name!(exact_path, "path", "path_b64");
exact_name!(opt exact_from, "from", "from_b64");
exact_name!(opt exact_at, "at", "at_b64");

/// What happened to a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Added,
    Modified,
    Deleted,
    Renamed,
}

impl Kind {
    /// As in JSON: `added`, `modified`, `deleted`, `renamed`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Added => "added",
            Kind::Modified => "modified",
            Kind::Deleted => "deleted",
            Kind::Renamed => "renamed",
        }
    }
}

/// What a changed path is (after the change; before it for a deletion).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileType {
    File,
    Dir,
    Symlink,
    Special,
}

impl FileType {
    /// As in JSON: `file`, `dir`, `symlink`, `special`.
    pub fn as_str(self) -> &'static str {
        match self {
            FileType::File => "file",
            FileType::Dir => "dir",
            FileType::Symlink => "symlink",
            FileType::Special => "special",
        }
    }
}

/// What differs in a modification.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum What {
    Content,
    Mode,
    Owner,
    Times,
    Xattrs,
    Target,
    Type,
}

/// One changed path of a zone: of a staged zone (from its stage: every
/// field the change has) or of a plain rw zone (as the mount saw it:
/// `path` and `kind` only, no renames).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// Relative to the zone dir.
    #[serde(flatten, with = "exact_path")]
    pub path: PathBuf,
    pub kind: Kind,
    /// A rename's source.
    #[serde(flatten, with = "exact_from")]
    pub from: Option<PathBuf>,
    /// Always there for a staged change; absent for a plain zone's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_type: Option<FileType>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_mode: Option<u32>,
    /// A deleted tree (or a dir replaced by a file or symlink, which
    /// removes it): how many entries it held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entries: Option<u64>,
    /// What differs for a modification.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub what: Vec<What>,
    /// `changes --diff`: a unified diff of a text file, or a line for a
    /// mode or a symlink's target ("" when there is nothing to show).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    /// Who made the path's first change (see `actor`); absent when not
    /// recorded (a stage from before attribution, a path past the bound).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first: Option<Actor>,
    /// Who made its last change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<Actor>,
}

impl Change {
    /// A plain rw zone's change: its path and kind, nothing else known.
    pub fn plain(path: PathBuf, kind: Kind) -> Change {
        Change {
            path,
            kind,
            from: None,
            file_type: None,
            size: None,
            mode: None,
            old_size: None,
            old_mode: None,
            entries: None,
            what: Vec::new(),
            diff: None,
            first: None,
            last: None,
        }
    }
}

/// A path left out of a commit, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conflict {
    /// Empty: the whole zone (it has files open for writing).
    #[serde(flatten, with = "exact_path")]
    pub path: PathBuf,
    pub why: String,
    /// Where the host's change is, when not at `path` itself: a dir
    /// above it, or an entry inside a dir it would remove.
    #[serde(flatten, with = "exact_at")]
    pub at: Option<PathBuf>,
}

/// One rw zone's changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZoneChanges {
    pub zone: String,
    pub staged: bool,
    pub changes: Vec<Change>,
    /// A plain zone whose workers changed more paths than the mount
    /// remembers: the list is not all.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub incomplete: bool,
    /// `changes --patch`, a staged zone's: its changes as one patch in
    /// git's extended diff format, paths relative to the zone dir (what
    /// `git apply` in a copy of the backing dir applies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
}

/// The answer to `changes`: each rw zone asked about, in the mount's
/// order (staged and plain alike).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangesReport {
    pub zones: Vec<ZoneChanges>,
}

impl ChangesReport {
    /// How many changes it lists.
    pub fn count(&self) -> usize {
        self.zones.iter().map(|z| z.changes.len()).sum()
    }
}

/// One staged zone's commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZoneCommit {
    pub zone: String,
    pub applied: Vec<Change>,
    pub conflicts: Vec<Conflict>,
    /// Only in a zone left alone (see [`ZoneCommit::left_alone`]): empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discarded: Option<Vec<Change>>,
}

impl ZoneCommit {
    /// A zone a commit or discard did not touch: a worker has `open`
    /// files of it open for writing.
    pub fn left_alone(zone: &str, open: usize) -> ZoneCommit {
        ZoneCommit {
            zone: zone.to_owned(),
            applied: Vec::new(),
            conflicts: vec![Conflict {
                path: PathBuf::new(),
                why: format!(
                    "a worker has {open} file(s) of /{zone} open for writing; try again once they are closed"
                ),
                at: None,
            }],
            discarded: Some(Vec::new()),
        }
    }
}

/// The answer to `commit`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitReport {
    pub zones: Vec<ZoneCommit>,
}

impl CommitReport {
    /// How many paths were left out (conflicts, zones left alone).
    pub fn conflicts(&self) -> usize {
        self.zones.iter().map(|z| z.conflicts.len()).sum()
    }
}

/// One staged zone's discard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZoneDiscard {
    pub zone: String,
    pub discarded: Vec<Change>,
    /// Only in a zone left alone (see [`ZoneCommit::left_alone`]): empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<Vec<Change>>,
    /// Only in a zone left alone: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conflicts: Option<Vec<Conflict>>,
}

impl ZoneDiscard {
    /// A zone a discard did not touch: a worker has `open` files of it
    /// open for writing.
    pub fn left_alone(zone: &str, open: usize) -> ZoneDiscard {
        let z = ZoneCommit::left_alone(zone, open);
        ZoneDiscard {
            zone: z.zone,
            discarded: Vec::new(),
            applied: Some(z.applied),
            conflicts: Some(z.conflicts),
        }
    }
}

/// The answer to `discard`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiscardReport {
    pub zones: Vec<ZoneDiscard>,
}

impl DiscardReport {
    /// How many zones were left alone.
    pub fn conflicts(&self) -> usize {
        self.zones
            .iter()
            .map(|z| z.conflicts.as_ref().map_or(0, Vec::len))
            .sum()
    }
}

/// One checkpoint of a zone, as `checkpoint` and `checkpoints` show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointInfo {
    pub id: u64,
    /// When it was taken: RFC 3339, UTC.
    pub time: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// How many paths changed since the checkpoint before it (or since
    /// the backing dir, for the oldest); `checkpoints` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paths: Option<u64>,
}

/// One staged zone's checkpoints, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZoneCheckpoints {
    pub zone: String,
    pub checkpoints: Vec<CheckpointInfo>,
    /// `checkpoint` only, when the zone took none: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

/// The answer to `checkpoint` (the one taken, `id`, in each zone) and
/// to `checkpoints` (each zone's, `id` absent).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointsReport {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    pub zones: Vec<ZoneCheckpoints>,
}

/// One staged zone's rewind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZoneRewind {
    pub zone: String,
    /// The checkpoint the zone (or `paths`) now shows.
    pub to: u64,
    /// The checkpoints after it, dropped (a whole-zone rewind).
    pub dropped: Vec<u64>,
    /// A rewind of some paths: those (relative to the zone dir).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<PathBuf>,
    /// A rewind of some paths: those of them unchanged since the
    /// checkpoint, left as they are (a hidden or protected path, which the
    /// worker can't change, is one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unchanged: Vec<PathBuf>,
    /// The zone was left alone: why (files open for writing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left_alone: Option<String>,
}

/// The answer to `rewind`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RewindReport {
    pub zones: Vec<ZoneRewind>,
}

impl RewindReport {
    /// How many zones were left alone.
    pub fn left_alone(&self) -> usize {
        self.zones.iter().filter(|z| z.left_alone.is_some()).count()
    }
}

/// Any of the answers, as the control socket sends it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Answer {
    Changes(ChangesReport),
    Commit(CommitReport),
    Discard(DiscardReport),
    Checkpoints(CheckpointsReport),
    Rewind(RewindReport),
}

#[cfg(test)]
mod tests;

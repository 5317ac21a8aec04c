//! The values a configuration is made of: a zone and its policy (access,
//! approvals, suffixes, size, protect/hide/ask_read, staged), the zone
//! table that `policy` and `fs` consume, and a worker file's zones as
//! written (before derivation).

use std::fmt;
use std::path::PathBuf;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxMode {
    /// Zones live under `<config dir>/<root>/<path>`, created on mount.
    Sandboxed,
    /// Zones are existing host directories.
    Direct,
}

/// Ro < Rw, so "stricter of two" is `min`.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    Ro,
    Rw,
}

/// PreApproved < Ask < Blocked, so "stricter of two" is `max`.
/// YAML spellings: preApproved | ask | blocked.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "camelCase")]
pub enum Approval {
    PreApproved,
    Ask,
    Blocked,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ApprovalPolicy {
    pub write: Approval,
    pub delete: Approval,
    /// Opening a file for reading (`preApproved` unless a block says).
    #[serde(default = "pre_approved", skip_serializing_if = "is_pre_approved")]
    pub read: Approval,
}

fn pre_approved() -> Approval {
    Approval::PreApproved
}

fn is_pre_approved(a: &Approval) -> bool {
    *a == Approval::PreApproved
}

/// A zone with no `approval:` block: every class preApproved.
impl Default for ApprovalPolicy {
    fn default() -> Self {
        Self {
            write: Approval::PreApproved,
            delete: Approval::PreApproved,
            read: Approval::PreApproved,
        }
    }
}

/// An `approval:` block as written: `None` for a class left out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ApprovalBlock {
    pub write: Option<Approval>,
    pub delete: Option<Approval>,
    pub read: Option<Approval>,
}

impl ApprovalBlock {
    /// What a class left out of the block means: `ask`.
    pub const LEFT_OUT: Approval = Approval::Ask;

    /// The policy the block gives: each class as written, else `ask`.
    pub fn policy(&self) -> ApprovalPolicy {
        ApprovalPolicy {
            write: self.write.unwrap_or(Self::LEFT_OUT),
            delete: self.delete.unwrap_or(Self::LEFT_OUT),
            // Reads are not gated unless the block says so.
            read: self.read.unwrap_or(Approval::PreApproved),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ZonePolicy {
    pub access: Access,
    pub approval: ApprovalPolicy,
    /// `None`: every name.
    pub suffixes: Option<Vec<String>>,
    pub max_file_bytes: Option<u64>,
    /// gitignore-style patterns, kept as written (checked to compile).
    pub protect: Vec<String>,
    /// gitignore-style patterns of paths hidden as sensitive roots are
    /// (ENOENT for everything, absent from listings).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hide: Vec<String>,
    /// gitignore-style patterns of files whose opening for reading asks.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ask_read: Vec<String>,
    /// Sensitive roots inside the backing dir, relative to it: invisible
    /// (ENOENT) in the mount. Computed from real paths when the project is
    /// loaded (empty with `--allow-sensitive-roots`); a worker can't
    /// declare or drop any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hidden: Vec<PathBuf>,
    /// A rw zone whose changes go to a stage, not the backing dir, until
    /// they are committed (never set on a ro zone).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub staged: bool,
}

impl ZonePolicy {
    /// `access` with nothing else: preApproved, every name, no size
    /// limit, nothing protected or hidden.
    pub fn plain(access: Access) -> ZonePolicy {
        ZonePolicy {
            access,
            approval: ApprovalPolicy::default(),
            suffixes: None,
            max_file_bytes: None,
            protect: Vec::new(),
            hide: Vec::new(),
            ask_read: Vec::new(),
            hidden: Vec::new(),
            staged: false,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Zone {
    pub name: String,
    /// Absolute and resolved (realpath of its longest existing ancestor).
    pub backing: PathBuf,
    pub policy: ZonePolicy,
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ZoneTable {
    pub mode: SandboxMode,
    pub zones: Vec<Zone>,
    /// The project file; `None` for the embedded default.
    pub source: Option<PathBuf>,
    /// `sandbox.max_checkpoints`: how many checkpoints each staged zone
    /// keeps (`--max-checkpoints` overrides it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_checkpoints: Option<u16>,
}

/// A zone a worker declares, as written, with where it was written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneRequest {
    pub name: String,
    /// `None`: the parent's.
    pub mode: Option<Access>,
    /// `None`: no `approval:` block, the parent's policy. In a block a
    /// class left out asks for `ask` (see [`ApprovalBlock::policy`]).
    pub approval: Option<ApprovalBlock>,
    pub suffixes: Option<Vec<String>>,
    pub max_file_bytes: Option<u64>,
    pub protect: Vec<String>,
    /// Added to the parent's (never removing one).
    pub hide: Vec<String>,
    /// Added to the parent's.
    pub ask_read: Vec<String>,
    /// `staged:` as written: `Some(true)` stages a parent's rw zone;
    /// `Some(false)` on a staged parent is an error.
    pub staged: Option<bool>,
    /// Line of its `staged:`.
    pub staged_line: Option<usize>,
    /// Line where the zone is named.
    pub line: Option<usize>,
    /// Line of its `mode:`.
    pub mode_line: Option<usize>,
    /// Field path prefix, `sandbox.zones.<name>`.
    pub field: String,
}

/// A parsed worker file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerDecl {
    pub name: Option<String>,
    pub file: PathBuf,
    /// `None`: no `sandbox:` section, so no zones at all.
    pub zones: Option<Vec<ZoneRequest>>,
}

impl WorkerDecl {
    /// The name errors use: `name:`, else the file stem.
    pub fn display_name(&self) -> String {
        match &self.name {
            Some(n) => n.clone(),
            None => self.file.file_stem().map_or_else(
                || self.file.display().to_string(),
                |s| s.to_string_lossy().into_owned(),
            ),
        }
    }
}

impl fmt::Display for SandboxMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SandboxMode::Sandboxed => "sandboxed",
            SandboxMode::Direct => "direct",
        })
    }
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Access::Ro => "ro",
            Access::Rw => "rw",
        })
    }
}

impl fmt::Display for Approval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Approval::PreApproved => "preApproved",
            Approval::Ask => "ask",
            Approval::Blocked => "blocked",
        })
    }
}

impl ZoneTable {
    pub fn zone(&self, name: &str) -> Option<&Zone> {
        self.zones.iter().find(|z| z.name == name)
    }
}

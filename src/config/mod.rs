//! Configuration: project files (which zones exist), worker files (which
//! zones a worker needs), and derivation (what a worker gets) — DESIGN §2.
//!
//! Owns: parsing (`yaml`, `parse`), validation of names, paths and backing
//! dirs (`validate`), the embedded default, and derivation (`derive`). The
//! result is a [`ZoneTable`] that `policy` and `fs` consume; nothing outside
//! this module reads YAML.
//!
//! Assumes: paths are checked when the config is loaded (realpath, overlap,
//! sensitive roots); what the host does to a backing dir afterwards is the
//! business of `backing`, which opens each zone root once and holds it.
//! Defaults: a zone without `mode` is `ro` (secure by default: writable only
//! when it says so; the embedded default's zones say `rw`). A zone without
//! an `approval:` block is `preApproved` for both classes; inside a block, a
//! class left out is `ask` (the seed's "ask (default)"), in a project file
//! and a worker file alike. A project file must have a `sandbox:` section
//! (a typo must not fall back to the embedded default's rw zones); a worker
//! file without one declares no zones.
//! Every error is a [`ConfigError`]: file, line, field path, one line.

mod derive;
mod parse;
pub mod presets;
mod validate;
mod yaml;

#[cfg(test)]
mod tests;

use std::fmt;
use std::fs;
use std::io::Read as _;
use std::path::{Path, PathBuf};

pub use derive::Tightening;
pub use validate::{SENSITIVE_ROOTS, resolve, sensitive_paths};
use yaml::Doc;

/// The project file picked up from the current directory when `--config`
/// is not given.
pub const PROJECT_FILE_NAME: &str = "zonemount.yaml";

/// The configuration used when there is no project file (DESIGN §2).
pub const DEFAULT_CONFIG: &str = "\
sandbox:
  mode: sandboxed
  root: .sandbox
  zones:
    cache: { mode: rw }
    workspace: { mode: rw }
";

/// Config files are small; anything bigger is a mistake (or `/dev/zero`).
const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

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

/// A configuration error. Displays as one line:
/// `project.yaml:7: sandbox.zones.data.mode: expected 'ro' or 'rw', got 'rx'`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// As given (`None` for the embedded default).
    pub file: Option<PathBuf>,
    /// The `--zone` argument at fault, as given (then `file` is `None`).
    pub arg: Option<String>,
    pub line: Option<usize>,
    /// Dotted path to the offending field; empty for YAML syntax errors.
    pub field: String,
    pub message: String,
}

impl ConfigError {
    pub fn new(
        file: Option<PathBuf>,
        line: Option<usize>,
        field: &str,
        message: impl Into<String>,
    ) -> Self {
        // One line, whatever a parser or the OS put into the text.
        let one_line = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
        Self {
            file,
            arg: None,
            line,
            field: one_line(field),
            message: one_line(&message.into()),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(arg) = &self.arg {
            // A `--zone` has no file, line or field: the argument says it.
            return write!(f, "--zone {arg}: {}", self.message);
        }
        match (&self.file, self.line) {
            (Some(file), Some(line)) => write!(f, "{}:{line}: ", file.display())?,
            (Some(file), None) => write!(f, "{}: ", file.display())?,
            (None, Some(line)) => write!(f, "line {line}: ")?,
            (None, None) => f.write_str("default config: ")?,
        }
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.message)
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

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// `--allow-sensitive-roots`.
    pub allow_sensitive_roots: bool,
    /// Homes whose sensitive roots no zone may touch.
    pub homes: Vec<PathBuf>,
}

/// Extra homes (colon-separated) whose sensitive roots are protected too,
/// besides /etc/passwd's and `$HOME`'s. It can only add protection, never
/// remove any; tests use it to point at a fake home.
pub const EXTRA_HOMES_ENV: &str = "ZONEMOUNT_EXTRA_HOMES";

impl LoadOptions {
    /// homes = every home dir in /etc/passwd, plus $HOME, plus
    /// `$ZONEMOUNT_EXTRA_HOMES`.
    pub fn from_host(allow_sensitive_roots: bool) -> Self {
        Self {
            allow_sensitive_roots,
            homes: validate::host_homes(),
        }
    }
}

/// Reads a config file as UTF-8 text (a leading BOM dropped). `shown` is
/// the path as given, for errors; `path` the one to open.
fn read_text(path: &Path, shown: &Path) -> Result<String, ConfigError> {
    let fail = |m: String| ConfigError::new(Some(shown.to_path_buf()), None, "", m);
    let file = fs::File::open(path).map_err(|e| fail(format!("cannot read: {e}")))?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| fail(format!("cannot read: {e}")))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(fail(format!(
            "larger than {MAX_FILE_BYTES} bytes; not a config file"
        )));
    }
    decode(&bytes).map_err(fail)
}

fn decode(bytes: &[u8]) -> Result<String, String> {
    let text = std::str::from_utf8(bytes)
        .map_err(|e| format!("not UTF-8 text (byte {})", e.valid_up_to()))?;
    Ok(text.strip_prefix('\u{feff}').unwrap_or(text).to_owned())
}

/// `path` None: `<cwd>/zonemount.yaml` when it exists, else the embedded
/// default (two rw zones `cache` and `workspace`, sandboxed under
/// `<cwd>/.sandbox`). Relative paths are taken from `cwd`.
pub fn load_project(
    path: Option<&Path>,
    cwd: &Path,
    opts: &LoadOptions,
) -> Result<ZoneTable, ConfigError> {
    load_project_with(path, cwd, &[], opts)
}

/// A zone given on the command line: `--zone NAME=PATH[:ro|rw|staged]`.
/// Always direct mode (PATH an existing directory, relative to the current
/// directory); without a suffix it is read-only, as a zone without `mode:`
/// in a file is; `:staged` is `rw` with `staged: true`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CliZone {
    /// The argument as given, for errors.
    pub arg: String,
    pub name: String,
    pub path: String,
    pub access: Access,
    pub staged: bool,
}

impl CliZone {
    /// Parses `NAME=PATH[:ro|rw|staged]`. A PATH that itself ends in one
    /// of those needs the suffix written out (`d=./x:ro:rw`).
    pub fn parse(arg: &str) -> Result<CliZone, ConfigError> {
        let fail = |m: String| ConfigError {
            arg: Some(arg.to_owned()),
            ..ConfigError::new(None, None, "", m)
        };
        let Some((name, rest)) = arg.split_once('=') else {
            return Err(fail(
                "expected NAME=PATH[:ro|rw], e.g. --zone docs=../docs:ro".to_owned(),
            ));
        };
        parse::check_name(name).map_err(fail)?;
        let (path, access, staged) = match rest.rsplit_once(':') {
            Some((p, "ro")) => (p, Access::Ro, false),
            Some((p, "rw")) => (p, Access::Rw, false),
            Some((p, "staged")) => (p, Access::Rw, true),
            _ => (rest, Access::Ro, false),
        };
        if path.is_empty() || path.contains('\0') {
            return Err(fail(format!(
                "zone '{name}' needs a directory: expected NAME=PATH[:ro|rw], e.g. --zone {name}=.:rw"
            )));
        }
        Ok(CliZone {
            arg: arg.to_owned(),
            name: name.to_owned(),
            path: path.to_owned(),
            access,
            staged,
        })
    }
}

/// [`load_project`] plus the `--zone`s, each added to the project's zones
/// and checked as a zone of the file is (names, overlaps, sensitive roots,
/// a missing directory); a name the file has too is an error. With no
/// `path` and no `./zonemount.yaml`, the zones replace the embedded
/// default (a direct-mode table of just them; nothing is created).
pub fn load_project_with(
    path: Option<&Path>,
    cwd: &Path,
    zones: &[CliZone],
    opts: &LoadOptions,
) -> Result<ZoneTable, ConfigError> {
    if let Some(preset) = path.and_then(presets::named) {
        let preset =
            preset.map_err(|m| ConfigError::new(path.map(Path::to_path_buf), None, "", m))?;
        let shown = PathBuf::from(format!("{}{}", presets::PREFIX, preset.name));
        let dir = validate::resolve(cwd);
        return parse_project_with(
            preset.text,
            Some(&shown),
            &dir,
            Some(shown.clone()),
            zones,
            cwd,
            opts,
        );
    }
    let picked = cwd.join(PROJECT_FILE_NAME);
    if path.is_none() && !picked.exists() && !zones.is_empty() {
        let raw = parse::RawProject {
            mode: SandboxMode::Direct,
            root: None,
            zones: Vec::new(),
        };
        let dir = validate::resolve(cwd);
        return validate::build(
            &validate::Site { file: None },
            raw,
            &dir,
            zones,
            &dir,
            None,
            opts,
        );
    }
    let path = match path {
        Some(p) => Some(p.to_path_buf()),
        None if picked.exists() => Some(picked),
        None => None,
    };
    match path {
        Some(path) => {
            // The file's own name is kept (a symlinked config is anchored
            // where the link is); its directory is resolved.
            let joined = cwd.join(&path);
            let abs = match (joined.parent(), joined.file_name()) {
                (Some(dir), Some(name)) => validate::resolve(dir).join(name),
                _ => validate::resolve(&joined),
            };
            let text = read_text(&abs, &path)?;
            let dir = abs
                .parent()
                .map_or_else(|| cwd.to_path_buf(), Path::to_path_buf);
            parse_project_with(&text, Some(&path), &dir, Some(abs), zones, cwd, opts)
        }
        None => {
            let dir = validate::resolve(cwd);
            parse_project(DEFAULT_CONFIG, None, &dir, None, opts).map_err(|mut e| {
                // Lines of the embedded text mean nothing to a user.
                e.line = None;
                e
            })
        }
    }
}

/// Parses and validates project YAML. `file` names it in errors, `config_dir`
/// (absolute) anchors relative paths, `source` goes into the table.
pub fn parse_project(
    text: &str,
    file: Option<&Path>,
    config_dir: &Path,
    source: Option<PathBuf>,
    opts: &LoadOptions,
) -> Result<ZoneTable, ConfigError> {
    parse_project_with(text, file, config_dir, source, &[], config_dir, opts)
}

/// [`parse_project`] plus `--zone`s, whose paths are taken from `cwd`.
fn parse_project_with(
    text: &str,
    file: Option<&Path>,
    config_dir: &Path,
    source: Option<PathBuf>,
    zones: &[CliZone],
    cwd: &Path,
    opts: &LoadOptions,
) -> Result<ZoneTable, ConfigError> {
    let doc = Doc {
        file,
        line_offset: 0,
    };
    let tree = doc.parse(text)?;
    let raw = parse::project(&doc, tree.as_ref())?;
    let cwd = validate::resolve(cwd);
    validate::build(
        &validate::Site { file },
        raw,
        config_dir,
        zones,
        &cwd,
        source,
        opts,
    )
}

pub fn load_worker(path: &Path) -> Result<WorkerDecl, ConfigError> {
    let text = read_text(path, path)?;
    parse_worker(&text, path)
}

/// Parses a worker file's text: Markdown with YAML front matter, or plain
/// YAML. `file` names it in errors and in the result.
pub fn parse_worker(text: &str, file: &Path) -> Result<WorkerDecl, ConfigError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let (yaml_text, line_offset) = yaml::front_matter(text);
    let doc = Doc {
        file: Some(file),
        line_offset,
    };
    let tree = doc.parse(yaml_text)?;
    let raw = parse::worker(&doc, tree.as_ref())?;
    let zones = raw.zones.map(|zones| {
        zones
            .into_iter()
            .map(|z| ZoneRequest {
                name: z.name,
                mode: z.mode.map(|(m, _)| m),
                mode_line: z.mode.and_then(|(_, l)| l),
                approval: z.approval,
                suffixes: z.suffixes,
                max_file_bytes: z.max_file_bytes,
                protect: z.protect,
                hide: z.hide,
                ask_read: z.ask_read,
                staged: z.staged.map(|(s, _)| s),
                staged_line: z.staged.and_then(|(_, l)| l),
                line: z.line,
                field: z.field,
            })
            .collect()
    });
    Ok(WorkerDecl {
        name: raw.name,
        file: file.to_path_buf(),
        zones,
    })
}

/// One derivation step (DESIGN §2 "Derivation"). Chains: fold over workers.
pub fn derive(parent: &ZoneTable, worker: &WorkerDecl) -> Result<ZoneTable, ConfigError> {
    derive::derive(parent, worker).map(|(table, _)| table)
}

/// [`derive`], with each place where the worker asked for something looser
/// than its parent has (and got the parent's) for the caller to tell.
pub fn derive_noted(
    parent: &ZoneTable,
    worker: &WorkerDecl,
) -> Result<(ZoneTable, Vec<Tightening>), ConfigError> {
    derive::derive(parent, worker)
}

/// Sandboxed: create missing backing dirs (mkdir -p). Direct: each must
/// exist and be a directory. Errors name zone and path. Returns the names
/// of the zones whose backing dir this call created.
pub fn prepare_backing(table: &ZoneTable) -> Result<Vec<String>, ConfigError> {
    validate::prepare(table)
}

impl ZoneTable {
    pub fn zone(&self, name: &str) -> Option<&Zone> {
        self.zones.iter().find(|z| z.name == name)
    }
}

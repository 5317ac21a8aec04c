//! From raw specs to a [`ZoneTable`]: backing dirs resolved and checked
//! against each other and against the host's sensitive roots (under the
//! homes a [`LoadOptions`] names), and
//! [`prepare_backing`](super::prepare_backing)'s filesystem work.
//!
//! Comparisons use real paths: a symlink must not let two zones share a
//! directory or a zone reach `~/.ssh`. A sandboxed dir that doesn't exist yet
//! is compared as the real path of its longest existing ancestor plus the
//! rest, which is where `mkdir -p` will put it.

use std::ffi::OsString;
use std::fs;
use std::path::{Component, Path, PathBuf};

use super::error::ConfigError;
use super::model::{Access, ApprovalPolicy, SandboxMode, Zone, ZonePolicy, ZoneTable};
use super::parse::{RawProject, RawZone};
use super::zone_arg::CliZone;

/// Names under every home that hold credentials.
pub const SENSITIVE_ROOTS: &[&str] = &[
    ".ssh",
    ".aws",
    ".gnupg",
    ".kube",
    ".config/gcloud",
    ".config/gh",
    ".docker",
    ".pypirc",
    ".npmrc",
];

/// The sandboxed root when `root:` is not given.
pub const DEFAULT_ROOT: &str = ".sandbox";

/// Where an error about a zone points: its `path:` if it has one, else its
/// name.
fn zone_site(zone: &RawZone) -> (String, Option<usize>) {
    match &zone.path {
        Some((_, line)) => (format!("{}.path", zone.field), *line),
        None => (zone.field.clone(), zone.line),
    }
}

pub(super) struct Site<'a> {
    pub file: Option<&'a Path>,
}

impl Site<'_> {
    fn err(&self, line: Option<usize>, field: &str, message: impl Into<String>) -> ConfigError {
        ConfigError::new(self.file.map(Path::to_path_buf), line, field, message)
    }
}

/// Where a zone came from, for errors: the file's site, or its `--zone`.
fn err_for(
    site: &Site,
    z: &RawZone,
    line: Option<usize>,
    field: &str,
    message: impl Into<String>,
) -> ConfigError {
    match &z.cli {
        Some(arg) => ConfigError {
            arg: Some(arg.clone()),
            ..ConfigError::new(None, None, "", message)
        },
        None => site.err(line, field, message),
    }
}

/// Where an earlier zone was defined, as an error about a later one says
/// it: ` on line 4` (same file), ` (project.yaml line 4)` (seen from a
/// `--zone`), ` (--zone a=x)`.
fn defined_at(site: &Site, earlier: &RawZone, later: &RawZone) -> String {
    let line = zone_site(earlier).1;
    match (&earlier.cli, &later.cli, line) {
        (Some(arg), _, _) => format!(" (--zone {arg})"),
        (None, Some(_), Some(l)) => match site.file {
            Some(f) => format!(" ({} line {l})", f.display()),
            None => format!(" (line {l})"),
        },
        (None, Some(_), None) => match site.file {
            Some(f) => format!(" ({})", f.display()),
            None => " (the default config)".to_owned(),
        },
        (None, None, Some(l)) => format!(" on line {l}"),
        (None, None, None) => String::new(),
    }
}

/// A `--zone` as a zone of the file would be written.
fn raw_of(z: &CliZone) -> RawZone {
    RawZone {
        name: z.name.clone(),
        field: format!("sandbox.zones.{}", z.name),
        line: None,
        path: Some((z.path.clone(), None)),
        mode: Some((z.access, None)),
        approval: None,
        suffixes: None,
        max_file_bytes: None,
        protect: Vec::new(),
        hide: Vec::new(),
        ask_read: Vec::new(),
        staged: z.staged.then_some((true, None)),
        cli: Some(z.arg.clone()),
    }
}

/// Builds and checks the table. `config_dir` is absolute; so is `cwd`,
/// from which the `cli` zones' paths are taken (they come after the
/// file's, in direct mode whatever the file's mode).
pub(super) fn build(
    site: &Site,
    mut raw: RawProject,
    config_dir: &Path,
    cli: &[CliZone],
    cwd: &Path,
    source: Option<PathBuf>,
    opts: &LoadOptions,
) -> Result<ZoneTable, ConfigError> {
    for c in cli {
        let z = raw_of(c);
        if let Some(first) = raw.zones.iter().find(|r| r.name == z.name) {
            return Err(err_for(
                site,
                &z,
                None,
                "",
                format!(
                    "zone '{}' is already defined{}; give this one another name",
                    z.name,
                    defined_at(site, first, &z)
                ),
            ));
        }
        raw.zones.push(z);
    }
    let root = match (&raw.mode, &raw.root) {
        (SandboxMode::Direct, Some((_, line))) => {
            return Err(site.err(
                *line,
                "sandbox.root",
                "'root' only applies in sandboxed mode; direct-mode zones give their own 'path'",
            ));
        }
        (_, Some((root, line))) if root.is_empty() || root.contains('\0') => {
            return Err(site.err(*line, "sandbox.root", "expected a non-empty path"));
        }
        (_, Some((root, _))) => resolve(&config_dir.join(root)),
        (_, None) => resolve(&config_dir.join(DEFAULT_ROOT)),
    };
    let mut zones = Vec::with_capacity(raw.zones.len());
    for z in &raw.zones {
        let backing = match raw.mode {
            _ if z.cli.is_some() => direct_backing(site, z, cwd)?,
            SandboxMode::Sandboxed => sandboxed_backing(site, z, &root)?,
            SandboxMode::Direct => direct_backing(site, z, config_dir)?,
        };
        check_overlap(site, &raw.zones, &zones, z, &backing)?;
        // Secure by default: a zone is writable only when it says so.
        let access = z.mode.map_or(Access::Ro, |(m, _)| m);
        let staged = match z.staged {
            Some((true, line)) if access != Access::Rw => {
                return Err(err_for(
                    site,
                    z,
                    line,
                    &format!("{}.staged", z.field),
                    "'staged: true' needs a writable zone ('mode: rw'): a read-only zone \
                     has no changes to stage"
                        .to_owned(),
                ));
            }
            Some((s, _)) => s,
            None => false,
        };
        let hidden = if opts.allow_sensitive_roots {
            Vec::new()
        } else {
            check_sensitive(site, z, &backing, &opts.homes)?
        };
        zones.push(Zone {
            name: z.name.clone(),
            backing,
            policy: ZonePolicy {
                access,
                // No block: preApproved; a class left out of a block: ask.
                approval: z
                    .approval
                    .map_or_else(ApprovalPolicy::default, |b| b.policy()),
                suffixes: z.suffixes.clone(),
                max_file_bytes: z.max_file_bytes,
                protect: z.protect.clone(),
                hide: z.hide.clone(),
                ask_read: z.ask_read.clone(),
                hidden,
                staged,
            },
        });
    }
    Ok(ZoneTable {
        mode: raw.mode,
        zones,
        source,
        max_checkpoints: raw.max_checkpoints,
    })
}

fn sandboxed_backing(site: &Site, z: &RawZone, root: &Path) -> Result<PathBuf, ConfigError> {
    let (rel, line, field) = match &z.path {
        Some((p, line)) => (p.as_str(), *line, format!("{}.path", z.field)),
        None => (z.name.as_str(), z.line, z.field.clone()),
    };
    let rel_path = Path::new(rel);
    let escapes = rel_path
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir));
    if escapes {
        return Err(site.err(
            line,
            &field,
            format!(
                "path '{rel}' must stay inside the sandbox root {} (no leading '/', no '..')",
                root.display()
            ),
        ));
    }
    Ok(resolve(&root.join(rel_path)))
}

fn direct_backing(site: &Site, z: &RawZone, config_dir: &Path) -> Result<PathBuf, ConfigError> {
    let Some((path, line)) = &z.path else {
        return Err(err_for(
            site,
            z,
            z.line,
            &format!("{}.path", z.field),
            format!(
                "zone '{}' has no 'path'; direct mode needs the real directory of every zone",
                z.name
            ),
        ));
    };
    let field = format!("{}.path", z.field);
    let full = config_dir.join(path);
    match fs::metadata(&full) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            return Err(err_for(
                site,
                z,
                *line,
                &field,
                format!("'{path}' ({}) is not a directory", full.display()),
            ));
        }
        Err(e) => {
            return Err(err_for(
                site,
                z,
                *line,
                &field,
                format!(
                    "'{path}' ({}) does not exist or cannot be reached: {e}; direct mode needs an existing directory",
                    full.display()
                ),
            ));
        }
    }
    fs::canonicalize(&full).map_err(|e| {
        err_for(
            site,
            z,
            *line,
            &field,
            format!("cannot resolve '{path}' ({}): {e}", full.display()),
        )
    })
}

/// Equal, or one inside the other.
fn overlaps(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

fn check_overlap(
    site: &Site,
    raws: &[RawZone],
    done: &[Zone],
    z: &RawZone,
    backing: &Path,
) -> Result<(), ConfigError> {
    let Some(other) = done.iter().find(|o| overlaps(&o.backing, backing)) else {
        return Ok(());
    };
    let how = if other.backing == backing {
        "is the same directory as"
    } else if backing.starts_with(&other.backing) {
        "is inside"
    } else {
        "contains"
    };
    let other_line = raws
        .iter()
        .find(|r| r.name == other.name)
        .map_or_else(String::new, |r| defined_at(site, r, z));
    let (field, line) = zone_site(z);
    Err(err_for(
        site,
        z,
        line,
        &field,
        format!(
            "backing dir {} {how} the backing dir of zone '{}'{other_line} ({}); zones must not overlap",
            backing.display(),
            other.name,
            other.backing.display()
        ),
    ))
}

/// The sensitive paths under `home`, both as the real path of the entry and
/// as the entry's name in the real home (they differ when `~/.ssh` is itself
/// a symlink; both are refused).
pub fn sensitive_paths(home: &Path) -> Vec<PathBuf> {
    let real_home = resolve(home);
    let mut out = Vec::new();
    for name in SENSITIVE_ROOTS {
        for p in [real_home.join(name), resolve(&real_home.join(name))] {
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

/// Refuses a backing dir that is, or is inside, a sensitive root; returns
/// the sensitive roots it contains, relative to it, to be hidden.
fn check_sensitive(
    site: &Site,
    z: &RawZone,
    backing: &Path,
    homes: &[PathBuf],
) -> Result<Vec<PathBuf>, ConfigError> {
    let mut hidden = Vec::new();
    for home in homes {
        for s in sensitive_paths(home) {
            if let Ok(rel) = s.strip_prefix(backing) {
                if !rel.as_os_str().is_empty() {
                    if !hidden.iter().any(|h: &PathBuf| h == rel) {
                        hidden.push(rel.to_path_buf());
                    }
                    continue;
                }
            }
            if !backing.starts_with(&s) {
                continue;
            }
            let how = if s == backing { "is" } else { "is inside" };
            let (field, line) = zone_site(z);
            return Err(err_for(
                site,
                z,
                line,
                &field,
                format!(
                    "backing dir {} of zone '{}' {how} the sensitive path {}; refused (start with --allow-sensitive-roots to allow it)",
                    backing.display(),
                    z.name,
                    s.display()
                ),
            ));
        }
    }
    Ok(hidden)
}

/// Absolute real path of `path`, which need not exist: the longest existing
/// ancestor is canonicalized and the remaining components appended (`..`
/// among them taken lexically, as `mkdir -p` would walk them).
pub fn resolve(path: &Path) -> PathBuf {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let comps: Vec<Component> = abs.components().collect();
    for split in (1..=comps.len()).rev() {
        let head: PathBuf = comps[..split].iter().collect();
        if let Ok(mut real) = fs::canonicalize(&head) {
            append_lexically(&mut real, &comps[split..]);
            return real;
        }
    }
    let mut out = PathBuf::new();
    append_lexically(&mut out, &comps);
    out
}

fn append_lexically(out: &mut PathBuf, rest: &[Component]) {
    for c in rest {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
}

/// Sandboxed: `mkdir -p` each backing dir. Direct: each must be a directory.
pub(super) fn prepare(table: &ZoneTable) -> Result<Vec<String>, ConfigError> {
    let mut created = Vec::new();
    let err = |zone: &Zone, message: String| {
        ConfigError::new(
            table.source.clone(),
            None,
            &format!("sandbox.zones.{}", zone.name),
            message,
        )
    };
    for zone in &table.zones {
        if table.mode == SandboxMode::Sandboxed {
            if fs::symlink_metadata(&zone.backing).is_err() {
                created.push(zone.name.clone());
            }
            fs::create_dir_all(&zone.backing).map_err(|e| {
                err(
                    zone,
                    format!(
                        "cannot create backing dir {} of zone '{}': {e}",
                        zone.backing.display(),
                        zone.name
                    ),
                )
            })?;
        }
        match fs::metadata(&zone.backing) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(err(
                    zone,
                    format!(
                        "backing dir {} of zone '{}' is not a directory",
                        zone.backing.display(),
                        zone.name
                    ),
                ));
            }
            Err(e) => {
                return Err(err(
                    zone,
                    format!(
                        "backing dir {} of zone '{}' is missing: {e}",
                        zone.backing.display(),
                        zone.name
                    ),
                ));
            }
        }
    }
    Ok(created)
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
            homes: host_homes(),
        }
    }
}

/// Every home on the host: `/etc/passwd`'s sixth field, plus `$HOME`,
/// plus each of `$ZONEMOUNT_EXTRA_HOMES`.
pub(super) fn host_homes() -> Vec<PathBuf> {
    let passwd = fs::read_to_string("/etc/passwd").unwrap_or_default();
    let mut homes = homes_from_passwd(&passwd);
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let extra = std::env::var_os(EXTRA_HOMES_ENV).unwrap_or_default();
    for h in home.into_iter().chain(std::env::split_paths(&extra)) {
        if h.is_absolute() && !homes.contains(&h) {
            homes.push(h);
        }
    }
    homes
}

pub(super) fn homes_from_passwd(passwd: &str) -> Vec<PathBuf> {
    let mut homes: Vec<PathBuf> = Vec::new();
    for line in passwd.lines() {
        if line.starts_with('#') {
            continue;
        }
        let Some(home) = line.split(':').nth(5).filter(|h| h.starts_with('/')) else {
            continue;
        };
        let home = PathBuf::from(OsString::from(home));
        if !homes.contains(&home) {
            homes.push(home);
        }
    }
    homes
}

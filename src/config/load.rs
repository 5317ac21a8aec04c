//! Loading: the project file (or a preset, or the embedded default) and
//! the `--zone`s read, parsed and validated into a [`ZoneTable`]; a worker
//! file read and parsed into a [`WorkerDecl`]. The one reader of config
//! files (small UTF-8 text, a leading BOM dropped).

use std::fs;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use super::error::ConfigError;
use super::model::{SandboxMode, WorkerDecl, ZoneRequest, ZoneTable};
use super::validate::{self, LoadOptions};
use super::yaml::{self, Doc};
use super::zone_arg::CliZone;
use super::{parse, presets};

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
            max_checkpoints: None,
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

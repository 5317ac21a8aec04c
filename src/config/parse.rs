//! Schema walkers: project and worker YAML trees into raw zone specs, with
//! the line and field path of everything a later check may complain about.
//! Nothing here touches the filesystem.

use ignore::gitignore::GitignoreBuilder;

use super::error::ConfigError;
use super::model::{Access, Approval, ApprovalBlock, SandboxMode};
use super::yaml::{Doc, Node, SNode, check_once, get, get_set, join};

/// Keys a zone spec may have in a project file (`name` only in list form,
/// or equal to the map key).
const PROJECT_ZONE_KEYS: &[&str] = &[
    "name",
    "path",
    "mode",
    "approval",
    "suffixes",
    "max_file_bytes",
    "protect",
    "hide",
    "ask_read",
    "staged",
];
/// A worker asks for zones by name; where they live is the project's call.
const WORKER_ZONE_KEYS: &[&str] = &[
    "name",
    "mode",
    "approval",
    "suffixes",
    "max_file_bytes",
    "protect",
    "hide",
    "ask_read",
    "staged",
];

/// A value and the line it was written on.
pub(super) type At<T> = (T, Option<usize>);

/// One zone as written, before paths are resolved or a parent consulted.
#[derive(Debug)]
pub(super) struct RawZone {
    pub name: String,
    /// `sandbox.zones.<name>`: the prefix of every field path of this zone.
    pub field: String,
    /// Where the zone is named (map key or `name:` value).
    pub line: Option<usize>,
    pub path: Option<At<String>>,
    pub mode: Option<At<Access>>,
    /// `None`: no `approval:` block.
    pub approval: Option<ApprovalBlock>,
    pub suffixes: Option<Vec<String>>,
    pub max_file_bytes: Option<u64>,
    pub protect: Vec<String>,
    /// `hide:` patterns as written (checked to compile).
    pub hide: Vec<String>,
    /// `ask_read:` patterns as written.
    pub ask_read: Vec<String>,
    /// `staged:` as written.
    pub staged: Option<At<bool>>,
    /// Given as `--zone` (this argument), not written in a file: direct
    /// mode, its path taken from the current directory.
    pub cli: Option<String>,
}

/// A project file's `sandbox:` section as written.
#[derive(Debug)]
pub(super) struct RawProject {
    pub mode: SandboxMode,
    pub root: Option<At<String>>,
    /// `max_checkpoints:` (checked: 1 to 65535).
    pub max_checkpoints: Option<u16>,
    pub zones: Vec<RawZone>,
}

/// A worker file's front matter as written.
#[derive(Debug)]
pub(super) struct RawWorker {
    pub name: Option<String>,
    pub zones: Option<Vec<RawZone>>,
}

/// The top-level mapping of a file (an empty file is an empty mapping).
fn top<'n>(doc: &Doc, tree: Option<&'n SNode>) -> Result<&'n [(SNode, SNode)], ConfigError> {
    match tree {
        Some(node) => doc.map(node, ""),
        None => Ok(&[]),
    }
}

/// The `sandbox:` section, which a project file must have: without one a
/// typo (`sandbx:`), an empty file or a file of other sections would
/// otherwise mean "some default zones", and a typo must not open anything.
pub(super) fn project(doc: &Doc, tree: Option<&SNode>) -> Result<RawProject, ConfigError> {
    let top = top(doc, tree)?;
    check_once(doc, top, "sandbox", "")?;
    let sandbox = match top
        .iter()
        .find(|(k, _)| matches!(&k.value, Node::Str(s) if s == "sandbox"))
    {
        Some((key, value)) if matches!(value.value, Node::Null) => {
            return Err(doc.err(
                Some(key),
                "sandbox",
                "the section is empty; list the zones under it (`zones: {}` for a mount with none)",
            ));
        }
        Some((_, value)) => value,
        None => return Err(missing_sandbox(doc, top)),
    };
    let entries = doc.map(sandbox, "sandbox")?;
    doc.check_keys(
        entries,
        &["mode", "root", "max_checkpoints", "zones"],
        "sandbox",
    )?;
    let mode = match get_set(entries, "mode") {
        None => SandboxMode::Sandboxed,
        Some(node) => match doc.string(node, "sandbox.mode")?.as_str() {
            "sandboxed" => SandboxMode::Sandboxed,
            "direct" => SandboxMode::Direct,
            other => {
                return Err(doc.err(
                    Some(node),
                    "sandbox.mode",
                    format!("expected 'sandboxed' or 'direct', got '{other}'"),
                ));
            }
        },
    };
    let root = match get_set(entries, "root") {
        None => None,
        Some(node) => Some((doc.string(node, "sandbox.root")?, doc.line(node))),
    };
    let max_checkpoints = match get_set(entries, "max_checkpoints") {
        None => None,
        Some(node) => Some(checkpoints(doc, node)?),
    };
    let zones = match get(entries, "zones") {
        None => Vec::new(),
        Some(node) => zones(doc, node, PROJECT_ZONE_KEYS)?,
    };
    Ok(RawProject {
        mode,
        root,
        max_checkpoints,
        zones,
    })
}

/// `sandbox.max_checkpoints`: a whole number from 1 to 65535 (as
/// `--max-checkpoints`).
fn checkpoints(doc: &Doc, node: &SNode) -> Result<u16, ConfigError> {
    const FIELD: &str = "sandbox.max_checkpoints";
    let why = |got: String| {
        doc.err(
            Some(node),
            FIELD,
            format!(
                "expected how many checkpoints each staged zone keeps, a whole number from 1 to \
                 65535 (past it the oldest are merged), got {got}"
            ),
        )
    };
    match &node.value {
        Node::Int(i) => u16::try_from(*i)
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| why(i.to_string())),
        other => Err(why(other.kind().to_string())),
    }
}

/// How far (in edits) a top-level key may be from `sandbox` to be taken
/// for a misspelling of it.
const NEAR_MISS: usize = 2;

/// Why a project file without `sandbox:` is refused, pointing at the key
/// that was probably meant.
fn missing_sandbox(doc: &Doc, top: &[(SNode, SNode)]) -> ConfigError {
    const NEEDED: &str = "a project config must have a `sandbox:` section listing its zones";
    let keys = top.iter().filter_map(|(k, _)| match &k.value {
        Node::Str(s) => Some((k, s.as_str())),
        _ => None,
    });
    let mut near: Option<(usize, &SNode, &str)> = None;
    for (node, key) in keys {
        if key == "zones" {
            return doc.err(
                Some(node),
                key,
                format!("belongs under `sandbox:` (indent it below a `sandbox:` line); {NEEDED}"),
            );
        }
        let d = strsim::damerau_levenshtein(&key.to_lowercase(), "sandbox");
        if d <= NEAR_MISS && near.is_none_or(|(best, _, _)| d < best) {
            near = Some((d, node, key));
        }
    }
    match near {
        Some((_, node, key)) => doc.err(
            Some(node),
            key,
            format!("did you mean `sandbox:`? {NEEDED}"),
        ),
        None if top.is_empty() => doc.err(None, "", format!("the file is empty; {NEEDED}")),
        None => doc.err(None, "", format!("no `sandbox:` section; {NEEDED}")),
    }
}

pub(super) fn worker(doc: &Doc, tree: Option<&SNode>) -> Result<RawWorker, ConfigError> {
    // A file that is one string is Markdown without front matter: a worker
    // that declares nothing.
    if tree.is_some_and(|t| matches!(t.value, Node::Str(_))) {
        return Ok(RawWorker {
            name: None,
            zones: None,
        });
    }
    let entries = top(doc, tree)?;
    for key in ["name", "sandbox"] {
        check_once(doc, entries, key, "")?;
    }
    let name = match get_set(entries, "name") {
        None => None,
        Some(node) => Some(doc.string(node, "name")?),
    };
    let Some(sandbox) = get_set(entries, "sandbox") else {
        return Ok(RawWorker { name, zones: None });
    };
    let entries = doc.map(sandbox, "sandbox")?;
    doc.check_keys(entries, &["zones"], "sandbox")?;
    let zones = match get(entries, "zones") {
        None => Vec::new(),
        Some(node) => zones(doc, node, WORKER_ZONE_KEYS)?,
    };
    Ok(RawWorker {
        name,
        zones: Some(zones),
    })
}

/// `zones:` in either form: a map of name → spec, or a list of specs with
/// `name:`.
fn zones(doc: &Doc, node: &SNode, keys: &[&str]) -> Result<Vec<RawZone>, ConfigError> {
    let mut out: Vec<RawZone> = Vec::new();
    match &node.value {
        Node::Null => {}
        Node::Map(entries) => {
            for (key, spec) in entries {
                let zone = map_entry(doc, key, spec, keys)?;
                push_unique(doc, &mut out, key, zone)?;
            }
        }
        Node::Seq(items) => {
            for (i, item) in items.iter().enumerate() {
                let (name_node, zone) = list_entry(doc, i, item, keys)?;
                push_unique(doc, &mut out, name_node, zone)?;
            }
        }
        other => {
            return Err(doc.err(
                Some(node),
                ZONES,
                format!(
                    "expected a mapping of zone names to specs, or a list of specs with 'name', got {}",
                    other.kind()
                ),
            ));
        }
    }
    Ok(out)
}

const ZONES: &str = "sandbox.zones";

/// `name: { spec }`; a `name:` inside must repeat the key.
fn map_entry(doc: &Doc, key: &SNode, spec: &SNode, keys: &[&str]) -> Result<RawZone, ConfigError> {
    let name = doc.string(key, ZONES)?;
    check_name(&name).map_err(|m| doc.err(Some(key), ZONES, m))?;
    let field = join(ZONES, &name);
    let entries = doc.map(spec, &field)?;
    doc.check_keys(entries, keys, &field)?;
    if let Some(inner) = get_set(entries, "name") {
        let inner_field = join(&field, "name");
        let inner_name = doc.string(inner, &inner_field)?;
        if inner_name != name {
            return Err(doc.err(
                Some(inner),
                &inner_field,
                format!("name '{inner_name}' differs from its key '{name}'"),
            ));
        }
    }
    zone(doc, name, doc.line(key), entries)
}

/// `- { name: x, ... }`; returns the `name` node too, for error positions.
fn list_entry<'n>(
    doc: &Doc,
    i: usize,
    item: &'n SNode,
    keys: &[&str],
) -> Result<(&'n SNode, RawZone), ConfigError> {
    let field = format!("{ZONES}[{i}]");
    let entries = doc.map(item, &field)?;
    doc.check_keys(entries, keys, &field)?;
    let name_field = join(&field, "name");
    let Some(name_node) = get_set(entries, "name") else {
        return Err(doc.err(
            Some(item),
            &name_field,
            "a zone in list form needs a 'name'",
        ));
    };
    let name = doc.string(name_node, &name_field)?;
    check_name(&name).map_err(|m| doc.err(Some(name_node), &name_field, m))?;
    Ok((name_node, zone(doc, name, doc.line(name_node), entries)?))
}

fn push_unique(
    doc: &Doc,
    out: &mut Vec<RawZone>,
    at: &SNode,
    zone: RawZone,
) -> Result<(), ConfigError> {
    if let Some(first) = out.iter().find(|z| z.name == zone.name) {
        let first_at = first
            .line
            .map_or_else(String::new, |l| format!(" (first defined on line {l})"));
        return Err(doc.err(
            Some(at),
            &zone.field,
            format!("duplicate zone '{}'{first_at}", zone.name),
        ));
    }
    out.push(zone);
    Ok(())
}

/// Zone names become directory names at the mount's root.
pub(super) fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("zone name is empty".to_owned());
    }
    if name == "." || name == ".." {
        return Err(format!("zone name '{name}' is not allowed"));
    }
    if name.len() > 255 {
        return Err(format!("zone name '{name}' is longer than 255 bytes"));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
    {
        return Err(format!(
            "zone name '{}' contains {bad:?}; only letters, digits, '_', '.' and '-' are allowed",
            name.escape_default()
        ));
    }
    Ok(())
}

fn zone(
    doc: &Doc,
    name: String,
    line: Option<usize>,
    spec: &[(SNode, SNode)],
) -> Result<RawZone, ConfigError> {
    let field = join("sandbox.zones", &name);
    let path = match get_set(spec, "path") {
        None => None,
        Some(node) => {
            let f = join(&field, "path");
            let p = doc.string(node, &f)?;
            if p.is_empty() || p.contains('\0') {
                return Err(doc.err(Some(node), &f, "expected a non-empty path"));
            }
            Some((p, doc.line(node)))
        }
    };
    let mode = match get_set(spec, "mode") {
        None => None,
        Some(node) => Some((access(doc, node, &join(&field, "mode"))?, doc.line(node))),
    };
    // `approval:` with nothing after it is a block that leaves every class
    // out (so each asks), as `approval: {}` is.
    let approval = match get(spec, "approval") {
        None => None,
        Some(node) => {
            let f = join(&field, "approval");
            let entries = doc.map(node, &f)?;
            doc.check_keys(entries, &["write", "delete", "read"], &f)?;
            let class = |key: &str| {
                get_set(entries, key)
                    .map(|n| approval(doc, n, &join(&f, key)))
                    .transpose()
            };
            Some(ApprovalBlock {
                write: class("write")?,
                delete: class("delete")?,
                read: class("read")?,
            })
        }
    };
    let suffixes = match get_set(spec, "suffixes") {
        None => None,
        Some(node) => Some(suffixes(doc, node, &join(&field, "suffixes"))?),
    };
    let max_file_bytes = match get_set(spec, "max_file_bytes") {
        None => None,
        Some(node) => Some(doc.u64(node, &join(&field, "max_file_bytes"))?),
    };
    let protect = match get_set(spec, "protect") {
        None => Vec::new(),
        Some(node) => patterns(doc, node, &join(&field, "protect"), "protect")?,
    };
    let hide = match get_set(spec, "hide") {
        None => Vec::new(),
        Some(node) => patterns(doc, node, &join(&field, "hide"), "hide")?,
    };
    let ask_read = match get_set(spec, "ask_read") {
        None => Vec::new(),
        Some(node) => patterns(doc, node, &join(&field, "ask_read"), "ask_read")?,
    };
    let staged = match get_set(spec, "staged") {
        None => None,
        Some(node) => Some((doc.boolean(node, &join(&field, "staged"))?, doc.line(node))),
    };
    Ok(RawZone {
        name,
        field,
        line,
        path,
        mode,
        approval,
        suffixes,
        max_file_bytes,
        protect,
        hide,
        ask_read,
        staged,
        cli: None,
    })
}

fn access(doc: &Doc, node: &SNode, field: &str) -> Result<Access, ConfigError> {
    match doc.string(node, field)?.as_str() {
        "ro" => Ok(Access::Ro),
        "rw" => Ok(Access::Rw),
        other => Err(doc.err(
            Some(node),
            field,
            format!("expected 'ro' or 'rw', got '{other}'"),
        )),
    }
}

fn approval(doc: &Doc, node: &SNode, field: &str) -> Result<Approval, ConfigError> {
    match doc.string(node, field)?.as_str() {
        "preApproved" => Ok(Approval::PreApproved),
        "ask" => Ok(Approval::Ask),
        "blocked" => Ok(Approval::Blocked),
        other => Err(doc.err(
            Some(node),
            field,
            format!("expected 'preApproved', 'ask' or 'blocked', got '{other}'"),
        )),
    }
}

fn suffixes(doc: &Doc, node: &SNode, field: &str) -> Result<Vec<String>, ConfigError> {
    let list = doc.strings(node, field)?;
    for (i, s) in list.iter().enumerate() {
        if s.is_empty() || s.contains('/') || s.contains('\0') {
            let item = node_at(node, i);
            return Err(doc.err(
                item,
                &format!("{field}[{i}]"),
                format!("a suffix must be non-empty and contain no '/', got '{s}'"),
            ));
        }
    }
    Ok(list)
}

/// `protect` and `hide` patterns are kept as written (`policy` compiles
/// them with the `ignore` crate's gitignore matcher); here we make sure they
/// compile, so a typo fails at load with a line. Negations (`!x`) are
/// refused: both only add (read-only or hidden paths), and through
/// derivation's union a worker's `!.git` would otherwise lift its parent's.
fn patterns(doc: &Doc, node: &SNode, field: &str, key: &str) -> Result<Vec<String>, ConfigError> {
    let list = doc.strings(node, field)?;
    for (i, p) in list.iter().enumerate() {
        let problem = if p.trim().is_empty() || p.contains('\0') || p.starts_with('#') {
            Some(format!("a {key} pattern must name something"))
        } else if p.starts_with('!') {
            Some(format!(
                "negated patterns are not allowed; {key} can only add"
            ))
        } else {
            let mut builder = GitignoreBuilder::new("/");
            builder
                .add_line(None, p)
                .err()
                .or_else(|| builder.build().err())
                .map(|e| e.to_string())
        };
        if let Some(problem) = problem {
            return Err(doc.err(
                node_at(node, i),
                &format!("{field}[{i}]"),
                format!("bad {key} pattern '{p}': {problem}"),
            ));
        }
    }
    Ok(list)
}

fn node_at(list: &SNode, i: usize) -> Option<&SNode> {
    match &list.value {
        Node::Seq(items) => items.get(i),
        _ => Some(list),
    }
}

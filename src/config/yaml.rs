//! A YAML tree whose every node knows its line, and the small vocabulary the
//! schema walkers in `parse` use to read it.
//!
//! serde-saphyr's `Spanned<T>` gives positions, but only to values it
//! deserializes directly, so instead of deriving the schema structs we
//! deserialize into one generic marked tree and walk it by hand. That keeps
//! file, line and field path on every semantic error (unknown key, bad value,
//! duplicate zone), which derived structs with `deny_unknown_fields` cannot.

use std::fmt;
use std::path::Path;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::{Budget, DuplicateKeyPolicy, NonFiniteFloatPolicy, SnippetMode, Spanned};

use super::error::ConfigError;

/// A YAML node. Scalars are typed by YAML 1.2 core-schema inference
/// (`strict_booleans`, so `yes`/`no` stay strings).
#[derive(Debug)]
pub(super) enum Node {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Seq(Vec<SNode>),
    Map(Vec<(SNode, SNode)>),
}

pub(super) type SNode = Spanned<Node>;

impl Node {
    /// What the node is, for "expected X, got Y" messages.
    pub(super) fn kind(&self) -> &'static str {
        match self {
            Node::Null => "nothing",
            Node::Bool(_) => "a boolean",
            Node::Int(_) | Node::Float(_) => "a number",
            Node::Str(_) => "a string",
            Node::Seq(_) => "a list",
            Node::Map(_) => "a mapping",
        }
    }

    /// A scalar's text: strings as written, numbers and booleans printed.
    /// Zone names like `2024` are numbers to YAML but names to us.
    pub(super) fn scalar_text(&self) -> Option<String> {
        match self {
            Node::Str(s) => Some(s.clone()),
            Node::Int(i) => Some(i.to_string()),
            Node::Bool(b) => Some(b.to_string()),
            Node::Float(f) => Some(f.to_string()),
            Node::Null | Node::Seq(_) | Node::Map(_) => None,
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_none<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        Node::deserialize(d)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Int(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
        Ok(Node::Int(v.into()))
    }
    fn visit_i128<E>(self, v: i128) -> Result<Node, E> {
        Ok(Node::Int(v))
    }
    fn visit_u128<E>(self, v: u128) -> Result<Node, E> {
        // Beyond i128 no field of ours can use it; keep the digits.
        Ok(i128::try_from(v).map_or_else(|_| Node::Str(v.to_string()), Node::Int))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
        Ok(Node::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Node, E> {
        Ok(Node::Str(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Node, E> {
        Ok(Node::Str(v))
    }
    fn visit_bytes<E>(self, v: &[u8]) -> Result<Node, E> {
        Ok(Node::Str(String::from_utf8_lossy(v).into_owned()))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = a.next_element()? {
            items.push(item);
        }
        Ok(Node::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = a.next_key()? {
            let value = a.next_value()?;
            entries.push((key, value));
        }
        Ok(Node::Map(entries))
    }
}

/// Deepest nesting accepted (serde-saphyr's default is 64).
pub(super) const MAX_DEPTH: usize = 32;
const PARSE_STACK_BYTES: usize = 16 * 1024 * 1024;

/// The parse proper: a tree, or the error's line (in `text`) and message.
fn parse_tree(text: &str) -> Result<Option<SNode>, (Option<usize>, String)> {
    let mut budget = Budget::default();
    budget.max_depth = MAX_DEPTH;
    // Config files are small; alias bombs should fail fast.
    budget.max_nodes = 20_000;
    budget.max_events = 100_000;
    let options = serde_saphyr::options! {
        budget: Some(budget),
        // Duplicates reach our walker, which names the field.
        duplicate_keys: DuplicateKeyPolicy::PassThrough,
        strict_booleans: true,
        non_finite_float_policy: NonFiniteFloatPolicy::PassThrough,
        with_snippet: false,
    };
    serde_saphyr::from_str_with_options::<Option<SNode>>(text, options).map_err(|e| {
        let loc = e.location();
        let line = loc
            .and_then(|l| usize::try_from(l.line()).ok())
            .filter(|l| *l > 0);
        let rendered = e.render_with_options(serde_saphyr::render_options! {
            snippets: SnippetMode::Off,
        });
        // The plain rendering ends in " at line L, column C"; our prefix
        // already says where, with the front-matter offset applied.
        let message = match loc {
            Some(l) => {
                let suffix = format!(" at line {}, column {}", l.line(), l.column());
                rendered
                    .strip_suffix(&suffix)
                    .unwrap_or(&rendered)
                    .to_owned()
            }
            None => rendered,
        };
        (line, message)
    })
}

/// One YAML source: the file errors name, and how many lines precede the
/// YAML in that file (front matter starts on line 2).
#[derive(Clone, Copy)]
pub(super) struct Doc<'a> {
    pub file: Option<&'a Path>,
    pub line_offset: usize,
}

impl Doc<'_> {
    /// The node's line in the file; `None` when the parser did not know it.
    pub(super) fn line(&self, node: &SNode) -> Option<usize> {
        match node.referenced.line() {
            0 => None,
            l => usize::try_from(l).ok().map(|l| l + self.line_offset),
        }
    }

    pub(super) fn err(
        &self,
        node: Option<&SNode>,
        field: &str,
        message: impl Into<String>,
    ) -> ConfigError {
        ConfigError::new(
            self.file.map(Path::to_path_buf),
            node.and_then(|n| self.line(n)),
            field,
            message,
        )
    }

    /// Parses `text` into a marked tree; `None` for an empty document.
    ///
    /// Runs on its own thread with a generous stack: the deserializer
    /// recurses per nesting level with large frames (about 45 KiB each in a
    /// debug build), and a stack overflow aborts the process, which "never
    /// panic on any input" must also rule out. Nesting is capped at
    /// [`MAX_DEPTH`] as well, far beyond what any config needs.
    pub(super) fn parse(&self, text: &str) -> Result<Option<SNode>, ConfigError> {
        let owned = text.to_owned();
        let worker = std::thread::Builder::new()
            .name("zonemount-config".to_owned())
            .stack_size(PARSE_STACK_BYTES)
            .spawn(move || parse_tree(&owned));
        let result = match worker {
            Ok(handle) => handle
                .join()
                .unwrap_or_else(|_| Err((None, "the YAML parser failed on this input".to_owned()))),
            Err(e) => Err((None, format!("cannot start the YAML parser: {e}"))),
        };
        result.map_err(|(line, message)| {
            ConfigError::new(
                self.file.map(Path::to_path_buf),
                line.map(|l| l + self.line_offset),
                "",
                format!("invalid YAML: {message}"),
            )
        })
    }

    /// The entries of a mapping node; null counts as an empty mapping.
    pub(super) fn map<'n>(
        &self,
        node: &'n SNode,
        field: &str,
    ) -> Result<&'n [(SNode, SNode)], ConfigError> {
        match &node.value {
            Node::Map(entries) => Ok(entries),
            Node::Null => Ok(&[]),
            other => Err(self.err(
                Some(node),
                field,
                format!("expected a mapping, got {}", other.kind()),
            )),
        }
    }

    /// Refuses keys outside `allowed`, non-string keys and repeated keys.
    pub(super) fn check_keys(
        &self,
        entries: &[(SNode, SNode)],
        allowed: &[&str],
        field: &str,
    ) -> Result<(), ConfigError> {
        let mut seen: Vec<&str> = Vec::new();
        for (key, _) in entries {
            let Node::Str(name) = &key.value else {
                return Err(self.err(
                    Some(key),
                    field,
                    format!("keys here must be strings, got {}", key.value.kind()),
                ));
            };
            let at = join(field, name);
            if !allowed.contains(&name.as_str()) {
                return Err(self.err(
                    Some(key),
                    &at,
                    format!(
                        "unknown key '{name}' (expected one of: {})",
                        allowed.join(", ")
                    ),
                ));
            }
            if seen.contains(&name.as_str()) {
                return Err(self.err(Some(key), &at, format!("duplicate key '{name}'")));
            }
            seen.push(name);
        }
        Ok(())
    }

    /// A string value (numbers and booleans are taken as written).
    pub(super) fn string(&self, node: &SNode, field: &str) -> Result<String, ConfigError> {
        node.value.scalar_text().ok_or_else(|| {
            self.err(
                Some(node),
                field,
                format!("expected a string, got {}", node.value.kind()),
            )
        })
    }

    /// A list of strings; a single string is not accepted, to catch
    /// `suffixes: .md` meaning something else than intended.
    pub(super) fn strings(&self, node: &SNode, field: &str) -> Result<Vec<String>, ConfigError> {
        let Node::Seq(items) = &node.value else {
            return Err(self.err(
                Some(node),
                field,
                format!("expected a list of strings, got {}", node.value.kind()),
            ));
        };
        items
            .iter()
            .enumerate()
            .map(|(i, item)| self.string(item, &format!("{field}[{i}]")))
            .collect()
    }

    /// `true` or `false`.
    pub(super) fn boolean(&self, node: &SNode, field: &str) -> Result<bool, ConfigError> {
        match &node.value {
            Node::Bool(b) => Ok(*b),
            other => Err(self.err(
                Some(node),
                field,
                format!("expected true or false, got {}", other.kind()),
            )),
        }
    }

    /// A non-negative integer.
    pub(super) fn u64(&self, node: &SNode, field: &str) -> Result<u64, ConfigError> {
        match &node.value {
            Node::Int(i) => u64::try_from(*i).map_err(|_| {
                self.err(
                    Some(node),
                    field,
                    format!("expected a number of bytes from 0 to {}, got {i}", u64::MAX),
                )
            }),
            other => Err(self.err(
                Some(node),
                field,
                format!("expected a whole number of bytes, got {}", other.kind()),
            )),
        }
    }
}

/// The value under `key` in a mapping's entries.
pub(super) fn get<'n>(entries: &'n [(SNode, SNode)], key: &str) -> Option<&'n SNode> {
    entries
        .iter()
        .find(|(k, _)| matches!(&k.value, Node::Str(s) if s == key))
        .map(|(_, v)| v)
}

/// Refuses a second `key` among a mapping's entries (pointing at the
/// second, naming the first's line), for the keys we read at a level whose
/// other keys belong to someone else and aren't checked: `get` would take
/// the first and silently drop the rest.
pub(super) fn check_once(
    doc: &Doc,
    entries: &[(SNode, SNode)],
    key: &str,
    field: &str,
) -> Result<(), ConfigError> {
    let mut same = entries
        .iter()
        .map(|(k, _)| k)
        .filter(|k| matches!(&k.value, Node::Str(s) if s == key));
    let (Some(first), Some(again)) = (same.next(), same.next()) else {
        return Ok(());
    };
    let first_at = doc
        .line(first)
        .map(|l| format!(" (first on line {l})"))
        .unwrap_or_default();
    Err(doc.err(
        Some(again),
        &join(field, key),
        format!("duplicate key '{key}'{first_at}"),
    ))
}

/// Like [`get`], but a null value counts as absent (`mode:` with nothing).
pub(super) fn get_set<'n>(entries: &'n [(SNode, SNode)], key: &str) -> Option<&'n SNode> {
    get(entries, key).filter(|v| !matches!(v.value, Node::Null))
}

/// `a.b` field paths; the root is the empty path.
pub(super) fn join(field: &str, key: &str) -> String {
    if field.is_empty() {
        key.to_owned()
    } else {
        format!("{field}.{key}")
    }
}

/// Splits Markdown front matter from its body. Returns the YAML text and how
/// many lines precede it. A file that doesn't open with a `---` line, or
/// whose front matter is never closed, is taken as plain YAML.
pub(super) fn front_matter(text: &str) -> (&str, usize) {
    let mut lines = text.split_inclusive('\n');
    let is_marker = |l: &str, m: &str| l.trim_end() == m;
    match lines.next() {
        Some(first) if is_marker(first, "---") => {
            let start = first.len();
            let mut end = start;
            for line in lines {
                if is_marker(line, "---") || is_marker(line, "...") {
                    return (text.get(start..end).unwrap_or(""), 1);
                }
                end += line.len();
            }
            (text, 0)
        }
        _ => (text, 0),
    }
}

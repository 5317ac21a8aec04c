//! A zone's rules, compiled once at mount: access, approval levels,
//! suffixes, size limit, `protect` patterns and hidden sensitive roots,
//! with the path predicates [`decide`](super::decide) is built from.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use globset::{Glob, GlobMatcher};
use ignore::gitignore::{Gitignore, GitignoreBuilder};

use super::Class;
use crate::config::{Access, Approval, ApprovalPolicy, Zone};

/// The rules of one zone, compiled once at mount.
#[derive(Debug)]
pub struct ZoneRules {
    pub name: String,
    pub access: Access,
    pub approval: ApprovalPolicy,
    pub suffixes: Option<Vec<String>>,
    pub max_file_bytes: Option<u64>,
    protect: Gitignore,
    /// Anchored protect patterns (as written, and split into per-component
    /// matchers): a directory rename that would carry one of them away is
    /// refused.
    anchored: Vec<(String, Vec<GlobMatcher>)>,
    /// Sensitive roots inside the zone, relative to its root: hidden.
    hidden: Vec<PathBuf>,
    /// `hide` patterns: what they match is hidden as a sensitive root is.
    hide: Gitignore,
    /// Anchored `hide` patterns, as for `protect`'s.
    hide_anchored: Vec<(String, Vec<GlobMatcher>)>,
    /// `ask_read` patterns: opening a match for reading asks.
    ask_read: Gitignore,
    /// Changes go to a stage: `ask` writes and deletes proceed (the
    /// commit is the decision); `blocked` still refuses.
    pub staged: bool,
}

/// gitignore-style `patterns` compiled, and the anchored ones (a `/`
/// inside) split into per-component matchers.
type Anchored = Vec<(String, Vec<GlobMatcher>)>;

fn patterns(list: &[String]) -> Result<(Gitignore, Anchored), ignore::Error> {
    let mut b = GitignoreBuilder::new("/");
    let mut anchored = Vec::new();
    for pat in list {
        b.add_line(None, pat)?;
        let body = pat.trim_end_matches('/');
        if body.contains('/') {
            let comps = body
                .trim_start_matches('/')
                .split('/')
                .filter(|c| !c.is_empty())
                .map(|c| Glob::new(c).map(|g| g.compile_matcher()))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| ignore::Error::Glob {
                    glob: Some(pat.clone()),
                    err: e.to_string(),
                })?;
            anchored.push((pat.clone(), comps));
        }
    }
    Ok((b.build()?, anchored))
}

/// The anchored pattern that names something strictly below `dir`.
fn below<'a>(anchored: &'a Anchored, dir: &Path) -> Option<&'a str> {
    let comps: Vec<_> = dir.components().map(|c| c.as_os_str()).collect();
    anchored
        .iter()
        .find(|(_, pat)| {
            pat.len() > comps.len()
                && pat
                    .iter()
                    .zip(&comps)
                    .all(|(m, c)| m.is_match(Path::new(c)))
        })
        .map(|(orig, _)| orig.as_str())
}

impl ZoneRules {
    /// Compile a zone's policy. `protect` patterns are gitignore-style,
    /// relative to the zone root.
    pub fn compile(zone: &Zone) -> Result<Self, ignore::Error> {
        let (protect, anchored) = patterns(&zone.policy.protect)?;
        let (hide, hide_anchored) = patterns(&zone.policy.hide)?;
        let (ask_read, _) = patterns(&zone.policy.ask_read)?;
        let hidden = zone.policy.hidden.clone();
        Ok(ZoneRules {
            name: zone.name.clone(),
            access: zone.policy.access,
            approval: zone.policy.approval,
            suffixes: zone.policy.suffixes.clone(),
            max_file_bytes: zone.policy.max_file_bytes,
            protect,
            anchored,
            hidden,
            hide,
            hide_anchored,
            ask_read,
            staged: zone.policy.staged,
        })
    }

    /// Whether anything in the zone may be hidden, whatever its kind
    /// (`hide` patterns, sensitive roots; `suffixes` exempt directories).
    pub fn hides_paths(&self) -> bool {
        !self.hidden.is_empty() || !self.hide.is_empty()
    }

    /// Whether `path` (relative to the zone root) is, or is inside, a
    /// hidden sensitive root.
    pub(super) fn is_sensitive(&self, path: &Path) -> bool {
        self.sensitive_root_of(path).is_some()
    }

    /// The `hide` pattern (as written) that `path` matches, or a parent
    /// of it does. A pattern for directories only (`secrets/`) hides a
    /// file of that name too: what kind of entry it is doesn't matter to
    /// keeping it out of sight.
    pub(super) fn hidden_by(&self, path: &Path) -> Option<&str> {
        if path.as_os_str().is_empty() || self.hide.is_empty() {
            return None;
        }
        let abs = Path::new("/").join(path);
        [false, true].into_iter().find_map(|is_dir| {
            match self.hide.matched_path_or_any_parents(&abs, is_dir) {
                ignore::Match::Ignore(glob) => Some(glob.original()),
                _ => None,
            }
        })
    }

    /// The anchored `hide` pattern strictly below `dir`, if any: renaming
    /// `dir` would carry what it hides to a name it doesn't.
    pub(super) fn hidden_below(&self, dir: &Path) -> Option<&str> {
        below(&self.hide_anchored, dir)
    }

    /// The hidden sensitive root that `path` is or is inside.
    pub(super) fn sensitive_root_of(&self, path: &Path) -> Option<&Path> {
        self.hidden
            .iter()
            .find(|h| path.starts_with(h))
            .map(PathBuf::as_path)
    }

    /// A hidden sensitive root strictly below `dir`: renaming `dir` would
    /// carry it to a visible name.
    pub(super) fn sensitive_below(&self, dir: &Path) -> Option<&Path> {
        self.hidden
            .iter()
            .find(|h| h.starts_with(dir) && h.as_path() != dir)
            .map(PathBuf::as_path)
    }

    /// Whether `name` may be seen at all (directories are exempt from suffixes).
    pub(super) fn visible(&self, name: &OsStr, is_dir: bool) -> bool {
        is_dir || self.suffix_allowed(name)
    }

    fn suffix_allowed(&self, name: &OsStr) -> bool {
        match &self.suffixes {
            None => true,
            Some(list) => {
                let name = name.as_encoded_bytes();
                list.iter().any(|s| name.ends_with(s.as_bytes()))
            }
        }
    }

    /// Whether `path` (relative to the zone root) is, or is inside, a
    /// protected path.
    pub(super) fn is_protected(&self, path: &Path, is_dir: bool) -> bool {
        self.protected_by(path, is_dir).is_some()
    }

    /// The protect pattern (as written) that covers `path`, if any.
    pub(super) fn protected_by(&self, path: &Path, is_dir: bool) -> Option<&str> {
        if path.as_os_str().is_empty() || self.protect.is_empty() {
            return None;
        }
        let abs = Path::new("/").join(path);
        match self.protect.matched_path_or_any_parents(&abs, is_dir) {
            ignore::Match::Ignore(glob) => Some(glob.original()),
            _ => None,
        }
    }

    /// Whether an anchored protect pattern names something strictly below
    /// `dir`: renaming `dir` would move it out of protection.
    pub(super) fn protects_below(&self, dir: &Path) -> bool {
        self.protected_below(dir).is_some()
    }

    /// The anchored protect pattern strictly below `dir`, if any.
    pub(super) fn protected_below(&self, dir: &Path) -> Option<&str> {
        below(&self.anchored, dir)
    }

    /// Whether changes here are gated (write or delete is not
    /// `preApproved`): the ledger then lists every change made without
    /// asking too.
    pub fn gated(&self) -> bool {
        self.approval.write != Approval::PreApproved
            || self.approval.delete != Approval::PreApproved
    }

    /// The approval policy of one class.
    /// What the zone's approval policy says for `class`, as applied: on
    /// a staged zone a write or delete that would ask proceeds into the
    /// stage, where it can't reach the host until committed.
    pub fn level(&self, class: Class) -> Approval {
        let level = match class {
            Class::Write => self.approval.write,
            Class::Delete => self.approval.delete,
            // A read is not a change: staging doesn't answer it.
            Class::Read => return self.approval.read,
        };
        match level {
            Approval::Ask if self.staged => Approval::PreApproved,
            other => other,
        }
    }

    /// [`level`](Self::level) for `path`: a read of a path an `ask_read`
    /// pattern matches asks (at least).
    pub fn level_at(&self, class: Class, path: &Path) -> Approval {
        let level = self.level(class);
        if class == Class::Read && level == Approval::PreApproved && self.asks_to_read(path) {
            return Approval::Ask;
        }
        level
    }

    /// The `ask_read` pattern (as written) that `path` matches, if any.
    pub(super) fn ask_read_by(&self, path: &Path) -> Option<&str> {
        if path.as_os_str().is_empty() || self.ask_read.is_empty() {
            return None;
        }
        let abs = Path::new("/").join(path);
        match self.ask_read.matched_path_or_any_parents(&abs, false) {
            ignore::Match::Ignore(glob) => Some(glob.original()),
            _ => None,
        }
    }

    fn asks_to_read(&self, path: &Path) -> bool {
        self.ask_read_by(path).is_some()
    }
}

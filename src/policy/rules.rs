//! A zone's rules, compiled once at mount: access, approval levels,
//! suffixes, size limit, `protect` patterns and hidden sensitive roots,
//! with the path predicates [`decide`](super::decide) is built from.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use globset::{Glob, GlobMatcher};
use ignore::gitignore::{Gitignore, GitignoreBuilder};

use super::Class;
use crate::config::{Access, Approval, ApprovalPolicy, Zone};
use crate::error::Refusal;

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
    /// The last component of each hidden path, so the common case (a name
    /// that can't be one) costs no path building.
    hidden_names: Vec<OsString>,
}

impl ZoneRules {
    /// Compile a zone's policy. `protect` patterns are gitignore-style,
    /// relative to the zone root.
    pub fn compile(zone: &Zone) -> Result<Self, ignore::Error> {
        let mut b = GitignoreBuilder::new("/");
        let mut anchored = Vec::new();
        for pat in &zone.policy.protect {
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
        let hidden = zone.policy.hidden.clone();
        let hidden_names = hidden
            .iter()
            .filter_map(|h| h.file_name().map(OsStr::to_os_string))
            .collect();
        Ok(ZoneRules {
            name: zone.name.clone(),
            access: zone.policy.access,
            approval: zone.policy.approval,
            suffixes: zone.policy.suffixes.clone(),
            max_file_bytes: zone.policy.max_file_bytes,
            protect: b.build()?,
            anchored,
            hidden,
            hidden_names,
        })
    }

    /// Whether an entry called `name` could be a hidden sensitive root
    /// (cheap; [`is_sensitive`](Self::is_sensitive) decides).
    pub fn may_hide(&self, name: &OsStr) -> bool {
        self.hidden_names.iter().any(|n| n == name)
    }

    /// Whether `path` (relative to the zone root) is, or is inside, a
    /// hidden sensitive root.
    pub fn is_sensitive(&self, path: &Path) -> bool {
        self.sensitive_root_of(path).is_some()
    }

    /// The hidden sensitive root that `path` is or is inside.
    pub fn sensitive_root_of(&self, path: &Path) -> Option<&Path> {
        self.hidden
            .iter()
            .find(|h| path.starts_with(h))
            .map(PathBuf::as_path)
    }

    /// A hidden sensitive root strictly below `dir`: renaming `dir` would
    /// carry it to a visible name.
    pub fn sensitive_below(&self, dir: &Path) -> Option<&Path> {
        self.hidden
            .iter()
            .find(|h| h.starts_with(dir) && h.as_path() != dir)
            .map(PathBuf::as_path)
    }

    /// Whether an entry at `path` is invisible, and why: a sensitive root,
    /// or a file name outside `suffixes`.
    pub fn hiding(&self, path: &Path, is_dir: bool) -> Option<Refusal> {
        let name = path.file_name()?;
        if self.may_hide(name) && self.is_sensitive(path) {
            Some(Refusal::Sensitive)
        } else if !self.visible(name, is_dir) {
            Some(Refusal::Hidden)
        } else {
            None
        }
    }

    /// Whether `name` may be seen at all (directories are exempt from suffixes).
    pub fn visible(&self, name: &OsStr, is_dir: bool) -> bool {
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
    pub fn is_protected(&self, path: &Path, is_dir: bool) -> bool {
        self.protected_by(path, is_dir).is_some()
    }

    /// The protect pattern (as written) that covers `path`, if any.
    pub fn protected_by(&self, path: &Path, is_dir: bool) -> Option<&str> {
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
    pub fn protects_below(&self, dir: &Path) -> bool {
        self.protected_below(dir).is_some()
    }

    /// The anchored protect pattern strictly below `dir`, if any.
    pub fn protected_below(&self, dir: &Path) -> Option<&str> {
        let comps: Vec<_> = dir.components().map(|c| c.as_os_str()).collect();
        self.anchored
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

    /// The approval policy of one class.
    pub fn level(&self, class: Class) -> Approval {
        match class {
            Class::Write => self.approval.write,
            Class::Delete => self.approval.delete,
        }
    }
}

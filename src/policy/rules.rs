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
    /// The protect patterns' shapes: a directory rename that would carry
    /// something out of (or into) one of them is refused.
    protect_shapes: Vec<Shape>,
    /// Sensitive roots inside the zone, relative to its root: hidden.
    hidden: Vec<PathBuf>,
    /// `hide` patterns: what they match is hidden as a sensitive root is.
    hide: Gitignore,
    /// The `hide` patterns' shapes, as for `protect`'s.
    hide_shapes: Vec<Shape>,
    /// `ask_read` patterns: opening a match for reading asks.
    ask_read: Gitignore,
    /// Their shapes: moving a directory out from under one asks to read.
    ask_read_shapes: Vec<Shape>,
    /// Changes go to a stage: `ask` writes and deletes proceed (the
    /// commit is the decision); `blocked` still refuses.
    pub staged: bool,
}

/// gitignore-style `patterns` compiled, and each as a [`Shape`].
fn patterns(list: &[String]) -> Result<(Gitignore, Vec<Shape>), ignore::Error> {
    let mut b = GitignoreBuilder::new("/");
    for pat in list {
        b.add_line(None, pat)?;
    }
    Ok((
        b.build()?,
        list.iter().filter_map(|p| Shape::new(p)).collect(),
    ))
}

/// One pattern as components from the zone root (a pattern without `/`
/// matches at any depth: a leading "any depth" part), to ask whether where
/// a directory sits changes what the pattern matches below it.
#[derive(Debug)]
struct Shape {
    /// As written.
    pattern: String,
    parts: Vec<Part>,
}

#[derive(Debug)]
enum Part {
    /// `**`: zero or more components.
    AnyDepth,
    /// One component (a glob that can't be compiled matches anything: the
    /// question is only ever "could it", so that errs on the safe side).
    One(Option<GlobMatcher>),
}

impl Shape {
    /// gitignore's rules: `!` negates (a negation moved is as much a
    /// change as a match), a trailing `/` means directories only, a `/`
    /// elsewhere anchors the pattern at the root.
    fn new(pattern: &str) -> Option<Shape> {
        let body = pattern.trim_end_matches(' ');
        let body = body.strip_prefix('!').unwrap_or(body);
        if body.is_empty() || body.starts_with('#') {
            return None;
        }
        let body = body.trim_end_matches('/');
        let anchored = body.contains('/');
        let mut parts = Vec::new();
        if !anchored {
            parts.push(Part::AnyDepth);
        }
        for c in body.split('/').filter(|c| !c.is_empty()) {
            parts.push(match c {
                "**" => Part::AnyDepth,
                c => Part::One(Glob::new(c).ok().map(|g| g.compile_matcher())),
            });
        }
        Some(Shape {
            pattern: pattern.to_owned(),
            parts,
        })
    }

    /// `states` with every `**` also skipped (it may match nothing).
    fn skip_any(&self, states: &mut [bool]) {
        for i in 0..self.parts.len() {
            if states[i] && matches!(self.parts[i], Part::AnyDepth) {
                states[i + 1] = true;
            }
        }
    }

    /// Whether the pattern may match something strictly below `dir` that
    /// it would not match below another directory: some way of matching
    /// it has used `dir`'s own components and is not finished. Only a
    /// leading "any depth" that took all of `dir` leaves the place out.
    fn straddles(&self, dir: &Path) -> bool {
        let n = self.parts.len();
        let mut states = vec![false; n + 1];
        states[0] = true;
        self.skip_any(&mut states);
        for c in dir.components() {
            let c = Path::new(c.as_os_str());
            let mut next = vec![false; n + 1];
            for (i, part) in self.parts.iter().enumerate() {
                if !states[i] {
                    continue;
                }
                match part {
                    Part::AnyDepth => next[i] = true,
                    Part::One(None) => next[i + 1] = true,
                    Part::One(Some(g)) if g.is_match(c) => next[i + 1] = true,
                    Part::One(_) => {}
                }
            }
            self.skip_any(&mut next);
            states = next;
        }
        let mut placeless = vec![false; n + 1];
        if matches!(self.parts.first(), Some(Part::AnyDepth)) {
            placeless[0] = true;
            self.skip_any(&mut placeless);
        }
        (0..n).any(|i| states[i] && !placeless[i])
    }
}

/// The first of `shapes` that [straddles](Shape::straddles) `dir`.
fn straddled<'a>(shapes: &'a [Shape], dir: &Path) -> Option<&'a str> {
    shapes
        .iter()
        .find(|s| s.straddles(dir))
        .map(|s| s.pattern.as_str())
}

impl ZoneRules {
    /// Compile a zone's policy. `protect` patterns are gitignore-style,
    /// relative to the zone root.
    pub fn compile(zone: &Zone) -> Result<Self, ignore::Error> {
        let (protect, protect_shapes) = patterns(&zone.policy.protect)?;
        let (hide, hide_shapes) = patterns(&zone.policy.hide)?;
        let (ask_read, ask_read_shapes) = patterns(&zone.policy.ask_read)?;
        let hidden = zone.policy.hidden.clone();
        Ok(ZoneRules {
            name: zone.name.clone(),
            access: zone.policy.access,
            approval: zone.policy.approval,
            suffixes: zone.policy.suffixes.clone(),
            max_file_bytes: zone.policy.max_file_bytes,
            protect,
            protect_shapes,
            hidden,
            hide,
            hide_shapes,
            ask_read,
            ask_read_shapes,
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

    /// The `hide` pattern that may match something below `dir` only
    /// because of where `dir` is, if any: renaming `dir` would carry what
    /// it hides to a name it doesn't.
    pub(super) fn hidden_below(&self, dir: &Path) -> Option<&str> {
        straddled(&self.hide_shapes, dir)
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

    /// The protect pattern that may match something below `dir` only
    /// because of where `dir` is, if any: renaming `dir` away would move
    /// that out of protection, renaming a directory to `dir` would move
    /// something into it.
    pub(super) fn protected_below(&self, dir: &Path) -> Option<&str> {
        straddled(&self.protect_shapes, dir)
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
        self.ask_read_of(path, false)
    }

    /// [`ask_read_by`](Self::ask_read_by) for an entry of a known kind (a
    /// pattern for directories only covers a directory's files).
    pub(super) fn ask_read_of(&self, path: &Path, is_dir: bool) -> Option<&str> {
        if path.as_os_str().is_empty() || self.ask_read.is_empty() {
            return None;
        }
        let abs = Path::new("/").join(path);
        match self.ask_read.matched_path_or_any_parents(&abs, is_dir) {
            ignore::Match::Ignore(glob) => Some(glob.original()),
            _ => None,
        }
    }

    /// The `ask_read` pattern that may match something below `dir` only
    /// because of where `dir` is, if any.
    pub(super) fn ask_read_below(&self, dir: &Path) -> Option<&str> {
        straddled(&self.ask_read_shapes, dir)
    }

    fn asks_to_read(&self, path: &Path) -> bool {
        self.ask_read_by(path).is_some()
    }
}

//! The pure decision "may operation O on path P in zone Z proceed?".
//!
//! No I/O here: the filesystem tells [`decide`] where an operation lands
//! ([`Loc`]) and what it does ([`Op`]); the answer is allow, refuse with a
//! [`Refusal`], or ask for approval of one or more (class, path) pairs.
//! Precedence follows DESIGN §3: hidden, root-level, cross-zone, read-only
//! or protected, suffix, size, then the zone's approval policy.
//! [`explain`] turns a refusal (or any decision) into words for an LLM.

mod explain;

pub use explain::{Action, Explanation, Subject, explain, explain_decision, shown};

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use globset::{Glob, GlobMatcher};
use ignore::gitignore::{Gitignore, GitignoreBuilder};

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

/// Where an operation lands. `zone == None` means the mount root itself or
/// one of its entries (a zone dir seen from the root); `path` is relative to
/// the zone root, empty for the zone dir itself.
#[derive(Clone, Copy, Debug)]
pub struct Loc<'a> {
    pub zone: Option<&'a ZoneRules>,
    pub path: &'a Path,
}

impl<'a> Loc<'a> {
    pub fn root() -> Self {
        Loc {
            zone: None,
            path: Path::new(""),
        }
    }

    pub fn in_zone(zone: &'a ZoneRules, path: &'a Path) -> Self {
        Loc {
            zone: Some(zone),
            path,
        }
    }

    fn same_zone(&self, other: &Loc<'_>) -> bool {
        match (self.zone, other.zone) {
            (Some(a), Some(b)) => std::ptr::eq(a, b),
            _ => false,
        }
    }
}

/// The two approval classes of DESIGN §4.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    Write,
    Delete,
}

/// What an operation does, in the terms of DESIGN §3's rows.
#[derive(Clone, Copy, Debug)]
pub enum Op<'a> {
    /// Open an existing file for reading (`size` is its current size).
    Read { at: Loc<'a>, size: u64 },
    /// Change a file's content: open for writing or truncating, setattr
    /// size, fallocate, copy_file_range into. `new_size` when it is known.
    WriteContent { at: Loc<'a>, new_size: Option<u64> },
    /// Add a name: create, mkdir, symlink, mknod.
    NewName { at: Loc<'a>, is_dir: bool },
    /// chmod, chown, utimens, setxattr, removexattr.
    Metadata { at: Loc<'a> },
    /// unlink, rmdir.
    Remove { at: Loc<'a> },
    /// rename; `to_exists` when the destination name already exists.
    Rename {
        from: Loc<'a>,
        to: Loc<'a>,
        is_dir: bool,
        to_exists: bool,
        exchange: bool,
    },
    /// A hard link of `from` at the new name `to`.
    Link { from: Loc<'a>, to: Loc<'a> },
}

impl<'a> Op<'a> {
    /// The one or two places an operation touches.
    pub fn places(&self) -> [Option<Loc<'a>>; 2] {
        match *self {
            Op::Read { at, .. }
            | Op::WriteContent { at, .. }
            | Op::NewName { at, .. }
            | Op::Metadata { at }
            | Op::Remove { at } => [Some(at), None],
            Op::Rename { from, to, .. } | Op::Link { from, to } => [Some(from), Some(to)],
        }
    }
}

/// One approval that an operation needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AskItem {
    pub class: Class,
    pub zone: String,
    pub path: PathBuf,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Refuse(Refusal),
    /// Allowed only if every listed item is approved.
    Ask(Vec<AskItem>),
}

/// Decide an operation. Pure: the caller supplies every fact.
pub fn decide(op: &Op<'_>) -> Decision {
    if let Err(r) = op.places().into_iter().flatten().try_for_each(sensitive) {
        return Decision::Refuse(r);
    }
    match structural(op) {
        Err(r) => Decision::Refuse(r),
        Ok(needs) => by_approval(&needs),
    }
}

/// Every rule before the approval policy; returns the (class, loc) pairs
/// the approval policy must then allow.
fn structural<'a>(op: &Op<'a>) -> Result<Vec<(Class, Loc<'a>)>, Refusal> {
    use Class::{Delete, Write};
    match *op {
        Op::Read { at, size } => {
            if let Some(z) = at.zone {
                too_big(z, size)?;
            }
            Ok(vec![])
        }
        Op::WriteContent { at, new_size } => {
            let z = zone_of(at, false)?;
            writable(z, at.path, false)?;
            if let Some(n) = new_size {
                too_big(z, n)?;
            }
            Ok(vec![(Write, at)])
        }
        Op::NewName { at, is_dir } => {
            let z = zone_of(at, true)?;
            writable(z, at.path, is_dir)?;
            suffix(z, at.path, is_dir)?;
            Ok(vec![(Write, at)])
        }
        Op::Metadata { at } => {
            let z = zone_of(at, false)?;
            writable(z, at.path, false)?;
            Ok(vec![(Write, at)])
        }
        Op::Remove { at } => {
            let z = zone_of(at, true)?;
            writable(z, at.path, false)?;
            Ok(vec![(Delete, at)])
        }
        Op::Rename {
            from,
            to,
            is_dir,
            to_exists,
            exchange,
        } => {
            let fz = zone_of(from, true)?;
            zone_of(to, true)?;
            if !from.same_zone(&to) {
                return Err(Refusal::CrossZone);
            }
            writable(fz, from.path, is_dir)?;
            writable(fz, to.path, is_dir)?;
            if is_dir && (fz.protects_below(from.path) || (exchange && fz.protects_below(to.path)))
            {
                return Err(Refusal::Protected);
            }
            let carries = |p: &Path| fz.sensitive_below(p).is_some();
            if is_dir && (carries(from.path) || (exchange && carries(to.path))) {
                return Err(Refusal::SensitiveInside);
            }
            suffix(fz, to.path, is_dir)?;
            if exchange {
                suffix(fz, from.path, is_dir)?;
            }
            let mut needs = vec![(Write, to), (Delete, from)];
            if exchange {
                needs.push((Write, from));
            }
            if to_exists || exchange {
                needs.push((Delete, to));
            }
            Ok(needs)
        }
        Op::Link { from, to } => {
            zone_of(from, true)?;
            let tz = zone_of(to, true)?;
            if !from.same_zone(&to) {
                return Err(Refusal::CrossZone);
            }
            // A new name for a protected file would be a writable way in.
            writable(tz, from.path, false)?;
            writable(tz, to.path, false)?;
            suffix(tz, to.path, false)?;
            Ok(vec![(Write, to)])
        }
    }
}

/// A hidden sensitive root is refused before every other rule: it must
/// look absent, whatever the operation.
fn sensitive(at: Loc<'_>) -> Result<(), Refusal> {
    match at.zone {
        Some(z) if z.is_sensitive(at.path) => Err(Refusal::Sensitive),
        _ => Ok(()),
    }
}

/// The zone of a location that is being changed. `names` marks operations
/// that add, remove or rename the entry itself: on a zone dir those are
/// root-level changes.
fn zone_of<'a>(at: Loc<'a>, names: bool) -> Result<&'a ZoneRules, Refusal> {
    match at.zone {
        None => Err(Refusal::RootLevel),
        Some(_) if names && at.path.as_os_str().is_empty() => Err(Refusal::RootLevel),
        Some(z) => Ok(z),
    }
}

fn writable(z: &ZoneRules, path: &Path, is_dir: bool) -> Result<(), Refusal> {
    if z.access == Access::Ro {
        Err(Refusal::ReadOnly)
    } else if z.is_protected(path, is_dir) {
        Err(Refusal::Protected)
    } else {
        Ok(())
    }
}

fn suffix(z: &ZoneRules, path: &Path, is_dir: bool) -> Result<(), Refusal> {
    match path.file_name() {
        Some(name) if !z.visible(name, is_dir) => Err(Refusal::Suffix),
        _ => Ok(()),
    }
}

/// The size limit alone, for writes through a handle already approved.
pub fn check_size(z: &ZoneRules, size: u64) -> Result<(), Refusal> {
    too_big(z, size)
}

fn too_big(z: &ZoneRules, size: u64) -> Result<(), Refusal> {
    match z.max_file_bytes {
        Some(max) if size > max => Err(Refusal::TooBig),
        _ => Ok(()),
    }
}

fn by_approval(needs: &[(Class, Loc<'_>)]) -> Decision {
    let mut asks = Vec::new();
    for (class, at) in needs {
        let Some(z) = at.zone else { continue };
        match z.level(*class) {
            Approval::PreApproved => {}
            Approval::Blocked => return Decision::Refuse(Refusal::Blocked),
            Approval::Ask => asks.push(AskItem {
                class: *class,
                zone: z.name.clone(),
                path: at.path.to_path_buf(),
            }),
        }
    }
    if asks.is_empty() {
        Decision::Allow
    } else {
        Decision::Ask(asks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Zone, ZonePolicy};

    fn zone(access: Access, write: Approval, delete: Approval) -> ZoneRules {
        zone_with(access, write, delete, None, None, &[])
    }

    fn zone_with(
        access: Access,
        write: Approval,
        delete: Approval,
        suffixes: Option<&[&str]>,
        max: Option<u64>,
        protect: &[&str],
    ) -> ZoneRules {
        ZoneRules::compile(&Zone {
            name: "z".into(),
            backing: PathBuf::from("/nonexistent"),
            policy: ZonePolicy {
                access,
                approval: ApprovalPolicy { write, delete },
                suffixes: suffixes.map(|s| s.iter().map(|x| x.to_string()).collect()),
                max_file_bytes: max,
                protect: protect.iter().map(|x| x.to_string()).collect(),
                hidden: vec![],
            },
        })
        .unwrap()
    }

    use Approval::{Ask, Blocked, PreApproved};

    fn with_hidden(access: Access, hidden: &[&str]) -> ZoneRules {
        ZoneRules::compile(&Zone {
            name: "home".into(),
            backing: PathBuf::from("/nonexistent"),
            policy: ZonePolicy {
                access,
                approval: ApprovalPolicy::default(),
                suffixes: Some(vec![".md".into()]),
                max_file_bytes: Some(1),
                protect: vec![".git".into()],
                hidden: hidden.iter().map(PathBuf::from).collect(),
            },
        })
        .unwrap()
    }

    #[test]
    fn sensitive_roots_are_enoent_for_everything_first() {
        for access in [Access::Rw, Access::Ro] {
            let z = with_hidden(access, &[".ssh", ".config/gh"]);
            for p in [".ssh", ".ssh/id_rsa", ".config/gh", ".config/gh/hosts.yml"] {
                let f = at(&z, p);
                for op in [
                    Op::Read { at: f, size: 100 },
                    Op::WriteContent {
                        at: f,
                        new_size: Some(100),
                    },
                    Op::NewName {
                        at: f,
                        is_dir: false,
                    },
                    Op::NewName {
                        at: f,
                        is_dir: true,
                    },
                    Op::Metadata { at: f },
                    Op::Remove { at: f },
                    Op::Rename {
                        from: at(&z, "x.md"),
                        to: f,
                        is_dir: false,
                        to_exists: false,
                        exchange: false,
                    },
                    Op::Rename {
                        from: f,
                        to: at(&z, "x.md"),
                        is_dir: true,
                        to_exists: false,
                        exchange: false,
                    },
                    Op::Link {
                        from: at(&z, "x.md"),
                        to: f,
                    },
                ] {
                    assert_eq!(refused(op), Refusal::Sensitive, "{access:?} {op:?}");
                }
            }
            // Neighbours and look-alikes are not hidden.
            for p in [".sshx", ".config", ".config/ghx", "sub/.ssh", "ssh"] {
                assert!(!z.is_sensitive(Path::new(p)), "{p}");
            }
        }
        assert_eq!(Refusal::Sensitive.errno(), libc::ENOENT);
        let z = with_hidden(Access::Rw, &[".ssh", ".config/gh"]);
        assert!(z.may_hide(OsStr::new("gh")) && !z.may_hide(OsStr::new(".config")));
        assert_eq!(
            z.hiding(Path::new(".ssh"), true),
            Some(Refusal::Sensitive),
            "directories too"
        );
        assert_eq!(z.hiding(Path::new("a.txt"), false), Some(Refusal::Hidden));
        assert_eq!(z.hiding(Path::new("a.md"), false), None);
        assert_eq!(z.hiding(Path::new("dir"), true), None);
    }

    #[test]
    fn renaming_a_dir_that_holds_a_sensitive_root_is_refused() {
        let z = with_hidden(Access::Rw, &[".config/gh"]);
        let mv = |from: &'static str, to: &'static str, is_dir: bool, exchange: bool| {
            decide(&Op::Rename {
                from: Loc::in_zone(&z, Path::new(from)),
                to: Loc::in_zone(&z, Path::new(to)),
                is_dir,
                to_exists: exchange,
                exchange,
            })
        };
        assert_eq!(
            mv(".config", "cfg", true, false),
            Decision::Refuse(Refusal::SensitiveInside)
        );
        assert_eq!(
            mv("cfg", ".config", true, true),
            Decision::Refuse(Refusal::SensitiveInside)
        );
        assert_eq!(mv("other", "o2", true, false), Decision::Allow);
        // A directory moved *onto* `.config` only gets hidden content.
        assert_eq!(mv("other", ".config", true, false), Decision::Allow);
        assert_eq!(Refusal::SensitiveInside.errno(), libc::EACCES);
        // Read-only wins over it.
        let z = with_hidden(Access::Ro, &[".config/gh"]);
        assert_eq!(
            refused(Op::Rename {
                from: at(&z, ".config"),
                to: at(&z, "cfg"),
                is_dir: true,
                to_exists: false,
                exchange: false,
            }),
            Refusal::ReadOnly
        );
    }

    fn rw() -> ZoneRules {
        zone(Access::Rw, PreApproved, PreApproved)
    }
    fn ro() -> ZoneRules {
        zone(Access::Ro, PreApproved, PreApproved)
    }
    fn at<'a>(z: &'a ZoneRules, p: &'a str) -> Loc<'a> {
        Loc::in_zone(z, Path::new(p))
    }
    fn refused(op: Op<'_>) -> Refusal {
        match decide(&op) {
            Decision::Refuse(r) => r,
            d => panic!("expected a refusal, got {d:?}"),
        }
    }

    #[test]
    fn reads_are_allowed_everywhere() {
        let (r, w) = (ro(), rw());
        for z in [&r, &w] {
            assert_eq!(
                decide(&Op::Read {
                    at: at(z, "f"),
                    size: 5
                }),
                Decision::Allow
            );
        }
        assert_eq!(
            decide(&Op::Read {
                at: Loc::root(),
                size: 0
            }),
            Decision::Allow
        );
    }

    #[test]
    fn ro_zone_refuses_every_change_with_erofs() {
        let z = ro();
        let f = at(&z, "d/f");
        for op in [
            Op::WriteContent {
                at: f,
                new_size: None,
            },
            Op::NewName {
                at: f,
                is_dir: false,
            },
            Op::NewName {
                at: f,
                is_dir: true,
            },
            Op::Metadata { at: f },
            Op::Remove { at: f },
            Op::Rename {
                from: f,
                to: at(&z, "g"),
                is_dir: false,
                to_exists: false,
                exchange: false,
            },
            Op::Link {
                from: f,
                to: at(&z, "g"),
            },
        ] {
            assert_eq!(refused(op), Refusal::ReadOnly, "{op:?}");
            assert_eq!(Refusal::ReadOnly.errno(), libc::EROFS);
        }
    }

    #[test]
    fn rw_zone_follows_write_policy() {
        for (level, want) in [
            (PreApproved, Decision::Allow),
            (Blocked, Decision::Refuse(Refusal::Blocked)),
        ] {
            let z = zone(Access::Rw, level, PreApproved);
            let f = at(&z, "f");
            for op in [
                Op::WriteContent {
                    at: f,
                    new_size: Some(3),
                },
                Op::NewName {
                    at: f,
                    is_dir: false,
                },
                Op::NewName {
                    at: f,
                    is_dir: true,
                },
                Op::Metadata { at: f },
                Op::Link {
                    from: at(&z, "a"),
                    to: f,
                },
            ] {
                assert_eq!(decide(&op), want, "{op:?}");
            }
            // delete is not a write
            assert_eq!(decide(&Op::Remove { at: f }), Decision::Allow);
        }
        let z = zone(Access::Rw, Ask, PreApproved);
        match decide(&Op::NewName {
            at: at(&z, "x/y"),
            is_dir: false,
        }) {
            Decision::Ask(items) => {
                assert_eq!(
                    items,
                    vec![AskItem {
                        class: Class::Write,
                        zone: "z".into(),
                        path: "x/y".into()
                    }]
                )
            }
            d => panic!("{d:?}"),
        }
        assert_eq!(Refusal::Blocked.errno(), libc::EPERM);
    }

    #[test]
    fn rw_zone_follows_delete_policy() {
        let z = zone(Access::Rw, PreApproved, Blocked);
        assert_eq!(refused(Op::Remove { at: at(&z, "f") }), Refusal::Blocked);
        assert_eq!(
            decide(&Op::NewName {
                at: at(&z, "f"),
                is_dir: false
            }),
            Decision::Allow
        );
        let z = zone(Access::Rw, PreApproved, Ask);
        assert!(
            matches!(decide(&Op::Remove { at: at(&z, "f") }), Decision::Ask(v) if v[0].class == Class::Delete)
        );
    }

    #[test]
    fn rename_needs_write_and_delete() {
        let z = zone(Access::Rw, PreApproved, Blocked);
        let op = Op::Rename {
            from: at(&z, "a"),
            to: at(&z, "b"),
            is_dir: false,
            to_exists: false,
            exchange: false,
        };
        assert_eq!(refused(op), Refusal::Blocked);
        let z = zone(Access::Rw, Ask, Ask);
        let op = Op::Rename {
            from: at(&z, "a"),
            to: at(&z, "b"),
            is_dir: false,
            to_exists: true,
            exchange: false,
        };
        match decide(&op) {
            Decision::Ask(items) => {
                let got: Vec<_> = items
                    .iter()
                    .map(|i| (i.class, i.path.to_str().unwrap().to_string()))
                    .collect();
                assert_eq!(
                    got,
                    vec![
                        (Class::Write, "b".into()),
                        (Class::Delete, "a".into()),
                        (Class::Delete, "b".into())
                    ]
                );
            }
            d => panic!("{d:?}"),
        }
        // blocked beats ask
        let z = zone(Access::Rw, Ask, Blocked);
        let op = Op::Rename {
            from: at(&z, "a"),
            to: at(&z, "b"),
            is_dir: false,
            to_exists: false,
            exchange: false,
        };
        assert_eq!(refused(op), Refusal::Blocked);
    }

    #[test]
    fn cross_zone_rename_and_link_are_exdev_even_from_ro() {
        let (a, b) = (rw(), ro());
        let op = Op::Rename {
            from: at(&a, "f"),
            to: at(&b, "f"),
            is_dir: false,
            to_exists: false,
            exchange: false,
        };
        assert_eq!(refused(op), Refusal::CrossZone);
        assert_eq!(
            refused(Op::Link {
                from: at(&b, "f"),
                to: at(&a, "f")
            }),
            Refusal::CrossZone
        );
        assert_eq!(Refusal::CrossZone.errno(), libc::EXDEV);
    }

    #[test]
    fn root_level_changes_are_eacces_and_beat_everything_else() {
        let (a, r) = (rw(), ro());
        let root_entry = Loc::root();
        assert_eq!(
            refused(Op::NewName {
                at: root_entry,
                is_dir: true
            }),
            Refusal::RootLevel
        );
        assert_eq!(refused(Op::Remove { at: root_entry }), Refusal::RootLevel);
        assert_eq!(refused(Op::Metadata { at: root_entry }), Refusal::RootLevel);
        // a zone dir renamed, removed: root-level, also for a ro zone
        assert_eq!(refused(Op::Remove { at: at(&r, "") }), Refusal::RootLevel);
        let op = Op::Rename {
            from: at(&a, ""),
            to: at(&r, "x"),
            is_dir: true,
            to_exists: false,
            exchange: false,
        };
        assert_eq!(refused(op), Refusal::RootLevel);
        let op = Op::Rename {
            from: at(&a, "x"),
            to: root_entry,
            is_dir: false,
            to_exists: false,
            exchange: false,
        };
        assert_eq!(refused(op), Refusal::RootLevel);
        assert_eq!(Refusal::RootLevel.errno(), libc::EACCES);
        // metadata of a zone dir itself is a zone matter
        assert_eq!(refused(Op::Metadata { at: at(&r, "") }), Refusal::ReadOnly);
        assert_eq!(decide(&Op::Metadata { at: at(&a, "") }), Decision::Allow);
    }

    #[test]
    fn suffixes_hide_names_and_refuse_new_ones() {
        let z = zone_with(
            Access::Rw,
            PreApproved,
            PreApproved,
            Some(&[".md", ".pdf"]),
            None,
            &[],
        );
        assert!(z.visible(OsStr::new("a.md"), false));
        assert!(!z.visible(OsStr::new("a.txt"), false));
        assert!(z.visible(OsStr::new("dir.txt"), true));
        assert_eq!(
            refused(Op::NewName {
                at: at(&z, "a.txt"),
                is_dir: false
            }),
            Refusal::Suffix
        );
        assert_eq!(
            decide(&Op::NewName {
                at: at(&z, "d.txt"),
                is_dir: true
            }),
            Decision::Allow
        );
        let op = Op::Rename {
            from: at(&z, "a.md"),
            to: at(&z, "a.txt"),
            is_dir: false,
            to_exists: false,
            exchange: false,
        };
        assert_eq!(refused(op), Refusal::Suffix);
        assert_eq!(
            refused(Op::Link {
                from: at(&z, "a.md"),
                to: at(&z, "b")
            }),
            Refusal::Suffix
        );
        // read-only beats suffix
        let z = zone_with(
            Access::Ro,
            PreApproved,
            PreApproved,
            Some(&[".md"]),
            None,
            &[],
        );
        assert_eq!(
            refused(Op::NewName {
                at: at(&z, "a.txt"),
                is_dir: false
            }),
            Refusal::ReadOnly
        );
    }

    #[test]
    fn protect_makes_subtrees_read_only() {
        let z = zone_with(
            Access::Rw,
            PreApproved,
            PreApproved,
            None,
            None,
            &[".git", "/docs/final"],
        );
        assert!(z.is_protected(Path::new(".git"), true));
        assert!(z.is_protected(Path::new("sub/.git/config"), false));
        assert!(z.is_protected(Path::new("docs/final/a.md"), false));
        assert!(!z.is_protected(Path::new("x/docs/final"), true));
        assert!(!z.is_protected(Path::new("src/main.rs"), false));
        assert_eq!(
            refused(Op::NewName {
                at: at(&z, ".git/objects/x"),
                is_dir: false
            }),
            Refusal::Protected
        );
        assert_eq!(
            refused(Op::NewName {
                at: at(&z, ".git"),
                is_dir: true
            }),
            Refusal::Protected
        );
        assert_eq!(
            refused(Op::WriteContent {
                at: at(&z, ".git/HEAD"),
                new_size: None
            }),
            Refusal::Protected
        );
        assert_eq!(
            refused(Op::Remove {
                at: at(&z, "docs/final/a")
            }),
            Refusal::Protected
        );
        let op = Op::Rename {
            from: at(&z, ".git/HEAD"),
            to: at(&z, "h"),
            is_dir: false,
            to_exists: false,
            exchange: false,
        };
        assert_eq!(refused(op), Refusal::Protected);
        let op = Op::Rename {
            from: at(&z, "h"),
            to: at(&z, ".git/HEAD"),
            is_dir: false,
            to_exists: true,
            exchange: false,
        };
        assert_eq!(refused(op), Refusal::Protected);
        assert_eq!(
            decide(&Op::NewName {
                at: at(&z, "src/a.rs"),
                is_dir: false
            }),
            Decision::Allow
        );
    }

    #[test]
    fn size_limit_is_efbig_past_the_limit_only() {
        let z = zone_with(Access::Rw, Blocked, PreApproved, None, Some(10), &[]);
        assert_eq!(
            decide(&Op::Read {
                at: at(&z, "f"),
                size: 10
            }),
            Decision::Allow
        );
        assert_eq!(
            refused(Op::Read {
                at: at(&z, "f"),
                size: 11
            }),
            Refusal::TooBig
        );
        // size beats the approval policy
        assert_eq!(
            refused(Op::WriteContent {
                at: at(&z, "f"),
                new_size: Some(11)
            }),
            Refusal::TooBig
        );
        assert_eq!(
            refused(Op::WriteContent {
                at: at(&z, "f"),
                new_size: Some(10)
            }),
            Refusal::Blocked
        );
        assert_eq!(Refusal::TooBig.errno(), libc::EFBIG);
    }

    #[test]
    fn precedence_follows_the_design_order() {
        let mut all = [
            Refusal::Blocked,
            Refusal::TooBig,
            Refusal::Suffix,
            Refusal::Protected,
            Refusal::ReadOnly,
            Refusal::CrossZone,
            Refusal::RootLevel,
            Refusal::Hidden,
            Refusal::Sensitive,
            Refusal::SensitiveInside,
        ];
        all.sort();
        assert_eq!(all[0], Refusal::Sensitive);
        assert_eq!(all[1], Refusal::Hidden);
        assert_eq!(all[2], Refusal::RootLevel);
        assert_eq!(all[3], Refusal::CrossZone);
        assert_eq!(all.last(), Some(&Refusal::Blocked));
    }
}

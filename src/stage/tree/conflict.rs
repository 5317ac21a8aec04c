//! Whether a staged change can be applied without touching what the host
//! did since: a commit never removes or overwrites a host change unless
//! forced. A change needs more than its own path:
//!
//! - its path (and a rename's source): the backing object must be what
//!   the worker started from (its fingerprint);
//! - each parent: the commit makes the parents the stage has, removing a
//!   file or symlink in the way, so each must be the directory the stage
//!   was made over, or what the worker itself replaced, or still absent
//!   where the worker made it;
//! - everything under it, where applying it removes a backing directory
//!   (a deletion, a file or symlink in place of a directory, a rename's
//!   source): each entry there must be what the worker last saw;
//! - the backing dir itself: the one the stage was made over.
//!
//! [`Check`] judges each change before anything is applied; [`Guard`],
//! what it saw, lets each step of the commit look again just before it
//! acts (a host change made while the commit runs).
//!
//! A path without a fingerprint (the daemon noted nothing, as after a
//! machine crash) is judged by the stage's creation time: more conflicts,
//! never fewer.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::{io, iter};

use rustix::fs::{FileType, Stat};
use rustix::io::Errno;

use crate::stage::walk::{self, Visit};

use super::fingerprints::{Fingerprint, Fingerprints};
use super::fsops;
use super::{Change, ChangeType, Conflict, Kind, Layers, is_dir, type_name};

/// What a parent of a staged path says about the paths below it.
#[derive(Debug, Clone)]
enum Parent {
    /// The directory the stage expects: look further down.
    Dir,
    /// Nothing of the host's can be below it (the worker made it, or
    /// replaced a file there): the paths below are the stage's own.
    Own,
    /// A host change (why, where): every path below is in conflict.
    Changed(String, PathBuf),
}

/// Values by path, kept as a tree of names: the ancestors of a path are
/// looked up on the way down to it, one name each (a path of depth `k`
/// hashed whole for each of its `k` ancestors made a commit of a tree
/// thousands of levels deep take the cube of its depth).
struct PathMap<V> {
    nodes: Vec<PathNode<V>>,
}

struct PathNode<V> {
    /// Most directories on a commit's paths have one child there: a
    /// list, searched in order, until it grows.
    children: Children,
    value: Option<V>,
}

enum Children {
    Few(Vec<(OsString, usize)>),
    Many(HashMap<OsString, usize>),
}

impl Children {
    fn get(&self, name: &OsStr) -> Option<usize> {
        match self {
            Children::Few(v) => v.iter().find(|(n, _)| n == name).map(|(_, i)| *i),
            Children::Many(m) => m.get(name).copied(),
        }
    }

    fn insert(&mut self, name: &OsStr, i: usize) {
        match self {
            Children::Few(v) if v.len() < 8 => v.push((name.to_os_string(), i)),
            Children::Few(v) => {
                let mut m: HashMap<OsString, usize> = v.drain(..).collect();
                m.insert(name.to_os_string(), i);
                *self = Children::Many(m);
            }
            Children::Many(m) => {
                m.insert(name.to_os_string(), i);
            }
        }
    }
}

/// The names of a relative path, as `Path` compares them (`.` left
/// out, `..` kept as a name).
fn names_of(rel: &Path) -> impl Iterator<Item = &OsStr> {
    rel.components().filter_map(|c| match c {
        Component::Normal(n) => Some(n),
        Component::ParentDir => Some(OsStr::new("..")),
        _ => None,
    })
}

impl<V> PathMap<V> {
    fn new() -> PathMap<V> {
        PathMap {
            nodes: vec![PathNode {
                children: Children::Few(Vec::new()),
                value: None,
            }],
        }
    }

    /// The node of `name` under `node`, if any.
    fn child(&self, node: usize, name: &OsStr) -> Option<usize> {
        self.nodes.get(node)?.children.get(name)
    }

    fn value(&self, node: usize) -> Option<&V> {
        self.nodes.get(node)?.value.as_ref()
    }

    fn find(&self, rel: &Path) -> Option<usize> {
        names_of(rel).try_fold(0, |n, name| self.child(n, name))
    }

    fn get(&self, rel: &Path) -> Option<&V> {
        self.value(self.find(rel)?)
    }

    fn insert(&mut self, rel: &Path, v: V) {
        let mut node = 0;
        for name in names_of(rel) {
            node = match self.child(node, name) {
                Some(c) => c,
                None => {
                    let c = self.nodes.len();
                    self.nodes.push(PathNode {
                        children: Children::Few(Vec::new()),
                        value: None,
                    });
                    if let Some(n) = self.nodes.get_mut(node) {
                        n.children.insert(name, c);
                    }
                    c
                }
            };
        }
        if let Some(n) = self.nodes.get_mut(node) {
            n.value = Some(v);
        }
    }
}

/// Conflict checks of one commit (parents' verdicts kept: many changes
/// share them).
pub(super) struct Check<'a> {
    l: &'a Layers,
    fp: &'a Fingerprints,
    parents: PathMap<Parent>,
    /// Whether the backing dir is another than the stage was made over
    /// (why), once asked.
    root: Option<Option<String>>,
    /// Each backing path looked at, as it was.
    seen: PathMap<Option<Fingerprint>>,
}

impl<'a> Check<'a> {
    pub(super) fn new(l: &'a Layers, fp: &'a Fingerprints) -> Check<'a> {
        Check {
            l,
            fp,
            parents: PathMap::new(),
            root: None,
            seen: PathMap::new(),
        }
    }

    /// What the checks saw, to guard the commit's steps with.
    pub(super) fn guard(self) -> Guard {
        Guard { seen: self.seen }
    }

    /// `rel` in the backing dir, kept as seen.
    fn look(&mut self, rel: &Path) -> io::Result<Option<Stat>> {
        let st = stat(self.l, rel)?;
        self.seen.insert(rel, st.as_ref().map(Fingerprint::of));
        Ok(st)
    }

    /// [`host_changed`], kept as seen.
    fn host_changed(&mut self, rel: &Path) -> io::Result<Option<String>> {
        let now = self.look(rel)?;
        Ok(judge(self.fp, rel, now.as_ref()))
    }

    /// The conflict that keeps `c` from being applied without removing
    /// or overwriting a host change; None when there is none. `skip`:
    /// paths an interrupted commit was applying (its own writes, not the
    /// host's).
    pub(super) fn change(
        &mut self,
        c: &Change,
        skip: impl Fn(&Path) -> bool,
    ) -> io::Result<Option<Conflict>> {
        let found = |why: String, at: &Path| {
            Some(Conflict {
                path: c.path.clone(),
                why,
                at: (at != c.path).then(|| at.to_path_buf()),
            })
        };
        if let Some(why) = self.root()? {
            return Ok(found(why, &c.path));
        }
        for p in iter::once(&c.path).chain(c.from.as_ref()) {
            if skip(p) {
                continue;
            }
            let parents = self.parents_of(p)?;
            if let Parent::Changed(why, at) = parents {
                return Ok(found(why, &at));
            }
            if let Some(why) = self.host_changed(p)? {
                return Ok(found(why, p));
            }
            // A dir the stage holds because the worker changed something
            // inside it (the worker's own dirs are noted when made): gone
            // from the backing dir, the host removed it.
            if matches!(parents, Parent::Dir)
                && c.kind == Kind::Added
                && c.file_type == Some(ChangeType::Dir)
                && self.fp.get(p).is_none()
                && stat(self.l, p)?.is_none()
            {
                return Ok(found(
                    "the host removed this dir after the worker changed something in it".into(),
                    p,
                ));
            }
            // Applying it removes a backing directory there: a deletion,
            // a rename's source, anything but a directory put in place.
            let removes =
                c.kind == Kind::Deleted || c.file_type != Some(ChangeType::Dir) || p != &c.path;
            if removes {
                if let Some((why, at)) = self.inside(p)? {
                    return Ok(found(format!("inside it: {why}"), &at));
                }
            }
        }
        Ok(None)
    }

    /// Why the backing dir is not the one the stage was made over (the
    /// daemon notes it when it mounts the stage); None when it is, or
    /// when nothing was noted.
    fn root(&mut self) -> io::Result<Option<String>> {
        if let Some(known) = &self.root {
            return Ok(known.clone());
        }
        let why = match self.fp.get(Path::new("")) {
            Some(Some(was)) => {
                let now = rustix::fs::fstat(self.l.lower.fd())
                    .map_err(|e| fsops::err(e, "stat", &self.l.lower.path))?;
                ((was.dev, was.ino) != (now.st_dev, now.st_ino)).then(|| {
                    "the host put another dir at the zone's backing path after the stage was made"
                        .to_string()
                })
            }
            _ => None,
        };
        self.root = Some(why.clone());
        Ok(why)
    }

    /// What `rel`'s parents say, top down: the first host change, or
    /// whether the path is the stage's own.
    fn parents_of(&mut self, rel: &Path) -> io::Result<Parent> {
        let Some(parent) = rel.parent() else {
            return Ok(Parent::Dir);
        };
        // Top down, each parent's verdict found from the one above it.
        let mut a = PathBuf::new();
        let mut node = Some(0);
        for name in names_of(parent) {
            a.push(name);
            node = node.and_then(|n| self.parents.child(n, name));
            let verdict = match node.and_then(|n| self.parents.value(n)) {
                Some(v) => v.clone(),
                None => {
                    let v = self.parent(&a)?;
                    self.parents.insert(&a, v.clone());
                    node = self.parents.find(&a);
                    v
                }
            };
            if !matches!(verdict, Parent::Dir) {
                return Ok(verdict);
            }
        }
        Ok(Parent::Dir)
    }

    /// Parent `a` of a staged path (its own parents already passed).
    fn parent(&mut self, a: &Path) -> io::Result<Parent> {
        let now = self.look(a)?;
        let changed = |why: String| Parent::Changed(why, a.to_path_buf());
        Ok(match (self.fp.get(a), now) {
            // The worker made it; the host made nothing there since.
            (Some(None), None) => Parent::Own,
            (Some(None), Some(st)) => changed(format!(
                "the host made a {} where the worker made a dir above it",
                type_name(&st)
            )),
            (Some(Some(_)), None) => {
                changed("the host removed a dir above it after the worker's change".into())
            }
            (Some(Some(was)), Some(st)) if was_dir(&was) => {
                if is_dir(&st) && (was.dev, was.ino) == (st.st_dev, st.st_ino) {
                    Parent::Dir
                } else {
                    changed(format!(
                        "the host replaced a dir above it with {}",
                        another(&st)
                    ))
                }
            }
            // The worker replaced a file (or symlink) with a directory:
            // it goes only if the host left it as it was.
            (Some(Some(was)), Some(st)) => {
                if was == Fingerprint::of(&st) {
                    Parent::Own
                } else {
                    changed(format!(
                        "the host changed a {} above it that the worker replaced with a dir",
                        type_name(&st)
                    ))
                }
            }
            // Not noted: the worker didn't change it, so the stage was
            // made over a directory there.
            (None, Some(st)) if is_dir(&st) => Parent::Dir,
            (None, Some(st)) if after_stage(self.fp, &st) => changed(format!(
                "the host replaced a dir above it with {}",
                another(&st)
            )),
            (None, Some(_)) => Parent::Own,
            (None, None) => changed(
                "the host removed a dir above it (or the stage's note of it was lost)".into(),
            ),
        })
    }

    /// The first host change under backing directory `rel` (nothing when
    /// it is no directory): why, and where. Any depth: a loop.
    fn inside(&mut self, rel: &Path) -> io::Result<Option<(String, PathBuf)>> {
        match self.look(rel)? {
            Some(st) if is_dir(&st) => {}
            _ => return Ok(None),
        }
        let top = self
            .l
            .lower
            .dir(rel)
            .map_err(|e| fsops::err(e, "list", &self.l.lower.path.join(rel)))?;
        let mut found = None;
        walk::walk::<io::Error>(
            top.as_fd(),
            &mut |e| {
                let p = rel.join(e.rel);
                let now = e.stat()?;
                self.seen.insert(&p, now.as_ref().map(Fingerprint::of));
                if let Some(why) = judge(self.fp, &p, now.as_ref()) {
                    found = Some((why, p));
                    return Ok(Visit::Stop);
                }
                Ok(Visit::Enter)
            },
            &mut |_, _, _| Ok(()),
        )
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", rel.display())))?;
        Ok(found)
    }
}

fn stat(l: &Layers, rel: &Path) -> io::Result<Option<Stat>> {
    l.lower
        .stat(rel)
        .map_err(|e| fsops::err(e, "stat", &l.lower.path.join(rel)))
}

fn was_dir(f: &Fingerprint) -> bool {
    FileType::from_raw_mode(f.mode) == FileType::Directory
}

/// "another dir", "a file", "a symlink"…
fn another(st: &Stat) -> String {
    match type_name(st) {
        "dir" => "another dir".into(),
        t => format!("a {t}"),
    }
}

/// Whether `st` changed after the stage was made.
fn after_stage(fp: &Fingerprints, st: &Stat) -> bool {
    (st.st_ctime, st.st_ctime_nsec as i64) > fp.created_at()
}

/// Why the backing object at `rel` is not what the worker started from;
/// None when it is.
pub(super) fn host_changed(
    l: &Layers,
    fp: &Fingerprints,
    rel: &Path,
) -> io::Result<Option<String>> {
    Ok(judge(fp, rel, stat(l, rel)?.as_ref()))
}

/// [`host_changed`] of `rel`, found `now` in the backing dir.
fn judge(fp: &Fingerprints, rel: &Path, now: Option<&Stat>) -> Option<String> {
    match (fp.get(rel), now) {
        (Some(None), Some(_)) => Some("the host created it after the worker's change".into()),
        (Some(Some(_)), None) => Some("the host deleted it after the worker changed it".into()),
        (Some(Some(was)), Some(st)) if was != Fingerprint::of(st) => {
            Some("the host changed it after the worker did".into())
        }
        (None, Some(st)) if after_stage(fp, st) => Some(
            "the host changed it after the stage was made (its state before is not known)".into(),
        ),
        _ => None,
    }
}

/// What the conflict checks saw of each backing path they looked at.
/// Just before a change is applied, what applying it would remove or
/// overwrite must still be that: a host change made after the checks,
/// while the commit runs, is a conflict too (the window is one step, not
/// the whole commit).
pub(super) struct Guard {
    seen: PathMap<Option<Fingerprint>>,
}

impl Guard {
    /// The conflict a host change made since the checks gives `c`; None
    /// when applying it now removes and overwrites nothing else than the
    /// checks saw (`skip`: as for [`Check::change`]).
    pub(super) fn late(
        &self,
        l: &Layers,
        c: &Change,
        skip: impl Fn(&Path) -> bool,
    ) -> io::Result<Option<Conflict>> {
        let found = |at: &Path| {
            Some(Conflict {
                path: c.path.clone(),
                why: "the host changed it while the commit ran".into(),
                at: (at != c.path).then(|| at.to_path_buf()),
            })
        };
        for p in iter::once(&c.path).chain(c.from.as_ref()) {
            if skip(p) {
                continue;
            }
            // A parent the commit would replace with a dir, or make again.
            let dir = match self.late_parent(l, p)? {
                Err(a) => return Ok(found(&a)),
                Ok(dir) => dir,
            };
            let removes =
                c.kind == Kind::Deleted || c.file_type != Some(ChangeType::Dir) || p != &c.path;
            let now = match (dir, p.file_name()) {
                (Some(d), Some(name)) => walk::stat_at(d.as_fd(), name)
                    .map_err(|e| fsops::err(e, "stat", &l.lower.path.join(p)))?,
                _ => None,
            };
            match now {
                // Gone: made again only where the checks saw nothing.
                None if p != &c.path || c.kind == Kind::Deleted => {}
                None if self.existed(p) => return Ok(found(p)),
                None => {}
                // A dir where the worker adds or changes one: the dir the
                // checks saw, or the one the commit made.
                Some(st) if is_dir(&st) && !removes && !self.same_dir(p, &st) => {
                    return Ok(found(p));
                }
                Some(st) if is_dir(&st) && !removes => {}
                Some(st) if !self.was(p, &st) => return Ok(found(p)),
                Some(st) if is_dir(&st) => {
                    if let Some(at) = self.inside_changed(l, p)? {
                        return Ok(found(&at));
                    }
                }
                Some(_) => {}
            }
        }
        Ok(None)
    }

    /// The first parent of `p`, top down, that a host change made since
    /// the checks (Err); else `p`'s directory, open, when there is one.
    /// Each name looked up from the parent above: a path of any depth,
    /// each step as long as its depth.
    #[allow(clippy::type_complexity)]
    fn late_parent(&self, l: &Layers, p: &Path) -> io::Result<Result<Option<OwnedFd>, PathBuf>> {
        let parent = p.parent().unwrap_or(Path::new(""));
        let mut a = PathBuf::new();
        // The directory the next name is in (None: nothing there).
        let mut dir: Option<OwnedFd> = Some(
            walk::open_dir_at(l.lower.fd(), OsStr::new("."))
                .map_err(|e| fsops::err(e, "open", &l.lower.path))?,
        );
        let mut node = Some(0);
        for name in names_of(parent) {
            a.push(name);
            node = node.and_then(|n| self.seen.child(n, name));
            let seen = node.and_then(|n| self.seen.value(n));
            let now = match &dir {
                Some(d) => walk::stat_at(d.as_fd(), name)
                    .map_err(|e| fsops::err(e, "stat", &l.lower.path.join(&a)))?,
                None => None,
            };
            match now {
                None if matches!(seen, Some(Some(_))) => return Ok(Err(a)),
                None => return Ok(Ok(None)),
                Some(st) if is_dir(&st) && !same_dir(seen, &st) => return Ok(Err(a)),
                Some(st) if !is_dir(&st) && !was(seen, &st) => return Ok(Err(a)),
                Some(st) if is_dir(&st) => {
                    dir = match dir.as_ref().map(|d| walk::open_dir_at(d.as_fd(), name)) {
                        Some(Ok(d)) => Some(d),
                        Some(Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP)) | None => None,
                        Some(Err(e)) => return Err(fsops::err(e, "open", &l.lower.path.join(&a))),
                    };
                }
                // A file or symlink the worker replaced: nothing below it.
                Some(_) => dir = None,
            }
        }
        Ok(Ok(dir))
    }

    /// The conflict a host change to directory `c`'s mode since the
    /// checks gives it, before the commit sets the stage's (a dir the
    /// commit made, or one whose entries it changed, is no conflict).
    pub(super) fn late_attrs(&self, l: &Layers, c: &Change) -> io::Result<Option<Conflict>> {
        let (Some(st), Some(Some(f))) = (stat(l, &c.path)?, self.seen.get(&c.path)) else {
            return Ok(None);
        };
        if !was_dir(f) {
            // The commit replaced a file there with the dir.
            return Ok(None);
        }
        Ok(
            (!is_dir(&st) || (f.dev, f.ino, f.mode) != (st.st_dev, st.st_ino, st.st_mode)).then(
                || Conflict {
                    path: c.path.clone(),
                    why: "the host changed it while the commit ran".into(),
                    at: None,
                },
            ),
        )
    }

    /// After the commit applied `rel`: the dirs it made for it (`rel`
    /// itself, its missing parents, a file it replaced with a dir) are
    /// what it now expects there. Called right after that step, whose
    /// [`Guard::late`] found everything above `rel` as the checks saw it.
    pub(super) fn made(&mut self, l: &Layers, rel: &Path) -> io::Result<()> {
        let mut a = PathBuf::new();
        let mut node = Some(0);
        for name in names_of(rel) {
            a.push(name);
            node = node.and_then(|n| self.seen.child(n, name));
            if matches!(node.and_then(|n| self.seen.value(n)), Some(Some(f)) if was_dir(f)) {
                continue;
            }
            if let Some(st) = stat(l, &a)?.filter(is_dir) {
                self.seen.insert(&a, Some(Fingerprint::of(&st)));
                node = self.seen.find(&a);
            }
        }
        Ok(())
    }

    /// Whether dir `st` at `rel` is the one the checks saw there or the
    /// commit made (a path never looked at counts as seen).
    fn same_dir(&self, rel: &Path, st: &Stat) -> bool {
        same_dir(self.seen.get(rel), st)
    }

    /// Whether the checks saw something at `rel`.
    fn existed(&self, rel: &Path) -> bool {
        matches!(self.seen.get(rel), Some(Some(_)))
    }

    /// Whether `st` is what the checks saw at `rel` (a dir: the same one,
    /// same mode, its times left out: the commit's own steps move them;
    /// a file's ctime left out: so do the commit's renames of its links).
    fn was(&self, rel: &Path, st: &Stat) -> bool {
        was(self.seen.get(rel), st)
    }

    /// The first entry under backing dir `rel` that the checks did not see
    /// as it is now (any depth: a loop).
    fn inside_changed(&self, l: &Layers, rel: &Path) -> io::Result<Option<PathBuf>> {
        let top = l
            .lower
            .dir(rel)
            .map_err(|e| fsops::err(e, "list", &l.lower.path.join(rel)))?;
        let mut found = None;
        walk::walk::<io::Error>(
            top.as_fd(),
            &mut |e| {
                let p = rel.join(e.rel);
                let Some(st) = e.stat()? else {
                    return Ok(Visit::Next);
                };
                if !self.was(&p, &st) {
                    found = Some(p);
                    return Ok(Visit::Stop);
                }
                Ok(Visit::Enter)
            },
            &mut |_, _, _| Ok(()),
        )
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", rel.display())))?;
        Ok(found)
    }
}

/// Whether dir `st` is the one the checks saw (`seen`) or the commit
/// made (a path never looked at counts as seen).
fn same_dir(seen: Option<&Option<Fingerprint>>, st: &Stat) -> bool {
    match seen {
        None => true,
        Some(Some(f)) => was_dir(f) && (f.dev, f.ino) == (st.st_dev, st.st_ino),
        Some(None) => false,
    }
}

/// Whether `st` is what the checks saw (`seen`; a dir: the same one,
/// same mode, its times left out: the commit's own steps move them; a
/// file's ctime left out: so do the commit's renames of its links).
fn was(seen: Option<&Option<Fingerprint>>, st: &Stat) -> bool {
    let Some(Some(f)) = seen else {
        return false;
    };
    let now = Fingerprint::of(st);
    if is_dir(st) {
        return was_dir(f) && (f.dev, f.ino, f.mode) == (now.dev, now.ino, now.mode);
    }
    (f.dev, f.ino, f.size, f.mtime, f.mode) == (now.dev, now.ino, now.size, now.mtime, now.mode)
}

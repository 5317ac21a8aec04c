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
//!   source): each entry there must be what the worker last saw.
//!
//! A path without a fingerprint (the daemon noted nothing, as after a
//! machine crash) is judged by the stage's creation time: more conflicts,
//! never fewer.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::{io, iter};

use rustix::fs::{FileType, Stat};

use super::apply::Conflict;
use super::fingerprints::{Fingerprint, Fingerprints};
use super::fsops;
use super::{Change, Kind, Layers, is_dir, type_name};

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

/// Conflict checks of one commit (parents' verdicts kept: many changes
/// share them).
pub(super) struct Check<'a> {
    l: &'a Layers,
    fp: &'a Fingerprints,
    parents: HashMap<PathBuf, Parent>,
    /// Whether the backing dir is another than the stage was made over
    /// (why), once asked.
    root: Option<Option<String>>,
}

impl<'a> Check<'a> {
    pub(super) fn new(l: &'a Layers, fp: &'a Fingerprints) -> Check<'a> {
        Check {
            l,
            fp,
            parents: HashMap::new(),
            root: None,
        }
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
            if let Some(why) = host_changed(self.l, self.fp, p)? {
                return Ok(found(why, p));
            }
            // A dir the stage holds because the worker changed something
            // inside it (the worker's own dirs are noted when made): gone
            // from the backing dir, the host removed it.
            if matches!(parents, Parent::Dir)
                && c.kind == Kind::Added
                && c.file_type == "dir"
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
            let removes = c.kind == Kind::Deleted || c.file_type != "dir" || p != &c.path;
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
        let mut chain: Vec<&Path> = rel
            .ancestors()
            .skip(1)
            .filter(|a| !a.as_os_str().is_empty())
            .collect();
        chain.reverse();
        for a in chain {
            let verdict = match self.parents.get(a) {
                Some(v) => v.clone(),
                None => {
                    let v = self.parent(a)?;
                    self.parents.insert(a.to_path_buf(), v.clone());
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
    fn parent(&self, a: &Path) -> io::Result<Parent> {
        let now = stat(self.l, a)?;
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
    /// it is no directory): why, and where.
    fn inside(&self, rel: &Path) -> io::Result<Option<(String, PathBuf)>> {
        match stat(self.l, rel)? {
            Some(st) if is_dir(&st) => {}
            _ => return Ok(None),
        }
        let names = self
            .l
            .lower
            .names(rel)
            .map_err(|e| fsops::err(e, "list", &self.l.lower.path.join(rel)))?;
        for n in names {
            let p = rel.join(n);
            if let Some(why) = host_changed(self.l, self.fp, &p)? {
                return Ok(Some((why, p)));
            }
            if let Some(found) = self.inside(&p)? {
                return Ok(Some(found));
            }
        }
        Ok(None)
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
    let now = stat(l, rel)?;
    let same = |a: &Fingerprint, b: &Fingerprint| {
        (a.dev, a.ino, a.size, a.mtime, a.ctime, a.mode)
            == (b.dev, b.ino, b.size, b.mtime, b.ctime, b.mode)
    };
    Ok(match (fp.get(rel), now) {
        (Some(None), Some(_)) => Some("the host created it after the worker's change".into()),
        (Some(Some(_)), None) => Some("the host deleted it after the worker changed it".into()),
        (Some(Some(was)), Some(st)) if !same(&was, &Fingerprint::of(&st)) => {
            Some("the host changed it after the worker did".into())
        }
        (None, Some(st)) if after_stage(fp, &st) => Some(
            "the host changed it after the stage was made (its state before is not known)".into(),
        ),
        _ => None,
    })
}

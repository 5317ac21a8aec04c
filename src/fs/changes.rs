//! The per-task change report of plain rw zones: each path this mount's
//! workers created, modified or deleted since it was mounted, as the
//! mount saw the calls succeed (a staged zone's report comes from its
//! stage instead). A path created and then deleted is no change; a renamed
//! file is deleted at its old name and created at its new one (a renamed
//! directory too, without its contents). Bounded: past [`MAX_PATHS`] paths
//! the report says it is incomplete.
//!
//! Each change also names who made it (`actor`): a plain zone's first and
//! last actor per path are kept here, beside its kind; a staged zone's go
//! to its stage (`stage::actors`), where they outlive the daemon.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::actor::{Actor, FirstLast, PathKey, Trails};
use crate::policy::Op;
use crate::stage::Stages;

/// The most paths remembered per mount.
pub const MAX_PATHS: usize = 100_000;

/// The same kinds as a staged zone's report (a plain zone's has no
/// renames: it shows a delete and an add).
pub use crate::stage::tree::Kind;

/// One changed path of a zone (the stage service turns it into a staged
/// change's shape for the report).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub path: PathBuf,
    pub kind: Kind,
    /// Who made its first and last change.
    pub by: Option<FirstLast>,
}

/// One path an allowed operation will change, once it succeeds.
#[derive(Debug, Clone)]
pub struct Pending {
    zone: String,
    path: PathBuf,
    kind: Kind,
    /// In a staged zone: only who made it is recorded here (in the stage).
    staged: bool,
}

/// What a request will change in rw zones, and who asks: what its gate
/// expects, carried by the request to the point where it succeeds, and
/// recorded there ([`ChangeLog::record`]).
#[derive(Debug, Clone, Default)]
pub struct Expected {
    list: Vec<Pending>,
    /// A rename (not an exchange): `list` is its source, then its target.
    rename: bool,
    by: Option<Box<Actor>>,
}

impl Expected {
    /// What an allowed `op` will change in rw zones.
    pub fn of(op: &Op<'_>) -> Expected {
        let mut expected = Vec::new();
        let mut add = |at: &crate::policy::Loc<'_>, kind: Kind| {
            let rw = at.zone.filter(|z| z.access == crate::config::Access::Rw);
            if let Some(z) = rw {
                expected.push(Pending {
                    zone: z.name.clone(),
                    path: at.path.to_path_buf(),
                    kind,
                    staged: z.staged,
                });
            }
        };
        let rename = matches!(
            op,
            Op::Rename {
                exchange: false,
                ..
            }
        );
        match op {
            Op::WriteContent { at, .. } | Op::Metadata { at } => add(at, Kind::Modified),
            Op::NewName { at, .. } => add(at, Kind::Added),
            Op::Remove { at } => add(at, Kind::Deleted),
            Op::Rename {
                from,
                to,
                to_is_dir,
                exchange,
                ..
            } => {
                if *exchange {
                    add(from, Kind::Modified);
                    add(to, Kind::Modified);
                } else {
                    add(from, Kind::Deleted);
                    add(
                        to,
                        if to_is_dir.is_some() {
                            Kind::Modified
                        } else {
                            Kind::Added
                        },
                    );
                }
            }
            Op::Link { to, .. } => add(to, Kind::Added),
            _ => {}
        }
        Expected {
            rename: rename && expected.len() == 2 && expected[0].zone == expected[1].zone,
            list: expected,
            by: None,
        }
    }

    /// Whether it changes nothing in a rw zone.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Made by `by`.
    pub fn by(mut self, by: Actor) -> Expected {
        self.by = Some(Box::new(by));
        self
    }

    /// What both requests' parts will change, `self`'s first.
    pub fn and(mut self, other: Expected) -> Expected {
        if self.list.is_empty() {
            return Expected {
                by: other.by.or(self.by),
                ..other
            };
        }
        self.rename = false;
        self.list.extend(other.list);
        self.by = self.by.or(other.by);
        self
    }
}

/// The report: by zone, by path.
#[derive(Debug, Default)]
pub struct ChangeLog {
    inner: Mutex<Log>,
    /// Where a staged zone's actors go.
    stages: Option<Arc<Stages>>,
}

#[derive(Debug, Default)]
struct Log {
    /// By zone; each zone's paths unordered (a hash costs less than the
    /// path comparisons of an ordered map on every create and unlink),
    /// sorted when a report is asked for.
    zones: BTreeMap<String, HashMap<PathKey, Kind>>,
    paths: usize,
    truncated: bool,
    /// By zone: who changed each path.
    actors: BTreeMap<String, Trails>,
}

impl ChangeLog {
    /// A log whose staged zones' actors go to `stages`.
    pub fn new(stages: Option<Arc<Stages>>) -> ChangeLog {
        ChangeLog {
            inner: Mutex::default(),
            stages,
        }
    }

    /// Record what a request that succeeded changed, and who made it.
    pub fn record(&self, done: Expected) {
        if done.list.is_empty() {
            return;
        }
        // A staged zone's record has a lock of its own: its changes take
        // none of the plain zones' here.
        if let Some(by) = &done.by {
            self.attribute_staged(&done, by);
        }
        if done.list.iter().all(|p| p.staged) {
            return;
        }
        let mut log = self.inner.lock();
        if let Some(by) = &done.by {
            attribute_plain(&mut log, &done, by);
        }
        for p in done.list {
            if p.staged {
                continue;
            }
            let Log {
                zones,
                paths,
                truncated,
                actors,
            } = &mut *log;
            let zone = match zones.get_mut(&p.zone) {
                Some(z) => z,
                None => zones.entry(p.zone.clone()).or_default(),
            };
            let key = PathKey::from(p.path);
            let prev = zone.get(&key).copied();
            let next = match (prev, p.kind) {
                (None, k) => Some(k),
                (Some(Kind::Added), Kind::Deleted) => None,
                (Some(Kind::Added), _) => Some(Kind::Added),
                (Some(Kind::Deleted), Kind::Added | Kind::Modified | Kind::Renamed) => {
                    Some(Kind::Modified)
                }
                (Some(_), Kind::Deleted) => Some(Kind::Deleted),
                (Some(Kind::Modified | Kind::Renamed), _) => Some(Kind::Modified),
            };
            match next {
                None => {
                    if zone.remove(&key).is_some() {
                        *paths -= 1;
                    }
                    // Made and gone again: no change, and no record.
                    if let Some(t) = actors.get_mut(&p.zone) {
                        t.forget(std::slice::from_ref(key.path()), &[]);
                    }
                }
                Some(k) if prev.is_some() => {
                    zone.insert(key, k);
                }
                Some(_) if *paths >= MAX_PATHS => *truncated = true,
                Some(k) => {
                    zone.insert(key, k);
                    *paths += 1;
                }
            }
        }
    }

    /// Who made what `done` changed in staged zones: in the zone's stage.
    fn attribute_staged(&self, done: &Expected, by: &Actor) {
        let Some(stages) = &self.stages else { return };
        let warn = |p: &Pending, e: std::io::Error| {
            tracing::warn!(zone = %p.zone, path = %crate::text::path(&p.path), "cannot record who changed a staged path: {e}");
        };
        if done.rename {
            let (from, to) = (&done.list[0], &done.list[1]);
            if let Some(s) = stages.by_name(&from.zone).filter(|_| from.staged) {
                if let Err(e) = s.actors.rename(&from.path, &to.path, by) {
                    warn(from, e);
                }
            }
            return;
        }
        for p in done.list.iter().filter(|p| p.staged) {
            if let Some(s) = stages.by_name(&p.zone) {
                if let Err(e) = s.actors.change(&p.path, by) {
                    warn(p, e);
                }
            }
        }
    }

    /// Zone `zone`'s changes under `filter` (empty: all), in path order,
    /// and whether the log stopped recording (too many paths).
    pub fn changes(&self, zone: &str, filter: &[PathBuf]) -> (Vec<Change>, bool) {
        let log = self.inner.lock();
        let actors = log.actors.get(zone);
        let mut list: Vec<Change> = log
            .zones
            .get(zone)
            .into_iter()
            .flatten()
            .map(|(p, k)| (p.path(), k))
            .filter(|(p, _)| filter.is_empty() || filter.iter().any(|f| p.starts_with(f)))
            .map(|(p, k)| Change {
                path: p.clone(),
                kind: *k,
                by: actors.and_then(|a| a.first_last(p)),
            })
            .collect();
        list.sort_unstable_by(|a, b| a.path.cmp(&b.path));
        (list, log.truncated)
    }
}

/// Who made what `done` changed in plain zones: here.
fn attribute_plain(log: &mut Log, done: &Expected, by: &Actor) {
    if done.rename {
        let (from, to) = (&done.list[0], &done.list[1]);
        if !from.staged {
            let t = log.actors.entry(from.zone.clone()).or_default();
            t.rename(&from.path, &to.path, by.clone());
        }
        return;
    }
    for p in done.list.iter().filter(|p| !p.staged) {
        let t = match log.actors.get_mut(&p.zone) {
            Some(t) => t,
            None => log.actors.entry(p.zone.clone()).or_default(),
        };
        t.change(&p.path, by.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(zone: &str, path: &str, kind: Kind) -> Pending {
        Pending {
            zone: zone.into(),
            path: path.into(),
            kind,
            staged: false,
        }
    }

    fn list(list: Vec<Pending>) -> Expected {
        Expected {
            list,
            rename: false,
            by: None,
        }
    }

    #[test]
    fn each_path_names_its_first_and_last_maker_a_rename_carries_it() {
        let log = ChangeLog::default();
        let by = |pid| Actor::unknown(pid, 0);
        log.record(list(vec![p("w", "a", Kind::Added)]).by(by(1)));
        log.record(list(vec![p("w", "a", Kind::Modified)]).by(by(2)));
        log.record(list(vec![p("w", "a", Kind::Modified)]).by(by(3)));
        log.record(
            Expected {
                rename: true,
                ..list(vec![p("w", "a", Kind::Deleted), p("w", "b", Kind::Added)])
            }
            .by(by(4)),
        );
        let (w, _) = log.changes("w", &[]);
        let got: Vec<(&str, u32, u32)> = w
            .iter()
            .map(|c| {
                let by = c.by.as_ref().expect("attributed");
                (c.path.to_str().unwrap_or(""), by.first.pid, by.last.pid)
            })
            .collect();
        // `a` was made here and renamed away: no change; `b` is `a`'s.
        assert_eq!(got, [("b", 1, 4)]);
    }

    #[test]
    fn created_then_deleted_is_nothing_and_deleted_then_made_is_modified() {
        let log = ChangeLog::default();
        log.record(list(vec![
            p("w", "a", Kind::Added),
            p("w", "a", Kind::Modified),
            p("w", "b", Kind::Added),
            p("w", "b", Kind::Deleted),
            p("w", "c", Kind::Deleted),
            p("w", "c", Kind::Added),
            p("w", "d", Kind::Modified),
            p("w", "d", Kind::Deleted),
            p("x", "e/f", Kind::Added),
        ]));
        let (w, truncated) = log.changes("w", &[]);
        assert!(!truncated);
        let got: Vec<(&str, Kind)> = w
            .iter()
            .map(|c| (c.path.to_str().unwrap_or(""), c.kind))
            .collect();
        assert_eq!(
            got,
            [
                ("a", Kind::Added),
                ("c", Kind::Modified),
                ("d", Kind::Deleted)
            ]
        );
        assert_eq!(log.changes("x", &[PathBuf::from("e")]).0.len(), 1);
        assert!(log.changes("x", &[PathBuf::from("g")]).0.is_empty());
    }
}

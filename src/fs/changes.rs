//! The per-task change report of plain rw zones: each path this mount's
//! workers created, modified or deleted since it was mounted, as the
//! mount saw the calls succeed (a staged zone's report comes from its
//! stage instead). A path created and then deleted is no change; a renamed
//! file is deleted at its old name and created at its new one (a renamed
//! directory too, without its contents). Bounded: past [`MAX_PATHS`] paths
//! the report says it is incomplete.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use parking_lot::Mutex;

use crate::policy::Op;

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
}

/// One path an allowed operation will change, once it succeeds.
#[derive(Debug, Clone)]
pub struct Pending {
    zone: String,
    path: PathBuf,
    kind: Kind,
}

/// What a request will change in plain rw zones: what its gate expects,
/// carried by the request to the point where it succeeds, and recorded
/// there ([`ChangeLog::record`]).
#[derive(Debug, Clone, Default)]
pub struct Expected(Vec<Pending>);

impl Expected {
    /// What an allowed `op` will change in plain rw zones.
    pub fn of(op: &Op<'_>) -> Expected {
        let mut expected = Vec::new();
        let mut add = |at: &crate::policy::Loc<'_>, kind: Kind| {
            let plain = at
                .zone
                .filter(|z| z.access == crate::config::Access::Rw && !z.staged);
            if let Some(z) = plain {
                expected.push(Pending {
                    zone: z.name.clone(),
                    path: at.path.to_path_buf(),
                    kind,
                });
            }
        };
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
        Expected(expected)
    }

    /// What both requests' parts will change, `self`'s first.
    pub fn and(mut self, other: Expected) -> Expected {
        self.0.extend(other.0);
        self
    }
}

/// The report: by zone, by path.
#[derive(Debug, Default)]
pub struct ChangeLog {
    inner: Mutex<Log>,
}

#[derive(Debug, Default)]
struct Log {
    /// By zone; each zone's paths unordered (a hash costs less than the
    /// path comparisons of an ordered map on every create and unlink),
    /// sorted when a report is asked for.
    zones: BTreeMap<String, HashMap<PathBuf, Kind>>,
    paths: usize,
    truncated: bool,
}

impl ChangeLog {
    /// Record what a request that succeeded changed.
    pub fn record(&self, done: Expected) {
        let Expected(done) = done;
        if done.is_empty() {
            return;
        }
        let mut log = self.inner.lock();
        for p in done {
            let Log {
                zones,
                paths,
                truncated,
            } = &mut *log;
            let zone = match zones.get_mut(&p.zone) {
                Some(z) => z,
                None => zones.entry(p.zone).or_default(),
            };
            let prev = zone.get(&p.path).copied();
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
                    if zone.remove(&p.path).is_some() {
                        *paths -= 1;
                    }
                }
                Some(k) if prev.is_some() => {
                    zone.insert(p.path, k);
                }
                Some(_) if *paths >= MAX_PATHS => *truncated = true,
                Some(k) => {
                    zone.insert(p.path, k);
                    *paths += 1;
                }
            }
        }
    }

    /// Zone `zone`'s changes under `filter` (empty: all), in path order,
    /// and whether the log stopped recording (too many paths).
    pub fn changes(&self, zone: &str, filter: &[PathBuf]) -> (Vec<Change>, bool) {
        let log = self.inner.lock();
        let mut list: Vec<Change> = log
            .zones
            .get(zone)
            .into_iter()
            .flatten()
            .filter(|(p, _)| filter.is_empty() || filter.iter().any(|f| p.starts_with(f)))
            .map(|(p, k)| Change {
                path: p.clone(),
                kind: *k,
            })
            .collect();
        list.sort_unstable_by(|a, b| a.path.cmp(&b.path));
        (list, log.truncated)
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
        }
    }

    #[test]
    fn created_then_deleted_is_nothing_and_deleted_then_made_is_modified() {
        let log = ChangeLog::default();
        log.record(Expected(vec![
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

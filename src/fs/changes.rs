//! The per-task change report of plain rw zones: each path this mount's
//! workers created, modified or deleted since it was mounted, as the
//! mount saw the calls succeed (a staged zone's report comes from its
//! stage instead). A path created and then deleted is no change; a renamed
//! file is deleted at its old name and created at its new one. A renamed
//! directory is too, and so is each path under it that was made or
//! changed (one deleted there stays deleted where it was); what was under
//! it untouched is not listed. An exchange (`RENAME_EXCHANGE`) changes both
//! names, and the records under each go with their directory to the
//! other name. What is listed is always there now (added, modified) or
//! gone now (deleted); what was there at the mount is known where the
//! daemon saw it (see `move_trees`, `put`, and docs/staged.md). Bounded:
//! past [`MAX_PATHS`] paths the report says it is incomplete.
//!
//! Each change also names who made it (`actor`): a plain zone's first and
//! last actor per path are kept here, beside its kind; a staged zone's go
//! to its stage (`stage::actors`), where they outlive the daemon.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::path::{Path, PathBuf};
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
    /// A move inside one zone: `list` is its source, then its target.
    moves: Move,
    by: Option<Box<Actor>>,
}

/// What a request moves inside one zone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Move {
    #[default]
    None,
    /// A rename; `tree`: of a directory (what is under it moves too).
    Rename { tree: bool },
    /// An exchange of two names; `tree`: either is a directory.
    Exchange { tree: bool },
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
        let moves = match op {
            Op::Rename {
                is_dir,
                to_is_dir,
                exchange,
                ..
            } => match exchange {
                false => Move::Rename { tree: *is_dir },
                true => Move::Exchange {
                    tree: *is_dir || *to_is_dir == Some(true),
                },
            },
            _ => Move::None,
        };
        match op {
            Op::WriteContent { at, .. } | Op::Metadata { at, .. } => add(at, Kind::Modified),
            Op::NewName { at, .. } => add(at, Kind::Added),
            Op::Remove { at, .. } => add(at, Kind::Deleted),
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
        let one_zone = expected.len() == 2 && expected[0].zone == expected[1].zone;
        Expected {
            moves: if one_zone { moves } else { Move::None },
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
        self.moves = Move::None;
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
    /// By zone, by path (in path order: a moved directory's records are
    /// one range; the keys compare as bytes, see [`PathKey`]).
    zones: BTreeMap<String, BTreeMap<PathKey, Kind>>,
    paths: usize,
    truncated: bool,
    /// By zone: who changed each path.
    actors: BTreeMap<String, Trails>,
    /// The zones where a directory moved: there a path with no record may
    /// sit under a new name its directory took (see [`Log::put`]).
    moved: BTreeSet<String>,
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
        if let (Move::Rename { tree: true } | Move::Exchange { tree: true }, false) =
            (done.moves, done.list[0].staged)
        {
            let (from, to) = (&done.list[0], &done.list[1]);
            let exchange = matches!(done.moves, Move::Exchange { .. });
            let left = log.move_trees(&from.zone, &from.path, &to.path, exchange);
            // Who made them went with them (`Trails`); a place the move
            // left deleted is the mover's change.
            if let Some(by) = &done.by {
                let t = log.actors.entry(from.zone.clone()).or_default();
                for p in left {
                    if t.first_last(&p).is_none() {
                        t.change(&p, (**by).clone());
                    }
                }
            }
        }
        for p in done.list {
            if p.staged {
                continue;
            }
            let gone = log.put(&p.zone, PathKey::from(p.path), p.kind);
            // Made and gone again: no change, and no record.
            if let (Some(key), Some(t)) = (gone, log.actors.get_mut(&p.zone)) {
                t.forget(std::slice::from_ref(key.path()), &[]);
            }
        }
    }

    /// Who made what `done` changed in staged zones: in the zone's stage.
    fn attribute_staged(&self, done: &Expected, by: &Actor) {
        let Some(stages) = &self.stages else { return };
        let warn = |p: &Pending, e: std::io::Error| {
            tracing::warn!(zone = %p.zone, path = %crate::text::path(&p.path), "cannot record who changed a staged path: {e}");
        };
        if done.moves != Move::None {
            let (from, to) = (&done.list[0], &done.list[1]);
            if let Some(s) = stages.by_name(&from.zone).filter(|_| from.staged) {
                let r = match done.moves {
                    Move::Exchange { .. } => s.actors.exchange(&from.path, &to.path, by),
                    _ => s.actors.rename(&from.path, &to.path, by),
                };
                if let Err(e) = r {
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
        let list: Vec<Change> = log
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
        (list, log.truncated)
    }
}

impl Log {
    /// A change of kind `kind` to `key` in zone `zone`, merged with the
    /// one it had. The key, when the path is left with no change (made
    /// and gone again).
    fn put(&mut self, zone: &str, key: PathKey, kind: Kind) -> Option<PathKey> {
        let map = match self.zones.get_mut(zone) {
            Some(z) => z,
            None => self.zones.entry(zone.to_owned()).or_default(),
        };
        let prev = map.get(&key).copied();
        // Under a directory that was not there at the mount, nothing was:
        // a path with no record there, moved in with its directory, was
        // not (gone again it is no change; changed it is added).
        let fresh = prev.is_none() && self.moved.contains(zone) && under_added(map, key.path());
        let next = match (prev, kind) {
            (None, Kind::Deleted) if fresh => None,
            (None, _) if fresh => Some(Kind::Added),
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
                if map.remove(&key).is_some() {
                    self.paths -= 1;
                }
                return Some(key);
            }
            Some(k) if prev.is_some() => {
                map.insert(key, k);
            }
            Some(_) if self.paths >= MAX_PATHS => self.truncated = true,
            Some(k) => {
                map.insert(key, k);
                self.paths += 1;
            }
        }
        None
    }

    /// The records under directory `from` (not `from`'s own) go with it
    /// to `to`; with `exchange`, those under `to` come to `from` too.
    /// Each moved path is deleted at its old name and made at its new one
    /// (a path deleted there stays deleted where it was: nothing moved).
    /// Costs what is recorded under the two names. The old names left
    /// with a change (deleted, or another moved record's new name).
    fn move_trees(&mut self, zone: &str, from: &Path, to: &Path, exchange: bool) -> Vec<PathBuf> {
        if !self.moved.contains(zone) {
            self.moved.insert(zone.to_owned());
        }
        let Some(map) = self.zones.get(zone) else {
            return Vec::new();
        };
        let mut trees = vec![(from, to)];
        if exchange {
            trees.push((to, from));
        }
        let mut moved: Vec<(PathBuf, PathBuf, Kind)> = Vec::new();
        for (old, new) in &trees {
            let below = map
                .range((Bound::Excluded(PathKey::from(*old)), Bound::Unbounded))
                .take_while(|(key, _)| key.path().starts_with(old));
            for (key, kind) in below {
                if let Ok(tail) = key.path().strip_prefix(old) {
                    moved.push((key.path().clone(), new.join(tail), *kind));
                }
            }
        }
        // All old names first: under an exchange a path can be both a
        // moved record's old name and another's new one.
        let mut left = Vec::new();
        for (old, _, kind) in &moved {
            let gone = self.put(zone, PathKey::from(old.as_path()), Kind::Deleted);
            if gone.is_none() && *kind != Kind::Deleted {
                left.push(old.clone());
            }
        }
        for (_, new, kind) in moved {
            if kind != Kind::Deleted {
                self.put(zone, PathKey::from(new), Kind::Added);
            }
        }
        left
    }
}

/// Whether a directory above `path` was made since the mount.
fn under_added(map: &BTreeMap<PathKey, Kind>, path: &Path) -> bool {
    path.ancestors()
        .skip(1)
        .take_while(|a| !a.as_os_str().is_empty())
        .any(|a| map.get(&PathKey::from(a)) == Some(&Kind::Added))
}

/// Who made what `done` changed in plain zones: here.
fn attribute_plain(log: &mut Log, done: &Expected, by: &Actor) {
    if done.moves != Move::None {
        let (from, to) = (&done.list[0], &done.list[1]);
        if !from.staged {
            let Log { zones, actors, .. } = log;
            let t = actors.entry(from.zone.clone()).or_default();
            // A record of what was deleted under a moved directory stays
            // where it was deleted (the kinds do the same: `move_trees`).
            let kinds = zones.get(&from.zone);
            let carry =
                |p: &Path| kinds.and_then(|k| k.get(&PathKey::from(p))) != Some(&Kind::Deleted);
            let seq = t.seq() + 1;
            let exchange = matches!(done.moves, Move::Exchange { .. });
            t.move_where(&from.path, &to.path, exchange, seq, by.clone(), &carry);
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
            moves: Move::None,
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
                moves: Move::Rename { tree: false },
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

/// The report against a model of the zone's tree: whatever the creates,
/// removes, renames and exchanges, of files and directories, each path
/// it lists says truly what happened to that path since the mount.
#[cfg(test)]
mod model {
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};

    use proptest::prelude::*;

    use super::*;

    /// A tree: each path, and whether it is a directory.
    type Tree = BTreeMap<PathBuf, bool>;

    const NAMES: [&str; 9] = [
        "a", "b", "a-b", "a/x", "a/y", "b/x", "a/x/z", "b/x/z", "a-b/x",
    ];

    #[derive(Debug, Clone)]
    enum Op {
        Create(usize, bool),
        Remove(usize),
        Rename(usize, usize),
        Exchange(usize, usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        let n = NAMES.len();
        prop_oneof![
            3 => (0..n, any::<bool>()).prop_map(|(p, d)| Op::Create(p, d)),
            2 => (0..n).prop_map(Op::Remove),
            3 => (0..n, 0..n).prop_map(|(a, b)| Op::Rename(a, b)),
            2 => (0..n, 0..n).prop_map(|(a, b)| Op::Exchange(a, b)),
        ]
    }

    fn parent_is_dir(t: &Tree, p: &Path) -> bool {
        match p.parent().filter(|q| !q.as_os_str().is_empty()) {
            None => true,
            Some(q) => t.get(q) == Some(&true),
        }
    }

    fn has_children(t: &Tree, p: &Path) -> bool {
        t.keys().any(|q| q != p && q.starts_with(p))
    }

    /// `t` with what is at and under `from` moved to `to` (and the other
    /// way too, with `both`).
    fn moved(t: &Tree, from: &Path, to: &Path, both: bool) -> Tree {
        let mut out = Tree::new();
        for (p, d) in t {
            let swap = |a: &Path, b: &Path| {
                p.strip_prefix(a)
                    .ok()
                    .map(|tail| b.join(tail).components().collect::<PathBuf>())
            };
            let q = swap(from, to)
                .or_else(|| both.then(|| swap(to, from)).flatten())
                .unwrap_or_else(|| p.clone());
            out.insert(q, *d);
        }
        out
    }

    fn pending(path: &Path, kind: Kind) -> Pending {
        Pending {
            zone: "w".into(),
            path: path.to_path_buf(),
            kind,
            staged: false,
        }
    }

    /// What the gate would expect of `op` on `t` (none: the call fails),
    /// and the tree after it.
    fn apply(t: &Tree, op: &Op) -> Option<(Expected, Tree)> {
        let path = |i: usize| Path::new(NAMES[i]);
        let done = |list, moves| Expected {
            list,
            moves,
            by: Some(Box::new(Actor::unknown(1, 0))),
        };
        match *op {
            Op::Create(p, dir) => {
                let p = path(p);
                if t.contains_key(p) || !parent_is_dir(t, p) {
                    return None;
                }
                let mut after = t.clone();
                after.insert(p.to_path_buf(), dir);
                Some((done(vec![pending(p, Kind::Added)], Move::None), after))
            }
            Op::Remove(p) => {
                let p = path(p);
                if !t.contains_key(p) || has_children(t, p) {
                    return None;
                }
                let mut after = t.clone();
                after.remove(p);
                Some((done(vec![pending(p, Kind::Deleted)], Move::None), after))
            }
            Op::Rename(a, b) => {
                let (from, to) = (path(a), path(b));
                let is_dir = *t.get(from)?;
                if from == to || to.starts_with(from) || from.starts_with(to) {
                    return None;
                }
                if !parent_is_dir(t, to) {
                    return None;
                }
                let to_is_dir = t.get(to).copied();
                match to_is_dir {
                    Some(d) if d != is_dir => return None,
                    Some(true) if has_children(t, to) => return None,
                    _ => {}
                }
                let mut after = t.clone();
                after.retain(|p, _| !p.starts_with(to));
                let after = moved(&after, from, to, false);
                let to_kind = if to_is_dir.is_some() {
                    Kind::Modified
                } else {
                    Kind::Added
                };
                let list = vec![pending(from, Kind::Deleted), pending(to, to_kind)];
                Some((done(list, Move::Rename { tree: is_dir }), after))
            }
            Op::Exchange(a, b) => {
                let (x, y) = (path(a), path(b));
                let (dx, dy) = (*t.get(x)?, *t.get(y)?);
                if x == y || x.starts_with(y) || y.starts_with(x) {
                    return None;
                }
                let list = vec![pending(x, Kind::Modified), pending(y, Kind::Modified)];
                let after = moved(t, x, y, true);
                Some((done(list, Move::Exchange { tree: dx || dy }), after))
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(1024),
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        /// Added: there now, not at the mount; deleted: the other way;
        /// modified: there at both. And a path made or removed by a call
        /// of its own, not moved since, is listed.
        #[test]
        fn each_path_listed_says_what_happened_to_it(
            start in proptest::collection::vec((0..NAMES.len(), any::<bool>()), 0..6),
            ops in proptest::collection::vec(op(), 1..30),
        ) {
            let mut mount = Tree::new();
            for (p, dir) in start {
                let p = Path::new(NAMES[p]);
                if parent_is_dir(&mount, p) && !mount.contains_key(p) {
                    mount.insert(p.to_path_buf(), dir);
                }
            }
            let log = ChangeLog::default();
            let mut now = mount.clone();
            for op in &ops {
                if let Some((expected, after)) = apply(&now, op) {
                    log.record(expected);
                    now = after;
                }
            }
            let (report, truncated) = log.changes("w", &[]);
            prop_assert!(!truncated);
            // Where a directory left a name with what was under it
            // untouched (a rename's source, both names of an exchange), or
            // took a name that was there at the mount, what was under that
            // name at the mount is not known to the log: what is under it
            // now is always told right, what was there only where a record
            // says.
            let mut unknown: Vec<PathBuf> = Vec::new();
            let mut tree = mount.clone();
            for op in &ops {
                let Some((expected, after)) = apply(&tree, op) else { continue };
                match expected.moves {
                    Move::Rename { tree: true } => {
                        unknown.push(expected.list[0].path.clone());
                        let to = &expected.list[1].path;
                        if mount.contains_key(to) {
                            unknown.push(to.clone());
                        }
                    }
                    Move::Exchange { tree: true } => {
                        unknown.extend(expected.list.iter().map(|p| p.path.clone()));
                    }
                    _ => {}
                }
                tree = after;
            }
            let known = |p: &Path| !unknown.iter().any(|u| p != u && p.starts_with(u));
            for c in &report {
                let (was, is) = (mount.contains_key(&c.path), now.contains_key(&c.path));
                let ok = match c.kind {
                    Kind::Added => is && (!was || !known(&c.path)),
                    Kind::Deleted => !is && (was || !known(&c.path)),
                    Kind::Modified | Kind::Renamed => is && (was || !known(&c.path)),
                };
                prop_assert!(ok, "{:?} {:?}: at the mount {was}, now {is}; {report:?}", c.kind, c.path);
                prop_assert!(c.by.is_some(), "{:?} names who made it", c.path);
            }
            // The last call that named a path as itself decides whether
            // it is listed: a path made or removed there is.
            let mut last: BTreeMap<PathBuf, bool> = BTreeMap::new();
            let mut tree = mount.clone();
            for op in &ops {
                let Some((expected, after)) = apply(&tree, op) else { continue };
                // A move carries what was under its names elsewhere.
                if expected.moves != Move::None {
                    let names: Vec<&Path> = expected.list.iter().map(|p| p.path.as_path()).collect();
                    last.retain(|p, _| !names.iter().any(|n| p.starts_with(n) && p != n));
                }
                for p in &expected.list {
                    last.insert(p.path.clone(), true);
                }
                tree = after;
            }
            for (p, _) in last {
                let changed = mount.contains_key(&p) != now.contains_key(&p);
                if changed && known(&p) {
                    prop_assert!(report.iter().any(|c| c.path == p), "{p:?} is missing from {report:?}");
                }
            }
        }
    }
}

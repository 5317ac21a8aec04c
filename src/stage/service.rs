//! Staging as one service: `changes`, `commit` and `discard` of a mount's
//! staged zones, answered as the types of [`report`](super::report).
//!
//! - [`StageService`]: a live mount's (the daemon holds the stage). What
//!   it needs of the mount it asks through [`LiveMount`], which the
//!   filesystem core implements: mutations held still while the layers
//!   change, files open for writing, the zone moved onto a fresh overlay
//!   and the kernel told to forget what it cached, who changed the stage
//!   (their side may not decide), the plain rw zones' report. Commits and
//!   discards go in the ledger.
//! - [`OfflineStage`]: a stage dir no mount holds (the CLI), under the
//!   stage's lock.
//!
//! Paths are given as a worker sees them (`/zone/rel`, exact); a zone
//! named alone, or no path at all, means all of it.

use std::collections::BTreeMap;
use std::io;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLockWriteGuard;

use super::report::{Change, ChangesReport, CommitReport, DiscardReport, Kind, ZoneChanges};
use super::work::{Detail, Outcome, ZoneWork, by_zone};
use super::{StageError, Stages, dir, tree};
use crate::approval::side::{NsId, Worker, WorkerSide};
use crate::audit::{self, Audit};

/// What the stage service needs of a live mount (the filesystem core
/// implements it). Zones are named by their index in the mount's table.
pub trait LiveMount: Send + Sync {
    /// Hold every mutation back until the guard is dropped.
    fn hold_still(&self) -> RwLockWriteGuard<'_, ()>;
    /// How many files of zone `zone` are open for writing now.
    fn open_for_writing(&self, zone: usize) -> usize;
    /// Mount zone `zone`'s overlay afresh and make it the zone's dir (its
    /// layers changed underneath).
    fn restage(&self, zone: usize) -> io::Result<()>;
    /// Tell the kernel to forget what it cached of zone `zone`, and the
    /// names `paths` (relative to the zone dir). Not while mutations are
    /// held still.
    fn forget_cached(&self, zone: usize, paths: &[&Path]);
    /// The processes that changed the stages (most recent last) and the
    /// PID namespaces they were in.
    fn stage_writers(&self) -> (Vec<u32>, Vec<NsId>);
    /// The rw zones in the mount's order, each with whether it is staged.
    fn rw_zones(&self) -> Vec<(String, bool)>;
    /// What the workers changed in plain rw zone `zone` under `filter`
    /// (empty: all), and whether the list is incomplete.
    fn plain_changes(&self, zone: &str, filter: &[PathBuf]) -> (Vec<Change>, bool);
}

/// Who asks for a commit or discard: a process on the worker's side may
/// not (`approval::side`).
#[derive(Debug, Clone, Copy)]
pub struct Caller {
    pub uid: u32,
    /// None: not known (e.g. this process, the supervisor).
    pub pid: Option<u32>,
}

/// How long a commit or discard waits for files just closed: the kernel
/// tells the daemon a file is closed (FUSE_RELEASE) after `close` has
/// returned to the worker.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// Most paths one ledger record lists.
const LEDGER_PATHS: usize = 1000;

/// A live mount's staged zones as a service: the control socket's and
/// the Rust API's `changes`, `commit` and `discard`.
pub struct StageService {
    live: Arc<dyn LiveMount>,
    /// None: no zone is staged (`changes` still reports plain rw zones).
    stages: Option<Arc<Stages>>,
    audit: Option<Arc<Audit>>,
    side: Arc<WorkerSide>,
}

impl std::fmt::Debug for StageService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StageService")
            .field("stages", &self.stages)
            .finish_non_exhaustive()
    }
}

impl StageService {
    /// The service of a mount: `live` its core, `stages` its stages,
    /// commits and discards logged in `audit`, refused to the worker's
    /// `side`.
    pub fn new(
        live: Arc<dyn LiveMount>,
        stages: Option<Arc<Stages>>,
        audit: Option<Arc<Audit>>,
        side: Arc<WorkerSide>,
    ) -> StageService {
        StageService {
            live,
            stages,
            audit,
            side,
        }
    }

    /// Each staged zone's work, with its index.
    fn work(&self) -> Vec<(usize, ZoneWork)> {
        self.stages
            .iter()
            .flat_map(|s| s.iter())
            .map(|(i, z)| {
                (
                    i,
                    ZoneWork {
                        name: z.name.clone(),
                        backing: z.backing.clone(),
                        upper: z.upper.clone(),
                        dir: z.dir.clone(),
                        xattrs: z.xattrs,
                    },
                )
            })
            .collect()
    }

    /// The changes under `paths` of each rw zone: a staged zone's from its
    /// stage (with diffs when `diff`), a plain zone's as the mount saw them.
    pub fn changes(&self, paths: &[PathBuf], diff: bool) -> Result<ChangesReport, String> {
        self.report(paths, if diff { Detail::Diff } else { Detail::List })
    }

    /// [`Self::changes`], each staged zone's with its patch in git's
    /// extended diff format (`changes --patch`).
    pub fn patch(&self, paths: &[PathBuf]) -> Result<ChangesReport, String> {
        self.report(paths, Detail::Patch)
    }

    fn report(&self, paths: &[PathBuf], detail: Detail) -> Result<ChangesReport, String> {
        let work = self.work();
        let rw = self.live.rw_zones();
        let names: Vec<&str> = rw.iter().map(|(n, _)| n.as_str()).collect();
        let wanted = by_zone(paths, &names)?;
        let mut zones = Vec::new();
        for (name, staged) in &rw {
            let Some(filter) = wanted.get(name) else {
                continue;
            };
            if *staged {
                if let Some((i, w)) = work.iter().find(|(_, w)| &w.name == name) {
                    let mut z = w.changes(filter, detail)?;
                    if let Some(stage) = self.stages.as_ref().and_then(|s| s.zone(*i)) {
                        stage.actors.fill(&mut z.changes);
                    }
                    zones.push(z);
                }
            } else {
                let (changes, incomplete) = self.live.plain_changes(name, filter);
                zones.push(ZoneChanges {
                    zone: name.clone(),
                    staged: false,
                    changes,
                    incomplete,
                    patch: None,
                });
            }
        }
        Ok(ChangesReport { zones })
    }

    /// Apply the staged changes under `paths` to the backing dirs
    /// (conflicts left out unless `force`), for `by`.
    pub fn commit(
        &self,
        paths: &[PathBuf],
        force: bool,
        by: Caller,
    ) -> Result<CommitReport, String> {
        let work = self.work();
        let names: Vec<&str> = work.iter().map(|(_, w)| w.name.as_str()).collect();
        let wanted = by_zone(paths, &names)?;
        self.own_side("commit", by)?;
        let zones = self.change_stages(&work, &wanted, |w, fp, f| w.commit(fp, f, force))?;
        let report = CommitReport { zones };
        let applied = report
            .zones
            .iter()
            .flat_map(|z| z.applied.iter().map(move |c| (z.zone.as_str(), c)));
        self.log(
            audit::Kind::Commit,
            applied,
            Some(report.conflicts() as u64),
            by,
        );
        Ok(report)
    }

    /// Drop the staged changes under `paths`, for `by`.
    pub fn discard(&self, paths: &[PathBuf], by: Caller) -> Result<DiscardReport, String> {
        let work = self.work();
        let names: Vec<&str> = work.iter().map(|(_, w)| w.name.as_str()).collect();
        let wanted = by_zone(paths, &names)?;
        self.own_side("discard", by)?;
        let zones = self.change_stages(&work, &wanted, ZoneWork::discard)?;
        let report = DiscardReport { zones };
        let dropped = report
            .zones
            .iter()
            .flat_map(|z| z.discarded.iter().map(move |c| (z.zone.as_str(), c)));
        self.log(audit::Kind::Discard, dropped, None, by);
        Ok(report)
    }

    /// Why `by` may not commit or discard: it is on the side of a process
    /// that changed the stages (`approval::side`).
    fn own_side(&self, what: &str, by: Caller) -> Result<(), String> {
        let (writers, spaces) = self.live.stage_writers();
        match self
            .side
            .refusal(by.pid, by.uid, &writers, &spaces, Worker::Staged)
        {
            Some(why) => Err(format!("{what} refused: {why}")),
            None => Ok(()),
        }
    }

    /// Wait (bounded) until no file of the staged zones is open for writing.
    fn settle_writers(&self, work: &[(usize, ZoneWork)]) {
        let deadline = Instant::now() + CLOSE_GRACE;
        while work.iter().any(|(i, _)| self.live.open_for_writing(*i) > 0)
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// A commit or discard (`apply`, on each zone `wanted` names), once
    /// [`Self::own_side`] let it: mutations held still while the layers
    /// change (files just closed given a moment); a zone with files still
    /// open for writing left alone (its answer says so); each zone changed
    /// moved onto a fresh overlay, and the kernel told to forget what it
    /// cached there.
    fn change_stages<T: Outcome>(
        &self,
        work: &[(usize, ZoneWork)],
        wanted: &BTreeMap<String, Vec<PathBuf>>,
        apply: impl Fn(&ZoneWork, &tree::Fingerprints, &[PathBuf]) -> Result<T, String>,
    ) -> Result<Vec<T>, String> {
        let mut zones = Vec::new();
        let mut forget = Vec::new();
        self.settle_writers(work);
        {
            let _still = self.live.hold_still();
            for (i, w) in work {
                let (Some(filter), Some(stage)) = (
                    wanted.get(&w.name),
                    self.stages.as_ref().and_then(|s| s.zone(*i)),
                ) else {
                    continue;
                };
                let open = self.live.open_for_writing(*i);
                if open > 0 {
                    zones.push(T::left_alone(&w.name, open));
                    continue;
                }
                let mut answer = apply(w, &stage.fingerprints, filter)?;
                // Who made each change goes in the answer (and the
                // ledger); the record of what is gone from the stage goes.
                stage.actors.fill(answer.changes_mut());
                let cleared = answer.cleared(filter);
                if let Err(e) = stage.actors.forget(answer.changes_mut(), &cleared) {
                    tracing::warn!(zone = %w.name, "cannot drop the attribution of what left the stage: {e}");
                }
                self.live
                    .restage(*i)
                    .map_err(|e| format!("zone '{}': cannot mount its stage again: {e}", w.name))?;
                forget.push((*i, answer.done()));
                zones.push(answer);
            }
        }
        for (i, paths) in &forget {
            let refs: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
            self.live.forget_cached(*i, &refs);
        }
        Ok(zones)
    }

    /// The ledger's record of a commit or discard: who, which paths (and
    /// for a commit how many were left out).
    fn log<'a>(
        &self,
        kind: audit::Kind,
        changes: impl Iterator<Item = (&'a str, &'a Change)>,
        conflicts: Option<u64>,
        by: Caller,
    ) {
        let Some(a) = &self.audit else { return };
        let mut actors = Vec::new();
        let paths: Vec<Vec<u8>> = changes
            .map(|(zone, c)| {
                actors.push(first_last(c));
                let mut p = format!("/{zone}/").into_bytes();
                p.extend(c.path.clone().into_os_string().into_vec());
                p
            })
            .collect();
        a.log(
            kind,
            &audit::Record {
                approver_uid: Some(by.uid),
                pid: by.pid,
                conflicts,
                ..Default::default()
            }
            .paths(&paths)
            .actors(actors),
        );
    }

    /// At unmount: each rw zone's change report, in the ledger (one record
    /// per zone that changed: counts, and the paths as `added /zone/p`).
    pub fn log_changes(&self, audit: &Audit) {
        let report = match self.changes(&[], false) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!("cannot make the change report for the ledger: {e}");
                return;
            }
        };
        for z in &report.zones {
            let list = &z.changes;
            if list.is_empty() {
                continue;
            }
            let count = |k: Kind| list.iter().filter(|c| c.kind == k).count();
            let actors = list.iter().take(LEDGER_PATHS).map(first_last).collect();
            let paths: Vec<Vec<u8>> = list
                .iter()
                .take(LEDGER_PATHS)
                .map(|c| {
                    let mut line = format!("{} /{}/", c.kind.as_str(), z.zone).into_bytes();
                    line.extend(c.path.clone().into_os_string().into_vec());
                    line
                })
                .collect();
            audit.log(
                audit::Kind::Changes,
                &audit::Record {
                    zone: Some(z.zone.clone()),
                    summary: Some(format!(
                        "{} added, {} modified, {} deleted, {} renamed{}{}",
                        count(Kind::Added),
                        count(Kind::Modified),
                        count(Kind::Deleted),
                        count(Kind::Renamed),
                        if z.staged {
                            " (staged, not committed)"
                        } else {
                            ""
                        },
                        if list.len() > LEDGER_PATHS {
                            format!("; the first {LEDGER_PATHS} paths listed")
                        } else {
                            String::new()
                        }
                    )),
                    ..Default::default()
                }
                .paths(&paths)
                .actors(actors),
            );
        }
    }
}

/// A change's first and last actor, when both are known.
fn first_last(c: &Change) -> Option<crate::actor::FirstLast> {
    Some(crate::actor::FirstLast {
        first: c.first.clone()?,
        last: c.last.clone()?,
    })
}

/// A stage dir no mount holds, locked while this is alive: its changes,
/// committed or discarded from here.
#[derive(Debug)]
pub struct OfflineStage {
    work: Vec<ZoneWork>,
    _held: dir::Held,
}

impl OfflineStage {
    /// Lock stage dir `dir` (refused while a mount holds it) and read its
    /// zones.
    pub fn open(dir: &Path) -> Result<OfflineStage, String> {
        let held = dir::hold(dir, Path::new("")).map_err(|e| match e {
            StageError::InUse { .. } => {
                format!("{e} — while it is mounted, give the mountpoint instead of the stage dir")
            }
            other => other.to_string(),
        })?;
        let mut work = Vec::new();
        for (name, entry) in &held.manifest.zones {
            let xattrs = dir::xattrs_of(&entry.xattrs)
                .ok_or_else(|| format!("{}: unknown xattrs '{}'", dir.display(), entry.xattrs))?;
            let zdir = dir::zone_dir(dir, name);
            work.push(ZoneWork {
                name: name.clone(),
                backing: entry.backing.clone(),
                upper: zdir.join("upper"),
                dir: zdir,
                xattrs,
            });
        }
        Ok(OfflineStage { work, _held: held })
    }

    /// Each zone `paths` names, with its filter.
    fn wanted(&self, paths: &[PathBuf]) -> Result<Vec<(&ZoneWork, Vec<PathBuf>)>, String> {
        let names: Vec<&str> = self.work.iter().map(|w| w.name.as_str()).collect();
        let mut wanted = by_zone(paths, &names)?;
        Ok(self
            .work
            .iter()
            .filter_map(|w| wanted.remove(&w.name).map(|f| (w, f)))
            .collect())
    }

    /// The staged changes under `paths` (with diffs when `diff`).
    pub fn changes(&self, paths: &[PathBuf], diff: bool) -> Result<ChangesReport, String> {
        self.report(paths, if diff { Detail::Diff } else { Detail::List })
    }

    /// The staged changes under `paths`, each zone's with its patch.
    pub fn patch(&self, paths: &[PathBuf]) -> Result<ChangesReport, String> {
        self.report(paths, Detail::Patch)
    }

    fn report(&self, paths: &[PathBuf], detail: Detail) -> Result<ChangesReport, String> {
        let zones = self
            .wanted(paths)?
            .into_iter()
            .map(|(w, f)| {
                let mut z = w.changes(&f, detail)?;
                w.actors()?.fill(&mut z.changes);
                Ok::<_, String>(z)
            })
            .collect::<Result<_, _>>()?;
        Ok(ChangesReport { zones })
    }

    /// Apply the staged changes under `paths` (conflicts too when `force`).
    pub fn commit(&self, paths: &[PathBuf], force: bool) -> Result<CommitReport, String> {
        let zones = self
            .wanted(paths)?
            .into_iter()
            .map(|(w, f)| {
                let mut z = w.commit(&w.fingerprints()?, &f, force)?;
                w.settle_actors(&mut z, &f)?;
                Ok::<_, String>(z)
            })
            .collect::<Result<_, _>>()?;
        Ok(CommitReport { zones })
    }

    /// Drop the staged changes under `paths`.
    pub fn discard(&self, paths: &[PathBuf]) -> Result<DiscardReport, String> {
        let zones = self
            .wanted(paths)?
            .into_iter()
            .map(|(w, f)| {
                let mut z = w.discard(&w.fingerprints()?, &f)?;
                w.settle_actors(&mut z, &f)?;
                Ok::<_, String>(z)
            })
            .collect::<Result<_, _>>()?;
        Ok(DiscardReport { zones })
    }
}

#[cfg(test)]
mod tests;

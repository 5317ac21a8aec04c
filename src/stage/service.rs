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

use super::dir::{Checkpoint, Pending, ZoneEntry};
use super::report::{
    Change, ChangesReport, CheckpointInfo, CheckpointsReport, CommitReport, DiscardReport, Kind,
    RewindReport, ZoneChanges, ZoneCheckpoints, ZoneRewind,
};
pub use super::work::{Detail, Span};
use super::work::{Outcome, ZoneWork, by_zone};
use super::{FlatBuild, StageError, Stages, dir, layers, tree};
use crate::approval::side::{AskedFrom, NsId, Worker, WorkerSide};
use crate::audit::{self, Audit};

/// What the stage service needs of a live mount (the filesystem core
/// implements it). Zones are named by their index in the mount's table.
pub trait LiveMount: Send + Sync {
    /// Hold every mutation back until the guard is dropped.
    fn hold_still(&self) -> RwLockWriteGuard<'_, ()>;
    /// How many files of zone `zone` are open for writing now.
    fn open_for_writing(&self, zone: usize) -> usize;
    /// The files of zone `zone` open for writing now: fds through its
    /// overlay, each with its path in the zone as the mount last saw it
    /// (None: not known).
    fn writable_fds(&self, zone: usize) -> Vec<(Arc<std::os::fd::OwnedFd>, Option<PathBuf>)>;
    /// Zone `zone`'s dir as the filesystem uses it (a staged zone's
    /// overlay root).
    fn zone_dir(&self, zone: usize) -> Option<Arc<std::os::fd::OwnedFd>>;
    /// Mount zone `zone`'s overlay afresh and make it the zone's dir (its
    /// layers changed underneath).
    fn restage(&self, zone: usize) -> io::Result<()>;
    /// Tell the kernel to forget what it cached of zone `zone`, and the
    /// names `paths` (relative to the zone dir). Not while mutations are
    /// held still.
    fn forget_cached(&self, zone: usize, paths: &[&Path]);
    /// Tell the kernel to forget the names of zone `zone`'s files that were
    /// kept open for reading across its overlay's last mounting (their next
    /// lookup gives them a node of their own, opened afresh). Not while
    /// mutations are held still.
    fn forget_kept_open(&self, _zone: usize) {}
    /// The processes that changed the stages (most recent last) and the
    /// PID namespaces they were in.
    fn stage_writers(&self) -> (Vec<AskedFrom>, Vec<NsId>);
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
                        checkpoints: z.checkpoints.lock().clone(),
                    },
                )
            })
            .collect()
    }

    /// The changes under `paths` of each rw zone (see [`Reports`]): a
    /// staged zone's from its stage, a plain zone's as the mount saw them.
    fn report_of(
        &self,
        paths: &[PathBuf],
        detail: Detail,
        span: Span,
    ) -> Result<ChangesReport, String> {
        // The layers don't change while they are read (a checkpoint's
        // merge, a rewind).
        let _held = self.stages.as_ref().map(|s| s.held());
        let work = self.work();
        if span != Span::default() {
            if self.stages.is_none() {
                return Err("this mount has no staged zone".into());
            }
            let list: Vec<ZoneWork> = work.into_iter().map(|(_, w)| w).collect();
            return span_changes(&list, paths, detail, span);
        }
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
        self.commit_upto(paths, force, None, by)
    }

    /// [`Self::commit`] of the zones' state at checkpoint `upto` (none:
    /// now). The checkpoints' layers up to it (all: none) are merged
    /// first: the checkpoints before it (all) are dropped.
    pub fn commit_upto(
        &self,
        paths: &[PathBuf],
        force: bool,
        upto: Option<u64>,
        by: Caller,
    ) -> Result<CommitReport, String> {
        let mut work = self.work();
        let names: Vec<&str> = work.iter().map(|(_, w)| w.name.as_str()).collect();
        let wanted = by_zone(paths, &names)?;
        if let Some(id) = upto {
            work.retain(|(_, w)| w.has(id));
            if !work.iter().any(|(_, w)| wanted.contains_key(&w.name)) {
                return Err(no_checkpoint(id));
            }
        }
        self.own_side("commit", by)?;
        let zones = self.change_stages(
            &work,
            &wanted,
            upto,
            |w, fp, f| w.commit_applies_nothing(fp, f, force, upto),
            |w, fp, f| match upto {
                Some(id) => w.commit_upto(fp, f, force, id),
                None => w.commit(fp, f, force),
            },
        )?;
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
        let zones =
            self.change_stages(&work, &wanted, None, |_, _, _| Ok(None), ZoneWork::discard)?;
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
    /// open for writing left alone (its answer says so), and so is one
    /// `idle` answers for (it would change nothing: its checkpoints stay);
    /// each zone changed moved onto a fresh overlay, and the kernel told
    /// to forget what it cached there.
    fn change_stages<T: Outcome>(
        &self,
        work: &[(usize, ZoneWork)],
        wanted: &BTreeMap<String, Vec<PathBuf>>,
        upto: Option<u64>,
        idle: impl Fn(&ZoneWork, &tree::Fingerprints, &[PathBuf]) -> Result<Option<T>, String>,
        apply: impl Fn(&ZoneWork, &tree::Fingerprints, &[PathBuf]) -> Result<T, String>,
    ) -> Result<Vec<T>, String> {
        let mut zones = Vec::new();
        let mut forget = Vec::new();
        let mut held = self.stages.as_ref().map(|s| s.held());
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
                if let Some(answer) = idle(w, &stage.fingerprints, filter)? {
                    zones.push(answer);
                    continue;
                }
                // Its checkpoints' layers merged first, up to `upto` (a
                // flat goes with them).
                stage
                    .epoch
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                *stage.flat.lock() = None;
                let merged = match held.as_mut() {
                    Some(h) => merge_for(h, w, upto)?,
                    None => None,
                };
                if merged.is_some() {
                    let kept: Vec<u64> = merged.iter().flatten().copied().collect();
                    keep_marks(&stage.actors, w, &kept);
                    *stage.checkpoints.lock() = kept;
                }
                let mut answer = match apply(w, &stage.fingerprints, filter) {
                    Ok(a) => a,
                    Err(e) => {
                        let _ = self.live.restage(*i);
                        return Err(e);
                    }
                };
                // Who made each change goes in the answer (and the
                // ledger); the record of what is gone from the stage goes.
                stage.actors.fill_at(answer.changes_mut(), upto);
                let cleared = answer.cleared(filter);
                if let Err(e) = stage
                    .actors
                    .forget_upto(answer.changes_mut(), &cleared, upto)
                {
                    tracing::warn!(zone = %w.name, "cannot drop the attribution of what left the stage: {e}");
                }
                self.live
                    .restage(*i)
                    .map_err(|e| format!("zone '{}': cannot mount its stage again: {e}", w.name))?;
                forget.push((*i, answer.done()));
                zones.push(answer);
            }
        }
        // A flat the merges dropped is removed after the answer.
        let mut doomed = Vec::new();
        if held.is_some() {
            for (_, w) in work {
                doomed.extend(layers::take_trash(&w.dir).unwrap_or_default());
            }
        }
        drop(held);
        remove_later(doomed);
        for (i, paths) in &forget {
            let refs: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
            self.live.forget_cached(*i, &refs);
        }
        Ok(zones)
    }

    fn stages(&self) -> Result<&Arc<Stages>, String> {
        self.stages
            .as_ref()
            .ok_or_else(|| "this mount has no staged zone".to_owned())
    }

    /// Take a checkpoint of the staged zones `paths` names (a zone, or
    /// none: all): one id for all of them. Not a decision: anyone who may
    /// use the control socket may (the worker's side too).
    pub fn checkpoint(
        &self,
        paths: &[PathBuf],
        label: Option<String>,
        by: Caller,
    ) -> Result<CheckpointsReport, String> {
        let stages = self.stages()?;
        let work = self.work();
        let wanted = zones_of(&work, paths, "checkpoint")?;
        let mut held = stages.held();
        let id = held.manifest.next_checkpoint.max(1);
        held.manifest.next_checkpoint = id + 1;
        let (time, nanos) = layers::now();
        let mut zones = Vec::new();
        let still = self.live.hold_still();
        for (i, w) in work.iter().filter(|(_, w)| wanted.contains(&w.name)) {
            let Some(stage) = stages.zone(*i) else {
                continue;
            };
            let prefix = w.xattrs.prefix();
            // Who changed what, marked while the changes are held still.
            stage.actors.mark(id).map_err(|e| {
                format!(
                    "zone '{}': cannot take checkpoint {id}: cannot mark its record of who changed what: {e}",
                    w.name
                )
            })?;
            let mut entry = entry_of(&held, &w.name)?;
            // A flat built since the last checkpoint is taken over (saved
            // with the journal below, used by the overlay made after it).
            take_flat(stage, w, &mut entry, &mut held)?;
            entry.pending = Some(Pending::Checkpoint { id });
            save_entry(&mut held, &w.name, &entry)?;
            let fds = self.live.writable_fds(*i);
            let open: Vec<(std::os::fd::BorrowedFd<'_>, Option<&Path>)> = fds
                .iter()
                .map(|(f, p)| (std::os::fd::AsFd::as_fd(&**f), p.as_deref()))
                .collect();
            let taken = layers::freeze(&w.dir, id, &open, prefix).and_then(|()| {
                stage.checkpoints.lock().push(id);
                self.live.restage(*i)
            });
            if let Err(e) = taken {
                // Undone: the layer laid back under the upper dir.
                stage.checkpoints.lock().retain(|c| *c != id);
                let undo = layers::recover(&w.dir, &mut entry, prefix);
                let _ = save_entry(&mut held, &w.name, &entry);
                let _ = self.live.restage(*i);
                return Err(format!(
                    "zone '{}': cannot take checkpoint {id}: {e}{}",
                    w.name,
                    undo.err()
                        .map(|u| format!(" (and undoing it: {u})"))
                        .unwrap_or_default()
                ));
            }
            entry.checkpoints.push(Checkpoint {
                id,
                time,
                nanos,
                label: label.clone(),
            });
            entry.pending = None;
            save_entry(&mut held, &w.name, &entry)?;
            // Bounded: past the most kept, the two oldest layers merged.
            if entry.checkpoints.len() > self.max_checkpoints() {
                let (into, upto) = (entry.checkpoints[0].id, entry.checkpoints[1].id);
                stage
                    .epoch
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                journal(
                    &mut held,
                    w,
                    &mut entry,
                    Pending::Merge {
                        into,
                        upto: Some(upto),
                    },
                )?;
                *stage.checkpoints.lock() = ids(&entry);
                keep_marks(&stage.actors, w, &ids(&entry));
                self.live
                    .restage(*i)
                    .map_err(|e| format!("zone '{}': cannot mount its stage again: {e}", w.name))?;
            }
            zones.push(ZoneCheckpoints {
                zone: w.name.clone(),
                checkpoints: entry.checkpoints.last().map(info).into_iter().collect(),
                skipped: None,
            });
            self.log_layers(audit::Kind::Checkpoint, &w.name, id, &[], label.clone(), by);
            self.flatten_later(stages, *i, w, &entry);
        }
        drop(still);
        for (i, _) in work.iter().filter(|(_, w)| wanted.contains(&w.name)) {
            self.live.forget_kept_open(*i);
        }
        // A flat replaced above is removed after the answer.
        let mut doomed = Vec::new();
        for (_, w) in work.iter().filter(|(_, w)| wanted.contains(&w.name)) {
            doomed.extend(layers::take_trash(&w.dir).unwrap_or_default());
        }
        remove_later(doomed);
        Ok(CheckpointsReport {
            id: Some(id),
            zones,
        })
    }

    /// After a checkpoint of zone `i` (`entry` as saved): when a flat is
    /// due ([`layers::flat_plan`]) and none is in the making, one is built
    /// on a thread of its own; the next checkpoint takes it over.
    fn flatten_later(&self, stages: &Arc<Stages>, i: usize, w: &ZoneWork, entry: &ZoneEntry) {
        let Some(stage) = stages.zone(i) else { return };
        let Some((upto, todo)) = layers::flat_plan(&ids(entry), entry.flat) else {
            return;
        };
        {
            let mut b = stage.building.lock();
            if !matches!(*b, FlatBuild::Idle) {
                return;
            }
            *b = FlatBuild::Running;
        }
        let epoch = stage.epoch.load(std::sync::atomic::Ordering::SeqCst);
        let (base, zdir, prefix, zone) =
            (entry.flat, w.dir.clone(), w.xattrs.prefix(), w.name.clone());
        let backing = w.backing.clone();
        // Weak: a build does not keep an unmounted stage (and its lock).
        let weak = Arc::downgrade(stages);
        let spawned = std::thread::Builder::new()
            .name("zm-flatten".into())
            .spawn(move || {
                let built = layers::build_flat(&zdir, &backing, base, &todo, prefix);
                let Some(stage_of) = weak.upgrade() else {
                    if let Ok(p) = built {
                        let _ = layers::remove_all_of(&[p]);
                    }
                    return;
                };
                let Some(stage) = stage_of.zone(i) else {
                    return;
                };
                *stage.building.lock() = match built {
                    Ok(path) => FlatBuild::Ready {
                        path,
                        base,
                        upto,
                        epoch,
                    },
                    Err(e) if e.kind() == std::io::ErrorKind::FileTooLarge => {
                        tracing::debug!(zone = %zone, "no flat: {e}");
                        FlatBuild::Idle
                    }
                    Err(e) => {
                        tracing::warn!(zone = %zone, "cannot flatten its checkpoints' layers: {e}");
                        FlatBuild::Idle
                    }
                };
            });
        if let Err(e) = spawned {
            tracing::warn!(zone = %w.name, "cannot start flattening its layers: {e}");
            *stage.building.lock() = FlatBuild::Idle;
        }
    }

    /// How many checkpoints a zone keeps.
    fn max_checkpoints(&self) -> usize {
        self.stages
            .as_ref()
            .map_or(MAX_CHECKPOINTS, |s| s.max_checkpoints)
    }

    /// The checkpoints of the staged zones `paths` names (none: all),
    /// each with how many paths changed since the one before.
    pub fn checkpoints(&self, paths: &[PathBuf]) -> Result<CheckpointsReport, String> {
        let stages = self.stages()?;
        let work = self.work();
        let wanted = zones_of(&work, paths, "checkpoints")?;
        let held = stages.held();
        let list: Vec<ZoneWork> = work.into_iter().map(|(_, w)| w).collect();
        list_checkpoints(&held, &list, &wanted)
    }

    /// Make the staged zones `paths` names (or only those paths) what
    /// they were at checkpoint `id`. A whole zone: its later checkpoints
    /// and its changes since are dropped; some paths: each copied from
    /// the checkpoint's view into the live one (or removed), the
    /// checkpoints kept. A zone with files open for writing is left
    /// alone. Not a decision: the worker's side may.
    pub fn rewind(&self, id: u64, paths: &[PathBuf], by: Caller) -> Result<RewindReport, String> {
        let stages = self.stages()?;
        let work = self.work();
        let names: Vec<&str> = work.iter().map(|(_, w)| w.name.as_str()).collect();
        let wanted = by_zone(paths, &names)?;
        if !work
            .iter()
            .any(|(_, w)| wanted.contains_key(&w.name) && w.has(id))
        {
            return Err(no_checkpoint(id));
        }
        let mut held = stages.held();
        self.settle_writers(&work);
        let mut zones = Vec::new();
        let mut forget = Vec::new();
        {
            let _still = self.live.hold_still();
            for (i, w) in &work {
                let (Some(filter), true, Some(stage)) =
                    (wanted.get(&w.name), w.has(id), stages.zone(*i))
                else {
                    continue;
                };
                let mut z = ZoneRewind {
                    zone: w.name.clone(),
                    to: id,
                    dropped: Vec::new(),
                    paths: filter.clone(),
                    unchanged: Vec::new(),
                    left_alone: None,
                };
                let open = self.live.open_for_writing(*i);
                if open > 0 {
                    z.left_alone = Some(format!(
                        "a worker has {open} file(s) of /{} open for writing; try again once they are closed",
                        w.name
                    ));
                    zones.push(z);
                    continue;
                }
                let again = |e: io::Error| format!("zone '{}': rewind: {e}", w.name);
                if filter.is_empty() {
                    let mut entry = entry_of(&held, &w.name)?;
                    z.dropped = entry
                        .checkpoints
                        .iter()
                        .map(|c| c.id)
                        .filter(|c| *c > id)
                        .collect();
                    // The names the dropped layers hold: the kernel forgets them.
                    let mut names = layers::paths_in(&w.upper);
                    for d in &z.dropped {
                        names.extend(layers::paths_in(&layers::layer_dir(&w.dir, *d)));
                    }
                    stage
                        .epoch
                        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    rewind_journaled(&mut held, w, &mut entry, id, &stage.actors)?;
                    *stage.checkpoints.lock() = ids(&entry);
                    *stage.flat.lock() = entry.flat;
                    self.live.restage(*i).map_err(again)?;
                    forget.push((*i, layers::topmost(names)));
                } else {
                    let below: Vec<PathBuf> = w
                        .checkpoints
                        .iter()
                        .rev()
                        .filter(|c| **c <= id)
                        .map(|c| layers::layer_dir(&w.dir, *c))
                        .collect();
                    // What changed since the checkpoint: its later layers
                    // and the live upper dir. A path none of them holds
                    // is as it was then: left alone (copying it would pin
                    // today's host file into the stage).
                    let newer: Vec<PathBuf> = w
                        .checkpoints
                        .iter()
                        .filter(|c| **c > id)
                        .map(|c| layers::layer_dir(&w.dir, *c))
                        .chain(std::iter::once(w.upper.clone()))
                        .collect();
                    let (mut changed, mut unchanged) = (Vec::new(), Vec::new());
                    for p in filter {
                        match layers::changed_in(&newer, p, w.xattrs.prefix()).map_err(again)? {
                            true => changed.push(p.clone()),
                            false => unchanged.push(p.clone()),
                        }
                    }
                    z.paths = changed;
                    z.unchanged = unchanged;
                    if z.paths.is_empty() {
                        zones.push(z);
                        continue;
                    }
                    let view = layers::view(&w.backing, &below).map_err(again)?;
                    let live = self
                        .live
                        .zone_dir(*i)
                        .ok_or_else(|| format!("zone '{}': no overlay", w.name))?;
                    let mut touched = Vec::new();
                    for p in &z.paths {
                        touched.extend(
                            layers::restore(
                                view.fd(),
                                std::os::fd::AsFd::as_fd(&*live),
                                p,
                                &newer,
                                w.xattrs.prefix(),
                            )
                            .map_err(again)?,
                        );
                        // Its record as at the checkpoint, once it is so.
                        stage.actors.rewind_tree(id, p).map_err(again)?;
                    }
                    forget.push((*i, touched));
                }
                let dropped: Vec<String> = z.dropped.iter().map(u64::to_string).collect();
                self.log_layers(
                    audit::Kind::Rewind,
                    &w.name,
                    id,
                    &z.paths,
                    (!dropped.is_empty())
                        .then(|| format!("dropped checkpoints {}", dropped.join(", "))),
                    by,
                );
                zones.push(z);
            }
        }
        // What the rewind dropped is removed after the answer.
        let mut doomed = Vec::new();
        for (_, w) in &work {
            match layers::take_trash(&w.dir) {
                Ok(d) => doomed.extend(d),
                Err(e) => tracing::warn!(zone = %w.name, "cannot empty the stage's trash: {e}"),
            }
        }
        drop(held);
        for (i, paths) in &forget {
            let refs: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
            self.live.forget_cached(*i, &refs);
        }
        remove_later(doomed);
        Ok(RewindReport { zones })
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

    /// The ledger's record of a checkpoint or rewind of zone `zone` (to
    /// checkpoint `id`; `paths` of it when some), by `by`.
    fn log_layers(
        &self,
        kind: audit::Kind,
        zone: &str,
        id: u64,
        paths: &[PathBuf],
        summary: Option<String>,
        by: Caller,
    ) {
        let Some(a) = &self.audit else { return };
        let paths: Vec<Vec<u8>> = paths
            .iter()
            .map(|p| {
                let mut w = format!("/{zone}/").into_bytes();
                w.extend(p.clone().into_os_string().into_vec());
                w
            })
            .collect();
        let mut r = audit::Record {
            id: Some(id),
            zone: Some(zone.to_owned()),
            pid: by.pid,
            uid: Some(by.uid),
            summary,
            ..Default::default()
        };
        if !paths.is_empty() {
            r = r.paths(&paths);
        }
        a.log(kind, &r);
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

/// How many checkpoints a zone keeps by default: past it, the two oldest
/// layers are merged (the oldest checkpoint is dropped).
pub const MAX_CHECKPOINTS: usize = 32;

fn no_checkpoint(id: u64) -> String {
    format!("no checkpoint {id} in the zones this applies to (`zonemount checkpoints` lists them)")
}

/// The zones `paths` names, whole (none: all).
fn zones_of(
    work: &[(usize, ZoneWork)],
    paths: &[PathBuf],
    what: &str,
) -> Result<Vec<String>, String> {
    let names: Vec<&str> = work.iter().map(|(_, w)| w.name.as_str()).collect();
    let wanted = by_zone(paths, &names)?;
    if wanted.values().any(|f| !f.is_empty()) {
        return Err(format!(
            "{what} applies to a whole zone: give the mount or a zone's dir, not a path inside it"
        ));
    }
    Ok(wanted.into_keys().collect())
}

fn entry_of(held: &dir::Held, zone: &str) -> Result<ZoneEntry, String> {
    held.manifest
        .zones
        .get(zone)
        .cloned()
        .ok_or_else(|| format!("zone '{zone}' is not in the stage's manifest"))
}

fn save_entry(held: &mut dir::Held, zone: &str, entry: &ZoneEntry) -> Result<(), String> {
    held.manifest.zones.insert(zone.to_owned(), entry.clone());
    held.save().map_err(|e| e.to_string())
}

/// A whole rewind of zone `w` to checkpoint `to`: journaled, then its
/// record of who changed what rewound (before the layers change: a
/// SIGKILL anywhere leaves the journal, and finishing it rewinds the
/// record again, which changes nothing more), then the layers.
fn rewind_journaled(
    held: &mut dir::Held,
    w: &ZoneWork,
    entry: &mut ZoneEntry,
    to: u64,
    actors: &super::actors::StageActors,
) -> Result<(), String> {
    entry.pending = Some(Pending::Rewind { to });
    save_entry(held, &w.name, entry)?;
    actors.rewind(to).map_err(|e| {
        format!(
            "zone '{}': cannot rewind its record of who changed what: {e} (run it again: it completes)",
            w.name
        )
    })?;
    journal(held, w, entry, Pending::Rewind { to })
}

/// Journal `p` for zone `w`, do it, record it done.
fn journal(
    held: &mut dir::Held,
    w: &ZoneWork,
    entry: &mut ZoneEntry,
    p: Pending,
) -> Result<(), String> {
    let zone = w.name.clone();
    layers::journaled(&w.dir, entry, p, w.xattrs.prefix(), &mut |e| {
        save_entry(held, &zone, e).map_err(io::Error::other)
    })
    .map_err(|e| format!("zone '{}': {e} (run it again: it completes)", w.name))
}

/// Zone `w`'s checkpoints are `kept` now (others merged away): their
/// marks of who changed what go (a failure only keeps more of the record).
fn keep_marks(actors: &super::actors::StageActors, w: &ZoneWork, kept: &[u64]) {
    if let Err(e) = actors.keep_checkpoints(kept) {
        tracing::warn!(zone = %w.name, "cannot trim the record of who changed what: {e}");
    }
}

/// The checkpoint a rewind journaled in `entry` goes to.
pub(crate) fn rewinding(entry: &ZoneEntry) -> Option<u64> {
    match entry.pending {
        Some(Pending::Rewind { to }) => Some(to),
        _ => None,
    }
}

fn ids(entry: &ZoneEntry) -> Vec<u64> {
    entry.checkpoints.iter().map(|c| c.id).collect()
}

fn info(c: &Checkpoint) -> CheckpointInfo {
    let at = std::time::UNIX_EPOCH + Duration::new(c.time, c.nanos);
    CheckpointInfo {
        id: c.id,
        time: humantime::format_rfc3339_millis(at).to_string(),
        label: c.label.clone(),
        paths: None,
    }
}

/// At a checkpoint of zone `w` (`entry`, not yet saved): a flat built
/// since is put in place and named in `entry` when it was made over the
/// flat `entry` names and no merge, rewind, commit or discard came
/// between (else it is removed, off this path); the flat it replaces goes
/// to the trash once the manifest names the new one. The overlay made
/// next uses it.
fn take_flat(
    stage: &super::ZoneStage,
    w: &ZoneWork,
    entry: &mut ZoneEntry,
    held: &mut dir::Held,
) -> Result<(), String> {
    let ready = {
        let mut b = stage.building.lock();
        match std::mem::take(&mut *b) {
            FlatBuild::Ready {
                path,
                base,
                upto,
                epoch,
            } => (path, base, upto, epoch),
            other => {
                *b = other;
                return Ok(());
            }
        }
    };
    let (path, base, upto, epoch) = ready;
    let current = stage.epoch.load(std::sync::atomic::Ordering::SeqCst);
    let placed =
        (epoch == current && base == entry.flat && entry.checkpoints.iter().any(|c| c.id >= upto))
            .then(|| layers::place_flat(&w.dir, &path, upto));
    match placed {
        Some(Ok(())) => {}
        Some(Err(e)) => {
            tracing::warn!(zone = %w.name, "cannot take over the flattened layers: {e}");
            remove_later(vec![path]);
            return Ok(());
        }
        None => {
            remove_later(vec![path]);
            return Ok(());
        }
    }
    let old = entry.flat.replace(upto);
    save_entry(held, &w.name, entry)?;
    *stage.flat.lock() = entry.flat;
    if let Some(o) = old.filter(|o| *o != upto) {
        if let Err(e) = layers::retire_flat(&w.dir, o) {
            tracing::warn!(zone = %w.name, "cannot remove the flat it replaced: {e}");
        }
    }
    Ok(())
}

/// Remove `paths` on a thread of its own (what no answer waits for).
fn remove_later(paths: Vec<PathBuf>) {
    if paths.is_empty() {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("zm-trash".into())
        .spawn(move || {
            if let Err(e) = layers::remove_all_of(&paths) {
                tracing::warn!("cannot remove what the stage dropped: {e}");
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("cannot start removing what the stage dropped: {e}");
    }
}

/// Before a commit or discard of zone `w`: its checkpoints' layers merged
/// up to `upto` (none: all of them, into the upper dir). Returns the
/// checkpoints left when it merged, None when there were none to merge.
fn merge_for(
    held: &mut dir::Held,
    w: &ZoneWork,
    upto: Option<u64>,
) -> Result<Option<Vec<u64>>, String> {
    let mut entry = entry_of(held, &w.name)?;
    // What is committed or discarded leaves the layers the flat was made
    // of: it goes (to the trash; the manifest saved without it first).
    if let Some(f) = entry.flat.take() {
        save_entry(held, &w.name, &entry)?;
        layers::retire_flat(&w.dir, f).map_err(|e| format!("zone '{}': {e}", w.name))?;
    }
    let Some(oldest) = entry.checkpoints.first().map(|c| c.id) else {
        return Ok(None);
    };
    journal(held, w, &mut entry, Pending::Merge { into: oldest, upto })?;
    Ok(Some(ids(&entry)))
}

/// The changes of `span` in the staged zones `paths` names that have its
/// checkpoints.
fn span_changes(
    work: &[ZoneWork],
    paths: &[PathBuf],
    detail: Detail,
    span: Span,
) -> Result<ChangesReport, String> {
    if let (Some(a), Some(b)) = (span.from, span.to) {
        if a >= b {
            return Err(format!(
                "--between {a} {b}: give the older checkpoint first"
            ));
        }
    }
    let names: Vec<&str> = work.iter().map(|w| w.name.as_str()).collect();
    let wanted = by_zone(paths, &names)?;
    let mut zones = Vec::new();
    let mut missing = None;
    for w in work {
        let Some(filter) = wanted.get(&w.name) else {
            continue;
        };
        if let Some(id) = [span.from, span.to]
            .into_iter()
            .flatten()
            .find(|id| !w.has(*id))
        {
            missing = Some(id);
            continue;
        }
        let mut z = w.changes_in(filter, detail, span)?;
        // Who made each: the path's first and last change as recorded
        // (not only within the span), at the span's end.
        w.actors()?.fill_at(&mut z.changes, span.to);
        zones.push(z);
    }
    match (zones.is_empty(), missing) {
        (true, Some(id)) => Err(no_checkpoint(id)),
        _ => Ok(ChangesReport { zones }),
    }
}

/// Each zone's checkpoints, with the paths changed since the one before.
fn list_checkpoints(
    held: &dir::Held,
    work: &[ZoneWork],
    wanted: &[String],
) -> Result<CheckpointsReport, String> {
    let mut zones = Vec::new();
    for w in work.iter().filter(|w| wanted.contains(&w.name)) {
        let entry = entry_of(held, &w.name)?;
        let mut list = Vec::new();
        let mut prev = None;
        for c in &entry.checkpoints {
            let mut i = info(c);
            let n = w.changes_in(
                &[],
                Detail::List,
                Span {
                    from: prev,
                    to: Some(c.id),
                },
            )?;
            i.paths = Some(n.changes.len() as u64);
            list.push(i);
            prev = Some(c.id);
        }
        zones.push(ZoneCheckpoints {
            zone: w.name.clone(),
            checkpoints: list,
            skipped: None,
        });
    }
    Ok(CheckpointsReport { id: None, zones })
}

/// A stage dir no mount holds, locked while this is alive: its changes,
/// committed or discarded from here.
#[derive(Debug)]
pub struct OfflineStage {
    work: Vec<ZoneWork>,
    held: parking_lot::Mutex<dir::Held>,
}

impl OfflineStage {
    /// Lock stage dir `dir` (refused while a mount holds it) and read its
    /// zones; a checkpoint, rewind or merge a crash cut short is finished
    /// first (a checkpoint undone).
    pub fn open(dir: &Path) -> Result<OfflineStage, String> {
        let mut held = dir::hold(dir, Path::new("")).map_err(|e| match e {
            StageError::InUse { .. } => {
                format!("{e} — while it is mounted, give the mountpoint instead of the stage dir")
            }
            other => other.to_string(),
        })?;
        let mut work = Vec::new();
        let zones: Vec<(String, ZoneEntry)> = held
            .manifest
            .zones
            .iter()
            .map(|(n, e)| (n.clone(), e.clone()))
            .collect();
        for (name, mut entry) in zones {
            let xattrs = dir::xattrs_of(&entry.xattrs)
                .ok_or_else(|| format!("{}: unknown xattrs '{}'", dir.display(), entry.xattrs))?;
            let zdir = held.zone_dir(&name).map_err(|e| e.to_string())?;
            if let Some(to) = rewinding(&entry) {
                // As a rewind does it: the record first.
                super::actors::StageActors::open(&zdir)
                    .and_then(|a| a.rewind(to))
                    .map_err(|e| format!("zone '{name}': cannot rewind who changed what: {e}"))?;
            }
            if layers::needs_recovery(&zdir, &entry) {
                layers::recover(&zdir, &mut entry, xattrs.prefix())
                    .map_err(|e| format!("zone '{name}': {e}"))?;
                save_entry(&mut held, &name, &entry)?;
            }
            let _ = layers::clean(&zdir);
            if layers::clean_flats(&zdir, &mut entry).map_err(|e| format!("zone '{name}': {e}"))? {
                save_entry(&mut held, &name, &entry)?;
            }
            work.push(ZoneWork {
                name: name.clone(),
                backing: entry.backing.clone(),
                upper: zdir.join("upper"),
                dir: zdir,
                xattrs,
                checkpoints: ids(&entry),
            });
        }
        Ok(OfflineStage {
            work,
            held: parking_lot::Mutex::new(held),
        })
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

    /// The staged changes under `paths` (see [`Reports`]).
    fn report_of(
        &self,
        paths: &[PathBuf],
        detail: Detail,
        span: Span,
    ) -> Result<ChangesReport, String> {
        if span != Span::default() {
            return span_changes(&self.work, paths, detail, span);
        }
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

    /// Each zone's checkpoints (`paths`: zones; none: all).
    pub fn checkpoints(&self, paths: &[PathBuf]) -> Result<CheckpointsReport, String> {
        let indexed: Vec<(usize, ZoneWork)> = self
            .work
            .iter()
            .enumerate()
            .map(|(i, w)| (i, w.with_upper(w.upper.clone())))
            .collect();
        let wanted = zones_of(&indexed, paths, "checkpoints")?;
        list_checkpoints(&self.held.lock(), &self.work, &wanted)
    }

    /// Rewind whole zones to checkpoint `id` (some paths only: on a live
    /// mount).
    pub fn rewind(&self, id: u64, paths: &[PathBuf]) -> Result<RewindReport, String> {
        let wanted = self.wanted(paths)?;
        if wanted.iter().any(|(_, f)| !f.is_empty()) {
            return Err(
                "a rewind of some paths needs the live mount: mount the stage again (same \
                 --stage-dir) and give its mountpoint"
                    .into(),
            );
        }
        if !wanted.iter().any(|(w, _)| w.has(id)) {
            return Err(no_checkpoint(id));
        }
        let mut held = self.held.lock();
        let mut zones = Vec::new();
        for (w, _) in wanted.into_iter().filter(|(w, _)| w.has(id)) {
            let mut entry = entry_of(&held, &w.name)?;
            let dropped = entry
                .checkpoints
                .iter()
                .map(|c| c.id)
                .filter(|c| *c > id)
                .collect();
            rewind_journaled(&mut held, w, &mut entry, id, &w.actors()?)?;
            if let Ok(doomed) = layers::take_trash(&w.dir) {
                let _ = layers::remove_all_of(&doomed);
            }
            zones.push(ZoneRewind {
                zone: w.name.clone(),
                to: id,
                dropped,
                paths: Vec::new(),
                unchanged: Vec::new(),
                left_alone: None,
            });
        }
        Ok(RewindReport { zones })
    }

    /// Apply the staged changes under `paths` (conflicts too when `force`).
    pub fn commit(&self, paths: &[PathBuf], force: bool) -> Result<CommitReport, String> {
        self.commit_upto(paths, force, None)
    }

    /// Apply the state at checkpoint `upto` (none: now) under `paths`.
    pub fn commit_upto(
        &self,
        paths: &[PathBuf],
        force: bool,
        upto: Option<u64>,
    ) -> Result<CommitReport, String> {
        let mut wanted = self.wanted(paths)?;
        if let Some(id) = upto {
            wanted.retain(|(w, _)| w.has(id));
            if wanted.is_empty() {
                return Err(no_checkpoint(id));
            }
        }
        let mut held = self.held.lock();
        let mut zones = Vec::new();
        for (w, f) in wanted {
            let fp = w.fingerprints()?;
            if let Some(answer) = w.commit_applies_nothing(&fp, &f, force, upto)? {
                zones.push(answer);
                continue;
            }
            if let Some(kept) = merge_for(&mut held, w, upto)? {
                keep_marks(&w.actors()?, w, &kept);
            }
            let mut answer = match upto {
                Some(id) => w.commit_upto(&fp, &f, force, id)?,
                None => w.commit(&fp, &f, force)?,
            };
            w.settle_actors(&mut answer, &f, upto)?;
            zones.push(answer);
        }
        Ok(CommitReport { zones })
    }

    /// Drop the staged changes under `paths` (and every checkpoint).
    pub fn discard(&self, paths: &[PathBuf]) -> Result<DiscardReport, String> {
        let mut held = self.held.lock();
        let zones = self
            .wanted(paths)?
            .into_iter()
            .map(|(w, f)| {
                if let Some(kept) = merge_for(&mut held, w, None)? {
                    keep_marks(&w.actors()?, w, &kept);
                }
                let mut z = w.discard(&w.fingerprints()?, &f)?;
                w.settle_actors(&mut z, &f, None)?;
                Ok::<_, String>(z)
            })
            .collect::<Result<_, _>>()?;
        Ok(DiscardReport { zones })
    }
}

/// The change reports of a live mount's stages ([`StageService`]) and of
/// a stage dir no mount holds ([`OfflineStage`]), asked the same way.
pub trait Reports {
    /// The report under `paths`, with `detail`, between the views of
    /// `span` (the default: the backing dir and now).
    #[doc(hidden)]
    fn report(
        &self,
        paths: &[PathBuf],
        detail: Detail,
        span: Span,
    ) -> Result<ChangesReport, String>;

    /// The changes under `paths` (with diffs when `diff`).
    fn changes(&self, paths: &[PathBuf], diff: bool) -> Result<ChangesReport, String> {
        self.changes_in(paths, diff, Span::default())
    }

    /// [`Self::changes`], each staged zone's with its patch in git's
    /// extended diff format (`changes --patch`).
    fn patch(&self, paths: &[PathBuf]) -> Result<ChangesReport, String> {
        self.report(paths, Detail::Patch, Span::default())
    }

    /// [`Self::changes`] between two views of the staged zones (`span`:
    /// checkpoints, or one and now); a zone without those checkpoints is
    /// left out (and plain zones, which have none).
    fn changes_in(
        &self,
        paths: &[PathBuf],
        diff: bool,
        span: Span,
    ) -> Result<ChangesReport, String> {
        self.report(paths, if diff { Detail::Diff } else { Detail::List }, span)
    }
}

impl Reports for StageService {
    fn report(
        &self,
        paths: &[PathBuf],
        detail: Detail,
        span: Span,
    ) -> Result<ChangesReport, String> {
        self.report_of(paths, detail, span)
    }
}

impl Reports for OfflineStage {
    fn report(
        &self,
        paths: &[PathBuf],
        detail: Detail,
        span: Span,
    ) -> Result<ChangesReport, String> {
        self.report_of(paths, detail, span)
    }
}

#[cfg(test)]
mod tests;

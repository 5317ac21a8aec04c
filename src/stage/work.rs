//! One staged zone's part of a stage request (its layers; its change
//! report, commit or discard), and a request's paths sorted by zone.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::report::{Change, ZoneChanges, ZoneCommit, ZoneDiscard};
use super::{layers, tree};
use crate::stage::sys::overlay::Xattrs;
use crate::text;

/// What a change report holds beside the list of changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detail {
    List,
    /// Each change's diff, for people (`changes --diff`).
    Diff,
    /// Each staged zone's patch (`changes --patch`).
    Patch,
}

/// What one zone's operation needs: its layers and its stage dir.
pub(super) struct ZoneWork {
    pub(super) name: String,
    pub(super) backing: PathBuf,
    pub(super) upper: PathBuf,
    pub(super) dir: PathBuf,
    pub(super) xattrs: Xattrs,
    /// Its checkpoints' ids, oldest first.
    pub(super) checkpoints: Vec<u64>,
}

/// Which two views of a zone a change report compares: `from` (a
/// checkpoint; none: the backing dir) and `to` (a later checkpoint; none:
/// the zone now).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Span {
    pub from: Option<u64>,
    pub to: Option<u64>,
}

impl ZoneWork {
    fn layers(&self) -> Result<tree::Layers, String> {
        tree::Layers::open(&self.backing, &self.upper, self.xattrs.prefix())
            .map_err(|e| format!("zone '{}': cannot open its layers: {e}", self.name))
    }

    /// After a commit up to checkpoint `upto` applied `done`: a path the
    /// later layers change again (or under one applied) is noted as the
    /// backing dir has it now, the state the worker's later change was
    /// made over (its note went with the commit).
    fn renote_later(
        &self,
        fp: &tree::Fingerprints,
        done: &[PathBuf],
        upto: u64,
    ) -> Result<(), String> {
        let err = |e: std::io::Error| format!("zone '{}': {e}", self.name);
        let mut later: Vec<PathBuf> = Vec::new();
        for id in self.checkpoints.iter().filter(|id| **id > upto) {
            later.extend(layers::paths_in(&layers::layer_dir(&self.dir, *id)));
        }
        later.extend(layers::paths_in(&self.upper));
        later.sort();
        later.dedup();
        let backing = tree::Root::open(&self.backing).map_err(err)?;
        // Only the topmost of what was applied: a tree of thousands of
        // levels applied whole is one path to compare with, not one per
        // level.
        let done = layers::topmost(done.to_vec());
        let mut set = Vec::new();
        for q in later {
            if done.iter().any(|p| q.starts_with(p)) {
                let now = backing
                    .stat(&q)
                    .map_err(|e| err(e.into()))?
                    .as_ref()
                    .map(tree::Fingerprint::of);
                set.push((q, now));
            }
        }
        if set.is_empty() {
            return Ok(());
        }
        fp.settle(&[], &[], &set).map_err(err)
    }

    /// Whether it has checkpoint `id`.
    pub(super) fn has(&self, id: u64) -> bool {
        self.checkpoints.contains(&id)
    }

    /// The same zone with `upper` as its upper dir (a commit up to a
    /// checkpoint: its layer).
    pub(super) fn with_upper(&self, upper: PathBuf) -> ZoneWork {
        ZoneWork {
            name: self.name.clone(),
            backing: self.backing.clone(),
            upper,
            dir: self.dir.clone(),
            xattrs: self.xattrs,
            checkpoints: self.checkpoints.clone(),
        }
    }

    /// The view at `from` (read-only), and the layers above it up to
    /// `to` flattened into one, for a change report between the two.
    fn span(&self, span: Span) -> Result<(tree::Layers, layers::Flat), String> {
        let err = |e: std::io::Error| format!("zone '{}': {e}", self.name);
        let below: Vec<PathBuf> = self
            .checkpoints
            .iter()
            .rev()
            .filter(|id| span.from.is_some_and(|f| **id <= f))
            .map(|id| layers::layer_dir(&self.dir, *id))
            .collect();
        let mut above: Vec<PathBuf> = self
            .checkpoints
            .iter()
            .filter(|id| span.from.is_none_or(|f| **id > f) && span.to.is_none_or(|t| **id <= t))
            .map(|id| layers::layer_dir(&self.dir, *id))
            .collect();
        if span.to.is_none() {
            above.push(self.upper.clone());
        }
        let flat = if above.is_empty() {
            // The same view twice: compared with an empty layer.
            let empty = self.dir.join("tmp").join("empty");
            std::fs::create_dir_all(&empty).map_err(err)?;
            layers::flatten(&self.dir, &[empty], self.xattrs.prefix()).map_err(err)?
        } else {
            layers::flatten(&self.dir, &above, self.xattrs.prefix()).map_err(err)?
        };
        let lower = layers::view(&self.backing, &below).map_err(err)?;
        let l = tree::Layers::over(lower, &flat.path, self.xattrs.prefix()).map_err(err)?;
        Ok((l, flat))
    }

    pub(super) fn changes(
        &self,
        filter: &[PathBuf],
        detail: Detail,
    ) -> Result<ZoneChanges, String> {
        self.changes_in(filter, detail, Span::default())
    }

    /// The changes between the two views of `span`.
    pub(super) fn changes_in(
        &self,
        filter: &[PathBuf],
        detail: Detail,
        span: Span,
    ) -> Result<ZoneChanges, String> {
        let (l, _flat) = if span == Span::default() && self.checkpoints.is_empty() {
            (self.layers()?, None)
        } else {
            let (l, flat) = self.span(span)?;
            (l, Some(flat))
        };
        let at = |e| format!("zone '{}': {e}", self.name);
        let mut list = tree::changes(&l, filter).map_err(at)?;
        if detail == Detail::Diff {
            for c in &mut list {
                c.diff = Some(tree::diff(&l, c).map_err(at)?);
            }
        }
        let patch = match detail {
            Detail::Patch => Some(tree::patch(&l, &list).map_err(at)?),
            _ => None,
        };
        Ok(ZoneChanges {
            zone: self.name.clone(),
            staged: true,
            changes: list,
            incomplete: false,
            patch,
        })
    }

    pub(super) fn commit(
        &self,
        fp: &tree::Fingerprints,
        filter: &[PathBuf],
        force: bool,
    ) -> Result<ZoneCommit, String> {
        let l = self.layers()?;
        let report = tree::commit(&l, fp, &self.dir, filter, force).map_err(|e| {
            format!(
                "zone '{}': commit: {e} (run it again: it completes)",
                self.name
            )
        })?;
        Ok(ZoneCommit {
            zone: self.name.clone(),
            applied: report.applied,
            conflicts: report.conflicts,
            discarded: None,
        })
    }

    /// What a commit of `filter` (up to checkpoint `upto`: none, now)
    /// answers when it would apply nothing (no change there, or every one
    /// a conflict), judged without touching the stage; None when it would
    /// apply something, or the zone has no checkpoint (there is nothing to
    /// keep: the commit itself answers). A commit that applies nothing
    /// must not merge the checkpoints away first.
    pub(super) fn commit_applies_nothing(
        &self,
        fp: &tree::Fingerprints,
        filter: &[PathBuf],
        force: bool,
        upto: Option<u64>,
    ) -> Result<Option<ZoneCommit>, String> {
        if self.checkpoints.is_empty() {
            return Ok(None);
        }
        let (l, _flat) = self.span(Span {
            from: None,
            to: upto,
        })?;
        let conflicts = tree::applies_nothing(&l, fp, &self.dir, filter, force)
            .map_err(|e| format!("zone '{}': commit: {e}", self.name))?;
        Ok(conflicts.map(|conflicts| ZoneCommit {
            zone: self.name.clone(),
            applied: Vec::new(),
            conflicts,
            discarded: None,
        }))
    }

    /// [`Self::commit`] of the zone's state at checkpoint `upto` (its
    /// layer as the upper dir); then every path a later layer changes at
    /// or under what it applied is noted as the backing dir has it now
    /// ([`Self::renote_later`]), those a commit cut short had applied too
    /// (its journal names them, and stays until they are noted): else the
    /// next commit took the commit's own writes for the host's and refused
    /// them as conflicts.
    pub(super) fn commit_upto(
        &self,
        fp: &tree::Fingerprints,
        filter: &[PathBuf],
        force: bool,
        upto: u64,
    ) -> Result<ZoneCommit, String> {
        let at = self.with_upper(layers::layer_dir(&self.dir, upto));
        let l = at.layers()?;
        let report =
            tree::commit_keeping_journal(&l, fp, &self.dir, filter, force).map_err(|e| {
                format!(
                    "zone '{}': commit: {e} (run it again: it completes)",
                    self.name
                )
            })?;
        let mut done: Vec<PathBuf> = report.applied.iter().map(|c| c.path.clone()).collect();
        done.extend(tree::journal_of(&self.dir));
        self.renote_later(fp, &done, upto)?;
        tree::end_journal(&self.dir);
        Ok(ZoneCommit {
            zone: self.name.clone(),
            applied: report.applied,
            conflicts: report.conflicts,
            discarded: None,
        })
    }

    pub(super) fn discard(
        &self,
        fp: &tree::Fingerprints,
        filter: &[PathBuf],
    ) -> Result<ZoneDiscard, String> {
        let l = self.layers()?;
        let dropped = tree::discard(&l, fp, filter)
            .map_err(|e| format!("zone '{}': discard: {e}", self.name))?;
        Ok(ZoneDiscard {
            zone: self.name.clone(),
            discarded: dropped,
            applied: None,
            conflicts: None,
        })
    }

    /// Who changed what, read afresh (a stage no mount holds).
    pub(super) fn actors(&self) -> Result<super::actors::StageActors, String> {
        super::actors::StageActors::open(&self.dir)
            .map_err(|e| format!("zone '{}': cannot read who changed it: {e}", self.name))
    }

    /// After a commit or discard of a stage no mount holds: its changes
    /// given their actors (at checkpoint `upto`, for a `commit --upto`),
    /// and those records dropped (up to it).
    pub(super) fn settle_actors<T: Outcome>(
        &self,
        answer: &mut T,
        filter: &[PathBuf],
        upto: Option<u64>,
    ) -> Result<(), String> {
        let actors = self.actors()?;
        actors.fill_at(answer.changes_mut(), upto);
        let cleared = answer.cleared(filter);
        actors
            .forget_upto(answer.changes_mut(), &cleared, upto)
            .map_err(|e| format!("zone '{}': cannot drop who changed it: {e}", self.name))
    }

    /// The stage's records read afresh (a stage no mount holds).
    pub(super) fn fingerprints(&self) -> Result<tree::Fingerprints, String> {
        tree::Fingerprints::open(&self.dir)
            .map_err(|e| format!("zone '{}': cannot read its stage's records: {e}", self.name))
    }
}

impl std::fmt::Debug for ZoneWork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZoneWork")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// A zone's answer to a commit or discard.
pub(super) trait Outcome {
    /// The zone left alone: `open` files of it are open for writing.
    fn left_alone(zone: &str, open: usize) -> Self;
    /// The paths it applied or dropped (the kernel forgets them).
    fn done(&self) -> Vec<PathBuf>;
    /// The changes it applied or dropped.
    fn changes_mut(&mut self) -> &mut Vec<Change>;
    /// The trees (of a request's `filter`) it left nothing staged in: ""
    /// for the whole zone.
    fn cleared(&self, filter: &[PathBuf]) -> Vec<PathBuf>;
}

/// `filter`, or the whole zone when it is empty.
fn whole(filter: &[PathBuf]) -> Vec<PathBuf> {
    match filter.is_empty() {
        true => vec![PathBuf::new()],
        false => filter.to_vec(),
    }
}

impl Outcome for ZoneCommit {
    fn left_alone(zone: &str, open: usize) -> Self {
        ZoneCommit::left_alone(zone, open)
    }
    fn done(&self) -> Vec<PathBuf> {
        self.applied.iter().map(|c| c.path.clone()).collect()
    }
    fn changes_mut(&mut self) -> &mut Vec<Change> {
        &mut self.applied
    }
    fn cleared(&self, filter: &[PathBuf]) -> Vec<PathBuf> {
        // A conflict stays staged, and so does its record.
        match self.conflicts.is_empty() {
            true => whole(filter),
            false => Vec::new(),
        }
    }
}

impl Outcome for ZoneDiscard {
    fn left_alone(zone: &str, open: usize) -> Self {
        ZoneDiscard::left_alone(zone, open)
    }
    fn done(&self) -> Vec<PathBuf> {
        self.discarded.iter().map(|c| c.path.clone()).collect()
    }
    fn changes_mut(&mut self) -> &mut Vec<Change> {
        &mut self.discarded
    }
    fn cleared(&self, filter: &[PathBuf]) -> Vec<PathBuf> {
        whole(filter)
    }
}

/// The paths `paths` (worker form, `/zone/rel`, exact) by zone name,
/// among the zones `zones` (those the request is about); a zone given
/// alone (or no path at all: every zone) maps to an empty list, meaning
/// "everything".
pub(super) fn by_zone(
    paths: &[PathBuf],
    zones: &[&str],
) -> Result<BTreeMap<String, Vec<PathBuf>>, String> {
    let mut out: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    if paths.is_empty() {
        for z in zones {
            out.insert((*z).to_owned(), Vec::new());
        }
        return Ok(out);
    }
    for p in paths {
        let bytes = p.as_os_str().as_bytes();
        let start = bytes.iter().position(|b| *b != b'/').unwrap_or(bytes.len());
        let rel = &bytes[start..];
        let (zone, rest) = match rel.iter().position(|b| *b == b'/') {
            Some(i) => (&rel[..i], &rel[i + 1..]),
            None => (rel, &[][..]),
        };
        let shown = text::path(p);
        if zone.is_empty() {
            for z in zones {
                out.insert((*z).to_owned(), Vec::new());
            }
            continue;
        }
        let Some(zone) = std::str::from_utf8(zone).ok().filter(|z| zones.contains(z)) else {
            return Err(format!(
                "{shown}: /{} is not one of the zones this applies to ({})",
                text::escape(zone),
                zones
                    .iter()
                    .map(|z| format!("/{z}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        };
        let rest = Path::new(OsStr::from_bytes(rest));
        if rest
            .components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)))
        {
            return Err(format!("{shown}: give a plain path, without '..'"));
        }
        let entry = out.entry(zone.to_owned()).or_default();
        if rest.as_os_str().is_empty() {
            // The whole zone, whatever else was named.
            entry.clear();
            entry.push(PathBuf::new());
        } else if !entry.iter().any(|e| e.as_os_str().is_empty()) {
            entry.push(rest.to_path_buf());
        }
    }
    for v in out.values_mut() {
        v.retain(|p| !p.as_os_str().is_empty());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::os::unix::ffi::OsStringExt;

    use super::*;

    #[test]
    fn paths_go_to_their_zones() {
        let z = ["work", "out"];
        let m = by_zone(&[], &z).unwrap();
        assert_eq!(m.len(), 2);
        assert!(m.values().all(Vec::is_empty));
        let m = by_zone(&["/work/a/b".into(), "/work/c".into()], &z).unwrap();
        assert_eq!(m["work"], [PathBuf::from("a/b"), PathBuf::from("c")]);
        assert!(!m.contains_key("out"));
        let m = by_zone(&["/work/a".into(), "/work".into()], &z).unwrap();
        assert!(m["work"].is_empty(), "the whole zone wins");
        let e = by_zone(&["/docs/x".into()], &z).unwrap_err();
        assert!(
            e.contains("/docs is not one of the zones this applies to (/work, /out)"),
            "{e}"
        );
        assert!(by_zone(&["/work/../x".into()], &z).is_err());
        // A name that is not UTF-8 reaches its zone exact.
        let odd = PathBuf::from(std::ffi::OsString::from_vec(b"/work/a\xff".to_vec()));
        let m = by_zone(&[odd], &z).unwrap();
        assert_eq!(m["work"][0].as_os_str().as_bytes(), b"a\xff");
    }
}

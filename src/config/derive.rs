//! One derivation step: a worker's effective zones from its parent's
//! (DESIGN §2 "Derivation"). Pure: no filesystem, no host state.
//!
//! A worker may only tighten. What it asks that is looser than its parent
//! (an approval class, suffixes, a size limit) is tightened to the parent's,
//! and each such tightening is returned as a [`Tightening`] for the CLI to
//! note, so nobody is surprised that what a worker file says is not what it
//! got.

use std::fmt;
use std::path::PathBuf;

use super::error::ConfigError;
use super::model::{
    Access, ApprovalBlock, ApprovalPolicy, WorkerDecl, Zone, ZonePolicy, ZoneRequest, ZoneTable,
};

/// A worker asked for something looser than its parent has, and got the
/// parent's. Displays as one line naming the file, the zone, what was
/// asked and what it got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tightening {
    pub file: PathBuf,
    pub line: Option<usize>,
    pub worker: String,
    pub zone: String,
    /// `approval.write`, `approval.delete`, `suffixes`, `max_file_bytes`.
    pub field: &'static str,
    pub asked: String,
    pub got: String,
}

impl fmt::Display for Tightening {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        write!(
            f,
            ": worker '{}' asked {}: {} for zone '{}', but its parent's is stricter: it gets {}",
            self.worker, self.field, self.asked, self.zone, self.got
        )
    }
}

pub(super) fn derive(
    parent: &ZoneTable,
    worker: &WorkerDecl,
) -> Result<(ZoneTable, Vec<Tightening>), ConfigError> {
    let who = worker.display_name();
    let mut zones = Vec::new();
    let mut notes = Vec::new();
    for req in worker.zones.iter().flatten() {
        let Some(base) = parent.zone(&req.name) else {
            return Err(ConfigError::new(
                Some(worker.file.clone()),
                req.line,
                &req.field,
                format!(
                    "worker '{who}' needs zone '{}', which its parent does not have",
                    req.name
                ),
            ));
        };
        let policy = narrow(&base.policy, req).map_err(|(key, message)| {
            let line = match key {
                "staged" => req.staged_line,
                _ => req.mode_line,
            };
            ConfigError::new(
                Some(worker.file.clone()),
                line.or(req.line),
                &format!("{}.{key}", req.field),
                format!("worker '{who}' {message}"),
            )
        })?;
        for (field, asked, got) in tightened(req, &policy) {
            notes.push(Tightening {
                file: worker.file.clone(),
                line: req.line,
                worker: who.clone(),
                zone: req.name.clone(),
                field,
                asked,
                got,
            });
        }
        zones.push(Zone {
            name: base.name.clone(),
            backing: base.backing.clone(),
            policy,
        });
    }
    let table = ZoneTable {
        mode: parent.mode,
        zones,
        source: parent.source.clone(),
        max_checkpoints: parent.max_checkpoints,
    };
    Ok((table, notes))
}

/// What the worker wrote that it did not get, as (field, asked, got).
/// Only values it wrote count: a class left out of an `approval:` block
/// (which means `ask`) is not noted when the parent's is `blocked`.
fn tightened(req: &ZoneRequest, got: &ZonePolicy) -> Vec<(&'static str, String, String)> {
    let mut out = Vec::new();
    let block = req.approval.unwrap_or_default();
    for (field, asked, got) in [
        ("approval.write", block.write, got.approval.write),
        ("approval.delete", block.delete, got.approval.delete),
    ] {
        if let Some(asked) = asked.filter(|a| *a < got) {
            out.push((field, asked.to_string(), got.to_string()));
        }
    }
    if let (Some(asked), Some(gets)) = (&req.suffixes, &got.suffixes) {
        if asked.iter().any(|s| !gets.contains(s)) {
            let list = |l: &[String]| format!("[{}]", l.join(", "));
            out.push(("suffixes", list(asked), list(gets)));
        }
    }
    if let (Some(asked), Some(gets)) = (req.max_file_bytes, got.max_file_bytes) {
        if asked > gets {
            out.push(("max_file_bytes", asked.to_string(), gets.to_string()));
        }
    }
    out
}

/// The stricter of a parent's policy and a worker's request; `Err` (the
/// key at fault and the tail of a message) when the request asks for more
/// than the parent has.
/// An `approval:` block gives each class it leaves out as `ask`.
fn narrow(parent: &ZonePolicy, req: &ZoneRequest) -> Result<ZonePolicy, (&'static str, String)> {
    let access = match req.mode {
        None => parent.access,
        Some(Access::Rw) if parent.access == Access::Ro => {
            return Err((
                "mode",
                format!(
                    "requests 'rw' for zone '{}' but parent only has 'ro'",
                    req.name
                ),
            ));
        }
        Some(asked) => asked.min(parent.access),
    };
    let approval = match req.approval.as_ref().map(ApprovalBlock::policy) {
        None => parent.approval,
        Some(asked) => ApprovalPolicy {
            // PreApproved < Ask < Blocked: the stricter is the larger.
            write: asked.write.max(parent.approval.write),
            delete: asked.delete.max(parent.approval.delete),
            read: asked.read.max(parent.approval.read),
        },
    };
    let suffixes = match (&parent.suffixes, &req.suffixes) {
        (None, None) => None,
        (Some(p), None) => Some(p.clone()),
        (None, Some(w)) => Some(w.clone()),
        (Some(p), Some(w)) => Some(intersect_suffixes(p, w)),
    };
    let max_file_bytes = match (parent.max_file_bytes, req.max_file_bytes) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    // A worker may stage a parent's rw zone, never unstage a staged one
    // (its writes would reach the host without review).
    let staged = match req.staged {
        Some(false) if parent.staged => {
            return Err((
                "staged",
                format!(
                    "asks for 'staged: false' on zone '{}' but its parent stages it: a \
                     worker can't send its writes to the host unreviewed",
                    req.name
                ),
            ));
        }
        Some(true) if access == Access::Ro => {
            return Err((
                "staged",
                format!(
                    "asks for 'staged: true' on zone '{}', which it gets read-only: only \
                     a writable zone has changes to stage",
                    req.name
                ),
            ));
        }
        Some(asked) => asked || parent.staged,
        None => parent.staged,
    } && access == Access::Rw;
    let mut hide = parent.hide.clone();
    for p in &req.hide {
        if !hide.contains(p) {
            hide.push(p.clone());
        }
    }
    let mut ask_read = parent.ask_read.clone();
    for p in &req.ask_read {
        if !ask_read.contains(p) {
            ask_read.push(p.clone());
        }
    }
    let mut protect = parent.protect.clone();
    for p in &req.protect {
        if !protect.contains(p) {
            protect.push(p.clone());
        }
    }
    Ok(ZonePolicy {
        access,
        approval,
        suffixes,
        max_file_bytes,
        protect,
        hide,
        ask_read,
        // Where the backing dir is decides what is hidden: the parent's.
        hidden: parent.hidden.clone(),
        staged,
    })
}

/// Suffixes denote the names ending in them; a name ends in both `p` and `w`
/// exactly when it ends in the longer of the two and the shorter is a suffix
/// of the longer. So the intersection of two lists is, for each such pair,
/// the longer one (`.tar.gz` ∩ `.gz` = `.tar.gz`).
pub(super) fn intersect_suffixes(parent: &[String], worker: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for p in parent {
        for w in worker {
            let both = if p.ends_with(w.as_str()) {
                Some(p)
            } else if w.ends_with(p.as_str()) {
                Some(w)
            } else {
                None
            };
            if let Some(s) = both.filter(|s| !out.contains(s)) {
                out.push(s.clone());
            }
        }
    }
    out
}

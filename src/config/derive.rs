//! One derivation step: a worker's effective zones from its parent's
//! (DESIGN §2 "Derivation"). Pure: no filesystem, no host state.

use super::Access;
use super::{ApprovalPolicy, ConfigError, WorkerDecl, Zone, ZonePolicy, ZoneRequest, ZoneTable};

pub(super) fn derive(parent: &ZoneTable, worker: &WorkerDecl) -> Result<ZoneTable, ConfigError> {
    let who = worker.display_name();
    let mut zones = Vec::new();
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
        zones.push(Zone {
            name: base.name.clone(),
            backing: base.backing.clone(),
            policy: narrow(&base.policy, req).map_err(|message| {
                ConfigError::new(
                    Some(worker.file.clone()),
                    req.mode_line.or(req.line),
                    &format!("{}.mode", req.field),
                    format!("worker '{who}' {message}"),
                )
            })?,
        });
    }
    Ok(ZoneTable {
        mode: parent.mode,
        zones,
        source: parent.source.clone(),
    })
}

/// The stricter of a parent's policy and a worker's request; `Err` (the
/// tail of a message) when the request asks for more than the parent has.
fn narrow(parent: &ZonePolicy, req: &ZoneRequest) -> Result<ZonePolicy, String> {
    let access = match req.mode {
        None => parent.access,
        Some(Access::Rw) if parent.access == Access::Ro => {
            return Err(format!(
                "requests 'rw' for zone '{}' but parent only has 'ro'",
                req.name
            ));
        }
        Some(asked) => asked.min(parent.access),
    };
    let approval = ApprovalPolicy {
        write: req
            .write
            .map_or(parent.approval.write, |w| w.max(parent.approval.write)),
        delete: req
            .delete
            .map_or(parent.approval.delete, |d| d.max(parent.approval.delete)),
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
        // Where the backing dir is decides what is hidden: the parent's.
        hidden: parent.hidden.clone(),
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

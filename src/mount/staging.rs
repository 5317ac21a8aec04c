//! `changes`, `commit` and `discard` of a mount's staged zones: for the
//! control socket (the daemon holds the stage, mutations held still while
//! its layers change, the zone moved onto a fresh overlay and the kernel
//! told to forget what it cached), and on a stage dir no mount holds (the
//! CLI, under the stage's lock). Both answer the same JSON: `{"zones":
//! [{"zone": NAME, "changes"|"applied"+"conflicts"|"discarded": [...]}]}`.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};

use crate::approval::side::WorkerSide;
use crate::audit::{self, Audit, Kind};
use crate::control::protocol::Request;
use crate::control::{Peer, StageFn};
use crate::fs::core::Core;
use crate::stage::sys::overlay::Xattrs;
use crate::stage::{self, Stages, tree};
use crate::text;

/// What one zone's operation needs: its layers and its stage dir.
struct ZoneWork {
    name: String,
    backing: PathBuf,
    upper: PathBuf,
    dir: PathBuf,
    xattrs: Xattrs,
}

/// The paths of `req` (worker form, `/zone/rel`, exact) by zone name,
/// among the zones `staged` (those the request is about); a zone given
/// alone (or no path at all: every zone) maps to an empty list, meaning
/// "everything".
fn by_zone(paths: &[PathBuf], staged: &[&str]) -> Result<BTreeMap<String, Vec<PathBuf>>, String> {
    let mut out: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    if paths.is_empty() {
        for z in staged {
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
            for z in staged {
                out.insert((*z).to_owned(), Vec::new());
            }
            continue;
        }
        let Some(zone) = std::str::from_utf8(zone)
            .ok()
            .filter(|z| staged.contains(z))
        else {
            return Err(format!(
                "{shown}: /{} is not one of the zones this applies to ({})",
                text::escape(zone),
                staged
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

fn layers(w: &ZoneWork) -> Result<tree::Layers, String> {
    tree::Layers::open(&w.backing, &w.upper, w.xattrs.prefix())
        .map_err(|e| format!("zone '{}': cannot open its layers: {e}", w.name))
}

fn fingerprints(w: &ZoneWork) -> Result<tree::Fingerprints, String> {
    tree::Fingerprints::open(&w.dir)
        .map_err(|e| format!("zone '{}': cannot read its stage's records: {e}", w.name))
}

/// A staged change as JSON, its names exact (`path_b64`, `from_b64`
/// beside names that are not UTF-8).
fn change_json(c: &tree::Change) -> Result<Value, String> {
    let mut v = serde_json::to_value(c).map_err(|e| e.to_string())?;
    text::insert_b64(&mut v, "path", &c.path);
    if let Some(from) = &c.from {
        text::insert_b64(&mut v, "from", from);
    }
    Ok(v)
}

/// A plain zone's changes as JSON, their names exact.
fn plain_changes_json(list: &[crate::fs::changes::Change]) -> Result<Vec<Value>, String> {
    list.iter()
        .map(|c| {
            let mut v = serde_json::to_value(c).map_err(|e| e.to_string())?;
            text::insert_b64(&mut v, "path", &c.path);
            Ok(v)
        })
        .collect()
}

fn changes_of(w: &ZoneWork, filter: &[PathBuf], diff: bool) -> Result<Value, String> {
    let l = layers(w)?;
    let list = tree::changes(&l, filter).map_err(|e| format!("zone '{}': {e}", w.name))?;
    let mut items = Vec::with_capacity(list.len());
    for c in &list {
        let mut v = change_json(c)?;
        if diff {
            let d = tree::diff(&l, c).map_err(|e| format!("zone '{}': {e}", w.name))?;
            if let Value::Object(m) = &mut v {
                m.insert("diff".into(), Value::String(d));
            }
        }
        items.push(v);
    }
    Ok(json!({"zone": w.name, "staged": true, "changes": items}))
}

fn commit_of(
    w: &ZoneWork,
    fp: &tree::Fingerprints,
    filter: &[PathBuf],
    force: bool,
) -> Result<Value, String> {
    let l = layers(w)?;
    let report = tree::commit(&l, fp, &w.dir, filter, force).map_err(|e| {
        format!(
            "zone '{}': commit: {e} (run it again: it completes)",
            w.name
        )
    })?;
    let mut v = serde_json::to_value(&report).map_err(|e| e.to_string())?;
    // Each name exact: `path_b64` (and `from_b64`, `at_b64`) beside one
    // that is not UTF-8.
    let applied = report
        .applied
        .iter()
        .map(|c| (c.path.as_path(), c.from.as_deref().map(|f| ("from", f))));
    let conflicts = report
        .conflicts
        .iter()
        .map(|c| (c.path.as_path(), c.at.as_deref().map(|a| ("at", a))));
    for (key, names) in [
        ("applied", applied.collect::<Vec<_>>()),
        ("conflicts", conflicts.collect()),
    ] {
        let items = v[key].as_array_mut().into_iter().flatten();
        for (item, (path, other)) in items.zip(names) {
            text::insert_b64(item, "path", path);
            if let Some((k, p)) = other {
                text::insert_b64(item, k, p);
            }
        }
    }
    if let Value::Object(m) = &mut v {
        m.insert("zone".into(), Value::String(w.name.clone()));
    }
    Ok(v)
}

fn discard_of(w: &ZoneWork, fp: &tree::Fingerprints, filter: &[PathBuf]) -> Result<Value, String> {
    let l = layers(w)?;
    let dropped =
        tree::discard(&l, fp, filter).map_err(|e| format!("zone '{}': discard: {e}", w.name))?;
    let dropped = dropped
        .iter()
        .map(change_json)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(json!({"zone": w.name, "discarded": dropped}))
}

/// How long a commit or discard waits for files just closed: the kernel
/// tells the daemon a file is closed (FUSE_RELEASE) after `close` has
/// returned to the worker.
const CLOSE_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Wait (bounded) until no file of the staged zones is open for writing.
fn settle_writers(core: &Core, work: &[(usize, ZoneWork)]) {
    let deadline = std::time::Instant::now() + CLOSE_GRACE;
    while work.iter().any(|(i, _)| core.open_for_writing(*i) > 0)
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Most paths one ledger record lists.
const LEDGER_PATHS: usize = 1000;

/// At unmount: each rw zone's change report, in the ledger (one record
/// per zone that changed: counts, and the paths as `added /zone/p`).
pub fn log_changes(core: &Arc<Core>, audit: &Audit) {
    let report = stage_fn(core, None, Arc::new(WorkerSide::new()));
    let req = Request::Changes {
        paths: Vec::new(),
        diff: false,
    };
    let answer = match report(&req, Peer { uid: 0, pid: None }) {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!("cannot make the change report for the ledger: {e}");
            return;
        }
    };
    for z in answer["zones"].as_array().into_iter().flatten() {
        let zone = z["zone"].as_str().unwrap_or("?");
        let list = z["changes"].as_array().cloned().unwrap_or_default();
        if list.is_empty() {
            continue;
        }
        let count = |k: &str| list.iter().filter(|c| c["kind"] == k).count();
        let paths: Vec<Vec<u8>> = list
            .iter()
            .take(LEDGER_PATHS)
            .map(|c| {
                let mut line =
                    format!("{} /{zone}/", c["kind"].as_str().unwrap_or("?")).into_bytes();
                line.extend(
                    text::path_field(c, "path")
                        .unwrap_or_default()
                        .into_os_string()
                        .into_vec(),
                );
                line
            })
            .collect();
        audit.log(
            Kind::Changes,
            &audit::Record {
                zone: Some(zone.to_owned()),
                summary: Some(format!(
                    "{} added, {} modified, {} deleted, {} renamed{}{}",
                    count("added"),
                    count("modified"),
                    count("deleted"),
                    count("renamed"),
                    if z["staged"] == true {
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
            .paths(&paths),
        );
    }
}

/// Why `peer` may not commit or discard: it is on the side of a process
/// that changed the stages (`approval::side`).
fn own_side(what: &str, core: &Core, side: &WorkerSide, peer: Peer) -> Result<(), String> {
    let (writers, spaces) = core.stage_writers();
    match side.refusal(peer.pid, peer.uid, &writers, &spaces) {
        Some(why) => Err(format!(
            "{what} refused: it comes from the worker's own side (a process that changed the stage): {why}"
        )),
        None => Ok(()),
    }
}

/// A commit or discard (`apply`, on each zone `wanted` names) of a live
/// mount's stages, once [`own_side`] let it: mutations held
/// still while the layers change (files just closed given a moment); a
/// zone with files still open for writing left alone (a commit reports it
/// as a conflict, a discard fails); each zone changed moved onto a fresh
/// overlay, and the kernel told to forget what it cached there.
fn change_stages(
    core: &Core,
    stages: Option<&Stages>,
    work: &[(usize, ZoneWork)],
    wanted: &BTreeMap<String, Vec<PathBuf>>,
    apply: impl Fn(&ZoneWork, &tree::Fingerprints, &[PathBuf]) -> Result<Value, String>,
) -> Result<Vec<Value>, String> {
    let mut zones = Vec::new();
    let mut forget = Vec::new();
    settle_writers(core, work);
    {
        let _still = core.hold_still();
        for (i, w) in work {
            let (Some(filter), Some(stage)) =
                (wanted.get(&w.name), stages.and_then(|s| s.zone(*i)))
            else {
                continue;
            };
            let open = core.open_for_writing(*i);
            if open > 0 {
                zones.push(json!({"zone": w.name, "applied": [], "discarded": [], "conflicts": [{
                    "path": "",
                    "why": format!("a worker has {open} file(s) of /{} open for writing; try again once they are closed", w.name),
                }]}));
                continue;
            }
            let answer = apply(w, &stage.fingerprints, filter)?;
            core.restage(*i)
                .map_err(|e| format!("zone '{}': cannot mount its stage again: {e}", w.name))?;
            let mut done = named(&answer, "applied");
            done.extend(named(&answer, "discarded"));
            forget.push((*i, done));
            zones.push(answer);
        }
    }
    for (i, paths) in &forget {
        let refs: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
        core.forget_cached(*i, &refs);
    }
    Ok(zones)
}

/// Paths a zone's answer names (to tell the kernel to forget them).
fn named(answer: &Value, key: &str) -> Vec<PathBuf> {
    answer[key]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| text::path_field(c, "path"))
        .collect()
}

/// The control socket's `changes` (of staged zones, from their stages;
/// of plain rw zones, from what the mount saw), `commit` and `discard`
/// (staged zones only).
pub fn stage_fn(core: &Arc<Core>, audit: Option<Arc<Audit>>, side: Arc<WorkerSide>) -> StageFn {
    let stages = core.stages().cloned();
    let core = core.clone();
    Box::new(move |req: &Request, peer: Peer| {
        let work: Vec<(usize, ZoneWork)> = stages
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
            .collect();
        let names: Vec<&str> = work.iter().map(|(_, w)| w.name.as_str()).collect();
        let kinds = core.zone_kinds();
        match req {
            Request::Changes { paths, diff } => {
                let rw: Vec<&str> = kinds
                    .iter()
                    .filter(|(_, rw, _)| *rw)
                    .map(|(n, _, _)| n.as_str())
                    .collect();
                let wanted = by_zone(paths, &rw)?;
                let mut zones = Vec::new();
                for (name, _, staged) in kinds.iter().filter(|(_, rw, _)| *rw) {
                    let Some(filter) = wanted.get(name) else {
                        continue;
                    };
                    if *staged {
                        if let Some((_, w)) = work.iter().find(|(_, w)| &w.name == name) {
                            zones.push(changes_of(w, filter, *diff)?);
                        }
                    } else {
                        let (list, incomplete) = core.changelog().changes(name, filter);
                        let list = plain_changes_json(&list)?;
                        let mut z = json!({"zone": name, "staged": false, "changes": list});
                        if incomplete {
                            z["incomplete"] = Value::Bool(true);
                        }
                        zones.push(z);
                    }
                }
                Ok(json!({"zones": zones}))
            }
            Request::Commit { paths, force } => {
                let wanted = by_zone(paths, &names)?;
                own_side("commit", &core, &side, peer)?;
                let zones = change_stages(&core, stages.as_deref(), &work, &wanted, |w, fp, f| {
                    commit_of(w, fp, f, *force)
                })?;
                let answer = json!({"zones": zones});
                log(audit.as_deref(), "commit", &answer, peer);
                Ok(answer)
            }
            Request::Discard { paths } => {
                let wanted = by_zone(paths, &names)?;
                own_side("discard", &core, &side, peer)?;
                let zones = change_stages(&core, stages.as_deref(), &work, &wanted, discard_of)?;
                let answer = json!({"zones": zones});
                log(audit.as_deref(), "discard", &answer, peer);
                Ok(answer)
            }
            _ => Err("not a stage request".into()),
        }
    })
}

/// The ledger's record of a commit or discard: how many paths, which.
fn log(audit: Option<&Audit>, what: &str, answer: &Value, peer: Peer) {
    let Some(a) = audit else { return };
    let key = if what == "commit" {
        "applied"
    } else {
        "discarded"
    };
    let mut paths = Vec::new();
    let mut conflicts = 0;
    for z in answer["zones"].as_array().into_iter().flatten() {
        let zone = z["zone"].as_str().unwrap_or("?");
        for c in z[key].as_array().into_iter().flatten() {
            let mut p = format!("/{zone}/").into_bytes();
            p.extend(
                text::path_field(c, "path")
                    .unwrap_or_default()
                    .into_os_string()
                    .into_vec(),
            );
            paths.push(p);
        }
        conflicts += z["conflicts"].as_array().map_or(0, Vec::len);
    }
    a.log(
        if what == "commit" {
            Kind::Commit
        } else {
            Kind::Discard
        },
        &audit::Record {
            approver_uid: Some(peer.uid),
            pid: peer.pid,
            conflicts: (what == "commit").then_some(conflicts as u64),
            ..Default::default()
        }
        .paths(&paths),
    );
}

/// `changes`, `commit` or `discard` on stage dir `dir`, which no mount
/// may hold (its lock is taken for the while).
pub fn offline(dir: &Path, req: &Request) -> Result<Value, String> {
    let held = stage::dir::hold(dir, Path::new("")).map_err(|e| match e {
        stage::StageError::InUse { .. } => {
            format!("{e} — while it is mounted, give the mountpoint instead of the stage dir")
        }
        other => other.to_string(),
    })?;
    let mut work = Vec::new();
    for (name, entry) in &held.manifest.zones {
        let xattrs = stage::dir::xattrs_of(&entry.xattrs)
            .ok_or_else(|| format!("{}: unknown xattrs '{}'", dir.display(), entry.xattrs))?;
        let zdir = stage::dir::zone_dir(dir, name);
        work.push(ZoneWork {
            name: name.clone(),
            backing: entry.backing.clone(),
            upper: zdir.join("upper"),
            dir: zdir,
            xattrs,
        });
    }
    let names: Vec<&str> = work.iter().map(|w| w.name.as_str()).collect();
    let mut zones = Vec::new();
    match req {
        Request::Changes { paths, diff } => {
            let wanted = by_zone(paths, &names)?;
            for w in &work {
                if let Some(f) = wanted.get(&w.name) {
                    zones.push(changes_of(w, f, *diff)?);
                }
            }
        }
        Request::Commit { paths, force } => {
            let wanted = by_zone(paths, &names)?;
            for w in &work {
                if let Some(f) = wanted.get(&w.name) {
                    zones.push(commit_of(w, &fingerprints(w)?, f, *force)?);
                }
            }
        }
        Request::Discard { paths } => {
            let wanted = by_zone(paths, &names)?;
            for w in &work {
                if let Some(f) = wanted.get(&w.name) {
                    zones.push(discard_of(w, &fingerprints(w)?, f)?);
                }
            }
        }
        _ => return Err("not a stage request".into()),
    }
    drop(held);
    Ok(json!({"zones": zones}))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
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

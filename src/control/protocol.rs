//! The control protocol's messages as types, shared by the server (in the
//! daemon) and the client (the CLI). Protocol v1, JSON Lines: each request
//! is one object with `"v": 1` and an `op`; each answer is one object with
//! `"v": 1` and `"ok"`.
//! - `{"v":1,"op":"list"}` → `{"v":1,"ok":true,"requests":[REQUEST...]}`
//! - `{"v":1,"op":"decide","id":7,"decision":"allow","scope":"path"}` (scope
//!   `once` by default; `"decision":"deny"` takes no scope) →
//!   `{"v":1,"ok":true}`, or `{"v":1,"ok":false,"error":"no pending request 7: ..."}`
//! - `{"v":1,"op":"status"}` → `{"v":1,"ok":true,"status":{...}}` ([`Status`])
//! - `{"v":1,"op":"watch"}` → `{"v":1,"ok":true}`, then one line per event
//!   for as long as the connection stays open: every request already
//!   pending and each new one as `{"v":1,"event":"request","request":REQUEST}`
//!   (each request once),
//!   and each end as `{"v":1,"event":"resolved","id":7,"outcome":"allow",...}`
//!   ([`WatchEvent`]).
//! - `{"v":1,"op":"deny_pending"}` → `{"v":1,"ok":true,"denied":N}` (what
//!   `zonemount unmount` sends first, so no waiting syscall keeps the mount
//!   busy).
//! - `{"v":1,"op":"changes","paths":[...],"diff":false}` (`"since":ID` or
//!   `"between":[A,B]`: between checkpoints' views), `{"v":1,"op":"commit",
//!   "paths":[...],"force":false}` (`"upto":ID`), `{"v":1,"op":"discard",
//!   "paths":[...]}` → the report of `stage::report`.
//! - `{"v":1,"op":"checkpoint","paths":["/zone"],"label":"..."}`,
//!   `{"v":1,"op":"checkpoints","paths":[...]}`, `{"v":1,"op":"rewind",
//!   "id":ID,"paths":[...]}` → `stage::report`'s `CheckpointsReport` or
//!   `RewindReport`. Not decisions: the worker's side may send them.
//! - `{"v":1,"op":"worker","boundary":"pid-namespace"}` →
//!   `{"v":1,"ok":true}`: what `zonemount run`'s init sends from CMD's PID
//!   namespace before CMD starts (`"boundary":"session","why":"..."` when
//!   no namespace could be made; `"boundary":"isolate"` under
//!   `--isolate`). Accepted once per mount; `status` shows it as
//!   `worker_boundary`.
//!
//! A peer whose uid (SO_PEERCRED) is neither the mount's owner nor root
//! gets one `{"ok":false,...}` line and the connection is closed.
//!
//! Each message is a type serde derives: a request's `op` is the tag of
//! `Wire`, read as v1 daemons read it (a field of another JSON type counts
//! as absent), then checked into a [`Request`]. Every line goes out
//! through a `serde_json::Value`, whose map keeps keys in alphabetical
//! order: the bytes on the wire don't depend on the order in which these
//! types declare their fields. `control/wire_table.rs` holds the v1 bytes
//! as a test.

use std::path::PathBuf;

use serde::de::{DeserializeOwned, Deserializer};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::approval::side::Claim;
use crate::approval::{Decision, Scope};
use crate::stage::service::Span;
use crate::text;

mod answer;
mod event;

#[cfg(test)]
pub(crate) use answer::STATUS_V1_SAMPLE;
pub use answer::{
    CacheTtls, Degraded, Denied, Done, IoStatus, IsolateRoute, Listed, PolicyStatus,
    RecentRefusalInfo, Status, StatusAnswer, ZoneStatus, fail_answer, ok_answer,
};
pub use event::{Outcome, WatchEvent, event_json};

/// Protocol version. A field added to an answer keeps it; a field
/// renamed or removed, or a changed meaning, bumps it.
pub const VERSION: u64 = 1;

/// What a client asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    List,
    Status,
    Watch,
    DenyPending,
    Decide {
        id: u64,
        decision: Decision,
    },
    /// What the staged zones hold (`paths` as a worker sees them,
    /// `/zone/...`, exact; empty: everything), with unified diffs when
    /// `diff`, with each staged zone's patch in git's format when `patch`
    /// (sent only when true). On the wire `paths` is a list of strings,
    /// with `paths_b64` beside it when one is not UTF-8 (see
    /// [`crate::text`]).
    Changes {
        paths: Vec<PathBuf>,
        diff: bool,
        patch: bool,
    },
    /// Apply staged changes to the backing dirs.
    Commit {
        paths: Vec<PathBuf>,
        force: bool,
    },
    /// Drop staged changes.
    Discard {
        paths: Vec<PathBuf>,
    },
    /// `changes` between two views of the staged zones (`since` a
    /// checkpoint, or `between` two): on the wire a `changes` with
    /// `since` or `between`.
    ChangesIn {
        paths: Vec<PathBuf>,
        diff: bool,
        span: Span,
    },
    /// `commit` of the state at checkpoint `upto`: on the wire a
    /// `commit` with `upto`.
    CommitUpto {
        paths: Vec<PathBuf>,
        force: bool,
        upto: u64,
    },
    /// Take a checkpoint of the staged zones `paths` names (none: all).
    Checkpoint {
        paths: Vec<PathBuf>,
        label: Option<String>,
    },
    /// The checkpoints of the staged zones `paths` names.
    Checkpoints {
        paths: Vec<PathBuf>,
    },
    /// Make the zones (or paths) what they were at checkpoint `id`.
    Rewind {
        id: u64,
        paths: Vec<PathBuf>,
    },
    /// `run`'s worker: what keeps it from deciding.
    Worker(Claim),
}

impl Request {
    /// The request as one protocol object.
    pub fn to_value(self) -> Value {
        Versioned::line(Wire::from(self)).unwrap_or_default()
    }

    /// Read a request whose version was checked ([`check_version`]); the
    /// error is the message the client gets.
    pub fn from_value(req: &Value) -> Result<Request, String> {
        // An `op` that is no string is no op (serde would take a number
        // for a variant's index).
        let Some(op) = req["op"].as_str() else {
            return Err(unknown_op(""));
        };
        match Wire::deserialize(req) {
            Ok(Wire::Unknown) => Err(unknown_op(op)),
            Ok(wire) => Request::try_from(wire),
            Err(e) => Err(e.to_string()),
        }
    }
}

fn unknown_op(op: &str) -> String {
    format!(
        "unknown op '{op}': use list, watch, decide, status, deny_pending, changes, commit, \
         discard, checkpoint, checkpoints, rewind or worker"
    )
}

/// One protocol line: `v` beside the fields of `body`.
#[derive(Serialize)]
struct Versioned<T> {
    v: u64,
    #[serde(flatten)]
    body: T,
}

impl<T: Serialize> Versioned<T> {
    /// `body`'s fields with this version's `v`, as the object that goes
    /// out (its keys in alphabetical order).
    fn line(body: T) -> serde_json::Result<Value> {
        serde_json::to_value(Versioned { v: VERSION, body })
    }
}

/// A request as it travels (without its `v`). Read as v1 daemons read
/// it: a field of another JSON type than its own counts as absent, except
/// `paths`, which is refused. [`Request`] is what it must then hold.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Wire {
    List,
    Status,
    Watch,
    DenyPending,
    Decide {
        #[serde(default, deserialize_with = "lenient")]
        id: Option<u64>,
        #[serde(default, deserialize_with = "lenient")]
        decision: Option<Choice>,
        #[serde(
            default,
            deserialize_with = "lenient",
            skip_serializing_if = "Option::is_none"
        )]
        scope: Option<String>,
    },
    Changes {
        #[serde(flatten)]
        paths: Paths,
        #[serde(default, deserialize_with = "flag")]
        diff: bool,
        #[serde(
            default,
            deserialize_with = "flag",
            skip_serializing_if = "std::ops::Not::not"
        )]
        patch: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        since: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        between: Option<[u64; 2]>,
    },
    Commit {
        #[serde(flatten)]
        paths: Paths,
        #[serde(default, deserialize_with = "flag")]
        force: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        upto: Option<u64>,
    },
    Discard {
        #[serde(flatten)]
        paths: Paths,
    },
    Checkpoint {
        #[serde(flatten)]
        paths: Paths,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        label: Option<String>,
    },
    Checkpoints {
        #[serde(flatten)]
        paths: Paths,
    },
    Rewind {
        #[serde(flatten)]
        paths: Paths,
        #[serde(default)]
        id: Option<u64>,
    },
    Worker {
        #[serde(default, deserialize_with = "lenient")]
        boundary: Option<BoundaryName>,
        #[serde(
            default,
            deserialize_with = "lenient",
            skip_serializing_if = "Option::is_none"
        )]
        why: Option<String>,
    },
    /// Any other `op`.
    #[serde(other, skip_serializing)]
    Unknown,
}

/// `decide`'s `decision`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Choice {
    Allow,
    Deny,
}

/// `worker`'s `boundary`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum BoundaryName {
    PidNamespace,
    Session,
    Isolate,
}

/// A request's `paths`: a list of strings (absent or null: none), each
/// exact with its entry in `paths_b64` when there is one.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Paths {
    #[serde(default, deserialize_with = "strings")]
    paths: Vec<String>,
    #[serde(default, deserialize_with = "exact", skip_serializing_if = "all_text")]
    paths_b64: Vec<Option<String>>,
}

impl From<&[PathBuf]> for Paths {
    fn from(paths: &[PathBuf]) -> Paths {
        let (paths, paths_b64) = paths.iter().map(|p| text::path_for_json(p)).unzip();
        Paths { paths, paths_b64 }
    }
}

impl From<Paths> for Vec<PathBuf> {
    fn from(p: Paths) -> Vec<PathBuf> {
        let exact = |i: usize| p.paths_b64.get(i).and_then(Option::as_deref);
        p.paths
            .iter()
            .enumerate()
            .map(|(i, t)| text::path_from_json(t, exact(i)))
            .collect()
    }
}

fn all_text(b64: &[Option<String>]) -> bool {
    b64.iter().all(Option::is_none)
}

/// A field as v1 read it (`as_str`, `as_u64`, ...): one of another JSON
/// type, a list or an object is absent.
fn lenient<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<Option<T>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Array(_) | Value::Object(_) => None,
        v => T::deserialize(v).ok(),
    })
}

/// A flag: true only as JSON `true`.
fn flag<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(lenient(d)?.unwrap_or(false))
}

/// `paths`: null or a list of strings.
fn strings<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let v = Option::<Vec<Value>>::deserialize(d).ok();
    let items = match v {
        None => None,
        Some(None) => Some(Vec::new()),
        Some(Some(items)) => items
            .into_iter()
            .map(|i| i.as_str().map(str::to_owned))
            .collect(),
    };
    items.ok_or_else(|| serde::de::Error::custom("\"paths\" must be a list of strings"))
}

/// `paths_b64`: each string of a list (anything else: none).
fn exact<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Option<String>>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Array(items) => items
            .into_iter()
            .map(|i| i.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    })
}

impl From<Request> for Wire {
    fn from(r: Request) -> Wire {
        match r {
            Request::List => Wire::List,
            Request::Status => Wire::Status,
            Request::Watch => Wire::Watch,
            Request::DenyPending => Wire::DenyPending,
            Request::Decide { id, decision } => Wire::Decide {
                id: Some(id),
                decision: Some(match decision {
                    Decision::Allow(_) => Choice::Allow,
                    Decision::Deny => Choice::Deny,
                }),
                scope: match decision {
                    Decision::Allow(scope) => Some(scope.to_string()),
                    Decision::Deny => None,
                },
            },
            Request::Changes { paths, diff, patch } => Wire::Changes {
                paths: Paths::from(&paths[..]),
                diff,
                patch,
                since: None,
                between: None,
            },
            Request::Commit { paths, force } => Wire::Commit {
                paths: Paths::from(&paths[..]),
                force,
                upto: None,
            },
            Request::Discard { paths } => Wire::Discard {
                paths: Paths::from(&paths[..]),
            },
            Request::ChangesIn { paths, diff, span } => Wire::Changes {
                paths: Paths::from(&paths[..]),
                diff,
                patch: false,
                since: span.to.is_none().then_some(span.from).flatten(),
                between: match (span.from, span.to) {
                    (Some(a), Some(b)) => Some([a, b]),
                    _ => None,
                },
            },
            Request::CommitUpto { paths, force, upto } => Wire::Commit {
                paths: Paths::from(&paths[..]),
                force,
                upto: Some(upto),
            },
            Request::Checkpoint { paths, label } => Wire::Checkpoint {
                paths: Paths::from(&paths[..]),
                label,
            },
            Request::Checkpoints { paths } => Wire::Checkpoints {
                paths: Paths::from(&paths[..]),
            },
            Request::Rewind { id, paths } => Wire::Rewind {
                paths: Paths::from(&paths[..]),
                id: Some(id),
            },
            Request::Worker(claim) => {
                let (boundary, why) = match claim {
                    Claim::OwnPidNamespace => (BoundaryName::PidNamespace, None),
                    Claim::Session { why } => (BoundaryName::Session, Some(why)),
                    Claim::Isolate => (BoundaryName::Isolate, None),
                };
                Wire::Worker {
                    boundary: Some(boundary),
                    why,
                }
            }
        }
    }
}

impl TryFrom<Wire> for Request {
    type Error = String;

    /// What a request must hold beyond its shape; the error is the
    /// message the client gets.
    fn try_from(w: Wire) -> Result<Request, String> {
        Ok(match w {
            Wire::List => Request::List,
            Wire::Status => Request::Status,
            Wire::Watch => Request::Watch,
            Wire::DenyPending => Request::DenyPending,
            Wire::Decide {
                id,
                decision,
                scope,
            } => {
                let id = id.ok_or("decide needs a numeric \"id\"")?;
                let decision = match (decision, scope) {
                    (Some(Choice::Deny), None) => Decision::Deny,
                    (Some(Choice::Deny), Some(_)) => return Err("a deny takes no scope".into()),
                    (Some(Choice::Allow), s) => {
                        Decision::Allow(s.as_deref().unwrap_or("once").parse::<Scope>()?)
                    }
                    (None, _) => {
                        return Err("decide needs \"decision\": \"allow\" or \"deny\"".into());
                    }
                };
                Request::Decide { id, decision }
            }
            Wire::Changes {
                paths,
                diff,
                patch,
                since: None,
                between: None,
            } => Request::Changes {
                paths: paths.into(),
                diff,
                patch,
            },
            Wire::Changes { patch: true, .. } => {
                return Err("changes takes \"patch\" without \"since\" or \"between\"".into());
            }
            Wire::Changes {
                paths,
                diff,
                since,
                between,
                patch: false,
            } => Request::ChangesIn {
                paths: paths.into(),
                diff,
                span: match (since, between) {
                    (Some(a), None) => Span {
                        from: Some(a),
                        to: None,
                    },
                    (None, Some([a, b])) => Span {
                        from: Some(a),
                        to: Some(b),
                    },
                    _ => return Err("changes takes \"since\" or \"between\", not both".into()),
                },
            },
            Wire::Commit {
                paths,
                force,
                upto: None,
            } => Request::Commit {
                paths: paths.into(),
                force,
            },
            Wire::Commit {
                paths,
                force,
                upto: Some(upto),
            } => Request::CommitUpto {
                paths: paths.into(),
                force,
                upto,
            },
            Wire::Discard { paths } => Request::Discard {
                paths: paths.into(),
            },
            Wire::Checkpoint { paths, label } => Request::Checkpoint {
                paths: paths.into(),
                label,
            },
            Wire::Checkpoints { paths } => Request::Checkpoints {
                paths: paths.into(),
            },
            Wire::Rewind { paths, id } => Request::Rewind {
                id: id.ok_or("rewind needs a numeric \"id\" (a checkpoint's)")?,
                paths: paths.into(),
            },
            Wire::Worker { boundary, why } => Request::Worker(
                match boundary.ok_or(
                    "worker needs \"boundary\": \"pid-namespace\", \"session\" or \"isolate\"",
                )? {
                    BoundaryName::PidNamespace => Claim::OwnPidNamespace,
                    BoundaryName::Session => Claim::Session {
                        why: why.unwrap_or_default(),
                    },
                    BoundaryName::Isolate => Claim::Isolate,
                },
            ),
            // `Request::from_value` names the op; this only has its variant.
            Wire::Unknown => return Err(unknown_op("")),
        })
    }
}

/// Whether `msg` speaks this protocol version; the error is the message
/// the client gets.
pub fn check_version(msg: &Value) -> Result<(), String> {
    if msg["v"].as_u64() == Some(VERSION) {
        Ok(())
    } else {
        Err(format!(
            "unsupported protocol version {}: this daemon speaks v{VERSION}",
            msg["v"]
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::os::unix::ffi::OsStringExt;

    #[test]
    fn request_paths_are_exact_on_the_wire() {
        let v = Request::Discard {
            paths: vec![
                "/w/ok".into(),
                PathBuf::from(std::ffi::OsString::from_vec(b"/w/\xff".to_vec())),
            ],
        }
        .to_value();
        assert_eq!(v["paths"], json!(["/w/ok", "/w/\u{fffd}"]));
        assert_eq!(v["paths_b64"], json!([null, "L3cv/w=="]));
        let plain = Request::Discard {
            paths: vec!["/w/a\x1b".into()],
        }
        .to_value();
        assert!(plain.get("paths_b64").is_none(), "{plain}");
    }

    #[test]
    fn requests_read_back_as_written() {
        for r in [
            Request::List,
            Request::Status,
            Request::Watch,
            Request::DenyPending,
            Request::Decide {
                id: 7,
                decision: Decision::Allow(Scope::Path),
            },
            Request::Decide {
                id: 8,
                decision: Decision::Deny,
            },
            Request::Changes {
                paths: vec!["/work/src".into()],
                diff: true,
                patch: false,
            },
            Request::Changes {
                paths: vec![],
                diff: false,
                patch: true,
            },
            Request::Commit {
                paths: vec![],
                force: true,
            },
            Request::Discard {
                paths: vec!["/w/a".into(), "/w/b".into()],
            },
            Request::Commit {
                paths: vec![
                    "/w/ok".into(),
                    PathBuf::from(std::ffi::OsString::from_vec(b"/w/a\x1b\xff".to_vec())),
                ],
                force: false,
            },
        ] {
            let v = r.clone().to_value();
            assert_eq!(check_version(&v), Ok(()));
            assert_eq!(Request::from_value(&v), Ok(r));
        }
    }

    #[test]
    fn checkpoint_requests_read_back_as_written() {
        let since = Span {
            from: Some(3),
            to: None,
        };
        let between = Span {
            from: Some(2),
            to: Some(5),
        };
        for r in [
            Request::Checkpoint {
                paths: vec!["/work".into()],
                label: Some("before npm install".into()),
            },
            Request::Checkpoint {
                paths: vec![],
                label: None,
            },
            Request::Checkpoints { paths: vec![] },
            Request::Rewind {
                id: 4,
                paths: vec!["/work/a".into()],
            },
            Request::ChangesIn {
                paths: vec![],
                diff: true,
                span: since,
            },
            Request::ChangesIn {
                paths: vec!["/w/x".into()],
                diff: false,
                span: between,
            },
            Request::CommitUpto {
                paths: vec![],
                force: false,
                upto: 2,
            },
        ] {
            let v = r.clone().to_value();
            assert_eq!(Request::from_value(&v), Ok(r));
        }
        let v = Request::ChangesIn {
            paths: vec![],
            diff: false,
            span: between,
        }
        .to_value();
        assert_eq!(v["op"], "changes");
        assert_eq!(v["between"], json!([2, 5]));
        assert!(v.get("since").is_none(), "{v}");
        // A plain `changes` and `commit` go out as v1 sent them.
        let plain = Request::Changes {
            paths: vec![],
            diff: false,
            patch: false,
        }
        .to_value();
        assert!(
            plain.get("since").is_none()
                && plain.get("between").is_none()
                && plain.get("patch").is_none()
        );
        let patch_since = json!({"v": 1, "op": "changes", "patch": true, "since": 1});
        assert!(Request::from_value(&patch_since).is_err());
        let both = json!({"v": 1, "op": "changes", "since": 1, "between": [1, 2]});
        assert_eq!(
            Request::from_value(&both),
            Err("changes takes \"since\" or \"between\", not both".to_owned())
        );
        let no_id = json!({"v": 1, "op": "rewind", "paths": []});
        assert!(
            Request::from_value(&no_id)
                .unwrap_err()
                .contains("rewind needs")
        );
    }
}

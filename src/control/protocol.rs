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
//! Every line goes out through a `serde_json::Value`, whose map keeps keys
//! in alphabetical order: the bytes on the wire don't depend on the order
//! in which these types declare their fields.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::approval::side::Claim;
use crate::approval::{Decision, Event, RequestInfo, Resolution, Scope};
use crate::config::{Access, ApprovalPolicy, SandboxMode, Zone};
use crate::text;

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
    /// `diff`. On the wire `paths` is a list of strings, with `paths_b64`
    /// beside it when one is not UTF-8 (see [`crate::text`]).
    Changes {
        paths: Vec<PathBuf>,
        diff: bool,
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
    /// `run`'s worker: what keeps it from deciding.
    Worker(Claim),
}

impl Request {
    /// The request as one protocol object.
    pub fn to_value(self) -> Value {
        match self {
            Request::List => json!({"v": VERSION, "op": "list"}),
            Request::Status => json!({"v": VERSION, "op": "status"}),
            Request::Watch => json!({"v": VERSION, "op": "watch"}),
            Request::DenyPending => json!({"v": VERSION, "op": "deny_pending"}),
            Request::Decide {
                id,
                decision: Decision::Allow(scope),
            } => {
                json!({"v": VERSION, "op": "decide", "id": id, "decision": "allow", "scope": scope})
            }
            Request::Decide {
                id,
                decision: Decision::Deny,
            } => json!({"v": VERSION, "op": "decide", "id": id, "decision": "deny"}),
            Request::Changes { paths, diff } => {
                with_paths(json!({"v": VERSION, "op": "changes", "diff": diff}), &paths)
            }
            Request::Commit { paths, force } => with_paths(
                json!({"v": VERSION, "op": "commit", "force": force}),
                &paths,
            ),
            Request::Discard { paths } => {
                with_paths(json!({"v": VERSION, "op": "discard"}), &paths)
            }
            Request::Worker(Claim::OwnPidNamespace) => {
                json!({"v": VERSION, "op": "worker", "boundary": "pid-namespace"})
            }
            Request::Worker(Claim::Session { why }) => {
                json!({"v": VERSION, "op": "worker", "boundary": "session", "why": why})
            }
            Request::Worker(Claim::Isolate) => {
                json!({"v": VERSION, "op": "worker", "boundary": "isolate"})
            }
        }
    }

    /// Read a request whose version was checked ([`check_version`]); the
    /// error is the message the client gets.
    pub fn from_value(req: &Value) -> Result<Request, String> {
        match req["op"].as_str().unwrap_or("") {
            "list" => Ok(Request::List),
            "status" => Ok(Request::Status),
            "watch" => Ok(Request::Watch),
            "deny_pending" => Ok(Request::DenyPending),
            "decide" => {
                let Some(id) = req["id"].as_u64() else {
                    return Err("decide needs a numeric \"id\"".into());
                };
                let decision = match (req["decision"].as_str(), req["scope"].as_str()) {
                    (Some("deny"), None) => Decision::Deny,
                    (Some("deny"), Some(_)) => return Err("a deny takes no scope".into()),
                    (Some("allow"), s) => Decision::Allow(s.unwrap_or("once").parse::<Scope>()?),
                    _ => return Err("decide needs \"decision\": \"allow\" or \"deny\"".into()),
                };
                Ok(Request::Decide { id, decision })
            }
            "changes" => Ok(Request::Changes {
                paths: paths(req)?,
                diff: req["diff"].as_bool().unwrap_or(false),
            }),
            "commit" => Ok(Request::Commit {
                paths: paths(req)?,
                force: req["force"].as_bool().unwrap_or(false),
            }),
            "discard" => Ok(Request::Discard { paths: paths(req)? }),
            "worker" => Ok(Request::Worker(match req["boundary"].as_str() {
                Some("pid-namespace") => Claim::OwnPidNamespace,
                Some("session") => Claim::Session {
                    why: req["why"].as_str().unwrap_or("").to_owned(),
                },
                Some("isolate") => Claim::Isolate,
                _ => {
                    return Err(
                        "worker needs \"boundary\": \"pid-namespace\", \"session\" or \"isolate\""
                            .into(),
                    );
                }
            })),
            other => Err(format!(
                "unknown op '{other}': use list, watch, decide, status, deny_pending, changes, \
                 commit, discard or worker"
            )),
        }
    }
}

/// `v` with `paths` (and `paths_b64` when one is not UTF-8).
fn with_paths(mut v: Value, paths: &[PathBuf]) -> Value {
    let (text, b64): (Vec<String>, Vec<Option<String>>) =
        paths.iter().map(|p| text::path_for_json(p)).unzip();
    v["paths"] = json!(text);
    if b64.iter().any(Option::is_some) {
        v["paths_b64"] = json!(b64);
    }
    v
}

/// A request's `paths`: absent or a list of strings, each exact with its
/// entry in `paths_b64` when there is one.
fn paths(req: &Value) -> Result<Vec<PathBuf>, String> {
    let bad = || "\"paths\" must be a list of strings".to_owned();
    let b64 = req["paths_b64"].as_array();
    match &req["paths"] {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let t = p.as_str().ok_or_else(bad)?;
                let exact = b64.and_then(|b| b.get(i)).and_then(Value::as_str);
                Ok(text::path_from_json(t, exact))
            })
            .collect(),
        _ => Err(bad()),
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

/// A successful answer: `{"v":1,"ok":true}` plus the fields of `body`.
pub fn ok_answer<T: Serialize>(body: &T) -> Value {
    let mut v = json!({"v": VERSION, "ok": true});
    if let (Value::Object(m), Ok(Value::Object(fields))) = (&mut v, serde_json::to_value(body)) {
        m.extend(fields);
    }
    v
}

/// A refusal: `{"v":1,"ok":false,"error":MSG}`.
pub fn fail_answer(msg: impl Into<String>) -> Value {
    json!({"v": VERSION, "ok": false, "error": msg.into()})
}

/// The answer to `decide` and `watch`: nothing beyond `ok`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Done {}

/// The answer to `list`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listed {
    pub requests: Vec<RequestInfo>,
}

/// The answer to `deny_pending`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Denied {
    pub denied: u64,
}

/// The answer to `status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusAnswer {
    pub status: Status,
}

/// A mount's status: what `zonemount status` shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    pub mountpoint: PathBuf,
    /// The daemon.
    pub pid: u32,
    /// Seconds since the epoch.
    pub started: u64,
    /// The project file; `None`: the embedded default.
    pub config: Option<PathBuf>,
    pub workers: Vec<PathBuf>,
    /// The `--zone NAME=PATH[:ro|rw]` arguments the mount was given, as
    /// given (absent when none, and from older daemons).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zone_args: Vec<String>,
    /// This socket.
    pub control: PathBuf,
    pub audit_log: Option<PathBuf>,
    pub approval_timeout_secs: u64,
    pub no_approvals: bool,
    /// Who may use this socket (besides root).
    pub owner_uid: u32,
    pub sandbox_mode: SandboxMode,
    pub zones: Vec<ZoneStatus>,
    pub pending: Vec<RequestInfo>,
    /// The broker's counters by name.
    pub counters: BTreeMap<String, u64>,
    /// How file data moves (absent from older daemons).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io: Option<IoStatus>,
    /// Absent from older daemons.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_ttl_secs: Option<CacheTtls>,
    /// The last refusals, oldest first, explained.
    #[serde(default)]
    pub recent_refusals: Vec<RecentRefusalInfo>,
    /// What this daemon could not use, and what that costs (empty: it
    /// lacks nothing). Absent from older daemons.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degraded: Option<Vec<Degraded>>,
    /// Where the staged zones keep their changes (absent: none staged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage_dir: Option<PathBuf>,
    /// What keeps `run`'s worker from deciding for itself (absent: the
    /// mount was not made by `run`, or by an older one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_boundary: Option<crate::approval::side::Boundary>,
}

/// Something a daemon could not use: `feature` is `passthrough` (FUSE
/// passthrough) or `file_handles` (kernel file handles); `needs` what
/// would make it usable (e.g. `CAP_SYS_ADMIN`), `cost` what doing without
/// it costs, for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Degraded {
    pub feature: String,
    pub needs: String,
    pub cost: String,
}

impl Degraded {
    /// One line for people: `without FEATURE (needs NEEDS): COST`.
    pub fn line(&self) -> String {
        let feature = match self.feature.as_str() {
            "passthrough" => "FUSE passthrough",
            "file_handles" => "kernel file handles",
            other => other,
        };
        format!("without {feature} (needs {}): {}", self.needs, self.cost)
    }
}

/// One zone of [`Status`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZoneStatus {
    pub name: String,
    pub backing: PathBuf,
    pub policy: PolicyStatus,
}

/// A zone's policy, as the config has it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyStatus {
    pub access: Access,
    pub approval: ApprovalPolicy,
    /// `None`: every name.
    pub suffixes: Option<Vec<String>>,
    pub max_file_bytes: Option<u64>,
    pub protect: Vec<String>,
    /// Patterns of paths hidden in the zone (absent: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hide: Vec<String>,
    /// Sensitive roots hidden inside the backing dir, relative to it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hidden: Vec<PathBuf>,
    /// Changes go to a stage until committed (absent: not staged).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub staged: bool,
}

impl From<&Zone> for ZoneStatus {
    fn from(z: &Zone) -> Self {
        let p = &z.policy;
        ZoneStatus {
            name: z.name.clone(),
            backing: z.backing.clone(),
            policy: PolicyStatus {
                access: p.access,
                approval: p.approval,
                suffixes: p.suffixes.clone(),
                max_file_bytes: p.max_file_bytes,
                protect: p.protect.clone(),
                hide: p.hide.clone(),
                hidden: p.hidden.clone(),
                staged: p.staged,
            },
        }
    }
}

/// How file data moves: `mode` is `passthrough` or `daemon`, `detail`
/// one line for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IoStatus {
    pub mode: String,
    pub detail: String,
    /// How requests reach the daemon: `dev-fuse` or `io-uring` (absent
    /// from older daemons).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport_detail: Option<String>,
}

/// Cache TTLs, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CacheTtls {
    pub rw: f64,
    pub ro: f64,
}

/// A refusal the filesystem gave, explained.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecentRefusalInfo {
    /// RFC 3339, UTC, seconds.
    pub time: String,
    /// The path as the worker sees it.
    pub path: String,
    /// `path`'s exact bytes (base64) when they are not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_b64: Option<String>,
    /// The errno's name, e.g. `EROFS`.
    pub errno: String,
    /// One line, as `check` would say it.
    pub reason: String,
    /// The whole explanation, with what would work instead.
    pub message: String,
}

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Allow,
    Deny,
    Timeout,
    Withdrawn,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Outcome::Allow => "allow",
            Outcome::Deny => "deny",
            Outcome::Timeout => "timeout",
            Outcome::Withdrawn => "withdrawn",
        })
    }
}

/// One line of a `watch` stream (with `"v": 1` beside `event`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "lowercase")]
// A request (with its exact names) outweighs the other variants; events
// are few and short-lived, and boxing it would change a public type.
#[allow(clippy::large_enum_variant)]
pub enum WatchEvent {
    /// A request is waiting (already, or new).
    Request { request: RequestInfo },
    /// A request is no longer waiting.
    Resolved {
        id: u64,
        outcome: Outcome,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        scope: Option<Scope>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        approver_uid: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// The watcher fell behind and missed this many events.
    Lagged { missed: u64 },
}

impl From<&Event> for WatchEvent {
    fn from(ev: &Event) -> Self {
        match ev {
            Event::Requested(info) => WatchEvent::Request {
                request: info.clone(),
            },
            Event::Resolved { id, resolution } => {
                let (outcome, scope, approver_uid, reason) = match resolution {
                    Resolution::Allow {
                        scope,
                        approver_uid,
                    } => (Outcome::Allow, Some(*scope), *approver_uid, None),
                    Resolution::Deny {
                        approver_uid,
                        reason,
                    } => (Outcome::Deny, None, *approver_uid, reason.clone()),
                    Resolution::Timeout => (Outcome::Timeout, None, None, None),
                    Resolution::Withdrawn => (Outcome::Withdrawn, None, None, None),
                };
                WatchEvent::Resolved {
                    id: *id,
                    outcome,
                    scope,
                    approver_uid,
                    reason,
                }
            }
        }
    }
}

impl WatchEvent {
    /// The event as one protocol line's object.
    pub fn to_value(&self) -> Value {
        let mut v = serde_json::to_value(self).unwrap_or(Value::Null);
        if let Value::Object(m) = &mut v {
            m.insert("v".into(), json!(VERSION));
        }
        v
    }
}

/// The JSON line for a broker event.
pub fn event_json(ev: &Event) -> Value {
    WatchEvent::from(ev).to_value()
}

/// A `status` answer's object as protocol v1 daemons have sent it.
#[cfg(test)]
pub(crate) const STATUS_V1_SAMPLE: &str = r#"{"approval_timeout_secs":120,"audit_log":"/t/audit.jsonl","cache_ttl_secs":{"ro":180.0,"rw":30.5},"config":"/t/project.yaml","control":"/run/zonemount/7ee8c67d9c894c2e.sock","counters":{"allowed":0,"cached_allows":0,"cached_denials":0,"denied":0,"mutations":0,"refusals":1,"requests":1,"timeouts":0,"withdrawn":0},"io":{"detail":"daemon (--no-passthrough)","mode":"daemon"},"mountpoint":"/t/mnt","no_approvals":false,"owner_uid":0,"pending":[{"class":"write","cmdline":"sh -c echo hi > final/a.md","id":1,"items":[{"class":"write","path":"/final/a.md","zone":"final"}],"op":"create","path":"/final/a.md","pid":4242,"time":"2025-01-01T00:00:00Z","timeout_secs":118,"uid":0,"zone":"final"}],"pid":4141,"recent_refusals":[{"errno":"EROFS","message":"Cannot create '/data/x': /data is read-only.","path":"/data/x","reason":"/data is read-only","time":"2025-01-01T00:00:01Z"}],"sandbox_mode":"sandboxed","started":1700000000,"workers":[],"zones":[{"backing":"/t/.sandbox/data","name":"data","policy":{"access":"ro","approval":{"delete":"preApproved","write":"preApproved"},"hidden":[".ssh"],"max_file_bytes":null,"protect":[],"suffixes":null}},{"backing":"/t/.sandbox/final","name":"final","policy":{"access":"rw","approval":{"delete":"blocked","write":"ask"},"max_file_bytes":1000,"protect":["*.lock"],"suffixes":[".md",".txt"]}}]}"#;

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStringExt;

    #[test]
    fn a_v1_status_reads_back_to_the_same_bytes() {
        let status: Status =
            serde_json::from_str(STATUS_V1_SAMPLE).unwrap_or_else(|e| panic!("not a Status: {e}"));
        let again = serde_json::to_value(&status).map(|v| v.to_string());
        assert_eq!(again.ok().as_deref(), Some(STATUS_V1_SAMPLE));
        assert_eq!(
            ok_answer(&StatusAnswer { status }).to_string(),
            format!(r#"{{"ok":true,"status":{STATUS_V1_SAMPLE},"v":1}}"#)
        );
    }

    #[test]
    fn what_a_daemon_lacks_is_an_added_field() {
        let mut status: Status =
            serde_json::from_str(STATUS_V1_SAMPLE).unwrap_or_else(|e| panic!("not a Status: {e}"));
        assert_eq!(status.degraded, None, "absent from older daemons");
        status.degraded = Some(vec![Degraded {
            feature: "passthrough".into(),
            needs: "CAP_SYS_ADMIN".into(),
            cost: "file data goes through the daemon".into(),
        }]);
        let v = serde_json::to_value(&status).unwrap_or_default();
        assert_eq!(
            v["degraded"].to_string(),
            r#"[{"cost":"file data goes through the daemon","feature":"passthrough","needs":"CAP_SYS_ADMIN"}]"#
        );
        let back: Result<Status, _> = serde_json::from_value(v);
        assert_eq!(back.ok(), Some(status.clone()));
        assert_eq!(
            status.degraded.unwrap_or_default()[0].line(),
            "without FUSE passthrough (needs CAP_SYS_ADMIN): file data goes through the daemon"
        );
    }

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
    fn events_keep_their_wire_form() {
        let done = Event::Resolved {
            id: 3,
            resolution: Resolution::Deny {
                approver_uid: Some(0),
                reason: None,
            },
        };
        let v = event_json(&done);
        assert_eq!(
            v.to_string(),
            r#"{"approver_uid":0,"event":"resolved","id":3,"outcome":"deny","v":1}"#
        );
        let typed: Result<WatchEvent, _> = serde_json::from_value(v);
        assert_eq!(typed.ok(), Some(WatchEvent::from(&done)));
        let lagged = WatchEvent::Lagged { missed: 4 }.to_value();
        assert_eq!(lagged.to_string(), r#"{"event":"lagged","missed":4,"v":1}"#);
    }

    #[test]
    fn answers_carry_version_and_ok() {
        assert_eq!(
            ok_answer(&Denied { denied: 2 }).to_string(),
            r#"{"denied":2,"ok":true,"v":1}"#
        );
        assert_eq!(ok_answer(&Done {}).to_string(), r#"{"ok":true,"v":1}"#);
        assert_eq!(
            fail_answer("no").to_string(),
            r#"{"error":"no","ok":false,"v":1}"#
        );
    }
}

//! The answers to the control protocol's requests: `{"v":1,"ok":true}`
//! with the fields of a typed body, or `{"v":1,"ok":false,"error":MSG}`;
//! and [`Status`], what `status` answers.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Versioned;
use crate::approval::RequestInfo;
use crate::config::{Access, ApprovalPolicy, SandboxMode, Zone};

/// A successful answer's fields besides `v`: `ok` and those of `body`.
#[derive(Serialize)]
struct Answered<'a, T> {
    ok: bool,
    #[serde(flatten)]
    body: &'a T,
}

/// A refusal's fields besides `v`.
#[derive(Serialize)]
struct Failed {
    ok: bool,
    error: String,
}

/// A successful answer: `{"v":1,"ok":true}` plus the fields of `body`
/// (nothing more when they are not an object's).
pub fn ok_answer<T: Serialize>(body: &T) -> Value {
    Versioned::line(Answered { ok: true, body })
        .or_else(|_| {
            Versioned::line(Answered {
                ok: true,
                body: &Done {},
            })
        })
        .unwrap_or_default()
}

/// A refusal: `{"v":1,"ok":false,"error":MSG}`.
pub fn fail_answer(msg: impl Into<String>) -> Value {
    let failed = Failed {
        ok: false,
        error: msg.into(),
    };
    Versioned::line(failed).unwrap_or_default()
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
    /// The `--zone NAME=PATH[:ro|rw|staged]` arguments the mount was given, as
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
    /// FUSE requests answered since the mount, by opcode (`LOOKUP`,
    /// `OPEN`, ...; only those seen). Absent from older daemons.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fuse_requests: Option<BTreeMap<String, u64>>,
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
    /// How the zone reaches the worker of a `run --isolate` (absent: not
    /// such a mount, or an older daemon).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolate: Option<IsolateRoute>,
}

/// How a zone reaches the worker under `run --isolate`: `direct`, bound
/// straight from its backing dir (no daemon on the path), or through the
/// daemon; `why` says why, for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IsolateRoute {
    pub direct: bool,
    pub why: String,
}

impl IsolateRoute {
    /// The route of a zone with policy `p`, `bound` when `run` bound it
    /// straight from its backing dir.
    pub fn of(p: &crate::config::ZonePolicy, bound: bool) -> IsolateRoute {
        use crate::policy::direct;
        let why = if bound {
            direct::direct_note(p.access).to_owned()
        } else {
            match direct::route(p) {
                // Which of `run`'s reasons kept it is `run`'s to say (it
                // prints it at the start); the daemon knows only that.
                direct::Route::Direct => "kept on the daemon by `run` (--no-direct, --via-daemon, \
                     --user, a rw zone while CMD runs as root, or a bwrap without --bind-fd; \
                     `run` said which as it started)"
                    .to_owned(),
                direct::Route::Daemon(why) => format!("needs the daemon: {}", why.join(", ")),
            }
        };
        IsolateRoute { direct: bound, why }
    }

    /// One line for people: `NAME: bound straight from BACKING (WHY)` or
    /// `NAME: through the daemon (WHY)`.
    pub fn line(&self, name: &str, backing: &std::path::Path) -> String {
        if self.direct {
            format!(
                "{name}: bound straight from {} ({})",
                crate::text::path(backing),
                self.why
            )
        } else {
            format!("{name}: through the daemon ({})", self.why)
        }
    }
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
    /// Patterns of paths whose reads wait for approval (absent: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ask_read: Vec<String>,
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
                ask_read: p.ask_read.clone(),
                hidden: p.hidden.clone(),
                staged: p.staged,
            },
            isolate: None,
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
    /// How long a `/dev/fuse` thread polls for the next request after a
    /// reply, in microseconds (0: never; absent from older daemons).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busy_poll_us: Option<u64>,
    /// Why no `/dev/fuse` thread polls now although `busy_poll_us` is
    /// above 0 (it may run on one CPU only, or its cgroup's CPU quota is
    /// below the CPUs it may run on); absent while polling may happen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busy_poll_off: Option<String>,
    /// Whether the daemon now asks the kernel to keep idle CPUs polling
    /// (it does while requests come close together; absent from older
    /// daemons).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_poll_held: Option<bool>,
    /// Why idle CPUs are never kept polling for this mount (not root, no
    /// `/dev/cpu_dma_latency`, `--busy-poll 0`), or were not the last time
    /// requests came close together (busy polling held back); absent
    /// while they may be.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_poll_off: Option<String>,
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

/// A `status` answer's object as protocol v1 daemons have sent it.
#[cfg(test)]
pub(crate) const STATUS_V1_SAMPLE: &str = r#"{"approval_timeout_secs":120,"audit_log":"/t/audit.jsonl","cache_ttl_secs":{"ro":180.0,"rw":30.5},"config":"/t/project.yaml","control":"/run/zonemount/7ee8c67d9c894c2e.sock","counters":{"allowed":0,"cached_allows":0,"cached_denials":0,"denied":0,"mutations":0,"refusals":1,"requests":1,"timeouts":0,"withdrawn":0},"io":{"detail":"daemon (--no-passthrough)","mode":"daemon"},"mountpoint":"/t/mnt","no_approvals":false,"owner_uid":0,"pending":[{"class":"write","cmdline":"sh -c echo hi > final/a.md","id":1,"items":[{"class":"write","path":"/final/a.md","zone":"final"}],"op":"create","path":"/final/a.md","pid":4242,"time":"2025-01-01T00:00:00Z","timeout_secs":118,"uid":0,"zone":"final"}],"pid":4141,"recent_refusals":[{"errno":"EROFS","message":"Cannot create '/data/x': /data is read-only.","path":"/data/x","reason":"/data is read-only","time":"2025-01-01T00:00:01Z"}],"sandbox_mode":"sandboxed","started":1700000000,"workers":[],"zones":[{"backing":"/t/.sandbox/data","name":"data","policy":{"access":"ro","approval":{"delete":"preApproved","write":"preApproved"},"hidden":[".ssh"],"max_file_bytes":null,"protect":[],"suffixes":null}},{"backing":"/t/.sandbox/final","name":"final","policy":{"access":"rw","approval":{"delete":"blocked","write":"ask"},"max_file_bytes":1000,"protect":["*.lock"],"suffixes":[".md",".txt"]}}]}"#;

#[cfg(test)]
mod tests {
    use super::*;

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

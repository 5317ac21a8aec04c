//! `approvals list|watch|allow|deny` and `status`: clients of a mount's
//! control socket, found through the mount registry. Human-readable by
//! default, `--json` for scripts.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use clap::{Args, Subcommand};
use serde_json::Value;

use super::Failure;
use super::columns::{columns, zone_patterns, zone_table};
use crate::approval::{Decision, RequestInfo, Scope};
use crate::control::protocol::{Status, WatchEvent};
use crate::control::{Client, ClientError};
use crate::mount;

#[derive(Debug, Args, Clone)]
pub(crate) struct StatusArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// The mount's directory.
    mountpoint: PathBuf,
}

#[derive(Debug, Subcommand, Clone)]
pub(crate) enum ApprovalsCmd {
    /// List the requests waiting now.
    #[command(after_help = super::help::APPROVALS_LIST)]
    List {
        /// Print JSON (an array of requests).
        #[arg(long)]
        json: bool,
        /// The mount's directory.
        mountpoint: PathBuf,
    },
    /// Print requests and their outcomes as they happen (until the mount
    /// goes away or this is interrupted).
    #[command(after_help = super::help::APPROVALS_WATCH)]
    Watch {
        /// Print JSON Lines (the control protocol's event objects).
        #[arg(long)]
        json: bool,
        /// The mount's directory.
        mountpoint: PathBuf,
    },
    /// Allow a request, once or for the rest of the mount.
    #[command(after_help = super::help::APPROVALS_ALLOW)]
    Allow {
        /// once: this request; path: this class on this path; zone: this
        /// class anywhere in the zone.
        #[arg(
            long,
            default_value = "once",
            value_name = "once|path|zone",
            // Named, so completions offer them (not file names).
            value_parser = clap::builder::TypedValueParser::try_map(
                clap::builder::PossibleValuesParser::new(["once", "path", "zone"]),
                |s| s.parse::<Scope>()
            ),
            hide_possible_values = true
        )]
        scope: Scope,
        /// The mount's directory.
        mountpoint: PathBuf,
        /// The request's id, as `approvals list` shows it.
        id: u64,
    },
    /// Deny a request (EACCES; the same class on the same path is denied
    /// at once for the rest of the mount).
    #[command(after_help = super::help::APPROVALS_DENY)]
    Deny {
        /// The mount's directory.
        mountpoint: PathBuf,
        /// The request's id, as `approvals list` shows it.
        id: u64,
    },
}

fn failure(e: ClientError) -> Failure {
    Failure::new(1, e.to_string())
}

/// Connect to the daemon serving `mountpoint`.
pub(crate) fn connect(mountpoint: &Path) -> Result<Client, Failure> {
    let mp = mount::absolute(mountpoint);
    let shown = mp.display();
    mount::check_runtime_dir().map_err(|e| Failure::new(1, e.to_string()))?;
    let Some(rec) = mount::find_record(&mp) else {
        return Err(Failure::new(
            1,
            format!(
                "{shown} is not a live zonemount mount (no registry record): check the path, or mount it first"
            ),
        ));
    };
    if !mount::process_alive(rec.pid) {
        return Err(Failure::new(
            1,
            format!(
                "{shown} is stale: its daemon (pid {}) is gone; run zonemount unmount {shown}",
                rec.pid
            ),
        ));
    }
    let Some(sock) = rec.control else {
        return Err(Failure::new(
            1,
            format!("{shown} has no control socket (mounted by an older zonemount): remount it"),
        ));
    };
    Client::connect(&sock).map_err(|e| match &e {
        ClientError::Connect(_, io) if io.kind() == std::io::ErrorKind::PermissionDenied => {
            use std::os::unix::fs::MetadataExt;
            let who = match std::fs::metadata(&sock).map(|m| m.uid()) {
                Ok(0) => "root (who mounted it) may use it; run this as root".to_owned(),
                Ok(uid) => format!(
                    "uid {uid} (the user who mounted it) and root may use it; run this as that user or as root"
                ),
                Err(_) => "the user who mounted it and root may use it; run this as that user or as root".to_owned(),
            };
            Failure::new(1, format!("{e}: {shown}'s control socket is private: only {who}"))
        }
        _ => failure(e),
    })
}

fn print(text: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| Failure::new(1, format!("cannot write to stdout: {e}")))
}

pub(crate) fn run(cmd: &ApprovalsCmd) -> Result<(), Failure> {
    match cmd {
        ApprovalsCmd::List { json, mountpoint } => {
            let list = connect(mountpoint)?.list().map_err(failure)?;
            if *json {
                return print(&format!("{}\n", pretty(&list)));
            }
            print(&render_list(&list, SystemTime::now()))
        }
        ApprovalsCmd::Watch { json, mountpoint } => watch(mountpoint, *json),
        ApprovalsCmd::Allow {
            scope,
            mountpoint,
            id,
        } => {
            connect(mountpoint)?
                .decide(*id, Decision::Allow(*scope))
                .map_err(failure)?;
            print(&format!("allowed request {id} (scope {scope})\n"))
        }
        ApprovalsCmd::Deny { mountpoint, id } => {
            connect(mountpoint)?
                .decide(*id, Decision::Deny)
                .map_err(failure)?;
            print(&format!("denied request {id}\n"))
        }
    }
}

/// `v` as pretty JSON, keys in alphabetical order as on the wire, safe on
/// a terminal and exact ([`crate::text::json_pretty`]).
fn pretty<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .and_then(|v| crate::text::json_pretty(&v))
        .unwrap_or_default()
}

fn age(time: &str, now: SystemTime) -> String {
    humantime::parse_rfc3339(time)
        .ok()
        .and_then(|t| now.duration_since(t).ok())
        .map(|d| format!("{}s", d.as_secs()))
        .unwrap_or_else(|| "?".into())
}

/// `approvals list` for people: one row per request.
pub(crate) fn render_list(list: &[RequestInfo], now: SystemTime) -> String {
    if list.is_empty() {
        return "no pending requests\n".into();
    }
    let mut rows = vec![
        [
            "ID", "AGE", "ZONE", "CLASS", "OP", "PATH", "PID", "UID", "COMMAND",
        ]
        .map(String::from),
    ];
    for r in list {
        let path = match r.shown_target() {
            Some(t) => format!("{} -> {t}", r.shown_path()),
            None => r.shown_path(),
        };
        rows.push([
            r.id.to_string(),
            age(&r.time, now),
            r.zone.clone(),
            r.class.clone(),
            // The caller was told to retry once this is decided.
            match r.retry {
                true => format!("{} (retry)", r.op),
                false => r.op.clone(),
            },
            path,
            r.pid.to_string(),
            r.uid.to_string(),
            r.shown_cmdline(),
        ]);
    }
    columns(&rows)
}

fn watch(mountpoint: &Path, as_json: bool) -> Result<(), Failure> {
    let mut c = connect(mountpoint)?;
    c.watch().map_err(failure)?;
    while let Some(ev) = c.next_line().map_err(failure)? {
        let line = if as_json {
            crate::text::json_line(&ev).unwrap_or_default()
        } else {
            render_event(&ev)
        };
        print(&format!("{line}\n"))?;
    }
    Ok(())
}

/// One watch event for people; one this CLI doesn't know, as its JSON.
pub(crate) fn render_event(ev: &Value) -> String {
    match serde_json::from_value::<WatchEvent>(ev.clone()) {
        Ok(WatchEvent::Request { request: r }) => {
            let target = r
                .shown_target()
                .map(|t| format!(" -> {t}"))
                .unwrap_or_default();
            format!(
                "request {}: {} {}{target} ({}) by pid {} uid {}: {}",
                r.id,
                r.class,
                r.shown_path(),
                r.op,
                r.pid,
                r.uid,
                r.shown_cmdline(),
            )
        }
        Ok(WatchEvent::Resolved {
            id,
            outcome,
            scope,
            approver_uid,
            reason,
        }) => {
            let mut s = format!("resolved {id}: {outcome}");
            if let Some(scope) = scope {
                s.push_str(&format!(" (scope {scope})"));
            }
            if let Some(uid) = approver_uid {
                s.push_str(&format!(" by uid {uid}"));
            }
            if let Some(why) = reason {
                s.push_str(&format!(": {}", crate::text::message(&why)));
            }
            s
        }
        Ok(WatchEvent::Lagged { .. }) | Err(_) => crate::text::json_line(ev).unwrap_or_default(),
    }
}

pub(crate) fn status(a: &StatusArgs) -> Result<(), Failure> {
    let status = connect(&a.mountpoint)?.status().map_err(failure)?;
    if a.json {
        return print(&format!("{}\n", pretty(&status)));
    }
    print(&render_status(&status, SystemTime::now()))
}

/// A list joined by commas, or `-` when empty or absent.
fn list_or_dash(items: Option<&[String]>) -> String {
    match items {
        Some(items) if !items.is_empty() => items.join(","),
        _ => "-".into(),
    }
}

/// Seconds without a needless ".0".
fn secs(f: f64) -> String {
    if f.fract() == 0.0 && f < 1e15 {
        format!("{}", f as u64)
    } else {
        format!("{f}")
    }
}

/// `status` for people.
pub(crate) fn render_status(s: &Status, now: SystemTime) -> String {
    let started = humantime::format_rfc3339_seconds(
        SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(s.started),
    );
    let approvals = if s.no_approvals {
        "off (--no-approvals: every ask is denied)".to_string()
    } else {
        format!("asked; timeout {} s", s.approval_timeout_secs)
    };
    let mut out = format!(
        "mountpoint: {}\ndaemon: pid {}, started {started}\nconfig: {}\ncontrol: {}\naudit log: {}\napprovals: {approvals}\n",
        s.mountpoint.display(),
        s.pid,
        super::config_origin(s.config.as_deref(), &s.zone_args),
        s.control.display(),
        s.audit_log
            .as_ref()
            .map_or_else(|| "none".to_string(), |p| p.display().to_string()),
    );
    if let Some(b) = &s.worker_boundary {
        out.push_str(&format!(
            "who decides: uid {} and root; {}\n",
            s.owner_uid,
            b.line()
        ));
    }
    if let Some(io) = &s.io {
        out.push_str(&format!("file data: {}\n", io.detail));
        if let Some(t) = &io.transport_detail {
            out.push_str(&format!("transport: {t}\n"));
        }
    }
    for d in s.degraded.iter().flatten() {
        out.push_str(&format!("degraded: {}\n", d.line()));
    }
    if let Some(ttl) = &s.cache_ttl_secs {
        out.push_str(&format!(
            "cache ttl: {} s in rw zones, {} s in ro zones\n",
            secs(ttl.rw),
            secs(ttl.ro)
        ));
    }
    if let Some(dir) = &s.stage_dir {
        out.push_str(&format!("stage dir: {}\n", dir.display()));
    }
    out.push_str("zones:\n");
    let table = zone_table(&s.zones, list_or_dash) + &zone_patterns(&s.zones);
    for line in table.lines() {
        out.push_str(&format!("  {line}\n"));
    }
    if s.zones.iter().any(|z| z.isolate.is_some()) {
        out.push_str("under run --isolate:\n");
        for z in &s.zones {
            if let Some(r) = &z.isolate {
                out.push_str(&format!("  {}\n", r.line(&z.name, &z.backing)));
            }
        }
    }
    out.push_str(&format!("pending: {}\n", s.pending.len()));
    if !s.pending.is_empty() {
        for line in render_list(&s.pending, now).lines() {
            out.push_str(&format!("  {line}\n"));
        }
    }
    let counters: Vec<String> = s.counters.iter().map(|(k, v)| format!("{k} {v}")).collect();
    out.push_str(&format!("counters: {}\n", counters.join(", ")));
    if !s.recent_refusals.is_empty() {
        out.push_str(&format!("last refusals ({}):\n", s.recent_refusals.len()));
        for r in s.recent_refusals.iter().rev().take(10) {
            // Explanations show names escaped; a daemon from before that
            // still can't draw on the terminal (`text::message`).
            out.push_str(&format!(
                "  {} {}: {}\n",
                r.time,
                r.errno,
                crate::text::message(&r.message)
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(id: u64) -> RequestInfo {
        RequestInfo {
            id,
            zone: "final".into(),
            class: "write".into(),
            op: "create".into(),
            path: "/final/report.md".into(),
            target: None,
            pid: 4242,
            uid: 1000,
            cmdline: "sh -c echo hi > final/report.md".into(),
            time: "2025-01-01T00:00:00Z".into(),
            timeout_secs: 300,
            ..RequestInfo::default()
        }
    }

    #[test]
    fn list_is_a_table_with_ages() {
        let now = humantime::parse_rfc3339("2025-01-01T00:00:12Z").unwrap_or(SystemTime::now());
        let s = render_list(&[req(7)], now);
        let lines: Vec<&str> = s.lines().collect();
        assert!(lines[0].starts_with("ID  AGE  ZONE"), "{s}");
        assert!(
            lines[1].starts_with(
                "7   12s  final  write  create  /final/report.md  4242  1000  sh -c echo hi"
            ),
            "{s}"
        );
        assert_eq!(render_list(&[], now), "no pending requests\n");
    }

    /// A request for `evil.sh` dressed up as `notes.md`: ESC sequences, a
    /// CR, a right-to-left override and a byte that is not UTF-8, in the
    /// path, the target and the command line.
    fn evil() -> RequestInfo {
        let (path, path_b64) = crate::text::for_json(b"/final/evil.sh\r\x1b[2K\xff");
        let (cmdline, cmdline_b64) = crate::text::for_json(b"vim notes.md\x1b[1A\xfe");
        RequestInfo {
            path,
            path_b64,
            target: Some("/final/a\u{202e}hs.md".into()),
            cmdline,
            cmdline_b64,
            ..req(9)
        }
    }

    #[test]
    fn what_the_worker_named_is_shown_escaped() {
        let now = SystemTime::now();
        let ev = crate::control::event_json(&crate::approval::Event::Requested(evil()));
        let mut status: Status = serde_json::from_str(crate::control::protocol::STATUS_V1_SAMPLE)
            .unwrap_or_else(|e| panic!("{e}"));
        status.pending = vec![evil()];
        for text in [
            render_list(&[evil()], now),
            render_event(&ev),
            render_status(&status, now),
        ] {
            assert!(
                !text
                    .chars()
                    .any(|c| (crate::text::unsafe_for_terminal(c) && c != '\n') || c == '\u{fffd}'),
                "{text:?}"
            );
            assert!(
                text.contains("/final/evil.sh\\r\\x1b[2K\\xff -> /final/a\\u{202e}hs.md"),
                "{text}"
            );
            assert!(text.contains("vim notes.md\\x1b[1A\\xfe"), "{text}");
        }
    }

    #[test]
    fn events_read_as_sentences() {
        let ev = crate::control::event_json(&crate::approval::Event::Requested(req(3)));
        assert_eq!(
            render_event(&ev),
            "request 3: write /final/report.md (create) by pid 4242 uid 1000: sh -c echo hi > final/report.md"
        );
        let done = crate::control::event_json(&crate::approval::Event::Resolved {
            id: 3,
            resolution: crate::approval::Resolution::Allow {
                scope: Scope::Path,
                approver_uid: Some(0),
            },
        });
        assert_eq!(
            render_event(&done),
            "resolved 3: allow (scope path) by uid 0"
        );
    }

    #[test]
    fn status_says_what_the_daemon_does_without() {
        use crate::control::protocol::Degraded;
        let mut s: Status = serde_json::from_str(crate::control::protocol::STATUS_V1_SAMPLE)
            .unwrap_or_else(|e| panic!("{e}"));
        s.degraded = Some(vec![
            Degraded {
                feature: "passthrough".into(),
                needs: "CAP_SYS_ADMIN".into(),
                cost: "slower".into(),
            },
            Degraded {
                feature: "file_handles".into(),
                needs: "CAP_DAC_READ_SEARCH".into(),
                cost: "by name".into(),
            },
        ]);
        let out = render_status(&s, SystemTime::now());
        assert!(
            out.contains(
                "file data: daemon (--no-passthrough)\n\
                 degraded: without FUSE passthrough (needs CAP_SYS_ADMIN): slower\n\
                 degraded: without kernel file handles (needs CAP_DAC_READ_SEARCH): by name\n"
            ),
            "{out}"
        );
    }

    #[test]
    fn status_says_which_boundary_keeps_the_worker_from_deciding() {
        use crate::approval::side::Boundary;
        let mut s: Status = serde_json::from_str(crate::control::protocol::STATUS_V1_SAMPLE)
            .unwrap_or_else(|e| panic!("{e}"));
        s.worker_boundary = Some(Boundary::PidNamespace { ns: 4026532999 });
        let out = render_status(&s, SystemTime::now());
        assert!(
            out.contains(
                "approvals: asked; timeout 120 s\nwho decides: uid 0 and root; not from inside the worker's PID namespace (pid:[4026532999]), whatever it forks\n"
            ),
            "{out}"
        );
        s.worker_boundary = Some(Boundary::Session {
            why: "unshare: Operation not permitted".into(),
        });
        let out = render_status(&s, SystemTime::now());
        assert!(
            out.contains("who decides: uid 0 and root; not from the worker's session or its descendants, which `setsid` or a double fork leaves (unshare: Operation not permitted); --user or --isolate hold\n"),
            "{out}"
        );
    }

    #[test]
    fn status_reads_as_before() {
        let s: Status = serde_json::from_str(crate::control::protocol::STATUS_V1_SAMPLE)
            .unwrap_or_else(|e| panic!("{e}"));
        let now = humantime::parse_rfc3339("2025-01-01T00:00:12Z").unwrap_or(SystemTime::now());
        assert_eq!(
            render_status(&s, now),
            "mountpoint: /t/mnt
daemon: pid 4141, started 2023-11-14T22:13:20Z
config: /t/project.yaml
control: /run/zonemount/7ee8c67d9c894c2e.sock
audit log: /t/audit.jsonl
approvals: asked; timeout 120 s
file data: daemon (--no-passthrough)
cache ttl: 30.5 s in rw zones, 180 s in ro zones
zones:
  ZONE   BACKING            MODE  READ         WRITE        DELETE       SUFFIXES  MAX BYTES  PROTECT
  data   /t/.sandbox/data   ro    preApproved  preApproved  preApproved  -         -          -
  final  /t/.sandbox/final  rw    preApproved  ask          blocked      .md,.txt  1000       *.lock
  hidden in data (sensitive roots): .ssh
pending: 1
  ID  AGE  ZONE   CLASS  OP      PATH         PID   UID  COMMAND
  1   12s  final  write  create  /final/a.md  4242  0    sh -c echo hi > final/a.md
counters: allowed 0, cached_allows 0, cached_denials 0, denied 0, mutations 0, refusals 1, requests 1, timeouts 0, withdrawn 0
last refusals (1):
  2025-01-01T00:00:01Z EROFS: Cannot create '/data/x': /data is read-only.
"
        );
    }
}

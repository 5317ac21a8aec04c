//! `approvals list|watch|allow|deny` and `status`: clients of a mount's
//! control socket, found through the mount registry. Human-readable by
//! default, `--json` for scripts.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::Failure;
use crate::approval::{RequestInfo, Scope};
use crate::control::{self, Client, ClientError};
use crate::mount;

#[derive(Debug, Args, Clone)]
pub(crate) struct StatusArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
    mountpoint: PathBuf,
}

#[derive(Debug, Subcommand, Clone)]
pub(crate) enum ApprovalsCmd {
    /// List the requests waiting now.
    List {
        /// Print JSON (an array of requests).
        #[arg(long)]
        json: bool,
        mountpoint: PathBuf,
    },
    /// Print requests and their outcomes as they happen (until the mount
    /// goes away or this is interrupted).
    Watch {
        /// Print JSON Lines (the control protocol's event objects).
        #[arg(long)]
        json: bool,
        mountpoint: PathBuf,
    },
    /// Allow a request, once or for the rest of the mount.
    Allow {
        /// once: this request; path: this class on this path; zone: this
        /// class anywhere in the zone.
        #[arg(long, default_value = "once", value_name = "once|path|zone")]
        scope: Scope,
        mountpoint: PathBuf,
        id: u64,
    },
    /// Deny a request (EACCES; the same class on the same path is denied
    /// at once for the rest of the mount).
    Deny { mountpoint: PathBuf, id: u64 },
}

fn failure(e: ClientError) -> Failure {
    Failure::new(1, e.to_string())
}

/// Connect to the daemon serving `mountpoint`.
fn connect(mountpoint: &Path) -> Result<Client, Failure> {
    let mp = mount::absolute(mountpoint);
    let shown = mp.display();
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
    Client::connect(&sock).map_err(failure)
}

fn call(mountpoint: &Path, req: Value) -> Result<Value, Failure> {
    connect(mountpoint)?.call(req).map_err(failure)
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
            let v = call(mountpoint, json!({"v": control::VERSION, "op": "list"}))?;
            let requests = v["requests"].clone();
            if *json {
                return print(&format!("{}\n", pretty(&requests)));
            }
            let list: Vec<RequestInfo> = serde_json::from_value(requests)
                .map_err(|e| Failure::new(1, format!("unexpected answer from the daemon: {e}")))?;
            print(&render_list(&list, SystemTime::now()))
        }
        ApprovalsCmd::Watch { json, mountpoint } => watch(mountpoint, *json),
        ApprovalsCmd::Allow {
            scope,
            mountpoint,
            id,
        } => {
            let req = json!({"v": control::VERSION, "op": "decide", "id": id, "decision": "allow", "scope": scope});
            call(mountpoint, req)?;
            print(&format!("allowed request {id} (scope {scope})\n"))
        }
        ApprovalsCmd::Deny { mountpoint, id } => {
            let req = json!({"v": control::VERSION, "op": "decide", "id": id, "decision": "deny"});
            call(mountpoint, req)?;
            print(&format!("denied request {id}\n"))
        }
    }
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
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
        let path = match &r.target {
            Some(t) => format!("{} -> {t}", r.path),
            None => r.path.clone(),
        };
        rows.push([
            r.id.to_string(),
            age(&r.time, now),
            r.zone.clone(),
            r.class.clone(),
            r.op.clone(),
            path,
            r.pid.to_string(),
            r.uid.to_string(),
            r.cmdline.clone(),
        ]);
    }
    table(&rows)
}

fn table<const N: usize>(rows: &[[String; N]]) -> String {
    let mut widths = [0usize; N];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == N {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn watch(mountpoint: &Path, as_json: bool) -> Result<(), Failure> {
    let mut c = connect(mountpoint)?;
    c.watch().map_err(failure)?;
    while let Some(ev) = c.next_line().map_err(failure)? {
        let line = if as_json {
            serde_json::to_string(&ev).unwrap_or_default()
        } else {
            render_event(&ev)
        };
        print(&format!("{line}\n"))?;
    }
    Ok(())
}

/// One watch event for people.
pub(crate) fn render_event(ev: &Value) -> String {
    match ev["event"].as_str() {
        Some("request") => {
            let r = &ev["request"];
            let target = r["target"]
                .as_str()
                .map(|t| format!(" -> {t}"))
                .unwrap_or_default();
            format!(
                "request {}: {} {}{target} ({}) by pid {} uid {}: {}",
                r["id"],
                r["class"].as_str().unwrap_or(""),
                r["path"].as_str().unwrap_or(""),
                r["op"].as_str().unwrap_or(""),
                r["pid"],
                r["uid"],
                r["cmdline"].as_str().unwrap_or(""),
            )
        }
        Some("resolved") => {
            let mut s = format!(
                "resolved {}: {}",
                ev["id"],
                ev["outcome"].as_str().unwrap_or("?")
            );
            if let Some(scope) = ev["scope"].as_str() {
                s.push_str(&format!(" (scope {scope})"));
            }
            if let Some(uid) = ev["approver_uid"].as_u64() {
                s.push_str(&format!(" by uid {uid}"));
            }
            if let Some(why) = ev["reason"].as_str() {
                s.push_str(&format!(": {why}"));
            }
            s
        }
        _ => ev.to_string(),
    }
}

pub(crate) fn status(a: &StatusArgs) -> Result<(), Failure> {
    let v = call(
        &a.mountpoint,
        json!({"v": control::VERSION, "op": "status"}),
    )?;
    let s = &v["status"];
    if a.json {
        return print(&format!("{}\n", pretty(s)));
    }
    print(&render_status(s, SystemTime::now()))
}

fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        Value::Array(a) if a.is_empty() => "-".into(),
        Value::Array(a) => a.iter().map(text).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

/// Seconds without a needless ".0".
fn secs(v: &Value) -> String {
    match v.as_f64() {
        Some(f) if f.fract() == 0.0 && f < 1e15 => format!("{}", f as u64),
        Some(f) => format!("{f}"),
        None => "-".into(),
    }
}

/// `status` for people.
pub(crate) fn render_status(s: &Value, now: SystemTime) -> String {
    let started = s["started"]
        .as_u64()
        .map(|t| {
            humantime::format_rfc3339_seconds(
                SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(t),
            )
            .to_string()
        })
        .unwrap_or_default();
    let approvals = if s["no_approvals"] == true {
        "off (--no-approvals: every ask is denied)".to_string()
    } else {
        format!("asked; timeout {} s", text(&s["approval_timeout_secs"]))
    };
    let mut out = format!(
        "mountpoint: {}\ndaemon: pid {}, started {started}\nconfig: {}\ncontrol: {}\naudit log: {}\napprovals: {approvals}\n",
        text(&s["mountpoint"]),
        text(&s["pid"]),
        match &s["config"] {
            Value::Null => "embedded default".to_string(),
            v => text(v),
        },
        text(&s["control"]),
        match &s["audit_log"] {
            Value::Null => "none".to_string(),
            v => text(v),
        },
    );
    if !s["io"].is_null() {
        out.push_str(&format!("file data: {}\n", text(&s["io"]["detail"])));
    }
    if !s["cache_ttl_secs"].is_null() {
        out.push_str(&format!(
            "cache ttl: {} s in rw zones, {} s in ro zones\n",
            secs(&s["cache_ttl_secs"]["rw"]),
            secs(&s["cache_ttl_secs"]["ro"])
        ));
    }
    let mut rows = vec![
        [
            "ZONE",
            "BACKING",
            "MODE",
            "WRITE",
            "DELETE",
            "SUFFIXES",
            "MAX BYTES",
            "PROTECT",
        ]
        .map(String::from),
    ];
    for z in s["zones"].as_array().into_iter().flatten() {
        let p = &z["policy"];
        rows.push([
            text(&z["name"]),
            text(&z["backing"]),
            text(&p["access"]),
            text(&p["approval"]["write"]),
            text(&p["approval"]["delete"]),
            text(&p["suffixes"]),
            text(&p["max_file_bytes"]),
            text(&p["protect"]),
        ]);
    }
    out.push_str("zones:\n");
    for line in table(&rows).lines() {
        out.push_str(&format!("  {line}\n"));
    }
    let pending: Vec<RequestInfo> =
        serde_json::from_value(s["pending"].clone()).unwrap_or_default();
    out.push_str(&format!("pending: {}\n", pending.len()));
    if !pending.is_empty() {
        for line in render_list(&pending, now).lines() {
            out.push_str(&format!("  {line}\n"));
        }
    }
    let counters: Vec<String> = s["counters"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    out.push_str(&format!("counters: {}\n", counters.join(", ")));
    let refusals = s["recent_refusals"].as_array().cloned().unwrap_or_default();
    if !refusals.is_empty() {
        out.push_str(&format!("last refusals ({}):\n", refusals.len()));
        for r in refusals.iter().rev().take(10) {
            out.push_str(&format!(
                "  {} {}: {}\n",
                r["time"].as_str().unwrap_or("?"),
                r["errno"].as_str().unwrap_or("?"),
                r["message"].as_str().unwrap_or("?")
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
            items: vec![],
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

    #[test]
    fn events_read_as_sentences() {
        let ev = control::event_json(&crate::approval::Event::Requested(req(3)));
        assert_eq!(
            render_event(&ev),
            "request 3: write /final/report.md (create) by pid 4242 uid 1000: sh -c echo hi > final/report.md"
        );
        let done = control::event_json(&crate::approval::Event::Resolved {
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
}

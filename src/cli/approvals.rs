//! `approvals list|watch|allow|deny` and `status`: clients of a mount's
//! control socket, found through the mount registry. Human-readable by
//! default, `--json` for scripts.
//!
//! `list`, `allow` and `deny` may leave the mountpoint out (a `run`'s is a
//! fresh temporary directory): `list` then shows the pending requests of
//! every live mount of this user in this mount namespace, and `allow ID` /
//! `deny ID` act on the one such mount where request ID is pending; where
//! several are, nothing is decided (exit 2) and the exact commands are
//! printed. Who may decide is the daemon's rule either way.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

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
    /// List the requests waiting now (without MOUNTPOINT: those of every
    /// live mount of this user, each mount named).
    #[command(after_help = super::help::APPROVALS_LIST)]
    List {
        /// Print JSON (an array of requests; without MOUNTPOINT each has
        /// its `mountpoint`).
        #[arg(long)]
        json: bool,
        /// The mount's directory (default: every live mount of this user).
        mountpoint: Option<PathBuf>,
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
    #[command(
        after_help = super::help::APPROVALS_ALLOW,
        override_usage = "zonemount approvals allow [--scope once|path|zone] [MOUNTPOINT] ID"
    )]
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
        /// The mount's directory, then the request's id as `approvals
        /// list` shows it. Without MOUNTPOINT: the one live mount of this
        /// user where request ID is pending.
        #[arg(value_name = "[MOUNTPOINT] ID", num_args = 1..=2, required = true)]
        target: Vec<OsString>,
    },
    /// Deny a request (EACCES; the same class on the same path is denied
    /// at once for the rest of the mount).
    #[command(
        after_help = super::help::APPROVALS_DENY,
        override_usage = "zonemount approvals deny [MOUNTPOINT] ID"
    )]
    Deny {
        /// The mount's directory, then the request's id as `approvals
        /// list` shows it. Without MOUNTPOINT: the one live mount of this
        /// user where request ID is pending.
        #[arg(value_name = "[MOUNTPOINT] ID", num_args = 1..=2, required = true)]
        target: Vec<OsString>,
    },
}

/// `[MOUNTPOINT] ID` as given to `allow` or `deny`.
fn split_target(target: &[OsString]) -> Result<(Option<PathBuf>, u64), Failure> {
    let (mp, id) = match target {
        [id] => (None, id),
        [mp, id] => (Some(PathBuf::from(mp)), id),
        _ => {
            return Err(Failure::new(
                2,
                "expected [MOUNTPOINT] ID, e.g. zonemount approvals allow /tmp/task-42 7",
            ));
        }
    };
    let shown = id.to_string_lossy();
    let id = shown.parse::<u64>().map_err(|_| {
        Failure::new(
            2,
            format!(
                "invalid request id '{}': expected [MOUNTPOINT] ID, ID a number as `zonemount approvals list` shows it",
                crate::text::message(&shown)
            ),
        )
    })?;
    Ok((mp, id))
}

/// A live mount of this user and what waits on it.
struct Pending {
    mountpoint: PathBuf,
    requests: Vec<RequestInfo>,
}

/// The pending requests of every live mount of this user in this mount
/// namespace (by mountpoint), and a line for each live one that could not
/// be asked.
fn every_live_mount() -> Result<(Vec<Pending>, Vec<String>), Failure> {
    mount::check_runtime_dir().map_err(|e| Failure::new(1, e.to_string()))?;
    let mut records = mount::records();
    records.sort_by(|a, b| a.mountpoint.cmp(&b.mountpoint));
    let mut found = Vec::new();
    let mut unreachable = Vec::new();
    for rec in records {
        if !mount::process_alive(rec.pid) {
            continue;
        }
        // A stopped or stuck daemon must not hold up the others.
        let wait = super::list::STATFS_WAIT;
        let mut silent = false;
        let asked = connect(&rec.mountpoint).and_then(|c| {
            c.answer_within(wait).list().map_err(|e| match e {
                ClientError::Io(_, ref io)
                    if matches!(
                        io.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    silent = true;
                    Failure::new(
                        1,
                        format!(
                            "{}: its daemon (pid {}) did not answer within {} s",
                            shown_mount(&rec.mountpoint),
                            rec.pid,
                            wait.as_secs()
                        ),
                    )
                }
                e => failure(e),
            })
        });
        match asked {
            Ok(requests) => found.push(Pending {
                mountpoint: rec.mountpoint,
                requests,
            }),
            // Refused, gone or cut off by a daemon on its way out (its
            // record and socket go as it ends): no mount to speak of.
            Err(_) if !silent && exiting(&rec) => {}
            Err(e) => unreachable.push(e.msg),
        }
    }
    Ok((found, unreachable))
}

/// How long a scan gives a daemon whose socket failed it to show that it
/// is exiting.
const EXIT_GRACE: Duration = Duration::from_secs(1);

/// Whether the daemon of `rec` is ending, or gone: its main thread has
/// exited (a killed daemon's threads and socket go a moment later), or
/// its record is gone or another's (a daemon removes it first on its way
/// out). Waits up to [`EXIT_GRACE`] for either.
fn exiting(rec: &mount::Record) -> bool {
    let deadline = Instant::now() + EXIT_GRACE;
    loop {
        let record_gone = mount::find_record(&rec.mountpoint)
            .is_none_or(|r| r.pid != rec.pid || r.started != rec.started);
        if record_gone || !mount::process_alive(rec.pid) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A mountpoint as a person reads it: escaped, shell-quoted when that
/// gives the same text back.
fn shown_mount(p: &Path) -> String {
    let escaped = crate::text::path(p);
    if escaped != p.to_string_lossy() {
        return escaped;
    }
    shlex::try_quote(&escaped).map_or(escaped.clone(), |q| q.into_owned())
}

/// The mount `decide ID` means when no MOUNTPOINT is given: the one where
/// request `id` is pending. None: a failure naming what is pending where
/// (exit 1), or, where several are, the exact commands (exit 2).
fn pick<'a>(mounts: &'a [Pending], id: u64, verb: &str) -> Result<&'a Path, Failure> {
    let with: Vec<&Pending> = mounts
        .iter()
        .filter(|m| m.requests.iter().any(|r| r.id == id))
        .collect();
    match with.as_slice() {
        [one] => Ok(&one.mountpoint),
        [] => {
            let waiting: Vec<String> = mounts
                .iter()
                .filter(|m| !m.requests.is_empty())
                .map(|m| {
                    let ids: Vec<String> = m.requests.iter().map(|r| r.id.to_string()).collect();
                    format!("{}: {}", shown_mount(&m.mountpoint), ids.join(", "))
                })
                .collect();
            let now = match (mounts.len(), waiting.is_empty()) {
                (0, _) => "there is no live zonemount mount of this user here".to_owned(),
                (_, true) => "nothing is pending on any live mount of this user".to_owned(),
                (_, false) => format!("pending now: {}", waiting.join("; ")),
            };
            Err(Failure::new(
                1,
                format!(
                    "no live mount has a pending request {id} (decided, timed out or withdrawn?); {now}"
                ),
            ))
        }
        several => {
            let cmds: Vec<String> = several
                .iter()
                .map(|m| {
                    format!(
                        "  zonemount approvals {verb} {} {id}",
                        shown_mount(&m.mountpoint)
                    )
                })
                .collect();
            Err(Failure::new(
                2,
                format!(
                    "request {id} is pending on {} mounts; nothing was decided: name the mount, one of\n{}",
                    several.len(),
                    cmds.join("\n")
                ),
            ))
        }
    }
}

/// Decide `id` on `mountpoint`, or on the one live mount where it is
/// pending; says what was decided (and where, when the mount was implied).
fn decide(mountpoint: Option<&Path>, id: u64, d: Decision, verb: &str) -> Result<String, Failure> {
    let said = match d {
        Decision::Allow(scope) => format!("allowed request {id} (scope {scope})"),
        Decision::Deny => format!("denied request {id}"),
    };
    if let Some(mp) = mountpoint {
        connect(mp)?.decide(id, d).map_err(failure)?;
        return Ok(format!("{said}\n"));
    }
    let (mounts, unreachable) = every_live_mount()?;
    for line in &unreachable {
        eprintln!("zonemount: {line}");
    }
    let mp = pick(&mounts, id, verb)?;
    connect(mp)?.decide(id, d).map_err(failure)?;
    Ok(format!("{said} on {}\n", shown_mount(mp)))
}

/// `approvals list` without a mountpoint.
fn list_every(json: bool) -> Result<(), Failure> {
    let (mounts, unreachable) = every_live_mount()?;
    for line in &unreachable {
        eprintln!("zonemount: {line}");
    }
    let waiting: Vec<&Pending> = mounts.iter().filter(|m| !m.requests.is_empty()).collect();
    if json {
        let mut all = Vec::new();
        for m in &waiting {
            for r in &m.requests {
                let mut v = serde_json::to_value(r).map_err(|e| Failure::new(1, e.to_string()))?;
                if let Value::Object(o) = &mut v {
                    o.insert(
                        "mountpoint".into(),
                        serde_json::to_value(&m.mountpoint).unwrap_or(Value::Null),
                    );
                }
                all.push(v);
            }
        }
        return print(&format!("{}\n", pretty(&all)));
    }
    print(&render_every(&mounts, SystemTime::now()))
}

/// `approvals list` of every live mount, for people: each mount with
/// requests, named, then its table.
fn render_every(mounts: &[Pending], now: SystemTime) -> String {
    let waiting: Vec<&Pending> = mounts.iter().filter(|m| !m.requests.is_empty()).collect();
    if waiting.is_empty() {
        return match mounts.len() {
            0 => "no pending requests (no live zonemount mount of this user here)\n".into(),
            1 => "no pending requests (1 live mount)\n".into(),
            n => format!("no pending requests ({n} live mounts)\n"),
        };
    }
    let tables: Vec<String> = waiting
        .iter()
        .map(|m| {
            format!(
                "{}:\n{}",
                crate::text::path(&m.mountpoint),
                render_list(&m.requests, now)
            )
        })
        .collect();
    tables.join("\n")
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
            let Some(mountpoint) = mountpoint else {
                return list_every(*json);
            };
            let list = connect(mountpoint)?.list().map_err(failure)?;
            if *json {
                return print(&format!("{}\n", pretty(&list)));
            }
            print(&render_list(&list, SystemTime::now()))
        }
        ApprovalsCmd::Watch { json, mountpoint } => watch(mountpoint, *json),
        ApprovalsCmd::Allow { scope, target } => {
            let (mp, id) = split_target(target)?;
            let verb = match scope {
                Scope::Once => "allow".to_owned(),
                _ => format!("allow --scope {scope}"),
            };
            print(&decide(mp.as_deref(), id, Decision::Allow(*scope), &verb)?)
        }
        ApprovalsCmd::Deny { target } => {
            let (mp, id) = split_target(target)?;
            print(&decide(mp.as_deref(), id, Decision::Deny, "deny")?)
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

    fn on(mp: &str, ids: &[u64]) -> Pending {
        Pending {
            mountpoint: PathBuf::from(mp),
            requests: ids.iter().map(|i| req(*i)).collect(),
        }
    }

    #[test]
    fn without_a_mountpoint_the_one_mount_where_the_request_waits_is_meant() {
        let mounts = [on("/tmp/a", &[]), on("/tmp/b", &[1, 2]), on("/tmp/c", &[2])];
        assert_eq!(pick(&mounts, 1, "allow").ok(), Some(Path::new("/tmp/b")));
        // Pending on two mounts: nothing decided, both commands named.
        let e = pick(&mounts, 2, "allow --scope path").err().unwrap();
        assert_eq!(e.code, 2);
        assert_eq!(
            e.msg,
            "request 2 is pending on 2 mounts; nothing was decided: name the mount, one of\n  \
             zonemount approvals allow --scope path /tmp/b 2\n  zonemount approvals allow --scope path /tmp/c 2"
        );
        // Pending nowhere: what is pending where.
        let e = pick(&mounts, 3, "deny").err().unwrap();
        assert_eq!(e.code, 1);
        assert!(
            e.msg.ends_with("pending now: /tmp/b: 1, 2; /tmp/c: 2"),
            "{}",
            e.msg
        );
        let e = pick(&[], 3, "deny").err().unwrap();
        assert!(
            e.msg
                .ends_with("there is no live zonemount mount of this user here"),
            "{}",
            e.msg
        );
    }

    #[test]
    fn a_mountpoint_in_a_command_is_quoted_and_escaped() {
        assert_eq!(shown_mount(Path::new("/tmp/a b")), "'/tmp/a b'");
        assert_eq!(shown_mount(Path::new("/tmp/a\x1b[2Kb")), "/tmp/a\\x1b[2Kb");
    }

    #[test]
    fn the_target_is_an_id_after_an_optional_mountpoint() {
        let t = |a: &[&str]| split_target(&a.iter().map(OsString::from).collect::<Vec<_>>());
        assert_eq!(t(&["7"]).ok(), Some((None, 7)));
        assert_eq!(
            t(&["/tmp/m", "7"]).ok(),
            Some((Some(PathBuf::from("/tmp/m")), 7))
        );
        let e = t(&["/tmp/m"]).err().unwrap();
        assert_eq!(
            (e.code, e.msg.starts_with("invalid request id '/tmp/m'")),
            (2, true)
        );
    }

    #[test]
    fn every_mounts_list_names_each_mount_with_requests() {
        let now = humantime::parse_rfc3339("2025-01-01T00:00:12Z").unwrap_or(SystemTime::now());
        let s = render_every(&[on("/tmp/a", &[]), on("/tmp/b", &[4])], now);
        assert!(s.starts_with("/tmp/b:\nID  AGE  ZONE"), "{s}");
        assert!(!s.contains("/tmp/a"), "{s}");
        assert_eq!(
            render_every(&[on("/tmp/a", &[])], now),
            "no pending requests (1 live mount)\n"
        );
        assert_eq!(
            render_every(&[], now),
            "no pending requests (no live zonemount mount of this user here)\n"
        );
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

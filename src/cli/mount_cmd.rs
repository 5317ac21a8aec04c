//! `mount`, `unmount`: detaching with a readiness line, serving in the
//! foreground until unmounted or signalled, unmounting with a wait.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use super::{Failure, MountArgs, zone_table};
use crate::approval::{self, Approvals, on_ask, prompt};
use crate::audit::{self, Audit};
use crate::config::{self, ZoneTable};
use crate::control;
use crate::mount::{self, MountSpec, Record, Unmounted};

/// Ask the daemon to deny what is pending; how many it denied.
pub(crate) fn deny_pending(path: &Path) -> usize {
    let Some(sock) = mount::find_record(&mount::absolute(path)).and_then(|r| r.control) else {
        return 0;
    };
    let Ok(mut c) = control::Client::connect(&sock) else {
        return 0;
    };
    c.call(serde_json::json!({"v": control::VERSION, "op": "deny_pending"}))
        .ok()
        .and_then(|v| v["denied"].as_u64())
        .unwrap_or(0) as usize
}

/// Unmount, denying pending requests first: a syscall waiting on one
/// keeps the mount busy. A request that arrives in between is denied on a
/// retry.
fn unmount_denying(path: &Path, lazy: bool) -> Result<Unmounted, mount::UnmountError> {
    let mut denied = deny_pending(path);
    let mut tries = 0;
    loop {
        match mount::unmount(path, lazy) {
            Err(mount::UnmountError::Busy(_)) if denied > 0 && tries < 20 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(50));
                denied += deny_pending(path);
            }
            r => return r,
        }
    }
}

/// How many requests a live mount has pending (None: unknown, e.g. no
/// control socket or not ours to ask).
pub(crate) fn pending_count(path: &Path) -> Option<u64> {
    let sock = mount::find_record(&mount::absolute(path)).and_then(|r| r.control)?;
    let mut c = control::Client::connect(&sock).ok()?;
    let v = c
        .call(serde_json::json!({"v": control::VERSION, "op": "list"}))
        .ok()?;
    v["requests"].as_array().map(|a| a.len() as u64)
}

pub(crate) fn unmount(path: &Path, lazy: bool) -> Result<(), Failure> {
    match unmount_denying(path, lazy) {
        Ok(Unmounted::Done) => Ok(()),
        Ok(Unmounted::NotMounted) => {
            eprintln!(
                "zonemount: note: {} is not mounted; nothing to do",
                path.display()
            );
            Ok(())
        }
        Ok(Unmounted::DaemonLingers(pid)) => Err(Failure::new(
            1,
            format!(
                "{} is unmounted but its daemon (pid {pid}) has not exited after 10 s",
                path.display()
            ),
        )),
        Err(e) => Err(Failure::new(1, e.to_string())),
    }
}

/// Absolute form of a path argument, for the re-executed daemon.
fn abs(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// `mount` without `--foreground`: start the daemon with this command's
/// own arguments (it starts in the same working directory, so relative
/// paths mean the same) and wait until the mount is live.
pub(crate) fn detach(_a: &MountArgs) -> Result<(), Failure> {
    let args: Vec<OsString> = std::env::args_os()
        .skip(1)
        .skip_while(|a| a != "mount")
        .skip(1)
        .collect();
    spawn_daemon(args)
}

/// Start `zonemount mount --foreground --notify-ready ARGS...` detached and
/// wait for its readiness line: Ok once the mount is live.
pub(crate) fn spawn_daemon(mount_args: Vec<OsString>) -> Result<(), Failure> {
    // The daemon checks this too; checking first gives the real cause even
    // where a missing /dev would already stop the daemon from starting.
    if !Path::new("/dev/fuse").exists() {
        return Err(mount::MountError::NoFuse.into());
    }
    let exe = std::env::current_exe()
        .map_err(|e| Failure::new(1, format!("cannot find the zonemount binary: {e}")))?;
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["mount", "--foreground", "--notify-ready"])
        .args(mount_args);
    let log = match std::env::var_os("ZONEMOUNT_LOG_FILE") {
        Some(p) => std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&p)
            .map(Stdio::from)
            .map_err(|e| Failure::new(1, format!("cannot open ZONEMOUNT_LOG_FILE: {e}")))?,
        None => Stdio::null(),
    };
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(log);
    let mut child = cmd
        .spawn()
        .map_err(|e| Failure::new(1, format!("cannot start the mount daemon: {e}")))?;
    let Some(out) = child.stdout.take() else {
        return Err(Failure::new(1, "the mount daemon has no status pipe"));
    };
    let mut line = String::new();
    let _ = BufReader::new(out).read_line(&mut line);
    let line = line.trim_end();
    if line == "READY" {
        return Ok(());
    }
    if let Some(rest) = line.strip_prefix("ERROR ") {
        let (code, msg) = rest.split_once(' ').unwrap_or(("1", rest));
        let _ = child.wait();
        return Err(Failure::new(code.parse().unwrap_or(1), msg));
    }
    let status = child.wait();
    Err(Failure::new(
        1,
        format!(
            "the mount daemon exited before the mount was live ({status:?}); set ZONEMOUNT_LOG_FILE=PATH to see its log"
        ),
    ))
}

/// Mount and serve in this process until unmounted or signalled.
pub(crate) fn foreground(a: &MountArgs) -> Result<(), Failure> {
    if a.notify_ready {
        // Leave the caller's session and terminal behind.
        let _ = rustix::process::setsid();
    }
    match serve(a) {
        Ok(()) => Ok(()),
        Err(f) if a.notify_ready => {
            let mut out = std::io::stdout();
            let _ = writeln!(out, "ERROR {} {}", f.code, f.msg);
            let _ = out.flush();
            Err(f)
        }
        Err(f) => Err(f),
    }
}

/// The approval side of a mount: broker, ledger, control socket.
struct Approving {
    broker: Approvals,
    audit: Option<Arc<Audit>>,
    control_path: PathBuf,
    listener: std::os::unix::net::UnixListener,
}

fn approving(a: &MountArgs, mountpoint: &Path) -> Result<Approving, Failure> {
    if !(a.approval_timeout.is_finite() && a.approval_timeout > 0.0) {
        return Err(Failure::new(
            2,
            "--approval-timeout must be a number of seconds > 0",
        ));
    }
    let on_ask = match &a.on_ask {
        None => None,
        Some(cmd) => Some(on_ask::parse(cmd).ok_or_else(|| {
            Failure::new(
                2,
                format!("--on-ask {cmd:?}: not a command (empty, or unbalanced quotes)"),
            )
        })?),
    };
    let (timeout, capped) =
        approval::cap_timeout_for_kernel(Duration::from_secs_f64(a.approval_timeout));
    if capped {
        tracing::warn!(
            "--approval-timeout capped to {} s: the kernel aborts FUSE requests that wait longer (fs.fuse.default_request_timeout / max_request_timeout)",
            timeout.as_secs()
        );
    }
    let audit = match &a.audit_log {
        Some(p) => Some(Arc::new(
            Audit::open(&abs(p), mountpoint).map_err(|e| Failure::new(1, e.to_string()))?,
        )),
        None => None,
    };
    let control_path = a
        .control
        .as_deref()
        .map(abs)
        .unwrap_or_else(|| mount::default_control_path(mountpoint));
    // Bound now, while this is the only thread: see control::bind.
    let listener = control::bind(&control_path).map_err(|e| Failure::new(1, e.to_string()))?;
    let broker = Approvals::new(
        approval::Settings {
            mountpoint: mountpoint.to_path_buf(),
            timeout,
            no_approvals: a.no_approvals,
        },
        audit.clone(),
    );
    if let Some(argv) = on_ask {
        broker.subscribe(on_ask::listener(argv, mountpoint.to_path_buf()));
    }
    Ok(Approving {
        broker,
        audit,
        control_path,
        listener,
    })
}

/// The core's last refusals, explained, for `status`.
/// The parts of `status` the filesystem core knows: how file data moves,
/// the cache TTLs, and the last refusals explained.
fn live_status(core: &crate::fs::core::Core) -> serde_json::Value {
    let io = core.io_mode();
    serde_json::json!({
        "io": {"mode": io.name(), "detail": io.describe()},
        "cache_ttl_secs": {"rw": core.ttls().0.as_secs_f64(), "ro": core.ttls().1.as_secs_f64()},
        "recent_refusals": recent_refusals_json(core),
    })
}

fn recent_refusals_json(core: &crate::fs::core::Core) -> serde_json::Value {
    core.recent_refusals()
        .into_iter()
        .map(|r| {
            serde_json::json!({
                "time": humantime::format_rfc3339_seconds(r.at).to_string(),
                "path": r.path,
                "errno": r.errno,
                "reason": r.reason,
                "message": r.message,
            })
        })
        .collect()
}

/// The fixed part of `status`.
fn status_base(
    a: &MountArgs,
    table: &ZoneTable,
    rec: &Record,
    ap: &Approving,
) -> serde_json::Value {
    serde_json::json!({
        "mountpoint": rec.mountpoint,
        "pid": rec.pid,
        "started": rec.started,
        "config": rec.config,
        "workers": rec.workers,
        "control": ap.control_path,
        "audit_log": ap.audit.as_ref().map(|x| x.path().to_path_buf()),
        "approval_timeout_secs": ap.broker.settings().timeout.as_secs(),
        "no_approvals": a.no_approvals,
        "owner_uid": rustix::process::geteuid().as_raw(),
        "sandbox_mode": table.mode.to_string(),
        "zones": table.zones,
    })
}

/// SIGTERM, SIGINT, SIGHUP: deny what is pending, then unmount (the
/// session then ends and `serve` returns).
fn unmount_on_signals(mountpoint: &Path, broker: &Approvals) -> Result<(), Failure> {
    let signal_mp = mountpoint.to_path_buf();
    let signal_broker = broker.clone();
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ])
    .map_err(|e| Failure::new(1, format!("cannot install signal handlers: {e}")))?;
    std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            tracing::info!(sig, "signal: unmounting");
            // First answer every waiting syscall: a pending one keeps the
            // mount busy, and nobody is left to decide it.
            signal_broker.shutdown("the daemon got a signal and is unmounting");
            if let Err(e) = mount::detach(&signal_mp, false) {
                tracing::warn!("unmount failed ({e}); detaching lazily");
                if let Err(e) = mount::detach(&signal_mp, true) {
                    tracing::error!("lazy unmount failed too: {e}");
                }
            }
        }
    });
    Ok(())
}
/// ro zones change only from the host side, and less often: their names
/// and attributes are cached this many times longer than rw zones'.
const RO_TTL_FACTOR: f64 = 6.0;

fn serve(a: &MountArgs) -> Result<(), Failure> {
    let table = zone_table(&a.config)?;
    config::prepare_backing(&table)?;
    let mountpoint = mount::preflight(&a.mountpoint, &table)?;
    if !(a.cache_ttl.is_finite() && a.cache_ttl >= 0.0) {
        return Err(Failure::new(
            2,
            "--cache-ttl must be a number of seconds >= 0",
        ));
    }
    let ap = approving(a, &mountpoint)?;
    let spec = MountSpec {
        mountpoint: mountpoint.clone(),
        ttl: Duration::from_secs_f64(a.cache_ttl),
        ttl_ro: Duration::from_secs_f64(a.cache_ttl * RO_TTL_FACTOR),
        threads: a.threads.clamp(1, 64),
        passthrough: !a.no_passthrough,
        config: a.config.config.clone(),
        workers: a.config.worker.clone(),
        allow_other: a.allow_other || !a.allow_uid.is_empty(),
        allow_uids: a.allow_uid.clone(),
    };
    let (session, core) = match mount::start(
        &mountpoint,
        &table,
        &spec,
        Some(Arc::new(ap.broker.clone())),
    ) {
        Ok(s) => s,
        Err(e) => {
            let _ = std::fs::remove_file(&ap.control_path);
            return Err(e.into());
        }
    };
    let record = Record {
        mountpoint: mountpoint.clone(),
        pid: std::process::id(),
        config: spec.config.as_deref().map(abs),
        workers: spec.workers.iter().map(|w| abs(w)).collect(),
        started: mount::now_secs(),
        zones: table.zones.iter().map(|z| z.name.clone()).collect(),
        control: Some(ap.control_path.clone()),
        cwd: std::env::current_dir().ok(),
        allow_sensitive_roots: a.config.allow_sensitive_roots,
    };
    if let Err(e) = mount::write_record(&record) {
        tracing::warn!("cannot write the mount record: {e}");
    }
    if let Some(audit) = &ap.audit {
        audit.log(audit::Kind::Mount, &audit::Record::default());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("zm-control")
        .enable_all()
        .build()
        .map_err(|e| Failure::new(1, format!("cannot start the control runtime: {e}")))?;
    let server = control::Server::new(
        ap.broker.clone(),
        rustix::process::geteuid().as_raw(),
        status_base(a, &table, &record, &ap),
        Some(Box::new(move || live_status(&core))),
    );
    let listener = ap
        .listener
        .try_clone()
        .map_err(|e| Failure::new(1, format!("control socket: {e}")))?;
    runtime.spawn(control::serve(listener, server));
    unmount_on_signals(&mountpoint, &ap.broker)?;
    let prompt = if a.prompt {
        if a.foreground && !a.notify_ready && prompt::stdin_is_tty() {
            Some(prompt::start(&ap.broker))
        } else {
            tracing::warn!("--prompt needs --foreground and a terminal on stdin; not prompting");
            None
        }
    } else {
        None
    };
    if a.notify_ready {
        let mut out = std::io::stdout();
        let _ = writeln!(out, "READY");
        let _ = out.flush();
        if let Ok(null) = std::fs::File::open("/dev/null") {
            let _ = rustix::stdio::dup2_stdout(&null);
        }
    }
    let _ = std::env::set_current_dir("/");
    let result = session.run();
    ap.broker.shutdown("the mount is gone");
    drop(prompt);
    if let Some(audit) = &ap.audit {
        audit.log(audit::Kind::Unmount, &audit::Record::default());
    }
    mount::remove_record(&mountpoint);
    let _ = std::fs::remove_file(&ap.control_path);
    runtime.shutdown_timeout(Duration::from_secs(1));
    result.map_err(|e| Failure::new(1, format!("the FUSE session ended with an error: {e}")))
}

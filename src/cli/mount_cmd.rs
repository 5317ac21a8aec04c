//! `mount`, `unmount`: detaching with a readiness line, serving in the
//! foreground until unmounted or signalled, unmounting with a wait. The
//! mount itself is built by `mount::session` and served by
//! `mount::daemon`; this file checks the arguments and talks to the user.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use super::{Failure, MountArgs, zone_table_noted};
use crate::approval::{on_ask, prompt};
use crate::config;
use crate::control;
use crate::mount::daemon::{Control, Daemon, Origin};
use crate::mount::probe;
use crate::mount::session::{self, SessionError, Settings};
use crate::mount::{self, Unmounted};

/// A client of the daemon serving `path`, when there is one to reach.
fn client_of(path: &Path) -> Option<control::Client> {
    let sock = mount::find_record(&mount::absolute(path)).and_then(|r| r.control)?;
    control::Client::connect(&sock).ok()
}

/// Ask the daemon to deny what is pending; how many it denied.
pub(crate) fn deny_pending(path: &Path) -> usize {
    client_of(path)
        .and_then(|mut c| c.deny_pending().ok())
        .unwrap_or(0) as usize
}

/// Tell the daemon serving `path` what keeps `run`'s worker from deciding
/// (the control op `worker`).
pub(crate) fn register_worker(
    path: &Path,
    claim: crate::approval::side::Claim,
) -> Result<(), String> {
    let mut c = client_of(path).ok_or("no control socket to reach")?;
    c.call(control::protocol::Request::Worker(claim))
        .map(drop)
        .map_err(|e| e.to_string())
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
    let requests = client_of(path)?
        .answer_within(super::list::STATFS_WAIT)
        .list()
        .ok()?;
    Some(requests.len() as u64)
}

/// `unmount MOUNTPOINT`: 0 unmounted, or nothing mounted on an existing
/// path (a note); 2 for a path that does not exist (a typo: nothing can be
/// mounted there) or a mount that is not ours; 1 when the unmount fails.
pub(crate) fn unmount(path: &Path, lazy: bool) -> Result<(), Failure> {
    match unmount_denying(path, lazy) {
        Ok(Unmounted::Done) => Ok(()),
        Ok(Unmounted::NotMounted) if missing(path) => Err(Failure::new(
            2,
            format!(
                "{} does not exist, so nothing is mounted there: not a mountpoint",
                path.display()
            ),
        )),
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
                "{} is unmounted but its daemon (pid {pid}) has not exited after {} s{}{}",
                path.display(),
                mount::DAEMON_EXIT_WAIT.as_secs(),
                mount::lingers_because(path),
                mount::still_ending(pid)
            ),
        )),
        Err(e @ mount::UnmountError::NotOurs(..)) => Err(Failure::new(2, e.to_string())),
        Err(e) => Err(Failure::new(1, e.to_string())),
    }
}

/// Nothing at all at `path` (a dead FUSE mount's ENOTCONN is something).
fn missing(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
}

/// Absolute form of a path argument, for the re-executed daemon.
fn abs(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// `mount` without `--foreground`: start the daemon with this command's
/// own arguments (it starts in the same working directory, so relative
/// paths mean the same) and wait until the mount is live.
pub(crate) fn detach(_a: &MountArgs) -> Result<(), Failure> {
    let args: Vec<OsString> = super::argv()
        .into_iter()
        .skip(1)
        .skip_while(|a| a != "mount")
        .skip(1)
        .collect();
    spawn_daemon(args)
}

/// Start `zonemount mount --foreground --notify-ready ARGS...` detached and
/// wait for its readiness line: Ok once the mount is live.
pub(crate) fn spawn_daemon(mount_args: Vec<OsString>) -> Result<(), Failure> {
    spawn_daemon_with(mount_args, |_| {})
}

/// [`spawn_daemon`], letting `prepare` add to the daemon's command first
/// (`run` makes it announce itself to its watcher).
pub(crate) fn spawn_daemon_with(
    mount_args: Vec<OsString>,
    prepare: impl FnOnce(&mut std::process::Command),
) -> Result<(), Failure> {
    // The daemon checks this too; checking first gives the real cause even
    // where a missing /dev would already stop the daemon from starting.
    // (--allow-other's own check waits for the daemon, which has the
    // parsed arguments.)
    mount::host_allows(false)?;
    let exe = std::env::current_exe()
        .map_err(|e| Failure::new(1, format!("cannot find the zonemount binary: {e}")))?;
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["mount", "--foreground", "--notify-ready"])
        .args(mount_args);
    let log = match std::env::var_os("ZONEMOUNT_LOG_FILE") {
        // Made 0600 when missing; an existing one must be ours alone
        // (see `logfile`).
        Some(p) => crate::logfile::open_append(Path::new(&p), 0o600)
            .map(Stdio::from)
            .map_err(|e| {
                Failure::new(
                    1,
                    format!(
                        "cannot open ZONEMOUNT_LOG_FILE {}: {e}",
                        Path::new(&p).display()
                    ),
                )
            })?,
        None => Stdio::null(),
    };
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(log);
    prepare(&mut cmd);
    let mut child = cmd
        .spawn()
        .map_err(|e| Failure::new(1, format!("cannot start the mount daemon: {e}")))?;
    let Some(out) = child.stdout.take() else {
        return Err(Failure::new(1, "the mount daemon has no status pipe"));
    };
    // Notes (what the mount used) come first, then READY or ERROR; the
    // daemon writes a handful of lines at most before either.
    let mut out = BufReader::new(out);
    loop {
        let mut line = String::new();
        match out.read_line(&mut line) {
            Ok(n) if n > 0 => {}
            _ => break,
        }
        let line = line.trim_end();
        if line == "READY" {
            return Ok(());
        }
        if let Some(note) = line.strip_prefix("NOTE ") {
            eprintln!("zonemount: {note}");
            continue;
        }
        if let Some(rest) = line.strip_prefix("ERROR ") {
            let (code, msg) = rest.split_once(' ').unwrap_or(("1", rest));
            let _ = child.wait();
            return Err(Failure::new(code.parse().unwrap_or(1), msg));
        }
        break;
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

impl From<SessionError> for Failure {
    fn from(e: SessionError) -> Self {
        match e {
            SessionError::Mount(e) => e.into(),
            SessionError::Audit(e) => Failure::new(1, e.to_string()),
        }
    }
}

/// `secs` as a duration, if it is a number of seconds >= 0 that a
/// duration can hold (not NaN, not infinite).
fn seconds(secs: f64) -> Option<Duration> {
    Duration::try_from_secs_f64(secs).ok()
}

/// Whether the mount asks for FUSE over io_uring: `--io-uring`, or
/// `ZONEMOUNT_IO_URING=1` without `--no-io-uring` (off by default: on
/// the machines measured, /dev/fuse was faster).
fn asks_uring(a: &MountArgs) -> bool {
    a.io_uring || (!a.no_io_uring && crate::mount::probe::uring_from_env())
}

/// FUSE over io_uring asked for: switch the kernel's on (root), or say
/// why it can't be had.
fn want_uring(a: &MountArgs) -> Result<(), Failure> {
    if !asks_uring(a) {
        return Ok(());
    }
    match probe::uring() {
        probe::Uring::Enabled => Ok(()),
        probe::Uring::Absent => Err(Failure::new(
            2,
            "--io-uring: this kernel has no FUSE over io_uring (it needs Linux 6.14 or later built with CONFIG_FUSE_IO_URING)",
        )),
        probe::Uring::Disabled => probe::enable_uring().map_err(|e| {
            Failure::new(
                2,
                format!(
                    "--io-uring: cannot turn on {} ({e}); root can, or run without --io-uring",
                    probe::ENABLE_URING
                ),
            )
        }),
    }
}

/// The mount's settings from the arguments, checked.
fn settings(a: &MountArgs) -> Result<Settings, Failure> {
    want_uring(a)?;
    let ttl = seconds(a.cache_ttl)
        .ok_or_else(|| Failure::new(2, "--cache-ttl must be a number of seconds >= 0"))?;
    let busy_poll = Some(Duration::from_micros(a.busy_poll))
        .filter(|w| *w <= crate::fuse::BUSY_POLL_MAX)
        .ok_or_else(|| {
            Failure::new(
                2,
                format!(
                    "--busy-poll must be a number of microseconds from 0 to {}",
                    crate::fuse::BUSY_POLL_MAX.as_micros()
                ),
            )
        })?;
    let approval_timeout = seconds(a.approval_timeout)
        .filter(|t| !t.is_zero())
        .ok_or_else(|| Failure::new(2, "--approval-timeout must be a number of seconds > 0"))?;
    Ok(Settings {
        ttl,
        threads: a.threads,
        passthrough: !a.no_passthrough,
        writeback_cache: a.writeback_cache,
        kernel_opens: a.kernel_opens,
        io_uring: asks_uring(a),
        busy_poll,
        approval_timeout,
        no_approvals: a.no_approvals,
        audit_log: a.audit_log.as_deref().map(abs),
        allow_other: a.allow_other || !a.allow_uid.is_empty(),
        allow_uids: a.allow_uid.clone(),
        record: None,
        control: None,
        stage_dir: a.stage_dir.as_deref().map(abs),
        max_checkpoints: a.max_checkpoints.map(usize::from),
        refusal_log: a.refusal_log.as_deref().map(abs),
        refusal_log_root: a.refusal_log_root.clone(),
        run_task: a.run_task,
    })
}

/// `--on-ask CMD` as an argv.
fn on_ask_argv(a: &MountArgs) -> Result<Option<Vec<String>>, Failure> {
    let Some(cmd) = &a.on_ask else {
        return Ok(None);
    };
    on_ask::parse(cmd).map(Some).ok_or_else(|| {
        Failure::new(
            2,
            format!("--on-ask {cmd:?}: not a command (empty, or unbalanced quotes)"),
        )
    })
}

/// The terminal prompt, when `--prompt` can work here.
fn start_prompt(a: &MountArgs, daemon: &Daemon) -> Option<prompt::Guard> {
    if !a.prompt {
        return None;
    }
    if a.foreground && !a.notify_ready && prompt::stdin_is_tty() {
        Some(prompt::start(daemon.broker()))
    } else {
        tracing::warn!("--prompt needs --foreground and a terminal on stdin; not prompting");
        None
    }
}

/// Tell the detaching parent the mount is live, and let go of its pipe.
fn report_ready() {
    let mut out = std::io::stdout();
    let _ = writeln!(out, "READY");
    let _ = out.flush();
    if let Ok(null) = std::fs::File::open("/dev/null") {
        let _ = rustix::stdio::dup2_stdout(&null);
    }
}

/// Tell the user something about the mount (unless `--quiet`): on stderr
/// in the foreground, through the detaching parent otherwise.
fn say(a: &MountArgs, line: &str) {
    if a.quiet {
        return;
    }
    // One line whatever a path or a suffix holds: the parent reads lines.
    let line = line.replace(['\n', '\r'], " ");
    if a.notify_ready {
        let mut out = std::io::stdout();
        let _ = writeln!(out, "NOTE {line}");
        let _ = out.flush();
    } else {
        eprintln!("zonemount: {line}");
    }
}

/// The one line `mount` says on success: which config (or the embedded
/// default) and workers, and each zone's backing dir, marked when this
/// mount created it.
pub(crate) fn used_line(
    mountpoint: &Path,
    table: &config::ZoneTable,
    workers: &[PathBuf],
    zone_args: &[String],
    created: &[String],
) -> String {
    let config = match (&table.source, zone_args.is_empty()) {
        (None, true) => format!(
            "config the embedded default (no --config, no ./{})",
            config::PROJECT_FILE_NAME
        ),
        (None, false) => format!("zones from the {}", super::config_origin(None, zone_args)),
        (Some(p), _) => format!("config {}", super::config_origin(Some(p), zone_args)),
    };
    let mut line = format!("mounted {} with {config}", mountpoint.display());
    if !workers.is_empty() {
        let names: Vec<String> = workers.iter().map(|w| w.display().to_string()).collect();
        line.push_str(&format!(" and worker {}", names.join(" then ")));
    }
    if table.zones.is_empty() {
        line.push_str("; no zones (an empty root)");
        return line;
    }
    let zones: Vec<String> = table
        .zones
        .iter()
        .map(|z| {
            let made = if created.contains(&z.name) {
                " (created)"
            } else {
                ""
            };
            let staged = if z.policy.staged { " staged" } else { "" };
            format!(
                "{} {}{staged} {}{made}",
                z.name,
                z.policy.access,
                z.backing.display()
            )
        })
        .collect();
    line.push_str(&format!("; zones: {}", zones.join(", ")));
    line
}

fn serve(a: &MountArgs) -> Result<(), Failure> {
    let mut settings = settings(a)?;
    // What the machine allows and the mountpoint, before anything
    // (./.sandbox included) is made.
    mount::check_mountpoint(&a.mountpoint, settings.allow_other)?;
    if !a.nonempty {
        mount::check_empty(&a.mountpoint)?;
    }
    let (table, notes) = zone_table_noted(&a.config, &super::cwd()?)?;
    let created = config::prepare_backing(&table)?;
    let mountpoint = mount::preflight(&a.mountpoint, &table, settings.allow_other)?;
    let on_ask = on_ask_argv(a)?;
    let control_path = a
        .control
        .as_deref()
        .map(abs)
        .unwrap_or_else(|| mount::default_control_path(&mountpoint));
    // Bound now, before anything is mounted: see control::bind.
    let control = Control::bind(&control_path).map_err(|e| Failure::new(1, e.to_string()))?;
    // What the mount's watcher removes if this daemon dies.
    settings.record = Some(mount::record_file(&mountpoint));
    settings.control = Some(control_path.clone());
    let session = session::build(&table, &mountpoint, &settings)?;
    if let Some(argv) = on_ask {
        let broker = session.broker();
        let skipped = broker.counters().hooks_skipped.clone();
        broker.subscribe(on_ask::listener(argv, mountpoint.clone(), skipped));
    }
    let origin = Origin {
        // The file loaded, whether given or found (./zonemount.yaml);
        // `None` only for the embedded default.
        config: table.source.clone(),
        workers: a.config.worker.iter().map(|w| abs(w)).collect(),
        zone_args: a.config.zone.clone(),
        allow_sensitive_roots: a.config.allow_sensitive_roots,
        isolate_direct: a.isolate_direct.as_ref().map(|l| {
            l.split(',')
                .filter(|n| !n.is_empty())
                .map(String::from)
                .collect()
        }),
    };
    let daemon = Daemon::start(session, &table, control, origin)
        .map_err(|e| Failure::new(1, e.to_string()))?;
    let prompt = start_prompt(a, &daemon);
    // Said once the mount is live: a refused mount says one line, its error.
    for t in &notes {
        say(a, &super::tightening_note(t));
    }
    say(
        a,
        &used_line(
            &mountpoint,
            &table,
            &a.config.worker,
            &a.config.zone,
            &created,
        ),
    );
    if a.notify_ready {
        report_ready();
    }
    super::sd_notify::notify(&format!("READY=1\nSTATUS=mounted {}", mountpoint.display()));
    let result = daemon.run();
    super::sd_notify::notify("STOPPING=1");
    drop(prompt);
    result.map_err(|e| Failure::new(1, format!("the FUSE session ended with an error: {e}")))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Cmd};

    fn args(extra: &[&str]) -> MountArgs {
        let argv = ["zonemount", "mount"]
            .iter()
            .chain(extra)
            .chain(&["/m"])
            .copied();
        match Cli::try_parse_from(argv) {
            Ok(Cli { cmd: Cmd::Mount(m) }) => *m,
            other => panic!("not a mount command: {other:?}"),
        }
    }

    #[test]
    fn the_used_line_names_config_workers_and_each_backing_dir() {
        use crate::config::{Access, SandboxMode, Zone, ZonePolicy, ZoneTable};
        let zone = |name: &str, access| Zone {
            name: name.into(),
            backing: PathBuf::from("/p/.sandbox").join(name),
            policy: ZonePolicy::plain(access),
        };
        let mut t = ZoneTable {
            mode: SandboxMode::Sandboxed,
            zones: vec![zone("data", Access::Ro), zone("ws", Access::Rw)],
            source: None,
            max_checkpoints: None,
        };
        let mp = Path::new("/m");
        assert_eq!(
            used_line(mp, &t, &[], &[], &["ws".into()]),
            "mounted /m with config the embedded default (no --config, no ./zonemount.yaml); \
             zones: data ro /p/.sandbox/data, ws rw /p/.sandbox/ws (created)"
        );
        t.source = Some("/p/project.yaml".into());
        let workers = [PathBuf::from("a.worker"), PathBuf::from("b.worker")];
        assert_eq!(
            used_line(mp, &t, &workers, &[], &[]),
            "mounted /m with config /p/project.yaml and worker a.worker then b.worker; \
             zones: data ro /p/.sandbox/data, ws rw /p/.sandbox/ws"
        );
        t.zones.clear();
        assert_eq!(
            used_line(mp, &t, &workers[..1], &[], &[]),
            "mounted /m with config /p/project.yaml and worker a.worker; no zones (an empty root)"
        );
        let zones = ["docs=../docs:ro".to_owned()];
        assert_eq!(
            used_line(mp, &t, &[], &zones, &[]),
            "mounted /m with config /p/project.yaml plus --zone docs; no zones (an empty root)"
        );
        t.source = None;
        assert_eq!(
            used_line(mp, &t, &[], &zones, &[]),
            "mounted /m with zones from the command line (--zone docs); no zones (an empty root)"
        );
    }

    #[test]
    fn defaults_are_the_sessions() {
        let s = settings(&args(&[])).unwrap_or_else(|f| panic!("{}", f.msg));
        let d = Settings::default();
        assert_eq!(s.ttl, d.ttl);
        assert_eq!(s.ttl_ro(), Duration::from_secs(180));
        assert_eq!(s.approval_timeout, d.approval_timeout);
        assert_eq!(s.threads, d.threads);
        assert!(s.passthrough && !s.allow_other && !s.no_approvals);
    }

    #[test]
    fn bad_durations_are_usage_errors() {
        for (flag, value) in [
            ("--cache-ttl", "=-1"),
            ("--cache-ttl", "=nan"),
            ("--cache-ttl", "=inf"),
            ("--cache-ttl", "=1e300"),
            ("--approval-timeout", "=0"),
            ("--approval-timeout", "=-5"),
            ("--approval-timeout", "=1e300"),
        ] {
            let a = args(&[&format!("{flag}{value}")]);
            match settings(&a) {
                Err(f) => {
                    assert_eq!(f.code, 2);
                    assert!(f.msg.starts_with(flag), "{}", f.msg);
                }
                Ok(_) => panic!("{flag}{value} accepted"),
            }
        }
        let a = args(&["--cache-ttl=0", "--approval-timeout=0.5", "--allow-uid=7"]);
        let s = settings(&a).unwrap_or_else(|f| panic!("{}", f.msg));
        assert!(s.ttl.is_zero());
        assert_eq!(s.approval_timeout, Duration::from_millis(500));
        assert!(s.allow_other, "--allow-uid implies --allow-other");
    }
}

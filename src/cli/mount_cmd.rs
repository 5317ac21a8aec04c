//! `mount`, `unmount`: detaching with a readiness line, serving in the
//! foreground until unmounted or signalled, unmounting with a wait.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use super::{Failure, MountArgs, zone_table};
use crate::config;
use crate::mount::{self, MountSpec, Record, Unmounted};

pub(crate) fn unmount(path: &Path, lazy: bool) -> Result<(), Failure> {
    match mount::unmount(path, lazy) {
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
    let session = mount::start(&mountpoint, &table, &spec, None)?;
    let record = Record {
        mountpoint: mountpoint.clone(),
        pid: std::process::id(),
        config: spec.config.as_deref().map(abs),
        workers: spec.workers.iter().map(|w| abs(w)).collect(),
        started: mount::now_secs(),
        zones: table.zones.iter().map(|z| z.name.clone()).collect(),
    };
    if let Err(e) = mount::write_record(&record) {
        tracing::warn!("cannot write the mount record: {e}");
    }
    let signal_mp = mountpoint.clone();
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ])
    .map_err(|e| Failure::new(1, format!("cannot install signal handlers: {e}")))?;
    std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            tracing::info!(sig, "signal: unmounting");
            if let Err(e) = mount::detach(&signal_mp, false) {
                tracing::warn!("unmount failed ({e}); detaching lazily");
                if let Err(e) = mount::detach(&signal_mp, true) {
                    tracing::error!("lazy unmount failed too: {e}");
                }
            }
        }
    });
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
    mount::remove_record(&mountpoint);
    result.map_err(|e| Failure::new(1, format!("the FUSE session ended with an error: {e}")))
}

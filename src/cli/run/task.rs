//! The task's mount and CMD's life: [`TaskMount`] owns the temp dir and
//! the mount and tears both down on every path out; `supervise` waits for
//! CMD, a signal or the timeout, and stops CMD's whole process group.

use std::ffi::{OsStr, OsString};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, WaitId, WaitIdOptions};

use super::super::{Failure, mount_cmd};
use super::*;
use crate::mount::watch::{Announce, Plan as WatchPlan, Watcher};
use crate::mount::{self, Unmounted};

/// What the supervising loop hears about.
pub(super) enum Event {
    Signal(i32),
    Exited,
}

/// Catch the signals `run` forwards; each becomes an [`Event`].
pub(super) fn catch_signals(tx: Sender<Event>) -> Result<(), Failure> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP])
        .map_err(|e| Failure::new(1, format!("cannot install signal handlers: {e}")))?;
    std::thread::spawn(move || {
        for sig in signals.forever() {
            if tx.send(Event::Signal(sig)).is_err() {
                break;
            }
        }
    });
    Ok(())
}

/// The temp dir and the mount on it; dropping it tears both down. Its
/// watcher does the same if `run` itself is killed (SIGKILL): it kills
/// CMD's process group, stops the daemon (which unmounts) and removes the
/// dir.
pub(super) struct TaskMount {
    pub(super) dir: PathBuf,
    /// The refusal log (beside the dir, outside the mount): CMD reads it.
    pub(super) refusals: PathBuf,
    pub(super) mounted: bool,
    watcher: Option<Watcher>,
}

impl TaskMount {
    /// A fresh 0755 directory under $TMPDIR (so other uids can reach the
    /// mount inside it), canonical like the daemon's mountpoint.
    pub(super) fn create_dir() -> Result<TaskMount, Failure> {
        let fail = |e: std::io::Error| {
            Failure::new(
                1,
                format!(
                    "cannot create a temporary mountpoint in {}: {e} (set TMPDIR to a writable directory)",
                    std::env::temp_dir().display()
                ),
            )
        };
        let base = std::env::temp_dir().canonicalize().map_err(fail)?;
        let dir = tempfile::Builder::new()
            .prefix("zonemount-run.")
            .tempdir_in(base)
            .map_err(fail)?
            .keep();
        let mut refusals = dir.clone().into_os_string();
        refusals.push(".refusals");
        let mut task = TaskMount {
            dir,
            refusals: PathBuf::from(refusals),
            mounted: false,
            watcher: None,
        };
        std::fs::set_permissions(&task.dir, std::fs::Permissions::from_mode(0o755))
            .map_err(fail)?;
        // Readable by CMD (whoever it runs as), writable only by us.
        // Set on the file made, not by path (O_EXCL: nothing planted
        // under its name is opened).
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&task.refusals)
            .and_then(|f| f.set_permissions(std::fs::Permissions::from_mode(0o644)))
            .map_err(fail)?;
        let plan = WatchPlan {
            dirs: vec![task.dir.clone()],
            files: vec![task.refusals.clone()],
            ..WatchPlan::default()
        };
        task.watcher =
            Some(Watcher::spawn(&plan).map_err(|e| {
                Failure::new(1, format!("run: cannot start the task's watcher: {e}"))
            })?);
        Ok(task)
    }

    pub(super) fn mount(&mut self, args: &[OsString]) -> Result<(), Failure> {
        let mut args = args.to_vec();
        args.push(self.dir.clone().into());
        // Set first: if the daemon mounted but its report got lost, Drop
        // still looks.
        self.mounted = true;
        let watcher = self.watcher.as_ref();
        mount_cmd::spawn_daemon_with(args, |cmd| {
            if let Some(w) = watcher {
                w.announce_on_exec(cmd, Announce::Stop);
            }
        })
    }

    /// CMD (`cmd`, which leads its own process group) announces itself to
    /// the watcher from just before its exec: killed with its whole group
    /// if `run` is, with no instant between its start and the watcher
    /// knowing.
    pub(super) fn watch_group_of(&self, cmd: &mut std::process::Command) {
        if let Some(w) = &self.watcher {
            w.announce_on_exec(cmd, Announce::Group);
        }
    }

    /// Unmount (lazily when still busy after a moment), wait for the
    /// daemon, remove the dir.
    /// Problems are reported on stderr; there is no one left to return
    /// them to.
    pub(super) fn teardown(&mut self) {
        if std::mem::take(&mut self.mounted) {
            let done = match unmount_patiently(&self.dir) {
                Err(mount::UnmountError::Busy(_)) => {
                    eprintln!(
                        "zonemount: run: {} is still in use (a process CMD left behind?); detaching lazily",
                        self.dir.display()
                    );
                    mount::unmount(&self.dir, true)
                }
                other => other,
            };
            match done {
                Ok(Unmounted::Done | Unmounted::NotMounted) => {}
                Ok(Unmounted::DaemonLingers(pid)) => eprintln!(
                    "zonemount: run: {} is unmounted but its daemon (pid {pid}) has not exited after {} s{}{}",
                    self.dir.display(),
                    mount::DAEMON_EXIT_WAIT.as_secs(),
                    mount::lingers_because(&self.dir),
                    mount::still_ending(pid)
                ),
                Err(e) => eprintln!("zonemount: run: {e}"),
            }
        }
        for (what, r) in [
            (&self.dir, std::fs::remove_dir(&self.dir)),
            (&self.refusals, std::fs::remove_file(&self.refusals)),
        ] {
            if let Err(e) = r {
                if e.kind() != std::io::ErrorKind::NotFound {
                    eprintln!("zonemount: run: cannot remove {}: {e}", what.display());
                }
            }
        }
        // Whatever is left was reported above: the watcher has nothing to
        // add.
        if let Some(Err(e)) = self.watcher.take().map(|w| w.disarm()) {
            tracing::warn!("cannot disarm the task's watcher: {e}");
        }
    }
}

impl Drop for TaskMount {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// Deny the mount's pending approval requests before CMD is killed
/// (DESIGN §4: a caller waiting on a request can't die until it is
/// answered).
pub(super) fn deny_pending(mountpoint: &Path) {
    let n = super::mount_cmd::deny_pending(mountpoint);
    if n > 0 {
        tracing::info!(denied = n, "denied pending requests before stopping CMD");
    }
}

/// Signal CMD's process group (its pid is the group's id).
pub(super) fn signal_group(pgid: Pid, sig: i32) {
    let Some(s) = Signal::from_named_raw(sig) else {
        return;
    };
    // No such group yet: `setsid` has not made it (the signal came right
    // after the spawn), so the process itself gets it. Once the group
    // existed, its leader stays in it as a zombie until reaped, so ESRCH
    // never means "gone" while we hold the unreaped leader.
    if let Err(rustix::io::Errno::SRCH) = rustix::process::kill_process_group(pgid, s) {
        let _ = rustix::process::kill_process(pgid, s);
    }
}

/// Block until `pid` has exited, leaving it a zombie (not reaped).
pub(super) fn wait_exit_unreaped(pid: Pid, tx: Sender<Event>) {
    std::thread::spawn(move || {
        // Exited, or can't wait (ECHILD): either way, report; EINTR: again.
        while let Err(rustix::io::Errno::INTR) = rustix::process::waitid(
            WaitId::Pid(pid),
            WaitIdOptions::EXITED | WaitIdOptions::NOWAIT,
        ) {}
        let _ = tx.send(Event::Exited);
    });
}

/// Run CMD to its end, forwarding signals, enforcing the timeout; returns
/// its status.
pub(super) fn supervise(
    mut child: Child,
    rx: &Receiver<Event>,
    tx: Sender<Event>,
    timeout: Option<Duration>,
    mp: &Path,
) -> ExitStatus {
    let pid = Pid::from_child(&child);
    wait_exit_unreaped(pid, tx);
    let mut deadline = timeout.map(|t| Instant::now() + t);
    let mut kill_at: Option<Instant> = None;
    loop {
        let next = [deadline, kill_at].into_iter().flatten().min();
        let ev = match next {
            Some(t) => rx.recv_timeout(t.saturating_duration_since(Instant::now())),
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        let now = Instant::now();
        match ev {
            Ok(Event::Exited) | Err(RecvTimeoutError::Disconnected) => break,
            Ok(Event::Signal(sig)) => {
                if sig != libc::SIGINT {
                    deny_pending(mp);
                    kill_at.get_or_insert(now + KILL_GRACE);
                }
                signal_group(pid, sig);
            }
            Err(RecvTimeoutError::Timeout) => {
                if kill_at.is_some_and(|k| now >= k) {
                    signal_group(pid, libc::SIGKILL);
                    kill_at = None;
                } else if deadline.is_some_and(|d| now >= d) {
                    deadline = None;
                    if let Some(t) = timeout {
                        eprintln!(
                            "zonemount: run: CMD timed out after {} s; stopping its process group",
                            t.as_secs_f64()
                        );
                    }
                    deny_pending(mp);
                    signal_group(pid, libc::SIGTERM);
                    kill_at.get_or_insert(now + KILL_GRACE);
                }
            }
        }
    }
    // The leader is a zombie, so its pid still names the group: whatever
    // CMD left running in it goes now, before it is reaped.
    signal_group(pid, libc::SIGKILL);
    match child.wait() {
        Ok(st) => st,
        Err(_) => ExitStatus::from_raw(1 << 8),
    }
}

/// `run`'s exit status for CMD's.
pub(super) fn exit_code(st: ExitStatus) -> u8 {
    match (st.code(), st.signal()) {
        (Some(c), _) => u8::try_from(c & 0xff).unwrap_or(1),
        (None, Some(sig)) => u8::try_from((128 + sig) & 0xff).unwrap_or(1),
        (None, None) => 1,
    }
}

pub(super) fn spawn_failure(prog: &OsStr, e: &std::io::Error) -> Failure {
    let code = if e.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    };
    Failure::new(
        code,
        format!("run: cannot execute {}: {e}", Path::new(prog).display()),
    )
}

/// Unmount `dir`, retrying a busy mount for up to [`BUSY_PATIENCE`]: the
/// kernel holds a closed file's mount until the daemon has answered its
/// RELEASE, which comes after CMD's close() (and exit) returned.
fn unmount_patiently(dir: &std::path::Path) -> Result<Unmounted, mount::UnmountError> {
    let deadline = std::time::Instant::now() + BUSY_PATIENCE;
    loop {
        match mount::unmount(dir, false) {
            Err(mount::UnmountError::Busy(_)) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => return other,
        }
    }
}

/// How long `run` waits for a busy mount to come free before it detaches
/// lazily.
const BUSY_PATIENCE: std::time::Duration = std::time::Duration::from_millis(1500);

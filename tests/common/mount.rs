//! Mounts seen from outside: what `/proc/mounts` lists, waiting for a mount
//! to appear or vanish, finding its daemon, and the guards that own a mount
//! and unmount exactly that mountpoint on every way out of a test
//! ([`TestMount`], [`Foreground`]).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::fixtures::{Setup, backing_path};
use super::run::{BIN, Out, default_mount_args, read_back, run, sh_at, try_run, wait_child};

/// How long a mount may take to show up in `/proc/mounts`.
pub const MOUNT_TIMEOUT: Duration = Duration::from_secs(10);
/// Poll step while waiting for a mount to appear or vanish.
pub const POLL_STEP: Duration = Duration::from_millis(20);

/// `/proc/mounts` escapes these characters in paths as octal.
fn escape_mount_path(p: &Path) -> String {
    let s = p.to_string_lossy();
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            ' ' => out.push_str("\\040"),
            '\t' => out.push_str("\\011"),
            '\n' => out.push_str("\\012"),
            '\\' => out.push_str("\\134"),
            c => out.push(c),
        }
    }
    out
}

/// The (source, fstype, options) of the topmost mount on exactly `path`.
pub fn mount_entry(path: &Path) -> Option<(String, String, String)> {
    let text = fs::read_to_string("/proc/mounts").ok()?;
    let want = escape_mount_path(path);
    text.lines().rev().find_map(|line| {
        let mut it = line.split(' ');
        let src = it.next()?;
        let mp = it.next()?;
        let ty = it.next()?;
        let opts = it.next().unwrap_or("");
        (mp == want).then(|| (src.to_string(), ty.to_string(), opts.to_string()))
    })
}

/// How many mounts are stacked on exactly `path`.
pub fn mount_count(path: &Path) -> usize {
    let want = escape_mount_path(path);
    fs::read_to_string("/proc/mounts")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.split(' ').nth(1) == Some(want.as_str()))
        .count()
}

pub fn is_mounted(path: &Path) -> bool {
    mount_entry(path).is_some()
}

/// Poll `cond` every [`POLL_STEP`] until it holds or `timeout` passes.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(POLL_STEP);
    }
}

pub fn wait_mounted(path: &Path) -> bool {
    wait_until(MOUNT_TIMEOUT, || is_mounted(path))
}

pub fn wait_unmounted(path: &Path) -> bool {
    wait_until(MOUNT_TIMEOUT, || !is_mounted(path))
}

/// The name a mount's watcher gives itself (`/proc/PID/comm`); it is a
/// fork of the daemon, so its command line is the daemon's.
pub const WATCHER_COMM: &str = "zm-watch";
/// The name of the watcher's guard (a fork of the watcher), which does
/// its work if the watcher is killed.
pub const GUARD_COMM: &str = "zm-guard";

pub fn comm(pid: u32) -> String {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// Pids (other than ours) whose command line names `zonemount` and `path`:
/// a daemon still serving, or about to, that mountpoint (not its watcher
/// or the watcher's guard).
pub fn daemon_pids_for(path: &Path) -> Vec<u32> {
    zonemount_pids_for(path)
        .into_iter()
        .filter(|&p| ![WATCHER_COMM, GUARD_COMM].contains(&comm(p).as_str()))
        .collect()
}

/// The watchers of the daemons of `path`, and their guards: what cleans
/// up after a dead daemon (kill them all to leave a stale mount).
pub fn watcher_pids_for(path: &Path) -> Vec<u32> {
    zonemount_pids_for(path)
        .into_iter()
        .filter(|&p| [WATCHER_COMM, GUARD_COMM].contains(&comm(p).as_str()))
        .collect()
}

/// Processes whose command line is zonemount's and names `path`.
fn zonemount_pids_for(path: &Path) -> Vec<u32> {
    let me = std::process::id();
    let want = path.to_string_lossy().into_owned();
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| {
            let Ok(raw) = fs::read(format!("/proc/{pid}/cmdline")) else {
                return false;
            };
            let args: Vec<String> = raw
                .split(|b| *b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            // argv[0] must be the zonemount binary itself: a fusermount3
            // helper also names the mountpoint (and maybe "zonemount").
            let is_zonemount = args
                .first()
                .is_some_and(|a0| Path::new(a0).file_name().is_some_and(|n| n == "zonemount"));
            is_zonemount && args.iter().skip(1).any(|a| a.trim_end_matches('/') == want)
        })
        .collect()
}

/// Unmount `mnt` (only that exact path): `zonemount unmount`, then `umount
/// -l` while it is still listed. Never panics. Returns whether the path is
/// clean afterwards.
pub fn cleanup_mount(mnt: &Path, tried_mount: bool) -> bool {
    if tried_mount || is_mounted(mnt) {
        match try_run(
            Command::new(BIN).arg("unmount").arg(mnt),
            Duration::from_secs(20),
        ) {
            Ok(out) if out.success() => {}
            Ok(out) => eprintln!(
                "harness: `zonemount unmount {}` failed: {}",
                mnt.display(),
                out.describe()
            ),
            Err(e) => eprintln!("harness: {e}"),
        }
    }
    for _ in 0..5 {
        if !is_mounted(mnt) {
            return true;
        }
        eprintln!(
            "harness: {} still mounted; falling back to umount -l",
            mnt.display()
        );
        if let Err(e) = try_run(
            Command::new("umount").arg("-l").arg(mnt),
            Duration::from_secs(10),
        ) {
            eprintln!("harness: {e}");
        }
    }
    !is_mounted(mnt)
}

/// A live (or attempted) mount; unmounts its own mountpoint on drop.
///
/// Built only by [`Setup`] (hence the `pub(super)` fields); tests see just
/// `mnt` and the methods.
pub struct TestMount {
    pub(super) tmp: TempDir,
    pub(super) root: PathBuf,
    pub mnt: PathBuf,
    pub(super) backing: BTreeMap<String, PathBuf>,
    pub(super) cwd: PathBuf,
    pub(super) tried_mount: bool,
    pub(super) env: Vec<(String, String)>,
}

impl TestMount {
    /// `zonemount mount -q` of the same project (`project.yaml`) with the
    /// stage dir `<root>/stage` on the same mountpoint, after the daemon
    /// is gone (a SIGKILL, an unmount); waits until it is live.
    pub fn mount_again_staged(&self) -> Out {
        let mut args: Vec<String> = vec!["mount".into(), "-q".into()];
        args.extend(default_mount_args().iter().cloned());
        args.extend([
            "--config".to_string(),
            self.root().join("project.yaml").display().to_string(),
            "--stage-dir".into(),
            self.root().join("stage").display().to_string(),
            self.mountpoint().display().to_string(),
        ]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = self.zonemount(&args);
        if out.success() {
            wait_mounted(self.mountpoint());
        }
        out
    }

    /// SIGKILL the mount's one daemon and wait until its mount is gone
    /// (its watcher detaches it).
    #[track_caller]
    pub fn kill_daemon(&self) {
        let pids = daemon_pids_for(self.mountpoint());
        assert_eq!(pids.len(), 1, "one daemon: {pids:?}");
        let _ = run(
            Command::new("kill").arg("-KILL").arg(pids[0].to_string()),
            Duration::from_secs(5),
        );
        assert!(
            wait_unmounted(self.mountpoint()),
            "the killed daemon's mount stayed"
        );
    }

    /// Mount a project config (see [`Setup::new`]); panics on failure.
    #[track_caller]
    pub fn new(yaml: &str) -> Self {
        Setup::new(yaml).mount()
    }

    /// The fixture's temp dir (config lives at `<root>/project.yaml`).
    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn mountpoint(&self) -> &Path {
        &self.mnt
    }

    /// `rel` inside the mount (a path a worker would use).
    pub fn path(&self, rel: &str) -> PathBuf {
        if rel.is_empty() {
            self.mnt.clone()
        } else {
            self.mnt.join(rel)
        }
    }

    /// `rel` inside `zone`'s backing dir on the host.
    pub fn backing(&self, zone: &str, rel: &str) -> PathBuf {
        backing_path(&self.root, &self.backing, zone, rel)
    }

    pub fn is_mounted(&self) -> bool {
        is_mounted(&self.mnt)
    }

    /// `sh -c cmd` with cwd the mount's root: (status, stdout, stderr).
    pub fn sh(&self, cmd: &str) -> (ExitStatus, String, String) {
        sh_at(&self.mnt, cmd, &[]).into_tuple()
    }

    /// `sh -c cmd` with cwd `rel` inside the mount, extra env.
    pub fn sh_in(&self, rel: &str, cmd: &str, env: &[(&str, &str)]) -> Out {
        sh_at(&self.path(rel), cmd, env)
    }

    /// `zonemount ARGS...` from the mount's cwd, with the mount's env.
    pub fn zonemount(&self, args: &[&str]) -> Out {
        self.zonemount_within(args, Duration::from_secs(30))
    }

    /// [`Self::zonemount`], given up to `timeout` (a step that works on
    /// a big tree).
    pub fn zonemount_within(&self, args: &[&str], timeout: Duration) -> Out {
        run(
            Command::new(BIN)
                .args(args)
                .current_dir(&self.cwd)
                .envs(self.env.iter().map(|(k, v)| (k, v))),
            timeout,
        )
    }

    /// `zonemount unmount` on this mountpoint, as a test step.
    pub fn unmount(&mut self) -> Out {
        let out = run(
            Command::new(BIN)
                .arg("unmount")
                .arg(&self.mnt)
                .current_dir(&self.cwd),
            Duration::from_secs(30),
        );
        if out.success() {
            self.tried_mount = false;
        }
        out
    }
}

impl Drop for TestMount {
    fn drop(&mut self) {
        let clean = cleanup_mount(&self.mnt, self.tried_mount);
        // A stage an ordinary user made holds the overlay's mode-0 work
        // dirs, which the temp dir's removal can't enter.
        let stage = self.root.join("stage");
        if clean && stage.exists() {
            let _ = zonemount::stage::dir::remove(&stage);
        }
        // A staged mount without --stage-dir keeps its stage in the state
        // dir, named after the mountpoint (this test's own temp dir).
        let default = zonemount::stage::dir::default_for(&self.mnt);
        if clean && default.exists() {
            let _ = zonemount::stage::dir::remove(&default);
        }
        if !clean && !std::thread::panicking() {
            panic!(
                "{} is still mounted after unmount and umount -l",
                self.mnt.display()
            );
        }
    }
}

/// A `zonemount mount --foreground` child; on drop, SIGTERM, then kill,
/// then clean its mountpoint.
pub struct Foreground {
    pub child: Child,
    pub mnt: PathBuf,
    pub stdout: fs::File,
    pub stderr: fs::File,
}

impl Foreground {
    /// Start `zonemount mount --foreground --config CONFIG MNT` (plus
    /// `extra` args) from `cwd`.
    pub fn spawn(cwd: &Path, config: Option<&Path>, extra: &[&str], mnt: &Path) -> Self {
        let stdout = tempfile::tempfile().expect("tempfile");
        let stderr = tempfile::tempfile().expect("tempfile");
        let mut cmd = Command::new(BIN);
        cmd.arg("mount").arg("--foreground");
        if let Some(c) = config {
            cmd.arg("--config").arg(c);
        }
        cmd.args(default_mount_args())
            .args(extra)
            .arg(mnt)
            .current_dir(cwd)
            .env("LC_ALL", "C")
            .stdin(Stdio::null())
            .stdout(stdout.try_clone().expect("clone"))
            .stderr(stderr.try_clone().expect("clone"));
        let child = cmd.spawn().expect("spawn zonemount mount --foreground");
        Foreground {
            child,
            mnt: mnt.to_path_buf(),
            stdout,
            stderr,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn output(&self) -> (String, String) {
        (
            read_back(self.stdout.try_clone().expect("clone")),
            read_back(self.stderr.try_clone().expect("clone")),
        )
    }
}

impl Drop for Foreground {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = try_run(
                Command::new("kill")
                    .arg("-TERM")
                    .arg(self.child.id().to_string()),
                Duration::from_secs(5),
            );
            if wait_child(&mut self.child, Duration::from_secs(10)).is_none() {
                eprintln!("harness: foreground daemon ignored SIGTERM; killed");
            }
        }
        cleanup_mount(&self.mnt, false);
    }
}

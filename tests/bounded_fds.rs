//! A mount made by an ordinary user keeps its fds bounded: without
//! CAP_DAC_READ_SEARCH the daemon can't reopen nodes by kernel file handle,
//! so it reopens them from their parent by name (DESIGN §6). A `find -ls`
//! over a 30,000-entry directory, with the daemon's RLIMIT_NOFILE at 1024,
//! stats every entry; afterwards the mount still takes a write and the
//! daemon holds a few hundred fds; `status` says what it does without.
//!
//! Needs root (to act as the user and lay out the fixture), an
//! unprivileged user `zmsmoke` who can open `/dev/fuse` (the test command
//! makes it 0666, Debian's default), `fusermount3`, `setpriv`, `prlimit`
//! and `find`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;

/// The unprivileged user who mounts.
const USER: &str = "zmsmoke";
/// Entries of the walked directory.
const ENTRIES: usize = 30_000;
/// The daemon's RLIMIT_NOFILE (soft and hard).
const NOFILE: u32 = 1024;
/// What the daemon may hold after the walk: its cache (half of NOFILE,
/// see `fs::reach::cache_size`) and room for the session, zone dirs and
/// the control socket.
const FDS_AFTER_WALK: usize = NOFILE as usize / 2 + 128;

/// A mount made by `USER` in a temp dir; on every way out (panic too) it
/// is unmounted by exact path (by the user's `zonemount unmount`, then
/// `umount -l` as root) and a daemon still alive is killed by pid.
struct UserMount {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    mnt: PathBuf,
    ids: (u32, u32),
    daemon: Option<u32>,
}

impl UserMount {
    /// `cmd ARGS` as the user, with a clean environment whose HOME and
    /// XDG_RUNTIME_DIR are inside the fixture.
    fn as_user(&self, args: &[&str]) -> Command {
        let mut c = Command::new("setpriv");
        c.args(setpriv_as(self.ids)).args(args);
        self.user_env(&mut c);
        c
    }

    /// The user's clean environment, in the fixture.
    fn user_env(&self, c: &mut Command) {
        c.env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
            .env("HOME", self.root.join("home"))
            .env("XDG_RUNTIME_DIR", self.root.join("run"))
            .current_dir(&self.root);
    }

    fn sh(&self, script: &str) -> Out {
        run(&mut self.as_user(&["sh", "-c", script]), CMD_TIMEOUT)
    }

    fn mnt_str(&self) -> &str {
        self.mnt.to_str().expect("a UTF-8 temp path")
    }
}

impl Drop for UserMount {
    fn drop(&mut self) {
        if is_mounted(&self.mnt) {
            let mnt = self.mnt_str().to_string();
            let r = try_run(
                &mut self.as_user(&[BIN, "unmount", &mnt]),
                Duration::from_secs(20),
            );
            if let Err(e) = r {
                eprintln!("harness: {e}");
            }
        }
        if !cleanup_mount(&self.mnt, false) {
            eprintln!("harness: {} is still mounted", self.mnt.display());
        }
        if let Some(pid) = self.daemon {
            let gone = wait_until(Duration::from_secs(10), || {
                !Path::new(&format!("/proc/{pid}")).exists()
            });
            if !gone {
                eprintln!("harness: daemon {pid} outlived its mount; killing it");
                let _ = try_run(
                    Command::new("kill").args(["-KILL", &pid.to_string()]),
                    Duration::from_secs(5),
                );
            }
        }
    }
}

/// The soft RLIMIT_NOFILE of process `pid`.
fn nofile_of(pid: u32) -> Option<u64> {
    let limits = fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// How many fds process `pid` has open.
fn fds_of(pid: u32) -> usize {
    fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// The effective uid of process `pid`.
fn euid_of(pid: u32) -> Option<u32> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// Lay out the fixture (a direct-mode rw zone `work` holding `big/` with
/// [`ENTRIES`] files) and mount it as [`USER`] with the daemon's
/// RLIMIT_NOFILE at [`NOFILE`].
fn mount_as_user() -> UserMount {
    let ids = user_ids(USER).expect("the user exists (checked by require)");
    let tmp = tempfile::Builder::new()
        .prefix("zonemount-test.")
        .tempdir()
        .expect("temp dir");
    let root = fs::canonicalize(tmp.path()).expect("canonical temp dir");
    fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
    let work = root.join("direct/work");
    let big = work.join("big");
    fs::create_dir_all(&big).unwrap();
    for i in 0..ENTRIES {
        fs::File::create(big.join(format!("f{i}"))).unwrap();
    }
    let yaml = format!(
        "sandbox:\n  mode: direct\n  zones:\n    work: {{ path: \"{}\", mode: rw }}\n",
        work.display()
    );
    fs::write(root.join("project.yaml"), yaml).unwrap();
    // The user's own: the zone dir (not `big`, which it only reads), the
    // mountpoint, HOME and the runtime dir.
    for d in ["direct", "direct/work", "mnt", "home", "run"] {
        let p = root.join(d);
        fs::create_dir_all(&p).unwrap();
        std::os::unix::fs::chown(&p, Some(ids.0), Some(ids.1)).unwrap();
    }
    fs::set_permissions(root.join("run"), fs::Permissions::from_mode(0o700)).unwrap();
    let mut m = UserMount {
        _tmp: tmp,
        mnt: root.join("mnt"),
        root,
        ids,
        daemon: None,
    };
    // prlimit (as root) sets the limit, then setpriv becomes the user.
    let mut mount = Command::new("prlimit");
    mount
        .arg(format!("--nofile={NOFILE}:{NOFILE}"))
        .arg("setpriv")
        .args(setpriv_as(ids))
        .args([BIN, "mount", "--config"])
        .arg(m.root.join("project.yaml"))
        .args(default_mount_args())
        .arg(&m.mnt);
    m.user_env(&mut mount);
    let out = run(&mut mount, Duration::from_secs(30));
    assert!(out.success(), "mount as {USER}: {}", out.describe());
    assert!(
        wait_mounted(&m.mnt),
        "{} not in /proc/mounts",
        m.mnt.display()
    );
    m.daemon = daemon_pids_for(&m.mnt).first().copied();
    m
}

#[test]
fn a_user_mount_walks_30000_entries_with_bounded_fds() {
    if !require(Need::UserFuse(USER))
        || !require(Need::Tool("prlimit"))
        || !require(Need::Tool("find"))
    {
        return;
    }
    let m = mount_as_user();
    let pid = m.daemon.expect("the daemon serving the mount");
    assert_eq!(euid_of(pid), Some(m.ids.0), "the daemon runs as {USER}");
    assert_eq!(
        nofile_of(pid),
        Some(u64::from(NOFILE)),
        "the daemon's fd limit"
    );

    // Every entry stat'ed (find -ls lstat's each one), none refused.
    let big = format!("{}/work/big", m.mnt_str());
    let walk = m.sh(&format!("find {big} -ls | wc -l"));
    assert!(
        walk.success() && walk.stderr.is_empty(),
        "find -ls: {}",
        walk.describe()
    );
    assert_eq!(
        walk.stdout.trim(),
        (ENTRIES + 1).to_string(),
        "lines of find -ls"
    );
    let held = fds_of(pid);
    assert!(
        held <= FDS_AFTER_WALK,
        "the daemon holds {held} fds after the walk (at most {FDS_AFTER_WALK} expected)"
    );

    // The mount still works: a write, and entries whose fds were closed.
    let mnt = m.mnt_str();
    let write = m.sh(&format!(
        "echo hi > {mnt}/work/x.txt && cat {mnt}/work/x.txt"
    ));
    assert_eq!(
        write.stdout,
        "hi\n",
        "write after the walk: {}",
        write.describe()
    );
    assert_eq!(
        fs::read_to_string(m.root.join("direct/work/x.txt")).unwrap(),
        "hi\n"
    );
    let again = m.sh(&format!("stat -c %s {big}/f0 {big}/f{}", ENTRIES - 1));
    assert!(again.success(), "stat again: {}", again.describe());

    // `status` says what this daemon does without, and what it costs.
    let status = m.sh(&format!("{BIN} status --json {mnt}"));
    assert!(status.success(), "status: {}", status.describe());
    let v: serde_json::Value = serde_json::from_str(&status.stdout).expect("status is JSON");
    let degraded = v["degraded"].as_array().cloned().unwrap_or_default();
    let needs = |feature: &str| {
        degraded
            .iter()
            .find(|d| d["feature"] == feature)
            .and_then(|d| d["needs"].as_str().map(str::to_string))
    };
    assert_eq!(
        needs("file_handles").as_deref(),
        Some("CAP_DAC_READ_SEARCH"),
        "{}",
        status.stdout
    );
    assert_eq!(
        needs("passthrough").as_deref(),
        Some("CAP_SYS_ADMIN"),
        "{}",
        status.stdout
    );
    let human = m.sh(&format!("{BIN} status {mnt}"));
    assert!(
        human
            .stdout
            .contains("degraded: without kernel file handles (needs CAP_DAC_READ_SEARCH)"),
        "{}",
        human.stdout
    );
}

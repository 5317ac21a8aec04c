//! A daemon that can't use kernel file handles keeps its fds bounded: an
//! ordinary user's daemon lacks CAP_DAC_READ_SEARCH, so it reopens nodes
//! from their parent by name through the bounded fd cache (DESIGN §6). A
//! `find -ls` over a 30,000-entry directory, with the daemon's
//! RLIMIT_NOFILE at 1024, stats every entry; afterwards the mount still
//! takes a write, the daemon holds a few hundred fds, and `status` says
//! what it does without.
//!
//! Who mounts depends on the environment the suite runs in:
//! - as an unprivileged user (`scripts/test-envs.sh user`): that user
//!   itself, through fusermount3;
//! - as root, when the user `zmsmoke` can use `/dev/fuse` (Debian's 0666):
//!   root acting as `zmsmoke` (setpriv);
//! - as root otherwise (a 0600 `/dev/fuse`, or no fusermount3): root's
//!   own daemon with CAP_DAC_READ_SEARCH dropped from its bounding set,
//!   which takes the same path (no file handles).
//!
//! Needs `prlimit`, `setpriv` and `find`; an unprivileged user also needs
//! a `/dev/fuse` they can open and fusermount3.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;

/// The unprivileged user root mounts as, when it can.
const USER: &str = "zmsmoke";
/// Entries of the walked directory.
const ENTRIES: usize = 30_000;
/// The daemon's RLIMIT_NOFILE (soft and hard).
const NOFILE: u32 = 1024;
/// What the daemon may hold after the walk: its cache (half of NOFILE,
/// see `fs::reach::cache_size`) and room for the session, zone dirs and
/// the control socket.
const FDS_AFTER_WALK: usize = NOFILE as usize / 2 + 128;

/// Who mounts (see the module's doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Who {
    /// This (unprivileged) process.
    Myself,
    /// Root acting as an unprivileged user (uid, gid).
    User((u32, u32)),
    /// Root without CAP_DAC_READ_SEARCH.
    RootWithoutHandles,
}

impl Who {
    /// Whether the daemon lacks CAP_SYS_ADMIN (and so passthrough).
    fn unprivileged(self) -> bool {
        self != Who::RootWithoutHandles
    }
}

/// A mount in a temp dir; on every way out (panic too) it is unmounted by
/// exact path (`zonemount unmount` as whoever mounted, then `umount -l`
/// while it is still listed) and a daemon still alive is killed by pid.
struct FdMount {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    mnt: PathBuf,
    who: Who,
    daemon: Option<u32>,
}

impl FdMount {
    /// `args` as whoever mounted, in a clean environment whose HOME and
    /// XDG_RUNTIME_DIR are inside the fixture.
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = match self.who {
            Who::User(ids) => {
                let mut c = Command::new("setpriv");
                c.args(setpriv_as(ids)).args(args);
                c
            }
            Who::Myself | Who::RootWithoutHandles => {
                let mut c = Command::new(args[0]);
                c.args(&args[1..]);
                c
            }
        };
        self.clean_env(&mut c);
        c
    }

    /// A clean environment whose HOME and XDG_RUNTIME_DIR are inside the
    /// fixture, run from its root.
    fn clean_env(&self, c: &mut Command) {
        c.env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
            .env("HOME", self.root.join("home"))
            .env("XDG_RUNTIME_DIR", self.root.join("run"))
            .current_dir(&self.root);
    }

    fn sh(&self, script: &str) -> Out {
        run(&mut self.cmd(&["sh", "-c", script]), CMD_TIMEOUT)
    }

    fn mnt_str(&self) -> &str {
        self.mnt.to_str().expect("a UTF-8 temp path")
    }
}

impl Drop for FdMount {
    fn drop(&mut self) {
        if is_mounted(&self.mnt) {
            let mnt = self.mnt_str().to_string();
            let r = try_run(
                &mut self.cmd(&[BIN, "unmount", &mnt]),
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

/// A field of `/proc/PID/status` or `/proc/PID/limits`: the `n`th word of
/// the line starting with `key`.
fn proc_field(pid: u32, file: &str, key: &str, n: usize) -> Option<String> {
    let text = fs::read_to_string(format!("/proc/{pid}/{file}")).ok()?;
    let line = text.lines().find(|l| l.starts_with(key))?;
    line.split_whitespace().nth(n).map(str::to_string)
}

/// How many fds process `pid` has open.
fn fds_of(pid: u32) -> usize {
    fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// Who mounts here, or None when the test can't run (the skip recorded).
fn who_mounts() -> Option<Who> {
    if !require(Need::Tool("prlimit")) || !require(Need::Tool("find")) {
        return None;
    }
    if !is_root() {
        let ok = require(Need::Fuse) && require(Need::Tool("fusermount3"));
        return ok.then_some(Who::Myself);
    }
    if !require(Need::Tool("setpriv")) {
        return None;
    }
    // Quietly: without such a user root drops the capability instead.
    let user = user_ids(USER).filter(|_| user_can_fuse(USER));
    Some(user.map_or(Who::RootWithoutHandles, Who::User))
}

/// Lay out the fixture (a direct-mode rw zone `work` holding `big/` with
/// [`ENTRIES`] files) and mount it as `who` with the daemon's
/// RLIMIT_NOFILE at [`NOFILE`].
fn mount_fixture(who: Who) -> FdMount {
    mount_fixture_limited(who, NOFILE, NOFILE)
}

/// [`mount_fixture`] with `zonemount mount` started under a soft
/// RLIMIT_NOFILE of `soft` and a hard one of `hard`.
fn mount_fixture_limited(who: Who, soft: u32, hard: u32) -> FdMount {
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
    // Whoever mounts owns the zone dir (not `big`, which it only reads),
    // the mountpoint, HOME and the runtime dir.
    for d in ["direct", "direct/work", "mnt", "home", "run"] {
        let p = root.join(d);
        fs::create_dir_all(&p).unwrap();
        if let Who::User((uid, gid)) = who {
            std::os::unix::fs::chown(&p, Some(uid), Some(gid)).unwrap();
        }
    }
    fs::set_permissions(root.join("run"), fs::Permissions::from_mode(0o700)).unwrap();
    let mut m = FdMount {
        _tmp: tmp,
        mnt: root.join("mnt"),
        root,
        who,
        daemon: None,
    };
    // prlimit sets the limit (the daemon raises its soft limit to the
    // hard one, never past it), then whoever mounts runs `zonemount mount`.
    let nofile = format!("--nofile={soft}:{hard}");
    let mut argv: Vec<String> = vec!["prlimit".into(), nofile];
    match who {
        Who::Myself => {}
        Who::User(ids) => argv.extend(["setpriv".into()].into_iter().chain(setpriv_as(ids))),
        Who::RootWithoutHandles => argv.extend([
            "setpriv".into(),
            "--bounding-set=-dac_read_search".into(),
            "--inh-caps=-dac_read_search".into(),
        ]),
    }
    argv.extend([BIN.into(), "mount".into(), "--config".into()]);
    argv.push(m.root.join("project.yaml").to_string_lossy().into_owned());
    argv.extend(default_mount_args().iter().cloned());
    argv.push(m.mnt_str().to_string());
    let mut mount = Command::new(&argv[0]);
    mount.args(&argv[1..]);
    m.clean_env(&mut mount);
    let out = run(&mut mount, Duration::from_secs(30));
    assert!(out.success(), "mount as {who:?}: {}", out.describe());
    assert!(
        wait_mounted(&m.mnt),
        "{} not in /proc/mounts",
        m.mnt.display()
    );
    m.daemon = daemon_pids_for(&m.mnt).first().copied();
    m
}

/// The daemon raises its soft RLIMIT_NOFILE to the hard limit before it
/// sizes its fd cache: started under a login shell's soft limit of 1024
/// with a hard one of 4096, it caches up to 2,048 fds (half the raised
/// limit), not 512 (half the soft one), which made a walk of more than
/// 512 files reopen each of them again on every pass.
#[test]
fn the_fd_cache_is_sized_from_the_raised_limit() {
    let Some(who) = who_mounts() else { return };
    let (soft, hard) = (1024, 4096);
    let m = mount_fixture_limited(who, soft, hard);
    let pid = m.daemon.expect("the daemon serving the mount");
    let limit = proc_field(pid, "limits", "Max open files", 3);
    assert_eq!(
        limit,
        Some(hard.to_string()),
        "the daemon's raised soft limit"
    );
    let big = format!("{}/work/big", m.mnt_str());
    let walk = m.sh(&format!("find {big} -ls | wc -l"));
    assert!(walk.success(), "find -ls: {}", walk.describe());
    let held = fds_of(pid);
    let (small, raised) = (soft as usize / 2 + 128, hard as usize / 2 + 128);
    assert!(
        held > small && held <= raised,
        "the daemon holds {held} fds after walking {ENTRIES} entries: a cache sized from the raised limit holds more than {small} and at most {raised}"
    );
}

#[test]
fn a_daemon_without_file_handles_walks_30000_entries_with_bounded_fds() {
    let Some(who) = who_mounts() else { return };
    eprintln!("bounded_fds: the daemon runs as {who:?}");
    let m = mount_fixture(who);
    let pid = m.daemon.expect("the daemon serving the mount");
    let nofile = proc_field(pid, "limits", "Max open files", 3);
    assert_eq!(nofile, Some(NOFILE.to_string()), "the daemon's fd limit");
    let euid = proc_field(pid, "status", "Uid:", 2).unwrap();
    assert_eq!(euid == "0", !who.unprivileged(), "the daemon's euid {euid}");

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
    let passthrough = needs("passthrough");
    match who.unprivileged() {
        true => assert_eq!(
            passthrough.as_deref(),
            Some("CAP_SYS_ADMIN"),
            "{}",
            status.stdout
        ),
        false => assert_eq!(passthrough, None, "{}", status.stdout),
    }
    let human = m.sh(&format!("{BIN} status {mnt}"));
    assert!(
        human
            .stdout
            .contains("degraded: without kernel file handles (needs CAP_DAC_READ_SEARCH)"),
        "{}",
        human.stdout
    );
}

//! Issue 31: under `run --isolate`, a zone whose every rule the kernel
//! enforces by itself is bound straight from its backing dir (the worker
//! sees the backing dir's st_dev, a ro one refuses writes with EROFS);
//! a zone with `hide` or an `ask` class stays on the daemon and its rules
//! hold; `--via-daemon ZONE` and `--no-direct` keep zones on the daemon;
//! `run`, `status` and `derive` say which zone went which way and why.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use tempfile::TempDir;

/// docs: ro, plain (direct); ws: rw, plain (direct); hid: ro with
/// `hide: [secret]`; asky: rw whose writes ask (daemon).
struct Task {
    _tmp: TempDir,
    root: PathBuf,
    config: PathBuf,
    tmpdir: PathBuf,
}

const ZONES: &[(&str, &str)] = &[
    ("docs", "mode: ro"),
    ("ws", "mode: rw"),
    ("hid", "mode: ro, hide: [secret]"),
    (
        "asky",
        "mode: rw, approval: { write: ask, delete: preApproved }",
    ),
];

impl Task {
    fn new() -> Task {
        let tmp = tempfile::Builder::new()
            .prefix("zonemount-direct-test.")
            .tempdir()
            .unwrap();
        let root = fs::canonicalize(tmp.path()).unwrap();
        fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
        let config = root.join("project.yaml");
        fs::write(&config, zones_yaml(Mode::Sandboxed, ZONES)).unwrap();
        for (z, _) in ZONES {
            fs::create_dir_all(root.join(".sandbox").join(z)).unwrap();
        }
        fs::write(root.join(".sandbox/docs/d.txt"), "d\n").unwrap();
        fs::write(root.join(".sandbox/hid/secret"), "s\n").unwrap();
        fs::write(root.join(".sandbox/hid/pub"), "p\n").unwrap();
        let tmpdir = root.join("tmp");
        fs::create_dir(&tmpdir).unwrap();
        Task {
            _tmp: tmp,
            root,
            config,
            tmpdir,
        }
    }

    fn backing(&self, zone: &str) -> PathBuf {
        self.root.join(".sandbox").join(zone)
    }

    fn dev(&self, zone: &str) -> u64 {
        fs::metadata(self.backing(zone)).unwrap().dev()
    }

    fn command(&self, opts: &[&str], script: &str) -> Command {
        let mut c = Command::new(BIN);
        c.arg("run")
            .arg("--config")
            .arg(&self.config)
            .args(default_mount_args())
            .arg("--isolate")
            .args(opts)
            .args(["--", "sh", "-c", script])
            .current_dir(&self.root)
            .env("TMPDIR", &self.tmpdir);
        c
    }

    fn sh(&self, opts: &[&str], script: &str) -> Out {
        run(&mut self.command(opts, script), Duration::from_secs(60))
    }

    /// `/<zone>`'s st_dev as the worker sees it, by zone.
    fn devs(&self, opts: &[&str]) -> (Out, Vec<(String, u64)>) {
        let out = self.sh(
            opts,
            "for z in docs ws hid asky; do echo \"$z $(stat -c %d /$z)\"; done",
        );
        assert!(out.success(), "{}", out.describe());
        let devs = out
            .stdout
            .lines()
            .map(|l| {
                let (z, d) = l.split_once(' ').unwrap();
                (z.to_string(), d.parse().unwrap())
            })
            .collect();
        (out, devs)
    }

    fn direct_in(&self, devs: &[(String, u64)], zone: &str) -> bool {
        devs.iter().find(|(z, _)| z == zone).unwrap().1 == self.dev(zone)
    }
}

fn ready() -> bool {
    require(Need::Fuse) && require(Need::Tool("bwrap"))
}

/// Whether CMD runs as root here: a rw zone is then kept on the daemon
/// (bound straight, CMD could make files setuid root on the host).
fn as_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// What `run` says of the `ws` zone: bound straight, or, run by root,
/// through the daemon and why.
const WS_AS_ROOT: &str = "ws: through the daemon (kept on the daemon: CMD runs as root, and bound straight it could make files setuid root on the host (the daemon refuses that; --user UID runs it as another uid))";

#[test]
fn eligible_zones_are_bound_straight_from_backing_the_others_stay_on_the_daemon() {
    if !ready() {
        return;
    }
    let t = Task::new();
    let (out, devs) = t.devs(&[]);
    assert!(t.direct_in(&devs, "docs"), "docs: {devs:?}");
    assert_eq!(t.direct_in(&devs, "ws"), !as_root(), "ws: {devs:?}");
    assert!(!t.direct_in(&devs, "hid"), "hid: {devs:?}");
    assert!(!t.direct_in(&devs, "asky"), "asky: {devs:?}");
    // run says which way each went, and why.
    let ws = if as_root() {
        WS_AS_ROOT
    } else {
        "ws: bound straight from"
    };
    for want in [
        "docs: bound straight from",
        ws,
        if as_root() {
            "ws: through"
        } else {
            "no change report"
        },
        "hid: through the daemon (needs the daemon: hide patterns)",
        "asky: through the daemon (needs the daemon: write approval)",
    ] {
        assert!(out.stderr.contains(want), "{want}: {}", out.describe());
    }

    // The direct ro zone: readable, writes refused by the kernel; the
    // direct rw zone writes through; no fd of a backing dir reaches CMD.
    let out = t.sh(&[], "cat /docs/d.txt; echo x > /ws/new; ls -l /proc/self/fd/ | grep -c sandbox; echo x > /docs/y");
    assert_sh_errno(&out, libc::EROFS, "write into a direct ro zone");
    assert!(out.stdout.starts_with("d\n0\n"), "{}", out.describe());
    assert!(!t.backing("docs").join("y").exists());
    assert_eq!(
        fs::read_to_string(t.backing("ws").join("new")).unwrap(),
        "x\n"
    );

    // The daemon's zones keep their rules: hidden stays hidden, a write
    // that asks is decided (denied here: --no-approvals), not let through.
    let out = t.sh(&[], "ls /hid; cat /hid/secret");
    assert!(!out.success(), "{}", out.describe());
    assert_eq!(out.stdout, "pub\n", "{}", out.describe());
    let out = t.sh(&[], "echo x > /asky/f");
    assert_sh_errno(&out, libc::EACCES, "a write that asks, denied");
    assert!(!t.backing("asky").join("f").exists());
    assert!(names(&t.tmpdir).unwrap().is_empty(), "temp dirs left");
}

#[test]
fn via_daemon_and_no_direct_keep_zones_on_the_daemon() {
    if !ready() {
        return;
    }
    let t = Task::new();
    let (out, devs) = t.devs(&["--via-daemon", "docs"]);
    assert!(!t.direct_in(&devs, "docs"), "docs: {devs:?}");
    assert_eq!(t.direct_in(&devs, "ws"), !as_root(), "ws: {devs:?}");
    assert!(
        out.stderr
            .contains("docs: through the daemon (kept on the daemon: --via-daemon docs)"),
        "{}",
        out.describe()
    );
    // Through the daemon the ro zone still refuses writes.
    let out = t.sh(&["--via-daemon", "docs"], "echo x > /docs/y");
    assert_sh_errno(&out, libc::EROFS, "write into a ro zone on the daemon");
    let (out, devs) = t.devs(&["--no-direct"]);
    for z in ["docs", "ws", "hid", "asky"] {
        assert!(!t.direct_in(&devs, z), "{z}: {devs:?}");
    }
    assert!(
        out.stderr
            .contains("docs: through the daemon (kept on the daemon: --no-direct)"),
        "{}",
        out.describe()
    );
    // A zone that isn't there is refused before anything is mounted.
    let out = t.sh(&["--via-daemon", "nope"], "true");
    assert_eq!(out.code(), Some(2), "{}", out.describe());
    assert!(
        out.stderr.contains("--via-daemon nope: no such zone"),
        "{}",
        out.describe()
    );
    assert!(names(&t.tmpdir).unwrap().is_empty(), "temp dirs left");
}

#[test]
fn status_of_an_isolated_run_says_which_zone_went_which_way() {
    if !ready() {
        return;
    }
    let t = Task::new();
    let mut child = t
        .command(&["-q"], "touch /ws/ready; sleep 30")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !t.backing("ws").join("ready").exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let mp = names(&t.tmpdir)
        .unwrap()
        .into_iter()
        .next()
        .map(|n| t.tmpdir.join(n));
    let status = mp.as_ref().map(|mp| {
        (
            run(
                Command::new(BIN).arg("status").arg(mp),
                Duration::from_secs(20),
            ),
            run(
                Command::new(BIN).args(["status", "--json"]).arg(mp),
                Duration::from_secs(20),
            ),
        )
    });
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "run did not end after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (text, json) = status.expect("run's mount");
    assert!(text.success(), "{}", text.describe());
    assert!(
        text.stdout.contains("under run --isolate:"),
        "{}",
        text.stdout
    );
    let docs = format!("docs: bound straight from {}", t.backing("docs").display());
    assert!(text.stdout.contains(&docs), "{}", text.stdout);
    assert!(
        text.stdout
            .contains("hid: through the daemon (needs the daemon: hide patterns)"),
        "{}",
        text.stdout
    );
    let v: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    let route = |z: &str| {
        v["zones"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == z)
            .unwrap()["isolate"]["direct"]
            .clone()
    };
    assert_eq!(route("docs"), serde_json::json!(true));
    assert_eq!(route("ws"), serde_json::json!(!as_root()));
    assert_eq!(route("hid"), serde_json::json!(false));
    assert_eq!(route("asky"), serde_json::json!(false));
}

#[test]
fn derive_says_which_zones_run_isolate_binds_straight_from_backing() {
    let t = Task::new();
    let out = run(
        Command::new(BIN)
            .args(["derive", "--config"])
            .arg(&t.config)
            .current_dir(&t.root),
        Duration::from_secs(20),
    );
    assert!(out.success(), "{}", out.describe());
    let tail = out
        .stdout
        .split("under run --isolate:\n")
        .nth(1)
        .unwrap_or("");
    let lines: Vec<&str> = tail.lines().map(str::trim).collect();
    let b = |z: &str| t.backing(z).display().to_string();
    assert_eq!(
        lines,
        vec![
            format!(
                "docs: bound straight from {} (read-only: the kernel refuses writes with EROFS)",
                b("docs")
            ),
            format!(
                "ws: bound straight from {} (no rule needs the daemon; no change report for it; through the daemon when CMD runs as root, which bound straight could make files setuid root on the host)",
                b("ws")
            ),
            "hid: through the daemon (needs the daemon: hide patterns)".to_string(),
            "asky: through the daemon (needs the daemon: write approval)".to_string(),
        ],
        "{}",
        out.stdout
    );
}

/// `--user` runs CMD as a uid that may not reach a backing dir's path (the
/// root daemon reaches it for CMD): every zone stays on the daemon, and
/// `run` says why.
#[test]
fn run_as_another_user_keeps_every_zone_on_the_daemon() {
    if !ready() || !require(Need::Root) {
        return;
    }
    let t = Task::new();
    let (out, devs) = t.devs(&["--user", "65534:65534"]);
    for z in ["docs", "ws", "hid", "asky"] {
        assert!(!t.direct_in(&devs, z), "{z}: {devs:?}");
    }
    assert!(
        out.stderr.contains(
            "docs: through the daemon (kept on the daemon: --user runs CMD as a uid that may not reach the backing dir)"
        ),
        "{}",
        out.describe()
    );
}

/// A bwrap without `--bind-fd` (before 0.10, unless backported) could only
/// bind a backing dir by path, which something may swap under it: every
/// zone then stays on the daemon, and `run` says why.
#[test]
fn a_bwrap_without_bind_fd_keeps_every_zone_on_the_daemon() {
    if !ready() {
        return;
    }
    let t = Task::new();
    let real = String::from_utf8(
        Command::new("sh")
            .args(["-c", "command -v bwrap"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let fake = t.root.join("oldbwrap");
    fs::create_dir(&fake).unwrap();
    fs::write(
        fake.join("bwrap"),
        format!(
            "#!/bin/sh\nif [ \"$1\" = --help ]; then echo 'usage: bwrap [OPTIONS...] [--] COMMAND'; echo '    --ro-bind SRC DEST'; exit 0; fi\nexec {} \"$@\"\n",
            real.trim()
        ),
    )
    .unwrap();
    fs::set_permissions(fake.join("bwrap"), fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        fake.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = run(
        t.command(
            &[],
            "for z in docs ws; do echo \"$z $(stat -c %d /$z)\"; done",
        )
        .env("PATH", &path),
        Duration::from_secs(60),
    );
    assert!(out.success(), "{}", out.describe());
    for z in ["docs", "ws"] {
        let dev: u64 = out
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{z} ")))
            .unwrap()
            .parse()
            .unwrap();
        assert_ne!(dev, t.dev(z), "{z} is bound straight: {}", out.describe());
    }
    assert!(
        out.stderr
            .contains("docs: through the daemon (kept on the daemon: this bwrap has no --bind-fd"),
        "{}",
        out.describe()
    );
}

/// Unmounts, by exact path, what the test mounted (also on panic).
struct Unmount(Vec<PathBuf>);

impl Drop for Unmount {
    fn drop(&mut self) {
        for p in self.0.iter().rev() {
            let _ = Command::new("umount").arg("-l").arg(p).status();
        }
    }
}

fn wait_for(path: &std::path::Path, what: &str) {
    let start = Instant::now();
    while !path.exists() {
        assert!(start.elapsed() < Duration::from_secs(30), "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A mount the host makes under a zone's backing dir while CMD runs does
/// not reach CMD when the zone is bound straight: run by root, `run` binds
/// a private clone of the backing dir (before: bubblewrap's bind took the
/// host's later mounts, so a tmpfs mounted under a ro zone showed up in it
/// read-write). The backing dirs' mount is made shared here, so a
/// namespace that takes later mounts (checked beside CMD) sees it.
#[test]
fn a_mount_the_host_makes_under_a_straight_zone_during_a_run_stays_out() {
    if !ready() || !require(Need::Root) || !require(Need::Tool("unshare")) {
        return;
    }
    let t = Task::new();
    let sub = t.backing("docs").join("sub");
    fs::create_dir(&sub).unwrap();
    let mut mounted = Unmount(Vec::new());
    let sh = |c: &str| {
        let st = Command::new("sh").arg("-c").arg(c).status().unwrap();
        assert!(st.success(), "{c}");
    };
    let root = t.root.display().to_string();
    sh(&format!(
        "mount --bind {root} {root} && mount --make-shared {root}"
    ));
    mounted.0.push(t.root.clone());
    let go = t.backing("ws").join("go");
    // Beside CMD: a namespace that takes the host's later mounts.
    let control = Command::new("unshare")
        .args(["--mount", "--propagation", "slave", "sh", "-c"])
        .arg(format!(
            "i=0; while [ ! -e {go} ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; ls {sub}",
            go = go.display(),
            sub = sub.display()
        ))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // --cache-ttl 0: CMD sees the host's `go` at once (through the daemon).
    let cmd = t
        .command(
            &["--cache-ttl", "0"],
            ": > /ws/ready; i=0; while [ ! -e /ws/go ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; \
             echo \"seen: $(ls /docs/sub)\"; touch /docs/sub/x && echo WROTE; echo end",
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&t.backing("ws").join("ready"), "CMD did not start");
    sh(&format!(
        "mount -t tmpfs -o size=1m zm-test {}",
        sub.display()
    ));
    mounted.0.push(sub.clone());
    fs::write(sub.join("marker"), "host\n").unwrap();
    fs::write(&go, "").unwrap();
    let out = cmd.wait_with_output().unwrap();
    let control = control.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        String::from_utf8_lossy(&control.stdout),
        "marker\n",
        "the host's mount propagates here, or this test proves nothing"
    );
    assert_eq!(stdout, "seen: \nend\n", "{stderr}");
    assert!(stderr.contains("Read-only file system"), "{stderr}");
    assert!(!sub.join("x").exists());
    drop(mounted);
    assert!(names(&t.tmpdir).unwrap().is_empty(), "temp dirs left");
}

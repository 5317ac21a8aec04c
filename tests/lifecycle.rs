//! DESIGN §5 and the CLI contract: `mount` returns only once the mount is
//! live; `unmount` waits for the daemon and tolerates an unmounted path;
//! every failure is one line on stderr with exit 1 or 2 (2 for usage and
//! configuration, with file:line); `--foreground` + SIGTERM; `derive`;
//! the embedded default and `./zonemount.yaml`; worker mounts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use libc::{EACCES, ENOENT, EPERM, EROFS};

/// A failure as the CLI contract wants it: non-zero, an exit code in
/// `codes`, and exactly one non-empty line on stderr, with no panic or
/// backtrace.
#[track_caller]
fn assert_one_line_error(out: &Out, codes: &[i32], ctx: &str) {
    assert!(
        !out.success(),
        "{ctx}: expected failure, got {}",
        out.describe()
    );
    let code = out.code();
    assert!(
        code.is_some_and(|c| codes.contains(&c)),
        "{ctx}: exit code {code:?}, want one of {codes:?}: {}",
        out.describe()
    );
    let msg = out.stderr.trim();
    assert!(
        !msg.is_empty(),
        "{ctx}: no message on stderr: {}",
        out.describe()
    );
    assert_eq!(
        msg.lines().count(),
        1,
        "{ctx}: message must be one line: {}",
        out.describe()
    );
    for bad in ["panicked", "backtrace", "RUST_BACKTRACE"] {
        assert!(
            !out.stderr.contains(bad),
            "{ctx}: stderr mentions {bad:?}: {}",
            out.describe()
        );
    }
}

/// The message names `file` and `line` (as `file:line`, or `line N`).
#[track_caller]
fn assert_names_file_line(out: &Out, file: &str, line: u32, ctx: &str) {
    let msg = &out.stderr;
    assert!(
        msg.contains(file),
        "{ctx}: message should name {file}: {msg}"
    );
    let forms = [
        format!("{file}:{line}"),
        format!("line {line}"),
        format!("line: {line}"),
    ];
    assert!(
        forms.iter().any(|f| msg.contains(f.as_str())),
        "{ctx}: message should give line {line}: {msg}"
    );
}

fn simple(mode: Mode) -> Setup {
    Setup::zones(mode, &[("ws", "mode: rw"), ("data", "mode: ro")])
        .file("ws", "w.txt", "w\n")
        .file("data", "d.txt", "d\n")
}

fn zonemount(cwd: &Path, args: &[&str]) -> Out {
    let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    zonemount_at(cwd, &args)
}

// ----- mount / unmount

#[test]
fn mount_is_live_when_it_returns() {
    if !fuse_ok() {
        return;
    }
    for mode in [Mode::Sandboxed, Mode::Direct] {
        let (out, m) = simple(mode).mount_command_only();
        assert!(out.success(), "{mode:?} mount: {}", out.describe());
        // No polling: exit 0 means live.
        let entry = mount_entry(m.mountpoint());
        let (_, fstype, opts) = entry.unwrap_or_else(|| {
            panic!(
                "{mode:?}: mount exited 0 but {} is not in /proc/mounts",
                m.mnt.display()
            )
        });
        assert_eq!(fstype, "fuse.zonemount", "{mode:?}: fstype");
        for o in ["nosuid", "nodev"] {
            assert!(
                opts.split(',').any(|x| x == o),
                "{mode:?}: mount options lack {o}: {opts}"
            );
        }
        assert_eq!(names(m.mountpoint()).unwrap(), sorted(&["data", "ws"]));
        let (st, out, err) = m.sh("ls ws && ls data && cat ws/w.txt");
        assert!(st.success(), "{err}");
        assert_eq!(out, "w.txt\nd.txt\nw\n");
        // Sandboxed backing dirs were created on mount.
        assert!(m.backing("ws", "").is_dir());
    }
}

/// The transport is the one the kernel offers: io_uring where the fuse
/// module's enable_uring is on (the `uring` environment switches it on,
/// and then nothing else is acceptable), /dev/fuse otherwise; `status`
/// names it, and the mount works either way.
#[test]
fn the_transport_is_dev_fuse_unless_io_uring_is_asked_for() {
    if !fuse_ok() {
        return;
    }
    // The uring environment asks every mount for it (ZONEMOUNT_IO_URING=1,
    // enable_uring=Y); anywhere else a mount gets /dev/fuse, whatever the
    // kernel offers.
    let param = test_env() == "uring";
    if param {
        let on = std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring")
            .map(|v| v.trim() == "Y")
            .unwrap_or(false);
        assert!(on, "the uring environment runs with enable_uring=Y");
        assert_eq!(
            std::env::var("ZONEMOUNT_IO_URING").as_deref(),
            Ok("1"),
            "the uring environment asks for io_uring"
        );
    }
    let m = simple(Mode::Sandboxed).mount();
    let out = zonemount(
        m.mountpoint(),
        &["status", &m.mountpoint().to_string_lossy()],
    );
    assert!(out.success(), "status: {}", out.describe());
    let want = if param {
        "transport: io_uring"
    } else {
        "transport: /dev/fuse"
    };
    assert!(
        out.stdout.lines().any(|l| l.starts_with(want)),
        "status should say {want:?}:\n{}",
        out.stdout
    );
    let (st, text, err) = m.sh("echo x > ws/t && cat ws/t && rm ws/t && ls");
    assert!(st.success(), "{err}");
    assert_eq!(text, "x\ndata\nws\n");
}

/// A `/dev/fuse` mount polls for the next request for 50 µs after a reply
/// unless told otherwise (`--busy-poll US`, 0 turns it off, at most
/// 1000); `status` says so, and a mount that polls answers a burst of
/// requests as any other does.
#[test]
fn busy_polling_is_on_by_default_can_be_turned_off_and_is_bounded() {
    if !fuse_ok() {
        return;
    }
    let uring = test_env() == "uring";
    for (args, want) in [(&[][..], 50), (&["--busy-poll", "0"][..], 0)] {
        let mut setup = simple(Mode::Sandboxed);
        for a in args {
            setup = setup.arg(a);
        }
        let m = setup.mount();
        let mp = m.mountpoint().to_string_lossy().into_owned();
        let out = zonemount(m.mountpoint(), &["status", "--json", &mp]);
        assert!(out.success(), "status: {}", out.describe());
        let st: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        // Over io_uring there are no /dev/fuse threads to poll.
        let want = if uring { 0 } else { want };
        assert_eq!(st["io"]["busy_poll_us"], want, "{args:?}: {}", out.stdout);
        let text = zonemount(m.mountpoint(), &["status", &mp]);
        let line = text
            .stdout
            .lines()
            .find(|l| l.starts_with("transport: "))
            .unwrap_or_else(|| panic!("no transport line:\n{}", text.stdout))
            .to_owned();
        assert_eq!(
            line.contains(&format!("polls up to {want} µs")),
            want > 0,
            "{args:?}: {line}"
        );
        // A burst: 300 files made, read back and removed, every answer right.
        let (ok, got, err) = m.sh(
            "mkdir ws/burst && for i in $(seq 300); do echo $i > ws/burst/f$i; done; \
             n=0; for i in $(seq 300); do [ \"$(cat ws/burst/f$i)\" = $i ] && n=$((n+1)); done; \
             echo $n; ls ws/burst | wc -l; rm ws/burst/f* && rmdir ws/burst && echo gone",
        );
        assert!(ok.success(), "{args:?}: {err}");
        assert_eq!(got, "300\n300\ngone\n", "{args:?}");
    }
    // Out of bounds: refused before anything is mounted.
    for bad in ["1001", "x"] {
        let (out, _guard) = simple(Mode::Sandboxed)
            .arg("--busy-poll")
            .arg(bad)
            .try_mount();
        assert_eq!(out.code(), Some(2), "--busy-poll {bad}: {}", out.describe());
        assert!(out.stderr.contains("--busy-poll"), "{}", out.stderr);
    }
}

/// The CPU latency the kernel now keeps to (`/dev/cpu_dma_latency`
/// read: the least of all requests held, in µs).
fn cpu_latency_now() -> i32 {
    let v = fs::read("/dev/cpu_dma_latency").expect("reading /dev/cpu_dma_latency");
    i32::from_ne_bytes(v[..4].try_into().unwrap())
}

/// A root daemon keeps idle CPUs polling (a CPU latency request of 0 µs)
/// while requests come close together, on either transport, and lets them
/// halt again once they stop; `status` says which. An ordinary user's
/// daemon can't: `status` says why.
#[test]
fn idle_cpus_are_kept_polling_during_a_burst_and_let_go_after() {
    if !fuse_ok() {
        return;
    }
    let m = simple(Mode::Sandboxed).mount();
    let mp = m.mountpoint().to_string_lossy().into_owned();
    let io = || {
        let out = zonemount(m.mountpoint(), &["status", "--json", &mp]);
        assert!(out.success(), "status: {}", out.describe());
        let st: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        st["io"].clone()
    };
    if test_env() == "user" {
        let io = io();
        let off = io["idle_poll_off"].as_str().unwrap_or_default();
        assert!(
            off.starts_with("off: cannot open /dev/cpu_dma_latency") && off.ends_with("root can"),
            "{io}"
        );
        assert_eq!(io["idle_poll_held"], false, "{io}");
        return;
    }
    if !require(Need::Root) {
        return;
    }
    if !Path::new("/dev/cpu_dma_latency").exists() {
        if under_ci() {
            panic!("no /dev/cpu_dma_latency on this machine");
        }
        skip("no /dev/cpu_dma_latency");
        return;
    }
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        skip("one CPU: busy polling, and with it idle polling, is held back");
        return;
    }
    let quiet = io();
    assert_eq!(quiet["idle_poll_off"], serde_json::Value::Null, "{quiet}");
    assert_eq!(quiet["idle_poll_held"], false, "{quiet}");
    // A burst of creates, in the background (bounded: 20,000 files).
    let mut burst = Command::new("sh")
        .arg("-c")
        .arg("mkdir ws/burst && i=0; while [ $i -lt 20000 ]; do : > ws/burst/f$i; i=$((i+1)); done")
        .current_dir(m.mountpoint())
        .spawn()
        .unwrap();
    // Held, and the kernel has it (idle CPUs keep to a latency of 0 µs).
    // Both are looked at while requests may thin out for a moment (it is
    // given back then), so each is looked at until seen once.
    let t0 = std::time::Instant::now();
    let (mut held, mut kernel) = (false, false);
    while !(held && kernel) && t0.elapsed() < Duration::from_secs(20) {
        held |= io()["idle_poll_held"] == true;
        kernel |= cpu_latency_now() == 0;
        if burst.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let done = burst.wait().unwrap();
    assert!(done.success(), "the burst failed: {done}");
    assert!(held, "never held during the burst");
    assert!(kernel, "the kernel never kept to 0 µs during the burst");
    // Given back within a few periods of the last request.
    let t0 = std::time::Instant::now();
    while io()["idle_poll_held"] == true && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(io()["idle_poll_held"], false);
    let text = zonemount(m.mountpoint(), &["status", &mp]);
    assert!(
        text.stdout
            .contains("idle CPUs poll while requests come close together (now not held)"),
        "{}",
        text.stdout
    );
    // With --busy-poll 0, never.
    let m0 = simple(Mode::Sandboxed).arg("--busy-poll").arg("0").mount();
    let mp0 = m0.mountpoint().to_string_lossy().into_owned();
    let out = zonemount(m0.mountpoint(), &["status", "--json", &mp0]);
    let st: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        st["io"]["idle_poll_off"], "off: busy polling is off (--busy-poll 0)",
        "{}",
        out.stdout
    );
}

/// A CPU cgroup this test made, with a quota; on drop (panics too) the
/// processes moved in go back to its parent and it is removed.
struct QuotaCgroup {
    dir: PathBuf,
    parent: PathBuf,
}

impl QuotaCgroup {
    /// A cgroup under the machine's top CPU cgroup (v1 `cpu`, or v2 with
    /// the cpu controller) limited to `cpus` CPUs; None where there is
    /// no CPU cgroup to make one in.
    fn make(cpus: u32) -> Option<QuotaCgroup> {
        let name = format!("zonemount-test-{}", std::process::id());
        let v1 = Path::new("/sys/fs/cgroup/cpu");
        let v2 = Path::new("/sys/fs/cgroup");
        if v1.join("cpu.cfs_quota_us").exists() {
            let dir = v1.join(&name);
            fs::create_dir(&dir).ok()?;
            let cg = QuotaCgroup {
                dir,
                parent: v1.to_path_buf(),
            };
            fs::write(cg.dir.join("cpu.cfs_period_us"), "100000").ok()?;
            fs::write(
                cg.dir.join("cpu.cfs_quota_us"),
                format!("{}", cpus * 100_000),
            )
            .ok()?;
            return Some(cg);
        }
        let controllers = fs::read_to_string(v2.join("cgroup.controllers")).ok()?;
        if !controllers.split_whitespace().any(|c| c == "cpu") {
            return None;
        }
        fs::write(v2.join("cgroup.subtree_control"), "+cpu").ok()?;
        let dir = v2.join(&name);
        fs::create_dir(&dir).ok()?;
        let cg = QuotaCgroup {
            dir,
            parent: v2.to_path_buf(),
        };
        fs::write(cg.dir.join("cpu.max"), format!("{} 100000", cpus * 100_000)).ok()?;
        Some(cg)
    }

    fn enter(&self, pid: u32) {
        fs::write(self.dir.join("cgroup.procs"), pid.to_string())
            .unwrap_or_else(|e| panic!("moving {pid} into {}: {e}", self.dir.display()));
    }

    fn leave(&self, pid: u32) {
        fs::write(self.parent.join("cgroup.procs"), pid.to_string())
            .unwrap_or_else(|e| panic!("moving {pid} out of {}: {e}", self.dir.display()));
    }
}

impl Drop for QuotaCgroup {
    fn drop(&mut self) {
        if let Ok(procs) = fs::read_to_string(self.dir.join("cgroup.procs")) {
            for pid in procs.lines() {
                let _ = fs::write(self.parent.join("cgroup.procs"), pid);
            }
        }
        let _ = fs::remove_dir(&self.dir);
    }
}

/// Under a cgroup CPU quota below the CPUs the daemon may run on, time
/// spent polling would count against the quota: its `/dev/fuse` threads
/// stop polling, `status` says why, requests are answered as before, and
/// out of that cgroup it polls again.
#[test]
fn busy_polling_stops_under_a_cpu_quota_below_the_daemons_cpus() {
    if !fuse_ok() || !require(Need::Root) {
        return;
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
    if cpus < 2 {
        skip("one CPU: a daemon on it never polls, quota or not");
        return;
    }
    let Some(cg) = QuotaCgroup::make(cpus - 1) else {
        if under_ci() {
            panic!("no CPU cgroup to make (cgroup v1 `cpu` or v2 with the cpu controller)");
        }
        skip("no CPU cgroup to make");
        return;
    };
    let uring = test_env() == "uring";
    let m = simple(Mode::Sandboxed).mount();
    let mp = m.mountpoint().to_string_lossy().into_owned();
    let transport = || {
        let out = zonemount(m.mountpoint(), &["status", &mp]);
        assert!(out.success(), "status: {}", out.describe());
        out.stdout
            .lines()
            .find(|l| l.starts_with("transport: "))
            .unwrap_or_else(|| panic!("no transport line:\n{}", out.stdout))
            .to_owned()
    };
    // `--json` carries the same reason as `io.busy_poll_off`.
    let poll_off = || {
        let out = zonemount(m.mountpoint(), &["status", "--json", &mp]);
        assert!(out.success(), "status: {}", out.describe());
        let st: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        st["io"]["busy_poll_off"].as_str().map(str::to_owned)
    };
    // Idle polling is held back with it, on either transport (where the
    // device is there to ask through).
    let idle_off = || {
        let out = zonemount(m.mountpoint(), &["status", "--json", &mp]);
        let st: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        st["io"]["idle_poll_off"].as_str().map(str::to_owned)
    };
    let device = Path::new("/dev/cpu_dma_latency").exists();
    let why = format!(
        "off: its cgroup's CPU quota ({}.00 CPUs) is below the {cpus} CPUs it may run on",
        cpus - 1
    );
    let held = format!("(now {why})");
    assert!(!transport().contains("now off"), "{}", transport());
    assert_eq!(poll_off(), None);
    let daemon = daemon_pids_for(m.mountpoint());
    assert_eq!(daemon.len(), 1, "one daemon serves the mount: {daemon:?}");
    cg.enter(daemon[0]);
    let line = transport();
    // Over io_uring there is no polling to hold back.
    assert_eq!(line.contains(&held), !uring, "{line}");
    assert_eq!(poll_off(), (!uring).then(|| why.clone()));
    if device {
        assert_eq!(idle_off(), Some(why.clone()));
    }
    // The serving threads read the quota again within a second.
    std::thread::sleep(Duration::from_millis(1200));
    let (ok, got, err) = m.sh(
        "mkdir ws/q && for i in $(seq 200); do echo $i > ws/q/f$i; done; \
         cat ws/q/f* | wc -l; rm ws/q/f* && rmdir ws/q && echo gone",
    );
    assert!(ok.success(), "{err}");
    assert_eq!(got, "200\ngone\n");
    cg.leave(daemon[0]);
    assert!(!transport().contains("now off"), "{}", transport());
    assert_eq!(poll_off(), None);
    if device {
        assert_eq!(idle_off(), None);
    }
}

#[test]
fn unmount_waits_for_the_daemon() {
    if !fuse_ok() {
        return;
    }
    let mut m = simple(Mode::Sandboxed).mount();
    fs::write(m.path("ws/new.txt"), "n").unwrap();
    let out = m.unmount();
    assert!(out.success(), "unmount: {}", out.describe());
    // No polling: when unmount returns, the mount and its daemon are gone.
    assert!(
        !m.is_mounted(),
        "still in /proc/mounts after unmount returned"
    );
    let pids = daemon_pids_for(m.mountpoint());
    assert!(
        pids.is_empty(),
        "daemon still running after unmount returned: {pids:?}"
    );
    // The mountpoint is an ordinary empty dir again; the data stayed.
    assert!(names(m.mountpoint()).unwrap().is_empty());
    assert_eq!(fs::read_to_string(m.backing("ws", "new.txt")).unwrap(), "n");
    assert_eq!(fs::read_to_string(m.backing("ws", "w.txt")).unwrap(), "w\n");
}

/// A live daemon started under another name (the binary linked or copied
/// as `zm`; a symlink would not do, the daemon runs as what it points to)
/// is not stale: `list` shows it live, and `unmount --stale`, which
/// anyone may run, leaves it mounted.
#[test]
fn a_live_daemon_under_another_name_is_not_stale() {
    if !fuse_ok() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(tmp.path()).unwrap();
    let (mnt, ws) = (root.join("mnt"), root.join("ws"));
    fs::create_dir(&mnt).unwrap();
    fs::create_dir(&ws).unwrap();
    if fs::hard_link(BIN, root.join("zm")).is_err() {
        fs::copy(BIN, root.join("zm")).unwrap();
    }
    /// Unmounts the exact path, also when the test fails.
    struct Guard(PathBuf);
    impl Drop for Guard {
        fn drop(&mut self) {
            cleanup_mount(&self.0, true);
        }
    }
    let _guard = Guard(mnt.clone());
    let zone = format!("ws={}:rw", ws.display());
    // A copy just written may be refused for a moment (ETXTBSY): another
    // thread of this test process forking then holds its write fd until
    // that child's exec.
    let mut tries = 0;
    let out = loop {
        match try_run(
            Command::new(root.join("zm"))
                .args(["mount", "-q", "--zone", &zone])
                .arg(&mnt)
                .current_dir(&root),
            MOUNT_TIMEOUT,
        ) {
            Err(e) if e.contains("Text file busy") && tries < 50 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            r => break r.unwrap_or_else(|e| panic!("{e}")),
        }
    };
    assert!(out.success(), "zm mount: {}", out.describe());
    assert!(wait_mounted(&mnt));
    let listed = zonemount(&root, &["list", "--json"]);
    let rows: serde_json::Value = serde_json::from_str(&listed.stdout).unwrap();
    let row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["mountpoint"] == mnt.to_str().unwrap())
        .unwrap_or_else(|| panic!("not listed: {}", listed.stdout));
    assert_eq!(row["stale"], false, "{row}");
    let out = zonemount(&root, &["unmount", "--stale"]);
    assert!(out.success(), "{}", out.describe());
    assert!(
        is_mounted(&mnt),
        "unmount --stale took a live mount: {}",
        out.describe()
    );
    fs::write(mnt.join("ws/still.txt"), "here").unwrap();
    assert_eq!(fs::read_to_string(ws.join("still.txt")).unwrap(), "here");
}

#[test]
fn unmount_of_unmounted_path_is_ok_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let out = zonemount(dir.path(), &["unmount", &dir.path().to_string_lossy()]);
    assert!(out.success(), "unmount of a plain dir: {}", out.describe());
    assert!(
        !(out.stdout.trim().is_empty() && out.stderr.trim().is_empty()),
        "unmount of an unmounted path should say so"
    );
    assert!(!out.stderr.contains("panicked"));
}

/// A path that does not exist is no mountpoint (a typo, not "already
/// unmounted"), and a mount that is not ours is left alone: both exit 2,
/// as `unmount --help` says, and touch nothing.
#[test]
fn unmount_of_a_missing_path_or_a_foreign_mount_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let gone = dir.path().join("no-such-dir");
    let out = zonemount(dir.path(), &["unmount", &gone.to_string_lossy()]);
    assert_eq!(out.code(), Some(2), "{}", out.describe());
    assert_eq!(
        out.stderr.trim(),
        format!(
            "zonemount: {} does not exist, so nothing is mounted there: not a mountpoint",
            gone.display()
        )
    );
    let out = zonemount(dir.path(), &["unmount", "/proc"]);
    assert_eq!(out.code(), Some(2), "{}", out.describe());
    assert_eq!(
        out.stderr.trim(),
        "zonemount: /proc is a proc mount, not a zonemount mount: not touching it"
    );
    assert!(Path::new("/proc/self").exists());
    let help = zonemount(dir.path(), &["unmount", "--help"]);
    assert!(
        help.stdout.contains(
            "2 bad usage, a path that does not\nexist, or a mount that is not a zonemount mount"
        ),
        "{}",
        help.stdout
    );
}

/// A directory above a root mount that someone else may change (here a
/// 0777 one) is renamed and a symlink to another mount's parent put in its
/// place: neither `zonemount unmount` of the old path nor a SIGTERM to the
/// daemon unmounts what the path now leads to (a tmpfs), and the daemon
/// still takes its own mount down where it now is.
#[test]
fn a_renamed_path_never_turns_an_unmount_onto_another_mount() {
    if !fuse_ok() || !root_ok() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let (owned, other) = (t.join("owned"), t.join("other"));
    let back = t.join("back");
    for d in [owned.join("u/mnt"), other.join("mnt"), back.clone()] {
        fs::create_dir_all(d).unwrap();
    }
    fs::set_permissions(&owned, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let victim = other.join("mnt");
    let st = run(
        Command::new("mount")
            .args(["-t", "tmpfs", "zm-test-victim"])
            .arg(&victim),
        Duration::from_secs(10),
    );
    assert!(st.success(), "{}", st.describe());
    struct Down(Vec<PathBuf>);
    impl Drop for Down {
        fn drop(&mut self) {
            for p in &self.0 {
                cleanup_mount(p, true);
            }
        }
    }
    let mnt = owned.join("u/mnt");
    let moved = owned.join("u2/mnt");
    let _down = Down(vec![mnt.clone(), moved.clone(), victim.clone()]);
    fs::write(victim.join("marker"), "victim").unwrap();
    let zone = format!("w={}:rw", back.display());
    let out = zonemount(t, &["mount", "-q", "--zone", &zone, mnt.to_str().unwrap()]);
    assert!(out.success(), "{}", out.describe());
    let (pid, _) = record_and_socket(&mnt);
    fs::rename(owned.join("u"), owned.join("u2")).unwrap();
    std::os::unix::fs::symlink(&other, owned.join("u")).unwrap();

    let out = zonemount(t, &["unmount", mnt.to_str().unwrap()]);
    assert!(!out.success(), "{}", out.describe());
    assert!(
        is_mounted(&victim),
        "unmount of the old path took the tmpfs down"
    );
    assert!(is_mounted(&moved), "{}", out.describe());

    let _ = run(
        Command::new("kill").arg("-TERM").arg(pid.to_string()),
        Duration::from_secs(5),
    );
    assert!(
        wait_unmounted(&moved),
        "the daemon left its own mount at {}",
        moved.display()
    );
    assert!(
        wait_until(MOUNT_TIMEOUT, || !Path::new(&format!("/proc/{pid}"))
            .exists()),
        "the daemon did not exit"
    );
    assert!(
        is_mounted(&victim),
        "the daemon's unmount took the tmpfs down"
    );
    assert_eq!(fs::read_to_string(victim.join("marker")).unwrap(), "victim");
}

/// A root mount whose control socket is `shared/sub/c.sock`, `shared`
/// being a directory others may write in; `victim` beside it holds what
/// `plant` puts there as `c.sock`. Once mounted, `sub` is renamed to
/// `sub.x` and a symlink to `victim` put in its place. Unmounted on drop.
struct SocketSwap {
    _tmp: tempfile::TempDir,
    shared: PathBuf,
    victim: PathBuf,
    mnt: PathBuf,
    pid: u32,
}

impl SocketSwap {
    fn start(plant: impl FnOnce(&Path)) -> SocketSwap {
        let tmp = tempfile::tempdir().unwrap();
        let t = tmp.path().to_path_buf();
        let (shared, victim, back, mnt) = (
            t.join("shared"),
            t.join("victim"),
            t.join("back"),
            t.join("mnt"),
        );
        for d in [
            shared.join("sub"),
            victim.clone(),
            back.clone(),
            mnt.clone(),
        ] {
            fs::create_dir_all(d).unwrap();
        }
        fs::set_permissions(&shared, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
        plant(&victim.join("c.sock"));
        let zone = format!("w={}:rw", back.display());
        let sock = shared.join("sub/c.sock");
        let out = zonemount(
            &t,
            &[
                "mount",
                "-q",
                "--zone",
                &zone,
                "--control",
                sock.to_str().unwrap(),
                mnt.to_str().unwrap(),
            ],
        );
        let (pid, _) = match out.success() {
            true => record_and_socket(&mnt),
            false => {
                cleanup_mount(&mnt, true);
                panic!("{}", out.describe());
            }
        };
        fs::rename(shared.join("sub"), shared.join("sub.x")).unwrap();
        std::os::unix::fs::symlink(&victim, shared.join("sub")).unwrap();
        SocketSwap {
            _tmp: tmp,
            shared,
            victim,
            mnt,
            pid,
        }
    }
}

impl Drop for SocketSwap {
    fn drop(&mut self) {
        cleanup_mount(&self.mnt, true);
    }
}

/// The control socket's directory renamed and a symlink to another
/// directory put in its place (by whoever may write above it): the
/// unmount removes the daemon's own socket where it now is, and nothing
/// where the path now leads (a file of the same name there stays).
#[test]
fn a_renamed_socket_dir_never_turns_its_removal_onto_another_file() {
    if !fuse_ok() || !root_ok() {
        return;
    }
    let w = SocketSwap::start(|at| fs::write(at, "precious").unwrap());
    let out = zonemount(&w.shared, &["unmount", w.mnt.to_str().unwrap()]);
    assert!(out.success(), "{}", out.describe());
    assert_eq!(
        fs::read_to_string(w.victim.join("c.sock")).unwrap(),
        "precious"
    );
    assert!(
        !w.shared.join("sub.x/c.sock").exists(),
        "the daemon's own socket was left in the renamed dir"
    );
}

/// The same swap before the daemon is SIGKILLed: its watcher removes
/// dead sockets only through their directory reached with no symlink, so
/// a dead socket of someone else's under the same name stays.
#[test]
fn a_renamed_socket_dir_never_turns_the_watchers_cleanup_onto_another_socket() {
    if !fuse_ok() || !root_ok() {
        return;
    }
    // A dead socket: bound, then closed.
    let w = SocketSwap::start(|at| drop(std::os::unix::net::UnixListener::bind(at).unwrap()));
    let _ = run(
        Command::new("kill").arg("-KILL").arg(w.pid.to_string()),
        Duration::from_secs(5),
    );
    assert!(wait_unmounted(&w.mnt), "the watcher left the dead mount");
    assert!(
        wait_until(MOUNT_TIMEOUT, || watcher_pids_for(&w.mnt).is_empty()),
        "the watcher did not finish"
    );
    assert!(
        fs::symlink_metadata(w.victim.join("c.sock")).is_ok(),
        "the watcher removed another dead socket"
    );
}

#[test]
fn two_mounts_at_once_are_independent() {
    if !fuse_ok() {
        return;
    }
    let mut a = Setup::zones(Mode::Sandboxed, &[("alpha", "mode: rw")]).mount();
    let b = Setup::zones(Mode::Direct, &[("beta", "mode: rw"), ("gamma", "mode: ro")])
        .file("gamma", "g", "g")
        .mount();
    assert_eq!(names(a.mountpoint()).unwrap(), sorted(&["alpha"]));
    assert_eq!(names(b.mountpoint()).unwrap(), sorted(&["beta", "gamma"]));
    fs::write(a.path("alpha/x"), "from a").unwrap();
    fs::write(b.path("beta/x"), "from b").unwrap();
    assert_eq!(
        fs::read_to_string(a.backing("alpha", "x")).unwrap(),
        "from a"
    );
    assert_eq!(
        fs::read_to_string(b.backing("beta", "x")).unwrap(),
        "from b"
    );
    assert_errno(fs::write(b.path("gamma/x"), "no"), EROFS);
    // Unmounting one leaves the other serving.
    let out = a.unmount();
    assert!(out.success(), "{}", out.describe());
    assert!(!a.is_mounted());
    assert!(b.is_mounted());
    assert_eq!(fs::read_to_string(b.path("beta/x")).unwrap(), "from b");
    fs::write(b.path("beta/y"), "still").unwrap();
    assert_eq!(fs::read_to_string(b.backing("beta", "y")).unwrap(), "still");
}

// ----- failures: one line, exit 1 or 2, nothing mounted

#[test]
fn error_mountpoint_missing() {
    if !fuse_ok() {
        return;
    }
    let (out, m) = simple(Mode::Sandboxed)
        .mountpoint("does/not/exist", false)
        .try_mount();
    assert_one_line_error(&out, &[1, 2], "missing mountpoint");
    assert!(!m.is_mounted());
}

#[test]
fn error_mountpoint_already_mounted() {
    if !fuse_ok() {
        return;
    }
    let m = simple(Mode::Sandboxed).mount();
    let config = m.root().join("project.yaml");
    let out = run(
        Command::new(BIN)
            .arg("mount")
            .arg("--config")
            .arg(&config)
            .arg(m.mountpoint())
            .current_dir(m.root()),
        Duration::from_secs(30),
    );
    // If it wrongly mounted again, the guard's cleanup unmounts both.
    assert_one_line_error(&out, &[1, 2], "mount on a live mountpoint");
    assert_eq!(mount_count(m.mountpoint()), 1, "mounts stacked on one path");
    assert_eq!(fs::read_to_string(m.path("ws/w.txt")).unwrap(), "w\n");
}

#[test]
fn error_mountpoint_inside_a_backing_dir() {
    if !fuse_ok() {
        return;
    }
    for mode in [Mode::Sandboxed, Mode::Direct] {
        let rel = format!("{}/mnt", backing_rel(mode, "ws"));
        let s = simple(mode).mountpoint(&rel, true);
        let (out, m) = s.try_mount();
        assert_one_line_error(
            &out,
            &[1, 2],
            &format!("{mode:?}: mountpoint inside ws's backing dir"),
        );
        assert!(!m.is_mounted());
    }
}

#[test]
fn error_backing_dir_inside_the_mountpoint() {
    if !fuse_ok() {
        return;
    }
    let s = Setup::new(
        "sandbox:\n  mode: direct\n  zones:\n    inner: { path: \"{TMP}/mnt/inner\", mode: rw }\n",
    );
    fs::create_dir_all(s.root().join("mnt/inner")).unwrap();
    let (out, m) = s.try_mount();
    assert_one_line_error(&out, &[1, 2], "backing dir inside the mountpoint");
    assert!(!m.is_mounted());

    // Sandboxed: the config dir's .sandbox is the mountpoint's parent's child.
    let s = Setup::new(
        "sandbox:\n  mode: sandboxed\n  root: mnt/.sandbox\n  zones:\n    ws: { mode: rw }\n",
    );
    let (out, m) = s.try_mount();
    assert_one_line_error(&out, &[1, 2], "sandbox root inside the mountpoint");
    assert!(!m.is_mounted());
}

#[test]
fn error_direct_backing_dir_missing() {
    if !fuse_ok() {
        return;
    }
    let yaml = "sandbox:\n  mode: direct\n  zones:\n    gone: { path: \"{TMP}/nope\", mode: rw }\n";
    let (out, m) = Setup::new(yaml).try_mount();
    assert_one_line_error(&out, &[2], "direct-mode path missing");
    assert_names_file_line(&out, "project.yaml", 4, "direct-mode path missing");
    assert!(!m.is_mounted());
    assert!(
        !m.root().join("nope").exists(),
        "direct mode must not create the dir"
    );
}

#[test]
fn error_bad_config_names_file_and_line() {
    if !fuse_ok() {
        return;
    }
    let cases: &[(&str, &str, u32)] = &[
        (
            "unknown key in sandbox",
            "sandbox:\n  mode: sandboxed\n  zones:\n    ws: { mode: rw }\n  bogus: 1\n",
            5,
        ),
        (
            "unknown key in a zone",
            "sandbox:\n  mode: sandboxed\n  zones:\n    ws: { mode: rw }\n    data:\n      mode: ro\n      colour: red\n",
            7,
        ),
        (
            "bad zone name",
            "sandbox:\n  mode: sandboxed\n  zones:\n    ws: { mode: rw }\n    \"..\": { mode: ro }\n",
            5,
        ),
        (
            "bad zone name with a slash",
            "sandbox:\n  mode: sandboxed\n  zones:\n    \"a/b\": { mode: rw }\n",
            4,
        ),
        (
            "bad mode",
            "sandbox:\n  mode: sandboxed\n  zones:\n    ws: { mode: rx }\n",
            4,
        ),
        (
            "bad approval",
            "sandbox:\n  mode: sandboxed\n  zones:\n    ws:\n      mode: rw\n      approval: { write: maybe }\n",
            6,
        ),
        (
            "two sandbox sections (the second must not be dropped)",
            "sandbox:\n  zones:\n    ws: { mode: ro }\nmodel: x\nsandbox:\n  zones:\n    ws: { mode: rw }\n",
            5,
        ),
    ];
    for (ctx, yaml, line) in cases {
        let (out, m) = Setup::new(yaml).try_mount();
        assert_one_line_error(&out, &[2], ctx);
        assert_names_file_line(&out, "project.yaml", *line, ctx);
        assert!(!m.is_mounted(), "{ctx}");
    }
    // Broken YAML: exit 2, names the file.
    let (out, m) = Setup::new("sandbox:\n  zones: [unclosed\n").try_mount();
    assert_one_line_error(&out, &[2], "yaml syntax error");
    assert!(out.stderr.contains("project.yaml"), "{}", out.describe());
    assert!(!m.is_mounted());
    // A config file that doesn't exist.
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let out = zonemount(
        dir.path(),
        &["mount", "--config", "missing.yaml", &mnt.to_string_lossy()],
    );
    assert_one_line_error(&out, &[2], "missing config file");
    assert!(out.stderr.contains("missing.yaml"), "{}", out.describe());
    assert!(!is_mounted(&mnt));
}

#[test]
fn error_bad_usage_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let out = zonemount(dir.path(), &["mount"]);
    assert_eq!(
        out.code(),
        Some(2),
        "mount without a mountpoint: {}",
        out.describe()
    );
    let out = zonemount(dir.path(), &["frobnicate"]);
    assert_eq!(out.code(), Some(2), "unknown command: {}", out.describe());
    let out = zonemount(dir.path(), &["mount", "--no-such-flag", "x"]);
    assert_eq!(out.code(), Some(2), "unknown flag: {}", out.describe());
    assert!(!out.stderr.contains("panicked"));
}

/// A mountpoint that holds files is refused (exit 2, naming --nonempty),
/// touching nothing; with --nonempty the mount hides them until unmounted,
/// and they are there again after.
#[test]
fn a_non_empty_mountpoint_is_refused_unless_nonempty() {
    if !fuse_ok() {
        return;
    }
    let setup = |nonempty: bool| {
        let s = Setup::zones(Mode::Sandboxed, &[("ws", "mode: rw")]);
        let s = if nonempty { s.arg("--nonempty") } else { s };
        let mnt = s.root().join("mnt");
        fs::create_dir_all(&mnt).unwrap();
        fs::write(mnt.join("keep.txt"), "mine\n").unwrap();
        (s, mnt)
    };
    let (s, mnt) = setup(false);
    let (out, m) = s.try_mount();
    assert_one_line_error(&out, &[2], "non-empty mountpoint");
    assert!(
        out.stderr.contains(&format!(
            "mountpoint {} is not empty: the mount would hide what it holds until unmounted; choose an empty directory, or add --nonempty to mount over it anyway",
            mnt.display()
        )),
        "{}",
        out.describe()
    );
    assert!(!m.is_mounted());
    assert_eq!(names(&mnt).unwrap(), ["keep.txt"]);
    assert!(
        !m.backing("ws", "").exists(),
        "nothing made for a refused mount"
    );

    let (s, mnt) = setup(true);
    let mut m = s.mount();
    assert_eq!(names(&mnt).unwrap(), ["ws"]);
    let out = m.unmount();
    assert!(out.success(), "{}", out.describe());
    assert_eq!(fs::read_to_string(mnt.join("keep.txt")).unwrap(), "mine\n");
}

// ----- --foreground and signals

fn foreground_signal(signal: &str) {
    if !fuse_ok() {
        return;
    }
    let s = simple(Mode::Sandboxed);
    let root = s.root().to_path_buf();
    let config = root.join("project.yaml");
    let mnt = root.join("mnt");
    let yaml = zones_yaml(Mode::Sandboxed, &[("ws", "mode: rw"), ("data", "mode: ro")]);
    fs::write(&config, yaml).unwrap();
    fs::create_dir_all(&mnt).unwrap();
    let mut fg = Foreground::spawn(&root, Some(&config), &[], &mnt);
    let live = wait_until(MOUNT_TIMEOUT, || {
        is_mounted(&mnt) || matches!(fg.child.try_wait(), Ok(Some(_)))
    });
    assert!(
        live && is_mounted(&mnt),
        "--foreground never mounted: {:?}",
        fg.output()
    );
    assert!(
        matches!(fg.child.try_wait(), Ok(None)),
        "--foreground must stay attached while mounted"
    );
    fs::write(mnt.join("ws/fg.txt"), "fg").unwrap();
    let out = run(
        Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(fg.pid().to_string()),
        Duration::from_secs(5),
    );
    assert!(out.success(), "kill: {}", out.describe());
    let status = wait_child(&mut fg.child, Duration::from_secs(15))
        .unwrap_or_else(|| panic!("daemon did not exit within 15 s of SIG{signal}"));
    assert_eq!(
        status.code(),
        Some(0),
        "exit after SIG{signal}: {status:?} {:?}",
        fg.output()
    );
    assert!(!is_mounted(&mnt), "mount left behind after SIG{signal}");
    assert_eq!(
        fs::read_to_string(root.join(".sandbox/ws/fg.txt")).unwrap(),
        "fg"
    );
    drop(fg);
    drop(s);
}

#[test]
fn foreground_sigterm_unmounts_and_exits_0() {
    foreground_signal("TERM");
}

#[test]
fn foreground_sigint_unmounts_and_exits_0() {
    foreground_signal("INT");
}

/// The record and control socket of the mount at `mnt` (as this user's
/// registry has them).
fn record_and_socket(mnt: &Path) -> (u32, PathBuf) {
    let rec = zonemount::mount::find_record(mnt)
        .unwrap_or_else(|| panic!("no registry record for {}", mnt.display()));
    let sock = rec.control.expect("the record names the control socket");
    assert!(sock.exists(), "{} missing while live", sock.display());
    (rec.pid, sock)
}

#[test]
fn killed_daemon_leaves_no_mount() {
    if !fuse_ok() {
        return;
    }
    let m = simple(Mode::Sandboxed).mount();
    let (pid, sock) = record_and_socket(m.mountpoint());
    assert_eq!(
        daemon_pids_for(m.mountpoint()),
        [pid],
        "the record's pid is the daemon's"
    );
    // Used first, as a worker would: the kernel then has the root's
    // attributes cached, and a stat of the dead mount still succeeds.
    fs::metadata(m.mountpoint()).expect("stat the mount's root");
    assert!(fs::read_dir(m.mountpoint()).expect("list the root").count() > 0);
    assert!(
        wait_until(MOUNT_TIMEOUT, || watcher_pids_for(m.mountpoint()).len()
            == 2),
        "a watcher and its guard per mount: {:?}",
        watcher_pids_for(m.mountpoint())
    );
    let _ = run(
        Command::new("kill").arg("-KILL").arg(pid.to_string()),
        Duration::from_secs(5),
    );
    // The watcher unmounts the dead mount (umount2 as root, fusermount3
    // -u -z as a user) and removes the socket and the record.
    assert!(
        wait_unmounted(m.mountpoint()),
        "SIGKILLed daemon left {} mounted",
        m.mnt.display()
    );
    assert!(
        wait_until(MOUNT_TIMEOUT, || !sock.exists()
            && zonemount::mount::find_record(m.mountpoint()).is_none()
            && watcher_pids_for(m.mountpoint()).is_empty()),
        "left behind: socket {} {}, record {:?}, watcher {:?}",
        sock.display(),
        sock.exists(),
        zonemount::mount::find_record(m.mountpoint()).map(|r| r.pid),
        watcher_pids_for(m.mountpoint())
    );
}

/// A mount made again at once on the mountpoint of a SIGKILLed daemon
/// (its dead mount detached by hand) keeps its record when the dead
/// daemon's watcher cleans up after it: the watcher removed the record at
/// that path whoever had written it, and the CLI then called the live
/// mount "not a live zonemount mount" (found by an attack pass).
#[test]
fn a_mount_made_again_at_once_keeps_its_record() {
    if !fuse_ok() || !root_ok() {
        return;
    }
    let m = simple(Mode::Sandboxed).mount();
    let (pid, _) = record_and_socket(m.mountpoint());
    let _ = wait_until(Duration::from_secs(5), || {
        watcher_pids_for(m.mountpoint()).len() == 2
    });
    // The old watcher and its guard held still until the new mount is up,
    // so that they clean up after it: what a loaded machine does by chance.
    let old: Vec<String> = watcher_pids_for(m.mountpoint())
        .iter()
        .map(u32::to_string)
        .collect();
    assert_eq!(old.len(), 2, "a watcher and its guard: {old:?}");
    let signal = |sig: &str, pids: &[String]| {
        let out = run(
            Command::new("kill").arg(sig).args(pids),
            Duration::from_secs(5),
        );
        assert!(out.success(), "kill {sig}: {}", out.describe());
    };
    signal("-STOP", &old);
    signal("-KILL", &[pid.to_string()]);
    let _ = run(
        Command::new("umount").arg("-l").arg(m.mountpoint()),
        Duration::from_secs(5),
    );
    let out = m.mount_again_staged();
    signal("-CONT", &old);
    assert!(out.success(), "remount: {}", out.describe());
    let gone = |p: &String| !Path::new(&format!("/proc/{p}")).exists();
    assert!(
        wait_until(MOUNT_TIMEOUT, || old.iter().all(gone)),
        "the dead daemon's watcher stayed: {old:?}"
    );
    let rec = zonemount::mount::find_record(m.mountpoint());
    assert!(
        rec.as_ref().is_some_and(|r| r.pid != pid),
        "the new mount's record: {:?}",
        rec.map(|r| r.pid)
    );
    let st = m.zonemount(&["status", &m.mountpoint().display().to_string()]);
    assert!(st.success(), "{}", st.describe());
}

/// The daemon and its watcher SIGKILLed by one `kill`: the watcher's
/// guard takes its place, unmounts the dead mount and removes the socket
/// and the record; then nothing of the mount is left running.
#[test]
fn killed_daemon_and_watcher_together_leave_no_mount() {
    if !fuse_ok() {
        return;
    }
    let m = simple(Mode::Sandboxed).mount();
    let (pid, sock) = record_and_socket(m.mountpoint());
    fs::metadata(m.mountpoint()).expect("stat the mount's root");
    // The guard is the watcher's fork, made as it starts, and named as
    // its first step: let it be there and named (what counts is the
    // outcome below; under load a guard not yet renamed looked like a
    // second watcher).
    let _ = wait_until(Duration::from_secs(5), || {
        let pids = watcher_pids_for(m.mountpoint());
        pids.len() == 2 && pids.iter().any(|&p| comm(p) == GUARD_COMM)
    });
    let watcher: Vec<u32> = watcher_pids_for(m.mountpoint())
        .into_iter()
        .filter(|&w| comm(w) == WATCHER_COMM)
        .collect();
    assert_eq!(watcher.len(), 1, "one watcher: {watcher:?}");
    let out = run(
        Command::new("kill")
            .arg("-KILL")
            .arg(pid.to_string())
            .arg(watcher[0].to_string()),
        Duration::from_secs(5),
    );
    assert!(out.success(), "{}", out.describe());
    assert!(
        wait_unmounted(m.mountpoint()),
        "daemon and watcher SIGKILLed together left {} mounted",
        m.mnt.display()
    );
    assert!(
        wait_until(MOUNT_TIMEOUT, || !sock.exists()
            && zonemount::mount::find_record(m.mountpoint()).is_none()
            && watcher_pids_for(m.mountpoint()).is_empty()
            && daemon_pids_for(m.mountpoint()).is_empty()),
        "left behind: socket {} {}, record {:?}, watchers {:?}",
        sock.display(),
        sock.exists(),
        zonemount::mount::find_record(m.mountpoint()).map(|r| r.pid),
        watcher_pids_for(m.mountpoint())
    );
}

/// A clean unmount leaves no watcher and no guard running.
#[test]
fn a_clean_unmount_stops_the_watcher_and_its_guard() {
    if !fuse_ok() {
        return;
    }
    let mut m = simple(Mode::Sandboxed).mount();
    assert!(wait_until(MOUNT_TIMEOUT, || watcher_pids_for(
        m.mountpoint()
    )
    .len()
        == 2));
    let out = m.unmount();
    assert!(out.success(), "{}", out.describe());
    assert!(
        wait_until(MOUNT_TIMEOUT, || watcher_pids_for(m.mountpoint())
            .is_empty()),
        "left running: {:?}",
        watcher_pids_for(m.mountpoint())
    );
}

#[test]
fn unmount_stale_leaves_no_socket_and_no_record() {
    if !fuse_ok() {
        return;
    }
    let m = simple(Mode::Sandboxed).mount();
    let (pid, sock) = record_and_socket(m.mountpoint());
    // The watcher first, so nothing cleans up by itself: a stale mount as
    // an older zonemount (or a killed watcher) leaves it. Killed until none
    // is left: the watcher forks its guard a moment after the mount is
    // live, so one look may find the watcher alone (and miss the guard).
    assert!(wait_until(MOUNT_TIMEOUT, || {
        let left = watcher_pids_for(m.mountpoint());
        for w in &left {
            let _ = run(
                Command::new("kill").arg("-KILL").arg(w.to_string()),
                Duration::from_secs(5),
            );
        }
        left.is_empty()
    }));
    let _ = run(
        Command::new("kill").arg("-KILL").arg(pid.to_string()),
        Duration::from_secs(5),
    );
    assert!(wait_until(MOUNT_TIMEOUT, || !daemon_pids_for(
        m.mountpoint()
    )
    .contains(&pid)));
    assert!(
        sock.exists(),
        "nobody cleaned: the socket stays until --stale"
    );
    let out = zonemount(m.root(), &["unmount", "--stale"]);
    assert!(out.success(), "unmount --stale: {}", out.describe());
    assert!(
        out.stderr.contains(&*m.mnt.to_string_lossy()),
        "{}",
        out.describe()
    );
    assert!(!m.is_mounted(), "--stale left the dead mount");
    assert!(
        !sock.exists(),
        "--stale left the dead socket {}",
        sock.display()
    );
    assert!(
        zonemount::mount::find_record(m.mountpoint()).is_none(),
        "--stale left the record"
    );
}

// ----- private mount namespaces, without fusermount3

/// Root with `unshare`, for a private mount namespace.
fn private_ns_ok() -> bool {
    fuse_ok() && root_ok() && tool_ok("unshare")
}

/// A project with a rw `ws` zone at `<ns>/project.yaml` and an empty
/// `<ns>/mnt`; the prelude of every namespace script below.
const NS_PRELUDE: &str = r#"
mnt="$PWD/mnt"
mkdir -p "$mnt"
printf 'sandbox:\n  mode: sandboxed\n  zones:\n    ws: { mode: rw }\n' > project.yaml
remember() { ps -eo pid=,args= | grep -F -- "$mnt" | grep -v grep | awk '{print $1}' >> "$ZM_PIDS"; }
mounted() { grep -c " $mnt " /proc/self/mounts; }
"#;

/// `key=value` lines of a script's stdout.
fn values(out: &str) -> std::collections::BTreeMap<String, String> {
    out.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[track_caller]
fn assert_value(out: &Out, key: &str, want: &str) {
    let v = values(&out.stdout);
    assert_eq!(
        v.get(key).map(String::as_str),
        Some(want),
        "{key}: {}",
        out.describe()
    );
}

#[test]
fn without_fusermount3_root_mounts_fuse_zonemount_and_every_command_knows_it() {
    if !private_ns_ok() {
        return;
    }
    let ns = PrivateNs::new(true);
    let out = ns.run(&format!(
        r#"{NS_PRELUDE}
"$ZONEMOUNT" mount --config project.yaml --no-approvals "$mnt" || exit 10
remember
trap '"$ZONEMOUNT" unmount "$mnt" >/dev/null 2>&1' EXIT
echo "source=$(grep " $mnt " /proc/self/mounts | cut -d' ' -f1)"
echo "type=$(grep " $mnt " /proc/self/mounts | cut -d' ' -f3)"
echo hi > "$mnt/ws/f" && echo "read=$(cat "$mnt/ws/f")"
"$ZONEMOUNT" status "$mnt" >/dev/null; echo "status=$?"
"$ZONEMOUNT" check "$mnt" "$mnt/ws/f" --write >/dev/null; echo "check=$?"
"$ZONEMOUNT" list --json > list.json; echo "list=$?"
"$ZONEMOUNT" unmount "$mnt"; echo "unmount=$?"
echo "left=$(mounted)"
"#
    ));
    assert!(out.success(), "{}", out.describe());
    assert_value(&out, "source", "zonemount");
    assert_value(&out, "type", "fuse.zonemount");
    assert_value(&out, "read", "hi");
    assert_value(&out, "status", "0");
    assert_value(&out, "check", "0");
    assert_value(&out, "unmount", "0");
    assert_value(&out, "left", "0");
    let list: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(ns.path().join("list.json")).unwrap()).unwrap();
    let mnt = ns.path().join("mnt");
    let row = list
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["mountpoint"].as_str() == Some(&*mnt.to_string_lossy()))
        .unwrap_or_else(|| panic!("{} not listed: {list}", mnt.display()));
    assert_eq!(row["stale"], false, "{row}");
    assert!(row["pid"].as_u64().is_some(), "{row}");
}

/// A mount namespace made while the mount exists (here `unshare -m`,
/// private propagation) holds a copy of it: unmounting here doesn't reach
/// that copy, so the daemon goes on serving it. `unmount` says so, naming
/// a process of that namespace; once that namespace ends, the daemon
/// exits.
#[test]
fn unmount_names_the_namespace_that_keeps_its_daemon_serving() {
    if !private_ns_ok() {
        return;
    }
    let ns = PrivateNs::new(false);
    let out = ns.run(&format!(
        r#"{NS_PRELUDE}
"$ZONEMOUNT" mount --config project.yaml --no-approvals "$mnt" || exit 10
remember
daemon=$(cat "$ZM_PIDS" | head -1)
unshare -m --propagation private sleep 60 &
copy=$!
echo "$copy" >> "$ZM_PIDS"
i=0; while [ "$(readlink /proc/$copy/ns/mnt)" = "$(readlink /proc/self/ns/mnt)" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done
echo "copy=$copy"
"$ZONEMOUNT" unmount "$mnt" 2> unmount.err; echo "unmount=$?"
echo "left=$(mounted)"
kill $copy; wait $copy
i=0; while kill -0 "$daemon" 2>/dev/null && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
kill -0 "$daemon" 2>/dev/null && echo "daemon=alive" || echo "daemon=gone"
"#
    ));
    assert!(out.success(), "{}", out.describe());
    let copy = values(&out.stdout)["copy"].clone();
    assert_value(&out, "unmount", "1");
    assert_value(&out, "left", "0");
    assert_value(&out, "daemon", "gone");
    let err = fs::read_to_string(ns.path().join("unmount.err")).unwrap();
    assert!(
        err.contains("has not exited after 10 s")
            && err.contains(&format!(
                "another mount namespace, that of pid {copy} (sleep),"
            )),
        "{err}"
    );
}

/// In a namespace (fusermount3 hidden or not): mount, SIGKILL the daemon,
/// and report whether the mount, its record and its socket went.
fn killed_daemon_in_a_namespace(hide_fusermount: bool) {
    if !private_ns_ok() {
        return;
    }
    let ns = PrivateNs::new(hide_fusermount);
    let out = ns.run(&format!(
        r#"{NS_PRELUDE}
"$ZONEMOUNT" mount --config project.yaml --no-approvals "$mnt" || exit 10
remember
trap 'umount -l "$mnt" 2>/dev/null' EXIT
rec=$(grep -l -F "\"$mnt\"" /run/zonemount/mounts/*.json)
sock=$(sed -n 's/.*"control": "\(.*\)".*/\1/p' "$rec")
pid=$(sed -n 's/.*"pid": \([0-9]*\).*/\1/p' "$rec")
echo "type=$(grep " $mnt " /proc/self/mounts | cut -d' ' -f3)"
[ -S "$sock" ] && echo "socket_before=yes"
kill -KILL "$pid"
i=0; while [ "$(mounted)" != 0 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
echo "left=$(mounted)"
i=0; while {{ [ -e "$rec" ] || [ -e "$sock" ]; }} && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
[ -e "$rec" ] && echo "record=left" || echo "record=gone"
[ -e "$sock" ] && echo "socket=left" || echo "socket=gone"
"#
    ));
    assert!(out.success(), "{}", out.describe());
    assert_value(&out, "type", "fuse.zonemount");
    assert_value(&out, "socket_before", "yes");
    assert_value(&out, "left", "0");
    assert_value(&out, "record", "gone");
    assert_value(&out, "socket", "gone");
}

#[test]
fn killed_daemon_leaves_nothing_without_fusermount3() {
    killed_daemon_in_a_namespace(true);
}

#[test]
fn killed_daemon_leaves_nothing_in_a_private_namespace() {
    killed_daemon_in_a_namespace(false);
}

#[test]
fn a_plain_fuse_mount_named_zonemount_is_still_recognised() {
    if !private_ns_ok() {
        return;
    }
    // What an older zonemount made as root without fusermount3 (type
    // `fuse`, source `zonemount`), here with its daemon already gone.
    let ns = PrivateNs::new(true);
    let out = ns.run(&format!(
        r#"{NS_PRELUDE}
exec 3<>/dev/fuse
mount -i -t fuse -o fd=3,rootmode=40000,user_id=0,group_id=0 zonemount "$mnt" || exit 11
exec 3>&-
trap 'umount -l "$mnt" 2>/dev/null' EXIT
echo "type=$(grep " $mnt " /proc/self/mounts | cut -d' ' -f3)"
"$ZONEMOUNT" list --json > list.json; echo "list=$?"
"$ZONEMOUNT" unmount "$mnt"; echo "unmount=$?"
echo "left=$(mounted)"
"#
    ));
    assert!(out.success(), "{}", out.describe());
    assert_value(&out, "type", "fuse");
    assert_value(&out, "unmount", "0");
    assert_value(&out, "left", "0");
    let list = fs::read_to_string(ns.path().join("list.json")).unwrap();
    let list: serde_json::Value = serde_json::from_str(&list).unwrap();
    let mnt = ns.path().join("mnt");
    let row = list
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["mountpoint"].as_str() == Some(&*mnt.to_string_lossy()))
        .unwrap_or_else(|| panic!("{} not listed: {list}", mnt.display()));
    assert_eq!(row["stale"], true, "a dead mount: {row}");
}

#[test]
fn the_watcher_never_unmounts_a_live_mount_on_top() {
    if !private_ns_ok() {
        return;
    }
    // A tmpfs mounted over the zonemount mount, then the daemon killed:
    // the path answers (it is the tmpfs), so the watcher leaves it be; the
    // dead mount below goes with the namespace.
    let ns = PrivateNs::new(true);
    let out = ns.run(&format!(
        r#"{NS_PRELUDE}
"$ZONEMOUNT" mount --config project.yaml --no-approvals "$mnt" || exit 10
remember
rec=$(grep -l -F "\"$mnt\"" /run/zonemount/mounts/*.json)
pid=$(sed -n 's/.*"pid": \([0-9]*\).*/\1/p' "$rec")
w=$(ps -eo pid=,comm=,args= | grep -F -- "$mnt" | awk '$2 == "zm-watch" {{print $1}}')
[ -n "$w" ] || exit 12
mount -t tmpfs zmtest "$mnt" || exit 11
trap 'umount "$mnt"; umount -l "$mnt" 2>/dev/null' EXIT
kill -KILL "$pid"
i=0; while [ -e "$rec" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
i=0; while kill -0 "$w" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
echo "watcher=$(kill -0 "$w" 2>/dev/null && echo alive || echo done)"
echo "record=$([ -e "$rec" ] && echo left || echo gone)"
echo "top=$(grep " $mnt " /proc/self/mounts | tail -1 | cut -d' ' -f3)"
echo "stack=$(mounted)"
"#
    ));
    assert!(out.success(), "{}", out.describe());
    assert_value(&out, "watcher", "done");
    assert_value(&out, "record", "gone");
    assert_value(&out, "top", "tmpfs");
    assert_value(&out, "stack", "2");
}

#[test]
fn list_in_a_private_namespace_shows_its_mounts_and_the_host_never_sees_them() {
    if !private_ns_ok() {
        return;
    }
    let ns = PrivateNs::new(true);
    let mnt = ns.path().join("mnt");
    let mut child = ns.spawn(&format!(
        r#"{NS_PRELUDE}
"$ZONEMOUNT" mount --config project.yaml --no-approvals "$mnt" || exit 10
remember
trap '"$ZONEMOUNT" unmount "$mnt" >/dev/null 2>&1' EXIT
"$ZONEMOUNT" list --json > inside.json
touch ready
i=0; while [ ! -e go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
"$ZONEMOUNT" status "$mnt" >/dev/null; echo "status_after=$?"
"$ZONEMOUNT" unmount "$mnt"; echo "unmount=$?"
"#
    ));
    let ready = wait_until(Duration::from_secs(30), || {
        ns.path().join("ready").exists() || matches!(child.try_wait(), Ok(Some(_)))
    });
    assert!(
        ready && ns.path().join("ready").exists(),
        "the namespace never mounted: {:?}",
        ns.output()
    );
    // Outside: not mounted here, not listed, its record not ours to read.
    assert!(!is_mounted(&mnt), "a private namespace's mount leaked out");
    let out = zonemount(ns.dir.path(), &["list", "--json"]);
    assert!(out.success(), "{}", out.describe());
    assert!(
        !out.stdout.contains(&*mnt.to_string_lossy()),
        "the host lists the namespace's mount: {}",
        out.stdout
    );
    assert!(
        zonemount::mount::find_record(&mnt).is_none(),
        "the namespace's record is visible outside it"
    );
    let out = zonemount(ns.dir.path(), &["status", &mnt.to_string_lossy()]);
    assert!(!out.success(), "status outside: {}", out.describe());
    fs::write(ns.path().join("go"), "").unwrap();
    let st = wait_child(&mut child, Duration::from_secs(60)).expect("namespace script hangs");
    let (stdout, stderr) = ns.output();
    assert!(st.success(), "{st:?}\n{stdout}\n{stderr}");
    let v = values(&stdout);
    assert_eq!(
        v.get("status_after").map(String::as_str),
        Some("0"),
        "{stdout}{stderr}"
    );
    assert_eq!(
        v.get("unmount").map(String::as_str),
        Some("0"),
        "{stdout}{stderr}"
    );
    let inside: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(ns.path().join("inside.json")).unwrap()).unwrap();
    let row = inside
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["mountpoint"].as_str() == Some(&*mnt.to_string_lossy()))
        .unwrap_or_else(|| panic!("not listed inside: {inside}"));
    assert_eq!(row["stale"], false, "{row}");
    assert_eq!(row["mounted"], true, "{row}");
}

// ----- derive

const PROJECT3: &str = "sandbox:
  mode: sandboxed
  root: .sandbox
  zones:
    alpha_zone: { mode: ro }
    beta_zone: { mode: rw }
    gamma_zone:
      mode: rw
      approval: { write: ask }
";

fn derive_in(dir: &Path, workers: &[&str]) -> Out {
    fs::write(dir.join("project.yaml"), PROJECT3).unwrap();
    let mut args: Vec<String> = vec!["derive".into(), "--config".into(), "project.yaml".into()];
    for (i, w) in workers.iter().enumerate() {
        let name = format!("w{i}.worker");
        fs::write(dir.join(&name), w).unwrap();
        args.push("--worker".into());
        args.push(name);
    }
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    zonemount(dir, &refs)
}

/// The row of `derive`'s zone table for `zone`, as (MODE, WRITE, DELETE),
/// found by the header's column names. None when the zone has no row.
#[track_caller]
fn zone_row(stdout: &str, zone: &str) -> Option<(String, String, String)> {
    let mut lines = stdout.lines().skip_while(|l| !l.starts_with("ZONE "));
    let header: Vec<&str> = lines
        .next()
        .expect("a ZONE header")
        .split_whitespace()
        .collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (mode, write, delete) = (col("MODE"), col("WRITE"), col("DELETE"));
    lines
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|cells| cells.first() == Some(&zone))
        .map(|cells| {
            (
                cells[mode].to_string(),
                cells[write].to_string(),
                cells[delete].to_string(),
            )
        })
}

fn row(mode: &str, write: &str, delete: &str) -> Option<(String, String, String)> {
    Some((mode.into(), write.into(), delete.into()))
}

#[test]
fn derive_prints_the_zone_table() {
    let dir = tempfile::tempdir().unwrap();
    let out = derive_in(dir.path(), &[]);
    assert!(out.success(), "derive: {}", out.describe());
    let o = &out.stdout;
    assert_eq!(
        zone_row(o, "alpha_zone"),
        row("ro", "preApproved", "preApproved"),
        "{o}"
    );
    assert_eq!(
        zone_row(o, "beta_zone"),
        row("rw", "preApproved", "preApproved"),
        "{o}"
    );
    // `approval: { write: ask }`: the delete left out of the block asks too.
    assert_eq!(zone_row(o, "gamma_zone"), row("rw", "ask", "ask"), "{o}");
    // Nothing was mounted or created.
    assert!(
        !dir.path().join(".sandbox").exists(),
        "derive must not create backing dirs"
    );
}

#[test]
fn derive_json_gives_the_same_table() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("project.yaml"), PROJECT3).unwrap();
    let out = zonemount(
        dir.path(),
        &["derive", "--json", "--config", "project.yaml"],
    );
    assert!(out.success(), "derive --json: {}", out.describe());
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert!(
        v["config"].as_str().unwrap().ends_with("project.yaml"),
        "{v}"
    );
    let zone = |name: &str| {
        v["zones"]
            .as_array()
            .unwrap()
            .iter()
            .find(|z| z["name"] == name)
            .unwrap_or_else(|| panic!("no zone {name}: {v}"))
            .clone()
    };
    assert_eq!(zone("alpha_zone")["policy"]["access"], "ro");
    assert_eq!(zone("gamma_zone")["policy"]["approval"]["delete"], "ask");
    assert!(!dir.path().join(".sandbox").exists(), "nothing created");
}

#[test]
fn derive_with_workers() {
    let dir = tempfile::tempdir().unwrap();
    let w1 = "---\nname: w1\nsandbox:\n  zones:\n    - name: alpha_zone\n      mode: ro\n    - name: beta_zone\n      mode: rw\n---\n# body\nDo things.\n";
    let out = derive_in(dir.path(), &[w1]);
    assert!(out.success(), "derive w1: {}", out.describe());
    let o = &out.stdout;
    assert_eq!(
        zone_row(o, "alpha_zone"),
        row("ro", "preApproved", "preApproved"),
        "{o}"
    );
    assert_eq!(
        zone_row(o, "beta_zone"),
        row("rw", "preApproved", "preApproved"),
        "{o}"
    );
    assert_eq!(
        zone_row(o, "gamma_zone"),
        None,
        "undeclared zone shown: {o}"
    );

    // Chained: w2 is derived from w1's result.
    let w2 = "---\nname: w2\nsandbox:\n  zones:\n    - name: beta_zone\n      mode: ro\n      approval: { write: blocked }\n---\n";
    let out = derive_in(dir.path(), &[w1, w2]);
    assert!(out.success(), "derive w1 w2: {}", out.describe());
    let o = &out.stdout;
    // w2 narrows beta to ro with writes blocked (and deletes, left out of
    // its block, asking); w1's other zones are gone.
    assert_eq!(zone_row(o, "beta_zone"), row("ro", "blocked", "ask"), "{o}");
    assert_eq!(zone_row(o, "alpha_zone"), None, "{o}");
    assert_eq!(zone_row(o, "gamma_zone"), None, "{o}");

    // Plain YAML worker (no front matter) is accepted too.
    let w_plain = "name: plain\nsandbox:\n  zones:\n    - name: gamma_zone\n      mode: rw\n";
    let out = derive_in(dir.path(), &[w_plain]);
    assert!(out.success(), "plain yaml worker: {}", out.describe());
    let o = &out.stdout;
    // gamma keeps the project's policy (no approval block in the worker).
    assert_eq!(zone_row(o, "gamma_zone"), row("rw", "ask", "ask"), "{o}");
    assert_eq!(zone_row(o, "beta_zone"), None, "{o}");
}

#[test]
fn derive_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    // A zone the parent lacks.
    let w = "---\nname: needy\nsandbox:\n  zones:\n    - name: delta_zone\n      mode: ro\n---\n";
    let out = derive_in(dir.path(), &[w]);
    assert_one_line_error(&out, &[2], "worker needs a missing zone");
    assert!(out.stderr.contains("delta_zone"), "{}", out.describe());
    assert!(
        out.stderr.contains("needy"),
        "names the worker: {}",
        out.describe()
    );
    // rw where the parent has ro.
    let w = "---\nname: greedy\nsandbox:\n  zones:\n    - name: alpha_zone\n      mode: rw\n---\n";
    let out = derive_in(dir.path(), &[w]);
    assert_one_line_error(&out, &[2], "rw over ro");
    assert!(out.stderr.contains("alpha_zone"), "{}", out.describe());
    // The chain: w2 asks for a zone w1 dropped.
    let w1 = "---\nname: w1\nsandbox:\n  zones:\n    - name: beta_zone\n      mode: rw\n---\n";
    let w2 = "---\nname: w2\nsandbox:\n  zones:\n    - name: alpha_zone\n      mode: ro\n---\n";
    let out = derive_in(dir.path(), &[w1, w2]);
    assert_one_line_error(&out, &[2], "chain: zone dropped by the parent worker");
    assert!(out.stderr.contains("alpha_zone"), "{}", out.describe());
    // And w2 may not widen w1's ro back to rw.
    let w1 = "---\nname: w1\nsandbox:\n  zones:\n    - name: beta_zone\n      mode: ro\n---\n";
    let w2 = "---\nname: w2\nsandbox:\n  zones:\n    - name: beta_zone\n      mode: rw\n---\n";
    let out = derive_in(dir.path(), &[w1, w2]);
    assert_one_line_error(&out, &[2], "chain: rw over the parent worker's ro");
    // A broken project file.
    fs::write(
        dir.path().join("bad.yaml"),
        "sandbox:\n  zones:\n    ws: { mode: rw }\n  nope: 1\n",
    )
    .unwrap();
    let out = zonemount(dir.path(), &["derive", "--config", "bad.yaml"]);
    assert_one_line_error(&out, &[2], "derive of a bad config");
    assert_names_file_line(&out, "bad.yaml", 4, "derive of a bad config");
}

// ----- defaults for the config

#[test]
fn embedded_default_without_config() {
    if !fuse_ok() {
        return;
    }
    // cwd = the temp dir, which holds no zonemount.yaml.
    let m = Setup::without_config().mount();
    assert_eq!(
        names(m.mountpoint()).unwrap(),
        sorted(&["cache", "workspace"])
    );
    assert!(m.root().join(".sandbox/cache").is_dir());
    assert!(m.root().join(".sandbox/workspace").is_dir());
    fs::write(m.path("workspace/x"), "x").unwrap();
    fs::write(m.path("cache/y"), "y").unwrap();
    assert_eq!(
        fs::read_to_string(m.root().join(".sandbox/workspace/x")).unwrap(),
        "x"
    );
    assert_eq!(
        fs::read_to_string(m.root().join(".sandbox/cache/y")).unwrap(),
        "y"
    );
    assert_errno(fs::create_dir(m.path("other")), EACCES);
}

#[test]
fn zonemount_yaml_in_cwd_is_picked_up() {
    if !fuse_ok() {
        return;
    }
    let s = Setup::without_config();
    fs::write(
        s.root().join("zonemount.yaml"),
        "sandbox:\n  mode: sandboxed\n  root: .boxes\n  zones:\n    picked: { path: ./p, mode: rw }\n    shown: { mode: ro }\n",
    )
    .unwrap();
    let m = s.backing_dir("picked", ".boxes/p").mount();
    assert_eq!(names(m.mountpoint()).unwrap(), sorted(&["picked", "shown"]));
    fs::write(m.path("picked/f"), "f").unwrap();
    assert_eq!(
        fs::read_to_string(m.root().join(".boxes/p/f")).unwrap(),
        "f"
    );
    assert!(
        !m.root().join(".sandbox").exists(),
        "the embedded default was not used"
    );
}

#[test]
fn config_relative_paths_are_relative_to_the_config_dir() {
    if !fuse_ok() {
        return;
    }
    // The config sits in <tmp>/conf; the mount is run from <tmp>/elsewhere.
    // Direct `./real` and sandboxed `root: box` both resolve from conf/.
    let s = Setup::new("sandbox:\n  mode: direct\n  zones:\n    rel: { path: ./real, mode: rw }\n")
        .config_at("conf/zones.yaml")
        .backing_dir("rel", "conf/real")
        .file("rel", "r.txt", "r");
    let elsewhere = s.root().join("elsewhere");
    fs::create_dir_all(&elsewhere).unwrap();
    let m = s.cwd(&elsewhere).mount();
    assert_eq!(fs::read_to_string(m.path("rel/r.txt")).unwrap(), "r");
    fs::write(m.path("rel/w.txt"), "w").unwrap();
    assert_eq!(
        fs::read_to_string(m.root().join("conf/real/w.txt")).unwrap(),
        "w"
    );
    drop(m);

    let s = Setup::new("sandbox:\n  mode: sandboxed\n  root: box\n  zones:\n    z: { mode: rw }\n")
        .config_at("conf/zones.yaml")
        .backing_dir("z", "conf/box/z");
    let elsewhere = s.root().join("elsewhere");
    fs::create_dir_all(&elsewhere).unwrap();
    let m = s.cwd(&elsewhere).mount();
    fs::write(m.path("z/f"), "f").unwrap();
    assert_eq!(
        fs::read_to_string(m.root().join("conf/box/z/f")).unwrap(),
        "f"
    );
    assert!(
        !elsewhere.join("box").exists(),
        "sandbox root resolved against the cwd"
    );
}

// ----- worker mounts

const PROJECT_DWO: &[(&str, &str)] = &[
    ("data", "mode: ro"),
    ("ws", "mode: rw"),
    ("other", "mode: rw"),
];

fn project_dwo(mode: Mode) -> Setup {
    Setup::zones(mode, PROJECT_DWO)
        .file("data", "d.txt", "d\n")
        .file("ws", "w.txt", "w\n")
        .file("other", "o.txt", "o\n")
}

#[test]
fn worker_mount_shows_only_its_zones() {
    if !fuse_ok() {
        return;
    }
    for mode in [Mode::Sandboxed, Mode::Direct] {
        let worker = "---\nname: formatter\ndescription: formats things\nmodel: any\nsandbox:\n  zones:\n    - name: data\n      mode: ro\n    - name: ws\n      mode: ro\n---\n\nYou format files.\n";
        let m = project_dwo(mode).with_workers(&[worker]).mount();
        assert_eq!(
            names(m.mountpoint()).unwrap(),
            sorted(&["data", "ws"]),
            "{mode:?}"
        );
        assert_errno(fs::metadata(m.path("other")), ENOENT);
        assert_eq!(fs::read_to_string(m.path("ws/w.txt")).unwrap(), "w\n");
        // ws is rw in the project, ro for this worker.
        assert_errno(fs::write(m.path("ws/new.txt"), "x"), EROFS);
        assert_errno(
            fs::OpenOptions::new().write(true).open(m.path("ws/w.txt")),
            EROFS,
        );
        assert_errno(fs::remove_file(m.path("ws/w.txt")), EROFS);
        assert!(!m.backing("ws", "new.txt").exists());
        assert_eq!(fs::read_to_string(m.backing("ws", "w.txt")).unwrap(), "w\n");
        assert_errno(fs::create_dir(m.path("other")), EACCES);
    }
}

#[test]
fn worker_chain_tightens() {
    if !fuse_ok() {
        return;
    }
    let w1 = "---\nname: parent\nsandbox:\n  zones:\n    - name: ws\n      mode: rw\n    - name: other\n      mode: rw\n---\n";
    let w2 = "---\nname: child\nsandbox:\n  zones:\n    - name: ws\n      mode: rw\n      approval: { write: blocked }\n---\n";
    let m = project_dwo(Mode::Sandboxed).with_workers(&[w1, w2]).mount();
    assert_eq!(names(m.mountpoint()).unwrap(), sorted(&["ws"]));
    assert_errno(fs::write(m.path("ws/new.txt"), "x"), EPERM);
    assert!(!m.backing("ws", "new.txt").exists());
    // The child's block leaves delete out, so deletes ask (denied at once
    // with --no-approvals): EACCES, and the file stays.
    assert_errno(fs::remove_file(m.path("ws/w.txt")), EACCES);
    assert!(m.backing("ws", "w.txt").exists());
}

#[test]
fn worker_mount_refused_when_derivation_fails() {
    if !fuse_ok() {
        return;
    }
    let w = "---\nname: greedy\nsandbox:\n  zones:\n    - name: data\n      mode: rw\n---\n";
    let (out, m) = project_dwo(Mode::Sandboxed).with_workers(&[w]).try_mount();
    assert_one_line_error(&out, &[2], "worker asks rw on a ro zone");
    assert!(out.stderr.contains("data"), "{}", out.describe());
    assert!(!m.is_mounted());
}

#[test]
fn worker_without_sandbox_gets_an_empty_root() {
    if !fuse_ok() {
        return;
    }
    let worker = "---\nname: talker\ndescription: only talks\n---\nNo files for you.\n";
    let m = project_dwo(Mode::Sandboxed).with_workers(&[worker]).mount();
    assert!(
        names(m.mountpoint()).unwrap().is_empty(),
        "root should be empty"
    );
    assert_errno(fs::create_dir(m.path("ws")), EACCES);
    assert_errno(fs::write(m.path("f"), "x"), EACCES);
    assert_errno(std::os::unix::fs::symlink("x", m.path("l")), EACCES);
    assert_errno(fs::metadata(m.path("data")), ENOENT);
    let (st, out, _) = m.sh("ls -A");
    assert!(st.success());
    assert_eq!(out, "");
}

#[test]
fn unmount_stale_removes_dead_sockets_no_record_names_and_keeps_live_ones() {
    // Root's runtime dir is fixed; a user's follows XDG_RUNTIME_DIR.
    let tmp = tempfile::tempdir().unwrap();
    let runtime = if is_root() {
        PathBuf::from("/run/zonemount")
    } else {
        tmp.path().join("zonemount")
    };
    fs::create_dir_all(&runtime).unwrap();
    let tag = format!("zzz-test-{}", std::process::id());
    let dead = runtime.join(format!("{tag}-dead.sock"));
    let live = runtime.join(format!("{tag}-live.sock"));
    drop(std::os::unix::net::UnixListener::bind(&dead).unwrap()); // the file stays
    let listener = std::os::unix::net::UnixListener::bind(&live).unwrap();
    let out = run(
        Command::new(BIN)
            .args(["unmount", "--stale"])
            .env("XDG_RUNTIME_DIR", tmp.path()),
        Duration::from_secs(60),
    );
    let _ = fs::remove_file(&live);
    drop(listener);
    assert!(out.success(), "{}", out.describe());
    assert!(!dead.exists(), "the dead socket stays: {}", out.describe());
    assert!(
        out.stderr.contains(&format!(
            "removed the dead control socket {}",
            dead.display()
        )),
        "{}",
        out.describe()
    );
    assert!(
        !out.stderr.contains(&live.display().to_string()),
        "a live socket was touched: {}",
        out.describe()
    );
}

/// `mount -t fuse.zonemount SOURCE MNT` and an fstab line, through fuse3's
/// `mount.fuse3` (which runs `zonemount SOURCE MNT -o OPTS` with mount's
/// sanitized PATH: the binary is put in `/usr/local/bin`, in a private
/// namespace only).
#[test]
fn mount_t_fuse_zonemount_and_an_fstab_line_mount_through_mount_fuse3() {
    if !private_ns_ok() || !tool_ok("mount.fuse3") {
        return;
    }
    let ns = PrivateNs::new(false);
    let out = ns.run(&format!(
        r#"{NS_PRELUDE}
mkdir -p bin work
ln -s "$ZONEMOUNT" bin/zonemount
mount --bind "$PWD/bin" /usr/local/bin || exit 11
mount -t fuse.zonemount "$PWD/project.yaml" "$mnt" -o nodev,nosuid,no_approvals,zone=extra=$PWD/work:rw; echo "mount=$?"
remember
trap 'umount -l "$mnt" 2>/dev/null' EXIT
echo "type=$(grep " $mnt " /proc/self/mounts | cut -d' ' -f3)"
echo hi > "$mnt/extra/f" && echo "wrote=$(cat work/f)"
ls "$mnt" | tr '\n' ' ' | sed 's/ $//; s/^/zones=/'; echo
"$ZONEMOUNT" unmount "$mnt"; echo "unmount=$?"
echo "$PWD/project.yaml $mnt fuse.zonemount noauto,no_approvals 0 0" > fstab
mount --fstab "$PWD/fstab" "$mnt"; echo "fstab=$?"
remember
echo "fstab_type=$(grep " $mnt " /proc/self/mounts | cut -d' ' -f3)"
umount "$mnt"; echo "umount=$?"
echo "left=$(mounted)"
mount -t fuse.zonemount "$PWD/project.yaml" "$mnt" -o ro 2>err; echo "ro=$?"
echo "ro_err=$(head -1 err)"
"#
    ));
    assert!(out.success(), "{}", out.describe());
    assert_value(&out, "mount", "0");
    assert_value(&out, "type", "fuse.zonemount");
    assert_value(&out, "wrote", "hi");
    assert_value(&out, "zones", "extra ws");
    assert_value(&out, "unmount", "0");
    assert_value(&out, "fstab", "0");
    assert_value(&out, "fstab_type", "fuse.zonemount");
    assert_value(&out, "umount", "0");
    assert_value(&out, "left", "0");
    let v = values(&out.stdout);
    assert_ne!(
        v.get("ro").map(String::as_str),
        Some("0"),
        "{}",
        out.describe()
    );
    assert!(
        v.get("ro_err")
            .is_some_and(|e| e.contains("not read-only as a whole")),
        "{}",
        out.describe()
    );
}

/// `mount --foreground` under systemd's readiness protocol: READY=1 on
/// $NOTIFY_SOCKET only once the mount is live, STOPPING=1 after SIGTERM
/// unmounted it; and the unit in contrib/systemd passes
/// `systemd-analyze verify` (pointed at this build) where that exists.
#[test]
fn foreground_tells_systemd_when_it_is_ready_and_when_it_stops() {
    if !fuse_ok() {
        return;
    }
    use std::os::unix::net::UnixDatagram;
    let tmp = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(tmp.path()).unwrap();
    let mnt = root.join("mnt");
    fs::create_dir(&mnt).unwrap();
    fs::write(
        root.join("project.yaml"),
        zones_yaml(Mode::Sandboxed, &[("ws", "mode: rw")]),
    )
    .unwrap();
    let sock_path = root.join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    /// Unmounts (exact path) and kills the daemon if the test fails.
    struct Guard(std::process::Child, PathBuf);
    impl Drop for Guard {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
            cleanup_mount(&self.1, true);
        }
    }
    let child = Command::new(BIN)
        .args(["mount", "--foreground", "-q", "--no-approvals", "--config"])
        .arg(root.join("project.yaml"))
        .arg(&mnt)
        .current_dir(&root)
        .env("NOTIFY_SOCKET", &sock_path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut guard = Guard(child, mnt.clone());
    let mut buf = [0u8; 512];
    let n = sock.recv(&mut buf).expect("no READY=1 within 20 s");
    let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(
        msg.starts_with("READY=1\n") && msg.contains("STATUS=mounted"),
        "{msg}"
    );
    assert!(is_mounted(&mnt), "READY=1 before the mount was live");
    fs::write(mnt.join("ws/f"), "x").unwrap();
    let _ = run(
        Command::new("kill")
            .arg("-TERM")
            .arg(guard.0.id().to_string()),
        Duration::from_secs(5),
    );
    let n = sock.recv(&mut buf).expect("no STOPPING=1 within 20 s");
    assert_eq!(String::from_utf8_lossy(&buf[..n]), "STOPPING=1");
    let st = wait_child(&mut guard.0, Duration::from_secs(20)).expect("the daemon did not exit");
    assert!(st.success(), "{st:?}");
    assert!(!is_mounted(&mnt));
    // The unit, as shipped but for the binary's path.
    if !tool_ok("systemd-analyze") {
        return;
    }
    let unit = fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib/systemd/zonemount@.service"),
    )
    .unwrap();
    let unit = unit.replace("ExecStart=zonemount ", &format!("ExecStart={BIN} "));
    let dir = root.join("units");
    fs::create_dir(&dir).unwrap();
    let path = dir.join("zonemount@srv-task.service");
    fs::write(&path, unit).unwrap();
    let out = run(
        Command::new("systemd-analyze")
            .args(["verify", "--man=no"])
            .arg(&path),
        Duration::from_secs(60),
    );
    assert!(
        out.success() && !out.stderr.contains("zonemount@"),
        "systemd-analyze verify: {}",
        out.describe()
    );
}

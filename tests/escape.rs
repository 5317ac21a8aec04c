//! A prompt-injected worker trying to get out (DESIGN §6): the daemon
//! reaches the backing store only fd-relative from each zone root, never
//! follows a symlink, and holds bounded resources whatever the worker does.
//! Every attack here runs against a real mount and checks the host after.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::*;
use libc::{EACCES, EXDEV};

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// The worker sits inside `ws/d` (its cwd is that directory's node) and
/// keeps creating files and dirs there while the host swaps `d` for a
/// symlink to a directory outside the zone, back and forth. Had the daemon
/// resolved paths by name it would follow the symlink; it uses the node's
/// own handle, so everything lands in the real directory.
#[test]
fn a_directory_swapped_for_a_symlink_mid_operation() {
    if !fuse_ok() || !tool_ok("sh") {
        return;
    }
    let m = Setup::zones(Mode::Direct, &[("ws", "mode: rw")])
        .dir("ws", "d")
        .mount();
    let outside = m.root().join("outside");
    fs::create_dir(&outside).unwrap();
    let d = m.backing("ws", "d");
    let real = m.backing("ws", "d.real");

    // The worker enters `d` first (while it is a real directory), then
    // waits for the swapping to start.
    // Every operation is relative to its cwd node, so every one of them
    // must succeed, swap or no swap: the first failure ends the worker with
    // its error on stderr.
    let script = "read go; i=0; while [ $i -lt 400 ]; do echo x > f$i && mkdir m$i && ln -s t s$i || exit 1; i=$((i+1)); done";
    let err_path = m.root().join("worker.err");
    let mut worker = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(m.path("ws/d"))
        .env("LC_ALL", "C")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (stop, d, real, outside) = (stop.clone(), d.clone(), real.clone(), outside.clone());
        std::thread::spawn(move || {
            let mut swaps = 0;
            let deadline = Instant::now() + Duration::from_secs(8);
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline && swaps < 2000 {
                if fs::rename(&d, &real).is_ok() {
                    let _ = symlink(&outside, &d);
                    std::thread::sleep(Duration::from_micros(200));
                    let _ = fs::remove_file(&d);
                    let _ = fs::rename(&real, &d);
                    swaps += 1;
                }
            }
            swaps
        })
    };
    {
        use std::io::Write;
        let mut stdin = worker.stdin.take().unwrap();
        stdin.write_all(b"go\n").unwrap();
    }
    let status = wait_child(&mut worker, Duration::from_secs(60));
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    let err = fs::read_to_string(&err_path).unwrap_or_default();
    assert!(
        status.is_some_and(|s| s.success()) && err.is_empty(),
        "worker: {status:?}, stderr: {err}"
    );
    assert!(swaps > 0, "the host never swapped the directory");
    assert_eq!(
        entries(&outside),
        Vec::<String>::new(),
        "the daemon wrote outside the zone"
    );
    // Everything the worker made is in the real directory: all 1,200.
    let made = entries(&d);
    let mut want: Vec<String> = (0..400)
        .flat_map(|i| [format!("f{i}"), format!("m{i}"), format!("s{i}")])
        .collect();
    want.sort();
    assert_eq!(made, want, "what the worker made, in the real directory");
    assert!(fs::symlink_metadata(d.join("m399")).unwrap().is_dir());
    assert_eq!(fs::read_link(d.join("s399")).unwrap(), Path::new("t"));
    assert_eq!(fs::read_to_string(d.join("f399")).unwrap(), "x\n");
}

/// The host replaces a zone's backing path after mount: the mount carries
/// on in the directory it opened, never in the replacement.
#[test]
fn a_swapped_zone_root_keeps_the_original_directory() {
    if !fuse_ok() {
        return;
    }
    let m = Setup::zones(Mode::Direct, &[("ws", "mode: rw")]).mount();
    let b = m.backing("ws", "");
    let moved = m.root().join("moved");
    let outside = m.root().join("outside");
    fs::create_dir(&outside).unwrap();
    fs::rename(&b, &moved).unwrap();
    symlink(&outside, &b).unwrap();
    fs::write(m.path("ws/x"), "x").unwrap();
    fs::create_dir(m.path("ws/dir")).unwrap();
    assert_eq!(entries(&outside), Vec::<String>::new());
    assert_eq!(entries(&moved), ["dir", "x"]);
    // Put things back so the guard's unmount sees the layout it made.
    fs::remove_file(&b).unwrap();
    fs::rename(&moved, &b).unwrap();
}

/// Symlinks the host planted (absolute, relative, to a directory) are
/// shown as symlinks; the daemon never opens their targets: opening the
/// link node itself, or creating through a symlinked directory node, fails
/// inside the daemon and the targets stay untouched.
#[test]
fn planted_symlinks_are_shown_not_followed() {
    if !fuse_ok() {
        return;
    }
    let s = Setup::zones(Mode::Direct, &[("ws", "mode: rw")]);
    let outside = s.root().join("outside");
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("secret"), "secret").unwrap();
    let s = s
        .symlink("ws", "abs", &outside.join("secret").to_string_lossy())
        .symlink("ws", "rel", "../../outside/secret")
        .symlink("ws", "dirlink", &outside.to_string_lossy());
    let m = s.mount();
    for name in ["abs", "rel", "dirlink"] {
        let md = fs::symlink_metadata(m.path(&format!("ws/{name}"))).unwrap();
        assert!(md.file_type().is_symlink(), "{name} is shown as a symlink");
    }
    assert_eq!(
        fs::read_link(m.path("ws/rel")).unwrap(),
        Path::new("../../outside/secret")
    );
    // O_NOFOLLOW opens of the links fail; nothing reaches the target.
    use std::os::unix::fs::OpenOptionsExt;
    for name in ["abs", "rel"] {
        let r = fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(m.path(&format!("ws/{name}")));
        assert_eq!(errno_of(&r), Some(libc::ELOOP), "{name}");
    }
    assert_eq!(
        fs::read_to_string(outside.join("secret")).unwrap(),
        "secret"
    );
    assert_eq!(entries(&outside), ["secret"]);
}

/// `..` from a zone is the mount root, whose entries are not the worker's;
/// cross-zone renames and links are EXDEV, even for a ro source.
#[test]
fn dot_dot_and_rename_tricks() {
    if !fuse_ok() {
        return;
    }
    let m = Setup::zones(Mode::Direct, &[("ws", "mode: rw"), ("data", "mode: ro")])
        .file("data", "f", "ro data")
        .dir("ws", "sub")
        .mount();
    assert_eq!(entries(&m.path("ws/..")), ["data", "ws"]);
    assert_errno(fs::create_dir(m.path("ws/../evil")), EACCES);
    assert_errno(fs::write(m.path("ws/sub/../../evil"), "x"), EACCES);
    assert_errno(fs::rename(m.path("ws/sub"), m.path("ws/../sub")), EACCES);
    assert_errno(fs::rename(m.path("ws/sub"), m.path("data/sub")), EXDEV);
    assert_errno(fs::hard_link(m.path("data/f"), m.path("ws/f")), EXDEV);
    assert_errno(fs::rename(m.path("ws"), m.path("ws2")), EACCES);
    assert!(m.backing("ws", "sub").is_dir());
    assert!(!m.backing("ws", "f").exists());
    assert!(!m.root().join("evil").exists());
}

/// The daemon's fd count while the worker does something.
fn daemon_fds(m: &TestMount) -> usize {
    let pids = daemon_pids_for(m.mountpoint());
    let pid = pids.first().expect("the daemon's pid");
    fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count()
}

/// 100,000 entries in one directory: listed and stat'ed in full, with the
/// daemon's open fds staying bounded (RLIMIT_NOFILE here is 20,000).
#[test]
fn a_hundred_thousand_entries_in_one_dir() {
    if !fuse_ok()
        || repeats_root_in(
            &["nofusermount"],
            "the same daemon and privileges as root, only the mount made without fusermount3",
        )
    {
        return;
    }
    let s = Setup::zones(Mode::Direct, &[("ws", "mode: rw")]).dir("ws", "big");
    let big = s.backing("ws", "big");
    for i in 0..100_000 {
        fs::File::create(big.join(format!("e{i}"))).unwrap();
    }
    let m = s.mount();
    // Each listing's own exit status, and every name it printed.
    let out = m.sh_in("ws/big", "ls -f", &[]);
    assert!(out.success(), "ls -f: {}", out.describe());
    let mut listed: Vec<&str> = out.stdout.lines().collect();
    listed.sort_unstable();
    let mut want: Vec<String> = (0..100_000).map(|i| format!("e{i}")).collect();
    want.push(".".into());
    want.push("..".into());
    want.sort_unstable();
    assert_eq!(listed.len(), 100_002, "ls -f: {} lines", listed.len());
    assert!(
        listed == want,
        "ls -f lists other names than the 100,000 made"
    );
    // ls -l stats every entry: a "total" line, then one line per entry.
    let out = m.sh_in("ws/big", "ls -l", &[]);
    assert!(
        out.success() && out.stderr.is_empty(),
        "ls -l: {}",
        out.describe()
    );
    assert_eq!(out.stdout.lines().count(), 100_001, "ls -l lines");
    assert_eq!(
        out.stdout.lines().filter(|l| l.starts_with("-rw")).count(),
        100_000,
        "ls -l: every entry a regular file"
    );
    let fds = daemon_fds(&m);
    assert!(
        fds < 4000,
        "daemon holds {fds} fds after stat'ing 100,000 entries"
    );
}

/// Long names and deep paths get errnos, never a dead daemon.
#[test]
fn long_names_and_deep_paths() {
    if !fuse_ok() {
        return;
    }
    let m = Setup::zones(Mode::Direct, &[("ws", "mode: rw")]).mount();
    let ok = "n".repeat(255);
    fs::write(m.path(&format!("ws/{ok}")), "x").unwrap();
    let long = "n".repeat(256);
    assert_errno(
        fs::write(m.path(&format!("ws/{long}")), "x"),
        libc::ENAMETOOLONG,
    );
    // A 5,000-byte name is also a path over PATH_MAX.
    let huge = "n".repeat(5000);
    assert_errno(
        fs::write(m.path(&format!("ws/{huge}")), "x"),
        libc::ENAMETOOLONG,
    );
    assert_eq!(entries(&m.backing("ws", "")), std::slice::from_ref(&ok));
    // 200 levels deep, built one level at a time from inside.
    let out = m.sh_in(
        "ws",
        "i=0; while [ $i -lt 200 ]; do mkdir dddddddddd && cd dddddddddd || exit 1; i=$((i+1)); done; echo deep > f && cat f",
        &[],
    );
    assert!(
        out.success() && out.stdout.trim() == "deep",
        "{}",
        out.describe()
    );
    // find walks it all: ".", the long name, 200 dirs and f.
    let out = m.sh_in("ws", "find .", &[]);
    assert!(out.success(), "find: {}", out.describe());
    assert_eq!(out.stdout.lines().count(), 203, "find: {}", out.describe());
    let out = m.sh_in("ws", "rm -rf dddddddddd", &[]);
    assert!(out.success(), "rm -rf: {}", out.describe());
    assert!(!exists_nofollow(&m.backing("ws", "dddddddddd")));
    assert!(m.is_mounted());
    assert_eq!(
        fs::read_to_string(m.path(&format!("ws/{ok}"))).unwrap(),
        "x"
    );
}

/// A worker holding thousands of handles, then killed without closing
/// them: the daemon serves on and its fds come back down.
#[test]
fn thousands_of_open_handles_then_killed() {
    if !fuse_ok() || !tool_ok("python3") {
        return;
    }
    let m = Setup::zones(Mode::Direct, &[("ws", "mode: rw")]).mount();
    let before = daemon_fds(&m);
    let script = format!(
        "import os,sys,time\nfds=[os.open('{}/h%d' % i, os.O_CREAT|os.O_RDWR) for i in range(3000)]\nprint(len(fds), flush=True)\ntime.sleep(60)\n",
        m.path("ws").display()
    );
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(&script)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    use std::io::BufRead;
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "3000");
    let holding = daemon_fds(&m);
    assert!(
        holding >= 3000,
        "the daemon holds one fd per open handle ({holding})"
    );
    // Still serving while they are held.
    fs::write(m.path("ws/alive"), "yes").unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let settled = wait_until(Duration::from_secs(10), || daemon_fds(&m) < before + 2100);
    assert!(
        settled,
        "fds did not come back down: {} (before {before})",
        daemon_fds(&m)
    );
    assert_eq!(fs::read_to_string(m.path("ws/alive")).unwrap(), "yes");
}

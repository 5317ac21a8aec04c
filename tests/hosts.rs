//! Where it runs: what a host that can't mount gets — one line naming the
//! cause and the fix, exit 5, nothing made (no `./.sandbox`, no daemon) —
//! and `doctor`'s account of the machine.
//!
//! Each refusing host is built in a private mount namespace (root sets it
//! up; the host itself is never changed): a `/dev` without `fuse`, a
//! `/dev/fuse` only root may open, `fusermount3` covered by `/dev/null`,
//! an `/etc/fuse.conf` without `user_allow_other`. The command then runs as
//! `nobody` where the case is about an ordinary user.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

const NOBODY: u32 = 65534;

/// A scratch dir `nobody` can work in: cwd for the command, a mountpoint
/// owned by nobody, and a tmpfs staging dir for device nodes.
struct Host {
    dir: tempfile::TempDir,
}

impl Host {
    fn new() -> Host {
        let dir = tempfile::tempdir().unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        for d in ["cwd", "mnt", "stage"] {
            fs::create_dir(dir.path().join(d)).unwrap();
        }
        chown(&dir.path().join("cwd"), NOBODY);
        chown(&dir.path().join("mnt"), NOBODY);
        Host { dir }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Run `setup` (as root, in a private mount namespace), then `zonemount
    /// ARGS` in `cwd` — as nobody when `as_user` — in that namespace. The
    /// binary runs from a copy on the staging tmpfs: nobody may not reach
    /// the build dir (a clone under /root).
    fn zonemount(&self, setup: &str, as_user: bool, args: &str) -> Out {
        let who = if as_user {
            format!("setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups")
        } else {
            String::new()
        };
        let script = format!(
            "{drop}set -e\nstage='{stage}'\nmount -t tmpfs -o mode=0755 zmhost \"$stage\"\ncp '{bin}' \"$stage/zonemount\"\n{setup}\ncd '{cwd}'\nexec {who} env HOME=/nonexistent XDG_RUNTIME_DIR= \"$stage/zonemount\" {args}",
            drop = DROP_INHERITED_MOUNTS,
            stage = self.path("stage").display(),
            cwd = self.path("cwd").display(),
            bin = BIN,
        );
        run(
            Command::new("unshare")
                .args(["-m", "--propagation", "private", "--", "sh", "-c"])
                .arg(script),
            Duration::from_secs(60),
        )
    }

    /// Nothing was made in the working directory (no `./.sandbox`).
    #[track_caller]
    fn assert_nothing_made(&self) {
        let left: Vec<_> = fs::read_dir(self.path("cwd"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(left.is_empty(), "made in the working dir: {left:?}");
        assert!(
            !mounted(&self.path("mnt")),
            "{} is mounted",
            self.path("mnt").display()
        );
    }
}

fn chown(p: &Path, uid: u32) {
    std::os::unix::fs::chown(p, Some(uid), Some(uid)).unwrap();
}

fn mounted(p: &Path) -> bool {
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(&*p.to_string_lossy()))
}

/// A copy of the FUSE device node with `mode`, bound over /dev/fuse.
fn fuse_node(mode: &str) -> String {
    format!(
        "mknod \"$stage/fuse\" c 10 229\nchmod {mode} \"$stage/fuse\"\nmount --bind \"$stage/fuse\" /dev/fuse"
    )
}

/// fusermount3 covered wherever it is.
const NO_FUSERMOUNT: &str = "for f in /usr/bin/fusermount3 /bin/fusermount3 /usr/local/bin/fusermount3; do if [ -e \"$f\" ]; then mount --bind /dev/null \"$f\"; fi; done";

fn needs() -> bool {
    require(Need::Root) && require(Need::Tool("unshare")) && require(Need::Tool("setpriv"))
}

#[track_caller]
fn assert_refused(out: &Out, needle: &str) {
    assert_eq!(out.code(), Some(5), "exit 5 expected\n{}", out.describe());
    assert!(
        out.stderr.contains(needle),
        "stderr should say {needle:?}\n{}",
        out.describe()
    );
    assert_eq!(
        out.stderr.trim_end().lines().count(),
        1,
        "one line\n{}",
        out.describe()
    );
}

#[test]
fn no_dev_fuse_is_refused_before_anything_is_made() {
    if !needs() {
        return;
    }
    let h = Host::new();
    // A /dev with only null in it: no FUSE device.
    let setup = "mknod \"$stage/null\" c 1 3\nchmod 666 \"$stage/null\"\nmount -t tmpfs -o mode=0755 zmdev /dev\ntouch /dev/null\nmount --bind \"$stage/null\" /dev/null";
    let mnt = h.path("mnt");
    let out = h.zonemount(setup, false, &format!("mount '{}'", mnt.display()));
    assert_refused(&out, "/dev/fuse is missing");
    assert!(out.stderr.contains("modprobe fuse"), "{}", out.describe());
    h.assert_nothing_made();
}

#[test]
fn a_dev_fuse_the_user_cannot_open_is_refused() {
    if !needs() {
        return;
    }
    let h = Host::new();
    let mnt = h.path("mnt");
    let out = h.zonemount(
        &fuse_node("0600"),
        true,
        &format!("mount '{}'", mnt.display()),
    );
    assert_refused(&out, "/dev/fuse is not readable and writable by uid 65534");
    assert!(
        out.stderr.contains("chmod 0666 /dev/fuse"),
        "{}",
        out.describe()
    );
    h.assert_nothing_made();
}

#[test]
fn a_user_without_fusermount3_is_refused() {
    if !needs() {
        return;
    }
    let h = Host::new();
    let mnt = h.path("mnt");
    let setup = format!("{}\n{NO_FUSERMOUNT}", fuse_node("0666"));
    let out = h.zonemount(&setup, true, &format!("mount '{}'", mnt.display()));
    assert_refused(&out, "fusermount3 is not installed");
    assert!(
        out.stderr.contains("apt-get install fuse3"),
        "{}",
        out.describe()
    );
    h.assert_nothing_made();
    // Root needs no fusermount3: the same host, as root, is not refused
    // for it (doctor says so).
    let out = h.zonemount(&setup, false, "doctor --json");
    let r: Value = serde_json::from_str(&out.stdout).unwrap();
    let fm = check_named(&r, "fusermount3");
    assert_eq!(fm["state"], "ok", "{fm}");
    assert!(
        fm["detail"]
            .as_str()
            .unwrap()
            .contains("not needed as root"),
        "{fm}"
    );
}

#[test]
fn allow_other_without_user_allow_other_is_refused_for_a_user() {
    if !needs() {
        return;
    }
    let h = Host::new();
    let mnt = h.path("mnt");
    let setup = format!(
        "{}\ntouch \"$stage/fuse.conf\"\ntouch /etc/fuse.conf 2>/dev/null || true\nmount --bind \"$stage/fuse.conf\" /etc/fuse.conf",
        fuse_node("0666")
    );
    let out = h.zonemount(
        &setup,
        true,
        &format!("mount --allow-other '{}'", mnt.display()),
    );
    assert_refused(&out, "user_allow_other");
    h.assert_nothing_made();
}

#[test]
fn a_mountpoint_the_user_may_not_use_is_refused() {
    if !needs() {
        return;
    }
    let h = Host::new();
    let theirs = h.path("roots");
    fs::create_dir(&theirs).unwrap(); // root's, 0755: nobody can't write it
    let out = h.zonemount(
        &fuse_node("0666"),
        true,
        &format!("mount '{}'", theirs.display()),
    );
    assert_refused(&out, "is not writable by uid 65534");
    h.assert_nothing_made();
    assert!(!mounted(&theirs));
}

fn check_named<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check named {name} in {report}"))
}

#[test]
fn doctor_reports_every_fact_and_whether_a_mount_can_be_made() {
    if !require(Need::Fuse) {
        return;
    }
    let out = run(
        Command::new(BIN).args(["doctor", "--json"]),
        Duration::from_secs(60),
    );
    assert_eq!(out.code(), Some(0), "{}", out.describe());
    let r: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(r["can_mount"], true, "{r}");
    assert_eq!(r["uid"], euid());
    for name in [
        "FUSE device",
        "privilege",
        "fusermount3",
        "allow_other",
        "passthrough",
        "FUSE over io_uring",
        "idle polling",
        "kernel file handles",
        "run --isolate",
        "runtime dir",
        "state dir",
    ] {
        let c = check_named(&r, name);
        let state = c["state"].as_str().unwrap();
        assert!(["ok", "degraded", "missing"].contains(&state), "{c}");
        assert!(!c["detail"].as_str().unwrap().is_empty(), "{c}");
        if state != "ok" {
            assert!(
                c.get("fix").is_some() || name == "FUSE over io_uring",
                "a fact that isn't ok says how to fix it: {c}"
            );
        }
    }
    assert_eq!(check_named(&r, "FUSE device")["state"], "ok");
    let pt = &check_named(&r, "passthrough")["state"];
    let idle = check_named(&r, "idle polling");
    if is_root() {
        assert_eq!(check_named(&r, "privilege")["state"], "ok");
        // Root opens the device where there is one.
        assert_eq!(
            idle["state"] == "ok",
            Path::new("/dev/cpu_dma_latency").exists()
                || idle["detail"].as_str().unwrap().contains("held back"),
            "{idle}"
        );
    } else {
        assert_eq!(check_named(&r, "privilege")["state"], "degraded");
        assert_eq!(pt, "degraded", "an ordinary user has no passthrough");
        if !idle["detail"].as_str().unwrap().contains("held back") {
            assert_eq!(idle["state"], "degraded", "the device is root's: {idle}");
        }
    }
    // The text form: one line per fact and the verdict.
    let text = run(Command::new(BIN).arg("doctor"), Duration::from_secs(60));
    assert_eq!(text.code(), Some(0), "{}", text.describe());
    assert!(
        text.stdout.contains("zonemount can mount here"),
        "{}",
        text.stdout
    );
}

#[test]
fn doctor_says_a_user_cannot_mount_without_the_device_and_exits_5() {
    if !needs() {
        return;
    }
    let h = Host::new();
    let out = h.zonemount(&fuse_node("0600"), true, "doctor");
    assert_eq!(out.code(), Some(5), "{}", out.describe());
    assert!(
        out.stdout.contains("missing   FUSE device"),
        "{}",
        out.describe()
    );
    assert!(
        out.stdout.contains("zonemount cannot mount here"),
        "{}",
        out.describe()
    );
}

/// `doctor` as an ordinary user leaves nothing in its TMPDIR (F7a of an
/// attack pass: the staged-zone probe's overlay left its `w/work` mode 0,
/// so its `zonemount-probe.*` dir stayed behind on every run).
#[test]
fn doctor_as_a_user_leaves_nothing_in_tmpdir() {
    if !needs() {
        return;
    }
    let h = Host::new();
    let tmp = h.path("tmp");
    fs::create_dir(&tmp).unwrap();
    chown(&tmp, NOBODY);
    let out = h.zonemount(
        &format!("export TMPDIR='{}'", tmp.display()),
        true,
        "doctor",
    );
    assert!(out.stdout.contains("staged zones"), "{}", out.describe());
    let left: Vec<_> = fs::read_dir(&tmp)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        left.is_empty(),
        "left in TMPDIR: {left:?}\n{}",
        out.describe()
    );
}

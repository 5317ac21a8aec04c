//! The example configs in `config/` mounted for real, as a supervisor would
//! use them, and the refusal when FUSE itself is missing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;
use libc::{EACCES, EROFS};

fn example(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("config")
        .join(name);
    fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn sandboxed_example_mounts_with_its_workers() {
    if !fuse_ok() {
        return;
    }
    // The project alone: four zones, data read-only, final gated.
    let m = Setup::new(&example("sandboxed.yaml")).mount();
    assert_eq!(
        names(m.mountpoint()),
        ["cache", "data", "final", "workspace"]
    );
    assert_errno(fs::write(m.path("data/new.txt"), "x"), EROFS);
    fs::write(m.path("workspace/notes.txt"), "n").unwrap();
    assert_eq!(
        fs::read_to_string(m.backing("workspace", "notes.txt")).unwrap(),
        "n"
    );
    // final: writes ask (denied without an approver), .txt is invisible.
    assert_errno(fs::write(m.path("final/report.md"), "r"), EACCES);
    assert_errno(fs::write(m.path("final/report.txt"), "r"), EACCES);
    assert!(!m.backing("final", "report.md").exists());
    drop(m);

    // formatter → summarizer: only their zones, tightened.
    let m = Setup::new(&example("sandboxed.yaml"))
        .with_workers(&[&example("formatter.worker"), &example("child.worker")])
        .mount();
    assert_eq!(names(m.mountpoint()), ["workspace"]);
    // formatter made workspace writes `ask`: denied at once here.
    assert_errno(fs::write(m.path("workspace/a.md"), "x"), EACCES);
    assert!(!m.backing("workspace", "a.md").exists());
}

#[test]
fn formatter_worker_alone_keeps_data_read_only() {
    if !fuse_ok() {
        return;
    }
    let m = Setup::new(&example("sandboxed.yaml"))
        .file("data", "in.md", "raw")
        .with_workers(&[&example("formatter.worker")])
        .mount();
    assert_eq!(names(m.mountpoint()), ["data", "workspace"]);
    assert_eq!(fs::read_to_string(m.path("data/in.md")).unwrap(), "raw");
    assert_errno(fs::write(m.path("data/in.md"), "changed"), EROFS);
    assert_eq!(
        fs::read_to_string(m.backing("data", "in.md")).unwrap(),
        "raw"
    );
}

#[test]
fn direct_example_mounts_existing_dirs() {
    if !fuse_ok() {
        return;
    }
    let s = Setup::new(&example("direct.yaml"))
        .backing_dir("data", "data")
        .backing_dir("workspace", "workspace")
        .file("data", "input.csv", "a,b\n")
        .file("workspace", ".git/HEAD", "ref: refs/heads/main\n")
        .file("workspace", "src/lib.rs", "fn f() {}\n");
    let m = s.mount();
    assert_eq!(names(m.mountpoint()), ["data", "workspace"]);
    assert_eq!(
        fs::read_to_string(m.path("data/input.csv")).unwrap(),
        "a,b\n"
    );
    assert_errno(fs::remove_file(m.path("data/input.csv")), EROFS);
    // .git is protected, deletes ask (denied), writes are pre-approved.
    assert_errno(fs::write(m.path("workspace/.git/HEAD"), "x"), EROFS);
    assert_errno(fs::remove_file(m.path("workspace/src/lib.rs")), EACCES);
    fs::write(m.path("workspace/src/new.rs"), "fn g() {}\n").unwrap();
    assert_eq!(
        fs::read_to_string(m.backing("workspace", "src/new.rs")).unwrap(),
        "fn g() {}\n"
    );
    assert_eq!(
        fs::read_to_string(m.backing("workspace", ".git/HEAD")).unwrap(),
        "ref: refs/heads/main\n"
    );
}

/// Without /dev/fuse the mount is refused with one line naming the cause.
/// Runs the binary in a private mount namespace whose /dev is an empty
/// tmpfs (root and `unshare` needed; the host's /dev is never touched).
#[test]
fn missing_dev_fuse_is_a_clear_error() {
    if !root_ok() || !tool_ok("unshare") {
        return;
    }
    let s = Setup::zones(Mode::Sandboxed, &[("ws", "mode: rw")]);
    let root = s.root().to_path_buf();
    fs::write(
        root.join("project.yaml"),
        zones_yaml(Mode::Sandboxed, &[("ws", "mode: rw")]),
    )
    .unwrap();
    fs::create_dir_all(root.join("mnt")).unwrap();
    let script = format!(
        "mount -t tmpfs none /dev && exec {} mount --config {} {}",
        env!("CARGO_BIN_EXE_zonemount"),
        root.join("project.yaml").display(),
        root.join("mnt").display()
    );
    let out = run(
        Command::new("unshare").args(["--mount", "--propagation", "private", "sh", "-c", &script]),
        Duration::from_secs(30),
    );
    assert_eq!(
        out.code(),
        Some(5),
        "exit 5: the host forbids it\n{}",
        out.describe()
    );
    let err = out.stderr.trim();
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains("/dev/fuse"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(!is_mounted(&root.join("mnt")));
    drop(s);
}

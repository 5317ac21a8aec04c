//! Every preset (`--preset NAME`) really mounted from a project directory:
//! one operation it allows and one it refuses; `full` and `auto-approve`
//! refused without `--danger`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};

use common::*;
use tempfile::TempDir;

/// `proj/` (holding `a.txt` and `.git/HEAD`) as the caller's directory and
/// a mountpoint `mnt/`; unmounts exactly `mnt` on drop.
struct Preset {
    _tmp: TempDir,
    proj: PathBuf,
    mnt: PathBuf,
}

impl Preset {
    fn new() -> Preset {
        let tmp = tempfile::Builder::new()
            .prefix("zonemount-preset-test.")
            .tempdir()
            .unwrap();
        let root = fs::canonicalize(tmp.path()).unwrap();
        let proj = root.join("proj");
        fs::create_dir_all(proj.join(".git")).unwrap();
        fs::write(proj.join("a.txt"), "a\n").unwrap();
        fs::write(proj.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        let mnt = root.join("mnt");
        fs::create_dir_all(&mnt).unwrap();
        Preset {
            _tmp: tmp,
            proj,
            mnt,
        }
    }

    fn zonemount(&self, args: &[&str]) -> Out {
        let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
        zonemount_at(&self.proj, &args)
    }

    /// `mount --no-approvals --preset NAME EXTRA... mnt`, which must work.
    fn mount(&self, name: &str, extra: &[&str]) {
        let mnt = self.mnt.to_str().unwrap();
        let mut args = vec!["mount", "--no-approvals", "--preset", name];
        args.extend(extra);
        args.push(mnt);
        let out = self.zonemount(&args);
        assert!(out.success(), "{name}: {}", out.describe());
        assert!(wait_mounted(&self.mnt), "{name}: not mounted");
        assert!(
            out.stderr
                .contains(&format!("with config preset:{name}; zones: ")),
            "{}",
            out.stderr
        );
    }

    fn at(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    fn errno(r: std::io::Result<()>) -> i32 {
        match r {
            Ok(()) => panic!("allowed"),
            Err(e) => e.raw_os_error().unwrap_or(0),
        }
    }

    fn root_names(&self) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(&self.mnt)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

impl Drop for Preset {
    fn drop(&mut self) {
        cleanup_mount(&self.mnt, true);
    }
}

fn read(p: &Path) -> String {
    fs::read_to_string(p).unwrap()
}

#[test]
fn read_only_reads_and_refuses_writes() {
    if !require(Need::Fuse) {
        return;
    }
    let p = Preset::new();
    p.mount("read-only", &[]);
    assert_eq!(read(&p.at("work/a.txt")), "a\n");
    let e = Preset::errno(fs::write(p.at("work/new"), "x"));
    assert_eq!(e, libc::EROFS);
    assert!(!p.proj.join("new").exists());
}

#[test]
fn workspace_write_writes_but_keeps_git_read_only() {
    if !require(Need::Fuse) {
        return;
    }
    let p = Preset::new();
    p.mount("workspace-write", &[]);
    fs::write(p.at("work/new"), "x").unwrap();
    assert_eq!(read(&p.proj.join("new")), "x");
    let e = Preset::errno(fs::write(p.at("work/.git/HEAD"), "x"));
    assert_eq!(e, libc::EROFS);
    assert_eq!(read(&p.proj.join(".git/HEAD")), "ref: refs/heads/main\n");
}

/// `full` and `auto-approve`: refused without --danger (one line, exit 2,
/// nothing mounted); with it, .git is writable, and the mount's root still
/// takes no new entry.
fn danger_preset(name: &str) {
    let p = Preset::new();
    let mnt = p.mnt.to_str().unwrap();
    let out = p.zonemount(&["mount", "--preset", name, mnt]);
    assert_eq!(out.code(), Some(2), "{}", out.describe());
    assert_eq!(
        out.stderr,
        format!(
            "zonemount: preset '{name}' lets a worker change everything in its zones unasked; refused (add --danger to mount it)\n"
        )
    );
    assert!(!is_mounted(&p.mnt));
    p.mount(name, &["--danger"]);
    fs::write(p.at("work/.git/HEAD"), "x").unwrap();
    assert_eq!(read(&p.proj.join(".git/HEAD")), "x");
    fs::remove_file(p.at("work/a.txt")).unwrap();
    assert!(!p.proj.join("a.txt").exists());
    let e = Preset::errno(fs::create_dir(p.at("elsewhere")));
    assert_eq!(e, libc::EACCES);
}

#[test]
fn full_needs_danger() {
    if !require(Need::Fuse) {
        return;
    }
    danger_preset("full");
}

#[test]
fn auto_approve_needs_danger() {
    if !require(Need::Fuse) {
        return;
    }
    danger_preset("auto-approve");
}

#[test]
fn sandbox_writes_only_its_sandbox() {
    if !require(Need::Fuse) {
        return;
    }
    let p = Preset::new();
    p.mount("sandbox", &[]);
    assert_eq!(p.root_names(), ["workspace"]);
    fs::write(p.at("workspace/new"), "x").unwrap();
    assert_eq!(read(&p.proj.join(".sandbox/workspace/new")), "x");
    // The project itself is not there, and nothing can be added beside.
    let e = Preset::errno(fs::write(p.at("a.txt"), "x"));
    assert_eq!(e, libc::EACCES);
    assert_eq!(read(&p.proj.join("a.txt")), "a\n");
}

#[test]
fn permissive_sandbox_reads_and_asks_before_writing() {
    if !require(Need::Fuse) {
        return;
    }
    let p = Preset::new();
    // --no-approvals: each ask is denied at once.
    p.mount("permissive-sandbox", &[]);
    assert_eq!(read(&p.at("work/a.txt")), "a\n");
    let e = Preset::errno(fs::write(p.at("work/new"), "x"));
    assert_eq!(e, libc::EACCES);
    assert!(!p.proj.join("new").exists());
    let status = p.zonemount(&["status", p.mnt.to_str().unwrap()]);
    assert!(
        status
            .stdout
            .contains("config: preset:permissive-sandbox\n"),
        "{}",
        status.stdout
    );
}

#[test]
fn code_unit_edits_but_never_deletes() {
    if !require(Need::Fuse) {
        return;
    }
    let p = Preset::new();
    p.mount("code-unit", &[]);
    fs::write(p.at("unit/a.txt"), "edited\n").unwrap();
    assert_eq!(read(&p.proj.join("a.txt")), "edited\n");
    // Blocked: EPERM, the errno of a policy that never asks.
    let e = Preset::errno(fs::remove_file(p.at("unit/a.txt")));
    assert_eq!(e, libc::EPERM);
    assert!(p.proj.join("a.txt").exists());
}

#[test]
fn an_unknown_preset_names_the_known_ones() {
    let p = Preset::new();
    let out = p.zonemount(&["derive", "--preset", "yolo"]);
    assert_eq!(out.code(), Some(2), "{}", out.describe());
    assert_eq!(
        out.stderr,
        "zonemount: preset:yolo: unknown preset 'yolo'; the presets are read-only, \
         workspace-write, full, sandbox, permissive-sandbox, auto-approve, code-unit\n"
    );
}

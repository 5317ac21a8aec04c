//! `--zone NAME=PATH[:ro|rw|staged]` on real mounts: `mount` and `run` with no
//! config file at all, relative paths taken from the caller's directory
//! (the detached daemon included), and `status`, `list`, `check` and the
//! mount's own line saying the zones came from the command line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};

use common::*;
use tempfile::TempDir;

/// `proj/` (the caller's cwd, with `proj/sub`), `docs/` beside it holding
/// `guide.md`, and a mountpoint `mnt/`; unmounts exactly `mnt` on drop.
struct Here {
    _tmp: TempDir,
    root: PathBuf,
    mnt: PathBuf,
}

impl Here {
    fn new() -> Here {
        let tmp = tempfile::Builder::new()
            .prefix("zonemount-zones-test.")
            .tempdir()
            .unwrap();
        let root = fs::canonicalize(tmp.path()).unwrap();
        fs::create_dir_all(root.join("proj/sub")).unwrap();
        fs::create_dir_all(root.join("docs")).unwrap();
        fs::write(root.join("docs/guide.md"), "read me\n").unwrap();
        fs::create_dir_all(root.join("mnt")).unwrap();
        let mnt = root.join("mnt");
        Here {
            _tmp: tmp,
            root,
            mnt,
        }
    }

    fn proj(&self) -> PathBuf {
        self.root.join("proj")
    }

    fn zonemount(&self, args: &[&str]) -> Out {
        let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
        zonemount_at(&self.proj(), &args)
    }
}

impl Drop for Here {
    fn drop(&mut self) {
        cleanup_mount(&self.mnt, true);
    }
}

#[test]
fn mount_with_zones_alone_needs_no_file_and_says_where_they_came_from() {
    if !require(Need::Fuse) {
        return;
    }
    let h = Here::new();
    let mnt = h.mnt.to_str().unwrap();
    let out = h.zonemount(&[
        "mount",
        "--no-approvals",
        "--zone",
        "work=.:rw",
        "--zone",
        "docs=../docs:ro",
        mnt,
    ]);
    assert!(out.success(), "{}", out.describe());
    assert!(wait_mounted(&h.mnt));
    assert!(
        out.stderr.contains(&format!(
            "mounted {mnt} with zones from the command line (--zone work, docs); zones: work rw {}, docs ro {}",
            h.proj().display(),
            h.root.join("docs").display()
        )),
        "{}",
        out.stderr
    );
    let mut names: Vec<String> = fs::read_dir(&h.mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["docs", "work"]);
    // Allowed: a write in the rw zone lands in the caller's directory.
    fs::write(h.mnt.join("work/sub/new.txt"), "x").unwrap();
    assert_eq!(
        fs::read_to_string(h.proj().join("sub/new.txt")).unwrap(),
        "x"
    );
    assert_eq!(
        fs::read_to_string(h.mnt.join("docs/guide.md")).unwrap(),
        "read me\n"
    );
    // Refused: docs is read-only (the `:ro`).
    let err = fs::write(h.mnt.join("docs/new.md"), "x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
    assert!(!h.root.join("docs/new.md").exists());
    // No embedded default: nothing was made in the caller's directory.
    assert!(!h.proj().join(".sandbox").exists());

    let status = h.zonemount(&["status", mnt]);
    assert!(status.success(), "{}", status.describe());
    assert!(
        status
            .stdout
            .contains("config: command line (--zone work, docs)\n"),
        "{}",
        status.stdout
    );
    let json = h.zonemount(&["status", "--json", mnt]);
    let v: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(v["config"], serde_json::Value::Null);
    assert_eq!(
        v["zone_args"],
        serde_json::json!(["work=.:rw", "docs=../docs:ro"])
    );
    let list = h.zonemount(&["list"]);
    let row = list
        .stdout
        .lines()
        .find(|l| l.starts_with(&format!("{mnt} ")))
        .unwrap_or_else(|| panic!("{mnt} not listed: {}", list.stdout));
    assert!(row.contains("command line (--zone work, docs)"), "{row}");
    // `check` loads the zones again from the mount's record.
    let check = h.zonemount(&["check", mnt, "/docs/x", "--write"]);
    assert_eq!(check.code(), Some(4), "{}", check.describe());
    let check = h.zonemount(&["check", mnt, "/work/x", "--write"]);
    assert_eq!(check.code(), Some(0), "{}", check.describe());

    let out = h.zonemount(&["unmount", mnt]);
    assert!(out.success(), "{}", out.describe());
}

#[test]
fn zones_are_added_to_a_config_file_and_a_clash_names_both() {
    if !require(Need::Fuse) {
        return;
    }
    let h = Here::new();
    let mnt = h.mnt.to_str().unwrap();
    fs::write(
        h.proj().join("zonemount.yaml"),
        "sandbox:\n  mode: sandboxed\n  zones:\n    cache: { mode: rw }\n",
    )
    .unwrap();
    let out = h.zonemount(&["mount", "--zone", "cache=../docs", mnt]);
    assert_eq!(out.code(), Some(2), "{}", out.describe());
    assert_eq!(
        out.stderr.trim_end(),
        format!(
            "zonemount: --zone cache=../docs: zone 'cache' is already defined ({}/zonemount.yaml line 4); give this one another name",
            h.proj().display()
        )
    );
    assert!(!is_mounted(&h.mnt));
    let out = h.zonemount(&["mount", "--no-approvals", "--zone", "docs=../docs", mnt]);
    assert!(out.success(), "{}", out.describe());
    assert!(wait_mounted(&h.mnt));
    assert!(
        out.stderr.contains(&format!(
            "with config {}/zonemount.yaml plus --zone docs;",
            h.proj().display()
        )),
        "{}",
        out.stderr
    );
    fs::write(h.mnt.join("cache/a"), "a").unwrap();
    assert!(h.proj().join(".sandbox/cache/a").exists());
    let err = fs::write(h.mnt.join("docs/a"), "a").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
    let out = h.zonemount(&["unmount", mnt]);
    assert!(out.success(), "{}", out.describe());
}

#[test]
fn run_with_zones_needs_no_file() {
    if !require(Need::Fuse) {
        return;
    }
    let h = Here::new();
    let tmpdir = h.root.join("tmp");
    fs::create_dir_all(&tmpdir).unwrap();
    let script =
        "echo made > made.txt && cat ../docs/guide.md && ! echo x 2>/dev/null > ../docs/no.md";
    let out = run(
        std::process::Command::new(BIN)
            .args([
                "run",
                "--no-approvals",
                "--zone",
                "work=.:rw",
                "--zone",
                "docs=../docs:ro",
                "--",
                "sh",
                "-c",
                script,
            ])
            .current_dir(h.proj())
            .env("TMPDIR", &tmpdir),
        CMD_TIMEOUT,
    );
    assert!(out.success(), "{}", out.describe());
    assert_eq!(out.stdout, "read me\n");
    assert_eq!(
        fs::read_to_string(h.proj().join("made.txt")).unwrap(),
        "made\n"
    );
    assert!(!h.root.join("docs/no.md").exists());
    assert!(!h.proj().join(".sandbox").exists());
    assert_eq!(
        fs::read_dir(&tmpdir).unwrap().count(),
        0,
        "run left its mountpoint"
    );
}

#[test]
fn a_bad_zone_is_refused_before_mounting() {
    let h = Here::new();
    let mnt = h.mnt.to_str().unwrap();
    for (args, want) in [
        (
            vec!["mount", "--zone", "work=./missing:rw", mnt],
            "zonemount: --zone work=./missing:rw: './missing' (",
        ),
        (
            vec!["mount", "--zone", "w=.:rw", "--zone", "s=sub", mnt],
            "zonemount: --zone s=sub: backing dir ",
        ),
        (
            vec!["derive", "--zone", "bad name=."],
            "zonemount: --zone bad name=.: zone name 'bad name' contains ' '",
        ),
        (
            vec!["run", "--zone", "work", "--", "true"],
            "zonemount: --zone work: expected NAME=PATH[:ro|rw|staged]",
        ),
        (
            vec!["mount", "--zone", "a=sub:rx", mnt],
            "zonemount: --zone a=sub:rx: unknown mode ':rx' for zone 'a': expected :ro, :rw or :staged",
        ),
    ] {
        let out = h.zonemount(&args);
        assert_eq!(out.code(), Some(2), "{args:?}: {}", out.describe());
        assert!(out.stderr.starts_with(want), "{args:?}: {}", out.stderr);
        assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
        assert!(!is_mounted(&h.mnt));
    }
}

/// `derive` takes `--zone` too, and shows each path resolved from the
/// caller's directory.
#[test]
fn derive_shows_resolved_paths() {
    let h = Here::new();
    let out = h.zonemount(&["derive", "--json", "--zone", "docs=../docs"]);
    assert!(out.success(), "{}", out.describe());
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        v["zones"][0]["backing"],
        serde_json::json!(Path::new(&h.root).join("docs"))
    );
    assert_eq!(v["mode"], "direct");
}

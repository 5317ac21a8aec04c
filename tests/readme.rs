//! Every example in the README runs as written, from a clone, with the
//! binary on PATH (as after the install line): each ```sh block as one
//! script (`bash -e`), each ```console block's `$ ` lines in order (their
//! output lines are what a reader sees, not checked), each ```python block
//! with the client importable (as after `pip install ./clients/python`). Blocks marked
//! ```sh no-test (the install line, the test command itself) and ```text
//! ones are not run; ```console pty ones need a terminal: tests/review.rs
//! runs them through one. The examples' mountpoint /tmp/task-42 is given a
//! directory of the test's own; every mount a block leaves is unmounted
//! (exact paths), on panic too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;

/// (info string, body) of each fenced block.
fn blocks(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut cur: Option<(String, String)> = None;
    for line in text.lines() {
        match (&mut cur, line.strip_prefix("```")) {
            (None, Some(info)) => cur = Some((info.trim().to_string(), String::new())),
            (Some(_), Some(_)) => out.extend(cur.take()),
            (Some((_, body)), None) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, None) => {}
        }
    }
    out
}

/// The zonemount mounts under `root` still in /proc/mounts.
fn mounts_under(root: &Path) -> Vec<PathBuf> {
    fs::read_to_string("/proc/mounts")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(1))
        .map(PathBuf::from)
        .filter(|p| p.starts_with(root))
        .collect()
}

struct Cleanup(PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for m in mounts_under(&self.0) {
            cleanup_mount(&m, true);
        }
    }
}

#[test]
fn every_readme_example_runs_as_written() {
    if !fuse_ok() {
        return;
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = fs::read_to_string(repo.join("README.md")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(tmp.path()).unwrap();
    let _cleanup = Cleanup(root.clone());
    let bin = root.join("bin");
    fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(BIN, bin.join("zonemount")).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let task = root.join("task-42");
    let mut ran = 0;
    for (i, (info, body)) in blocks(&readme).into_iter().enumerate() {
        let python = info == "python";
        let script = match info.as_str() {
            "sh" | "python" => body,
            "console" => body
                .lines()
                .filter_map(|l| l.strip_prefix("$ "))
                .map(|l| format!("{l}\n"))
                .collect(),
            _ => continue,
        };
        // A clone's files, fresh for each block.
        let work = root.join(format!("block-{i}"));
        fs::create_dir(&work).unwrap();
        let out = run(
            Command::new("cp")
                .arg("-a")
                .arg(repo.join("config"))
                .arg(&work),
            Duration::from_secs(30),
        );
        assert!(out.success(), "{}", out.describe());
        let script = script.replace("/tmp/task-42", &task.to_string_lossy());
        let mut cmd = if python {
            let mut c = Command::new("python3");
            c.args(["-c", &script])
                .env("PYTHONPATH", repo.join("clients/python/src"));
            c
        } else {
            let mut c = Command::new("bash");
            c.args(["-e", "-c", &script]);
            c
        };
        let out = run(
            cmd.current_dir(&work).env("PATH", &path),
            Duration::from_secs(60),
        );
        assert!(
            out.success(),
            "README block {i} (```{info}) failed:\n{script}\n{}",
            out.describe()
        );
        assert!(
            mounts_under(&root).is_empty(),
            "README block {i} left a mount: {:?}",
            mounts_under(&root)
        );
        ran += 1;
    }
    assert!(ran >= 4, "the README's examples were not found ({ran} run)");
}

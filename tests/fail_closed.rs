//! Issue 14, "fails closed, says what it did": approval defaults as the
//! seeds mean them, a config file without `sandbox:` refused, `status` and
//! `mount` naming the config they used, `check` taking PATH as a shell
//! would, `run` saying a missing CMD in its own words, and each tightening
//! of a worker's request noted. Every mount is a real one, torn down by its
//! guard (on panic too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;
use libc::{EACCES, EPERM};

/// `zonemount ARGS...` run in `dir`.
fn zm_in(dir: &Path, args: &[&str]) -> Out {
    run(Command::new(BIN).args(args).current_dir(dir), CMD_TIMEOUT)
}

/// A refusal: exit `code`, exactly one line on stderr, containing each of
/// `wants`.
#[track_caller]
fn assert_refused(out: &Out, code: i32, wants: &[&str]) {
    assert_eq!(out.code(), Some(code), "{}", out.describe());
    let err = out.stderr.trim();
    assert_eq!(err.lines().count(), 1, "one line: {}", out.describe());
    assert!(err.starts_with("zonemount: "), "{}", out.describe());
    for w in wants {
        assert!(err.contains(w), "{w:?} not in: {}", out.describe());
    }
    assert!(!err.contains("panicked"), "{}", out.describe());
}

/// Unmounts its path (by exact path, if mounted) when dropped, on panic too.
struct Unmounted(std::path::PathBuf);

impl Drop for Unmounted {
    fn drop(&mut self) {
        if is_mounted(&self.0) {
            cleanup_mount(&self.0, true);
        }
    }
}

// ----- approval defaults

#[test]
fn a_class_left_out_of_an_approval_block_asks() {
    if !fuse_ok() {
        return;
    }
    // Mounted with --no-approvals (the harness's default): `ask` is
    // denied at once (EACCES), `blocked` is EPERM, preApproved goes.
    let m = Setup::zones(
        Mode::Sandboxed,
        &[
            ("free", "mode: rw"),
            ("w", "mode: rw, approval: { write: ask }"),
            ("d", "mode: rw, approval: { delete: blocked }"),
        ],
    )
    .file("free", "old.txt", "old\n")
    .file("w", "old.txt", "old\n")
    .file("d", "old.txt", "old\n")
    .mount();
    // No block: preApproved for both classes.
    fs::write(m.path("free/new.txt"), "x").unwrap();
    fs::remove_file(m.path("free/old.txt")).unwrap();
    assert!(!m.backing("free", "old.txt").exists());
    // `{write: ask}`: deletes ask too.
    assert_errno(fs::write(m.path("w/new.txt"), "x"), EACCES);
    assert_errno(fs::remove_file(m.path("w/old.txt")), EACCES);
    assert!(m.backing("w", "old.txt").exists());
    assert!(!m.backing("w", "new.txt").exists());
    // `{delete: blocked}`: writes ask.
    assert_errno(fs::write(m.path("d/new.txt"), "x"), EACCES);
    assert_errno(fs::remove_file(m.path("d/old.txt")), EPERM);
    assert!(m.backing("d", "old.txt").exists());
    // status and derive say the same.
    let out = m.zonemount(&["status", "--json", m.mountpoint().to_str().unwrap()]);
    assert!(out.success(), "{}", out.describe());
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let policy = |i: usize| {
        let a = &v["zones"][i]["policy"]["approval"];
        (a["write"].as_str().unwrap(), a["delete"].as_str().unwrap())
    };
    assert_eq!(policy(0), ("preApproved", "preApproved"), "{v}");
    assert_eq!(policy(1), ("ask", "ask"), "{v}");
    assert_eq!(policy(2), ("ask", "blocked"), "{v}");
}

// ----- a config file must have `sandbox:`

#[test]
fn a_config_without_sandbox_is_refused_by_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fs::create_dir(d.join("mnt")).unwrap();
    // Should a refused mount mount after all, it goes when the test ends.
    let _guard = Unmounted(d.join("mnt"));
    fs::write(
        d.join("typo.yaml"),
        "model: x\nsandbx:\n  zones:\n    ws: { mode: rw }\n",
    )
    .unwrap();
    fs::write(d.join("empty.yaml"), "").unwrap();
    fs::write(d.join("model.yaml"), "model: x\n").unwrap();
    let typo = ["typo.yaml:2: sandbx: did you mean `sandbox:`?"];
    // (`mount` looks for /dev/fuse before it reads its config.)
    let mount_too = fuse_ok();
    for args in [
        &["derive", "--config", "typo.yaml"][..],
        &["run", "--config", "typo.yaml", "--", "true"],
        &["mount", "--config", "typo.yaml", "mnt"],
    ] {
        if args[0] == "mount" && !mount_too {
            continue;
        }
        let out = zm_in(d, args);
        assert_refused(&out, 2, &typo);
        assert!(!out.stderr.contains("mounted"), "{}", out.describe());
    }
    for (file, want) in [
        ("empty.yaml", "empty.yaml: the file is empty"),
        ("model.yaml", "model.yaml: no `sandbox:` section"),
    ] {
        let out = zm_in(d, &["derive", "--config", file]);
        assert_refused(&out, 2, &[want, "must have a `sandbox:` section"]);
        assert_eq!(out.stdout, "", "no table: {}", out.describe());
    }
    // A found ./zonemount.yaml is held to the same rule.
    fs::copy(d.join("typo.yaml"), d.join("zonemount.yaml")).unwrap();
    let out = zm_in(d, &["derive"]);
    assert_refused(&out, 2, &["zonemount.yaml:2: sandbx: did you mean"]);
    if mount_too {
        let out = zm_in(d, &["mount", "mnt"]);
        assert_refused(&out, 2, &["zonemount.yaml:2: sandbx: did you mean"]);
    }
    // Nothing was opened up: no default zones made, nothing mounted.
    assert!(!d.join(".sandbox").exists());
    assert!(!is_mounted(&d.join("mnt")));
    // A worker file without `sandbox:` still means an empty root.
    fs::write(
        d.join("zonemount.yaml"),
        "sandbox:\n  zones:\n    ws: { mode: rw }\n",
    )
    .unwrap();
    fs::write(
        d.join("talker.worker"),
        "---\nname: talker\n---\nNo files.\n",
    )
    .unwrap();
    let out = zm_in(d, &["derive", "--worker", "talker.worker"]);
    assert!(out.success(), "{}", out.describe());
    assert!(
        out.stdout
            .contains("(no zones: the mount is an empty root)"),
        "{}",
        out.describe()
    );
}

// ----- status and mount name the config they used

#[test]
fn status_names_a_found_zonemount_yaml() {
    if !fuse_ok() {
        return;
    }
    let s = Setup::without_config();
    let found = s.root().join("zonemount.yaml");
    fs::write(&found, "sandbox:\n  zones:\n    ws: { mode: rw }\n").unwrap();
    let m = s.mount();
    let mp = m.mountpoint().to_str().unwrap();
    let out = m.zonemount(&["status", mp]);
    assert!(out.success(), "{}", out.describe());
    let line = format!("config: {}\n", found.display());
    assert!(out.stdout.contains(&line), "{line:?}: {}", out.describe());
    assert!(
        !out.stdout.contains("embedded default"),
        "{}",
        out.describe()
    );
    let out = m.zonemount(&["status", "--json", mp]);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["config"], found.to_str().unwrap(), "{v}");
    let out = m.zonemount(&["list", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let mine = v
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["mountpoint"] == mp)
        .expect("listed");
    assert_eq!(mine["config"], found.to_str().unwrap(), "{mine}");
}

#[test]
fn mount_says_which_config_and_backing_dirs_it_used() {
    if !fuse_ok() {
        return;
    }
    // No config anywhere: the embedded default, its dirs created here.
    let (out, m) = Setup::without_config().try_mount();
    assert!(out.success(), "{}", out.describe());
    let root = m.root().to_path_buf();
    let want = format!(
        "zonemount: mounted {} with config the embedded default (no --config, no ./zonemount.yaml); zones: cache rw {}/.sandbox/cache (created), workspace rw {}/.sandbox/workspace (created)\n",
        m.mountpoint().display(),
        root.display(),
        root.display()
    );
    assert_eq!(out.stderr, want, "{}", out.describe());
    assert_eq!(out.stdout, "", "{}", out.describe());
    drop(m);

    // A config file; the dirs exist now, so nothing is marked created.
    let s =
        Setup::zones(Mode::Sandboxed, &[("ws", "mode: rw"), ("data", "mode: ro")]).dir("ws", "");
    let config = s.root().join("project.yaml");
    let (out, m) = s.try_mount();
    assert!(out.success(), "{}", out.describe());
    let err = out.stderr.trim_end();
    assert_eq!(err.lines().count(), 1, "{}", out.describe());
    assert!(
        err.starts_with(&format!(
            "zonemount: mounted {} with config {}; zones: ws rw ",
            m.mountpoint().display(),
            config.display()
        )),
        "{}",
        out.describe()
    );
    assert!(err.contains("/.sandbox/ws, data ro "), "{}", out.describe());
    assert!(
        err.ends_with("/.sandbox/data (created)"),
        "{}",
        out.describe()
    );
    drop(m);

    // -q and --quiet: silent.
    for q in ["-q", "--quiet"] {
        let (out, m) = Setup::without_config().arg(q).try_mount();
        assert!(out.success(), "{}", out.describe());
        assert!(m.is_mounted());
        assert_eq!(out.stderr, "", "{q}: {}", out.describe());
    }
}

#[test]
fn mount_in_the_foreground_says_it_too() {
    if !fuse_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();
    let mnt = root.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let config = root.join("p.yaml");
    fs::write(&config, "sandbox:\n  zones:\n    ws: { mode: rw }\n").unwrap();
    // The guard stops the daemon and unmounts, on panic too.
    let fg = Foreground::spawn(&root, Some(&config), &[], &mnt);
    let said = format!(
        "zonemount: mounted {} with config {}; zones: ws rw {}/.sandbox/ws (created)\n",
        mnt.display(),
        config.display(),
        root.display()
    );
    assert!(
        wait_until(MOUNT_TIMEOUT, || fg.output().1 == said),
        "stderr: {:?}, want {said:?}",
        fg.output()
    );
    assert!(is_mounted(&mnt));
    assert_eq!(fg.output().0, "", "nothing on stdout");
}

// ----- tightenings are said

const PARENT: &str = "sandbox:
  zones:
    final:
      mode: rw
      approval: { write: ask, delete: blocked }
      suffixes: [.md]
      max_file_bytes: 100
";

const LOOSE: &str = "---
name: loose
sandbox:
  zones:
    - name: final
      approval: { write: preApproved, delete: blocked }
      suffixes: [.md, .txt]
      max_file_bytes: 1000
---
";

#[test]
fn derive_and_mount_note_each_tightening() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fs::write(d.join("p.yaml"), PARENT).unwrap();
    fs::write(d.join("loose.worker"), LOOSE).unwrap();
    let notes = [
        "zonemount: note: loose.worker:5: worker 'loose' asked approval.write: preApproved for zone 'final', but its parent's is stricter: it gets ask",
        "zonemount: note: loose.worker:5: worker 'loose' asked suffixes: [.md, .txt] for zone 'final', but its parent's is stricter: it gets [.md]",
        "zonemount: note: loose.worker:5: worker 'loose' asked max_file_bytes: 1000 for zone 'final', but its parent's is stricter: it gets 100",
    ];
    let out = zm_in(
        d,
        &["derive", "--config", "p.yaml", "--worker", "loose.worker"],
    );
    assert!(out.success(), "{}", out.describe());
    assert_eq!(
        out.stderr.lines().collect::<Vec<_>>(),
        notes,
        "{}",
        out.describe()
    );
    // What it got is what the table says.
    let row = out
        .stdout
        .lines()
        .find(|l| l.starts_with("final "))
        .unwrap();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells[2..8],
        ["rw", "preApproved", "ask", "blocked", ".md", "100"],
        "{row}"
    );
    // Nothing looser: nothing said.
    fs::write(
        d.join("tight.worker"),
        "sandbox:\n  zones:\n    final: { mode: ro }\n",
    )
    .unwrap();
    let out = zm_in(
        d,
        &["derive", "--config", "p.yaml", "--worker", "tight.worker"],
    );
    assert!(out.success(), "{}", out.describe());
    assert_eq!(out.stderr, "", "{}", out.describe());

    if !fuse_ok() {
        return;
    }
    let (out, m) = Setup::new(PARENT).with_workers(&[LOOSE]).try_mount();
    assert!(out.success(), "{}", out.describe());
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(
        lines.len(),
        4,
        "three notes, then what it used: {}",
        out.describe()
    );
    for (got, want) in lines.iter().zip(notes) {
        let want = want.replace("loose.worker:5", "worker0.worker:5");
        assert!(
            got.ends_with(want.trim_start_matches("zonemount: note: ")),
            "{got} vs {want}"
        );
    }
    assert!(
        lines[3].starts_with("zonemount: mounted "),
        "{}",
        out.describe()
    );
    drop(m);
    let (out, _m) = Setup::new(PARENT)
        .with_workers(&[LOOSE])
        .arg("-q")
        .try_mount();
    assert!(out.success(), "{}", out.describe());
    assert_eq!(out.stderr, "", "{}", out.describe());
}

// ----- check takes PATH as a shell would

#[test]
fn check_resolves_paths_from_the_current_directory() {
    if !fuse_ok() {
        return;
    }
    let m = Setup::zones(
        Mode::Sandboxed,
        &[("input", "mode: ro"), ("ws", "mode: rw")],
    )
    .file("input", "a.txt", "a\n")
    .mount();
    let root = m.root();
    let mp = m.mountpoint().to_str().unwrap();
    let json = |out: &Out| -> serde_json::Value {
        assert!(
            out.code().is_some_and(|c| c == 0 || c == 4),
            "{}",
            out.describe()
        );
        serde_json::from_str(&out.stdout).unwrap()
    };
    // The case: from the dir holding the mount, ./mnt/input/a.txt.
    for (cwd, path) in [
        (root.to_path_buf(), "./mnt/input/a.txt"),
        (root.to_path_buf(), "mnt/input/../input/a.txt"),
        (m.path("input"), "a.txt"),
        (m.path("ws"), "../input/a.txt"),
        (Path::new("/").to_path_buf(), "/input/a.txt"),
    ] {
        let out = zm_in(&cwd, &["check", "--json", mp, path, "--write"]);
        let v = json(&out);
        assert_eq!(
            v["path"],
            "/input/a.txt",
            "{path} from {}: {v}",
            cwd.display()
        );
        assert_eq!(v["errno"], "EROFS", "{v}");
    }
    // The mountpoint itself, relative too.
    let out = zm_in(root, &["check", "--json", "mnt", ".", "--read"]);
    assert_eq!(
        out.code(),
        Some(2),
        "'.' is the temp dir, outside: {}",
        out.describe()
    );
    let out = zm_in(root, &["check", "--json", "mnt", "mnt", "--read"]);
    assert_eq!(json(&out)["path"], "/", "{}", out.describe());
    // Outside the mount: refused, one line, exit 2.
    for (cwd, path) in [
        (root.to_path_buf(), "./input/a.txt"),
        (root.to_path_buf(), "mnt/../project.yaml"),
        (m.path("ws"), "../../x"),
        (Path::new("/").to_path_buf(), "/etc/passwd"),
    ] {
        let out = zm_in(&cwd, &["check", mp, path]);
        assert_refused(&out, 2, &["is outside the mount", "/input/..., /ws/..."]);
    }
}

// ----- run: a missing CMD in zonemount's words

#[test]
fn run_says_a_missing_or_unexecutable_cmd_itself() {
    if !fuse_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = fs::canonicalize(dir.path()).unwrap();
    fs::write(
        d.join("p.yaml"),
        "sandbox:\n  zones:\n    ws: { mode: rw }\n",
    )
    .unwrap();
    let ws = d.join(".sandbox/ws");
    fs::create_dir_all(ws.join("adir")).unwrap();
    fs::write(ws.join("noexec.sh"), "#!/bin/sh\necho hi\n").unwrap();
    fs::set_permissions(ws.join("noexec.sh"), fs::Permissions::from_mode(0o644)).unwrap();
    let tmp = d.join("tmp");
    fs::create_dir(&tmp).unwrap();
    let run_cmd = |extra: &[&str], cmd: &str| {
        let mut c = Command::new(BIN);
        c.args(["run", "--config", "p.yaml"])
            .args(extra)
            .args(["--", cmd])
            .current_dir(&d)
            .env("TMPDIR", &tmp);
        run(&mut c, Duration::from_secs(60))
    };
    for (cmd, code, said) in [
        (
            "nosuchcmd",
            127,
            "zonemount: run: nosuchcmd: command not found",
        ),
        (
            "./nothere",
            127,
            "zonemount: run: ./nothere: No such file or directory",
        ),
        (
            "./noexec.sh",
            126,
            "zonemount: run: ./noexec.sh: Permission denied",
        ),
        ("./adir", 126, "zonemount: run: ./adir: Is a directory"),
    ] {
        let out = run_cmd(&["-q"], cmd);
        assert_eq!(out.code(), Some(code), "{cmd}: {}", out.describe());
        assert_eq!(out.stderr, format!("{said}\n"), "{cmd}: {}", out.describe());
        // Nothing left behind: the temp mountpoint is gone.
        assert_eq!(
            fs::read_dir(&tmp).unwrap().count(),
            0,
            "{cmd}: left in TMPDIR"
        );
    }
    // Without -q, run says what it mounted first; the command's words stay.
    let out = run_cmd(&[], "nosuchcmd");
    assert_eq!(out.code(), Some(127), "{}", out.describe());
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{}", out.describe());
    assert!(
        lines[0].starts_with(&format!(
            "zonemount: mounted {}/zonemount-run.",
            tmp.display()
        )),
        "{}",
        out.describe()
    );
    assert!(
        lines[0].contains(&format!(
            "with config {}/p.yaml; zones: ws rw ",
            d.display()
        )),
        "{}",
        out.describe()
    );
    assert_eq!(lines[1], "zonemount: run: nosuchcmd: command not found");
    assert!(!out.stderr.contains("setsid"), "{}", out.describe());
    // And a command that is there runs as before.
    let out = run_cmd(&["-q"], "true");
    assert!(out.success(), "{}", out.describe());
    assert_eq!(out.stderr, "", "{}", out.describe());

    // Under --isolate, CMD is looked for as the sandbox will see it: a
    // host path the sandbox doesn't bind is missing there.
    if !tool_ok("bwrap") {
        return;
    }
    let host_only = d.join("host-only.sh");
    fs::write(&host_only, "#!/bin/sh\necho hi\n").unwrap();
    fs::set_permissions(&host_only, fs::Permissions::from_mode(0o755)).unwrap();
    let host_only = host_only.to_str().unwrap();
    for (cmd, code, said) in [
        (
            "nosuchcmd",
            127,
            "zonemount: run: nosuchcmd: command not found".to_string(),
        ),
        (
            host_only,
            127,
            format!("zonemount: run: {host_only}: No such file or directory"),
        ),
        (
            "./noexec.sh",
            126,
            "zonemount: run: ./noexec.sh: Permission denied".to_string(),
        ),
    ] {
        let out = run_cmd(&["-q", "--isolate"], cmd);
        assert_eq!(
            out.code(),
            Some(code),
            "--isolate {cmd}: {}",
            out.describe()
        );
        assert_eq!(
            out.stderr,
            format!("{said}\n"),
            "--isolate {cmd}: {}",
            out.describe()
        );
        assert_eq!(
            fs::read_dir(&tmp).unwrap().count(),
            0,
            "{cmd}: left in TMPDIR"
        );
    }
    let out = run_cmd(&["-q", "--isolate"], "true");
    assert!(out.success(), "--isolate true: {}", out.describe());
}

//! `zonemount stages [--json] [--prune] [DIR]` on real stage dirs: one a
//! live mount holds, one left empty by an unmounted mount, one left with
//! changes; `--prune` removes only the empty unused one, and nothing that
//! is not a stage dir.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;

use std::fs;
use std::path::{Path, PathBuf};

/// A staged zone `work` over `<tmp>/b`, its stage at `stages/NAME`.
fn staged(stages: &Path, name: &str) -> Setup {
    Setup::new(
        "sandbox:\n  mode: direct\n  zones:\n    work:\n      path: ./b\n      mode: rw\n      staged: true\n",
    )
    .backing_dir("work", "b")
    .file("work", "f", "old\n")
    .arg("--stage-dir")
    .arg(&stages.join(name).to_string_lossy())
}

/// A worker's write, from a session of its own (as `run` starts one).
fn write(m: &TestMount, name: &str) {
    let out = m.sh_in("work", &format!("setsid -w sh -c 'echo new > {name}'"), &[]);
    assert!(out.success(), "{}", out.describe());
}

/// The stages dir, removed on the way out (an ordinary user's stage holds
/// the overlay's mode-0 work dirs, which a temp dir's removal can't enter).
struct Stages(tempfile::TempDir);

impl Drop for Stages {
    fn drop(&mut self) {
        let _ = zonemount::stage::dir::remove(self.0.path());
    }
}

fn rows(out: &Out) -> Vec<serde_json::Value> {
    assert!(out.success(), "{}", out.describe());
    let v: serde_json::Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", out.describe()));
    v.as_array().cloned().unwrap()
}

fn by_name<'a>(rows: &'a [serde_json::Value], name: &str) -> &'a serde_json::Value {
    rows.iter()
        .find(|r| {
            r["path"]
                .as_str()
                .is_some_and(|p| p.ends_with(&format!("/{name}")))
        })
        .unwrap_or_else(|| panic!("no row for {name}: {rows:?}"))
}

#[test]
fn stages_lists_each_and_prune_removes_only_the_empty_unused_ones() {
    if !fuse_ok() {
        return;
    }
    let stages = Stages(tempfile::tempdir().unwrap());
    let dir = stages.0.path().to_path_buf();
    let d = dir.to_string_lossy().into_owned();

    let mut empty = staged(&dir, "empty").mount();
    assert!(empty.unmount().success());
    let mut kept = staged(&dir, "kept").mount();
    write(&kept, "a");
    assert!(kept.unmount().success());
    let live = staged(&dir, "live").mount();
    write(&live, "a");
    write(&live, "b");
    // Not a stage dir (no manifest): neither listed nor pruned.
    fs::create_dir_all(dir.join("other")).unwrap();
    fs::write(dir.join("other/mine"), "x").unwrap();

    let listed = rows(&live.zonemount(&["stages", "--json", &d]));
    assert_eq!(listed.len(), 3, "{listed:?}");
    let names: Vec<PathBuf> = listed
        .iter()
        .map(|r| PathBuf::from(r["path"].as_str().unwrap()))
        .collect();
    assert_eq!(names, ["empty", "kept", "live"].map(|n| dir.join(n)));
    let l = by_name(&listed, "live");
    assert_eq!(l["in_use"], true, "{l}");
    assert_eq!(
        l["pid"].as_u64(),
        daemon_pids_for(live.mountpoint())
            .first()
            .map(|p| u64::from(*p)),
        "{l}"
    );
    assert_eq!(l["changes"], 2, "{l}");
    assert_eq!(l["mountpoint"], live.mountpoint().to_str().unwrap(), "{l}");
    let k = by_name(&listed, "kept");
    assert_eq!(
        (k["in_use"].as_bool(), k["changes"].as_u64()),
        (Some(false), Some(1)),
        "{k}"
    );
    let e = by_name(&listed, "empty");
    assert_eq!(
        (e["in_use"].as_bool(), e["changes"].as_u64()),
        (Some(false), Some(0)),
        "{e}"
    );
    assert_eq!(e["mountpoint"], empty.mountpoint().to_str().unwrap(), "{e}");
    for r in &listed {
        assert!(r["bytes"].as_u64().unwrap() > 0, "{r}");
        assert!(r["modified"].as_u64().unwrap() > 1_600_000_000, "{r}");
        assert_eq!(r["pruned"], false, "{r}");
    }

    let table = live.zonemount(&["stages", &d]);
    assert!(table.success(), "{}", table.describe());
    let head: Vec<&str> = table
        .stdout
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(
        head,
        [
            "STAGE",
            "MOUNTPOINT",
            "IN",
            "USE",
            "CHANGES",
            "SIZE",
            "MODIFIED"
        ],
        "{}",
        table.stdout
    );
    let live_row = table
        .stdout
        .lines()
        .find(|l| l.starts_with(&format!("{} ", dir.join("live").display())))
        .unwrap_or_else(|| panic!("{}", table.stdout));
    let cells: Vec<&str> = live_row.split_whitespace().collect();
    assert_eq!((cells[2], cells[4]), ("pid", "2"), "{live_row}");

    let out = live.zonemount(&["stages", "--prune", &d]);
    assert!(out.success(), "{}", out.describe());
    let want = [
        format!(
            "{} (for {}): removed",
            dir.join("empty").display(),
            empty.mountpoint().display()
        ),
        format!(
            "{} (for {}): kept: keeps 1 change(s): commit or discard them first",
            dir.join("kept").display(),
            kept.mountpoint().display()
        ),
        format!(
            "{} (for {}): kept: in use by a mount (pid ",
            dir.join("live").display(),
            live.mountpoint().display()
        ),
        "removed 1 of 3 stage dir(s)".to_string(),
    ];
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), want.len(), "{}", out.stdout);
    for (line, want) in lines.iter().zip(&want) {
        assert!(line.starts_with(want.as_str()), "{line:?} is not {want:?}");
    }
    assert!(!dir.join("empty").exists());
    assert!(dir.join("kept/stage.json").is_file());
    assert_eq!(fs::read_to_string(dir.join("other/mine")).unwrap(), "x");
    assert!(
        !fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with('.'))
    );
    // The live mount goes on, its stage whole.
    assert_eq!(fs::read_to_string(live.path("work/a")).unwrap(), "new\n");
    let out = live.zonemount(&["changes", "--json", live.mountpoint().to_str().unwrap()]);
    assert!(
        out.success() && out.stdout.contains("\"b\""),
        "{}",
        out.describe()
    );

    // Once discarded, the kept one goes too.
    let out = live.zonemount(&["discard", &dir.join("kept").to_string_lossy()]);
    assert!(out.success(), "{}", out.describe());
    let after = rows(&live.zonemount(&["stages", "--json", "--prune", &d]));
    assert_eq!(after.len(), 2, "{after:?}");
    assert_eq!(by_name(&after, "kept")["pruned"], true);
    assert_eq!(by_name(&after, "live")["pruned"], false);
    assert!(!dir.join("kept").exists());
    assert!(dir.join("live/stage.json").is_file());
}

#[test]
fn stages_of_a_dir_with_none_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("nothing-here");
    let out = run(
        std::process::Command::new(BIN).args(["stages", &d.to_string_lossy()]),
        std::time::Duration::from_secs(30),
    );
    assert!(out.success(), "{}", out.describe());
    assert_eq!(out.stdout, format!("no stage dirs in {}\n", d.display()));
    let out = run(
        std::process::Command::new(BIN).args(["stages", "--json", &d.to_string_lossy()]),
        std::time::Duration::from_secs(30),
    );
    assert_eq!(out.stdout.trim(), "[]", "{}", out.describe());
}

/// A stage whose view is the backing dir's again but that keeps a
/// checkpoint is not pruned (the checkpoint holds a state the worker had);
/// once discarded, it is.
#[test]
fn prune_keeps_a_stage_with_checkpoints() {
    if !fuse_ok() {
        return;
    }
    let stages = Stages(tempfile::tempdir().unwrap());
    let dir = stages.0.path().to_path_buf();
    let d = dir.to_string_lossy().into_owned();
    let mut m = staged(&dir, "ck").mount();
    write(&m, "a");
    let mp = m.mountpoint().to_string_lossy().into_owned();
    let out = m.zonemount(&["checkpoint", &mp]);
    assert!(out.success(), "{}", out.describe());
    let out = m.sh_in("work", "setsid -w rm a", &[]);
    assert!(out.success(), "{}", out.describe());
    assert!(m.unmount().success());
    let out = m.zonemount(&["stages", "--prune", &d]);
    assert!(out.success(), "{}", out.describe());
    assert!(
        out.stdout.contains("keeps 1 checkpoint(s)") && dir.join("ck").exists(),
        "{}",
        out.describe()
    );
    let stage = dir.join("ck").to_string_lossy().into_owned();
    assert!(m.zonemount(&["discard", &stage]).success());
    let out = m.zonemount(&["stages", "--prune", &d]);
    assert!(
        out.success() && !dir.join("ck").exists(),
        "{}",
        out.describe()
    );
}

const FAKE: &str = r#"{"version":1,"mountpoint":"/x","created":0,"zones":{}}"#;

/// `<tmp>/rootdir/victimdir/precious`, this user's, and a fake empty
/// stage beside it (`rootdir/empty/stage.json`): what `--prune` of a dir
/// that leads there would remove.
fn rootdir(t: &Path) -> PathBuf {
    let rootdir = t.join("rootdir");
    fs::create_dir_all(rootdir.join("victimdir")).unwrap();
    fs::write(rootdir.join("victimdir/precious"), "precious\n").unwrap();
    fs::create_dir_all(rootdir.join("empty")).unwrap();
    fs::write(rootdir.join("empty/stage.json"), FAKE).unwrap();
    rootdir
}

fn intact(rootdir: &Path) {
    assert_eq!(
        fs::read_to_string(rootdir.join("victimdir/precious")).unwrap(),
        "precious\n"
    );
    assert!(rootdir.join("empty/stage.json").is_file());
    let names: Vec<String> = fs::read_dir(rootdir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !names.iter().any(|n| n.starts_with(".pruning")),
        "{names:?}"
    );
    assert!(!rootdir.join("victimdir/lock").exists());
}

fn stages_cmd(args: &[&str]) -> Out {
    run(
        std::process::Command::new(BIN).args(args),
        std::time::Duration::from_secs(30),
    )
}

/// `stages --prune DIR` where DIR is a symlink, or another user's, or in
/// a dir another user may change: refused, nothing looked at there.
#[test]
fn prune_refuses_a_dir_that_is_a_symlink_or_another_users() {
    let t = tempfile::tempdir().unwrap();
    let rootdir = rootdir(t.path());
    let link = t.path().join("link");
    std::os::unix::fs::symlink(&rootdir, &link).unwrap();
    let out = stages_cmd(&["stages", "--prune", &link.to_string_lossy()]);
    assert_eq!(out.code(), Some(1), "{}", out.describe());
    assert!(
        out.stderr.contains(&format!(
            "the stages dir {} is a symbolic link",
            link.display()
        )),
        "{}",
        out.describe()
    );
    intact(&rootdir);
    if !is_root() {
        return;
    }
    // Another user's dir of stages, and a dir of root's under one.
    let theirs = t.path().join("zm");
    fs::create_dir_all(theirs.join("stages")).unwrap();
    fs::create_dir_all(theirs.join("stages/mine/empty")).unwrap();
    fs::write(theirs.join("stages/mine/empty/stage.json"), FAKE).unwrap();
    std::os::unix::fs::chown(&theirs, Some(4242), Some(4242)).unwrap();
    let out = stages_cmd(&["stages", "--prune", &theirs.to_string_lossy()]);
    assert_eq!(out.code(), Some(1), "{}", out.describe());
    assert!(
        out.stderr
            .contains("belongs to uid 4242, not to this user (uid 0)"),
        "{}",
        out.describe()
    );
    let out = stages_cmd(&[
        "stages",
        "--prune",
        &theirs.join("stages/mine").to_string_lossy(),
    ]);
    assert_eq!(out.code(), Some(1), "{}", out.describe());
    assert!(
        out.stderr.contains("another user could move it away"),
        "{}",
        out.describe()
    );
    assert!(theirs.join("stages/mine/empty/stage.json").is_file());
    intact(&rootdir);
}

/// The attack on `stages --prune` run by root over a dir another user
/// owns: that user swaps the dir for a symlink to a dir of root's, again
/// and again (`renameat2` with `RENAME_EXCHANGE`), while root prunes.
/// Root's dir stays whole. Bounded: 4 s of swapping, 60 prunes at most.
#[test]
fn prune_under_a_swapping_user_leaves_other_dirs_alone() {
    let Some(ids) = user_ids("zmtest").filter(|_| is_root() && tool_ok("setpriv")) else {
        return;
    };
    if !std::path::Path::new("/usr/bin/python3").exists() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    fs::set_permissions(
        t.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let rootdir = rootdir(t.path());
    let zm = t.path().join("zm");
    fs::create_dir_all(zm.join("stages/victimdir")).unwrap();
    fs::create_dir_all(zm.join("stages/empty")).unwrap();
    fs::write(zm.join("stages/victimdir/stage.json"), FAKE).unwrap();
    fs::write(zm.join("stages/empty/stage.json"), FAKE).unwrap();
    std::os::unix::fs::symlink(&rootdir, zm.join("link")).unwrap();
    let out = run(
        std::process::Command::new("chown").args([
            "-R",
            "-h",
            &format!("{}:{}", ids.0, ids.1),
            &zm.to_string_lossy(),
        ]),
        std::time::Duration::from_secs(30),
    );
    assert!(out.success(), "{}", out.describe());
    let swap = "import ctypes, sys, time\n\
                libc = ctypes.CDLL(None, use_errno=True)\n\
                a, b = sys.argv[1].encode(), sys.argv[2].encode()\n\
                end = time.time() + 4\n\
                while time.time() < end:\n    libc.renameat2(-100, a, -100, b, 2)\n";
    let mut swapper = std::process::Command::new("setpriv")
        .args(setpriv_as(ids))
        .args(["/usr/bin/python3", "-c", swap])
        .arg(zm.join("stages"))
        .arg(zm.join("link"))
        .spawn()
        .unwrap();
    let dir = zm.join("stages").to_string_lossy().into_owned();
    let start = std::time::Instant::now();
    let mut refused = 0;
    for _ in 0..60 {
        if start.elapsed() > std::time::Duration::from_secs(4) {
            break;
        }
        let out = stages_cmd(&["stages", "--prune", &dir]);
        refused += usize::from(!out.success());
        if rootdir.join("victimdir/lock").exists()
            || !rootdir.join("victimdir/precious").exists()
            || !rootdir.join("empty").exists()
        {
            break;
        }
    }
    let _ = wait_child(&mut swapper, std::time::Duration::from_secs(10));
    intact(&rootdir);
    assert!(refused > 0);
}

/// The state dir an ordinary user without a home falls back to,
/// `$TMPDIR/zonemount-state-UID`, made first by another user (here
/// root): `stages` and `doctor` refuse it, and say whose it is.
#[test]
fn a_state_dir_another_user_made_is_refused() {
    let Some(ids) = user_ids("zmtest").filter(|_| is_root() && tool_ok("setpriv")) else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    fs::set_permissions(
        t.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let state = t.path().join(format!("zonemount-state-{}", ids.0));
    fs::create_dir_all(state.join("stages/planted")).unwrap();
    fs::write(state.join("stages/planted/stage.json"), FAKE).unwrap();
    fs::set_permissions(&state, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let as_user = |args: &[&str]| {
        run(
            std::process::Command::new("setpriv")
                .args(setpriv_as(ids))
                .args([
                    "env",
                    "-u",
                    "HOME",
                    "-u",
                    "XDG_STATE_HOME",
                    "-u",
                    "XDG_RUNTIME_DIR",
                ])
                .arg(format!("TMPDIR={}", t.path().display()))
                .arg(BIN)
                .args(args)
                .current_dir(t.path()),
            std::time::Duration::from_secs(30),
        )
    };
    let want = format!(
        "the state directory {} belongs to uid 0, not to this user (uid {})",
        state.display(),
        ids.0
    );
    let out = as_user(&["stages", "--prune"]);
    assert_eq!(out.code(), Some(1), "{}", out.describe());
    assert!(out.stderr.contains(&want), "{}", out.describe());
    assert!(state.join("stages/planted/stage.json").is_file());
    let out = as_user(&["doctor"]);
    assert!(out.stdout.contains(&want), "{}", out.describe());
}

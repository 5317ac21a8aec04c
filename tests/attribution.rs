//! Who changed what, through real mounts: each change of a staged and of
//! a plain rw zone names the process that made its first and its last
//! change (pid, comm, argv, uid, time) in `changes --json`, and the last
//! one's command on each line of `changes`, escaped; the staged record
//! outlives a SIGKILLed daemon and a remount, and a commit drops only the
//! records of what it applied; a worker in `run`'s PID namespace is named
//! by its command.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use common::*;

/// A mount with zone `work` staged (stage in `<tmp>/stage`) and zone
/// `plain` a plain rw zone, each with a few files.
fn two_zones() -> Setup {
    let s = Setup::new(
        "sandbox:\n  mode: direct\n  zones:\n    work: { path: ./b, mode: rw, staged: true }\n    plain: { path: ./p, mode: rw }\n",
    )
    .backing_dir("work", "b")
    .backing_dir("plain", "p");
    let s = ["work", "plain"].iter().fold(s, |s, z| {
        s.file(z, "f", "old\n")
            .file(z, "gone", "bye\n")
            .file(z, "t", "0123456789\n")
    });
    let stage = s.root().join("stage");
    s.arg("--stage-dir").arg(&stage.to_string_lossy())
}

/// [`two_zones`] mounted, its mountpoint, and `script` run in zone `zone`
/// (None: this machine can't mount, and the test may skip).
fn mounted_after(zone: &str, script: &str) -> Option<(TestMount, String)> {
    if !fuse_ok() {
        return None;
    }
    let m = two_zones().mount();
    let mnt = m.mountpoint().to_string_lossy().into_owned();
    let out = m.sh_in(zone, script, &[]);
    assert!(out.success(), "{}", out.describe());
    Some((m, mnt))
}

fn json_of(out: &Out) -> serde_json::Value {
    assert!(out.success(), "{}", out.describe());
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", out.describe()))
}

/// Zone `zone`'s change of `path` in a `changes --json` answer.
fn change<'a>(v: &'a serde_json::Value, zone: &str, path: &str) -> &'a serde_json::Value {
    v["zones"]
        .as_array()
        .unwrap()
        .iter()
        .find(|z| z["zone"] == zone)
        .and_then(|z| {
            z["changes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["path"] == path)
        })
        .unwrap_or_else(|| panic!("no change of /{zone}/{path} in {v:#}"))
}

fn has_change(v: &serde_json::Value, zone: &str, path: &str) -> bool {
    v["zones"].as_array().unwrap().iter().any(|z| {
        z["zone"] == zone
            && z["changes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["path"] == path)
    })
}

/// (comm, argv) of an actor.
fn cmd(a: &serde_json::Value) -> (String, String) {
    (
        a["comm"].as_str().unwrap_or("<none>").to_string(),
        a["argv"].as_str().unwrap_or("<none>").to_string(),
    )
}

/// The pid a script wrote to `<zone>/<name>` (through the mount).
fn pid_in(m: &TestMount, rel: &str) -> u64 {
    fs::read_to_string(m.path(rel))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// The actor's time as a `SystemTime`, checked to be RFC 3339.
fn time_of(a: &serde_json::Value) -> SystemTime {
    humantime::parse_rfc3339(a["time"].as_str().expect("time")).expect("RFC 3339")
}

#[test]
fn each_program_is_named_for_its_changes_in_a_staged_and_a_plain_zone() {
    if !fuse_ok() || !tool_ok("python3") {
        return;
    }
    let m = two_zones().mount();
    let mnt = m.mountpoint().to_string_lossy().into_owned();
    let started = SystemTime::now() - Duration::from_secs(1);
    for zone in ["work", "plain"] {
        // Each step its own program; the pids of the shells written down
        // (into the zone, as part of the task).
        let out = m.sh_in(
            zone,
            "set -e
             sh -c 'echo $$ > shpid; echo one > a'
             sed -i s/old/new/ f
             cp a b
             python3 -c 'open(\"py\", \"w\").write(\"x\")'
             mv b c
             rm gone
             sh -c 'truncate -s 3 t & echo $! > tpid; wait'",
            &[],
        );
        assert!(out.success(), "{}", out.describe());
    }
    let v = json_of(&m.zonemount(&["changes", "--json", &mnt]));
    let uid = u64::from(euid());
    for zone in ["work", "plain"] {
        let shpid = pid_in(&m, &format!("{zone}/shpid"));
        let a = change(&v, zone, "a");
        assert_eq!(a["kind"], "added", "{a}");
        for end in ["first", "last"] {
            assert_eq!(
                cmd(&a[end]),
                ("sh".into(), "sh -c echo $$ > shpid; echo one > a".into()),
                "/{zone}/a {end}: {a:#}"
            );
            assert_eq!(a[end]["pid"], shpid, "/{zone}/a {end}: {a:#}");
            assert_eq!(a[end]["uid"], uid, "/{zone}/a {end}: {a:#}");
            let t = time_of(&a[end]);
            assert!(t >= started && t <= SystemTime::now(), "{a:#}");
        }
        let f = change(&v, zone, "f");
        assert_eq!(
            cmd(&f["last"]),
            ("sed".into(), "sed -i s/old/new/ f".into())
        );
        assert_eq!(f["last"]["comm"], "sed", "{f:#}");
        let py = change(&v, zone, "py");
        assert!(
            py["last"]["comm"].as_str().unwrap().starts_with("python"),
            "{py:#}"
        );
        assert!(
            py["last"]["argv"].as_str().unwrap().contains("open(\"py\""),
            "{py:#}"
        );
        // Made by cp, renamed by mv: first and last differ.
        let c = change(&v, zone, "c");
        assert_eq!(cmd(&c["first"]), ("cp".into(), "cp a b".into()), "{c:#}");
        assert_eq!(cmd(&c["last"]), ("mv".into(), "mv b c".into()), "{c:#}");
        let gone = change(&v, zone, "gone");
        assert_eq!(gone["kind"], "deleted");
        assert_eq!(cmd(&gone["last"]), ("rm".into(), "rm gone".into()));
        let t = change(&v, zone, "t");
        assert_eq!(t["last"]["comm"], "truncate", "{t:#}");
        assert_eq!(t["last"]["pid"], pid_in(&m, &format!("{zone}/tpid")));
    }
    // The human view: the last change's command on each line.
    let out = m.zonemount(&["changes", &mnt]);
    assert!(out.success(), "{}", out.describe());
    for (start, end) in [
        ("M  /work/f  ", "  by sed -i s/old/new/ f"),
        ("M  /plain/f  ", "  by sed -i s/old/new/ f"),
        ("A  /work/c  ", "  by mv b c"),
        ("D  /plain/gone  ", "  by rm gone"),
        ("A  /plain/py  ", "open(\"py\", \"w\").write(\"x\")"),
    ] {
        assert!(
            out.stdout
                .lines()
                .any(|l| l.starts_with(start) && l.ends_with(end)),
            "no '{start}...{end}' in:\n{}",
            out.stdout
        );
    }
}

/// A plain zone's paths under a moved directory follow it: after an
/// exchange of two directories and a rename of one, each listed path is
/// where it now is, still named by the program that made it, and nothing
/// is listed under a name it left.
#[test]
fn records_under_a_moved_directory_go_with_it() {
    let script = "set -e; mkdir a a-b keep; echo x > a/x; echo y > a-b/y; sh -c 'echo k > keep/k'";
    let Some((m, mnt)) = mounted_after("plain", script) else {
        return;
    };
    let p = |rel: &str| m.path(&format!("plain/{rel}"));
    rustix::fs::renameat_with(
        rustix::fs::CWD,
        p("a"),
        rustix::fs::CWD,
        p("a-b"),
        rustix::fs::RenameFlags::EXCHANGE,
    )
    .unwrap();
    assert_eq!(fs::read_to_string(p("a-b/x")).unwrap(), "x\n");
    let out = m.sh_in("plain", "mv keep kept", &[]);
    assert!(out.success(), "{}", out.describe());
    let v = json_of(&m.zonemount(&["changes", "--json", &mnt]));
    let listed: Vec<(String, String)> = v["zones"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|z| z["zone"] == "plain")
        .flat_map(|z| z["changes"].as_array().unwrap().iter())
        .map(|c| {
            let (path, kind) = (c["path"].as_str().unwrap(), c["kind"].as_str().unwrap());
            (path.to_owned(), kind.to_owned())
        })
        .collect();
    let want = [
        ("a", "added"),
        ("a/y", "added"),
        ("a-b", "added"),
        ("a-b/x", "added"),
        ("kept", "added"),
        ("kept/k", "added"),
    ];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(p, k)| (p.to_string(), k.to_string()))
        .collect();
    assert_eq!(listed, want, "{v:#}");
    for (path, first, last) in [
        ("a-b/x", "sh", "sh"),
        ("kept/k", "sh", "sh"),
        ("kept", "mkdir", "mv"),
    ] {
        let c = change(&v, "plain", path);
        assert_eq!(c["first"]["comm"], first, "{c:#}");
        assert_eq!(c["last"]["comm"], last, "{c:#}");
    }
}

#[test]
fn a_name_and_an_argv_with_escape_sequences_never_reach_stdout_raw() {
    if !fuse_ok() {
        return;
    }
    let m = two_zones().mount();
    let mnt = m.mountpoint().to_string_lossy().into_owned();
    for zone in ["work", "plain"] {
        // The name and the program's argv both hold an OSC title sequence.
        let out = m.sh_in(
            zone,
            r#"evil=$(printf 'n\033]0;pwned\007'); sh -c 'echo x > "$1"' "$evil" "$evil""#,
            &[],
        );
        assert!(out.success(), "{}", out.describe());
    }
    let out = m.zonemount(&["changes", &mnt]);
    assert!(out.success(), "{}", out.describe());
    for raw in ['\x1b', '\x07'] {
        assert!(
            !out.stdout.contains(raw),
            "raw {raw:?} in:\n{:?}",
            out.stdout
        );
    }
    let escaped = r"n\x1b]0;pwned\x07";
    for zone in ["work", "plain"] {
        let start = format!("A  /{zone}/{escaped}  ");
        let end = format!("  by sh -c echo x > \"$1\" {escaped} {escaped}");
        assert!(
            out.stdout
                .lines()
                .any(|l| l.starts_with(&start) && l.ends_with(&end)),
            "no '{start}...{end}' in:\n{}",
            out.stdout
        );
    }
    let out = m.zonemount(&["changes", "--json", &mnt]);
    for raw in ['\x1b', '\x07'] {
        assert!(
            !out.stdout.contains(raw),
            "raw {raw:?} in:\n{:?}",
            out.stdout
        );
    }
    // Exact in JSON, once parsed.
    let v = json_of(&out);
    let c = change(&v, "plain", "n\x1b]0;pwned\x07");
    assert_eq!(
        c["last"]["argv"],
        "sh -c echo x > \"$1\" n\x1b]0;pwned\x07 n\x1b]0;pwned\x07"
    );
}

#[test]
fn the_record_outlives_a_killed_daemon_and_a_commit_drops_only_its_paths() {
    let script = "set -e; sh -c 'echo a > a'; cp a b; rm gone; mkdir d; touch d/in";
    let Some((m, mnt)) = mounted_after("work", script) else {
        return;
    };
    m.kill_daemon();
    let out = m.mount_again_staged();
    assert!(out.success(), "remount after SIGKILL: {}", out.describe());
    let v = json_of(&m.zonemount(&["changes", "--json", &mnt]));
    assert_eq!(cmd(&change(&v, "work", "a")["first"]).0, "sh", "{v:#}");
    assert_eq!(cmd(&change(&v, "work", "b")["last"]).0, "cp", "{v:#}");
    assert_eq!(cmd(&change(&v, "work", "gone")["last"]).0, "rm", "{v:#}");
    assert_eq!(cmd(&change(&v, "work", "d/in")["last"]).0, "touch", "{v:#}");
    // A commit of `b` drops its record only; made again, it is new.
    let out = m.zonemount(&["commit", &mnt, "/work/b"]);
    assert!(out.success(), "{}", out.describe());
    assert!(out.stdout.contains("by cp a b"), "{}", out.describe());
    let v = json_of(&m.zonemount(&["changes", "--json", &mnt]));
    assert!(!has_change(&v, "work", "b"), "{v:#}");
    assert_eq!(cmd(&change(&v, "work", "a")["last"]).0, "sh", "{v:#}");
    assert_eq!(cmd(&change(&v, "work", "gone")["last"]).0, "rm", "{v:#}");
    let out = m.sh_in("work", "sh -c 'echo again >> b'", &[]);
    assert!(out.success(), "{}", out.describe());
    let v = json_of(&m.zonemount(&["changes", "--json", &mnt]));
    let b = change(&v, "work", "b");
    assert_eq!(b["kind"], "modified", "{b:#}");
    assert_eq!(cmd(&b["first"]).0, "sh", "the committed record went: {b:#}");
    // A discard of the rest drops the rest; the stage's record file stays
    // small (a record of paths, not of writes).
    let out = m.zonemount(&["discard", &mnt]);
    assert!(out.success(), "{}", out.describe());
    let left = fs::read(m.root().join("stage/work/actors")).unwrap_or_default();
    let used = left.iter().position(|b| *b == 0).unwrap_or(left.len());
    assert_eq!(
        String::from_utf8_lossy(&left[..used]),
        "",
        "a discard of everything leaves no record"
    );
}

#[test]
fn a_worker_in_runs_pid_namespace_is_named_by_its_command() {
    if !fuse_ok() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(tmp.path()).unwrap();
    fs::create_dir(root.join("b")).unwrap();
    let zone = format!("work={}:staged", root.join("b").display());
    let stage: PathBuf = root.join("stage");
    let stage_s = stage.to_string_lossy().into_owned();
    let out = run(
        Command::new(BIN)
            .args(["run", "-q", "--zone", &zone, "--stage-dir", &stage_s, "--"])
            .args(["sh", "-c", "echo $$ > inner; cp inner copied"])
            .current_dir(&root),
        Duration::from_secs(60),
    );
    assert!(out.success(), "{}", out.describe());
    // The stage is kept for review: read it with no mount holding it.
    let out = run(
        Command::new(BIN).args(["changes", "--json", &stage_s]),
        Duration::from_secs(30),
    );
    let v = json_of(&out);
    let inner = change(&v, "work", "inner");
    assert_eq!(
        cmd(&inner["last"]),
        ("sh".into(), "sh -c echo $$ > inner; cp inner copied".into()),
        "{inner:#}"
    );
    let copied = change(&v, "work", "copied");
    assert_eq!(
        cmd(&copied["last"]),
        ("cp".into(), "cp inner copied".into())
    );
    // The pid is the daemon's view of the process, not the namespace's.
    let ns_pid: u64 = fs::read_to_string(stage.join("work/upper/inner"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let pid = inner["last"]["pid"].as_u64().unwrap();
    assert!(pid > 0, "{inner:#}");
    assert_ne!(pid, ns_pid, "a pid of run's namespace: {inner:#}");
    zonemount::stage::dir::remove(Path::new(&stage)).unwrap();
}

#[test]
fn the_ledger_names_who_made_each_mutation_and_each_committed_path() {
    if !fuse_ok() {
        return;
    }
    let s = Setup::new(
        "sandbox:\n  mode: direct\n  zones:\n    work: { path: ./b, mode: rw, staged: true, approval: { write: ask, delete: ask } }\n",
    )
    .backing_dir("work", "b")
    .file("work", "gone", "bye\n");
    let stage = s.root().join("stage");
    let ledger = s.root().join("audit.jsonl");
    let s = s
        .arg("--stage-dir")
        .arg(&stage.to_string_lossy())
        .arg("--audit-log")
        .arg(&ledger.to_string_lossy());
    let mut m = s.mount();
    let mnt = m.mountpoint().to_string_lossy().into_owned();
    let out = m.sh_in("work", "sh -c 'echo x > a' && rm gone && cp a c", &[]);
    assert!(out.success(), "{}", out.describe());
    let records = || -> Vec<serde_json::Value> {
        fs::read_to_string(&ledger)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    // Each mutation allowed in the gated zone: its maker, in full.
    let recs = records();
    let made = |path: &str| {
        recs.iter()
            .find(|r| r["event"] == "mutation" && r["path"] == path)
            .unwrap_or_else(|| panic!("no mutation of {path} in {recs:#?}"))
            .clone()
    };
    let a = made("/work/a");
    assert_eq!(
        cmd(&a["actor"]),
        ("sh".into(), "sh -c echo x > a".into()),
        "{a:#}"
    );
    assert_eq!(a["actor"]["pid"], a["pid"], "{a:#}");
    assert_eq!(a["actor"]["uid"], u64::from(euid()), "{a:#}");
    assert_eq!(made("/work/gone")["actor"]["comm"], "rm");
    // A commit's record: beside each path, who made its first and last
    // change.
    let out = m.zonemount(&["commit", &mnt, "/work/a", "/work/gone"]);
    assert!(out.success(), "{}", out.describe());
    let recs = records();
    let commit = recs
        .iter()
        .find(|r| r["event"] == "commit")
        .unwrap_or_else(|| panic!("no commit in {recs:#?}"));
    let paths: Vec<&str> = commit["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    let actors = commit["actors"].as_array().expect("actors");
    assert_eq!(paths.len(), actors.len(), "{commit:#}");
    let by = |p: &str| &actors[paths.iter().position(|q| *q == p).unwrap()];
    assert_eq!(
        by("/work/a")["last"]["argv"],
        "sh -c echo x > a",
        "{commit:#}"
    );
    assert_eq!(by("/work/gone")["last"]["comm"], "rm", "{commit:#}");
    // At unmount, the change report left (`c`) names its maker too.
    assert!(m.unmount().success());
    let recs = records();
    let report = recs
        .iter()
        .find(|r| r["event"] == "changes")
        .unwrap_or_else(|| panic!("no change report in {recs:#?}"));
    assert_eq!(report["paths"][0], "added /work/c", "{report:#}");
    assert_eq!(report["actors"][0]["first"]["comm"], "cp", "{report:#}");
}

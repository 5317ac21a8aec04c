//! Issue 7 through real mounts: sensitive roots inside a zone are hidden
//! (and exposed with `--allow-sensitive-roots`), `git commit` in a zone with
//! `.git` protected changes nothing, and `zonemount check` answers for each
//! kind of path with the right exit status and JSON.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;
use std::path::Path;

use common::*;
use libc::{EACCES, ENOENT};

/// The fake home's sensitive content, and what stays visible.
fn home_fixture(s: Setup) -> Setup {
    s.file("home", ".ssh/id_rsa", "PRIVATE KEY\n")
        .file("home", ".aws/credentials", "[default]\n")
        .file("home", ".config/gh/hosts.yml", "token: x\n")
        .file("home", ".config/other/settings", "ok\n")
        .file("home", ".npmrc", "//registry:_authToken=x\n")
        .file("home", "notes.txt", "notes\n")
}

fn home_mount(mode: Mode, extra: &[&str]) -> Option<TestMount> {
    if !fuse_ok() {
        return None;
    }
    let mut s = Setup::zones(mode, &[("home", "mode: rw"), ("data", "mode: ro")]);
    // Created before mounting so the fake home exists when homes are read.
    s = home_fixture(s).dir("data", "");
    let home = s.backing("home", "");
    s = s.env("ZONEMOUNT_EXTRA_HOMES", home.to_str().unwrap());
    for a in extra {
        s = s.arg(a);
    }
    Some(s.mount())
}

both_modes!(sensitive_roots_are_hidden, sensitive_roots_allowed);

fn sensitive_roots_are_hidden(mode: Mode) {
    let Some(m) = home_mount(mode, &[]) else {
        return;
    };
    assert_eq!(
        names(&m.path("home")).unwrap(),
        sorted(&[".config", "notes.txt"])
    );
    assert_eq!(names(&m.path("home/.config")).unwrap(), sorted(&["other"]));
    for p in [
        "home/.ssh",
        "home/.ssh/id_rsa",
        "home/.aws/credentials",
        "home/.config/gh",
        "home/.npmrc",
    ] {
        assert_errno(fs::symlink_metadata(m.path(p)), ENOENT);
        assert_errno(fs::read(m.path(p)), ENOENT);
    }
    // Nothing can be made at, under or onto a hidden path.
    assert_errno(fs::write(m.path("home/.npmrc"), "x"), ENOENT);
    assert_errno(fs::write(m.path("home/.pypirc"), "x"), ENOENT);
    assert_errno(fs::create_dir(m.path("home/.ssh")), ENOENT);
    assert_errno(fs::create_dir(m.path("home/.kube")), ENOENT);
    assert_errno(fs::write(m.path("home/.ssh/authorized_keys"), "x"), ENOENT);
    assert_errno(fs::create_dir(m.path("home/.config/gcloud")), ENOENT);
    assert_errno(
        std::os::unix::fs::symlink("notes.txt", m.path("home/.docker")),
        ENOENT,
    );
    assert_errno(
        fs::rename(m.path("home/notes.txt"), m.path("home/.gnupg")),
        ENOENT,
    );
    assert_errno(
        fs::hard_link(m.path("home/notes.txt"), m.path("home/.aws")),
        ENOENT,
    );
    assert_errno(fs::remove_file(m.path("home/.npmrc")), ENOENT);
    assert_errno(fs::remove_dir_all(m.path("home/.ssh")), ENOENT);
    // Moving the dir that holds one would expose it under a new name.
    assert_errno(
        fs::rename(m.path("home/.config"), m.path("home/cfg")),
        EACCES,
    );
    // Everything else is an ordinary rw zone.
    fs::write(m.path("home/new.txt"), "new").unwrap();
    fs::write(m.path("home/.config/other/more"), "more").unwrap();
    // The backing store: hidden content untouched, nothing created.
    assert_eq!(
        fs::read_to_string(m.backing("home", ".ssh/id_rsa")).unwrap(),
        "PRIVATE KEY\n"
    );
    assert_eq!(
        fs::read_to_string(m.backing("home", ".npmrc")).unwrap(),
        "//registry:_authToken=x\n"
    );
    assert_eq!(
        fs::read_to_string(m.backing("home", "notes.txt")).unwrap(),
        "notes\n"
    );
    for p in [
        ".pypirc",
        ".kube",
        ".docker",
        ".gnupg",
        ".config/gcloud",
        ".ssh/authorized_keys",
        "cfg",
    ] {
        assert!(!exists_nofollow(&m.backing("home", p)), "{p} was created");
    }
    assert!(m.backing("home", ".config/gh/hosts.yml").exists());
    // check agrees, without the file being touched.
    let out = m.zonemount(&[
        "check",
        "--json",
        m.mountpoint().to_str().unwrap(),
        "/home/.ssh/id_rsa",
    ]);
    assert_eq!(out.code(), Some(4), "{}", out.describe());
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["errno"], "ENOENT");
    assert_eq!(v["decision"], "refuse");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("/home/.ssh holds credentials"),
        "{v}"
    );
}

fn sensitive_roots_allowed(mode: Mode) {
    let Some(m) = home_mount(mode, &["--allow-sensitive-roots"]) else {
        return;
    };
    assert_eq!(
        names(&m.path("home")).unwrap(),
        sorted(&[".aws", ".config", ".npmrc", ".ssh", "notes.txt"])
    );
    assert_eq!(
        fs::read_to_string(m.path("home/.ssh/id_rsa")).unwrap(),
        "PRIVATE KEY\n"
    );
    fs::create_dir(m.path("home/.kube")).unwrap();
    assert!(m.backing("home", ".kube").is_dir());
    let out = m.zonemount(&[
        "check",
        m.mountpoint().to_str().unwrap(),
        "/home/.ssh/id_rsa",
    ]);
    assert_eq!(out.code(), Some(0), "{}", out.describe());
}

#[test]
fn a_zone_that_is_a_sensitive_root_is_still_refused() {
    if !fuse_ok() {
        return;
    }
    let s = Setup::zones(Mode::Direct, &[("keys", "mode: ro")]).file("keys", "id", "k\n");
    let keys = s.backing("keys", "");
    // The zone is the fake home's ~/.ssh (a symlink to it, resolved).
    let home = s.root().join("fakehome");
    fs::create_dir_all(&home).unwrap();
    std::os::unix::fs::symlink(&keys, home.join(".ssh")).unwrap();
    let (out, _m) = s
        .env("ZONEMOUNT_EXTRA_HOMES", home.to_str().unwrap())
        .try_mount();
    assert_eq!(out.code(), Some(2), "{}", out.describe());
    assert!(
        out.stderr.contains("is the sensitive path")
            && out.stderr.contains("--allow-sensitive-roots"),
        "{}",
        out.describe()
    );
}

// ----- git in a zone whose .git is protected

/// Every file under `dir` with its content hash, sorted.
fn tree_hashes(dir: &Path) -> Vec<(String, (u64, u64))> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let md = fs::symlink_metadata(&p).unwrap();
            if md.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().display().to_string();
                out.push((rel, file_hash(&p).unwrap_or((0, md.len()))));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn git_commit_with_git_protected_is_refused_and_changes_nothing() {
    if !fuse_ok() || !tool_ok("git") {
        return;
    }
    let s = Setup::zones(Mode::Direct, &[("proj", "mode: rw, protect: [\".git\"]")]).file(
        "proj",
        "README.md",
        "hello\n",
    );
    let repo = s.backing("proj", "");
    let git_env = [
        ("GIT_AUTHOR_NAME", "t"),
        ("GIT_AUTHOR_EMAIL", "t@example.com"),
        ("GIT_COMMITTER_NAME", "t"),
        ("GIT_COMMITTER_EMAIL", "t@example.com"),
        ("GIT_CONFIG_NOSYSTEM", "1"),
        ("HOME", "/nonexistent"),
    ];
    // The host makes the repository (before the mount, outside it).
    let out = sh_at(
        &repo,
        "git init -q && git add -A && git commit -qm init",
        &git_env,
    );
    assert!(out.success(), "host git: {}", out.describe());
    let before = tree_hashes(&repo.join(".git"));
    let m = s.mount();
    // The worker edits a file (allowed) and tries to commit it.
    fs::write(m.path("proj/README.md"), "hello\nchanged\n").unwrap();
    let out = m.sh_in("proj", "git add README.md", &git_env);
    assert!(!out.success(), "git add must fail: {}", out.describe());
    assert!(
        out.stderr.contains("Read-only file system"),
        "{}",
        out.describe()
    );
    let out = m.sh_in("proj", "git commit -qam change", &git_env);
    assert!(!out.success(), "git commit must fail: {}", out.describe());
    // Reading the history still works.
    let out = m.sh_in("proj", "git log --oneline", &git_env);
    assert!(out.success(), "git log: {}", out.describe());
    assert_eq!(out.stdout.lines().count(), 1);
    assert_eq!(
        tree_hashes(&repo.join(".git")),
        before,
        "the backing .git changed"
    );
    assert_eq!(
        fs::read_to_string(repo.join("README.md")).unwrap(),
        "hello\nchanged\n"
    );
    let out = m.zonemount(&[
        "check",
        m.mountpoint().to_str().unwrap(),
        "/proj/.git/index",
        "--write",
    ]);
    assert_eq!(out.code(), Some(4), "{}", out.describe());
    assert!(
        out.stdout.starts_with(
            "refuse (EROFS): Cannot write '/proj/.git/index': /proj/.git is protected"
        ),
        "{}",
        out.describe()
    );
}

// ----- zonemount check on each kind of path

const CHECK_ZONES: &[(&str, &str)] = &[
    ("data", "mode: ro"),
    ("ws", "mode: rw, protect: [\".git\"], max_file_bytes: 10"),
    (
        "final",
        "mode: rw, approval: { write: ask, delete: blocked }, suffixes: [.md, .pdf]",
    ),
    // Deletes left out of the block: they ask.
    ("arch", "mode: rw, approval: { write: blocked }"),
];

/// (path, operation flag, exit status, decision, errno, start of message).
type Case = (
    &'static str,
    &'static str,
    i32,
    &'static str,
    Option<&'static str>,
    &'static str,
);

const CHECKS: &[Case] = &[
    ("/", "--read", 0, "allow", None, "Can read '/'"),
    (
        "/new",
        "--write",
        4,
        "refuse",
        Some("EACCES"),
        "Cannot create '/new': the mount's root and its zone directories cannot be",
    ),
    (
        "/ws",
        "--delete",
        4,
        "refuse",
        Some("EACCES"),
        "Cannot delete '/ws': the mount's root",
    ),
    (
        "/nozone",
        "--read",
        4,
        "refuse",
        Some("ENOENT"),
        "Cannot read '/nozone': '/nozone' does not exist. The mount's root holds only its zones: /data, /ws, /final, /arch.",
    ),
    (
        "/data/f.txt",
        "--read",
        0,
        "allow",
        None,
        "Can read '/data/f.txt': reading is allowed.",
    ),
    (
        "/data/new.txt",
        "--write",
        4,
        "refuse",
        Some("EROFS"),
        "Cannot create '/data/new.txt': /data is read-only. Writable: /ws, /final (asks for approval; only names ending in .md or .pdf).",
    ),
    (
        "/data/f.txt",
        "--delete",
        4,
        "refuse",
        Some("EROFS"),
        "Cannot delete '/data/f.txt': /data is read-only.",
    ),
    (
        "/ws/small",
        "--write",
        0,
        "allow",
        None,
        "Can write '/ws/small': /ws is writable",
    ),
    (
        "/ws/sub/new",
        "--write",
        0,
        "allow",
        None,
        "Can create '/ws/sub/new': /ws is writable",
    ),
    (
        "/ws/small",
        "--delete",
        0,
        "allow",
        None,
        "Can delete '/ws/small'",
    ),
    (
        "/ws/big",
        "--read",
        4,
        "refuse",
        Some("EFBIG"),
        "Cannot read '/ws/big': the file (11 bytes) is larger than /ws's limit of 10 bytes",
    ),
    (
        "/ws/.git/HEAD",
        "--write",
        4,
        "refuse",
        Some("EROFS"),
        "Cannot write '/ws/.git/HEAD': /ws/.git is protected (read-only) in /ws by the pattern '.git'.",
    ),
    (
        "/ws/.git/HEAD",
        "--read",
        0,
        "allow",
        None,
        "Can read '/ws/.git/HEAD'",
    ),
    (
        "/ws/missing",
        "--read",
        4,
        "refuse",
        Some("ENOENT"),
        "Cannot read '/ws/missing': '/ws/missing' does not exist.",
    ),
    (
        "/final/a.md",
        "--write",
        3,
        "ask",
        None,
        "Would ask to write '/final/a.md': /final's write policy is 'ask'",
    ),
    (
        "/final/new.md",
        "--write",
        3,
        "ask",
        None,
        "Would ask to create '/final/new.md'",
    ),
    (
        "/final/a.md",
        "--delete",
        4,
        "refuse",
        Some("EPERM"),
        "Cannot delete '/final/a.md': /final's delete policy is 'blocked'. Deleting is allowed in: /ws, /arch (asks for approval).",
    ),
    (
        "/final/new.txt",
        "--write",
        4,
        "refuse",
        Some("EACCES"),
        "Cannot create '/final/new.txt': /final accepts only file names ending in .md or .pdf.",
    ),
    (
        "/final/b.txt",
        "--read",
        4,
        "refuse",
        Some("ENOENT"),
        "Cannot read '/final/b.txt': /final shows only files with names ending in .md or .pdf, so 'b.txt' is not visible",
    ),
    (
        "/arch/x",
        "--write",
        4,
        "refuse",
        Some("EPERM"),
        "Cannot create '/arch/x': /arch's write policy is 'blocked'. Writable: /ws, /final",
    ),
];

#[test]
fn check_answers_for_each_kind_of_path() {
    if !fuse_ok() {
        return;
    }
    let m = Setup::zones(Mode::Sandboxed, CHECK_ZONES)
        .file("data", "f.txt", "f\n")
        .file("ws", "small", "small")
        .file("ws", "big", "0123456789A")
        .file("ws", ".git/HEAD", "ref\n")
        .dir("ws", "sub")
        .file("final", "a.md", "a\n")
        .file("final", "b.txt", "b\n")
        .dir("arch", "")
        .mount();
    let mp = m.mountpoint().to_str().unwrap().to_string();
    let before = tree_hashes(m.root().join(".sandbox").as_path());
    for (path, flag, code, decision, errno, start) in CHECKS {
        // Text, with the path from the mount's root when it starts with a
        // zone (a worker's view); at the root itself such a path would be
        // outside the mount (refused, 2), so from the mountpoint.
        let in_zone = path
            .split('/')
            .nth(1)
            .is_some_and(|z| CHECK_ZONES.iter().any(|(n, _)| *n == z));
        let text_path = if in_zone {
            path.to_string()
        } else {
            let out = m.zonemount(&["check", &mp, path, flag]);
            assert_eq!(out.code(), Some(2), "{path}: {}", out.describe());
            assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.describe());
            assert!(
                out.stderr.contains("is outside the mount"),
                "{}",
                out.describe()
            );
            format!("{mp}{path}")
        };
        let out = m.zonemount(&["check", &mp, &text_path, flag]);
        let ctx = format!("check {path} {flag}: {}", out.describe());
        assert_eq!(out.code(), Some(*code), "{ctx}");
        let prefix = match errno {
            Some(e) => format!("{decision} ({e}): "),
            None => format!("{decision}: "),
        };
        assert!(out.stdout.starts_with(&prefix), "{ctx}");
        assert!(out.stdout[prefix.len()..].starts_with(start), "{ctx}");
        // JSON, with the path under the mountpoint.
        let full = format!("{mp}{path}");
        let out = m.zonemount(&["check", "--json", &mp, &full, flag]);
        let ctx = format!("check --json {full} {flag}: {}", out.describe());
        assert_eq!(out.code(), Some(*code), "{ctx}");
        let v: serde_json::Value = serde_json::from_str(&out.stdout).expect(&ctx);
        assert_eq!(v["path"], *path, "{ctx}");
        assert_eq!(v["operation"], flag.trim_start_matches("--"), "{ctx}");
        assert_eq!(v["decision"], *decision, "{ctx}");
        assert_eq!(v["errno"].as_str(), *errno, "{ctx}");
        let zone = path
            .split('/')
            .nth(1)
            .filter(|z| CHECK_ZONES.iter().any(|(n, _)| n == z));
        assert_eq!(v["zone"].as_str(), zone, "{ctx}");
        let msg = v["message"].as_str().unwrap();
        assert!(msg.starts_with(start), "{ctx}");
        assert!(msg.contains(v["reason"].as_str().unwrap()), "{ctx}");
    }
    // The default operation is --read.
    let out = m.zonemount(&["check", &mp, "/ws/big"]);
    assert_eq!(out.code(), Some(4), "{}", out.describe());
    // Nothing was changed by any of it.
    assert_eq!(tree_hashes(m.root().join(".sandbox").as_path()), before);
    assert!(!exists_nofollow(&m.backing("ws", "sub/new")));
    // Usage errors are 2; a path that is not a zonemount mount is 1.
    let out = m.zonemount(&["check", &mp, "/ws/x", "--read", "--write"]);
    assert_eq!(out.code(), Some(2), "{}", out.describe());
    let out = m.zonemount(&["check", m.root().to_str().unwrap(), "/ws/x"]);
    assert_eq!(out.code(), Some(1), "{}", out.describe());
    assert!(out.stderr.contains("not mounted"), "{}", out.describe());
}

#[test]
fn check_notes_a_missing_parent_dir() {
    if !fuse_ok() {
        return;
    }
    let m = Setup::zones(Mode::Sandboxed, &[("ws", "mode: rw")])
        .dir("ws", "")
        .mount();
    let mp = m.mountpoint().to_str().unwrap();
    let out = m.zonemount(&["check", mp, "/ws/a/b.txt", "--write"]);
    assert_eq!(out.code(), Some(0), "{}", out.describe());
    assert!(
        out.stdout.contains("Note: /ws/a does not exist yet"),
        "{}",
        out.describe()
    );
    assert!(!exists_nofollow(&m.backing("ws", "a")));
}

/// The explanation a worker's refusal gets is the one `status` lists among
/// the last refusals and the one the audit ledger records as the reason.
#[test]
fn status_and_the_ledger_carry_the_explanations() {
    if !fuse_ok() {
        return;
    }
    let s = Setup::zones(Mode::Sandboxed, &[("data", "mode: ro"), ("ws", "mode: rw")]);
    let audit = s.root().join("audit.jsonl");
    let m = s.arg("--audit-log").arg(&audit.to_string_lossy()).mount();
    assert_errno(std::fs::write(m.path("data/x"), "x"), libc::EROFS);
    let want = "Cannot create '/data/x': /data is read-only. Writable: /ws.";
    let mnt = m.mountpoint().as_os_str();
    let out = zonemount_at(m.root(), &["status".as_ref(), "--json".as_ref(), mnt]);
    assert!(out.success(), "{}", out.describe());
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let last = v["recent_refusals"]
        .as_array()
        .and_then(|a| a.last().cloned());
    let last = last.unwrap_or_else(|| panic!("no recent refusals in {v}"));
    assert_eq!(last["message"], want);
    assert_eq!(last["errno"], "EROFS");
    let out = zonemount_at(m.root(), &["status".as_ref(), mnt]);
    assert!(out.stdout.contains(want), "{}", out.stdout);
    let ledger = std::fs::read_to_string(&audit).unwrap();
    let refusal = ledger
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|r| r["event"] == "refusal")
        .unwrap_or_else(|| panic!("no refusal record in {ledger}"));
    assert_eq!(refusal["reason"], want);
    assert_eq!(refusal["path"], "/data/x");
}

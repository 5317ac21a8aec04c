//! What a worker names never reaches the supervisor's terminal raw: a
//! worker makes files whose names hold ESC, CR, a bidi override and bytes
//! that are not UTF-8, from a command line that holds them too; every
//! human view (`approvals list`, `approvals watch`, `status`, `changes`,
//! `commit`) shows them escaped, while `--json` and the ledger carry the
//! exact bytes (`<field>_b64` beside a name that is not UTF-8).
//!
//! Every mount is torn down by its guard; every wait is bounded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine as _;
use common::*;
use serde_json::Value;

/// A name that redraws a terminal: ESC sequences that erase the line and
/// move up, a CR, a right-to-left override, an isolate, and a byte that
/// is not UTF-8.
const EVIL: &[u8] = b"notes.md\x1b[2K\x1b[1A\r\xe2\x80\xae\xe2\x81\xa6hs.\xffevil";
/// The same, as every human view must show it.
const EVIL_SHOWN: &str = "notes.md\\x1b[2K\\x1b[1A\\r\\u{202e}\\u{2066}hs.\\xffevil";

/// Characters no human view may carry raw: controls (C0, DEL, C1),
/// bidi controls and marks, and U+FFFD (what raw bytes that are not
/// UTF-8 become when read back as text).
fn raw_danger(text: &str) -> Option<char> {
    text.chars().find(|&c| {
        (c.is_control() && c != '\n')
            || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{fffd}')
    })
}

#[track_caller]
fn assert_clean(what: &str, text: &str) {
    if let Some(c) = raw_danger(text) {
        panic!("{what}: {c:?} reached the terminal raw in {text:?}");
    }
    assert!(
        text.contains(EVIL_SHOWN),
        "{what}: the name is not shown escaped as {EVIL_SHOWN:?}: {text:?}"
    );
}

/// JSON output read back, after checking that it too is safe on a
/// terminal: the names in it are exact, but what could redraw a terminal
/// is written as `\uXXXX`, never raw.
#[track_caller]
fn json_of<T: serde::de::DeserializeOwned>(what: &str, text: &str) -> T {
    let raw = text.chars().find(|&c| {
        (c.is_control() && c != '\n')
            || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    });
    assert!(raw.is_none(), "{what}: {raw:?} raw in {text:?}");
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{what}: {e}: {text:?}"))
}

/// A JSON field's exact bytes: its `_b64` sibling when there is one.
fn exact(v: &Value, key: &str) -> Vec<u8> {
    match v[format!("{key}_b64")].as_str() {
        Some(b) => base64::engine::general_purpose::STANDARD
            .decode(b)
            .expect("base64"),
        None => v[key].as_str().expect(key).as_bytes().to_vec(),
    }
}

/// A JSON list's exact bytes: its `_b64` sibling list where it has one.
fn exact_list(v: &Value, key: &str) -> Vec<Vec<u8>> {
    let texts = v[key].as_array().expect(key);
    let b64 = v[format!("{key}_b64")].as_array();
    texts
        .iter()
        .enumerate()
        .map(|(i, t)| match b64.and_then(|b| b[i].as_str()) {
            Some(b) => base64::engine::general_purpose::STANDARD
                .decode(b)
                .expect("base64"),
            None => t.as_str().expect(key).as_bytes().to_vec(),
        })
        .collect()
}

fn with_evil(prefix: &str) -> Vec<u8> {
    let mut p = prefix.as_bytes().to_vec();
    p.extend_from_slice(EVIL);
    p
}

fn zm(m: &TestMount, args: &[&str]) -> Out {
    let mut cmd = Command::new(BIN);
    cmd.args(args).arg(m.mountpoint());
    run(&mut cmd, Duration::from_secs(30))
}

/// A worker in a session of its own (as `run` starts CMD) whose command
/// line carries the name: `sh -c 'echo x > "$0/$1"' DIR NAME`.
fn worker(m: &TestMount, dir: &str) -> Child {
    worker_naming(m, dir, EVIL)
}

fn worker_naming(m: &TestMount, dir: &str, name: &[u8]) -> Child {
    Command::new("setsid")
        .args(["sh", "-c", "echo x > \"$0/$1\"", dir])
        .arg(OsStr::from_bytes(name))
        .current_dir(m.mountpoint())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// `approvals watch` (human or `--json`) until it has shown a request,
/// then stopped: what it printed, bytes read back as text.
fn watch(m: &TestMount, json: bool) -> String {
    let out = m.root().join(format!("watch-{json}.out"));
    let mut cmd = Command::new(BIN);
    cmd.args(["approvals", "watch"]);
    if json {
        cmd.arg("--json");
    }
    let mut child = cmd
        .arg(m.mountpoint())
        .stdin(Stdio::null())
        .stdout(fs::File::create(&out).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let seen = wait_until(Duration::from_secs(10), || {
        fs::read(&out).is_ok_and(|b| b.ends_with(b"\n"))
    });
    let _ = child.kill();
    let _ = child.wait();
    assert!(seen, "approvals watch showed nothing within 10 s");
    String::from_utf8_lossy(&fs::read(&out).unwrap()).into_owned()
}

fn ledger(m: &TestMount) -> Vec<Value> {
    fs::read_to_string(m.root().join("audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| json_of("the ledger", l))
        .collect()
}

/// The file named EVIL in `dir`, found by its exact bytes.
fn has_exact(dir: &Path) -> bool {
    fs::read_dir(dir)
        .unwrap()
        .any(|e| e.unwrap().file_name().as_bytes() == EVIL)
}

#[test]
fn a_request_and_its_caller_are_shown_escaped_and_kept_exact() {
    if !fuse_ok() {
        return;
    }
    let s = Setup::zones(
        Mode::Sandboxed,
        &[("final", "mode: rw, approval: { write: ask, delete: ask }")],
    )
    .asking();
    let audit = s.root().join("audit.jsonl");
    let m = s
        .arg("--audit-log")
        .arg(audit.to_str().unwrap())
        .arg("--approval-timeout")
        .arg("60")
        .mount();
    let mut w = worker(&m, "final");
    let mut list = Vec::new();
    let asked = wait_until(Duration::from_secs(10), || {
        let out = zm(&m, &["approvals", "list", "--json"]);
        list = json_of("approvals list --json", &out.stdout);
        list.len() == 1
    });
    assert!(asked, "no request: {list:?}");

    // Every human view shows the name and the command line escaped.
    let out = zm(&m, &["approvals", "list"]);
    assert!(out.success(), "{}", out.describe());
    assert_clean("approvals list", &out.stdout);
    assert!(
        out.stdout
            .contains(&format!("sh -c echo x > \"$0/$1\" final {EVIL_SHOWN}")),
        "the command line: {}",
        out.stdout
    );
    assert_clean("approvals watch", &watch(&m, false));
    let out = zm(&m, &["status"]);
    assert_clean("status", &out.stdout);

    // JSON has the exact bytes: list, watch, status, the ledger.
    let r = &list[0];
    assert_eq!(exact(r, "path"), with_evil("/final/"), "{r}");
    assert_eq!(exact(&r["items"][0], "path"), with_evil("/final/"), "{r}");
    let mut cmdline = b"sh -c echo x > \"$0/$1\" final ".to_vec();
    cmdline.extend_from_slice(EVIL);
    assert_eq!(exact(r, "cmdline"), cmdline, "{r}");
    let line = watch(&m, true);
    let ev: Value = json_of("approvals watch --json", line.lines().next().unwrap());
    assert_eq!(exact(&ev["request"], "path"), with_evil("/final/"), "{ev}");
    let st: Value = json_of("status --json", &zm(&m, &["status", "--json"]).stdout);
    assert_eq!(exact(&st["pending"][0], "cmdline"), cmdline);
    let asked: Vec<Value> = ledger(&m)
        .into_iter()
        .filter(|r| r["event"] == "request")
        .collect();
    assert_eq!(exact(&asked[0], "path"), with_evil("/final/"));
    assert_eq!(exact(&asked[0], "cmdline"), cmdline);

    // `check` of the name, as a supervisor would ask: escaped, and exact
    // in JSON.
    let named = m.mountpoint().join("final").join(OsStr::from_bytes(EVIL));
    let out = run(
        Command::new(BIN)
            .args(["check", "--write"])
            .arg(m.mountpoint())
            .arg(&named),
        Duration::from_secs(30),
    );
    assert_eq!(out.code(), Some(3), "would ask: {}", out.describe());
    assert_clean("check", &out.stdout);
    let out = run(
        Command::new(BIN)
            .args(["check", "--json", "--write"])
            .arg(m.mountpoint())
            .arg(&named),
        Duration::from_secs(30),
    );
    let v: Value = json_of("--json", &out.stdout);
    assert_eq!(exact(&v, "path"), with_evil("/final/"), "{v}");

    // Denied: the refusal `status` lists is escaped too, and exact in JSON.
    let id = r["id"].as_u64().unwrap().to_string();
    let out = run(
        Command::new("setsid")
            .args([BIN, "approvals", "deny"])
            .arg(m.mountpoint())
            .arg(&id),
        Duration::from_secs(30),
    );
    assert!(out.success(), "{}", out.describe());
    wait_child(&mut w, Duration::from_secs(20)).expect("the worker did not finish");
    let out = zm(&m, &["status"]);
    assert_clean("status after the denial", &out.stdout);
    let st: Value = json_of("status --json", &zm(&m, &["status", "--json"]).stdout);
    let last = st["recent_refusals"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(exact(&last, "path"), with_evil("/final/"), "{last}");
    assert!(
        raw_danger(last["message"].as_str().unwrap()).is_none(),
        "{last}"
    );
}

#[test]
fn changes_and_commit_show_names_escaped_and_keep_them_exact() {
    if !fuse_ok() {
        return;
    }
    let s = Setup::zones(
        Mode::Sandboxed,
        &[("work", "mode: rw"), ("out", "mode: rw, staged: true")],
    );
    let stage: PathBuf = s.root().join("stage");
    let audit = s.root().join("audit.jsonl");
    let m = s
        .arg("--stage-dir")
        .arg(stage.to_str().unwrap())
        .arg("--audit-log")
        .arg(audit.to_str().unwrap())
        .mount();
    for zone in ["work", "out"] {
        let mut w = worker(&m, zone);
        let st = wait_child(&mut w, Duration::from_secs(20)).expect("the worker did not finish");
        assert!(
            st.success(),
            "the worker could not create its file in /{zone}"
        );
    }

    // `changes`: both zones, escaped; `--json`: exact.
    let out = zm(&m, &["changes"]);
    assert!(out.success(), "{}", out.describe());
    assert_clean("changes", &out.stdout);
    for zone in ["work", "out"] {
        assert!(
            out.stdout.contains(&format!("A  /{zone}/{EVIL_SHOWN}")),
            "{zone}: {}",
            out.stdout
        );
    }
    // A name that is not UTF-8 given as PATH reaches the daemon exact.
    let out = run(
        Command::new(BIN)
            .arg("changes")
            .arg(m.mountpoint())
            .arg(m.mountpoint().join("work").join(OsStr::from_bytes(EVIL))),
        Duration::from_secs(30),
    );
    assert!(out.success(), "{}", out.describe());
    // With the command that made it, whose argv holds the name: escaped.
    assert_eq!(
        out.stdout,
        format!("A  /work/{EVIL_SHOWN}  by sh -c echo x > \"$0/$1\" work {EVIL_SHOWN}\n"),
        "changes PATH"
    );
    let out = zm(&m, &["changes", "--diff"]);
    assert!(out.success(), "{}", out.describe());
    assert!(
        raw_danger(&out.stdout).is_none(),
        "changes --diff: {:?}",
        out.stdout
    );
    let out = zm(&m, &["changes", "--json"]);
    assert!(out.success(), "changes --json: {}", out.describe());
    let v: Value = json_of("--json", &out.stdout);
    for z in v["zones"].as_array().unwrap() {
        let c = &z["changes"][0];
        assert_eq!(exact(c, "path"), EVIL, "{z}");
        assert!(exact(&c["last"], "argv").ends_with(EVIL), "{z}");
    }

    // `commit --json`: exact, and the host has the exact name; a second
    // name, committed for people: escaped.
    let out = zm(&m, &["commit", "--json"]);
    assert!(out.success(), "commit --json: {}", out.describe());
    let v: Value = json_of("--json", &out.stdout);
    assert_eq!(exact(&v["zones"][0]["applied"][0], "path"), EVIL, "{v}");
    assert!(
        has_exact(&m.backing("out", "")),
        "the host lacks the exact name"
    );
    let commits: Vec<Value> = ledger(&m)
        .into_iter()
        .filter(|r| r["event"] == "commit")
        .collect();
    assert_eq!(
        exact_list(&commits[0], "paths"),
        [with_evil("/out/")],
        "{}",
        commits[0]
    );
    let mut second = EVIL.to_vec();
    second.push(b'2');
    let mut w = worker_naming(&m, "out", &second);
    wait_child(&mut w, Duration::from_secs(20)).expect("the worker did not finish");
    let out = zm(&m, &["commit"]);
    assert!(out.success(), "commit: {}", out.describe());
    assert_clean("commit", &out.stdout);
    assert!(
        out.stdout
            .contains(&format!("committed A  /out/{EVIL_SHOWN}2")),
        "{}",
        out.stdout
    );
}

#[test]
fn run_review_and_a_stage_dir_show_names_escaped() {
    if !fuse_ok() {
        return;
    }
    let s = Setup::new("").backing_dir("work", "b");
    let root = s.root().to_path_buf();
    fs::create_dir_all(root.join("b")).unwrap();
    let zone = format!("work={}:staged", root.join("b").display());
    let stage = root.join("stage");
    let out = run(
        Command::new(BIN)
            .args(["run", "-q", "--zone", &zone, "--stage-dir"])
            .arg(&stage)
            .args(["--review", "--", "sh", "-c", "echo x > \"$1\"", "sh"])
            .arg(OsStr::from_bytes(EVIL))
            .current_dir(&root),
        Duration::from_secs(60),
    );
    assert!(out.success(), "{}", out.describe());
    // No terminal: the review prints the changes and keeps the stage.
    assert_clean("run --review", &out.stderr);
    assert!(
        out.stderr.contains(&format!("A  /work/{EVIL_SHOWN}")),
        "{}",
        out.stderr
    );
    // The stage dir, no mount holding it: the same.
    let out = run(
        Command::new(BIN).arg("changes").arg(&stage),
        Duration::from_secs(30),
    );
    assert!(out.success(), "{}", out.describe());
    assert_clean("changes STAGE", &out.stdout);
    let out = run(
        Command::new(BIN).args(["changes", "--json"]).arg(&stage),
        Duration::from_secs(30),
    );
    let v: Value = json_of("--json", &out.stdout);
    assert_eq!(exact(&v["zones"][0]["changes"][0], "path"), EVIL, "{v}");
    let out = run(
        Command::new(BIN).arg("commit").arg(&stage),
        Duration::from_secs(30),
    );
    assert!(out.success(), "{}", out.describe());
    assert_clean("commit STAGE", &out.stdout);
    assert!(has_exact(&root.join("b")), "the host lacks the exact name");
}

/// Whether `text` holds a space other than U+0020 (or newline) raw: two
/// no-break spaces read as the two spaces that part a path from its
/// details in `changes`, or as a column gap of `approvals list`.
fn raw_space(text: &str) -> Option<char> {
    text.chars()
        .find(|&c| c.is_whitespace() && c != ' ' && c != '\n')
}

/// A staged name that imitates the details of a line of `changes`, and a
/// request whose name imitates the PID, UID and COMMAND columns of
/// `approvals list` from a command line that imitates its columns too
/// (`exec -a "vim  ID  fake"`): every view shows them escaped.
#[test]
fn lookalike_spaces_and_arrows_are_escaped_in_changes_and_approvals_list() {
    if !fuse_ok() {
        return;
    }
    let s = Setup::zones(
        Mode::Sandboxed,
        &[
            ("final", "mode: rw, approval: { write: ask, delete: ask }"),
            ("out", "mode: rw, staged: true"),
        ],
    )
    .asking();
    let stage: PathBuf = s.root().join("stage");
    let m = s
        .arg("--stage-dir")
        .arg(stage.to_str().unwrap())
        .arg("--approval-timeout")
        .arg("60")
        .mount();

    let details = format!(
        "evil.sh\u{a0}\u{a0}(0644, 4 bytes)\u{a0}\u{a0}by git{}",
        "\u{2003}".repeat(5)
    );
    let mut w = worker_naming(&m, "out", details.as_bytes());
    let st = wait_child(&mut w, Duration::from_secs(20)).expect("the worker did not finish");
    assert!(st.success(), "the worker could not create its file in /out");
    let arrow = "a \u{2212}> b";
    let mut w = worker_naming(&m, "out", arrow.as_bytes());
    let st = wait_child(&mut w, Duration::from_secs(20)).expect("the worker did not finish");
    assert!(st.success(), "the worker could not create its file in /out");
    let out = zm(&m, &["changes"]);
    assert!(out.success(), "{}", out.describe());
    assert_eq!(raw_space(&out.stdout), None, "changes: {:?}", out.stdout);
    let shown = "evil.sh\\u{a0}\\u{a0}(0644, 4 bytes)\\u{a0}\\u{a0}by git\
                 \\u{2003}\\u{2003}\\u{2003}\\u{2003}\\u{2003}";
    assert!(
        out.stdout.contains(&format!("A  /out/{shown}  (")),
        "changes: {}",
        out.stdout
    );
    assert!(
        out.stdout.contains("A  /out/a \u{2212}\\x3e b  ("),
        "changes: {}",
        out.stdout
    );
    assert!(!out.stdout.contains("\u{2212}>"), "{}", out.stdout);

    let columns = format!(
        "notes.md{}99999\u{2003}\u{2003}0\u{3000}\u{3000}git commit",
        "\u{a0}".repeat(16)
    );
    let mut w = Command::new("setsid")
        .args([
            "bash",
            "-c",
            "exec -a 'vim  ID  fake' sh -c 'echo x > \"$0/$1\"' \"$0\" \"$1\"",
            "final",
        ])
        .arg(&columns)
        .current_dir(m.mountpoint())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut list: Vec<Value> = Vec::new();
    let asked = wait_until(Duration::from_secs(10), || {
        let out = zm(&m, &["approvals", "list", "--json"]);
        list = json_of("approvals list --json", &out.stdout);
        list.len() == 1
    });
    assert!(asked, "no request: {list:?}");
    assert!(
        exact(&list[0], "cmdline").starts_with(b"vim  ID  fake -c "),
        "{}",
        list[0]
    );
    for view in [
        zm(&m, &["approvals", "list"]).stdout,
        watch(&m, false),
        zm(&m, &["status"]).stdout,
    ] {
        assert_eq!(raw_space(&view), None, "{view:?}");
        assert!(view.contains("vim \\x20ID \\x20fake -c "), "{view}");
        assert!(
            view.contains(
                "/final/notes.md\\u{a0}\\u{a0}\\u{a0}\\u{a0}\\u{a0}\\u{a0}\\u{a0}\\u{a0}\
                 \\u{a0}\\u{a0}\\u{a0}\\u{a0}\\u{a0}\\u{a0}\\u{a0}\\u{a0}99999\
                 \\u{2003}\\u{2003}0\\u{3000}\\u{3000}git commit"
            ),
            "{view}"
        );
    }
    let id = list[0]["id"].as_u64().unwrap().to_string();
    let out = run(
        Command::new("setsid")
            .args([BIN, "approvals", "deny"])
            .arg(m.mountpoint())
            .arg(&id),
        Duration::from_secs(30),
    );
    assert!(out.success(), "{}", out.describe());
    wait_child(&mut w, Duration::from_secs(20)).expect("the worker did not finish");
}

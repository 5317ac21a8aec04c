//! `zonemount review` and `run --review`, walked through a pty (made by
//! util-linux `script`) with the keys a person would type: per file, per
//! directory, the rest; a diff on `v`; then the backing dir and the stage
//! are exactly as decided. No terminal: the commands to run, nothing
//! decided. A name's escape sequences never reach the terminal raw. The
//! worker's side may not review. The README's two one-terminal sessions
//! run as written: review per file, and approve → review → commit (typed
//! into one shell on a pty, the worker in the background).
//!
//! Every mount is torn down by its guard; every run is bounded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;

const BIN: &str = env!("CARGO_BIN_EXE_zonemount");

fn staged() -> Setup {
    let s = Setup::new(
        "sandbox:\n  mode: direct\n  zones:\n    work:\n      path: ./b\n      mode: rw\n      staged: true\n      approval: { write: preApproved }\n",
    )
    .backing_dir("work", "b")
    .file("work", "f", "old\n")
    .file("work", "gone", "bye\n")
    .file("work", "d/y", "y\n")
    .file("work", "d/sub/z", "z\n");
    let stage = s.root().join("stage");
    s.arg("--stage-dir").arg(&stage.to_string_lossy())
}

/// A worker's script in the zone, in a session of its own (so the test
/// may decide after it).
fn worker(m: &TestMount, script: &str) -> Out {
    m.sh_in(
        "work",
        &format!("setsid -w sh -c '{}'", script.replace('\'', "'\\''")),
        &[],
    )
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// `cmd` (a shell command line) on a pty, `keys` typed into it (one
/// answer a line); stdout and stderr both arrive as the pty's output.
fn on_pty(cwd: &Path, cmd: &str, keys: &[&str], env: &[(&str, &str)]) -> Out {
    let keyfile = cwd.join(".keys");
    let mut text = keys.join("\n");
    text.push('\n');
    fs::write(&keyfile, text).unwrap();
    let line = format!(
        "script -q -e -c {} /dev/null < {}",
        quote(cmd),
        quote(&keyfile.to_string_lossy())
    );
    let mut c = Command::new("sh");
    c.args(["-c", &line]).current_dir(cwd).env_remove("PAGER");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = run(&mut c, Duration::from_secs(60));
    let _ = fs::remove_file(&keyfile);
    out
}

/// The staged changes' (kind, path), from `changes --json`.
fn staged_paths(m: &TestMount, target: &str) -> Vec<(String, String)> {
    let out = m.zonemount(&["changes", "--json", target]);
    assert!(out.success(), "{}", out.describe());
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let mut got: Vec<(String, String)> = v["zones"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|z| z["changes"].as_array().cloned().unwrap_or_default())
        .map(|c| {
            (
                c["kind"].as_str().unwrap_or("?").to_string(),
                c["path"].as_str().unwrap_or("?").to_string(),
            )
        })
        .collect();
    got.sort();
    got
}

#[test]
fn review_walks_files_and_directories_and_applies_each_decision() {
    if !fuse_ok() || !require(Need::Tool("script")) {
        return;
    }
    let m = staged().mount();
    let out = worker(
        &m,
        "echo new > f && rm gone && echo Y > d/y && echo Z > d/sub/z \
         && mkdir src && echo 1 > src/a && echo 2 > src/b \
         && echo t > top.txt && printf \"e\\033[2Jvil\" > \"$(printf \"e\\033[2Jvil\")\"",
    );
    assert!(out.success(), "{}", out.describe());
    let mnt = m.mountpoint().display().to_string();
    // In path order: the dir /work/d (d/sub/z, d/y): view, then one by
    // one: commit d/sub/z, discard d/y; /work/e<ESC>[2Jvil: keep;
    // /work/f: view its diff, keep; /work/gone: commit (the delete);
    // /work/src (added, with a and b): commit the whole dir at once;
    // /work/top.txt: commit it and the rest... which is only it.
    let keys = ["v", "o", "c", "d", "k", "x", "v", "k", "c", "c", "C"];
    let out = on_pty(
        m.root(),
        &format!("{} review {}", quote(BIN), quote(&mnt)),
        &keys,
        &[("PAGER", "sed s/^/PAGED:/")],
    );
    assert!(out.success(), "{}", out.describe());
    let shown = &out.stdout;
    // Nothing raw from a name reaches the terminal.
    assert!(
        !shown.contains('\u{1b}') && shown.contains("e\\x1b[2Jvil"),
        "{shown:?}"
    );
    // The dir's diff, through $PAGER (stdout is the pty).
    assert!(
        shown.contains("PAGED:+Y") && shown.contains("PAGED:+Z"),
        "{shown:?}"
    );
    // f's diff.
    assert!(
        shown.contains("PAGED:-old") && shown.contains("PAGED:+new"),
        "{shown:?}"
    );
    assert!(
        shown.contains("/work/d/  (2 changes)")
            && shown.contains("/work/src/  (3 changes)")
            && shown.contains("Decide the whole directory")
            && shown.contains("c - commit it"),
        "{shown:?}"
    );
    assert!(
        shown.contains("6 committed, 1 discarded, 2 kept in the stage"),
        "{shown:?}"
    );
    let b = |rel: &str| fs::read_to_string(m.backing("work", rel)).ok();
    assert_eq!(b("d/sub/z").as_deref(), Some("Z\n"), "committed");
    assert_eq!(b("d/y").as_deref(), Some("y\n"), "discarded");
    assert_eq!(b("f").as_deref(), Some("old\n"), "kept");
    assert_eq!(b("gone"), None, "the delete committed");
    assert_eq!(b("src/a").as_deref(), Some("1\n"));
    assert_eq!(b("src/b").as_deref(), Some("2\n"));
    assert_eq!(b("top.txt").as_deref(), Some("t\n"));
    assert!(!m.backing("work", "e\u{1b}[2Jvil").exists(), "kept");
    // The view: what was kept and what the backing dir has.
    let v = |rel: &str| fs::read_to_string(m.path(rel)).ok();
    assert_eq!(v("work/f").as_deref(), Some("new\n"));
    assert_eq!(v("work/d/y").as_deref(), Some("y\n"));
    assert_eq!(
        staged_paths(&m, &mnt),
        vec![
            ("added".to_string(), "e\u{1b}[2Jvil".to_string()),
            ("modified".to_string(), "f".to_string()),
        ]
    );
}

/// On a live mount the worker may change what the reviewer is looking
/// at: a commit applies what was shown or nothing. Here the worker
/// rewrites `f` and adds to `src/` while the reviewer reads their diffs
/// (the pager does it, as the worker, in a session of its own): each `c`
/// is refused and the change shown again; the next `c` commits what that
/// showed. (They were committed at once, unseen: found by an attack
/// pass.)
#[test]
fn review_commits_only_what_it_showed() {
    if !fuse_ok() || !require(Need::Tool("script")) {
        return;
    }
    let m = staged().mount();
    let out = worker(
        &m,
        "echo new > f && mkdir src && echo 1 > src/a && echo 2 > src/b",
    );
    assert!(out.success(), "{}", out.describe());
    let mnt = m.mountpoint().display().to_string();
    let w = m.path("work").display().to_string();
    let pager = format!(
        "cat > /dev/null; [ -e {w}/src/c ] || setsid -w sh -c 'echo later >> {w}/f; echo 3 > {w}/src/c'"
    );
    // f: view (the worker changes f and adds src/c), commit: refused and
    // shown again; commit. src/ (now 4 changes): commit.
    let keys = ["v", "c", "c", "c"];
    let out = on_pty(
        m.root(),
        &format!("{} review {}", quote(BIN), quote(&mnt)),
        &keys,
        &[("PAGER", pager.as_str())],
    );
    assert!(out.success(), "{}", out.describe());
    let shown = &out.stdout;
    assert_eq!(
        shown
            .matches("changed since it was shown: not committed; shown again")
            .count(),
        1,
        "{shown:?}"
    );
    assert!(shown.contains("/work/src/  (4 changes)"), "{shown:?}");
    assert!(
        shown.contains("5 committed, 0 discarded, 0 kept"),
        "{shown:?}"
    );
    let b = |rel: &str| fs::read_to_string(m.backing("work", rel)).ok();
    assert_eq!(b("f").as_deref(), Some("new\nlater\n"));
    assert_eq!(b("src/c").as_deref(), Some("3\n"));
}

#[test]
fn review_discards_the_rest_and_quits_keeping_the_rest() {
    if !fuse_ok() || !require(Need::Tool("script")) {
        return;
    }
    let mut m = staged().mount();
    let out = worker(&m, "echo new > f && rm gone && echo t > top.txt");
    assert!(out.success(), "{}", out.describe());
    let mnt = m.mountpoint().display().to_string();
    // f: keep; gone: quit (the rest kept).
    let out = on_pty(
        m.root(),
        &format!("{} review {}", quote(BIN), quote(&mnt)),
        &["k", "q"],
        &[],
    );
    assert!(out.success(), "{}", out.describe());
    assert_eq!(staged_paths(&m, &mnt).len(), 3);
    // A stage dir no mount holds: D discards everything left.
    assert!(m.unmount().success());
    assert!(wait_until(Duration::from_secs(10), || daemon_pids_for(
        m.mountpoint()
    )
    .is_empty()));
    let stage = m.root().join("stage").display().to_string();
    let out = on_pty(
        m.root(),
        &format!("{} review {}", quote(BIN), quote(&stage)),
        &["D"],
        &[],
    );
    assert!(out.success(), "{}", out.describe());
    assert!(
        out.stdout
            .contains("0 committed, 3 discarded, 0 kept in the stage"),
        "{}",
        out.describe()
    );
    assert_eq!(
        fs::read_to_string(m.backing("work", "gone")).unwrap(),
        "bye\n"
    );
    assert!(!m.backing("work", "top.txt").exists());
}

#[test]
fn review_without_a_terminal_prints_what_to_run_and_decides_nothing() {
    if !fuse_ok() || !require(Need::Tool("script")) {
        return;
    }
    let m = staged().mount();
    let out = worker(&m, "echo new > f");
    assert!(out.success(), "{}", out.describe());
    let mnt = m.mountpoint().display().to_string();
    let out = m.zonemount(&["review", &mnt]);
    assert!(out.success(), "{}", out.describe());
    assert!(
        out.stderr.contains("M  /work/f")
            && out.stderr.contains("nothing decided")
            && out.stderr.contains(&format!("zonemount commit {mnt}"))
            && out.stderr.contains(&format!("zonemount review {mnt}")),
        "{}",
        out.describe()
    );
    assert_eq!(staged_paths(&m, &mnt).len(), 1);
    assert_eq!(fs::read_to_string(m.backing("work", "f")).unwrap(), "old\n");
}

#[test]
fn the_workers_side_may_not_review() {
    if !fuse_ok() || !require(Need::Tool("script")) {
        return;
    }
    let m = staged().mount();
    let mnt = m.mountpoint().display().to_string();
    // The shell that writes runs the review: refused, naming the fix.
    let keys = m.root().join("keys");
    fs::write(&keys, "c\n").unwrap();
    let out = m.sh_in(
        "work",
        &format!(
            "echo new > f && script -q -e -c {} /dev/null < {}",
            quote(&format!("{} review {}", quote(BIN), quote(&mnt))),
            quote(&keys.to_string_lossy())
        ),
        &[],
    );
    assert_eq!(out.code(), Some(1), "{}", out.describe());
    assert!(
        out.stdout.contains("commit refused") && out.stdout.contains("from another terminal"),
        "{}",
        out.describe()
    );
    assert_eq!(fs::read_to_string(m.backing("work", "f")).unwrap(), "old\n");
    assert_eq!(staged_paths(&m, &mnt).len(), 1);
}

#[test]
fn run_review_walks_the_same_way_on_a_terminal() {
    if !fuse_ok() || !require(Need::Tool("script")) {
        return;
    }
    let s = Setup::new("")
        .backing_dir("work", "b")
        .file("work", "f", "old\n");
    let root = s.root().to_path_buf();
    let zone = format!("work={}:staged", root.join("b").display());
    let stage = root.join("stage").display().to_string();
    let cmd = format!(
        "{} run -q --zone {} --stage-dir {} --review -- sh -c {}",
        quote(BIN),
        quote(&zone),
        quote(&stage),
        quote("echo a > a && mkdir -p lib && echo x > lib/x && echo y > lib/y && echo new > f")
    );
    // /work/a: commit; /work/f: view, keep; /work/lib: discard whole.
    let out = on_pty(&root, &cmd, &["c", "v", "k", "d"], &[]);
    assert!(out.success(), "{}", out.describe());
    assert!(
        out.stdout.contains("-old") && out.stdout.contains("+new"),
        "{}",
        out.describe()
    );
    assert!(
        out.stdout
            .contains("1 committed, 3 discarded, 1 kept in the stage")
            && out.stdout.contains("the task's changes are staged in"),
        "{}",
        out.describe()
    );
    assert_eq!(fs::read_to_string(root.join("b/a")).unwrap(), "a\n");
    assert_eq!(fs::read_to_string(root.join("b/f")).unwrap(), "old\n");
    assert!(!root.join("b/lib").exists());
    let out = run(
        Command::new(BIN).args(["changes", &stage]),
        Duration::from_secs(30),
    );
    assert!(
        out.stdout.contains("M  /work/f") && !out.stdout.contains("/work/lib"),
        "{}",
        out.describe()
    );
}

/// The README's one-terminal session, run as written: each `$ command`
/// (the one that reviews through a pty, typed the answers the README
/// shows after each `?`), its output as shown (in order; the others'
/// exactly).
#[test]
fn the_readme_review_session_runs_as_written() {
    if !fuse_ok() || !require(Need::Tool("script")) {
        return;
    }
    // `console pty`: it needs a terminal (tests/readme.rs leaves it to us).
    let block = readme_block("### Review per file, from one terminal", "console pty");
    let mut steps: Vec<(String, Vec<String>)> = Vec::new();
    for line in block.lines() {
        match line.strip_prefix("$ ") {
            Some(cmd) => steps.push((cmd.to_owned(), Vec::new())),
            None => steps.last_mut().unwrap().1.push(line.to_owned()),
        }
    }
    assert!(steps.len() >= 5, "{steps:#?}");
    let dir = tempfile::tempdir().unwrap();
    let demo = dir.path().display().to_string();
    let bin_dir = Path::new(BIN).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut reviewed = false;
    for (cmd, want) in &steps {
        // An answer is what follows a prompt's `? `.
        let keys: Vec<&str> = want
            .iter()
            .filter_map(|l| l.split_once("]? ").map(|(_, k)| k))
            .collect();
        if keys.is_empty() {
            let out = run(
                Command::new("sh")
                    .arg("-c")
                    .arg(format!("exec 2>&1; {cmd}"))
                    .current_dir(dir.path())
                    .env("PATH", &path),
                Duration::from_secs(30),
            );
            assert!(out.success(), "$ {cmd}: {}", out.describe());
            let mut shown = want.join("\n");
            if !shown.is_empty() {
                shown.push('\n');
            }
            assert_eq!(out.stdout.replace(&demo, "/tmp/demo"), shown, "$ {cmd}");
            continue;
        }
        reviewed = true;
        let out = on_pty(dir.path(), cmd, &keys, &[("PATH", &path)]);
        assert!(out.success(), "$ {cmd}: {}", out.describe());
        let got = out.stdout.replace("\r\n", "\n").replace(&demo, "/tmp/demo");
        let mut at = 0;
        for line in want.iter().filter(|l| !l.is_empty()) {
            let line = match line.split_once("]? ") {
                Some((prompt, _)) => format!("{prompt}]? "),
                None => line.clone(),
            };
            match got[at..].find(&line) {
                Some(i) => at += i + line.len(),
                None => panic!("$ {cmd}: {line:?} not shown (in order) in:\n{got}"),
            }
        }
    }
    assert!(reviewed, "the README's session reviews nothing");
}

/// A commit the host's change conflicts with: said as `commit` says it,
/// left staged, not asked again; the walk goes on; exit 6.
#[test]
fn a_conflicting_commit_is_reported_kept_and_exits_6() {
    if !fuse_ok() || !require(Need::Tool("script")) {
        return;
    }
    let m = staged().mount();
    let out = worker(&m, "echo new > f && echo t > top.txt");
    assert!(out.success(), "{}", out.describe());
    // The host's change gets other times than the stage's notes.
    std::thread::sleep(Duration::from_millis(20));
    fs::write(m.backing("work", "f"), "host\n").unwrap();
    let mnt = m.mountpoint().display().to_string();
    let out = on_pty(
        m.root(),
        &format!("{} review {}", quote(BIN), quote(&mnt)),
        &["c", "c"],
        &[],
    );
    assert_eq!(out.code(), Some(6), "{}", out.describe());
    assert!(
        out.stdout.contains("conflict  /work/f: ")
            && out
                .stdout
                .contains("1 committed, 0 discarded, 1 kept in the stage"),
        "{}",
        out.describe()
    );
    assert_eq!(
        fs::read_to_string(m.backing("work", "f")).unwrap(),
        "host\n"
    );
    assert_eq!(
        fs::read_to_string(m.backing("work", "top.txt")).unwrap(),
        "t\n"
    );
    assert_eq!(
        staged_paths(&m, &mnt),
        vec![("modified".to_string(), "f".to_string())]
    );
}

/// `r`: the stage rewound to a checkpoint, then the walk goes on with
/// what it holds.
#[test]
fn review_rewinds_to_a_checkpoint_then_goes_on() {
    if !fuse_ok() || !require(Need::Tool("script")) {
        return;
    }
    let m = staged().mount();
    let mnt = m.mountpoint().display().to_string();
    assert!(worker(&m, "echo a > a").success());
    let out = m.zonemount(&["checkpoint", &mnt]);
    assert!(out.success(), "{}", out.describe());
    let id = out.stdout.trim().to_string();
    assert!(worker(&m, "echo b > b").success());
    let out = on_pty(
        m.root(),
        &format!("{} review {}", quote(BIN), quote(&mnt)),
        &["r", &id, "c"],
        &[],
    );
    assert!(out.success(), "{}", out.describe());
    assert!(
        out.stdout.contains("Decide [c,d,k,v,C,D,K,r,q,?]? ")
            && out
                .stdout
                .contains(&format!("rewound /work to checkpoint {id}"))
            && out
                .stdout
                .contains("1 committed, 0 discarded, 0 kept in the stage"),
        "{}",
        out.describe()
    );
    assert_eq!(fs::read_to_string(m.backing("work", "a")).unwrap(), "a\n");
    assert!(!m.backing("work", "b").exists());
    assert!(staged_paths(&m, &mnt).is_empty());
}

/// One shell on a pty, typed into a line at a time as a person would:
/// util-linux `script` running `bash /dev/stdin` (no prompt, no job
/// numbers), with the terminal's echo off so its output is only what the
/// commands print. As root it runs in a private mount namespace (the
/// copies of other mounts dropped), so the registry shows it only its own
/// mounts; as a user, with a runtime dir of its own. Dropping it SIGKILLs
/// `script` (the pty hangs up: bash and a `run` still going get SIGHUP).
struct PtyShell {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    out: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    /// Where (in [`shown`](Self::shown)) the last step's marker line
    /// ended: what a background job prints after it belongs to the next
    /// step, even when it comes before that step's command is typed.
    seen: usize,
}

impl PtyShell {
    fn start(cwd: &Path, env: &[(&str, String)]) -> PtyShell {
        use std::io::Read;
        use std::process::Stdio;
        let shell = "script -q -e -c 'bash --norc --noprofile /dev/stdin' /dev/null";
        let mut c = if is_root() {
            let mut c = Command::new("unshare");
            c.args(["-m", "--propagation", "private", "--", "sh", "-c"])
                .arg(format!("{DROP_INHERITED_MOUNTS}\nexec {shell}"));
            c
        } else {
            let mut c = Command::new("sh");
            c.args(["-c", &format!("exec {shell}")]);
            c
        };
        c.current_dir(cwd)
            .env("LC_ALL", "C")
            .env_remove("PAGER")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        for (k, v) in env {
            c.env(k, v);
        }
        let mut child = c.spawn().expect("script");
        let stdin = child.stdin.take().unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let out = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = out.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        let mut sh = PtyShell {
            child,
            stdin,
            out,
            seen: 0,
        };
        sh.type_line("stty -echo; echo '::ready'");
        sh.seen = sh.wait_for(0, "::ready\r\n", Duration::from_secs(20));
        sh
    }

    fn type_line(&mut self, line: &str) {
        use std::io::Write;
        self.stdin
            .write_all(format!("{line}\n").as_bytes())
            .and_then(|()| self.stdin.flush())
            .expect("type into the pty");
    }

    /// Everything shown so far, CR LF as LF.
    fn shown(&self) -> String {
        String::from_utf8_lossy(&self.out.lock().unwrap()).replace("\r\n", "\n")
    }

    /// Waits (bounded: panics past `limit`) until `needle` is shown after
    /// byte `from` of [`shown`](Self::shown); returns where it ends.
    fn wait_for(&self, from: usize, needle: &str, limit: Duration) -> usize {
        let needle = needle.replace("\r\n", "\n");
        let deadline = std::time::Instant::now() + limit;
        loop {
            let shown = self.shown();
            if let Some(i) = shown.get(from..).and_then(|s| s.find(&needle)) {
                return from + i + needle.len();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{needle:?} not shown within {limit:?}; the terminal shows:\n{shown}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Types `cmd`, then (each once `n` prompts are shown) `keys`, then a
    /// marker; returns what the command showed and its exit status.
    fn step(&mut self, n: usize, cmd: &str, keys: &[&str], limit: Duration) -> (String, i32) {
        let from = self.seen;
        self.type_line(cmd);
        let mut at = from;
        for k in keys {
            at = self.wait_for(at, "]? ", limit);
            self.type_line(k);
        }
        self.type_line(&format!("echo \"::step {n} rc=$?\""));
        let end = self.wait_for(from, &format!("::step {n} rc="), limit);
        let end_line = self.wait_for(end, "\n", limit);
        self.seen = end_line;
        let shown = self.shown();
        let rc = shown[end..end_line - 1].trim().parse().unwrap_or(-1);
        let out = shown[from..end - format!("::step {n} rc=").len()].to_owned();
        (out, rc)
    }
}

impl Drop for PtyShell {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// README output lines with what changes from run to run made the
/// same: the README's directory (`/tmp/demo`) and `run`'s
/// (`zonemount-run.` and six random characters); with `table`
/// (`approvals list`), the AGE, PID and UID columns of each row, and the
/// spaces that align columns of those widths.
fn settled(text: &str, demo: &str, table: bool) -> Vec<String> {
    let mut text = text.replace(demo, "/tmp/demo");
    let mut at = 0;
    while let Some(i) = text[at..].find("zonemount-run.") {
        let start = at + i + "zonemount-run.".len();
        let len = text[start..]
            .find(|c: char| !c.is_ascii_alphanumeric())
            .unwrap_or(text.len() - start);
        text.replace_range(start..start + len, "*");
        at = start;
    }
    text.lines()
        .map(|l| {
            if !table {
                return l.to_owned();
            }
            let mut words: Vec<&str> = l.split_whitespace().collect();
            if words.len() >= 9 && words[0].parse::<u64>().is_ok() {
                for i in [1, 6, 7] {
                    words[i] = "*";
                }
            }
            words.join(" ")
        })
        .collect()
}

/// The README's approve → review → commit session, typed into one shell on
/// a pty exactly as written: the worker in the background under `run`, its
/// pending request listed and allowed without naming the mount, `wait`,
/// then `review` of the stage (typed the answers shown after each `?`) and
/// `commit`. Each command's output is the README's (the run's directory,
/// AGE, PID and UID aside; what the background `run` prints may come
/// during `allow` or `wait`, so those two are compared together); each
/// command exits 0. Before `approvals list` the shell waits, as a person
/// would, until the worker's request is pending. The worker's `sh -e`
/// stops at a refused read: without the allow, its changes never happen.
#[test]
fn the_readme_approve_review_commit_session_runs_as_written() {
    if !fuse_ok() || !require(Need::Tool("script")) {
        return;
    }
    if is_root() && !require(Need::Tool("unshare")) {
        return;
    }
    let block = readme_block(
        "### Approve, review and commit, from one terminal",
        "console pty",
    );
    let mut steps: Vec<(String, Vec<String>)> = Vec::new();
    for line in block.lines() {
        match line.strip_prefix("$ ") {
            Some(cmd) => steps.push((cmd.to_owned(), Vec::new())),
            None => steps.last_mut().unwrap().1.push(line.to_owned()),
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let demo = dir.path().display().to_string();
    let bin_dir = Path::new(BIN).parent().unwrap();
    let mut env = vec![(
        "PATH",
        format!(
            "{}:{}",
            bin_dir.display(),
            std::env::var("PATH").unwrap_or_default()
        ),
    )];
    // A user's registry of its own (root's is left to the namespace).
    let runtime = tempfile::tempdir().unwrap();
    if !is_root() {
        env.push(("XDG_RUNTIME_DIR", runtime.path().display().to_string()));
    }
    let mut sh = PtyShell::start(dir.path(), &env);
    let limit = Duration::from_secs(90);
    let (mut listed, mut allowed, mut reviewed) = (false, false, false);
    // `allow` and `wait`: (README, shown).
    let mut together: (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
    for (n, (cmd, want)) in steps.iter().enumerate() {
        let keys: Vec<&str> = want
            .iter()
            .filter_map(|l| l.split_once("]? ").map(|(_, k)| k))
            .collect();
        let table = cmd.starts_with("zonemount approvals list");
        if table {
            let (_, rc) = sh.step(
                1000 + n,
                "for i in $(seq 300); do zonemount approvals list --json | grep -q '\"id\"' && break; sleep 0.1; done",
                &[],
                limit,
            );
            assert_eq!(rc, 0);
            listed = true;
        }
        let (got, rc) = sh.step(n, cmd, &keys, limit);
        assert_eq!(rc, 0, "$ {cmd}: exit {rc}; the terminal shows:\n{got}");
        if !keys.is_empty() {
            reviewed = true;
            let got = settled(&got, &demo, false).join("\n");
            let mut at = 0;
            for line in settled(&want.join("\n"), &demo, false) {
                let line = match line.split_once("]? ") {
                    Some((prompt, _)) => format!("{prompt}]? "),
                    None => line,
                };
                match got[at..].find(&line) {
                    Some(i) => at += i + line.len(),
                    None => panic!("$ {cmd}: {line:?} not shown (in order) in:\n{got}"),
                }
            }
            continue;
        }
        if cmd.starts_with("zonemount approvals allow") {
            allowed = true;
        }
        if cmd.starts_with("zonemount approvals allow") || cmd == "wait" {
            together.0.extend(settled(&want.join("\n"), &demo, false));
            together.1.extend(settled(&got, &demo, false));
            if cmd == "wait" {
                together.0.sort();
                together.1.sort();
                assert_eq!(together.1, together.0, "$ {cmd} (with allow)");
            }
            continue;
        }
        assert_eq!(
            settled(&got, &demo, table),
            settled(&want.join("\n"), &demo, table),
            "$ {cmd}"
        );
    }
    assert!(
        listed && allowed && reviewed,
        "the README's session {steps:#?}"
    );
    drop(sh);
    let read = |p: &str| fs::read_to_string(dir.path().join("project").join(p)).unwrap();
    assert_eq!(
        (read("app.py"), read("TODO"), read("guide.md")),
        ("hello\n".into(), "notes\n".into(), "guide\n".into())
    );
}

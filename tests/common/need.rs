//! What a test needs from the machine (root, `/dev/fuse`, a tool on PATH)
//! and the one gate for it, [`require`]: met, skipped visibly, or — under
//! `CI=true` — failed.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};

/// True when running under CI (`CI=true`), where skips become failures.
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// The environment the suite runs in, as `scripts/test.sh` sets it in
/// `ZONEMOUNT_TEST_ENV`: `root` (the default: root with fusermount3),
/// `nofusermount` (root in a private mount namespace where fusermount3 is
/// covered) or `user` (an unprivileged user with the setuid fusermount3).
/// In a reduced environment a test may skip what that environment lacks
/// by design (root, for the `user` one) even under CI: the skip is
/// recorded with the environment's name.
pub fn test_env() -> String {
    std::env::var("ZONEMOUNT_TEST_ENV").unwrap_or_else(|_| "root".into())
}

/// Something a test needs that a machine may lack.
#[derive(Clone, Copy, Debug)]
pub enum Need {
    /// Effective uid 0 (acting as other uids, device nodes, mounts).
    Root,
    /// A usable `/dev/fuse`.
    Fuse,
    /// An external command on PATH.
    Tool(&'static str),
}

/// The one gate for everything a test needs from the machine: true when
/// `need` is met. When it isn't, a test must not pass quietly:
///  - under `CI=true` this panics (CI must provide root, FUSE and tools);
///  - otherwise it prints a `ZONEMOUNT-SKIP:` line and appends the same
///    line to the file named by `ZONEMOUNT_SKIP_LOG` (set by
///    `scripts/test.sh`, which counts those tests as skipped, not passed),
///    and returns false so the caller can skip (all or part of the test).
pub fn require(need: Need) -> bool {
    let (met, what) = match need {
        Need::Root => (is_root(), "root (effective uid 0)".to_string()),
        Need::Fuse => (fuse_usable(), "a /dev/fuse this user can open".to_string()),
        Need::Tool(name) => (has_tool(name), format!("the `{name}` command")),
    };
    if met {
        return true;
    }
    let env = test_env();
    if env == "user" && matches!(need, Need::Root) {
        record_skip(&format!("in the `{env}` environment: needs {what}"));
        return false;
    }
    if under_ci() {
        panic!(
            "this test needs {what}, which is missing: under CI=true that is a failure, not a skip"
        );
    }
    record_skip(&format!("needs {what}"));
    false
}

/// True (the test returns) when the suite runs in one of `envs`, whose
/// difference from `root` the test does not exercise and whose run of it
/// would only repeat `root`'s (a long test, kept out of the time the
/// test command takes). The skip is recorded with the environment's name
/// and `why`, even under CI.
pub fn repeats_root_in(envs: &[&str], why: &str) -> bool {
    let env = test_env();
    if !envs.contains(&env.as_str()) {
        return false;
    }
    record_skip(&format!("in the `{env}` environment: {why}"));
    true
}

/// Print and record a skip of the running test (see [`require`]).
fn record_skip(reason: &str) {
    let test = std::thread::current()
        .name()
        .unwrap_or("<unnamed>")
        .to_string();
    let bin = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_default();
    // `tests/foo.rs` builds to `foo-<hash>`: name the suite, not the hash.
    let suite = bin.rsplit_once('-').map_or(bin.as_str(), |(s, _)| s);
    // Outside the default environment the suite is named with it
    // (`user/errno_table`), as scripts/test.sh counts it.
    let env = test_env();
    let suite = if env == "root" {
        suite.to_string()
    } else {
        format!("{env}/{suite}")
    };
    let line = format!("ZONEMOUNT-SKIP: {suite}::{test}: {reason}\n");
    eprint!("{line}");
    if let Some(log) = std::env::var_os("ZONEMOUNT_SKIP_LOG") {
        use std::io::Write;
        // One O_APPEND write per line: lines from parallel tests don't mix.
        let r = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = r {
            panic!("can't record a skip in {}: {e}", Path::new(&log).display());
        }
    }
}

/// Whether FUSE is usable here: [`require`]`(Need::Fuse)`.
pub fn fuse_ok() -> bool {
    require(Need::Fuse)
}

/// Whether /dev/fuse opens read-write for this process.
fn fuse_usable() -> bool {
    fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .is_ok()
}

/// Whether an external tool is on PATH (quietly).
pub fn has_tool(name: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {name}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether an external tool is on PATH: [`require`]`(Need::Tool(name))`.
pub fn tool_ok(name: &'static str) -> bool {
    require(Need::Tool(name))
}

/// The (uid, gid) of user `name`, from `/etc/passwd`.
pub fn user_ids(name: &str) -> Option<(u32, u32)> {
    let passwd = fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        match f.as_slice() {
            [n, _, uid, gid, ..] if *n == name => Some((uid.parse().ok()?, gid.parse().ok()?)),
            _ => None,
        }
    })
}

/// `setpriv` arguments that run what follows as `(uid, gid)`, with no
/// supplementary groups.
pub fn setpriv_as((uid, gid): (u32, u32)) -> Vec<String> {
    vec![
        format!("--reuid={uid}"),
        format!("--regid={gid}"),
        "--clear-groups".to_string(),
    ]
}

/// Whether root can act as `user` (not root), who can open `/dev/fuse`
/// for reading and writing, with `setpriv`, and `fusermount3` is there.
pub fn user_can_fuse(user: &str) -> bool {
    let Some(ids) = user_ids(user).filter(|(uid, _)| *uid != 0) else {
        return false;
    };
    if !is_root() || !has_tool("setpriv") || !has_tool("fusermount3") {
        return false;
    }
    Command::new("setpriv")
        .args(setpriv_as(ids))
        .args(["sh", "-c", "test -r /dev/fuse && test -w /dev/fuse"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether the process runs as root: [`require`]`(Need::Root)`.
pub fn root_ok() -> bool {
    require(Need::Root)
}

/// Whether the process runs as root (device nodes, chown to other uids).
pub fn is_root() -> bool {
    euid() == 0
}

/// The effective uid of this test process.
pub fn euid() -> u32 {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).and_then(|u| u.parse().ok()))
        })
        .expect("effective uid from /proc/self/status")
}

/// Skip the running test for `reason`, recorded as [`require`] records
/// its skips: for what the machine lacks by design, such as a kernel
/// without a feature, where even CI can't do better.
pub fn skip(reason: &str) {
    record_skip(reason);
}

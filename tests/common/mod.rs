//! Harness for the integration tests: real mounts of the `zonemount` binary
//! in temporary directories, torn down on every path out of a test.
//!
//! A [`Setup`] builds a fixture (config file, worker files, backing files,
//! mountpoint) inside one `TempDir`; [`Setup::mount`] runs `zonemount mount`
//! and polls `/proc/mounts` (bounded) until the exact mountpoint is live. The
//! resulting [`TestMount`] owns the temp dir; its `Drop` runs `zonemount
//! unmount` and, if the mount is still listed, `umount -l` on that exact path
//! only — on panic too. Nothing else on the host is ever unmounted.
//!
//! Assumes Linux, `/dev/fuse`, and the usual coreutils. What a test needs
//! from the machine (root, `/dev/fuse`, a tool such as `setfattr`) goes
//! through [`require`]: without it the test skips with a visible
//! `ZONEMOUNT-SKIP:` line that `scripts/test.sh` counts, except under
//! `CI=true`, where it fails: a CI run that silently skipped every mount
//! would prove nothing.
//!
//! Commands run with `LC_ALL=C` so their error messages carry the C-locale
//! `strerror` text that [`assert_sh_errno`] looks for, and with stdout/stderr
//! sent to anonymous temp files rather than pipes: a daemon that detaches
//! while still holding an inherited pipe would otherwise hang the reader.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt::Debug;
use std::fs;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_zonemount");
/// How long a mount may take to show up in `/proc/mounts`.
pub const MOUNT_TIMEOUT: Duration = Duration::from_secs(10);
/// Poll step while waiting for a mount to appear or vanish.
pub const POLL_STEP: Duration = Duration::from_millis(20);
/// Default bound for any command a test runs.
pub const CMD_TIMEOUT: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------------
// Environment checks
// ---------------------------------------------------------------------------

/// True when running under CI (`CI=true`), where skips become failures.
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
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
        Need::Fuse => (Path::new("/dev/fuse").exists(), "/dev/fuse".to_string()),
        Need::Tool(name) => (has_tool(name), format!("the `{name}` command")),
    };
    if met {
        return true;
    }
    if under_ci() {
        panic!(
            "this test needs {what}, which is missing: under CI=true that is a failure, not a skip"
        );
    }
    record_skip(&format!("needs {what}"));
    false
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

/// Whether the process runs as root: [`require`]`(Need::Root)`.
pub fn root_ok() -> bool {
    require(Need::Root)
}

/// Whether the process runs as root (device nodes, chown to other uids).
pub fn is_root() -> bool {
    // /proc/self/status "Uid:\treal\teffective\t..." — effective uid is what counts.
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

// ---------------------------------------------------------------------------
// Running commands, bounded
// ---------------------------------------------------------------------------

/// What a finished command left behind.
#[derive(Debug)]
pub struct Out {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }
    pub fn success(&self) -> bool {
        self.status.success()
    }
    /// For assertion messages.
    pub fn describe(&self) -> String {
        format!(
            "status {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.status, self.stdout, self.stderr
        )
    }
    pub fn into_tuple(self) -> (ExitStatus, String, String) {
        (self.status, self.stdout, self.stderr)
    }
}

fn read_back(mut f: fs::File) -> String {
    let mut buf = Vec::new();
    let _ = f.seek(SeekFrom::Start(0));
    let _ = f.read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

/// Run `cmd` to completion within `timeout`; never panics (for `Drop`).
pub fn try_run(cmd: &mut Command, timeout: Duration) -> Result<Out, String> {
    let desc = format!("{cmd:?}");
    let out_f = tempfile::tempfile().map_err(|e| format!("tempfile: {e}"))?;
    let err_f = tempfile::tempfile().map_err(|e| format!("tempfile: {e}"))?;
    cmd.env("LC_ALL", "C")
        .stdin(Stdio::null())
        .stdout(out_f.try_clone().map_err(|e| e.to_string())?)
        .stderr(err_f.try_clone().map_err(|e| e.to_string())?);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot spawn {desc}: {e}"))?;
    let status = wait_child(&mut child, timeout)
        .ok_or_else(|| format!("{desc} did not finish within {timeout:?} (killed)"))?;
    Ok(Out {
        status,
        stdout: read_back(out_f),
        stderr: read_back(err_f),
    })
}

/// Run `cmd` within `timeout`, panicking if it can't be run or overruns.
pub fn run(cmd: &mut Command, timeout: Duration) -> Out {
    try_run(cmd, timeout).unwrap_or_else(|e| panic!("{e}"))
}

/// Wait for `child` up to `timeout`; on overrun kill it and return None.
pub fn wait_child(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(st)) => return Some(st),
            Ok(None) => {}
            Err(_) => return None,
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `sh -c script` in `dir`, with extra environment, bounded.
pub fn sh_at(dir: &Path, script: &str, env: &[(&str, &str)]) -> Out {
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(script).current_dir(dir);
    for (k, v) in env {
        cmd.env(k, v);
    }
    run(&mut cmd, CMD_TIMEOUT)
}

/// `zonemount ARGS...` with cwd `dir`, bounded.
pub fn zonemount_at(dir: &Path, args: &[&std::ffi::OsStr]) -> Out {
    let mut cmd = Command::new(BIN);
    cmd.args(args).current_dir(dir);
    run(&mut cmd, Duration::from_secs(30))
}

/// Extra arguments every test mount gets. `ask` must answer at once in
/// tests (as a deny), never wait for a human: when the binary knows
/// `--no-approvals` (DESIGN §4) we pass it; until approvals land, `ask`
/// already behaves as denied without it.
pub fn default_mount_args() -> &'static [String] {
    static ARGS: OnceLock<Vec<String>> = OnceLock::new();
    ARGS.get_or_init(|| {
        let help = try_run(
            Command::new(BIN).args(["mount", "--help"]),
            Duration::from_secs(10),
        );
        match help {
            Ok(out) if out.stdout.contains("--no-approvals") => {
                vec!["--no-approvals".to_string()]
            }
            _ => Vec::new(),
        }
    })
}

// ---------------------------------------------------------------------------
// /proc/mounts
// ---------------------------------------------------------------------------

/// `/proc/mounts` escapes these characters in paths as octal.
fn escape_mount_path(p: &Path) -> String {
    let s = p.to_string_lossy();
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            ' ' => out.push_str("\\040"),
            '\t' => out.push_str("\\011"),
            '\n' => out.push_str("\\012"),
            '\\' => out.push_str("\\134"),
            c => out.push(c),
        }
    }
    out
}

/// The (source, fstype, options) of the topmost mount on exactly `path`.
pub fn mount_entry(path: &Path) -> Option<(String, String, String)> {
    let text = fs::read_to_string("/proc/mounts").ok()?;
    let want = escape_mount_path(path);
    text.lines().rev().find_map(|line| {
        let mut it = line.split(' ');
        let src = it.next()?;
        let mp = it.next()?;
        let ty = it.next()?;
        let opts = it.next().unwrap_or("");
        (mp == want).then(|| (src.to_string(), ty.to_string(), opts.to_string()))
    })
}

/// How many mounts are stacked on exactly `path`.
pub fn mount_count(path: &Path) -> usize {
    let want = escape_mount_path(path);
    fs::read_to_string("/proc/mounts")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.split(' ').nth(1) == Some(want.as_str()))
        .count()
}

pub fn is_mounted(path: &Path) -> bool {
    mount_entry(path).is_some()
}

/// Poll `cond` every [`POLL_STEP`] until it holds or `timeout` passes.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(POLL_STEP);
    }
}

pub fn wait_mounted(path: &Path) -> bool {
    wait_until(MOUNT_TIMEOUT, || is_mounted(path))
}

pub fn wait_unmounted(path: &Path) -> bool {
    wait_until(MOUNT_TIMEOUT, || !is_mounted(path))
}

/// Pids (other than ours) whose command line names `zonemount` and `path`:
/// a daemon still serving, or about to, that mountpoint.
pub fn daemon_pids_for(path: &Path) -> Vec<u32> {
    let me = std::process::id();
    let want = path.to_string_lossy().into_owned();
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| {
            let Ok(raw) = fs::read(format!("/proc/{pid}/cmdline")) else {
                return false;
            };
            let args: Vec<String> = raw
                .split(|b| *b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            // argv[0] must be the zonemount binary itself: a fusermount3
            // helper also names the mountpoint (and maybe "zonemount").
            let is_zonemount = args
                .first()
                .is_some_and(|a0| Path::new(a0).file_name().is_some_and(|n| n == "zonemount"));
            is_zonemount && args.iter().skip(1).any(|a| a.trim_end_matches('/') == want)
        })
        .collect()
}

/// Unmount `mnt` (only that exact path): `zonemount unmount`, then `umount
/// -l` while it is still listed. Never panics. Returns whether the path is
/// clean afterwards.
pub fn cleanup_mount(mnt: &Path, tried_mount: bool) -> bool {
    if tried_mount || is_mounted(mnt) {
        match try_run(
            Command::new(BIN).arg("unmount").arg(mnt),
            Duration::from_secs(20),
        ) {
            Ok(out) if out.success() => {}
            Ok(out) => eprintln!(
                "harness: `zonemount unmount {}` failed: {}",
                mnt.display(),
                out.describe()
            ),
            Err(e) => eprintln!("harness: {e}"),
        }
    }
    for _ in 0..5 {
        if !is_mounted(mnt) {
            return true;
        }
        eprintln!(
            "harness: {} still mounted; falling back to umount -l",
            mnt.display()
        );
        if let Err(e) = try_run(
            Command::new("umount").arg("-l").arg(mnt),
            Duration::from_secs(10),
        ) {
            eprintln!("harness: {e}");
        }
    }
    !is_mounted(mnt)
}

// ---------------------------------------------------------------------------
// errno helpers
// ---------------------------------------------------------------------------

/// The errno of a failed call; None on success or a non-OS error.
pub fn errno_of<T>(r: &io::Result<T>) -> Option<i32> {
    r.as_ref().err().and_then(io::Error::raw_os_error)
}

/// A readable name for the errnos these tests meet.
pub fn errno_name(e: i32) -> String {
    let name = match e {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EIO => "EIO",
        libc::EBADF => "EBADF",
        libc::EACCES => "EACCES",
        libc::EEXIST => "EEXIST",
        libc::EXDEV => "EXDEV",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::EINVAL => "EINVAL",
        libc::EFBIG => "EFBIG",
        libc::ENOSPC => "ENOSPC",
        libc::EROFS => "EROFS",
        libc::EMLINK => "EMLINK",
        libc::ENOSYS => "ENOSYS",
        libc::ENOTEMPTY => "ENOTEMPTY",
        libc::ENODATA => "ENODATA",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EBUSY => "EBUSY",
        libc::EINTR => "EINTR",
        _ => return format!("errno {e}"),
    };
    name.to_string()
}

/// The C-locale strerror text (what `sh`, coreutils, git print).
pub fn strerror(e: i32) -> String {
    let s = io::Error::from_raw_os_error(e).to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

fn describe_result<T: Debug>(r: &io::Result<T>) -> String {
    match r {
        Ok(v) => format!("Ok({v:?})"),
        Err(e) => match e.raw_os_error() {
            Some(n) => format!("{} ({e})", errno_name(n)),
            None => format!("non-OS error: {e}"),
        },
    }
}

/// Assert `r` failed with exactly `errno`.
#[track_caller]
pub fn assert_errno<T: Debug>(r: io::Result<T>, errno: i32) {
    assert_eq!(
        errno_of(&r),
        Some(errno),
        "expected {}, got {}",
        errno_name(errno),
        describe_result(&r)
    );
}

/// Assert `r` has the wanted outcome: `None` = success, `Some(e)` = failed
/// with `e`. Returns whether it succeeded. `ctx` names the case.
#[track_caller]
pub fn expect_outcome<T: Debug>(r: io::Result<T>, want: Option<i32>, ctx: &str) -> bool {
    match want {
        None => {
            assert!(
                r.is_ok(),
                "{ctx}: expected success, got {}",
                describe_result(&r)
            );
            true
        }
        Some(e) => {
            assert_eq!(
                errno_of(&r),
                Some(e),
                "{ctx}: expected {}, got {}",
                errno_name(e),
                describe_result(&r)
            );
            false
        }
    }
}

/// Same as [`expect_outcome`] for a shell command: on refusal the command
/// must fail and its stderr carry the strerror text of `e`.
#[track_caller]
pub fn expect_sh_outcome(out: &Out, want: Option<i32>, ctx: &str) -> bool {
    match want {
        None => {
            assert!(
                out.success(),
                "{ctx}: expected success, got {}",
                out.describe()
            );
            true
        }
        Some(e) => {
            assert_sh_errno(out, e, ctx);
            false
        }
    }
}

/// A shell command failed, and its stderr names errno `e`.
#[track_caller]
pub fn assert_sh_errno(out: &Out, e: i32, ctx: &str) {
    let text = strerror(e);
    assert!(
        !out.success() && out.stderr.contains(&text),
        "{ctx}: expected failure with {} ({text:?}), got {}",
        errno_name(e),
        out.describe()
    );
}

// ---------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------

/// The two ways zones find their backing dirs (DESIGN §2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `<config dir>/.sandbox/<zone>`, created on mount.
    Sandboxed,
    /// `<tmp>/direct/<zone>`, absolute in the config, created by the fixture.
    Direct,
}

/// Where a zone's backing dir lives, relative to the fixture's temp dir.
pub fn backing_rel(mode: Mode, zone: &str) -> String {
    match mode {
        Mode::Sandboxed => format!(".sandbox/{zone}"),
        Mode::Direct => format!("direct/{zone}"),
    }
}

/// A project config declaring `zones` as `(name, flow-map body)`; the body
/// is the rest of the zone spec after `path`, e.g. `"mode: ro"`.
/// Direct mode uses the `{TMP}` placeholder for absolute paths.
pub fn zones_yaml(mode: Mode, zones: &[(&str, &str)]) -> String {
    let mut y = String::from("sandbox:\n");
    match mode {
        Mode::Sandboxed => y.push_str("  mode: sandboxed\n  root: .sandbox\n"),
        Mode::Direct => y.push_str("  mode: direct\n"),
    }
    y.push_str("  zones:\n");
    for (name, spec) in zones {
        let path = match mode {
            Mode::Sandboxed => format!("./{name}"),
            Mode::Direct => format!("\"{{TMP}}/direct/{name}\""),
        };
        let sep = if spec.is_empty() { "" } else { ", " };
        y.push_str(&format!("    {name}: {{ path: {path}{sep}{spec} }}\n"));
    }
    y
}

/// Builder for a test mount: config, workers, backing files, mountpoint.
pub struct Setup {
    tmp: TempDir,
    root: PathBuf,
    yaml: Option<String>,
    workers: Vec<String>,
    args: Vec<String>,
    backing: BTreeMap<String, PathBuf>,
    cwd: Option<PathBuf>,
    mnt: PathBuf,
    create_mnt: bool,
    config_rel: String,
    /// Leave out [`default_mount_args`] (tests of approvals themselves).
    asking: bool,
    env: Vec<(String, String)>,
}

impl Setup {
    /// A fixture whose config is `yaml` with `{TMP}` replaced by the temp
    /// dir's absolute path. Zones not registered with [`Setup::backing_dir`]
    /// are assumed at `<tmp>/.sandbox/<zone>`.
    pub fn new(yaml: &str) -> Self {
        let tmp = tempfile::Builder::new()
            .prefix("zonemount-test.")
            .tempdir()
            .expect("create temp dir");
        // Canonical, so it matches /proc/mounts even if TMPDIR is a symlink.
        let root = fs::canonicalize(tmp.path()).expect("canonicalize temp dir");
        let yaml = yaml.replace("{TMP}", &root.to_string_lossy());
        let mnt = root.join("mnt");
        Setup {
            tmp,
            root,
            yaml: Some(yaml),
            workers: Vec::new(),
            args: Vec::new(),
            backing: BTreeMap::new(),
            cwd: None,
            mnt,
            create_mnt: true,
            config_rel: "project.yaml".to_string(),
            asking: false,
            env: Vec::new(),
        }
    }

    /// A fixture with no config file and no `--config` (cwd defaults).
    pub fn without_config() -> Self {
        let mut s = Setup::new("");
        s.yaml = None;
        s
    }

    /// A project of `zones` in `mode` (see [`zones_yaml`]); direct-mode
    /// backing dirs are created, sandboxed ones are left to the mount.
    pub fn zones(mode: Mode, zones: &[(&str, &str)]) -> Self {
        let mut s = Setup::new(&zones_yaml(mode, zones));
        for (name, _) in zones {
            let rel = backing_rel(mode, name);
            if mode == Mode::Direct {
                fs::create_dir_all(s.root.join(&rel)).expect("create direct backing dir");
            }
            s.backing.insert((*name).to_string(), s.root.join(rel));
        }
        s
    }

    /// The temp dir (canonical path).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Register `zone`'s backing dir as `<tmp>/rel` (or absolute `rel`).
    pub fn backing_dir(mut self, zone: &str, rel: &str) -> Self {
        let p = self.root.join(rel);
        self.backing.insert(zone.to_string(), p);
        self
    }

    /// Path of `rel` inside `zone`'s backing dir.
    pub fn backing(&self, zone: &str, rel: &str) -> PathBuf {
        backing_path(&self.root, &self.backing, zone, rel)
    }

    /// Append worker files (`--worker`), applied in order.
    pub fn with_workers(mut self, workers: &[&str]) -> Self {
        self.workers.extend(workers.iter().map(|w| w.to_string()));
        self
    }

    /// One more command-line argument before the mountpoint.
    pub fn arg(mut self, a: &str) -> Self {
        self.args.push(a.to_string());
        self
    }

    /// An environment variable for `zonemount mount` (and, through the
    /// guard, for [`TestMount::zonemount`]).
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// Run the mount from this directory (default: the temp dir).
    pub fn cwd(mut self, dir: &Path) -> Self {
        self.cwd = Some(dir.to_path_buf());
        self
    }

    /// Mount on `<tmp>/rel` instead of `<tmp>/mnt`; `create` makes it.
    pub fn mountpoint(mut self, rel: &str, create: bool) -> Self {
        self.mnt = self.root.join(rel);
        self.create_mnt = create;
        self
    }

    /// Mount without [`default_mount_args`]: `ask` really waits for a
    /// decision (give `--approval-timeout` to bound it).
    pub fn asking(mut self) -> Self {
        self.asking = true;
        self
    }

    /// Write the config as `<tmp>/rel` instead of `<tmp>/project.yaml`.
    pub fn config_at(mut self, rel: &str) -> Self {
        self.config_rel = rel.to_string();
        self
    }

    /// Pre-create a file (and its parents) in `zone`'s backing dir.
    pub fn file(self, zone: &str, rel: &str, content: impl AsRef<[u8]>) -> Self {
        let p = self.backing(zone, rel);
        fs::create_dir_all(p.parent().expect("parent")).expect("create backing parents");
        fs::write(&p, content).expect("write backing file");
        self
    }

    /// Pre-create a directory (and parents) in `zone`'s backing dir.
    pub fn dir(self, zone: &str, rel: &str) -> Self {
        fs::create_dir_all(self.backing(zone, rel)).expect("create backing dir");
        self
    }

    /// Pre-create a symlink in `zone`'s backing dir.
    pub fn symlink(self, zone: &str, rel: &str, target: &str) -> Self {
        let p = self.backing(zone, rel);
        fs::create_dir_all(p.parent().expect("parent")).expect("create backing parents");
        std::os::unix::fs::symlink(target, &p).expect("create backing symlink");
        self
    }

    /// Write config and workers, run `zonemount mount`, and return its
    /// output plus a guard — without waiting for the mount to appear.
    pub fn mount_command_only(self) -> (Out, TestMount) {
        let Setup {
            tmp,
            root,
            yaml,
            workers,
            args,
            backing,
            cwd,
            mnt,
            create_mnt,
            config_rel,
            asking,
            env,
        } = self;
        if create_mnt {
            fs::create_dir_all(&mnt).expect("create mountpoint");
        }
        let mut argv: Vec<OsString> = vec!["mount".into()];
        let config = yaml.map(|y| {
            let p = root.join(&config_rel);
            fs::create_dir_all(p.parent().expect("parent")).expect("create config dir");
            fs::write(&p, y).expect("write config");
            p
        });
        if let Some(c) = &config {
            argv.push("--config".into());
            argv.push(c.into());
        }
        for (i, w) in workers.iter().enumerate() {
            let p = root.join(format!("worker{i}.worker"));
            fs::write(&p, w).expect("write worker");
            argv.push("--worker".into());
            argv.push(p.into());
        }
        if !asking {
            argv.extend(default_mount_args().iter().map(OsString::from));
        }
        argv.extend(args.iter().map(OsString::from));
        argv.push(mnt.clone().into());
        let cwd = cwd.unwrap_or_else(|| root.clone());
        let guard = TestMount {
            tmp,
            root,
            mnt,
            backing,
            cwd: cwd.clone(),
            tried_mount: true,
            env: env.clone(),
        };
        let mut guard = guard;
        let out = run(
            Command::new(BIN)
                .args(&argv)
                .current_dir(&cwd)
                .envs(env.iter().map(|(k, v)| (k, v))),
            Duration::from_secs(30),
        );
        // A refused mount needs no `zonemount unmount` (Drop still checks
        // /proc/mounts in case it mounted anyway).
        guard.tried_mount = out.success();
        (out, guard)
    }

    /// Like [`Setup::mount_command_only`], then, on exit 0, poll
    /// `/proc/mounts` until the mountpoint is live (bounded).
    pub fn try_mount(self) -> (Out, TestMount) {
        let (out, guard) = self.mount_command_only();
        if out.success() {
            wait_mounted(&guard.mnt);
        }
        (out, guard)
    }

    /// Mount, or panic with the binary's output.
    #[track_caller]
    pub fn mount(self) -> TestMount {
        let (out, guard) = self.try_mount();
        assert!(out.success(), "zonemount mount failed: {}", out.describe());
        assert!(
            guard.is_mounted(),
            "zonemount mount exited 0 but {} is not in /proc/mounts after {MOUNT_TIMEOUT:?}",
            guard.mnt.display()
        );
        guard
    }
}

fn backing_path(root: &Path, map: &BTreeMap<String, PathBuf>, zone: &str, rel: &str) -> PathBuf {
    let base = map
        .get(zone)
        .cloned()
        .unwrap_or_else(|| root.join(".sandbox").join(zone));
    if rel.is_empty() { base } else { base.join(rel) }
}

/// A live (or attempted) mount; unmounts its own mountpoint on drop.
pub struct TestMount {
    tmp: TempDir,
    root: PathBuf,
    pub mnt: PathBuf,
    backing: BTreeMap<String, PathBuf>,
    cwd: PathBuf,
    tried_mount: bool,
    env: Vec<(String, String)>,
}

impl TestMount {
    /// Mount a project config (see [`Setup::new`]); panics on failure.
    #[track_caller]
    pub fn new(yaml: &str) -> Self {
        Setup::new(yaml).mount()
    }

    /// The fixture's temp dir (config lives at `<root>/project.yaml`).
    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn mountpoint(&self) -> &Path {
        &self.mnt
    }

    /// `rel` inside the mount (a path a worker would use).
    pub fn path(&self, rel: &str) -> PathBuf {
        if rel.is_empty() {
            self.mnt.clone()
        } else {
            self.mnt.join(rel)
        }
    }

    /// `rel` inside `zone`'s backing dir on the host.
    pub fn backing(&self, zone: &str, rel: &str) -> PathBuf {
        backing_path(&self.root, &self.backing, zone, rel)
    }

    pub fn is_mounted(&self) -> bool {
        is_mounted(&self.mnt)
    }

    /// `sh -c cmd` with cwd the mount's root: (status, stdout, stderr).
    pub fn sh(&self, cmd: &str) -> (ExitStatus, String, String) {
        sh_at(&self.mnt, cmd, &[]).into_tuple()
    }

    /// `sh -c cmd` with cwd `rel` inside the mount, extra env.
    pub fn sh_in(&self, rel: &str, cmd: &str, env: &[(&str, &str)]) -> Out {
        sh_at(&self.path(rel), cmd, env)
    }

    /// `zonemount ARGS...` from the mount's cwd, with the mount's env.
    pub fn zonemount(&self, args: &[&str]) -> Out {
        run(
            Command::new(BIN)
                .args(args)
                .current_dir(&self.cwd)
                .envs(self.env.iter().map(|(k, v)| (k, v))),
            Duration::from_secs(30),
        )
    }

    /// `zonemount unmount` on this mountpoint, as a test step.
    pub fn unmount(&mut self) -> Out {
        let out = run(
            Command::new(BIN)
                .arg("unmount")
                .arg(&self.mnt)
                .current_dir(&self.cwd),
            Duration::from_secs(30),
        );
        if out.success() {
            self.tried_mount = false;
        }
        out
    }
}

impl Drop for TestMount {
    fn drop(&mut self) {
        let clean = cleanup_mount(&self.mnt, self.tried_mount);
        if !clean && !std::thread::panicking() {
            panic!(
                "{} is still mounted after unmount and umount -l",
                self.mnt.display()
            );
        }
    }
}

/// A `zonemount mount --foreground` child; on drop, SIGTERM, then kill,
/// then clean its mountpoint.
pub struct Foreground {
    pub child: Child,
    pub mnt: PathBuf,
    pub stdout: fs::File,
    pub stderr: fs::File,
}

impl Foreground {
    /// Start `zonemount mount --foreground --config CONFIG MNT` (plus
    /// `extra` args) from `cwd`.
    pub fn spawn(cwd: &Path, config: Option<&Path>, extra: &[&str], mnt: &Path) -> Self {
        let stdout = tempfile::tempfile().expect("tempfile");
        let stderr = tempfile::tempfile().expect("tempfile");
        let mut cmd = Command::new(BIN);
        cmd.arg("mount").arg("--foreground");
        if let Some(c) = config {
            cmd.arg("--config").arg(c);
        }
        cmd.args(default_mount_args())
            .args(extra)
            .arg(mnt)
            .current_dir(cwd)
            .env("LC_ALL", "C")
            .stdin(Stdio::null())
            .stdout(stdout.try_clone().expect("clone"))
            .stderr(stderr.try_clone().expect("clone"));
        let child = cmd.spawn().expect("spawn zonemount mount --foreground");
        Foreground {
            child,
            mnt: mnt.to_path_buf(),
            stdout,
            stderr,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn output(&self) -> (String, String) {
        (
            read_back(self.stdout.try_clone().expect("clone")),
            read_back(self.stderr.try_clone().expect("clone")),
        )
    }
}

impl Drop for Foreground {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = try_run(
                Command::new("kill")
                    .arg("-TERM")
                    .arg(self.child.id().to_string()),
                Duration::from_secs(5),
            );
            if wait_child(&mut self.child, Duration::from_secs(10)).is_none() {
                eprintln!("harness: foreground daemon ignored SIGTERM; killed");
            }
        }
        cleanup_mount(&self.mnt, false);
    }
}

// ---------------------------------------------------------------------------
// Small utilities
// ---------------------------------------------------------------------------

/// Sorted names in a directory.
pub fn names(dir: &Path) -> io::Result<Vec<String>> {
    let mut v = fs::read_dir(dir)?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<io::Result<Vec<_>>>()?;
    v.sort();
    Ok(v)
}

/// Sorted `&str` list → `Vec<String>`, for comparing with [`names`].
pub fn sorted(v: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = v.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

/// Whether anything (even a dangling symlink) exists at `p`.
pub fn exists_nofollow(p: &Path) -> bool {
    fs::symlink_metadata(p).is_ok()
}

/// FNV-1a 64: enough to compare large contents in messages.
pub fn fnv1a(data: &[u8], mut h: u64) -> u64 {
    for b in data {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}
pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a of a whole file, read in 1 MiB chunks.
pub fn file_hash(p: &Path) -> io::Result<(u64, u64)> {
    let mut f = fs::File::open(p)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut h = FNV_OFFSET;
    let mut len = 0u64;
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            return Ok((h, len));
        }
        h = fnv1a(&buf[..n], h);
        len += n as u64;
    }
}

/// Both-modes test generator: for each `name`, a module `name` with
/// `sandboxed` and `direct` tests calling `name(Mode)`.
#[macro_export]
macro_rules! both_modes {
    ($($name:ident),* $(,)?) => { $(
        mod $name {
            #[test]
            fn sandboxed() {
                super::$name($crate::common::Mode::Sandboxed)
            }
            #[test]
            fn direct() {
                super::$name($crate::common::Mode::Direct)
            }
        }
    )* };
}

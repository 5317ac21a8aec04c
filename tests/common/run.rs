//! Running commands to completion, bounded: [`Out`] and the helpers that run
//! the binary under test, `sh -c` scripts and cleanup tools within a time
//! limit, with `LC_ALL=C` and output captured in temp files, never pipes.

use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_zonemount");
/// Default bound for any command a test runs.
pub const CMD_TIMEOUT: Duration = Duration::from_secs(120);

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

/// Everything written to `f`, a captured stdout/stderr temp file.
pub(super) fn read_back(mut f: fs::File) -> String {
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

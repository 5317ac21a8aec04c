//! The command line: parse, run one command, map every failure to an exit
//! status (0 success, 1 runtime failure, 2 bad usage or configuration) and a
//! one-line message.
//!
//! `mount` detaches by re-running this binary as `mount --foreground
//! --notify-ready`: the daemon reports readiness (or its error) as one line
//! on its stdout, which the parent reads before it returns.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::config::{self, LoadOptions, ZoneTable};
use crate::mount::{self, MountSpec, Record, Unmounted};

#[derive(Debug, Parser)]
#[command(
    name = "zonemount",
    version,
    about = "Mount policed zones of host directories for AI workers"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Mount the zones at MOUNTPOINT; returns once the mount is live.
    Mount(MountArgs),
    /// Unmount MOUNTPOINT and wait for its daemon to exit.
    Unmount {
        /// Detach now even if busy; the mount goes when its last user does.
        #[arg(long)]
        lazy: bool,
        mountpoint: PathBuf,
    },
    /// Print the effective zone table without mounting.
    Derive(ConfigArgs),
}

#[derive(Debug, Args, Clone)]
struct ConfigArgs {
    /// Project config (default: ./zonemount.yaml if present, else the
    /// embedded default: rw zones `cache` and `workspace` under ./.sandbox).
    #[arg(long, value_name = "F")]
    config: Option<PathBuf>,
    /// A worker declaration; repeat for parent → child → grandchild.
    #[arg(long, value_name = "F")]
    worker: Vec<PathBuf>,
    /// Allow zones at or around ~/.ssh, ~/.aws and other sensitive roots.
    #[arg(long)]
    allow_sensitive_roots: bool,
}

#[derive(Debug, Args, Clone)]
struct MountArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Stay attached; SIGTERM or SIGINT unmounts.
    #[arg(long)]
    foreground: bool,
    /// Deny every `ask` at once (the only behaviour until approvals exist).
    #[arg(long)]
    no_approvals: bool,
    /// Seconds the kernel may cache names and attributes.
    #[arg(long, value_name = "SECS", default_value_t = 1.0)]
    cache_ttl: f64,
    /// Internal: report readiness on stdout (used by the detaching parent).
    #[arg(long, hide = true)]
    notify_ready: bool,
    mountpoint: PathBuf,
}

/// A failure with its exit status.
#[derive(Debug)]
struct Failure {
    code: u8,
    msg: String,
}

impl Failure {
    fn new(code: u8, msg: impl Into<String>) -> Self {
        Failure {
            code,
            msg: msg.into(),
        }
    }
}

impl From<config::ConfigError> for Failure {
    fn from(e: config::ConfigError) -> Self {
        Failure::new(2, e.to_string())
    }
}

impl From<mount::MountError> for Failure {
    fn from(e: mount::MountError) -> Self {
        Failure::new(e.exit_code(), e.to_string())
    }
}

/// Entry point of the binary.
pub fn run() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    let result = match cli.cmd {
        Cmd::Mount(a) if a.foreground => foreground(&a),
        Cmd::Mount(a) => detach(&a),
        Cmd::Unmount { lazy, mountpoint } => unmount(&mountpoint, lazy),
        Cmd::Derive(c) => derive(&c),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("zonemount: {}", f.msg);
            ExitCode::from(f.code)
        }
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

fn cwd() -> Result<PathBuf, Failure> {
    std::env::current_dir()
        .map_err(|e| Failure::new(1, format!("cannot read the current directory: {e}")))
}

/// Load the project config and apply each worker in turn.
fn zone_table(c: &ConfigArgs) -> Result<ZoneTable, Failure> {
    let opts = LoadOptions::from_host(c.allow_sensitive_roots);
    let mut table = config::load_project(c.config.as_deref(), &cwd()?, &opts)?;
    for w in &c.worker {
        let decl = config::load_worker(w)?;
        table = config::derive(&table, &decl)?;
    }
    Ok(table)
}

fn derive(c: &ConfigArgs) -> Result<(), Failure> {
    let table = zone_table(c)?;
    print!("{}", table.render());
    Ok(())
}

fn unmount(path: &Path, lazy: bool) -> Result<(), Failure> {
    match mount::unmount(path, lazy) {
        Ok(Unmounted::Done) => Ok(()),
        Ok(Unmounted::NotMounted) => {
            eprintln!(
                "zonemount: note: {} is not mounted; nothing to do",
                path.display()
            );
            Ok(())
        }
        Ok(Unmounted::DaemonLingers(pid)) => Err(Failure::new(
            1,
            format!(
                "{} is unmounted but its daemon (pid {pid}) has not exited after 10 s",
                path.display()
            ),
        )),
        Err(e) => Err(Failure::new(1, e.to_string())),
    }
}

/// Absolute form of a path argument, for the re-executed daemon.
fn abs(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// Start the daemon in the background and wait for its readiness line.
fn detach(a: &MountArgs) -> Result<(), Failure> {
    // The daemon checks this too; checking first gives the real cause even
    // where a missing /dev would already stop the daemon from starting.
    if !Path::new("/dev/fuse").exists() {
        return Err(mount::MountError::NoFuse.into());
    }
    let exe = std::env::current_exe()
        .map_err(|e| Failure::new(1, format!("cannot find the zonemount binary: {e}")))?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("mount").arg("--foreground").arg("--notify-ready");
    if let Some(c) = &a.config.config {
        cmd.arg("--config").arg(abs(c));
    }
    for w in &a.config.worker {
        cmd.arg("--worker").arg(abs(w));
    }
    if a.config.allow_sensitive_roots {
        cmd.arg("--allow-sensitive-roots");
    }
    if a.no_approvals {
        cmd.arg("--no-approvals");
    }
    cmd.arg("--cache-ttl").arg(a.cache_ttl.to_string());
    cmd.arg(abs(&a.mountpoint));
    let log = match std::env::var_os("ZONEMOUNT_LOG_FILE") {
        Some(p) => std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&p)
            .map(Stdio::from)
            .map_err(|e| Failure::new(1, format!("cannot open ZONEMOUNT_LOG_FILE: {e}")))?,
        None => Stdio::null(),
    };
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(log);
    let mut child = cmd
        .spawn()
        .map_err(|e| Failure::new(1, format!("cannot start the mount daemon: {e}")))?;
    let Some(out) = child.stdout.take() else {
        return Err(Failure::new(1, "the mount daemon has no status pipe"));
    };
    let mut line = String::new();
    let _ = BufReader::new(out).read_line(&mut line);
    let line = line.trim_end();
    if line == "READY" {
        return Ok(());
    }
    if let Some(rest) = line.strip_prefix("ERROR ") {
        let (code, msg) = rest.split_once(' ').unwrap_or(("1", rest));
        let _ = child.wait();
        return Err(Failure::new(code.parse().unwrap_or(1), msg));
    }
    let status = child.wait();
    Err(Failure::new(
        1,
        format!(
            "the mount daemon exited before the mount was live ({status:?}); set ZONEMOUNT_LOG_FILE=PATH to see its log"
        ),
    ))
}

/// Mount and serve in this process until unmounted or signalled.
fn foreground(a: &MountArgs) -> Result<(), Failure> {
    if a.notify_ready {
        // Leave the caller's session and terminal behind.
        let _ = rustix::process::setsid();
    }
    match serve(a) {
        Ok(()) => Ok(()),
        Err(f) if a.notify_ready => {
            let mut out = std::io::stdout();
            let _ = writeln!(out, "ERROR {} {}", f.code, f.msg);
            let _ = out.flush();
            Err(f)
        }
        Err(f) => Err(f),
    }
}

fn serve(a: &MountArgs) -> Result<(), Failure> {
    let table = zone_table(&a.config)?;
    config::prepare_backing(&table)?;
    let mountpoint = mount::preflight(&a.mountpoint, &table)?;
    if !(a.cache_ttl.is_finite() && a.cache_ttl >= 0.0) {
        return Err(Failure::new(
            2,
            "--cache-ttl must be a number of seconds >= 0",
        ));
    }
    let spec = MountSpec {
        mountpoint: mountpoint.clone(),
        ttl: Duration::from_secs_f64(a.cache_ttl),
        threads: 4,
        config: a.config.config.clone(),
        workers: a.config.worker.clone(),
    };
    let session = mount::start(&mountpoint, &table, &spec, None)?;
    let record = Record {
        mountpoint: mountpoint.clone(),
        pid: std::process::id(),
        config: spec.config.clone(),
        workers: spec.workers.clone(),
        started: mount::now_secs(),
    };
    if let Err(e) = mount::write_record(&record) {
        tracing::warn!("cannot write the mount record: {e}");
    }
    let signal_mp = mountpoint.clone();
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ])
    .map_err(|e| Failure::new(1, format!("cannot install signal handlers: {e}")))?;
    std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            tracing::info!(sig, "signal: unmounting");
            if let Err(e) = mount::detach(&signal_mp, false) {
                tracing::warn!("unmount failed ({e}); detaching lazily");
                if let Err(e) = mount::detach(&signal_mp, true) {
                    tracing::error!("lazy unmount failed too: {e}");
                }
            }
        }
    });
    if a.notify_ready {
        let mut out = std::io::stdout();
        let _ = writeln!(out, "READY");
        let _ = out.flush();
        if let Ok(null) = std::fs::File::open("/dev/null") {
            let _ = rustix::stdio::dup2_stdout(&null);
        }
    }
    let _ = std::env::set_current_dir("/");
    let result = session.run();
    mount::remove_record(&mountpoint);
    result.map_err(|e| Failure::new(1, format!("the FUSE session ended with an error: {e}")))
}

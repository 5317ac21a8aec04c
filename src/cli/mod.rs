//! The command line: parse, run one command, map every failure to an exit
//! status (0 success, 1 runtime failure, 2 bad usage or configuration) and a
//! one-line message.
//!
//! `mount` detaches by re-running this binary as `mount --foreground
//! --notify-ready`: the daemon reports readiness (or its error) as one line
//! on its stdout, which the parent reads before it returns.

mod approvals;
mod check;
mod columns;
mod derive;
mod doctor;
mod help;
mod helper_form;
mod list;
mod manuals;
mod mount_cmd;
mod review;
mod run;
mod sd_notify;
mod stage_cmd;
mod stages;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::config::{self, LoadOptions, Tightening, ZoneTable};
use crate::mount::{self, session};

#[derive(Debug, Parser)]
#[command(
    name = "zonemount",
    version,
    long_version = LONG_VERSION,
    about = "Mount policed zones of host directories for AI workers"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// `--version`: the version and what this build does (kept true by
/// tests/manuals.rs against the constants it names).
const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    "\nfeatures: fuse.zonemount by mount(2) as root and by fusermount3 as a user, \
     a watcher that unmounts a dead daemon's mount, FUSE passthrough (Linux 6.9+, root), \
     kernel file handles (root) or reopen by name, approvals with control protocol v1, \
     audit ledger, run --isolate (bubblewrap), staged zones (overlayfs, as root or in a user \
     namespace) with changes/commit/discard, FUSE over io_uring: no"
);

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Mount the zones at MOUNTPOINT; returns once the mount is live.
    #[command(after_help = help::MOUNT)]
    Mount(Box<MountArgs>),
    /// Unmount MOUNTPOINT and wait for its daemon to exit.
    #[command(after_help = help::UNMOUNT)]
    Unmount {
        /// Detach now even if busy; the mount goes when its last user does.
        #[arg(long)]
        lazy: bool,
        /// Instead of one MOUNTPOINT: clean up every stale mount `list` shows.
        #[arg(long, conflicts_with_all = ["mountpoint", "lazy"])]
        stale: bool,
        /// The mount's directory (exactly that path is unmounted).
        #[arg(required_unless_present = "stale")]
        mountpoint: Option<PathBuf>,
    },
    /// Mount on a fresh temporary directory, run CMD there, always tear down.
    Run(run::RunArgs),
    /// Show every zonemount mount on this host, stale ones marked.
    #[command(after_help = help::LIST)]
    List {
        /// One JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Print the effective zone table without mounting.
    #[command(after_help = help::DERIVE)]
    Derive(derive::DeriveArgs),
    /// Show a mount's zones, settings, pending requests and counters.
    #[command(after_help = help::STATUS)]
    Status(approvals::StatusArgs),
    /// List, watch and decide a mount's approval requests.
    #[command(subcommand, after_help = help::APPROVALS)]
    Approvals(approvals::ApprovalsCmd),
    /// Would a worker's read, write or delete of PATH be allowed (exit 0),
    /// asked (3) or refused (4), and why? Touches nothing.
    #[command(after_help = help::CHECK)]
    Check(check::CheckArgs),
    /// What the staged zones hold: each added, modified, deleted and
    /// renamed path (with --diff, unified diffs of text files).
    #[command(after_help = help::CHANGES)]
    Changes(stage_cmd::ChangesArgs),
    /// Apply staged changes to the backing dirs, each file atomically; a
    /// change where the host changed something meanwhile (its path, a dir
    /// above it, anything inside a dir it removes) is a conflict (exit 6)
    /// unless --force.
    #[command(after_help = help::COMMIT)]
    Commit(stage_cmd::CommitArgs),
    /// Drop staged changes: the mount shows the backing dirs' files again.
    #[command(after_help = help::DISCARD)]
    Discard(stage_cmd::DiscardArgs),
    /// Walk the staged changes like `git add -p`: commit, discard or keep
    /// each file or directory (after a look at its diff), or the rest.
    #[command(after_help = help::REVIEW)]
    Review(review::ReviewArgs),
    /// The stage dirs under the state dir: the mountpoint each was made
    /// for, whether a mount holds it, its changes, size and last change;
    /// --prune removes those no mount holds that keep no change and no
    /// checkpoint.
    #[command(after_help = help::STAGES)]
    Stages(stages::StagesArgs),
    /// Record the staged zones' state now as a checkpoint (no file is
    /// copied) and print its id. Not a decision: a worker may take one.
    #[command(after_help = help::CHECKPOINT)]
    Checkpoint(stage_cmd::CheckpointArgs),
    /// List the staged zones' checkpoints: id, time, label, and how many
    /// paths changed since the one before.
    #[command(after_help = help::CHECKPOINTS)]
    Checkpoints(stage_cmd::CheckpointsArgs),
    /// Make the staged zones (or only PATHs) what they were at checkpoint
    /// ID, at once for the live worker. Not a decision: a worker may.
    #[command(after_help = help::REWIND)]
    Rewind(stage_cmd::RewindArgs),
    /// What this machine allows (FUSE, fusermount3, privilege, passthrough,
    /// io_uring, file handles, the --isolate sandbox, state dirs) and what
    /// zonemount does about each; exit 0 when a mount can be made here, 5
    /// when not.
    #[command(after_help = help::DOCTOR)]
    Doctor {
        /// One JSON object instead of lines.
        #[arg(long)]
        json: bool,
    },
    /// Print a shell completion script (e.g. `zonemount completions bash >
    /// /etc/bash_completion.d/zonemount`).
    #[command(after_help = help::COMPLETIONS)]
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Print the zonemount(1) man page, or write it, one page per command
    /// and zonemount.yaml(5) (the config format) into DIR.
    #[command(after_help = help::MAN)]
    Man {
        /// Write zonemount.1, zonemount-mount.1, ..., zonemount.yaml.5 here
        /// instead.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

#[derive(Debug, Args, Clone)]
pub(crate) struct ConfigArgs {
    /// Project config (default: ./zonemount.yaml if present, else the
    /// embedded default: rw zones `cache` and `workspace` under ./.sandbox).
    #[arg(long, value_name = "F")]
    pub(crate) config: Option<PathBuf>,
    /// A zone from the command line: an existing directory PATH
    /// (relative to the current directory), read-only unless `:rw` (or
    /// `:staged`: writable, with the changes kept in a stage until
    /// committed). Repeatable. Added to the --config file's zones (a name in both is
    /// an error); with no --config and no ./zonemount.yaml, these are the
    /// only zones (nothing is created).
    #[arg(long, value_name = "NAME=PATH[:ro|rw|staged]")]
    pub(crate) zone: Vec<String>,
    /// A preset instead of a config file (same as `--config preset:NAME`):
    /// read-only, workspace-write, full, sandbox, permissive-sandbox,
    /// auto-approve, code-unit; paths are taken from the current
    /// directory; the README has what each allows.
    #[arg(long, value_name = "NAME", conflicts_with = "config",
          value_parser = manuals::PresetName, hide_possible_values = true)]
    pub(crate) preset: Option<String>,
    /// Allow the presets that let a worker change everything unasked
    /// (full, auto-approve).
    #[arg(long)]
    pub(crate) danger: bool,
    /// A worker declaration; repeat for parent → child → grandchild.
    #[arg(long, value_name = "F")]
    pub(crate) worker: Vec<PathBuf>,
    /// Allow zones at or around ~/.ssh, ~/.aws and other sensitive roots.
    #[arg(long)]
    pub(crate) allow_sensitive_roots: bool,
}

#[derive(Debug, Args, Clone)]
pub(crate) struct MountArgs {
    #[command(flatten)]
    pub(crate) config: ConfigArgs,
    /// Stay attached; SIGTERM or SIGINT unmounts.
    #[arg(long)]
    pub(crate) foreground: bool,
    /// Deny every `ask` at once.
    #[arg(long)]
    pub(crate) no_approvals: bool,
    /// Let users other than the mounting one in (root, or
    /// `user_allow_other` in /etc/fuse.conf, needed).
    #[arg(long)]
    pub(crate) allow_other: bool,
    /// Only this user (repeatable) besides the mounting user and root;
    /// implies --allow-other.
    #[arg(long, value_name = "UID")]
    pub(crate) allow_uid: Vec<u32>,
    /// With --foreground on a terminal: show each request and answer it
    /// with a key.
    #[arg(long)]
    pub(crate) prompt: bool,
    /// Append the audit ledger (JSON Lines) to F (made 0600; an existing
    /// F must be this user's alone, and not a symlink).
    #[arg(long, value_name = "F")]
    pub(crate) audit_log: Option<PathBuf>,
    /// The control socket (default: in the runtime directory).
    #[arg(long, value_name = "SOCK")]
    pub(crate) control: Option<PathBuf>,
    /// Where staged zones keep their changes until committed (default:
    /// a directory per mountpoint under ~/.local/state/zonemount/stages,
    /// or /var/lib/zonemount/stages for root). One mount at a time.
    #[arg(long, value_name = "DIR")]
    pub(crate) stage_dir: Option<PathBuf>,
    /// How many checkpoints a staged zone keeps: past N the two oldest
    /// layers are merged, the oldest checkpoint dropped (default: the
    /// project file's sandbox.max_checkpoints, else 32).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub(crate) max_checkpoints: Option<u16>,
    /// Tell the worker of each refusal, one line in words, in F (a file it
    /// can read, made 0644; an existing F must be this user's alone, and
    /// not a symlink; `run` makes one and names it in $ZONEMOUNT_REFUSALS).
    #[arg(long, value_name = "F")]
    pub(crate) refusal_log: Option<PathBuf>,
    /// Write the refusal log's paths as under DIR instead of the
    /// mountpoint (where the worker sees the mount, e.g. / in a sandbox).
    #[arg(long, value_name = "DIR", requires = "refusal_log")]
    pub(crate) refusal_log_root: Option<PathBuf>,
    /// Set by `run --isolate` for its own daemon: the zones it bound
    /// straight from their backing dirs (comma-separated, maybe none), so
    /// `status` says which zone went which way.
    #[arg(long, value_name = "ZONES", hide = true)]
    pub(crate) isolate_direct: Option<String>,
    /// Seconds a request waits for a decision before it is denied.
    #[arg(long, value_name = "SECS", default_value_t = session::DEFAULT_APPROVAL_TIMEOUT.as_secs_f64())]
    pub(crate) approval_timeout: f64,
    /// Run CMD (no shell) whenever a request starts waiting; the request
    /// is in its environment (ZONEMOUNT_ID, ZONEMOUNT_PATH, ...) and on
    /// its stdin as JSON. At most 16 run at once; each is ended when its
    /// request ends, and at the unmount.
    #[arg(long, value_name = "CMD")]
    pub(crate) on_ask: Option<String>,
    /// Seconds the kernel may cache names (found or missing) and
    /// attributes of rw zones; ro zones get 6 times as long. A change made
    /// on the host side shows through the mount after at most this long
    /// (0: at once, at the cost of a round trip per lookup).
    #[arg(long, value_name = "SECS", default_value_t = session::DEFAULT_CACHE_TTL.as_secs_f64())]
    pub(crate) cache_ttl: f64,
    /// Move file data through the daemon even where kernel passthrough
    /// (Linux 6.9, CAP_SYS_ADMIN) could bypass it.
    #[arg(long)]
    pub(crate) no_passthrough: bool,
    /// Where file data goes through the daemon (an ordinary user,
    /// --no-passthrough): let the kernel gather writes in its page cache
    /// and send them in 1 MiB blocks. Only for backing dirs the host
    /// leaves alone while mounted: the kernel then keeps each cached
    /// file's size and times itself, and a host-side change to them is not
    /// seen through the mount until the file drops out of the kernel's
    /// cache.
    #[arg(long)]
    pub(crate) writeback_cache: bool,
    /// On a mount whose zones are all read-only with no rule that needs
    /// the daemon (no hide, no read approvals, no suffix or size limits,
    /// nothing staged; and no --allow-other, --audit-log or
    /// --refusal-log): mount it read-only and let the kernel open files
    /// and directories itself, so a warm read costs no request (warm
    /// `grep -r`: about native speed). The mount then answers EROFS where
    /// it would say EACCES (a change at its root) or EXDEV (a rename or
    /// link between zones), and file data goes through the page cache,
    /// not passthrough. Where the mount is not eligible, it is mounted as
    /// usual and says why.
    #[arg(long)]
    pub(crate) kernel_opens: bool,
    /// Serve FUSE over io_uring (one ring per CPU) instead of /dev/fuse:
    /// as root, first turn on the fuse module's enable_uring (it then
    /// stays on for every FUSE mount made after, until reboot). Off by
    /// default: it was not ahead of /dev/fuse on every workload here
    /// (docs/performance.md).
    /// ZONEMOUNT_IO_URING=1 in the environment asks for it too.
    #[arg(long, conflicts_with = "no_io_uring")]
    pub(crate) io_uring: bool,
    /// Serve through /dev/fuse reads and writes (the default), even with
    /// ZONEMOUNT_IO_URING=1.
    #[arg(long)]
    pub(crate) no_io_uring: bool,
    /// After answering a request, a /dev/fuse thread keeps looking for the
    /// next one for this many microseconds before it sleeps (one thread,
    /// the reader, while the others wait in the daemon until its request
    /// in hand takes 1 ms; never on a thread that may run on one CPU only,
    /// or under a cgroup CPU quota below its CPUs; it stops by itself while
    /// requests come further apart). A request that finds a thread awake
    /// skips the wake-up of an idle CPU, which costs tens of microseconds
    /// on VMs. A root daemon also keeps idle CPUs polling while requests
    /// come within this window of each other, on either transport (a CPU
    /// latency request on /dev/cpu_dma_latency; the caller's wake-up is
    /// then at once too). 0 turns both off. At most 1000.
    #[arg(long, value_name = "MICROSECONDS", default_value_t = crate::fuse::BUSY_POLL_DEFAULT.as_micros() as u64)]
    pub(crate) busy_poll: u64,
    /// FUSE threads serving requests.
    #[arg(long, value_name = "N", default_value_t = session::DEFAULT_THREADS, hide = true)]
    pub(crate) threads: usize,
    /// Say nothing on success. Otherwise one line on stderr names the
    /// config and the backing dirs used (and which were created), and one
    /// more for each place a worker asked for something looser than its
    /// parent has.
    #[arg(short, long)]
    pub(crate) quiet: bool,
    /// Mount even on a directory that holds files: they are hidden (not
    /// touched) until the unmount. Without it such a mountpoint is refused.
    #[arg(long)]
    pub(crate) nonempty: bool,
    /// Internal: report readiness on stdout (used by the detaching parent).
    #[arg(long, hide = true)]
    pub(crate) notify_ready: bool,
    /// Internal: the mount of a `zonemount run` task, whose init registers
    /// the worker's boundary once (the control op `worker`); other mounts
    /// refuse that op.
    #[arg(long, hide = true)]
    pub(crate) run_task: bool,
    /// An existing, empty directory to mount on (see --nonempty).
    pub(crate) mountpoint: PathBuf,
}

/// A failure with its exit status.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: u8,
    pub(crate) msg: String,
}

impl Failure {
    pub(crate) fn new(code: u8, msg: impl Into<String>) -> Self {
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

/// The command line as the commands see it: the process's, or its
/// rewrite from the `mount.fuse3` helper form (see `helper_form`).
static ARGV: std::sync::OnceLock<Vec<std::ffi::OsString>> = std::sync::OnceLock::new();

/// The effective command line (what `mount` hands on to its daemon).
pub(crate) fn argv() -> Vec<std::ffi::OsString> {
    ARGV.get()
        .cloned()
        .unwrap_or_else(|| std::env::args_os().collect())
}

/// Entry point of the binary.
pub fn run() -> ExitCode {
    // `run`'s keeper and init: before anything else (no thread may start).
    if let Some(code) = run::dispatch_worker(&std::env::args_os().collect::<Vec<_>>()) {
        return ExitCode::from(code);
    }
    // `run --isolate`'s start of bwrap as root: before any thread starts.
    if let Some(code) =
        crate::isolate::private_binds::dispatch(&std::env::args_os().collect::<Vec<_>>())
    {
        return ExitCode::from(code);
    }
    let argv = match helper_form::rewrite(std::env::args_os().collect()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("zonemount: {e}");
            return ExitCode::from(2);
        }
    };
    let _ = ARGV.set(argv.clone());
    let cli = Cli::parse_from(run::presplit(argv));
    init_logging();
    if let Err(f) = registry_checked(&cli.cmd) {
        eprintln!("zonemount: {}", f.msg);
        return ExitCode::from(f.code);
    }
    let result = match cli.cmd {
        Cmd::Mount(a) if a.foreground => mount_cmd::foreground(&a),
        Cmd::Mount(a) => mount_cmd::detach(&a),
        Cmd::Unmount {
            mountpoint: Some(mountpoint),
            lazy,
            ..
        } => mount_cmd::unmount(&mountpoint, lazy),
        Cmd::Unmount { .. } => list::unmount_stale(),
        Cmd::Run(a) => match run::run(a) {
            Ok(code) => return ExitCode::from(code),
            Err(f) => Err(f),
        },
        Cmd::List { json } => list::list(json),
        Cmd::Derive(a) => derive::derive(&a),
        Cmd::Status(a) => approvals::status(&a),
        Cmd::Approvals(c) => approvals::run(&c),
        Cmd::Completions { shell } => manuals::completions(shell),
        Cmd::Man { dir } => manuals::man(dir.as_deref()),
        Cmd::Stages(a) => match stages::stages(&a) {
            Ok(code) => return ExitCode::from(code),
            Err(f) => Err(f),
        },
        Cmd::Doctor { json } => match doctor::doctor(json) {
            Ok(code) => return ExitCode::from(code),
            Err(f) => Err(f),
        },
        Cmd::Check(a) => match check::check(&a) {
            Ok(code) => return ExitCode::from(code),
            Err(f) => Err(f),
        },
        Cmd::Changes(a) => match stage_cmd::changes(&a) {
            Ok(code) => return ExitCode::from(code),
            Err(f) => Err(f),
        },
        Cmd::Commit(a) => match stage_cmd::commit(&a) {
            Ok(code) => return ExitCode::from(code),
            Err(f) => Err(f),
        },
        Cmd::Discard(a) => match stage_cmd::discard(&a) {
            Ok(code) => return ExitCode::from(code),
            Err(f) => Err(f),
        },
        Cmd::Review(a) => match review::review(&a) {
            Ok(code) => return ExitCode::from(code),
            Err(f) => Err(f),
        },
        Cmd::Checkpoint(a) => match stage_cmd::checkpoint(&a) {
            Ok(code) => return ExitCode::from(code),
            Err(f) => Err(f),
        },
        Cmd::Checkpoints(a) => match stage_cmd::checkpoints(&a) {
            Ok(code) => return ExitCode::from(code),
            Err(f) => Err(f),
        },
        Cmd::Rewind(a) => match stage_cmd::rewind(&a) {
            Ok(code) => return ExitCode::from(code),
            Err(f) => Err(f),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            // A failure may quote what a worker named (a path a commit
            // could not apply): nothing in it draws on the terminal.
            eprintln!("zonemount: {}", crate::text::message(&f.msg));
            ExitCode::from(f.code)
        }
    }
}

/// Commands that keep or read mount records (and connect to the sockets
/// they name) refuse a runtime directory that isn't this user's own:
/// another user who made `/tmp/zonemount-UID` first could swap records and
/// sockets there and answer the CLI. (`status`, `approvals` and the stage
/// commands check as they connect to a mount.)
fn registry_checked(cmd: &Cmd) -> Result<(), Failure> {
    match cmd {
        Cmd::Mount(_) | Cmd::Unmount { .. } | Cmd::Run(_) | Cmd::List { .. } | Cmd::Check(_) => {
            crate::mount::check_runtime_dir()
                .map(drop)
                .map_err(|e| Failure::new(1, e.to_string()))
        }
        _ => Ok(()),
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(log_colors())
        .try_init();
}

/// Colour in log lines only on a terminal, and never with `NO_COLOR` set
/// (to anything non-empty, as no-color.org says). Nothing else zonemount
/// prints has colour.
fn log_colors() -> bool {
    use std::io::IsTerminal;
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    !no_color && std::io::stderr().is_terminal()
}

fn cwd() -> Result<PathBuf, Failure> {
    std::env::current_dir()
        .map_err(|e| Failure::new(1, format!("cannot read the current directory: {e}")))
}

/// Load the project config and apply each worker in turn.
pub(crate) fn zone_table(c: &ConfigArgs) -> Result<ZoneTable, Failure> {
    zone_table_in(c, &cwd()?)
}

/// [`zone_table`] as if run in `cwd`.
pub(crate) fn zone_table_in(c: &ConfigArgs, cwd: &std::path::Path) -> Result<ZoneTable, Failure> {
    zone_table_noted(c, cwd).map(|(table, _)| table)
}

/// [`zone_table_in`], with every tightening of a worker's request (for
/// `derive` and `mount` to note on stderr).
pub(crate) fn zone_table_noted(
    c: &ConfigArgs,
    cwd: &std::path::Path,
) -> Result<(ZoneTable, Vec<Tightening>), Failure> {
    let opts = LoadOptions::from_host(c.allow_sensitive_roots);
    let zones = c
        .zone
        .iter()
        .map(|z| config::CliZone::parse(z))
        .collect::<Result<Vec<_>, _>>()?;
    let file = match &c.preset {
        Some(name) => Some(PathBuf::from(format!("{}{name}", config::presets::PREFIX))),
        None => c.config.clone(),
    };
    if let Some(Ok(p)) = file.as_deref().and_then(config::presets::named) {
        if p.danger && !c.danger {
            return Err(Failure::new(
                2,
                format!(
                    "preset '{}' lets a worker change everything in its zones unasked; refused (add --danger to mount it)",
                    p.name
                ),
            ));
        }
    }
    let mut table = config::load_project_with(file.as_deref(), cwd, &zones, &opts)?;
    let mut notes = Vec::new();
    for w in &c.worker {
        let decl = config::load_worker(w)?;
        let (next, tightened) = config::derive_noted(&table, &decl)?;
        table = next;
        notes.extend(tightened);
    }
    Ok((table, notes))
}

/// Where a table's zones came from, as `mount`, `derive`, `status` and
/// `list` say it: the file (or the embedded default), and the `--zone`s.
pub(crate) fn config_origin(source: Option<&std::path::Path>, zones: &[String]) -> String {
    let names: Vec<&str> = zones
        .iter()
        .map(|z| z.split_once('=').map_or(z.as_str(), |(n, _)| n))
        .collect();
    match (source, names.is_empty()) {
        (Some(p), true) => p.display().to_string(),
        (Some(p), false) => format!("{} plus --zone {}", p.display(), names.join(", ")),
        (None, true) => "embedded default".to_owned(),
        (None, false) => format!("command line (--zone {})", names.join(", ")),
    }
}

/// A tightening as `derive` and `mount` say it on stderr.
pub(crate) fn tightening_note(t: &Tightening) -> String {
    format!("note: {t}")
}

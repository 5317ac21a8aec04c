//! `zonemount run [mount options] [run options] -- CMD ARGS...`: mount on a
//! fresh temporary directory, run CMD inside, and always tear down.
//!
//! The order is what makes "always" hold:
//! 1. everything that can be refused is checked first (mount options, by
//!    `zonemount mount`'s own parser so both accept the same; the zone
//!    table; `--user`; `--env`; bwrap) — nothing exists yet;
//! 2. SIGTERM/SIGINT/SIGHUP are caught *before* mounting, so a signal at any
//!    later point is an event here, never a death that leaks the mount;
//! 3. the temp dir and the mount are owned by [`TaskMount`], whose `Drop`
//!    unmounts (lazily if something still holds it), waits for the daemon
//!    and removes the dir — on every path out, panics included;
//! 4. CMD runs in its own session and process group; a waiter thread reports its exit
//!    without reaping it, so the rest of its group can be killed while the
//!    leader's pid (= the group id) cannot be reused.
//!
//! What `Drop` can't cover: a SIGKILL of `zonemount run` itself. The mount
//! and temp dir then stay; `zonemount list` shows them and
//! `scripts/teardown.sh` or `zonemount unmount` removes them.

use std::ffi::{OsStr, OsString};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use clap::{Args, Parser};
use rustix::process::{Pid, Signal, WaitId, WaitIdOptions};

use super::{Cli, Cmd, Failure, MountArgs, mount_cmd, zone_table};
use crate::config::{Access, ZoneTable};
use crate::isolate::{self, EnvSpec, HostFacts, Isolation, ZoneBind};
use crate::mount::{self, Unmounted};

/// How long CMD's group gets between SIGTERM (timeout, or SIGTERM/SIGHUP
/// to `run`) and SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(5);

#[derive(Debug, Args)]
#[command(
    override_usage = "zonemount run [MOUNT OPTIONS] [--isolate] [--network] [--env NAME[=VALUE]]... \
[--timeout SECS] [--user UID[:GID]] -- CMD ARGS...",
    after_help = "Mount options are those of `zonemount mount` (--config F, \
--worker F, --no-approvals, --cache-ttl SECS, ...), without the mountpoint: \
run mounts on a fresh directory under $TMPDIR (or /tmp). CMD runs with its \
working directory in the first rw zone (or the mount's root). Exit status: \
CMD's (128+N when it died of signal N); 1 or 2 when run itself failed \
before CMD started; 126/127 when CMD could not be executed/found."
)]
pub(crate) struct RunArgs {
    /// Run CMD under bubblewrap: the zones at /<zone>, system dirs
    /// read-only, private /tmp, no network, scrubbed environment.
    #[arg(long)]
    pub(crate) isolate: bool,
    /// With --isolate: keep the host's network.
    #[arg(long, requires = "isolate")]
    pub(crate) network: bool,
    /// Pass NAME (the host's value) or NAME=VALUE to CMD; under --isolate
    /// the only way past the scrubbed environment. Repeatable.
    #[arg(long, value_name = "NAME[=VALUE]")]
    pub(crate) env: Vec<OsString>,
    /// Kill CMD's whole process group after SECS (SIGTERM, then SIGKILL
    /// 5 s later).
    #[arg(long, value_name = "SECS")]
    pub(crate) timeout: Option<f64>,
    /// Run CMD as this user (root only); implies --allow-uid UID.
    #[arg(long, value_name = "UID[:GID]")]
    pub(crate) user: Option<String>,
    /// Mount options, each moved here by [`presplit`] (clap alone can't
    /// tell them from run options: it doesn't know their arity).
    #[arg(long = "mount-arg", hide = true, allow_hyphen_values = true)]
    pub(crate) mount_options: Vec<OsString>,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub(crate) command: Vec<OsString>,
}

/// Run options that are flags.
const RUN_FLAGS: &[&str] = &["--isolate", "--network", "-h", "--help"];
/// Run options that take a value.
const RUN_VALUED: &[&str] = &["--env", "--timeout", "--user"];

/// Rewrite `zonemount run ARGS... -- CMD...` so clap can parse it: every
/// argument before `--` that is not a run option (or a run option's value)
/// is a mount option, passed on as `--mount-arg X`. Other commands are
/// returned unchanged.
pub(crate) fn presplit(argv: Vec<OsString>) -> Vec<OsString> {
    if argv.get(1).is_none_or(|a| a != "run") {
        return argv;
    }
    let mut out: Vec<OsString> = argv[..2].to_vec();
    let mut rest = argv.into_iter().skip(2);
    while let Some(a) = rest.next() {
        let s = a.to_string_lossy();
        let is_valued = RUN_VALUED.contains(&s.as_ref());
        let is_run_opt = RUN_FLAGS.contains(&s.as_ref())
            || RUN_VALUED
                .iter()
                .any(|o| s.strip_prefix(o).is_some_and(|r| r.starts_with('=')));
        if a == "--" {
            out.push(a);
            out.extend(rest);
            break;
        } else if is_valued {
            out.push(a);
            out.extend(rest.next());
        } else if is_run_opt {
            out.push(a);
        } else {
            out.push("--mount-arg".into());
            out.push(a);
        }
    }
    out
}

/// A uid and gid to run CMD as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct User {
    uid: u32,
    gid: u32,
}

/// Parse `UID[:GID]`; without GID, the user's primary group from
/// `passwd` (one line of it per entry), or the uid itself.
fn parse_user(spec: &str, passwd: &str) -> Result<User, Failure> {
    let bad = || {
        Failure::new(
            2,
            format!("--user {spec:?}: give a numeric UID or UID:GID (e.g. --user 1000:1000)"),
        )
    };
    let (u, g) = match spec.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (spec, None),
    };
    let uid: u32 = u.parse().map_err(|_| bad())?;
    let gid = match g {
        Some(g) => g.parse().map_err(|_| bad())?,
        None => passwd
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                (f.len() > 3 && f[2].parse() == Ok(uid)).then(|| f[3].parse().ok())?
            })
            .next()
            .unwrap_or(uid),
    };
    Ok(User { uid, gid })
}

/// Everything `run` needs, checked before anything is created.
struct Plan {
    /// Arguments for the daemon (before the mountpoint).
    daemon_args: Vec<OsString>,
    table: ZoneTable,
    isolate: Option<(PathBuf, HostFacts)>,
    network: bool,
    env: Vec<EnvSpec>,
    timeout: Option<Duration>,
    user: Option<User>,
    command: Vec<OsString>,
}

/// Parse `args` as `zonemount mount ARGS PLACEHOLDER`.
fn parse_mount_options(args: &[OsString]) -> Result<MountArgs, String> {
    let argv = ["zonemount", "mount"]
        .iter()
        .map(OsString::from)
        .chain(args.iter().cloned())
        .chain([OsString::from("/zonemount-run-placeholder")]);
    match Cli::try_parse_from(argv) {
        Ok(Cli { cmd: Cmd::Mount(m) }) => Ok(m),
        Ok(_) => Err("not a mount command".into()),
        Err(e) => {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("").trim();
            Err(first.trim_start_matches("error: ").to_string())
        }
    }
}

fn parse_timeout(secs: Option<f64>) -> Result<Option<Duration>, Failure> {
    match secs {
        None => Ok(None),
        Some(s) if s.is_finite() && s > 0.0 => Ok(Some(Duration::from_secs_f64(s))),
        Some(_) => Err(Failure::new(2, "--timeout must be a number of seconds > 0")),
    }
}

/// `--user SPEC`, which only root may give.
fn check_user(spec: &str) -> Result<User, Failure> {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let u = parse_user(spec, &passwd)?;
    if !rustix::process::geteuid().is_root() {
        return Err(Failure::new(
            2,
            "--user needs root: only root can run CMD as another user",
        ));
    }
    Ok(u)
}

/// The daemon's arguments: the mount options, plus what lets `--user`'s
/// uid into the mount (DESIGN §6).
fn daemon_args(mount_options: &[OsString], user: Option<User>) -> Result<Vec<OsString>, Failure> {
    let mut args = mount_options.to_vec();
    let Some(u) = user else {
        return Ok(args);
    };
    if !args.iter().any(|x| x == "--allow-other") {
        args.push("--allow-other".into());
    }
    args.push("--allow-uid".into());
    args.push(u.uid.to_string().into());
    parse_mount_options(&args).map_err(|e| {
        Failure::new(
            2,
            format!(
                "--user needs the mount options --allow-other and --allow-uid, which this zonemount refuses: {e}"
            ),
        )
    })?;
    Ok(args)
}

impl Plan {
    fn new(a: RunArgs) -> Result<Plan, Failure> {
        let m = parse_mount_options(&a.mount_options)
            .map_err(|e| Failure::new(2, format!("run: mount options: {e}")))?;
        if m.foreground || m.notify_ready {
            return Err(Failure::new(
                2,
                "run: --foreground is not a run option (run always supervises the mount itself)",
            ));
        }
        let timeout = parse_timeout(a.timeout)?;
        let user = a.user.as_deref().map(check_user).transpose()?;
        let env = a
            .env
            .iter()
            .map(|e| EnvSpec::parse(e).map_err(|e| Failure::new(2, e.to_string())))
            .collect::<Result<Vec<_>, _>>()?;
        let daemon_args = daemon_args(&a.mount_options, user)?;
        let table = zone_table(&m.config)?;
        let isolate = if a.isolate {
            let bwrap = isolate::find_bwrap().ok_or_else(|| {
                Failure::new(
                    1,
                    "--isolate needs bubblewrap, and `bwrap` is not on PATH: install it (apt-get install bubblewrap)",
                )
            })?;
            Some((bwrap, HostFacts::read()))
        } else {
            None
        };
        let plan = Plan {
            daemon_args,
            table,
            isolate,
            network: a.network,
            env,
            timeout,
            user,
            command: a.command,
        };
        // Refuse a zone named like a system dir now, before mounting.
        if plan.isolate.is_some() {
            plan.command_at(Path::new("/zonemount-run-placeholder"))?;
        }
        Ok(plan)
    }

    fn zone_binds(&self) -> Vec<ZoneBind> {
        self.table
            .zones
            .iter()
            .map(|z| ZoneBind {
                name: z.name.clone(),
                writable: z.policy.access == Access::Rw,
                backing: z.backing.clone(),
            })
            .collect()
    }

    /// The command to spawn for a mount at `mp`.
    fn command_at(&self, mp: &Path) -> Result<Command, Failure> {
        let zones = self.zone_binds();
        let mut cmd = match &self.isolate {
            Some((bwrap, host)) => self.isolated(mp, &zones, bwrap, host)?,
            None => self.plain(mp, &zones)?,
        };
        if let Some(u) = self.user {
            // std sets the gid, clears the supplementary groups, then sets
            // the uid, in the child before exec.
            cmd.gid(u.gid).uid(u.uid);
        }
        Ok(cmd)
    }

    /// bwrap, in a process group of its own (it makes CMD's session).
    fn isolated(
        &self,
        mp: &Path,
        zones: &[ZoneBind],
        bwrap: &Path,
        host: &HostFacts,
    ) -> Result<Command, Failure> {
        let home = isolate::home_in_sandbox(zones);
        let env = isolate::sandbox_env(|n| std::env::var_os(n), &self.env, &home);
        let iso = Isolation {
            mountpoint: mp,
            zones,
            network: self.network,
            env: &env,
            command: &self.command,
        };
        let args = isolate::bwrap_args(&iso, host).map_err(|e| Failure::new(2, e.to_string()))?;
        let mut c = Command::new(bwrap);
        c.args(args).env_clear().current_dir("/").process_group(0);
        Ok(c)
    }

    /// CMD itself, in the first rw zone (or the mount's root), with the
    /// caller's environment plus `--env NAME=VALUE`.
    fn plain(&self, mp: &Path, zones: &[ZoneBind]) -> Result<Command, Failure> {
        let Some((prog, args)) = self.command.split_first() else {
            return Err(Failure::new(2, "no command to run: give it after `--`"));
        };
        // A session of its own, through util-linux `setsid` (std has no
        // stable setsid): CMD is then a group leader we can signal as a
        // whole, and the terminal is not its controlling one, so reading it
        // doesn't stop CMD (SIGTTIN) as it would in a background process
        // group. `setsid` execs CMD in place (it only forks when already a
        // group leader, which is why no process_group(0) here), so the pid
        // is CMD's.
        let mut c = match isolate::find_on_path("setsid") {
            Some(setsid) => {
                let mut c = Command::new(setsid);
                c.arg("--").arg(prog);
                c
            }
            None => {
                let mut c = Command::new(prog);
                c.process_group(0);
                c
            }
        };
        c.args(args);
        let cwd = zones
            .iter()
            .find(|z| z.writable)
            .map_or_else(|| mp.to_path_buf(), |z| mp.join(&z.name));
        c.current_dir(cwd);
        for e in &self.env {
            if let Some(v) = &e.value {
                c.env(&e.name, v);
            }
        }
        Ok(c)
    }
}

/// What the supervising loop hears about.
enum Event {
    Signal(i32),
    Exited,
}

/// Catch the signals `run` forwards; each becomes an [`Event`].
fn catch_signals(tx: Sender<Event>) -> Result<(), Failure> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP])
        .map_err(|e| Failure::new(1, format!("cannot install signal handlers: {e}")))?;
    std::thread::spawn(move || {
        for sig in signals.forever() {
            if tx.send(Event::Signal(sig)).is_err() {
                break;
            }
        }
    });
    Ok(())
}

/// The temp dir and the mount on it; dropping it tears both down.
struct TaskMount {
    dir: PathBuf,
    mounted: bool,
}

impl TaskMount {
    /// A fresh 0755 directory under $TMPDIR (so other uids can reach the
    /// mount inside it), canonical like the daemon's mountpoint.
    fn create_dir() -> Result<TaskMount, Failure> {
        let fail = |e: std::io::Error| {
            Failure::new(
                1,
                format!(
                    "cannot create a temporary mountpoint in {}: {e} (set TMPDIR to a writable directory)",
                    std::env::temp_dir().display()
                ),
            )
        };
        let base = std::env::temp_dir().canonicalize().map_err(fail)?;
        let dir = tempfile::Builder::new()
            .prefix("zonemount-run.")
            .tempdir_in(base)
            .map_err(fail)?
            .keep();
        let task = TaskMount {
            dir,
            mounted: false,
        };
        std::fs::set_permissions(&task.dir, std::fs::Permissions::from_mode(0o755))
            .map_err(fail)?;
        Ok(task)
    }

    fn mount(&mut self, args: &[OsString]) -> Result<(), Failure> {
        let mut args = args.to_vec();
        args.push(self.dir.clone().into());
        // Set first: if the daemon mounted but its report got lost, Drop
        // still looks.
        self.mounted = true;
        mount_cmd::spawn_daemon(args)
    }

    /// Unmount (lazily when busy), wait for the daemon, remove the dir.
    /// Problems are reported on stderr; there is no one left to return
    /// them to.
    fn teardown(&mut self) {
        if std::mem::take(&mut self.mounted) {
            let done = match mount::unmount(&self.dir, false) {
                Err(mount::UnmountError::Busy(_)) => {
                    eprintln!(
                        "zonemount: run: {} is still in use (a process CMD left behind?); detaching lazily",
                        self.dir.display()
                    );
                    mount::unmount(&self.dir, true)
                }
                other => other,
            };
            match done {
                Ok(Unmounted::Done | Unmounted::NotMounted) => {}
                Ok(Unmounted::DaemonLingers(pid)) => eprintln!(
                    "zonemount: run: {} is unmounted but its daemon (pid {pid}) is still running",
                    self.dir.display()
                ),
                Err(e) => eprintln!("zonemount: run: {e}"),
            }
        }
        if let Err(e) = std::fs::remove_dir(&self.dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                eprintln!("zonemount: run: cannot remove {}: {e}", self.dir.display());
            }
        }
    }
}

impl Drop for TaskMount {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// Deny the mount's pending approval requests before CMD is killed
/// (DESIGN §4: a caller waiting on a request can't die until it is
/// answered).
fn deny_pending(mountpoint: &Path) {
    let n = super::mount_cmd::deny_pending(mountpoint);
    if n > 0 {
        tracing::info!(denied = n, "denied pending requests before stopping CMD");
    }
}

/// Signal CMD's process group (its pid is the group's id).
fn signal_group(pgid: Pid, sig: i32) {
    let Some(s) = Signal::from_named_raw(sig) else {
        return;
    };
    // No such group yet: `setsid` has not made it (the signal came right
    // after the spawn), so the process itself gets it. Once the group
    // existed, its leader stays in it as a zombie until reaped, so ESRCH
    // never means "gone" while we hold the unreaped leader.
    if let Err(rustix::io::Errno::SRCH) = rustix::process::kill_process_group(pgid, s) {
        let _ = rustix::process::kill_process(pgid, s);
    }
}

/// Block until `pid` has exited, leaving it a zombie (not reaped).
fn wait_exit_unreaped(pid: Pid, tx: Sender<Event>) {
    std::thread::spawn(move || {
        // Exited, or can't wait (ECHILD): either way, report; EINTR: again.
        while let Err(rustix::io::Errno::INTR) = rustix::process::waitid(
            WaitId::Pid(pid),
            WaitIdOptions::EXITED | WaitIdOptions::NOWAIT,
        ) {}
        let _ = tx.send(Event::Exited);
    });
}

/// Run CMD to its end, forwarding signals, enforcing the timeout; returns
/// its status.
fn supervise(
    mut child: Child,
    rx: &Receiver<Event>,
    tx: Sender<Event>,
    timeout: Option<Duration>,
    mp: &Path,
) -> ExitStatus {
    let pid = Pid::from_child(&child);
    wait_exit_unreaped(pid, tx);
    let mut deadline = timeout.map(|t| Instant::now() + t);
    let mut kill_at: Option<Instant> = None;
    loop {
        let next = [deadline, kill_at].into_iter().flatten().min();
        let ev = match next {
            Some(t) => rx.recv_timeout(t.saturating_duration_since(Instant::now())),
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        let now = Instant::now();
        match ev {
            Ok(Event::Exited) | Err(RecvTimeoutError::Disconnected) => break,
            Ok(Event::Signal(sig)) => {
                if sig != libc::SIGINT {
                    deny_pending(mp);
                    kill_at.get_or_insert(now + KILL_GRACE);
                }
                signal_group(pid, sig);
            }
            Err(RecvTimeoutError::Timeout) => {
                if kill_at.is_some_and(|k| now >= k) {
                    signal_group(pid, libc::SIGKILL);
                    kill_at = None;
                } else if deadline.is_some_and(|d| now >= d) {
                    deadline = None;
                    if let Some(t) = timeout {
                        eprintln!(
                            "zonemount: run: CMD timed out after {} s; stopping its process group",
                            t.as_secs_f64()
                        );
                    }
                    deny_pending(mp);
                    signal_group(pid, libc::SIGTERM);
                    kill_at.get_or_insert(now + KILL_GRACE);
                }
            }
        }
    }
    // The leader is a zombie, so its pid still names the group: whatever
    // CMD left running in it goes now, before it is reaped.
    signal_group(pid, libc::SIGKILL);
    match child.wait() {
        Ok(st) => st,
        Err(_) => ExitStatus::from_raw(1 << 8),
    }
}

/// `run`'s exit status for CMD's.
fn exit_code(st: ExitStatus) -> u8 {
    match (st.code(), st.signal()) {
        (Some(c), _) => u8::try_from(c & 0xff).unwrap_or(1),
        (None, Some(sig)) => u8::try_from((128 + sig) & 0xff).unwrap_or(1),
        (None, None) => 1,
    }
}

fn spawn_failure(prog: &OsStr, e: &std::io::Error) -> Failure {
    let code = if e.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    };
    Failure::new(
        code,
        format!("run: cannot execute {}: {e}", Path::new(prog).display()),
    )
}

pub(crate) fn run(a: RunArgs) -> Result<u8, Failure> {
    let plan = Plan::new(a)?;
    let (tx, rx) = mpsc::channel();
    catch_signals(tx.clone())?;
    let mut task = TaskMount::create_dir()?;
    task.mount(&plan.daemon_args)?;
    // A signal while mounting: stop here, tearing down.
    if let Ok(Event::Signal(sig)) = rx.try_recv() {
        return Ok(exit_code(ExitStatus::from_raw(sig)));
    }
    let mut cmd = plan.command_at(&task.dir)?;
    let child = cmd
        .spawn()
        .map_err(|e| spawn_failure(cmd.get_program(), &e))?;
    let status = supervise(child, &rx, tx, plan.timeout, &task.dir);
    task.teardown();
    Ok(exit_code(status))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn parse(args: &[&str]) -> RunArgs {
        let argv = ["zonemount", "run"]
            .iter()
            .chain(args)
            .map(OsString::from)
            .collect();
        match Cli::try_parse_from(presplit(argv)) {
            Ok(Cli { cmd: Cmd::Run(r) }) => r,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    fn strs(v: &[OsString]) -> Vec<&str> {
        v.iter().map(|s| s.to_str().unwrap()).collect()
    }

    #[test]
    fn run_options_and_mount_options_are_told_apart() {
        let r = parse(&[
            "--config",
            "p.yaml",
            "--isolate",
            "--worker",
            "w",
            "--env",
            "A=1",
            "--no-approvals",
            "--timeout",
            "3",
            "--",
            "sh",
            "-c",
            "echo --isolate",
        ]);
        assert!(r.isolate);
        assert_eq!(strs(&r.env), ["A=1"]);
        assert_eq!(r.timeout, Some(3.0));
        assert_eq!(
            strs(&r.mount_options),
            ["--config", "p.yaml", "--worker", "w", "--no-approvals"]
        );
        assert_eq!(strs(&r.command), ["sh", "-c", "echo --isolate"]);
    }

    #[test]
    fn a_bare_command_needs_no_options() {
        let r = parse(&["--", "true"]);
        assert!(r.mount_options.is_empty());
        assert!(!r.isolate);
        assert_eq!(strs(&r.command), ["true"]);
    }

    #[test]
    fn the_command_is_required() {
        let argv = ["zonemount", "run", "--isolate"]
            .map(OsString::from)
            .to_vec();
        assert!(Cli::try_parse_from(presplit(argv)).is_err());
    }

    #[test]
    fn network_requires_isolate() {
        let argv = ["zonemount", "run", "--network", "--", "true"]
            .map(OsString::from)
            .to_vec();
        assert!(Cli::try_parse_from(presplit(argv)).is_err());
    }

    #[test]
    fn equals_forms_and_other_commands() {
        let r = parse(&["--env=A=1", "--timeout=2", "--config=p", "--", "x"]);
        assert_eq!(strs(&r.env), ["A=1"]);
        assert_eq!(r.timeout, Some(2.0));
        assert_eq!(strs(&r.mount_options), ["--config=p"]);
        let argv: Vec<OsString> = ["zonemount", "mount", "--config", "p", "/m"]
            .map(OsString::from)
            .to_vec();
        assert_eq!(presplit(argv.clone()), argv);
    }

    #[test]
    fn mount_options_are_checked_by_the_mount_parser() {
        let ok =
            parse_mount_options(&["--config".into(), "x".into(), "--no-approvals".into()]).unwrap();
        assert_eq!(ok.config.config, Some(PathBuf::from("x")));
        let e = parse_mount_options(&["--bogus".into()]).unwrap_err();
        assert!(e.contains("--bogus"), "{e}");
        assert!(!e.contains('\n'));
        // A mountpoint is not a mount option here.
        assert!(parse_mount_options(&["/mnt".into()]).is_err());
    }

    #[test]
    fn users_parse() {
        let passwd = "root:x:0:0::/root:/bin/sh\nbob:x:1000:1001::/home/bob:/bin/sh\n";
        assert_eq!(
            parse_user("1000", passwd).unwrap(),
            User {
                uid: 1000,
                gid: 1001
            }
        );
        assert_eq!(
            parse_user("65534:65533", passwd).unwrap(),
            User {
                uid: 65534,
                gid: 65533
            }
        );
        assert_eq!(parse_user("4242", passwd).unwrap().gid, 4242);
        for bad in ["bob", "1000:", ":1", "-1", "1:x"] {
            assert!(parse_user(bad, passwd).is_err(), "{bad}");
        }
    }

    #[test]
    fn exit_codes_follow_the_shell() {
        assert_eq!(exit_code(ExitStatus::from_raw(0)), 0);
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGKILL)), 137);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGSEGV)), 139);
    }
}

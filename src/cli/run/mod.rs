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
//! 4. CMD runs in its own session and process group, and (on the host)
//!    in a PID namespace of its own, under its keeper and an init
//!    (`worker`): nothing inside it may decide the worker's requests. A
//!    waiter thread reports the keeper's exit without reaping it, so the
//!    rest of its group can be killed while the leader's pid (= the group
//!    id) cannot be reused.
//!
//! 5. what `Drop` can't cover, a SIGKILL of `zonemount run` itself, its
//!    watcher (`mount::watch`, forked when the temp dir is made) does:
//!    it SIGKILLs CMD's process group, SIGTERMs the daemon (which denies
//!    what is pending and unmounts; SIGKILL after 10 s, and then the
//!    daemon's own watcher unmounts), and removes the temp dir. CMD and
//!    the daemon announce themselves to the watcher from just before
//!    their exec, so no instant is left between their start and the
//!    watcher knowing them.

mod asks;
mod direct;
mod exec;
mod plan;
mod review;
mod stdio;
mod task;
#[cfg(test)]
mod tests;
mod user;
mod worker;

use plan::Plan;
pub(crate) use plan::presplit;
use task::{Event, TaskMount, catch_signals, exit_code, spawn_failure, supervise};
pub(crate) use worker::dispatch as dispatch_worker;

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::mpsc::{self};
use std::time::Duration;

use clap::Args;

use super::{Failure, mount_cmd};

/// How long CMD's group gets between SIGTERM (timeout, or SIGTERM/SIGHUP
/// to `run`) and SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(5);

#[derive(Debug, Args)]
#[command(
    override_usage = "zonemount run [MOUNT OPTIONS] [--isolate] [--network] [--env NAME[=VALUE]]... \
[--no-direct] [--via-daemon ZONE]... [--timeout SECS] [--user UID[:GID]] [--review] [--commit-on-success] -- CMD ARGS...",
    after_help = "Mount options are those of `zonemount mount` (--config F, \
--zone NAME=PATH[:ro|rw|staged], --preset NAME, --worker F, --no-approvals, --cache-ttl SECS, ...), without the mountpoint: \
run mounts on a fresh directory under $TMPDIR (or /tmp). CMD runs with its \
working directory in the first rw zone (or the mount's root).

Examples:
  zonemount run -- make test
  zonemount run --zone work=.:rw --zone docs=../docs:ro -- make test
  zonemount run --preset workspace-write -- my-agent
  zonemount run --config project.yaml --worker formatter.worker --timeout 600 -- my-agent --task 42
  zonemount run --isolate --env HOME -- sh -c 'ls /'
  zonemount run --zone work=.:staged --review -- my-agent   # review the task's changes before the host sees them

Exit status: CMD's (128+N when it died of signal N; 143/137 after \
--timeout); 127 CMD not found; 126 CMD not executable; 6 with \
--commit-on-success, some staged paths were not committed (conflicts); 1, 2 \
or 5 when run itself failed before CMD started (see `zonemount mount --help`)."
)]
pub(crate) struct RunArgs {
    /// Run CMD under bubblewrap: the zones at /<zone>, system dirs
    /// read-only, private /tmp, no network, scrubbed environment.
    #[arg(long)]
    pub(crate) isolate: bool,
    /// With --isolate: keep the host's network.
    #[arg(long, requires = "isolate")]
    pub(crate) network: bool,
    /// With --isolate: keep every zone on the daemon (by default a zone
    /// whose every rule the kernel enforces by itself is bound straight
    /// from its backing dir).
    #[arg(long, requires = "isolate")]
    pub(crate) no_direct: bool,
    /// With --isolate: keep ZONE on the daemon (e.g. to have its change
    /// report). Repeatable.
    #[arg(long, value_name = "ZONE", requires = "isolate")]
    pub(crate) via_daemon: Vec<String>,
    /// Pass NAME (the host's value) or NAME=VALUE to CMD; under --isolate
    /// or --user the only way past the scrubbed environment. Repeatable.
    #[arg(long, value_name = "NAME[=VALUE]")]
    pub(crate) env: Vec<OsString>,
    /// Kill CMD's whole process group after SECS (SIGTERM, then SIGKILL
    /// 5 s later).
    #[arg(long, value_name = "SECS")]
    pub(crate) timeout: Option<f64>,
    /// Run CMD as this user (root only), with a scrubbed environment
    /// (PATH, LANG, TERM, the user's HOME, USER, LOGNAME, ZONEMOUNT_*, each
    /// --env); implies --allow-uid UID.
    #[arg(long, value_name = "UID[:GID]")]
    pub(crate) user: Option<String>,
    /// With a staged zone: when CMD exits, print its changes and (on a
    /// terminal) walk them as `zonemount review` does: commit, discard or
    /// keep each file or directory, view its diff, rewind to a
    /// checkpoint; without a terminal keep them and print the commands to
    /// finish.
    #[arg(long)]
    pub(crate) review: bool,
    /// With a staged zone: commit its changes when CMD exits 0 (conflicts
    /// are still refused: exit 6, and the stage keeps them).
    #[arg(long)]
    pub(crate) commit_on_success: bool,
    /// Mount options, each moved here by [`presplit`] (clap alone can't
    /// tell them from run options: it doesn't know their arity).
    #[arg(long = "mount-arg", hide = true, allow_hyphen_values = true)]
    pub(crate) mount_options: Vec<OsString>,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub(crate) command: Vec<OsString>,
}

pub(crate) fn run(a: RunArgs) -> Result<u8, Failure> {
    let plan = Plan::new(a)?;
    // Across a boundary, CMD's stdio must not be a way to the host's
    // files (see `stdio`).
    let boundary = plan.isolate.is_some() || plan.user.is_some();
    if boundary {
        stdio::check_outputs()?;
    }
    let (tx, rx) = mpsc::channel();
    catch_signals(tx.clone())?;
    let mut task = TaskMount::create_dir()?;
    let mut daemon_args = plan.daemon_args.clone();
    daemon_args.push("--refusal-log".into());
    daemon_args.push(task.refusals.clone().into());
    if plan.isolate.is_some() {
        // The sandbox sees the zones at /<zone>.
        daemon_args.push("--refusal-log-root".into());
        daemon_args.push("/".into());
        // For `status`: which zones the worker reaches without the daemon.
        let bound: Vec<&str> = (plan.table.zones.iter().zip(&plan.direct))
            .filter(|(_, d)| **d)
            .map(|(z, _)| z.name.as_str())
            .collect();
        daemon_args.push("--isolate-direct".into());
        daemon_args.push(bound.join(",").into());
        if !plan.quiet() {
            for l in direct::lines(&plan.table, &plan.direct, &plan.keep) {
                eprintln!("zonemount: run --isolate: {l}");
            }
        }
    }
    task.mount(&daemon_args)?;
    // A signal while mounting: stop here, tearing down.
    if let Ok(Event::Signal(sig)) = rx.try_recv() {
        return Ok(exit_code(ExitStatus::from_raw(sig)));
    }
    // Opened now, after the mount: bwrap binds them and closes them
    // before CMD runs; ours close once it has started.
    let fds = plan.direct_fds()?;
    let raw: Vec<Option<i32>> = fds
        .iter()
        .map(|f| f.as_ref().map(std::os::fd::AsRawFd::as_raw_fd))
        .collect();
    let mut cmd = plan.command_at(&task.dir, Some(&task.refusals), &raw)?;
    task.watch_group_of(&mut cmd);
    let piped = if boundary {
        stdio::stdin_for_cmd(std::os::fd::AsFd::as_fd(&std::io::stdin()))?
    } else {
        None
    };
    let feed = piped.map(|p| {
        cmd.stdin(p.read);
        p.feed
    });
    let child = cmd
        .spawn()
        .map_err(|e| spawn_failure(cmd.get_program(), &e))?;
    // Our copy of the pipe's read end closes with `cmd`: once CMD is
    // gone, the feed's write fails instead of waiting for a reader.
    drop(cmd);
    if let Some(f) = feed.flatten() {
        f.start();
    }
    drop(fds);
    if !plan.quiet() {
        asks::announce(&task.dir);
    }
    if plan.isolate.is_some() {
        // Said for `status`; the sandbox doesn't hold the socket anyway.
        if let Err(e) = mount_cmd::register_worker(&task.dir, crate::approval::side::Claim::Isolate)
        {
            tracing::warn!("the daemon did not take the worker's boundary: {e}");
        }
    }
    let status = supervise(child, &rx, tx, plan.timeout, &task.dir);
    let (after, code) = review::decide(&task.dir, plan.review, status.success());
    task.teardown();
    review::finish(after);
    Ok(code.unwrap_or_else(|| exit_code(status)))
}

//! Everything `run` can refuse, checked before anything exists: mount
//! options (by `zonemount mount`'s own parser), `--user`, `--env`,
//! `--timeout`, bwrap; and the command line CMD will run with (on the
//! host, through its keeper: `worker`).

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use clap::Parser;

use super::super::{Cli, Cmd, Failure, MountArgs, zone_table};
use super::user::{User, check_user, login_env};
use super::*;
use super::{direct, exec, worker};
use crate::config::{Access, ZoneTable};
use crate::isolate::{self, EnvSpec, HostFacts, Isolation, ZoneBind};

/// Run options that are flags.
pub(super) const RUN_FLAGS: &[&str] = &[
    "--isolate",
    "--network",
    "--review",
    "--commit-on-success",
    "--no-direct",
    "-h",
    "--help",
];
/// Run options that take a value.
pub(super) const RUN_VALUED: &[&str] = &["--env", "--timeout", "--user", "--via-daemon"];

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

/// bwrap's arguments, the sandbox's environment, CMD's cwd in it.
pub(super) type BwrapArgv = (Vec<OsString>, Vec<(OsString, OsString)>, PathBuf);

/// Everything `run` needs, checked before anything is created.
pub(super) struct Plan {
    /// Arguments for the daemon (before the mountpoint).
    pub(super) daemon_args: Vec<OsString>,
    pub(super) table: ZoneTable,
    pub(super) isolate: Option<(PathBuf, HostFacts)>,
    pub(super) network: bool,
    pub(super) env: Vec<EnvSpec>,
    pub(super) timeout: Option<Duration>,
    pub(super) user: Option<User>,
    pub(super) command: Vec<OsString>,
    /// What to do with staged changes when CMD exits.
    pub(super) review: super::review::Wanted,
    /// Under --isolate: what keeps zones on the daemon, and for each zone
    /// of `table` whether it is bound straight from its backing dir.
    pub(super) keep: direct::Keep,
    pub(super) direct: Vec<bool>,
}

impl Plan {
    /// `-q` among the mount options.
    pub(super) fn quiet(&self) -> bool {
        self.daemon_args.iter().any(|a| a == "-q" || a == "--quiet")
    }

    /// Whether `run` says so on stderr when no PID namespace can be made
    /// for CMD: a zone asks or is staged (so a decision is at stake), and
    /// not `-q`.
    pub(super) fn note_without_namespace(&self) -> bool {
        use crate::config::Approval;
        let quiet = self.quiet();
        let at_stake = self.table.zones.iter().any(|z| {
            z.policy.approval.write == Approval::Ask
                || z.policy.approval.delete == Approval::Ask
                || z.policy.staged
        });
        at_stake && !quiet
    }
}

/// Parse `args` as `zonemount mount ARGS PLACEHOLDER`.
pub(super) fn parse_mount_options(args: &[OsString]) -> Result<MountArgs, String> {
    let argv = ["zonemount", "mount"]
        .iter()
        .map(OsString::from)
        .chain(args.iter().cloned())
        .chain([OsString::from("/zonemount-run-placeholder")]);
    match Cli::try_parse_from(argv) {
        Ok(Cli { cmd: Cmd::Mount(m) }) => Ok(*m),
        Ok(_) => Err("not a mount command".into()),
        Err(e) => {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("").trim();
            Err(first.trim_start_matches("error: ").to_string())
        }
    }
}

pub(super) fn parse_timeout(secs: Option<f64>) -> Result<Option<Duration>, Failure> {
    match secs {
        None => Ok(None),
        Some(s) if s.is_finite() && s > 0.0 => Ok(Some(Duration::from_secs_f64(s))),
        Some(_) => Err(Failure::new(2, "--timeout must be a number of seconds > 0")),
    }
}

/// The daemon's arguments: the mount options, plus what lets `--user`'s
/// uid into the mount (DESIGN §6).
pub(super) fn daemon_args(
    mount_options: &[OsString],
    user: Option<User>,
) -> Result<Vec<OsString>, Failure> {
    let mut args = mount_options.to_vec();
    // The task's init registers the worker's boundary; no other mount takes it.
    args.push("--run-task".into());
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
    pub(super) fn new(a: RunArgs) -> Result<Plan, Failure> {
        let m = parse_mount_options(&a.mount_options)
            .map_err(|e| Failure::new(2, format!("run: mount options: {e}")))?;
        if m.refusal_log.is_some() {
            return Err(Failure::new(
                2,
                "run: --refusal-log: run makes the task's refusal log itself and names it to CMD in $ZONEMOUNT_REFUSALS",
            ));
        }
        if m.kernel_opens {
            return Err(Failure::new(
                2,
                "run: --kernel-opens never takes effect under run, which keeps a refusal log (the kernel would refuse changes before the daemon could tell CMD why); under run --isolate a zone no rule keeps on the daemon is bound straight from its backing dir instead",
            ));
        }
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
        if (a.review || a.commit_on_success) && !table.zones.iter().any(|z| z.policy.staged) {
            return Err(Failure::new(
                2,
                format!(
                    "run: {} needs a staged zone (staged: true in the config, or --zone NAME=PATH:staged)",
                    if a.review {
                        "--review"
                    } else {
                        "--commit-on-success"
                    }
                ),
            ));
        }
        let keep = direct::Keep {
            all: a.no_direct,
            zones: a.via_daemon,
            other_user: user.is_some(),
            no_bind_fd: isolate
                .as_ref()
                .is_some_and(|(bwrap, _)| !isolate::bwrap_binds_fds(bwrap)),
            root_worker: user.is_none() && rustix::process::geteuid().is_root(),
        };
        let chosen = direct::chosen(&table, &keep)?;
        let plan = Plan {
            daemon_args,
            direct: if isolate.is_some() {
                chosen
            } else {
                vec![false; table.zones.len()]
            },
            keep,
            table,
            isolate,
            network: a.network,
            env,
            timeout,
            user,
            command: a.command,
            review: super::review::Wanted {
                review: a.review,
                commit_on_success: a.commit_on_success,
            },
        };
        // Refuse a zone named like a system dir now, before mounting.
        if let Some((_, host)) = &plan.isolate {
            let placeholder = Path::new("/zonemount-run-placeholder");
            plan.bwrap_argv(placeholder, &plan.zone_binds(&[]), host, None)?;
        }
        Ok(plan)
    }

    /// The zones as bwrap binds them: `fds[i]`, where given, is zone i's
    /// backing dir opened for a direct bind.
    pub(super) fn zone_binds(&self, fds: &[Option<i32>]) -> Vec<ZoneBind> {
        self.table
            .zones
            .iter()
            .enumerate()
            .map(|(i, z)| ZoneBind {
                name: z.name.clone(),
                writable: z.policy.access == Access::Rw,
                staged: z.policy.staged,
                backing: z.backing.clone(),
                direct: fds.get(i).copied().flatten(),
            })
            .collect()
    }

    /// Under --isolate, the backing dirs of the zones bound straight from
    /// them, opened (one per zone of the table; `None`: through the mount).
    pub(super) fn direct_fds(&self) -> Result<Vec<Option<std::os::fd::OwnedFd>>, Failure> {
        self.table
            .zones
            .iter()
            .zip(&self.direct)
            .map(|(z, bound)| {
                bound
                    .then(|| direct::open_backing(&z.name, &z.backing))
                    .transpose()
            })
            .collect()
    }

    /// The command to spawn for a mount at `mp` (`fds`: see
    /// [`zone_binds`](Self::zone_binds)).
    pub(super) fn command_at(
        &self,
        mp: &Path,
        refusals: Option<&Path>,
        fds: &[Option<i32>],
    ) -> Result<Command, Failure> {
        let zones = self.zone_binds(fds);
        let mut cmd = match &self.isolate {
            Some((bwrap, host)) => self.isolated(mp, &zones, bwrap, host, refusals)?,
            None => {
                let mut c = self.plain(mp, &zones)?;
                if let Some(r) = refusals {
                    c.env("ZONEMOUNT_REFUSALS", r);
                }
                c
            }
        };
        if let (Some(u), Some(_)) = (self.user, &self.isolate) {
            // std sets the gid, clears the supplementary groups, then sets
            // the uid, in the child before exec. (On the host, CMD's
            // keeper does it: it must be root to make the namespace.)
            cmd.gid(u.gid).uid(u.uid);
        }
        Ok(cmd)
    }

    /// bwrap, in a process group of its own (it makes CMD's session).
    pub(super) fn isolated(
        &self,
        mp: &Path,
        zones: &[ZoneBind],
        bwrap: &Path,
        host: &HostFacts,
        refusals: Option<&Path>,
    ) -> Result<Command, Failure> {
        let (args, env, home) = self.bwrap_argv(mp, zones, host, refusals)?;
        // Said in our words now, not by bwrap's execvp: CMD as the sandbox
        // will see it (its PATH, its cwd, the zones at /<zone>).
        if let Some(prog) = self.command.first() {
            let path = env
                .iter()
                .find(|(k, _)| k == "PATH")
                .map(|(_, v)| v.as_os_str());
            exec::check_command(prog, &home, path, &exec::in_sandbox(mp, zones, host))?;
        }
        let straight: Vec<(i32, PathBuf)> = zones
            .iter()
            .filter_map(|z| z.direct.map(|fd| (fd, z.backing.clone())))
            .collect();
        let mut c = if !straight.is_empty() && rustix::process::geteuid().is_root() {
            // Through our hidden command: the straight binds become
            // private clones, which take no mount the host makes later.
            let mut c = Command::new("/proc/self/exe");
            c.args(isolate::private_binds::command_args(
                bwrap, &straight, &args,
            ));
            c
        } else {
            let mut c = Command::new(bwrap);
            c.args(args);
            c
        };
        c.env_clear().current_dir("/").process_group(0);
        Ok(c)
    }

    /// bwrap's arguments for a mount at `mp`, the sandbox's environment and
    /// CMD's working directory in it.
    pub(super) fn bwrap_argv(
        &self,
        mp: &Path,
        zones: &[ZoneBind],
        host: &HostFacts,
        refusals: Option<&Path>,
    ) -> Result<BwrapArgv, Failure> {
        let home = isolate::home_in_sandbox(zones);
        let mut env = isolate::sandbox_env(|n| std::env::var_os(n), &self.env, &home);
        let mut limits = isolate::limits_env(Path::new("/"), zones);
        if refusals.is_some() {
            limits.push((
                "ZONEMOUNT_REFUSALS".into(),
                isolate::REFUSALS_IN_SANDBOX.into(),
            ));
        }
        env.retain(|(n, _)| !limits.iter().any(|(l, _)| l == n));
        env.extend(limits);
        let iso = Isolation {
            mountpoint: mp,
            zones,
            network: self.network,
            env: &env,
            command: &self.command,
            refusals,
        };
        let args = isolate::bwrap_args(&iso, host).map_err(|e| Failure::new(2, e.to_string()))?;
        Ok((args, env, home))
    }

    /// CMD itself, in the first rw zone (or the mount's root), with the
    /// caller's environment plus `--env NAME=VALUE`; under `--user`, with
    /// the environment `--isolate` gives instead ([`Plan::user_env`]).
    pub(super) fn plain(&self, mp: &Path, zones: &[ZoneBind]) -> Result<Command, Failure> {
        let Some(prog) = self.command.first() else {
            return Err(Failure::new(2, "no command to run: give it after `--`"));
        };
        // Through its keeper (`worker`): a session of its own (CMD is then
        // a group leader's group we can signal as a whole, and the
        // terminal is not its controlling one, so reading it doesn't stop
        // CMD with SIGTTIN) and a PID namespace of its own, which no
        // decider inside may leave.
        let mut c = Command::new("/proc/self/exe");
        c.args(worker::keeper_args(
            mp,
            self.user,
            self.note_without_namespace(),
            &self.command,
        ));
        let cwd = zones
            .iter()
            .find(|z| z.writable)
            .map_or_else(|| mp.to_path_buf(), |z| mp.join(&z.name));
        // Said in our words now, not by the keeper once it fails to exec.
        let path = exec::cmd_path(&self.env);
        exec::check_command(prog, &cwd, path.as_deref(), &exec::on_host)?;
        c.current_dir(cwd);
        match self.user {
            // Another user's CMD gets none of ours but what is passed on
            // by name (the keeper and its init, root still, need none: a
            // root's runtime directory is fixed).
            Some(u) => {
                c.env_clear()
                    .envs(user_env(u.uid, |n| std::env::var_os(n), &self.env));
            }
            None => {
                for e in &self.env {
                    if let Some(v) = &e.value {
                        c.env(&e.name, v);
                    }
                }
            }
        }
        c.envs(isolate::limits_env(mp, zones));
        Ok(c)
    }
}

/// CMD's environment under `--user UID` on the host: what `--isolate`
/// keeps (`PATH`, `LANG`, `TERM` from `host`), `HOME`, `USER` and
/// `LOGNAME` of that user (see [`login_env`]), then each `--env` (a later
/// one wins). `run` adds zonemount's own `ZONEMOUNT_*` after.
pub(super) fn user_env(
    uid: u32,
    host: impl Fn(&str) -> Option<OsString>,
    extra: &[EnvSpec],
) -> Vec<(OsString, OsString)> {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let (home, login) = login_env(uid, &passwd);
    let mut all: Vec<EnvSpec> = login
        .into_iter()
        .map(|(name, value)| EnvSpec {
            name,
            value: Some(value.into()),
        })
        .collect();
    all.extend(extra.iter().cloned());
    isolate::sandbox_env(host, &all, &home)
}

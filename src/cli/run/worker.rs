//! CMD's PID namespace: the two hidden commands `run` starts CMD through
//! when it runs on the host (not under `--isolate`, where bubblewrap makes
//! the namespace).
//!
//! `zonemount __worker --mount MP [--user UID:GID] [--note] -- CMD...`
//! (the *keeper*, in `run`'s namespace): makes a session of its own (as
//! util-linux `setsid` did, so CMD can read the terminal without being
//! stopped and `run` can signal the whole group), unshares a PID
//! namespace (in a user namespace mapping only our uid and gid when not
//! root), then starts the init and waits for it: its exit status is CMD's
//! (128+N when CMD died of signal N). Where no namespace can be made it
//! says so on stderr (with `--note`), tells the mount's daemon, and execs
//! CMD in place: the session rule alone then holds.
//!
//! `zonemount __worker-init --mount MP [--user UID:GID] -- CMD...` (the
//! *init*, pid 1 of the namespace): tells the mount's daemon that its
//! namespace is the worker's (before CMD exists, so no process of the
//! worker's can claim first), starts CMD (leading a process group), reaps
//! every orphan, passes signals on to CMD's group, and exits with
//! CMD's status when CMD ends; the kernel then kills whatever CMD left in
//! the namespace (`setsid -f`, `nohup`, daemons). It dies with the keeper
//! (parent-death signal). Signals `run` sends to the keeper's process group
//! the keeper passes to the init, and the init to CMD's process group (CMD
//! leads one, or has moved to another); the keeper and the init only
//! survive them, so CMD's own handling decides.
//!
//! Both run before logging or any thread starts: the kernel refuses a user
//! namespace to a threaded process.

use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Command, ExitStatus};

use rustix::process::{Pid, Signal, WaitOptions};

use super::super::mount_cmd::register_worker;
use super::user::User;
use crate::approval::side::Claim;
use crate::isolate::pidns;

/// The keeper's subcommand.
pub(crate) const KEEPER: &str = "__worker";
/// The init's subcommand.
pub(crate) const INIT: &str = "__worker-init";

/// What both commands are given.
#[derive(Debug, Default, PartialEq, Eq)]
struct Args {
    mount: Option<PathBuf>,
    user: Option<User>,
    note: bool,
    command: Vec<OsString>,
}

fn parse(argv: &[OsString]) -> Result<Args, String> {
    let mut a = Args::default();
    let mut it = argv.iter();
    while let Some(x) = it.next() {
        match x.to_str() {
            Some("--mount") => a.mount = it.next().map(PathBuf::from),
            Some("--user") => {
                let spec = it.next().and_then(|s| s.to_str()).unwrap_or("");
                let (u, g) = spec.split_once(':').ok_or("--user takes UID:GID")?;
                a.user = Some(User {
                    uid: u.parse().map_err(|_| "--user: a numeric UID")?,
                    gid: g.parse().map_err(|_| "--user: a numeric GID")?,
                });
            }
            Some("--note") => a.note = true,
            Some("--") => {
                a.command = it.cloned().collect();
                break;
            }
            _ => return Err(format!("unexpected argument {x:?}")),
        }
    }
    if a.command.is_empty() {
        return Err("no command after --".into());
    }
    Ok(a)
}

/// The keeper's arguments for CMD `command` on the mount at `mount`.
pub(super) fn keeper_args(
    mount: &std::path::Path,
    user: Option<User>,
    note: bool,
    command: &[OsString],
) -> Vec<OsString> {
    let mut v: Vec<OsString> = vec![KEEPER.into(), "--mount".into(), mount.into()];
    if let Some(u) = user {
        v.push("--user".into());
        v.push(format!("{}:{}", u.uid, u.gid).into());
    }
    if note {
        v.push("--note".into());
    }
    v.push("--".into());
    v.extend(command.iter().cloned());
    v
}

/// `zonemount __worker ...` or `__worker-init ...` (argv[1]); None for
/// any other command line.
pub(crate) fn dispatch(argv: &[OsString]) -> Option<u8> {
    let which = argv.get(1)?.to_str()?;
    if which != KEEPER && which != INIT {
        return None;
    }
    let args = match parse(&argv[2..]) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("zonemount: {which}: {e} (an internal command of `zonemount run`)");
            return Some(2);
        }
    };
    Some(if which == KEEPER {
        keeper(args)
    } else {
        init(args)
    })
}

/// CMD as a command, as the user it runs as.
fn command(a: &Args) -> Command {
    let mut c = Command::new(&a.command[0]);
    c.args(&a.command[1..]);
    if let Some(u) = a.user {
        // std sets the gid, clears the supplementary groups, then sets
        // the uid, in the child before exec.
        c.gid(u.gid).uid(u.uid);
    }
    c
}

fn cannot_start(prog: &OsString, e: &std::io::Error) -> u8 {
    eprintln!(
        "zonemount: run: cannot execute {}: {e}",
        std::path::Path::new(prog).display()
    );
    if e.kind() == std::io::ErrorKind::NotFound {
        super::exec::NOT_FOUND
    } else {
        super::exec::NOT_EXECUTABLE
    }
}

/// The status `run` reports for a process's (128+N for signal N).
fn code_of(st: ExitStatus) -> u8 {
    super::task::exit_code(st)
}

/// Catch `run`'s signals (SIGTERM, SIGINT, SIGHUP) and SIGQUIT, to pass
/// them on.
fn outlast_signals(extra: &[i32]) -> Option<signal_hook::iterator::Signals> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
    let mut sigs = vec![SIGTERM, SIGINT, SIGHUP, SIGQUIT];
    sigs.extend_from_slice(extra);
    signal_hook::iterator::Signals::new(sigs).ok()
}

fn keeper(a: Args) -> u8 {
    // Already a group leader only if started so; either way CMD is then
    // in a group `run` can signal as a whole.
    let _ = rustix::process::setsid();
    let map = (!rustix::process::geteuid().is_root()).then(|| {
        (
            rustix::process::getuid().as_raw(),
            rustix::process::getgid().as_raw(),
        )
    });
    if let Err(e) = pidns::unshare_pid(map) {
        let why = format!("no PID namespace could be made here: {e}");
        if a.note {
            eprintln!(
                "zonemount: run: {why}; a decision from CMD's session or its descendants is refused, but `setsid` or a double fork leaves that (--user UID or --isolate hold)"
            );
        }
        if let Some(mp) = &a.mount {
            let _ = register_worker(mp, Claim::Session { why });
        }
        let e = command(&a).exec();
        return cannot_start(&a.command[0], &e);
    }
    // No thread here: a process whose children start in another PID
    // namespace may not make one (EINVAL). One loop waits for the init and
    // passes signals on.
    let Some(mut signals) = outlast_signals(&[signal_hook::consts::SIGCHLD]) else {
        eprintln!("zonemount: run: cannot install the keeper's signal handlers");
        return 1;
    };
    let mut init = Command::new("/proc/self/exe");
    // A group of its own: `run`'s signals to ours are passed on by us,
    // once each, and the init passes them to CMD.
    init.arg(INIT).process_group(0);
    if let Some(mp) = &a.mount {
        init.arg("--mount").arg(mp);
    }
    if let Some(u) = a.user {
        init.arg("--user").arg(format!("{}:{}", u.uid, u.gid));
    }
    init.arg("--").args(&a.command);
    let mut child = match init.spawn() {
        Ok(c) => c,
        Err(e) => return cannot_start(&OsString::from("zonemount's init"), &e),
    };
    let init_pid = Pid::from_child(&child);
    loop {
        match child.try_wait() {
            Ok(Some(st)) => return code_of(st),
            Ok(None) => {}
            Err(_) => return 1,
        }
        for sig in signals.wait() {
            if sig == signal_hook::consts::SIGCHLD {
                continue;
            }
            if let Some(s) = Signal::from_named_raw(sig) {
                let _ = rustix::process::kill_process(init_pid, s);
            }
        }
    }
}

fn init(a: Args) -> u8 {
    // The keeper gone (run killed with its group), the namespace goes too.
    let _ = rustix::process::set_parent_process_death_signal(Some(Signal::KILL));
    // Before CMD exists: its end is never missed.
    let Some(mut signals) = outlast_signals(&[signal_hook::consts::SIGCHLD]) else {
        eprintln!("zonemount: run: cannot install the PID namespace's signal handlers");
        return 1;
    };
    // Before CMD exists: no process of the worker's can have claimed
    // first. Without it only `status` knows less: the daemon refuses a
    // decider inside the asking process's namespace all the same.
    if let Some(mp) = &a.mount {
        if let Err(e) = register_worker(mp, Claim::OwnPidNamespace) {
            eprintln!("zonemount: run: the daemon did not take CMD's PID namespace: {e}");
        }
    }
    // CMD leads a process group of its own, as it did under `setsid`:
    // the one `run`'s signals reach.
    let cmd = match command(&a).process_group(0).spawn() {
        Ok(c) => c,
        Err(e) => return cannot_start(&a.command[0], &e),
    };
    let cmd = Pid::from_child(&cmd);
    loop {
        // Reap everything that ended: CMD, and orphans reparented here.
        while let Ok(Some((pid, st))) = rustix::process::wait(WaitOptions::NOHANG) {
            if pid == cmd {
                let st = match (st.exit_status(), st.terminating_signal()) {
                    (Some(c), _) => ExitStatus::from_raw((c & 0xff) << 8),
                    (None, Some(sig)) => ExitStatus::from_raw(sig & 0x7f),
                    (None, None) => ExitStatus::from_raw(1 << 8),
                };
                // pid 1 leaving ends the namespace: the kernel kills
                // whatever CMD left behind.
                return code_of(st);
            }
        }
        // Any signal wakes the loop. The keeper's (`run`'s) go to CMD's
        // process group, wherever CMD has moved (never to ours: the init
        // would hear its own signal again).
        for sig in signals.wait() {
            let Some(s) = Signal::from_named_raw(sig) else {
                continue;
            };
            if sig == signal_hook::consts::SIGCHLD {
                continue;
            }
            if let Ok(group) = rustix::process::getpgid(Some(cmd)) {
                if group != rustix::process::getpgrp() {
                    let _ = rustix::process::kill_process_group(group, s);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_keeper_reads_back_what_run_gives_it() {
        let argv = keeper_args(
            std::path::Path::new("/tmp/m"),
            Some(User {
                uid: 65534,
                gid: 65533,
            }),
            true,
            &os(&["sh", "-c", "--user x"]),
        );
        assert_eq!(argv[0], KEEPER);
        assert_eq!(
            parse(&argv[1..]),
            Ok(Args {
                mount: Some("/tmp/m".into()),
                user: Some(User {
                    uid: 65534,
                    gid: 65533
                }),
                note: true,
                command: os(&["sh", "-c", "--user x"]),
            })
        );
        assert!(parse(&os(&["--"])).is_err(), "no command");
        assert!(parse(&os(&["--user", "1", "--", "x"])).is_err());
        assert_eq!(dispatch(&os(&["zonemount", "status"])), None);
    }
}

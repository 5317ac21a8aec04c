//! `doctor`: what this machine allows and what zonemount does about it,
//! one line per fact (ok / degraded / missing) with the fix. Exit 0 when a
//! mount can be made here, [`HOST_FORBIDS`](mount::HOST_FORBIDS) when not.

use std::path::Path;

use serde::Serialize;

use super::Failure;
use crate::isolate;
use crate::mount::{self, probe};

/// How a fact stands for zonemount.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum State {
    /// Works fully.
    Ok,
    /// Works, with less (slower, or without a feature); the detail says
    /// what it costs.
    Degraded,
    /// Not available: what depends on it can't work.
    Missing,
}

impl State {
    fn word(self) -> &'static str {
        match self {
            State::Ok => "ok",
            State::Degraded => "degraded",
            State::Missing => "missing",
        }
    }
}

/// One fact about this machine.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Check {
    pub(crate) name: &'static str,
    pub(crate) state: State,
    /// What was found and what zonemount does about it.
    pub(crate) detail: String,
    /// How to get more, when there is more to get.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) fix: Option<String>,
}

fn check(name: &'static str, state: State, detail: impl Into<String>) -> Check {
    Check {
        name,
        state,
        detail: detail.into(),
        fix: None,
    }
}

impl Check {
    fn fix(mut self, fix: impl Into<String>) -> Check {
        self.fix = Some(fix.into());
        self
    }
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Report {
    pub(crate) uid: u32,
    pub(crate) kernel: String,
    /// Whether `zonemount mount` can work here for this user.
    pub(crate) can_mount: bool,
    pub(crate) checks: Vec<Check>,
}

pub(crate) fn doctor(json: bool) -> Result<u8, Failure> {
    let report = examine();
    if json {
        let text = serde_json::to_string_pretty(&report)
            .map_err(|e| Failure::new(1, format!("cannot encode the report: {e}")))?;
        println!("{text}");
    } else {
        print!("{}", render(&report));
    }
    Ok(if report.can_mount {
        0
    } else {
        mount::HOST_FORBIDS
    })
}

/// Look at everything, touching nothing but a probe's open of /dev/fuse,
/// a file handle of the working directory, one `bwrap … true` and one
/// detached overlay over empty dirs in a temp dir.
fn examine() -> Report {
    let uid = rustix::process::geteuid().as_raw();
    let kernel = probe::kernel_release();
    let root = probe::is_root();
    let admin = crate::backing::has_sys_admin();
    let device = probe::fuse_device();
    let fusermount = probe::fusermount3();
    let setuid = fusermount.as_deref().is_some_and(probe::is_setuid_root);
    let can_mount = device == probe::FuseDevice::Usable && if root { admin } else { setuid };
    let checks = vec![
        fuse_device(device),
        privilege(root, admin),
        fusermount3(root, fusermount.as_deref(), setuid),
        allow_other(root),
        passthrough(&kernel, admin),
        uring(),
        idle_poll(),
        file_handles(root),
        isolate(),
        staged(),
        match mount::check_runtime_dir() {
            Ok(dir) => dir_check("runtime dir", &dir, "mount records and control sockets"),
            Err(e) => check("runtime dir", State::Missing, e.to_string()).fix(format!(
                "remove {}, or set XDG_RUNTIME_DIR to a directory of your own",
                mount::runtime_dir().display()
            )),
        },
        match crate::stage::dir::check_state_dir() {
            Ok(dir) => dir_check("state dir", &dir, "state that outlives a mount"),
            Err(e) => check("state dir", State::Missing, e.to_string()).fix(format!(
                "remove {}, or set XDG_STATE_HOME to a directory of your own",
                mount::state_dir().display()
            )),
        },
    ];
    Report {
        uid,
        kernel,
        can_mount,
        checks,
    }
}

fn fuse_device(device: probe::FuseDevice) -> Check {
    const NAME: &str = "FUSE device";
    match device {
        probe::FuseDevice::Usable => check(NAME, State::Ok, "/dev/fuse opens read-write"),
        probe::FuseDevice::Missing => {
            check(NAME, State::Missing, "no /dev/fuse: nothing can be mounted").fix(
                "load the module (modprobe fuse); in a container, start it with --device /dev/fuse",
            )
        }
        probe::FuseDevice::NoAccess => check(
            NAME,
            State::Missing,
            "/dev/fuse is not readable and writable by this user: nothing can be mounted",
        )
        .fix("chmod 0666 /dev/fuse (Debian's default), or mount as root"),
    }
}

fn privilege(root: bool, admin: bool) -> Check {
    const NAME: &str = "privilege";
    match (root, admin) {
        (true, true) => check(
            NAME,
            State::Ok,
            "root with CAP_SYS_ADMIN: mounts with mount(2) itself, passthrough and file handles available",
        ),
        (true, false) => check(
            NAME,
            State::Missing,
            "uid 0 without CAP_SYS_ADMIN (a container without it?): mount(2) is refused",
        )
        .fix("give the container CAP_SYS_ADMIN (docker run --cap-add SYS_ADMIN --device /dev/fuse)"),
        (false, _) => check(
            NAME,
            State::Degraded,
            "an ordinary user: mounts through the setuid fusermount3; no passthrough, no kernel file handles (below)",
        )
        .fix("mount as root for passthrough and file handles"),
    }
}

fn fusermount3(root: bool, found: Option<&Path>, setuid: bool) -> Check {
    const NAME: &str = "fusermount3";
    match (found, root) {
        (Some(p), true) => check(
            NAME,
            State::Ok,
            format!("{}: not needed as root", p.display()),
        ),
        (None, true) => check(
            NAME,
            State::Ok,
            "not installed: not needed as root (zonemount mounts itself and unmounts a dead daemon's mount)",
        ),
        (Some(p), false) if setuid => {
            check(NAME, State::Ok, format!("{} (setuid root)", p.display()))
        }
        (Some(p), false) => check(
            NAME,
            State::Missing,
            format!(
                "{} is not setuid root: an ordinary user can't mount",
                p.display()
            ),
        )
        .fix("reinstall the fuse3 package (apt-get install --reinstall fuse3)"),
        (None, false) => check(
            NAME,
            State::Missing,
            "not installed: an ordinary user can only mount through it",
        )
        .fix("apt-get install fuse3"),
    }
}

fn allow_other(root: bool) -> Check {
    const NAME: &str = "allow_other";
    if root {
        return check(NAME, State::Ok, "root may use --allow-other");
    }
    if probe::fuse_conf_allows_other() {
        return check(
            NAME,
            State::Ok,
            "user_allow_other is in /etc/fuse.conf: --allow-other works",
        );
    }
    check(
        NAME,
        State::Degraded,
        "no user_allow_other in /etc/fuse.conf: --allow-other and --allow-uid are refused; only you reach your mounts",
    )
    .fix("add the line user_allow_other to /etc/fuse.conf (as root)")
}

/// FUSE passthrough needs Linux 6.9 and CAP_SYS_ADMIN.
fn passthrough(kernel: &str, admin: bool) -> Check {
    const NAME: &str = "passthrough";
    let new_enough = probe::kernel_version(kernel).is_some_and(|v| v >= (6, 9));
    if !new_enough {
        return check(
            NAME,
            State::Degraded,
            format!("kernel {kernel} has no FUSE passthrough (Linux 6.9+): file data goes through the daemon (writes gathered by the page cache, large reads slower)"),
        )
        .fix("a kernel of 6.9 or later");
    }
    if !admin {
        return check(
            NAME,
            State::Degraded,
            "passthrough needs CAP_SYS_ADMIN: file data goes through the daemon (writes gathered by the page cache, large reads slower)",
        )
        .fix("mount as root");
    }
    check(
        NAME,
        State::Ok,
        "opened files' data goes between the kernel and the backing file; the daemon sees open and close (a mount whose every zone is read-only with no read rule opens in the kernel instead: read-only, no open round trips, data through the page cache)",
    )
}

/// Which transport a mount made now would get, and why. /dev/fuse unless
/// asked (`--io-uring`, or ZONEMOUNT_IO_URING=1): FUSE over io_uring
/// was not ahead on every workload on the machines we have
/// (docs/performance.md): behind pinned, mixed unpinned.
fn uring() -> Check {
    const NAME: &str = "FUSE over io_uring";
    let asked = probe::uring_from_env();
    let how = if asked {
        "asked for by ZONEMOUNT_IO_URING=1"
    } else {
        "only with `--io-uring` (or ZONEMOUNT_IO_URING=1); by default a mount gets /dev/fuse, as FUSE over io_uring was not ahead on every workload here (docs/performance.md)"
    };
    match probe::uring() {
        probe::Uring::Enabled if !crate::fuse::sys::io_uring_allowed() => check(
            NAME,
            if asked { State::Degraded } else { State::Ok },
            "the kernel offers it (enable_uring=Y), but this process may not set up an io_uring (kernel.io_uring_disabled): a mount gets /dev/fuse",
        ),
        probe::Uring::Enabled if asked => check(
            NAME,
            State::Ok,
            format!(
                "a mount gets it, {how}, as the kernel offers it (enable_uring=Y): one queue per CPU, of {} entries to start with, grown up to {} while requests wait for a decision (asks); `--no-io-uring` keeps a mount on /dev/fuse",
                crate::fuse::QUEUE_START,
                crate::fuse::QUEUE_MAX
            ),
        ),
        probe::Uring::Enabled => check(
            NAME,
            State::Ok,
            format!("the kernel offers it (enable_uring=Y); a mount gets it {how}"),
        ),
        probe::Uring::Disabled => check(
            NAME,
            State::Ok,
            format!(
                "the kernel has it switched off (enable_uring=N): a mount gets /dev/fuse; as root, `zonemount mount --io-uring` switches it on and uses it{}",
                if asked {
                    " (ZONEMOUNT_IO_URING=1 asks for it: as root the mount switches it on, as a user it fails)"
                } else {
                    ""
                }
            ),
        ),
        probe::Uring::Absent => check(
            NAME,
            State::Ok,
            "this kernel has no FUSE over io_uring (Linux 6.14+): a mount gets /dev/fuse, the default anyway",
        ),
    }
}

/// Whether a mount's daemon may keep idle CPUs polling while requests
/// come close together (`fuse::IdlePoll`): it needs to open
/// /dev/cpu_dma_latency for writing (root's; containers often have none)
/// and busy polling not held back. The probe's open asks for nothing (a
/// new request is "no limit") and is closed at once.
fn idle_poll() -> Check {
    const NAME: &str = "idle polling";
    const DEV: &str = crate::fuse::IDLE_POLL_DEVICE;
    let costs = "a caller waiting for a reply on an idle CPU waits for it to leave a halt, tens of microseconds per request on VMs";
    if let Some(why) = crate::fuse::busy_poll_held_back() {
        return check(
            NAME,
            State::Ok,
            format!("busy polling is held back here ({why}), and idle polling with it"),
        );
    }
    match std::fs::OpenOptions::new().write(true).open(DEV) {
        Ok(_) => check(
            NAME,
            State::Ok,
            format!(
                "while requests come close together, a mount's daemon keeps idle CPUs polling ({DEV}), so a caller's wake-up is at once; it costs idle CPU time while it lasts (`--busy-poll 0` turns it off)"
            ),
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => check(
            NAME,
            State::Degraded,
            format!("no {DEV} here (a container?): {costs}"),
        )
        .fix(format!(
            "give the container the device (docker: --device {DEV})"
        )),
        Err(e) => check(
            NAME,
            State::Degraded,
            format!("cannot open {DEV} ({e}): {costs}"),
        )
        .fix("run the daemon as root"),
    }
}

fn file_handles(root: bool) -> Check {
    const NAME: &str = "kernel file handles";
    let dir = std::env::current_dir().unwrap_or_else(|_| "/".into());
    match probe::file_handles(&dir) {
        Ok(()) => check(
            NAME,
            State::Ok,
            "remembered files are reopened by kernel file handle: the daemon's open fds stay bounded",
        ),
        Err(why) => {
            let c = check(
                NAME,
                State::Degraded,
                format!(
                    "{why}: remembered files are reopened from their directory and name (open fds stay bounded; a file the host renames behind the mount is looked up again)"
                ),
            );
            if root { c } else { c.fix("mount as root") }
        }
    }
}

fn isolate() -> Check {
    const NAME: &str = "run --isolate";
    let Some(bwrap) = isolate::find_bwrap() else {
        return check(
            NAME,
            State::Missing,
            "bubblewrap (bwrap) is not installed: run --isolate refuses",
        )
        .fix("apt-get install bubblewrap");
    };
    match probe::isolate_sandbox(&bwrap) {
        Ok(()) => check(
            NAME,
            State::Ok,
            format!("{} starts a sandbox in fresh namespaces", bwrap.display()),
        ),
        Err(why) => check(
            NAME,
            State::Missing,
            format!("{} can't start a sandbox here: {why}", bwrap.display()),
        )
        .fix("allow user namespaces (sysctl user.max_user_namespaces=15000; on Ubuntu also kernel.apparmor_restrict_unprivileged_userns=0), or run as root"),
    }
}

fn staged() -> Check {
    const NAME: &str = "staged zones";
    match probe::staged_overlay() {
        Ok(how) => check(
            NAME,
            State::Ok,
            format!("the kernel's overlay mounts {how} (a staged zone's changes go to its stage)"),
        ),
        Err(why) => check(
            NAME,
            State::Missing,
            format!("a staged zone's overlay can't be mounted here: {why}"),
        )
        .fix("mount as root, or allow unprivileged user namespaces (Linux 5.11+; sysctl user.max_user_namespaces=15000; on Ubuntu also kernel.apparmor_restrict_unprivileged_userns=0)"),
    }
}

fn dir_check(name: &'static str, dir: &Path, what: &str) -> Check {
    match probe::writable_dir(dir) {
        Ok(()) => check(
            name,
            State::Ok,
            format!("{} is writable ({what})", dir.display()),
        ),
        Err(why) => check(name, State::Missing, format!("{why} ({what})"))
            .fix(format!("create {} writable by this user", dir.display())),
    }
}

/// The report for people: a header, one aligned line per fact (the fix
/// indented under it), and the verdict.
pub(crate) fn render(r: &Report) -> String {
    let width = r.checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
    let mut out = format!("zonemount doctor: uid {}, kernel {}\n", r.uid, r.kernel);
    for c in &r.checks {
        out.push_str(&format!(
            "  {:<8}  {:<width$}  {}\n",
            c.state.word(),
            c.name,
            c.detail
        ));
        if let Some(fix) = &c.fix {
            out.push_str(&format!("  {:<8}  {:<width$}  fix: {fix}\n", "", ""));
        }
    }
    let (degraded, missing) = r.checks.iter().fold((0, 0), |(d, m), c| match c.state {
        State::Degraded => (d + 1, m),
        State::Missing => (d, m + 1),
        State::Ok => (d, m),
    });
    let who = if r.uid == 0 { "root" } else { "this user" };
    if r.can_mount {
        out.push_str(&format!(
            "zonemount can mount here as {who} ({degraded} degraded, {missing} missing)\n"
        ));
    } else {
        out.push_str(&format!(
            "zonemount cannot mount here as {who}: see the missing lines above\n"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_aligns_and_gives_fixes_and_the_verdict() {
        let r = Report {
            uid: 1000,
            kernel: "6.18.0".into(),
            can_mount: false,
            checks: vec![
                check("FUSE device", State::Missing, "no /dev/fuse").fix("modprobe fuse"),
                check("x", State::Ok, "fine"),
            ],
        };
        let text = render(&r);
        assert!(text.starts_with("zonemount doctor: uid 1000, kernel 6.18.0\n"));
        assert!(
            text.contains("  missing   FUSE device  no /dev/fuse\n"),
            "{text}"
        );
        assert!(text.contains("            fix: modprobe fuse\n"), "{text}");
        assert!(text.contains("  ok        x            fine\n"), "{text}");
        assert!(
            text.ends_with(
                "zonemount cannot mount here as this user: see the missing lines above\n"
            )
        );
    }

    #[test]
    fn passthrough_needs_a_new_kernel_and_cap_sys_admin() {
        assert_eq!(passthrough("6.8.0", true).state, State::Degraded);
        assert_eq!(passthrough("6.9.1", false).state, State::Degraded);
        assert_eq!(passthrough("6.18.44-x", true).state, State::Ok);
    }

    #[test]
    fn a_user_without_setuid_fusermount3_is_missing_it() {
        let p = Path::new("/usr/bin/fusermount3");
        assert_eq!(fusermount3(false, Some(p), true).state, State::Ok);
        assert_eq!(fusermount3(false, Some(p), false).state, State::Missing);
        assert_eq!(fusermount3(false, None, false).state, State::Missing);
        assert_eq!(
            fusermount3(true, None, false).state,
            State::Ok,
            "root mounts itself"
        );
    }
}

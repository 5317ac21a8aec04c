//! Straight binds that take no mount the host makes later (root only).
//!
//! bubblewrap makes its mount namespace a slave of the one it starts in,
//! so a mount the host makes under a zone's backing dir while CMD runs
//! (a USB stick, an automount, a `mount --bind` by hand) would show up in
//! CMD's world as the host made it: writable, even under a ro zone. So
//! `run` as root starts bwrap through a hidden command of its own
//! ([`COMMAND`]), which first gives itself a mount namespace of its own,
//! slave to the host's (nothing it mounts goes back), and puts over each
//! backing dir bound straight a private clone of it ([`private_clone`]):
//! a private mount takes no later mount from anywhere, and bwrap binds the
//! clone. Mounts under the backing dir at the start are in the clone, as
//! they were in bwrap's own bind (and remounted read-only with a ro zone).
//!
//! Without root no mount namespace can be made beside bwrap's own, and a
//! later host mount still reaches CMD (docs/security.md says so).

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rustix::fs::{CWD, Mode, OFlags};
use rustix::mount::{
    MountPropagationFlags, MoveMountFlags, OpenTreeFlags, mount_change, move_mount, open_tree,
};

use super::pidns;

/// The hidden command: `zonemount __isolate BWRAP [--fd N PATH]... --
/// ARGS...` runs `BWRAP ARGS...` with each fd `N` (a backing dir `run`
/// opened and checked, at `PATH`) replaced by a private clone of it.
pub const COMMAND: &str = "__isolate";

/// The hidden command's arguments for bwrap at `bwrap` with `args`, where
/// `fds` are the (fd, backing dir) of the zones bound straight.
pub fn command_args(bwrap: &Path, fds: &[(i32, PathBuf)], args: &[OsString]) -> Vec<OsString> {
    let mut v: Vec<OsString> = vec![COMMAND.into(), bwrap.into()];
    for (fd, path) in fds {
        v.extend(["--fd".into(), fd.to_string().into(), path.into()]);
    }
    v.push("--".into());
    v.extend(args.iter().cloned());
    v
}

/// What the hidden command was given.
#[derive(Debug, PartialEq, Eq)]
pub struct Given {
    pub bwrap: PathBuf,
    pub fds: Vec<(i32, PathBuf)>,
    pub args: Vec<OsString>,
}

/// The hidden command's arguments (after its name).
pub fn parse(argv: &[OsString]) -> Result<Given, String> {
    let mut it = argv.iter();
    let bwrap = it.next().ok_or("no bwrap given")?.into();
    let mut fds = Vec::new();
    loop {
        match it.next().and_then(|a| a.to_str()) {
            Some("--fd") => {
                let fd = it
                    .next()
                    .and_then(|a| a.to_str())
                    .and_then(|a| a.parse().ok())
                    .ok_or("--fd takes a number")?;
                let path = it.next().ok_or("--fd takes a number and a path")?;
                fds.push((fd, path.into()));
            }
            Some("--") => break,
            _ => return Err("expected --fd N PATH or --".into()),
        }
    }
    Ok(Given {
        bwrap,
        fds,
        args: it.cloned().collect(),
    })
}

/// bwrap's `args` with the fd after each `--bind-fd`/`--ro-bind-fd` that
/// `swap` names replaced by its new number.
pub fn swapped(args: &[OsString], swap: &[(i32, i32)]) -> Vec<OsString> {
    let mut out = args.to_vec();
    // CMD's own arguments, after `--`, are left alone.
    let end = out.iter().position(|a| a == "--").unwrap_or(out.len());
    for i in 1..end {
        let flag = out[i - 1].as_os_str();
        if flag != OsStr::new("--bind-fd") && flag != OsStr::new("--ro-bind-fd") {
            continue;
        }
        let Some(old) = out[i].to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if let Some((_, new)) = swap.iter().find(|(o, _)| *o == old) {
            out[i] = new.to_string().into();
        }
    }
    out
}

/// `zonemount __isolate ...` (argv[1]); None for any other command line.
/// Execs bwrap, or fails before CMD runs (exit 1, as bwrap's own set-up
/// failures do).
pub fn dispatch(argv: &[OsString]) -> Option<u8> {
    if argv.get(1)? != COMMAND {
        return None;
    }
    let fail = |e: &dyn std::fmt::Display| {
        eprintln!("zonemount: run: --isolate: {e}");
        Some(1)
    };
    let given = match parse(&argv[2..]) {
        Ok(g) => g,
        Err(e) => return fail(&format!("{e} (an internal command of `zonemount run`)")),
    };
    if let Err(e) = own_namespace() {
        return fail(&format!("cannot make a mount namespace: {e}"));
    }
    for d in DEVICES {
        if let Err(e) = read_only_in_place(Path::new(d)) {
            return fail(&format!("cannot bind {d} read-only: {e}"));
        }
    }
    read_only_stdio();
    let mut clones = Vec::new();
    for (fd, path) in &given.fds {
        match private_clone(*fd, path) {
            Ok(c) => clones.push((*fd, c)),
            Err(e) => return fail(&format!("cannot bind {}: {e}", path.display())),
        }
    }
    let swap: Vec<(i32, i32)> = clones.iter().map(|(o, c)| (*o, c.as_raw_fd())).collect();
    use std::os::unix::process::CommandExt;
    let e = std::process::Command::new(&given.bwrap)
        .args(swapped(&given.args, &swap))
        .exec();
    fail(&format!("cannot run {}: {e}", given.bwrap.display()))
}

/// The host's device nodes bwrap's `--dev` binds into CMD's `/dev`. A
/// worker run as root is their owner (uid 0), so through a writable bind
/// it could chmod the host's `/dev/null` (found by an attack pass): each
/// is bound over itself read-only here first, and bwrap's bind of it
/// keeps that (reads and writes of a device are not refused by a
/// read-only mount; chmod is, EROFS).
const DEVICES: [&str; 6] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

/// Bind `path` over itself read-only, in this process's own mount
/// namespace ([`own_namespace`] first): nothing changes for the host. A
/// path that isn't there is passed.
fn read_only_in_place(path: &Path) -> io::Result<()> {
    match rustix::mount::mount_bind(path, path) {
        Ok(()) => {}
        Err(rustix::io::Errno::NOENT) => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    rustix::mount::mount_remount(
        path,
        rustix::mount::MountFlags::BIND | rustix::mount::MountFlags::RDONLY,
        "",
    )?;
    Ok(())
}

/// CMD's stdin, stdout and stderr, where one is a named FIFO or a device
/// other than a terminal (`< fifo`, `> /dev/null`): reopened through a
/// read-only bind of itself, so CMD reads and writes it as before but
/// can't chmod the host's node, which a worker run as root owns (found by
/// an attack pass: `fchmod(0, 0o777)` changed the host's FIFO). Regular
/// files and directories on stdin reach CMD as a pipe already
/// (`cli::run::stdio`); an anonymous pipe, a socket or a terminal is left
/// as it is. One that can't be reopened so is left too, with a warning.
fn read_only_stdio() {
    let (i, o, e) = (std::io::stdin(), std::io::stdout(), std::io::stderr());
    let stdio: [(BorrowedFd<'_>, &str, Dup2); 3] = [
        (i.as_fd(), "stdin", |f| rustix::stdio::dup2_stdin(f)),
        (o.as_fd(), "stdout", |f| rustix::stdio::dup2_stdout(f)),
        (e.as_fd(), "stderr", |f| rustix::stdio::dup2_stderr(f)),
    ];
    for (fd, name, onto) in stdio {
        let done = reopened_read_only(fd).and_then(|new| match new {
            Some(new) => onto(&new).map_err(io::Error::from),
            None => Ok(()),
        });
        if let Err(e) = done {
            eprintln!(
                "zonemount: run: --isolate: {name} is left as it is (CMD could chmod it): {e}"
            );
        }
    }
}

/// Put an fd in the place of stdin, stdout or stderr.
type Dup2 = fn(&OwnedFd) -> rustix::io::Result<()>;

/// `fd` reopened through a read-only bind of its own path, with its
/// access mode and status flags, when it is a named FIFO or a device
/// other than a terminal; None for anything else, or when its path names
/// something else now.
fn reopened_read_only(fd: BorrowedFd<'_>) -> io::Result<Option<OwnedFd>> {
    use std::os::unix::ffi::OsStringExt;
    let st = rustix::fs::fstat(fd)?;
    let kind = rustix::fs::FileType::from_raw_mode(st.st_mode);
    if !matches!(
        kind,
        rustix::fs::FileType::Fifo | rustix::fs::FileType::CharacterDevice
    ) || rustix::termios::isatty(fd)
    {
        return Ok(None);
    }
    // An anonymous pipe's link is `pipe:[N]`: no host node to reach.
    let link = rustix::fs::readlink(format!("/proc/self/fd/{}", fd.as_raw_fd()), Vec::new())?;
    let path = PathBuf::from(OsString::from_vec(link.into_bytes()));
    if !path.is_absolute() {
        return Ok(None);
    }
    read_only_in_place(&path)?;
    let flags = rustix::fs::fcntl_getfl(fd)?;
    // Not waiting for the FIFO's other end: it has one, `run`'s caller.
    let new = rustix::fs::open(
        &path,
        (flags & OFlags::RWMODE) | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::NOCTTY,
        Mode::empty(),
    )?;
    let now = rustix::fs::fstat(&new)?;
    if (now.st_dev, now.st_ino, now.st_rdev) != (st.st_dev, st.st_ino, st.st_rdev) {
        return Ok(None);
    }
    rustix::fs::fcntl_setfl(&new, flags & !OFlags::RWMODE)?;
    Ok(Some(new))
}

/// Make this process's mount namespace its own, slave to the one it was
/// in: later mounts of the host still reach it, none of its own go back.
pub fn own_namespace() -> io::Result<()> {
    pidns::unshare_mounts()?;
    mount_change(
        "/",
        MountPropagationFlags::DOWNSTREAM | MountPropagationFlags::REC,
    )?;
    Ok(())
}

/// A private clone of the tree at fd `fd` (a backing dir, at `path`),
/// mounted over `path` in this process's own namespace
/// ([`own_namespace`] first): open, not close-on-exec, for bwrap to bind.
/// The dir at `path` here must be the one `fd` holds.
pub fn private_clone(fd: i32, path: &Path) -> io::Result<OwnedFd> {
    let here = rustix::fs::openat(
        CWD,
        path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let held = std::fs::metadata(format!("/proc/self/fd/{fd}"))?;
    let st = rustix::fs::fstat(&here)?;
    if (st.st_dev, st.st_ino) != (held.dev(), held.ino()) {
        return Err(io::Error::other(format!(
            "{} is no longer the directory it was when opened",
            path.display()
        )));
    }
    let tree = open_tree(
        &here,
        "",
        OpenTreeFlags::OPEN_TREE_CLONE
            | OpenTreeFlags::OPEN_TREE_CLOEXEC
            | OpenTreeFlags::AT_RECURSIVE
            | OpenTreeFlags::AT_EMPTY_PATH,
    )?;
    move_mount(
        &tree,
        "",
        &here,
        "",
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH | MoveMountFlags::MOVE_MOUNT_T_EMPTY_PATH,
    )?;
    mount_change(
        format!("/proc/self/fd/{}", tree.as_raw_fd()),
        MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
    )?;
    rustix::io::fcntl_setfd(tree.as_fd(), rustix::io::FdFlags::empty())?;
    Ok(tree)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    fn words(s: &str) -> Vec<OsString> {
        s.split(' ').map(OsString::from).collect()
    }

    #[test]
    fn the_hidden_command_reads_back_what_run_gives_it() {
        let fds = vec![(7, PathBuf::from("/b/in")), (8, PathBuf::from("/b/ws"))];
        let args = os(&["--ro-bind-fd", "7", "/in", "--", "sh", "-c", "--fd"]);
        let v = command_args(Path::new("/usr/bin/bwrap"), &fds, &args);
        assert_eq!(v[0], COMMAND);
        let given = parse(&v[1..]).unwrap();
        assert_eq!(
            given,
            Given {
                bwrap: "/usr/bin/bwrap".into(),
                fds,
                args
            }
        );
        assert!(parse(&os(&["/bwrap", "--fd", "x", "/p", "--"])).is_err());
        assert!(parse(&os(&["/bwrap", "--fd", "7"])).is_err());
        assert!(parse(&os(&["/bwrap", "sh"])).is_err());
    }

    #[test]
    fn only_the_fds_of_binds_are_swapped() {
        let args = words("--ro-bind-fd 7 /in --bind-fd 8 /ws --setenv X 7 -- echo 7");
        assert_eq!(
            swapped(&args, &[(7, 20), (8, 21)]),
            words("--ro-bind-fd 20 /in --bind-fd 21 /ws --setenv X 7 -- echo 7")
        );
    }
}

//! The kernel's overlayfs for a staged zone: mounted detached (fsopen,
//! fsconfig, fsmount: it is in no mount namespace, so nothing but the fd
//! this returns reaches it), lower = the stage's checkpoints (newest
//! first) over the zone's backing dir, upper and work = the stage's dirs.
//! Every change through it lands in upper; the backing dir and the
//! checkpoints are only ever read. Without an upper (a checkpoint's view)
//! the overlay is read-only.
//!
//! - With CAP_SYS_ADMIN (root): mounted here, with `trusted.overlay.*`
//!   xattrs.
//! - Without: mounted by a forked child in a user namespace of its own
//!   (where it may mount an overlay, since Linux 5.11) that maps only our
//!   uid and gid, with `userxattr` (`user.overlay.*` xattrs), and passed
//!   back over a socket. The mount works from our namespace through that
//!   fd. A file whose owner or group is not ours can't be copied up there
//!   (EOVERFLOW); see `docs/staged.md`.
//!
//! Both: no redirects (renaming a directory that exists in the backing
//! dir answers EXDEV, and `mv` copies instead), no metacopy, no index, so
//! the upper dir holds whole files a commit can apply as they are.
//!
//! The layers are passed as fds where the kernel takes them (6.13), as
//! paths otherwise. After the fork the child is single-threaded in a copy
//! of a multithreaded process: it makes system calls only, on data made
//! before the fork, never allocates, and leaves through `_exit` (the
//! watcher's rules, see `mount::watch`). Its fork, `unshare` and `_exit`
//! are the leaf `stage::sys::child`; this file holds no `unsafe`.

use std::ffi::{CStr, CString};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

use super::child::{self as sys, InChild};
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use rustix::mount::{FsMountFlags, FsOpenFlags, MountAttrFlags};
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketFlags, SocketType,
};
use rustix::process::{Signal, WaitOptions};

/// Which xattr namespace the overlay keeps its markers in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Xattrs {
    /// `trusted.overlay.*`: mounted with CAP_SYS_ADMIN.
    Trusted,
    /// `user.overlay.*`: mounted in a user namespace (`userxattr`).
    User,
}

impl Xattrs {
    /// The prefix of the overlay's xattr names.
    pub fn prefix(self) -> &'static str {
        match self {
            Xattrs::Trusted => "trusted.overlay.",
            Xattrs::User => "user.overlay.",
        }
    }
}

/// The directories of an overlay: its lower layers, the topmost first
/// (at least one; two when there is no upper), and its upper and work
/// dirs (none: a read-only overlay).
#[derive(Debug, Clone, Copy)]
pub struct Layers<'a> {
    pub lower: &'a [&'a Path],
    pub upper: Option<(&'a Path, &'a Path)>,
}

/// How long the child that mounts in a user namespace may take.
const CHILD_PATIENCE: Duration = Duration::from_secs(10);

/// Mount an overlay of `layers` and return an fd on its root (usable as
/// a directory fd for `*at` calls) and where its markers are kept.
pub fn mount(layers: &Layers<'_>) -> io::Result<(OwnedFd, Xattrs)> {
    let prep = Prepared::new(layers)?;
    if crate::backing::has_sys_admin() {
        prep.mount(Xattrs::Trusted)
            .map(|fd| (fd, Xattrs::Trusted))
            .map_err(|(step, e)| failed(step, e, Xattrs::Trusted))
    } else {
        in_user_namespace(&prep).map(|fd| (fd, Xattrs::User))
    }
}

fn failed(step: Step, e: Errno, how: Xattrs) -> io::Error {
    let what = match step {
        Step::Unshare => {
            "cannot make a user namespace to mount the stage in (are unprivileged \
                          user namespaces turned off? see `zonemount doctor`)"
        }
        Step::Maps => "cannot map our uid and gid in the stage's user namespace",
        Step::Open => "the kernel has no overlay filesystem",
        Step::Lower => "the overlay refused the backing dir or a checkpoint as a lower layer",
        Step::Upper => "the overlay refused the stage's upper dir",
        Step::Work => "the overlay refused the stage's work dir",
        Step::Option => "the overlay refused an option",
        Step::Create => match how {
            Xattrs::Trusted => "cannot mount the overlay",
            Xattrs::User => {
                "cannot mount the overlay in a user namespace (the stage dir must be on a \
                 filesystem that keeps user xattrs)"
            }
        },
        Step::Mount => "cannot make the overlay's mount",
        Step::Send => "cannot pass the overlay back from its user namespace",
    };
    io::Error::new(
        io::Error::from(e).kind(),
        format!("{what}: {}", io::Error::from(e)),
    )
}

/// What failed, for the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
enum Step {
    Unshare = 1,
    Maps,
    Open,
    Lower,
    Upper,
    Work,
    Option,
    Create,
    Mount,
    Send,
}

impl Step {
    fn from_code(c: u32) -> Step {
        [
            Step::Unshare,
            Step::Maps,
            Step::Open,
            Step::Lower,
            Step::Upper,
            Step::Work,
            Step::Option,
            Step::Create,
            Step::Mount,
            Step::Send,
        ]
        .into_iter()
        .find(|s| *s as u32 == c)
        .unwrap_or(Step::Create)
    }
}

/// Everything the mount needs, made before any fork.
struct Prepared {
    lower: Vec<Layer>,
    /// Upper and work.
    upper: Option<(Layer, Layer)>,
    /// `lowerdir` as a legacy option string (each path's `:` `,` `\`
    /// escaped, joined by `:`), for kernels without `lowerdir+`.
    lower_legacy: CString,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
}

struct Layer {
    fd: OwnedFd,
    path: CString,
}

impl Layer {
    fn open(p: &Path) -> io::Result<Layer> {
        let fd = rustix::fs::open(
            p,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io::Error::new(io::Error::from(e).kind(), format!("{}: {e}", p.display())))?;
        Ok(Layer {
            fd,
            path: cstring(p)?,
        })
    }
}

fn cstring(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))
}

impl Prepared {
    fn new(layers: &Layers<'_>) -> io::Result<Prepared> {
        let mut legacy = Vec::new();
        for (i, l) in layers.lower.iter().enumerate() {
            if i > 0 {
                legacy.push(b':');
            }
            for &b in l.as_os_str().as_bytes() {
                if matches!(b, b':' | b',' | b'\\') {
                    legacy.push(b'\\');
                }
                legacy.push(b);
            }
        }
        let uid = rustix::process::getuid().as_raw();
        let gid = rustix::process::getgid().as_raw();
        Ok(Prepared {
            lower: layers
                .lower
                .iter()
                .map(|l| Layer::open(l))
                .collect::<io::Result<_>>()?,
            upper: match layers.upper {
                Some((u, w)) => Some((Layer::open(u)?, Layer::open(w)?)),
                None => None,
            },
            lower_legacy: CString::new(legacy)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in a path"))?,
            uid_map: format!("{uid} {uid} 1").into_bytes(),
            gid_map: format!("{gid} {gid} 1").into_bytes(),
        })
    }

    /// fsopen .. fsmount. Runs in the daemon (root) or in the forked
    /// child (user namespace): system calls only, on prepared data.
    fn mount(&self, how: Xattrs) -> Result<OwnedFd, (Step, Errno)> {
        use rustix::mount::{
            fsconfig_create, fsconfig_set_fd, fsconfig_set_flag, fsconfig_set_string, fsmount,
            fsopen,
        };
        let fs = fsopen(c"overlay", FsOpenFlags::FSOPEN_CLOEXEC).map_err(|e| (Step::Open, e))?;
        let fs = fs.as_fd();
        // Layers given as fds must be mounts of the mounter's mount
        // namespace: ours as root; in the child's fresh namespace (a copy)
        // only the paths reach its own copies.
        let by_fd = how == Xattrs::Trusted;
        let lower_plus = c"lowerdir+";
        // Each layer with `lowerdir+` (6.8), topmost first; else the
        // whole list at once, the legacy way.
        let mut plus = true;
        for (i, layer) in self.lower.iter().enumerate() {
            let first = if by_fd {
                fsconfig_set_fd(fs, lower_plus, layer.fd.as_fd())
            } else {
                Err(Errno::INVAL)
            }
            .or_else(|_| fsconfig_set_string(fs, lower_plus, layer.path.as_c_str()));
            match first {
                Ok(()) => {}
                Err(_) if i == 0 => {
                    plus = false;
                    break;
                }
                Err(e) => return Err((Step::Lower, e)),
            }
        }
        if !plus {
            fsconfig_set_string(fs, c"lowerdir", self.lower_legacy.as_c_str())
                .map_err(|e| (Step::Lower, e))?;
        }
        if let Some((upper, work)) = &self.upper {
            set_layer(fs, c"upperdir", upper, by_fd).map_err(|e| (Step::Upper, e))?;
            set_layer(fs, c"workdir", work, by_fd).map_err(|e| (Step::Work, e))?;
        }
        let options: &[(&CStr, &CStr)] = match how {
            Xattrs::Trusted => &[
                (c"redirect_dir", c"nofollow"),
                (c"metacopy", c"off"),
                (c"index", c"off"),
            ],
            // userxattr implies nofollow redirects and no metacopy.
            Xattrs::User => &[(c"index", c"off")],
        };
        for (key, value) in options {
            fsconfig_set_string(fs, *key, *value).map_err(|e| (Step::Option, e))?;
        }
        if how == Xattrs::User {
            fsconfig_set_flag(fs, c"userxattr").map_err(|e| (Step::Option, e))?;
        }
        fsconfig_create(fs).map_err(|e| (Step::Create, e))?;
        let read_only = if self.upper.is_none() {
            MountAttrFlags::MOUNT_ATTR_RDONLY
        } else {
            MountAttrFlags::empty()
        };
        fsmount(
            fs,
            FsMountFlags::FSMOUNT_CLOEXEC,
            MountAttrFlags::MOUNT_ATTR_NODEV | MountAttrFlags::MOUNT_ATTR_NOSUID | read_only,
        )
        .map_err(|e| (Step::Mount, e))
    }
}

fn set_layer(fs: BorrowedFd<'_>, key: &CStr, layer: &Layer, by_fd: bool) -> rustix::io::Result<()> {
    let by_fd = if by_fd {
        rustix::mount::fsconfig_set_fd(fs, key, layer.fd.as_fd())
    } else {
        Err(Errno::INVAL)
    };
    by_fd.or_else(|_| rustix::mount::fsconfig_set_string(fs, key, layer.path.as_c_str()))
}

/// Fork a child that makes a user namespace, mounts the overlay there and
/// sends the mount's fd back.
fn in_user_namespace(prep: &Prepared) -> io::Result<OwnedFd> {
    let (ours, theirs) = rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?;
    // The child only runs `child`, which makes system calls on data
    // prepared above and leaves through `_exit`.
    let pid = sys::fork(|c| child(prep, theirs.as_fd(), c))?;
    drop(theirs);
    let got = receive(ours.as_fd());
    // The child exits right after sending; if it hangs (it can't, short
    // of a kernel bug), it is killed so we never wait forever.
    if got.is_err() {
        let _ = rustix::process::kill_process(pid, Signal::KILL);
    }
    let _ = rustix::process::waitpid(Some(pid), WaitOptions::empty());
    got
}

fn receive(sock: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let limit = Timespec::try_from(CHILD_PATIENCE).unwrap_or(Timespec {
        tv_sec: 10,
        tv_nsec: 0,
    });
    let mut fds = [PollFd::new(&sock, PollFlags::IN)];
    if rustix::event::poll(&mut fds, Some(&limit))? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the child mounting the stage's overlay did not answer",
        ));
    }
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut anc = RecvAncillaryBuffer::new(&mut space);
    let mut msg = [0u8; 8];
    let n = rustix::net::recvmsg(
        sock,
        &mut [io::IoSliceMut::new(&mut msg)],
        &mut anc,
        RecvFlags::CMSG_CLOEXEC,
    )?
    .bytes;
    let fd = anc.drain().find_map(|m| match m {
        RecvAncillaryMessage::ScmRights(mut fds) => fds.next(),
        _ => None,
    });
    match fd {
        Some(fd) => Ok(fd),
        None if n == 8 => {
            let step = u32::from_ne_bytes([msg[0], msg[1], msg[2], msg[3]]);
            let errno = i32::from_ne_bytes([msg[4], msg[5], msg[6], msg[7]]);
            Err(failed(
                Step::from_code(step),
                Errno::from_raw_os_error(errno),
                Xattrs::User,
            ))
        }
        None => Err(io::Error::other(
            "the child mounting the stage's overlay died without an answer",
        )),
    }
}

/// The forked child: a user namespace mapping only our ids, the overlay
/// mounted there, its fd sent back; or the failing step and errno.
fn child(prep: &Prepared, sock: BorrowedFd<'_>, c: InChild) -> ! {
    let result = (|| {
        sys::unshare_user_and_mount(&c).map_err(|e| (Step::Unshare, e))?;
        let maps: [(&CStr, &[u8]); 3] = [
            (c"/proc/self/setgroups", b"deny"),
            (c"/proc/self/uid_map", &prep.uid_map),
            (c"/proc/self/gid_map", &prep.gid_map),
        ];
        for (file, text) in maps {
            write_file(file, text).map_err(|e| (Step::Maps, e))?;
        }
        prep.mount(Xattrs::User)
    })();
    let sent = match &result {
        Ok(fd) => {
            let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
            let mut anc = SendAncillaryBuffer::new(&mut space);
            let fds = [fd.as_fd()];
            anc.push(SendAncillaryMessage::ScmRights(&fds));
            rustix::net::sendmsg(
                sock,
                &[io::IoSlice::new(b"ok")],
                &mut anc,
                SendFlags::empty(),
            )
        }
        Err((step, e)) => {
            let mut msg = [0u8; 8];
            msg[..4].copy_from_slice(&(*step as u32).to_ne_bytes());
            msg[4..].copy_from_slice(&e.raw_os_error().to_ne_bytes());
            rustix::net::send(sock, &msg, SendFlags::empty())
        }
    };
    // Leaving the fork child without running destructors.
    sys::exit(if sent.is_ok() { 0 } else { 1 })
}

fn write_file(path: &CStr, text: &[u8]) -> Result<(), Errno> {
    let fd = rustix::fs::open(path, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())?;
    rustix::io::write(&fd, text).map(|_| ())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// The overlay mounts (as root, or in a user namespace otherwise) and
    /// a file made through it lands in upper, not in the backing dir.
    #[test]
    fn changes_through_the_overlay_land_in_upper() {
        let dir = tempfile::tempdir().unwrap();
        let (lower, upper, work) = (
            dir.path().join("l"),
            dir.path().join("u"),
            dir.path().join("w"),
        );
        for d in [&lower, &upper, &work] {
            std::fs::create_dir(d).unwrap();
        }
        std::fs::write(lower.join("old"), "old\n").unwrap();
        let layers = Layers {
            lower: &[&lower],
            upper: Some((&upper, &work)),
        };
        let (root, how) = match mount(&layers) {
            Ok(m) => m,
            Err(e) if std::env::var_os("CI").is_none() => {
                println!("ZONEMOUNT-SKIP: stage::sys::overlay: {e}");
                return;
            }
            Err(e) => panic!("overlay: {e}"),
        };
        if crate::backing::has_sys_admin() {
            assert_eq!(how, Xattrs::Trusted);
        }
        let f = rustix::fs::openat(
            &root,
            "new",
            OFlags::CREATE | OFlags::WRONLY | OFlags::CLOEXEC,
            Mode::from_bits_truncate(0o644),
        )
        .unwrap();
        rustix::io::write(&f, b"new\n").unwrap();
        rustix::fs::unlinkat(&root, "old", rustix::fs::AtFlags::empty()).unwrap();
        assert_eq!(std::fs::read_to_string(upper.join("new")).unwrap(), "new\n");
        assert_eq!(std::fs::read_to_string(lower.join("old")).unwrap(), "old\n");
        assert!(!lower.join("new").exists());
        // The delete is a whiteout in upper: a character device 0/0.
        let st = rustix::fs::lstat(upper.join("old")).unwrap();
        assert_eq!(
            rustix::fs::FileType::from_raw_mode(st.st_mode),
            rustix::fs::FileType::CharacterDevice
        );
    }
}

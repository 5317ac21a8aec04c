//! PID namespaces: making one for `run`'s worker (`unshare(2)`, with a
//! user namespace that maps only our own uid and gid when we are not
//! root; and a mount namespace for `--isolate`'s straight binds), and
//! telling which namespace a process is in and which ones
//! enclose it (`/proc/PID/ns/pid`, the `NS_GET_PARENT` ioctl).
//!
//! Leaves only: which namespaces count as the worker's is decided in
//! `approval::side`.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;

use rustix::thread::UnshareFlags;

/// `NS_GET_PARENT`: `_IO(0xb7, 0x2)` in `<linux/nsfs.h>`.
const NS_GET_PARENT: libc::c_ulong = 0xb702;

/// A namespace, as the kernel names it: the nsfs device and inode of
/// `/proc/PID/ns/pid` (what `readlink` shows as `pid:[INODE]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NsId {
    pub dev: u64,
    pub ino: u64,
}

/// An open PID namespace.
pub struct PidNs(OwnedFd);

impl PidNs {
    /// The PID namespace of process `pid` (`/proc/self` for `None`).
    /// Needs ptrace-read access to it (same uid, or root).
    pub fn of(pid: Option<u32>) -> io::Result<PidNs> {
        let path = match pid {
            Some(p) => format!("/proc/{p}/ns/pid"),
            None => "/proc/self/ns/pid".to_string(),
        };
        Ok(PidNs(File::open(path)?.into()))
    }

    pub fn id(&self) -> io::Result<NsId> {
        let m = File::from(self.0.try_clone()?).metadata()?;
        Ok(NsId {
            dev: m.dev(),
            ino: m.ino(),
        })
    }

    /// The namespace this one was made in; `None` when that one is not
    /// in ours (or below it): we are at the top of what we may see.
    pub fn parent(&self) -> io::Result<Option<PidNs>> {
        parent_of(self.0.as_fd()).map(|fd| fd.map(PidNs))
    }
}

fn parent_of(fd: BorrowedFd<'_>) -> io::Result<Option<OwnedFd>> {
    // SAFETY: NS_GET_PARENT takes no argument and returns a new fd (or
    // -1); the fd is live for the call. The new fd is owned right away.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), NS_GET_PARENT as _) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EPERM) => Ok(None),
            _ => Err(e),
        };
    }
    // SAFETY: the ioctl returned a fresh fd that nothing else owns.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(r) }))
}

/// Make this process's next children start in a new PID namespace (the
/// first one is its init, pid 1). With `map`, the namespace is made in a
/// new user namespace too, where only `map`'s (uid, gid) is mapped, to
/// itself: what an ordinary user may do where the host allows user
/// namespaces. Call from a single-threaded process (the kernel refuses a
/// new user namespace to a threaded one).
pub fn unshare_pid(map: Option<(u32, u32)>) -> io::Result<()> {
    let flags = match map {
        Some(_) => UnshareFlags::NEWPID | UnshareFlags::NEWUSER,
        None => UnshareFlags::NEWPID,
    };
    // SAFETY: neither CLONE_FILES nor CLONE_FS is asked for, so no
    // thread's view of fds or the cwd changes under it; NEWPID and NEWUSER
    // only change what this process's later children and its credentials
    // are.
    unsafe { rustix::thread::unshare_unsafe(flags) }?;
    if let Some((uid, gid)) = map {
        // Unprivileged: setgroups must be denied before a gid map is
        // written.
        std::fs::write("/proc/self/setgroups", "deny")?;
        std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
        std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1"))?;
    }
    Ok(())
}

/// Give this process a mount namespace of its own (a copy of its
/// current one: `unshare(CLONE_NEWNS)`). Root only; call from a
/// single-threaded process.
pub fn unshare_mounts() -> io::Result<()> {
    // SAFETY: CLONE_NEWNS implies CLONE_FS, which gives this thread its own
    // cwd and root: the callers are single-threaded (`run`'s hidden
    // commands, before any thread starts), so no other thread's view
    // changes under it. Neither CLONE_FILES nor anything else is asked for.
    unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWNS) }?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_namespace_has_an_id_and_no_visible_parent() {
        let ns = PidNs::of(None).expect("own pid ns");
        let id = ns.id().expect("id");
        assert_eq!(
            id,
            PidNs::of(Some(std::process::id())).unwrap().id().unwrap()
        );
        // The top of what we may see: our own namespace's parent is not ours.
        assert!(ns.parent().expect("ioctl").is_none());
    }
}

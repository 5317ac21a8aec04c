//! Everything the watcher's child needs, made before the fork: after it,
//! the child may not allocate.

use std::ffi::{CString, c_char};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{Mode, OFlags};
use rustix::net::SocketAddrUnix;
use rustix::process::PidfdFlags;

use super::Plan;

/// Everything the child needs, made before the fork.
pub(super) struct Prepared {
    pub(super) tx: OwnedFd,
    pub(super) rx: OwnedFd,
    /// A pidfd of the watched process (None where pidfds are missing).
    pub(super) parent: Option<OwnedFd>,
    pub(super) null: OwnedFd,
    /// The mountpoint as its parent directory and its name in it: the
    /// child reaches the parent with no symlink on the way and names the
    /// mount from there (a directory renamed or swapped for a symlink
    /// above it can't turn the unmount onto another mount).
    pub(super) mountpoint: Option<(CString, CString)>,
    /// `fusermount3 -u -z -- MNT` as an argv (the CStrings and the
    /// null-terminated pointer array into them).
    pub(super) fusermount: Option<(Vec<CString>, Vec<*const c_char>)>,
    pub(super) files: Vec<CString>,
    /// The record's path, and the bytes that name the watched process in
    /// it (`"pid": N`).
    pub(super) record: Option<(CString, Vec<u8>)>,
    /// Each socket as its directory and its name in it (the child reaches
    /// the directory with no symlink on the way and acts on the name from
    /// there), and its address.
    pub(super) sockets: Vec<((CString, CString), SocketAddrUnix)>,
    pub(super) dirs: Vec<CString>,
}

impl Prepared {
    pub(super) fn new(plan: &Plan) -> io::Result<Prepared> {
        let (rx, tx) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        // Only the read end: the watcher drains it after its parent died.
        rustix::fs::fcntl_setfl(&rx, OFlags::NONBLOCK)?;
        let me = rustix::process::getpid();
        let parent = rustix::process::pidfd_open(me, PidfdFlags::empty()).ok();
        let null = rustix::fs::open("/dev/null", OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())?;
        let mountpoint = match plan.mountpoint.as_deref() {
            Some(mp) => match (mp.parent(), mp.file_name()) {
                (Some(dir), Some(name)) => {
                    Some((cstring(dir)?, cstring(std::path::Path::new(name))?))
                }
                _ => None,
            },
            None => None,
        };
        let fusermount = match (&plan.fusermount, &plan.mountpoint) {
            (Some(bin), Some(mp)) => {
                let args = vec![
                    cstring(bin)?,
                    CString::from(c"-u"),
                    CString::from(c"-z"),
                    CString::from(c"--"),
                    cstring(mp)?,
                ];
                let mut ptrs: Vec<*const c_char> = args.iter().map(|a| a.as_ptr()).collect();
                ptrs.push(std::ptr::null());
                Some((args, ptrs))
            }
            _ => None,
        };
        let files = plan
            .files
            .iter()
            .map(|p| cstring(p))
            .collect::<io::Result<_>>()?;
        let record = plan
            .record
            .as_deref()
            .map(|p| -> io::Result<(CString, Vec<u8>)> {
                let pid = format!("\"pid\": {}", me.as_raw_nonzero());
                Ok((cstring(p)?, pid.into_bytes()))
            })
            .transpose()?;
        let sockets = plan
            .sockets
            .iter()
            .map(|p| {
                let (dir, name) = match (p.parent(), p.file_name()) {
                    (Some(d), Some(n)) => (cstring(d)?, cstring(std::path::Path::new(n))?),
                    _ => {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidInput,
                            "a socket path with no name",
                        ));
                    }
                };
                Ok(((dir, name), SocketAddrUnix::new(p.as_path())?))
            })
            .collect::<io::Result<_>>()?;
        let dirs = plan
            .dirs
            .iter()
            .map(|p| cstring(p))
            .collect::<io::Result<_>>()?;
        Ok(Prepared {
            tx,
            rx,
            parent,
            null,
            mountpoint,
            fusermount,
            files,
            record,
            sockets,
            dirs,
        })
    }
}

fn cstring(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))
}

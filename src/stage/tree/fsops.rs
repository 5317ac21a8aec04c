//! fd-relative file operations under one directory (a backing dir or a
//! stage's upper dir): every path is resolved beneath the root without
//! following a symlink (`openat2` with `RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS`), so a symlink a worker or the host left in a tree
//! never sends a commit outside it.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{self as rfs, AtFlags, Mode, OFlags, ResolveFlags, Stat};
use rustix::io::Errno;

use crate::stage::walk;

const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_MAGICLINKS)
    .union(ResolveFlags::NO_SYMLINKS);

/// A directory tree reached through one fd.
#[derive(Debug)]
pub struct Root {
    fd: OwnedFd,
    pub path: PathBuf,
}

fn ctx(e: Errno, what: &str, p: &Path) -> io::Error {
    io::Error::new(
        io::Error::from(e).kind(),
        format!("{what} {}: {e}", p.display()),
    )
}

impl Root {
    pub fn open(path: &Path) -> io::Result<Root> {
        let fd = rfs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| ctx(e, "open", path))?;
        Ok(Root {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// A tree already open (e.g. a checkpoint's read-only overlay, which
    /// lives as long as its fd); `path` names it in messages.
    pub fn from_fd(fd: OwnedFd, path: PathBuf) -> Root {
        Root { fd, path }
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// `rel` opened with `flags` beneath the root, no symlink followed
    /// (the last name included: `O_NOFOLLOW`). Any length: a path past
    /// `PATH_MAX` is resolved a part at a time (`walk::open_deep`).
    pub fn open_at(&self, rel: &Path, flags: OFlags) -> Result<OwnedFd, Errno> {
        if rel.as_os_str().is_empty() {
            return rfs::openat(self.fd(), ".", flags | OFlags::CLOEXEC, Mode::empty());
        }
        walk::open_deep(self.fd(), rel, flags | OFlags::NOFOLLOW, RESOLVE)
    }

    /// The directory `rel` (must be one, reached without symlinks).
    pub fn dir(&self, rel: &Path) -> Result<OwnedFd, Errno> {
        self.open_at(rel, OFlags::RDONLY | OFlags::DIRECTORY)
    }

    /// lstat of `rel`; None when nothing is there.
    pub fn stat(&self, rel: &Path) -> Result<Option<Stat>, Errno> {
        let (parent, name) = split(rel);
        let dir = match self.dir(parent) {
            Ok(d) => d,
            Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP | Errno::XDEV) => return Ok(None),
            Err(e) => return Err(e),
        };
        match rfs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(st)),
            Err(Errno::NOENT | Errno::NOTDIR) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The names in directory `rel`, sorted.
    pub fn names(&self, rel: &Path) -> Result<Vec<OsString>, Errno> {
        let dir = self.dir(rel)?;
        let mut out = Vec::new();
        for e in rfs::Dir::read_from(&dir)? {
            let e = e?;
            let n = e.file_name().to_bytes();
            if n != b"." && n != b".." {
                out.push(OsStr::from_bytes(n).to_os_string());
            }
        }
        out.sort();
        Ok(out)
    }

    /// The target of symlink `rel`.
    pub fn readlink(&self, rel: &Path) -> Result<OsString, Errno> {
        let (parent, name) = split(rel);
        readlink_at(self.dir(parent)?.as_fd(), name)
    }

    /// Extended attribute `name` of `rel` (not following a symlink);
    /// None when it has none by that name.
    pub fn xattr(&self, rel: &Path, name: &str) -> Result<Option<Vec<u8>>, Errno> {
        xattr_of(&self.open_at(rel, OFlags::PATH)?, name)
    }

    /// `user.*` xattrs of `rel` (sorted), or none where it keeps none.
    pub fn user_xattrs(&self, rel: &Path) -> Result<Vec<(String, Vec<u8>)>, Errno> {
        user_xattrs_of(&self.open_at(rel, OFlags::PATH)?)
    }
}

/// `name` in `dir` opened with `flags`, not followed if a symlink.
pub fn open_in(dir: BorrowedFd<'_>, name: &OsStr, flags: OFlags) -> Result<OwnedFd, Errno> {
    rfs::openat(
        dir,
        name,
        flags | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// The target of symlink `name` in `dir`.
pub fn readlink_at(dir: BorrowedFd<'_>, name: &OsStr) -> Result<OsString, Errno> {
    let t = rfs::readlinkat(dir, name, Vec::new())?;
    Ok(OsStr::from_bytes(t.as_bytes()).to_os_string())
}

/// Extended attribute `key` of `name` in `dir` (not following a
/// symlink); None when it has none by that name.
pub fn xattr_at(dir: BorrowedFd<'_>, name: &OsStr, key: &str) -> Result<Option<Vec<u8>>, Errno> {
    xattr_of(&open_in(dir, name, OFlags::PATH)?, key)
}

/// `user.*` xattrs of `name` in `dir` (sorted).
pub fn user_xattrs_at(dir: BorrowedFd<'_>, name: &OsStr) -> Result<Vec<(String, Vec<u8>)>, Errno> {
    user_xattrs_of(&open_in(dir, name, OFlags::PATH)?)
}

/// Extended attribute `name` of what `fd` (`O_PATH` or not) holds.
fn xattr_of(fd: &OwnedFd, name: &str) -> Result<Option<Vec<u8>>, Errno> {
    let p = proc_path(fd);
    let mut buf = vec![0u8; 4096];
    match rfs::getxattr(&p, name, &mut buf[..]) {
        Ok(n) => {
            buf.truncate(n);
            Ok(Some(buf))
        }
        Err(Errno::NODATA) => Ok(None),
        Err(e) => Err(e),
    }
}

/// `user.*` xattrs of what `fd` (`O_PATH` or not) holds (sorted).
pub fn user_xattrs_of(fd: &OwnedFd) -> Result<Vec<(String, Vec<u8>)>, Errno> {
    let p = proc_path(fd);
    let mut buf = vec![0u8; 64 * 1024];
    let n = match rfs::listxattr(&p, &mut buf[..]) {
        Ok(n) => n,
        Err(Errno::NOTSUP | Errno::PERM) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for name in buf[..n].split(|b| *b == 0).filter(|s| !s.is_empty()) {
        let name = String::from_utf8_lossy(name).into_owned();
        if !name.starts_with("user.") || name.starts_with("user.overlay.") {
            continue;
        }
        let mut v = vec![0u8; 64 * 1024];
        if let Ok(len) = rfs::getxattr(&p, name.as_str(), &mut v[..]) {
            v.truncate(len);
            out.push((name, v));
        }
    }
    out.sort();
    Ok(out)
}

/// `/proc/self/fd/N` of an `O_PATH` fd: the xattr calls follow that
/// magic link to the object the fd holds (a symlink itself, never its
/// target).
fn proc_path(fd: &OwnedFd) -> PathBuf {
    use std::os::fd::AsRawFd;
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// (parent, last name) of a relative path; the parent of a single name is
/// the empty path (the root).
pub fn split(rel: &Path) -> (&Path, &OsStr) {
    (
        rel.parent().unwrap_or(Path::new("")),
        rel.file_name().unwrap_or(OsStr::new(".")),
    )
}

/// Remove `name` in `dir`, whatever it is: a directory with everything
/// under it, at any depth (never following a symlink).
pub fn remove_all(dir: BorrowedFd<'_>, name: &OsStr) -> Result<(), Errno> {
    walk::remove_all(dir, name, false)
}

/// How many entries the tree under directory `dir` holds, at any depth.
pub fn count_in(dir: BorrowedFd<'_>) -> u64 {
    let mut n = 0u64;
    let _ = walk::walk::<Errno>(
        dir,
        &mut |_| {
            n += 1;
            Ok(walk::Visit::Enter)
        },
        &mut |_, _, _| Ok(()),
    );
    n
}

/// Wrap an errno with what was done to which path.
pub fn err(e: Errno, what: &str, p: &Path) -> io::Error {
    ctx(e, what, p)
}

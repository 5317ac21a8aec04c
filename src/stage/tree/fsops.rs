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
    /// (the last name included: `O_NOFOLLOW`).
    pub fn open_at(&self, rel: &Path, flags: OFlags) -> Result<OwnedFd, Errno> {
        if rel.as_os_str().is_empty() {
            return rfs::openat(self.fd(), ".", flags | OFlags::CLOEXEC, Mode::empty());
        }
        rfs::openat2(
            self.fd(),
            rel,
            flags | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
            RESOLVE,
        )
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
        let dir = self.dir(parent)?;
        let t = rfs::readlinkat(&dir, name, Vec::new())?;
        Ok(OsStr::from_bytes(t.as_bytes()).to_os_string())
    }

    /// Extended attribute `name` of `rel` (not following a symlink);
    /// None when it has none by that name.
    pub fn xattr(&self, rel: &Path, name: &str) -> Result<Option<Vec<u8>>, Errno> {
        let fd = self.open_at(rel, OFlags::PATH)?;
        let p = proc_path(&fd);
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

    /// `user.*` xattrs of `rel` (sorted), or none where it keeps none.
    pub fn user_xattrs(&self, rel: &Path) -> Result<Vec<(String, Vec<u8>)>, Errno> {
        let fd = self.open_at(rel, OFlags::PATH)?;
        let p = proc_path(&fd);
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
/// under it (never following a symlink).
pub fn remove_all(dir: BorrowedFd<'_>, name: &OsStr) -> Result<(), Errno> {
    match rfs::unlinkat(dir, name, AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) => return Ok(()),
        Err(Errno::ISDIR | Errno::PERM) => {}
        Err(e) => return Err(e),
    }
    let sub = match rfs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(d) => d,
        Err(Errno::NOENT) => return Ok(()),
        Err(e) => return Err(e),
    };
    let mut names = Vec::new();
    for e in rfs::Dir::read_from(&sub)? {
        let e = e?;
        let n = e.file_name().to_bytes();
        if n != b"." && n != b".." {
            names.push(OsStr::from_bytes(n).to_os_string());
        }
    }
    for n in names {
        remove_all(sub.as_fd(), &n)?;
    }
    match rfs::unlinkat(dir, name, AtFlags::REMOVEDIR) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(e) => Err(e),
    }
}

/// How many entries a tree holds (the tree itself not counted).
pub fn count_entries(root: &Root, rel: &Path) -> u64 {
    let Ok(names) = root.names(rel) else {
        return 0;
    };
    let mut n = 0;
    for name in names {
        n += 1;
        let p = rel.join(&name);
        if let Ok(Some(st)) = root.stat(&p) {
            if rfs::FileType::from_raw_mode(st.st_mode) == rfs::FileType::Directory {
                n += count_entries(root, &p);
            }
        }
    }
    n
}

/// Wrap an errno with what was done to which path.
pub fn err(e: Errno, what: &str, p: &Path) -> io::Error {
    ctx(e, what, p)
}

//! Writing the backing dir, one applied change at a time: missing parents
//! and directories made, each file and symlink written to a temp name
//! beside its target and renamed over it (mode, owner when root, times
//! and user xattrs set before the rename; hard links among the applied
//! files kept), deletions, and directories' own attributes.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, Stat, Timespec, Timestamps};
use rustix::io::Errno;

use super::Layers;
use super::fsops::{self, split};

fn io_err(e: Errno, what: &str, p: &Path) -> io::Error {
    fsops::err(e, what, p)
}

/// Make the backing dir's parents of `rel` exist (as the stage has them).
pub(super) fn parents(l: &Layers, rel: &Path) -> io::Result<()> {
    let mut missing = Vec::new();
    let mut p = rel.parent();
    while let Some(d) = p.filter(|d| !d.as_os_str().is_empty()) {
        match l
            .lower
            .stat(d)
            .map_err(|e| io_err(e, "stat", &l.lower.path.join(d)))?
        {
            Some(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => break,
            _ => missing.push(d.to_path_buf()),
        }
        p = d.parent();
    }
    for d in missing.iter().rev() {
        ensure_dir(l, d)?;
    }
    Ok(())
}

/// Directory `rel` exists in the backing dir (replacing a non-directory).
pub(super) fn ensure_dir(l: &Layers, rel: &Path) -> io::Result<()> {
    let (parent, name) = split(rel);
    // Its parent there already (one lookup of the path), or made.
    let dir = match l.lower.dir(parent) {
        Ok(d) => d,
        Err(_) => {
            parents(l, rel)?;
            l.lower
                .dir(parent)
                .map_err(|e| io_err(e, "open", &l.lower.path.join(parent)))?
        }
    };
    match crate::stage::walk::stat_at(dir.as_fd(), name)
        .map_err(|e| io_err(e, "stat", &l.lower.path.join(rel)))?
    {
        Some(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => return Ok(()),
        Some(_) => fsops::remove_all(dir.as_fd(), name)
            .map_err(|e| io_err(e, "remove", &l.lower.path.join(rel)))?,
        None => {}
    }
    let mode = l
        .upper
        .stat(rel)
        .ok()
        .flatten()
        .map_or(0o755, |s| s.st_mode & 0o7777);
    match rfs::mkdirat(&dir, name, Mode::from_raw_mode(mode | 0o700)) {
        Ok(()) | Err(Errno::EXIST) => Ok(()),
        Err(e) => Err(io_err(e, "mkdir", &l.lower.path.join(rel))),
    }
}

/// A temp name beside `name` in the same directory: the commit's pid and
/// a hash of `name`, short whatever `name`'s length (a name of 250 bytes
/// with a prefix and suffix around it passed the 255-byte limit, and that
/// commit failed partway on every run).
fn temp_name(name: &OsStr) -> OsString {
    use std::hash::{Hash, Hasher};
    // SipHash with fixed keys: the same name gives the same temp name.
    let mut h = std::hash::DefaultHasher::new();
    name.hash(&mut h);
    OsString::from(format!(
        ".zm-commit.{}.{:016x}",
        std::process::id(),
        h.finish()
    ))
}

/// Write the stage's `rel` (file, symlink, fifo or socket) into the
/// backing dir: at a temp name, then renamed over the target.
pub(super) fn put(
    l: &Layers,
    rel: &Path,
    root: bool,
    links: &mut HashMap<(u64, u64), PathBuf>,
) -> io::Result<()> {
    let lower_p = l.lower.path.join(rel);
    let up = l
        .upper
        .stat(rel)
        .map_err(|e| io_err(e, "stat", &l.upper.path.join(rel)))?
        .ok_or_else(|| io::Error::other(format!("{}: gone from the stage", rel.display())))?;
    parents(l, rel)?;
    let (parent, name) = split(rel);
    let dir = l
        .lower
        .dir(parent)
        .map_err(|e| io_err(e, "open", &l.lower.path.join(parent)))?;
    // A directory in the way of a file goes first.
    if let Some(st) = l.lower.stat(rel).map_err(|e| io_err(e, "stat", &lower_p))? {
        if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
            fsops::remove_all(dir.as_fd(), name).map_err(|e| io_err(e, "remove", &lower_p))?;
        }
    }
    let tmp = temp_name(name);
    let _ = rfs::unlinkat(&dir, &tmp, AtFlags::empty());
    let times = Timestamps {
        last_access: Timespec {
            tv_sec: up.st_atime,
            tv_nsec: up.st_atime_nsec as _,
        },
        last_modification: Timespec {
            tv_sec: up.st_mtime,
            tv_nsec: up.st_mtime_nsec as _,
        },
    };
    match FileType::from_raw_mode(up.st_mode) {
        // Same filesystem: the staged file itself moves into place (one
        // atomic rename: no copy, its mode, owner and times kept, and it
        // leaves the stage at once). Only a file of one name: another
        // name of it left in the stage (a link not committed, or one in
        // a checkpoint's layer) would go on writing the backing file
        // after the commit, unreviewed. Those are copied, and hard links
        // among the files committed kept.
        FileType::RegularFile
            if up.st_nlink == 1 && move_into(l, rel, dir.as_fd(), name).is_ok() =>
        {
            return Ok(());
        }
        FileType::RegularFile => {
            let key = (up.st_dev, up.st_ino);
            let linked = match links.get(&key) {
                Some(first) if up.st_nlink > 1 => {
                    let (fp, fname) = split(first);
                    let fdir = l
                        .lower
                        .dir(fp)
                        .map_err(|e| io_err(e, "open", &l.lower.path.join(fp)))?;
                    rfs::linkat(&fdir, fname, &dir, &tmp, AtFlags::empty())
                        .map_err(|e| io_err(e, "link", &lower_p))?;
                    true
                }
                _ => false,
            };
            if !linked {
                copy_file(l, rel, &up, dir.as_fd(), &tmp, root, &times).inspect_err(|_| {
                    let _ = rfs::unlinkat(&dir, &tmp, AtFlags::empty());
                })?;
                if up.st_nlink > 1 {
                    links.insert(key, rel.to_path_buf());
                }
            }
        }
        FileType::Symlink => {
            let target = l
                .upper
                .readlink(rel)
                .map_err(|e| io_err(e, "readlink", &l.upper.path.join(rel)))?;
            rfs::symlinkat(target.as_os_str(), &dir, &tmp)
                .map_err(|e| io_err(e, "symlink", &lower_p))?;
            if root {
                let _ = rfs::chownat(
                    &dir,
                    &tmp,
                    Some(rfs::Uid::from_raw(up.st_uid)),
                    Some(rfs::Gid::from_raw(up.st_gid)),
                    AtFlags::SYMLINK_NOFOLLOW,
                );
            }
            let _ = rfs::utimensat(&dir, &tmp, &times, AtFlags::SYMLINK_NOFOLLOW);
        }
        FileType::Fifo | FileType::Socket => {
            rfs::mknodat(
                &dir,
                &tmp,
                FileType::from_raw_mode(up.st_mode),
                Mode::from_raw_mode(up.st_mode & 0o7777),
                0,
            )
            .map_err(|e| io_err(e, "mknod", &lower_p))?;
        }
        _ => return Ok(()),
    }
    rfs::renameat(&dir, &tmp, &dir, name).map_err(|e| io_err(e, "rename", &lower_p))
}

/// Rename the stage's regular file `rel` over `dir/name` in the backing
/// dir, every xattr taken off it first but the `user.*` ones (which
/// `changes` compares and shows) and its SELinux label: a commit carries
/// what a copy does ([`copy_file`]). Left behind: the overlay's own (a
/// worker's `user.overlay.whiteout` must not reach a dir a later
/// unprivileged overlay may stack), and what a worker set that `changes`
/// does not show: file capabilities (`security.capability`: a staged copy
/// of a program given `cap_setuid` ran as root for any user once
/// committed), other `security.*` and `trusted.*` names, and ACLs. Fails
/// (EXDEV) when the stage is on another filesystem.
fn move_into(l: &Layers, rel: &Path, dir: BorrowedFd<'_>, name: &OsStr) -> Result<(), Errno> {
    let (parent, _) = split(rel);
    let from = l.upper.dir(parent)?;
    let fd = l.upper.open_at(rel, OFlags::PATH)?;
    let p = PathBuf::from(format!("/proc/self/fd/{}", {
        use std::os::fd::AsRawFd;
        fd.as_raw_fd()
    }));
    let mut buf = vec![0u8; 64 * 1024];
    let n = rfs::listxattr(&p, &mut buf[..]).unwrap_or(0);
    for x in buf[..n].split(|b| *b == 0).filter(|s| !s.is_empty()) {
        let kept =
            x.starts_with(b"user.") && !x.starts_with(b"user.overlay.") || x == b"security.selinux";
        if !kept {
            rfs::removexattr(&p, OsStr::from_bytes(x))?;
        }
    }
    rfs::renameat(&from, name, dir, name)
}

/// The stage's regular file `rel` into `dir/tmp`: cloned where the
/// filesystem can, else copied; attributes set; flushed.
fn copy_file(
    l: &Layers,
    rel: &Path,
    up: &Stat,
    dir: BorrowedFd<'_>,
    tmp: &OsStr,
    root: bool,
    times: &Timestamps,
) -> io::Result<()> {
    let lower_p = l.lower.path.join(rel);
    let src = l
        .upper
        .open_at(rel, OFlags::RDONLY)
        .map_err(|e| io_err(e, "open", &l.upper.path.join(rel)))?;
    let dst: OwnedFd = rfs::openat(
        dir,
        tmp,
        OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .map_err(|e| io_err(e, "create", &lower_p))?;
    if rfs::ioctl_ficlone(&dst, &src).is_err() {
        let mut left = up.st_size as u64;
        while left > 0 {
            match rfs::copy_file_range(&src, None, &dst, None, left.min(1 << 30) as usize) {
                Ok(0) => break,
                Ok(n) => left -= n as u64,
                // Between filesystems of different kinds: read and write.
                Err(Errno::XDEV | Errno::OPNOTSUPP | Errno::INVAL | Errno::NOSYS) => {
                    let mut from = std::fs::File::from(src.try_clone()?);
                    let mut to = std::fs::File::from(dst.try_clone()?);
                    use std::io::Seek;
                    let done = up.st_size as u64 - left;
                    from.seek(std::io::SeekFrom::Start(done))?;
                    to.seek(std::io::SeekFrom::Start(done))?;
                    std::io::copy(&mut from, &mut to).map_err(|e| {
                        io::Error::new(e.kind(), format!("copy {}: {e}", lower_p.display()))
                    })?;
                    break;
                }
                Err(e) => return Err(io_err(e, "copy", &lower_p)),
            }
        }
    }
    owner_and_mode(&dst, up, root, &lower_p)?;
    for (name, value) in l.upper.user_xattrs(rel).unwrap_or_default() {
        rfs::fsetxattr(&dst, name.as_str(), &value, rfs::XattrFlags::empty())
            .map_err(|e| io_err(e, "setxattr", &lower_p))?;
    }
    rfs::futimens(&dst, times).map_err(|e| io_err(e, "set times of", &lower_p))
}

/// Remove `rel` (a whole tree) from the backing dir.
pub(super) fn delete(l: &Layers, rel: &Path) -> io::Result<()> {
    let (parent, name) = split(rel);
    match l.lower.dir(parent) {
        Ok(dir) => fsops::remove_all(dir.as_fd(), name)
            .map_err(|e| io_err(e, "remove", &l.lower.path.join(rel))),
        Err(Errno::NOENT | Errno::NOTDIR) => Ok(()),
        Err(e) => Err(io_err(e, "open", &l.lower.path.join(parent))),
    }
}

/// A directory's mode (and owner, as root) and user xattrs as staged.
pub(super) fn dir_attrs(l: &Layers, rel: &Path, root: bool) -> io::Result<()> {
    // Each side looked up once (a path of any depth), then used by fd.
    let Ok(ufd) = l.upper.open_at(rel, OFlags::PATH) else {
        return Ok(());
    };
    let Ok(up) = rfs::fstat(&ufd) else {
        return Ok(());
    };
    let p = l.lower.path.join(rel);
    let fd = l.lower.dir(rel).map_err(|e| io_err(e, "open", &p))?;
    owner_and_mode(&fd, &up, root, &p)?;
    let want = fsops::user_xattrs_of(&ufd).unwrap_or_default();
    for (name, _) in fsops::user_xattrs_of(&fd).unwrap_or_default() {
        if !want.iter().any(|(n, _)| *n == name) {
            let _ = rfs::fremovexattr(&fd, name.as_str());
        }
    }
    for (name, value) in want {
        rfs::fsetxattr(&fd, name.as_str(), &value, rfs::XattrFlags::empty())
            .map_err(|e| io_err(e, "setxattr", &p))?;
    }
    Ok(())
}

/// The staged owner (as root) and mode given to `fd`, the backing
/// object at `p`.
fn owner_and_mode(fd: &OwnedFd, up: &rfs::Stat, root: bool, p: &Path) -> io::Result<()> {
    if root {
        rfs::fchown(
            fd,
            Some(rfs::Uid::from_raw(up.st_uid)),
            Some(rfs::Gid::from_raw(up.st_gid)),
        )
        .map_err(|e| io_err(e, "chown", p))?;
    }
    rfs::fchmod(fd, Mode::from_raw_mode(up.st_mode & 0o7777)).map_err(|e| io_err(e, "chmod", p))
}

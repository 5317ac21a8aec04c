//! fd-relative access to the backing directories.
//!
//! Every path the daemon touches is resolved one name at a time from a
//! directory fd it already holds, with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS)` and `O_NOFOLLOW`: a symlink
//! in a backing dir is an object to show, never a way to walk somewhere else.
//! Inodes are held as `O_PATH` fds; I/O reopens such an fd through
//! `/proc/self/fd/N`, which names exactly the inode already held (no path
//! resolution happens there).
//!
//! A leaf allowed `unsafe` (`#[allow(unsafe_code)]` in `lib.rs`, inherited
//! by its submodules; the crate's unsafe inventory is in `lib.rs` and
//! `docs/layout.md`). It is written against `rustix`, whose wrappers are
//! safe; its `unsafe` blocks are `fchmodat2` (`emptypath`) and kernel file
//! handles (`handle`). It knows nothing of FUSE, of staging or of workers:
//! the FUSE transport is `fuse::sys`, the watcher `mount::watch`, the
//! overlay and the mapped log `stage::sys`, the PID namespace
//! `isolate::pidns`.
//!
//! - this file: names, `/proc/self/fd` reopening, the fd-relative calls.
//! - `creds`: switching to the caller's credentials ([`AsCaller`]).
//! - `emptypath`: chmod and utimes on a held fd itself (`AT_EMPTY_PATH`),
//!   where the kernel allows, before `/proc/self/fd`.
//! - `handle`: kernel file handles ([`InodeHandle`]).

mod creds;
mod emptypath;
mod handle;
#[cfg(test)]
pub(crate) mod tests;

pub use creds::{AsCaller, Caller, caller_has, caller_has_sys_admin};
pub use handle::{InodeHandle, handle_of, open_by_handle, open_handle_for_reading};

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{self as rfs, AtFlags, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

pub use rustix::fs::{FileType, Stat, StatVfs, Timestamps};

/// Result of a backing call: the raw errno on failure.
pub type Sys<T> = Result<T, Errno>;

const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_MAGICLINKS)
    .union(ResolveFlags::NO_SYMLINKS);

/// Reject anything but one plain directory-entry name.
pub fn check_name(name: &OsStr) -> Sys<()> {
    let b = name.as_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') || b.contains(&0) {
        return Err(Errno::INVAL);
    }
    if b.len() > 255 {
        return Err(Errno::NAMETOOLONG);
    }
    Ok(())
}

/// The daemon's handle on `/proc/self/fd`, used to reopen `O_PATH` fds.
#[derive(Debug)]
pub struct ProcFds(OwnedFd);

impl ProcFds {
    pub fn open() -> Sys<Self> {
        rfs::open(
            "/proc/self/fd",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map(ProcFds)
    }

    fn name(fd: BorrowedFd<'_>) -> String {
        fd.as_raw_fd().to_string()
    }

    /// Open the inode held by `fd` for I/O with `flags`. Creation flags are
    /// stripped: this never makes a new name.
    pub fn reopen(&self, fd: BorrowedFd<'_>, flags: i32) -> Sys<OwnedFd> {
        let flags = OFlags::from_bits_retain(flags as u32)
            & !(OFlags::CREATE | OFlags::EXCL | OFlags::NOCTTY | OFlags::NOFOLLOW);
        rfs::openat(
            &self.0,
            Self::name(fd),
            flags | OFlags::CLOEXEC,
            Mode::empty(),
        )
    }

    /// A directory held as `O_PATH`, opened for reading its entries.
    pub fn open_dir(&self, fd: BorrowedFd<'_>) -> Sys<OwnedFd> {
        self.reopen(fd, (OFlags::RDONLY | OFlags::DIRECTORY).bits() as i32)
    }

    /// chmod the inode itself (symlinks have no mode of their own: EOPNOTSUPP).
    pub fn chmod(&self, fd: BorrowedFd<'_>, mode: u32) -> Sys<()> {
        if let Some(r) = emptypath::chmod(fd, mode) {
            return r;
        }
        rfs::chmodat(
            &self.0,
            Self::name(fd),
            Mode::from_raw_mode(mode),
            AtFlags::empty(),
        )
    }

    /// Set times of a non-symlink inode.
    pub fn utimens(&self, fd: BorrowedFd<'_>, times: &Timestamps) -> Sys<()> {
        if let Some(r) = emptypath::utimens(fd, times) {
            return r;
        }
        rfs::utimensat(&self.0, Self::name(fd), times, AtFlags::empty())
    }

    /// Hard-link the inode held by `fd` as `dir/name`.
    pub fn link(&self, fd: BorrowedFd<'_>, dir: BorrowedFd<'_>, name: &OsStr) -> Sys<()> {
        check_name(name)?;
        rfs::linkat(&self.0, Self::name(fd), dir, name, AtFlags::SYMLINK_FOLLOW)
    }

    fn path(fd: BorrowedFd<'_>) -> String {
        format!("/proc/self/fd/{}", fd.as_raw_fd())
    }

    /// An xattr of the inode held by `fd`: on the fd itself when it is
    /// open for I/O (a file registered for passthrough keeps such an fd),
    /// else through `/proc/self/fd/N` (an `O_PATH` fd, which `fgetxattr`
    /// refuses with EBADF at once: the walk through `/proc` is what costs).
    pub fn getxattr(&self, fd: BorrowedFd<'_>, name: &OsStr, buf: &mut Vec<u8>) -> Sys<usize> {
        if buf.capacity() == 0 {
            return match rfs::fgetxattr_query(fd, name) {
                Err(Errno::BADF) => rfs::getxattr_query(Self::path(fd), name),
                r => r,
            };
        }
        let cap = buf.capacity();
        buf.resize(cap, 0);
        let n = match rfs::fgetxattr(fd, name, &mut buf[..]) {
            Err(Errno::BADF) => rfs::getxattr(Self::path(fd), name, &mut buf[..]),
            r => r,
        }?;
        buf.truncate(n);
        Ok(n)
    }

    pub fn listxattr(&self, fd: BorrowedFd<'_>, buf: &mut Vec<u8>) -> Sys<usize> {
        if buf.capacity() == 0 {
            return rfs::listxattr_query(Self::path(fd));
        }
        let cap = buf.capacity();
        buf.resize(cap, 0);
        let n = rfs::listxattr(Self::path(fd), &mut buf[..])?;
        buf.truncate(n);
        Ok(n)
    }

    pub fn setxattr(&self, fd: BorrowedFd<'_>, name: &OsStr, value: &[u8], flags: i32) -> Sys<()> {
        let flags = rfs::XattrFlags::from_bits_retain(flags as u32);
        rfs::setxattr(Self::path(fd), name, value, flags)
    }

    pub fn removexattr(&self, fd: BorrowedFd<'_>, name: &OsStr) -> Sys<()> {
        rfs::removexattr(Self::path(fd), name)
    }
}

/// Open a zone's backing directory once, at mount.
pub fn open_zone_root(path: &Path) -> Sys<OwnedFd> {
    rfs::open(
        path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Look up one name under `dir` without following a symlink.
pub fn lookup(dir: BorrowedFd<'_>, name: &OsStr) -> Sys<OwnedFd> {
    check_name(name)?;
    rfs::openat2(
        dir,
        name,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        RESOLVE,
    )
}

/// Reach `dir/name` again for a node the daemon found there before: an
/// `O_PATH` fd on it (never following a symlink) and its stat, with the
/// daemon's own rights even while the thread acts as a caller (like
/// reopening a kernel file handle: the object was already reached, the
/// `O_PATH` fd grants no access, and what is done with it next runs as the
/// caller again).
pub fn reach_again(dir: BorrowedFd<'_>, name: &OsStr) -> Sys<(OwnedFd, Stat)> {
    creds::as_daemon(|| {
        let fd = lookup(dir, name)?;
        let st = stat(fd.as_fd())?;
        Ok((fd, st))
    })
}

/// The stat of what `rel` names beneath directory `root` (never
/// following a symlink, nor leaving `root`), looked up with the daemon's
/// own rights; None if nothing is there (or it can't be reached).
pub fn stat_beneath(root: &Path, rel: &Path) -> Option<Stat> {
    creds::as_daemon(|| {
        if rel.as_os_str().is_empty() {
            return None;
        }
        let dir = open_zone_root(root).ok()?;
        // Any length (a path past PATH_MAX a part at a time).
        let fd = crate::stage::walk::open_deep(
            dir.as_fd(),
            rel,
            OFlags::PATH | OFlags::NOFOLLOW,
            RESOLVE,
        )
        .ok()?;
        stat(fd.as_fd()).ok()
    })
}

/// Whether `e` says this process (EMFILE) or the system (ENFILE) has no fd
/// left.
pub fn out_of_fds(e: Errno) -> bool {
    e == Errno::MFILE || e == Errno::NFILE
}

/// The soft limit on open files (`RLIMIT_NOFILE`), if any.
pub fn nofile_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

/// Create (or, without `O_EXCL`, open) a regular file under `dir`.
pub fn create(dir: BorrowedFd<'_>, name: &OsStr, flags: i32, mode: u32) -> Sys<OwnedFd> {
    check_name(name)?;
    let flags = OFlags::from_bits_retain(flags as u32) & !OFlags::NOCTTY;
    rfs::openat2(
        dir,
        name,
        flags | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode),
        RESOLVE,
    )
}

pub fn stat(fd: BorrowedFd<'_>) -> Sys<Stat> {
    rfs::fstat(fd)
}

/// The attributes of `name` in `dir`, itself (a symlink is not followed).
pub fn stat_at(dir: BorrowedFd<'_>, name: &OsStr) -> Sys<Stat> {
    check_name(name)?;
    rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
}

/// Whether the object held by `fd` has no name left (a removed
/// directory or an unlinked file).
pub fn is_deleted(fd: BorrowedFd<'_>) -> bool {
    stat(fd).is_ok_and(|st| st.st_nlink == 0)
}

pub fn statvfs(fd: BorrowedFd<'_>) -> Sys<StatVfs> {
    rfs::fstatvfs(fd)
}

pub fn mkdir(dir: BorrowedFd<'_>, name: &OsStr, mode: u32) -> Sys<()> {
    check_name(name)?;
    rfs::mkdirat(dir, name, Mode::from_raw_mode(mode))
}

pub fn symlink(dir: BorrowedFd<'_>, name: &OsStr, target: &Path) -> Sys<()> {
    check_name(name)?;
    rfs::symlinkat(target, dir, name)
}

/// mknod of a regular file, FIFO or socket. Device nodes are refused with
/// EPERM whatever the caller's privileges (DESIGN §3).
pub fn mknod(dir: BorrowedFd<'_>, name: &OsStr, mode: u32) -> Sys<()> {
    check_name(name)?;
    let kind = FileType::from_raw_mode(mode);
    match kind {
        FileType::RegularFile | FileType::Fifo | FileType::Socket => {}
        _ => return Err(Errno::PERM),
    }
    rfs::mknodat(dir, name, kind, Mode::from_raw_mode(mode), 0)
}

pub fn unlink(dir: BorrowedFd<'_>, name: &OsStr) -> Sys<()> {
    check_name(name)?;
    rfs::unlinkat(dir, name, AtFlags::empty())
}

pub fn rmdir(dir: BorrowedFd<'_>, name: &OsStr) -> Sys<()> {
    check_name(name)?;
    rfs::unlinkat(dir, name, AtFlags::REMOVEDIR)
}

pub fn rename(
    from_dir: BorrowedFd<'_>,
    from: &OsStr,
    to_dir: BorrowedFd<'_>,
    to: &OsStr,
    flags: u32,
) -> Sys<()> {
    check_name(from)?;
    check_name(to)?;
    rfs::renameat_with(
        from_dir,
        from,
        to_dir,
        to,
        rfs::RenameFlags::from_bits_retain(flags),
    )
}

pub fn readlink(fd: BorrowedFd<'_>) -> Sys<OsString> {
    let target = rfs::readlinkat(fd, "", Vec::new())?;
    Ok(OsString::from(std::ffi::OsStr::from_bytes(
        target.as_bytes(),
    )))
}

/// chown without following a symlink (works on `O_PATH` fds).
pub fn chown(fd: BorrowedFd<'_>, uid: Option<u32>, gid: Option<u32>) -> Sys<()> {
    rfs::chownat(
        fd,
        "",
        uid.map(rustix::fs::Uid::from_raw),
        gid.map(rustix::fs::Gid::from_raw),
        AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
    )
}

/// Set times of the entry `dir/name` itself (for symlinks).
pub fn utimens_nofollow(dir: BorrowedFd<'_>, name: &OsStr, times: &Timestamps) -> Sys<()> {
    check_name(name)?;
    rfs::utimensat(dir, name, times, AtFlags::SYMLINK_NOFOLLOW)
}

pub fn truncate(fd: BorrowedFd<'_>, len: u64) -> Sys<()> {
    rfs::ftruncate(fd, len)
}

pub fn pread(fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> Sys<usize> {
    rustix::io::pread(fd, buf, offset)
}

pub fn pwrite(fd: BorrowedFd<'_>, buf: &[u8], offset: u64) -> Sys<usize> {
    rustix::io::pwrite(fd, buf, offset)
}

pub fn fsync(fd: BorrowedFd<'_>, datasync: bool) -> Sys<()> {
    if datasync {
        rfs::fdatasync(fd)
    } else {
        rfs::fsync(fd)
    }
}

pub fn fallocate(fd: BorrowedFd<'_>, mode: i32, offset: u64, len: u64) -> Sys<()> {
    rfs::fallocate(
        fd,
        rfs::FallocateFlags::from_bits_retain(mode as u32),
        offset,
        len,
    )
}

/// `SEEK_DATA` / `SEEK_HOLE` (the only whences the kernel forwards).
pub fn seek(fd: BorrowedFd<'_>, offset: i64, whence: i32) -> Sys<u64> {
    let pos = match whence {
        libc::SEEK_SET => rfs::SeekFrom::Start(offset.max(0) as u64),
        libc::SEEK_CUR => rfs::SeekFrom::Current(offset),
        libc::SEEK_END => rfs::SeekFrom::End(offset),
        libc::SEEK_DATA => rfs::SeekFrom::Data(offset.max(0) as u64),
        libc::SEEK_HOLE => rfs::SeekFrom::Hole(offset.max(0) as u64),
        _ => return Err(Errno::INVAL),
    };
    rfs::seek(fd, pos)
}

pub fn copy_file_range(
    fd_in: BorrowedFd<'_>,
    mut off_in: u64,
    fd_out: BorrowedFd<'_>,
    mut off_out: u64,
    len: u64,
) -> Sys<usize> {
    let len = usize::try_from(len).unwrap_or(usize::MAX);
    let (start_in, start_out) = (off_in, off_out);
    let n = rfs::copy_file_range(fd_in, Some(&mut off_in), fd_out, Some(&mut off_out), len)?;
    if n > 0 || len == 0 {
        return Ok(n);
    }
    // 0 means "at or past the end of the source" to the caller. The VFS
    // checks that against the size the source's own inode caches, and a
    // staged zone's overlay inode can lag the file it stands for: after a
    // checkpoint the same file is reached through two overlay mounts (a
    // handle opened before it, the kernel's passthrough file among them,
    // writes through the old one), and only the mount written through
    // learns the new size. `fstat` asks the real file; where it says
    // there is data past `off_in`, copy it here.
    let size = u64::try_from(rfs::fstat(fd_in)?.st_size).unwrap_or(0);
    if start_in >= size {
        return Ok(0);
    }
    let count = (size - start_in).min(len as u64);
    let same = {
        let (a, b) = (rfs::fstat(fd_in)?, rfs::fstat(fd_out)?);
        (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
    };
    if same && start_out < start_in + count && start_in < start_out + count {
        // What copy_file_range(2) says of overlapping ranges in one file.
        return Err(Errno::INVAL);
    }
    copy_by_hand(fd_in, start_in, fd_out, start_out, count)
}

/// Up to `count` bytes from `fd_in` at `off_in` to `fd_out` at
/// `off_out` by reads and writes, at most 1 MiB per call (a short count,
/// as copy_file_range(2) may give); stops early at the end of the source.
fn copy_by_hand(
    fd_in: BorrowedFd<'_>,
    off_in: u64,
    fd_out: BorrowedFd<'_>,
    off_out: u64,
    count: u64,
) -> Sys<usize> {
    const CHUNK: usize = 1 << 20;
    let mut buf = vec![0u8; (count as usize).min(CHUNK)];
    let got = pread(fd_in, &mut buf, off_in)?;
    let mut done = 0;
    while done < got {
        let n = pwrite(fd_out, &buf[done..got], off_out + done as u64)?;
        if n == 0 {
            break;
        }
        done += n;
    }
    Ok(done)
}

/// One directory entry as read from the backing store.
#[derive(Debug, Clone)]
pub struct DirEntry {
    pub name: OsString,
    pub kind: FileType,
    pub ino: u64,
}

/// Read every entry of a directory (an fd opened for reading), without
/// `.` and `..`.
pub fn read_dir(fd: OwnedFd) -> Sys<Vec<DirEntry>> {
    let mut dir = rfs::Dir::new(fd)?;
    let mut out = Vec::new();
    while let Some(entry) = dir.read() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        out.push(DirEntry {
            name: OsStr::from_bytes(name).to_os_string(),
            kind: entry.file_type(),
            ino: entry.ino(),
        });
    }
    Ok(out)
}

/// Raise the soft open-file limit to the hard one (the daemon holds fds).
pub fn raise_nofile_limit() {
    let lim = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    if let Some(max) = lim.maximum {
        let _ = rustix::process::setrlimit(
            rustix::process::Resource::Nofile,
            rustix::process::Rlimit {
                current: Some(max),
                maximum: Some(max),
            },
        );
    }
}

/// The daemon applies modes exactly as the kernel sends them (the kernel
/// has already applied the caller's umask).
pub fn clear_umask() {
    rustix::process::umask(Mode::empty());
}

/// Whether this thread holds CAP_SYS_ADMIN (FUSE passthrough needs it to
/// register backing files).
pub fn has_sys_admin() -> bool {
    rustix::thread::capabilities(None).is_ok_and(|c| {
        c.effective
            .contains(rustix::thread::CapabilitySet::SYS_ADMIN)
    })
}

/// Borrow helper for callers holding `OwnedFd`s.
pub fn b(fd: &OwnedFd) -> BorrowedFd<'_> {
    fd.as_fd()
}

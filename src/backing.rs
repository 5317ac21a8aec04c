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
//! The only raw system interface of the crate. It is written against
//! `rustix`, whose wrappers are safe; no `unsafe` block is needed so far.

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
        rfs::chmodat(
            &self.0,
            Self::name(fd),
            Mode::from_raw_mode(mode),
            AtFlags::empty(),
        )
    }

    /// Set times of a non-symlink inode.
    pub fn utimens(&self, fd: BorrowedFd<'_>, times: &Timestamps) -> Sys<()> {
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

    pub fn getxattr(&self, fd: BorrowedFd<'_>, name: &OsStr, buf: &mut Vec<u8>) -> Sys<usize> {
        if buf.capacity() == 0 {
            return rfs::getxattr_query(Self::path(fd), name);
        }
        let cap = buf.capacity();
        buf.resize(cap, 0);
        let n = rfs::getxattr(Self::path(fd), name, &mut buf[..])?;
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
    rfs::copy_file_range(fd_in, Some(&mut off_in), fd_out, Some(&mut off_out), len)
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

/// Who is making a request, as the kernel tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    /// The calling thread (FUSE passes the thread id).
    pub pid: u32,
}

/// The supplementary groups of a thread, from `/proc/PID/status`
/// (empty when it is gone).
fn groups_of(pid: u32) -> Vec<rustix::fs::Gid> {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return Vec::new();
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| {
            g.split_whitespace()
                .filter_map(|n| n.parse::<u32>().ok())
                .map(rustix::fs::Gid::from_raw)
                .collect()
        })
        .unwrap_or_default()
}

/// While alive, this thread's file-system credentials are the caller's:
/// effective uid/gid (and so fsuid/fsgid) and supplementary groups. A
/// non-zero effective uid also drops the thread's effective capabilities,
/// so the host kernel checks the caller's rights as if it acted itself.
/// Only a daemon running as root switches, and only for callers other than
/// root; the previous credentials come back on drop.
#[derive(Debug)]
#[must_use]
pub struct AsCaller {
    /// The daemon's own supplementary groups, when switched.
    saved: Option<Vec<rustix::fs::Gid>>,
}

thread_local! {
    /// The uid this thread acts as while an [`AsCaller`] is alive.
    static ACTING_AS: std::cell::Cell<Option<u32>> = const { std::cell::Cell::new(None) };
}

/// Run `f` with the daemon's effective uid (and so its capabilities) even
/// if this thread is acting as a caller, then act as the caller again.
fn as_daemon<T>(f: impl FnOnce() -> T) -> T {
    let Some(uid) = ACTING_AS.get() else {
        return f();
    };
    if let Err(e) = rustix::thread::set_thread_res_uid(None, Some(rustix::fs::Uid::ROOT), None) {
        // Still the caller: `f` fails with the caller's rights, no worse.
        tracing::warn!("cannot take back the daemon's uid: {e}");
        return f();
    }
    let r = f();
    let back = rustix::thread::set_thread_res_uid(None, Some(rustix::fs::Uid::from_raw(uid)), None);
    if let Err(e) = back {
        // Going on as root would act for the caller with the daemon's
        // rights: stopping is the only safe answer.
        tracing::error!("cannot act as uid {uid} again: {e}; aborting");
        std::process::abort();
    }
    r
}

impl AsCaller {
    pub fn enter(c: &Caller) -> Sys<AsCaller> {
        // The process's euid, read once (a thread's own changes only while
        // an `AsCaller` is alive, and they never nest).
        static DAEMON_IS_ROOT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let daemon_is_root = *DAEMON_IS_ROOT.get_or_init(|| rustix::process::geteuid().is_root());
        if !daemon_is_root || c.uid == 0 {
            return Ok(AsCaller { saved: None });
        }
        let saved = rustix::process::getgroups()?;
        let groups = groups_of(c.pid);
        // Order matters: groups and gid while still root, then the uid.
        rustix::thread::set_thread_groups(&groups)?;
        let undo = AsCaller { saved: Some(saved) };
        rustix::thread::set_thread_res_gid(None, Some(rustix::fs::Gid::from_raw(c.gid)), None)?;
        rustix::thread::set_thread_res_uid(None, Some(rustix::fs::Uid::from_raw(c.uid)), None)?;
        ACTING_AS.set(Some(c.uid));
        Ok(undo)
    }
}

impl Drop for AsCaller {
    fn drop(&mut self) {
        let Some(saved) = self.saved.take() else {
            return;
        };
        ACTING_AS.set(None);
        let root_uid = rustix::fs::Uid::ROOT;
        let root_gid = rustix::fs::Gid::ROOT;
        let restored = rustix::thread::set_thread_res_uid(None, Some(root_uid), None)
            .and_then(|()| rustix::thread::set_thread_res_gid(None, Some(root_gid), None))
            .and_then(|()| rustix::thread::set_thread_groups(&saved));
        if let Err(e) = restored {
            // A FUSE thread left with a worker's identity would act for the
            // next caller with the wrong rights: stopping is the only safe
            // answer.
            tracing::error!("cannot restore the daemon's credentials: {e}; aborting");
            std::process::abort();
        }
    }
}

/// A kernel file handle for an inode (`name_to_handle_at`): a few bytes
/// that reopen it later, so a node need not hold an fd.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InodeHandle {
    pub mount_id: i32,
    handle_type: i32,
    bytes: Box<[u8]>,
}

const MAX_HANDLE_SZ: usize = 128;

/// `struct file_handle` with room for the largest handle.
#[repr(C)]
struct RawHandle {
    handle_bytes: u32,
    handle_type: i32,
    f_handle: [u8; MAX_HANDLE_SZ],
}

/// The handle of the inode `fd` refers to (`O_PATH` fds work).
pub fn handle_of(fd: BorrowedFd<'_>) -> Sys<InodeHandle> {
    let mut raw = RawHandle {
        handle_bytes: MAX_HANDLE_SZ as u32,
        handle_type: 0,
        f_handle: [0; MAX_HANDLE_SZ],
    };
    let mut mount_id: libc::c_int = 0;
    // SAFETY: `raw` is a live, writable `struct file_handle` whose
    // `handle_bytes` says how much room follows the header (the kernel
    // writes at most that much); the path is a NUL-terminated empty string,
    // which with AT_EMPTY_PATH names `fd` itself; `mount_id` is a valid
    // out-pointer. Nothing is retained after the call.
    let rc = unsafe {
        libc::name_to_handle_at(
            fd.as_raw_fd(),
            c"".as_ptr(),
            (&raw mut raw).cast::<libc::file_handle>(),
            &mut mount_id,
            libc::AT_EMPTY_PATH,
        )
    };
    if rc != 0 {
        return Err(Errno::from_raw_os_error(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        ));
    }
    let len = (raw.handle_bytes as usize).min(MAX_HANDLE_SZ);
    Ok(InodeHandle {
        mount_id,
        handle_type: raw.handle_type,
        bytes: raw.f_handle[..len].into(),
    })
}

/// Reopen an inode from its handle, as `O_PATH` (needs
/// CAP_DAC_READ_SEARCH). `mount_fd` is any fd on the same filesystem that
/// is not `O_PATH` (the kernel refuses those here).
pub fn open_by_handle(mount_fd: BorrowedFd<'_>, h: &InodeHandle) -> Sys<OwnedFd> {
    let mut raw = RawHandle {
        handle_bytes: h.bytes.len() as u32,
        handle_type: h.handle_type,
        f_handle: [0; MAX_HANDLE_SZ],
    };
    raw.f_handle[..h.bytes.len()].copy_from_slice(&h.bytes);
    // open_by_handle_at needs CAP_DAC_READ_SEARCH: with the daemon's own
    // rights even while the thread acts as a caller (the handle names an
    // object the daemon already reached; the O_PATH fd grants no access,
    // what is done with it next runs as the caller again).
    let fd = as_daemon(|| {
        // SAFETY: `raw` is a valid `struct file_handle` whose
        // `handle_bytes` matches the bytes copied after the header (at
        // most MAX_HANDLE_SZ, as produced by `handle_of`); the kernel only
        // reads it.
        unsafe {
            libc::open_by_handle_at(
                mount_fd.as_raw_fd(),
                (&raw mut raw).cast::<libc::file_handle>(),
                libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        }
    });
    if fd < 0 {
        return Err(Errno::from_raw_os_error(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        ));
    }
    // SAFETY: `fd` was just returned by open_by_handle_at, is open, and is
    // owned by nobody else.
    Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The unit-test twin of `tests/common`'s `require(Need::Root)`: under
    /// `CI=true` a missing need fails the test; otherwise the skip is
    /// printed and appended to `$ZONEMOUNT_SKIP_LOG`, which
    /// `scripts/test.sh` counts as skipped rather than passed.
    fn require_root() -> bool {
        if rustix::process::geteuid().is_root() {
            return true;
        }
        assert!(
            std::env::var("CI").map_or(true, |v| v != "true"),
            "this test needs root: under CI=true that is a failure, not a skip"
        );
        // `<suite>::<test>` as scripts/test.sh matches it against cargo's
        // report: the test binary's name without its hash, the thread's name.
        let exe = std::env::current_exe().unwrap_or_default();
        let stem = exe.file_stem().unwrap_or_default().to_string_lossy();
        let suite = stem.rsplit_once('-').map_or(&*stem, |(s, _)| s);
        let test = std::thread::current().name().unwrap_or("?").to_string();
        let line = format!("ZONEMOUNT-SKIP: {suite}::{test}: needs root\n");
        eprint!("{line}");
        if let Some(log) = std::env::var_os("ZONEMOUNT_SKIP_LOG") {
            use std::io::Write;
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .and_then(|mut f| f.write_all(line.as_bytes()))
                .expect("recording a skip");
        }
        false
    }

    #[test]
    fn handles_round_trip_when_privileged() {
        // open_by_handle_at needs CAP_DAC_READ_SEARCH.
        if !require_root() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let root = open_zone_root(dir.path()).unwrap();
        let h = handle_of(root.as_fd()).unwrap();
        let mount_fd = ProcFds::open().unwrap().open_dir(root.as_fd()).unwrap();
        let fd = open_by_handle(mount_fd.as_fd(), &h).unwrap();
        assert_eq!(
            stat(fd.as_fd()).unwrap().st_ino,
            stat(root.as_fd()).unwrap().st_ino
        );
    }
}

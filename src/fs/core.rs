//! The filesystem core: every operation as a method returning `FsResult`,
//! testable without the kernel. Mutating operations come in two steps: a
//! `check_*` that asks the policy (and may need approval), then the action.

use std::collections::{HashMap, VecDeque};
use std::ffi::{OsStr, OsString};
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{FileAttr, FileType as FuseType, INodeNo, TimeOrNow};
use lru::LruCache;
use parking_lot::Mutex;

use crate::backing::{self, AsCaller, Caller, FileType, ProcFds, Stat};
use crate::config::ZoneTable;
use crate::error::{FsError, FsResult, Refusal};
use crate::fs::inodes::{Anchor, Found, Inodes, Node, Passthrough, ROOT};
use crate::policy::{self, Action, AskItem, Decision, Loc, Op, Subject, ZoneRules};

use crate::fs::notes;

/// What a `check_*` step concluded.
#[derive(Debug)]
pub enum Gate {
    Go,
    Ask(Vec<AskItem>),
}

/// The attributes a `setattr` asks to change.
#[derive(Debug, Clone, Default)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeOrNow>,
    pub mtime: Option<TimeOrNow>,
    pub fh: Option<u64>,
}

impl SetAttr {
    /// Nothing to set: with `FUSE_HANDLE_KILLPRIV` this is the kernel
    /// asking the daemon to clear setuid/setgid (a write or a chown(-1,-1)
    /// by a caller without CAP_FSETID); see [`Core::setattr`].
    pub fn kills_privileges(&self) -> bool {
        self.mode.is_none()
            && self.uid.is_none()
            && self.gid.is_none()
            && self.size.is_none()
            && self.atime.is_none()
            && self.mtime.is_none()
    }
}

/// `mode` without the bits a write or chown by an unprivileged caller
/// clears: setuid, and setgid when group-executable (else it marks
/// mandatory locking and stays), as the kernel's `should_remove_suid`.
fn without_privileges(mode: u32) -> u32 {
    let mut m = mode & !libc::S_ISUID;
    if m & libc::S_IXGRP != 0 {
        m &= !libc::S_ISGID;
    }
    m
}

/// One directory entry as the kernel gets it.
#[derive(Debug, Clone)]
pub struct DirItem {
    pub offset: u64,
    pub name: OsString,
    pub kind: FuseType,
    pub ino: u64,
}

/// A getxattr/listxattr answer: the size asked for, or the data.
#[derive(Debug)]
pub enum XattrReply {
    Size(u32),
    Data(Vec<u8>),
}

/// Filesystem statistics for `statfs`.
#[derive(Debug, Default, Clone, Copy)]
pub struct Statfs {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
    pub frsize: u32,
}

#[derive(Debug)]
enum Handle {
    File {
        fd: Arc<OwnedFd>,
        zone: usize,
        writable: bool,
    },
    Dir {
        node: Arc<Node>,
        /// Listed at the first readdir, not at opendir: with the kernel
        /// caching directory contents (`FOPEN_CACHE_DIR`), most opens of a
        /// known directory never read it.
        entries: Mutex<Option<Vec<DirItem>>>,
    },
}

/// Files first opened read-only below this size read through the daemon
/// and the page cache rather than passthrough (see [`Core::passthrough_id`]).
pub const CACHED_READ_BYTES: u64 = 256 * 1024;

/// How many refusals [`Core::recent_refusals`] keeps.
pub const RECENT_REFUSALS: usize = 32;

/// One refusal as `status` and the audit log show it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RecentRefusal {
    pub at: SystemTime,
    pub action: Action,
    /// The path as the worker sees it (a rename's source).
    pub path: String,
    #[serde(skip)]
    pub refusal: Refusal,
    /// The errno's name, e.g. `EROFS`.
    pub errno: &'static str,
    /// One line, as `check` would say it.
    pub reason: String,
    /// The whole explanation, with what would work instead.
    pub message: String,
}

/// Settings of a mount that the core needs.
#[derive(Debug, Clone)]
pub struct CoreOptions {
    /// How long the kernel may keep names (found and missing) and
    /// attributes of rw zones.
    pub ttl: Duration,
    /// The same for ro zones and the mount root, which change only from
    /// the host side.
    pub ttl_ro: Duration,
    /// Use kernel passthrough for file data where the kernel and our
    /// privileges allow it.
    pub passthrough: bool,
    pub owner_uid: u32,
    pub owner_gid: u32,
}

/// How file data moves between a worker and the backing files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoMode {
    /// Kernel passthrough: reads, writes and mmap of an opened file go
    /// straight to the backing file; the daemon sees only open and close.
    /// Zones with `max_file_bytes` still go through the daemon.
    Passthrough,
    /// Every read and write goes through the daemon; the kernel keeps a
    /// file's page cache across opens (`FOPEN_KEEP_CACHE`).
    Daemon(DaemonWhy),
}

/// Why file data goes through the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DaemonWhy {
    /// `--no-passthrough`.
    Disabled,
    /// Passthrough needs CAP_SYS_ADMIN.
    Unprivileged,
    /// The kernel doesn't offer passthrough (it needs Linux 6.9).
    Kernel,
    /// Not negotiated yet (before the FUSE handshake).
    Starting,
}

impl IoMode {
    fn code(self) -> u8 {
        match self {
            IoMode::Passthrough => 0,
            IoMode::Daemon(DaemonWhy::Disabled) => 1,
            IoMode::Daemon(DaemonWhy::Unprivileged) => 2,
            IoMode::Daemon(DaemonWhy::Kernel) => 3,
            IoMode::Daemon(DaemonWhy::Starting) => 4,
        }
    }

    fn from_code(c: u8) -> IoMode {
        match c {
            0 => IoMode::Passthrough,
            1 => IoMode::Daemon(DaemonWhy::Disabled),
            2 => IoMode::Daemon(DaemonWhy::Unprivileged),
            3 => IoMode::Daemon(DaemonWhy::Kernel),
            _ => IoMode::Daemon(DaemonWhy::Starting),
        }
    }

    /// `passthrough` or `daemon`, for `zonemount status --json`.
    pub fn name(self) -> &'static str {
        match self {
            IoMode::Passthrough => "passthrough",
            IoMode::Daemon(_) => "daemon",
        }
    }

    /// One line for logs and `zonemount status`.
    pub fn describe(self) -> &'static str {
        match self {
            IoMode::Passthrough => {
                "passthrough (kernel to backing file; files first opened read-only under 256 KiB \
                 and zones with max_file_bytes through the daemon and the page cache)"
            }
            IoMode::Daemon(DaemonWhy::Disabled) => "daemon (--no-passthrough)",
            IoMode::Daemon(DaemonWhy::Unprivileged) => "daemon (passthrough needs CAP_SYS_ADMIN)",
            IoMode::Daemon(DaemonWhy::Kernel) => {
                "daemon (the kernel offers no FUSE passthrough; it needs Linux 6.9)"
            }
            IoMode::Daemon(DaemonWhy::Starting) => "daemon (not negotiated yet)",
        }
    }
}

/// Where an entry is, in policy terms: the zone (None: the mount root) and
/// the path inside the zone.
struct Where {
    zone: Option<usize>,
    path: PathBuf,
}

/// The handle table and the fd cache are split in this many shards, each
/// with its own lock, so FUSE threads serving different files (and zones)
/// rarely wait for each other.
const SHARDS: usize = 16;

/// How many inode fds opened from file handles stay cached, per shard
/// (2048 in all).
const FD_CACHE_SHARD: NonZeroUsize = match NonZeroUsize::new(2048 / SHARDS) {
    Some(n) => n,
    None => NonZeroUsize::MIN,
};

type Shard<T> = Mutex<T>;

#[derive(Debug)]
pub struct Core {
    /// Nodes are kept as kernel file handles (else as held fds).
    by_handle: bool,
    /// fds of nodes kept as handles, most recently used last; sharded by
    /// node id.
    fd_cache: Vec<Shard<LruCache<u64, Arc<OwnedFd>>>>,
    /// One fd per backing filesystem (by mount id), to open handles with.
    fs_fds: Mutex<HashMap<i32, Arc<OwnedFd>>>,
    zones: Vec<ZoneRules>,
    zone_names: Vec<OsString>,
    inodes: Inodes,
    /// Open files and dirs, sharded by handle number.
    handles: Vec<Shard<HashMap<u64, Arc<Handle>>>>,
    next_fh: AtomicU64,
    /// [`IoMode`] as negotiated at mount.
    io_mode: AtomicU8,
    procfds: ProcFds,
    opts: CoreOptions,
    started: SystemTime,
    /// The last refusals, explained, oldest first.
    recent: Mutex<VecDeque<RecentRefusal>>,
}

/// Errors opening a mount's zones.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("zone '{zone}': cannot open backing dir {path}: {source}")]
    Backing {
        zone: String,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("zone '{zone}': bad protect pattern: {source}")]
    Protect { zone: String, source: ignore::Error },
    #[error("cannot open /proc/self/fd: {0}")]
    Proc(std::io::Error),
}

/// What a lookup opened: the entry's identity and how to reach it again,
/// plus the fd itself for the cache.
struct Opened {
    found: Found,
    stat: Stat,
    fd: Arc<OwnedFd>,
}

fn fuse_kind(k: FileType) -> FuseType {
    match k {
        FileType::Directory => FuseType::Directory,
        FileType::Symlink => FuseType::Symlink,
        FileType::Fifo => FuseType::NamedPipe,
        FileType::Socket => FuseType::Socket,
        FileType::CharacterDevice => FuseType::CharDevice,
        FileType::BlockDevice => FuseType::BlockDevice,
        _ => FuseType::RegularFile,
    }
}

fn time(secs: i64, nsecs: u64) -> SystemTime {
    if secs >= 0 {
        UNIX_EPOCH + Duration::new(secs as u64, nsecs as u32)
    } else {
        UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs()) + Duration::from_nanos(nsecs)
    }
}

fn to_attr(ino: u64, st: &Stat) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: st.st_size as u64,
        blocks: st.st_blocks as u64,
        atime: time(st.st_atime, st.st_atime_nsec),
        mtime: time(st.st_mtime, st.st_mtime_nsec),
        ctime: time(st.st_ctime, st.st_ctime_nsec),
        crtime: UNIX_EPOCH,
        kind: fuse_kind(FileType::from_raw_mode(st.st_mode)),
        perm: (st.st_mode & 0o7777) as u16,
        nlink: st.st_nlink as u32,
        uid: st.st_uid,
        gid: st.st_gid,
        rdev: st.st_rdev as u32,
        blksize: st.st_blksize as u32,
        flags: 0,
    }
}

fn timespec(t: Option<TimeOrNow>) -> rustix::fs::Timespec {
    match t {
        None => rustix::fs::Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_OMIT,
        },
        Some(TimeOrNow::Now) => rustix::fs::Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_NOW,
        },
        Some(TimeOrNow::SpecificTime(t)) => {
            let (sec, nsec) = match t.duration_since(UNIX_EPOCH) {
                Ok(d) => (d.as_secs() as i64, d.subsec_nanos() as i64),
                Err(e) => {
                    let d = e.duration();
                    let mut sec = -(d.as_secs() as i64);
                    let mut nsec = -(d.subsec_nanos() as i64);
                    if nsec < 0 {
                        sec -= 1;
                        nsec += 1_000_000_000;
                    }
                    (sec, nsec)
                }
            };
            rustix::fs::Timespec {
                tv_sec: sec,
                tv_nsec: nsec as _,
            }
        }
    }
}

impl Core {
    /// Open every zone's backing dir (held for the whole mount) and compile
    /// its rules.
    pub fn new(table: &ZoneTable, opts: CoreOptions) -> Result<Core, OpenError> {
        let mut roots = Vec::new();
        let mut zones = Vec::new();
        for z in &table.zones {
            let backing_err = |e: std::io::Error| OpenError::Backing {
                zone: z.name.clone(),
                path: z.backing.clone(),
                source: e,
            };
            let fd = backing::open_zone_root(&z.backing).map_err(|e| backing_err(e.into()))?;
            let st = backing::stat(fd.as_fd()).map_err(|e| backing_err(e.into()))?;
            roots.push((
                OsString::from(&z.name),
                Found {
                    anchor: Anchor::Held(Arc::new(fd)),
                    dev: st.st_dev,
                    ino: st.st_ino,
                    is_dir: true,
                    is_symlink: false,
                },
            ));
            zones.push(ZoneRules::compile(z).map_err(|e| OpenError::Protect {
                zone: z.name.clone(),
                source: e,
            })?);
        }
        let zone_names = roots.iter().map(|(n, _)| n.clone()).collect();
        // Kernel file handles keep fds bounded; reopening by handle needs
        // CAP_DAC_READ_SEARCH, so probe it on the first zone.
        let procfds = ProcFds::open().map_err(|e| OpenError::Proc(e.into()))?;
        let by_handle = roots.first().is_some_and(|(_, f)| match &f.anchor {
            Anchor::Held(fd) => backing::handle_of(fd.as_fd())
                .and_then(|h| {
                    let dir = procfds.open_dir(fd.as_fd())?;
                    backing::open_by_handle(dir.as_fd(), &h)
                })
                .is_ok(),
            _ => false,
        });
        // Each zone root's filesystem gets its fd for opening handles.
        let mut fs_fds = HashMap::new();
        if by_handle {
            for (_, f) in &roots {
                if let Anchor::Held(fd) = &f.anchor {
                    if let (Ok(h), Ok(dir)) =
                        (backing::handle_of(fd.as_fd()), procfds.open_dir(fd.as_fd()))
                    {
                        fs_fds.entry(h.mount_id).or_insert_with(|| Arc::new(dir));
                    }
                }
            }
        }
        if !by_handle {
            tracing::warn!(
                "kernel file handles unavailable (not root?): every remembered inode holds an fd"
            );
        }
        Ok(Core {
            by_handle,
            fd_cache: (0..SHARDS)
                .map(|_| Mutex::new(LruCache::new(FD_CACHE_SHARD)))
                .collect(),
            fs_fds: Mutex::new(fs_fds),
            zones,
            zone_names,
            inodes: Inodes::new(roots),
            handles: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            next_fh: AtomicU64::new(1),
            io_mode: AtomicU8::new(IoMode::Daemon(DaemonWhy::Starting).code()),
            procfds,
            opts,
            started: SystemTime::now(),
            recent: Mutex::new(VecDeque::with_capacity(RECENT_REFUSALS)),
        })
    }

    /// The cache TTL of rw zones (the shortest one).
    pub fn ttl(&self) -> Duration {
        self.opts.ttl
    }

    /// The cache TTLs of rw and of ro zones.
    pub fn ttls(&self) -> (Duration, Duration) {
        (self.opts.ttl, self.opts.ttl_ro)
    }

    /// How long the kernel may cache names and attributes in `zone` (None:
    /// the mount root, whose entries are the fixed zone list).
    fn zone_ttl(&self, zone: Option<usize>) -> Duration {
        match zone {
            Some(z) if self.zones[z].access == crate::config::Access::Rw => self.opts.ttl,
            _ => self.opts.ttl_ro,
        }
    }

    /// The cache TTL for node `ino` (and for names looked up in it).
    pub fn ttl_for(&self, ino: u64) -> Duration {
        match self.inodes.get(ino) {
            Some(n) => self.zone_ttl(n.zone),
            None => self.opts.ttl,
        }
    }

    /// Attributes of "no such entry": a reply with node id 0 lets the
    /// kernel cache the miss for the TTL (a negative entry).
    pub fn no_entry() -> FileAttr {
        FileAttr {
            ino: INodeNo(0),
            size: 0,
            blocks: 0,
            atime: UNIX_EPOCH,
            mtime: UNIX_EPOCH,
            ctime: UNIX_EPOCH,
            crtime: UNIX_EPOCH,
            kind: FuseType::RegularFile,
            perm: 0,
            nlink: 0,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 0,
            flags: 0,
        }
    }

    /// Whether this mount should ask the kernel for passthrough: wanted,
    /// and the daemon holds CAP_SYS_ADMIN (the kernel checks it when a
    /// backing file is registered).
    pub fn passthrough_wanted(&self) -> Result<(), DaemonWhy> {
        if !self.opts.passthrough {
            return Err(DaemonWhy::Disabled);
        }
        if !backing::has_sys_admin() {
            return Err(DaemonWhy::Unprivileged);
        }
        Ok(())
    }

    /// Record the I/O mode the FUSE handshake settled on.
    pub fn set_io_mode(&self, mode: IoMode) {
        self.io_mode.store(mode.code(), Ordering::Relaxed);
    }

    /// How file data moves in this mount (for logs and `zonemount status`).
    pub fn io_mode(&self) -> IoMode {
        IoMode::from_code(self.io_mode.load(Ordering::Relaxed))
    }

    /// Nodes currently held (for tests and status).
    pub fn node_count(&self) -> usize {
        self.inodes.len()
    }

    pub fn open_handles(&self) -> usize {
        self.handles.iter().map(|h| h.lock().len()).sum()
    }

    fn handle_shard(&self, fh: u64) -> &Shard<HashMap<u64, Arc<Handle>>> {
        &self.handles[fh as usize % SHARDS]
    }

    fn fd_shard(&self, ino: u64) -> &Shard<LruCache<u64, Arc<OwnedFd>>> {
        &self.fd_cache[ino as usize % SHARDS]
    }

    fn node(&self, ino: u64) -> FsResult<Arc<Node>> {
        self.inodes.get(ino).ok_or(FsError::Os(libc::ESTALE))
    }

    /// An fd (`O_PATH`) on a node's backing object.
    fn fd_of(&self, node: &Node) -> FsResult<Arc<OwnedFd>> {
        match &node.anchor {
            // Only the mount root has no backing object.
            Anchor::None => Err(FsError::Refused(Refusal::RootLevel)),
            Anchor::Held(fd) => Ok(fd.clone()),
            Anchor::Handle(h) => {
                if let Some(fd) = self.fd_shard(node.ino).lock().get(&node.ino) {
                    return Ok(fd.clone());
                }
                let fs_fd = self
                    .fs_fds
                    .lock()
                    .get(&h.mount_id)
                    .cloned()
                    .ok_or(FsError::Os(libc::ESTALE))?;
                let fd = Arc::new(backing::open_by_handle(fs_fd.as_fd(), h)?);
                self.fd_shard(node.ino).lock().put(node.ino, fd.clone());
                Ok(fd)
            }
        }
    }

    /// The result of a name operation in directory `dir`, with one change:
    /// ENOENT because the directory itself was deleted and something else
    /// now stands in its place (the host made it again: direct mode shares
    /// backing dirs) answers ESTALE. The kernel then walks the caller's
    /// path again with its cached entries revalidated and finds the new
    /// one; without this a recreated directory would fail every operation
    /// for the entry TTL. A directory simply gone stays ENOENT, as on the
    /// host (a process whose cwd was removed).
    fn in_dir<T>(&self, dir: &Node, dir_fd: BorrowedFd<'_>, r: backing::Sys<T>) -> FsResult<T> {
        match r {
            Err(e)
                if e == rustix::io::Errno::NOENT
                    && backing::is_deleted(dir_fd)
                    && self.replaced(dir) =>
            {
                Err(self.gone(dir))
            }
            r => Ok(r?),
        }
    }

    /// Whether something now stands where the (deleted) `dir` was last
    /// seen.
    fn replaced(&self, dir: &Node) -> bool {
        self.at_place_of(dir, 0).is_some()
    }

    /// What is at the place where `node` was last seen, if anything: its
    /// parent's entry of its name, the parent found the same way when it
    /// was deleted too (a whole tree made again). `depth` bounds the climb.
    fn at_place_of(&self, node: &Node, depth: u32) -> Option<OwnedFd> {
        const MAX_CLIMB: u32 = 64;
        let up = node.parent()?;
        let up_fd = self.fd_of(&up).ok()?;
        if !backing::is_deleted(up_fd.as_fd()) {
            return backing::lookup(up_fd.as_fd(), &node.name()).ok();
        }
        if depth >= MAX_CLIMB {
            return None;
        }
        let new_up = self.at_place_of(&up, depth + 1)?;
        backing::lookup(new_up.as_fd(), &node.name()).ok()
    }

    /// Identify what `fd` (just opened by a lookup) refers to, and choose
    /// how its node will reach it again.
    fn opened(&self, fd: OwnedFd) -> FsResult<Opened> {
        let stat = backing::stat(fd.as_fd())?;
        let kind = FileType::from_raw_mode(stat.st_mode);
        let fd = Arc::new(fd);
        let anchor = match self.handle_if_reopenable(fd.as_fd(), kind) {
            Some(h) => Anchor::Handle(h),
            None => Anchor::Held(fd.clone()),
        };
        Ok(Opened {
            found: Found {
                anchor,
                dev: stat.st_dev,
                ino: stat.st_ino,
                is_dir: kind == FileType::Directory,
                is_symlink: kind == FileType::Symlink,
            },
            stat,
            fd,
        })
    }

    /// A kernel file handle for what `fd` holds, when handles are in use
    /// and can be opened again on its filesystem.
    fn handle_if_reopenable(
        &self,
        fd: BorrowedFd<'_>,
        kind: FileType,
    ) -> Option<backing::InodeHandle> {
        if !self.by_handle {
            return None;
        }
        let h = backing::handle_of(fd).ok()?;
        self.can_open_on(h.mount_id, fd, kind).then_some(h)
    }

    /// Whether handles of filesystem `mount_id` can be opened: it needs a
    /// (non-`O_PATH`) fd on that filesystem, taken from the first directory
    /// seen there.
    fn can_open_on(&self, mount_id: i32, fd: BorrowedFd<'_>, kind: FileType) -> bool {
        let mut fs_fds = self.fs_fds.lock();
        if fs_fds.contains_key(&mount_id) {
            return true;
        }
        if kind != FileType::Directory {
            return false;
        }
        match self.procfds.open_dir(fd) {
            Ok(dir) => {
                fs_fds.insert(mount_id, Arc::new(dir));
                true
            }
            Err(_) => false,
        }
    }

    /// Enter an opened entry in the table (one kernel lookup), caching its fd.
    fn enter(&self, zone: usize, parent: &Arc<Node>, name: &OsStr, o: Opened) -> Arc<Node> {
        let node = self.inodes.remember(zone, parent, name, o.found);
        if matches!(node.anchor, Anchor::Handle(_)) {
            self.fd_shard(node.ino).lock().put(node.ino, o.fd);
        }
        node
    }

    fn root_attr(&self) -> FileAttr {
        FileAttr {
            ino: INodeNo(ROOT),
            size: 0,
            blocks: 0,
            atime: self.started,
            mtime: self.started,
            ctime: self.started,
            crtime: self.started,
            kind: FuseType::Directory,
            perm: 0o755,
            nlink: 2 + self.zones.len() as u32,
            uid: self.opts.owner_uid,
            gid: self.opts.owner_gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    fn attr_of(&self, node: &Node) -> FsResult<FileAttr> {
        if node.is_root() {
            return Ok(self.root_attr());
        }
        Ok(to_attr(
            node.ino,
            &backing::stat(self.fd_of(node)?.as_fd())?,
        ))
    }

    /// Where an existing node is.
    fn where_node(&self, node: &Node) -> Where {
        Where {
            zone: node.zone,
            path: if node.zone.is_some() {
                node.zone_path()
            } else {
                PathBuf::new()
            },
        }
    }

    /// Where the entry `name` of directory `parent` is (or would be).
    fn where_child(&self, parent: &Node, name: &OsStr) -> Where {
        match parent.zone {
            None => Where {
                zone: None,
                path: PathBuf::from(name),
            },
            Some(z) => Where {
                zone: Some(z),
                path: parent.zone_path().join(name),
            },
        }
    }

    fn loc<'a>(&'a self, w: &'a Where) -> Loc<'a> {
        match w.zone {
            // An entry of the root keeps its name, for explanations.
            None => Loc {
                zone: None,
                path: &w.path,
            },
            Some(z) => Loc::in_zone(&self.zones[z], &w.path),
        }
    }

    /// Describe a location for logs and approval requests.
    pub fn describe(&self, zone: Option<usize>, path: &Path) -> String {
        match zone {
            None => format!("/{}", path.display()),
            Some(z) => {
                let name = &self.zones[z].name;
                if path.as_os_str().is_empty() {
                    format!("/{name}")
                } else {
                    format!("/{name}/{}", path.display())
                }
            }
        }
    }

    fn gate(&self, op: &Op<'_>) -> FsResult<Gate> {
        self.settle(op, policy::decide(op))
    }

    /// Act on the policy's `decision` for `op`: note it, keep a refusal.
    fn settle(&self, op: &Op<'_>, decision: Decision) -> FsResult<Gate> {
        match decision {
            Decision::Allow => {
                notes::allowed(op);
                Ok(Gate::Go)
            }
            Decision::Ask(items) => Ok(Gate::Ask(items)),
            Decision::Refuse(r) => {
                let message = self.keep_refusal(&Subject::of(op), r);
                notes::refused(op, r, message);
                Err(FsError::Refused(r))
            }
        }
    }

    /// Log a refusal, explained, and keep it among the recent ones.
    /// Explain and remember a refusal; the error to answer with.
    fn refused(&self, s: &Subject<'_>, r: Refusal) -> FsError {
        self.keep_refusal(s, r);
        FsError::Refused(r)
    }

    /// Explain and remember a refusal; returns the explanation.
    fn keep_refusal(&self, s: &Subject<'_>, r: Refusal) -> String {
        let e = policy::explain(s, r, &self.zones);
        let message = e.message.clone();
        tracing::info!(refusal = ?r, errno = r.errno_name(), message = %e.message, "refused");
        let mut recent = self.recent.lock();
        if recent.len() == RECENT_REFUSALS {
            recent.pop_front();
        }
        recent.push_back(RecentRefusal {
            at: SystemTime::now(),
            action: s.action,
            path: policy::shown(s.at),
            refusal: r,
            errno: r.errno_name(),
            reason: e.reason,
            message: e.message,
        });
        message
    }

    /// Record, explained, that the approval of `items` was denied (or not
    /// given in time); returns the error to answer the held call with.
    pub fn denied(&self, items: &[AskItem]) -> FsError {
        let first = items
            .first()
            .and_then(|i| Some((i, self.zones.iter().find(|z| z.name == i.zone)?)));
        let Some((item, zone)) = first else {
            return FsError::Refused(Refusal::Denied);
        };
        let action = match item.class {
            policy::Class::Write => Action::Write,
            policy::Class::Delete => Action::Delete,
        };
        let at = Loc::in_zone(zone, &item.path);
        self.refused(&Subject::new(action, at), Refusal::Denied)
    }

    /// The last refusals, oldest first (at most [`RECENT_REFUSALS`]).
    pub fn recent_refusals(&self) -> Vec<RecentRefusal> {
        self.recent.lock().iter().cloned().collect()
    }

    /// ENOENT (explained) when `name` in `parent` is a hidden sensitive root.
    fn not_sensitive(
        &self,
        zone: usize,
        parent: &Node,
        name: &OsStr,
        action: Action,
    ) -> FsResult<()> {
        let rules = &self.zones[zone];
        if !rules.may_hide(name) {
            return Ok(());
        }
        let w = self.where_child(parent, name);
        if !rules.is_sensitive(&w.path) {
            return Ok(());
        }
        Err(self.refused(&Subject::new(action, self.loc(&w)), Refusal::Sensitive))
    }

    // ---- lookups -------------------------------------------------------

    /// Look `name` up in `parent`, counting one kernel lookup on success.
    pub fn lookup(&self, parent: u64, name: &OsStr) -> FsResult<FileAttr> {
        let parent = self.node(parent)?;
        self.lookup_attr(&parent, name)
    }

    /// Look up and enter `name`; its attributes come from the lookup's own
    /// stat (zone dirs, seen from the root, are stat'ed on their own).
    fn lookup_attr(&self, parent: &Arc<Node>, name: &OsStr) -> FsResult<FileAttr> {
        let Some(zone) = parent.zone else {
            let i = self
                .zone_names
                .iter()
                .position(|z| z == name)
                .ok_or_else(FsError::enoent)?;
            let node = self.inodes.zone_root(i).ok_or_else(FsError::enoent)?;
            return self.attr_of(&node);
        };
        // A hidden sensitive root is refused before it is even opened.
        self.not_sensitive(zone, parent, name, Action::Access)?;
        let dir_fd = self.fd_of(parent)?;
        let fd = match backing::lookup(dir_fd.as_fd(), name) {
            Err(e) if e == rustix::io::Errno::NOENT && backing::is_deleted(dir_fd.as_fd()) => {
                // The host deleted `parent`. When a directory now stands in
                // its place and holds `name`, ESTALE makes the kernel walk
                // the path again and find it (stat, open). Otherwise ENOENT
                // is the answer; a create that follows fails in the deleted
                // dir with ESTALE (`in_dir`), and the kernel retries that.
                return Err(if self.replacement_holds(parent, name) {
                    self.gone(parent)
                } else {
                    FsError::enoent()
                });
            }
            r => r?,
        };
        let o = self.opened(fd)?;
        if !self.zones[zone].visible(name, o.found.is_dir) {
            let w = self.where_child(parent, name);
            return Err(self.refused(
                &Subject {
                    is_dir: o.found.is_dir,
                    ..Subject::new(Action::Access, self.loc(&w))
                },
                Refusal::Hidden,
            ));
        }
        let stat = o.stat;
        let node = self.enter(zone, parent, name, o);
        Ok(to_attr(node.ino, &stat))
    }

    /// Whether a directory now stands where the (deleted) `dir` was last
    /// seen, holding an entry `name`.
    fn replacement_holds(&self, dir: &Node, name: &OsStr) -> bool {
        self.at_place_of(dir, 0)
            .is_some_and(|fd| backing::lookup(fd.as_fd(), name).is_ok())
    }

    /// Look at an entry without entering it in the table.
    fn peek(&self, parent: &Node, name: &OsStr) -> FsResult<Option<Stat>> {
        let Some(zone) = parent.zone else {
            return Ok(self
                .zone_names
                .iter()
                .position(|z| z == name)
                .and_then(|i| {
                    let n = self.inodes.zone_root(i)?;
                    backing::stat(self.fd_of(&n).ok()?.as_fd()).ok()
                }));
        };
        let rules = &self.zones[zone];
        if rules.may_hide(name) && rules.is_sensitive(&parent.zone_path().join(name)) {
            return Ok(None);
        }
        let dir_fd = self.fd_of(parent)?;
        match self.in_dir(
            parent,
            dir_fd.as_fd(),
            backing::lookup(dir_fd.as_fd(), name),
        ) {
            Ok(fd) => {
                let st = backing::stat(fd.as_fd())?;
                let is_dir = FileType::from_raw_mode(st.st_mode) == FileType::Directory;
                Ok(self.zones[zone].visible(name, is_dir).then_some(st))
            }
            Err(FsError::Os(libc::ENOENT)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub fn forget(&self, ino: u64, n: u64) {
        if self.inodes.forget(ino, n) {
            self.fd_shard(ino).lock().pop(&ino);
        }
    }

    /// Attributes of a node; through the open handle `fh` when given (an
    /// unlinked file is reachable only so).
    ///
    /// A directory deleted and replaced on the host is ESTALE here (see
    /// `in_dir`), so a `stat` or `cd` through a cached path looks again and
    /// finds what took its place.
    pub fn getattr(&self, ino: u64, fh: Option<u64>) -> FsResult<FileAttr> {
        let node = self.node(ino)?;
        let attr = self.attr_with(&node, fh)?;
        if node.is_dir && attr.nlink == 0 && self.replaced(&node) {
            return Err(self.gone(&node));
        }
        Ok(attr)
    }

    /// ESTALE for a node whose backing object has no name left and has been
    /// replaced; its fd leaves the cache, so the next use reopens it by
    /// handle (and fails).
    fn gone(&self, node: &Node) -> FsError {
        self.fd_shard(node.ino).lock().pop(&node.ino);
        FsError::Os(libc::ESTALE)
    }

    fn attr_with(&self, node: &Node, fh: Option<u64>) -> FsResult<FileAttr> {
        if node.is_root() {
            return Ok(self.root_attr());
        }
        let fd = self.handle_or_node_fd(fh, node)?;
        Ok(to_attr(node.ino, &backing::stat(fd.as_fd())?))
    }

    /// The fd of file handle `fh` if it is one, else the node's own.
    fn handle_or_node_fd(&self, fh: Option<u64>, node: &Node) -> FsResult<Arc<OwnedFd>> {
        if let Some(h) = fh.and_then(|fh| self.handle(fh).ok()) {
            if let Handle::File { fd, .. } = &*h {
                return Ok(fd.clone());
            }
        }
        self.fd_of(node)
    }

    pub fn readlink(&self, ino: u64) -> FsResult<Vec<u8>> {
        let node = self.node(ino)?;
        if !node.is_symlink {
            return Err(FsError::Os(libc::EINVAL));
        }
        Ok(backing::readlink(self.fd_of(&node)?.as_fd())?
            .as_bytes()
            .to_vec())
    }

    // ---- setattr -------------------------------------------------------

    pub fn check_setattr(&self, ino: u64, a: &SetAttr) -> FsResult<Gate> {
        let node = self.node(ino)?;
        let w = self.where_node(&node);
        let at = self.loc(&w);
        let meta = a.mode.is_some()
            || a.uid.is_some()
            || a.gid.is_some()
            || a.atime.is_some()
            || a.mtime.is_some()
            || (a.kills_privileges() && self.privileges_to_kill(&node)?.is_some());
        let mut asks = Vec::new();
        if let Some(size) = a.size {
            // A truncate through a handle opened (and approved) for writing
            // is not asked again; the size limit still applies.
            if let Some(zone) = self.writable_handle_zone(a.fh) {
                if let Err(r) = policy::check_size(&self.zones[zone], size) {
                    return Err(r.into());
                }
            } else if let Gate::Ask(v) = self.gate(&Op::WriteContent {
                at,
                new_size: Some(size),
            })? {
                asks.extend(v);
            }
        }
        if meta {
            if let Gate::Ask(v) = self.gate(&Op::Metadata { at })? {
                asks.extend(v);
            }
        }
        asks.dedup();
        Ok(if asks.is_empty() {
            Gate::Go
        } else {
            Gate::Ask(asks)
        })
    }

    fn writable_handle_zone(&self, fh: Option<u64>) -> Option<usize> {
        let h = self.handle(fh?).ok()?;
        match &*h {
            Handle::File {
                zone,
                writable: true,
                ..
            } => Some(*zone),
            _ => None,
        }
    }

    /// The mode to set when `node` is a regular file with setuid (or
    /// setgid and group exec) to clear; None when there is nothing to do.
    fn privileges_to_kill(&self, node: &Node) -> FsResult<Option<u32>> {
        if node.is_dir || node.is_symlink || node.is_root() {
            return Ok(None);
        }
        let st = backing::stat(self.fd_of(node)?.as_fd())?;
        let mode = st.st_mode & 0o7777;
        let kept = without_privileges(mode);
        Ok(
            (FileType::from_raw_mode(st.st_mode) == FileType::RegularFile && kept != mode)
                .then_some(kept),
        )
    }

    pub fn setattr(&self, caller: &Caller, ino: u64, a: &SetAttr) -> FsResult<FileAttr> {
        let node = self.node(ino)?;
        if a.kills_privileges() {
            // The kernel decided (the caller lacks CAP_FSETID) and the
            // caller need not own the file: the daemon clears the bits with
            // its own rights. Clearing them grants nothing.
            if let Some(mode) = self.privileges_to_kill(&node)? {
                self.procfds.chmod(self.fd_of(&node)?.as_fd(), mode)?;
            }
            return self.attr_with(&node, a.fh);
        }
        let _as = AsCaller::enter(caller)?;
        // Through an open handle when the kernel names one (the file may
        // be unlinked: only the handle still reaches it).
        let held = self.handle_or_node_fd(a.fh, &node)?;
        let fd = held.as_fd();
        if let Some(size) = a.size {
            let handle = a.fh.and_then(|fh| self.handle(fh).ok());
            match handle.as_deref() {
                Some(Handle::File {
                    fd: hfd,
                    writable: true,
                    ..
                }) => backing::truncate(hfd.as_fd(), size)?,
                _ => {
                    let wfd = self.procfds.reopen(fd, libc::O_WRONLY)?;
                    backing::truncate(wfd.as_fd(), size)?;
                }
            }
        }
        if a.uid.is_some() || a.gid.is_some() {
            backing::chown(fd, a.uid, a.gid)?;
        }
        if let Some(mode) = a.mode {
            self.procfds.chmod(fd, mode & 0o7777)?;
        }
        if a.atime.is_some() || a.mtime.is_some() {
            let times = backing::Timestamps {
                last_access: timespec(a.atime),
                last_modification: timespec(a.mtime),
            };
            if node.is_symlink {
                let parent = node.parent().ok_or(FsError::Os(libc::EPERM))?;
                backing::utimens_nofollow(self.fd_of(&parent)?.as_fd(), &node.name(), &times)?;
            } else {
                self.procfds.utimens(fd, &times)?;
            }
        }
        self.attr_with(&node, a.fh)
    }

    // ---- new names -----------------------------------------------------

    /// Policy for a new name (create, mkdir, symlink, mknod).
    pub fn check_new(&self, parent: u64, name: &OsStr, is_dir: bool) -> FsResult<Gate> {
        let parent = self.node(parent)?;
        let w = self.where_child(&parent, name);
        self.gate(&Op::NewName {
            at: self.loc(&w),
            is_dir,
        })
    }

    /// Policy for mknod: as any new name, but a device node is refused
    /// (EPERM) before anyone is asked to approve it.
    pub fn check_mknod(&self, parent: u64, name: &OsStr, mode: u32) -> FsResult<Gate> {
        let gate = self.check_new(parent, name, false)?;
        match FileType::from_raw_mode(mode) {
            FileType::CharacterDevice | FileType::BlockDevice => {
                let parent = self.node(parent)?;
                let w = self.where_child(&parent, name);
                let op = Op::NewName {
                    at: self.loc(&w),
                    is_dir: false,
                };
                let message = self.keep_refusal(&Subject::of(&op), Refusal::Device);
                notes::refused(&op, Refusal::Device, message);
                Err(FsError::Refused(Refusal::Device))
            }
            _ => Ok(gate),
        }
    }

    fn zone_dir(&self, parent: u64) -> FsResult<Arc<Node>> {
        let node = self.node(parent)?;
        if node.zone.is_none() {
            return Err(Refusal::RootLevel.into());
        }
        if !node.is_dir {
            return Err(FsError::Os(libc::ENOTDIR));
        }
        Ok(node)
    }

    fn entered(&self, parent: &Arc<Node>, name: &OsStr) -> FsResult<FileAttr> {
        self.lookup_attr(parent, name)
    }

    /// Make the entry `name` in `parent` as the caller with `make` (given
    /// the directory's fd), then enter it like a lookup.
    fn make_entry(
        &self,
        caller: &Caller,
        parent: u64,
        name: &OsStr,
        make: impl FnOnce(BorrowedFd<'_>) -> backing::Sys<()>,
    ) -> FsResult<FileAttr> {
        let _as = AsCaller::enter(caller)?;
        let dir = self.zone_dir(parent)?;
        let dir_fd = self.fd_of(&dir)?;
        self.in_dir(&dir, dir_fd.as_fd(), make(dir_fd.as_fd()))?;
        self.entered(&dir, name)
    }

    pub fn mkdir(
        &self,
        caller: &Caller,
        parent: u64,
        name: &OsStr,
        mode: u32,
    ) -> FsResult<FileAttr> {
        self.make_entry(caller, parent, name, |d| backing::mkdir(d, name, mode))
    }

    pub fn mknod(
        &self,
        caller: &Caller,
        parent: u64,
        name: &OsStr,
        mode: u32,
    ) -> FsResult<FileAttr> {
        self.make_entry(caller, parent, name, |d| backing::mknod(d, name, mode))
    }

    pub fn symlink(
        &self,
        caller: &Caller,
        parent: u64,
        name: &OsStr,
        target: &Path,
    ) -> FsResult<FileAttr> {
        self.make_entry(caller, parent, name, |d| backing::symlink(d, name, target))
    }

    /// Create and open a regular file; returns its attributes and handle.
    pub fn create(
        &self,
        caller: &Caller,
        parent: u64,
        name: &OsStr,
        mode: u32,
        flags: i32,
    ) -> FsResult<(FileAttr, u64)> {
        let _as = AsCaller::enter(caller)?;
        let dir = self.zone_dir(parent)?;
        let zone = dir.zone.ok_or(FsError::Refused(Refusal::RootLevel))?;
        let dir_fd = self.fd_of(&dir)?;
        let fd = self.in_dir(
            &dir,
            dir_fd.as_fd(),
            backing::create(dir_fd.as_fd(), name, flags, mode),
        )?;
        let st = backing::stat(fd.as_fd())?;
        let node = match self.handle_if_reopenable(fd.as_fd(), FileType::RegularFile) {
            // The created file's own handle: no second lookup, and no race
            // with a host that replaces the name meanwhile.
            Some(h) => self.inodes.remember(
                zone,
                &dir,
                name,
                Found {
                    anchor: Anchor::Handle(h),
                    dev: st.st_dev,
                    ino: st.st_ino,
                    is_dir: false,
                    is_symlink: false,
                },
            ),
            None => {
                let o = self.opened(backing::lookup(dir_fd.as_fd(), name)?)?;
                if (o.found.dev, o.found.ino) != (st.st_dev, st.st_ino) {
                    // The name was replaced between create and lookup.
                    return Err(FsError::Os(libc::EAGAIN));
                }
                self.enter(zone, &dir, name, o)
            }
        };
        let fh = self.add_handle(Handle::File {
            fd: Arc::new(fd),
            zone,
            writable: flags & libc::O_ACCMODE != libc::O_RDONLY,
        });
        Ok((to_attr(node.ino, &st), fh))
    }

    // ---- removal and renames -------------------------------------------

    pub fn check_remove(&self, parent: u64, name: &OsStr) -> FsResult<Gate> {
        let parent = self.node(parent)?;
        let w = self.where_child(&parent, name);
        let op = Op::Remove { at: self.loc(&w) };
        // A hidden or missing name is ENOENT before any policy question.
        // When the answer is a plain yes there is no question to come
        // first: the removal itself says ENOENT, and the kernel only asks
        // to remove names it looked up, which hides hidden ones (a name's
        // hiding depends on its path and kind, and unlink never removes a
        // directory nor rmdir a file), so the lookup is spared.
        let decision = policy::decide(&op);
        let plain_yes = matches!(decision, Decision::Allow);
        if !plain_yes && w.zone.is_some() && self.peek(&parent, name)?.is_none() {
            return Err(FsError::enoent());
        }
        self.settle(&op, decision)
    }

    pub fn unlink(&self, caller: &Caller, parent: u64, name: &OsStr) -> FsResult<()> {
        let _as = AsCaller::enter(caller)?;
        let dir = self.zone_dir(parent)?;
        let dir_fd = self.fd_of(&dir)?;
        self.in_dir(&dir, dir_fd.as_fd(), backing::unlink(dir_fd.as_fd(), name))
    }

    pub fn rmdir(&self, caller: &Caller, parent: u64, name: &OsStr) -> FsResult<()> {
        let _as = AsCaller::enter(caller)?;
        let dir = self.zone_dir(parent)?;
        let dir_fd = self.fd_of(&dir)?;
        self.in_dir(&dir, dir_fd.as_fd(), backing::rmdir(dir_fd.as_fd(), name))
    }

    pub fn check_rename(
        &self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
    ) -> FsResult<Gate> {
        let (p, np) = (self.node(parent)?, self.node(newparent)?);
        let (from, to) = (self.where_child(&p, name), self.where_child(&np, newname));
        let src = match from.zone {
            Some(_) => self.peek(&p, name)?.ok_or_else(FsError::enoent)?,
            None => self.peek(&p, name)?.ok_or_else(FsError::enoent)?,
        };
        let to_exists = to.zone.is_some() && self.peek(&np, newname)?.is_some();
        self.gate(&Op::Rename {
            from: self.loc(&from),
            to: self.loc(&to),
            is_dir: FileType::from_raw_mode(src.st_mode) == FileType::Directory,
            to_exists,
            exchange: flags & libc::RENAME_EXCHANGE != 0,
        })
    }

    pub fn rename(
        &self,
        caller: &Caller,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
    ) -> FsResult<()> {
        let _as = AsCaller::enter(caller)?;
        let (p, np) = (self.zone_dir(parent)?, self.zone_dir(newparent)?);
        if p.zone != np.zone {
            return Err(Refusal::CrossZone.into());
        }
        let zone = p.zone.ok_or(FsError::Refused(Refusal::RootLevel))?;
        let (pheld, npheld) = (self.fd_of(&p)?, self.fd_of(&np)?);
        let (pfd, npfd) = (pheld.as_fd(), npheld.as_fd());
        let src_key = backing::lookup(pfd, name)
            .ok()
            .and_then(|fd| backing::stat(fd.as_fd()).ok())
            .map(|st| (st.st_dev, st.st_ino));
        let dst_key = backing::lookup(npfd, newname)
            .ok()
            .and_then(|fd| backing::stat(fd.as_fd()).ok())
            .map(|st| (st.st_dev, st.st_ino));
        // ENOENT with either directory gone is ESTALE (see `in_dir`).
        let r = backing::rename(pfd, name, npfd, newname, flags);
        let r = self.in_dir(&p, pfd, r);
        let r = match r {
            Err(FsError::Os(libc::ENOENT)) => self.in_dir(&np, npfd, Err(rustix::io::Errno::NOENT)),
            r => r,
        };
        r?;
        // Keep known nodes' places current, so policy paths stay right.
        let moved = |key: Option<(u64, u64)>, dir: &Arc<Node>, to: &OsStr| {
            if let Some((dev, ino)) = key {
                if let Some(n) = self
                    .inodes
                    .known(zone, dev, ino)
                    .and_then(|i| self.inodes.get(i))
                {
                    n.set_place(dir.clone(), to);
                }
            }
        };
        moved(src_key, &np, newname);
        if flags & libc::RENAME_EXCHANGE != 0 {
            moved(dst_key, &p, name);
        }
        Ok(())
    }

    pub fn check_link(&self, ino: u64, newparent: u64, newname: &OsStr) -> FsResult<Gate> {
        let (node, np) = (self.node(ino)?, self.node(newparent)?);
        let (from, to) = (self.where_node(&node), self.where_child(&np, newname));
        self.gate(&Op::Link {
            from: self.loc(&from),
            to: self.loc(&to),
        })
    }

    pub fn link(
        &self,
        caller: &Caller,
        ino: u64,
        newparent: u64,
        newname: &OsStr,
    ) -> FsResult<FileAttr> {
        let _as = AsCaller::enter(caller)?;
        let (node, dir) = (self.node(ino)?, self.zone_dir(newparent)?);
        if node.zone != dir.zone {
            return Err(Refusal::CrossZone.into());
        }
        let dir_fd = self.fd_of(&dir)?;
        let r = self
            .procfds
            .link(self.fd_of(&node)?.as_fd(), dir_fd.as_fd(), newname);
        self.in_dir(&dir, dir_fd.as_fd(), r)?;
        self.entered(&dir, newname)
    }

    // ---- files -----------------------------------------------------------

    fn add_handle(&self, h: Handle) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.handle_shard(fh).lock().insert(fh, Arc::new(h));
        fh
    }

    fn handle(&self, fh: u64) -> FsResult<Arc<Handle>> {
        self.handle_shard(fh)
            .lock()
            .get(&fh)
            .cloned()
            .ok_or(FsError::Os(libc::EBADF))
    }

    fn file(&self, fh: u64) -> FsResult<(Arc<Handle>, usize)> {
        let h = self.handle(fh)?;
        match &*h {
            Handle::File { zone, .. } => {
                let z = *zone;
                Ok((h, z))
            }
            Handle::Dir { .. } => Err(FsError::Os(libc::EISDIR)),
        }
    }

    fn with_fd<T>(h: &Handle, f: impl FnOnce(BorrowedFd<'_>) -> FsResult<T>) -> FsResult<T> {
        match h {
            Handle::File { fd, .. } => f(fd.as_fd()),
            Handle::Dir { .. } => Err(FsError::Os(libc::EISDIR)),
        }
    }

    pub fn check_open(&self, ino: u64, flags: i32) -> FsResult<Gate> {
        let node = self.node(ino)?;
        let w = self.where_node(&node);
        let at = self.loc(&w);
        let writes = flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0;
        let size = || -> FsResult<u64> {
            Ok(if node.is_root() {
                0
            } else {
                backing::stat(self.fd_of(&node)?.as_fd())?.st_size as u64
            })
        };
        if writes {
            // O_RDWR also reads: an oversized file can't be opened so.
            let new_size = if flags & libc::O_TRUNC != 0 {
                Some(0)
            } else if flags & libc::O_ACCMODE == libc::O_RDWR {
                Some(size()?)
            } else {
                None
            };
            return self.gate(&Op::WriteContent { at, new_size });
        }
        self.gate(&Op::Read { at, size: size()? })
    }

    pub fn open(&self, caller: &Caller, ino: u64, flags: i32) -> FsResult<u64> {
        let _as = AsCaller::enter(caller)?;
        let node = self.node(ino)?;
        let zone = node.zone.ok_or(FsError::Os(libc::EISDIR))?;
        let fd = self.procfds.reopen(self.fd_of(&node)?.as_fd(), flags)?;
        Ok(self.add_handle(Handle::File {
            fd: Arc::new(fd),
            zone,
            writable: flags & libc::O_ACCMODE != libc::O_RDONLY,
        }))
    }

    pub fn read(&self, fh: u64, offset: u64, size: u32) -> FsResult<Vec<u8>> {
        let (h, _) = self.file(fh)?;
        let mut buf = vec![0u8; size as usize];
        let n = Self::with_fd(&h, |fd| Ok(backing::pread(fd, &mut buf, offset)?))?;
        buf.truncate(n);
        Ok(buf)
    }

    fn size_ok(&self, zone: usize, end: u64) -> FsResult<()> {
        policy::check_size(&self.zones[zone], end).map_err(FsError::from)
    }

    pub fn write(&self, fh: u64, offset: u64, data: &[u8]) -> FsResult<u32> {
        let (h, zone) = self.file(fh)?;
        self.size_ok(zone, offset.saturating_add(data.len() as u64))?;
        let n = Self::with_fd(&h, |fd| Ok(backing::pwrite(fd, data, offset)?))?;
        Ok(n as u32)
    }

    pub fn release(&self, fh: u64) {
        self.handle_shard(fh).lock().remove(&fh);
    }

    /// The backing id for a file just opened (handle `fh`) when its data
    /// may bypass the daemon: passthrough is on, no per-file policy
    /// (`max_file_bytes`) needs the daemon to see writes, and the node was
    /// not first opened read-only while smaller than [`CACHED_READ_BYTES`].
    /// The choice is made at the node's first open and kept until FORGET
    /// (the kernel refuses to mix the two modes on one inode); an id is
    /// made with `register`.
    ///
    /// Small files read through the page cache because a passthrough read
    /// marks the kernel's atime stale, so the `fstat` that `grep -r` or
    /// `git add` makes next costs a GETATTR round trip per file; a cached
    /// read, once warm, costs none.
    ///
    /// Must run with the daemon's own credentials: the kernel wants
    /// CAP_SYS_ADMIN to register, and opens the backing file for each
    /// later open with the credentials seen here (the caller's rights were
    /// checked by the daemon's own open just before).
    pub fn passthrough_id(
        &self,
        ino: u64,
        fh: u64,
        register: impl FnOnce(BorrowedFd<'_>) -> std::io::Result<fuser::BackingId>,
    ) -> Option<Arc<fuser::BackingId>> {
        if self.io_mode() != IoMode::Passthrough {
            return None;
        }
        let node = self.inodes.get(ino)?;
        let zone = node.zone?;
        if self.zones[zone].max_file_bytes.is_some() {
            return None;
        }
        let mut slot = node.passthrough.lock();
        match &*slot {
            Passthrough::Id(id) => return Some(id.clone()),
            Passthrough::Refused | Passthrough::Cached => return None,
            Passthrough::Unset => {}
        }
        let Ok(handle) = self.handle(fh) else {
            return None;
        };
        let Handle::File { fd, writable, .. } = &*handle else {
            return None;
        };
        if !writable
            && backing::stat(fd.as_fd()).is_ok_and(|st| (st.st_size as u64) < CACHED_READ_BYTES)
        {
            *slot = Passthrough::Cached;
            return None;
        }
        // The kernel keeps the registered file for the node's life: it
        // must be read-only, or exec of the file would fail with ETXTBSY.
        // It is opened from the handle, which reaches unlinked files too.
        let registered = self
            .procfds
            .reopen(fd.as_fd(), libc::O_RDONLY)
            .map_err(std::io::Error::from)
            .and_then(|ro| register(ro.as_fd()));
        match registered {
            Ok(id) => {
                let id = Arc::new(id);
                *slot = Passthrough::Id(id.clone());
                Some(id)
            }
            Err(e) => {
                tracing::info!(ino, error = %e, "passthrough refused; this file's data goes through the daemon");
                *slot = Passthrough::Refused;
                None
            }
        }
    }

    pub fn fsync(&self, fh: u64, datasync: bool) -> FsResult<()> {
        let (h, _) = self.file(fh)?;
        Self::with_fd(&h, |fd| Ok(backing::fsync(fd, datasync)?))
    }

    pub fn fallocate(&self, fh: u64, offset: u64, len: u64, mode: i32) -> FsResult<()> {
        let (h, zone) = self.file(fh)?;
        if mode & libc::FALLOC_FL_KEEP_SIZE == 0 {
            self.size_ok(zone, offset.saturating_add(len))?;
        }
        Self::with_fd(&h, |fd| Ok(backing::fallocate(fd, mode, offset, len)?))
    }

    pub fn lseek(&self, fh: u64, offset: i64, whence: i32) -> FsResult<i64> {
        let (h, _) = self.file(fh)?;
        Self::with_fd(&h, |fd| Ok(backing::seek(fd, offset, whence)? as i64))
    }

    pub fn copy_file_range(
        &self,
        fh_in: u64,
        off_in: u64,
        fh_out: u64,
        off_out: u64,
        len: u64,
    ) -> FsResult<u32> {
        let (hin, zin) = self.file(fh_in)?;
        let (hout, zout) = self.file(fh_out)?;
        if zin != zout {
            // Each zone's data goes through its own checks: let the kernel
            // fall back to read + write.
            return Err(FsError::Os(libc::EXDEV));
        }
        self.size_ok(zout, off_out.saturating_add(len))?;
        let len = len.min(u32::MAX as u64 / 2);
        let n = Self::with_fd(&hin, |a| {
            Self::with_fd(&hout, |b| {
                Ok(backing::copy_file_range(a, off_in, b, off_out, len)?)
            })
        })?;
        Ok(n as u32)
    }

    // ---- directories -----------------------------------------------------

    /// Opening a directory deleted and replaced on the host is ESTALE (see
    /// `getattr`).
    pub fn opendir(&self, ino: u64) -> FsResult<u64> {
        let node = self.node(ino)?;
        if !node.is_root()
            && backing::is_deleted(self.fd_of(&node)?.as_fd())
            && self.replaced(&node)
        {
            return Err(self.gone(&node));
        }
        Ok(self.add_handle(Handle::Dir {
            node,
            entries: Mutex::new(None),
        }))
    }

    /// A directory's entries, in the order readdir gives them.
    fn list_dir(&self, node: &Node) -> FsResult<Vec<DirItem>> {
        let parent_ino = match node.zone {
            None => ROOT,
            Some(_) => node.parent().map(|p| p.ino).unwrap_or(ROOT),
        };
        let mut entries = vec![
            DirItem {
                offset: 1,
                name: ".".into(),
                kind: FuseType::Directory,
                ino: node.ino,
            },
            DirItem {
                offset: 2,
                name: "..".into(),
                kind: FuseType::Directory,
                ino: parent_ino,
            },
        ];
        match node.zone {
            None => {
                for (i, name) in self.zone_names.iter().enumerate() {
                    entries.push(DirItem {
                        offset: 0,
                        name: name.clone(),
                        kind: FuseType::Directory,
                        ino: 2 + i as u64,
                    });
                }
            }
            Some(zone) => {
                let held = self.fd_of(node)?;
                let fd = held.as_fd();
                let list = backing::read_dir(self.procfds.open_dir(fd)?)?;
                let rules = &self.zones[zone];
                let dir_path = std::cell::OnceCell::new();
                for e in list {
                    if rules.may_hide(&e.name)
                        && rules
                            .is_sensitive(&dir_path.get_or_init(|| node.zone_path()).join(&e.name))
                    {
                        continue;
                    }
                    let mut kind = e.kind;
                    if kind == FileType::Unknown {
                        kind = backing::lookup(fd, &e.name)
                            .and_then(|f| backing::stat(f.as_fd()))
                            .map(|st| FileType::from_raw_mode(st.st_mode))
                            .unwrap_or(FileType::Unknown);
                    }
                    if !self.zones[zone].visible(&e.name, kind == FileType::Directory) {
                        continue;
                    }
                    // d_ino is a hint (the node id comes with lookup).
                    let ino = self.inodes.likely_id(zone, node.key.0, e.ino);
                    entries.push(DirItem {
                        offset: 0,
                        name: e.name,
                        kind: fuse_kind(kind),
                        ino,
                    });
                }
            }
        }
        for (i, e) in entries.iter_mut().enumerate() {
            e.offset = i as u64 + 1;
        }
        Ok(entries)
    }

    /// The entries after `offset`.
    pub fn readdir(&self, fh: u64, offset: u64) -> FsResult<Vec<DirItem>> {
        let h = self.handle(fh)?;
        match &*h {
            Handle::Dir { node, entries } => {
                let mut entries = entries.lock();
                // Listed afresh when the kernel starts over (rewinddir).
                if entries.is_none() || offset == 0 {
                    *entries = Some(self.list_dir(node)?);
                }
                Ok(entries
                    .iter()
                    .flatten()
                    .skip(offset as usize)
                    .cloned()
                    .collect())
            }
            Handle::File { .. } => Err(FsError::Os(libc::ENOTDIR)),
        }
    }

    pub fn releasedir(&self, fh: u64) {
        self.handle_shard(fh).lock().remove(&fh);
    }

    pub fn fsyncdir(&self, ino: u64, datasync: bool) -> FsResult<()> {
        let node = self.node(ino)?;
        if node.is_root() {
            return Ok(());
        }
        let dfd = self.procfds.open_dir(self.fd_of(&node)?.as_fd())?;
        Ok(backing::fsync(dfd.as_fd(), datasync)?)
    }

    pub fn statfs(&self, ino: u64) -> FsResult<Statfs> {
        // The mount root reports the first zone's filesystem.
        let node = match self.node(ino)? {
            n if !n.is_root() => n,
            _ => match self.inodes.zone_root(0) {
                Some(z) => z,
                None => {
                    return Ok(Statfs {
                        bsize: 4096,
                        frsize: 4096,
                        namelen: 255,
                        ..Statfs::default()
                    });
                }
            },
        };
        let v = backing::statvfs(self.fd_of(&node)?.as_fd())?;
        Ok(Statfs {
            blocks: v.f_blocks,
            bfree: v.f_bfree,
            bavail: v.f_bavail,
            files: v.f_files,
            ffree: v.f_ffree,
            bsize: v.f_bsize as u32,
            namelen: v.f_namemax as u32,
            frsize: v.f_frsize as u32,
        })
    }

    // ---- xattrs ------------------------------------------------------------

    fn xattr_target(&self, ino: u64) -> FsResult<Option<Arc<Node>>> {
        let node = self.node(ino)?;
        // The root and symlinks carry no xattrs of their own here.
        Ok((!node.is_root() && !node.is_symlink).then_some(node))
    }

    pub fn getxattr(&self, ino: u64, name: &OsStr, size: u32) -> FsResult<XattrReply> {
        let Some(node) = self.xattr_target(ino)? else {
            return Err(FsError::Os(libc::ENODATA));
        };
        let mut buf = Vec::with_capacity(size as usize);
        let n = self
            .procfds
            .getxattr(self.fd_of(&node)?.as_fd(), name, &mut buf)?;
        Ok(if size == 0 {
            XattrReply::Size(n as u32)
        } else {
            XattrReply::Data(buf)
        })
    }

    pub fn listxattr(&self, ino: u64, size: u32) -> FsResult<XattrReply> {
        let Some(node) = self.xattr_target(ino)? else {
            return Ok(if size == 0 {
                XattrReply::Size(0)
            } else {
                XattrReply::Data(Vec::new())
            });
        };
        let mut buf = Vec::with_capacity(size as usize);
        let n = self
            .procfds
            .listxattr(self.fd_of(&node)?.as_fd(), &mut buf)?;
        Ok(if size == 0 {
            XattrReply::Size(n as u32)
        } else {
            XattrReply::Data(buf)
        })
    }

    pub fn check_metadata(&self, ino: u64) -> FsResult<Gate> {
        let node = self.node(ino)?;
        let w = self.where_node(&node);
        self.gate(&Op::Metadata { at: self.loc(&w) })
    }

    pub fn setxattr(
        &self,
        caller: &Caller,
        ino: u64,
        name: &OsStr,
        value: &[u8],
        flags: i32,
    ) -> FsResult<()> {
        let _as = AsCaller::enter(caller)?;
        let Some(node) = self.xattr_target(ino)? else {
            return Err(FsError::Os(libc::EPERM));
        };
        Ok(self
            .procfds
            .setxattr(self.fd_of(&node)?.as_fd(), name, value, flags)?)
    }

    pub fn removexattr(&self, caller: &Caller, ino: u64, name: &OsStr) -> FsResult<()> {
        let _as = AsCaller::enter(caller)?;
        let Some(node) = self.xattr_target(ino)? else {
            return Err(FsError::Os(libc::ENODATA));
        };
        Ok(self.procfds.removexattr(self.fd_of(&node)?.as_fd(), name)?)
    }

    /// `access(2)`: only the zone rules matter here; mode bits are the
    /// kernel's (default_permissions).
    pub fn access(&self, ino: u64, mask: i32) -> FsResult<()> {
        let node = self.node(ino)?;
        if mask & libc::W_OK != 0 {
            match node.zone {
                None => return Err(Refusal::RootLevel.into()),
                Some(z) => {
                    let w = self.where_node(&node);
                    if self.zones[z].access == crate::config::Access::Ro
                        || self.zones[z].is_protected(&w.path, node.is_dir)
                    {
                        return Err(Refusal::ReadOnly.into());
                    }
                }
            }
        }
        Ok(())
    }
}

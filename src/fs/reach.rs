//! How a node reaches its backing object again, with a bounded number of
//! open fds: zone dirs (and, where kernel file handles can't be opened,
//! every node) hold an `O_PATH` fd; other nodes keep a file handle and get
//! an fd from a bounded, sharded LRU cache. Also here: what a directory
//! the host deleted (and perhaps made again) answers.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use lru::LruCache;
use parking_lot::Mutex;

use crate::backing::{self, FileType, ProcFds, Stat};
use crate::error::{FsError, FsResult, Refusal};
use crate::fs::inodes::{Anchor, Found, Node};

/// Shards of the fd cache, each with its own lock.
const SHARDS: usize = 16;

/// How many fds opened from file handles stay cached, per shard (2048 in
/// all).
const FD_CACHE_SHARD: NonZeroUsize = match NonZeroUsize::new(2048 / SHARDS) {
    Some(n) => n,
    None => NonZeroUsize::MIN,
};

/// What a lookup opened: the entry's identity and how to reach it again,
/// plus the fd itself for the cache.
pub struct Opened {
    pub found: Found,
    pub stat: Stat,
    pub fd: Arc<OwnedFd>,
}

#[derive(Debug)]
pub struct Reach {
    /// Nodes are kept as kernel file handles (else as held fds).
    by_handle: bool,
    /// fds of nodes kept as handles, most recently used last; sharded by
    /// node id.
    fd_cache: Vec<Mutex<LruCache<u64, Arc<OwnedFd>>>>,
    /// One fd per backing filesystem (by mount id), to open handles with.
    fs_fds: Mutex<HashMap<i32, Arc<OwnedFd>>>,
    /// `/proc/self/fd`, to reopen `O_PATH` fds for real work.
    pub procfds: ProcFds,
}

impl Reach {
    /// Kernel file handles keep fds bounded; reopening by handle needs
    /// CAP_DAC_READ_SEARCH, so it is probed on the first zone dir.
    pub fn new(zone_roots: &[(OsString, Found)], procfds: ProcFds) -> Reach {
        let by_handle = zone_roots.first().is_some_and(|(_, f)| match &f.anchor {
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
            for (_, f) in zone_roots {
                if let Anchor::Held(fd) = &f.anchor {
                    if let (Ok(h), Ok(dir)) =
                        (backing::handle_of(fd.as_fd()), procfds.open_dir(fd.as_fd()))
                    {
                        fs_fds.entry(h.mount_id).or_insert_with(|| Arc::new(dir));
                    }
                }
            }
        } else {
            tracing::warn!(
                "kernel file handles unavailable (not root?): every remembered inode holds an fd"
            );
        }
        Reach {
            by_handle,
            fd_cache: (0..SHARDS)
                .map(|_| Mutex::new(LruCache::new(FD_CACHE_SHARD)))
                .collect(),
            fs_fds: Mutex::new(fs_fds),
            procfds,
        }
    }

    fn shard(&self, ino: u64) -> &Mutex<LruCache<u64, Arc<OwnedFd>>> {
        &self.fd_cache[ino as usize % SHARDS]
    }

    /// An fd (`O_PATH`) on a node's backing object.
    pub fn fd_of(&self, node: &Node) -> FsResult<Arc<OwnedFd>> {
        match &node.anchor {
            // Only the mount root has no backing object.
            Anchor::None => Err(FsError::Refused(Refusal::RootLevel)),
            Anchor::Held(fd) => Ok(fd.clone()),
            Anchor::Handle(h) => {
                if let Some(fd) = self.shard(node.ino).lock().get(&node.ino) {
                    return Ok(fd.clone());
                }
                let fs_fd = self
                    .fs_fds
                    .lock()
                    .get(&h.mount_id)
                    .cloned()
                    .ok_or(FsError::Os(libc::ESTALE))?;
                let fd = Arc::new(backing::open_by_handle(fs_fd.as_fd(), h)?);
                self.shard(node.ino).lock().put(node.ino, fd.clone());
                Ok(fd)
            }
        }
    }

    /// Keep `fd` as the cached fd of a node anchored by its handle.
    pub fn cache(&self, node: &Node, fd: Arc<OwnedFd>) {
        if matches!(node.anchor, Anchor::Handle(_)) {
            self.shard(node.ino).lock().put(node.ino, fd);
        }
    }

    /// Drop node `ino`'s cached fd (forgotten, or gone on the host).
    pub fn evict(&self, ino: u64) {
        self.shard(ino).lock().pop(&ino);
    }

    /// Identify what `fd` (just opened by a lookup) refers to, and choose
    /// how its node will reach it again.
    pub fn opened(&self, fd: OwnedFd) -> FsResult<Opened> {
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
    pub fn handle_if_reopenable(
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

    // ---- directories deleted on the host ------------------------------

    /// The result of a name operation in directory `dir`, with one change:
    /// ENOENT because the directory itself was deleted and something else
    /// now stands in its place (the host made it again: direct mode shares
    /// backing dirs) answers ESTALE. The kernel then walks the caller's
    /// path again with its cached entries revalidated and finds the new
    /// one; without this a recreated directory would fail every operation
    /// for the entry TTL. A directory simply gone stays ENOENT, as on the
    /// host (a process whose cwd was removed).
    pub fn in_dir<T>(&self, dir: &Node, dir_fd: BorrowedFd<'_>, r: backing::Sys<T>) -> FsResult<T> {
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
    pub fn replaced(&self, dir: &Node) -> bool {
        self.at_place_of(dir, 0).is_some()
    }

    /// Whether a directory now stands where the (deleted) `dir` was last
    /// seen, holding an entry `name`.
    pub fn replacement_holds(&self, dir: &Node, name: &OsStr) -> bool {
        self.at_place_of(dir, 0)
            .is_some_and(|fd| backing::lookup(fd.as_fd(), name).is_ok())
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

    /// ESTALE for a node whose backing object has no name left and has been
    /// replaced; its fd leaves the cache, so the next use reopens it by
    /// handle (and fails).
    pub fn gone(&self, node: &Node) -> FsError {
        self.evict(node.ino);
        FsError::Os(libc::ESTALE)
    }
}

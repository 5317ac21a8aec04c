//! How a node reaches its backing object again, with a bounded number of
//! open fds. Only the zone dirs hold an `O_PATH` fd for the whole mount.
//! Every other node is reopened on demand and its fd kept in one bounded,
//! sharded LRU cache:
//! - by its kernel file handle (`open_by_handle_at`, which needs
//!   CAP_DAC_READ_SEARCH: probed on the first zone dir at start);
//! - else by name: from its parent's fd (itself cached, or reopened the
//!   same way, up to a zone dir) and its last known name, never following
//!   a symlink, and checked against the (device, inode number) it had. A
//!   mismatch, or no such name any more, means the host renamed, removed
//!   or replaced it: ESTALE, as a handle of a deleted file answers (the
//!   kernel then looks the path up again). Renames and links through the
//!   mount keep a node's place current. A file whose name was removed
//!   through the mount (unlink, renamed over) while the kernel still holds
//!   it is pinned (its fd kept outside the cache, a bounded number of
//!   them) until it is forgotten or found under another name; an open
//!   file works through its handle in any case. What this mode can't
//!   tell: an object the host deleted whose inode number a new object at
//!   the same name reused (handles tell by their generation).
//!
//! When the process runs out of fds (EMFILE, ENFILE), half of the cache is
//! closed and the open tried once more, so the mount keeps working after
//! any walk. Also here: what a directory the host deleted (and perhaps
//! made again) answers.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use lru::LruCache;
use parking_lot::Mutex;

use crate::backing::{self, FileType, ProcFds, Stat, Sys};
use crate::error::{FsError, FsResult, Refusal};
use crate::fs::inodes::{self, Anchor, Found, HeldFd, Node, Place};

/// Shards of the fd cache, each with its own lock.
const SHARDS: usize = 16;

/// `dir` (on some filesystem) to open handles with, if a handle of `dir`
/// itself (`h`) opens again there.
fn opens_handles(dir: OwnedFd, h: &backing::InodeHandle) -> Option<Arc<OwnedFd>> {
    backing::open_by_handle(dir.as_fd(), h)
        .is_ok()
        .then(|| Arc::new(dir))
}

/// The most fds the cache keeps (in all shards together).
pub const FD_CACHE_MAX: usize = 2048;

/// The longest chain of ancestors reopened by name to reach one node.
const MAX_CLIMB: usize = inodes::MAX_DEPTH;

/// How many times a walk down by names is tried when a node moved (a
/// rename through the mount) while it walked.
const WALK_TRIES: usize = 3;

/// What a lookup opened: the entry's identity and how to reach it again,
/// plus the fd itself for the cache.
pub struct Opened {
    pub found: Found,
    pub stat: Stat,
    pub fd: Arc<OwnedFd>,
}

/// Whether nodes are reopened by kernel file handle, and if not, why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileHandles {
    /// In use.
    Used,
    /// `open_by_handle_at` refused: the daemon lacks CAP_DAC_READ_SEARCH.
    NoCapability,
    /// The zone's filesystem gives no file handles.
    NotSupported,
    /// Turned off (tests of the by-name path).
    Off,
}

/// A node's cached fd, and whether it was opened for reading (an `O_PATH`
/// fd was not): an OPEN of a cached reader then needs no `fcntl` to tell.
#[derive(Debug, Clone)]
struct Kept {
    fd: Arc<OwnedFd>,
    reads: bool,
}

#[derive(Debug)]
pub struct Reach {
    handles: FileHandles,
    /// Some node is reopened by name (in handle mode: one on a filesystem
    /// whose handles can't be opened).
    named_seen: AtomicBool,
    /// fds of nodes that are reopened on demand, most recently used last;
    /// sharded by node id.
    fd_cache: Vec<Mutex<LruCache<u64, Kept>>>,
    /// fds of named nodes whose name was removed through the mount while
    /// the kernel still holds them (by node id); at most `pin_max`.
    pinned: Mutex<HashMap<u64, Arc<OwnedFd>>>,
    pin_max: usize,
    /// The named node each of a few directories last answered a lookup
    /// with: (directory, hash of the name, node), by directory.
    last_lookup: Vec<Mutex<(u64, u64, u64)>>,
    name_hasher: std::hash::RandomState,
    /// One fd per backing filesystem (by mount id), to open handles with;
    /// None for one whose handles can't be opened (an overlay without
    /// `nfs_export`: a staged zone's nodes are reopened by name).
    fs_fds: Mutex<HashMap<i32, Option<Arc<OwnedFd>>>>,
    /// `/proc/self/fd`, to reopen `O_PATH` fds for real work.
    pub procfds: ProcFds,
    /// How many times each zone's dir was replaced by a fresh overlay
    /// mount (a staged zone's checkpoint, rewind, commit or discard).
    restaged: Vec<AtomicU64>,
}

/// One step of a walk down by names: a node, its name in the step above,
/// and the identity it must have.
struct Step<'a> {
    node: Who<'a>,
    name: OsString,
}

/// The node a step reopens: the one asked for, or an ancestor.
enum Who<'a> {
    This(&'a Node),
    Up(Arc<Node>),
}

impl std::ops::Deref for Who<'_> {
    type Target = Node;
    fn deref(&self) -> &Node {
        match self {
            Who::This(n) => n,
            Who::Up(n) => n,
        }
    }
}

impl Reach {
    /// Kernel file handles keep fds bounded; reopening by handle needs
    /// CAP_DAC_READ_SEARCH, so it is probed on the first zone dir. Without
    /// them (or with `try_handles` false) nodes are reopened by name.
    pub fn new(zone_roots: &[(OsString, Found)], procfds: ProcFds, try_handles: bool) -> Reach {
        // Probed on each zone dir until one answers (a staged zone's
        // overlay gives handles that can't be opened; its nodes are
        // reopened by name whatever the others do).
        let probe = |held: &HeldFd| {
            let fd = held.get();
            match backing::handle_of(fd.as_fd()) {
                Err(_) => FileHandles::NotSupported,
                Ok(h) => match procfds
                    .open_dir(fd.as_fd())
                    .and_then(|dir| backing::open_by_handle(dir.as_fd(), &h))
                {
                    Ok(_) => FileHandles::Used,
                    Err(e) if e == rustix::io::Errno::PERM => FileHandles::NoCapability,
                    Err(_) => FileHandles::NotSupported,
                },
            }
        };
        let mut handles = FileHandles::Off;
        if try_handles {
            for (_, f) in zone_roots {
                if let Anchor::Held(held) = &f.anchor {
                    handles = probe(held);
                    if handles != FileHandles::NotSupported {
                        break;
                    }
                }
            }
        }
        // Each zone root's filesystem gets its fd for opening handles.
        let mut fs_fds = HashMap::new();
        if handles == FileHandles::Used {
            for (_, f) in zone_roots {
                if let Anchor::Held(held) = &f.anchor {
                    let fd = held.get();
                    if let (Ok(h), Ok(dir)) =
                        (backing::handle_of(fd.as_fd()), procfds.open_dir(fd.as_fd()))
                    {
                        fs_fds
                            .entry(h.mount_id)
                            .or_insert_with(|| opens_handles(dir, &h));
                    }
                }
            }
        } else {
            tracing::info!(
                ?handles,
                "kernel file handles not used: nodes are reopened from their parent by name"
            );
        }
        let size = cache_size(backing::nofile_limit());
        let per_shard = NonZeroUsize::new(size / SHARDS).unwrap_or(NonZeroUsize::MIN);
        Reach {
            handles,
            named_seen: AtomicBool::new(handles != FileHandles::Used),
            fd_cache: (0..SHARDS)
                .map(|_| Mutex::new(LruCache::new(per_shard)))
                .collect(),
            pinned: Mutex::new(HashMap::new()),
            pin_max: size / 4,
            last_lookup: (0..SHARDS).map(|_| Mutex::new((0, 0, 0))).collect(),
            name_hasher: std::hash::RandomState::new(),
            fs_fds: Mutex::new(fs_fds),
            procfds,
            restaged: zone_roots.iter().map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Zone `zone`'s dir is a fresh overlay mount now: its nodes are found
    /// again by name (see `walk_down`).
    pub fn restaged(&self, zone: usize) {
        if let Some(g) = self.restaged.get(zone) {
            g.fetch_add(1, Ordering::Release);
        }
    }

    /// How many times zone `zone`'s dir was mounted afresh.
    pub fn restages(&self, zone: usize) -> u64 {
        self.restaged
            .get(zone)
            .map_or(0, |g| g.load(Ordering::Acquire))
    }

    /// Whether nodes are reopened by kernel file handle, and if not, why.
    pub fn handles(&self) -> FileHandles {
        self.handles
    }

    /// Whether some node may be reopened by name.
    pub fn reopens_by_name(&self) -> bool {
        self.named_seen.load(Ordering::Relaxed)
    }

    fn shard(&self, ino: u64) -> &Mutex<LruCache<u64, Kept>> {
        &self.fd_cache[ino as usize % SHARDS]
    }

    /// Cache `fd` (open for reading: `reads`) for node `ino`; what that
    /// pushes out (the shard's least recently used fd, or the node's
    /// previous one) is closed after the shard's lock, which other requests
    /// may be waiting for.
    fn keep(&self, ino: u64, fd: Arc<OwnedFd>, reads: bool) {
        let out = self.shard(ino).lock().push(ino, Kept { fd, reads });
        drop(out);
    }

    /// An fd on a node's backing object: `O_PATH`, or the read-only fd of
    /// a file registered for passthrough (`Core::passthrough_id`).
    pub fn fd_of(&self, node: &Node) -> FsResult<Arc<OwnedFd>> {
        match &node.anchor {
            // Only the mount root has no backing object.
            Anchor::None => Err(FsError::Refused(Refusal::RootLevel)),
            Anchor::Held(fd) => Ok(fd.get()),
            Anchor::Handle(h) => {
                if let Some(k) = self.shard(node.ino).lock().get(&node.ino) {
                    return Ok(k.fd.clone());
                }
                let fs_fd = self
                    .fs_fds
                    .lock()
                    .get(&h.mount_id)
                    .cloned()
                    .flatten()
                    .ok_or(FsError::Os(libc::ESTALE))?;
                let fd = Arc::new(self.with_fds(|| backing::open_by_handle(fs_fd.as_fd(), h))?);
                self.keep(node.ino, fd.clone(), false);
                Ok(fd)
            }
            Anchor::Named => match self.at_hand(node.ino) {
                Some(fd) => Ok(fd),
                None => self.reopen_named(node),
            },
        }
    }

    /// An fd open for reading on regular file `node`, shared by its plain
    /// read-only opens (one open and close less per OPEN and RELEASE): the
    /// node's cached fd when that one reads; else, for a node with a
    /// kernel file handle, one opened from it for reading with the
    /// thread's rights, then cached as the node's fd. None: open it as
    /// usual, then [`Reach::keep_reader`].
    pub fn shared_reader(&self, node: &Node) -> FsResult<Option<Arc<OwnedFd>>> {
        if node.is_dir || node.is_symlink {
            return Ok(None);
        }
        let cached = self.shard(node.ino).lock().get(&node.ino).cloned();
        if let Some(k) = cached.filter(|k| k.reads) {
            return Ok(Some(k.fd));
        }
        let Anchor::Handle(h) = &node.anchor else {
            return Ok(None);
        };
        let Some(fs_fd) = self.fs_fds.lock().get(&h.mount_id).cloned().flatten() else {
            return Ok(None);
        };
        let fd = Arc::new(self.with_fds(|| backing::open_handle_for_reading(fs_fd.as_fd(), h))?);
        self.keep(node.ino, fd.clone(), true);
        Ok(Some(fd))
    }

    /// Keep `fd`, just opened for reading on `node`, as its cached fd
    /// for [`Reach::shared_reader`]. A pinned node's pin stays: its name
    /// was removed, so only the pin reaches it once the cache drops it.
    pub fn keep_reader(&self, node: &Node, fd: Arc<OwnedFd>) {
        match node.anchor {
            Anchor::Handle(_) => self.keep(node.ino, fd, true),
            Anchor::Named if !self.is_pinned(node.ino) => self.keep(node.ino, fd, true),
            Anchor::Named | Anchor::None | Anchor::Held(_) => {}
        }
    }

    /// The fd a named node has at hand: cached, or pinned.
    fn at_hand(&self, ino: u64) -> Option<Arc<OwnedFd>> {
        if let Some(k) = self.shard(ino).lock().get(&ino) {
            return Some(k.fd.clone());
        }
        self.pinned.lock().get(&ino).cloned()
    }

    /// The fd node `ino` has at hand, without counting it as a use (to
    /// tell a reused inode number, see [`Anchor::same_object`]).
    pub fn cached(&self, ino: u64) -> Option<Arc<OwnedFd>> {
        if let Some(k) = self.shard(ino).lock().peek(&ino) {
            return Some(k.fd.clone());
        }
        self.pinned.lock().get(&ino).cloned()
    }

    /// The fd of an ancestor met while climbing: at hand (held, cached,
    /// pinned, or by handle), or None when it too must be reopened by name.
    fn ancestor_fd(&self, node: &Node) -> FsResult<Option<Arc<OwnedFd>>> {
        match &node.anchor {
            Anchor::None => Err(FsError::Os(libc::ESTALE)),
            Anchor::Held(_) | Anchor::Handle(_) => self.fd_of(node).map(Some),
            Anchor::Named => Ok(self.at_hand(node.ino)),
        }
    }

    /// Reopen a named node: climb its places up to the first ancestor with
    /// an fd at hand (a zone dir at the latest), then walk down name by
    /// name, checking each object's identity and caching each fd. No lock
    /// is held across a system call. A walk that fails while some node
    /// moved through the mount is tried again (a few times).
    fn reopen_named(&self, node: &Node) -> FsResult<Arc<OwnedFd>> {
        let mut tries = 0;
        loop {
            let moves = inodes::place_changes();
            match self.walk_down(node) {
                Err(e) if tries + 1 < WALK_TRIES && inodes::place_changes() != moves => {
                    tracing::debug!(ino = node.ino, "walk by names raced a move: {e:?}");
                    tries += 1;
                }
                r => return r,
            }
        }
    }

    fn walk_down(&self, node: &Node) -> FsResult<Arc<OwnedFd>> {
        let stale = || FsError::Os(libc::ESTALE);
        let Place { parent, name } = node.place.lock().clone();
        let mut steps = vec![Step {
            node: Who::This(node),
            name,
        }];
        let mut up = parent;
        let mut fd = loop {
            let p = up.ok_or_else(stale)?;
            if let Some(fd) = self.ancestor_fd(&p)? {
                break fd;
            }
            if steps.len() >= MAX_CLIMB {
                tracing::warn!(ino = node.ino, "more than {MAX_CLIMB} ancestors to reopen");
                return Err(stale());
            }
            let Place { parent, name } = p.place.lock().clone();
            steps.push(Step {
                node: Who::Up(p.clone()),
                name,
            });
            up = parent;
        };
        for s in steps.iter().rev() {
            let (child, st) = match self.with_fds(|| backing::reach_again(fd.as_fd(), &s.name)) {
                Ok(found) => found,
                // The name is gone, or a directory on the way is now
                // something else: the host moved or removed it.
                Err(e) if e == rustix::io::Errno::NOENT || e == rustix::io::Errno::NOTDIR => {
                    return Err(stale());
                }
                Err(e) => return Err(e.into()),
            };
            if (st.st_dev, st.st_ino) != s.node.key() {
                let generation = s.node.zone.map_or(0, |z| self.restages(z));
                if s.node.key_generation() < generation {
                    // The zone's overlay was mounted afresh since this
                    // node was last seen: the same name is the same file.
                    s.node.rekey(st.st_dev, st.st_ino, generation);
                } else {
                    // Something else has that name now: the host replaced it.
                    return Err(stale());
                }
            }
            let child = Arc::new(child);
            self.keep(s.node.ino, child.clone(), false);
            fd = child;
        }
        Ok(fd)
    }

    /// Keep `fd` (open for reading: `reads`; else `O_PATH`) as the cached
    /// fd of a node reopened on demand (just looked up: it is at hand
    /// again, so any pin goes).
    pub fn cache(&self, node: &Node, fd: Arc<OwnedFd>, reads: bool) {
        match node.anchor {
            Anchor::Handle(_) => self.keep(node.ino, fd, reads),
            Anchor::Named => {
                self.keep(node.ino, fd, reads);
                let unpinned = self.pinned.lock().remove(&node.ino);
                drop(unpinned);
            }
            Anchor::None | Anchor::Held(_) => {}
        }
    }

    /// `name` in directory `dir` was just looked up as named node `ino`.
    pub fn looked_up(&self, dir: u64, name: &OsStr, ino: u64) {
        let hash = std::hash::BuildHasher::hash_one(&self.name_hasher, name);
        *self.last_lookup[dir as usize % SHARDS].lock() = (dir, hash, ino);
    }

    /// The named node `name` in `dir` was last looked up as, if no other
    /// lookup in a directory of the same shard came since: the kernel
    /// looks a name up right before it removes it, so a removal finds its
    /// victim without a stat. A hint: the caller checks the node's place.
    pub fn last_looked_up(&self, dir: u64, name: &OsStr) -> Option<u64> {
        let hash = std::hash::BuildHasher::hash_one(&self.name_hasher, name);
        let (d, h, ino) = *self.last_lookup[dir as usize % SHARDS].lock();
        (d == dir && h == hash && ino != 0).then_some(ino)
    }

    /// Keep `fd` for a named node whose last known name was just removed
    /// through the mount: it is reached through `fd` until forgotten or
    /// found again under a name. Pins are bounded (a quarter of the
    /// cache); beyond that the node is reached through its cached fd
    /// while that lasts, then is stale (an open file still works through
    /// its handle).
    pub fn pin(&self, node: &Node, fd: Arc<OwnedFd>) {
        // A removed directory has nothing left to reach (as with a handle).
        if !matches!(node.anchor, Anchor::Named) || node.is_dir {
            return;
        }
        let mut pinned = self.pinned.lock();
        if pinned.len() >= self.pin_max && !pinned.contains_key(&node.ino) {
            tracing::debug!(ino = node.ino, "too many pinned fds: not pinned");
            return;
        }
        pinned.insert(node.ino, fd);
    }

    /// Whether node `ino` is kept by its pinned fd (its name was removed
    /// through the mount).
    pub fn is_pinned(&self, ino: u64) -> bool {
        self.pinned.lock().contains_key(&ino)
    }

    /// Drop node `ino`'s fds (forgotten, or gone on the host).
    pub fn evict(&self, ino: u64) {
        let cached = self.shard(ino).lock().pop(&ino);
        let pinned = self.pinned.lock().remove(&ino);
        // Closed after the locks: the close of an unlinked file's last fd
        // is where the backing filesystem frees it.
        drop((cached, pinned));
    }

    /// fds kept now: (cached, pinned).
    pub fn fds_kept(&self) -> (usize, usize) {
        let cached = self.fd_cache.iter().map(|s| s.lock().len()).sum();
        (cached, self.pinned.lock().len())
    }

    /// Close every cached fd: nodes are reached again from their zone
    /// dirs (tests).
    #[cfg(test)]
    pub fn clear_cache(&self) {
        for s in &self.fd_cache {
            s.lock().clear();
        }
    }

    /// Empty the cache: nodes are reached again from their zone dirs
    /// (after a staged zone's dir moved to a fresh overlay). The fds are
    /// handed back to be closed elsewhere (closing a staged zone's
    /// thousands of fds on its old overlay takes milliseconds).
    pub fn take_cache(&self) -> Vec<Arc<OwnedFd>> {
        let mut out = Vec::new();
        for s in &self.fd_cache {
            let mut s = s.lock();
            while let Some((_, k)) = s.pop_lru() {
                out.push(k.fd);
            }
        }
        out
    }

    /// Close the least recently used half of the cache.
    fn shed(&self) {
        let mut closed = 0;
        for s in &self.fd_cache {
            let mut s = s.lock();
            let n = s.len().div_ceil(2);
            for _ in 0..n {
                if s.pop_lru().is_some() {
                    closed += 1;
                }
            }
        }
        tracing::warn!(closed, "out of fds: closed half of the fd cache");
    }

    /// Run `open`; when it fails for want of fds (EMFILE, ENFILE), close
    /// half of the cache and run it once more.
    pub fn with_fds<T>(&self, mut open: impl FnMut() -> Sys<T>) -> Sys<T> {
        match open() {
            Err(e) if backing::out_of_fds(e) => {
                self.shed();
                open()
            }
            r => r,
        }
    }

    // ---- opening, with a second try when out of fds ---------------------

    /// [`backing::lookup`].
    pub fn lookup(&self, dir: BorrowedFd<'_>, name: &OsStr) -> Sys<OwnedFd> {
        self.with_fds(|| backing::lookup(dir, name))
    }

    /// [`backing::create`].
    pub fn create(&self, dir: BorrowedFd<'_>, name: &OsStr, flags: i32, mode: u32) -> Sys<OwnedFd> {
        self.with_fds(|| backing::create(dir, name, flags, mode))
    }

    /// [`ProcFds::reopen`].
    pub fn reopen(&self, fd: BorrowedFd<'_>, flags: i32) -> Sys<OwnedFd> {
        self.with_fds(|| self.procfds.reopen(fd, flags))
    }

    /// [`ProcFds::open_dir`].
    pub fn open_dir(&self, fd: BorrowedFd<'_>) -> Sys<OwnedFd> {
        self.with_fds(|| self.procfds.open_dir(fd))
    }

    /// Identify what `fd` (just opened by a lookup) refers to, and choose
    /// how its node will reach it again.
    pub fn opened(&self, fd: OwnedFd) -> FsResult<Opened> {
        let stat = backing::stat(fd.as_fd())?;
        let kind = FileType::from_raw_mode(stat.st_mode);
        let fd = Arc::new(fd);
        let anchor = match self.handle_if_reopenable(fd.as_fd(), kind) {
            Some(h) => Anchor::Handle(h),
            None => self.named(),
        };
        Ok(Opened {
            found: Found {
                anchor,
                dev: stat.st_dev,
                ino: stat.st_ino,
                is_dir: kind == FileType::Directory,
                is_symlink: kind == FileType::Symlink,
                // Set by the caller, which knows the zone.
                generation: 0,
            },
            stat,
            fd,
        })
    }

    /// The anchor of a node reopened by name.
    fn named(&self) -> Anchor {
        if !self.named_seen.load(Ordering::Relaxed) {
            self.named_seen.store(true, Ordering::Relaxed);
        }
        Anchor::Named
    }

    /// A kernel file handle for what `fd` holds, when handles are in use
    /// and can be opened again on its filesystem.
    pub fn handle_if_reopenable(
        &self,
        fd: BorrowedFd<'_>,
        kind: FileType,
    ) -> Option<backing::InodeHandle> {
        if self.handles != FileHandles::Used {
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
        if let Some(known) = fs_fds.get(&mount_id) {
            return known.is_some();
        }
        if kind != FileType::Directory {
            return false;
        }
        match (self.procfds.open_dir(fd), backing::handle_of(fd)) {
            (Ok(dir), Ok(h)) => {
                let fs = opens_handles(dir, &h);
                let can = fs.is_some();
                fs_fds.insert(mount_id, fs);
                can
            }
            _ => false,
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
            return self.lookup(up_fd.as_fd(), &node.name()).ok();
        }
        if depth >= MAX_CLIMB {
            return None;
        }
        let new_up = self.at_place_of(&up, depth + 1)?;
        self.lookup(new_up.as_fd(), &node.name()).ok()
    }

    /// ESTALE for a node whose backing object has no name left and has been
    /// replaced; its fd leaves the cache, so the next use reopens it (by
    /// handle or by name) and fails.
    pub fn gone(&self, node: &Node) -> FsError {
        self.evict(node.ino);
        FsError::Os(libc::ESTALE)
    }
}

/// How many fds the cache may keep under a soft `RLIMIT_NOFILE` of
/// `limit`: [`FD_CACHE_MAX`], or half the limit when that is lower (the
/// rest is for open files, directories being listed and the FUSE
/// session), but at least one per shard.
pub fn cache_size(limit: Option<u64>) -> usize {
    let half = limit.map_or(usize::MAX, |l| usize::try_from(l / 2).unwrap_or(usize::MAX));
    half.clamp(SHARDS, FD_CACHE_MAX)
}

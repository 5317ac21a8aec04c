//! The table of open files and directories: handle numbers from a counter
//! that never recycles, sharded so FUSE threads serving different files
//! rarely wait for each other. A handle of the wrong kind is EISDIR or
//! ENOTDIR; an unknown one EBADF.
//!
//! A file made by a create whose approval is pending carries what the
//! core keeps of that create (`H`, the core's `HeldCreate`); the table only
//! holds it, so it knows nothing of approvals.

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::fuse::FileType as FuseType;
use parking_lot::Mutex;

use crate::error::{FsError, FsResult};
use crate::fs::inodes::Node;

/// Shards of the table, each with its own lock.
const SHARDS: usize = 16;

/// One directory entry as the kernel gets it.
#[derive(Debug, Clone)]
pub struct DirItem {
    pub offset: u64,
    pub name: OsString,
    pub kind: FuseType,
    pub ino: u64,
}

#[derive(Debug)]
pub enum Handle<H> {
    File {
        fd: Arc<OwnedFd>,
        /// The zone's index: its size limit applies to every write.
        zone: usize,
        /// Opened for writing: approved, so writes through it are not
        /// asked again.
        writable: bool,
        /// Made by a create whose approval is pending: its writes wait.
        held: Option<Arc<H>>,
        /// The node it was opened on (a checkpoint finds the file by the
        /// node's path).
        node: u64,
        /// Whose open it is, when that user's open files are counted (a
        /// user other than the mount's owner and root): see
        /// [`Handles::open_by_and_all`].
        counted: Option<u32>,
    },
    Dir {
        node: Arc<Node>,
        /// Listed at the first readdir, not at opendir: with the kernel
        /// caching directory contents (`FOPEN_CACHE_DIR`), most opens of a
        /// known directory never read it.
        entries: Mutex<Option<Vec<DirItem>>>,
    },
}

impl<H> Handle<H> {
    /// The open file's fd; EISDIR for a directory.
    pub fn fd(&self) -> FsResult<BorrowedFd<'_>> {
        match self {
            Handle::File { fd, .. } => Ok(fd.as_fd()),
            Handle::Dir { .. } => Err(FsError::Os(libc::EISDIR)),
        }
    }
}

#[derive(Debug)]
pub struct Handles<H> {
    shards: Vec<Mutex<HashMap<u64, Arc<Handle<H>>>>>,
    next: AtomicU64,
    /// Open files by uid.
    by_uid: Mutex<HashMap<u32, usize>>,
}

impl<H> Default for Handles<H> {
    fn default() -> Self {
        Handles {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            next: AtomicU64::new(1),
            by_uid: Mutex::new(HashMap::new()),
        }
    }
}

impl<H> Handles<H> {
    fn shard(&self, fh: u64) -> &Mutex<HashMap<u64, Arc<Handle<H>>>> {
        &self.shards[fh as usize % SHARDS]
    }

    pub fn add(&self, h: Handle<H>) -> u64 {
        if let Handle::File {
            counted: Some(uid), ..
        } = &h
        {
            *self.by_uid.lock().entry(*uid).or_default() += 1;
        }
        let fh = self.next.fetch_add(1, Ordering::Relaxed);
        self.shard(fh).lock().insert(fh, Arc::new(h));
        fh
    }

    /// How many files user `uid` has open through the mount, and all the
    /// counted users together (counted for users other than the mount's
    /// owner and root only: the lock is not taken for the others' opens).
    pub fn open_by_and_all(&self, uid: u32) -> (usize, usize) {
        let by = self.by_uid.lock();
        (by.get(&uid).copied().unwrap_or(0), by.values().sum())
    }

    pub fn get(&self, fh: u64) -> FsResult<Arc<Handle<H>>> {
        self.shard(fh)
            .lock()
            .get(&fh)
            .cloned()
            .ok_or(FsError::Os(libc::EBADF))
    }

    /// An open file and its zone; EISDIR for a directory.
    pub fn file(&self, fh: u64) -> FsResult<(Arc<Handle<H>>, usize)> {
        let h = self.get(fh)?;
        match &*h {
            Handle::File { zone, .. } => {
                let z = *zone;
                Ok((h, z))
            }
            Handle::Dir { .. } => Err(FsError::Os(libc::EISDIR)),
        }
    }

    /// The fd of `fh` when it is a file opened for writing.
    pub fn writable_fd(&self, fh: Option<u64>) -> Option<(Arc<Handle<H>>, usize)> {
        let (h, zone) = self.file(fh?).ok()?;
        matches!(&*h, Handle::File { writable: true, .. }).then_some((h, zone))
    }

    pub fn remove(&self, fh: u64) {
        let gone = self.shard(fh).lock().remove(&fh);
        if let Some(Handle::File {
            counted: Some(uid), ..
        }) = gone.as_deref()
        {
            let mut by = self.by_uid.lock();
            if let Some(n) = by.get_mut(uid) {
                *n -= 1;
                if *n == 0 {
                    by.remove(uid);
                }
            }
        }
    }

    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    /// The open handles `which` picks.
    pub fn picked(&self, which: impl Fn(&Handle<H>) -> bool) -> Vec<Arc<Handle<H>>> {
        self.picked_by_fh(which)
            .into_iter()
            .map(|(_, h)| h)
            .collect()
    }

    /// The open handles `which` picks, each with its number (numbers are
    /// never given twice).
    pub fn picked_by_fh(&self, which: impl Fn(&Handle<H>) -> bool) -> Vec<(u64, Arc<Handle<H>>)> {
        self.shards
            .iter()
            .flat_map(|s| {
                s.lock()
                    .iter()
                    .filter(|(_, h)| which(h))
                    .map(|(fh, h)| (*fh, h.clone()))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// How many open handles `which` picks.
    pub fn count(&self, which: impl Fn(&Handle<H>) -> bool) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().values().filter(|h| which(h)).count())
            .sum()
    }
}

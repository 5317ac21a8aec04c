//! Directories: opendir, readdir (plain and plus), releasedir, fsyncdir,
//! and statfs. A listing leaves out every name the policy hides.

use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::fuse::{FileAttr, FileType as FuseType};
use parking_lot::Mutex;

use super::gate::Keep;
use super::{Core, Ctx, Entry, Statfs};
use crate::backing::{self, FileType};
use crate::error::Refusal;
use crate::error::{FsError, FsResult};

/// The size every directory shows in a zone that hides paths (see
/// [`Core::dir_attr`]).
const DIR_SIZE: u64 = 4096;
use crate::fs::attr::{fuse_kind, to_attr};
use crate::fs::handles::{DirItem, Handle};
use crate::fs::inodes::{Node, ROOT};
use crate::policy::{Action, Loc, Op, Subject};

/// A directory as `stat` saw it: which one, and the state of its entries.
/// A directory whose entries change gets a new mtime, ctime and (for a
/// subdirectory made or removed) link count, so a count kept under this key
/// is never applied to entries it wasn't counted from.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Seen {
    dev: u64,
    ino: u64,
    nlink: u64,
    mtime: (i64, u64),
    ctime: (i64, u64),
}

impl Seen {
    fn of(st: &backing::Stat) -> Seen {
        Seen {
            dev: st.st_dev,
            ino: st.st_ino,
            nlink: st.st_nlink,
            mtime: (st.st_mtime, st.st_mtime_nsec),
            ctime: (st.st_ctime, st.st_ctime_nsec),
        }
    }
}

/// How many hidden subdirectories directories held when last listed, so a
/// directory's link count costs one listing per change of it, not one per
/// `stat` (a `readdirplus` of its parent looks each subdirectory up).
/// Bounded: emptied when full.
#[derive(Default)]
pub(super) struct HiddenSubdirs(Mutex<std::collections::HashMap<(u64, u64), (Seen, u32)>>);

impl HiddenSubdirs {
    const MAX: usize = 4096;

    /// The count kept for this directory in exactly this state.
    fn get(&self, key: &Seen) -> Option<u32> {
        match self.0.lock().get(&(key.dev, key.ino)) {
            Some((seen, n)) if seen == key => Some(*n),
            _ => None,
        }
    }

    fn put(&self, key: Seen, hidden: u32) {
        let mut kept = self.0.lock();
        if kept.len() >= Self::MAX {
            kept.clear();
        }
        kept.insert((key.dev, key.ino), (key, hidden));
    }
}

/// The last listing of each directory read without a handle (a mount
/// whose opens the kernel makes itself: READDIR with fh 0), so the
/// kernel's later chunks of one listing come from the listing its first
/// chunk came from. Listed afresh whenever the kernel starts over
/// (offset 0). Bounded: emptied when full.
#[derive(Default)]
pub(super) struct Listings(Mutex<std::collections::HashMap<u64, Arc<Vec<DirItem>>>>);

impl Listings {
    const MAX: usize = 256;
}

impl Core {
    /// Opening a directory deleted and replaced on the host is ESTALE (see
    /// `getattr`). On a mount whose opens the kernel makes itself
    /// (`kernel_opens`), a directory that could be opened is answered
    /// ENOSYS instead of a handle: the kernel then sends no OPENDIR or
    /// RELEASEDIR again on this mount, and READDIR with no handle (fh 0),
    /// read by node ([`Core::readdir_node`]).
    pub fn opendir(&self, ctx: &Ctx, ino: u64) -> FsResult<u64> {
        let fh = self.opendir_handle(ctx, ino)?;
        if self.kernel_opens().is_ok() {
            self.releasedir(fh);
            return Err(FsError::Os(libc::ENOSYS));
        }
        Ok(fh)
    }

    fn opendir_handle(&self, ctx: &Ctx, ino: u64) -> FsResult<u64> {
        self.admit(ctx)?;
        let node = self.node(ino)?;
        if !node.is_root()
            && backing::is_deleted(self.reach.fd_of(&node)?.as_fd())
            && self.reach.replaced(&node)
        {
            return Err(self.reach.gone(&node));
        }
        Ok(self.handles.add(Handle::Dir {
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
        let dot = |name: &str, ino| DirItem {
            offset: 0,
            name: name.into(),
            kind: FuseType::Directory,
            ino,
        };
        let mut entries = vec![dot(".", node.ino), dot("..", parent_ino)];
        match node.zone {
            None => {
                for (i, name) in self.zone_names.iter().enumerate() {
                    entries.push(DirItem {
                        name: name.clone(),
                        ..dot("", 2 + i as u64)
                    });
                }
            }
            Some(zone) => self.list_zone_dir(zone, node, &mut entries)?,
        }
        for (i, e) in entries.iter_mut().enumerate() {
            e.offset = i as u64 + 1;
        }
        Ok(entries)
    }

    /// Every entry of the directory `dir_path` of `zone` (whose fd is
    /// `fd`), with its kind and whether the worker may see it.
    fn seen_entries(
        &self,
        zone: usize,
        dir_path: &Path,
        fd: BorrowedFd<'_>,
    ) -> FsResult<Vec<(backing::DirEntry, FileType, bool)>> {
        let list = backing::read_dir(self.reach.open_dir(fd)?)?;
        Ok(list
            .into_iter()
            .map(|e| {
                let mut kind = e.kind;
                if kind == FileType::Unknown {
                    kind = self
                        .reach
                        .lookup(fd, &e.name)
                        .and_then(|f| backing::stat(f.as_fd()))
                        .map(|st| FileType::from_raw_mode(st.st_mode))
                        .unwrap_or(FileType::Unknown);
                }
                let path = dir_path.join(&e.name);
                let at = Loc::in_zone(&self.zones[zone], &path);
                let is_dir = Some(kind == FileType::Directory);
                let seen = Self::question(&Op::Look { at, is_dir }).is_ok();
                (e, kind, seen)
            })
            .collect())
    }

    /// The attributes the worker sees of the directory `dir_path` of `zone`
    /// (fd `fd`, backing `st`): in a zone that hides paths, its link count
    /// leaves out the subdirectories it can't see (`hide`, sensitive
    /// roots), which would otherwise give them away (2 + subdirectories,
    /// as `find` relies on), and its size is [`DIR_SIZE`]. Only listed
    /// when the directory has subdirectories at all.
    pub(super) fn dir_attr(
        &self,
        ino: u64,
        zone: usize,
        dir_path: impl FnOnce() -> PathBuf,
        fd: BorrowedFd<'_>,
        st: &backing::Stat,
    ) -> FileAttr {
        let mut attr = to_attr(ino, st);
        if attr.kind != FuseType::Directory || !self.zones[zone].hides_paths() {
            return attr;
        }
        // Its size grows with its entries, hidden ones too: every
        // directory here shows one block's, the least a directory has.
        attr.size = DIR_SIZE;
        attr.blocks = DIR_SIZE / 512;
        if attr.nlink <= 2 {
            return attr;
        }
        let key = Seen::of(st);
        let hidden = match self.hidden_subdirs.get(&key) {
            Some(n) => n,
            None => {
                // Unlisted (a race, a vanished dir): the host's count.
                let Ok(entries) = self.seen_entries(zone, &dir_path(), fd) else {
                    return attr;
                };
                let n = entries
                    .iter()
                    .filter(|(_, kind, seen)| *kind == FileType::Directory && !seen)
                    .count() as u32;
                self.hidden_subdirs.put(key, n);
                n
            }
        };
        attr.nlink = attr.nlink.saturating_sub(hidden).max(2);
        attr
    }

    /// What to answer for the host's "not empty" (`e`) about the directory
    /// `name` in `parent` (of `zone`, fd `parent_fd`), removed or renamed
    /// over: `e` itself, unless the worker can see none of what it holds;
    /// then the refusal of a removal for what it holds (kept as every
    /// refusal is), which does not say it isn't empty.
    pub(super) fn not_empty(
        &self,
        ctx: &Ctx,
        zone: usize,
        parent: &Node,
        parent_fd: BorrowedFd<'_>,
        name: &std::ffi::OsStr,
        e: FsError,
    ) -> FsError {
        let Ok(fd) = self.reach.lookup(parent_fd, name) else {
            return e;
        };
        let path = parent.zone_path().join(name);
        let unseen = self
            .seen_entries(zone, &path, fd.as_fd())
            .is_ok_and(|e| !e.is_empty() && e.iter().all(|(_, _, seen)| !seen));
        if !unseen {
            return e;
        }
        let at = Loc::in_zone(&self.zones[zone], &path);
        self.refuse(
            ctx,
            &Subject::new(Action::Delete, at),
            Refusal::SensitiveInside,
            Keep::Ledger,
        )
    }

    /// The visible entries of `node`, a directory of `zone`.
    fn list_zone_dir(&self, zone: usize, node: &Node, out: &mut Vec<DirItem>) -> FsResult<()> {
        let held = self.reach.fd_of(node)?;
        let dir_path = node.zone_path();
        for (e, kind, seen) in self.seen_entries(zone, &dir_path, held.as_fd())? {
            if !seen {
                continue;
            }
            // d_ino is a hint (the node id comes with lookup).
            let ino = self.inodes.likely_id(zone, node.key().0, e.ino);
            out.push(DirItem {
                offset: 0,
                name: e.name,
                kind: fuse_kind(kind),
                ino,
            });
        }
        Ok(())
    }

    /// The entries after `offset`.
    pub fn readdir(&self, fh: u64, offset: u64) -> FsResult<Vec<DirItem>> {
        let h = self.handles.get(fh)?;
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

    /// The entries of directory `ino` after `offset`, with no handle
    /// (fh 0: the kernel opened it itself, see [`Core::opendir`]).
    pub fn readdir_node(&self, ctx: &Ctx, ino: u64, offset: u64) -> FsResult<Vec<DirItem>> {
        if self.kernel_opens().is_err() {
            return Err(FsError::Os(libc::EBADF));
        }
        self.admit(ctx)?;
        let node = self.node(ino)?;
        if !node.is_dir {
            return Err(FsError::Os(libc::ENOTDIR));
        }
        let kept = match offset {
            0 => None,
            _ => self.listed.0.lock().get(&ino).cloned(),
        };
        let listing = match kept {
            Some(l) => l,
            None => {
                let l = Arc::new(self.list_dir(&node)?);
                let mut listed = self.listed.0.lock();
                if listed.len() >= Listings::MAX {
                    listed.clear();
                }
                listed.insert(ino, l.clone());
                l
            }
        };
        Ok(listing.iter().skip(offset as usize).cloned().collect())
    }

    /// The entries after `offset`, each looked up (counted as a kernel
    /// lookup) and handed to `add` until it says the reply is full. The
    /// entry that did not fit is not counted; one that vanished since
    /// opendir is skipped.
    pub fn readdirplus(
        &self,
        ctx: &Ctx,
        ino: u64,
        fh: u64,
        offset: u64,
        mut add: impl FnMut(&DirItem, &Entry) -> bool,
    ) -> FsResult<()> {
        let dir = self.node(ino)?;
        // The directory's path, found once for all its entries.
        let path = dir.zone_path();
        let items = match fh {
            0 => self.readdir_node(ctx, ino, offset)?,
            _ => self.readdir(fh, offset)?,
        };
        for it in items {
            let dots = it.name == "." || it.name == "..";
            let entry = match dots {
                true => self.getattr(ctx, it.ino, None),
                false => self.lookup_at(ctx, &dir, &path, &it.name),
            };
            let Ok(entry) = entry else { continue };
            if add(&it, &entry) {
                if !dots {
                    // Not sent: the kernel never saw this lookup.
                    self.forget(entry.node, 1);
                }
                break;
            }
        }
        Ok(())
    }

    pub fn releasedir(&self, fh: u64) {
        self.handles.remove(fh);
    }

    pub fn fsyncdir(&self, ino: u64, datasync: bool) -> FsResult<()> {
        let node = self.node(ino)?;
        if node.is_root() {
            return Ok(());
        }
        let dfd = self.reach.open_dir(self.reach.fd_of(&node)?.as_fd())?;
        Ok(backing::fsync(dfd.as_fd(), datasync)?)
    }

    pub fn statfs(&self, ctx: &Ctx, ino: u64) -> FsResult<Statfs> {
        self.admit(ctx)?;
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
        let v = backing::statvfs(self.reach.fd_of(&node)?.as_fd())?;
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
}

#[cfg(test)]
mod tests {
    use super::{HiddenSubdirs, Seen};

    fn seen(ino: u64, nlink: u64, mtime: i64) -> Seen {
        Seen {
            dev: 1,
            ino,
            nlink,
            mtime: (mtime, 0),
            ctime: (mtime, 0),
        }
    }

    #[test]
    fn a_count_is_kept_for_one_state_of_one_directory() {
        let kept = HiddenSubdirs::default();
        kept.put(seen(7, 4, 100), 2);
        assert_eq!(kept.get(&seen(7, 4, 100)), Some(2));
        // A subdirectory made or removed, or any change of its entries.
        assert_eq!(kept.get(&seen(7, 5, 100)), None);
        assert_eq!(kept.get(&seen(7, 4, 101)), None);
        assert_eq!(kept.get(&seen(8, 4, 100)), None);
        kept.put(seen(7, 5, 101), 1);
        assert_eq!(kept.get(&seen(7, 5, 101)), Some(1));
        assert_eq!(kept.get(&seen(7, 4, 100)), None, "the older state is gone");
        // Bounded.
        for ino in 0..(HiddenSubdirs::MAX as u64 + 10) {
            kept.put(seen(1000 + ino, 3, 1), 1);
        }
        assert!(kept.0.lock().len() <= HiddenSubdirs::MAX);
    }
}

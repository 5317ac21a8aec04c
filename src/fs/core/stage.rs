//! The core's side of staged zones: who changes a stage, and what the
//! stage service (`stage::service`) asks of a live mount ([`LiveMount`]):
//! mutations held still while a commit or discard changes the layers, how
//! many files are open for writing in a zone, a zone dir moved onto a
//! fresh overlay after its stage changed underneath, with the kernel told
//! to forget what it cached of that zone, and the plain rw zones' report.

use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use parking_lot::{RwLockReadGuard, RwLockWriteGuard};

use super::{Core, Ctx};
use crate::backing;
use crate::error::{FsError, FsResult};
use crate::fs::handles::Handle;
use crate::fs::inodes::Anchor;
use crate::fs::inodes::{Node, Passthrough};
use crate::policy::Op;
use crate::stage::report::Change;
use crate::stage::service::LiveMount;

/// The processes that changed a stage, most recent last, and the thread
/// ids already looked at.
#[derive(Debug, Default)]
pub(super) struct Writers {
    processes: Vec<crate::approval::side::AskedFrom>,
    threads: std::collections::HashSet<u32>,
    /// The PID namespaces they were in (a namespace outlives no process,
    /// but a commit may come after the writers are gone).
    spaces: Vec<crate::approval::side::NsId>,
}

/// How many processes that changed a stage (and their namespaces) are
/// remembered, for refusing their side a commit.
const WRITERS: usize = 64;

impl Core {
    /// Before an open of `node`, or a change through it that makes the
    /// overlay copy its file up (a path's chmod, chown, utimes, truncate
    /// or xattr change, a link): when it is the shared node of a file with
    /// hard links in a lower layer (a checkpoint froze links made through
    /// the mount; the kernel still names them all by it), ESTALE. The
    /// overlay copies up (and, once one name was, reads) the name the node
    /// is reached by, which may not be the name the caller used; the
    /// kernel answers ESTALE by looking the path up again, and that lookup
    /// gives the name a node of its own (`Inodes::remember`), through
    /// which the call then goes.
    pub(super) fn own_name_first(&self, node: &Node) -> FsResult<()> {
        // No system call for a node never seen with a second link.
        if node.is_dir || !node.was_linked() || node.is_one_name() {
            return Ok(());
        }
        let Some(zone) = node.zone else { return Ok(()) };
        let Some(stage) = self.stages.as_ref().and_then(|s| s.zone(zone)) else {
            return Ok(());
        };
        let st = backing::stat(self.reach.fd_of(node)?.as_fd())?;
        if st.st_nlink < 2 || stage.in_upper(&node.zone_path()) {
            return Ok(());
        }
        Err(FsError::Os(libc::ESTALE))
    }

    /// A change about to be made in a staged zone: remember who makes it
    /// and its PID namespace (a commit from its side is refused).
    pub(super) fn note_staged(&self, ctx: &Ctx, op: &Op<'_>) {
        let Some(stages) = &self.stages else { return };
        let mut staged = false;
        for at in op.places().into_iter().flatten() {
            let Some(z) = at.zone.filter(|z| z.staged) else {
                continue;
            };
            staged = true;
            if let Some(stage) = stages.by_name(&z.name) {
                if let Err(e) = stage.note(at.path) {
                    tracing::warn!(zone = %z.name, path = %crate::text::path(at.path), "cannot note a staged change's backing file: {e}");
                }
            }
        }
        if !staged {
            return;
        }
        let mut w = self.writers.lock();
        if w.threads.contains(&ctx.pid) {
            return;
        }
        if w.threads.len() >= WRITERS * 4 {
            w.threads.clear();
        }
        w.threads.insert(ctx.pid);
        if let Some(pid) = crate::approval::caller::process_of(ctx.pid) {
            w.processes.retain(|p| p.pid != pid);
            if w.processes.len() == WRITERS {
                w.processes.remove(0);
            }
            // Only while it lives does a writer's session keep a commit
            // from it (`approval::side`): a person who edited through the
            // mount from a terminal commits from there once the editing
            // is done.
            w.processes
                .push(crate::approval::side::AskedFrom { pid, session: None });
            if let Some(ns) = crate::approval::side::pid_ns(pid) {
                if !w.spaces.contains(&ns) {
                    if w.spaces.len() == WRITERS {
                        w.spaces.remove(0);
                    }
                    w.spaces.push(ns);
                }
            }
        }
    }

    /// Held while a mutation acts, when the mount has stages: a commit or
    /// discard waits for acting mutations and holds new ones back.
    pub(super) fn acting(&self) -> Option<RwLockReadGuard<'_, ()>> {
        self.stages.as_ref().map(|_| self.still.read())
    }

    /// The kernel connection's notifier, once the session has one.
    pub fn set_notifier(&self, n: crate::fuse::Notifier) {
        let _ = self.notifier.set(n);
    }

    /// The dir fd of zone `zone` as the filesystem uses it (a staged
    /// zone's overlay root).
    pub fn zone_dir_fd(&self, zone: usize) -> Option<std::sync::Arc<std::os::fd::OwnedFd>> {
        let root = self.inodes.zone_root(zone)?;
        match &root.anchor {
            Anchor::Held(held) => {
                let fd = held.get();
                let _ = fd.as_fd();
                Some(fd)
            }
            _ => None,
        }
    }
}

/// What the stage service asks of the mount.
impl LiveMount for Core {
    /// The processes that changed this mount's stages (most recent last)
    /// and the PID namespaces they were in: a commit or discard from their
    /// side is refused (`approval::side`).
    fn stage_writers(
        &self,
    ) -> (
        Vec<crate::approval::side::AskedFrom>,
        Vec<crate::approval::side::NsId>,
    ) {
        let w = self.writers.lock();
        (w.processes.clone(), w.spaces.clone())
    }

    /// Hold every mutation back (until dropped): for a commit or discard.
    fn hold_still(&self) -> RwLockWriteGuard<'_, ()> {
        self.still.write()
    }

    /// Files of zone `zone` open for writing now.
    fn open_for_writing(&self, zone: usize) -> usize {
        self.handles
            .count(|h| matches!(h, Handle::File { zone: z, writable: true, .. } if *z == zone))
    }

    /// Files of zone `zone` open for writing now: their fds, and where
    /// the mount last saw each (its node's path; renames through the
    /// mount move it).
    fn writable_fds(
        &self,
        zone: usize,
    ) -> Vec<(std::sync::Arc<std::os::fd::OwnedFd>, Option<PathBuf>)> {
        self.handles
            .picked(|h| matches!(h, Handle::File { zone: z, writable: true, .. } if *z == zone))
            .into_iter()
            .filter_map(|h| match &*h {
                Handle::File { fd, node, .. } => {
                    Some((fd.clone(), self.inodes.get(*node).map(|n| n.zone_path())))
                }
                Handle::Dir { .. } => None,
            })
            .collect()
    }

    fn zone_dir(&self, zone: usize) -> Option<std::sync::Arc<std::os::fd::OwnedFd>> {
        self.zone_dir_fd(zone)
    }

    /// Mount zone `zone`'s overlay afresh and make it the zone's dir:
    /// after a commit or discard changed its layers, the old overlay's
    /// cached view is stale. Nodes are reached again from the new one (by
    /// name; the fd cache is emptied); open files keep what they had.
    fn restage(&self, zone: usize) -> io::Result<()> {
        let Some(stage) = self.stages.as_ref().and_then(|s| s.zone(zone)) else {
            return Err(io::Error::other("not a staged zone"));
        };
        let fd = stage.mount()?;
        let root = self
            .inodes
            .zone_root(zone)
            .ok_or_else(|| io::Error::other("no such zone"))?;
        let old_root = match &root.anchor {
            Anchor::Held(held) => held.replace(fd),
            _ => return Err(io::Error::other("a zone dir without its fd")),
        };
        self.reach.restaged(zone);
        let ids = self.forget_passthrough(zone);
        // The old overlay's fds, its root (the last close unmounts it,
        // dropping every dentry it cached) and the passthrough ids of its
        // files (an ioctl each) are closed off this call's path.
        let old = self.reach.take_cache();
        if old.len() + ids.len() > 64 {
            let closing = std::thread::Builder::new()
                .name("zm-close".into())
                .spawn(move || drop((old, ids, old_root)));
            if let Err(e) = closing {
                tracing::debug!("closing the old overlay's fds here: {e}");
            }
        }
        Ok(())
    }

    /// Tell the kernel to forget what it cached of zone `zone`: every
    /// node's attributes and data, every name that leads to one, and the
    /// names `paths` (relative to the zone dir; e.g. deleted ones, which
    /// the kernel may remember as missing). Must not be called while
    /// mutations are held back (the kernel may wait for one to finish).
    fn forget_cached(&self, zone: usize, paths: &[&Path]) {
        let Some(n) = self.notifier.get() else {
            return;
        };
        let nodes = self.inodes.zone_nodes(zone);
        for (ino, parent, name) in &nodes {
            let _ = n.inval_entry(crate::fuse::INodeNo(*parent), name);
            let _ = n.inval_inode(crate::fuse::INodeNo(*ino), 0, 0);
        }
        let Some(root) = self.inodes.zone_root(zone) else {
            return;
        };
        let _ = n.inval_inode(crate::fuse::INodeNo(root.ino), 0, 0);
        // A name's parent: the zone dir, or a node whose path it is.
        let dirs: std::collections::HashMap<PathBuf, u64> = if paths.is_empty() {
            Default::default()
        } else {
            nodes
                .iter()
                .filter_map(|(ino, _, _)| self.inodes.get(*ino))
                .filter(|node| node.is_dir)
                .map(|node| (node.zone_path(), node.ino))
                .collect()
        };
        for p in paths {
            let (Some(parent), Some(name)) = (p.parent(), p.file_name()) else {
                continue;
            };
            let parent_ino = if parent.as_os_str().is_empty() {
                Some(root.ino)
            } else {
                dirs.get(parent).copied()
            };
            if let Some(pi) = parent_ino {
                let _ = n.inval_entry(crate::fuse::INodeNo(pi), name);
            }
        }
    }

    fn forget_kept_open(&self, zone: usize) {
        let Some(n) = self.notifier.get() else {
            return;
        };
        for node in self.inodes.zone_node_list(zone) {
            if !node.passthrough_stale() {
                continue;
            }
            if let Some(parent) = node.parent() {
                let _ = n.inval_entry(crate::fuse::INodeNo(parent.ino), &node.name());
            }
        }
    }

    fn rw_zones(&self) -> Vec<(String, bool)> {
        self.zones
            .iter()
            .filter(|z| z.access == crate::config::Access::Rw)
            .map(|z| (z.name.clone(), z.staged))
            .collect()
    }

    fn plain_changes(&self, zone: &str, filter: &[PathBuf]) -> (Vec<Change>, bool) {
        let (list, incomplete) = self.changelog.changes(zone, filter);
        let list = list
            .into_iter()
            .map(|c| {
                let (first, last) = c.by.map(|b| (b.first, b.last)).unzip();
                Change {
                    first,
                    last,
                    ..Change::plain(c.path, c.kind)
                }
            })
            .collect();
        (list, incomplete)
    }
}

impl Core {
    /// After zone `zone`'s overlay was mounted afresh: the passthrough
    /// backing files registered for its nodes are the old overlay's (the
    /// kernel sends a file's reads and writes straight to them), and the
    /// old overlay's file may now be the host's (a commit moved it there)
    /// or a checkpoint's frozen copy, neither of which a worker may write.
    /// A node no handle has open gets a fresh one at its next open; one
    /// open only for reading is [`Passthrough::Stale`] until those handles
    /// close; one open for writing keeps its own.
    /// Returns the ids taken: each is closed (unregistered) when dropped.
    fn forget_passthrough(&self, zone: usize) -> Vec<Passthrough> {
        // Per node: its open handles, and whether one is open for writing.
        let mut open: std::collections::HashMap<u64, (Vec<u64>, bool)> = Default::default();
        for (fh, h) in self
            .handles
            .picked_by_fh(|h| matches!(h, Handle::File { zone: z, .. } if *z == zone))
        {
            if let Handle::File { node, writable, .. } = &*h {
                let e = open.entry(*node).or_default();
                e.0.push(fh);
                e.1 |= *writable;
            }
        }
        let mut ids = Vec::new();
        for node in self.inodes.zone_node_list(zone) {
            let mut slot = node.passthrough.lock();
            let Passthrough::Id(id) = &*slot else {
                continue;
            };
            match open.remove(&node.ino) {
                // Open for writing (only a checkpoint goes on with one; a
                // commit, rewind or discard waits): the file went on in
                // the fresh upper dir, the same file the old overlay's
                // reaches, and the checkpoint keeps a copy.
                Some((_, true)) => {}
                Some((fhs, false)) => {
                    let id = id.clone();
                    *slot = Passthrough::Stale { id, fhs };
                }
                None => ids.push(std::mem::take(&mut *slot)),
            }
        }
        ids
    }
}

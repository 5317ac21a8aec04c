//! Names taken away or moved, and new names for an existing file:
//! unlink, rmdir, rename, link. Each resolves its nodes once, gates, then
//! acts on them; a node reopened by name keeps an fd when it loses the
//! name it is reopened by.

use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use super::gate::{Gate, Hold, Keep};
use super::{Core, Ctx, Entry, Respond};
use crate::backing::{self, AsCaller, Caller, FileType, Stat};
use crate::error::{FsError, FsResult, Refusal};
use crate::fs::attr::to_attr;
use crate::fs::inodes::{Anchor, Node};
use crate::policy::{self, Decision, Op};

impl Core {
    /// unlink (`dir == false`) or rmdir.
    pub fn remove(
        self: &Arc<Self>,
        ctx: Ctx,
        parent: u64,
        name: &OsStr,
        dir: bool,
        respond: impl Respond<()>,
    ) {
        let name = name.to_owned();
        let plan = || {
            self.removal(&ctx, parent, &name, dir).map(|(gate, at)| {
                let act = move |core: &Core| {
                    let _as = AsCaller::enter(&ctx.caller())?;
                    let zone = Self::zone_dir(&at)?;
                    let fd = core.reach.fd_of(&at)?;
                    // A file reopened by name loses the name it is reopened
                    // by: it is found first, to keep its fd.
                    let victim = match dir {
                        false if core.reach.reopens_by_name() => {
                            core.named_entry(zone, &at, fd.as_fd(), &name)
                        }
                        _ => None,
                    };
                    let r = match dir {
                        true => backing::rmdir(fd.as_fd(), &name),
                        false => backing::unlink(fd.as_fd(), &name),
                    };
                    if r == Err(rustix::io::Errno::NOTEMPTY) {
                        let e = FsError::Os(libc::ENOTEMPTY);
                        return Err(core.not_empty(&ctx, zone, &at, fd.as_fd(), &name, e));
                    }
                    core.reach.in_dir(&at, fd.as_fd(), r)?;
                    if let Some((node, fd)) = victim {
                        core.unnamed(&node, &at, &name, fd);
                    }
                    Ok(())
                };
                (gate, act)
            })
        };
        self.request_with(ctx, Hold::Locked, plan, respond);
    }

    /// The known node reopened by name that `name` in `dir` (of `zone`,
    /// whose fd is `dir_fd`) reaches, with an fd on it: the one it has at
    /// hand (the kernel's lookup before the removal cached it; an object
    /// held open keeps its inode number, so the number tells it), else one
    /// opened by name.
    ///
    /// The node the name was last looked up as, still placed there with
    /// its fd at hand, is taken without a stat: keeping a node's own fd
    /// for it is right even if the host replaced the name meanwhile (its
    /// object lost the name either way). Not a pinned one: it lost that
    /// name through the mount already (renamed over), and the name's
    /// object now is the one renamed onto it.
    fn named_entry(
        &self,
        zone: usize,
        dir: &Node,
        dir_fd: BorrowedFd<'_>,
        name: &OsStr,
    ) -> Option<(Arc<Node>, Arc<OwnedFd>)> {
        if let Some(node) = self
            .reach
            .last_looked_up(dir.ino, name)
            .and_then(|i| self.inodes.get(i))
            .filter(|n| {
                matches!(n.anchor, Anchor::Named)
                    && n.is_at(dir, name)
                    && !self.reach.is_pinned(n.ino)
            })
        {
            if let Some(fd) = self.reach.cached(node.ino) {
                return Some((node, fd));
            }
        }
        let st = backing::stat_at(dir_fd, name).ok()?;
        let node = self
            .inodes
            .known(zone, st.st_dev, st.st_ino)
            .and_then(|i| self.inodes.get(i))
            .filter(|n| matches!(n.anchor, Anchor::Named))?;
        if let Some(fd) = self.reach.cached(node.ino) {
            return Some((node, fd));
        }
        let fd = self.reach.lookup(dir_fd, name).ok()?;
        let again = backing::stat(fd.as_fd()).ok()?;
        ((again.st_dev, again.st_ino) == (st.st_dev, st.st_ino)).then(|| (node, Arc::new(fd)))
    }

    /// `name` in `dir` was removed (or renamed over) through the mount:
    /// when it was the name `node` is reopened by, keep `fd` for it (an
    /// unlinked file still open, or linked elsewhere, stays reachable until
    /// the kernel forgets it or it is looked up under another name).
    fn unnamed(&self, node: &Node, dir: &Node, name: &OsStr, fd: Arc<OwnedFd>) {
        if node.is_at(dir, name) {
            self.reach.pin(node, fd);
        }
    }

    fn removal(
        &self,
        ctx: &Ctx,
        parent: u64,
        name: &OsStr,
        is_dir: bool,
    ) -> FsResult<(Gate, Arc<Node>)> {
        let dir = self.node(parent)?;
        let w = self.where_child(&dir, name);
        let op = Op::Remove {
            at: self.loc(&w),
            is_dir,
        };
        // A hidden or missing name is ENOENT before any policy question.
        // When the answer is a plain yes there is no question to come
        // first: the removal itself says ENOENT, and the kernel only asks
        // to remove names it looked up, which hides hidden ones (a name's
        // hiding depends on its path and kind, and unlink never removes a
        // directory nor rmdir a file), so the lookup is spared.
        let decision = policy::decide(&op);
        if decision != Decision::Allow && w.zone.is_some() && self.look(&dir, name)?.is_none() {
            return Err(FsError::enoent());
        }
        Ok((self.settle(ctx, &op, decision, Keep::Ledger)?, dir))
    }

    // ---- renames and links -------------------------------------------------

    #[allow(clippy::too_many_arguments)]
    pub fn rename(
        self: &Arc<Self>,
        ctx: Ctx,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
        respond: impl Respond<()>,
    ) {
        let (name, newname) = (name.to_owned(), newname.to_owned());
        let plan = || {
            self.renaming(&ctx, parent, &name, newparent, &newname, flags)
                .map(|(gate, p, np)| {
                    let act = move |core: &Core| {
                        let r = core.rename_as(&ctx.caller(), &p, &name, &np, &newname, flags);
                        // Onto a directory that looks empty but holds what
                        // the worker can't see: refused as its rmdir is,
                        // not ENOTEMPTY (EEXIST on some filesystems).
                        let replaces =
                            flags & (libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE) == 0;
                        let full = |e: &FsError| {
                            *e == FsError::Os(libc::ENOTEMPTY) || *e == FsError::Os(libc::EEXIST)
                        };
                        match r {
                            Err(e) if replaces && full(&e) => {
                                let _as = AsCaller::enter(&ctx.caller())?;
                                let zone = Self::zone_dir(&np)?;
                                let fd = core.reach.fd_of(&np)?;
                                Err(core.not_empty(&ctx, zone, &np, fd.as_fd(), &newname, e))
                            }
                            r => r,
                        }
                    };
                    (gate, act)
                })
        };
        self.request_with(ctx, Hold::Locked, plan, respond);
    }

    fn renaming(
        &self,
        ctx: &Ctx,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
    ) -> FsResult<(Gate, Arc<Node>, Arc<Node>)> {
        let (p, np) = (self.node(parent)?, self.node(newparent)?);
        let (from, to) = (self.where_child(&p, name), self.where_child(&np, newname));
        let src = self.look(&p, name)?.ok_or_else(FsError::enoent)?;
        let is_dir = |st: &Stat| FileType::from_raw_mode(st.st_mode) == FileType::Directory;
        let to_is_dir = match to.zone {
            Some(_) => self.look(&np, newname)?.map(|st| is_dir(&st)),
            None => None,
        };
        let op = Op::Rename {
            from: self.loc(&from),
            to: self.loc(&to),
            is_dir: is_dir(&src),
            to_is_dir,
            exchange: flags & libc::RENAME_EXCHANGE != 0,
        };
        // RENAME_WHITEOUT leaves a whiteout (a character device 0/0) at
        // the source: a device node, never made (as mknod of one), once
        // the rules before the approval policy have spoken. A host
        // overlay would take it for a deletion of what lies below it.
        let decision = match policy::decide(&op) {
            Decision::Refuse(r) => Decision::Refuse(r),
            _ if flags & libc::RENAME_WHITEOUT != 0 => Decision::Refuse(Refusal::Device),
            d => d,
        };
        Ok((self.settle(ctx, &op, decision, Keep::Ledger)?, p, np))
    }

    fn rename_as(
        &self,
        caller: &Caller,
        p: &Arc<Node>,
        name: &OsStr,
        np: &Arc<Node>,
        newname: &OsStr,
        flags: u32,
    ) -> FsResult<()> {
        let _as = AsCaller::enter(caller)?;
        let (zone, to_zone) = (Self::zone_dir(p)?, Self::zone_dir(np)?);
        if zone != to_zone {
            return Err(Refusal::CrossZone.into());
        }
        let (pheld, npheld) = (self.reach.fd_of(p)?, self.reach.fd_of(np)?);
        let (pfd, npfd) = (pheld.as_fd(), npheld.as_fd());
        let key_of = |dir: BorrowedFd<'_>, n: &OsStr| {
            let fd = self.reach.lookup(dir, n).ok()?;
            let st = backing::stat(fd.as_fd()).ok()?;
            Some(((st.st_dev, st.st_ino), fd))
        };
        let (src, dst) = (key_of(pfd, name), key_of(npfd, newname));
        let src_key = src.map(|(k, _)| k);
        let dst_key = dst.as_ref().map(|(k, _)| *k);
        // ENOENT with either directory gone is ESTALE (see `in_dir`).
        let r = backing::rename(pfd, name, npfd, newname, flags);
        let r = match self.reach.in_dir(p, pfd, r) {
            Err(FsError::Os(libc::ENOENT)) => {
                self.reach.in_dir(np, npfd, Err(rustix::io::Errno::NOENT))
            }
            r => r,
        };
        r?;
        let known = |key: Option<(u64, u64)>| {
            key.and_then(|(dev, ino)| {
                self.inodes
                    .known(zone, dev, ino)
                    .and_then(|i| self.inodes.get(i))
            })
        };
        // A file renamed over loses its name (see `unnamed`).
        if flags & libc::RENAME_EXCHANGE == 0 && dst_key != src_key {
            if let (Some(node), Some((_, fd))) = (known(dst_key), dst) {
                self.unnamed(&node, np, newname, Arc::new(fd));
            }
        }
        // Keep known nodes' places current, so policy paths stay right
        // and nodes reopened by name are found where they now are.
        let moved = |key: Option<(u64, u64)>, dir: &Arc<Node>, to: &OsStr| {
            if let Some(n) = known(key) {
                n.set_place(dir.clone(), to);
            }
        };
        moved(src_key, np, newname);
        if flags & libc::RENAME_EXCHANGE != 0 {
            moved(dst_key, p, name);
        }
        Ok(())
    }

    /// A hard link of node `ino` as `newname` in `newparent`.
    pub fn link(
        self: &Arc<Self>,
        ctx: Ctx,
        ino: u64,
        newparent: u64,
        newname: &OsStr,
        respond: impl Respond<Entry>,
    ) {
        let newname = newname.to_owned();
        let plan = || {
            self.linking(&ctx, ino, newparent, &newname)
                .map(|(gate, node, dir)| {
                    let act = move |core: &Core| core.link_as(&ctx.caller(), &node, &dir, &newname);
                    (gate, act)
                })
        };
        self.request_with(ctx, Hold::Locked, plan, respond);
    }

    fn link_as(
        &self,
        caller: &Caller,
        node: &Node,
        dir: &Arc<Node>,
        newname: &OsStr,
    ) -> FsResult<Entry> {
        let _as = AsCaller::enter(caller)?;
        let zone = Self::zone_dir(dir)?;
        if node.zone != dir.zone {
            return Err(Refusal::CrossZone.into());
        }
        let dir_fd = self.reach.fd_of(dir)?;
        let from = self.reach.fd_of(node)?;
        let r = self
            .reach
            .procfds
            .link(from.as_fd(), dir_fd.as_fd(), newname);
        self.reach.in_dir(dir, dir_fd.as_fd(), r)?;
        if node.is_one_name() {
            if let Some(entry) = self.linked_up(zone, node, dir, dir_fd.as_fd(), newname) {
                return Ok(entry);
            }
        }
        self.enter_named(zone, dir, dir_fd.as_fd(), newname)
    }

    /// After a link of a staged zone's lower hard link `node` (a node of
    /// one name): the overlay copied the file up and linked the new name
    /// to the copy, so both names are one upper file. The kernel is
    /// answered with `node` itself for the new name (made the file's
    /// shared node), so it keeps both names on one inode: a write through
    /// one then leaves no stale size or data cached for the other. None:
    /// the new name is some other object, or it has a shared node already
    /// (the caller enters it as usual).
    fn linked_up(
        &self,
        zone: usize,
        node: &Node,
        dir: &Arc<Node>,
        dir_fd: BorrowedFd<'_>,
        newname: &OsStr,
    ) -> Option<Entry> {
        let fd = self.reach.lookup(dir_fd, newname).ok()?;
        let st = backing::stat(fd.as_fd()).ok()?;
        let from = backing::stat(self.reach.fd_of(node).ok()?.as_fd()).ok()?;
        if (from.st_dev, from.st_ino) != (st.st_dev, st.st_ino) || node.zone != Some(zone) {
            return None;
        }
        if !self.inodes.share(node, st.st_dev, st.st_ino) {
            return None;
        }
        node.seen_also(dir, newname);
        node.set_place(dir.clone(), newname);
        self.reach.cache(node, Arc::new(fd), false);
        Some(self.entry(node, to_attr(node.shown_ino(), &st)))
    }

    fn linking(
        &self,
        ctx: &Ctx,
        ino: u64,
        newparent: u64,
        newname: &OsStr,
    ) -> FsResult<(Gate, Arc<Node>, Arc<Node>)> {
        let (node, np) = (self.node(ino)?, self.node(newparent)?);
        self.own_name_first(&node)?;
        let (from, to) = (self.where_node(&node), self.where_child(&np, newname));
        let op = Op::Link {
            from: self.loc(&from),
            to: self.loc(&to),
        };
        Ok((self.gate(ctx, &op, Keep::Ledger)?, node, np))
    }
}

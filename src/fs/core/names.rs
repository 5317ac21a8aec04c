//! Names: lookup and forget, and every operation that adds, removes or
//! moves a name (create, mkdir, mknod, symlink, link, unlink, rmdir,
//! rename). Each resolves its nodes once, gates, then acts on them.

use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;

use super::gate::{Gate, Keep, Pass};
use super::{Core, Created, Ctx, Entry, Opening, Respond};
use crate::backing::{self, AsCaller, Caller, FileType, Stat};
use crate::error::{FsError, FsResult, Refusal};
use crate::fs::attr::{no_entry, to_attr};
use crate::fs::handles::Handle;
use crate::fs::inodes::{Anchor, Found, Node};
use crate::fs::reach::Opened;
use crate::policy::{self, Decision, Loc, Op};

/// What kind of new name an operation makes.
#[derive(Clone, Copy, Debug)]
enum New {
    Dir,
    /// A file, symlink, FIFO or socket.
    Other,
    /// A block or character device (never made).
    Device,
}

impl Core {
    /// Look `name` up in `parent` for the kernel, counting one lookup on
    /// success. A missing or hidden name is a negative entry: the kernel
    /// remembers the miss for the TTL instead of asking again (tar, git
    /// and compilers probe many missing names).
    pub fn lookup(&self, ctx: &Ctx, parent: u64, name: &OsStr) -> FsResult<Entry> {
        self.admit(ctx)?;
        let parent = self.node(parent)?;
        match self.lookup_in(ctx, &parent, name) {
            Err(e) if e.errno() == libc::ENOENT => Ok(Entry {
                attr: no_entry(),
                ttl: self.zone_ttl(parent.zone),
            }),
            r => r,
        }
    }

    /// Look up and enter `name`; its attributes come from the lookup's own
    /// stat (zone dirs, seen from the root, are stat'ed on their own).
    fn lookup_in(&self, ctx: &Ctx, parent: &Arc<Node>, name: &OsStr) -> FsResult<Entry> {
        self.lookup_at(ctx, parent, &parent.zone_path(), name)
    }

    /// [`lookup_in`](Self::lookup_in) with the path of `parent` in its zone
    /// (`dir`) already known: a listing looks up all its entries with it.
    pub(super) fn lookup_at(
        &self,
        ctx: &Ctx,
        parent: &Arc<Node>,
        dir: &Path,
        name: &OsStr,
    ) -> FsResult<Entry> {
        let Some(zone) = parent.zone else {
            let i = self
                .zone_names
                .iter()
                .position(|z| z == name)
                .ok_or_else(FsError::enoent)?;
            let node = self.inodes.zone_root(i).ok_or_else(FsError::enoent)?;
            return Ok(self.entry(node.zone, self.attr_of(&node)?));
        };
        let path = dir.join(name);
        let at = Loc::in_zone(&self.zones[zone], &path);
        // A hidden sensitive root is refused before it is even opened.
        self.gate(ctx, &Op::Look { at, is_dir: None }, Keep::Status)?;
        let dir_fd = self.reach.fd_of(parent)?;
        let fd = match self.reach.lookup(dir_fd.as_fd(), name) {
            Err(e) if e == rustix::io::Errno::NOENT && backing::is_deleted(dir_fd.as_fd()) => {
                // The host deleted `parent`. When a directory now stands in
                // its place and holds `name`, ESTALE makes the kernel walk
                // the path again and find it (stat, open). Otherwise ENOENT
                // is the answer; a create that follows fails in the deleted
                // dir with ESTALE (`in_dir`), and the kernel retries that.
                return Err(if self.reach.replacement_holds(parent, name) {
                    self.reach.gone(parent)
                } else {
                    FsError::enoent()
                });
            }
            r => r?,
        };
        let o = self.reach.opened(fd)?;
        let is_dir = Some(o.found.is_dir);
        self.gate(ctx, &Op::Look { at, is_dir }, Keep::Status)?;
        let (stat, fd) = (o.stat, o.fd.clone());
        let node = self.enter(zone, parent, name, o);
        let attr = self.dir_attr(node.ino, zone, || path, fd.as_fd(), &stat);
        Ok(self.entry(Some(zone), attr))
    }

    /// Whether `name` in `parent` is there for the worker (existing and not
    /// hidden), without entering it in the table; its stat if so.
    fn look(&self, parent: &Node, name: &OsStr) -> FsResult<Option<Stat>> {
        if parent.zone.is_none() {
            return Ok(self
                .zone_names
                .iter()
                .position(|z| z == name)
                .and_then(|i| {
                    let n = self.inodes.zone_root(i)?;
                    backing::stat(self.reach.fd_of(&n).ok()?.as_fd()).ok()
                }));
        };
        let w = self.where_child(parent, name);
        let at = self.loc(&w);
        let visible = |is_dir| policy::decide(&Op::Look { at, is_dir }) == Decision::Allow;
        if !visible(None) {
            return Ok(None);
        }
        let dir_fd = self.reach.fd_of(parent)?;
        let found = self.reach.lookup(dir_fd.as_fd(), name);
        match self.reach.in_dir(parent, dir_fd.as_fd(), found) {
            Ok(fd) => {
                let st = backing::stat(fd.as_fd())?;
                let is_dir = FileType::from_raw_mode(st.st_mode) == FileType::Directory;
                Ok(visible(Some(is_dir)).then_some(st))
            }
            Err(FsError::Os(libc::ENOENT)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Enter an opened entry in the table (one kernel lookup), caching its fd.
    fn enter(&self, zone: usize, parent: &Arc<Node>, name: &OsStr, o: Opened) -> Arc<Node> {
        let node = self
            .inodes
            .remember(zone, parent, name, o.found, |i| self.reach.cached(i));
        self.reach.cache(&node, o.fd);
        if matches!(node.anchor, Anchor::Named) {
            self.reach.looked_up(parent.ino, name, node.ino);
        }
        node
    }

    pub fn forget(&self, ino: u64, n: u64) {
        if self.inodes.forget(ino, n) {
            self.reach.evict(ino);
        }
    }

    // ---- new names -------------------------------------------------------

    /// Gate a new name `name` in `parent`; the directory, for the action.
    fn new_name(
        &self,
        ctx: &Ctx,
        parent: u64,
        name: &OsStr,
        kind: New,
    ) -> FsResult<(Gate, Arc<Node>)> {
        let dir = self.node(parent)?;
        let w = self.where_child(&dir, name);
        let at = self.loc(&w);
        let op = match kind {
            New::Dir => Op::NewName { at, is_dir: true },
            New::Other => Op::NewName { at, is_dir: false },
            New::Device => Op::Device { at },
        };
        Ok((self.gate(ctx, &op, Keep::Ledger)?, dir))
    }

    /// The directory a name operation acts in: a directory of a zone.
    fn zone_dir(dir: &Node) -> FsResult<usize> {
        let zone = dir.zone.ok_or(FsError::Refused(Refusal::RootLevel))?;
        if !dir.is_dir {
            return Err(FsError::Os(libc::ENOTDIR));
        }
        Ok(zone)
    }

    /// Make the entry `name` in `dir` as the caller with `make` (given the
    /// directory's fd), then enter it like a lookup.
    pub(in crate::fs) fn make_entry(
        &self,
        caller: &Caller,
        dir: &Arc<Node>,
        name: &OsStr,
        make: impl FnOnce(BorrowedFd<'_>) -> backing::Sys<()>,
    ) -> FsResult<Entry> {
        let _as = AsCaller::enter(caller)?;
        let zone = Self::zone_dir(dir)?;
        let dir_fd = self.reach.fd_of(dir)?;
        self.reach
            .in_dir(dir, dir_fd.as_fd(), make(dir_fd.as_fd()))?;
        self.enter_named(zone, dir, dir_fd.as_fd(), name)
    }

    /// Enter the entry just made as `name` in `dir` (whose fd is `dir_fd`).
    fn enter_named(
        &self,
        zone: usize,
        dir: &Arc<Node>,
        dir_fd: BorrowedFd<'_>,
        name: &OsStr,
    ) -> FsResult<Entry> {
        let o = self.reach.opened(self.reach.lookup(dir_fd, name)?)?;
        let stat = o.stat;
        let node = self.enter(zone, dir, name, o);
        Ok(self.entry(Some(zone), to_attr(node.ino, &stat)))
    }

    /// Gate and make a new name; `make` runs with the directory's fd.
    fn new_entry(
        self: &Arc<Self>,
        ctx: Ctx,
        parent: u64,
        name: &OsStr,
        kind: New,
        make: impl FnOnce(BorrowedFd<'_>, &OsStr) -> backing::Sys<()> + Send + 'static,
        respond: impl Respond<Entry>,
    ) {
        let name = name.to_owned();
        let plan = || {
            self.new_name(&ctx, parent, &name, kind).map(|(gate, dir)| {
                let act = move |core: &Core| {
                    core.make_entry(&ctx.caller(), &dir, &name, |d| make(d, &name))
                };
                (gate, act)
            })
        };
        self.request_in_dir(ctx, plan, respond);
    }

    pub fn mkdir(
        self: &Arc<Self>,
        ctx: Ctx,
        parent: u64,
        name: &OsStr,
        mode: u32,
        respond: impl Respond<Entry>,
    ) {
        let make = move |d: BorrowedFd<'_>, n: &OsStr| backing::mkdir(d, n, mode);
        self.new_entry(ctx, parent, name, New::Dir, make, respond);
    }

    /// A regular file, FIFO or socket; a device node is refused (EPERM)
    /// before anyone is asked to approve it.
    pub fn mknod(
        self: &Arc<Self>,
        ctx: Ctx,
        parent: u64,
        name: &OsStr,
        mode: u32,
        respond: impl Respond<Entry>,
    ) {
        let device = matches!(
            FileType::from_raw_mode(mode),
            FileType::CharacterDevice | FileType::BlockDevice
        );
        let kind = if device { New::Device } else { New::Other };
        let make = move |d: BorrowedFd<'_>, n: &OsStr| backing::mknod(d, n, mode);
        self.new_entry(ctx, parent, name, kind, make, respond);
    }

    pub fn symlink(
        self: &Arc<Self>,
        ctx: Ctx,
        parent: u64,
        name: &OsStr,
        target: &Path,
        respond: impl Respond<Entry>,
    ) {
        let target = target.to_owned();
        let make = move |d: BorrowedFd<'_>, n: &OsStr| backing::symlink(d, n, &target);
        self.new_entry(ctx, parent, name, New::Other, make, respond);
    }

    /// Create and open a regular file. One that must be asked about is
    /// made at once and its writes held (`held`): the kernel holds the
    /// directory's lock across CREATE.
    pub fn create(
        self: &Arc<Self>,
        ctx: Ctx,
        parent: u64,
        name: &OsStr,
        mode: u32,
        flags: i32,
        reply: impl Opening<Created>,
    ) {
        let name = name.to_owned();
        let planned = self
            .admit(&ctx)
            .and_then(|()| self.new_name(&ctx, parent, &name, New::Other));
        match planned {
            Err(e) => reply.respond(Err(e)),
            Ok((
                Gate {
                    pass: Pass::Go,
                    expected,
                },
                dir,
            )) => {
                let r = {
                    let _still = self.acting();
                    self.create_as(&ctx.caller(), &dir, &name, mode, flags, None)
                };
                if r.is_ok() {
                    self.changelog.record(expected);
                }
                self.answer_create(r, false, reply)
            }
            Ok((
                Gate {
                    pass: Pass::Ask(items),
                    expected,
                },
                dir,
            )) => {
                let c = super::held::CreateAsk {
                    ctx,
                    items,
                    dir,
                    name,
                    mode,
                    flags,
                    expected,
                };
                self.create_asking(c, reply)
            }
        }
    }

    /// Create `name` in `dir` as `caller` and open it; `held`: its
    /// approval is pending (its handle's calls wait on it).
    pub(super) fn create_as(
        &self,
        caller: &Caller,
        dir: &Arc<Node>,
        name: &OsStr,
        mode: u32,
        flags: i32,
        held: Option<Arc<super::held::HeldCreate>>,
    ) -> FsResult<(Entry, Arc<Node>, u64, bool)> {
        let _as = AsCaller::enter(caller)?;
        let zone = Self::zone_dir(dir)?;
        let dir_fd = self.reach.fd_of(dir)?;
        let created = self.open_backing(zone, flags, |f| {
            self.reach.create(dir_fd.as_fd(), name, f, mode)
        });
        let (fd, direct) = self.reach.in_dir(dir, dir_fd.as_fd(), created)?;
        let st = backing::stat(fd.as_fd())?;
        let kind = FileType::RegularFile;
        let node = match self.reach.handle_if_reopenable(fd.as_fd(), kind) {
            // The created file's own handle: no second lookup, and no race
            // with a host that replaces the name meanwhile.
            Some(h) => self.inodes.remember(
                zone,
                dir,
                name,
                Found {
                    anchor: Anchor::Handle(h),
                    dev: st.st_dev,
                    ino: st.st_ino,
                    is_dir: false,
                    is_symlink: false,
                },
                |i| self.reach.cached(i),
            ),
            None => {
                let o = self
                    .reach
                    .opened(self.reach.lookup(dir_fd.as_fd(), name)?)?;
                if (o.found.dev, o.found.ino) != (st.st_dev, st.st_ino) {
                    // The name was replaced between create and lookup.
                    return Err(FsError::Os(libc::EAGAIN));
                }
                self.enter(zone, dir, name, o)
            }
        };
        let fh = self.handles.add(Handle::File {
            fd: Arc::new(fd),
            zone,
            writable: flags & libc::O_ACCMODE != libc::O_RDONLY,
            held,
        });
        let entry = self.entry(Some(zone), to_attr(node.ino, &st));
        Ok((entry, node, fh, direct))
    }

    // ---- removal -----------------------------------------------------------

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
            self.removal(&ctx, parent, &name).map(|(gate, at)| {
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
                    if r == Err(rustix::io::Errno::NOTEMPTY)
                        && core.only_unseen_in(zone, &at, fd.as_fd(), &name)
                    {
                        return Err(core.refused_rmdir(&ctx, zone, &at, &name));
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
        self.request_in_dir(ctx, plan, respond);
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

    fn removal(&self, ctx: &Ctx, parent: u64, name: &OsStr) -> FsResult<(Gate, Arc<Node>)> {
        let dir = self.node(parent)?;
        let w = self.where_child(&dir, name);
        let op = Op::Remove { at: self.loc(&w) };
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
                        core.rename_as(&ctx.caller(), &p, &name, &np, &newname, flags)
                    };
                    (gate, act)
                })
        };
        self.request_in_dir(ctx, plan, respond);
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
        Ok((self.gate(ctx, &op, Keep::Ledger)?, p, np))
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
        self.request_in_dir(ctx, plan, respond);
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
        self.enter_named(zone, dir, dir_fd.as_fd(), newname)
    }

    fn linking(
        &self,
        ctx: &Ctx,
        ino: u64,
        newparent: u64,
        newname: &OsStr,
    ) -> FsResult<(Gate, Arc<Node>, Arc<Node>)> {
        let (node, np) = (self.node(ino)?, self.node(newparent)?);
        let (from, to) = (self.where_node(&node), self.where_child(&np, newname));
        let op = Op::Link {
            from: self.loc(&from),
            to: self.loc(&to),
        };
        Ok((self.gate(ctx, &op, Keep::Ledger)?, node, np))
    }
}

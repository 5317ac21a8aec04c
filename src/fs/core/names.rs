//! Names: lookup and forget, and the operations that make a new file under
//! a new name (create, mkdir, mknod, symlink). Each resolves its nodes
//! once, gates, then acts on them. Names taken away or moved, and links,
//! are in `moves`.

use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;
use std::sync::Arc;

use super::gate::{Gate, Hold, Keep, Pass};
use super::{Core, Created, Ctx, Entry, Handle, Opening, Respond};
use crate::backing::{self, AsCaller, Caller, FileType, Stat};
use crate::error::{FsError, FsResult, Refusal};
use crate::fs::attr::{no_entry, to_attr};
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
    pub fn lookup(self: &Arc<Self>, ctx: &Ctx, parent: u64, name: &OsStr) -> FsResult<Entry> {
        self.admit(ctx)?;
        let parent = self.node(parent)?;
        // The kernel may be about to take a lock that a call held on a
        // file whose create is pending holds (see `held::PendingCreates`).
        self.looked_up(ctx.pid);
        match self.lookup_in(ctx, &parent, name) {
            Err(e) if e.errno() == libc::ENOENT => Ok(Entry {
                node: 0,
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
            return Ok(self.entry(&node, self.attr_of(&node)?));
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
        let attr = self.dir_attr(node.shown_ino(), zone, || path, fd.as_fd(), &stat);
        Ok(self.entry(&node, attr))
    }

    /// Whether `name` in `parent` is there for the worker (existing and not
    /// hidden), without entering it in the table; its stat if so.
    pub(super) fn look(&self, parent: &Node, name: &OsStr) -> FsResult<Option<Stat>> {
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
    fn enter(&self, zone: usize, parent: &Arc<Node>, name: &OsStr, mut o: Opened) -> Arc<Node> {
        o.found.generation = self.reach.restages(zone);
        let one_name = self.linked_below(zone, parent, name, &o);
        let node = self
            .inodes
            .remember(zone, parent, name, o.found, one_name, |i| {
                self.reach.cached(i)
            });
        node.seen_links(o.stat.st_nlink);
        self.reach.cache(&node, o.fd, false);
        if matches!(node.anchor, Anchor::Named) {
            self.reach.looked_up(parent.ino, name, node.ino);
        }
        node
    }

    /// Whether `name` in `parent` is a staged zone's file with hard links
    /// in a lower layer (not in the upper dir): its names get a node each
    /// (see `Inodes::remember`).
    fn linked_below(&self, zone: usize, parent: &Node, name: &OsStr, o: &Opened) -> bool {
        if o.found.is_dir || o.stat.st_nlink < 2 {
            return false;
        }
        let Some(stage) = self.stages.as_ref().and_then(|s| s.zone(zone)) else {
            return false;
        };
        !stage.in_upper(&parent.zone_path().join(name))
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
    pub(super) fn zone_dir(dir: &Node) -> FsResult<usize> {
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
    pub(super) fn enter_named(
        &self,
        zone: usize,
        dir: &Arc<Node>,
        dir_fd: BorrowedFd<'_>,
        name: &OsStr,
    ) -> FsResult<Entry> {
        let o = self.reach.opened(self.reach.lookup(dir_fd, name)?)?;
        let stat = o.stat;
        let node = self.enter(zone, dir, name, o);
        Ok(self.entry(&node, to_attr(node.shown_ino(), &stat)))
    }

    /// Gate and make a new name; `make` runs with the directory's fd.
    /// A new entry `name` in `parent`, made by `make` once allowed; `shown`
    /// goes with an ask as its target (a symlink's text).
    #[allow(clippy::too_many_arguments)]
    fn new_entry(
        self: &Arc<Self>,
        ctx: Ctx,
        parent: u64,
        name: &OsStr,
        kind: New,
        shown: Option<std::path::PathBuf>,
        make: impl FnOnce(BorrowedFd<'_>, &OsStr) -> backing::Sys<()> + Send + 'static,
        respond: impl Respond<Entry>,
    ) {
        let name = name.to_owned();
        let plan = || {
            self.new_name(&ctx, parent, &name, kind)
                .map(|(mut gate, dir)| {
                    gate.target = gate.target.or(shown);
                    let act = move |core: &Core| {
                        core.make_entry(&ctx.caller(), &dir, &name, |d| make(d, &name))
                    };
                    (gate, act)
                })
        };
        self.request_with(ctx, Hold::Locked, plan, respond);
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
        self.new_entry(ctx, parent, name, New::Dir, None, make, respond);
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
        let mode = match FileType::from_raw_mode(mode) {
            FileType::RegularFile => super::files::creatable_mode(&ctx.caller(), mode),
            _ => mode,
        };
        let make = move |d: BorrowedFd<'_>, n: &OsStr| backing::mknod(d, n, mode);
        self.new_entry(ctx, parent, name, kind, None, make, respond);
    }

    pub fn symlink(
        self: &Arc<Self>,
        ctx: Ctx,
        parent: u64,
        name: &OsStr,
        target: &Path,
        respond: impl Respond<Entry>,
    ) {
        let shown = target.to_owned();
        let target = target.to_owned();
        let make = move |d: BorrowedFd<'_>, n: &OsStr| backing::symlink(d, n, &target);
        self.new_entry(ctx, parent, name, New::Other, Some(shown), make, respond);
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
                    ..
                },
                dir,
            )) => {
                let r = {
                    let _still = self.acting();
                    let r = self.create_as(&ctx.caller(), &dir, &name, mode, flags, None);
                    if r.is_ok() {
                        self.changelog.record(expected);
                    }
                    r
                };
                self.answer_create(r, false, reply)
            }
            Ok((
                Gate {
                    pass: Pass::Ask(items),
                    expected,
                    ..
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
        self.within_open_quota(caller)?;
        let _as = AsCaller::enter(caller)?;
        let zone = Self::zone_dir(dir)?;
        let dir_fd = self.reach.fd_of(dir)?;
        let mode = super::files::creatable_mode(caller, mode);
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
                    generation: self.reach.restages(zone),
                },
                // Just made: one name, in the upper layer if staged.
                false,
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
            node: node.ino,
            counted: self.counted(caller),
        });
        let entry = self.entry(&node, to_attr(node.shown_ino(), &st));
        Ok((entry, node, fh, direct))
    }
}

//! The `fuser::Filesystem` adapter: a thin shell over [`core::Core`].
//!
//! Each callback logs, asks the core, and replies. Mutating callbacks first
//! run the core's `check_*`; when the policy needs approval, the rest of the
//! callback (and its reply) is moved into a continuation handed to the
//! [`Broker`], so a FUSE thread never waits for a human.
//!
//! Round trips are what metadata costs here (PERF-NOTES), so replies carry
//! what saves the next request: entry and attribute TTLs per zone, negative
//! entries for missing names, `FOPEN_NOFLUSH` (nothing is buffered in the
//! daemon and locks stay in the kernel, so FLUSH has nothing to do), and
//! for file data either a passthrough backing id or `FOPEN_KEEP_CACHE`.

pub mod core;
pub mod inodes;
pub mod notes;
#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use fuser::{
    AccessFlags, BsdFileFlags, CopyFileRangeFlags, Errno, FileHandle, Filesystem, FopenFlags,
    Generation, INodeNo, InitFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLseek,
    ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use crate::approval::{AskRequest, Broker, Note, Verdict};
use crate::backing::Caller;
use crate::error::{FsError, FsResult, Refusal};
use crate::fs::core::{Core, DaemonWhy, Gate, IoMode, SetAttr, XattrReply};

/// Replies that can carry an errno.
pub trait Fail: Send + 'static {
    fn fail(self, e: Errno);
}

macro_rules! impl_fail {
    ($($t:ty),*) => {$(
        impl Fail for $t {
            fn fail(self, e: Errno) {
                self.error(e)
            }
        }
    )*};
}
impl_fail!(
    ReplyEntry,
    ReplyEmpty,
    ReplyAttr,
    ReplyOpen,
    ReplyCreate,
    ReplyWrite,
    ReplyXattr,
    ReplyData,
    ReplyStatfs
);

/// Who may use the mount beyond what the kernel already filters.
#[derive(Debug, Clone, Default)]
pub struct Admission {
    /// With `--allow-uid`: only these users, the mounting user and root.
    /// `None`: everyone the mount options let in.
    pub only: Option<HashSet<u32>>,
}

impl Admission {
    pub fn admits(&self, uid: u32) -> bool {
        match &self.only {
            None => true,
            Some(set) => uid == 0 || set.contains(&uid),
        }
    }
}

/// The mounted filesystem.
pub struct ZoneFs {
    core: Arc<Core>,
    broker: Arc<dyn Broker>,
    admission: Admission,
}

impl ZoneFs {
    pub fn new(core: Core, broker: Arc<dyn Broker>, admission: Admission) -> Self {
        ZoneFs {
            core: Arc::new(core),
            broker,
            admission,
        }
    }

    /// Pass the reply on if the caller may use the mount; else answer
    /// EACCES. Handle-based calls (read, write, release...) need no check:
    /// their handle was opened by an admitted caller.
    fn admit<R: Fail>(&self, req: &Request, reply: R) -> Option<R> {
        if self.admission.admits(req.uid()) {
            return Some(reply);
        }
        tracing::info!(
            uid = req.uid(),
            pid = req.pid(),
            "refused: not allowed to use this mount"
        );
        reply.fail(FsError::Refused(Refusal::NotAllowed).fuse_errno());
        None
    }

    pub fn core(&self) -> &Arc<Core> {
        &self.core
    }

    /// Run `work` now if `check` allows, after approval if it asks, or
    /// answer the refusal. What the policy concluded on the way is handed
    /// to the broker for the ledger.
    fn gated<R: Fail>(
        &self,
        req: &Request,
        op: &'static str,
        check: FsResult<Gate>,
        reply: R,
        work: impl FnOnce(&Core, R) + Send + 'static,
    ) {
        for n in notes::take_notes() {
            self.broker.note(&Note {
                op,
                pid: req.pid(),
                uid: req.uid(),
                zone: n.zone,
                path: n.path,
                target: n.target,
                refusal: n.refusal,
                message: n.message,
            });
        }
        match check {
            Err(e) => reply.fail(e.fuse_errno()),
            Ok(Gate::Go) => work(&self.core, reply),
            Ok(Gate::Ask(items)) => {
                let core = self.core.clone();
                let asked = items.clone();
                let ask = AskRequest {
                    items,
                    op,
                    target: None,
                    pid: req.pid(),
                    uid: req.uid(),
                };
                self.broker.ask(
                    ask,
                    Box::new(move |v| match v {
                        Verdict::Allow => work(&core, reply),
                        // Remembered, explained, for `status`.
                        Verdict::Deny => reply.fail(core.denied(&asked).fuse_errno()),
                        // The caller is being killed: it will never see this.
                        Verdict::Withdrawn => reply.fail(Errno::from_i32(libc::EINTR)),
                    }),
                );
            }
        }
    }
}

fn entry(core: &Core, reply: ReplyEntry, r: FsResult<fuser::FileAttr>) {
    match r {
        Ok(attr) => reply.entry(&core.ttl_for(attr.ino.0), &attr, Generation(0)),
        Err(e) => reply.error(e.fuse_errno()),
    }
}

/// Flags for a file opened with its data through the daemon: the page
/// cache survives close and reopen (writes all pass through the kernel, and
/// `FUSE_AUTO_INVAL_DATA` drops pages when a host-side change shows in the
/// attributes).
const DAEMON_OPEN: FopenFlags = FopenFlags::FOPEN_KEEP_CACHE.union(FopenFlags::FOPEN_NOFLUSH);
/// Directories: the kernel keeps what readdir returned (dropped when the
/// directory changes through the mount, or its mtime changes on the host,
/// seen once the attribute TTL has passed), so a warm walk costs an OPENDIR
/// and a RELEASEDIR per directory, no READDIR.
const DIR_OPEN: FopenFlags = FopenFlags::FOPEN_CACHE_DIR.union(FopenFlags::FOPEN_KEEP_CACHE);
/// Flags besides `FOPEN_PASSTHROUGH` (which allows no caching flags).
const PASSTHROUGH_OPEN: FopenFlags = FopenFlags::FOPEN_NOFLUSH;

fn empty(reply: ReplyEmpty, r: FsResult<()>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e.fuse_errno()),
    }
}

fn log_err<T>(op: &'static str, ino: u64, r: FsResult<T>) -> FsResult<T> {
    if let Err(e) = &r {
        tracing::debug!(op, ino, error = %e, "failed");
    }
    r
}

fn caller_of(req: &Request) -> Caller {
    Caller {
        uid: req.uid(),
        gid: req.gid(),
        pid: req.pid(),
    }
}

/// Run a callback so that a panic in it costs one request, not a FUSE
/// thread: the unsent reply is dropped during unwinding, which answers EIO,
/// and the thread goes on serving.
fn guarded(op: &'static str, f: impl FnOnce()) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
        tracing::error!(op, "panic in a filesystem callback; answered EIO");
    }
}

impl Filesystem for ZoneFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let wanted = InitFlags::FUSE_ATOMIC_O_TRUNC
            | InitFlags::FUSE_DO_READDIRPLUS
            | InitFlags::FUSE_READDIRPLUS_AUTO
            | InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_AUTO_INVAL_DATA
            | InitFlags::FUSE_HANDLE_KILLPRIV;
        // FUSE_HANDLE_KILLPRIV: when a write or chown by a caller without
        // CAP_FSETID must clear setuid/setgid, the kernel sends a SETATTR
        // with nothing set instead of fetching the attributes (a GETATTR
        // per chown) and sending the new mode as the caller (who may not
        // own the file: that chmod failed, and the write with it). The
        // daemon clears the bits itself (`Core::setattr`); chown and
        // truncate on the backing file clear them as on the host.
        // Not FUSE_HANDLE_KILLPRIV_V2: with it the kernel skips that
        // SETATTR on writes and expects the daemon to see the write, which
        // a passthrough write never reaches (measured: an unprivileged
        // write kept the bits).
        let supported = wanted & config.capabilities();
        if let Err(missing) = config.add_capabilities(supported) {
            tracing::warn!(?missing, "kernel lacks FUSE capabilities");
        }
        let mode = match self.core.passthrough_wanted() {
            Err(why) => IoMode::Daemon(why),
            Ok(()) if !config.capabilities().contains(InitFlags::FUSE_PASSTHROUGH) => {
                IoMode::Daemon(DaemonWhy::Kernel)
            }
            // Depth 2: backing dirs may be on a stacked filesystem
            // (overlayfs, as container roots often are); nothing can be
            // stacked on this mount in turn.
            Ok(()) => match config
                .add_capabilities(InitFlags::FUSE_PASSTHROUGH)
                .and_then(|()| {
                    config
                        .set_max_stack_depth(2)
                        .map_err(|_| InitFlags::empty())
                }) {
                Ok(_) => IoMode::Passthrough,
                Err(_) => IoMode::Daemon(DaemonWhy::Kernel),
            },
        };
        self.core.set_io_mode(mode);
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let Some(reply) = self.admit(req, reply) else {
            return;
        };
        guarded("lookup", || {
            tracing::trace!(op = "lookup", parent = parent.0, ?name, pid = req.pid());
            match self.core.lookup(parent.0, name) {
                // A negative entry: the kernel remembers the miss for the
                // TTL instead of asking again (tar, git and compilers probe
                // many missing names).
                Err(e) if e.fuse_errno() == Errno::ENOENT => reply.entry(
                    &self.core.ttl_for(parent.0),
                    &Core::no_entry(),
                    Generation(0),
                ),
                r => entry(&self.core, reply, r),
            }
        });
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        guarded("forget", || {
            self.core.forget(ino.0, nlookup);
        });
    }

    fn getattr(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let Some(reply) = self.admit(req, reply) else {
            return;
        };
        guarded("getattr", || {
            match log_err("getattr", ino.0, self.core.getattr(ino.0, fh.map(|f| f.0))) {
                Ok(attr) => reply.attr(&self.core.ttl_for(ino.0), &attr),
                Err(e) => reply.error(e.fuse_errno()),
            }
        });
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let Some(reply) = self.admit(req, reply) else {
            return;
        };
        guarded("setattr", || {
            tracing::debug!(
                op = "setattr",
                ino = ino.0,
                ?mode,
                ?uid,
                ?gid,
                ?size,
                pid = req.pid()
            );
            let a = SetAttr {
                mode,
                uid,
                gid,
                size,
                atime,
                mtime,
                fh: fh.map(|f| f.0),
            };
            let check = self.core.check_setattr(ino.0, &a);
            let caller = caller_of(req);
            self.gated(
                req,
                "setattr",
                check,
                reply,
                move |core, reply| match log_err("setattr", ino.0, core.setattr(&caller, ino.0, &a))
                {
                    Ok(attr) => reply.attr(&core.ttl_for(ino.0), &attr),
                    Err(e) => reply.error(e.fuse_errno()),
                },
            );
        });
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        let Some(reply) = self.admit(req, reply) else {
            return;
        };
        guarded("readlink", || match self.core.readlink(ino.0) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(e.fuse_errno()),
        });
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        let Some(reply) = self.admit(req, reply) else {
            return;
        };
        guarded("mknod", || {
            tracing::debug!(
                op = "mknod",
                parent = parent.0,
                ?name,
                mode,
                pid = req.pid()
            );
            let name = name.to_owned();
            let check = self.core.check_mknod(parent.0, &name, mode);
            let caller = caller_of(req);
            self.gated(req, "mknod", check, reply, move |core, reply| {
                entry(core, reply, core.mknod(&caller, parent.0, &name, mode))
            });
        });
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let Some(reply) = self.admit(req, reply) else {
            return;
        };
        guarded("mkdir", || {
            tracing::debug!(op = "mkdir", parent = parent.0, ?name, pid = req.pid());
            let name = name.to_owned();
            let check = self.core.check_new(parent.0, &name, true);
            let caller = caller_of(req);
            self.gated(req, "mkdir", check, reply, move |core, reply| {
                entry(core, reply, core.mkdir(&caller, parent.0, &name, mode))
            });
        });
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let Some(reply) = self.admit(req, reply) else {
            return;
        };
        guarded("unlink", || {
            tracing::debug!(op = "unlink", parent = parent.0, ?name, pid = req.pid());
            let name = name.to_owned();
            let check = self.core.check_remove(parent.0, &name);
            let caller = caller_of(req);
            self.gated(req, "unlink", check, reply, move |core, reply| {
                empty(reply, core.unlink(&caller, parent.0, &name))
            });
        });
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let Some(reply) = self.admit(req, reply) else {
            return;
        };
        guarded("rmdir", || {
            tracing::debug!(op = "rmdir", parent = parent.0, ?name, pid = req.pid());
            let name = name.to_owned();
            let check = self.core.check_remove(parent.0, &name);
            let caller = caller_of(req);
            self.gated(req, "rmdir", check, reply, move |core, reply| {
                empty(reply, core.rmdir(&caller, parent.0, &name))
            });
        });
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let Some(reply) = self.admit(req, reply) else {
            return;
        };
        guarded("symlink", || {
            tracing::debug!(
                op = "symlink",
                parent = parent.0,
                ?link_name,
                ?target,
                pid = req.pid()
            );
            let (name, target) = (link_name.to_owned(), target.to_owned());
            let check = self.core.check_new(parent.0, &name, false);
            let caller = caller_of(req);
            self.gated(req, "symlink", check, reply, move |core, reply| {
                entry(core, reply, core.symlink(&caller, parent.0, &name, &target))
            });
        });
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let Some(reply) = self.admit(req, reply) else {
            return;
        };
        guarded("rename", || {
            tracing::debug!(
                op = "rename",
                parent = parent.0,
                ?name,
                newparent = newparent.0,
                ?newname,
                flags = flags.bits(),
                pid = req.pid()
            );
            let (name, newname, flags) = (name.to_owned(), newname.to_owned(), flags.bits());
            let check = self
                .core
                .check_rename(parent.0, &name, newparent.0, &newname, flags);
            let caller = caller_of(req);
            self.gated(req, "rename", check, reply, move |core, reply| {
                empty(
                    reply,
                    core.rename(&caller, parent.0, &name, newparent.0, &newname, flags),
                )
            });
        });
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let Some(reply) = self.admit(req, reply) else {
            return;
        };
        guarded("link", || {
            tracing::debug!(
                op = "link",
                ino = ino.0,
                newparent = newparent.0,
                ?newname,
                pid = req.pid()
            );
            let newname = newname.to_owned();
            let check = self.core.check_link(ino.0, newparent.0, &newname);
            let caller = caller_of(req);
            self.gated(req, "link", check, reply, move |core, reply| {
                entry(
                    core,
                    reply,
                    core.link(&caller, ino.0, newparent.0, &newname),
                )
            });
        });
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let Some(reply) = self.admit(req, reply) else {
            return;
        };
        guarded("open", || {
            tracing::debug!(op = "open", ino = ino.0, flags = flags.0, pid = req.pid());
            let flags = flags.0;
            let check = self.core.check_open(ino.0, flags);
            let caller = caller_of(req);
            self.gated(req, "open", check, reply, move |core, reply| match log_err(
                "open",
                ino.0,
                core.open(&caller, ino.0, flags),
            ) {
                Ok(fh) => match core.passthrough_id(ino.0, fh, |fd| reply.open_backing(fd)) {
                    Some(id) => reply.opened_passthrough(FileHandle(fh), PASSTHROUGH_OPEN, &id),
                    None => reply.opened(FileHandle(fh), DAEMON_OPEN),
                },
                Err(e) => reply.error(e.fuse_errno()),
            });
        });
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let Some(reply) = self.admit(req, reply) else {
            return;
        };
        guarded("create", || {
            tracing::debug!(
                op = "create",
                parent = parent.0,
                ?name,
                mode,
                flags,
                pid = req.pid()
            );
            let name = name.to_owned();
            let check = self.core.check_new(parent.0, &name, false);
            let caller = caller_of(req);
            self.gated(
                req,
                "create",
                check,
                reply,
                move |core, reply| match log_err(
                    "create",
                    parent.0,
                    core.create(&caller, parent.0, &name, mode, flags),
                ) {
                    Ok((attr, fh)) => {
                        let ttl = core.ttl_for(parent.0);
                        match core.passthrough_id(attr.ino.0, fh, |fd| reply.open_backing(fd)) {
                            Some(id) => reply.created_passthrough(
                                &ttl,
                                &attr,
                                Generation(0),
                                FileHandle(fh),
                                PASSTHROUGH_OPEN,
                                &id,
                            ),
                            None => reply.created(
                                &ttl,
                                &attr,
                                Generation(0),
                                FileHandle(fh),
                                DAEMON_OPEN,
                            ),
                        }
                    }
                    Err(e) => reply.error(e.fuse_errno()),
                },
            );
        });
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        guarded("read", || {
            match log_err("read", ino.0, self.core.read(fh.0, offset, size)) {
                Ok(data) => reply.data(&data),
                Err(e) => reply.error(e.fuse_errno()),
            }
        });
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        guarded("write", || {
            match log_err("write", ino.0, self.core.write(fh.0, offset, data)) {
                Ok(n) => reply.written(n),
                Err(e) => reply.error(e.fuse_errno()),
            }
        });
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        guarded("flush", || {
            // Writes go straight to the backing file; nothing is buffered here.
            reply.ok();
        });
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        guarded("release", || {
            self.core.release(fh.0);
            reply.ok();
        });
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        guarded("fsync", || {
            empty(
                reply,
                log_err("fsync", ino.0, self.core.fsync(fh.0, datasync)),
            );
        });
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let Some(reply) = self.admit(req, reply) else {
            return;
        };
        guarded("opendir", || {
            match log_err("opendir", ino.0, self.core.opendir(ino.0)) {
                Ok(fh) => reply.opened(FileHandle(fh), DIR_OPEN),
                Err(e) => reply.error(e.fuse_errno()),
            }
        });
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        guarded("readdir", || {
            match log_err("readdir", ino.0, self.core.readdir(fh.0, offset)) {
                Ok(items) => {
                    for it in items {
                        if reply.add(INodeNo(it.ino), it.offset, it.kind, &it.name) {
                            break;
                        }
                    }
                    reply.ok();
                }
                Err(e) => reply.error(e.fuse_errno()),
            }
        });
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        guarded("readdirplus", || {
            let items = match log_err("readdirplus", ino.0, self.core.readdir(fh.0, offset)) {
                Ok(items) => items,
                Err(e) => return reply.error(e.fuse_errno()),
            };
            let ttl = self.core.ttl_for(ino.0);
            for it in items {
                let dots = it.name == "." || it.name == "..";
                let attr = if dots {
                    self.core.getattr(it.ino, None)
                } else {
                    self.core.lookup(ino.0, &it.name)
                };
                // An entry that vanished since opendir is skipped.
                let Ok(attr) = attr else { continue };
                if reply.add(attr.ino, it.offset, &it.name, &ttl, &attr, Generation(0)) {
                    if !dots {
                        // Not sent: the kernel never saw this lookup.
                        self.core.forget(attr.ino.0, 1);
                    }
                    break;
                }
            }
            reply.ok();
        });
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        guarded("releasedir", || {
            self.core.releasedir(fh.0);
            reply.ok();
        });
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        guarded("fsyncdir", || {
            empty(reply, self.core.fsyncdir(ino.0, datasync));
        });
    }

    fn statfs(&self, req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        let Some(reply) = self.admit(req, reply) else {
            return;
        };
        guarded("statfs", || match self.core.statfs(ino.0) {
            Ok(s) => reply.statfs(
                s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.frsize,
            ),
            Err(e) => reply.error(e.fuse_errno()),
        });
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let Some(reply) = self.admit(req, reply) else {
            return;
        };
        guarded("setxattr", || {
            tracing::debug!(op = "setxattr", ino = ino.0, ?name, pid = req.pid());
            let (name, value) = (name.to_owned(), value.to_vec());
            let check = self.core.check_metadata(ino.0);
            let caller = caller_of(req);
            self.gated(req, "setxattr", check, reply, move |core, reply| {
                empty(reply, core.setxattr(&caller, ino.0, &name, &value, flags))
            });
        });
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let Some(reply) = self.admit(req, reply) else {
            return;
        };
        guarded("getxattr", || match self.core.getxattr(ino.0, name, size) {
            Ok(XattrReply::Size(n)) => reply.size(n),
            Ok(XattrReply::Data(d)) => reply.data(&d),
            Err(e) => reply.error(e.fuse_errno()),
        });
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let Some(reply) = self.admit(req, reply) else {
            return;
        };
        guarded("listxattr", || match self.core.listxattr(ino.0, size) {
            Ok(XattrReply::Size(n)) => reply.size(n),
            Ok(XattrReply::Data(d)) => reply.data(&d),
            Err(e) => reply.error(e.fuse_errno()),
        });
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let Some(reply) = self.admit(req, reply) else {
            return;
        };
        guarded("removexattr", || {
            tracing::debug!(op = "removexattr", ino = ino.0, ?name, pid = req.pid());
            let name = name.to_owned();
            let check = self.core.check_metadata(ino.0);
            let caller = caller_of(req);
            self.gated(req, "removexattr", check, reply, move |core, reply| {
                empty(reply, core.removexattr(&caller, ino.0, &name))
            });
        });
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let Some(reply) = self.admit(req, reply) else {
            return;
        };
        guarded("access", || {
            empty(reply, self.core.access(ino.0, mask.bits()));
        });
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        guarded("fallocate", || {
            empty(
                reply,
                log_err(
                    "fallocate",
                    ino.0,
                    self.core.fallocate(fh.0, offset, length, mode),
                ),
            );
        });
    }

    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        guarded("lseek", || {
            match log_err("lseek", ino.0, self.core.lseek(fh.0, offset, whence)) {
                Ok(off) => reply.offset(off),
                Err(e) => reply.error(e.fuse_errno()),
            }
        });
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        ino_in: INodeNo,
        fh_in: FileHandle,
        offset_in: u64,
        _ino_out: INodeNo,
        fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        guarded("copy_file_range", || {
            match log_err(
                "copy_file_range",
                ino_in.0,
                self.core
                    .copy_file_range(fh_in.0, offset_in, fh_out.0, offset_out, len),
            ) {
                Ok(n) => reply.written(n),
                Err(e) => reply.error(e.fuse_errno()),
            }
        });
    }
}

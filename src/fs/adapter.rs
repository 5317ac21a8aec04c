//! The `fuser::Filesystem` adapter: each callback decodes the request,
//! calls one core function and encodes the reply. No policy, approval or
//! state lives here; the core answers through [`Respond`], which this
//! module implements for each fuser reply type.
//!
//! Replies carry what saves the next round trip (PERF-NOTES of the
//! project's design): entry and attribute TTLs per zone, negative entries
//! for missing names, `FOPEN_NOFLUSH` (nothing is buffered in the daemon
//! and locks stay in the kernel, so FLUSH has nothing to do), and for file
//! data either a passthrough backing id or `FOPEN_KEEP_CACHE`.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::os::fd::BorrowedFd;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use fuser::{
    AccessFlags, BackingId, BsdFileFlags, CopyFileRangeFlags, FileHandle, Filesystem, FopenFlags,
    Generation, INodeNo, InitFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLseek,
    ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use crate::error::{FsError, FsResult, Refusal};
use crate::fs::core::{
    Core, Created, Ctx, DaemonWhy, Entry, FileOpen, IoMode, Opening, Respond, SetAttr, Statfs,
    XattrReply,
};

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
    admission: Admission,
}

impl ZoneFs {
    pub fn new(core: Arc<Core>, admission: Admission) -> Self {
        ZoneFs { core, admission }
    }

    pub fn core(&self) -> &Arc<Core> {
        &self.core
    }

    /// The context of `req` if its caller may use the mount; else the
    /// reply is answered EACCES. Handle-based calls (read, write,
    /// release...) need no check: their handle was opened by an admitted
    /// caller.
    fn admit<T, R: Respond<T>>(
        &self,
        req: &Request,
        op: &'static str,
        reply: R,
    ) -> Option<(Ctx, R)> {
        tracing::trace!(op, pid = req.pid(), uid = req.uid());
        if self.admission.admits(req.uid()) {
            let ctx = Ctx {
                op,
                uid: req.uid(),
                gid: req.gid(),
                pid: req.pid(),
            };
            return Some((ctx, reply));
        }
        tracing::info!(
            uid = req.uid(),
            pid = req.pid(),
            "refused: not allowed to use this mount"
        );
        reply.respond(Err(FsError::Refused(Refusal::NotAllowed)));
        None
    }
}

/// Run a callback so that a panic in it costs one request, not a FUSE
/// thread: the unsent reply is dropped during unwinding, which answers EIO,
/// and the thread goes on serving.
pub(crate) fn guarded(op: &'static str, f: impl FnOnce()) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
        tracing::error!(op, "panic in a filesystem callback; answered EIO");
    }
}

fn failed<T>(op: &'static str, r: &FsResult<T>) {
    if let Err(e) = r {
        tracing::debug!(op, error = %e, "failed");
    }
}

// ---- replies: each fuser reply type encodes one core result --------------

macro_rules! respond {
    ($reply:ty, $t:ty, |$r:ident, $v:ident| $ok:expr) => {
        impl Respond<$t> for $reply {
            fn respond(self, res: FsResult<$t>) {
                let $r = self;
                match res {
                    Ok($v) => $ok,
                    Err(e) => $r.error(e.fuse_errno()),
                }
            }
        }
    };
}

/// A directory handle, as opendir answers it.
struct DirHandle(u64);

respond!(ReplyEntry, Entry, |r, e| r.entry(
    &e.ttl,
    &e.attr,
    Generation(0)
));
respond!(ReplyAttr, Entry, |r, e| r.attr(&e.ttl, &e.attr));
respond!(ReplyEmpty, (), |r, _v| r.ok());
respond!(ReplyData, Vec<u8>, |r, d| r.data(&d));
respond!(ReplyWrite, u32, |r, n| r.written(n));
respond!(ReplyLseek, i64, |r, off| r.offset(off));
respond!(ReplyOpen, DirHandle, |r, h| r
    .opened(FileHandle(h.0), DIR_OPEN));
respond!(ReplyXattr, XattrReply, |r, x| match x {
    XattrReply::Size(n) => r.size(n),
    XattrReply::Data(d) => r.data(&d),
});
respond!(ReplyStatfs, Statfs, |r, s| r.statfs(
    s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.frsize
));
respond!(ReplyOpen, FileOpen, |r, o| match o.backing {
    Some(id) => r.opened_passthrough(FileHandle(o.fh), PASSTHROUGH_OPEN, &id),
    None => r.opened(FileHandle(o.fh), DAEMON_OPEN),
});
respond!(ReplyCreate, Created, |r, c| {
    let (e, fh) = (&c.entry, FileHandle(c.open.fh));
    match c.open.backing {
        Some(id) => {
            r.created_passthrough(&e.ttl, &e.attr, Generation(0), fh, PASSTHROUGH_OPEN, &id)
        }
        None => r.created(&e.ttl, &e.attr, Generation(0), fh, DAEMON_OPEN),
    }
});

impl Opening<FileOpen> for ReplyOpen {
    fn register(&self, fd: BorrowedFd<'_>) -> std::io::Result<BackingId> {
        self.open_backing(fd)
    }
}

impl Opening<Created> for ReplyCreate {
    fn register(&self, fd: BorrowedFd<'_>) -> std::io::Result<BackingId> {
        self.open_backing(fd)
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
        let Some((ctx, reply)) = self.admit(req, "lookup", reply) else {
            return;
        };
        guarded("lookup", || {
            reply.respond(self.core.lookup(&ctx, parent.0, name))
        });
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        guarded("forget", || self.core.forget(ino.0, nlookup));
    }

    fn getattr(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let Some((_, reply)) = self.admit(req, "getattr", reply) else {
            return;
        };
        guarded("getattr", || {
            let r = self.core.getattr(ino.0, fh.map(|f| f.0));
            failed("getattr", &r);
            reply.respond(r)
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
        let Some((ctx, reply)) = self.admit(req, "setattr", reply) else {
            return;
        };
        let fh = fh.map(|f| f.0);
        let a = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
            fh,
        };
        tracing::debug!(op = "setattr", ino = ino.0, ?a, pid = req.pid());
        guarded("setattr", || self.core.setattr(ctx, ino.0, a, reply));
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        let Some((_, reply)) = self.admit(req, "readlink", reply) else {
            return;
        };
        guarded("readlink", || reply.respond(self.core.readlink(ino.0)));
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
        let Some((ctx, reply)) = self.admit(req, "mknod", reply) else {
            return;
        };
        tracing::debug!(
            op = "mknod",
            parent = parent.0,
            ?name,
            mode,
            pid = req.pid()
        );
        guarded("mknod", || {
            self.core.mknod(ctx, parent.0, name, mode, reply)
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
        let Some((ctx, reply)) = self.admit(req, "mkdir", reply) else {
            return;
        };
        tracing::debug!(op = "mkdir", parent = parent.0, ?name, pid = req.pid());
        guarded("mkdir", || {
            self.core.mkdir(ctx, parent.0, name, mode, reply)
        });
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let Some((ctx, reply)) = self.admit(req, "unlink", reply) else {
            return;
        };
        tracing::debug!(op = "unlink", parent = parent.0, ?name, pid = req.pid());
        guarded("unlink", || {
            self.core.remove(ctx, parent.0, name, false, reply)
        });
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let Some((ctx, reply)) = self.admit(req, "rmdir", reply) else {
            return;
        };
        tracing::debug!(op = "rmdir", parent = parent.0, ?name, pid = req.pid());
        guarded("rmdir", || {
            self.core.remove(ctx, parent.0, name, true, reply)
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
        let Some((ctx, reply)) = self.admit(req, "symlink", reply) else {
            return;
        };
        tracing::debug!(
            op = "symlink",
            parent = parent.0,
            ?link_name,
            ?target,
            pid = req.pid()
        );
        guarded("symlink", || {
            self.core.symlink(ctx, parent.0, link_name, target, reply)
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
        let Some((ctx, reply)) = self.admit(req, "rename", reply) else {
            return;
        };
        let (from, to, flags) = (parent.0, newparent.0, flags.bits());
        tracing::debug!(
            op = "rename",
            from,
            ?name,
            to,
            ?newname,
            flags,
            pid = req.pid()
        );
        guarded("rename", || {
            self.core.rename(ctx, from, name, to, newname, flags, reply)
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
        let Some((ctx, reply)) = self.admit(req, "link", reply) else {
            return;
        };
        let (ino, to) = (ino.0, newparent.0);
        tracing::debug!(op = "link", ino, to, ?newname, pid = req.pid());
        guarded("link", || self.core.link(ctx, ino, to, newname, reply));
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let Some((ctx, reply)) = self.admit::<FileOpen, _>(req, "open", reply) else {
            return;
        };
        tracing::debug!(op = "open", ino = ino.0, flags = flags.0, pid = req.pid());
        guarded("open", || self.core.open(ctx, ino.0, flags.0, reply));
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
        let Some((ctx, reply)) = self.admit(req, "create", reply) else {
            return;
        };
        tracing::debug!(
            op = "create",
            parent = parent.0,
            ?name,
            mode,
            flags,
            pid = req.pid()
        );
        guarded("create", || {
            self.core.create(ctx, parent.0, name, mode, flags, reply)
        });
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        guarded("read", || {
            let r = self.core.read(fh.0, offset, size);
            failed("read", &r);
            reply.respond(r)
        });
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        guarded("write", || {
            let r = self.core.write(fh.0, offset, data);
            failed("write", &r);
            reply.respond(r)
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
        // Writes go straight to the backing file; nothing is buffered here.
        guarded("flush", || reply.ok());
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
            reply.ok()
        });
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        guarded("fsync", || {
            let r = self.core.fsync(fh.0, datasync);
            failed("fsync", &r);
            reply.respond(r)
        });
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let Some((_, reply)) = self.admit::<DirHandle, _>(req, "opendir", reply) else {
            return;
        };
        guarded("opendir", || {
            let r = self.core.opendir(ino.0).map(DirHandle);
            failed("opendir", &r);
            reply.respond(r)
        });
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        guarded("readdir", || match self.core.readdir(fh.0, offset) {
            Ok(items) => {
                for it in items {
                    if reply.add(INodeNo(it.ino), it.offset, it.kind, &it.name) {
                        break;
                    }
                }
                reply.ok()
            }
            Err(e) => reply.error(e.fuse_errno()),
        });
    }

    fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let ctx = Ctx {
            op: "readdirplus",
            uid: req.uid(),
            gid: req.gid(),
            pid: req.pid(),
        };
        guarded("readdirplus", || {
            let r = self.core.readdirplus(&ctx, ino.0, fh.0, offset, |it, e| {
                reply.add(
                    e.attr.ino,
                    it.offset,
                    &it.name,
                    &e.ttl,
                    &e.attr,
                    Generation(0),
                )
            });
            match r {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e.fuse_errno()),
            }
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
            reply.ok()
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
            reply.respond(self.core.fsyncdir(ino.0, datasync))
        });
    }

    fn statfs(&self, req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        let Some((_, reply)) = self.admit(req, "statfs", reply) else {
            return;
        };
        guarded("statfs", || reply.respond(self.core.statfs(ino.0)));
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
        let Some((ctx, reply)) = self.admit(req, "setxattr", reply) else {
            return;
        };
        tracing::debug!(op = "setxattr", ino = ino.0, ?name, pid = req.pid());
        guarded("setxattr", || {
            self.core.setxattr(ctx, ino.0, name, value, flags, reply)
        });
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let Some((_, reply)) = self.admit(req, "getxattr", reply) else {
            return;
        };
        guarded("getxattr", || {
            reply.respond(self.core.getxattr(ino.0, name, size))
        });
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let Some((_, reply)) = self.admit(req, "listxattr", reply) else {
            return;
        };
        guarded("listxattr", || {
            reply.respond(self.core.listxattr(ino.0, size))
        });
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let Some((ctx, reply)) = self.admit(req, "removexattr", reply) else {
            return;
        };
        tracing::debug!(op = "removexattr", ino = ino.0, ?name, pid = req.pid());
        guarded("removexattr", || {
            self.core.removexattr(ctx, ino.0, name, reply)
        });
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let Some((_, reply)) = self.admit(req, "access", reply) else {
            return;
        };
        guarded("access", || {
            reply.respond(self.core.access(ino.0, mask.bits()))
        });
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        guarded("fallocate", || {
            let r = self.core.fallocate(fh.0, offset, length, mode);
            failed("fallocate", &r);
            reply.respond(r)
        });
    }

    fn lseek(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        guarded("lseek", || {
            reply.respond(self.core.lseek(fh.0, offset, whence))
        });
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        _ino_in: INodeNo,
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
            let r = self
                .core
                .copy_file_range(fh_in.0, offset_in, fh_out.0, offset_out, len);
            failed("copy_file_range", &r);
            reply.respond(r)
        });
    }
}

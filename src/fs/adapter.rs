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

use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use fuser::{
    AccessFlags, BsdFileFlags, CopyFileRangeFlags, FileHandle, Filesystem, Generation, INodeNo,
    InitFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs,
    ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use crate::error::FsResult;
use crate::fs::core::{Core, Ctx, DaemonWhy, IoMode, Respond, SetAttr};
use crate::fs::reply::DirHandle;

/// The mounted filesystem.
pub struct ZoneFs {
    core: Arc<Core>,
}

impl ZoneFs {
    pub fn new(core: Arc<Core>) -> Self {
        ZoneFs { core }
    }

    pub fn core(&self) -> &Arc<Core> {
        &self.core
    }
}

/// The context the core gets with a request.
fn ctx(req: &Request, op: &'static str) -> Ctx {
    tracing::trace!(op, pid = req.pid(), uid = req.uid());
    Ctx {
        op,
        uid: req.uid(),
        gid: req.gid(),
        pid: req.pid(),
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
        let ctx = ctx(req, "lookup");
        guarded("lookup", || {
            reply.respond(self.core.lookup(&ctx, parent.0, name))
        });
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        guarded("forget", || self.core.forget(ino.0, nlookup));
    }

    fn getattr(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let ctx = ctx(req, "getattr");
        guarded("getattr", || {
            let r = self.core.getattr(&ctx, ino.0, fh.map(|f| f.0));
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
        let ctx = ctx(req, "setattr");
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
        let ctx = ctx(req, "readlink");
        guarded("readlink", || {
            reply.respond(self.core.readlink(&ctx, ino.0))
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
        let ctx = ctx(req, "mknod");
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
        let ctx = ctx(req, "mkdir");
        tracing::debug!(op = "mkdir", parent = parent.0, ?name, pid = req.pid());
        guarded("mkdir", || {
            self.core.mkdir(ctx, parent.0, name, mode, reply)
        });
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let ctx = ctx(req, "unlink");
        tracing::debug!(op = "unlink", parent = parent.0, ?name, pid = req.pid());
        guarded("unlink", || {
            self.core.remove(ctx, parent.0, name, false, reply)
        });
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let ctx = ctx(req, "rmdir");
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
        let ctx = ctx(req, "symlink");
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
        let ctx = ctx(req, "rename");
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
        let ctx = ctx(req, "link");
        let (ino, to) = (ino.0, newparent.0);
        tracing::debug!(op = "link", ino, to, ?newname, pid = req.pid());
        guarded("link", || self.core.link(ctx, ino, to, newname, reply));
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let ctx = ctx(req, "open");
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
        let ctx = ctx(req, "create");
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
        let ctx = ctx(req, "opendir");
        guarded("opendir", || {
            let r = self.core.opendir(&ctx, ino.0).map(DirHandle);
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
        let ctx = ctx(req, "readdirplus");
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
        let ctx = ctx(req, "statfs");
        guarded("statfs", || reply.respond(self.core.statfs(&ctx, ino.0)));
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
        let ctx = ctx(req, "setxattr");
        tracing::debug!(op = "setxattr", ino = ino.0, ?name, pid = req.pid());
        guarded("setxattr", || {
            self.core.setxattr(ctx, ino.0, name, value, flags, reply)
        });
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let ctx = ctx(req, "getxattr");
        guarded("getxattr", || {
            reply.respond(self.core.getxattr(&ctx, ino.0, name, size))
        });
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let ctx = ctx(req, "listxattr");
        guarded("listxattr", || {
            reply.respond(self.core.listxattr(&ctx, ino.0, size))
        });
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let ctx = ctx(req, "removexattr");
        tracing::debug!(op = "removexattr", ino = ino.0, ?name, pid = req.pid());
        guarded("removexattr", || {
            self.core.removexattr(ctx, ino.0, name, reply)
        });
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let ctx = ctx(req, "access");
        guarded("access", || {
            reply.respond(self.core.access(&ctx, ino.0, mask.bits()))
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

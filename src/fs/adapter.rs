//! The adapter: each FUSE request, decoded by the session layer, becomes
//! one core call, and the core's result its reply. No policy, approval or
//! state lives here; the core answers through [`Respond`], which
//! `fs::reply` implements for each reply kind.
//!
//! Replies carry what saves the next round trip (PERF-NOTES of the
//! project's design): entry and attribute TTLs per zone, negative entries
//! for missing names, `FOPEN_NOFLUSH` (nothing is buffered in the daemon
//! and locks stay in the kernel, so FLUSH has nothing to do), and for file
//! data either a passthrough backing id or `FOPEN_KEEP_CACHE`.

use std::sync::Arc;

use crate::fs::core::{Core, Ctx, DaemonWhy, IoMode, Respond, SetAttr};
use crate::fs::reply::{
    DirHandle, ReplyAttr, ReplyCreate, ReplyData, ReplyDir, ReplyEmpty, ReplyEntry, ReplyLseek,
    ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
};
use crate::fuse::abi::{self, fattr, init};
use crate::fuse::{
    Agreed, DirBuf, Filesystem, Offer, Op, Reply, Request, TimeOrNow, Transport, Wants,
};

/// The largest write (and read) the kernel sends in one request.
pub const MAX_WRITE: u32 = 1 << 20;

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
fn ctx(req: &Request<'_>, op: &'static str) -> Ctx {
    tracing::trace!(op, pid = req.pid, uid = req.uid);
    Ctx {
        op,
        uid: req.uid,
        gid: req.gid,
        pid: req.pid,
        unique: req.unique,
        may_wait: req.may_wait,
    }
}

/// Run a callback so that a panic in it costs one request, not a serving
/// thread: the unsent reply is dropped during unwinding, which answers EIO,
/// and the thread goes on serving.
pub(crate) fn guarded(op: &'static str, f: impl FnOnce()) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
        tracing::error!(op, "panic in a filesystem callback; answered EIO");
    }
}

fn failed<T>(op: &'static str, r: &crate::error::FsResult<T>) {
    if let Err(e) = r {
        tracing::debug!(op, error = %e, "failed");
    }
}

/// The times a SETATTR sets.
fn set_time(valid: u32, set: u32, now: u32, secs: u64, nsecs: u32) -> Option<TimeOrNow> {
    if valid & now != 0 {
        Some(TimeOrNow::Now)
    } else if valid & set != 0 {
        Some(TimeOrNow::from_abi(secs, nsecs))
    } else {
        None
    }
}

impl Filesystem for ZoneFs {
    fn init(&self, offer: &Offer) -> Wants {
        let mut flags = init::ASYNC_READ
            | init::BIG_WRITES
            | init::MAX_PAGES
            | init::ATOMIC_O_TRUNC
            | init::DO_READDIRPLUS
            | init::READDIRPLUS_AUTO
            | init::PARALLEL_DIROPS
            | init::AUTO_INVAL_DATA
            | init::HANDLE_KILLPRIV
            | init::HANDLE_KILLPRIV_V2;
        // FUSE_HANDLE_KILLPRIV: when a write or chown by a caller without
        // CAP_FSETID must clear setuid/setgid, the kernel sends a SETATTR
        // with nothing set instead of fetching the attributes (a GETATTR
        // per chown) and sending the new mode as the caller (who may not
        // own the file: that chmod failed, and the write with it). The
        // daemon clears the bits itself (`Core::setattr`); chown and
        // truncate on the backing file clear them as on the host.
        // FUSE_HANDLE_KILLPRIV_V2 as well: the kernel then stops asking
        // for `security.capability` before every write(2) once a file's
        // first write found nothing to clear (a GETXATTR round trip per
        // write otherwise: 4 KiB writes paid one per block). It still
        // sends that SETATTR for a file with setuid/setgid (a passthrough
        // write too: the kernel clears privileges on the FUSE file before
        // it writes the backing file; measured on 6.18, and after a chmod
        // u+s of a file written before), and marks the WRITEs, truncates
        // and opens whose caller lacks CAP_FSETID, which the daemon then
        // clears too (`Core::write`, `Core::setattr`).
        if self.core.passthrough_wanted().is_ok() && offer.flags & init::PASSTHROUGH != 0 {
            flags |= init::PASSTHROUGH;
        } else {
            // File data through the daemon, and `--writeback-cache`: the
            // kernel gathers writes in its page cache and sends them in
            // blocks of up to MAX_WRITE (4 KiB writes otherwise cost a
            // round trip each). Only when asked for: the kernel then
            // trusts its own size and times of a cached file over the
            // backing file's, so host-side changes go unseen. Handles
            // whose every write the daemon must see (a zone's size limit)
            // use direct I/O, which must still allow shared mmap (Linux
            // 6.6): without that, no writeback cache. See
            // `Core::open_backing`.
            let both = init::WRITEBACK_CACHE | init::DIRECT_IO_ALLOW_MMAP;
            if self.core.writeback_wanted() && offer.flags & both == both {
                flags |= both;
            }
        }
        Wants {
            flags,
            max_write: MAX_WRITE,
            max_pages: (MAX_WRITE / 4096) as u16,
            // Depth 2: backing dirs may be on a stacked filesystem
            // (overlayfs, as container roots and staged zones are);
            // nothing can be stacked on this mount in turn.
            max_stack_depth: 2,
            max_background: 16,
        }
    }

    fn agreed(&self, agreed: &Agreed) {
        let mode = match self.core.passthrough_wanted() {
            Err(why) => IoMode::Daemon(why),
            Ok(()) if agreed.has(init::PASSTHROUGH) => IoMode::Passthrough,
            Ok(()) => IoMode::Daemon(DaemonWhy::Kernel),
        };
        self.core.set_io_mode(mode);
        self.core.set_writeback(agreed.has(init::WRITEBACK_CACHE));
        self.core.set_transport(if agreed.has(init::OVER_IO_URING) {
            Transport::Uring
        } else {
            Transport::Device
        });
    }

    fn dispatch(&self, req: Request<'_>, reply: Reply) {
        let ino = req.nodeid;
        let core = &self.core;
        core.requests().count(req.opcode);
        match req.op {
            Op::Lookup { name } => {
                let ctx = ctx(&req, "lookup");
                guarded("lookup", || {
                    ReplyEntry(reply).respond(core.lookup(&ctx, ino, name))
                });
            }
            Op::Forget { nlookup } => guarded("forget", || core.forget(ino, nlookup)),
            Op::BatchForget(ref v) => guarded("forget", || {
                for f in v {
                    core.forget(f.nodeid, f.nlookup);
                }
            }),
            Op::Getattr { fh } => {
                let ctx = ctx(&req, "getattr");
                guarded("getattr", || {
                    let r = core.getattr(&ctx, ino, fh);
                    failed("getattr", &r);
                    ReplyAttr(reply).respond(r)
                });
            }
            Op::Setattr(s) => {
                let ctx = ctx(&req, "setattr");
                let v = s.valid;
                let a = SetAttr {
                    mode: (v & fattr::MODE != 0).then_some(s.mode),
                    uid: (v & fattr::UID != 0).then_some(s.uid),
                    gid: (v & fattr::GID != 0).then_some(s.gid),
                    size: (v & fattr::SIZE != 0).then_some(s.size),
                    atime: set_time(v, fattr::ATIME, fattr::ATIME_NOW, s.atime, s.atimensec),
                    mtime: set_time(v, fattr::MTIME, fattr::MTIME_NOW, s.mtime, s.mtimensec),
                    fh: (v & fattr::FH != 0).then_some(s.fh),
                    kill_suidgid: v & fattr::KILL_SUIDGID != 0,
                };
                tracing::debug!(op = "setattr", ino, ?a, pid = req.pid);
                guarded("setattr", || core.setattr(ctx, ino, a, ReplyAttr(reply)));
            }
            Op::Readlink => {
                let ctx = ctx(&req, "readlink");
                guarded("readlink", || {
                    ReplyData(reply).respond(core.readlink(&ctx, ino))
                });
            }
            Op::Mknod { name, mode, .. } => {
                let ctx = ctx(&req, "mknod");
                tracing::debug!(op = "mknod", parent = ino, ?name, mode, pid = req.pid);
                guarded("mknod", || {
                    core.mknod(ctx, ino, name, mode, ReplyEntry(reply))
                });
            }
            Op::Mkdir { name, mode } => {
                let ctx = ctx(&req, "mkdir");
                tracing::debug!(op = "mkdir", parent = ino, ?name, pid = req.pid);
                guarded("mkdir", || {
                    core.mkdir(ctx, ino, name, mode, ReplyEntry(reply))
                });
            }
            Op::Unlink { name } => {
                let ctx = ctx(&req, "unlink");
                tracing::debug!(op = "unlink", parent = ino, ?name, pid = req.pid);
                guarded("unlink", || {
                    core.remove(ctx, ino, name, false, ReplyEmpty(reply))
                });
            }
            Op::Rmdir { name } => {
                let ctx = ctx(&req, "rmdir");
                tracing::debug!(op = "rmdir", parent = ino, ?name, pid = req.pid);
                guarded("rmdir", || {
                    core.remove(ctx, ino, name, true, ReplyEmpty(reply))
                });
            }
            Op::Symlink { name, target } => {
                let ctx = ctx(&req, "symlink");
                tracing::debug!(op = "symlink", parent = ino, ?name, ?target, pid = req.pid);
                guarded("symlink", || {
                    core.symlink(ctx, ino, name, target.as_ref(), ReplyEntry(reply))
                });
            }
            Op::Rename {
                name,
                newdir,
                newname,
                flags,
            } => {
                // An exchange is its own call to whoever decides it (and
                // an allow for one is not one for a rename that replaces).
                let op = match flags & libc::RENAME_EXCHANGE != 0 {
                    true => "exchange",
                    false => "rename",
                };
                let ctx = ctx(&req, op);
                tracing::debug!(
                    op = "rename",
                    from = ino,
                    ?name,
                    to = newdir,
                    ?newname,
                    flags,
                    pid = req.pid
                );
                guarded("rename", || {
                    core.rename(ctx, ino, name, newdir, newname, flags, ReplyEmpty(reply))
                });
            }
            Op::Link { oldnodeid, newname } => {
                let ctx = ctx(&req, "link");
                tracing::debug!(
                    op = "link",
                    ino = oldnodeid,
                    to = ino,
                    ?newname,
                    pid = req.pid
                );
                guarded("link", || {
                    core.link(ctx, oldnodeid, ino, newname, ReplyEntry(reply))
                });
            }
            Op::Open { flags } => {
                let ctx = ctx(&req, "open");
                tracing::debug!(op = "open", ino, flags, pid = req.pid);
                guarded("open", || {
                    core.open(ctx, ino, flags as i32, ReplyOpen(reply))
                });
            }
            Op::Create { name, mode, flags } => {
                let ctx = ctx(&req, "create");
                tracing::debug!(
                    op = "create",
                    parent = ino,
                    ?name,
                    mode,
                    flags,
                    pid = req.pid
                );
                guarded("create", || {
                    core.create(ctx, ino, name, mode, flags as i32, ReplyCreate(reply))
                });
            }
            // fh 0 is no handle (they start at 1): a mount whose opens
            // the kernel makes itself (`Core::kernel_opens`) reads by node.
            Op::Read(r) if r.fh == 0 => {
                let ctx = ctx(&req, "read");
                guarded("read", || match core.read_node(&ctx, ino) {
                    Ok(fd) => {
                        use std::os::fd::AsFd;
                        reply.file_data(fd.as_fd(), r.offset, r.size)
                    }
                    Err(e) => {
                        tracing::debug!(op = "read", error = %e, "failed");
                        reply.error(e.errno())
                    }
                })
            }
            Op::Read(r) => guarded("read", || {
                let res = core.read_handle(r.fh);
                failed("read", &res);
                match res.as_ref().map(|h| h.fd()) {
                    Ok(Ok(fd)) => reply.file_data(fd, r.offset, r.size),
                    Ok(Err(e)) => reply.error(e.errno()),
                    Err(e) => reply.error(e.errno()),
                }
            }),
            Op::Write { arg, data } => guarded("write", || {
                let kill = arg.write_flags & abi::WRITE_KILL_SUIDGID != 0;
                // A file whose create's approval is pending: once allowed.
                if let Some(held) = core.held(arg.fh) {
                    let data = data.to_vec();
                    let ctx = ctx(&req, "write");
                    return core.after_held(held, &ctx, ReplyWrite(reply), move |c| {
                        c.write(arg.fh, arg.offset, &data, kill)
                    });
                }
                let res = core.write(arg.fh, arg.offset, data, kill);
                failed("write", &res);
                ReplyWrite(reply).respond(res)
            }),
            // Nothing is buffered in the daemon and locks stay in the
            // kernel: ENOSYS tells the kernel never to send FLUSH again
            // (with the writeback cache it would on every close, even with
            // FOPEN_NOFLUSH; it writes dirty pages back first either way).
            // A close is never held for an approval (see `core::held`).
            Op::Flush { .. } => reply.error(libc::ENOSYS),
            Op::Release { fh } => guarded("release", || {
                core.release(fh);
                reply.ok()
            }),
            // A file the kernel opened itself, on a read-only mount:
            // nothing of it was written through the daemon.
            Op::Fsync { fh: 0, .. } if core.kernel_opens().is_ok() => reply.ok(),
            Op::Fsync { fh, datasync } => guarded("fsync", || {
                if let Some(held) = core.held(fh) {
                    let ctx = ctx(&req, "fsync");
                    return core.after_held(held, &ctx, ReplyEmpty(reply), move |c| {
                        c.fsync(fh, datasync)
                    });
                }
                let r = core.fsync(fh, datasync);
                failed("fsync", &r);
                ReplyEmpty(reply).respond(r)
            }),
            Op::Opendir => {
                let ctx = ctx(&req, "opendir");
                guarded("opendir", || {
                    let r = core.opendir(&ctx, ino).map(DirHandle);
                    failed("opendir", &r);
                    ReplyDir(reply).respond(r)
                });
            }
            Op::Readdir(r) => guarded("readdir", || {
                match match r.fh {
                    // fh 0: a directory the kernel opened itself (`Core::opendir`).
                    0 => core.readdir_node(&ctx(&req, "readdir"), ino, r.offset),
                    fh => core.readdir(fh, r.offset),
                } {
                    Ok(items) => {
                        let mut buf = DirBuf::new(r.size);
                        for it in items {
                            use std::os::unix::ffi::OsStrExt;
                            if buf.add(it.ino, it.offset, it.kind, it.name.as_bytes()) {
                                break;
                            }
                        }
                        reply.data(buf.bytes())
                    }
                    Err(e) => reply.error(e.errno()),
                }
            }),
            Op::Readdirplus(r) => {
                let ctx = ctx(&req, "readdirplus");
                guarded("readdirplus", || {
                    let mut buf = DirBuf::new(r.size);
                    let res = core.readdirplus(&ctx, ino, r.fh, r.offset, |it, e| {
                        use std::os::unix::ffi::OsStrExt;
                        buf.add_plus(it.offset, it.name.as_bytes(), e.ttl, e.node, &e.attr)
                    });
                    match res {
                        Ok(()) => reply.data(buf.bytes()),
                        Err(e) => reply.error(e.errno()),
                    }
                });
            }
            Op::Releasedir { fh } => guarded("releasedir", || {
                core.releasedir(fh);
                reply.ok()
            }),
            Op::Fsyncdir { datasync } => guarded("fsyncdir", || {
                ReplyEmpty(reply).respond(core.fsyncdir(ino, datasync))
            }),
            Op::Statfs => {
                let ctx = ctx(&req, "statfs");
                guarded("statfs", || {
                    ReplyStatfs(reply).respond(core.statfs(&ctx, ino))
                });
            }
            Op::Setxattr { name, value, flags } => {
                let ctx = ctx(&req, "setxattr");
                tracing::debug!(op = "setxattr", ino, ?name, pid = req.pid);
                guarded("setxattr", || {
                    core.setxattr(ctx, ino, name, value, flags as i32, ReplyEmpty(reply))
                });
            }
            Op::Getxattr { name, size } => {
                let ctx = ctx(&req, "getxattr");
                guarded("getxattr", || {
                    ReplyXattr(reply).respond(core.getxattr(&ctx, ino, name, size))
                });
            }
            Op::Listxattr { size } => {
                let ctx = ctx(&req, "listxattr");
                guarded("listxattr", || {
                    ReplyXattr(reply).respond(core.listxattr(&ctx, ino, size))
                });
            }
            Op::Removexattr { name } => {
                let ctx = ctx(&req, "removexattr");
                tracing::debug!(op = "removexattr", ino, ?name, pid = req.pid);
                guarded("removexattr", || {
                    core.removexattr(ctx, ino, name, ReplyEmpty(reply))
                });
            }
            Op::Access { mask } => {
                let ctx = ctx(&req, "access");
                guarded("access", || {
                    ReplyEmpty(reply).respond(core.access(&ctx, ino, mask as i32))
                });
            }
            Op::Fallocate(f) => guarded("fallocate", || {
                if let Some(held) = core.held(f.fh) {
                    let ctx = ctx(&req, "fallocate");
                    return core.after_held(held, &ctx, ReplyEmpty(reply), move |c| {
                        c.fallocate(f.fh, f.offset, f.length, f.mode as i32)
                    });
                }
                let r = core.fallocate(f.fh, f.offset, f.length, f.mode as i32);
                failed("fallocate", &r);
                ReplyEmpty(reply).respond(r)
            }),
            Op::Lseek(l) if l.fh == 0 => {
                let ctx = ctx(&req, "lseek");
                guarded("lseek", || {
                    ReplyLseek(reply).respond(
                        core.read_node(&ctx, ino)
                            .and_then(|fd| core.seek(&fd, l.offset as i64, l.whence as i32)),
                    )
                })
            }
            Op::Lseek(l) => guarded("lseek", || {
                ReplyLseek(reply).respond(core.lseek(l.fh, l.offset as i64, l.whence as i32))
            }),
            Op::CopyFileRange(c) => guarded("copy_file_range", || {
                if let Some(held) = core.held(c.fh_out) {
                    let ctx = ctx(&req, "copy_file_range");
                    return core.after_held(held, &ctx, ReplyWrite(reply), move |k| {
                        k.copy_file_range(c.fh_in, c.off_in, c.fh_out, c.off_out, c.len)
                    });
                }
                let r = core.copy_file_range(c.fh_in, c.off_in, c.fh_out, c.off_out, c.len);
                failed("copy_file_range", &r);
                ReplyWrite(reply).respond(r)
            }),
            // The caller of a request got a signal: a call waiting for a
            // decision is answered EINTR (others finish on their own).
            Op::Interrupt { unique } => guarded("interrupt", || core.interrupt(unique)),
            Op::Init(..) | Op::Destroy => reply.error(libc::EIO),
            Op::Unsupported(opcode) => {
                tracing::debug!(opcode, "unsupported FUSE opcode; answered ENOSYS");
                reply.error(libc::ENOSYS)
            }
        }
    }
}

//! Replies: each fuser reply type encodes one kind of core result
//! ([`Respond`]), with the open flags that save the kernel round trips.

use std::os::fd::BorrowedFd;

use fuser::{
    BackingId, FileHandle, FopenFlags, Generation, ReplyAttr, ReplyCreate, ReplyData, ReplyEmpty,
    ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
};

use crate::error::FsResult;
use crate::fs::core::{Created, Entry, FileOpen, Opening, Respond, Statfs, XattrReply};

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
pub struct DirHandle(pub u64);

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

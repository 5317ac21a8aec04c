//! Replies: each reply kind encodes one kind of core result ([`Respond`]),
//! with the open flags that save the kernel round trips.

use std::os::fd::BorrowedFd;

use crate::error::FsResult;
use crate::fs::core::{Created, Entry, FileOpen, Opening, Respond, Statfs, XattrReply};
use crate::fuse::abi::{StatfsOut, fopen};
use crate::fuse::{BackingId, Reply};

/// Flags for a file opened with its data through the daemon: the page
/// cache survives close and reopen (writes all pass through the kernel, and
/// `FUSE_AUTO_INVAL_DATA` drops pages when a host-side change shows in the
/// attributes).
const DAEMON_OPEN: u32 = fopen::KEEP_CACHE | fopen::NOFLUSH;
/// Directories: the kernel keeps what readdir returned (dropped when the
/// directory changes through the mount, or its mtime changes on the host,
/// seen once the attribute TTL has passed), so a warm walk costs an OPENDIR
/// and a RELEASEDIR per directory, no READDIR.
const DIR_OPEN: u32 = fopen::CACHE_DIR | fopen::KEEP_CACHE;
/// Flags besides `FOPEN_PASSTHROUGH` (which allows no caching flags).
const PASSTHROUGH_OPEN: u32 = fopen::NOFLUSH;
/// A file whose writes must reach the daemon as they are made, past the
/// writeback cache (`Core::open_backing`).
const DIRECT_OPEN: u32 = fopen::DIRECT_IO | fopen::NOFLUSH;

/// A file made by a create whose approval is pending: every write reaches
/// the daemon, which holds it until the decision (`core::held`).
const HELD_OPEN: u32 = fopen::DIRECT_IO | fopen::NOFLUSH;

/// The open flags for a file opened through the daemon.
fn daemon_open(o: &FileOpen) -> u32 {
    match (o.held, o.direct) {
        (true, _) => HELD_OPEN,
        (false, true) => DIRECT_OPEN,
        (false, false) => DAEMON_OPEN,
    }
}

/// One newtype per reply kind: the same result type can be answered two
/// ways (an `Entry` as LOOKUP's entry or GETATTR's attributes).
macro_rules! reply_kinds {
    ($($name:ident),*) => {$(
        pub struct $name(pub Reply);
    )*};
}
reply_kinds!(
    ReplyEntry,
    ReplyAttr,
    ReplyEmpty,
    ReplyData,
    ReplyWrite,
    ReplyLseek,
    ReplyOpen,
    ReplyDir,
    ReplyXattr,
    ReplyStatfs,
    ReplyCreate
);

macro_rules! respond {
    ($reply:ty, $t:ty, |$r:ident, $v:ident| $ok:expr) => {
        impl Respond<$t> for $reply {
            fn respond(self, res: FsResult<$t>) {
                let $r = self.0;
                match res {
                    Ok($v) => $ok,
                    Err(e) => $r.error(e.errno()),
                }
            }
        }
    };
}

/// A directory handle, as opendir answers it.
pub struct DirHandle(pub u64);

respond!(ReplyEntry, Entry, |r, e| r.entry(e.ttl, e.node, &e.attr));
respond!(ReplyAttr, Entry, |r, e| r.attr(e.ttl, &e.attr));
respond!(ReplyEmpty, (), |r, _v| r.ok());
respond!(ReplyData, Vec<u8>, |r, d| r.data(&d));
respond!(ReplyWrite, u32, |r, n| r.written(n));
respond!(ReplyLseek, i64, |r, off| r.offset(off));
respond!(ReplyDir, DirHandle, |r, h| r.opened(h.0, DIR_OPEN, None));
respond!(ReplyXattr, XattrReply, |r, x| match x {
    XattrReply::Size(n) => r.xattr_size(n),
    XattrReply::Data(d) => r.data(&d),
});
respond!(ReplyStatfs, Statfs, |r, s| r.statfs(&StatfsOut {
    blocks: s.blocks,
    bfree: s.bfree,
    bavail: s.bavail,
    files: s.files,
    ffree: s.ffree,
    bsize: s.bsize,
    namelen: s.namelen,
    frsize: s.frsize,
    padding: 0,
    spare: [0; 6],
}));
respond!(ReplyOpen, FileOpen, |r, o| match o.backing {
    Some(id) => r.opened(o.fh, PASSTHROUGH_OPEN, Some(&id)),
    None => r.opened(o.fh, daemon_open(&o), None),
});
respond!(ReplyCreate, Created, |r, c| {
    let e = &c.entry;
    match c.open.backing {
        Some(id) => r.created(
            e.ttl,
            e.node,
            &e.attr,
            c.open.fh,
            PASSTHROUGH_OPEN,
            Some(&id),
        ),
        None => r.created(
            e.ttl,
            e.node,
            &e.attr,
            c.open.fh,
            daemon_open(&c.open),
            None,
        ),
    }
});

impl Opening<FileOpen> for ReplyOpen {
    fn register(&self, fd: BorrowedFd<'_>) -> std::io::Result<BackingId> {
        self.0.register(fd)
    }
}

impl Opening<Created> for ReplyCreate {
    fn register(&self, fd: BorrowedFd<'_>) -> std::io::Result<BackingId> {
        self.0.register(fd)
    }
}

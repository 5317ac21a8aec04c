//! Attributes and open files: getattr, setattr, readlink, open, and the
//! handle operations (read, write, fsync, fallocate, lseek,
//! copy_file_range, release). Writes through a handle opened for writing
//! were approved at the open; only the size limit still applies to them.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use crate::fuse::{FileAttr, TimeOrNow};

use super::gate::{Gate, Hold, Keep, Pass};
use super::{Core, Ctx, Entry, FileOpen, Handle, Opening, Respond};
use crate::backing::{self, AsCaller, Caller, FileType};
use crate::error::{FsError, FsResult};
use crate::fs::attr::{root_attr, timespec, to_attr};
use crate::fs::inodes::Node;
use crate::policy::Op;

/// The attributes a `setattr` asks to change.
#[derive(Debug, Clone, Default)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeOrNow>,
    pub mtime: Option<TimeOrNow>,
    pub fh: Option<u64>,
    /// The caller lacks CAP_FSETID: clear setuid/setgid along with the
    /// change (`FATTR_KILL_SUIDGID`, with `HANDLE_KILLPRIV_V2`).
    pub kill_suidgid: bool,
}

impl SetAttr {
    /// Nothing to set: with `FUSE_HANDLE_KILLPRIV` this is the kernel
    /// asking the daemon to clear setuid/setgid (a write or a chown(-1,-1)
    /// by a caller without CAP_FSETID); see [`Core::setattr`].
    pub fn kills_privileges(&self) -> bool {
        self.mode.is_none()
            && self.uid.is_none()
            && self.gid.is_none()
            && self.size.is_none()
            && self.atime.is_none()
            && self.mtime.is_none()
    }

    /// Only the modification time: what the kernel sends when it writes
    /// back the times of a file it gathered writes for (writeback cache).
    fn only_mtime(&self) -> bool {
        self.mtime.is_some()
            && self.atime.is_none()
            && self.mode.is_none()
            && self.uid.is_none()
            && self.gid.is_none()
            && self.size.is_none()
    }

    fn changes_metadata(&self) -> bool {
        self.mode.is_some()
            || self.uid.is_some()
            || self.gid.is_some()
            || self.atime.is_some()
            || self.mtime.is_some()
    }
}

/// `mode` without the bits a write or chown by an unprivileged caller
/// clears: setuid, and setgid when group-executable (else it marks
/// mandatory locking and stays), as the kernel's `should_remove_suid`.
fn without_privileges(mode: u32) -> u32 {
    let mut m = mode & !libc::S_ISUID;
    if m & libc::S_IXGRP != 0 {
        m &= !libc::S_ISGID;
    }
    m
}

/// Whether `mode` on a regular file owned by `uid`:`gid` makes it run as
/// root: setuid with root the owner, or setgid and group-executable with
/// root the group.
fn runs_as_root(mode: u32, uid: u32, gid: u32) -> bool {
    mode & libc::S_ISUID != 0 && uid == 0
        || mode & libc::S_ISGID != 0 && mode & libc::S_IXGRP != 0 && gid == 0
}

/// The name of a file's access ACL, which sets its group-class bits.
pub(super) const ACL_ACCESS: &str = "system.posix_acl_access";

/// The group-class bits (`rwx` as 0..=7) an access ACL gives a file: its
/// mask entry's, else its owning group's entry's. `value` is the xattr as
/// `setxattr(2)` takes it (a version 2 header, then 8-byte entries of
/// tag, permissions and id, little-endian); None when it is not one.
fn acl_group_bits(value: &[u8]) -> Option<u32> {
    const VERSION: u32 = 2;
    const GROUP_OBJ: u16 = 0x04;
    const MASK: u16 = 0x10;
    let (head, entries) = value.split_first_chunk::<4>()?;
    if u32::from_le_bytes(*head) != VERSION || entries.len() % 8 != 0 {
        return None;
    }
    let (mut group, mut mask) = (None, None);
    for e in entries.chunks_exact(8) {
        let tag = u16::from_le_bytes([e[0], e[1]]);
        let perm = u32::from(u16::from_le_bytes([e[2], e[3]])) & 0o7;
        match tag {
            GROUP_OBJ => group = Some(perm),
            MASK => mask = Some(perm),
            _ => {}
        }
    }
    mask.or(group)
}

/// Whether setting the access ACL `value` on a regular file of `mode`,
/// owned by `uid`:`gid`, would make it run as root: an ACL sets the group
/// bits, so a setgid-root file chmod'ed without group execute becomes
/// executable through one.
pub(super) fn acl_runs_as_root(value: &[u8], mode: u32, uid: u32, gid: u32) -> bool {
    acl_group_bits(value).is_some_and(|g| runs_as_root((mode & !0o070) | (g << 3), uid, gid))
}

/// Whether `caller` may give a file a mode that runs it as root: only one
/// that could make itself root (CAP_SETUID and CAP_SETGID). A file made in
/// a zone is a file of the host, whose mounts are not `nosuid`: a worker
/// that is uid 0 without capabilities (`run --isolate` as root) made a
/// setuid-root program that any user of the host then ran as root.
pub(super) fn may_make_root_runnable(caller: &Caller) -> bool {
    backing::caller_has(
        caller,
        rustix::thread::CapabilitySet::SETUID | rustix::thread::CapabilitySet::SETGID,
    )
}

/// `mode` for a regular file `caller` creates, less the bits that would
/// run it as root when the caller may not give them (the file will be the
/// caller's uid and gid, or a setgid dir's group: checked as the caller's).
pub(super) fn creatable_mode(caller: &Caller, mode: u32) -> u32 {
    if runs_as_root(mode, caller.uid, caller.gid) && !may_make_root_runnable(caller) {
        mode & !(libc::S_ISUID | libc::S_ISGID)
    } else {
        mode
    }
}

impl Core {
    pub(super) fn attr_of(&self, node: &Node) -> FsResult<FileAttr> {
        self.attr_with(node, None)
    }

    /// A node's attributes, through the open handle `fh` when given (an
    /// unlinked file is reachable only so).
    fn attr_with(&self, node: &Node, fh: Option<u64>) -> FsResult<FileAttr> {
        if node.is_root() {
            let (uid, gid) = (self.opts.owner_uid, self.opts.owner_gid);
            return Ok(root_attr(self.started, self.zones.len(), uid, gid));
        }
        let fd = self.handle_or_node_fd(fh, node)?;
        let st = backing::stat(fd.as_fd())?;
        Ok(match node.zone {
            Some(zone) if node.is_dir => {
                self.dir_attr(node.shown_ino(), zone, || node.zone_path(), fd.as_fd(), &st)
            }
            _ => to_attr(node.shown_ino(), &st),
        })
    }

    /// The fd of file handle `fh` if it is one, else the node's own.
    fn handle_or_node_fd(&self, fh: Option<u64>, node: &Node) -> FsResult<Arc<OwnedFd>> {
        if let Some(h) = fh.and_then(|fh| self.handles.get(fh).ok()) {
            if let Handle::File { fd, .. } = &*h {
                return Ok(fd.clone());
            }
        }
        self.reach.fd_of(node)
    }

    /// A node's attributes.
    ///
    /// A directory deleted and replaced on the host is ESTALE here (see
    /// `Reach::in_dir`), so a `stat` or `cd` through a cached path looks
    /// again and finds what took its place.
    pub fn getattr(&self, ctx: &Ctx, ino: u64, fh: Option<u64>) -> FsResult<Entry> {
        self.admit(ctx)?;
        let node = self.node(ino)?;
        let attr = self.attr_with(&node, fh)?;
        if node.is_dir && attr.nlink == 0 && self.reach.replaced(&node) {
            return Err(self.reach.gone(&node));
        }
        Ok(self.entry(&node, attr))
    }

    pub fn readlink(&self, ctx: &Ctx, ino: u64) -> FsResult<Vec<u8>> {
        self.admit(ctx)?;
        use std::os::unix::ffi::OsStrExt;
        let node = self.node(ino)?;
        if !node.is_symlink {
            return Err(FsError::Os(libc::EINVAL));
        }
        let target = backing::readlink(self.reach.fd_of(&node)?.as_fd())?;
        Ok(target.as_bytes().to_vec())
    }

    // ---- setattr -----------------------------------------------------------

    /// chmod, chown, utimens, truncate; or, with nothing to set, clearing
    /// setuid/setgid for the kernel.
    pub fn setattr(self: &Arc<Self>, ctx: Ctx, ino: u64, a: SetAttr, respond: impl Respond<Entry>) {
        // Through a file whose create's approval is pending: once allowed.
        if let Some(held) = a.fh.and_then(|fh| self.held(fh)) {
            let core = Arc::clone(self);
            return self.when_held(held, &ctx, move |r| match r {
                Ok(()) => core.setattr(ctx, ino, a, respond),
                Err(e) => respond.respond(Err(e)),
            });
        }
        if let Some(r) = self.times_echoed(ino, &a) {
            return respond.respond(r);
        }
        let plan = || {
            self.setting(&ctx, ino, &a).map(|(gate, node)| {
                let act = move |core: &Core| core.setattr_as(&ctx.caller(), &node, &a);
                (gate, act)
            })
        };
        let hold = self.metadata_hold(ino, &ctx);
        self.request_with(ctx, hold, plan, respond);
    }

    fn setting(&self, ctx: &Ctx, ino: u64, a: &SetAttr) -> FsResult<(Gate, Arc<Node>)> {
        let node = self.node(ino)?;
        if a.fh.is_none() {
            self.own_name_first(&node)?;
        }
        let w = self.where_node(&node);
        let at = self.loc(&w);
        let mut gate = Gate::go();
        if let Some(size) = a.size {
            // A truncate through a handle opened (and approved) for writing
            // is not asked again; the size limit still applies.
            let op = match self.handles.writable_fd(a.fh) {
                Some((_, zone)) => Op::Grow {
                    zone: &self.zones[zone],
                    new_size: size,
                },
                None => Op::WriteContent {
                    at,
                    new_size: Some(size),
                },
            };
            let keep = match op {
                Op::Grow { .. } => Keep::Nothing,
                _ => Keep::Ledger,
            };
            gate = gate.and(self.gate(ctx, &op, keep)?);
        }
        let kills = a.kills_privileges() && self.privileges_to_kill(&node)?.is_some();
        if (a.changes_metadata() && !self.times_of_writes(a)) || kills {
            let op = Op::Metadata {
                at,
                is_dir: node.is_dir,
            };
            gate = gate.and(self.gate(ctx, &op, Keep::Ledger)?);
        }
        if let Pass::Ask(asks) = &mut gate.pass {
            asks.dedup();
        }
        Ok((gate, node))
    }

    /// The mode to set when `node` is a regular file with setuid (or
    /// setgid and group exec) to clear; None when there is nothing to do.
    fn privileges_to_kill(&self, node: &Node) -> FsResult<Option<u32>> {
        if node.is_dir || node.is_symlink || node.is_root() {
            return Ok(None);
        }
        Self::privileges_of(self.reach.fd_of(node)?.as_fd())
    }

    /// The mode to set when the file `fd` is regular with setuid (or
    /// setgid and group exec) to clear; None when there is nothing to do.
    fn privileges_of(fd: BorrowedFd<'_>) -> FsResult<Option<u32>> {
        Ok(Self::privileges_in(&backing::stat(fd)?))
    }

    /// [`privileges_of`](Self::privileges_of) a file whose stat is `st`.
    fn privileges_in(st: &backing::Stat) -> Option<u32> {
        let mode = st.st_mode & 0o7777;
        let kept = without_privileges(mode);
        let regular = FileType::from_raw_mode(st.st_mode) == FileType::RegularFile;
        (regular && kept != mode).then_some(kept)
    }

    /// The answer to a SETATTR that changes nothing: with the writeback
    /// cache the kernel keeps a regular file's times itself and sends them
    /// back after every unlink, link and rename of it (a change of ctime,
    /// which the backing file system makes on its own), with the mtime the
    /// file already has; or for a file that has no name any more. Neither
    /// is a change a worker asks for, so it is answered (with the file's
    /// attributes, or ENOENT when it is gone) without a policy question: a
    /// `mv` in a zone that asks must not ask twice. None: a real change,
    /// for the usual path.
    fn times_echoed(&self, ino: u64, a: &SetAttr) -> Option<FsResult<Entry>> {
        let Some(TimeOrNow::SpecificTime(mtime)) = a.mtime else {
            return None;
        };
        if !self.writeback() || !a.only_mtime() {
            return None;
        }
        let node = self.node(ino).ok()?;
        let fd = match self.handle_or_node_fd(a.fh, &node) {
            Ok(fd) => fd,
            Err(e) if matches!(e.errno(), libc::ENOENT | libc::ESTALE) => {
                return Some(Err(FsError::Os(libc::ENOENT)));
            }
            Err(_) => return None,
        };
        let st = backing::stat(fd.as_fd()).ok()?;
        let d = mtime.duration_since(std::time::UNIX_EPOCH).ok()?;
        let same = st.st_mtime as i128 == i128::from(d.as_secs())
            && st.st_mtime_nsec as i128 == i128::from(d.subsec_nanos());
        (same || st.st_nlink == 0).then(|| Ok(self.entry(&node, to_attr(node.shown_ino(), &st))))
    }

    /// Whether `a` is the modification time of writes made through a
    /// handle open for writing, which the kernel sends when it keeps
    /// writes in its page cache (writeback cache): part of those writes,
    /// approved at the open, not a metadata change of its own.
    fn times_of_writes(&self, a: &SetAttr) -> bool {
        self.writeback() && a.only_mtime() && self.handles.writable_fd(a.fh).is_some()
    }

    fn setattr_as(&self, caller: &Caller, node: &Node, a: &SetAttr) -> FsResult<Entry> {
        let procfds = &self.reach.procfds;
        if a.kills_privileges() {
            // The kernel decided (the caller lacks CAP_FSETID) and the
            // caller need not own the file: the daemon clears the bits with
            // its own rights. Clearing them grants nothing.
            if let Some(mode) = self.privileges_to_kill(node)? {
                procfds.chmod(self.reach.fd_of(node)?.as_fd(), mode)?;
            }
            return Ok(self.entry(node, self.attr_with(node, a.fh)?));
        }
        let as_caller = AsCaller::enter(caller)?;
        // Through an open handle when the kernel names one (the file may
        // be unlinked: only the handle still reaches it).
        let held = self.handle_or_node_fd(a.fh, node)?;
        let fd = held.as_fd();
        if let Some(size) = a.size {
            match self.handles.writable_fd(a.fh) {
                Some((h, _)) => backing::truncate(h.fd()?, size)?,
                None => {
                    let w = self.reach.reopen(fd, libc::O_WRONLY)?;
                    backing::truncate(w.as_fd(), size)?
                }
            }
        }
        if let Some(mode) = a.mode.filter(|m| m & (libc::S_ISUID | libc::S_ISGID) != 0) {
            let st = backing::stat(fd)?;
            let (uid, gid) = (a.uid.unwrap_or(st.st_uid), a.gid.unwrap_or(st.st_gid));
            if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile
                && runs_as_root(mode, uid, gid)
                && !may_make_root_runnable(caller)
            {
                return Err(FsError::Os(libc::EPERM));
            }
        }
        if a.uid.is_some() || a.gid.is_some() {
            backing::chown(fd, a.uid, a.gid)?;
        }
        if let Some(mode) = a.mode {
            procfds.chmod(fd, mode & 0o7777)?;
        }
        if a.atime.is_some() || a.mtime.is_some() {
            let times = backing::Timestamps {
                last_access: timespec(a.atime),
                last_modification: timespec(a.mtime),
            };
            if node.is_symlink {
                let parent = node.parent().ok_or(FsError::Os(libc::EPERM))?;
                let dir = self.reach.fd_of(&parent)?;
                backing::utimens_nofollow(dir.as_fd(), &node.name(), &times)?;
            } else {
                match procfds.utimens(fd, &times) {
                    // The kernel's time for writes by a caller who may
                    // write the file but not set its times (not its
                    // owner): the time of the write-back instead.
                    Err(rustix::io::Errno::PERM) if self.times_of_writes(a) => {
                        let now = backing::Timestamps {
                            last_access: timespec(None),
                            last_modification: timespec(Some(TimeOrNow::Now)),
                        };
                        procfds.utimens(fd, &now)?
                    }
                    r => r?,
                }
            }
        }
        // With the daemon's own rights, as for `kills_privileges`.
        drop(as_caller);
        if a.kill_suidgid {
            let st = backing::stat(fd)?;
            match Self::privileges_in(&st) {
                Some(mode) => procfds.chmod(fd, mode)?,
                // Nothing changed since: this stat is the answer (what
                // `attr_with` would stat again through the same fd).
                None if !node.is_dir => {
                    return Ok(self.entry(node, to_attr(node.shown_ino(), &st)));
                }
                None => {}
            }
        }
        Ok(self.entry(node, self.attr_with(node, a.fh)?))
    }

    // ---- open files ----------------------------------------------------------

    /// Open node `ino` with `flags`: for writing (or truncating) it is a
    /// write of the file's content; for reading, a read of its size.
    pub fn open(self: &Arc<Self>, ctx: Ctx, ino: u64, flags: i32, reply: impl Opening<FileOpen>) {
        let plan = || {
            self.opening(&ctx, ino, flags).map(|(gate, node)| {
                let act = move |core: &Core| {
                    let (fh, direct) = core.open_as(&ctx.caller(), &node, flags)?;
                    Ok((node, fh, direct))
                };
                (gate, act)
            })
        };
        let core = Arc::clone(self);
        let reads = flags & libc::O_ACCMODE == libc::O_RDONLY && flags & libc::O_TRUNC == 0;
        let respond = move |r: FsResult<(Arc<Node>, u64, bool)>| {
            // A mount whose opens the kernel makes (`kernel_opens`): the
            // caller could open the file (checked as always, just now);
            // ENOSYS tells the kernel to send no OPEN or RELEASE again
            // on this mount and to open files itself from now on. A
            // write never gets here (the mount is read-only).
            if reads && core.kernel_opens().is_ok() {
                if let Ok((_, fh, _)) = &r {
                    core.release(*fh);
                    return reply.respond(Err(FsError::Os(libc::ENOSYS)));
                }
            }
            // With the daemon's own credentials again (see passthrough_id).
            // A file kept open across its staged zone's commit,
            // checkpoint, rewind or discard: the kernel takes only the old
            // overlay's backing file for it, which a commit may have made
            // the host's file and a checkpoint frozen. Reading it reads
            // what the open file reads; writing it is refused until every
            // such file is closed.
            let stale = r
                .as_ref()
                .ok()
                .and_then(|(node, ..)| core.passthrough_stale(node));
            if let (Some(_), Ok((_, fh, _))) = (&stale, &r) {
                if !reads {
                    core.release(*fh);
                    return reply.respond(Err(FsError::Os(libc::EBUSY)));
                }
            }
            let r = r.map(|(node, fh, direct)| FileOpen {
                fh,
                backing: stale.or_else(|| core.passthrough_id(&node, fh, |fd| reply.register(fd))),
                direct,
                held: false,
            });
            reply.respond(r)
        };
        // An open that truncates holds the file's lock in the kernel
        // under the writeback cache (and only there: `ATOMIC_O_TRUNC`).
        let hold = match flags & libc::O_TRUNC != 0 && self.writeback() {
            true => Hold::Locked,
            false => Hold::Decision,
        };
        self.request_with(ctx, hold, plan, respond);
    }

    fn opening(&self, ctx: &Ctx, ino: u64, flags: i32) -> FsResult<(Gate, Arc<Node>)> {
        let node = self.node(ino)?;
        let w = self.where_node(&node);
        let at = self.loc(&w);
        let writes = flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0;
        // The size is for the zone's size limit alone: without one, no
        // stat (and no reopen of an fd the cache let go).
        let limited = node
            .zone
            .is_some_and(|z| self.zones[z].max_file_bytes.is_some());
        let size = || -> FsResult<u64> {
            Ok(match node.is_root() || !limited {
                true => 0,
                false => backing::stat(self.reach.fd_of(&node)?.as_fd())?.st_size as u64,
            })
        };
        self.own_name_first(&node)?;
        let op = if writes {
            // Not truncated, the file keeps its size: one already past the
            // zone's limit can't be opened to write into (or read) at all.
            let new_size = match flags & libc::O_TRUNC != 0 {
                true => Some(0),
                false => Some(size()?),
            };
            Op::WriteContent { at, new_size }
        } else {
            Op::Read { at, size: size()? }
        };
        let gate = self.gate(ctx, &op, Keep::Ledger)?;
        // O_RDWR reads too: where reading asks, it asks as well (a way
        // around a read approval otherwise).
        if flags & libc::O_ACCMODE == libc::O_RDWR {
            let read = self.gate(ctx, &Op::Read { at, size: size()? }, Keep::Ledger)?;
            return Ok((gate.and(read), node));
        }
        Ok((gate, node))
    }

    /// The uid to count `caller`'s open files under: a user other than
    /// the mount's owner and root.
    pub(super) fn counted(&self, caller: &Caller) -> Option<u32> {
        (caller.uid != 0 && caller.uid != self.opts.owner_uid).then_some(caller.uid)
    }

    /// EMFILE when `caller`, a user other than the mount's owner and
    /// root, holds [`super::open_quota`] files open through the mount, or
    /// all such users together hold twice that.
    pub(super) fn within_open_quota(&self, caller: &Caller) -> FsResult<()> {
        let Some(uid) = self.counted(caller) else {
            return Ok(());
        };
        let (open, all) = self.handles.open_by_and_all(uid);
        if open < 64 && all < 128 {
            return Ok(());
        }
        // The daemon's limit as it is now (`prlimit` may change it).
        let quota = super::open_quota(backing::nofile_limit());
        if open >= quota || all >= quota.saturating_mul(2) {
            tracing::info!(
                uid,
                open,
                all,
                "open refused: the open files of the user, or of all users other than the owner and root, are at their quota"
            );
            return Err(FsError::Os(libc::EMFILE));
        }
        Ok(())
    }

    /// Open `node` for the caller; the handle, and whether its writes go
    /// to the daemon as they are made (see [`Core::open_backing`]).
    pub(super) fn open_as(
        &self,
        caller: &Caller,
        node: &Node,
        flags: i32,
    ) -> FsResult<(u64, bool)> {
        self.within_open_quota(caller)?;
        let as_caller = AsCaller::enter(caller)?;
        let zone = node.zone.ok_or(FsError::Os(libc::EISDIR))?;
        // A plain read-only open with the daemon's own rights (a caller of
        // its uid, or root) shares one fd per file: what a fresh open
        // would give (same file, same rights), less an open and a close.
        let shares = shares_reader(flags) && !as_caller.switched();
        let shared = match shares {
            true => self.reach.shared_reader(node)?,
            false => None,
        };
        let (fd, direct) = match shared {
            Some(fd) => (fd, false),
            None => {
                let held = self.reach.fd_of(node)?;
                let (fd, direct) =
                    self.open_backing(zone, flags, |f| self.reach.reopen(held.as_fd(), f))?;
                let fd = Arc::new(fd);
                if shares {
                    self.reach.keep_reader(node, fd.clone());
                }
                (fd, direct)
            }
        };
        let fh = self.handles.add(Handle::File {
            fd,
            zone,
            writable: flags & libc::O_ACCMODE != libc::O_RDONLY,
            held: None,
            node: node.ino,
            counted: self.counted(caller),
        });
        Ok((fh, direct))
    }

    /// Node `ino` opened for reading as the caller, as its open would
    /// have been: what a READ or LSEEK reads from on a mount whose opens
    /// the kernel makes itself (`kernel_opens`), where they carry no
    /// handle (fh 0). Refused (EBADF) on any other mount.
    pub fn read_node(&self, ctx: &Ctx, ino: u64) -> FsResult<OwnedFd> {
        if self.kernel_opens().is_err() {
            return Err(FsError::Os(libc::EBADF));
        }
        self.admit(ctx)?;
        let node = self.node(ino)?;
        if node.zone.is_none() || node.is_dir {
            return Err(FsError::Os(libc::EISDIR));
        }
        if node.is_symlink {
            return Err(FsError::Os(libc::EINVAL));
        }
        let _as = AsCaller::enter(&ctx.caller())?;
        let held = self.reach.fd_of(&node)?;
        Ok(self.reach.reopen(held.as_fd(), libc::O_RDONLY)?)
    }

    /// The open file `fh` a READ reads from (the reply reads it: see
    /// [`crate::fuse::Reply::file_data`]).
    pub fn read_handle(&self, fh: u64) -> FsResult<Arc<Handle>> {
        self.handles.file(fh).map(|(h, _)| h)
    }

    /// The size limit of zone `zone` for a file growing to `end` bytes.
    fn may_grow(&self, zone: usize, end: u64) -> FsResult<()> {
        Self::question(&Op::Grow {
            zone: &self.zones[zone],
            new_size: end,
        })
    }

    /// Write `data` at `offset` through handle `fh`. `kill_privileges`:
    /// the writer lacks CAP_FSETID and the file's setuid/setgid must go
    /// (`FUSE_WRITE_KILL_SUIDGID`, with `HANDLE_KILLPRIV_V2`); the daemon
    /// clears them with its own rights, as the host would for the writer.
    pub fn write(&self, fh: u64, offset: u64, data: &[u8], kill_privileges: bool) -> FsResult<u32> {
        let (h, zone) = self.handles.file(fh)?;
        self.may_grow(zone, offset.saturating_add(data.len() as u64))?;
        let fd = h.fd()?;
        let n = backing::pwrite(fd, data, offset)?;
        if kill_privileges {
            if let Some(mode) = Self::privileges_of(fd)? {
                self.reach.procfds.chmod(fd, mode)?;
            }
        }
        Ok(n as u32)
    }

    pub fn release(&self, fh: u64) {
        if let Ok(h) = self.handles.get(fh) {
            self.let_go(&h);
        }
        self.handles.remove(fh);
    }

    pub fn fsync(&self, fh: u64, datasync: bool) -> FsResult<()> {
        let (h, _) = self.handles.file(fh)?;
        Ok(backing::fsync(h.fd()?, datasync)?)
    }

    pub fn fallocate(&self, fh: u64, offset: u64, len: u64, mode: i32) -> FsResult<()> {
        let (h, zone) = self.handles.file(fh)?;
        let fd = h.fd()?;
        // What the call could make the file hold: `KEEP_SIZE` leaves the
        // size as it was but still allocates up to `offset + len`, which the
        // limit counts as growth too. A punched hole or a collapsed range
        // only gives blocks back; an inserted range shifts what is there.
        let end = if mode & (libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_COLLAPSE_RANGE) != 0 {
            None
        } else if mode & libc::FALLOC_FL_INSERT_RANGE != 0 {
            Some((backing::stat(fd)?.st_size.max(0) as u64).saturating_add(len))
        } else {
            Some(offset.saturating_add(len))
        };
        if let Some(end) = end {
            self.may_grow(zone, end)?;
        }
        Ok(backing::fallocate(fd, mode, offset, len)?)
    }

    pub fn lseek(&self, fh: u64, offset: i64, whence: i32) -> FsResult<i64> {
        let (h, _) = self.handles.file(fh)?;
        Ok(backing::seek(h.fd()?, offset, whence)? as i64)
    }

    /// [`Core::lseek`] on a file [`Core::read_node`] opened.
    pub fn seek(&self, fd: &OwnedFd, offset: i64, whence: i32) -> FsResult<i64> {
        Ok(backing::seek(fd.as_fd(), offset, whence)? as i64)
    }

    pub fn copy_file_range(
        &self,
        fh_in: u64,
        off_in: u64,
        fh_out: u64,
        off_out: u64,
        len: u64,
    ) -> FsResult<u32> {
        let (hin, zin) = self.handles.file(fh_in)?;
        let (hout, zout) = self.handles.file(fh_out)?;
        if zin != zout {
            // Each zone's data goes through its own checks: let the kernel
            // fall back to read + write.
            return Err(FsError::Os(libc::EXDEV));
        }
        self.may_grow(zout, off_out.saturating_add(len))?;
        let len = len.min(u32::MAX as u64 / 2);
        let n = backing::copy_file_range(hin.fd()?, off_in, hout.fd()?, off_out, len)?;
        Ok(n as u32)
    }
}

/// Whether an open with `flags` may share the file's one reading fd: read
/// only, and nothing that changes what the daemon's reads through the fd
/// do (`O_DIRECT`, `O_NOATIME`, `O_SYNC`...) or the file (`O_TRUNC`).
fn shares_reader(flags: i32) -> bool {
    // O_LARGEFILE as the kernel sets it on every open (libc's is 0 here).
    let harmless = libc::O_ACCMODE
        | libc::O_CLOEXEC
        | rustix::fs::OFlags::LARGEFILE.bits() as i32
        | libc::O_NONBLOCK
        | libc::O_NOCTTY
        | libc::O_NOFOLLOW;
    flags & libc::O_ACCMODE == libc::O_RDONLY && flags & !harmless == 0
}

#[cfg(test)]
mod tests {
    use super::{acl_group_bits, acl_runs_as_root};

    /// An ACL as `setxattr(2)` takes it, from (tag, perm) entries.
    fn acl(entries: &[(u16, u16)]) -> Vec<u8> {
        let mut v = 2u32.to_le_bytes().to_vec();
        for (tag, perm) in entries {
            v.extend(tag.to_le_bytes());
            v.extend(perm.to_le_bytes());
            v.extend(u32::MAX.to_le_bytes());
        }
        v
    }

    #[test]
    fn an_acl_gives_the_group_bits_of_its_mask_else_of_its_group_entry() {
        let plain = acl(&[(0x01, 7), (0x04, 5), (0x20, 5)]);
        assert_eq!(acl_group_bits(&plain), Some(5));
        let masked = acl(&[(0x01, 7), (0x02, 7), (0x04, 4), (0x10, 1), (0x20, 0)]);
        assert_eq!(acl_group_bits(&masked), Some(1));
        assert_eq!(acl_group_bits(b"\x02\0\0"), None);
        assert_eq!(acl_group_bits(&plain[..9]), None);
        let mut v1 = plain.clone();
        v1[0] = 1;
        assert_eq!(acl_group_bits(&v1), None);
    }

    #[test]
    fn an_acl_that_makes_a_setgid_root_file_group_executable_runs_it_as_root() {
        let gx = acl(&[(0x01, 7), (0x04, 5), (0x20, 5)]);
        let g_no_x = acl(&[(0x01, 7), (0x04, 4), (0x20, 5)]);
        assert!(acl_runs_as_root(&gx, 0o102745, 0, 0));
        assert!(acl_runs_as_root(&gx, 0o102745, 1000, 0));
        assert!(!acl_runs_as_root(&g_no_x, 0o102755, 0, 0));
        assert!(!acl_runs_as_root(&gx, 0o102745, 0, 1000));
        assert!(!acl_runs_as_root(&gx, 0o100745, 0, 0));
        // Setuid root stays what it was: an ACL never sets that bit.
        assert!(acl_runs_as_root(&g_no_x, 0o104755, 0, 1000));
    }
}

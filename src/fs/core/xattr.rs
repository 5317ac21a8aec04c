//! Extended attributes (get, list, set, remove) and `access(2)`. Setting or
//! removing one is a metadata change: gated like chmod.

use std::ffi::OsStr;
use std::os::fd::AsFd;
use std::sync::Arc;

use rustix::fs::FileType;

use super::files::{ACL_ACCESS, acl_runs_as_root, may_make_root_runnable};
use super::gate::{Gate, Keep};
use super::{Core, Ctx, Respond, XattrReply};
use crate::backing::{self, AsCaller};
use crate::error::{FsError, FsResult, Refusal};
use crate::fs::inodes::Node;
use crate::policy::Op;

/// The answer to a size query (`size == 0`) or the data.
fn sized(size: u32, n: usize, buf: Vec<u8>) -> XattrReply {
    match size {
        0 => XattrReply::Size(n as u32),
        _ => XattrReply::Data(buf),
    }
}

/// A `listxattr` list (names, each ending in NUL) without the `trusted.*`
/// names.
fn without_trusted(list: &[u8]) -> Vec<u8> {
    list.split_inclusive(|b| *b == 0)
        .filter(|name| !name.starts_with(b"trusted."))
        .flatten()
        .copied()
        .collect()
}

/// The most Linux keeps in one xattr value or one list of names
/// (`XATTR_SIZE_MAX`, `XATTR_LIST_MAX`): a kernel never asks for more, and
/// a malformed request's `size` reserves no more than this.
const XATTR_MAX: usize = 65536;

fn reserve(size: u32) -> usize {
    (size as usize).min(XATTR_MAX)
}

impl Core {
    /// The node whose xattrs `ino` means: none for the root and symlinks,
    /// which carry none of their own here.
    fn xattr_target(&self, ino: u64) -> FsResult<Option<Arc<Node>>> {
        let node = self.node(ino)?;
        Ok(Self::has_xattrs(&node).then_some(node))
    }

    pub fn getxattr(&self, ctx: &Ctx, ino: u64, name: &OsStr, size: u32) -> FsResult<XattrReply> {
        self.admit(ctx)?;
        let Some(node) = self.xattr_target(ino)? else {
            return Err(FsError::Os(libc::ENODATA));
        };
        let mut buf = Vec::with_capacity(reserve(size));
        let fd = self.reach.fd_of(&node)?;
        let n = self.reach.procfds.getxattr(fd.as_fd(), name, &mut buf)?;
        Ok(sized(size, n, buf))
    }

    pub fn listxattr(&self, ctx: &Ctx, ino: u64, size: u32) -> FsResult<XattrReply> {
        self.admit(ctx)?;
        let Some(node) = self.xattr_target(ino)? else {
            return Ok(sized(size, 0, Vec::new()));
        };
        let fd = self.reach.fd_of(&node)?;
        if crate::backing::caller_has_sys_admin(&ctx.caller()) {
            let mut buf = Vec::with_capacity(reserve(size));
            let n = self.reach.procfds.listxattr(fd.as_fd(), &mut buf)?;
            return Ok(sized(size, n, buf));
        }
        // The daemon (root) sees `trusted.*` names; a caller without
        // CAP_SYS_ADMIN must not, as on the host, so the whole list is read
        // and those names dropped, for a size query too. A list that grows
        // between the two calls is ERANGE, which callers retry.
        let n = self.reach.procfds.listxattr(fd.as_fd(), &mut Vec::new())?;
        let mut buf = Vec::with_capacity(n);
        if n > 0 {
            self.reach.procfds.listxattr(fd.as_fd(), &mut buf)?;
        }
        let shown = without_trusted(&buf);
        if size != 0 && shown.len() > size as usize {
            return Err(FsError::Os(libc::ERANGE));
        }
        Ok(sized(size, shown.len(), shown))
    }

    /// Gate a metadata change of node `ino`.
    fn metadata(&self, ctx: &Ctx, ino: u64) -> FsResult<(Gate, Arc<Node>)> {
        let node = self.node(ino)?;
        self.own_name_first(&node)?;
        let w = self.where_node(&node);
        Ok((
            self.gate(
                ctx,
                &Op::Metadata {
                    at: self.loc(&w),
                    is_dir: node.is_dir,
                },
                Keep::Ledger,
            )?,
            node,
        ))
    }

    /// Whether `node` carries xattrs of its own (not the root, nor a symlink).
    fn has_xattrs(node: &Node) -> bool {
        !node.is_root() && !node.is_symlink
    }

    pub fn setxattr(
        self: &Arc<Self>,
        ctx: Ctx,
        ino: u64,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        respond: impl Respond<()>,
    ) {
        let (name, value) = (name.to_owned(), value.to_vec());
        // The kernel takes a setxattr's EAGAIN for "ask the security
        // module" and says EOPNOTSUPP: a request left waiting for its
        // retry (see `Hold::Locked`) says EBUSY instead.
        let respond = move |r: FsResult<()>| {
            respond.respond(r.map_err(|e| match e {
                FsError::Refused(Refusal::Awaiting(_)) => FsError::Os(libc::EBUSY),
                e => e,
            }))
        };
        let plan = || {
            self.metadata(&ctx, ino).map(|(gate, node)| {
                let act = move |core: &Core| {
                    let _as = AsCaller::enter(&ctx.caller())?;
                    if !Self::has_xattrs(&node) {
                        return Err(FsError::Os(libc::EPERM));
                    }
                    let fd = core.reach.fd_of(&node)?;
                    if name == ACL_ACCESS && !may_make_root_runnable(&ctx.caller()) {
                        let st = backing::stat(fd.as_fd())?;
                        if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile
                            && acl_runs_as_root(&value, st.st_mode, st.st_uid, st.st_gid)
                        {
                            return Err(FsError::Os(libc::EPERM));
                        }
                    }
                    Ok(core
                        .reach
                        .procfds
                        .setxattr(fd.as_fd(), &name, &value, flags)?)
                };
                (gate, act)
            })
        };
        let hold = self.metadata_hold(ino, &ctx);
        self.request_with(ctx, hold, plan, respond);
    }

    pub fn removexattr(
        self: &Arc<Self>,
        ctx: Ctx,
        ino: u64,
        name: &OsStr,
        respond: impl Respond<()>,
    ) {
        let name = name.to_owned();
        let plan = || {
            self.metadata(&ctx, ino).map(|(gate, node)| {
                let act = move |core: &Core| {
                    let _as = AsCaller::enter(&ctx.caller())?;
                    if !Self::has_xattrs(&node) {
                        return Err(FsError::Os(libc::ENODATA));
                    }
                    let fd = core.reach.fd_of(&node)?;
                    Ok(core.reach.procfds.removexattr(fd.as_fd(), &name)?)
                };
                (gate, act)
            })
        };
        let hold = self.metadata_hold(ino, &ctx);
        self.request_with(ctx, hold, plan, respond);
    }

    /// `access(2)`: only the zone rules matter here; mode bits are the
    /// kernel's (default_permissions).
    pub fn access(&self, ctx: &Ctx, ino: u64, mask: i32) -> FsResult<()> {
        self.admit(ctx)?;
        if mask & libc::W_OK == 0 {
            return Ok(());
        }
        let node = self.node(ino)?;
        let w = self.where_node(&node);
        Self::question(&Op::MayWrite {
            at: self.loc(&w),
            is_dir: node.is_dir,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::without_trusted;

    #[test]
    fn trusted_names_are_dropped_from_a_list() {
        assert_eq!(
            without_trusted(b"user.a\0trusted.overlay.opaque\0security.selinux\0trusted.x\0"),
            b"user.a\0security.selinux\0"
        );
        assert_eq!(without_trusted(b""), b"");
        assert_eq!(without_trusted(b"trusted.a\0"), b"");
        // Only the prefix counts.
        assert_eq!(without_trusted(b"user.trusted.a\0"), b"user.trusted.a\0");
    }
}

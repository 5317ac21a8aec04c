//! Decoding a request: its header and its operation with the arguments.
//!
//! The kernel sends an opcode's fixed-size header first and the variable
//! part (names, write data) after it. Over `/dev/fuse` the two are one
//! buffer; over io_uring the header comes in the ring entry's header area
//! and the rest in its payload buffer. [`Args`] reads both the same way.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use zerocopy::FromBytes;

use super::abi::{self, InHeader, op};

/// A request's arguments: the opcode's header, then the variable part.
#[derive(Debug, Clone, Copy)]
pub struct Args<'a> {
    /// The opcode's header (io_uring); empty when `rest` holds it too.
    head: &'a [u8],
    rest: &'a [u8],
    joined: bool,
}

/// The request was shorter than its opcode needs, or a name lacked its NUL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

impl<'a> Args<'a> {
    /// Everything after the in-header, in one buffer (`/dev/fuse`).
    pub fn joined(body: &'a [u8]) -> Self {
        Args {
            head: &[],
            rest: body,
            joined: true,
        }
    }

    /// The opcode's header and the payload apart (io_uring).
    pub fn split(head: &'a [u8], payload: &'a [u8]) -> Self {
        Args {
            head,
            rest: payload,
            joined: false,
        }
    }

    /// The opcode's fixed-size header.
    fn fixed<T: FromBytes>(&mut self) -> Result<T, Malformed> {
        let src = if self.joined {
            &mut self.rest
        } else {
            &mut self.head
        };
        let (v, tail) = T::read_from_prefix(src).map_err(|_| Malformed)?;
        *src = tail;
        Ok(v)
    }

    /// A NUL-terminated name from the variable part.
    fn name(&mut self) -> Result<&'a OsStr, Malformed> {
        let end = self.rest.iter().position(|&b| b == 0).ok_or(Malformed)?;
        let s = &self.rest[..end];
        self.rest = &self.rest[end + 1..];
        Ok(OsStr::from_bytes(s))
    }

    /// `n` bytes of the variable part.
    fn bytes(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        if self.rest.len() < n {
            return Err(Malformed);
        }
        let (b, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(b)
    }
}

/// A decoded operation. Node ids (`ino`, `parent`) are the header's.
#[derive(Debug)]
pub enum Op<'a> {
    Init(abi::InitInCompat, u32),
    Destroy,
    Lookup {
        name: &'a OsStr,
    },
    Forget {
        nlookup: u64,
    },
    BatchForget(Vec<abi::ForgetOne>),
    Getattr {
        fh: Option<u64>,
    },
    Setattr(abi::SetattrIn),
    Readlink,
    Mknod {
        name: &'a OsStr,
        mode: u32,
        rdev: u32,
    },
    Mkdir {
        name: &'a OsStr,
        mode: u32,
    },
    Unlink {
        name: &'a OsStr,
    },
    Rmdir {
        name: &'a OsStr,
    },
    Symlink {
        name: &'a OsStr,
        target: &'a OsStr,
    },
    Rename {
        name: &'a OsStr,
        newdir: u64,
        newname: &'a OsStr,
        flags: u32,
    },
    Link {
        oldnodeid: u64,
        newname: &'a OsStr,
    },
    Open {
        flags: u32,
    },
    Read(abi::ReadIn),
    Write {
        arg: abi::WriteIn,
        data: &'a [u8],
    },
    Statfs,
    Release {
        fh: u64,
    },
    Fsync {
        fh: u64,
        datasync: bool,
    },
    Setxattr {
        name: &'a OsStr,
        value: &'a [u8],
        flags: u32,
    },
    Getxattr {
        name: &'a OsStr,
        size: u32,
    },
    Listxattr {
        size: u32,
    },
    Removexattr {
        name: &'a OsStr,
    },
    Flush {
        fh: u64,
    },
    Opendir,
    Readdir(abi::ReadIn),
    Readdirplus(abi::ReadIn),
    Releasedir {
        fh: u64,
    },
    Fsyncdir {
        datasync: bool,
    },
    Access {
        mask: u32,
    },
    Create {
        name: &'a OsStr,
        mode: u32,
        flags: u32,
    },
    /// The kernel gave up waiting for request `unique` (its caller got a
    /// signal).
    Interrupt {
        unique: u64,
    },
    Fallocate(abi::FallocateIn),
    Lseek(abi::LseekIn),
    CopyFileRange(abi::CopyFileRangeIn),
    /// An opcode this daemon does not implement (answered ENOSYS).
    Unsupported(u32),
}

/// A request: who asks, about which node, for what.
#[derive(Debug)]
pub struct Request<'a> {
    pub unique: u64,
    pub opcode: u32,
    pub nodeid: u64,
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
    pub op: Op<'a>,
    /// Whether the answer may wait (for a decision): false when the
    /// transport could not serve this CPU's other requests meanwhile (an
    /// io_uring queue grown to its largest with few entries free).
    pub may_wait: bool,
}

impl<'a> Request<'a> {
    /// Hold the size a READ, READDIR or READDIRPLUS asks for to `max`:
    /// its answer is a buffer of that size, and a malformed request could
    /// ask for 4 GiB. A kernel asks for no more than it agreed to at INIT.
    pub(crate) fn cap_data(&mut self, max: u32) {
        if let Op::Read(r) | Op::Readdir(r) | Op::Readdirplus(r) = &mut self.op {
            r.size = r.size.min(max);
        }
    }

    /// Decode the operation of `h` from its arguments.
    pub fn parse(h: &InHeader, mut a: Args<'a>) -> Result<Self, Malformed> {
        let op = match h.opcode {
            op::INIT => {
                let compat: abi::InitInCompat = a.fixed()?;
                // flags2 follows in 7.36 and later (with FUSE_INIT_EXT).
                let flags2 = a.fixed::<u32>().unwrap_or(0);
                Op::Init(compat, flags2)
            }
            op::DESTROY => Op::Destroy,
            op::LOOKUP => Op::Lookup { name: a.name()? },
            op::FORGET => Op::Forget {
                nlookup: a.fixed::<abi::ForgetIn>()?.nlookup,
            },
            op::BATCH_FORGET => {
                // The entries are all there before any room is made for
                // them: a count of four billion must not reserve 64 GiB
                // (an allocation failure aborts the daemon).
                let n = a.fixed::<abi::BatchForgetIn>()?.count as usize;
                let one = std::mem::size_of::<abi::ForgetOne>();
                let all = a.bytes(n.checked_mul(one).ok_or(Malformed)?)?;
                let v = all
                    .chunks_exact(one)
                    .map(|b| abi::ForgetOne::read_from_bytes(b).map_err(|_| Malformed))
                    .collect::<Result<Vec<_>, _>>()?;
                Op::BatchForget(v)
            }
            op::GETATTR => {
                let g: abi::GetattrIn = a.fixed()?;
                Op::Getattr {
                    fh: (g.getattr_flags & abi::GETATTR_FH != 0).then_some(g.fh),
                }
            }
            op::SETATTR => Op::Setattr(a.fixed()?),
            op::READLINK => Op::Readlink,
            op::MKNOD => {
                let m: abi::MknodIn = a.fixed()?;
                Op::Mknod {
                    name: a.name()?,
                    mode: m.mode,
                    rdev: m.rdev,
                }
            }
            op::MKDIR => {
                let m: abi::MkdirIn = a.fixed()?;
                Op::Mkdir {
                    name: a.name()?,
                    mode: m.mode,
                }
            }
            op::UNLINK => Op::Unlink { name: a.name()? },
            op::RMDIR => Op::Rmdir { name: a.name()? },
            op::SYMLINK => Op::Symlink {
                name: a.name()?,
                target: a.name()?,
            },
            op::RENAME => {
                let r: abi::RenameIn = a.fixed()?;
                Op::Rename {
                    name: a.name()?,
                    newdir: r.newdir,
                    newname: a.name()?,
                    flags: 0,
                }
            }
            op::RENAME2 => {
                let r: abi::Rename2In = a.fixed()?;
                Op::Rename {
                    name: a.name()?,
                    newdir: r.newdir,
                    newname: a.name()?,
                    flags: r.flags,
                }
            }
            op::LINK => {
                let l: abi::LinkIn = a.fixed()?;
                Op::Link {
                    oldnodeid: l.oldnodeid,
                    newname: a.name()?,
                }
            }
            op::OPEN => Op::Open {
                flags: a.fixed::<abi::OpenIn>()?.flags,
            },
            op::READ => Op::Read(a.fixed()?),
            op::WRITE => {
                let arg: abi::WriteIn = a.fixed()?;
                Op::Write {
                    arg,
                    data: a.bytes(arg.size as usize)?,
                }
            }
            op::STATFS => Op::Statfs,
            op::RELEASE => Op::Release {
                fh: a.fixed::<abi::ReleaseIn>()?.fh,
            },
            op::FSYNC => {
                let f: abi::FsyncIn = a.fixed()?;
                Op::Fsync {
                    fh: f.fh,
                    datasync: f.fsync_flags & abi::FSYNC_FDATASYNC != 0,
                }
            }
            op::SETXATTR => {
                let s: abi::SetxattrIn = a.fixed()?;
                Op::Setxattr {
                    name: a.name()?,
                    value: a.bytes(s.size as usize)?,
                    flags: s.flags,
                }
            }
            op::GETXATTR => {
                let g: abi::GetxattrIn = a.fixed()?;
                Op::Getxattr {
                    name: a.name()?,
                    size: g.size,
                }
            }
            op::LISTXATTR => Op::Listxattr {
                size: a.fixed::<abi::GetxattrIn>()?.size,
            },
            op::REMOVEXATTR => Op::Removexattr { name: a.name()? },
            op::FLUSH => Op::Flush {
                fh: a.fixed::<abi::FlushIn>()?.fh,
            },
            op::OPENDIR => Op::Opendir,
            op::READDIR => Op::Readdir(a.fixed()?),
            op::READDIRPLUS => Op::Readdirplus(a.fixed()?),
            op::RELEASEDIR => Op::Releasedir {
                fh: a.fixed::<abi::ReleaseIn>()?.fh,
            },
            op::FSYNCDIR => Op::Fsyncdir {
                datasync: a.fixed::<abi::FsyncIn>()?.fsync_flags & abi::FSYNC_FDATASYNC != 0,
            },
            op::ACCESS => Op::Access {
                mask: a.fixed::<abi::AccessIn>()?.mask,
            },
            op::CREATE => {
                let c: abi::CreateIn = a.fixed()?;
                Op::Create {
                    name: a.name()?,
                    mode: c.mode,
                    flags: c.flags,
                }
            }
            op::INTERRUPT => Op::Interrupt {
                unique: a.fixed::<abi::InterruptIn>()?.unique,
            },
            op::FALLOCATE => Op::Fallocate(a.fixed()?),
            op::LSEEK => Op::Lseek(a.fixed()?),
            op::COPY_FILE_RANGE => Op::CopyFileRange(a.fixed()?),
            other => Op::Unsupported(other),
        };
        Ok(Request {
            unique: h.unique,
            opcode: h.opcode,
            nodeid: h.nodeid,
            uid: h.uid,
            gid: h.gid,
            pid: h.pid,
            op,
            may_wait: true,
        })
    }
}

/// Operations the kernel expects no reply to.
pub fn has_reply(opcode: u32) -> bool {
    !matches!(opcode, op::FORGET | op::BATCH_FORGET | op::INTERRUPT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::IntoBytes;

    fn header(opcode: u32) -> InHeader {
        InHeader {
            len: 0,
            opcode,
            unique: 9,
            nodeid: 5,
            uid: 1,
            gid: 2,
            pid: 3,
            total_extlen: 0,
            padding: 0,
        }
    }

    #[test]
    fn names_and_headers_decode_the_same_joined_or_split() {
        let r = abi::Rename2In {
            newdir: 7,
            flags: 1,
            padding: 0,
        };
        let names = b"old\0new\0";
        let mut joined = r.as_bytes().to_vec();
        joined.extend_from_slice(names);
        for args in [Args::joined(&joined), Args::split(r.as_bytes(), names)] {
            let req = Request::parse(&header(op::RENAME2), args).unwrap();
            match req.op {
                Op::Rename {
                    name,
                    newdir,
                    newname,
                    flags,
                } => {
                    assert_eq!(
                        (name, newdir, newname, flags),
                        (OsStr::new("old"), 7, OsStr::new("new"), 1)
                    );
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn a_short_or_unterminated_request_is_malformed() {
        assert!(Request::parse(&header(op::LOOKUP), Args::joined(b"abc")).is_err());
        assert!(Request::parse(&header(op::READ), Args::joined(&[0; 12])).is_err());
        let w = abi::WriteIn {
            fh: 1,
            offset: 0,
            size: 10,
            write_flags: 0,
            lock_owner: 0,
            flags: 0,
            padding: 0,
        };
        let mut b = w.as_bytes().to_vec();
        b.extend_from_slice(b"short");
        assert!(Request::parse(&header(op::WRITE), Args::joined(&b)).is_err());
        b.extend_from_slice(b"enough");
        match Request::parse(&header(op::WRITE), Args::joined(&b))
            .unwrap()
            .op
        {
            Op::Write { data, .. } => assert_eq!(data, b"shortenoug"),
            other => panic!("{other:?}"),
        }
    }
}

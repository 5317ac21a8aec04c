//! What the filesystem core hands the session layer: attributes, file
//! types, times, and how each is put on the wire.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::abi;

/// A node id as the kernel knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct INodeNo(pub u64);

/// The kinds of node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileType {
    NamedPipe,
    CharDevice,
    BlockDevice,
    Directory,
    RegularFile,
    Symlink,
    Socket,
}

impl FileType {
    /// The `S_IFMT` bits.
    pub fn mode_bits(self) -> u32 {
        match self {
            FileType::NamedPipe => libc::S_IFIFO,
            FileType::CharDevice => libc::S_IFCHR,
            FileType::BlockDevice => libc::S_IFBLK,
            FileType::Directory => libc::S_IFDIR,
            FileType::RegularFile => libc::S_IFREG,
            FileType::Symlink => libc::S_IFLNK,
            FileType::Socket => libc::S_IFSOCK,
        }
    }

    /// The `DT_*` value a directory entry carries.
    pub fn dirent_type(self) -> u32 {
        self.mode_bits() >> 12
    }
}

/// A node's attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileAttr {
    pub ino: INodeNo,
    pub size: u64,
    pub blocks: u64,
    pub atime: SystemTime,
    pub mtime: SystemTime,
    pub ctime: SystemTime,
    pub crtime: SystemTime,
    pub kind: FileType,
    pub perm: u16,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub blksize: u32,
    pub flags: u32,
}

/// Seconds and nanoseconds since the epoch (negative before it).
fn split(t: SystemTime) -> (u64, u32) {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs(), d.subsec_nanos()),
        Err(e) => {
            let d = e.duration();
            let (mut s, mut n) = (-(d.as_secs() as i64), d.subsec_nanos());
            if n > 0 {
                s -= 1;
                n = 1_000_000_000 - n;
            }
            (s as u64, n)
        }
    }
}

impl FileAttr {
    pub fn to_abi(&self) -> abi::Attr {
        let (atime, atimensec) = split(self.atime);
        let (mtime, mtimensec) = split(self.mtime);
        let (ctime, ctimensec) = split(self.ctime);
        abi::Attr {
            ino: self.ino.0,
            size: self.size,
            blocks: self.blocks,
            atime,
            mtime,
            ctime,
            atimensec,
            mtimensec,
            ctimensec,
            mode: self.kind.mode_bits() | u32::from(self.perm),
            nlink: self.nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: self.rdev,
            blksize: self.blksize,
            flags: self.flags,
        }
    }
}

/// A time to set: given, or the moment the daemon sets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeOrNow {
    SpecificTime(SystemTime),
    Now,
}

impl TimeOrNow {
    pub(crate) fn from_abi(secs: u64, nsecs: u32) -> Self {
        let secs = secs as i64;
        let t = if secs >= 0 {
            UNIX_EPOCH + Duration::new(secs as u64, nsecs)
        } else {
            UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs())
                + Duration::from_nanos(nsecs.into())
        };
        TimeOrNow::SpecificTime(t)
    }
}

/// A cache lifetime as the kernel takes it.
pub(crate) fn valid(d: Duration) -> (u64, u32) {
    (d.as_secs(), d.subsec_nanos())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_before_the_epoch_round_trip() {
        let t = UNIX_EPOCH - Duration::new(5, 250_000_000);
        let (s, n) = split(t);
        assert_eq!((s as i64, n), (-6, 750_000_000));
        assert_eq!(TimeOrNow::from_abi(s, n), TimeOrNow::SpecificTime(t));
        let t = UNIX_EPOCH + Duration::new(7, 3);
        let (s, n) = split(t);
        assert_eq!(TimeOrNow::from_abi(s, n), TimeOrNow::SpecificTime(t));
    }
}

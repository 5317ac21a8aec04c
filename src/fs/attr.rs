//! Attributes: a backing `stat` as the FUSE attributes the kernel caches,
//! the synthetic mount root's, a negative entry's, and FUSE times as the
//! timestamps `utimensat` takes.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::fuse::{FileAttr, FileType as FuseType, INodeNo, TimeOrNow};

use crate::backing::{FileType, Stat};
use crate::fs::inodes::ROOT;

pub fn fuse_kind(k: FileType) -> FuseType {
    match k {
        FileType::Directory => FuseType::Directory,
        FileType::Symlink => FuseType::Symlink,
        FileType::Fifo => FuseType::NamedPipe,
        FileType::Socket => FuseType::Socket,
        FileType::CharacterDevice => FuseType::CharDevice,
        FileType::BlockDevice => FuseType::BlockDevice,
        _ => FuseType::RegularFile,
    }
}

fn time(secs: i64, nsecs: u64) -> SystemTime {
    if secs >= 0 {
        UNIX_EPOCH + Duration::new(secs as u64, nsecs as u32)
    } else {
        UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs()) + Duration::from_nanos(nsecs)
    }
}

/// The attributes of node `ino`, from its backing object's `stat`.
pub fn to_attr(ino: u64, st: &Stat) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: st.st_size as u64,
        blocks: st.st_blocks as u64,
        atime: time(st.st_atime, st.st_atime_nsec),
        mtime: time(st.st_mtime, st.st_mtime_nsec),
        ctime: time(st.st_ctime, st.st_ctime_nsec),
        crtime: UNIX_EPOCH,
        kind: fuse_kind(FileType::from_raw_mode(st.st_mode)),
        perm: (st.st_mode & 0o7777) as u16,
        nlink: st.st_nlink as u32,
        uid: st.st_uid,
        gid: st.st_gid,
        rdev: st.st_rdev as u32,
        blksize: st.st_blksize as u32,
        flags: 0,
    }
}

/// A directory with no backing object, made at `at`, owned by `uid:gid`,
/// holding `subdirs` directories.
fn synthetic_dir(ino: u64, at: SystemTime, subdirs: u32, uid: u32, gid: u32) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: 0,
        blocks: 0,
        atime: at,
        mtime: at,
        ctime: at,
        crtime: at,
        kind: FuseType::Directory,
        perm: 0o755,
        nlink: 2 + subdirs,
        uid,
        gid,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

/// The mount root: mounted at `started`, one subdirectory per zone, owned
/// by the mounting user.
pub fn root_attr(started: SystemTime, zones: usize, uid: u32, gid: u32) -> FileAttr {
    synthetic_dir(ROOT, started, zones as u32, uid, gid)
}

/// "No such entry": a reply with node id 0 lets the kernel cache the miss
/// for the TTL (a negative entry).
pub fn no_entry() -> FileAttr {
    FileAttr {
        kind: FuseType::RegularFile,
        perm: 0,
        nlink: 0,
        blksize: 0,
        ..synthetic_dir(0, UNIX_EPOCH, 0, 0, 0)
    }
}

/// A FUSE time as `utimensat` takes it (`None`: leave it as it is).
pub fn timespec(t: Option<TimeOrNow>) -> rustix::fs::Timespec {
    match t {
        None => rustix::fs::Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_OMIT,
        },
        Some(TimeOrNow::Now) => rustix::fs::Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_NOW,
        },
        Some(TimeOrNow::SpecificTime(t)) => {
            let (sec, nsec) = match t.duration_since(UNIX_EPOCH) {
                Ok(d) => (d.as_secs() as i64, d.subsec_nanos() as i64),
                Err(e) => {
                    let d = e.duration();
                    let mut sec = -(d.as_secs() as i64);
                    let mut nsec = -(d.subsec_nanos() as i64);
                    if nsec < 0 {
                        sec -= 1;
                        nsec += 1_000_000_000;
                    }
                    (sec, nsec)
                }
            };
            rustix::fs::Timespec {
                tv_sec: sec,
                tv_nsec: nsec as _,
            }
        }
    }
}

//! Mounting a FUSE filesystem with mount(2) directly, as root: the way
//! the mount is `fuse.zonemount` (with fsname `zonemount`) whether or not
//! `fusermount3` exists. fuser's own direct path mounts plain `fuse`, which
//! `unmount`, `check`, `status` and `list` would not recognise.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use rustix::mount::MountFlags;

use super::Sys;

/// How to mount.
#[derive(Debug, Clone, Copy)]
pub struct FuseMount<'a> {
    /// The source shown in /proc/mounts (`fsname`).
    pub fsname: &'a str,
    /// The filesystem type after `fuse.` (`subtype`).
    pub subtype: &'a str,
    /// The mount's owner: without `allow_other` the kernel lets only
    /// processes of this uid in.
    pub uid: u32,
    pub gid: u32,
    /// Let every user in (the daemon then decides whom to refuse).
    pub allow_other: bool,
}

impl FuseMount<'_> {
    /// The mount data for the FUSE device `fd`.
    fn data(&self, fd: i32) -> String {
        let mut d = format!(
            "fd={fd},rootmode=40000,user_id={},group_id={},default_permissions",
            self.uid, self.gid
        );
        if self.allow_other {
            d.push_str(",allow_other");
        }
        d
    }

    /// Open `/dev/fuse` and mount it at `mountpoint` (nosuid, nodev). The
    /// returned fd is the session's: the FUSE handshake is still to do
    /// (`fuser::Session::from_fd`). Unmounting is the caller's job.
    pub fn mount(&self, mountpoint: &Path) -> Sys<OwnedFd> {
        let dev = rustix::fs::open("/dev/fuse", OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())?;
        let data = CString::new(self.data(dev.as_raw_fd())).map_err(|_| Errno::INVAL)?;
        let target = CString::new(mountpoint.as_os_str().as_bytes()).map_err(|_| Errno::INVAL)?;
        let fstype = format!("fuse.{}", self.subtype);
        rustix::mount::mount(
            self.fsname,
            target.as_c_str(),
            fstype.as_str(),
            MountFlags::NOSUID | MountFlags::NODEV,
            data.as_c_str(),
        )?;
        Ok(dev)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_data_names_the_device_owner_and_who_gets_in() {
        let m = FuseMount {
            fsname: "zonemount",
            subtype: "zonemount",
            uid: 0,
            gid: 0,
            allow_other: false,
        };
        assert_eq!(
            m.data(7),
            "fd=7,rootmode=40000,user_id=0,group_id=0,default_permissions"
        );
        let m = FuseMount {
            allow_other: true,
            uid: 5,
            gid: 6,
            ..m
        };
        assert!(
            m.data(3)
                .ends_with("user_id=5,group_id=6,default_permissions,allow_other")
        );
    }
}

//! Mounting a FUSE filesystem: with mount(2) directly as root, so the
//! mount is `fuse.zonemount` (with fsname `zonemount`) whether or not
//! `fusermount3` exists; or, for an ordinary user, through the setuid
//! `fusermount3`, which mounts and hands back the device over a socket.

use std::ffi::CString;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SocketFlags, SocketType,
};

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
    /// Mount read-only (`MS_RDONLY`, `-o ro`): the kernel refuses every
    /// change with EROFS before the daemon hears of it.
    pub read_only: bool,
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

    /// The options `fusermount3 -o` takes (it adds the owner itself).
    fn fusermount_options(&self) -> String {
        let mut o = format!(
            "fsname={},subtype={},default_permissions,nosuid,nodev",
            self.fsname, self.subtype
        );
        if self.allow_other {
            o.push_str(",allow_other");
        }
        if self.read_only {
            o.push_str(",ro");
        }
        o
    }

    /// Mount at `mountpoint` with the setuid `fusermount3` at `program`;
    /// the FUSE device it opened. Unmounting is the caller's job
    /// (`fusermount3 -u`).
    pub fn mount_with(&self, program: &Path, mountpoint: &Path) -> io::Result<OwnedFd> {
        // fusermount3 finds its end of the socket in `_FUSE_COMMFD`: that
        // end is made inheritable, ours is not.
        let (ours, theirs) = rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::empty(),
            None,
        )?;
        rustix::io::fcntl_setfd(&ours, rustix::io::FdFlags::CLOEXEC)?;
        let out = std::process::Command::new(program)
            .arg("-o")
            .arg(self.fusermount_options())
            .arg("--")
            .arg(mountpoint)
            .env("_FUSE_COMMFD", theirs.as_raw_fd().to_string())
            .stdin(std::process::Stdio::null())
            .output();
        drop(theirs);
        let out = out?;
        if !out.status.success() {
            let msg = String::from_utf8_lossy(&out.stderr).trim().to_string();
            return Err(io::Error::other(if msg.is_empty() {
                format!("fusermount3 failed ({})", out.status)
            } else {
                msg
            }));
        }
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut anc = RecvAncillaryBuffer::new(&mut space);
        let mut byte = [0u8; 1];
        rustix::net::recvmsg(
            &ours,
            &mut [io::IoSliceMut::new(&mut byte)],
            &mut anc,
            RecvFlags::CMSG_CLOEXEC,
        )?;
        anc.drain()
            .find_map(|m| match m {
                RecvAncillaryMessage::ScmRights(mut fds) => fds.next(),
                _ => None,
            })
            .ok_or_else(|| io::Error::other("fusermount3 mounted but sent no FUSE device"))
    }

    /// Open `/dev/fuse` and mount it at `mountpoint` (nosuid, nodev). The
    /// returned fd is the session's: the FUSE handshake is still to do
    /// (`fuse::Session::new`). Unmounting is the caller's job.
    pub fn mount(&self, mountpoint: &Path) -> Sys<OwnedFd> {
        let dev = rustix::fs::open("/dev/fuse", OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())?;
        let data = CString::new(self.data(dev.as_raw_fd())).map_err(|_| Errno::INVAL)?;
        let target = CString::new(mountpoint.as_os_str().as_bytes()).map_err(|_| Errno::INVAL)?;
        let fstype = format!("fuse.{}", self.subtype);
        let mut flags = MountFlags::NOSUID | MountFlags::NODEV;
        if self.read_only {
            flags |= MountFlags::RDONLY;
        }
        rustix::mount::mount(
            self.fsname,
            target.as_c_str(),
            fstype.as_str(),
            flags,
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
            read_only: false,
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
        assert_eq!(
            m.fusermount_options(),
            "fsname=zonemount,subtype=zonemount,default_permissions,nosuid,nodev,allow_other"
        );
        let m = FuseMount {
            read_only: true,
            ..m
        };
        assert!(m.fusermount_options().ends_with(",allow_other,ro"));
    }
}

//! Why a mount can't be made ([`MountError`], each message with its fix
//! and exit status), and everything that can be checked before mounting:
//! the mountpoint, the backing dirs around it, /dev/fuse.

use std::io;
use std::path::{Path, PathBuf};

use super::mountinfo::find_mount;
use super::show;
use crate::config::ZoneTable;

/// Why a mount could not be made. Each message names the cause and the fix.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("mountpoint {0} does not exist: create it first (mkdir -p {0})")]
    NoMountpoint(String),
    #[error("mountpoint {0} is not a directory: choose an empty directory")]
    NotADirectory(String),
    #[error(
        "{0} is already a mount point ({1}): unmount it first (zonemount unmount {0}) or choose another directory"
    )]
    AlreadyMounted(String, String),
    #[error(
        "mountpoint {mountpoint} is inside zone '{zone}' backing dir {backing}: choose a mountpoint outside every backing dir"
    )]
    InsideBacking {
        mountpoint: String,
        zone: String,
        backing: String,
    },
    #[error(
        "zone '{zone}' backing dir {backing} is inside the mountpoint {mountpoint}: move the backing dir or choose another mountpoint"
    )]
    BackingInside {
        mountpoint: String,
        zone: String,
        backing: String,
    },
    #[error("{0}: fix the path in the config, or recreate the directory")]
    Backing(String),
    #[error(
        "/dev/fuse is missing: FUSE is not available here (load the fuse module, or give the container /dev/fuse)"
    )]
    NoFuse,
    #[error("fusermount3 is not installed: install the fuse3 package (apt-get install fuse3)")]
    NoFusermount,
    #[error(
        "--allow-other needs root, or 'user_allow_other' in /etc/fuse.conf: add that line (as root) or mount as root"
    )]
    AllowOtherNotPermitted,
    #[error("mounting {0} failed: {1}")]
    Mount(String, io::Error),
}

impl MountError {
    /// Exit status: 2 for problems with what was asked, 1 for the host.
    pub fn exit_code(&self) -> u8 {
        match self {
            MountError::NoMountpoint(_)
            | MountError::NotADirectory(_)
            | MountError::AlreadyMounted(..)
            | MountError::InsideBacking { .. }
            | MountError::BackingInside { .. }
            | MountError::Backing(_) => 2,
            MountError::NoFuse
            | MountError::NoFusermount
            | MountError::AllowOtherNotPermitted
            | MountError::Mount(..) => 1,
        }
    }
}

/// Whether the FUSE device exists here.
pub fn have_dev_fuse() -> bool {
    Path::new("/dev/fuse").exists()
}

/// Check everything that can be checked before mounting; returns the
/// canonical mountpoint.
pub fn preflight(mountpoint: &Path, table: &ZoneTable) -> Result<PathBuf, MountError> {
    let meta = std::fs::metadata(mountpoint);
    match meta {
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
            return Err(MountError::AlreadyMounted(
                show(mountpoint),
                "a dead FUSE mount: run zonemount unmount on it".into(),
            ));
        }
        Err(_) => return Err(MountError::NoMountpoint(show(mountpoint))),
        Ok(m) if !m.is_dir() => return Err(MountError::NotADirectory(show(mountpoint))),
        Ok(_) => {}
    }
    let mp = mountpoint
        .canonicalize()
        .map_err(|_| MountError::NoMountpoint(show(mountpoint)))?;
    if let Some(m) = find_mount(&mp) {
        return Err(MountError::AlreadyMounted(show(&mp), m.fstype));
    }
    for z in &table.zones {
        let backing = z.backing.canonicalize().map_err(|e| {
            MountError::Backing(format!(
                "zone '{}': backing dir {}: {e}",
                z.name,
                show(&z.backing)
            ))
        })?;
        if mp.starts_with(&backing) {
            return Err(MountError::InsideBacking {
                mountpoint: show(&mp),
                zone: z.name.clone(),
                backing: show(&backing),
            });
        }
        if backing.starts_with(&mp) {
            return Err(MountError::BackingInside {
                mountpoint: show(&mp),
                zone: z.name.clone(),
                backing: show(&backing),
            });
        }
    }
    if !have_dev_fuse() {
        return Err(MountError::NoFuse);
    }
    Ok(mp)
}

//! Why a mount can't be made ([`MountError`], each message with its fix
//! and exit status), and everything that can be checked before mounting:
//! the mountpoint, the backing dirs around it, and what this machine
//! allows (the FUSE device, `fusermount3`, `/etc/fuse.conf`; see
//! [`probe`](super::probe)).

use std::io;
use std::path::{Path, PathBuf};

use super::mountinfo::find_mount;
use super::probe;
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
        "mountpoint {0} is not empty: the mount would hide what it holds until unmounted; choose an empty directory, or add --nonempty to mount over it anyway"
    )]
    NotEmpty(String),
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
    /// The refusal log can't be opened (or is refused: see `logfile`).
    #[error("{0}")]
    RefusalLog(String),
    #[error(
        "/dev/fuse is missing: FUSE is not available here (load the fuse module with modprobe fuse, or start the container with --device /dev/fuse)"
    )]
    NoFuse,
    #[error(
        "/dev/fuse is not readable and writable by uid {0}: make it usable (chmod 0666 /dev/fuse, Debian's default) or mount as root"
    )]
    NoFuseAccess(u32),
    #[error(
        "fusermount3 is not installed, and an ordinary user can only mount through it: install the fuse3 package (apt-get install fuse3) or mount as root"
    )]
    NoFusermount,
    #[error(
        "fusermount3 at {0} is not setuid root, so it can't mount for an ordinary user: reinstall the fuse3 package or mount as root"
    )]
    FusermountNotSetuid(String),
    #[error(
        "--allow-other needs root, or 'user_allow_other' in /etc/fuse.conf: add that line (as root) or mount as root"
    )]
    AllowOtherNotPermitted,
    #[error("{0}: mount on a directory you own instead (e.g. mkdir ~/mnt)")]
    MountpointForbidden(String),
    #[error("mounting {0} failed: {1}")]
    Mount(String, io::Error),
    /// The stage dir can't be used (in use, made for other dirs).
    #[error("{0}")]
    Stage(String),
    /// This machine won't mount a staged zone's overlay.
    #[error("{0}")]
    StageHost(String),
}

impl MountError {
    /// Exit status: 2 for problems with what was asked, 1 for the host.
    pub fn exit_code(&self) -> u8 {
        match self {
            MountError::NoMountpoint(_)
            | MountError::NotADirectory(_)
            | MountError::AlreadyMounted(..)
            | MountError::NotEmpty(_)
            | MountError::InsideBacking { .. }
            | MountError::BackingInside { .. }
            | MountError::Backing(_)
            | MountError::RefusalLog(_)
            | MountError::Stage(_) => 2,
            MountError::NoFuse
            | MountError::NoFuseAccess(_)
            | MountError::NoFusermount
            | MountError::FusermountNotSetuid(_)
            | MountError::AllowOtherNotPermitted
            | MountError::MountpointForbidden(_)
            | MountError::StageHost(_) => HOST_FORBIDS,
            MountError::Mount(..) => 1,
        }
    }
}

/// Exit status when this machine doesn't allow the mount (FUSE device,
/// `fusermount3`, `/etc/fuse.conf`, a mountpoint a user may not use):
/// nothing was started; `zonemount doctor` says what the machine allows.
pub const HOST_FORBIDS: u8 = 5;

/// Whether the FUSE device exists here.
pub fn have_dev_fuse() -> bool {
    probe::fuse_device() != probe::FuseDevice::Missing
}

/// What this machine must allow before a mount is tried: a FUSE device
/// this user can open; without CAP_SYS_ADMIN, a setuid `fusermount3`; and
/// for `--allow-other`, CAP_SYS_ADMIN or `user_allow_other`.
pub fn host_allows(allow_other: bool) -> Result<(), MountError> {
    match probe::fuse_device() {
        probe::FuseDevice::Usable => {}
        probe::FuseDevice::Missing => return Err(MountError::NoFuse),
        probe::FuseDevice::NoAccess => {
            return Err(MountError::NoFuseAccess(
                rustix::process::geteuid().as_raw(),
            ));
        }
    }
    // With CAP_SYS_ADMIN the daemon mounts itself (session::fuse_config);
    // otherwise it goes through the setuid fusermount3.
    if crate::backing::has_sys_admin() {
        return Ok(());
    }
    match probe::fusermount3() {
        None => return Err(MountError::NoFusermount),
        Some(p) if !probe::is_setuid_root(&p) => {
            return Err(MountError::FusermountNotSetuid(show(&p)));
        }
        Some(_) => {}
    }
    if allow_other && !probe::fuse_conf_allows_other() {
        return Err(MountError::AllowOtherNotPermitted);
    }
    Ok(())
}

/// What the host allows ([`host_allows`]) and whether `mountpoint` can
/// take a mount: it exists, is a directory, isn't mounted, and (for an
/// ordinary user) is one fusermount3 accepts. Returns it canonical. Needs
/// no config: checked before anything (such as `./.sandbox`) is made.
pub fn check_mountpoint(mountpoint: &Path, allow_other: bool) -> Result<PathBuf, MountError> {
    host_allows(allow_other)?;
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
    if let Some(why) = probe::user_mountpoint_refusal(&mp) {
        return Err(MountError::MountpointForbidden(why));
    }
    Ok(mp)
}

/// Refuse a mountpoint that holds anything: a mount over it hides its
/// files (untouched, but out of sight of whoever looks there, worker or
/// person) until the unmount, which nobody who reads "mounted on DIR"
/// expects. A directory that can't be listed is let through: the mount
/// itself says what is wrong with it.
pub fn check_empty(mountpoint: &Path) -> Result<(), MountError> {
    match std::fs::read_dir(mountpoint).map(|mut d| d.next()) {
        Ok(Some(_)) => Err(MountError::NotEmpty(show(mountpoint))),
        _ => Ok(()),
    }
}

/// Check everything that can be checked before mounting; returns the
/// canonical mountpoint. Nothing is created or started.
pub fn preflight(
    mountpoint: &Path,
    table: &ZoneTable,
    allow_other: bool,
) -> Result<PathBuf, MountError> {
    let mp = check_mountpoint(mountpoint, allow_other)?;
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
    Ok(mp)
}

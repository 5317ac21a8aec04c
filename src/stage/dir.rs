//! A mount's stage directory: where it is by default, its layout, the
//! lock that keeps a second mount out, and the manifest that lets
//! `commit`/`discard` work on it after the mount is gone.
//!
//! ```text
//! <stage dir>/
//!   lock              flock'ed by the daemon that uses the stage
//!   stage.json        the manifest: each staged zone's backing dir, the
//!                     overlay's xattr namespace, when it was made
//!   <zone>/upper/     the overlay's upper dir: what the workers changed
//!   <zone>/work/      the overlay's work dir
//!   <zone>/layers/<id>/  a checkpoint: the upper dir as it was then,
//!                     frozen (the overlay's lower layers, newest first,
//!                     over the backing dir)
//!   <zone>/trash/     layers a rewind dropped, removed after it
//!   <zone>/tmp/       scratch (a checkpoint's copies, a view's links)
//!   <zone>/...        the zone's fingerprints and commit journal
//! ```
//!
//! The default is `<state dir>/stages/<mountpoint, escaped>-<hash>`
//! (`/var/lib/zonemount` for root, `$XDG_STATE_HOME/zonemount` or
//! `~/.local/state/zonemount` for a user): the same mountpoint finds the
//! same stage again after a crash or an unmount.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::stage::sys::overlay::Xattrs;

/// The manifest's file name.
pub const MANIFEST: &str = "stage.json";
const LOCK: &str = "lock";

/// What a stage dir holds, for anyone who opens it later.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Manifest {
    pub version: u32,
    /// The mountpoint it was made for (informational).
    pub mountpoint: PathBuf,
    /// Seconds since the epoch when the stage dir was made.
    pub created: u64,
    pub zones: BTreeMap<String, ZoneEntry>,
    /// The id the next checkpoint gets (ids count from 1, never reused).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub next_checkpoint: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ZoneEntry {
    pub backing: PathBuf,
    /// `trusted` or `user`: where the overlay keeps its markers.
    pub xattrs: String,
    /// The zone's checkpoints, oldest first: each a frozen layer,
    /// `layers/<id>`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checkpoints: Vec<Checkpoint>,
    /// A change of the layers under way (journaled before it starts; a
    /// stage opened with one finishes it first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<Pending>,
    /// The flattened lower, `flat/<id>`: every layer up to checkpoint
    /// `id` laid into one dir as copies (the live overlay is the
    /// upper dir over the later layers over it; see `layers`). None: no
    /// flat, or none valid (a dir under `flat/` this does not name is a
    /// leftover, removed when the stage is opened).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flat: Option<u64>,
}

/// One checkpoint of a zone.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Checkpoint {
    pub id: u64,
    /// Seconds since the epoch, and the nanoseconds.
    pub time: u64,
    #[serde(default)]
    pub nanos: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// A change of a zone's layers that was under way.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Pending {
    /// Checkpoint `id` was being taken (the upper dir frozen as
    /// `layers/<id>`, open files moved back): undone when found.
    Checkpoint { id: u64 },
    /// A rewind to checkpoint `to`: every later layer and the upper dir
    /// go to the trash.
    Rewind { to: u64 },
    /// Layers merged by moving: each layer after `into` up to `upto`
    /// (none: every layer and the upper dir) moved onto `layers/<into>`,
    /// which then becomes `layers/<upto>` (or the upper dir).
    Merge { into: u64, upto: Option<u64> },
}

pub fn xattrs_name(x: Xattrs) -> &'static str {
    match x {
        Xattrs::Trusted => "trusted",
        Xattrs::User => "user",
    }
}

pub fn xattrs_of(name: &str) -> Option<Xattrs> {
    match name {
        "trusted" => Some(Xattrs::Trusted),
        "user" => Some(Xattrs::User),
        _ => None,
    }
}

/// The default stage dir of a mount at `mountpoint`.
pub fn default_for(mountpoint: &Path) -> PathBuf {
    let text = mountpoint.to_string_lossy();
    let mut name: String = text
        .trim_matches('/')
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    name.truncate(80);
    if name.is_empty() {
        name.push_str("root");
    }
    // FNV-1a: two mountpoints that escape alike still get two stages.
    let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    state_dir()
        .join("stages")
        .join(format!("{name}-{:08x}", hash as u32))
}

/// Root's state directory.
const ROOT_STATE_DIR: &str = "/var/lib/zonemount";

/// The state directory, for what outlives a mount: `/var/lib/zonemount`
/// for root, else `$XDG_STATE_HOME/zonemount` (`~/.local/state/zonemount`).
pub fn state_dir() -> PathBuf {
    if rustix::process::geteuid().is_root() {
        return PathBuf::from(ROOT_STATE_DIR);
    }
    match std::env::var_os("XDG_STATE_HOME") {
        Some(d) if !d.is_empty() => PathBuf::from(d).join("zonemount"),
        _ => match std::env::var_os("HOME") {
            Some(h) if !h.is_empty() => PathBuf::from(h).join(".local/state/zonemount"),
            _ => std::env::temp_dir().join(format!(
                "zonemount-state-{}",
                rustix::process::geteuid().as_raw()
            )),
        },
    }
}

/// A stage dir held by this process: locked until dropped.
#[derive(Debug)]
pub struct Held {
    pub dir: PathBuf,
    pub manifest: Manifest,
    /// Holds the flock.
    _lock: File,
}

/// Why a stage dir can't be used.
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    #[error("stage dir {dir}: {source}")]
    Io { dir: PathBuf, source: io::Error },
    #[error(
        "stage dir {dir} is in use by another mount{who}; unmount it first, or give this mount \
         another --stage-dir"
    )]
    InUse { dir: PathBuf, who: String },
    #[error(
        "stage dir {dir} holds zone '{zone}' staged over {was}, not over {now}; give this mount \
         another --stage-dir (or commit or discard that stage first)"
    )]
    Elsewhere {
        dir: PathBuf,
        zone: String,
        was: PathBuf,
        now: PathBuf,
    },
    #[error(
        "stage dir {dir} was made by a daemon running as {was}, and this one runs as {now} (the \
         overlay keeps its markers in other xattrs): mount it as it was made, or give another \
         --stage-dir"
    )]
    Xattrs {
        dir: PathBuf,
        was: String,
        now: String,
    },
    #[error("stage dir {dir}: {what}")]
    Bad { dir: PathBuf, what: String },
}

fn io_err(dir: &Path) -> impl Fn(io::Error) -> StageError + '_ {
    move |source| StageError::Io {
        dir: dir.to_path_buf(),
        source,
    }
}

/// Make (mode 0700) and lock `dir`, read its manifest or start one.
pub fn hold(dir: &Path, mountpoint: &Path) -> Result<Held, StageError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io_err(dir))?;
    let mut lock = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(dir.join(LOCK))
        .map_err(io_err(dir))?;
    match rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(rustix::io::Errno::WOULDBLOCK) => {
            let mut pid = String::new();
            let _ = lock.read_to_string(&mut pid);
            let pid = pid.trim();
            return Err(StageError::InUse {
                dir: dir.to_path_buf(),
                who: if pid.is_empty() {
                    String::new()
                } else {
                    format!(" (pid {pid})")
                },
            });
        }
        Err(e) => return Err(io_err(dir)(e.into())),
    }
    lock.set_len(0).map_err(io_err(dir))?;
    lock.rewind().map_err(io_err(dir))?;
    writeln!(lock, "{}", std::process::id()).map_err(io_err(dir))?;
    let manifest = match fs::read(dir.join(MANIFEST)) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| StageError::Bad {
            dir: dir.to_path_buf(),
            what: format!("{MANIFEST}: {e}"),
        })?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => Manifest {
            version: 1,
            mountpoint: mountpoint.to_path_buf(),
            created: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            zones: BTreeMap::new(),
            next_checkpoint: 0,
        },
        Err(e) => return Err(io_err(dir)(e)),
    };
    Ok(Held {
        dir: dir.to_path_buf(),
        manifest,
        _lock: lock,
    })
}

/// Read a stage dir's manifest without locking it (for `changes` etc.
/// on a stage no mount holds).
pub fn read_manifest(dir: &Path) -> Result<Manifest, StageError> {
    let bytes = fs::read(dir.join(MANIFEST)).map_err(io_err(dir))?;
    serde_json::from_slice(&bytes).map_err(|e| StageError::Bad {
        dir: dir.to_path_buf(),
        what: format!("{MANIFEST}: {e}"),
    })
}

impl Held {
    /// Check `zone` over `backing` against the manifest (or add it), and
    /// make its upper and work dirs.
    pub fn zone(&mut self, zone: &str, backing: &Path, xattrs: Xattrs) -> Result<(), StageError> {
        match self.manifest.zones.get(zone) {
            Some(e) if e.backing != backing => {
                return Err(StageError::Elsewhere {
                    dir: self.dir.clone(),
                    zone: zone.to_owned(),
                    was: e.backing.clone(),
                    now: backing.to_path_buf(),
                });
            }
            Some(e) if e.xattrs != xattrs_name(xattrs) => {
                let who = |x: &str| match x {
                    "trusted" => "root".to_owned(),
                    _ => "an ordinary user".to_owned(),
                };
                return Err(StageError::Xattrs {
                    dir: self.dir.clone(),
                    was: who(&e.xattrs),
                    now: who(xattrs_name(xattrs)),
                });
            }
            Some(_) => {}
            None => {
                self.manifest.zones.insert(
                    zone.to_owned(),
                    ZoneEntry {
                        backing: backing.to_path_buf(),
                        xattrs: xattrs_name(xattrs).to_owned(),
                        checkpoints: Vec::new(),
                        pending: None,
                        flat: None,
                    },
                );
                self.save()?;
            }
        }
        for sub in ["upper", "work", "layers"] {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(self.dir.join(zone).join(sub))
                .map_err(io_err(&self.dir))?;
        }
        Ok(())
    }

    /// Write the manifest atomically (temp + fsync + rename + the dir
    /// fsynced): after a crash it is the old one or the new one, whole.
    pub fn save(&self) -> Result<(), StageError> {
        let tmp = self.dir.join(format!(".{MANIFEST}.tmp"));
        let text = serde_json::to_vec_pretty(&self.manifest).map_err(|e| StageError::Bad {
            dir: self.dir.clone(),
            what: e.to_string(),
        })?;
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io_err(&self.dir))?;
        f.write_all(&text).map_err(io_err(&self.dir))?;
        f.sync_all().map_err(io_err(&self.dir))?;
        fs::rename(&tmp, self.dir.join(MANIFEST)).map_err(io_err(&self.dir))?;
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(io_err(&self.dir))
    }
}

/// Remove a stage dir no mount holds, whole. The overlay leaves its work
/// dir's inner dirs without permissions (mode 0): they are given owner
/// rights first, so an ordinary user can remove a stage it made.
pub fn remove(dir: &Path) -> io::Result<()> {
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
        return Err(io::Error::other(format!("{}: no stage dir", dir.display())));
    };
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    let p = File::open(parent)?;
    // Any depth (a loop, each directory reached from its parent by name).
    crate::stage::walk::remove_all(std::os::fd::AsFd::as_fd(&p), name, true).map_err(|e| {
        io::Error::new(
            io::Error::from(e).kind(),
            format!("remove {}: {e}", dir.display()),
        )
    })
}

/// A zone's dir inside a stage dir.
pub fn zone_dir(stage: &Path, zone: &str) -> PathBuf {
    stage.join(zone)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn a_second_holder_is_refused_and_the_manifest_is_kept() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("s");
        let mut h = hold(&dir, Path::new("/mnt/x")).unwrap();
        h.zone("w", Path::new("/b/w"), Xattrs::Trusted).unwrap();
        assert!(dir.join("w/upper").is_dir() && dir.join("w/work").is_dir());
        // flock is per open file description: a second open in this
        // process is refused like another process's.
        let e = hold(&dir, Path::new("/mnt/x")).unwrap_err().to_string();
        assert!(
            e.contains("in use by another mount") && e.contains(&std::process::id().to_string()),
            "{e}"
        );
        drop(h);
        let mut h = hold(&dir, Path::new("/mnt/x")).unwrap();
        assert_eq!(h.manifest.zones["w"].backing, Path::new("/b/w"));
        let e = h
            .zone("w", Path::new("/b/other"), Xattrs::Trusted)
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("staged over /b/w, not over /b/other"),
            "{e}"
        );
        let e = h.zone("w", Path::new("/b/w"), Xattrs::User).unwrap_err();
        assert!(
            e.to_string().contains(
                "made by a daemon running as root, and this one runs as an ordinary user"
            ),
            "{e}"
        );
        assert_eq!(read_manifest(&dir).unwrap(), h.manifest);
    }

    #[test]
    fn default_dirs_differ_for_mountpoints_that_escape_alike() {
        let a = default_for(Path::new("/tmp/a-b"));
        let b = default_for(Path::new("/tmp/a/b"));
        assert_ne!(a, b);
        assert!(
            a.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("tmp-a-b-")
        );
        assert_eq!(a, default_for(Path::new("/tmp/a-b")));
    }
}

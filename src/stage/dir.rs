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

use crate::trust::{check_parents, unfit_parent};
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
/// for root, else `$XDG_STATE_HOME/zonemount` (`~/.local/state/zonemount`;
/// without a home, `$TMPDIR/zonemount-state-UID`). Only the path: see
/// [`check_state_dir`] before trusting what is there.
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

/// The state directory, checked: when it exists it must be a directory
/// (not a symlink) of this user's that nobody else may write in, as a
/// stage dir must (see [`unfit`]); one another user made first (the
/// `$TMPDIR` fallback can be made by anyone) is refused, with what to do.
pub fn check_state_dir() -> Result<PathBuf, StageError> {
    let dir = state_dir();
    match rustix::fs::lstat(&dir) {
        Ok(st) => match unfit(&st, me()) {
            Some(why) => Err(StageError::Unfit {
                dir: dir.clone(),
                what: "the state directory",
                why: format!(
                    "{why}: zonemount won't keep or read stages there (another user may have \
                     made it); remove it, or set XDG_STATE_HOME to a directory of your own"
                ),
            }),
            None => Ok(dir),
        },
        Err(rustix::io::Errno::NOENT) => Ok(dir),
        Err(e) => Err(io_err(&dir)(e.into())),
    }
}

fn me() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Why a directory, as `lstat` describes it, can't be (or be in) a stage
/// dir of uid `me`; None when it can. It must be a directory (not a
/// symlink to one), owned by `me`, and writable by nobody else: its
/// manifest names the backing dirs a commit writes to, and its files are
/// what the commit writes there, so anyone else who could write in it
/// could make this user's commit write their files.
pub fn unfit(st: &rustix::fs::Stat, me: u32) -> Option<String> {
    let mode = st.st_mode & 0o7777;
    match st.st_mode & libc::S_IFMT {
        libc::S_IFDIR => {}
        libc::S_IFLNK => return Some("is a symbolic link".to_owned()),
        _ => return Some("is not a directory".to_owned()),
    }
    if st.st_uid != me {
        Some(format!(
            "belongs to uid {}, not to this user (uid {me})",
            st.st_uid
        ))
    } else if mode & 0o022 != 0 {
        Some(format!("has mode {mode:04o}: others may write in it"))
    } else {
        None
    }
}

/// Check `dir`, a stage dir (or a dir of stage dirs), and every directory
/// above it: `dir` itself must be fit (see [`unfit`]), each directory
/// above it must be root's or this user's and writable by nobody else
/// (unless sticky), so that no other user can change what `dir` is or
/// holds. Returns its canonical path, which nobody else can then change:
/// every later use of the stage goes by it. `what` names it in errors.
pub fn check_dir(dir: &Path, what: &'static str) -> Result<PathBuf, StageError> {
    let me = me();
    let refuse = |why: String| StageError::Unfit {
        dir: dir.to_path_buf(),
        what,
        why,
    };
    let st = rustix::fs::lstat(dir).map_err(|e| io_err(dir)(e.into()))?;
    if let Some(why) = unfit(&st, me) {
        let fix = if st.st_mode & libc::S_IFMT == libc::S_IFLNK {
            "give the directory itself, not a link to it".to_owned()
        } else if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
            "give a directory".to_owned()
        } else if st.st_uid != me {
            format!(
                "run it as uid {}, its owner, or give another stage dir",
                st.st_uid
            )
        } else {
            "remove it, or, if everything in it is yours, chmod go-w it".to_owned()
        };
        return Err(refuse(format!(
            "{why}: zonemount won't use a stage dir another user could change; {fix}"
        )));
    }
    let canon = dir.canonicalize().map_err(io_err(dir))?;
    let again = rustix::fs::lstat(&canon).map_err(|e| io_err(dir)(e.into()))?;
    if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino) {
        return Err(refuse("changed while it was checked".to_owned()));
    }
    if let Ok(abs) = std::path::absolute(dir) {
        check_parents(&abs, "stage dir").map_err(refuse)?;
    }
    check_parents(&canon, "stage dir").map_err(refuse)?;
    Ok(canon)
}

/// Make `dir` (mode 0700, with the directories missing above it) once the
/// nearest directory above it that exists passes [`check_parents`](crate::trust::check_parents)
/// (itself included), so that nothing is made where another user could
/// steer it; then [`check_dir`] it.
pub fn make_dir(dir: &Path, what: &'static str) -> Result<PathBuf, StageError> {
    let dir = std::path::absolute(dir).map_err(io_err(dir))?;
    if rustix::fs::lstat(&dir).is_err() {
        let mut rest = Vec::new();
        let mut base = dir.as_path();
        while rustix::fs::lstat(base).is_err() {
            let (Some(up), Some(name)) = (base.parent(), base.file_name()) else {
                break;
            };
            rest.push(name.to_os_string());
            base = up;
        }
        let canon = base.canonicalize().map_err(io_err(&dir))?;
        let me = me();
        let st = rustix::fs::lstat(&canon).map_err(|e| io_err(&dir)(e.into()))?;
        if let Some(why) = unfit_parent(&st, me)
            .map(|why| {
                format!(
                    "would be made in {}, which {why}: another user could move it away; give \
                     a stage dir under directories of root's or yours that nobody else may \
                     write in",
                    canon.display()
                )
            })
            .or_else(|| check_parents(base, "stage dir").err())
            .or_else(|| check_parents(&canon, "stage dir").err())
        {
            return Err(StageError::Unfit {
                dir: dir.clone(),
                what,
                why,
            });
        }
        let made = rest.iter().rev().fold(canon, |p, n| p.join(n));
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&made)
            .map_err(io_err(&dir))?;
    }
    check_dir(&dir, what)
}

/// A fit stage dir (see [`check_dir`]) that others may still read or
/// enter (one the user made with `mkdir`) is made 0700, through an fd
/// opened with `O_NOFOLLOW`: a zone's upper dir can belong to the backing
/// dir's owner, who must not reach it but through the mount.
fn private(dir: &Path) -> Result<(), StageError> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io_err(dir)(e.into()))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| io_err(dir)(e.into()))?;
    if let Some(why) = unfit(&st, me()) {
        return Err(StageError::Unfit {
            dir: dir.to_path_buf(),
            what: "stage dir",
            why: format!("{why} (it changed while it was checked)"),
        });
    }
    if st.st_mode & 0o077 != 0 {
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o700)).map_err(|e| io_err(dir)(e.into()))?;
    }
    Ok(())
}

/// Read `path` whole, following no symlink at its last component.
pub fn read_nofollow(path: &Path) -> io::Result<Vec<u8>> {
    let mut f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// A fresh file at `path` (mode `mode`), for writing: whatever was there
/// is removed first (a symlink or hard link someone left there is not
/// written through), and the file is made with `O_EXCL`.
pub fn create_fresh(path: &Path, mode: u32) -> io::Result<File> {
    match fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
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
    #[error("{what} {dir} {why}")]
    Unfit {
        dir: PathBuf,
        what: &'static str,
        why: String,
    },
}

fn io_err(dir: &Path) -> impl Fn(io::Error) -> StageError + '_ {
    move |source| StageError::Io {
        dir: dir.to_path_buf(),
        source,
    }
}

/// Make (mode 0700) and lock `dir`, read its manifest or start one. It
/// must be this user's, writable by nobody else, and so must the
/// directories above it (see [`check_dir`]); it is held by its canonical
/// path.
pub fn hold(dir: &Path, mountpoint: &Path) -> Result<Held, StageError> {
    let dir = &make_dir(dir, "stage dir")?;
    private(dir)?;
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
    let manifest = match read_nofollow(&dir.join(MANIFEST)) {
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
/// on a stage no mount holds): only from a fit stage dir (see
/// [`check_dir`]).
pub fn read_manifest(dir: &Path) -> Result<Manifest, StageError> {
    let canon = check_dir(dir, "stage dir")?;
    let bytes = read_nofollow(&canon.join(MANIFEST)).map_err(io_err(dir))?;
    serde_json::from_slice(&bytes).map_err(|e| StageError::Bad {
        dir: dir.to_path_buf(),
        what: format!("{MANIFEST}: {e}"),
    })
}

impl Held {
    /// Zone `zone`'s dir in this stage dir, checked when it exists: a
    /// directory of this user's that nobody else may write in (see
    /// [`unfit`]), named by one plain component.
    pub fn zone_dir(&self, zone: &str) -> Result<PathBuf, StageError> {
        let plain = !zone.is_empty() && zone != "." && zone != ".." && !zone.contains('/');
        if !plain {
            return Err(StageError::Bad {
                dir: self.dir.clone(),
                what: format!("{MANIFEST}: '{zone}' is not a zone's name"),
            });
        }
        let zdir = zone_dir(&self.dir, zone);
        match rustix::fs::lstat(&zdir) {
            Ok(st) => match unfit(&st, me()) {
                Some(why) => Err(StageError::Unfit {
                    dir: zdir.clone(),
                    what: "the stage's zone dir",
                    why: format!(
                        "{why}: zonemount won't use a stage another user could change; {}",
                        if st.st_uid == me() {
                            "remove the stage dir, or, if everything in it is yours, chmod go-w \
                             its zone dir"
                                .to_owned()
                        } else {
                            format!(
                                "run it as uid {}, its owner, or remove the stage dir",
                                st.st_uid
                            )
                        }
                    ),
                }),
                None => Ok(zdir),
            },
            Err(rustix::io::Errno::NOENT) => Ok(zdir),
            Err(e) => Err(io_err(&zdir)(e.into())),
        }
    }

    /// Check `zone` over `backing` against the manifest (or add it), and
    /// make its upper and work dirs.
    pub fn zone(&mut self, zone: &str, backing: &Path, xattrs: Xattrs) -> Result<(), StageError> {
        self.zone_dir(zone)?;
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
        self.zone_dir(zone)?;
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
        let mut f = create_fresh(&tmp, 0o600).map_err(io_err(&self.dir))?;
        f.write_all(&text).map_err(io_err(&self.dir))?;
        f.sync_all().map_err(io_err(&self.dir))?;
        fs::rename(&tmp, self.dir.join(MANIFEST)).map_err(io_err(&self.dir))?;
        OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_DIRECTORY)
            .open(&self.dir)
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
    let p = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY)
        .open(parent)?;
    remove_at(std::os::fd::AsFd::as_fd(&p), name, dir)
}

/// Remove `name` in the directory `parent`, whole ([`remove`]), following
/// no symlink: a symlink there is removed itself. `shown` names it in
/// errors.
pub fn remove_at(
    parent: std::os::fd::BorrowedFd<'_>,
    name: &std::ffi::OsStr,
    shown: &Path,
) -> io::Result<()> {
    // Any depth (a loop, each directory reached from its parent by name).
    crate::stage::walk::remove_all(parent, name, true).map_err(|e| {
        io::Error::new(
            io::Error::from(e).kind(),
            format!("remove {}: {e}", shown.display()),
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

    use std::os::unix::fs::PermissionsExt;

    fn chmod(p: &Path, mode: u32) {
        fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn a_stage_dir_others_may_write_in_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("s");
        fs::create_dir(&dir).unwrap();
        chmod(&dir, 0o777);
        let e = hold(&dir, Path::new("/mnt/x")).unwrap_err().to_string();
        assert!(
            e.contains("has mode 0777: others may write in it") && e.contains("chmod go-w"),
            "{e}"
        );
        assert!(!dir.join(LOCK).exists(), "nothing is made in it");
        let e = read_manifest(&dir).unwrap_err().to_string();
        assert!(e.contains("others may write in it"), "{e}");
        // A zone's dir too.
        chmod(&dir, 0o700);
        fs::create_dir(dir.join("w")).unwrap();
        chmod(&dir.join("w"), 0o757);
        let mut h = hold(&dir, Path::new("/mnt/x")).unwrap();
        let e = h
            .zone("w", Path::new("/b/w"), Xattrs::Trusted)
            .unwrap_err()
            .to_string();
        assert!(e.contains("zone dir") && e.contains("has mode 0757"), "{e}");
    }

    #[test]
    fn a_stage_dir_others_may_read_is_made_private() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("s");
        fs::create_dir(&dir).unwrap();
        chmod(&dir, 0o755);
        drop(hold(&dir, Path::new("/mnt/x")).unwrap());
        assert_eq!(
            fs::metadata(&dir).unwrap().permissions().mode() & 0o7777,
            0o700
        );
    }

    #[test]
    fn a_stage_dir_that_is_a_symlink_or_under_a_dir_others_may_write_in_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().join("real");
        fs::create_dir(&real).unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let e = hold(&link, Path::new("/mnt/x")).unwrap_err().to_string();
        assert!(e.contains("is a symbolic link"), "{e}");
        // Made (or found) in a dir others may write in, without the
        // sticky bit: refused, and nothing made there.
        let open = d.path().join("open");
        fs::create_dir(&open).unwrap();
        chmod(&open, 0o777);
        let e = hold(&open.join("a/s"), Path::new("/mnt/x"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("has mode 0777: others may write in it (and it is not sticky)"),
            "{e}"
        );
        assert!(!open.join("a").exists());
        fs::create_dir(open.join("s")).unwrap();
        let e = hold(&open.join("s"), Path::new("/mnt/x"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("another user could move it away"), "{e}");
        // Sticky, as /tmp: fine.
        chmod(&open, 0o1777);
        drop(hold(&open.join("s"), Path::new("/mnt/x")).unwrap());
    }

    #[test]
    fn a_stage_dir_of_another_user_is_refused_with_its_owner() {
        if !rustix::process::geteuid().is_root() {
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("s");
        fs::create_dir(&dir).unwrap();
        std::os::unix::fs::chown(&dir, Some(4242), Some(4242)).unwrap();
        let e = hold(&dir, Path::new("/mnt/x")).unwrap_err().to_string();
        assert!(
            e.contains("belongs to uid 4242, not to this user (uid 0)")
                && e.contains("run it as uid 4242, its owner"),
            "{e}"
        );
        // Above a stage dir: a dir of another user's is refused too.
        let s = dir.join("t");
        fs::create_dir(&s).unwrap();
        let e = hold(&s, Path::new("/mnt/x")).unwrap_err().to_string();
        assert!(
            e.contains("belongs to uid 4242, not to this user (uid 0) or root"),
            "{e}"
        );
    }

    #[test]
    fn files_in_a_stage_dir_are_not_written_or_read_through_a_symlink() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("s");
        let sentinel = d.path().join("sentinel");
        fs::write(&sentinel, "precious\n").unwrap();
        fs::create_dir(&dir).unwrap();
        std::os::unix::fs::symlink(&sentinel, dir.join(format!(".{MANIFEST}.tmp"))).unwrap();
        let mut h = hold(&dir, Path::new("/mnt/x")).unwrap();
        h.zone("w", Path::new("/b/w"), Xattrs::Trusted).unwrap();
        assert_eq!(fs::read_to_string(&sentinel).unwrap(), "precious\n");
        assert!(read_manifest(&dir).unwrap().zones.contains_key("w"));
        drop(h);
        // A manifest that is a symlink is not read.
        fs::remove_file(dir.join(MANIFEST)).unwrap();
        std::os::unix::fs::symlink(&sentinel, dir.join(MANIFEST)).unwrap();
        assert!(hold(&dir, Path::new("/mnt/x")).is_err());
        assert!(read_manifest(&dir).is_err());
        assert_eq!(fs::read_to_string(&sentinel).unwrap(), "precious\n");
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

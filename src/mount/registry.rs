//! The registry of live mounts: one JSON [`Record`] per mount in the
//! runtime directory, beside the default control sockets. `status`,
//! `approvals`, `check`, `list` and `unmount` find a mount's daemon and
//! socket through it; a record whose daemon is gone marks a stale mount.
//!
//! Each record names its mount namespace (the inode of
//! `/proc/self/ns/mnt`). The runtime directory is shared by every
//! namespace of the host (a container started with `unshare -m` sees the
//! host's `/run`), but a mount is only visible in its own: a record of
//! another namespace is invisible here — never listed, never read, never
//! removed as stale.

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// A live mount's record.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Record {
    pub mountpoint: PathBuf,
    pub pid: u32,
    pub config: Option<PathBuf>,
    pub workers: Vec<PathBuf>,
    /// The `--zone NAME=PATH[:ro|rw|staged]` arguments as given (paths relative
    /// to `cwd`); absent in older records.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zone_args: Vec<String>,
    pub started: u64,
    /// The zone names, for `zonemount list` (absent in older records).
    #[serde(default)]
    pub zones: Vec<String>,
    /// The daemon's control socket (approvals, status).
    #[serde(default)]
    pub control: Option<PathBuf>,
    /// The daemon's working directory when it loaded the config (where a
    /// missing `--config` was looked for), so `check` can load it again.
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// `--allow-sensitive-roots`, which changes what the zones hide.
    #[serde(default)]
    pub allow_sensitive_roots: bool,
    /// The daemon's mount namespace ([`mount_namespace`]); absent in
    /// older records, which count as this namespace's.
    #[serde(default)]
    pub mntns: Option<u64>,
}

impl Record {
    /// Whether the mount of this record lives in this mount namespace.
    pub fn here(&self) -> bool {
        match (self.mntns, mount_namespace()) {
            (Some(theirs), Some(ours)) => theirs == ours,
            _ => true,
        }
    }
}

/// This process's mount namespace: the inode of `/proc/self/ns/mnt`.
pub fn mount_namespace() -> Option<u64> {
    std::fs::metadata("/proc/self/ns/mnt").ok().map(|m| m.ino())
}

/// Root's runtime directory; also where a user looks for a mount root made
/// for them.
const ROOT_RUNTIME_DIR: &str = "/run/zonemount";

/// The runtime directory for records and default control sockets: root's
/// `/run/zonemount`; for a user `$XDG_RUNTIME_DIR/zonemount`, else
/// `/run/user/UID/zonemount` when that directory is the user's, else
/// `/tmp/zonemount-UID` (not `$TMPDIR`: every command of a user, whatever
/// its environment, must find the same records). Only the path: see
/// [`check_runtime_dir`] before trusting what is there.
pub fn runtime_dir() -> PathBuf {
    let uid = rustix::process::geteuid();
    if uid.is_root() {
        return PathBuf::from(ROOT_RUNTIME_DIR);
    }
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("zonemount");
    }
    let uid = uid.as_raw();
    let run_user = PathBuf::from(format!("/run/user/{uid}"));
    if std::fs::metadata(&run_user).is_ok_and(|m| m.is_dir() && m.uid() == uid) {
        return run_user.join("zonemount");
    }
    PathBuf::from(format!("/tmp/zonemount-{uid}"))
}

/// Why `dir`, as `lstat` describes it, can't hold this user's records and
/// sockets; None when it can. It must be a directory (not a symlink to
/// one), owned by `me`, and writable by nobody else: its records name the
/// sockets the CLI trusts with decisions, and anyone who can write there
/// can swap them. Root's may be read by all (0755: a user may look at a
/// mount root made for them); a user's is kept private (0700, see
/// [`check_dir`]).
fn unfit(meta: &std::fs::Metadata, me: u32) -> Option<String> {
    let kind = if meta.file_type().is_symlink() {
        Kind::Symlink
    } else if meta.is_dir() {
        Kind::Dir
    } else {
        Kind::Other
    };
    unfit_as(kind, meta.uid(), meta.mode(), me)
}

/// What `lstat` says a runtime directory is.
#[derive(Clone, Copy)]
enum Kind {
    Dir,
    Symlink,
    Other,
}

/// [`unfit`] on the facts.
fn unfit_as(kind: Kind, uid: u32, mode: u32, me: u32) -> Option<String> {
    let mode = mode & 0o7777;
    match kind {
        Kind::Symlink => return Some("is a symbolic link".to_owned()),
        Kind::Other => return Some("is not a directory".to_owned()),
        Kind::Dir => {}
    }
    if uid != me {
        Some(format!("belongs to uid {uid}, not to this user (uid {me})"))
    } else if mode & 0o022 != 0 {
        Some(format!("has mode {mode:04o}: others may write in it"))
    } else {
        None
    }
}

/// Whether a fit directory of a user's (see [`unfit`]) still lets others
/// read or enter it: one made by an older zonemount (0755), which is then
/// made 0700. Nobody else could write in it, so nothing in it is anyone
/// else's.
fn to_tighten(mode: u32, me: u32) -> bool {
    me != 0 && mode & 0o077 != 0
}

/// `dir` checked with `lstat` (so a symlink is seen, never followed):
/// Ok when it is fit, or missing (nothing there to trust). A user's own
/// that others may only read is made 0700 through an fd opened with
/// `O_NOFOLLOW` and checked to be the same directory.
fn check_dir(dir: &Path) -> io::Result<()> {
    let me = rustix::process::geteuid().as_raw();
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let refuse = |why: String| {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "the runtime directory {} {why}: zonemount won't keep or read mount records and control sockets there (another user may have made it); remove it, or set XDG_RUNTIME_DIR to a directory of your own",
                dir.display(),
            ),
        )
    };
    if let Some(why) = unfit(&meta, me) {
        return Err(refuse(why));
    }
    if to_tighten(meta.mode(), me) {
        use rustix::fs::{Mode, OFlags};
        let fd = rustix::fs::open(
            dir,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| refuse(format!("can't be opened to make it private ({e})")))?;
        let st = rustix::fs::fstat(&fd)?;
        if (st.st_dev, st.st_ino, st.st_uid) != (meta.dev(), meta.ino(), me) {
            return Err(refuse("changed while it was checked".to_owned()));
        }
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o700))?;
    }
    Ok(())
}

/// The runtime directory and its `mounts/`, each checked (see [`unfit`]);
/// missing ones are fine (nothing to read). Every command that reads or
/// writes the registry checks this first, and the registry itself reads
/// nothing from a directory that fails it.
pub fn check_runtime_dir() -> io::Result<PathBuf> {
    let dir = runtime_dir();
    check_dir(&dir)?;
    check_dir(&dir.join("mounts"))?;
    Ok(dir)
}

/// The runtime directory if it may be read: a failing one reads as empty
/// (the commands have said why already, through [`check_runtime_dir`]).
fn readable_runtime_dir() -> Option<PathBuf> {
    check_runtime_dir()
        .inspect_err(|e| tracing::warn!("{e}"))
        .ok()
}

/// FNV-1a of the mountpoint: stable, short, filename-safe.
fn mount_key(mountpoint: &Path) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in mountpoint.as_os_str().as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    format!("{h:016x}")
}

fn record_path(mountpoint: &Path) -> PathBuf {
    record_path_in(&runtime_dir(), mountpoint)
}

/// `mountpoint`'s record file, if the runtime directory may be read.
fn readable_record_path(mountpoint: &Path) -> Option<PathBuf> {
    readable_runtime_dir().map(|d| record_path_in(&d, mountpoint))
}

/// The file of `mountpoint`'s record in this user's registry.
pub fn record_file(mountpoint: &Path) -> PathBuf {
    record_path(mountpoint)
}

fn record_path_in(runtime: &Path, mountpoint: &Path) -> PathBuf {
    runtime
        .join("mounts")
        .join(format!("{}.json", mount_key(mountpoint)))
}

/// Where a mount's control socket goes unless `--control` says otherwise.
pub fn default_control_path(mountpoint: &Path) -> PathBuf {
    runtime_dir().join(format!("{}.sock", mount_key(mountpoint)))
}

/// Every record in the registry (this user's runtime directory).
pub fn records() -> Vec<Record> {
    let Some(dir) = readable_runtime_dir().map(|d| d.join("mounts")) else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .filter_map(|e| read_record_file(&e.path()))
        .filter(Record::here)
        .collect()
}

fn read_record_file(path: &Path) -> Option<Record> {
    let data = std::fs::read(path).ok()?;
    serde_json::from_slice(&data).ok()
}

/// The record in `path` if it belongs to this mount namespace.
fn read_record_here(path: &Path) -> Option<Record> {
    read_record_file(path).filter(Record::here)
}

/// The record of `mountpoint` in this user's registry, else in root's: a
/// user may look at a mount root made for them.
pub fn find_record(mountpoint: &Path) -> Option<Record> {
    read_record(mountpoint).or_else(|| {
        // Root's, only as root keeps it: a directory of root's that nobody
        // else may write (a user's check of it is root's own).
        let root = Path::new(ROOT_RUNTIME_DIR);
        let fit = |d: &Path| std::fs::symlink_metadata(d).is_ok_and(|m| unfit(&m, 0).is_none());
        (fit(root) && fit(&root.join("mounts")))
            .then(|| read_record_here(&record_path_in(root, mountpoint)))
            .flatten()
    })
}

/// The record of `mountpoint` in this user's registry.
pub fn read_record(mountpoint: &Path) -> Option<Record> {
    read_record_here(&readable_record_path(mountpoint)?)
}

/// Write (or replace) the record of `rec.mountpoint`, atomically.
pub fn write_record(rec: &Record) -> io::Result<()> {
    let runtime = runtime_dir();
    private_dir(&runtime)?;
    let path = record_path_in(&runtime, &rec.mountpoint);
    if let Some(dir) = path.parent() {
        private_dir(dir)?;
    }
    let tmp = path.with_extension("tmp");
    // Explicit mode: the daemon runs with umask 0, and a record others
    // could rewrite would point the CLI at someone else's socket.
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .open(&tmp)?;
    io::Write::write_all(
        &mut f,
        &serde_json::to_vec_pretty(rec).map_err(io::Error::other)?,
    )?;
    std::fs::rename(tmp, path)
}

/// Remove the record of `mountpoint`, unless it belongs to another mount
/// namespace (where that mount may well be live).
pub fn remove_record(mountpoint: &Path) {
    let Some(path) = readable_record_path(mountpoint) else {
        return;
    };
    if read_record_file(&path).is_none_or(|r| r.here()) {
        let _ = std::fs::remove_file(path);
    }
}

/// Remove everything a dead mount left in the registry: its record and
/// its control socket, when nothing listens there any more (a live socket
/// belongs to a daemon that bound the path since). Records of other mount
/// namespaces are left alone.
pub fn forget(mountpoint: &Path) {
    let Some(path) = readable_record_path(mountpoint) else {
        return;
    };
    let Some(rec) = read_record_file(&path) else {
        let _ = std::fs::remove_file(path);
        return;
    };
    if !rec.here() {
        return;
    }
    if let Some(sock) = rec.control.as_deref().filter(|s| !listening(s)) {
        let _ = crate::control::remove_socket(sock);
    }
    let _ = std::fs::remove_file(path);
}

/// Remove the control sockets in the runtime directory that no record
/// names and nothing listens on (left by daemons that died before their
/// records were cleaned, or by older versions); the paths removed.
pub fn sweep_dead_sockets() -> Vec<PathBuf> {
    use std::os::unix::fs::FileTypeExt;
    let Some(dir) = readable_runtime_dir() else {
        return Vec::new();
    };
    let named: Vec<PathBuf> = std::fs::read_dir(dir.join("mounts"))
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|e| read_record_file(&e.path()))
        .filter_map(|r| r.control)
        .collect();
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_socket()))
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "sock"))
        .filter(|p| !named.contains(p) && !listening(p))
        .filter(|p| std::fs::remove_file(p).is_ok())
        .collect()
}

/// Whether something accepts connections on the Unix socket at `path`
/// (only a refusal or a missing file count as no).
fn listening(path: &Path) -> bool {
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => true,
        Err(e) => !matches!(
            e.kind(),
            io::ErrorKind::ConnectionRefused | io::ErrorKind::NotFound
        ),
    }
}

/// Create `dir` (and missing parents) for this user's records and
/// sockets: 0700 (root's 0755), whatever the umask (the daemon runs with
/// umask 0), then check it with `lstat` as [`check_runtime_dir`] does.
///
/// One that exists and fails the check (a symlink, another user's
/// directory such as a `/tmp/zonemount-UID` made first by someone else, or
/// one others may write) is refused, never tightened or used: records and
/// sockets there could be swapped under us.
pub fn private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let mode = if rustix::process::geteuid().is_root() {
        0o755
    } else {
        0o700
    };
    if let Some(parent) = dir.parent().filter(|p| !p.exists()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(mode)
            .create(parent)?;
    }
    match std::fs::DirBuilder::new().mode(mode).create(dir) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    check_dir(dir)
}

/// Seconds since the epoch, for [`Record::started`].
pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(mntns: Option<u64>) -> Record {
        Record {
            mountpoint: "/m".into(),
            pid: 1,
            config: None,
            workers: Vec::new(),
            zone_args: Vec::new(),
            started: 0,
            zones: Vec::new(),
            control: None,
            cwd: None,
            allow_sensitive_roots: false,
            mntns,
        }
    }

    #[test]
    fn only_this_namespaces_records_are_here() {
        let ours = mount_namespace();
        assert!(ours.is_some(), "/proc/self/ns/mnt is readable");
        assert!(record(ours).here());
        assert!(record(None).here(), "older records count as ours");
        let other = ours.map(|n| n.wrapping_add(1));
        assert!(!record(other).here());
    }

    #[test]
    fn a_runtime_dir_is_a_private_dir_of_ones_own() {
        let fit = |kind, uid, mode, me| unfit_as(kind, uid, mode, me).is_none();
        // A user's: a directory of theirs nobody else may write; one that
        // others may read (an older zonemount's 0755) is made 0700.
        assert!(fit(Kind::Dir, 1000, 0o040700, 1000));
        assert!(fit(Kind::Dir, 1000, 0o500, 1000));
        assert!(!to_tighten(0o040700, 1000));
        for mode in [0o755, 0o750, 0o701] {
            assert!(fit(Kind::Dir, 1000, mode, 1000), "{mode:o}");
            assert!(to_tighten(mode, 1000), "{mode:o}");
        }
        assert!(!fit(Kind::Dir, 1001, 0o700, 1000), "another user's");
        assert!(!fit(Kind::Dir, 0, 0o700, 1000), "root's");
        for mode in [0o770, 0o777, 0o1777, 0o702, 0o720] {
            assert!(!fit(Kind::Dir, 1000, mode, 1000), "{mode:o}");
        }
        assert!(!fit(Kind::Symlink, 1000, 0o777, 1000));
        assert!(!fit(Kind::Other, 1000, 0o700, 1000));
        // Root's may be read by everyone, written by root alone.
        assert!(fit(Kind::Dir, 0, 0o755, 0));
        assert!(fit(Kind::Dir, 0, 0o700, 0));
        assert!(!to_tighten(0o755, 0), "root's stays readable");
        assert!(!fit(Kind::Dir, 0, 0o775, 0));
        assert!(!fit(Kind::Dir, 0, 0o1777, 0));
        assert!(!fit(Kind::Dir, 1000, 0o755, 0));
        assert!(!fit(Kind::Symlink, 0, 0o777, 0));
        let why = unfit_as(Kind::Dir, 1001, 0o777, 1000).unwrap_or_default();
        assert!(why.contains("uid 1001"), "{why}");
    }

    #[test]
    fn a_record_without_a_namespace_reads_as_before() {
        let old = r#"{"mountpoint":"/m","pid":7,"config":null,"workers":[],"started":1}"#;
        let r: Record = serde_json::from_str(old).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.mntns, None);
        assert!(r.here());
    }
}

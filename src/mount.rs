//! Mounting, serving and unmounting one zonemount filesystem, plus the
//! small facts around it: which paths are mounted (`/proc/self/mountinfo`),
//! and the registry of live mounts (one JSON record per mount in the
//! runtime directory), which lets `unmount` find and wait for a daemon.

use std::collections::HashSet;
use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use fuser::{Config, MountOption, SessionACL};

use crate::approval::{Broker, DenyAll};
use crate::config::ZoneTable;
use crate::fs::core::{Core, CoreOptions};
use crate::fs::{Admission, ZoneFs};

/// The filesystem type mounts show in /proc/mounts.
pub const FSTYPE: &str = "fuse.zonemount";

/// What a mount needs beyond the zone table.
#[derive(Debug, Clone)]
pub struct MountSpec {
    pub mountpoint: PathBuf,
    /// Cache TTL of rw zones.
    pub ttl: Duration,
    /// Cache TTL of ro zones and the mount root.
    pub ttl_ro: Duration,
    /// FUSE threads serving requests.
    pub threads: usize,
    /// Use kernel passthrough for file data where possible.
    pub passthrough: bool,
    pub config: Option<PathBuf>,
    pub workers: Vec<PathBuf>,
    /// Let users other than the mounting one (and root) in.
    pub allow_other: bool,
    /// With `allow_other`: only these users (plus the mounting user and
    /// root). Empty: everyone.
    pub allow_uids: Vec<u32>,
}

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

fn show(p: &Path) -> String {
    p.display().to_string()
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
    if !Path::new("/dev/fuse").exists() {
        return Err(MountError::NoFuse);
    }
    Ok(mp)
}

fn fusermount3() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join("fusermount3"))
        .find(|p| p.is_file())
}

/// Mount and complete the FUSE handshake; the returned session is live.
pub fn start(
    mountpoint: &Path,
    table: &ZoneTable,
    spec: &MountSpec,
    broker: Option<Arc<dyn Broker>>,
) -> Result<(fuser::Session<ZoneFs>, Arc<Core>), MountError> {
    let euid = rustix::process::geteuid().as_raw();
    let egid = rustix::process::getegid().as_raw();
    let broker = broker.unwrap_or_else(|| Arc::new(DenyAll));
    let mut admission = Admission::default();
    if spec.allow_other && !spec.allow_uids.is_empty() {
        let mut only: HashSet<u32> = spec.allow_uids.iter().copied().collect();
        only.insert(euid);
        admission.only = Some(only);
    }
    let core = Core::new(
        table,
        CoreOptions {
            ttl: spec.ttl,
            ttl_ro: spec.ttl_ro,
            passthrough: spec.passthrough,
            owner_uid: euid,
            owner_gid: egid,
            admission,
        },
        broker,
    )
    .map_err(|e| MountError::Backing(e.to_string()))?;
    let fs = ZoneFs::new(Arc::new(core));
    let core = fs.core().clone();

    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName("zonemount".into()),
        MountOption::Subtype("zonemount".into()),
        MountOption::DefaultPermissions,
        MountOption::NoSuid,
        MountOption::NoDev,
    ];
    let have_fusermount = fusermount3().is_some();
    if euid != 0 && !have_fusermount {
        return Err(MountError::NoFusermount);
    }
    if spec.allow_other && euid != 0 && !fuse_conf_allows_other() {
        return Err(MountError::AllowOtherNotPermitted);
    }
    // Both ACLs below mount with allow_other; fuser then filters in the
    // daemon: RootAndOwner admits root and the mounting user only.
    if spec.allow_other {
        config.acl = SessionACL::All;
    }
    if euid == 0 && have_fusermount {
        // auto_unmount: fusermount3 unmounts if the daemon dies. It needs
        // allow_other, so without --allow-other fuser keeps others out.
        config.mount_options.push(MountOption::AutoUnmount);
        if !spec.allow_other {
            config.acl = SessionACL::RootAndOwner;
        }
    }
    config.n_threads = Some(spec.threads.max(1));
    config.clone_fd = true;
    backing_setup();
    let session = fuser::Session::new(fs, mountpoint, &config).map_err(|e| {
        if e.kind() == io::ErrorKind::NotFound && !Path::new("/dev/fuse").exists() {
            MountError::NoFuse
        } else {
            MountError::Mount(show(mountpoint), e)
        }
    })?;
    // The handshake is done: the I/O mode is settled.
    tracing::info!(
        mountpoint = %mountpoint.display(),
        io = core.io_mode().describe(),
        ttl = ?spec.ttl,
        ttl_ro = ?spec.ttl_ro,
        threads = spec.threads,
        "mounted"
    );
    Ok((session, core))
}

/// Whether /etc/fuse.conf lets non-root users mount with allow_other.
fn fuse_conf_allows_other() -> bool {
    std::fs::read_to_string("/etc/fuse.conf")
        .map(|t| {
            t.lines()
                .map(|l| l.split('#').next().unwrap_or("").trim())
                .any(|l| l == "user_allow_other")
        })
        .unwrap_or(false)
}

fn backing_setup() {
    crate::backing::clear_umask();
    crate::backing::raise_nofile_limit();
}

/// One line of /proc/self/mountinfo that matters here.
#[derive(Debug, Clone)]
pub struct MountEntry {
    pub mountpoint: PathBuf,
    pub fstype: String,
}

fn unescape(field: &str) -> PathBuf {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            let oct = std::str::from_utf8(&b[i + 1..i + 4]).unwrap_or("");
            if let Ok(v) = u8::from_str_radix(oct, 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    PathBuf::from(OsString::from_vec(out))
}

/// Every mount of this process's namespace.
pub fn mounts() -> Vec<MountEntry> {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let mp = fields.nth(4)?;
            let rest = line.split(" - ").nth(1)?;
            let fstype = rest.split(' ').next()?;
            Some(MountEntry {
                mountpoint: unescape(mp),
                fstype: fstype.to_string(),
            })
        })
        .collect()
}

/// The topmost mount at exactly `path`, if any.
pub fn find_mount(path: &Path) -> Option<MountEntry> {
    mounts().into_iter().rev().find(|m| m.mountpoint == path)
}

/// `path` made absolute without touching it (a dead FUSE mount can't be
/// stat'ed), and canonical when it can be.
pub fn absolute(path: &Path) -> PathBuf {
    match path.canonicalize() {
        Ok(p) => p,
        Err(_) => std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()),
    }
}

// ---- registry -------------------------------------------------------------

/// A live mount's record.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Record {
    pub mountpoint: PathBuf,
    pub pid: u32,
    pub config: Option<PathBuf>,
    pub workers: Vec<PathBuf>,
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
}

/// The runtime directory for records (and later control sockets).
pub fn runtime_dir() -> PathBuf {
    if rustix::process::geteuid().is_root() {
        return PathBuf::from("/run/zonemount");
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d).join("zonemount"),
        _ => {
            std::env::temp_dir().join(format!("zonemount-{}", rustix::process::geteuid().as_raw()))
        }
    }
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

fn record_path_in(runtime: &Path, mountpoint: &Path) -> PathBuf {
    runtime
        .join("mounts")
        .join(format!("{}.json", mount_key(mountpoint)))
}

/// Where a mount's control socket goes unless `--control` says otherwise.
pub fn default_control_path(mountpoint: &Path) -> PathBuf {
    runtime_dir().join(format!("{}.sock", mount_key(mountpoint)))
}

/// The record of `mountpoint` in this user's registry, else in root's
/// (`/run/zonemount`): a user may look at a mount root made for them.
pub fn find_record(mountpoint: &Path) -> Option<Record> {
    read_record(mountpoint).or_else(|| {
        let data = std::fs::read(record_path_in(Path::new("/run/zonemount"), mountpoint)).ok()?;
        serde_json::from_slice(&data).ok()
    })
}

pub fn write_record(rec: &Record) -> io::Result<()> {
    let path = record_path(&rec.mountpoint);
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

/// Create `dir` (and parents) writable only by us, whatever the umask
/// (the daemon runs with umask 0); tighten it if it exists.
pub fn private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)?;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755));
    if let Some(parent) = dir.parent().filter(|p| p.ends_with("zonemount")) {
        let _ = std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o755));
    }
    Ok(())
}

pub fn read_record(mountpoint: &Path) -> Option<Record> {
    let data = std::fs::read(record_path(mountpoint)).ok()?;
    serde_json::from_slice(&data).ok()
}

pub fn remove_record(mountpoint: &Path) {
    let _ = std::fs::remove_file(record_path(mountpoint));
}

pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

// ---- unmount ----------------------------------------------------------------

#[derive(Debug, thiserror::Error)]
pub enum UnmountError {
    #[error("{0} is a {1} mount, not a zonemount mount: not touching it")]
    NotOurs(String, String),
    #[error(
        "{0} is busy (a process has a file open or its working directory inside): close them, or use --lazy"
    )]
    Busy(String),
    #[error("unmounting {0} failed: {1}")]
    Failed(String, String),
}

#[derive(Debug, PartialEq, Eq)]
pub enum Unmounted {
    Done,
    NotMounted,
    /// Unmounted, but the daemon had not exited within the wait.
    DaemonLingers(u32),
}

pub fn process_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| !s.contains(") Z "))
            .unwrap_or(false)
}

/// Unmount exactly `path` (root: umount2; others: fusermount3 -u).
pub fn detach(path: &Path, lazy: bool) -> Result<(), UnmountError> {
    if rustix::process::geteuid().is_root() {
        let flags = if lazy {
            rustix::mount::UnmountFlags::DETACH
        } else {
            rustix::mount::UnmountFlags::empty()
        };
        return match rustix::mount::unmount(path, flags) {
            Ok(()) => Ok(()),
            Err(rustix::io::Errno::BUSY) => Err(UnmountError::Busy(show(path))),
            Err(e) => Err(UnmountError::Failed(show(path), e.to_string())),
        };
    }
    let mut cmd = std::process::Command::new("fusermount3");
    cmd.arg("-u");
    if lazy {
        cmd.arg("-z");
    }
    let out = cmd
        .arg("--")
        .arg(path)
        .output()
        .map_err(|e| UnmountError::Failed(show(path), format!("fusermount3: {e}")))?;
    if out.status.success() {
        return Ok(());
    }
    let msg = String::from_utf8_lossy(&out.stderr).trim().to_string();
    if msg.contains("busy") {
        Err(UnmountError::Busy(show(path)))
    } else {
        Err(UnmountError::Failed(show(path), msg))
    }
}

/// Unmount a zonemount mount at exactly `path` and wait for its daemon.
pub fn unmount(path: &Path, lazy: bool) -> Result<Unmounted, UnmountError> {
    let path = absolute(path);
    let Some(entry) = find_mount(&path) else {
        remove_record(&path);
        return Ok(Unmounted::NotMounted);
    };
    if entry.fstype != FSTYPE {
        return Err(UnmountError::NotOurs(show(&path), entry.fstype));
    }
    let record = read_record(&path);
    detach(&path, lazy)?;
    let Some(rec) = record else {
        return Ok(Unmounted::Done);
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while process_alive(rec.pid) {
        if Instant::now() > deadline {
            return Ok(Unmounted::DaemonLingers(rec.pid));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    remove_record(&path);
    Ok(Unmounted::Done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_decoded() {
        assert_eq!(unescape("/tmp/a\\040b"), PathBuf::from("/tmp/a b"));
        assert_eq!(unescape("/plain"), PathBuf::from("/plain"));
        assert_eq!(unescape("/x\\134y"), PathBuf::from("/x\\y"));
    }

    #[test]
    fn the_root_filesystem_is_listed() {
        assert!(mounts().iter().any(|m| m.mountpoint == Path::new("/")));
    }
}

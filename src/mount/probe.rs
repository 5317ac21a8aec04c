//! What this machine allows a mount to use, found without mounting: the
//! FUSE device, `fusermount3`, privilege, passthrough, FUSE over io_uring,
//! kernel file handles, `run --isolate`'s sandbox and the directories
//! zonemount writes. `preflight` asks the few facts a mount can't do
//! without; `zonemount doctor` shows them all, each with what zonemount
//! does about it and the fix.

use std::fs;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The FUSE device.
pub const DEV_FUSE: &str = "/dev/fuse";

/// Whether the FUSE device is there and this user may open it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FuseDevice {
    Usable,
    /// No `/dev/fuse` (or not a character device).
    Missing,
    /// There, but this user can't open it read-write.
    NoAccess,
}

/// Probe `/dev/fuse` by opening it (an open alone starts nothing).
pub fn fuse_device() -> FuseDevice {
    match fs::metadata(DEV_FUSE) {
        Ok(m) if m.file_type().is_char_device() => {}
        _ => return FuseDevice::Missing,
    }
    match fs::OpenOptions::new().read(true).write(true).open(DEV_FUSE) {
        Ok(_) => FuseDevice::Usable,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => FuseDevice::Missing,
        Err(_) => FuseDevice::NoAccess,
    }
}

/// `fusermount3` on PATH (or the usual places), if installed.
pub fn fusermount3() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/bin")])
        .map(|d| d.join("fusermount3"))
        .find(|p| is_program(p))
}

/// A regular, executable, non-empty file (a `/dev/null` bind-mounted over
/// the program is neither).
fn is_program(p: &Path) -> bool {
    fs::metadata(p).is_ok_and(|m| m.is_file() && m.len() > 0 && m.mode() & 0o111 != 0)
}

/// Whether `fusermount3` at `p` is setuid root (it must be, for users).
pub fn is_setuid_root(p: &Path) -> bool {
    fs::metadata(p).is_ok_and(|m| m.uid() == 0 && m.mode() & 0o4000 != 0)
}

/// Effective uid 0.
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Whether /etc/fuse.conf lets non-root users mount with `allow_other`.
pub fn fuse_conf_allows_other() -> bool {
    fs::read_to_string("/etc/fuse.conf").is_ok_and(|t| {
        t.lines()
            .map(|l| l.split('#').next().unwrap_or("").trim())
            .any(|l| l == "user_allow_other")
    })
}

/// The running kernel's release (`uname -r`).
pub fn kernel_release() -> String {
    fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// (major, minor) of a kernel release such as `6.18.44-foo`.
pub fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// Where the kernel says whether FUSE over io_uring is enabled.
pub const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

/// FUSE over io_uring as the kernel offers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Uring {
    /// `enable_uring` is Y.
    Enabled,
    /// The kernel has it (Linux 6.14+) but `enable_uring` is N.
    Disabled,
    /// No `enable_uring` parameter: the kernel predates it, or FUSE is
    /// built without it.
    Absent,
}

/// Turn the fuse module's `enable_uring` on (root only). It stays on for
/// every FUSE mount made after, until set back or reboot.
pub fn enable_uring() -> std::io::Result<()> {
    fs::write(ENABLE_URING, "Y")
}

/// The environment variable that asks every mount made with it for FUSE
/// over io_uring, as `--io-uring` does.
pub const IO_URING_ENV: &str = "ZONEMOUNT_IO_URING";

/// Whether [`IO_URING_ENV`] is `1`.
pub fn uring_from_env() -> bool {
    std::env::var_os(IO_URING_ENV).is_some_and(|v| v == "1")
}

pub fn uring() -> Uring {
    match fs::read_to_string(ENABLE_URING) {
        Ok(v) if v.trim() == "Y" || v.trim() == "1" => Uring::Enabled,
        Ok(_) => Uring::Disabled,
        Err(_) => Uring::Absent,
    }
}

/// Whether kernel file handles can be made and reopened for `dir` by this
/// process: `name_to_handle_at` works on most filesystems, reopening needs
/// CAP_DAC_READ_SEARCH.
pub fn file_handles(dir: &Path) -> Result<(), String> {
    let fd = rustix::fs::open(
        dir,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| format!("cannot open {}: {e}", dir.display()))?;
    let h = crate::backing::handle_of(fd.as_fd())
        .map_err(|e| format!("{} gives no file handles: {e}", dir.display()))?;
    crate::backing::open_by_handle(fd.as_fd(), &h)
        .map(drop)
        .map_err(|e| match e {
            rustix::io::Errno::PERM => {
                "reopening a file handle needs CAP_DAC_READ_SEARCH".to_string()
            }
            e => format!("reopening a file handle fails: {e}"),
        })
}

/// Whether `run --isolate`'s sandbox starts here: bubblewrap runs `true`
/// in fresh namespaces. Err is the first line bwrap printed.
pub fn isolate_sandbox(bwrap: &Path) -> Result<(), String> {
    let child = Command::new(bwrap)
        .args([
            "--unshare-all",
            "--die-with-parent",
            "--ro-bind",
            "/",
            "/",
            "--",
            "true",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", bwrap.display()))?;
    let out = wait_bounded(child, Duration::from_secs(10))?;
    if out.status.success() {
        return Ok(());
    }
    let text = String::from_utf8_lossy(&out.stderr);
    Err(text
        .lines()
        .next()
        .unwrap_or("bwrap failed without a message")
        .trim()
        .to_string())
}

/// Wait for `child` at most `limit`; a child still running then is killed.
fn wait_bounded(
    mut child: std::process::Child,
    limit: Duration,
) -> Result<std::process::Output, String> {
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return child.wait_with_output().map_err(|e| e.to_string()),
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("did not finish within {} s", limit.as_secs()));
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Whether a staged zone's overlay can be mounted here by this user: one
/// is mounted (detached) over empty dirs in a temp dir and a file made
/// through it. Ok says how (root, or a user namespace); Err why not.
pub fn staged_overlay() -> Result<&'static str, String> {
    let dir = tempfile::Builder::new()
        .prefix("zonemount-probe.")
        .tempdir()
        .map_err(|e| format!("no temp dir: {e}"))?;
    // The overlay gone (its root closed when this returns), the dir is
    // removed: first the overlay's `w/work`, which the kernel leaves mode
    // 0 and an ordinary user could not empty or remove.
    let said = overlay_in(dir.path());
    let _ = let_overlay_work_go(dir.path());
    let dir_path = dir.path().to_path_buf();
    if let Err(e) = dir.close() {
        tracing::debug!("cannot remove {}: {e}", dir_path.display());
    }
    said
}

/// Make `w/work` ours to empty and remove again, by fds from `dir` on
/// (`dir` and `w` not followed if symlinks; no one else may write in
/// them). The dir itself then goes through `remove_dir_all`, which
/// follows no symlink either.
fn let_overlay_work_go(dir: &Path) -> rustix::io::Result<()> {
    use rustix::fs::{Mode, OFlags};
    let nofollow = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let top = rustix::fs::open(dir, nofollow, Mode::empty())?;
    let w = rustix::fs::openat(&top, "w", nofollow, Mode::empty())?;
    rustix::fs::chmodat(
        &w,
        "work",
        Mode::from_raw_mode(0o700),
        rustix::fs::AtFlags::empty(),
    )
}

/// [`staged_overlay`] in `dir`.
fn overlay_in(dir: &Path) -> Result<&'static str, String> {
    let [lower, upper, work] = ["l", "u", "w"].map(|d| dir.join(d));
    for d in [&lower, &upper, &work] {
        fs::create_dir(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    let (root, how) = crate::stage::sys::overlay::mount(&crate::stage::sys::overlay::Layers {
        lower: &[&lower],
        upper: Some((&upper, &work)),
    })
    .map_err(|e| e.to_string())?;
    rustix::fs::openat(
        &root,
        "probe",
        rustix::fs::OFlags::CREATE | rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::from_raw_mode(0o600),
    )
    .map_err(|e| format!("a file can't be made through the overlay: {e}"))?;
    if !upper.join("probe").exists() {
        return Err("a file made through the overlay did not land in its upper dir".into());
    }
    Ok(match how {
        crate::stage::sys::overlay::Xattrs::Trusted => "as root",
        crate::stage::sys::overlay::Xattrs::User => "in a user namespace",
    })
}

/// Whether this user can write in `dir`, or create it: the nearest
/// existing ancestor decides. Err says why not.
pub fn writable_dir(dir: &Path) -> Result<(), String> {
    let mut p = dir;
    loop {
        match fs::metadata(p) {
            Ok(m) if !m.is_dir() => return Err(format!("{} is not a directory", p.display())),
            Ok(_) => {
                return rustix::fs::access(
                    p,
                    rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK,
                )
                .map_err(|e| format!("{} is not writable: {e}", p.display()));
            }
            Err(_) => match p.parent() {
                Some(parent) => p = parent,
                None => return Err(format!("no existing parent of {}", dir.display())),
            },
        }
    }
}

/// Why an ordinary user may not mount on `dir` with `fusermount3`, which
/// refuses a mountpoint the user can't write to, and one in a sticky
/// directory (such as /tmp itself) the user doesn't own.
pub fn user_mountpoint_refusal(dir: &Path) -> Option<String> {
    if is_root() {
        return None;
    }
    let m = fs::metadata(dir).ok()?;
    let uid = rustix::process::geteuid().as_raw();
    if m.mode() & 0o1000 != 0 && m.uid() != uid {
        return Some(format!(
            "{} is a sticky directory owned by uid {}: fusermount3 lets a user mount only on a directory the user owns there",
            dir.display(),
            m.uid()
        ));
    }
    if rustix::fs::access(dir, rustix::fs::Access::WRITE_OK).is_err() {
        return Some(format!(
            "{} is not writable by uid {uid}: fusermount3 lets a user mount only on a directory the user can write",
            dir.display()
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_versions_parse() {
        assert_eq!(kernel_version("6.18.44-fc-v657"), Some((6, 18)));
        assert_eq!(kernel_version("5.4.0"), Some((5, 4)));
        assert_eq!(kernel_version("6.9"), Some((6, 9)));
        assert_eq!(kernel_version("garbage"), None);
    }

    #[test]
    fn a_covered_program_is_not_a_program() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("fusermount3");
        fs::write(&p, b"").unwrap();
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
        assert!(!is_program(&p), "empty file (a /dev/null cover)");
        fs::write(&p, b"#!/bin/sh\n").unwrap();
        assert!(is_program(&p));
        fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap();
        assert!(!is_program(&p), "not executable");
        assert!(!is_program(Path::new("/dev/null")));
    }

    #[test]
    fn writable_dir_climbs_to_an_existing_parent() {
        let dir = tempfile::tempdir().unwrap();
        assert!(writable_dir(&dir.path().join("a/b/c")).is_ok());
        let file = dir.path().join("f");
        fs::write(&file, b"x").unwrap();
        assert!(
            writable_dir(&file.join("sub")).is_err(),
            "a file on the way"
        );
    }
}

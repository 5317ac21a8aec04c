//! Which paths are mounted: `/proc/self/mountinfo` parsed, and the mount
//! at exactly one path. Reads only; never touches a mountpoint itself (a
//! dead FUSE mount can't be stat'ed).

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

/// One line of /proc/self/mountinfo that matters here.
#[derive(Debug, Clone, Default)]
pub struct MountEntry {
    pub mountpoint: PathBuf,
    pub fstype: String,
    /// The mount source (a FUSE mount's fsname).
    pub source: String,
    /// The mount's id (what `statx` calls `stx_mnt_id`).
    pub id: u64,
    /// Its device, `major:minor`.
    pub dev: String,
}

impl MountEntry {
    /// Whether this is a zonemount mount: type `fuse.zonemount`, or a
    /// plain `fuse` mount named `zonemount` (what fuser's own mount(2)
    /// made before zonemount mounted itself, when fusermount3 was
    /// missing: a daemon of an older zonemount may still serve one).
    pub fn is_zonemount(&self) -> bool {
        self.fstype == super::FSTYPE || (self.fstype == "fuse" && self.source == "zonemount")
    }
}

/// A mountinfo path field with its octal escapes (`\040` for a space)
/// decoded.
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
    parse(&text)
}

fn parse(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let id = fields.next()?.parse().ok()?;
            let dev = fields.nth(1)?;
            let mp = fields.nth(1)?;
            let mut rest = line.split(" - ").nth(1)?.split(' ');
            let fstype = rest.next()?;
            let source = rest.next().unwrap_or("");
            Some(MountEntry {
                mountpoint: unescape(mp),
                fstype: fstype.to_string(),
                source: unescape(source).to_string_lossy().into_owned(),
                id,
                dev: dev.to_string(),
            })
        })
        .collect()
}

/// A process of another mount namespace in which a zonemount mount at
/// the same path still exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Elsewhere {
    pub pid: u32,
    /// Its command name (`/proc/PID/comm`).
    pub comm: String,
}

/// One process of each other mount namespace that still holds a
/// zonemount mount at `path` (as far as this process may read
/// `/proc/PID/mountinfo`). A namespace made while the mount existed (e.g.
/// `unshare -m`) holds a copy of it; with private propagation, unmounting
/// here does not reach that copy, and the daemon serves it until that
/// namespace ends or unmounts it.
pub fn elsewhere(path: &Path) -> Vec<Elsewhere> {
    let ns = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/mnt")).ok();
    let Some(own) = ns("self") else {
        return Vec::new();
    };
    let mut seen = vec![own];
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    let mut pids: Vec<u32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    for pid in pids {
        let Some(theirs) = ns(&pid.to_string()) else {
            continue;
        };
        if seen.contains(&theirs) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")) else {
            continue;
        };
        seen.push(theirs);
        if parse(&text)
            .iter()
            .any(|m| m.mountpoint == path && m.is_zonemount())
        {
            let comm = crate::text::read_lossy(format!("/proc/{pid}/comm")).unwrap_or_default();
            out.push(Elsewhere {
                pid,
                comm: comm.trim_end().to_string(),
            });
        }
    }
    out
}

/// The topmost mount of device `dev` (`major:minor`), wherever it is now.
pub fn find_device(dev: &str) -> Option<MountEntry> {
    mounts().into_iter().rev().find(|m| m.dev == dev)
}

/// The topmost mount at exactly `path`, if any.
pub fn find_mount(path: &Path) -> Option<MountEntry> {
    mounts().into_iter().rev().find(|m| m.mountpoint == path)
}

/// The device (`major:minor`, as mountinfo has it) of the topmost mount
/// at exactly `path`: read without touching the mount (its own daemon
/// asks before it serves the mount's first request from elsewhere).
pub fn device_of(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    text.lines().rev().find_map(|line| {
        let mut fields = line.split(' ');
        let dev = fields.nth(2)?;
        let mp = fields.nth(1)?;
        (unescape(mp) == path).then(|| dev.to_string())
    })
}

/// `path` made absolute without touching it (a dead FUSE mount can't be
/// stat'ed), and canonical when it can be.
pub fn absolute(path: &Path) -> PathBuf {
    match path.canonicalize() {
        Ok(p) => p,
        Err(_) => std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()),
    }
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
    fn the_device_of_a_mountpoint_is_read_from_mountinfo() {
        let root = device_of(Path::new("/")).expect("/ is mounted");
        let (major, minor) = root.split_once(':').expect("major:minor");
        assert!(
            major.parse::<u32>().is_ok() && minor.parse::<u32>().is_ok(),
            "{root}"
        );
        assert_eq!(device_of(Path::new("/no/such/mountpoint")), None);
    }

    #[test]
    fn an_entry_has_its_mount_id_and_device() {
        let line =
            "812 27 0:94 / /tmp/a\\040b rw,nosuid,nodev - fuse.zonemount zonemount rw,user_id=0\n";
        let e = &parse(line)[0];
        assert_eq!((e.id, e.dev.as_str()), (812, "0:94"));
        assert_eq!(e.mountpoint, PathBuf::from("/tmp/a b"));
        assert!(e.is_zonemount());
        let own = &mounts()[0];
        assert!(own.id > 0 && own.dev.contains(':'), "{own:?}");
    }

    #[test]
    fn zonemount_mounts_are_known_by_type_or_by_name() {
        let e = |fstype: &str, source: &str| MountEntry {
            mountpoint: "/m".into(),
            fstype: fstype.into(),
            source: source.into(),
            ..MountEntry::default()
        };
        assert!(e("fuse.zonemount", "zonemount").is_zonemount());
        assert!(e("fuse", "zonemount").is_zonemount(), "an older daemon's");
        assert!(!e("fuse", "sshfs").is_zonemount());
        assert!(!e("fuse.sshfs", "zonemount").is_zonemount());
        assert!(!e("tmpfs", "zonemount").is_zonemount());
    }

    #[test]
    fn the_root_filesystem_is_listed() {
        assert!(mounts().iter().any(|m| m.mountpoint == Path::new("/")));
    }
}

//! Opening a file the daemon appends to (the audit ledger, a refusal log,
//! `ZONEMOUNT_LOG_FILE`) without being led elsewhere: such a path often
//! lies in a directory others may write (a `/tmp`, a worker's shared
//! dir), where a symlink or a hard link planted under its name would make
//! us (root, maybe) append to, or truncate, someone else's file, and a
//! file planted there by another user would let its owner read and forge
//! what we write.
//!
//! So no directory above it may be one another user could change (owned
//! by someone but root and us, or writable by others without the sticky
//! bit: [`crate::trust`]); the last component is never followed
//! (`O_NOFOLLOW`); a new file is
//! made with `O_EXCL` and its mode set on the fd; an existing one must be
//! a regular file with one link, owned by our euid and writable by no
//! one else, or we refuse, saying why and what to do. Whatever is done
//! to the file afterwards (appending, truncating) is done on the fd we
//! opened, never by path again.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{FileType, Mode, OFlags};

/// Open `path` for appending: made with `mode` (exactly, whatever the
/// umask) when missing; kept when it is a file we may trust (see the
/// module's doc), else refused with an error that says why.
pub fn open_append(path: &Path, mode: u32) -> io::Result<File> {
    // No directory above it another user could move away and replace
    // (with a symlink to a directory of ours): O_NOFOLLOW guards only the
    // last component.
    let abs = std::path::absolute(path)?;
    let in_dir = |why: String| {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("log {} {why}", path.display()),
        )
    };
    let dir = crate::trust::check_parents(&abs, "log").map_err(in_dir)?;
    // Opened by the path just walked: no symlink in it, and no directory
    // on it that anyone else may change.
    let at = dir.join(abs.file_name().unwrap_or_default());
    let base = OFlags::WRONLY | OFlags::APPEND | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fresh = rustix::fs::open(
        &at,
        base | OFlags::CREATE | OFlags::EXCL,
        Mode::from_raw_mode(mode),
    );
    match fresh {
        Ok(fd) => {
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))?;
            return Ok(File::from(fd));
        }
        Err(rustix::io::Errno::EXIST) => {}
        Err(e) => return Err(e.into()),
    }
    // NONBLOCK: a FIFO planted there must not hang us (it is refused
    // below); it does nothing to a regular file.
    let fd: OwnedFd = match rustix::fs::open(&at, base | OFlags::NONBLOCK, Mode::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::LOOP) => return Err(refused(path, "it is a symbolic link")),
        Err(rustix::io::Errno::NXIO) => return Err(refused(path, "it is not a regular file")),
        Err(e) => return Err(e.into()),
    };
    let st = rustix::fs::fstat(&fd)?;
    let me = rustix::process::geteuid().as_raw();
    let perm = st.st_mode & 0o7777;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(refused(path, "it is not a regular file"));
    }
    if st.st_uid != me {
        return Err(refused(
            path,
            &format!(
                "it belongs to uid {}, not to uid {me} (this daemon's), mode {perm:04o}",
                st.st_uid
            ),
        ));
    }
    if perm & 0o022 != 0 {
        return Err(refused(
            path,
            &format!("it has mode {perm:04o}: group or others may write to it"),
        ));
    }
    if st.st_nlink != 1 {
        return Err(refused(
            path,
            &format!(
                "it has {} hard links: another name of it may be someone else's",
                st.st_nlink
            ),
        ));
    }
    Ok(File::from(fd))
}

fn refused(path: &Path, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "{why}; a log is appended only to a new file or to a regular file this user owns, with one link, that no one else may write: remove {} or name another path",
            path.display()
        ),
    )
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    use super::*;

    #[test]
    fn a_new_file_gets_exactly_the_mode() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log");
        let mut f = open_append(&p, 0o600).unwrap();
        f.write_all(b"a\n").unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o7777, 0o600);
        let p2 = dir.path().join("log2");
        open_append(&p2, 0o644).unwrap();
        assert_eq!(std::fs::metadata(&p2).unwrap().mode() & 0o7777, 0o644);
        // Kept, and appended to.
        let mut f = open_append(&p, 0o600).unwrap();
        f.write_all(b"b\n").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "a\nb\n");
    }

    #[test]
    fn planted_names_are_refused_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        // A symlink, dangling or not.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let e = open_append(&link, 0o600).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        let dangling = dir.path().join("dangling");
        std::os::unix::fs::symlink(dir.path().join("nothing"), &dangling).unwrap();
        assert!(open_append(&dangling, 0o600).is_err());
        assert!(!dir.path().join("nothing").exists());
        // A hard link.
        let hard = dir.path().join("hard");
        std::fs::hard_link(&victim, &hard).unwrap();
        let e = open_append(&hard, 0o600).unwrap_err();
        assert!(e.to_string().contains("hard links"), "{e}");
        // Writable by others.
        let open = dir.path().join("open");
        std::fs::write(&open, "").unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = open_append(&open, 0o600).unwrap_err();
        assert!(e.to_string().contains("mode 0666"), "{e}");
        // A FIFO: refused, not waited on.
        let fifo = dir.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let e = open_append(&fifo, 0o600).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    }

    #[test]
    fn another_users_file_is_refused() {
        if !rustix::process::geteuid().is_root() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("theirs");
        std::fs::write(&p, "").unwrap();
        std::os::unix::fs::chown(&p, Some(1001), None).unwrap();
        let e = open_append(&p, 0o600).unwrap_err();
        assert!(e.to_string().contains("belongs to uid 1001"), "{e}");
    }
}

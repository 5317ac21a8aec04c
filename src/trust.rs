//! Which paths no other user can change: a directory above a file we
//! write (a stage dir, a log) that another user owns, or may write in
//! without the sticky bit, lets them move what is below it away and put
//! something else (a symlink to a file of ours) in its place. Checked by
//! `lstat` on each directory above, the path as given and canonical.

use std::ffi::OsStr;
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;

/// The directory `path` is in, opened (`O_PATH`) with no symlink followed
/// on the way (`RESOLVE_NO_SYMLINKS`), and `path`'s last name in it: what
/// is done to that name through the fd can't be led elsewhere by a
/// directory on the path renamed or swapped for a symlink meanwhile.
pub fn parent_without_symlinks(path: &Path) -> io::Result<(OwnedFd, &OsStr)> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the path names no file in a directory",
        ));
    };
    let dir = rustix::fs::openat2(
        rustix::fs::CWD,
        parent,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS,
    )?;
    Ok((dir, name))
}

/// Why a directory above a path, as `lstat` describes it, would let
/// another user move what is below it away (and put another in its place);
/// None when it can't: a directory of root's or `me`'s that nobody else
/// may write in, or only with the sticky bit (as `/tmp`: nobody else may
/// move what is `me`'s there).
pub fn unfit_parent(st: &rustix::fs::Stat, me: u32) -> Option<String> {
    let mode = st.st_mode & 0o7777;
    if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        Some("is not a directory".to_owned())
    } else if st.st_uid != me && st.st_uid != 0 {
        Some(format!(
            "belongs to uid {}, not to this user (uid {me}) or root",
            st.st_uid
        ))
    } else if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        Some(format!(
            "has mode {mode:04o}: others may write in it (and it is not sticky)"
        ))
    } else {
        None
    }
}

/// [`unfit_parent`] for each directory above `path` (absolute). A symlink
/// among them (`/var/run`) must be root's or this user's: the directory
/// it is in is checked as the next one up, and where it leads is checked
/// when the canonical path is.
pub fn check_parents(path: &Path, what: &str) -> Result<(), String> {
    let me = rustix::process::geteuid().as_raw();
    for above in path.ancestors().skip(1) {
        if above.as_os_str().is_empty() {
            continue;
        }
        let st = rustix::fs::lstat(above).map_err(|e| format!("{}: {e}", above.display()))?;
        let link_ok =
            st.st_mode & libc::S_IFMT == libc::S_IFLNK && (st.st_uid == me || st.st_uid == 0);
        if let Some(why) = unfit_parent(&st, me).filter(|_| !link_ok) {
            return Err(format!(
                "is in {}, which {why}: another user could move it away; give a {what} \
                 under directories of root's or yours that nobody else may write in",
                above.display()
            ));
        }
    }
    Ok(())
}

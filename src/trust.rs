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

/// [`unfit_parent`] for each directory the way to `path`'s directory goes
/// through, resolved here one name at a time (`path` absolute): every
/// directory passed must be fit, and every symlink met on the way
/// (`/var/run`) root's or this user's, and where it leads is walked the
/// same way, each of its hops too (a root symlink pointing through a
/// user's symlink is caught at the user's). So nothing on the way to it
/// can be changed by another user. Returns that directory with no symlink
/// in its path.
pub fn check_parents(path: &Path, what: &str) -> Result<std::path::PathBuf, String> {
    use std::path::{Component, PathBuf};
    const MAX_HOPS: usize = 40;
    let me = rustix::process::geteuid().as_raw();
    let refuse = |at: &Path, why: String| {
        format!(
            "is in {}, which {why}: another user could move it away; give a {what} \
             under directories of root's or yours that nobody else may write in",
            at.display()
        )
    };
    let Some(dir) = path.parent() else {
        return Ok(PathBuf::from("/"));
    };
    let mut todo: Vec<std::ffi::OsString> = dir
        .components()
        .rev()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_owned()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect();
    let mut at = PathBuf::from("/");
    let root = rustix::fs::lstat(&at).map_err(|e| format!("/: {e}"))?;
    if let Some(why) = unfit_parent(&root, me) {
        return Err(refuse(&at, why));
    }
    let mut hops = 0;
    while let Some(name) = todo.pop() {
        if name == ".." {
            at.pop();
            continue;
        }
        let next = at.join(&name);
        let st = rustix::fs::lstat(&next).map_err(|e| format!("{}: {e}", next.display()))?;
        if st.st_mode & libc::S_IFMT == libc::S_IFLNK {
            if st.st_uid != me && st.st_uid != 0 {
                return Err(refuse(
                    &next,
                    format!("is a symbolic link of uid {}'s", st.st_uid),
                ));
            }
            hops += 1;
            if hops > MAX_HOPS {
                return Err(format!("{}: too many symbolic links", next.display()));
            }
            let target =
                std::fs::read_link(&next).map_err(|e| format!("{}: {e}", next.display()))?;
            if target.is_absolute() {
                at = PathBuf::from("/");
            }
            for c in target.components().rev() {
                match c {
                    Component::Normal(n) => todo.push(n.to_owned()),
                    Component::ParentDir => todo.push("..".into()),
                    _ => {}
                }
            }
            continue;
        }
        if let Some(why) = unfit_parent(&st, me) {
            return Err(refuse(&next, why));
        }
        at = next;
    }
    Ok(at)
}

//! Trees of any depth, walked without recursion and without a path
//! longer than one name: a worker can make a tree as deep as it likes
//! (`mkdir d; cd d`, thousands of times), and every walk of a stage's
//! trees (the change report, commit, discard, checkpoints, rewind,
//! `stages`) must get through it. A recursion per level overflowed the
//! control thread's stack (the daemon died with the mount), and a path
//! past `PATH_MAX` (4096 bytes) failed with ENAMETOOLONG (a stage dir
//! that could be neither reviewed nor discarded). Found by an attack
//! pass.
//!
//! - [`DirStack`]: the directories from a walk's top down to where it is,
//!   each reached from its parent by one name; only the lowest
//!   [`WINDOW`] keep their fds, an ancestor's is opened again (its child's
//!   `..`, checked to be the same directory) when the walk climbs back.
//! - [`walk`]: a depth-first walk in name order, calling back for each
//!   entry and after each directory.
//! - [`remove_all`]: a whole tree removed.
//! - [`open_deep`]: a relative path of any length opened beneath a
//!   directory, at most [`CHUNK`] bytes of it per system call.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, ResolveFlags, Stat};
use rustix::io::Errno;

/// How many of the lowest directories of a [`DirStack`] keep an open fd.
pub const WINDOW: usize = 32;

/// The most bytes of a path resolved by one system call (well under
/// `PATH_MAX`, 4096 with its NUL).
pub const CHUNK: usize = 2048;

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// Directory `name` in `dir`, not followed if a symlink.
pub fn open_dir_at(dir: BorrowedFd<'_>, name: &OsStr) -> Result<OwnedFd, Errno> {
    rfs::openat(dir, name, dir_flags(), Mode::empty())
}

fn id(fd: BorrowedFd<'_>) -> Result<(u64, u64), Errno> {
    let st = rfs::fstat(fd)?;
    Ok((st.st_dev, st.st_ino))
}

/// One directory above the current one.
#[derive(Debug)]
struct Level {
    /// Its device and inode, to know it again.
    id: (u64, u64),
    /// None: closed (out of the window), opened again when needed.
    fd: Option<OwnedFd>,
}

/// The path of directories from a top directory down to the current
/// one, each reached from its parent by name without following a
/// symlink. Holds at most [`WINDOW`] + 2 fds whatever the depth.
#[derive(Debug)]
pub struct DirStack {
    /// The current directory.
    cur: OwnedFd,
    cur_id: (u64, u64),
    /// The directories above it, the top first (`up[0]`, whose fd is
    /// never closed).
    up: Vec<Level>,
    /// The names from the top down to the current directory.
    names: Vec<OsString>,
}

impl DirStack {
    /// A stack at `top` (a new fd of it is kept).
    pub fn new(top: BorrowedFd<'_>) -> Result<DirStack, Errno> {
        let cur = rustix::io::fcntl_dupfd_cloexec(top, 0)?;
        let cur_id = id(cur.as_fd())?;
        Ok(DirStack {
            cur,
            cur_id,
            up: Vec::new(),
            names: Vec::new(),
        })
    }

    /// How many levels below the top the current directory is.
    pub fn depth(&self) -> usize {
        self.names.len()
    }

    /// The current directory.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.cur.as_fd()
    }

    /// Go down into directory `name` of the current one (NOTDIR, LOOP:
    /// it is no directory; NOENT: it is gone).
    pub fn push(&mut self, name: &OsStr) -> Result<(), Errno> {
        let child = open_dir_at(self.cur.as_fd(), name)?;
        self.push_open(name, child)
    }

    /// [`DirStack::push`] with directory `name` already open (`child`).
    pub fn push_open(&mut self, name: &OsStr, child: OwnedFd) -> Result<(), Errno> {
        let child_id = id(child.as_fd())?;
        let parent = std::mem::replace(&mut self.cur, child);
        self.up.push(Level {
            id: self.cur_id,
            fd: Some(parent),
        });
        self.cur_id = child_id;
        self.names.push(name.to_os_string());
        if self.up.len() > WINDOW + 1 {
            let i = self.up.len() - 1 - WINDOW;
            if i > 0 {
                self.up[i].fd = None;
            }
        }
        Ok(())
    }

    /// Go back up to the parent; returns the name left (None at the
    /// top). The parent is open again before the caller may remove the
    /// child.
    pub fn pop(&mut self) -> Result<Option<OsString>, Errno> {
        let Some(parent) = self.up.pop() else {
            return Ok(None);
        };
        let name = self.names.pop();
        let fd = match parent.fd {
            Some(fd) => fd,
            None => {
                // Its child's `..`, if that is still it (a rename may
                // have moved the child elsewhere); else by name from
                // the nearest open ancestor.
                let dotdot = open_dir_at(self.cur.as_fd(), OsStr::new(".."))
                    .ok()
                    .filter(|fd| id(fd.as_fd()).is_ok_and(|i| i == parent.id));
                match dotdot {
                    Some(fd) => fd,
                    None => self.by_name()?,
                }
            }
        };
        self.cur_id = id(fd.as_fd())?;
        self.cur = fd;
        Ok(name)
    }

    /// The directory at the current depth (`names`), opened by name from
    /// the nearest ancestor that is open.
    fn by_name(&self) -> Result<OwnedFd, Errno> {
        let d = self.names.len();
        let from = (0..d).rev().find(|k| self.up[*k].fd.is_some()).unwrap_or(0);
        let mut fd = match &self.up[from].fd {
            Some(f) => rustix::io::fcntl_dupfd_cloexec(f, 0)?,
            None => return Err(Errno::BADF),
        };
        for n in &self.names[from..d] {
            fd = open_dir_at(fd.as_fd(), n)?;
        }
        Ok(fd)
    }
}

/// The names in directory `dir` (not `.` and `..`), with the type
/// readdir gives (`Unknown` where the filesystem gives none), sorted.
pub fn typed_names(dir: BorrowedFd<'_>) -> Result<Vec<(OsString, FileType)>, Errno> {
    let mut out = Vec::new();
    for e in rfs::Dir::read_from(dir)? {
        let e = e?;
        let n = e.file_name().to_bytes();
        if n != b"." && n != b".." {
            out.push((OsStr::from_bytes(n).to_os_string(), e.file_type()));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// The names in directory `dir`, sorted.
pub fn names(dir: BorrowedFd<'_>) -> Result<Vec<OsString>, Errno> {
    Ok(typed_names(dir)?.into_iter().map(|(n, _)| n).collect())
}

/// lstat of `name` in `dir`; None when nothing is there.
pub fn stat_at(dir: BorrowedFd<'_>, name: &OsStr) -> Result<Option<Stat>, Errno> {
    match rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

pub fn is_dir(st: &Stat) -> bool {
    FileType::from_raw_mode(st.st_mode) == FileType::Directory
}

/// An entry a [`walk`] met.
pub struct Entry<'a> {
    /// Its directory.
    pub dir: BorrowedFd<'a>,
    pub name: &'a OsStr,
    /// Its path below the walk's top.
    pub rel: &'a Path,
    /// How deep: 1 for the top's own entries.
    pub depth: usize,
    kind: FileType,
    st: Option<Option<Stat>>,
}

impl Entry<'_> {
    /// Its lstat (once); None when it is gone.
    pub fn stat(&mut self) -> Result<Option<Stat>, Errno> {
        if let Some(st) = self.st {
            return Ok(st);
        }
        let st = stat_at(self.dir, self.name)?;
        self.st = Some(st);
        Ok(st)
    }

    /// Whether it is a directory (readdir's type, else its lstat).
    pub fn is_dir(&mut self) -> Result<bool, Errno> {
        match self.kind {
            FileType::Unknown => Ok(self.stat()?.is_some_and(|st| is_dir(&st))),
            k => Ok(k == FileType::Directory),
        }
    }
}

/// What a [`walk`] does after an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visit {
    /// Go into it (a directory; anything else, or one gone, is passed).
    Enter,
    /// Go on with the next entry.
    Next,
    /// End the walk.
    Stop,
}

/// Walk the tree under directory `top` depth first, in name order:
/// `pre` for each entry; `post(parent, rel, name)` after the entries of
/// each directory entered (`parent`: the directory holding it). Any
/// depth: no recursion, and [`DirStack`]'s fds.
pub fn walk<E: From<Errno>>(
    top: BorrowedFd<'_>,
    pre: &mut dyn FnMut(&mut Entry<'_>) -> Result<Visit, E>,
    post: &mut dyn FnMut(BorrowedFd<'_>, &Path, &OsStr) -> Result<(), E>,
) -> Result<(), E> {
    let mut stack = DirStack::new(top)?;
    let mut first = typed_names(stack.fd())?;
    first.reverse();
    // Each level's names still to visit (reversed: the next one last).
    let mut todo: Vec<Vec<(OsString, FileType)>> = vec![first];
    let mut rel = PathBuf::new();
    loop {
        let next = todo.last_mut().and_then(Vec::pop);
        let Some((name, kind)) = next else {
            todo.pop();
            if todo.is_empty() {
                return Ok(());
            }
            let left = stack.pop()?.unwrap_or_default();
            post(stack.fd(), &rel, &left)?;
            rel.pop();
            continue;
        };
        rel.push(&name);
        let mut e = Entry {
            dir: stack.fd(),
            name: &name,
            rel: &rel,
            depth: todo.len(),
            kind,
            st: None,
        };
        let visit = pre(&mut e)?;
        let enter = visit == Visit::Enter && e.is_dir()?;
        match visit {
            Visit::Stop => return Ok(()),
            _ if !enter => {
                rel.pop();
                continue;
            }
            _ => {}
        }
        match stack.push(&name) {
            Ok(()) => {}
            // Gone, or no directory after all (replaced meanwhile).
            Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) => {
                rel.pop();
                continue;
            }
            Err(e) => return Err(e.into()),
        }
        let mut list = typed_names(stack.fd())?;
        list.reverse();
        todo.push(list);
    }
}

/// Remove `name` in `dir`, whatever it is: a directory with everything
/// under it, at any depth (never following a symlink). `open_up`: a
/// directory that can't be read is given owner rights first (the
/// overlay leaves its work dir's inner dirs at mode 0).
pub fn remove_all(dir: BorrowedFd<'_>, name: &OsStr, open_up: bool) -> Result<(), Errno> {
    match rfs::unlinkat(dir, name, AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) => return Ok(()),
        Err(Errno::ISDIR | Errno::PERM) => {}
        Err(e) => return Err(e),
    }
    let mut stack = DirStack::new(dir)?;
    match enter(&mut stack, name, open_up) {
        Ok(()) => {}
        Err(Errno::NOENT) => return Ok(()),
        Err(e) => return Err(e),
    }
    let mut todo: Vec<Vec<OsString>> = vec![names(stack.fd())?];
    loop {
        let next = todo.last_mut().and_then(Vec::pop);
        let Some(n) = next else {
            todo.pop();
            let left = stack.pop()?.unwrap_or_default();
            match rfs::unlinkat(stack.fd(), &left, AtFlags::REMOVEDIR) {
                Ok(()) | Err(Errno::NOENT) => {}
                Err(e) => return Err(e),
            }
            if todo.is_empty() {
                return Ok(());
            }
            continue;
        };
        match rfs::unlinkat(stack.fd(), &n, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => continue,
            Err(Errno::ISDIR | Errno::PERM) => {}
            Err(e) => return Err(e),
        }
        match enter(&mut stack, &n, open_up) {
            Ok(()) => {}
            Err(Errno::NOENT) => continue,
            Err(e) => return Err(e),
        }
        todo.push(names(stack.fd())?);
    }
}

/// [`DirStack::push`], giving the directory owner rights first when
/// `open_up` (through an `O_PATH` fd: a symlink put there meanwhile is
/// never followed).
fn enter(stack: &mut DirStack, name: &OsStr, open_up: bool) -> Result<(), Errno> {
    if open_up {
        use std::os::fd::AsRawFd;
        let fd = rfs::openat(
            stack.fd(),
            name,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let _ = rfs::chmod(
            format!("/proc/self/fd/{}", fd.as_raw_fd()),
            Mode::from_raw_mode(0o700),
        );
    }
    stack.push(name)
}

/// Open `rel` (relative, any length) beneath `dir` with `flags`: at
/// most [`CHUNK`] bytes of it resolved per `openat2` (with `resolve`),
/// each part from the directory the one before reached. An empty `rel`
/// is `dir` itself.
pub fn open_deep(
    dir: BorrowedFd<'_>,
    rel: &Path,
    flags: OFlags,
    resolve: ResolveFlags,
) -> Result<OwnedFd, Errno> {
    if rel.as_os_str().is_empty() {
        return rfs::openat(dir, ".", flags | OFlags::CLOEXEC, Mode::empty());
    }
    if rel.as_os_str().len() <= CHUNK {
        return rfs::openat2(dir, rel, flags | OFlags::CLOEXEC, Mode::empty(), resolve);
    }
    let parts = chunks(rel)?;
    let mut at: Option<OwnedFd> = None;
    let last = parts.len() - 1;
    for (i, part) in parts.iter().enumerate() {
        let from = at.as_ref().map_or(dir, AsFd::as_fd);
        let f = if i == last {
            flags
        } else {
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW
        };
        at = Some(rfs::openat2(
            from,
            *part,
            f | OFlags::CLOEXEC,
            Mode::empty(),
            resolve,
        )?);
    }
    at.ok_or(Errno::INVAL)
}

/// lstat of `rel` (relative, any length) under `dir`, as `statat` gives
/// it (a path past [`CHUNK`] bytes: its parent opened a part at a time).
pub fn stat_deep(dir: BorrowedFd<'_>, rel: &Path) -> Result<Stat, Errno> {
    if rel.as_os_str().len() <= CHUNK {
        return rfs::statat(dir, rel, AtFlags::SYMLINK_NOFOLLOW);
    }
    let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
        return Err(Errno::INVAL);
    };
    let p = open_deep(
        dir,
        parent,
        OFlags::PATH | OFlags::DIRECTORY,
        ResolveFlags::empty(),
    )?;
    rfs::statat(&p, name, AtFlags::SYMLINK_NOFOLLOW)
}

/// `rel` cut between names into parts of at most [`CHUNK`] bytes (the
/// bytes scanned once: `Path::components` on each was most of the time
/// a deep commit took).
fn chunks(rel: &Path) -> Result<Vec<&OsStr>, Errno> {
    let bytes = rel.as_os_str().as_bytes();
    let mut out = Vec::new();
    // The part being gathered: bytes[start..end] (end: after its last
    // name so far).
    let (mut start, mut end) = (0usize, 0usize);
    let mut i = 0usize;
    while i < bytes.len() {
        let j = bytes[i..]
            .iter()
            .position(|b| *b == b'/')
            .map_or(bytes.len(), |k| i + k);
        match &bytes[i..j] {
            b"" | b"." => {}
            b".." => return Err(Errno::XDEV),
            name if name.len() > 255 => return Err(Errno::NAMETOOLONG),
            _ => {
                if end > start && j - start > CHUNK {
                    out.push(OsStr::from_bytes(&bytes[start..end]));
                    start = i;
                } else if end == start {
                    start = i;
                }
                end = j;
            }
        }
        i = j + 1;
    }
    if bytes.first() == Some(&b'/') {
        // `/` would start over at the root.
        return Err(Errno::XDEV);
    }
    out.push(OsStr::from_bytes(&bytes[start..end]));
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// `n` levels of `name` made under `top` (mkdirat from each level's
    /// fd: no path grows); a file `leaf` at the bottom. Returns the path.
    pub(crate) fn chain(top: &Path, name: &str, n: usize) -> PathBuf {
        let mut d = rfs::open(top, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
        for _ in 0..n {
            rfs::mkdirat(&d, name, Mode::from_raw_mode(0o755)).unwrap();
            d = open_dir_at(d.as_fd(), OsStr::new(name)).unwrap();
        }
        let f = rfs::openat(
            &d,
            "leaf",
            OFlags::WRONLY | OFlags::CREATE,
            Mode::from_raw_mode(0o644),
        )
        .unwrap();
        rustix::io::write(&f, b"leaf\n").unwrap();
        std::iter::repeat_n(name, n).collect()
    }

    fn open(p: &Path) -> OwnedFd {
        rfs::open(p, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap()
    }

    #[test]
    fn a_walk_reaches_the_bottom_of_a_tree_deeper_than_path_max() {
        let t = tempfile::tempdir().unwrap();
        let rel = chain(t.path(), "dd", 3000);
        assert!(rel.as_os_str().len() > 4096 * 2);
        // A sibling at each of a few levels: the walk climbs back to them.
        let mut seen = 0usize;
        let mut deepest = 0usize;
        let mut dirs_left = 0usize;
        let top = open(t.path());
        walk::<Errno>(
            top.as_fd(),
            &mut |e| {
                seen += 1;
                deepest = deepest.max(e.depth);
                if e.name == "leaf" {
                    assert_eq!(e.rel, rel.join("leaf"));
                    assert!(e.stat()?.is_some_and(|s| s.st_size == 5));
                }
                Ok(Visit::Enter)
            },
            &mut |parent, _, name| {
                dirs_left += 1;
                assert!(stat_at(parent, name)?.is_some_and(|s| is_dir(&s)));
                Ok(())
            },
        )
        .unwrap();
        assert_eq!((seen, deepest, dirs_left), (3001, 3001, 3000));
        let o = open_deep(
            top.as_fd(),
            &rel.join("leaf"),
            OFlags::RDONLY | OFlags::NOFOLLOW,
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS,
        )
        .unwrap();
        assert_eq!(rfs::fstat(&o).unwrap().st_size, 5);
        remove_all(top.as_fd(), OsStr::new("dd"), false).unwrap();
        assert!(names(top.as_fd()).unwrap().is_empty());
    }

    #[test]
    fn a_long_path_is_cut_between_names() {
        let long: PathBuf = std::iter::repeat_n("abc", 2000).collect();
        let parts = chunks(&long).unwrap();
        assert!(parts.len() > 1);
        assert!(parts.iter().all(|p| p.len() <= CHUNK && !p.is_empty()));
        let joined: PathBuf = parts.iter().collect();
        assert_eq!(joined, long);
        let odd = Path::new("./a//b/./c");
        assert_eq!(chunks(odd).unwrap(), [OsStr::new("a//b/./c")]);
        assert_eq!(chunks(Path::new("a/../b")), Err(Errno::XDEV));
        assert_eq!(chunks(Path::new("/a")), Err(Errno::XDEV));
    }

    /// Out of the window, a directory is opened again when the walk
    /// climbs back to it; one a rename moved meanwhile is found by name.
    #[test]
    fn a_stack_climbs_back_past_its_window() {
        let t = tempfile::tempdir().unwrap();
        chain(t.path(), "a", WINDOW * 3);
        let top = open(t.path());
        let mut s = DirStack::new(top.as_fd()).unwrap();
        let mut ids = vec![id(s.fd()).unwrap()];
        for _ in 0..WINDOW * 3 {
            s.push(OsStr::new("a")).unwrap();
            ids.push(id(s.fd()).unwrap());
        }
        for d in (0..WINDOW * 3).rev() {
            assert_eq!(s.pop().unwrap().as_deref(), Some(OsStr::new("a")));
            assert_eq!(s.depth(), d);
            assert_eq!(id(s.fd()).unwrap(), ids[d], "depth {d}");
        }
        assert_eq!(s.pop().unwrap(), None);
    }
}

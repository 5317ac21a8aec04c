//! A staged zone's checkpoints as overlay layers. A checkpoint freezes
//! the stage's upper dir as `<zone>/layers/<id>` (a rename: no file data
//! is copied) and starts a fresh upper dir; the zone's overlay is then
//! the upper dir over every layer, newest first, over the backing dir.
//!
//! - [`freeze`]: a checkpoint; files open for writing are captured as
//!   they are at that instant: the open inode moves on to the fresh upper
//!   dir (its writer keeps writing to the live view) and a copy of it
//!   stays in the frozen layer, under each of its names there.
//! - [`apply`]: one layer laid onto another as the overlay would show the
//!   two (whiteouts and opaque dirs kept), by moving entries (merging
//!   layers: a commit, the bounded number of layers) or by hard links (a
//!   flattened copy of several layers, for a change report).
//! - [`rewind`], [`merge`]: whole-layer changes, journaled in the
//!   manifest ([`Pending`]) before they start; [`recover`] finishes (or,
//!   for a checkpoint, undoes) one found there.
//! - [`view`]: a read-only overlay of some layers over the backing dir:
//!   the zone as it was at a checkpoint.
//! - The flattened lower (`<zone>/flat/<id>`, [`build_flat`]): every
//!   layer up to checkpoint `id` laid into one dir as copies (cloned
//!   where the filesystem can: a hard link would show the worker one link
//!   more on each file and change its ctime), built off the request path
//!   after a checkpoint and taken over at the next one. The live overlay
//!   is then the upper dir over the later layers over the flat over the
//!   backing dir ([`live_lower`]): overlayfs looks a name up in each
//!   lower layer until it finds it, and this bounds how many there are.
//!   A checkpoint's own view, a rewind and the change reports still
//!   compose the real layers. The manifest names the valid flat (`flat`);
//!   a half-built one (in `<zone>/tmp/`) or one it does not name is removed
//!   when the stage is opened ([`clean`], [`clean_flats`]).

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, Stat, Timespec, Timestamps};
use rustix::io::Errno;

use super::dir::{Pending, ZoneEntry};
use super::sys::overlay;
use super::tree::{Root, remove_all};
use super::walk::{self, DirStack, Visit, is_dir, names, open_dir_at, stat_at};

/// `<zone>/layers/<id>`: checkpoint `id`'s frozen layer.
pub fn layer_dir(zdir: &Path, id: u64) -> PathBuf {
    zdir.join("layers").join(id.to_string())
}

/// A zone's layer dirs, oldest first.
pub fn layer_dirs(zdir: &Path, entry: &ZoneEntry) -> Vec<PathBuf> {
    entry
        .checkpoints
        .iter()
        .map(|c| layer_dir(zdir, c.id))
        .collect()
}

/// `<zone>/flat/<id>`: the flattened lower holding every layer up to
/// checkpoint `id`.
pub fn flat_dir(zdir: &Path, id: u64) -> PathBuf {
    zdir.join("flat").join(id.to_string())
}

/// How many of the newest layers stay lowers of their own when a flat
/// is built (the next checkpoints' rewinds and views need no flat).
pub const FLAT_KEEP: usize = 2;

/// A flat is built once more layers than this are above the flat (or
/// there is none): the live overlay has at most about this many layers
/// between its upper dir and the flat (one more until the next
/// checkpoint takes the built flat over).
pub const FLAT_AFTER: usize = 4;

/// The most file data a flat is built with (its base and the layers laid
/// onto it, as their files' sizes add up): a flat copies it all where
/// the filesystem can't clone (ext4), again for each new flat. Past it no
/// flat is built: the live overlay then keeps every layer (at most
/// `--max-checkpoints`), as before flats.
pub const FLAT_MAX_BYTES: u64 = 512 << 20;

/// How many bytes the regular files under `dirs` hold (symlinks not
/// followed); stops counting past `limit`. Any depth: a loop.
fn data_bytes(dirs: &[PathBuf], limit: u64) -> u64 {
    let mut total = 0u64;
    for d in dirs {
        let Ok(top) = open_dir(d) else { continue };
        let _ = walk::walk::<Errno>(
            top.as_fd(),
            &mut |e| {
                if total > limit {
                    return Ok(Visit::Stop);
                }
                if e.is_dir()? {
                    return Ok(Visit::Enter);
                }
                if let Some(st) = e.stat()? {
                    if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile {
                        total = total.saturating_add(u64::try_from(st.st_size).unwrap_or(0));
                    }
                }
                Ok(Visit::Next)
            },
            &mut |_, _, _| Ok(()),
        );
    }
    total
}

/// The live overlay's lower dirs, topmost first: the layers of `ids`
/// (oldest first) after the flat `flat`, newest first, then the flat.
pub fn live_lower(zdir: &Path, ids: &[u64], flat: Option<u64>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = ids
        .iter()
        .rev()
        .filter(|id| flat.is_none_or(|f| **id > f))
        .map(|id| layer_dir(zdir, *id))
        .collect();
    if let Some(f) = flat {
        out.push(flat_dir(zdir, f));
    }
    out
}

/// What the next flat should hold, when one is due (more than
/// [`FLAT_AFTER`] layers of `ids` above the flat `flat`): the checkpoint
/// it goes up to (all but the newest [`FLAT_KEEP`]) and the layers to lay
/// onto the current flat for it, oldest first.
pub fn flat_plan(ids: &[u64], flat: Option<u64>) -> Option<(u64, Vec<u64>)> {
    let above: Vec<u64> = ids
        .iter()
        .copied()
        .filter(|id| flat.is_none_or(|f| *id > f))
        .collect();
    if above.len() <= FLAT_AFTER {
        return None;
    }
    let take = above[..above.len() - FLAT_KEEP].to_vec();
    Some((*take.last()?, take))
}

/// A new flat, made in a scratch dir (`<zone>/tmp/flat-*`, whose path is
/// returned): the flat `base` (none: an empty dir) with the layers `ids`
/// (oldest first) laid onto it, all as copies ([`How::Copy`]), less the
/// whiteouts that hide nothing of `backing`. Only reads the layers and
/// the base; on an error the scratch dir is removed.
pub fn build_flat(
    zdir: &Path,
    backing: &Path,
    base: Option<u64>,
    ids: &[u64],
    prefix: &str,
) -> io::Result<PathBuf> {
    let dirs: Vec<PathBuf> = base
        .map(|b| flat_dir(zdir, b))
        .into_iter()
        .chain(ids.iter().map(|id| layer_dir(zdir, *id)))
        .collect();
    if data_bytes(&dirs, FLAT_MAX_BYTES) > FLAT_MAX_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!(
                "its layers hold more than {} MiB of file data, which a flat would copy: none is built",
                FLAT_MAX_BYTES >> 20
            ),
        ));
    }
    let path = scratch(zdir, "flat")?;
    mkdir(&path)?;
    let built = (|| {
        let td = open_dir(&path)?;
        lay_copies(&dirs, td.as_fd(), prefix)?;
        // Only the backing dir is below a flat.
        prune_whiteouts(
            td.as_fd(),
            Path::new(""),
            &[backing.to_path_buf()],
            prefix,
            false,
        )
    })();
    match built {
        Ok(()) => Ok(path),
        Err(e) => {
            let _ = remove_path(&path);
            Err(e)
        }
    }
}

/// A flat built by [`build_flat`] put in place as `flat/<upto>` (the
/// caller then names it in the manifest).
pub fn place_flat(zdir: &Path, built: &Path, upto: u64) -> io::Result<()> {
    mkdir(&zdir.join("flat"))?;
    let to = flat_dir(zdir, upto);
    remove_path(&to)?;
    rename(built, &to)
}

/// Flat `id` moved out of `flat/` to `<zone>/trash/` (emptied after the
/// answer, or when the stage is next opened), if it is there.
pub fn retire_flat(zdir: &Path, id: u64) -> io::Result<()> {
    let from = flat_dir(zdir, id);
    if !exists(&from) {
        return Ok(());
    }
    let trash = zdir.join("trash");
    mkdir(&trash)?;
    let n = SCRATCH.fetch_add(1, Ordering::Relaxed);
    rename(
        &from,
        &trash.join(format!("flat-{id}-{}-{n}", std::process::id())),
    )
}

/// When the stage is opened (no operation runs): every dir under
/// `flat/` but the one `entry` names removed (a flat put in place whose
/// manifest was not saved, or one that was replaced); `entry.flat`
/// cleared when its dir is gone or covers no kept layer's place.
/// Returns whether `entry` changed.
pub fn clean_flats(zdir: &Path, entry: &mut ZoneEntry) -> io::Result<bool> {
    let before = entry.flat;
    if entry
        .flat
        .is_some_and(|f| !exists(&flat_dir(zdir, f)) || entry.checkpoints.is_empty())
    {
        entry.flat = None;
    }
    if let Ok(list) = std::fs::read_dir(zdir.join("flat")) {
        for e in list.flatten() {
            let name = e.file_name();
            let keep = entry
                .flat
                .is_some_and(|f| name.to_str() == Some(f.to_string().as_str()));
            if !keep {
                remove_path(&e.path())?;
            }
        }
    }
    Ok(entry.flat != before)
}

/// How [`apply`] lays an entry down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    /// Renamed from the newer layer (which is used up).
    Move,
    /// Hard links (directories made anew): the newer layer is kept.
    Link,
    /// Copies (directories made anew; a file's data cloned where the
    /// filesystem can, names that were hard links of one file linked to
    /// one copy; whiteouts hard-linked): the newer layer is kept, and its
    /// files keep their link counts (a flat the live overlay shows).
    Copy,
}

fn ctx(e: Errno, what: &str, p: &Path) -> io::Error {
    io::Error::new(
        io::Error::from(e).kind(),
        format!("{what} {}: {e}", p.display()),
    )
}

fn nofollow() -> OFlags {
    OFlags::NOFOLLOW | OFlags::CLOEXEC
}

fn open_dir(p: &Path) -> io::Result<OwnedFd> {
    rfs::open(
        p,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| ctx(e, "open", p))
}

/// `paths` (relative, any order) less each one under another of them,
/// sorted: telling the kernel to forget a directory's name forgets what
/// it cached under it.
pub fn topmost(mut paths: Vec<PathBuf>) -> Vec<PathBuf> {
    paths.sort();
    paths.dedup();
    let mut out: Vec<PathBuf> = Vec::with_capacity(paths.len());
    for p in paths {
        if out.last().is_some_and(|top| p.starts_with(top)) {
            continue;
        }
        out.push(p);
    }
    out
}

fn opaque_name(prefix: &str) -> String {
    format!("{prefix}opaque")
}

fn is_opaque(dir: BorrowedFd<'_>, prefix: &str) -> bool {
    let mut buf = [0u8; 8];
    matches!(rfs::fgetxattr(dir, opaque_name(prefix).as_str(), &mut buf[..]), Ok(n) if n >= 1 && buf[0] == b'y')
}

fn set_opaque(dir: BorrowedFd<'_>, prefix: &str) -> Result<(), Errno> {
    rfs::fsetxattr(
        dir,
        opaque_name(prefix).as_str(),
        b"y",
        rfs::XattrFlags::empty(),
    )
}

/// The extended attributes of `fd` (those this process may read).
fn xattrs_of(fd: BorrowedFd<'_>) -> Vec<(OsString, Vec<u8>)> {
    let mut list = vec![0u8; 64 * 1024];
    let Ok(n) = rfs::flistxattr(fd, &mut list[..]) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for name in list[..n].split(|b| *b == 0).filter(|s| !s.is_empty()) {
        let name = OsStr::from_bytes(name);
        let mut v = vec![0u8; 64 * 1024];
        if let Ok(len) = rfs::fgetxattr(fd, name, &mut v[..]) {
            v.truncate(len);
            out.push((name.to_os_string(), v));
        }
    }
    out
}

/// Whether an xattr name is one a layer copy keeps: the overlay's
/// markers and the user's own.
fn kept(name: &OsStr, prefix: &str) -> bool {
    let n = name.as_bytes();
    n.starts_with(prefix.as_bytes()) || n.starts_with(b"user.")
}

/// Give `to` the mode, owner, times and xattrs of `from` (`st`): the
/// overlay's markers are set when `markers`, never removed.
fn copy_attrs(
    from: BorrowedFd<'_>,
    to: BorrowedFd<'_>,
    st: &Stat,
    prefix: &str,
    markers: bool,
) -> Result<(), Errno> {
    let theirs = xattrs_of(from);
    for (name, value) in &theirs {
        let overlay = name.as_bytes().starts_with(prefix.as_bytes());
        if kept(name, prefix) && (markers || !overlay) {
            rfs::fsetxattr(to, name.as_os_str(), value, rfs::XattrFlags::empty())?;
        }
    }
    for (name, _) in xattrs_of(to) {
        let overlay = name.as_bytes().starts_with(prefix.as_bytes());
        if kept(&name, prefix) && !overlay && !theirs.iter().any(|(n, _)| *n == name) {
            let _ = rfs::fremovexattr(to, name.as_os_str());
        }
    }
    if rustix::process::geteuid().is_root() {
        rfs::fchown(
            to,
            Some(rfs::Uid::from_raw(st.st_uid)),
            Some(rfs::Gid::from_raw(st.st_gid)),
        )?;
    }
    rfs::fchmod(to, Mode::from_raw_mode(st.st_mode & 0o7777))?;
    rfs::futimens(
        to,
        &Timestamps {
            last_access: Timespec {
                tv_sec: st.st_atime,
                tv_nsec: st.st_atime_nsec as _,
            },
            last_modification: Timespec {
                tv_sec: st.st_mtime,
                tv_nsec: st.st_mtime_nsec as _,
            },
        },
    )
}

/// What a [`How::Copy`] made so far: the root of the copy, and where the
/// first copy of each file with several links is (relative to it).
#[derive(Default)]
struct Copies {
    root: Option<OwnedFd>,
    seen: std::collections::HashMap<(u64, u64), PathBuf>,
}

impl Copies {
    /// `name` in `s` (`st`, not a directory) laid as `name` in `t` (at
    /// `rel` under the root).
    fn put(
        &mut self,
        s: BorrowedFd<'_>,
        name: &OsStr,
        st: &Stat,
        t: BorrowedFd<'_>,
        rel: &Path,
        prefix: &str,
    ) -> Result<(), Errno> {
        match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => {
                let key = (st.st_dev, st.st_ino);
                if st.st_nlink > 1 {
                    // The first copy, if it is still that file's: reached
                    // without following a symlink (a later layer may have
                    // put one in place of a directory on its way).
                    let first = self.seen.get(&key).and_then(|first| {
                        let root = self.root.as_ref()?;
                        let dir = dir_beneath(root.as_fd(), first.parent()?)?;
                        Some((dir, first.file_name()?.to_os_string()))
                    });
                    if let Some((dir, file)) = first {
                        let same = stat_at(dir.as_fd(), &file)?.is_some_and(|c| {
                            FileType::from_raw_mode(c.st_mode) == FileType::RegularFile
                                && (c.st_size, c.st_mtime, c.st_mtime_nsec)
                                    == (st.st_size, st.st_mtime, st.st_mtime_nsec)
                        });
                        if same {
                            return rfs::linkat(&dir, &file, t, name, AtFlags::empty());
                        }
                    }
                }
                copy_file(s, name, st, t, prefix)?;
                if st.st_nlink > 1 {
                    self.seen.insert(key, rel.to_path_buf());
                }
                Ok(())
            }
            FileType::Symlink => copy_symlink(s, name, st, t),
            kind @ (FileType::Fifo | FileType::Socket) => {
                rfs::mknodat(t, name, kind, Mode::from_raw_mode(st.st_mode & 0o7777), 0)?;
                own_as(t, name, st)
            }
            // A whiteout (or a device node): nothing shows its links.
            _ => rfs::linkat(s, name, t, name, AtFlags::empty()),
        }
    }
}

/// The symlink `name` of `from` (`st` its stat) made anew in `to`, with
/// its owner where this process may set one.
fn copy_symlink(
    from: BorrowedFd<'_>,
    name: &OsStr,
    st: &Stat,
    to: BorrowedFd<'_>,
) -> Result<(), Errno> {
    let target = rfs::readlinkat(from, name, Vec::new())?;
    rfs::symlinkat(target.as_c_str(), to, name)?;
    own_as(to, name, st)
}

/// `name` in `dir` (not followed) given the owner in `st`, where this
/// process may set one (root).
fn own_as(dir: BorrowedFd<'_>, name: &OsStr, st: &Stat) -> Result<(), Errno> {
    if rustix::process::geteuid().is_root() {
        rfs::chownat(
            dir,
            name,
            Some(rfs::Uid::from_raw(st.st_uid)),
            Some(rfs::Gid::from_raw(st.st_gid)),
            AtFlags::SYMLINK_NOFOLLOW,
        )?;
    }
    Ok(())
}

/// Regular file `name` in `s` (`st`) copied as `name` in `t`: cloned
/// where the filesystem can (no data copied), else copied in the kernel;
/// mode, owner, times, user xattrs and the overlay's markers kept.
fn copy_file(
    s: BorrowedFd<'_>,
    name: &OsStr,
    st: &Stat,
    t: BorrowedFd<'_>,
    prefix: &str,
) -> Result<(), Errno> {
    let src = rfs::openat(s, name, OFlags::RDONLY | nofollow(), Mode::empty())?;
    let dst = rfs::openat(
        t,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | nofollow(),
        Mode::from_raw_mode(0o600),
    )?;
    if rfs::ioctl_ficlone(&dst, &src).is_err() {
        let mut left = u64::try_from(st.st_size).unwrap_or(0);
        while left > 0 {
            let chunk = usize::try_from(left.min(1 << 30)).unwrap_or(1 << 30);
            match rfs::copy_file_range(&src, None, &dst, None, chunk) {
                Ok(0) => break,
                Ok(n) => left = left.saturating_sub(n as u64),
                Err(Errno::INTR) => {}
                Err(Errno::XDEV | Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP) => {
                    let (mut a, mut b) = (std::fs::File::from(src), std::fs::File::from(dst));
                    rfs::ftruncate(&b, 0)?;
                    io::copy(&mut a, &mut b)
                        .map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::IO))?;
                    return copy_attrs(a.as_fd(), b.as_fd(), st, prefix, true);
                }
                Err(e) => return Err(e),
            }
        }
    }
    copy_attrs(src.as_fd(), dst.as_fd(), st, prefix, true)
}

/// Lay layer `s` onto the older layer `t`, so that `t` shows what the two
/// showed stacked: an entry of `s` replaces `t`'s (a whiteout stays a
/// whiteout: it still hides what is below `t`); a directory of `s` that
/// is not opaque is laid into `t`'s directory, entry by entry, and gives
/// it its own attributes; a directory that took the place of something
/// in `t` is made opaque (what was below was hidden). `Move` renames each
/// entry out of `s` (run again after a crash, it completes), `Link`
/// hard-links it (`t` a scratch dir), `Copy` copies it (`t` a scratch
/// dir, see [`lay_copies`]).
pub fn apply(s: BorrowedFd<'_>, t: BorrowedFd<'_>, how: How, prefix: &str) -> Result<(), Errno> {
    lay(s, t, Path::new(""), how, prefix, &mut Copies::default())
}

/// `dirs` (oldest first) laid by copies onto the scratch dir `t`, one
/// after the other, as [`apply`] with [`How::Copy`] (names that are hard
/// links of one file in any of them stay links of one copy).
pub fn lay_copies(dirs: &[PathBuf], t: BorrowedFd<'_>, prefix: &str) -> io::Result<()> {
    let mut copies = Copies {
        root: Some(rfs::openat(
            t,
            ".",
            OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )?),
        seen: Default::default(),
    };
    for d in dirs {
        lay(
            open_dir(d)?.as_fd(),
            t,
            Path::new(""),
            How::Copy,
            prefix,
            &mut copies,
        )
        .map_err(|e| ctx(e, "flatten", d))?;
    }
    Ok(())
}

/// A directory [`lay`] is in.
struct LayFrame {
    /// Its entries still to lay (the next one last).
    names: Vec<OsString>,
    /// Its own stat in the newer layer (None: the top).
    st: Option<Stat>,
}

/// The names in `dir`, the first last (to pop).
fn todo_of(dir: BorrowedFd<'_>) -> Result<Vec<OsString>, Errno> {
    let mut n = names(dir)?;
    n.reverse();
    Ok(n)
}

/// [`apply`] from `rel` (any depth: a loop over both trees at once).
fn lay(
    s: BorrowedFd<'_>,
    t: BorrowedFd<'_>,
    rel: &Path,
    how: How,
    prefix: &str,
    copies: &mut Copies,
) -> Result<(), Errno> {
    let mut sk = DirStack::new(s)?;
    let mut tk = DirStack::new(t)?;
    let mut rel = rel.to_path_buf();
    let mut frames = vec![LayFrame {
        names: todo_of(sk.fd())?,
        st: None,
    }];
    while let Some(frame) = frames.last_mut() {
        let Some(name) = frame.names.pop() else {
            // A directory laid into `t`'s: its own attributes, then (when
            // moving) the emptied source goes.
            let Some(ss) = frames.pop().and_then(|f| f.st) else {
                break;
            };
            copy_attrs(sk.fd(), tk.fd(), &ss, prefix, false)?;
            let left = sk.pop()?.unwrap_or_default();
            tk.pop()?;
            if how == How::Move {
                let _ = rfs::unlinkat(sk.fd(), &left, AtFlags::REMOVEDIR);
            }
            rel.pop();
            continue;
        };
        let (s, t) = (sk.fd(), tk.fd());
        let Some(ss) = stat_at(s, &name)? else {
            continue;
        };
        let ts = stat_at(t, &name)?;
        let at = rel.join(&name);
        if is_dir(&ss) {
            let sd = open_dir_at(s, &name)?;
            let s_opaque = is_opaque(sd.as_fd(), prefix);
            if let (Some(tst), false) = (ts.as_ref(), s_opaque) {
                if is_dir(tst) {
                    let td = open_dir_at(t, &name)?;
                    sk.push_open(&name, sd)?;
                    tk.push_open(&name, td)?;
                    rel = at;
                    frames.push(LayFrame {
                        names: todo_of(sk.fd())?,
                        st: Some(ss),
                    });
                    continue;
                }
            }
            // It replaces whatever `t` has there: opaque first (when
            // moving, on the source: a rerun then sees it so).
            let make_opaque = ts.is_some() && !s_opaque;
            if make_opaque && how == How::Move {
                set_opaque(sd.as_fd(), prefix)?;
            }
            if ts.is_some() {
                remove_all(t, &name)?;
            }
            match how {
                How::Move => rfs::renameat(s, &name, t, &name)?,
                How::Link | How::Copy => {
                    link_tree(s, &name, &ss, t, &at, how, prefix, copies)?;
                    if make_opaque {
                        set_opaque(open_dir_at(t, &name)?.as_fd(), prefix)?;
                    }
                }
            }
        } else {
            if ts.is_some() {
                remove_all(t, &name)?;
            }
            match how {
                How::Move => rfs::renameat(s, &name, t, &name)?,
                How::Link => rfs::linkat(s, &name, t, &name, AtFlags::empty())?,
                How::Copy => copies.put(s, &name, &ss, t, &at, prefix)?,
            }
        }
    }
    Ok(())
}

/// Directory `name` of `s` (`st`) made again as `name` in `t` (at
/// `rel`), its entries hard links (or copies), its attributes and the
/// overlay's markers copied.
#[allow(clippy::too_many_arguments)]
fn link_tree(
    s: BorrowedFd<'_>,
    name: &OsStr,
    st: &Stat,
    t: BorrowedFd<'_>,
    rel: &Path,
    how: How,
    prefix: &str,
    copies: &mut Copies,
) -> Result<(), Errno> {
    make_tree(
        s,
        name,
        st,
        t,
        rel,
        &mut |_| {},
        &mut |sd, n, cs, td, at| {
            if how == How::Copy {
                copies.put(sd, n, cs, td, at, prefix)
            } else {
                rfs::linkat(sd, n, td, n, AtFlags::empty())
            }
        },
        &mut |sd, td, st| copy_attrs(sd, td, st, prefix, true),
    )
}

/// A leaf of a tree [`make_tree`] makes: `name` in `s` (its stat) put
/// as `name` in `t` (at a path).
type Leaf<'a> =
    dyn FnMut(BorrowedFd<'_>, &OsStr, &Stat, BorrowedFd<'_>, &Path) -> Result<(), Errno> + 'a;

/// Directory `name` of `s` (`st`) made again as `name` in `t` (at
/// `rel`), at any depth (a loop): each directory made, each entry that
/// is not one given to `leaf`, `seen` told each path below `rel`, and
/// each directory given its attributes (`attrs`) once its entries are in.
#[allow(clippy::too_many_arguments)]
fn make_tree(
    s: BorrowedFd<'_>,
    name: &OsStr,
    st: &Stat,
    t: BorrowedFd<'_>,
    rel: &Path,
    seen: &mut dyn FnMut(&Path),
    leaf: &mut Leaf<'_>,
    attrs: &mut dyn FnMut(BorrowedFd<'_>, BorrowedFd<'_>, &Stat) -> Result<(), Errno>,
) -> Result<(), Errno> {
    let mut sk = DirStack::new(s)?;
    sk.push(name)?;
    rfs::mkdirat(t, name, Mode::from_raw_mode(0o700))?;
    let mut tk = DirStack::new(t)?;
    tk.push(name)?;
    let mut rel = rel.to_path_buf();
    // Each directory's entries still to make, and its stat.
    let mut frames: Vec<(Vec<OsString>, Stat)> = vec![(todo_of(sk.fd())?, *st)];
    while let Some((todo, _)) = frames.last_mut() {
        let Some(n) = todo.pop() else {
            if let Some((_, dst)) = frames.pop() {
                attrs(sk.fd(), tk.fd(), &dst)?;
            }
            sk.pop()?;
            tk.pop()?;
            rel.pop();
            continue;
        };
        let Some(cs) = stat_at(sk.fd(), &n)? else {
            continue;
        };
        let at = rel.join(&n);
        seen(&at);
        if is_dir(&cs) {
            rfs::mkdirat(tk.fd(), &n, Mode::from_raw_mode(0o700))?;
            sk.push(&n)?;
            tk.push(&n)?;
            rel = at;
            frames.push((todo_of(sk.fd())?, cs));
        } else {
            leaf(sk.fd(), &n, &cs, tk.fd(), &at)?;
        }
    }
    Ok(())
}

/// Remove `p` and all under it, if it is there.
fn remove_path(p: &Path) -> io::Result<()> {
    let (Some(parent), Some(name)) = (p.parent(), p.file_name()) else {
        return Ok(());
    };
    match open_dir(parent) {
        Ok(d) => remove_all(d.as_fd(), name).map_err(|e| ctx(e, "remove", p)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

fn exists(p: &Path) -> bool {
    p.symlink_metadata().is_ok()
}

fn mkdir(p: &Path) -> io::Result<()> {
    match rfs::mkdir(p, Mode::from_raw_mode(0o700)) {
        Ok(()) | Err(Errno::EXIST) => Ok(()),
        Err(e) => Err(ctx(e, "make", p)),
    }
}

fn rename(from: &Path, to: &Path) -> io::Result<()> {
    rfs::rename(from, to).map_err(|e| ctx(e, &format!("rename {} to", from.display()), to))
}

static SCRATCH: AtomicU64 = AtomicU64::new(0);

/// A scratch name under `<zone>/tmp/`, unique in this process.
fn scratch(zdir: &Path, what: &str) -> io::Result<PathBuf> {
    let tmp = zdir.join("tmp");
    mkdir(&tmp)?;
    Ok(tmp.join(format!(
        "{what}-{}-{}",
        std::process::id(),
        SCRATCH.fetch_add(1, Ordering::Relaxed)
    )))
}

/// Empty `<zone>/tmp/` and `<zone>/trash/` (leftovers of a crash): only
/// while the stage is locked and no operation runs.
pub fn clean(zdir: &Path) -> io::Result<()> {
    for sub in ["tmp", "trash"] {
        remove_path(&zdir.join(sub))?;
    }
    Ok(())
}

/// Take checkpoint `id`: the upper dir becomes `layers/<id>`, a fresh
/// upper dir starts; each of `open` (files of the zone open for writing,
/// through its overlay, with their paths in the zone where known) goes on
/// in the fresh upper dir, with a copy of it as it is now left in the
/// layer. The caller holds mutations still and has journaled
/// [`Pending::Checkpoint`].
pub fn freeze(
    zdir: &Path,
    id: u64,
    open: &[(BorrowedFd<'_>, Option<&Path>)],
    prefix: &str,
) -> io::Result<()> {
    let upper = zdir.join("upper");
    let layer = layer_dir(zdir, id);
    mkdir(&zdir.join("layers"))?;
    rename(&upper, &layer)?;
    mkdir(&upper)?;
    if open.is_empty() {
        return Ok(());
    }
    let ld = open_dir(&layer)?;
    let ud = open_dir(&upper)?;
    // A file open through several handles (a close whose release has not
    // arrived yet, then an open) is captured once: a second capture would
    // take the first one's copy for the file and move it over it.
    let mut done = std::collections::HashSet::new();
    for (fd, at) in open {
        let st = rfs::fstat(*fd)?;
        if !done.insert((st.st_dev, st.st_ino)) {
            continue;
        }
        capture(zdir, ld.as_fd(), ud.as_fd(), *fd, *at, prefix)
            .map_err(|e| io::Error::new(e.kind(), format!("a file open for writing: {e}")))?;
    }
    Ok(())
}

/// One file open for writing (`fd`, through the overlay; `at`: its path
/// as the mount last saw it), captured.
fn capture(
    zdir: &Path,
    layer: BorrowedFd<'_>,
    upper: BorrowedFd<'_>,
    fd: BorrowedFd<'_>,
    at: Option<&Path>,
    prefix: &str,
) -> io::Result<()> {
    let st = rfs::fstat(fd)?;
    if st.st_nlink == 0 || FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        // Unlinked: in no layer's view.
        return Ok(());
    }
    // Where the mount last saw it, or its name in the overlay it was
    // opened through: the first whose file in the layer is this one (the
    // overlay shows the real file's size, times and mode); else the file
    // in the layer that is (a rename through a later overlay).
    let link = rfs::readlinkat(
        rfs::CWD,
        format!("/proc/self/fd/{}", fd.as_raw_fd()),
        Vec::new(),
    )?;
    let named = Path::new(OsStr::from_bytes(link.as_bytes()))
        .strip_prefix("/")
        .ok()
        .map(Path::to_path_buf);
    // The file's birth time, where the filesystem keeps one (ext4, xfs,
    // btrfs; the overlay shows the real file's): the same file whatever
    // its writer does meanwhile (a passthrough or mmap write is not held
    // still, and changes its size and times under the comparison).
    let born = birth(fd, None);
    let is_it = |rel: &Path| -> bool {
        dir_beneath(layer, rel.parent().unwrap_or(Path::new(""))).is_some_and(|d| {
            let Some(name) = rel.file_name() else {
                return false;
            };
            match (born, birth(d.as_fd(), Some(name))) {
                (Some(a), Some(b)) => {
                    a == b
                        && stat_at(d.as_fd(), name).ok().flatten().is_some_and(|l| {
                            FileType::from_raw_mode(l.st_mode) == FileType::RegularFile
                        })
                }
                _ => stat_at(d.as_fd(), name)
                    .ok()
                    .flatten()
                    .is_some_and(|l| same_file(&l, &st)),
            }
        })
    };
    let found = at
        .map(Path::to_path_buf)
        .into_iter()
        .chain(named)
        .find(|p| is_it(p))
        .or_else(|| find_file(layer, Path::new(""), &st));
    let Some(rel) = found else {
        return Ok(());
    };
    let rel = rel.as_path();
    let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
        return Ok(());
    };
    // Its directory in the layer, and the same in the fresh upper dir.
    let Some((ldir, udir)) = mirror_dirs(layer, upper, parent, prefix)? else {
        return Ok(());
    };
    let Some(fst) = stat_at(ldir.as_fd(), name)? else {
        return Ok(());
    };
    if FileType::from_raw_mode(fst.st_mode) != FileType::RegularFile {
        return Ok(());
    }
    // The copy, beside the stage (same filesystem), then the moves.
    let copy = scratch(zdir, "capture")?;
    let tmp = open_dir(&zdir.join("tmp"))?;
    let copy_name = copy.file_name().unwrap_or_default();
    {
        let src = rfs::openat(
            ldir.as_fd(),
            name,
            OFlags::RDONLY | nofollow(),
            Mode::empty(),
        )?;
        let dst = rfs::openat(
            tmp.as_fd(),
            copy_name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | nofollow(),
            Mode::from_raw_mode(0o600),
        )?;
        let (mut a, mut b) = (std::fs::File::from(src), std::fs::File::from(dst));
        io::copy(&mut a, &mut b)?;
        copy_attrs(a.as_fd(), b.as_fd(), &fst, prefix, true)?;
    }
    rfs::renameat(ldir.as_fd(), name, udir.as_fd(), name)?;
    rfs::renameat(tmp.as_fd(), copy_name, ldir.as_fd(), name)?;
    if fst.st_nlink > 1 {
        other_names(
            zdir,
            (layer, ldir.as_fd()),
            (upper, udir.as_fd()),
            name,
            prefix,
        )?;
    }
    Ok(())
}

/// The other names in the layer of a captured file (`name` in `udir`,
/// the fresh upper dir, now; its copy at `name` in `ldir`, the layer):
/// each becomes a link of the copy in the layer, and of the live file in
/// the upper dir. Left as they were, they went on naming the live file,
/// so the checkpoint showed writes made after it under them (and a commit
/// up to it applied them). Found by an attack pass.
fn other_names(
    zdir: &Path,
    (layer, ldir): (BorrowedFd<'_>, BorrowedFd<'_>),
    (upper, udir): (BorrowedFd<'_>, BorrowedFd<'_>),
    name: &OsStr,
    prefix: &str,
) -> io::Result<()> {
    let live = rfs::statat(udir, name, AtFlags::SYMLINK_NOFOLLOW)?;
    let mut found = Vec::new();
    find_links(layer, Path::new(""), (live.st_dev, live.st_ino), &mut found);
    let tmp = open_dir(&zdir.join("tmp"))?;
    for rel in found {
        let (Some(parent), Some(other)) = (rel.parent(), rel.file_name()) else {
            continue;
        };
        let Some((lo, uo)) = mirror_dirs(layer, upper, parent, prefix)? else {
            continue;
        };
        match rfs::linkat(udir, name, uo.as_fd(), other, AtFlags::empty()) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
        let t = scratch(zdir, "capture")?;
        let t = t.file_name().unwrap_or_default();
        rfs::linkat(ldir, name, tmp.as_fd(), t, AtFlags::empty())?;
        rfs::renameat(tmp.as_fd(), t, lo.as_fd(), other)?;
    }
    Ok(())
}

/// Every regular file under `dir` (at `rel`) that is inode `id` (any
/// depth: a loop).
fn find_links(dir: BorrowedFd<'_>, rel: &Path, id: (u64, u64), out: &mut Vec<PathBuf>) {
    let _ = walk::walk::<Errno>(
        dir,
        &mut |e| {
            if e.is_dir()? {
                return Ok(Visit::Enter);
            }
            if let Some(st) = e.stat()? {
                if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile
                    && (st.st_dev, st.st_ino) == id
                {
                    out.push(rel.join(e.rel));
                }
            }
            Ok(Visit::Next)
        },
        &mut |_, _, _| Ok(()),
    );
}

/// Directory `parent` in the layer and the same in the fresh upper dir,
/// made there (with the layer's attributes) where missing; None where the
/// layer has no such directory.
fn mirror_dirs(
    layer: BorrowedFd<'_>,
    upper: BorrowedFd<'_>,
    parent: &Path,
    prefix: &str,
) -> io::Result<Option<(OwnedFd, OwnedFd)>> {
    let mut ldir = rfs::openat(layer, ".", OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?;
    let mut udir = rfs::openat(upper, ".", OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?;
    for comp in parent.components() {
        let c = comp.as_os_str();
        let next = match open_dir_at(ldir.as_fd(), c) {
            Ok(d) => d,
            Err(Errno::NOENT | Errno::NOTDIR) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let Some(dst) = stat_at(ldir.as_fd(), c)? else {
            return Ok(None);
        };
        match rfs::mkdirat(udir.as_fd(), c, Mode::from_raw_mode(0o700)) {
            Ok(()) => {
                let made = open_dir_at(udir.as_fd(), c)?;
                copy_attrs(next.as_fd(), made.as_fd(), &dst, prefix, false)?;
            }
            Err(Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
        udir = open_dir_at(udir.as_fd(), c)?;
        ldir = next;
    }
    Ok(Some((ldir, udir)))
}

/// Whether the zone's layers need [`recover`]: a change journaled, or a
/// layer the manifest does not list (a checkpoint whose journal a
/// machine crash lost).
pub fn needs_recovery(zdir: &Path, entry: &ZoneEntry) -> bool {
    entry.pending.is_some() || !orphans(zdir, entry).is_empty()
}

/// The layers under `<zone>/layers/` that are no checkpoint of `entry`.
fn orphans(zdir: &Path, entry: &ZoneEntry) -> Vec<u64> {
    let Ok(list) = std::fs::read_dir(zdir.join("layers")) else {
        return Vec::new();
    };
    let mut out: Vec<u64> = list
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|id| !entry.checkpoints.iter().any(|c| c.id == *id))
        .collect();
    out.sort_unstable();
    out
}

/// Whether a layer's file (`l`) is the one an overlay fd shows (`o`):
/// the overlay gives the real file's size, times and mode.
/// The birth time of `name` in `dir` (None: `dir` itself), when the
/// filesystem keeps one.
fn birth(dir: BorrowedFd<'_>, name: Option<&OsStr>) -> Option<(i64, u32)> {
    let (path, flags) = match name {
        Some(n) => (n, AtFlags::SYMLINK_NOFOLLOW),
        None => (OsStr::new(""), AtFlags::EMPTY_PATH),
    };
    let x = rfs::statx(dir, path, flags, rfs::StatxFlags::BTIME).ok()?;
    (x.stx_mask & rfs::StatxFlags::BTIME.bits() != 0)
        .then_some((x.stx_btime.tv_sec, x.stx_btime.tv_nsec))
}

fn same_file(l: &Stat, o: &Stat) -> bool {
    FileType::from_raw_mode(l.st_mode) == FileType::RegularFile
        && (
            l.st_mode,
            l.st_size,
            l.st_mtime,
            l.st_mtime_nsec,
            l.st_ctime,
            l.st_ctime_nsec,
        ) == (
            o.st_mode,
            o.st_size,
            o.st_mtime,
            o.st_mtime_nsec,
            o.st_ctime,
            o.st_ctime_nsec,
        )
}

/// The path under `dir` (at `rel` in the layer) of the file `o` shows
/// (any depth: a loop).
fn find_file(dir: BorrowedFd<'_>, rel: &Path, o: &Stat) -> Option<PathBuf> {
    let mut found = None;
    let _ = walk::walk::<Errno>(
        dir,
        &mut |e| {
            let Some(st) = e.stat()? else {
                return Ok(Visit::Next);
            };
            if same_file(&st, o) {
                found = Some(rel.join(e.rel));
                return Ok(Visit::Stop);
            }
            Ok(Visit::Enter)
        },
        &mut |_, _, _| Ok(()),
    );
    found
}

/// Finish the change `entry.pending` journals (a checkpoint is undone:
/// its layer laid back under the upper dir), then lay back any layer no
/// checkpoint lists the same way (newest first); the entry is then as it
/// should be, its `pending` cleared (the caller saves it).
pub fn recover(zdir: &Path, entry: &mut ZoneEntry, prefix: &str) -> io::Result<()> {
    recover_pending(zdir, entry, prefix)?;
    for id in orphans(zdir, entry).into_iter().rev() {
        entry.pending = Some(Pending::Checkpoint { id });
        recover_pending(zdir, entry, prefix)?;
    }
    Ok(())
}

fn recover_pending(zdir: &Path, entry: &mut ZoneEntry, prefix: &str) -> io::Result<()> {
    match entry.pending {
        None => return Ok(()),
        Some(Pending::Checkpoint { id }) => {
            let layer = layer_dir(zdir, id);
            let upper = zdir.join("upper");
            if exists(&layer) {
                if exists(&upper) {
                    let (ld, ud) = (open_dir(&layer)?, open_dir(&upper)?);
                    apply(ud.as_fd(), ld.as_fd(), How::Move, prefix)
                        .map_err(|e| ctx(e, "lay back", &upper))?;
                    remove_path(&upper)?;
                }
                rename(&layer, &upper)?;
            }
            entry.checkpoints.retain(|c| c.id != id);
        }
        Some(Pending::Rewind { to }) => {
            // A flat holding a dropped layer goes too.
            if let Some(f) = entry.flat.filter(|f| *f > to) {
                retire_flat(zdir, f)?;
                entry.flat = None;
            }
            rewind_layers(zdir, entry, to)?
        }
        Some(Pending::Merge { into, upto }) => merge_layers(zdir, entry, into, upto, prefix)?,
    }
    entry.pending = None;
    Ok(())
}

/// Rewind to checkpoint `to`: the upper dir and every later layer go to
/// `<zone>/trash/` (removed after, by [`clean`] or the caller); a fresh
/// upper dir starts. Run again, it completes.
fn rewind_layers(zdir: &Path, entry: &mut ZoneEntry, to: u64) -> io::Result<()> {
    let trash = zdir.join("trash");
    mkdir(&trash)?;
    let upper = zdir.join("upper");
    let n = SCRATCH.fetch_add(1, Ordering::Relaxed);
    if exists(&upper) {
        rename(
            &upper,
            &trash.join(format!("upper-{}-{n}", std::process::id())),
        )?;
    }
    for c in entry.checkpoints.iter().filter(|c| c.id > to) {
        let l = layer_dir(zdir, c.id);
        if exists(&l) {
            rename(
                &l,
                &trash.join(format!("{}-{}-{n}", c.id, std::process::id())),
            )?;
        }
    }
    mkdir(&upper)?;
    entry.checkpoints.retain(|c| c.id <= to);
    Ok(())
}

/// Merge: each layer after `into` (up to `upto`; none: all, and the upper
/// dir) moved onto `layers/<into>`, oldest first, which then becomes
/// `layers/<upto>` (or the upper dir); the checkpoints before `upto` (all
/// of them) are dropped. Run again, it completes.
fn merge_layers(
    zdir: &Path,
    entry: &mut ZoneEntry,
    into: u64,
    upto: Option<u64>,
    prefix: &str,
) -> io::Result<()> {
    let t = layer_dir(zdir, into);
    if exists(&t) {
        let td = open_dir(&t)?;
        for c in &entry.checkpoints {
            if c.id <= into || upto.is_some_and(|u| c.id > u) {
                continue;
            }
            let s = layer_dir(zdir, c.id);
            if !exists(&s) {
                continue;
            }
            apply(open_dir(&s)?.as_fd(), td.as_fd(), How::Move, prefix)
                .map_err(|e| ctx(e, "merge", &s))?;
            remove_path(&s)?;
        }
        let upper = zdir.join("upper");
        if upto.is_none() && exists(&upper) {
            apply(open_dir(&upper)?.as_fd(), td.as_fd(), How::Move, prefix)
                .map_err(|e| ctx(e, "merge", &upper))?;
            remove_path(&upper)?;
        }
        let mut lowers: Vec<PathBuf> = entry
            .checkpoints
            .iter()
            .rev()
            .filter(|c| c.id < into)
            .map(|c| layer_dir(zdir, c.id))
            .collect();
        lowers.push(entry.backing.clone());
        prune_whiteouts(td.as_fd(), Path::new(""), &lowers, prefix, false)?;
        match upto {
            None => {
                rename(&t, &upper)?;
            }
            Some(u) if u != into => rename(&t, &layer_dir(zdir, u))?,
            Some(_) => {}
        }
    }
    match upto {
        None => entry.checkpoints.clear(),
        Some(u) => entry.checkpoints.retain(|c| c.id >= u),
    }
    Ok(())
}

/// Whether `st` is an overlay whiteout (a 0/0 character device).
fn is_whiteout(st: &Stat) -> bool {
    FileType::from_raw_mode(st.st_mode) == FileType::CharacterDevice && st.st_rdev == 0
}

/// The whiteouts of layer `t` (at `rel` and beneath) that hide nothing:
/// `hidden` (an opaque directory of `t` at or above `rel`), or no layer
/// below `t` (`lowers`, newest first, the backing dir last) shows
/// anything there. A merge leaves them where the worker removed what a
/// layer merged into `t` made; overlayfs lists such a whiteout in a
/// directory only `t` has (a name `ls` shows as `c?????????` and `stat`
/// can't find), so they go.
fn prune_whiteouts(
    t: BorrowedFd<'_>,
    rel: &Path,
    lowers: &[PathBuf],
    prefix: &str,
    hidden: bool,
) -> io::Result<()> {
    // Whether each directory the walk is in is hidden (by depth).
    let mut hid = vec![hidden];
    walk::walk::<io::Error>(
        t,
        &mut |e| {
            let at = rel.join(e.rel);
            hid.truncate(e.depth);
            let above = hid.last().copied().unwrap_or(hidden);
            let Some(st) = e.stat().map_err(|x| ctx(x, "look at", &at))? else {
                return Ok(Visit::Next);
            };
            if is_dir(&st) {
                let d = open_dir_at(e.dir, e.name).map_err(|x| ctx(x, "open", &at))?;
                hid.push(above || is_opaque(d.as_fd(), prefix));
                return Ok(Visit::Enter);
            }
            if is_whiteout(&st) && (above || !shown_below(lowers, &at, prefix)?) {
                rfs::unlinkat(e.dir, e.name, AtFlags::empty())
                    .map_err(|x| ctx(x, "remove", &at))?;
            }
            Ok(Visit::Next)
        },
        &mut |_, _, _| Ok(()),
    )
}

/// Whether the layers `lowers` (newest first, the backing dir last),
/// stacked, show something at `rel`.
fn shown_below(lowers: &[PathBuf], rel: &Path, prefix: &str) -> io::Result<bool> {
    let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
        return Ok(false);
    };
    'layers: for layer in lowers {
        let mut d = match open_dir(layer) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let mut opaque = false;
        for c in parent.components() {
            let c = c.as_os_str();
            match stat_at(d.as_fd(), c).map_err(|e| ctx(e, "look at", rel))? {
                None => continue 'layers,
                // A file or whiteout there hides everything below.
                Some(st) if !is_dir(&st) => return Ok(false),
                Some(_) => {}
            }
            d = open_dir_at(d.as_fd(), c).map_err(|e| ctx(e, "look at", rel))?;
            opaque = opaque || is_opaque(d.as_fd(), prefix);
        }
        match stat_at(d.as_fd(), name).map_err(|e| ctx(e, "look at", rel))? {
            Some(st) => return Ok(!is_whiteout(&st)),
            None if opaque => return Ok(false),
            None => {}
        }
    }
    Ok(false)
}

/// Journal `p` in `entry`, save (`save`), do it, save again.
pub fn journaled(
    zdir: &Path,
    entry: &mut ZoneEntry,
    p: Pending,
    prefix: &str,
    save: &mut dyn FnMut(&ZoneEntry) -> io::Result<()>,
) -> io::Result<()> {
    entry.pending = Some(p);
    save(entry)?;
    recover(zdir, entry, prefix)?;
    save(entry)
}

/// The layers flattened into one dir (oldest first in `dirs`): the dir
/// itself when there is one, else a scratch dir of hard links, removed
/// when dropped.
#[derive(Debug)]
pub struct Flat {
    pub path: PathBuf,
    scratch: bool,
}

impl Drop for Flat {
    fn drop(&mut self) {
        if self.scratch {
            let _ = remove_path(&self.path);
        }
    }
}

/// `dirs` (oldest first, at least one) as one layer.
pub fn flatten(zdir: &Path, dirs: &[PathBuf], prefix: &str) -> io::Result<Flat> {
    if let [one] = dirs {
        return Ok(Flat {
            path: one.clone(),
            scratch: false,
        });
    }
    let path = scratch(zdir, "view")?;
    mkdir(&path)?;
    let flat = Flat {
        path,
        scratch: true,
    };
    let td = open_dir(&flat.path)?;
    for d in dirs {
        apply(open_dir(d)?.as_fd(), td.as_fd(), How::Link, prefix)
            .map_err(|e| ctx(e, "lay out", d))?;
    }
    Ok(flat)
}

/// The zone as it was at a checkpoint: `layers` (newest first) over the
/// backing dir, read-only; the backing dir itself when there is none.
pub fn view(backing: &Path, layers: &[PathBuf]) -> io::Result<Root> {
    if layers.is_empty() {
        return Root::open(backing);
    }
    let mut lower: Vec<&Path> = layers.iter().map(PathBuf::as_path).collect();
    lower.push(backing);
    let (fd, _) = overlay::mount(&overlay::Layers {
        lower: &lower,
        upper: None,
    })?;
    Ok(Root::from_fd(fd, layers[0].clone()))
}

/// Seconds and nanoseconds since the epoch.
pub fn now() -> (u64, u32) {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or((0, 0), |d| (d.as_secs(), d.subsec_nanos()))
}

/// Every path a layer holds (relative to it), directories before what
/// they hold.
pub fn paths_in(layer: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(d) = open_dir(layer) {
        let _ = walk::walk::<Errno>(
            d.as_fd(),
            &mut |e| {
                out.push(e.rel.to_path_buf());
                // Only a directory (or a name whose type readdir did not
                // give) is opened.
                Ok(Visit::Enter)
            },
            &mut |_, _, _| Ok(()),
        );
    }
    out
}

/// Whether any of `layers` (stage layers: what changed, whiteouts and
/// opaque directories included) holds a change at `rel` or beneath it: an
/// entry at `rel`, or an ancestor replaced there (a whiteout, a file, an
/// opaque directory). False: `rel` is as the layers below them show it.
pub fn changed_in(layers: &[PathBuf], rel: &Path, prefix: &str) -> io::Result<bool> {
    let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
        return Ok(false);
    };
    'layers: for layer in layers {
        let mut d = match open_dir(layer) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for c in parent.components() {
            let c = c.as_os_str();
            match stat_at(d.as_fd(), c).map_err(|e| ctx(e, "look at", rel))? {
                None => continue 'layers,
                Some(st) if !is_dir(&st) => return Ok(true),
                Some(_) => {}
            }
            d = open_dir_at(d.as_fd(), c).map_err(|e| ctx(e, "look at", rel))?;
            if is_opaque(d.as_fd(), prefix) {
                return Ok(true);
            }
        }
        if stat_at(d.as_fd(), name)
            .map_err(|e| ctx(e, "look at", rel))?
            .is_some()
        {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The directory `rel` under `root`, reached without symlinks; None when
/// it is not one.
fn dir_beneath(root: BorrowedFd<'_>, rel: &Path) -> Option<OwnedFd> {
    let mut d = rfs::openat(root, ".", OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).ok()?;
    for c in rel.components() {
        d = open_dir_at(d.as_fd(), c.as_os_str()).ok()?;
    }
    Some(d)
}

/// Make `rel` in the live view (`live`, the zone's overlay root) what it
/// is in `view` (a checkpoint's view): removed when the view has nothing
/// there; a directory in both made so entry by entry, where `newer` (the
/// layers after the checkpoint and the live upper dir) hold a change
/// ([`changed_in`]); else copied from the view whole (its directories made
/// as the view has them). Returns the paths touched (relative to the zone
/// dir).
pub fn restore(
    view: BorrowedFd<'_>,
    live: BorrowedFd<'_>,
    rel: &Path,
    newer: &[PathBuf],
    prefix: &str,
) -> io::Result<Vec<PathBuf>> {
    let shown = |e: Errno| ctx(e, "rewind", rel);
    let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
        return Ok(Vec::new());
    };
    let mut touched = vec![rel.to_path_buf()];
    let then = dir_beneath(view, parent)
        .and_then(|d| stat_at(d.as_fd(), name).ok().flatten().map(|st| (d, st)));
    let Some((vparent, vst)) = then else {
        if let Some(lp) = dir_beneath(live, parent) {
            remove_all(lp.as_fd(), name).map_err(shown)?;
        }
        return Ok(touched);
    };
    // The parents, as the view has them.
    let mut vd = rfs::openat(view, ".", OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?;
    let mut ld = rfs::openat(live, ".", OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?;
    let mut at = PathBuf::new();
    for c in parent.components() {
        let c = c.as_os_str();
        at.push(c);
        let vs = stat_at(vd.as_fd(), c)?.ok_or_else(|| shown(Errno::NOENT))?;
        match stat_at(ld.as_fd(), c).map_err(shown)? {
            Some(st) if is_dir(&st) => {}
            other => {
                if other.is_some() {
                    remove_all(ld.as_fd(), c).map_err(shown)?;
                }
                rfs::mkdirat(ld.as_fd(), c, Mode::from_raw_mode(0o700)).map_err(shown)?;
                let made = open_dir_at(ld.as_fd(), c).map_err(shown)?;
                copy_attrs(
                    open_dir_at(vd.as_fd(), c)?.as_fd(),
                    made.as_fd(),
                    &vs,
                    prefix,
                    false,
                )
                .map_err(shown)?;
                touched.push(at.clone());
            }
        }
        vd = open_dir_at(vd.as_fd(), c).map_err(shown)?;
        ld = open_dir_at(ld.as_fd(), c).map_err(shown)?;
    }
    let now = stat_at(ld.as_fd(), name).map_err(shown)?;
    if is_dir(&vst) && now.is_some_and(|st| is_dir(&st)) {
        let (vd, ld) = (
            open_dir_at(vparent.as_fd(), name).map_err(shown)?,
            open_dir_at(ld.as_fd(), name).map_err(shown)?,
        );
        copy_attrs(vd.as_fd(), ld.as_fd(), &vst, prefix, false).map_err(shown)?;
        restore_within(vd.as_fd(), ld.as_fd(), rel, newer, prefix, &mut touched)?;
        return Ok(touched);
    }
    remove_all(ld.as_fd(), name).map_err(shown)?;
    copy_tree(
        vparent.as_fd(),
        name,
        &vst,
        ld.as_fd(),
        rel,
        prefix,
        &mut touched,
    )
    .map_err(shown)?;
    Ok(touched)
}

/// [`restore`] of what is under directory `rel`, there in the view (`vd`)
/// and live (`ld`): each entry with a change since the checkpoint (in
/// `newer`) is removed, made again from the view, or (a directory in
/// both) gone into; an entry with none is left as it is. Copying the whole
/// directory would pin the host's files under it into the stage as they
/// are today, hidden and protected ones too: a change the worker never
/// made (found by an attack pass: `commit --force` then put an old key
/// back over the host's rotated one). Two walks, any depth: the live
/// tree (what to remove or replace), then the view's (what to add).
fn restore_within(
    vd: BorrowedFd<'_>,
    ld: BorrowedFd<'_>,
    rel: &Path,
    newer: &[PathBuf],
    prefix: &str,
    touched: &mut Vec<PathBuf>,
) -> io::Result<()> {
    let changed = |child: &Path| -> Result<bool, Errno> {
        changed_in(newer, child, prefix).map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::IO))
    };
    // The directory holding `under` (relative to the walk's top) in `top`.
    let dir_of = |top: BorrowedFd<'_>, under: &Path| -> Result<Option<OwnedFd>, Errno> {
        let parent = under.parent().unwrap_or(Path::new(""));
        match walk::open_deep(
            top,
            parent,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            rfs::ResolveFlags::BENEATH | rfs::ResolveFlags::NO_SYMLINKS,
        ) {
            Ok(d) => Ok(Some(d)),
            Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP | Errno::XDEV) => Ok(None),
            Err(e) => Err(e),
        }
    };
    let shown = |e: Errno| ctx(e, "rewind", rel);
    let mut out = Vec::new();
    // What is live: removed where the view has nothing, replaced where it
    // has another kind of thing or a changed file, gone into where both
    // have a directory.
    walk::walk::<Errno>(
        ld,
        &mut |e| {
            let child = rel.join(e.rel);
            if !changed(&child)? {
                return Ok(Visit::Next);
            }
            let then = match dir_of(vd, e.rel)? {
                Some(d) => stat_at(d.as_fd(), e.name)?.map(|st| (d, st)),
                None => None,
            };
            out.push(child.clone());
            let Some((vdir, vst)) = then else {
                remove_all(e.dir, e.name)?;
                return Ok(Visit::Next);
            };
            if is_dir(&vst) && e.is_dir()? {
                let (from, to) = (
                    open_dir_at(vdir.as_fd(), e.name)?,
                    open_dir_at(e.dir, e.name)?,
                );
                copy_attrs(from.as_fd(), to.as_fd(), &vst, prefix, false)?;
                return Ok(Visit::Enter);
            }
            remove_all(e.dir, e.name)?;
            copy_tree(vdir.as_fd(), e.name, &vst, e.dir, &child, prefix, &mut out)?;
            Ok(Visit::Next)
        },
        &mut |_, _, _| Ok(()),
    )
    .map_err(shown)?;
    // What the view has and the live view has not (removed since): made
    // again.
    walk::walk::<Errno>(
        vd,
        &mut |e| {
            let child = rel.join(e.rel);
            if !changed(&child)? {
                return Ok(Visit::Next);
            }
            let Some(ldir) = dir_of(ld, e.rel)? else {
                return Ok(Visit::Next);
            };
            match stat_at(ldir.as_fd(), e.name)? {
                None => {
                    let Some(vst) = e.stat()? else {
                        return Ok(Visit::Next);
                    };
                    out.push(child.clone());
                    copy_tree(e.dir, e.name, &vst, ldir.as_fd(), &child, prefix, &mut out)?;
                    Ok(Visit::Next)
                }
                Some(st) if is_dir(&st) => Ok(Visit::Enter),
                Some(_) => Ok(Visit::Next),
            }
        },
        &mut |_, _, _| Ok(()),
    )
    .map_err(shown)?;
    touched.extend(out);
    Ok(())
}

/// `name` in `from` (`st`) copied whole as `name` in `to`: data, mode,
/// owner, times, user xattrs; a symlink as a symlink (a directory at any
/// depth: a loop).
fn copy_tree(
    from: BorrowedFd<'_>,
    name: &OsStr,
    st: &Stat,
    to: BorrowedFd<'_>,
    rel: &Path,
    prefix: &str,
    touched: &mut Vec<PathBuf>,
) -> Result<(), Errno> {
    if !is_dir(st) {
        return copy_one(from, name, st, to, prefix);
    }
    make_tree(
        from,
        name,
        st,
        to,
        rel,
        &mut |p| touched.push(p.to_path_buf()),
        &mut |sd, n, cs, td, _| copy_one(sd, n, cs, td, prefix),
        &mut |sd, td, st| copy_attrs(sd, td, st, prefix, false),
    )
}

/// `name` in `from` (`st`, no directory) copied as `name` in `to`.
fn copy_one(
    from: BorrowedFd<'_>,
    name: &OsStr,
    st: &Stat,
    to: BorrowedFd<'_>,
    prefix: &str,
) -> Result<(), Errno> {
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => {
            let src = rfs::openat(from, name, OFlags::RDONLY | nofollow(), Mode::empty())?;
            let dst = rfs::openat(
                to,
                name,
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | nofollow(),
                Mode::from_raw_mode(0o600),
            )?;
            let (mut a, mut b) = (std::fs::File::from(src), std::fs::File::from(dst));
            io::copy(&mut a, &mut b).map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::IO))?;
            copy_attrs(a.as_fd(), b.as_fd(), st, prefix, false)
        }
        FileType::Symlink => copy_symlink(from, name, st, to),
        kind => {
            rfs::mknodat(
                to,
                name,
                kind,
                Mode::from_raw_mode(st.st_mode & 0o7777),
                st.st_rdev,
            )?;
            Ok(())
        }
    }
}

/// What rewinds left in `<zone>/trash/`, moved aside (to `<zone>/tmp/`)
/// for [`remove_all_of`] to remove without the stage's lock: removing
/// 10,000 files can take seconds, and no rewind waits for it.
pub fn take_trash(zdir: &Path) -> io::Result<Vec<PathBuf>> {
    let trash = zdir.join("trash");
    let list = match std::fs::read_dir(&trash) {
        Ok(l) => l,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for e in list {
        let e = e?;
        let to = scratch(zdir, "gone")?;
        rename(&e.path(), &to)?;
        out.push(to);
    }
    Ok(out)
}

/// Remove each of `paths` and all under it.
pub fn remove_all_of(paths: &[PathBuf]) -> io::Result<()> {
    for p in paths {
        remove_path(p)?;
    }
    Ok(())
}

#[cfg(test)]
mod flat_tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn topmost_keeps_only_what_no_other_path_holds() {
        let p = |s: &str| PathBuf::from(s);
        assert_eq!(
            topmost(vec![
                p("r1/f1"),
                p("r10"),
                p("r1"),
                p("a/b/c"),
                p("r1/d/e"),
                p("a/b2")
            ]),
            [p("a/b/c"), p("a/b2"), p("r1"), p("r10")]
        );
    }

    /// A path is changed in the layers when one holds an entry at it or a
    /// replaced ancestor (a whiteout or file, an opaque directory); a
    /// directory a layer holds only to reach other changes is not one.
    #[test]
    fn changed_in_sees_entries_and_replaced_ancestors_only() {
        let t = tempfile::tempdir().unwrap();
        let (l1, l2) = (t.path().join("1"), t.path().join("2"));
        std::fs::create_dir_all(l1.join("d/e")).unwrap();
        std::fs::write(l1.join("d/e/f"), "x").unwrap();
        std::fs::create_dir_all(l2.join("o")).unwrap();
        std::fs::write(l2.join("w"), "").unwrap();
        let prefix = "user.zmtest.";
        let opaque = rfs::open(
            l2.join("o"),
            OFlags::RDONLY | OFlags::DIRECTORY,
            Mode::empty(),
        )
        .unwrap();
        rfs::fsetxattr(
            &opaque,
            "user.zmtest.opaque",
            b"y",
            rfs::XattrFlags::empty(),
        )
        .expect("user xattrs on the temp dir's filesystem");
        let layers = [l1.clone(), l2.clone(), t.path().join("missing")];
        let changed = |p: &str| changed_in(&layers, Path::new(p), prefix).unwrap();
        assert!(changed("d/e/f"), "an entry at it");
        assert!(changed("d/e"), "an entry at it (a directory)");
        assert!(!changed("d/e/g"), "its directory is there only to reach f");
        assert!(!changed("d/x/y"));
        assert!(changed("w/under"), "an ancestor replaced by a file");
        assert!(changed("o/anything"), "under an opaque directory");
        assert!(!changed("elsewhere"));
        assert!(!changed_in(&[], Path::new("d/e/f"), prefix).unwrap());
    }

    #[test]
    fn a_flat_is_due_past_the_layers_it_allows() {
        assert_eq!(flat_plan(&[1, 2, 3, 4], None), None);
        assert_eq!(flat_plan(&[1, 2, 3, 4, 5], None), Some((3, vec![1, 2, 3])));
        assert_eq!(flat_plan(&[1, 2, 3, 4, 5, 6, 7], Some(3)), None);
        assert_eq!(
            flat_plan(&[2, 3, 4, 5, 6, 7, 8], Some(3)),
            Some((6, vec![4, 5, 6]))
        );
        assert_eq!(
            live_lower(Path::new("/z"), &[2, 3, 4, 5], Some(3)),
            [
                PathBuf::from("/z/layers/5"),
                PathBuf::from("/z/layers/4"),
                PathBuf::from("/z/flat/3")
            ]
        );
    }

    /// Copies keep each file's link count (names that were links of one
    /// file stay links of one copy), content and mode; the layers keep
    /// theirs; a newer layer's file replaces an older one's.
    #[test]
    fn a_flat_of_copies_keeps_link_counts() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, t) = (
            dir.path().join("a"),
            dir.path().join("b"),
            dir.path().join("t"),
        );
        for d in [&a, &b, &t] {
            std::fs::create_dir(d).unwrap();
        }
        std::fs::write(a.join("one"), "1\n").unwrap();
        std::fs::write(a.join("pair"), "p\n").unwrap();
        std::fs::hard_link(a.join("pair"), a.join("pair2")).unwrap();
        std::fs::create_dir(a.join("d")).unwrap();
        std::fs::write(a.join("d/x"), "old\n").unwrap();
        std::os::unix::fs::symlink("one", a.join("sym")).unwrap();
        std::fs::create_dir(b.join("d")).unwrap();
        std::fs::write(b.join("d/x"), "new\n").unwrap();
        std::fs::set_permissions(
            b.join("d/x"),
            std::os::unix::fs::PermissionsExt::from_mode(0o640),
        )
        .unwrap();
        let td = open_dir(&t).unwrap();
        lay_copies(&[a.clone(), b.clone()], td.as_fd(), "user.overlay.").unwrap();
        let md = |p: &Path| std::fs::symlink_metadata(p).unwrap();
        assert_eq!(md(&t.join("one")).nlink(), 1);
        assert_eq!(
            md(&a.join("one")).nlink(),
            1,
            "the layer's file is not linked"
        );
        assert_ne!(md(&t.join("one")).ino(), md(&a.join("one")).ino());
        assert_eq!(md(&t.join("pair")).nlink(), 2);
        assert_eq!(md(&t.join("pair")).ino(), md(&t.join("pair2")).ino());
        assert_eq!(std::fs::read_to_string(t.join("d/x")).unwrap(), "new\n");
        assert_eq!(md(&t.join("d/x")).mode() & 0o7777, 0o640);
        assert_eq!(std::fs::read_link(t.join("sym")).unwrap(), Path::new("one"));
        assert_eq!(md(&t.join("one")).mtime(), md(&a.join("one")).mtime());
    }

    /// How deep the layers of [`layers_deeper_than_path_max_are_laid_listed_restored_and_removed`]
    /// go: past `PATH_MAX` (two bytes a level) and past what a recursion
    /// per level survived on a thread's 2 MiB stack.
    const DEEP: usize = 3000;

    /// `n` levels of `a` under `top` (made from each level's fd: no path
    /// grows), with file `file` at the bottom; its path.
    fn deep_chain(top: &Path, n: usize, file: &str) -> PathBuf {
        std::fs::create_dir_all(top).unwrap();
        let mut d = open_dir(top).unwrap();
        for _ in 0..n {
            match rfs::mkdirat(&d, "a", Mode::from_raw_mode(0o755)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => panic!("{e}"),
            }
            d = open_dir_at(d.as_fd(), OsStr::new("a")).unwrap();
        }
        let f = rfs::openat(
            &d,
            file,
            OFlags::WRONLY | OFlags::CREATE,
            Mode::from_raw_mode(0o644),
        )
        .unwrap();
        rustix::io::write(&f, file.as_bytes()).unwrap();
        std::iter::repeat_n("a", n).collect()
    }

    /// How many levels of `a` `top` has, and the names at the bottom.
    fn deep_of(top: &Path) -> (usize, Vec<String>) {
        let mut d = open_dir(top).unwrap();
        let mut n = 0;
        // Bounded: past the depth made.
        while n <= 2 * DEEP {
            match open_dir_at(d.as_fd(), OsStr::new("a")) {
                Ok(next) => d = next,
                Err(_) => break,
            }
            n += 1;
        }
        let mut names: Vec<String> = Vec::new();
        for e in rfs::Dir::read_from(&d).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            if name != "." && name != ".." {
                names.push(name);
            }
        }
        names.sort();
        (n, names)
    }

    /// Layers thousands of levels deep (paths past `PATH_MAX`, as a
    /// worker's `mkdir d; cd d` loop makes them): listed, flattened (by
    /// copies and by links), restored from, merged (moved) and removed,
    /// without a recursion per level or a path past 4096 bytes. Found by
    /// an attack pass.
    #[test]
    fn layers_deeper_than_path_max_are_laid_listed_restored_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let z = dir.path();
        let prefix = "user.overlay.";
        let (l1, l2) = (layer_dir(z, 1), layer_dir(z, 2));
        let rel = deep_chain(&l1, DEEP, "one");
        assert!(rel.as_os_str().len() > 4096);
        deep_chain(&l2, DEEP, "two");
        assert_eq!(paths_in(&l2).len(), DEEP + 1);
        assert!(paths_in(&l2).contains(&rel.join("two")));
        // A flat of copies (its data counted first), and one of links.
        let built = build_flat(z, Path::new("/nonexistent"), None, &[1, 2], prefix).unwrap();
        assert_eq!(deep_of(&built), (DEEP, vec!["one".into(), "two".into()]));
        let flat = flatten(z, &[l1.clone(), l2.clone()], prefix).unwrap();
        assert_eq!(
            deep_of(&flat.path),
            (DEEP, vec!["one".into(), "two".into()])
        );
        let scratch = flat.path.clone();
        drop(flat);
        assert!(!exists(&scratch), "a scratch flat goes when dropped");
        // A path restored from a view (the layer, here) into a live dir.
        let live = z.join("live");
        mkdir(&live).unwrap();
        let touched = restore(
            open_dir(&l2).unwrap().as_fd(),
            open_dir(&live).unwrap().as_fd(),
            Path::new("a"),
            &[],
            prefix,
        )
        .unwrap();
        assert_eq!(touched.len(), DEEP + 1);
        assert_eq!(deep_of(&live), (DEEP, vec!["two".into()]));
        // What changed deep down in a layer is seen there.
        assert!(changed_in(std::slice::from_ref(&l2), &rel.join("two"), prefix).unwrap());
        assert!(!changed_in(std::slice::from_ref(&l2), &rel.join("three"), prefix).unwrap());
        // A file open for writing at a checkpoint, found in the layer by
        // what it is (its path unknown), and its links.
        let bottom = dir_beneath(open_dir(&l2).unwrap().as_fd(), &rel).unwrap();
        let two = stat_at(bottom.as_fd(), OsStr::new("two")).unwrap().unwrap();
        let top = open_dir(&l2).unwrap();
        assert_eq!(
            find_file(top.as_fd(), Path::new(""), &two),
            Some(rel.join("two"))
        );
        let mut links = Vec::new();
        find_links(
            top.as_fd(),
            Path::new(""),
            (two.st_dev, two.st_ino),
            &mut links,
        );
        assert_eq!(links, [rel.join("two")]);
        // Merged: the newer layer moved onto the older one.
        apply(
            open_dir(&l2).unwrap().as_fd(),
            open_dir(&l1).unwrap().as_fd(),
            How::Move,
            prefix,
        )
        .unwrap();
        assert_eq!(deep_of(&l1), (DEEP, vec!["one".into(), "two".into()]));
        assert_eq!(deep_of(&l2).0, 0, "moved out whole");
        remove_all_of(&[l1.clone(), built.clone(), live.clone()]).unwrap();
        assert!(!exists(&l1) && !exists(&built) && !exists(&live));
    }

    /// Past [`FLAT_MAX_BYTES`] of file data in its base and layers, no
    /// flat is built (and no scratch dir is left); below it, one is.
    #[test]
    fn no_flat_past_the_most_data_it_copies() {
        let dir = tempfile::tempdir().unwrap();
        let z = dir.path();
        for id in [1, 2] {
            std::fs::create_dir_all(layer_dir(z, id).join("d")).unwrap();
        }
        std::fs::write(layer_dir(z, 1).join("small"), "s\n").unwrap();
        let built = build_flat(z, Path::new("/nonexistent"), None, &[1], "user.overlay.").unwrap();
        assert!(built.join("small").exists());
        remove_path(&built).unwrap();
        // Sparse: the size counts, no disk is used.
        let big = std::fs::File::create(layer_dir(z, 2).join("d/big")).unwrap();
        big.set_len(FLAT_MAX_BYTES / 2 + 1).unwrap();
        let big1 = std::fs::File::create(layer_dir(z, 1).join("big")).unwrap();
        big1.set_len(FLAT_MAX_BYTES / 2 + 1).unwrap();
        let e =
            build_flat(z, Path::new("/nonexistent"), None, &[1, 2], "user.overlay.").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::FileTooLarge, "{e}");
        assert_eq!(std::fs::read_dir(z.join("tmp")).unwrap().count(), 0);
        assert!(build_flat(z, Path::new("/nonexistent"), None, &[2], "user.overlay.").is_ok());
    }
}

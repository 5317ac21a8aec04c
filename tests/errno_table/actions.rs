//! Row actions too long for one line of the table. Each runs in one zone
//! (`c`) and returns the outcome the worker sees; asserts inside check
//! what the worker reads along the way.

use std::fs::{self, File, FileTimes, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use libc::{EINVAL, ENOENT};

use crate::Ctx;
use crate::common::*;
use crate::store::{INNER, ORIG, blob};

// ----- reading: allowed everywhere

pub fn lookup(c: &Ctx) -> io::Result<()> {
    assert!(fs::metadata(c.p(""))?.is_dir(), "the zone is a dir");
    let md = fs::metadata(c.p("f.txt"))?;
    assert!(md.is_file(), "f.txt is a file");
    assert_eq!(md.len(), ORIG.len() as u64, "f.txt size");
    assert!(fs::metadata(c.p("dir"))?.is_dir(), "dir is a dir");
    let lmd = fs::symlink_metadata(c.p("link"))?;
    assert!(lmd.file_type().is_symlink(), "link is a symlink");
    assert_errno(fs::metadata(c.p("missing")), ENOENT);
    Ok(())
}

pub fn readdir(c: &Ctx) -> io::Result<()> {
    assert_eq!(
        names(&c.p(""))?,
        sorted(&["blob.bin", "dir", "emptydir", "f.txt", "link"]),
        "listing of the zone"
    );
    assert_eq!(
        names(&c.p("dir"))?,
        sorted(&["inner.txt"]),
        "listing of dir"
    );
    assert!(names(&c.p("emptydir"))?.is_empty(), "emptydir is empty");
    Ok(())
}

pub fn ls_la(c: &Ctx) -> io::Result<()> {
    let out = c.sh("ls -la");
    assert!(out.success(), "ls -la: {}", out.describe());
    assert!(
        out.stdout.contains("f.txt") && out.stdout.contains("link -> f.txt"),
        "{}",
        out.stdout
    );
    Ok(())
}

pub fn read(c: &Ctx) -> io::Result<()> {
    assert_eq!(fs::read_to_string(c.p("f.txt"))?, ORIG);
    assert_eq!(fs::read_to_string(c.p("dir/inner.txt"))?, INNER);
    assert!(fs::read(c.p("blob.bin"))? == blob(), "blob.bin content");
    // Explicit O_RDONLY open, and a read at an offset.
    let mut f = OpenOptions::new().read(true).open(c.p("f.txt"))?;
    f.seek(SeekFrom::Start(2))?;
    let mut s = String::new();
    f.read_to_string(&mut s)?;
    assert_eq!(s, &ORIG[2..]);
    let out = c.sh("cat f.txt");
    assert!(out.success(), "cat f.txt: {}", out.describe());
    assert_eq!(out.stdout, ORIG);
    Ok(())
}

pub fn readlink(c: &Ctx) -> io::Result<()> {
    assert_eq!(fs::read_link(c.p("link"))?, Path::new("f.txt"));
    // Following it stays inside the zone.
    assert_eq!(fs::read_to_string(c.p("link"))?, ORIG);
    assert_errno(fs::read_link(c.p("f.txt")), EINVAL);
    Ok(())
}

pub fn getfattr(c: &Ctx) -> io::Result<()> {
    let out = c.sh("getfattr --only-values -n user.pre f.txt");
    assert!(out.success(), "getfattr -n user.pre: {}", out.describe());
    assert_eq!(out.stdout, "v1");
    let out = c.sh("getfattr -d f.txt");
    assert!(out.success(), "getfattr -d: {}", out.describe());
    assert!(
        out.stdout.contains("user.pre=\"v1\""),
        "listing: {}",
        out.stdout
    );
    let out = c.sh("getfattr -n user.absent f.txt");
    assert!(
        !out.success() && out.stderr.contains("No such attribute"),
        "getfattr -n user.absent: {}",
        out.describe()
    );
    Ok(())
}

// ----- writing

/// Open `rel` in the zone; `how` spells the flags: `r` read, `w` write,
/// `a` append, `t` O_TRUNC, `c` O_CREAT, `x` O_CREAT|O_EXCL.
pub fn open(c: &Ctx, rel: &str, how: &str) -> io::Result<File> {
    OpenOptions::new()
        .read(how.contains('r'))
        .write(how.contains('w'))
        .append(how.contains('a'))
        .truncate(how.contains('t'))
        .create(how.contains('c'))
        .create_new(how.contains('x'))
        .open(c.p(rel))
}

/// O_RDWR: read two bytes, then write one after them.
pub fn rdwr(c: &Ctx) -> io::Result<()> {
    let mut f = open(c, "f.txt", "rw")?;
    let mut two = [0u8; 2];
    f.read_exact(&mut two)?;
    assert_eq!(&two, b"or");
    f.write_all(b"Z")
}

/// `renameat2(RENAME_WHITEOUT)`: a rename that leaves a whiteout (a
/// character device 0/0) at the source.
pub fn whiteout(c: &Ctx) -> io::Result<()> {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    renameat_with(CWD, c.p("f.txt"), CWD, c.p("wo.txt"), RenameFlags::WHITEOUT)
        .map_err(io::Error::from)
}

/// O_TRUNC empties the file at open, before anything is written.
pub fn trunc(c: &Ctx) -> io::Result<()> {
    let mut f = open(c, "f.txt", "wt")?;
    assert_eq!(fs::read(c.b("f.txt"))?, b"", "f.txt after open(O_TRUNC)");
    f.write_all(b"t\n")
}

/// Copy `src` of this row's zone of kind `from` into `dst` (opened with
/// `how`, see [`open`]). std::io::copy between two Files uses
/// copy_file_range(2), falling back to read/write where refused as
/// unsupported: the destination sees a "copy into".
pub fn copy(c: &Ctx, from: &str, src: &str, dst: &str, how: &str) -> io::Result<()> {
    let mut out = open(c, dst, how)?;
    let mut src = File::open(c.sib(from, src))?;
    io::copy(&mut src, &mut out).map(drop)
}

pub fn symlink_and_follow(c: &Ctx) -> io::Result<()> {
    std::os::unix::fs::symlink("dir/inner.txt", c.p("sl"))?;
    assert_eq!(fs::read_to_string(c.p("sl"))?, INNER, "following sl");
    Ok(())
}

/// chown to the owner it already has: still a setattr the policy sees.
pub fn chown_same(c: &Ctx) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let md = fs::metadata(c.b("f.txt"))?;
    std::os::unix::fs::chown(c.p("f.txt"), Some(md.uid()), Some(md.gid()))
}

/// futimens through a read-only handle: a setattr(mtime) with an fh.
pub fn futimens(c: &Ctx) -> io::Result<()> {
    let when = UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    File::open(c.p("f.txt"))?.set_times(FileTimes::new().set_modified(when))
}

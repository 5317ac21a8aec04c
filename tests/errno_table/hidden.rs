//! DESIGN §3's rows for what a worker must not see or read unasked, as two
//! tables run against one real mount each:
//!  - [`HIDDEN_ROWS`]: a path matched by `hide`, or a sensitive root, in
//!    every kind of zone (rw, ro, blocked, ask, and a zone that is a home
//!    holding `.ssh`, `.npmrc`): ENOENT for every operation, whatever the
//!    zone's other rules (a hidden name answers first), absent from
//!    listings, and the backing store untouched;
//!  - [`READ_ASK_ROWS`]: `approval: { read: ask }`, `read: blocked` and
//!    `ask_read`: an open for reading asks (denied here: the harness mounts
//!    with `--no-approvals`, so EACCES), `read: blocked` is EPERM, and
//!    listing, `stat`, `readlink` and opens for writing only are never asked.
//!
//! Each collects every mismatch (naming mode, row and zone) and fails once.

use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use libc::{EACCES, ENOENT, EPERM, EROFS};
use rustix::fs::{AtFlags, CWD, FileType, Mode as FileMode, Timespec, Timestamps, XattrFlags};

use crate::common::*;
use crate::store::{blob, diff, snapshot};
use crate::{catch, fill};

/// The names a hidden row acts on in one zone: an existing hidden file, an
/// existing hidden directory, and a hidden name that doesn't exist yet.
pub struct Hidden {
    zone: PathBuf,
    file: &'static str,
    dir: &'static str,
    new: &'static str,
}

impl Hidden {
    fn p(&self, rel: &str) -> PathBuf {
        self.zone.join(rel)
    }
    fn file(&self) -> PathBuf {
        self.p(self.file)
    }
    fn dir(&self) -> PathBuf {
        self.p(self.dir)
    }
    fn unmade(&self) -> PathBuf {
        self.p(self.new)
    }
}

/// The `hide` patterns of the hiding zones: a name anywhere, a glob, a
/// dir-only pattern.
const HIDE: &str = "hide: [\".env\", \"*.pem\", \"cache/\"]";

/// The hiding zones: (name, spec, hidden file, hidden dir, hidden new name).
const HIDING: &[(&str, &str, &str, &str, &str)] = &[
    ("hrw", "mode: rw", ".env", "cache", "made.pem"),
    ("hro", "mode: ro", ".env", "cache", "made.pem"),
    (
        "hblk",
        "mode: rw, approval: { write: blocked, delete: blocked, read: blocked }",
        ".env",
        "cache",
        "made.pem",
    ),
    (
        "hask",
        "mode: rw, approval: { write: ask, delete: ask, read: ask }",
        ".env",
        "cache",
        "made.pem",
    ),
    // A home (ZONEMOUNT_EXTRA_HOMES): its sensitive roots are hidden.
    ("home", "mode: rw", ".npmrc", ".ssh", ".pypirc"),
];

fn errno<T>(r: rustix::io::Result<T>) -> io::Result<()> {
    r.map(drop).map_err(io::Error::from)
}

fn at_epoch(secs: i64) -> Timestamps {
    let t = Timespec {
        tv_sec: secs,
        tv_nsec: 0,
    };
    Timestamps {
        last_access: t,
        last_modification: t,
    }
}

type HiddenAct = fn(&Hidden) -> io::Result<()>;

/// Every operation on a hidden path; each must answer ENOENT.
#[rustfmt::skip]
pub const HIDDEN_ROWS: &[(&str, HiddenAct)] = &[
    ("lookup (lstat) of a file",        |h| fs::symlink_metadata(h.file()).map(drop)),
    ("lookup (lstat) of a dir",         |h| fs::symlink_metadata(h.dir()).map(drop)),
    ("lookup below a hidden dir",       |h| fs::symlink_metadata(h.dir().join("inside")).map(drop)),
    ("open for reading",                |h| fs::read(h.file()).map(drop)),
    ("open for writing",                |h| OpenOptions::new().write(true).open(h.file()).map(drop)),
    ("open O_TRUNC",                    |h| OpenOptions::new().write(true).truncate(true).open(h.file()).map(drop)),
    ("opendir",                         |h| fs::read_dir(h.dir()).map(drop)),
    ("readlink",                        |h| fs::read_link(h.file()).map(drop)),
    ("access(W_OK)",                    |h| errno(rustix::fs::access(h.file(), rustix::fs::Access::WRITE_OK))),
    ("create at a hidden name",         |h| fs::write(h.unmade(), "x")),
    ("create O_EXCL over a hidden file", |h| OpenOptions::new().write(true).create_new(true).open(h.file()).map(drop)),
    ("mkdir at a hidden name",          |h| fs::create_dir(h.unmade())),
    ("mkdir over a hidden dir",         |h| fs::create_dir(h.dir())),
    ("create in a hidden dir",          |h| fs::write(h.dir().join("x"), "x")),
    ("symlink at a hidden name",        |h| symlink("f.txt", h.unmade())),
    ("mkfifo at a hidden name",         |h| errno(rustix::fs::mknodat(CWD, h.unmade(), FileType::Fifo, FileMode::from(0o644), 0))),
    ("link to a hidden name",           |h| fs::hard_link(h.p("f.txt"), h.unmade())),
    ("link of a hidden file",           |h| fs::hard_link(h.file(), h.p("l.txt"))),
    ("rename onto a hidden file",       |h| fs::rename(h.p("f.txt"), h.file())),
    ("rename to a hidden name",         |h| fs::rename(h.p("f.txt"), h.unmade())),
    ("rename into a hidden dir",        |h| fs::rename(h.p("f.txt"), h.dir().join("f.txt"))),
    ("rename of a hidden file",         |h| fs::rename(h.file(), h.p("out.txt"))),
    ("rename of a hidden dir",          |h| fs::rename(h.dir(), h.p("outdir"))),
    ("unlink",                          |h| fs::remove_file(h.file())),
    ("rmdir",                           |h| fs::remove_dir(h.dir())),
    ("chmod",                           |h| fs::set_permissions(h.file(), std::os::unix::fs::PermissionsExt::from_mode(0o600))),
    ("chown",                           |h| std::os::unix::fs::chown(h.file(), Some(0), Some(0))),
    ("utimensat",                       |h| errno(rustix::fs::utimensat(CWD, h.file(), &at_epoch(1_000_000_000), AtFlags::empty()))),
    ("getxattr",                        |h| errno(rustix::fs::getxattr(h.file(), "user.pre", &mut [0u8; 16][..]))),
    ("listxattr",                       |h| errno(rustix::fs::listxattr(h.file(), &mut [0u8; 64][..]))),
    ("setxattr",                        |h| errno(rustix::fs::setxattr(h.file(), "user.x", b"v", XattrFlags::empty()))),
    ("removexattr",                     |h| errno(rustix::fs::removexattr(h.file(), "user.pre"))),
];

/// The control zone of row `i`: plain rw, the same names, nothing hidden.
fn control(i: usize) -> String {
    format!("ctl-{i:02}")
}

/// Mount the hiding zones, each filled with the common fixture plus its
/// hidden file (with an xattr) and hidden dir (holding a file); and one
/// control zone per row, the same without `hide`, where the row must reach
/// what it names (so an ENOENT in a hiding zone is the hiding's).
fn hiding_fixture(mode: Mode) -> TestMount {
    let mut zones: Vec<(String, String, &str, &str)> = HIDING
        .iter()
        .map(|(z, spec, file, dir, _)| {
            let spec = if *z == "home" {
                spec.to_string()
            } else {
                format!("{spec}, {HIDE}")
            };
            (z.to_string(), spec, *file, *dir)
        })
        .collect();
    zones.extend((0..HIDDEN_ROWS.len()).map(|i| (control(i), "mode: rw".into(), ".env", "cache")));
    let refs: Vec<(&str, &str)> = zones
        .iter()
        .map(|(z, s, ..)| (z.as_str(), s.as_str()))
        .collect();
    let mut s = Setup::zones(mode, &refs);
    let b = blob();
    for (z, _, file, dir) in &zones {
        s = fill(s, z, &b).file(z, file, "SECRET=1\n").file(
            z,
            &format!("{dir}/inside"),
            "inside\n",
        );
        let f = s.backing(z, file);
        rustix::fs::lsetxattr(&f, "user.pre", b"v1", XattrFlags::empty())
            .unwrap_or_else(|e| panic!("host setxattr on {}: {e}", f.display()));
    }
    // Created before mounting, so the fake home exists when homes are read.
    let home = s.backing("home", "");
    s.env("ZONEMOUNT_EXTRA_HOMES", home.to_str().unwrap())
        .mount()
}

/// Every hidden row in every hiding zone: ENOENT, the backing store as it
/// was, the hidden names absent from listings before and after.
pub fn hidden_paths(mode: Mode) {
    if !fuse_ok() {
        return;
    }
    let m = hiding_fixture(mode);
    let mut failures = Vec::new();
    for (z, _, file, dir, new) in HIDING {
        let h = Hidden {
            zone: m.path(z),
            file,
            dir,
            new,
        };
        let listed = |when: &str| {
            let shown = names(&h.zone).unwrap();
            assert!(
                !shown
                    .iter()
                    .any(|n| [*file, *dir, *new].contains(&n.as_str())),
                "{z}: listed {when} the rows: {shown:?}"
            );
        };
        if let Err(msg) = catch(|| listed("before")) {
            failures.push(format!("[{mode:?}] listing of {z}: {msg}"));
        }
        for (name, act) in HIDDEN_ROWS {
            let before = snapshot(&m.backing(z, ""));
            let outcome = act(&h);
            let after = snapshot(&m.backing(z, ""));
            if outcome.as_ref().map_err(io::Error::raw_os_error).err() != Some(Some(ENOENT)) {
                failures.push(format!(
                    "[{mode:?}] row `{name}` in {z}: wanted ENOENT, got {outcome:?}"
                ));
            }
            if let Err(d) = diff(&before, &after) {
                failures.push(format!(
                    "[{mode:?}] row `{name}` in {z}: the backing store changed:\n{d}"
                ));
            }
        }
        if let Err(msg) = catch(|| listed("after")) {
            failures.push(format!("[{mode:?}] listing of {z}: {msg}"));
        }
    }
    let (_, _, file, dir, new) = HIDING[0];
    for (i, (name, act)) in HIDDEN_ROWS.iter().enumerate() {
        let h = Hidden {
            zone: m.path(&control(i)),
            file,
            dir,
            new,
        };
        let outcome = act(&h);
        if outcome.as_ref().map_err(io::Error::raw_os_error).err() == Some(Some(ENOENT)) {
            failures.push(format!(
                "[{mode:?}] row `{name}` in its control zone (nothing hidden): ENOENT, so the row proves nothing"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The read-asking zones, and a plain one to compare.
const READING: &[(&str, &str)] = &[
    ("rw", "mode: rw"),
    (
        "rdask",
        "mode: rw, approval: { read: ask, write: preApproved, delete: preApproved }",
    ),
    (
        "rdblk",
        "mode: rw, approval: { read: blocked, write: preApproved, delete: preApproved }",
    ),
    ("askrw", "mode: rw, ask_read: [\"f.txt\", \"/dir/\"]"),
    ("askro", "mode: ro, ask_read: [\"f.txt\", \"/dir/\"]"),
];

type ReadAct = fn(&Path) -> io::Result<()>;

/// A row: name, action (given the zone's path), and the errno of each zone
/// of [`READING`] in order (None: allowed).
#[rustfmt::skip]
pub const READ_ASK_ROWS: &[(&str, ReadAct, [Option<i32>; 5])] = &[
    //                                                                                           rw    rdask         rdblk        askrw         askro
    ("open O_RDONLY, matched",   |z| fs::read(z.join("f.txt")).map(drop),                        [None, Some(EACCES), Some(EPERM), Some(EACCES), Some(EACCES)]),
    ("open O_RDONLY, in a matched dir", |z| fs::read(z.join("dir/inner.txt")).map(drop),         [None, Some(EACCES), Some(EPERM), Some(EACCES), Some(EACCES)]),
    ("open O_RDONLY, unmatched", |z| fs::read(z.join("blob.bin")).map(drop),                     [None, Some(EACCES), Some(EPERM), None,         None]),
    ("open O_RDWR, matched",     |z| OpenOptions::new().read(true).write(true).open(z.join("f.txt")).map(drop), [None, Some(EACCES), Some(EPERM), Some(EACCES), Some(EROFS)]),
    ("read through a symlink",   |z| fs::read(z.join("link")).map(drop),                         [None, Some(EACCES), Some(EPERM), Some(EACCES), Some(EACCES)]),
    ("open O_WRONLY, matched",   |z| OpenOptions::new().write(true).open(z.join("f.txt")).map(drop), [None, None,    None,        None,         Some(EROFS)]),
    ("stat, matched",            |z| fs::metadata(z.join("f.txt")).map(drop),                    [None, None,         None,        None,         None]),
    ("listing a matched dir",    |z| names(&z.join("dir")).map(drop),                            [None, None,         None,        None,         None]),
    ("readlink",                 |z| fs::read_link(z.join("link")).map(drop),                    [None, None,         None,        None,         None]),
    ("getxattr, matched",        |z| errno(rustix::fs::getxattr(z.join("f.txt"), "user.pre", &mut [0u8; 16][..])), [None, None, None, None, None]),
];

/// Every read-ask row in every zone of [`READING`]: the errno wanted, and
/// nothing changed in the backing store (no row writes).
pub fn read_ask(mode: Mode) {
    if !fuse_ok() {
        return;
    }
    let mut s = Setup::zones(mode, READING);
    let b = blob();
    for (z, _) in READING {
        s = fill(s, z, &b);
    }
    let m = s.mount();
    let mut failures = Vec::new();
    for (name, act, wants) in READ_ASK_ROWS {
        for ((z, _), want) in READING.iter().zip(wants) {
            let before = snapshot(&m.backing(z, ""));
            let outcome = act(&m.path(z));
            let after = snapshot(&m.backing(z, ""));
            let got = outcome.as_ref().err().map(io::Error::raw_os_error);
            if got != want.map(Some) {
                failures.push(format!(
                    "[{mode:?}] row `{name}` in {z}: wanted {want:?}, got {outcome:?}"
                ));
            }
            if let Err(d) = diff(&before, &after) {
                failures.push(format!(
                    "[{mode:?}] row `{name}` in {z}: the backing store changed:\n{d}"
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

//! The rows of DESIGN §3 that are not "one operation in every zone": a
//! pair of zones (EXDEV, `mv`'s copy + delete), the mount's root (EACCES),
//! which rule answers first, and a rename of a name the worker just
//! created. Each mounts the plain seven-zone fixture (see [`fixture`]).

use std::fs::{self, OpenOptions};
use std::os::unix::fs::{MetadataExt, PermissionsExt};

use libc::{EACCES, EPERM, EROFS, EXDEV};

use crate::common::*;
use crate::store::{INNER, ORIG, blob};
use crate::{ZONES, fill};

fn zone_names() -> Vec<&'static str> {
    ZONES.iter().map(|(n, _)| *n).collect()
}

/// Mount the seven zones of [`ZONES`], each filled by [`fill`]. None when
/// FUSE is unavailable (recorded as a skip; a failure under CI).
fn fixture(mode: Mode) -> Option<TestMount> {
    if !fuse_ok() {
        return None;
    }
    let mut s = Setup::zones(mode, ZONES);
    let b = blob();
    for z in zone_names() {
        s = fill(s, z, &b);
    }
    Some(s.mount())
}

fn rel(zone: &str, name: &str) -> String {
    format!("{zone}/{name}")
}

fn read_backing(m: &TestMount, zone: &str, name: &str) -> String {
    fs::read_to_string(m.backing(zone, name))
        .unwrap_or_else(|e| panic!("backing {zone}/{name}: {e}"))
}

#[track_caller]
fn assert_backing(m: &TestMount, zone: &str, name: &str, want: &str, ctx: &str) {
    assert_eq!(
        read_backing(m, zone, name),
        want,
        "{ctx}: backing {zone}/{name}"
    );
}

#[track_caller]
fn assert_absent(m: &TestMount, zone: &str, name: &str, ctx: &str) {
    let p = m.backing(zone, name);
    assert!(
        !exists_nofollow(&p),
        "{ctx}: {} should not exist",
        p.display()
    );
}

/// The fixture's files of `zone` are all as they were.
#[track_caller]
fn assert_untouched(m: &TestMount, zone: &str, ctx: &str) {
    assert_backing(m, zone, "f.txt", ORIG, ctx);
    assert_backing(m, zone, "dir/inner.txt", INNER, ctx);
    assert!(
        m.backing(zone, "emptydir").is_dir(),
        "{ctx}: {zone}/emptydir gone"
    );
    assert_eq!(
        fs::read_link(m.backing(zone, "link")).ok(),
        Some("f.txt".into()),
        "{ctx}: {zone}/link"
    );
}

// ----- rename needs `delete` for the source name, even a fresh one

/// `{write: preApproved, delete: blocked}`: renaming is refused (it
/// deletes the source name), creating still works — also for a name the
/// worker has just created.
pub fn rename_of_created_in_nodel(mode: Mode) {
    let Some(m) = fixture(mode) else { return };
    assert_errno(
        fs::rename(m.path("nodel/dir/inner.txt"), m.path("nodel/x.txt")),
        EPERM,
    );
    assert_backing(
        &m,
        "nodel",
        "dir/inner.txt",
        INNER,
        "rename refused in nodel",
    );
    assert_absent(&m, "nodel", "x.txt", "rename refused in nodel");
    fs::write(m.path("nodel/created.txt"), "c").unwrap();
    assert_backing(&m, "nodel", "created.txt", "c", "create in nodel");
    assert_errno(
        fs::rename(m.path("nodel/created.txt"), m.path("nodel/y.txt")),
        EPERM,
    );
    assert_backing(&m, "nodel", "created.txt", "c", "rename refused in nodel");
    assert_absent(&m, "nodel", "y.txt", "rename refused in nodel");
}

// ----- between zones: EXDEV, whatever the zones' modes

pub fn rename_between_zones(mode: Mode) {
    let Some(m) = fixture(mode) else { return };
    let pairs = [
        ("rw", "rw2"),
        ("rw", "ro"),
        ("ro", "rw"),
        ("blk", "rw"),
        ("rw", "blk"),
        ("ask", "rw"),
        ("rw", "ask"),
        ("nodel", "rw2"),
    ];
    for (a, b) in pairs {
        let ctx = format!("rename {a}/f.txt -> {b}/moved.txt");
        assert_errno(
            fs::rename(m.path(&rel(a, "f.txt")), m.path(&rel(b, "moved.txt"))),
            EXDEV,
        );
        assert_untouched(&m, a, &ctx);
        assert_absent(&m, b, "moved.txt", &ctx);
        // Onto an existing name, and a directory.
        let ctx = format!("rename {a}/f.txt over {b}/f.txt");
        assert_errno(
            fs::rename(m.path(&rel(a, "f.txt")), m.path(&rel(b, "f.txt"))),
            EXDEV,
        );
        assert_untouched(&m, a, &ctx);
        assert_untouched(&m, b, &ctx);
        let ctx = format!("rename {a}/dir -> {b}/dir2");
        assert_errno(
            fs::rename(m.path(&rel(a, "dir")), m.path(&rel(b, "dir2"))),
            EXDEV,
        );
        assert_untouched(&m, a, &ctx);
        assert_absent(&m, b, "dir2", &ctx);
    }
}

pub fn link_between_zones(mode: Mode) {
    let Some(m) = fixture(mode) else { return };
    for (a, b) in [("rw", "rw2"), ("ro", "rw"), ("rw", "ro"), ("rw", "blk")] {
        let ctx = format!("link {a}/f.txt -> {b}/hl");
        assert_errno(
            fs::hard_link(m.path(&rel(a, "f.txt")), m.path(&rel(b, "hl"))),
            EXDEV,
        );
        assert_absent(&m, b, "hl", &ctx);
        assert_eq!(
            fs::metadata(m.backing(a, "f.txt")).unwrap().nlink(),
            1,
            "{ctx}"
        );
    }
}

pub fn mv_between_zones(mode: Mode) {
    let Some(m) = fixture(mode) else { return };
    // rw -> rw: EXDEV, so mv copies and deletes, each allowed.
    let out = m.sh_in("", "mv rw/f.txt rw2/moved.txt", &[]);
    assert!(out.success(), "mv rw -> rw2: {}", out.describe());
    assert_absent(&m, "rw", "f.txt", "mv rw -> rw2");
    assert_backing(&m, "rw2", "moved.txt", ORIG, "mv rw -> rw2");
    // A whole tree.
    let out = m.sh_in("", "mv rw2/dir rw/dir2", &[]);
    assert!(out.success(), "mv dir rw2 -> rw: {}", out.describe());
    assert_backing(&m, "rw", "dir2/inner.txt", INNER, "mv tree");
    assert_absent(&m, "rw2", "dir", "mv tree");
    // Into a zone that may write but not delete: fine (only the source is deleted).
    let out = m.sh_in("", "mv rw/blob.bin nodel/blob2.bin", &[]);
    assert!(out.success(), "mv rw -> nodel: {}", out.describe());
    assert_eq!(fs::read(m.backing("nodel", "blob2.bin")).unwrap(), blob());
    assert_absent(&m, "rw", "blob.bin", "mv rw -> nodel");
    // Out of it: the copy is allowed, deleting the source is not.
    let out = m.sh_in("", "mv nodel/f.txt rw/from_nodel.txt", &[]);
    assert_sh_errno(&out, EPERM, "mv nodel -> rw (source delete blocked)");
    assert_backing(&m, "nodel", "f.txt", ORIG, "mv nodel -> rw");
    // Out of ro: the source can't be deleted.
    let out = m.sh_in("", "mv ro/f.txt rw/from_ro.txt", &[]);
    assert_sh_errno(&out, EROFS, "mv ro -> rw");
    assert_untouched(&m, "ro", "mv ro -> rw");
    // Into ro / blocked / ask: the copy is refused, the source stays.
    for (z, e) in [("ro", EROFS), ("blk", EPERM), ("ask", EACCES)] {
        let out = m.sh_in("", &format!("mv rw2/f.txt {z}/in.txt"), &[]);
        assert_sh_errno(&out, e, &format!("mv rw2 -> {z}"));
        assert_backing(&m, "rw2", "f.txt", ORIG, "source kept");
        assert_absent(&m, z, "in.txt", "nothing copied");
    }
}

// ----- the mount's root and the zone dirs: EACCES, before EXDEV and EROFS

fn backing_parent(m: &TestMount, mode: Mode) -> std::path::PathBuf {
    m.root().join(match mode {
        Mode::Sandboxed => ".sandbox",
        Mode::Direct => "direct",
    })
}

pub fn root_level_changes(mode: Mode) {
    let Some(m) = fixture(mode) else { return };
    let host_before = names(m.root()).unwrap();
    assert_errno(fs::create_dir(m.path("newzone")), EACCES);
    assert_errno(fs::write(m.path("file.txt"), "x"), EACCES);
    assert_errno(std::os::unix::fs::symlink("rw", m.path("sl")), EACCES);
    // A root-level change wins over "between zones" (EXDEV).
    assert_errno(fs::hard_link(m.path("rw/f.txt"), m.path("hl")), EACCES);
    assert_errno(fs::rename(m.path("rw/f.txt"), m.path("f.txt")), EACCES);
    assert_errno(fs::rename(m.path("rw/dir"), m.path("rw2")), EACCES);
    // Zone dirs can't be removed or renamed, full or empty.
    assert_errno(fs::remove_dir(m.path("rw")), EACCES);
    assert_errno(fs::remove_dir(m.path("ro")), EACCES);
    assert_errno(fs::rename(m.path("rw2"), m.path("renamed")), EACCES);
    assert_errno(fs::rename(m.path("rw2"), m.path("rw")), EACCES);
    assert_errno(fs::rename(m.path("rw2"), m.path("rw/sub")), EACCES);
    let out = m.sh_in("", "mkfifo fifo", &[]);
    assert_sh_errno(&out, EACCES, "mkfifo at the root");
    let out = m.sh_in("", "mkdir x", &[]);
    assert_sh_errno(&out, EACCES, "mkdir at the root");
    let out = m.sh_in("", "echo x > x.txt", &[]);
    assert!(
        !out.success() && out.stderr.contains(&strerror(EACCES)),
        "{}",
        out.describe()
    );
    let out = m.sh_in("", "rm -rf rw2", &[]);
    assert!(!out.success(), "rm -rf of a zone: {}", out.describe());
    assert!(out.stderr.contains(&strerror(EACCES)), "{}", out.describe());
    // Nothing changed on the host side: the zone backing dirs, and nothing
    // new next to them. `rm -rf rw2` may have emptied rw2 (its contents are
    // ordinary names in a rw zone); the dir itself must remain.
    assert_eq!(names(&m.path("")).unwrap(), sorted(&zone_names()));
    assert_eq!(
        names(&backing_parent(&m, mode)).unwrap(),
        sorted(&zone_names())
    );
    assert_eq!(names(m.root()).unwrap(), host_before);
    assert_backing(&m, "rw", "f.txt", ORIG, "root-level refusals");
    assert_backing(&m, "rw", "dir/inner.txt", INNER, "root-level refusals");
}

pub fn root_level_beats_ro(mode: Mode) {
    let Some(m) = fixture(mode) else { return };
    assert_errno(fs::remove_dir(m.path("ro")), EACCES);
    assert_errno(fs::rename(m.path("ro"), m.path("ro2")), EACCES);
    assert_errno(fs::rename(m.path("ro/f.txt"), m.path("f.txt")), EACCES);
    assert_errno(fs::rename(m.path("ro/dir"), m.path("dir")), EACCES);
    assert_errno(fs::hard_link(m.path("ro/f.txt"), m.path("hl")), EACCES);
    assert_errno(fs::rename(m.path("rw/emptydir"), m.path("ro")), EACCES);
    assert_errno(fs::remove_dir(m.path("blk")), EACCES);
    assert_errno(fs::remove_dir(m.path("ask")), EACCES);
    assert_untouched(&m, "ro", "root-level in ro");
    assert!(m.backing("rw", "emptydir").is_dir());
    assert_eq!(names(&m.path("")).unwrap(), sorted(&zone_names()));
}

/// A zone dir's own mode, owner, times and xattrs: a root-level change,
/// EACCES in every kind of zone (ro too: root-level answers first), and the
/// backing dir keeps them.
pub fn zone_dir_metadata(mode: Mode) {
    use rustix::fs::{AtFlags, CWD, Timespec, Timestamps, XattrFlags};
    let Some(m) = fixture(mode) else { return };
    for z in zone_names() {
        let dir = m.backing(z, "");
        rustix::fs::setxattr(&dir, "user.pre", b"v1", XattrFlags::empty())
            .unwrap_or_else(|e| panic!("host setxattr on {}: {e}", dir.display()));
        let before = fs::metadata(&dir).unwrap();
        let p = m.path(z);
        let what = |op: &str| format!("{op} of zone dir /{z}");
        let (uid, gid) = (before.uid(), before.gid());
        let errno = |r: rustix::io::Result<()>| r.map_err(std::io::Error::from);
        let cases: Vec<(&str, std::io::Result<()>)> = vec![
            (
                "chmod",
                fs::set_permissions(&p, fs::Permissions::from_mode(0o700)),
            ),
            (
                "chown to its owner",
                std::os::unix::fs::chown(&p, Some(uid), Some(gid)),
            ),
            (
                "utimensat",
                errno(rustix::fs::utimensat(
                    CWD,
                    &p,
                    &Timestamps {
                        last_access: Timespec {
                            tv_sec: 1_000_000_000,
                            tv_nsec: 0,
                        },
                        last_modification: Timespec {
                            tv_sec: 1_000_000_000,
                            tv_nsec: 0,
                        },
                    },
                    AtFlags::empty(),
                )),
            ),
            (
                "setxattr",
                errno(rustix::fs::setxattr(
                    &p,
                    "user.new",
                    b"v",
                    XattrFlags::empty(),
                )),
            ),
            (
                "removexattr",
                errno(rustix::fs::removexattr(&p, "user.pre")),
            ),
        ];
        for (op, r) in cases {
            assert_eq!(
                r.map_err(|e| e.raw_os_error()),
                Err(Some(EACCES)),
                "{}",
                what(op)
            );
        }
        let after = fs::metadata(&dir).unwrap();
        assert_eq!(
            (
                after.mode(),
                after.uid(),
                after.gid(),
                after.mtime(),
                after.mtime_nsec()
            ),
            (before.mode(), uid, gid, before.mtime(), before.mtime_nsec()),
            "{}: the backing dir changed",
            what("metadata")
        );
        let mut buf = [0u8; 8];
        let n = rustix::fs::getxattr(&dir, "user.pre", &mut buf[..]);
        assert_eq!(
            n.ok().map(|n| buf[..n].to_vec()),
            Some(b"v1".to_vec()),
            "{}",
            what("removexattr")
        );
        assert!(
            rustix::fs::getxattr(&dir, "user.new", &mut buf[..]).is_err(),
            "{}",
            what("setxattr")
        );
    }
    // Inside a rw zone, the zone's own rules answer as before.
    fs::set_permissions(m.path("rw/dir"), fs::Permissions::from_mode(0o700)).unwrap();
    assert_eq!(
        fs::metadata(m.backing("rw", "dir")).unwrap().mode() & 0o777,
        0o700
    );
}

pub fn precedence(mode: Mode) {
    let Some(m) = fixture(mode) else { return };
    // Between zones (EXDEV) before a ro zone (EROFS).
    assert_errno(fs::rename(m.path("ro/f.txt"), m.path("rw/x")), EXDEV);
    assert_errno(fs::rename(m.path("rw/f.txt"), m.path("ro/x")), EXDEV);
    assert_errno(fs::hard_link(m.path("ro/f.txt"), m.path("rw/l")), EXDEV);
    assert_errno(fs::hard_link(m.path("rw/f.txt"), m.path("ro/l")), EXDEV);
    // Between zones before policy.
    assert_errno(fs::rename(m.path("blk/f.txt"), m.path("ask/x")), EXDEV);
    assert_untouched(&m, "ro", "precedence");
    assert_untouched(&m, "rw", "precedence");
    assert_untouched(&m, "blk", "precedence");
    drop(m);

    // A ro zone with a restrictive approval still answers EROFS: ro comes
    // before the write/delete policy.
    let s = Setup::zones(
        mode,
        &[
            (
                "robk",
                "mode: ro, approval: { write: blocked, delete: blocked }",
            ),
            ("roask", "mode: ro, approval: { write: ask, delete: ask }"),
        ],
    )
    .file("robk", "f.txt", ORIG)
    .file("roask", "f.txt", ORIG);
    let m = s.mount();
    for z in ["robk", "roask"] {
        assert_errno(fs::write(m.path(&rel(z, "new")), "x"), EROFS);
        assert_errno(
            OpenOptions::new()
                .write(true)
                .open(m.path(&rel(z, "f.txt"))),
            EROFS,
        );
        assert_errno(fs::remove_file(m.path(&rel(z, "f.txt"))), EROFS);
        assert_errno(fs::create_dir(m.path(&rel(z, "d"))), EROFS);
        assert_errno(
            fs::rename(m.path(&rel(z, "f.txt")), m.path(&rel(z, "g"))),
            EROFS,
        );
        assert_errno(
            fs::set_permissions(m.path(&rel(z, "f.txt")), fs::Permissions::from_mode(0o600)),
            EROFS,
        );
        // Root-level before ro.
        assert_errno(fs::remove_dir(m.path(z)), EACCES);
        assert_backing(&m, z, "f.txt", ORIG, "ro + policy");
        assert_absent(&m, z, "new", "ro + policy");
    }
}

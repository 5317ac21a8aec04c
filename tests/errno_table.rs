//! DESIGN §3, row by row, against a real mount — each row once in
//! sandboxed and once in direct mode (`both_modes!`).
//!
//! Every test mounts the same project of seven zones, each pre-filled with
//! the same small tree, then performs one row's operation in every zone and
//! checks two things: the errno (or success) a worker sees, and the backing
//! store afterwards (the change landed exactly, or nothing changed).
//!
//! Rows for `suffixes`, `protect` and `max_file_bytes` are in
//! `zone_limits.rs`. `ask` is expected to answer EACCES at once: the harness
//! passes `--no-approvals` when the binary knows it, and until approvals
//! land `ask` behaves as denied anyway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use libc::{EACCES, ENOENT, EPERM, EROFS, EXDEV};

/// The zones of every errno-table mount, as `(name, spec)`.
const ZONES: &[(&str, &str)] = &[
    ("ro", "mode: ro"),
    ("rw", "mode: rw"),
    (
        "blk",
        "mode: rw, approval: { write: blocked, delete: blocked }",
    ),
    ("ask", "mode: rw, approval: { write: ask, delete: ask }"),
    (
        "nodel",
        "mode: rw, approval: { write: preApproved, delete: blocked }",
    ),
    ("askdel", "mode: rw, approval: { delete: ask }"),
    ("rw2", "mode: rw"),
];

const ORIG: &str = "original\n";
const INNER: &str = "inner\n";
const BLOB_LEN: usize = 300_000;

fn blob() -> Vec<u8> {
    (0..BLOB_LEN).map(|i| (i * 7 % 251) as u8).collect()
}

fn zone_names() -> Vec<&'static str> {
    ZONES.iter().map(|(n, _)| *n).collect()
}

/// What the `write` class gets in each zone.
fn write_want(zone: &str) -> Option<i32> {
    match zone {
        "ro" => Some(EROFS),
        "blk" => Some(EPERM),
        "ask" => Some(EACCES),
        _ => None,
    }
}

/// What the `delete` class gets in each zone.
fn delete_want(zone: &str) -> Option<i32> {
    match zone {
        "ro" => Some(EROFS),
        "blk" | "nodel" => Some(EPERM),
        "ask" | "askdel" => Some(EACCES),
        _ => None,
    }
}

/// A rename inside a zone: `write` for the destination, `delete` for the
/// source (and for a destination it replaces).
fn rename_want(zone: &str) -> Option<i32> {
    write_want(zone).or_else(|| delete_want(zone))
}

/// Mount the seven zones, each holding `f.txt`, `dir/inner.txt`,
/// `emptydir/`, `link -> f.txt` and `blob.bin`; `f.txt` carries the xattr
/// `user.pre=v1` when `setfattr` is there. None when FUSE is unavailable.
fn fixture(mode: Mode) -> Option<TestMount> {
    if !fuse_ok() {
        return None;
    }
    let mut s = Setup::zones(mode, ZONES);
    let b = blob();
    for z in zone_names() {
        s = s
            .file(z, "f.txt", ORIG)
            .file(z, "dir/inner.txt", INNER)
            .dir(z, "emptydir")
            .symlink(z, "link", "f.txt")
            .file(z, "blob.bin", &b);
        if has_tool("setfattr") {
            let out = sh_at(
                s.root(),
                &format!(
                    "setfattr -n user.pre -v v1 '{}'",
                    s.backing(z, "f.txt").display()
                ),
                &[],
            );
            assert!(out.success(), "host setfattr: {}", out.describe());
        }
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

fn xattr_on_host(m: &TestMount, zone: &str, name: &str, attr: &str) -> Option<String> {
    let out = sh_at(
        m.root(),
        &format!(
            "getfattr --only-values -n {attr} '{}'",
            m.backing(zone, name).display()
        ),
        &[],
    );
    out.success().then_some(out.stdout)
}

both_modes!(
    lookup,
    readdir,
    read,
    readlink,
    xattr_get_list,
    statfs,
    create,
    open_wronly,
    open_rdwr,
    open_trunc,
    setattr_size,
    fallocate,
    copy_file_range,
    mkdir,
    symlink,
    hard_link,
    mkfifo,
    device_node,
    chmod,
    chown,
    utimens,
    setxattr,
    removexattr,
    unlink,
    rmdir,
    rename_inside_zone,
    rename_over_existing,
    rename_dir_inside_zone,
    rename_between_zones,
    link_between_zones,
    mv_between_zones,
    root_level_changes,
    root_level_beats_ro,
    precedence,
);

// ----- look, list, read, readlink, xattr get/list, statfs: allowed everywhere

fn lookup(mode: Mode) {
    let Some(m) = fixture(mode) else { return };
    assert!(fs::metadata(m.path("")).unwrap().is_dir());
    for z in zone_names() {
        let md = fs::metadata(m.path(z)).unwrap();
        assert!(md.is_dir(), "{z} is a dir");
        let md = fs::metadata(m.path(&rel(z, "f.txt"))).unwrap();
        assert!(md.is_file(), "{z}/f.txt is a file");
        assert_eq!(md.len(), ORIG.len() as u64, "{z}/f.txt size");
        assert!(fs::metadata(m.path(&rel(z, "dir"))).unwrap().is_dir());
        let lmd = fs::symlink_metadata(m.path(&rel(z, "link"))).unwrap();
        assert!(lmd.file_type().is_symlink(), "{z}/link is a symlink");
        assert_errno(fs::metadata(m.path(&rel(z, "missing"))), ENOENT);
    }
    assert_errno(fs::metadata(m.path("nozone")), ENOENT);
}

fn readdir(mode: Mode) {
    let Some(m) = fixture(mode) else { return };
    assert_eq!(
        names(&m.path("")).unwrap(),
        sorted(&zone_names()),
        "root lists the zones"
    );
    for z in zone_names() {
        assert_eq!(
            names(&m.path(z)).unwrap(),
            sorted(&["blob.bin", "dir", "emptydir", "f.txt", "link"]),
            "listing of {z}"
        );
        assert_eq!(
            names(&m.path(&rel(z, "dir"))).unwrap(),
            sorted(&["inner.txt"])
        );
        assert!(names(&m.path(&rel(z, "emptydir"))).unwrap().is_empty());
    }
    let (st, out, err) = m.sh("ls -la ro rw blk ask");
    assert!(st.success(), "ls -la: {err}");
    assert!(
        out.contains("f.txt") && out.contains("link -> f.txt"),
        "{out}"
    );
}

fn read(mode: Mode) {
    let Some(m) = fixture(mode) else { return };
    for z in zone_names() {
        assert_eq!(
            fs::read_to_string(m.path(&rel(z, "f.txt"))).unwrap(),
            ORIG,
            "{z}"
        );
        assert_eq!(
            fs::read_to_string(m.path(&rel(z, "dir/inner.txt"))).unwrap(),
            INNER
        );
        assert_eq!(
            fs::read(m.path(&rel(z, "blob.bin"))).unwrap(),
            blob(),
            "{z}/blob.bin"
        );
        // Explicit O_RDONLY open, and a read at an offset.
        let mut f = OpenOptions::new()
            .read(true)
            .open(m.path(&rel(z, "f.txt")))
            .unwrap();
        f.seek(SeekFrom::Start(2)).unwrap();
        let mut s = String::new();
        f.read_to_string(&mut s).unwrap();
        assert_eq!(s, &ORIG[2..]);
        let (st, out, err) = m.sh(&format!("cat {z}/f.txt"));
        assert!(st.success(), "cat {z}/f.txt: {err}");
        assert_eq!(out, ORIG);
        assert_untouched(&m, z, "after reads");
    }
}

fn readlink(mode: Mode) {
    let Some(m) = fixture(mode) else { return };
    for z in zone_names() {
        assert_eq!(
            fs::read_link(m.path(&rel(z, "link"))).unwrap(),
            std::path::Path::new("f.txt")
        );
        // Following it stays inside the zone.
        assert_eq!(fs::read_to_string(m.path(&rel(z, "link"))).unwrap(), ORIG);
    }
    assert_errno(fs::read_link(m.path("rw/f.txt")), libc::EINVAL);
}

fn xattr_get_list(mode: Mode) {
    if !tool_ok("getfattr") {
        return;
    }
    let Some(m) = fixture(mode) else { return };
    for z in zone_names() {
        let (st, out, err) = m.sh(&format!("getfattr --only-values -n user.pre {z}/f.txt"));
        assert!(st.success(), "getfattr -n user.pre in {z}: {err}");
        assert_eq!(out, "v1", "{z}");
        let (st, out, err) = m.sh(&format!("getfattr -d {z}/f.txt"));
        assert!(st.success(), "getfattr -d in {z}: {err}");
        assert!(out.contains("user.pre=\"v1\""), "listing in {z}: {out}");
        let (st, _, err) = m.sh(&format!("getfattr -n user.absent {z}/f.txt"));
        assert!(
            !st.success() && err.contains("No such attribute"),
            "{z}: {err}"
        );
    }
}

fn statfs(mode: Mode) {
    let Some(m) = fixture(mode) else { return };
    let (st, out, err) = m.sh("stat -f -c '%b %S' .");
    assert!(st.success(), "statfs on root: {err}");
    assert!(!out.trim().is_empty());
    for z in zone_names() {
        let (st, _, err) = m.sh(&format!("stat -f {z} && stat -f {z}/f.txt && df -P {z}"));
        assert!(st.success(), "statfs in {z}: {err}");
    }
}

// ----- write content: EROFS in ro, else the `write` policy

fn create(mode: Mode) {
    let Some(m) = fixture(mode) else { return };
    for z in zone_names() {
        let ctx = format!("create {z}/new.txt");
        let r = fs::write(m.path(&rel(z, "new.txt")), "new\n");
        if expect_outcome(r, write_want(z), &ctx) {
            assert_backing(&m, z, "new.txt", "new\n", &ctx);
            assert_eq!(
                fs::read_to_string(m.path(&rel(z, "new.txt"))).unwrap(),
                "new\n"
            );
        } else {
            assert_absent(&m, z, "new.txt", &ctx);
            assert_errno(fs::metadata(m.path(&rel(z, "new.txt"))), ENOENT);
        }
        // O_CREAT|O_EXCL, in a subdirectory.
        let ctx = format!("create_new {z}/dir/excl.txt");
        let r = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(m.path(&rel(z, "dir/excl.txt")));
        if expect_outcome(r, write_want(z), &ctx) {
            assert_backing(&m, z, "dir/excl.txt", "", &ctx);
        } else {
            assert_absent(&m, z, "dir/excl.txt", &ctx);
        }
        // Via the shell, as a worker would.
        let out = m.sh_in("", &format!("echo sh > {z}/sh.txt"), &[]);
        if expect_sh_outcome(&out, write_want(z), &format!("echo > {z}/sh.txt")) {
            assert_backing(&m, z, "sh.txt", "sh\n", "echo >");
        } else {
            assert_absent(&m, z, "sh.txt", "echo >");
        }
        assert_untouched(&m, z, &ctx);
    }
}

fn open_wronly(mode: Mode) {
    let Some(m) = fixture(mode) else { return };
    for z in zone_names() {
        let ctx = format!("open O_WRONLY {z}/f.txt");
        let r = OpenOptions::new()
            .write(true)
            .open(m.path(&rel(z, "f.txt")));
        let want = write_want(z);
        if let Some(e) = want {
            assert_errno(r, e);
            assert_untouched(&m, z, &ctx);
        } else {
            let mut f = r.unwrap_or_else(|e| panic!("{ctx}: {e}"));
            f.write_all(b"XY").unwrap();
            drop(f);
            assert_backing(&m, z, "f.txt", "XYiginal\n", &ctx);
        }
        // O_APPEND is a write open too.
        let ctx = format!("open O_APPEND {z}/dir/inner.txt");
        let r = OpenOptions::new()
            .append(true)
            .open(m.path(&rel(z, "dir/inner.txt")));
        match want {
            Some(e) => {
                assert_errno(r, e);
                assert_backing(&m, z, "dir/inner.txt", INNER, &ctx);
            }
            None => {
                r.unwrap().write_all(b"more\n").unwrap();
                assert_backing(&m, z, "dir/inner.txt", "inner\nmore\n", &ctx);
            }
        }
    }
}

fn open_rdwr(mode: Mode) {
    let Some(m) = fixture(mode) else { return };
    for z in zone_names() {
        let ctx = format!("open O_RDWR {z}/f.txt");
        let r = OpenOptions::new()
            .read(true)
            .write(true)
            .open(m.path(&rel(z, "f.txt")));
        match write_want(z) {
            Some(e) => {
                assert_errno(r, e);
                assert_untouched(&m, z, &ctx);
            }
            None => {
                let mut f = r.unwrap();
                let mut two = [0u8; 2];
                f.read_exact(&mut two).unwrap();
                assert_eq!(&two, b"or");
                f.write_all(b"Z").unwrap();
                drop(f);
                assert_backing(&m, z, "f.txt", "orZginal\n", &ctx);
            }
        }
    }
}

fn open_trunc(mode: Mode) {
    let Some(m) = fixture(mode) else { return };
    for z in zone_names() {
        let ctx = format!("open O_TRUNC {z}/f.txt");
        let r = OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(m.path(&rel(z, "f.txt")));
        match write_want(z) {
            Some(e) => {
                assert_errno(r, e);
                assert_untouched(&m, z, &ctx);
            }
            None => {
                let mut f = r.unwrap();
                assert_backing(&m, z, "f.txt", "", &format!("{ctx} (before writing)"));
                f.write_all(b"t\n").unwrap();
                drop(f);
                assert_backing(&m, z, "f.txt", "t\n", &ctx);
            }
        }
        // `echo x > existing`: O_WRONLY|O_CREAT|O_TRUNC on an existing file.
        let out = m.sh_in(z, "echo x > dir/inner.txt", &[]);
        if expect_sh_outcome(&out, write_want(z), &format!("echo x > {z}/dir/inner.txt")) {
            assert_backing(&m, z, "dir/inner.txt", "x\n", "echo x >");
        } else {
            assert_backing(&m, z, "dir/inner.txt", INNER, "echo x > refused");
        }
    }
}

fn setattr_size(mode: Mode) {
    let Some(m) = fixture(mode) else { return };
    let perl = tool_ok("perl");
    for z in zone_names() {
        // ftruncate through a handle (the handle itself needs a write open).
        let ctx = format!("set_len {z}/f.txt");
        let r = OpenOptions::new()
            .write(true)
            .open(m.path(&rel(z, "f.txt")))
            .and_then(|f| f.set_len(3));
        if expect_outcome(r, write_want(z), &ctx) {
            assert_backing(&m, z, "f.txt", "ori", &ctx);
        } else {
            assert_backing(&m, z, "f.txt", ORIG, &ctx);
        }
        // truncate(2) on a path: a bare setattr(size), no open at all.
        if perl {
            let out = m.sh_in(
                z,
                "perl -e 'truncate($ARGV[0], 4) or die \"truncate: $!\\n\"' dir/inner.txt",
                &[],
            );
            let ctx = format!("truncate(2) {z}/dir/inner.txt");
            if expect_sh_outcome(&out, write_want(z), &ctx) {
                assert_backing(&m, z, "dir/inner.txt", "inne", &ctx);
            } else {
                assert_backing(&m, z, "dir/inner.txt", INNER, &ctx);
            }
            // Growing too.
            let out = m.sh_in(
                z,
                "perl -e 'truncate($ARGV[0], 100000) or die \"truncate: $!\\n\"' blob.bin",
                &[],
            );
            let ctx = format!("truncate(2) up {z}/blob.bin");
            let len = fs::metadata(m.backing(z, "blob.bin")).unwrap().len();
            if expect_sh_outcome(&out, write_want(z), &ctx) {
                assert_eq!(len, 100_000, "{ctx}");
            } else {
                assert_eq!(len, BLOB_LEN as u64, "{ctx}");
            }
        }
    }
}

fn fallocate(mode: Mode) {
    if !tool_ok("fallocate") {
        return;
    }
    let Some(m) = fixture(mode) else { return };
    for z in zone_names() {
        let ctx = format!("fallocate {z}/f.txt");
        let out = m.sh_in(z, "fallocate -l 65536 f.txt", &[]);
        let len = fs::metadata(m.backing(z, "f.txt")).unwrap().len();
        if expect_sh_outcome(&out, write_want(z), &ctx) {
            assert_eq!(len, 65536, "{ctx}: backing size");
            let data = fs::read(m.backing(z, "f.txt")).unwrap();
            assert!(data.starts_with(ORIG.as_bytes()), "{ctx}: content kept");
        } else {
            assert_untouched(&m, z, &ctx);
        }
    }
}

fn copy_file_range(mode: Mode) {
    let Some(m) = fixture(mode) else { return };
    // Sources in a ro and a rw zone; std::io::copy between two Files uses
    // copy_file_range(2) (falling back to read/write where refused as
    // unsupported), so the destination sees a "copy into".
    for src_zone in ["ro", "rw2"] {
        for z in zone_names() {
            let name = format!("copy_from_{src_zone}.bin");
            let ctx = format!("copy {src_zone}/blob.bin -> {z}/{name}");
            let r = File::create(m.path(&rel(z, &name))).and_then(|mut dst| {
                let mut src = File::open(m.path(&rel(src_zone, "blob.bin")))?;
                std::io::copy(&mut src, &mut dst)
            });
            if expect_outcome(r.map(|n| n as usize), write_want(z), &ctx) {
                assert_eq!(
                    fs::read(m.backing(z, &name)).unwrap(),
                    blob(),
                    "{ctx}: backing"
                );
            } else {
                assert_absent(&m, z, &name, &ctx);
            }
        }
    }
    // Into an existing file, opened for writing without O_TRUNC.
    let mut dst = OpenOptions::new()
        .write(true)
        .open(m.path("rw/f.txt"))
        .unwrap();
    let mut src = File::open(m.path("ro/dir/inner.txt")).unwrap();
    std::io::copy(&mut src, &mut dst).unwrap();
    drop(dst);
    assert_backing(
        &m,
        "rw",
        "f.txt",
        "inner\nal\n",
        "copy over the start of f.txt",
    );
}

// ----- new names: EROFS in ro, else the `write` policy

fn mkdir(mode: Mode) {
    let Some(m) = fixture(mode) else { return };
    for z in zone_names() {
        let ctx = format!("mkdir {z}/newdir");
        if expect_outcome(
            fs::create_dir(m.path(&rel(z, "newdir"))),
            write_want(z),
            &ctx,
        ) {
            assert!(m.backing(z, "newdir").is_dir(), "{ctx}");
            // And it is usable.
            fs::write(m.path(&rel(z, "newdir/x")), "x").unwrap();
            assert_backing(&m, z, "newdir/x", "x", &ctx);
        } else {
            assert_absent(&m, z, "newdir", &ctx);
        }
        let out = m.sh_in(z, "mkdir -p a/b/c", &[]);
        if expect_sh_outcome(&out, write_want(z), &format!("mkdir -p in {z}")) {
            assert!(m.backing(z, "a/b/c").is_dir());
        } else {
            assert_absent(&m, z, "a", "mkdir -p refused");
        }
    }
}

fn symlink(mode: Mode) {
    let Some(m) = fixture(mode) else { return };
    for z in zone_names() {
        let ctx = format!("symlink {z}/sl");
        let r = std::os::unix::fs::symlink("dir/inner.txt", m.path(&rel(z, "sl")));
        if expect_outcome(r, write_want(z), &ctx) {
            assert_eq!(
                fs::read_link(m.backing(z, "sl")).unwrap(),
                std::path::Path::new("dir/inner.txt"),
                "{ctx}"
            );
            assert_eq!(fs::read_to_string(m.path(&rel(z, "sl"))).unwrap(), INNER);
        } else {
            assert_absent(&m, z, "sl", &ctx);
        }
        // A dangling one, and one pointing out of the zone: both are just
        // names with text; the daemon never follows them.
        let r = std::os::unix::fs::symlink("/etc/passwd", m.path(&rel(z, "out")));
        if expect_outcome(r, write_want(z), &format!("symlink {z}/out")) {
            assert_eq!(
                fs::read_link(m.path(&rel(z, "out"))).unwrap(),
                std::path::Path::new("/etc/passwd")
            );
        }
    }
}

fn hard_link(mode: Mode) {
    let Some(m) = fixture(mode) else { return };
    for z in zone_names() {
        let ctx = format!("link {z}/f.txt -> {z}/dir/hl");
        let r = fs::hard_link(m.path(&rel(z, "f.txt")), m.path(&rel(z, "dir/hl")));
        if expect_outcome(r, write_want(z), &ctx) {
            let a = fs::metadata(m.backing(z, "f.txt")).unwrap();
            let b = fs::metadata(m.backing(z, "dir/hl")).unwrap();
            assert_eq!(a.ino(), b.ino(), "{ctx}: one inode in the backing store");
            assert_eq!(a.nlink(), 2, "{ctx}");
        } else {
            assert_absent(&m, z, "dir/hl", &ctx);
            assert_eq!(fs::metadata(m.backing(z, "f.txt")).unwrap().nlink(), 1);
        }
    }
}

fn mkfifo(mode: Mode) {
    if !tool_ok("mkfifo") {
        return;
    }
    let Some(m) = fixture(mode) else { return };
    for z in zone_names() {
        let ctx = format!("mkfifo {z}/fifo");
        let out = m.sh_in(z, "mkfifo fifo", &[]);
        if expect_sh_outcome(&out, write_want(z), &ctx) {
            let ft = fs::symlink_metadata(m.backing(z, "fifo"))
                .unwrap()
                .file_type();
            assert!(ft.is_fifo(), "{ctx}: backing is a FIFO");
        } else {
            assert_absent(&m, z, "fifo", &ctx);
        }
    }
}

fn device_node(mode: Mode) {
    // CAP_MKNOD: without it the kernel refuses before zonemount is asked.
    if !root_ok() {
        return;
    }
    let Some(m) = fixture(mode) else { return };
    for z in zone_names() {
        let ctx = format!("mknod {z}/null c 1 3");
        let out = m.sh_in(z, "mknod null c 1 3", &[]);
        // ro answers as for any new name; in a rw zone device nodes are
        // refused whatever the policy.
        let want = if z == "ro" { EROFS } else { EPERM };
        assert_sh_errno(&out, want, &ctx);
        assert_absent(&m, z, "null", &ctx);
        let out = m.sh_in(z, "mknod blk b 7 0", &[]);
        assert_sh_errno(&out, want, &format!("mknod {z}/blk b 7 0"));
        assert_absent(&m, z, "blk", &ctx);
    }
}

// ----- metadata: EROFS in ro, else the `write` policy

fn chmod(mode: Mode) {
    let Some(m) = fixture(mode) else { return };
    for z in zone_names() {
        let before = fs::metadata(m.backing(z, "f.txt")).unwrap().mode() & 0o7777;
        let target = if before == 0o600 { 0o640 } else { 0o600 };
        let ctx = format!("chmod {z}/f.txt {target:o}");
        let r = fs::set_permissions(m.path(&rel(z, "f.txt")), fs::Permissions::from_mode(target));
        let after = fs::metadata(m.backing(z, "f.txt")).unwrap().mode() & 0o7777;
        if expect_outcome(r, write_want(z), &ctx) {
            assert_eq!(after, target, "{ctx}: backing mode");
            let seen = fs::metadata(m.path(&rel(z, "f.txt"))).unwrap().mode() & 0o7777;
            assert_eq!(seen, target, "{ctx}: mode seen through the mount");
        } else {
            assert_eq!(after, before, "{ctx}: backing mode unchanged");
        }
        // On a directory too.
        let r = fs::set_permissions(m.path(&rel(z, "dir")), fs::Permissions::from_mode(0o700));
        if expect_outcome(r, write_want(z), &format!("chmod {z}/dir")) {
            assert_eq!(
                fs::metadata(m.backing(z, "dir")).unwrap().mode() & 0o7777,
                0o700
            );
        }
    }
}

fn chown(mode: Mode) {
    let Some(m) = fixture(mode) else { return };
    // Without root only the no-op variant runs: recorded as a (partial) skip.
    let root = root_ok();
    for z in zone_names() {
        let before = fs::metadata(m.backing(z, "f.txt")).unwrap();
        // As root, hand it to someone else; otherwise a no-op chown to our
        // own uid, which is still a setattr the policy must see.
        let (uid, gid) = if root {
            (4321, 4321)
        } else {
            (before.uid(), before.gid())
        };
        let ctx = format!("chown {z}/f.txt {uid}:{gid}");
        let r = std::os::unix::fs::chown(m.path(&rel(z, "f.txt")), Some(uid), Some(gid));
        let after = fs::metadata(m.backing(z, "f.txt")).unwrap();
        if expect_outcome(r, write_want(z), &ctx) {
            assert_eq!(
                (after.uid(), after.gid()),
                (uid, gid),
                "{ctx}: backing owner"
            );
        } else {
            assert_eq!(
                (after.uid(), after.gid()),
                (before.uid(), before.gid()),
                "{ctx}"
            );
        }
    }
}

fn utimens(mode: Mode) {
    let Some(m) = fixture(mode) else { return };
    let when = UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    for z in zone_names() {
        // futimens through a read-only handle: a setattr(mtime) with an fh.
        let ctx = format!("futimens {z}/f.txt");
        let before = fs::metadata(m.backing(z, "f.txt")).unwrap().mtime();
        let r = File::open(m.path(&rel(z, "f.txt")))
            .and_then(|f| f.set_times(fs::FileTimes::new().set_modified(when)));
        let after = fs::metadata(m.backing(z, "f.txt")).unwrap().mtime();
        if expect_outcome(r, write_want(z), &ctx) {
            assert_eq!(after, 1_000_000_000, "{ctx}: backing mtime");
        } else {
            assert_eq!(after, before, "{ctx}: backing mtime unchanged");
        }
        // `touch -h`: utimensat on the path, with no open.
        let ctx = format!("touch -h {z}/dir/inner.txt");
        let before = fs::metadata(m.backing(z, "dir/inner.txt")).unwrap().mtime();
        let out = m.sh_in(z, "touch -h -m -d @1100000000 dir/inner.txt", &[]);
        let after = fs::metadata(m.backing(z, "dir/inner.txt")).unwrap().mtime();
        if expect_sh_outcome(&out, write_want(z), &ctx) {
            assert_eq!(after, 1_100_000_000, "{ctx}");
        } else {
            assert_eq!(after, before, "{ctx}");
        }
        // Plain `touch` of an existing file: "now".
        let out = m.sh_in(z, "touch emptydir", &[]);
        if expect_sh_outcome(&out, write_want(z), &format!("touch {z}/emptydir")) {
            let mt = fs::metadata(m.backing(z, "emptydir"))
                .unwrap()
                .modified()
                .unwrap();
            let age = SystemTime::now().duration_since(mt).unwrap_or_default();
            assert!(age < Duration::from_secs(60), "touch set the time to now");
        }
    }
}

fn setxattr(mode: Mode) {
    if !tool_ok("setfattr") {
        return;
    }
    let Some(m) = fixture(mode) else { return };
    for z in zone_names() {
        let ctx = format!("setfattr -n user.new {z}/f.txt");
        let out = m.sh_in(z, "setfattr -n user.new -v v2 f.txt", &[]);
        let host = xattr_on_host(&m, z, "f.txt", "user.new");
        if expect_sh_outcome(&out, write_want(z), &ctx) {
            assert_eq!(host.as_deref(), Some("v2"), "{ctx}: backing xattr");
        } else {
            assert_eq!(host, None, "{ctx}: no xattr in the backing store");
        }
        // Replacing an existing value is the same class.
        let out = m.sh_in(z, "setfattr -n user.pre -v changed f.txt", &[]);
        let host = xattr_on_host(&m, z, "f.txt", "user.pre");
        if expect_sh_outcome(&out, write_want(z), &format!("replace user.pre in {z}")) {
            assert_eq!(host.as_deref(), Some("changed"));
        } else {
            assert_eq!(host.as_deref(), Some("v1"));
        }
    }
}

fn removexattr(mode: Mode) {
    if !tool_ok("setfattr") {
        return;
    }
    let Some(m) = fixture(mode) else { return };
    for z in zone_names() {
        let ctx = format!("setfattr -x user.pre {z}/f.txt");
        let out = m.sh_in(z, "setfattr -x user.pre f.txt", &[]);
        let host = xattr_on_host(&m, z, "f.txt", "user.pre");
        if expect_sh_outcome(&out, write_want(z), &ctx) {
            assert_eq!(host, None, "{ctx}: gone from the backing store");
        } else {
            assert_eq!(
                host.as_deref(),
                Some("v1"),
                "{ctx}: still in the backing store"
            );
        }
    }
}

// ----- unlink, rmdir: EROFS in ro, else the `delete` policy

fn unlink(mode: Mode) {
    let Some(m) = fixture(mode) else { return };
    for z in zone_names() {
        let ctx = format!("unlink {z}/f.txt");
        if expect_outcome(
            fs::remove_file(m.path(&rel(z, "f.txt"))),
            delete_want(z),
            &ctx,
        ) {
            assert_absent(&m, z, "f.txt", &ctx);
            assert_errno(fs::metadata(m.path(&rel(z, "f.txt"))), ENOENT);
        } else {
            assert_backing(&m, z, "f.txt", ORIG, &ctx);
        }
        // A symlink is unlinked, not followed.
        let ctx = format!("unlink {z}/link");
        if expect_outcome(
            fs::remove_file(m.path(&rel(z, "link"))),
            delete_want(z),
            &ctx,
        ) {
            assert_absent(&m, z, "link", &ctx);
        } else {
            assert!(exists_nofollow(&m.backing(z, "link")), "{ctx}");
        }
        let out = m.sh_in(z, "rm -f dir/inner.txt", &[]);
        if expect_sh_outcome(&out, delete_want(z), &format!("rm {z}/dir/inner.txt")) {
            assert_absent(&m, z, "dir/inner.txt", "rm");
        } else {
            assert_backing(&m, z, "dir/inner.txt", INNER, "rm refused");
        }
    }
}

fn rmdir(mode: Mode) {
    let Some(m) = fixture(mode) else { return };
    for z in zone_names() {
        let ctx = format!("rmdir {z}/emptydir");
        if expect_outcome(
            fs::remove_dir(m.path(&rel(z, "emptydir"))),
            delete_want(z),
            &ctx,
        ) {
            assert_absent(&m, z, "emptydir", &ctx);
        } else {
            assert!(m.backing(z, "emptydir").is_dir(), "{ctx}");
        }
        // rm -r: unlinks then rmdir, each checked.
        let out = m.sh_in(z, "rm -r dir", &[]);
        if expect_sh_outcome(&out, delete_want(z), &format!("rm -r {z}/dir")) {
            assert_absent(&m, z, "dir", "rm -r");
        } else {
            assert_backing(&m, z, "dir/inner.txt", INNER, "rm -r refused");
        }
    }
}

// ----- rename inside one zone: `write`, plus `delete` for the source and a
// replaced destination

fn rename_inside_zone(mode: Mode) {
    let Some(m) = fixture(mode) else { return };
    for z in zone_names() {
        let ctx = format!("rename {z}/f.txt -> {z}/renamed.txt");
        let r = fs::rename(m.path(&rel(z, "f.txt")), m.path(&rel(z, "renamed.txt")));
        if expect_outcome(r, rename_want(z), &ctx) {
            assert_absent(&m, z, "f.txt", &ctx);
            assert_backing(&m, z, "renamed.txt", ORIG, &ctx);
        } else {
            assert_untouched(&m, z, &ctx);
            assert_absent(&m, z, "renamed.txt", &ctx);
        }
        // Into another directory of the same zone.
        let ctx = format!("rename {z}/blob.bin -> {z}/dir/blob.bin");
        let r = fs::rename(m.path(&rel(z, "blob.bin")), m.path(&rel(z, "dir/blob.bin")));
        if expect_outcome(r, rename_want(z), &ctx) {
            assert_eq!(fs::read(m.backing(z, "dir/blob.bin")).unwrap(), blob());
            assert_absent(&m, z, "blob.bin", &ctx);
        } else {
            assert_absent(&m, z, "dir/blob.bin", &ctx);
        }
    }
    // `{write: preApproved, delete: blocked}`: renaming is refused (it
    // deletes the source name), creating still works.
    assert_errno(
        fs::rename(m.path("nodel/dir/inner.txt"), m.path("nodel/x.txt")),
        EPERM,
    );
    fs::write(m.path("nodel/created.txt"), "c").unwrap();
    assert_backing(&m, "nodel", "created.txt", "c", "create in nodel");
    assert_errno(
        fs::rename(m.path("nodel/created.txt"), m.path("nodel/y.txt")),
        EPERM,
    );
    assert_backing(&m, "nodel", "created.txt", "c", "rename refused in nodel");
}

fn rename_over_existing(mode: Mode) {
    let Some(m) = fixture(mode) else { return };
    for z in zone_names() {
        let ctx = format!("rename {z}/f.txt over {z}/dir/inner.txt");
        let r = fs::rename(m.path(&rel(z, "f.txt")), m.path(&rel(z, "dir/inner.txt")));
        if expect_outcome(r, rename_want(z), &ctx) {
            assert_absent(&m, z, "f.txt", &ctx);
            assert_backing(&m, z, "dir/inner.txt", ORIG, &ctx);
            assert_eq!(
                fs::read_to_string(m.path(&rel(z, "dir/inner.txt"))).unwrap(),
                ORIG
            );
        } else {
            assert_untouched(&m, z, &ctx);
        }
        // `mv -f` over an existing file, from the shell.
        let out = m.sh_in(z, "mv -f link blob.bin", &[]);
        if expect_sh_outcome(&out, rename_want(z), &format!("mv {z}/link over blob.bin")) {
            assert!(
                fs::symlink_metadata(m.backing(z, "blob.bin"))
                    .unwrap()
                    .file_type()
                    .is_symlink()
            );
        } else {
            assert_eq!(fs::read(m.backing(z, "blob.bin")).unwrap(), blob());
        }
    }
}

fn rename_dir_inside_zone(mode: Mode) {
    let Some(m) = fixture(mode) else { return };
    for z in zone_names() {
        let ctx = format!("rename dir {z}/dir -> {z}/emptydir/moved");
        let r = fs::rename(m.path(&rel(z, "dir")), m.path(&rel(z, "emptydir/moved")));
        if expect_outcome(r, rename_want(z), &ctx) {
            assert_backing(&m, z, "emptydir/moved/inner.txt", INNER, &ctx);
            assert_absent(&m, z, "dir", &ctx);
            assert_eq!(
                fs::read_to_string(m.path(&rel(z, "emptydir/moved/inner.txt"))).unwrap(),
                INNER
            );
        } else {
            assert_untouched(&m, z, &ctx);
        }
    }
}

// ----- between zones: EXDEV, whatever the zones' modes

fn rename_between_zones(mode: Mode) {
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

fn link_between_zones(mode: Mode) {
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

fn mv_between_zones(mode: Mode) {
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

fn root_level_changes(mode: Mode) {
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

fn root_level_beats_ro(mode: Mode) {
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

fn precedence(mode: Mode) {
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

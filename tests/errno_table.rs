//! DESIGN §3 ("What each operation gets") as a table, run against a real
//! mount in sandboxed and in direct mode (`both_modes!`).
//!
//! Each entry of [`ROWS`] is one operation: its name, its policy [`Class`]
//! (which decides the errno each kind of zone answers), the action (a
//! function of the zone, or a shell command run inside it) and the
//! [`Effect`]s it must have on the backing store when allowed. The runner
//! ([`table`]) gives every row its own set of the seven zones of
//! [`ZONES`] (`ro-03`, `rw-03`, ... for row 3), each filled by [`fill`]
//! with `f.txt`, `dir/inner.txt`, `emptydir/`, `link -> f.txt`,
//! `blob.bin` and the xattr `user.pre=v1` on `f.txt`, all in one mount per
//! mode, so rows can't disturb each other. For each row and zone it checks:
//!  - the outcome: success, or exactly the class's errno (for a shell
//!    command: a failure whose stderr carries that errno's text);
//!  - the backing store (content, kind, mode, owner, mtime, link count,
//!    inode, xattrs of every entry): refused → exactly as before; allowed →
//!    exactly the row's effects, nothing else (directories' mtime and link
//!    count may change then); allowed with `unchanged()` → exactly as before;
//!  - the zone seen through the mount shows the backing store.
//!
//! It collects every mismatch (naming mode, row and zone) and fails once at
//! the end, so one run shows all broken rows.
//!
//! To add a row: add one line to [`ROWS`], e.g.
//! `row("create", Write, call(|c| fs::write(c.p("new.txt"), "new\n")), &[lands("new.txt", "new\n")]),`
//!  - the action: `call(f)` with `f(c)` returning the worker's
//!    `io::Result<()>`, or `sh("cmd")`, run with the zone as cwd. `c` is the
//!    [`Ctx`] of one zone: `c.p(rel)` is a path in it through the mount,
//!    `c.b(rel)` the same in its backing store, `c.sib("ro", rel)` a path in
//!    the row's zone of another kind. Actions longer than a line go in
//!    `errno_table/actions.rs`.
//!  - the effects when allowed, one helper each: `lands(p, text)`,
//!    `lands_data(p, Blob(n) | Padded(text, n))`, `new_dir`, `new_link`,
//!    `new_fifo`, `gone(p)`, `moved(from, to)`, `hard_linked`, `perm`,
//!    `owner`, `mtime`, `touched`, `xattr`; or `unchanged()`.
//!  - a row needing a tool or root ends in `.needs(&[Tool("perl")])`: under
//!    CI=true a missing one fails the row; otherwise the row is skipped and
//!    the test records a `ZONEMOUNT-SKIP:` line (tests/common `require`).
//!
//! The row's zone set is made and mounted for it automatically. A new kind
//! of rule is a new [`Class`] (its errno per kind of zone in `Class::want`).
//!
//! Rows that aren't "one operation in every zone" (between zones: EXDEV and
//! `mv`; the mount's root: EACCES; which rule answers first) are tests of
//! their own in `errno_table/specials.rs`. Hidden paths (`hide`, sensitive
//! roots: ENOENT for everything) and read approval (`read: ask`,
//! `ask_read`) are tables of their own in `errno_table/hidden.rs`. Rows for `suffixes`, `protect`
//! and `max_file_bytes` are in `zone_limits.rs`. `ask` is expected to answer
//! EACCES at once: the harness passes `--no-approvals` when the binary
//! knows it, and until approvals land `ask` behaves as denied anyway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "errno_table/actions.rs"]
mod actions;
mod common;
#[path = "errno_table/hidden.rs"]
mod hidden;
#[path = "errno_table/specials.rs"]
mod specials;
#[path = "errno_table/store.rs"]
mod store;

use std::fs;
use std::io::{self, Write as _};
use std::os::unix::fs::{PermissionsExt, chown, symlink};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;

use Class::{Delete, Device, Read, Rename, Write};
use actions::{self as a, open};
use common::Need::{Root, Tool};
use common::*;
use hidden::{hidden_paths, read_ask};
use libc::{EACCES, ENOENT, EPERM, EROFS};
use specials::*;
use store::Data::{Blob, Padded};
use store::{BLOB_LEN, Data, Effect, INNER, ORIG, blob, diff, expected, mount_view, snapshot};

/// The zones of the fixture, as `(kind, spec)`.
pub const ZONES: &[(&str, &str)] = &[
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
    // Writes said outright: a class left out of a block would ask too.
    (
        "askdel",
        "mode: rw, approval: { write: preApproved, delete: ask }",
    ),
    ("rw2", "mode: rw"),
];

/// A `truncate(2)` of a path, with no open: a bare setattr(size).
macro_rules! truncate {
    ($len:literal, $path:literal) => {
        concat!(
            "perl -e 'truncate($ARGV[1], $ARGV[0]) or die \"truncate: $!\\n\"' ",
            $len,
            " ",
            $path
        )
    };
}

#[rustfmt::skip]
pub const ROWS: &[Row] = &[
    // look, list, read, readlink, xattr get/list, statfs: allowed everywhere, nothing changes
    row("lookup",                 Read,   call(a::lookup),                                          unchanged()),
    row("readdir",                Read,   call(a::readdir),                                         unchanged()),
    row("ls -la",                 Read,   call(a::ls_la),                                           unchanged()),
    row("read",                   Read,   call(a::read),                                            unchanged()),
    row("readlink",               Read,   call(a::readlink),                                        unchanged()),
    row("getfattr",               Read,   call(a::getfattr),                                        unchanged()).needs(&[Tool("getfattr")]),
    row("statfs",                 Read,   sh("stat -f . && stat -f f.txt && df -P ."),              unchanged()),
    // write content: EROFS in ro, else the `write` policy
    row("create",                 Write,  call(|c| fs::write(c.p("new.txt"), "new\n")),            &[lands("new.txt", "new\n")]),
    row("create O_EXCL in a dir", Write,  call(|c| open(c, "dir/excl.txt", "wx").map(drop)),        &[lands("dir/excl.txt", "")]),
    row("echo > new",             Write,  sh("echo sh > sh.txt"),                                   &[lands("sh.txt", "sh\n")]),
    row("open O_WRONLY",          Write,  call(|c| open(c, "f.txt", "w")?.write_all(b"XY")),        &[lands("f.txt", "XYiginal\n")]),
    row("open O_APPEND",          Write,  call(|c| open(c, "dir/inner.txt", "a")?.write_all(b"more\n")), &[lands("dir/inner.txt", "inner\nmore\n")]),
    row("open O_RDWR",            Write,  call(a::rdwr),                                            &[lands("f.txt", "orZginal\n")]),
    row("open O_TRUNC",           Write,  call(a::trunc),                                           &[lands("f.txt", "t\n")]),
    row("echo > existing",        Write,  sh("echo x > dir/inner.txt"),                             &[lands("dir/inner.txt", "x\n")]),
    row("ftruncate",              Write,  call(|c| open(c, "f.txt", "w")?.set_len(3)),              &[lands("f.txt", "ori")]),
    row("truncate(2) shorter",    Write,  sh(truncate!(4, "dir/inner.txt")),                        &[lands("dir/inner.txt", "inne")]).needs(&[Tool("perl")]),
    row("truncate(2) mid-blob",   Write,  sh(truncate!(100000, "blob.bin")),                        &[lands_data("blob.bin", Blob(100_000))]).needs(&[Tool("perl")]),
    row("truncate(2) longer",     Write,  sh(truncate!(20, "f.txt")),                               &[lands_data("f.txt", Padded(ORIG, 20))]).needs(&[Tool("perl")]),
    row("fallocate",              Write,  sh("fallocate -l 65536 f.txt"),                           &[lands_data("f.txt", Padded(ORIG, 65536))]).needs(&[Tool("fallocate")]),
    row("copy_file_range from ro",  Write, call(|c| a::copy(c, "ro", "blob.bin", "copy.bin", "wct")),  &[lands_data("copy.bin", Blob(BLOB_LEN))]),
    row("copy_file_range from rw2", Write, call(|c| a::copy(c, "rw2", "blob.bin", "copy.bin", "wct")), &[lands_data("copy.bin", Blob(BLOB_LEN))]),
    row("copy_file_range into f.txt", Write, call(|c| a::copy(c, "ro", "dir/inner.txt", "f.txt", "w")), &[lands("f.txt", "inner\nal\n")]),
    // new names: EROFS in ro, else the `write` policy; device nodes: EPERM in every rw zone
    row("mkdir (and use it)",     Write,  call(|c| { fs::create_dir(c.p("newdir"))?; fs::write(c.p("newdir/x"), "x") }), &[new_dir("newdir"), lands("newdir/x", "x")]),
    row("mkdir -p",               Write,  sh("mkdir -p a/b/c"),                                     &[new_dir("a/b/c")]),
    row("symlink (and follow it)", Write, call(a::symlink_and_follow),                              &[new_link("sl", "dir/inner.txt")]),
    row("symlink out of the zone", Write, call(|c| symlink("/etc/passwd", c.p("out"))),             &[new_link("out", "/etc/passwd")]),
    row("link",                   Write,  call(|c| fs::hard_link(c.p("f.txt"), c.p("dir/hl"))),     &[hard_linked("f.txt", "dir/hl")]),
    row("mkfifo",                 Write,  sh("mkfifo fifo"),                                        &[new_fifo("fifo")]).needs(&[Tool("mkfifo")]),
    row("mknod char device",      Device, sh("mknod null c 1 3"),                                   unchanged()).needs(&[Root]),
    row("mknod block device",     Device, sh("mknod blk b 7 0"),                                    unchanged()).needs(&[Root]),
    row("rename RENAME_WHITEOUT", Device, call(a::whiteout),                                        unchanged()),
    // metadata: EROFS in ro, else the `write` policy
    row("chmod",                  Write,  call(|c| fs::set_permissions(c.p("f.txt"), mode(0o600))), &[perm("f.txt", 0o600)]),
    row("chmod a dir",            Write,  call(|c| fs::set_permissions(c.p("dir"), mode(0o700))),   &[perm("dir", 0o700)]),
    row("chown to its owner",     Write,  call(a::chown_same),                                      unchanged()),
    row("chown to another uid",   Write,  call(|c| chown(c.p("f.txt"), Some(4321), Some(4321))),    &[owner("f.txt", 4321, 4321)]).needs(&[Root]),
    row("futimens",               Write,  call(a::futimens),                                        &[mtime("f.txt", 1_000_000_000)]),
    row("touch -h -m -d",         Write,  sh("touch -h -m -d @1100000000 dir/inner.txt"),           &[mtime("dir/inner.txt", 1_100_000_000)]),
    row("touch a dir",            Write,  sh("touch emptydir"),                                     &[touched("emptydir")]),
    row("setxattr new",           Write,  sh("setfattr -n user.new -v v2 f.txt"),                   &[xattr("f.txt", "user.new", Some("v2"))]).needs(&[Tool("setfattr")]),
    row("setxattr replace",       Write,  sh("setfattr -n user.pre -v changed f.txt"),              &[xattr("f.txt", "user.pre", Some("changed"))]).needs(&[Tool("setfattr")]),
    row("removexattr",            Write,  sh("setfattr -x user.pre f.txt"),                         &[xattr("f.txt", "user.pre", None)]).needs(&[Tool("setfattr")]),
    // unlink, rmdir: EROFS in ro, else the `delete` policy
    row("unlink",                 Delete, call(|c| fs::remove_file(c.p("f.txt"))),                  &[gone("f.txt")]),
    row("unlink a symlink",       Delete, call(|c| fs::remove_file(c.p("link"))),                   &[gone("link")]),
    row("rm",                     Delete, sh("rm -f dir/inner.txt"),                                &[gone("dir/inner.txt")]),
    row("rmdir",                  Delete, call(|c| fs::remove_dir(c.p("emptydir"))),                &[gone("emptydir")]),
    row("rm -r",                  Delete, sh("rm -r dir"),                                          &[gone("dir")]),
    // rename inside one zone: `write`, plus `delete` for the source (and a replaced destination)
    row("rename",                 Rename, call(|c| fs::rename(c.p("f.txt"), c.p("renamed.txt"))),   &[moved("f.txt", "renamed.txt")]),
    row("rename into a subdir",   Rename, call(|c| fs::rename(c.p("blob.bin"), c.p("dir/blob.bin"))), &[moved("blob.bin", "dir/blob.bin")]),
    row("rename over existing",   Rename, call(|c| fs::rename(c.p("f.txt"), c.p("dir/inner.txt"))), &[moved("f.txt", "dir/inner.txt")]),
    row("mv -f over existing",    Rename, sh("mv -f link blob.bin"),                                &[moved("link", "blob.bin")]),
    row("rename a dir",           Rename, call(|c| fs::rename(c.p("dir"), c.p("emptydir/moved"))),  &[moved("dir", "emptydir/moved")]),
];

both_modes!(
    table,
    rename_between_zones,
    link_between_zones,
    mv_between_zones,
    rename_of_created_in_nodel,
    root_level_changes,
    root_level_beats_ro,
    zone_dir_metadata,
    precedence,
    hidden_paths,
    read_ask,
    read_only_mount,
);

// ----- what a row is made of

/// Which rule of DESIGN §3 an operation falls under: what each kind of
/// zone answers.
#[derive(Clone, Copy, Debug)]
pub enum Class {
    /// Allowed everywhere.
    Read,
    /// EROFS in ro, else the `write` policy.
    Write,
    /// EROFS in ro, else the `delete` policy.
    Delete,
    /// A rename inside a zone: `write` for the destination, `delete` for
    /// the source (and for a destination it replaces).
    Rename,
    /// A device node: EROFS in ro (as any new name), EPERM in every rw zone.
    Device,
}

impl Class {
    /// The errno zone kind `kind` answers (None: allowed).
    pub fn want(self, kind: &str) -> Option<i32> {
        let write = match kind {
            "ro" => Some(EROFS),
            "blk" => Some(EPERM),
            "ask" => Some(EACCES),
            _ => None,
        };
        let delete = match kind {
            "ro" => Some(EROFS),
            "blk" | "nodel" => Some(EPERM),
            "ask" | "askdel" => Some(EACCES),
            _ => None,
        };
        match self {
            Read => None,
            Write => write,
            Delete => delete,
            Rename => write.or(delete),
            Device => Some(if kind == "ro" { EROFS } else { EPERM }),
        }
    }
}

/// What a row does in one zone.
#[derive(Clone, Copy)]
pub enum Act {
    /// Calls, whose result is what the worker sees.
    Call(fn(&Ctx) -> io::Result<()>),
    /// `sh -c` with the zone as cwd.
    Sh(&'static str),
}

#[derive(Clone, Copy)]
pub struct Row {
    pub name: &'static str,
    pub class: Class,
    pub act: Act,
    pub effects: &'static [Effect],
    pub needs: &'static [Need],
}

pub const fn row(name: &'static str, class: Class, act: Act, effects: &'static [Effect]) -> Row {
    Row {
        name,
        class,
        act,
        effects,
        needs: &[],
    }
}

impl Row {
    /// What the row needs from the machine (see `require`).
    pub const fn needs(self, needs: &'static [Need]) -> Row {
        Row { needs, ..self }
    }
}

pub const fn call(f: fn(&Ctx) -> io::Result<()>) -> Act {
    Act::Call(f)
}
pub const fn sh(cmd: &'static str) -> Act {
    Act::Sh(cmd)
}
pub const fn unchanged() -> &'static [Effect] {
    &[]
}
pub const fn lands(p: &'static str, text: &'static str) -> Effect {
    Effect::Lands(p, Data::Text(text))
}
pub const fn lands_data(p: &'static str, d: Data) -> Effect {
    Effect::Lands(p, d)
}
pub const fn new_dir(p: &'static str) -> Effect {
    Effect::Dir(p)
}
pub const fn new_link(p: &'static str, target: &'static str) -> Effect {
    Effect::Link(p, target)
}
pub const fn new_fifo(p: &'static str) -> Effect {
    Effect::Fifo(p)
}
pub const fn gone(p: &'static str) -> Effect {
    Effect::Gone(p)
}
pub const fn moved(from: &'static str, to: &'static str) -> Effect {
    Effect::Moved(from, to)
}
pub const fn hard_linked(from: &'static str, to: &'static str) -> Effect {
    Effect::HardLinked(from, to)
}
pub const fn perm(p: &'static str, m: u32) -> Effect {
    Effect::Perm(p, m)
}
pub const fn owner(p: &'static str, uid: u32, gid: u32) -> Effect {
    Effect::Owner(p, uid, gid)
}
pub const fn mtime(p: &'static str, secs: i64) -> Effect {
    Effect::Mtime(p, secs)
}
pub const fn touched(p: &'static str) -> Effect {
    Effect::Touched(p)
}
pub const fn xattr(p: &'static str, name: &'static str, v: Option<&'static str>) -> Effect {
    Effect::Xattr(p, name, v)
}
fn mode(m: u32) -> fs::Permissions {
    fs::Permissions::from_mode(m)
}

/// One zone of one row's set, as an action sees it.
pub struct Ctx<'a> {
    pub m: &'a TestMount,
    /// The row's index: its zone set.
    pub set: usize,
    /// `ro`, `rw`, ... (a name of [`ZONES`]).
    pub kind: &'static str,
    /// The zone's name in the mount, e.g. `ro-03`.
    pub zone: String,
}

impl Ctx<'_> {
    /// `rel` in this zone, through the mount.
    pub fn p(&self, rel: &str) -> PathBuf {
        self.sib(self.kind, rel)
    }
    /// `rel` in this row's zone of kind `kind`, through the mount.
    pub fn sib(&self, kind: &str, rel: &str) -> PathBuf {
        self.m.path(&zone_name(self.set, kind)).join(rel)
    }
    /// `rel` in this zone's backing store.
    pub fn b(&self, rel: &str) -> PathBuf {
        self.m.backing(&self.zone, rel)
    }
    /// `sh -c cmd` with this zone as cwd.
    pub fn sh(&self, cmd: &str) -> Out {
        self.m.sh_in(&self.zone, cmd, &[])
    }
}

fn zone_name(set: usize, kind: &str) -> String {
    format!("{kind}-{set:02}")
}

/// Pre-fill `zone`'s backing dir with the fixture (before mounting).
pub fn fill(s: Setup, zone: &str, blob: &[u8]) -> Setup {
    let s = s
        .file(zone, "f.txt", ORIG)
        .file(zone, "dir/inner.txt", INNER)
        .dir(zone, "emptydir")
        .symlink(zone, "link", "f.txt")
        .file(zone, "blob.bin", blob);
    // Known modes, so a chmod row is a real change whatever the umask.
    fs::set_permissions(s.backing(zone, "f.txt"), mode(0o644)).unwrap();
    fs::set_permissions(s.backing(zone, "dir"), mode(0o755)).unwrap();
    let f = s.backing(zone, "f.txt");
    rustix::fs::lsetxattr(&f, "user.pre", b"v1", rustix::fs::XattrFlags::empty())
        .unwrap_or_else(|e| panic!("host setxattr user.pre on {}: {e}", f.display()));
    s
}

// ----- the runner

/// Every row in every zone of its set, all in one mount; fails at the end
/// with every mismatch.
fn table(mode: Mode) {
    table_of(mode, ZONES, &[], |_| Ok(()));
}

/// The rows' ro zones alone, mounted with `--kernel-opens`: a mount whose
/// every zone is read-only with no rule only the daemon enforces is then
/// mounted read-only, and the kernel
/// opens its files and directories itself (no OPEN or RELEASE round
/// trip). Each row answers as in a ro zone of a mixed mount; the mount's
/// root answers EROFS (the kernel's, for a read-only mount) where a mixed
/// mount says EACCES. The one row that needs a rw zone of its set
/// (`copy_file_range from rw2`) has no place here.
fn read_only_mount(mode: Mode) {
    table_of(mode, &ZONES[..1], &["--kernel-opens"], |m| {
        let (_, _, opts) = mount_entry(m.mountpoint()).ok_or("not in /proc/mounts")?;
        if !opts.split(',').any(|o| o == "ro") {
            return Err(format!("mounted without ro: {opts}"));
        }
        let out = m.zonemount(&["status", "--json", m.mountpoint().to_str().unwrap()]);
        if !out.stdout.contains("the kernel opens files itself") {
            return Err(format!(
                "status does not say the kernel opens: {}",
                out.stdout
            ));
        }
        for (what, r) in [
            ("mkdir", fs::create_dir(m.path("newzone"))),
            ("create", fs::write(m.path("new.txt"), "x")),
        ] {
            if errno_of(&r) != Some(EROFS) {
                return Err(format!("{what} at the root: {r:?}, not EROFS"));
            }
        }
        Ok(())
    });
}

/// [`table`] over the zone kinds `kinds`; `check` looks at the mount once
/// the rows have run.
fn table_of(
    mode: Mode,
    kinds: &[(&'static str, &str)],
    args: &[&str],
    check: impl Fn(&TestMount) -> Result<(), String>,
) {
    if !fuse_ok() {
        return;
    }
    let mut failures = Vec::new();
    let runnable: Vec<bool> = ROWS
        .iter()
        .map(|r| match catch(|| r.needs.iter().all(|n| require(*n))) {
            Ok(true) => true,
            Ok(false) => {
                eprintln!("errno_table: {mode:?}: row `{}` skipped", r.name);
                false
            }
            Err(msg) => {
                failures.push(format!("[{mode:?}] row `{}`: {msg}", r.name));
                false
            }
        })
        .collect();
    let runnable: Vec<bool> = ROWS
        .iter()
        .zip(runnable)
        .map(|(r, run)| run && (kinds.len() > 1 || r.name != "copy_file_range from rw2"))
        .collect();
    let zones: Vec<(String, &str)> = (0..ROWS.len())
        .flat_map(|i| kinds.iter().map(move |(k, spec)| (zone_name(i, k), *spec)))
        .collect();
    let zone_refs: Vec<(&str, &str)> = zones.iter().map(|(z, s)| (z.as_str(), *s)).collect();
    let mut s = Setup::zones(mode, &zone_refs);
    let b = blob();
    for (z, _) in &zone_refs {
        s = fill(s, z, &b);
    }
    for a in args {
        s = s.arg(a);
    }
    let m = s.mount();
    let names: Vec<&str> = zone_refs.iter().map(|(z, _)| *z).collect();
    if let Err(msg) = catch(|| root_view(&m, &names)) {
        failures.push(format!(
            "[{mode:?}] the mount's root, before the rows: {msg}"
        ));
    }
    for (set, row) in ROWS.iter().enumerate().filter(|(i, _)| runnable[*i]) {
        for &(kind, _) in kinds {
            let c = Ctx {
                m: &m,
                set,
                kind,
                zone: zone_name(set, kind),
            };
            if let Err(msg) = catch(|| run_case(row, &c)) {
                failures.push(format!("[{mode:?}] row `{}` in {kind}: {msg}", row.name));
            }
        }
    }
    if let Err(msg) = catch(|| root_view(&m, &names)) {
        failures.push(format!(
            "[{mode:?}] the mount's root, after the rows: {msg}"
        ));
    }
    if let Err(msg) = check(&m) {
        failures.push(format!("[{mode:?}] {msg}"));
    }
    let ran = runnable.iter().filter(|r| **r).count();
    eprintln!(
        "errno_table: {mode:?}: {ran} of {} rows run, in {} zones each",
        ROWS.len(),
        kinds.len()
    );
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// One row in one zone: the outcome, the backing store, the mount's view.
fn run_case(row: &Row, c: &Ctx) {
    let want = row.class.want(c.kind);
    let before = snapshot(&c.b(""));
    let what = format!("{} in {}", row.name, c.zone);
    let allowed = match row.act {
        Act::Call(f) => expect_outcome(f(c), want, &what),
        Act::Sh(cmd) => expect_sh_outcome(&c.sh(cmd), want, &format!("{what}: `{cmd}`")),
    };
    let after = snapshot(&c.b(""));
    let verdict = if !allowed {
        diff(&before, &after).map_err(|d| format!("refused, yet the backing store changed:\n{d}"))
    } else if row.effects.is_empty() {
        diff(&before, &after).map_err(|d| format!("allowed, meant to change nothing, yet:\n{d}"))
    } else {
        diff(&expected(&before, row.effects), &after)
            .and_then(|()| store::check_extra(&before, &after, row.effects))
            .map_err(|d| format!("allowed, but the backing store is not exactly its effects:\n{d}"))
    };
    if let Err(d) = verdict.and_then(|()| mount_view(&c.p(""), &after)) {
        panic!("{what}: {d}");
    }
}

/// The mount's root: a directory listing exactly the zones; statfs works.
fn root_view(m: &TestMount, zones: &[&str]) {
    assert!(fs::metadata(m.path("")).unwrap().is_dir());
    assert_eq!(
        names(&m.path("")).unwrap(),
        sorted(zones),
        "root lists the zones"
    );
    assert_errno(fs::metadata(m.path("nozone")), ENOENT);
    let (st, out, err) = m.sh("stat -f -c '%b %S' .");
    assert!(st.success(), "statfs on root: {err}");
    assert!(!out.trim().is_empty());
}

/// Run `f`, turning a panic into its message.
fn catch<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
        p.downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panic".to_string())
    })
}

//! The backing store of one zone as data: a [`Tree`] snapshot before and
//! after each case, what a row's [`Effect`]s make of the "before", and the
//! comparisons the runner asserts (exact when refused, the effects exactly
//! when allowed), plus the same tree seen through the mount.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::common::*;

/// The fixture's file contents.
pub const ORIG: &str = "original\n";
pub const INNER: &str = "inner\n";
pub const BLOB_LEN: usize = 300_000;

pub fn blob() -> Vec<u8> {
    (0..BLOB_LEN).map(|i| (i * 7 % 251) as u8).collect()
}

/// What a file should hold after a row.
#[derive(Clone, Copy, Debug)]
pub enum Data {
    Text(&'static str),
    /// The first `n` bytes of [`blob`].
    Blob(usize),
    /// The text, then zeros up to `n` bytes.
    Padded(&'static str, usize),
}

impl Data {
    fn bytes(self) -> Vec<u8> {
        match self {
            Data::Text(s) => s.as_bytes().to_vec(),
            Data::Blob(n) => blob()[..n].to_vec(),
            Data::Padded(s, n) => {
                let mut v = s.as_bytes().to_vec();
                v.resize(n, 0);
                v
            }
        }
    }
}

/// One change an allowed row makes to its zone's backing store. Paths are
/// relative to the zone. Everything not named stays exactly as it was.
#[derive(Clone, Copy, Debug)]
pub enum Effect {
    /// A regular file (new, or rewritten in place) holding exactly this.
    Lands(&'static str, Data),
    /// A new directory.
    Dir(&'static str),
    /// A new symlink with this target.
    Link(&'static str, &'static str),
    /// A new FIFO.
    Fifo(&'static str),
    /// The name and everything under it are gone.
    Gone(&'static str),
    /// Renamed (replacing whatever the destination was).
    Moved(&'static str, &'static str),
    /// A second name for the same inode.
    HardLinked(&'static str, &'static str),
    Perm(&'static str, u32),
    Owner(&'static str, u32, u32),
    /// mtime set to exactly these seconds (nanoseconds 0).
    Mtime(&'static str, i64),
    /// mtime changed, to about now.
    Touched(&'static str),
    /// An xattr set (Some) or removed (None).
    Xattr(&'static str, &'static str, Option<&'static str>),
}

/// One entry of a snapshot; `None` fields are "don't care" in an expected
/// tree (a snapshot always fills them all).
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub kind: Kind,
    pub perm: Option<u32>,
    pub owner: Option<(u32, u32)>,
    pub mtime: Option<(i64, i64)>,
    pub nlink: Option<u64>,
    pub ino: Option<u64>,
    pub xattrs: Option<BTreeMap<String, Vec<u8>>>,
}

#[derive(Clone, PartialEq)]
pub enum Kind {
    File(Vec<u8>),
    Dir,
    Link(PathBuf),
    Fifo,
    Other(u32),
}

impl std::fmt::Debug for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Kind::File(d) if d.len() <= 64 => {
                write!(f, "File({:?})", String::from_utf8_lossy(d))
            }
            Kind::File(d) => write!(f, "File({} bytes, fnv {:x})", d.len(), fnv1a(d, FNV_OFFSET)),
            Kind::Dir => write!(f, "Dir"),
            Kind::Link(t) => write!(f, "Link({})", t.display()),
            Kind::Fifo => write!(f, "Fifo"),
            Kind::Other(m) => write!(f, "Other({m:o})"),
        }
    }
}

/// A zone's backing tree: relative path → entry (the zone dir itself is
/// not in it).
pub type Tree = BTreeMap<String, Entry>;

fn xattrs(p: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut list = vec![0u8; 1 << 16];
    let n = rustix::fs::llistxattr(p, &mut list[..])
        .unwrap_or_else(|e| panic!("llistxattr {}: {e}", p.display()));
    let mut out = BTreeMap::new();
    for name in list[..n].split(|b| *b == 0).filter(|n| !n.is_empty()) {
        let name = String::from_utf8_lossy(name).into_owned();
        let mut v = vec![0u8; 1 << 16];
        let len = rustix::fs::lgetxattr(p, name.as_str(), &mut v[..])
            .unwrap_or_else(|e| panic!("lgetxattr {} {name}: {e}", p.display()));
        v.truncate(len);
        out.insert(name, v);
    }
    out
}

/// Everything under `dir` (on the host), never following symlinks.
pub fn snapshot(dir: &Path) -> Tree {
    let mut t = Tree::new();
    walk(dir, "", &mut t);
    t
}

fn walk(dir: &Path, prefix: &str, t: &mut Tree) {
    let rd = fs::read_dir(dir).unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()));
    for e in rd {
        let e = e.unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()));
        let p = e.path();
        let rel = format!("{prefix}{}", e.file_name().to_string_lossy());
        let md = fs::symlink_metadata(&p).unwrap_or_else(|e| panic!("lstat {}: {e}", p.display()));
        let ft = md.file_type();
        let kind = if ft.is_file() {
            Kind::File(fs::read(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display())))
        } else if ft.is_dir() {
            Kind::Dir
        } else if ft.is_symlink() {
            Kind::Link(fs::read_link(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        } else if ft.is_fifo() {
            Kind::Fifo
        } else {
            Kind::Other(md.mode())
        };
        let is_dir = kind == Kind::Dir;
        t.insert(
            rel.clone(),
            Entry {
                kind,
                perm: Some(md.mode() & 0o7777),
                owner: Some((md.uid(), md.gid())),
                mtime: Some((md.mtime(), md.mtime_nsec())),
                nlink: Some(md.nlink()),
                ino: Some(md.ino()),
                xattrs: Some(xattrs(&p)),
            },
        );
        if is_dir {
            walk(&p, &format!("{rel}/"), t);
        }
    }
}

fn fresh(kind: Kind) -> Entry {
    Entry {
        kind,
        perm: None,
        owner: None,
        mtime: None,
        nlink: None,
        ino: None,
        xattrs: None,
    }
}

fn under(path: &str, top: &str) -> bool {
    path == top || path.starts_with(&format!("{top}/"))
}

/// Insert `e` at `p`, and "don't care" directories for missing parents.
fn put(t: &mut Tree, p: &str, e: Entry) {
    for (i, _) in p.match_indices('/') {
        t.entry(p[..i].to_string())
            .or_insert_with(|| fresh(Kind::Dir));
    }
    t.insert(p.to_string(), e);
}

#[track_caller]
fn get<'t>(t: &'t mut Tree, p: &str) -> &'t mut Entry {
    t.get_mut(p)
        .unwrap_or_else(|| panic!("row effect names {p}, which the fixture lacks"))
}

/// The tree `before` should become under `effects`. Directories' mtime
/// and link count are "don't care" (entries come and go in them).
pub fn expected(before: &Tree, effects: &[Effect]) -> Tree {
    let mut t = before.clone();
    for e in effects {
        match *e {
            Effect::Lands(p, d) => {
                let kind = Kind::File(d.bytes());
                match t.get_mut(p) {
                    Some(old) => {
                        old.kind = kind;
                        old.mtime = None;
                    }
                    None => put(&mut t, p, fresh(kind)),
                }
            }
            Effect::Dir(p) => put(&mut t, p, fresh(Kind::Dir)),
            Effect::Link(p, target) => put(&mut t, p, fresh(Kind::Link(target.into()))),
            Effect::Fifo(p) => put(&mut t, p, fresh(Kind::Fifo)),
            Effect::Gone(p) => t.retain(|k, _| !under(k, p)),
            Effect::Moved(from, to) => {
                t.retain(|k, _| !under(k, to));
                let moving: Vec<String> = t.keys().filter(|k| under(k, from)).cloned().collect();
                assert!(
                    !moving.is_empty(),
                    "row effect moves {from}, which the fixture lacks"
                );
                for k in moving {
                    let v = t.remove(&k).expect("listed");
                    put(&mut t, &format!("{to}{}", &k[from.len()..]), v);
                }
            }
            Effect::HardLinked(from, to) => {
                let src = get(&mut t, from);
                src.nlink = src.nlink.map(|n| n + 1);
                let copy = src.clone();
                put(&mut t, to, copy);
            }
            Effect::Perm(p, m) => get(&mut t, p).perm = Some(m),
            Effect::Owner(p, u, g) => get(&mut t, p).owner = Some((u, g)),
            Effect::Mtime(p, s) => get(&mut t, p).mtime = Some((s, 0)),
            Effect::Touched(p) => get(&mut t, p).mtime = None,
            Effect::Xattr(p, name, v) => {
                let x = get(&mut t, p).xattrs.get_or_insert_with(BTreeMap::new);
                match v {
                    Some(v) => x.insert(name.to_string(), v.as_bytes().to_vec()),
                    None => x.remove(name),
                };
            }
        }
    }
    for e in t.values_mut().filter(|e| e.kind == Kind::Dir) {
        e.mtime = None;
        e.nlink = None;
    }
    t
}

/// Checks an effect needs beyond the tree: `Touched` means "about now".
pub fn check_extra(before: &Tree, after: &Tree, effects: &[Effect]) -> Result<(), String> {
    for e in effects {
        if let Effect::Touched(p) = *e {
            let (b, a) = (before[p].mtime, after.get(p).and_then(|e| e.mtime));
            let (Some(b), Some(a)) = (b, a) else {
                return Err(format!("{p}: no mtime"));
            };
            let when = UNIX_EPOCH + Duration::new(a.0 as u64, a.1 as u32);
            let age = SystemTime::now().duration_since(when).unwrap_or_default();
            if a == b || age > Duration::from_secs(60) {
                return Err(format!("{p}: mtime {a:?} (was {b:?}) is not a fresh touch"));
            }
        }
    }
    Ok(())
}

fn field_diffs(want: &Entry, got: &Entry) -> Vec<String> {
    let mut d = Vec::new();
    macro_rules! cmp {
        ($f:ident) => {
            if let Some(w) = &want.$f {
                if got.$f.as_ref() != Some(w) {
                    d.push(format!("{} {:?} != wanted {:?}", stringify!($f), got.$f, w));
                }
            }
        };
    }
    if want.kind != got.kind {
        d.push(format!("{:?} != wanted {:?}", got.kind, want.kind));
    }
    cmp!(perm);
    cmp!(owner);
    cmp!(mtime);
    cmp!(nlink);
    cmp!(ino);
    cmp!(xattrs);
    d
}

/// Every difference between `want` and `got`, or Ok.
pub fn diff(want: &Tree, got: &Tree) -> Result<(), String> {
    let mut msg = String::new();
    for (k, w) in want {
        match got.get(k) {
            None => writeln!(msg, "  {k}: missing (wanted {:?})", w.kind).unwrap(),
            Some(g) => {
                for d in field_diffs(w, g) {
                    writeln!(msg, "  {k}: {d}").unwrap();
                }
            }
        }
    }
    for (k, g) in got.iter().filter(|(k, _)| !want.contains_key(*k)) {
        writeln!(msg, "  {k}: unexpected {:?}", g.kind).unwrap();
    }
    if msg.is_empty() { Ok(()) } else { Err(msg) }
}

/// The zone seen through the mount (`root` = its mount path) shows exactly
/// the backing tree: names, kinds, link targets, modes, owners, sizes, and
/// the content of files up to 64 KiB.
pub fn mount_view(root: &Path, backing: &Tree) -> Result<(), String> {
    let mut msg = String::new();
    let mut seen = Vec::new();
    view_walk(root, "", &mut seen).map_err(|e| format!("walking {}: {e}", root.display()))?;
    for (rel, md) in &seen {
        let Some(b) = backing.get(rel) else {
            writeln!(msg, "  {rel}: shown by the mount, not in the backing store").unwrap();
            continue;
        };
        let p = root.join(rel);
        let ok = match &b.kind {
            Kind::File(data) => {
                md.is_file()
                    && md.len() == data.len() as u64
                    && (data.len() > 1 << 16 || fs::read(&p).ok().as_ref() == Some(data))
            }
            Kind::Dir => md.is_dir(),
            Kind::Link(t) => fs::read_link(&p).ok().as_ref() == Some(t),
            Kind::Fifo => md.file_type().is_fifo(),
            Kind::Other(_) => true,
        };
        if !ok {
            writeln!(
                msg,
                "  {rel}: the mount shows something else than {:?}",
                b.kind
            )
            .unwrap();
        }
        if b.perm != Some(md.mode() & 0o7777) || b.owner != Some((md.uid(), md.gid())) {
            writeln!(
                msg,
                "  {rel}: mode/owner {:o} {}:{} through the mount, {:?} {:?} in the backing store",
                md.mode() & 0o7777,
                md.uid(),
                md.gid(),
                b.perm,
                b.owner
            )
            .unwrap();
        }
    }
    for k in backing
        .keys()
        .filter(|k| !seen.iter().any(|(s, _)| s == *k))
    {
        writeln!(msg, "  {k}: in the backing store, not shown by the mount").unwrap();
    }
    if msg.is_empty() {
        Ok(())
    } else {
        Err(format!("mount view:\n{msg}"))
    }
}

fn view_walk(
    dir: &Path,
    prefix: &str,
    out: &mut Vec<(String, fs::Metadata)>,
) -> std::io::Result<()> {
    for e in fs::read_dir(dir)? {
        let e = e?;
        let rel = format!("{prefix}{}", e.file_name().to_string_lossy());
        let md = fs::symlink_metadata(e.path())?;
        let is_dir = md.is_dir();
        out.push((rel.clone(), md));
        if is_dir {
            view_walk(&e.path(), &format!("{rel}/"), out)?;
        }
    }
    Ok(())
}

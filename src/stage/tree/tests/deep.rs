//! Trees deeper than `PATH_MAX` (thousands of levels: a worker's
//! `mkdir d; cd d` in a loop): listed, diffed, committed and discarded
//! without a recursion per level or a path past 4096 bytes. A walk that
//! recursed overflowed the daemon's control thread (the mount died), and
//! paths past `PATH_MAX` failed with ENAMETOOLONG. Found by an attack
//! pass.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use rustix::fs::Stat;

use super::*;

/// How deep the trees go: past `PATH_MAX` (two bytes a level) and past
/// what a recursion per level survived on a thread's 2 MiB stack.
const DEPTH: usize = 3000;

/// Directory `name` in `dir`, not followed.
fn open_dir_at(dir: &OwnedFd, name: &str) -> OwnedFd {
    rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW,
        Mode::empty(),
    )
    .unwrap()
}

fn stat_at(dir: &OwnedFd, name: &str) -> Option<Stat> {
    rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).ok()
}

/// A chain of `n` directories named `name` made in the overlay under
/// `top` (made first when missing, noted as the daemon notes what a
/// worker makes), each reached from the one above by fd; a file `leaf`
/// with `data` at the bottom. Returns the path of the bottom dir.
fn chain_in_view(s: &Stage, top: &str, name: &str, n: usize, data: &str) -> PathBuf {
    let fp = s.fp();
    let mut rel = PathBuf::from(top);
    if rustix::fs::statat(&s.view, top, AtFlags::SYMLINK_NOFOLLOW).is_err() {
        fp.note(&rel, None).unwrap();
        rustix::fs::mkdirat(&s.view, top, Mode::from_raw_mode(0o755)).unwrap();
    }
    let mut d = open_dir_at(&s.view, top);
    for _ in 0..n {
        rel.push(name);
        if stat_at(&d, name).is_none() {
            fp.note(&rel, None).unwrap();
            rustix::fs::mkdirat(&d, name, Mode::from_raw_mode(0o755)).unwrap();
        }
        d = open_dir_at(&d, name);
    }
    let leaf = rel.join("leaf");
    let st = stat_at(&d, "leaf");
    fp.note(&leaf, st.as_ref().map(Fingerprint::of)).unwrap();
    let f = rustix::fs::openat(
        &d,
        "leaf",
        OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC,
        Mode::from_raw_mode(0o644),
    )
    .unwrap();
    rustix::io::write(&f, data.as_bytes()).unwrap();
    rel
}

/// A chain made straight in the backing dir (the host's own).
fn chain_in(dir: &Path, top: &str, name: &str, n: usize) -> PathBuf {
    fs::create_dir_all(dir.join(top)).unwrap();
    let mut d = rustix::fs::open(
        dir.join(top),
        OFlags::RDONLY | OFlags::DIRECTORY,
        Mode::empty(),
    )
    .unwrap();
    let mut rel = PathBuf::from(top);
    for _ in 0..n {
        rustix::fs::mkdirat(&d, name, Mode::from_raw_mode(0o755)).unwrap();
        d = open_dir_at(&d, name);
        rel.push(name);
    }
    for f in ["leaf", "other"] {
        let fd = rustix::fs::openat(
            &d,
            f,
            OFlags::WRONLY | OFlags::CREATE,
            Mode::from_raw_mode(0o644),
        )
        .unwrap();
        rustix::io::write(&fd, b"host\n").unwrap();
    }
    rel
}

/// How many entries the tree at `rel` under `root` holds (a loop, each
/// directory reached by fd; bounded by the entries there).
fn count(root: &Path, rel: &Path) -> u64 {
    let r = Root::open(root).unwrap();
    let mut todo = vec![r.dir(rel).unwrap()];
    let mut n = 0;
    while let Some(d) = todo.pop() {
        for e in rustix::fs::Dir::read_from(&d).unwrap() {
            let e = e.unwrap();
            let name = OsStr::from_bytes(e.file_name().to_bytes());
            if name == "." || name == ".." {
                continue;
            }
            n += 1;
            if let Ok(sub) = rustix::fs::openat(
                &d,
                name,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW,
                Mode::empty(),
            ) {
                todo.push(sub);
            }
        }
    }
    n
}

/// The overlay mounted afresh (as the daemon does after a commit).
fn remount(s: &mut Stage) {
    let work = s.zone.join("work");
    let (view, _) = overlay::mount(&overlay::Layers {
        lower: &[&s.lower],
        upper: Some((&s.upper, &work)),
    })
    .unwrap();
    s.view = view;
}

#[test]
fn a_tree_deeper_than_path_max_is_listed_committed_and_discarded() {
    let Some(mut s) = stage() else { return };
    // The host's deep tree, changed deep down through the overlay (its
    // dirs copied up): a file edited, one deleted.
    let host = chain_in(&s.lower, "host", "hh", DEPTH / 2);
    assert!(host.as_os_str().len() > 4096);
    {
        let fp = s.fp();
        let r = Root::open(&s.lower).unwrap();
        for f in ["leaf", "other"] {
            let p = host.join(f);
            fp.note(&p, r.stat(&p).unwrap().as_ref().map(Fingerprint::of))
                .unwrap();
        }
    }
    let view = Root::from_fd(
        rustix::io::fcntl_dupfd_cloexec(&s.view, 0).unwrap(),
        PathBuf::from("view"),
    );
    let vd = view.dir(&host).unwrap();
    let f =
        rustix::fs::openat(&vd, "leaf", OFlags::WRONLY | OFlags::APPEND, Mode::empty()).unwrap();
    rustix::io::write(&f, b"worker\n").unwrap();
    rustix::fs::unlinkat(&vd, "other", AtFlags::empty()).unwrap();
    // The worker's own tree.
    let mine = chain_in_view(&s, "deep", "d", DEPTH, "bottom\n");
    assert!(mine.as_os_str().len() > 4096);
    let l = s.layers();
    let list = changes(&l, &[]).unwrap();
    let by = |p: &Path| list.iter().find(|c| c.path == p);
    assert_eq!(
        list.len(),
        1 + DEPTH + 1 + 2,
        "the worker's dirs and leaf, the host's two files"
    );
    assert_eq!(by(&mine.join("leaf")).map(|c| c.kind), Some(Kind::Added));
    assert_eq!(by(&host.join("leaf")).map(|c| c.kind), Some(Kind::Modified));
    assert_eq!(by(&host.join("other")).map(|c| c.kind), Some(Kind::Deleted));
    // Only under a deep path, too.
    let under = changes(&l, std::slice::from_ref(&mine)).unwrap();
    assert_eq!(under.len(), 2, "{:?}", kinds(&under).len());
    let d = diff(&l, by(&host.join("leaf")).unwrap()).unwrap();
    assert!(d.contains("+worker\n"), "{d}");
    let p = patch(&l, &list).unwrap();
    assert!(p.contains("+bottom\n") && p.contains("+worker\n"), "{p}");
    // Commit: the backing dir gets all of it, the stage ends empty.
    let want = list.len();
    let r = commit(&l, &s.fp(), &s.zone, &[], false).unwrap();
    assert!(r.conflicts.is_empty(), "{:?}", r.conflicts.first());
    assert_eq!(r.applied.len(), want);
    assert_eq!(count(&s.lower, Path::new("deep")), DEPTH as u64 + 1);
    assert_eq!(count(&s.lower, Path::new("host")), DEPTH as u64 / 2 + 1);
    let r = Root::open(&s.lower).unwrap();
    let mut leaf = String::new();
    std::io::Read::read_to_string(
        &mut fs::File::from(r.open_at(&host.join("leaf"), OFlags::RDONLY).unwrap()),
        &mut leaf,
    )
    .unwrap();
    assert_eq!(leaf, "host\nworker\n");
    assert!(changes(&l, &[]).unwrap().is_empty());
    assert!(fs::read_dir(&s.upper).unwrap().next().is_none());
    // A deep deletion and a new tree under the committed one, discarded.
    drop(view);
    remount(&mut s);
    let view = Root::from_fd(
        rustix::io::fcntl_dupfd_cloexec(&s.view, 0).unwrap(),
        PathBuf::from("view"),
    );
    let vd = view.dir(&mine).unwrap();
    rustix::fs::unlinkat(&vd, "leaf", AtFlags::empty()).unwrap();
    drop(vd);
    chain_in_view(&s, "deep", "d", DEPTH + 100, "more\n");
    let list = changes(&l, &[]).unwrap();
    assert_eq!(list.len(), 100 + 2, "{:?}", list.first());
    let dropped = discard(&l, &s.fp(), &[]).unwrap();
    assert_eq!(dropped.len(), 102);
    assert!(changes(&l, &[]).unwrap().is_empty());
    assert!(fs::read_dir(&s.upper).unwrap().next().is_none());
    // A partial discard of a deep path.
    drop(view);
    remount(&mut s);
    chain_in_view(&s, "deep", "d", DEPTH + 10, "more\n");
    let deep = mine.join("d");
    let dropped = discard(&l, &s.fp(), &[deep]).unwrap();
    assert_eq!(dropped.len(), 11);
    assert!(changes(&l, &[]).unwrap().is_empty());
}

//! Node bookkeeping: the zones as root entries, nothing left behind on
//! forget, hard links sharing a node across renames, and a panicking
//! callback that never unwinds into the FUSE thread.

use super::*;

#[test]
pub(super) fn zones_are_the_root_entries() {
    let f = fixture();
    assert_eq!(found(&f.core, ROOT, "work").unwrap().ino.0, WORK);
    assert_eq!(found(&f.core, ROOT, "data").unwrap().ino.0, DATA);
    // A missing name is a negative entry, cached for the root's TTL.
    let miss = f.core.lookup(&CTX, ROOT, OsStr::new("nope")).unwrap();
    assert_eq!(miss.attr.ino.0, 0);
    let fh = f.core.opendir(&CTX, ROOT).unwrap();
    let names: Vec<_> = f
        .core
        .readdir(fh, 0)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, vec![".", "..", "work", "data"]);
}

#[test]
pub(super) fn nothing_leaks_on_forget() {
    let f = fixture();
    let base = f.core.node_count();
    for i in 0..50 {
        std::fs::write(f.rw.join(format!("f{i}")), "x").unwrap();
    }
    let mut inos = Vec::new();
    for i in 0..50 {
        let name = format!("f{i}");
        inos.push(found(&f.core, WORK, &name).unwrap().ino.0);
        // a second lookup of the same name is the same node, counted twice
        assert_eq!(
            found(&f.core, WORK, &name).unwrap().ino.0,
            *inos.last().unwrap()
        );
    }
    assert_eq!(f.core.node_count(), base + 50);
    for ino in &inos {
        f.core.forget(*ino, 1);
    }
    assert_eq!(
        f.core.node_count(),
        base + 50,
        "one lookup each is still held"
    );
    for ino in &inos {
        f.core.forget(*ino, 1);
    }
    assert_eq!(f.core.node_count(), base);
    // zone dirs and the root are never forgotten
    f.core.forget(WORK, 100);
    f.core.forget(ROOT, 100);
    assert_eq!(f.core.node_count(), base);
    // handles are released
    let fh = f.core.opendir(&CTX, WORK).unwrap();
    f.core.releasedir(fh);
    assert_eq!(f.core.open_handles(), 0);
}

#[test]
pub(super) fn hard_links_share_a_node_and_renames_keep_it() {
    let f = fixture();
    let (attr, fh) = create(&f.core, WORK, "a", libc::O_RDWR).unwrap();
    let linked = link(&f.core, attr.ino.0, WORK, "b").unwrap().attr;
    assert_eq!(linked.ino, attr.ino);
    assert_eq!(linked.nlink, 2);
    rename(&f.core, WORK, "a", WORK, "c").unwrap();
    assert_eq!(found(&f.core, WORK, "c").unwrap().ino, attr.ino);
    // the open handle still writes into the renamed file
    assert_eq!(f.core.write(fh, 0, b"hello", false).unwrap(), 5);
    assert_eq!(std::fs::read(f.rw.join("c")).unwrap(), b"hello");
    f.core.release(fh);
}

#[test]
pub(super) fn a_panicking_callback_does_not_unwind_into_the_fuse_thread() {
    let mut after = false;
    crate::fs::adapter::guarded("test", || panic!("boom"));
    crate::fs::adapter::guarded("test", || after = true);
    assert!(after, "the thread serves the next request");
}

/// A staged zone's file whose hard links lie in a lower layer gets a node
/// per name (the overlay copies up the name opened): each name keeps its
/// own node across lookups, all show the inode number the shared node
/// has, and forgetting one leaves nothing behind.
#[test]
pub(super) fn one_name_nodes_are_kept_per_name_and_show_the_shared_number() {
    let found = |ino: u64| named(ino, false, 0);
    let t = one_zone();
    let dir = t.zone_root(0).unwrap();
    let none = |_| None;
    let shared = t.remember(0, &dir, OsStr::new("a"), found(40), false, none);
    let b = t.remember(0, &dir, OsStr::new("b"), found(40), true, none);
    let c = t.remember(0, &dir, OsStr::new("c"), found(40), true, none);
    assert!(b.ino != shared.ino && c.ino != shared.ino && b.ino != c.ino);
    assert_eq!(shared.shown_ino(), shared.ino);
    assert_eq!((b.shown_ino(), c.shown_ino()), (shared.ino, shared.ino));
    let again = t.remember(0, &dir, OsStr::new("b"), found(40), true, none);
    assert_eq!(again.ino, b.ino, "the same name is the same node");
    assert_eq!(t.len(), 2 + 3);
    assert!(!t.forget(b.ino, 1), "looked up twice");
    assert!(t.forget(b.ino, 1));
    let fresh = t.remember(0, &dir, OsStr::new("b"), found(40), true, none);
    assert_ne!(fresh.ino, b.ino, "forgotten: a new node");
    for n in [&fresh, &c, &shared] {
        assert!(t.forget(n.ino, 1));
    }
    assert_eq!(t.len(), 2);
    // With no shared node yet, a node of one name shows the number the
    // shared node would get.
    let d = t.remember(0, &dir, OsStr::new("d"), found(41), true, none);
    let e = t.remember(0, &dir, OsStr::new("e"), found(41), false, none);
    assert_eq!(d.shown_ino(), e.ino);
}

/// A file looked up by several names remembers them, so the kernel can
/// be told to forget each (after a commit, discard or rewind).
#[test]
pub(super) fn a_file_seen_by_several_names_lists_them_all() {
    let f = fixture();
    std::fs::write(f.rw.join("x"), "a").unwrap();
    std::fs::hard_link(f.rw.join("x"), f.rw.join("x2")).unwrap();
    std::fs::write(f.rw.join("alone"), "a").unwrap();
    for n in ["x", "x2", "alone", "x", "x2"] {
        found(&f.core, WORK, n).unwrap();
    }
    let mut names: Vec<_> = f
        .core
        .zone_names_of(0)
        .into_iter()
        .map(|(p, n)| (p, n.to_string_lossy().into_owned()))
        .collect();
    names.sort();
    let name = |n: &str| (WORK, n.to_string());
    assert_eq!(names, [name("alone"), name("x"), name("x2")]);
}

/// A node reached by name keeps its number only within one mounting of
/// its staged zone's overlay: after a commit, checkpoint merge or rewind
/// (a new generation), a file found at another name with the number the
/// node had is another file (the number was freed and reused), and gets a
/// node of its own; found at the node's own name it is the node's file.
#[test]
pub(super) fn an_inode_number_reused_after_a_restage_is_another_file() {
    let found = |ino: u64, generation: u64| named(ino, false, generation);
    let t = one_zone();
    let dir = t.zone_root(0).unwrap();
    let none = |_| None;
    let b = t.remember(0, &dir, OsStr::new("b"), found(40, 0), false, none);
    // The same generation: a named node with no fd at hand is what its
    // number now reaches (a rename by the host), as before.
    let moved = t.remember(0, &dir, OsStr::new("b2"), found(40, 0), false, none);
    assert_eq!(moved.ino, b.ino);
    assert!(b.is_at(&dir, OsStr::new("b2")));
    // After a restage, number 40 at another name is another file.
    let z = t.remember(0, &dir, OsStr::new("z"), found(40, 1), false, none);
    assert_ne!(z.ino, b.ino, "a reused number took over b's node");
    assert!(b.is_at(&dir, OsStr::new("b2")), "b's node moved to z");
    // Found at its own name with its number, in a later generation: the
    // node's file, seen now in that generation.
    let t = one_zone();
    let dir = t.zone_root(0).unwrap();
    let b = t.remember(0, &dir, OsStr::new("b"), found(40, 0), false, none);
    let again = t.remember(0, &dir, OsStr::new("b"), found(40, 2), false, none);
    assert_eq!(again.ino, b.ino);
    assert_eq!((b.key(), b.key_generation()), ((7, 40), 2));
}

/// What a lookup by name found (no kernel file handle): object `ino` on
/// device 7, in restage generation `generation`.
fn named(ino: u64, is_dir: bool, generation: u64) -> crate::fs::inodes::Found {
    crate::fs::inodes::Found {
        anchor: crate::fs::inodes::Anchor::Named,
        dev: 7,
        ino,
        is_dir,
        is_symlink: false,
        generation,
    }
}

/// A table of one zone `w` whose dir is object 2, found by name.
fn one_zone() -> crate::fs::inodes::Inodes {
    crate::fs::inodes::Inodes::new(vec![(std::ffi::OsString::from("w"), named(2, true, 0))])
}

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

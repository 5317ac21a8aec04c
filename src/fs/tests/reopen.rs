//! Nodes reopened by name (no kernel file handles, as for a daemon without
//! CAP_DAC_READ_SEARCH; forced here so it runs as root too): the walk from
//! a zone dir, what a host rename or replacement makes of a node, renames
//! and removals through the mount, symlinks on the way, bounded fds, and
//! every other core test run again in this mode.

use super::*;
use crate::fs::core::FD_CACHE_MAX;

/// A core like [`fixture`]'s that never uses kernel file handles.
fn by_name() -> Fixture {
    BY_NAME.set(true);
    let f = fixture();
    BY_NAME.set(false);
    assert!(
        f.core.without().iter().any(|w| w.feature == "file_handles"),
        "the core says it does without file handles"
    );
    f
}

/// Close every cached fd: the next use of a node reopens it.
fn drop_cached(f: &Fixture) {
    f.core.reach().clear_cache();
}

/// Look up a path of names from the zone dir `WORK`; the last node's id.
fn walk(core: &Arc<Core>, names: &[&str]) -> FsResult<u64> {
    let mut ino = WORK;
    for n in names {
        ino = found(core, ino, n)?.ino.0;
    }
    Ok(ino)
}

fn read_all(core: &Arc<Core>, ino: u64) -> FsResult<Vec<u8>> {
    let (fh, _) = open(core, ino, libc::O_RDONLY)?;
    let r = read(core, fh, 0, 4096);
    core.release(fh);
    r
}

fn errno<T: std::fmt::Debug>(r: FsResult<T>) -> i32 {
    r.expect_err("an error").errno()
}

#[test]
fn the_other_core_tests_pass_reopening_by_name() {
    let tests: &[(&str, fn())] = &[
        (
            "symlinks_in_a_zone_are_never_followed_by_the_daemon",
            names::symlinks_in_a_zone_are_never_followed_by_the_daemon,
        ),
        (
            "dot_dot_and_slashes_are_not_names",
            names::dot_dot_and_slashes_are_not_names,
        ),
        (
            "sensitive_roots_are_neither_looked_up_nor_listed",
            names::sensitive_roots_are_neither_looked_up_nor_listed,
        ),
        (
            "zones_are_the_root_entries",
            nodes::zones_are_the_root_entries,
        ),
        ("nothing_leaks_on_forget", nodes::nothing_leaks_on_forget),
        (
            "hard_links_share_a_node_and_renames_keep_it",
            nodes::hard_links_share_a_node_and_renames_keep_it,
        ),
        (
            "root_level_changes_are_refused",
            refusals::root_level_changes_are_refused,
        ),
        ("ro_zone_and_cross_zone", refusals::ro_zone_and_cross_zone),
        (
            "refusals_are_kept_explained_and_bounded",
            refusals::refusals_are_kept_explained_and_bounded,
        ),
        (
            "asks_go_to_the_broker_and_its_verdict_is_final",
            refusals::asks_go_to_the_broker_and_its_verdict_is_final,
        ),
        (
            "device_nodes_are_refused_explained_before_any_approval",
            refusals::device_nodes_are_refused_explained_before_any_approval,
        ),
        (
            "an_unlinked_open_file_stays_reachable_through_its_handle",
            files::an_unlinked_open_file_stays_reachable_through_its_handle,
        ),
        (
            "small_files_first_read_go_through_the_page_cache",
            files::small_files_first_read_go_through_the_page_cache,
        ),
        (
            "read_only_opens_share_one_fd_per_file",
            files::read_only_opens_share_one_fd_per_file,
        ),
        (
            "another_callers_open_is_its_own_and_checked_as_that_caller",
            files::another_callers_open_is_its_own_and_checked_as_that_caller,
        ),
    ];
    for (name, test) in tests {
        BY_NAME.set(true);
        let r = std::panic::catch_unwind(test);
        BY_NAME.set(false);
        assert!(r.is_ok(), "{name} fails when nodes are reopened by name");
    }
}

#[test]
fn a_deep_node_is_reopened_from_its_zone_dir_by_name() {
    let f = by_name();
    std::fs::create_dir_all(f.rw.join("a/b/c")).unwrap();
    std::fs::write(f.rw.join("a/b/c/f.txt"), "deep").unwrap();
    let c = walk(&f.core, &["a", "b", "c"]).unwrap();
    let file = found(&f.core, c, "f.txt").unwrap().ino.0;
    assert_eq!(f.core.fds_kept(), (4, 0), "a, b, c and f.txt are cached");
    drop_cached(&f);
    assert_eq!(f.core.fds_kept(), (0, 0));
    let attr = f.core.getattr(&CTX, file, None).unwrap().attr;
    assert_eq!((attr.ino.0, attr.size), (file, 4));
    assert_eq!(
        f.core.fds_kept(),
        (4, 0),
        "the walk down cached every ancestor"
    );
    drop_cached(&f);
    assert_eq!(read_all(&f.core, file).unwrap(), b"deep");
    // A directory's listing reopens it too.
    drop_cached(&f);
    let fh = f.core.opendir(&CTX, c).unwrap();
    let names: Vec<_> = f
        .core
        .readdir(fh, 0)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    f.core.releasedir(fh);
    assert_eq!(names, vec![".", "..", "f.txt"]);
    // And a new name made in it.
    drop_cached(&f);
    mkdir(&f.core, c, "new").unwrap();
    assert!(f.rw.join("a/b/c/new").is_dir());
}

/// A node 1,000 directories deep, with nothing cached, is reached by
/// climbing to the zone dir and walking all the way down.
#[test]
fn a_long_climb_reaches_a_node() {
    const DEPTH: usize = 1000;
    let f = by_name();
    let mut ino = WORK;
    let mut dir = std::fs::File::open(&f.rw).unwrap();
    for _ in 0..DEPTH {
        // Made fd-relative, one level at a time (the path is too long for
        // one call).
        rustix::fs::mkdirat(&dir, "d", rustix::fs::Mode::from_raw_mode(0o755)).unwrap();
        let sub = rustix::fs::openat(
            &dir,
            "d",
            rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::RDONLY,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
        dir = std::fs::File::from(sub);
        ino = found(&f.core, ino, "d").unwrap().ino.0;
    }
    let leaf = mkdir(&f.core, ino, "leaf").unwrap().attr.ino.0;
    drop_cached(&f);
    let attr = f.core.getattr(&CTX, leaf, None).unwrap().attr;
    assert_eq!(attr.ino.0, leaf);
    assert!(f.core.fds_kept().0 <= FD_CACHE_MAX);
}

#[test]
fn a_host_rename_or_replacement_makes_a_node_stale() {
    let f = by_name();
    std::fs::write(f.rw.join("f"), "one").unwrap();
    let ino = found(&f.core, WORK, "f").unwrap().ino.0;
    // Renamed on the host: the name no longer reaches it.
    std::fs::rename(f.rw.join("f"), f.rw.join("g")).unwrap();
    drop_cached(&f);
    assert_eq!(errno(f.core.getattr(&CTX, ino, None)), libc::ESTALE);
    // Looked up under its new name, it is the same node, reachable again.
    assert_eq!(found(&f.core, WORK, "g").unwrap().ino.0, ino);
    drop_cached(&f);
    assert_eq!(f.core.getattr(&CTX, ino, None).unwrap().attr.size, 3);
    // Replaced on the host (a new file renamed over it): another object
    // has the name now, and the node is stale rather than that object.
    std::fs::write(f.rw.join("g.new"), "other").unwrap();
    std::fs::rename(f.rw.join("g.new"), f.rw.join("g")).unwrap();
    drop_cached(&f);
    assert_eq!(errno(f.core.getattr(&CTX, ino, None)), libc::ESTALE);
    let new = found(&f.core, WORK, "g").unwrap();
    assert_ne!(new.ino.0, ino);
    assert_eq!(new.size, 5);
    // A directory on the way replaced: its descendants are stale too.
    std::fs::create_dir_all(f.rw.join("d/e")).unwrap();
    std::fs::write(f.rw.join("d/e/x"), "x").unwrap();
    let x = walk(&f.core, &["d", "e", "x"]).unwrap();
    std::fs::rename(f.rw.join("d"), f.rw.join("d.old")).unwrap();
    std::fs::create_dir_all(f.rw.join("d/e")).unwrap();
    std::fs::write(f.rw.join("d/e/x"), "new").unwrap();
    drop_cached(&f);
    assert_eq!(errno(f.core.getattr(&CTX, x, None)), libc::ESTALE);
}

#[test]
fn a_symlink_swapped_in_on_the_way_is_never_followed() {
    let f = by_name();
    std::fs::create_dir(f.rw.join("d")).unwrap();
    std::fs::write(f.rw.join("d/secret"), "inside").unwrap();
    let file = walk(&f.core, &["d", "secret"]).unwrap();
    // The host swaps the directory for a symlink to one outside the zone
    // holding a file of the same name.
    std::fs::rename(f.rw.join("d"), f.rw.join("d.old")).unwrap();
    symlink(&f.outside, f.rw.join("d")).unwrap();
    drop_cached(&f);
    assert_eq!(errno(f.core.getattr(&CTX, file, None)), libc::ESTALE);
    assert_eq!(errno(read_all(&f.core, file)), libc::ESTALE);
}

#[test]
fn renames_through_the_mount_keep_nodes_reachable() {
    let f = by_name();
    let d1 = mkdir(&f.core, WORK, "d1").unwrap().attr.ino.0;
    let d2 = mkdir(&f.core, WORK, "d2").unwrap().attr.ino.0;
    let (a, fh) = create(&f.core, d1, "a", libc::O_RDWR).unwrap();
    let a = a.ino.0;
    f.core.write(fh, 0, b"aaa", false).unwrap();
    f.core.release(fh);
    // A file moved to another directory.
    rename(&f.core, d1, "a", d2, "b").unwrap();
    drop_cached(&f);
    assert_eq!(read_all(&f.core, a).unwrap(), b"aaa");
    // Its directory renamed: the file is found under the new path.
    rename(&f.core, WORK, "d2", WORK, "d3").unwrap();
    drop_cached(&f);
    assert_eq!(read_all(&f.core, a).unwrap(), b"aaa");
    // Two names exchanged: each node follows its object.
    std::fs::write(f.rw.join("x"), "xx").unwrap();
    std::fs::write(f.rw.join("y"), "yyy").unwrap();
    let (x, y) = (
        found(&f.core, WORK, "x").unwrap().ino.0,
        found(&f.core, WORK, "y").unwrap().ino.0,
    );
    let exchange = |r| {
        f.core.rename(
            CTX,
            WORK,
            OsStr::new("x"),
            WORK,
            OsStr::new("y"),
            libc::RENAME_EXCHANGE,
            r,
        )
    };
    answer(exchange).unwrap();
    drop_cached(&f);
    assert_eq!(read_all(&f.core, x).unwrap(), b"xx");
    assert_eq!(read_all(&f.core, y).unwrap(), b"yyy");
    assert_eq!(std::fs::read(f.rw.join("y")).unwrap(), b"xx");
    // A hard link: the node is reached by whichever name it was last seen
    // under, and the other name still works once that one is gone.
    let l = link(&f.core, x, d1, "l").unwrap().attr.ino.0;
    assert_eq!(l, x);
    drop_cached(&f);
    assert_eq!(read_all(&f.core, x).unwrap(), b"xx");
}

#[test]
fn a_removed_name_keeps_its_node_reachable_while_the_kernel_holds_it() {
    let f = by_name();
    // Unlinked while open: reachable through the open handle, and by the
    // node itself (pinned), with no name left.
    let (ino, fh) = open_with(&f, "open", b"kept");
    remove(&f.core, WORK, "open", false).unwrap();
    assert_eq!(f.core.fds_kept().1, 1, "pinned");
    reached_unnamed(&f, ino, fh, 4);
    // Forgotten (create counted one lookup): the pin goes.
    f.core.forget(ino, 1);
    assert_eq!(f.core.fds_kept().1, 0);

    // Its last known name unlinked while another name is left.
    std::fs::write(f.rw.join("a"), "two names").unwrap();
    std::fs::hard_link(f.rw.join("a"), f.rw.join("b")).unwrap();
    let a = found(&f.core, WORK, "a").unwrap().ino.0;
    remove(&f.core, WORK, "a", false).unwrap();
    drop_cached(&f);
    assert_eq!(read_all(&f.core, a).unwrap(), b"two names");
    // Found again under its other name: no longer pinned.
    assert_eq!(found(&f.core, WORK, "b").unwrap().ino.0, a);
    assert_eq!(f.core.fds_kept().1, 0);
    drop_cached(&f);
    assert_eq!(read_all(&f.core, a).unwrap(), b"two names");

    // Renamed over: the file that lost its name stays reachable too.
    std::fs::write(f.rw.join("old"), "old").unwrap();
    std::fs::write(f.rw.join("new"), "new").unwrap();
    let old = found(&f.core, WORK, "old").unwrap().ino.0;
    rename(&f.core, WORK, "new", WORK, "old").unwrap();
    drop_cached(&f);
    assert_eq!(read_all(&f.core, old).unwrap(), b"old");
    f.core.forget(old, 1);
    assert_eq!(f.core.fds_kept().1, 0);

    // Another name looked up in the directory between the lookup and the
    // removal (the removal can't take the last lookup's node): the node
    // is found by its name's stat, and kept all the same.
    let (ino, fh) = open_with(&f, "open2", b"kept too");
    std::fs::write(f.rw.join("other"), "").unwrap();
    found(&f.core, WORK, "other").unwrap();
    remove(&f.core, WORK, "open2", false).unwrap();
    assert_eq!(f.core.fds_kept().1, 1, "pinned");
    reached_unnamed(&f, ino, fh, 8);
    f.core.forget(ino, 1);
    assert_eq!(f.core.fds_kept().1, 0);

    // Looked up, renamed over by an open file, then the name removed (no
    // lookup in between, as with the kernel's cached entries): the file
    // removed is the one renamed onto the name, and it is the one kept.
    let (ino, fh) = open_with(&f, "mover", b"moved");
    std::fs::write(f.rw.join("target"), "target").unwrap();
    let over = found(&f.core, WORK, "target").unwrap().ino.0;
    rename(&f.core, WORK, "mover", WORK, "target").unwrap();
    assert_eq!(f.core.fds_kept().1, 1, "the renamed-over file pinned");
    remove(&f.core, WORK, "target", false).unwrap();
    assert_eq!(f.core.fds_kept().1, 2, "the removed file pinned too");
    reached_unnamed(&f, ino, fh, 5);
    f.core.forget(ino, 1);
    f.core.forget(over, 1);
    assert_eq!(f.core.fds_kept().1, 0);
}

/// A new file `name` in the zone dir holding `data`, open read-write:
/// its node and handle.
fn open_with(f: &Fixture, name: &str, data: &[u8]) -> (u64, u64) {
    let (attr, fh) = create(&f.core, WORK, name, libc::O_RDWR).unwrap();
    f.core.write(fh, 0, data, false).unwrap();
    (attr.ino.0, fh)
}

/// Node `ino`, whose name is gone, is still reached (its fds dropped
/// from the cache first): `size` bytes, no links; then its handle `fh`
/// is closed.
fn reached_unnamed(f: &Fixture, ino: u64, fh: u64, size: u64) {
    drop_cached(f);
    let got = f.core.getattr(&CTX, ino, None).unwrap().attr;
    assert_eq!((got.size, got.nlink), (size, 0));
    f.core.release(fh);
}

#[test]
fn fds_stay_bounded_reopening_by_name() {
    let f = by_name();
    std::fs::create_dir(f.rw.join("many")).unwrap();
    let n = FD_CACHE_MAX + 500;
    for i in 0..n {
        std::fs::write(f.rw.join(format!("many/f{i}")), "").unwrap();
    }
    let dir = found(&f.core, WORK, "many").unwrap().ino.0;
    // Looked up and never forgotten, as the kernel does after a `find`.
    let inos: Vec<u64> = (0..n)
        .map(|i| found(&f.core, dir, &format!("f{i}")).unwrap().ino.0)
        .collect();
    let (cached, pinned) = f.core.fds_kept();
    assert!(cached <= FD_CACHE_MAX, "{cached} fds cached");
    assert_eq!(pinned, 0);
    // Every one is still reachable (most reopened by name).
    for ino in &inos {
        f.core.getattr(&CTX, *ino, None).unwrap();
    }
    assert!(f.core.fds_kept().0 <= FD_CACHE_MAX);
}

#[test]
fn out_of_fds_closes_half_the_cache_and_tries_again() {
    let f = by_name();
    for i in 0..64 {
        std::fs::write(f.rw.join(format!("f{i}")), "").unwrap();
        found(&f.core, WORK, &format!("f{i}")).unwrap();
    }
    let before = f.core.fds_kept().0;
    assert_eq!(before, 64);
    let mut tries = 0;
    let r = f.core.reach().with_fds(|| {
        tries += 1;
        match tries {
            1 => Err(rustix::io::Errno::MFILE),
            _ => Ok(()),
        }
    });
    assert_eq!((r, tries), (Ok(()), 2));
    assert!(f.core.fds_kept().0 <= before / 2 + 16, "half closed");
    // A second failure is the answer.
    let r: crate::backing::Sys<()> = f.core.reach().with_fds(|| Err(rustix::io::Errno::NFILE));
    assert_eq!(r, Err(rustix::io::Errno::NFILE));
    // Nodes whose fds were closed are reopened.
    let ino = found(&f.core, WORK, "f0").unwrap().ino.0;
    drop_cached(&f);
    assert!(f.core.getattr(&CTX, ino, None).is_ok());
}

#[test]
fn the_cache_fits_the_fd_limit() {
    use crate::fs::reach::cache_size;
    assert_eq!(cache_size(None), FD_CACHE_MAX);
    assert_eq!(cache_size(Some(20_000)), FD_CACHE_MAX);
    assert_eq!(cache_size(Some(1024)), 512);
    assert_eq!(cache_size(Some(10)), 16);
    // A user's open files: a quarter of what the cache and a reserve of
    // 256 leave, at least 64.
    use crate::fs::core::open_quota;
    assert_eq!(open_quota(Some(20_000)), (20_000 - FD_CACHE_MAX - 256) / 4);
    assert_eq!(open_quota(Some(1024)), 64);
    assert_eq!(open_quota(Some(100)), 64);
    assert_eq!(open_quota(None), usize::MAX);
}

/// Root has kernel file handles (and says nothing about them); anyone
/// else does without, for want of CAP_DAC_READ_SEARCH.
#[test]
fn a_core_says_whether_it_has_file_handles() {
    let f = fixture();
    let without = f.core.without();
    let handles = without.iter().find(|w| w.feature == "file_handles");
    match rustix::process::geteuid().is_root() {
        true => assert_eq!(handles, None),
        false => assert_eq!(handles.map(|w| w.needs), Some("CAP_DAC_READ_SEARCH")),
    }
}

/// The host moves a directory into its own former child: a lookup from
/// the child (whose place is stale) does not make a cycle of places (a
/// path that never ends); once the child is looked up where it now is,
/// the directory takes its new place.
#[test]
fn places_never_make_a_cycle() {
    let f = by_name();
    std::fs::create_dir_all(f.rw.join("a/b")).unwrap();
    let a = found(&f.core, WORK, "a").unwrap().ino.0;
    let b = found(&f.core, a, "b").unwrap().ino.0;
    // Host: a/b becomes b, and a moves into it: b/a.
    std::fs::rename(f.rw.join("a/b"), f.rw.join("b")).unwrap();
    std::fs::rename(f.rw.join("a"), f.rw.join("b/a")).unwrap();
    // `a` looked up in `b`, which still thinks it is in `a`.
    assert_eq!(found(&f.core, b, "a").unwrap().ino.0, a);
    let fh = f.core.opendir(&CTX, a).unwrap();
    f.core.releasedir(fh);
    mkdir(&f.core, a, "x").unwrap();
    // `b` found where it is, then `a` in it: both places right.
    assert_eq!(found(&f.core, WORK, "b").unwrap().ino.0, b);
    assert_eq!(found(&f.core, b, "a").unwrap().ino.0, a);
    drop_cached(&f);
    let x = found(&f.core, a, "x").unwrap().ino.0;
    drop_cached(&f);
    f.core.getattr(&CTX, x, None).unwrap();
    assert!(f.rw.join("b/a/x").is_dir());
}

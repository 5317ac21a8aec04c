//! Every kind of change listed, committed (in place and across
//! filesystems, partly, after an interruption) and discarded.

use super::*;

#[test]
fn every_kind_of_change_is_listed_and_commit_makes_the_backing_dir_the_view() {
    every_kind_of_change(None);
}

/// The stage on another filesystem (tmpfs) than the backing dir: the
/// commit copies (temp file + rename) instead of moving.
#[test]
fn a_stage_on_another_filesystem_commits_by_copying() {
    let shm = Path::new("/dev/shm");
    let dev = |p: &Path| fs::metadata(p).map(|m| m.dev()).ok();
    if dev(shm).is_none() || dev(shm) == dev(&std::env::temp_dir()) {
        println!("ZONEMOUNT-SKIP: stage::tree: /dev/shm is not another filesystem here");
        assert!(
            std::env::var_os("CI").is_none(),
            "CI needs a tmpfs /dev/shm"
        );
        return;
    }
    every_kind_of_change(Some(shm));
}

fn every_kind_of_change(elsewhere: Option<&Path>) {
    let Some(s) = stage_in(elsewhere) else { return };
    s.write("f", "three\n", true);
    s.write("new", "fresh\n", false);
    s.unlink("gone");
    s.rm_tree("d");
    s.rename("moved", "moved2");
    s.note("keep");
    rustix::fs::chmodat(
        &s.view,
        "keep",
        Mode::from_raw_mode(0o600),
        AtFlags::empty(),
    )
    .unwrap();
    s.note("ln");
    rustix::fs::symlinkat("f", &s.view, "ln").unwrap();
    s.note("nd");
    rustix::fs::mkdirat(&s.view, "nd", Mode::from_raw_mode(0o750)).unwrap();
    s.write("nd/inner", "in\n", false);
    s.note("hard");
    rustix::fs::linkat(&s.view, "nd/inner", &s.view, "hard", AtFlags::empty()).unwrap();
    let l = s.layers();
    let list = changes(&l, &[]).unwrap();
    assert_eq!(
        kinds(&list),
        [
            ("d".into(), Kind::Deleted),
            ("f".into(), Kind::Modified),
            ("gone".into(), Kind::Deleted),
            ("hard".into(), Kind::Added),
            ("keep".into(), Kind::Modified),
            ("ln".into(), Kind::Added),
            ("moved2".into(), Kind::Renamed),
            ("nd".into(), Kind::Added),
            ("nd/inner".into(), Kind::Added),
            ("new".into(), Kind::Added),
        ],
        "{list:#?}"
    );
    let by = |p: &str| list.iter().find(|c| c.path == Path::new(p)).unwrap();
    assert_eq!(by("d").entries, Some(2), "d/sub and d/sub/z");
    assert_eq!(by("keep").what, [super::What::Mode]);
    assert_eq!(by("moved2").from.as_deref(), Some(Path::new("moved")));
    assert_eq!((by("f").old_size, by("f").size), (Some(8), Some(14)));
    // Diffs: text as a unified diff, a mode change in a line.
    let d = diff(&l, by("f")).unwrap();
    assert!(
        d.contains("--- a/f\n+++ b/f\n") && d.contains("+three\n"),
        "{d}"
    );
    assert!(
        diff(&l, by("keep"))
            .unwrap()
            .contains("mode 0644 -> 0600 keep")
    );
    // Commit: the backing dir becomes what the view shows; the stage ends
    // empty; the hard link stays one.
    let want = view_listing(&s);
    let r = commit(&l, &s.fp(), &s.zone, &[], false).unwrap();
    assert!(r.conflicts.is_empty(), "{r:#?}");
    assert_eq!(r.applied.len(), list.len());
    assert_eq!(listing(&s.lower), want);
    assert_eq!(
        fs::metadata(s.lower.join("hard")).unwrap().ino(),
        fs::metadata(s.lower.join("nd/inner")).unwrap().ino()
    );
    assert_eq!(
        fs::metadata(s.lower.join("nd"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o750
    );
    assert!(changes(&l, &[]).unwrap().is_empty());
    assert!(
        fs::read_dir(&s.upper).unwrap().next().is_none(),
        "stage left: {:?}",
        listing(&s.upper)
    );
    // Nothing of the overlay's own goes to the backing dir.
    for f in ["f", "keep", "moved2", "new", "nd/inner"] {
        let mut buf = vec![0u8; 4096];
        let n = rustix::fs::llistxattr(s.lower.join(f), &mut buf[..]).unwrap();
        let names = String::from_utf8_lossy(&buf[..n]).into_owned();
        assert!(!names.contains("overlay."), "{f}: {names}");
    }
}

#[test]
fn a_host_change_is_a_conflict_unless_forced_and_a_partial_commit_applies_only_its_paths() {
    let Some(s) = stage() else { return };
    s.write("f", "worker\n", false);
    s.write("new", "n\n", false);
    s.unlink("gone");
    // The host edits f after the worker did.
    std::thread::sleep(std::time::Duration::from_millis(20));
    fs::write(s.lower.join("f"), "host\n").unwrap();
    let l = s.layers();
    let r = commit(
        &l,
        &s.fp(),
        &s.zone,
        &[PathBuf::from("f"), PathBuf::from("new")],
        false,
    )
    .unwrap();
    assert_eq!(r.conflicts.len(), 1, "{r:#?}");
    assert_eq!(r.conflicts[0].path, Path::new("f"));
    assert!(r.conflicts[0].why.contains("the host changed it"), "{r:#?}");
    assert_eq!(kinds(&r.applied), [("new".into(), Kind::Added)]);
    assert_eq!(fs::read_to_string(s.lower.join("f")).unwrap(), "host\n");
    assert!(s.lower.join("gone").exists(), "not in the filter");
    assert_eq!(
        kinds(&changes(&l, &[]).unwrap()),
        [("f".into(), Kind::Modified), ("gone".into(), Kind::Deleted)]
    );
    let r = commit(&l, &s.fp(), &s.zone, &[], true).unwrap();
    assert!(r.conflicts.is_empty());
    assert_eq!(fs::read_to_string(s.lower.join("f")).unwrap(), "worker\n");
    assert!(!s.lower.join("gone").exists());
}

#[test]
fn an_interrupted_commit_completes_when_run_again() {
    let Some(s) = stage() else { return };
    s.write("f", "worker\n", false);
    s.rm_tree("d");
    let l = s.layers();
    // As if a commit died after writing f and half of d's deletion: the
    // journal names them; the backing dir differs from the fingerprints.
    super::apply::tests_only_journal(&s.zone, &[Path::new("f"), Path::new("d")]);
    fs::write(s.lower.join("f"), "worker\n").unwrap();
    fs::remove_file(s.lower.join("d/sub/z")).unwrap();
    let r = commit(&l, &s.fp(), &s.zone, &[], false).unwrap();
    assert!(r.conflicts.is_empty(), "{r:#?}");
    assert!(!s.lower.join("d").exists());
    assert_eq!(fs::read_to_string(s.lower.join("f")).unwrap(), "worker\n");
    assert!(changes(&l, &[]).unwrap().is_empty());
}

#[test]
fn discard_leaves_the_backing_dir_and_empties_the_stage() {
    let Some(s) = stage() else { return };
    let before = listing(&s.lower);
    s.write("f", "worker\n", false);
    s.write("new", "n\n", false);
    s.rm_tree("d");
    let l = s.layers();
    let dropped = discard(&l, &s.fp(), &[PathBuf::from("new")]).unwrap();
    assert_eq!(kinds(&dropped), [("new".into(), Kind::Added)]);
    assert_eq!(
        kinds(&changes(&l, &[]).unwrap()),
        [("d".into(), Kind::Deleted), ("f".into(), Kind::Modified)]
    );
    let dropped = discard(&l, &s.fp(), &[]).unwrap();
    assert_eq!(dropped.len(), 2);
    assert_eq!(listing(&s.lower), before);
    assert!(fs::read_dir(&s.upper).unwrap().next().is_none());
    assert!(s.fp().get(Path::new("f")).is_none(), "fingerprints dropped");
}

//! The fingerprints of noted paths: kept across reopening and a crash,
//! for any name.

use super::*;

#[test]
fn fingerprints_keep_the_first_note_across_reopening() {
    let d = tempfile::tempdir().unwrap();
    let fp = Fingerprints::open(d.path()).unwrap();
    fp.note(Path::new("a"), None).unwrap();
    let st = rustix::fs::stat(d.path()).unwrap();
    fp.note(Path::new("a"), Some(Fingerprint::of(&st))).unwrap();
    fp.note(Path::new("b/c"), Some(Fingerprint::of(&st)))
        .unwrap();
    let again = Fingerprints::open(d.path()).unwrap();
    assert_eq!(again.get(Path::new("a")), Some(None), "the first note wins");
    assert!(again.get(Path::new("b/c")).unwrap().is_some());
    again.forget(&[PathBuf::from("b")]).unwrap();
    assert!(
        Fingerprints::open(d.path())
            .unwrap()
            .get(Path::new("b/c"))
            .is_none()
    );
}

#[test]
fn fingerprints_survive_a_daemon_crash() {
    let d = tempfile::tempdir().unwrap();
    let st = rustix::fs::stat(d.path()).unwrap();
    let fp = Fingerprints::open(d.path()).unwrap();
    for i in 0..3000 {
        fp.note(
            &PathBuf::from(format!("d/f{i}")),
            Some(Fingerprint::of(&st)),
        )
        .unwrap();
    }
    fp.note(Path::new("new"), None).unwrap();
    // No Drop, as when the daemon is killed: what was noted is in the
    // kernel's pages of the file (with the mapping's zeros after it).
    std::mem::forget(fp);
    let again = Fingerprints::open(d.path()).unwrap();
    for i in 0..3000 {
        assert_eq!(
            again.get(&PathBuf::from(format!("d/f{i}"))),
            Some(Some(Fingerprint::of(&st)))
        );
    }
    assert_eq!(again.get(Path::new("new")), Some(None));
    // Noting on after the crash appends after the last whole line.
    again.note(Path::new("after"), None).unwrap();
    drop(again);
    let third = Fingerprints::open(d.path()).unwrap();
    assert_eq!(third.get(Path::new("after")), Some(None));
    assert!(third.get(Path::new("d/f2999")).is_some());
}

#[test]
fn fingerprints_of_any_text_name_read_back() {
    let d = tempfile::tempdir().unwrap();
    let st = rustix::fs::stat(d.path()).unwrap();
    let names = [
        "plain",
        "a \"quoted\" name",
        "back\\slash",
        "new\nline",
        "tab\tand ünïcödé ✓",
        "d/e/f",
    ];
    let fp = Fingerprints::open(d.path()).unwrap();
    for (i, n) in names.iter().enumerate() {
        let was = (i % 2 == 0).then(|| Fingerprint::of(&st));
        fp.note(Path::new(n), was).unwrap();
    }
    drop(fp);
    let again = Fingerprints::open(d.path()).unwrap();
    for (i, n) in names.iter().enumerate() {
        let was = (i % 2 == 0).then(|| Fingerprint::of(&st));
        assert_eq!(again.get(Path::new(n)), Some(was), "{n:?}");
    }
}

//! The change report, diff, commit and discard over a real overlay (as
//! the daemon mounts it): operations through the overlay's fd, then the
//! layers compared.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags};

use super::*;
use crate::stage::sys::overlay;

struct Stage {
    _dir: tempfile::TempDir,
    _elsewhere: Option<tempfile::TempDir>,
    lower: PathBuf,
    upper: PathBuf,
    zone: PathBuf,
    view: OwnedFd,
    prefix: &'static str,
}

/// A backing dir with files, and an overlay over it; None (after saying
/// why) where overlays can't be mounted, outside CI.
fn stage() -> Option<Stage> {
    stage_in(None)
}

/// [`stage`], with the stage's dir under `elsewhere` (another filesystem:
/// a commit then copies instead of moving).
fn stage_in(elsewhere: Option<&Path>) -> Option<Stage> {
    let dir = tempfile::tempdir().unwrap();
    let other = elsewhere.map(|e| tempfile::tempdir_in(e).unwrap());
    let p = dir.path();
    let zone = other
        .as_ref()
        .map_or_else(|| p.join("zone"), |o| o.path().join("zone"));
    let lower = p.join("lower");
    let (upper, work) = (zone.join("upper"), zone.join("work"));
    for d in [&lower, &upper, &work] {
        fs::create_dir_all(d).unwrap();
    }
    fs::write(lower.join("f"), "one\ntwo\n").unwrap();
    fs::write(lower.join("keep"), "same\n").unwrap();
    fs::write(lower.join("gone"), "bye\n").unwrap();
    fs::write(lower.join("moved"), "moving\n").unwrap();
    fs::create_dir_all(lower.join("d/sub")).unwrap();
    fs::write(lower.join("d/sub/z"), "z\n").unwrap();
    fs::write(lower.join("bin"), [0u8, 1, 2, 3]).unwrap();
    let (view, how) = match overlay::mount(&overlay::Layers {
        lower: &lower,
        upper: &upper,
        work: &work,
    }) {
        Ok(m) => m,
        Err(e) if std::env::var_os("CI").is_none() => {
            println!("ZONEMOUNT-SKIP: stage::tree: {e}");
            return None;
        }
        Err(e) => panic!("overlay: {e}"),
    };
    Some(Stage {
        _dir: dir,
        _elsewhere: other,
        lower,
        upper,
        zone,
        view,
        prefix: how.prefix(),
    })
}

impl Stage {
    fn layers(&self) -> Layers {
        Layers::open(&self.lower, &self.upper, self.prefix).unwrap()
    }
    fn fp(&self) -> Fingerprints {
        Fingerprints::open(&self.zone).unwrap()
    }
    /// What the daemon does before a change: note the backing object.
    fn note(&self, rel: &str) {
        let st = rustix::fs::lstat(self.lower.join(rel)).ok();
        self.fp()
            .note(Path::new(rel), st.as_ref().map(Fingerprint::of))
            .unwrap();
    }
    fn write(&self, rel: &str, data: &str, append: bool) {
        self.note(rel);
        let flags = OFlags::CREATE
            | OFlags::WRONLY
            | if append {
                OFlags::APPEND
            } else {
                OFlags::TRUNC
            };
        let fd = rustix::fs::openat(&self.view, rel, flags, Mode::from_raw_mode(0o644)).unwrap();
        rustix::io::write(&fd, data.as_bytes()).unwrap();
    }
    fn unlink(&self, rel: &str) {
        self.note(rel);
        rustix::fs::unlinkat(&self.view, rel, AtFlags::empty()).unwrap();
    }
    fn rename(&self, from: &str, to: &str) {
        self.note(from);
        self.note(to);
        rustix::fs::renameat(&self.view, from, &self.view, to).unwrap();
    }
    fn rm_tree(&self, rel: &str) {
        self.note(rel);
        let d = rustix::fs::openat(
            &self.view,
            rel,
            OFlags::RDONLY | OFlags::DIRECTORY,
            Mode::empty(),
        )
        .unwrap();
        fsops::remove_all(self.view.as_fd(), rel.as_ref()).unwrap();
        drop(d);
    }
}

/// A tree as a sorted listing: path, type, mode, content.
fn listing(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let md = fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            let what = if md.file_type().is_symlink() {
                format!("-> {}", fs::read_link(&p).unwrap().display())
            } else if md.is_dir() {
                stack.push(p.clone());
                "dir".into()
            } else {
                format!("{:?}", fs::read(&p).unwrap())
            };
            out.push(format!("{rel} {:o} {what}", md.mode() & 0o7777));
        }
    }
    out.sort();
    out
}

/// What the overlay shows, as a listing (through /proc/self/fd).
fn view_listing(s: &Stage) -> Vec<String> {
    use std::os::fd::AsRawFd;
    listing(Path::new(&format!("/proc/self/fd/{}", s.view.as_raw_fd())))
}

fn kinds(list: &[Change]) -> Vec<(String, Kind)> {
    list.iter()
        .map(|c| (c.path.display().to_string(), c.kind))
        .collect()
}

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

// Commit never deletes what the host made: a host change on the path a
// staged change needs, a parent of it, or a child of it, is a conflict,
// left untouched without `force`.

/// The listing of the backing dir, and what stays of it after a commit
/// without force that must leave it as it is (what `paths` name).
fn host_entries(s: &Stage, paths: &[&str]) -> Vec<String> {
    let all = listing(&s.lower);
    all.into_iter()
        .filter(|e| {
            paths.iter().any(|p| {
                e == p || e.starts_with(&format!("{p} ")) || e.starts_with(&format!("{p}/"))
            })
        })
        .collect()
}

fn conflicted(r: &CommitReport) -> Vec<String> {
    let mut v: Vec<String> = r
        .conflicts
        .iter()
        .map(|c| c.path.display().to_string())
        .collect();
    v.sort();
    v
}

/// Let the host's changes get other times than the notes (the kernel's
/// clock moves in ticks of a few ms).
fn tick() {
    std::thread::sleep(std::time::Duration::from_millis(20));
}

/// A worker's new dir with a file in it, and an unrelated new file.
fn new_dir_and_other(s: &Stage) {
    s.note("nd");
    rustix::fs::mkdirat(&s.view, "nd", Mode::from_raw_mode(0o755)).unwrap();
    s.write("nd/inner", "in\n", false);
    s.write("other", "o\n", false);
}

#[test]
fn a_host_file_where_the_stage_has_a_new_dir_is_a_conflict_and_stays() {
    let Some(s) = stage() else { return };
    new_dir_and_other(&s);
    tick();
    fs::write(s.lower.join("nd"), "host's\n").unwrap();
    let before = host_entries(&s, &["nd"]);
    let l = s.layers();
    let r = commit(&l, &s.fp(), &s.zone, &[], false).unwrap();
    assert_eq!(conflicted(&r), ["nd", "nd/inner"], "{r:#?}");
    let inner = r.conflicts.iter().find(|c| c.path == Path::new("nd/inner"));
    assert_eq!(
        inner.and_then(|c| c.at.as_deref()),
        Some(Path::new("nd")),
        "{r:#?}"
    );
    assert_eq!(kinds(&r.applied), [("other".into(), Kind::Added)]);
    assert_eq!(host_entries(&s, &["nd"]), before);
    assert_eq!(fs::read_to_string(s.lower.join("nd")).unwrap(), "host's\n");
    // Still staged, and --force applies them (the host's file replaced).
    let r = commit(&l, &s.fp(), &s.zone, &[], true).unwrap();
    assert!(r.conflicts.is_empty(), "{r:#?}");
    assert_eq!(
        fs::read_to_string(s.lower.join("nd/inner")).unwrap(),
        "in\n"
    );
}

#[test]
fn a_host_symlink_where_the_stage_has_a_new_dir_is_a_conflict_and_stays() {
    let Some(s) = stage() else { return };
    new_dir_and_other(&s);
    tick();
    std::os::unix::fs::symlink("d", s.lower.join("nd")).unwrap();
    let l = s.layers();
    let r = commit(&l, &s.fp(), &s.zone, &[], false).unwrap();
    assert_eq!(conflicted(&r), ["nd", "nd/inner"], "{r:#?}");
    assert_eq!(kinds(&r.applied), [("other".into(), Kind::Added)]);
    assert_eq!(fs::read_link(s.lower.join("nd")).unwrap(), Path::new("d"));
    assert!(!s.lower.join("d/inner").exists(), "never through the link");
}

#[test]
fn a_partial_commit_inside_a_new_dir_the_host_made_a_file_is_a_conflict() {
    let Some(s) = stage() else { return };
    new_dir_and_other(&s);
    tick();
    fs::write(s.lower.join("nd"), "host's\n").unwrap();
    let l = s.layers();
    let r = commit(&l, &s.fp(), &s.zone, &[PathBuf::from("nd/inner")], false).unwrap();
    assert_eq!(conflicted(&r), ["nd/inner"], "{r:#?}");
    assert!(r.applied.is_empty(), "{r:#?}");
    assert_eq!(fs::read_to_string(s.lower.join("nd")).unwrap(), "host's\n");
}

#[test]
fn a_host_dir_turned_into_a_file_where_the_stage_changed_inside_is_a_conflict() {
    let Some(s) = stage() else { return };
    s.write("d/sub/z", "worker\n", false);
    s.write("d/new", "n\n", false);
    s.write("other", "o\n", false);
    tick();
    fs::remove_dir_all(s.lower.join("d")).unwrap();
    fs::write(s.lower.join("d"), "host's\n").unwrap();
    let l = s.layers();
    let r = commit(&l, &s.fp(), &s.zone, &[], false).unwrap();
    // d (a file now, where the stage has a dir) and d/sub are changes of
    // the report too.
    assert_eq!(conflicted(&r), ["d", "d/new", "d/sub", "d/sub/z"], "{r:#?}");
    assert_eq!(kinds(&r.applied), [("other".into(), Kind::Added)]);
    assert_eq!(fs::read_to_string(s.lower.join("d")).unwrap(), "host's\n");
    // A partial commit of the new file alone: the same.
    let r = commit(&l, &s.fp(), &s.zone, &[PathBuf::from("d/new")], false).unwrap();
    assert_eq!(conflicted(&r), ["d/new"], "{r:#?}");
    assert_eq!(fs::read_to_string(s.lower.join("d")).unwrap(), "host's\n");
}

#[test]
fn a_host_dir_where_the_stage_has_a_new_file_is_a_conflict_and_stays() {
    let Some(s) = stage() else { return };
    s.write("new", "worker\n", false);
    s.write("other", "o\n", false);
    tick();
    fs::create_dir(s.lower.join("new")).unwrap();
    fs::write(s.lower.join("new/x"), "host's\n").unwrap();
    let l = s.layers();
    let r = commit(&l, &s.fp(), &s.zone, &[], false).unwrap();
    assert_eq!(conflicted(&r), ["new"], "{r:#?}");
    assert_eq!(kinds(&r.applied), [("other".into(), Kind::Added)]);
    assert_eq!(
        fs::read_to_string(s.lower.join("new/x")).unwrap(),
        "host's\n"
    );
}

#[test]
fn a_host_child_in_a_dir_the_stage_deleted_is_a_conflict_and_stays() {
    let Some(s) = stage() else { return };
    s.rm_tree("d");
    s.write("other", "o\n", false);
    tick();
    // Two levels down: the deleted dir's own times don't move.
    fs::write(s.lower.join("d/sub/host"), "host's\n").unwrap();
    let before = host_entries(&s, &["d"]);
    let l = s.layers();
    let r = commit(&l, &s.fp(), &s.zone, &[], false).unwrap();
    assert_eq!(conflicted(&r), ["d"], "{r:#?}");
    assert_eq!(kinds(&r.applied), [("other".into(), Kind::Added)]);
    assert_eq!(host_entries(&s, &["d"]), before);
    let r = commit(&l, &s.fp(), &s.zone, &[], true).unwrap();
    assert!(r.conflicts.is_empty(), "{r:#?}");
    assert!(!s.lower.join("d").exists());
}

#[test]
fn a_host_edit_inside_a_dir_the_stage_deleted_is_a_conflict() {
    let Some(s) = stage() else { return };
    s.rm_tree("d");
    tick();
    fs::write(s.lower.join("d/sub/z"), "host's\n").unwrap();
    let l = s.layers();
    let r = commit(&l, &s.fp(), &s.zone, &[], false).unwrap();
    assert_eq!(conflicted(&r), ["d"], "{r:#?}");
    assert_eq!(
        fs::read_to_string(s.lower.join("d/sub/z")).unwrap(),
        "host's\n"
    );
}

#[test]
fn a_parent_the_host_replaced_by_a_symlink_is_a_conflict_and_stays() {
    let Some(s) = stage() else { return };
    s.write("d/sub/new", "n\n", false);
    s.write("d/sub/z", "worker\n", false);
    s.write("other", "o\n", false);
    tick();
    fs::rename(s.lower.join("d"), s.lower.join("moved-d")).unwrap();
    std::os::unix::fs::symlink("moved-d", s.lower.join("d")).unwrap();
    let before = host_entries(&s, &["d", "moved-d"]);
    let l = s.layers();
    let r = commit(&l, &s.fp(), &s.zone, &[], false).unwrap();
    assert_eq!(
        conflicted(&r),
        ["d", "d/sub", "d/sub/new", "d/sub/z"],
        "{r:#?}"
    );
    assert_eq!(kinds(&r.applied), [("other".into(), Kind::Added)]);
    assert_eq!(host_entries(&s, &["d", "moved-d"]), before);
    let r = commit(&l, &s.fp(), &s.zone, &[PathBuf::from("d/sub/new")], false).unwrap();
    assert_eq!(conflicted(&r), ["d/sub/new"], "{r:#?}");
    assert_eq!(host_entries(&s, &["d", "moved-d"]), before);
}

#[test]
fn a_parent_the_host_deleted_is_not_made_again() {
    let Some(s) = stage() else { return };
    s.write("d/sub/new", "n\n", false);
    tick();
    fs::remove_dir_all(s.lower.join("d")).unwrap();
    let l = s.layers();
    let r = commit(&l, &s.fp(), &s.zone, &[], false).unwrap();
    assert_eq!(conflicted(&r), ["d", "d/sub", "d/sub/new"], "{r:#?}");
    assert!(!s.lower.join("d").exists());
}

#[test]
fn a_host_dir_where_the_stage_has_a_new_dir_keeps_the_host_dir_as_it_is() {
    let Some(s) = stage() else { return };
    new_dir_and_other(&s);
    tick();
    fs::create_dir(s.lower.join("nd")).unwrap();
    fs::write(s.lower.join("nd/host"), "host's\n").unwrap();
    let before = host_entries(&s, &["nd"]);
    let l = s.layers();
    let r = commit(&l, &s.fp(), &s.zone, &[], false).unwrap();
    assert_eq!(conflicted(&r), ["nd/inner"], "{r:#?}");
    assert_eq!(host_entries(&s, &["nd"]), before);
}

#[test]
fn a_host_child_in_a_dir_the_stage_made_anew_is_a_conflict_and_stays() {
    let Some(s) = stage() else { return };
    // rm -r d; mkdir d: the stage's d is opaque, the backing d's entries
    // are deleted changes.
    s.note("d/sub/z");
    s.note("d/sub");
    s.rm_tree("d");
    rustix::fs::mkdirat(&s.view, "d", Mode::from_raw_mode(0o755)).unwrap();
    s.write("d/new", "n\n", false);
    tick();
    fs::write(s.lower.join("d/sub/host"), "host's\n").unwrap();
    fs::write(s.lower.join("d/host"), "host's\n").unwrap();
    let before = host_entries(&s, &["d/sub", "d/host"]);
    let l = s.layers();
    let r = commit(&l, &s.fp(), &s.zone, &[], false).unwrap();
    assert_eq!(conflicted(&r), ["d/host", "d/sub"], "{r:#?}");
    assert_eq!(kinds(&r.applied), [("d/new".into(), Kind::Added)]);
    assert_eq!(host_entries(&s, &["d/sub", "d/host"]), before);
}

#[test]
fn a_host_change_under_a_dir_the_stage_replaced_by_a_file_is_a_conflict() {
    let Some(s) = stage() else { return };
    s.rm_tree("d");
    s.write("d", "now a file\n", false);
    tick();
    fs::write(s.lower.join("d/sub/host"), "host's\n").unwrap();
    let l = s.layers();
    let r = commit(&l, &s.fp(), &s.zone, &[], false).unwrap();
    assert_eq!(conflicted(&r), ["d"], "{r:#?}");
    assert!(r.conflicts[0].why.starts_with("inside it: "), "{r:#?}");
    assert_eq!(r.conflicts[0].at.as_deref(), Some(Path::new("d/sub")));
    assert_eq!(
        fs::read_to_string(s.lower.join("d/sub/host")).unwrap(),
        "host's\n"
    );
}

#[test]
fn a_host_edit_of_a_file_the_stage_replaced_by_a_dir_is_a_conflict() {
    let Some(s) = stage() else { return };
    s.unlink("f");
    s.note("f");
    rustix::fs::mkdirat(&s.view, "f", Mode::from_raw_mode(0o755)).unwrap();
    s.write("f/x", "x\n", false);
    tick();
    fs::write(s.lower.join("f"), "host's\n").unwrap();
    let l = s.layers();
    // The new file alone too: its parent would replace the host's file.
    let r = commit(&l, &s.fp(), &s.zone, &[PathBuf::from("f/x")], false).unwrap();
    assert_eq!(conflicted(&r), ["f/x"], "{r:#?}");
    let r = commit(&l, &s.fp(), &s.zone, &[], false).unwrap();
    assert_eq!(conflicted(&r), ["f", "f/x"], "{r:#?}");
    assert_eq!(fs::read_to_string(s.lower.join("f")).unwrap(), "host's\n");
    // Unchanged by the host, the same replacement applies.
    let r = commit(&l, &s.fp(), &s.zone, &[], true).unwrap();
    assert!(r.conflicts.is_empty(), "{r:#?}");
    assert_eq!(fs::read_to_string(s.lower.join("f/x")).unwrap(), "x\n");
}

#[test]
fn a_file_the_stage_replaced_by_a_dir_is_replaced_when_the_host_left_it() {
    let Some(s) = stage() else { return };
    s.unlink("f");
    s.note("f");
    rustix::fs::mkdirat(&s.view, "f", Mode::from_raw_mode(0o755)).unwrap();
    s.write("f/x", "x\n", false);
    let l = s.layers();
    let r = commit(&l, &s.fp(), &s.zone, &[PathBuf::from("f/x")], false).unwrap();
    assert!(r.conflicts.is_empty(), "{r:#?}");
    assert_eq!(fs::read_to_string(s.lower.join("f/x")).unwrap(), "x\n");
    let r = commit(&l, &s.fp(), &s.zone, &[], false).unwrap();
    assert!(r.conflicts.is_empty(), "{r:#?}");
    assert!(changes(&l, &[]).unwrap().is_empty());
}

#[test]
fn a_backing_dir_the_host_replaced_is_a_conflict_for_every_change() {
    let Some(s) = stage() else { return };
    // As the daemon does when it mounts the stage.
    s.note("");
    s.write("f", "worker\n", false);
    s.write("new", "n\n", false);
    s.unlink("gone");
    tick();
    let old = s.lower.with_file_name("lower.old");
    fs::rename(&s.lower, &old).unwrap();
    fs::create_dir(&s.lower).unwrap();
    fs::write(s.lower.join("gone"), "host's\n").unwrap();
    let (before, before_old) = (listing(&s.lower), listing(&old));
    let l = s.layers();
    let r = commit(&l, &s.fp(), &s.zone, &[], false).unwrap();
    assert_eq!(conflicted(&r), ["f", "gone", "new"], "{r:#?}");
    assert!(r.conflicts[0].why.contains("another dir"), "{r:#?}");
    assert_eq!((listing(&s.lower), listing(&old)), (before, before_old));
    // Dropping every change keeps the note of the dir the stage is made
    // over (the mount goes on over it).
    discard(&l, &s.fp(), &[]).unwrap();
    assert!(s.fp().get(Path::new("")).is_some_and(|f| f.is_some()));
}

/// A host change made while the commit runs (after its checks, before
/// its steps): each step looks again at what it would remove or
/// overwrite.
#[test]
fn a_host_change_made_while_the_commit_runs_is_a_conflict_and_stays() {
    let Some(s) = stage() else { return };
    new_dir_and_other(&s);
    s.write("f", "worker\n", false);
    s.rm_tree("d");
    s.write("gone", "worker\n", false);
    let l = s.layers();
    let lower = s.lower.clone();
    let mut host = || {
        tick();
        fs::write(lower.join("nd"), "host's\n").unwrap();
        fs::write(lower.join("f"), "host's\n").unwrap();
        fs::write(lower.join("d/sub/host"), "host's\n").unwrap();
        fs::rename(lower.join("gone"), lower.join("gone.old")).unwrap();
        fs::create_dir(lower.join("gone")).unwrap();
    };
    let r = super::apply::commit_with(&l, &s.fp(), &s.zone, &[], false, &mut host).unwrap();
    assert_eq!(
        conflicted(&r),
        ["d", "f", "gone", "nd", "nd/inner"],
        "{r:#?}"
    );
    assert!(
        r.conflicts
            .iter()
            .all(|c| c.why.contains("while the commit ran")),
        "{r:#?}"
    );
    assert_eq!(kinds(&r.applied), [("other".into(), Kind::Added)]);
    for f in ["nd", "f", "d/sub/host"] {
        assert_eq!(
            fs::read_to_string(s.lower.join(f)).unwrap(),
            "host's\n",
            "{f}"
        );
    }
    assert!(s.lower.join("d/sub/z").exists() && s.lower.join("gone").is_dir());
    // Still staged: the next commit finds them by the notes; --force
    // applies them.
    let r = commit(&l, &s.fp(), &s.zone, &[], false).unwrap();
    assert_eq!(
        conflicted(&r),
        ["d", "f", "gone", "nd", "nd/inner"],
        "{r:#?}"
    );
    let r = commit(&l, &s.fp(), &s.zone, &[], true).unwrap();
    assert!(r.conflicts.is_empty(), "{r:#?}");
    assert_eq!(
        fs::read_to_string(s.lower.join("nd/inner")).unwrap(),
        "in\n"
    );
    assert!(!s.lower.join("d").exists());
}

/// A partial commit inside a new dir makes that dir on the host: the
/// next commit takes it for the commit's own, not the host's.
#[test]
fn a_dir_a_partial_commit_made_is_no_conflict_afterwards() {
    let Some(s) = stage() else { return };
    new_dir_and_other(&s);
    s.write("nd/second", "2\n", false);
    rustix::fs::chmodat(&s.view, "nd", Mode::from_raw_mode(0o700), AtFlags::empty()).unwrap();
    let l = s.layers();
    let r = commit(&l, &s.fp(), &s.zone, &[PathBuf::from("nd/inner")], false).unwrap();
    assert!(r.conflicts.is_empty(), "{r:#?}");
    let r = commit(&l, &s.fp(), &s.zone, &[], false).unwrap();
    assert!(r.conflicts.is_empty(), "{r:#?}");
    assert_eq!(
        fs::read_to_string(s.lower.join("nd/second")).unwrap(),
        "2\n"
    );
    assert!(changes(&l, &[]).unwrap().is_empty());
}

// The property: whatever the worker staged and whatever the host did
// after, a commit without force leaves every backing path the host
// changed (made, altered, removed) exactly as the host left it; with no
// host change it applies everything.

mod property {
    use std::collections::BTreeMap;
    use std::os::unix::ffi::OsStrExt;

    use proptest::prelude::*;

    use super::*;

    /// The paths both sides act on (the stage's backing tree holds f,
    /// gone, d/sub/z; d/y and n/... are not there).
    const PATHS: [&str; 9] = [
        "f", "gone", "d", "d/sub", "d/sub/z", "d/y", "n", "n/m", "n/m/k",
    ];

    #[derive(Debug, Clone)]
    enum Worker {
        Write(usize),
        Mkdir(usize),
        Remove(usize),
        Symlink(usize),
        Rename(usize, usize),
        Chmod(usize),
    }

    #[derive(Debug, Clone)]
    enum Host {
        Write(usize),
        Mkdir(usize),
        Remove(usize),
        /// Whatever is there replaced by a symlink to `d`.
        Symlink(usize),
        /// Whatever is there replaced by a file.
        File(usize),
        Chmod(usize),
    }

    fn worker_op() -> impl Strategy<Value = Worker> {
        let p = 0..PATHS.len();
        prop_oneof![
            p.clone().prop_map(Worker::Write),
            p.clone().prop_map(Worker::Mkdir),
            p.clone().prop_map(Worker::Remove),
            p.clone().prop_map(Worker::Symlink),
            (p.clone(), p.clone()).prop_map(|(a, b)| Worker::Rename(a, b)),
            p.prop_map(Worker::Chmod),
        ]
    }

    fn host_op() -> impl Strategy<Value = Host> {
        let p = 0..PATHS.len();
        prop_oneof![
            p.clone().prop_map(Host::Write),
            p.clone().prop_map(Host::Mkdir),
            p.clone().prop_map(Host::Remove),
            p.clone().prop_map(Host::Symlink),
            p.clone().prop_map(Host::File),
            p.prop_map(Host::Chmod),
        ]
    }

    /// A worker's change through the overlay, noted first as the daemon
    /// notes (each path an operation names, a tree removed entry by
    /// entry); a failing one is left out, as a worker's would be.
    fn act(s: &Stage, op: &Worker, i: usize) {
        let v = &s.view;
        let _ = match *op {
            Worker::Write(p) => {
                s.note(PATHS[p]);
                rustix::fs::openat(
                    v,
                    PATHS[p],
                    OFlags::CREATE | OFlags::WRONLY | OFlags::TRUNC | OFlags::NOFOLLOW,
                    Mode::from_raw_mode(0o644),
                )
                .and_then(|fd| rustix::io::write(&fd, format!("w{i}\n").as_bytes()).map(drop))
            }
            Worker::Mkdir(p) => {
                s.note(PATHS[p]);
                rustix::fs::mkdirat(v, PATHS[p], Mode::from_raw_mode(0o755))
            }
            Worker::Remove(p) => {
                remove(s, Path::new(PATHS[p]));
                Ok(())
            }
            Worker::Symlink(p) => {
                s.note(PATHS[p]);
                rustix::fs::symlinkat("f", v, PATHS[p])
            }
            Worker::Rename(a, b) => {
                s.note(PATHS[a]);
                s.note(PATHS[b]);
                rustix::fs::renameat(v, PATHS[a], v, PATHS[b])
            }
            Worker::Chmod(p) => {
                s.note(PATHS[p]);
                rustix::fs::chmodat(v, PATHS[p], Mode::from_raw_mode(0o700), AtFlags::empty())
            }
        };
    }

    /// `rm -r` through the overlay: each entry noted, then removed.
    fn remove(s: &Stage, rel: &Path) {
        let v = &s.view;
        let Ok(st) = rustix::fs::statat(v, rel, AtFlags::SYMLINK_NOFOLLOW) else {
            return;
        };
        if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory {
            if let Ok(d) =
                rustix::fs::openat(v, rel, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())
            {
                let names: Vec<PathBuf> = rustix::fs::Dir::read_from(&d)
                    .unwrap()
                    .filter_map(Result::ok)
                    .map(|e| PathBuf::from(std::ffi::OsStr::from_bytes(e.file_name().to_bytes())))
                    .filter(|n| n != Path::new(".") && n != Path::new(".."))
                    .collect();
                for n in names {
                    remove(s, &rel.join(n));
                }
            }
            s.note(rel.to_str().unwrap());
            let _ = rustix::fs::unlinkat(v, rel, AtFlags::REMOVEDIR);
        } else {
            s.note(rel.to_str().unwrap());
            let _ = rustix::fs::unlinkat(v, rel, AtFlags::empty());
        }
    }

    /// A host change in the backing dir (a failing one left out).
    fn host(s: &Stage, op: &Host, i: usize) {
        let at = |p: usize| s.lower.join(PATHS[p]);
        let clear = |p: &Path| {
            let _ = fs::remove_file(p).or_else(|_| fs::remove_dir_all(p));
        };
        let _ = match *op {
            Host::Write(p) => fs::write(at(p), format!("h{i}\n")),
            Host::Mkdir(p) => {
                fs::create_dir(at(p)).and_then(|()| fs::write(at(p).join("h"), "h\n"))
            }
            Host::Remove(p) => {
                clear(&at(p));
                Ok(())
            }
            Host::Symlink(p) => {
                clear(&at(p));
                std::os::unix::fs::symlink("d", at(p))
            }
            Host::File(p) => {
                clear(&at(p));
                fs::write(at(p), format!("h{i}\n"))
            }
            Host::Chmod(p) => fs::set_permissions(at(p), fs::Permissions::from_mode(0o711)),
        };
    }

    /// Each backing path: what it is (its inode, and content, target or
    /// mode), never followed through a symlink.
    fn snapshot(root: &Path) -> BTreeMap<PathBuf, String> {
        let mut out = BTreeMap::new();
        let mut stack = vec![PathBuf::new()];
        while let Some(rel) = stack.pop() {
            for e in fs::read_dir(root.join(&rel)).unwrap() {
                let p = rel.join(e.unwrap().file_name());
                let full = root.join(&p);
                let md = fs::symlink_metadata(&full).unwrap();
                let what = if md.file_type().is_symlink() {
                    format!("link {} -> {:?}", md.ino(), fs::read_link(&full).unwrap())
                } else if md.is_dir() {
                    stack.push(p.clone());
                    format!("dir {} {:o}", md.ino(), md.mode())
                } else {
                    format!(
                        "file {} {:o} {:?}",
                        md.ino(),
                        md.mode(),
                        fs::read(&full).unwrap()
                    )
                };
                out.insert(p, what);
            }
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 128, failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn a_commit_without_force_never_touches_what_the_host_changed(
            work in prop::collection::vec(worker_op(), 1..8),
            hosts in prop::collection::vec(host_op(), 0..3),
            only in prop::collection::vec(0..PATHS.len(), 0..2),
            during in any::<bool>(),
        ) {
            // A partial commit (`commit PATH...`) when `only` names some.
            let filter: Vec<PathBuf> = only.iter().map(|i| PathBuf::from(PATHS[*i])).collect();
            let Some(s) = stage() else { return Ok(()) };
            for (i, op) in work.iter().enumerate() {
                act(&s, op, i);
            }
            let view = view_listing(&s);
            let before = snapshot(&s.lower);
            // The host acts before the commit, or (`during`) while it
            // runs: after its checks, before its first step.
            let mut hosted = None;
            let mut host_acts = || {
                if !hosts.is_empty() {
                    tick();
                }
                for (i, op) in hosts.iter().enumerate() {
                    host(&s, op, i);
                }
                hosted = Some(snapshot(&s.lower));
            };
            let l = s.layers();
            let r = if during {
                super::super::apply::commit_with(&l, &s.fp(), &s.zone, &filter, false, &mut host_acts)
            } else {
                host_acts();
                commit(&l, &s.fp(), &s.zone, &filter, false)
            };
            prop_assert!(r.is_ok(), "commit: {r:?}");
            let hosted = hosted.unwrap();
            let r = r.unwrap();
            let after = snapshot(&s.lower);
            let mut touched: Vec<&PathBuf> = before.keys().chain(hosted.keys()).collect();
            touched.sort();
            touched.dedup();
            for p in touched {
                if before.get(p) != hosted.get(p) {
                    prop_assert_eq!(
                        after.get(p), hosted.get(p),
                        "{} changed by the host, then by the commit: {:#?}", p.display(), r
                    );
                }
            }
            if hosts.is_empty() {
                prop_assert!(r.conflicts.is_empty(), "{:#?}", r);
                if filter.is_empty() {
                    prop_assert_eq!(listing(&s.lower), view);
                } else {
                    // The rest commits after it without a conflict.
                    let r = commit(&l, &s.fp(), &s.zone, &[], false);
                    prop_assert!(r.is_ok(), "commit: {r:?}");
                    let r = r.unwrap();
                    prop_assert!(r.conflicts.is_empty(), "{:#?}", r);
                    prop_assert_eq!(listing(&s.lower), view);
                }
            }
            // --force then applies the rest: nothing staged is left.
            let r = commit(&l, &s.fp(), &s.zone, &[], true);
            prop_assert!(r.is_ok(), "forced commit: {r:?}");
            prop_assert!(changes(&l, &[]).unwrap().is_empty());
        }
    }
}

//! Commit never deletes what the host made: a host change on the path a
//! staged change needs, a parent of it, or a child of it, is a conflict,
//! left untouched without `force`.

use super::*;

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

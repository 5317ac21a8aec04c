//! The answers' JSON, byte for byte as `zonemount` 0.1 sent them before
//! the answers had types (recorded from a real mount: the control
//! socket's lines without `ok` and `v`, and `--json` outputs compacted).
#![allow(clippy::unwrap_used)]

use super::*;

/// `changes --diff` of a staged zone with every kind of change (a file, a dir, a symlink, a mode, a rename, a name that is not UTF-8) and of a plain zone.
const CHANGES_DIFF: &str = r#"{"zones":[{"changes":[{"diff":"--- a/clash\n+++ b/clash\n@@ -1 +1 @@\n-host changed\n+staged\n","file_type":"file","kind":"modified","mode":420,"old_mode":420,"old_size":13,"path":"clash","size":7,"what":["content","times"]},{"diff":"","entries":4,"file_type":"dir","kind":"deleted","old_mode":493,"path":"d"},{"diff":"mode 0755 -> 0700 emptydir\n","file_type":"dir","kind":"modified","mode":448,"old_mode":493,"path":"emptydir","what":["mode"]},{"diff":"--- a/f\n+++ b/f\n@@ -1 +1,2 @@\n-old\n+over\n+more\n","file_type":"file","kind":"modified","mode":420,"old_mode":420,"old_size":4,"path":"f","size":10,"what":["content","times"]},{"diff":"--- a/gone\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n","file_type":"file","kind":"deleted","old_mode":420,"old_size":4,"path":"gone"},{"diff":"mode 0644 -> 0600 modeonly\n","file_type":"file","kind":"modified","mode":384,"old_mode":420,"old_size":5,"path":"modeonly","size":5,"what":["mode"]},{"diff":"--- /dev/null\n+++ b/na\\xffme\n@@ -0,0 +1 @@\n+odd\n","file_type":"file","kind":"added","mode":420,"path":"na�me","path_b64":"bmH/bWU=","size":4},{"diff":"","file_type":"dir","kind":"added","mode":493,"path":"nd"},{"diff":"","file_type":"dir","kind":"added","mode":493,"path":"nd/inner"},{"diff":"--- /dev/null\n+++ b/nd/inner/n\n@@ -0,0 +1 @@\n+n\n","file_type":"file","kind":"added","mode":420,"path":"nd/inner/n","size":2},{"diff":"--- /dev/null\n+++ b/new\n@@ -0,0 +1 @@\n+new\n","file_type":"file","kind":"added","mode":420,"path":"new","size":4},{"diff":"symlink oldlink: f -> new\n","file_type":"symlink","kind":"modified","mode":511,"old_mode":511,"old_size":1,"path":"oldlink","size":3,"what":["target"]},{"diff":"","file_type":"file","from":"torename","kind":"renamed","mode":420,"old_mode":420,"old_size":4,"path":"renamed","size":4},{"diff":"symlink sym: (none) -> f\n","file_type":"symlink","kind":"added","mode":511,"path":"sym","size":1}],"staged":true,"zone":"work"},{"changes":[{"kind":"added","path":"pnew"},{"kind":"deleted","path":"pold"}],"staged":false,"zone":"plain"}]}"#;

/// `changes /plain`: a plain rw zone's report.
const CHANGES_PLAIN: &str = r#"{"zones":[{"changes":[{"kind":"added","path":"pnew"},{"kind":"deleted","path":"pold"}],"staged":false,"zone":"plain"}]}"#;

/// `changes` without diffs.
const CHANGES: &str = r#"{"zones":[{"changes":[{"file_type":"file","kind":"modified","mode":420,"old_mode":420,"old_size":13,"path":"clash","size":7,"what":["content","times"]},{"entries":4,"file_type":"dir","kind":"deleted","old_mode":493,"path":"d"},{"file_type":"dir","kind":"modified","mode":448,"old_mode":493,"path":"emptydir","what":["mode"]},{"file_type":"file","kind":"modified","mode":420,"old_mode":420,"old_size":4,"path":"f","size":10,"what":["content","times"]},{"file_type":"file","kind":"deleted","old_mode":420,"old_size":4,"path":"gone"},{"file_type":"file","kind":"modified","mode":384,"old_mode":420,"old_size":5,"path":"modeonly","size":5,"what":["mode"]},{"file_type":"file","kind":"added","mode":420,"path":"na�me","path_b64":"bmH/bWU=","size":4},{"file_type":"dir","kind":"added","mode":493,"path":"nd"},{"file_type":"dir","kind":"added","mode":493,"path":"nd/inner"},{"file_type":"file","kind":"added","mode":420,"path":"nd/inner/n","size":2},{"file_type":"file","kind":"added","mode":420,"path":"new","size":4},{"file_type":"symlink","kind":"modified","mode":511,"old_mode":511,"old_size":1,"path":"oldlink","size":3,"what":["target"]},{"file_type":"file","from":"torename","kind":"renamed","mode":420,"old_mode":420,"old_size":4,"path":"renamed","size":4},{"file_type":"symlink","kind":"added","mode":511,"path":"sym","size":1}],"staged":true,"zone":"work"},{"changes":[{"kind":"added","path":"pnew"},{"kind":"deleted","path":"pold"}],"staged":false,"zone":"plain"}]}"#;

/// `commit`: applied, and conflicts on a path and inside a deleted dir (`at`).
const COMMIT: &str = r#"{"zones":[{"applied":[{"file_type":"file","kind":"added","mode":420,"path":"busy","size":0},{"file_type":"dir","kind":"modified","mode":448,"old_mode":493,"path":"emptydir","what":["mode"]},{"file_type":"file","kind":"modified","mode":420,"old_mode":420,"old_size":4,"path":"f","size":10,"what":["content","times"]},{"file_type":"file","kind":"deleted","old_mode":420,"old_size":4,"path":"gone"},{"file_type":"file","kind":"modified","mode":384,"old_mode":420,"old_size":5,"path":"modeonly","size":5,"what":["mode"]},{"file_type":"file","kind":"added","mode":420,"path":"na�me","path_b64":"bmH/bWU=","size":4},{"file_type":"symlink","kind":"modified","mode":511,"old_mode":511,"old_size":1,"path":"oldlink","size":3,"what":["target"]},{"file_type":"symlink","kind":"added","mode":511,"path":"sym","size":1},{"file_type":"file","kind":"deleted","old_mode":420,"old_size":4,"path":"torename"}],"conflicts":[{"path":"clash","why":"the host changed it after the worker did"},{"at":"d/sub","path":"d","why":"inside it: the host changed it after the worker did"}],"zone":"work"}]}"#;

/// `commit /work/renamed`.
const COMMIT_PATH: &str = r#"{"zones":[{"applied":[{"file_type":"file","kind":"added","mode":420,"path":"renamed","size":4}],"conflicts":[],"zone":"work"}]}"#;

/// `commit` of a stage dir no mount holds: a conflict only.
const COMMIT_OFFLINE: &str = r#"{"zones":[{"applied":[],"conflicts":[{"path":"a6","why":"the host created it after the worker's change"}],"zone":"work"}]}"#;

/// `commit` or `discard` of a zone with a file open for writing.
const LEFT_ALONE: &str = r#"{"zones":[{"applied":[],"conflicts":[{"path":"","why":"a worker has 1 file(s) of /work open for writing; try again once they are closed"}],"discarded":[],"zone":"work"}]}"#;

/// `discard`.
const DISCARD: &str = r#"{"zones":[{"discarded":[{"file_type":"file","kind":"added","mode":416,"path":"a3","size":3},{"file_type":"file","kind":"deleted","old_mode":420,"old_size":10,"path":"f"}],"zone":"work"}]}"#;

/// `T` read from `golden` and written again: the same bytes (keys in
/// alphabetical order, as the control socket writes every line).
fn same_bytes<T: Serialize + serde::de::DeserializeOwned>(golden: &str) -> T {
    let typed: T = serde_json::from_str(golden).unwrap();
    let again = serde_json::to_string(&serde_json::to_value(&typed).unwrap()).unwrap();
    assert_eq!(again, golden);
    typed
}

#[test]
fn changes_answers_keep_their_bytes() {
    let r: ChangesReport = same_bytes(CHANGES_DIFF);
    assert_eq!(r.count(), 16);
    let work = &r.zones[0];
    assert!(work.staged && !work.incomplete);
    let odd = work
        .changes
        .iter()
        .find(|c| c.path.as_os_str().as_encoded_bytes() == b"na\xffme")
        .unwrap();
    assert_eq!(odd.kind, Kind::Added);
    let renamed = work
        .changes
        .iter()
        .find(|c| c.kind == Kind::Renamed)
        .unwrap();
    assert_eq!(
        renamed.from.as_deref(),
        Some(std::path::Path::new("torename"))
    );
    let deleted_dir = work
        .changes
        .iter()
        .find(|c| c.path == std::path::Path::new("d"))
        .unwrap();
    assert_eq!(
        (
            deleted_dir.file_type,
            deleted_dir.entries,
            deleted_dir.diff.as_deref()
        ),
        (Some(FileType::Dir), Some(4), Some(""))
    );
    let plain = &r.zones[1];
    assert!(!plain.staged);
    assert_eq!(
        plain.changes,
        [
            Change::plain("pnew".into(), Kind::Added),
            Change::plain("pold".into(), Kind::Deleted)
        ]
    );
    same_bytes::<ChangesReport>(CHANGES_PLAIN);
    let r: ChangesReport = same_bytes(CHANGES);
    assert!(r.zones[0].changes.iter().all(|c| c.diff.is_none()));
}

#[test]
fn commit_and_discard_answers_keep_their_bytes() {
    let r: CommitReport = same_bytes(COMMIT);
    assert_eq!(r.conflicts(), 2);
    let inside = &r.zones[0].conflicts[1];
    assert_eq!(
        (inside.path.as_path(), inside.at.as_deref()),
        (
            std::path::Path::new("d"),
            Some(std::path::Path::new("d/sub"))
        )
    );
    assert_eq!(r.zones[0].discarded, None);
    same_bytes::<CommitReport>(COMMIT_PATH);
    same_bytes::<CommitReport>(COMMIT_OFFLINE);
    let r: DiscardReport = same_bytes(DISCARD);
    assert_eq!(r.conflicts(), 0);
    assert_eq!(r.zones[0].discarded.len(), 2);
}

#[test]
fn a_zone_left_alone_answers_the_same_for_commit_and_discard() {
    let commit = CommitReport {
        zones: vec![ZoneCommit::left_alone("work", 1)],
    };
    let discard = DiscardReport {
        zones: vec![ZoneDiscard::left_alone("work", 1)],
    };
    for answer in [
        Answer::Commit(commit.clone()),
        Answer::Discard(discard.clone()),
    ] {
        let v = serde_json::to_value(&answer).unwrap();
        assert_eq!(serde_json::to_string(&v).unwrap(), LEFT_ALONE);
    }
    assert_eq!(same_bytes::<CommitReport>(LEFT_ALONE), commit);
    assert_eq!(same_bytes::<DiscardReport>(LEFT_ALONE), discard);
    assert_eq!((commit.conflicts(), discard.conflicts()), (1, 1));
}

#[test]
fn names_that_are_not_utf8_travel_exact() {
    use std::os::unix::ffi::OsStrExt;
    let odd = |b: &[u8]| PathBuf::from(std::ffi::OsStr::from_bytes(b));
    let mut c = Change::plain(odd(b"new\xfe"), Kind::Renamed);
    c.from = Some(odd(b"old\xff"));
    c.file_type = Some(FileType::File);
    c.what = vec![What::Content, What::Xattrs];
    let commit = CommitReport {
        zones: vec![ZoneCommit {
            zone: "work".into(),
            applied: vec![c.clone()],
            conflicts: vec![Conflict {
                path: odd(b"d\xff/x"),
                why: "inside it".into(),
                at: Some(odd(b"d\xff")),
            }],
            discarded: None,
        }],
    };
    let v = serde_json::to_value(&commit).unwrap();
    let text = serde_json::to_string(&v).unwrap();
    assert_eq!(
        text,
        concat!(
            r#"{"zones":[{"applied":[{"file_type":"file","from":"old"#,
            "\u{fffd}",
            r#"","from_b64":"b2xk/w==","kind":"renamed","path":"new"#,
            "\u{fffd}",
            r#"","path_b64":"bmV3/g==","what":["content","xattrs"]}],"#,
            r#""conflicts":[{"at":"d"#,
            "\u{fffd}",
            r#"","at_b64":"ZP8=","path":"d"#,
            "\u{fffd}",
            r#"/x","path_b64":"ZP8veA==","why":"inside it"}],"zone":"work"}]}"#
        )
    );
    let back: CommitReport = serde_json::from_str(&text).unwrap();
    assert_eq!(back, commit);
}

#[test]
fn a_plain_zone_past_its_bound_says_it_is_incomplete() {
    let r = ChangesReport {
        zones: vec![ZoneChanges {
            zone: "out".into(),
            staged: false,
            changes: vec![Change::plain("a".into(), Kind::Modified)],
            incomplete: true,
            patch: None,
        }],
    };
    let text = serde_json::to_string(&serde_json::to_value(&r).unwrap()).unwrap();
    assert_eq!(
        text,
        r#"{"zones":[{"changes":[{"kind":"modified","path":"a"}],"incomplete":true,"staged":false,"zone":"out"}]}"#
    );
    assert_eq!(same_bytes::<ChangesReport>(&text), r);
}

//! The append log's tests: whole lines through a crash and growth, and a
//! full filesystem as an error.

use std::path::Path;

use super::AppendLog;
use crate::backing::tests::require_root;

#[test]
fn an_append_log_keeps_whole_lines_through_a_crash_and_growth() {
    // Mapped: on tmpfs (ext4 and xfs too); and written, as on any other
    // filesystem.
    let shm = tempfile::tempdir_in("/dev/shm").expect("a tmpfs at /dev/shm");
    append_log_case(shm.path(), true);
    let d = tempfile::tempdir().unwrap();
    append_log_case(d.path(), false);
}

fn append_log_case(dir: &Path, map: bool) {
    let path = dir.join("log");
    let open = || AppendLog::open_as(&path, 0o600, map).unwrap();
    let mut log = open();
    assert_eq!(log.is_mapped(), map);
    assert!(log.contents().unwrap().is_empty());
    log.append(b"one\n").unwrap();
    log.append(b"two\n").unwrap();
    assert_eq!(log.contents().unwrap(), b"one\ntwo\n");
    let on_disk = std::fs::read(&path).unwrap();
    assert!(on_disk.starts_with(b"one\ntwo\n"));
    // Mapped ahead: longer than its content, zeros after it.
    assert_eq!(on_disk.len() > 8, map);
    assert!(on_disk[8..].iter().all(|b| *b == 0));
    // Past the first step and more: every line is kept.
    let mut want = b"one\ntwo\n".to_vec();
    for i in 0..20_000 {
        let line = format!("line {i:08}\n");
        log.append(line.as_bytes()).unwrap();
        want.extend_from_slice(line.as_bytes());
    }
    assert!(want.len() > 2 * (64 << 10));
    assert_eq!(log.contents().unwrap(), want);
    // A crash: no Drop. The kernel has every line, zeros after them.
    std::mem::forget(log);
    let on_disk = std::fs::read(&path).unwrap();
    assert!(on_disk.starts_with(&want));
    assert!(on_disk[want.len()..].iter().all(|b| *b == 0));
    // A line torn mid-copy, its end written before its middle (a copy
    // needn't go front to back): dropped, and the junk after the gap
    // never becomes content.
    let mut torn = want.clone();
    torn.extend_from_slice(b"half a li");
    torn.extend_from_slice(&[0; 100]);
    torn.extend_from_slice(b"ne's end\n");
    torn.resize(torn.len().max(on_disk.len()), 0);
    std::fs::write(&path, &torn).unwrap();
    let mut log = open();
    assert_eq!(log.contents().unwrap(), want);
    // A line ending inside where the junk was.
    let long = format!("{}\n", "x".repeat(110));
    log.append(long.as_bytes()).unwrap();
    want.extend_from_slice(long.as_bytes());
    std::mem::forget(log);
    let log = open();
    assert_eq!(log.contents().unwrap(), want, "after a second crash");
    drop(log);
    // Dropped: the file is its content, nothing after.
    assert_eq!(std::fs::read(&path).unwrap(), want);
    // A file without zeros (as an older version wrote it) is appended to.
    std::fs::write(&path, b"old\n").unwrap();
    let mut log = open();
    assert_eq!(log.contents().unwrap(), b"old\n");
    log.append(b"new\n").unwrap();
    drop(log);
    assert_eq!(std::fs::read(&path).unwrap(), b"old\nnew\n");
}

#[test]
fn a_full_filesystem_is_an_error_for_a_mapped_log_not_a_crash() {
    const INNER: &str = "ZONEMOUNT_TEST_FULL_FS";
    if std::env::var_os(INNER).is_some() {
        return full_fs_inner();
    }
    if !require_root() {
        return;
    }
    // Run again in a private mount namespace (`unshare -m`): the tmpfs it
    // fills goes with it, even if the log kills it with SIGBUS.
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new("unshare")
        .args(["-m", "--propagation", "private"])
        .arg(exe)
        .args([
            "--exact",
            "stage::sys::tests::a_full_filesystem_is_an_error_for_a_mapped_log_not_a_crash",
            "--test-threads=1",
        ])
        .env(INNER, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{:?}: {stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A 256 KiB tmpfs: a mapped log grows until there is no room, and says
/// so with ENOSPC.
fn full_fs_inner() {
    let d = tempfile::tempdir().unwrap();
    let out = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=256k", "zm-test"])
        .arg(d.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "mount tmpfs: {out:?}");
    let mut log = AppendLog::open(&d.path().join("log"), 0o600).unwrap();
    assert!(log.is_mapped());
    let line: Vec<u8> = [b'x'; 1023].iter().chain(b"\n").copied().collect();
    let mut written = 0;
    let err = loop {
        match log.append(&line) {
            Ok(()) => written += line.len(),
            Err(e) => break e,
        }
        assert!(written <= 256 << 10, "more than the filesystem holds");
    };
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
    assert!(written >= 64 << 10);
    assert_eq!(log.contents().unwrap().len(), written);
    drop(log);
    let _ = std::process::Command::new("umount").arg(d.path()).status();
}

//! The backing module's own tests: kernel handles round-trip.

use super::*;

/// The unit-test twin of `tests/common`'s `require(Need::Root)`: under
/// `CI=true` a missing need fails the test; otherwise the skip is
/// printed and appended to `$ZONEMOUNT_SKIP_LOG`, which
/// `scripts/test.sh` counts as skipped rather than passed.
fn require_root() -> bool {
    if rustix::process::geteuid().is_root() {
        return true;
    }
    assert!(
        std::env::var("CI").map_or(true, |v| v != "true"),
        "this test needs root: under CI=true that is a failure, not a skip"
    );
    // `<suite>::<test>` as scripts/test.sh matches it against cargo's
    // report: the test binary's name without its hash, the thread's name.
    let exe = std::env::current_exe().unwrap_or_default();
    let stem = exe.file_stem().unwrap_or_default().to_string_lossy();
    let suite = stem.rsplit_once('-').map_or(&*stem, |(s, _)| s);
    let test = std::thread::current().name().unwrap_or("?").to_string();
    let line = format!("ZONEMOUNT-SKIP: {suite}::{test}: needs root\n");
    eprint!("{line}");
    if let Some(log) = std::env::var_os("ZONEMOUNT_SKIP_LOG") {
        use std::io::Write;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .and_then(|mut f| f.write_all(line.as_bytes()))
            .expect("recording a skip");
    }
    false
}

#[test]
fn handles_round_trip_when_privileged() {
    // open_by_handle_at needs CAP_DAC_READ_SEARCH.
    if !require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = open_zone_root(dir.path()).unwrap();
    let h = handle_of(root.as_fd()).unwrap();
    let mount_fd = ProcFds::open().unwrap().open_dir(root.as_fd()).unwrap();
    let fd = open_by_handle(mount_fd.as_fd(), &h).unwrap();
    assert_eq!(
        stat(fd.as_fd()).unwrap().st_ino,
        stat(root.as_fd()).unwrap().st_ino
    );
}

/// Reaching a name again never follows a symlink nor takes a path: the
/// link itself is what comes back, and a name with '/' or `..` is EINVAL.
#[test]
fn reach_again_takes_one_name_and_never_follows() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f"), "x").unwrap();
    std::fs::create_dir(dir.path().join("d")).unwrap();
    std::os::unix::fs::symlink("/etc", dir.path().join("l")).unwrap();
    let root = open_zone_root(dir.path()).unwrap();
    let (fd, st) = reach_again(root.as_fd(), OsStr::new("f")).unwrap();
    assert_eq!(stat(fd.as_fd()).unwrap().st_ino, st.st_ino);
    assert_eq!(FileType::from_raw_mode(st.st_mode), FileType::RegularFile);
    let (_, st) = reach_again(root.as_fd(), OsStr::new("l")).unwrap();
    assert_eq!(FileType::from_raw_mode(st.st_mode), FileType::Symlink);
    for bad in ["d/f", "..", ".", "", "l/passwd"] {
        assert_eq!(
            reach_again(root.as_fd(), OsStr::new(bad)).err(),
            Some(Errno::INVAL),
            "{bad:?}"
        );
    }
    // Out of fds is told apart from other failures.
    assert!(out_of_fds(Errno::MFILE) && out_of_fds(Errno::NFILE));
    assert!(!out_of_fds(Errno::NOENT));
}

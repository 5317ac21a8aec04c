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

/// chmod and utimes of a node held as `O_PATH` (by `AT_EMPTY_PATH` where
/// the kernel allows, else through `/proc/self/fd`) change that inode, and
/// a symlink still has no mode of its own.
#[test]
fn chmod_and_utimes_reach_the_held_inode() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("f"), b"x").expect("write");
    std::os::unix::fs::symlink("f", dir.path().join("l")).expect("symlink");
    let root = open_zone_root(dir.path()).expect("root");
    let f = lookup(root.as_fd(), OsStr::new("f")).expect("lookup f");
    let l = lookup(root.as_fd(), OsStr::new("l")).expect("lookup l");
    let procfds = ProcFds::open().expect("/proc/self/fd");
    procfds.chmod(f.as_fd(), 0o640).expect("chmod");
    let times = Timestamps {
        last_access: rustix::fs::Timespec {
            tv_sec: 1_000_000_000,
            tv_nsec: 5,
        },
        last_modification: rustix::fs::Timespec {
            tv_sec: 1_000_000_001,
            tv_nsec: 7,
        },
    };
    procfds.utimens(f.as_fd(), &times).expect("utimens");
    let st = stat(f.as_fd()).expect("stat");
    assert_eq!(st.st_mode & 0o7777, 0o640);
    assert_eq!((st.st_atime, st.st_atime_nsec), (1_000_000_000, 5));
    assert_eq!((st.st_mtime, st.st_mtime_nsec), (1_000_000_001, 7));
    assert_eq!(procfds.chmod(l.as_fd(), 0o600), Err(Errno::OPNOTSUPP));
    let lt = std::fs::symlink_metadata(dir.path().join("l")).expect("lstat");
    assert!(lt.file_type().is_symlink());
}

/// A caller's supplementary groups are its thread's, read once and then
/// kept (the same set comes back); a thread that is gone has none.
#[test]
fn a_callers_groups_are_its_threads_and_kept() {
    let me = Caller {
        uid: rustix::process::getuid().as_raw(),
        gid: rustix::process::getgid().as_raw(),
        pid: rustix::thread::gettid().as_raw_nonzero().get() as u32,
    };
    let groups = creds::groups_for(&me);
    assert_eq!(&*groups, &rustix::process::getgroups().unwrap()[..]);
    assert!(std::sync::Arc::ptr_eq(&groups, &creds::groups_for(&me)));
    // Above the kernel's largest pid_max (4,194,304): no such thread.
    let gone = Caller { pid: 1 << 23, ..me };
    assert!(creds::groups_for(&gone).is_empty());
}

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
            "backing::tests::a_full_filesystem_is_an_error_for_a_mapped_log_not_a_crash",
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

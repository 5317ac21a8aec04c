//! The backing module's own tests: kernel handles round-trip.

use super::*;

/// The unit-test twin of `tests/common`'s `require(Need::Root)`: under
/// `CI=true` a missing need fails the test; otherwise the skip is
/// printed and appended to `$ZONEMOUNT_SKIP_LOG`, which
/// `scripts/test.sh` counts as skipped rather than passed.
pub(crate) fn require_root() -> bool {
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

//! Open files: an unlinked open file stays reachable through its handle,
//! and which opens read through the page cache rather than passthrough.

use super::*;

#[test]
pub(super) fn an_unlinked_open_file_stays_reachable_through_its_handle() {
    let f = fixture();
    let (attr, fh) = create(&f.core, WORK, "gone", libc::O_RDWR).unwrap();
    f.core.write(fh, 0, b"still here", false).unwrap();
    remove(&f.core, WORK, "gone", false).unwrap();
    // Push the node's fd out of the bounded cache with many other lookups.
    for i in 0..2100 {
        let name = format!("f{i}");
        std::fs::write(f.rw.join(&name), "").unwrap();
        let a = found(&f.core, WORK, &name).unwrap();
        f.core.forget(a.ino.0, 1);
    }
    let got = f.core.getattr(&CTX, attr.ino.0, Some(fh)).unwrap().attr;
    assert_eq!(got.size, 10);
    assert_eq!(got.nlink, 0);
    let set = SetAttr {
        size: Some(5),
        mode: Some(0o600),
        fh: Some(fh),
        ..SetAttr::default()
    };
    let got = setattr(&f.core, attr.ino.0, set).unwrap().attr;
    assert_eq!((got.size, got.perm), (5, 0o600));
    assert_eq!(read(&f.core, fh, 0, 100).unwrap(), b"still");
    f.core.release(fh);
}

/// Which opens get a passthrough backing id: not a file first opened
/// read-only while small (it reads through the page cache for its life),
/// but a big one, or one first opened for writing; the choice sticks.
#[test]
pub(super) fn small_files_first_read_go_through_the_page_cache() {
    use crate::fs::core::{CACHED_READ_BYTES, IoMode};
    let f = fixture();
    f.core.set_io_mode(IoMode::Passthrough);
    std::fs::write(f.rw.join("small"), "x").unwrap();
    let big = std::fs::File::create(f.rw.join("big")).unwrap();
    big.set_len(CACHED_READ_BYTES).unwrap();
    std::fs::write(f.rw.join("written"), "x").unwrap();
    let registers = |name: &str, flags: i32| {
        let ino = found(&f.core, WORK, name).unwrap().ino.0;
        let (fh, registered) = open(&f.core, ino, flags).unwrap();
        f.core.release(fh);
        registered
    };
    assert!(
        !registers("small", libc::O_RDONLY),
        "a small file read: page cache"
    );
    assert!(
        !registers("small", libc::O_RDWR),
        "the choice sticks for the node"
    );
    assert!(
        registers("big", libc::O_RDONLY),
        "a big file read: passthrough"
    );
    assert!(
        registers("written", libc::O_WRONLY),
        "a file written: passthrough"
    );
}

/// A GETXATTR or LISTXATTR whose `size` is far beyond what Linux keeps
/// (64 KiB) reserves no more than that: the value comes back whole, and
/// the daemon's peak memory does not grow by the size asked for.
#[test]
pub(super) fn an_xattr_size_of_4_gib_reserves_no_more_than_an_xattr_can_hold() {
    use crate::fs::core::XattrReply;
    let peak_kib = || {
        std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap()
    };
    let f = fixture();
    std::fs::write(f.rw.join("x"), "x").unwrap();
    if let Err(e) = rustix::fs::setxattr(
        f.rw.join("x"),
        "user.k",
        b"value",
        rustix::fs::XattrFlags::empty(),
    ) {
        panic!("user xattrs on the test's backing dir: {e}");
    }
    let ino = found(&f.core, WORK, "x").unwrap().ino.0;
    let before = peak_kib();
    let got = f
        .core
        .getxattr(&CTX, ino, "user.k".as_ref(), u32::MAX)
        .unwrap();
    assert!(
        matches!(got, XattrReply::Data(ref v) if v == b"value"),
        "{got:?}"
    );
    let got = f.core.listxattr(&CTX, ino, u32::MAX).unwrap();
    assert!(
        matches!(got, XattrReply::Data(ref v) if v.starts_with(b"user.k\0")),
        "{got:?}"
    );
    let grew = peak_kib() - before;
    assert!(grew < 512 * 1024, "peak memory grew by {grew} KiB");
}

/// The raw fd a handle reads through.
fn fd_no(core: &Core, fh: u64) -> i32 {
    use std::os::fd::AsRawFd;
    core.read_handle(fh).unwrap().fd().unwrap().as_raw_fd()
}

/// Plain read-only opens with the daemon's own rights share the file's
/// one reading fd (no open and close per OPEN and RELEASE); one handle's
/// release leaves it to the others. An open that changes what reads
/// through it do (`O_NOATIME`, `O_DIRECT`), or writes, gets its own.
#[test]
pub(super) fn read_only_opens_share_one_fd_per_file() {
    let f = fixture();
    std::fs::write(f.rw.join("shared"), "one fd").unwrap();
    let ino = found(&f.core, WORK, "shared").unwrap().ino.0;
    let (a, _) = open(&f.core, ino, libc::O_RDONLY).unwrap();
    let (b, _) = open(&f.core, ino, libc::O_RDONLY | libc::O_NONBLOCK).unwrap();
    assert_eq!(fd_no(&f.core, a), fd_no(&f.core, b), "one fd for both");
    for flags in [
        libc::O_RDONLY | libc::O_NOATIME,
        libc::O_RDONLY | libc::O_DIRECT,
        libc::O_RDWR,
    ] {
        let (c, _) = open(&f.core, ino, flags).unwrap();
        assert_ne!(fd_no(&f.core, a), fd_no(&f.core, c), "flags {flags:#o}");
        f.core.release(c);
    }
    f.core.release(a);
    assert_eq!(read(&f.core, b, 0, 100).unwrap(), b"one fd");
    f.core.release(b);
    // Released by all: the node keeps the fd for its next open.
    let (c, _) = open(&f.core, ino, libc::O_RDONLY).unwrap();
    assert_eq!(read(&f.core, c, 0, 100).unwrap(), b"one fd");
    f.core.release(c);
    f.core.forget(ino, 1);
}

/// A caller the daemon acts as (a root daemon, another uid) never gets
/// the shared fd: its open is its own, checked with its rights. A file
/// only root may read is refused to it even while root's reading fd is
/// kept.
#[test]
pub(super) fn another_callers_open_is_its_own_and_checked_as_that_caller() {
    if !crate::backing::tests::require_root() {
        return;
    }
    let f = fixture();
    std::fs::write(f.rw.join("private"), "root only").unwrap();
    std::fs::set_permissions(
        f.rw.join("private"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    std::fs::write(f.rw.join("public"), "anyone").unwrap();
    let private = found(&f.core, WORK, "private").unwrap().ino.0;
    let public = found(&f.core, WORK, "public").unwrap().ino.0;
    let (root_fh, _) = open(&f.core, private, libc::O_RDONLY).unwrap();
    let (root_pub, _) = open(&f.core, public, libc::O_RDONLY).unwrap();
    let user = Ctx {
        uid: 65534,
        gid: 65534,
        ..CTX
    };
    let as_user = |ino: u64| {
        let (r, _) = opening(|reply| f.core.open(user, ino, libc::O_RDONLY, reply));
        r.map(|o: FileOpen| o.fh)
    };
    assert_eq!(
        as_user(private).map_err(|e| e.errno()),
        Err(libc::EACCES),
        "refused with the caller's rights"
    );
    let user_fh = as_user(public).unwrap();
    assert_ne!(fd_no(&f.core, root_pub), fd_no(&f.core, user_fh));
    assert_eq!(read(&f.core, user_fh, 0, 100).unwrap(), b"anyone");
    for fh in [root_fh, root_pub, user_fh] {
        f.core.release(fh);
    }
}

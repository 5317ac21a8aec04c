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

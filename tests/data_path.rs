//! File data by either path (DESIGN §7): kernel passthrough (root), or
//! through the daemon (an ordinary user, or `--no-passthrough`), with
//! `--writeback-cache` the kernel gathering writes in its page cache and
//! sending them later in large blocks. Whatever the path, what a worker
//! wrote is in the backing file once its `close` returns, and a zone's
//! size limit refuses the write that would pass it, to the writer.
//! Without `--writeback-cache`, a change the host makes to a file shows
//! through the mount (the writeback cache would hide it). An open file
//! reads what it opened after its name is removed or replaced.
//!
//! The suite runs in every environment (`scripts/test-envs.sh`): as root
//! each test runs with passthrough, with `--no-passthrough`, and with
//! that and `--writeback-cache`; as an ordinary user the data goes through
//! the daemon every time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;

use common::*;
use serde_json::Value;

/// The mount options each test runs with: the default (passthrough where
/// the daemon may use it), `--no-passthrough`, and that with the
/// writeback cache.
const PATHS: [&[&str]; 3] = [
    &[],
    &["--no-passthrough"],
    &["--no-passthrough", "--writeback-cache"],
];

/// The fixture with `args` on its mount command line.
fn with_args(mut s: Setup, args: &[&str]) -> Setup {
    for a in args {
        s = s.arg(a);
    }
    s
}

fn status(m: &TestMount) -> Value {
    let mnt = m.mountpoint().to_str().unwrap();
    let out = m.zonemount(&["status", "--json", mnt]);
    assert!(out.success(), "{}", out.describe());
    serde_json::from_str(&out.stdout).unwrap()
}

/// Random bytes (a seeded xorshift: the same every run).
fn noise(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 32) as u8
        })
        .collect()
}

/// Sequential 4 KiB writes with fsync, appends, a partial overwrite of
/// the middle of a page, a truncate, a write to a file its writer may not
/// read, and a shared mmap: each lands whole in the backing file, seen
/// there as soon as the writer's `close` has returned.
#[test]
fn what_is_written_is_in_the_backing_file_at_close() {
    if !fuse_ok() {
        return;
    }
    for args in PATHS {
        let src = noise(3 * 1024 * 1024 + 123);
        let s = Setup::zones(Mode::Sandboxed, &[("ws", "mode: rw")])
            .file("ws", "trunc-me", vec![b't'; 10_000])
            .file("ws", "write-only", "abcdefgh")
            .file("ws", "mapped", vec![b'.'; 8192]);
        let s = with_args(s, args);
        fs::write(s.root().join("src.bin"), &src).unwrap();
        fs::set_permissions(
            s.backing("ws", "write-only"),
            fs::Permissions::from_mode(0o200),
        )
        .unwrap();
        let m = s.mount();
        let ctx = format!("{args:?}");
        let io = &status(&m)["io"];
        let daemon = io["mode"] == "daemon";
        assert_eq!(
            io["detail"].as_str().unwrap().contains("writeback cache"),
            daemon && args.contains(&"--writeback-cache"),
            "{ctx}: the writeback cache is used when asked for and data goes through the daemon: {io}"
        );
        let script = format!(
            "set -e
             dd if='{src}' of=ws/seq bs=4k conv=fsync status=none
             printf a > ws/app; printf b >> ws/app; printf c >> ws/app
             printf XY | dd of=ws/seq bs=1 seek=5000 conv=notrunc status=none
             truncate -s 100 ws/trunc-me
             printf hi | dd of=ws/write-only bs=1 seek=3 conv=notrunc status=none
             python3 -c '
import mmap
with open(\"ws/mapped\", \"r+b\") as f:
    m = mmap.mmap(f.fileno(), 0)
    m[4000:4010] = b\"0123456789\"
    m.flush()
    m.close()
'",
            src = m.root().join("src.bin").display()
        );
        let out = m.sh_in("", &script, &[]);
        assert!(out.success(), "{ctx}: {}", out.describe());

        let mut want = src.clone();
        want[5000..5002].copy_from_slice(b"XY");
        let got = fs::read(m.backing("ws", "seq")).unwrap();
        assert!(got == want, "{ctx}: ws/seq differs from what was written");
        assert_eq!(fs::read(m.backing("ws", "app")).unwrap(), b"abc", "{ctx}");
        assert_eq!(
            fs::read(m.backing("ws", "trunc-me")).unwrap(),
            vec![b't'; 100],
            "{ctx}"
        );
        let mut mapped = vec![b'.'; 8192];
        mapped[4000..4010].copy_from_slice(b"0123456789");
        assert!(
            fs::read(m.backing("ws", "mapped")).unwrap() == mapped,
            "{ctx}: the mmap write did not land"
        );
        // Read back as its owner would after making it readable again.
        fs::set_permissions(
            m.backing("ws", "write-only"),
            fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        assert_eq!(
            fs::read(m.backing("ws", "write-only")).unwrap(),
            b"abchifgh",
            "{ctx}"
        );
        // And through the mount, the same bytes.
        assert!(fs::read(m.path("ws/seq")).unwrap() == want, "{ctx}");
    }
}

/// What a worker reads is the backing file's bytes, whatever their size
/// (through the daemon, replies of 32 KiB and more are spliced from the
/// backing file, shorter ones copied), at the file's end, and at any
/// offset where reads skip the page cache (a zone with a size limit opens
/// files for writing with direct I/O under `--writeback-cache`).
#[test]
fn what_is_read_is_the_backing_files_bytes() {
    if !fuse_ok() {
        return;
    }
    let sizes = [
        0,
        1,
        4095,
        32 * 1024 - 1,
        32 * 1024,
        32 * 1024 + 1,
        128 * 1024 + 7,
        1024 * 1024 + 5,
        3 * 1024 * 1024 + 123,
    ];
    for args in PATHS {
        let ctx = format!("{args:?}");
        let mut s = Setup::zones(
            Mode::Sandboxed,
            &[
                ("ws", "mode: rw"),
                ("lim", "mode: rw, max_file_bytes: 100000000"),
            ],
        );
        for n in sizes {
            s = s.file("ws", &format!("f{n}"), noise(n));
        }
        let big = noise(3 * 1024 * 1024 + 123);
        let s = with_args(s.file("lim", "big", big.clone()), args);
        let m = s.mount();
        for n in sizes {
            let got = fs::read(m.path(&format!("ws/f{n}"))).unwrap();
            assert!(got == noise(n), "{ctx}: ws/f{n} read back differs");
        }
        use std::os::unix::fs::FileExt;
        let f = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(m.path("lim/big"))
            .unwrap();
        for (at, len) in [
            (0, 70_000),
            (5_000, 70_000),
            (4_096 * 3 + 1, 200_000),
            (3 * 1024 * 1024, 4_096),
        ] {
            let mut buf = vec![0u8; len];
            let n = f.read_at(&mut buf, at as u64).unwrap();
            let want = &big[at..(at + len).min(big.len())];
            assert!(
                &buf[..n] == want,
                "{ctx}: lim/big at {at}, {len} bytes: got {n} bytes, not the backing file's"
            );
        }
    }
}

/// An open file reads what it opened after its name goes, as on any
/// filesystem: removed through the mount, or replaced on the host the
/// way an editor saves (a new file renamed over it). The opens come
/// after each file was opened once before (how its data goes is settled)
/// and after 3,000 other files have gone through the daemon's fd cache,
/// and the page cache is dropped before each read: only what the open
/// itself holds can answer.
#[test]
fn an_open_file_reads_what_it_opened_after_its_name_goes() {
    if !fuse_ok() {
        return;
    }
    use std::os::unix::fs::FileExt;
    const OTHERS: usize = 3_000;
    for args in PATHS {
        let ctx = format!("{args:?}");
        let mut s = Setup::zones(Mode::Sandboxed, &[("ws", "mode: rw")])
            .file("ws", "removed", noise(100_000))
            .file("ws", "saved", noise(40_000));
        for i in 0..OTHERS {
            s = s.file("ws", &format!("others/{i}"), format!("{i}"));
        }
        let s = with_args(s, args);
        let m = s.mount();
        let names = ["removed", "saved"];
        let want: Vec<Vec<u8>> = names
            .iter()
            .map(|n| fs::read(m.path(&format!("ws/{n}"))).unwrap())
            .collect();
        for i in 0..OTHERS {
            fs::read(m.path(&format!("ws/others/{i}"))).unwrap();
        }
        let open: Vec<fs::File> = names
            .iter()
            .map(|n| fs::File::open(m.path(&format!("ws/{n}"))).unwrap())
            .collect();
        fs::remove_file(m.path("ws/removed")).unwrap();
        fs::write(m.backing("ws", "saved.new"), "the editor's new copy").unwrap();
        fs::rename(m.backing("ws", "saved.new"), m.backing("ws", "saved")).unwrap();
        for ((name, f), want) in names.iter().zip(&open).zip(&want) {
            rustix::fs::fadvise(f, 0, None, rustix::fs::Advice::DontNeed).unwrap();
            let mut got = vec![0u8; want.len() + 10];
            let n = f
                .read_at(&mut got, 0)
                .unwrap_or_else(|e| panic!("{ctx}: reading {name} after its name went: {e}"));
            assert!(
                got[..n] == want[..],
                "{ctx}: {name} read {n} bytes, not what was opened"
            );
        }
    }
}

/// A zone's size limit still refuses, to the writer, the write that would
/// pass it, with every byte up to it kept and nothing after: with the
/// writeback cache the limited zone's files are written through (direct
/// I/O), so no refusal is left for a later write-back to swallow.
#[test]
fn a_size_limit_refuses_the_write_that_would_pass_it() {
    if !fuse_ok() {
        return;
    }
    for args in PATHS {
        let s = Setup::zones(
            Mode::Sandboxed,
            &[("ws", "mode: rw, max_file_bytes: 10000")],
        );
        let m = with_args(s, args).mount();
        let ctx = format!("{args:?}");
        // The two 4 KiB writes under the limit land, the third does not.
        refused_at(
            &m,
            &ctx,
            "dd if=/dev/zero of=ws/big bs=4k count=4",
            "big",
            8192,
        );
        let out = m.sh_in("", "head -c 10000 /dev/zero > ws/exact", &[]);
        assert!(out.success(), "{ctx}: {}", out.describe());
        assert_eq!(
            fs::metadata(m.backing("ws", "exact")).unwrap().len(),
            10_000
        );
        let append = "printf x | dd of=ws/exact oflag=append conv=notrunc";
        refused_at(&m, &ctx, append, "exact", 10_000);
    }
}

/// `script` (a `dd`) fails with EFBIG, leaving `ws/name` at `size` bytes.
#[track_caller]
fn refused_at(m: &TestMount, ctx: &str, script: &str, name: &str, size: u64) {
    let out = m.sh_in("", &format!("{script} status=none"), &[("LC_ALL", "C")]);
    assert!(
        !out.success() && out.stderr.contains("File too large"),
        "{ctx}: {}",
        out.describe()
    );
    assert_eq!(
        fs::metadata(m.backing("ws", name)).unwrap().len(),
        size,
        "{ctx}: {name}"
    );
}

/// Without `--writeback-cache`, a file the host appends to shows its new
/// size and content through the mount once the attribute TTL has passed
/// (0 here), even while a worker holds it open: the kernel takes the
/// backing file's size again. (With the writeback cache it would keep its
/// own, and the host's append would look cut off.)
#[test]
fn a_host_append_shows_through_by_default() {
    if !fuse_ok() {
        return;
    }
    for args in [&[][..], &["--no-passthrough"][..]] {
        let s = Setup::zones(Mode::Direct, &[("ws", "mode: rw")])
            .file("ws", "log", "hello\n")
            .arg("--cache-ttl")
            .arg("0");
        let m = with_args(s, args).mount();
        let ctx = format!("{args:?}");
        let held = fs::File::open(m.path("ws/log")).unwrap();
        assert_eq!(fs::read_to_string(m.path("ws/log")).unwrap(), "hello\n");
        use std::io::Write;
        fs::OpenOptions::new()
            .append(true)
            .open(m.backing("ws", "log"))
            .unwrap()
            .write_all(b"world\n")
            .unwrap();
        assert_eq!(
            fs::read_to_string(m.path("ws/log")).unwrap(),
            "hello\nworld\n",
            "{ctx}: the host's append is not seen through the mount"
        );
        drop(held);
    }
}

/// `status --json` counts the FUSE requests the daemon answered, by
/// opcode: five opens and closes of a file are five OPENs and, once the
/// kernel has sent them (a RELEASE may come after close returns), five
/// RELEASEs more, whichever way the data goes.
#[test]
fn status_counts_requests_by_opcode() {
    if !fuse_ok() {
        return;
    }
    for args in PATHS {
        let s = Setup::zones(Mode::Sandboxed, &[("ws", "mode: rw")]).file("ws", "f", "data");
        let m = with_args(s, args).mount();
        let count = |st: &Value, op: &str| st["fuse_requests"][op].as_u64().unwrap_or(0);
        let f = m.mountpoint().join("ws/f");
        assert_eq!(fs::read(&f).unwrap(), b"data", "{args:?}");
        // The read's RELEASE may come after its close returned: wait for
        // it, so that it is not counted as one of the five below.
        let mut before = status(&m);
        let settled = wait_until(std::time::Duration::from_secs(10), || {
            before = status(&m);
            count(&before, "OPEN") >= 1 && count(&before, "RELEASE") == count(&before, "OPEN")
        });
        assert!(settled, "{args:?}: {before}");
        assert!(count(&before, "LOOKUP") >= 1, "{args:?}: {before}");
        let (opens, releases) = (count(&before, "OPEN"), count(&before, "RELEASE"));
        for _ in 0..5 {
            drop(fs::File::open(&f).unwrap());
        }
        let mut after = status(&m);
        assert_eq!(count(&after, "OPEN"), opens + 5, "{args:?}: {after}");
        let released = wait_until(std::time::Duration::from_secs(10), || {
            after = status(&m);
            count(&after, "RELEASE") >= releases + 5
        });
        assert!(released, "{args:?}: {after}");
        assert_eq!(count(&after, "RELEASE"), releases + 5, "{args:?}: {after}");
    }
}

/// With `--kernel-opens`, a mount whose every zone is read-only with no
/// rule only the daemon enforces (no `hide`, read approval, suffix filter
/// or size limit), used by the mounting user alone, is mounted read-only
/// and lets the kernel
/// open files and directories itself: after the first open (answered
/// ENOSYS) no OPEN, RELEASE, OPENDIR or RELEASEDIR reaches the daemon, a
/// warm read and walk send nothing at all, and a cold read is served by
/// node (a READ with no handle), byte for byte, lseek and mmap too. A
/// file the caller can't read is refused as the host would refuse it.
/// One rw zone more, or the flag left out, and every open is a round trip
/// again.
#[test]
fn a_plain_read_only_mount_lets_the_kernel_open() {
    if !fuse_ok() {
        return;
    }
    let big = noise(3 * 1024 * 1024 + 77);
    let s = Setup::zones(
        Mode::Sandboxed,
        &[("src", "mode: ro"), ("docs", "mode: ro")],
    )
    .file("src", "a.txt", "alpha")
    .file("src", "d/e/b.txt", "beta")
    .file("src", "locked", "secret")
    .file("docs", "big.bin", &big);
    fs::set_permissions(
        s.backing("src", "locked"),
        fs::Permissions::from_mode(0o000),
    )
    .unwrap();
    let m = s.arg("--kernel-opens").mount();
    let count = |st: &Value, op: &str| st["fuse_requests"][op].as_u64().unwrap_or(0);
    let (_, _, opts) = mount_entry(m.mountpoint()).unwrap();
    assert!(opts.split(',').any(|o| o == "ro"), "{opts}");
    let st = status(&m);
    let detail = st["io"]["detail"].as_str().unwrap();
    assert!(detail.contains("the kernel opens files itself"), "{detail}");
    // Cold: every byte through READs by node.
    let small = [
        ("src/a.txt", &b"alpha"[..]),
        ("src/d/e/b.txt", &b"beta"[..]),
    ];
    let read_all = || {
        for (p, want) in small {
            assert_eq!(fs::read(m.path(p)).unwrap(), want, "{p}");
        }
        assert!(fs::read(m.path("docs/big.bin")).unwrap() == big, "big.bin");
        for d in ["", "src", "src/d", "src/d/e", "docs"] {
            assert!(fs::read_dir(m.path(d)).unwrap().count() > 0, "{d}");
        }
    };
    read_all();
    // Read-ahead the kernel started may still be arriving (under load it
    // came after `read_all` returned): counted once the READs settle.
    let mut cold = status(&m);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(200));
        let again = status(&m);
        let settled = count(&again, "READ") == count(&cold, "READ");
        cold = again;
        if settled {
            break;
        }
    }
    assert!(count(&cold, "READ") >= 3, "{cold}");
    assert!(count(&cold, "OPEN") <= 1, "{cold}");
    assert!(count(&cold, "OPENDIR") <= 1, "{cold}");
    assert_eq!(count(&cold, "RELEASE"), 0, "{cold}");
    assert_eq!(count(&cold, "RELEASEDIR"), 0, "{cold}");
    // Warm: nothing reaches the daemon but status's own STATFS. No open
    // ever does; a READ may still (one run in about ten on a loaded
    // machine saw two late ones), so a warm round is tried up to three
    // times, and one of them must send none.
    let mut base = cold.clone();
    let mut quiet = false;
    for _ in 0..3 {
        for _ in 0..3 {
            read_all();
        }
        let warm = status(&m);
        for op in ["OPEN", "RELEASE", "OPENDIR", "RELEASEDIR"] {
            assert_eq!(
                count(&warm, op),
                count(&cold, op),
                "{op}: {cold} then {warm}"
            );
        }
        quiet = ["READ", "READDIR", "READDIRPLUS"]
            .iter()
            .all(|op| count(&warm, op) == count(&base, op));
        if quiet {
            break;
        }
        base = warm;
    }
    assert!(
        quiet,
        "three warm rounds each sent requests: {cold} then {base}"
    );
    // Positioned reads, SEEK_END and a shared read-only mmap.
    use std::io::{Read, Seek, SeekFrom};
    let mut f = fs::File::open(m.path("docs/big.bin")).unwrap();
    assert_eq!(f.seek(SeekFrom::End(-77)).unwrap(), big.len() as u64 - 77);
    let mut tail = Vec::new();
    f.read_to_end(&mut tail).unwrap();
    assert!(tail == big[big.len() - 77..]);
    assert!(tool_ok("python3"), "python3 for the mmap read");
    let out = m.sh_in(
        "docs",
        "python3 -c 'import mmap,sys; f=open(\"big.bin\",\"rb\"); mm=mmap.mmap(f.fileno(),0,prot=mmap.PROT_READ); sys.stdout.write(str(mm[1000000]))'",
        &[],
    );
    assert!(out.success(), "mmap: {}", out.describe());
    assert_eq!(out.stdout, big[1_000_000].to_string());
    // As the host answers the caller (root reads a 000 file, a user can't).
    let host = fs::read(m.backing("src", "locked"));
    let seen = fs::read(m.path("src/locked"));
    assert_eq!(errno_of(&seen), errno_of(&host), "{seen:?} vs {host:?}");
    // Writes: EROFS, nothing changed.
    assert_errno(fs::write(m.path("src/a.txt"), "x"), libc::EROFS);
    assert_errno(fs::write(m.path("src/new"), "x"), libc::EROFS);
    assert_eq!(fs::read(m.backing("src", "a.txt")).unwrap(), b"alpha");
    drop(m);

    let s = Setup::zones(Mode::Sandboxed, &[("src", "mode: ro"), ("out", "mode: rw")])
        .file("src", "a.txt", "alpha");
    let m = s.arg("--kernel-opens").mount();
    let (_, _, opts) = mount_entry(m.mountpoint()).unwrap();
    assert!(opts.split(',').any(|o| o == "rw"), "{opts}");
    let detail = status(&m)["io"]["detail"].as_str().unwrap().to_string();
    assert!(detail.contains("zone out is read-write"), "{detail}");
    let before = count(&status(&m), "OPEN");
    for _ in 0..3 {
        assert_eq!(fs::read(m.path("src/a.txt")).unwrap(), b"alpha");
    }
    assert_eq!(count(&status(&m), "OPEN"), before + 3);
    drop(m);

    // Not asked for: the errno table's mount, opens on the daemon.
    let s = Setup::zones(Mode::Sandboxed, &[("src", "mode: ro")]).file("src", "a.txt", "alpha");
    let m = s.mount();
    let (_, _, opts) = mount_entry(m.mountpoint()).unwrap();
    assert!(opts.split(',').any(|o| o == "rw"), "{opts}");
    let detail = status(&m)["io"]["detail"].as_str().unwrap().to_string();
    assert!(detail.contains("--kernel-opens"), "{detail}");
    let before = count(&status(&m), "OPEN");
    assert_eq!(fs::read(m.path("src/a.txt")).unwrap(), b"alpha");
    assert_eq!(count(&status(&m), "OPEN"), before + 1);
    assert_errno(fs::create_dir(m.path("newzone")), libc::EACCES);
    drop(m);

    // A ledger records every refused change: the daemon must see them.
    let s = Setup::zones(Mode::Sandboxed, &[("src", "mode: ro")]).file("src", "a.txt", "alpha");
    let ledger = s.root().join("audit.jsonl");
    let m = s
        .arg("--kernel-opens")
        .arg("--audit-log")
        .arg(ledger.to_str().unwrap())
        .mount();
    let detail = status(&m)["io"]["detail"].as_str().unwrap().to_string();
    assert!(detail.contains("--audit-log"), "{detail}");
    assert_errno(fs::write(m.path("src/a.txt"), "x"), libc::EROFS);
    let text = fs::read_to_string(&ledger).unwrap();
    assert!(text.contains("\"refusal\""), "{text}");
}

/// A file made and written through the mount, then given its metadata as
/// `tar` does (times, owner, mode) and an extended attribute: each lands
/// on the backing file and reads back through the mount (an attribute the
/// file lacks is ENODATA), and the file runs at once once it is
/// executable, through the mount and on the host. With passthrough the
/// daemon keeps the read-only fd it registers as the file's own: it must
/// hold no write access (the host's exec would fail with ETXTBSY), and
/// the attributes are read on it directly.
#[test]
fn a_file_made_here_takes_its_metadata_and_runs() {
    if !fuse_ok() {
        return;
    }
    for args in PATHS {
        let ctx = format!("{args:?}");
        let s = with_args(Setup::zones(Mode::Sandboxed, &[("ws", "mode: rw")]), args);
        let m = s.mount();
        let script = "set -e
             printf '#!/bin/sh\\necho ran\\n' > ws/tool
             chmod 750 ws/tool
             ./ws/tool
             printf '#!/bin/sh\\necho again\\n' > ws/tool
             ./ws/tool
             touch -m -d @1000000000 ws/tool
             chown \"$(id -u):$(id -g)\" ws/tool
             python3 -c '
import errno, os
os.setxattr(\"ws/tool\", \"user.k\", b\"v1\")
print(os.getxattr(\"ws/tool\", \"user.k\").decode())
try:
    os.getxattr(\"ws/tool\", \"user.missing\")
except OSError as e:
    print(errno.errorcode[e.errno])
'";
        let out = m.sh_in("", script, &[]);
        assert!(out.success(), "{ctx}: {}", out.describe());
        assert_eq!(out.stdout, "ran\nagain\nv1\nENODATA\n", "{ctx}");
        let meta = fs::metadata(m.backing("ws", "tool")).unwrap();
        assert_eq!(meta.permissions().mode() & 0o7777, 0o750, "{ctx}");
        use std::os::unix::fs::MetadataExt;
        assert_eq!(meta.mtime(), 1_000_000_000, "{ctx}");
        let mut v = [0u8; 8];
        let n = rustix::fs::getxattr(m.backing("ws", "tool"), "user.k", &mut v[..]).unwrap();
        assert_eq!(&v[..n], b"v1", "{ctx}: the xattr is on the backing file");
        // The host runs it too: the daemon holds no write access to it.
        let host = std::process::Command::new(m.backing("ws", "tool"))
            .output()
            .unwrap_or_else(|e| panic!("{ctx}: the host cannot run the file: {e}"));
        assert_eq!(host.stdout, b"again\n", "{ctx}");
    }
}

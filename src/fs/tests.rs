//! The core driven without the kernel: node bookkeeping and escape attempts
//! that are easier to pin down here than through a mount.

use std::ffi::OsStr;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::Duration;

use crate::backing::Caller;
use crate::config::{Access, Approval, ApprovalPolicy, SandboxMode, Zone, ZonePolicy, ZoneTable};
use crate::error::{FsError, Refusal};
use crate::fs::core::{Core, CoreOptions, Gate, SetAttr};
use crate::fs::inodes::ROOT;

fn zone(name: &str, dir: &Path, access: Access) -> Zone {
    Zone {
        name: name.into(),
        backing: dir.to_path_buf(),
        policy: ZonePolicy {
            access,
            approval: ApprovalPolicy {
                write: Approval::PreApproved,
                delete: Approval::PreApproved,
            },
            suffixes: None,
            max_file_bytes: None,
            protect: vec![],
            hidden: vec![],
        },
    }
}

/// A core over `table` as root, daemon I/O, 1 s TTLs.
fn core_of(table: &ZoneTable) -> Core {
    Core::new(
        table,
        CoreOptions {
            ttl: Duration::from_secs(1),
            ttl_ro: Duration::from_secs(1),
            passthrough: false,
            owner_uid: 0,
            owner_gid: 0,
        },
    )
    .unwrap()
}

struct Fixture {
    _tmp: tempfile::TempDir,
    outside: std::path::PathBuf,
    rw: std::path::PathBuf,
    core: Core,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let (rw, ro, outside) = (
        tmp.path().join("rw"),
        tmp.path().join("ro"),
        tmp.path().join("outside"),
    );
    for d in [&rw, &ro, &outside] {
        std::fs::create_dir(d).unwrap();
    }
    std::fs::write(outside.join("secret"), "secret").unwrap();
    std::fs::write(ro.join("r.txt"), "read me").unwrap();
    let table = ZoneTable {
        mode: SandboxMode::Direct,
        zones: vec![zone("work", &rw, Access::Rw), zone("data", &ro, Access::Ro)],
        source: None,
    };
    let core = core_of(&table);
    Fixture {
        _tmp: tmp,
        outside,
        rw,
        core,
    }
}

const WORK: u64 = 2;
const ROOT_CALLER: Caller = Caller {
    uid: 0,
    gid: 0,
    pid: 0,
};
const DATA: u64 = 3;

fn refusal(e: FsError) -> Refusal {
    match e {
        FsError::Refused(r) => r,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn zones_are_the_root_entries() {
    let f = fixture();
    assert_eq!(f.core.lookup(ROOT, OsStr::new("work")).unwrap().ino.0, WORK);
    assert_eq!(f.core.lookup(ROOT, OsStr::new("data")).unwrap().ino.0, DATA);
    assert_eq!(
        f.core.lookup(ROOT, OsStr::new("nope")).unwrap_err().errno(),
        libc::ENOENT
    );
    let fh = f.core.opendir(ROOT).unwrap();
    let names: Vec<_> = f
        .core
        .readdir(fh, 0)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, vec![".", "..", "work", "data"]);
}

#[test]
fn nothing_leaks_on_forget() {
    let f = fixture();
    let base = f.core.node_count();
    for i in 0..50 {
        std::fs::write(f.rw.join(format!("f{i}")), "x").unwrap();
    }
    let mut inos = Vec::new();
    for i in 0..50 {
        let name = format!("f{i}");
        inos.push(f.core.lookup(WORK, OsStr::new(&name)).unwrap().ino.0);
        // a second lookup of the same name is the same node, counted twice
        assert_eq!(
            f.core.lookup(WORK, OsStr::new(&name)).unwrap().ino.0,
            *inos.last().unwrap()
        );
    }
    assert_eq!(f.core.node_count(), base + 50);
    for ino in &inos {
        f.core.forget(*ino, 1);
    }
    assert_eq!(
        f.core.node_count(),
        base + 50,
        "one lookup each is still held"
    );
    for ino in &inos {
        f.core.forget(*ino, 1);
    }
    assert_eq!(f.core.node_count(), base);
    // zone dirs and the root are never forgotten
    f.core.forget(WORK, 100);
    f.core.forget(ROOT, 100);
    assert_eq!(f.core.node_count(), base);
    // handles are released
    let fh = f.core.opendir(WORK).unwrap();
    f.core.releasedir(fh);
    assert_eq!(f.core.open_handles(), 0);
}

#[test]
fn hard_links_share_a_node_and_renames_keep_it() {
    let f = fixture();
    let (attr, fh) = f
        .core
        .create(&ROOT_CALLER, WORK, OsStr::new("a"), 0o644, libc::O_RDWR)
        .unwrap();
    let linked = f
        .core
        .link(&ROOT_CALLER, attr.ino.0, WORK, OsStr::new("b"))
        .unwrap();
    assert_eq!(linked.ino, attr.ino);
    assert_eq!(linked.nlink, 2);
    f.core
        .rename(
            &ROOT_CALLER,
            WORK,
            OsStr::new("a"),
            WORK,
            OsStr::new("c"),
            0,
        )
        .unwrap();
    assert_eq!(f.core.lookup(WORK, OsStr::new("c")).unwrap().ino, attr.ino);
    // the open handle still writes into the renamed file
    assert_eq!(f.core.write(fh, 0, b"hello").unwrap(), 5);
    assert_eq!(std::fs::read(f.rw.join("c")).unwrap(), b"hello");
    f.core.release(fh);
}

#[test]
fn root_level_changes_are_refused() {
    let f = fixture();
    assert_eq!(
        refusal(f.core.check_new(ROOT, OsStr::new("z"), true).unwrap_err()),
        Refusal::RootLevel
    );
    assert_eq!(
        refusal(f.core.check_remove(ROOT, OsStr::new("work")).unwrap_err()),
        Refusal::RootLevel
    );
    let e = f
        .core
        .check_rename(ROOT, OsStr::new("work"), ROOT, OsStr::new("w2"), 0)
        .unwrap_err();
    assert_eq!(refusal(e), Refusal::RootLevel);
    let e = f
        .core
        .check_setattr(
            ROOT,
            &SetAttr {
                mode: Some(0o777),
                ..SetAttr::default()
            },
        )
        .unwrap_err();
    assert_eq!(refusal(e), Refusal::RootLevel);
    // even if a caller skipped the check, the action itself refuses
    assert_eq!(
        refusal(
            f.core
                .mkdir(&ROOT_CALLER, ROOT, OsStr::new("z"), 0o755)
                .unwrap_err()
        ),
        Refusal::RootLevel
    );
}

#[test]
fn ro_zone_and_cross_zone() {
    let f = fixture();
    let r = f.core.lookup(DATA, OsStr::new("r.txt")).unwrap().ino.0;
    assert_eq!(
        refusal(f.core.check_open(r, libc::O_WRONLY).unwrap_err()),
        Refusal::ReadOnly
    );
    assert!(matches!(
        f.core.check_open(r, libc::O_RDONLY).unwrap(),
        Gate::Go
    ));
    assert_eq!(
        refusal(f.core.check_link(r, WORK, OsStr::new("l")).unwrap_err()),
        Refusal::CrossZone
    );
    let e = f
        .core
        .check_rename(DATA, OsStr::new("r.txt"), WORK, OsStr::new("r"), 0)
        .unwrap_err();
    assert_eq!(refusal(e), Refusal::CrossZone);
    assert_eq!(
        refusal(
            f.core
                .link(&ROOT_CALLER, r, WORK, OsStr::new("l"))
                .unwrap_err()
        ),
        Refusal::CrossZone
    );
    assert!(!f.rw.join("l").exists());
}

#[test]
fn symlinks_in_a_zone_are_never_followed_by_the_daemon() {
    let f = fixture();
    symlink(f.outside.join("secret"), f.rw.join("abs")).unwrap();
    symlink("../outside/secret", f.rw.join("rel")).unwrap();
    symlink(&f.outside, f.rw.join("dirlink")).unwrap();
    for name in ["abs", "rel"] {
        let attr = f.core.lookup(WORK, OsStr::new(name)).unwrap();
        assert_eq!(attr.kind, fuser::FileType::Symlink);
        // opening the link node itself never reaches the target
        let e = f
            .core
            .open(&ROOT_CALLER, attr.ino.0, libc::O_RDONLY)
            .unwrap_err();
        assert_eq!(e.errno(), libc::ELOOP, "{name}");
        let e = f
            .core
            .open(&ROOT_CALLER, attr.ino.0, libc::O_WRONLY | libc::O_TRUNC)
            .unwrap_err();
        assert_eq!(e.errno(), libc::ELOOP, "{name}");
        // chmod/truncate through the link must not touch the target: each
        // is refused on the link itself.
        let target_mode = || {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(f.outside.join("secret"))
                .unwrap()
                .permissions()
                .mode()
        };
        let before = target_mode();
        let chmod = f.core.setattr(
            &ROOT_CALLER,
            attr.ino.0,
            &SetAttr {
                mode: Some(0o777),
                ..SetAttr::default()
            },
        );
        let truncate = f.core.setattr(
            &ROOT_CALLER,
            attr.ino.0,
            &SetAttr {
                size: Some(0),
                ..SetAttr::default()
            },
        );
        // As lchmod on the host: a symlink's mode can't be changed.
        assert_eq!(
            chmod.map(|_| ()).map_err(|e| e.errno()),
            Err(libc::EOPNOTSUPP),
            "{name}: chmod of the link"
        );
        // Reopening the link node for writing stops at the link itself.
        assert_eq!(
            truncate.map(|_| ()).map_err(|e| e.errno()),
            Err(libc::ELOOP),
            "{name}: truncate of the link"
        );
        assert_eq!(target_mode(), before, "{name}: the target's mode");
    }
    assert_eq!(
        std::fs::read_to_string(f.outside.join("secret")).unwrap(),
        "secret"
    );
    let dl = f.core.lookup(WORK, OsStr::new("dirlink")).unwrap();
    // a symlinked directory can't be walked into by the daemon
    assert_eq!(
        f.core
            .lookup(dl.ino.0, OsStr::new("secret"))
            .unwrap_err()
            .errno(),
        libc::ENOTDIR
    );
    assert!(
        f.core
            .create(
                &ROOT_CALLER,
                dl.ino.0,
                OsStr::new("planted"),
                0o644,
                libc::O_WRONLY
            )
            .is_err()
    );
    assert!(
        f.core
            .mkdir(&ROOT_CALLER, dl.ino.0, OsStr::new("planted"), 0o755)
            .is_err()
    );
    assert!(!f.outside.join("planted").exists());
}

#[test]
fn dot_dot_and_slashes_are_not_names() {
    let f = fixture();
    for bad in ["..", ".", "a/b", "../outside", ""] {
        assert!(f.core.lookup(WORK, OsStr::new(bad)).is_err(), "{bad:?}");
        assert!(
            f.core
                .mkdir(&ROOT_CALLER, WORK, OsStr::new(bad), 0o755)
                .is_err(),
            "{bad:?}"
        );
    }
    assert!(!f.outside.join("b").exists());
}

#[test]
fn an_unlinked_open_file_stays_reachable_through_its_handle() {
    let f = fixture();
    let (attr, fh) = f
        .core
        .create(&ROOT_CALLER, WORK, OsStr::new("gone"), 0o644, libc::O_RDWR)
        .unwrap();
    f.core.write(fh, 0, b"still here").unwrap();
    f.core
        .unlink(&ROOT_CALLER, WORK, OsStr::new("gone"))
        .unwrap();
    // Push the node's fd out of the bounded cache with many other lookups.
    for i in 0..2100 {
        let name = format!("f{i}");
        std::fs::write(f.rw.join(&name), "").unwrap();
        let a = f.core.lookup(WORK, OsStr::new(&name)).unwrap();
        f.core.forget(a.ino.0, 1);
    }
    let got = f.core.getattr(attr.ino.0, Some(fh)).unwrap();
    assert_eq!(got.size, 10);
    assert_eq!(got.nlink, 0);
    let set = SetAttr {
        size: Some(5),
        mode: Some(0o600),
        fh: Some(fh),
        ..SetAttr::default()
    };
    let got = f.core.setattr(&ROOT_CALLER, attr.ino.0, &set).unwrap();
    assert_eq!((got.size, got.perm), (5, 0o600));
    assert_eq!(f.core.read(fh, 0, 100).unwrap(), b"still");
    f.core.release(fh);
}

#[test]
fn a_panicking_callback_does_not_unwind_into_the_fuse_thread() {
    let mut after = false;
    super::guarded("test", || panic!("boom"));
    super::guarded("test", || after = true);
    assert!(after, "the thread serves the next request");
}

#[test]
fn refusals_are_kept_explained_and_bounded() {
    let f = fixture();
    let c = &f.core;
    assert!(c.recent_refusals().is_empty());
    let e = c.check_new(DATA, OsStr::new("new.txt"), false).unwrap_err();
    assert_eq!(refusal(e), Refusal::ReadOnly);
    let recent = c.recent_refusals();
    assert_eq!(recent.len(), 1);
    let r = &recent[0];
    assert_eq!(r.path, "/data/new.txt");
    assert_eq!(r.errno, "EROFS");
    assert_eq!(r.reason, "/data is read-only");
    assert_eq!(
        r.message,
        "Cannot create '/data/new.txt': /data is read-only. Writable: /work."
    );
    for i in 0..(crate::fs::core::RECENT_REFUSALS + 5) {
        let name = format!("n{i}");
        c.check_new(ROOT, OsStr::new(&name), true).unwrap_err();
    }
    let recent = c.recent_refusals();
    assert_eq!(recent.len(), crate::fs::core::RECENT_REFUSALS);
    let last = recent.last().unwrap();
    assert_eq!(
        last.path,
        format!("/n{}", crate::fs::core::RECENT_REFUSALS + 4)
    );
    assert_eq!(last.errno, "EACCES");
    // A denied approval, as the broker's caller reports it.
    let e = c.denied(&[crate::policy::AskItem {
        class: crate::policy::Class::Delete,
        zone: "work".into(),
        path: "a/b".into(),
    }]);
    assert_eq!(refusal(e), Refusal::Denied);
    let last = c.recent_refusals().pop().unwrap();
    assert_eq!(last.path, "/work/a/b");
    assert!(
        last.message
            .starts_with("Cannot delete '/work/a/b': approval was asked for and denied"),
        "{}",
        last.message
    );
}

#[test]
fn sensitive_roots_are_neither_looked_up_nor_listed() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    for d in [".ssh", ".config/gh", ".config/other"] {
        std::fs::create_dir_all(home.join(d)).unwrap();
    }
    std::fs::write(home.join(".ssh/id_rsa"), "key").unwrap();
    let mut z = zone("home", &home, Access::Rw);
    z.policy.hidden = vec![".ssh".into(), ".config/gh".into()];
    let table = ZoneTable {
        mode: SandboxMode::Direct,
        zones: vec![z],
        source: None,
    };
    let c = core_of(&table);
    let home_ino = 2;
    assert_eq!(
        refusal(c.lookup(home_ino, OsStr::new(".ssh")).unwrap_err()),
        Refusal::Sensitive
    );
    let cfg = c.lookup(home_ino, OsStr::new(".config")).unwrap().ino.0;
    assert_eq!(
        refusal(c.lookup(cfg, OsStr::new("gh")).unwrap_err()),
        Refusal::Sensitive
    );
    let listed = |ino: u64| -> Vec<String> {
        let fh = c.opendir(ino).unwrap();
        let names = c
            .readdir(fh, 0)
            .unwrap()
            .into_iter()
            .map(|e| e.name.to_string_lossy().into_owned())
            .collect();
        c.releasedir(fh);
        names
    };
    assert_eq!(listed(home_ino), [".", "..", ".config"]);
    assert_eq!(listed(cfg), [".", "..", "other"]);
    assert_eq!(
        refusal(c.check_new(home_ino, OsStr::new(".ssh"), true).unwrap_err()),
        Refusal::Sensitive
    );
    assert_eq!(
        c.check_remove(cfg, OsStr::new("gh")).unwrap_err(),
        FsError::enoent()
    );
    assert_eq!(
        refusal(
            c.check_rename(
                home_ino,
                OsStr::new(".config"),
                home_ino,
                OsStr::new("c"),
                0
            )
            .unwrap_err()
        ),
        Refusal::SensitiveInside
    );
    let recent = c.recent_refusals();
    assert!(
        recent[0].message.contains("/home/.ssh holds credentials"),
        "{recent:?}"
    );
    assert_eq!(recent[0].errno, "ENOENT");
}

#[test]
fn device_nodes_are_refused_explained_before_any_approval() {
    let f = fixture();
    let e = f
        .core
        .check_mknod(WORK, OsStr::new("null"), libc::S_IFCHR | 0o644)
        .unwrap_err();
    assert_eq!(refusal(e), Refusal::Device);
    assert_eq!(Refusal::Device.errno(), libc::EPERM);
    let last = f.core.recent_refusals().pop().unwrap();
    assert_eq!(last.errno, "EPERM");
    assert!(last.message.contains("device nodes"), "{}", last.message);
    // A FIFO is an ordinary new name.
    assert!(
        f.core
            .check_mknod(WORK, OsStr::new("fifo"), libc::S_IFIFO | 0o644)
            .is_ok()
    );
    // In a ro zone, EROFS answers first.
    let e = f
        .core
        .check_mknod(DATA, OsStr::new("null"), libc::S_IFCHR | 0o644)
        .unwrap_err();
    assert_eq!(refusal(e), Refusal::ReadOnly);
}

/// Which opens get a passthrough backing id: not a file first opened
/// read-only while small (it reads through the page cache for its life),
/// but a big one, or one first opened for writing; the choice sticks.
#[test]
fn small_files_first_read_go_through_the_page_cache() {
    use crate::fs::core::{CACHED_READ_BYTES, IoMode};
    let f = fixture();
    f.core.set_io_mode(IoMode::Passthrough);
    std::fs::write(f.rw.join("small"), "x").unwrap();
    let big = std::fs::File::create(f.rw.join("big")).unwrap();
    big.set_len(CACHED_READ_BYTES).unwrap();
    std::fs::write(f.rw.join("written"), "x").unwrap();
    // Counts registrations; refuses them (a real id needs the kernel).
    let asked = std::cell::Cell::new(0);
    let open = |name: &str, flags: i32| {
        let ino = f.core.lookup(WORK, OsStr::new(name)).unwrap().ino.0;
        let fh = f.core.open(&ROOT_CALLER, ino, flags).unwrap();
        let before = asked.get();
        let id = f.core.passthrough_id(ino, fh, |_| {
            asked.set(asked.get() + 1);
            Err(std::io::Error::from_raw_os_error(libc::EPERM))
        });
        f.core.release(fh);
        assert!(id.is_none());
        asked.get() > before
    };
    assert!(
        !open("small", libc::O_RDONLY),
        "a small file read: page cache"
    );
    assert!(
        !open("small", libc::O_RDWR),
        "the choice sticks for the node"
    );
    assert!(open("big", libc::O_RDONLY), "a big file read: passthrough");
    assert!(
        open("written", libc::O_WRONLY),
        "a file written: passthrough"
    );
}

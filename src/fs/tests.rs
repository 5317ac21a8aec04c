//! The core driven without the kernel: node bookkeeping and escape attempts
//! that are easier to pin down here than through a mount.

use std::ffi::OsStr;
use std::os::fd::BorrowedFd;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use crate::approval::{AskRequest, Broker, Continuation, DenyAll, Verdict};
use crate::config::{Access, Approval, ApprovalPolicy, SandboxMode, Zone, ZonePolicy, ZoneTable};
use crate::error::{FsError, FsResult, Refusal};
use crate::fs::core::{Core, CoreOptions, Ctx, Entry, FileOpen, Opening, Respond, SetAttr};
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

/// A core over `table` as root, daemon I/O, 1 s TTLs; every `ask` is
/// denied at once.
fn core_of(table: &ZoneTable) -> Arc<Core> {
    core_with(table, Arc::new(DenyAll))
}

fn core_with(table: &ZoneTable, broker: Arc<dyn Broker>) -> Arc<Core> {
    let opts = CoreOptions {
        ttl: Duration::from_secs(1),
        ttl_ro: Duration::from_secs(1),
        passthrough: false,
        owner_uid: 0,
        owner_gid: 0,
        admission: Default::default(),
    };
    Arc::new(Core::new(table, opts, broker).unwrap())
}

/// The answer of an operation that answers through a [`Respond`].
fn answer<T: Send + 'static>(op: impl FnOnce(Box<dyn FnOnce(FsResult<T>) + Send>)) -> FsResult<T> {
    let (tx, rx) = mpsc::channel();
    op(Box::new(move |r| tx.send(r).unwrap()));
    rx.recv_timeout(Duration::from_secs(10))
        .expect("every operation answers")
}

/// A lookup that finds something (a negative entry is ENOENT here).
fn found(core: &Core, parent: u64, name: &str) -> FsResult<fuser::FileAttr> {
    let e = core.lookup(&CTX, parent, OsStr::new(name))?;
    match e.attr.ino.0 {
        0 => Err(FsError::enoent()),
        _ => Ok(e.attr),
    }
}

/// An open's reply in tests: counts passthrough registrations (and refuses
/// them: a real id needs the kernel).
struct Reply<T> {
    registered: Arc<AtomicUsize>,
    tx: mpsc::Sender<FsResult<T>>,
}

impl<T: Send + 'static> Respond<T> for Reply<T> {
    fn respond(self, r: FsResult<T>) {
        self.tx.send(r).unwrap();
    }
}

impl<T: Send + 'static> Opening<T> for Reply<T> {
    fn register(&self, _fd: BorrowedFd<'_>) -> std::io::Result<fuser::BackingId> {
        self.registered.fetch_add(1, Ordering::Relaxed);
        Err(std::io::Error::from_raw_os_error(libc::EPERM))
    }
}

/// Run an open or create as root; its answer, and whether the core asked
/// to register the file for passthrough.
fn opening<T: Send + 'static>(op: impl FnOnce(Reply<T>)) -> (FsResult<T>, bool) {
    let (tx, rx) = mpsc::channel();
    let registered = Arc::new(AtomicUsize::new(0));
    op(Reply {
        registered: registered.clone(),
        tx,
    });
    let r = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    (r, registered.load(Ordering::Relaxed) > 0)
}

/// Open node `ino` as root; the handle, and whether the core asked to
/// register it for passthrough.
fn open(core: &Arc<Core>, ino: u64, flags: i32) -> FsResult<(u64, bool)> {
    let (r, registered) = opening(|reply| core.open(CTX, ino, flags, reply));
    let opened: FileOpen = r?;
    assert!(opened.backing.is_none());
    Ok((opened.fh, registered))
}

/// A broker that allows every request, and counts them.
#[derive(Default)]
struct AllowAll(AtomicUsize);

impl Broker for AllowAll {
    fn ask(&self, _req: AskRequest, then: Continuation) {
        self.0.fetch_add(1, Ordering::Relaxed);
        then(Verdict::Allow)
    }
}

struct Fixture {
    _tmp: tempfile::TempDir,
    outside: std::path::PathBuf,
    rw: std::path::PathBuf,
    core: Arc<Core>,
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
const CTX: Ctx = Ctx {
    op: "test",
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

/// `op` as root, answered.
fn mkdir(c: &Arc<Core>, parent: u64, name: &str) -> FsResult<Entry> {
    answer(|r| c.mkdir(CTX, parent, OsStr::new(name), 0o755, r))
}

fn create(c: &Arc<Core>, parent: u64, name: &str, flags: i32) -> FsResult<(fuser::FileAttr, u64)> {
    let (r, _) = opening(|reply| c.create(CTX, parent, OsStr::new(name), 0o644, flags, reply));
    r.map(|created: crate::fs::core::Created| (created.entry.attr, created.open.fh))
}

fn rename(c: &Arc<Core>, p: u64, name: &str, np: u64, newname: &str) -> FsResult<()> {
    answer(|r| c.rename(CTX, p, OsStr::new(name), np, OsStr::new(newname), 0, r))
}

fn link(c: &Arc<Core>, ino: u64, np: u64, newname: &str) -> FsResult<Entry> {
    answer(|r| c.link(CTX, ino, np, OsStr::new(newname), r))
}

fn remove(c: &Arc<Core>, parent: u64, name: &str, dir: bool) -> FsResult<()> {
    answer(|r| c.remove(CTX, parent, OsStr::new(name), dir, r))
}

fn setattr(c: &Arc<Core>, ino: u64, a: SetAttr) -> FsResult<Entry> {
    answer(|r| c.setattr(CTX, ino, a, r))
}

fn mknod(c: &Arc<Core>, parent: u64, name: &str, mode: u32) -> FsResult<Entry> {
    answer(|r| c.mknod(CTX, parent, OsStr::new(name), mode, r))
}

#[test]
fn zones_are_the_root_entries() {
    let f = fixture();
    assert_eq!(found(&f.core, ROOT, "work").unwrap().ino.0, WORK);
    assert_eq!(found(&f.core, ROOT, "data").unwrap().ino.0, DATA);
    // A missing name is a negative entry, cached for the root's TTL.
    let miss = f.core.lookup(&CTX, ROOT, OsStr::new("nope")).unwrap();
    assert_eq!(miss.attr.ino.0, 0);
    let fh = f.core.opendir(&CTX, ROOT).unwrap();
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
        inos.push(found(&f.core, WORK, &name).unwrap().ino.0);
        // a second lookup of the same name is the same node, counted twice
        assert_eq!(
            found(&f.core, WORK, &name).unwrap().ino.0,
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
    let fh = f.core.opendir(&CTX, WORK).unwrap();
    f.core.releasedir(fh);
    assert_eq!(f.core.open_handles(), 0);
}

#[test]
fn hard_links_share_a_node_and_renames_keep_it() {
    let f = fixture();
    let (attr, fh) = create(&f.core, WORK, "a", libc::O_RDWR).unwrap();
    let linked = link(&f.core, attr.ino.0, WORK, "b").unwrap().attr;
    assert_eq!(linked.ino, attr.ino);
    assert_eq!(linked.nlink, 2);
    rename(&f.core, WORK, "a", WORK, "c").unwrap();
    assert_eq!(found(&f.core, WORK, "c").unwrap().ino, attr.ino);
    // the open handle still writes into the renamed file
    assert_eq!(f.core.write(fh, 0, b"hello").unwrap(), 5);
    assert_eq!(std::fs::read(f.rw.join("c")).unwrap(), b"hello");
    f.core.release(fh);
}

#[test]
fn root_level_changes_are_refused() {
    let f = fixture();
    assert_eq!(
        refusal(mkdir(&f.core, ROOT, "z").unwrap_err()),
        Refusal::RootLevel
    );
    assert_eq!(
        refusal(remove(&f.core, ROOT, "work", true).unwrap_err()),
        Refusal::RootLevel
    );
    let e = rename(&f.core, ROOT, "work", ROOT, "w2").unwrap_err();
    assert_eq!(refusal(e), Refusal::RootLevel);
    let chmod = SetAttr {
        mode: Some(0o777),
        ..SetAttr::default()
    };
    assert_eq!(
        refusal(setattr(&f.core, ROOT, chmod).unwrap_err()),
        Refusal::RootLevel
    );
    // even if the gate let it through, the action itself refuses
    let dir = f.core.node(ROOT).unwrap();
    let made = f
        .core
        .make_entry(&CTX.caller(), &dir, OsStr::new("z"), |_| Ok(()));
    assert_eq!(refusal(made.unwrap_err()), Refusal::RootLevel);
    assert_eq!(f.core.recent_refusals().len(), 4, "each refusal kept once");
}

#[test]
fn ro_zone_and_cross_zone() {
    let f = fixture();
    let r = found(&f.core, DATA, "r.txt").unwrap().ino.0;
    assert_eq!(
        refusal(open(&f.core, r, libc::O_WRONLY).unwrap_err()),
        Refusal::ReadOnly
    );
    let (fh, _) = open(&f.core, r, libc::O_RDONLY).unwrap();
    assert_eq!(f.core.read(fh, 0, 100).unwrap(), b"read me");
    f.core.release(fh);
    assert_eq!(
        refusal(link(&f.core, r, WORK, "l").unwrap_err()),
        Refusal::CrossZone
    );
    let e = rename(&f.core, DATA, "r.txt", WORK, "r").unwrap_err();
    assert_eq!(refusal(e), Refusal::CrossZone);
    assert!(!f.rw.join("l").exists());
    assert!(!f.rw.join("r").exists());
}

#[test]
fn symlinks_in_a_zone_are_never_followed_by_the_daemon() {
    let f = fixture();
    symlink(f.outside.join("secret"), f.rw.join("abs")).unwrap();
    symlink("../outside/secret", f.rw.join("rel")).unwrap();
    symlink(&f.outside, f.rw.join("dirlink")).unwrap();
    for name in ["abs", "rel"] {
        let attr = found(&f.core, WORK, name).unwrap();
        assert_eq!(attr.kind, fuser::FileType::Symlink);
        // opening the link node itself never reaches the target
        let e = open(&f.core, attr.ino.0, libc::O_RDONLY).unwrap_err();
        assert_eq!(e.errno(), libc::ELOOP, "{name}");
        let e = open(&f.core, attr.ino.0, libc::O_WRONLY | libc::O_TRUNC).unwrap_err();
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
        let chmod = SetAttr {
            mode: Some(0o777),
            ..SetAttr::default()
        };
        let chmod = setattr(&f.core, attr.ino.0, chmod);
        let truncate = SetAttr {
            size: Some(0),
            ..SetAttr::default()
        };
        let truncate = setattr(&f.core, attr.ino.0, truncate);
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
    let dl = found(&f.core, WORK, "dirlink").unwrap();
    // a symlinked directory can't be walked into by the daemon
    let e = f
        .core
        .lookup(&CTX, dl.ino.0, OsStr::new("secret"))
        .unwrap_err();
    assert_eq!(e.errno(), libc::ENOTDIR);
    let e = create(&f.core, dl.ino.0, "planted", libc::O_WRONLY).unwrap_err();
    assert_eq!(e.errno(), libc::ENOTDIR);
    assert_eq!(
        mkdir(&f.core, dl.ino.0, "planted").unwrap_err().errno(),
        libc::ENOTDIR
    );
    assert!(!f.outside.join("planted").exists());
}

#[test]
fn dot_dot_and_slashes_are_not_names() {
    let f = fixture();
    for bad in ["..", ".", "a/b", "../outside", ""] {
        let looked = f.core.lookup(&CTX, WORK, OsStr::new(bad));
        assert!(looked.is_err(), "{bad:?}: {looked:?}");
        assert!(mkdir(&f.core, WORK, bad).is_err(), "{bad:?}");
    }
    assert!(!f.outside.join("b").exists());
}

#[test]
fn an_unlinked_open_file_stays_reachable_through_its_handle() {
    let f = fixture();
    let (attr, fh) = create(&f.core, WORK, "gone", libc::O_RDWR).unwrap();
    f.core.write(fh, 0, b"still here").unwrap();
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
    assert_eq!(f.core.read(fh, 0, 100).unwrap(), b"still");
    f.core.release(fh);
}

#[test]
fn a_panicking_callback_does_not_unwind_into_the_fuse_thread() {
    let mut after = false;
    crate::fs::adapter::guarded("test", || panic!("boom"));
    crate::fs::adapter::guarded("test", || after = true);
    assert!(after, "the thread serves the next request");
}

#[test]
fn refusals_are_kept_explained_and_bounded() {
    let f = fixture();
    let c = &f.core;
    assert!(c.recent_refusals().is_empty());
    let e = create(c, DATA, "new.txt", libc::O_WRONLY).unwrap_err();
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
        mkdir(c, ROOT, &format!("n{i}")).unwrap_err();
    }
    let recent = c.recent_refusals();
    assert_eq!(recent.len(), crate::fs::core::RECENT_REFUSALS);
    let last = recent.last().unwrap();
    assert_eq!(
        last.path,
        format!("/n{}", crate::fs::core::RECENT_REFUSALS + 4)
    );
    assert_eq!(last.errno, "EACCES");
}

/// An `ask` goes to the broker once per operation; a denial is EACCES,
/// kept explained, and nothing is done; an allow acts.
#[test]
fn asks_go_to_the_broker_and_its_verdict_is_final() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("w");
    std::fs::create_dir_all(dir.join("a")).unwrap();
    std::fs::write(dir.join("a/b"), "x").unwrap();
    let mut z = zone("work", &dir, Access::Rw);
    z.policy.approval = ApprovalPolicy {
        write: Approval::Ask,
        delete: Approval::Ask,
    };
    let table = ZoneTable {
        mode: SandboxMode::Direct,
        zones: vec![z],
        source: None,
    };
    let c = core_of(&table);
    let a = found(&c, WORK, "a").unwrap().ino.0;
    let e = remove(&c, a, "b", false).unwrap_err();
    assert_eq!(refusal(e), Refusal::Denied);
    assert!(dir.join("a/b").exists(), "nothing done on a denial");
    let last = c.recent_refusals().pop().unwrap();
    assert_eq!(last.path, "/work/a/b");
    assert!(
        last.message
            .starts_with("Cannot delete '/work/a/b': approval was asked for and denied"),
        "{}",
        last.message
    );
    let broker = Arc::new(AllowAll::default());
    let c = core_with(&table, broker.clone());
    let a = found(&c, WORK, "a").unwrap().ino.0;
    remove(&c, a, "b", false).unwrap();
    assert!(!dir.join("a/b").exists(), "allowed: done");
    mkdir(&c, a, "d").unwrap();
    assert!(dir.join("a/d").is_dir());
    assert_eq!(broker.0.load(Ordering::Relaxed), 2, "one ask per operation");
    assert!(c.recent_refusals().is_empty());
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
    assert_eq!(found(&c, home_ino, ".ssh").unwrap_err(), FsError::enoent());
    let cfg = found(&c, home_ino, ".config").unwrap().ino.0;
    assert_eq!(found(&c, cfg, "gh").unwrap_err(), FsError::enoent());
    let kept = c.recent_refusals();
    assert_eq!(kept.len(), 2, "{kept:?}");
    assert!(kept.iter().all(|r| r.refusal == Refusal::Sensitive));
    let listed = |ino: u64| -> Vec<String> {
        let fh = c.opendir(&CTX, ino).unwrap();
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
        refusal(mkdir(&c, home_ino, ".ssh").unwrap_err()),
        Refusal::Sensitive
    );
    assert_eq!(remove(&c, cfg, "gh", true).unwrap_err(), FsError::enoent());
    let e = rename(&c, home_ino, ".config", home_ino, "c").unwrap_err();
    assert_eq!(refusal(e), Refusal::SensitiveInside);
    assert!(home.join(".config/gh").is_dir() && home.join(".ssh/id_rsa").exists());
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
    let e = mknod(&f.core, WORK, "null", libc::S_IFCHR | 0o644).unwrap_err();
    assert_eq!(refusal(e), Refusal::Device);
    assert_eq!(Refusal::Device.errno(), libc::EPERM);
    assert!(!f.rw.join("null").exists());
    let last = f.core.recent_refusals().pop().unwrap();
    assert_eq!(last.errno, "EPERM");
    assert!(last.message.contains("device nodes"), "{}", last.message);
    // A FIFO is an ordinary new name.
    let fifo = mknod(&f.core, WORK, "fifo", libc::S_IFIFO | 0o644).unwrap();
    assert_eq!(fifo.attr.kind, fuser::FileType::NamedPipe);
    // In a ro zone, EROFS answers first.
    let e = mknod(&f.core, DATA, "null", libc::S_IFCHR | 0o644).unwrap_err();
    assert_eq!(refusal(e), Refusal::ReadOnly);
    // In an `ask` zone, nobody is asked about a device node.
    let broker = Arc::new(AllowAll::default());
    let mut z = zone("work", &f.rw, Access::Rw);
    z.policy.approval.write = Approval::Ask;
    let table = ZoneTable {
        mode: SandboxMode::Direct,
        zones: vec![z],
        source: None,
    };
    let c = core_with(&table, broker.clone());
    let e = mknod(&c, WORK, "null", libc::S_IFBLK | 0o644).unwrap_err();
    assert_eq!(refusal(e), Refusal::Device);
    assert_eq!(broker.0.load(Ordering::Relaxed), 0);
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

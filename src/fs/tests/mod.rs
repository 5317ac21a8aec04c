//! The core driven without the kernel: node bookkeeping and escape attempts
//! that are easier to pin down here than through a mount. This file holds
//! the fixture and the helpers that drive the core (`answer`, `found`,
//! `open`, `AllowAll`, one helper per operation); the tests are split by
//! topic.

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

mod changes;
mod files;
mod held;
mod names;
mod nodes;
mod refusals;
mod reopen;

thread_local! {
    /// Cores made on this thread reopen every node by name (see
    /// [`Core::without_handles`]): `reopen` runs the other tests so.
    static BY_NAME: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn zone(name: &str, dir: &Path, access: Access) -> Zone {
    Zone {
        name: name.into(),
        backing: dir.to_path_buf(),
        policy: ZonePolicy {
            access,
            approval: ApprovalPolicy {
                write: Approval::PreApproved,
                delete: Approval::PreApproved,
                read: Approval::PreApproved,
            },
            suffixes: None,
            max_file_bytes: None,
            protect: vec![],
            hidden: vec![],
            hide: vec![],
            ask_read: vec![],
            staged: false,
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
        writeback_cache: false,
        owner_uid: 0,
        owner_gid: 0,
        admission: Default::default(),
        refusal_log: None,
        kernel_opens: Err("tests of the core".into()),
    };
    let core = match BY_NAME.get() {
        true => Core::without_handles(table, opts, broker),
        false => Core::new(table, opts, broker),
    };
    Arc::new(core.unwrap())
}

/// The answer of an operation that answers through a [`Respond`].
fn answer<T: Send + 'static>(op: impl FnOnce(Box<dyn FnOnce(FsResult<T>) + Send>)) -> FsResult<T> {
    let (tx, rx) = mpsc::channel();
    op(Box::new(move |r| tx.send(r).unwrap()));
    rx.recv_timeout(Duration::from_secs(10))
        .expect("every operation answers")
}

/// A lookup that finds something (a negative entry is ENOENT here).
fn found(core: &Arc<Core>, parent: u64, name: &str) -> FsResult<crate::fuse::FileAttr> {
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
    fn register(&self, _fd: BorrowedFd<'_>) -> std::io::Result<crate::fuse::BackingId> {
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
        max_checkpoints: None,
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
    unique: 0,
    may_wait: true,
};
const DATA: u64 = 3;

fn refusal(e: FsError) -> Refusal {
    match e {
        FsError::Refused(r) => r,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// `op` as root, answered.
/// Up to `size` bytes at `offset` of open file `fh`, as a READ's reply
/// reads them.
fn read(c: &Core, fh: u64, offset: u64, size: usize) -> FsResult<Vec<u8>> {
    let h = c.read_handle(fh)?;
    let mut buf = vec![0u8; size];
    let n = crate::backing::pread(h.fd()?, &mut buf, offset)?;
    buf.truncate(n);
    Ok(buf)
}

fn mkdir(c: &Arc<Core>, parent: u64, name: &str) -> FsResult<Entry> {
    answer(|r| c.mkdir(CTX, parent, OsStr::new(name), 0o755, r))
}

fn create(
    c: &Arc<Core>,
    parent: u64,
    name: &str,
    flags: i32,
) -> FsResult<(crate::fuse::FileAttr, u64)> {
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

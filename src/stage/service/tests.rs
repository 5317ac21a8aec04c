//! The stage service against a fake live mount: what it asks of the
//! mount, in which order, and what it leaves alone (no FUSE needed; the
//! stage's layers are plain directories, its upper dir written directly).
#![allow(clippy::unwrap_used)]

use std::fs;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::{Mutex, RwLock};

use super::*;
use crate::config::{LoadOptions, load_project};
use crate::stage::report::{FileType, ZoneCommit};

/// A live mount whose answers the test sets, and which records what the
/// service asked of it.
#[derive(Default)]
struct Fake {
    still: RwLock<()>,
    open: AtomicUsize,
    writers: Mutex<Vec<u32>>,
    restaged: Mutex<Vec<usize>>,
    /// (zone, paths, whether mutations were held still at the time).
    forgot: Mutex<Vec<(usize, Vec<PathBuf>, bool)>>,
}

impl LiveMount for Fake {
    fn hold_still(&self) -> RwLockWriteGuard<'_, ()> {
        self.still.write()
    }
    fn open_for_writing(&self, _zone: usize) -> usize {
        self.open.load(Ordering::SeqCst)
    }
    fn writable_fds(&self, _zone: usize) -> Vec<(Arc<std::os::fd::OwnedFd>, Option<PathBuf>)> {
        Vec::new()
    }
    fn zone_dir(&self, _zone: usize) -> Option<Arc<std::os::fd::OwnedFd>> {
        None
    }
    fn restage(&self, zone: usize) -> io::Result<()> {
        assert!(self.still.is_locked(), "restaged while mutations ran");
        self.restaged.lock().push(zone);
        Ok(())
    }
    fn forget_cached(&self, zone: usize, paths: &[&Path]) {
        let held = self.still.is_locked();
        self.forgot
            .lock()
            .push((zone, paths.iter().map(|p| p.to_path_buf()).collect(), held));
    }
    fn stage_writers(&self) -> (Vec<AskedFrom>, Vec<NsId>) {
        let writers = self
            .writers
            .lock()
            .iter()
            .map(|p| AskedFrom::now(*p))
            .collect();
        (writers, Vec::new())
    }
    fn rw_zones(&self) -> Vec<(String, bool)> {
        vec![("work".into(), true), ("out".into(), false)]
    }
    fn plain_changes(&self, zone: &str, filter: &[PathBuf]) -> (Vec<Change>, bool) {
        assert_eq!((zone, filter), ("out", &[][..]));
        (vec![Change::plain("o".into(), Kind::Added)], true)
    }
}

/// A project with staged zone `work` (backing `<tmp>/b`, holding `f`)
/// and plain zone `out`, its stages opened in `<tmp>/stage`, and the
/// service over `fake`.
fn service(tmp: &Path, fake: &Arc<Fake>) -> StageService {
    fs::create_dir_all(tmp.join("b")).unwrap();
    fs::create_dir_all(tmp.join("o")).unwrap();
    fs::write(tmp.join("b/f"), "old\n").unwrap();
    fs::write(
        tmp.join("project.yaml"),
        "sandbox:\n  mode: direct\n  zones:\n    work: { path: ./b, mode: rw, staged: true }\n    out: { path: ./o, mode: rw }\n",
    )
    .unwrap();
    let table = load_project(
        Some(&tmp.join("project.yaml")),
        tmp,
        &LoadOptions::from_host(false),
    )
    .unwrap();
    let stages = Stages::open(&table, &tmp.join("mnt"), Some(&tmp.join("stage")))
        .unwrap()
        .unwrap();
    // What a worker's write through the overlay leaves in the upper dir.
    fs::write(tmp.join("stage/work/upper/new"), "n\n").unwrap();
    let live: Arc<dyn LiveMount> = fake.clone();
    StageService::new(
        live,
        Some(Arc::new(stages)),
        None,
        Arc::new(WorkerSide::new()),
    )
}

const SUPERVISOR: Caller = Caller { uid: 0, pid: None };

#[test]
fn changes_list_the_stage_and_the_plain_zones_report() {
    let tmp = tempfile::tempdir().unwrap();
    let fake = Arc::new(Fake::default());
    let s = service(tmp.path(), &fake);
    let r = s.changes(&[], false).unwrap();
    let zones: Vec<(&str, bool, usize, bool)> = r
        .zones
        .iter()
        .map(|z| (z.zone.as_str(), z.staged, z.changes.len(), z.incomplete))
        .collect();
    assert_eq!(zones, [("work", true, 1, false), ("out", false, 1, true)]);
    assert_eq!(r.zones[0].changes[0].path, Path::new("new"));
    assert_eq!(r.zones[0].changes[0].file_type, Some(FileType::File));
    // Only the zone asked about.
    let r = s.changes(&["/work".into()], true).unwrap();
    assert_eq!(r.zones.len(), 1);
    assert!(
        r.zones[0].changes[0]
            .diff
            .as_deref()
            .unwrap()
            .contains("+n")
    );
    assert!(s.changes(&["/nope".into()], false).is_err());
}

#[test]
fn a_zone_with_files_open_for_writing_is_left_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let fake = Arc::new(Fake::default());
    let s = service(tmp.path(), &fake);
    fake.open.store(2, Ordering::SeqCst);
    let started = Instant::now();
    let r = s.commit(&[], false, SUPERVISOR).unwrap();
    assert!(
        started.elapsed() >= CLOSE_GRACE,
        "no grace for files just closed"
    );
    assert_eq!(r.zones, [ZoneCommit::left_alone("work", 2)]);
    let r = s.discard(&[], SUPERVISOR).unwrap();
    assert_eq!(r.conflicts(), 1);
    assert!(fake.restaged.lock().is_empty() && fake.forgot.lock().is_empty());
    assert!(!tmp.path().join("b/new").exists());
    assert!(tmp.path().join("stage/work/upper/new").exists());
}

#[test]
fn a_commit_restages_while_still_and_forgets_after() {
    let tmp = tempfile::tempdir().unwrap();
    let fake = Arc::new(Fake::default());
    let s = service(tmp.path(), &fake);
    let r = s.commit(&[], false, SUPERVISOR).unwrap();
    assert_eq!(r.zones[0].applied.len(), 1, "{r:?}");
    assert_eq!(r.conflicts(), 0);
    assert_eq!(fs::read_to_string(tmp.path().join("b/new")).unwrap(), "n\n");
    assert_eq!(*fake.restaged.lock(), [0]);
    assert_eq!(
        *fake.forgot.lock(),
        [(0, vec![PathBuf::from("new")], false)],
        "the kernel is told to forget what was applied, once mutations run again"
    );
    // Nothing left: a discard drops nothing, and restages all the same.
    let r = s.discard(&[], SUPERVISOR).unwrap();
    assert!(r.zones[0].discarded.is_empty());
    assert_eq!(*fake.restaged.lock(), [0, 0]);
}

#[test]
fn the_workers_own_side_may_not_commit_or_discard() {
    let tmp = tempfile::tempdir().unwrap();
    let fake = Arc::new(Fake::default());
    let s = service(tmp.path(), &fake);
    // This process changed the stage, and asks from its own session.
    fake.writers.lock().push(std::process::id());
    let me = Caller {
        uid: rustix::process::geteuid().as_raw(),
        pid: Some(std::process::id()),
    };
    for (what, e) in [
        ("commit", s.commit(&[], false, me).unwrap_err()),
        ("discard", s.discard(&[], me).unwrap_err()),
    ] {
        // In plain words (what the writer did, not approval jargon), with
        // the fix.
        assert!(
            e.starts_with(&format!("{what} refused: this command (pid "))
                && e.contains("runs in the same terminal session as a process that wrote to the stage")
                && e.contains("run it from another terminal (a different session), or start the worker with `zonemount run`"),
            "{e}"
        );
    }
    assert!(fake.restaged.lock().is_empty());
    assert!(!tmp.path().join("b/new").exists());
}

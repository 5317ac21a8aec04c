//! Staged zones: a rw zone whose changes land in a stage (an overlay's
//! upper dir in a state directory) instead of the backing dir, until the
//! supervisor commits or discards them.
//!
//! - `dir`: the stage dir: default place (under the state dir), layout,
//!   lock, manifest.
//! - `service`: `changes`, `commit` and `discard` of a live mount's
//!   stages (through the `LiveMount` trait the filesystem core
//!   implements) and of a stage dir no mount holds; `work`: one zone's
//!   part of such a request, and the request's paths by zone.
//! - `actors`: who changed each path, kept with the stage.
//! - `report`: their answers as types, shared by the control socket, the
//!   CLI and the Rust API.
//! - `tree`: what a stage holds compared to its backing dir (the change
//!   report, diffs), and applying it to the backing dir or dropping it.
//! - `layers`: checkpoints, each a frozen upper dir under the live one;
//!   rewinding to one, merging them, a checkpoint's view.
//! - `walk`: trees of any depth walked without recursion, and paths of
//!   any length opened a part at a time (a worker makes trees as deep
//!   as it likes).
//!
//! [`Stages`] is what a mount holds: its locked stage dir and, for each
//! staged zone, the overlay whose root the filesystem uses as the zone's
//! directory (see `stage::sys::overlay`).

pub mod actors;
pub mod dir;
pub mod layers;
pub mod report;
pub mod service;
pub mod sys;
pub mod tree;
pub(crate) mod walk;
mod work;

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;

use crate::config::ZoneTable;
use crate::stage::sys::overlay::{self, Xattrs};
pub use dir::StageError;

/// One staged zone's part of the stage.
#[derive(Debug)]
pub struct ZoneStage {
    pub name: String,
    pub backing: PathBuf,
    /// `<stage dir>/<zone>`.
    pub dir: PathBuf,
    pub upper: PathBuf,
    pub work: PathBuf,
    pub xattrs: Xattrs,
    /// What each backing path was when first changed (shared by the
    /// filesystem, which notes, and commit/discard, which read and drop).
    pub fingerprints: tree::Fingerprints,
    /// Who changed each path (`actors`).
    pub actors: actors::StageActors,
    /// The backing dir, to note from.
    lower: OwnedFd,
    /// The checkpoints' ids, oldest first: the overlay's lower layers
    /// (`layers/<id>`, newest first) over the backing dir.
    pub checkpoints: Mutex<Vec<u64>>,
    /// The flattened lower the overlay uses for the layers up to this
    /// checkpoint (`layers::flat_dir`), if any.
    pub flat: Mutex<Option<u64>>,
    /// A flat being built off the request path, or built and waiting for
    /// the next checkpoint to take it over.
    pub building: Mutex<FlatBuild>,
    /// Counts the changes of the layers other than a checkpoint (merges,
    /// rewinds, commits, discards): a flat built across one is thrown
    /// away.
    pub epoch: std::sync::atomic::AtomicU64,
}

/// A zone's flattened lower in the making (see `layers::build_flat`).
#[derive(Debug, Default)]
pub enum FlatBuild {
    #[default]
    Idle,
    Running,
    /// Built in `path` (a scratch dir): the flat `base` with the layers up
    /// to `upto` laid onto it, started at `epoch`.
    Ready {
        path: PathBuf,
        base: Option<u64>,
        upto: u64,
        epoch: u64,
    },
}

impl ZoneStage {
    /// Before a change to `rel` through the mount: note what the backing
    /// dir has there, the first time.
    pub fn note(&self, rel: &Path) -> std::io::Result<()> {
        self.fingerprints.note_first(rel, || {
            let st = if rel.as_os_str().is_empty() {
                rustix::fs::fstat(&self.lower)
            } else {
                walk::stat_deep(std::os::fd::AsFd::as_fd(&self.lower), rel)
            };
            st.ok().as_ref().map(tree::Fingerprint::of)
        })
    }

    /// Whether the upper dir holds an object at `rel` (a path in the
    /// zone): the overlay then shows the upper's own object there, not a
    /// lower layer's. A whiteout (a character device 0/0: the name was
    /// removed) is none. Looked up beneath the upper dir, following no
    /// symlink, with the daemon's rights.
    pub fn in_upper(&self, rel: &Path) -> bool {
        crate::backing::stat_beneath(&self.upper, rel).is_some_and(|st| {
            let whiteout = st.st_mode & libc::S_IFMT == libc::S_IFCHR && st.st_rdev == 0;
            !whiteout
        })
    }

    /// Mount this zone's overlay; its root fd serves as the zone's dir.
    /// The overlay's root shows the upper dir's mode and owner: they are
    /// made the backing dir's first (a zone dir itself never changes
    /// through the mount).
    pub fn mount(&self) -> std::io::Result<OwnedFd> {
        let low = rustix::fs::fstat(&self.lower)?;
        let up = rustix::fs::open(
            &self.upper,
            rustix::fs::OFlags::RDONLY
                | rustix::fs::OFlags::DIRECTORY
                | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )?;
        if rustix::process::geteuid().is_root() {
            rustix::fs::fchown(
                &up,
                Some(rustix::fs::Uid::from_raw(low.st_uid)),
                Some(rustix::fs::Gid::from_raw(low.st_gid)),
            )?;
        }
        rustix::fs::fchmod(&up, rustix::fs::Mode::from_raw_mode(low.st_mode & 0o7777))?;
        let ids = self.checkpoints.lock().clone();
        let dirs = layers::live_lower(&self.dir, &ids, *self.flat.lock());
        let mut lower: Vec<&Path> = dirs.iter().map(PathBuf::as_path).collect();
        lower.push(&self.backing);
        let (fd, how) = overlay::mount(&overlay::Layers {
            lower: &lower,
            upper: Some((&self.upper, &self.work)),
        })?;
        debug_assert_eq!(how, self.xattrs);
        Ok(fd)
    }
}

/// A mount's stages: the locked stage dir, and each zone's stage by the
/// zone's index in the table (None: not staged).
#[derive(Debug)]
pub struct Stages {
    pub dir: PathBuf,
    zones: Vec<Option<ZoneStage>>,
    /// How many checkpoints a zone keeps: past it, the two oldest layers
    /// are merged.
    pub max_checkpoints: usize,
    /// Holds the stage dir's lock for the mount's life; its manifest is
    /// the checkpoints' record (changed under this lock).
    held: Mutex<dir::Held>,
}

impl Stages {
    /// The stages of `table`'s staged zones in `stage_dir` (default: see
    /// [`dir::default_for`]), locked; `None` when no zone is staged.
    pub fn open(
        table: &ZoneTable,
        mountpoint: &Path,
        stage_dir: Option<&Path>,
    ) -> Result<Option<Stages>, StageError> {
        if !table.zones.iter().any(|z| z.policy.staged) {
            return Ok(None);
        }
        let dir = match stage_dir {
            Some(d) => d.to_path_buf(),
            None => {
                dir::check_state_dir()?;
                dir::default_for(mountpoint)
            }
        };
        let mut held = dir::hold(&dir, mountpoint)?;
        let xattrs = if crate::backing::has_sys_admin() {
            Xattrs::Trusted
        } else {
            Xattrs::User
        };
        let mut zones = Vec::with_capacity(table.zones.len());
        for z in &table.zones {
            if !z.policy.staged {
                zones.push(None);
                continue;
            }
            held.zone(&z.name, &z.backing, xattrs)?;
            let zdir = held.zone_dir(&z.name)?;
            let io = |e: std::io::Error| StageError::Io {
                dir: zdir.clone(),
                source: e,
            };
            // A checkpoint, rewind or merge a crash cut short: finished
            // (a checkpoint undone) before the overlay is made.
            let actors = actors::StageActors::open(&zdir).map_err(io)?;
            let (ids, flat) = {
                let mut entry = held.manifest.zones[&z.name].clone();
                // A rewind journaled: its record of who changed what
                // rewound first (again, if it was: the same), as a rewind
                // does it.
                if let Some(to) = service::rewinding(&entry) {
                    actors.rewind(to).map_err(io)?;
                }
                if layers::needs_recovery(&zdir, &entry) {
                    layers::recover(&zdir, &mut entry, xattrs.prefix()).map_err(io)?;
                    held.manifest.zones.insert(z.name.clone(), entry.clone());
                    held.save()?;
                }
                layers::clean(&zdir).map_err(io)?;
                if layers::clean_flats(&zdir, &mut entry).map_err(io)? {
                    held.manifest.zones.insert(z.name.clone(), entry.clone());
                    held.save()?;
                }
                let ids = entry.checkpoints.iter().map(|c| c.id).collect::<Vec<_>>();
                (ids, entry.flat)
            };
            let fingerprints = tree::Fingerprints::open(&zdir).map_err(io)?;
            let lower = rustix::fs::open(
                &z.backing,
                rustix::fs::OFlags::PATH
                    | rustix::fs::OFlags::DIRECTORY
                    | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .map_err(|e| io(e.into()))?;
            // The dir the stage is made over: a commit into another one
            // (the host moved a new dir to the backing path) conflicts.
            // A stage holding no change is made over this one from now.
            let now = rustix::fs::fstat(&lower)
                .ok()
                .as_ref()
                .map(tree::Fingerprint::of);
            let empty = ids.is_empty()
                && std::fs::read_dir(zdir.join("upper")).map_or(true, |mut d| d.next().is_none());
            if empty && now.is_some() {
                fingerprints.settle(&[], &[], &[(PathBuf::new(), now)])
            } else {
                fingerprints.note_first(Path::new(""), || now)
            }
            .map_err(io)?;
            zones.push(Some(ZoneStage {
                name: z.name.clone(),
                backing: z.backing.clone(),
                upper: zdir.join("upper"),
                work: zdir.join("work"),
                dir: zdir,
                xattrs,
                fingerprints,
                actors,
                lower,
                checkpoints: Mutex::new(ids),
                flat: Mutex::new(flat),
                building: Mutex::new(FlatBuild::Idle),
                epoch: std::sync::atomic::AtomicU64::new(0),
            }));
        }
        Ok(Some(Stages {
            dir,
            zones,
            max_checkpoints: service::MAX_CHECKPOINTS,
            held: Mutex::new(held),
        }))
    }

    /// The stage dir, locked, and its manifest: held while the layers
    /// change.
    pub fn held(&self) -> parking_lot::MutexGuard<'_, dir::Held> {
        self.held.lock()
    }

    /// Zone `i`'s stage, if it is staged.
    pub fn zone(&self, i: usize) -> Option<&ZoneStage> {
        self.zones.get(i).and_then(Option::as_ref)
    }

    /// The stage of the zone named `name`.
    pub fn by_name(&self, name: &str) -> Option<&ZoneStage> {
        self.zones.iter().flatten().find(|z| z.name == name)
    }

    /// Every staged zone, with its index.
    pub fn iter(&self) -> impl Iterator<Item = (usize, &ZoneStage)> {
        self.zones
            .iter()
            .enumerate()
            .filter_map(|(i, z)| z.as_ref().map(|z| (i, z)))
    }
}

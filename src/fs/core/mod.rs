//! The filesystem core: every operation, testable without the kernel.
//!
//! Each operation receives a small request context ([`Ctx`]: the FUSE
//! call, uid, gid, pid) and answers through a [`Respond`] (the adapter's
//! reply, or a closure in tests). An operation that may change something
//! takes one path, in `gate`: resolve its nodes once, ask the pure
//! [`policy::decide`](crate::policy::decide), keep what it said (refusals
//! and gated mutations, in one place), hand an `ask` to the broker without
//! holding the thread, then act and answer.
//!
//! - `gate`: the request path and the record of refusals.
//! - `names`: lookup, forget, and new names (create, mkdir, mknod,
//!   symlink).
//! - `moves`: names taken away or moved, and links (unlink, rmdir,
//!   rename, link).
//! - `files`: attributes and open files (getattr, setattr, open, read,
//!   write, ...).
//! - `io`: how file data moves (kernel passthrough or the daemon).
//! - `dirs`: opendir, readdir, statfs.
//! - `xattr`: extended attributes and `access(2)`.

mod dirs;
mod files;
mod gate;
pub(crate) mod held;
mod io;
mod moves;
mod names;
mod stage;
mod xattr;

pub use crate::fs::reach::FD_CACHE_MAX;
pub use files::SetAttr;
pub use gate::{RECENT_REFUSALS, RecentRefusal};
pub use io::{CACHED_READ_BYTES, DaemonWhy, IoMode};

use std::collections::HashSet;
use std::ffi::OsString;
use std::io as stdio;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8};
use std::time::{Duration, SystemTime};

use crate::fuse::FileAttr;
use parking_lot::Mutex;

use crate::approval::Broker;
use crate::backing::{self, Caller, ProcFds};
use crate::config::{Access, ZoneTable};
use crate::error::{FsError, FsResult};
use crate::fs::handles::{self, Handles};
use crate::fs::inodes::{Anchor, Found, HeldFd, Inodes, Node};
use crate::fs::reach::{FileHandles, Reach};
use crate::policy::{Loc, ZoneRules};
use crate::stage::Stages;

/// An open file or directory of the core; a file made by a create whose
/// approval is pending carries it.
pub type Handle = handles::Handle<held::HeldCreate>;

/// Who asks, and with which FUSE call: what every operation that may be
/// refused or asked about receives.
#[derive(Clone, Copy, Debug)]
pub struct Ctx {
    /// The FUSE call, for the ledger and approvers.
    pub op: &'static str,
    pub uid: u32,
    pub gid: u32,
    /// FUSE's pid: the calling thread's id.
    pub pid: u32,
    /// The FUSE request's id (0: none), which a `FUSE_INTERRUPT` names.
    pub unique: u64,
    /// Whether the answer may wait for a decision (see
    /// `fuse::Request::may_wait`): if not, an ask is refused at once.
    pub may_wait: bool,
}

impl Ctx {
    pub fn caller(&self) -> Caller {
        Caller {
            uid: self.uid,
            gid: self.gid,
            pid: self.pid,
        }
    }
}

/// Where an operation's result goes, exactly once: the adapter's reply
/// (which encodes it), or a closure in tests.
pub trait Respond<T>: Send + 'static {
    fn respond(self, r: FsResult<T>);
}

impl<T, F: FnOnce(FsResult<T>) + Send + 'static> Respond<T> for F {
    fn respond(self, r: FsResult<T>) {
        self(r)
    }
}

/// The reply of an open or create, which can also register a file with
/// the kernel for passthrough.
pub trait Opening<T>: Respond<T> {
    fn register(&self, fd: BorrowedFd<'_>) -> stdio::Result<crate::fuse::BackingId>;
}

/// A node's attributes and how long the kernel may keep them (and the
/// name that led to it).
#[derive(Clone, Debug)]
pub struct Entry {
    /// The node id the kernel is given (0: a negative entry). Not always
    /// `attr.ino`: see [`crate::fs::inodes::Node::shown_ino`].
    pub node: u64,
    pub attr: FileAttr,
    pub ttl: Duration,
}

/// An opened file: its handle, and its passthrough backing id when its
/// data bypasses the daemon.
#[derive(Debug)]
pub struct FileOpen {
    pub fh: u64,
    pub backing: Option<Arc<crate::fuse::BackingId>>,
    /// Each write of this handle must reach the daemon as it is made
    /// (`FOPEN_DIRECT_IO`; see `Core::open_backing`).
    pub direct: bool,
    /// Its create's approval is pending: every write reaches the daemon,
    /// which holds it (see `core::held`).
    pub held: bool,
}

/// A created file: its entry, and the file as opened.
#[derive(Debug)]
pub struct Created {
    pub entry: Entry,
    pub open: FileOpen,
}

/// A getxattr/listxattr answer: the size asked for, or the data.
#[derive(Debug)]
pub enum XattrReply {
    Size(u32),
    Data(Vec<u8>),
}

/// Filesystem statistics for `statfs`.
#[derive(Debug, Default, Clone, Copy)]
pub struct Statfs {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
    pub frsize: u32,
}

/// Something this daemon could not use (see [`Core::without`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Without {
    /// `passthrough` or `file_handles`.
    pub feature: &'static str,
    /// What would make it usable (a capability, a kernel).
    pub needs: &'static str,
    /// What doing without it costs.
    pub cost: &'static str,
}

/// Who may use the mount beyond what the kernel already filters.
#[derive(Debug, Clone, Default)]
pub struct Admission {
    /// With `--allow-uid`: only these users, the mounting user and root.
    /// `None`: everyone the mount options let in.
    pub only: Option<HashSet<u32>>,
}

impl Admission {
    pub fn admits(&self, uid: u32) -> bool {
        match &self.only {
            None => true,
            Some(set) => uid == 0 || set.contains(&uid),
        }
    }
}

/// Settings of a mount that the core needs.
#[derive(Debug, Clone)]
pub struct CoreOptions {
    /// How long the kernel may keep names (found and missing) and
    /// attributes of rw zones.
    pub ttl: Duration,
    /// The same for ro zones and the mount root, which change only from
    /// the host side.
    pub ttl_ro: Duration,
    /// Use kernel passthrough for file data where the kernel and our
    /// privileges allow it.
    pub passthrough: bool,
    /// Where file data goes through the daemon, let the kernel gather
    /// writes in its page cache (FUSE's writeback cache). Off by default:
    /// with it the kernel keeps a cached regular file's size and times
    /// itself and never takes the backing file's again while it caches
    /// the file, so a change the host makes to them is not seen (an
    /// append by the host would look cut off, and a worker's append could
    /// land over it).
    pub writeback_cache: bool,
    pub owner_uid: u32,
    pub owner_gid: u32,
    /// Who may use the mount beyond what the kernel already filters.
    pub admission: Admission,
    /// Where the worker is told of its refusals (`--refusal-log`).
    pub refusal_log: Option<Arc<crate::fs::refusal_log::RefusalLog>>,
    /// `Ok`: the mount is read-only and the kernel opens files itself
    /// (FUSE's no-open mode: the daemon answers OPEN with ENOSYS, then
    /// serves READ by node); `Err`: why every open goes to the daemon
    /// (`policy::direct::kernel_opens`, and `mount::session`).
    pub kernel_opens: Result<(), String>,
}

/// Errors opening a mount's zones.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("zone '{zone}': cannot open backing dir {path}: {source}")]
    Backing {
        zone: String,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("zone '{zone}': bad protect pattern: {source}")]
    Protect { zone: String, source: ignore::Error },
    #[error("cannot open /proc/self/fd: {0}")]
    Proc(std::io::Error),
    #[error("zone '{zone}': cannot mount its stage: {source}")]
    Stage {
        zone: String,
        source: std::io::Error,
    },
}

/// How many files one user other than the mount's owner and root may
/// hold open through it: a quarter of what the daemon's fd limit (`limit`)
/// leaves past its fd cache and a reserve, at least 64. Each such open is
/// a backing fd of its own in the daemon; without a bound, one user let
/// in with `--allow-other` held them all (20,000 opens of one file), and
/// every user's lookups and opens failed with EMFILE while it did. All
/// such users together may hold twice this: half of what is left, however
/// many uids a worker has.
pub fn open_quota(limit: Option<u64>) -> usize {
    let Some(limit) = limit.and_then(|l| usize::try_from(l).ok()) else {
        return usize::MAX;
    };
    let cache = crate::fs::reach::cache_size(Some(limit as u64));
    (limit.saturating_sub(cache + 256) / 4).max(64)
}

pub struct Core {
    zones: Vec<ZoneRules>,
    zone_names: Vec<OsString>,
    inodes: Inodes,
    reach: Reach,
    handles: Handles<held::HeldCreate>,
    /// Where `ask` decisions go.
    broker: Arc<dyn Broker>,
    /// [`IoMode`] as negotiated at mount.
    io_mode: AtomicU8,
    /// The FUSE transport the handshake settled on (1: /dev/fuse, 2: io_uring).
    transport: AtomicU8,
    /// The kernel gathers writes in its page cache (see `Core::writeback`).
    writeback: AtomicBool,
    opts: CoreOptions,
    started: SystemTime,
    /// The last refusals, explained, oldest first.
    recent: Mutex<std::collections::VecDeque<RecentRefusal>>,
    /// How many hidden subdirectories each directory was last seen to hold
    /// (see `Core::dir_attr`).
    hidden_subdirs: dirs::HiddenSubdirs,
    /// Directories listed without a handle (see `Core::readdir_node`).
    listed: dirs::Listings,
    /// The staged zones' stages (None: no zone is staged).
    stages: Option<Arc<Stages>>,
    /// Mutations act under its read side; a commit or discard holds the
    /// write side (only when there are stages).
    still: parking_lot::RwLock<()>,
    /// Tells the kernel to forget cached entries (set once mounted).
    notifier: std::sync::OnceLock<crate::fuse::Notifier>,
    /// Who changed the stages (see `stage::note_staged`).
    writers: Mutex<stage::Writers>,
    /// What the workers changed in plain rw zones, and who changed what.
    changelog: crate::fs::changes::ChangeLog,
    /// Who is behind a request (`actor`).
    who: crate::actor::Who,
    /// Interrupts that came before their call waited (see `held`).
    early: held::EarlyInterrupts,
    pending_creates: held::PendingCreates,
    /// Requests answered, by opcode (`status --json`: `fuse_requests`).
    requests: crate::fuse::OpCounts,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("zones", &self.zone_names)
            .field("nodes", &self.inodes.len())
            .finish_non_exhaustive()
    }
}

/// Where an entry is, in policy terms: the zone (None: the mount root) and
/// the path inside the zone.
struct Where {
    zone: Option<usize>,
    path: PathBuf,
}

impl Core {
    /// Open every zone's backing dir (held for the whole mount) and compile
    /// its rules; `ask` decisions go to `broker`.
    pub fn new(
        table: &ZoneTable,
        opts: CoreOptions,
        broker: Arc<dyn Broker>,
    ) -> Result<Core, OpenError> {
        Core::build(table, opts, broker, None, true)
    }

    /// [`Core::new`], with the staged zones' dirs the roots of their
    /// overlays in `stages` (their changes land in the stage).
    pub fn with_stages(
        table: &ZoneTable,
        opts: CoreOptions,
        broker: Arc<dyn Broker>,
        stages: Option<Arc<Stages>>,
    ) -> Result<Core, OpenError> {
        Core::build(table, opts, broker, stages, true)
    }

    /// A core that never uses kernel file handles: every node is reopened
    /// by name, as for a daemon without CAP_DAC_READ_SEARCH (tests of that
    /// path, which run as root too).
    #[cfg(test)]
    pub(crate) fn without_handles(
        table: &ZoneTable,
        opts: CoreOptions,
        broker: Arc<dyn Broker>,
    ) -> Result<Core, OpenError> {
        Core::build(table, opts, broker, None, false)
    }

    fn build(
        table: &ZoneTable,
        opts: CoreOptions,
        broker: Arc<dyn Broker>,
        stages: Option<Arc<Stages>>,
        try_handles: bool,
    ) -> Result<Core, OpenError> {
        let mut roots = Vec::new();
        let mut zones = Vec::new();
        for (i, z) in table.zones.iter().enumerate() {
            let backing_err = |e: std::io::Error| OpenError::Backing {
                zone: z.name.clone(),
                path: z.backing.clone(),
                source: e,
            };
            let fd = match stages.as_ref().and_then(|s| s.zone(i)) {
                Some(stage) => stage.mount().map_err(|e| OpenError::Stage {
                    zone: z.name.clone(),
                    source: e,
                })?,
                None if z.policy.staged => {
                    return Err(OpenError::Stage {
                        zone: z.name.clone(),
                        source: std::io::Error::other("staged, but the mount has no stage"),
                    });
                }
                None => backing::open_zone_root(&z.backing).map_err(|e| backing_err(e.into()))?,
            };
            let st = backing::stat(fd.as_fd()).map_err(|e| backing_err(e.into()))?;
            roots.push((
                OsString::from(&z.name),
                Found {
                    anchor: Anchor::Held(HeldFd::new(fd)),
                    dev: st.st_dev,
                    ino: st.st_ino,
                    is_dir: true,
                    is_symlink: false,
                    generation: 0,
                },
            ));
            zones.push(ZoneRules::compile(z).map_err(|e| OpenError::Protect {
                zone: z.name.clone(),
                source: e,
            })?);
        }
        let zone_names = roots.iter().map(|(n, _)| n.clone()).collect();
        let procfds = ProcFds::open().map_err(|e| OpenError::Proc(e.into()))?;
        let reach = Reach::new(&roots, procfds, try_handles);
        Ok(Core {
            zones,
            zone_names,
            inodes: Inodes::new(roots),
            stages: stages.clone(),
            still: parking_lot::RwLock::new(()),
            notifier: std::sync::OnceLock::new(),
            writers: Mutex::new(stage::Writers::default()),
            changelog: crate::fs::changes::ChangeLog::new(stages.clone()),
            who: crate::actor::Who::default(),
            early: held::EarlyInterrupts::default(),
            pending_creates: held::PendingCreates::default(),
            requests: crate::fuse::OpCounts::default(),
            reach,
            handles: Handles::default(),
            broker,
            io_mode: AtomicU8::new(IoMode::Daemon(DaemonWhy::Starting).code()),
            transport: AtomicU8::new(0),
            writeback: AtomicBool::new(false),
            opts,
            started: SystemTime::now(),
            recent: Mutex::new(std::collections::VecDeque::with_capacity(RECENT_REFUSALS)),
            hidden_subdirs: dirs::HiddenSubdirs::default(),
            listed: dirs::Listings::default(),
        })
    }

    /// The cache TTL of rw zones (the shortest one).
    pub fn ttl(&self) -> Duration {
        self.opts.ttl
    }

    /// The cache TTLs of rw and of ro zones.
    pub fn ttls(&self) -> (Duration, Duration) {
        (self.opts.ttl, self.opts.ttl_ro)
    }

    /// How long the kernel may cache names and attributes in `zone` (None:
    /// the mount root, whose entries are the fixed zone list).
    fn zone_ttl(&self, zone: Option<usize>) -> Duration {
        match zone {
            Some(z) if self.zones[z].access == Access::Rw => self.opts.ttl,
            _ => self.opts.ttl_ro,
        }
    }

    /// The cache TTL for node `ino` (and for names looked up in it).
    pub fn ttl_for(&self, ino: u64) -> Duration {
        match self.inodes.get(ino) {
            Some(n) => self.zone_ttl(n.zone),
            None => self.opts.ttl,
        }
    }

    /// `attr` with the TTL of the zone it is in.
    fn entry(&self, node: &Node, attr: FileAttr) -> Entry {
        // A file whose create is pending is looked up by the kernel on
        // every use of its name (see `held::PendingCreates`).
        let ttl = match self.pending_creates.holds(node.ino) {
            true => Duration::ZERO,
            false => self.zone_ttl(node.zone),
        };
        Entry {
            node: node.ino,
            attr,
            ttl,
        }
    }

    /// Nodes currently held (for tests and status).
    pub fn node_count(&self) -> usize {
        self.inodes.len()
    }

    /// Each name of zone `zone`'s nodes the kernel may hold (for tests).
    #[cfg(test)]
    pub fn zone_names_of(&self, zone: usize) -> Vec<(u64, std::ffi::OsString)> {
        let all = self.inodes.zone_nodes(zone).into_iter();
        all.map(|(_, parent, name)| (parent, name)).collect()
    }

    pub fn open_handles(&self) -> usize {
        self.handles.len()
    }

    /// fds kept for nodes now: (in the bounded cache, pinned for files
    /// whose name was removed while the kernel holds them). The zone dirs'
    /// own fds are not counted.
    pub fn fds_kept(&self) -> (usize, usize) {
        self.reach.fds_kept()
    }

    /// What this daemon could not use, what each needs, and what doing
    /// without costs (for `status`).
    pub fn without(&self) -> Vec<Without> {
        let mut out = Vec::new();
        let slower = "file data goes through the daemon (writes are gathered in the page cache; large reads are slower)";
        match self.io_mode() {
            IoMode::Daemon(DaemonWhy::Unprivileged) => out.push(Without {
                feature: "passthrough",
                needs: "CAP_SYS_ADMIN",
                cost: slower,
            }),
            IoMode::Daemon(DaemonWhy::Kernel) => out.push(Without {
                feature: "passthrough",
                needs: "Linux 6.9 or later",
                cost: slower,
            }),
            IoMode::Passthrough
            | IoMode::Daemon(DaemonWhy::Disabled | DaemonWhy::Starting | DaemonWhy::KernelOpens) => {
            }
        }
        let by_name = "nodes are reopened from their parent by name (a remembered file or \
                       directory the host renames goes stale: ESTALE until looked up again)";
        let needs = match self.reach.handles() {
            FileHandles::Used => None,
            FileHandles::NoCapability => Some("CAP_DAC_READ_SEARCH"),
            FileHandles::NotSupported => Some("a backing filesystem that gives file handles"),
            FileHandles::Off => Some("nothing: turned off (tests)"),
        };
        if let Some(needs) = needs {
            out.push(Without {
                feature: "file_handles",
                needs,
                cost: by_name,
            });
        }
        out
    }

    /// What the workers changed in plain rw zones since the mount.
    pub fn changelog(&self) -> &crate::fs::changes::ChangeLog {
        &self.changelog
    }

    /// The names of the zones and whether each is rw and staged.
    pub fn zone_kinds(&self) -> Vec<(String, bool, bool)> {
        self.zones
            .iter()
            .map(|z| (z.name.clone(), z.access == Access::Rw, z.staged))
            .collect()
    }

    /// The staged zones' stages.
    pub fn stages(&self) -> Option<&Arc<Stages>> {
        self.stages.as_ref()
    }

    /// The core's node reach (tests).
    #[cfg(test)]
    pub(crate) fn reach(&self) -> &Reach {
        &self.reach
    }

    pub(crate) fn node(&self, ino: u64) -> FsResult<Arc<Node>> {
        self.inodes.get(ino).ok_or(FsError::Os(libc::ESTALE))
    }

    /// Where an existing node is.
    fn where_node(&self, node: &Node) -> Where {
        Where {
            zone: node.zone,
            path: if node.zone.is_some() {
                node.zone_path()
            } else {
                PathBuf::new()
            },
        }
    }

    /// Where the entry `name` of directory `parent` is (or would be).
    fn where_child(&self, parent: &Node, name: &std::ffi::OsStr) -> Where {
        match parent.zone {
            None => Where {
                zone: None,
                path: PathBuf::from(name),
            },
            Some(z) => Where {
                zone: Some(z),
                path: parent.zone_path().join(name),
            },
        }
    }

    fn loc<'a>(&'a self, w: &'a Where) -> Loc<'a> {
        match w.zone {
            // An entry of the root keeps its name, for explanations.
            None => Loc {
                zone: None,
                path: &w.path,
            },
            Some(z) => Loc::in_zone(&self.zones[z], &w.path),
        }
    }
}

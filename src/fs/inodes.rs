//! The inode table: kernel node ids ↔ backing objects.
//!
//! Invariants:
//! - node 1 is the synthetic mount root; nodes `2..2+zones` are the zone
//!   dirs, held for the whole mount and never forgotten;
//! - every other node is keyed by (zone, dev, ino) of its backing object, so
//!   hard links share one node and a rename under an open handle keeps it;
//!   except a staged zone's file whose hard links lie in a lower layer:
//!   the overlay copies up the name it is opened by, and from then on the
//!   names are separate files, so each name gets a node of its own (see
//!   [`Inodes::remember`]), shown with the inode number the shared node
//!   would have;
//! - a node's id is its backing inode number with a tag for its (zone,
//!   device) in the top 16 bits (see [`Inodes::id_for`]): stable across
//!   FORGET and remounts, and `st_ino` keeps the backing inode number in its
//!   low 32 bits, which is what git's index compares (an index written on
//!   the host stays valid through the mount, and the reverse). Objects
//!   whose id can't be made so get one from a counter in a reserved tag;
//! - a node knows where it was last seen (its parent node and its name
//!   there, kept current by lookups, renames and links): policy paths
//!   come from it, and a node anchored by name is reopened through it;
//! - a node lives while the kernel holds lookups on it; `forget` subtracts
//!   with saturation (a misbehaving client can't underflow us) and drops the
//!   node, and its fd, at zero.
//!
//! - a node's passthrough backing id (see [`Passthrough`]) is registered at
//!   its first open and lives as long as the node: the kernel wants every
//!   open of an inode to name the same backing file, and re-registering
//!   per open is what makes small-file workloads slower than no
//!   passthrough at all (PERF-NOTES).
//!
//! Lock order: the table lock, then a node's `place` lock; never the
//! reverse. No system call is made under the table lock where it can be
//! avoided (see [`Inodes::remember`]).

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Mutex, RwLock};

pub const ROOT: u64 = 1;

/// The most ancestors a node's places are followed through when looking
/// for a cycle or reopening by name. Places make no cycles (see
/// [`Node::set_place`]), so this only bounds those loops.
pub const MAX_DEPTH: usize = 1 << 20;

/// Where a node was last seen: its parent node and its name there.
#[derive(Debug, Clone)]
pub struct Place {
    pub parent: Option<Arc<Node>>,
    pub name: OsString,
}

/// How a node reaches its backing object again.
#[derive(Debug)]
pub enum Anchor {
    /// The synthetic mount root: no backing object.
    None,
    /// An fd held for the node's life: the zone dirs (replaced when a
    /// staged zone's overlay is mounted again).
    Held(HeldFd),
    /// A kernel file handle; an fd is opened from it on demand and kept
    /// in a bounded cache.
    Handle(crate::backing::InodeHandle),
    /// Reached again from its parent's fd by its name (its [`Place`]) and
    /// checked against its (device, inode number); an fd is kept in the
    /// same bounded cache. Where kernel file handles can't be opened (a
    /// daemon without CAP_DAC_READ_SEARCH, a filesystem without them).
    Named,
}

impl Anchor {
    /// Whether a newly found object (anchored by `other`) is the one this
    /// anchor reaches, given that both carry the same (device, inode
    /// number): the host may have deleted this one and the number been
    /// reused. Handles tell by their generation; a held fd, or the fd
    /// cached for a named node (`cached`), by whether its object still has
    /// a name (two named objects never share a number). A named node with
    /// no fd at hand is whatever its name now reaches.
    pub fn same_object(
        &self,
        other: &Anchor,
        cached: impl FnOnce() -> Option<Arc<OwnedFd>>,
    ) -> bool {
        match (self, other) {
            (Anchor::Handle(a), Anchor::Handle(b)) => a == b,
            (Anchor::Held(fd), _) => !crate::backing::is_deleted(fd.get().as_fd()),
            (Anchor::Named, _) => cached().is_none_or(|fd| !crate::backing::is_deleted(fd.as_fd())),
            (Anchor::None, _) | (Anchor::Handle(_), _) => true,
        }
    }
}

/// A zone dir's fd: fixed for a plain zone; a staged zone's is its
/// overlay's root, replaced by a fresh overlay after a commit or discard.
#[derive(Debug)]
pub struct HeldFd(parking_lot::RwLock<Arc<OwnedFd>>);

impl HeldFd {
    pub fn new(fd: OwnedFd) -> HeldFd {
        HeldFd(parking_lot::RwLock::new(Arc::new(fd)))
    }

    pub fn get(&self) -> Arc<OwnedFd> {
        self.0.read().clone()
    }

    /// Use `fd` from now on (an fd taken before stays valid); returns
    /// the one it replaces.
    pub fn replace(&self, fd: OwnedFd) -> Arc<OwnedFd> {
        std::mem::replace(&mut *self.0.write(), Arc::new(fd))
    }
}

/// Changes of any node's place, counted: a walk down by names that failed
/// while a place changed is worth trying again.
static PLACE_CHANGES: AtomicU64 = AtomicU64::new(0);

/// How many times any node's place has changed (see [`Node::set_place`]).
pub fn place_changes() -> u64 {
    PLACE_CHANGES.load(Ordering::Acquire)
}

/// A node's kernel passthrough state.
#[derive(Debug, Default)]
pub enum Passthrough {
    /// Not opened yet through the mount (or passthrough is off).
    #[default]
    Unset,
    /// Registered: every open of this node uses this backing id.
    Id(Arc<crate::fuse::BackingId>),
    /// Registration failed (e.g. a backing file on a stacked filesystem):
    /// this node's data goes through the daemon for its whole life, so the
    /// kernel never sees the two modes mixed on one inode.
    Refused,
    /// First opened for reading while small: its data goes through the
    /// daemon and stays in the kernel's page cache, for its whole life.
    Cached,
    /// Registered (`id`) on a staged zone's old overlay, and open only for
    /// reading (handles `fhs`) when the zone was mounted afresh (a commit, checkpoint,
    /// rewind or discard): the kernel sends those files' data to the old
    /// overlay's file, which may now be the host's file or a checkpoint's
    /// frozen copy. While any of them is open the kernel takes no other
    /// backing file for the inode (nor an open without passthrough), so
    /// an open for reading gets `id` too (it reads what the open files
    /// read) and an open for writing is EBUSY; once all are closed, `id`
    /// is unregistered and the next open registers the file the fresh
    /// overlay shows.
    Stale {
        id: Arc<crate::fuse::BackingId>,
        fhs: Vec<u64>,
    },
}

#[derive(Debug)]
pub struct Node {
    pub ino: u64,
    /// Index of the zone; `None` only for the mount root.
    pub zone: Option<usize>,
    pub anchor: Anchor,
    /// The backing object's (st_dev, st_ino), and the zone's restage
    /// generation it was last seen in (see [`Node::key`]).
    key: Mutex<(u64, u64, u64)>,
    pub is_dir: bool,
    pub is_symlink: bool,
    pub place: Mutex<Place>,
    /// Passthrough backing id, for regular files opened through the mount.
    pub passthrough: Mutex<Passthrough>,
    lookups: AtomicU64,
    /// The inode number the kernel is shown (`st_ino`): the node id, but
    /// for a node of one name ([`Inodes::remember`]).
    shown: u64,
    /// A node of one name: its key in the table's `by_name` (until it
    /// is made the shared node of its object, [`Inodes::share`]).
    by_name: Mutex<Option<NameKey>>,
    /// Other names a file was looked up by (parent id, name), its hard
    /// links: the kernel may hold each, and a staged zone's fresh overlay
    /// must have them all forgotten (see [`Inodes::zone_nodes`]). At most
    /// [`OTHER_NAMES`]; some may be gone since.
    others: Mutex<Vec<(u64, OsString)>>,
    /// Its object was once seen with more than one link.
    linked: std::sync::atomic::AtomicBool,
}

/// The most other names a node remembers (see `Node::others`).
const OTHER_NAMES: usize = 8;

/// A node of one name's key: zone, (dev, ino), parent node id and name.
type NameKey = (usize, u64, u64, u64, OsString);

impl Node {
    /// A node for object `f`, found as `name` in `parent`, with id `ino`,
    /// shown as `shown`, looked up once; `by_name`: a node of one name.
    fn found(
        ino: u64,
        zone: usize,
        parent: &Arc<Node>,
        name: &OsStr,
        f: Found,
        shown: u64,
        by_name: Option<NameKey>,
    ) -> Node {
        Node {
            ino,
            zone: Some(zone),
            anchor: f.anchor,
            key: Mutex::new((f.dev, f.ino, f.generation)),
            is_dir: f.is_dir,
            is_symlink: f.is_symlink,
            place: Mutex::new(Place {
                parent: Some(parent.clone()),
                name: name.to_os_string(),
            }),
            passthrough: Mutex::new(Passthrough::Unset),
            lookups: AtomicU64::new(1),
            shown,
            by_name: Mutex::new(by_name),
            others: Mutex::default(),
            linked: Default::default(),
        }
    }

    /// The inode number the kernel is shown for this node (`st_ino`): its
    /// id, except for a node of one name of a file with several
    /// ([`Inodes::remember`]), which shows what its other names show.
    pub fn shown_ino(&self) -> u64 {
        self.shown
    }

    /// The backing object's identity, (st_dev, st_ino), as last seen.
    pub fn key(&self) -> (u64, u64) {
        let k = *self.key.lock();
        (k.0, k.1)
    }

    /// The restage generation of the node's zone its key was last seen in
    /// (0: before any).
    pub fn key_generation(&self) -> u64 {
        self.key.lock().2
    }

    /// A staged zone's overlay was mounted afresh (a checkpoint, a rewind,
    /// a commit): its objects have new identities at the same names, so a
    /// node is taken to be what its name now shows.
    pub fn rekey(&self, dev: u64, ino: u64, generation: u64) {
        *self.key.lock() = (dev, ino, generation);
    }

    /// The synthetic mount root.
    pub fn is_root(&self) -> bool {
        matches!(self.anchor, Anchor::None)
    }

    /// The node's path relative to its zone root ("" for the zone dir).
    pub fn zone_path(&self) -> PathBuf {
        let mut names: Vec<OsString> = Vec::new();
        let mut cur = self.place.lock().clone();
        // A zone dir's place has no parent: stop there (places make no
        // cycles, see `set_place`).
        while let Some(parent) = cur.parent.take() {
            names.push(std::mem::take(&mut cur.name));
            cur = parent.place.lock().clone();
        }
        let mut p = PathBuf::new();
        for n in names.iter().rev() {
            p.push(n);
        }
        p
    }

    pub fn name(&self) -> OsString {
        self.place.lock().name.clone()
    }

    pub fn parent(&self) -> Option<Arc<Node>> {
        self.place.lock().parent.clone()
    }

    /// Record where the node is now (a lookup, rename or link found it
    /// there).
    ///
    /// A place under the node itself is not taken: it would make a cycle
    /// of places (after the host moved directories into one another, a
    /// node not looked up since still has its old place). The node keeps
    /// its place until it is looked up again once the others have theirs.
    pub fn set_place(&self, parent: Arc<Node>, name: &OsStr) {
        {
            let place = self.place.lock();
            let same_parent = place
                .parent
                .as_ref()
                .is_some_and(|p| Arc::ptr_eq(p, &parent));
            if same_parent && place.name == name {
                return;
            }
        }
        if self.is_above(&parent) {
            tracing::debug!(ino = self.ino, "a place under itself is not taken");
            return;
        }
        let mut place = self.place.lock();
        *place = Place {
            parent: Some(parent),
            name: name.to_os_string(),
        };
        PLACE_CHANGES.fetch_add(1, Ordering::AcqRel);
    }

    /// Whether this node is `node` or one of its ancestors, as their
    /// places tell.
    fn is_above(&self, node: &Arc<Node>) -> bool {
        let mut cur = Some(node.clone());
        for _ in 0..MAX_DEPTH {
            match cur {
                None => return false,
                Some(n) if n.ino == self.ino => return true,
                Some(n) => cur = n.parent(),
            }
        }
        false
    }

    /// Its object is seen with `nlink` links now.
    pub fn seen_links(&self, nlink: u64) {
        if nlink > 1 {
            self.linked.store(true, Ordering::Relaxed);
        }
    }

    /// Whether its object was ever seen with more than one link.
    pub fn was_linked(&self) -> bool {
        self.linked.load(Ordering::Relaxed)
    }

    /// Whether this is a node of one name ([`Inodes::remember`]).
    pub fn is_one_name(&self) -> bool {
        self.by_name.lock().is_some()
    }

    /// The file is looked up as `name` in `parent`: if it was last seen
    /// elsewhere, that is one of its other names (a hard link; or a place
    /// the host moved it from, which costs nothing to remember).
    pub fn seen_also(&self, parent: &Node, name: &OsStr) {
        let (p, n) = {
            let place = self.place.lock();
            let Some(p) = place.parent.as_ref() else {
                return;
            };
            if p.ino == parent.ino && place.name == name {
                return;
            }
            (p.ino, place.name.clone())
        };
        let mut others = self.others.lock();
        others.retain(|(op, on)| !(*op == parent.ino && on == name));
        if !others.iter().any(|(op, on)| *op == p && *on == n) {
            if others.len() == OTHER_NAMES {
                others.remove(0);
            }
            others.push((p, n));
        }
    }

    /// Whether its passthrough is [`Passthrough::Stale`].
    pub fn passthrough_stale(&self) -> bool {
        matches!(*self.passthrough.lock(), Passthrough::Stale { .. })
    }

    /// Whether the node was last seen as `name` in `parent`.
    pub fn is_at(&self, parent: &Node, name: &OsStr) -> bool {
        let place = self.place.lock();
        place.parent.as_ref().is_some_and(|p| p.ino == parent.ino) && place.name == name
    }
}

#[derive(Debug, Default)]
struct Maps {
    by_ino: HashMap<u64, Arc<Node>>,
    by_key: HashMap<(usize, u64, u64), u64>,
    /// Nodes of one name (see [`Inodes::remember`]).
    by_name: HashMap<NameKey, u64>,
    /// The tag of each (zone, device) seen; a zone's own device is zone+1.
    tags: HashMap<(usize, u64), u64>,
}

/// Node ids: `tag << TAG_SHIFT | backing ino`.
const TAG_SHIFT: u32 = 48;
/// Tag 0 is the mount root and the zone dirs; this one is for counter ids.
const COUNTER_TAG: u64 = 0xffff;

#[derive(Debug)]
pub struct Inodes {
    maps: RwLock<Maps>,
    next: AtomicU64,
    zones: usize,
}

/// What a lookup found, before it is entered in the table.
pub struct Found {
    pub anchor: Anchor,
    pub dev: u64,
    pub ino: u64,
    pub is_dir: bool,
    pub is_symlink: bool,
    /// How many times its zone's dir had been mounted afresh when it was
    /// found (a staged zone's commit, discard, checkpoint or rewind; 0
    /// for other zones): see [`Node::key_generation`].
    pub generation: u64,
}

impl Inodes {
    /// A table with the root and one permanent node per zone dir.
    pub fn new(zone_roots: Vec<(OsString, Found)>) -> Self {
        let mut maps = Maps::default();
        let root = Arc::new(Node {
            ino: ROOT,
            zone: None,
            anchor: Anchor::None,
            key: Mutex::new((0, 0, 0)),
            is_dir: true,
            is_symlink: false,
            place: Mutex::new(Place {
                parent: None,
                name: OsString::new(),
            }),
            passthrough: Mutex::new(Passthrough::Unset),
            lookups: AtomicU64::new(1),
            shown: ROOT,
            by_name: Mutex::new(None),
            others: Mutex::default(),
            linked: Default::default(),
        });
        maps.by_ino.insert(ROOT, root);
        let zones = zone_roots.len();
        for (i, (name, f)) in zone_roots.into_iter().enumerate() {
            let ino = 2 + i as u64;
            maps.tags.insert((i, f.dev), i as u64 + 1);
            let node = Arc::new(Node {
                ino,
                zone: Some(i),
                anchor: f.anchor,
                key: Mutex::new((f.dev, f.ino, 0)),
                is_dir: true,
                is_symlink: false,
                place: Mutex::new(Place { parent: None, name }),
                passthrough: Mutex::new(Passthrough::Unset),
                lookups: AtomicU64::new(1),
                shown: ino,
                by_name: Mutex::new(None),
                others: Mutex::default(),
                linked: Default::default(),
            });
            maps.by_key.insert((i, f.dev, f.ino), ino);
            maps.by_ino.insert(ino, node);
        }
        Inodes {
            maps: RwLock::new(maps),
            next: AtomicU64::new(COUNTER_TAG << TAG_SHIFT),
            zones,
        }
    }

    pub fn get(&self, ino: u64) -> Option<Arc<Node>> {
        self.maps.read().by_ino.get(&ino).cloned()
    }

    /// Every node of zone `i` but its dir, with its place (parent id and
    /// name), and again with each other name it was seen by, for telling
    /// the kernel to forget them.
    pub fn zone_nodes(&self, i: usize) -> Vec<(u64, u64, OsString)> {
        let mut all = Vec::new();
        for n in self.zone_node_list(i) {
            let place = n.place.lock().clone();
            if let Some(p) = place.parent {
                all.push((n.ino, p.ino, place.name));
            }
            let others = n.others.lock().clone();
            all.extend(others.into_iter().map(|(p, name)| (n.ino, p, name)));
        }
        all
    }

    /// Every node of zone `i` but its dir.
    pub fn zone_node_list(&self, i: usize) -> Vec<Arc<Node>> {
        self.maps
            .read()
            .by_ino
            .values()
            .filter(|n| n.zone == Some(i) && !self.is_permanent(n.ino))
            .cloned()
            .collect()
    }

    /// The permanent node of zone `i`'s dir.
    pub fn zone_root(&self, i: usize) -> Option<Arc<Node>> {
        self.get(2 + i as u64)
    }

    pub fn is_permanent(&self, ino: u64) -> bool {
        ino < 2 + self.zones as u64
    }

    /// The node id already given to a backing object, if any.
    pub fn known(&self, zone: usize, dev: u64, ino: u64) -> Option<u64> {
        self.maps.read().by_key.get(&(zone, dev, ino)).copied()
    }

    /// The id a backing object has, or will most likely get (for readdir's
    /// d_ino hints, which should match what stat will say).
    pub fn likely_id(&self, zone: usize, dev: u64, ino: u64) -> u64 {
        let maps = self.maps.read();
        if let Some(id) = maps.by_key.get(&(zone, dev, ino)) {
            return *id;
        }
        match maps.tags.get(&(zone, dev)) {
            Some(tag) if ino >> TAG_SHIFT == 0 => tag << TAG_SHIFT | ino,
            _ => ino,
        }
    }

    /// Enter a found object (or find its existing node), record where it was
    /// seen, and count one kernel lookup on it. `cached` gives the fd a
    /// node has at hand, if any (to tell a reused inode number).
    ///
    /// `one_name`: the object gets a node for this name alone (parent and
    /// name), not one shared by all its hard links. For a staged zone's
    /// file whose links lie in a lower layer: the kernel's opens name a
    /// node, not a name, and the overlay copies up the name the daemon
    /// opens, so with one node for all names a write to one name could
    /// land under another (or fail with EEXIST when that other name was
    /// since removed or replaced). Such a node shows the inode number the
    /// shared node would have, so its names still look like hard links
    /// until one is written.
    pub fn remember(
        &self,
        zone: usize,
        parent: &Arc<Node>,
        name: &OsStr,
        f: Found,
        one_name: bool,
        cached: impl Fn(u64) -> Option<Arc<OwnedFd>>,
    ) -> Arc<Node> {
        if one_name {
            return self.remember_one_name(zone, parent, name, f, cached);
        }
        let key = (zone, f.dev, f.ino);
        let known = |maps: &Maps| {
            maps.by_key
                .get(&key)
                .and_then(|i| maps.by_ino.get(i))
                .cloned()
        };
        // A node reached by name and last seen before its staged zone was
        // mounted afresh says nothing by its inode number: a commit,
        // checkpoint merge or rewind frees numbers that new files then get
        // (found by an attack pass: `b`'s node, looked up as the new `z`,
        // made `b` read `z`). It is the object found only if found at its
        // own name. Otherwise, whether the node known for this key is the
        // object found may take a system call (an fstat).
        // A node whose passthrough is stale ([`Passthrough::Stale`]) is
        // left to the files still open on it: the name gets a node of its
        // own, which the kernel opens afresh (the old node's opens share
        // the old overlay's file and can't write).
        let same_object = |n: &Node| {
            !n.passthrough_stale()
                && match n.anchor {
                    Anchor::Named if n.key_generation() < f.generation => n.is_at(parent, name),
                    _ => n.anchor.same_object(&f.anchor, || cached(n.ino)),
                }
        };
        // Decided before the write lock, and again under it only if the
        // table changed meanwhile.
        let before = known(&self.maps.read());
        let same_before = before.as_ref().map(|n| same_object(n));
        let mut maps = self.maps.write();
        let now = known(&maps);
        let same = match (&now, &before, same_before) {
            (Some(n), Some(b), Some(same)) if Arc::ptr_eq(n, b) => same,
            (Some(n), ..) => same_object(n),
            (None, ..) => false,
        };
        if let Some(node) = now.filter(|_| same) {
            if node.key_generation() < f.generation {
                node.rekey(f.dev, f.ino, f.generation);
            }
            if !self.is_permanent(node.ino) {
                if !node.is_dir {
                    node.seen_also(parent, name);
                }
                node.set_place(parent.clone(), name);
            }
            node.lookups.fetch_add(1, Ordering::Relaxed);
            return node;
        }
        let ino = self.id_for(&mut maps, zone, f.dev, f.ino);
        let node = Arc::new(Node::found(ino, zone, parent, name, f, ino, None));
        maps.by_key.insert(key, ino);
        maps.by_ino.insert(ino, node.clone());
        node
    }

    /// [`Self::remember`] for a node of one name. Rare (hard links in a
    /// staged zone's lower layers), so its one check of a known node's
    /// object is made under the table lock.
    fn remember_one_name(
        &self,
        zone: usize,
        parent: &Arc<Node>,
        name: &OsStr,
        f: Found,
        cached: impl Fn(u64) -> Option<Arc<OwnedFd>>,
    ) -> Arc<Node> {
        let key: NameKey = (zone, f.dev, f.ino, parent.ino, name.to_os_string());
        let mut maps = self.maps.write();
        let known = maps
            .by_name
            .get(&key)
            .and_then(|i| maps.by_ino.get(i))
            .cloned();
        if let Some(node) = known
            .filter(|n| !n.passthrough_stale() && n.anchor.same_object(&f.anchor, || cached(n.ino)))
        {
            node.set_place(parent.clone(), name);
            node.lookups.fetch_add(1, Ordering::Relaxed);
            return node;
        }
        let ino = self.next.fetch_add(1, Ordering::Relaxed);
        let shown = match maps.by_key.get(&(zone, f.dev, f.ino)) {
            Some(shared) => *shared,
            None => Self::tagged_id(&mut maps, zone, f.dev, f.ino)
                .filter(|id| !maps.by_ino.contains_key(id))
                .unwrap_or(ino),
        };
        let node = Arc::new(Node::found(
            ino,
            zone,
            parent,
            name,
            f,
            shown,
            Some(key.clone()),
        ));
        maps.by_name.insert(key, ino);
        maps.by_ino.insert(ino, node.clone());
        node
    }

    /// Make node `node` of one name the shared node of the object it now
    /// is, (dev, ino) (a link through a staged zone's overlay copied its
    /// file up: its names are one upper file now), counting one kernel
    /// lookup on it: the kernel then keeps all its names on one node.
    /// False when the object already has a shared node.
    pub fn share(&self, node: &Node, dev: u64, ino: u64) -> bool {
        let Some(zone) = node.zone else { return false };
        let mut maps = self.maps.write();
        if maps.by_key.contains_key(&(zone, dev, ino)) {
            return false;
        }
        let Some(old) = node.by_name.lock().take() else {
            return false;
        };
        if maps.by_name.get(&old) == Some(&node.ino) {
            maps.by_name.remove(&old);
        }
        node.rekey(dev, ino, node.key_generation());
        maps.by_key.insert((zone, dev, ino), node.ino);
        node.lookups.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// The id for a new node of backing object (dev, ino) in `zone`.
    fn id_for(&self, maps: &mut Maps, zone: usize, dev: u64, ino: u64) -> u64 {
        // An inode number too wide for the low bits, a tag space used up,
        // or (after a host-side reuse of an inode number while the kernel
        // still holds the old node) an id already taken: a counter id.
        match Self::tagged_id(maps, zone, dev, ino) {
            Some(id) if !maps.by_ino.contains_key(&id) => id,
            _ => self.next.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// The id `tag << TAG_SHIFT | ino` of backing object (dev, ino) in
    /// `zone` (its (zone, device) given a tag if it has none), if the
    /// number fits and a tag is left.
    fn tagged_id(maps: &mut Maps, zone: usize, dev: u64, ino: u64) -> Option<u64> {
        let next_tag = maps.tags.len() as u64 + 1;
        let tag = *maps.tags.entry((zone, dev)).or_insert(next_tag);
        (ino >> TAG_SHIFT == 0 && tag < COUNTER_TAG).then_some(tag << TAG_SHIFT | ino)
    }

    /// The kernel forgets `n` lookups of `ino`; true when the node is gone.
    pub fn forget(&self, ino: u64, n: u64) -> bool {
        if self.is_permanent(ino) {
            return false;
        }
        let mut maps = self.maps.write();
        let Some(node) = maps.by_ino.get(&ino) else {
            return false;
        };
        let prev = node.lookups.load(Ordering::Relaxed);
        let left = prev.saturating_sub(n);
        node.lookups.store(left, Ordering::Relaxed);
        if left == 0 {
            let one_name = node.by_name.lock().clone();
            if let Some(key) = one_name {
                if maps.by_name.get(&key) == Some(&ino) {
                    maps.by_name.remove(&key);
                }
            } else {
                let (dev, ino_) = node.key();
                let key = (node.zone.unwrap_or(0), dev, ino_);
                if maps.by_key.get(&key) == Some(&ino) {
                    maps.by_key.remove(&key);
                }
            }
            // Dropped after the lock: the last reference closes the node's
            // passthrough backing id (an ioctl), and every request's
            // lookup of its node waits while the table is locked.
            let gone = maps.by_ino.remove(&ino);
            drop(maps);
            drop(gone);
            return true;
        }
        false
    }

    /// Number of nodes held (root and zone dirs included).
    pub fn len(&self) -> usize {
        self.maps.read().by_ino.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

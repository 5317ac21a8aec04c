//! How file data moves between a worker and the backing files: kernel
//! passthrough (the daemon sees only open and close) or through the
//! daemon with the page cache kept, chosen per mount at the FUSE
//! handshake and per node at its first open.

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::Core;
use crate::backing;
use crate::fs::handles::Handle;
use crate::fs::inodes::{Node, Passthrough};
use crate::fuse::Transport;

/// Files first opened read-only below this size read through the daemon
/// and the page cache rather than passthrough (see [`Core::passthrough_id`]).
pub const CACHED_READ_BYTES: u64 = 256 * 1024;

/// How file data moves between a worker and the backing files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoMode {
    /// Kernel passthrough: reads, writes and mmap of an opened file go
    /// straight to the backing file; the daemon sees only open and close.
    /// Zones with `max_file_bytes` still go through the daemon.
    Passthrough,
    /// Every read and write goes through the daemon; the kernel keeps a
    /// file's page cache across opens (`FOPEN_KEEP_CACHE`).
    Daemon(DaemonWhy),
}

/// Why file data goes through the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DaemonWhy {
    /// `--no-passthrough`.
    Disabled,
    /// Passthrough needs CAP_SYS_ADMIN.
    Unprivileged,
    /// The kernel doesn't offer passthrough (it needs Linux 6.9).
    Kernel,
    /// Not negotiated yet (before the FUSE handshake).
    Starting,
    /// The kernel opens files itself (`CoreOptions::kernel_opens`): with
    /// no OPEN the daemon has no file to register for passthrough.
    KernelOpens,
}

impl IoMode {
    pub(super) fn code(self) -> u8 {
        match self {
            IoMode::Passthrough => 0,
            IoMode::Daemon(DaemonWhy::Disabled) => 1,
            IoMode::Daemon(DaemonWhy::Unprivileged) => 2,
            IoMode::Daemon(DaemonWhy::Kernel) => 3,
            IoMode::Daemon(DaemonWhy::Starting) => 4,
            IoMode::Daemon(DaemonWhy::KernelOpens) => 5,
        }
    }

    fn from_code(c: u8) -> IoMode {
        match c {
            0 => IoMode::Passthrough,
            1 => IoMode::Daemon(DaemonWhy::Disabled),
            2 => IoMode::Daemon(DaemonWhy::Unprivileged),
            3 => IoMode::Daemon(DaemonWhy::Kernel),
            5 => IoMode::Daemon(DaemonWhy::KernelOpens),
            _ => IoMode::Daemon(DaemonWhy::Starting),
        }
    }

    /// `passthrough` or `daemon`, for `zonemount status --json`.
    pub fn name(self) -> &'static str {
        match self {
            IoMode::Passthrough => "passthrough",
            IoMode::Daemon(_) => "daemon",
        }
    }

    /// One line for logs and `zonemount status`.
    pub fn describe(self) -> &'static str {
        match self {
            IoMode::Passthrough => {
                "passthrough (kernel to backing file; files first opened read-only under 256 KiB \
                 and zones with max_file_bytes through the daemon and the page cache)"
            }
            IoMode::Daemon(DaemonWhy::Disabled) => "daemon (--no-passthrough)",
            IoMode::Daemon(DaemonWhy::Unprivileged) => "daemon (passthrough needs CAP_SYS_ADMIN)",
            IoMode::Daemon(DaemonWhy::Kernel) => {
                "daemon (the kernel offers no FUSE passthrough; it needs Linux 6.9)"
            }
            IoMode::Daemon(DaemonWhy::Starting) => "daemon (not negotiated yet)",
            IoMode::Daemon(DaemonWhy::KernelOpens) => {
                "page cache, filled by the daemon (every zone is read-only with no rule that needs \
                 the daemon: the mount is read-only and the kernel opens files itself, with no \
                 OPEN or RELEASE round trip; no passthrough)"
            }
        }
    }

    /// [`IoMode::describe`], saying also whether writes are gathered in
    /// the kernel's page cache.
    pub fn describe_with(self, writeback: bool) -> String {
        match (self, writeback) {
            (IoMode::Daemon(_), true) => format!(
                "{}; writes gathered in the page cache and sent in blocks of up to 1 MiB \
                 (writeback cache)",
                self.describe()
            ),
            _ => self.describe().to_string(),
        }
    }
}

impl Core {
    /// Whether this mount should ask the kernel for passthrough: wanted,
    /// and the daemon holds CAP_SYS_ADMIN (the kernel checks it when a
    /// backing file is registered).
    pub fn passthrough_wanted(&self) -> Result<(), DaemonWhy> {
        if self.kernel_opens().is_ok() {
            return Err(DaemonWhy::KernelOpens);
        }
        if !self.opts.passthrough {
            return Err(DaemonWhy::Disabled);
        }
        if !backing::has_sys_admin() {
            return Err(DaemonWhy::Unprivileged);
        }
        Ok(())
    }

    /// Whether the kernel opens files itself (the mount is read-only and
    /// no zone has a rule only the daemon can enforce), or why not.
    pub fn kernel_opens(&self) -> Result<(), &str> {
        self.opts
            .kernel_opens
            .as_ref()
            .map(|_| ())
            .map_err(|s| s.as_str())
    }

    /// Record the I/O mode the FUSE handshake settled on.
    pub fn set_io_mode(&self, mode: IoMode) {
        self.io_mode.store(mode.code(), Ordering::Relaxed);
    }

    /// How file data moves in this mount (for logs and `zonemount status`).
    pub fn io_mode(&self) -> IoMode {
        IoMode::from_code(self.io_mode.load(Ordering::Relaxed))
    }

    /// Whether this mount should ask for the writeback cache (where file
    /// data goes through the daemon): `--writeback-cache`.
    pub fn writeback_wanted(&self) -> bool {
        self.opts.writeback_cache
    }

    /// Record whether the kernel gathers writes in its page cache
    /// (`FUSE_WRITEBACK_CACHE`, agreed at the handshake).
    pub fn set_writeback(&self, on: bool) {
        self.writeback.store(on, Ordering::Relaxed);
    }

    /// Whether the kernel gathers writes in its page cache and sends them
    /// later, in large requests (only where file data goes through the
    /// daemon).
    pub fn writeback(&self) -> bool {
        self.writeback.load(Ordering::Relaxed)
    }

    /// Open the backing file for a caller's open with `flags` in zone
    /// `zone` (through `open`, given the flags to use), as the page cache
    /// needs it; also whether the kernel must send this handle's writes as
    /// they are made (`FOPEN_DIRECT_IO`).
    ///
    /// With the writeback cache the kernel writes dirty pages back later,
    /// through any handle open for writing, and first reads in a page it
    /// only partly overwrites. So a file opened write-only is opened
    /// read-write on the backing side (write-only with direct I/O when the
    /// caller may not read it), and without `O_APPEND`: the kernel places
    /// appends itself, and a `pwrite` on an `O_APPEND` fd would ignore the
    /// offset. In a zone with `max_file_bytes`, a handle open for writing
    /// uses direct I/O, so every write reaches the daemon before it lands
    /// and the one that would pass the limit is refused (EFBIG) to the
    /// caller, never later at writeback.
    pub(super) fn open_backing<T>(
        &self,
        zone: usize,
        flags: i32,
        open: impl Fn(i32) -> backing::Sys<T>,
    ) -> backing::Sys<(T, bool)> {
        let access = flags & libc::O_ACCMODE;
        if !self.writeback() || access == libc::O_RDONLY {
            return Ok((open(flags)?, false));
        }
        let limited = self.zones[zone].max_file_bytes.is_some();
        let flags = flags & !libc::O_APPEND;
        if access == libc::O_WRONLY {
            let rw = (flags & !libc::O_ACCMODE) | libc::O_RDWR;
            match open(rw) {
                Ok(f) => return Ok((f, limited)),
                Err(rustix::io::Errno::ACCESS) => return Ok((open(flags)?, true)),
                Err(e) => return Err(e),
            }
        }
        Ok((open(flags)?, limited))
    }

    /// Record how requests reach this daemon.
    pub fn set_transport(&self, t: Transport) {
        let code = match t {
            Transport::Device => 1,
            Transport::Uring => 2,
        };
        self.transport.store(code, Ordering::Relaxed);
    }

    /// How requests reach this daemon (None before the handshake).
    pub fn transport(&self) -> Option<Transport> {
        match self.transport.load(Ordering::Relaxed) {
            1 => Some(Transport::Device),
            2 => Some(Transport::Uring),
            _ => None,
        }
    }

    /// The backing id for a file just opened (handle `fh`) when its data
    /// may bypass the daemon: passthrough is on, no per-file policy
    /// (`max_file_bytes`) needs the daemon to see writes, and the node was
    /// not first opened read-only while smaller than [`CACHED_READ_BYTES`].
    /// The choice is made at the node's first open and kept until FORGET
    /// (the kernel refuses to mix the two modes on one inode); an id is
    /// made with `register`.
    ///
    /// Small files read through the page cache because a passthrough read
    /// marks the kernel's atime stale, so the `fstat` that `grep -r` or
    /// `git add` makes next costs a GETATTR round trip per file; a cached
    /// read, once warm, costs none.
    ///
    /// Must run with the daemon's own credentials: the kernel wants
    /// CAP_SYS_ADMIN to register, and opens the backing file for each
    /// later open with the credentials seen here (the caller's rights were
    /// checked by the daemon's own open just before).
    /// The old overlay's backing id of `node`, while a file opened
    /// through it before its staged zone was mounted afresh is still open
    /// ([`Passthrough::Stale`]): an open for reading gets it, one for
    /// writing is refused. Once those files are all closed the id is
    /// unregistered and the node starts afresh ([`Passthrough::Unset`]).
    pub(super) fn passthrough_stale(&self, node: &Node) -> Option<Arc<crate::fuse::BackingId>> {
        let mut slot = node.passthrough.lock();
        let Passthrough::Stale { id, fhs } = &mut *slot else {
            return None;
        };
        fhs.retain(|fh| self.handles.get(*fh).is_ok());
        if fhs.is_empty() {
            *slot = Passthrough::Unset;
            return None;
        }
        Some(id.clone())
    }

    pub(super) fn passthrough_id(
        &self,
        node: &Node,
        fh: u64,
        register: impl FnOnce(BorrowedFd<'_>) -> std::io::Result<crate::fuse::BackingId>,
    ) -> Option<Arc<crate::fuse::BackingId>> {
        if self.io_mode() != IoMode::Passthrough {
            return None;
        }
        let zone = node.zone?;
        if self.zones[zone].max_file_bytes.is_some() {
            return None;
        }
        let mut slot = node.passthrough.lock();
        match &*slot {
            Passthrough::Id(id) => return Some(id.clone()),
            // A create's open is for writing: a stale id is not for it
            // (`passthrough_stale`).
            Passthrough::Refused | Passthrough::Cached | Passthrough::Stale { .. } => return None,
            Passthrough::Unset => {}
        }
        let Ok(handle) = self.handles.get(fh) else {
            return None;
        };
        let Handle::File { fd, writable, .. } = &*handle else {
            return None;
        };
        if !writable
            && backing::stat(fd.as_fd()).is_ok_and(|st| (st.st_size as u64) < CACHED_READ_BYTES)
        {
            *slot = Passthrough::Cached;
            return None;
        }
        // The kernel keeps the registered file for the node's life: it
        // must be read-only, or exec of the file would fail with ETXTBSY.
        // It is opened from the handle, which reaches unlinked files too.
        let registered = self
            .reach
            .reopen(fd.as_fd(), libc::O_RDONLY)
            .map_err(std::io::Error::from)
            .and_then(|ro| register(ro.as_fd()).map(|id| (id, ro)));
        match registered {
            Ok((id, ro)) => {
                // The read-only fd also serves as the node's fd when it has
                // none at hand (a file just created): the GETXATTR and
                // SETATTRs that follow a write need no reopen by handle,
                // and read xattrs on the fd itself. It holds no write
                // access, so exec is not refused while it is kept.
                if self.reach.cached(node.ino).is_none() {
                    self.reach.cache(node, Arc::new(ro), true);
                }
                let id = Arc::new(id);
                *slot = Passthrough::Id(id.clone());
                Some(id)
            }
            Err(e) => {
                tracing::info!(ino = node.ino, error = %e, "passthrough refused; this file's data goes through the daemon");
                *slot = Passthrough::Refused;
                None
            }
        }
    }
}

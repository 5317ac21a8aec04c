//! Errors of the filesystem core and the one place they become errnos.
//!
//! Two kinds travel on the reply path: a policy [`Refusal`] (the zone rules
//! said no, with a reason for the audit log) and a raw OS errno from the
//! backing store, which is passed to the worker unchanged. Every other error
//! type of the crate stays at the edges (config, CLI).

use std::fmt;

/// Why the policy refused an operation. Ordered as DESIGN §3's precedence
/// list: when several apply, the first one is reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Refusal {
    /// The path is, or is inside, a sensitive root (`~/.ssh`…) that the
    /// zone's backing dir contains: it is hidden from the mount.
    Sensitive,
    /// The path matches one of the zone's `hide` patterns: hidden as a
    /// sensitive root is.
    HiddenByPattern,
    /// The name is invisible in this zone (outside `suffixes`).
    Hidden,
    /// Adds, removes or renames an entry of the mount root or a zone dir.
    RootLevel,
    /// Rename or link between two zones.
    CrossZone,
    /// The zone is mounted read-only.
    ReadOnly,
    /// The path is inside a `protect` pattern.
    Protected,
    /// Renaming this directory would move a hidden sensitive root with it
    /// (and so make it visible under the new name).
    SensitiveInside,
    /// Creating or renaming to a name outside `suffixes`.
    Suffix,
    /// The file is or would become larger than `max_file_bytes`.
    TooBig,
    /// A block or character device node (never made, whatever the zone).
    Device,
    /// The zone's approval policy for this class is `blocked`.
    Blocked,
    /// An `ask` was denied (or could not be asked).
    Denied,
    /// The worker may not enter the mount at all (another uid).
    NotAllowed,
    /// An `ask` of a call the kernel makes holding its directory's lock
    /// was not decided in the short time such a call may wait: request
    /// `N` stays pending, and a retry once it is decided gets the decision.
    Awaiting(u64),
}

impl Refusal {
    /// The errno a worker sees. No `_` arm: a new refusal must pick one here.
    pub fn errno(self) -> i32 {
        match self {
            // A hidden path must look like nothing at all, for every
            // operation: another errno would confirm something is there.
            Refusal::Sensitive | Refusal::Hidden | Refusal::HiddenByPattern => libc::ENOENT,
            // EACCES, not EROFS: the root is not read-only, it is not the
            // worker's to change (a zone dir is the supervisor's contract).
            Refusal::RootLevel => libc::EACCES,
            // EXDEV makes `mv` fall back to copy + delete, each checked.
            Refusal::CrossZone => libc::EXDEV,
            Refusal::ReadOnly | Refusal::Protected => libc::EROFS,
            Refusal::Suffix => libc::EACCES,
            // The directory is visible and the worker's; it just can't be
            // moved. EACCES, like a name the zone won't take.
            Refusal::SensitiveInside => libc::EACCES,
            Refusal::TooBig => libc::EFBIG,
            // EPERM, as mknod without CAP_MKNOD: no zone may hold devices.
            Refusal::Device | Refusal::Blocked => libc::EPERM,
            Refusal::Denied | Refusal::NotAllowed => libc::EACCES,
            // "Resource temporarily unavailable": try again later, which is
            // what the worker should do once the request is decided.
            Refusal::Awaiting(_) => libc::EAGAIN,
        }
    }

    /// The errno's name, as the audit log writes it.
    pub fn errno_name(self) -> &'static str {
        errno_name(self.errno())
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Refusal::Awaiting(id) => {
                return write!(f, "waiting for approval #{id}; retry once decided");
            }
            Refusal::Sensitive => "the path is a hidden sensitive root",
            Refusal::HiddenByPattern => "the path is hidden by the zone's hide patterns",
            Refusal::Hidden => "the name is not visible in this zone",
            Refusal::RootLevel => "the mount root and zone directories cannot be changed",
            Refusal::CrossZone => "renames and links cannot cross zones",
            Refusal::ReadOnly => "the zone is read-only",
            Refusal::Protected => "the path is protected (read-only) in this zone",
            Refusal::SensitiveInside => "the directory holds a hidden path",
            Refusal::Suffix => "the name's suffix is not allowed in this zone",
            Refusal::TooBig => "the file would exceed the zone's max_file_bytes",
            Refusal::Device => "device nodes cannot be made in this mount",
            Refusal::Blocked => "the zone's approval policy blocks this operation",
            Refusal::Denied => "approval was denied",
            Refusal::NotAllowed => "this user may not use the mount",
        };
        f.write_str(s)
    }
}

/// An error on the reply path of a filesystem callback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FsError {
    /// The policy said no.
    Refused(Refusal),
    /// The backing store (or the kernel) said no: passed on unchanged.
    Os(i32),
}

impl FsError {
    /// The errno for the reply. Every variant maps explicitly.
    pub fn errno(&self) -> i32 {
        match self {
            FsError::Refused(r) => r.errno(),
            FsError::Os(e) => *e,
        }
    }

    pub fn enoent() -> Self {
        FsError::Os(libc::ENOENT)
    }
}

impl From<Refusal> for FsError {
    fn from(r: Refusal) -> Self {
        FsError::Refused(r)
    }
}

impl From<rustix::io::Errno> for FsError {
    fn from(e: rustix::io::Errno) -> Self {
        FsError::Os(e.raw_os_error())
    }
}

impl From<std::io::Error> for FsError {
    fn from(e: std::io::Error) -> Self {
        // A non-OS io::Error has no errno of its own: EIO is the honest answer.
        FsError::Os(e.raw_os_error().unwrap_or(libc::EIO))
    }
}

impl fmt::Display for FsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FsError::Refused(r) => write!(f, "{} ({})", r, r.errno_name()),
            FsError::Os(e) => write!(f, "{}", errno_name(*e)),
        }
    }
}

pub type FsResult<T> = Result<T, FsError>;

/// The symbolic name of an errno (for logs and the audit ledger).
pub fn errno_name(e: i32) -> &'static str {
    match e {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EINTR => "EINTR",
        libc::EAGAIN => "EAGAIN",
        libc::EIO => "EIO",
        libc::EBADF => "EBADF",
        libc::EACCES => "EACCES",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::EXDEV => "EXDEV",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::EINVAL => "EINVAL",
        libc::EMFILE => "EMFILE",
        libc::EFBIG => "EFBIG",
        libc::ENOSPC => "ENOSPC",
        libc::EROFS => "EROFS",
        libc::EMLINK => "EMLINK",
        libc::ENAMETOOLONG => "ENAMETOOLONG",
        libc::ENOTEMPTY => "ENOTEMPTY",
        libc::ELOOP => "ELOOP",
        libc::ENODATA => "ENODATA",
        libc::ENOTSUP => "ENOTSUP",
        libc::ERANGE => "ERANGE",
        libc::ENOSYS => "ENOSYS",
        _ => "EOTHER",
    }
}

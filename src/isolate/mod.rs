//! The bubblewrap command line for `zonemount run --isolate`: the zones
//! become the worker's whole world.
//!
//! [`bwrap_args`] is a pure function from the zones, the options and a few
//! facts about the host ([`HostFacts`], read once by [`HostFacts::read`]) to
//! bwrap's argv, so every rule below is unit-tested without a sandbox:
//! - each zone of the mount appears at `/<zone>` (a ro zone also bound
//!   read-only, so the kernel refuses writes before FUSE is asked; the mount
//!   itself refuses them too); a zone whose every rule the kernel enforces
//!   by itself (`policy::direct`) is bound straight from its backing dir,
//!   through a directory fd `run` opened and checked, so nothing can swap
//!   the path between the check and the bind;
//! - `/usr`, `/bin`, `/sbin`, `/lib*` read-only (as symlinks where the host
//!   has merged `/usr`), and a minimal `/etc` of files programs need to run
//!   (users, name resolution, the dynamic linker, certificates);
//! - private `/tmp`, `/proc`, `/dev`; new user, pid, ipc, uts, cgroup and
//!   network namespaces (`--network` keeps the host's network); no
//!   capabilities; a new session (no TIOCSTI into the caller's terminal);
//!   the sandbox dies with `zonemount run`;
//! - a root that is read-only, so nothing else can be created there;
//! - a backing dir that happens to lie inside an exposed system directory
//!   is covered by an empty tmpfs, so the worker only reaches it through the
//!   policed mount;
//! - the environment cleared, then set from [`sandbox_env`]: `PATH`, `LANG`,
//!   `TERM` copied from the host, `HOME` at the first rw zone, plus what
//!   `--env` asked for.
//!
//! Homes, `/root`, `/run`, `/var`, `/mnt` and every other host path are
//! simply never bound, which is how they stay invisible.
//!
//! [`pidns`] is the worker boundary's one system-call leaf (allowed
//! `unsafe`): `run`'s PID namespace, and which namespaces enclose a
//! process (`approval::side` decides with it who is on the worker's side).

#[allow(unsafe_code)]
pub mod pidns;
pub mod private_binds;

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Top-level system directories offered to the worker, when the host has
/// them.
pub const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];

/// The parts of `/etc` a worker gets (read-only), when the host has them.
/// No shadow files, no credentials, nothing per-service.
pub const ETC_ENTRIES: &[&str] = &[
    "/etc/passwd",
    "/etc/group",
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/resolv.conf",
    "/etc/nsswitch.conf",
    "/etc/gai.conf",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/ca-certificates.conf",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/mime.types",
    "/etc/protocols",
    "/etc/services",
];

/// Names the sandbox's root uses itself; a zone can't take one.
const RESERVED: &[&str] = &["etc", "proc", "dev", "tmp"];

/// Variables copied from the host when set.
pub const ENV_ALLOWED: &[&str] = &["PATH", "LANG", "TERM"];

/// `PATH` when the host has none.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// One zone as the worker will see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneBind {
    pub name: String,
    pub writable: bool,
    /// Writes go to a stage until the supervisor commits them.
    pub staged: bool,
    /// The zone's backing dir on the host (hidden if a system dir holds it).
    pub backing: PathBuf,
    /// Bound straight from the backing dir, open at this fd (bwrap's
    /// `--bind-fd`/`--ro-bind-fd`, which closes it before CMD runs): no
    /// rule of the zone needs the daemon. `None`: the mount's zone dir.
    pub direct: Option<i32>,
}

/// A top-level system entry of the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SystemEntry {
    /// A real directory: bound read-only at the same path.
    Dir(PathBuf),
    /// A symlink (merged `/usr`: `/bin -> usr/bin`): recreated as is.
    Symlink { path: PathBuf, target: PathBuf },
}

impl SystemEntry {
    fn path(&self) -> &Path {
        match self {
            SystemEntry::Dir(p) | SystemEntry::Symlink { path: p, .. } => p,
        }
    }
}

/// What the host has, read once; the argv builder takes it as data.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HostFacts {
    /// Present entries of [`SYSTEM_DIRS`].
    pub system: Vec<SystemEntry>,
    /// Present entries of [`ETC_ENTRIES`].
    pub etc: Vec<PathBuf>,
}

impl HostFacts {
    /// Look at the host's `/` and `/etc`.
    pub fn read() -> Self {
        let system = SYSTEM_DIRS
            .iter()
            .filter_map(|d| {
                let path = PathBuf::from(d);
                let meta = std::fs::symlink_metadata(&path).ok()?;
                if meta.file_type().is_symlink() {
                    let target = std::fs::read_link(&path).ok()?;
                    // A dangling link (no /lib32 behind it) is left out.
                    path.is_dir()
                        .then_some(SystemEntry::Symlink { path, target })
                } else {
                    meta.is_dir().then_some(SystemEntry::Dir(path))
                }
            })
            .collect();
        let etc = ETC_ENTRIES
            .iter()
            .map(PathBuf::from)
            .filter(|p| p.exists())
            .collect();
        HostFacts { system, etc }
    }
}

/// What the sandbox should hold.
#[derive(Debug, Clone)]
pub struct Isolation<'a> {
    /// The live zonemount mount whose zone dirs are bound.
    pub mountpoint: &'a Path,
    pub zones: &'a [ZoneBind],
    /// Keep the host's network namespace.
    pub network: bool,
    /// The complete environment (see [`sandbox_env`]).
    pub env: &'a [(OsString, OsString)],
    pub command: &'a [OsString],
    /// The refusal log, bound read-only at [`REFUSALS_IN_SANDBOX`].
    pub refusals: Option<&'a Path>,
}

/// Where the refusal log is in the sandbox.
pub const REFUSALS_IN_SANDBOX: &str = "/tmp/zonemount-refusals";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IsolateError {
    #[error("zone '{0}' would hide the system directory /{0} under --isolate: rename the zone")]
    ReservedName(String),
    #[error("--env {0:?}: a variable name is letters, digits and '_', not starting with a digit")]
    BadEnvName(String),
    #[error("no command to run: give it after `--`")]
    NoCommand,
}

/// The first rw zone's path in the sandbox (the worker's cwd and `HOME`),
/// or `/` when every zone is ro.
pub fn home_in_sandbox(zones: &[ZoneBind]) -> PathBuf {
    zones
        .iter()
        .find(|z| z.writable)
        .map_or_else(|| PathBuf::from("/"), |z| Path::new("/").join(&z.name))
}

/// One `--env` argument: `NAME=VALUE`, or `NAME` to copy the host's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvSpec {
    pub name: String,
    pub value: Option<OsString>,
}

impl EnvSpec {
    pub fn parse(arg: &OsStr) -> Result<Self, IsolateError> {
        let bytes = arg.as_bytes();
        let (name, value) = match bytes.iter().position(|b| *b == b'=') {
            Some(i) => (
                &bytes[..i],
                Some(OsStr::from_bytes(&bytes[i + 1..]).to_os_string()),
            ),
            None => (bytes, None),
        };
        let valid = !name.is_empty()
            && !name[0].is_ascii_digit()
            && name.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_');
        if !valid {
            return Err(IsolateError::BadEnvName(
                String::from_utf8_lossy(name).into_owned(),
            ));
        }
        Ok(EnvSpec {
            name: String::from_utf8_lossy(name).into_owned(),
            value,
        })
    }
}

/// The sandbox's environment: the allow list copied from the host, `HOME`,
/// then each `--env` (a later one wins). `host` looks a variable up.
pub fn sandbox_env(
    host: impl Fn(&str) -> Option<OsString>,
    extra: &[EnvSpec],
    home: &Path,
) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = Vec::new();
    let mut set = |name: &str, value: OsString| {
        env.retain(|(n, _)| n != name);
        env.push((name.into(), value));
    };
    set(
        "PATH",
        host("PATH").unwrap_or_else(|| OsString::from(DEFAULT_PATH)),
    );
    for name in ENV_ALLOWED.iter().filter(|n| **n != "PATH") {
        if let Some(v) = host(name) {
            set(name, v);
        }
    }
    set("HOME", home.as_os_str().to_os_string());
    for e in extra {
        match (&e.value, host(&e.name)) {
            (Some(v), _) => set(&e.name, v.clone()),
            (None, Some(v)) => set(&e.name, v),
            // `--env NAME` with NAME unset on the host: nothing to copy.
            (None, None) => {}
        }
    }
    env
}

/// What CMD is told of its limits, as paths it sees them under `root`
/// (the mountpoint, or `/` in the sandbox): `ZONEMOUNT_ROOT`,
/// `ZONEMOUNT_WRITABLE` and `ZONEMOUNT_READONLY` (colon-separated, empty
/// when there are none), and `ZONEMOUNT_STAGED` (the writable paths whose
/// changes wait for review) when some are staged.
pub fn limits_env(root: &Path, zones: &[ZoneBind]) -> Vec<(OsString, OsString)> {
    let list = |pick: &dyn Fn(&ZoneBind) -> bool| {
        let paths: Vec<OsString> = zones
            .iter()
            .filter(|z| pick(z))
            .map(|z| root.join(&z.name).into_os_string())
            .collect();
        paths.join(OsStr::new(":"))
    };
    let mut env = vec![
        ("ZONEMOUNT_ROOT".into(), root.as_os_str().to_os_string()),
        ("ZONEMOUNT_WRITABLE".into(), list(&|z| z.writable)),
        ("ZONEMOUNT_READONLY".into(), list(&|z| !z.writable)),
    ];
    if zones.iter().any(|z| z.staged) {
        env.push(("ZONEMOUNT_STAGED".into(), list(&|z| z.staged)));
    }
    env
}

fn push(argv: &mut Vec<OsString>, items: &[&OsStr]) {
    argv.extend(items.iter().map(|s| s.to_os_string()));
}

/// bwrap's arguments (without the `bwrap` itself), ending with `--` and the
/// command.
pub fn bwrap_args(iso: &Isolation, host: &HostFacts) -> Result<Vec<OsString>, IsolateError> {
    if iso.command.is_empty() {
        return Err(IsolateError::NoCommand);
    }
    let taken: Vec<String> = host
        .system
        .iter()
        .filter_map(|e| e.path().file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .chain(RESERVED.iter().map(|s| s.to_string()))
        .collect();
    if let Some(z) = iso.zones.iter().find(|z| taken.contains(&z.name)) {
        return Err(IsolateError::ReservedName(z.name.clone()));
    }

    let mut a: Vec<OsString> = Vec::new();
    let s = |x: &str| OsString::from(x);
    // Namespaces and process hygiene.
    push(
        &mut a,
        &[
            OsStr::new("--unshare-all"),
            OsStr::new("--die-with-parent"),
            OsStr::new("--new-session"),
            OsStr::new("--cap-drop"),
            OsStr::new("ALL"),
            OsStr::new("--hostname"),
            OsStr::new("zonemount"),
        ],
    );
    if iso.network {
        a.push(s("--share-net"));
    }
    // System directories, read-only.
    for e in &host.system {
        match e {
            SystemEntry::Dir(p) => push(
                &mut a,
                &[OsStr::new("--ro-bind"), p.as_os_str(), p.as_os_str()],
            ),
            SystemEntry::Symlink { path, target } => push(
                &mut a,
                &[
                    OsStr::new("--symlink"),
                    target.as_os_str(),
                    path.as_os_str(),
                ],
            ),
        }
    }
    // A minimal /etc. bwrap would create it 0700; everyone must read it.
    push(
        &mut a,
        &[
            OsStr::new("--perms"),
            OsStr::new("0755"),
            OsStr::new("--dir"),
            OsStr::new("/etc"),
        ],
    );
    for p in &host.etc {
        push(
            &mut a,
            &[OsStr::new("--ro-bind-try"), p.as_os_str(), p.as_os_str()],
        );
    }
    // Private /proc, /dev, /tmp. /proc read-only: a worker run as root
    // (uid 0 on the host, capabilities dropped) may write every root-owned
    // file there that checks the uid alone, such as the kernel settings
    // under /proc/sys (`kernel.core_pattern` would run a program of its
    // own as host root); bwrap covers only some of /proc.
    push(
        &mut a,
        &[
            OsStr::new("--proc"),
            OsStr::new("/proc"),
            OsStr::new("--remount-ro"),
            OsStr::new("/proc"),
            OsStr::new("--dev"),
            OsStr::new("/dev"),
            OsStr::new("--perms"),
            OsStr::new("1777"),
            OsStr::new("--tmpfs"),
            OsStr::new("/tmp"),
        ],
    );
    // The refusal log: readable, not writable, not removable.
    if let Some(r) = iso.refusals {
        push(
            &mut a,
            &[
                OsStr::new("--ro-bind"),
                r.as_os_str(),
                OsStr::new(REFUSALS_IN_SANDBOX),
            ],
        );
    }
    // A backing dir inside an exposed system dir: cover it, so the only way
    // to it is the policed mount.
    for z in iso.zones {
        let exposed = host
            .system
            .iter()
            .filter_map(|e| match e {
                SystemEntry::Dir(p) => Some(p.as_path()),
                SystemEntry::Symlink { .. } => None,
            })
            .chain(host.etc.iter().map(PathBuf::as_path))
            .any(|sys| z.backing.starts_with(sys));
        if exposed {
            push(&mut a, &[OsStr::new("--tmpfs"), z.backing.as_os_str()]);
        }
    }
    // The zones.
    for z in iso.zones {
        let dst = Path::new("/").join(&z.name);
        let (how, src) = match z.direct {
            Some(fd) => (
                if z.writable {
                    "--bind-fd"
                } else {
                    "--ro-bind-fd"
                },
                OsString::from(fd.to_string()),
            ),
            None => (
                if z.writable { "--bind" } else { "--ro-bind" },
                iso.mountpoint.join(&z.name).into_os_string(),
            ),
        };
        push(&mut a, &[OsStr::new(how), &src, dst.as_os_str()]);
    }
    a.push(s("--remount-ro"));
    a.push(s("/"));
    // Environment and working directory.
    a.push(s("--clearenv"));
    for (k, v) in iso.env {
        push(&mut a, &[OsStr::new("--setenv"), k, v]);
    }
    let home = home_in_sandbox(iso.zones);
    push(&mut a, &[OsStr::new("--chdir"), home.as_os_str()]);
    a.push(s("--"));
    a.extend(iso.command.iter().cloned());
    Ok(a)
}

/// Whether `bwrap` takes `--ro-bind-fd`/`--bind-fd` (bubblewrap 0.10, and
/// older ones where a distribution backported it), as its `--help` says.
pub fn bwrap_binds_fds(bwrap: &Path) -> bool {
    std::process::Command::new(bwrap)
        .arg("--help")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("--ro-bind-fd"))
}

/// `bwrap` on PATH, if installed.
pub fn find_bwrap() -> Option<PathBuf> {
    find_on_path("bwrap")
}

/// A program on PATH (or the default PATH).
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| DEFAULT_PATH.into());
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests;

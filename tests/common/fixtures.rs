//! Fixtures: the two zone modes (and `both_modes!`, which runs a test in
//! each), project configs for them, and [`Setup`], the builder that lays out
//! a temp dir (config, workers, backing files, mountpoint) and mounts it.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use tempfile::TempDir;

use super::mount::{MOUNT_TIMEOUT, TestMount, wait_mounted};
use super::run::{BIN, Out, default_mount_args, run};

/// The two ways zones find their backing dirs (DESIGN §2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `<config dir>/.sandbox/<zone>`, created on mount.
    Sandboxed,
    /// `<tmp>/direct/<zone>`, absolute in the config, created by the fixture.
    Direct,
}

/// Where a zone's backing dir lives, relative to the fixture's temp dir.
pub fn backing_rel(mode: Mode, zone: &str) -> String {
    match mode {
        Mode::Sandboxed => format!(".sandbox/{zone}"),
        Mode::Direct => format!("direct/{zone}"),
    }
}

/// A project config declaring `zones` as `(name, flow-map body)`; the body
/// is the rest of the zone spec after `path`, e.g. `"mode: ro"`.
/// Direct mode uses the `{TMP}` placeholder for absolute paths.
pub fn zones_yaml(mode: Mode, zones: &[(&str, &str)]) -> String {
    let mut y = String::from("sandbox:\n");
    match mode {
        Mode::Sandboxed => y.push_str("  mode: sandboxed\n  root: .sandbox\n"),
        Mode::Direct => y.push_str("  mode: direct\n"),
    }
    y.push_str("  zones:\n");
    for (name, spec) in zones {
        let path = match mode {
            Mode::Sandboxed => format!("./{name}"),
            Mode::Direct => format!("\"{{TMP}}/direct/{name}\""),
        };
        let sep = if spec.is_empty() { "" } else { ", " };
        y.push_str(&format!("    {name}: {{ path: {path}{sep}{spec} }}\n"));
    }
    y
}

/// Builder for a test mount: config, workers, backing files, mountpoint.
pub struct Setup {
    tmp: TempDir,
    root: PathBuf,
    yaml: Option<String>,
    workers: Vec<String>,
    args: Vec<String>,
    backing: BTreeMap<String, PathBuf>,
    cwd: Option<PathBuf>,
    mnt: PathBuf,
    create_mnt: bool,
    config_rel: String,
    /// Leave out [`default_mount_args`] (tests of approvals themselves).
    asking: bool,
    env: Vec<(String, String)>,
}

impl Setup {
    /// A fixture whose config is `yaml` with `{TMP}` replaced by the temp
    /// dir's absolute path. Zones not registered with [`Setup::backing_dir`]
    /// are assumed at `<tmp>/.sandbox/<zone>`.
    pub fn new(yaml: &str) -> Self {
        // 0755 whatever the umask (a test that mounts in-process clears
        // it): a stage dir is refused under a dir others may write in.
        let tmp = tempfile::Builder::new()
            .prefix("zonemount-test.")
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .tempdir()
            .expect("create temp dir");
        // Canonical, so it matches /proc/mounts even if TMPDIR is a symlink.
        let root = fs::canonicalize(tmp.path()).expect("canonicalize temp dir");
        let yaml = yaml.replace("{TMP}", &root.to_string_lossy());
        let mnt = root.join("mnt");
        Setup {
            tmp,
            root,
            yaml: Some(yaml),
            workers: Vec::new(),
            args: Vec::new(),
            backing: BTreeMap::new(),
            cwd: None,
            mnt,
            create_mnt: true,
            config_rel: "project.yaml".to_string(),
            asking: false,
            env: Vec::new(),
        }
    }

    /// A fixture with no config file and no `--config` (cwd defaults).
    pub fn without_config() -> Self {
        let mut s = Setup::new("");
        s.yaml = None;
        s
    }

    /// A project of `zones` in `mode` (see [`zones_yaml`]); direct-mode
    /// backing dirs are created, sandboxed ones are left to the mount.
    pub fn zones(mode: Mode, zones: &[(&str, &str)]) -> Self {
        let mut s = Setup::new(&zones_yaml(mode, zones));
        for (name, _) in zones {
            let rel = backing_rel(mode, name);
            if mode == Mode::Direct {
                fs::create_dir_all(s.root.join(&rel)).expect("create direct backing dir");
            }
            s.backing.insert((*name).to_string(), s.root.join(rel));
        }
        s
    }

    /// The temp dir (canonical path).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Register `zone`'s backing dir as `<tmp>/rel` (or absolute `rel`).
    pub fn backing_dir(mut self, zone: &str, rel: &str) -> Self {
        let p = self.root.join(rel);
        self.backing.insert(zone.to_string(), p);
        self
    }

    /// Path of `rel` inside `zone`'s backing dir.
    pub fn backing(&self, zone: &str, rel: &str) -> PathBuf {
        backing_path(&self.root, &self.backing, zone, rel)
    }

    /// Append worker files (`--worker`), applied in order.
    pub fn with_workers(mut self, workers: &[&str]) -> Self {
        self.workers.extend(workers.iter().map(|w| w.to_string()));
        self
    }

    /// One more command-line argument before the mountpoint.
    pub fn arg(mut self, a: &str) -> Self {
        self.args.push(a.to_string());
        self
    }

    /// An environment variable for `zonemount mount` (and, through the
    /// guard, for [`TestMount::zonemount`]).
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// Run the mount from this directory (default: the temp dir).
    pub fn cwd(mut self, dir: &Path) -> Self {
        self.cwd = Some(dir.to_path_buf());
        self
    }

    /// Mount on `<tmp>/rel` instead of `<tmp>/mnt`; `create` makes it.
    pub fn mountpoint(mut self, rel: &str, create: bool) -> Self {
        self.mnt = self.root.join(rel);
        self.create_mnt = create;
        self
    }

    /// Mount without [`default_mount_args`]: `ask` really waits for a
    /// decision (give `--approval-timeout` to bound it).
    pub fn asking(mut self) -> Self {
        self.asking = true;
        self
    }

    /// Write the config as `<tmp>/rel` instead of `<tmp>/project.yaml`.
    pub fn config_at(mut self, rel: &str) -> Self {
        self.config_rel = rel.to_string();
        self
    }

    /// Pre-create a file (and its parents) in `zone`'s backing dir.
    pub fn file(self, zone: &str, rel: &str, content: impl AsRef<[u8]>) -> Self {
        let p = self.backing(zone, rel);
        fs::create_dir_all(p.parent().expect("parent")).expect("create backing parents");
        fs::write(&p, content).expect("write backing file");
        self
    }

    /// Pre-create a directory (and parents) in `zone`'s backing dir.
    pub fn dir(self, zone: &str, rel: &str) -> Self {
        fs::create_dir_all(self.backing(zone, rel)).expect("create backing dir");
        self
    }

    /// Pre-create a symlink in `zone`'s backing dir.
    pub fn symlink(self, zone: &str, rel: &str, target: &str) -> Self {
        let p = self.backing(zone, rel);
        fs::create_dir_all(p.parent().expect("parent")).expect("create backing parents");
        std::os::unix::fs::symlink(target, &p).expect("create backing symlink");
        self
    }

    /// Write config and workers, run `zonemount mount`, and return its
    /// output plus a guard — without waiting for the mount to appear.
    pub fn mount_command_only(self) -> (Out, TestMount) {
        let Setup {
            tmp,
            root,
            yaml,
            workers,
            args,
            backing,
            cwd,
            mnt,
            create_mnt,
            config_rel,
            asking,
            env,
        } = self;
        if create_mnt {
            fs::create_dir_all(&mnt).expect("create mountpoint");
        }
        let mut argv: Vec<OsString> = vec!["mount".into()];
        let config = yaml.map(|y| {
            let p = root.join(&config_rel);
            fs::create_dir_all(p.parent().expect("parent")).expect("create config dir");
            fs::write(&p, y).expect("write config");
            p
        });
        if let Some(c) = &config {
            argv.push("--config".into());
            argv.push(c.into());
        }
        for (i, w) in workers.iter().enumerate() {
            let p = root.join(format!("worker{i}.worker"));
            fs::write(&p, w).expect("write worker");
            argv.push("--worker".into());
            argv.push(p.into());
        }
        if !asking {
            argv.extend(default_mount_args().iter().map(OsString::from));
        }
        argv.extend(args.iter().map(OsString::from));
        argv.push(mnt.clone().into());
        let cwd = cwd.unwrap_or_else(|| root.clone());
        let guard = TestMount {
            tmp,
            root,
            mnt,
            backing,
            cwd: cwd.clone(),
            tried_mount: true,
            env: env.clone(),
        };
        let mut guard = guard;
        let out = run(
            Command::new(BIN)
                .args(&argv)
                .current_dir(&cwd)
                .envs(env.iter().map(|(k, v)| (k, v))),
            Duration::from_secs(30),
        );
        // A refused mount needs no `zonemount unmount` (Drop still checks
        // /proc/mounts in case it mounted anyway).
        guard.tried_mount = out.success();
        (out, guard)
    }

    /// Like [`Setup::mount_command_only`], then, on exit 0, poll
    /// `/proc/mounts` until the mountpoint is live (bounded).
    pub fn try_mount(self) -> (Out, TestMount) {
        let (out, guard) = self.mount_command_only();
        if out.success() {
            wait_mounted(&guard.mnt);
        }
        (out, guard)
    }

    /// Mount, or panic with the binary's output.
    #[track_caller]
    pub fn mount(self) -> TestMount {
        let (out, guard) = self.try_mount();
        assert!(out.success(), "zonemount mount failed: {}", out.describe());
        assert!(
            guard.is_mounted(),
            "zonemount mount exited 0 but {} is not in /proc/mounts after {MOUNT_TIMEOUT:?}",
            guard.mnt.display()
        );
        guard
    }
}

/// `rel` inside `zone`'s backing dir: the registered one, else
/// `<root>/.sandbox/<zone>`. Shared by [`Setup`] and [`TestMount`].
pub(super) fn backing_path(
    root: &Path,
    map: &BTreeMap<String, PathBuf>,
    zone: &str,
    rel: &str,
) -> PathBuf {
    let base = map
        .get(zone)
        .cloned()
        .unwrap_or_else(|| root.join(".sandbox").join(zone));
    if rel.is_empty() { base } else { base.join(rel) }
}

/// Both-modes test generator: for each `name`, a module `name` with
/// `sandboxed` and `direct` tests calling `name(Mode)`.
#[macro_export]
macro_rules! both_modes {
    ($($name:ident),* $(,)?) => { $(
        mod $name {
            #[test]
            fn sandboxed() {
                super::$name($crate::common::Mode::Sandboxed)
            }
            #[test]
            fn direct() {
                super::$name($crate::common::Mode::Direct)
            }
        }
    )* };
}

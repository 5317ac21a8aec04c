//! The change report, diff, commit and discard over a real overlay (as
//! the daemon mounts it): operations through the overlay's fd, then the
//! layers compared.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags};

use super::*;
use crate::stage::sys::overlay;

struct Stage {
    _dir: tempfile::TempDir,
    _elsewhere: Option<tempfile::TempDir>,
    lower: PathBuf,
    upper: PathBuf,
    zone: PathBuf,
    view: OwnedFd,
    prefix: &'static str,
}

/// A backing dir with files, and an overlay over it; None (after saying
/// why) where overlays can't be mounted, outside CI.
fn stage() -> Option<Stage> {
    stage_in(None)
}

/// [`stage`], with the stage's dir under `elsewhere` (another filesystem:
/// a commit then copies instead of moving).
fn stage_in(elsewhere: Option<&Path>) -> Option<Stage> {
    let dir = tempfile::tempdir().unwrap();
    let other = elsewhere.map(|e| tempfile::tempdir_in(e).unwrap());
    let p = dir.path();
    let zone = other
        .as_ref()
        .map_or_else(|| p.join("zone"), |o| o.path().join("zone"));
    let lower = p.join("lower");
    let (upper, work) = (zone.join("upper"), zone.join("work"));
    for d in [&lower, &upper, &work] {
        fs::create_dir_all(d).unwrap();
    }
    fs::write(lower.join("f"), "one\ntwo\n").unwrap();
    fs::write(lower.join("keep"), "same\n").unwrap();
    fs::write(lower.join("gone"), "bye\n").unwrap();
    fs::write(lower.join("moved"), "moving\n").unwrap();
    fs::create_dir_all(lower.join("d/sub")).unwrap();
    fs::write(lower.join("d/sub/z"), "z\n").unwrap();
    fs::write(lower.join("bin"), [0u8, 1, 2, 3]).unwrap();
    let (view, how) = match overlay::mount(&overlay::Layers {
        lower: &[&lower],
        upper: Some((&upper, &work)),
    }) {
        Ok(m) => m,
        Err(e) if std::env::var_os("CI").is_none() => {
            println!("ZONEMOUNT-SKIP: stage::tree: {e}");
            return None;
        }
        Err(e) => panic!("overlay: {e}"),
    };
    Some(Stage {
        _dir: dir,
        _elsewhere: other,
        lower,
        upper,
        zone,
        view,
        prefix: how.prefix(),
    })
}

impl Stage {
    fn layers(&self) -> Layers {
        Layers::open(&self.lower, &self.upper, self.prefix).unwrap()
    }
    fn fp(&self) -> Fingerprints {
        Fingerprints::open(&self.zone).unwrap()
    }
    /// What the daemon does before a change: note the backing object.
    fn note(&self, rel: &str) {
        let st = rustix::fs::lstat(self.lower.join(rel)).ok();
        self.fp()
            .note(Path::new(rel), st.as_ref().map(Fingerprint::of))
            .unwrap();
    }
    fn write(&self, rel: &str, data: &str, append: bool) {
        self.note(rel);
        let flags = OFlags::CREATE
            | OFlags::WRONLY
            | if append {
                OFlags::APPEND
            } else {
                OFlags::TRUNC
            };
        let fd = rustix::fs::openat(&self.view, rel, flags, Mode::from_raw_mode(0o644)).unwrap();
        rustix::io::write(&fd, data.as_bytes()).unwrap();
    }
    fn unlink(&self, rel: &str) {
        self.note(rel);
        rustix::fs::unlinkat(&self.view, rel, AtFlags::empty()).unwrap();
    }
    fn rename(&self, from: &str, to: &str) {
        self.note(from);
        self.note(to);
        rustix::fs::renameat(&self.view, from, &self.view, to).unwrap();
    }
    fn rm_tree(&self, rel: &str) {
        self.note(rel);
        let d = rustix::fs::openat(
            &self.view,
            rel,
            OFlags::RDONLY | OFlags::DIRECTORY,
            Mode::empty(),
        )
        .unwrap();
        fsops::remove_all(self.view.as_fd(), rel.as_ref()).unwrap();
        drop(d);
    }
}

/// A tree as a sorted listing: path, type, mode, content.
fn listing(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let md = fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            let what = if md.file_type().is_symlink() {
                format!("-> {}", fs::read_link(&p).unwrap().display())
            } else if md.is_dir() {
                stack.push(p.clone());
                "dir".into()
            } else {
                format!("{:?}", fs::read(&p).unwrap())
            };
            out.push(format!("{rel} {:o} {what}", md.mode() & 0o7777));
        }
    }
    out.sort();
    out
}

/// What the overlay shows, as a listing (through /proc/self/fd).
fn view_listing(s: &Stage) -> Vec<String> {
    use std::os::fd::AsRawFd;
    listing(Path::new(&format!("/proc/self/fd/{}", s.view.as_raw_fd())))
}

fn kinds(list: &[Change]) -> Vec<(String, Kind)> {
    list.iter()
        .map(|c| (c.path.display().to_string(), c.kind))
        .collect()
}

/// Let the host's changes get other times than the notes (the kernel's
/// clock moves in ticks of a few ms).
fn tick() {
    std::thread::sleep(std::time::Duration::from_millis(20));
}

mod commit;
mod conflicts;
mod deep;
mod fingerprints;
mod property;

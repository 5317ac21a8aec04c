//! The property: whatever the worker staged and whatever the host did
//! after, a commit without force leaves every backing path the host
//! changed (made, altered, removed) exactly as the host left it; with no
//! host change it applies everything.

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;

use proptest::prelude::*;

use super::*;

/// The paths both sides act on (the stage's backing tree holds f,
/// gone, d/sub/z; d/y and n/... are not there).
const PATHS: [&str; 9] = [
    "f", "gone", "d", "d/sub", "d/sub/z", "d/y", "n", "n/m", "n/m/k",
];

#[derive(Debug, Clone)]
enum Worker {
    Write(usize),
    Mkdir(usize),
    Remove(usize),
    Symlink(usize),
    Rename(usize, usize),
    Chmod(usize),
}

#[derive(Debug, Clone)]
enum Host {
    Write(usize),
    Mkdir(usize),
    Remove(usize),
    /// Whatever is there replaced by a symlink to `d`.
    Symlink(usize),
    /// Whatever is there replaced by a file.
    File(usize),
    Chmod(usize),
}

fn worker_op() -> impl Strategy<Value = Worker> {
    let p = 0..PATHS.len();
    prop_oneof![
        p.clone().prop_map(Worker::Write),
        p.clone().prop_map(Worker::Mkdir),
        p.clone().prop_map(Worker::Remove),
        p.clone().prop_map(Worker::Symlink),
        (p.clone(), p.clone()).prop_map(|(a, b)| Worker::Rename(a, b)),
        p.prop_map(Worker::Chmod),
    ]
}

fn host_op() -> impl Strategy<Value = Host> {
    let p = 0..PATHS.len();
    prop_oneof![
        p.clone().prop_map(Host::Write),
        p.clone().prop_map(Host::Mkdir),
        p.clone().prop_map(Host::Remove),
        p.clone().prop_map(Host::Symlink),
        p.clone().prop_map(Host::File),
        p.prop_map(Host::Chmod),
    ]
}

/// A worker's change through the overlay, noted first as the daemon
/// notes (each path an operation names, a tree removed entry by
/// entry); a failing one is left out, as a worker's would be.
fn act(s: &Stage, op: &Worker, i: usize) {
    let v = &s.view;
    let _ = match *op {
        Worker::Write(p) => {
            s.note(&resolved(v, PATHS[p], false));
            rustix::fs::openat(
                v,
                PATHS[p],
                OFlags::CREATE | OFlags::WRONLY | OFlags::TRUNC | OFlags::NOFOLLOW,
                Mode::from_raw_mode(0o644),
            )
            .and_then(|fd| rustix::io::write(&fd, format!("w{i}\n").as_bytes()).map(drop))
        }
        Worker::Mkdir(p) => {
            s.note(&resolved(v, PATHS[p], false));
            rustix::fs::mkdirat(v, PATHS[p], Mode::from_raw_mode(0o755))
        }
        Worker::Remove(p) => {
            remove(s, Path::new(PATHS[p]));
            Ok(())
        }
        Worker::Symlink(p) => {
            s.note(&resolved(v, PATHS[p], false));
            rustix::fs::symlinkat("f", v, PATHS[p])
        }
        Worker::Rename(a, b) => {
            s.note(&resolved(v, PATHS[a], false));
            s.note(&resolved(v, PATHS[b], false));
            rustix::fs::renameat(v, PATHS[a], v, PATHS[b])
        }
        Worker::Chmod(p) => {
            s.note(&resolved(v, PATHS[p], true));
            rustix::fs::chmodat(v, PATHS[p], Mode::from_raw_mode(0o700), AtFlags::empty())
        }
    };
}

/// `rel` in the view as the kernel resolves it before the daemon sees
/// the call: the symlinks among its dirs followed, and its last part's
/// too when `last` (chmod follows; create, mkdir, symlink, rename and
/// unlink don't). The daemon notes the path it is then asked about.
fn resolved(v: &OwnedFd, rel: &str, last: bool) -> String {
    let mut done = PathBuf::new();
    let mut rest: Vec<PathBuf> = Path::new(rel).iter().rev().map(PathBuf::from).collect();
    let mut hops = 0;
    while let Some(c) = rest.pop() {
        if c == Path::new("..") {
            done.pop();
            continue;
        }
        let at = done.join(&c);
        if (last || !rest.is_empty()) && hops < 16 {
            if let Ok(to) = rustix::fs::readlinkat(v, &at, Vec::new()) {
                hops += 1;
                let to = PathBuf::from(std::ffi::OsStr::from_bytes(to.to_bytes()));
                rest.extend(to.iter().rev().map(PathBuf::from));
                continue;
            }
        }
        done = at;
    }
    done.to_str().unwrap().to_owned()
}

/// `rm -r` through the overlay: each entry noted, then removed.
fn remove(s: &Stage, rel: &Path) {
    let v = &s.view;
    let Ok(st) = rustix::fs::statat(v, rel, AtFlags::SYMLINK_NOFOLLOW) else {
        return;
    };
    if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory {
        if let Ok(d) = rustix::fs::openat(v, rel, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())
        {
            let names: Vec<PathBuf> = rustix::fs::Dir::read_from(&d)
                .unwrap()
                .filter_map(Result::ok)
                .map(|e| PathBuf::from(std::ffi::OsStr::from_bytes(e.file_name().to_bytes())))
                .filter(|n| n != Path::new(".") && n != Path::new(".."))
                .collect();
            for n in names {
                remove(s, &rel.join(n));
            }
        }
        s.note(&resolved(v, rel.to_str().unwrap(), false));
        let _ = rustix::fs::unlinkat(v, rel, AtFlags::REMOVEDIR);
    } else {
        s.note(&resolved(v, rel.to_str().unwrap(), false));
        let _ = rustix::fs::unlinkat(v, rel, AtFlags::empty());
    }
}

/// A host change in the backing dir (a failing one left out).
fn host(s: &Stage, op: &Host, i: usize) {
    let at = |p: usize| s.lower.join(PATHS[p]);
    let clear = |p: &Path| {
        let _ = fs::remove_file(p).or_else(|_| fs::remove_dir_all(p));
    };
    let _ = match *op {
        Host::Write(p) => fs::write(at(p), format!("h{i}\n")),
        Host::Mkdir(p) => fs::create_dir(at(p)).and_then(|()| fs::write(at(p).join("h"), "h\n")),
        Host::Remove(p) => {
            clear(&at(p));
            Ok(())
        }
        Host::Symlink(p) => {
            clear(&at(p));
            std::os::unix::fs::symlink("d", at(p))
        }
        Host::File(p) => {
            clear(&at(p));
            fs::write(at(p), format!("h{i}\n"))
        }
        Host::Chmod(p) => fs::set_permissions(at(p), fs::Permissions::from_mode(0o711)),
    };
}

/// Each backing path: what it is (its inode, and content, target or
/// mode), never followed through a symlink.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for e in fs::read_dir(root.join(&rel)).unwrap() {
            let p = rel.join(e.unwrap().file_name());
            let full = root.join(&p);
            let md = fs::symlink_metadata(&full).unwrap();
            let what = if md.file_type().is_symlink() {
                format!("link {} -> {:?}", md.ino(), fs::read_link(&full).unwrap())
            } else if md.is_dir() {
                stack.push(p.clone());
                format!("dir {} {:o}", md.ino(), md.mode())
            } else {
                format!(
                    "file {} {:o} {:?}",
                    md.ino(),
                    md.mode(),
                    fs::read(&full).unwrap()
                )
            };
            out.insert(p, what);
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn a_commit_without_force_never_touches_what_the_host_changed(
        work in prop::collection::vec(worker_op(), 1..8),
        hosts in prop::collection::vec(host_op(), 0..3),
        only in prop::collection::vec(0..PATHS.len(), 0..2),
        during in any::<bool>(),
    ) {
        holds(&work, &hosts, &only, during)?;
    }
}

/// A case proptest found (CI, 2026-11-28): a chmod through a symlink the
/// worker made changes the link's target, which the host then removed.
#[test]
fn a_chmod_through_a_new_symlink_then_a_host_removal_is_a_conflict() {
    holds(
        &[Worker::Symlink(6), Worker::Chmod(6)],
        &[Host::Remove(0)],
        &[],
        false,
    )
    .unwrap();
}

/// Another (a run of 4,000 cases): while the commit runs, the host makes
/// the dir the worker made; the worker's mode is not set on the host's.
#[test]
fn a_dir_the_host_makes_while_the_commit_runs_is_a_conflict() {
    holds(
        &[Worker::Mkdir(6), Worker::Chmod(6)],
        &[Host::Mkdir(6)],
        &[],
        true,
    )
    .unwrap();
}

fn holds(
    work: &[Worker],
    hosts: &[Host],
    only: &[usize],
    during: bool,
) -> Result<(), TestCaseError> {
    // A partial commit (`commit PATH...`) when `only` names some.
    let filter: Vec<PathBuf> = only.iter().map(|i| PathBuf::from(PATHS[*i])).collect();
    let Some(s) = stage() else { return Ok(()) };
    for (i, op) in work.iter().enumerate() {
        act(&s, op, i);
    }
    let view = view_listing(&s);
    let before = snapshot(&s.lower);
    // The host acts before the commit, or (`during`) while it
    // runs: after its checks, before its first step.
    let mut hosted = None;
    let mut host_acts = || {
        if !hosts.is_empty() {
            tick();
        }
        for (i, op) in hosts.iter().enumerate() {
            host(&s, op, i);
        }
        hosted = Some(snapshot(&s.lower));
    };
    let l = s.layers();
    let r = if during {
        super::super::apply::commit_with(&l, &s.fp(), &s.zone, &filter, false, &mut host_acts)
    } else {
        host_acts();
        commit(&l, &s.fp(), &s.zone, &filter, false)
    };
    prop_assert!(r.is_ok(), "commit: {r:?}");
    let hosted = hosted.unwrap();
    let r = r.unwrap();
    let after = snapshot(&s.lower);
    let mut touched: Vec<&PathBuf> = before.keys().chain(hosted.keys()).collect();
    touched.sort();
    touched.dedup();
    for p in touched {
        if before.get(p) != hosted.get(p) {
            prop_assert_eq!(
                after.get(p),
                hosted.get(p),
                "{} changed by the host, then by the commit: {:#?}",
                p.display(),
                r
            );
        }
    }
    if hosts.is_empty() {
        prop_assert!(r.conflicts.is_empty(), "{:#?}", r);
        if filter.is_empty() {
            prop_assert_eq!(listing(&s.lower), view);
        } else {
            // The rest commits after it without a conflict.
            let r = commit(&l, &s.fp(), &s.zone, &[], false);
            prop_assert!(r.is_ok(), "commit: {r:?}");
            let r = r.unwrap();
            prop_assert!(r.conflicts.is_empty(), "{:#?}", r);
            prop_assert_eq!(listing(&s.lower), view);
        }
    }
    // --force then applies the rest: nothing staged is left.
    let r = commit(&l, &s.fp(), &s.zone, &[], true);
    prop_assert!(r.is_ok(), "forced commit: {r:?}");
    prop_assert!(changes(&l, &[]).unwrap().is_empty());
    Ok(())
}

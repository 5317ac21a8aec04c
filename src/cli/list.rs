//! `list [--json]` and `unmount --stale`: every zonemount mount this mount
//! namespace can see, from its mount table and the registry's records of
//! this namespace (a container's mounts are not the host's, and the other
//! way round). `unmount --stale` leaves nothing of a dead mount: not the
//! mount, not its record, not its control socket.
//!
//! [`gather`] is pure: it joins the `fuse.zonemount` entries of mountinfo
//! with the records and decides staleness from facts passed in (is this
//! daemon alive? does a stat of this path say ENOTCONN?), so each rule is
//! unit-tested. A mount is stale when its record's daemon is gone (whether
//! the kernel still lists the mount or, its watcher having unmounted it,
//! not), or when a
//! mount without a live daemon answers "transport endpoint is not
//! connected". A path is only stat'ed when no live daemon is known for it:
//! a stat of a live mount could wait on its daemon.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::Failure;
use super::columns::columns;
use crate::mount::{self, MountEntry, Record, Unmounted};

/// One row of `zonemount list`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct MountStatus {
    pub(crate) mountpoint: PathBuf,
    /// The daemon, when its record is readable here.
    pub(crate) pid: Option<u32>,
    pub(crate) config: Option<PathBuf>,
    pub(crate) workers: Vec<PathBuf>,
    /// The `--zone` arguments the mount was given.
    pub(crate) zone_args: Vec<String>,
    pub(crate) zones: Vec<String>,
    /// Start time, seconds since the epoch.
    pub(crate) started: Option<u64>,
    /// Pending approval requests; `None` = unknown (see [`pending_requests`]).
    pub(crate) pending: Option<u64>,
    /// Listed in the kernel's mount table.
    pub(crate) mounted: bool,
    pub(crate) stale: bool,
    /// Why it is stale (or odd), in a few words.
    pub(crate) note: Option<String>,
}

impl MountStatus {
    /// A row for `mountpoint` with nothing known yet but whether the
    /// kernel lists it.
    fn bare(mountpoint: &Path, mounted: bool) -> MountStatus {
        MountStatus {
            mountpoint: mountpoint.to_path_buf(),
            pid: None,
            config: None,
            workers: Vec::new(),
            zone_args: Vec::new(),
            zones: Vec::new(),
            started: None,
            pending: None,
            mounted,
            stale: false,
            note: None,
        }
    }
}

/// Facts about the host that [`gather`] needs, as functions.
pub(crate) struct Probe<'a> {
    /// Whether a pid is the live daemon of a mountpoint.
    pub(crate) daemon_alive: &'a dyn Fn(u32, &Path) -> bool,
    pub(crate) not_connected: &'a dyn Fn(&Path) -> Answer,
}

/// What a mount without a live daemon known for it says to a statfs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// "Transport endpoint is not connected": its daemon is gone.
    NotConnected,
    /// Anything else, in time.
    Answers,
    /// Nothing within [`STATFS_WAIT`]: a daemon alive but stuck (or
    /// stopped); not stale, so `unmount --stale` leaves it alone.
    Silent,
}

/// Join mounts and records into rows, sorted by mountpoint.
pub(crate) fn gather(mounts: &[MountEntry], records: &[Record], probe: &Probe) -> Vec<MountStatus> {
    let mut rows: BTreeMap<PathBuf, MountStatus> = BTreeMap::new();
    for m in mounts.iter().filter(|m| m.is_zonemount()) {
        rows.insert(m.mountpoint.clone(), MountStatus::bare(&m.mountpoint, true));
    }
    for r in records {
        let row = rows
            .entry(r.mountpoint.clone())
            .or_insert_with(|| MountStatus::bare(&r.mountpoint, false));
        row.pid = Some(r.pid);
        row.config = r.config.clone();
        row.workers = r.workers.clone();
        row.zone_args = r.zone_args.clone();
        row.zones = r.zones.clone();
        row.started = Some(r.started);
    }
    for row in rows.values_mut() {
        let alive = row.pid.map(|p| (probe.daemon_alive)(p, &row.mountpoint));
        match alive {
            Some(true) => {
                row.pending = pending_requests(&row.mountpoint);
                if !row.mounted {
                    row.note = Some("daemon running, but not mounted".into());
                }
            }
            Some(false) => {
                row.stale = true;
                let pid = row.pid.unwrap_or_default();
                row.note = Some(if row.mounted {
                    format!("daemon {pid} is gone")
                } else {
                    format!("daemon {pid} is gone; only its record is left")
                });
            }
            None if row.mounted => match (probe.not_connected)(&row.mountpoint) {
                Answer::NotConnected => {
                    row.stale = true;
                    row.note = Some("transport endpoint is not connected".into());
                }
                Answer::Silent => {
                    row.note = Some(format!(
                        "not answering (no reply to statfs within {} s)",
                        STATFS_WAIT.as_secs()
                    ));
                }
                Answer::Answers => {}
            },
            None => {}
        }
    }
    rows.into_values().collect()
}

/// Pending approval requests of a live mount, asked over its control
/// socket (unknown when that can't be reached).
fn pending_requests(mountpoint: &Path) -> Option<u64> {
    super::mount_cmd::pending_count(mountpoint)
}

/// Whether `pid` is the live daemon of `mountpoint`: a running (not
/// zombie) process named zonemount, or, under another name (a copy of the
/// binary, a symlink named otherwise), one whose mount's control socket
/// answers. A pid reused by something else is neither: its socket is gone
/// or refuses (a live mount taken for stale would be unmounted by
/// `unmount --stale`).
fn daemon_alive(pid: u32, mountpoint: &Path) -> bool {
    let Some(stat) = crate::text::read_lossy(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the last ')' (the command name may hold one).
    let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start());
    if state.is_none_or(|s| s.starts_with('Z') || s.starts_with('X')) {
        return false;
    }
    let named = std::fs::read(format!("/proc/{pid}/cmdline"))
        .ok()
        .and_then(|c| {
            let argv0 = c.split(|b| *b == 0).next()?.to_vec();
            let name = Path::new(std::str::from_utf8(&argv0).ok()?).file_name()?;
            Some(name.to_string_lossy().contains("zonemount"))
        })
        .unwrap_or(false);
    named || pending_requests(mountpoint).is_some()
}

/// How long `list` waits for a statfs of a mount no live daemon is
/// known for (another user's, another namespace's, or a stuck one).
pub(crate) const STATFS_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// A dead FUSE mount answers ENOTCONN (or ECONNABORTED while a dead
/// daemon's io_uring queues are torn down). statfs, not stat: the kernel
/// answers a stat of the root from its cache even after the daemon died.
/// A daemon that is alive but stuck never answers: the statfs runs on a
/// thread of its own, left behind after [`STATFS_WAIT`] (its wait for
/// the daemon is a killable one, ended when this process exits).
fn not_connected(path: &Path) -> Answer {
    use rustix::io::Errno;
    let (tx, rx) = std::sync::mpsc::channel();
    let path = path.to_path_buf();
    let spawned = std::thread::Builder::new()
        .name("list-statfs".into())
        .spawn(move || {
            let dead = rustix::fs::statfs(&path)
                .is_err_and(|e| e == Errno::NOTCONN || e == Errno::CONNABORTED);
            let _ = tx.send(dead);
        });
    if spawned.is_err() {
        return Answer::Silent;
    }
    match rx.recv_timeout(STATFS_WAIT) {
        Ok(true) => Answer::NotConnected,
        Ok(false) => Answer::Answers,
        Err(_) => Answer::Silent,
    }
}

fn current() -> Vec<MountStatus> {
    let probe = Probe {
        daemon_alive: &daemon_alive,
        not_connected: &not_connected,
    };
    gather(&mount::mounts(), &mount::records(), &probe)
}

fn show_list(v: &[PathBuf]) -> String {
    v.iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// The table `list` prints.
pub(crate) fn render(rows: &[MountStatus]) -> String {
    if rows.is_empty() {
        return "no zonemount mounts\n".into();
    }
    let mut table = vec![[
        "MOUNTPOINT".to_string(),
        "PID".into(),
        "ZONES".into(),
        "PENDING".into(),
        "STATE".into(),
        "CONFIG".into(),
        "WORKERS".into(),
    ]];
    for r in rows {
        let state = match (&r.note, r.stale) {
            (Some(n), true) => format!("stale: {n}"),
            (Some(n), false) => n.clone(),
            (None, _) => "live".into(),
        };
        table.push([
            // Anyone who can mount names a mountpoint (a worker, too):
            // escaped like every name a person reads.
            crate::text::path(&r.mountpoint),
            r.pid.map_or_else(|| "?".into(), |p| p.to_string()),
            if r.zones.is_empty() && r.pid.is_none() {
                "?".into()
            } else {
                r.zones.join(",")
            },
            r.pending.map_or_else(|| "?".into(), |p| p.to_string()),
            state,
            match (&r.config, r.zone_args.is_empty()) {
                (None, true) => "-".into(),
                (c, _) => super::config_origin(c.as_deref(), &r.zone_args),
            },
            if r.workers.is_empty() {
                "-".into()
            } else {
                show_list(&r.workers)
            },
        ]);
    }
    columns(&table)
}

pub(crate) fn list(json: bool) -> Result<(), Failure> {
    let rows = current();
    if json {
        let text = crate::text::json_pretty(&rows)
            .map_err(|e| Failure::new(1, format!("cannot render JSON: {e}")))?;
        println!("{text}");
    } else {
        print!("{}", render(&rows));
    }
    Ok(())
}

/// `unmount --stale`: each stale mount by its exact path, then its record.
pub(crate) fn unmount_stale() -> Result<(), Failure> {
    let stale: Vec<MountStatus> = current().into_iter().filter(|r| r.stale).collect();
    let swept = mount::sweep_dead_sockets();
    for p in &swept {
        eprintln!(
            "zonemount: removed the dead control socket {} (no mount names it)",
            p.display()
        );
    }
    if stale.is_empty() {
        if swept.is_empty() {
            eprintln!("zonemount: note: no stale mounts; nothing to do");
        }
        return Ok(());
    }
    let mut failed = 0;
    for r in &stale {
        let why = r.note.clone().unwrap_or_default();
        if !r.mounted {
            mount::forget(&r.mountpoint);
            eprintln!(
                "zonemount: removed the record of {} ({why})",
                r.mountpoint.display()
            );
            continue;
        }
        let done = match mount::unmount(&r.mountpoint, false) {
            Err(mount::UnmountError::Busy(_)) => mount::unmount(&r.mountpoint, true),
            other => other,
        };
        match done {
            Ok(Unmounted::Done | Unmounted::NotMounted | Unmounted::DaemonLingers(_)) => {
                mount::forget(&r.mountpoint);
                eprintln!(
                    "zonemount: unmounted stale {} ({why})",
                    r.mountpoint.display()
                );
            }
            Err(e) => {
                failed += 1;
                eprintln!("zonemount: {e}");
            }
        }
    }
    if failed > 0 {
        return Err(Failure::new(
            1,
            format!("{failed} stale mount(s) could not be unmounted"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::mount::FSTYPE;

    fn entry(mp: &str, fstype: &str) -> MountEntry {
        MountEntry {
            mountpoint: mp.into(),
            fstype: fstype.into(),
            source: "zonemount".into(),
            ..MountEntry::default()
        }
    }

    fn record(mp: &str, pid: u32) -> Record {
        Record {
            mountpoint: mp.into(),
            pid,
            config: Some("/p/project.yaml".into()),
            workers: vec!["/p/w.worker".into()],
            zone_args: Vec::new(),
            started: 17,
            zones: vec!["data".into(), "ws".into()],
            control: None,
            cwd: None,
            allow_sensitive_roots: false,
            mntns: None,
        }
    }

    fn rows(mounts: &[MountEntry], records: &[Record]) -> Vec<MountStatus> {
        let alive = |pid: u32, _: &Path| pid < 100;
        let dead_mount = |p: &Path| match p.to_str() {
            Some("/m/dead") => Answer::NotConnected,
            Some("/m/stuck") => Answer::Silent,
            _ => Answer::Answers,
        };
        gather(
            mounts,
            records,
            &Probe {
                daemon_alive: &alive,
                not_connected: &dead_mount,
            },
        )
    }

    #[test]
    fn a_live_mount_with_its_record() {
        let r = rows(&[entry("/m/a", FSTYPE)], &[record("/m/a", 7)]);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].pid, Some(7));
        assert_eq!(r[0].zones, ["data", "ws"]);
        assert!(r[0].mounted && !r[0].stale && r[0].note.is_none());
        assert_eq!(r[0].pending, None);
    }

    #[test]
    fn other_filesystems_are_ignored() {
        let r = rows(&[entry("/", "ext4"), entry("/m/x", "fuse.sshfs")], &[]);
        assert!(r.is_empty());
    }

    #[test]
    fn a_dead_daemon_makes_a_mount_stale_listed_or_not() {
        let r = rows(
            &[entry("/m/a", FSTYPE)],
            &[record("/m/a", 500), record("/m/gone", 501)],
        );
        assert_eq!(r.len(), 2);
        assert!(r.iter().all(|x| x.stale));
        assert!(r[0].mounted && !r[1].mounted);
        assert!(r[1].note.as_deref().unwrap().contains("501"));
    }

    #[test]
    fn without_a_record_enotconn_decides() {
        let r = rows(&[entry("/m/dead", FSTYPE), entry("/m/other", FSTYPE)], &[]);
        assert!(r[0].stale && r[0].pid.is_none());
        assert!(!r[1].stale);
    }

    #[test]
    fn a_mount_that_does_not_answer_is_said_so_and_not_stale() {
        let r = rows(&[entry("/m/stuck", FSTYPE)], &[]);
        assert!(!r[0].stale);
        assert!(
            r[0].note.as_deref().unwrap().contains("not answering"),
            "{r:?}"
        );
        assert!(render(&r).contains("not answering"));
    }

    #[test]
    fn a_live_daemon_is_never_stat_ed() {
        let never = |_: &Path| -> Answer { panic!("stat of a live mount") };
        let alive = |_: u32, _: &Path| true;
        let r = gather(
            &[entry("/m/a", FSTYPE)],
            &[record("/m/a", 7)],
            &Probe {
                daemon_alive: &alive,
                not_connected: &never,
            },
        );
        assert!(!r[0].stale);
    }

    #[test]
    fn the_table_marks_stale_rows() {
        let r = rows(&[entry("/m/a", FSTYPE)], &[record("/m/a", 500)]);
        let t = render(&r);
        assert!(t.starts_with("MOUNTPOINT"), "{t}");
        assert!(t.contains("stale: daemon 500 is gone"), "{t}");
        assert!(t.contains("data,ws"), "{t}");
        assert_eq!(render(&[]), "no zonemount mounts\n");
    }

    #[test]
    fn a_missing_pid_is_not_alive() {
        assert!(!daemon_alive(u32::MAX, Path::new("/nowhere")));
    }
}

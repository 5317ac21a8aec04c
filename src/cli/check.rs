//! `zonemount check [--json] MOUNTPOINT PATH [--read|--write|--delete]`:
//! would this operation be allowed, asked or refused, and why — without
//! touching the file.
//!
//! The mount's zone table is recomputed from its registry record (config,
//! workers, working directory, `--allow-sensitive-roots`) and decided by the
//! pure policy. The only facts taken from the file system are read through
//! the mount itself (`lstat`: exists? directory? size?), which is always
//! allowed and changes nothing. Exit status: 0 allowed, 3 would ask,
//! 4 refused, 1 when MOUNTPOINT is not a live zonemount mount, 2 bad usage.

use std::ffi::OsString;
use std::fs::Metadata;
use std::path::{Component, Path, PathBuf};

use clap::Args;

use super::{ConfigArgs, Failure, zone_table_in};
use crate::mount;
use crate::policy::{self, Action, Decision, Explanation, Loc, Op, Subject, ZoneRules};

pub(crate) const EXIT_ALLOW: u8 = 0;
pub(crate) const EXIT_ASK: u8 = 3;
pub(crate) const EXIT_REFUSE: u8 = 4;

#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// One JSON object: path, zone, operation, decision, errno, reason, message.
    #[arg(long)]
    json: bool,
    /// Open for reading (the default).
    #[arg(long, group = "operation")]
    read: bool,
    /// Write the file's content, or create it when it does not exist.
    #[arg(long, group = "operation")]
    write: bool,
    /// Remove it (unlink or rmdir).
    #[arg(long, group = "operation")]
    delete: bool,
    /// The mount's directory.
    mountpoint: PathBuf,
    /// A path under MOUNTPOINT, taken as a shell would (relative to the
    /// current directory; `..` applied); or, when that is outside the
    /// mount, an absolute path whose first name is one of the mount's
    /// zones, as a worker sees it (`/data/new.txt`). Anything else is
    /// refused (exit 2).
    path: PathBuf,
}

/// The answer, as `--json` prints it.
#[derive(Debug, serde::Serialize)]
struct Answer {
    /// The path as a worker sees it from the mount's root.
    path: String,
    /// `path`'s exact bytes (base64) when they are not UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    path_b64: Option<String>,
    /// `None` at the mount's root.
    zone: Option<String>,
    /// read | write | delete, as asked.
    operation: &'static str,
    /// What the operation amounts to: read, write, create, change, delete.
    action: Action,
    /// allow | ask | refuse
    decision: &'static str,
    /// What the worker would get when refused, e.g. `EROFS`.
    errno: Option<&'static str>,
    reason: String,
    message: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Asked {
    Read,
    Write,
    Delete,
}

impl Asked {
    fn name(self) -> &'static str {
        match self {
            Asked::Read => "read",
            Asked::Write => "write",
            Asked::Delete => "delete",
        }
    }
}

/// Run `check`; returns the exit status.
pub(crate) fn check(a: &CheckArgs) -> Result<u8, Failure> {
    let asked = if a.write {
        Asked::Write
    } else if a.delete {
        Asked::Delete
    } else {
        Asked::Read
    };
    let mp = mount::absolute(&a.mountpoint);
    let zones = mounted_zones(&mp)?;
    let cwd = super::cwd()?;
    let names: Vec<&str> = zones.iter().map(|z| z.name.as_str()).collect();
    let comps = worker_path("check", &mp, &a.mountpoint, &a.path, &cwd, &names)?;
    let answer = answer(&mp, &zones, &comps, asked)?;
    if a.json {
        let text = crate::text::json_pretty(&answer)
            .map_err(|e| Failure::new(1, format!("cannot render JSON: {e}")))?;
        println!("{text}");
    } else {
        let errno = answer.errno.map_or_else(String::new, |e| format!(" ({e})"));
        println!("{}{errno}: {}", answer.decision, answer.message);
    }
    Ok(match answer.decision {
        "allow" => EXIT_ALLOW,
        "ask" => EXIT_ASK,
        _ => EXIT_REFUSE,
    })
}

/// The compiled rules of the live zonemount mount at `mp`.
fn mounted_zones(mp: &Path) -> Result<Vec<ZoneRules>, Failure> {
    let show = mp.display();
    match mount::find_mount(mp) {
        Some(m) if m.is_zonemount() => {}
        Some(m) => {
            return Err(Failure::new(
                1,
                format!("{show} is a {} mount, not a zonemount mount", m.fstype),
            ));
        }
        None => {
            return Err(Failure::new(
                1,
                format!("{show} is not mounted: no zonemount mount there (see zonemount list)"),
            ));
        }
    }
    let rec = mount::read_record(mp).ok_or_else(|| {
        Failure::new(
            1,
            format!(
                "{show} has no mount record in {}: it was mounted by another user or an older zonemount",
                mount::runtime_dir().display()
            ),
        )
    })?;
    let args = ConfigArgs {
        config: rec.config.clone(),
        zone: rec.zone_args.clone(),
        preset: None,
        // It was mounted, so it was allowed; `check` only reads the rules.
        danger: true,
        worker: rec.workers.clone(),
        allow_sensitive_roots: rec.allow_sensitive_roots,
    };
    let cwd = rec.cwd.clone().unwrap_or_else(|| PathBuf::from("/"));
    let table = zone_table_in(&args, &cwd).map_err(|f| {
        Failure::new(
            1,
            format!("cannot load the configuration of {show} again: {}", f.msg),
        )
    })?;
    let names: Vec<&str> = table.zones.iter().map(|z| z.name.as_str()).collect();
    if !rec.zones.is_empty() && names != rec.zones {
        return Err(Failure::new(
            1,
            format!(
                "the configuration of {show} changed since it was mounted (zones now {names:?}, mounted {:?}); remount to check against it",
                rec.zones
            ),
        ));
    }
    table
        .zones
        .iter()
        .map(|z| {
            ZoneRules::compile(z).map_err(|e| {
                Failure::new(1, format!("zone '{}': bad protect pattern: {e}", z.name))
            })
        })
        .collect()
}

/// `path` with `.` dropped and `..` applied (never above `/`): what a
/// shell's open of it reaches, symlinks aside.
fn normalized(path: &Path) -> Vec<OsString> {
    let mut out: Vec<OsString> = Vec::new();
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n.to_os_string()),
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// The components of PATH from the mount's root, by one rule:
/// 1. PATH is taken as a shell would: relative to `cwd` unless absolute,
///    `..` applied. If that is the mountpoint or under it (canonical, or as
///    given), it is that place in the mount.
/// 2. Otherwise an absolute PATH whose first name is one of the mount's
///    `zones` is a worker's view of it, from the mount's root
///    (`/data/new.txt`), as refusal messages write paths.
/// 3. Anything else is outside the mount: refused (exit 2), the message
///    led by `cmd`, the command that was given the path.
pub(crate) fn worker_path(
    cmd: &str,
    mp: &Path,
    given_mp: &Path,
    path: &Path,
    cwd: &Path,
    zones: &[&str],
) -> Result<Vec<OsString>, Failure> {
    let host = normalized(&cwd.join(path));
    let given = normalized(&cwd.join(given_mp));
    for root in [normalized(mp), given] {
        if let Some(rest) = host.strip_prefix(root.as_slice()) {
            return Ok(rest.to_vec());
        }
    }
    let view = normalized(path);
    if path.is_absolute() && view.first().is_some_and(|z| zones.iter().any(|n| z == n)) {
        return Ok(view);
    }
    let shown: PathBuf = std::iter::once(OsString::from("/")).chain(host).collect();
    let listed: Vec<String> = zones.iter().map(|z| format!("/{z}/...")).collect();
    let worker_form = if listed.is_empty() {
        String::new()
    } else {
        format!(
            ", or a worker's path from the mount's root ({})",
            listed.join(", ")
        )
    };
    Err(Failure::new(
        2,
        format!(
            "{cmd}: {} ({}) is outside the mount {}; give a path under it{worker_form}",
            path.display(),
            shown.display(),
            mp.display()
        ),
    ))
}

/// What a worker's operation on `comps` would meet.
fn answer(
    mp: &Path,
    zones: &[ZoneRules],
    comps: &[OsString],
    asked: Asked,
) -> Result<Answer, Failure> {
    let shown: PathBuf = std::iter::once(OsString::from("/"))
        .chain(comps.iter().cloned())
        .collect();
    let Some((first, rest)) = comps.split_first() else {
        // The mount's root: readable, never changed.
        let op = match asked {
            Asked::Read => Op::Read {
                at: Loc::root(),
                size: 0,
            },
            Asked::Write => Op::Metadata {
                at: Loc::root(),
                is_dir: true,
            },
            Asked::Delete => Op::Remove {
                at: Loc::root(),
                is_dir: true,
            },
        };
        return Ok(decided(&op, None, zones, asked));
    };
    let Some(zone) = zones.iter().find(|z| z.name.as_str() == first) else {
        let at = Loc {
            zone: None,
            path: Path::new(first),
        };
        let op = match asked {
            Asked::Read => {
                let e = missing(&Subject::new(Action::Read, at), zones);
                return Ok(refused(&shown, None, asked, Action::Read, libc::ENOENT, e));
            }
            Asked::Write => Op::NewName { at, is_dir: false },
            Asked::Delete => Op::Remove { at, is_dir: true },
        };
        return Ok(decided(&op, None, zones, asked));
    };
    let rel: PathBuf = rest.iter().collect();
    let at = Loc::in_zone(zone, &rel);
    // What hides an entry of any kind (a sensitive root) is decided before
    // the mount is asked anything: it would say ENOENT.
    if let Decision::Refuse(r) = policy::decide(&Op::Look { at, is_dir: None }) {
        let action = match asked {
            Asked::Read => Action::Read,
            Asked::Write => Action::Write,
            Asked::Delete => Action::Delete,
        };
        let e = policy::explain(&Subject::new(action, at), r, zones);
        return Ok(refused(&shown, Some(zone), asked, action, r.errno(), e));
    }
    let meta = stat_through(&mp.join(shown.strip_prefix("/").unwrap_or(&shown)))?;
    let op = match (asked, &meta) {
        (Asked::Read, Some(m)) => Op::Read {
            at,
            size: if m.is_file() { m.len() } else { 0 },
        },
        (Asked::Write, Some(m)) if m.is_dir() => Op::Metadata { at, is_dir: true },
        (Asked::Write, Some(_)) => Op::WriteContent { at, new_size: None },
        (Asked::Write, None) => Op::NewName { at, is_dir: false },
        (Asked::Delete, Some(m)) => Op::Remove {
            at,
            is_dir: m.is_dir(),
        },
        (Asked::Read | Asked::Delete, None) => {
            let action = if asked == Asked::Read {
                Action::Read
            } else {
                Action::Delete
            };
            let s = Subject::new(action, at);
            // A file name outside `suffixes` is there for nobody.
            let look = Op::Look {
                at,
                is_dir: Some(false),
            };
            let (errno, e) = match policy::decide(&look) {
                Decision::Refuse(r) => (r.errno(), policy::explain(&s, r, zones)),
                _ => (libc::ENOENT, missing(&s, zones)),
            };
            return Ok(refused(&shown, Some(zone), asked, action, errno, e));
        }
    };
    let mut a = decided(&op, meta.as_ref(), zones, asked);
    if matches!(op, Op::NewName { .. }) && a.decision != "refuse" {
        if let Some(parent) = shown.parent().filter(|p| p.components().count() > 2) {
            let dir = mp.join(parent.strip_prefix("/").unwrap_or(parent));
            if !stat_through(&dir)?.is_some_and(|m| m.is_dir()) {
                a.message.push_str(&format!(
                    " Note: {} does not exist yet; create it first.",
                    crate::text::path(parent)
                ));
            }
        }
    }
    Ok(a)
}

/// `lstat` through the mount: `None` when nothing is there.
fn stat_through(p: &Path) -> Result<Option<Metadata>, Failure> {
    match std::fs::symlink_metadata(p) {
        Ok(m) => Ok(Some(m)),
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                || e.raw_os_error() == Some(libc::ENOTDIR) =>
        {
            Ok(None)
        }
        Err(e) => Err(Failure::new(
            1,
            format!("cannot look at {} through the mount: {e}", p.display()),
        )),
    }
}

/// The policy's answer for `op`.
fn decided(op: &Op<'_>, meta: Option<&Metadata>, zones: &[ZoneRules], asked: Asked) -> Answer {
    let d = policy::decide(op);
    let subject = Subject {
        is_dir: meta.is_some_and(Metadata::is_dir),
        ..Subject::of(op)
    };
    let e = policy::explain_decision(&subject, &d, zones);
    let (decision, errno) = match &d {
        Decision::Allow => ("allow", None),
        Decision::Ask(_) => ("ask", None),
        Decision::Refuse(r) => ("refuse", Some(r.errno_name())),
    };
    let at = subject.at;
    let (path, path_b64) = crate::text::path_for_json(&policy::exact(at));
    Answer {
        path,
        path_b64,
        zone: at.zone.map(|z| z.name.clone()),
        operation: asked.name(),
        action: subject.action,
        decision,
        errno,
        reason: e.reason,
        message: e.message,
    }
}

fn refused(
    shown: &Path,
    zone: Option<&ZoneRules>,
    asked: Asked,
    action: Action,
    errno: i32,
    e: Explanation,
) -> Answer {
    let (path, path_b64) = crate::text::path_for_json(shown);
    Answer {
        path,
        path_b64,
        zone: zone.map(|z| z.name.clone()),
        operation: asked.name(),
        action,
        decision: "refuse",
        errno: Some(crate::error::errno_name(errno)),
        reason: e.reason,
        message: e.message,
    }
}

/// Nothing at the path (not a policy matter, but worth saying what is).
fn missing(s: &Subject<'_>, zones: &[ZoneRules]) -> Explanation {
    let path = policy::shown(s.at);
    let reason = format!("'{path}' does not exist");
    let instead = match s.at.zone {
        None => {
            let names: Vec<String> = zones.iter().map(|z| format!("/{}", z.name)).collect();
            if names.is_empty() {
                "The mount has no zones.".to_owned()
            } else {
                format!(
                    "The mount's root holds only its zones: {}.",
                    names.join(", ")
                )
            }
        }
        Some(_) => String::new(),
    };
    let mut message = format!("Cannot {} '{path}': {reason}.", s.action.verb());
    if !instead.is_empty() {
        message.push(' ');
        message.push_str(&instead);
    }
    Explanation { reason, message }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn comps(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    fn resolved(mp: &str, given_mp: &str, path: &str, cwd: &str) -> Result<Vec<OsString>, String> {
        worker_path(
            "check",
            Path::new(mp),
            Path::new(given_mp),
            Path::new(path),
            Path::new(cwd),
            &["data", "ws"],
        )
        .map_err(|f| {
            assert_eq!(f.code, 2, "{}", f.msg);
            assert!(!f.msg.contains('\n'), "{}", f.msg);
            f.msg
        })
    }

    #[test]
    fn paths_are_taken_as_a_shell_would_then_as_a_worker_sees_them() {
        let mp = "/tmp/m";
        for (cwd, given, want) in [
            // Under the mountpoint, absolute or from the current directory.
            ("/", "/tmp/m/data/new.txt", &["data", "new.txt"][..]),
            ("/tmp", "./m/data/new.txt", &["data", "new.txt"]),
            ("/tmp", "m/data/./x/../new.txt", &["data", "new.txt"]),
            ("/tmp/m/data", "x.txt", &["data", "x.txt"]),
            ("/tmp/m/data/sub", "../y", &["data", "y"]),
            ("/tmp/m", ".", &[]),
            ("/", "/tmp/m", &[]),
            ("/elsewhere", "/tmp/m/ws/../data", &["data"]),
            // Outside it: an absolute path starting with a zone is a
            // worker's view, from the mount's root.
            ("/tmp", "/data/new.txt", &["data", "new.txt"]),
            ("/tmp", "/ws", &["ws"]),
            ("/tmp", "/ws/a/../b", &["ws", "b"]),
        ] {
            assert_eq!(
                resolved(mp, mp, given, cwd),
                Ok(comps(want)),
                "{given} from {cwd}"
            );
        }
    }

    #[test]
    fn a_path_outside_the_mount_is_refused() {
        let mp = "/tmp/m";
        for (cwd, given) in [
            // The bug: this asked about /mnt in the mount.
            ("/work", "./mnt/input/a.txt"),
            // Relative paths are never worker views.
            ("/tmp", "data/new.txt"),
            ("/tmp/m", ".."),
            ("/tmp/m/data", "../../x"),
            // Absolute, outside, and not starting with a zone.
            ("/", "/etc/passwd"),
            ("/", "/"),
            ("/", "/tmp/m2/data"),
            ("/", "/data/../etc"),
        ] {
            let e = resolved(mp, mp, given, cwd).expect_err(given);
            assert!(e.contains("is outside the mount /tmp/m"), "{e}");
            assert!(e.contains("/data/..., /ws/..."), "{e}");
        }
        let e = resolved(mp, mp, "./mnt/input/a.txt", "/work").unwrap_err();
        assert!(
            e.starts_with("check: ./mnt/input/a.txt (/work/mnt/input/a.txt) is outside"),
            "{e}"
        );
    }

    #[test]
    fn the_mountpoint_as_given_counts_and_wins_over_a_zone_name() {
        // A symlink to the canonical mountpoint, as given.
        assert_eq!(
            resolved("/tmp/m", "/link/m", "/link/m/ws/a", "/"),
            Ok(comps(&["ws", "a"]))
        );
        // ... also relative, from a directory reached through the link.
        assert_eq!(
            resolved("/tmp/m", "m", "m/ws/a", "/link"),
            Ok(comps(&["ws", "a"]))
        );
        // A mount at /data whose zone is `data`: a path under the
        // mountpoint is always taken as one.
        assert_eq!(
            resolved("/data", "/data", "/data/x", "/"),
            Ok(comps(&["x"]))
        );
    }
}

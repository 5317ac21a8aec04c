//! Can CMD be executed? Asked before it is spawned, so a missing or
//! non-executable CMD is said in zonemount's words (`run: nosuchcmd:
//! command not found`, 127; `Permission denied`, 126, as shells say and
//! exit) rather than by whatever execs it (util-linux `setsid`).
//!
//! The search is execvp's: a name without `/` is looked up in CMD's PATH
//! (its environment's, `/bin:/usr/bin` when unset; an empty or relative
//! entry is taken from CMD's working directory), a name with `/` is a path
//! from CMD's working directory. As with execvp, a file found but not
//! executable is remembered and reported only when no executable one is
//! found.
//!
//! Under `--isolate` the same search is made as the sandbox will see it:
//! a path is looked for where the sandbox takes it from (a zone through
//! the mount, a system dir on the host at the same path); what the sandbox
//! doesn't have is missing, and what can't be told from outside (`/proc`,
//! `/dev`) is left for the exec to find out.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::Access;

use super::super::Failure;
use crate::isolate::{EnvSpec, HostFacts, SystemEntry, ZoneBind};

/// Exit status for a CMD that was not found, as shells use.
pub(super) const NOT_FOUND: u8 = 127;
/// Exit status for a CMD that was found but cannot be executed.
pub(super) const NOT_EXECUTABLE: u8 = 126;

/// execvp's search path when PATH is not set (glibc's `_CS_PATH`).
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// Where CMD's view of a path is on this host.
pub(super) enum Seen {
    At(PathBuf),
    /// Not in CMD's world at all.
    Absent,
    /// Can't be told from outside: taken as runnable.
    Unknown,
}

/// CMD runs on this host: a path is itself.
pub(super) fn on_host(p: &Path) -> Seen {
    Seen::At(p.to_path_buf())
}

/// CMD runs in the `--isolate` sandbox of the mount at `mp`: see
/// `isolate::bwrap_args` for what it binds where.
pub(super) fn in_sandbox<'a>(
    mp: &'a Path,
    zones: &'a [ZoneBind],
    host: &'a HostFacts,
) -> impl Fn(&Path) -> Seen + 'a {
    move |p| sandbox_path(mp, zones, host, p, 0)
}

/// How many system-dir symlinks (`/bin -> usr/bin`) are followed.
const MAX_SYSTEM_LINKS: usize = 8;

fn sandbox_path(mp: &Path, zones: &[ZoneBind], host: &HostFacts, p: &Path, depth: usize) -> Seen {
    let mut comps: Vec<&OsStr> = Vec::new();
    for c in p.components() {
        match c {
            Component::Normal(n) => comps.push(n),
            Component::ParentDir => {
                comps.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    let Some((first, rest)) = comps.split_first() else {
        return Seen::Unknown;
    };
    let rest: PathBuf = rest.iter().collect();
    let top = Path::new("/").join(first);
    if zones.iter().any(|z| OsStr::new(&z.name) == *first) {
        return Seen::At(mp.join(first).join(rest));
    }
    for e in &host.system {
        match e {
            SystemEntry::Dir(d) if *d == top => return Seen::At(top.join(rest)),
            SystemEntry::Symlink { path, target } if *path == top && depth < MAX_SYSTEM_LINKS => {
                let to = Path::new("/").join(target).join(rest);
                return sandbox_path(mp, zones, host, &to, depth + 1);
            }
            _ => {}
        }
    }
    let full = top.join(&rest);
    match first.as_bytes() {
        b"etc" if host.etc.iter().any(|e| full.starts_with(e)) => Seen::At(full),
        b"proc" | b"dev" => Seen::Unknown,
        // /tmp is a fresh tmpfs; every other host path is never bound.
        _ => Seen::Absent,
    }
}

/// What a candidate file is to exec.
enum Found {
    Runnable,
    /// There, but exec would fail with this (a directory, no x bit).
    Refused(&'static str),
    Missing,
}

fn probe(locate: &dyn Fn(&Path) -> Seen, path: &Path) -> Found {
    let path = match locate(path) {
        Seen::At(p) => p,
        Seen::Absent => return Found::Missing,
        Seen::Unknown => return Found::Runnable,
    };
    match std::fs::metadata(&path) {
        Err(_) => Found::Missing,
        Ok(m) if m.is_dir() => Found::Refused("Is a directory"),
        Ok(_) if rustix::fs::access(&path, Access::EXEC_OK).is_err() => {
            Found::Refused("Permission denied")
        }
        Ok(_) => Found::Runnable,
    }
}

/// Ok when `prog` would be executed; else the failure `run` reports,
/// with 127 (not found) or 126 (found, not executable). `cwd` is CMD's
/// working directory and `path_var` the PATH in CMD's environment, both as
/// CMD sees them; `locate` says where such a path is on this host
/// ([`on_host`], [`in_sandbox`]).
pub(super) fn check_command(
    prog: &OsStr,
    cwd: &Path,
    path_var: Option<&OsStr>,
    locate: &dyn Fn(&Path) -> Seen,
) -> Result<(), Failure> {
    let shown = Path::new(prog).display();
    let fail = |code: u8, why: &str| Failure::new(code, format!("run: {shown}: {why}"));
    if prog.is_empty() {
        return Err(fail(NOT_FOUND, "command not found"));
    }
    if prog.as_bytes().contains(&b'/') {
        return match probe(locate, &cwd.join(prog)) {
            Found::Runnable => Ok(()),
            Found::Refused(why) => Err(fail(NOT_EXECUTABLE, why)),
            Found::Missing => Err(fail(NOT_FOUND, "No such file or directory")),
        };
    }
    let search = path_var.unwrap_or(OsStr::new(DEFAULT_PATH));
    let mut refused: Option<&'static str> = None;
    for dir in search.as_bytes().split(|b| *b == b':') {
        let dir: PathBuf = match dir {
            b"" => cwd.to_path_buf(),
            d => cwd.join(OsStr::from_bytes(d)),
        };
        match probe(locate, &dir.join(prog)) {
            Found::Runnable => return Ok(()),
            Found::Refused(why) => {
                refused.get_or_insert(why);
            }
            Found::Missing => {}
        }
    }
    match refused {
        Some(why) => Err(fail(NOT_EXECUTABLE, why)),
        None => Err(fail(NOT_FOUND, "command not found")),
    }
}

/// The PATH CMD will see: the last `--env PATH=...` if given, else ours
/// (`--env PATH` alone passes ours on).
pub(super) fn cmd_path(env: &[EnvSpec]) -> Option<OsString> {
    env.iter()
        .rev()
        .find_map(|e| (e.name == "PATH").then_some(e.value.clone()).flatten())
        .or_else(|| std::env::var_os("PATH"))
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn file(dir: &Path, name: &str, mode: u32) -> PathBuf {
        let p = dir.join(name);
        fs::write(&p, "#!/bin/sh\n").unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    fn outcome(prog: &str, cwd: &Path, path: Option<&str>) -> Result<(), (u8, String)> {
        check_command(OsStr::new(prog), cwd, path.map(OsStr::new), &on_host)
            .map_err(|f| (f.code, f.msg))
    }

    #[test]
    fn commands_are_found_as_execvp_finds_them() {
        let tmp = tempfile::tempdir().unwrap();
        let (bin, other, cwd) = (
            tmp.path().join("bin"),
            tmp.path().join("other"),
            tmp.path().join("cwd"),
        );
        for d in [&bin, &other, &cwd] {
            fs::create_dir(d).unwrap();
        }
        file(&bin, "tool", 0o755);
        file(&bin, "plain", 0o644);
        file(&other, "plain", 0o755);
        file(&cwd, "local", 0o755);
        file(&cwd, "noexec", 0o600);
        fs::create_dir(cwd.join("adir")).unwrap();
        let path = format!("{}:{}", bin.display(), other.display());
        let path = Some(path.as_str());

        assert_eq!(outcome("tool", &cwd, path), Ok(()));
        // Not executable in the first dir, executable in a later one.
        assert_eq!(outcome("plain", &cwd, path), Ok(()));
        assert_eq!(outcome("./local", &cwd, path), Ok(()));
        assert_eq!(
            outcome("local", &cwd, Some("")),
            Ok(()),
            "an empty entry is the cwd"
        );
        assert_eq!(
            outcome("local", &cwd, Some(".")),
            Ok(()),
            "so is a relative one"
        );

        assert_eq!(
            outcome("nosuchcmd", &cwd, path),
            Err((127, "run: nosuchcmd: command not found".into()))
        );
        assert_eq!(
            outcome("local", &cwd, path),
            Err((127, "run: local: command not found".into())),
            "a name without / is never taken from the cwd unless PATH says so"
        );
        assert_eq!(
            outcome("./nosuch", &cwd, path),
            Err((127, "run: ./nosuch: No such file or directory".into()))
        );
        assert_eq!(
            outcome("./noexec", &cwd, path),
            Err((126, "run: ./noexec: Permission denied".into()))
        );
        assert_eq!(
            outcome("./adir", &cwd, path),
            Err((126, "run: ./adir: Is a directory".into()))
        );
        let only_noexec = bin.display().to_string();
        assert_eq!(
            outcome("plain", &cwd, Some(&only_noexec)),
            Err((126, "run: plain: Permission denied".into()))
        );
        assert_eq!(outcome("", &cwd, path).unwrap_err().0, 127);
        // PATH unset: execvp's default, where sh lives.
        assert_eq!(outcome("sh", &cwd, None), Ok(()));
    }

    #[test]
    fn cmd_sees_the_last_env_path_given() {
        let e = |v: &str| EnvSpec::parse(OsStr::new(v)).unwrap();
        assert_eq!(
            cmd_path(&[e("PATH=/a"), e("X=1"), e("PATH=/b"), e("PATH")]),
            Some(OsString::from("/b"))
        );
        assert_eq!(cmd_path(&[e("X=1")]), std::env::var_os("PATH"));
    }
}

#[cfg(test)]
mod sandbox_tests {
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn exe(p: &Path) {
        fs::write(p, "#!/bin/sh\n").unwrap();
        fs::set_permissions(p, fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn zones() -> [ZoneBind; 1] {
        [ZoneBind {
            name: "ws".into(),
            writable: true,
            staged: false,
            backing: "/b/ws".into(),
            direct: None,
        }]
    }

    #[test]
    fn the_sandbox_view_maps_zones_and_system_dirs_and_nothing_else() {
        let mp = Path::new("/m");
        let zones = zones();
        let host = HostFacts {
            system: vec![
                SystemEntry::Dir("/usr".into()),
                SystemEntry::Symlink {
                    path: "/bin".into(),
                    target: "usr/bin".into(),
                },
            ],
            etc: vec!["/etc/passwd".into()],
        };
        let see = in_sandbox(mp, &zones, &host);
        let at = |p: &str| match see(Path::new(p)) {
            Seen::At(h) => Some(h),
            Seen::Absent => None,
            Seen::Unknown => Some(PathBuf::from("?")),
        };
        assert_eq!(at("/ws/job.sh"), Some("/m/ws/job.sh".into()));
        assert_eq!(at("/ws/sub/../job.sh"), Some("/m/ws/job.sh".into()));
        assert_eq!(at("/usr/bin/env"), Some("/usr/bin/env".into()));
        assert_eq!(
            at("/bin/env"),
            Some("/usr/bin/env".into()),
            "through /bin -> usr/bin"
        );
        assert_eq!(at("/etc/passwd"), Some("/etc/passwd".into()));
        assert_eq!(at("/etc/shadow"), None, "not bound");
        assert_eq!(at("/root/bin/x"), None, "homes are never bound");
        assert_eq!(at("/sbin/x"), None, "not a system dir of this host");
        assert_eq!(at("/tmp/x"), None, "a fresh tmpfs");
        assert_eq!(at("/proc/self/exe"), Some("?".into()), "can't tell");
    }

    #[test]
    fn commands_are_found_as_the_sandbox_will_see_them() {
        let tmp = tempfile::tempdir().unwrap();
        let mp = fs::canonicalize(tmp.path()).unwrap();
        fs::create_dir(mp.join("ws")).unwrap();
        exe(&mp.join("ws/job.sh"));
        exe(&mp.join("outside"));
        let zones = zones();
        let host = HostFacts::read();
        let see = in_sandbox(&mp, &zones, &host);
        let run = |prog: &str, path: &str| {
            check_command(
                OsStr::new(prog),
                Path::new("/ws"),
                Some(OsStr::new(path)),
                &see,
            )
            .map_err(|f| (f.code, f.msg))
        };
        assert_eq!(run("sh", "/usr/bin:/bin"), Ok(()), "a system command");
        assert_eq!(run("./job.sh", "/usr/bin"), Ok(()), "a script in the zone");
        assert_eq!(run("job.sh", "/usr/bin:/ws"), Ok(()));
        assert_eq!(
            run("nosuchcmd", "/usr/bin:/bin"),
            Err((127, "run: nosuchcmd: command not found".into()))
        );
        // An executable the host has where the sandbox binds nothing.
        let outside = mp.join("outside");
        let top = outside.components().nth(1).unwrap();
        if !host.system.iter().any(|e| match e {
            SystemEntry::Dir(d) | SystemEntry::Symlink { path: d, .. } => {
                d.components().nth(1) == Some(top)
            }
        }) {
            let shown = outside.to_str().unwrap();
            assert_eq!(
                run(shown, "/usr/bin"),
                Err((127, format!("run: {shown}: No such file or directory")))
            );
        }
    }
}

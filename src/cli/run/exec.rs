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

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::Access;

use super::super::Failure;
use crate::isolate::EnvSpec;

/// Exit status for a CMD that was not found, as shells use.
pub(super) const NOT_FOUND: u8 = 127;
/// Exit status for a CMD that was found but cannot be executed.
pub(super) const NOT_EXECUTABLE: u8 = 126;

/// execvp's search path when PATH is not set (glibc's `_CS_PATH`).
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// What a candidate file is to exec.
enum Found {
    Runnable,
    /// There, but exec would fail with this (a directory, no x bit).
    Refused(&'static str),
    Missing,
}

fn probe(path: &Path) -> Found {
    match std::fs::metadata(path) {
        Err(_) => Found::Missing,
        Ok(m) if m.is_dir() => Found::Refused("Is a directory"),
        Ok(_) if rustix::fs::access(path, Access::EXEC_OK).is_err() => {
            Found::Refused("Permission denied")
        }
        Ok(_) => Found::Runnable,
    }
}

/// Ok when `prog` would be executed; else the failure `run` reports,
/// with 127 (not found) or 126 (found, not executable). `cwd` is CMD's
/// working directory, `path_var` the PATH in CMD's environment.
pub(super) fn check_command(
    prog: &OsStr,
    cwd: &Path,
    path_var: Option<&OsStr>,
) -> Result<(), Failure> {
    let shown = Path::new(prog).display();
    let fail = |code: u8, why: &str| Failure::new(code, format!("run: {shown}: {why}"));
    if prog.is_empty() {
        return Err(fail(NOT_FOUND, "command not found"));
    }
    if prog.as_bytes().contains(&b'/') {
        return match probe(&cwd.join(prog)) {
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
        match probe(&dir.join(prog)) {
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
        check_command(OsStr::new(prog), cwd, path.map(OsStr::new)).map_err(|f| (f.code, f.msg))
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

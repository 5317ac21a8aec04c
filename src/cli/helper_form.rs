//! `mount -t fuse.zonemount SOURCE MOUNTPOINT [-o OPTS]` and `/etc/fstab`
//! lines: fuse3's `mount.fuse3` helper runs `zonemount SOURCE MOUNTPOINT
//! -o OPTS`. That form (a first argument that is no command) is rewritten
//! to `zonemount mount`: SOURCE is the config (a file, or `preset:NAME`),
//! and the `-o` options map to `mount`'s.
//!
//! A preset takes its paths from the current directory, which for an fstab
//! line is whatever `mount(8)` ran in (`/` at boot, where every preset
//! fails: its zone would hold the mountpoint). So a `preset:NAME` source
//! needs `dir=DIR`, and the helper runs `zonemount mount` in DIR.
//!
//! | `-o` option | means |
//! |---|---|
//! | `dir=DIR` (absolute) | run in DIR: a preset's paths, a relative SOURCE and relative `zone=` paths are taken from it; needed with `preset:NAME` |
//! | `zone=NAME=PATH[:ro\|rw\|staged]` | `--zone` (repeatable) |
//! | `worker=F`, `stage_dir=D`, `audit_log=F`, `refusal_log=F`, `control=S`, `cache_ttl=S`, `busy_poll=US` | the `mount` option of that name |
//! | `allow_other`, `no_approvals`, `no_passthrough`, `writeback_cache`, `kernel_opens`, `io_uring`, `no_io_uring`, `quiet` | the `mount` flag |
//! | `rw`, `nosuid`, `nodev`, `noexec`, `suid`, `dev`, `exec`, `atime`, `noatime`, `relatime`, `strictatime`, `nodiratime`, `default_permissions`, `defaults`, `auto`, `noauto`, `user`, `users`, `nouser`, `owner`, `_netdev`, `nofail`, `x-*`, `comment=*` | for `mount(8)` or always in force (a zonemount mount is `nosuid,nodev,default_permissions`): ignored |
//!
//! Anything else (`ro` included: a zone says what is read-only) is an
//! error, exit 2.

use std::ffi::OsString;

/// The commands and top-level flags: a first argument among them is the
/// ordinary form.
fn is_ordinary(first: &str) -> bool {
    first.starts_with('-')
        || matches!(
            first,
            "mount"
                | "unmount"
                | "run"
                | "list"
                | "derive"
                | "status"
                | "approvals"
                | "check"
                | "changes"
                | "commit"
                | "discard"
                | "doctor"
                | "completions"
                | "man"
                | "help"
        )
}

/// The helper form, read: the `zonemount mount` command line, and the
/// directory to run it in (`dir=`).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct HelperForm {
    pub(crate) argv: Vec<OsString>,
    pub(crate) dir: Option<std::path::PathBuf>,
}

/// `argv` in the helper form rewritten to `zonemount mount ...`, with the
/// current directory moved to its `dir=`; any other argv as it is. Err:
/// an option this form doesn't know, or a `dir=` that can't be entered
/// (the message).
pub(crate) fn rewrite(argv: Vec<OsString>) -> Result<Vec<OsString>, String> {
    let form = parse(argv)?;
    if let Some(dir) = &form.dir {
        std::env::set_current_dir(dir)
            .map_err(|e| format!("dir={}: cannot enter it: {e}", dir.display()))?;
    }
    Ok(form.argv)
}

/// [`rewrite`] without its effect: what to run, and where.
pub(crate) fn parse(argv: Vec<OsString>) -> Result<HelperForm, String> {
    let Some(first) = argv.get(1).map(|a| a.to_string_lossy().into_owned()) else {
        return Ok(HelperForm { argv, dir: None });
    };
    // mount.fuse3 always passes -o; a SOURCE naming a file or preset
    // is enough too. A mistyped command (`zonemount umount /mnt`) is left
    // to clap, which suggests the right one.
    let looks_helper = argv
        .iter()
        .skip(3)
        .any(|a| a.to_string_lossy().starts_with("-o"))
        || first.contains('/')
        || first.contains('.')
        || first.starts_with("preset:");
    if is_ordinary(&first) || argv.len() < 3 || !looks_helper {
        return Ok(HelperForm { argv, dir: None });
    }
    let prog = argv[0].clone();
    let source = argv[1].clone();
    let mountpoint = argv[2].clone();
    let mut out: Vec<OsString> = vec![prog, "mount".into(), "--config".into(), source];
    let mut dir = None;
    let mut rest = argv.into_iter().skip(3);
    while let Some(a) = rest.next() {
        let s = a.to_string_lossy().into_owned();
        let opts = if s == "-o" {
            rest.next()
                .map(|o| o.to_string_lossy().into_owned())
                .ok_or("-o needs a list of options")?
        } else if let Some(o) = s.strip_prefix("-o") {
            o.to_owned()
        } else {
            return Err(format!(
                "{s}: as a mount helper (zonemount SOURCE MOUNTPOINT -o OPTIONS), only -o is understood"
            ));
        };
        for opt in opts.split(',').filter(|o| !o.is_empty()) {
            if let Some(d) = opt.strip_prefix("dir=") {
                dir = Some(working_dir(d)?);
                continue;
            }
            out.extend(option(opt)?);
        }
    }
    if first.starts_with(crate::config::presets::PREFIX) && dir.is_none() {
        return Err(format!(
            "{first}: a preset takes its paths from the directory it runs in, which for a mount helper \
             is wherever mount(8) ran (/ at boot); name the project directory: -o dir=/path/to/project"
        ));
    }
    out.push(mountpoint);
    Ok(HelperForm { argv: out, dir })
}

/// `dir=`'s value: an absolute path (an fstab line must not depend on
/// where `mount` ran).
fn working_dir(d: &str) -> Result<std::path::PathBuf, String> {
    let p = std::path::PathBuf::from(d);
    if !p.is_absolute() {
        return Err(format!("dir={d}: give an absolute path"));
    }
    Ok(p)
}

/// One `-o` option as `mount` arguments.
fn option(opt: &str) -> Result<Vec<OsString>, String> {
    const IGNORED: &[&str] = &[
        "rw",
        "nosuid",
        "nodev",
        "noexec",
        "suid",
        "dev",
        "exec",
        "atime",
        "noatime",
        "relatime",
        "strictatime",
        "nodiratime",
        "default_permissions",
        "defaults",
        "auto",
        "noauto",
        "user",
        "users",
        "nouser",
        "owner",
        "_netdev",
        "nofail",
    ];
    if IGNORED.contains(&opt) || opt.starts_with("x-") || opt.starts_with("comment=") {
        return Ok(Vec::new());
    }
    let flag = |f: &str| Ok(vec![OsString::from(f)]);
    match opt {
        "allow_other" => return flag("--allow-other"),
        "no_approvals" => return flag("--no-approvals"),
        "no_passthrough" => return flag("--no-passthrough"),
        "writeback_cache" => return flag("--writeback-cache"),
        "kernel_opens" => return flag("--kernel-opens"),
        "io_uring" => return flag("--io-uring"),
        "no_io_uring" => return flag("--no-io-uring"),
        "quiet" => return flag("--quiet"),
        "nonempty" => return flag("--nonempty"),
        "ro" => {
            return Err(
                "ro: a zonemount mount is not read-only as a whole; its zones say what is (mode: ro)"
                    .to_owned(),
            );
        }
        _ => {}
    }
    let Some((key, value)) = opt.split_once('=') else {
        return Err(format!("unknown mount option '{opt}'"));
    };
    let name = match key {
        "zone" => "--zone",
        "worker" => "--worker",
        "stage_dir" => "--stage-dir",
        "audit_log" => "--audit-log",
        "refusal_log" => "--refusal-log",
        "control" => "--control",
        "cache_ttl" => "--cache-ttl",
        "busy_poll" => "--busy-poll",
        _ => return Err(format!("unknown mount option '{opt}'")),
    };
    Ok(vec![name.into(), value.into()])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn args(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_helper_form_becomes_a_mount() {
        let got = rewrite(args(&[
            "zonemount",
            "/etc/zm.yaml",
            "/mnt/task",
            "-o",
            "rw,nosuid,nodev,noauto,x-systemd.automount,zone=out=/srv/out:staged,allow_other,stage_dir=/var/st,busy_poll=0",
        ]))
        .unwrap();
        assert_eq!(
            got,
            args(&[
                "zonemount",
                "mount",
                "--config",
                "/etc/zm.yaml",
                "--zone",
                "out=/srv/out:staged",
                "--allow-other",
                "--stage-dir",
                "/var/st",
                "--busy-poll",
                "0",
                "/mnt/task"
            ])
        );
        // The ordinary form, and too few arguments, are left alone.
        for v in [
            &["zonemount", "mount", "x"][..],
            &["zonemount", "list"],
            &["zonemount", "x"],
            &["zonemount", "umount", "mnt"],
        ] {
            assert_eq!(rewrite(args(v)).unwrap(), args(v));
        }
        assert!(
            rewrite(args(&["zonemount", "c", "m", "-o", "ro"]))
                .unwrap_err()
                .contains("not read-only as a whole")
        );
        assert!(
            rewrite(args(&["zonemount", "c", "m", "-o", "bogus=1"]))
                .unwrap_err()
                .contains("unknown mount option 'bogus=1'")
        );
        assert!(rewrite(args(&["zonemount", "c.yaml", "m", "-v"])).is_err());
    }

    #[test]
    fn a_preset_source_runs_in_its_dir() {
        let got = parse(args(&[
            "zonemount",
            "preset:workspace-write",
            "/srv/task",
            "-o",
            "rw,nosuid,nodev,dir=/srv/project,no_approvals",
        ]))
        .unwrap();
        assert_eq!(
            got,
            HelperForm {
                argv: args(&[
                    "zonemount",
                    "mount",
                    "--config",
                    "preset:workspace-write",
                    "--no-approvals",
                    "/srv/task"
                ]),
                dir: Some("/srv/project".into()),
            }
        );
        // Without dir= a preset would take its paths from wherever mount(8)
        // ran: refused, naming the fix.
        let e = parse(args(&[
            "zonemount",
            "preset:read-only",
            "/srv/task",
            "-o",
            "rw",
        ]))
        .unwrap_err();
        assert!(e.contains("-o dir=/path/to/project"), "{e}");
        let e = parse(args(&[
            "zonemount",
            "preset:read-only",
            "m",
            "-o",
            "dir=proj",
        ]))
        .unwrap_err();
        assert_eq!(e, "dir=proj: give an absolute path");
        // A file source may have dir= too (for relative zone= paths).
        let got = parse(args(&[
            "zonemount",
            "/e/p.yaml",
            "m",
            "-odir=/p,zone=w=work:rw",
        ]))
        .unwrap();
        assert_eq!(got.dir, Some("/p".into()));
        assert_eq!(
            got.argv,
            args(&[
                "zonemount",
                "mount",
                "--config",
                "/e/p.yaml",
                "--zone",
                "w=work:rw",
                "m"
            ])
        );
        // A dir that can't be entered is an error of rewrite, not a panic.
        let e = rewrite(args(&[
            "zonemount",
            "preset:read-only",
            "m",
            "-o",
            "dir=/nonexistent/zm",
        ]))
        .unwrap_err();
        assert!(
            e.starts_with("dir=/nonexistent/zm: cannot enter it: "),
            "{e}"
        );
    }
}

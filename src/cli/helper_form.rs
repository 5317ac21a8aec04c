//! `mount -t fuse.zonemount SOURCE MOUNTPOINT [-o OPTS]` and `/etc/fstab`
//! lines: fuse3's `mount.fuse3` helper runs `zonemount SOURCE MOUNTPOINT
//! -o OPTS`. That form (a first argument that is no command) is rewritten
//! to `zonemount mount`: SOURCE is the config (a file, or `preset:NAME`),
//! and the `-o` options map to `mount`'s.
//!
//! | `-o` option | means |
//! |---|---|
//! | `zone=NAME=PATH[:ro\|rw\|staged]` | `--zone` (repeatable) |
//! | `worker=F`, `stage_dir=D`, `audit_log=F`, `refusal_log=F`, `control=S`, `cache_ttl=S` | the `mount` option of that name |
//! | `allow_other`, `no_approvals`, `no_passthrough`, `writeback_cache`, `io_uring`, `no_io_uring`, `quiet` | the `mount` flag |
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

/// `argv` in the helper form rewritten to `zonemount mount ...`; any other
/// argv as it is. Err: an option this form doesn't know (the message).
pub(crate) fn rewrite(argv: Vec<OsString>) -> Result<Vec<OsString>, String> {
    let Some(first) = argv.get(1).map(|a| a.to_string_lossy().into_owned()) else {
        return Ok(argv);
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
        return Ok(argv);
    }
    let prog = argv[0].clone();
    let source = argv[1].clone();
    let mountpoint = argv[2].clone();
    let mut out: Vec<OsString> = vec![prog, "mount".into(), "--config".into(), source];
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
            out.extend(option(opt)?);
        }
    }
    out.push(mountpoint);
    Ok(out)
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
            "rw,nosuid,nodev,noauto,x-systemd.automount,zone=out=/srv/out:staged,allow_other,stage_dir=/var/st",
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
}

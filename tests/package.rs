//! zonemount as installed: the Debian package (built by
//! `scripts/package-deb.sh` from the binary under test, unpacked into a
//! scratch root and run from there), its systemd units, and an fstab line
//! whose source is a preset, mounted through fuse3's `mount.fuse3`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `key=value` lines of a script's stdout.
fn values(out: &str) -> BTreeMap<String, String> {
    out.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[track_caller]
fn assert_value(out: &Out, key: &str, want: &str) {
    assert_eq!(
        values(&out.stdout).get(key).map(String::as_str),
        Some(want),
        "{key}: {}",
        out.describe()
    );
}

/// An fstab line with a preset as its source mounts the preset's zones
/// from its `dir=`, wherever `mount` runs (here `/`, as at boot); without
/// `dir=` it is refused, naming the option. Through `mount.fuse3` with
/// mount's own PATH (the binary is put in `/usr/local/bin`, in a private
/// namespace only), and through it as `mount.fuse.zonemount`, the name
/// the package links it by.
#[test]
fn an_fstab_line_with_a_preset_mounts_from_its_dir() {
    if !fuse_ok() || !require(Need::Root) || !tool_ok("unshare") || !tool_ok("mount.fuse3") {
        return;
    }
    let ns = PrivateNs::new(false);
    let out = ns.run(
        r#"
mnt="$PWD/mnt"; proj="$PWD/proj"
mkdir -p bin "$mnt" "$proj" && echo hi > "$proj/a.txt"
ln -s "$ZONEMOUNT" bin/zonemount
mount --bind "$PWD/bin" /usr/local/bin || exit 11
echo "preset:read-only $mnt fuse.zonemount noauto,dir=$proj 0 0" > fstab
echo "preset:read-only $mnt fuse.zonemount noauto 0 0" > fstab.nodir
here=$PWD
cd /
mount --fstab "$here/fstab.nodir" "$mnt" 2> "$here/nodir.err"; echo "nodir=$?"
mount --fstab "$here/fstab" "$mnt"; echo "fstab=$?"
ps -eo pid=,args= | grep -F -- "$mnt" | grep -v grep | awk '{print $1}' >> "$ZM_PIDS"
trap 'umount -l "$mnt" 2>/dev/null' EXIT
echo "read=$(cat "$mnt/work/a.txt")"
echo x > "$mnt/work/b.txt" 2>/dev/null; echo "write=$?"
"$ZONEMOUNT" check "$mnt" "$mnt/work/a.txt" --write >/dev/null; echo "check=$?"
umount "$mnt"; echo "umount=$?"
# The package's /sbin/mount.fuse.zonemount: mount.fuse3 by another name,
# which takes the type from it (no -t).
ln -s "$(command -v mount.fuse3)" "$here/bin/mount.fuse.zonemount"
"$here/bin/mount.fuse.zonemount" preset:read-only "$mnt" -o "rw,dir=$proj"; echo "helper=$?"
ps -eo pid=,args= | grep -F -- "$mnt" | grep -v grep | awk '{print $1}' >> "$ZM_PIDS"
echo "helper_read=$(cat "$mnt/work/a.txt")"
umount "$mnt"
echo "left=$(grep -c " $mnt " /proc/self/mounts)"
"#,
    );
    assert!(out.success(), "{}", out.describe());
    assert_value(&out, "fstab", "0");
    assert_value(&out, "read", "hi");
    // A read-only preset: the write is refused, and `check` (which loads
    // the preset again from the mount's record) says so.
    assert_ne!(
        values(&out.stdout).get("write").map(String::as_str),
        Some("0")
    );
    assert_value(&out, "check", "4");
    assert_value(&out, "umount", "0");
    assert_value(&out, "helper", "0");
    assert_value(&out, "helper_read", "hi");
    assert_value(&out, "left", "0");
    assert!(!ns.path().join("proj/b.txt").exists());
    assert_ne!(
        values(&out.stdout).get("nodir").map(String::as_str),
        Some("0")
    );
    let err = fs::read_to_string(ns.path().join("nodir.err")).unwrap();
    assert!(err.contains("-o dir=/path/to/project"), "{err}");
}

/// Run a command (bounded) and insist it succeeded.
#[track_caller]
fn ok(cmd: &mut Command) -> Out {
    let out = run(cmd, Duration::from_secs(300));
    assert!(out.success(), "{cmd:?}: {}", out.describe());
    out
}

/// `scripts/package-deb.sh` packages the binary under test (gzip, for
/// time); `dpkg --root` installs it into a scratch root (its dependencies
/// are the host's, not the root's: --force-depends) and removes it again;
/// the binary runs from there, and the man pages, completions, units,
/// helper link and docs are where Debian's tools look for them.
#[test]
fn the_deb_installs_into_a_scratch_root_and_runs() {
    for tool in ["dpkg-deb", "dpkg", "gzip", "man", "systemd-analyze"] {
        if !require(Need::Tool(tool)) {
            return;
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tmp.path().join("out");
    let built = ok(Command::new("bash")
        .arg(repo().join("scripts/package-deb.sh"))
        .args(["--compression", "gzip", "--binary", BIN, "--out"])
        .arg(&out_dir));
    let deb = PathBuf::from(built.stdout.lines().last().unwrap_or_default());
    let arch = ok(Command::new("dpkg").arg("--print-architecture")).stdout;
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        deb,
        out_dir.join(format!("zonemount_{version}_{}.deb", arch.trim()))
    );

    // The control file: as Cargo.toml and dpkg say, and what it needs.
    let field = |f: &str| {
        ok(Command::new("dpkg-deb").arg("-f").arg(&deb).arg(f))
            .stdout
            .trim()
            .to_string()
    };
    assert_eq!(field("Package"), "zonemount");
    assert_eq!(field("Version"), version);
    assert_eq!(field("Architecture"), arch.trim());
    let depends = field("Depends");
    for d in ["libc6", "fuse3"] {
        assert!(
            depends.split(", ").any(|x| x.starts_with(d)),
            "Depends: {depends}"
        );
    }
    assert_eq!(field("Recommends"), "bubblewrap");
    // Every file root's, whoever built it.
    let listing = ok(Command::new("dpkg-deb").arg("-c").arg(&deb)).stdout;
    for line in listing.lines() {
        assert!(line.contains(" root/root "), "not root's: {line}");
    }

    // Installed into a scratch root.
    let root = tmp.path().join("root");
    let admin = root.join("var/lib/dpkg");
    for d in ["info", "updates", "triggers"] {
        fs::create_dir_all(admin.join(d)).unwrap();
    }
    fs::write(admin.join("status"), "").unwrap();
    fs::write(admin.join("available"), "").unwrap();
    let dpkg = |args: &[&str]| {
        let mut c = Command::new("dpkg");
        // dpkg looks for ldconfig and start-stop-daemon on PATH, which an
        // ordinary user's lacks.
        let path = std::env::var("PATH").unwrap_or_default();
        c.env("PATH", format!("{path}:/usr/local/sbin:/usr/sbin:/sbin"))
            .arg(format!("--root={}", root.display()))
            .args(["--log=/dev/null", "--force-not-root"])
            .args(args);
        c
    };
    ok(dpkg(&["--force-depends", "-i"]).arg(&deb));
    let st = ok(&mut dpkg(&["-s", "zonemount"])).stdout;
    assert!(st.contains("Status: install ok installed"), "{st}");

    let zm = root.join("usr/bin/zonemount");
    let v = ok(Command::new(&zm).arg("--version")).stdout;
    assert!(
        v.starts_with(&format!("zonemount {version}\nfeatures:")),
        "{v}"
    );

    for f in [
        "usr/share/man/man1/zonemount.1.gz",
        "usr/share/man/man1/zonemount-mount.1.gz",
        "usr/share/man/man1/zonemount-approvals-allow.1.gz",
        "usr/share/man/man5/zonemount.yaml.5.gz",
        "usr/share/doc/zonemount/changelog.Debian.gz",
        "usr/share/doc/zonemount/README.md.gz",
    ] {
        ok(Command::new("gzip").arg("-t").arg(root.join(f)));
    }
    for page in ["man1/zonemount-run.1.gz", "man5/zonemount.yaml.5.gz"] {
        let out = run(
            Command::new("man")
                .args(["--warnings", "-l"])
                .arg(root.join("usr/share/man").join(page))
                .env("MANWIDTH", "80"),
            Duration::from_secs(60),
        );
        assert!(
            out.success() && out.stderr.is_empty(),
            "{page}: {}",
            out.describe()
        );
        assert!(out.stdout.contains("EXAMPLES"), "{page}: {}", out.stdout);
    }
    let read = |f: &str| fs::read_to_string(root.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
    assert!(read("usr/share/bash-completion/completions/zonemount").contains("_zonemount()"));
    assert!(read("usr/share/zsh/vendor-completions/_zonemount").starts_with("#compdef zonemount"));
    assert!(
        read("usr/share/fish/vendor_completions.d/zonemount.fish")
            .contains("complete -c zonemount")
    );
    assert!(read("usr/share/doc/zonemount/copyright").contains("License: MIT"));
    assert_eq!(
        fs::read_link(root.join("sbin/mount.fuse.zonemount")).unwrap(),
        PathBuf::from("mount.fuse3")
    );

    // The units run the package's binary; each verifies (its man pages
    // found in the package, its binary the scratch root's).
    for (unit, user) in [
        ("lib/systemd/system/zonemount@.service", false),
        ("usr/lib/systemd/user/zonemount@.service", true),
    ] {
        let text = read(unit);
        assert!(
            text.contains("\nExecStart=/usr/bin/zonemount mount --foreground "),
            "{unit}"
        );
        let dir = tmp.path().join(if user { "user-units" } else { "units" });
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("zonemount@srv-task.service");
        fs::write(
            &path,
            text.replace(
                "ExecStart=/usr/bin/zonemount ",
                &format!("ExecStart={} ", zm.display()),
            ),
        )
        .unwrap();
        let rt = tmp.path().join("runtime");
        fs::create_dir_all(&rt).unwrap();
        let mut c = Command::new("systemd-analyze");
        if user {
            c.arg("--user").env("XDG_RUNTIME_DIR", &rt);
        }
        let out = run(
            c.arg("verify")
                .arg(&path)
                .env("MANPATH", root.join("usr/share/man")),
            Duration::from_secs(60),
        );
        assert!(
            out.success() && !out.stderr.contains("zonemount@"),
            "{unit}: {}",
            out.describe()
        );
    }

    // And it goes away whole.
    ok(&mut dpkg(&["-r", "zonemount"]));
    assert!(!zm.exists());
    assert!(!root.join("usr/share/man/man5/zonemount.yaml.5.gz").exists());
}

/// The units' start conditions: a missing mountpoint fails the start (an
/// assertion, which `systemctl` reports as a failure), never a condition
/// (which skips the unit silently); an existing one passes. Checked with
/// `systemd-analyze condition` on the units' own lines.
#[test]
fn a_unit_fails_loudly_on_a_missing_mountpoint() {
    if !tool_ok("systemd-analyze") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    for unit in [
        "contrib/systemd/zonemount@.service",
        "contrib/systemd/user/zonemount@.service",
    ] {
        let text = fs::read_to_string(repo().join(unit)).unwrap();
        let checks: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("Condition") || l.starts_with("Assert"))
            .collect();
        assert!(
            checks.iter().all(|l| !l.starts_with("Condition")),
            "{unit}: a Condition skips the unit silently: {checks:?}"
        );
        assert!(
            checks.contains(&"AssertPathIsDirectory=%f"),
            "{unit}: {checks:?}"
        );
        let with = |mnt: &Path| {
            let mut c = Command::new("systemd-analyze");
            c.arg("condition");
            for l in &checks {
                c.arg(l.replace("%f", &mnt.to_string_lossy()));
            }
            run(&mut c, Duration::from_secs(60))
        };
        let missing = with(&tmp.path().join("no-such-mountpoint"));
        assert!(
            !missing.success() && missing.stderr.contains("Asserts failed"),
            "{unit}: {}",
            missing.describe()
        );
        let there = with(tmp.path());
        assert!(there.success(), "{unit}: {}", there.describe());
        assert!(text.contains("\nRestartPreventExitStatus=2 5\n"), "{unit}");
    }
}

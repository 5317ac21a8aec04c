//! zonemount as installed: the Debian package (built by
//! `scripts/package-deb.sh` from the binary under test, unpacked into a
//! scratch root and run from there), its systemd units, and an fstab line
//! whose source is a preset, mounted through fuse3's `mount.fuse3`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;
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
/// mount's own PATH: the binary is put in `/usr/local/bin`, in a private
/// namespace only.
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
    assert_value(&out, "left", "0");
    assert!(!ns.path().join("proj/b.txt").exists());
    assert_ne!(
        values(&out.stdout).get("nodir").map(String::as_str),
        Some("0")
    );
    let err = fs::read_to_string(ns.path().join("nodir.err")).unwrap();
    assert!(err.contains("-o dir=/path/to/project"), "{err}");
}

//! Staged zones through real mounts: what a worker does lands in the stage
//! and never in the backing dir (checked by a listing of the backing tree
//! with times), the stage outlives an unmount and a SIGKILLed daemon, one
//! mount at a time uses a stage, approvals on a staged zone, and where a
//! staged zone differs from a plain one (EXDEV for a backing directory's
//! rename).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;

/// A direct-mode project with zone `work` (backing `<tmp>/b`) staged,
/// its writes and deletes set to ask (a staged zone asks nobody), and a
/// few backing files; the stage in `<tmp>/stage`.
fn staged(approval: &str) -> Setup {
    let s = Setup::new(&format!(
        "sandbox:\n  mode: direct\n  zones:\n    work:\n      path: ./b\n      mode: rw\n      staged: true\n      approval: {approval}\n"
    ))
    .backing_dir("work", "b")
    .file("work", "f", "old\n")
    .file("work", "gone", "bye\n")
    .file("work", "d/y", "y\n")
    .file("work", "d/sub/z", "z\n");
    let stage = s.root().join("stage");
    s.arg("--stage-dir").arg(&stage.to_string_lossy())
}

fn stage_of(m: &TestMount) -> PathBuf {
    m.root().join("stage")
}

/// `zonemount mount` of the same project on `mnt` with the same stage.
fn mount_again(m: &TestMount, mnt: &Path) -> Out {
    fs::create_dir_all(mnt).unwrap();
    let stage = stage_of(m);
    let config = m.root().join("project.yaml");
    let mut args: Vec<String> = vec!["mount".into(), "-q".into()];
    args.extend(default_mount_args().iter().cloned());
    args.extend([
        "--config".to_string(),
        config.display().to_string(),
        "--stage-dir".into(),
        stage.display().to_string(),
        mnt.display().to_string(),
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = m.zonemount(&args);
    if out.success() {
        wait_mounted(mnt);
    }
    out
}

#[test]
fn a_task_in_a_staged_zone_leaves_the_backing_dir_untouched() {
    if !fuse_ok() {
        return;
    }
    let m = staged("{ write: ask, delete: ask }").mount();
    let backing = m.backing("work", "");
    let before = tree_listing(&backing, true);
    let out = m.sh_in(
        "work",
        "set -e
         echo new > new
         echo over > f
         echo more >> f
         printf 0123456789 > t && truncate -s 3 t
         chmod 600 f
         mv new renamed
         mkdir -p nd/inner && echo n > nd/inner/n && mv nd nd2
         rm gone
         rm -r d
         ln -s f sym
         ln renamed hard",
        &[],
    );
    assert!(out.success(), "the task: {}", out.describe());
    rustix::fs::setxattr(
        m.path("work/f"),
        "user.note",
        b"v",
        rustix::fs::XattrFlags::empty(),
    )
    .expect("setxattr through the mount");
    // The view shows every change...
    let view = tree_listing(&m.path("work"), false);
    let has = |prefix: &str| view.iter().any(|l| l.starts_with(prefix));
    for p in [
        "f: file 10 bytes",
        "t: file 3 bytes",
        "renamed: file 4 bytes",
        "hard: file 4 bytes",
        "nd2/inner/n:",
        "sym: link -> f",
    ] {
        assert!(has(p), "{p} not in the view: {view:#?}");
    }
    assert!(
        view.iter()
            .any(|l| l.starts_with("f:") && l.contains("mode 600") && l.contains("user.note")),
        "{view:#?}"
    );
    for gone in ["gone:", "d:", "d/y:", "new:"] {
        assert!(!has(gone), "{gone} still in the view: {view:#?}");
    }
    // ...and the backing dir none, not even a time.
    assert_eq!(
        tree_listing(&backing, true),
        before,
        "the backing dir changed"
    );
    // What changed is in the stage's upper dir.
    let upper = stage_of(&m).join("work/upper");
    assert!(upper.join("renamed").is_file() && upper.join("nd2/inner/n").is_file());
}

#[test]
fn git_in_a_staged_zone_leaves_the_backing_dir_untouched() {
    if !fuse_ok() || !require(Need::Tool("git")) {
        return;
    }
    let m = staged("{ write: preApproved, delete: preApproved }").mount();
    let backing = m.backing("work", "");
    let before = tree_listing(&backing, true);
    let out = m.sh_in(
        "work",
        "set -e
         git init -q .
         git -c user.name=t -c user.email=t@t add -A
         git -c user.name=t -c user.email=t@t commit -qm one
         echo two >> f
         git -c user.name=t -c user.email=t@t commit -qam two
         git log --oneline | wc -l",
        &[],
    );
    assert!(out.success(), "git: {}", out.describe());
    assert_eq!(out.stdout.trim(), "2");
    assert_eq!(
        tree_listing(&backing, true),
        before,
        "the backing dir changed"
    );
}

#[test]
fn a_venv_and_a_sqlite_wal_database_in_a_staged_zone_commit_whole() {
    if !fuse_ok() || !require(Need::Tool("python3")) {
        return;
    }
    let m = staged("{ write: preApproved, delete: preApproved }").mount();
    let mnt = m.mountpoint().to_string_lossy().into_owned();
    let backing = m.backing("work", "");
    let before = tree_listing(&backing, true);
    let out = worker(
        &m,
        "work",
        "set -e
         python3 -m venv --without-pip venv
         venv/bin/python -c 'import sys; print(sys.prefix)' >/dev/null
         python3 -c '
import sqlite3
db = sqlite3.connect(\"db.sqlite\")
db.execute(\"pragma journal_mode=wal\")
db.execute(\"create table t (x)\")
db.executemany(\"insert into t values (?)\", [(i,) for i in range(1000)])
db.commit()
print(db.execute(\"select count(*) from t\").fetchone()[0])
db.close()
'",
    );
    assert!(out.success(), "{}", out.describe());
    assert_eq!(out.stdout.trim(), "1000");
    assert_eq!(
        tree_listing(&backing, true),
        before,
        "the backing dir changed"
    );
    let view = tree_listing(&m.path("work"), false);
    let out = m.zonemount(&["commit", &mnt]);
    assert!(out.success(), "{}", out.describe());
    assert_eq!(tree_listing(&backing, false), view);
    // The committed database opens on the host, whole.
    let out = run(
        Command::new("python3").args([
            "-c",
            "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('select count(*) from t').fetchone()[0])",
            &m.backing("work", "db.sqlite").to_string_lossy(),
        ]),
        Duration::from_secs(30),
    );
    assert_eq!(out.stdout.trim(), "1000", "{}", out.describe());
    assert!(m.backing("work", "venv/bin/python").exists());
}

#[test]
fn the_stage_outlives_an_unmount_and_a_killed_daemon() {
    if !fuse_ok() {
        return;
    }
    let mut m = staged("{ write: ask }").mount();
    let out = m.sh_in(
        "work",
        "dd if=/dev/zero of=synced bs=4k count=4 conv=fsync status=none && echo kept > kept",
        &[],
    );
    assert!(out.success(), "{}", out.describe());
    let out = m.unmount();
    assert!(out.success(), "unmount: {}", out.describe());
    let out = mount_again(&m, m.mountpoint());
    assert!(out.success(), "remount: {}", out.describe());
    assert_eq!(fs::read_to_string(m.path("work/kept")).unwrap(), "kept\n");
    // SIGKILL: what was acknowledged (fsync'ed) is there after a remount.
    // And what the stage noted: the host changes `gone` after the stage
    // was made, then the worker deletes it (the stage notes what it saw).
    std::thread::sleep(Duration::from_millis(20));
    fs::write(m.backing("work", "gone"), "changed by the host\n").unwrap();
    let out = m.sh_in("work", "echo late > late && sync late && rm gone", &[]);
    assert!(out.success(), "{}", out.describe());
    m.kill_daemon();
    let out = mount_again(&m, m.mountpoint());
    assert!(out.success(), "remount after SIGKILL: {}", out.describe());
    assert_eq!(fs::read_to_string(m.path("work/late")).unwrap(), "late\n");
    assert_eq!(fs::metadata(m.path("work/synced")).unwrap().len(), 16384);
    assert!(!m.backing("work", "late").exists() && !m.backing("work", "kept").exists());
    assert!(!m.path("work/gone").exists() && m.backing("work", "gone").exists());
    // The note outlived the kill: the deletion is committed as the worker
    // saw it. Lost, the host's change after the stage was made would be
    // a conflict (exit 6).
    let mnt = m.mountpoint().to_string_lossy().into_owned();
    let out = m.zonemount(&["commit", &mnt]);
    assert!(out.success(), "commit after SIGKILL: {}", out.describe());
    assert!(!m.backing("work", "gone").exists());
    assert_eq!(
        fs::read_to_string(m.backing("work", "late")).unwrap(),
        "late\n"
    );
}

#[test]
fn two_mounts_are_refused_one_stage() {
    if !fuse_ok() {
        return;
    }
    let m = staged("{ write: ask }").mount();
    let second = m.root().join("mnt2");
    let out = mount_again(&m, &second);
    if out.success() {
        let _ = m.zonemount(&["unmount", &second.to_string_lossy()]);
        panic!("a second mount got the stage: {}", out.describe());
    }
    assert_eq!(out.code(), Some(2), "{}", out.describe());
    assert!(
        out.stderr.contains("is in use by another mount") && out.stderr.trim().lines().count() == 1,
        "{}",
        out.describe()
    );
    assert!(!is_mounted(&second));
}

#[test]
fn blocked_still_refuses_in_a_staged_zone() {
    if !fuse_ok() {
        return;
    }
    let m = staged("{ write: preApproved, delete: blocked }").mount();
    let r = fs::remove_file(m.path("work/f"));
    assert_errno(r, libc::EPERM);
    assert!(m.path("work/f").exists());
    fs::write(m.path("work/new"), "n").expect("writes are preApproved");
    assert!(!m.backing("work", "new").exists());
}

#[test]
fn renaming_a_backing_directory_answers_exdev_and_mv_copies() {
    if !fuse_ok() {
        return;
    }
    let m = staged("{ write: ask, delete: ask }").mount();
    let backing = m.backing("work", "");
    let before = tree_listing(&backing, true);
    assert_errno(fs::rename(m.path("work/d"), m.path("work/d2")), libc::EXDEV);
    let out = m.sh_in("work", "mv d d3 && cat d3/sub/z", &[]);
    assert!(
        out.success(),
        "mv falls back to copying: {}",
        out.describe()
    );
    assert_eq!(out.stdout, "z\n");
    assert!(!m.path("work/d").exists());
    // A file, and a directory made in the stage, rename as usual.
    fs::rename(m.path("work/f"), m.path("work/f2")).expect("file rename");
    fs::create_dir(m.path("work/n")).unwrap();
    fs::rename(m.path("work/n"), m.path("work/n2")).expect("a new dir renames");
    assert_eq!(tree_listing(&backing, true), before);
}

/// A file the host hard-linked, in a staged zone: the overlay copies up
/// the name a write goes through, and from then on the names are separate
/// files. So a write lands under the name it was made through, whichever
/// name the kernel looked up last, and still works after another name was
/// removed or renamed over; until then the names show one inode number.
#[test]
fn a_write_through_one_hard_link_lands_under_that_name() {
    if !fuse_ok() {
        return;
    }
    let s = staged("{ write: preApproved, delete: preApproved }");
    let b = s.backing("work", "");
    for n in ["q", "r", "s", "t"] {
        fs::write(b.join(n), "base\n").unwrap();
        fs::hard_link(b.join(n), b.join(format!("{n}2"))).unwrap();
    }
    let m = s.mount();
    let mnt = m.mountpoint().to_string_lossy().into_owned();
    let out = worker(
        &m,
        "work",
        "set -e; [ \"$(stat -c %i t)\" = \"$(stat -c %i t2)\" ]; \
         stat q2 q >/dev/null; echo w >> q2; \
         stat r2 r >/dev/null; rm r; echo w >> r2; \
         stat s2 s >/dev/null; mv f s; echo w >> s2; \
         cat q q2 r2 s s2",
    );
    assert!(out.success(), "{}", out.describe());
    assert_eq!(out.stdout, "base\nbase\nw\nbase\nw\nold\nbase\nw\n");
    let out = m.zonemount(&["changes", "--json", &mnt]);
    assert!(out.success(), "{}", out.describe());
    assert_eq!(
        kinds(&json_of(&out)),
        [
            ("deleted", "f"),
            ("modified", "q2"),
            ("deleted", "r"),
            ("modified", "r2"),
            ("modified", "s"),
            ("modified", "s2"),
        ]
        .map(|(k, p)| (k.to_string(), p.to_string()))
    );
}

/// A commit of one of two hard links made in the stage copies it: the
/// other name, still staged, stays a file of the stage's, so writing it
/// later changes nothing on the host until it is committed in turn (the
/// committed file used to be moved in, and the name left in the stage
/// wrote the backing file straight through). A commit of both names keeps
/// them one file on the host.
#[test]
fn a_hard_link_left_in_the_stage_never_writes_a_committed_file() {
    if !fuse_ok() {
        return;
    }
    let m = staged("{ write: preApproved, delete: preApproved }").mount();
    let mnt = m.mountpoint().to_string_lossy().into_owned();
    let out = worker(
        &m,
        "work",
        "set -e; echo safe > a; ln a b; echo one > c; ln c c2",
    );
    assert!(out.success(), "{}", out.describe());
    let out = m.zonemount(&["commit", &mnt, "/work/a"]);
    assert!(out.success(), "{}", out.describe());
    let out = worker(&m, "work", "echo unreviewed > b; cat a b");
    assert_eq!(out.stdout, "safe\nunreviewed\n", "{}", out.describe());
    assert_eq!(
        fs::read_to_string(m.backing("work", "a")).unwrap(),
        "safe\n"
    );
    assert!(!m.backing("work", "b").exists());
    let out = m.zonemount(&["changes", "--json", &mnt]);
    assert_eq!(
        kinds(&json_of(&out)),
        [("added", "b"), ("added", "c"), ("added", "c2")]
            .map(|(k, p)| (k.to_string(), p.to_string())),
        "{}",
        out.describe()
    );
    let out = m.zonemount(&["discard", &mnt, "/work/b"]);
    assert!(out.success(), "{}", out.describe());
    assert_eq!(
        fs::read_to_string(m.backing("work", "a")).unwrap(),
        "safe\n"
    );
    // Both names of c at once: one file on the host, apart from the stage.
    let out = m.zonemount(&["commit", &mnt]);
    assert!(out.success(), "{}", out.describe());
    let ino = |n: &str| {
        use std::os::unix::fs::MetadataExt;
        fs::metadata(m.backing("work", n)).unwrap().ino()
    };
    assert_eq!(
        ino("c"),
        ino("c2"),
        "the links committed together stay one file"
    );
    let out = worker(&m, "work", "echo later >> c2");
    assert!(out.success(), "{}", out.describe());
    assert_eq!(fs::read_to_string(m.backing("work", "c")).unwrap(), "one\n");
}

/// A commit of names of 250 bytes completes (its temp names, once the
/// name with a prefix and suffix, passed the 255-byte limit and the commit
/// failed partway on every run), and the overlay's own attributes a
/// worker set, which `changes` never shows, don't reach the host.
#[test]
fn long_names_commit_whole_and_overlay_attributes_stay_behind() {
    if !fuse_ok() {
        return;
    }
    let m = staged("{ write: preApproved, delete: preApproved }").mount();
    let mnt = m.mountpoint().to_string_lossy().into_owned();
    let long = "n".repeat(250);
    let out = worker(
        &m,
        "work",
        &format!(
            "set -e; ln -s f {long}; echo x > {long}.; ln {long}. l2; echo y > z; rm gone; \
             python3 -c \"import os\nfor n in ('user.overlay.whiteout', 'user.overlay.metacopy', 'user.note'): os.setxattr('z', n, b'y')\""
        ),
    );
    assert!(out.success(), "{}", out.describe());
    let out = m.zonemount(&["commit", &mnt]);
    assert!(out.success(), "{}", out.describe());
    let b = m.backing("work", "");
    assert_eq!(fs::read_link(b.join(&long)).unwrap(), Path::new("f"));
    assert_eq!(
        fs::read_to_string(b.join(format!("{long}."))).unwrap(),
        "x\n"
    );
    assert_eq!(fs::read_to_string(b.join("l2")).unwrap(), "x\n");
    assert!(!b.join("gone").exists());
    let mut names = vec![0u8; 4096];
    let n = rustix::fs::listxattr(b.join("z"), &mut names).unwrap();
    let names: Vec<&[u8]> = names[..n]
        .split(|c| *c == 0)
        .filter(|x| !x.is_empty())
        .collect();
    assert_eq!(names, [b"user.note".as_slice()]);
    let out = m.zonemount(&["changes", "--json", &mnt]);
    assert!(kinds(&json_of(&out)).is_empty(), "{}", out.describe());
}

/// What a commit carries besides content and mode, `changes` shows: a
/// new owner and user xattrs are named in the list and spelt out in
/// `--diff` (an owner change showed only in `--json`). File capabilities
/// and other `security.*`/`trusted.*` attributes a worker set in the stage
/// are not shown, and never reach the host: a staged copy of a program
/// given `cap_setuid`, touched, was committed with it and ran as root for
/// any user (found by an attack pass).
#[test]
fn owner_and_xattrs_show_and_capabilities_stay_in_the_stage() {
    if !fuse_ok() || !root_ok() {
        return;
    }
    let m = staged("{ write: preApproved, delete: preApproved }").mount();
    let mnt = m.mountpoint().to_string_lossy().into_owned();
    // VFS_CAP_REVISION_2 with the effective flag; cap_setuid (bit 7)
    // permitted.
    let out = worker(
        &m,
        "work",
        "set -e; python3 -c \"import os\nos.setxattr('f', 'security.capability', bytes([1, 0, 0, 2, 0x80] + [0] * 15))\nos.setxattr('f', 'trusted.worker', b't')\nos.setxattr('f', 'user.note', b'n')\"; \
         touch f; chown 65534:65534 d/y",
    );
    assert!(out.success(), "{}", out.describe());
    let out = m.zonemount(&["changes", "--diff", &mnt]);
    assert!(out.success(), "{}", out.describe());
    for want in [
        "M  /work/f  (0644, 4 bytes, xattrs changed)",
        "M  /work/d/y  (0644, 2 bytes, owner changed)",
        "\nxattr user.note: set f\n",
        "\nowner 0:0 -> 65534:65534 d/y\n",
    ] {
        assert!(out.stdout.contains(want), "{want:?} in {}", out.describe());
    }
    assert!(
        !out.stdout.contains("security.") && !out.stdout.contains("trusted."),
        "{}",
        out.describe()
    );
    let out = m.zonemount(&["commit", &mnt]);
    assert!(out.success(), "{}", out.describe());
    let b = m.backing("work", "");
    let mut names = vec![0u8; 4096];
    let n = rustix::fs::listxattr(b.join("f"), &mut names).unwrap();
    let names: Vec<&[u8]> = names[..n]
        .split(|c| *c == 0)
        .filter(|x| !x.is_empty() && !x.starts_with(b"security.selinux"))
        .collect();
    assert_eq!(
        names,
        [b"user.note".as_slice()],
        "the committed file's xattrs"
    );
    use std::os::unix::fs::MetadataExt;
    assert_eq!(fs::metadata(b.join("d/y")).unwrap().uid(), 65534);
}

/// A host dir replaced by a file is shown as what the commit does: the
/// dir's whole tree goes (it read as a small edit of the file, `M  /work/d
/// (0644, 5 bytes)`: found by an attack pass).
#[test]
fn a_dir_replaced_by_a_file_says_its_tree_goes() {
    if !fuse_ok() {
        return;
    }
    let m = staged("{ write: preApproved, delete: preApproved }").mount();
    let mnt = m.mountpoint().to_string_lossy().into_owned();
    let out = worker(&m, "work", "set -e; rm -r d; echo tiny > d");
    assert!(out.success(), "{}", out.describe());
    let out = m.zonemount(&["changes", &mnt]);
    assert!(
        out.stdout
            .contains("M  /work/d  (0644, 5 bytes, replaces a dir of 3 entries)"),
        "{}",
        out.describe()
    );
    let out = m.zonemount(&["changes", "--json", &mnt]);
    let v = json_of(&out);
    let c = &v["zones"][0]["changes"][0];
    assert_eq!(
        (c["path"].as_str(), c["entries"].as_u64()),
        (Some("d"), Some(3)),
        "{v}"
    );
    assert_eq!(c["what"], serde_json::json!(["type"]), "{v}");
}

/// A new hard link of a file the host hard-linked, in a staged zone: the
/// overlay copies the name linked from up and links the new name to the
/// copy, so those two names are one file from then on (a write through one
/// shows through the other at once, size and all), and the host's other
/// name keeps what it had.
#[test]
fn a_new_link_to_a_host_hard_link_is_one_file_with_it() {
    if !fuse_ok() {
        return;
    }
    let s = staged("{ write: preApproved, delete: preApproved }");
    let b = s.backing("work", "");
    fs::write(b.join("v"), "base\n").unwrap();
    fs::hard_link(b.join("v"), b.join("v2")).unwrap();
    let m = s.mount();
    let out = worker(
        &m,
        "work",
        "set -e; stat v v2 >/dev/null; cat v2 >/dev/null; ln v2 v3; echo more >> v3; \
         cat v2; echo --; cat v; echo --; \
         [ \"$(stat -c %i v2)\" = \"$(stat -c %i v3)\" ]; stat -c %h v3",
    );
    assert!(out.success(), "{}", out.describe());
    assert_eq!(out.stdout, "base\nmore\n--\nbase\n--\n2\n");
}

/// `sh -c script` in `rel` of the mount, in a session of its own: a
/// worker, as `run` starts one (a commit from its own session would be
/// refused).
fn worker(m: &TestMount, rel: &str, script: &str) -> Out {
    m.sh_in(
        rel,
        &format!("setsid -w sh -c '{}'", script.replace('\'', "'\\''")),
        &[],
    )
}

fn json_of(out: &Out) -> serde_json::Value {
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", out.describe()))
}

/// (kind, path) of each change in a `changes --json` answer.
fn kinds(v: &serde_json::Value) -> Vec<(String, String)> {
    v["zones"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|z| z["changes"].as_array().cloned().unwrap_or_default())
        .map(|c| {
            (
                c["kind"].as_str().unwrap_or("?").to_string(),
                c["path"].as_str().unwrap_or("?").to_string(),
            )
        })
        .collect()
}

#[test]
fn changes_then_commit_make_the_backing_dir_what_the_mount_showed() {
    if !fuse_ok() {
        return;
    }
    let m = staged("{ write: ask, delete: ask }").mount();
    let mnt = m.mountpoint().to_string_lossy().into_owned();
    let out = worker(
        &m,
        "work",
        "set -e; echo two >> f; echo n > new; rm gone; rm -r d; mkdir nd; echo i > nd/i; ln -s new sym; chmod 600 new",
    );
    assert!(out.success(), "{}", out.describe());
    let out = m.zonemount(&["changes", "--json", &mnt]);
    assert!(out.success(), "{}", out.describe());
    assert_eq!(
        kinds(&json_of(&out)),
        [
            ("deleted", "d"),
            ("modified", "f"),
            ("deleted", "gone"),
            ("added", "nd"),
            ("added", "nd/i"),
            ("added", "new"),
            ("added", "sym"),
        ]
        .map(|(k, p)| (k.to_string(), p.to_string()))
    );
    let out = m.zonemount(&["changes", "--diff", &mnt, "/work/f"]);
    assert!(out.success(), "{}", out.describe());
    assert!(
        out.stdout.contains("M  /work/f")
            && out.stdout.contains("--- a/f\n+++ b/f\n")
            && out.stdout.contains("+two"),
        "{}",
        out.describe()
    );
    let view = tree_listing(&m.path("work"), false);
    let out = m.zonemount(&["commit", &mnt]);
    assert!(out.success(), "commit: {}", out.describe());
    assert!(out.stdout.contains("7 committed"), "{}", out.describe());
    assert_eq!(
        tree_listing(&m.backing("work", ""), false),
        view,
        "the backing dir is the view"
    );
    assert_eq!(
        tree_listing(&m.path("work"), false),
        view,
        "the view is unchanged"
    );
    let out = m.zonemount(&["changes", "--json", &mnt]);
    assert!(kinds(&json_of(&out)).is_empty(), "{}", out.describe());
    // The mount goes on working on the committed files.
    let out = worker(&m, "work", "echo three >> f && cat f");
    assert_eq!(out.stdout, "old\ntwo\nthree\n", "{}", out.describe());
    assert_eq!(
        fs::read_to_string(m.backing("work", "f")).unwrap(),
        "old\ntwo\n"
    );
}

#[test]
fn discard_shows_the_backing_dir_again_at_once() {
    if !fuse_ok() {
        return;
    }
    let m = staged("{ write: ask, delete: ask }").mount();
    let mnt = m.mountpoint().to_string_lossy().into_owned();
    let backing = m.backing("work", "");
    let before = tree_listing(&backing, true);
    // Seen through the mount first, so the kernel caches them.
    let plain = tree_listing(&m.path("work"), false);
    let out = worker(
        &m,
        "work",
        "set -e; echo x > f; echo n > new; rm gone; rm -r d",
    );
    assert!(out.success(), "{}", out.describe());
    assert_ne!(tree_listing(&m.path("work"), false), plain);
    let out = m.zonemount(&["discard", &mnt, "/work/new"]);
    assert!(out.success(), "{}", out.describe());
    assert!(!m.path("work/new").exists(), "discarded at once");
    assert!(m.path("work/f").exists());
    let out = m.zonemount(&["discard", &mnt]);
    assert!(out.success(), "{}", out.describe());
    assert_eq!(
        tree_listing(&m.path("work"), false),
        plain,
        "the view is the backing dir again"
    );
    assert_eq!(fs::read_to_string(m.path("work/f")).unwrap(), "old\n");
    assert_eq!(
        tree_listing(&backing, true),
        before,
        "the backing dir never changed"
    );
}

#[test]
fn a_host_change_is_a_conflict_and_force_applies_it() {
    if !fuse_ok() {
        return;
    }
    let m = staged("{ write: ask }").mount();
    let mnt = m.mountpoint().to_string_lossy().into_owned();
    let out = worker(&m, "work", "echo worker > f && echo n > new");
    assert!(out.success(), "{}", out.describe());
    std::thread::sleep(Duration::from_millis(20));
    fs::write(m.backing("work", "f"), "host\n").unwrap();
    let out = m.zonemount(&["commit", "--json", &mnt]);
    assert_eq!(out.code(), Some(6), "conflicts exit 6: {}", out.describe());
    let v = json_of(&out);
    let z = &v["zones"][0];
    assert_eq!(z["conflicts"][0]["path"], "f", "{v}");
    assert_eq!(z["applied"][0]["path"], "new", "{v}");
    assert_eq!(
        fs::read_to_string(m.backing("work", "f")).unwrap(),
        "host\n"
    );
    assert_eq!(fs::read_to_string(m.backing("work", "new")).unwrap(), "n\n");
    let out = m.zonemount(&["commit", "--force", &mnt]);
    assert!(out.success(), "{}", out.describe());
    assert_eq!(
        fs::read_to_string(m.backing("work", "f")).unwrap(),
        "worker\n"
    );
}

#[test]
fn a_worker_cannot_commit_its_own_stage() {
    if !fuse_ok() {
        return;
    }
    let m = staged("{ write: ask }").mount();
    let bin = env!("CARGO_BIN_EXE_zonemount");
    let mnt = m.mountpoint().to_string_lossy().into_owned();
    let out = worker(
        &m,
        "work",
        &format!("echo mine > new && {bin} commit {mnt}; echo \"rc=$?\""),
    );
    assert!(out.stdout.contains("rc=1"), "{}", out.describe());
    assert!(out.stderr.contains("commit refused"), "{}", out.describe());
    assert!(!m.backing("work", "new").exists());
    // Once the worker is gone, its supervisor commits.
    let out = m.zonemount(&["commit", &mnt]);
    assert!(out.success(), "{}", out.describe());
    assert!(m.backing("work", "new").exists());
}

#[test]
fn a_stage_dir_is_reviewed_and_committed_after_the_unmount() {
    if !fuse_ok() {
        return;
    }
    let mut m = staged("{ write: ask }").mount();
    let out = worker(&m, "work", "echo n > new && rm gone");
    assert!(out.success(), "{}", out.describe());
    let stage = stage_of(&m).to_string_lossy().into_owned();
    // While mounted, the stage dir is the mount's.
    let out = m.zonemount(&["changes", &stage]);
    assert_eq!(out.code(), Some(1), "{}", out.describe());
    assert!(
        out.stderr.contains("give the mountpoint instead"),
        "{}",
        out.describe()
    );
    assert!(m.unmount().success());
    let out = m.zonemount(&["changes", "--json", &stage]);
    assert!(out.success(), "{}", out.describe());
    assert_eq!(kinds(&json_of(&out)).len(), 2);
    let out = m.zonemount(&["commit", &stage, "/work/new"]);
    assert!(out.success(), "{}", out.describe());
    assert!(m.backing("work", "new").exists() && m.backing("work", "gone").exists());
    let out = m.zonemount(&["discard", &stage]);
    assert!(out.success(), "{}", out.describe());
    assert!(
        m.backing("work", "gone").exists(),
        "the delete was discarded"
    );
}

#[test]
fn run_commits_on_success_and_keeps_the_stage_for_review_otherwise() {
    if !fuse_ok() {
        return;
    }
    let s = Setup::new("")
        .backing_dir("work", "b")
        .file("work", "f", "old\n");
    let root = s.root().to_path_buf();
    let zone = format!("work={}:staged", root.join("b").display());
    let stage = root.join("stage").to_string_lossy().into_owned();
    let run_in = |script: &str, extra: &[&str]| {
        let mut args = vec![
            "run",
            "-q",
            "--zone",
            zone.as_str(),
            "--stage-dir",
            stage.as_str(),
        ];
        args.extend_from_slice(extra);
        args.extend(["--", "sh", "-c", script]);
        run(
            Command::new(env!("CARGO_BIN_EXE_zonemount"))
                .args(&args)
                .current_dir(&root),
            Duration::from_secs(60),
        )
    };
    let out = run_in(
        "echo one > a && echo \"$ZONEMOUNT_STAGED\" > staged",
        &["--commit-on-success"],
    );
    assert!(out.success(), "{}", out.describe());
    assert_eq!(fs::read_to_string(root.join("b/a")).unwrap(), "one\n");
    let told = fs::read_to_string(root.join("b/staged")).unwrap();
    assert!(
        told.trim_end().ends_with("/work"),
        "ZONEMOUNT_STAGED={told}"
    );
    assert!(!Path::new(&stage).exists(), "a committed stage is removed");
    // CMD failed: nothing committed; with --review and no terminal the
    // stage is kept and the commands to finish printed.
    let out = run_in("echo two > b; exit 3", &["--commit-on-success", "--review"]);
    assert_eq!(out.code(), Some(3), "CMD's status: {}", out.describe());
    assert!(!root.join("b/b").exists());
    assert!(
        out.stderr.contains("A  /work/b")
            && out.stderr.contains(&format!("zonemount commit {stage}")),
        "{}",
        out.describe()
    );
    let out = run(
        Command::new(env!("CARGO_BIN_EXE_zonemount")).args(["commit", &stage]),
        Duration::from_secs(30),
    );
    assert!(out.success(), "{}", out.describe());
    assert_eq!(fs::read_to_string(root.join("b/b")).unwrap(), "two\n");
    // Nothing changed: no stage is left behind.
    zonemount::stage::dir::remove(Path::new(&stage)).unwrap();
    let out = run_in("cat f >/dev/null", &[]);
    assert!(out.success(), "{}", out.describe());
    assert!(!Path::new(&stage).exists(), "an empty stage is removed");
}

#[test]
fn a_plain_rw_zone_reports_what_the_task_changed_and_the_ledger_keeps_it() {
    if !fuse_ok() {
        return;
    }
    let s = Setup::new("sandbox:\n  mode: direct\n  zones:\n    work: { path: ./b, mode: rw }\n")
        .backing_dir("work", "b")
        .file("work", "f", "old\n")
        .file("work", "gone", "bye\n")
        .file("work", "x", "x\n");
    let ledger = s.root().join("audit.jsonl");
    let mut m = s.arg("--audit-log").arg(&ledger.to_string_lossy()).mount();
    let mnt = m.mountpoint().to_string_lossy().into_owned();
    let out = worker(
        &m,
        "work",
        "set -e; echo a > a; echo more >> f; rm gone; echo t > tmp; rm tmp; mv x y; mkdir d",
    );
    assert!(out.success(), "{}", out.describe());
    let out = m.zonemount(&["changes", "--json", &mnt]);
    assert!(out.success(), "{}", out.describe());
    let v = json_of(&out);
    assert_eq!(v["zones"][0]["staged"], false, "{v}");
    assert_eq!(
        kinds(&v),
        [
            ("added", "a"),
            ("added", "d"),
            ("modified", "f"),
            ("deleted", "gone"),
            ("deleted", "x"),
            ("added", "y"),
        ]
        .map(|(k, p)| (k.to_string(), p.to_string()))
    );
    // A plain zone has nothing to commit.
    let out = m.zonemount(&["commit", &mnt]);
    assert_eq!(out.code(), Some(2), "{}", out.describe());
    assert!(m.unmount().success());
    let text = fs::read_to_string(&ledger).unwrap();
    let rec = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|r| r["event"] == "changes")
        .unwrap_or_else(|| panic!("no change report in the ledger:\n{text}"));
    assert_eq!(rec["zone"], "work");
    assert_eq!(
        rec["summary"], "3 added, 1 modified, 2 deleted, 0 renamed",
        "{rec}"
    );
    assert!(
        rec["paths"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p == "added /work/a"),
        "{rec}"
    );
}

#[test]
fn the_rust_api_reviews_commits_and_discards() {
    if !fuse_ok() {
        return;
    }
    use zonemount::mount::api;
    // 0755 whatever the umask (a mount in this process clears it): a
    // stage dir is refused under a dir others may write in.
    let tmp = tempfile::Builder::new()
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .tempdir()
        .unwrap();
    let root = fs::canonicalize(tmp.path()).unwrap();
    fs::create_dir_all(root.join("b")).unwrap();
    fs::write(root.join("b/f"), "old\n").unwrap();
    fs::create_dir(root.join("mnt")).unwrap();
    fs::write(
        root.join("project.yaml"),
        "sandbox:\n  mode: direct\n  zones:\n    work: { path: ./b, mode: rw, staged: true }\n",
    )
    .unwrap();
    let table = zonemount::config::load_project(
        Some(&root.join("project.yaml")),
        &root,
        &zonemount::config::LoadOptions::from_host(false),
    )
    .unwrap();
    let mut opts = api::Options::new(root.join("mnt"));
    opts.stage_dir = Some(root.join("stage"));
    let (mount, _requests) = api::mount(&table, opts).unwrap();
    let mnt = mount.mountpoint().to_path_buf();
    fs::write(mnt.join("work/new"), "n\n").unwrap();
    fs::write(mnt.join("work/f"), "new\n").unwrap();
    let v = mount.changes(&[], true).unwrap();
    assert_eq!(kinds(&v).len(), 2, "{v}");
    let v = mount.patch(&["/work/f".into()]).unwrap();
    assert_eq!(
        v["zones"][0]["patch"].as_str().unwrap(),
        "diff --git a/f b/f\nindex 3367afdbbf91e638efe983616377c60477cc6612..3e757656cf36eca53338e520d134963a44f793f8 100644\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-old\n+new\n",
        "{v}"
    );
    let v = mount.discard(&["/work/new".into()]).unwrap();
    assert_eq!(v["zones"][0]["discarded"][0]["path"], "new", "{v}");
    let v = mount.commit(&[], false).unwrap();
    assert_eq!(v["zones"][0]["applied"][0]["path"], "f", "{v}");
    assert_eq!(fs::read_to_string(root.join("b/f")).unwrap(), "new\n");
    assert!(!root.join("b/new").exists());
    mount.unmount().unwrap();
    assert!(!is_mounted(&mnt));
}

// Commit never deletes what the host made: a host change on a path a
// staged change needs (the path, a parent, a child) is a conflict, left
// as the host made it without --force; the rest is applied.

/// The worker's `script` (it also writes `other`, which nothing
/// conflicts with), then the host's change, then `commit --json` of
/// `paths` (all when empty): exit 6, the host's tree as it made it (the
/// worker's `other` aside, when committed); returns the conflicts' and
/// the applied changes' paths, sorted.
fn conflicted_commit(
    m: &TestMount,
    script: &str,
    host: impl FnOnce(&Path),
    paths: &[&str],
) -> (Vec<String>, Vec<String>) {
    let out = worker(m, "work", &format!("set -e; echo o > other; {script}"));
    assert!(out.success(), "{}", out.describe());
    // The host's change gets other times than the stage's notes.
    std::thread::sleep(Duration::from_millis(20));
    let backing = m.backing("work", "");
    host(&backing);
    let before = tree_listing(&backing, true);
    let mnt = m.mountpoint().to_string_lossy().into_owned();
    let mut args = vec!["commit", "--json", &mnt];
    args.extend(paths);
    let out = m.zonemount(&args);
    assert_eq!(out.code(), Some(6), "conflicts exit 6: {}", out.describe());
    let mut after = tree_listing(&backing, true);
    after.retain(|l| !l.starts_with("other: "));
    assert_eq!(after, before, "the host's tree as it made it");
    let v = json_of(&out);
    let of = |key: &str| {
        let mut p: Vec<String> = v["zones"][0][key]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| c["path"].as_str().unwrap_or("?").to_string())
            .collect();
        p.sort();
        p
    };
    (of("conflicts"), of("applied"))
}

#[test]
fn a_host_file_where_the_stage_has_a_new_dir_is_a_conflict_and_stays() {
    if !fuse_ok() {
        return;
    }
    let m = staged("{ write: ask }").mount();
    let (conflicts, applied) = conflicted_commit(
        &m,
        "mkdir nd && echo i > nd/i",
        |b| fs::write(b.join("nd"), "host\n").unwrap(),
        &[],
    );
    assert_eq!(conflicts, ["nd", "nd/i"]);
    assert_eq!(applied, ["other"]);
    assert_eq!(
        fs::read_to_string(m.backing("work", "nd")).unwrap(),
        "host\n"
    );
    // Still staged; --force replaces the host's file.
    let mnt = m.mountpoint().to_string_lossy().into_owned();
    let out = m.zonemount(&["commit", "--force", &mnt]);
    assert!(out.success(), "{}", out.describe());
    assert_eq!(
        fs::read_to_string(m.backing("work", "nd/i")).unwrap(),
        "i\n"
    );
}

#[test]
fn a_host_symlink_where_the_stage_has_a_new_dir_is_a_conflict_and_stays() {
    if !fuse_ok() {
        return;
    }
    let m = staged("{ write: ask }").mount();
    let (conflicts, applied) = conflicted_commit(
        &m,
        "mkdir nd && echo i > nd/i",
        |b| std::os::unix::fs::symlink("d", b.join("nd")).unwrap(),
        &[],
    );
    assert_eq!(conflicts, ["nd", "nd/i"]);
    assert_eq!(applied, ["other"]);
    assert_eq!(
        fs::read_link(m.backing("work", "nd")).unwrap(),
        Path::new("d")
    );
}

#[test]
fn a_host_dir_turned_into_a_file_where_the_stage_changed_inside_is_a_conflict() {
    if !fuse_ok() {
        return;
    }
    let m = staged("{ write: ask }").mount();
    let (conflicts, applied) = conflicted_commit(
        &m,
        "echo w > d/sub/z && echo n > d/new",
        |b| {
            fs::remove_dir_all(b.join("d")).unwrap();
            fs::write(b.join("d"), "host\n").unwrap();
        },
        &[],
    );
    assert_eq!(conflicts, ["d", "d/new", "d/sub", "d/sub/z"]);
    assert_eq!(applied, ["other"]);
    assert_eq!(
        fs::read_to_string(m.backing("work", "d")).unwrap(),
        "host\n"
    );
}

#[test]
fn a_host_dir_where_the_stage_has_a_new_file_is_a_conflict_and_stays() {
    if !fuse_ok() {
        return;
    }
    let m = staged("{ write: ask }").mount();
    let (conflicts, applied) = conflicted_commit(
        &m,
        "echo n > new",
        |b| {
            fs::create_dir(b.join("new")).unwrap();
            fs::write(b.join("new/x"), "host\n").unwrap();
        },
        &[],
    );
    assert_eq!(conflicts, ["new"]);
    assert_eq!(applied, ["other"]);
}

#[test]
fn a_host_child_in_a_dir_the_stage_deleted_is_a_conflict_and_stays() {
    if !fuse_ok() {
        return;
    }
    let m = staged("{ write: ask, delete: ask }").mount();
    let (conflicts, applied) = conflicted_commit(
        &m,
        "rm -r d",
        |b| fs::write(b.join("d/sub/host"), "host\n").unwrap(),
        &[],
    );
    assert_eq!(conflicts, ["d"]);
    assert_eq!(applied, ["other"]);
    assert_eq!(
        fs::read_to_string(m.backing("work", "d/sub/host")).unwrap(),
        "host\n"
    );
}

#[test]
fn a_parent_the_host_replaced_by_a_symlink_is_a_conflict_and_stays() {
    if !fuse_ok() {
        return;
    }
    let m = staged("{ write: ask }").mount();
    let (conflicts, applied) = conflicted_commit(
        &m,
        "echo n > d/sub/new",
        |b| {
            fs::rename(b.join("d"), b.join("moved")).unwrap();
            std::os::unix::fs::symlink("moved", b.join("d")).unwrap();
        },
        &[],
    );
    assert_eq!(conflicts, ["d", "d/sub", "d/sub/new"]);
    assert_eq!(applied, ["other"]);
    assert!(!m.backing("work", "moved/sub/new").exists());
}

#[test]
fn a_partial_commit_inside_a_new_dir_the_host_made_a_file_is_a_conflict() {
    if !fuse_ok() {
        return;
    }
    let m = staged("{ write: ask }").mount();
    let (conflicts, applied) = conflicted_commit(
        &m,
        "mkdir nd && echo i > nd/i",
        |b| fs::write(b.join("nd"), "host\n").unwrap(),
        &["/work/nd/i"],
    );
    assert_eq!(conflicts, ["nd/i"]);
    assert!(applied.is_empty(), "{applied:?}");
    assert_eq!(
        fs::read_to_string(m.backing("work", "nd")).unwrap(),
        "host\n"
    );
    assert!(!m.backing("work", "other").exists(), "not in the filter");
    // People are told where the host's change is.
    let mnt = m.mountpoint().to_string_lossy().into_owned();
    let out = m.zonemount(&["commit", &mnt, "/work/nd/i"]);
    assert_eq!(out.code(), Some(6), "{}", out.describe());
    assert!(
        out.stdout.contains(
            "conflict  /work/nd/i: the host made a file where the worker made a dir above it (/work/nd)\n"
        ),
        "{}",
        out.describe()
    );
    assert_eq!(
        fs::read_to_string(m.backing("work", "nd")).unwrap(),
        "host\n"
    );
}

#[test]
fn a_backing_dir_the_host_replaced_is_a_conflict_for_every_change() {
    if !fuse_ok() {
        return;
    }
    let m = staged("{ write: ask }").mount();
    let backing = m.backing("work", "");
    let old = backing.with_file_name("b.old");
    let (conflicts, applied) = conflicted_commit(
        &m,
        "echo w > f",
        |b| {
            fs::rename(b, &old).unwrap();
            fs::create_dir(b).unwrap();
        },
        &[],
    );
    assert_eq!(conflicts, ["f", "other"]);
    assert!(applied.is_empty(), "{applied:?}");
    assert_eq!(fs::read_dir(&backing).unwrap().count(), 0);
    assert_eq!(fs::read_to_string(old.join("f")).unwrap(), "old\n");
}

/// A stage that holds no change is made over whatever dir is at the
/// backing path when it is mounted again (a project cloned afresh).
#[test]
fn an_empty_stage_mounted_over_a_new_backing_dir_commits_into_it() {
    if !fuse_ok() {
        return;
    }
    let mut m = staged("{ write: ask }").mount();
    let mnt = m.mountpoint().to_string_lossy().into_owned();
    let out = worker(&m, "work", "echo w > f");
    assert!(out.success(), "{}", out.describe());
    let out = m.zonemount(&["commit", &mnt]);
    assert!(out.success(), "{}", out.describe());
    assert!(m.unmount().success());
    let backing = m.backing("work", "");
    fs::rename(&backing, backing.with_file_name("b.old")).unwrap();
    fs::create_dir(&backing).unwrap();
    let out = mount_again(&m, m.mountpoint());
    assert!(out.success(), "remount: {}", out.describe());
    let out = worker(&m, "work", "echo n > g");
    assert!(out.success(), "{}", out.describe());
    let out = m.zonemount(&["commit", &mnt]);
    assert!(out.success(), "{}", out.describe());
    assert_eq!(fs::read_to_string(m.backing("work", "g")).unwrap(), "n\n");
}

/// A path outside the mount is refused (exit 2) in the name of the command
/// that was given it, not another's.
#[test]
fn each_stage_command_names_itself_in_its_errors() {
    if !fuse_ok() {
        return;
    }
    let m = staged("{ write: ask, delete: ask }").mount();
    let mnt = m.mountpoint().to_string_lossy().into_owned();
    for cmd in ["changes", "commit", "discard"] {
        let out = m.zonemount(&[cmd, &mnt, "/etc/hostname"]);
        assert_eq!(out.code(), Some(2), "{cmd}: {}", out.describe());
        let want = format!(
            "zonemount: {cmd}: /etc/hostname (/etc/hostname) is outside the mount {mnt}; give a path under it"
        );
        assert!(out.stderr.starts_with(&want), "{cmd}: {}", out.describe());
    }
    assert_eq!(fs::read_to_string(m.backing("work", "f")).unwrap(), "old\n");
}

/// `git` in `dir` with its own config only (none of the machine's), the
/// repository search stopped above `dir`.
fn git(dir: &Path, args: &[&str]) -> Out {
    let mut cmd = Command::new("git");
    cmd.args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CEILING_DIRECTORIES", dir.parent().unwrap_or(dir))
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE");
    run(&mut cmd, Duration::from_secs(60))
}

/// git's tree hash of the files under `dir` (names, contents, the
/// execute bit, symlinks: what a patch can carry), indexed in `scratch`.
fn tree_hash(dir: &Path, scratch: &Path) -> String {
    fs::create_dir_all(scratch).unwrap();
    let out = git(scratch, &["init", "-q", "."]);
    assert!(out.success(), "{}", out.describe());
    let (gd, wt) = (
        format!("--git-dir={}", scratch.join(".git").display()),
        format!("--work-tree={}", dir.display()),
    );
    let out = git(scratch, &[&gd, &wt, "add", "-A", "."]);
    assert!(out.success(), "{}", out.describe());
    let out = git(scratch, &[&gd, &wt, "write-tree"]);
    assert!(out.success(), "{}", out.describe());
    out.stdout.trim().to_string()
}

#[test]
fn changes_patch_applied_by_git_to_a_copy_of_the_backing_dir_gives_the_view() {
    if !fuse_ok() || !require(Need::Tool("git")) {
        return;
    }
    let s = staged("{ write: ask, delete: ask }")
        .file(
            "work",
            "edit.txt",
            "one\ntwo\nthree\nfour\nfive\nsix\nseven\n",
        )
        .file("work", "log.txt", "1\n")
        .file("work", "noeol.txt", "no newline")
        .file("work", "cr.txt", "one\ntwo\n")
        .file("work", "run.sh", "#!/bin/sh\necho hi\n")
        .file("work", "blob.bin", [0u8, 1, 2, 3, 255, 0, 7])
        .file("work", "old name.txt", "moving with a space\n")
        .file("work", "tree/a.txt", "a\n")
        .file("work", "tree/sub/b.bin", [0u8, 0, 1])
        .file("work", "tree/sub/empty", "")
        .symlink("work", "tree/ln", "a.txt")
        .symlink("work", "link", "edit.txt")
        .file("work", "type1.txt", "a file, then a symlink\n")
        .file("work", "dir2/inner.txt", "a dir, then a file\n")
        .file("work", "file3", "a file, then a dir\n")
        .file("work", "mv-edit.txt", "one\ntwo\nthree\nfour\n")
        .file("work", "redo/x.txt", "x\n")
        .file("work", "redo/keep.txt", "kept\n");
    let m = s.mount();
    let out = worker(
        &m,
        "work",
        "set -e
         sed -i s/three/THREE/ edit.txt
         echo 2 >> log.txt
         printf \"no newline, changed\" > noeol.txt
         printf \"one\\rX\\ntwo\\n\" > cr.txt
         chmod +x run.sh
         ln -sfn log.txt link
         printf \"\\000\\001\\002\\003\\376\\000\\007\\010\" > blob.bin
         : > empty
         echo fresh > fresh.txt
         ln -s fresh.txt newlink
         rm -r tree
         mkdir -p ntree/x && echo y > ntree/x/y.txt && printf \"\\000z\" > ntree/z.bin
         mv \"old name.txt\" \"new name.txt\"
         echo spaced > \"with space.txt\"
         echo latin > \"$(printf \"caf\\351.txt\")\"
         echo quoted > q\\\"uote.txt
         mkdir emptydir
         chmod 600 f
         rm type1.txt && ln -s fresh.txt type1.txt
         rm -r dir2 && echo now a file > dir2
         rm file3 && mkdir file3 && echo inside > file3/in
         mv mv-edit.txt moved-edit.txt && echo five >> moved-edit.txt
         chmod 700 d/sub
         rm -r redo && mkdir redo && echo again > redo/keep.txt && chmod 700 redo
         rm d/y",
    );
    assert!(out.success(), "{}", out.describe());
    let mnt = m.mountpoint().display().to_string();
    let json = json_of(&m.zonemount(&["changes", "--json", &mnt]));
    let listed = kinds(&json);
    // A stage knows a rename where overlayfs records the file's origin
    // (as root); elsewhere (a user namespace's overlay) it is a deletion
    // and a new file, and so is the patch.
    let renamed = listed.contains(&("renamed".to_string(), "new name.txt".to_string()));
    assert!(
        renamed
            || (listed.contains(&("deleted".to_string(), "old name.txt".to_string()))
                && listed.contains(&("added".to_string(), "new name.txt".to_string()))),
        "{listed:?}"
    );
    let out = m.zonemount(&["changes", "--patch", &mnt]);
    assert!(out.success(), "{}", out.describe());
    let patch = out.stdout.clone();
    let rename = "rename from old name.txt\nrename to new name.txt\n";
    let edited = "rename from mv-edit.txt\nrename to moved-edit.txt\nindex ";
    let moved = "diff --git a/old name.txt b/old name.txt\ndeleted file mode 100644\n";
    assert!(
        if renamed {
            patch.contains(rename) && patch.contains(edited)
        } else {
            patch.contains(moved)
        },
        "renamed: {renamed}\n{patch}"
    );
    // What git can't carry, on stderr, one line each.
    for note in [
        "zonemount: changes --patch: /work/emptydir: not in the patch: an empty directory\n",
        "zonemount: changes --patch: /work/f: not in the patch: mode 0644 -> 0600 (git keeps only a file's execute bit)\n",
        "zonemount: changes --patch: /work/d/sub: not in the patch: mode 0755 -> 0700 (git keeps only a file's execute bit)\n",
        "zonemount: changes --patch: /work/redo: not in the patch: mode 0755 -> 0700 (git keeps only a file's execute bit)\n",
    ] {
        assert!(out.stderr.contains(note), "{note:?} not in {}", out.stderr);
    }
    assert_eq!(out.stderr.lines().count(), 4, "{}", out.stderr);
    // `--diff`: the list, then the diffs, no list line among them.
    let out = m.zonemount(&["changes", "--diff", &mnt]);
    assert!(out.success(), "{}", out.describe());
    let (list, diffs) = out.stdout.split_once("\n\n").unwrap();
    assert!(
        list.lines().all(|l| l.starts_with(['A', 'M', 'D', 'R'])),
        "{list}"
    );
    assert!(
        diffs.lines().all(|l| !l.contains("  /work/")) && diffs.contains("+THREE"),
        "{diffs}"
    );
    // A lone CR is inside its line (shown escaped), as git counts lines.
    assert!(
        diffs.contains("+++ b/cr.txt\n@@ -1,2 +1,2 @@\n-one\n+one\\rX\n two\n"),
        "{diffs}"
    );
    assert!(
        patch.starts_with("diff --git "),
        "nothing before the patch: {patch}"
    );
    for part in [
        "new file mode 100644",
        "deleted file mode 100644",
        "old mode 100644\nnew mode 100755",
        "new file mode 120000",
        "GIT binary patch\nliteral 8\n",
        "diff --git \"a/caf\\351.txt\" \"b/caf\\351.txt\"",
        "\\ No newline at end of file",
    ] {
        assert!(patch.contains(part), "{part:?} not in:\n{patch}");
    }
    let root = m.root().to_path_buf();
    let copy = root.join("copy");
    let cp = run(
        Command::new("cp")
            .arg("-a")
            .arg(m.backing("work", ""))
            .arg(&copy),
        Duration::from_secs(30),
    );
    assert!(cp.success(), "{}", cp.describe());
    let patch_file = root.join("task.patch");
    fs::write(&patch_file, &patch).unwrap();
    let pf = patch_file.display().to_string();
    // Every change in the stat: 30 sections (4 for the tree deleted, 2
    // for the new one, 2 for each change of type, 2 in the directory
    // deleted and made again, one each for the rest), 32 where the
    // renames are deletions and new files.
    let sections = if renamed { 30 } else { 32 };
    let stat = git(&copy, &["apply", "--numstat", &pf]);
    assert!(stat.success(), "{}", stat.describe());
    let stat_lines: Vec<&str> = stat.stdout.lines().collect();
    for name in [
        "edit.txt",
        "log.txt",
        "noeol.txt",
        "cr.txt",
        "run.sh",
        "link",
        "blob.bin",
        "empty",
        "fresh.txt",
        "newlink",
        "tree/a.txt",
        "tree/sub/b.bin",
        "tree/sub/empty",
        "tree/ln",
        "ntree/x/y.txt",
        "ntree/z.bin",
        "new name.txt",
        "with space.txt",
        "\"caf\\351.txt\"",
        "\"q\\\"uote.txt\"",
        "d/y",
        "type1.txt",
        "dir2/inner.txt",
        "dir2",
        "file3",
        "file3/in",
        "moved-edit.txt",
        "redo/x.txt",
        "redo/keep.txt",
    ] {
        assert!(
            stat_lines
                .iter()
                .any(|l| l.ends_with(&format!("\t{name}")) || l.ends_with(&format!("=> {name}"))),
            "{name} not in git apply --numstat:\n{}",
            stat.stdout
        );
    }
    assert_eq!(stat_lines.len(), sections, "{}", stat.stdout);
    let out = git(&copy, &["apply", "--stat", &pf]);
    assert!(
        out.success() && out.stdout.contains(&format!(" {sections} files changed")),
        "{}",
        out.describe()
    );
    let out = git(&copy, &["apply", "--binary", &pf]);
    assert!(out.success(), "git apply: {}\n{patch}", out.describe());
    let view = tree_hash(&m.path("work"), &root.join("g-view"));
    assert_eq!(
        tree_hash(&copy, &root.join("g-copy")),
        view,
        "the patched copy is the view"
    );
    assert_ne!(
        tree_hash(&m.backing("work", ""), &root.join("g-backing")),
        view,
        "the backing dir is not (nothing was committed)"
    );
    // From the stage dir once unmounted: the same patch.
    let mut m = m;
    assert!(m.unmount().success());
    let stage = stage_of(&m).display().to_string();
    let offline = m.zonemount(&["changes", "--patch", &stage]);
    assert!(offline.success(), "{}", offline.describe());
    assert_eq!(offline.stdout, patch);
}

#[test]
fn changes_patch_over_several_staged_zones_asks_for_one() {
    if !fuse_ok() {
        return;
    }
    let m = Setup::new(
        "sandbox:\n  mode: direct\n  zones:\n    work:\n      path: ./b\n      mode: rw\n      staged: true\n    docs:\n      path: ./c\n      mode: rw\n      staged: true\n    out:\n      path: ./o\n      mode: rw\n",
    )
    .backing_dir("work", "b")
    .backing_dir("docs", "c")
    .backing_dir("out", "o")
    .file("work", "f", "w\n")
    .file("docs", "g", "d\n")
    .file("out", "keep", "k\n")
    .mount();
    let out = worker(
        &m,
        "",
        "echo x >> work/f && echo y >> docs/g && echo z > out/h",
    );
    assert!(out.success(), "{}", out.describe());
    let mnt = m.mountpoint().display().to_string();
    let out = m.zonemount(&["changes", "--patch", &mnt]);
    assert_eq!(out.code(), Some(2), "{}", out.describe());
    assert!(
        out.stdout.is_empty()
            && out.stderr.contains("2 staged zones (/work, /docs)")
            && out.stderr.contains(&format!(
                "name one, e.g. `zonemount changes --patch {mnt} /work`"
            )),
        "{}",
        out.describe()
    );
    // One staged zone named (and a plain one, whose changes are on the
    // host already: said on stderr).
    let out = m.zonemount(&["changes", "--patch", &mnt, "/docs", "/out"]);
    assert!(out.success(), "{}", out.describe());
    assert!(
        out.stdout.starts_with("diff --git a/g b/g\n")
            && out.stdout.contains("+y\n")
            && !out.stdout.contains("h\n")
            && out.stderr
                == "zonemount: changes --patch: /out is not staged: its 1 change(s) are in its backing dir already, not in the patch\n",
        "{}",
        out.describe()
    );
}

#[test]
fn changes_patch_is_exact_into_a_pipe_and_escaped_on_a_terminal() {
    if !fuse_ok() || !require(Need::Tool("script")) {
        return;
    }
    let m = staged("{ write: ask, delete: ask }").mount();
    let out = worker(
        &m,
        "work",
        "printf \"clear\\033[2J\\033]0;owned\\007\\n\" > f",
    );
    assert!(out.success(), "{}", out.describe());
    let mnt = m.mountpoint().display().to_string();
    let out = m.zonemount(&["changes", "--patch", &mnt, "/work/f"]);
    assert!(out.success(), "{}", out.describe());
    assert!(
        out.stdout.contains("+clear\u{1b}[2J\u{1b}]0;owned\u{7}\n"),
        "into a pipe the patch is exact: {:?}",
        out.stdout
    );
    // On a terminal (a pty made by `script`): nothing raw reaches it.
    let cmd = format!(
        "'{}' changes --patch '{mnt}' /work/f",
        env!("CARGO_BIN_EXE_zonemount")
    );
    let out = run(
        Command::new("script")
            .args(["-q", "-e", "-c", &cmd, "/dev/null"])
            .stdin(std::process::Stdio::null()),
        Duration::from_secs(30),
    );
    assert!(out.success(), "{}", out.describe());
    assert!(
        out.stdout.contains("+clear\\x1b[2J\\x1b]0;owned\\x07")
            && !out.stdout.contains('\u{1b}')
            && !out.stdout.contains('\u{7}'),
        "on a terminal: {:?}",
        out.stdout
    );
}

/// How deep the worker's tree goes: past `PATH_MAX` (two bytes a level:
/// about 6,000 bytes of path) and past where a recursion per level
/// overflowed the daemon's control thread (2,000 levels killed it).
const DEEP: usize = 3000;

/// A step that works on a tree of [`DEEP`] levels (a debug build under
/// load takes its time): given two minutes rather than 30 s.
const DEEP_STEP: Duration = Duration::from_secs(120);

/// A python script for a worker: `chdir` down `deep` and `DEEP - 1`
/// levels of `d` (made where missing: `mkdir`, then `chdir`, as the
/// attack did), then `tail` (python lines) at the bottom. Bounded: a
/// fixed number of levels.
fn deep_worker(tail: &str) -> String {
    format!(
        "python3 -c \"import os\nfor i, n in enumerate(['deep'] + ['d'] * {}):\n    os.path.isdir(n) or os.mkdir(n)\n    os.chdir(n)\n{tail}\"",
        DEEP - 1
    )
}

/// `changes --json TARGET`: (kind, path) of each change, after checking
/// the answer is whole.
#[track_caller]
fn deep_changes(m: &TestMount, target: &str) -> Vec<(String, String)> {
    let out = m.zonemount_within(&["changes", "--json", target], DEEP_STEP);
    assert!(
        out.success(),
        "changes: {}",
        &out.describe()[..out.describe().len().min(4000)]
    );
    kinds(&json_of(&out))
}

/// How many levels of directories `names` (the first, then the second
/// again and again) the tree under `dir` has, walked by fd (no path gets
/// long), and what the file `leaf` at the bottom holds.
fn deep_in(dir: &Path, names: (&str, &str)) -> (usize, Option<String>) {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW;
    let mut d = rustix::fs::open(dir, flags, Mode::empty()).unwrap();
    let mut depth = 0;
    let mut name = names.0;
    // Bounded: twice the depth made at most.
    while depth < 2 * DEEP {
        match rustix::fs::openat(&d, name, flags, Mode::empty()) {
            Ok(next) => d = next,
            Err(_) => break,
        }
        depth += 1;
        name = names.1;
    }
    let leaf = rustix::fs::openat(&d, "leaf", OFlags::RDONLY, Mode::empty())
        .ok()
        .map(|f| {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut fs::File::from(f), &mut s).unwrap();
            s
        });
    (depth, leaf)
}

/// A worker's tree 3,000 levels deep (paths past `PATH_MAX`), made
/// through the mount: listed, checkpointed and rewound, then committed
/// whole; the daemon serves on. `changes` on it overflowed the control
/// thread's stack (the mount died). Found by an attack pass.
#[test]
fn a_tree_deeper_than_path_max_is_listed_rewound_and_committed() {
    if !fuse_ok() || !tool_ok("python3") {
        return;
    }
    let m = staged("{ write: ask, delete: ask }").mount();
    let mnt = m.mountpoint().to_string_lossy().into_owned();
    let out = worker(
        &m,
        "work",
        &deep_worker("open('leaf', 'w').write('bottom\\\\n')"),
    );
    assert!(out.success(), "{}", out.describe());
    let list = deep_changes(&m, &mnt);
    assert_eq!(list.len(), DEEP + 1, "every dir and the leaf");
    let longest = list.iter().map(|(_, p)| p.len()).max().unwrap_or(0);
    assert!(longest > 4096, "{longest}");
    assert!(list.iter().all(|(k, _)| k == "added"));
    assert!(m.is_mounted(), "the daemon serves on");

    let out = m.zonemount_within(&["checkpoint", &mnt], DEEP_STEP);
    assert!(out.success(), "checkpoint: {}", out.describe());
    let id = out
        .stdout
        .lines()
        .last()
        .and_then(|l| l.trim().parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no id: {}", out.describe()));
    let out = worker(
        &m,
        "work",
        &deep_worker("open('leaf', 'a').write('more\\\\n'); os.mkdir('after')"),
    );
    assert!(out.success(), "{}", out.describe());
    assert_eq!(deep_changes(&m, &mnt).len(), DEEP + 2);
    let out = m.zonemount_within(&["rewind", &mnt, &id.to_string()], DEEP_STEP);
    assert!(out.success(), "rewind: {}", out.describe());
    assert_eq!(deep_changes(&m, &mnt).len(), DEEP + 1);
    let out = worker(
        &m,
        "work",
        &deep_worker("print(open('leaf').read(), os.path.exists('after'))"),
    );
    assert_eq!(out.stdout, "bottom\n False\n", "{}", out.describe());

    let out = m.zonemount_within(&["commit", &mnt], DEEP_STEP);
    assert!(out.success(), "commit: {}", out.describe());
    assert!(
        out.stdout.contains(&format!("{} committed", DEEP + 1)),
        "{}",
        out.describe()
    );
    assert_eq!(
        deep_in(&m.backing("work", ""), ("deep", "d")),
        (DEEP, Some("bottom\n".to_string())),
        "the backing dir has the whole tree"
    );
    assert!(deep_changes(&m, &mnt).is_empty());
    let out = worker(&m, "work", &deep_worker("print(open('leaf').read())"));
    assert_eq!(out.stdout, "bottom\n\n", "{}", out.describe());
    assert!(m.is_mounted(), "the daemon serves on");
}

/// The same tree in a stage dir no mount holds (with a checkpoint):
/// `changes` and `stages` read it, `discard` drops it all. Both failed
/// with ENAMETOOLONG, so such a stage could be neither reviewed nor
/// discarded. Found by an attack pass.
#[test]
fn a_stage_dir_with_a_tree_deeper_than_path_max_is_reviewed_and_discarded() {
    if !fuse_ok() || !tool_ok("python3") {
        return;
    }
    let mut m = staged("{ write: ask, delete: ask }").mount();
    let mnt = m.mountpoint().to_string_lossy().into_owned();
    let out = worker(&m, "work", &deep_worker("open('leaf', 'w').write('b')"));
    assert!(out.success(), "{}", out.describe());
    let out = m.zonemount_within(&["checkpoint", &mnt], DEEP_STEP);
    assert!(out.success(), "checkpoint: {}", out.describe());
    let out = worker(&m, "work", &deep_worker("os.mkdir('after')"));
    assert!(out.success(), "{}", out.describe());
    assert!(m.unmount().success());
    let stage = stage_of(&m).to_string_lossy().into_owned();
    assert_eq!(deep_changes(&m, &stage).len(), DEEP + 2);
    let root = m.root().to_string_lossy().into_owned();
    let out = m.zonemount_within(&["stages", "--json", &root], DEEP_STEP);
    assert!(out.success(), "stages: {}", out.describe());
    let rows: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let row = rows
        .as_array()
        .and_then(|r| r.iter().find(|r| r["path"] == stage.as_str()))
        .unwrap_or_else(|| panic!("{}", out.describe()));
    assert_eq!(row["changes"].as_u64(), Some(DEEP as u64 + 2), "{row}");
    assert!(
        row["bytes"].as_u64().unwrap_or(0) > DEEP as u64 * 512,
        "every level counted: {row}"
    );
    let out = m.zonemount_within(&["discard", &stage], DEEP_STEP);
    assert!(out.success(), "discard: {}", out.describe());
    assert!(deep_changes(&m, &stage).is_empty());
    assert_eq!(deep_in(&m.backing("work", ""), ("deep", "d")).0, 0);
    let upper = stage_of(&m).join("work/upper");
    assert!(
        fs::read_dir(&upper).map_or(true, |mut d| d.next().is_none()),
        "the stage holds nothing"
    );
}

/// A stage dir others may write in is refused by `mount`: the mount
/// would write its manifest through a file planted there (a symlink to
/// someone else's file) and show and commit what was planted in it.
#[test]
fn a_stage_dir_others_may_write_in_is_refused() {
    if !fuse_ok() {
        return;
    }
    let s = staged("{ write: ask }");
    let stage = s.root().join("stage");
    let sentinel = s.root().join("sentinel");
    fs::write(&sentinel, "precious\n").unwrap();
    fs::create_dir_all(stage.join("work/upper")).unwrap();
    fs::write(stage.join("work/upper/planted"), "planted\n").unwrap();
    std::os::unix::fs::symlink(&sentinel, stage.join(".stage.json.tmp")).unwrap();
    fs::set_permissions(&stage, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let (out, m) = s.try_mount();
    assert!(!out.success() && !m.is_mounted(), "{}", out.describe());
    assert!(
        out.stderr.contains(&format!(
            "stage dir {} has mode 0777: others may write in it",
            stage.display()
        )),
        "{}",
        out.describe()
    );
    assert_eq!(fs::read_to_string(&sentinel).unwrap(), "precious\n");
}

/// What zonemount writes in a stage dir is never written through a
/// symlink found there (the manifest's temporary file, the record of who
/// changed what, the fingerprints): a file outside stays as it was.
#[test]
fn files_in_a_stage_dir_are_not_written_through_a_symlink() {
    if !fuse_ok() {
        return;
    }
    let s = staged("{ write: ask }");
    let stage = s.root().join("stage");
    let sentinel = s.root().join("sentinel");
    fs::write(&sentinel, "precious\n").unwrap();
    fs::create_dir(&stage).unwrap();
    std::os::unix::fs::symlink(&sentinel, stage.join(".stage.json.tmp")).unwrap();
    let mut m = s.mount();
    let out = worker(&m, "work", "echo n > new");
    assert!(out.success(), "{}", out.describe());
    assert!(m.unmount().success());
    assert_eq!(fs::read_to_string(&sentinel).unwrap(), "precious\n");
    assert!(
        fs::symlink_metadata(stage.join(".stage.json.tmp"))
            .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
    );
    // The record of who changed what and the fingerprints, as symlinks:
    // not followed (the stage can't be opened), the file outside intact.
    for (name, cmd) in [("actors", "changes"), ("fingerprints", "commit")] {
        let f = stage.join("work").join(name);
        let kept = f.with_extension("kept");
        fs::rename(&f, &kept).unwrap();
        std::os::unix::fs::symlink(&sentinel, &f).unwrap();
        let out = m.zonemount(&[cmd, &stage.to_string_lossy()]);
        assert!(!out.success(), "{name}: {}", out.describe());
        let out = mount_again(&m, m.mountpoint());
        assert!(!out.success(), "{name}: {}", out.describe());
        assert_eq!(
            fs::read_to_string(&sentinel).unwrap(),
            "precious\n",
            "{name}"
        );
        assert!(!m.backing("work", "new").exists(), "{name}");
        fs::remove_file(&f).unwrap();
        fs::rename(&kept, &f).unwrap();
    }
    let out = m.zonemount(&["changes", &stage.to_string_lossy()]);
    assert!(
        out.success() && out.stdout.contains("new"),
        "{}",
        out.describe()
    );
}

/// A stage dir another user owns is refused by `changes`, `commit` and
/// `discard` on it (a commit would write what that user put there, into
/// the backing dir its manifest names), with its owner and what to do.
#[test]
fn offline_commands_refuse_another_users_stage_dir() {
    if !fuse_ok() || !is_root() {
        return;
    }
    let mut m = staged("{ write: ask }").mount();
    let out = worker(&m, "work", "echo n > new");
    assert!(out.success(), "{}", out.describe());
    assert!(m.unmount().success());
    let stage = stage_of(&m);
    let st = stage.to_string_lossy().into_owned();
    let out = run(
        Command::new("chown").args(["-R", "-h", "4242:4242", &st]),
        Duration::from_secs(30),
    );
    assert!(out.success(), "{}", out.describe());
    for cmd in ["changes", "commit", "discard"] {
        let out = m.zonemount(&[cmd, &st]);
        assert_eq!(out.code(), Some(1), "{cmd}: {}", out.describe());
        assert!(
            out.stderr.contains(&format!(
                "stage dir {st} belongs to uid 4242, not to this user (uid 0)"
            )) && out.stderr.contains("run it as uid 4242, its owner"),
            "{cmd}: {}",
            out.describe()
        );
    }
    assert!(!m.backing("work", "new").exists());
    // A zone's dir of another user's in a stage dir of this user's: the
    // same.
    let out = run(
        Command::new("chown").args(["0:0", &st]),
        Duration::from_secs(30),
    );
    assert!(out.success(), "{}", out.describe());
    let out = m.zonemount(&["commit", &st]);
    assert_eq!(out.code(), Some(1), "{}", out.describe());
    assert!(
        out.stderr
            .contains("belongs to uid 4242, not to this user (uid 0)"),
        "{}",
        out.describe()
    );
    assert!(!m.backing("work", "new").exists());
}

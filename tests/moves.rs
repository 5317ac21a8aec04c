//! Moves carry their rules, through real mounts: a rename, an exchange
//! (`renameat2(RENAME_EXCHANGE)`) or a link is judged by what it moves
//! and what it displaces, with the real kinds of both ends. Each case is
//! one an attacker used to walk around `hide`, a sensitive root, `protect`
//! or `ask_read` (issue 27); unrelated moves stay allowed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;
use std::io;
use std::path::Path;

use common::*;
use libc::{EACCES, ENOENT, EROFS};
use rustix::fs::{CWD, RenameFlags, renameat_with};

const RULES: &str = "hide: [\"/config/credentials.json\", \"**/secrets/key\"], \
     protect: [\"/docs/final\", \"keep/\"], ask_read: [\"private/**\"]";

fn fixture(mode: Mode) -> Option<TestMount> {
    if !fuse_ok() {
        return None;
    }
    let mut s = Setup::zones(mode, &[("w", &format!("mode: rw, {RULES}"))])
        .file("w", "mine.txt", "mine\n")
        .file("w", "config/credentials.json", "{\"token\":\"s3cret\"}\n")
        .file("w", "config/app.json", "{}\n")
        .file("w", "docs/final/report.md", "final\n")
        .file("w", "keep/kept.txt", "kept\n")
        .file("w", "a/b/c/secrets/key", "KEY\n")
        .file("w", "a/b/c/secrets/other", "other\n")
        .file("w", "private/plan.txt", "plan\n")
        .file("w", "home/.config/gh/hosts.yml", "token: x\n")
        .file("w", "top/file.txt", "top\n");
    let home = s.backing("w", "home");
    // The harness mounts with --no-approvals: every ask is denied at
    // once, so a move that needs one fails.
    s = s.env("ZONEMOUNT_EXTRA_HOMES", home.to_str().unwrap());
    Some(s.mount())
}

fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    renameat_with(CWD, a, CWD, b, RenameFlags::EXCHANGE).map_err(io::Error::from)
}

both_modes!(
    exchanges_carry_their_rules,
    deep_dirs_and_read_asks_keep_theirs,
    a_whiteout_is_a_device_node_never_made
);

fn exchanges_carry_their_rules(mode: Mode) {
    let Some(m) = fixture(mode) else {
        return;
    };
    let p = |rel: &str| m.path(&format!("w/{rel}"));
    // The directory holding an anchored hidden path, a sensitive root,
    // an anchored protected path, a directory protected by a pattern for
    // directories only: none moves to the file's name.
    assert_errno(exchange(&p("mine.txt"), &p("config")), EACCES);
    assert_errno(exchange(&p("mine.txt"), &p("home/.config")), EACCES);
    assert_errno(exchange(&p("mine.txt"), &p("docs")), EROFS);
    assert_errno(exchange(&p("mine.txt"), &p("keep")), EROFS);
    assert_errno(exchange(&p("keep"), &p("mine.txt")), EROFS);
    // So the secret is still hidden, the protected file still protected.
    assert_errno(fs::read(p("mine.txt/credentials.json")), libc::ENOTDIR);
    assert_errno(fs::read(p("config/credentials.json")), ENOENT);
    assert_errno(fs::write(p("docs/final/report.md"), "x"), EROFS);
    assert_errno(fs::write(p("keep/kept.txt"), "x"), EROFS);
    assert_eq!(fs::read_to_string(p("mine.txt")).unwrap(), "mine\n");
    // A plain rename of the same directories is refused as before, and
    // with RENAME_NOREPLACE too.
    assert_errno(fs::rename(p("config"), p("cfg")), EACCES);
    let noreplace = |a: &str, b: &str| {
        renameat_with(CWD, p(a), CWD, p(b), RenameFlags::NOREPLACE).map_err(io::Error::from)
    };
    assert_errno(noreplace("config", "cfg"), EACCES);
    assert_errno(noreplace("home/.config", "cfg"), EACCES);
    assert_errno(noreplace("keep", "kept"), EROFS);
    assert_errno(fs::rename(p("docs"), p("d2")), EROFS);
    // Unrelated exchanges and renames go through.
    fs::write(p("other.txt"), "other\n").unwrap();
    exchange(&p("mine.txt"), &p("other.txt")).unwrap();
    assert_eq!(fs::read_to_string(p("mine.txt")).unwrap(), "other\n");
    exchange(&p("mine.txt"), &p("top")).unwrap();
    assert_eq!(fs::read_to_string(p("mine.txt/file.txt")).unwrap(), "top\n");
    // The host's copies are untouched.
    let host = m.backing("w", "config/credentials.json");
    assert!(fs::read_to_string(host).unwrap().contains("s3cret"));
}

fn deep_dirs_and_read_asks_keep_theirs(mode: Mode) {
    let Some(m) = fixture(mode) else {
        return;
    };
    let p = |rel: &str| m.path(&format!("w/{rel}"));
    // `**/secrets/key`: the directory is three levels deep.
    assert_errno(fs::rename(p("a/b/c/secrets"), p("a/b/c/open")), EACCES);
    assert_errno(fs::rename(p("a/b/c/secrets"), p("open")), EACCES);
    assert_errno(exchange(&p("mine.txt"), &p("a/b/c/secrets")), EACCES);
    assert_errno(fs::read(p("a/b/c/secrets/key")), ENOENT);
    // Its parents move, and what they hold stays hidden where it lands.
    fs::rename(p("a"), p("z")).unwrap();
    fs::rename(p("top"), p("top2")).unwrap();
    assert_errno(fs::read(p("z/b/c/secrets/key")), ENOENT);
    assert_eq!(
        fs::read_to_string(p("z/b/c/secrets/other")).unwrap(),
        "other\n"
    );
    // `ask_read`: reading asks (denied here); neither a rename nor a link
    // gives the file a name it could be read by unasked.
    assert_errno(fs::read(p("private/plan.txt")), EACCES);
    assert_errno(fs::rename(p("private/plan.txt"), p("plan.txt")), EACCES);
    assert_errno(fs::hard_link(p("private/plan.txt"), p("plan.txt")), EACCES);
    assert_errno(fs::rename(p("private"), p("public")), EACCES);
    assert_errno(fs::read(p("plan.txt")), ENOENT);
    assert_errno(fs::read(p("public/plan.txt")), ENOENT);
    // Within the pattern, a rename needs no read.
    fs::rename(p("private/plan.txt"), p("private/plan2.txt")).unwrap();
    assert_errno(fs::read(p("private/plan2.txt")), EACCES);
}

/// `renameat2(RENAME_WHITEOUT)` leaves a whiteout (a character device 0/0)
/// at the source: a device node, refused with EPERM as `mknod` of one is,
/// once the rules before the approval policy have spoken (hidden: ENOENT;
/// protected: EROFS). Nothing moves and no node is made on the host, where
/// an overlay over the backing dir would take one for a deletion.
fn a_whiteout_is_a_device_node_never_made(mode: Mode) {
    use std::os::unix::fs::FileTypeExt;
    let Some(m) = fixture(mode) else {
        return;
    };
    let p = |rel: &str| m.path(&format!("w/{rel}"));
    let whiteout = |a: &str, b: &str| {
        renameat_with(CWD, p(a), CWD, p(b), RenameFlags::WHITEOUT).map_err(io::Error::from)
    };
    assert_errno(whiteout("mine.txt", "moved.txt"), libc::EPERM);
    assert_eq!(fs::read_to_string(p("mine.txt")).unwrap(), "mine\n");
    assert_errno(fs::metadata(p("moved.txt")), ENOENT);
    let host = fs::symlink_metadata(m.backing("w", "mine.txt")).unwrap();
    assert!(host.is_file() && !host.file_type().is_char_device());
    assert_errno(whiteout("config/credentials.json", "c.json"), ENOENT);
    assert_errno(whiteout("keep/kept.txt", "kept.txt"), EROFS);
    assert_errno(whiteout("top/file.txt", "keep/new.txt"), EROFS);
    // The mknod it stands for.
    let dev = rustix::fs::mknodat(
        CWD,
        p("dev00"),
        rustix::fs::FileType::CharacterDevice,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    );
    assert_errno(dev.map_err(io::Error::from), libc::EPERM);
}

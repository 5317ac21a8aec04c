//! What agents actually do in a rw zone — shells, coreutils, git, editors,
//! big and many files — checked through the mount and in the backing dir.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use common::*;

/// One rw zone `ws` plus a ro zone `data`, sandboxed.
fn workspace() -> Option<TestMount> {
    if !fuse_ok() {
        return None;
    }
    Some(
        Setup::zones(Mode::Sandboxed, &[("ws", "mode: rw"), ("data", "mode: ro")])
            .file("ws", "README.md", "# readme\n")
            .file("ws", "src/main.rs", "fn main() {}\n")
            .file("ws", "src/lib/mod.rs", "pub mod x;\n")
            .file("data", "input.csv", "a,b\n1,2\n")
            .mount(),
    )
}

/// Every regular file under `dir`, relative, sorted, with its content.
fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
        for e in fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                walk(base, &p, out);
            } else if ft.is_file() {
                let rel = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
                out.push((rel, fs::read(&p).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

#[test]
fn ls_r_and_cat() {
    let Some(m) = workspace() else { return };
    let (st, out, err) = m.sh("ls -R");
    assert!(st.success(), "ls -R: {err}");
    for name in [
        "ws",
        "data",
        "README.md",
        "main.rs",
        "mod.rs",
        "input.csv",
        "./ws/src/lib:",
    ] {
        assert!(out.contains(name), "ls -R lacks {name}: {out}");
    }
    let (st, out, err) = m.sh("cat ws/README.md data/input.csv");
    assert!(st.success(), "cat: {err}");
    assert_eq!(out, "# readme\na,b\n1,2\n");
    let (st, out, _) = m.sh("grep -rn main ws");
    assert!(st.success());
    assert!(out.contains("ws/src/main.rs:1:fn main() {}"), "{out}");
    let (st, out, _) = m.sh("wc -l < data/input.csv; head -1 ws/src/lib/mod.rs");
    assert!(st.success());
    assert_eq!(out, "2\npub mod x;\n");
}

#[test]
fn cp_r_in_and_out() {
    let Some(m) = workspace() else { return };
    // A host tree outside the mount.
    let host = tempfile::tempdir().unwrap();
    let src = host.path().join("proj");
    for i in 0..20 {
        let d = src.join(format!("d{}", i % 4)).join("nested");
        fs::create_dir_all(&d).unwrap();
        fs::write(
            d.join(format!("f{i}.txt")),
            format!("file {i}\n").repeat(i + 1),
        )
        .unwrap();
    }
    fs::write(src.join("empty"), "").unwrap();
    std::os::unix::fs::symlink("empty", src.join("link")).unwrap();

    let out = sh_at(
        host.path(),
        &format!("cp -r proj '{}'", m.path("ws/proj").display()),
        &[],
    );
    assert!(out.success(), "cp -r in: {}", out.describe());
    assert_eq!(
        tree(&m.backing("ws", "proj")),
        tree(&src),
        "backing after cp -r in"
    );
    assert_eq!(tree(&m.path("ws/proj")), tree(&src), "mount after cp -r in");
    assert_eq!(
        fs::read_link(m.backing("ws", "proj/link")).unwrap(),
        Path::new("empty")
    );

    let back = host.path().join("back");
    let out = sh_at(
        host.path(),
        &format!("cp -a '{}' back", m.path("ws/proj").display()),
        &[],
    );
    assert!(out.success(), "cp -a out: {}", out.describe());
    assert_eq!(tree(&back), tree(&src), "tree copied back out");
    // cp -a preserved the symlink and the mode.
    assert_eq!(
        fs::read_link(back.join("link")).unwrap(),
        Path::new("empty")
    );
    // cp within the mount, same zone.
    let (st, _, err) = m.sh("cp -a ws/proj ws/proj2 && diff -r ws/proj ws/proj2");
    assert!(st.success(), "cp -a + diff -r inside the mount: {err}");
    assert_eq!(tree(&m.backing("ws", "proj2")), tree(&src));
    // From ro to rw.
    let (st, _, err) = m.sh("cp data/input.csv ws/");
    assert!(st.success(), "{err}");
    assert_eq!(
        fs::read_to_string(m.backing("ws", "input.csv")).unwrap(),
        "a,b\n1,2\n"
    );
}

#[test]
fn mv_within_zone() {
    let Some(m) = workspace() else { return };
    let (st, _, err) =
        m.sh("cd ws && mv README.md README.old && mv src source && mkdir -p a/b && mv source a/b/");
    assert!(st.success(), "mv: {err}");
    assert!(!m.backing("ws", "README.md").exists());
    assert_eq!(
        fs::read_to_string(m.backing("ws", "README.old")).unwrap(),
        "# readme\n"
    );
    assert!(!m.backing("ws", "src").exists());
    assert_eq!(
        fs::read_to_string(m.backing("ws", "a/b/source/lib/mod.rs")).unwrap(),
        "pub mod x;\n"
    );
    assert_eq!(
        fs::read_to_string(m.path("ws/a/b/source/main.rs")).unwrap(),
        "fn main() {}\n"
    );
    assert_eq!(names(&m.path("ws")).unwrap(), sorted(&["README.old", "a"]));
}

#[test]
fn redirections_truncate_and_append() {
    let Some(m) = workspace() else { return };
    let out = m.sh_in("ws", "echo hi > f", &[]);
    assert!(out.success(), "{}", out.describe());
    assert_eq!(fs::read_to_string(m.backing("ws", "f")).unwrap(), "hi\n");
    let out = m.sh_in("ws", "echo x > f", &[]);
    assert!(out.success(), "{}", out.describe());
    assert_eq!(
        fs::read_to_string(m.backing("ws", "f")).unwrap(),
        "x\n",
        "> truncates"
    );
    let out = m.sh_in("ws", "echo y >> f && printf z >> f", &[]);
    assert!(out.success(), "{}", out.describe());
    assert_eq!(
        fs::read_to_string(m.backing("ws", "f")).unwrap(),
        "x\ny\nz",
        ">> appends"
    );
    assert_eq!(fs::read_to_string(m.path("ws/f")).unwrap(), "x\ny\nz");
    // A longer file truncated to a shorter one: no stale tail anywhere.
    let out = m.sh_in("ws", "seq 1 1000 > g && echo short > g && cat g", &[]);
    assert!(out.success());
    assert_eq!(out.stdout, "short\n");
    assert_eq!(fs::read_to_string(m.backing("ws", "g")).unwrap(), "short\n");
    // Heredoc and tee.
    let out = m.sh_in(
        "ws",
        "cat > h <<'EOF'\nline1\nline2\nEOF\necho t | tee -a h >/dev/null",
        &[],
    );
    assert!(out.success());
    assert_eq!(
        fs::read_to_string(m.backing("ws", "h")).unwrap(),
        "line1\nline2\nt\n"
    );
}

#[test]
fn editor_style_save() {
    let Some(m) = workspace() else { return };
    let target = m.path("ws/README.md");
    let ino_before = fs::metadata(&target).unwrap().ino();
    // A reader holding the old file open (as a pager or LSP would).
    let mut old_reader = File::open(&target).unwrap();

    // Write a temp file next to it, fsync, rename over the original.
    let tmp = m.path("ws/.README.md.swp");
    let mut f = File::create(&tmp).unwrap();
    f.write_all(b"# readme, edited\n").unwrap();
    f.sync_all().unwrap();
    drop(f);
    fs::rename(&tmp, &target).unwrap();

    assert_eq!(fs::read_to_string(&target).unwrap(), "# readme, edited\n");
    assert_eq!(
        fs::read_to_string(m.backing("ws", "README.md")).unwrap(),
        "# readme, edited\n"
    );
    assert!(!m.backing("ws", ".README.md.swp").exists());
    assert!(!tmp.exists());
    assert_ne!(
        fs::metadata(&target).unwrap().ino(),
        ino_before,
        "a new inode took the name"
    );
    // The old handle still reads the old content.
    let mut s = String::new();
    old_reader.read_to_string(&mut s).unwrap();
    assert_eq!(s, "# readme\n");

    // vim-style: rename the original to a backup, write a new file.
    fs::rename(m.path("ws/src/main.rs"), m.path("ws/src/main.rs~")).unwrap();
    fs::write(m.path("ws/src/main.rs"), "fn main() { println!(); }\n").unwrap();
    fs::remove_file(m.path("ws/src/main.rs~")).unwrap();
    assert_eq!(
        fs::read_to_string(m.backing("ws", "src/main.rs")).unwrap(),
        "fn main() { println!(); }\n"
    );
    assert_eq!(
        names(&m.backing("ws", "src")).unwrap(),
        sorted(&["lib", "main.rs"])
    );
    // `sed -i` does the same dance.
    let out = m.sh_in("ws", "sed -i 's/edited/sedited/' README.md", &[]);
    assert!(out.success(), "{}", out.describe());
    assert_eq!(
        fs::read_to_string(m.backing("ws", "README.md")).unwrap(),
        "# readme, sedited\n"
    );
}

#[test]
fn git_init_add_commit_status_log() {
    if !tool_ok("git") {
        return;
    }
    let Some(m) = workspace() else { return };
    let home = tempfile::tempdir().unwrap();
    let home_s = home.path().to_string_lossy().into_owned();
    let env = [
        ("HOME", home_s.as_str()),
        ("GIT_CONFIG_NOSYSTEM", "1"),
        ("GIT_AUTHOR_NAME", "Test"),
        ("GIT_AUTHOR_EMAIL", "test@example.invalid"),
        ("GIT_COMMITTER_NAME", "Test"),
        ("GIT_COMMITTER_EMAIL", "test@example.invalid"),
    ];
    let out = m.sh_in(
        "ws",
        "git init -q && git add -A && git commit -q -m x && git status --porcelain",
        &env,
    );
    assert!(out.success(), "git init/add/commit: {}", out.describe());
    assert_eq!(out.stdout, "", "git status --porcelain after commit");
    let out = m.sh_in("ws", "git log --oneline", &env);
    assert!(out.success(), "git log: {}", out.describe());
    assert_eq!(out.stdout.lines().count(), 1, "{}", out.stdout);
    assert!(out.stdout.trim_end().ends_with(" x"));
    assert!(m.backing("ws", ".git/HEAD").is_file());
    assert!(m.backing("ws", ".git/objects").is_dir());

    // A second round: modify, branch, commit, status, diff.
    let out = m.sh_in(
        "ws",
        "echo more >> README.md && git status --porcelain && git checkout -q -b feat \
         && git commit -qam y && git status --porcelain && git log --oneline | wc -l \
         && git diff HEAD~1 --stat && git gc -q && git fsck --no-progress",
        &env,
    );
    assert!(out.success(), "git round two: {}", out.describe());
    assert!(
        out.stdout.starts_with(" M README.md\n2\n"),
        "{}",
        out.stdout
    );
    // The backing repo is a valid repo on the host too.
    let out = sh_at(
        &m.backing("ws", ""),
        "git log --oneline | wc -l && git status --porcelain",
        &env,
    );
    assert!(out.success(), "{}", out.describe());
    assert_eq!(out.stdout, "2\n");
}

#[test]
fn renamed_while_open_keeps_writing() {
    let Some(m) = workspace() else { return };
    let mut f = File::create(m.path("ws/log.txt")).unwrap();
    f.write_all(b"before\n").unwrap();
    fs::rename(m.path("ws/log.txt"), m.path("ws/log.1")).unwrap();
    f.write_all(b"after rename\n").unwrap();
    fs::create_dir(m.path("ws/old")).unwrap();
    fs::rename(m.path("ws/log.1"), m.path("ws/old/log.1")).unwrap();
    f.write_all(b"after move\n").unwrap();
    f.sync_all().unwrap();
    drop(f);
    assert!(!m.backing("ws", "log.txt").exists());
    assert!(!m.backing("ws", "log.1").exists());
    assert_eq!(
        fs::read_to_string(m.backing("ws", "old/log.1")).unwrap(),
        "before\nafter rename\nafter move\n"
    );
    assert_eq!(
        fs::read_to_string(m.path("ws/old/log.1")).unwrap(),
        "before\nafter rename\nafter move\n"
    );
    // Unlinked while open: the handle still works, the name is gone.
    let mut f = OpenOptions::new()
        .create(true)
        .read(true)
        .write(true)
        .truncate(true)
        .open(m.path("ws/tmpfile"))
        .unwrap();
    fs::remove_file(m.path("ws/tmpfile")).unwrap();
    f.write_all(b"ghost").unwrap();
    assert!(!m.backing("ws", "tmpfile").exists());
    assert_eq!(
        names(&m.path("ws")).unwrap(),
        sorted(&["README.md", "old", "src"])
    );
}

#[test]
fn hard_links_share_inode() {
    let Some(m) = workspace() else { return };
    fs::write(m.path("ws/a"), "one").unwrap();
    fs::hard_link(m.path("ws/a"), m.path("ws/b")).unwrap();
    fs::create_dir(m.path("ws/d")).unwrap();
    fs::hard_link(m.path("ws/a"), m.path("ws/d/c")).unwrap();
    let (a, b, c) = (
        fs::metadata(m.path("ws/a")).unwrap(),
        fs::metadata(m.path("ws/b")).unwrap(),
        fs::metadata(m.path("ws/d/c")).unwrap(),
    );
    assert_eq!(a.ino(), b.ino(), "same inode through the mount");
    assert_eq!(a.ino(), c.ino());
    assert_eq!((a.nlink(), b.nlink(), c.nlink()), (3, 3, 3), "link counts");
    assert_eq!(fs::metadata(m.backing("ws", "a")).unwrap().nlink(), 3);
    assert_eq!(
        fs::metadata(m.backing("ws", "a")).unwrap().ino(),
        fs::metadata(m.backing("ws", "d/c")).unwrap().ino()
    );
    // A write through one name shows through the others.
    OpenOptions::new()
        .append(true)
        .open(m.path("ws/b"))
        .unwrap()
        .write_all(b"+two")
        .unwrap();
    assert_eq!(fs::read_to_string(m.path("ws/d/c")).unwrap(), "one+two");
    assert_eq!(fs::read_to_string(m.backing("ws", "a")).unwrap(), "one+two");
    // Unlinking one name drops the count.
    fs::remove_file(m.path("ws/a")).unwrap();
    assert_eq!(fs::metadata(m.path("ws/b")).unwrap().nlink(), 2);
    assert_eq!(fs::metadata(m.backing("ws", "b")).unwrap().nlink(), 2);
    let (st, out, _) = m.sh("stat -c %h ws/d/c");
    assert!(st.success());
    assert_eq!(out.trim(), "2");
}

#[test]
fn find_over_thousands_of_files() {
    if !fuse_ok() {
        return;
    }
    const DIRS: usize = 40;
    const PER: usize = 100;
    let mut s = Setup::zones(Mode::Sandboxed, &[("ws", "mode: rw")]);
    for d in 0..DIRS {
        for f in 0..PER {
            s = s.file(
                "ws",
                &format!("d{d:02}/sub/f{f:03}.txt"),
                format!("{d}-{f}"),
            );
        }
    }
    let m = s.mount();
    let (st, out, err) = m.sh("find ws -type f | wc -l");
    assert!(st.success(), "find: {err}");
    assert_eq!(out.trim(), (DIRS * PER).to_string());
    let (st, out, err) = m.sh("find ws -type d | wc -l");
    assert!(st.success(), "find -type d: {err}");
    assert_eq!(out.trim(), (1 + 2 * DIRS).to_string());
    // Again, with stat of each entry (readdirplus / cached attrs).
    let (st, out, err) = m.sh("find ws -name 'f05*' -ls | wc -l");
    assert!(st.success(), "find -ls: {err}");
    assert_eq!(out.trim(), (DIRS * 10).to_string());
    let (st, out, _) = m.sh("cat ws/d17/sub/f042.txt");
    assert!(st.success());
    assert_eq!(out, "17-42");
    // Create as many through the mount, then find them.
    let out = m.sh_in(
        "ws",
        "mkdir made && cd made && i=0; while [ $i -lt 2000 ]; do : > n$i; i=$((i+1)); done",
        &[],
    );
    assert!(out.success(), "{}", out.describe());
    let (st, out, _) = m.sh("find ws/made -type f | wc -l");
    assert!(st.success());
    assert_eq!(out.trim(), "2000");
    assert_eq!(fs::read_dir(m.backing("ws", "made")).unwrap().count(), 2000);
}

/// xorshift64*: deterministic bytes without a dependency.
fn fill(buf: &mut [u8], state: &mut u64) {
    for chunk in buf.chunks_mut(8) {
        *state ^= *state >> 12;
        *state ^= *state << 25;
        *state ^= *state >> 27;
        let v = state.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

#[test]
fn big_file_roundtrip() {
    let Some(m) = workspace() else { return };
    const MIB: usize = 1 << 20;
    const TOTAL: usize = 64 * MIB;
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut buf = vec![0u8; MIB];
    let mut want = FNV_OFFSET;
    let mut f = File::create(m.path("ws/big.bin")).unwrap();
    for _ in 0..TOTAL / MIB {
        fill(&mut buf, &mut state);
        want = fnv1a(&buf, want);
        f.write_all(&buf).unwrap();
    }
    f.sync_all().unwrap();
    drop(f);
    assert_eq!(
        fs::metadata(m.path("ws/big.bin")).unwrap().len(),
        TOTAL as u64
    );
    let (h_mnt, len_mnt) = file_hash(&m.path("ws/big.bin")).unwrap();
    let (h_back, len_back) = file_hash(&m.backing("ws", "big.bin")).unwrap();
    assert_eq!((len_mnt, len_back), (TOTAL as u64, TOTAL as u64));
    assert_eq!(h_mnt, want, "content read back through the mount");
    assert_eq!(h_back, want, "content in the backing store");
    // And cp of it within the zone, compared with cmp.
    let (st, _, err) = m.sh("cp ws/big.bin ws/big2.bin && cmp ws/big.bin ws/big2.bin");
    assert!(st.success(), "cp + cmp: {err}");
    assert_eq!(file_hash(&m.backing("ws", "big2.bin")).unwrap().0, want);
}

#[test]
fn many_small_files_create_delete() {
    let Some(m) = workspace() else { return };
    fs::create_dir(m.path("ws/many")).unwrap();
    for i in 0..2000 {
        fs::write(m.path(&format!("ws/many/f{i}")), i.to_string()).unwrap();
    }
    assert_eq!(fs::read_dir(m.backing("ws", "many")).unwrap().count(), 2000);
    assert_eq!(fs::read_dir(m.path("ws/many")).unwrap().count(), 2000);
    assert_eq!(
        fs::read_to_string(m.backing("ws", "many/f1234")).unwrap(),
        "1234"
    );
    for i in 0..2000 {
        fs::remove_file(m.path(&format!("ws/many/f{i}"))).unwrap();
    }
    assert_eq!(fs::read_dir(m.backing("ws", "many")).unwrap().count(), 0);
    assert_eq!(fs::read_dir(m.path("ws/many")).unwrap().count(), 0);
    // Again via the shell, and remove the whole tree.
    let out = m.sh_in(
        "ws/many",
        "for i in $(seq 1 500); do echo $i > s$i; done; rm -f s*; ls | wc -l",
        &[],
    );
    assert!(out.success(), "{}", out.describe());
    assert_eq!(out.stdout.trim(), "0");
    fs::remove_dir(m.path("ws/many")).unwrap();
    assert!(!m.backing("ws", "many").exists());
}

/// Direct mode shares backing dirs with the host. A directory the host
/// deletes and recreates (a script's `rm -rf out && mkdir out`) must work
/// through the mount at once, not fail with ENOENT for the cache TTL: the
/// daemon answers ESTALE for the deleted one and the kernel looks again.
#[test]
fn a_directory_the_host_recreates_works_at_once() {
    if !fuse_ok() {
        return;
    }
    let m = Setup::zones(Mode::Direct, &[("ws", "mode: rw")])
        .file("ws", "u/sub/old.txt", "old\n")
        .mount();
    // Cache every entry and attribute on the way down.
    let (st, out, err) = m.sh("ls ws/u/sub && stat -c %F ws/u/sub && cat ws/u/sub/old.txt");
    assert!(st.success(), "{err}");
    assert!(out.contains("old.txt"), "{out}");
    let u = m.backing("ws", "u");
    let recreate = || {
        fs::remove_dir_all(&u).unwrap();
        fs::create_dir_all(u.join("sub")).unwrap();
    };
    // New names in the recreated dir, through cached paths: each lands in
    // the new directory on the host.
    recreate();
    let (st, _, err) = m.sh("mkdir ws/u/t && touch ws/u/sub/a && echo hi > ws/u/sub/b");
    assert!(st.success(), "creating in a recreated dir: {err}");
    assert!(u.join("t").is_dir() && u.join("sub/a").is_file());
    assert_eq!(fs::read_to_string(u.join("sub/b")).unwrap(), "hi\n");
    // Listing, stat and cd through the cached path see the new directory.
    recreate();
    fs::write(u.join("sub/new.txt"), "new\n").unwrap();
    let (st, out, err) = m.sh("ls ws/u/sub; stat -c %F ws/u/sub; cd ws/u/sub && cat new.txt");
    assert!(st.success(), "{err}");
    assert_eq!(out, "new.txt\ndirectory\nnew\n");
    // tar -C into a recreated dir (the start dir itself was deleted).
    recreate();
    fs::create_dir_all(m.root().join("src/x")).unwrap();
    fs::write(m.root().join("src/x/f"), "f\n").unwrap();
    let script = format!(
        "tar -C ws/u/sub -cf /dev/null . && tar -C '{}' -cf - src | tar -C ws/u -xf -",
        m.root().display()
    );
    let (st, _, err) = m.sh(&script);
    assert!(st.success(), "tar into a recreated dir: {err}");
    assert_eq!(fs::read_to_string(u.join("src/x/f")).unwrap(), "f\n");
    // Deleted for good: creating in it is ENOENT, as on the host (its
    // cached name may still be listed until the TTL passes).
    fs::remove_dir_all(&u).unwrap();
    let out = sh_at(m.mountpoint(), "touch ws/u/sub/c", &[]);
    assert_sh_errno(&out, libc::ENOENT, "create in a dir deleted on the host");
    assert!(!u.exists());
    // A cwd removed through the mount behaves as on the host: it lists
    // nothing (not even . and ..), stats with no links, and creating in it
    // is ENOENT.
    let out = sh_at(
        m.mountpoint(),
        "mkdir ws/gone && cd ws/gone && rmdir ../gone && ls -a . && stat -c %h . && touch x",
        &[],
    );
    assert_sh_errno(&out, libc::ENOENT, "create in a removed cwd");
    assert_eq!(out.stdout, "0\n", "{}", out.describe());
}

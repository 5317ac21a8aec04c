//! DESIGN §6, who gets in: by default only the mounting user (and root);
//! `--allow-other` lets others in, `--allow-uid` narrows that; operations
//! on the backing store run with the caller's fsuid/fsgid, so what a worker
//! creates is the worker's, and the host's permission checks apply.
//!
//! Needs root (to mount and then act as another uid via `setpriv`): without
//! it each test fails under `CI=true` and otherwise skips visibly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use common::*;
use libc::{EACCES, EROFS};

const NOBODY: u32 = 65534;
const OTHER: u32 = 4242;
const THIRD: u32 = 4343;

/// FUSE, root (to act as other uids) and `setpriv`: see [`require`].
fn ready() -> bool {
    fuse_ok() && root_ok() && tool_ok("setpriv")
}

/// `sh -c script` as `uid:uid` with no supplementary groups, cwd `/`.
fn sh_as(uid: u32, script: &str) -> Out {
    sh_at(
        Path::new("/"),
        &format!(
            "exec setpriv --reuid={uid} --regid={uid} --clear-groups -- sh -c '{}'",
            script.replace('\'', r"'\''")
        ),
        &[],
    )
}

/// `sh -c script` as `uid:uid` with the supplementary groups `groups`.
fn sh_as_in(uid: u32, groups: &[u32], script: &str) -> Out {
    let groups: Vec<String> = groups.iter().map(u32::to_string).collect();
    sh_at(
        Path::new("/"),
        &format!(
            "exec setpriv --reuid={uid} --regid={uid} --groups={} -- sh -c '{}'",
            groups.join(","),
            script.replace('\'', r"'\''")
        ),
        &[],
    )
}

/// A project with a rw zone `ws` and a ro zone `data`, both backing dirs
/// world-writable (so the host would let any caller create there: a
/// refusal in `data` is the zone's, not the host's); the temp dir is made
/// traversable so other uids can reach the mountpoint at all.
fn setup(mode: Mode) -> Setup {
    let s = Setup::zones(mode, &[("ws", "mode: rw"), ("data", "mode: ro")])
        .dir("ws", "")
        .file("ws", "root-owned.txt", "root\n")
        .file("data", "d.txt", "d\n");
    fs::set_permissions(s.root(), fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(s.backing("ws", ""), fs::Permissions::from_mode(0o777)).unwrap();
    fs::set_permissions(s.backing("data", ""), fs::Permissions::from_mode(0o777)).unwrap();
    s
}

#[test]
fn other_users_are_refused_by_default() {
    if !ready() {
        return;
    }
    let m = setup(Mode::Sandboxed).mount();
    let mnt = m.mountpoint().display().to_string();
    let out = sh_as(NOBODY, &format!("ls {mnt}"));
    assert_sh_errno(&out, EACCES, "ls by another uid without --allow-other");
    let out = sh_as(NOBODY, &format!("echo x > {mnt}/ws/x"));
    assert_sh_errno(&out, EACCES, "write by another uid without --allow-other");
    assert!(!m.backing("ws", "x").exists());
    // The mounting user (root) is fine.
    assert_eq!(names(m.mountpoint()).unwrap(), sorted(&["data", "ws"]));
}

#[test]
fn allow_other_runs_as_the_caller() {
    if !ready() {
        return;
    }
    for mode in [Mode::Sandboxed, Mode::Direct] {
        let m = setup(mode).arg("--allow-other").mount();
        let mnt = m.mountpoint().display().to_string();
        let out = sh_as(NOBODY, &format!("ls {mnt} && cat {mnt}/data/d.txt"));
        assert!(out.success(), "{mode:?}: ls as nobody: {}", out.describe());
        assert_eq!(out.stdout, "data\nws\nd\n");
        // A file the worker creates is the worker's, in the backing store.
        let out = sh_as(
            NOBODY,
            &format!("echo mine > {mnt}/ws/mine.txt && mkdir {mnt}/ws/d"),
        );
        assert!(
            out.success(),
            "{mode:?}: create as nobody: {}",
            out.describe()
        );
        let md = fs::metadata(m.backing("ws", "mine.txt")).unwrap();
        assert_eq!(
            (md.uid(), md.gid()),
            (NOBODY, NOBODY),
            "{mode:?}: owner of mine.txt"
        );
        let md = fs::metadata(m.backing("ws", "d")).unwrap();
        assert_eq!(md.uid(), NOBODY, "{mode:?}: owner of d/");
        // The host's permission checks apply: root's 0644 file isn't theirs.
        let out = sh_as(NOBODY, &format!("echo no > {mnt}/ws/root-owned.txt"));
        assert_sh_errno(&out, EACCES, "overwrite root's file as nobody");
        assert_eq!(
            fs::read_to_string(m.backing("ws", "root-owned.txt")).unwrap(),
            "root\n"
        );
        // chmod by a non-owner: EPERM, as on the host.
        let out = sh_as(NOBODY, &format!("chmod 666 {mnt}/ws/root-owned.txt"));
        assert_sh_errno(&out, libc::EPERM, "chmod of root's file as nobody");
        assert_eq!(
            fs::metadata(m.backing("ws", "root-owned.txt"))
                .unwrap()
                .mode()
                & 0o777,
            0o644
        );
        // Zone rules hold for them as for anyone.
        let out = sh_as(NOBODY, &format!("echo x > {mnt}/data/x"));
        assert_sh_errno(&out, EROFS, "ro zone as nobody");
        let out = sh_as(NOBODY, &format!("mkdir {mnt}/newzone"));
        assert_sh_errno(&out, EACCES, "root-level as nobody");
        drop(m);
    }
}

/// A sandboxed mount others may enter, narrowed to `OTHER`.
fn only_other() -> Setup {
    setup(Mode::Sandboxed)
        .arg("--allow-other")
        .arg("--allow-uid")
        .arg(&OTHER.to_string())
}

#[test]
fn allow_uid_narrows_allow_other() {
    if !ready() {
        return;
    }
    let m = only_other().mount();
    let mnt = m.mountpoint().display().to_string();
    let out = sh_as(OTHER, &format!("ls {mnt} && echo hi > {mnt}/ws/other.txt"));
    assert!(out.success(), "listed uid: {}", out.describe());
    assert_eq!(
        fs::metadata(m.backing("ws", "other.txt")).unwrap().uid(),
        OTHER
    );
    let out = sh_as(NOBODY, &format!("ls {mnt}"));
    assert_sh_errno(&out, EACCES, "uid not in --allow-uid");
    let out = sh_as(NOBODY, &format!("cat {mnt}/data/d.txt"));
    assert_sh_errno(&out, EACCES, "uid not in --allow-uid reading");
    // Root and the mounting user still get in.
    assert_eq!(fs::read_to_string(m.path("ws/other.txt")).unwrap(), "hi\n");
}

/// The kernel answers a `stat` from its attribute cache without asking
/// the daemon: with the default TTL a uid kept out may `stat` a path a
/// listed uid just reached (found by an attack pass; docs/security.md
/// says so); `--cache-ttl 0` makes every `stat` a request, refused.
#[test]
fn a_uid_kept_out_stats_nothing_with_cache_ttl_0() {
    if !ready() {
        return;
    }
    let m = only_other().arg("--cache-ttl").arg("0").mount();
    let mnt = m.mountpoint().display().to_string();
    let out = sh_as(OTHER, &format!("stat {mnt}/data/d.txt >/dev/null"));
    assert!(out.success(), "listed uid: {}", out.describe());
    for path in ["", "/data", "/data/d.txt"] {
        let out = sh_as(NOBODY, &format!("stat {mnt}{path}"));
        assert_sh_errno(&out, EACCES, &format!("stat {mnt}{path}, uid not listed"));
    }
}

/// Two workers under different uids share a rw zone: neither can read the
/// other's 0600 file, chown its own file to root, or write a file it has no
/// mode bits for; the daemon (root) is no confused deputy.
#[test]
fn workers_cannot_use_the_daemon_against_each_other() {
    if !ready() {
        return;
    }
    let m = setup(Mode::Direct).arg("--allow-other").mount();
    let mnt = m.mountpoint().display().to_string();
    let out = sh_as(
        OTHER,
        &format!(
            "umask 077 && echo private > {mnt}/ws/other.txt && echo ro > {mnt}/ws/ro.txt && chmod 0444 {mnt}/ws/ro.txt"
        ),
    );
    assert!(out.success(), "{}", out.describe());
    let md = fs::metadata(m.backing("ws", "other.txt")).unwrap();
    assert_eq!((md.uid(), md.mode() & 0o777), (OTHER, 0o600));
    let out = sh_as(NOBODY, &format!("cat {mnt}/ws/other.txt"));
    assert_sh_errno(&out, EACCES, "reading another worker's 0600 file");
    let out = sh_as(OTHER, &format!("chown 0 {mnt}/ws/other.txt"));
    assert_sh_errno(&out, libc::EPERM, "chown to root");
    assert_eq!(
        fs::metadata(m.backing("ws", "other.txt")).unwrap().uid(),
        OTHER
    );
    let out = sh_as(OTHER, &format!("echo more >> {mnt}/ws/ro.txt"));
    assert_sh_errno(&out, EACCES, "writing a 0444 file of one's own");
    assert_eq!(
        fs::read_to_string(m.backing("ws", "ro.txt")).unwrap(),
        "ro\n"
    );
    // A setgid directory hands its group to what the worker creates there,
    // as on the host.
    fs::create_dir(m.backing("ws", "shared")).unwrap();
    std::os::unix::fs::chown(m.backing("ws", "shared"), None, Some(OTHER)).unwrap();
    fs::set_permissions(
        m.backing("ws", "shared"),
        fs::Permissions::from_mode(0o2777),
    )
    .unwrap();
    let out = sh_as(NOBODY, &format!("echo g > {mnt}/ws/shared/g.txt"));
    assert!(out.success(), "{}", out.describe());
    let md = fs::metadata(m.backing("ws", "shared/g.txt")).unwrap();
    assert_eq!((md.uid(), md.gid()), (NOBODY, OTHER));
}

/// The backing check sees the caller's supplementary groups: a worker in
/// group G may give its file to G and write it through the group bits (the
/// host kernel checks the membership again as the daemon acts as the
/// worker: without the groups both fail). The same uid's next process,
/// outside G, may do neither (the mount's own permission check refuses it
/// first).
#[test]
fn supplementary_groups_are_each_callers_own() {
    if !ready() {
        return;
    }
    const G: u32 = 4343;
    let m = setup(Mode::Direct).arg("--allow-other").mount();
    let mnt = m.mountpoint().display().to_string();
    let f = m.backing("ws", "g.txt");
    let out = sh_as_in(
        OTHER,
        &[G],
        &format!("echo g > {mnt}/ws/g.txt && chgrp {G} {mnt}/ws/g.txt"),
    );
    assert!(
        out.success(),
        "chgrp to a supplementary group: {}",
        out.describe()
    );
    assert_eq!(fs::metadata(&f).unwrap().gid(), G);
    let out = sh_as_in(
        OTHER,
        &[OTHER],
        &format!("chgrp {OTHER} {mnt}/ws/g.txt && chgrp {G} {mnt}/ws/g.txt"),
    );
    assert_sh_errno(&out, libc::EPERM, "chgrp to a group the process is not in");
    assert_eq!(fs::metadata(&f).unwrap().gid(), OTHER);
    // Group-writable only: the worker in G writes through the group bits.
    fs::set_permissions(&f, fs::Permissions::from_mode(0o660)).unwrap();
    std::os::unix::fs::chown(&f, Some(0), Some(G)).unwrap();
    let out = sh_as_in(OTHER, &[G], &format!("echo more >> {mnt}/ws/g.txt"));
    assert!(
        out.success(),
        "write through the group bits: {}",
        out.describe()
    );
    let out = sh_as_in(OTHER, &[OTHER], &format!("echo nope >> {mnt}/ws/g.txt"));
    assert_sh_errno(&out, EACCES, "write without the group");
    assert_eq!(fs::read_to_string(&f).unwrap(), "g\nmore\n");
}

/// Mounts are nosuid,nodev with default_permissions: a setuid-root binary
/// in a zone runs with the caller's rights, and device nodes can't be made.
#[test]
fn setuid_bits_grant_nothing() {
    if !ready() {
        return;
    }
    let m = setup(Mode::Direct).arg("--allow-other").mount();
    let opts = mount_entry(m.mountpoint()).map(|e| e.2).unwrap_or_default();
    for o in ["nosuid", "nodev", "default_permissions"] {
        assert!(opts.split(',').any(|x| x == o), "{o} missing from {opts}");
    }
    let id = m.backing("ws", "suid-id");
    fs::copy("/usr/bin/id", &id).unwrap();
    fs::set_permissions(&id, fs::Permissions::from_mode(0o4755)).unwrap();
    let mnt = m.mountpoint().display().to_string();
    let out = sh_as(NOBODY, &format!("{mnt}/ws/suid-id -u"));
    assert!(out.success(), "{}", out.describe());
    assert_eq!(out.stdout.trim(), NOBODY.to_string(), "setuid took effect");
    // Device nodes: EPERM (DESIGN §3), whoever asks.
    let out = sh_as(NOBODY, &format!("mknod {mnt}/ws/null c 1 3"));
    assert_sh_errno(&out, libc::EPERM, "mknod c 1 3 as nobody");
    assert!(!exists_nofollow(&m.backing("ws", "null")));
    let out = sh_at(m.mountpoint(), "mknod ws/null c 1 3", &[]);
    assert_sh_errno(&out, libc::EPERM, "mknod c 1 3 as root");
    assert!(!exists_nofollow(&m.backing("ws", "null")));
}

/// Writing, truncating or chowning a setuid/setgid file clears the bits as
/// on the host, whether the data goes by passthrough or through the
/// daemon: a worker must not be able to plant content in a setuid file
/// that keeps its bit (the host runs backing files without `nosuid`).
#[test]
fn writes_and_chown_clear_setuid_and_setgid() {
    if !ready() {
        return;
    }
    for extra in [None, Some("--no-passthrough")] {
        let mut s = setup(Mode::Direct).arg("--allow-other");
        if let Some(a) = extra {
            s = s.arg(a);
        }
        let m = s.mount();
        let mnt = m.mountpoint().display().to_string();
        let ctx = extra.unwrap_or("passthrough");
        let mode_of = |name: &str| fs::metadata(m.backing("ws", name)).unwrap().mode() & 0o7777;
        // Root-owned, writable by all, setuid and setgid with group exec.
        for name in ["append", "trunc", "small", "chown"] {
            let p = m.backing("ws", name);
            fs::write(&p, vec![b'x'; 300 * 1024]).unwrap();
            fs::set_permissions(&p, fs::Permissions::from_mode(0o6777)).unwrap();
        }
        fs::write(m.backing("ws", "small"), "x").unwrap();
        let out = sh_as(
            NOBODY,
            &format!(
                "echo more >> {mnt}/ws/append && : > {mnt}/ws/trunc && \
                 cat {mnt}/ws/small >/dev/null && echo y >> {mnt}/ws/small"
            ),
        );
        assert!(out.success(), "{ctx}: {}", out.describe());
        for name in ["append", "trunc", "small"] {
            assert_eq!(mode_of(name), 0o0777, "{ctx}: {name} kept its bits");
        }
        // A file written before it became setuid: the kernel, which
        // stopped asking about privileges after that first write, asks
        // again once the mode has them.
        let later = m.backing("ws", "later");
        fs::write(&later, "x").unwrap();
        fs::set_permissions(&later, fs::Permissions::from_mode(0o666)).unwrap();
        let out = sh_as(NOBODY, &format!("echo a >> {mnt}/ws/later"));
        assert!(out.success(), "{ctx}: {}", out.describe());
        let out = sh_at(m.mountpoint(), "chmod 6777 ws/later", &[]);
        assert!(out.success(), "{ctx}: {}", out.describe());
        let out = sh_as(NOBODY, &format!("echo b >> {mnt}/ws/later"));
        assert!(out.success(), "{ctx}: {}", out.describe());
        assert_eq!(mode_of("later"), 0o0777, "{ctx}: later kept its bits");
        assert_eq!(fs::read_to_string(&later).unwrap(), "xa\nb\n", "{ctx}");
        // chown clears them too, even by root (Linux since 2.2.13).
        let out = sh_at(m.mountpoint(), "chown 0:0 ws/chown", &[]);
        assert!(out.success(), "{ctx}: {}", out.describe());
        assert_eq!(mode_of("chown"), 0o0777, "{ctx}: chown kept the bits");
        // Root writing keeps them (CAP_FSETID), as on the host.
        fs::set_permissions(
            m.backing("ws", "append"),
            fs::Permissions::from_mode(0o6777),
        )
        .unwrap();
        let out = sh_at(m.mountpoint(), "echo root >> ws/append", &[]);
        assert!(out.success(), "{ctx}: {}", out.describe());
        assert_eq!(
            mode_of("append"),
            0o6777,
            "{ctx}: root's write cleared the bits"
        );
    }
}

/// `trusted.*` xattrs are listed only to a caller with CAP_SYS_ADMIN, as
/// the host lists them: the daemon (root) sees them, an ordinary uid or
/// root without the capability must not through the mount.
#[test]
fn trusted_xattrs_are_listed_only_to_cap_sys_admin() {
    if !(ready() && tool_ok("python3")) {
        return;
    }
    let m = setup(Mode::Direct).arg("--allow-other").mount();
    let f = m.backing("ws", "root-owned.txt");
    for name in ["trusted.secret", "user.pre"] {
        rustix::fs::setxattr(&f, name, b"v", rustix::fs::XattrFlags::empty())
            .unwrap_or_else(|e| panic!("host setxattr {name}: {e}"));
    }
    let path = m.path("ws/root-owned.txt").display().to_string();
    // Names as listed, and a size query's answer, one line each.
    let list = format!(
        "python3 -c \"import os,sys; p=sys.argv[1]; print(sorted(os.listxattr(p))); \
         print(os.getxattr(p, 'user.pre'))\" {path}"
    );
    let names = |out: &Out, who: &str| {
        assert!(out.success(), "listxattr as {who}: {}", out.describe());
        out.stdout.lines().next().unwrap_or_default().to_owned()
    };
    let out = sh_at(Path::new("/"), &list, &[]);
    assert_eq!(
        names(&out, "root"),
        "['trusted.secret', 'user.pre']",
        "root with CAP_SYS_ADMIN lists them, as on the host"
    );
    let out = sh_as(OTHER, &list);
    assert_eq!(names(&out, "uid 4242"), "['user.pre']");
    // Reading one by name is the kernel's refusal (ENODATA) before us.
    let get = format!(
        "python3 -c \"import os,sys\ntry: os.getxattr(sys.argv[1], 'trusted.secret'); print('read')\nexcept OSError as e: print(e.errno)\" {path}"
    );
    let out = sh_as(OTHER, &get);
    assert_eq!(
        out.stdout.trim(),
        libc::ENODATA.to_string(),
        "{}",
        out.describe()
    );
    let out = sh_at(
        Path::new("/"),
        &format!("exec setpriv --inh-caps=-sys_admin --bounding-set=-sys_admin -- {list}"),
        &[],
    );
    assert_eq!(names(&out, "root without CAP_SYS_ADMIN"), "['user.pre']");
    // The size a size query answers is the filtered list's (`listxattr`
    // with a buffer of exactly that size must fit).
    let exact = format!(
        "python3 -c \"import ctypes,sys; c=ctypes.CDLL(None, use_errno=True); p=sys.argv[1].encode(); \
         n=c.listxattr(p, None, 0); b=ctypes.create_string_buffer(n); \
         print(n, c.listxattr(p, b, n), ctypes.get_errno())\" {path}"
    );
    let out = sh_as(OTHER, &exact);
    assert!(out.success(), "{}", out.describe());
    assert_eq!(out.stdout.trim(), "9 9 0", "user.pre\\0 is 9 bytes");
}

/// An ordinary user without `XDG_RUNTIME_DIR` (and no `/run/user/UID`)
/// keeps records and sockets in `/tmp/zonemount-UID`. One another user
/// made first, a symlink, or one others may write is refused by every
/// command that uses the registry, with the reason and the fix; nothing in
/// it is read (a record planted there would point the CLI at its maker's
/// socket). A private dir of the user's own, or none yet, is fine.
#[test]
fn a_fallback_runtime_dir_not_the_users_own_is_refused() {
    if !ready() {
        return;
    }
    let victim = 61_000 + std::process::id() % 1000;
    let attacker = victim + 1000;
    assert!(
        !Path::new(&format!("/run/user/{victim}")).exists(),
        "uid {victim} has a /run/user dir: pick another"
    );
    let dir = std::path::PathBuf::from(format!("/tmp/zonemount-{victim}"));
    struct Gone<'a>(&'a Path);
    impl Drop for Gone<'_> {
        fn drop(&mut self) {
            let _ = fs::remove_file(self.0);
            let _ = fs::remove_dir_all(self.0);
        }
    }
    let _gone = Gone(&dir);
    let _ = fs::remove_file(&dir);
    let _ = fs::remove_dir_all(&dir);
    let zm = |args: &str| {
        sh_as(
            victim,
            &format!("exec env -u XDG_RUNTIME_DIR HOME=/ {BIN} {args}"),
        )
    };
    let refused = |out: &Out, why: &str, ctx: &str| {
        assert_eq!(out.code(), Some(1), "{ctx}: {}", out.describe());
        assert!(
            out.stderr.contains(&dir.display().to_string()) && out.stderr.contains(why),
            "{ctx}: wanted the dir and `{why}`: {}",
            out.describe()
        );
        assert!(!out.stdout.contains("planted"), "{ctx}: {}", out.describe());
    };

    // None yet: fine, and reading makes nothing.
    let out = zm("list");
    assert!(out.success(), "no runtime dir yet: {}", out.describe());
    assert!(!dir.exists(), "list made {}", dir.display());

    // Made first by another user, open to all, with a record planted.
    fs::create_dir_all(dir.join("mounts")).unwrap();
    let planted =
        r#"{"mountpoint":"/planted/by/attacker","pid":1,"config":null,"workers":[],"started":1}"#;
    fs::write(dir.join("mounts/0000000000000000.json"), planted).unwrap();
    for p in [
        dir.join("mounts/0000000000000000.json"),
        dir.join("mounts"),
        dir.clone(),
    ] {
        std::os::unix::fs::chown(&p, Some(attacker), Some(attacker)).unwrap();
    }
    for p in [dir.join("mounts"), dir.clone()] {
        fs::set_permissions(&p, fs::Permissions::from_mode(0o777)).unwrap();
    }
    let owner = format!("belongs to uid {attacker}");
    refused(&zm("list"), &owner, "list in another user's dir");
    refused(
        &zm("list --json"),
        &owner,
        "list --json in another user's dir",
    );
    refused(&zm("unmount --stale"), &owner, "unmount --stale");
    refused(
        &zm("status /planted/by/attacker"),
        &owner,
        "status of the planted mount",
    );
    refused(
        &zm("approvals list /planted/by/attacker"),
        &owner,
        "approvals of the planted mount",
    );
    let mnt = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(mnt.path(), Some(victim), Some(victim)).unwrap();
    fs::set_permissions(mnt.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let out = zm(&format!("mount --zone ws=/tmp:ro {}", mnt.path().display()));
    refused(&out, &owner, "mount with another user's runtime dir");
    assert!(!is_mounted(mnt.path()), "mounted anyway");
    assert_eq!(
        fs::read_dir(&dir).unwrap().count(),
        1,
        "something was made in another user's dir"
    );

    // A symlink to a private dir of the user's: refused, not followed.
    fs::remove_dir_all(&dir).unwrap();
    let real = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(real.path(), Some(victim), Some(victim)).unwrap();
    fs::set_permissions(real.path(), fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::symlink(real.path(), &dir).unwrap();
    refused(&zm("list"), "is a symbolic link", "a symlink");
    fs::remove_file(&dir).unwrap();

    // The user's own, but others may write it: refused; 0700: fine.
    fs::create_dir(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(victim), Some(victim)).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
    refused(
        &zm("list"),
        "has mode 0777: others may write",
        "the user's, 0777",
    );
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
    let out = zm("list");
    assert!(out.success(), "the user's own, 0700: {}", out.describe());
    // The user's own as an older zonemount made it (0755, others may only
    // read): made private, and used.
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    let out = zm("list");
    assert!(out.success(), "the user's own, 0755: {}", out.describe());
    assert_eq!(
        fs::symlink_metadata(&dir).unwrap().mode() & 0o7777,
        0o700,
        "a 0755 runtime dir of the user's is made 0700"
    );
}

/// With `--allow-other`, a user other than the mount's owner and root
/// holds at most a quota of files open through it (a quarter of what the
/// daemon's fd limit leaves past its fd cache and a reserve): past it,
/// EMFILE for that user, while root and other users go on opening files.
/// One user held all of the daemon's fds before (found by an attack
/// pass), and every user's lookups and opens failed.
#[test]
fn one_user_cannot_take_all_of_the_daemons_open_files() {
    if !ready() || !tool_ok("prlimit") {
        return;
    }
    let mut s = setup(Mode::Direct).arg("--allow-other");
    for i in 0..100 {
        s = s.file("ws", &format!("f{i}"), "x\n");
    }
    let m = s.mount();
    let mnt = m.mountpoint().display().to_string();
    let out = m.zonemount(&["status", "--json", &mnt]);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let pid = v["pid"].as_u64().expect("the daemon's pid");
    // 1,024 fds: the cache takes 512, a reserve 256, a user a quarter of
    // the rest.
    let out = sh_at(
        Path::new("/"),
        &format!("prlimit --pid {pid} --nofile=1024:1024"),
        &[],
    );
    assert!(out.success(), "{}", out.describe());
    // As nobody: open f0, f1, ... and keep them open, until one fails.
    let (mut nobody, said) = hold_open(NOBODY, &mnt, 0);
    let others = sh_as(OTHER, &format!("cat {mnt}/ws/f1 {mnt}/ws/f2"));
    let root = fs::read_to_string(m.path("ws/f3"));
    // A second user holds its quota too: all of them together are then
    // at twice it, and a third user gets EMFILE at once.
    let (mut other, other_said) = hold_open(OTHER, &mnt, 50);
    let third = sh_as(THIRD, &format!("cat {mnt}/ws/f4"));
    let root_after = fs::read_to_string(m.path("ws/f5"));
    for h in [&mut nobody, &mut other] {
        let _ = h.kill();
        let _ = h.wait();
    }
    let third_after = sh_as(THIRD, &format!("cat {mnt}/ws/f4"));
    assert!(
        said.contains("Too many open files") && said.ends_with("opened 64\n"),
        "nobody's opens: {said}"
    );
    assert!(others.success(), "another user: {}", others.describe());
    assert_eq!(others.stdout, "x\nx\n");
    assert_eq!(root.unwrap(), "x\n", "root");
    assert!(
        other_said.ends_with("opened 64\n"),
        "the second user's opens: {other_said}"
    );
    assert!(
        !third.success() && third.stderr.contains("Too many open files"),
        "a third user past the users' joint quota: {}",
        third.describe()
    );
    assert_eq!(
        root_after.unwrap(),
        "x\n",
        "root, the users at their joint quota"
    );
    assert!(
        third_after.success(),
        "the third user once the others closed: {}",
        third_after.describe()
    );
}

/// As `uid`: open f`from`, f`from+1`, ... (wrapping at 100) and keep them
/// open until one fails; what it said up to its count (`opened N`), and
/// the process, which holds them until killed.
fn hold_open(uid: u32, mnt: &str, from: u32) -> (std::process::Child, String) {
    let script = format!(
        "exec 2>&1; n=0; for j in $(seq 0 99); do i=$(( (j + {from}) % 100 )); exec {{fd}}<{mnt}/ws/f$i || break; n=$((n+1)); done; echo opened $n; sleep 10"
    );
    let mut holder = std::process::Command::new("setpriv")
        .args([
            &format!("--reuid={uid}"),
            &format!("--regid={uid}"),
            "--clear-groups",
            "bash",
            "-c",
            &script,
        ])
        .current_dir("/")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = String::new();
    use std::io::BufRead;
    let r = std::io::BufReader::new(holder.stdout.take().unwrap());
    for l in r.lines().map_while(Result::ok) {
        said.push_str(&l);
        said.push('\n');
        if l.starts_with("opened ") {
            break;
        }
    }
    (holder, said)
}

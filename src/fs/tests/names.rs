//! Escape attempts through names: symlinks in a zone are never followed
//! by the daemon, `..` and slashes are not names, and sensitive roots are
//! neither looked up nor listed.

use super::*;

#[test]
pub(super) fn symlinks_in_a_zone_are_never_followed_by_the_daemon() {
    let f = fixture();
    symlink(f.outside.join("secret"), f.rw.join("abs")).unwrap();
    symlink("../outside/secret", f.rw.join("rel")).unwrap();
    symlink(&f.outside, f.rw.join("dirlink")).unwrap();
    for name in ["abs", "rel"] {
        let attr = found(&f.core, WORK, name).unwrap();
        assert_eq!(attr.kind, crate::fuse::FileType::Symlink);
        // opening the link node itself never reaches the target
        let e = open(&f.core, attr.ino.0, libc::O_RDONLY).unwrap_err();
        assert_eq!(e.errno(), libc::ELOOP, "{name}");
        let e = open(&f.core, attr.ino.0, libc::O_WRONLY | libc::O_TRUNC).unwrap_err();
        assert_eq!(e.errno(), libc::ELOOP, "{name}");
        // chmod/truncate through the link must not touch the target: each
        // is refused on the link itself.
        let target_mode = || {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(f.outside.join("secret"))
                .unwrap()
                .permissions()
                .mode()
        };
        let before = target_mode();
        let chmod = SetAttr {
            mode: Some(0o777),
            ..SetAttr::default()
        };
        let chmod = setattr(&f.core, attr.ino.0, chmod);
        let truncate = SetAttr {
            size: Some(0),
            ..SetAttr::default()
        };
        let truncate = setattr(&f.core, attr.ino.0, truncate);
        // As lchmod on the host: a symlink's mode can't be changed.
        assert_eq!(
            chmod.map(|_| ()).map_err(|e| e.errno()),
            Err(libc::EOPNOTSUPP),
            "{name}: chmod of the link"
        );
        // Reopening the link node for writing stops at the link itself.
        assert_eq!(
            truncate.map(|_| ()).map_err(|e| e.errno()),
            Err(libc::ELOOP),
            "{name}: truncate of the link"
        );
        assert_eq!(target_mode(), before, "{name}: the target's mode");
    }
    assert_eq!(
        std::fs::read_to_string(f.outside.join("secret")).unwrap(),
        "secret"
    );
    let dl = found(&f.core, WORK, "dirlink").unwrap();
    // a symlinked directory can't be walked into by the daemon
    let e = f
        .core
        .lookup(&CTX, dl.ino.0, OsStr::new("secret"))
        .unwrap_err();
    assert_eq!(e.errno(), libc::ENOTDIR);
    let e = create(&f.core, dl.ino.0, "planted", libc::O_WRONLY).unwrap_err();
    assert_eq!(e.errno(), libc::ENOTDIR);
    assert_eq!(
        mkdir(&f.core, dl.ino.0, "planted").unwrap_err().errno(),
        libc::ENOTDIR
    );
    assert!(!f.outside.join("planted").exists());
}

#[test]
pub(super) fn dot_dot_and_slashes_are_not_names() {
    let f = fixture();
    for bad in ["..", ".", "a/b", "../outside", ""] {
        let looked = f.core.lookup(&CTX, WORK, OsStr::new(bad));
        assert!(looked.is_err(), "{bad:?}: {looked:?}");
        assert!(mkdir(&f.core, WORK, bad).is_err(), "{bad:?}");
    }
    assert!(!f.outside.join("b").exists());
}

#[test]
pub(super) fn sensitive_roots_are_neither_looked_up_nor_listed() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    for d in [".ssh", ".config/gh", ".config/other"] {
        std::fs::create_dir_all(home.join(d)).unwrap();
    }
    std::fs::write(home.join(".ssh/id_rsa"), "key").unwrap();
    let mut z = zone("home", &home, Access::Rw);
    z.policy.hidden = vec![".ssh".into(), ".config/gh".into()];
    let table = ZoneTable {
        mode: SandboxMode::Direct,
        zones: vec![z],
        source: None,
        max_checkpoints: None,
    };
    let c = core_of(&table);
    let home_ino = 2;
    assert_eq!(found(&c, home_ino, ".ssh").unwrap_err(), FsError::enoent());
    let cfg = found(&c, home_ino, ".config").unwrap().ino.0;
    assert_eq!(found(&c, cfg, "gh").unwrap_err(), FsError::enoent());
    let kept = c.recent_refusals();
    assert_eq!(kept.len(), 2, "{kept:?}");
    assert!(kept.iter().all(|r| r.refusal == Refusal::Sensitive));
    let listed = |ino: u64| -> Vec<String> {
        let fh = c.opendir(&CTX, ino).unwrap();
        let names = c
            .readdir(fh, 0)
            .unwrap()
            .into_iter()
            .map(|e| e.name.to_string_lossy().into_owned())
            .collect();
        c.releasedir(fh);
        names
    };
    assert_eq!(listed(home_ino), [".", "..", ".config"]);
    assert_eq!(listed(cfg), [".", "..", "other"]);
    assert_eq!(
        refusal(mkdir(&c, home_ino, ".ssh").unwrap_err()),
        Refusal::Sensitive
    );
    assert_eq!(remove(&c, cfg, "gh", true).unwrap_err(), FsError::enoent());
    let e = rename(&c, home_ino, ".config", home_ino, "c").unwrap_err();
    assert_eq!(refusal(e), Refusal::SensitiveInside);
    assert!(home.join(".config/gh").is_dir() && home.join(".ssh/id_rsa").exists());
    let recent = c.recent_refusals();
    assert!(
        recent[0].message.contains("/home/.ssh holds credentials"),
        "{recent:?}"
    );
    assert_eq!(recent[0].errno, "ENOENT");
}

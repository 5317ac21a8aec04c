//! `hide:` patterns through real mounts, in sandboxed and direct mode: a
//! matching path behaves as a hidden sensitive root does — ENOENT for
//! every operation, absent from listings, nothing made at, under or onto
//! it, a directory carrying an anchored one can't be renamed (EACCES) —
//! in rw, ro and staged zones; a worker adds patterns and never loses its
//! parent's; `derive` and `check` show them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};

use common::*;
use libc::{EACCES, ENOENT};

const HIDE: &str = "hide: [\".env\", \"*.pem\", \"/config/credentials.json\", \"secrets/\"]";

fn fixture(mode: Mode, worker: Option<&str>) -> Option<TestMount> {
    if !fuse_ok() {
        return None;
    }
    let zones = [
        ("sec", format!("mode: rw, {HIDE}")),
        ("rosec", format!("mode: ro, {HIDE}")),
        ("stsec", format!("mode: rw, staged: true, {HIDE}")),
    ];
    let refs: Vec<(&str, &str)> = zones.iter().map(|(z, s)| (*z, s.as_str())).collect();
    let mut s = Setup::zones(mode, &refs);
    for (z, _) in &zones {
        s = s
            .file(z, ".env", "TOKEN=1\n")
            .file(z, "sub/.env", "TOKEN=2\n")
            .file(z, "tls/server.pem", "KEY\n")
            .file(z, "config/credentials.json", "{}\n")
            .file(z, "config/app.json", "{\"ok\":1}\n")
            .file(z, "secrets/a", "a\n")
            .file(z, "notes.txt", "notes\n");
    }
    let stage = s.root().join("stage");
    s = s.arg("--stage-dir").arg(&stage.to_string_lossy());
    if let Some(w) = worker {
        s = s.with_workers(&[w]);
    }
    Some(s.mount())
}

both_modes!(
    hidden_paths_act_as_absent,
    a_worker_adds_patterns,
    a_dir_of_hidden_entries_looks_empty,
);

fn hidden_paths_act_as_absent(mode: Mode) {
    let Some(m) = fixture(mode, None) else {
        return;
    };
    for z in ["sec", "rosec", "stsec"] {
        let p = |rel: &str| m.path(&format!("{z}/{rel}"));
        assert_eq!(
            names(&p("")).unwrap(),
            sorted(&["config", "notes.txt", "sub", "tls"]),
            "{z}: listing"
        );
        assert!(names(&p("sub")).unwrap().is_empty(), "{z}/sub");
        assert!(names(&p("tls")).unwrap().is_empty(), "{z}/tls");
        assert_eq!(
            names(&p("config")).unwrap(),
            sorted(&["app.json"]),
            "{z}/config"
        );
        for hidden in [
            ".env",
            "sub/.env",
            "tls/server.pem",
            "config/credentials.json",
            "secrets",
            "secrets/a",
        ] {
            assert_errno(fs::symlink_metadata(p(hidden)), ENOENT);
            assert_errno(fs::read(p(hidden)), ENOENT);
            assert_errno(
                fs::set_permissions(p(hidden), fs::Permissions::from_mode(0o600)),
                ENOENT,
            );
            assert_errno(fs::remove_file(p(hidden)), ENOENT);
            assert_errno(
                rustix::fs::lgetxattr(p(hidden), "user.x", &mut [0u8; 8][..])
                    .map_err(std::io::Error::from),
                ENOENT,
            );
            assert_errno(fs::rename(p(hidden), p("out")), ENOENT);
            assert_errno(
                fs::OpenOptions::new()
                    .write(true)
                    .open(p(hidden))
                    .map(|_| ()),
                ENOENT,
            );
            assert_errno(
                rustix::fs::lsetxattr(p(hidden), "user.x", b"v", rustix::fs::XattrFlags::empty())
                    .map_err(std::io::Error::from),
                ENOENT,
            );
            let (st, _, err) = m.sh(&format!(
                "truncate -s 0 '{0}' || touch -m '{0}'",
                p(hidden).display()
            ));
            assert!(
                !st.success() && err.contains("No such file"),
                "{hidden}: {err}"
            );
        }
        // Nothing can be made at, under or onto a hidden path.
        for made in [
            fs::write(p("new.pem"), "x"),
            fs::write(p("sub/dir.pem"), "x"),
            fs::write(p("secrets/b"), "x"),
            fs::create_dir(p("secrets")).map(|_| ()),
            fs::create_dir(p("more/.env")).map(|_| ()),
            symlink("notes.txt", p(".env")),
            fs::hard_link(p("notes.txt"), p("x.pem")),
            fs::rename(p("notes.txt"), p("config/credentials.json")),
        ] {
            assert_errno(made, ENOENT);
        }
        // A directory carrying an anchored hidden path can't be renamed
        // (the path would show under the new name)...
        let want = if z == "rosec" { libc::EROFS } else { EACCES };
        assert_errno(fs::rename(p("config"), p("cfg")), want);
        // ...one carrying only unanchored matches can (they stay hidden).
        // (In a staged zone a backing dir's rename is EXDEV anyway.)
        if z == "sec" {
            fs::rename(p("tls"), p("certs")).unwrap();
            assert_errno(fs::read(p("certs/server.pem")), ENOENT);
        }
        if z == "stsec" {
            assert_errno(fs::rename(p("tls"), p("certs")), libc::EXDEV);
        }
        // The backing store: hidden content untouched, nothing made.
        assert_eq!(
            fs::read_to_string(m.backing(z, ".env")).unwrap(),
            "TOKEN=1\n"
        );
        assert!(m.backing(z, "config/credentials.json").exists());
        for made in ["new.pem", "secrets/b", "x.pem", "more", "cfg"] {
            assert!(!exists_nofollow(&m.backing(z, made)), "{z}/{made} was made");
        }
    }
    // check says why, as a worker would be told.
    let out = m.zonemount(&[
        "check",
        "--json",
        m.mountpoint().to_str().unwrap(),
        "/sec/sub/.env",
    ]);
    assert_eq!(out.code(), Some(4), "{}", out.describe());
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["errno"], "ENOENT");
    assert!(
        v["message"].as_str().unwrap().contains("matches '.env'"),
        "{v}"
    );
}

fn a_worker_adds_patterns(mode: Mode) {
    let worker = "sandbox:\n  zones:\n    sec:\n      hide: [\"*.txt\"]\n";
    let Some(m) = fixture(mode, Some(worker)) else {
        return;
    };
    // The worker's pattern, and the parent's still.
    assert_eq!(names(&m.path("")).unwrap(), sorted(&["sec"]));
    assert_errno(fs::read(m.path("sec/notes.txt")), ENOENT);
    assert_errno(fs::read(m.path("sec/.env")), ENOENT);
    assert_eq!(
        names(&m.path("sec")).unwrap(),
        sorted(&["config", "sub", "tls"])
    );
    // derive shows them, and refuses a negation (which would lift one).
    let cfg = m.root().join("project.yaml");
    let w = m.root().join("worker0.worker");
    let out = m.zonemount(&[
        "derive",
        "--json",
        "--config",
        cfg.to_str().unwrap(),
        "--worker",
        w.to_str().unwrap(),
    ]);
    assert!(out.success(), "{}", out.describe());
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let hide: Vec<&str> = v["zones"][0]["policy"]["hide"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap())
        .collect();
    assert_eq!(
        hide,
        [
            ".env",
            "*.pem",
            "/config/credentials.json",
            "secrets/",
            "*.txt"
        ]
    );
    fs::write(
        &w,
        "sandbox:\n  zones:\n    sec:\n      hide: [\"!.env\"]\n",
    )
    .unwrap();
    let out = m.zonemount(&[
        "derive",
        "--config",
        cfg.to_str().unwrap(),
        "--worker",
        w.to_str().unwrap(),
    ]);
    assert_eq!(out.code(), Some(2), "{}", out.describe());
    assert!(
        out.stderr
            .contains("negated patterns are not allowed; hide can only add"),
        "{}",
        out.describe()
    );
}

/// A directory holding only hidden entries gives nothing away: its link
/// count leaves out the hidden subdirectories (2 + the ones listed, as
/// for any directory), and removing it or renaming an empty dir onto it
/// is refused with EACCES, as a rename of a dir that holds hidden paths
/// is, not ENOTEMPTY (which `ls` would contradict). Its hidden content
/// stays. A dir with visible entries still says ENOTEMPTY; the zone dir's
/// count leaves out its hidden `secrets/` too.
fn a_dir_of_hidden_entries_looks_empty(mode: Mode) {
    use std::os::unix::fs::MetadataExt;
    let Some(m) = fixture(mode, None) else {
        return;
    };
    for z in ["sec", "rosec", "stsec"] {
        fs::create_dir_all(m.backing(z, "vault/secrets/deep")).unwrap();
        fs::create_dir_all(m.backing(z, "vault/keys.pem")).unwrap();
        fs::write(m.backing(z, "vault/.env"), "TOKEN=3\n").unwrap();
        fs::create_dir_all(m.backing(z, "vault2/shown")).unwrap();
        fs::create_dir_all(m.backing(z, "vault2/secrets")).unwrap();
    }
    for z in ["sec", "rosec", "stsec"] {
        // Enough hidden names to grow the dir past one block on the host.
        for i in 0..300 {
            fs::write(m.backing(z, &format!("vault/k{i:03}.pem")), "K\n").unwrap();
        }
        fs::create_dir_all(m.backing(z, "bare")).unwrap();
    }
    for z in ["sec", "rosec", "stsec"] {
        let p = |rel: &str| m.path(&format!("{z}/{rel}"));
        assert!(names(&p("vault")).unwrap().is_empty(), "{z}/vault listed");
        // Nor does its size: that of a dir that holds nothing.
        assert!(fs::metadata(m.backing(z, "vault")).unwrap().len() > 4096);
        let size = |rel: &str| {
            let md = fs::metadata(p(rel)).unwrap();
            (md.len(), md.blocks())
        };
        assert_eq!(size("vault"), size("bare"), "{z}: vault's size");
        assert_eq!(fs::metadata(m.backing(z, "vault")).unwrap().nlink(), 4);
        assert_eq!(
            fs::metadata(p("vault")).unwrap().nlink(),
            2,
            "{z}/vault: link count of an empty-looking dir"
        );
        assert_eq!(
            fs::metadata(p("vault2")).unwrap().nlink(),
            3,
            "{z}/vault2: one subdir shown"
        );
        // The zone dir: config, sub, tls, vault, vault2, bare shown;
        // secrets not.
        // (A staged zone's is a merged overlay dir: overlayfs says 1, which
        // counts nothing.)
        assert_eq!(
            fs::metadata(p("")).unwrap().nlink(),
            if z == "stsec" { 1 } else { 2 + 6 },
            "{z}: the zone dir's link count"
        );
        // readdirplus and lookup agree with stat.
        let out = m.sh_in(z, "ls -ld vault | cut -d' ' -f2", &[]);
        assert_eq!(
            out.stdout.trim(),
            "2",
            "{z}: ls -ld vault: {}",
            out.describe()
        );
        let want = if z == "rosec" { libc::EROFS } else { EACCES };
        assert_errno(fs::remove_dir(p("vault")), want);
        let out = m.sh_in(z, "rm -r vault", &[]);
        assert!(!out.success(), "{z}: rm -r vault: {}", out.describe());
        assert!(
            !out.stderr.contains("not empty"),
            "{z}: rm -r vault: {}",
            out.describe()
        );
        assert!(m.backing(z, "vault/secrets/deep").is_dir(), "{z}");
        assert!(m.backing(z, "vault/.env").is_file(), "{z}");
        // Kept as every refusal is, and said as a removal.
        if z != "rosec" {
            let mp = m.mountpoint().to_str().unwrap().to_owned();
            let out = m.zonemount(&["status", "--json", &mp]);
            let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
            let kept = v["recent_refusals"].as_array().unwrap().iter().any(|r| {
                r["path"] == format!("/{z}/vault")
                    && r["errno"] == "EACCES"
                    && r["message"]
                        .as_str()
                        .unwrap()
                        .contains("entries this mount doesn't show")
            });
            assert!(
                kept,
                "{z}: the rmdir refusal isn't kept: {}",
                v["recent_refusals"]
            );
        }
        // Nor can an empty dir replace it by a rename: refused as its
        // rmdir is, and the hidden entries stay.
        if z != "rosec" {
            fs::create_dir(p("empty")).unwrap();
            assert_errno(fs::rename(p("empty"), p("vault")), EACCES);
            assert!(m.backing(z, "vault/.env").is_file(), "{z}");
            assert!(p("empty").is_dir(), "{z}: the source stays");
        }
        // What the worker can see there: the host's answer, as always.
        let want = if z == "rosec" {
            libc::EROFS
        } else {
            libc::ENOTEMPTY
        };
        assert_errno(fs::remove_dir(p("vault2")), want);
        if z != "rosec" {
            assert_errno(fs::rename(p("empty"), p("vault2")), libc::ENOTEMPTY);
        }
    }
}

//! The bubblewrap command line, argument by argument.

#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;

fn zone(name: &str, writable: bool) -> ZoneBind {
    ZoneBind {
        name: name.into(),
        writable,
        staged: false,
        backing: PathBuf::from("/srv/proj").join(name),
        direct: None,
    }
}

fn merged_usr() -> HostFacts {
    HostFacts {
        system: vec![
            SystemEntry::Dir("/usr".into()),
            SystemEntry::Symlink {
                path: "/bin".into(),
                target: "usr/bin".into(),
            },
            SystemEntry::Symlink {
                path: "/lib".into(),
                target: "usr/lib".into(),
            },
            SystemEntry::Dir("/sbin".into()),
        ],
        etc: vec!["/etc/passwd".into(), "/etc/ssl".into()],
    }
}

fn strs(v: &[OsString]) -> Vec<String> {
    v.iter().map(|s| s.to_string_lossy().into_owned()).collect()
}

/// The argv, and whether `window` appears in it consecutively.
fn has(argv: &[String], window: &[&str]) -> bool {
    argv.windows(window.len()).any(|w| w == window)
}

fn build(zones: &[ZoneBind], network: bool) -> Vec<String> {
    let cmd = [
        OsString::from("sh"),
        OsString::from("-c"),
        OsString::from("ls /"),
    ];
    let env = [(OsString::from("PATH"), OsString::from("/usr/bin"))];
    let iso = Isolation {
        mountpoint: Path::new("/tmp/zonemount-run.x"),
        zones,
        network,
        env: &env,
        command: &cmd,
        refusals: None,
    };
    strs(&bwrap_args(&iso, &merged_usr()).unwrap())
}

#[test]
fn zones_are_bound_at_the_root_ro_ones_read_only() {
    let a = build(&[zone("data", false), zone("ws", true)], false);
    assert!(has(
        &a,
        &["--ro-bind", "/tmp/zonemount-run.x/data", "/data"]
    ));
    assert!(has(&a, &["--bind", "/tmp/zonemount-run.x/ws", "/ws"]));
}

#[test]
fn system_dirs_read_only_and_merged_usr_symlinks_kept() {
    let a = build(&[zone("ws", true)], false);
    assert!(has(&a, &["--ro-bind", "/usr", "/usr"]));
    assert!(has(&a, &["--ro-bind", "/sbin", "/sbin"]));
    assert!(has(&a, &["--symlink", "usr/bin", "/bin"]));
    assert!(has(&a, &["--symlink", "usr/lib", "/lib"]));
    assert!(has(&a, &["--ro-bind-try", "/etc/passwd", "/etc/passwd"]));
    assert!(has(&a, &["--ro-bind-try", "/etc/ssl", "/etc/ssl"]));
    assert!(has(&a, &["--perms", "0755", "--dir", "/etc"]));
    assert!(has(&a, &["--remount-ro", "/"]));
    // Nothing else of the host is bound.
    let sources: Vec<&String> = a
        .windows(3)
        .filter(|w| w[0] == "--bind" || w[0] == "--ro-bind" || w[0] == "--ro-bind-try")
        .map(|w| &w[1])
        .collect();
    for src in sources {
        assert!(
            src.starts_with("/usr")
                || src == "/sbin"
                || src.starts_with("/etc/")
                || src.starts_with("/tmp/zonemount-run.x/"),
            "unexpected bind source {src}"
        );
    }
}

#[test]
fn private_tmp_proc_dev_and_namespaces() {
    let a = build(&[zone("ws", true)], false);
    for w in [
        &["--proc", "/proc", "--remount-ro", "/proc"][..],
        &["--dev", "/dev"],
        &["--perms", "1777", "--tmpfs", "/tmp"],
        &["--unshare-all"],
        &["--die-with-parent"],
        &["--new-session"],
        &["--cap-drop", "ALL"],
    ] {
        assert!(has(&a, w), "missing {w:?} in {a:?}");
    }
    assert!(!a.contains(&"--share-net".to_string()));
}

#[test]
fn network_only_when_asked() {
    let a = build(&[zone("ws", true)], true);
    assert!(has(&a, &["--unshare-all"]));
    assert!(has(&a, &["--share-net"]));
}

#[test]
fn cwd_is_the_first_rw_zone_or_the_root() {
    let a = build(
        &[zone("data", false), zone("ws", true), zone("out", true)],
        false,
    );
    assert!(has(&a, &["--chdir", "/ws"]));
    let a = build(&[zone("data", false)], false);
    assert!(has(&a, &["--chdir", "/"]));
    let a = build(&[], false);
    assert!(has(&a, &["--chdir", "/"]));
}

#[test]
fn environment_is_cleared_then_set_and_command_comes_last() {
    let a = build(&[zone("ws", true)], false);
    let clear = a.iter().position(|x| x == "--clearenv").unwrap();
    let set = a.iter().position(|x| x == "--setenv").unwrap();
    assert!(clear < set);
    assert!(has(&a, &["--setenv", "PATH", "/usr/bin"]));
    assert!(a.ends_with(&["--".into(), "sh".into(), "-c".into(), "ls /".into()]));
}

#[test]
fn zone_names_that_hide_system_dirs_are_refused() {
    for name in ["usr", "bin", "etc", "proc", "dev", "tmp", "lib", "sbin"] {
        let cmd = [OsString::from("true")];
        let zones = [zone(name, true)];
        let iso = Isolation {
            mountpoint: Path::new("/m"),
            zones: &zones,
            network: false,
            env: &[],
            command: &cmd,
            refusals: None,
        };
        assert_eq!(
            bwrap_args(&iso, &merged_usr()),
            Err(IsolateError::ReservedName(name.into())),
            "{name}"
        );
    }
}

#[test]
fn an_empty_command_is_refused() {
    let iso = Isolation {
        mountpoint: Path::new("/m"),
        zones: &[],
        network: false,
        env: &[],
        command: &[],
        refusals: None,
    };
    assert_eq!(
        bwrap_args(&iso, &merged_usr()),
        Err(IsolateError::NoCommand)
    );
}

#[test]
fn a_backing_dir_inside_a_system_dir_is_covered() {
    let mut z = zone("docs", false);
    z.backing = "/usr/share/doc".into();
    let a = build(&[z], false);
    assert!(has(&a, &["--tmpfs", "/usr/share/doc"]));
    let a = build(&[zone("docs", false)], false);
    assert!(!has(&a, &["--tmpfs", "/srv/proj/docs"]));
}

#[test]
fn env_specs_parse() {
    assert_eq!(
        EnvSpec::parse(OsStr::new("A=1=2")).unwrap(),
        EnvSpec {
            name: "A".into(),
            value: Some("1=2".into())
        }
    );
    assert_eq!(
        EnvSpec::parse(OsStr::new("FOO_2")).unwrap(),
        EnvSpec {
            name: "FOO_2".into(),
            value: None
        }
    );
    assert_eq!(
        EnvSpec::parse(OsStr::new("B=")).unwrap().value,
        Some("".into())
    );
    for bad in ["", "=x", "1A", "A-B=1", "A B"] {
        assert!(EnvSpec::parse(OsStr::new(bad)).is_err(), "{bad:?}");
    }
}

#[test]
fn env_is_the_allow_list_plus_home_plus_extras() {
    let host = |n: &str| match n {
        "PATH" => Some(OsString::from("/host/bin:/usr/bin")),
        "TERM" => Some("xterm".into()),
        "SECRET" => Some("s3cret".into()),
        "AWS_SECRET_ACCESS_KEY" => Some("k".into()),
        "COPY" => Some("copied".into()),
        _ => None,
    };
    let extra = [
        EnvSpec::parse(OsStr::new("FOO=bar")).unwrap(),
        EnvSpec::parse(OsStr::new("COPY")).unwrap(),
        EnvSpec::parse(OsStr::new("UNSET_ON_HOST")).unwrap(),
        EnvSpec::parse(OsStr::new("HOME=/elsewhere")).unwrap(),
    ];
    let env = sandbox_env(host, &extra, Path::new("/ws"));
    let got: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string_lossy().into(), v.to_string_lossy().into()))
        .collect();
    let want: Vec<(String, String)> = [
        ("PATH", "/host/bin:/usr/bin"),
        ("TERM", "xterm"),
        ("FOO", "bar"),
        ("COPY", "copied"),
        ("HOME", "/elsewhere"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(got, want);
}

#[test]
fn env_without_host_path_gets_a_default_and_home_the_zone() {
    let env = sandbox_env(|_| None, &[], Path::new("/ws"));
    assert_eq!(
        env,
        vec![
            (OsString::from("PATH"), OsString::from(DEFAULT_PATH)),
            (OsString::from("HOME"), OsString::from("/ws")),
        ]
    );
}

#[test]
fn host_facts_on_this_machine_include_usr() {
    let h = HostFacts::read();
    assert!(h.system.contains(&SystemEntry::Dir("/usr".into())));
}

#[test]
fn a_direct_zone_is_bound_from_its_fd_the_others_from_the_mount() {
    let mut ro = zone("docs", false);
    ro.direct = Some(7);
    let mut rw = zone("ws", true);
    rw.direct = Some(8);
    let via = zone("data", false);
    let argv = build(&[ro, rw, via], false);
    assert!(has(&argv, &["--ro-bind-fd", "7", "/docs"]), "{argv:?}");
    assert!(has(&argv, &["--bind-fd", "8", "/ws"]), "{argv:?}");
    assert!(
        has(&argv, &["--ro-bind", "/tmp/zonemount-run.x/data", "/data"]),
        "{argv:?}"
    );
    // Nothing of a direct zone comes from the mount.
    assert!(!argv.iter().any(|a| a == "/tmp/zonemount-run.x/docs"));
    assert!(!argv.iter().any(|a| a == "/tmp/zonemount-run.x/ws"));
}

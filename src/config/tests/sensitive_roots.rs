//! Sensitive roots (`~/.ssh`, ...): refused as zones unless allowed, hidden
//! by real path inside a zone, checked in the embedded default too, and
//! homes read from a passwd file.

use super::*;

#[test]
fn sensitive_roots_are_refused_unless_allowed() {
    let f = Fixture::new();
    let home = f.home();
    let allow = LoadOptions {
        allow_sensitive_roots: true,
        homes: vec![home.clone()],
    };
    for name in SENSITIVE_ROOTS {
        let cases = [
            (name.to_string(), "is the sensitive path"),
            (format!("{name}/inner"), "is inside the sensitive path"),
        ];
        for (path, how) in cases {
            let text = format!(
                "sandbox:\n  root: '{}'\n  zones:\n    z:\n      path: '{path}'\n",
                home.display()
            );
            let e = f.load_err(&text);
            assert_err(&e, "project.yaml", 5, "sandbox.zones.z.path", how);
            assert!(e.message.contains("--allow-sensitive-roots"), "{e}");
            f.load_with(&text, &allow).unwrap();
        }
    }
    // Contains: the home itself, and its parent. Mounted, with every
    // sensitive root hidden (relative to the backing dir); nothing hidden
    // with --allow-sensitive-roots.
    for (root, prefix) in [(home.clone(), ""), (f.tmp.path().join("home"), "u/")] {
        let text = format!(
            "sandbox:\n  root: '{}'\n  zones:\n    z:\n      path: .\n",
            root.display()
        );
        let t = f.load(&text).unwrap();
        let want: Vec<PathBuf> = SENSITIVE_ROOTS
            .iter()
            .map(|n| PathBuf::from(format!("{prefix}{n}")))
            .collect();
        assert_eq!(t.zones[0].policy.hidden, want);
        let t = f.load_with(&text, &allow).unwrap();
        assert!(t.zones[0].policy.hidden.is_empty());
    }
    // Direct mode, the zone reaching ~/.ssh through a symlink.
    fs::create_dir_all(home.join(".ssh")).unwrap();
    std::os::unix::fs::symlink(home.join(".ssh"), f.proj().join("keys")).unwrap();
    let text = "sandbox:\n  mode: direct\n  zones:\n    k: { path: keys }\n";
    let e = f.load_err(text);
    assert_err(
        &e,
        "project.yaml",
        4,
        "sandbox.zones.k.path",
        "is the sensitive path",
    );
    f.load_with(text, &allow).unwrap();
    // A home that is a symlink is compared by its real path.
    std::os::unix::fs::symlink(&home, f.tmp.path().join("homelink")).unwrap();
    let opts = LoadOptions {
        allow_sensitive_roots: false,
        homes: vec![f.tmp.path().join("homelink")],
    };
    let e = f.load_with(text, &opts).unwrap_err();
    assert!(e.message.contains("is the sensitive path"), "{e}");
    // A zone with no path: the error points at its name.
    let text = format!(
        "sandbox:\n  root: '{}'\n  zones:\n    .ssh: {{}}\n",
        home.display()
    );
    let e = f.load_err(&text);
    assert_err(
        &e,
        "project.yaml",
        4,
        "sandbox.zones..ssh",
        "is the sensitive path",
    );
}

#[test]
fn sensitive_roots_inside_a_zone_are_hidden_by_real_path() {
    let f = Fixture::new();
    let home = f.home();
    // ~/.ssh a symlink to a dir inside the home: both names are hidden.
    fs::create_dir_all(home.join("dotfiles/ssh")).unwrap();
    std::os::unix::fs::symlink(home.join("dotfiles/ssh"), home.join(".ssh")).unwrap();
    // ~/.aws a symlink to somewhere outside: its name is hidden.
    fs::create_dir_all(f.tmp.path().join("elsewhere")).unwrap();
    std::os::unix::fs::symlink(f.tmp.path().join("elsewhere"), home.join(".aws")).unwrap();
    let text = format!(
        "sandbox:\n  mode: direct\n  zones:\n    h: {{ path: '{}', mode: rw }}\n    c: {{ path: '{}' }}\n",
        home.display(),
        f.tmp.path().join("elsewhere").display()
    );
    let e = f.load_err(&text);
    assert!(e.message.contains("zone 'c' is the sensitive path"), "{e}");
    let text = format!(
        "sandbox:\n  mode: direct\n  zones:\n    h: {{ path: '{}', mode: rw }}\n",
        home.display()
    );
    let t = f.load(&text).unwrap();
    let hidden = &t.zones[0].policy.hidden;
    for h in [".ssh", "dotfiles/ssh", ".aws", ".config/gh", ".npmrc"] {
        assert!(hidden.contains(&PathBuf::from(h)), "{h} in {hidden:?}");
    }
    assert!(!hidden.iter().any(|h| h.is_absolute()), "{hidden:?}");
    // A zone of ~/.config hides gh and gcloud under it.
    fs::create_dir_all(home.join(".config")).unwrap();
    let text = format!(
        "sandbox:\n  mode: direct\n  zones:\n    c: {{ path: '{}' }}\n",
        home.join(".config").display()
    );
    let t = f.load(&text).unwrap();
    assert_eq!(
        t.zones[0].policy.hidden,
        vec![PathBuf::from("gcloud"), PathBuf::from("gh")]
    );
    // Derivation keeps the parent's hidden paths, whatever the worker says.
    let derived = derive(
        &t,
        &worker("sandbox:\n  zones:\n    c: { mode: ro, protect: [x] }\n"),
    )
    .unwrap();
    assert_eq!(derived.zones[0].policy.hidden, t.zones[0].policy.hidden);
}

#[test]
fn the_embedded_default_is_checked_too() {
    let f = Fixture::new();
    // A (contrived) home whose ~/.ssh holds the default `cache` zone.
    let home = f.tmp.path().join("home2");
    fs::create_dir_all(&home).unwrap();
    f.mkdir(".sandbox");
    std::os::unix::fs::symlink(f.proj().join(".sandbox"), home.join(".ssh")).unwrap();
    let opts = LoadOptions {
        allow_sensitive_roots: false,
        homes: vec![home],
    };
    let e = load_project(None, &f.proj(), &opts).unwrap_err();
    assert_eq!(e.file, None);
    assert_eq!(e.line, None);
    assert!(
        e.to_string()
            .starts_with("default config: sandbox.zones.cache"),
        "{e}"
    );
}

#[test]
fn homes_from_passwd_file() {
    let homes = validate::homes_from_passwd(
        "root:x:0:0:root:/root:/bin/bash\n# comment\nu:x:1000:1000::/home/u:/bin/sh\nbad line\nv:x:1:1::relative:/bin/sh\nw:x:2:2::/root:/bin/sh\n",
    );
    assert_eq!(homes, [PathBuf::from("/root"), PathBuf::from("/home/u")]);
    let host = LoadOptions::from_host(true);
    assert!(host.allow_sensitive_roots);
}

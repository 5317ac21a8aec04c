//! Backing paths: direct-mode paths, sandboxed paths kept under the root,
//! overlapping backing dirs refused, path resolution, and
//! `prepare_backing` creating or checking the dirs.

use super::*;

#[test]
fn direct_mode_paths() {
    let f = Fixture::new();
    let e = f.load_err("sandbox:\n  mode: direct\n  zones:\n    data: { mode: ro }\n");
    assert_err(
        &e,
        "project.yaml",
        4,
        "sandbox.zones.data.path",
        "has no 'path'",
    );
    let e = f.load_err("sandbox:\n  mode: direct\n  zones:\n    data:\n      path: ./nope\n");
    assert_err(
        &e,
        "project.yaml",
        5,
        "sandbox.zones.data.path",
        "does not exist",
    );
    f.write("file", "x");
    let e = f.load_err("sandbox:\n  mode: direct\n  zones:\n    data:\n      path: ./file\n");
    assert_err(
        &e,
        "project.yaml",
        5,
        "sandbox.zones.data.path",
        "not a directory",
    );

    f.mkdir("data");
    let abs = f.mkdir("elsewhere");
    let t = f
        .load(&format!(
            "sandbox:\n  mode: direct\n  zones:\n    data: {{ path: ./data }}\n    abs: {{ path: '{}' }}\n",
            abs.display()
        ))
        .unwrap();
    assert_eq!(t.mode, SandboxMode::Direct);
    assert_eq!(
        t.zone("data").unwrap().backing,
        real(&f.proj().join("data"))
    );
    assert_eq!(t.zone("abs").unwrap().backing, real(&abs));
}

#[test]
fn sandboxed_paths_may_not_escape_the_root() {
    let f = Fixture::new();
    for (path, line) in [("../x", 4), ("/etc", 4), ("a/../../b", 4), ("a/..", 4)] {
        let e = f.load_err(&format!(
            "sandbox:\n  zones:\n    z:\n      path: '{path}'\n"
        ));
        assert_err(
            &e,
            "project.yaml",
            line,
            "sandbox.zones.z.path",
            "must stay inside the sandbox root",
        );
    }
    let t = f
        .load("sandbox:\n  zones:\n    z: { path: ./a/./b }\n")
        .unwrap();
    assert_eq!(t.zones[0].backing, real(&f.proj()).join(".sandbox/a/b"));
}

#[test]
fn overlapping_backing_dirs_are_refused() {
    let f = Fixture::new();
    let e = f.load_err("sandbox:\n  zones:\n    a: { path: x }\n    b: { path: ./x }\n");
    assert_err(
        &e,
        "project.yaml",
        4,
        "sandbox.zones.b.path",
        "same directory as the backing dir of zone 'a' on line 3",
    );
    let e = f.load_err("sandbox:\n  zones:\n    a: { path: x }\n    b:\n      path: x/y\n");
    assert_err(&e, "project.yaml", 5, "sandbox.zones.b.path", "is inside");
    let e = f.load_err("sandbox:\n  zones:\n    b: { path: x/y }\n    x: {}\n");
    assert_err(&e, "project.yaml", 4, "sandbox.zones.x", "contains");

    // Via a symlink, in direct mode.
    f.mkdir("real");
    std::os::unix::fs::symlink(f.proj().join("real"), f.proj().join("link")).unwrap();
    let e = f.load_err(
        "sandbox:\n  mode: direct\n  zones:\n    a: { path: real }\n    b: { path: link }\n",
    );
    assert_err(
        &e,
        "project.yaml",
        5,
        "sandbox.zones.b.path",
        "same directory",
    );
    // ... and in sandboxed mode, where a dir inside the root is a symlink.
    f.mkdir(".sandbox/a");
    std::os::unix::fs::symlink(f.proj().join(".sandbox/a"), f.proj().join(".sandbox/b")).unwrap();
    let e = f.load_err("sandbox:\n  zones:\n    a: {}\n    b: { path: b/sub }\n");
    assert_err(&e, "project.yaml", 4, "sandbox.zones.b.path", "is inside");
}

#[test]
fn resolve_handles_missing_tails_and_dotdot() {
    let f = Fixture::new();
    let base = real(&f.proj());
    assert_eq!(resolve(&f.proj().join("a/b/../c/./d")), base.join("a/c/d"));
    std::os::unix::fs::symlink(f.home(), f.proj().join("h")).unwrap();
    assert_eq!(resolve(&f.proj().join("h/x")), real(&f.home()).join("x"));
}

#[test]
fn prepare_backing_creates_or_checks() {
    let f = Fixture::new();
    let t = f
        .load("sandbox:\n  zones:\n    a: { path: deep/a }\n    b: {}\n")
        .unwrap();
    prepare_backing(&t).unwrap();
    assert!(t.zones.iter().all(|z| z.backing.is_dir()));
    prepare_backing(&t).unwrap();

    f.write(".sandbox/c", "a file");
    let t = f.load("sandbox:\n  zones:\n    c: {}\n").unwrap();
    let e = prepare_backing(&t).unwrap_err();
    assert_eq!(e.field, "sandbox.zones.c");
    assert!(
        e.message.contains("zone 'c'") && e.message.contains(".sandbox/c"),
        "{e}"
    );

    f.mkdir("d");
    let t = f
        .load("sandbox:\n  mode: direct\n  zones:\n    d: { path: d }\n")
        .unwrap();
    prepare_backing(&t).unwrap();
    fs::remove_dir(f.proj().join("d")).unwrap();
    let e = prepare_backing(&t).unwrap_err();
    assert!(
        e.message.contains("zone 'd'") && e.message.contains("missing"),
        "{e}"
    );
    assert!(
        e.to_string().contains("project.yaml: sandbox.zones.d: "),
        "{e}"
    );
}

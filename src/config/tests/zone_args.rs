//! `--zone NAME=PATH[:ro|rw|staged]`: parsing, and the config's own checks applied
//! to zones from the command line (alone, or added to a file's).

use super::*;

fn zone(arg: &str) -> CliZone {
    CliZone::parse(arg).unwrap_or_else(|e| panic!("{arg}: {e}"))
}

fn load(f: &Fixture, file: Option<&Path>, args: &[&str]) -> Result<ZoneTable, ConfigError> {
    let zones: Vec<CliZone> = args.iter().map(|a| zone(a)).collect();
    load_project_with(file, &f.proj(), &zones, &f.opts())
}

fn err(f: &Fixture, file: Option<&Path>, args: &[&str]) -> String {
    match load(f, file, args) {
        Ok(t) => panic!("{args:?} accepted: {t:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn parses_name_path_and_access_read_only_by_default() {
    let z = zone("docs=../docs:ro");
    assert_eq!((z.name.as_str(), z.path.as_str()), ("docs", "../docs"));
    assert_eq!(z.access, Access::Ro);
    assert_eq!(zone("work=.:rw").access, Access::Rw);
    let plain = zone("work=.");
    assert_eq!((plain.path.as_str(), plain.access), (".", Access::Ro));
    let staged = zone("work=.:staged");
    assert_eq!((staged.access, staged.staged), (Access::Rw, true));
    // Only what follows the last ':' is the mode; other colons, and a last
    // part with a '/', are the path's.
    let odd = zone("x=/a:b/c");
    assert_eq!((odd.path.as_str(), odd.access), ("/a:b/c", Access::Ro));
    let colon = zone("x=/a:b:rw");
    assert_eq!((colon.path.as_str(), colon.access), ("/a:b", Access::Rw));
    let written_out = zone("x=./d:rw:ro");
    assert_eq!(
        (written_out.path.as_str(), written_out.access),
        ("./d:rw", Access::Ro)
    );
}

#[test]
fn malformed_arguments_say_the_form() {
    for (arg, want) in [
        ("work", "--zone work: expected NAME=PATH[:ro|rw|staged]"),
        (
            "a=d:rx",
            "--zone a=d:rx: unknown mode ':rx' for zone 'a': expected :ro, :rw or :staged \
             (a PATH whose last part contains ':' needs the mode written out, e.g. --zone a=d:rx:ro)",
        ),
        ("a=/x:b", "--zone a=/x:b: unknown mode ':b' for zone 'a'"),
        ("a=d:RW", "--zone a=d:RW: unknown mode ':RW' for zone 'a'"),
        ("w=:rx", "--zone w=:rx: unknown mode ':rx'"),
        ("=.", "--zone =.: zone name is empty"),
        ("a b=.", "--zone a b=.: zone name 'a b' contains ' '"),
        ("..=.", "--zone ..=.: zone name '..' is not allowed"),
        ("w=", "--zone w=: zone 'w' needs a directory"),
        ("w=:rw", "--zone w=:rw: zone 'w' needs a directory"),
    ] {
        match CliZone::parse(arg) {
            Ok(z) => panic!("{arg} accepted: {z:?}"),
            Err(e) => assert!(e.to_string().starts_with(want), "{arg}: {e}"),
        }
    }
}

#[test]
fn alone_they_replace_the_embedded_default_and_create_nothing() {
    let f = Fixture::new();
    f.mkdir("src");
    let docs = f.tmp.path().join("docs");
    fs::create_dir_all(&docs).unwrap();
    let t = load(&f, None, &["work=src:rw", "docs=../docs:ro"]).unwrap();
    assert_eq!(t.mode, SandboxMode::Direct);
    assert_eq!(t.source, None);
    let names: Vec<&str> = t.zones.iter().map(|z| z.name.as_str()).collect();
    assert_eq!(names, ["work", "docs"]);
    assert_eq!(
        t.zones[0].backing,
        fs::canonicalize(f.proj().join("src")).unwrap()
    );
    assert_eq!(t.zones[0].policy, ZonePolicy::plain(Access::Rw));
    assert_eq!(t.zones[1].backing, fs::canonicalize(&docs).unwrap());
    assert_eq!(t.zones[1].policy.access, Access::Ro);
    assert_eq!(prepare_backing(&t).unwrap(), Vec::<String>::new());
    assert!(!f.proj().join(".sandbox").exists());
}

#[test]
fn they_add_to_the_files_zones_with_paths_from_the_current_dir() {
    let f = Fixture::new();
    let file = f.write(
        "conf/project.yaml",
        "sandbox:\n  mode: sandboxed\n  zones:\n    cache: { mode: rw }\n",
    );
    f.mkdir("src");
    let t = load(&f, Some(&file), &["work=src:rw"]).unwrap();
    assert_eq!(t.mode, SandboxMode::Sandboxed);
    assert_eq!(t.source.as_deref(), Some(file.as_path()));
    assert_eq!(t.zones[0].name, "cache");
    assert_eq!(
        t.zones[0].backing,
        validate::resolve(&f.proj().join("conf/.sandbox/cache"))
    );
    // Relative to the current directory (proj), not the file's (conf).
    assert_eq!(
        t.zones[1].backing,
        fs::canonicalize(f.proj().join("src")).unwrap()
    );
    assert_eq!(t.zones[1].policy.access, Access::Rw);
    // A found ./zonemount.yaml is added to the same way.
    f.write(
        PROJECT_FILE_NAME,
        "sandbox:\n  mode: direct\n  zones:\n    data: { path: src }\n",
    );
    f.mkdir("out");
    let t = load(&f, None, &["out=out:rw"]).unwrap();
    let names: Vec<&str> = t.zones.iter().map(|z| z.name.as_str()).collect();
    assert_eq!(names, ["data", "out"]);
}

#[test]
fn a_name_in_the_file_and_on_the_command_line_names_both() {
    let f = Fixture::new();
    f.mkdir("src");
    f.mkdir("other");
    let file = f.write(
        "project.yaml",
        "sandbox:\n  mode: direct\n  zones:\n    work:\n      path: src\n",
    );
    let m = err(&f, Some(&file), &["work=other:rw"]);
    assert_eq!(
        m,
        format!(
            "--zone work=other:rw: zone 'work' is already defined ({} line 5); give this one another name",
            file.display()
        )
    );
    let m = err(&f, None, &["a=src", "a=other"]);
    assert_eq!(
        m,
        "--zone a=other: zone 'a' is already defined (--zone a=src); give this one another name"
    );
}

#[test]
fn the_files_checks_apply_overlap_missing_dir_sensitive_root() {
    let f = Fixture::new();
    f.mkdir("src/inner");
    let m = err(&f, None, &["w=src:rw", "r=src/inner"]);
    assert!(m.starts_with("--zone r=src/inner: backing dir "), "{m}");
    assert!(
        m.contains("is inside the backing dir of zone 'w' (--zone w=src:rw)")
            && m.ends_with("zones must not overlap"),
        "{m}"
    );
    let m = err(&f, None, &["gone=nope"]);
    assert!(m.starts_with("--zone gone=nope: 'nope' ("), "{m}");
    assert!(
        m.ends_with("direct mode needs an existing directory"),
        "{m}"
    );
    fs::write(f.proj().join("file"), "x").unwrap();
    let m = err(&f, None, &["f=file"]);
    assert!(
        m.starts_with("--zone f=file: 'file' (") && m.ends_with("is not a directory"),
        "{m}"
    );
    let ssh = f.home().join(".ssh");
    fs::create_dir_all(&ssh).unwrap();
    let arg = format!("keys={}", ssh.display());
    let m = err(&f, None, &[&arg]);
    assert!(
        m.starts_with(&format!("--zone {arg}: backing dir "))
            && m.contains("is the sensitive path"),
        "{m}"
    );
    assert!(
        m.ends_with("(start with --allow-sensitive-roots to allow it)"),
        "{m}"
    );
    // Containing one hides it, as for a zone of a file.
    let arg = format!("home={}", f.home().display());
    let t = load(&f, None, &[&arg]).unwrap();
    assert!(t.zones[0].policy.hidden.contains(&PathBuf::from(".ssh")));
    // And the file's zones are checked against the command line's.
    let file = f.write(
        "project.yaml",
        "sandbox:\n  mode: direct\n  zones:\n    work: { path: src, mode: rw }\n",
    );
    let m = err(&f, Some(&file), &["in=src/inner"]);
    assert!(
        m.contains(&format!(
            "the backing dir of zone 'work' ({} line 4)",
            file.display()
        )),
        "{m}"
    );
}

#[test]
fn every_preset_file_is_embedded_and_loads() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/presets");
    let mut files: Vec<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let mut embedded: Vec<String> = presets::PRESETS
        .iter()
        .map(|p| format!("{}.yaml", p.name))
        .collect();
    embedded.sort();
    assert_eq!(files, embedded);
    let f = Fixture::new();
    for p in presets::PRESETS {
        assert_eq!(
            fs::read_to_string(dir.join(format!("{}.yaml", p.name))).unwrap(),
            p.text
        );
        let name = PathBuf::from(format!("preset:{}", p.name));
        let t = load_project_with(Some(&name), &f.proj(), &[], &f.opts())
            .unwrap_or_else(|e| panic!("{}: {e}", p.name));
        assert_eq!(t.source.as_deref(), Some(name.as_path()));
        assert_eq!(t.zones.len(), 1, "{}", p.name);
    }
    let dangerous: Vec<&str> = presets::PRESETS
        .iter()
        .filter(|p| p.danger)
        .map(|p| p.name)
        .collect();
    assert_eq!(dangerous, ["full", "auto-approve"]);
    let e = load_project_with(Some(Path::new("preset:x")), &f.proj(), &[], &f.opts()).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("preset:x: unknown preset 'x'; the presets are read-only"),
        "{e}"
    );
}

#[test]
fn staged_suffix_is_rw_and_staged() {
    let z = zone("work=.:staged");
    assert_eq!(
        (z.path.as_str(), z.access, z.staged),
        (".", Access::Rw, true)
    );
    assert!(!zone("work=.:rw").staged);
    let f = Fixture::new();
    let t = load(&f, None, &["work=.:staged"]).unwrap();
    let p = &t.zone("work").unwrap().policy;
    assert_eq!((p.access, p.staged), (Access::Rw, true));
}

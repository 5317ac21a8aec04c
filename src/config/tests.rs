//! Unit tests: both zone forms, both worker forms, every validation error
//! (each checked for file, line and field), every derivation rule, the
//! example files, and garbage input.

use std::fs;
use std::path::{Path, PathBuf};

use super::*;

/// A project dir with a fake home beside it, so sensitive-root checks never
/// depend on the host.
struct Fixture {
    tmp: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        fs::create_dir_all(tmp.path().join("proj")).unwrap();
        fs::create_dir_all(tmp.path().join("home/u")).unwrap();
        Self { tmp }
    }
    fn proj(&self) -> PathBuf {
        self.tmp.path().join("proj")
    }
    fn home(&self) -> PathBuf {
        self.tmp.path().join("home/u")
    }
    fn opts(&self) -> LoadOptions {
        LoadOptions {
            allow_sensitive_roots: false,
            homes: vec![self.home()],
        }
    }
    fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.proj().join(name);
        if let Some(parent) = p.parent() {
            fs::create_dir_all(parent).unwrap();
        }
        fs::write(&p, text).unwrap();
        p
    }
    fn mkdir(&self, rel: &str) -> PathBuf {
        let p = self.proj().join(rel);
        fs::create_dir_all(&p).unwrap();
        p
    }
    fn load(&self, text: &str) -> Result<ZoneTable, ConfigError> {
        self.load_with(text, &self.opts())
    }
    fn load_with(&self, text: &str, opts: &LoadOptions) -> Result<ZoneTable, ConfigError> {
        let p = self.write("project.yaml", text);
        load_project(Some(&p), &self.proj(), opts)
    }
    fn load_err(&self, text: &str) -> ConfigError {
        match self.load(text) {
            Ok(t) => panic!("expected an error, got {t:#?}"),
            Err(e) => e,
        }
    }
    fn worker(&self, name: &str, text: &str) -> WorkerDecl {
        load_worker(&self.write(name, text)).unwrap()
    }
    fn worker_err(&self, name: &str, text: &str) -> ConfigError {
        match load_worker(&self.write(name, text)) {
            Ok(w) => panic!("expected an error, got {w:#?}"),
            Err(e) => e,
        }
    }
}

/// The error names the file, the line and the field, on one line.
#[track_caller]
fn assert_err(e: &ConfigError, file: &str, line: usize, field: &str, text: &str) {
    let shown = e.to_string();
    assert!(!shown.contains('\n'), "not one line: {shown}");
    assert!(
        e.file
            .as_ref()
            .is_some_and(|f| f.to_string_lossy().ends_with(file)),
        "file {file}: {shown}"
    );
    assert_eq!(e.line, Some(line), "line: {shown}");
    assert_eq!(e.field, field, "field: {shown}");
    let prefix = if field.is_empty() {
        format!("{file}:{line}: ")
    } else {
        format!("{file}:{line}: {field}: ")
    };
    assert!(shown.contains(&prefix), "prefix: {shown}");
    assert!(shown.contains(text), "{text:?} not in: {shown}");
}

fn real(p: &Path) -> PathBuf {
    fs::canonicalize(p).unwrap()
}

// ---------------------------------------------------------------- parsing

#[test]
fn map_and_list_forms_give_the_same_table() {
    let f = Fixture::new();
    let map = f
        .load(
            "sandbox:\n  zones:\n    data: { path: ./data, mode: ro }\n    out:\n      mode: rw\n      approval: { write: ask, delete: blocked }\n      suffixes: [.md]\n      max_file_bytes: 10\n      protect: [.git]\n",
        )
        .unwrap();
    let list = f
        .load(
            "sandbox:\n  zones:\n    - name: data\n      path: ./data\n      mode: ro\n    - name: out\n      mode: rw\n      approval: { write: ask, delete: blocked }\n      suffixes: [.md]\n      max_file_bytes: 10\n      protect: [.git]\n",
        )
        .unwrap();
    assert_eq!(map, list);
    assert_eq!(map.mode, SandboxMode::Sandboxed);
    let root = real(&f.proj()).join(".sandbox");
    let data = map.zone("data").unwrap();
    assert_eq!(data.backing, root.join("data"));
    assert_eq!(data.policy.access, Access::Ro);
    assert_eq!(data.policy.approval, ApprovalPolicy::default());
    let out = map.zone("out").unwrap();
    assert_eq!(out.backing, root.join("out"));
    assert_eq!(
        out.policy,
        ZonePolicy {
            access: Access::Rw,
            approval: ApprovalPolicy {
                write: Approval::Ask,
                delete: Approval::Blocked
            },
            suffixes: Some(vec![".md".into()]),
            max_file_bytes: Some(10),
            protect: vec![".git".into()],
            hidden: vec![],
        }
    );
    assert_eq!(map.source, Some(real(&f.proj()).join("project.yaml")));
}

#[test]
fn mode_defaults_to_ro_and_other_top_level_keys_are_ignored() {
    let f = Fixture::new();
    let t = f
        .load("model: x\ntools: [a, b]\ninstructions: |\n  hi\nsandbox:\n  zones:\n    data: {}\n    logs:\n")
        .unwrap();
    assert_eq!(t.zone("data").unwrap().policy.access, Access::Ro);
    assert_eq!(t.zone("logs").unwrap().policy.access, Access::Ro);
}

#[test]
fn root_and_numeric_names() {
    let f = Fixture::new();
    let t = f
        .load("sandbox:\n  root: ../shared/box\n  zones:\n    2024: { path: y/2024 }\n")
        .unwrap();
    let z = t.zone("2024").unwrap();
    assert_eq!(
        z.backing,
        real(f.tmp.path()).join("shared/box/y/2024"),
        "root is relative to the config dir"
    );
}

#[test]
fn a_list_name_matching_its_key_is_fine_a_different_one_is_not() {
    let f = Fixture::new();
    f.load("sandbox:\n  zones:\n    a: { name: a }\n").unwrap();
    let e = f.load_err("sandbox:\n  zones:\n    a:\n      name: b\n");
    assert_err(&e, "project.yaml", 4, "sandbox.zones.a.name", "differs");
}

#[test]
fn worker_front_matter_and_plain_yaml() {
    let f = Fixture::new();
    let fm = f.worker(
        "fmt.worker",
        "---\nname: formatter\ndescription: d\nsandbox:\n  zones:\n    - name: data\n      mode: rw\n      approval: { write: ask }\n---\n\n# Body\n\nnot: [valid yaml\n",
    );
    assert_eq!(fm.name.as_deref(), Some("formatter"));
    let zones = fm.zones.as_ref().unwrap();
    assert_eq!(zones.len(), 1);
    assert_eq!(zones[0].name, "data");
    assert_eq!(zones[0].mode, Some(Access::Rw));
    assert_eq!(zones[0].write, Some(Approval::Ask));
    assert_eq!(zones[0].delete, None);
    assert_eq!(
        zones[0].line,
        Some(6),
        "front matter lines count from the file"
    );
    assert_eq!(zones[0].mode_line, Some(7));

    let plain = f.worker(
        "plain.worker",
        "name: p\nsandbox:\n  zones:\n    data: { mode: ro }\n    out:\n",
    );
    let zones = plain.zones.as_ref().unwrap();
    assert_eq!(zones.len(), 2);
    assert_eq!(zones[0].mode, Some(Access::Ro));
    assert_eq!(zones[1].name, "out");
    assert_eq!(zones[1].mode, None);

    let crlf = f.worker(
        "crlf.worker",
        "---\r\nsandbox:\r\n  zones: [{ name: a }]\r\n---\r\nbody\r\n",
    );
    assert_eq!(crlf.zones.unwrap()[0].name, "a");
    assert_eq!(crlf.name, None);
    assert_eq!(crlf.file, f.proj().join("crlf.worker"));
}

#[test]
fn worker_without_sandbox_has_no_zones() {
    let f = Fixture::new();
    let w = f.worker("pure.worker", "---\nname: pure\n---\nJust think.\n");
    assert_eq!(w.zones, None);
    let w = f.worker("empty.worker", "");
    assert_eq!(w.zones, None);
    assert_eq!(w.display_name(), "empty");
    let w = f.worker(
        "md.worker",
        "Just a prompt, no front matter.\n\nSecond paragraph.\n",
    );
    assert_eq!(w.zones, None);
    let e = f.worker_err("list.worker", "- a\n- b\n");
    assert_err(&e, "list.worker", 1, "", "expected a mapping");
    let w = f.worker("nozones.worker", "sandbox: {}\n");
    assert_eq!(w.zones, Some(vec![]));
}

#[test]
fn front_matter_errors_have_file_lines() {
    let f = Fixture::new();
    let e = f.worker_err(
        "w.worker",
        "---\nname: w\nsandbox:\n  zones:\n    - name: data\n      mode: rx\n---\nbody\n",
    );
    assert_err(
        &e,
        "w.worker",
        6,
        "sandbox.zones.data.mode",
        "expected 'ro' or 'rw', got 'rx'",
    );
    let e = f.worker_err("s.worker", "---\nname: [unclosed\n---\n");
    assert_eq!(e.line, Some(2), "{e}");
    assert!(
        e.to_string()
            .starts_with(&format!("{}:2: ", f.proj().join("s.worker").display()))
    );
}

#[test]
fn embedded_default_and_project_file_pickup() {
    let f = Fixture::new();
    let t = load_project(None, &f.proj(), &f.opts()).unwrap();
    assert_eq!(t.source, None);
    assert_eq!(t.mode, SandboxMode::Sandboxed);
    let names: Vec<_> = t.zones.iter().map(|z| z.name.as_str()).collect();
    assert_eq!(names, ["cache", "workspace"]);
    for z in &t.zones {
        assert_eq!(z.policy.access, Access::Rw);
        assert_eq!(z.backing, real(&f.proj()).join(".sandbox").join(&z.name));
    }

    f.write(
        PROJECT_FILE_NAME,
        "sandbox:\n  zones:\n    only: { mode: rw }\n",
    );
    let t = load_project(None, &f.proj(), &f.opts()).unwrap();
    assert_eq!(t.zones.len(), 1);
    assert_eq!(t.source, Some(real(&f.proj()).join(PROJECT_FILE_NAME)));

    // An explicit relative path is taken from cwd.
    f.write("sub/p.yaml", "sandbox:\n  zones:\n    x: {}\n");
    let t = load_project(Some(Path::new("sub/p.yaml")), &f.proj(), &f.opts()).unwrap();
    assert_eq!(
        t.zone("x").unwrap().backing,
        real(&f.proj()).join("sub/.sandbox/x")
    );
}

#[test]
fn a_project_file_without_sandbox_gets_the_default_zones_beside_it() {
    let f = Fixture::new();
    let t = f.load("model: m\n").unwrap();
    let names: Vec<_> = t.zones.iter().map(|z| z.name.as_str()).collect();
    assert_eq!(names, ["cache", "workspace"]);
    assert_eq!(t.zones[0].backing, real(&f.proj()).join(".sandbox/cache"));
    assert!(t.source.is_some());
    let t = f.load("sandbox:\n  mode: sandboxed\n").unwrap();
    assert!(
        t.zones.is_empty(),
        "a sandbox section lists exactly its zones"
    );
}

#[test]
fn missing_file_is_an_error_naming_it() {
    let f = Fixture::new();
    let e = load_project(Some(Path::new("nope.yaml")), &f.proj(), &f.opts()).unwrap_err();
    assert!(e.to_string().starts_with("nope.yaml: cannot read"), "{e}");
    let e = load_worker(&f.proj().join("nope.worker")).unwrap_err();
    assert!(e.to_string().contains("nope.worker: cannot read"), "{e}");
}

// ------------------------------------------------------------- validation

#[test]
fn display_format() {
    let e = ConfigError::new(
        Some("project.yaml".into()),
        Some(7),
        "sandbox.zones.data.mode",
        "expected 'ro' or 'rw', got 'rx'",
    );
    assert_eq!(
        e.to_string(),
        "project.yaml:7: sandbox.zones.data.mode: expected 'ro' or 'rw', got 'rx'"
    );
    let e = ConfigError::new(Some("p.yaml".into()), None, "", "multi\nline\n msg");
    assert_eq!(e.to_string(), "p.yaml: multi line msg");
}

#[test]
fn bad_values() {
    let f = Fixture::new();
    let cases: &[(&str, usize, &str, &str)] = &[
        (
            "sandbox:\n  zones:\n    data:\n      mode: rx\n",
            4,
            "sandbox.zones.data.mode",
            "expected 'ro' or 'rw', got 'rx'",
        ),
        (
            "sandbox:\n  mode: jail\n",
            2,
            "sandbox.mode",
            "expected 'sandboxed' or 'direct', got 'jail'",
        ),
        (
            "sandbox:\n  zones:\n    d:\n      approval: { write: maybe }\n",
            4,
            "sandbox.zones.d.approval.write",
            "expected 'preApproved', 'ask' or 'blocked', got 'maybe'",
        ),
        (
            "sandbox:\n  zones:\n    d:\n      max_file_bytes: -1\n",
            4,
            "sandbox.zones.d.max_file_bytes",
            "expected a number of bytes",
        ),
        (
            "sandbox:\n  zones:\n    d:\n      max_file_bytes: 10MB\n",
            4,
            "sandbox.zones.d.max_file_bytes",
            "expected a whole number of bytes, got a string",
        ),
        (
            "sandbox:\n  zones:\n    d:\n      suffixes: .md\n",
            4,
            "sandbox.zones.d.suffixes",
            "expected a list of strings",
        ),
        (
            "sandbox:\n  zones:\n    d:\n      suffixes:\n        - .md\n        - a/b\n",
            6,
            "sandbox.zones.d.suffixes[1]",
            "contain no '/'",
        ),
        (
            "sandbox:\n  zones:\n    d:\n      protect: [ok, \"a{b,c\"]\n",
            4,
            "sandbox.zones.d.protect[1]",
            "bad protect pattern 'a{b,c'",
        ),
        (
            "sandbox:\n  zones:\n    d:\n      protect:\n        - .git\n        - '!.git'\n",
            6,
            "sandbox.zones.d.protect[1]",
            "negated patterns are not allowed",
        ),
        (
            "sandbox:\n  zones:\n    d:\n      protect: ['#x']\n",
            4,
            "sandbox.zones.d.protect[0]",
            "must name something",
        ),
        (
            "sandbox:\n  zones:\n    d:\n      approval: ask\n",
            4,
            "sandbox.zones.d.approval",
            "expected a mapping, got a string",
        ),
        (
            "sandbox:\n  zones: 3\n",
            2,
            "sandbox.zones",
            "expected a mapping of zone names",
        ),
        ("sandbox:\n  root: ''\n", 2, "sandbox.root", "non-empty"),
        (
            "sandbox:\n  mode: direct\n  root: x\n",
            3,
            "sandbox.root",
            "only applies in sandboxed mode",
        ),
    ];
    for (text, line, field, msg) in cases {
        let e = f.load_err(text);
        assert_err(&e, "project.yaml", *line, field, msg);
    }
}

#[test]
fn unknown_keys_inside_sandbox_are_refused() {
    let f = Fixture::new();
    let cases: &[(&str, usize, &str)] = &[
        ("sandbox:\n  zones: {}\n  extra: 1\n", 3, "sandbox.extra"),
        (
            "sandbox:\n  zones:\n    d:\n      path: x\n      colour: red\n",
            5,
            "sandbox.zones.d.colour",
        ),
        (
            "sandbox:\n  zones:\n    - name: d\n      writable: true\n",
            4,
            "sandbox.zones[0].writable",
        ),
        (
            "sandbox:\n  zones:\n    d:\n      approval: { write: ask, read: ask }\n",
            4,
            "sandbox.zones.d.approval.read",
        ),
    ];
    for (text, line, field) in cases {
        let e = f.load_err(text);
        assert_err(&e, "project.yaml", *line, field, "unknown key");
    }
    let e = f.worker_err(
        "w.worker",
        "sandbox:\n  zones:\n    - name: d\n      path: ./x\n",
    );
    assert_err(
        &e,
        "w.worker",
        4,
        "sandbox.zones[0].path",
        "unknown key 'path'",
    );
    let e = f.worker_err("w.worker", "---\nsandbox:\n  mode: direct\n---\n");
    assert_err(&e, "w.worker", 3, "sandbox.mode", "unknown key 'mode'");
}

#[test]
fn bad_zone_names() {
    let f = Fixture::new();
    let cases: &[(&str, usize, &str, &str)] = &[
        (
            "sandbox:\n  zones:\n    '.': {}\n",
            3,
            "sandbox.zones",
            "'.' is not allowed",
        ),
        (
            "sandbox:\n  zones:\n    '..': {}\n",
            3,
            "sandbox.zones",
            "'..' is not allowed",
        ),
        (
            "sandbox:\n  zones:\n    a/b: {}\n",
            3,
            "sandbox.zones",
            "only letters",
        ),
        (
            "sandbox:\n  zones:\n    '': {}\n",
            3,
            "sandbox.zones",
            "empty",
        ),
        (
            "sandbox:\n  zones:\n    'a b': {}\n",
            3,
            "sandbox.zones",
            "only letters",
        ),
        (
            "sandbox:\n  zones:\n    - name: a/b\n",
            3,
            "sandbox.zones[0].name",
            "only letters",
        ),
        (
            "sandbox:\n  zones:\n    - name: ''\n",
            3,
            "sandbox.zones[0].name",
            "empty",
        ),
        (
            "sandbox:\n  zones:\n    - name: ok\n    - mode: rw\n",
            4,
            "sandbox.zones[1].name",
            "needs a 'name'",
        ),
        (
            "sandbox:\n  zones:\n    - name: [x]\n",
            3,
            "sandbox.zones[0].name",
            "expected a string, got a list",
        ),
    ];
    for (text, line, field, msg) in cases {
        let e = f.load_err(text);
        assert_err(&e, "project.yaml", *line, field, msg);
    }
    let e = f.worker_err("w.worker", "sandbox:\n  zones:\n    - name: ..\n");
    assert_err(&e, "w.worker", 3, "sandbox.zones[0].name", "not allowed");
}

#[test]
fn duplicate_zones() {
    let f = Fixture::new();
    let e = f.load_err("sandbox:\n  zones:\n    a: {}\n    b: {}\n    a: { mode: rw }\n");
    assert_err(
        &e,
        "project.yaml",
        5,
        "sandbox.zones.a",
        "duplicate zone 'a' (first defined on line 3)",
    );
    let e = f.load_err("sandbox:\n  zones:\n    - name: a\n    - name: a\n");
    assert_err(
        &e,
        "project.yaml",
        4,
        "sandbox.zones.a",
        "duplicate zone 'a'",
    );
    let e = f.worker_err(
        "w.worker",
        "sandbox:\n  zones:\n    - name: a\n    - name: a\n",
    );
    assert_err(&e, "w.worker", 4, "sandbox.zones.a", "duplicate zone");
    let e = f.load_err("sandbox:\n  zones:\n    a:\n      mode: ro\n      mode: rw\n");
    assert_err(
        &e,
        "project.yaml",
        5,
        "sandbox.zones.a.mode",
        "duplicate key 'mode'",
    );
}

#[test]
fn yaml_syntax_errors_have_file_and_line() {
    let f = Fixture::new();
    let e = f.load_err("sandbox:\n  zones:\n    a: [1,\n");
    assert!(e.line.is_some(), "{e}");
    assert!(e.to_string().contains("project.yaml:"), "{e}");
    assert!(!e.to_string().contains('\n'));
    let e = f.load_err("- just\n- a list\n");
    assert_err(&e, "project.yaml", 1, "", "expected a mapping, got a list");
}

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

#[test]
fn resolve_handles_missing_tails_and_dotdot() {
    let f = Fixture::new();
    let base = real(&f.proj());
    assert_eq!(resolve(&f.proj().join("a/b/../c/./d")), base.join("a/c/d"));
    std::os::unix::fs::symlink(f.home(), f.proj().join("h")).unwrap();
    assert_eq!(resolve(&f.proj().join("h/x")), real(&f.home()).join("x"));
}

// ------------------------------------------------------------- derivation

fn zone(name: &str, access: Access) -> Zone {
    Zone {
        name: name.into(),
        backing: PathBuf::from("/b").join(name),
        policy: ZonePolicy {
            access,
            approval: ApprovalPolicy::default(),
            suffixes: None,
            max_file_bytes: None,
            protect: vec![],
            hidden: vec![],
        },
    }
}

fn table(zones: Vec<Zone>) -> ZoneTable {
    ZoneTable {
        mode: SandboxMode::Sandboxed,
        zones,
        source: Some("/p/project.yaml".into()),
    }
}

fn worker(text: &str) -> WorkerDecl {
    parse_worker(text, Path::new("dir/child.worker")).unwrap()
}

#[test]
fn derive_keeps_only_declared_zones_with_parent_backing() {
    let parent = table(vec![
        zone("data", Access::Rw),
        zone("ws", Access::Rw),
        zone("cache", Access::Rw),
    ]);
    let t = derive(
        &parent,
        &worker("sandbox:\n  zones:\n    - name: data\n      mode: rw\n"),
    )
    .unwrap();
    assert_eq!(t.zones, vec![zone("data", Access::Rw)]);
    assert_eq!(t.mode, parent.mode);
    assert_eq!(t.source, parent.source);
}

#[test]
fn derive_without_sandbox_is_empty() {
    let parent = table(vec![zone("data", Access::Rw)]);
    assert!(
        derive(&parent, &worker("name: x\n"))
            .unwrap()
            .zones
            .is_empty()
    );
    assert!(
        derive(&parent, &worker("sandbox:\n  zones: []\n"))
            .unwrap()
            .zones
            .is_empty()
    );
}

#[test]
fn derive_missing_zone_is_an_error() {
    let parent = table(vec![zone("ws", Access::Rw)]);
    let e = derive(
        &parent,
        &worker("name: x\nsandbox:\n  zones:\n    - name: data\n"),
    )
    .unwrap_err();
    assert_err(
        &e,
        "child.worker",
        4,
        "sandbox.zones.data",
        "worker 'x' needs zone 'data', which its parent does not have",
    );
    // No name: the file stem.
    let e = derive(&parent, &worker("sandbox:\n  zones:\n    data: {}\n")).unwrap_err();
    assert!(
        e.message.starts_with("worker 'child' needs zone 'data'"),
        "{e}"
    );
}

#[test]
fn derive_mode() {
    let parent = table(vec![zone("data", Access::Ro), zone("ws", Access::Rw)]);
    let e = derive(
        &parent,
        &worker("name: x\nsandbox:\n  zones:\n    - name: data\n      mode: rw\n"),
    )
    .unwrap_err();
    assert_err(
        &e,
        "child.worker",
        5,
        "sandbox.zones.data.mode",
        "worker 'x' requests 'rw' for zone 'data' but parent only has 'ro'",
    );
    let t = derive(
        &parent,
        &worker("sandbox:\n  zones:\n    data: {}\n    ws: {}\n"),
    )
    .unwrap();
    assert_eq!(
        t.zone("data").unwrap().policy.access,
        Access::Ro,
        "omitted: parent's"
    );
    assert_eq!(
        t.zone("ws").unwrap().policy.access,
        Access::Rw,
        "omitted: parent's"
    );
    let t = derive(
        &parent,
        &worker("sandbox:\n  zones:\n    ws: { mode: ro }\n    data: { mode: ro }\n"),
    )
    .unwrap();
    assert_eq!(t.zone("ws").unwrap().policy.access, Access::Ro);
    assert_eq!(t.zone("data").unwrap().policy.access, Access::Ro);
}

#[test]
fn derive_approval_is_the_stricter() {
    use Approval::*;
    let all = [PreApproved, Ask, Blocked];
    for p in all {
        for w in all {
            let mut z = zone("d", Access::Rw);
            z.policy.approval = ApprovalPolicy {
                write: p,
                delete: p,
            };
            let parent = table(vec![z]);
            let text = format!("sandbox:\n  zones:\n    d: {{ approval: {{ write: {w} }} }}\n");
            let t = derive(&parent, &worker(&text)).unwrap();
            let got = t.zones[0].policy.approval;
            assert_eq!(got.write, p.max(w), "{p} vs {w}");
            assert_eq!(got.delete, p, "delete not given: the parent's");
        }
    }
    assert!(PreApproved < Ask && Ask < Blocked);
    assert!(Access::Ro < Access::Rw);
}

#[test]
fn derive_suffixes_size_and_protect() {
    let mut z = zone("d", Access::Rw);
    z.policy.suffixes = Some(vec![".md".into(), ".gz".into(), ".txt".into()]);
    z.policy.max_file_bytes = Some(100);
    z.policy.protect = vec![".git".into()];
    let parent = table(vec![z, zone("free", Access::Rw)]);
    let t = derive(
        &parent,
        &worker("sandbox:\n  zones:\n    d:\n      suffixes: [.tar.gz, .md, .pdf]\n      max_file_bytes: 1000\n      protect: [.git, /out]\n    free:\n      suffixes: [.rs]\n      max_file_bytes: 5\n      protect: [target]\n"),
    )
    .unwrap();
    let d = &t.zone("d").unwrap().policy;
    assert_eq!(d.suffixes, Some(vec![".md".into(), ".tar.gz".into()]));
    assert_eq!(d.max_file_bytes, Some(100));
    assert_eq!(d.protect, vec![".git".to_string(), "/out".into()]);
    let free = &t.zone("free").unwrap().policy;
    assert_eq!(free.suffixes, Some(vec![".rs".into()]), "whichever exists");
    assert_eq!(free.max_file_bytes, Some(5));
    assert_eq!(free.protect, vec!["target".to_string()]);
    // Parent-only values survive a bare declaration.
    let t = derive(&parent, &worker("sandbox:\n  zones:\n    d: {}\n")).unwrap();
    assert_eq!(t.zones[0].policy, parent.zones[0].policy);
    // Disjoint suffixes leave no names (directories stay visible).
    let t = derive(
        &parent,
        &worker("sandbox:\n  zones:\n    d: { suffixes: [.pdf] }\n"),
    )
    .unwrap();
    assert_eq!(t.zones[0].policy.suffixes, Some(vec![]));
}

#[test]
fn derive_chains_of_three() {
    let f = Fixture::new();
    let project = f
        .load("sandbox:\n  zones:\n    data: { mode: ro }\n    ws:\n      mode: rw\n      suffixes: [.md, .txt, .csv]\n    cache: { mode: rw }\n")
        .unwrap();
    let parent = f.worker(
        "parent.worker",
        "---\nname: parent\nsandbox:\n  zones:\n    - name: data\n    - name: ws\n      mode: rw\n      approval: { delete: ask }\n---\n",
    );
    let child = f.worker(
        "child.worker",
        "name: child\nsandbox:\n  zones:\n    ws:\n      suffixes: [.md, .txt]\n      max_file_bytes: 50\n",
    );
    let grandchild = f.worker(
        "grandchild.worker",
        "name: grandchild\nsandbox:\n  zones:\n    ws:\n      mode: ro\n      approval: { write: blocked }\n      suffixes: [.md]\n      max_file_bytes: 500\n",
    );
    let t = [&parent, &child, &grandchild]
        .into_iter()
        .try_fold(project.clone(), |t, w| derive(&t, w))
        .unwrap();
    assert_eq!(t.zones.len(), 1);
    let ws = &t.zones[0];
    assert_eq!(ws.backing, project.zone("ws").unwrap().backing);
    assert_eq!(ws.policy.access, Access::Ro);
    assert_eq!(ws.policy.approval.write, Approval::Blocked);
    assert_eq!(ws.policy.approval.delete, Approval::Ask);
    assert_eq!(ws.policy.suffixes, Some(vec![".md".into()]));
    assert_eq!(ws.policy.max_file_bytes, Some(50));

    // A grandchild can't get back what the child dropped ...
    let greedy = f.worker("greedy.worker", "sandbox:\n  zones:\n    - name: data\n");
    let after_child = derive(&derive(&project, &parent).unwrap(), &child).unwrap();
    let e = derive(&after_child, &greedy).unwrap_err();
    assert!(
        e.message.contains("worker 'greedy' needs zone 'data'"),
        "{e}"
    );
    // ... nor rw once an ancestor made it ro.
    let upgrade = f.worker(
        "up.worker",
        "sandbox:\n  zones:\n    - name: ws\n      mode: rw\n",
    );
    let ro = derive(&after_child, &grandchild).unwrap();
    let e = derive(&ro, &upgrade).unwrap_err();
    assert_err(
        &e,
        "up.worker",
        4,
        "sandbox.zones.ws.mode",
        "requests 'rw' for zone 'ws' but parent only has 'ro'",
    );
}

// ------------------------------------------------------------- backing

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

// ---------------------------------------------------------- example files

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("config")
}

#[test]
fn example_files_parse() {
    let f = Fixture::new();
    let dir = examples();
    let sandboxed = load_project(Some(&dir.join("sandboxed.yaml")), &dir, &f.opts()).unwrap();
    assert_eq!(sandboxed.mode, SandboxMode::Sandboxed);
    assert_eq!(sandboxed.zone("data").unwrap().policy.access, Access::Ro);
    let fin = &sandboxed.zone("final").unwrap().policy;
    assert_eq!(fin.approval.write, Approval::Ask);
    assert_eq!(fin.approval.delete, Approval::Blocked);

    // direct.yaml's dirs must exist: copy it beside fresh ones.
    fs::copy(dir.join("direct.yaml"), f.proj().join("direct.yaml")).unwrap();
    f.mkdir("data");
    f.mkdir("workspace");
    let direct = load_project(Some(&f.proj().join("direct.yaml")), &f.proj(), &f.opts()).unwrap();
    assert_eq!(direct.mode, SandboxMode::Direct);
    assert_eq!(
        direct.zone("data").unwrap().backing,
        real(&f.proj().join("data"))
    );
    prepare_backing(&direct).unwrap();

    let formatter = load_worker(&dir.join("formatter.worker")).unwrap();
    assert_eq!(formatter.name.as_deref(), Some("formatter"));
    let child = load_worker(&dir.join("child.worker")).unwrap();
    assert_eq!(child.name.as_deref(), Some("summarizer"));
    for project in [&sandboxed, &direct] {
        let t = derive(&derive(project, &formatter).unwrap(), &child).unwrap();
        let ws = &t.zone("workspace").unwrap().policy;
        assert_eq!(ws.access, Access::Rw);
        assert_eq!(ws.approval.write, Approval::Ask);
        assert_eq!(ws.approval.delete, Approval::Blocked);
        assert_eq!(ws.suffixes, Some(vec![".md".into(), ".txt".into()]));
        assert_eq!(ws.max_file_bytes, Some(1_000_000));
        assert!(t.zone("data").is_none());
    }
}

// ------------------------------------------------------------------ garbage

/// xorshift: deterministic, no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

#[test]
fn garbage_never_panics() {
    let f = Fixture::new();
    let dir = examples();
    let mut seeds: Vec<Vec<u8>> = [
        "sandboxed.yaml",
        "direct.yaml",
        "formatter.worker",
        "child.worker",
    ]
    .iter()
    .map(|n| fs::read(dir.join(n)).unwrap())
    .collect();
    seeds.push(DEFAULT_CONFIG.as_bytes().to_vec());
    seeds.push(b"a: &a [*a]\nb: !!binary ???\nc: {? [x] : y}\n- - - \n".to_vec());
    seeds.push(b"sandbox:\n  zones:\n    x: &z {mode: rw}\n    y: *z\n    <<: {q: 1}\n".to_vec());
    let tokens: &[&[u8]] = &[
        b"\n",
        b":",
        b" ",
        b"-",
        b"---\n",
        b"[",
        b"]",
        b"{",
        b"}",
        b"&a",
        b"*a",
        b"!!str",
        b"'",
        b"\"",
        b"|",
        b">",
        b"#",
        b"?",
        b"\t",
        b"\xff",
        b"\0",
        b"sandbox:",
        b"zones:",
        b"mode: rw",
        b"name: ",
        b"..",
        b"/",
        b"99999999999999999999999999999",
        b"-1",
        b".inf",
        b"<<: *a",
        b"%YAML 1.2\n",
        b"\r\n",
        b"\xef\xbb\xbf",
    ];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let opts = f.opts();
    for round in 0..600 {
        let mut bytes = seeds[rng.below(seeds.len())].clone();
        for _ in 0..=rng.below(8) {
            let at = rng.below(bytes.len() + 1);
            match rng.below(5) {
                0 => {
                    let t = tokens[rng.below(tokens.len())];
                    bytes.splice(at..at, t.iter().copied());
                }
                1 if at < bytes.len() => bytes[at] = rng.next() as u8,
                2 => bytes.truncate(at),
                3 if at < bytes.len() => {
                    let end = (at + rng.below(40)).min(bytes.len());
                    let chunk = bytes[at..end].to_vec();
                    bytes.splice(at..at, chunk);
                }
                _ => {
                    let end = (at + rng.below(20)).min(bytes.len());
                    bytes.drain(at..end);
                }
            }
        }
        if round % 50 == 0 {
            bytes = (0..rng.below(300)).map(|_| rng.next() as u8).collect();
        }
        let text = String::from_utf8_lossy(&bytes);
        let project = parse_project(&text, Some(Path::new("g.yaml")), &f.proj(), None, &opts);
        if let Err(e) = &project {
            assert!(!e.to_string().contains('\n'));
        }
        let worker = parse_worker(&text, Path::new("g.worker"));
        if let (Ok(table), Ok(w)) = (&project, &worker) {
            let _ = derive(table, w);
        }
        // The file path too (UTF-8 check, size cap).
        let p = f.write("g.bin", "");
        fs::write(&p, &bytes).unwrap();
        let _ = load_worker(&p);
    }
}

#[test]
fn hostile_yaml_is_refused_not_fatal() {
    let f = Fixture::new();
    let deep = "[".repeat(100_000);
    assert!(f.load(&deep).is_err());
    let deep_map = "a:\n".to_owned()
        + &(1..200)
            .map(|i| format!("{}b:\n", " ".repeat(i)))
            .collect::<String>();
    // 200 levels of mapping: past the parser's depth cap, an error that
    // says so (not a stack overflow, not a table).
    let e = f.load(&deep_map).unwrap_err().to_string();
    assert!(e.contains("invalid YAML") && e.contains("Depth"), "{e}");
    let mut laughs = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..12 {
        let prev = i - 1;
        laughs.push_str(&format!("a{i}: &a{i} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"));
    }
    assert!(f.load(&laughs).is_err());
    assert!(parse_worker(&laughs, Path::new("l.worker")).is_err());
}

#[test]
fn a_symlinked_config_is_anchored_where_the_link_is() {
    let f = Fixture::new();
    let target = f.tmp.path().join("elsewhere/p.yaml");
    fs::create_dir_all(target.parent().unwrap()).unwrap();
    fs::write(&target, "sandbox:\n  zones:\n    a: {}\n").unwrap();
    std::os::unix::fs::symlink(&target, f.proj().join("link.yaml")).unwrap();
    let t = load_project(Some(Path::new("link.yaml")), &f.proj(), &f.opts()).unwrap();
    assert_eq!(t.zones[0].backing, real(&f.proj()).join(".sandbox/a"));
    assert_eq!(t.source, Some(real(&f.proj()).join("link.yaml")));
}

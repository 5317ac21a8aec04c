//! Parsing: both zone forms (map and list), both worker forms (front
//! matter and plain YAML), the embedded default and project-file pickup,
//! a symlinked config, and the shipped example files.

use super::*;

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
                delete: Approval::Blocked,
                read: Approval::PreApproved
            },
            suffixes: Some(vec![".md".into()]),
            max_file_bytes: Some(10),
            protect: vec![".git".into()],
            hidden: vec![],
            hide: vec![],
            ask_read: vec![],
            staged: false,
        }
    );
    assert_eq!(map.source, Some(real(&f.proj()).join("project.yaml")));
}

#[test]
fn approval_defaults_no_block_is_preapproved_a_class_left_out_asks() {
    use Approval::*;
    let f = Fixture::new();
    let t = f
        .load("sandbox:\n  zones:\n    free: { mode: rw }\n    w: { mode: rw, approval: { write: ask } }\n    d: { mode: rw, approval: { delete: blocked } }\n    both: { mode: rw, approval: { write: preApproved, delete: preApproved } }\n    empty: { mode: rw, approval: {} }\n    bare:\n      mode: rw\n      approval:\n")
        .unwrap();
    let got = |z: &str| {
        let a = t.zone(z).unwrap().policy.approval;
        (a.write, a.delete)
    };
    assert_eq!(got("free"), (PreApproved, PreApproved), "no block");
    assert_eq!(got("w"), (Ask, Ask), "{{write: ask}} gates deletes too");
    assert_eq!(
        got("d"),
        (Ask, Blocked),
        "{{delete: blocked}} makes writes ask"
    );
    assert_eq!(got("both"), (PreApproved, PreApproved));
    assert_eq!(got("empty"), (Ask, Ask));
    assert_eq!(got("bare"), (Ask, Ask), "an empty `approval:` is a block");
    // The embedded default has no blocks: its zones are preApproved.
    let t = load_project(None, &f.proj(), &f.opts()).unwrap();
    for z in &t.zones {
        assert_eq!(z.policy.approval, ApprovalPolicy::default(), "{}", z.name);
    }
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
    assert_eq!(
        zones[0].approval,
        Some(ApprovalBlock {
            write: Some(Approval::Ask),
            delete: None,
            read: None
        }),
        "as written: the class left out stays unsaid until derivation"
    );
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
fn a_project_file_must_have_a_sandbox_section() {
    let f = Fixture::new();
    // A typo, an empty file, other sections only: refused, never the
    // embedded default's rw zones.
    let e = f.load_err("model: m\nsandbx:\n  zones:\n    a: { mode: rw }\n");
    assert_err(&e, "project.yaml", 2, "sandbx", "did you mean `sandbox:`?");
    for near in ["Sandbox", "sandboxes", "sanbdox", "snadbox"] {
        let e = f.load_err(&format!("{near}:\n  zones: {{}}\n"));
        assert_err(&e, "project.yaml", 1, near, "did you mean `sandbox:`?");
    }
    let e = f.load_err("");
    assert_eq!((e.line, e.field.as_str()), (None, ""), "{e}");
    assert!(
        e.to_string().starts_with(&format!(
            "{}: the file is empty",
            f.proj().join("project.yaml").display()
        )),
        "{e}"
    );
    for text in [
        "model: m\n",
        "# only a comment\n",
        "sandwich: 1\nsandbag: 2\nzoning: 3\n",
    ] {
        let e = f.load_err(text);
        assert!(e.file.is_some(), "{e}");
        assert!(
            e.message.contains("must have a `sandbox:` section"),
            "{text:?}: {e}"
        );
    }
    // A near miss points at the nearest key.
    let e = f.load_err("sandbag: 1\nsandbo: 2\n");
    assert_err(&e, "project.yaml", 2, "sandbo", "did you mean");
    // `zones:` at the top: not indented under `sandbox:`.
    let e = f.load_err("sandbox_mode: x\nzones:\n  a: {}\n");
    assert_err(&e, "project.yaml", 2, "zones", "belongs under `sandbox:`");
    // `sandbox:` with nothing under it.
    let e = f.load_err("model: m\nsandbox:\n");
    assert_err(&e, "project.yaml", 2, "sandbox", "the section is empty");
    // A found ./zonemount.yaml is held to the same rule.
    f.write(PROJECT_FILE_NAME, "sandbx: {}\n");
    let e = load_project(None, &f.proj(), &f.opts()).unwrap_err();
    assert!(
        e.to_string()
            .contains("zonemount.yaml:1: sandbx: did you mean"),
        "{e}"
    );
    // An explicit empty section is an empty root, as written.
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

#[test]
fn staged_needs_a_rw_zone_and_a_boolean() {
    let f = Fixture::new();
    let t = f
        .load("sandbox:\n  zones:\n    a: { mode: rw, staged: true }\n    b: { mode: rw, staged: false }\n    c: { mode: rw }\n")
        .unwrap();
    let staged = |z: &str| t.zone(z).unwrap().policy.staged;
    assert_eq!(
        (staged("a"), staged("b"), staged("c")),
        (true, false, false)
    );
    let e = f.load_err("sandbox:\n  zones:\n    a:\n      staged: true\n");
    assert_err(
        &e,
        "project.yaml",
        4,
        "sandbox.zones.a.staged",
        "'staged: true' needs a writable zone ('mode: rw')",
    );
    let e = f.load_err("sandbox:\n  zones:\n    a:\n      mode: rw\n      staged: yes please\n");
    assert_err(
        &e,
        "project.yaml",
        5,
        "sandbox.zones.a.staged",
        "expected true or false, got a string",
    );
}

#[test]
fn hide_patterns_are_checked_like_protect() {
    let f = Fixture::new();
    let t = f
        .load("sandbox:\n  zones:\n    a: { mode: rw, hide: [\".env\", \"**/*.pem\", \"/config/creds.json\"] }\n")
        .unwrap();
    assert_eq!(
        t.zone("a").unwrap().policy.hide,
        [".env", "**/*.pem", "/config/creds.json"]
    );
    let e = f
        .load_err("sandbox:\n  zones:\n    a:\n      hide:\n        - .env\n        - \"!.env\"\n");
    assert_err(
        &e,
        "project.yaml",
        6,
        "sandbox.zones.a.hide[1]",
        "bad hide pattern '!.env': negated patterns are not allowed; hide can only add",
    );
    let e = f.load_err("sandbox:\n  zones:\n    a:\n      hide: .env\n");
    assert_err(
        &e,
        "project.yaml",
        4,
        "sandbox.zones.a.hide",
        "expected a list of strings",
    );
}

/// `sandbox.max_checkpoints` is kept on the table (absent: None), and a
/// worker's derived table has its parent's.
#[test]
fn max_checkpoints_is_read() {
    let f = Fixture::new();
    let t = f
        .load("sandbox:\n  max_checkpoints: 4\n  zones: {}\n")
        .unwrap();
    assert_eq!(t.max_checkpoints, Some(4));
    let t = f.load("sandbox:\n  zones: {}\n").unwrap();
    assert_eq!(t.max_checkpoints, None);
}

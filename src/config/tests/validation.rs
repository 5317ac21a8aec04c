//! Validation errors of values, keys and zone names, each checked for
//! file, line and field, and their one-line display.

use super::*;

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
            "sandbox:\n  max_checkpoints: 0\n",
            2,
            "sandbox.max_checkpoints",
            "a whole number from 1 to 65535 (past it the oldest are merged), got 0",
        ),
        (
            "sandbox:\n  zones: {}\n  max_checkpoints: 65536\n",
            3,
            "sandbox.max_checkpoints",
            "got 65536",
        ),
        (
            "sandbox:\n  max_checkpoints: many\n",
            2,
            "sandbox.max_checkpoints",
            "got a string",
        ),
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
            "sandbox:\n  zones:\n    d:\n      approval: { write: ask, list: ask }\n",
            4,
            "sandbox.zones.d.approval.list",
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
    // Top level: other sections are the agent runtime's, but `sandbox:`
    // (and a worker's `name:`) twice is one of them silently dropped.
    let e = f.load_err("sandbox:\n  zones:\n    a: {}\nmodel: x\nsandbox:\n  zones: {}\n");
    assert_err(
        &e,
        "project.yaml",
        5,
        "sandbox",
        "duplicate key 'sandbox' (first on line 1)",
    );
    let e = f.worker_err("w.worker", "sandbox:\n  zones: []\nsandbox:\n  zones: []\n");
    assert_err(&e, "w.worker", 3, "sandbox", "duplicate key 'sandbox'");
    let e = f.worker_err("w.worker", "name: a\nname: b\n");
    assert_err(&e, "w.worker", 2, "name", "duplicate key 'name'");
    let e = f.load_err("sandbox:\n  zones:\n    a:\n      mode: ro\n      mode: rw\n");
    assert_err(
        &e,
        "project.yaml",
        5,
        "sandbox.zones.a.mode",
        "duplicate key 'mode'",
    );
}

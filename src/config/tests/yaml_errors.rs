//! YAML errors and hostile input: syntax errors carry file and line (in
//! project files and in worker front matter), and garbage, deep nesting
//! and alias bombs are refused, never fatal.

use super::*;

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
fn yaml_syntax_errors_have_file_and_line() {
    let f = Fixture::new();
    let e = f.load_err("sandbox:\n  zones:\n    a: [1,\n");
    assert!(e.line.is_some(), "{e}");
    assert!(e.to_string().contains("project.yaml:"), "{e}");
    assert!(!e.to_string().contains('\n'));
    let e = f.load_err("- just\n- a list\n");
    assert_err(&e, "project.yaml", 1, "", "expected a mapping, got a list");
}

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

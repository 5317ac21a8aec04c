//! The `unsafe` inventory holds: every `unsafe` in `src/` is inside a leaf
//! module allowed it (`#[allow(unsafe_code)]` on its `mod` line), each has
//! a `// SAFETY:` comment right above it (or on its line), the crate
//! root's doc comment names exactly those leaves, and `docs/layout.md`'s
//! "Unsafe inventory" table has one row per `unsafe` of each file.
//!
//! Plain Rust over the source text: no kernel, no root, nothing mounted.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The code of a Rust file with comments, strings and char literals
/// blanked (newlines kept, so line numbers still hold).
fn code_only(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let blank = |out: &mut String, ch: char| out.push(if ch == '\n' { '\n' } else { ' ' });
    let mut i = 0;
    while i < c.len() {
        let prev_ident = i > 0 && ident(c[i - 1]);
        if c[i] == '/' && c.get(i + 1) == Some(&'/') {
            while i < c.len() && c[i] != '\n' {
                blank(&mut out, c[i]);
                i += 1;
            }
        } else if c[i] == '/' && c.get(i + 1) == Some(&'*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
        } else if !prev_ident && raw_string_at(&c, i).is_some() {
            let (start, hashes) = raw_string_at(&c, i).unwrap();
            // The prefix and the opening quote.
            for &ch in &c[i..=start] {
                blank(&mut out, ch);
            }
            i = start + 1;
            loop {
                if i >= c.len() {
                    break;
                }
                if c[i] == '"' && (1..=hashes).all(|k| c.get(i + k) == Some(&'#')) {
                    for _ in 0..=hashes {
                        out.push(' ');
                    }
                    i += hashes + 1;
                    break;
                }
                blank(&mut out, c[i]);
                i += 1;
            }
        } else if c[i] == '"' {
            out.push(' ');
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    blank(&mut out, c[i]);
                    i += 1;
                }
                if i < c.len() {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c[i] == '\'' && (!prev_ident || byte_prefix(&c, i)) {
            // A char or byte literal ('a', b'"', '\n', '\u{1f}'), or a
            // lifetime ('a).
            let end = if c.get(i + 1) == Some(&'\\') {
                (i + 2..c.len()).find(|&k| c[k] == '\'')
            } else if c.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(e) => {
                    for &ch in &c[i..=e] {
                        blank(&mut out, ch);
                    }
                    i = e + 1;
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// Whether the quote at `i` follows a lone `b` (a byte literal `b'x'`).
fn byte_prefix(c: &[char], i: usize) -> bool {
    i > 0 && c[i - 1] == 'b' && (i < 2 || !(c[i - 2].is_alphanumeric() || c[i - 2] == '_'))
}

/// A raw string (`r"`, `r#"`, `br#"`, `cr"`) starting at `i`: the index
/// of its opening quote and its number of `#`.
fn raw_string_at(c: &[char], i: usize) -> Option<(usize, usize)> {
    let mut k = i;
    if matches!(c.get(k), Some('b' | 'c')) {
        k += 1;
    }
    if c.get(k) != Some(&'r') {
        return None;
    }
    k += 1;
    let mut hashes = 0;
    while c.get(k) == Some(&'#') {
        hashes += 1;
        k += 1;
    }
    (c.get(k) == Some(&'"')).then_some((k, hashes))
}

/// The lines (0-based) holding an `unsafe` keyword, once per keyword.
fn unsafe_lines(code: &str) -> Vec<usize> {
    let mut out = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let b = line.as_bytes();
        let mut from = 0;
        while let Some(i) = line[from..].find("unsafe").map(|i| i + from) {
            let is_ident = |x: u8| x.is_ascii_alphanumeric() || x == b'_';
            let before = i == 0 || !is_ident(b[i - 1]);
            let after = b.get(i + 6).is_none_or(|&x| !is_ident(x));
            if before && after {
                out.push(n);
            }
            from = i + 6;
        }
    }
    out
}

/// Whether the `unsafe` on line `n` has a `// SAFETY:` comment: on its
/// own line, or in the comment lines (attributes between allowed) right
/// above it.
fn has_safety_comment(lines: &[&str], n: usize) -> bool {
    if lines[n].contains("// SAFETY:") {
        return true;
    }
    let mut i = n;
    while i > 0 {
        i -= 1;
        let l = lines[i].trim_start();
        if l.starts_with("// SAFETY:") {
            return true;
        }
        if !(l.starts_with("//") || l.starts_with("#[")) {
            return false;
        }
    }
    false
}

/// The module path of a source file (`src/fuse/sys/mod.rs` is
/// `fuse::sys`).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts.join("::")
}

/// The modules declared with `#[allow(unsafe_code)]`, by module path, and
/// every place the allowance appears anywhere else (which is refused).
fn allowed_leaves(src: &Path, files: &[(PathBuf, String)]) -> (BTreeSet<String>, Vec<String>) {
    let mut leaves = BTreeSet::new();
    let mut stray = Vec::new();
    for (file, code) in files {
        let lines: Vec<&str> = code.lines().collect();
        for (n, l) in lines.iter().enumerate() {
            if !l.contains("unsafe_code") {
                continue;
            }
            let rel = file.strip_prefix(repo()).unwrap_or(file);
            let here = format!("{}:{}", rel.display(), n + 1);
            if l.trim() != "#[allow(unsafe_code)]" {
                stray.push(format!("{here}: {}", l.trim()));
                continue;
            }
            let decl = lines[n + 1..]
                .iter()
                .map(|l| l.trim())
                .find(|l| !l.is_empty() && !l.starts_with("#["))
                .unwrap_or("");
            let name = decl
                .strip_prefix("pub ")
                .or_else(|| decl.strip_prefix("pub(crate) "))
                .or_else(|| decl.strip_prefix("pub(super) "))
                .unwrap_or(decl)
                .strip_prefix("mod ")
                .and_then(|d| d.strip_suffix(';'));
            match name {
                Some(name) => {
                    let parent = module_of(src, file);
                    leaves.insert(match parent.is_empty() {
                        true => name.to_string(),
                        false => format!("{parent}::{name}"),
                    });
                }
                None => stray.push(format!("{here}: not on a `mod NAME;` line: {decl}")),
            }
        }
    }
    (leaves, stray)
}

/// Whether `module` is `leaf` or inside it.
fn within(module: &str, leaf: &str) -> bool {
    module == leaf || module.starts_with(&format!("{leaf}::"))
}

/// The backticked module paths of the crate root's "Unsafe" list: the
/// `//! - ` lines after a `//! # Unsafe` heading, up to the next heading.
fn leaves_named_in_lib(lib: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut inside = false;
    for l in lib.lines().filter_map(|l| l.strip_prefix("//!")) {
        let l = l.trim();
        if l.starts_with('#') {
            inside = l.starts_with("# Unsafe");
            continue;
        }
        let item = l.strip_prefix("- ").filter(|_| inside);
        if let Some(name) = item.and_then(|i| i.split('`').nth(1)) {
            out.insert(name.to_string());
        }
    }
    out
}

/// `docs/layout.md`'s "Unsafe inventory" table: rows per file (its first
/// cell, a backticked path under `src/`).
fn inventory_rows(layout: &str) -> BTreeMap<String, usize> {
    let mut rows = BTreeMap::new();
    let mut inside = false;
    for l in layout.lines() {
        if l.starts_with('#') {
            inside = l.trim_start_matches('#').trim() == "Unsafe inventory";
            continue;
        }
        if !inside || !l.starts_with('|') {
            continue;
        }
        let first = l.trim_matches('|').split('|').next().unwrap_or("").trim();
        if let Some(path) = first.strip_prefix('`').and_then(|p| p.strip_suffix('`')) {
            if path.starts_with("src/") {
                *rows.entry(path.to_string()).or_insert(0) += 1;
            }
        }
    }
    rows
}

struct House {
    src: PathBuf,
    /// Each file with its code (comments, strings blanked) and its text.
    files: Vec<(PathBuf, String, String)>,
}

fn house() -> House {
    let src = repo().join("src");
    let files = rust_files(&src)
        .into_iter()
        .map(|f| {
            let text = fs::read_to_string(&f).unwrap();
            (f, code_only(&text), text)
        })
        .collect();
    House { src, files }
}

/// `unsafe` per file (path relative to the repo), in allowed leaves or not.
fn unsafe_counts(h: &House) -> (BTreeMap<String, usize>, Vec<String>) {
    let code: Vec<(PathBuf, String)> = h
        .files
        .iter()
        .map(|(f, c, _)| (f.clone(), c.clone()))
        .collect();
    let (leaves, mut problems) = allowed_leaves(&h.src, &code);
    let mut counts = BTreeMap::new();
    for (file, code, text) in &h.files {
        let rel = file.strip_prefix(repo()).unwrap().display().to_string();
        let module = module_of(&h.src, file);
        let lines: Vec<&str> = text.lines().collect();
        let found = unsafe_lines(code);
        if found.is_empty() {
            continue;
        }
        let leaf = leaves.iter().any(|l| within(&module, l));
        for &n in &found {
            if !leaf {
                problems.push(format!(
                    "{rel}:{}: `unsafe` outside the leaves allowed it ({leaves:?})",
                    n + 1
                ));
            }
            if !has_safety_comment(&lines, n) {
                problems.push(format!(
                    "{rel}:{}: `unsafe` without a `// SAFETY:` comment right above it",
                    n + 1
                ));
            }
        }
        counts.insert(rel, found.len());
    }
    (counts, problems)
}

#[test]
fn every_unsafe_is_in_a_listed_leaf_with_a_safety_comment() {
    let h = house();
    let (counts, problems) = unsafe_counts(&h);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The scan itself works: the leaves do hold unsafe code.
    assert!(
        counts.values().sum::<usize>() > 0,
        "no `unsafe` found at all"
    );
}

#[test]
fn the_crate_root_names_exactly_the_leaves_allowed_unsafe() {
    let h = house();
    let code: Vec<(PathBuf, String)> = h
        .files
        .iter()
        .map(|(f, c, _)| (f.clone(), c.clone()))
        .collect();
    let (leaves, _) = allowed_leaves(&h.src, &code);
    let lib = fs::read_to_string(h.src.join("lib.rs")).unwrap();
    assert_eq!(
        leaves_named_in_lib(&lib),
        leaves,
        "src/lib.rs's `# Unsafe` list against the `#[allow(unsafe_code)]` modules"
    );
}

#[test]
fn the_layout_inventory_counts_what_the_code_has() {
    let h = house();
    let (counts, _) = unsafe_counts(&h);
    let layout = fs::read_to_string(repo().join("docs/layout.md")).unwrap();
    let rows = inventory_rows(&layout);
    assert!(
        !rows.is_empty(),
        "docs/layout.md has no `Unsafe inventory` table"
    );
    assert_eq!(
        rows, counts,
        "docs/layout.md's Unsafe inventory (rows per file) against the `unsafe` in src/"
    );
}

/// The scanner's own cases: what counts as an `unsafe`, what is a comment
/// or a string, and where a SAFETY comment must be.
#[test]
fn the_scanner_tells_code_from_comments_and_strings() {
    let src = r##"
// unsafe in a comment
/* unsafe { block comment } */
let s = "unsafe { in a string }";
let r = r#"unsafe "quoted" "#;
let c = '"'; let l: &'static str = "x"; let b = b'"';
fn unsafe_for_terminal() {}
// SAFETY: documented.
let a = unsafe { f() };
let b = unsafe { g() };
#[allow(unused)]
// SAFETY: an impl.
unsafe impl Send for X {}
"##;
    let code = code_only(src);
    let lines: Vec<&str> = src.lines().collect();
    let found = unsafe_lines(&code);
    assert_eq!(found, vec![8, 9, 12], "{code}");
    let documented: Vec<bool> = found
        .iter()
        .map(|&n| has_safety_comment(&lines, n))
        .collect();
    assert_eq!(documented, vec![true, false, true]);
}

//! Unit tests of the config room: both zone forms, both worker forms, every
//! validation error (each checked for file, line and field), every
//! derivation rule, the example files, and garbage input. This file holds
//! the shared fixtures; the tests are split by topic (named apart from the
//! room's own `parse`/`validate`/`derive` modules, which a test reaches by
//! path).

use std::fs;
use std::path::{Path, PathBuf};

use super::*;

mod derivation;
mod parsing;
mod paths;
mod sensitive_roots;
mod validation;
mod yaml_errors;
mod zone_args;

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

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("config")
}

fn worker(text: &str) -> WorkerDecl {
    parse_worker(text, Path::new("dir/child.worker")).unwrap()
}

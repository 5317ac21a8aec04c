//! The README and `docs/` stay true: every relative link reaches a file
//! (or a heading of it), the conformance figures are the ones the
//! conformance script enforces, and the doctor output shown names every
//! fact `doctor` reports.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;

use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every docs/*.md.
fn pages() -> Vec<PathBuf> {
    let mut v = vec![repo().join("README.md")];
    for e in fs::read_dir(repo().join("docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            v.push(p);
        }
    }
    v
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces
/// to dashes.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| anchor(l.trim_start_matches('#')))
        .collect()
}

/// `](target)` links that aren't URLs.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        let Some(j) = rest.find(')') else { break };
        let t = &rest[..j];
        if !t.contains("://") && !t.starts_with("mailto:") {
            out.push(t.to_string());
        }
        rest = &rest[j..];
    }
    out
}

#[test]
fn every_relative_link_reaches_its_file_and_heading() {
    for page in pages() {
        let text = fs::read_to_string(&page).unwrap();
        for link in links(&text) {
            let (file, frag) = link.split_once('#').unwrap_or((&link, ""));
            let target: PathBuf = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            assert!(
                target.exists(),
                "{}: link to {link}: {} does not exist",
                page.display(),
                target.display()
            );
            if !frag.is_empty() && target.extension().is_some_and(|x| x == "md") {
                let t = fs::read_to_string(&target).unwrap();
                assert!(
                    anchors(&t).contains(&frag.to_string()),
                    "{}: link to {link}: no such heading in {}",
                    page.display(),
                    target.display()
                );
            }
        }
    }
}

#[test]
fn the_readme_sends_nobody_outside_the_repo() {
    for page in pages() {
        let text = fs::read_to_string(&page).unwrap();
        assert!(
            !text.contains("../shared") && !text.contains("shared documents"),
            "{} points outside the repo",
            page.display()
        );
    }
}

fn expected(key: &str) -> String {
    let env = fs::read_to_string(repo().join("scripts/conformance/expected.env")).unwrap();
    env.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("{key} not in expected.env"))
        .trim()
        .to_string()
}

#[test]
fn conformance_figures_are_the_enforced_ones() {
    let doc = fs::read_to_string(repo().join("docs/conformance.md")).unwrap();
    let doc = doc.split_whitespace().collect::<Vec<_>>().join(" ");
    let want = format!(
        "{} passed, {} failed, {} expected failures, {} skipped, {} total",
        expected("PJD_PASSED"),
        expected("PJD_FAILED"),
        expected("PJD_EXPECTED_FAILURES"),
        expected("PJD_SKIPPED"),
        expected("PJD_TOTAL")
    );
    assert!(
        doc.contains(&want),
        "docs/conformance.md should state {want:?}"
    );
}

#[test]
fn the_doctor_output_shown_names_every_fact() {
    let out = run(
        Command::new(BIN).args(["doctor", "--json"]),
        Duration::from_secs(60),
    );
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let doc = fs::read_to_string(repo().join("docs/where-it-runs.md")).unwrap();
    // The states shown are this machine's; another machine may differ, so
    // only the names must all be there.
    for c in v["checks"].as_array().unwrap() {
        let name = c["name"].as_str().unwrap();
        assert!(
            doc.lines().any(|l| {
                let l = l.trim_start();
                (l.starts_with("ok") || l.starts_with("degraded") || l.starts_with("missing"))
                    && l.contains(name)
            }),
            "docs/where-it-runs.md shows no line for `{name}`, which doctor reports"
        );
    }
}

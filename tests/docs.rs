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

/// `zonemount ARGS... --help`'s stdout.
fn help(args: &[&str]) -> String {
    let out = run(
        Command::new(BIN).args(args).arg("--help"),
        Duration::from_secs(30),
    );
    assert!(out.success(), "{args:?} --help: {}", out.describe());
    out.stdout
}

/// The names listed under `Commands:` in a `--help` (without `help`).
fn commands_of(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

/// Each long option a `--help` lists (not --help, --version), with the
/// name of its value if it takes one.
fn options_of(help: &str) -> Vec<(String, Option<String>)> {
    help.lines()
        .skip_while(|l| !l.starts_with("Options:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| {
            let l = l.trim_start();
            let l = l.strip_prefix("-q, ").unwrap_or(l);
            let l = if l.len() > 4 && l.as_bytes()[0] == b'-' && &l[2..4] == ", " {
                &l[4..]
            } else {
                l
            };
            let flag: String = l
                .strip_prefix("--")?
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            let rest = &l[2 + flag.len()..];
            let value = rest
                .strip_prefix(" <")
                .and_then(|r| r.split_once('>'))
                .map(|(v, _)| v.to_string());
            Some((format!("--{flag}"), value))
        })
        .filter(|(f, _)| f != "--help" && f != "--version")
        .collect()
}

/// The synopsis at the top of docs/usage.md: each command (`approvals
/// allow` for a subcommand) and the text of its lines.
fn synopsis() -> Vec<(String, String)> {
    let doc = fs::read_to_string(repo().join("docs/usage.md")).unwrap();
    let block = doc
        .split("```\n")
        .find(|b| b.starts_with("zonemount "))
        .expect("docs/usage.md has a synopsis block");
    let mut out: Vec<(String, String)> = Vec::new();
    for line in block.lines() {
        if let Some(rest) = line.strip_prefix("zonemount ") {
            let mut words = rest.split_whitespace();
            let mut cmd = words.next().unwrap_or_default().to_string();
            if cmd == "approvals" {
                cmd = format!("approvals {}", words.next().unwrap_or_default());
            }
            out.push((cmd, rest.to_string()));
        } else if let Some((_, text)) = out.last_mut() {
            text.push(' ');
            text.push_str(line.trim());
        }
    }
    out
}

/// The long options a synopsis text names (`-- CMD` is not one).
fn flags_in(text: &str) -> Vec<String> {
    let mut flags = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("--") {
        rest = &rest[i + 2..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        if name.starts_with(|c: char| c.is_ascii_lowercase()) {
            flags.push(format!("--{name}"));
        }
    }
    flags
}

/// docs/usage.md's synopsis names every command and subcommand, each with
/// exactly the options its `--help` lists (and their values' names):
/// nothing missing, nothing that isn't there.
#[test]
fn the_usage_synopsis_matches_the_command_line() {
    let mut commands = Vec::new();
    for c in commands_of(&help(&[])) {
        if c == "approvals" {
            for sub in commands_of(&help(&["approvals"])) {
                commands.push(format!("approvals {sub}"));
            }
        } else {
            commands.push(c);
        }
    }
    let synopsis = synopsis();
    let shown: Vec<&str> = synopsis.iter().map(|(c, _)| c.as_str()).collect();
    let mut want = commands.clone();
    want.sort();
    let mut have: Vec<&str> = shown.clone();
    have.sort();
    assert_eq!(
        have, want,
        "docs/usage.md's synopsis lists other commands than --help"
    );
    for cmd in &commands {
        let text = synopsis
            .iter()
            .filter(|(c, _)| c == cmd)
            .map(|(_, t)| t.as_str())
            .collect::<Vec<_>>()
            .join(" ");
        let args: Vec<&str> = cmd.split(' ').collect();
        let options = options_of(&help(&args));
        let mut documented = flags_in(&text);
        documented.sort();
        documented.dedup();
        let mut real: Vec<String> = options.iter().map(|(f, _)| f.clone()).collect();
        real.sort();
        assert_eq!(
            documented, real,
            "docs/usage.md's synopsis of `zonemount {cmd}` ({text}) names other options than its --help"
        );
        for (flag, value) in &options {
            if let Some(v) = value {
                assert!(
                    text.contains(&format!("{flag} {v}")),
                    "docs/usage.md's synopsis of `zonemount {cmd}` should write `{flag} {v}`: {text}"
                );
            }
        }
    }
}

//! `completions` and `man`: generated from the command definitions; the
//! scripts parse in their shells, the pages are written and name every
//! command.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;

use std::process::Command;
use std::time::Duration;

fn zm(args: &[&str]) -> Out {
    run(Command::new(BIN).args(args), Duration::from_secs(60))
}

#[test]
fn completion_scripts_for_bash_zsh_and_fish() {
    let bash = zm(&["completions", "bash"]);
    assert!(bash.success(), "{}", bash.describe());
    assert!(bash.stdout.contains("_zonemount()"), "{}", bash.stdout);
    for sub in ["mount", "unmount", "run", "doctor", "approvals", "check"] {
        assert!(bash.stdout.contains(sub), "bash completion lacks {sub}");
    }
    // It parses as bash.
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("zonemount.bash");
    std::fs::write(&f, &bash.stdout).unwrap();
    let check = run(
        Command::new("bash").arg("-n").arg(&f),
        Duration::from_secs(30),
    );
    assert!(check.success(), "{}", check.describe());

    let zsh = zm(&["completions", "zsh"]);
    assert!(
        zsh.success() && zsh.stdout.starts_with("#compdef zonemount"),
        "{}",
        zsh.describe()
    );
    let fish = zm(&["completions", "fish"]);
    assert!(
        fish.success() && fish.stdout.contains("complete -c zonemount"),
        "{}",
        fish.describe()
    );

    let bad = zm(&["completions", "tcsh"]);
    assert_eq!(bad.code(), Some(2), "{}", bad.describe());
}

#[test]
fn man_pages_for_the_tool_and_each_command() {
    let page = zm(&["man"]);
    assert!(page.success(), "{}", page.describe());
    assert!(page.stdout.contains(".TH zonemount 1"), "{}", page.stdout);
    let dir = tempfile::tempdir().unwrap();
    let out = zm(&["man", "--dir", dir.path().to_str().unwrap()]);
    assert!(out.success(), "{}", out.describe());
    for name in [
        "zonemount.1",
        "zonemount-mount.1",
        "zonemount-run.1",
        "zonemount-doctor.1",
        "zonemount-approvals-allow.1",
    ] {
        let p = dir.path().join(name);
        let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(text.contains(".TH"), "{name} is not a man page");
    }
}

/// The daemon's log lines on a terminal (through `script`'s pty): coloured,
/// unless NO_COLOR is set.
fn foreground_log_on_a_tty(no_color: bool) -> String {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("project.yaml"),
        zones_yaml(Mode::Sandboxed, &[("ws", "mode: rw")]),
    )
    .unwrap();
    std::fs::create_dir(dir.path().join("mnt")).unwrap();
    let env = if no_color {
        "NO_COLOR=1 "
    } else {
        "NO_COLOR= "
    };
    // SIGINT after 3 s unmounts cleanly; `timeout` bounds it either way.
    let inner = format!(
        "cd '{}' && {env}RUST_LOG=zonemount=info timeout -s INT 3 '{BIN}' mount --foreground --config project.yaml mnt",
        dir.path().display()
    );
    let out = run(
        Command::new("script").args(["-qec", &inner, "/dev/null"]),
        Duration::from_secs(60),
    );
    assert!(!is_mounted(&dir.path().join("mnt")), "{}", out.describe());
    assert!(
        out.stdout.contains("mounted"),
        "no log line: {}",
        out.describe()
    );
    out.stdout
}

#[test]
fn no_color_turns_off_colour_in_log_lines() {
    if !fuse_ok() || !tool_ok("script") {
        return;
    }
    assert!(
        foreground_log_on_a_tty(false).contains('\u{1b}'),
        "on a terminal the log is coloured"
    );
    let plain = foreground_log_on_a_tty(true);
    assert!(!plain.contains('\u{1b}'), "NO_COLOR: {plain:?}");
}

#[test]
fn every_command_help_ends_with_examples_and_exit_status() {
    for cmd in [
        "mount",
        "unmount",
        "run",
        "list",
        "derive",
        "status",
        "approvals",
        "check",
        "doctor",
        "completions",
        "man",
        "changes",
        "commit",
        "discard",
        "approvals list",
        "approvals watch",
        "approvals allow",
        "approvals deny",
    ] {
        let mut args: Vec<&str> = cmd.split(' ').collect();
        args.push("--help");
        let out = zm(&args);
        assert!(out.success(), "{cmd}: {}", out.describe());
        assert!(
            out.stdout.contains("Exit status"),
            "{cmd} --help names no exit status:\n{}",
            out.stdout
        );
        assert!(
            out.stdout.contains("Examples:"),
            "{cmd} --help has no examples"
        );
        // Every positional argument is described.
        let args = out.stdout.split("Arguments:").nth(1).unwrap_or("");
        for line in args.lines().take_while(|l| !l.trim().is_empty()) {
            assert!(
                line.trim().split_once("  ").is_some(),
                "{cmd}: an argument without a description: {line:?}"
            );
        }
    }
}

#[test]
fn version_names_what_the_build_does() {
    let short = zm(&["-V"]);
    assert_eq!(
        short.stdout.trim(),
        format!("zonemount {}", env!("CARGO_PKG_VERSION"))
    );
    let long = zm(&["--version"]);
    assert!(long.success(), "{}", long.describe());
    let v = zonemount::control::protocol::VERSION;
    for want in [
        "features:".to_string(),
        format!("control protocol v{v}"),
        "run --isolate (bubblewrap)".to_string(),
        "FUSE passthrough".to_string(),
        "staged zones (overlayfs".to_string(),
    ] {
        assert!(
            long.stdout.contains(&want),
            "--version lacks {want:?}: {}",
            long.stdout
        );
    }
}

/// `man --dir`'s pages, read back: (file name, roff source).
fn pages() -> (tempfile::TempDir, Vec<(String, String)>) {
    let dir = tempfile::tempdir().unwrap();
    let out = zm(&["man", "--dir", dir.path().to_str().unwrap()]);
    assert!(out.success(), "{}", out.describe());
    let mut pages: Vec<(String, String)> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&p).unwrap())
        })
        .collect();
    pages.sort();
    (dir, pages)
}

/// Every page has the sections a reader looks for, in man-pages(7)'s
/// order, and none called EXTRA.
#[test]
fn every_man_page_has_the_standard_sections() {
    let (_dir, pages) = pages();
    assert!(
        pages.iter().any(|(n, _)| n == "zonemount.yaml.5"),
        "no zonemount.yaml(5)"
    );
    assert!(
        pages.len() >= 20,
        "{:?}",
        pages.iter().map(|p| &p.0).collect::<Vec<_>>()
    );
    for (name, text) in &pages {
        let heads: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix(".SH "))
            .map(|h| h.trim_matches('"'))
            .collect();
        let mut want = vec!["NAME", "SYNOPSIS", "DESCRIPTION"];
        if name.ends_with(".1") {
            want.push("OPTIONS");
        }
        want.extend([
            "EXAMPLES",
            "EXIT STATUS",
            "ENVIRONMENT",
            "FILES",
            "SEE ALSO",
        ]);
        let mut at = 0;
        for w in &want {
            let i = heads[at..].iter().position(|h| h == w).unwrap_or_else(|| {
                panic!(
                    "{name}: no {w} section after {:?} in {heads:?}",
                    heads.get(at.saturating_sub(1))
                )
            });
            at += i + 1;
        }
        assert!(!heads.contains(&"EXTRA"), "{name}: {heads:?}");
    }
}

/// The config page restates every key a project or worker file may have
/// (src/config/parse.rs: PROJECT_ZONE_KEYS, WORKER_ZONE_KEYS, the sandbox
/// section's keys) and every preset.
#[test]
fn the_config_page_names_every_key_and_preset() {
    let (_dir, pages) = pages();
    let page = &pages
        .iter()
        .find(|(n, _)| n == "zonemount.yaml.5")
        .unwrap()
        .1;
    for key in [
        "sandbox",
        "mode",
        "root",
        "zones",
        "name",
        "path",
        "approval",
        "suffixes",
        "max_file_bytes",
        "protect",
        "hide",
        "ask_read",
        "staged",
        "preApproved",
        "ask",
        "blocked",
        "read",
        "write",
        "delete",
        "sandboxed",
        "direct",
    ] {
        assert!(
            page.contains(&format!(".B {key}\n")) || page.contains(&format!("\\fB{key}")),
            "zonemount.yaml(5) lacks {key}"
        );
    }
    for preset in zonemount::config::presets::PRESETS {
        let roff = preset.name.replace('-', "\\-");
        assert!(
            page.contains(&format!(".B {roff}\n")),
            "zonemount.yaml(5) lacks preset {}",
            preset.name
        );
    }
}

/// `man -l` renders every page without a warning (groff's and man's), and
/// each command's examples come out as its `--help` writes them: one
/// command per line, or broken with a trailing `\` between words, never
/// wrapped mid-command, no line past 80 columns.
#[test]
fn man_renders_every_page_without_warnings_and_examples_whole() {
    if !tool_ok("man") || !tool_ok("groff") {
        return;
    }
    let (dir, pages) = pages();
    for (name, _) in &pages {
        let path = dir.path().join(name);
        let out = run(
            Command::new("man")
                .args(["--warnings", "-l"])
                .arg(&path)
                .env("MANWIDTH", "80")
                .env("MAN_KEEP_FORMATTING", "")
                .env("LC_ALL", "C.UTF-8"),
            Duration::from_secs(60),
        );
        assert!(
            out.success() && out.stderr.is_empty(),
            "{name}: {}",
            out.describe()
        );
        let examples = out
            .stdout
            .split("\nEXAMPLES\n")
            .nth(1)
            .unwrap_or_else(|| panic!("{name}: no EXAMPLES"))
            .split("\nEXIT STATUS\n")
            .next()
            .unwrap();
        let mut joined: Vec<String> = Vec::new();
        let mut cont = false;
        for line in examples.lines() {
            assert!(
                line.chars().count() <= 80,
                "{name}: a line past 80 columns: {line:?}"
            );
            let l = line.trim();
            let (text, more) = match l.strip_suffix(" \\") {
                Some(t) => (t, true),
                None => (l, false),
            };
            match joined.last_mut() {
                Some(last) if cont => {
                    last.push(' ');
                    last.push_str(text);
                }
                _ => joined.push(text.to_string()),
            }
            cont = more;
        }
        // The command's --help examples, each found whole.
        let Some(cmd) = name.strip_suffix(".1") else {
            continue;
        };
        let words: Vec<&str> = cmd.split('-').skip(1).collect();
        if words.is_empty() {
            continue;
        }
        let mut args = words.clone();
        args.push("--help");
        let help = zm(&args);
        let block = help.stdout.split("Examples:\n").nth(1).unwrap_or("");
        for ex in block.lines().take_while(|l| l.starts_with("  ")) {
            let ex = ex.trim();
            let ex = ex.split("  #").next().unwrap().trim();
            assert!(
                joined.iter().any(|l| l == ex),
                "{name}: the example {ex:?} is not whole in:\n{examples}"
            );
        }
    }
}

/// What bash's completion (the generated script, sourced) offers after
/// `zonemount WORDS `, in a directory holding a file, so file names
/// offered would show.
fn bash_completes(words: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let script = zm(&["completions", "bash"]);
    assert!(script.success(), "{}", script.describe());
    std::fs::write(dir.path().join("zm.bash"), &script.stdout).unwrap();
    std::fs::write(dir.path().join("a-file.txt"), "").unwrap();
    let out = run(
        Command::new("bash")
            .current_dir(dir.path())
            .arg("-c")
            .arg(format!(
                r#"source ./zm.bash
read -ra W <<< "zonemount {words}"
COMP_WORDS=("${{W[@]}}" ""); COMP_CWORD=${{#W[@]}}
COMP_LINE="zonemount {words} "; COMP_POINT=${{#COMP_LINE}}
COMPREPLY=()
_zonemount zonemount "" "${{W[-1]}}"
echo "${{COMPREPLY[*]}}""#
            )),
        Duration::from_secs(60),
    );
    assert!(out.success(), "{}", out.describe());
    out.stdout.trim().to_string()
}

/// `--preset` completes to the presets' names and `--scope` to its three
/// values, not to file names, in bash (run), zsh and fish (the scripts
/// name them as values, with files off).
#[test]
fn preset_and_scope_complete_to_their_values() {
    let names: Vec<&str> = zonemount::config::presets::PRESETS
        .iter()
        .map(|p| p.name)
        .collect();
    for cmd in ["mount --preset", "derive --preset"] {
        assert_eq!(bash_completes(cmd), names.join(" "), "bash: {cmd}");
    }
    assert_eq!(bash_completes("approvals allow --scope"), "once path zone");
    let zsh = zm(&["completions", "zsh"]).stdout;
    assert!(
        zsh.contains(&format!(":NAME:({})'", names.join(" "))),
        "zsh --preset: {zsh}"
    );
    assert!(
        zsh.contains(":once|path|zone:(once path zone)'"),
        "zsh --scope"
    );
    let fish = zm(&["completions", "fish"]).stdout;
    for (opt, first) in [("preset", names[0]), ("scope", "once")] {
        let line = fish
            .lines()
            .find(|l| l.contains(&format!(" -l {opt} ")))
            .unwrap_or_else(|| panic!("fish: no -l {opt}"));
        assert!(
            line.contains(&format!("-r -f -a \"{first}")),
            "fish --{opt} offers files: {line}"
        );
    }
}

/// zonemount.yaml(5)'s example project and worker files, as a reader
/// copies them from the rendered page, load: `derive` accepts the pair.
#[test]
fn the_config_page_examples_load() {
    if !tool_ok("man") || !tool_ok("groff") {
        return;
    }
    let (dir, _) = pages();
    let out = run(
        Command::new("man")
            .arg("-l")
            .arg(dir.path().join("zonemount.yaml.5"))
            .env("MANWIDTH", "200")
            .env("LC_ALL", "C.UTF-8"),
        Duration::from_secs(60),
    );
    assert!(out.success(), "{}", out.describe());
    let text = out.stdout.split("\nEXAMPLES\n").nth(1).unwrap();
    // The lines of the indented block after the line `intro`.
    let block = |intro: &str| -> String {
        let after = text
            .split(intro)
            .nth(1)
            .unwrap_or_else(|| panic!("no {intro:?}"));
        let lines: Vec<&str> = after
            .lines()
            .skip_while(|l| l.trim().is_empty())
            .take_while(|l| !l.trim().is_empty())
            .collect();
        let indent = lines[0].len() - lines[0].trim_start().len();
        lines
            .iter()
            .map(|l| format!("{}\n", &l[indent..]))
            .collect()
    };
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("project.yaml"), block("A project file:")).unwrap();
    std::fs::write(
        work.path().join("formatter.worker"),
        block("A worker file:"),
    )
    .unwrap();
    let derive = run(
        Command::new(BIN)
            .args([
                "derive",
                "--config",
                "project.yaml",
                "--worker",
                "formatter.worker",
            ])
            .current_dir(work.path()),
        Duration::from_secs(60),
    );
    assert!(derive.success(), "{}", derive.describe());
    for zone in ["data", "final"] {
        assert!(derive.stdout.contains(zone), "{}", derive.describe());
    }
    assert!(
        !derive.stdout.contains("workspace"),
        "{}",
        derive.describe()
    );
}

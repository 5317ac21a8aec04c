//! `run`'s argument handling and its plan, without mounting.

#![allow(clippy::unwrap_used, clippy::expect_used)]
use std::path::PathBuf;

use clap::Parser;

use super::super::{Cli, Cmd};
use super::plan::*;
use super::task::*;
use super::*;

fn parse(args: &[&str]) -> RunArgs {
    let argv = ["zonemount", "run"]
        .iter()
        .chain(args)
        .map(OsString::from)
        .collect();
    match Cli::try_parse_from(presplit(argv)) {
        Ok(Cli { cmd: Cmd::Run(r) }) => r,
        other => panic!("{args:?}: {other:?}"),
    }
}

fn strs(v: &[OsString]) -> Vec<&str> {
    v.iter().map(|s| s.to_str().unwrap()).collect()
}

#[test]
fn run_options_and_mount_options_are_told_apart() {
    let r = parse(&[
        "--config",
        "p.yaml",
        "--isolate",
        "--worker",
        "w",
        "--env",
        "A=1",
        "--no-approvals",
        "--timeout",
        "3",
        "--",
        "sh",
        "-c",
        "echo --isolate",
    ]);
    assert!(r.isolate);
    assert_eq!(strs(&r.env), ["A=1"]);
    assert_eq!(r.timeout, Some(3.0));
    assert_eq!(
        strs(&r.mount_options),
        ["--config", "p.yaml", "--worker", "w", "--no-approvals"]
    );
    assert_eq!(strs(&r.command), ["sh", "-c", "echo --isolate"]);
}

#[test]
fn a_bare_command_needs_no_options() {
    let r = parse(&["--", "true"]);
    assert!(r.mount_options.is_empty());
    assert!(!r.isolate);
    assert_eq!(strs(&r.command), ["true"]);
}

#[test]
fn the_command_is_required() {
    let argv = ["zonemount", "run", "--isolate"]
        .map(OsString::from)
        .to_vec();
    assert!(Cli::try_parse_from(presplit(argv)).is_err());
}

#[test]
fn network_requires_isolate() {
    let argv = ["zonemount", "run", "--network", "--", "true"]
        .map(OsString::from)
        .to_vec();
    assert!(Cli::try_parse_from(presplit(argv)).is_err());
}

#[test]
fn equals_forms_and_other_commands() {
    let r = parse(&["--env=A=1", "--timeout=2", "--config=p", "--", "x"]);
    assert_eq!(strs(&r.env), ["A=1"]);
    assert_eq!(r.timeout, Some(2.0));
    assert_eq!(strs(&r.mount_options), ["--config=p"]);
    let argv: Vec<OsString> = ["zonemount", "mount", "--config", "p", "/m"]
        .map(OsString::from)
        .to_vec();
    assert_eq!(presplit(argv.clone()), argv);
}

#[test]
fn mount_options_are_checked_by_the_mount_parser() {
    let ok =
        parse_mount_options(&["--config".into(), "x".into(), "--no-approvals".into()]).unwrap();
    assert_eq!(ok.config.config, Some(PathBuf::from("x")));
    let e = parse_mount_options(&["--bogus".into()]).unwrap_err();
    assert!(e.contains("--bogus"), "{e}");
    assert!(!e.contains('\n'));
    // A mountpoint is not a mount option here.
    assert!(parse_mount_options(&["/mnt".into()]).is_err());
}

#[test]
fn exit_codes_follow_the_shell() {
    assert_eq!(exit_code(ExitStatus::from_raw(0)), 0);
    assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
    assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGKILL)), 137);
    assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGSEGV)), 139);
}

//! `completions` and `man`: shell completion scripts (clap_complete) and
//! man pages, both generated from the command definitions, so they can't
//! drift from `--help`.
//!
//! A command's page is clap_mangen's NAME, SYNOPSIS, DESCRIPTION, OPTIONS
//! (and COMMANDS), then what its `--help` ends with, split into EXAMPLES
//! (each command on lines of its own, never filled: a long one is broken
//! before an option with a trailing `\`, so it still pastes into a shell)
//! and EXIT STATUS, then ENVIRONMENT, FILES and SEE ALSO for that command.
//! `zonemount.yaml(5)`, the config format, is written by hand
//! (`zonemount.yaml.5`).

mod sections;

use std::io::Write;
use std::path::Path;

use clap::CommandFactory;
use clap_mangen::Man;
use clap_mangen::roff::{Roff, bold, roman};

use super::{Cli, Failure};

/// zonemount.yaml(5): the project and worker file format.
const CONFIG_PAGE: &str = include_str!("zonemount.yaml.5");
/// Its file name in `man --dir`.
const CONFIG_PAGE_NAME: &str = "zonemount.yaml.5";

/// Print the completion script for `shell` to stdout.
pub(crate) fn completions(shell: clap_complete::Shell) -> Result<(), Failure> {
    let mut cmd = Cli::command();
    let mut out = std::io::stdout().lock();
    clap_complete::generate(shell, &mut cmd, "zonemount", &mut out);
    quiet_pipe(out.flush())
        .map_err(|e| Failure::new(1, format!("cannot write the completions: {e}")))
}

/// `--preset`'s values: any name (an unknown one is refused where the
/// preset is loaded, naming the known ones), with the embedded presets'
/// names as its possible values, so completions offer them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PresetName;

impl clap::builder::TypedValueParser for PresetName {
    type Value = String;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        clap::builder::StringValueParser::new().parse_ref(cmd, arg, value)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            crate::config::presets::PRESETS
                .iter()
                .map(|p| clap::builder::PossibleValue::new(p.name)),
        ))
    }
}

/// A reader that stopped reading (`| head`) is not an error.
fn quiet_pipe(r: std::io::Result<()>) -> std::io::Result<()> {
    match r {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r,
    }
}

/// Print `zonemount(1)` to stdout, or with `dir` write it, one page per
/// command (`zonemount-mount.1`, ...) and `zonemount.yaml.5` there.
pub(crate) fn man(dir: Option<&Path>) -> Result<(), Failure> {
    let Some(dir) = dir else {
        let mut out = std::io::stdout().lock();
        let page = pages().into_iter().next().map(|(_, text)| text);
        return quiet_pipe(
            out.write_all(page.unwrap_or_default().as_bytes())
                .and_then(|()| out.flush()),
        )
        .map_err(|e| Failure::new(1, format!("cannot write the man page: {e}")));
    };
    std::fs::create_dir_all(dir)
        .map_err(|e| Failure::new(1, format!("cannot create {}: {e}", dir.display())))?;
    for (name, text) in pages() {
        let path = dir.join(&name);
        std::fs::write(&path, text)
            .map_err(|e| Failure::new(1, format!("cannot write {}: {e}", path.display())))?;
    }
    Ok(())
}

/// Every page, `zonemount.1` first: (file name, roff source).
pub(crate) fn pages() -> Vec<(String, String)> {
    let mut root = Cli::command().disable_help_subcommand(true);
    root.build();
    let mut out = Vec::new();
    collect(&root, &mut Vec::new(), &mut out);
    out.push((CONFIG_PAGE_NAME.to_owned(), CONFIG_PAGE.to_owned()));
    out
}

/// `cmd`'s page, then its subcommands' (depth first); `path` is the
/// command words after `zonemount`.
fn collect<'a>(cmd: &'a clap::Command, path: &mut Vec<&'a str>, out: &mut Vec<(String, String)>) {
    let man = Man::new(cmd.clone())
        .manual("zonemount manual")
        .source(format!("zonemount {}", env!("CARGO_PKG_VERSION")));
    out.push((man.get_filename(), page(&man, cmd, path)));
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        path.push(sub.get_name());
        collect(sub, path, out);
        path.pop();
    }
}

/// One command's page.
fn page(man: &Man, cmd: &clap::Command, path: &[&str]) -> String {
    let mut buf = Vec::new();
    // Writing to a Vec can't fail.
    let _ = man.render_title(&mut buf);
    // No hyphenation, no justification: names such as $XDG_RUNTIME_DIR and
    // --allow-sensitive-roots stay whole, as a reader types them.
    buf.extend_from_slice(b".nh\n.ad l\n");
    let _ = man.render_name_section(&mut buf);
    let _ = man.render_synopsis_section(&mut buf);
    let _ = man.render_description_section(&mut buf);
    let after = cmd.get_after_help().map(ToString::to_string);
    let after = sections::AfterHelp::parse(after.as_deref().unwrap_or(""));
    let mut roff = Roff::new();
    for para in &after.prose {
        roff.control("PP", []);
        roff.text([roman(para.as_str())]);
    }
    if path.is_empty() {
        sections::root_description(&mut roff);
    } else if path == ["mount"] {
        sections::helper_form(&mut roff);
    }
    let _ = roff.to_writer(&mut buf);
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        let _ = man.render_options_section(&mut buf);
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        let _ = man.render_subcommands_section(&mut buf);
    }
    let mut roff = Roff::new();
    let examples = if path.is_empty() {
        sections::ROOT_EXAMPLES.lines().map(str::to_owned).collect()
    } else {
        after.examples
    };
    if !examples.is_empty() {
        roff.control("SH", ["EXAMPLES"]);
        for line in &examples {
            sections::example(&mut roff, line);
        }
    }
    roff.control("SH", ["EXIT STATUS"]);
    if path.is_empty() {
        sections::root_exit_status(&mut roff);
    } else if let Some(text) = &after.exit_status {
        roff.text([roman(text.as_str())]);
    } else {
        roff.text([roman(
            "As each of its commands says (see their pages); 2 bad usage.",
        )]);
    }
    let top = path.first().copied().unwrap_or("");
    sections::environment(&mut roff, top);
    sections::files(&mut roff, top);
    roff.control("SH", ["SEE ALSO"]);
    let mut refs = Vec::new();
    for (i, (name, sec)) in sections::see_also(cmd, path).into_iter().enumerate() {
        if i > 0 {
            refs.push(roman(", "));
        }
        refs.push(bold(name));
        refs.push(roman(format!("({sec})")));
    }
    roff.text(refs);
    let _ = roff.to_writer(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

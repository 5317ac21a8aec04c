//! `completions` and `man`: shell completion scripts (clap_complete) and
//! man pages (clap_mangen), both generated from the command definitions,
//! so they can't drift from `--help`.

use std::io::Write;
use std::path::Path;

use clap::CommandFactory;

use super::{Cli, Failure};

/// Print the completion script for `shell` to stdout.
pub(crate) fn completions(shell: clap_complete::Shell) -> Result<(), Failure> {
    let mut cmd = Cli::command();
    let mut out = std::io::stdout().lock();
    clap_complete::generate(shell, &mut cmd, "zonemount", &mut out);
    quiet_pipe(out.flush())
        .map_err(|e| Failure::new(1, format!("cannot write the completions: {e}")))
}

/// A reader that stopped reading (`| head`) is not an error.
fn quiet_pipe(r: std::io::Result<()>) -> std::io::Result<()> {
    match r {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r,
    }
}

/// Print `zonemount(1)` to stdout, or with `dir` write it and one page per
/// command (`zonemount-mount.1`, ...) there.
pub(crate) fn man(dir: Option<&Path>) -> Result<(), Failure> {
    let cmd = Cli::command();
    let Some(dir) = dir else {
        let mut out = std::io::stdout().lock();
        return quiet_pipe(
            clap_mangen::Man::new(cmd)
                .render(&mut out)
                .and_then(|()| out.flush()),
        )
        .map_err(|e| Failure::new(1, format!("cannot write the man page: {e}")));
    };
    std::fs::create_dir_all(dir)
        .map_err(|e| Failure::new(1, format!("cannot create {}: {e}", dir.display())))?;
    clap_mangen::generate_to(cmd, dir).map_err(|e| {
        Failure::new(
            1,
            format!("cannot write man pages in {}: {e}", dir.display()),
        )
    })
}

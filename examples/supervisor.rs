//! A supervisor that embeds zonemount: mount a project's zones, then answer
//! each approval request on the terminal (or by a rule, with `--auto`).
//!
//! ```text
//! cargo run --example supervisor -- project.yaml /tmp/task-42 [--auto]
//! ```
//! With `--auto`, writes of `.md` files are allowed for their path and
//! everything else is denied, until the process is interrupted. Without
//! it, end of input (Ctrl-D) at a question stops: the requests still
//! waiting are denied and the mount goes away.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::time::Duration;

use zonemount::approval::Scope;
use zonemount::config::{self, LoadOptions};
use zonemount::mount::api;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(config), Some(mountpoint)) = (args.first(), args.get(1)) else {
        eprintln!("usage: supervisor CONFIG MOUNTPOINT [--auto]");
        std::process::exit(2);
    };
    let auto = args.iter().any(|a| a == "--auto");
    let config = PathBuf::from(config);
    let dir = config.parent().unwrap_or(Path::new(".")).to_path_buf();
    let table = config::load_project(Some(&config), &dir, &LoadOptions::from_host(false))?;
    config::prepare_backing(&table)?;
    let (mount, requests) = api::mount(&table, api::Options::new(mountpoint))?;
    println!(
        "mounted {}; waiting for requests",
        mount.mountpoint().display()
    );

    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    loop {
        let Some(req) = requests.recv_timeout(Duration::from_millis(500)) else {
            continue;
        };
        let i = req.info();
        // What the worker named is shown escaped: raw, it could redraw
        // this terminal.
        println!(
            "request {}: {} {} ({}) by pid {}: {}",
            i.id,
            i.class,
            i.shown_path(),
            i.op,
            i.pid,
            i.shown_cmdline()
        );
        if auto {
            let ok = i.class == "write" && i.path.ends_with(".md");
            let decided = if ok {
                req.allow(Scope::Path)
            } else {
                req.deny()
            };
            println!("  {} ({})", if ok { "allowed" } else { "denied" }, decided);
            continue;
        }
        println!("  allow once [o], path [p], zone [z], deny [d]?");
        let Some(Ok(answer)) = lines.next() else {
            break;
        };
        let decided = match answer.trim() {
            "o" => req.allow(Scope::Once),
            "p" => req.allow(Scope::Path),
            "z" => req.allow(Scope::Zone),
            _ => req.deny(),
        };
        if !decided {
            println!("  already answered elsewhere (or timed out)");
        }
    }
    // Dropping the receiver denies what is still waiting; unmount then.
    drop(requests);
    mount.unmount()?;
    Ok(())
}

//! The man pages' sections that clap doesn't make: EXAMPLES and EXIT
//! STATUS (from what each command's `--help` ends with), ENVIRONMENT,
//! FILES and SEE ALSO, and zonemount(1)'s own description, examples and
//! exit statuses.

use clap_mangen::roff::{Roff, bold, italic, roman};

/// What a command's `--help` ends with (`cli::help`), in parts.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct AfterHelp {
    /// Paragraphs before the examples, each on one line.
    pub(super) prose: Vec<String>,
    /// Example lines as written: `CMD` or `CMD   # what it does`.
    pub(super) examples: Vec<String>,
    /// The text after `Exit status:`, on one line.
    pub(super) exit_status: Option<String>,
}

impl AfterHelp {
    pub(super) fn parse(text: &str) -> AfterHelp {
        let mut out = AfterHelp::default();
        for block in text.split("\n\n") {
            let block = block.trim_matches('\n');
            if let Some(rest) = block.strip_prefix("Examples:") {
                out.examples.extend(
                    rest.lines()
                        .map(str::trim)
                        .filter(|l| !l.is_empty())
                        .map(str::to_owned),
                );
            } else if let Some(rest) = block.strip_prefix("Exit status:") {
                out.exit_status = Some(one_line(rest));
            } else if !block.trim().is_empty() {
                out.prose.push(one_line(block));
            }
        }
        out
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Columns an example's command may take: a page 80 wide, less the
/// section's and the example's indent.
const EXAMPLE_WIDTH: usize = 68;

/// One example: what it does (the `# ...` part) as a paragraph, then the
/// command unfilled and indented, broken (with `\`) only between words
/// outside quotes.
pub(super) fn example(roff: &mut Roff, line: &str) {
    let (cmd, what) = match line.find("  #") {
        Some(i) => (line[..i].trim(), Some(line[i + 3..].trim())),
        None => (line.trim(), None),
    };
    roff.control("PP", []);
    if let Some(what) = what {
        let mut s = what.to_owned();
        if let Some(first) = s.get(..1) {
            s.replace_range(..1, &first.to_uppercase());
        }
        roff.text([roman(s)]);
    }
    roff.control("RS", ["4"]);
    roff.control("nf", []);
    for l in shell_lines(cmd, EXAMPLE_WIDTH) {
        roff.text([roman(l)]);
    }
    roff.control("fi", []);
    roff.control("RE", []);
}

/// `cmd` in lines of at most `width` columns where it can be: broken only
/// between words outside quotes, each line but the last ending in ` \`,
/// the ones after it indented 4.
pub(super) fn shell_lines(cmd: &str, width: usize) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    let (mut cur, mut quote) = (String::new(), None);
    for c in cmd.chars() {
        match (c, quote) {
            (' ', None) => {
                if !cur.is_empty() {
                    words.push(std::mem::take(&mut cur));
                }
                continue;
            }
            ('\'' | '"', None) => quote = Some(c),
            (q, Some(open)) if q == open => quote = None,
            _ => {}
        }
        cur.push(c);
    }
    if !cur.is_empty() {
        words.push(cur);
    }
    if cmd.len() <= width {
        return vec![cmd.to_owned()];
    }
    let mut lines = vec![String::new()];
    for w in words {
        let room = if lines.len() == 1 { width } else { width - 4 };
        let Some(last) = lines.last_mut() else { break };
        if !last.is_empty() && last.len() + 1 + w.len() + 2 > room {
            last.push_str(" \\");
            lines.push(w);
        } else {
            if !last.is_empty() {
                last.push(' ');
            }
            last.push_str(&w);
        }
    }
    for l in lines.iter_mut().skip(1) {
        l.insert_str(0, "    ");
    }
    lines
}

/// zonemount(1)'s description, after clap's one line.
pub(super) fn root_description(roff: &mut Roff) {
    for para in [
        "zonemount presents zones, host directories each read-only, read-write or staged, as \
         one mounted tree for an AI worker. Each zone's rules say which writes, deletes and \
         reads are allowed (preApproved), asked for (the system call waits until a supervisor \
         decides, with zonemount approvals, mount --prompt or an --on-ask hook) or refused \
         (blocked: EPERM); which paths are hidden (they don't exist for the worker) or \
         protected (read-only); and, for a staged zone, that changes reach the backing \
         directory only when committed. The config format is in zonemount.yaml(5).",
        "zonemount mount makes a mount that outlives the command; zonemount run mounts on a \
         fresh directory, runs one command there (optionally in a bubblewrap sandbox) and \
         always unmounts. status, approvals, check, changes, commit, discard and review act on a live \
         mount through its control socket.",
    ] {
        roff.control("PP", []);
        roff.text([roman(para)]);
    }
    helper_form(roff);
}

/// The `mount.fuse3` helper form, on zonemount(1) and zonemount-mount(1).
pub(super) fn helper_form(roff: &mut Roff) {
    roff.control("SS", ["mount -t fuse.zonemount and /etc/fstab"]);
    roff.text([roman(
        "With fuse3 installed, mount(8) mounts type fuse.zonemount through mount.fuse3, which \
         runs zonemount SOURCE MOUNTPOINT -o OPTIONS; zonemount reads that as zonemount mount \
         --config SOURCE MOUNTPOINT. SOURCE is a config file or preset:NAME. A preset takes \
         its paths from the directory zonemount runs in, which under mount(8) is wherever \
         mount ran (/ at boot): preset:NAME needs dir=DIR, an absolute path, and zonemount \
         runs there (a relative SOURCE or zone= path is taken from it too). The -o options: \
         zone=NAME=PATH[:ro|rw|staged] (repeatable), worker=F, stage_dir=D, audit_log=F, \
         refusal_log=F, control=S, cache_ttl=S, busy_poll=US, dir=DIR, and the flags allow_other, \
         no_approvals, no_passthrough, writeback_cache, kernel_opens, io_uring, no_io_uring, quiet. \
         mount(8)'s own options (rw, nosuid, nodev, noexec, the atime ones, defaults, auto, \
         noauto, user, users, _netdev, nofail, x-*, comment=) are ignored; ro and anything \
         else is refused, exit 2. An fstab line:",
    )]);
    roff.control("PP", []);
    roff.control("RS", ["4"]);
    roff.control("nf", []);
    roff.text([roman(
        "preset:read-only /mnt/task fuse.zonemount noauto,dir=/srv/proj 0 0",
    )]);
    roff.control("fi", []);
    roff.control("RE", []);
}

/// zonemount(1)'s examples, as a command's `--help` writes them.
pub(super) const ROOT_EXAMPLES: &str = "\
zonemount run --preset workspace-write -- my-agent   # the current directory, .git protected, for one command
zonemount mount --config project.yaml /tmp/task-42   # a mount that stays until unmounted
zonemount approvals watch /tmp/task-42   # each request as it waits, from another terminal
zonemount approvals allow /tmp/task-42 7
zonemount changes --diff /tmp/task-42   # what a staged zone holds, not yet on the host
zonemount commit /tmp/task-42
zonemount unmount /tmp/task-42
zonemount doctor   # what this machine allows";

/// The exit statuses every command shares (the README's table).
pub(super) fn root_exit_status(roff: &mut Roff) {
    for (code, text) in [
        (
            "0",
            "Success (check: the operation would be allowed; doctor: a mount can be made here).",
        ),
        (
            "1",
            "A runtime failure: the mount call or an unmount failed, a daemon or control socket \
             could not be reached, an approval id is not pending, the runtime directory is not \
             the user's own.",
        ),
        (
            "2",
            "Bad usage or bad configuration: an unknown option, a config error (file:line \
             named), a missing or already-mounted mountpoint, a mountpoint inside a backing dir \
             or the reverse, a check PATH outside the mount.",
        ),
        ("3", "check: the operation would wait for approval (ask)."),
        ("4", "check: the operation would be refused."),
        (
            "5",
            "This machine doesn't allow the mount (no /dev/fuse, a device this user can't \
             open, no setuid fusermount3 for a user, no user_allow_other for --allow-other, a \
             mountpoint fusermount3 refuses); doctor exits 5 for the same.",
        ),
        (
            "6",
            "commit: some staged paths were not applied (the host changed them meanwhile, or a \
             worker still has files of the zone open for writing); they stay staged. discard: \
             a zone was left alone. review: a commit in it left conflicts.",
        ),
    ] {
        roff.control("TP", []);
        roff.text([bold(code)]);
        roff.text([roman(text)]);
    }
    roff.control("PP", []);
    roff.text([roman("run returns CMD's own status; see zonemount-run(1).")]);
}

/// Commands that keep or read mount records and control sockets.
const RECORDS: &[&str] = &[
    "mount",
    "unmount",
    "run",
    "list",
    "status",
    "approvals",
    "check",
    "changes",
    "commit",
    "discard",
    "review",
];
/// Commands that load a config.
const LOADS: &[&str] = &["mount", "run", "derive", "check"];
/// Commands that keep or read stage dirs.
const STAGES: &[&str] = &[
    "mount",
    "run",
    "changes",
    "commit",
    "discard",
    "review",
    "stages",
    "checkpoint",
    "checkpoints",
    "rewind",
];

/// (name, what it does, the commands it concerns; empty: every one).
const ENVIRONMENT: &[(&str, &str, &[&str])] = &[
    (
        "RUST_LOG",
        "What is logged on stderr (or, for a detached daemon, in ZONEMOUNT_LOG_FILE), e.g. \
         zonemount=info or zonemount=debug; default warn.",
        &[],
    ),
    (
        "NO_COLOR",
        "Set to anything non-empty: log lines are never coloured (otherwise they are on a \
         terminal only).",
        &[],
    ),
    (
        "ZONEMOUNT_LOG_FILE",
        "The detached daemon's log is appended here (default: discarded): made 0600, or an \
         existing file of this user's that no one else may write; never a symlink.",
        &["mount", "run"],
    ),
    (
        "XDG_RUNTIME_DIR",
        "A user's mount records and control sockets are in $XDG_RUNTIME_DIR/zonemount (see \
         FILES).",
        RECORDS,
    ),
    (
        "XDG_STATE_HOME, HOME",
        "A user's stage dirs are under $XDG_STATE_HOME/zonemount/stages, else \
         $HOME/.local/state/zonemount/stages.",
        STAGES,
    ),
    (
        "ZONEMOUNT_EXTRA_HOMES",
        "Colon-separated directories whose sensitive roots (.ssh, .aws, ...) are protected \
         too, besides every home in /etc/passwd and $HOME. It can only add protection; set \
         it the same for mount and check.",
        LOADS,
    ),
    (
        "NOTIFY_SOCKET",
        "With --foreground under systemd (Type=notify): READY=1 is sent once the mount is \
         live, STOPPING=1 when it unmounts.",
        &["mount"],
    ),
    (
        "PAGER",
        "review (and run --review) shows a diff through it when set and stdout is a \
         terminal (run by sh -c); otherwise the diff is printed.",
        &["review", "run"],
    ),
    (
        "TMPDIR",
        "run makes its mountpoint here (default /tmp).",
        &["run"],
    ),
    (
        "ZONEMOUNT_ROOT, ZONEMOUNT_WRITABLE, ZONEMOUNT_READONLY, ZONEMOUNT_STAGED, ZONEMOUNT_REFUSALS",
        "Set by run for CMD: the mount's root, the colon-separated writable, read-only and \
         staged zone paths, and the file that tells it why each call was refused.",
        &["run"],
    ),
    (
        "ZONEMOUNT_ID, ZONEMOUNT_ZONE, ZONEMOUNT_CLASS, ZONEMOUNT_OP, ZONEMOUNT_PATH, \
         ZONEMOUNT_TARGET, ZONEMOUNT_PID, ZONEMOUNT_UID, ZONEMOUNT_CMDLINE, ZONEMOUNT_TIME, \
         ZONEMOUNT_MOUNT",
        "Set for the --on-ask command: the waiting request (also on its stdin as JSON).",
        &["mount", "run"],
    ),
];

pub(super) fn environment(roff: &mut Roff, top: &str) {
    list_section(roff, "ENVIRONMENT", ENVIRONMENT, top);
}

/// (path, what it is, the commands it concerns; empty: every one).
const FILES: &[(&str, &str, &[&str])] = &[
    (
        "./zonemount.yaml",
        "The project config when --config is not given (else the embedded default); see \
         zonemount.yaml(5).",
        LOADS,
    ),
    (
        "/run/zonemount/",
        "Root's mount records and control sockets.",
        RECORDS,
    ),
    (
        "$XDG_RUNTIME_DIR/zonemount/, /run/user/UID/zonemount/, /tmp/zonemount-UID/",
        "A user's mount records and control sockets, the first that applies; kept 0700 and \
         refused when another user could write there.",
        RECORDS,
    ),
    (
        "/var/lib/zonemount/stages/",
        "Root's stage dirs (a staged zone's changes until committed).",
        STAGES,
    ),
    (
        "~/.local/state/zonemount/stages/",
        "A user's stage dirs ($XDG_STATE_HOME/zonemount/stages when set).",
        STAGES,
    ),
    (
        "/dev/fuse",
        "The FUSE device a mount is served through.",
        &["mount", "run", "doctor"],
    ),
    (
        "/etc/fuse.conf",
        "user_allow_other there lets a user mount with --allow-other.",
        &["mount", "run", "doctor"],
    ),
    (
        "/etc/fstab",
        "Lines of type fuse.zonemount, mounted through mount.fuse3 (see DESCRIPTION of \
         zonemount(1)).",
        &["mount"],
    ),
    (
        "/etc/zonemount/INSTANCE.yaml, ~/.config/zonemount/INSTANCE.yaml",
        "The config of the systemd unit zonemount@INSTANCE.service (system, user), INSTANCE \
         being the mountpoint as systemd-escape --path writes it.",
        &["mount"],
    ),
    (
        "/usr/share/bash-completion/completions/zonemount, \
         /usr/share/zsh/vendor-completions/_zonemount, \
         /usr/share/fish/vendor_completions.d/zonemount.fish",
        "Where the Debian package installs the completion scripts (each shell loads them from \
         there).",
        &["completions"],
    ),
    (
        "/usr/share/man/man1/, /usr/share/man/man5/",
        "Where the Debian package installs these pages (gzipped).",
        &["man"],
    ),
];

pub(super) fn files(roff: &mut Roff, top: &str) {
    list_section(roff, "FILES", FILES, top);
}

fn list_section(roff: &mut Roff, heading: &str, rows: &[(&str, &str, &[&str])], top: &str) {
    let rows: Vec<_> = rows
        .iter()
        .filter(|(_, _, cmds)| top.is_empty() || cmds.is_empty() || cmds.contains(&top))
        .collect();
    if rows.is_empty() {
        return;
    }
    roff.control("SH", [heading]);
    for (name, text, _) in rows {
        roff.control("TP", []);
        roff.text([italic(*name)]);
        roff.text([roman(*text)]);
    }
}

/// The pages a command's page points to: (name, section).
pub(super) fn see_also(cmd: &clap::Command, path: &[&str]) -> Vec<(String, &'static str)> {
    let page = |words: &[&str]| {
        if words.is_empty() {
            "zonemount".to_owned()
        } else {
            format!("zonemount-{}", words.join("-"))
        }
    };
    let mut out = Vec::new();
    for n in 0..path.len() {
        out.push((page(&path[..n]), "1"));
    }
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let mut words = path.to_vec();
        words.push(sub.get_name());
        out.push((page(&words), "1"));
    }
    let top = path.first().copied().unwrap_or("");
    if top.is_empty() || LOADS.contains(&top) {
        out.push(("zonemount.yaml".to_owned(), "5"));
    }
    let extra: &[(&str, &'static str)] = match top {
        "" => &[
            ("fusermount3", "1"),
            ("mount.fuse3", "8"),
            ("fstab", "5"),
            ("bwrap", "1"),
            ("systemd.service", "5"),
        ],
        "mount" => &[("fusermount3", "1"), ("mount.fuse3", "8"), ("fstab", "5")],
        "run" => &[("bwrap", "1")],
        _ => &[],
    };
    out.extend(extra.iter().map(|(n, s)| ((*n).to_owned(), *s)));
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn after_help_splits_into_prose_examples_and_exit_status() {
        let a = AfterHelp::parse(
            "Mount options are those\nof mount.\n\nExamples:\n  zonemount run -- make   # build\n  zonemount run -- x\n\nExit status: 0; 2 bad\nusage.",
        );
        assert_eq!(a.prose, ["Mount options are those of mount."]);
        assert_eq!(
            a.examples,
            ["zonemount run -- make   # build", "zonemount run -- x"]
        );
        assert_eq!(a.exit_status.as_deref(), Some("0; 2 bad usage."));
    }

    #[test]
    fn a_long_command_breaks_between_words_outside_quotes() {
        let cmd = "zonemount run --config project.yaml --worker formatter.worker --timeout 600 -- sh -c 'echo a b c d e f g h'";
        let lines = shell_lines(cmd, 40);
        for l in &lines {
            assert!(l.len() <= 40 || !l.contains(' '), "{l:?}");
        }
        assert!(lines.iter().rev().skip(1).all(|l| l.ends_with(" \\")));
        // Joined as a shell joins them, the words are the command's.
        let joined: String = lines
            .iter()
            .map(|l| l.trim_end_matches('\\').trim())
            .collect::<Vec<_>>()
            .join(" ");
        assert_eq!(joined, cmd);
        assert!(lines.iter().any(|l| l.contains("'echo a b c d e f g h'")));
        assert_eq!(shell_lines("zonemount list", 40), ["zonemount list"]);
    }
}

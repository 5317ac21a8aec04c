//! Facts about a calling process, read from `/proc`.
//!
//! FUSE gives the calling *thread* id. The parsers are pure (tested on
//! text); thin wrappers read the files. A thread that is gone reads as
//! gone; nothing here fails.

use std::path::Path;

/// Bit of SIGKILL in a `SigPnd`/`ShdPnd` mask (signal 9 is bit 8).
const SIGKILL_BIT: u64 = 1 << 8;

/// Who is asking.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// The process (thread group) id.
    pub pid: u32,
    /// The thread that made the call.
    pub tid: u32,
    /// `/proc/PID/cmdline`, arguments joined by spaces (empty if
    /// unknown), exact: its bytes need not be UTF-8.
    pub cmdline: Vec<u8>,
    /// Its session id when it asked (None: gone already): kept with a
    /// request, so the asker's session is still known once it has exited.
    pub session: Option<u32>,
}

impl Caller {
    /// Read the facts for thread `tid` (FUSE's pid).
    pub fn read(tid: u32) -> Caller {
        let status = crate::text::read_lossy(format!("/proc/{tid}/status")).unwrap_or_default();
        let pid = field(&status, "Tgid:")
            .and_then(|v| v.parse().ok())
            .unwrap_or(tid);
        Caller {
            pid,
            tid,
            cmdline: read_cmdline(pid),
            session: session_of(pid),
        }
    }
}

/// The most bytes of a caller's command line kept (for the approver, the
/// ledger and `approvals list`); a longer one ends in " …".
pub const CMDLINE_MAX: usize = 4096;

/// The first [`CMDLINE_MAX`] bytes of `/proc/PID/cmdline`, joined; read no
/// further (a worker's arguments may be megabytes).
fn read_cmdline(pid: u32) -> Vec<u8> {
    use std::io::Read;
    let mut raw = Vec::new();
    let read = std::fs::File::open(format!("/proc/{pid}/cmdline"))
        .and_then(|f| f.take(CMDLINE_MAX as u64 + 1).read_to_end(&mut raw));
    if read.is_err() {
        return Vec::new();
    }
    let cut = raw.len() > CMDLINE_MAX;
    raw.truncate(CMDLINE_MAX);
    let mut line = join_cmdline(&raw);
    if cut {
        line.extend_from_slice(" …".as_bytes());
    }
    line
}

/// The process (thread group) of thread `tid`; None when it is gone.
pub fn process_of(tid: u32) -> Option<u32> {
    let status = crate::text::read_lossy(format!("/proc/{tid}/status"))?;
    field(&status, "Tgid:").and_then(|v| v.parse().ok())
}

/// (parent pid, session id) from the text of `/proc/PID/stat`: the fields
/// after the command name, which is in parentheses and may hold anything.
pub fn parent_and_session(stat: &str) -> Option<(u32, u32)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    // state, ppid, pgrp, session
    let ppid = f.nth(1)?.parse().ok()?;
    let session = f.nth(1)?.parse().ok()?;
    Some((ppid, session))
}

/// Process `pid`'s session id; None when it is gone.
pub fn session_of(pid: u32) -> Option<u32> {
    stat_of(pid).map(|(_, session)| session)
}

fn stat_of(pid: u32) -> Option<(u32, u32)> {
    parent_and_session(&stat_text(pid)?)
}

/// The text of `/proc/PID/stat` (None once it is gone), its command name
/// read lossily: a process may name itself with bytes that are not UTF-8
/// (`prctl(PR_SET_NAME)`), and must not vanish from every check that
/// reads its session for that.
pub fn stat_text(pid: u32) -> Option<String> {
    crate::text::read_lossy(format!("/proc/{pid}/stat"))
}

/// How a decider is kin to the process it would decide for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kin {
    /// In the same session (the same terminal's shell, or what it ran).
    Session,
    /// Started by it (directly or not).
    Descendant,
}

/// Whether `approver` may not decide a request of `asker`: it is in the
/// asker's session, or the asker is among its ancestors (a process the
/// asking worker started). None when it may (including when the asker is
/// gone). This stops a worker's naive attempt to approve itself, not a
/// determined one: `setsid` and a double fork leave both the session and
/// the ancestry.
pub fn kin(asker: u32, approver: u32) -> Option<Kin> {
    let (_, asker_session) = stat_of(asker)?;
    let (mut parent, session) = stat_of(approver)?;
    if session == asker_session {
        return Some(Kin::Session);
    }
    // Bounded: pids climb towards 1.
    for _ in 0..4096 {
        if parent == asker {
            return Some(Kin::Descendant);
        }
        if parent <= 1 {
            break;
        }
        parent = stat_of(parent)?.0;
    }
    None
}

/// Process `pid`'s command name (`/proc/PID/comm`), escaped for people
/// (a worker chose it); `?` when gone.
pub fn comm(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/comm")).map_or_else(
        |_| "?".to_owned(),
        |c| crate::text::cmdline(c.strip_suffix(b"\n").unwrap_or(&c)),
    )
}

/// NUL-separated arguments as one line, joined by spaces, the bytes
/// kept exact (shown escaped, carried exact in JSON: see `text`).
pub fn join_cmdline(raw: &[u8]) -> Vec<u8> {
    raw.split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .collect::<Vec<_>>()
        .join(&b' ')
}

fn field<'a>(status: &'a str, name: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .map(str::trim)
}

/// Whether a `/proc/.../status` text shows SIGKILL pending on the thread
/// (`SigPnd`) or its process (`ShdPnd`).
pub fn kill_pending(status: &str) -> bool {
    ["SigPnd:", "ShdPnd:"].iter().any(|name| {
        field(status, name)
            .and_then(|v| u64::from_str_radix(v, 16).ok())
            .is_some_and(|mask| mask & SIGKILL_BIT != 0)
    })
}

/// Whether every signal a `/proc/.../status` text shows pending on the
/// thread or its process (`SigPnd`, `ShdPnd`) would only stop, continue
/// or be ignored: SIGSTOP, or one neither caught (`SigCgt`) nor fatal by
/// default (SIGTSTP, SIGTTIN, SIGTTOU, SIGCONT, SIGCHLD, SIGURG,
/// SIGWINCH, or one in `SigIgn`). False when none is pending. The kernel
/// interrupts a waiting FUSE call on any signal, a `kill -STOP` too; only
/// a fatal or caught one should end it (EINTR).
pub fn only_stopping(status: &str) -> bool {
    let mask = |name: &str| {
        field(status, name)
            .and_then(|v| u64::from_str_radix(v, 16).ok())
            .unwrap_or(0)
    };
    let pending = mask("SigPnd:") | mask("ShdPnd:");
    let (caught, ignored) = (mask("SigCgt:"), mask("SigIgn:"));
    let bit = |sig: i32| 1u64 << (sig - 1);
    let harmless = [
        libc::SIGTSTP,
        libc::SIGTTIN,
        libc::SIGTTOU,
        libc::SIGCONT,
        libc::SIGCHLD,
        libc::SIGURG,
        libc::SIGWINCH,
    ]
    .iter()
    .fold(0, |m, s| m | bit(*s));
    let stopping = bit(libc::SIGSTOP) | ((harmless | ignored) & !caught);
    pending != 0 && pending & !stopping == 0
}

/// [`only_stopping`] for thread `tid` (false when it is gone).
pub fn only_stopping_tid(tid: u32) -> bool {
    crate::text::read_lossy(format!("/proc/{tid}/status")).is_some_and(|s| only_stopping(&s))
}

/// Whether a `/proc/.../status` text shows a signal pending that should
/// end a waiting call: a fatal or caught one (any pending signal, unless
/// [`only_stopping`]).
pub fn interrupting(status: &str) -> bool {
    let pending = ["SigPnd:", "ShdPnd:"]
        .iter()
        .any(|n| field(status, n).is_some_and(|v| v.bytes().any(|b| b != b'0')));
    pending && !only_stopping(status)
}

/// [`interrupting`] for thread `tid`: after a stop used up its call's one
/// interrupt, the daemon's watcher looks for such a signal itself.
pub fn interrupting_tid(tid: u32) -> bool {
    crate::text::read_lossy(format!("/proc/{tid}/status")).is_some_and(|s| interrupting(&s))
}

/// Whether the thread `tid` can no longer take an answer: it is gone, a
/// zombie, or a fatal signal is pending on it.
pub fn is_dying(tid: u32) -> bool {
    let path = format!("/proc/{tid}/status");
    if !Path::new(&path).exists() {
        return true;
    }
    match std::fs::read_to_string(&path) {
        Err(_) => true,
        Ok(status) => {
            let zombie = field(&status, "State:").is_some_and(|s| s.starts_with('Z'));
            zombie || kill_pending(&status)
        }
    }
}

/// Whether thread `tid` sleeps uninterruptibly (`D` in `/proc/TID/stat`):
/// blocked in the kernel, on a lock for instance. None when it is gone or
/// its state can't be read.
pub fn blocked_in_kernel(tid: u32) -> Option<bool> {
    let stat = crate::text::read_lossy(format!("/proc/{tid}/stat"))?;
    // The state follows the command name, which may hold anything but
    // ends at the last ')'.
    let state = stat
        .get(stat.rfind(')')? + 1..)?
        .trim_start()
        .chars()
        .next()?;
    Some(state == 'D')
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tsh\nState:\tD (disk sleep)\nTgid:\t4242\nPid:\t4243\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\n";

    /// A process that named itself with bytes that are not UTF-8 still has
    /// a session and a parent (it must not look gone to the rule that
    /// keeps a worker from deciding for itself).
    #[test]
    fn a_name_not_utf8_leaves_the_session_readable() {
        let mut child = std::process::Command::new("python3")
            .args([
                "-c",
                "import ctypes, sys, time\nctypes.CDLL(None).prctl(15, b'\\xff\\xfekk', 0, 0, 0)\nprint(flush=True)\ntime.sleep(5)",
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        let _ = std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        );
        let pid = child.id();
        let comm = std::fs::read(format!("/proc/{pid}/comm")).unwrap();
        let session = session_of(pid);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(&comm[..2], b"\xff\xfe", "the name was set");
        assert_eq!(session, session_of(std::process::id()), "its session");
    }

    /// A command line of any length costs at most [`CMDLINE_MAX`] bytes,
    /// its cut marked.
    #[test]
    fn a_long_command_line_is_cut() {
        let long = "y".repeat(100_000);
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 10", &long])
            .spawn()
            .unwrap();
        // Until the child has exec'd sh, its cmdline is this test's.
        let mut c = Caller::read(child.id());
        for _ in 0..200 {
            if c.cmdline.starts_with(b"sh -c sleep 10 y") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
            c = Caller::read(child.id());
        }
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            c.cmdline.starts_with(b"sh -c sleep 10 yyy"),
            "{:?}",
            &c.cmdline[..40]
        );
        assert!(c.cmdline.ends_with(" …".as_bytes()));
        assert_eq!(c.cmdline.len(), CMDLINE_MAX + " …".len());
        let me = Caller::read(std::process::id());
        assert!(
            !me.cmdline.ends_with(" …".as_bytes()),
            "a short one is whole"
        );
    }

    #[test]
    fn no_signal_pending() {
        assert!(!kill_pending(STATUS));
    }

    #[test]
    fn sigkill_on_the_thread_or_the_process() {
        let t = STATUS.replace("SigPnd:\t0000000000000000", "SigPnd:\t0000000000000100");
        assert!(kill_pending(&t));
        let p = STATUS.replace("ShdPnd:\t0000000000000000", "ShdPnd:\t0000000000000100");
        assert!(kill_pending(&p));
        // SIGTERM (bit 14) alone is not fatal-for-sure: not withdrawn.
        let term = STATUS.replace("ShdPnd:\t0000000000000000", "ShdPnd:\t0000000000004000");
        assert!(!kill_pending(&term));
    }

    /// `kill -STOP` of a caller waiting for a decision interrupts its call
    /// in the kernel; only a fatal or caught signal should end it (found
    /// by an attack pass: a stopped open failed with EINTR on SIGCONT).
    #[test]
    fn a_stop_alone_is_not_an_interrupt_a_caught_or_fatal_signal_is() {
        let with = |pnd: &str, cgt: &str, ign: &str| {
            format!("{STATUS}SigIgn:\t{ign}\nSigCgt:\t{cgt}\n")
                .replace("ShdPnd:\t0000000000000000", &format!("ShdPnd:\t{pnd}"))
        };
        let none = "0000000000000000";
        // SIGSTOP (19).
        assert!(only_stopping(&with("0000000000040000", none, none)));
        // SIGTSTP (20) not caught: stops; caught: an interrupt.
        assert!(only_stopping(&with("0000000000080000", none, none)));
        assert!(!only_stopping(&with(
            "0000000000080000",
            "0000000000080000",
            none
        )));
        // SIGSTOP with SIGINT (2) by default: fatal, an interrupt.
        assert!(!only_stopping(&with("0000000000040002", none, none)));
        // SIGINT ignored: nothing happens to the call.
        assert!(only_stopping(&with(
            "0000000000000002",
            none,
            "0000000000000002"
        )));
        // SIGCHLD (17) not caught: ignored by default.
        assert!(only_stopping(&with("0000000000010000", none, none)));
        // Nothing pending: a real interrupt (the signal was taken already).
        assert!(!only_stopping(&with(none, none, none)));
        // What the watcher looks for once a stop was seen: a fatal or
        // caught signal, nothing else.
        assert!(
            interrupting(&with("0000000000004000", none, none)),
            "SIGTERM"
        );
        assert!(
            interrupting(&with("0000000000000002", "0000000000000002", none)),
            "caught SIGINT"
        );
        assert!(!interrupting(&with(none, none, none)));
        assert!(
            !interrupting(&with("0000000000040000", none, none)),
            "SIGSTOP"
        );
        assert!(
            !interrupting(&with("0000000000010000", none, none)),
            "SIGCHLD"
        );
    }

    #[test]
    fn stat_fields_after_an_awkward_name() {
        let stat = "4242 (a) b (c) S 17 4242 99 0 -1 4194560";
        assert_eq!(parent_and_session(stat), Some((17, 99)));
        assert_eq!(parent_and_session("garbage"), None);
    }

    #[test]
    fn a_process_is_kin_to_itself_and_its_session_not_to_a_gone_one() {
        let me = std::process::id();
        assert_eq!(kin(me, me), Some(Kin::Session));
        assert_eq!(kin(u32::MAX - 1, me), None, "asker gone");
    }

    #[test]
    fn cmdline_is_joined() {
        assert_eq!(join_cmdline(b"sh\0-c\0echo hi\0"), b"sh -c echo hi");
        assert_eq!(join_cmdline(b""), b"");
        assert_eq!(join_cmdline(b"vim\0\xff\x1b\0"), b"vim \xff\x1b", "exact");
    }

    #[test]
    fn this_thread_is_alive_and_a_gone_one_is_dying() {
        let me = std::process::id();
        assert!(!is_dying(me));
        let c = Caller::read(me);
        assert_eq!(c.pid, me);
        assert!(!c.cmdline.is_empty());
        assert!(is_dying(u32::MAX - 1));
    }
}

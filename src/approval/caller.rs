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
    /// `/proc/PID/cmdline`, arguments joined by spaces (empty if unknown).
    pub cmdline: String,
}

impl Caller {
    /// Read the facts for thread `tid` (FUSE's pid).
    pub fn read(tid: u32) -> Caller {
        let status = std::fs::read_to_string(format!("/proc/{tid}/status")).unwrap_or_default();
        let pid = field(&status, "Tgid:")
            .and_then(|v| v.parse().ok())
            .unwrap_or(tid);
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|raw| join_cmdline(&raw))
            .unwrap_or_default();
        Caller { pid, tid, cmdline }
    }
}

/// NUL-separated arguments as one line (lossy UTF-8).
pub fn join_cmdline(raw: &[u8]) -> String {
    raw.split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(String::from_utf8_lossy)
        .collect::<Vec<_>>()
        .join(" ")
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

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tsh\nState:\tD (disk sleep)\nTgid:\t4242\nPid:\t4243\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\n";

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

    #[test]
    fn cmdline_is_joined() {
        assert_eq!(join_cmdline(b"sh\0-c\0echo hi\0"), "sh -c echo hi");
        assert_eq!(join_cmdline(b""), "");
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

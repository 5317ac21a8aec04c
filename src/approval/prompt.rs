//! `--prompt`: answer requests with one key on the terminal of a
//! foreground mount.
//!
//! Requests queue up oldest first; the oldest is shown with its caller and
//! a key line: `o` allow once, `p` allow for this path, `z` allow for the
//! zone, `d` deny, `s` skip (look at the next one). A request answered
//! elsewhere (CLI, timeout) leaves the queue with a note. The terminal is
//! put in non-canonical, no-echo mode (signals still work: Ctrl-C unmounts)
//! and restored when the guard drops.
//!
//! Who else can type here: where the kernel lets a process push bytes
//! into its controlling terminal's input (TIOCSTI: `dev.tty.legacy_tiocsti`
//! 1, or a kernel before 6.2 that has no such switch), every process of
//! the terminal's session can, a worker started from this terminal too.
//! A key is then taken for a request only if, when the request was shown
//! and when the key came, no process of that session ran but this one and
//! its ancestors (the shell it was started from; `--on-ask` hooks run in
//! sessions of their own): a process can join a session only by being
//! forked by a member, so none that could type can appear in between
//! unless this one starts it (a process counts until every thread of it
//! has ended). A key read before the request was shown answers nothing
//! (so a process that pushes one after it was shown was there when it was
//! checked), and a key that comes once the terminal is back in line mode
//! (`^Z`, then the shell's `fg`, restores it: keys then wait in a line
//! while nothing checks) is dropped with all that was queued, and the
//! prompt's mode set again. Otherwise the prompt says which process and leaves the
//! decision to `zonemount approvals`. A process with CAP_SYS_ADMIN can
//! push keys into any terminal it opens, from any session: that is past
//! what a prompt can see (docs/approvals.md says so).

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::mpsc;

use super::{Approvals, Decision, Event, RequestInfo, Scope};
use super::{Listener, Resolution};

/// What a key means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    Decide(Decision),
    Skip,
    Ignore,
}

/// The one place keys get their meaning.
pub fn key(k: u8) -> Key {
    match k.to_ascii_lowercase() {
        b'o' | b'a' | b'y' => Key::Decide(Decision::Allow(Scope::Once)),
        b'p' => Key::Decide(Decision::Allow(Scope::Path)),
        b'z' => Key::Decide(Decision::Allow(Scope::Zone)),
        b'd' | b'n' => Key::Decide(Decision::Deny),
        b's' | b' ' => Key::Skip,
        _ => Key::Ignore,
    }
}

/// How a request is shown.
pub fn render(info: &RequestInfo) -> String {
    let target = info
        .shown_target()
        .map(|t| format!(" -> {t}"))
        .unwrap_or_default();
    format!(
        "zonemount: request {id}: {class} {path}{target} ({op})\r\n  by pid {pid} uid {uid}: {cmd}\r\n  [o] allow once  [p] allow path  [z] allow zone  [d] deny  [s] skip > ",
        id = info.id,
        class = info.class,
        path = info.shown_path(),
        op = info.op,
        pid = info.pid,
        uid = info.uid,
        cmd = info.shown_cmdline(),
    )
}

enum Msg {
    Event(Box<Event>),
    /// A key, and when it was read.
    Key(u8, std::time::Instant),
    /// The terminal was found back in line mode (the prompt stopped and
    /// brought back, `^Z` then `fg`): what was queued meanwhile is gone.
    Reset,
}

struct Feed(mpsc::Sender<Msg>);

impl Listener for Feed {
    fn event(&self, ev: &Event) {
        let _ = self.0.send(Msg::Event(Box::new(ev.clone())));
    }
}

/// Restores the terminal when dropped.
pub struct Guard {
    saved: Option<rustix::termios::Termios>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(t) = &self.saved {
            let _ = rustix::termios::tcsetattr(
                std::io::stdin().as_fd(),
                rustix::termios::OptionalActions::Now,
                t,
            );
        }
    }
}

/// Whether stdin is a terminal (where `--prompt` can work).
pub fn stdin_is_tty() -> bool {
    rustix::termios::isatty(std::io::stdin().as_fd())
}

/// Start prompting on this process's terminal.
pub fn start(broker: &Approvals) -> Guard {
    let stdin = std::io::stdin();
    let saved = rustix::termios::tcgetattr(stdin.as_fd()).ok();
    let raw = saved.clone().map(|mut raw| {
        raw.local_modes -= rustix::termios::LocalModes::ICANON | rustix::termios::LocalModes::ECHO;
        let _ =
            rustix::termios::tcsetattr(stdin.as_fd(), rustix::termios::OptionalActions::Now, &raw);
        raw
    });
    let (tx, rx) = mpsc::channel();
    broker.subscribe(Arc::new(Feed(tx.clone())));
    let keys = std::thread::Builder::new()
        .name("zm-prompt-keys".into())
        .spawn(move || {
            let mut b = [0u8; 1];
            let mut input = std::io::stdin();
            while let Ok(1) = input.read(&mut b) {
                // Back in line mode (a shell's `fg` restores it): this key
                // came in a line, typed or pushed while no check saw it.
                // The prompt's mode again, the queue dropped, the key asked
                // for again.
                let stdin = std::io::stdin();
                let now = rustix::termios::tcgetattr(stdin.as_fd());
                if let (Some(raw), Ok(now)) = (&raw, now) {
                    if now
                        .local_modes
                        .contains(rustix::termios::LocalModes::ICANON)
                    {
                        let _ = rustix::termios::tcsetattr(
                            stdin.as_fd(),
                            rustix::termios::OptionalActions::Now,
                            raw,
                        );
                        let _ = rustix::termios::tcflush(
                            stdin.as_fd(),
                            rustix::termios::QueueSelector::IFlush,
                        );
                        if tx.send(Msg::Reset).is_err() {
                            return;
                        }
                        continue;
                    }
                }
                if tx.send(Msg::Key(b[0], std::time::Instant::now())).is_err() {
                    return;
                }
            }
        });
    let b = broker.clone();
    let ui = std::thread::Builder::new()
        .name("zm-prompt".into())
        .spawn(move || run(&b, &rx));
    if keys.is_err() || ui.is_err() {
        tracing::warn!("--prompt: cannot start the prompt threads");
    }
    Guard { saved }
}

fn say(text: &str) {
    let mut out = std::io::stdout();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// Whether the kernel lets a process push input into its controlling
/// terminal (`TIOCSTI` without CAP_SYS_ADMIN): `dev.tty.legacy_tiocsti`
/// is 1, or missing (kernels before 6.2 always let it).
fn keys_can_be_pushed() -> bool {
    std::fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti").map_or(true, |v| v.trim() != "0")
}

/// A process of `session` other than `me` and its ancestors: one that
/// could push keys into the session's terminal (pid, and its command line
/// as every human view shows it). A child counts: a worker started with
/// `worker & exec zonemount mount --prompt` is the daemon's child.
fn other_member(session: u32, me: u32) -> Option<(u32, String)> {
    use super::caller::{parent_and_session, stat_text};
    let text = stat_text;
    let stat = |pid: u32| text(pid).and_then(|s| parent_and_session(&s));
    // A zombie (an exited child not yet reaped) types nothing, but only
    // once every thread has ended: a process whose main thread alone
    // exited shows as a zombie while its other threads run on.
    let dead = |stat: &str| {
        stat.rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next())
            .is_none_or(|state| state == "Z" || state == "X")
    };
    let gone = |pid: u32| match std::fs::read_dir(format!("/proc/{pid}/task")) {
        // A task gone between the listing and the read has ended too.
        Ok(tasks) => tasks
            .flatten()
            .all(|t| crate::text::read_lossy(t.path().join("stat")).is_none_or(|s| dead(&s))),
        Err(_) => text(pid).is_none_or(|s| dead(&s)),
    };
    let mut ancestors = vec![me];
    let mut at = me;
    // Bounded: pids climb towards 1.
    for _ in 0..4096 {
        match stat(at) {
            Some((parent, _)) if parent > 0 && !ancestors.contains(&parent) => {
                ancestors.push(parent);
                at = parent;
            }
            _ => break,
        }
    }
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let (_, sid) = stat(pid)?;
        if sid != session || ancestors.contains(&pid) || gone(pid) {
            return None;
        }
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmd: Vec<u8> = cmd
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .collect::<Vec<_>>()
            .join(&b' ');
        Some((pid, crate::text::cmdline(&cmd)))
    })
}

/// Who besides the human could type the next key on this terminal (see
/// the module's doc): None when nobody can.
fn could_type() -> Option<(u32, String)> {
    if !keys_can_be_pushed() {
        return None;
    }
    let me = std::process::id();
    match rustix::termios::tcgetsid(std::io::stdin().as_fd()) {
        Ok(sid) => other_member(sid.as_raw_nonzero().get() as u32, me),
        // No session to look at: nobody can be told apart.
        Err(e) => Some((0, format!("the terminal's session is unknown ({e})"))),
    }
}

fn not_taken(id: u64, who: &(u32, String)) -> String {
    format!(
        "\r\n  request {id}: key not taken: pid {} ({}) also runs on this terminal and could type on it; decide it from another terminal with `zonemount approvals allow|deny MOUNTPOINT {id}`\r\n",
        who.0, who.1
    )
}

fn run(broker: &Approvals, rx: &mpsc::Receiver<Msg>) {
    let uid = rustix::process::geteuid().as_raw();
    let mut queue: VecDeque<RequestInfo> = broker.pending().into();
    // Requests shown while another process could type: no key for them.
    let mut typed_on: std::collections::HashMap<u64, (u32, String)> = Default::default();
    // When the front request was last shown: a key read before that was
    // not an answer to it (nobody had seen it), and a process that pushes
    // one after it was alive when it was shown, so `typed_on` has it.
    let mut shown_at = std::time::Instant::now();
    let show = |info: &RequestInfo,
                typed_on: &mut std::collections::HashMap<u64, (u32, String)>,
                shown_at: &mut std::time::Instant| {
        *shown_at = std::time::Instant::now();
        if let Some(who) = could_type() {
            typed_on.entry(info.id).or_insert(who);
        }
        say(&render(info));
    };
    if let Some(front) = queue.front() {
        show(front, &mut typed_on, &mut shown_at);
    }
    while let Ok(msg) = rx.recv() {
        match msg {
            Msg::Event(ev) => match *ev {
                Event::Requested(info) => {
                    queue.push_back(info);
                    if queue.len() == 1 {
                        show(&queue[0], &mut typed_on, &mut shown_at);
                    }
                }
                Event::Resolved { id, resolution } => {
                    let was_front = queue.front().is_some_and(|r| r.id == id);
                    let before = queue.len();
                    queue.retain(|r| r.id != id);
                    if was_front && queue.len() < before {
                        say(&format!("\r\n  request {id}: {}\r\n", outcome(&resolution)));
                        if let Some(next) = queue.front() {
                            show(next, &mut typed_on, &mut shown_at);
                        }
                    }
                    typed_on.remove(&id);
                }
            },
            Msg::Reset => {
                say(
                    "\r\n  the terminal was back in line mode (the prompt was stopped?): what was typed meanwhile is dropped\r\n",
                );
                if let Some(front) = queue.front() {
                    show(front, &mut typed_on, &mut shown_at);
                }
            }
            Msg::Key(k, at) => {
                let Some(front) = queue.front().cloned() else {
                    continue;
                };
                if at < shown_at {
                    continue;
                }
                match key(k) {
                    Key::Ignore => {}
                    Key::Skip => {
                        queue.rotate_left(1);
                        say("skipped\r\n");
                        if let Some(next) = queue.front() {
                            show(next, &mut typed_on, &mut shown_at);
                        }
                    }
                    Key::Decide(d) => {
                        let who = typed_on.get(&front.id).cloned().or_else(could_type);
                        if let Some(who) = who {
                            say(&not_taken(front.id, &who));
                            typed_on.insert(front.id, who);
                            continue;
                        }
                        // The Resolved event that follows prints the outcome.
                        if let Err(e) = broker.decide(front.id, d, uid) {
                            say(&format!("\r\n  {e}\r\n"));
                            queue.retain(|r| r.id != front.id);
                            if let Some(next) = queue.front() {
                                show(next, &mut typed_on, &mut shown_at);
                            }
                        }
                    }
                }
            }
        }
    }
}

fn outcome(r: &Resolution) -> String {
    match r {
        Resolution::Allow { scope, .. } => format!("allowed ({scope})"),
        Resolution::Deny {
            reason: Some(why), ..
        } => format!("denied ({why})"),
        Resolution::Deny { .. } => "denied".into(),
        Resolution::Timeout => "timed out (denied)".into(),
        Resolution::Withdrawn => "withdrawn (the caller was killed)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_map_to_decisions() {
        assert_eq!(key(b'o'), Key::Decide(Decision::Allow(Scope::Once)));
        assert_eq!(key(b'Y'), Key::Decide(Decision::Allow(Scope::Once)));
        assert_eq!(key(b'p'), Key::Decide(Decision::Allow(Scope::Path)));
        assert_eq!(key(b'z'), Key::Decide(Decision::Allow(Scope::Zone)));
        assert_eq!(key(b'd'), Key::Decide(Decision::Deny));
        assert_eq!(key(b'n'), Key::Decide(Decision::Deny));
        assert_eq!(key(b's'), Key::Skip);
        assert_eq!(key(b'\n'), Key::Ignore);
        assert_eq!(key(b'x'), Key::Ignore);
    }

    #[test]
    fn a_request_shows_its_caller_and_the_keys() {
        let info = RequestInfo {
            id: 7,
            zone: "final".into(),
            class: "write".into(),
            op: "create".into(),
            path: "/final/report.md".into(),
            target: None,
            pid: 42,
            uid: 1000,
            cmdline: "sh -c echo hi > final/report.md".into(),
            time: "2025-01-01T00:00:00.000Z".into(),
            timeout_secs: 300,
            ..RequestInfo::default()
        };
        let s = render(&info);
        assert!(
            s.contains("request 7: write /final/report.md (create)"),
            "{s}"
        );
        assert!(s.contains("pid 42 uid 1000: sh -c echo hi"), "{s}");
        assert!(s.contains("[z] allow zone"), "{s}");
    }

    #[test]
    fn a_request_cannot_draw_on_the_terminal() {
        let (path, path_b64) = crate::text::for_json(b"/w/evil.sh\r\x1b[2K\xff");
        let info = RequestInfo {
            id: 7,
            class: "write".into(),
            op: "create".into(),
            path,
            path_b64,
            target: Some("/w/a\u{202e}hs.md".into()),
            cmdline: "vim notes.md\x1b[1A\x1b[2K\u{2066}".into(),
            ..RequestInfo::default()
        };
        let s = render(&info);
        let raw = s.replace("\r\n", "");
        assert!(
            !raw.chars().any(crate::text::unsafe_for_terminal),
            "raw control or bidi char in {s:?}"
        );
        assert!(
            s.contains("/w/evil.sh\\r\\x1b[2K\\xff -> /w/a\\u{202e}hs.md"),
            "{s}"
        );
        assert!(s.contains("vim notes.md\\x1b[1A\\x1b[2K\\u{2066}"), "{s}");
    }
}

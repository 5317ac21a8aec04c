//! `--prompt`: answer requests with one key on the terminal of a
//! foreground mount.
//!
//! Requests queue up oldest first; the oldest is shown with its caller and
//! a key line: `o` allow once, `p` allow for this path, `z` allow for the
//! zone, `d` deny, `s` skip (look at the next one). A request answered
//! elsewhere (CLI, timeout) leaves the queue with a note. The terminal is
//! put in non-canonical, no-echo mode (signals still work: Ctrl-C unmounts)
//! and restored when the guard drops.

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
        .target
        .as_ref()
        .map(|t| format!(" -> {t}"))
        .unwrap_or_default();
    format!(
        "zonemount: request {id}: {class} {path}{target} ({op})\r\n  by pid {pid} uid {uid}: {cmd}\r\n  [o] allow once  [p] allow path  [z] allow zone  [d] deny  [s] skip > ",
        id = info.id,
        class = info.class,
        path = info.path,
        op = info.op,
        pid = info.pid,
        uid = info.uid,
        cmd = info.cmdline,
    )
}

enum Msg {
    Event(Box<Event>),
    Key(u8),
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
    if let Some(t) = &saved {
        let mut raw = t.clone();
        raw.local_modes -= rustix::termios::LocalModes::ICANON | rustix::termios::LocalModes::ECHO;
        let _ =
            rustix::termios::tcsetattr(stdin.as_fd(), rustix::termios::OptionalActions::Now, &raw);
    }
    let (tx, rx) = mpsc::channel();
    broker.subscribe(Arc::new(Feed(tx.clone())));
    let keys = std::thread::Builder::new()
        .name("zm-prompt-keys".into())
        .spawn(move || {
            let mut b = [0u8; 1];
            let mut input = std::io::stdin();
            while let Ok(1) = input.read(&mut b) {
                if tx.send(Msg::Key(b[0])).is_err() {
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

fn run(broker: &Approvals, rx: &mpsc::Receiver<Msg>) {
    let uid = rustix::process::geteuid().as_raw();
    let mut queue: VecDeque<RequestInfo> = broker.pending().into();
    if let Some(front) = queue.front() {
        say(&render(front));
    }
    while let Ok(msg) = rx.recv() {
        match msg {
            Msg::Event(ev) => match *ev {
                Event::Requested(info) => {
                    queue.push_back(info);
                    if queue.len() == 1 {
                        say(&render(&queue[0]));
                    }
                }
                Event::Resolved { id, resolution } => {
                    let was_front = queue.front().is_some_and(|r| r.id == id);
                    let before = queue.len();
                    queue.retain(|r| r.id != id);
                    if was_front && queue.len() < before {
                        say(&format!("\r\n  request {id}: {}\r\n", outcome(&resolution)));
                        if let Some(next) = queue.front() {
                            say(&render(next));
                        }
                    }
                }
            },
            Msg::Key(k) => {
                let Some(front) = queue.front().cloned() else {
                    continue;
                };
                match key(k) {
                    Key::Ignore => {}
                    Key::Skip => {
                        queue.rotate_left(1);
                        say("skipped\r\n");
                        if let Some(next) = queue.front() {
                            say(&render(next));
                        }
                    }
                    Key::Decide(d) => {
                        // The Resolved event that follows prints the outcome.
                        if let Err(e) = broker.decide(front.id, d, uid) {
                            say(&format!("\r\n  {e}\r\n"));
                            queue.retain(|r| r.id != front.id);
                            if let Some(next) = queue.front() {
                                say(&render(next));
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
            items: vec![],
            retry: false,
        };
        let s = render(&info);
        assert!(
            s.contains("request 7: write /final/report.md (create)"),
            "{s}"
        );
        assert!(s.contains("pid 42 uid 1000: sh -c echo hi"), "{s}");
        assert!(s.contains("[z] allow zone"), "{s}");
    }
}

//! The watcher's and the guard's lives after the fork: detach, wait for
//! the watched process, and clean up unless told all is clean. Only
//! system calls on data prepared before the fork (see the module header).

use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use rustix::process::{Pid, PidfdFlags, Signal};

use super::clean::clean_up;
use super::messages::Messages;
use super::prepared::Prepared;
use super::sys::{self, InChild, exit};

/// The first child: fork the watcher and exit, so the watcher is
/// reparented and never waits as a zombie of our parent.
pub(super) fn intermediate(p: &Prepared, _: InChild) -> ! {
    // Named before the fork, so the watcher carries its name from its
    // first instant: by the time `spawn` returns, nothing that is not the
    // daemon looks like it in `ps` (a test that counted the daemon's
    // processes once saw the unnamed watcher).
    let _ = rustix::thread::set_name(c"zm-watch");
    // The grandchild runs only `watch` (system calls on prepared data,
    // then `_exit`).
    match sys::fork(|c| watch(p, c)) {
        Ok(_) => exit(0),
        Err(_) => exit(1),
    }
}

fn watch(p: &Prepared, c: InChild) -> ! {
    let _ = rustix::process::setsid();
    let _ = rustix::process::chdir(c"/");
    let _ = rustix::stdio::dup2_stdin(&p.null);
    let _ = rustix::stdio::dup2_stdout(&p.null);
    let _ = rustix::stdio::dup2_stderr(&p.null);
    let raw = |f: Option<&OwnedFd>| f.map_or(-1, |f| f.as_raw_fd());
    sys::close_all_but(&c, &mut [p.rx.as_raw_fd(), raw(p.parent.as_ref())]);
    sys::default_signals(&c);
    let _ = rustix::thread::set_name(c"zm-watch");

    let guard = spawn_guard(p);
    let mut msgs = Messages::default();
    wait_for_parent(p, &mut msgs);
    // Whatever the parent said before it went.
    msgs.drain(p.rx.as_fd());
    if !msgs.clean {
        clean_up(&c, p, &msgs);
    }
    // Done, either way: the guard has nothing left to stand in for. Our
    // own unreaped child, so the pid is still its.
    if let Some(g) = guard {
        let _ = rustix::process::kill_process(g, Signal::KILL);
    }
    exit(0)
}

/// Fork the guard: a second watcher, in a session of its own, that waits
/// for this one to go. The watcher SIGKILLs it once its work is done, so a
/// guard that sees the watcher gone knows it was killed (with the daemon,
/// say, by one `kill -9` of both) and does the watcher's work in its place:
/// it waits for the watched process as the watcher did, and cleans up
/// unless told all is clean. What the watcher had already read of the pipe
/// (a process group or process to stop, which `run` announces) is lost
/// with it. None when the fork fails: one watcher then, as before.
fn spawn_guard(p: &Prepared) -> Option<Pid> {
    let watcher = rustix::process::getpid();
    // The new child runs only `guard` (system calls on prepared data, then
    // `_exit`), like the watcher itself.
    sys::fork(|c| guard(p, watcher, c)).ok()
}

fn guard(p: &Prepared, watcher: Pid, c: InChild) -> ! {
    let _ = rustix::thread::set_name(c"zm-guard");
    let _ = rustix::process::setsid();
    // Without pidfds there is no waiting for the watcher: no guard.
    let Ok(w) = rustix::process::pidfd_open(watcher, PidfdFlags::empty()) else {
        exit(0)
    };
    // Still the watcher's child: it was alive when the pidfd was made, so
    // the pidfd is its (not a reused pid's).
    if rustix::process::getppid() == Some(watcher) {
        let mut fds = [PollFd::new(&w, PollFlags::IN)];
        poll_ok(&mut fds);
    }
    let mut msgs = Messages::default();
    wait_for_parent(p, &mut msgs);
    msgs.drain(p.rx.as_fd());
    if !msgs.clean {
        clean_up(&c, p, &msgs);
    }
    exit(0)
}

/// Block until the watched process has exited (or said it is clean).
fn wait_for_parent(p: &Prepared, msgs: &mut Messages) {
    while !msgs.clean {
        let (pipe_ready, parent_gone) = match (&p.parent, msgs.closed) {
            // No pidfd and the pipe closed: the parent is gone.
            (None, true) => return,
            (None, false) => {
                let mut fds = [PollFd::new(&p.rx, PollFlags::IN)];
                poll_ok(&mut fds);
                (!fds[0].revents().is_empty(), false)
            }
            // The pipe closed early (its write end dropped): only the
            // pidfd can say more.
            (Some(pidfd), true) => {
                let mut fds = [PollFd::new(pidfd, PollFlags::IN)];
                poll_ok(&mut fds);
                (false, !fds[0].revents().is_empty())
            }
            (Some(pidfd), false) => {
                let mut fds = [
                    PollFd::new(&p.rx, PollFlags::IN),
                    PollFd::new(pidfd, PollFlags::IN),
                ];
                poll_ok(&mut fds);
                (!fds[0].revents().is_empty(), !fds[1].revents().is_empty())
            }
        };
        if pipe_ready {
            msgs.drain(p.rx.as_fd());
        }
        if parent_gone {
            return;
        }
    }
}

/// Wait for `fds` without a timeout. When waiting is impossible the
/// watcher can't tell a live parent from a dead one, so it leaves without
/// touching anything.
fn poll_ok(fds: &mut [PollFd<'_>]) {
    loop {
        match rustix::event::poll(fds, None) {
            Ok(_) => return,
            Err(Errno::INTR) => {}
            Err(_) => exit(1),
        }
    }
}

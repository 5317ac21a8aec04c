//! What the parent says over the watcher's pipe: all is clean, a process
//! group to kill, a process to stop (each pid held as a pidfd from the
//! moment it is heard), read in any split.

use std::os::fd::{BorrowedFd, OwnedFd};

use rustix::io::Errno;
use rustix::process::{Pid, PidfdFlags};

use super::{MSG_CLEAN, MSG_GROUP, MSG_STOP};

/// What the parent said over the pipe.
#[derive(Default)]
pub(super) struct Messages {
    pub(super) clean: bool,
    pub(super) group: Option<u32>,
    /// The group's leader, held as a pidfd from the moment we heard.
    pub(super) leader: Option<OwnedFd>,
    /// The process to stop, held as a pidfd from the moment we heard.
    pub(super) stop: Option<OwnedFd>,
    /// A message with a pid being read: its kind and the bytes so far.
    pub(super) partial: Option<(u8, [u8; 4], usize)>,
    pub(super) closed: bool,
}

impl Messages {
    pub(super) fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            match &mut self.partial {
                Some((kind, acc, n)) => {
                    acc[*n] = b;
                    *n += 1;
                    if *n == 4 {
                        let id = u32::from_le_bytes(*acc);
                        if *kind == MSG_GROUP {
                            self.group = Some(id);
                            self.leader = pidfd(id);
                        } else {
                            self.stop = pidfd(id);
                        }
                        self.partial = None;
                    }
                }
                None if b == MSG_CLEAN => self.clean = true,
                None if b == MSG_GROUP || b == MSG_STOP => self.partial = Some((b, [0; 4], 0)),
                None => {}
            }
        }
    }

    /// Read what is there without blocking; note EOF.
    pub(super) fn drain(&mut self, rx: BorrowedFd<'_>) {
        let mut buf = [0u8; 64];
        for _ in 0..1024 {
            match rustix::io::read(rx, &mut buf) {
                Ok(0) => {
                    self.closed = true;
                    return;
                }
                Ok(n) => self.feed(&buf[..n]),
                Err(Errno::INTR) => {}
                Err(_) => return,
            }
        }
    }
}

pub(super) fn pid(raw: u32) -> Option<Pid> {
    i32::try_from(raw).ok().and_then(Pid::from_raw)
}

fn pidfd(raw: u32) -> Option<OwnedFd> {
    rustix::process::pidfd_open(pid(raw)?, PidfdFlags::empty()).ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn messages_survive_any_split() {
        let me = std::process::id().to_le_bytes();
        let stream = [
            MSG_GROUP, 0x39, 0x30, 0, 0, MSG_STOP, me[0], me[1], me[2], me[3], MSG_CLEAN,
        ];
        for cut in 0..stream.len() {
            let mut m = Messages::default();
            m.feed(&stream[..cut]);
            m.feed(&stream[cut..]);
            assert_eq!(m.group, Some(12345), "cut at {cut}");
            assert!(m.stop.is_some(), "a pidfd of this process, cut at {cut}");
            assert!(m.clean);
        }
        let mut m = Messages::default();
        m.feed(&[MSG_GROUP, 1, 0, 0, 0]);
        assert!(!m.clean && m.group == Some(1));
    }
}

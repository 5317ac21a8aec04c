//! CMD's stdin, stdout and stderr across a boundary (`--isolate`,
//! `--user`). An fd is a way to its file, not only to its data:
//! `/proc/self/fd/0` reopens the file it is on (read-write if CMD's rights
//! allow it, and a worker run by root under `--isolate` is uid 0 on the
//! host), and on a directory `/proc/self/fd/0/..` walks the host from
//! there, outside the sandbox (found by an attack pass: it read
//! `/etc/shadow` and made files on the host). So:
//! - a stdin that is not a stream (a pipe, a socket, a terminal or another
//!   character device) reaches CMD as a pipe, fed from it by a thread of
//!   `run` until its end; a directory gives CMD an empty stdin (reading a
//!   directory is EISDIR anyway);
//! - a directory as stdout or stderr is refused before anything exists;
//!   a regular file there is the caller's choice of output and is left as
//!   it is (CMD can reopen it, read back and overwrite what it wrote).

use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::FileType;
use rustix::pipe::PipeFlags;

use super::super::Failure;

/// What `fd` is on; None when it can't be told (fstat failed).
fn file_type(fd: BorrowedFd<'_>) -> Option<FileType> {
    rustix::fs::fstat(fd)
        .ok()
        .map(|st| FileType::from_raw_mode(st.st_mode))
}

/// A stream: what CMD may have as it is, since reopening it reaches
/// nothing more than the stream.
fn is_stream(t: Option<FileType>) -> bool {
    matches!(
        t,
        Some(FileType::Fifo | FileType::Socket | FileType::CharacterDevice)
    )
}

/// Refuse a directory as `run`'s stdout or stderr (exit 2), before
/// anything is mounted.
pub(super) fn check_outputs() -> Result<(), Failure> {
    let (out, err) = (std::io::stdout(), std::io::stderr());
    for (fd, n, name) in [(out.as_fd(), 1, "stdout"), (err.as_fd(), 2, "stderr")] {
        if file_type(fd) == Some(FileType::Directory) {
            return Err(Failure::new(
                2,
                format!(
                    "run: {name} is a directory, through which CMD could reach the host's files \
                     (/proc/self/fd/{n}/..): give run a file, a pipe or a terminal as {name}"
                ),
            ));
        }
    }
    Ok(())
}

/// CMD's stdin when `run`'s (`fd`) is not a stream: the read end of a
/// pipe, and what feeds it.
pub(super) struct PipedStdin {
    pub(super) read: OwnedFd,
    /// None: CMD's stdin is empty (the write end is already closed).
    pub(super) feed: Option<Feed>,
}

/// `fd` as CMD's stdin: None when it is a stream and CMD gets it as it
/// is; else a pipe.
pub(super) fn stdin_for_cmd(fd: BorrowedFd<'_>) -> Result<Option<PipedStdin>, Failure> {
    let kind = file_type(fd);
    if is_stream(kind) {
        return Ok(None);
    }
    let fail = |e: std::io::Error| Failure::new(1, format!("run: cannot make CMD's stdin: {e}"));
    let (read, write) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC).map_err(|e| fail(e.into()))?;
    let feed = match kind {
        // Empty: the write end closes here.
        Some(FileType::Directory) | None => None,
        _ => Some(Feed {
            from: File::from(fd.try_clone_to_owned().map_err(fail)?),
            to: File::from(write),
        }),
    };
    Ok(Some(PipedStdin { read, feed }))
}

/// Copies `run`'s stdin into CMD's pipe.
pub(super) struct Feed {
    from: File,
    to: File,
}

impl Feed {
    /// Feed CMD's stdin from a thread of its own, started once CMD runs
    /// (so the pipe's read end is CMD's alone). The thread is never
    /// waited for: `run` returns CMD's status as soon as CMD is gone,
    /// whatever the thread is blocked on.
    pub(super) fn start(self) {
        let spawned = std::thread::Builder::new()
            .name("stdin-feed".into())
            .spawn(move || self.copy());
        // The feed dropped with the closure: CMD's stdin is empty.
        if let Err(e) = spawned {
            eprintln!(
                "zonemount: run: CMD's stdin is empty: cannot start the thread that feeds it: {e}"
            );
        }
    }

    /// Copy until the end of `run`'s stdin, a read error (said on stderr),
    /// or CMD no longer reading (EPIPE: `run` ignores SIGPIPE, as Rust
    /// programs do). The pipe's write end closes on return: EOF for CMD.
    fn copy(mut self) {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match self.from.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    eprintln!(
                        "zonemount: run: CMD's stdin ends here: cannot read run's stdin: {e}"
                    );
                    return;
                }
            };
            if self.to.write_all(&buf[..n]).is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use std::io::{Seek, SeekFrom};

    use super::*;

    fn read_all(fd: OwnedFd) -> Vec<u8> {
        let mut v = Vec::new();
        File::from(fd).read_to_end(&mut v).unwrap();
        v
    }

    #[test]
    fn streams_pass_and_files_and_directories_become_pipes() {
        let devnull = File::open("/dev/null").unwrap();
        assert!(stdin_for_cmd(devnull.as_fd()).unwrap().is_none());
        let (r, _w) = rustix::pipe::pipe().unwrap();
        assert!(stdin_for_cmd(r.as_fd()).unwrap().is_none());

        let dir = tempfile::tempdir().unwrap();
        let d = File::open(dir.path()).unwrap();
        let p = stdin_for_cmd(d.as_fd()).unwrap().unwrap();
        assert!(p.feed.is_none());
        assert_eq!(read_all(p.read), b"", "a directory: EOF at once");

        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"skipped;content").unwrap();
        f.seek(SeekFrom::Start(8)).unwrap();
        let p = stdin_for_cmd(f.as_fd()).unwrap().unwrap();
        p.feed.unwrap().start();
        assert_eq!(
            read_all(p.read),
            b"content",
            "from the file's offset to its end"
        );
    }

    #[test]
    fn the_feed_ends_when_cmd_stops_reading() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&vec![b'x'; 1 << 20]).unwrap();
        f.seek(SeekFrom::Start(0)).unwrap();
        let p = stdin_for_cmd(f.as_fd()).unwrap().unwrap();
        drop(p.read);
        // EPIPE on the first write: returns rather than blocking or dying.
        p.feed.unwrap().copy();
    }
}

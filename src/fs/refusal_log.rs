//! The refusal log: each refusal the worker met, one line in words about
//! paths and permissions (`policy::for_worker`), appended to a file the
//! worker can read but the mount doesn't serve (`mount --refusal-log F`;
//! `run` makes one and names it in `ZONEMOUNT_REFUSALS`). A worker that
//! can't reach the control socket (`run --isolate`, `--user`) learns there
//! why a call failed. Paths hidden from the worker are never written. The
//! file stays small: past [`MAX_BYTES`] it starts over with a line saying
//! so.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use parking_lot::Mutex;

use crate::error::Refusal;
use crate::policy::{self, Subject, ZoneRules};

/// The most the log grows to before it starts over.
pub const MAX_BYTES: u64 = 64 * 1024;

#[derive(Debug)]
pub struct RefusalLog {
    file: Mutex<(File, u64)>,
    path: PathBuf,
    /// Where the worker sees the mount's root.
    root: PathBuf,
}

impl RefusalLog {
    /// Append to `path` (made 0644 if missing: the worker reads it; an
    /// existing one must be ours and no one else's to write: see
    /// [`crate::logfile`]); paths are written as under `root`. Starting
    /// over truncates the file we opened, never a path.
    pub fn open(path: &Path, root: &Path) -> io::Result<RefusalLog> {
        let file = crate::logfile::open_append(path, 0o644)?;
        let len = file.metadata()?.len();
        Ok(RefusalLog {
            file: Mutex::new((file, len)),
            path: path.to_path_buf(),
            root: root.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Write the refusal `r` of `s`, if the worker may be told.
    pub fn note(&self, s: &Subject<'_>, r: Refusal, zones: &[ZoneRules]) {
        let Some(line) = policy::for_worker(s, r, zones, &self.root) else {
            return;
        };
        let mut f = self.file.lock();
        let (file, len) = &mut *f;
        let line = format!("{line}\n");
        if *len + line.len() as u64 > MAX_BYTES && file.set_len(0).is_ok() {
            *len = 0;
            let note = "(earlier refusals dropped: the log keeps the last 64 KiB)\n";
            if file.write_all(note.as_bytes()).is_ok() {
                *len += note.len() as u64;
            }
        }
        match file.write_all(line.as_bytes()) {
            Ok(()) => *len += line.len() as u64,
            Err(e) => tracing::warn!(path = %self.path.display(), "refusal log: {e}"),
        }
    }
}

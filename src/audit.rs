//! The audit ledger (`--audit-log FILE`): one JSON object per line,
//! appended, each written and fsynced before the syscall it concerns is
//! answered (DESIGN §4 "Audit records"). Never file contents.
//!
//! Writers share one file behind a mutex; a record is one `write` of a
//! whole line followed by `fdatasync`, so a reader never sees half a line
//! and a crash loses nothing that was answered.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use parking_lot::Mutex;
use serde::Serialize;

/// Format version of every record.
pub const VERSION: u32 = 1;

/// The kinds of record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Mount,
    Unmount,
    Request,
    Decision,
    Timeout,
    Withdrawn,
    Refusal,
    Mutation,
    /// Staged changes applied to the backing dirs.
    Commit,
    /// Staged changes dropped.
    Discard,
    /// At unmount: what the workers changed in one rw zone (staged: what
    /// its stage holds).
    Changes,
    /// A checkpoint of a staged zone taken (`id`, `zone`, who).
    Checkpoint,
    /// A staged zone (or `paths` of it) rewound to checkpoint `id`.
    Rewind,
    /// Refusal records not written (`dropped` of them) because refusals
    /// came faster than [`REFUSALS_PER_SECOND`] after a burst of
    /// [`REFUSAL_BURST`]; written before the next record.
    Dropped,
}

/// Refusal records written at once before the rate limit applies.
pub const REFUSAL_BURST: f64 = 200.0;

/// Refusal records written a second, on average, past the burst: a worker
/// that provokes refusals on purpose (22,000 a second were measured, with
/// 4 KiB paths: 10 MB/s) can't fill the disk under the ledger. The
/// counters in `status` still count every one.
pub const REFUSALS_PER_SECOND: f64 = 10.0;

/// The longest `reason` a record keeps (it repeats the path, which
/// `path` has whole).
const REASON_MAX: usize = 512;

/// One record. Fields that don't apply stay `None` and are left out.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Record {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// `path`'s exact bytes (base64) when they are not UTF-8 (`path` then
    /// holds U+FFFD in their place); likewise `target_b64`, `cmdline_b64`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path_b64: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_b64: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cmdline: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cmdline_b64: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approver_uid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errno: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A commit's or discard's paths, as a worker sees them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paths: Option<Vec<String>>,
    /// When some of `paths` are not UTF-8: their exact bytes (base64), in
    /// the same order, `null` for each path that is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paths_b64: Option<Vec<Option<String>>>,
    /// A commit's paths left staged (conflicts, busy zones).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conflicts: Option<u64>,
    /// A change report in a line: `2 added, 1 modified, 0 deleted`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// How many refusal records were not written ([`Kind::Dropped`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dropped: Option<u64>,
    /// Beside `paths`, in the same order: who made each path's first and
    /// last change (`null` where not recorded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actors: Option<Vec<Option<crate::actor::FirstLast>>>,
    /// A mutation's maker: process id, command (`comm`, `argv`), uid, time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actor: Option<crate::actor::Actor>,
}

impl Record {
    /// With `paths` (and `paths_b64` when one is not UTF-8) from exact bytes.
    pub fn paths(mut self, list: &[Vec<u8>]) -> Self {
        let (text, b64): (Vec<String>, Vec<Option<String>>) =
            list.iter().map(|p| crate::text::for_json(p)).unzip();
        self.paths_b64 = b64.iter().any(Option::is_some).then_some(b64);
        self.paths = Some(text);
        self
    }

    /// With `actors` beside `paths` (left out when none is known).
    pub fn actors(mut self, list: Vec<Option<crate::actor::FirstLast>>) -> Self {
        self.actors = list.iter().any(Option::is_some).then_some(list);
        self
    }

    /// With `path` (and `path_b64`) from a path's exact bytes.
    pub fn path(mut self, p: &Path) -> Self {
        let (text, b64) = crate::text::path_for_json(p);
        self.path = Some(text);
        self.path_b64 = b64;
        self
    }

    /// With `target` (and `target_b64`), when there is one.
    pub fn target(mut self, p: Option<&Path>) -> Self {
        if let Some(p) = p {
            let (text, b64) = crate::text::path_for_json(p);
            self.target = Some(text);
            self.target_b64 = b64;
        }
        self
    }
}

#[derive(Serialize)]
struct Line<'a> {
    v: u32,
    ts: String,
    event: Kind,
    mount: &'a str,
    #[serde(flatten)]
    rec: &'a Record,
}

/// Why the ledger could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("cannot open the audit log {path}: {source}")]
pub struct OpenError {
    pub path: PathBuf,
    pub source: io::Error,
}

/// The ledger of one mount.
#[derive(Debug)]
pub struct Audit {
    file: Mutex<File>,
    path: PathBuf,
    mount: String,
    budget: Mutex<Budget>,
}

/// What refusal records may still be written now (a token bucket).
#[derive(Debug)]
struct Budget {
    tokens: f64,
    at: std::time::Instant,
    dropped: u64,
}

/// The current time as RFC 3339, UTC, with milliseconds.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

impl Audit {
    /// Open `path` for appending (created with mode 0600 if missing; an
    /// existing one must be ours and no one else's to write: see
    /// [`crate::logfile`]).
    pub fn open(path: &Path, mountpoint: &Path) -> Result<Audit, OpenError> {
        let file = crate::logfile::open_append(path, 0o600).map_err(|source| OpenError {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Audit {
            file: Mutex::new(file),
            path: std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()),
            mount: mountpoint.display().to_string(),
            budget: Mutex::new(Budget {
                tokens: REFUSAL_BURST,
                at: std::time::Instant::now(),
                dropped: 0,
            }),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Append one record and make it durable. Returns the error so that a
    /// caller about to answer a syscall can refuse rather than go unlogged.
    /// A refusal past the rate limit is counted instead, and the count
    /// written (a [`Kind::Dropped`] record) before the next record.
    pub fn write(&self, event: Kind, rec: &Record) -> io::Result<()> {
        let dropped = {
            let mut b = self.budget.lock();
            let now = std::time::Instant::now();
            let refill = now.duration_since(b.at).as_secs_f64() * REFUSALS_PER_SECOND;
            b.tokens = (b.tokens + refill).min(REFUSAL_BURST);
            b.at = now;
            if event == Kind::Refusal {
                if b.tokens < 1.0 {
                    b.dropped += 1;
                    return Ok(());
                }
                b.tokens -= 1.0;
            }
            std::mem::take(&mut b.dropped)
        };
        if dropped > 0 {
            let summary = format!(
                "{dropped} refusal records not written: more than {REFUSALS_PER_SECOND} a second after {REFUSAL_BURST} at once"
            );
            self.append(
                Kind::Dropped,
                &Record {
                    dropped: Some(dropped),
                    summary: Some(summary),
                    ..Record::default()
                },
            )?;
        }
        match &rec.reason {
            Some(r) if r.len() > REASON_MAX => {
                let mut cut = REASON_MAX;
                while !r.is_char_boundary(cut) {
                    cut -= 1;
                }
                let rec = Record {
                    reason: Some(format!("{}...", &r[..cut])),
                    ..rec.clone()
                };
                self.append(event, &rec)
            }
            _ => self.append(event, rec),
        }
    }

    fn append(&self, event: Kind, rec: &Record) -> io::Result<()> {
        let line = Line {
            v: VERSION,
            ts: now_rfc3339(),
            event,
            mount: &self.mount,
            rec,
        };
        // Exact, and safe to `cat` (`text::json_line`).
        let mut text = crate::text::json_line(&line)
            .map_err(io::Error::other)?
            .into_bytes();
        text.push(b'\n');
        let mut f = self.file.lock();
        f.write_all(&text)?;
        f.sync_data()
    }

    /// [`Audit::write`], logging a failure instead of returning it.
    pub fn log(&self, event: Kind, rec: &Record) {
        if let Err(e) = self.write(event, rec) {
            tracing::error!(path = %self.path.display(), "audit log write failed: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_one_line_each_with_the_fixed_fields() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("audit.jsonl");
        let a = Audit::open(&p, Path::new("/mnt/x")).expect("open");
        a.log(Kind::Mount, &Record::default());
        a.log(
            Kind::Refusal,
            &Record {
                zone: Some("data".into()),
                path: Some("/data/a".into()),
                errno: Some("EROFS".into()),
                reason: Some("the zone is read-only".into()),
                ..Record::default()
            },
        );
        let text = std::fs::read_to_string(&p).expect("read");
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("json"))
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["v"], 1);
        assert_eq!(lines[0]["event"], "mount");
        assert_eq!(lines[0]["mount"], "/mnt/x");
        assert!(lines[0].get("zone").is_none());
        assert_eq!(lines[1]["event"], "refusal");
        assert_eq!(lines[1]["errno"], "EROFS");
        let ts = lines[1]["ts"].as_str().expect("ts");
        assert!(humantime::parse_rfc3339(ts).is_ok(), "{ts}");
        assert!(ts.ends_with('Z'));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&p).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn refusals_past_the_rate_are_counted_not_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("audit.jsonl");
        let a = Audit::open(&p, Path::new("/mnt/x")).expect("open");
        let long = "x".repeat(3000);
        let started = std::time::Instant::now();
        for _ in 0..300 {
            a.log(
                Kind::Refusal,
                &Record {
                    path: Some(long.clone()),
                    reason: Some(format!("{long} is read-only")),
                    ..Record::default()
                },
            );
        }
        let took = started.elapsed().as_secs_f64();
        a.log(Kind::Unmount, &Record::default());
        let text = std::fs::read_to_string(&p).expect("read");
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("json"))
            .collect();
        let written = lines.iter().filter(|l| l["event"] == "refusal").count();
        let dropped = &lines[lines.len() - 2];
        assert_eq!(dropped["event"], "dropped", "{dropped}");
        let n = dropped["dropped"].as_u64().expect("a count") as usize;
        assert_eq!(written + n, 300);
        let most = REFUSAL_BURST + took * REFUSALS_PER_SECOND + 1.0;
        assert!(
            written >= 200 && written as f64 <= most,
            "{written} in {took} s"
        );
        assert_eq!(lines[lines.len() - 1]["event"], "unmount");
        // The path whole, the reason cut.
        assert_eq!(lines[0]["path"].as_str().map(str::len), Some(3000));
        let reason = lines[0]["reason"].as_str().expect("reason");
        assert_eq!(reason.len(), REASON_MAX + 3, "{reason}");
    }
}

//! A stage's changes as one patch in git's extended diff format, the form
//! `git diff --binary --full-index` writes and `git apply` reads: paths
//! relative to the zone dir under `a/` and `b/`, quoted as git quotes
//! them; `new file mode`, `deleted file mode`, `old mode`/`new mode`,
//! `similarity index` with `rename from`/`rename to`, a symlink as mode
//! 120000 with its target as content, text as unified hunks and
//! anything else (a NUL in its first 8000 bytes, or not UTF-8) as a
//! `GIT binary patch` of zlib-deflated literals in git's base85. A
//! deleted tree is a deletion of each file in it; a new tree comes as its
//! files (the change report lists each).
//!
//! What git's format can't carry is left out: a directory of its own
//! (empty or not), special files, owners, times, xattrs, and mode bits
//! other than the owner's execute bit (git knows 100644 and 100755).

use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, Instant};

use rustix::fs::{FileType, OFlags};
use sha1::{Digest, Sha1};

use super::{Change, Kind, Layers, What, fsops::Root};
use crate::stage::walk::{self, Visit};

/// The largest file a patch carries: past it the patch is refused (the
/// answer of one control request holds it whole).
pub const MAX_PATCH_FILE: u64 = 64 << 20;

/// How long one file's text diff may search for the shortest diff
/// before it settles for a longer one (still exact).
const DIFF_DEADLINE: Duration = Duration::from_secs(5);

/// git's object id of an absent side.
const NULL_OID: &str = "0000000000000000000000000000000000000000";

/// What git calls a blob: a file's or a symlink's bytes and its git mode.
struct Blob {
    /// 0o100644, 0o100755 or 0o120000.
    mode: u32,
    bytes: Vec<u8>,
}

impl Blob {
    /// git's object id of these bytes (SHA-1 of `blob LEN\0` and them).
    fn oid(&self) -> String {
        let mut h = Sha1::new();
        h.update(format!("blob {}\0", self.bytes.len()).as_bytes());
        h.update(&self.bytes);
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Text git would diff by lines: no NUL in its first 8000 bytes (as
    /// git decides) and, here, UTF-8 too, so the patch is text.
    fn text(&self) -> Option<&str> {
        if self.bytes[..self.bytes.len().min(8000)].contains(&0) {
            return None;
        }
        std::str::from_utf8(&self.bytes).ok()
    }
}

/// The blob at `rel` in `root`: a regular file or a symlink; None for
/// anything else (absent, a directory, a special file).
fn blob_at(root: &Root, rel: &Path) -> io::Result<Option<Blob>> {
    let at = |e| super::fsops::err(e, "read", &root.path.join(rel));
    let Some(st) = root.stat(rel).map_err(at)? else {
        return Ok(None);
    };
    match FileType::from_raw_mode(st.st_mode) {
        FileType::Symlink => Ok(Some(Blob {
            mode: 0o120000,
            bytes: root.readlink(rel).map_err(at)?.as_bytes().to_vec(),
        })),
        FileType::RegularFile => {
            if st.st_size as u64 > MAX_PATCH_FILE {
                return Err(io::Error::new(
                    io::ErrorKind::FileTooLarge,
                    format!(
                        "{} is {} bytes: a patch carries files of at most {} MiB; leave it out by naming the paths you want (changes --patch TARGET PATH...), or commit it and review it in place",
                        crate::text::path(rel),
                        st.st_size,
                        MAX_PATCH_FILE >> 20
                    ),
                ));
            }
            let mut bytes = Vec::with_capacity(st.st_size as usize);
            std::fs::File::from(root.open_at(rel, OFlags::RDONLY).map_err(at)?)
                .read_to_end(&mut bytes)?;
            let mode = if st.st_mode & 0o100 != 0 {
                0o100755
            } else {
                0o100644
            };
            Ok(Some(Blob { mode, bytes }))
        }
        _ => Ok(None),
    }
}

/// The changes `changes` (as [`super::changes`] reports them) as one
/// patch.
pub fn patch(l: &Layers, changes: &[Change]) -> io::Result<String> {
    let mut out = String::new();
    for c in changes {
        change(l, c, &mut out)?;
    }
    Ok(out)
}

/// One change's sections.
fn change(l: &Layers, c: &Change, out: &mut String) -> io::Result<()> {
    let p = c.path.as_path();
    match c.kind {
        Kind::Added => {
            if let Some(new) = blob_at(&l.upper, p)? {
                section(out, None, Some((p, &new)), false);
            }
        }
        Kind::Deleted => delete_tree(l, p, out)?,
        Kind::Renamed => {
            let from = c.from.as_deref().unwrap_or(p);
            let (old, new) = (blob_at(&l.lower, from)?, blob_at(&l.upper, p)?);
            match (old, new) {
                (Some(old), Some(new)) => section(out, Some((from, &old)), Some((p, &new)), true),
                (old, new) => {
                    if let Some(old) = old {
                        section(out, Some((from, &old)), None, false);
                    }
                    if let Some(new) = new {
                        section(out, None, Some((p, &new)), false);
                    }
                }
            }
        }
        // A change of type (file, symlink, directory): git writes it as
        // the deletion of what was there (a whole tree for a directory)
        // and the creation of what is.
        Kind::Modified if c.what.contains(&What::Type) => {
            delete_tree(l, p, out)?;
            if let Some(new) = blob_at(&l.upper, p)? {
                section(out, None, Some((p, &new)), false);
            }
        }
        // The same type: content, mode or a symlink's target (a
        // directory's mode, owner or xattrs git does not carry).
        Kind::Modified => {
            if let (Some(old), Some(new)) = (blob_at(&l.lower, p)?, blob_at(&l.upper, p)?) {
                section(out, Some((p, &old)), Some((p, &new)), false);
            }
        }
    }
    Ok(())
}

/// Deletions of the backing dir's `rel` and, for a directory, of every
/// file and symlink under it, in path order (any depth: a loop).
fn delete_tree(l: &Layers, rel: &Path, out: &mut String) -> io::Result<()> {
    if let Some(old) = blob_at(&l.lower, rel)? {
        section(out, Some((rel, &old)), None, false);
        return Ok(());
    }
    let Ok(top) = l.lower.dir(rel) else {
        return Ok(());
    };
    walk::walk::<io::Error>(
        top.as_fd(),
        &mut |e| {
            if e.is_dir()? {
                return Ok(Visit::Enter);
            }
            let p = rel.join(e.rel);
            if let Some(old) = blob_at(&l.lower, &p)? {
                section(out, Some((&p, &old)), None, false);
            }
            Ok(Visit::Next)
        },
        &mut |_, _, _| Ok(()),
    )
}

/// One side of a section: a path and what is there (None: nothing).
type Side<'a> = Option<(&'a Path, &'a Blob)>;

/// One `diff --git` section: `old` to `new` (None: created, or deleted).
fn section(out: &mut String, old: Side<'_>, new: Side<'_>, rename: bool) {
    let (Some(a_path), Some(b_path)) = (old.or(new).map(|(p, _)| p), new.or(old).map(|(p, _)| p))
    else {
        return;
    };
    let oid = |s: Side<'_>| s.map_or_else(|| NULL_OID.to_owned(), |(_, b)| b.oid());
    let (old_oid, new_oid) = (oid(old), oid(new));
    let same_mode = old.zip(new).is_some_and(|(o, n)| o.1.mode == n.1.mode);
    if !rename && old_oid == new_oid && same_mode {
        // Nothing git can tell apart (a mode change git doesn't keep).
        return;
    }
    out.push_str(&format!(
        "diff --git {} {}\n",
        quote("a/", a_path),
        quote("b/", b_path)
    ));
    match (old, new) {
        (None, Some((_, n))) => out.push_str(&format!("new file mode {:06o}\n", n.mode)),
        (Some((_, o)), None) => out.push_str(&format!("deleted file mode {:06o}\n", o.mode)),
        (Some((_, o)), Some((_, n))) if o.mode != n.mode => {
            out.push_str(&format!(
                "old mode {:06o}\nnew mode {:06o}\n",
                o.mode, n.mode
            ));
        }
        _ => {}
    }
    if let (true, Some((_, o)), Some((_, n))) = (rename, old, new) {
        out.push_str(&format!(
            "similarity index {}%\nrename from {}\nrename to {}\n",
            similarity(o, n),
            quote("", a_path),
            quote("", b_path)
        ));
    }
    if old_oid == new_oid {
        return;
    }
    out.push_str(&format!("index {old_oid}..{new_oid}"));
    if same_mode {
        out.push_str(&format!(" {:06o}", old.map_or(0, |(_, b)| b.mode)));
    }
    out.push('\n');
    body(out, old, new);
}

/// A section's content change: unified hunks between two texts (none
/// for two empty ones), else a `GIT binary patch` of both literals
/// (forward, then back, so `git apply -R` works too).
fn body(out: &mut String, old: Side<'_>, new: Side<'_>) {
    let empty = Blob {
        mode: 0,
        bytes: Vec::new(),
    };
    let (o, n) = (
        old.map_or(&empty, |(_, b)| b),
        new.map_or(&empty, |(_, b)| b),
    );
    let (Some(ot), Some(nt)) = (o.text(), n.text()) else {
        out.push_str("GIT binary patch\n");
        literal(out, &n.bytes);
        literal(out, &o.bytes);
        return;
    };
    let hunks = hunks(ot, nt);
    if hunks.is_empty() {
        return;
    }
    let name = |s: Side<'_>, prefix: &str| match s {
        None => "/dev/null".to_owned(),
        // git ends a name with a space with a tab, for GNU patch.
        Some((p, _)) if p.as_os_str().as_bytes().contains(&b' ') => {
            format!("{}\t", quote(prefix, p))
        }
        Some((p, _)) => quote(prefix, p),
    };
    out.push_str(&format!(
        "--- {}\n+++ {}\n",
        name(old, "a/"),
        name(new, "b/")
    ));
    out.push_str(&hunks);
}

/// The unified hunks (3 lines of context) from `old` to `new`, each line
/// without a final newline followed by git's `\ No newline at end of
/// file`.
pub(super) fn hunks(old: &str, new: &str) -> String {
    let (old, new) = (lines(old), lines(new));
    let diff = similar::TextDiff::configure()
        .algorithm(similar::Algorithm::Myers)
        .deadline(Instant::now() + DIFF_DEADLINE)
        .diff_slices(&old, &new);
    let mut out = String::new();
    for group in diff.grouped_ops(3) {
        let (Some(first), Some(last)) = (group.first(), group.last()) else {
            continue;
        };
        let range = |start: usize, end: usize| {
            let len = end - start;
            match len {
                0 => format!("{start},0"),
                1 => format!("{}", start + 1),
                _ => format!("{},{len}", start + 1),
            }
        };
        out.push_str(&format!(
            "@@ -{} +{} @@\n",
            range(first.old_range().start, last.old_range().end),
            range(first.new_range().start, last.new_range().end)
        ));
        for op in &group {
            for ch in diff.iter_changes(op) {
                let sign = match ch.tag() {
                    similar::ChangeTag::Equal => ' ',
                    similar::ChangeTag::Delete => '-',
                    similar::ChangeTag::Insert => '+',
                };
                out.push(sign);
                out.push_str(ch.value());
                if !ch.value().ends_with('\n') {
                    out.push_str("\n\\ No newline at end of file\n");
                }
            }
        }
    }
    out
}

/// `text`'s lines as git sees them: each up to and with its `\n` (the
/// last may have none). A lone `\r` is part of its line: `similar`'s own
/// split ends a line there too, which made hunk headers count lines that
/// `git apply` (and a reader) sees as one.
pub(super) fn lines(text: &str) -> Vec<&str> {
    text.split_inclusive('\n').collect()
}

/// How alike two blobs are, in percent, as `similarity index` shows it
/// (git computes it its own way; `git apply` does not read it): the
/// share of lines kept for text, of bytes kept at both ends otherwise.
fn similarity(a: &Blob, b: &Blob) -> u32 {
    if a.bytes == b.bytes {
        return 100;
    }
    let pct = |x: f64| (x * 100.0).floor().clamp(0.0, 99.0) as u32;
    if let (Some(x), Some(y)) = (a.text(), b.text()) {
        return pct(f64::from(
            similar::TextDiff::configure()
                .deadline(Instant::now() + DIFF_DEADLINE)
                .diff_slices(&lines(x), &lines(y))
                .ratio(),
        ));
    }
    let (x, y) = (&a.bytes, &b.bytes);
    let longest = x.len().max(y.len());
    let front = x.iter().zip(y.iter()).take_while(|(p, q)| p == q).count();
    let back = x[front..]
        .iter()
        .rev()
        .zip(y[front..].iter().rev())
        .take_while(|(p, q)| p == q)
        .count();
    pct((front + back) as f64 / longest as f64)
}

/// git's base85 alphabet.
const B85: &[u8; 85] =
    b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~";

/// One binary hunk: `literal LEN`, the zlib-deflated bytes in base85
/// lines of at most 52 bytes (each led by its length: `A`-`Z` 1-26,
/// `a`-`z` 27-52), then an empty line.
fn literal(out: &mut String, bytes: &[u8]) {
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    // Writing to a Vec can't fail.
    let deflated = z
        .write_all(bytes)
        .and_then(|()| z.finish())
        .unwrap_or_default();
    out.push_str(&format!("literal {}\n", bytes.len()));
    for line in deflated.chunks(52) {
        let n = line.len() as u8;
        out.push(char::from(if n <= 26 {
            b'A' + n - 1
        } else {
            b'a' + n - 27
        }));
        base85(out, line);
        out.push('\n');
    }
    out.push('\n');
}

/// git's base85: each 4 bytes (the last ones padded with zeros) as a
/// big-endian number in 5 digits, the most significant first.
fn base85(out: &mut String, bytes: &[u8]) {
    for chunk in bytes.chunks(4) {
        let mut word = [0u8; 4];
        word[..chunk.len()].copy_from_slice(chunk);
        let mut acc = u32::from_be_bytes(word);
        let mut digits = [0u8; 5];
        for d in digits.iter_mut().rev() {
            *d = B85[(acc % 85) as usize];
            acc /= 85;
        }
        out.extend(digits.iter().map(|d| char::from(*d)));
    }
}

/// `prefix` and `path` as git writes a name: as it is, or in double
/// quotes with C escapes where it holds a control character, a `"`, a
/// `\`, DEL or a byte past ASCII (git's default `core.quotePath`).
fn quote(prefix: &str, path: &Path) -> String {
    let bytes: Vec<u8> = prefix
        .bytes()
        .chain(path.as_os_str().as_bytes().iter().copied())
        .collect();
    if !bytes
        .iter()
        .any(|b| *b < 0x20 || *b == b'"' || *b == b'\\' || *b >= 0x7f)
    {
        return String::from_utf8_lossy(&bytes).into_owned();
    }
    let mut q = String::from("\"");
    for b in bytes {
        match b {
            0x07 => q.push_str("\\a"),
            0x08 => q.push_str("\\b"),
            b'\t' => q.push_str("\\t"),
            b'\n' => q.push_str("\\n"),
            0x0b => q.push_str("\\v"),
            0x0c => q.push_str("\\f"),
            b'\r' => q.push_str("\\r"),
            b'"' => q.push_str("\\\""),
            b'\\' => q.push_str("\\\\"),
            b if !(0x20..0x7f).contains(&b) => q.push_str(&format!("\\{b:03o}")),
            b => q.push(char::from(b)),
        }
    }
    q.push('"');
    q
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::ffi::OsStr;

    use super::*;

    #[test]
    fn names_are_quoted_as_git_quotes_them() {
        assert_eq!(quote("a/", Path::new("my file")), "a/my file");
        assert_eq!(
            quote("a/", Path::new(OsStr::from_bytes(b"na\xffme"))),
            "\"a/na\\377me\""
        );
        assert_eq!(quote("b/", Path::new("q\"t\\n\t")), "\"b/q\\\"t\\\\n\\t\"");
        // UTF-8 past ASCII is quoted byte by byte, as with core.quotePath.
        assert_eq!(quote("", Path::new("é")), "\"\\303\\251\"");
    }

    /// git's decoding of a base85 line (without its length byte).
    fn unbase85(s: &str) -> Vec<u8> {
        s.as_bytes()
            .chunks(5)
            .flat_map(|c| {
                let v = c.iter().fold(0u32, |acc, d| {
                    acc * 85 + B85.iter().position(|x| x == d).unwrap() as u32
                });
                v.to_be_bytes()
            })
            .collect()
    }

    #[test]
    fn base85_is_gits_and_a_literal_inflates_to_the_bytes() {
        let mut out = String::new();
        base85(&mut out, &[0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(out, "00000|NsC0");
        // What `git diff --binary` writes for an empty file's `literal 0`
        // reads back as zlib's empty stream.
        assert_eq!(
            unbase85("cmV?d00001")[..8],
            *b"x\x01\x03\x00\x00\x00\x00\x01"
        );
        let data: Vec<u8> = (0..200u32).map(|i| (i * 7 % 256) as u8).collect();
        let mut out = String::new();
        literal(&mut out, &data);
        let mut lines = out.lines();
        assert_eq!(lines.next(), Some("literal 200"));
        let mut deflated = Vec::new();
        for l in lines.take_while(|l| !l.is_empty()) {
            let n = match l.as_bytes()[0] {
                c @ b'A'..=b'Z' => c - b'A' + 1,
                c => c - b'a' + 27,
            };
            deflated.extend_from_slice(&unbase85(&l[1..])[..n as usize]);
        }
        let mut back = Vec::new();
        flate2::read::ZlibDecoder::new(&deflated[..])
            .read_to_end(&mut back)
            .unwrap();
        assert_eq!(back, data);
        assert!(out.ends_with("\n\n"), "a hunk ends with an empty line");
    }

    #[test]
    fn a_blob_id_is_gits() {
        let b = |bytes: &[u8]| Blob {
            mode: 0o100644,
            bytes: bytes.to_vec(),
        };
        // `git hash-object` of an empty file and of "hello\n".
        assert_eq!(b(b"").oid(), "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
        assert_eq!(
            b(b"hello\n").oid(),
            "ce013625030ba8dba906f756967f9e9ca394464a"
        );
        assert!(b(b"a\0b").text().is_none());
        assert!(b(b"caf\xe9").text().is_none(), "not UTF-8: binary");
    }

    #[test]
    fn hunks_mark_a_missing_final_newline() {
        assert_eq!(
            hunks("a", "b"),
            "@@ -1 +1 @@\n-a\n\\ No newline at end of file\n+b\n\\ No newline at end of file\n"
        );
        assert_eq!(hunks("", "x\ny\n"), "@@ -0,0 +1,2 @@\n+x\n+y\n");
        assert_eq!(hunks("x\n", ""), "@@ -1 +0,0 @@\n-x\n");
        assert_eq!(hunks("same\n", "same\n"), "");
    }

    /// A lone `\r` is inside a line, as git reads a patch: a header that
    /// counted it as a line end made `git apply` call the patch corrupt.
    #[test]
    fn a_lone_carriage_return_is_part_of_its_line() {
        assert_eq!(
            hunks("one\ntwo\n", "one\rX\ntwo\n"),
            "@@ -1,2 +1,2 @@\n-one\n+one\rX\n two\n"
        );
        assert_eq!(
            hunks("a\r\nb\r", "a\r\nc\r"),
            "@@ -1,2 +1,2 @@\n a\r\n-b\r\n\\ No newline at end of file\n+c\r\n\\ No newline at end of file\n"
        );
        assert_eq!(lines("x\ry\n\nz"), ["x\ry\n", "\n", "z"]);
    }
}

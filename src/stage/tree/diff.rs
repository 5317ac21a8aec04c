//! A change as a unified diff (`--- a/PATH` / `+++ b/PATH`, as git writes
//! them) for text files; binary files, large files, symlinks, directories
//! and mode changes in one line each.

use std::io::{self, Read};
use std::path::Path;

use rustix::fs::OFlags;

use super::{Change, Kind, Layers, What, fsops::Root};

/// Files larger than this are not diffed.
pub const MAX_DIFF_BYTES: u64 = 1 << 20;

/// The text of a file, or why it has none to diff.
enum Text {
    Utf8(String),
    Binary,
    TooLarge(u64),
    Missing,
}

fn text_of(root: &Root, rel: &Path) -> io::Result<Text> {
    let Some(st) = root
        .stat(rel)
        .map_err(|e| super::fsops::err(e, "stat", &root.path.join(rel)))?
    else {
        return Ok(Text::Missing);
    };
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        // A change of type (a directory or a symlink before): no text.
        return Ok(Text::Missing);
    }
    if st.st_size as u64 > MAX_DIFF_BYTES {
        return Ok(Text::TooLarge(st.st_size as u64));
    }
    let mut f = std::fs::File::from(
        root.open_at(rel, OFlags::RDONLY)
            .map_err(|e| super::fsops::err(e, "open", &root.path.join(rel)))?,
    );
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes)?;
    if bytes[..bytes.len().min(8192)].contains(&0) {
        return Ok(Text::Binary);
    }
    Ok(String::from_utf8(bytes).map_or(Text::Binary, Text::Utf8))
}

/// A line for a changed owner (`owner 0:0 -> 65534:65534 PATH`) and one
/// per user xattr set, changed or removed (`xattr user.k: set PATH`): what
/// a commit carries besides content and mode, which no diff shows.
fn owner_and_xattrs(l: &Layers, c: &Change, p: &str, out: &mut String) {
    let old = match (c.kind, &c.from) {
        (Kind::Renamed, Some(from)) => from.as_path(),
        (Kind::Modified, _) => c.path.as_path(),
        _ => return,
    };
    if c.what.contains(&What::Owner) {
        if let (Ok(Some(a)), Ok(Some(b))) = (l.lower.stat(old), l.upper.stat(&c.path)) {
            out.push_str(&format!(
                "owner {}:{} -> {}:{} {p}\n",
                a.st_uid, a.st_gid, b.st_uid, b.st_gid
            ));
        }
    }
    if c.what.contains(&What::Xattrs) {
        let a = l.lower.user_xattrs(old).unwrap_or_default();
        let b = l.upper.user_xattrs(&c.path).unwrap_or_default();
        let mut names: Vec<&String> = a.iter().chain(&b).map(|(n, _)| n).collect();
        names.sort();
        names.dedup();
        let value = |x: &[(String, Vec<u8>)], n: &String| {
            x.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone())
        };
        for n in names {
            let how = match (value(&a, n), value(&b, n)) {
                (None, Some(_)) => "set",
                (Some(_), None) => "removed",
                (x, y) if x != y => "changed",
                _ => continue,
            };
            out.push_str(&format!("xattr {n}: {how} {p}\n"));
        }
    }
}

/// `c` for people: a unified diff of a text file, else one line saying
/// what changed.
pub fn diff(l: &Layers, c: &Change) -> io::Result<String> {
    // Names escaped as in every human view (`text`): bytes that are not
    // UTF-8 stay distinguishable, and nothing in a name draws on a terminal.
    let p = crate::text::path(&c.path);
    let mut out = String::new();
    if let (Some(a), Some(b)) = (c.old_mode, c.mode) {
        if a != b {
            out.push_str(&format!("mode {a:04o} -> {b:04o} {p}\n"));
        }
    }
    owner_and_xattrs(l, c, &p, &mut out);
    if c.file_type == Some(super::ChangeType::Symlink) {
        let t = |r: &Root| {
            r.readlink(&c.path)
                .ok()
                .map(|t| crate::text::path(Path::new(&t)))
        };
        out.push_str(&format!(
            "symlink {p}: {} -> {}\n",
            t(&l.lower).unwrap_or_else(|| "(none)".into()),
            t(&l.upper).unwrap_or_else(|| "(none)".into())
        ));
        return Ok(out);
    }
    if c.file_type != Some(super::ChangeType::File) {
        return Ok(out);
    }
    let (old_path, old) = match (&c.kind, &c.from) {
        (Kind::Added, _) => (None, Text::Missing),
        (Kind::Renamed, Some(from)) => (Some(from.as_path()), text_of(&l.lower, from)?),
        _ => (Some(c.path.as_path()), text_of(&l.lower, &c.path)?),
    };
    let new = match c.kind {
        Kind::Deleted => Text::Missing,
        _ => text_of(&l.upper, &c.path)?,
    };
    let a = old_path.map_or_else(
        || "/dev/null".to_owned(),
        |p| format!("a/{}", crate::text::path(p)),
    );
    let b = match c.kind {
        Kind::Deleted => "/dev/null".to_owned(),
        _ => format!("b/{p}"),
    };
    match (old, new) {
        (Text::TooLarge(n), _) | (_, Text::TooLarge(n)) => {
            out.push_str(&format!("{p}: file too large to diff ({n} bytes)\n"));
        }
        (Text::Binary, _) | (_, Text::Binary) => {
            out.push_str(&format!("Binary files {a} and {b} differ\n"));
        }
        (old, new) => {
            let old = match old {
                Text::Utf8(t) => t,
                _ => String::new(),
            };
            let new = match new {
                Text::Utf8(t) => t,
                _ => String::new(),
            };
            if old != new {
                out.push_str(&format!("--- {a}\n+++ {b}\n"));
                out.push_str(&super::patch::hunks(&old, &new));
            }
        }
    }
    Ok(out)
}

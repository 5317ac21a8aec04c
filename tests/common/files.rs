//! Looking at files from the test's side: sorted directory listings,
//! existence without following symlinks, and content hashes for comparing
//! large files in messages.

use std::fs;
use std::io::{self, Read};
use std::path::Path;

/// Sorted names in a directory.
pub fn names(dir: &Path) -> io::Result<Vec<String>> {
    let mut v = fs::read_dir(dir)?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<io::Result<Vec<_>>>()?;
    v.sort();
    Ok(v)
}

/// Sorted `&str` list → `Vec<String>`, for comparing with [`names`].
pub fn sorted(v: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = v.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

/// Whether anything (even a dangling symlink) exists at `p`.
pub fn exists_nofollow(p: &Path) -> bool {
    fs::symlink_metadata(p).is_ok()
}

/// FNV-1a 64: enough to compare large contents in messages.
pub fn fnv1a(data: &[u8], mut h: u64) -> u64 {
    for b in data {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}
pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a of a whole file, read in 1 MiB chunks.
pub fn file_hash(p: &Path) -> io::Result<(u64, u64)> {
    let mut f = fs::File::open(p)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut h = FNV_OFFSET;
    let mut len = 0u64;
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            return Ok((h, len));
        }
        h = fnv1a(&buf[..n], h);
        len += n as u64;
    }
}

/// What a tree holds, as one sorted listing: each path (relative), its
/// type, permission bits, link count within the tree's files, size and
/// content hash, symlink target, and user xattrs; with `times`, each
/// entry's mtime and ctime too (so "unchanged" means untouched). Compare
/// two listings with `assert_eq!` to see the difference.
pub fn tree_listing(root: &Path, times: bool) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let mut entries: Vec<_> = fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()))
            .map(|e| e.expect("dir entry").path())
            .collect();
        entries.sort();
        for p in entries {
            let md = fs::symlink_metadata(&p).expect("lstat");
            let rel = p.strip_prefix(root).expect("inside").display().to_string();
            let ft = md.file_type();
            let what = if ft.is_symlink() {
                format!("link -> {}", fs::read_link(&p).expect("readlink").display())
            } else if ft.is_dir() {
                stack.push(p.clone());
                "dir".to_string()
            } else if ft.is_file() {
                let (h, len) = file_hash(&p).expect("hash");
                format!("file {len} bytes {h:016x} links {}", md.nlink())
            } else {
                format!("special {:o}", md.mode() & 0o170000)
            };
            let mut line = format!("{rel}: {what} mode {:o}", md.mode() & 0o7777);
            if !ft.is_symlink() {
                let mut names: Vec<String> = xattr_names(&p)
                    .into_iter()
                    .filter(|n| n.starts_with("user."))
                    .collect();
                names.sort();
                if !names.is_empty() {
                    line.push_str(&format!(" xattrs {names:?}"));
                }
            }
            if times {
                line.push_str(&format!(
                    " mtime {}.{} ctime {}.{}",
                    md.mtime(),
                    md.mtime_nsec(),
                    md.ctime(),
                    md.ctime_nsec()
                ));
            }
            out.push(line);
        }
    }
    out.sort();
    out
}

/// The names of `p`'s extended attributes (none if it has none or its
/// filesystem keeps none).
fn xattr_names(p: &Path) -> Vec<String> {
    let mut buf = vec![0u8; 64 * 1024];
    let Ok(n) = rustix::fs::llistxattr(p, &mut buf[..]) else {
        return Vec::new();
    };
    buf[..n]
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

/// The body of the first code block fenced as ```` ```INFO ```` after the
/// README heading `heading` (a test that replays a README session reads
/// it from here, so the README can't drift from what runs).
pub fn readme_block(heading: &str, info: &str) -> String {
    let readme =
        fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).expect("README.md");
    let start = readme
        .find(heading)
        .unwrap_or_else(|| panic!("no {heading:?} in the README"));
    let fence = format!("```{info}\n");
    let block = &readme[start..];
    let at = block
        .find(&fence)
        .unwrap_or_else(|| panic!("no {fence:?} block after {heading:?}"));
    let block = &block[at + fence.len()..];
    block[..block.find("```").expect("the block's end")].to_owned()
}

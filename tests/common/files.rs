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

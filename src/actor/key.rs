//! A changed path as a map key: compared and hashed as its bytes.
//!
//! `Path` compares and hashes component by component, which costs a
//! parse of both paths on every comparison; the change records look a
//! path up on every create, write and unlink (a profile of 10,000
//! unlinks had a third of the daemon's own time there). The paths kept
//! are relative and normal (joined from names: no `.`, no empty or
//! trailing component), so their bytes say what their components say,
//! and ordering `/` below every other byte orders them as `Path` does:
//! `a` < `a/x` < `a-b` (a name can't hold a NUL, the one byte below it).

use std::cmp::Ordering;
use std::hash::{Hash, Hasher};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// A relative, normal path kept as a map key (see the module's doc).
#[derive(Debug, Clone, Default)]
pub struct PathKey(PathBuf);

impl PathKey {
    pub fn path(&self) -> &PathBuf {
        &self.0
    }

    fn bytes(&self) -> &[u8] {
        self.0.as_os_str().as_bytes()
    }
}

impl From<&Path> for PathKey {
    fn from(p: &Path) -> PathKey {
        PathKey(p.to_path_buf())
    }
}

impl From<PathBuf> for PathKey {
    fn from(p: PathBuf) -> PathKey {
        PathKey(p)
    }
}

impl PartialEq for PathKey {
    fn eq(&self, other: &PathKey) -> bool {
        self.bytes() == other.bytes()
    }
}

impl Eq for PathKey {}

impl Hash for PathKey {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.bytes().hash(h);
    }
}

impl Ord for PathKey {
    fn cmp(&self, other: &PathKey) -> Ordering {
        let (a, b) = (self.bytes(), other.bytes());
        let same = common_prefix(a, b);
        match (a.get(same), b.get(same)) {
            (Some(&x), Some(&y)) => rank(x).cmp(&rank(y)),
            _ => a.len().cmp(&b.len()),
        }
    }
}

impl PartialOrd for PathKey {
    fn partial_cmp(&self, other: &PathKey) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// How many bytes `a` and `b` begin with alike: compared a block at a
/// time first (the paths of a tree thousands of levels deep share
/// prefixes of thousands of bytes, compared on every lookup).
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    const BLOCK: usize = 64;
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + BLOCK <= n && a[i..i + BLOCK] == b[i..i + BLOCK] {
        i += BLOCK;
    }
    i + a[i..n]
        .iter()
        .zip(&b[i..n])
        .take_while(|(x, y)| x == y)
        .count()
}

/// A byte's place in the order: `/` first.
fn rank(b: u8) -> u16 {
    match b {
        b'/' => 0,
        _ => u16::from(b) + 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(s: &str) -> PathKey {
        PathKey::from(Path::new(s))
    }

    #[test]
    fn a_tree_sorts_before_its_siblings_that_extend_its_name() {
        let mut v = [
            key("a-b"),
            key("a/x"),
            key("a"),
            key("a/x/y"),
            key("a.b"),
            key("b"),
        ];
        v.sort();
        let got: Vec<_> = v.iter().map(|k| k.path().to_str().unwrap()).collect();
        assert_eq!(got, ["a", "a/x", "a/x/y", "a-b", "a.b", "b"]);
    }

    /// Relative normal paths of names (any byte but `/` and NUL).
    fn rel_path() -> impl Strategy<Value = PathBuf> {
        let name = prop::collection::vec(1u8..=255, 1..4).prop_map(|mut b| {
            b.iter_mut().filter(|c| **c == b'/').for_each(|c| *c = b'-');
            // `.` and `..` are never a name the kernel sends.
            if b.iter().all(|c| *c == b'.') && b.len() <= 2 {
                b.push(b'x');
            }
            std::ffi::OsString::from_vec(b)
        });
        prop::collection::vec(name, 1..4).prop_map(|names| names.iter().collect())
    }

    use std::os::unix::ffi::OsStringExt;

    proptest! {
        /// The byte order is `Path`'s order, and equality `Path`'s.
        #[test]
        fn orders_as_path_does(a in rel_path(), b in rel_path()) {
            let (ka, kb) = (PathKey::from(a.clone()), PathKey::from(b.clone()));
            prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
            prop_assert_eq!(ka == kb, a == b);
        }

        /// The same past a long prefix both share (compared a block at
        /// a time).
        #[test]
        fn orders_as_path_does_past_a_long_prefix(
            a in rel_path(),
            b in rel_path(),
            n in 0usize..200,
        ) {
            let top: PathBuf = std::iter::repeat_n("dd", n).collect();
            let (a, b) = (top.join(a), top.join(b));
            let (ka, kb) = (PathKey::from(a.clone()), PathKey::from(b.clone()));
            prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
            prop_assert_eq!(ka == kb, a == b);
        }
    }
}

//! One shard of the bounded fd cache (see `fs::reach`): at most `cap`
//! fds keyed by node id; when full, a new one pushes out one chosen at
//! random.
//!
//! Why random and not least-recently-used: a walk that repeats over more
//! files than the cache holds (`grep -r` over a tree, run again and again)
//! finds nothing in an LRU cache, which always pushes out the file the
//! walk needs next. Random eviction keeps part of such a tree: with a
//! cache of 10,000 and a tree of 12,000 files, about 70% of a repeated
//! walk's opens find their fd. A working set that fits is kept whole
//! either way.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::Arc;

/// One shard: its fds in a vector (for a random pick) indexed by node id.
#[derive(Debug)]
pub(crate) struct FdShard {
    slots: Vec<(u64, Arc<OwnedFd>)>,
    at: HashMap<u64, usize>,
    cap: usize,
    /// xorshift64 state: which slot a push into a full shard replaces.
    rng: u64,
}

impl FdShard {
    /// An empty shard holding at most `cap` fds (at least one); `seed`
    /// makes shards pick differently.
    pub(crate) fn new(cap: usize, seed: u64) -> FdShard {
        FdShard {
            slots: Vec::new(),
            at: HashMap::new(),
            cap: cap.max(1),
            rng: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
        }
    }

    /// Node `ino`'s fd, if kept.
    pub(crate) fn get(&self, ino: &u64) -> Option<&Arc<OwnedFd>> {
        self.at.get(ino).map(|&i| &self.slots[i].1)
    }

    /// Keep `fd` for `ino`. Returned, to be closed by the caller after
    /// the shard's lock: the node's previous fd, or the one pushed out.
    pub(crate) fn push(&mut self, ino: u64, fd: Arc<OwnedFd>) -> Option<(u64, Arc<OwnedFd>)> {
        if let Some(&i) = self.at.get(&ino) {
            let old = std::mem::replace(&mut self.slots[i].1, fd);
            return Some((ino, old));
        }
        let out = match self.slots.len() >= self.cap {
            true => {
                let i = self.pick();
                self.remove_at(i)
            }
            false => None,
        };
        self.at.insert(ino, self.slots.len());
        self.slots.push((ino, fd));
        out
    }

    /// Take node `ino`'s fd out.
    pub(crate) fn pop(&mut self, ino: &u64) -> Option<Arc<OwnedFd>> {
        let i = *self.at.get(ino)?;
        self.remove_at(i).map(|(_, fd)| fd)
    }

    /// Take any one fd out (to shed or empty the cache).
    pub(crate) fn pop_any(&mut self) -> Option<(u64, Arc<OwnedFd>)> {
        if self.slots.is_empty() {
            return None;
        }
        let i = self.pick();
        self.remove_at(i)
    }

    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.cap
    }

    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    #[cfg(test)]
    pub(crate) fn clear(&mut self) {
        self.slots.clear();
        self.at.clear();
    }

    /// A random slot (the shard is not empty).
    fn pick(&mut self) -> usize {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        (x % self.slots.len() as u64) as usize
    }

    fn remove_at(&mut self, i: usize) -> Option<(u64, Arc<OwnedFd>)> {
        if i >= self.slots.len() {
            return None;
        }
        let (ino, fd) = self.slots.swap_remove(i);
        self.at.remove(&ino);
        if let Some((moved, _)) = self.slots.get(i) {
            self.at.insert(*moved, i);
        }
        Some((ino, fd))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fd() -> Arc<OwnedFd> {
        Arc::new(OwnedFd::from(std::fs::File::open("/").unwrap()))
    }

    #[test]
    fn a_full_shard_replaces_one_and_finds_the_rest() {
        let mut s = FdShard::new(4, 7);
        for ino in 1..=4 {
            assert!(s.push(ino, fd()).is_none());
        }
        let (out, _) = s.push(5, fd()).expect("one pushed out");
        assert!((1..=4).contains(&out));
        assert_eq!(s.len(), 4);
        for ino in 1..=5 {
            assert_eq!(s.get(&ino).is_some(), ino != out, "node {ino}");
        }
        // A node's second fd replaces its first, pushing out no other.
        let again = if out == 1 { 2 } else { 1 };
        assert_eq!(s.push(again, fd()).map(|(i, _)| i), Some(again));
        assert_eq!(s.len(), 4);
        assert!(s.pop(&5).is_some());
        assert!(s.get(&5).is_none());
        assert_eq!(s.len(), 3);
        let mut n = 0;
        while s.pop_any().is_some() {
            n += 1;
        }
        assert_eq!((n, s.len()), (3, 0));
    }

    /// The reason for random eviction: a repeated walk over 20% more
    /// nodes than the shard holds keeps finding most of them (an LRU
    /// shard finds none).
    #[test]
    fn a_repeated_walk_a_little_bigger_than_the_shard_mostly_hits() {
        let (cap, walk) = (500u64, 600u64);
        let mut s = FdShard::new(cap as usize, 3);
        let shared = fd();
        let mut hits = 0;
        for pass in 0..8 {
            for ino in 0..walk {
                if s.get(&ino).is_some() {
                    hits += u64::from(pass == 7);
                } else {
                    s.push(ino, shared.clone());
                }
            }
        }
        assert!(s.len() as u64 <= cap);
        assert!(hits * 2 > walk, "{hits} of {walk} found on the last pass");
    }
}

//! Which keys were written lately, for the flight table: a write that runs
//! outside any flight (a `set`) asks, once the store answered it, whether a
//! newer write of the same key landed here meanwhile — an invalidation
//! reported while its reply was on the way — without being refused for
//! the writes of other keys.

/// How many writes are remembered: a write that overlapped more than this
/// many others is refused as if one were of its key.
const RING: usize = 64;

/// The last [`RING`] writes of single keys (their hash and number), and the
/// number of the last write of every key at once.
pub(crate) struct Recent {
    ring: [(u64, u64); RING],
    next: usize,
    all: u64,
    hasher: foldhash::fast::FixedState,
}

impl Recent {
    pub(crate) fn new() -> Self {
        Self {
            ring: [(0, 0); RING],
            next: 0,
            all: 0,
            hasher: foldhash::fast::FixedState::default(),
        }
    }

    fn hash(&self, key: &str) -> u64 {
        std::hash::BuildHasher::hash_one(&self.hasher, key)
    }

    /// Write number `number` was of `key` alone.
    pub(crate) fn wrote(&mut self, key: &str, number: u64) {
        let hash = self.hash(key);
        self.ring[self.next] = (hash, number);
        self.next = (self.next + 1) % RING;
    }

    /// Write number `number` was of every key.
    pub(crate) fn wrote_all(&mut self, number: u64) {
        self.all = number;
    }

    /// Whether a write numbered after `mark` (the last being `now`) may
    /// have been of `key`: surely not when the writes since were all of
    /// other keys and are all remembered.
    pub(crate) fn since(&self, key: &str, mark: u64, now: u64) -> bool {
        if now == mark {
            return false;
        }
        if self.all > mark || now - mark > RING as u64 {
            return true;
        }
        let hash = self.hash(key);
        self.ring
            .iter()
            .any(|&(written, number)| number > mark && written == hash)
    }
}

#[cfg(all(test, not(shuttle)))]
mod tests {
    use super::*;

    #[test]
    fn only_writes_of_the_key_since_the_mark_count() {
        let mut recent = Recent::new();
        recent.wrote("a", 1);
        recent.wrote("b", 2);
        assert!(recent.since("a", 0, 2));
        assert!(!recent.since("a", 1, 2), "b's write is not a's");
        assert!(!recent.since("c", 0, 2));
        assert!(!recent.since("a", 2, 2));
        recent.wrote_all(3);
        assert!(recent.since("c", 2, 3), "a write of every key");
        for number in 4..4 + RING as u64 {
            recent.wrote("b", number);
        }
        assert!(!recent.since("a", 3, 3 + RING as u64));
        assert!(
            recent.since("a", 2, 3 + RING as u64),
            "more writes than remembered"
        );
    }
}

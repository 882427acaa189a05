//! Which value keys a store expects to hold a value: for each key it read
//! or wrote, when that value's time to live ends, in a lossy table of one
//! atomic word per slot — no lock, no allocation, one or two loads a look.
//!
//! - **A hint, never an answer.** [`Recall::is_live`] only chooses a
//!   flight's first request (a plain read where a value is expected, else
//!   the lease request that reads it too; see
//!   [`Store::recalls`](crate::store::Store::recalls)). A wrong answer
//!   costs a round trip or a script, never a wrong value: nothing read
//!   from the table is handed to a caller.
//! - **Two ways per set.** A key maps to a pair of adjacent words (one
//!   cache line); it takes the word that already holds its tag, else an
//!   empty or expired one, else the one whose value ends first. A word
//!   holds the key's 16-bit tag (the top bits of its id; the set is chosen
//!   by the low bits) and its deadline in milliseconds since the table was
//!   made, 48 bits: two keys of one set with one tag share a word, and one
//!   may be taken for the other (a hint).
//! - **Deadlines err early**, as the store's reads and writes place them:
//!   a key recalled is one whose value was present and had time left.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

/// The bits of a word holding its deadline.
const DEADLINE_BITS: u32 = 48;
const DEADLINE_MASK: u64 = (1 << DEADLINE_BITS) - 1;

/// A store's table of recalled keys.
pub(in crate::redis) struct Recall {
    words: Box<[AtomicU64]>,
    /// The index of a set's first word: `id & sets` with its low bit clear.
    sets: usize,
    /// Deadlines count milliseconds from here.
    epoch: Instant,
}

impl Recall {
    /// A table for about `keys` keys (two words a key, rounded up to a
    /// power of two); `None` for 0.
    pub(in crate::redis) fn new(keys: usize) -> Option<Self> {
        if keys == 0 {
            return None;
        }
        let words = keys.saturating_mul(2).next_power_of_two().max(2);
        Some(Self {
            words: (0..words).map(|_| AtomicU64::new(0)).collect(),
            sets: (words - 1) & !1,
            epoch: Instant::now(),
        })
    }

    /// Whether a value of `id` was seen and its time to live is not over.
    pub(in crate::redis) fn is_live(&self, id: u64) -> bool {
        let tag = tag(id);
        let now = self.millis(Instant::now());
        self.set(id)
            .iter()
            .map(|word| word.load(Relaxed))
            .any(|word| word >> DEADLINE_BITS == tag && word & DEADLINE_MASK > now)
    }

    /// Records that the value of `id` lives until `deadline`.
    pub(in crate::redis) fn learn(&self, id: u64, deadline: Instant) {
        let tag = tag(id);
        let word = tag << DEADLINE_BITS | self.millis(deadline);
        let [first, second] = self.set(id);
        let (a, b) = (first.load(Relaxed), second.load(Relaxed));
        // The word already holding the key, else the one ending first (an
        // empty word ends at 0, an expired one before any live one).
        let target = if a >> DEADLINE_BITS == tag {
            first
        } else if b >> DEADLINE_BITS == tag || a & DEADLINE_MASK > b & DEADLINE_MASK {
            second
        } else {
            first
        };
        target.store(word, Relaxed);
    }

    /// Forgets `id` (its value is gone), leaving any other key's word.
    pub(in crate::redis) fn forget(&self, id: u64) {
        let tag = tag(id);
        for word in self.set(id) {
            let held = word.load(Relaxed);
            if held >> DEADLINE_BITS == tag {
                // Lost to a concurrent learn: the hint stays (harmless).
                let _ = word.compare_exchange(held, 0, Relaxed, Relaxed);
            }
        }
    }

    fn set(&self, id: u64) -> [&AtomicU64; 2] {
        // `sets` is below `words.len() - 1` and even: both are in bounds.
        let first = (id as usize) & self.sets;
        [&self.words[first], &self.words[first + 1]]
    }

    /// `at` in milliseconds since the epoch, within 48 bits (an instant
    /// before the epoch is 0: already over).
    fn millis(&self, at: Instant) -> u64 {
        let ms = at.saturating_duration_since(self.epoch).as_millis();
        u64::try_from(ms).unwrap_or(u64::MAX).min(DEADLINE_MASK)
    }
}

/// The tag of `id` in its word: its top 16 bits.
fn tag(id: u64) -> u64 {
    id >> DEADLINE_BITS
}

impl std::fmt::Debug for Recall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recall")
            .field("words", &self.words.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// An id in set `set` with tag `tag`.
    fn id(tag: u64, set: u64) -> u64 {
        tag << DEADLINE_BITS | set
    }

    #[test]
    fn a_key_is_recalled_until_its_deadline_or_forgotten() {
        let recall = Recall::new(8).expect("a table");
        assert_eq!(recall.words.len(), 16, "two words a key");
        let later = Instant::now() + Duration::from_secs(60);
        let key = id(7, 4);
        assert!(!recall.is_live(key));
        recall.learn(key, later);
        assert!(recall.is_live(key));
        assert!(!recall.is_live(id(8, 4)), "another tag in the same set");
        assert!(!recall.is_live(id(7, 6)), "the same tag in another set");
        recall.learn(key, Instant::now());
        assert!(!recall.is_live(key), "a deadline past is not live");
        recall.learn(key, later);
        recall.forget(key);
        assert!(!recall.is_live(key));
        assert!(Recall::new(0).is_none());
    }

    #[test]
    fn a_set_keeps_two_keys_and_replaces_the_one_ending_first() {
        let recall = Recall::new(8).expect("a table");
        let now = Instant::now();
        let (soon, later, latest) = (
            now + Duration::from_secs(10),
            now + Duration::from_secs(20),
            now + Duration::from_secs(30),
        );
        let (a, b, c) = (id(1, 2), id(2, 2), id(3, 2));
        recall.learn(a, soon);
        recall.learn(b, later);
        assert!(recall.is_live(a) && recall.is_live(b), "two ways");
        recall.learn(a, latest);
        assert!(
            recall.is_live(a) && recall.is_live(b),
            "a key keeps its word"
        );
        recall.learn(c, latest);
        assert!(recall.is_live(c));
        assert!(recall.is_live(a), "the key ending later stays");
        assert!(!recall.is_live(b), "the key ending first gave its word");
        recall.forget(b);
        assert!(
            recall.is_live(a) && recall.is_live(c),
            "forgetting another key leaves them"
        );
    }
}

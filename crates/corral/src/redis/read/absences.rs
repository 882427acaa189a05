//! The keys a store's plain reads lately found absent: a hint, never a
//! fact, for how the lease request that usually follows such a miss is
//! sent (see [`grant`](crate::redis::grant)).
//!
//! Lossy by design: 64 slots, each holding the id of the last key read
//! absent whose id falls in it, and when it was read. A key overwritten by
//! another in its slot, read absent more than [`FRESH`] ago, or never
//! noted, is asked for with the script, which answers every case in one
//! round trip; a noted key is asked for in plain commands, which cost the
//! server less when the key is still absent, one round trip more when
//! another lease is out (the script then answers), two when a value landed
//! meanwhile (the release, then the script). Either request is correct
//! whatever the hint says.
//!
//! A key not noted is asked for in plain commands too where its value,
//! if present, names its expiry (see `grant`), while such requests lately
//! found no value: a running share of those that found one, learnt from
//! the script's answers too, so it follows the traffic either way. A
//! plain request that finds a value costs a release (a round trip and a
//! script): past a quarter of them finding one, the script is cheaper.
//! A key likely present goes to the script, and stays out of the share:
//! one the store recalls holding a value, and one whose lease the script
//! found held elsewhere (*awaited*: its next request, the waiter's once
//! woken, most likely finds the holder's value).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::data::share::Share;

/// How many keys are remembered at most.
const SLOTS: usize = 64;

/// How long a miss is worth a plain lease request: a flight asks within
/// its first step, so a miss older than this was a read alone (a `peek`),
/// and another process may well have filled the key since.
const FRESH: Duration = Duration::from_secs(1);

/// One remembered miss: the key's id and when it was read, in
/// milliseconds since the memory began (written id last, read id first; a
/// torn pair only makes the hint wrong).
struct Slot {
    id: AtomicU64,
    at_ms: AtomicU64,
}

/// The ids (hashes of value key names, as [`Expiries`] keys them) of keys
/// lately read absent.
///
/// [`Expiries`]: super::expiries::Expiries
pub(in crate::redis) struct Absences {
    began: Instant,
    slots: [Slot; SLOTS],
    /// The ids of keys whose lease was lately found held elsewhere, one
    /// per slot (lossy like `slots`, with no age: a waiter asks again
    /// within its fill's timeout).
    awaited: [AtomicU64; SLOTS],
    /// Lease requests of keys not noted, and of them those that found a
    /// value.
    unnoted: Share,
}

impl Absences {
    /// Remembers nothing.
    pub(in crate::redis) fn new() -> Self {
        Self {
            began: Instant::now(),
            slots: std::array::from_fn(|_| Slot {
                id: AtomicU64::new(0),
                at_ms: AtomicU64::new(0),
            }),
            awaited: std::array::from_fn(|_| AtomicU64::new(0)),
            unnoted: Share::default(),
        }
    }

    fn slot(&self, id: u64) -> &Slot {
        // The low bits of an FNV-1a hash spread well enough for a hint.
        &self.slots[(id % SLOTS as u64) as usize]
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.began.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// A plain read found key `id` absent.
    pub(in crate::redis) fn note(&self, id: u64) {
        let slot = self.slot(id);
        slot.at_ms.store(self.now_ms(), Ordering::Relaxed);
        slot.id.store(id, Ordering::Relaxed);
    }

    /// Whether key `id` was read absent within [`FRESH`]; forgets it.
    pub(in crate::redis) fn take(&self, id: u64) -> bool {
        self.take_at(id, self.now_ms())
    }

    /// The lease of key `id` was found held elsewhere: its next request
    /// will likely find the holder's value.
    pub(in crate::redis) fn note_awaited(&self, id: u64) {
        self.awaited[(id % SLOTS as u64) as usize].store(id, Ordering::Relaxed);
    }

    /// Whether key `id`'s lease was lately found held elsewhere; forgets
    /// it.
    pub(in crate::redis) fn take_awaited(&self, id: u64) -> bool {
        self.awaited[(id % SLOTS as u64) as usize]
            .compare_exchange(id, 0, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// Whether a key not noted is best asked for in plain commands: while
    /// fewer than a quarter of such requests lately found a value.
    pub(in crate::redis) fn plain_unnoted(&self) -> bool {
        let (asked, present) = self.unnoted.counts();
        present * 4 < asked.max(1)
    }

    /// A lease request of a key not noted found a value (`present`) or
    /// none.
    pub(in crate::redis) fn found_unnoted(&self, present: bool) {
        self.unnoted.count(present);
    }

    /// [`take`](Self::take) at `now_ms` on the memory's clock.
    fn take_at(&self, id: u64, now_ms: u64) -> bool {
        let slot = self.slot(id);
        if slot.id.load(Ordering::Relaxed) != id {
            return false;
        }
        let age = now_ms.saturating_sub(slot.at_ms.load(Ordering::Relaxed));
        slot.id
            .compare_exchange(id, 0, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
            && u128::from(age) <= FRESH.as_millis()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_noted_key_is_taken_once_and_a_slot_keeps_the_last() {
        let absences = Absences::new();
        assert!(!absences.take(7));
        absences.note(7);
        assert!(absences.take(7));
        assert!(!absences.take(7), "taken once");
        absences.note(7);
        absences.note(7 + SLOTS as u64);
        assert!(!absences.take(7), "its slot went to another key");
        assert!(absences.take(7 + SLOTS as u64));
    }

    #[test]
    fn an_awaited_key_is_taken_once() {
        let absences = Absences::new();
        assert!(!absences.take_awaited(5));
        absences.note_awaited(5);
        assert!(absences.take_awaited(5));
        assert!(!absences.take_awaited(5), "taken once");
        absences.note_awaited(5);
        absences.note_awaited(5 + SLOTS as u64);
        assert!(!absences.take_awaited(5), "its slot went to another key");
    }

    #[test]
    fn keys_not_noted_go_plain_while_few_requests_find_a_value() {
        let absences = Absences::new();
        assert!(absences.plain_unnoted(), "nothing learnt: plain");
        absences.found_unnoted(true);
        assert!(!absences.plain_unnoted(), "one of one found a value");
        for _ in 0..3 {
            absences.found_unnoted(false);
        }
        assert!(!absences.plain_unnoted(), "one in four: the script");
        absences.found_unnoted(false);
        assert!(absences.plain_unnoted(), "one in five: plain");
    }

    #[test]
    fn a_miss_older_than_fresh_is_no_hint() {
        let absences = Absences::new();
        absences.note(9);
        let noted = absences.slot(9).at_ms.load(Ordering::Relaxed);
        let fresh = u64::try_from(FRESH.as_millis()).expect("fits");
        assert!(!absences.take_at(9, noted + fresh + 1));
        assert!(!absences.take(9), "forgotten too");
        absences.note(9);
        assert!(absences.take_at(9, noted + fresh), "still fresh");
    }
}

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

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

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

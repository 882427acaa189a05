//! The keys a store's plain reads lately found absent: a hint, never a
//! fact, for how the lease request that usually follows such a miss is
//! sent (see [`grant`](crate::redis::grant)).
//!
//! Lossy by design: 64 slots, each holding the id of the last key read
//! absent whose id falls in it. A key overwritten by another in its slot,
//! or never noted, is asked for with the script, which answers every case
//! in one round trip; a noted key is asked for in plain commands, which
//! cost the server less when the key is still absent, one round trip more
//! when another lease is out (the script then answers), two when a value
//! landed meanwhile (the release, then the script). Either request is
//! correct whatever the hint says.

use std::sync::atomic::{AtomicU64, Ordering};

/// How many keys are remembered at most.
const SLOTS: usize = 64;

/// The ids (hashes of value key names, as [`Expiries`] keys them) of keys
/// lately read absent.
///
/// [`Expiries`]: super::expiries::Expiries
pub(in crate::redis) struct Absences {
    slots: [AtomicU64; SLOTS],
}

impl Absences {
    /// Remembers nothing.
    pub(in crate::redis) fn new() -> Self {
        Self {
            slots: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    fn slot(&self, id: u64) -> &AtomicU64 {
        // The low bits of an FNV-1a hash spread well enough for a hint.
        &self.slots[(id % SLOTS as u64) as usize]
    }

    /// A plain read found key `id` absent.
    pub(in crate::redis) fn note(&self, id: u64) {
        self.slot(id).store(id, Ordering::Relaxed);
    }

    /// Whether key `id` was lately read absent; forgets it.
    pub(in crate::redis) fn take(&self, id: u64) -> bool {
        let slot = self.slot(id);
        slot.load(Ordering::Relaxed) == id
            && slot
                .compare_exchange(id, 0, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
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
}

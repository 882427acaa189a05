//! When a read touches the clear version guarding what it reads.
//!
//! Under an `allkeys-*` policy Redis evicts the key idle longest (of a
//! sample), and it keeps idle time to the second (`LRU_CLOCK_RESOLUTION`,
//! 1000 ms). A read that `TOUCH`es the clear version's copy guarding its
//! entry keeps the copy as warm as the entries read, but one `TOUCH` per
//! [`INTERVAL_MS`] and copy is as good at that resolution: the copy is
//! then never idle more than a quarter second longer than the last entry
//! read under it. So a read touches the copy only when its turn is due,
//! and otherwise sends exactly what it sent before (a lone `GET` stays a
//! lone `GET`). The scripts that read or write a value (the lease
//! request's hit, the commit, the write) take the same turns: they name
//! the copy only when it is due.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::clock::{Clock, CoarseClock};

/// The longest a copy goes untouched while entries under it are read.
pub(in crate::redis) const INTERVAL_MS: u64 = 250;

/// Slots of the table of last touches: copies whose ids share a slot
/// share its turn (each is then touched at least every other turn).
const SLOTS: usize = 4096;

/// When each copy (by the slot of its id) was last touched, by this
/// store's coarse clock. Reads only load a slot; a due touch claims it
/// with one compare-and-swap, so one read per interval touches.
pub(in crate::redis) struct Touches {
    clock: CoarseClock,
    last: Box<[AtomicU64]>,
}

impl Touches {
    pub(in crate::redis) fn new() -> Self {
        Self {
            clock: CoarseClock::new(),
            last: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Whether a read under the copy whose id (see
    /// [`ClearCopy::due`](crate::redis::keys::ClearCopy::due)) is `id` should
    /// touch it now; claims the turn if so.
    #[inline]
    pub(in crate::redis) fn due(&self, id: u64) -> bool {
        // Offset by the interval: 0 stands for "never touched".
        let now = self.clock.now_millis() + INTERVAL_MS;
        let slot = &self.last[(id % SLOTS as u64) as usize];
        let last = slot.load(Relaxed);
        if now.saturating_sub(last) < INTERVAL_MS {
            return false;
        }
        slot.compare_exchange(last, now, Relaxed, Relaxed).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_read_per_interval_touches_each_copy() {
        let touches = Touches::new();
        assert!(touches.due(7));
        assert!(!touches.due(7), "within the interval");
        assert!(touches.due(8), "another copy");
        std::thread::sleep(std::time::Duration::from_millis(INTERVAL_MS + 20));
        assert!(touches.due(7), "the next interval");
    }
}

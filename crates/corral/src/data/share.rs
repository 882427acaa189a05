//! A running share of outcomes, counted without a lock over a window that
//! halves: once [`WINDOW`] are counted both counts are halved, so old
//! outcomes weigh half as much as new ones. Its owner (a cache's tier, a
//! store) decides what share is enough; nothing is kept outside it.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

/// Outcomes counted before both counts are halved.
const WINDOW: u32 = 256;

/// How many outcomes were counted lately, and how many of them were "yes".
#[derive(Debug, Default)]
pub(crate) struct Share {
    counted: AtomicU32,
    yes: AtomicU32,
}

impl Share {
    /// Counts one outcome.
    pub(crate) fn count(&self, yes: bool) {
        if yes {
            self.yes.fetch_add(1, Relaxed);
        }
        if self.counted.fetch_add(1, Relaxed) + 1 >= WINDOW {
            // Racing updates may be lost here: the share stays roughly right.
            self.counted.store(WINDOW / 2, Relaxed);
            let yes = self.yes.load(Relaxed);
            self.yes.store((yes / 2).min(WINDOW / 2), Relaxed);
        }
    }

    /// The outcomes counted lately, and of them the "yes".
    #[inline]
    pub(crate) fn counts(&self) -> (u32, u32) {
        (self.counted.load(Relaxed), self.yes.load(Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_outcomes_weigh_half_as_much() {
        let share = Share::default();
        share.count(true);
        share.count(false);
        assert_eq!(share.counts(), (2, 1));
        for _ in 0..WINDOW - 2 {
            share.count(true);
        }
        assert_eq!(share.counts(), (WINDOW / 2, WINDOW / 2 - 1), "halved");
        for _ in 0..WINDOW * 4 {
            share.count(false);
        }
        let (counted, yes) = share.counts();
        assert!(counted <= WINDOW && yes * 16 < counted, "{counted} {yes}");
    }
}

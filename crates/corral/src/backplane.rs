//! The L1's side of the backplane: each cache with an L1 in front of a
//! shared store receives the namespace's change messages and evicts what
//! another cache changed. Messages carry keys and tags, never values; a
//! cache ignores its own.
//!
//! Evictions go through the flight table ([`FlightTable::detach`]), the
//! same way a local write does: a fill of the key already in flight here
//! still answers its callers but no longer writes its value into the L1,
//! and a read that started before the message does not keep what it read.
//!
//! [`FlightTable::detach`]: crate::flight::FlightTable::detach

use crate::cache::Inner;
use crate::stats::Counters;
use crate::store::{Change, ChangeSink, Event};

impl<V: Clone + Send + Sync + 'static> ChangeSink for Inner<V> {
    fn changed(&self, change: &Change) {
        if change.origin == self.origin {
            return;
        }
        let Some(local) = &self.tiers.l1 else {
            return;
        };
        Counters::bump(&self.counters.backplane_messages);
        match &change.event {
            Event::Filled(key) | Event::Written(key) | Event::Removed(key) => {
                self.flights.detach(key, || local.remove(key));
            }
            Event::TagInvalidated(_) | Event::Cleared => {
                self.flights.detach_all(|| local.clear());
            }
        }
    }

    fn lost(&self) {
        let Some(local) = &self.tiers.l1 else {
            return;
        };
        Counters::bump(&self.counters.backplane_resets);
        self.flights.detach_all(|| local.clear());
    }
}

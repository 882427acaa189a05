//! A cache's side of the backplane: each cache on a shared store receives
//! the namespace's change messages, evicts from its L1 what another cache
//! changed, and forgets the tag versions another cache moved. Messages
//! carry keys and tags, never values; a cache ignores its own.
//!
//! Evictions go through the flight table ([`FlightTable::detach`]), the
//! same way a local write does: a fill of the key already in flight here
//! still answers its callers but no longer writes its value into the L1,
//! and a read that started before the message does not keep what it read.
//!
//! Each message and reset is counted once acted on, so whoever sees the
//! count sees what it did.
//!
//! [`FlightTable::detach`]: crate::state::flight::FlightTable::detach

use crate::data::tags::CLEAR;
use crate::state::inner::Inner;
use crate::stats::Counters;
use crate::store::{Change, ChangeSink, Event};

impl<V: Clone + Send + Sync + 'static> ChangeSink for Inner<V> {
    fn changed(&self, change: &Change) {
        if change.origin == self.origin() {
            return;
        }
        match &change.event {
            Event::Filled(key) | Event::Written(key) | Event::Removed(key) => {
                // Without an L1 there is nothing of the key to evict.
                if self.tiers().l1.is_some() {
                    self.flights().detach(key, || self.remove_from_l1(key));
                    Counters::bump(&self.counters().backplane_messages);
                }
            }
            Event::TagInvalidated(tag) => {
                self.tag_moved(tag, None);
                Counters::bump(&self.counters().backplane_messages);
            }
            Event::Cleared => {
                self.tag_moved(CLEAR, None);
                Counters::bump(&self.counters().backplane_messages);
            }
        }
    }

    fn lost(&self) {
        // The subscription is back: the store answers, whatever the
        // breaker last saw, and flights waiting for it ask again.
        if let Some(store) = &self.tiers().l2 {
            store.heard();
        }
        self.flights().detach_all(|| {
            self.tags().distrust();
            self.clear_l1();
        });
        Counters::bump(&self.counters().backplane_resets);
    }
}

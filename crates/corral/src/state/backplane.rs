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
                    Counters::bump(&self.counters().backplane_messages);
                    self.flights().detach(key, || self.remove_from_l1(key));
                }
            }
            Event::TagInvalidated(tag) => {
                Counters::bump(&self.counters().backplane_messages);
                self.tag_moved(tag, None);
            }
            Event::Cleared => {
                Counters::bump(&self.counters().backplane_messages);
                self.tag_moved(CLEAR, None);
            }
        }
    }

    fn lost(&self) {
        Counters::bump(&self.counters().backplane_resets);
        self.flights().detach_all(|| {
            self.tags().distrust();
            self.clear_l1();
        });
    }
}

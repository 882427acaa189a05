//! A cache's side of the backplane: each cache on a shared store receives
//! the namespace's change messages, evicts from its L1 what another cache
//! changed, and forgets the tag versions another cache moved. Messages
//! carry keys and tags, never values; a cache ignores its own.
//!
//! Changes the store's server reports itself (Redis client tracking) are
//! acted on the same way, whoever made them: they carry no origin, and the
//! server reports none of this process's own writes. A flush — the server
//! may have stopped reporting — drops the L1 and the tag versions as a lost
//! backplane message does, counted by its reason; but a silence (the
//! server's reports may be getting lost while the store does not answer)
//! drops only what the L1 holds on the store's word, keeping the fills made
//! without it, and does not count as hearing from the store.
//!
//! Evictions go through the flight table ([`FlightTable::detach`]), the
//! same way a local write does: a fill of the key already in flight here
//! still answers its callers but no longer writes its value into the L1,
//! and a read that started before the message does not keep what it read.
//! A reset ([`FlightTable::reset`]) keeps every flight and read started
//! before it out of the L1 (after a silence, but for fills made without the
//! store).
//!
//! Each message and reset is counted once acted on, so whoever sees the
//! count sees what it did.
//!
//! [`FlightTable::detach`]: crate::state::flight::FlightTable::detach
//! [`FlightTable::reset`]: crate::state::flight::FlightTable::reset

use std::sync::atomic::AtomicU64;

use crate::data::tags::CLEAR;
use crate::state::flight::Reset;
use crate::state::inner::Inner;
use crate::stats::Counters;
use crate::store::{Change, ChangeSink, Event, FlushReason};

impl<V: Clone + Send + Sync + 'static> Inner<V> {
    /// Acts on `event`, counted in `counter` if it did anything.
    fn act_on(&self, event: &Event, counter: &AtomicU64) {
        match event {
            Event::Filled(key) | Event::Written(key) | Event::Removed(key) => {
                // Without an L1 there is nothing of the key to evict.
                if self.tiers().l1.is_some() {
                    self.flights().detach(key, || self.remove_from_l1(key));
                    Counters::bump(counter);
                }
            }
            Event::TagInvalidated(tag) => {
                self.tag_moved(tag, None);
                Counters::bump(counter);
            }
            Event::Cleared => {
                self.tag_moved(CLEAR, None);
                Counters::bump(counter);
            }
        }
    }

    /// Drops the L1 and the tag versions; flights and reads started before
    /// keep nothing in the L1.
    fn drop_everything(&self) {
        // The store is back (its subscription or connection answers),
        // whatever the breaker last saw, and flights waiting for it ask
        // again.
        if let Some(store) = &self.tiers().l2 {
            store.heard();
        }
        self.flights().reset(Reset::Whole, || {
            self.tags().distrust();
            self.clear_l1();
        });
    }

    /// Drops what the L1 holds on the store's word and the tag versions,
    /// keeping the fills made while the store did not answer (fresh from
    /// the source: no report of the store's could make them stale); reads
    /// and flights started before keep nothing they hold on the store's
    /// word. The store is not heard from: it is the one gone silent.
    fn drop_store_word(&self) {
        self.flights().reset(Reset::StoreWord, || {
            self.tags().forget_versions();
            self.keep_unverified_in_l1();
        });
    }
}

impl<V: Clone + Send + Sync + 'static> ChangeSink for Inner<V> {
    fn changed(&self, change: &Change) {
        if change.origin == self.origin() {
            return;
        }
        self.act_on(&change.event, &self.counters().backplane_messages);
    }

    fn lost(&self) {
        self.drop_everything();
        Counters::bump(&self.counters().backplane_resets);
    }

    fn invalidated(&self, event: &Event) {
        self.act_on(event, &self.counters().tracking_invalidations);
    }

    fn flushed(&self, reason: FlushReason) {
        if reason == FlushReason::Silence {
            self.drop_store_word();
        } else {
            self.drop_everything();
        }
        let counters = self.counters();
        Counters::bump(match reason {
            FlushReason::Reconnected => &counters.l1_flushes_reconnect,
            FlushReason::Failover => &counters.l1_flushes_failover,
            FlushReason::ServerFlush => &counters.l1_flushes_server_flush,
            FlushReason::Topology => &counters.l1_flushes_topology,
            FlushReason::Silence => &counters.l1_flushes_silence,
        });
    }

    fn keeps_copies(&self) -> bool {
        self.tiers().l1.is_some()
    }
}

//! The in-process tier: decoded values with their deadlines, in a bounded
//! concurrent map (quick_cache with sharded read locks: S3-FIFO eviction,
//! and hits on one hot key from many threads write no shared lock word; see
//! `BENCHMARKS.md`).

use std::sync::Arc;
use std::time::Duration;

use quick_cache::sync::Cache as Map;
use quick_cache::Weighter;

use crate::clock::{millis, Clock, CoarseClock};
use crate::entry::Ttls;
use crate::freshness::{quiet_for, Judged, Standing};

/// An in-process entry: the value (`None`: a cached "not found") and the
/// clock readings at which it changes standing. Kept small: a hit clones it
/// under the map's shard lock.
#[derive(Clone)]
pub(crate) struct LocalEntry<V> {
    value: Option<V>,
    /// Until this reading the entry is fresh and needs nothing: the one
    /// comparison of the hit path.
    quiet_until: u64,
    written_at: u64,
    fresh_ms: u64,
    stale_ms: u64,
    physical_ms: u64,
    weight: u32,
    fail_safe: bool,
}

impl<V> LocalEntry<V> {
    /// The entry judged at clock reading `now`.
    fn judge(self, now: u64, eager: Option<f64>) -> Judged<V> {
        let ttls = Ttls {
            fresh: Duration::from_millis(self.fresh_ms),
            stale: Duration::from_millis(self.stale_ms),
            physical: Duration::from_millis(self.physical_ms),
        };
        let age = Duration::from_millis(now.saturating_sub(self.written_at));
        Judged::new(self.value, age, ttls, self.fail_safe, eager)
    }
}

#[derive(Clone, Copy)]
pub(crate) struct EntryWeighter;

impl<V> Weighter<Box<str>, LocalEntry<V>> for EntryWeighter {
    fn weight(&self, _key: &Box<str>, entry: &LocalEntry<V>) -> u64 {
        u64::from(entry.weight)
    }
}

/// The clock of the in-process tier: the default coarse clock, read without
/// a virtual call, or an injected one.
pub(crate) enum TierClock {
    Coarse(CoarseClock),
    Injected(Arc<dyn Clock>),
}

impl TierClock {
    #[inline]
    fn now_millis(&self) -> u64 {
        match self {
            Self::Coarse(clock) => clock.now_millis(),
            Self::Injected(clock) => clock.now_millis(),
        }
    }
}

/// Decoded values of one cache instance, bounded by total weight.
pub(crate) struct LocalTier<V> {
    map: Map<Box<str>, LocalEntry<V>, EntryWeighter>,
    clock: TierClock,
    eager: Option<f64>,
}

impl<V: Clone> LocalTier<V> {
    pub(crate) fn new(
        estimated_items: usize,
        weight_capacity: u64,
        clock: TierClock,
        eager: Option<f64>,
    ) -> Self {
        Self {
            map: Map::with_weighter(
                estimated_items.max(1),
                weight_capacity.max(1),
                EntryWeighter,
            ),
            clock,
            eager,
        }
    }

    /// The value of `key` if it is present, a value (not a cached "not
    /// found") and fresh with nothing due. No allocation, no await, one clock
    /// read: the hit path.
    #[inline]
    pub(crate) fn get_quiet(&self, key: &str) -> Option<V> {
        let entry = self.map.get(key)?;
        if entry.quiet_until > self.clock.now_millis() {
            entry.value
        } else {
            None
        }
    }

    /// The entry of `key` judged at the clock's now, unless absent or gone.
    pub(crate) fn judge(&self, key: &str) -> Option<Judged<V>> {
        let entry = self.map.get(key)?;
        let judged = entry.judge(self.clock.now_millis(), self.eager);
        (judged.standing != Standing::Gone).then_some(judged)
    }

    /// Stores `value` with `ttls`, weighing `weight` toward the bound.
    pub(crate) fn insert(
        &self,
        key: &str,
        value: Option<V>,
        ttls: Ttls,
        fail_safe: bool,
        weight: u32,
    ) {
        let now = self.clock.now_millis();
        let quiet = quiet_for(ttls, fail_safe, self.eager);
        self.map.insert(
            key.into(),
            LocalEntry {
                value,
                quiet_until: now.saturating_add(millis(quiet)),
                written_at: now,
                fresh_ms: millis(ttls.fresh),
                stale_ms: millis(ttls.stale),
                physical_ms: millis(ttls.physical),
                weight: weight.max(1),
                fail_safe,
            },
        );
    }

    pub(crate) fn remove(&self, key: &str) {
        self.map.remove(key);
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

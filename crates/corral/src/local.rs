//! The in-process tier: decoded values with a deadline, in a bounded
//! concurrent map (quick_cache: S3-FIFO eviction, sharded, measured as the
//! fastest hit among the candidates, see `BENCHMARKS.md`).

use std::sync::Arc;

use quick_cache::sync::Cache as Map;
use quick_cache::Weighter;

use crate::clock::Clock;

/// An in-process entry: the value and the clock reading at which it expires.
#[derive(Clone)]
pub(crate) struct LocalEntry<V> {
    value: V,
    expires_at: u64,
    weight: u32,
}

#[derive(Clone, Copy)]
pub(crate) struct EntryWeighter;

impl<V> Weighter<Box<str>, LocalEntry<V>> for EntryWeighter {
    fn weight(&self, _key: &Box<str>, entry: &LocalEntry<V>) -> u64 {
        u64::from(entry.weight)
    }
}

/// Decoded values of one cache instance, bounded by total weight.
pub(crate) struct LocalTier<V> {
    map: Map<Box<str>, LocalEntry<V>, EntryWeighter>,
    clock: Arc<dyn Clock>,
}

impl<V: Clone> LocalTier<V> {
    pub(crate) fn new(estimated_items: usize, weight_capacity: u64, clock: Arc<dyn Clock>) -> Self {
        Self {
            map: Map::with_weighter(
                estimated_items.max(1),
                weight_capacity.max(1),
                EntryWeighter,
            ),
            clock,
        }
    }

    /// The value of `key` if present and not expired. No allocation, no
    /// await, one clock read.
    #[inline]
    pub(crate) fn get(&self, key: &str) -> Option<V> {
        let entry = self.map.get(key)?;
        if entry.expires_at > self.clock.now_millis() {
            Some(entry.value)
        } else {
            None
        }
    }

    /// Stores `value` for `ttl_millis`, weighing `weight` toward the bound.
    pub(crate) fn insert(&self, key: &str, value: V, ttl_millis: u64, weight: u32) {
        let expires_at = self.clock.now_millis().saturating_add(ttl_millis);
        self.map.insert(
            key.into(),
            LocalEntry {
                value,
                expires_at,
                weight: weight.max(1),
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

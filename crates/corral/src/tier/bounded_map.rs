//! A bounded concurrent map: quick_cache's single-threaded S3-FIFO cache,
//! split into shards, each behind a `crossbeam_utils` [`ShardedLock`].
//!
//! A read takes only the reading thread's slice of its shard's lock, so hits
//! on one hot key from many threads write no shared lock word (the property
//! the in-process hit path is measured on, see `BENCHMARKS.md`). corral
//! builds this itself rather than turning on a quick_cache lock feature:
//! quick_cache's `sharded-lock` and its default `parking_lot` exclude each
//! other, so turning it on would break every application that also depends
//! on quick_cache with its defaults. Only `quick_cache::unsync` is used,
//! which no feature changes.

use std::hash::{BuildHasher, Hash};

use crossbeam_utils::sync::ShardedLock;
use crossbeam_utils::CachePadded;
use foldhash::fast::RandomState;
use quick_cache::unsync::Cache;
use quick_cache::{Equivalent, Lifecycle, Weighter};

use crate::sync::{read, write};

type Shard<K, V, W> = CachePadded<ShardedLock<Cache<K, V, W, RandomState, Collect>>>;

/// Hands the entries an insert evicts (or refuses, oversized) back to the
/// caller of [`BoundedMap::insert`], so that what indexes them can forget
/// them: nothing leaves the map unseen except by `clear` and `remove`,
/// whose callers know what they dropped.
#[derive(Clone, Copy, Default)]
pub(crate) struct Collect;

impl<K, V> Lifecycle<K, V> for Collect {
    type RequestState = Vec<(K, V)>;

    fn on_evict(&self, state: &mut Self::RequestState, key: K, val: V) {
        state.push((key, val));
    }
}

/// Entries bounded by total weight, evicted by S3-FIFO per shard.
pub(crate) struct BoundedMap<K, V, W> {
    shards: Box<[Shard<K, V, W>]>,
    /// Picks the shard; each shard hashes again with its own seed.
    hasher: RandomState,
}

impl<K: Eq + Hash, V: Clone, W: Weighter<K, V> + Clone> BoundedMap<K, V, W> {
    /// A map of about `estimated_items` entries and at most
    /// `weight_capacity` total weight (both at least 1).
    pub(crate) fn new(estimated_items: usize, weight_capacity: u64, weighter: W) -> Self {
        let count = shard_count(weight_capacity);
        let items = (estimated_items / count).max(1);
        let weight = (weight_capacity / count as u64).max(1);
        let shards = (0..count)
            .map(|_| {
                CachePadded::new(ShardedLock::new(Cache::with(
                    items,
                    weight,
                    weighter.clone(),
                    RandomState::default(),
                    Collect,
                )))
            })
            .collect();
        Self {
            shards,
            hasher: RandomState::default(),
        }
    }

    fn shard<Q: Hash + ?Sized>(
        &self,
        key: &Q,
    ) -> &ShardedLock<Cache<K, V, W, RandomState, Collect>> {
        // The high bits: the low ones are what the shard's table uses.
        let hash = self.hasher.hash_one(key);
        let at = (hash >> 32) as usize & (self.shards.len() - 1);
        &self.shards[at]
    }

    /// A copy of the value of `key`, taken under the shard's read lock.
    #[inline]
    pub(crate) fn get<Q>(&self, key: &Q) -> Option<V>
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        read(self.shard(key)).get(key).cloned()
    }

    /// Inserts (or replaces) `key`; returns the entries evicted to make
    /// room, or the entry itself if it could not be admitted (heavier than
    /// its shard). Dropped by the caller, outside the shard's lock.
    pub(crate) fn insert(&self, key: K, value: V) -> Vec<(K, V)> {
        let mut evicted = Vec::new();
        write(self.shard(&key)).insert_with_lifecycle(key, value, &mut evicted);
        evicted
    }

    /// Removes `key`, returning its entry if it was there.
    pub(crate) fn remove<Q>(&self, key: &Q) -> Option<(K, V)>
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        write(self.shard(key)).remove(key)
    }

    /// Removes `key` if its entry passes `check`, returning it.
    pub(crate) fn remove_if<Q>(&self, key: &Q, check: impl FnOnce(&V) -> bool) -> Option<(K, V)>
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        write(self.shard(key)).remove_if(key, check)
    }

    pub(crate) fn clear(&self) {
        for shard in &*self.shards {
            write(shard).clear();
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|shard| read(shard).len()).sum()
    }
}

/// Four shards per CPU (a power of two), fewer for small bounds so that
/// every shard can hold a few entries.
fn shard_count(weight_capacity: u64) -> usize {
    let cpus = std::thread::available_parallelism().map_or(4, usize::from);
    let wanted = (cpus * 4).next_power_of_two();
    let affordable = (weight_capacity / 32).max(1);
    let mut count = wanted;
    while count > 1 && count as u64 > affordable {
        count /= 2;
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;
    use quick_cache::UnitWeighter;

    #[test]
    fn holds_removes_clears_and_stays_bounded() {
        let map = BoundedMap::<u64, u64, UnitWeighter>::new(1_000, 1_000, UnitWeighter);
        let mut evicted = 0;
        for i in 0..10_000 {
            evicted += map.insert(i, i * 2).len();
        }
        let len = map.len();
        assert!(len > 0 && len <= 1_000, "{len} entries kept");
        assert_eq!(
            len + evicted,
            10_000,
            "every entry that left was handed back"
        );
        map.insert(7, 14);
        assert_eq!(map.get(&7), Some(14));
        assert_eq!(map.remove_if(&7, |value| *value == 0), None);
        assert_eq!(map.remove(&7), Some((7, 14)));
        assert_eq!(map.get(&7), None);
        map.clear();
        assert_eq!(map.len(), 0);
    }

    #[test]
    fn a_bound_of_one_still_holds_an_entry() {
        let map = BoundedMap::<u64, u64, UnitWeighter>::new(1, 1, UnitWeighter);
        map.insert(1, 1);
        assert_eq!(map.get(&1), Some(1));
    }
}

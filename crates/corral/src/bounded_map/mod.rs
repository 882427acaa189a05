//! A bounded concurrent map: entries in shards, each behind a
//! `crossbeam_utils` [`ShardedLock`], evicted in one S3-FIFO order over all
//! shards ([`Order`]).
//!
//! A read takes only the reading thread's slice of its shard's lock and
//! raises the entry's own reference count, so hits on one hot key from
//! many threads write no shared lock word and nothing of the map's (the
//! property the in-process hit path is measured on, see `BENCHMARKS.md`).
//! Inserts and removals take the map's one mutex, then the shard locks they
//! need one at a time: the eviction order, the total weight and the ghosts
//! are the map's, not a shard's, so the map holds exactly its capacity and
//! keeps what one unsharded S3-FIFO of that capacity keeps, whatever the
//! shard count (see `examples/l1_hit_ratio.rs`).
//!
//! corral builds this itself rather than sharding `quick_cache::unsync`
//! caches: each of those evicts on its own within a fixed share of the
//! capacity, and a shard that draws more of the working set than its share
//! churns, so the hit ratio fell as CPUs (and so shards) grew.
//!
//! It sits below the tiers and the stores: the L1 (`tier/local.rs`) keeps
//! its entries in one, and the Redis store its expiries
//! (`redis/read/expiries.rs`).

mod eviction;
#[cfg(all(test, not(shuttle)))]
#[allow(dead_code)]
mod workloads;

use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicU16, Ordering};

use crossbeam_utils::sync::ShardedLock;
use crossbeam_utils::CachePadded;
use foldhash::fast::RandomState;
use hashbrown::HashTable;
use quick_cache::{Equivalent, Weighter};

use self::eviction::{Order, Residents, MAX_REFERENCES};
use crate::sync::{lock, read, write, Mutex};

/// An entry in its shard.
struct Slot<K, V> {
    key: K,
    value: V,
    /// Raised by hits (up to [`MAX_REFERENCES`]), lowered by the eviction
    /// order's sweeps.
    references: AtomicU16,
    /// The entry's node in the eviction order.
    node: u32,
}

type Shard<K, V> = CachePadded<ShardedLock<HashTable<Slot<K, V>>>>;

/// The most shards a map takes, asked or not.
pub(crate) const MAX_SHARDS: usize = 1024;

/// Entries bounded by total weight, evicted by one S3-FIFO.
pub(crate) struct BoundedMap<K, V, W> {
    shards: Box<[Shard<K, V>]>,
    /// Taken by every change of the entries (insert, removal, eviction),
    /// before any shard lock; never by a read.
    order: Mutex<Order>,
    /// One hash per key: its high bits pick the shard, the shard's table
    /// uses the rest.
    hasher: RandomState,
    weighter: W,
}

impl<K: Eq + Hash, V: Clone, W: Weighter<K, V>> BoundedMap<K, V, W> {
    /// A map of about `estimated_items` entries and at most
    /// `weight_capacity` total weight (both at least 1), sharded for this
    /// machine's CPUs.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn new(estimated_items: usize, weight_capacity: u64, weighter: W) -> Self {
        Self::with_shards(estimated_items, weight_capacity, weighter, None)
    }

    /// [`Self::new`] with `shards` shards if given (rounded up to a power
    /// of two, at most [`MAX_SHARDS`]) instead of the count for this
    /// machine: how tests show a many-CPU layout on a small machine.
    pub(crate) fn with_shards(
        estimated_items: usize,
        weight_capacity: u64,
        weighter: W,
        shards: Option<usize>,
    ) -> Self {
        let count = shards.map_or_else(
            || shard_count(weight_capacity),
            |asked| asked.clamp(1, MAX_SHARDS).next_power_of_two(),
        );
        let per_shard = estimated_items / count;
        let shards = (0..count)
            .map(|_| CachePadded::new(ShardedLock::new(HashTable::with_capacity(per_shard))))
            .collect();
        Self {
            shards,
            order: Mutex::new(Order::new(estimated_items.max(1), weight_capacity.max(1))),
            hasher: RandomState::default(),
            weighter,
        }
    }

    #[inline]
    fn hash<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        self.hasher.hash_one(key)
    }

    #[inline]
    fn shard(&self, hash: u64) -> &ShardedLock<HashTable<Slot<K, V>>> {
        shard_of(&self.shards, hash)
    }

    /// A copy of the value of `key`, taken under the shard's read lock.
    #[inline]
    pub(crate) fn get<Q>(&self, key: &Q) -> Option<V>
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        self.get_with(key, V::clone)
    }

    /// What `look` makes of the value of `key`, under the shard's read
    /// lock (a read like [`get`](Self::get), without a copy).
    #[inline]
    pub(crate) fn get_with<Q, R>(&self, key: &Q, look: impl FnOnce(&V) -> R) -> Option<R>
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        let hash = self.hash(key);
        let table = read(self.shard(hash));
        let slot = table.find(hash, |slot| key.equivalent(&slot.key))?;
        // A hot entry's count is at its bound: reading it writes nothing.
        if slot.references.load(Ordering::Relaxed) < MAX_REFERENCES {
            slot.references.fetch_add(1, Ordering::Relaxed);
        }
        Some(look(&slot.value))
    }

    /// Inserts (or replaces) `key`; returns the entries evicted to make
    /// room and the one replaced, or the entry itself if it could not be
    /// admitted (heavier than the hot ring's target). Dropped by the
    /// caller, outside every lock.
    pub(crate) fn insert(&self, key: K, value: V) -> Vec<(K, V)> {
        let mut evicted = Vec::new();
        let hash = self.hash(&key);
        let weight = self.weighter.weight(&key, &value);
        let mut order = lock(&self.order);
        if !order.admits(weight) {
            if let Some(old) = self.remove_entry(&mut order, hash, &key, |_| true) {
                evicted.push(old);
            }
            evicted.push((key, value));
            return evicted;
        }
        // Only holders of the order change a shard: what the read lock
        // finds stays until this insert writes. Most inserts are of new
        // keys, which then take the shard's write lock once.
        let present = read(self.shard(hash))
            .find(hash, |slot| slot.key == key)
            .is_some();
        let replaced = if !present {
            Err((key, value))
        } else {
            let mut table = write(self.shard(hash));
            match table.find_mut(hash, |slot| slot.key == key) {
                Some(slot) => {
                    let old_key = std::mem::replace(&mut slot.key, key);
                    let old_value = std::mem::replace(&mut slot.value, value);
                    let references = slot.references.get_mut();
                    *references = references.saturating_add(1).min(MAX_REFERENCES);
                    evicted.push((old_key, old_value));
                    Ok(slot.node)
                }
                None => Err((key, value)),
            }
        };
        let mut residents = Shards {
            map: self,
            evicted: &mut evicted,
        };
        let (key, value) = match replaced {
            Ok(node) => {
                order.reweigh(node, weight);
                order.shrink(&mut residents);
                return evicted;
            }
            Err(new) => new,
        };
        let ghost = order.take_ghost(hash);
        let hot = ghost || order.enters_hot(weight);
        if !ghost {
            order.make_room(weight, &mut residents);
        }
        let Some(node) = order.push(hash, weight, hot) else {
            evicted.push((key, value));
            return evicted;
        };
        write(self.shard(hash)).insert_unique(
            hash,
            Slot {
                key,
                value,
                references: AtomicU16::new(0),
                node,
            },
            |slot| self.hasher.hash_one(&slot.key),
        );
        if ghost {
            order.shrink(&mut Shards {
                map: self,
                evicted: &mut evicted,
            });
        }
        evicted
    }

    /// Removes `key`'s entry if `check` passes it, with the order locked.
    fn remove_entry<Q>(
        &self,
        order: &mut Order,
        hash: u64,
        key: &Q,
        check: impl FnOnce(&V) -> bool,
    ) -> Option<(K, V)>
    where
        Q: Equivalent<K> + ?Sized,
    {
        let mut table = write(self.shard(hash));
        let found = table
            .find_entry(hash, |slot| key.equivalent(&slot.key))
            .ok()?;
        if !check(&found.get().value) {
            return None;
        }
        let (slot, _) = found.remove();
        drop(table);
        order.forget(slot.node);
        Some((slot.key, slot.value))
    }

    /// Removes `key`, returning its entry if it was there.
    pub(crate) fn remove<Q>(&self, key: &Q) -> Option<(K, V)>
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        self.remove_if(key, |_| true)
    }

    /// Removes `key` if its entry passes `check`, returning it.
    pub(crate) fn remove_if<Q>(&self, key: &Q, check: impl FnOnce(&V) -> bool) -> Option<(K, V)>
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        let hash = self.hash(key);
        let mut order = lock(&self.order);
        self.remove_entry(&mut order, hash, key, check)
    }

    /// Removes every entry `keep` does not pass, returning them (to be
    /// dropped by the caller, outside every lock).
    pub(crate) fn retain(&self, mut keep: impl FnMut(&V) -> bool) -> Vec<(K, V)> {
        let mut order = lock(&self.order);
        let mut removed = Vec::new();
        for shard in &*self.shards {
            let mut table = write(shard);
            for slot in table.extract_if(|slot| !keep(&slot.value)) {
                order.forget(slot.node);
                removed.push((slot.key, slot.value));
            }
        }
        removed
    }

    pub(crate) fn clear(&self) {
        let mut order = lock(&self.order);
        for shard in &*self.shards {
            write(shard).clear();
        }
        order.clear();
    }

    pub(crate) fn len(&self) -> usize {
        lock(&self.order).len()
    }

    /// The total weight held.
    #[cfg(test)]
    fn weight(&self) -> u64 {
        lock(&self.order).weight()
    }
}

fn shard_of<K, V>(shards: &[Shard<K, V>], hash: u64) -> &ShardedLock<HashTable<Slot<K, V>>> {
    // The high bits: the table's buckets use the low ones, its tags the top
    // seven.
    &shards[(hash >> 32) as usize & (shards.len() - 1)]
}

/// The shards as the eviction order sees them, during one insert.
struct Shards<'a, K, V, W> {
    map: &'a BoundedMap<K, V, W>,
    evicted: &'a mut Vec<(K, V)>,
}

impl<K, V, W> Residents for Shards<'_, K, V, W> {
    fn take_reference(&mut self, hash: u64, node: u32) -> bool {
        let table = read(shard_of(&self.map.shards, hash));
        let Some(slot) = table.find(hash, |slot| slot.node == node) else {
            return false;
        };
        let references = slot.references.load(Ordering::Relaxed);
        if references == 0 {
            return false;
        }
        // A hit racing this store may be lost: it only costs the entry
        // one reference.
        slot.references
            .store(references.min(MAX_REFERENCES) - 1, Ordering::Relaxed);
        true
    }

    fn evict(&mut self, hash: u64, node: u32) {
        let mut table = write(shard_of(&self.map.shards, hash));
        if let Ok(found) = table.find_entry(hash, |slot| slot.node == node) {
            let (slot, _) = found.remove();
            self.evicted.push((slot.key, slot.value));
        }
    }
}

/// Four shards per CPU (a power of two), fewer for small bounds: a shard
/// costs its lock's slices whether it holds entries or not.
fn shard_count(weight_capacity: u64) -> usize {
    let cpus = std::thread::available_parallelism().map_or(4, usize::from);
    let wanted = (cpus * 4).next_power_of_two().min(MAX_SHARDS);
    let affordable = (weight_capacity / 32).max(1);
    let mut count = wanted;
    while count > 1 && count as u64 > affordable {
        count /= 2;
    }
    count
}

#[cfg(all(test, not(shuttle)))]
mod tests {
    use super::workloads;
    use super::*;
    use quick_cache::UnitWeighter;

    #[test]
    fn holds_removes_clears_and_stays_bounded() {
        let map = BoundedMap::<u64, u64, UnitWeighter>::new(1_000, 1_000, UnitWeighter);
        let mut evicted = 0;
        for i in 0..10_000 {
            evicted += map.insert(i, i * 2).len();
        }
        assert_eq!(map.len(), 1_000, "full to its bound");
        assert_eq!(
            map.len() + evicted,
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
        assert_eq!(map.weight(), 0);
        map.insert(8, 16);
        assert_eq!(map.get(&8), Some(16), "usable after a clear");
    }

    #[test]
    fn holds_exactly_the_capacity_asked_for_at_any_shard_count() {
        for shards in [1, 8, 32, 64] {
            let map = BoundedMap::<u64, u64, UnitWeighter>::with_shards(
                500,
                500,
                UnitWeighter,
                Some(shards),
            );
            for i in 0..5_000 {
                map.insert(i, i);
            }
            assert_eq!(map.len(), 500, "{shards} shards");
            assert_eq!(map.weight(), 500, "{shards} shards");
        }
    }

    #[derive(Clone, Copy)]
    struct ByValue;

    impl Weighter<u64, u64> for ByValue {
        fn weight(&self, _key: &u64, value: &u64) -> u64 {
            *value
        }
    }

    #[test]
    fn weights_replacements_and_refusals_are_accounted() {
        let map = BoundedMap::<u64, u64, ByValue>::with_shards(100, 100, ByValue, Some(8));
        let mut held = std::collections::HashMap::new();
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..5_000 {
            let key = rng.u64(0..60);
            let value = rng.u64(1..12);
            let mut replaced = held.insert(key, value);
            for (gone, old) in map.insert(key, value) {
                if gone == key && replaced == Some(old) {
                    // The entry the insert replaced (handed back first).
                    replaced = None;
                } else {
                    held.remove(&gone);
                }
            }
            let total: u64 = held.values().sum();
            assert!(map.weight() <= 100, "over the bound: {}", map.weight());
            assert_eq!(map.weight(), total, "the order's weight is the entries'");
            assert_eq!(map.len(), held.len());
        }
        // Heavier than the hot ring's target (97): refused, and the key's
        // previous entry goes with it.
        map.insert(1_000, 5);
        let refused = map.insert(1_000, 98);
        assert_eq!(refused, vec![(1_000, 5), (1_000, 98)]);
        assert_eq!(map.get(&1_000), None);
    }

    #[test]
    fn threads_inserting_reading_and_removing_keep_the_bound_and_the_count() {
        let map = BoundedMap::<u64, u64, UnitWeighter>::with_shards(64, 64, UnitWeighter, Some(16));
        let left = std::sync::atomic::AtomicUsize::new(0);
        let inserted = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for seed in 0..4 {
                let (map, left, inserted) = (&map, &left, &inserted);
                scope.spawn(move || {
                    let mut rng = fastrand::Rng::with_seed(seed);
                    for _ in 0..20_000 {
                        let key = rng.u64(0..200);
                        match rng.u8(0..10) {
                            0 => {
                                let gone = map.remove(&key).is_some();
                                left.fetch_add(usize::from(gone), Ordering::Relaxed);
                            }
                            1..=4 => {
                                inserted.fetch_add(1, Ordering::Relaxed);
                                let gone = map.insert(key, key).len();
                                left.fetch_add(gone, Ordering::Relaxed);
                            }
                            _ => assert!(map.get(&key).is_none_or(|value| value == key)),
                        }
                    }
                });
            }
        });
        assert!(map.len() <= 64, "{} entries", map.len());
        assert_eq!(map.weight(), map.len() as u64);
        assert_eq!(
            map.len() + left.load(Ordering::Relaxed),
            inserted.load(Ordering::Relaxed),
            "every entry that left was handed back once"
        );
    }

    #[test]
    fn a_bound_of_one_still_holds_an_entry() {
        let map = BoundedMap::<u64, u64, UnitWeighter>::new(1, 1, UnitWeighter);
        map.insert(1, 1);
        assert_eq!(map.get(&1), Some(1));
        map.insert(2, 2);
        assert_eq!((map.get(&2), map.len()), (Some(2), 1));
    }

    /// The hits of one unsharded `quick_cache::unsync` S3-FIFO of
    /// `capacity` entries on `keys`.
    fn unsharded_hits(capacity: u64, keys: &[u64]) -> usize {
        let mut cache = quick_cache::unsync::Cache::<u64, (), UnitWeighter, RandomState>::with(
            capacity as usize,
            capacity,
            UnitWeighter,
            RandomState::default(),
            quick_cache::unsync::DefaultLifecycle::default(),
        );
        keys.iter()
            .filter(|&&key| {
                let hit = cache.get(&key).is_some();
                if !hit {
                    cache.insert(key, ());
                }
                hit
            })
            .count()
    }

    #[test]
    fn hit_ratio_is_one_unsharded_s3_fifos_at_any_shard_count() {
        let capacity = 256;
        let requests = 20_000;
        for workload in workloads::standard(capacity, requests, 42) {
            let baseline = unsharded_hits(capacity, &workload.keys) as f64 / requests as f64;
            for shards in [1, 8, 32, 64] {
                let map = BoundedMap::<u64, (), UnitWeighter>::with_shards(
                    capacity as usize,
                    capacity,
                    UnitWeighter,
                    Some(shards),
                );
                let hits = workload
                    .keys
                    .iter()
                    .filter(|&&key| {
                        let hit = map.get(&key).is_some();
                        if !hit {
                            map.insert(key, ());
                        }
                        hit
                    })
                    .count();
                let ratio = hits as f64 / requests as f64;
                assert!(
                    (ratio - baseline).abs() <= 0.003,
                    "{}, {shards} shards: {:.2}% against {:.2}% unsharded",
                    workload.name,
                    ratio * 100.0,
                    baseline * 100.0
                );
            }
        }
    }
}

//! The in-process tier: decoded values with their deadlines, in a bounded
//! concurrent map ([`BoundedMap`]: S3-FIFO eviction, and hits on one hot
//! key from many threads write no shared lock word; see `BENCHMARKS.md`).

use std::sync::Arc;
use std::time::Duration;

use quick_cache::Weighter;

use crate::bounded_map::BoundedMap;
use crate::clock::{millis, Clock};
use crate::data::entry::Ttls;
use crate::data::freshness::{quiet_for, Judged, Standing};
use crate::tier::ticker::TickedClock;

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
    /// The reading at which the in-process copy is dropped whatever its
    /// freshness (the tier's lifetime cap; `u64::MAX` without one).
    until: u64,
    weight: u32,
    fail_safe: bool,
    /// Filled from the source while the store did not answer: held on no
    /// word of the store's, so kept when what is held on its word is
    /// dropped ([`LocalTier::keep_unverified`]). Never read by a hit.
    unverified: bool,
    /// The id of the insert that put it here (see [`Left`]).
    id: u64,
}

/// An entry to insert: the value and what the tier judges it by.
pub(crate) struct InL1<V> {
    pub(crate) value: Option<V>,
    pub(crate) ttls: Ttls,
    pub(crate) fail_safe: bool,
    pub(crate) weight: u32,
    /// Its age when written (by the clock of the store it was read from).
    pub(crate) age: Duration,
}

/// An entry that left the tier (evicted, refused, expired or removed): its
/// key and the id it was inserted with, for what indexes the tier's keys.
pub(crate) type Left = (Box<str>, u64);

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

/// The clock of the in-process tier: the default coarse clock with its
/// ticked reading for hot caches, or an injected clock (read on every hit).
pub(crate) enum TierClock {
    Coarse(TickedClock),
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

    /// The reading a hit compares with; never ahead of `now_millis`.
    #[inline]
    fn hit_now(&self) -> u64 {
        match self {
            Self::Coarse(clock) => clock.hit_now(),
            Self::Injected(clock) => clock.now_millis(),
        }
    }
}

/// Decoded values of one cache instance, bounded by total weight.
pub(crate) struct LocalTier<V> {
    map: BoundedMap<Box<str>, LocalEntry<V>, EntryWeighter>,
    clock: TierClock,
    eager: Option<f64>,
    /// The longest an entry stays in process, in ms (`None`: as long as
    /// its freshness allows).
    lifetime_ms: Option<u64>,
}

impl<V: Clone> LocalTier<V> {
    /// A tier of about `estimated_items` entries and at most
    /// `weight_capacity` total weight, in `shards` shards if given (else
    /// as many as suit this machine: see [`BoundedMap::with_shards`]).
    pub(crate) fn new(
        estimated_items: usize,
        weight_capacity: u64,
        clock: TierClock,
        eager: Option<f64>,
        lifetime: Option<Duration>,
        shards: Option<usize>,
    ) -> Self {
        Self {
            map: BoundedMap::with_shards(
                estimated_items.max(1),
                weight_capacity.max(1),
                EntryWeighter,
                shards,
            ),
            clock,
            eager,
            lifetime_ms: lifetime.map(millis),
        }
    }

    /// The value of `key` if it is present, a value (not a cached "not
    /// found") and fresh with nothing due. No allocation, no await, and on a
    /// hot cache no clock call: the hit path.
    #[inline]
    pub(crate) fn get_quiet(&self, key: &str) -> Option<V> {
        let entry = self.map.get(key)?;
        if entry.quiet_until > self.clock.hit_now() {
            entry.value
        } else {
            None
        }
    }

    /// The entry of `key` judged at the clock's now, unless absent, gone, or
    /// past the tier's lifetime cap; an entry gone or past the cap is
    /// dropped, and handed to `left`.
    pub(crate) fn judge(&self, key: &str, left: impl FnOnce(Left)) -> Option<Judged<V>> {
        let entry = self.map.get(key)?;
        let now = self.clock.now_millis();
        let id = entry.id;
        let judged = (now < entry.until)
            .then(|| entry.judge(now, self.eager))
            .filter(|judged| judged.standing != Standing::Gone);
        if judged.is_none() {
            if let Some((key, dropped)) = self.map.remove_if(key, |entry| entry.id == id) {
                left((key, dropped.id));
            }
        }
        judged
    }

    /// Stores `value` written with `ttls` and already `age` old (read from
    /// a shared store, whose clock judged that age), weighing `weight`
    /// toward the bound, as insert `id`; `unverified`: filled while the
    /// store did not answer. The copy goes quiet no later than
    /// the original, and never outlives the tier's lifetime cap. Returns
    /// the entries that left to make room (or this one, if it could not be
    /// admitted).
    pub(crate) fn insert(&self, key: &str, id: u64, entry: InL1<V>, unverified: bool) -> Vec<Left> {
        let InL1 {
            value,
            ttls,
            fail_safe,
            weight,
            age,
        } = entry;
        let now = self.clock.now_millis();
        let written_at = now.saturating_sub(millis(age));
        let until = self
            .lifetime_ms
            .map_or(u64::MAX, |lifetime| now.saturating_add(lifetime));
        let quiet = quiet_for(ttls, fail_safe, self.eager);
        let evicted = self.map.insert(
            key.into(),
            LocalEntry {
                value,
                quiet_until: written_at.saturating_add(millis(quiet)).min(until),
                written_at,
                fresh_ms: millis(ttls.fresh),
                stale_ms: millis(ttls.stale),
                physical_ms: millis(ttls.physical),
                until,
                weight: weight.max(1),
                fail_safe,
                unverified,
                id,
            },
        );
        evicted
            .into_iter()
            .map(|(key, entry)| (key, entry.id))
            .collect()
    }

    /// Drops every entry.
    pub(crate) fn clear(&self) {
        self.map.clear();
    }

    /// Drops every entry but those filled while the store did not answer
    /// (inserted `unverified`); returns those dropped.
    pub(crate) fn keep_unverified(&self) -> Vec<Left> {
        self.map
            .retain(|entry| entry.unverified)
            .into_iter()
            .map(|(key, entry)| (key, entry.id))
            .collect()
    }

    /// A thread passed a hit-counter milestone (see
    /// [`StripedCounter::incr`](crate::stats::StripedCounter::incr)): the
    /// default clock may start ticking.
    #[cold]
    pub(crate) fn hit_milestone(&self) {
        if let TierClock::Coarse(clock) = &self.clock {
            clock.milestone();
        }
    }

    /// Keeps the default clock ticking however cool the tier gets (see
    /// [`TickedClock::keep_ticking`]); false with an injected clock.
    #[cfg(any(test, feature = "test-hooks"))]
    pub(crate) fn keep_clock_ticking(&self) -> bool {
        match &self.clock {
            TierClock::Coarse(clock) => {
                clock.keep_ticking();
                true
            }
            TierClock::Injected(_) => false,
        }
    }

    /// Whether hits read a ticked clock reading instead of the clock.
    #[cfg(any(test, feature = "test-hooks"))]
    pub(crate) fn ticking(&self) -> bool {
        matches!(&self.clock, TierClock::Coarse(clock) if clock.ticking())
    }

    /// Drops `key`'s entry, returning it as [`Left`] if there was one.
    pub(crate) fn remove(&self, key: &str) -> Option<Left> {
        self.map.remove(key).map(|(key, entry)| (key, entry.id))
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(all(test, not(shuttle)))]
mod tests {
    use super::*;
    use std::time::Instant;

    /// A tier of 16 entries on the default clock, in `shards` shards.
    fn tier(shards: Option<usize>) -> LocalTier<u32> {
        let clock = TierClock::Coarse(TickedClock::new("t"));
        LocalTier::new(16, 16, clock, None, None, shards)
    }

    /// `value`, fresh for `ttl`.
    fn entry(value: u32, ttl: Duration) -> InL1<u32> {
        InL1 {
            value: Some(value),
            ttls: Ttls::simple(ttl),
            fail_safe: false,
            weight: 1,
            age: Duration::ZERO,
        }
    }

    #[test]
    fn a_hot_tier_expires_entries_on_the_ticked_reading_and_never_early() {
        let tier = tier(None);
        // Two milestones in quick succession: as hot as a cache gets.
        tier.hit_milestone();
        tier.hit_milestone();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !tier.ticking() {
            assert!(Instant::now() < deadline, "the tier never started ticking");
            std::thread::yield_now();
        }

        let ttl = Duration::from_millis(30);
        let inserted = Instant::now();
        tier.insert("k", 1, entry(7, ttl), false);
        let mut hits = 0_u64;
        while tier.get_quiet("k").is_some() {
            hits += 1;
            assert!(Instant::now() < deadline, "the entry never expired");
            std::thread::yield_now();
        }
        // The coarse clock itself lags real time by up to its resolution.
        assert!(
            inserted.elapsed() + COARSE_RESOLUTION >= ttl,
            "expired early"
        );
        assert!(hits > 0, "the entry was never served");
    }

    #[test]
    fn dropping_what_the_store_vouched_for_keeps_the_unverified_entries() {
        let tier = tier(Some(4));
        let minute = |value| entry(value, Duration::from_secs(60));
        for i in 0..8_u32 {
            tier.insert(&format!("store{i}"), u64::from(i), minute(i), false);
            tier.insert(&format!("source{i}"), u64::from(100 + i), minute(i), true);
        }
        let mut left = tier.keep_unverified();
        left.sort();
        let want: Vec<Left> = (0..8_u32)
            .map(|i| (format!("store{i}").into(), u64::from(i)))
            .collect();
        assert_eq!(left, want);
        assert_eq!(tier.len(), 8);
        for i in 0..8_u32 {
            assert_eq!(tier.get_quiet(&format!("store{i}")), None);
            assert_eq!(tier.get_quiet(&format!("source{i}")), Some(i));
        }
        // The room left is the tier's again: 8 more fit beside the 8 kept.
        for i in 0..8_u32 {
            assert!(tier
                .insert(&format!("more{i}"), 200, minute(i), false)
                .is_empty());
        }
        assert_eq!(tier.len(), 16);
    }

    /// The coarse clock's resolution: one scheduler tick, at most 10 ms
    /// (`CONFIG_HZ=100`).
    const COARSE_RESOLUTION: Duration = Duration::from_millis(10);
}

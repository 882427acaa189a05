//! Batch read-through: [`Cache::get_many_or_fill`] answers many keys with
//! one read of the L1, one read of the L2 (one round trip; one per hash
//! slot on a cluster, sent together) and one call of the batch fill for the
//! keys still missing — with the same single-flight, leases and fencing as
//! [`Cache::get_or_fill`] key by key.
//!
//! Each key of a batch is a flight of the cache's flight table, so single
//! calls and other batches join the keys a batch is filling, and a batch
//! joins the keys already in flight. The keys a batch leads are handed to
//! one spawned task (a cancelled caller does not cancel it) that reads the
//! L2, asks for the leases of the keys it missed (concurrently), runs the
//! batch fill once for the keys it holds leases for (or, the store
//! unreachable, for all of them without leases), and commits them
//! concurrently. A key it cannot settle that way — a stale or undecodable
//! value, a lease held by another process, a value that landed meanwhile —
//! goes to the single-key leader, whose fill calls the batch fill with that
//! one key if it must fill at all.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Weak};

use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::runtime::Handle;
use tokio::time::Instant;

use crate::error::Error;
use crate::flight::{Claim, Failure, Outcome};
use crate::freshness::{Answer, Fetched, Judged, Standing};
use crate::inner::{outcome_to_result, Inner};
use crate::key::validate_key;
use crate::leader::{self, Flight, Job, Kept, LeaseGuard};
use crate::shared::SharedTier;
use crate::stats::Counters;
use crate::store::{Grant, LeaseRequest, Lookup};
use crate::Cache;

/// The answers of one [`Cache::get_many_or_fill`] call: one result per
/// distinct key asked.
#[derive(Debug)]
pub struct Batch<V, E> {
    results: HashMap<String, Result<V, Error<E>>>,
}

impl<V, E> Batch<V, E> {
    /// The answer for `key`, if it was asked.
    pub fn get(&self, key: &str) -> Option<&Result<V, Error<E>>> {
        self.results.get(key)
    }

    /// How many distinct keys were asked.
    pub fn len(&self) -> usize {
        self.results.len()
    }

    /// Whether no key was asked.
    pub fn is_empty(&self) -> bool {
        self.results.is_empty()
    }

    /// Every key with its answer.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Result<V, Error<E>>)> {
        self.results
            .iter()
            .map(|(key, result)| (key.as_str(), result))
    }

    /// The answers by key.
    pub fn into_map(self) -> HashMap<String, Result<V, Error<E>>> {
        self.results
    }
}

/// The keys one batch leads, with their flights.
type Led<V> = Vec<(String, Flight<V>)>;

impl<V> Cache<V>
where
    V: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
{
    /// Returns the cached values of `keys`, filling the missing ones with
    /// **one** call of `fill_many`, which gets exactly the keys still
    /// missing after the L1, the L2 and the flights already running, and
    /// answers a value per key it found (a key it leaves out is cached as
    /// "not found" for the negative TTL, and answered
    /// [`Error::NotFound`]). Each key is cached as
    /// [`get_or_fill`](Cache::get_or_fill) caches it (TTL with jitter,
    /// grace, fail-safe window), and fenced the same way.
    ///
    /// Duplicate keys are answered once. An L1 hit costs what a single L1
    /// hit costs; the rest is one read of the shared store, then — for the
    /// keys it did not find — one concurrent round of lease requests and,
    /// after the fill, one concurrent round of commits.
    ///
    /// # Concurrent calls on the same keys
    ///
    /// Every key is its own flight: a key another call (single or batch) is
    /// already filling in this process is not filled again — this batch
    /// waits for that flight — and a key this batch fills is joined by the
    /// calls that ask for it meanwhile. Across processes each key has its
    /// own lease: a key whose lease another process holds is waited for
    /// (woken when its value lands), and if that lease lapses this process
    /// fills it, calling `fill_many` with that one key. That is the only
    /// case in which `fill_many` is called more than once, and then never
    /// twice for the same key. Keys with a stale value (within the grace
    /// period) are answered as a single call answers them: the stale value,
    /// refreshed in the background through `fill_many` with that key.
    ///
    /// The batch fill runs on its own task, bounded by the hard
    /// `fill_timeout`; a caller that is cancelled does not cancel it. Its
    /// leases are renewed while it runs, as a single fill's are, so a
    /// fill longer than the lease TTL is not duplicated by another process.
    ///
    /// # Errors
    ///
    /// Per key, in the [`Batch`]: [`Error::InvalidKey`] for a key that
    /// breaks the key rules (the other keys are still answered); the fill's
    /// error as [`Error::Fill`] (shared, typed) for every key it was to
    /// fill; [`Error::FillPanicked`]; [`Error::Timeout`]; [`Error::NotFound`];
    /// [`Error::NoRuntime`] for every key outside a tokio runtime.
    pub async fn get_many_or_fill<K, F, Fut, E>(&self, keys: &[K], fill_many: F) -> Batch<V, E>
    where
        K: AsRef<str>,
        F: Fn(Vec<String>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<HashMap<String, V>, E>> + Send + 'static,
        E: Send + Sync + 'static,
    {
        let mut results = HashMap::with_capacity(keys.len());
        let Ok(runtime) = Handle::try_current() else {
            for key in keys {
                results.insert(key.as_ref().to_owned(), Err(Error::NoRuntime));
            }
            return Batch { results };
        };
        let inner = &self.inner;
        let mut waits = Vec::new();
        let mut led: Led<V> = Vec::new();
        let mut seen = HashSet::with_capacity(keys.len());
        for key in keys {
            let key = key.as_ref();
            if !seen.insert(key) {
                continue;
            }
            if let Err(invalid) = validate_key(key) {
                results.insert(key.to_owned(), Err(invalid.into()));
                continue;
            }
            if let Some(value) = self.local_hit(key) {
                results.insert(key.to_owned(), Ok(value));
                continue;
            }
            let recheck = || {
                self.inner
                    .tiers()
                    .l1
                    .as_ref()?
                    .judge(key)
                    .filter(|judged| judged.standing == Standing::Fresh)
                    .map(Judged::into_fetched)
            };
            match inner.flights().claim(key, recheck) {
                Claim::Ready(fetched) => {
                    inner.counters().served(fetched.freshness);
                    results.insert(key.to_owned(), fetched.value.ok_or(Error::NotFound));
                }
                Claim::Join(flight) => {
                    Counters::bump(&inner.counters().coalesced);
                    waits.push((key.to_owned(), flight));
                }
                Claim::Lead(leadership) => {
                    waits.push((key.to_owned(), Arc::clone(leadership.flight())));
                    led.push((key.to_owned(), leadership));
                }
            }
        }
        if !led.is_empty() {
            let fill_many = Arc::new(fill_many);
            let batch = BatchLeader {
                inner: Arc::downgrade(inner),
                runtime: runtime.clone(),
                fill_many,
            };
            runtime.spawn(batch.run(led));
        }
        for (key, flight) in waits {
            let answer = outcome_to_result(flight.wait().await)
                .and_then(|fetched: Fetched<V>| fetched.value.ok_or(Error::NotFound));
            results.insert(key, answer);
        }
        Batch { results }
    }
}

/// The task that settles the keys one batch leads.
struct BatchLeader<V, F> {
    inner: Weak<Inner<V>>,
    runtime: Handle,
    fill_many: Arc<F>,
}

/// A key to fill: its flight and its lease (none when filling fail-open).
type ToFill<V> = (String, Flight<V>, Option<LeaseGuard>);

impl<V, F, Fut, E> BatchLeader<V, F>
where
    V: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
    F: Fn(Vec<String>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<HashMap<String, V>, E>> + Send + 'static,
    E: Send + Sync + 'static,
{
    async fn run(self, led: Led<V>) {
        let Some(cache) = self.inner.upgrade() else {
            return;
        };
        let deadline = Instant::now() + cache.policy().fill_timeout;
        let (to_fill, reachable) = match cache.tiers().l2.clone() {
            None => {
                let to_fill = led.into_iter().map(|(k, f)| (k, f, None)).collect();
                (to_fill, true)
            }
            Some(store) => self.settle_from_store(&cache, &store, led).await,
        };
        if to_fill.is_empty() {
            return;
        }
        for _ in &to_fill {
            Counters::bump(&cache.counters().misses);
        }
        Counters::bump(&cache.counters().fills);
        let stamps = cache.fill_stamps(&[], reachable).await;
        let ttl = cache.policy().ttl;
        drop(cache);

        let keys: Vec<String> = to_fill.iter().map(|(key, _, _)| key.clone()).collect();
        let fill_many = Arc::clone(&self.fill_many);
        let leases: Vec<&LeaseGuard> = to_fill.iter().filter_map(|(_, _, l)| l.as_ref()).collect();
        let filled = tokio::time::timeout_at(
            deadline,
            leader::fill_renewing(&self.inner, move || fill_many(keys), &leases),
        )
        .await;
        drop(leases);
        let failure = match filled {
            Ok(Ok(mut found)) => {
                let inner = &self.inner;
                let keeps = to_fill.into_iter().map(|(key, mut flight, lease)| {
                    let answer = Answer::from_option(found.remove(&key));
                    let kept = Kept {
                        lease,
                        stamps: stamps.clone(),
                    };
                    async move {
                        leader::succeed(inner, &mut flight, &key, ttl, answer, kept).await;
                    }
                });
                futures_util::future::join_all(keeps).await;
                return;
            }
            Ok(Err(failure)) => failure,
            Err(_) => {
                if let Some(cache) = self.inner.upgrade() {
                    Counters::bump(&cache.counters().fill_timeouts);
                }
                let after = self
                    .inner
                    .upgrade()
                    .map_or(std::time::Duration::ZERO, |cache| {
                        cache.policy().fill_timeout
                    });
                Failure::TimedOut(after)
            }
        };
        for (_, mut flight, lease) in to_fill {
            drop(lease);
            flight.retire(|| ());
            flight.publish(Outcome::Failed(failure.clone()));
        }
    }

    /// Reads the led keys from the store in one round trip and answers the
    /// fresh ones; asks for the leases of the missing ones. Returns the keys
    /// to fill (with their leases) and whether the store was reachable; the
    /// rest went to single-key leaders.
    async fn settle_from_store(
        &self,
        cache: &Inner<V>,
        store: &SharedTier,
        led: Led<V>,
    ) -> (Vec<ToFill<V>>, bool) {
        let skeys: Vec<_> = led.iter().map(|(key, _)| cache.store_key(key)).collect();
        let found = match store.call(store.get_many(&skeys)).await {
            Ok(found) => found,
            Err(error) => {
                cache.note_store_failure(&error, "filling a batch without leases");
                for _ in &led {
                    Counters::bump(&cache.counters().fail_open_fills);
                }
                let to_fill = led.into_iter().map(|(k, f)| (k, f, None)).collect();
                return (to_fill, false);
            }
        };
        let mut missing = Vec::new();
        for ((key, mut flight), stored) in led.into_iter().zip(found) {
            let Some(stored) = stored else {
                missing.push((key, flight));
                continue;
            };
            match cache.peek_stored(&key, &stored) {
                Some(judged)
                    if judged.standing == Standing::Fresh
                        && cache.stamps_current(&judged.stamps).await =>
                {
                    cache.counters().l2_hits.incr();
                    cache.counters().served(judged.freshness);
                    match cache.l1_copy(&key, &judged) {
                        Some(copy) => flight.retire(copy),
                        None => flight.retire(|| ()),
                    };
                    flight.publish(Outcome::Value(judged.into_fetched()));
                }
                // Stale, due for a refresh, fenced by a tag, or undecodable:
                // the single-key leader serves, refreshes or overwrites it.
                _ => self.delegate(cache, key, flight),
            }
        }
        if missing.is_empty() {
            return (Vec::new(), true);
        }
        self.lease_missing(cache, store, missing).await
    }

    /// Asks for the leases of the keys the store did not have: the keys
    /// granted (or unreachable) are to be filled here, the others are left
    /// to their single-key leaders; and whether the store answered.
    async fn lease_missing(
        &self,
        cache: &Inner<V>,
        store: &SharedTier,
        missing: Led<V>,
    ) -> (Vec<ToFill<V>>, bool) {
        let fill_timeout = cache.policy().fill_timeout;
        let request = LeaseRequest {
            lease_ttl: cache.policy().lease_ttl,
            fence_ttl: cache.policy().fence_ttl(fill_timeout),
            grant: Grant::IfNoValue,
        };
        let grants = missing.iter().map(|(key, _)| {
            let (skey, request) = (cache.store_key(key), &request);
            async move {
                let grant = store.call(store.get_or_lease(&skey, request)).await;
                (skey, grant)
            }
        });
        let grants = futures_util::future::join_all(grants).await;
        let mut to_fill = Vec::new();
        let mut reachable = true;
        for ((key, flight), (skey, grant)) in missing.into_iter().zip(grants) {
            match grant {
                Ok(Lookup::Granted(lease)) => {
                    Counters::bump(&cache.counters().leases_acquired);
                    let guard = LeaseGuard::new(store.clone(), skey, lease, request.clone());
                    to_fill.push((key, flight, Some(guard)));
                }
                Ok(Lookup::Hit(_) | Lookup::Held { .. } | Lookup::Changed) => {
                    self.delegate(cache, key, flight);
                }
                Err(error) => {
                    cache.counters().store_failed(&error);
                    Counters::bump(&cache.counters().fail_open_fills);
                    reachable = false;
                    to_fill.push((key, flight, None));
                }
            }
        }
        (to_fill, reachable)
    }

    /// Hands `key`'s flight to a single-key leader whose fill asks the
    /// batch fill for that one key.
    fn delegate(&self, cache: &Inner<V>, key: String, flight: Flight<V>) {
        let fill_many = Arc::clone(&self.fill_many);
        let wanted = key.clone();
        let fill = move || async move {
            let mut found = fill_many(vec![wanted.clone()]).await?;
            Ok::<_, E>(Answer::from_option(found.remove(&wanted)))
        };
        let policy = &cache.policy();
        let job = Job {
            key: key.into(),
            ttl: policy.ttl,
            fill_timeout: policy.fill_timeout,
            soft_timeout: policy.soft_timeout,
            fallback: None,
            permit: None,
            tags: Arc::new([]),
            store_failed: false,
            first: None,
            fill,
        };
        self.runtime
            .spawn(leader::run(self.inner.clone(), flight, job));
    }
}

//! [`Cache::get_many_or_fill`]: many keys answered with one read of each
//! tier and one call of the batch fill (the flights it leads are settled by
//! [`BatchLeader`](crate::flight::batch::BatchLeader)).

use std::any::TypeId;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;

use tokio::runtime::Handle;

use super::Cache;
use crate::data::error::Error;
use crate::data::freshness::{Fetched, Judged, Standing};
use crate::data::key::validate_key;
use crate::flight::batch::{BatchLeader, Led};
use crate::state::flight::Claim;
use crate::state::inner::outcome_to_result;
use crate::stats::Counters;

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

impl<V> Cache<V>
where
    V: Clone + Send + Sync + 'static,
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
                    .judge_in_l1(key)
                    .filter(|judged| judged.standing == Standing::Fresh)
                    .map(Judged::into_fetched)
            };
            match inner.flights().claim(key, TypeId::of::<E>(), recheck) {
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
            BatchLeader::spawn(inner, &runtime, fill_many, led);
        }
        for (key, flight) in waits {
            let answer = outcome_to_result(flight.wait().await)
                .and_then(|fetched: Fetched<V>| fetched.value.ok_or(Error::NotFound));
            results.insert(key, answer);
        }
        Batch { results }
    }
}

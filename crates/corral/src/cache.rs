//! `Cache<V>`: the cheap-clone handle and its public operations.

use std::any::Any;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::builder::CacheBuilder;
use crate::clock::millis;
use crate::codec::Codec;
use crate::entry::{self, Ttls};
use crate::error::{Error, StoreError, StoreErrorKind};
use crate::flight::{Claim, Failure, FlightTable, Outcome};
use crate::key::validate_key;
use crate::leader::{self, Job};
use crate::local::LocalTier;
use crate::policy::{jittered, FillOptions, Policy};
use crate::stats::{Counters, Stats};
use crate::store::{Store, StoreKey};
use crate::sync::{lock, Mutex};

/// Where a cache keeps its values.
pub(crate) enum Tier<V> {
    /// Decoded values in this process.
    Local(LocalTier<V>),
    /// Envelopes in a shared store; nothing kept in process but the flights.
    Shared(Arc<dyn Store>),
}

/// The state of one cache instance.
pub(crate) struct Inner<V> {
    pub(crate) name: Arc<str>,
    pub(crate) namespace: Arc<str>,
    pub(crate) schema: u32,
    pub(crate) policy: Policy,
    pub(crate) codec: Arc<dyn Codec<V>>,
    pub(crate) tier: Tier<V>,
    pub(crate) flights: Arc<FlightTable<V>>,
    pub(crate) counters: Counters,
    pub(crate) rng: Mutex<fastrand::Rng>,
    /// Whether the in-process tier is bounded by bytes (entries weigh their
    /// encoded size) rather than by entries.
    pub(crate) weigh_by_bytes: bool,
}

impl<V: 'static> Inner<V> {
    /// A TTL drawn with the cache's jitter.
    pub(crate) fn draw_ttl(&self, ttl: Duration) -> Duration {
        let unit = lock(&self.rng).f64();
        jittered(ttl, self.policy.jitter, unit)
    }

    pub(crate) fn store_key(&self, key: &str) -> StoreKey {
        StoreKey::new(Arc::clone(&self.namespace), key)
    }

    /// The envelope of `value` written for `ttl`.
    pub(crate) fn encode(&self, value: &V, ttl: Duration) -> Result<Vec<u8>, String> {
        entry::encode(
            &*self.codec,
            self.schema,
            Ttls::simple(ttl),
            value,
            self.policy.max_value_bytes,
        )
    }

    /// Decodes an envelope; undecodable bytes are counted and yield `None`.
    pub(crate) fn decode(&self, bytes: &[u8]) -> Option<V> {
        match entry::decode(
            &*self.codec,
            self.schema,
            bytes,
            self.policy.max_value_bytes,
        ) {
            Ok(decoded) => Some(decoded.value),
            Err(error) => {
                Counters::bump(&self.counters.decode_failures);
                tracing::warn!(cache = %self.name, %error, "undecodable entry treated as a miss");
                None
            }
        }
    }

    /// Runs one store call under the cache's store timeout.
    pub(crate) async fn store_call<T>(
        &self,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        store_call(self.policy.store_timeout, call).await
    }
}

/// Runs one store call under `timeout`.
pub(crate) async fn store_call<T>(
    timeout: Duration,
    call: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout(timeout, call).await {
        Ok(result) => result,
        Err(_) => Err(StoreError::new(
            StoreErrorKind::Timeout,
            format!("no answer within {timeout:?}"),
        )),
    }
}

/// A read-through cache of `V` values under `&str` keys.
///
/// `Cache` is a cheap handle: clones share one instance (its values, its
/// flights, its counters). Nothing is global: two caches never share state
/// unless they share a [`Store`].
///
/// # Concurrent calls on the same key
///
/// While a key is being filled, every other call of
/// [`get_or_fill`](Cache::get_or_fill) on it in this instance waits for that
/// one fill instead of starting its own; with a shared store, instances in
/// other processes wait for it too (they find its lease held and are woken
/// when its value lands). All of them receive the same outcome: the value,
/// or the same error.
///
/// The fill runs on its own tokio task, so it must be `'static` and `Send`:
/// a caller that is cancelled does not cancel the fill; the other callers
/// and the cache still get its value, and if every caller is gone the fill
/// still completes and stores its value, within the hard `fill_timeout`.
pub struct Cache<V> {
    pub(crate) inner: Arc<Inner<V>>,
}

impl<V> Clone for Cache<V> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<V> std::fmt::Debug for Cache<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("name", &self.inner.name)
            .field("namespace", &self.inner.namespace)
            .finish_non_exhaustive()
    }
}

impl<V> Cache<V>
where
    V: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
{
    /// Starts building a cache named `name`. The name labels its stats and,
    /// with the schema version, namespaces its keys in shared stores: 1 to
    /// 64 characters from `A-Z a-z 0-9 _ - .`.
    pub fn builder(name: &str) -> CacheBuilder<V> {
        CacheBuilder::new(name)
    }

    /// Returns the cached value of `key`, or runs `fill` once — however many
    /// callers ask at once — caches its value and returns it to all of them.
    ///
    /// See [`Cache`] for what concurrent callers see. Reads fail open: if the
    /// shared store is unreachable, the fill runs without a lease and its
    /// value is returned (not stored); the failure is counted in
    /// [`Stats::store_errors`] and [`Stats::fail_open_fills`].
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidKey`] for a key [`validate_key`](crate::validate_key) rejects;
    /// - [`Error::Fill`] with the fill's own error, shared by every caller
    ///   whose fill has the same error type `E`; a caller whose `E` differs
    ///   from the leading caller's gets [`Error::FillErrorOfOtherType`];
    /// - [`Error::FillPanicked`] if the fill panicked;
    /// - [`Error::Timeout`] if the flight passed the hard `fill_timeout` (the
    ///   fill was dropped; nothing it produced is stored);
    /// - [`Error::NoRuntime`] outside a tokio runtime.
    ///
    /// After any error nothing is stored and the next call runs a new fill.
    pub async fn get_or_fill<F, Fut, E>(&self, key: &str, fill: F) -> Result<V, Error<E>>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, E>> + Send + 'static,
        E: Send + Sync + 'static,
    {
        if let Some(value) = self.local_hit(key) {
            return Ok(value);
        }
        Box::pin(self.fill_slow(key, FillOptions::default(), fill)).await
    }

    /// [`get_or_fill`](Cache::get_or_fill) with per-call settings.
    ///
    /// When concurrent calls on one key pass different options, the options
    /// of the call that leads the flight apply; the others wait for its
    /// outcome.
    ///
    /// # Errors
    ///
    /// As [`get_or_fill`](Cache::get_or_fill).
    pub async fn get_or_fill_with<F, Fut, E>(
        &self,
        key: &str,
        options: FillOptions,
        fill: F,
    ) -> Result<V, Error<E>>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, E>> + Send + 'static,
        E: Send + Sync + 'static,
    {
        if let Some(value) = self.local_hit(key) {
            return Ok(value);
        }
        Box::pin(self.fill_slow(key, options, fill)).await
    }

    #[inline]
    fn local_hit(&self, key: &str) -> Option<V> {
        let Tier::Local(local) = &self.inner.tier else {
            return None;
        };
        let value = local.get(key)?;
        self.inner.counters.hits.incr();
        Some(value)
    }

    async fn fill_slow<F, Fut, E>(
        &self,
        key: &str,
        options: FillOptions,
        fill: F,
    ) -> Result<V, Error<E>>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, E>> + Send + 'static,
        E: Send + Sync + 'static,
    {
        validate_key(key)?;
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| Error::NoRuntime)?;
        let inner = &self.inner;
        let recheck = || match &inner.tier {
            Tier::Local(local) => local.get(key),
            Tier::Shared(_) => None,
        };
        let flight = match inner.flights.claim(key, recheck) {
            Claim::Ready(value) => {
                inner.counters.hits.incr();
                return Ok(value);
            }
            Claim::Join(flight) => {
                Counters::bump(&inner.counters.coalesced);
                if matches!(inner.tier, Tier::Local(_)) {
                    Counters::bump(&inner.counters.misses);
                }
                flight
            }
            Claim::Lead(leadership) => {
                if matches!(inner.tier, Tier::Local(_)) {
                    Counters::bump(&inner.counters.misses);
                }
                let flight = Arc::clone(leadership.flight());
                let job = Job {
                    key: key.into(),
                    ttl: options.ttl.unwrap_or(inner.policy.ttl),
                    fill_timeout: options.fill_timeout.unwrap_or(inner.policy.fill_timeout),
                    fill,
                };
                runtime.spawn(leader::run(Arc::downgrade(inner), leadership, job));
                flight
            }
        };
        outcome_to_result(flight.wait().await)
    }

    /// Returns the cached value of `key`, if any; never fills.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidKey`]; [`Error::Store`] if the shared store failed
    /// (a read that cannot reach the store is not reported as a miss).
    pub async fn get(&self, key: &str) -> Result<Option<V>, Error> {
        if let Some(value) = self.local_hit(key) {
            return Ok(Some(value));
        }
        validate_key(key)?;
        let inner = &self.inner;
        let value = match &inner.tier {
            Tier::Local(_) => None,
            Tier::Shared(store) => {
                let skey = inner.store_key(key);
                let stored = inner.store_call(store.get(&skey)).await.inspect_err(|_| {
                    Counters::bump(&inner.counters.store_errors);
                })?;
                stored.and_then(|stored| inner.decode(&stored.bytes))
            }
        };
        match &value {
            Some(_) => inner.counters.hits.incr(),
            None => Counters::bump(&inner.counters.misses),
        }
        Ok(value)
    }

    /// Stores `value` under `key` for the cache's TTL (with jitter).
    ///
    /// A fill of `key` in flight — in this or, with a shared store, any
    /// process — still hands its value to its callers but does not store it
    /// over this write; calls made after this one returns start a new flight
    /// or read this value.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidKey`]; [`Error::Encode`] if the value cannot be
    /// encoded or exceeds `max_value_bytes`; [`Error::Store`] if the shared
    /// store did not confirm the write (it may or may not have happened).
    pub async fn set(&self, key: &str, value: V) -> Result<(), Error> {
        let ttl = self.inner.draw_ttl(self.inner.policy.ttl);
        self.write(key, value, ttl).await
    }

    /// Stores `value` under `key` for exactly `ttl` (no jitter).
    ///
    /// # Errors
    ///
    /// As [`set`](Cache::set); a zero `ttl` is stored for 1 ms.
    pub async fn set_with_ttl(&self, key: &str, value: V, ttl: Duration) -> Result<(), Error> {
        self.write(key, value, ttl.max(Duration::from_millis(1)))
            .await
    }

    async fn write(&self, key: &str, value: V, ttl: Duration) -> Result<(), Error> {
        validate_key(key)?;
        let inner = &self.inner;
        match &inner.tier {
            Tier::Local(local) => {
                let weight = leader::weight(inner, key, &value)?;
                inner
                    .flights
                    .detach(key, || local.insert(key, value, millis(ttl), weight));
            }
            Tier::Shared(store) => {
                let bytes = inner.encode(&value, ttl).map_err(|message| {
                    Counters::bump(&inner.counters.encode_failures);
                    Error::Encode {
                        message: message.into(),
                    }
                })?;
                let skey = inner.store_key(key);
                inner
                    .store_call(store.set(&skey, &bytes, ttl))
                    .await
                    .inspect_err(|_| Counters::bump(&inner.counters.store_errors))?;
                inner.flights.detach(key, || ());
            }
        }
        Ok(())
    }

    /// Removes `key`. Fills of `key` already in flight — in any process
    /// sharing the store — do not store their value afterwards, and calls
    /// made after this one returns start a new flight.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidKey`]; [`Error::Store`] if the shared store did not
    /// confirm the invalidation: treat the key as possibly still cached.
    pub async fn invalidate(&self, key: &str) -> Result<(), Error> {
        validate_key(key)?;
        let inner = &self.inner;
        match &inner.tier {
            Tier::Local(local) => inner.flights.detach(key, || local.remove(key)),
            Tier::Shared(store) => {
                let skey = inner.store_key(key);
                inner
                    .store_call(store.invalidate(&skey))
                    .await
                    .inspect_err(|_| Counters::bump(&inner.counters.store_errors))?;
                inner.flights.detach(key, || ());
            }
        }
        Ok(())
    }

    /// A snapshot of this instance's counters.
    pub fn stats(&self) -> Stats {
        self.inner.counters.snapshot()
    }

    /// The cache's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The namespace of its keys in shared stores: `name:v{version}`.
    pub fn namespace(&self) -> &str {
        &self.inner.namespace
    }

    /// Number of entries in the in-process tier (0 with a shared store).
    pub fn local_len(&self) -> usize {
        match &self.inner.tier {
            Tier::Local(local) => local.len(),
            Tier::Shared(_) => 0,
        }
    }

    /// Number of flights in progress. Zero whenever no fill is running: the
    /// flight table leaks nothing on error, panic, timeout or cancellation.
    #[doc(hidden)]
    pub fn flights_in_progress(&self) -> usize {
        self.inner.flights.len()
    }

    /// A weak handle for tests that check a dropped cache really goes away.
    #[doc(hidden)]
    pub fn downgrade(&self) -> std::sync::Weak<impl Any + Send + Sync> {
        Arc::downgrade(&self.inner)
    }
}

fn outcome_to_result<V, E: Send + Sync + 'static>(outcome: Outcome<V>) -> Result<V, Error<E>> {
    match outcome {
        Outcome::Value(value) => Ok(value),
        Outcome::Failed(Failure::Fill { error, type_name }) => match error.downcast::<E>() {
            Ok(error) => Err(Error::Fill(error)),
            Err(_) => Err(Error::FillErrorOfOtherType { type_name }),
        },
        Outcome::Failed(Failure::Panicked(message)) => Err(Error::FillPanicked { message }),
        Outcome::Failed(Failure::TimedOut(after)) => Err(Error::Timeout { after }),
        Outcome::Failed(Failure::Aborted) => Err(Error::Aborted),
    }
}

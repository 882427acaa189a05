//! `Cache<V>`: the cheap-clone handle and its public operations.

pub(crate) mod batch;
pub(crate) mod builder;
pub(crate) mod get_or_fill;
#[cfg(feature = "test-hooks")]
mod hooks;
pub(crate) mod write;

use std::future::Future;
use std::sync::Arc;

use crate::cache::get_or_fill::{FillOutput, GetOrFill, SlowFill};
use crate::data::cause::{cause_fn, CauseFn, FillCause, FillError};
use crate::data::error::Error;
use crate::data::freshness::{Answer, Cached, Fetched, Judged};
use crate::data::key::validate_key;
use crate::data::key::InvalidKey;
use crate::data::key::MAX_TAGS;
use crate::data::policy::FillOptions;
use crate::data::tags::{Stamps, CLEAR, MOVED};
use crate::flight::caller;
use crate::read::{read_current, Look};
use crate::state::inner::Inner;
use crate::stats::{Counters, Stats};
use crate::tier::local::LocalTier;

/// A read-through cache of `V` values under `&str` keys.
///
/// `Cache` is a cheap handle: clones share one instance (its values, its
/// flights, its counters). Nothing is global: two caches never share state
/// unless they share a [`Store`](crate::store::Store) or an injected refresh limiter.
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
/// Calls are coalesced per key **and per error type `E` of the fill**, so a
/// caller only ever waits for a fill whose error it can receive: call sites
/// that fill one key with different error types run one in-process flight
/// each. With a shared store the fill lease still makes them one fill: the
/// second flight finds the lease held by the first and waits for its value.
///
/// Reads are coalesced where they are cheap to coalesce. With an L1, a
/// caller that misses it joins the key's one flight, and only that flight
/// asks the store: a plain read for a value the store remembers reading,
/// else one request for the value or else the fill lease (on Redis one
/// script). A cold key then costs that request and the commit of the fill
/// (and, for a new cache, one read of its tag and clear versions), however
/// many callers wait for it. Without an L1 (`.l1(false)`, or a store
/// without a backplane such as memcached) every caller first
/// reads the store itself — an L2 hit then costs about one `GET`, touching
/// no flight table — and joins the flight only if it found no fresh value
/// or a flight of the key is already running: fills are coalesced, reads
/// are not. Keep the L1 for keys that many tasks read at once.
///
/// The fill runs on its own tokio task, so it must be `'static` and `Send`:
/// a caller that is cancelled does not cancel the fill; the other callers
/// and the cache still get its value, and if every caller is gone the fill
/// still completes and stores its value, within the hard `fill_timeout`.
///
/// # Freshness
///
/// An entry is fresh for its TTL. With a `grace` period it is then served
/// stale while one background refresh runs (at most one per key across every
/// process sharing the store, under the cache's refresh limit); with
/// `eager_refresh` that refresh starts before the TTL ends. With fail-safe
/// ([`CacheBuilder::fail_safe`](crate::CacheBuilder::fail_safe)), an expired entry is kept that much longer and served
/// if the fill fails, and — with a `soft_timeout` — if the fill is slow.
/// [`get_or_fill_answer`](Cache::get_or_fill_answer) tells its caller
/// which of these it got.
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
            .field("name", &self.inner.name())
            .field("namespace", &self.inner.namespace())
            .finish_non_exhaustive()
    }
}

impl<V> Cache<V>
where
    V: Clone + Send + Sync + 'static,
{
    /// Returns the cached value of `key`, or runs `fill` once — however many
    /// callers ask at once — caches its value and returns it to all of them.
    ///
    /// This is the read-through call. The fill answers `Result<V, E>`; a
    /// source that may have nothing calls
    /// [`get_or_fill_option`](Cache::get_or_fill_option) instead, and one
    /// that wants to set a TTL per value or learn the freshness of what it
    /// gets calls [`get_or_fill_answer`](Cache::get_or_fill_answer). The
    /// method fixes what the fill answers, so its `Ok(..)` needs no
    /// annotation: `E` is inferred from what the fill calls, or from where
    /// the result goes.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use corral::{Cache, Error};
    ///
    /// #[derive(Clone, Debug, PartialEq)]
    /// struct User { name: String }
    /// struct Row { name: String }
    /// impl From<Row> for User {
    ///     fn from(row: Row) -> User { User { name: row.name } }
    /// }
    ///
    /// #[derive(Debug)]
    /// struct DbError;
    /// impl std::fmt::Display for DbError {
    ///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { f.write_str("db down") }
    /// }
    /// impl std::error::Error for DbError {}
    ///
    /// async fn query(id: u64) -> Result<Row, DbError> {
    ///     Ok(Row { name: format!("user {id}") })
    /// }
    /// async fn load_user(id: u64) -> Result<User, DbError> {
    ///     Ok(query(id).await?.into())
    /// }
    ///
    /// // A fill that calls an `async fn`.
    /// async fn user(users: &Cache<User>, id: u64) -> Result<User, Error<DbError>> {
    ///     users.get_or_fill(&format!("user:{id}"), move || load_user(id)).await
    /// }
    ///
    /// // A fill written in place: `Ok(user)` after `?`, and `Ok(row.into())`.
    /// async fn user_inline(users: &Cache<User>, id: u64) -> Result<User, Error<DbError>> {
    ///     users
    ///         .get_or_fill(&format!("user:{id}"), move || async move {
    ///             let user: User = query(id).await?.into();
    ///             Ok(user)
    ///         })
    ///         .await
    /// }
    ///
    /// async fn user_converted(users: &Cache<User>, id: u64) -> Result<User, Error<DbError>> {
    ///     users
    ///         .get_or_fill(&format!("user:{id}"), move || async move {
    ///             let row = query(id).await?;
    ///             Ok(row.into())
    ///         })
    ///         .await
    /// }
    ///
    /// let users = Cache::<User>::builder("users").build().expect("valid");
    /// assert_eq!(user(&users, 1).await.expect("filled").name, "user 1");
    /// assert_eq!(user_inline(&users, 2).await.expect("filled").name, "user 2");
    /// assert_eq!(user_converted(&users, 3).await.expect("filled").name, "user 3");
    /// # }
    /// ```
    ///
    /// Where nothing names the fill's error type (a closure using `?`
    /// whose result goes into `anyhow::Result`), Rust cannot infer it:
    /// call an `async fn` as above, or end with `anyhow::Ok(..)`. Per-call
    /// settings (TTL, timeouts, tags) are set on the returned future with
    /// [`options`](GetOrFill::options).
    ///
    /// See [`Cache`] for what concurrent callers see and how stale and
    /// fail-safe values are served. Reads fail open: if the shared store is
    /// unreachable, the fill runs without a lease and its value is returned
    /// (not stored); the failure is counted in [`Stats::store_errors`] and
    /// [`Stats::fail_open_fills`]. While the cache's circuit breaker is open
    /// (see [`CacheBuilder::circuit_breaker`](crate::CacheBuilder::circuit_breaker)) the store is not asked at
    /// all: the fill runs at once, counted in [`Stats::fail_open_fills`] and
    /// [`Stats::store_calls_skipped`].
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidKey`] for a key [`validate_key`](crate::validate_key) rejects;
    /// - [`Error::Fill`] with the fill's own error, shared by every caller
    ///   it served (callers only share a flight with fills of their own
    ///   error type `E`: see [`Cache`]);
    /// - [`Error::FillPanicked`] if the fill panicked;
    /// - [`Error::Timeout`] if the flight passed the hard `fill_timeout` (the
    ///   fill was dropped; nothing it produced is stored);
    /// - [`Error::NotFound`] if the key holds a cached "not found" (written
    ///   by [`get_or_fill_option`](Cache::get_or_fill_option) or
    ///   [`get_or_fill_answer`](Cache::get_or_fill_answer));
    /// - [`Error::NoRuntime`] outside a tokio runtime.
    ///
    /// With fail-safe on and an expired value kept, a failed fill returns that
    /// value instead of the error. After an error nothing is stored and the
    /// next call runs a new fill.
    ///
    /// A fresh hit in the in-process tier completes on the first poll
    /// without allocating; the only memory it writes is its thread's stripe
    /// of the hit counter, with a plain store. On a hot cache it does not
    /// call the clock either (see [`CacheBuilder::clock`](crate::CacheBuilder::clock)).
    ///
    /// The returned future borrows the cache and the key, is `Send`, and does
    /// nothing until polled, like an `async fn`'s.
    pub fn get_or_fill<'a, F, Fut, E, M>(
        &'a self,
        key: &'a str,
        fill: F,
    ) -> GetOrFill<'a, V, F, V, E, M>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, E>> + Send + 'static,
        E: FillCause<M>,
    {
        GetOrFill::new(self, key, fill)
    }

    /// [`get_or_fill`](Cache::get_or_fill) for a source that may have
    /// nothing: the fill answers `Option<V>`, and its `None` is cached as a
    /// "not found" for the [`negative_ttl`](crate::CacheBuilder::negative_ttl)
    /// (not for the TTL of values) and returned as `None`, to this caller
    /// and to the ones that ask meanwhile.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// use corral::Cache;
    ///
    /// async fn find_user(id: u64) -> Result<Option<String>, std::io::Error> {
    ///     Ok((id == 42).then(|| "Ada".to_owned()))
    /// }
    ///
    /// let users = Cache::<String>::builder("users").build()?;
    /// assert_eq!(users.get_or_fill_option("user:42", || find_user(42)).await?.as_deref(), Some("Ada"));
    /// assert_eq!(users.get_or_fill_option("user:0", || find_user(0)).await?, None);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`get_or_fill`](Cache::get_or_fill), but a cached "not found" is
    /// `Ok(None)`, not an error.
    pub fn get_or_fill_option<'a, F, Fut, E, M>(
        &'a self,
        key: &'a str,
        fill: F,
    ) -> GetOrFill<'a, V, F, Option<V>, E, M>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<Option<V>, E>> + Send + 'static,
        E: FillCause<M>,
    {
        GetOrFill::new(self, key, fill)
    }

    /// [`get_or_fill`](Cache::get_or_fill) with the details: the fill
    /// answers an [`Answer`](crate::Answer) — a value or "not found", with
    /// its own TTL, tags, or not to be cached — and the caller gets a
    /// [`Fetched`](crate::Fetched) value with its
    /// [`Freshness`](crate::Freshness) (fresh, stale or fail-safe).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// use std::time::Duration;
    /// use corral::{Answer, Cache, Freshness};
    ///
    /// let users = Cache::<String>::builder("users").build()?;
    /// let fetched = users
    ///     .get_or_fill_answer("user:7", || async {
    ///         Ok::<_, std::io::Error>(Answer::value("Bo".to_owned()).ttl(Duration::from_secs(5)))
    ///     })
    ///     .await?;
    /// assert_eq!(fetched.value.as_deref(), Some("Bo"));
    /// assert_eq!(fetched.freshness, Freshness::Fresh);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`get_or_fill`](Cache::get_or_fill), but a cached "not found" is
    /// a `Fetched` without a value, not an error.
    pub fn get_or_fill_answer<'a, F, Fut, E, M>(
        &'a self,
        key: &'a str,
        fill: F,
    ) -> GetOrFill<'a, V, F, Answer<V>, E, M>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<Answer<V>, E>> + Send + 'static,
        E: FillCause<M>,
    {
        GetOrFill::new(self, key, fill)
    }

    /// The rest of a `get_or_fill` that found no quiet value in process,
    /// boxed: kept out of the hit path's code. The key and tags are checked
    /// before the future is built, and the future is the fetch's alone (no
    /// second copy of its arguments): one allocation per call that reaches
    /// the store, of a size the allocator serves from its thread cache.
    #[cold]
    #[inline(never)]
    pub(crate) fn slow_fill<'a, F, Fut, T, E, M>(
        &'a self,
        key: &'a str,
        options: FillOptions,
        fill: F,
    ) -> SlowFill<'a, T::Output, E>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
        T: FillOutput<V>,
        E: FillCause<M>,
    {
        if let Err(invalid) = validate_call(key, &options) {
            return Box::pin(async move { Err(invalid.into()) });
        }
        let cause: CauseFn<E> = cause_fn::<E, M>();
        let answer = move || async move {
            fill()
                .await
                .map(T::into_answer)
                .map_err(|error| FillError::with_cause(Arc::new(error), cause))
        };
        // Mapped, not awaited in an async block: that would hold the fetch
        // twice (captured, then pinned where it is awaited). A cache with
        // an L1 boxes the flight's future alone, not inside a read ahead.
        let output = |fetched: Result<Fetched<V>, Error<E>>| fetched.and_then(T::output);
        if caller::reads_ahead(&self.inner) {
            let fetch = caller::fetch(&self.inner, key, options, answer);
            Box::pin(futures_util::FutureExt::map(fetch, output))
        } else {
            let fetch = caller::in_flight(&self.inner, key, options, answer);
            Box::pin(futures_util::FutureExt::map(fetch, output))
        }
    }

    /// The in-process value of `key` if it is fresh and nothing is due for
    /// it (no refresh), counted as a hit: what
    /// [`get_or_fill`](Cache::get_or_fill) answers on its first poll, without
    /// a future. Never awaits, never reads the shared store, never fills;
    /// anything else is `None`, not counted (the read-through call that
    /// follows counts it). `#[corral::cached]` looks here before it builds
    /// per-call options.
    #[inline(always)]
    pub fn get_local(&self, key: &str) -> Option<V> {
        self.local_hit(key)
    }

    /// The in-process value of `key` if it is quiet (fresh, nothing due),
    /// counted as a hit.
    #[inline(always)]
    pub(crate) fn local_hit(&self, key: &str) -> Option<V> {
        let Some(local) = &self.inner.tiers().l1 else {
            return None;
        };
        let value = local.get_quiet(key)?;
        if self.inner.counters().hits.incr() {
            local.hit_milestone();
        }
        Some(value)
    }

    /// Looks at the cached value of `key`, if any is servable (fresh, or
    /// stale within the grace period): never fills, never refreshes (the
    /// read-through call is [`get_or_fill`](Cache::get_or_fill)). A cached
    /// "not found" is `None` too: [`peek_entry`](Cache::peek_entry) tells
    /// them apart.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidKey`]; [`Error::Store`] if the shared store failed
    /// (a read that cannot reach the store is not reported as a miss).
    pub async fn peek(&self, key: &str) -> Result<Option<V>, Error> {
        if let Some(value) = self.local_hit(key) {
            return Ok(Some(value));
        }
        Ok(match self.peek_entry(key).await? {
            Cached::Value { value, .. } => Some(value),
            Cached::NotFound { .. } | Cached::Miss => None,
        })
    }

    /// [`peek`](Cache::peek) with the details: what the cache holds for
    /// `key` — a servable value, a cached "not found", or nothing (an entry
    /// kept only for fail-safe is a miss here) — and how fresh it is.
    /// Never fills, never refreshes.
    ///
    /// # Errors
    ///
    /// As [`peek`](Cache::peek).
    pub async fn peek_entry(&self, key: &str) -> Result<Cached<V>, Error> {
        validate_key(key)?;
        let inner = &self.inner;
        let in_l1 = inner.judge_in_l1(key).filter(Judged::is_servable);
        let judged = match (in_l1, &inner.tiers().l2) {
            (Some(judged), _) => Some(judged),
            (None, None) => None,
            (None, Some(store)) => {
                // Only a copy into the L1 needs to know whether a write
                // landed meanwhile.
                let mark = inner
                    .tiers()
                    .l1
                    .as_ref()
                    .map(|_| inner.flights().write_mark());
                let judged = read_current(inner, store, key, &inner.store_key(key), Look::Counted)
                    .await
                    .inspect_err(|error| inner.counters().store_failed(error))?;
                if let Some(judged) = judged.as_ref().filter(|j| j.is_servable()) {
                    inner.counters().l2_hits.incr();
                    if let Some(mark) = mark {
                        inner.keep_in_l1(key, judged, mark);
                    }
                }
                judged
            }
        };
        let found = judged.filter(Judged::is_servable).map(Judged::into_fetched);
        let Some(found) = found else {
            Counters::bump(&inner.counters().misses);
            return Ok(Cached::Miss);
        };
        inner.counters().served(found.freshness);
        Ok(match found.value {
            Some(value) => Cached::Value {
                value,
                freshness: found.freshness,
            },
            None => Cached::NotFound {
                freshness: found.freshness,
            },
        })
    }

    /// Removes `key`: no grace, no fail-safe value survives it. Fills and
    /// refreshes of `key` already in flight — in any process sharing the
    /// store — do not store their value afterwards, and calls made after this
    /// one returns start a new flight.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidKey`]; [`Error::Store`] if the shared store did not
    /// confirm the invalidation: treat the key as possibly still cached.
    pub async fn invalidate(&self, key: &str) -> Result<(), Error> {
        validate_key(key)?;
        let inner = &self.inner;
        let removed = match &inner.tiers().l2 {
            Some(store) => {
                let skey = inner.store_key(key);
                let removed = store.call(store.invalidate(&skey, inner.origin())).await;
                removed.and(self.invalidate_other_versions(key).await)
            }
            None => Ok(()),
        };
        inner.flights().detach(key, || inner.remove_from_l1(key));
        removed.inspect_err(|error| inner.counters().store_failed(error))?;
        Ok(())
    }

    /// A snapshot of this instance's counters.
    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }

    /// Copies this cache's counters into the `metrics` recorder now (an
    /// exporter task does it every
    /// [`metrics_interval`](crate::CacheBuilder::metrics_interval)). Names are
    /// prefixed `corral_` and labelled `cache` = [`name`](Cache::name); see
    /// the crate docs for the list.
    #[cfg(feature = "metrics")]
    pub fn export_metrics(&self) {
        self.inner.export_metrics();
    }

    /// Checks the shared store with one round trip (`PING` on Redis),
    /// bounded by the cache's store timeout, and says how long it took.
    /// Never fails: a store that does not answer is reported as
    /// [`StoreHealth::Failed`](crate::stats::health::StoreHealth::Failed) — at once, with
    /// a [`BreakerOpen`](crate::StoreErrorKind::BreakerOpen) error, while
    /// the circuit breaker is open (the check may be its half-open probe).
    /// For readiness
    /// probes: serve traffic while [`Health::is_ok`](crate::stats::health::Health::is_ok)
    /// — though corral keeps answering (filling open) when the store is
    /// down.
    pub async fn health(&self) -> crate::stats::health::Health {
        let inner = &self.inner;
        let store = match &inner.tiers().l2 {
            None => crate::stats::health::StoreHealth::None,
            Some(store) => {
                let started = std::time::Instant::now();
                let answer = store.call(store.ping()).await;
                let latency = started.elapsed();
                match answer {
                    Ok(()) => crate::stats::health::StoreHealth::Answered { latency },
                    Err(error) => crate::stats::health::StoreHealth::Failed { latency, error },
                }
            }
        };
        crate::stats::health::Health {
            store,
            flights_in_progress: inner.flights().len(),
            budget: inner.budget().map(crate::budget::FillBudget::stats),
        }
    }

    /// The cache's name.
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// The namespace of its keys in shared stores: `name:v{version}`.
    pub fn namespace(&self) -> &str {
        self.inner.namespace()
    }

    /// Number of entries in the in-process tier (0 without one).
    pub fn local_len(&self) -> usize {
        self.inner.tiers().l1.as_ref().map_or(0, LocalTier::len)
    }

    /// Test support: whether in-process hits currently read the ticked
    /// clock reading of a hot cache instead of the clock.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn hits_read_ticked_clock(&self) -> bool {
        matches!(&self.inner.tiers().l1, Some(local) if local.ticking())
    }

    /// Measurement support: makes in-process hits read a ticked clock
    /// reading from now on, however few hits come (a cache normally ticks
    /// only while it takes ~500,000 hits a second), until the cache is
    /// dropped. The ticker thread starts in the background; see
    /// [`hits_read_ticked_clock`](Self::hits_read_ticked_clock). False, and
    /// nothing changes, with an injected clock or without an in-process tier
    /// (a shared store without `l1(true)`).
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn keep_clock_ticking(&self) -> bool {
        matches!(&self.inner.tiers().l1, Some(local) if local.keep_clock_ticking())
    }

    /// Test support: how many L1 keys the tag index holds, and how many
    /// tag versions the cache remembers.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn tag_index_sizes(&self) -> (usize, usize) {
        self.inner.tags().sizes()
    }

    /// Number of flights (fills and refreshes) in progress. Zero whenever
    /// none runs: the flight table leaks nothing on error, panic, timeout or
    /// cancellation. (Applications read it from [`Cache::health`].)
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn flights_in_progress(&self) -> usize {
        self.inner.flights().len()
    }

    /// A weak handle for tests that check a dropped cache really goes away.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn downgrade(&self) -> std::sync::Weak<impl std::any::Any + Send + Sync> {
        Arc::downgrade(&self.inner)
    }
}

impl<V> Cache<V>
where
    V: Clone + Send + Sync + 'static,
{
    /// Makes every entry filled with `tag` (see [`FillOptions::tags`](crate::FillOptions::tags)) a
    /// miss, in every process sharing the store, without scanning keys: the
    /// tag moves to a new version and entries stamped with the old one are
    /// never served again (they expire from the store by their TTL). Fills
    /// of tagged entries in flight — in any process — are fenced: their
    /// callers get their value, but it is not stored. Other processes' L1s
    /// drop the tag's entries when the backplane message arrives.
    ///
    /// A read of the store checks an entry's tag versions against the
    /// versions this cache knows (read once from the store and kept current
    /// by the backplane; without a backplane, read on every check: one
    /// more round trip per read of the store). L1 hits check nothing.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidKey`] for a tag that breaks the key rules;
    /// [`Error::Store`] if the store did not confirm (this instance's L1
    /// entries of the tag are dropped anyway; treat the tag as possibly
    /// still valid elsewhere).
    pub async fn invalidate_tag(&self, tag: &str) -> Result<(), Error> {
        validate_key(tag)?;
        self.move_tag(tag).await
    }

    /// Makes every entry of this cache a miss, in every process sharing
    /// the store, without scanning keys: like an [`invalidate_tag`] of a tag
    /// every entry carries. Fills in flight are fenced; values already in
    /// the store stay there, unserved, until their TTL ends.
    ///
    /// [`invalidate_tag`]: Cache::invalidate_tag
    ///
    /// # Errors
    ///
    /// [`Error::Store`] as for [`invalidate_tag`](Cache::invalidate_tag).
    pub async fn clear(&self) -> Result<(), Error> {
        self.move_tag(CLEAR).await
    }

    async fn move_tag(&self, tag: &str) -> Result<(), Error> {
        if tag != CLEAR {
            // First: a fill that declares tags from what it loaded, reading
            // this tag's new version after its fill, must see this move too.
            if let Err(error) = self.move_one_tag(MOVED).await {
                // The tag itself is not moved in the store without it; this
                // instance's L1 entries of the tag are dropped anyway.
                self.inner.tag_moved(tag, None);
                return Err(error);
            }
        }
        self.move_one_tag(tag).await
    }

    async fn move_one_tag(&self, tag: &str) -> Result<(), Error> {
        let inner = &self.inner;
        let (moved, local_version) = match &inner.tiers().l2 {
            Some(store) => {
                let retention = inner.policy().tag_retention;
                let call = store.invalidate_tag(inner.namespace(), tag, retention, inner.origin());
                let mut moved = store.call(call).await;
                for namespace in inner.also_invalidate() {
                    let call = store.invalidate_tag(namespace, tag, retention, inner.origin());
                    moved = moved.and(store.call(call).await);
                }
                (moved, None)
            }
            None => (Ok(()), Some(inner.new_version())),
        };
        inner.tag_moved(tag, local_version);
        moved.inspect_err(|error| inner.counters().store_failed(error))?;
        Ok(())
    }

    /// Invalidates `key` in the namespaces of the other versions this
    /// cache's invalidations reach
    /// ([`also_invalidate_versions`](crate::CacheBuilder::also_invalidate_versions)):
    /// the first error, after trying each.
    pub(crate) async fn invalidate_other_versions(
        &self,
        key: &str,
    ) -> Result<(), crate::data::error::StoreError> {
        let inner = &self.inner;
        let (Some(store), others) = (&inner.tiers().l2, inner.also_invalidate()) else {
            return Ok(());
        };
        let mut result = Ok(());
        for namespace in others {
            let other = crate::store::StoreKey::of(namespace, key);
            result = result.and(store.call(store.invalidate(&other, inner.origin())).await);
        }
        result
    }
}

/// The key and per-call tags of a read-through call, checked.
fn validate_call(key: &str, options: &FillOptions) -> Result<(), InvalidKey> {
    validate_key(key)?;
    if let Some(tags) = &options.tags {
        validate_tags(tags)?;
    }
    Ok(())
}

/// Checks the tags a fill declares: each a valid key, at most
/// [`MAX_TAGS`] − 1 distinct ones (the clear version takes
/// the last place).
fn validate_tags(tags: &[Arc<str>]) -> Result<(), InvalidKey> {
    for tag in tags {
        validate_key(tag)?;
    }
    let distinct = Stamps::wanted(tags).len();
    if distinct > MAX_TAGS {
        return Err(InvalidKey::TooManyTags {
            count: distinct - 1,
        });
    }
    Ok(())
}

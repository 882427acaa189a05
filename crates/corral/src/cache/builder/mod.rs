//! `CacheBuilder`: by-value setters, checked once at `build()`.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::budget::FillBudget;
use crate::cache::Cache;
use crate::clock::Clock;
use crate::codec::{Codec, Postcard};
use crate::data::encryption::Encryption;
use crate::data::policy::Policy;
use crate::store::{IntoStore, Store};
use crate::tier::breaker::BreakerSettings;
use tokio::sync::Semaphore;

mod build;

/// The bound of the in-process tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Capacity {
    /// At most this many entries.
    Entries(u64),
    /// At most this many bytes of keys plus encoded values (each insert
    /// encodes the value once to weigh it, with the cache's codec: a cache
    /// without a store needs one set with
    /// [`codec`](CacheBuilder::codec)).
    Bytes(u64),
}

/// Builds a [`Cache`]. Every setter takes and returns the builder by value;
/// [`build`](CacheBuilder::build) checks the whole configuration.
///
/// Defaults: TTL 60 s, no jitter, 10,000 entries in process, hard fill
/// timeout 30 s, postcard codec (with a store), schema version 0, values up to 8 MiB
/// encoded; with a shared store: an L1 in front of it if the store has a
/// backplane (see [`l1`](CacheBuilder::l1)), lease 3 s (renewed every second while a
/// fill runs), waiters poll every 250 ms as a fallback to notifications,
/// store calls time out after 1 s, and a circuit breaker skips store calls
/// for 5 s after 5 consecutive ones failed (see
/// [`circuit_breaker`](CacheBuilder::circuit_breaker)).
#[must_use]
pub struct CacheBuilder<V> {
    name: String,
    version: u32,
    also_invalidate_versions: Vec<u32>,
    policy: Policy,
    capacity: Capacity,
    /// Set by `codec`, or to the default by `store`.
    codec: Option<Arc<dyn Codec<V>>>,
    encryption: Option<Encryption>,
    store: Option<Arc<dyn Store>>,
    /// `None`: on if the cache listens to a store with a backplane.
    l1_with_store: Option<bool>,
    l1_shards: Option<usize>,
    l1_lifetime: Option<Duration>,
    backplane: bool,
    clock: Option<Arc<dyn Clock>>,
    seed: Option<u64>,
    refresh_limiter: Option<Arc<Semaphore>>,
    refresh_limit: usize,
    budget: Option<FillBudget>,
    metrics_interval: Option<Duration>,
    breaker: Option<BreakerSettings>,
    _value: PhantomData<fn() -> V>,
}

impl<V> std::fmt::Debug for CacheBuilder<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheBuilder")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("also_invalidate_versions", &self.also_invalidate_versions)
            .field("policy", &self.policy)
            .field("capacity", &self.capacity)
            .field("store", &self.store)
            .field("l1", &self.l1_with_store)
            .field("l1_lifetime", &self.l1_lifetime)
            .field("backplane", &self.backplane)
            .field("refresh_limit", &self.refresh_limit)
            .field("metrics_interval", &self.metrics_interval)
            .field("circuit_breaker", &self.breaker)
            .field("encryption", &self.encryption)
            .finish_non_exhaustive()
    }
}

impl<V> Cache<V>
where
    V: Clone + Send + Sync + 'static,
{
    /// Starts building a cache named `name`. The name labels its stats and,
    /// with the schema version, namespaces its keys in shared stores: 1 to
    /// 64 characters from `A-Z a-z 0-9 _ - .`.
    ///
    /// An in-process cache holds its values as they are: `V` needs no
    /// serde implementation until a [`store`](CacheBuilder::store) is
    /// attached.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::sync::Arc;
    ///
    /// /// Not serializable: a handle to a connection, say.
    /// #[derive(Clone)]
    /// struct Client(Arc<str>);
    ///
    /// let clients = corral::Cache::<Client>::builder("clients").build()?;
    /// let client = clients
    ///     .get_or_fill("eu", || async { Ok::<_, std::io::Error>(Client("eu".into())) })
    ///     .await?;
    /// assert_eq!(&*client.0, "eu");
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder(name: &str) -> CacheBuilder<V> {
        CacheBuilder::new(name)
    }
}

impl<V> CacheBuilder<V>
where
    V: Clone + Send + Sync + 'static,
{
    pub(crate) fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            version: 0,
            also_invalidate_versions: Vec::new(),
            policy: Policy::default(),
            capacity: Capacity::Entries(10_000),
            codec: None,
            encryption: None,
            store: None,
            l1_with_store: None,
            l1_shards: None,
            l1_lifetime: None,
            backplane: true,
            clock: None,
            seed: None,
            refresh_limiter: None,
            refresh_limit: 16,
            budget: None,
            metrics_interval: Some(Duration::from_secs(1)),
            breaker: Some(BreakerSettings::default()),
            _value: PhantomData,
        }
    }

    /// The schema version of `V`. Bump it when `V` changes shape: a deploy
    /// with a new version reads and writes its own keys and never decodes
    /// the old bytes.
    ///
    /// During a rolling deploy the two builds run side by side, each in
    /// its own namespace: without more, an invalidation made by one does
    /// not reach the other, which goes on serving what was invalidated
    /// until it expires. [`also_invalidate_versions`](Self::also_invalidate_versions)
    /// sends invalidations to the other build's namespace too.
    pub fn version(mut self, version: u32) -> Self {
        self.version = version;
        self
    }

    /// Versions whose namespaces this cache's invalidations also reach: an
    /// [`invalidate`](crate::Cache::invalidate), an
    /// [`invalidate_tag`](crate::Cache::invalidate_tag), a
    /// [`clear`](crate::Cache::clear) and a [`set`](crate::Cache::set)
    /// (which invalidates the key there: a value of another schema cannot
    /// be written) are made in this cache's namespace and then in each of
    /// theirs, with their backplane messages, so the processes of a build
    /// with another [`version`](Self::version) that share the store drop
    /// their copies too. Each version costs one more store call per
    /// invalidation; the call returns an error if any of them failed.
    /// Its own version is skipped. Default: none.
    ///
    /// For a rolling deploy from version 2 to 3, both ways:
    ///
    /// - the new build: `.version(3).also_invalidate_versions([2])`, so
    ///   the old processes still running drop what the new ones
    ///   invalidate;
    /// - the old build must already send its invalidations to version 3:
    ///   ship `.version(2).also_invalidate_versions([3])` (or set
    ///   `CORRAL_<CACHE>_ALSO_INVALIDATE_VERSIONS=3` with
    ///   [`CacheConfig`](crate::CacheConfig)) before the bump. Invalidating
    ///   a namespace nobody reads yet is harmless.
    ///
    /// Once the deploy is over, drop the setting.
    pub fn also_invalidate_versions(mut self, versions: impl IntoIterator<Item = u32>) -> Self {
        self.also_invalidate_versions = versions.into_iter().collect();
        self
    }

    /// The name of the cache being built.
    #[cfg(feature = "config")]
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// How long a filled value is fresh. Must be greater than zero.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.policy.ttl = ttl;
        self
    }

    /// Spreads expiries: each stored TTL is drawn uniformly from
    /// `[ttl·(1−fraction), ttl·(1+fraction)]` (at least 1 ms), so keys
    /// filled together do not expire together. `fraction` must be in
    /// `[0, 1]`; NaN, negative or larger values make
    /// [`build`](CacheBuilder::build) fail.
    pub fn jitter(mut self, fraction: f64) -> Self {
        self.policy.jitter = fraction;
        self
    }

    /// The bound of the in-process tier (with a shared store, of the L1 in
    /// front of it: see [`l1`](CacheBuilder::l1)): so many entries
    /// ([`Capacity::Entries`], default 10,000) or so many bytes
    /// ([`Capacity::Bytes`]).
    pub fn capacity(mut self, capacity: Capacity) -> Self {
        self.capacity = capacity;
        self
    }

    /// The hard bound of a flight: when it passes, callers get
    /// [`Error::Timeout`](crate::Error::Timeout), the fill is dropped and the
    /// key is free for a new fill. Nothing the stopped fill produced is
    /// stored.
    pub fn fill_timeout(mut self, timeout: Duration) -> Self {
        self.policy.fill_timeout = timeout;
        self
    }

    /// How long a fill lease lives in a shared store unless renewed (at least
    /// 30 ms). The leader renews it every third of this while its fill runs;
    /// if the leader dies, another process takes over after at most this.
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.policy.lease_ttl = ttl;
        self
    }

    /// How often a process waiting for another's fill re-checks the store
    /// when no notification arrives (default 250 ms). Notifications wake
    /// waiters at once; the re-checks are the fallback for a notification
    /// lost. While the same lease stays held, each wait re-checks after
    /// twice the one before, up to 8 × this (a fill queued behind a
    /// [`FillBudget`] may hold its lease for long), and at the lease's
    /// lapse at the latest.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.policy.poll_interval = interval;
        self
    }

    /// The bound of each shared-store call made by the cache. A store that
    /// bounds its own calls at least as tightly (`RedisStore`, by its
    /// `op_timeout`) is left to do so, with no timer of the cache's.
    pub fn store_timeout(mut self, timeout: Duration) -> Self {
        self.policy.store_timeout = timeout;
        self
    }

    /// The circuit breaker in front of the shared store (on by default with
    /// 5 failures and a 5 s cool-down; without a store it has nothing to
    /// do). After `failures` consecutive store calls that timed out or
    /// found the store unreachable, it **opens** for `cool_down`: store
    /// calls are skipped at once instead of each paying the store timeout.
    /// Meanwhile reads fail open — [`get_or_fill`](crate::Cache::get_or_fill)
    /// answers from the L1 or runs the fill without a lease, storing
    /// nothing in the store — and operations that must reach the store
    /// ([`set`](crate::Cache::set), [`invalidate`](crate::Cache::invalidate),
    /// [`invalidate_tag`](crate::Cache::invalidate_tag),
    /// [`clear`](crate::Cache::clear), [`peek`](crate::Cache::peek),
    /// [`peek_entry`](crate::Cache::peek_entry)) fail at once with a
    /// [`StoreErrorKind::BreakerOpen`](crate::StoreErrorKind::BreakerOpen)
    /// error. After the cool-down the breaker is **half-open**: the next
    /// store call is the one probe let through (the others are still
    /// skipped while it runs); if the store answers, the breaker closes,
    /// otherwise it opens for another cool-down. An error the store answers
    /// with (a protocol error) is an answer: it does not count as a failure.
    ///
    /// Counted in [`Stats::breaker_opened`](crate::Stats::breaker_opened)
    /// and [`Stats::store_calls_skipped`](crate::Stats::store_calls_skipped);
    /// opening and closing are logged. `failures` must be at least 1 and
    /// `cool_down` greater than zero.
    pub fn circuit_breaker(mut self, failures: u32, cool_down: Duration) -> Self {
        self.breaker = Some(BreakerSettings {
            failures,
            cool_down,
        });
        self
    }

    /// Turns the circuit breaker off: every store call goes to the store
    /// and pays its timeout when the store is sick.
    pub fn no_circuit_breaker(mut self) -> Self {
        self.breaker = None;
        self
    }

    /// The largest encoded value stored or decoded (default 8 MiB). Larger
    /// stored bytes are a counted miss; larger filled values are returned
    /// but not stored; [`Cache::set`] refuses them.
    pub fn max_value_bytes(mut self, bytes: usize) -> Self {
        self.policy.max_value_bytes = bytes;
        self
    }

    /// Stale-while-revalidate: for `grace` after its TTL an entry is still
    /// served (as [`Freshness::Stale`](crate::Freshness::Stale)) at once,
    /// while one background refresh per key — across every process sharing
    /// the store — fetches a new value. Past TTL + grace the key is a miss.
    /// Default: zero (off).
    pub fn grace(mut self, grace: Duration) -> Self {
        self.policy.grace = grace;
        self
    }

    /// Eager refresh: once an entry has lived `fraction` of its TTL (in
    /// `(0, 1)`), the next read starts the one background refresh before the
    /// entry goes stale. Default: off.
    pub fn eager_refresh(mut self, fraction: f64) -> Self {
        self.policy.eager_refresh = Some(fraction);
        self
    }

    /// Fail-safe: keep entries physically for `max` after their TTL. When a
    /// fill or refresh fails (error, panic or hard timeout) and such a value
    /// exists, callers get it (as
    /// [`Freshness::FailSafe`](crate::Freshness::FailSafe)) instead of the
    /// error, and it is re-cached for the throttle window — fenced like any
    /// write, never past its original end. Default: zero (off).
    ///
    /// Fail-safe comes with a soft timeout: unless
    /// [`soft_timeout`](Self::soft_timeout) is set, callers with such a
    /// value at hand wait at most [`FAIL_SAFE_SOFT_TIMEOUT`](crate::FAIL_SAFE_SOFT_TIMEOUT)
    /// (100 ms) for a fill, then get the value while the fill goes on. A
    /// source that fails slowly (a database timing out after a second, say)
    /// then costs its callers 100 ms, not the whole failure.
    pub fn fail_safe(mut self, max: Duration) -> Self {
        self.policy.fail_safe_max = max;
        self
    }

    /// How long a fail-safe value is re-cached after a failed fill, so a
    /// failing source is not called on every read. Default 30 s.
    pub fn fail_safe_throttle(mut self, throttle: Duration) -> Self {
        self.policy.fail_safe_throttle = throttle;
        self
    }

    /// Soft timeout: when an expired value kept for fail-safe is at hand,
    /// callers wait at most this long for the fill and then get that value
    /// (as stale) while the fill goes on in the background, up to the hard
    /// `fill_timeout`, and updates the cache. Must be less than
    /// `fill_timeout`. Default: off, but
    /// [`FAIL_SAFE_SOFT_TIMEOUT`](crate::FAIL_SAFE_SOFT_TIMEOUT) with
    /// [`fail_safe`](Self::fail_safe) on.
    pub fn soft_timeout(mut self, timeout: Duration) -> Self {
        self.policy.soft_timeout = Some(timeout);
        self
    }

    /// No soft timeout, even with [`fail_safe`](Self::fail_safe) on:
    /// callers with a value at hand wait for the fill (up to
    /// `fill_timeout`) and get the fail-safe value only once it failed.
    pub fn no_soft_timeout(mut self) -> Self {
        self.policy.soft_timeout = None;
        self.policy.pair_soft_timeout = false;
        self
    }

    /// How long a "not found" answer is cached (see
    /// [`Cache::get_or_fill_option`]). Default 60 s.
    pub fn negative_ttl(mut self, ttl: Duration) -> Self {
        self.policy.negative_ttl = ttl;
        self
    }

    /// At most `limit` background refreshes of this cache run at once (at
    /// least 1); when full, a refresh is skipped and a later read tries
    /// again. Default 16.
    pub fn refresh_limit(mut self, limit: usize) -> Self {
        self.refresh_limit = limit.max(1);
        self
    }

    /// Shares a refresh limiter between caches: their background refreshes
    /// together take at most the semaphore's permits. Overrides
    /// [`refresh_limit`](CacheBuilder::refresh_limit).
    pub fn refresh_limiter(mut self, limiter: Arc<Semaphore>) -> Self {
        self.refresh_limiter = Some(limiter);
        self
    }

    /// Bounds how many fills run at once against the source, across keys:
    /// give one [`FillBudget`] to every cache that reads the same source
    /// (and, with [`FillBudget::fleet`], to every process). Fills over
    /// budget queue, hottest key first; see [`FillBudget`] for the order,
    /// the bounded waits and [`Error::Overloaded`](crate::Error::Overloaded).
    /// Default: none (every key's one fill runs at once).
    ///
    /// # When the store is in trouble
    ///
    /// A flight whose store does not answer waits for it — while the store
    /// answers other calls, and until it has been silent for a
    /// [`lease_ttl`](Self::lease_ttl) — before it fills without a lease.
    /// Those fills are bounded in each cache: one per key, and at most the
    /// budget's limit at once — this budget, or without one a default
    /// budget of [`DEFAULT_FAIL_OPEN_LIMIT`](crate::DEFAULT_FAIL_OPEN_LIMIT)
    /// for them alone. A store that stalls never turns into one fill per
    /// key per process all at once.
    pub fn fill_budget(mut self, budget: FillBudget) -> Self {
        self.budget = Some(budget);
        self
    }

    /// The codec of values in shared stores (default with a store:
    /// [`Postcard`]); it also weighs values for a [`Capacity::Bytes`].
    pub fn codec(mut self, codec: impl Codec<V>) -> Self {
        self.codec = Some(Arc::new(codec));
        self
    }

    /// Encrypts values in the shared store (feature `encryption`): every
    /// envelope is sealed with AES-256-GCM under a key derived for this
    /// cache from the [`Encryption`]'s master key, bound to the cache's
    /// namespace and the full key, so the store holds only ciphertext (and
    /// the keys in clear). Bytes that do not decrypt are a miss, counted in
    /// [`Stats::decrypt_failures`](crate::Stats::decrypt_failures), and
    /// overwritten by the next fill. The in-process tier holds decoded
    /// values as always. Without a store there is nothing to encrypt.
    /// Default: off.
    ///
    /// Every cache sharing a namespace must use the same master keys: a
    /// cache without encryption (or with other keys) counts the other's
    /// values as undecodable and overwrites them.
    #[cfg(feature = "encryption")]
    pub fn encryption(mut self, encryption: Encryption) -> Self {
        self.encryption = Some(encryption);
        self
    }

    /// Keeps values in a shared store ([`MemoryStore`](crate::store::MemoryStore),
    /// `RedisStore`, `MemcachedStore`, or any [`Store`]) instead of in
    /// process: one fill per key across every cache sharing the store. The
    /// store is taken by value or already shared as an `Arc` (an
    /// `Arc<dyn Store>` included).
    ///
    /// A store holds bytes, so this is the one setter that needs `V` to be
    /// `Serialize + DeserializeOwned`: it sets the [`codec`](Self::codec)
    /// to [`Postcard`] unless one is set.
    pub fn store(mut self, store: impl IntoStore) -> Self
    where
        V: Serialize + DeserializeOwned,
    {
        self.store = Some(store.into_store());
        if self.codec.is_none() {
            self.codec = Some(Arc::new(Postcard));
        }
        self
    }

    /// With a shared store, also keep decoded values in process (the L1, in
    /// front of the store, bounded by [`capacity`](CacheBuilder::capacity)).
    /// An L1 hit costs what a hit of an in-process-only cache costs; an L2
    /// hit fills the L1 with the entry's remaining life as the store's
    /// clock judged it, so an L1 copy never stays fresh longer than the
    /// store's. Writes, invalidations, tag invalidations and clears made
    /// through any cache of the same namespace reach this L1 through the
    /// [`backplane`](CacheBuilder::backplane).
    ///
    /// Default: on when the cache listens to a store that has a backplane
    /// (Redis, and the in-memory store; [`backplane`](Self::backplane) is on
    /// by default), off otherwise (memcached, a store without one, or
    /// `backplane(false)`): an L1 is on by default only where messages keep
    /// it coherent. With the L1, a read of a key this process holds fresh
    /// does not reach the store: a change another process makes is seen
    /// here once its backplane message arrives (within a millisecond
    /// between processes on one Redis), not on the very next read, and the
    /// store sees fewer reads (its hit counters and command counts with
    /// them). `l1(false)` restores the store read on every read: then
    /// concurrent reads of one key are not coalesced (each is one `GET`;
    /// fills still are). Without a store the in-process tier is always on.
    pub fn l1(mut self, on: bool) -> Self {
        self.l1_with_store = Some(on);
        self
    }

    /// Splits the in-process tier into this many shards (rounded up to a
    /// power of two, at most 1,024) instead of four per CPU: how corral's
    /// own tests and `examples/l1_hit_ratio.rs` show the layout of a
    /// many-CPU machine on a small one. What the tier keeps does not depend
    /// on it (one eviction order over all shards); only how many threads
    /// insert at once without waiting on one another does. Test support
    /// (feature `test-hooks`), not a stable API.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn l1_shards(mut self, shards: usize) -> Self {
        self.l1_shards = Some(shards);
        self
    }

    /// The longest an entry stays in the in-process tier, whatever its
    /// freshness (at least 1 ms); it is then read from the shared store
    /// again. Bounds how long a change another process made can go unseen
    /// when backplane messages are lost or the backplane is off. Default:
    /// none (the entry's own freshness).
    pub fn l1_lifetime(mut self, lifetime: Duration) -> Self {
        self.l1_lifetime = Some(lifetime.max(Duration::from_millis(1)));
        self
    }

    /// How long a tag's version (and the cache's clear version) is kept in
    /// the shared store after its last use (a read of it, an
    /// [`Cache::invalidate_tag`] or [`Cache::clear`]); no entry lives longer
    /// than this (longer TTLs are cut to it). A version the store no longer
    /// has — expired, evicted, flushed — is replaced by a new one on its
    /// next read, which makes every entry stamped with the old one a miss:
    /// a refill, never a stale hit. Default: 7 days.
    ///
    /// [`Cache::invalidate_tag`]: crate::Cache::invalidate_tag
    /// [`Cache::clear`]: crate::Cache::clear
    pub fn tag_retention(mut self, retention: Duration) -> Self {
        self.policy.tag_retention = retention;
        self
    }

    /// Whether the cache listens to the store's backplane: a `set`,
    /// `invalidate`, committed fill, tag invalidation or `clear` made through
    /// another cache of the same namespace — in this process or another —
    /// evicts the affected L1 entries at once. After the store's
    /// subscription is interrupted (messages may have been lost) the whole
    /// L1 is dropped. Off, L1 entries live out their freshness or
    /// [`l1_lifetime`](CacheBuilder::l1_lifetime), and tag versions are read
    /// from the store on every read of the store and every `set` (one more
    /// round trip each) instead of being kept.
    /// Default: on.
    ///
    /// On Redis, a listening cache has its store hold a subscriber
    /// connection (one per store, pinged every second). A cache with
    /// `backplane(false)` subscribes nothing when built: the store opens
    /// its subscriber only once a waiter needs a notification (a fill of
    /// another process to wait for). A cache without an L1 still listens
    /// by default: it keeps its tag and clear versions current by the
    /// messages instead of reading them from the store on every read.
    ///
    /// An L1 (`l1(true)`) without a working backplane — this set to false,
    /// or a store without one, such as memcached — and without an
    /// [`l1_lifetime`](CacheBuilder::l1_lifetime) logs a warning at
    /// [`build`](CacheBuilder::build): a change another process makes is
    /// then unseen here until the entry expires.
    pub fn backplane(mut self, on: bool) -> Self {
        self.backplane = on;
        self
    }

    /// The clock that expires in-process entries (default
    /// [`CoarseClock`](crate::clock::CoarseClock), whose reading a hot cache
    /// keeps on a ticker thread; an injected clock is read on every hit;
    /// use [`TokioClock`](crate::clock::TokioClock) under paused time).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// How often the cache copies its counters into the `metrics` recorder
    /// (feature `metrics`; default every second; `None`: never by itself,
    /// only on [`Cache::export_metrics`]). The exporter task starts with
    /// [`build`](CacheBuilder::build) when it is called inside a tokio
    /// runtime and ends when the cache is dropped.
    #[cfg(feature = "metrics")]
    pub fn metrics_interval(mut self, interval: Option<Duration>) -> Self {
        self.metrics_interval = interval.filter(|interval| !interval.is_zero());
        self
    }

    /// Whether traces (spans and events of fills, refreshes, leases and
    /// store errors) show raw keys. Default: no: a key appears as a stable
    /// hash (`h:` and 16 hex digits of its FNV-1a, the same in every
    /// process), so keys holding personal data stay out of logs.
    pub fn trace_raw_keys(mut self, on: bool) -> Self {
        self.policy.trace_raw_keys = on;
        self
    }

    /// Seeds the instance's random source (TTL jitter), for reproducible
    /// tests.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }
}

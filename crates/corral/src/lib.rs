//! # corral — read-through caching that cannot stampede
//!
//! When a hot key is missing or expires, corral runs **one** fill — across
//! every task of a process (in-process single-flight) and across every
//! process that shares a store (a fill lease in Redis) — and hands that one
//! result to every caller.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//!
//! let users = corral::Cache::<String>::builder("users")
//!     .ttl(Duration::from_secs(60))
//!     .jitter(0.1)
//!     .build()?;
//!
//! let name = users
//!     .get_or_fill("user:42", || async { Ok::<_, std::io::Error>("Ada".to_string()) })
//!     .await?;
//! assert_eq!(name, "Ada");
//! # Ok(())
//! # }
//! ```
//!
//! ## Tiers
//!
//! | built with | values live | one fill per key |
//! |---|---|---|
//! | nothing (default) | in-process, decoded, bounded by entries or bytes | per process |
//! | [`.store(MemoryStore)`](store::MemoryStore) | decoded in process (L1) in front of an in-process shared store of envelopes, with leases | per store |
//! | `.store(RedisStore)` (feature `redis`, default) | decoded in process (L1) in front of Redis: one server, Cluster, or Sentinel (L2) | across every process sharing it |
//! | `.store(..).l1(false)` | in the store only: every read asks it | across every process sharing the store |
//!
//! The L1 is on by default in front of a store that has a backplane (Redis,
//! [`MemoryStore`](store::MemoryStore)) while the cache listens to it
//! ([`CacheBuilder::backplane`], on by default); in front of memcached, or
//! with `backplane(false)`, it is on only with [`CacheBuilder::l1`]`(true)`.
//! A read of a key the L1 holds fresh does not reach the store: another
//! process's change is seen once its backplane message arrives, not on the
//! very next read. `l1(false)` makes every read ask the store.
//!
//! With two tiers, an L1 hit costs what an in-process hit costs (no await,
//! no allocation, no shared write); an L2 hit copies the entry into the L1
//! with the remaining life the store's clock gave it. The store's
//! **backplane** (Redis pub/sub, a channel per namespace) carries every
//! `set`, `invalidate`, committed fill, tag invalidation and `clear` of
//! any cache of the namespace to the others, which evict the key from their
//! L1 (messages carry keys and tags, never values; a cache ignores its own).
//! When the store's subscription is interrupted, messages may be lost:
//! what the L1 holds on the store's word is dropped at once (copies filled
//! from the source while the store did not answer are kept), and the whole
//! L1 once the subscription is confirmed again. [`CacheBuilder::l1_lifetime`] bounds
//! how long an L1 copy lives whatever happens to messages;
//! [`CacheBuilder::backplane`]`(false)` leaves L1 copies to that bound.
//!
//! ## Tags and clear
//!
//! A fill declares tags with [`FillOptions::tags`];
//! [`Cache::invalidate_tag`] makes every entry carrying the tag a miss in
//! every process, and [`Cache::clear`] every entry of the cache — without
//! scanning keys: each moves a version in the store, entries carry the
//! versions they were filled under, and a fill running meanwhile is
//! fenced. L1 hits check nothing (invalidations evict L1 entries); a read of
//! the store compares the entry's versions with the ones the cache keeps
//! current through the backplane (read once, in one round trip). A version
//! the store loses (evicted, flushed, lost in a restart) is replaced by a
//! new one on its next read, so the entries stamped with it are refilled,
//! never served after an invalidation.
//!
//! ## Batch
//!
//! [`Cache::get_many_or_fill`] answers many keys at once: L1 hits first,
//! then one read of the store for the rest (one round trip; one pipeline
//! per hash slot on a cluster), then **one** call of the batch fill with
//! exactly the keys still missing. Every key is its own flight, so batches
//! and single calls never fill a key twice; answers and errors are per key
//! ([`Batch`]).
//!
//! ## A budget for the source
//!
//! One fill per key still makes K fills when K keys go cold together (a
//! flush, a deploy with a new schema version, a tag invalidation over many
//! entries). A [`FillBudget`], given to every cache that reads one source
//! ([`CacheBuilder::fill_budget`]), lets at most N fills run at once; the
//! rest queue without touching the source, the key with the most waiting
//! callers first. A caller with a stale or fail-safe value at hand gets it
//! at once; the others wait up to the budget's `max_wait`, then get
//! [`Error::Overloaded`] (retryable; the source was not called).
//! [`FillBudget::fleet`] counts the permits in the shared store, across
//! every process. Caches have no budget unless given one.
//!
//! ## Freshness and failure
//!
//! | setting | what readers get |
//! |---|---|
//! | `ttl` (+ `jitter`) | the value while fresh; then a fill |
//! | `grace` | past the TTL, the stale value at once while one refresh runs ([`Freshness::Stale`]) |
//! | `eager_refresh(f)` | a background refresh once `f` of the TTL has passed |
//! | `fail_safe(max)` | if the fill fails, the expired value ([`Freshness::FailSafe`]), re-cached for `fail_safe_throttle` |
//! | `soft_timeout` | with a fail-safe value at hand, that value after the soft timeout while the fill goes on |
//! | `negative_ttl` | a cached "not found": a `None` of [`Cache::get_or_fill_option`] or an [`Answer::not_found`] |
//!
//! [`Cache::get_or_fill`] is the read-through call: its fill answers `V`.
//! A source that may have nothing calls [`Cache::get_or_fill_option`] (a
//! `None` cached as "not found"); one that sets a TTL per value, or wants
//! the [`Freshness`] of what it gets, calls [`Cache::get_or_fill_answer`]
//! (an [`Answer`] in, a [`Fetched`] out). The method fixes the fill's
//! answer ([`FillOutput`]), so a fill's `Ok(..)` needs no annotation.
//! Per-call settings go on its future: [`GetOrFill::options`], a
//! [`FillOptions`] or a closure building one only on a miss.
//! [`Cache::peek`] looks without filling. Errors compose: `?` takes a
//! corral [`Error`] into `anyhow::Result` or `Box<dyn Error + Send + Sync>`,
//! whatever the fill's error type ([`FillCause`]).
//!
//! ## A sick store
//!
//! Every store call is bounded by the store timeout, and reads fail open:
//! when the store does not answer, [`Cache::get_or_fill`] runs the fill
//! without a lease and returns its value, while `set`, `invalidate`,
//! `invalidate_tag`, `clear` and `peek` report [`Error::Store`]. So that a
//! frozen or unreachable store does not cost every call its timeout, each
//! cache with a store has a circuit breaker (on by default; see
//! [`CacheBuilder::circuit_breaker`]): after 5 consecutive store calls that
//! timed out or found it unreachable, store calls are skipped at once for
//! a 5 s cool-down ([`StoreErrorKind::BreakerOpen`]); then one probe call
//! decides whether it closes or stays open for another cool-down. L1 hits
//! never ask it.
//!
//! A service can start while Redis is down:
//! [`RedisStore::connect_lazy`] and [`RedisStore::connect_cluster_lazy`]
//! (and `CacheConfig::build`, feature `config`) return a store that
//! connects in the background; until Redis
//! answers the cache behaves as above, then uses it, without a restart.
//! [`StoreError::is_retryable`] tells an outage from a configuration to
//! fix.
//!
//! ## Features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `redis` | yes | [`RedisStore`]: one Redis or Valkey server (any version with Lua scripting), a Redis Cluster (Redis 7+: sharded pub/sub) or a master under Redis Sentinel |
//! | `macros` | yes | [`#[cached]`](cached): an `async fn` whose body is the fill of a [`Cache::get_or_fill`] |
//! | `tls` | no | `rediss://` for [`RedisStore`] through rustls (ring): webpki roots or your own CA ([`RedisConfig::tls_root_ca`](RedisConfig)), client certificates |
//! | `config` | no | `CacheConfig`: settings from TOML or `CORRAL_*` environment variables, with presets and per-cache sections; `Caches`: every cache of a process on one store |
//! | `metrics` | no | counters and durations through the [`metrics`](https://docs.rs/metrics) facade |
//! | `encryption` | no | `Encryption`: values in shared stores sealed with AES-256-GCM |
//! | `compression` | no | values in shared stores compressed with LZ4 (`lz4_flex`) or zstd ([`Compression`]) |
//! | `memcached` | no | `MemcachedStore`: memcached 1.6+ as the shared store (leases by `add`, fences by `cas`, waiters that poll) |
//!
//! ## Encryption
//!
//! With the feature `encryption`,
//! `CacheBuilder::encryption(Encryption::new(master_key))` makes the
//! shared store hold only ciphertext: each envelope is sealed with
//! AES-256-GCM under a key derived for the cache (HKDF-SHA256 of the
//! 32-byte master key and the cache's namespace), with a random 96-bit
//! nonce, and bound to the namespace and the full key (the associated
//! data). Bytes that do not decrypt — copied from another key or cache,
//! altered, sealed under an unknown master key, or unencrypted — **fail
//! closed**: a miss, counted in [`Stats::decrypt_failures`] and logged
//! without key material, and overwritten by the next fill. To rotate,
//! deploy `Encryption::new(new).previous_key(old)`: values sealed under
//! `old` are still read, new ones are sealed under `new`. Keys stay in the
//! store in clear (they name the entries); the L1 keeps decoded values.
//! `Debug` of `Encryption` shows how many keys it holds, never a key.
//!
//! ## Compression
//!
//! With the feature `compression`,
//! `CacheBuilder::compression(Compression::lz4())` (or
//! `Compression::zstd(level)`) compresses each value's encoding of at
//! least [`Compression::min_bytes`] (1 KiB by default) before it is
//! sealed and stored, when that saves at least an eighth. The envelope
//! says how a value was compressed, so caches with any setting (none
//! included) read each other's values; [`CacheBuilder::max_value_bytes`]
//! bounds the decompressed size, checked before anything is allocated,
//! and a frame that does not unpack is a counted miss
//! ([`Stats::decode_failures`]). The L1 keeps decoded values, so its hits
//! never decompress. [`Compression`] tells when to use which; the default
//! is none. Stored bytes, CPU per value and L2 hit throughput, measured
//! on loopback and through a slow link, are in BENCHMARKS.md.
//!
//! ## Metrics
//!
//! With the feature `metrics`, every cache adds what its counters gained to
//! the application's `metrics` recorder (e.g. `metrics-exporter-prometheus`)
//! every [`metrics_interval`](CacheBuilder::metrics_interval) and on
//! [`Cache::export_metrics`]; hits stay free of shared writes. Counters
//! and gauges move by what changed, so two instances of one cache (the
//! same name) in a process sum; every metric has HELP text. A cache built
//! outside a tokio runtime cannot start its exporter task, and warns so.
//! Every metric is labelled `cache` = the cache's name:
//!
//! | metric | labels | counts |
//! |---|---|---|
//! | `corral_hits_total` | `tier` = `l1` / `l2` | fresh values served, by the tier they came from (`l1`: in process) |
//! | `corral_misses_total` | | reads that found no servable value |
//! | `corral_fills_total` | | calls of the source of truth |
//! | `corral_coalesced_total` | | callers that joined a flight instead of filling |
//! | `corral_fill_errors_total`, `_panics_total`, `_timeouts_total` | | fills that failed, panicked, passed the hard timeout |
//! | `corral_soft_timeouts_total` | | flights that served their fallback at the soft timeout |
//! | `corral_served_total` | `freshness` = `stale` / `fail_safe` | stale and fail-safe values served |
//! | `corral_refreshes_total` | `outcome` = `started` / `stood_down` / `skipped` | background refreshes |
//! | `corral_leases_total` | `outcome` = `acquired` / `contended` / `errored` | fill leases granted; waits for another process's fill (one per wait, however many polls); leases unobtainable (filled open) |
//! | `corral_lease_renewals_total` | | lease renewals of long fills |
//! | `corral_commits_total`, `corral_commits_refused_total` | | fills written to the store; refused by a moved fence |
//! | `corral_store_errors_total` | | store calls that failed or timed out |
//! | `corral_decode_failures_total`, `corral_encode_failures_total` | | bytes that did not decode; values not encodable, not round-tripping through the codec, or too big |
//! | `corral_decrypt_failures_total` | | bytes that did not decrypt (feature `encryption`) |
//! | `corral_compression_values_total` | `outcome` = `compressed` / `skipped` | values written compressed; values at or over the threshold written as they are because compressing did not save an eighth (feature `compression`) |
//! | `corral_compression_bytes_total` | `stage` = `before` / `after` | bytes of the values written compressed, encoded and compressed: the ratio is `rate(..{stage="before"}[5m]) / rate(..{stage="after"}[5m])` (a quotient of counters sums over instances and processes, a ratio gauge would not; [`Stats::compression_ratio`] per instance) |
//! | `corral_tag_misses_total` | | entries made misses by a tag invalidation or clear |
//! | `corral_backplane_messages_total`, `corral_backplane_resets_total` | | backplane messages acted on; L1 drops when messages may have been lost (a re-subscription after the subscriber's connection was interrupted; 0 after a healthy start) |
//! | `corral_breaker_opened_total` | | times the store's circuit breaker opened (see [`CacheBuilder::circuit_breaker`]) |
//! | `corral_store_calls_skipped_total` | | store calls skipped at once because the circuit breaker was open |
//! | `corral_fills_queued_total`, `corral_overloads_total` | | fills that waited for a [`FillBudget`] permit; flights that got none within its `max_wait` |
//! | `corral_fleet_permits_total` | `outcome` = `taken` / `errored` | fleet permits taken from the store; fills run on the local permit alone because the store failed |
//! | `corral_fill_budget_in_use`, `_queued`, `_limit` (gauges) | | the cache's fill budget now: permits held in this process, fills queued, the limit |
//! | `corral_fill_queue_wait_seconds` (`histogram!`) | | how long each queued fill waited for its permit |
//! | `corral_l1_entries` (gauge) | | entries in the in-process tier |
//! | `corral_flights_in_progress` (gauge) | | fills and refreshes in progress |
//! | `corral_breaker_open` (gauge) | | instances whose store circuit breaker is open or half-open |
//! | `corral_fill_duration_seconds` (`histogram!`: see below) | | how long each fill ran |
//! | `corral_wait_duration_seconds` (`histogram!`: see below) | | how long each coalesced caller waited |
//!
//! The two durations are recorded with the `metrics` facade's
//! `histogram!`; what that becomes is the recorder's choice.
//! `metrics-exporter-prometheus` renders a histogram as a Prometheus
//! **summary** (quantiles over a sliding window, which cannot be
//! aggregated across processes) unless buckets are configured, e.g.
//! `PrometheusBuilder::new().set_buckets_for_metric(Matcher::Prefix("corral_".into()), &[0.001, 0.01, 0.1, 1.0, 10.0])`;
//! then it is a Prometheus histogram (`_bucket`, `_sum`, `_count`).
//!
//! ## Architecture
//!
//! The source is in layers, each importing only the layers below it (no
//! module imports the [`Cache`] facade, and no two modules import each
//! other):
//!
//! | layer (folder) | holds |
//! |---|---|
//! | `cache/` | the facade: [`Cache`]'s calls, [`CacheBuilder`], the future of [`Cache::get_or_fill`], [`Cache::get_many_or_fill`] |
//! | `flight/` | flights: the caller's side (from an L1 miss to the answer; the flight joined or led, its first request), the spawned `Leader`'s side (lease, fill budget permit, fill, commit, fallback), the batch leader |
//! | `budget/` | [`FillBudget`]: the permits and their queue (hottest fill first), fleet permits as leases in the shared store |
//! | `read/` | the one read pipeline: read a key's entry from the store, judge it, check its tag stamps, end a flight with a fresh hit |
//! | `state/` | `Inner`, one cache's state in one home (its fields private to it): the tiers, the settings, the flight table, the known tag versions, the counters; the backplane's changes |
//! | `tier/`, `store/`, `redis/`, `memcached/` | the L1 and its clock; the shared store behind its circuit breaker and timeout (wrapped once, held by every caller of the store); the stores |
//! | `stats/` | counters, the metrics export, health |
//! | `bounded_map/`, `backoff`, `rng`, `sync` | below the tiers and the stores: the bounded map and its S3-FIFO order (the L1's entries, the Redis store's expiries), doubling waits, seeded generators, locks |
//! | `data/`, `codec`, `clock` | what an entry is (the envelope), keys, freshness, settings, tag stamps, errors |
//!
//! An L1 hit reads in three files: [`Cache::get_or_fill`] (`cache/mod.rs`)
//! returns a future (`cache/get_or_fill.rs`) whose first poll asks the L1
//! (`tier/local.rs`, over a bounded map) and returns the value.
//!
//! A cold miss across processes (a cache with an L1 on Redis) reads in
//! seven:
//!
//! 1. `cache/get_or_fill.rs`: the L1 misses; the slow path starts;
//! 2. `cache/mod.rs`: the key and tags are checked;
//! 3. `flight/caller.rs`: the caller claims the key's flight
//!    (4. `state/flight.rs`'s table: one caller leads, the others join and
//!    wait) and, leading, sends its first request: the value, or else the
//!    fill lease, in one script;
//! 5. `flight/leader.rs`: the spawned leader waits for another process's
//!    lease (woken when its value lands), or fills under its own and
//!    commits, fenced;
//! 6. `read/mod.rs`: what the store answered is judged, and a fresh value
//!    ends the flight;
//! 7. `redis/store.rs`: the store's calls (each through `tier/shared.rs`'s
//!    breaker and timeout; the scripts in `redis/scripts.rs`, the reads in
//!    `redis/read/`).

#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]
#![forbid(unsafe_code)]
// docs.rs (nightly) marks each feature-gated item with its feature.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backoff;
mod bounded_map;
mod budget;
mod cache;
pub mod clock;
pub mod codec;
#[cfg(feature = "config")]
mod config;
mod data;
mod flight;
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub mod fuzzing;
mod read;
#[cfg(any(feature = "redis", feature = "config"))]
mod redact;
mod rng;
mod state;
mod stats;
pub mod store;
mod sync;
mod throttle;
mod tier;

#[cfg(feature = "redis")]
mod redis;

#[cfg(feature = "memcached")]
mod memcached;

pub use budget::{FillBudget, DEFAULT_FAIL_OPEN_LIMIT, DEFAULT_MAX_WAIT};
pub use cache::batch::{Batch, GetMany};
pub use cache::builder::{CacheBuilder, Capacity};
pub use cache::get_or_fill::{CallOptions, FillOutput, GetOrFill};
pub use cache::write::Set;
pub use cache::Cache;
#[cfg(feature = "config")]
pub use config::{CacheConfig, Caches};
#[doc(hidden)]
pub use data::cause::marker as fill_cause;
pub use data::cause::{FillCause, FillError};
pub use data::compression::Compression;
#[cfg(feature = "encryption")]
pub use data::encryption::Encryption;
pub use data::error::{ConfigError, Error, StoreError, StoreErrorKind};
pub use data::freshness::{Answer, Cached, Fetched, Freshness};
pub use data::key::{validate_key, InvalidKey, MAX_KEY_LEN};
pub use data::policy::FAIL_SAFE_SOFT_TIMEOUT;
pub use data::policy::{FillOptions, WriteOptions};
pub use data::tracking::Tracking;
pub use stats::health::{BudgetStats, Health, StoreHealth};
pub use stats::Stats;

#[cfg(feature = "redis")]
pub use redis::{RedisConfig, RedisKeys, RedisStore};

#[cfg(feature = "memcached")]
pub use memcached::{MemcachedConfig, MemcachedStore};

/// `#[corral::cached(cache = <expr>, key = "...")]` on an `async fn`: its
/// body becomes the fill of [`Cache::get_or_fill`], run once per key however
/// many callers (and processes) ask at once.
///
/// **The return type changes:** `-> Result<V, E>` becomes
/// `-> Result<V, corral::Error<E>>` and `-> V` becomes
/// `-> Result<V, corral::Error>`, because a call can fail in ways the body
/// cannot (the hard fill timeout, a panic, an invalid key) and a coalesced
/// caller gets the leader's error, shared, as [`Error::Fill`]. Only `Ok`
/// values are cached. A body answering `Option<V>` reads through a
/// `Cache<V>`, its `None` cached as "not found" for the negative TTL (as
/// [`Cache::get_or_fill_option`]).
///
/// ```
/// use std::sync::LazyLock;
/// use std::time::Duration;
/// use corral::Cache;
///
/// static PRICES: LazyLock<Cache<u64>> =
///     LazyLock::new(|| Cache::builder("prices").build().expect("valid config"));
///
/// /// A price in cents; an infallible body.
/// #[corral::cached(cache = PRICES, key = "price:{sku}", ttl = Duration::from_secs(5))]
/// async fn price(sku: String) -> u64 {
///     sku.len() as u64 * 100 // ask the pricing service here
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), corral::Error> {
/// assert_eq!(price("abc".to_owned()).await?, 300);
/// assert_eq!(PRICES.peek("price:abc").await?, Some(300));
/// # Ok(())
/// # }
/// ```
///
/// A cache on Redis in a `static`: [`RedisStore::connect_lazy`] is
/// synchronous, so a `LazyLock` can hold it too, provided it is first
/// touched inside the tokio runtime that serves the process (the store's
/// connections and tasks live on the runtime it was made on, and making it
/// outside one is an error). A `tokio::sync::OnceCell` (or a
/// `std::sync::OnceLock` set in `main`) makes that explicit, and `cache = `
/// may be any expression, `.await` included. The error type is a real error (`Display`
/// and `std::error::Error`), so `?` carries a call's error into
/// `anyhow::Result` or `Box<dyn Error>`, and the chain reaches it
/// ([`Error::Fill`]'s `source()` is the fill's error):
///
/// ```no_run
/// use std::time::Duration;
/// use corral::{Cache, RedisConfig, RedisStore};
/// use tokio::sync::OnceCell;
///
/// static USERS: OnceCell<Cache<String>> = OnceCell::const_new();
///
/// /// The cache, built on first use (a handle: cloning it is one `Arc` clone).
/// async fn users() -> Cache<String> {
///     USERS
///         .get_or_init(|| async {
///             // `connect_lazy` returns at once, even while Redis is down.
///             let store = RedisStore::connect_lazy("redis://127.0.0.1/", RedisConfig::default())
///                 .expect("a valid Redis URL");
///             Cache::builder("users").store(store).l1(true).build().expect("valid config")
///         })
///         .await
///         .clone()
/// }
///
/// #[derive(Debug)]
/// struct DbError;
///
/// impl std::fmt::Display for DbError {
///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
///         f.write_str("the database did not answer")
///     }
/// }
///
/// impl std::error::Error for DbError {}
///
/// #[corral::cached(cache = users().await, key = "user:{id}", ttl = Duration::from_secs(60))]
/// async fn user_name(id: u64) -> Result<String, DbError> {
///     Ok(format!("user {id}")) // query the database here
/// }
///
/// #[tokio::main]
/// async fn main() -> anyhow::Result<()> {
///     let name = user_name(42).await?;
///     println!("{name}");
///     Ok(())
/// }
/// ```
#[cfg(feature = "macros")]
pub use corral_macros::cached;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;

//! Configuration from a TOML file and from environment variables (feature
//! `config`), with documented presets, for one cache or for every cache of
//! a process on one store ([`Caches`]).
//!
//! ```toml
//! # corral.toml
//! redis_url = "redis://cache.internal:6379/"
//! l1 = true
//! ttl = "5m"
//! jitter = 0.1
//! grace = "1m"
//! fail_safe = "1h"
//! fill_timeout = "10s"
//!
//! # Cache `users`: these over the settings above.
//! [cache.users]
//! ttl = "1m"
//! version = 3
//! ```
//!
//! Every field is optional; what is not set keeps the builder's default.
//! Durations are written as a string of a number and a unit: `ms`, `s`,
//! `m`, `h` or `d` (`"250ms"`, `"1.5s"`, `"5m"`). From the environment,
//! field `x` is read from `CORRAL_X` (`CORRAL_REDIS_URL`, `CORRAL_TTL`,
//! `CORRAL_L1`, ...), and field `x` of cache `users` from
//! `CORRAL_USERS_X` (`CORRAL_USERS_TTL`); a variable set to the empty
//! string (or only spaces) counts as unset, as deployment templates often
//! leave them. [`CacheConfig::overlay`] lets the environment override a
//! file. In code, every field has a setter of the same name:
//!
//! ```
//! use std::time::Duration;
//! use corral::CacheConfig;
//!
//! let config = CacheConfig::default()
//!     .l1(true)
//!     .ttl(Duration::from_secs(300))
//!     .jitter(0.1)
//!     .cache("users", CacheConfig::default().ttl(Duration::from_secs(60)));
//! assert_eq!(config.ttl, Some(Duration::from_secs(300)));
//! assert_eq!(config.for_cache("users").ttl, Some(Duration::from_secs(60)));
//! assert_eq!(config.for_cache("orders").ttl, Some(Duration::from_secs(300)));
//! ```
//!
//! A mistake is reported on one line naming the variable (`CORRAL_TTL`) or
//! the TOML key (`ttl`) and the form expected (`"60s"`).
//!
//! # One store per process
//!
//! [`CacheConfig::caches`] opens the store once; every cache built from it
//! shares the store and its connections (on Redis: one command connection
//! and one subscriber connection per process, whatever the number of
//! caches, plus up to two for batched reads on a standalone server). [`CacheConfig::build`] opens a store of its own on each call:
//! for one cache only.
//!
//! # What stays in code
//!
//! A [`codec`](CacheBuilder::codec), [`encryption`](CacheBuilder::encryption)
//! keys, a [`clock`](CacheBuilder::clock), a shared
//! [`refresh_limiter`](CacheBuilder::refresh_limiter) and a
//! [`fill_budget`](CacheBuilder::fill_budget): they are values, not
//! settings, and a fill budget belongs to the source of truth that several
//! caches read (a pool of 8 connections is one budget of 8 given to each of
//! its caches), which only the code knows. Set them on
//! [`Caches::builder`].

mod caches;
mod env;
mod setters;

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

pub use self::caches::Caches;
use self::env::{duration, section_key};
use crate::cache::builder::CacheBuilder;
use crate::cache::Cache;
use crate::data::error::ConfigError;

/// A cache's settings — or a process's, with a section per cache
/// ([`cache`](Self::cache)) — as read from TOML or the environment, or set
/// in code with the setters named after the fields.
///
/// `Debug` never shows the Redis URL's password, whatever bytes it holds.
#[derive(Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct CacheConfig {
    /// A Redis URL (`redis://[user:password@]host:port/[db]`): values are
    /// shared through it. Unset: in process only.
    pub redis_url: Option<String>,
    /// Redis Cluster node URLs (instead of `redis_url`).
    pub redis_cluster_urls: Option<Vec<String>>,
    /// The name of a Redis Sentinel group's master (instead of `redis_url`;
    /// with `redis_sentinel_urls`): values are shared through whichever
    /// server is its master, followed across failovers.
    pub redis_sentinel_master: Option<String>,
    /// The URLs of the sentinels watching `redis_sentinel_master`
    /// (`redis://[user:password@]host:port`; with `redis_sentinel_master`).
    pub redis_sentinel_urls: Option<Vec<String>>,
    /// The user that authenticates to the Sentinel group's master (with
    /// `redis_master_password`; unset: the default user).
    pub redis_master_user: Option<String>,
    /// The password that authenticates to the Sentinel group's master
    /// (the sentinels' own passwords are in their URLs). Never shown by
    /// `Debug` or in errors.
    pub redis_master_password: Option<String>,
    /// With a store, also keep decoded values in process (the L1; default:
    /// on with a store that has a backplane, see `CacheBuilder::l1`).
    pub l1: Option<bool>,
    /// Listen to the store's backplane (default on).
    pub backplane: Option<bool>,
    /// How long an L1 copy lives at most.
    #[serde(default, deserialize_with = "duration")]
    pub l1_lifetime: Option<Duration>,
    /// How long a value is fresh.
    #[serde(default, deserialize_with = "duration")]
    pub ttl: Option<Duration>,
    /// Random spread of TTLs, a fraction in `[0, 1]`.
    pub jitter: Option<f64>,
    /// How long past its TTL a value is served stale while one refresh runs.
    #[serde(default, deserialize_with = "duration")]
    pub grace: Option<Duration>,
    /// The fraction of the TTL after which a background refresh starts.
    pub eager_refresh: Option<f64>,
    /// How long past its TTL a value is kept to serve if the fill fails.
    #[serde(default, deserialize_with = "duration")]
    pub fail_safe: Option<Duration>,
    /// The hard limit of one fill.
    #[serde(default, deserialize_with = "duration")]
    pub fill_timeout: Option<Duration>,
    /// With a fail-safe value at hand, how long callers wait for a fill.
    #[serde(default, deserialize_with = "duration")]
    pub soft_timeout: Option<Duration>,
    /// How long a "not found" is cached.
    #[serde(default, deserialize_with = "duration")]
    pub negative_ttl: Option<Duration>,
    /// The fill lease's time to live (renewed while a fill runs).
    #[serde(default, deserialize_with = "duration")]
    pub lease_ttl: Option<Duration>,
    /// The bound of one store call.
    #[serde(default, deserialize_with = "duration")]
    pub store_timeout: Option<Duration>,
    /// The bound of one connection attempt to Redis
    /// ([`RedisConfig::connect_timeout`](crate::redis::RedisConfig::connect_timeout)).
    #[serde(default, deserialize_with = "duration")]
    pub redis_connect_timeout: Option<Duration>,
    /// How often the Redis command and subscriber connections are checked
    /// (`ROLE`, `PING`); one that gives no answer within `store_timeout` is
    /// replaced
    /// ([`RedisConfig::health_interval`](crate::redis::RedisConfig::health_interval)).
    #[serde(default, deserialize_with = "duration")]
    pub redis_health_interval: Option<Duration>,
    /// TCP keepalive on the Redis connections: the first probe after this
    /// long without traffic; `"0s"` turns it off
    /// ([`RedisConfig::tcp_keepalive`](crate::redis::RedisConfig::tcp_keepalive)).
    #[serde(default, deserialize_with = "duration")]
    pub redis_tcp_keepalive: Option<Duration>,
    /// The in-process bound, in entries
    /// ([`Capacity::Entries`](crate::cache::builder::Capacity::Entries)).
    pub max_entries: Option<u64>,
    /// The in-process bound, in bytes of encoded values, instead of
    /// entries ([`Capacity::Bytes`](crate::cache::builder::Capacity::Bytes); wins when
    /// both are set).
    pub max_bytes: Option<u64>,
    /// The largest encoded value stored.
    pub max_value_bytes: Option<usize>,
    /// How values are compressed in the shared store (feature
    /// `compression`): `"none"`, `"lz4"`, `"zstd"` or `"zstd:<level>"`,
    /// optionally followed by `",min_bytes=<bytes>"`
    /// ([`CacheBuilder::compression`]; default none).
    pub compression: Option<crate::Compression>,
    /// Whether the store's circuit breaker is on (default on with a store).
    pub circuit_breaker: Option<bool>,
    /// Consecutive failed store calls that open the breaker (default 5).
    pub breaker_failures: Option<u32>,
    /// How long an open breaker skips the store (default 5 s).
    #[serde(default, deserialize_with = "duration")]
    pub breaker_cool_down: Option<Duration>,
    /// The schema version of the values
    /// ([`CacheBuilder::version`]; default 0).
    pub version: Option<u32>,
    /// Versions whose namespaces this cache's invalidations also reach,
    /// during a rolling deploy that changes `version`
    /// ([`CacheBuilder::also_invalidate_versions`]). From the environment:
    /// comma-separated (`CORRAL_USERS_ALSO_INVALIDATE_VERSIONS=2`).
    pub also_invalidate_versions: Option<Vec<u32>>,
    /// How long a fail-safe value is re-cached after a failed fill
    /// ([`CacheBuilder::fail_safe_throttle`]; default 30 s).
    #[serde(default, deserialize_with = "duration")]
    pub fail_safe_throttle: Option<Duration>,
    /// How often a process waiting for another's fill re-checks the store
    /// without a notification ([`CacheBuilder::poll_interval`]; default
    /// 250 ms).
    #[serde(default, deserialize_with = "duration")]
    pub poll_interval: Option<Duration>,
    /// How long tag versions are kept in the store after their last use
    /// ([`CacheBuilder::tag_retention`]; default 7 days).
    #[serde(default, deserialize_with = "duration")]
    pub tag_retention: Option<Duration>,
    /// At most this many background refreshes at once
    /// ([`CacheBuilder::refresh_limit`]; default 16).
    pub refresh_limit: Option<usize>,
    /// How often counters are copied into the `metrics` recorder (feature
    /// `metrics`; `"0s"`: only on `Cache::export_metrics`; default 1 s;
    /// without the feature: no effect).
    #[serde(default, deserialize_with = "duration")]
    pub metrics_interval: Option<Duration>,
    /// Whether traces show raw keys instead of their hash
    /// ([`CacheBuilder::trace_raw_keys`]; default no).
    pub trace_raw_keys: Option<bool>,
    /// Per-cache settings, by cache name: each over the settings above for
    /// that cache only (TOML `[cache.users]`, variables
    /// `CORRAL_USERS_TTL`; see [`for_cache`](Self::for_cache)). A section
    /// sets no Redis URL or connection setting (the process's caches share
    /// one store) and has no sections of its own. Names are matched
    /// ignoring case, with `-` and `.` read as `_`. A section for a cache
    /// that is never built is never read.
    #[serde(default)]
    pub cache: BTreeMap<String, CacheConfig>,
}

impl CacheConfig {
    /// Preset: in process only, values fresh for a minute, a hung source
    /// never pins a key for more than 10 s: the builder's defaults
    /// (`Cache::builder(name).build()`) but for `fill_timeout`, 10 s
    /// instead of 30 s.
    pub fn in_memory() -> Self {
        Self {
            ttl: Some(Duration::from_secs(60)),
            fill_timeout: Some(Duration::from_secs(10)),
            ..Self::default()
        }
    }

    /// Preset for services sharing a Redis: an L1 kept coherent by the
    /// backplane, TTLs of 5 minutes spread by 10%, stale values served for a
    /// minute while one refresh runs, the last good value served for an
    /// hour if the source fails (after at most 1 s of waiting for it),
    /// fills stopped after 10 s.
    pub fn production(redis_url: &str) -> Self {
        Self {
            redis_url: Some(redis_url.to_owned()),
            l1: Some(true),
            backplane: Some(true),
            ttl: Some(Duration::from_secs(300)),
            jitter: Some(0.1),
            grace: Some(Duration::from_secs(60)),
            fail_safe: Some(Duration::from_secs(3600)),
            soft_timeout: Some(Duration::from_secs(1)),
            fill_timeout: Some(Duration::from_secs(10)),
            ..Self::default()
        }
    }

    /// Reads a TOML document: the global settings, then a table per cache
    /// (`[cache.users]`).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the field for bad syntax, an unknown field, a
    /// value of the wrong type or a duration without a unit; and naming
    /// the cache for a section that sets a process-wide field.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let config = env::from_toml(text)?;
        config.check_sections()?;
        Ok(config.normalized())
    }

    /// Reads `CORRAL_*` variables of the process environment.
    ///
    /// # Errors
    ///
    /// As [`from_vars`](Self::from_vars).
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_vars("CORRAL_", std::env::vars())
    }

    /// Reads field `x` from variable `{prefix}X` of `vars` (for tests, or
    /// another prefix), and field `x` of cache `users` from
    /// `{prefix}USERS_X`: pairs of strings or references to them, e.g.
    /// `&[("CORRAL_TTL", "60s")]`, a `Vec<(String, String)>` or
    /// `std::env::vars()`. Lists (cluster URLs, versions) are
    /// comma-separated. A variable whose value is empty (or only spaces)
    /// counts as unset.
    ///
    /// A variable's name is read as a global field if it is one
    /// (`CORRAL_NEGATIVE_TTL`), otherwise as a cache's name, `_`, and the
    /// longest field it ends with (`CORRAL_USER_SESSIONS_FILL_TIMEOUT`:
    /// cache `user_sessions`, which also matches a cache named
    /// `user-sessions`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use corral::CacheConfig;
    ///
    /// let config = CacheConfig::from_vars(
    ///     "CORRAL_",
    ///     [
    ///         ("CORRAL_TTL", "90s"),
    ///         ("CORRAL_USERS_TTL", "10s"),
    ///         ("CORRAL_REDIS_CLUSTER_URLS", ""),
    ///     ],
    /// )?;
    /// assert_eq!(config.ttl, Some(Duration::from_secs(90)));
    /// assert_eq!(config.for_cache("users").ttl, Some(Duration::from_secs(10)));
    /// assert_eq!(config.redis_cluster_urls, None);
    ///
    /// let error = CacheConfig::from_vars("CORRAL_", [("CORRAL_TTL", "60")]).unwrap_err();
    /// assert!(error.to_string().contains("CORRAL_TTL"));
    /// assert!(error.to_string().contains(r#""60s""#));
    /// # Ok::<(), corral::ConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the variable and the form expected for a
    /// value of the wrong type or a duration without a unit; for an
    /// unknown `{prefix}*` variable (a typo would otherwise be ignored); and
    /// for a process-wide field set per cache (`CORRAL_USERS_REDIS_URL`).
    pub fn from_vars<I, K, V>(prefix: &str, vars: I) -> Result<Self, ConfigError>
    where
        I: IntoIterator,
        I::Item: Borrow<(K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let pairs: Vec<I::Item> = vars.into_iter().collect();
        let pairs = pairs.iter().map(|pair| {
            let (name, value) = pair.borrow();
            (name.as_ref(), value.as_ref())
        });
        env::from_vars(prefix, pairs)
    }

    /// `self` with every field that `over` sets replaced by `over`'s (e.g.
    /// a file overlaid with the environment); the sections of a cache
    /// named in both are overlaid the same way.
    #[must_use]
    pub fn overlay(self, over: Self) -> Self {
        let (mut this, mut over) = (self.normalized(), over.normalized());
        let mut cache = std::mem::take(&mut this.cache);
        for (name, section) in std::mem::take(&mut over.cache) {
            let merged = match cache.remove(&name) {
                Some(under) => under.overlay(section),
                None => section,
            };
            cache.insert(name, merged);
        }
        Self {
            redis_url: over.redis_url.or(this.redis_url),
            redis_cluster_urls: over.redis_cluster_urls.or(this.redis_cluster_urls),
            redis_sentinel_master: over.redis_sentinel_master.or(this.redis_sentinel_master),
            redis_sentinel_urls: over.redis_sentinel_urls.or(this.redis_sentinel_urls),
            redis_master_user: over.redis_master_user.or(this.redis_master_user),
            redis_master_password: over.redis_master_password.or(this.redis_master_password),
            l1: over.l1.or(this.l1),
            backplane: over.backplane.or(this.backplane),
            l1_lifetime: over.l1_lifetime.or(this.l1_lifetime),
            ttl: over.ttl.or(this.ttl),
            jitter: over.jitter.or(this.jitter),
            grace: over.grace.or(this.grace),
            eager_refresh: over.eager_refresh.or(this.eager_refresh),
            fail_safe: over.fail_safe.or(this.fail_safe),
            fill_timeout: over.fill_timeout.or(this.fill_timeout),
            soft_timeout: over.soft_timeout.or(this.soft_timeout),
            negative_ttl: over.negative_ttl.or(this.negative_ttl),
            lease_ttl: over.lease_ttl.or(this.lease_ttl),
            store_timeout: over.store_timeout.or(this.store_timeout),
            redis_connect_timeout: over.redis_connect_timeout.or(this.redis_connect_timeout),
            redis_health_interval: over.redis_health_interval.or(this.redis_health_interval),
            redis_tcp_keepalive: over.redis_tcp_keepalive.or(this.redis_tcp_keepalive),
            max_entries: over.max_entries.or(this.max_entries),
            max_bytes: over.max_bytes.or(this.max_bytes),
            max_value_bytes: over.max_value_bytes.or(this.max_value_bytes),
            compression: over.compression.or(this.compression),
            circuit_breaker: over.circuit_breaker.or(this.circuit_breaker),
            breaker_failures: over.breaker_failures.or(this.breaker_failures),
            breaker_cool_down: over.breaker_cool_down.or(this.breaker_cool_down),
            version: over.version.or(this.version),
            also_invalidate_versions: over
                .also_invalidate_versions
                .or(this.also_invalidate_versions),
            fail_safe_throttle: over.fail_safe_throttle.or(this.fail_safe_throttle),
            poll_interval: over.poll_interval.or(this.poll_interval),
            tag_retention: over.tag_retention.or(this.tag_retention),
            refresh_limit: over.refresh_limit.or(this.refresh_limit),
            metrics_interval: over.metrics_interval.or(this.metrics_interval),
            trace_raw_keys: over.trace_raw_keys.or(this.trace_raw_keys),
            cache,
        }
    }

    /// The settings of cache `name`: the global ones overlaid with its
    /// section, if there is one (names matched ignoring case, `-` and `.`
    /// read as `_`), without sections.
    #[must_use]
    pub fn for_cache(&self, name: &str) -> Self {
        let mut global = self.clone();
        let sections = std::mem::take(&mut global.cache);
        let key = section_key(name);
        sections
            .into_iter()
            .filter(|(section, _)| section_key(section) == key)
            .fold(global, |config, (_, section)| config.overlay(section))
    }

    /// Adds `settings` as cache `name`'s section (over any it had).
    #[must_use]
    pub fn cache(mut self, name: &str, settings: CacheConfig) -> Self {
        let key = section_key(name);
        let merged = match self.cache.remove(&key) {
            Some(under) => under.overlay(settings),
            None => settings,
        };
        self.cache.insert(key, merged);
        self
    }

    /// `self` with its sections keyed by [`section_key`] (sections whose
    /// names differ only by case, `-` or `.` overlaid in name order).
    fn normalized(mut self) -> Self {
        if self.cache.keys().all(|name| section_key(name) == *name) {
            return self;
        }
        let sections = std::mem::take(&mut self.cache);
        sections
            .into_iter()
            .fold(self, |config, (name, section)| config.cache(&name, section))
    }

    /// An error naming the first section that sets a process-wide field
    /// or has sections of its own.
    fn check_sections(&self) -> Result<(), ConfigError> {
        for (name, section) in &self.cache {
            if !section.cache.is_empty() {
                return Err(ConfigError::new(format!(
                    "cache {name:?}: a cache's section has no sections of its own"
                )));
            }
            let set = section.process_fields_set();
            if let Some(field) = set.first() {
                return Err(ConfigError::new(format!(
                    "cache {name:?}: {field} is set for the whole process, not per cache: \
                     the caches of a process share one store"
                )));
            }
        }
        Ok(())
    }

    /// The fields that describe the process's one store — set globally,
    /// never per cache (every cache of a [`Caches`] shares the store) —
    /// each beside whether this config sets it.
    fn process_fields(&self) -> [(&'static str, bool); 9] {
        [
            ("redis_url", self.redis_url.is_some()),
            ("redis_cluster_urls", self.redis_cluster_urls.is_some()),
            (
                "redis_sentinel_master",
                self.redis_sentinel_master.is_some(),
            ),
            ("redis_sentinel_urls", self.redis_sentinel_urls.is_some()),
            ("redis_master_user", self.redis_master_user.is_some()),
            (
                "redis_master_password",
                self.redis_master_password.is_some(),
            ),
            (
                "redis_connect_timeout",
                self.redis_connect_timeout.is_some(),
            ),
            (
                "redis_health_interval",
                self.redis_health_interval.is_some(),
            ),
            ("redis_tcp_keepalive", self.redis_tcp_keepalive.is_some()),
        ]
    }

    /// The process-wide fields this config sets.
    fn process_fields_set(&self) -> Vec<&'static str> {
        self.process_fields()
            .into_iter()
            .filter_map(|(field, set)| set.then_some(field))
            .collect()
    }

    /// Whether `field` is one of the process-wide fields (see
    /// [`process_fields`](Self::process_fields)).
    fn is_process_field(field: &str) -> bool {
        Self::default()
            .process_fields()
            .iter()
            .any(|(name, _)| *name == field)
    }

    /// Applies the in-process settings to `builder` (everything but the
    /// store; see [`build`](Self::build)): the global settings, overlaid
    /// with the section of the builder's cache, if any.
    pub fn apply<V>(&self, builder: CacheBuilder<V>) -> CacheBuilder<V>
    where
        V: Clone + Send + Sync + 'static,
    {
        let config = self.for_cache(builder.name());
        config.apply_own(builder)
    }

    /// Applies this config's own fields (not its sections) to `builder`.
    fn apply_own<V>(&self, mut builder: CacheBuilder<V>) -> CacheBuilder<V>
    where
        V: Clone + Send + Sync + 'static,
    {
        macro_rules! set {
            ($($field:ident => $method:ident),* $(,)?) => {
                $( if let Some(value) = self.$field.clone() { builder = builder.$method(value); } )*
            };
        }
        set! {
            l1 => l1, backplane => backplane, l1_lifetime => l1_lifetime, ttl => ttl,
            jitter => jitter, grace => grace, eager_refresh => eager_refresh,
            fail_safe => fail_safe, fill_timeout => fill_timeout,
            soft_timeout => soft_timeout, negative_ttl => negative_ttl,
            lease_ttl => lease_ttl, store_timeout => store_timeout,
            max_value_bytes => max_value_bytes, compression => compression, version => version,
            also_invalidate_versions => also_invalidate_versions,
            fail_safe_throttle => fail_safe_throttle, poll_interval => poll_interval,
            tag_retention => tag_retention, refresh_limit => refresh_limit,
            trace_raw_keys => trace_raw_keys,
        }
        #[cfg(feature = "metrics")]
        if let Some(interval) = self.metrics_interval {
            builder = builder.metrics_interval(Some(interval));
        }
        // A bound in bytes wins over one in entries.
        if let Some(entries) = self.max_entries {
            builder = builder.capacity(crate::cache::builder::Capacity::Entries(entries));
        }
        if let Some(bytes) = self.max_bytes {
            builder = builder.capacity(crate::cache::builder::Capacity::Bytes(bytes));
        }
        if self.circuit_breaker == Some(false) {
            builder = builder.no_circuit_breaker();
        } else if self.breaker_failures.is_some() || self.breaker_cool_down.is_some() {
            let defaults = crate::tier::breaker::BreakerSettings::default();
            builder = builder.circuit_breaker(
                self.breaker_failures.unwrap_or(defaults.failures),
                self.breaker_cool_down.unwrap_or(defaults.cool_down),
            );
        }
        builder
    }

    /// Builds cache `name` on the Redis of `redis_url` (feature `redis`),
    /// if set, and applies every setting (the global ones, overlaid with
    /// `name`'s section).
    ///
    /// Each call opens a store of its own (on Redis, a command connection
    /// and a subscriber connection per cache): to build several caches on
    /// one store, use [`caches`](Self::caches).
    ///
    /// Redis is connected to in the background
    /// ([`RedisStore::connect_lazy`](crate::redis::RedisStore::connect_lazy),
    /// [`RedisStore::connect_cluster_lazy`](crate::redis::RedisStore::connect_cluster_lazy)
    /// for `redis_cluster_urls`, or
    /// [`RedisStore::connect_sentinel_lazy`](crate::redis::RedisStore::connect_sentinel_lazy)
    /// for `redis_sentinel_master` and `redis_sentinel_urls`), standalone,
    /// cluster and Sentinel alike: the cache is built even while Redis is
    /// down, serves fail-open meanwhile (`get_or_fill` fills without a
    /// lease; `set` and `invalidate` report
    /// [`Error::Store`](crate::Error::Store)) and uses Redis as soon as it
    /// answers, without a restart. [`Cache::health`] tells whether it
    /// answers now.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] for invalid settings: more than one of `redis_url`,
    /// `redis_cluster_urls` and the Sentinel settings set,
    /// `redis_sentinel_master` without `redis_sentinel_urls` or the other
    /// way round, `redis_master_user` or `redis_master_password` without
    /// them, a malformed Redis URL or a `rediss://` URL
    /// without the `tls` feature (its [`store_error`](ConfigError::store_error)
    /// holds the store's typed error), a Redis URL in a build without the
    /// `redis` feature, a section that sets a process-wide field, or a
    /// setting the builder refuses. No server is asked anything before the
    /// cache is returned: an unreachable server or cluster is no error
    /// here. No message shows a password.
    pub async fn build<V>(&self, name: &str) -> Result<Cache<V>, ConfigError>
    where
        V: serde::Serialize + serde::de::DeserializeOwned + Clone + Send + Sync + 'static,
    {
        self.caches()?.build(name)
    }
}

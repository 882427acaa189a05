//! Configuration from a TOML file and from environment variables (feature
//! `config`), with documented presets.
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
//! ```
//!
//! Every field is optional; what is not set keeps the builder's default.
//! Durations are written as a string of a number and a unit: `ms`, `s`,
//! `m`, `h` or `d` (`"250ms"`, `"1.5s"`, `"5m"`). From the environment,
//! field `x` is read from `CORRAL_X` (`CORRAL_REDIS_URL`, `CORRAL_TTL`,
//! `CORRAL_L1`, ...); a variable set to the empty string (or only spaces)
//! counts as unset, as deployment templates often leave them.
//! [`CacheConfig::overlay`] lets the environment override a file. In code,
//! every field has a setter of the same name:
//!
//! ```
//! use std::time::Duration;
//! use corral::CacheConfig;
//!
//! let config = CacheConfig::default()
//!     .l1(true)
//!     .ttl(Duration::from_secs(300))
//!     .jitter(0.1);
//! assert_eq!(config.ttl, Some(Duration::from_secs(300)));
//! ```
//!
//! A mistake is reported on one line naming the variable (`CORRAL_TTL`) or
//! the TOML key (`ttl`) and the form expected (`"60s"`).

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::cache::builder::CacheBuilder;
use crate::cache::Cache;
use crate::data::error::ConfigError;
use crate::redact::redact_url;

/// A cache's settings, as read from TOML or the environment, or set in code
/// with the setters named after the fields.
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
    /// Whether the store's circuit breaker is on (default on with a store).
    pub circuit_breaker: Option<bool>,
    /// Consecutive failed store calls that open the breaker (default 5).
    pub breaker_failures: Option<u32>,
    /// How long an open breaker skips the store (default 5 s).
    #[serde(default, deserialize_with = "duration")]
    pub breaker_cool_down: Option<Duration>,
}

/// The fields, their environment variable suffix and how to read them.
#[derive(Clone, Copy)]
enum Kind {
    Text,
    List,
    Bool,
    Number,
    Duration,
}

const FIELDS: &[(&str, Kind)] = &[
    ("redis_url", Kind::Text),
    ("redis_cluster_urls", Kind::List),
    ("redis_sentinel_master", Kind::Text),
    ("redis_sentinel_urls", Kind::List),
    ("redis_master_user", Kind::Text),
    ("redis_master_password", Kind::Text),
    ("l1", Kind::Bool),
    ("backplane", Kind::Bool),
    ("l1_lifetime", Kind::Duration),
    ("ttl", Kind::Duration),
    ("jitter", Kind::Number),
    ("grace", Kind::Duration),
    ("eager_refresh", Kind::Number),
    ("fail_safe", Kind::Duration),
    ("fill_timeout", Kind::Duration),
    ("soft_timeout", Kind::Duration),
    ("negative_ttl", Kind::Duration),
    ("lease_ttl", Kind::Duration),
    ("store_timeout", Kind::Duration),
    ("redis_connect_timeout", Kind::Duration),
    ("redis_health_interval", Kind::Duration),
    ("redis_tcp_keepalive", Kind::Duration),
    ("max_entries", Kind::Number),
    ("max_bytes", Kind::Number),
    ("max_value_bytes", Kind::Number),
    ("circuit_breaker", Kind::Bool),
    ("breaker_failures", Kind::Number),
    ("breaker_cool_down", Kind::Duration),
];

impl CacheConfig {
    /// Preset: in process only, values fresh for a minute, a hung source
    /// never pins a key for more than 10 s. What
    /// `Cache::builder(name).build()` gives, made explicit.
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

    /// Reads a TOML document.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the field for bad syntax, an unknown field, a
    /// value of the wrong type or a duration without a unit.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| {
            let key = e.span().and_then(|span| key_at(text, span.start));
            let message = one_line(e.message());
            ConfigError::new(match key {
                Some(key) => format!("corral config: key `{key}`: {message}"),
                None => format!("corral config: {message}"),
            })
        })
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
    /// another prefix): pairs of strings or references to them, e.g.
    /// `&[("CORRAL_TTL", "60s")]`, a `Vec<(String, String)>` or
    /// `std::env::vars()`. Cluster URLs are comma-separated. A variable
    /// whose value is empty (or only spaces) counts as unset.
    ///
    /// ```
    /// use std::time::Duration;
    /// use corral::CacheConfig;
    ///
    /// let config = CacheConfig::from_vars(
    ///     "CORRAL_",
    ///     [("CORRAL_TTL", "90s"), ("CORRAL_REDIS_CLUSTER_URLS", "")],
    /// )?;
    /// assert_eq!(config.ttl, Some(Duration::from_secs(90)));
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
    /// value of the wrong type or a duration without a unit, and for an
    /// unknown `{prefix}*` variable (a typo would otherwise be ignored).
    pub fn from_vars<I, K, V>(prefix: &str, vars: I) -> Result<Self, ConfigError>
    where
        I: IntoIterator,
        I::Item: Borrow<(K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut config = Self::default();
        for pair in vars {
            let (name, value) = pair.borrow();
            let (name, value) = (name.as_ref(), value.as_ref());
            let Some(field) = name.strip_prefix(prefix) else {
                continue;
            };
            let field = field.to_ascii_lowercase();
            let Some((field, kind)) = FIELDS.iter().find(|(known, _)| *known == field) else {
                return Err(ConfigError::new(format!(
                    "unknown variable {name} (known: {})",
                    FIELDS
                        .iter()
                        .map(|(f, _)| format!("{prefix}{}", f.to_ascii_uppercase()))
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            };
            let trimmed = value.trim();
            if trimmed.is_empty() {
                continue;
            }
            // The value of a URL variable may hold a password: never shown.
            let shown = match kind {
                Kind::Text | Kind::List => String::new(),
                _ => format!(", got {trimmed:?}"),
            };
            let bad = |what: &str| ConfigError::new(format!("{name}: expected {what}{shown}"));
            let value = match kind {
                Kind::Text => toml::Value::String(trimmed.to_owned()),
                Kind::List => toml::Value::Array(
                    trimmed
                        .split(',')
                        .map(str::trim)
                        .filter(|url| !url.is_empty())
                        .map(|url| toml::Value::String(url.to_owned()))
                        .collect(),
                ),
                Kind::Bool => match trimmed.to_ascii_lowercase().as_str() {
                    "1" | "true" | "yes" | "on" => toml::Value::Boolean(true),
                    "0" | "false" | "no" | "off" => toml::Value::Boolean(false),
                    _ => return Err(bad("true or false (also yes/no, on/off, 1/0)")),
                },
                Kind::Number => match trimmed.parse::<i64>() {
                    Ok(int) => toml::Value::Integer(int),
                    Err(_) => toml::Value::Float(trimmed.parse().map_err(|_| bad("a number"))?),
                },
                Kind::Duration => match parse_duration(trimmed) {
                    Ok(_) => toml::Value::String(trimmed.to_owned()),
                    Err(e) => return Err(ConfigError::new(format!("{name}: {e}"))),
                },
            };
            // One variable at a time, so an error names its variable.
            let mut table = toml::Table::new();
            table.insert((*field).to_owned(), value);
            let one = Self::deserialize(table).map_err(|e| {
                ConfigError::new(format!("{name}: {}{shown}", one_line(&e.to_string())))
            })?;
            config = config.overlay(one);
        }
        Ok(config)
    }

    /// `self` with every field that `over` sets replaced by `over`'s (e.g.
    /// a file overlaid with the environment).
    #[must_use]
    pub fn overlay(self, over: Self) -> Self {
        Self {
            redis_url: over.redis_url.or(self.redis_url),
            redis_cluster_urls: over.redis_cluster_urls.or(self.redis_cluster_urls),
            redis_sentinel_master: over.redis_sentinel_master.or(self.redis_sentinel_master),
            redis_sentinel_urls: over.redis_sentinel_urls.or(self.redis_sentinel_urls),
            redis_master_user: over.redis_master_user.or(self.redis_master_user),
            redis_master_password: over.redis_master_password.or(self.redis_master_password),
            l1: over.l1.or(self.l1),
            backplane: over.backplane.or(self.backplane),
            l1_lifetime: over.l1_lifetime.or(self.l1_lifetime),
            ttl: over.ttl.or(self.ttl),
            jitter: over.jitter.or(self.jitter),
            grace: over.grace.or(self.grace),
            eager_refresh: over.eager_refresh.or(self.eager_refresh),
            fail_safe: over.fail_safe.or(self.fail_safe),
            fill_timeout: over.fill_timeout.or(self.fill_timeout),
            soft_timeout: over.soft_timeout.or(self.soft_timeout),
            negative_ttl: over.negative_ttl.or(self.negative_ttl),
            lease_ttl: over.lease_ttl.or(self.lease_ttl),
            store_timeout: over.store_timeout.or(self.store_timeout),
            redis_connect_timeout: over.redis_connect_timeout.or(self.redis_connect_timeout),
            redis_health_interval: over.redis_health_interval.or(self.redis_health_interval),
            redis_tcp_keepalive: over.redis_tcp_keepalive.or(self.redis_tcp_keepalive),
            max_entries: over.max_entries.or(self.max_entries),
            max_bytes: over.max_bytes.or(self.max_bytes),
            max_value_bytes: over.max_value_bytes.or(self.max_value_bytes),
            circuit_breaker: over.circuit_breaker.or(self.circuit_breaker),
            breaker_failures: over.breaker_failures.or(self.breaker_failures),
            breaker_cool_down: over.breaker_cool_down.or(self.breaker_cool_down),
        }
    }

    /// Applies the in-process settings to `builder` (everything but the
    /// store; see [`build`](Self::build)).
    pub fn apply<V>(&self, mut builder: CacheBuilder<V>) -> CacheBuilder<V>
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
            max_value_bytes => max_value_bytes,
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
    /// if set, and applies every setting.
    ///
    /// Redis is connected to in the background
    /// ([`RedisStore::connect_lazy`](crate::redis::RedisStore::connect_lazy),
    /// [`RedisStore::connect_cluster_lazy`](crate::redis::RedisStore::connect_cluster_lazy)
    /// for `redis_cluster_urls`, or
    /// [`RedisStore::connect_sentinel_lazy`](crate::redis::RedisStore::connect_sentinel_lazy)
    /// for `redis_sentinel_master` and `redis_sentinel_urls`): the cache is built even while Redis is
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
    /// `redis` feature, or a setting the builder refuses. With
    /// `redis_cluster_urls`, also when no node of the cluster answers:
    /// then [`store_error`](ConfigError::store_error) is of kind
    /// [`Unavailable`](crate::StoreErrorKind::Unavailable) or
    /// [`Timeout`](crate::StoreErrorKind::Timeout) (worth retrying). No
    /// message shows a password.
    pub async fn build<V>(&self, name: &str) -> Result<Cache<V>, ConfigError>
    where
        V: serde::Serialize + serde::de::DeserializeOwned + Clone + Send + Sync + 'static,
    {
        let builder = self.apply(Cache::<V>::builder(name));
        let builder = self.with_store(builder).await?;
        builder.build()
    }

    /// The Redis URL, if set to something.
    fn redis_url_set(&self) -> Option<&str> {
        self.redis_url
            .as_deref()
            .filter(|url| !url.trim().is_empty())
    }

    /// The cluster URLs, if any is set.
    fn redis_cluster_urls_set(&self) -> Option<Vec<String>> {
        non_empty(self.redis_cluster_urls.as_deref())
    }

    /// The Sentinel master's name and the sentinels' URLs, if either is
    /// set; an error if only one is, or if the master's credentials are
    /// set without them.
    fn redis_sentinel_set(&self) -> Result<Option<(&str, Vec<String>)>, ConfigError> {
        let name = self
            .redis_sentinel_master
            .as_deref()
            .map(str::trim)
            .filter(|name| !name.is_empty());
        let urls = non_empty(self.redis_sentinel_urls.as_deref());
        let credentials = [&self.redis_master_user, &self.redis_master_password]
            .iter()
            .any(|field| field.as_deref().is_some_and(|v| !v.is_empty()));
        match (name, urls) {
            (Some(name), Some(urls)) => Ok(Some((name, urls))),
            (Some(_), None) => Err(ConfigError::new(
                "redis_sentinel_master is set but redis_sentinel_urls is not: name the sentinels",
            )),
            (None, Some(_)) => Err(ConfigError::new(
                "redis_sentinel_urls is set but redis_sentinel_master is not: name the master",
            )),
            (None, None) if credentials => Err(ConfigError::new(
                "redis_master_user and redis_master_password are used only with \
                 redis_sentinel_master and redis_sentinel_urls",
            )),
            (None, None) => Ok(None),
        }
    }

    #[cfg(feature = "redis")]
    async fn with_store<V>(&self, builder: CacheBuilder<V>) -> Result<CacheBuilder<V>, ConfigError>
    where
        V: serde::Serialize + serde::de::DeserializeOwned + Clone + Send + Sync + 'static,
    {
        let redis = self.redis_config();
        let sentinel = self.redis_sentinel_set()?;
        let other = self.redis_url_set().is_some() || self.redis_cluster_urls_set().is_some();
        if sentinel.is_some() && other {
            return Err(ConfigError::new(
                "set redis_sentinel_urls or redis_url / redis_cluster_urls, not both",
            ));
        }
        if let Some((name, urls)) = sentinel {
            let store = crate::redis::RedisStore::connect_sentinel_lazy(name, &urls, redis)
                .map_err(|e| {
                    let urls: Vec<String> = urls.iter().map(|url| redact_url(url)).collect();
                    ConfigError::from_store(
                        format!("redis_sentinel_master {name:?}, redis_sentinel_urls {urls:?}"),
                        e,
                    )
                })?;
            return Ok(builder.store(store));
        }
        let store = match (self.redis_url_set(), self.redis_cluster_urls_set()) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::new(
                    "set redis_url or redis_cluster_urls, not both",
                ))
            }
            (Some(url), None) => {
                crate::redis::RedisStore::connect_lazy(url, redis).map_err(|e| {
                    ConfigError::from_store(format!("redis_url {}", redact_url(url)), e)
                })?
            }
            (None, Some(urls)) => crate::redis::RedisStore::connect_cluster_lazy(&urls, redis)
                .map_err(|e| {
                    let urls: Vec<String> = urls.iter().map(|url| redact_url(url)).collect();
                    ConfigError::from_store(format!("redis_cluster_urls {urls:?}"), e)
                })?,
            (None, None) => return Ok(builder),
        };
        Ok(builder.store(store))
    }

    /// The Redis store's settings this config names, the others at their
    /// defaults: `store_timeout` → `op_timeout`, `redis_connect_timeout`,
    /// `redis_health_interval`, `redis_tcp_keepalive` (zero: off) and the
    /// Sentinel master's credentials.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let config = corral::CacheConfig::from_toml(
    ///     "store_timeout = \"250ms\"\nredis_tcp_keepalive = \"0s\"",
    /// )
    /// .expect("valid");
    /// let redis = config.redis_config();
    /// assert_eq!(redis.op_timeout, Duration::from_millis(250));
    /// assert_eq!(redis.tcp_keepalive, None);
    /// assert_eq!(redis.health_interval, Duration::from_secs(1));
    /// ```
    #[cfg(feature = "redis")]
    pub fn redis_config(&self) -> crate::redis::RedisConfig {
        let mut redis = crate::redis::RedisConfig::default();
        if let Some(timeout) = self.store_timeout {
            redis = redis.op_timeout(timeout);
        }
        if let Some(timeout) = self.redis_connect_timeout {
            redis = redis.connect_timeout(timeout);
        }
        if let Some(interval) = self.redis_health_interval {
            redis = redis.health_interval(interval);
        }
        if let Some(idle) = self.redis_tcp_keepalive {
            redis = redis.tcp_keepalive((!idle.is_zero()).then_some(idle));
        }
        if let Some(password) = self.redis_master_password.as_deref() {
            redis = redis.master_auth(self.redis_master_user.as_deref(), password);
        }
        redis
    }

    #[cfg(not(feature = "redis"))]
    async fn with_store<V>(
        &self,
        builder: CacheBuilder<V>,
    ) -> Result<CacheBuilder<V>, ConfigError> {
        if self.redis_url_set().is_some()
            || self.redis_cluster_urls_set().is_some()
            || self.redis_sentinel_set()?.is_some()
        {
            return Err(ConfigError::new(
                "a Redis URL is set but corral was built without the `redis` feature",
            ));
        }
        Ok(builder)
    }
}

/// Setters, one per field, named after it: `CacheConfig::default().ttl(..)`.
macro_rules! setters {
    ($($(#[$doc:meta])* $field:ident: $ty:ty),* $(,)?) => {
        impl CacheConfig {
            $(
                $(#[$doc])*
                #[must_use]
                pub fn $field(mut self, value: $ty) -> Self {
                    self.$field = Some(value);
                    self
                }
            )*
        }
    };
}

setters! {
    /// Sets [`l1`](Self::l1).
    l1: bool,
    /// Sets [`backplane`](Self::backplane).
    backplane: bool,
    /// Sets [`l1_lifetime`](Self::l1_lifetime).
    l1_lifetime: Duration,
    /// Sets [`ttl`](Self::ttl).
    ttl: Duration,
    /// Sets [`jitter`](Self::jitter).
    jitter: f64,
    /// Sets [`grace`](Self::grace).
    grace: Duration,
    /// Sets [`eager_refresh`](Self::eager_refresh).
    eager_refresh: f64,
    /// Sets [`fail_safe`](Self::fail_safe).
    fail_safe: Duration,
    /// Sets [`fill_timeout`](Self::fill_timeout).
    fill_timeout: Duration,
    /// Sets [`soft_timeout`](Self::soft_timeout).
    soft_timeout: Duration,
    /// Sets [`negative_ttl`](Self::negative_ttl).
    negative_ttl: Duration,
    /// Sets [`lease_ttl`](Self::lease_ttl).
    lease_ttl: Duration,
    /// Sets [`store_timeout`](Self::store_timeout).
    store_timeout: Duration,
    /// Sets [`redis_connect_timeout`](Self::redis_connect_timeout).
    redis_connect_timeout: Duration,
    /// Sets [`redis_health_interval`](Self::redis_health_interval).
    redis_health_interval: Duration,
    /// Sets [`redis_tcp_keepalive`](Self::redis_tcp_keepalive) (zero: off).
    redis_tcp_keepalive: Duration,
    /// Sets [`max_entries`](Self::max_entries).
    max_entries: u64,
    /// Sets [`max_bytes`](Self::max_bytes).
    max_bytes: u64,
    /// Sets [`max_value_bytes`](Self::max_value_bytes).
    max_value_bytes: usize,
    /// Sets [`circuit_breaker`](Self::circuit_breaker).
    circuit_breaker: bool,
    /// Sets [`breaker_failures`](Self::breaker_failures).
    breaker_failures: u32,
    /// Sets [`breaker_cool_down`](Self::breaker_cool_down).
    breaker_cool_down: Duration,
}

impl CacheConfig {
    /// Sets [`redis_url`](Self::redis_url).
    #[must_use]
    pub fn redis_url(mut self, url: impl Into<String>) -> Self {
        self.redis_url = Some(url.into());
        self
    }

    /// Sets [`redis_cluster_urls`](Self::redis_cluster_urls).
    #[must_use]
    pub fn redis_cluster_urls(mut self, urls: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.redis_cluster_urls = Some(urls.into_iter().map(Into::into).collect());
        self
    }

    /// Sets [`redis_sentinel_master`](Self::redis_sentinel_master) and
    /// [`redis_sentinel_urls`](Self::redis_sentinel_urls).
    #[must_use]
    pub fn redis_sentinel(
        mut self,
        master: impl Into<String>,
        urls: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        self.redis_sentinel_master = Some(master.into());
        self.redis_sentinel_urls = Some(urls.into_iter().map(Into::into).collect());
        self
    }

    /// Sets [`redis_master_user`](Self::redis_master_user) (`None`: the
    /// default user) and [`redis_master_password`](Self::redis_master_password).
    #[must_use]
    pub fn redis_master_auth(mut self, user: Option<&str>, password: impl Into<String>) -> Self {
        self.redis_master_user = user.map(str::to_owned);
        self.redis_master_password = Some(password.into());
        self
    }
}

impl fmt::Debug for CacheConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut set = BTreeMap::new();
        if let Some(url) = &self.redis_url {
            set.insert("redis_url", redact_url(url));
        }
        if let Some(urls) = &self.redis_cluster_urls {
            let urls: Vec<String> = urls.iter().map(|url| redact_url(url)).collect();
            set.insert("redis_cluster_urls", format!("{urls:?}"));
        }
        if let Some(name) = &self.redis_sentinel_master {
            set.insert("redis_sentinel_master", format!("{name:?}"));
        }
        if let Some(urls) = &self.redis_sentinel_urls {
            let urls: Vec<String> = urls.iter().map(|url| redact_url(url)).collect();
            set.insert("redis_sentinel_urls", format!("{urls:?}"));
        }
        if let Some(user) = &self.redis_master_user {
            set.insert("redis_master_user", format!("{user:?}"));
        }
        if self.redis_master_password.is_some() {
            set.insert("redis_master_password", "***".to_owned());
        }
        let durations = [
            ("l1_lifetime", self.l1_lifetime),
            ("ttl", self.ttl),
            ("grace", self.grace),
            ("fail_safe", self.fail_safe),
            ("fill_timeout", self.fill_timeout),
            ("soft_timeout", self.soft_timeout),
            ("negative_ttl", self.negative_ttl),
            ("lease_ttl", self.lease_ttl),
            ("store_timeout", self.store_timeout),
            ("redis_connect_timeout", self.redis_connect_timeout),
            ("redis_health_interval", self.redis_health_interval),
            ("redis_tcp_keepalive", self.redis_tcp_keepalive),
            ("breaker_cool_down", self.breaker_cool_down),
        ];
        for (name, value) in durations {
            if let Some(value) = value {
                set.insert(name, format!("{value:?}"));
            }
        }
        let others = [
            ("l1", self.l1.map(|v| v.to_string())),
            ("backplane", self.backplane.map(|v| v.to_string())),
            ("jitter", self.jitter.map(|v| v.to_string())),
            ("eager_refresh", self.eager_refresh.map(|v| v.to_string())),
            ("max_entries", self.max_entries.map(|v| v.to_string())),
            ("max_bytes", self.max_bytes.map(|v| v.to_string())),
            (
                "max_value_bytes",
                self.max_value_bytes.map(|v| v.to_string()),
            ),
            (
                "circuit_breaker",
                self.circuit_breaker.map(|v| v.to_string()),
            ),
            (
                "breaker_failures",
                self.breaker_failures.map(|v| v.to_string()),
            ),
        ];
        for (name, value) in others {
            if let Some(value) = value {
                set.insert(name, value);
            }
        }
        f.debug_map().entries(set).finish()
    }
}

/// The URLs of `urls` that are not blank, trimmed; `None` if there are
/// none.
fn non_empty(urls: Option<&[String]>) -> Option<Vec<String>> {
    let urls: Vec<String> = urls
        .into_iter()
        .flatten()
        .map(|url| url.trim())
        .filter(|url| !url.is_empty())
        .map(str::to_owned)
        .collect();
    (!urls.is_empty()).then_some(urls)
}

/// The form a duration is written in, for error messages.
const DURATION_FORM: &str = r#"a duration with a unit (ms, s, m, h or d), like "60s""#;

/// Deserializes an optional duration written as a number and a unit.
fn duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Duration>, D::Error> {
    deserializer.deserialize_any(DurationVisitor).map(Some)
}

/// Reads a duration string; any other type is an error that shows the
/// form expected (`ttl = 60` → "expected a duration with a unit ... like
/// "60s"").
struct DurationVisitor;

impl serde::de::Visitor<'_> for DurationVisitor {
    type Value = Duration;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(DURATION_FORM)
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Duration, E> {
        parse_duration(text).map_err(E::custom)
    }
}

/// The key of the `key = value` line of TOML `text` that holds byte
/// `offset`, if it is one.
fn key_at(text: &str, offset: usize) -> Option<String> {
    let start = text.get(..offset)?.rfind('\n').map_or(0, |at| at + 1);
    let line = text.get(start..)?.lines().next()?;
    let (key, _) = line.split_once('=')?;
    let key = key.trim().trim_matches('"');
    (!key.is_empty() && !key.starts_with('[')).then(|| key.to_owned())
}

/// `message` on one line.
fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Parses `"250ms"`, `"1.5s"`, `"5m"`, `"2h"`, `"1d"`.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| {
            format!(r#"duration {text:?} has no unit (ms, s, m, h or d), like "60s""#)
        })?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("duration {text:?}: {number:?} is not a number"))?;
    let seconds = match unit.trim() {
        "ms" => number / 1000.0,
        "s" => number,
        "m" => number * 60.0,
        "h" => number * 3600.0,
        "d" => number * 86_400.0,
        other => {
            return Err(format!(
                "duration {text:?}: unknown unit {other:?} (ms, s, m, h or d)"
            ))
        }
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("duration {text:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_need_a_unit() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration(" 2h "), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("1d"), Ok(Duration::from_secs(86_400)));
        assert!(parse_duration("60").is_err());
        assert!(parse_duration("5 weeks").is_err());
        assert!(parse_duration("s").is_err());
    }
}

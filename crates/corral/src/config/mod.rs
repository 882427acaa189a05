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
mod fields;
mod table;

use std::borrow::Borrow;
use std::time::Duration;

pub use self::caches::Caches;
use self::env::section_key;
pub use self::fields::CacheConfig;
use crate::cache::builder::CacheBuilder;
use crate::cache::Cache;
use crate::data::error::ConfigError;

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
        let (this, mut over) = (self.normalized(), over.normalized());
        let sections = std::mem::take(&mut over.cache);
        let mut this = sections
            .into_iter()
            .fold(this, |this, (name, section)| this.cache(&name, section));
        let cache = std::mem::take(&mut this.cache);
        over.fields_over(this, cache)
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

    /// Sets [`redis_sentinel_master`](Self::redis_sentinel_master) and
    /// [`redis_sentinel_urls`](Self::redis_sentinel_urls).
    #[must_use]
    pub fn redis_sentinel(
        self,
        master: impl Into<String>,
        urls: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        self.redis_sentinel_master(master).redis_sentinel_urls(urls)
    }

    /// Sets [`redis_master_user`](Self::redis_master_user) (`None`: the
    /// default user) and [`redis_master_password`](Self::redis_master_password).
    #[must_use]
    pub fn redis_master_auth(mut self, user: Option<&str>, password: impl Into<String>) -> Self {
        self.redis_master_user = user.map(str::to_owned);
        self.redis_master_password(password)
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
            if let Some(field) = section.fields_set().find(|field| field.process) {
                return Err(ConfigError::new(format!(
                    "cache {name:?}: {} is set for the whole process, not per cache: \
                     the caches of a process share one store",
                    field.name
                )));
            }
        }
        Ok(())
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

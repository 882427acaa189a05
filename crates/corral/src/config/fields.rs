//! The one table of [`CacheConfig`]'s fields: a line each, from which
//! `settings!` (`table.rs`) writes the field, its TOML key, its
//! `CORRAL_*` variable, whether it is process-wide, its part of
//! `overlay`, how it reaches the builder, its setter and its `Debug`.
//!
//! # Adding a setting
//!
//! Add one line below, under its doc comment:
//!
//! ```text
//! /// How long ... (the field's documentation).
//! my_setting: Duration => builder,
//! ```
//!
//! - `=> builder` hands the value to `CacheBuilder::my_setting`, which
//!   must exist and take the field's type (or what it converts into).
//!   `=> with(my_setting_of)` calls `CacheBuilder::my_setting_of(config)`
//!   instead, written below: for a builder setter of another name or
//!   shape, or a setting read together with others. `=> store` marks a
//!   setting of the process's one store, read where the store is opened
//!   (`caches.rs`), never set per cache.
//! - Add `as url` for a URL (its passwords hidden by `Debug`) or
//!   `as secret` for a value `Debug` never shows.
//! - The type is written as one name, with at most one type argument
//!   (`Duration`, `Vec<u32>`): import it here. A type no field has yet
//!   needs its [`Setting`](super::table::Setting) (how a variable holding
//!   it is read, how `Debug` shows it) and, for the tests, its `Example`
//!   values (in this file's tests).
//!
//! Nothing else: the tests of this module check every field of the table
//! from TOML, from a variable (global and per cache), with its setter,
//! in `Debug`, and that it reaches the builder or the store.

use std::time::Duration;

use serde::Deserialize;

use super::table::settings;
use crate::cache::builder::{CacheBuilder, Capacity};
use crate::data::compression::Compression;
use crate::data::tracking::Tracking;
use crate::tier::breaker::BreakerSettings;

settings! {
    /// A cache's settings — or a process's, with a section per cache
    /// ([`cache`](Self::cache)) — as read from TOML or the environment, or
    /// set in code with the setters named after the fields.
    ///
    /// `Debug` never shows the Redis URL's password, whatever bytes it
    /// holds.
    #[derive(Clone, Default, PartialEq, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[non_exhaustive]
    pub struct CacheConfig {
        /// A Redis URL (`redis://[user:password@]host:port/[db]`): values
        /// are shared through it. Unset: in process only.
        redis_url: String as url => store,
        /// Redis Cluster node URLs (instead of `redis_url`).
        redis_cluster_urls: Vec<String> as url => store,
        /// The name of a Redis Sentinel group's master (instead of
        /// `redis_url`; with `redis_sentinel_urls`): values are shared
        /// through whichever server is its master, followed across
        /// failovers.
        redis_sentinel_master: String => store,
        /// The URLs of the sentinels watching `redis_sentinel_master`
        /// (`redis://[user:password@]host:port`; with
        /// `redis_sentinel_master`).
        redis_sentinel_urls: Vec<String> as url => store,
        /// The user that authenticates to the Sentinel group's master (with
        /// `redis_master_password`; unset: the default user).
        redis_master_user: String => store,
        /// The password that authenticates to the Sentinel group's master
        /// (the sentinels' own passwords are in their URLs). Never shown by
        /// `Debug` or in errors.
        redis_master_password: String as secret => store,
        /// With a store, also keep decoded values in process (the L1;
        /// default: on with a store that has a backplane, see
        /// `CacheBuilder::l1`).
        l1: bool => builder,
        /// Listen to the store's backplane (default on).
        backplane: bool => builder,
        /// How long an L1 copy lives at most.
        l1_lifetime: Duration => builder,
        /// How long a value is fresh.
        ttl: Duration => builder,
        /// Random spread of TTLs, a fraction in `[0, 1]`.
        jitter: f64 => builder,
        /// How long past its TTL a value is served stale while one refresh
        /// runs.
        grace: Duration => builder,
        /// The fraction of the TTL after which a background refresh starts.
        eager_refresh: f64 => builder,
        /// How long past its TTL a value is kept to serve if the fill fails.
        fail_safe: Duration => builder,
        /// The hard limit of one fill.
        fill_timeout: Duration => builder,
        /// With a fail-safe value at hand, how long callers wait for a fill.
        soft_timeout: Duration => builder,
        /// How long a "not found" is cached.
        negative_ttl: Duration => builder,
        /// The fill lease's time to live (renewed while a fill runs).
        lease_ttl: Duration => builder,
        /// The bound of one store call.
        store_timeout: Duration => builder,
        /// The bound of one connection attempt to Redis
        /// ([`RedisConfig::connect_timeout`](crate::redis::RedisConfig::connect_timeout)).
        redis_connect_timeout: Duration => store,
        /// How often the Redis command and subscriber connections are
        /// checked (`ROLE`, `PING`); one that gives no answer within
        /// `store_timeout` is replaced
        /// ([`RedisConfig::health_interval`](crate::redis::RedisConfig::health_interval)).
        redis_health_interval: Duration => store,
        /// TCP keepalive on the Redis connections: the first probe after
        /// this long without traffic; `"0s"` turns it off
        /// ([`RedisConfig::tcp_keepalive`](crate::redis::RedisConfig::tcp_keepalive)).
        redis_tcp_keepalive: Duration => store,
        /// How Redis client tracking brings other clients' changes to the
        /// L1: `"keys"` (the default: the keys each process read),
        /// `"bcast"` (every change of the namespace, to every process) or
        /// `"off"` (the backplane alone); `true` and `false` read as
        /// `"keys"` and `"off"`
        /// ([`RedisConfig::tracking`](crate::redis::RedisConfig::tracking)).
        redis_tracking: Tracking => store,
        /// The in-process bound, in entries
        /// ([`Capacity::Entries`](crate::cache::builder::Capacity::Entries)).
        max_entries: u64 => with(capacity_of),
        /// The in-process bound, in bytes of encoded values, instead of
        /// entries ([`Capacity::Bytes`](crate::cache::builder::Capacity::Bytes);
        /// wins when both are set).
        max_bytes: u64 => with(capacity_of),
        /// The largest encoded value stored.
        max_value_bytes: usize => builder,
        /// How values are compressed in the shared store (feature
        /// `compression`): `"none"`, `"lz4"`, `"zstd"` or `"zstd:<level>"`,
        /// optionally followed by `",min_bytes=<bytes>"` (default none).
        compression: Compression => builder,
        /// Whether the store's circuit breaker is on (default on with a
        /// store).
        circuit_breaker: bool => with(breaker_of),
        /// Consecutive failed store calls that open the breaker (default 5).
        breaker_failures: u32 => with(breaker_of),
        /// How long an open breaker skips the store (default 5 s).
        breaker_cool_down: Duration => with(breaker_of),
        /// The schema version of the values
        /// ([`CacheBuilder::version`]; default 0).
        version: u32 => builder,
        /// Versions whose namespaces this cache's invalidations also reach,
        /// during a rolling deploy that changes `version`
        /// ([`CacheBuilder::also_invalidate_versions`]). From the
        /// environment: comma-separated
        /// (`CORRAL_USERS_ALSO_INVALIDATE_VERSIONS=2`).
        also_invalidate_versions: Vec<u32> => builder,
        /// How long a fail-safe value is re-cached after a failed fill
        /// ([`CacheBuilder::fail_safe_throttle`]; default 30 s).
        fail_safe_throttle: Duration => builder,
        /// How often a process waiting for another's fill re-checks the
        /// store without a notification ([`CacheBuilder::poll_interval`];
        /// default 250 ms).
        poll_interval: Duration => builder,
        /// How long tag versions are kept in the store after their last use
        /// ([`CacheBuilder::tag_retention`]; default 7 days).
        tag_retention: Duration => builder,
        /// At most this many background refreshes at once
        /// ([`CacheBuilder::refresh_limit`]; default 16).
        refresh_limit: usize => builder,
        /// How often counters are copied into the `metrics` recorder
        /// (feature `metrics`; `"0s"`: only on `Cache::export_metrics`;
        /// default 1 s; without the feature: no effect).
        metrics_interval: Duration => with(metrics_interval_of),
        /// Whether traces show raw keys instead of their hash
        /// ([`CacheBuilder::trace_raw_keys`]; default no).
        trace_raw_keys: bool => builder,
    }
}

/// How the fields marked `with(..)` reach the builder, given the whole
/// config (called when the field is set).
impl<V> CacheBuilder<V>
where
    V: Clone + Send + Sync + 'static,
{
    /// The in-process bound: in bytes if `max_bytes` is set (it wins), in
    /// entries otherwise.
    fn capacity_of(self, config: &CacheConfig) -> Self {
        match (config.max_bytes, config.max_entries) {
            (Some(bytes), _) => self.capacity(Capacity::Bytes(bytes)),
            (None, Some(entries)) => self.capacity(Capacity::Entries(entries)),
            (None, None) => self,
        }
    }

    /// The circuit breaker: off if `circuit_breaker` is false; else, if
    /// `breaker_failures` or `breaker_cool_down` is set, those over the
    /// defaults; else the builder's.
    fn breaker_of(self, config: &CacheConfig) -> Self {
        let defaults = BreakerSettings::default();
        match (
            config.circuit_breaker,
            config.breaker_failures,
            config.breaker_cool_down,
        ) {
            (Some(false), _, _) => self.no_circuit_breaker(),
            (_, None, None) => self,
            (_, failures, cool_down) => self.circuit_breaker(
                failures.unwrap_or(defaults.failures),
                cool_down.unwrap_or(defaults.cool_down),
            ),
        }
    }

    /// The metrics export's interval (zero: only on demand); without the
    /// `metrics` feature, nothing.
    fn metrics_interval_of(self, config: &CacheConfig) -> Self {
        #[cfg(feature = "metrics")]
        return self.metrics_interval(config.metrics_interval);
        #[cfg(not(feature = "metrics"))]
        {
            let _ = config;
            self
        }
    }
}

#[cfg(test)]
mod tests {
    use self::examples::Sample;
    use super::{CacheConfig, FIELDS};
    use crate::cache::Cache;

    /// Sample values of each type, written in TOML and in a variable.
    pub(super) mod examples {
        use std::time::Duration;

        /// One sample value of one field: the config its setter makes, and the
        /// same value written in TOML (`ttl = "1500ms"`) and in a variable
        /// (`1500ms`).
        #[derive(Debug)]
        pub(in crate::config) struct Sample {
            pub(in crate::config) field: &'static str,
            pub(in crate::config) toml: String,
            pub(in crate::config) var: String,
            pub(in crate::config) set: crate::config::CacheConfig,
        }

        /// Sample values of a field's type, written in TOML and in a variable;
        /// at least one of them differs from every default of the builder.
        impl Sample {
            /// The variable `{prefix}{FIELD}` and its value.
            pub(in crate::config) fn var(&self, prefix: &str) -> (String, &str) {
                let name = format!("{prefix}{}", self.field.to_ascii_uppercase());
                (name, &self.var)
            }
        }

        pub(in crate::config) trait Example: Sized {
            fn examples() -> Vec<Self>;
            fn toml(&self) -> String;
            fn var(&self) -> String;
        }

        /// Numbers: written the same way in TOML and in a variable.
        macro_rules! numbers {
            ($($ty:ty = $value:expr;)*) => {$(
                impl Example for $ty {
                    fn examples() -> Vec<Self> {
                        vec![$value]
                    }
                    fn toml(&self) -> String {
                        self.to_string()
                    }
                    fn var(&self) -> String {
                        self.to_string()
                    }
                }
            )*};
        }

        numbers! {
            f64 = 0.25;
            u32 = 7;
            u64 = 7;
            usize = 7;
        }

        impl Example for bool {
            fn examples() -> Vec<Self> {
                vec![true, false]
            }
            fn toml(&self) -> String {
                self.to_string()
            }
            fn var(&self) -> String {
                if *self { "on" } else { "off" }.to_owned()
            }
        }

        impl Example for Duration {
            fn examples() -> Vec<Self> {
                vec![Duration::from_millis(1500)]
            }
            fn toml(&self) -> String {
                format!("\"{}ms\"", self.as_millis())
            }
            fn var(&self) -> String {
                format!("{}ms", self.as_millis())
            }
        }

        impl Example for String {
            fn examples() -> Vec<Self> {
                vec!["redis://127.0.0.1:7/".to_owned()]
            }
            fn toml(&self) -> String {
                format!("{self:?}")
            }
            fn var(&self) -> String {
                self.clone()
            }
        }

        impl Example for Vec<String> {
            fn examples() -> Vec<Self> {
                vec![vec![
                    "redis://127.0.0.1:7/".to_owned(),
                    "redis://127.0.0.1:8/".to_owned(),
                ]]
            }
            fn toml(&self) -> String {
                format!("{self:?}")
            }
            fn var(&self) -> String {
                self.join(", ")
            }
        }

        impl Example for Vec<u32> {
            fn examples() -> Vec<Self> {
                vec![vec![7, 8]]
            }
            fn toml(&self) -> String {
                format!("{self:?}")
            }
            fn var(&self) -> String {
                self.iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        }

        impl Example for crate::data::tracking::Tracking {
            fn examples() -> Vec<Self> {
                use crate::data::tracking::Tracking;
                vec![Tracking::Broadcast, Tracking::Off]
            }
            fn toml(&self) -> String {
                format!("\"{self}\"")
            }
            fn var(&self) -> String {
                self.to_string()
            }
        }

        impl Example for crate::data::compression::Compression {
            fn examples() -> Vec<Self> {
                vec![crate::data::compression::Compression::zstd(5).min_bytes(2048)]
            }
            fn toml(&self) -> String {
                format!("\"{self}\"")
            }
            fn var(&self) -> String {
                self.to_string()
            }
        }
    }

    /// The samples of every field, each field having at least one.
    fn samples() -> Vec<Sample> {
        let samples = CacheConfig::samples();
        for field in FIELDS {
            assert!(
                samples.iter().any(|sample| sample.field == field.name),
                "{} has no sample",
                field.name
            );
        }
        samples
    }

    fn is_process(field: &str) -> bool {
        FIELDS
            .iter()
            .any(|known| known.name == field && known.process)
    }

    #[test]
    fn every_field_is_read_from_toml_and_a_variable_as_its_setter_sets_it() {
        for sample in samples() {
            let (field, set) = (sample.field, &sample.set);
            assert_eq!(set.fields_set().count(), 1, "{field}: {set:?}");
            let from_toml = CacheConfig::from_toml(&sample.toml);
            assert_eq!(from_toml.as_ref(), Ok(set), "{}", sample.toml);
            let (name, var) = sample.var("CORRAL_");
            let from_var = CacheConfig::from_vars("CORRAL_", [(name.as_str(), var)]);
            assert_eq!(from_var.as_ref(), Ok(set), "{name}={var}");
            let shown = format!("{set:?}");
            assert!(shown.contains(&format!("\"{field}\": ")), "{shown}");
        }
    }

    /// How a builder shows its settings.
    fn builder_shown(config: &CacheConfig) -> String {
        format!("{:?}", config.apply(Cache::<String>::builder("users")))
    }

    #[test]
    fn every_field_but_the_stores_reaches_the_builder() {
        let samples = samples();
        let default = builder_shown(&CacheConfig::default());
        for field in FIELDS.iter().filter(|field| !field.process) {
            if cfg!(not(feature = "metrics")) && field.name == "metrics_interval" {
                continue;
            }
            let reached = samples
                .iter()
                .filter(|sample| sample.field == field.name)
                .any(|sample| builder_shown(&sample.set) != default);
            assert!(reached, "{} does not reach the builder", field.name);
        }
    }

    /// A store field changes the store's settings, opens a store, or has
    /// the store refused naming it.
    #[cfg(feature = "redis")]
    #[tokio::test]
    async fn every_store_field_reaches_the_store() {
        // A field reaches the store if one of its samples changes what the
        // store is made with (a flag's other sample may be the default).
        let default = CacheConfig::default().redis_config();
        let mut reached = std::collections::BTreeMap::new();
        for Sample { field, set, .. } in samples() {
            if !is_process(field) {
                continue;
            }
            let this = set.redis_config() != default
                || match set.caches() {
                    Ok(caches) => caches.store().is_some(),
                    Err(error) => error.to_string().contains(field),
                };
            *reached.entry(field).or_insert(false) |= this;
        }
        for (field, reached) in reached {
            assert!(reached, "{field} does not reach the store");
        }
    }

    #[test]
    fn every_field_but_the_stores_is_set_per_cache() {
        for sample in samples() {
            let (field, toml) = (sample.field, &sample.toml);
            let (name, var) = sample.var("CORRAL_USERS_");
            let from_var = CacheConfig::from_vars("CORRAL_", [(name.as_str(), var)]);
            let from_toml = CacheConfig::from_toml(&format!("[cache.users]\n{toml}"));
            if is_process(field) {
                for error in [from_var.expect_err(&name), from_toml.expect_err(toml)] {
                    let message = error.to_string();
                    assert!(message.contains(field), "{message}");
                    assert!(message.contains("whole process"), "{message}");
                }
                continue;
            }
            for config in [from_var.expect(&name), from_toml.expect(toml)] {
                assert_eq!(config.for_cache("users"), sample.set, "{field}");
                assert_eq!(
                    config.for_cache("orders"),
                    CacheConfig::default(),
                    "{field}"
                );
            }
        }
    }
}

//! The setters of [`CacheConfig`], one per field, and its `Debug`, which
//! never shows a password.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use super::CacheConfig;
use crate::redact::redact_url;

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
    /// Sets [`compression`](Self::compression).
    compression: crate::Compression,
    /// Sets [`circuit_breaker`](Self::circuit_breaker).
    circuit_breaker: bool,
    /// Sets [`breaker_failures`](Self::breaker_failures).
    breaker_failures: u32,
    /// Sets [`breaker_cool_down`](Self::breaker_cool_down).
    breaker_cool_down: Duration,
    /// Sets [`version`](Self::version).
    version: u32,
    /// Sets [`also_invalidate_versions`](Self::also_invalidate_versions).
    also_invalidate_versions: Vec<u32>,
    /// Sets [`fail_safe_throttle`](Self::fail_safe_throttle).
    fail_safe_throttle: Duration,
    /// Sets [`poll_interval`](Self::poll_interval).
    poll_interval: Duration,
    /// Sets [`tag_retention`](Self::tag_retention).
    tag_retention: Duration,
    /// Sets [`refresh_limit`](Self::refresh_limit).
    refresh_limit: usize,
    /// Sets [`metrics_interval`](Self::metrics_interval) (zero: only on
    /// `Cache::export_metrics`).
    metrics_interval: Duration,
    /// Sets [`trace_raw_keys`](Self::trace_raw_keys).
    trace_raw_keys: bool,
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
            ("fail_safe_throttle", self.fail_safe_throttle),
            ("poll_interval", self.poll_interval),
            ("tag_retention", self.tag_retention),
            ("metrics_interval", self.metrics_interval),
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
            ("compression", self.compression.map(|v| v.to_string())),
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
            ("version", self.version.map(|v| v.to_string())),
            (
                "also_invalidate_versions",
                self.also_invalidate_versions
                    .as_ref()
                    .map(|v| format!("{v:?}")),
            ),
            ("refresh_limit", self.refresh_limit.map(|v| v.to_string())),
            ("trace_raw_keys", self.trace_raw_keys.map(|v| v.to_string())),
        ];
        for (name, value) in others {
            if let Some(value) = value {
                set.insert(name, value);
            }
        }
        let mut map = f.debug_map();
        map.entries(set);
        for (name, section) in &self.cache {
            map.entry(&format_args!("cache.{name}"), section);
        }
        map.finish()
    }
}

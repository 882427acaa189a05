//! [`Caches`]: the caches of one process built from one config, on the one
//! store the config names; and how that store is made.

use std::fmt;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::CacheConfig;
use crate::cache::builder::CacheBuilder;
use crate::cache::Cache;
use crate::data::error::ConfigError;
#[cfg(feature = "redis")]
use crate::redact::redact_url;
use crate::store::Store;

/// The caches of a process, built from one [`CacheConfig`] on **one**
/// store: the store the config names is opened once, by
/// [`CacheConfig::caches`], and every cache built here shares it (its
/// connections, health checks and read memory). Each cache gets the
/// global settings overlaid with its own section
/// ([`CacheConfig::for_cache`]). Cheap to clone (the clones share the
/// store).
///
/// On Redis, a process then holds **one command connection** (one per
/// master on a cluster) and, once a cache listens to the backplane (the
/// default), **one subscriber connection** (one per node it subscribes on
/// a cluster) — whatever the number of caches; on a standalone server,
/// reads that overlap also open up to two connections of their own for
/// their batches (see [`RedisStore`](crate::RedisStore), "Round trips and
/// timeouts"). Connections per replica: 2 to 4; for a fleet of N
/// replicas: up to 4N.
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use corral::CacheConfig;
///
/// // CORRAL_REDIS_URL=redis://cache:6379/ CORRAL_TTL=5m CORRAL_USERS_TTL=1m
/// let caches = CacheConfig::from_env()?.caches()?;
/// let users = caches.build::<String>("users")?; // TTL 1 minute
/// let orders = caches.build::<u64>("orders")?; // TTL 5 minutes, same store
/// # let _ = (users, orders);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Caches {
    config: CacheConfig,
    store: Option<Arc<dyn Store>>,
}

impl Caches {
    /// Caches on `store` (`None`: in process only), with `config`'s
    /// settings; the config's own store settings are not used.
    pub fn on_store(config: CacheConfig, store: Option<Arc<dyn Store>>) -> Self {
        Self { config, store }
    }

    /// The builder of cache `name`: its settings
    /// ([`CacheConfig::for_cache`]) applied and the shared store attached.
    /// Set what only code can (a [`codec`](CacheBuilder::codec), a
    /// [`fill_budget`](CacheBuilder::fill_budget), a
    /// [`clock`](CacheBuilder::clock)) before [`build`](CacheBuilder::build).
    pub fn builder<V>(&self, name: &str) -> CacheBuilder<V>
    where
        V: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
    {
        let builder = self.config.for_cache(name).apply(Cache::<V>::builder(name));
        match &self.store {
            Some(store) => builder.store(Arc::clone(store)),
            None => builder,
        }
    }

    /// Builds cache `name` ([`builder`](Self::builder), then
    /// [`build`](CacheBuilder::build)).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] for a setting the builder refuses (see
    /// [`CacheBuilder::build`]).
    pub fn build<V>(&self, name: &str) -> Result<Cache<V>, ConfigError>
    where
        V: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
    {
        self.builder(name).build()
    }

    /// The shared store, if the config names one.
    pub fn store(&self) -> Option<&Arc<dyn Store>> {
        self.store.as_ref()
    }

    /// The config the caches are built from.
    pub fn config(&self) -> &CacheConfig {
        &self.config
    }
}

impl fmt::Debug for Caches {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Caches")
            .field("config", &self.config)
            .field("store", &self.store)
            .finish()
    }
}

impl CacheConfig {
    /// Opens the store this config names (feature `redis`; none: the
    /// caches are in process only) and returns the handle that builds
    /// every cache of the process on it: one store, one set of connections,
    /// however many caches (see [`Caches`]). Redis is connected to in the
    /// background, as by [`build`](Self::build). Call it once per process,
    /// within a tokio runtime.
    ///
    /// # Errors
    ///
    /// As [`build`](Self::build), for the store's settings and for a
    /// cache's section that sets a process-wide field (a Redis URL or
    /// connection setting) or has sections of its own.
    pub fn caches(&self) -> Result<Caches, ConfigError> {
        self.check_sections()?;
        let store = self.open_store()?;
        Ok(Caches::on_store(self.clone(), store))
    }

    /// The store this config names, opened lazily; `None` when it names
    /// none.
    #[cfg(feature = "redis")]
    fn open_store(&self) -> Result<Option<Arc<dyn Store>>, ConfigError> {
        use crate::redis::RedisStore;
        let redis = self.redis_config();
        let sentinel = self.redis_sentinel_set()?;
        let other = self.redis_url_set().is_some() || self.redis_cluster_urls_set().is_some();
        if sentinel.is_some() && other {
            return Err(ConfigError::new(
                "set redis_sentinel_urls or redis_url / redis_cluster_urls, not both",
            ));
        }
        let named =
            |urls: &[String]| -> Vec<String> { urls.iter().map(|u| redact_url(u)).collect() };
        let (what, store) = if let Some((name, urls)) = sentinel {
            let what = format!(
                "redis_sentinel_master {name:?}, redis_sentinel_urls {:?}",
                named(&urls)
            );
            (what, RedisStore::connect_sentinel_lazy(name, &urls, redis))
        } else {
            match (self.redis_url_set(), self.redis_cluster_urls_set()) {
                (Some(_), Some(_)) => {
                    return Err(ConfigError::new(
                        "set redis_url or redis_cluster_urls, not both",
                    ))
                }
                (Some(url), None) => (
                    format!("redis_url {}", redact_url(url)),
                    RedisStore::connect_lazy(url, redis),
                ),
                (None, Some(urls)) => (
                    format!("redis_cluster_urls {:?}", named(&urls)),
                    RedisStore::connect_cluster_lazy(&urls, redis),
                ),
                (None, None) => return Ok(None),
            }
        };
        let store = store.map_err(|e| ConfigError::from_store(what, e))?;
        Ok(Some(Arc::new(store)))
    }

    #[cfg(not(feature = "redis"))]
    fn open_store(&self) -> Result<Option<Arc<dyn Store>>, ConfigError> {
        if self.redis_url_set().is_some()
            || self.redis_cluster_urls_set().is_some()
            || self.redis_sentinel_set()?.is_some()
        {
            return Err(ConfigError::new(
                "a Redis URL is set but corral was built without the `redis` feature",
            ));
        }
        Ok(None)
    }

    /// The Redis store's settings this config names, the others at their
    /// defaults: `store_timeout` → `op_timeout`, `redis_connect_timeout`,
    /// `redis_health_interval`, `redis_tcp_keepalive` (zero: off),
    /// `redis_tracking` and the Sentinel master's credentials.
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
        if let Some(tracking) = self.redis_tracking {
            redis = redis.tracking(tracking);
        }
        if let Some(password) = self.redis_master_password.as_deref() {
            redis = redis.master_auth(self.redis_master_user.as_deref(), password);
        }
        redis
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

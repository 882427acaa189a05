//! [`CacheBuilder::build`]: the settings checked, the tiers made, and the
//! cache attached to its store.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::Semaphore;

use super::{CacheBuilder, Capacity};
use crate::cache::Cache;
use crate::data::error::ConfigError;
use crate::data::key::valid_name;
use crate::state::inner::{Inner, InnerParts, Tiers};
use crate::store::{ChangeSink, Origin};
use crate::tier::breaker::Breaker;
use crate::tier::local::{LocalTier, TierClock};
use crate::tier::shared::SharedTier;
use crate::tier::ticker::TickedClock;

impl<V> CacheBuilder<V>
where
    V: Clone + Send + Sync + 'static,
{
    /// Builds the cache.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] for an invalid name, a zero TTL or timeout, a jitter
    /// outside `[0, 1]`, an eager-refresh fraction outside `(0, 1)`, a soft
    /// timeout not below the fill timeout, a zero capacity, a lease TTL
    /// under 30 ms, a circuit breaker with 0 failures or no cool-down, an
    /// `encryption` with more than 8 previous keys, or a
    /// [`Capacity::Bytes`] without a codec to weigh values.
    pub fn build(self) -> Result<Cache<V>, ConfigError> {
        let sizing = self.checked_sizing()?;
        let (namespace, also_invalidate) = self.namespaces();
        let cipher = match &self.encryption {
            Some(encryption) => Some(encryption.cipher(&namespace)?),
            None => None,
        };
        let mut rng = match self.seed {
            Some(seed) => fastrand::Rng::with_seed(seed),
            None => fastrand::Rng::new(),
        };
        let origin = Origin::new(rng.u64(..));
        let name: Arc<str> = self.name.into();
        let store = self.store.map(|store| {
            let breaker =
                (self.breaker).map(|settings| Arc::new(Breaker::new(Arc::clone(&name), settings)));
            SharedTier::new(store, breaker, self.policy.store_timeout)
        });
        let (listens, l1_lifetime) = (self.backplane, self.l1_lifetime);
        let mut coherent = false;
        let inner = Arc::new_cyclic(|weak: &Weak<Inner<V>>| {
            // Subscribed before the tiers exist, so that the default L1 is
            // made only where messages keep it coherent. Messages that come
            // before the cache is whole find no cache: nothing is cached yet.
            coherent = listens && subscribe(store.as_ref(), &namespace, weak);
            let l1_on = store.is_none() || self.l1_with_store.unwrap_or(coherent);
            let l1 = l1_on.then(|| {
                let clock = match self.clock {
                    Some(clock) => TierClock::Injected(clock),
                    None => TierClock::Coarse(TickedClock::new(&name)),
                };
                LocalTier::new(
                    sizing.estimated_items.min(1 << 24),
                    sizing.weight_capacity,
                    clock,
                    self.policy.eager_refresh,
                    l1_lifetime,
                    self.l1_shards,
                )
            });
            Inner::new(InnerParts {
                namespace,
                also_invalidate: also_invalidate.into(),
                name,
                schema: self.version,
                policy: self.policy.paired(),
                codec: self.codec,
                cipher,
                tiers: Tiers { l1, l2: store },
                origin,
                rng,
                weigh_by_bytes: sizing.weigh_by_bytes,
                refresh_limiter: self
                    .refresh_limiter
                    .unwrap_or_else(|| Arc::new(Semaphore::new(self.refresh_limit))),
                budget: self.budget,
            })
        });
        attach_to_store(&inner, listens, coherent, l1_lifetime.is_some());
        export_metrics(&inner, self.metrics_interval);
        Ok(Cache { inner })
    }

    /// The cache's namespace (`name:v<version>`) and those of the other
    /// versions its invalidations also reach, each once, its own left out.
    fn namespaces(&self) -> (Arc<str>, Vec<Arc<str>>) {
        let namespace: Arc<str> = format!("{}:v{}", self.name, self.version).into();
        let mut also_invalidate: Vec<Arc<str>> = Vec::new();
        for version in &self.also_invalidate_versions {
            let other: Arc<str> = format!("{}:v{version}", self.name).into();
            if *version != self.version && !also_invalidate.contains(&other) {
                also_invalidate.push(other);
            }
        }
        (namespace, also_invalidate)
    }

    /// Checks the name, the policy, the breaker and the capacity; the
    /// in-process tier's sizing.
    fn checked_sizing(&self) -> Result<Sizing, ConfigError> {
        if !valid_name(&self.name) {
            return Err(ConfigError::new(format!(
                "cache name {:?} must be 1 to 64 characters from A-Z a-z 0-9 _ - .",
                self.name
            )));
        }
        self.policy.validate()?;
        if let Some(breaker) = self.breaker {
            if breaker.failures == 0 || breaker.cool_down.is_zero() {
                return Err(ConfigError::new(
                    "circuit_breaker needs at least 1 failure and a cool-down greater than zero",
                ));
            }
        }
        let (estimated_items, weight_capacity, weigh_by_bytes) = match self.capacity {
            Capacity::Entries(0) | Capacity::Bytes(0) => {
                return Err(ConfigError::new("capacity must be greater than zero"));
            }
            Capacity::Entries(entries) => (
                usize::try_from(entries).unwrap_or(usize::MAX),
                entries,
                false,
            ),
            Capacity::Bytes(_) if self.codec.is_none() => {
                return Err(ConfigError::new(
                    "Capacity::Bytes weighs encoded values: set a codec (or a store)",
                ));
            }
            Capacity::Bytes(bytes) => (
                usize::try_from(bytes / 256)
                    .unwrap_or(usize::MAX)
                    .clamp(16, 1 << 20),
                bytes,
                true,
            ),
        };
        Ok(Sizing {
            estimated_items,
            weight_capacity,
            weigh_by_bytes,
        })
    }
}

/// How the in-process tier is sized.
struct Sizing {
    /// Entries it is expected to hold.
    estimated_items: usize,
    /// Its capacity, in entries or bytes.
    weight_capacity: u64,
    /// Whether entries weigh their encoded size (a capacity in bytes).
    weigh_by_bytes: bool,
}

/// Subscribes the cache being made (`weak`) to the messages of
/// `namespace` on `store`'s backplane, if it has one; whether it did.
fn subscribe<V: Clone + Send + Sync + 'static>(
    store: Option<&SharedTier>,
    namespace: &str,
    weak: &Weak<Inner<V>>,
) -> bool {
    store.is_some_and(|store| {
        let sink: Weak<dyn ChangeSink> = weak.clone();
        store.backplane(namespace, sink)
    })
}

/// Starts copying the cache's counters into the `metrics` recorder every
/// `interval` (feature `metrics`; `None`: only when asked).
fn export_metrics<V: Clone + Send + Sync + 'static>(
    inner: &Arc<Inner<V>>,
    interval: Option<Duration>,
) {
    #[cfg(feature = "metrics")]
    if let Some(interval) = interval {
        let weak = Arc::downgrade(inner);
        let name = Arc::clone(inner.name());
        crate::stats::export::spawn_exporter(&name, weak, interval, Inner::export_metrics);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (inner, interval);
}

/// Connects a cache built on a shared store to it, its sink attached
/// (`coherent`: the store has a backplane and the cache listens). Attaching
/// the sink subscribes the namespace: its L1 copies and tag versions are
/// kept current by the messages. A cache that does not listen subscribes
/// nothing now; its first waiter for another process's fill does
/// ([`Store::listen`](crate::store::Store::listen)).
fn attach_to_store<V: Clone + Send + Sync + 'static>(
    inner: &Arc<Inner<V>>,
    listens: bool,
    coherent: bool,
    l1_lifetime_set: bool,
) {
    let Some(store) = &inner.tiers().l2 else {
        return;
    };
    // Tag versions are remembered only while messages keep them current;
    // otherwise every check reads them from the store.
    inner.tags().set_remember(coherent);
    if listens {
        store.attach(inner.namespace());
    }
    if inner.tiers().l1.is_some() && !coherent && !l1_lifetime_set {
        tracing::warn!(
            cache = %inner.name(),
            "an L1 without a backplane and without l1_lifetime: a change made by \
             another process stays unseen here until the entry expires; set \
             CacheBuilder::l1_lifetime to bound it"
        );
    }
}

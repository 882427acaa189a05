//! The shared store as a cache calls it: every call through the cache's
//! circuit breaker and under its store timeout, wrapped once here and held
//! by everything that calls the store — reads, leaders and their leases,
//! batches, writes and tag versions.

use std::future::Future;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use crate::data::error::StoreError;
use tokio::time::Instant;

use crate::store::{Lease, Patience, Store, StoreKey};
use crate::tier::breaker::Breaker;
use crate::tier::call::Guarded;
use crate::tier::first_reads::FirstReads;
use crate::tier::pulse::Pulse;

/// A cache's shared store behind its guard. Clones share the store and the
/// breaker.
#[derive(Clone)]
pub(crate) struct SharedTier {
    store: Arc<dyn Store>,
    breaker: Option<Arc<Breaker>>,
    /// Whether the store answers, as this cache's calls see it.
    pulse: Arc<Pulse>,
    /// Whether the store bounds every call at least as tightly as the
    /// cache's store timeout itself (no timer of the cache's needed).
    bounded_by_store: bool,
    /// The cache's store timeout.
    store_timeout: Duration,
    /// What reads of keys the store did not recall found.
    first_reads: Arc<FirstReads>,
}

impl SharedTier {
    /// `store` behind `breaker` (none: calls always go through), each call
    /// bounded by `store_timeout`.
    pub(crate) fn new(
        store: Arc<dyn Store>,
        breaker: Option<Arc<Breaker>>,
        store_timeout: Duration,
    ) -> Self {
        let bounded_by_store = store
            .call_bound()
            .is_some_and(|bound| bound <= store_timeout);
        Self {
            store,
            breaker,
            pulse: Arc::new(Pulse::new()),
            bounded_by_store,
            store_timeout,
            first_reads: Arc::default(),
        }
    }

    /// Runs one call of the store (made with this tier's methods, e.g.
    /// `tier.call(tier.get(&key))`): refused at once while the breaker is
    /// open, failed as a timeout past the store timeout.
    ///
    /// Within [`patiently`](crate::store::patiently) (a flight's calls), the call waits while the
    /// store keeps answering other calls, and fails once it has been
    /// silent for the patience's `silence` (or at its `limit`).
    #[inline]
    pub(crate) fn call<T, F>(&self, call: F) -> Guarded<'_, F>
    where
        F: Future<Output = Result<T, StoreError>>,
    {
        Guarded::new(self.breaker.as_deref(), &self.pulse, self.timeout(), call)
    }

    /// The patience of a flight's store calls: a late answer beats a fill
    /// without a lease, or a fill whose answer cannot be kept, so they wait
    /// while the store answers, until it has been silent for as long as a
    /// lease lives (`lease_ttl`; less the silence so far, but at least the
    /// store timeout), and at most until the flight's `deadline`. Until the
    /// store has been silent that long, they probe an open breaker at once.
    pub(crate) fn patience(&self, lease_ttl: Duration, deadline: Instant) -> Patience {
        let left = lease_ttl.saturating_sub(self.pulse.silence());
        Patience {
            silence: left.max(self.store_timeout),
            limit: deadline.saturating_duration_since(Instant::now()),
            probe: !left.is_zero(),
        }
    }

    /// The cache's store timeout, or `None` when the store bounds every
    /// call at least as tightly itself.
    fn timeout(&self) -> Option<Duration> {
        (!self.bounded_by_store).then_some(self.store_timeout)
    }

    /// What reads of keys the store did not recall found: whether the
    /// next is best read plainly first.
    pub(crate) fn first_reads(&self) -> &FirstReads {
        &self.first_reads
    }

    /// Whether the store answers, as this cache's calls see it.
    pub(crate) fn pulse(&self) -> &Pulse {
        &self.pulse
    }

    /// The store was heard from outside any call (its subscription came
    /// back): the silence ends and an open breaker closes.
    pub(crate) fn heard(&self) {
        self.pulse.heard();
        if let Some(breaker) = &self.breaker {
            breaker.store_heard();
        }
    }

    /// Releases `lease` of `key` on a task of its own (a `Drop` cannot
    /// wait), if a runtime is at hand.
    pub(crate) fn release_later(&self, key: StoreKey, lease: Lease) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let store = self.clone();
        runtime.spawn(async move {
            let _ = store.call(store.release(&key, &lease)).await;
        });
    }

    /// The circuit breaker, if the cache has one.
    pub(crate) fn breaker(&self) -> Option<&Breaker> {
        self.breaker.as_deref()
    }
}

/// The store's methods make the calls [`SharedTier::call`] runs, and serve
/// what needs no guard (listening, attaching the backplane).
impl Deref for SharedTier {
    type Target = dyn Store;

    fn deref(&self) -> &Self::Target {
        &*self.store
    }
}

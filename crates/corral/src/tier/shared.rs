//! The shared store as a cache calls it: every call through the cache's
//! circuit breaker and under its store timeout, wrapped once here and held
//! by everything that calls the store — reads, leaders and their leases,
//! batches, writes and tag versions.

use std::future::Future;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use crate::data::error::StoreError;
use crate::store::{patiently, stretched, Store};
use crate::tier::breaker::{self, Breaker};
use crate::tier::pulse::Pulse;

/// A cache's shared store behind its guard. Clones share the store and the
/// breaker.
#[derive(Clone)]
pub(crate) struct SharedTier {
    store: Arc<dyn Store>,
    breaker: Option<Arc<Breaker>>,
    /// Whether the store answers, as this cache's calls see it.
    pulse: Arc<Pulse>,
    /// The cache's store timeout, or `None` when the store bounds every
    /// call at least as tightly itself (no timer of the cache's needed).
    timeout: Option<Duration>,
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
            timeout: (!bounded_by_store).then_some(store_timeout),
        }
    }

    /// Runs one call of the store (made with this tier's methods, e.g.
    /// `tier.call(tier.get(&key))`): refused at once while the breaker is
    /// open, failed as a timeout past the store timeout.
    #[inline]
    pub(crate) async fn call<T>(
        &self,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let timeout = self.timeout.map(stretched);
        breaker::guarded(self.breaker.as_deref(), &self.pulse, timeout, call).await
    }

    /// [`call`](Self::call) for a call whose caller waits up to `bound`
    /// for its answer if that is longer than the store timeout (a flight's
    /// lease request, version read or commit: a late answer beats a fill
    /// without a lease, or a fill whose answer cannot be kept). The store
    /// is told so too ([`patience`](crate::store::patience)).
    pub(crate) async fn call_within<T>(
        &self,
        bound: Duration,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        patiently(bound, self.call(call)).await
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

//! A granted lease, held by the flight that fills under it.

use std::time::Duration;

use crate::data::error::StoreError;
use crate::state::inner::Inner;
use crate::stats::Counters;
use tokio::time::Instant;

use crate::store::{Commit, Lease, LeaseRequest, Patience, StoreKey};
use crate::tier::shared::SharedTier;

/// A granted lease. Committing uses it up; dropping it unused (the fill
/// failed, panicked or timed out) releases it in the background so a
/// waiter elsewhere can take over at once instead of at the lease's lapse.
///
/// Boxed: a leader's future moves it from step to step, and each step
/// that holds it would otherwise hold its few hundred bytes.
pub(crate) struct LeaseGuard(Box<Held>);

/// What a [`LeaseGuard`] holds.
struct Held {
    store: SharedTier,
    key: StoreKey,
    lease: Lease,
    request: LeaseRequest,
    armed: bool,
}

impl LeaseGuard {
    /// Guards `lease` of `key`, granted by `store` as `request` asked.
    pub(crate) fn new(
        store: SharedTier,
        key: StoreKey,
        lease: Lease,
        request: LeaseRequest,
    ) -> Self {
        Self(Box::new(Held {
            store,
            key,
            lease,
            request,
            armed: true,
        }))
    }

    /// Commits `bytes` under the lease (fenced), counting the result;
    /// whether the store took them. A commit the store answered with an
    /// error wrote nothing (a value too large for it, say): the lease is
    /// released before this returns, so waiters in every process take over
    /// at once. Only a store that did not answer keeps it until it lapses.
    pub(super) async fn commit<V>(mut self, cache: &Inner<V>, bytes: &[u8], ttl: Duration) -> bool {
        let held = &mut *self.0;
        held.armed = false;
        let result = held
            .store
            .call(
                held.store
                    .commit(&held.key, &held.lease, bytes, ttl, cache.origin()),
            )
            .await;
        // A store that answered (an error, not an outage) wrote nothing.
        if result.as_ref().is_err_and(|error| !error.is_retryable()) {
            // Boxed: rare, and kept out of every leader's future.
            Box::pin(self.release()).await;
        }
        match result {
            Ok(Commit::Stored) => {
                Counters::bump(&cache.counters().commits);
                true
            }
            Ok(Commit::Refused) => {
                Counters::bump(&cache.counters().commits_refused);
                false
            }
            Err(error) => {
                cache.note_store_failure(&error, "value returned, not stored");
                false
            }
        }
    }

    /// Releases the lease unused and waits for the store's answer, so that
    /// the caller is answered only after waiters elsewhere can take over.
    pub(super) async fn release(mut self) {
        let held = &mut *self.0;
        held.armed = false;
        let _ = held
            .store
            .call(held.store.release(&held.key, &held.lease))
            .await;
    }
}

impl LeaseGuard {
    /// How long the lease lives unless renewed.
    pub(super) fn lease_ttl(&self) -> Duration {
        self.0.request.lease_ttl
    }

    /// The patience of the store calls made under this lease by a flight
    /// that ends at `deadline`.
    pub(super) fn patience(&self, deadline: Instant) -> Patience {
        self.0.store.patience(self.0.request.lease_ttl, deadline)
    }

    /// Renews the lease: whether this leader still owns it.
    pub(super) async fn renew(&self) -> Result<bool, StoreError> {
        let held = &*self.0;
        let renewing = held.store.renew(&held.key, &held.lease, &held.request);
        held.store.call(renewing).await
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        let held = &*self.0;
        if held.armed {
            held.store
                .release_later(held.key.clone(), held.lease.clone());
        }
    }
}

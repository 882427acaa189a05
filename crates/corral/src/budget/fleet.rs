//! The fleet side of a fill budget: permits that every process sharing a
//! store counts together.
//!
//! A fleet budget of N is N **slots** in the store, each one a lease of
//! the store's own kind on a key of the budget's namespace
//! (`<budget>.fill-budget:v1`, keys `permit:0` … `permit:N-1`). Taking a
//! permit is being granted one slot's lease; it lives for the cache's
//! lease TTL, is renewed while the fill runs, and is released when the fill
//! ends. So the store's lease rules hold for permits too:
//! - at most N fills run at once across every process (one lease per
//!   slot, granted atomically by the store);
//! - a holder that dies leaves its slot to lapse within one lease TTL;
//! - a release notifies the slot's listeners (Redis pub/sub; memcached
//!   listeners re-check with backoff), so waiting processes take it at
//!   once;
//! - a store that forgets a slot's lease lets one more fill start for
//!   at most the rest of that lease's life, never a hit of a wrong value.

use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt as _;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::FleetStore;
use crate::data::error::StoreError;
use crate::store::{Grant, Lease, LeaseRequest, Listener, Lookup, StoreKey};
use crate::tier::shared::SharedTier;

/// The slot keys of a fleet budget.
pub(crate) struct Slots {
    keys: Arc<[StoreKey]>,
    /// One taker per process at a time: a release wakes one task here, not
    /// every fill holding a local permit, and each asks the store in turn.
    turn: tokio::sync::Mutex<()>,
}

impl Slots {
    /// The `limit` slots of the budget named `name`.
    pub(crate) fn new(name: &str, limit: usize) -> Self {
        let namespace: Arc<str> = format!("{name}.fill-budget:v1").into();
        let keys = (0..limit.max(1))
            .map(|slot| StoreKey::new(Arc::clone(&namespace), &format!("permit:{slot}")))
            .collect();
        Self {
            keys,
            turn: tokio::sync::Mutex::new(()),
        }
    }

    /// Takes a free slot of `fleet`'s store as a lease living its
    /// `lease_ttl` (renewed while held), polled every `poll_interval`,
    /// waiting for one until `deadline`; `on_full` runs once
    /// if it has to wait (every slot held, or another fill of this process
    /// taking its turn). One fill of the process asks at a time.
    ///
    /// # Errors
    /// `Err(Some(error))`: the store failed (the caller fills on its local
    /// permit alone, as reads fail open); `Err(None)`: no slot came free
    /// before the deadline.
    pub(crate) async fn take(
        &self,
        fleet: FleetStore<'_>,
        deadline: Instant,
        on_full: impl FnOnce(),
    ) -> Result<FleetPermit, Option<StoreError>> {
        let FleetStore {
            store,
            lease_ttl,
            poll_interval,
        } = fleet;
        let mut on_full = Some(on_full);
        let request = LeaseRequest {
            lease_ttl,
            fence_ttl: lease_ttl,
            grant: Grant::OverAnyValue,
        };
        let _turn = match self.turn.try_lock() {
            Ok(turn) => turn,
            Err(_) => {
                if let Some(on_full) = on_full.take() {
                    on_full();
                }
                match tokio::time::timeout_at(deadline, self.turn.lock()).await {
                    Ok(turn) => turn,
                    Err(_) => return Err(None),
                }
            }
        };
        let count = self.keys.len();
        let start = fastrand::usize(..count);
        loop {
            // Listening before asking: a release right after an answer
            // still wakes the wait below.
            let mut listeners: Vec<Listener> =
                self.keys.iter().map(|key| store.listen(key)).collect();
            let mut lapse = lease_ttl;
            for offset in 0..count {
                let key = &self.keys[(start + offset) % count];
                let asked = store.call(store.get_or_lease(key, &request));
                match tokio::time::timeout_at(deadline, asked).await {
                    Err(_) => return Err(None),
                    Ok(Err(error)) => return Err(Some(error)),
                    Ok(Ok(Lookup::Granted(lease))) => {
                        return Ok(FleetPermit::new(store.clone(), key.clone(), lease, request));
                    }
                    Ok(Ok(Lookup::Held { remaining })) => {
                        lapse = lapse.min(remaining.unwrap_or(lease_ttl));
                    }
                    // Over any value a lease is granted or held; a store
                    // answering otherwise is asked again next round.
                    Ok(Ok(_)) => {}
                }
            }
            // Every slot is held: wait for a release, a lapse or a poll.
            if let Some(on_full) = on_full.take() {
                on_full();
            }
            let wake = Instant::now() + poll_interval.min(lapse + Duration::from_millis(1));
            let changed = futures_util::future::select_all(
                listeners
                    .iter_mut()
                    .map(|listener| listener.changed().boxed()),
            );
            tokio::select! {
                _ = changed => {}
                () = tokio::time::sleep_until(wake.min(deadline)) => {}
            }
            if Instant::now() >= deadline {
                return Err(None);
            }
        }
    }
}

/// One slot of a fleet budget, held: renewed in the background while it
/// lives, released when dropped.
pub(crate) struct FleetPermit {
    store: SharedTier,
    key: StoreKey,
    lease: Lease,
    renewing: JoinHandle<()>,
}

impl FleetPermit {
    fn new(store: SharedTier, key: StoreKey, lease: Lease, request: LeaseRequest) -> Self {
        let renewing = tokio::spawn(renew(store.clone(), key.clone(), lease.clone(), request));
        Self {
            store,
            key,
            lease,
            renewing,
        }
    }
}

impl Drop for FleetPermit {
    fn drop(&mut self) {
        self.renewing.abort();
        self.store
            .release_later(self.key.clone(), self.lease.clone());
    }
}

/// Renews a held slot every third of its TTL until it is no longer owned
/// (or the permit is dropped, which aborts this task). A failed renewal is
/// tried again at the next period: the slot may lapse, which lets one more
/// fill start elsewhere, never a wrong value.
async fn renew(store: SharedTier, key: StoreKey, lease: Lease, request: LeaseRequest) {
    let period = (request.lease_ttl / 3).max(Duration::from_millis(10));
    loop {
        tokio::time::sleep(period).await;
        if let Ok(false) = store.call(store.renew(&key, &lease, &request)).await {
            return;
        }
    }
}

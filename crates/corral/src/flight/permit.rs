//! A leader's wait for a permit of its cache's fill budget, after it won
//! the lease (or found the store silent), before it calls the source: the
//! budget's own wait ([`FillBudget::acquire`](crate::FillBudget)), fed with
//! what the flight knows (its callers, the cache's store) and counted in
//! the cache's stats.

use std::future::Future;
use std::sync::{Arc, Weak};

use crate::budget::{Demand, FleetStore, Waited};
use crate::data::freshness::Fetched;
use crate::state::flight::Flight;
use crate::state::inner::Inner;
use crate::stats::Counters;

/// A queued fill's worth to the budget: the callers waiting for its
/// flights (one for a key's fill, one per key for a batch's).
pub(crate) struct FlightDemand<V> {
    pub(crate) flights: Vec<Arc<Flight<Fetched<V>>>>,
    /// A background refresh: its callers had the stale value before it
    /// started, and its flight has nothing to publish to them.
    pub(crate) refresh: bool,
}

impl<V: Send + Sync> Demand for FlightDemand<V> {
    fn callers(&self) -> usize {
        self.flights.iter().map(|flight| flight.waiting()).sum()
    }

    fn answered(&self) -> bool {
        self.refresh || self.flights.iter().all(|flight| flight.is_published())
    }
}

/// Waits for a permit of the cache's budget for a fill worth `demand`
/// (`None`: the cache has no budget), unless `deserted` resolves first;
/// `on_queue` runs once if the fill has to wait.
pub(crate) async fn wait_for_permit<V>(
    inner: &Weak<Inner<V>>,
    demand: FlightDemand<V>,
    deserted: impl Future<Output = ()>,
    on_queue: impl FnOnce(),
) -> Option<Waited>
where
    V: Clone + Send + Sync + 'static,
{
    let cache = inner.upgrade()?;
    let budget = cache.budget()?.clone();
    let store = cache.tiers().l2.clone();
    let (lease_ttl, poll_interval) = (cache.policy().lease_ttl, cache.policy().poll_interval);
    drop(cache);
    let fleet = store.as_ref().map(|store| FleetStore {
        store,
        lease_ttl,
        poll_interval,
    });
    let on_queue = || {
        if let Some(cache) = inner.upgrade() {
            Counters::bump(&cache.counters().fills_queued);
        }
        on_queue();
    };
    let waited = budget
        .acquire(Arc::new(demand), fleet, deserted, on_queue)
        .await;
    if let Some(cache) = inner.upgrade() {
        count(&cache, &waited);
    }
    Some(waited)
}

/// Counts what the wait did in the cache's stats.
fn count<V>(cache: &Inner<V>, waited: &Waited) {
    let counters = cache.counters();
    match waited {
        Waited::Granted { queued, fleet, .. } => {
            match fleet {
                Some(Ok(())) => Counters::bump(&counters.fleet_permits),
                Some(Err(error)) => {
                    Counters::bump(&counters.fleet_fail_open);
                    cache.note_store_failure(error, "filling on this process's permit alone");
                }
                None => {}
            }
            #[cfg(feature = "metrics")]
            if let Some(waited) = queued {
                crate::stats::export::queue_took(cache.name(), *waited);
            }
            #[cfg(not(feature = "metrics"))]
            let _ = queued;
        }
        Waited::Overloaded(_) => Counters::bump(&counters.overloads),
        Waited::Deserted(_) => {}
    }
}

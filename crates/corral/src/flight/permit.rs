//! A leader's wait for a permit of its cache's fill budget: after it won
//! the lease (or found the store unreachable), before it calls the source.
//! Its own permit first, in the budget's queue (hottest fill first); then,
//! for a fleet budget, one of the fleet's permits in the store.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument as _;

use crate::budget::fleet::FleetPermit;
use crate::budget::{Demand, FillBudget, LocalPermit};
use crate::data::freshness::Fetched;
use crate::state::flight::Flight;
use crate::state::inner::Inner;
use crate::stats::Counters;

/// A budget's permit held by a fill: given back when dropped (the fleet's
/// slot released in the background).
pub(crate) struct Permit {
    budget: FillBudget,
    _local: LocalPermit,
    _fleet: Option<FleetPermit>,
}

impl Permit {
    /// Gives the permit back after a fill that took `took` and succeeded
    /// (`ok`), for an adaptive budget to learn from.
    pub(crate) fn finished(self, took: Duration, ok: bool) {
        let budget = self.budget.clone();
        drop(self);
        budget.finished(took, ok);
    }
}

/// How a leader's wait for a permit ended.
pub(crate) enum Waited {
    /// The fill may call the source (`None`: the cache has no budget).
    Granted {
        permit: Option<Permit>,
        /// Whether it waited in a queue (its fill's deadlines start now).
        queued: bool,
    },
    /// No permit within the budget's wait.
    Overloaded(Duration),
    /// Every caller of the flight left while it waited (after this long).
    Deserted(Duration),
}

impl Waited {
    /// What a cache without a budget gets: the fill goes ahead.
    pub(crate) fn without_budget() -> Self {
        Self::Granted {
            permit: None,
            queued: false,
        }
    }
}

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

/// Waits for a permit of the cache's budget for a fill worth `demand`,
/// unless `deserted` resolves first (every caller left); `on_queue` runs
/// once if the fill has to wait (to serve a value at hand at once).
pub(crate) async fn wait_for_permit<V>(
    inner: &Weak<Inner<V>>,
    demand: FlightDemand<V>,
    deserted: impl std::future::Future<Output = ()>,
    on_queue: impl FnOnce(),
) -> Waited
where
    V: Clone + Send + Sync + 'static,
{
    let Some(cache) = inner.upgrade() else {
        return Waited::without_budget();
    };
    let Some(budget) = cache.budget().cloned() else {
        return Waited::without_budget();
    };
    let fleet_store = budget.fleet_slots().and_then(|_| cache.tiers().l2.clone());
    let (lease_ttl, poll_interval) = (cache.policy().lease_ttl, cache.policy().poll_interval);
    drop(cache);
    let started = Instant::now();
    let deadline = started + budget.wait_bound();
    let totals = &budget.permits().totals;
    let mut on_queue = Some(on_queue);
    tokio::pin!(deserted);
    let acquire = budget.permits().acquire(Arc::new(demand));
    let local = if acquire.is_immediate() {
        acquire.await
    } else {
        enter_queue(inner, &mut on_queue);
        let span = tracing::debug_span!("corral.budget.queue", limit = budget.limit());
        let waiting = async {
            tokio::select! {
                permit = tokio::time::timeout_at(deadline, acquire) => Some(permit),
                () = &mut deserted => None,
            }
        };
        match waiting.instrument(span).await {
            Some(Ok(permit)) => permit,
            Some(Err(_)) => return overloaded(inner, &budget, started),
            None => return abandoned(&budget, started),
        }
    };
    let fleet = match (budget.fleet_slots(), fleet_store) {
        (Some(slots), Some(store)) => {
            let on_full = || enter_queue(inner, &mut on_queue);
            let taking = slots
                .take(&store, lease_ttl, poll_interval, deadline, on_full)
                .instrument(tracing::debug_span!(
                    "corral.budget.fleet",
                    limit = budget.limit()
                ));
            let taken = tokio::select! {
                taken = taking => taken,
                () = &mut deserted => return abandoned(&budget, started),
            };
            match taken {
                Ok(permit) => {
                    if let Some(cache) = inner.upgrade() {
                        Counters::bump(&cache.counters().fleet_permits);
                    }
                    Some(permit)
                }
                Err(None) => return overloaded(inner, &budget, started),
                Err(Some(error)) => {
                    if let Some(cache) = inner.upgrade() {
                        Counters::bump(&cache.counters().fleet_fail_open);
                        cache.note_store_failure(&error, "filling on this process's permit alone");
                    }
                    None
                }
            }
        }
        _ => None,
    };
    let queued = on_queue.is_none();
    if queued {
        let waited = started.elapsed();
        totals.waited(waited);
        tracing::debug!(waited_ms = waited.as_millis(), "fill budget permit granted");
        #[cfg(feature = "metrics")]
        if let Some(cache) = inner.upgrade() {
            crate::stats::export::queue_took(cache.name(), waited);
        }
    }
    Waited::Granted {
        permit: Some(Permit {
            budget: budget.clone(),
            _local: local,
            _fleet: fleet,
        }),
        queued,
    }
}

/// A permit of `budget` for a fill without a lease: its local side only
/// (the store that would count a fleet's permits does not answer), within
/// the budget's wait. `Err`: how long it waited in vain.
pub(crate) async fn fail_open<V>(
    budget: FillBudget,
    demand: FlightDemand<V>,
) -> Result<Permit, Duration>
where
    V: Clone + Send + Sync + 'static,
{
    let started = Instant::now();
    let acquire = budget.permits().acquire(Arc::new(demand));
    let queued = !acquire.is_immediate();
    let granted = tokio::time::timeout(budget.wait_bound(), acquire).await;
    let totals = &budget.permits().totals;
    if queued {
        totals.waited(started.elapsed());
    }
    match granted {
        Ok(local) => Ok(Permit {
            budget,
            _local: local,
            _fleet: None,
        }),
        Err(_) => {
            Counters::bump(&totals.overloaded);
            Err(started.elapsed())
        }
    }
}

/// Counts a fill that has to wait and runs `on_queue`, the first time.
fn enter_queue<V>(inner: &Weak<Inner<V>>, on_queue: &mut Option<impl FnOnce()>) {
    if let Some(on_queue) = on_queue.take() {
        if let Some(cache) = inner.upgrade() {
            Counters::bump(&cache.counters().fills_queued);
        }
        on_queue();
    }
}

fn abandoned(budget: &FillBudget, started: Instant) -> Waited {
    Counters::bump(&budget.permits().totals.abandoned);
    tracing::debug!("every caller of a queued fill left: the fill leaves the queue");
    Waited::Deserted(started.elapsed())
}

fn overloaded<V>(inner: &Weak<Inner<V>>, budget: &FillBudget, started: Instant) -> Waited {
    let totals = &budget.permits().totals;
    Counters::bump(&totals.overloaded);
    let waited = started.elapsed();
    totals.waited(waited);
    if let Some(cache) = inner.upgrade() {
        Counters::bump(&cache.counters().overloads);
    }
    tracing::warn!(
        waited_ms = waited.as_millis(),
        limit = budget.limit(),
        "fill budget full: no permit in time, source not called"
    );
    Waited::Overloaded(waited)
}

//! A fill's wait for a permit of its budget: its own process's permit
//! first, in the budget's queue (hottest fill first); then, for a fleet
//! budget, one of the fleet's permits in the store. The budget counts the
//! wait in its totals; what the cache counts is in [`Waited`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument as _;

use super::fleet::FleetPermit;
use super::{Demand, FillBudget, LocalPermit};
use crate::data::error::StoreError;
use crate::stats::Counters;
use crate::tier::shared::SharedTier;

/// A budget's permit held by a fill: given back when dropped (the fleet's
/// slot released in the background).
pub(crate) struct Permit {
    budget: FillBudget,
    _local: LocalPermit,
    /// Boxed: a fleet permit is rare (a fleet budget) and large (its key,
    /// lease and renewal task), and every granted wait carries the field.
    _fleet: Option<Box<FleetPermit>>,
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

/// How a wait for a permit ended.
pub(crate) enum Waited {
    /// The fill may call the source.
    Granted {
        permit: Permit,
        /// How long it waited in a queue, if it had to (its fill's
        /// deadlines start now).
        queued: Option<Duration>,
        /// The fleet's side: taken, or the store failed and the fill runs
        /// on its local permit alone (`None`: not a fleet budget).
        fleet: Option<Result<(), Box<StoreError>>>,
    },
    /// No permit within the budget's wait (after this long).
    Overloaded(Duration),
    /// Every caller of the fill left while it waited (after this long).
    Deserted(Duration),
}

/// Where a fleet budget's permits are counted: the cache's store, and how
/// its leases live and are polled.
pub(crate) struct FleetStore<'a> {
    pub(crate) store: &'a SharedTier,
    pub(crate) lease_ttl: Duration,
    pub(crate) poll_interval: Duration,
}

impl FillBudget {
    /// Waits for a permit for a fill worth `demand`, unless `deserted`
    /// resolves first (every caller left); `on_queue` runs once if the fill
    /// has to wait (to serve a value at hand at once). A fleet budget also
    /// takes one of the fleet's permits in `fleet`'s store.
    pub(crate) async fn acquire(
        &self,
        demand: Arc<dyn Demand>,
        fleet: Option<FleetStore<'_>>,
        deserted: impl Future<Output = ()>,
        on_queue: impl FnOnce(),
    ) -> Waited {
        let started = Instant::now();
        let deadline = started + self.shared.max_wait;
        let mut on_queue = Some(on_queue);
        tokio::pin!(deserted);
        let acquire = self.shared.permits.acquire(demand);
        let local = if acquire.is_immediate() {
            acquire.await
        } else {
            enter_queue(&mut on_queue);
            let span = tracing::debug_span!("corral.budget.queue", limit = self.limit());
            let waiting = async {
                tokio::select! {
                    permit = tokio::time::timeout_at(deadline, acquire) => Some(permit),
                    () = &mut deserted => None,
                }
            };
            match waiting.instrument(span).await {
                Some(Ok(permit)) => permit,
                Some(Err(_)) => return self.overloaded(started),
                None => return self.abandoned(started),
            }
        };
        let (fleet_permit, fleet) = match (self.shared.fleet.as_deref(), fleet) {
            (Some(slots), Some(fleet)) => {
                let on_full = || enter_queue(&mut on_queue);
                let taking = slots
                    .take(fleet, deadline, on_full)
                    .instrument(tracing::debug_span!(
                        "corral.budget.fleet",
                        limit = self.limit()
                    ));
                let taken = tokio::select! {
                    taken = taking => taken,
                    () = &mut deserted => return self.abandoned(started),
                };
                match taken {
                    Ok(permit) => (Some(Box::new(permit)), Some(Ok(()))),
                    Err(None) => return self.overloaded(started),
                    Err(Some(error)) => (None, Some(Err(Box::new(error)))),
                }
            }
            _ => (None, None),
        };
        let queued = on_queue.is_none().then(|| started.elapsed());
        if let Some(waited) = queued {
            self.shared.permits.totals.waited(waited);
            tracing::debug!(waited_ms = waited.as_millis(), "fill budget permit granted");
        }
        Waited::Granted {
            permit: Permit {
                budget: self.clone(),
                _local: local,
                _fleet: fleet_permit,
            },
            queued,
            fleet,
        }
    }

    /// A permit for a fill without a lease: its local side only (the store
    /// that would count a fleet's permits does not answer), within the
    /// budget's wait. `Err`: how long it waited in vain.
    pub(crate) async fn acquire_local(&self, demand: Arc<dyn Demand>) -> Result<Permit, Duration> {
        let started = Instant::now();
        let acquire = self.shared.permits.acquire(demand);
        let queued = !acquire.is_immediate();
        let granted = tokio::time::timeout(self.shared.max_wait, acquire).await;
        let totals = &self.shared.permits.totals;
        if queued {
            totals.waited(started.elapsed());
        }
        match granted {
            Ok(local) => Ok(Permit {
                budget: self.clone(),
                _local: local,
                _fleet: None,
            }),
            Err(_) => {
                Counters::bump(&totals.overloaded);
                Err(started.elapsed())
            }
        }
    }

    fn abandoned(&self, started: Instant) -> Waited {
        Counters::bump(&self.shared.permits.totals.abandoned);
        tracing::debug!("every caller of a queued fill left: the fill leaves the queue");
        Waited::Deserted(started.elapsed())
    }

    fn overloaded(&self, started: Instant) -> Waited {
        let totals = &self.shared.permits.totals;
        Counters::bump(&totals.overloaded);
        let waited = started.elapsed();
        totals.waited(waited);
        tracing::warn!(
            waited_ms = waited.as_millis(),
            limit = self.limit(),
            "fill budget full: no permit in time, source not called"
        );
        Waited::Overloaded(waited)
    }
}

/// Runs `on_queue` the first time the fill has to wait.
fn enter_queue(on_queue: &mut Option<impl FnOnce()>) {
    if let Some(on_queue) = on_queue.take() {
        on_queue();
    }
}

//! A flight whose store does not answer its lease request.
//!
//! A store that is slow, frozen or gone for a moment must not turn a cold
//! start into one fill per key per process. So a failed lookup is not a
//! licence to fill:
//!
//! - An error the store **answered** with (it will grant nothing): the
//!   flight fills without a lease at once, within the fail-open budget.
//! - **No answer** (a timeout, the store unreachable, the breaker open):
//!   the flight waits for the store — the key's notice (a fill landing
//!   elsewhere, or every listener woken when the subscription comes back),
//!   the store answering again after its silence, or a retry with backoff —
//!   and asks again. It fills without a lease only once the store has been
//!   silent for as long as a lease lives (no call of the cache answered
//!   for that long: the store is gone, not busy), or once it has waited
//!   twice that itself. Even then it first takes a permit of the fail-open
//!   budget, and keeps asking the store while it queues for one: a store
//!   that comes back takes the flight back.
//! - With a value at hand, its callers get it at the soft timeout.
//!
//! Fills without a lease are so bounded per cache: one per key (the
//! flight), and at most the fail-open budget's limit at once (the cache's
//! [`FillBudget`](crate::FillBudget) if it has one, else a default one).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::find::{Finder, Found};
use crate::budget::{FillBudget, Permit};
use crate::data::error::StoreError;
use crate::data::freshness::Fetched;
use crate::flight::permit;
use crate::state::flight::Flight;
use crate::stats::Counters;
use crate::store::Listener;

/// The longest wait between two lookups of a flight waiting for its store.
const MAX_RETRY: Duration = Duration::from_secs(1);

/// A place in the fail-open budget's queue; resolves to the permit, or to
/// how long it waited in vain.
type Queued = Pin<Box<dyn Future<Output = Result<Permit, Duration>> + Send>>;

/// A flight's trouble with its store, from its first unanswered lookup
/// until the store answers one.
pub(super) struct Trouble {
    since: Instant,
    failures: u32,
    /// Its place in the fail-open budget's queue, kept across lookups.
    queued: Option<Queued>,
}

impl Trouble {
    fn new() -> Self {
        Self {
            since: Instant::now(),
            failures: 0,
            queued: None,
        }
    }
}

/// Waits `gone_in` (the store not yet silent long enough), then for a
/// permit of the fail-open `budget` for `flight`'s fill. The place taken in
/// the budget's queue is kept in `queued` across lookups, so a flight that
/// looks again loses no turn.
async fn turn_to_fail_open<V>(
    queued: &mut Option<Queued>,
    gone_in: Duration,
    budget: FillBudget,
    flight: Arc<Flight<Fetched<V>>>,
) -> Result<Permit, Duration>
where
    V: Clone + Send + Sync + 'static,
{
    if let Some(queued) = queued {
        return queued.await;
    }
    if !gone_in.is_zero() {
        tokio::time::sleep(gone_in).await;
    }
    let demand = permit::FlightDemand {
        flights: vec![flight],
        refresh: false,
    };
    let acquiring = async move { budget.acquire_local(Arc::new(demand)).await };
    queued.insert(Box::pin(acquiring)).await
}

impl<V> Finder<'_, V>
where
    V: Clone + Send + Sync + 'static,
{
    /// The lookup failed with `error`: waits for the store or for a
    /// fail-open permit (see the module docs). `None`: look again.
    pub(super) async fn ride_out(
        &mut self,
        listener: &mut Listener,
        error: &StoreError,
    ) -> Option<Found> {
        let Some(cache) = self.leader.inner.upgrade() else {
            return Some(Found::Done);
        };
        // The store did not answer at all (it may still): a timeout, the
        // store unreachable, the breaker open.
        let waits = error.is_retryable();
        let trouble = self.trouble.get_or_insert_with(Trouble::new);
        trouble.failures = trouble.failures.saturating_add(1);
        if trouble.failures == 1 {
            Counters::bump(&cache.counters().store_waits);
            let instead = if waits {
                "waiting for the store before filling without a lease"
            } else {
                "filling without a lease"
            };
            cache.note_store_failure(error, instead);
        } else {
            cache.counters().store_failed(error);
        }
        let pulse = self.store.pulse();
        // Registered before the silence is read: a revival in between
        // still wakes this wait.
        let revived = pulse.revived();
        let patience = self.request.lease_ttl;
        let gone_in = if waits {
            let silent = patience.saturating_sub(pulse.silence());
            let own = patience
                .saturating_mul(2)
                .saturating_sub(trouble.since.elapsed());
            silent.min(own)
        } else {
            Duration::ZERO
        };
        let retry = crate::backoff::doubled(self.poll_interval, trouble.failures, MAX_RETRY);
        let budget = cache.fail_open_budget().clone();
        drop(cache);
        let flight = Arc::clone(self.leader.flight.flight());
        let soft = self
            .soft_deadline
            .filter(|_| self.leader.fallback.is_some() && !self.leader.flight.has_published());
        let fail_open = turn_to_fail_open(&mut trouble.queued, gone_in, budget, flight);
        tokio::select! {
            biased;
            () = crate::clock::sleep_until_some(soft) => {
                self.leader.soft_timed_out();
                Some(Found::Done)
            }
            granted = fail_open => Some(self.fail_open(granted)),
            () = listener.changed() => None,
            () = revived => None,
            () = tokio::time::sleep(retry) => None,
        }
    }

    /// The fail-open budget's answer: a fill without a lease, or overload.
    fn fail_open(&mut self, granted: Result<Permit, Duration>) -> Found {
        self.trouble = None;
        let Some(cache) = self.leader.inner.upgrade() else {
            return Found::Done;
        };
        match granted {
            Ok(permit) => {
                tracing::debug!("store silent: filling without a lease");
                Counters::bump(&cache.counters().fail_open_fills);
                Counters::bump(&cache.counters().misses);
                Found::NoLease(Some(permit))
            }
            Err(waited) => {
                Counters::bump(&cache.counters().overloads);
                tracing::warn!(
                    waited_ms = waited.as_millis(),
                    "store silent and the fail-open budget full: source not called"
                );
                Found::Overloaded(waited)
            }
        }
    }
}

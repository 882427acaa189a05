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

use crate::budget::{FillBudget, Permit};
use crate::data::freshness::Fetched;
use crate::flight::permit;
use crate::state::flight::Flight;

/// The longest wait between two lookups of a flight waiting for its store.
pub(super) const MAX_RETRY: Duration = Duration::from_secs(1);

/// A place in the fail-open budget's queue; resolves to the permit, or to
/// how long it waited in vain.
pub(super) type Queued = Pin<Box<dyn Future<Output = Result<Permit, Duration>> + Send>>;

/// A flight's trouble with its store, from its first unanswered lookup
/// until the store answers one.
pub(super) struct Trouble {
    pub(super) since: Instant,
    pub(super) failures: u32,
    /// Its place in the fail-open budget's queue, kept across lookups.
    pub(super) queued: Option<Queued>,
}

impl Trouble {
    pub(super) fn new() -> Self {
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
pub(super) async fn turn_to_fail_open<V>(
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

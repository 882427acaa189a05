//! Fill budgets: at most N fills at once against one source, across keys —
//! and, with a fleet budget, across every process that shares a store.
//!
//! Single flight makes one fill per key; a budget bounds the fills of many
//! keys together, for the moments when thousands of keys go cold at once
//! (a flush, a deploy with a new schema version, a tag invalidation over
//! many entries). A fill over budget waits in a queue without touching the
//! source; the queue serves the fill with the most waiting callers first
//! (ties: the oldest), and background refreshes after every fill a caller
//! waits for. See [`FillBudget`].
//!
//! A flight takes a permit only once it will call the source: after it won
//! its lease (or found the store unreachable), never for a hit or a wait
//! for another process's fill. It gives the permit back on every exit
//! (drop guards).

pub(crate) mod acquire;
pub(crate) mod adaptive;
pub(crate) mod fleet;
pub(crate) mod queue;

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use crate::data::error::ConfigError;
use crate::data::key::valid_name;
use crate::stats::health::BudgetStats;

pub(crate) use acquire::{FleetStore, Permit, Waited};
pub(crate) use queue::{Demand, LocalPermit};

/// The default longest wait for a permit: past it, a caller with no stale
/// or fail-safe value at hand gets [`Error::Overloaded`](crate::Error::Overloaded).
/// Short enough for a request handler to answer within its own deadline;
/// set [`FillBudget::max_wait`] to the latency budget of the callers.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(1);

/// The fill budget of a cache that has none, for its fills without a lease
/// alone: while the shared store does not answer, at most this many such
/// fills run at once in each cache (one per key), the rest wait in its
/// queue (hottest key first) up to [`DEFAULT_MAX_WAIT`] while their flights
/// keep asking the store. A cache given a [`FillBudget`] bounds them by it
/// instead.
pub const DEFAULT_FAIL_OPEN_LIMIT: usize = 16;

/// A budget of fills running at once against one source of truth, shared
/// by every cache that is given it (a clone is the same budget).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
///
/// // The database's pool has 8 connections: at most 8 fills at once,
/// // whatever the number of cold keys.
/// let db = corral::FillBudget::new(8).max_wait(Duration::from_secs(5));
/// let users = corral::Cache::<String>::builder("users")
///     .fill_budget(db.clone())
///     .build()?;
/// let orders = corral::Cache::<String>::builder("orders")
///     .fill_budget(db.clone())
///     .build()?;
/// # let _ = (users, orders);
/// # Ok(())
/// # }
/// ```
///
/// # Order
///
/// A fill that finds the budget full queues. When a permit comes back it
/// goes to the queued fill that the most callers wait for (counted when the
/// permit is handed out, so a key that turns hot while it waits moves up),
/// ties to the oldest; background refreshes, and fills whose callers were
/// already served a stale or fail-safe value, go after every fill that
/// callers wait for. One hot key is never stuck behind a thousand cold
/// ones.
///
/// # Bounded waits
///
/// - A caller whose cache holds a stale or fail-safe value for the key
///   gets it at once (as [`Freshness::Stale`](crate::Freshness::Stale) /
///   [`FailSafe`](crate::Freshness::FailSafe)); the fill stays queued and
///   refreshes the value when its turn comes.
/// - Otherwise it waits up to [`max_wait`](Self::max_wait) (default
///   [`DEFAULT_MAX_WAIT`]), then gets [`Error::Overloaded`](crate::Error::Overloaded):
///   retryable, distinct from fill and store errors, and the source was
///   not called. The fill's own `fill_timeout` starts once it has its
///   permit.
/// - When every caller of a queued fill is cancelled, the fill leaves the
///   queue: nobody is left to answer, and it holds no permit.
///
/// # Across processes
///
/// [`fleet`](Self::fleet) names the budget in the shared store: every
/// process whose caches carry a fleet budget of that name, on the same
/// store, counts its fills against the same N permits, kept in the store
/// as leases that expire (a crashed holder's permit comes back within one
/// lease TTL) and are renewed while their fill runs. A process first takes
/// a permit of its own budget (its queue, in the order above), then one of
/// the fleet's. If the store does not answer, the fill runs on its local
/// permit alone (reads fail open; counted in `fleet_fail_open`). N is
/// what the source takes from the whole fleet: the sum of the pools it
/// protects, not one pool's size.
///
/// # Default
///
/// Caches have no budget unless given one: only the application knows what
/// its source can take (a pool's size, a rate limit), and a budget sized
/// for the wrong source either throttles a healthy one or protects
/// nothing. Give one budget to every cache that reads the same source, of
/// about its concurrency (the pool's size). With a healthy store a cache
/// without a budget still fills each key once across the fleet; while the
/// store does not answer, its fills without a lease are bounded by a
/// default budget of [`DEFAULT_FAIL_OPEN_LIMIT`] (see
/// [`CacheBuilder::fill_budget`](crate::CacheBuilder::fill_budget)).
#[derive(Clone)]
pub struct FillBudget {
    shared: Arc<Shared>,
}

#[derive(Clone)]
struct Shared {
    permits: Arc<queue::Permits>,
    max_wait: Duration,
    fleet: Option<Arc<fleet::Slots>>,
    name: Option<Arc<str>>,
    adaptive: Option<Arc<adaptive::Adaptive>>,
}

impl FillBudget {
    /// A budget of `limit` fills at once (at least 1).
    pub fn new(limit: usize) -> Self {
        Self {
            shared: Arc::new(Shared {
                permits: Arc::new(queue::Permits::new(limit.max(1))),
                max_wait: DEFAULT_MAX_WAIT,
                fleet: None,
                name: None,
                adaptive: None,
            }),
        }
    }

    /// The longest a fill waits for a permit before its callers get
    /// [`Error::Overloaded`](crate::Error::Overloaded) (default
    /// [`DEFAULT_MAX_WAIT`]). Set it before sharing the budget: clones
    /// made earlier keep the wait they had.
    #[must_use]
    pub fn max_wait(self, wait: Duration) -> Self {
        let mut shared = (*self.shared).clone();
        shared.max_wait = wait;
        Self {
            shared: Arc::new(shared),
        }
    }

    /// Makes this a fleet budget named `name`: its permits are counted in
    /// the shared store of each cache that uses it, together with every
    /// other process's fleet budget of that name on the same store. Every
    /// process must give the same limit. Set it before sharing the budget.
    ///
    /// The limit is what the source takes from **every process together**:
    /// the sum of the pools it protects (3 replicas with a pool of 8
    /// connections each: 24), not one pool's size. A fleet budget sized
    /// like one pool caps the whole fleet at one replica's worth of fills.
    ///
    /// # Errors
    /// A name of 1 to 64 characters from `A-Z a-z 0-9 _ - .` is required.
    pub fn fleet(self, name: &str) -> Result<Self, ConfigError> {
        if !valid_name(name) {
            return Err(ConfigError::new(format!(
                "fill budget name {name:?}: 1 to 64 characters from A-Z a-z 0-9 _ - ."
            )));
        }
        let mut shared = (*self.shared).clone();
        shared.fleet = Some(Arc::new(fleet::Slots::new(name, shared.permits.limit())));
        shared.name = Some(name.into());
        Ok(Self {
            shared: Arc::new(shared),
        })
    }

    /// Lets the budget find its limit between `min` and `max` by itself,
    /// starting from the limit it was made with: about one more permit per
    /// window of finished fills while fills keep their usual latency, and
    /// 20% fewer (once per window) when a fill takes more than twice its
    /// usual time or fails. The limit stays within the bounds and is
    /// visible in [`limit`](Self::limit), [`stats`](Self::stats) and the
    /// `corral_fill_budget_limit` gauge. A fleet budget keeps as many slots
    /// as the limit it was made with: adapting bounds this process's share. Set it before
    /// sharing the budget.
    #[must_use]
    pub fn adaptive(self, min: usize, max: usize) -> Self {
        let mut shared = (*self.shared).clone();
        let start = shared.permits.limit();
        let adaptive = adaptive::Adaptive::new(min, max, start);
        let (min, max) = adaptive.bounds();
        shared.permits.set_limit(start.clamp(min, max));
        shared.adaptive = Some(Arc::new(adaptive));
        Self {
            shared: Arc::new(shared),
        }
    }

    /// How many fills may run at once.
    pub fn limit(&self) -> usize {
        self.shared.permits.limit()
    }

    /// The fleet budget's name, if it is one.
    pub fn name(&self) -> Option<&str> {
        self.shared.name.as_deref()
    }

    /// What the budget is doing now, and its totals.
    pub fn stats(&self) -> BudgetStats {
        let (in_use, queued) = self.shared.permits.load();
        let totals = &self.shared.permits.totals;
        BudgetStats {
            limit: self.limit(),
            in_use,
            queued,
            granted: totals.granted.load(Relaxed),
            waited: totals.queued.load(Relaxed),
            overloaded: totals.overloaded.load(Relaxed),
            abandoned: totals.abandoned.load(Relaxed),
            wait_total: Duration::from_nanos(totals.wait_nanos.load(Relaxed)),
            peak_in_use: usize::try_from(totals.peak_in_use.load(Relaxed)).unwrap_or(usize::MAX),
        }
    }

    /// Learns from a finished fill, if the limit adapts.
    fn finished(&self, took: Duration, ok: bool) {
        if let Some(adaptive) = &self.shared.adaptive {
            self.shared.permits.set_limit(adaptive.finished(took, ok));
        }
    }
}

impl std::fmt::Debug for FillBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FillBudget")
            .field("limit", &self.limit())
            .field("max_wait", &self.shared.max_wait)
            .field("fleet", &self.shared.name)
            .field(
                "adaptive",
                &self.shared.adaptive.as_ref().map(|a| a.bounds()),
            )
            .finish()
    }
}

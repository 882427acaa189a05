//! What [`Cache::health`](crate::Cache::health) reports.

use std::time::Duration;

use crate::data::error::StoreError;

/// A cache's health: whether its shared store answers, and how fast.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Health {
    /// The shared store's answer to one round trip.
    pub store: StoreHealth,
    /// Fills and refreshes in progress in this instance.
    pub flights_in_progress: usize,
    /// The cache's fill budget, if it has one.
    pub budget: Option<BudgetStats>,
}

impl Health {
    /// Whether everything answered: no shared store, or one that answered
    /// within the cache's store timeout.
    pub fn is_ok(&self) -> bool {
        !matches!(self.store, StoreHealth::Failed { .. })
    }

    /// Whether the cache's fill budget is saturated: every permit is out
    /// and fills wait for one. The source is protected, not failing; a
    /// budget saturated for long means it is smaller than the load (or the
    /// source slower than usual).
    pub fn is_budget_saturated(&self) -> bool {
        self.budget.as_ref().is_some_and(BudgetStats::is_saturated)
    }
}

/// How the shared store answered a health check.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum StoreHealth {
    /// The cache has no shared store (values live in process only).
    None,
    /// The store answered.
    Answered {
        /// How long the round trip took.
        latency: Duration,
    },
    /// The store did not answer within the cache's store timeout, or
    /// answered with an error.
    Failed {
        /// How long the check waited.
        latency: Duration,
        /// What went wrong.
        error: StoreError,
    },
}

/// A snapshot of a [`FillBudget`](crate::FillBudget) ([`FillBudget::stats`](crate::FillBudget::stats)).
/// It serializes (serde) for a JSON endpoint (`wait_total` as seconds and
/// nanoseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct BudgetStats {
    /// Fills allowed at once (this process's side).
    pub limit: usize,
    /// Permits held now in this process.
    pub in_use: usize,
    /// Fills waiting for a permit now.
    pub queued: usize,
    /// Permits granted so far.
    pub granted: u64,
    /// Fills that had to wait in the queue.
    pub waited: u64,
    /// Fills that got no permit within `max_wait` (their callers got
    /// [`Error::Overloaded`](crate::Error::Overloaded), or a stale value).
    pub overloaded: u64,
    /// Queued fills that left the queue because every caller was cancelled.
    pub abandoned: u64,
    /// Time spent waiting in the queue, summed over fills.
    pub wait_total: Duration,
    /// The most permits held at once in this process.
    pub peak_in_use: usize,
}

impl BudgetStats {
    /// Whether the budget is saturated: every permit is out and fills wait.
    pub fn is_saturated(&self) -> bool {
        self.in_use >= self.limit && self.queued > 0
    }
}

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
}

impl Health {
    /// Whether everything answered: no shared store, or one that answered
    /// within the cache's store timeout.
    pub fn is_ok(&self) -> bool {
        !matches!(self.store, StoreHealth::Failed { .. })
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

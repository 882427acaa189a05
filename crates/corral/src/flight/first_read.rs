//! A flight's first step, a read of the shared store taken in the calling
//! task. A fresh hit — the common case of a cache with an L2 — is answered
//! right there, without spawning a leader task; anything else (a miss, a
//! stale or undecodable value, a store error) goes to the spawned leader,
//! which asks for the lease.
//!
//! - A cache without an L1 reads **before** claiming a flight
//!   ([`read_ahead`]): a hit touches no flight table, so reads of the store
//!   are not coalesced (each caller's hit is one `GET`); fills still are.
//!   A read taken before the claim is as good as one taken after: the
//!   leader's lease request is what decides, atomically, in the store.
//! - A cache with an L1 reads after claiming ([`FirstRead`]), so that the
//!   copy it keeps is written under its flight, and no newer write is
//!   overwritten.
//!
//! The caller may be cancelled during a [`FirstRead`]. The flight must not
//! be abandoned then (its other callers would get `Aborted`): [`FirstRead`]
//! owns the leadership and the job, and its `Drop` spawns the leader with
//! them if the read did not finish the flight.

use std::future::Future;
use std::sync::Arc;

use tokio::runtime::Handle;

use crate::data::freshness::{Answer, Fetched};
use crate::flight::leader::{self, Job};
use crate::read::{count_l2_hit, finish_hit, read_fresh};
use crate::state::flight::Leadership;
use crate::state::inner::Inner;
use crate::tier::shared::SharedTier;

/// Starts the spawned leader of a flight; `true`: the first read found
/// the store unreachable. Built lazily: a hit never makes the leader's job.
type HandOver<'a, V> = Box<dyn FnOnce(&Arc<Inner<V>>, Leadership<Fetched<V>>, bool) + Send + 'a>;

/// A flight led from the caller's task until it is finished or handed to
/// a spawned leader.
pub(crate) struct FirstRead<'a, V: Clone> {
    inner: &'a Arc<Inner<V>>,
    /// `None` once finished or handed over.
    lead: Option<(Leadership<Fetched<V>>, HandOver<'a, V>)>,
}

impl<'a, V> FirstRead<'a, V>
where
    V: Clone + Send + Sync + 'static,
{
    /// Leads `leadership`'s flight; `job` makes what the spawned leader
    /// runs if this first read does not finish it.
    pub(crate) fn new<F, Fut, E>(
        inner: &'a Arc<Inner<V>>,
        runtime: Handle,
        leadership: Leadership<Fetched<V>>,
        job: impl FnOnce() -> Job<F, V> + Send + 'a,
    ) -> Self
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<Answer<V>, E>> + Send + 'static,
        E: Send + Sync + 'static,
    {
        let hand_over: HandOver<'a, V> = Box::new(move |inner, leadership, store_failed| {
            let job = Job {
                store_failed,
                ..job()
            };
            runtime.spawn(leader::run(Arc::downgrade(inner), leadership, job));
        });
        Self {
            inner,
            lead: Some((leadership, hand_over)),
        }
    }

    /// Reads the key from `store`; a fresh, current value finishes the
    /// flight (copied into the L1, handed to its callers) and is returned.
    /// Otherwise the spawned leader takes over, and the caller waits for
    /// the flight like any other.
    pub(crate) async fn run(mut self, store: &SharedTier) -> Option<Fetched<V>> {
        let inner = self.inner;
        match self.try_fresh_hit(inner, store).await {
            Ok(Some(fetched)) => return Some(fetched),
            Ok(None) => self.hand_over(false),
            Err(()) => self.hand_over(true),
        }
        None
    }

    /// The fresh hit that finished the flight, if any; `Err` if the store
    /// failed (counted).
    async fn try_fresh_hit(
        &mut self,
        inner: &Inner<V>,
        store: &SharedTier,
    ) -> Result<Option<Fetched<V>>, ()> {
        let Some((leadership, _)) = &self.lead else {
            return Ok(None);
        };
        let Some(judged) = read_fresh(inner, store, leadership.key()).await? else {
            return Ok(None);
        };
        let Some((mut leadership, _)) = self.lead.take() else {
            return Ok(None);
        };
        Ok(Some(finish_hit(inner, &mut leadership, judged)))
    }
}

/// What a read of the store before claiming a flight found.
pub(crate) enum ReadAhead<V> {
    /// A fresh, current value (counted as an L2 hit): the answer.
    Fresh(Fetched<V>),
    /// Nothing servable without the leader: a miss, a stale value, bytes
    /// that do not decode, or stale tag stamps.
    Unsettled,
    /// The store did not answer (counted): the leader fills without a lease.
    Unreachable,
}

/// Reads `key` from `store` for a cache without an L1, outside any flight.
pub(crate) async fn read_ahead<V>(inner: &Inner<V>, store: &SharedTier, key: &str) -> ReadAhead<V>
where
    V: Clone + Send + Sync + 'static,
{
    match read_fresh(inner, store, key).await {
        Ok(Some(judged)) => {
            count_l2_hit(inner, &judged);
            ReadAhead::Fresh(judged.into_fetched())
        }
        Ok(None) => ReadAhead::Unsettled,
        Err(()) => ReadAhead::Unreachable,
    }
}

impl<V: Clone> FirstRead<'_, V> {
    /// Spawns the leader with the flight, unless it is finished.
    fn hand_over(&mut self, store_failed: bool) {
        if let Some((leadership, hand_over)) = self.lead.take() {
            hand_over(self.inner, leadership, store_failed);
        }
    }
}

impl<V: Clone> Drop for FirstRead<'_, V> {
    /// The caller was cancelled mid-read: the spawned leader still runs the
    /// flight.
    fn drop(&mut self) {
        self.hand_over(false);
    }
}

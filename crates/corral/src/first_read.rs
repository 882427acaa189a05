//! A flight's first step, taken in the leading caller's own task: one read
//! of the shared store. A fresh hit — the common case of a cache with an L2
//! — is answered right there, without spawning the leader's task; anything
//! else (a miss, a stale or undecodable value, a store error) hands the
//! flight to the spawned leader, which asks for the lease.
//!
//! The caller may be cancelled during the read. The flight must not be
//! abandoned then (its other callers would get `Aborted`): [`FirstRead`]
//! owns the leadership and the job, and its `Drop` spawns the leader with
//! them if the read did not finish the flight.

use std::future::Future;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::runtime::Handle;

use crate::cache::Inner;
use crate::flight::{Leadership, Outcome};
use crate::freshness::{Answer, Fetched, Standing};
use crate::leader::{self, Job};
use crate::stats::Counters;
use crate::store::Store;

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
    V: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
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
    pub(crate) async fn run(mut self, store: &Arc<dyn Store>) -> Option<Fetched<V>> {
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
        store: &Arc<dyn Store>,
    ) -> Result<Option<Fetched<V>>, ()> {
        let Some((leadership, _)) = &self.lead else {
            return Ok(None);
        };
        let skey = inner.store_key(leadership.key());
        let stored = match inner.store_call(store.get(&skey)).await {
            Ok(Some(stored)) => stored,
            Ok(None) => return Ok(None),
            Err(error) => {
                Counters::bump(&inner.counters.store_errors);
                tracing::warn!(cache = %inner.name, %error, "store unreachable: filling without a lease");
                return Err(());
            }
        };
        let Some(judged) = inner.peek_stored(&stored) else {
            return Ok(None);
        };
        if judged.standing != Standing::Fresh || !inner.stamps_current(&judged.stamps).await {
            return Ok(None);
        }
        let Some((mut leadership, _)) = self.lead.take() else {
            return Ok(None);
        };
        Counters::bump(&inner.counters.l2_hits);
        inner.counters.served(judged.freshness);
        let key = leadership.key().to_owned();
        match inner.l1_copy(&key, &judged) {
            Some(copy) => leadership.retire(copy),
            None => leadership.retire(|| ()),
        };
        let fetched = judged.into_fetched();
        leadership.publish(Outcome::Value(fetched.clone()));
        Ok(Some(fetched))
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

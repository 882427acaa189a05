//! A flight's first step, taken in the calling task. A fresh hit — the
//! common case of a cache with an L2 — is answered right there, without
//! spawning a leader task; anything else goes to the spawned leader.
//!
//! - A cache without an L1 reads **before** claiming a flight
//!   ([`read_ahead`]): a hit touches no flight table, so reads of the store
//!   are not coalesced (each caller's hit is one plain read); fills still
//!   are. A read taken before the claim is as good as one taken after: the
//!   leader's lease request is what decides, atomically, in the store.
//! - A cache with an L1 asks for the value or the lease after claiming
//!   ([`FirstRead`]): one request (the leader's own first step, `GET_OR_LEASE`
//!   on Redis) that answers a hit and grants the lease on a miss, so a cold
//!   key costs no separate read. The copy it keeps is written under its
//!   flight, so no newer write is overwritten. A miss, a stale or
//!   undecodable value, stale tag stamps, a lease held elsewhere or a store
//!   error go to the spawned leader with the answer, which it acts on as on
//!   its own.
//!
//! The caller may be cancelled during a [`FirstRead`]. The flight must not
//! be abandoned then (its other callers would get `Aborted`), nor a lease
//! the store grants left to lapse: [`FirstRead`] owns the leadership, the
//! job and the request still out, and its `Drop` spawns the leader with
//! them if it did not finish the flight.

use std::future::Future;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::runtime::Handle;

use crate::error::StoreError;
use crate::flight::{Leadership, Outcome};
use crate::freshness::{Answer, Fetched, Judged, Standing};
use crate::inner::Inner;
use crate::leader::{self, FirstAnswer, FirstLookup, Job};
use crate::shared::SharedTier;
use crate::store::{BoxFuture, LeaseRequest, Listener, Lookup, Stored};

/// Starts the spawned leader of a flight with the first lease request, if
/// it was made. Built lazily: a hit never makes the leader's job.
type HandOver<'a, V> =
    Box<dyn FnOnce(&Arc<Inner<V>>, Leadership<Fetched<V>>, Option<FirstLookup>) + Send + 'a>;

/// A lease request on its way: the listener registered before it was sent.
struct Asking {
    listener: Listener,
    answer: BoxFuture<'static, Result<Lookup, StoreError>>,
}

/// A flight led from the caller's task until it is finished or handed to
/// a spawned leader.
pub(crate) struct FirstRead<'a, V: Clone> {
    inner: &'a Arc<Inner<V>>,
    /// `None` once finished or handed over.
    lead: Option<(Leadership<Fetched<V>>, HandOver<'a, V>)>,
    /// The lease request while it is out.
    asking: Option<Asking>,
}

impl<'a, V> FirstRead<'a, V>
where
    V: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
{
    /// Leads `leadership`'s flight; `job` makes what the spawned leader
    /// runs if this first step does not finish it.
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
        let hand_over: HandOver<'a, V> = Box::new(move |inner, leadership, first| {
            let job = Job { first, ..job() };
            runtime.spawn(leader::run(Arc::downgrade(inner), leadership, job));
        });
        Self {
            inner,
            lead: Some((leadership, hand_over)),
            asking: None,
        }
    }

    /// Asks `store` for the key's value, or its lease (`request`, the
    /// leader's first request). A fresh, current value finishes the flight
    /// (copied into the L1, handed to its callers) and is returned.
    /// Otherwise the spawned leader takes over with the answer, and the
    /// caller waits for the flight like any other.
    pub(crate) async fn run(
        mut self,
        store: &SharedTier,
        request: LeaseRequest,
    ) -> Option<Fetched<V>> {
        let key = self.inner.store_key(self.lead.as_ref()?.0.key());
        let listener = store.listen(&key);
        let owned = store.clone();
        let answer = Box::pin(async move { owned.call(owned.get_or_lease(&key, &request)).await });
        let asking = self.asking.insert(Asking { listener, answer });
        let answer = (&mut asking.answer).await;
        let listener = self.asking.take()?.listener;
        let answer = match answer {
            Ok(Lookup::Hit(stored)) => match self.try_fresh_hit(&stored).await {
                Some(fetched) => return Some(fetched),
                None => Ok(Lookup::Hit(stored)),
            },
            other => other,
        };
        self.hand_over(Some(FirstLookup {
            listener,
            answer: FirstAnswer::Ready(answer),
        }));
        None
    }

    /// Finishes the flight with `stored` if it is fresh and its stamps are
    /// current (counted as a served L2 hit), returning it.
    async fn try_fresh_hit(&mut self, stored: &Stored) -> Option<Fetched<V>> {
        let inner = self.inner;
        let judged = inner.peek_stored(self.lead.as_ref()?.0.key(), stored)?;
        if judged.standing != Standing::Fresh || !inner.stamps_current(&judged.stamps).await {
            return None;
        }
        inner.counters().l2_hits.incr();
        inner.counters().served(judged.freshness);
        let (mut leadership, _) = self.lead.take()?;
        let key = leadership.key().to_owned();
        match inner.l1_copy(&key, &judged) {
            Some(copy) => leadership.retire(copy),
            None => leadership.retire(|| ()),
        };
        let fetched = judged.into_fetched();
        leadership.publish(Outcome::Value(fetched.clone()));
        Some(fetched)
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
    V: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
{
    match read_fresh(inner, store, key).await {
        Ok(Some(judged)) => ReadAhead::Fresh(judged.into_fetched()),
        Ok(None) => ReadAhead::Unsettled,
        Err(()) => ReadAhead::Unreachable,
    }
}

/// The key's entry in `store` if it is fresh and its stamps are current,
/// counted as a served L2 hit; `Err` if the store failed (counted).
async fn read_fresh<V>(
    inner: &Inner<V>,
    store: &SharedTier,
    key: &str,
) -> Result<Option<Judged<V>>, ()>
where
    V: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
{
    let skey = inner.store_key(key);
    let stored = match store.call(store.get(&skey)).await {
        Ok(Some(stored)) => stored,
        Ok(None) => return Ok(None),
        Err(error) => {
            inner.note_store_failure(&error, "filling without a lease");
            return Err(());
        }
    };
    let Some(judged) = inner.peek_stored(key, &stored) else {
        return Ok(None);
    };
    if judged.standing != Standing::Fresh || !inner.stamps_current(&judged.stamps).await {
        return Ok(None);
    }
    inner.counters().l2_hits.incr();
    inner.counters().served(judged.freshness);
    Ok(Some(judged))
}

impl<V: Clone> FirstRead<'_, V> {
    /// Spawns the leader with the flight and `first`, unless the flight is
    /// finished.
    fn hand_over(&mut self, first: Option<FirstLookup>) {
        if let Some((leadership, hand_over)) = self.lead.take() {
            hand_over(self.inner, leadership, first);
        }
    }
}

impl<V: Clone> Drop for FirstRead<'_, V> {
    /// The caller was cancelled mid-step: the spawned leader still runs the
    /// flight, with the lease request if it is still out.
    fn drop(&mut self) {
        let first = self.asking.take().map(|asking| FirstLookup {
            listener: asking.listener,
            answer: FirstAnswer::Pending(asking.answer),
        });
        self.hand_over(first);
    }
}

//! The caller's side of a flight: a read-through call that found no quiet
//! value in the L1, from there to its answer, in the calling task. The
//! spawned leader's side is [`leader`](super::leader).
//!
//! 1. A store-only cache reads **before** claiming a flight
//!    ([`read_ahead`]): a hit touches no flight table, so reads of the store
//!    are not coalesced (each caller's hit is one plain read); fills still
//!    are. A read taken before the claim is as good as one taken after: the
//!    leader's lease request is what decides, atomically, in the store.
//! 2. The L1's verdict: a stale value is served while one refresh runs in
//!    the background; a value kept only for fail-safe is the flight's
//!    fallback.
//! 3. The key's flight: joined, or led. With an L1 and a store, the leading
//!    caller takes the flight's first step itself ([`FirstStep`]), after
//!    claiming, so that the copy it keeps is written under its flight and
//!    no newer write is overwritten. Its request depends on what the store
//!    [`recalls`](crate::store::Store::recalls) of the key:
//!    - a key the store read before and expects to hold a value gets a
//!      plain read (on Redis a `GET`, a store's cheapest request);
//!    - any other key — never seen, or its value expected gone — gets the
//!      leader's own first request, the value or else the lease in one
//!      (`GET_OR_LEASE` on Redis), so a cold key costs no separate read.
//!
//!    A fresh hit is answered right there, without spawning a task. A miss,
//!    a stale or undecodable value, stale tag stamps, a lease held
//!    elsewhere or a store error go to the spawned leader, with the answer
//!    to the lease request, which it acts on as on its own.
//!
//! The caller may be cancelled during a [`FirstStep`]. The flight must not
//! be abandoned then (its other callers would get `Aborted`), nor a lease
//! the store grants left to lapse: [`FirstStep`] owns the leadership, the
//! job and the request still out, and its `Drop` spawns the leader with
//! them if it did not finish the flight.

use std::any::TypeId;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::time::Instant;

use crate::data::cause::FillError;
use crate::data::error::{Error, StoreError};
use crate::data::freshness::{Answer, Fetched, Judged, Standing};
use crate::data::policy::FillOptions;
use crate::flight::leader::{self, Fallback, FirstAnswer, FirstLookup, Job};
use crate::read::{count_l2_hit, finish_hit, judge_current, read_current, Look};
use crate::state::flight::{Claim, Leadership};
use crate::state::inner::{outcome_to_result, Inner};
use crate::stats::Counters;
use crate::store::{patiently, BoxFuture, LeaseRequest, Listener, Lookup, StoreKey, Stored};
use crate::tier::shared::SharedTier;

/// Whether a call that found no quiet value in process reads the store
/// before it claims a flight ([`fetch`]): a store-only cache; the others
/// go straight to [`in_flight`].
pub(crate) fn reads_ahead<V>(inner: &Inner<V>) -> bool {
    inner.tiers().l2.is_some() && inner.tiers().l1.is_none()
}

/// The answer of `key` (already validated) for a call whose `fill`
/// answers an [`Answer`], on a store-only cache ([`reads_ahead`]).
pub(crate) async fn fetch<V, F, Fut, E>(
    inner: &Arc<Inner<V>>,
    key: &str,
    options: FillOptions,
    fill: F,
) -> Result<Fetched<V>, Error<E>>
where
    V: Clone + Send + Sync + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<Answer<V>, FillError<E>>> + Send + 'static,
    E: Send + Sync + 'static,
{
    // Without an L1, a caller reads the store before it claims a flight
    // (see the module docs), unless a flight of the key runs: then it joins.
    let l2_only = inner.tiers().l2.as_ref().filter(|_| reads_ahead(inner));
    if let Some(store) = l2_only.filter(|_| !inner.flights().is_running(key)) {
        match read_ahead(inner, store, key).await {
            ReadAhead::Fresh(fetched) => return Ok(fetched),
            ReadAhead::Unsettled => {}
        }
    }
    // Boxed apart: a hit of the read above allocates only this function's
    // small future, not the flight's large one (an allocation of a
    // kilobyte or more costs glibc a consolidation).
    Box::pin(in_flight(inner, key, options, fill)).await
}

/// The rest of [`fetch`], and all of a call on a cache with an L1 or
/// without a store: the in-process tier, then the key's flight.
pub(crate) async fn in_flight<V, F, Fut, E>(
    inner: &Arc<Inner<V>>,
    key: &str,
    options: FillOptions,
    fill: F,
) -> Result<Fetched<V>, Error<E>>
where
    V: Clone + Send + Sync + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<Answer<V>, FillError<E>>> + Send + 'static,
    E: Send + Sync + 'static,
{
    let runtime = Handle::try_current().map_err(|_| Error::NoRuntime)?;
    // Without an L2 a miss is known here; with one, the leader tells.
    let local = inner.tiers().l2.is_none();
    let fallback = match inner.judge_in_l1(key) {
        Some(judged) if judged.standing == Standing::FailSafeOnly => {
            Some(Fallback::new(judged.value, judged.remaining))
        }
        Some(judged) => {
            inner.counters().served(judged.freshness);
            if judged.standing != Standing::Fresh {
                let fallback = Fallback::new(judged.value.clone(), judged.remaining);
                refresh_in_background(inner, &runtime, key, options, fill, fallback);
            }
            return Ok(judged.into_fetched());
        }
        None => None,
    };
    let recheck = || {
        inner
            .judge_in_l1(key)
            .filter(|judged| matches!(judged.standing, Standing::Fresh | Standing::RefreshDue))
            .map(Judged::into_fetched)
    };
    let flight = match inner.flights().claim(key, TypeId::of::<E>(), recheck) {
        Claim::Ready(fetched) => {
            inner.counters().served(fetched.freshness);
            return Ok(fetched);
        }
        Claim::Join(flight) => {
            Counters::bump(&inner.counters().coalesced);
            if local {
                Counters::bump(&inner.counters().misses);
            }
            return outcome_to_result(inner.wait_joined(&flight).await);
        }
        Claim::Lead(leadership) => {
            let flight = Arc::clone(leadership.flight());
            match (&inner.tiers().l1, &inner.tiers().l2) {
                (Some(_), Some(store)) => {
                    let fill_timeout = options.fill_timeout.unwrap_or(inner.policy().fill_timeout);
                    let request = leader::lease_request(inner, fill_timeout);
                    let job = move || Job::new(inner, key, options, fill, fallback, None);
                    // Held here and borrowed by its step: a step taking it
                    // by value would hold it twice. The step is boxed apart:
                    // two allocations under a kilobyte each cost glibc less
                    // than one over it (served from its thread cache, no
                    // consolidation).
                    let mut first = FirstStep::new(inner, runtime, leadership, job);
                    let step = Box::pin(first.run(store, request, fill_timeout));
                    if let Some(fetched) = step.await {
                        return Ok(fetched);
                    }
                }
                (_, l2) => {
                    if l2.is_none() {
                        Counters::bump(&inner.counters().misses);
                    }
                    let job = Job::new(inner, key, options, fill, fallback, None);
                    runtime.spawn(leader::run(Arc::downgrade(inner), leadership, job));
                }
            }
            flight
        }
    };
    outcome_to_result(flight.wait().await)
}

/// Starts one background refresh of `key` unless one is running (then it
/// stands down) or the refresh limiter is full (then it is skipped; a later
/// read tries again).
fn refresh_in_background<V, F, Fut, E>(
    inner: &Arc<Inner<V>>,
    runtime: &Handle,
    key: &str,
    options: FillOptions,
    fill: F,
    fallback: Fallback<V>,
) where
    V: Clone + Send + Sync + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<Answer<V>, FillError<E>>> + Send + 'static,
    E: Send + Sync + 'static,
{
    let Ok(permit) = Arc::clone(inner.refresh_limiter()).try_acquire_owned() else {
        Counters::bump(&inner.counters().refreshes_skipped);
        return;
    };
    match inner.flights().claim(key, TypeId::of::<E>(), || None) {
        Claim::Lead(leadership) => {
            // With a store, the leader counts the refresh once it holds the
            // lease (or counts it stood down).
            if inner.tiers().l2.is_none() {
                Counters::bump(&inner.counters().refreshes);
            }
            let job = Job::new(inner, key, options, fill, Some(fallback), Some(permit));
            runtime.spawn(leader::run(Arc::downgrade(inner), leadership, job));
        }
        Claim::Join(_) | Claim::Ready(_) => {
            Counters::bump(&inner.counters().refreshes_stood_down);
        }
    }
}

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
pub(crate) struct FirstStep<'a, V: Clone> {
    inner: &'a Arc<Inner<V>>,
    /// `None` once finished or handed over.
    lead: Option<(Leadership<Fetched<V>>, HandOver<'a, V>)>,
    /// The lease request while it is out.
    asking: Option<Asking>,
}

impl<'a, V> FirstStep<'a, V>
where
    V: Clone + Send + Sync + 'static,
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

    /// Asks `store` for the key's value: with a plain read if the store
    /// recalls the key (or if most reads of keys it did not recall hit:
    /// see [`FirstReads`]), else with `request`, the leader's first request
    /// (the value, or else the lease). A fresh, current value finishes the
    /// flight (copied into the L1, handed to its callers) and is returned.
    /// Otherwise the spawned leader takes over, with the lease request's
    /// answer, and the caller waits for the flight like any other.
    ///
    /// [`FirstReads`]: crate::tier::first_reads::FirstReads
    pub(crate) async fn run(
        &mut self,
        store: &SharedTier,
        request: LeaseRequest,
        fill_timeout: Duration,
    ) -> Option<Fetched<V>> {
        let key = self.inner.store_key(self.lead.as_ref()?.0.key());
        let recalled = store.recalls(&key);
        if recalled || store.first_reads().read_plainly() {
            return self.read_recalled(store, &key, !recalled).await;
        }
        let listener = store.listen(&key);
        let owned = store.clone();
        let deadline = Instant::now() + fill_timeout;
        let answer = Box::pin(async move {
            // A late answer beats a fill without a lease.
            let patience = owned.patience(request.lease_ttl, deadline);
            patiently(patience, owned.call(owned.get_or_lease(&key, &request))).await
        });
        let asking = self.asking.insert(Asking { listener, answer });
        let answer = (&mut asking.answer).await;
        if let Ok(lookup) = &answer {
            store.first_reads().found(matches!(lookup, Lookup::Hit(_)));
        }
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

    /// Reads a key with a plain read: a fresh, current value finishes the
    /// flight; anything else goes to the leader, which asks for the lease
    /// itself (or fills without one if the store failed). What the read of
    /// a key the store did not recall (`unknown`) found is counted.
    async fn read_recalled(
        &mut self,
        store: &SharedTier,
        key: &StoreKey,
        unknown: bool,
    ) -> Option<Fetched<V>> {
        let inner = self.inner;
        let read = read_current(inner, store, self.lead.as_ref()?.0.key(), key, Look::Peek).await;
        if let (true, Ok(found)) = (unknown, &read) {
            store.first_reads().found(found.is_some());
        }
        match read {
            Ok(Some(judged)) if judged.standing == Standing::Fresh => {
                let (mut leadership, _) = self.lead.take()?;
                return Some(finish_hit(inner, &mut leadership, judged));
            }
            Ok(_) => self.hand_over(None),
            // The leader counts and logs the failure, as for its own request.
            Err(error) => {
                self.hand_over(Some(FirstLookup {
                    listener: store.listen(key),
                    answer: FirstAnswer::Ready(Err(error)),
                }));
            }
        }
        None
    }

    /// Finishes the flight with `stored` if it is fresh and its stamps are
    /// current (counted as a served L2 hit), returning it.
    async fn try_fresh_hit(&mut self, stored: &Stored) -> Option<Fetched<V>> {
        let inner = self.inner;
        let judged = judge_current(inner, self.lead.as_ref()?.0.key(), stored, Look::Peek).await?;
        if judged.standing != Standing::Fresh {
            return None;
        }
        let (mut leadership, _) = self.lead.take()?;
        Some(finish_hit(inner, &mut leadership, judged))
    }
}

/// What a read of the store before claiming a flight found.
pub(crate) enum ReadAhead<V> {
    /// A fresh, current value (counted as an L2 hit): the answer.
    Fresh(Fetched<V>),
    /// Nothing servable without the leader: a miss, a stale value, bytes
    /// that do not decode, stale tag stamps, or no answer from the store
    /// (counted; the leader waits for the store as for its own request).
    Unsettled,
}

/// Reads `key` from `store` for a cache without an L1, outside any flight.
pub(crate) async fn read_ahead<V>(inner: &Inner<V>, store: &SharedTier, key: &str) -> ReadAhead<V>
where
    V: Clone + Send + Sync + 'static,
{
    // One async layer over the read: each moves the judged entry once more.
    match read_current(inner, store, key, &inner.store_key(key), Look::Peek).await {
        Ok(Some(judged)) if judged.standing == Standing::Fresh => {
            count_l2_hit(inner, &judged);
            ReadAhead::Fresh(judged.into_fetched())
        }
        Ok(_) => ReadAhead::Unsettled,
        Err(error) => {
            inner.counters().store_failed(&error);
            ReadAhead::Unsettled
        }
    }
}

impl<V: Clone> FirstStep<'_, V> {
    /// Spawns the leader with the flight and `first`, unless the flight is
    /// finished.
    fn hand_over(&mut self, first: Option<FirstLookup>) {
        if let Some((leadership, hand_over)) = self.lead.take() {
            hand_over(self.inner, leadership, first);
        }
    }
}

impl<V: Clone> Drop for FirstStep<'_, V> {
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

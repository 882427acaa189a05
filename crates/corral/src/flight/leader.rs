//! The leader's side of a flight: the task that finds the value in the
//! shared store or takes the lease (or waits for its holder), runs the fill
//! — serving a stale value at the soft timeout and a fail-safe value when it
//! fails — and stores the answer: [`Leader`], one method per step.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::FutureExt;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;
use tracing::Instrument as _;

use crate::data::entry::{Ttls, FLAG_FAIL_SAFE};
use crate::data::error::StoreError;
use crate::data::freshness::{Answer, Fetched, Freshness, Standing};
use crate::data::key::KeyLabel;
use crate::data::policy::FillOptions;
use crate::data::tags::Stamps;
use crate::flight::permit::{self, Waited};
use crate::read::{finish_hit, judge_current, Look};
use crate::state::flight::{Failure, Leadership, Outcome};
use crate::state::inner::{weight, InL1, Inner};
use crate::stats::Counters;
use crate::store::{
    BoxFuture, Commit, Grant, Lease, LeaseRequest, Listener, Lookup, StoreKey, Stored,
};
use crate::tier::shared::SharedTier;

/// A value that may be served if the fill is slow or fails: the entry's
/// value and when its physical life ends, measured on this process's
/// monotonic clock from when it was read (so a re-cache after a slow
/// failure never extends it).
#[derive(Clone)]
pub(crate) struct Fallback<V> {
    pub(crate) value: Option<V>,
    pub(crate) ends: Instant,
}

impl<V> Fallback<V> {
    /// A fallback read now with `remaining` of its life left.
    pub(crate) fn new(value: Option<V>, remaining: Duration) -> Self {
        Self {
            value,
            ends: Instant::now() + remaining,
        }
    }

    /// What is left of its life now.
    fn remaining(&self) -> Duration {
        self.ends.saturating_duration_since(Instant::now())
    }
}

/// What a leader needs to run one flight.
pub(crate) struct Job<F, V> {
    pub(crate) key: Box<str>,
    pub(crate) ttl: Duration,
    pub(crate) fill_timeout: Duration,
    pub(crate) soft_timeout: Option<Duration>,
    /// A value found before the flight started (in-process tier).
    pub(crate) fallback: Option<Fallback<V>>,
    /// A background refresh: its callers were served already; it holds a
    /// permit of the cache's refresh limiter.
    pub(crate) permit: Option<OwnedSemaphorePermit>,
    /// The tags the filled entry will carry.
    pub(crate) tags: Arc<[Arc<str>]>,
    /// The caller's read ahead (a cache without an L1) found the store
    /// unreachable: fill without a lease at once instead of paying its
    /// timeout again.
    pub(crate) store_failed: bool,
    /// The flight's first lease request, made by its leading caller.
    pub(crate) first: Option<FirstLookup>,
    pub(crate) fill: F,
}

impl<F, V> Job<F, V> {
    /// The job of a flight of `key` under `options` (the cache's settings
    /// where they say nothing), with what the caller found in process.
    pub(crate) fn new(
        inner: &Inner<V>,
        key: &str,
        options: FillOptions,
        fill: F,
        fallback: Option<Fallback<V>>,
        permit: Option<OwnedSemaphorePermit>,
    ) -> Self {
        let policy = inner.policy();
        Self {
            key: key.into(),
            ttl: options.ttl.unwrap_or(policy.ttl),
            fill_timeout: options.fill_timeout.unwrap_or(policy.fill_timeout),
            soft_timeout: options.soft_timeout.or(policy.soft_timeout),
            fallback,
            permit,
            tags: options.tags.unwrap_or_else(|| Arc::new([])),
            store_failed: false,
            first: None,
            fill,
        }
    }
}

/// A flight's first lease request ([`Grant::IfNoValue`], as
/// [`lease_request`] makes it), made by its leading caller before the
/// leader runs: the listener registered before it was sent, and its answer.
pub(crate) struct FirstLookup {
    pub(crate) listener: Listener,
    pub(crate) answer: FirstAnswer,
}

/// The answer of a [`FirstLookup`].
pub(crate) enum FirstAnswer {
    Ready(Result<Lookup, StoreError>),
    /// Still out: its caller was cancelled. The leader awaits it, so a
    /// lease it grants is held by the flight, never left to lapse.
    Pending(BoxFuture<'static, Result<Lookup, StoreError>>),
}

impl FirstLookup {
    /// The listener and the answer, once the store gave it.
    async fn answered(self) -> (Listener, Result<Lookup, StoreError>) {
        let answer = match self.answer {
            FirstAnswer::Ready(answer) => answer,
            FirstAnswer::Pending(asking) => asking.await,
        };
        (self.listener, answer)
    }
}

/// What a flight's leader asks the store for first: the value, or else the
/// lease (granted only where no value is), for a fill bounded by
/// `fill_timeout`.
pub(crate) fn lease_request<V>(cache: &Inner<V>, fill_timeout: Duration) -> LeaseRequest {
    LeaseRequest {
        lease_ttl: cache.policy().lease_ttl,
        fence_ttl: cache.policy().fence_ttl(fill_timeout),
        grant: Grant::IfNoValue,
    }
}

pub(crate) type Flight<V> = Leadership<Fetched<V>>;

/// Runs one flight to its end: publishes exactly one outcome and retires the
/// flight on every path (its `Leadership` does so even if this task is
/// dropped).
pub(crate) fn run<V, F, Fut, E>(
    inner: Weak<Inner<V>>,
    flight: Flight<V>,
    job: Job<F, V>,
) -> impl Future<Output = ()> + Send
where
    V: Clone + Send + Sync + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<Answer<V>, E>> + Send + 'static,
    E: Send + Sync + 'static,
{
    let span = match inner.upgrade() {
        Some(cache) => {
            let key = KeyLabel {
                key: &job.key,
                raw: cache.policy().trace_raw_keys,
            };
            let kind = if flight.has_published() {
                "refresh"
            } else {
                "fill"
            };
            tracing::debug_span!("corral.flight", cache = %cache.name(), key = %key, kind)
        }
        None => tracing::Span::none(),
    };
    let Job {
        key,
        ttl,
        fill_timeout,
        soft_timeout,
        fallback,
        permit,
        tags,
        store_failed,
        first,
        fill,
    } = job;
    let leader = Leader {
        inner,
        flight,
        key,
        fallback,
        permit,
        clock: Deadlines::from(Instant::now(), fill_timeout, soft_timeout),
    };
    leader
        .lead(ttl, tags, (store_failed, first), fill)
        .instrument(span)
}

/// One flight's leader: it owns the flight, the value it may fall back on,
/// the refresh permit and the flight's times, and takes the flight through
/// its steps, one method each: find the value or the lease, fill in time,
/// then keep the answer or fail.
///
/// It holds only a `Weak` to the cache, upgraded for each step, so a
/// dropped cache goes away while its last fills finish.
struct Leader<V: Clone> {
    inner: Weak<Inner<V>>,
    flight: Flight<V>,
    key: Box<str>,
    /// A value that may be served if the fill is slow or fails.
    fallback: Option<Fallback<V>>,
    /// A background refresh's permit of the cache's refresh limiter.
    permit: Option<OwnedSemaphorePermit>,
    clock: Deadlines,
}

impl<V> Leader<V>
where
    V: Clone + Send + Sync + 'static,
{
    /// The flight, inside its span: find the value or the lease, read the
    /// stamps, run the fill, keep or report its answer.
    async fn lead<F, Fut, E>(
        mut self,
        ttl: Duration,
        tags: Arc<[Arc<str>]>,
        start: (bool, Option<FirstLookup>),
        fill: F,
    ) where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<Answer<V>, E>> + Send + 'static,
        E: Send + Sync + 'static,
    {
        let (lease, reachable) = match self.find_lease(start).await {
            Found::Lease(guard) => (Some(guard), true),
            Found::FailOpen => (None, false),
            Found::Done => {
                self.flight.retire(|| ());
                return;
            }
            Found::TimedOut => {
                let kept = Kept {
                    lease: None,
                    stamps: None,
                };
                let failure = Failure::TimedOut(self.clock.fill_timeout);
                self.fail(kept, failure).await;
                return;
            }
        };
        let permit = match self.wait_for_permit(lease.as_ref()).await {
            Waited::Granted { permit, queued } => {
                if queued {
                    // The fill's own time starts with its permit.
                    let (fill_timeout, soft) = (self.clock.fill_timeout, self.clock.soft_timeout);
                    self.clock = Deadlines::from(Instant::now(), fill_timeout, soft);
                }
                permit
            }
            Waited::Overloaded(waited) => {
                let kept = Kept {
                    lease,
                    stamps: None,
                };
                if self.flight.has_published() {
                    // A refresh gives up: its callers were served.
                    drop(kept);
                    self.flight.retire(|| ());
                } else {
                    self.fail(kept, Failure::Overloaded(waited)).await;
                }
                return;
            }
            Waited::Deserted(waited) => {
                drop(lease);
                self.flight.retire(|| ());
                // Only a caller that joined as the last one left reads it.
                self.flight
                    .publish(Outcome::Failed(Failure::Overloaded(waited)));
                return;
            }
        };
        // Read before the fill runs: a tag invalidation or clear landing
        // while it runs leaves the entry stamped with the old version, fenced.
        let stamps = match self.inner.upgrade() {
            Some(cache) => {
                Counters::bump(&cache.counters().fills);
                cache
                    .fill_stamps(cache.home(&self.key), &tags, reachable)
                    .await
            }
            None => None,
        };
        let fill_started = Instant::now();
        let result = self.fill_in_time(fill, lease.as_ref()).await;
        // The source call is over: the next queued fill may start.
        if let Some(permit) = permit {
            permit.finished(fill_started.elapsed(), matches!(result, Ok(Ok(_))));
        }
        let kept = Kept { lease, stamps };
        match result {
            Ok(Ok(answer)) => {
                let (inner, key) = (&self.inner, &*self.key);
                succeed(inner, &mut self.flight, key, ttl, answer, kept).await;
            }
            Ok(Err(failure)) => self.fail(kept, failure).await,
            Err(_) => {
                if let Some(cache) = self.inner.upgrade() {
                    Counters::bump(&cache.counters().fill_timeouts);
                }
                let failure = Failure::TimedOut(self.clock.fill_timeout);
                self.fail(kept, failure).await;
            }
        }
    }
    /// Looks the key up in the shared store, if the cache has one, until it
    /// holds the lease, served the callers or must fill without a lease;
    /// `start`: whether the leading caller found the store unreachable, and
    /// the first lease request if the caller made it.
    async fn find_lease(&mut self, start: (bool, Option<FirstLookup>)) -> Found {
        let (store_failed, first) = start;
        let Some(cache) = self.inner.upgrade() else {
            return Found::Done;
        };
        let Some(store) = cache.tiers().l2.clone() else {
            return Found::FailOpen;
        };
        if store_failed {
            Counters::bump(&cache.counters().fail_open_fills);
            Counters::bump(&cache.counters().misses);
            return Found::FailOpen;
        }
        let skey = cache.store_key(&self.key);
        let request = lease_request(&cache, self.clock.fill_timeout);
        drop(cache);
        let (deadline, soft_deadline) = (self.clock.deadline, self.clock.soft_deadline());
        let finder = Finder {
            leader: self,
            store,
            key: &skey,
            request,
            soft_deadline,
        };
        tokio::time::timeout_at(deadline, finder.find(first))
            .await
            .unwrap_or(Found::TimedOut)
    }

    /// Waits for a permit of the cache's fill budget (renewing the lease
    /// meanwhile); a value at hand is served at once if the fill has to
    /// queue.
    async fn wait_for_permit(&mut self, lease: Option<&LeaseGuard>) -> Waited {
        // Most caches have no budget: nothing to gather, no lease to renew.
        if self
            .inner
            .upgrade()
            .is_none_or(|cache| cache.budget().is_none())
        {
            return Waited::without_budget();
        }
        let inner = Weak::clone(&self.inner);
        let flight = Arc::clone(self.flight.flight());
        let leases: Vec<&LeaseGuard> = lease.into_iter().collect();
        // A background refresh holds a refresh permit: its callers had the
        // stale value already, so it queues last and serves nobody.
        let refresh = self.permit.is_some();
        let on_queue = || {
            if !refresh && !self.flight.has_published() {
                self.serve_fallback(Freshness::FailSafe);
            }
        };
        let demand = permit::FlightDemand {
            flights: vec![Arc::clone(&flight)],
            refresh,
        };
        let waiting = permit::wait_for_permit(&inner, demand, flight.deserted(), on_queue);
        while_renewing(&inner, waiting, &leases).await
    }

    /// Runs the fill (renewing its lease) until the hard deadline, serving
    /// the fallback to the callers at the soft timeout. The fill is dropped
    /// when this returns: at the hard timeout it is stopped, and nothing it
    /// would have produced is stored.
    async fn fill_in_time<F, Fut, E>(
        &mut self,
        fill: F,
        lease: Option<&LeaseGuard>,
    ) -> Result<Result<Answer<V>, Failure>, tokio::time::error::Elapsed>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<Answer<V>, E>> + Send + 'static,
        E: Send + Sync + 'static,
    {
        let fill_started = Instant::now();
        let leases: Vec<&LeaseGuard> = lease.into_iter().collect();
        // The fill renews through its own handle: serving the fallback at
        // the soft timeout borrows the leader meanwhile.
        let inner = Weak::clone(&self.inner);
        let filling = fill_renewing(&inner, fill, &leases);
        tokio::pin!(filling);
        let deadline = self.clock.deadline;
        let soft = self
            .clock
            .soft_deadline()
            .filter(|_| self.fallback.is_some() && !self.flight.has_published());
        let result = match soft {
            Some(soft) => {
                tokio::select! {
                    result = tokio::time::timeout_at(deadline, &mut filling) => result,
                    () = tokio::time::sleep_until(soft) => {
                        self.serve_fallback(Freshness::Stale);
                        if let Some(cache) = self.inner.upgrade() {
                            Counters::bump(&cache.counters().soft_timeouts);
                        }
                        tokio::time::timeout_at(deadline, &mut filling).await
                    }
                }
            }
            None => tokio::time::timeout_at(deadline, &mut filling).await,
        };
        let took = fill_started.elapsed();
        #[cfg(feature = "metrics")]
        if let Some(cache) = self.inner.upgrade() {
            crate::stats::export::fill_took(cache.name(), took);
        }
        match &result {
            Ok(Ok(_)) => tracing::debug!(took_ms = took.as_millis(), "fill returned a value"),
            Ok(Err(_)) => {}
            Err(_) => tracing::warn!(
                timeout_ms = self.clock.fill_timeout.as_millis(),
                "fill passed the hard timeout: stopped, nothing stored"
            ),
        }
        result
    }

    /// Publishes the fallback to the flight's callers, if there is one and
    /// they were not answered yet.
    fn serve_fallback(&mut self, freshness: Freshness) {
        let Some(fallback) = &self.fallback else {
            return;
        };
        if self.flight.has_published() {
            return;
        }
        if let Some(cache) = self.inner.upgrade() {
            cache.counters().served(freshness);
        }
        self.flight.publish(Outcome::Value(Fetched {
            value: fallback.value.clone(),
            freshness,
        }));
    }

    /// The fill failed: with a fallback and fail-safe on, re-caches the
    /// fallback for the throttle window (fenced like any write, never past
    /// its physical end) and serves it; otherwise hands the failure to the
    /// callers.
    async fn fail(mut self, kept: Kept, failure: Failure) {
        let cache = self.inner.upgrade();
        let fail_safe = cache
            .as_ref()
            .is_some_and(|cache| !cache.policy().fail_safe_max.is_zero());
        match (cache, &self.fallback) {
            (Some(cache), Some(fallback)) if fail_safe => {
                let remaining = fallback.remaining();
                if remaining >= Duration::from_millis(1) {
                    let ttls = cache.policy().fail_safe_ttls(remaining);
                    let value = fallback.value.clone();
                    let key = self.key.clone();
                    keep_value(&cache, &mut self.flight, &key, value, ttls, true, kept).await;
                } else {
                    self.flight.retire(|| ());
                }
                self.serve_fallback(Freshness::FailSafe);
            }
            _ => {
                drop(kept);
                self.flight.retire(|| ());
                self.flight.publish(Outcome::Failed(failure));
            }
        }
    }
}

/// A flight's times: when it started, its hard deadline, and when a slow
/// fill's callers get the fallback.
struct Deadlines {
    started: Instant,
    fill_timeout: Duration,
    deadline: Instant,
    soft_timeout: Option<Duration>,
}

impl Deadlines {
    fn from(started: Instant, fill_timeout: Duration, soft_timeout: Option<Duration>) -> Self {
        Self {
            started,
            fill_timeout,
            deadline: started + fill_timeout,
            soft_timeout,
        }
    }

    /// When a slow fill's callers get the fallback, if ever.
    fn soft_deadline(&self) -> Option<Instant> {
        self.soft_timeout.map(|soft| self.started + soft)
    }
}

/// The store did not answer the lookup: a refresh gives up (its callers
/// were served), a fill runs without a lease.
fn unreachable_store<V: Clone>(cache: &Inner<V>, error: &StoreError, flight: &Flight<V>) -> Found {
    if flight.has_published() {
        cache.counters().store_failed(error);
        return Found::Done;
    }
    cache.note_store_failure(error, "filling without a lease");
    Counters::bump(&cache.counters().fail_open_fills);
    Counters::bump(&cache.counters().misses);
    Found::FailOpen
}

/// Stores the fill's answer (unless it asked not to be cached), retires the
/// flight and hands the answer to its callers.
pub(crate) async fn succeed<V>(
    inner: &Weak<Inner<V>>,
    flight: &mut Flight<V>,
    key: &str,
    ttl: Duration,
    answer: Answer<V>,
    kept: Kept,
) where
    V: Clone + Send + Sync + 'static,
{
    let Answer {
        value,
        ttl: answer_ttl,
        cache: keep,
        tags,
    } = answer;
    if let (Some(cache), true) = (inner.upgrade(), keep) {
        let stamps = cache
            .settle_stamps(cache.home(key), kept.stamps, tags.as_deref())
            .await;
        let kept = Kept { stamps, ..kept };
        let base = match (&value, answer_ttl) {
            (_, Some(ttl)) => ttl,
            (Some(_), None) => ttl,
            (None, None) => cache.policy().negative_ttl,
        };
        let ttls = cache.policy().ttls(cache.draw_ttl(base));
        keep_value(&cache, flight, key, value.clone(), ttls, false, kept).await;
    } else {
        flight.retire(|| ());
    }
    flight.publish(Outcome::Value(Fetched {
        value,
        freshness: Freshness::Fresh,
    }));
}

/// What a leader stores its answer with: the lease it holds (if any) and
/// the tag versions read before its fill ran (`None`: unknown, store
/// nothing).
pub(crate) struct Kept {
    pub(crate) lease: Option<LeaseGuard>,
    pub(crate) stamps: Option<Stamps>,
}

/// Writes an answer into the cache's tiers and retires the flight: in the
/// L2 only under the lease, fenced, and only while no tag or clear it was
/// stamped with moved; in the L1 only if the L2 took it (or the fill ran
/// without a lease because the L2 was unreachable) and no newer write
/// detached the flight or moved its stamps meanwhile.
async fn keep_value<V>(
    cache: &Inner<V>,
    flight: &mut Flight<V>,
    key: &str,
    value: Option<V>,
    ttls: Ttls,
    fail_safe: bool,
    kept: Kept,
) where
    V: Clone + Send + Sync + 'static,
{
    let Kept { lease, stamps } = kept;
    let Some(mut stamps) = stamps else {
        flight.retire(|| ());
        return;
    };
    stamps.take_moved();
    let home = cache.home(key);
    let keep_local = match (&cache.tiers().l2, lease) {
        (None, _) => true,
        (Some(_), None) => true,
        (Some(_), Some(lease)) => {
            if !cache.stamps_current(home, &stamps).await {
                // A tag or clear moved while the fill ran: the lease is
                // released unused.
                Counters::bump(&cache.counters().commits_refused);
                lease.release().await;
                false
            } else {
                let flags = if fail_safe { FLAG_FAIL_SAFE } else { 0 };
                match cache.encode(key, value.as_ref(), ttls, flags, &stamps) {
                    Ok(bytes) => lease.commit(cache, &bytes, ttls.physical).await,
                    Err(message) => {
                        // Too large or not encodable: nothing to store, and
                        // the lease is released before the callers hear.
                        Counters::bump(&cache.counters().encode_failures);
                        tracing::warn!(cache = %cache.name(), %message, "filled value not stored");
                        lease.release().await;
                        false
                    }
                }
            }
        }
    };
    let local = cache.tiers().l1.as_ref().filter(|_| keep_local);
    match local.map(|local| (local, weight(cache, key, value.as_ref()))) {
        Some((_, Ok(weight))) => {
            let entry = InL1 {
                value,
                ttls,
                fail_safe,
                weight,
                age: Duration::ZERO,
            };
            flight.retire(|| {
                cache.insert_in_l1(key, home, &stamps, entry);
            });
        }
        Some((_, Err(_))) | None => {
            flight.retire(|| ());
        }
    }
}

/// How the lookup before the fill ended.
enum Found {
    /// This leader holds the lease and must fill.
    Lease(LeaseGuard),
    /// The store is unreachable, or the cache has none: fill without a
    /// lease (with a store: store nothing).
    FailOpen,
    /// Callers were served from the store and no refresh is to run here.
    Done,
    /// The hard deadline passed before a lease or a value was had.
    TimedOut,
}

/// Looks the key up in the shared store until it can serve a value, holds
/// the lease, or must fill without one.
struct Finder<'a, V: Clone> {
    leader: &'a mut Leader<V>,
    store: SharedTier,
    key: &'a StoreKey,
    request: LeaseRequest,
    soft_deadline: Option<Instant>,
}

impl<V> Finder<'_, V>
where
    V: Clone + Send + Sync + 'static,
{
    /// Looks until it can serve a value, holds the lease, or must fill
    /// without one; its first look is `first`'s answer, if given.
    async fn find(mut self, mut first: Option<FirstLookup>) -> Found {
        let Some(cache) = self.leader.inner.upgrade() else {
            return Found::Done;
        };
        let poll_interval = cache.policy().poll_interval;
        drop(cache);
        // One wait for another process's fill is counted once, however
        // many polls and wake-ups it takes.
        let mut waiting = false;
        // Consecutive answers "held": each wait re-checks later, up to 8×.
        let mut held = 0u32;
        loop {
            // Listening before asking: a change right after the answer
            // still wakes the wait below.
            let (mut listener, lookup) = match first.take() {
                Some(first) => first.answered().await,
                None => {
                    let listener = self.store.listen(self.key);
                    let asking = self.store.get_or_lease(self.key, &self.request);
                    (listener, self.store.call(asking).await)
                }
            };
            let Some(cache) = self.leader.inner.upgrade() else {
                return Found::Done;
            };
            match lookup {
                Ok(Lookup::Hit(stored)) => {
                    if let Some(found) = self.hit(&cache, &stored).await {
                        return found;
                    }
                }
                Ok(Lookup::Changed) => {
                    if self.leader.flight.has_published() {
                        // A refresh stands down: the value it read was
                        // written anew or invalidated.
                        Counters::bump(&cache.counters().refreshes_stood_down);
                        return Found::Done;
                    }
                    // The fallback read earlier is no longer the key's
                    // value: look again.
                    self.leader.fallback = None;
                    self.request.grant = Grant::IfNoValue;
                }
                Ok(Lookup::Granted(lease)) => return self.granted(&cache, lease),
                Ok(Lookup::Held { remaining }) => {
                    if self.leader.flight.has_published() {
                        // A refresh stands down: another process is filling.
                        Counters::bump(&cache.counters().refreshes_stood_down);
                        tracing::debug!("refresh stood down: another process is filling");
                        return Found::Done;
                    }
                    if !waiting {
                        waiting = true;
                        Counters::bump(&cache.counters().lease_waits);
                    }
                    tracing::debug!(
                        remaining_ms = remaining.map(|r| r.as_millis()),
                        "lease held by another process: waiting for its value"
                    );
                    drop(cache);
                    let backoff = poll_interval.saturating_mul(1 << held.min(3));
                    held += 1;
                    let wait = self.wait_for_holder(&mut listener, remaining, backoff);
                    if let Some(found) = wait.await {
                        return found;
                    }
                }
                Err(error) => return unreachable_store(&cache, &error, &self.leader.flight),
            }
        }
    }

    /// The lease was granted: this leader fills under it.
    fn granted(&self, cache: &Inner<V>, lease: Lease) -> Found {
        Counters::bump(&cache.counters().leases_acquired);
        tracing::debug!("lease acquired");
        if self.leader.flight.has_published() {
            Counters::bump(&cache.counters().refreshes);
        } else {
            Counters::bump(&cache.counters().misses);
        }
        let request = self.request.clone();
        Found::Lease(LeaseGuard::new(
            self.store.clone(),
            self.key.clone(),
            lease,
            request,
        ))
    }

    /// A value found in the store: served if fresh (`Some(Done)`), kept as
    /// the fallback if stale or fail-safe only, with a refresh permit taken
    /// for a stale one; `None`: look again, for the lease over it.
    async fn hit(&mut self, cache: &Inner<V>, stored: &Stored) -> Option<Found> {
        // Whatever comes next replaces only this generation: a write or
        // invalidation landing meanwhile wins.
        self.request.grant = Grant::OverGeneration(stored.generation.clone());
        // Undecodable, or left behind by a tag invalidation or clear: it is
        // replaced like a miss.
        let judged = judge_current(cache, self.key.key(), stored, Look::Counted).await?;
        if judged.standing == Standing::Fresh {
            finish_hit(cache, &mut self.leader.flight, judged);
            return Some(Found::Done);
        }
        let stale = matches!(judged.standing, Standing::RefreshDue | Standing::Stale);
        let freshness = judged.freshness;
        let leader = &mut *self.leader;
        leader.fallback = Some(Fallback::new(judged.value, judged.remaining));
        if stale {
            leader.serve_fallback(freshness);
            // A refresh started from a stale L1 copy holds its permit
            // already.
            if leader.permit.is_none() {
                match Arc::clone(cache.refresh_limiter()).try_acquire_owned() {
                    Ok(granted) => leader.permit = Some(granted),
                    Err(_) => {
                        Counters::bump(&cache.counters().refreshes_skipped);
                        return Some(Found::Done);
                    }
                }
            }
        }
        None
    }

    /// Waits while another process's lease lives: until its holder's
    /// notice, the next poll or the lease's lapse (`None`: look again), or
    /// the soft timeout, when a fallback is served (`Some(Done)`).
    async fn wait_for_holder(
        &mut self,
        listener: &mut Listener,
        remaining: Option<Duration>,
        poll_interval: Duration,
    ) -> Option<Found> {
        let lapse = remaining
            .unwrap_or(poll_interval)
            .saturating_add(Duration::from_millis(1));
        let wake = Instant::now() + poll_interval.min(lapse);
        let soft = self
            .soft_deadline
            .filter(|_| self.leader.fallback.is_some());
        tokio::select! {
            () = listener.changed() => None,
            () = tokio::time::sleep_until(wake) => None,
            () = sleep_until_some(soft) => {
                self.leader.serve_fallback(Freshness::Stale);
                if let Some(cache) = self.leader.inner.upgrade() {
                    Counters::bump(&cache.counters().soft_timeouts);
                }
                Some(Found::Done)
            }
        }
    }
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until_some(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Runs the fill while renewing its leases (one for a single key, one per
/// key for a batch) every third of their TTL. A lost or failed renewal
/// does not stop the fill: the fenced commit still protects newer data.
pub(crate) async fn fill_renewing<V, T, F, Fut, E>(
    inner: &Weak<Inner<V>>,
    fill: F,
    leases: &[&LeaseGuard],
) -> Result<T, Failure>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, E>> + Send + 'static,
    E: Send + Sync + 'static,
{
    while_renewing(inner, call_fill(inner, fill), leases).await
}

/// Runs `work` while renewing `leases` every third of their TTL.
pub(crate) async fn while_renewing<V, T>(
    inner: &Weak<Inner<V>>,
    work: impl Future<Output = T>,
    leases: &[&LeaseGuard],
) -> T {
    if leases.is_empty() {
        return work.await;
    }
    tokio::pin!(work);
    tokio::select! {
        biased;
        done = &mut work => done,
        () = keep_renewed(inner, leases) => work.await,
    }
}

/// Renews `leases` (all asked with one request's TTLs) every third of
/// their TTL, concurrently; returns once none is owned any more. A lease
/// whose renewal failed (the store did not answer) is tried again next
/// time.
async fn keep_renewed<V>(inner: &Weak<Inner<V>>, leases: &[&LeaseGuard]) {
    let Some(first) = leases.first() else {
        return;
    };
    let period = (first.request.lease_ttl / 3).max(Duration::from_millis(10));
    let mut owned = leases.to_vec();
    while !owned.is_empty() {
        tokio::time::sleep(period).await;
        let renewals = owned.iter().map(|lease| {
            lease
                .store
                .call(lease.store.renew(&lease.key, &lease.lease, &lease.request))
        });
        let renewed = futures_util::future::join_all(renewals).await;
        let Some(cache) = inner.upgrade() else {
            return;
        };
        let mut still = Vec::with_capacity(owned.len());
        for (lease, renewed) in owned.into_iter().zip(renewed) {
            match renewed {
                Ok(true) => {
                    Counters::bump(&cache.counters().lease_renewals);
                    still.push(lease);
                }
                Ok(false) => {}
                Err(error) => {
                    cache.counters().store_failed(&error);
                    still.push(lease);
                }
            }
        }
        owned = still;
    }
}

/// Runs the fill, turning its error and panic into a typed [`Failure`].
pub(crate) async fn call_fill<V, T, F, Fut, E>(
    inner: &Weak<Inner<V>>,
    fill: F,
) -> Result<T, Failure>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, E>> + Send + 'static,
    E: Send + Sync + 'static,
{
    let result = AssertUnwindSafe(async move { fill().await })
        .catch_unwind()
        .await;
    let failure = match result {
        Ok(Ok(answer)) => return Ok(answer),
        Ok(Err(error)) => {
            match inner.upgrade() {
                Some(cache) => {
                    Counters::bump(&cache.counters().fill_errors);
                    cache.fill_failed(std::any::type_name::<E>());
                }
                None => tracing::warn!(
                    error_type = std::any::type_name::<E>(),
                    "fill returned an error: nothing stored"
                ),
            }
            Failure::Fill(Arc::new(error))
        }
        Err(panic) => {
            if let Some(cache) = inner.upgrade() {
                Counters::bump(&cache.counters().fill_panics);
            }
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".to_owned());
            tracing::error!(panic = %message, "fill panicked: nothing stored");
            Failure::Panicked(message.into())
        }
    };
    Err(failure)
}

/// A granted lease. Committing uses it up; dropping it unused (the fill
/// failed, panicked or timed out) releases it in the background so a
/// waiter elsewhere can take over at once instead of at the lease's lapse.
pub(crate) struct LeaseGuard {
    store: SharedTier,
    key: StoreKey,
    lease: Lease,
    request: LeaseRequest,
    armed: bool,
}

impl LeaseGuard {
    /// Guards `lease` of `key`, granted by `store` as `request` asked.
    pub(crate) fn new(
        store: SharedTier,
        key: StoreKey,
        lease: Lease,
        request: LeaseRequest,
    ) -> Self {
        Self {
            store,
            key,
            lease,
            request,
            armed: true,
        }
    }

    /// Commits `bytes` under the lease (fenced), counting the result;
    /// whether the store took them. A commit the store answered with an
    /// error wrote nothing (a value too large for it, say): the lease is
    /// released before this returns, so waiters in every process take over
    /// at once. Only a store that did not answer keeps it until it lapses.
    async fn commit<V>(mut self, cache: &Inner<V>, bytes: &[u8], ttl: Duration) -> bool {
        self.armed = false;
        let result = self
            .store
            .call(
                self.store
                    .commit(&self.key, &self.lease, bytes, ttl, cache.origin()),
            )
            .await;
        // A store that answered (an error, not an outage) wrote nothing.
        if result.as_ref().is_err_and(|error| !error.is_retryable()) {
            self.release().await;
        }
        match result {
            Ok(Commit::Stored) => {
                Counters::bump(&cache.counters().commits);
                true
            }
            Ok(Commit::Refused) => {
                Counters::bump(&cache.counters().commits_refused);
                false
            }
            Err(error) => {
                cache.note_store_failure(&error, "value returned, not stored");
                false
            }
        }
    }

    /// Releases the lease unused and waits for the store's answer, so that
    /// the caller is answered only after waiters elsewhere can take over.
    async fn release(mut self) {
        self.armed = false;
        let _ = self
            .store
            .call(self.store.release(&self.key, &self.lease))
            .await;
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let store = self.store.clone();
        let key = self.key.clone();
        let lease = self.lease.clone();
        runtime.spawn(async move {
            let _ = store.call(store.release(&key, &lease)).await;
        });
    }
}

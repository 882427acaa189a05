//! The leader's side of a flight: the task that finds the value in the
//! shared store or takes the lease (or waits for its holder), runs the fill
//! — serving a stale value at the soft timeout and a fail-safe value when it
//! fails — and stores the answer: [`Leader`], one method per step.

use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;
use tracing::Instrument as _;

use crate::budget::{Permit, Waited};
use crate::data::error::StoreError;
use crate::data::freshness::{Answer, Fetched, Freshness};
use crate::data::key::KeyLabel;
use crate::data::policy::FillOptions;
use crate::flight::permit;
use crate::state::flight::{Failure, Leadership, Outcome};
use crate::state::inner::Inner;
use crate::stats::Counters;
use crate::store::{patiently_if, BoxFuture, Grant, LeaseRequest, Listener, Lookup};

mod fill;
mod find;
mod keep;
mod lease;
mod trouble;

pub(crate) use self::fill::{call_fill, while_renewing};
use self::find::Found;
use self::keep::keep_value;
pub(crate) use self::keep::{succeed, Kept};
pub(crate) use self::lease::LeaseGuard;

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
    let leader = Leader {
        inner,
        flight,
        key: job.key,
        fallback: job.fallback,
        permit: job.permit,
        clock: Deadlines::from(Instant::now(), job.fill_timeout, job.soft_timeout),
    };
    leader
        .lead(job.ttl, job.tags, job.first, job.fill)
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
    /// The flight, inside its span: find the value or the lease, take a
    /// permit, read the stamps, run the fill, keep or report its answer.
    async fn lead<F, Fut, E>(
        mut self,
        ttl: Duration,
        tags: Arc<[Arc<str>]>,
        first: Option<FirstLookup>,
        fill: F,
    ) where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<Answer<V>, E>> + Send + 'static,
        E: Send + Sync + 'static,
    {
        let (lease, fail_open) = match self.find_lease(first).await {
            Found::Lease(guard) => (Some(guard), None),
            Found::NoLease(permit) => (None, permit),
            Found::Done => {
                self.flight.retire(|| ());
                return;
            }
            // Boxed, as every rare path of this task: the task's future is
            // as large as the largest step it awaits in place.
            Found::TimedOut => {
                let failure = Failure::TimedOut(self.clock.fill_timeout);
                return Box::pin(self.fail(Kept::leased(None), failure)).await;
            }
            Found::Overloaded(waited) => {
                return Box::pin(self.overloaded(Kept::leased(None), waited)).await;
            }
        };
        let permit = match fail_open {
            Some(permit) => {
                // It waited for the store: the fill's own time starts now.
                self.clock = self.clock.restarted();
                Some(permit)
            }
            None if !self.has_budget() => None,
            None => match Box::pin(self.take_permit(lease.as_ref())).await {
                Ok(permit) => permit,
                Err(Some(waited)) => {
                    return Box::pin(self.overloaded(Kept::leased(lease), waited)).await;
                }
                Err(None) => return,
            },
        };
        let kept = self.stamped(lease, tags).await;
        let fill_started = Instant::now();
        let result = self.fill_in_time(fill, kept.lease.as_ref()).await;
        // The source call is over: the next queued fill may start.
        if let Some(permit) = permit {
            permit.finished(fill_started.elapsed(), matches!(result, Ok(Ok(_))));
        }
        // Kept or failed here, not in a step of its own: each async layer
        // holds its own copy of what it is handed.
        let failure = match result {
            Ok(Ok(answer)) => return self.keep(answer, kept, ttl).await,
            Ok(Err(failure)) => failure,
            Err(_) => {
                if let Some(cache) = self.inner.upgrade() {
                    Counters::bump(&cache.counters().fill_timeouts);
                }
                Failure::TimedOut(self.clock.fill_timeout)
            }
        };
        Box::pin(self.fail(kept, failure)).await;
    }

    /// What the fill's answer is kept with: the lease, and the versions
    /// read before the fill runs — so a tag invalidation or clear landing
    /// while it runs leaves the entry stamped with the old version, fenced.
    async fn stamped(&self, lease: Option<LeaseGuard>, tags: Arc<[Arc<str>]>) -> Kept {
        let Some(cache) = self.inner.upgrade() else {
            return Kept::leased(lease);
        };
        Counters::bump(&cache.counters().fills);
        let reachable = lease.is_some();
        let reading = cache.fill_stamps(cache.home(&self.key), &tags, reachable);
        // Under the lease, a late answer beats a fill whose answer cannot
        // be kept; and the lease is renewed while the store is slow to
        // answer, so that it outlives a grant and a read that both came
        // late (each a round trip) and the fill's answer can be committed.
        let patience = lease
            .as_ref()
            .map(|lease| lease.patience(self.clock.deadline));
        let leased = lease.as_ref();
        let stamps = while_renewing(
            &self.inner,
            patiently_if(patience, reading),
            leased.as_slice(),
        )
        .await;
        // Filled while the store does not answer: kept in the L1 for a
        // moment even though the versions guarding it are unknown.
        let unverified =
            (stamps.is_none() && !reachable && cache.tiers().l2.is_some()).then_some(tags);
        Kept {
            lease,
            stamps,
            unverified,
        }
    }

    /// Keeps `answer` and hands it to the callers: a plain function, so
    /// that the future awaited holds the keeping once.
    fn keep(
        &mut self,
        answer: Answer<V>,
        kept: Kept,
        ttl: Duration,
    ) -> impl Future<Output = ()> + '_ {
        let patience = kept.lease.as_ref().map(|l| l.patience(self.clock.deadline));
        let (inner, key) = (&self.inner, &*self.key);
        patiently_if(
            patience,
            succeed(inner, &mut self.flight, key, ttl, answer, kept),
        )
    }

    /// Takes a permit of the cache's fill budget, if it has one. `Err`: none
    /// within its wait, after this long, or (`None`) every caller left
    /// meanwhile and the flight ended here.
    async fn take_permit(
        &mut self,
        lease: Option<&LeaseGuard>,
    ) -> Result<Option<Permit>, Option<Duration>> {
        match self.wait_for_permit(lease).await {
            None => Ok(None),
            Some(Waited::Granted { permit, queued, .. }) => {
                if queued.is_some() {
                    // The fill's own time starts with its permit.
                    self.clock = self.clock.restarted();
                }
                Ok(Some(permit))
            }
            Some(Waited::Overloaded(waited)) => Err(Some(waited)),
            Some(Waited::Deserted(waited)) => {
                self.flight.retire(|| ());
                // Only a caller that joined as the last one left reads it.
                self.flight
                    .publish(Outcome::Failed(Failure::Overloaded(waited)));
                Err(None)
            }
        }
    }

    /// Whether the cache has a fill budget (most have none).
    fn has_budget(&self) -> bool {
        self.inner
            .upgrade()
            .is_some_and(|cache| cache.budget().is_some())
    }

    /// No fill-budget permit within its wait: a refresh gives up (its
    /// callers were served), a fill fails as overloaded.
    async fn overloaded(mut self, kept: Kept, waited: Duration) {
        if self.flight.has_published() {
            drop(kept);
            self.flight.retire(|| ());
        } else {
            self.fail(kept, Failure::Overloaded(waited)).await;
        }
    }

    /// Waits for a permit of the cache's fill budget (renewing the lease
    /// meanwhile; `None`: the cache has none); a value at hand is served at
    /// once if the fill has to queue. Asked only of a cache with a budget
    /// (most have none: their leaders neither come here nor box this).
    async fn wait_for_permit(&mut self, lease: Option<&LeaseGuard>) -> Option<Waited> {
        let inner = Weak::clone(&self.inner);
        let flight = Arc::clone(self.flight.flight());
        let leases = lease.as_slice();
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
        while_renewing(&inner, waiting, leases).await
    }

    /// The soft timeout passed with a fallback at hand: the callers get it
    /// while the fill goes on.
    fn soft_timed_out(&mut self) {
        self.serve_fallback(Freshness::Stale);
        if let Some(cache) = self.inner.upgrade() {
            Counters::bump(&cache.counters().soft_timeouts);
        }
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

    /// The same times, starting now.
    fn restarted(&self) -> Self {
        Self::from(Instant::now(), self.fill_timeout, self.soft_timeout)
    }

    /// When a slow fill's callers get the fallback, if ever.
    fn soft_deadline(&self) -> Option<Instant> {
        self.soft_timeout.map(|soft| self.started + soft)
    }
}

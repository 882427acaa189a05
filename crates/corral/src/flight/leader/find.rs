//! The leader's first step: the key's value in the shared store, or its
//! lease, or the wait for another process's fill — and, when the store does
//! not answer, the wait for it before filling without a lease.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::trouble::{turn_to_fail_open, Trouble, MAX_RETRY};
use super::{lease_request, Fallback, FirstAnswer, FirstLookup, Leader, LeaseGuard};
use crate::budget::Permit;
use crate::clock::sleep_until_some;
use crate::data::error::StoreError;
use crate::data::freshness::Standing;
use crate::read::{finish_hit, judge_current, Look};
use crate::state::inner::Inner;
use crate::stats::Counters;
use crate::store::{patiently, Patience};
use crate::store::{Grant, Lease, LeaseRequest, Listener, Lookup, StoreKey, Stored};
use crate::tier::shared::SharedTier;

/// How the lookup before the fill ended.
pub(super) enum Found {
    /// This leader holds the lease and must fill.
    Lease(LeaseGuard),
    /// Fill without a lease (with a store: store nothing), holding this
    /// fail-open permit (`None`: the cache has no store, and its fills are
    /// bounded by its fill budget alone).
    NoLease(Option<Permit>),
    /// Callers were served from the store and no refresh is to run here.
    Done,
    /// The hard deadline passed before a lease or a value was had.
    TimedOut,
    /// No fail-open permit within the budget's wait (after this long).
    Overloaded(Duration),
}

impl<V> Leader<V>
where
    V: Clone + Send + Sync + 'static,
{
    /// Looks the key up in the shared store, if the cache has one, until it
    /// holds the lease, served the callers or must fill without a lease;
    /// `first`: the first lease request, if the leading caller made it.
    pub(super) async fn find_lease(&mut self, first: Option<FirstLookup>) -> Found {
        let Some(cache) = self.inner.upgrade() else {
            return Found::Done;
        };
        let Some(store) = cache.tiers().l2.clone() else {
            return Found::NoLease(None);
        };
        let key = cache.store_key(&self.key);
        let request = lease_request(&cache, self.clock.fill_timeout);
        let poll_interval = cache.policy().poll_interval;
        let (deadline, soft_deadline) = (self.clock.deadline, self.clock.soft_deadline());
        let finder = Finder {
            leader: self,
            store,
            key: &key,
            request,
            soft_deadline,
            poll_interval,
            trouble: None,
            held: 0,
        };
        // The leading caller's request was granted the lease (a cold
        // key's usual first answer): nothing to look at or wait for.
        let first = match first {
            Some(FirstLookup {
                answer: FirstAnswer::Ready(Ok(Lookup::Granted(lease))),
                ..
            }) => return finder.granted(&cache, lease),
            other => other,
        };
        drop(cache);
        // Boxed: the leader's task is sized by the steps it awaits in
        // place, and the cold key's grant above is the common path.
        Box::pin(tokio::time::timeout_at(deadline, finder.find(first)))
            .await
            .unwrap_or(Found::TimedOut)
    }
}

/// Looks the key up in the shared store until it can serve a value, holds
/// the lease, or must fill without one.
pub(super) struct Finder<'a, V: Clone> {
    pub(super) leader: &'a mut Leader<V>,
    pub(super) store: SharedTier,
    key: &'a StoreKey,
    pub(super) request: LeaseRequest,
    pub(super) soft_deadline: Option<Instant>,
    pub(super) poll_interval: Duration,
    /// Since the store last failed to answer a lookup of this flight.
    pub(super) trouble: Option<Trouble>,
    /// Answers "held" so far.
    held: u32,
}

impl<V> Finder<'_, V>
where
    V: Clone + Send + Sync + 'static,
{
    /// Looks until it can serve a value, holds the lease, or must fill
    /// without one; its first look is `first`'s answer, if given.
    pub(super) async fn find(mut self, mut first: Option<FirstLookup>) -> Found {
        loop {
            let (mut listener, lookup) = match first.take() {
                Some(first) => first.answered().await,
                None => self.ask().await,
            };
            let Some(cache) = self.leader.inner.upgrade() else {
                return Found::Done;
            };
            if lookup.is_ok() {
                self.trouble = None;
            }
            let found = match lookup {
                Ok(Lookup::Hit(stored)) => {
                    // Judging it may read versions: as patient as the lookup.
                    patiently(self.patience(), self.hit(&cache, &stored)).await
                }
                Ok(Lookup::Changed) => self.changed(&cache),
                Ok(Lookup::Granted(lease)) => Some(self.granted(&cache, lease)),
                Ok(Lookup::Held { remaining }) => {
                    drop(cache);
                    // Boxed, as the wait for the store below: rare steps.
                    Box::pin(self.held(&mut listener, remaining)).await
                }
                Err(error) if self.leader.flight.has_published() => {
                    // A refresh gives up: its callers were served.
                    cache.counters().store_failed(&error);
                    Some(Found::Done)
                }
                Err(error) => {
                    drop(cache);
                    Box::pin(self.ride_out(&mut listener, &error)).await
                }
            };
            if let Some(found) = found {
                return found;
            }
        }
    }

    /// The patience of this flight's store calls (see
    /// [`SharedTier::patience`]).
    fn patience(&self) -> Patience {
        let deadline = self.leader.clock.deadline;
        self.store.patience(self.request.lease_ttl, deadline)
    }

    /// Asks the store for the value or the lease, listening first: a
    /// change right after the answer still wakes the wait that follows.
    async fn ask(&mut self) -> (Listener, Result<Lookup, StoreError>) {
        let listener = self.store.listen(self.key);
        let patience = self.patience();
        let asking = self.store.get_or_lease(self.key, &self.request);
        (listener, patiently(patience, self.store.call(asking)).await)
    }

    /// The value read earlier was written anew or invalidated: a refresh
    /// stands down (`Some(Done)`); a fill drops its fallback and looks
    /// again.
    fn changed(&mut self, cache: &Inner<V>) -> Option<Found> {
        if self.leader.flight.has_published() {
            Counters::bump(&cache.counters().refreshes_stood_down);
            return Some(Found::Done);
        }
        self.leader.fallback = None;
        self.request.grant = Grant::IfNoValue;
        None
    }

    /// Another process holds the lease: a refresh stands down; a fill
    /// waits for the holder's value (its notice, a poll or the lease's
    /// lapse), re-checking later after each wait, up to 8× the poll
    /// interval. One wait is counted once, however many polls it takes.
    async fn held(
        &mut self,
        listener: &mut Listener,
        remaining: Option<Duration>,
    ) -> Option<Found> {
        let cache = self.leader.inner.upgrade()?;
        if self.leader.flight.has_published() {
            Counters::bump(&cache.counters().refreshes_stood_down);
            tracing::debug!("refresh stood down: another process is filling");
            return Some(Found::Done);
        }
        if self.held == 0 {
            Counters::bump(&cache.counters().lease_waits);
        }
        drop(cache);
        tracing::debug!(
            remaining_ms = remaining.map(|r| r.as_millis()),
            "lease held by another process: waiting for its value"
        );
        let backoff = crate::backoff::doubled(self.poll_interval, self.held.min(3), Duration::MAX);
        self.held = self.held.saturating_add(1);
        self.wait_for_holder(listener, remaining, backoff).await
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
                self.leader.soft_timed_out();
                Some(Found::Done)
            }
        }
    }

    /// The lookup failed with `error`: waits for the store or for a
    /// fail-open permit (see the module docs). `None`: look again.
    pub(super) async fn ride_out(
        &mut self,
        listener: &mut Listener,
        error: &StoreError,
    ) -> Option<Found> {
        let Some(cache) = self.leader.inner.upgrade() else {
            return Some(Found::Done);
        };
        // The store did not answer at all (it may still): a timeout, the
        // store unreachable, the breaker open.
        let waits = error.is_retryable();
        let trouble = self.trouble.get_or_insert_with(Trouble::new);
        trouble.failures = trouble.failures.saturating_add(1);
        if trouble.failures == 1 {
            Counters::bump(&cache.counters().store_waits);
            let instead = if waits {
                "waiting for the store before filling without a lease"
            } else {
                "filling without a lease"
            };
            cache.note_store_failure(error, instead);
        } else {
            cache.counters().store_failed(error);
        }
        let pulse = self.store.pulse();
        // Registered before the silence is read: a revival in between
        // still wakes this wait.
        let revived = pulse.revived();
        let patience = self.request.lease_ttl;
        let gone_in = if waits {
            let silent = patience.saturating_sub(pulse.silence());
            let own = patience
                .saturating_mul(2)
                .saturating_sub(trouble.since.elapsed());
            silent.min(own)
        } else {
            Duration::ZERO
        };
        let retry = crate::backoff::doubled(self.poll_interval, trouble.failures, MAX_RETRY);
        let budget = cache.fail_open_budget().clone();
        drop(cache);
        let flight = Arc::clone(self.leader.flight.flight());
        let soft = self
            .soft_deadline
            .filter(|_| self.leader.fallback.is_some() && !self.leader.flight.has_published());
        let fail_open = turn_to_fail_open(&mut trouble.queued, gone_in, budget, flight);
        tokio::select! {
            biased;
            () = sleep_until_some(soft) => {
                self.leader.soft_timed_out();
                Some(Found::Done)
            }
            granted = fail_open => Some(self.fail_open(granted)),
            () = listener.changed() => None,
            () = revived => None,
            () = tokio::time::sleep(retry) => None,
        }
    }

    /// The fail-open budget's answer: a fill without a lease, or overload.
    fn fail_open(&mut self, granted: Result<Permit, Duration>) -> Found {
        self.trouble = None;
        let Some(cache) = self.leader.inner.upgrade() else {
            return Found::Done;
        };
        match granted {
            Ok(permit) => {
                tracing::debug!("store silent: filling without a lease");
                Counters::bump(&cache.counters().fail_open_fills);
                Counters::bump(&cache.counters().misses);
                Found::NoLease(Some(permit))
            }
            Err(waited) => {
                Counters::bump(&cache.counters().overloads);
                tracing::warn!(
                    waited_ms = waited.as_millis(),
                    "store silent and the fail-open budget full: source not called"
                );
                Found::Overloaded(waited)
            }
        }
    }
}

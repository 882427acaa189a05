//! Batch read-through: [`Cache::get_many_or_fill`](crate::Cache::get_many_or_fill) answers many keys with
//! one read of the L1, one read of the L2 (one round trip; one per hash
//! slot on a cluster, sent together) and one call of the batch fill for the
//! keys still missing — with the same single-flight, leases and fencing as
//! [`Cache::get_or_fill`](crate::Cache::get_or_fill) key by key.
//!
//! Each key of a batch is a flight of the cache's flight table, so single
//! calls and other batches join the keys a batch is filling, and a batch
//! joins the keys already in flight. The keys a batch leads are handed to
//! one spawned task (a cancelled caller does not cancel it) that reads the
//! L2, asks for the leases of the keys it missed (concurrently), runs the
//! batch fill once for the keys it holds leases for, and commits them
//! concurrently. A key it cannot settle that way — a stale or undecodable
//! value, a lease held by another process, a value that landed meanwhile,
//! or a store that did not answer (the single-key leader waits for it, and
//! fills without a lease only within the fail-open budget) — goes to the
//! single-key leader, whose fill calls the batch fill with that one key if
//! it must fill at all.

use std::collections::HashMap;
use std::future::{pending, Future};
use std::sync::{Arc, Weak};

use tokio::runtime::Handle;
use tokio::time::Instant;

use std::time::Duration;

use crate::budget::{Permit, Waited};
use crate::data::freshness::{Answer, Standing};
use crate::data::policy::FillOptions;
use crate::data::tags::{Home, Stamps};
use crate::flight::leader::{self, Flight, Job, Kept, LeaseGuard};
use crate::flight::permit;
use crate::read::{finish_hit, judge_current, Look};
use crate::state::flight::{Failure, Outcome};
use crate::state::inner::Inner;
use crate::stats::Counters;
use crate::store::Lookup;
use crate::tier::shared::SharedTier;

/// The flights one batch leads, with their keys.
pub(crate) type Led<V> = Vec<(String, Flight<V>)>;

/// The task that settles the keys one batch leads.
pub(crate) struct BatchLeader<V, F> {
    inner: Weak<Inner<V>>,
    runtime: Handle,
    fill_many: Arc<F>,
    /// The call's TTL, hard fill timeout and tags (the cache's defaults
    /// where it set none).
    ttl: Duration,
    fill_timeout: Duration,
    tags: Arc<[Arc<str>]>,
}

/// A key to fill: its flight and its lease (none when filling fail-open).
type ToFill<V> = (String, Flight<V>, Option<LeaseGuard>);

impl<V, F, Fut, E> BatchLeader<V, F>
where
    V: Clone + Send + Sync + 'static,
    F: Fn(Vec<String>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<HashMap<String, Answer<V>>, E>> + Send + 'static,
    E: Send + Sync + 'static,
{
    /// Spawns the task that settles `led`, filling through `fill_many`
    /// with the call's `options`.
    pub(crate) fn spawn(
        inner: &Arc<Inner<V>>,
        runtime: &Handle,
        fill_many: Arc<F>,
        options: &FillOptions,
        led: Led<V>,
    ) {
        let policy = inner.policy();
        let batch = Self {
            inner: Arc::downgrade(inner),
            runtime: runtime.clone(),
            fill_many,
            ttl: options.ttl.unwrap_or(policy.ttl),
            fill_timeout: options.fill_timeout.unwrap_or(policy.fill_timeout),
            tags: options.tags.clone().unwrap_or_else(|| Arc::new([])),
        };
        runtime.spawn(batch.run(led));
    }

    async fn run(self, led: Led<V>) {
        let Some(cache) = self.inner.upgrade() else {
            return;
        };
        let to_fill = match cache.tiers().l2.clone() {
            None => led.into_iter().map(|(k, f)| (k, f, None)).collect(),
            Some(store) => self.settle_from_store(&cache, &store, led).await,
        };
        if to_fill.is_empty() {
            return;
        }
        for _ in &to_fill {
            Counters::bump(&cache.counters().misses);
        }
        drop(cache);
        let permit = match self.take_permit(&to_fill).await {
            Ok(permit) => permit,
            Err(waited) => return fail_all(to_fill, &Failure::Overloaded(waited)),
        };
        let Some(cache) = self.inner.upgrade() else {
            return;
        };
        Counters::bump(&cache.counters().fills);
        let deadline = Instant::now() + self.fill_timeout;
        let (homes, stamps) = self.stamps_at_homes(&cache, &to_fill).await;
        drop(cache);

        let keys: Vec<String> = to_fill.iter().map(|(key, _, _)| key.clone()).collect();
        let fill_many = Arc::clone(&self.fill_many);
        let fill_started = Instant::now();
        let leases: Vec<&LeaseGuard> = to_fill.iter().filter_map(|(_, _, l)| l.as_ref()).collect();
        let filled = tokio::time::timeout_at(
            deadline,
            leader::while_renewing(
                &self.inner,
                leader::call_fill(&self.inner, move || fill_many(keys)),
                &leases,
            ),
        )
        .await;
        drop(leases);
        if let Some(permit) = permit {
            permit.finished(fill_started.elapsed(), matches!(filled, Ok(Ok(_))));
        }
        let failure = match filled {
            Ok(Ok(mut found)) => {
                let (inner, ttl) = (&self.inner, self.ttl);
                let keeps =
                    to_fill
                        .into_iter()
                        .zip(&homes)
                        .map(|((key, mut flight, lease), home)| {
                            let answer = found.remove(&key).unwrap_or_else(Answer::not_found);
                            let kept = Kept {
                                lease,
                                stamps: stamps.get(home).cloned().flatten(),
                                unverified: None,
                            };
                            async move {
                                leader::succeed(inner, &mut flight, &key, ttl, answer, kept).await;
                            }
                        });
                futures_util::future::join_all(keeps).await;
                return;
            }
            Ok(Err(failure)) => failure,
            Err(_) => {
                if let Some(cache) = self.inner.upgrade() {
                    Counters::bump(&cache.counters().fill_timeouts);
                }
                Failure::TimedOut(self.fill_timeout)
            }
        };
        fail_all(to_fill, &failure);
    }

    /// One permit of the fill budget, if the cache has one, for the one
    /// call of the batch fill (renewing its leases meanwhile). `Err`: none
    /// within the budget's wait (or every caller left), after this long.
    async fn take_permit(&self, to_fill: &[ToFill<V>]) -> Result<Option<Permit>, Duration> {
        let leases: Vec<&LeaseGuard> = to_fill.iter().filter_map(|(_, _, l)| l.as_ref()).collect();
        let flights = to_fill.iter().map(|(_, f, _)| Arc::clone(f.flight()));
        let demand = permit::FlightDemand {
            flights: flights.collect(),
            refresh: false,
        };
        let waiting = permit::wait_for_permit(&self.inner, demand, pending(), || {});
        match leader::while_renewing(&self.inner, waiting, &leases).await {
            None => Ok(None),
            Some(Waited::Granted { permit, .. }) => Ok(Some(permit)),
            Some(Waited::Overloaded(waited) | Waited::Deserted(waited)) => Err(waited),
        }
    }

    /// The versions the batch's answers are stamped with, read before the
    /// fill runs at each home its keys use: each key's home, and the
    /// stamps by home.
    async fn stamps_at_homes(
        &self,
        cache: &Inner<V>,
        to_fill: &[ToFill<V>],
    ) -> (Vec<Home>, HashMap<Home, Option<Stamps>>) {
        let homes: Vec<Home> = to_fill.iter().map(|(key, _, _)| cache.home(key)).collect();
        let mut distinct = homes.clone();
        distinct.sort_unstable();
        distinct.dedup();
        // Every key to fill here holds its lease, or the cache has no store.
        let reads = distinct
            .iter()
            .map(|&home| cache.fill_stamps(home, &self.tags, true));
        let read = futures_util::future::join_all(reads).await;
        (homes, distinct.into_iter().zip(read).collect())
    }

    /// Reads the led keys from the store in one round trip and answers the
    /// fresh ones; asks for the leases of the missing ones. Returns the keys
    /// to fill (with their leases); the rest went to single-key leaders.
    async fn settle_from_store(
        &self,
        cache: &Inner<V>,
        store: &SharedTier,
        led: Led<V>,
    ) -> Vec<ToFill<V>> {
        let skeys: Vec<_> = led.iter().map(|(key, _)| cache.store_key(key)).collect();
        let found = match store.call(store.get_many(&skeys)).await {
            Ok(found) => found,
            Err(error) => {
                // Each key's own leader waits for the store, and fills
                // without a lease only within the fail-open budget.
                cache.counters().store_failed(&error);
                for (key, flight) in led {
                    self.delegate(cache, key, flight);
                }
                return Vec::new();
            }
        };
        let mut missing = Vec::new();
        for ((key, mut flight), stored) in led.into_iter().zip(found) {
            let Some(stored) = stored else {
                missing.push((key, flight));
                continue;
            };
            match judge_current(cache, &key, &stored, Look::Peek).await {
                Some(judged) if judged.standing == Standing::Fresh => {
                    finish_hit(cache, &mut flight, judged);
                }
                // Stale, due for a refresh, fenced by a tag, or undecodable:
                // the single-key leader serves, refreshes or overwrites it.
                _ => self.delegate(cache, key, flight),
            }
        }
        if missing.is_empty() {
            return Vec::new();
        }
        self.lease_missing(cache, store, missing).await
    }

    /// Asks for the leases of the keys the store did not have: the keys
    /// granted are to be filled here, the others are left to their
    /// single-key leaders.
    async fn lease_missing(
        &self,
        cache: &Inner<V>,
        store: &SharedTier,
        missing: Led<V>,
    ) -> Vec<ToFill<V>> {
        let request = leader::lease_request(cache, self.fill_timeout);
        let grants = missing.iter().map(|(key, _)| {
            let (skey, request) = (cache.store_key(key), &request);
            async move {
                let grant = store.call(store.get_or_lease(&skey, request)).await;
                (skey, grant)
            }
        });
        let grants = futures_util::future::join_all(grants).await;
        let mut to_fill = Vec::new();
        for ((key, flight), (skey, grant)) in missing.into_iter().zip(grants) {
            match grant {
                Ok(Lookup::Granted(lease)) => {
                    Counters::bump(&cache.counters().leases_acquired);
                    let guard = LeaseGuard::new(store.clone(), skey, lease, request.clone());
                    to_fill.push((key, flight, Some(guard)));
                }
                Ok(Lookup::Hit(_) | Lookup::Held { .. } | Lookup::Changed) => {
                    self.delegate(cache, key, flight);
                }
                Err(error) => {
                    cache.counters().store_failed(&error);
                    self.delegate(cache, key, flight);
                }
            }
        }
        to_fill
    }

    /// Hands `key`'s flight to a single-key leader whose fill asks the
    /// batch fill for that one key.
    fn delegate(&self, cache: &Inner<V>, key: String, flight: Flight<V>) {
        let fill_many = Arc::clone(&self.fill_many);
        let wanted = key.clone();
        let fill = move || async move {
            let mut found = fill_many(vec![wanted.clone()]).await?;
            let answer = found.remove(&wanted).unwrap_or_else(Answer::not_found);
            Ok::<_, E>(answer)
        };
        let options = FillOptions {
            ttl: Some(self.ttl),
            fill_timeout: Some(self.fill_timeout),
            soft_timeout: None,
            tags: Some(Arc::clone(&self.tags)),
        };
        let job = Job::new(cache, &key, options, fill, None, None);
        self.runtime
            .spawn(leader::run(self.inner.clone(), flight, job));
    }
}

/// Hands `failure` to the callers of every key of `to_fill`, releasing
/// their leases.
fn fail_all<V: Clone>(to_fill: Vec<ToFill<V>>, failure: &Failure) {
    for (_, mut flight, lease) in to_fill {
        drop(lease);
        flight.retire(|| ());
        flight.publish(Outcome::Failed(failure.clone()));
    }
}

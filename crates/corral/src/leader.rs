//! The leader's side of a flight: the task that looks up the shared store,
//! takes the lease or waits for its holder, runs the fill, and commits.
//!
//! The task holds only a `Weak` to the cache, upgraded for each step, so a
//! dropped cache goes away while its last fills finish.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::FutureExt;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::cache::{store_call, Inner, Tier};
use crate::clock::millis;
use crate::error::Error;
use crate::flight::{Failure, Leadership, Outcome};
use crate::stats::Counters;
use crate::store::{Commit, Lease, LeaseRequest, Lookup, Store, StoreKey};

/// What a leader needs to run one flight.
pub(crate) struct Job<F> {
    pub(crate) key: Box<str>,
    pub(crate) ttl: Duration,
    pub(crate) fill_timeout: Duration,
    pub(crate) fill: F,
}

/// A value ready to publish, with the lease to commit it under, if any.
struct Filled<V> {
    value: V,
    lease: Option<LeaseGuard>,
}

/// Runs one flight to its end: publishes exactly one outcome and retires the
/// flight on every path (its `Leadership` does so even if this task is
/// dropped).
pub(crate) async fn run<V, F, Fut, E>(
    inner: Weak<Inner<V>>,
    mut leadership: Leadership<V>,
    job: Job<F>,
) where
    V: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<V, E>> + Send + 'static,
    E: Send + Sync + 'static,
{
    let Job {
        key,
        ttl,
        fill_timeout,
        fill,
    } = job;
    let led = tokio::time::timeout(fill_timeout, lead(&inner, &key, fill_timeout, fill)).await;
    let cache = inner.upgrade();
    let filled = match led {
        Ok(Ok(filled)) => filled,
        Ok(Err(failure)) => {
            leadership.retire(|| ());
            leadership.publish(Outcome::Failed(failure));
            return;
        }
        Err(_) => {
            if let Some(cache) = &cache {
                Counters::bump(&cache.counters.fill_timeouts);
            }
            leadership.retire(|| ());
            leadership.publish(Outcome::Failed(Failure::TimedOut(fill_timeout)));
            return;
        }
    };
    let Some(cache) = cache else {
        leadership.retire(|| ());
        leadership.publish(Outcome::Value(filled.value));
        return;
    };
    let ttl = cache.draw_ttl(ttl);
    match (&cache.tier, filled.lease) {
        (Tier::Local(local), _) => {
            if let Ok(weight) = weight(&cache, &key, &filled.value) {
                let value = filled.value.clone();
                leadership.retire(|| local.insert(&key, value, millis(ttl), weight));
            } else {
                leadership.retire(|| ());
            }
        }
        (Tier::Shared(_), Some(lease)) => {
            // Commit before retiring and publishing, so a caller that gets
            // the value can read it back, and a caller arriving after the
            // flight retired finds it in the store.
            match cache.encode(&filled.value, ttl) {
                Ok(bytes) => lease.commit(&cache, &bytes, ttl).await,
                Err(message) => {
                    Counters::bump(&cache.counters.encode_failures);
                    tracing::warn!(cache = %cache.name, %message, "filled value not stored");
                }
            }
            leadership.retire(|| ());
        }
        (Tier::Shared(_), None) => {
            leadership.retire(|| ());
        }
    }
    leadership.publish(Outcome::Value(filled.value));
}

/// The weight of a value in the in-process tier: 1 when it is bounded by
/// entries, the key and encoded value size when it is bounded by bytes.
pub(crate) fn weight<V: 'static>(inner: &Inner<V>, key: &str, value: &V) -> Result<u32, Error> {
    if !inner.weigh_by_bytes {
        return Ok(1);
    }
    let mut bytes = Vec::new();
    inner.codec.encode(value, &mut bytes).map_err(|e| {
        Counters::bump(&inner.counters.encode_failures);
        Error::Encode {
            message: e.to_string().into(),
        }
    })?;
    Ok(u32::try_from(key.len() + bytes.len()).unwrap_or(u32::MAX))
}

/// Finds the value in the shared store, or takes the lease and fills, or
/// waits for the lease holder; fills directly when there is no shared store
/// or it is unreachable.
async fn lead<V, F, Fut, E>(
    inner: &Weak<Inner<V>>,
    key: &str,
    fill_timeout: Duration,
    fill: F,
) -> Result<Filled<V>, Failure>
where
    V: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<V, E>> + Send + 'static,
    E: Send + Sync + 'static,
{
    let Some(cache) = inner.upgrade() else {
        return Err(Failure::Aborted);
    };
    let Tier::Shared(store) = &cache.tier else {
        let counters_owner = cache;
        Counters::bump(&counters_owner.counters.fills);
        drop(counters_owner);
        return call_fill(inner, fill)
            .await
            .map(|value| Filled { value, lease: None });
    };
    let store = Arc::clone(store);
    let skey = cache.store_key(key);
    let policy = cache.policy.clone();
    drop(cache);
    let mut request = LeaseRequest {
        lease_ttl: policy.lease_ttl,
        fence_ttl: policy.fence_ttl(fill_timeout),
        ignore_value: false,
    };
    loop {
        let mut listener = store.listen(&skey);
        let lookup = store_call(policy.store_timeout, store.get_or_lease(&skey, request)).await;
        let Some(cache) = inner.upgrade() else {
            return Err(Failure::Aborted);
        };
        match lookup {
            Ok(Lookup::Hit(stored)) => {
                if let Some(value) = cache.decode(&stored.bytes) {
                    cache.counters.hits.incr();
                    return Ok(Filled { value, lease: None });
                }
                request.ignore_value = true;
            }
            Ok(Lookup::Granted(lease)) => {
                Counters::bump(&cache.counters.misses);
                Counters::bump(&cache.counters.fills);
                drop(cache);
                let guard = LeaseGuard {
                    store: Arc::clone(&store),
                    key: skey,
                    lease,
                    request,
                    store_timeout: policy.store_timeout,
                    armed: true,
                };
                let value = fill_renewing(inner, fill, &guard).await?;
                return Ok(Filled {
                    value,
                    lease: Some(guard),
                });
            }
            Ok(Lookup::Held { remaining }) => {
                Counters::bump(&cache.counters.lease_waits);
                drop(cache);
                let lapse = remaining
                    .unwrap_or(policy.poll_interval)
                    .saturating_add(Duration::from_millis(1));
                let wait = policy.poll_interval.min(lapse);
                tokio::select! {
                    () = listener.changed() => {}
                    () = tokio::time::sleep(wait) => {}
                }
            }
            Err(error) => {
                Counters::bump(&cache.counters.store_errors);
                Counters::bump(&cache.counters.fail_open_fills);
                Counters::bump(&cache.counters.misses);
                Counters::bump(&cache.counters.fills);
                tracing::warn!(cache = %cache.name, %error, "store unreachable: filling without a lease");
                drop(cache);
                return call_fill(inner, fill)
                    .await
                    .map(|value| Filled { value, lease: None });
            }
        }
    }
}

/// Runs the fill while renewing the lease every third of its TTL. A lost or
/// failed renewal does not stop the fill: the fenced commit still protects
/// newer data.
async fn fill_renewing<V, F, Fut, E>(
    inner: &Weak<Inner<V>>,
    fill: F,
    lease: &LeaseGuard,
) -> Result<V, Failure>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<V, E>> + Send + 'static,
    E: Send + Sync + 'static,
{
    let renew = async {
        let period = (lease.request.lease_ttl / 3).max(Duration::from_millis(10));
        loop {
            tokio::time::sleep(period).await;
            let renewed = store_call(
                lease.store_timeout,
                lease.store.renew(&lease.key, &lease.lease, lease.request),
            )
            .await;
            let Some(cache) = inner.upgrade() else {
                return;
            };
            match renewed {
                Ok(true) => Counters::bump(&cache.counters.lease_renewals),
                Ok(false) => return,
                Err(_) => Counters::bump(&cache.counters.store_errors),
            }
        }
    };
    let fill = call_fill(inner, fill);
    tokio::pin!(fill);
    tokio::select! {
        biased;
        result = &mut fill => result,
        () = renew => fill.await,
    }
}

/// Runs the fill, turning its error and panic into a typed [`Failure`].
async fn call_fill<V, F, Fut, E>(inner: &Weak<Inner<V>>, fill: F) -> Result<V, Failure>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<V, E>> + Send + 'static,
    E: Send + Sync + 'static,
{
    let result = AssertUnwindSafe(async move { fill().await })
        .catch_unwind()
        .await;
    let failure = match result {
        Ok(Ok(value)) => return Ok(value),
        Ok(Err(error)) => {
            if let Some(cache) = inner.upgrade() {
                Counters::bump(&cache.counters.fill_errors);
            }
            Failure::Fill {
                error: Arc::new(error),
                type_name: std::any::type_name::<E>(),
            }
        }
        Err(panic) => {
            if let Some(cache) = inner.upgrade() {
                Counters::bump(&cache.counters.fill_panics);
            }
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".to_owned());
            Failure::Panicked(message.into())
        }
    };
    Err(failure)
}

/// A granted lease. Committing uses it up; dropping it unused (the fill
/// failed, panicked or timed out) releases it in the background so a
/// waiter elsewhere can take over at once instead of at the lease's lapse.
struct LeaseGuard {
    store: Arc<dyn Store>,
    key: StoreKey,
    lease: Lease,
    request: LeaseRequest,
    store_timeout: Duration,
    armed: bool,
}

impl LeaseGuard {
    /// Commits `bytes` under the lease (fenced), counting the result.
    async fn commit<V>(mut self, cache: &Inner<V>, bytes: &[u8], ttl: Duration) {
        self.armed = false;
        let result = store_call(
            self.store_timeout,
            self.store.commit(&self.key, &self.lease, bytes, ttl),
        )
        .await;
        match result {
            Ok(Commit::Stored) => Counters::bump(&cache.counters.commits),
            Ok(Commit::Refused) => Counters::bump(&cache.counters.commits_refused),
            Err(error) => {
                Counters::bump(&cache.counters.store_errors);
                tracing::warn!(cache = %cache.name, %error, "commit failed; value returned, not stored");
            }
        }
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
        let store = Arc::clone(&self.store);
        let key = self.key.clone();
        let lease = self.lease.clone();
        let timeout = self.store_timeout;
        runtime.spawn(async move {
            let _ = store_call(timeout, store.release(&key, &lease)).await;
        });
    }
}

//! A [`Store`] wrapper for measurements: counts round trips per key, notes
//! when each commit was sent, and can turn notifications off so waiters poll.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use corral::store::{
    BoxFuture, ChangeSink, Commit, Lease, LeaseRequest, Listener, Lookup, Origin, Store, StoreKey,
    Stored,
};
use corral::StoreError;

use super::scenario::wall_clock_us;
use super::wire::KeyRound;

/// Wraps a store: every call passes through and is counted against its key.
///
/// Every [`Store`] method but `attach` and `listen` is one round trip, so the
/// counts are the round trips this process spent per key. With
/// notifications off, `attach` subscribes nothing and `listen` returns a
/// listener that never fires: waiters learn of a value only by polling.
#[derive(Debug)]
pub(crate) struct MeteredStore<S> {
    inner: S,
    notifications: bool,
    keys: Mutex<HashMap<String, KeyRound>>,
}

impl<S: Store> MeteredStore<S> {
    /// Wraps `inner`; `notifications: false` makes waiters poll.
    pub(crate) fn new(inner: S, notifications: bool) -> Arc<Self> {
        Arc::new(Self {
            inner,
            notifications,
            keys: Mutex::new(HashMap::new()),
        })
    }

    /// Takes what was seen of each key so far, leaving nothing behind.
    pub(crate) fn take(&self) -> HashMap<String, KeyRound> {
        std::mem::take(&mut *self.keys.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn meter(&self, key: &StoreKey, update: impl FnOnce(&mut KeyRound)) {
        let mut keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        update(keys.entry(key.key().to_owned()).or_default());
    }

    fn round_trip(&self, key: &StoreKey) {
        self.meter(key, |meter| meter.round_trips += 1);
    }
}

impl<S: Store> Store for MeteredStore<S> {
    fn get_or_lease<'a>(
        &'a self,
        key: &'a StoreKey,
        request: &'a LeaseRequest,
    ) -> BoxFuture<'a, Result<Lookup, StoreError>> {
        self.round_trip(key);
        self.inner.get_or_lease(key, request)
    }

    fn get<'a>(&'a self, key: &'a StoreKey) -> BoxFuture<'a, Result<Option<Stored>, StoreError>> {
        self.round_trip(key);
        self.inner.get(key)
    }

    fn renew<'a>(
        &'a self,
        key: &'a StoreKey,
        lease: &'a Lease,
        request: &'a LeaseRequest,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        self.round_trip(key);
        self.inner.renew(key, lease, request)
    }

    fn commit<'a>(
        &'a self,
        key: &'a StoreKey,
        lease: &'a Lease,
        bytes: &'a [u8],
        ttl: Duration,
        origin: Origin,
    ) -> BoxFuture<'a, Result<Commit, StoreError>> {
        Box::pin(async move {
            self.round_trip(key);
            let sent_us = wall_clock_us();
            let commit = self.inner.commit(key, lease, bytes, ttl, origin).await;
            if let Ok(Commit::Stored) = commit {
                self.meter(key, |meter| meter.committed_at_us = Some(sent_us));
            }
            commit
        })
    }

    fn release<'a>(
        &'a self,
        key: &'a StoreKey,
        lease: &'a Lease,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.round_trip(key);
        self.inner.release(key, lease)
    }

    fn set<'a>(
        &'a self,
        key: &'a StoreKey,
        bytes: &'a [u8],
        ttl: Duration,
        origin: Origin,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.round_trip(key);
        self.inner.set(key, bytes, ttl, origin)
    }

    fn invalidate<'a>(
        &'a self,
        key: &'a StoreKey,
        origin: Origin,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.round_trip(key);
        self.inner.invalidate(key, origin)
    }

    fn tag_versions<'a>(
        &'a self,
        namespace: &'a str,
        tags: &'a [Arc<str>],
        retention: Duration,
        origin: Origin,
    ) -> BoxFuture<'a, Result<Vec<Arc<str>>, StoreError>> {
        self.inner.tag_versions(namespace, tags, retention, origin)
    }

    fn invalidate_tag<'a>(
        &'a self,
        namespace: &'a str,
        tag: &'a str,
        retention: Duration,
        origin: Origin,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.inner.invalidate_tag(namespace, tag, retention, origin)
    }

    fn call_bound(&self) -> Option<Duration> {
        self.inner.call_bound()
    }

    fn backplane(&self, namespace: &str, sink: Weak<dyn ChangeSink>) -> bool {
        self.notifications && self.inner.backplane(namespace, sink)
    }

    fn attach(&self, namespace: &str) {
        if self.notifications {
            self.inner.attach(namespace);
        }
    }

    fn listen(&self, key: &StoreKey) -> Listener {
        if self.notifications {
            self.inner.listen(key)
        } else {
            Listener::never()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn counts_round_trips_and_commit_times_per_key() {
        let store = MeteredStore::new(corral::MemoryStore::new(), true);
        let cache = corral::Cache::<String>::builder("metered")
            .shared_store(Arc::clone(&store) as Arc<dyn Store>)
            .build()
            .expect("cache");
        let value = cache
            .get_or_fill("k", || async { Ok::<_, std::io::Error>("v".to_owned()) })
            .await
            .expect("fill");
        assert_eq!(value, "v");
        let seen = store.take();
        let meter = seen.get("k").expect("key metered");
        assert_eq!(
            meter.round_trips, 3,
            "the first read, the lease, then the commit"
        );
        assert!(meter.committed_at_us.is_some());
        assert!(store.take().is_empty());
    }
}

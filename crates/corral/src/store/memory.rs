//! An in-process shared store: the embedded stand-in for Redis when several
//! cache instances in one process should share values and leases (tests,
//! single-process deployments that want leases). Its one clock is tokio's,
//! so it follows `tokio::time::pause()`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::time::Instant;

use super::{
    new_version, BoxFuture, Change, ChangeSink, Commit, Event, Grant, Lease, LeaseRequest,
    Listener, Lookup, Notifier, Origin, Sinks, Store, StoreKey, Stored,
};
use crate::data::error::StoreError;

#[derive(Debug, Default)]
struct Slot {
    value: Option<(Vec<u8>, Instant)>,
    lease: Option<(Arc<str>, Instant)>,
    fence: Option<(Arc<str>, Instant)>,
}

impl Slot {
    fn expire(&mut self, now: Instant) {
        if self.value.as_ref().is_some_and(|(_, at)| *at <= now) {
            self.value = None;
        }
        if self.lease.as_ref().is_some_and(|(_, at)| *at <= now) {
            self.lease = None;
        }
        if self.fence.as_ref().is_some_and(|(_, at)| *at <= now) {
            self.fence = None;
        }
    }

    fn is_empty(&self) -> bool {
        self.value.is_none() && self.lease.is_none() && self.fence.is_none()
    }

    fn owns_lease(&self, token: &str) -> bool {
        self.lease.as_ref().is_some_and(|(t, _)| &**t == token)
    }

    fn holds_fence(&self, token: &str) -> bool {
        self.fence.as_ref().is_some_and(|(t, _)| &**t == token)
    }

    /// The key's generation: its fence token, if any.
    fn generation(&self) -> Option<Arc<str>> {
        self.fence.as_ref().map(|(token, _)| token.clone())
    }
}

#[derive(Debug)]
struct State {
    slots: HashMap<StoreKey, Slot>,
    /// Tag versions by namespace and tag, with when they are forgotten.
    tags: HashMap<TagName, (Arc<str>, Instant)>,
    rng: fastrand::Rng,
}

/// A tag of a namespace: `(namespace, tag)`.
type TagName = (Arc<str>, Arc<str>);

/// An in-process [`Store`] with leases, fences, notifications and a
/// backplane, bounded to `max_keys` keys (when full, expired keys are
/// dropped first, then arbitrary ones). Backplane messages are delivered
/// synchronously, inside the write call that makes them. Only its own calls
/// write it, so every lease it holds has an expiry and a token: there is no
/// broken lease or foreign value to take over here.
#[derive(Clone)]
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
    notifier: Notifier,
    sinks: Arc<Sinks>,
    max_keys: usize,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("max_keys", &self.max_keys)
            .finish_non_exhaustive()
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// A store bounded to 100,000 keys.
    pub fn new() -> Self {
        Self::with_max_keys(100_000)
    }

    /// A store bounded to `max_keys` keys (at least 1).
    pub fn with_max_keys(max_keys: usize) -> Self {
        let seed =
            std::hash::BuildHasher::hash_one(&std::collections::hash_map::RandomState::new(), 0u8);
        Self {
            state: Arc::new(Mutex::new(State {
                slots: HashMap::new(),
                tags: HashMap::new(),
                rng: fastrand::Rng::with_seed(seed),
            })),
            notifier: Notifier::new(),
            sinks: Arc::new(Sinks::default()),
            max_keys: max_keys.max(1),
        }
    }

    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    /// Writes raw bytes as the value of `key`, bypassing fences and
    /// notifications: for tests that plant foreign or corrupt bytes.
    pub fn put_raw(&self, key: &StoreKey, bytes: Vec<u8>, ttl: Duration) {
        let now = Instant::now();
        let mut state = self.lock();
        state.slots.entry(key.clone()).or_default().value = Some((bytes, now + ttl));
    }

    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    /// The raw value bytes of `key`, if present.
    pub fn raw(&self, key: &StoreKey) -> Option<Vec<u8>> {
        let now = Instant::now();
        let mut state = self.lock();
        let slot = state.slots.get_mut(key)?;
        slot.expire(now);
        slot.value.as_ref().map(|(bytes, _)| bytes.clone())
    }

    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    /// Forgets every tag and clear version, as a store that evicted them
    /// (or was flushed or restarted) would.
    pub fn forget_tag_versions(&self) {
        self.lock().tags.clear();
    }

    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    /// Forgets everything — values, leases, fences and versions — as a
    /// flushed store or one restarted without persistence would.
    pub fn flush(&self) {
        let mut state = self.lock();
        state.slots.clear();
        state.tags.clear();
    }

    /// Number of keys holding a value, lease or fence.
    pub fn len(&self) -> usize {
        self.lock().slots.len()
    }

    /// Whether the store holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Tells every live sink of `namespace` about `event`, made by `origin`.
    fn announce(&self, namespace: &str, origin: Origin, event: Event) {
        let change = Change { origin, event };
        for sink in self.sinks.live(namespace) {
            sink.changed(&change);
        }
    }

    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    /// Tells every attached sink that messages may have been lost, as a
    /// store does after its subscription was interrupted: for tests of what
    /// caches do then.
    pub fn simulate_lost_messages(&self) {
        for sink in self.sinks.all_live() {
            sink.lost();
        }
    }

    fn id(key: &StoreKey) -> Arc<str> {
        format!("{}\u{0}{}", key.namespace(), key.key()).into()
    }

    /// Runs `op` on the key's slot after expiring it, then drops the slot if
    /// it became empty and enforces the key bound.
    fn with_slot<R>(
        &self,
        key: &StoreKey,
        op: impl FnOnce(&mut Slot, &mut fastrand::Rng, Instant) -> R,
    ) -> R {
        let now = Instant::now();
        let mut guard = self.lock();
        let state = &mut *guard;
        let slot = state.slots.entry(key.clone()).or_default();
        slot.expire(now);
        let result = op(slot, &mut state.rng, now);
        if slot.is_empty() {
            state.slots.remove(key);
        } else if state.slots.len() > self.max_keys {
            evict(&mut state.slots, key, now, self.max_keys);
        }
        result
    }
}

fn evict(slots: &mut HashMap<StoreKey, Slot>, keep: &StoreKey, now: Instant, max: usize) {
    slots.retain(|_, slot| {
        slot.expire(now);
        !slot.is_empty()
    });
    while slots.len() > max {
        let Some(victim) = slots.keys().find(|k| *k != keep).cloned() else {
            return;
        };
        slots.remove(&victim);
    }
}

fn token(rng: &mut fastrand::Rng) -> Arc<str> {
    format!("{:032x}", rng.u128(..)).into()
}

/// How a new version of `tag` is announced.
fn tag_event(tag: &str) -> Event {
    if tag.is_empty() {
        Event::Cleared
    } else {
        Event::TagInvalidated(tag.into())
    }
}

fn ready<'a, T: Send + 'a>(value: T) -> BoxFuture<'a, T> {
    Box::pin(std::future::ready(value))
}

impl Store for MemoryStore {
    fn get_or_lease<'a>(
        &'a self,
        key: &'a StoreKey,
        request: &'a LeaseRequest,
    ) -> BoxFuture<'a, Result<Lookup, StoreError>> {
        let lookup = self.with_slot(key, |slot, rng, now| {
            match (&request.grant, &slot.value) {
                (Grant::IfNoValue, Some((bytes, expires))) => {
                    return Lookup::Hit(Stored {
                        bytes: bytes.clone(),
                        remaining: Some(expires.saturating_duration_since(now)),
                        generation: slot.generation(),
                    });
                }
                (Grant::OverGeneration(_), None) => return Lookup::Changed,
                (Grant::OverGeneration(expected), Some(_)) if *expected != slot.generation() => {
                    return Lookup::Changed;
                }
                _ => {}
            }
            if let Some((_, expires)) = &slot.lease {
                return Lookup::Held {
                    remaining: Some(expires.saturating_duration_since(now)),
                };
            }
            let token = token(rng);
            slot.lease = Some((token.clone(), now + request.lease_ttl));
            slot.fence = Some((token.clone(), now + request.fence_ttl));
            Lookup::Granted(Lease::new(token))
        });
        ready(Ok(lookup))
    }

    fn get<'a>(&'a self, key: &'a StoreKey) -> BoxFuture<'a, Result<Option<Stored>, StoreError>> {
        let stored = self.with_slot(key, |slot, _, now| {
            slot.value.as_ref().map(|(bytes, expires)| Stored {
                bytes: bytes.clone(),
                remaining: Some(expires.saturating_duration_since(now)),
                generation: slot.generation(),
            })
        });
        ready(Ok(stored))
    }

    fn renew<'a>(
        &'a self,
        key: &'a StoreKey,
        lease: &'a Lease,
        request: &'a LeaseRequest,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let renewed = self.with_slot(key, |slot, _, now| {
            if !slot.owns_lease(lease.token()) {
                return false;
            }
            slot.lease = Some((lease.token.clone(), now + request.lease_ttl));
            if slot.holds_fence(lease.token()) {
                slot.fence = Some((lease.token.clone(), now + request.fence_ttl));
            }
            true
        });
        ready(Ok(renewed))
    }

    fn commit<'a>(
        &'a self,
        key: &'a StoreKey,
        lease: &'a Lease,
        bytes: &'a [u8],
        ttl: Duration,
        origin: Origin,
    ) -> BoxFuture<'a, Result<Commit, StoreError>> {
        let commit = self.with_slot(key, |slot, _, now| {
            let fenced = slot.holds_fence(lease.token());
            if slot.owns_lease(lease.token()) {
                slot.lease = None;
            }
            if fenced {
                slot.value = Some((bytes.to_vec(), now + ttl));
                slot.fence = Some((lease.token.clone(), now + ttl));
                Commit::Stored
            } else {
                Commit::Refused
            }
        });
        self.notifier.notify(&Self::id(key));
        if commit == Commit::Stored {
            self.announce(key.namespace(), origin, Event::Filled(key.key().into()));
        }
        ready(Ok(commit))
    }

    fn release<'a>(
        &'a self,
        key: &'a StoreKey,
        lease: &'a Lease,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.with_slot(key, |slot, _, _| {
            if slot.owns_lease(lease.token()) {
                slot.lease = None;
            }
            if slot.holds_fence(lease.token()) {
                slot.fence = None;
            }
        });
        self.notifier.notify(&Self::id(key));
        ready(Ok(()))
    }

    fn set<'a>(
        &'a self,
        key: &'a StoreKey,
        bytes: &'a [u8],
        ttl: Duration,
        origin: Origin,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.with_slot(key, |slot, rng, now| {
            slot.value = Some((bytes.to_vec(), now + ttl));
            slot.lease = None;
            slot.fence = Some((token(rng), now + ttl));
        });
        self.notifier.notify(&Self::id(key));
        self.announce(key.namespace(), origin, Event::Written(key.key().into()));
        ready(Ok(()))
    }

    fn invalidate<'a>(
        &'a self,
        key: &'a StoreKey,
        origin: Origin,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.with_slot(key, |slot, _, _| {
            *slot = Slot::default();
        });
        self.notifier.notify(&Self::id(key));
        self.announce(key.namespace(), origin, Event::Removed(key.key().into()));
        ready(Ok(()))
    }

    fn tag_versions<'a>(
        &'a self,
        namespace: &'a str,
        tags: &'a [Arc<str>],
        retention: Duration,
        origin: Origin,
    ) -> BoxFuture<'a, Result<Vec<Arc<str>>, StoreError>> {
        let now = Instant::now();
        let mut created = Vec::new();
        let versions = {
            let mut state = self.lock();
            state.tags.retain(|_, (_, until)| *until > now);
            let namespace: Arc<str> = namespace.into();
            tags.iter()
                .map(|tag| {
                    let name = (Arc::clone(&namespace), Arc::clone(tag));
                    if let Some((version, _)) = state.tags.get(&name) {
                        return Arc::clone(version);
                    }
                    let version = new_version(&mut state.rng);
                    state
                        .tags
                        .insert(name, (Arc::clone(&version), now + retention));
                    created.push(Arc::clone(tag));
                    version
                })
                .collect()
        };
        for tag in created {
            self.announce(namespace, origin, tag_event(&tag));
        }
        ready(Ok(versions))
    }

    fn invalidate_tag<'a>(
        &'a self,
        namespace: &'a str,
        tag: &'a str,
        retention: Duration,
        origin: Origin,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        {
            let now = Instant::now();
            let mut state = self.lock();
            let version = new_version(&mut state.rng);
            state
                .tags
                .insert((namespace.into(), tag.into()), (version, now + retention));
        }
        self.announce(namespace, origin, tag_event(tag));
        ready(Ok(()))
    }

    fn backplane(&self, namespace: &str, sink: Weak<dyn ChangeSink>) -> bool {
        self.sinks.attach(namespace, sink);
        true
    }

    fn listen(&self, key: &StoreKey) -> Listener {
        self.notifier.listen(Self::id(key))
    }
}

//! An in-process shared store: the embedded stand-in for Redis when several
//! cache instances in one process should share values and leases (tests,
//! single-process deployments that want leases). Its one clock is tokio's,
//! so it follows `tokio::time::pause()`.

mod slot;
mod table;
mod tags;

use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::time::Instant;

use self::slot::Slot;
use self::table::Table;
use self::tags::Tags;
use super::{
    new_version, BoxFuture, Change, ChangeSink, Commit, Event, Grant, Lease, LeaseRequest,
    Listener, Lookup, Notifier, Origin, Sinks, Store, StoreKey, Stored,
};
use crate::data::error::StoreError;
use crate::sync::lock_std;

#[derive(Debug)]
struct State {
    slots: Table,
    /// Tag versions by namespace and tag, with when they are forgotten.
    tags: Tags,
    rng: fastrand::Rng,
}

/// An in-process [`Store`] with leases, fences, notifications and a
/// backplane. Backplane messages are delivered synchronously, inside the
/// write call that makes them. Only its own calls write it, so every lease
/// it holds has an expiry and a token: there is no broken lease or foreign
/// value to take over here.
///
/// # The bound
///
/// It holds at most `max_keys` keys (100,000 with [`new`](Self::new)); a
/// key counts while it holds a value, a lease or a fence. A call that would
/// hold one more makes room without scanning the keys (a few ordered-map
/// updates, logarithmic in their number), by dropping, in this order:
/// 1. keys whose time to live is over;
/// 2. the least recently used key holding a value and no fill in flight
///    (every call on a key — a read, a lease, a commit — is a use);
/// 3. only when every key holds a fill in flight (a live lease, or the
///    fence of a granted lease), the least recently used of those.
///
/// What a user sees at the bound: a dropped value is a miss, refilled once
/// under a lease by its next read. A fill in flight keeps its lease and
/// fence while any value can go instead, so its commit lands. A fill that
/// loses them (step 3) follows the rules of a store that forgets (see
/// [the module](super#a-store-forgets)): its commit is refused, so nothing
/// it read before the loss is stored over a newer write, and its callers
/// still get the value it computed; meanwhile another caller may be granted
/// the key's lease and fill it again. Tag and clear versions are not
/// counted: each is kept for its retention from its last use.
#[derive(Clone)]
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
    notifier: Notifier,
    sinks: Arc<Sinks>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let max_keys = self.lock().slots.max();
        f.debug_struct("MemoryStore")
            .field("max_keys", &max_keys)
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

    /// A store bounded to `max_keys` keys (at least 1; see
    /// [the bound](Self#the-bound)).
    pub fn with_max_keys(max_keys: usize) -> Self {
        Self {
            state: Arc::new(Mutex::new(State {
                slots: Table::new(max_keys),
                tags: Tags::default(),
                rng: crate::rng::seeded(),
            })),
            notifier: Notifier::new(),
            sinks: Arc::new(Sinks::default()),
        }
    }

    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    /// Writes raw bytes as the value of `key`, bypassing fences and
    /// notifications: for tests that plant foreign or corrupt bytes.
    pub fn put_raw(&self, key: &StoreKey, bytes: Vec<u8>, ttl: Duration) {
        let now = Instant::now();
        self.lock()
            .slots
            .with(key, now, |slot| slot.value = Some((bytes, now + ttl)));
    }

    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    /// The raw value bytes of `key`, if present.
    pub fn raw(&self, key: &StoreKey) -> Option<Vec<u8>> {
        let now = Instant::now();
        self.lock().slots.with(key, now, |slot| {
            slot.value.as_ref().map(|(bytes, _)| bytes.clone())
        })
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

    /// Number of keys holding a value, lease or fence (never more than the
    /// bound; parts whose time is over count until a call looks at them).
    pub fn len(&self) -> usize {
        self.lock().slots.len()
    }

    /// Whether the store holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock_std(&self.state)
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

    /// Runs `op` on the key's slot after expiring it, as a use of the key;
    /// then drops the slot if it became empty and keeps the key bound.
    fn with_slot<R>(
        &self,
        key: &StoreKey,
        op: impl FnOnce(&mut Slot, &mut fastrand::Rng, Instant) -> R,
    ) -> R {
        let now = Instant::now();
        let mut guard = self.lock();
        let state = &mut *guard;
        let rng = &mut state.rng;
        state.slots.with(key, now, |slot| op(slot, rng, now))
    }
}

fn token(rng: &mut fastrand::Rng) -> Arc<str> {
    super::new_token(rng).into()
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
            match &request.grant {
                Grant::IfNoValue => {
                    if let Some(stored) = slot.stored(now) {
                        return Lookup::Hit(stored);
                    }
                }
                Grant::OverGeneration(expected)
                    if slot.value.is_none() || *expected != slot.generation() =>
                {
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
            slot.fence_fill(token.clone(), now + request.fence_ttl);
            Lookup::Granted(Lease::new(token))
        });
        ready(Ok(lookup))
    }

    fn get<'a>(&'a self, key: &'a StoreKey) -> BoxFuture<'a, Result<Option<Stored>, StoreError>> {
        ready(Ok(self.with_slot(key, |slot, _, now| slot.stored(now))))
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
                slot.fence_fill(lease.token.clone(), now + request.fence_ttl);
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
                slot.fence_value(lease.token.clone(), now + ttl);
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
            slot.fence_value(token(rng), now + ttl);
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
        _home: u32,
        tags: &'a [Arc<str>],
        retention: Duration,
        origin: Origin,
    ) -> BoxFuture<'a, Result<Vec<Arc<str>>, StoreError>> {
        let now = Instant::now();
        let mut created = Vec::new();
        let versions = {
            let mut state = self.lock();
            let state = &mut *state;
            state.tags.forget_expired(now);
            let namespace: Arc<str> = namespace.into();
            let until = now + retention;
            tags.iter()
                .map(|tag| {
                    let name = (Arc::clone(&namespace), Arc::clone(tag));
                    if let Some(version) = state.tags.read(&name, until) {
                        return version;
                    }
                    let version = new_version(&mut state.rng);
                    state.tags.insert(name, Arc::clone(&version), until);
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
                .insert((namespace.into(), tag.into()), version, now + retention);
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

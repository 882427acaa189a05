//! Shared stores: the bytes tier that several cache instances — in one
//! process or in many — read and fill through, with fill leases, fences and
//! notifications.
//!
//! A cache's user needs nothing here but a store to hand to
//! [`CacheBuilder::store`](crate::CacheBuilder::store): [`MemoryStore`]
//! (embedded), or `RedisStore` / `MemcachedStore` at the crate root. The
//! rest — the [`Store`] trait and the types of its calls, the backplane
//! ([`ChangeSink`], [`Change`]), wake-ups ([`Notifier`], [`Listener`]) —
//! is for implementers of a store.
//!
//! A store holds, per logical key, three things:
//! - the **value**: opaque bytes (corral's versioned envelope; a store never
//!   looks inside) with a time to live;
//! - the **lease**: the token of the one fill allowed to run for the key,
//!   with its own time to live, renewed while the fill runs;
//! - the **fence**: the token of the last lease grant, or of the write that
//!   produced the current value. Granting a lease sets it to the lease's
//!   token; a successful commit keeps it (for the value's life); `set` sets a
//!   new random token; `invalidate` deletes it. A commit carries the token it
//!   was granted and is refused unless the fence still holds that token, so
//!   a fill that started before a newer write, or whose lease lapsed and was
//!   granted to another leader, cannot overwrite newer data.
//!
//! A value read comes with its **generation**: a token that identifies the
//! write that produced it (Redis embeds the writing token in the value;
//! [`MemoryStore`] reads the fence). A refresh asks for its lease only over
//! the generation it read ([`Grant::OverGeneration`]), so a write or
//! invalidation that lands between its read and its grant wins too. Tokens
//! are random, so a store that loses its data (a restart without
//! persistence, an eviction) refuses old commits instead of matching them
//! again.
//!
//! Stores also carry the **backplane** ([`Store::backplane`], [`Change`]):
//! every write announces what it changed, so caches with an in-process tier
//! evict it; and the versions of tags ([`Store::tag_versions`],
//! [`Store::invalidate_tag`]).
//!
//! # A store forgets
//!
//! Any key may vanish at any moment (an LRU eviction, a flush, a restart
//! without persistence), and every key is laid out so that losing it makes
//! a miss or a refused commit, never a hit: a lost value is a miss; a lost
//! lease lets another fill start, whose grant moves the fence; a lost fence
//! refuses the commit that expected it; a lost tag or clear version is
//! replaced by a new random one on its next read ([`Store::tag_versions`]),
//! so the entries stamped with the lost one are misses from then on.
//!
//! What a loss costs depends on where the versions live. A store that can
//! lose a part of its data — a memcached server, a Redis Cluster shard —
//! keeps a copy of each version in each part ([`Store::version_home`]),
//! beside the entries it guards, and every entry is checked against the
//! copy of its own part: losing a part costs the refills of its own
//! entries, never the namespace's. Per store:
//!
//! | store | lost | refills |
//! |---|---|---|
//! | [`MemoryStore`] | a version left unused for its retention | its tag's entries (all, for the clear version) |
//! | Redis, one server | everything (flush, restart) | every entry |
//! | Redis, one server | a version key (`DEL`, eviction) | its tag's entries (all, for the clear version); reads and writes touch the clear version, so LRU evicts it after the entries |
//! | Redis Cluster | a shard's data | that shard's entries only |
//! | Redis Cluster | one bucket's copy | that bucket's entries of its tag |
//! | memcached | a server (removed, restarted, flushed) | that server's entries only |
//! | memcached | one server's copy | that server's entries of its tag |
//!
//! The details are on each store (`RedisStore`: "What a loss costs";
//! `MemcachedStore`: "Tags, and what a loss costs").
//!
//! Each store judges time by one clock of its own: Redis by the server's
//! clock (`PX` and `PTTL`), [`MemoryStore`] by tokio's clock. No timestamp
//! written by one host is compared with another host's clock.

mod change;
mod memory;
mod notify;
mod patience;

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::time::Duration;

pub(crate) use change::Sinks;
pub use change::{Change, ChangeSink, Event, FlushReason, Origin};
pub use memory::MemoryStore;
pub use notify::{Listener, Notifier};
pub(crate) use patience::{current as current_patience, patiently, patiently_if, Patience};
pub use patience::{patience, stretched};

use crate::data::error::StoreError;

/// What [`CacheBuilder::store`](crate::CacheBuilder::store) takes: a
/// [`Store`] by value, or one already shared as an `Arc` (of its own type
/// or an `Arc<dyn Store>`). Sealed: implement [`Store`] instead.
pub trait IntoStore: sealed::Sealed {
    /// The store, shared.
    fn into_store(self) -> Arc<dyn Store>;
}

impl<S: Store> IntoStore for S {
    fn into_store(self) -> Arc<dyn Store> {
        Arc::new(self)
    }
}

impl<S: Store> IntoStore for Arc<S> {
    fn into_store(self) -> Arc<dyn Store> {
        self
    }
}

impl IntoStore for Arc<dyn Store> {
    fn into_store(self) -> Arc<dyn Store> {
        self
    }
}

mod sealed {
    use std::sync::Arc;

    /// Keeps [`IntoStore`](super::IntoStore)'s implementations to this
    /// module.
    pub trait Sealed {}

    impl<S: super::Store> Sealed for S {}
    impl<S: super::Store> Sealed for Arc<S> {}
    impl Sealed for Arc<dyn super::Store> {}
}

/// A boxed, sendable future: what store methods return, so stores can be
/// used as `Arc<dyn Store>`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The address of one logical key in a shared store: the cache's namespace
/// (its name and schema version) and the user's key. Stores lay it out as
/// they need; the pair is unique per cache, version and key.
#[derive(Clone)]
pub struct StoreKey {
    /// The namespace, then the key: a cache builds one per store call, and
    /// sharing the namespace instead (an `Arc`) would write its reference
    /// count, a line every worker thread writes.
    joined: Joined,
    /// Where the key starts in `joined`.
    split: usize,
}

/// Namespace and key bytes up to which a [`StoreKey`] needs no allocation.
const INLINE: usize = 64;

/// A namespace and key, concatenated: inline when short (the common case;
/// nothing to allocate per store call), on the heap otherwise.
#[derive(Clone)]
enum Joined {
    Inline(arrayvec::ArrayString<INLINE>),
    Heap(Box<str>),
}

impl Joined {
    fn as_str(&self) -> &str {
        match self {
            Self::Inline(joined) => joined,
            Self::Heap(joined) => joined,
        }
    }
}

impl StoreKey {
    /// The address of `key` in `namespace`. A namespace is a cache's
    /// (`<name>:v<version>`, see [`Cache::namespace`](crate::Cache::namespace)):
    /// stores rely on its characters being those of a cache name (ASCII
    /// letters, digits, `_`, `-`, `.`); Redis, for one, finds a key's hash
    /// tag after it. Keys may hold any character.
    pub fn new(namespace: impl Into<Arc<str>>, key: &str) -> Self {
        Self::of(&namespace.into(), key)
    }

    /// [`new`](Self::new) from borrowed parts.
    pub(crate) fn of(namespace: &str, key: &str) -> Self {
        let mut inline = arrayvec::ArrayString::new();
        let joined = match (inline.try_push_str(namespace), inline.try_push_str(key)) {
            (Ok(()), Ok(())) => Joined::Inline(inline),
            _ => Joined::Heap([namespace, key].concat().into_boxed_str()),
        };
        Self {
            joined,
            split: namespace.len(),
        }
    }

    /// The namespace (`name` and schema `version` of the cache, as
    /// `name:v{version}`).
    pub fn namespace(&self) -> &str {
        self.joined.as_str().get(..self.split).unwrap_or_default()
    }

    /// The user's key.
    pub fn key(&self) -> &str {
        self.joined.as_str().get(self.split..).unwrap_or_default()
    }
}

impl PartialEq for StoreKey {
    fn eq(&self, other: &Self) -> bool {
        self.split == other.split && self.joined.as_str() == other.joined.as_str()
    }
}

impl Eq for StoreKey {}

impl std::hash::Hash for StoreKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.joined.as_str().hash(state);
        self.split.hash(state);
    }
}

impl std::fmt::Debug for StoreKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreKey")
            .field("namespace", &self.namespace())
            .field("key", &self.key())
            .finish()
    }
}

/// Whether `bytes` read from a store are a tag version: 1 to 64 printable
/// ASCII bytes. Anything else found where a version belongs is replaced
/// as if it were absent ([`Store::tag_versions`]).
#[cfg_attr(not(any(feature = "redis", feature = "memcached")), allow(dead_code))]
pub(crate) fn is_version(bytes: &[u8]) -> bool {
    (1..=64).contains(&bytes.len()) && bytes.iter().all(|byte| byte.is_ascii_graphic())
}

/// A new random tag version: 16 hex digits (64 random bits; a version only
/// has to differ from the earlier versions of its own tag).
pub(crate) fn new_version(rng: &mut fastrand::Rng) -> Arc<str> {
    let mut version = String::with_capacity(16);
    crate::data::key::push_hex(&mut version, u128::from(rng.u64(..)), 16);
    version.into()
}

/// A new random lease token: 32 hex digits (128 random bits, drawn per
/// grant, so a store that lost a lease never matches an old token again).
pub(crate) fn new_token(rng: &mut fastrand::Rng) -> String {
    let mut token = String::with_capacity(32);
    crate::data::key::push_hex(&mut token, rng.u128(..), 32);
    token
}

/// A fill lease granted to one leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    token: Arc<str>,
    over_value: bool,
}

impl Lease {
    /// A lease with this token (also the fence its commit must match),
    /// granted where a value may be present: its commit may replace one.
    pub fn new(token: impl Into<Arc<str>>) -> Self {
        Self {
            token: token.into(),
            over_value: true,
        }
    }

    /// A lease with this token granted where no value was present. Until
    /// its commit, the only writes of the key are ones that end the lease
    /// (a write or an invalidation by the cache drops it, so the commit is
    /// refused) or writes by something other than a cache: its commit
    /// replaces no value any cache keeps, so a store need not tell other
    /// caches of it.
    pub fn over_no_value(token: impl Into<Arc<str>>) -> Self {
        Self {
            token: token.into(),
            over_value: false,
        }
    }

    /// The lease's token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Whether the lease was granted where a value may be present
    /// ([`new`](Self::new)) rather than where none was
    /// ([`over_no_value`](Self::over_no_value)).
    pub fn over_value(&self) -> bool {
        self.over_value
    }
}

/// How to ask for a lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRequest {
    /// How long the lease lives unless renewed.
    pub lease_ttl: Duration,
    /// How long the fence of a granted lease lives (the longest a leader
    /// may take to commit).
    pub fence_ttl: Duration,
    /// When a present value allows the grant.
    pub grant: Grant,
}

/// When [`Store::get_or_lease`] may grant a lease.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Grant {
    /// Only when no value is present; a present value is returned instead.
    IfNoValue,
    /// Even over a present value (it could not be decoded and must be
    /// overwritten).
    OverAnyValue,
    /// Only over the present value of this generation (the fence token read
    /// with it; `None`: it had none) — for refreshing a value read earlier.
    /// If the value is gone or was written anew meanwhile, the answer is
    /// [`Lookup::Changed`].
    OverGeneration(Option<Arc<str>>),
}

/// A value read from a store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// The envelope bytes.
    pub bytes: Vec<u8>,
    /// The value's remaining time to live, by the store's clock.
    pub remaining: Option<Duration>,
    /// The generation of the value read: a token identifying the write
    /// that produced it (`None`: unknown, e.g. bytes written by something
    /// else).
    pub generation: Option<Arc<str>>,
}

/// The answer of [`Store::get_or_lease`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Lookup {
    /// A value is present.
    Hit(Stored),
    /// No value; this caller holds the lease and should fill.
    Granted(Lease),
    /// No value (or a value allowed to be replaced); another fill holds the
    /// lease.
    Held {
        /// The lease's remaining time to live, if known.
        remaining: Option<Duration>,
    },
    /// [`Grant::OverGeneration`] was asked, but the value is gone or of
    /// another generation: nothing was granted.
    Changed,
}

/// The answer of [`Store::commit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Commit {
    /// The value was written.
    Stored,
    /// The fence moved (a newer write, an invalidation or a new lease
    /// grant): nothing was written.
    Refused,
}

/// A shared bytes store with fill leases, fenced commits, notifications and
/// a backplane.
///
/// Every method is one round trip to the store; [`get`](Store::get) should
/// be the cheapest (a cache without an L1 reads with it first, and asks for
/// the lease only when it misses; a cache with one reads with it the keys
/// the store [`recalls`](Store::recalls)). Implementations bound each
/// call by their own operation timeout and report failures as
/// [`StoreError`]; they never panic.
pub trait Store: Send + Sync + Debug + 'static {
    /// Returns the value, or grants the lease to this caller, or reports it
    /// held by another — atomically.
    ///
    /// A lease that no grant of this store could have left — one with no
    /// expiry, or contents that are not a lease token (written by something
    /// else) — is broken: it is taken over as if absent, never waited for.
    /// Data of a foreign kind where the value belongs (another Redis type,
    /// say) is returned as bytes that do not decode, so the cache counts a
    /// miss and asks for the lease over it.
    ///
    /// Its asker may wait longer than the store's own timeout for the
    /// answer (see [`patience`]).
    fn get_or_lease<'a>(
        &'a self,
        key: &'a StoreKey,
        request: &'a LeaseRequest,
    ) -> BoxFuture<'a, Result<Lookup, StoreError>>;

    /// Reads the value. Data of a foreign kind where the value belongs
    /// reads as bytes that do not decode (a miss), not as an error.
    fn get<'a>(&'a self, key: &'a StoreKey) -> BoxFuture<'a, Result<Option<Stored>, StoreError>>;

    /// Whether this store remembers `key` holding a value it expects to be
    /// alive (read or written before, its time to live not yet over): a
    /// hint, never a promise. A cache with an L1 asks such a key with a
    /// plain [`get`](Store::get), a store's cheapest request, and any
    /// other key with [`get_or_lease`](Store::get_or_lease), which answers
    /// a value or grants the lease in one request. The default remembers
    /// nothing.
    fn recalls(&self, key: &StoreKey) -> bool {
        let _ = key;
        false
    }

    /// Reads the values of `keys`, in order: as [`get`](Store::get) each,
    /// in one round trip where the store allows (Redis: one pipeline per
    /// cluster slot, sent together). The default reads them concurrently.
    fn get_many<'a>(
        &'a self,
        keys: &'a [StoreKey],
    ) -> BoxFuture<'a, Result<Vec<Option<Stored>>, StoreError>> {
        Box::pin(async move {
            let reads = keys.iter().map(|key| self.get(key));
            futures_util::future::join_all(reads)
                .await
                .into_iter()
                .collect()
        })
    }

    /// Extends the lease and its fence if `lease` still owns them; returns
    /// whether it did.
    fn renew<'a>(
        &'a self,
        key: &'a StoreKey,
        lease: &'a Lease,
        request: &'a LeaseRequest,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Writes `bytes` for `ttl` if the fence still holds the lease's token
    /// (and keeps that token as the value's generation for `ttl`), releases
    /// the lease if still owned, and notifies listeners — atomically. A
    /// stored value is announced on the backplane as [`Event::Filled`] from
    /// `origin`. A store may stay silent when no one can be concerned: a
    /// value that replaced none, and no caller of another cache waiting for
    /// the lease (one that got [`Lookup::Held`]).
    ///
    /// A commit that fails (bytes too large for the store, a server error)
    /// writes nothing and may keep the lease: when the store answered, the
    /// cache [`release`](Store::release)s it before answering its callers,
    /// so a lease is left to its TTL only when the store does not answer.
    fn commit<'a>(
        &'a self,
        key: &'a StoreKey,
        lease: &'a Lease,
        bytes: &'a [u8],
        ttl: Duration,
        origin: Origin,
    ) -> BoxFuture<'a, Result<Commit, StoreError>>;

    /// Gives up a lease without writing (the fill failed), if still owned,
    /// and notifies listeners so a waiter can take over (a store may stay
    /// silent when no caller of another cache waits for the lease).
    fn release<'a>(
        &'a self,
        key: &'a StoreKey,
        lease: &'a Lease,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Writes `bytes` for `ttl` unconditionally, moves the fence to a new
    /// random generation (so fills and refreshes in flight cannot overwrite
    /// it), drops any lease and notifies listeners; announced on the
    /// backplane as [`Event::Written`] from `origin`.
    fn set<'a>(
        &'a self,
        key: &'a StoreKey,
        bytes: &'a [u8],
        ttl: Duration,
        origin: Origin,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Deletes the value, moves the fence, drops any lease and notifies
    /// listeners; announced on the backplane as [`Event::Removed`] from
    /// `origin`.
    fn invalidate<'a>(
        &'a self,
        key: &'a StoreKey,
        origin: Origin,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Where the copies of the tag and clear versions that guard `key`'s
    /// entry live: an id of this store's choosing (a server, a group of
    /// slots), the same for every key whose entry lives in the same place,
    /// and stable for the life of the store. A store that loses data a
    /// part at a time keeps one copy of each version per part, beside the
    /// entries it guards, so losing a part loses its entries and their
    /// versions together and nothing elsewhere. The default: 0, one copy
    /// of each version for the whole store.
    fn version_home(&self, key: &StoreKey) -> u32 {
        let _ = key;
        0
    }

    /// The current versions of `tags` in `namespace`, in order, as the
    /// copies at `home` ([`version_home`](Store::version_home)) hold them;
    /// the empty tag is the namespace's clear version. A tag without a version — never
    /// used, or its version was evicted, expired, flushed or lost in a
    /// restart — gets a new random one, created atomically (concurrent
    /// callers agree on one) and announced on the
    /// backplane like an invalidation ([`Event::TagInvalidated`], or
    /// [`Event::Cleared`] for the empty tag) from `origin`. So a version the
    /// store forgets is never read back as any earlier version: every entry
    /// stamped with the lost one becomes a miss. A stored version that is
    /// not a version (empty, over 64 bytes, not text, of another type) is
    /// replaced the same way. Every version read or created is kept for
    /// at least `retention` from now (a store may keep it longer, up to
    /// one and a half times that), so a tag in use keeps its version and
    /// one unused for that long is forgotten. One round trip where the
    /// store allows.
    fn tag_versions<'a>(
        &'a self,
        namespace: &'a str,
        home: u32,
        tags: &'a [Arc<str>],
        retention: Duration,
        origin: Origin,
    ) -> BoxFuture<'a, Result<Vec<Arc<str>>, StoreError>>;

    /// Moves `tag` of `namespace` to a new random version kept for
    /// `retention` (an entry filled under an older version is a miss from
    /// then on) at every home, then announces it on the backplane —
    /// [`Event::TagInvalidated`], or [`Event::Cleared`] for the empty tag.
    /// Each copy moves atomically; a home without a copy gets none (its
    /// first read creates a new one). An error means some copies may not
    /// have moved: the call should be repeated.
    fn invalidate_tag<'a>(
        &'a self,
        namespace: &'a str,
        tag: &'a str,
        retention: Duration,
        origin: Origin,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Delivers the backplane messages of `namespace` to `sink` for as long
    /// as it lives; returns whether this store has a backplane (the default
    /// has none and returns false).
    fn backplane(&self, namespace: &str, sink: Weak<dyn ChangeSink>) -> bool {
        let _ = (namespace, sink);
        false
    }

    /// One round trip that touches no key, to tell whether the store
    /// answers ([`Cache::health`](crate::Cache::health)). The default (a
    /// store in this process) answers at once.
    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async { Ok(()) })
    }

    /// The longest any call of this store takes before it fails with a
    /// timeout of its own, if it bounds its calls (calls made with a
    /// longer [`patience`] aside). A cache whose store
    /// timeout is no shorter relies on it instead of arming a timer of its
    /// own per call. The default: `None` (the cache always arms its own).
    fn call_bound(&self) -> Option<Duration> {
        None
    }

    /// Called once by each cache built on this store, with its namespace,
    /// so the store can subscribe to the namespace's notifications before
    /// the first waiter needs them. The default does nothing.
    fn attach(&self, namespace: &str) {
        let _ = namespace;
    }

    /// Starts listening for changes of `key` (commits, releases, writes).
    /// Listen before reading, so a change between the read and the wait is
    /// not missed.
    fn listen(&self, key: &StoreKey) -> Listener;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_short_printable_tokens() {
        let mut rng = fastrand::Rng::with_seed(7);
        let (a, b) = (new_version(&mut rng), new_version(&mut rng));
        assert_ne!(a, b);
        assert!(is_version(a.as_bytes()) && a.len() == 16, "{a}");
        for bad in [&b""[..], b"has space", b"\xff", &[b'a'; 65][..]] {
            assert!(!is_version(bad), "{bad:?}");
        }
        assert!(is_version(&[b'a'; 64]));
    }

    #[test]
    fn store_keys_split_back_into_their_parts_inline_or_not() {
        let long = "k".repeat(INLINE);
        for (namespace, key) in [
            ("users:v1", "user:42"),
            ("users:v1", ""),
            ("users:v1", long.as_str()),
            ("n:v1", "ключ"),
        ] {
            let skey = StoreKey::new(namespace, key);
            assert_eq!((skey.namespace(), skey.key()), (namespace, key));
            assert_eq!(skey, StoreKey::of(namespace, key));
        }
        assert!(matches!(
            StoreKey::of("a:v1", "b").joined,
            Joined::Inline(_)
        ));
        assert!(matches!(
            StoreKey::of("a:v1", &long).joined,
            Joined::Heap(_)
        ));
        // The same bytes split elsewhere are another key.
        assert_ne!(StoreKey::of("a:v1", "bc"), StoreKey::of("a:v1b", "c"));
    }
}

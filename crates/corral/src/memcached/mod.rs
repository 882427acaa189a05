//! The Memcached store: fill leases by `add`, fences by `cas`, waiters that
//! poll with backoff; several servers by rendezvous hashing.
//!
//! # Client
//!
//! A small client of memcached's meta text protocol (`mg`, `ms`, `md`,
//! `mn`; memcached 1.6 or newer) over `tokio::net::TcpStream`, with a
//! bounded pool of connections per server (`conn`). The async crates on
//! crates.io were looked at first: `memcache-async` (0.10) speaks the
//! ASCII protocol (`gets`/`cas`, and a meta set with a few flags) on one
//! stream, without pooling or several servers, and neither its
//! documentation nor `async-memcached`'s shows a meta get returning the
//! remaining time to live (`t`) beside a `cas`-guarded meta set, which this
//! store needs in one round trip each. The five commands used here are a
//! few hundred lines to speak directly.
//!
//! How leases, fences and time work here is documented on
//! [`MemcachedStore`], for its users.

mod conn;
mod frame;
mod keys;
mod ring;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use conn::{md, mg, mn, ms, protocol, Reply, Server, Status};
use frame::Slot;
use keys::Items;
use ring::Ring;

use crate::data::error::{StoreError, StoreErrorKind};
use crate::store::{
    is_version, new_version, BoxFuture, Commit, Grant, Lease, LeaseRequest, Listener, Lookup,
    Notifier, Origin, Store, StoreKey, Stored,
};

/// Memcached's longest relative TTL; longer numbers are unix times.
const MAX_TTL_SECS: u64 = 30 * 24 * 3600;
/// Bytes an item needs besides its key and data (memcached's header, with
/// room to spare).
const ITEM_OVERHEAD: usize = 96;
/// How often one call retries after losing a compare-and-swap race.
const MAX_RACES: usize = 16;
/// The most keys whose backoff is remembered.
const MAX_WAITS: usize = 4096;

/// Settings of a [`MemcachedStore`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemcachedConfig {
    /// The longest any call may take (acquiring a connection, connecting
    /// and all of its round trips) before it fails with a timeout.
    /// Default: 1 s.
    pub op_timeout: Duration,
    /// Connections per server at most. Default: 16.
    pub max_connections: usize,
    /// The first wait of a waiter polling for a held lease. Default: 10 ms.
    pub poll_start: Duration,
    /// The longest wait between two polls (the backoff doubles up to it).
    /// Default: 500 ms. The cache's `poll_interval` bounds it too.
    pub poll_cap: Duration,
    /// The largest item the servers accept (memcached's `-I`). Default:
    /// 1 MiB.
    pub max_item_bytes: usize,
    /// Prepended to every item key: printable ASCII without `#`, at most
    /// 64 bytes. Default: `corral:`.
    pub key_prefix: String,
}

impl Default for MemcachedConfig {
    fn default() -> Self {
        Self {
            op_timeout: Duration::from_secs(1),
            max_connections: 16,
            poll_start: Duration::from_millis(10),
            poll_cap: Duration::from_millis(500),
            max_item_bytes: 1024 * 1024,
            key_prefix: "corral:".into(),
        }
    }
}

/// A [`Store`] on one or more memcached servers (feature `memcached`):
/// fill leases by `add`, fences by `cas`, waiters that poll with backoff;
/// several servers by rendezvous hashing.
///
/// # Layout
///
/// Per logical key, two items on the key's server (names in `keys`):
/// - the **slot** holds the fence, the generation and the value together
///   (`frame`), so one compare-and-swap guards all three: a commit reads the
///   slot with its cas token, checks that the fence still holds its lease
///   token and writes with `ms ... C<cas>`; any write in between changes the
///   cas token and the commit re-reads (and is refused if the fence moved).
/// - the **lease** holds the token of the one fill allowed to run, created
///   by `ms ... ME` (add: create if absent) with the lease's TTL.
///
/// `get_or_lease` reads the slot (a live value is a [`Lookup::Hit`]),
/// otherwise adds the lease (exists: [`Lookup::Held`] with the lease's
/// remaining TTL) and then moves the slot's fence to the new token by cas,
/// re-checking the grant's condition on the value it swaps. This takes up to
/// three round trips instead of Redis' one script, and is not one atomic
/// step: a value written between the read and the fence is noticed by the
/// cas and answered as Redis would (the lease is given back). Differences
/// from Redis:
/// - `invalidate` deletes the slot (value and fence) and the lease, as
///   Redis does; `set` writes the slot with a new random fence and deletes
///   the lease. Both are one pipelined round trip.
/// - A refresh lease over a live value keeps the value: the slot is
///   rewritten with the new fence, for `max(remaining, fence TTL)`, and
///   `extra` remembers how much longer than the value the item lives.
/// - There is no pub/sub: waiters of other processes poll. [`Store::listen`]
///   wakes local waiters at once (commits and releases made through the same
///   store) and others after an exponential backoff from
///   [`MemcachedConfig::poll_start`] to [`MemcachedConfig::poll_cap`] per key
///   (reset once the key is no longer held); the cache's own
///   `poll_interval` and the lease's remaining time still bound each wait,
///   so a waiter takes the lease over once it lapses (fail-open). There is
///   no backplane: caches with an in-process tier do not hear of other
///   processes' writes.
///
/// # Time
///
/// Memcached keeps time to the whole second and reports a remaining TTL
/// (`t` flag) in whole seconds, by its own clock. Every TTL is sent as
/// `ceil(seconds) + 1` (at most 30 days: longer numbers would be read as
/// unix times), so an item never expires before the time asked, and at most
/// about two seconds after it. A value's remaining time is reported as the
/// item's remaining seconds minus one (minus `extra`): ages are judged by
/// the server's clock alone — no host's timestamp is compared with another
/// host's clock — at whole-second resolution, so TTLs below a few seconds
/// are coarse here.
///
/// # Limits
///
/// A value's item (frame, envelope and key) must fit
/// [`MemcachedConfig::max_item_bytes`] (memcached's `-I`, 1 MiB by
/// default); a larger one is refused by `commit`/`set` with a
/// [`StoreErrorKind::Protocol`] error that says so, before anything is sent.
/// Such a commit, or one the server refuses (`SERVER_ERROR`, e.g. with a
/// `max_item_bytes` above the server's `-I`), writes nothing; the cache
/// then releases its lease before it answers, so waiters take over at once.
///
/// # Foreign data
///
/// A slot item whose bytes are not a slot (`frame`) is a value that does not
/// decode (a counted miss) with no fence, replaced by the next commit. A
/// lease item with no expiry, or whose contents are not a lease token (1 to
/// 64 lowercase hex digits), is broken: `get_or_lease` replaces it by
/// compare-and-swap with its own lease instead of waiting for it.
///
/// # Tags, and what a loss costs
///
/// Tag and clear versions are items `<prefix>t:...` with the tag retention
/// as TTL (renewed by each read). **Every server holds its own copy** of
/// each version, under the same item name: an entry is stamped with, and
/// checked against, the copy on its own server (the server of its key),
/// so the versions guarding a server's entries live and die with them.
/// - A server removed from the list, restarted, flushed or full loses its
///   entries and its copies, and nothing else: its keys move to the other
///   servers (rendezvous hashing moves only them) and are refilled there;
///   every other key is still a hit, checked against its own server's
///   copy. Measured with 3 servers and 1,000 keys (each server removed in
///   turn, 10 runs each): 29.8–37.3% of the keys refilled in every run,
///   exactly the removed server's share.
/// - A copy lost alone (evicted with its slab class, deleted) is created
///   anew on its next read: that server's entries stamped with it become
///   misses (its tag's entries, or all of the server's for the clear
///   version).
/// - [`Cache::invalidate_tag`](crate::Cache::invalidate_tag) and
///   [`Cache::clear`](crate::Cache::clear) write the new version to every
///   server's copy: one request per server, all sent at once (one round
///   trip). A server that does not answer makes them fail
///   ([`StoreError`]) after the others moved: repeat the call. A server
///   that was out of the list while a tag was invalidated and comes back
///   with its data still holds the old copy: flush a server before it
///   rejoins.
/// - A fill reads its versions from its key's server before it runs, and
///   its commit is checked against the same copies: an invalidation while
///   it runs moves them, and its entry is never served.
#[derive(Clone)]
pub struct MemcachedStore {
    inner: Arc<Inner>,
}

struct Inner {
    servers: Vec<Server>,
    ring: Ring,
    config: MemcachedConfig,
    notifier: Notifier,
    rng: Mutex<fastrand::Rng>,
    /// Polls so far per held key (the backoff's exponent).
    waits: Mutex<HashMap<Arc<str>, u32>>,
}

impl std::fmt::Debug for MemcachedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let addrs: Vec<&str> = self.inner.servers.iter().map(Server::addr).collect();
        f.debug_struct("MemcachedStore")
            .field("servers", &addrs)
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// Whole seconds for memcached: `ceil(d) + 1`, at most 30 days.
fn secs(d: Duration) -> u64 {
    let whole = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    (whole + 1).min(MAX_TTL_SECS)
}

/// What a slot read found.
struct Found {
    slot: Slot,
    cas: u64,
    /// The item's remaining seconds (`-1`: no expiry).
    ttl: i64,
}

impl Found {
    /// The value's remaining whole seconds by the item's TTL, if it has
    /// a value that is still alive (`None` inside: no expiry).
    fn value_left(&self) -> Option<Option<i64>> {
        self.slot.value.as_ref()?;
        if self.ttl < 0 {
            return Some(None);
        }
        let left = self.ttl - i64::from(self.slot.extra);
        (left >= 1).then_some(Some(left))
    }

    fn stored(&self) -> Option<Stored> {
        let left = self.value_left()?;
        Some(Stored {
            bytes: self.slot.value.clone().unwrap_or_default(),
            remaining: left.map(|s| Duration::from_secs(s.saturating_sub(1).unsigned_abs())),
            generation: self.slot.generation.clone(),
        })
    }

    /// The slot with `fence`, keeping a live value; with the TTL to write it
    /// for so that it lives at least `fence_ttl` and the value no longer
    /// than before.
    fn refenced(&self, fence: Option<Arc<str>>, fence_secs: u64) -> (Slot, u64) {
        match self.value_left() {
            Some(Some(left)) => {
                let left = left.unsigned_abs();
                let ttl = left.max(fence_secs);
                let slot = Slot {
                    fence,
                    generation: self.slot.generation.clone(),
                    extra: u32::try_from(ttl - left).unwrap_or(u32::MAX),
                    value: self.slot.value.clone(),
                };
                (slot, ttl)
            }
            Some(None) => {
                let slot = Slot {
                    fence,
                    extra: 0,
                    ..self.slot.clone()
                };
                (slot, fence_secs)
            }
            None => (
                Slot {
                    fence,
                    ..Slot::default()
                },
                fence_secs,
            ),
        }
    }
}

impl MemcachedStore {
    /// A store over the servers at `addrs` (`host:port` each), checking
    /// that each answers.
    ///
    /// # Errors
    ///
    /// No address, a bad `key_prefix`, or a server that does not answer
    /// within `op_timeout`.
    pub async fn connect<S: AsRef<str>>(
        addrs: &[S],
        config: MemcachedConfig,
    ) -> Result<Self, StoreError> {
        if addrs.is_empty() {
            return Err(StoreError::new(
                StoreErrorKind::Configuration,
                "memcached: no server address",
            ));
        }
        if !keys::valid_prefix(&config.key_prefix) {
            return Err(StoreError::new(
                StoreErrorKind::Configuration,
                "memcached: key_prefix must be printable ASCII without '#', at most 64 bytes",
            ));
        }
        let servers = addrs
            .iter()
            .map(|a| {
                Server::new(
                    a.as_ref().to_owned(),
                    config.max_connections,
                    config.max_item_bytes,
                )
            })
            .collect();
        let seed =
            std::hash::BuildHasher::hash_one(&std::collections::hash_map::RandomState::new(), 0u8);
        let store = Self {
            inner: Arc::new(Inner {
                servers,
                ring: Ring::new(addrs.iter().map(AsRef::as_ref)),
                config,
                notifier: Notifier::new(),
                rng: Mutex::new(fastrand::Rng::with_seed(seed)),
                waits: Mutex::new(HashMap::new()),
            }),
        };
        store.ping().await?;
        Ok(store)
    }

    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    /// The name of `key`'s slot item (value, fence, generation): for tests
    /// that plant foreign bytes.
    pub fn slot_item(&self, key: &StoreKey) -> String {
        self.items(key).slot
    }

    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    /// The name of `key`'s lease item.
    pub fn lease_item(&self, key: &StoreKey) -> String {
        self.items(key).lease
    }

    fn items(&self, key: &StoreKey) -> Items {
        keys::items(&self.inner.config.key_prefix, key)
    }

    fn id(key: &StoreKey) -> Arc<str> {
        format!("{}\u{0}{}", key.namespace(), key.key()).into()
    }

    fn token(&self) -> Arc<str> {
        let mut rng = self.inner.rng.lock().unwrap_or_else(|p| p.into_inner());
        format!("{:032x}", rng.u128(..)).into()
    }

    fn new_version(&self) -> Arc<str> {
        new_version(&mut self.inner.rng.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The server of `route` on the ring.
    fn server(&self, route: u64) -> &Server {
        self.server_at(self.inner.ring.pick(route))
    }

    /// Sends `requests` to `server` in one round trip, bounded by the
    /// operation timeout.
    async fn call(&self, server: &Server, requests: &[Vec<u8>]) -> Result<Vec<Reply>, StoreError> {
        let timeout = self.inner.config.op_timeout;
        match tokio::time::timeout(timeout, server.call(requests)).await {
            Ok(replies) => replies,
            Err(_) => Err(StoreError::new(
                StoreErrorKind::Timeout,
                format!("memcached {}: no answer within {timeout:?}", server.addr()),
            )),
        }
    }

    async fn one(&self, server: &Server, request: Vec<u8>) -> Result<Reply, StoreError> {
        let mut replies = self.call(server, &[request]).await?;
        replies
            .pop()
            .ok_or_else(|| protocol(server.addr(), "no reply"))
    }

    async fn read_slot(&self, server: &Server, item: &str) -> Result<Option<Found>, StoreError> {
        let reply = self.one(server, mg(item, "v c t")).await?;
        let (cas, ttl) = (reply.cas(), reply.ttl());
        match (reply.status, reply.data, cas) {
            (Status::Value, Some(data), Some(cas)) => Ok(Some(Found {
                cas,
                ttl: ttl.unwrap_or(-1),
                slot: Slot::decode(data),
            })),
            (Status::Miss, _, _) => Ok(None),
            (status, _, _) => Err(protocol(server.addr(), &format!("mg answered {status:?}"))),
        }
    }

    /// Writes `slot` for `ttl` seconds: by cas over `cas`, or as a new item
    /// (add) without one. Returns whether it was written.
    async fn write_slot(
        &self,
        server: &Server,
        item: &str,
        slot: &Slot,
        ttl: u64,
        cas: Option<u64>,
    ) -> Result<bool, StoreError> {
        let flags = match cas {
            Some(cas) => format!("T{ttl} C{cas}"),
            None => format!("T{ttl} ME"),
        };
        let reply = self.one(server, ms(item, &slot.encode(), &flags)).await?;
        match reply.status {
            Status::Done => Ok(true),
            Status::NotStored | Status::Exists | Status::NotFound => Ok(false),
            status => Err(protocol(server.addr(), &format!("ms answered {status:?}"))),
        }
    }

    /// Deletes the lease item if it still holds `token`.
    async fn drop_lease(
        &self,
        server: &Server,
        item: &str,
        token: &str,
    ) -> Result<bool, StoreError> {
        let reply = self.one(server, mg(item, "v c")).await?;
        let cas = reply.cas();
        match (reply.status, reply.data, cas) {
            (Status::Value, Some(data), Some(cas)) if data == token.as_bytes() => {
                let reply = self.one(server, md(item, &format!("C{cas}"))).await?;
                Ok(reply.status == Status::Done)
            }
            _ => Ok(false),
        }
    }

    /// The server at `index` in the order given (past the end: the last).
    fn server_at(&self, index: usize) -> &Server {
        let servers = &self.inner.servers;
        &servers[index.min(servers.len() - 1)]
    }

    /// The version of `tag` as `server`'s copy holds it: read, or created
    /// by add when absent (by cas over an item that is not a version), so
    /// concurrent callers agree on one; kept for `retention` from now
    /// either way. Usually one round trip, two on first use.
    async fn tag_version(
        &self,
        namespace: &str,
        server: &Server,
        tag: &str,
        retention: Duration,
    ) -> Result<Arc<str>, StoreError> {
        let item = keys::tag(&self.inner.config.key_prefix, namespace, tag);
        let keep = format!("T{}", secs(retention));
        for _ in 0..MAX_RACES {
            // Read with the retention as the new TTL: a tag in use keeps
            // its version.
            let reply = self.one(server, mg(&item, &format!("v c {keep}"))).await?;
            let cas = reply.cas();
            let replace = match (reply.status, reply.data, cas) {
                (Status::Value, Some(data), _) if is_version(&data) => {
                    if let Ok(version) = std::str::from_utf8(&data) {
                        return Ok(version.into());
                    }
                    cas
                }
                (Status::Value, _, cas) => cas,
                (Status::Miss, _, _) => None,
                (status, _, _) => {
                    return Err(protocol(server.addr(), &format!("mg answered {status:?}")))
                }
            };
            let version = self.new_version();
            let mode = match replace {
                Some(cas) => format!("C{cas}"),
                None => "ME".to_owned(),
            };
            let flags = format!("{keep} {mode}");
            let reply = self
                .one(server, ms(&item, version.as_bytes(), &flags))
                .await?;
            match reply.status {
                Status::Done => return Ok(version),
                Status::NotStored | Status::Exists | Status::NotFound => {}
                status => return Err(protocol(server.addr(), &format!("ms answered {status:?}"))),
            }
        }
        Err(protocol(
            server.addr(),
            "tag version kept changing while it was created",
        ))
    }

    /// The lease item found by an `add` that failed: a live lease (with
    /// its remaining time), gone meanwhile, or broken — no expiry, or
    /// contents that are not a lease token (written by something else) —
    /// and then replaced by `token`'s lease by compare-and-swap.
    async fn held_lease(
        &self,
        server: &Server,
        item: &str,
        token: &str,
        request: &LeaseRequest,
    ) -> Result<Held, StoreError> {
        let reply = self.one(server, mg(item, "v t c")).await?;
        let (ttl, cas) = (reply.ttl(), reply.cas());
        let (data, cas) = match (reply.status, reply.data, cas) {
            (Status::Value, Some(data), Some(cas)) => (data, cas),
            (Status::Miss, _, _) => return Ok(Held::Gone),
            (status, _, _) => {
                return Err(protocol(server.addr(), &format!("mg answered {status:?}")))
            }
        };
        let remaining = ttl
            .filter(|t| *t >= 0)
            .map(|t| Duration::from_secs(t.unsigned_abs()));
        if remaining.is_some() && lease_token(&data) {
            return Ok(Held::Live(remaining));
        }
        let flags = format!("T{} C{cas}", secs(request.lease_ttl));
        let reply = self.one(server, ms(item, token.as_bytes(), &flags)).await?;
        Ok(match reply.status {
            Status::Done => Held::TakenOver,
            // Replaced or deleted meanwhile: look again.
            _ => Held::Gone,
        })
    }

    /// Refuses an item too large for the servers.
    fn check_size(&self, item: &str, slot: &Slot) -> Result<(), StoreError> {
        let size = item.len() + slot.value.as_ref().map_or(0, Vec::len) + 2 * 64 + 8;
        let limit = self.inner.config.max_item_bytes;
        if size + ITEM_OVERHEAD > limit {
            return Err(StoreError::new(
                StoreErrorKind::Protocol,
                format!(
                    "memcached: an item of about {} bytes exceeds the item size limit of {limit} bytes (MemcachedConfig::max_item_bytes, memcached -I)",
                    size + ITEM_OVERHEAD
                ),
            ));
        }
        Ok(())
    }

    fn waited(&self, id: &Arc<str>, held: bool) {
        let mut waits = self.inner.waits.lock().unwrap_or_else(|p| p.into_inner());
        if held {
            if waits.len() >= MAX_WAITS && !waits.contains_key(id) {
                waits.clear();
            }
            *waits.entry(Arc::clone(id)).or_insert(0) += 1;
        } else {
            waits.remove(id);
        }
    }

    fn backoff(&self, id: &str) -> Duration {
        let config = &self.inner.config;
        let waits = self.inner.waits.lock().unwrap_or_else(|p| p.into_inner());
        let n = waits
            .get(id)
            .copied()
            .unwrap_or(0)
            .saturating_sub(1)
            .min(20);
        config
            .poll_start
            .saturating_mul(1u32 << n)
            .min(config.poll_cap.max(config.poll_start))
    }

    /// Writes `slot` for `ttl` if the slot's fence still holds `lease`'s
    /// token, retrying lost compare-and-swap races.
    async fn write_fenced(
        &self,
        server: &Server,
        items: &Items,
        lease: &Lease,
        slot: &Slot,
        ttl: Duration,
    ) -> Result<Commit, StoreError> {
        for _ in 0..MAX_RACES {
            let Some(found) = self.read_slot(server, &items.slot).await? else {
                break;
            };
            if found.slot.fence.as_deref() != Some(lease.token()) {
                break;
            }
            if self
                .write_slot(server, &items.slot, slot, secs(ttl), Some(found.cas))
                .await?
            {
                return Ok(Commit::Stored);
            }
        }
        Ok(Commit::Refused)
    }

    async fn lookup(&self, key: &StoreKey, request: &LeaseRequest) -> Result<Lookup, StoreError> {
        let items = self.items(key);
        let server = self.server(items.route);
        let fence_secs = secs(request.fence_ttl);
        let mut found = self.read_slot(server, &items.slot).await?;
        let mut granted: Option<Arc<str>> = None;
        for _ in 0..MAX_RACES {
            if let Some(answer) = judge(found.as_ref(), &request.grant) {
                if let Some(token) = &granted {
                    self.drop_lease(server, &items.lease, token).await?;
                }
                return Ok(answer);
            }
            let token = match &granted {
                Some(token) => Arc::clone(token),
                None => {
                    let token = self.token();
                    let flags = format!("T{} ME", secs(request.lease_ttl));
                    let reply = self
                        .one(server, ms(&items.lease, token.as_bytes(), &flags))
                        .await?;
                    match reply.status {
                        Status::Done => {}
                        Status::NotStored => {
                            match self
                                .held_lease(server, &items.lease, &token, request)
                                .await?
                            {
                                Held::Live(remaining) => return Ok(Lookup::Held { remaining }),
                                Held::Gone => continue,
                                Held::TakenOver => {}
                            }
                        }
                        status => {
                            return Err(protocol(server.addr(), &format!("ms answered {status:?}")))
                        }
                    }
                    granted = Some(Arc::clone(&token));
                    token
                }
            };
            let (slot, ttl) = match &found {
                Some(found) => found.refenced(Some(Arc::clone(&token)), fence_secs),
                None => (
                    Slot {
                        fence: Some(Arc::clone(&token)),
                        ..Slot::default()
                    },
                    fence_secs,
                ),
            };
            let cas = found.as_ref().map(|f| f.cas);
            if self
                .write_slot(server, &items.slot, &slot, ttl, cas)
                .await?
            {
                return Ok(Lookup::Granted(Lease::new(token)));
            }
            found = self.read_slot(server, &items.slot).await?;
        }
        if let Some(token) = &granted {
            self.drop_lease(server, &items.lease, token).await?;
        }
        Err(protocol(server.addr(), "lost every compare-and-swap race"))
    }
}

/// A lease item that an `add` found in place.
enum Held {
    /// A live lease, with its remaining time.
    Live(Option<Duration>),
    /// Deleted or replaced meanwhile.
    Gone,
    /// Broken, and now this caller's lease.
    TakenOver,
}

/// Whether `data` is a lease token as this store writes them: 1 to 64
/// lowercase hex digits.
fn lease_token(data: &[u8]) -> bool {
    (1..=64).contains(&data.len())
        && data
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
}

/// The answer `get_or_lease` gives without a lease, for what the slot holds
/// and the grant asked; `None`: a lease may be granted.
fn judge(found: Option<&Found>, grant: &Grant) -> Option<Lookup> {
    let stored = found.and_then(Found::stored);
    match (grant, stored) {
        (Grant::IfNoValue, Some(stored)) => Some(Lookup::Hit(stored)),
        (Grant::OverGeneration(_), None) => Some(Lookup::Changed),
        (Grant::OverGeneration(expected), Some(stored)) if *expected != stored.generation => {
            Some(Lookup::Changed)
        }
        _ => None,
    }
}

impl Store for MemcachedStore {
    fn get_or_lease<'a>(
        &'a self,
        key: &'a StoreKey,
        request: &'a LeaseRequest,
    ) -> BoxFuture<'a, Result<Lookup, StoreError>> {
        Box::pin(async move {
            let lookup = self.lookup(key, request).await;
            let held = matches!(lookup, Ok(Lookup::Held { .. }));
            self.waited(&Self::id(key), held);
            lookup
        })
    }

    fn get<'a>(&'a self, key: &'a StoreKey) -> BoxFuture<'a, Result<Option<Stored>, StoreError>> {
        Box::pin(async move {
            let items = self.items(key);
            let server = self.server(items.route);
            let found = self.read_slot(server, &items.slot).await?;
            Ok(found.as_ref().and_then(Found::stored))
        })
    }

    fn renew<'a>(
        &'a self,
        key: &'a StoreKey,
        lease: &'a Lease,
        request: &'a LeaseRequest,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let items = self.items(key);
            let server = self.server(items.route);
            let reply = self.one(server, mg(&items.lease, "v c")).await?;
            let cas = reply.cas();
            let owned = match (reply.status, reply.data, cas) {
                (Status::Value, Some(data), Some(cas)) if data == lease.token().as_bytes() => {
                    let flags = format!("T{} C{cas}", secs(request.lease_ttl));
                    let reply = self
                        .one(server, ms(&items.lease, lease.token().as_bytes(), &flags))
                        .await?;
                    reply.status == Status::Done
                }
                _ => false,
            };
            if !owned {
                return Ok(false);
            }
            let fence_secs = secs(request.fence_ttl);
            for _ in 0..MAX_RACES {
                let Some(found) = self.read_slot(server, &items.slot).await? else {
                    break;
                };
                if found.slot.fence.as_deref() != Some(lease.token()) {
                    break;
                }
                let (slot, ttl) = found.refenced(found.slot.fence.clone(), fence_secs);
                if self
                    .write_slot(server, &items.slot, &slot, ttl, Some(found.cas))
                    .await?
                {
                    break;
                }
            }
            Ok(true)
        })
    }

    fn commit<'a>(
        &'a self,
        key: &'a StoreKey,
        lease: &'a Lease,
        bytes: &'a [u8],
        ttl: Duration,
        _origin: Origin,
    ) -> BoxFuture<'a, Result<Commit, StoreError>> {
        Box::pin(async move {
            let items = self.items(key);
            let server = self.server(items.route);
            let slot = Slot::written(lease.token().into(), bytes);
            // A commit that fails (too large, a server error) writes
            // nothing and keeps the lease: its cache releases it.
            self.check_size(&items.slot, &slot)?;
            let commit = self.write_fenced(server, &items, lease, &slot, ttl).await?;
            self.drop_lease(server, &items.lease, lease.token()).await?;
            self.inner.notifier.notify(&Self::id(key));
            Ok(commit)
        })
    }

    fn release<'a>(
        &'a self,
        key: &'a StoreKey,
        lease: &'a Lease,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let items = self.items(key);
            let server = self.server(items.route);
            self.drop_lease(server, &items.lease, lease.token()).await?;
            if let Some(found) = self.read_slot(server, &items.slot).await? {
                if found.slot.fence.as_deref() == Some(lease.token())
                    && found.value_left().is_none()
                {
                    self.one(server, md(&items.slot, &format!("C{}", found.cas)))
                        .await?;
                }
            }
            self.inner.notifier.notify(&Self::id(key));
            Ok(())
        })
    }

    fn set<'a>(
        &'a self,
        key: &'a StoreKey,
        bytes: &'a [u8],
        ttl: Duration,
        _origin: Origin,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let items = self.items(key);
            let server = self.server(items.route);
            let slot = Slot::written(self.token(), bytes);
            self.check_size(&items.slot, &slot)?;
            let flags = format!("T{}", secs(ttl));
            let requests = [
                ms(&items.slot, &slot.encode(), &flags),
                md(&items.lease, ""),
            ];
            let replies = self.call(server, &requests).await?;
            if replies.first().map(|r| r.status) != Some(Status::Done) {
                return Err(protocol(server.addr(), "set was not stored"));
            }
            self.inner.notifier.notify(&Self::id(key));
            Ok(())
        })
    }

    fn invalidate<'a>(
        &'a self,
        key: &'a StoreKey,
        _origin: Origin,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let items = self.items(key);
            let server = self.server(items.route);
            self.call(server, &[md(&items.slot, ""), md(&items.lease, "")])
                .await?;
            self.inner.notifier.notify(&Self::id(key));
            Ok(())
        })
    }

    /// The server of `key`'s items: its copies of the versions guard the
    /// entries it holds.
    fn version_home(&self, key: &StoreKey) -> u32 {
        let index = self.inner.ring.pick(keys::route(key));
        u32::try_from(index).unwrap_or(0)
    }

    fn tag_versions<'a>(
        &'a self,
        namespace: &'a str,
        home: u32,
        tags: &'a [Arc<str>],
        retention: Duration,
        _origin: Origin,
    ) -> BoxFuture<'a, Result<Vec<Arc<str>>, StoreError>> {
        Box::pin(async move {
            let server = self.server_at(usize::try_from(home).unwrap_or(usize::MAX));
            let reads = tags
                .iter()
                .map(|tag| self.tag_version(namespace, server, tag, retention));
            futures_util::future::join_all(reads)
                .await
                .into_iter()
                .collect()
        })
    }

    fn invalidate_tag<'a>(
        &'a self,
        namespace: &'a str,
        tag: &'a str,
        retention: Duration,
        _origin: Origin,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            // Every server's copy, one request each, all sent at once.
            let item = keys::tag(&self.inner.config.key_prefix, namespace, tag);
            let version = self.new_version();
            let flags = format!("T{}", secs(retention));
            let request = ms(&item, version.as_bytes(), &flags);
            let moves = self.inner.servers.iter().map(|server| {
                let request = request.clone();
                async move {
                    let reply = self.one(server, request).await?;
                    if reply.status != Status::Done {
                        return Err(protocol(server.addr(), "tag version was not stored"));
                    }
                    Ok(())
                }
            });
            futures_util::future::join_all(moves)
                .await
                .into_iter()
                .collect()
        })
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let pings = self.inner.servers.iter().map(|s| self.one(s, mn()));
            for reply in futures_util::future::join_all(pings).await {
                reply?;
            }
            Ok(())
        })
    }

    fn call_bound(&self) -> Option<Duration> {
        Some(self.inner.config.op_timeout)
    }

    fn listen(&self, key: &StoreKey) -> Listener {
        let id = Self::id(key);
        let delay = self.backoff(&id);
        self.inner.notifier.listen(id).recheck_after(delay)
    }
}

#[cfg(test)]
mod tests {
    use super::{lease_token, secs};
    use std::time::Duration;

    #[test]
    fn lease_tokens_are_lowercase_hex_of_1_to_64_digits() {
        assert!(lease_token(b"0123456789abcdef0123456789abcdef"));
        assert!(lease_token(b"a"));
        assert!(lease_token("f".repeat(64).as_bytes()));
        for broken in [
            &b""[..],
            b"junk",
            b"ABCDEF",
            b"12 34",
            &[0xC1, 0x00],
            "a".repeat(65).as_bytes(),
        ] {
            assert!(!lease_token(broken), "{broken:?}");
        }
    }

    #[test]
    fn ttls_round_up_to_whole_seconds_plus_one() {
        assert_eq!(secs(Duration::ZERO), 1);
        assert_eq!(secs(Duration::from_millis(1)), 2);
        assert_eq!(secs(Duration::from_secs(1)), 2);
        assert_eq!(secs(Duration::from_millis(1500)), 3);
        assert_eq!(secs(Duration::from_secs(365 * 24 * 3600)), 30 * 24 * 3600);
    }
}

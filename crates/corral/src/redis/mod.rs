//! The Redis store, [`RedisStore`]: standalone Redis, Redis Cluster or a
//! master under Redis Sentinel, through redis-rs and tokio. Key layout, notifications, fences and what it
//! needs from Redis are documented on [`RedisStore`] (this module is
//! private).

mod backoff;
mod batch;
mod client;
mod cluster;
mod conn;
mod errors;
mod expiries;
mod frame;
#[cfg(feature = "test-hooks")]
pub(crate) mod fuzz;
mod keys;
mod lanes;
mod resp;
mod scripts;
mod sentinel;
mod standalone;
mod subscriber;
mod touches;

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use ::redis::Value;

use self::batch::Reads;
use self::cluster::Cluster;
use self::conn::Connection;
use self::errors::{bounded, store_error, unexpected};
use self::expiries::Expiries;
use self::keys::KeyNames;
use self::sentinel::{MasterAuth, Sentinels, Source};
use self::standalone::{Reconnect, Standalone};
use self::subscriber::{Feed, Settings, ShardedClient, Subscriber};
use crate::data::error::{StoreError, StoreErrorKind};
use crate::redact::redact_url;
use crate::store::{
    is_version, new_version, BoxFuture, ChangeSink, Commit, Grant, Lease, LeaseRequest, Listener,
    Lookup, Origin, Store, StoreKey, Stored,
};

/// The longest TTL sent to Redis, in milliseconds (about 139 years); longer
/// ones are capped.
const MAX_TTL_MS: u64 = 1 << 42;
/// How many times a standalone store tries to connect before
/// [`RedisStore::connect`] reports the server unavailable (each within the
/// connect timeout; a lost connection is retried until it is back).
const CONNECT_ATTEMPTS: usize = 3;
/// The first delay between reconnect attempts.
const RECONNECT_MIN_DELAY: Duration = Duration::from_millis(50);

/// What a cluster store is built from: the cluster client, the
/// subscriber's, and the seeds as shown in its `Debug`.
struct ClusterSeeds<'a> {
    urls: &'a [String],
    cluster: ::redis::cluster::ClusterClient,
    /// The subscriber's own cluster client (sharded pub/sub).
    sharded: ShardedClient,
    target: String,
}

impl<'a> ClusterSeeds<'a> {
    fn new(urls: &'a [String], config: &RedisConfig) -> Result<Self, StoreError> {
        if urls.is_empty() {
            return Err(StoreError::new(
                StoreErrorKind::Configuration,
                "redis cluster: no node URLs given",
            ));
        }
        // Each seed is checked as `connect` checks one server's URL (its
        // scheme, its TLS material), with the same errors.
        for url in urls {
            client::client(url, config)?;
        }
        let cluster = client::cluster_builder(urls, config)?
            .connection_timeout(config.connect_timeout)
            .response_timeout(config.op_timeout)
            .build()
            .map_err(|e| scrub_seeds(urls, store_error("connect", &e)))?;
        let (seed_urls, settings) = (urls.to_vec(), config.clone());
        let sharded = ShardedClient::new(move |pushes| {
            client::cluster_builder(&seed_urls, &settings)?
                .use_protocol(::redis::ProtocolVersion::RESP3)
                .push_sender(pushes)
                .connection_timeout(settings.connect_timeout)
                .response_timeout(settings.op_timeout)
                .build()
                .map_err(|e| scrub_seeds(&seed_urls, store_error("connect", &e)))
        });
        let seeds = Self {
            urls,
            cluster,
            sharded,
            target: format!(
                "cluster[{}]",
                urls.iter()
                    .map(|u| redact_url(u))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        };
        Ok(seeds)
    }

    /// `error` without any seed's password.
    fn scrub(&self, error: StoreError) -> StoreError {
        scrub_seeds(self.urls, error)
    }
}

/// `error` without the password of any of `urls`.
fn scrub_seeds(urls: &[String], error: StoreError) -> StoreError {
    urls.iter()
        .fold(error, |e, url| client::scrubbed(url.as_str(), e))
}

/// The Sentinel group `master_name` asked at `sentinels`, with errors
/// that show none of their passwords.
fn sentinel_group(
    master_name: &str,
    sentinels: &[String],
    config: &RedisConfig,
) -> Result<Arc<Sentinels>, StoreError> {
    Sentinels::new(master_name, sentinels, config)
        .map(Arc::new)
        .map_err(|e| scrub_seeds(sentinels, e))
}

/// How a standalone store's connection to `store` (its name in logs) is
/// made and remade under `config`.
fn reconnect(config: &RedisConfig, store: &str) -> Reconnect {
    Reconnect {
        store: store.into(),
        connect_timeout: config.connect_timeout,
        initial_attempts: CONNECT_ATTEMPTS,
        min_delay: RECONNECT_MIN_DELAY,
        max_delay: config.reconnect_max_delay,
        health_interval: config.health_interval,
        health_timeout: config.op_timeout,
    }
}

/// Settings of a [`RedisStore`].
///
/// ```
/// use std::time::Duration;
///
/// let config = corral::RedisConfig::default().op_timeout(Duration::from_millis(250));
/// assert_eq!(config.op_timeout, Duration::from_millis(250));
/// assert_eq!(config.connect_timeout, Duration::from_secs(1));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisConfig {
    /// The longest one call may take, from sending the command to its reply
    /// (including a `NOSCRIPT` retry and waiting for a reconnect); the call
    /// then fails with [`StoreErrorKind::Timeout`]. Also a cluster
    /// connection's own response timeout, and the subscriber's bound on
    /// `SUBSCRIBE` and `PING`. Default: **1 s**.
    ///
    /// A call that timed out may still take effect when a slow server gets
    /// to it; the fences keep that safe (a late commit whose fence moved is
    /// refused).
    pub op_timeout: Duration,
    /// The longest one connection attempt may take (the initial connect, a
    /// reconnect, the subscriber's connect). Default: **1 s**.
    pub connect_timeout: Duration,
    /// The longest pause between reconnect attempts (they start at 50 ms
    /// and double, with jitter); also how old a connection to one address
    /// must be before a demotion makes the store connect anew (see the
    /// [`RedisStore`] docs, "Failover behind one address"). Default:
    /// **1 s**.
    pub reconnect_max_delay: Duration,
    /// How often a health check asks the command connection (standalone)
    /// its server's `ROLE` (`PING` once refused) and `PING`s the subscriber
    /// connection, each check bounded by [`op_timeout`](Self::op_timeout):
    /// a connection that gives no answer is replaced, one whose server
    /// became a replica is left (see the [`RedisStore`] docs, "Dead
    /// connections"). One check per connection per interval, whatever the
    /// traffic; the reads and writes themselves pay nothing for it.
    /// Default: **1 s**.
    pub health_interval: Duration,
    /// TCP keepalive on every TCP connection the store opens (commands,
    /// cluster nodes, the subscriber): the first probe after this long
    /// without traffic, then one every third of it, three in all; and on
    /// Linux `TCP_USER_TIMEOUT` of twice it, so the kernel closes a
    /// connection whose peer stopped acknowledging within about twice
    /// this. A second line of defence behind
    /// [`health_interval`](Self::health_interval) (which finds a silent
    /// connection much sooner), and the only one for a cluster's node
    /// connections. The kernel takes these in whole seconds: `idle` is
    /// rounded down to whole seconds, the probe interval is a third of
    /// that rounded down, and neither is below 1 s (so 1 s and 2 s probe
    /// every second, with a user timeout of 2 s and 4 s). `None` leaves
    /// the operating system's defaults (no keepalive, as a rule). Default:
    /// **10 s**.
    pub tcp_keepalive: Option<Duration>,
    /// How many keys the store remembers the expiry of, so that reading a
    /// value already read (the same write) is a plain `GET` (see the
    /// [`RedisStore`] docs, "Round trips"). 0: every read sends `PTTL` with
    /// its `GET`. Each key takes about 230 bytes (its slot in the table,
    /// and the generation's token, shared with the values read of that
    /// write), whatever the values' size. Default: **65,536** (about
    /// 14 MiB).
    pub read_memory: usize,
    /// TLS material for `rediss://` connections (feature `tls`): see
    /// [`tls_root_ca`](Self::tls_root_ca) and
    /// [`tls_client_auth`](Self::tls_client_auth). Its `Debug` output shows
    /// sizes, never bytes.
    #[cfg(feature = "tls")]
    tls: client::TlsMaterial,
    /// How the masters of a Sentinel group are reached (see
    /// [`master_auth`](Self::master_auth)); its `Debug` hides the password.
    master: MasterAuth,
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self {
            op_timeout: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(1),
            reconnect_max_delay: Duration::from_secs(1),
            health_interval: Duration::from_secs(1),
            tcp_keepalive: Some(Duration::from_secs(10)),
            read_memory: 1 << 16,
            #[cfg(feature = "tls")]
            tls: client::TlsMaterial::default(),
            master: MasterAuth::default(),
        }
    }
}

impl RedisConfig {
    /// Sets [`op_timeout`](Self::op_timeout) (at least 1 ms is used).
    #[must_use]
    pub fn op_timeout(mut self, timeout: Duration) -> Self {
        self.op_timeout = timeout;
        self
    }

    /// Sets [`connect_timeout`](Self::connect_timeout) (at least 1 ms is
    /// used).
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets [`read_memory`](Self::read_memory).
    #[must_use]
    pub fn read_memory(mut self, entries: usize) -> Self {
        self.read_memory = entries;
        self
    }

    /// Sets [`health_interval`](Self::health_interval) (at least 10 ms is
    /// used).
    #[must_use]
    pub fn health_interval(mut self, interval: Duration) -> Self {
        self.health_interval = interval;
        self
    }

    /// Sets [`tcp_keepalive`](Self::tcp_keepalive) (whole seconds, at
    /// least 1 s, are used; `None`: the operating system's defaults).
    #[must_use]
    pub fn tcp_keepalive(mut self, idle: Option<Duration>) -> Self {
        self.tcp_keepalive = idle;
        self
    }

    /// Sets [`reconnect_max_delay`](Self::reconnect_max_delay).
    #[must_use]
    pub fn reconnect_max_delay(mut self, delay: Duration) -> Self {
        self.reconnect_max_delay = delay;
        self
    }

    /// Trusts the CA certificates in `pem` (one or more PEM blocks) for
    /// `rediss://` connections — the command connection, the subscriber
    /// and every cluster node — *instead of* the built-in webpki roots
    /// (feature `tls`). The server's certificate must name the host of the
    /// URL (a DNS name or an IP address in its subject alternative names).
    ///
    /// An unreadable PEM fails [`RedisStore::connect`] with
    /// [`StoreErrorKind::Protocol`]; giving TLS material and a `redis://`
    /// URL fails it too.
    #[cfg(feature = "tls")]
    #[must_use]
    pub fn tls_root_ca(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.root_ca = Some(pem.into().into());
        self
    }

    /// Authenticates to the server with a client certificate chain and its
    /// private key, both PEM (mutual TLS, feature `tls`). Without
    /// [`tls_root_ca`](Self::tls_root_ca), the server is checked against
    /// the webpki roots. The key never appears in `Debug` output or errors.
    #[cfg(feature = "tls")]
    #[must_use]
    pub fn tls_client_auth(
        mut self,
        certificate_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls.client = Some((certificate_pem.into().into(), key_pem.into().into()));
        self
    }

    /// The user (`None`: the default user) and password that authenticate
    /// the connections to the master found through Sentinel
    /// ([`RedisStore::connect_sentinel`]); the sentinels' own credentials
    /// are in their URLs. The password appears in no `Debug` output or
    /// error. Default: none.
    #[must_use]
    pub fn master_auth(mut self, user: Option<&str>, password: &str) -> Self {
        self.master.username = user.map(str::to_owned);
        self.master.password = Some(password.to_owned());
        self
    }

    /// The database selected on the master found through Sentinel
    /// ([`RedisStore::connect_sentinel`]). Default: **0**.
    #[must_use]
    pub fn master_db(mut self, db: i64) -> Self {
        self.master.db = db;
        self
    }

    fn normalized(mut self) -> Self {
        let floor = Duration::from_millis(1);
        self.op_timeout = self.op_timeout.max(floor);
        self.connect_timeout = self.connect_timeout.max(floor);
        self.reconnect_max_delay = self.reconnect_max_delay.max(RECONNECT_MIN_DELAY);
        self.health_interval = self.health_interval.max(Duration::from_millis(10));
        self.tcp_keepalive = self
            .tcp_keepalive
            .map(|idle| idle.max(Duration::from_secs(1)));
        self
    }
}

/// The names of the Redis keys of one cache key
/// ([`RedisStore::keys_of`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisKeys {
    /// The key holding the value: `corral:<namespace>:{<bucket>}:v:<key>`.
    pub value: String,
    /// The key holding the fill lease's token:
    /// `corral:<namespace>:{<bucket>}:l:<key>`.
    pub lease: String,
    /// The key holding the fence: `corral:<namespace>:{<bucket>}:f:<key>`.
    pub fence: String,
}

/// A [`Store`] on Redis, Redis Cluster or Redis under Sentinel: values, fill leases, fenced
/// commits and pub/sub wake-ups, one round trip per operation — a read is a
/// plain `GET` of a write the store has read before, `PTTL` + `GET`
/// pipelined otherwise, no script, and reads in flight together go out as
/// one batch (`MGET`); the lease request returns a present value instead
/// of a lease (Valkey works the same; see "What it needs from Redis").
///
/// Cheap to clone (the clones share the connections). The background
/// subscriber task ends when the last clone is dropped. Works on a
/// current-thread runtime; nothing blocks a runtime thread.
///
/// # Key layout
///
/// A [`StoreKey`] is a cache's namespace (`name:v<version>`, the name from
/// `A-Z a-z 0-9 _ - .`) and the user's key. The 64-bit FNV-1a hash of the
/// key's UTF-8 bytes, modulo 256, picks the key's *bucket*; `b` is the
/// bucket's four-character hash tag, whose cluster slot is `bucket × 64`.
/// The key lives in ([`RedisStore::keys_of`] names them):
///
/// | key | holds | time to live |
/// |---|---|---|
/// | `corral:<namespace>:{<b>}:v:<key>` | the value: its generation and envelope bytes, framed (below) | the value's TTL |
/// | `corral:<namespace>:{<b>}:l:<key>` | the fill lease's token | the lease TTL, renewed while the fill runs |
/// | `corral:<namespace>:{<b>}:f:<key>` | the fence: the token of the last grant or write | the fence TTL (the longest a leader may take to commit); after a commit or `set`, the value's TTL |
///
/// - **One slot per key.** The namespace holds no brace, so the first `{`
///   opens the hash tag `{<b>}`: the three keys of one logical key always
///   share a cluster slot, whatever the key holds — `{`, `}`, or a leading
///   `}` cannot move the tag.
/// - **256 slots per namespace.** A namespace's keys spread over 256 slots,
///   evenly spaced (every 64th), so each shard of a cluster whose slots are
///   split into contiguous ranges holds its share of them; the keys of one
///   bucket share a slot and so a sharded channel (see "Notifications").
/// - **No collisions.** The tag has a fixed length and is followed by a
///   one-letter marker (`v`, `l`, `f`), so a user's key can never name
///   another key's value, lease or fence; the full key follows, so two keys
///   with the same hash stay apart.
/// - FNV-1a is fixed by its specification, so every process and every
///   version of corral computes the same names (`std`'s `DefaultHasher` may
///   change between Rust releases).
///
/// Tag and clear versions ([`Store::tag_versions`]; the clear version is
/// the empty tag's) live beside the entries they guard:
///
/// | store | key | holds |
/// |---|---|---|
/// | one server (or Sentinel) | `corral:<namespace>:{<namespace>}:t:<tag>` | the tag's one version |
/// | cluster | `corral:<namespace>:{<b>}:t:<tag>` | bucket `b`'s copy of the version: it guards the entries of that bucket and shares their slot |
///
/// Each is kept for the cache's tag retention from its last read. On a
/// cluster a bucket's copy is created on the first read of the tag by an
/// entry of that bucket, so a tag used by a few entries has a few copies,
/// and the clear version of a namespace in use has up to 256. A cache
/// reads (and, with a backplane, remembers) the versions of each bucket it
/// reads entries from: after a start, a `clear` or an `invalidate_tag`, up
/// to 256 version reads (one per bucket, each one round trip, as the
/// bucket's entries are read) where one server needs one.
///
/// # What a loss costs
///
/// A lost version is created anew (a new random token) on its next read,
/// and only the entries stamped with the lost one become misses; every
/// entry is checked against the copy in its own bucket (cluster) or the
/// one version (one server).
///
/// - **One server** loses everything at once (a flush, a restart without
///   persistence): every entry is a miss anyway. A lost clear version
///   alone (`DEL`, an eviction) costs a refill of the namespace; a lost
///   tag version, of that tag's entries.
/// - **A cluster shard** that loses its data (`FLUSHALL`, a restart
///   without persistence, a failover to a replica that had not caught up)
///   loses its entries and the copies guarding them, and nothing else:
///   the refills are that shard's entries. The other shards' copies are
///   untouched, so a `clear` or `invalidate_tag` made before the loss
///   stays in force there. Each copy the shard re-creates is announced on
///   its bucket's channel like an invalidation, so caches listening to the
///   backplane forget that tag's versions (all buckets, read again when
///   needed) and — for the clear version — drop their L1; values read
///   again from the other shards are still hits.
/// - **An evicted key** under an `allkeys-*` policy: a value costs its own
///   refill. Writes and reads of values keep the clear version that guards
///   them warm: a commit, a `set` and a lease request that finds a value
///   `TOUCH` it inside their scripts; the plain `GET`, the batched `MGET`
///   and `get_many` add a `TOUCH` to their pipeline (same round trip; on a
///   cluster, the copy in the value's own slot) once per 250 ms per copy —
///   Redis keeps idle time to the second, so touching more often would
///   change nothing, and a lone read in between stays a lone `GET`. So the
///   clear version is never idle longer than the entries read or written
///   under it, and LRU evicts entries not used for a second or more before
///   it: memory pressure costs the entries it evicts, not the namespace
///   (measured: about 45% of 600 entries evicted per round, 10 rounds, no
///   full refill; without the touches the first round refilled all 600).
///   Entries used in the same second as the version's last touch are
///   alike to LRU: pressure that evicts those too may take the version.
///   A tag's version is kept warm by the fills that read it, not by reads
///   of its entries: evicted, it costs a refill of that tag's entries.
///
/// [`Cache::invalidate_tag`](crate::Cache::invalidate_tag) and
/// [`Cache::clear`](crate::Cache::clear) move every copy. On one server:
/// one script, one round trip. On a cluster: `CLUSTER SLOTS` (one round
/// trip), then one pipeline per master of `SET ... XX` for the copies of
/// the buckets it serves (one round trip, all masters at once; `XX`: a
/// bucket without a copy gets none, its first read creates one), then the
/// `SPUBLISH` announcing it (one round trip): three round trips. A copy
/// whose slot moved meanwhile is sent again alone, routed by its slot.
/// Each copy moves atomically, and a fill checks its stamps against the
/// copy of its own bucket, so a fill that read a copy before the move is
/// refused wherever it commits.
///
/// # Values carry their generation
///
/// A value is stored as `0xC0`, one byte `n`, the `n`-character token of
/// the write that produced it (the lease token of a commit, a fresh random
/// token of a `set`; lowercase hex), then the envelope bytes unchanged. So
/// one plain read returns the value *and* its generation
/// ([`Stored::generation`]), and a refresh's
/// [`Grant::OverGeneration`] is checked against the value itself: granted
/// only if the value is present with the generation read and no live lease
/// is held (a write or invalidation in between answers
/// [`Lookup::Changed`]; a lease that lapsed does not block it). The fence
/// keeps its own role: a commit is stored only while the fence holds its
/// lease's token.
///
/// Bytes that are not framed that way (foreign bytes, a broken frame, or an
/// envelope written before values were framed) are returned whole, with no
/// generation; the scripts read them the same way, so a refresh over "no
/// generation" replaces them, and the cache's strict envelope decoder counts
/// anything foreign as a miss.
///
/// # Notifications
///
/// Every commit, release, `set` and `invalidate` announces the key's change
/// on a channel, from within its script. On one server it is a `PUBLISH` on
/// the namespace's channel `corral:<namespace>:filled`. On a cluster it is
/// an `SPUBLISH` (sharded pub/sub, Redis 7) on the sharded channel of the
/// key's bucket, `corral:<namespace>:{<b>}:filled`, which is in the key's
/// own slot: the message is handled by the nodes of the key's shard only
/// (its master and replicas), where a plain `PUBLISH` is broadcast over the
/// cluster bus to every node, so the backplane's cost grows with the shard,
/// not with the cluster. Tag invalidations and clears go to
/// `corral:<namespace>:{<namespace>}:filled`, in the slot of the
/// namespace's tag keys. A cluster store's subscriber keeps its own cluster
/// connection (RESP3) and subscribes (`SSUBSCRIBE`) all 257 sharded
/// channels of each namespace it listens on, each at the node that owns
/// its slot; when a node's connection is lost, or a slot moves and the
/// server drops its subscriptions (`SUNSUBSCRIBE`), it subscribes them
/// again where they are now (reading the slot map anew if its retries keep
/// failing), and the namespace counts as re-subscribed — messages may have
/// been lost — once all of its channels are confirmed again. Each
/// `RedisStore` keeps **one** subscriber connection. A cache built on the
/// store subscribes its namespace's channel when it is built
/// ([`Store::attach`]), before any waiter needs it, unless it listens to
/// nothing (`backplane(false)`); [`Store::listen`] registers the waiter
/// locally at once and, if nothing subscribed the channel yet, subscribes
/// it when the waiter first waits. The subscriber connection is opened
/// only once a channel is to be subscribed: a store whose caches listen to
/// nothing and never wait for another process holds none. When a
/// subscription is confirmed, and after every reconnect of the subscriber,
/// all local listeners are woken to re-check (notices may have been missed
/// meanwhile). Waiters poll as a fallback, so a lost notice costs at most
/// one poll interval.
///
/// Reads of a namespace whose channel carries a cache's backplane wait for
/// its first subscription (at most half of [`RedisConfig::op_timeout`]),
/// so what a cache keeps from its first reads cannot have missed a
/// message: a healthy start counts no
/// [`backplane_resets`](crate::Stats::backplane_resets). Caches drop their
/// L1 (a reset) when messages may have been lost: at every re-subscription
/// after the subscriber's connection was interrupted, and at a first
/// subscription that a read went ahead of.
///
/// # Fences survive restarts and eviction
///
/// Lease tokens (and so fences) are random 128-bit values drawn per grant
/// from a per-store generator seeded from OS randomness, not counters: a
/// Redis that restarts without persistence, or loses a fence, has no fence
/// for an old token and refuses its commit instead of matching it again.
///
/// # Foreign data
///
/// A value key holding another Redis type (someone ran `HSET` on it) reads
/// as empty, unframed bytes — a miss the cache counts in
/// [`Stats::decode_failures`](crate::Stats::decode_failures), never a
/// `WRONGTYPE` error — and the lease is granted over it as over any
/// undecodable value; the commit's `SET` replaces it. A lease key with no
/// expiry, or whose contents are not a lease token (another string or
/// type), is taken over by the next `get_or_lease` instead of being waited
/// for.
///
/// # `maxmemory-policy`
///
/// Every key corral writes carries a TTL. Use `noeviction` or a `volatile-*`
/// policy (`volatile-lru`, `volatile-lfu`, `volatile-ttl`, ...). Under an
/// `allkeys-*` policy corral stays safe but works harder: an evicted value is
/// a miss (one more fill); an evicted fence makes its leader's commit be
/// refused (the value is not stored, the next caller fills again); an evicted
/// lease lets a second leader start a duplicate fill — still never a stale
/// overwrite, because each commit is fenced to its own grant. Reads and
/// writes touch the clear version guarding what they use (see "What a
/// loss costs"), so LRU evicts it after the entries.
///
/// # Round trips and timeouts
///
/// A read ([`Store::get`]) is one round trip without a script: `PTTL` and
/// `GET` of the value key, pipelined (on a cluster both go to the key's
/// slot; so does the `TOUCH` of the clear version that goes with a read
/// every 250 ms, see "What a loss costs"), or a plain `GET` of a write the
/// store remembers (below). `PTTL` is sent first, so a write landing between the two can
/// only make the value look older than it is (an early refresh), never
/// younger. Freshness is judged by the server's clock: age = the physical
/// TTL in the envelope − the remaining `PTTL`.
/// The store remembers, for up to [`RedisConfig::read_memory`] keys, the
/// generation it last read and when that write's time to live ends (the
/// `PTTL` read with it, aged on this process's monotonic clock, as an L1
/// copy is aged; the deadline errs early). A write's time to live never
/// changes, so reading the same write again is a plain `GET`: its frame
/// names its generation, and a remembered one needs no `PTTL`. A new write
/// (another generation) is read with its `PTTL` again.
/// A cache without an L1 reads this way first, in every caller, so an L2
/// hit costs that one round trip; a miss goes on to
/// [`Store::get_or_lease`], the lease script, which decides atomically (and
/// returns a value that landed meanwhile). A cache with an L1 reads a key
/// whose value this store remembers ([`Store::recalls`]) this way too, once
/// per flight, and asks any other key with the lease script first: it
/// returns the value if present (`GET` + `PTTL` in the script, and the
/// store remembers the expiry), so an L2 hit costs one round trip there
/// too, and a miss is granted the lease in the same one. Every operation
/// but the read is one Lua script run with
/// `EVALSHA` (the scripts are loaded with `SCRIPT LOAD` at
/// connect, on every master of a cluster). A server that lost its script
/// cache (restart, failover) answers `NOSCRIPT` once per script, and the
/// store sends that call again as `EVAL`, which caches the script again.
/// Every call — including such a retry — is bounded by
/// [`RedisConfig::op_timeout`] and reports [`StoreErrorKind::Timeout`] when
/// it passes; unreachable servers give [`StoreErrorKind::Unavailable`].
/// Connections reconnect by themselves, with backoff. A standalone store's
/// command connection is replaced by one background task when a call finds
/// it broken (jittered backoff from 50 ms up to
/// [`RedisConfig::reconnect_max_delay`]); once an attempt has failed, calls
/// fail at once with its error ([`StoreErrorKind::Unavailable`]) instead of
/// waiting for their timeout, until the server is back. A cluster store
/// rebuilds its connection from the seed nodes (reading the current slot
/// map) after 3 failed calls in a row: after a master is killed, redis-rs's
/// cluster client can otherwise keep sending its slots toward the dead
/// node.
///
/// **Reads are batched while others are in flight.** A read
/// ([`Store::get`]) that finds fewer than two round trips of this store's
/// reads in flight goes out at once, alone, as described above (one
/// `GET`, or `PTTL` + `GET`): a lone read waits for nothing and sends what
/// it always sent. Reads that arrive while two are in flight queue; when
/// one ends (answered, failed or timed out), one background task sends
/// everything queued in one round trip — per hash slot (one pipeline for a
/// standalone server) the `PTTL`s of the keys that need one, then one
/// `MGET` of all the keys — answers each read, and goes on with what
/// queued meanwhile. So under concurrency a store's reads cost Redis one
/// `MGET` per round trip instead of a command or two per read. A queued
/// read is bounded by [`RedisConfig::op_timeout`] from when it was asked,
/// and a caller that gives up or is dropped is simply left out; a batch
/// that fails fails each of its reads with the error a lone read would
/// have had ([`StoreErrorKind::Timeout`], [`StoreErrorKind::Unavailable`],
/// ...). A read in flight holds its place until its caller's future ends
/// or is dropped, so a caller that stops polling its read would hold one;
/// no read waits on that: a queued read that no batch took within half
/// its timeout is sent alone with the rest of it (by one watchdog task per
/// store, running only while reads queue; a batch is bounded by the
/// timeout of its oldest read, so no timer is armed per read), and once
/// no round trip began or ended for a whole [`RedisConfig::op_timeout`]
/// while both places are taken, the next read takes them back.
/// `MGET` answers nil where `GET` answers `WRONGTYPE`, so a key that `MGET`
/// answers nil and that may exist (its `PTTL` in the batch does not say
/// absent, or it had none: a remembered key) is read again alone: foreign
/// data reads as described under "Foreign data", and a remembered key that
/// was deleted costs a second round trip. A user whose ACL refuses `MGET`
/// keeps working: the store then sends every read alone.
///
/// **Batches have connections of their own.** On a standalone server at a
/// `redis://` address (not TLS, not a Unix socket, not Sentinel, not a
/// cluster), each batch, and each read of many keys at once
/// ([`Store::get_many`]), goes out on one of at most two extra connections
/// named `corral:reads` in `CLIENT LIST`, opened with the URL's user,
/// password and database; corral reads their replies itself, which costs
/// a batched read less than the plain `GET` it replaces (redis-rs's
/// general parser costs an `MGET` about as much per value as a whole
/// `GET`). They are opened in the background, never waited for: a batch
/// that finds none idle goes through the command connection, as every
/// batch did before, and starts opening one for the batches after it
/// (after an open fails, none is tried for
/// [`RedisConfig::reconnect_max_delay`]). A store that never has reads in
/// flight together and never reads many keys at once opens none. They
/// belong to the command connection: once it is made anew (lost, silent,
/// or its server demoted) the old ones are no longer used (the next batch
/// closes them), and while it is down batches go through it and fail or
/// wait as it does; one left idle for longer than
/// [`RedisConfig::health_interval`] is closed rather than used. A batch
/// whose connection breaks goes through the command connection with the
/// time it has left; one that times out is never reused, so no reply is
/// read as another batch's. They use [`RedisConfig::tcp_keepalive`] too.
///
/// # Sentinel
///
/// [`connect_sentinel`](Self::connect_sentinel) takes the name of a
/// Sentinel group's master and the URLs of its sentinels. The store holds
/// no fixed address: every connection it makes — the command connection
/// and the subscriber's, at the start and at each reconnect — asks the
/// sentinels in turn for the master (`SENTINEL get-master-addr-by-name`,
/// each bounded by [`RedisConfig::connect_timeout`]), and the command
/// connection checks with `ROLE` that the node is a master before using
/// it. So a failover is followed the way an outage is survived:
///
/// - the master dies: calls fail as [`StoreErrorKind::Unavailable`]
///   (a cache fails open, and its breaker opens as for any outage), the
///   connection is remade with backoff, and once the sentinels name the
///   promoted replica it is used;
/// - the master is demoted but stays up (a failover the sentinels did not
///   end with killing its clients, or roles swapped by hand): its answer
///   to a write, `READONLY`, also makes the connection be remade through
///   the sentinels (a plain read may still be served by the demoted node
///   until the next write);
/// - the subscriber loses its connection with the old master, or, when
///   the old master lives on as a replica, connects anew once the command
///   connection has moved (see "Failover behind one address" for why);
///   either way it re-subscribes on the new master and, as after any
///   reconnect, caches drop their L1 and waiters re-check, since messages
///   may have been lost.
///
/// Nothing changes in the fences: a commit prepared before the failover
/// carries its lease's token, and the new master refuses it unless its
/// fence (replicated from the old master, or not) holds that token — a
/// `set` or `invalidate` made since, or a fence lost with the writes that
/// were not replicated, refuses it. Writes acknowledged by the old master
/// but not yet replicated are lost with it, as Redis replication is
/// asynchronous: a lost value is a miss, a lost lease lets a second fill
/// start (never an overwrite of newer data).
///
/// # Failover behind one address
///
/// Managed services (and DNS-based setups of one's own) fail over by
/// moving a name: `redis://primary.example:6379` reaches the promoted
/// replica from then on, while connections already open stay with the old
/// master, which may live on as a replica. A store on such an address
/// ([`connect`](RedisStore::connect)) finds the demotion by the server's
/// `READONLY` answer to a write, or by its health check (`ROLE`, every
/// [`RedisConfig::health_interval`]; found even by a store that writes
/// nothing), and connects anew — resolving the name again — once its
/// connection is at least [`RedisConfig::reconnect_max_delay`] old (1 s by
/// default). Writes made before fail as [`StoreErrorKind::Unavailable`]. A
/// store pointed at a replica for good (a misconfiguration: every write
/// fails) costs its server a new command and subscriber connection per
/// that delay, not one per write, and logs a warning each time.
///
/// Once the new command connection is up, the subscriber connects anew
/// too. A demoted master relays its new master's messages only through its
/// replication link: not at all before the link is up — after a full
/// resynchronization, held back by the new master's
/// `repl-diskless-sync-delay` (5 s by default), what was published before
/// never reaches it — nor while the link is down, nor once the node is
/// retired, and its subscribers are not told. So the subscriber follows the
/// writes to the new master, and, as after any reconnect, every cache on
/// the store drops its L1 (a backplane reset), since messages may have
/// been lost meanwhile.
/// The subscriber resolves the name right after the command connection
/// did; should the name still reach the old server then, the next check
/// finds it a replica again and both move once more.
///
/// # Dead connections
///
/// A connection can die without an error — a partitioned host, a dropped
/// NAT entry: no FIN, no RST — and then its calls would only time out, one
/// by one, while the subscriber on such a connection would hear nothing
/// and not know it. So both are checked, and replaced when they stop
/// answering (with `h` = [`RedisConfig::health_interval`], `t` =
/// [`RedisConfig::op_timeout`], `c` = [`RedisConfig::connect_timeout`]):
///
/// - **The command connection** (standalone) is asked its server's `ROLE`
///   every `h`, whatever its traffic (a `PING` instead once the server
///   refused `ROLE`; an answer naming a replica is a demotion, see "Failover
///   behind one address"). After a check with no answer within `t`, the store
///   connects anew and swaps the new connection in: a connection that goes
///   silent is replaced within **`h + t + c`**, as long as the server answers
///   a new connection. Calls sent on the silent one fail with
///   [`StoreErrorKind::Timeout`] after `t` each; calls made after the swap
///   use the new one, so calls succeed again at most `h + 2t + c` after it
///   went silent. When no new connection can be made (the server itself is
///   frozen or unreachable), the old one stays and is checked again `h`
///   later: a server that only stalled answers on it as soon as it resumes.
///   Reads and writes pay nothing for the check (no timer, no shared write).
/// - **The subscriber** gets a `PING` every `h`, bounded by `t`; with no
///   answer it reconnects after a pause of at most 50 ms and subscribes
///   again: a silent subscriber is replaced and re-subscribed within
///   **`h + t + 50 ms + c + t`**. Messages published meanwhile may have been
///   lost, so the re-subscription wakes every waiter and every cache on
///   the store drops its L1 (a backplane reset, counted in
///   [`Stats::backplane_resets`](crate::Stats::backplane_resets)).
/// - **Cluster** command connections are not pinged: a call that gets no
///   answer counts as failed, and 3 in a row rebuild the connection
///   (above). A cluster store's subscriber (sharded pub/sub, see
///   "Notifications") sends a `PING` every `h` to every master (where its
///   subscriptions are), bounded by `t`; when one does not answer it
///   connects anew from the seeds and subscribes every channel again (a
///   backplane reset once all are confirmed): a silent master connection
///   is replaced and re-subscribed within **`h + t + c + t`**. A node
///   connection that closes is noticed at once.
/// - **TCP keepalive** ([`RedisConfig::tcp_keepalive`], 10 s by default)
///   is set on every TCP connection — commands, cluster nodes, the
///   subscriber — with `TCP_USER_TIMEOUT` on Linux: the kernel closes a
///   connection whose peer stopped acknowledging within about twice that
///   time, which then fails as broken. A second line of defence, and the
///   only one for an idle cluster node connection.
///
/// # What it needs from Redis
///
/// Tested against Redis 7.0. One server needs nothing specific to Redis 7:
/// Lua scripting with effect replication (the default since 5.0, the only
/// mode since 7.0), `SET ... NX PX`, `PTTL`, and `PUBLISH`. A cluster needs
/// Redis 7 for sharded pub/sub (`SPUBLISH`, `SSUBSCRIBE`).
///
/// # ACL users
///
/// A user needs the keys and the channel of its caches' namespaces and a
/// few commands. For caches named `orders` (namespaces `orders:v<n>`):
///
/// ```text
/// ACL SETUSER orders-app on >password resetkeys ~corral:orders:* resetchannels &corral:orders:*
///     -@all +get +mget +pttl +set +del +pexpire +publish +evalsha +eval +script|load
///     +subscribe +unsubscribe +ping +role +touch
/// ```
///
/// (`SET`, `DEL`, `PEXPIRE` and `PUBLISH` are called by the scripts;
/// `MGET` reads batches, see "Round trips and timeouts": a user refused
/// `MGET` still works, its reads each sent alone, as a warning logged once
/// says.)
/// On a cluster, add `+spublish +ssubscribe +sunsubscribe +cluster|slots` (the
/// sharded channels match `&corral:orders:*` too; `CLUSTER SLOTS` groups a
/// tag invalidation's copies by master). `+touch` keeps the clear version
/// warm under an `allkeys-*` policy; a user refused it works the same
/// (the refused touch is ignored), with the clear version read only by
/// the fills.
/// `+role` lets the health check find a demoted server without a write
/// (refused it, the check sends `PING`, and only a write's `READONLY`
/// answer reveals a demotion); under Sentinel it is needed (the master is
/// checked before use), and the sentinels' user (in their
/// URLs) needs `+sentinel|get-master-addr-by-name`.
/// A call the ACL refuses — a cache of another namespace on the same
/// store, a missing command — fails with [`StoreErrorKind::Denied`] and a
/// message that says it was refused by the ACL: `set` and `invalidate`
/// return it, `get_or_fill` fails open (fills without a lease) and counts
/// a store error. A channel refused to the subscriber is logged once and
/// its waiters fall back to polling; the other channels are not affected.
///
/// # Example
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use corral::{Cache, RedisConfig, RedisStore};
///
/// let store = RedisStore::connect("redis://127.0.0.1/", RedisConfig::default()).await?;
/// // Or: RedisStore::connect_cluster(&node_urls, RedisConfig::default()).await?
/// // Or: RedisStore::connect_sentinel("mymaster", &sentinel_urls, RedisConfig::default()).await?
/// let users = Cache::<String>::builder("users").store(store.clone()).build()?;
/// let name = users
///     .get_or_fill("user:42", || async { Ok::<_, std::io::Error>("Ada".to_string()) })
///     .await?;
/// # let _ = name;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    target: String,
    connection: Connection,
    /// Reads of value keys, batched while one is in flight.
    reads: Reads,
    config: RedisConfig,
    rng: Mutex<fastrand::Rng>,
    subscriber: Subscriber,
    expiries: Expiries,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("target", &self.inner.target)
            .field("connection", &self.inner.connection)
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Connects to one Redis server (`redis://[user:password@]host[:port][/db]`,
    /// `rediss://...` for TLS with the feature `tls`, or `unix://`), loads
    /// the scripts and starts the subscriber. Must be called within a tokio
    /// runtime.
    ///
    /// The user name and password of the URL authenticate every connection
    /// of the store (commands, scripts and the subscriber); see "What it
    /// needs from Redis" for the least an ACL user needs. With `rediss://`,
    /// every connection uses TLS, verified against the webpki roots or the
    /// CA of [`RedisConfig::tls_root_ca`], with the client certificate of
    /// [`RedisConfig::tls_client_auth`] if given. The password appears in no
    /// `Debug` output or error (it is shown as `***`).
    ///
    /// # Errors
    ///
    /// [`StoreErrorKind::Configuration`] (not retryable) for a malformed
    /// URL, a `rediss://` URL without the feature `tls`, unreadable TLS
    /// material, or TLS material with a `redis://` URL;
    /// [`StoreErrorKind::Denied`] when authentication fails or the ACL
    /// refuses loading the scripts;
    /// [`StoreErrorKind::Unavailable`] or [`StoreErrorKind::Timeout`] when the
    /// server cannot be reached within `config.connect_timeout` (plus
    /// `config.op_timeout` to load the scripts);
    /// [`StoreErrorKind::Configuration`] outside a tokio runtime.
    pub async fn connect(url: &str, config: RedisConfig) -> Result<Self, StoreError> {
        let runtime = runtime()?;
        let config = config.normalized();
        let client = client::client(url, &config)?;
        let reconnect = reconnect(&config, &redact_url(url));
        let source = Source::Fixed(Box::new(client));
        let connection = bounded(
            config.connect_timeout,
            "connect",
            Standalone::connect(source.clone(), reconnect, runtime.clone()),
        )
        .await
        .map_err(|e| client::scrubbed(url, e))?;
        let feed = Feed::Server(source, connection.moves());
        Self::finish(
            redact_url(url),
            Connection::Standalone(connection),
            feed,
            config,
            &runtime,
        )
        .await
    }

    /// Connects to a Redis Cluster through any of its nodes (`urls` are
    /// seeds, as in [`connect`](Self::connect)), loads the scripts on every
    /// master and starts the subscriber (on one node at a time, trying the
    /// seeds in turn). Must be called within a tokio runtime.
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect); also
    /// [`StoreErrorKind::Configuration`] when `urls` is empty.
    pub async fn connect_cluster(urls: &[String], config: RedisConfig) -> Result<Self, StoreError> {
        let runtime = runtime()?;
        let config = config.normalized();
        let seeds = ClusterSeeds::new(urls, &config)?;
        let connection = bounded(
            config.connect_timeout,
            "connect",
            seeds.cluster.get_async_connection(),
        )
        .await
        .map_err(|e| seeds.scrub(e))?;
        let connection = Cluster::new(
            seeds.cluster,
            connection,
            config.connect_timeout,
            runtime.clone(),
            &seeds.target,
        );
        Self::finish(
            seeds.target,
            Connection::Cluster(connection),
            Feed::Cluster(seeds.sharded),
            config,
            &runtime,
        )
        .await
    }

    /// A store for a Redis Cluster that does not wait for it, as
    /// [`connect_lazy`](Self::connect_lazy) is for one server: returns at
    /// once and connects from the seeds in the background, retrying with
    /// backoff until the cluster answers; until then store calls fail at
    /// once with [`StoreErrorKind::Unavailable`] (after waiting for the
    /// first attempt). Scripts are cached by each master on their first
    /// use. Must be called within a tokio runtime.
    ///
    /// # Errors
    ///
    /// As [`connect_lazy`](Self::connect_lazy); also
    /// [`StoreErrorKind::Configuration`] when `urls` is empty.
    pub fn connect_cluster_lazy(urls: &[String], config: RedisConfig) -> Result<Self, StoreError> {
        let runtime = runtime()?;
        let config = config.normalized();
        let seeds = ClusterSeeds::new(urls, &config)?;
        let connection = Cluster::lazy(
            seeds.cluster,
            config.connect_timeout,
            runtime.clone(),
            (RECONNECT_MIN_DELAY, config.reconnect_max_delay),
            &seeds.target,
        );
        Ok(Self::assemble(
            seeds.target,
            Connection::Cluster(connection),
            Feed::Cluster(seeds.sharded),
            config,
            &runtime,
        ))
    }

    /// A store for one Redis server that does not wait for it: returns at
    /// once, and connects in the background — retrying with backoff (from
    /// 50 ms up to [`RedisConfig::reconnect_max_delay`]) for as long as the
    /// server does not answer. So a service can start while Redis is down:
    /// until it answers, store calls fail at once with
    /// [`StoreErrorKind::Unavailable`] (after waiting, bounded by
    /// [`RedisConfig::op_timeout`], for the first attempt), which a cache
    /// treats as it treats any outage (`get_or_fill` fills without a
    /// lease; see "A sick store" in the crate docs); from the moment Redis
    /// answers, the same store uses it. Scripts are not loaded up front:
    /// each is cached by the server on its first use (`EVAL` after
    /// `NOSCRIPT`). Must be called within a tokio runtime.
    ///
    /// URLs and TLS settings are as in [`connect`](Self::connect).
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use corral::{Cache, RedisConfig, RedisStore};
    ///
    /// // Returns at once, even while Redis is down.
    /// let store = RedisStore::connect_lazy("redis://127.0.0.1/", RedisConfig::default())?;
    /// let users = Cache::<String>::builder("users").store(store).build()?;
    /// # let _ = users;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// Only what no retry can fix, as [`StoreErrorKind::Configuration`]: a
    /// malformed URL, a `rediss://` URL without the feature `tls`,
    /// unreadable TLS material, or TLS material with a `redis://` URL; a
    /// call outside a tokio runtime. A refused
    /// password shows later, as [`StoreErrorKind::Denied`] errors of the
    /// store's calls.
    pub fn connect_lazy(url: &str, config: RedisConfig) -> Result<Self, StoreError> {
        let runtime = runtime()?;
        let config = config.normalized();
        let client = client::client(url, &config)?;
        let reconnect = reconnect(&config, &redact_url(url));
        let source = Source::Fixed(Box::new(client));
        let connection = Standalone::lazy(source.clone(), reconnect, runtime.clone());
        let feed = Feed::Server(source, connection.moves());
        Ok(Self::assemble(
            redact_url(url),
            Connection::Standalone(connection),
            feed,
            config,
            &runtime,
        ))
    }

    /// Connects to the current master of the Sentinel group `master_name`,
    /// asking the sentinels at `sentinels` (`redis://[user:password@]host:port`,
    /// `rediss://` with the feature `tls`) in turn, loads the scripts and
    /// starts the subscriber. Must be called within a tokio runtime.
    ///
    /// The store follows failovers: every reconnect of the command
    /// connection or the subscriber asks the sentinels for the master
    /// again, and checks with `ROLE` that the node named is a master. A
    /// connection that breaks (the master died) or whose server answers
    /// `READONLY` (it was demoted to a replica) is made anew that way. The
    /// fences and the breaker work as on one server: a commit prepared
    /// before a failover is refused by the new master unless its fence
    /// holds the commit's token (a fence lost with unreplicated writes is
    /// absent, and an absent fence refuses), and calls fail with
    /// [`StoreErrorKind::Unavailable`] while no master answers. See
    /// "Sentinel" in the [`RedisStore`] docs.
    ///
    /// The master is reached with [`RedisConfig::master_auth`] and
    /// [`RedisConfig::master_db`], over TLS when the sentinels' URLs are
    /// `rediss://` (with the same TLS material).
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect); also
    /// [`StoreErrorKind::Configuration`] when `master_name` or `sentinels`
    /// is empty, [`StoreErrorKind::Protocol`] when no sentinel that
    /// answered knows `master_name`; [`StoreErrorKind::Unavailable`] when
    /// no sentinel answers. The message names the master and the sentinels
    /// asked (without passwords).
    pub async fn connect_sentinel(
        master_name: &str,
        sentinels: &[String],
        config: RedisConfig,
    ) -> Result<Self, StoreError> {
        let runtime = runtime()?;
        let config = config.normalized();
        let group = sentinel_group(master_name, sentinels, &config)?;
        let source = Source::Sentinel(Arc::clone(&group));
        // Each sentinel may take the connect timeout, then the master's
        // connect and its `ROLE`.
        let steps = u32::try_from(sentinels.len())
            .unwrap_or(u32::MAX)
            .saturating_add(2);
        let connection = bounded(
            config.connect_timeout.saturating_mul(steps),
            "connect",
            Standalone::connect(
                source.clone(),
                reconnect(&config, &group.target()),
                runtime.clone(),
            ),
        )
        .await
        .map_err(|e| group.scrub(scrub_seeds(sentinels, e)))?;
        let feed = Feed::Server(source, connection.moves());
        Self::finish(
            group.target(),
            Connection::Standalone(connection),
            feed,
            config,
            &runtime,
        )
        .await
    }

    /// A store on a Sentinel group that does not wait for it, as
    /// [`connect_lazy`](Self::connect_lazy) is for one server: returns at
    /// once and finds the master in the background, retrying with backoff
    /// until one answers. Must be called within a tokio runtime.
    ///
    /// # Errors
    ///
    /// As [`connect_lazy`](Self::connect_lazy); also
    /// [`StoreErrorKind::Configuration`] when `master_name` or `sentinels`
    /// is empty. An unknown master name shows later, as errors of the store's
    /// calls.
    pub fn connect_sentinel_lazy(
        master_name: &str,
        sentinels: &[String],
        config: RedisConfig,
    ) -> Result<Self, StoreError> {
        let runtime = runtime()?;
        let config = config.normalized();
        let group = sentinel_group(master_name, sentinels, &config)?;
        let source = Source::Sentinel(Arc::clone(&group));
        let reconnect = reconnect(&config, &group.target());
        let connection = Standalone::lazy(source.clone(), reconnect, runtime.clone());
        let feed = Feed::Server(source, connection.moves());
        Ok(Self::assemble(
            group.target(),
            Connection::Standalone(connection),
            feed,
            config,
            &runtime,
        ))
    }

    async fn finish(
        target: String,
        connection: Connection,
        feed: Feed,
        config: RedisConfig,
        runtime: &tokio::runtime::Handle,
    ) -> Result<Self, StoreError> {
        connection.load_scripts(config.op_timeout).await?;
        Ok(Self::assemble(target, connection, feed, config, runtime))
    }

    /// The store around a connection (scripts loaded or not), with its
    /// subscriber.
    fn assemble(
        target: String,
        connection: Connection,
        feed: Feed,
        config: RedisConfig,
        runtime: &tokio::runtime::Handle,
    ) -> Self {
        let subscriber = Subscriber::spawn(
            runtime,
            feed,
            Settings {
                connect_timeout: config.connect_timeout,
                op_timeout: config.op_timeout,
                max_backoff: config.reconnect_max_delay,
                health_interval: config.health_interval,
                store: target.as_str().into(),
            },
        );
        Self {
            inner: Arc::new(Inner {
                target,
                reads: Reads::new(
                    connection.clone(),
                    lanes::for_connection(&connection, &config, runtime),
                    config.op_timeout,
                    runtime.clone(),
                ),
                connection,
                rng: Mutex::new(fastrand::Rng::with_seed(random_seed())),
                subscriber,
                expiries: Expiries::new(config.read_memory),
                config,
            }),
        }
    }

    /// The settings this store runs with.
    pub fn config(&self) -> &RedisConfig {
        &self.inner.config
    }

    /// The names of the Redis keys that hold `key`'s value, fill lease and
    /// fence (see "Key layout"), to inspect them with `redis-cli`. They
    /// share one hash slot.
    ///
    /// ```
    /// use corral::store::StoreKey;
    /// use corral::RedisStore;
    ///
    /// let names = RedisStore::keys_of(&StoreKey::new("users:v1", "user:42"));
    /// assert!(names.value.starts_with("corral:users:v1:{"));
    /// assert!(names.value.ends_with("}:v:user:42"));
    /// assert!(names.lease.ends_with("}:l:user:42"));
    /// assert!(names.fence.ends_with("}:f:user:42"));
    /// ```
    pub fn keys_of(key: &StoreKey) -> RedisKeys {
        let names = KeyNames::new(key);
        RedisKeys {
            value: names.value,
            lease: names.lease,
            fence: names.fence,
        }
    }

    /// The verb and channel announcing a change in `namespace`: on a
    /// cluster, `SPUBLISH` on `sharded` (a channel in the changed keys'
    /// slot, so the message stays in their shard); otherwise `PUBLISH` on
    /// the namespace's channel.
    fn announcement(
        &self,
        namespace: &str,
        sharded: impl FnOnce() -> String,
    ) -> (&'static [u8], String) {
        match self.inner.connection {
            Connection::Cluster(_) => (b"SPUBLISH", sharded()),
            Connection::Standalone(_) => (b"PUBLISH", keys::channel(namespace)),
        }
    }

    /// [`announcement`](Self::announcement) of a change of the key named
    /// `names`: on its bucket's channel.
    fn key_channel(&self, namespace: &str, names: &KeyNames) -> (&'static [u8], String) {
        self.announcement(namespace, || keys::bucket_channel(namespace, names.bucket))
    }

    /// [`announcement`](Self::announcement) of a tag or clear change: on
    /// the namespace's tag channel (in the slot of its tag keys).
    fn tag_channel(&self, namespace: &str) -> (&'static [u8], String) {
        self.announcement(namespace, || keys::tag_channel(namespace))
    }

    /// The key of the copy of `tag`'s version at `home` in `namespace`:
    /// one per bucket on a cluster (in the slot of the entries it guards),
    /// the one key of the tag on one server.
    fn version_key(&self, namespace: &str, home: u32, tag: &str) -> String {
        match self.inner.connection {
            Connection::Cluster(_) => keys::copy_key(namespace, home, tag),
            Connection::Standalone(_) => keys::tag_key(namespace, tag),
        }
    }

    /// The clear version's copy guarding `key`'s entry.
    fn clear_copy(&self, key: &StoreKey) -> String {
        self.version_key(key.namespace(), self.version_home(key), "")
    }

    /// A fresh random lease token: 128 bits as 32 hex digits.
    fn token(&self) -> String {
        let mut rng = self
            .inner
            .rng
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        format!("{:032x}", rng.u128(..))
    }

    /// Waits (briefly) for the first subscription of `namespace`'s channel
    /// if caches keep values current through it; see [`Subscriber::ready`].
    #[inline]
    async fn ahead_of_backplane(&self, namespace: &str) -> Option<Arc<str>> {
        let bound = self.inner.config.op_timeout / 2;
        self.inner.subscriber.ready(namespace, bound).await
    }

    /// Records that a read went ahead of its namespace's first
    /// subscription and succeeded.
    fn went_ahead<T, E>(&self, ahead: Option<Arc<str>>, result: &Result<T, E>) {
        if let (Some(channel), Ok(_)) = (ahead, result) {
            self.inner.subscriber.went_ahead(&channel);
        }
    }

    /// [`read_value`](Self::read_value), after the namespace's first
    /// subscription.
    async fn read(&self, key: &StoreKey) -> Result<Option<Stored>, StoreError> {
        let ahead = self.ahead_of_backplane(key.namespace()).await;
        let read = self.read_value(key).await;
        self.went_ahead(ahead, &read);
        read
    }

    /// The value of `key`, if present: a plain `GET` of a write whose
    /// expiry is remembered, else (or when the `GET` finds another write)
    /// a pipelined `PTTL` + `GET`; batched with the reads in flight.
    async fn read_value(&self, key: &StoreKey) -> Result<Option<Stored>, StoreError> {
        let name = keys::ValueName::new(key);
        let id = name.id();
        let timeout = self.inner.config.op_timeout;
        let expiries = &self.inner.expiries;
        if let Some(known) = expiries.get(id) {
            // A plain GET; its frame tells whether it is the write whose
            // expiry is remembered.
            match self.inner.reads.get(name, timeout).await? {
                Value::Nil => {
                    expiries.forget(id);
                    return Ok(None);
                }
                Value::BulkString(bytes) => {
                    if let Some(bytes) = frame::unframe_as(bytes, known.token()) {
                        let (remaining, generation) = known.remaining();
                        return Ok(Some(Stored {
                            bytes,
                            remaining: Some(remaining),
                            generation: Some(generation),
                        }));
                    }
                }
                other => return Err(unexpected("get", &other)),
            }
        }
        let asked = std::time::Instant::now();
        let (pttl, value) = self.inner.reads.read(name, timeout).await?;
        match value {
            Value::BulkString(bytes) => {
                let stored = stored(bytes, &pttl);
                expiries.learn_read(id, &stored, asked);
                Ok(Some(stored))
            }
            Value::Nil => Ok(None),
            other => Err(unexpected("get", &other)),
        }
    }

    /// The values of `keys`, if present: one pipeline of `PTTL` + `GET`
    /// per hash slot.
    async fn read_many(&self, keys: &[StoreKey]) -> Result<Vec<Option<Stored>>, StoreError> {
        // Each key hashed once for its slot, its command and its touch.
        let names: Vec<keys::ValueName<'_>> = keys.iter().map(keys::ValueName::new).collect();
        // One pipeline per group (a cluster routes a pipeline to one
        // node), all sent at once.
        let groups = self
            .inner
            .connection
            .by_slot((0..names.len()).collect(), |&i| names[i].slot());
        let timeout = self.inner.config.op_timeout;
        let reads = groups.iter().map(|group| {
            let group_names: Vec<keys::ValueName<'_>> = group.iter().map(|&i| names[i]).collect();
            async move { self.inner.reads.read_many(&group_names, timeout).await }
        });
        let replies = futures_util::future::join_all(reads).await;
        let mut found: Vec<Option<Stored>> = vec![None; keys.len()];
        for (group, reply) in groups.iter().zip(replies) {
            for (&index, (pttl, value)) in group.iter().zip(reply?) {
                found[index] = match value {
                    Value::BulkString(bytes) => Some(stored(bytes, &pttl)),
                    Value::Nil => None,
                    other => return Err(unexpected("get", &other)),
                };
            }
        }
        Ok(found)
    }

    async fn run(
        &self,
        lua: &scripts::Lua,
        names: &KeyNames,
        args: &[&[u8]],
    ) -> Result<Value, StoreError> {
        self.inner
            .connection
            .invoke(lua, names, args, self.inner.config.op_timeout)
            .await
    }
}

/// The key encoding and value framing on arbitrary input, for
/// [`crate::fuzzing::keys`].
#[cfg(feature = "test-hooks")]
pub(crate) fn fuzz_keys(namespace: &str, key: &str, bytes: &[u8]) {
    let store_key = StoreKey::new(namespace, key);
    let names = keys::KeyNames::new(&store_key);
    let slot = keys::slot(&names.value);
    assert_eq!(keys::slot(&names.lease), slot, "lease in another slot");
    assert_eq!(keys::slot(&names.fence), slot, "fence in another slot");
    assert!(names.value != names.lease && names.lease != names.fence && names.value != names.fence);
    assert_eq!(keys::value_name(&store_key), names.value);
    let _ = keys::namespace_of(&keys::channel(namespace));
    let _ = keys::tag_key(namespace, key);
    let (body, generation) = frame::unframe(bytes.to_vec());
    if let Some(generation) = generation {
        let reframed = frame::frame(&generation, &body);
        let (again, token) = frame::unframe(reframed);
        assert_eq!(again, body, "a value changed on re-framing");
        assert_eq!(
            token.as_deref(),
            Some(&*generation),
            "a generation changed on re-framing"
        );
    }
}

/// The tokio runtime the store's connections and subscriber run on.
fn runtime() -> Result<tokio::runtime::Handle, StoreError> {
    tokio::runtime::Handle::try_current().map_err(|_| {
        StoreError::new(
            StoreErrorKind::Configuration,
            "RedisStore: connect must be called within a tokio runtime",
        )
    })
}

/// A seed from the OS-seeded keys of `std`'s `RandomState`.
pub(super) fn random_seed() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(0x636f_7272_616c_u64)
}

/// Milliseconds for `PX`/`PEXPIRE`: at least 1, at most [`MAX_TTL_MS`].
fn millis(duration: Duration) -> String {
    let ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    ms.clamp(1, MAX_TTL_MS).to_string()
}

/// A value read with its `PTTL`: envelope bytes, remaining time and the
/// generation from its frame.
fn stored(bytes: Vec<u8>, pttl: &Value) -> Stored {
    let (bytes, generation) = frame::unframe(bytes);
    Stored {
        bytes,
        remaining: remaining(pttl),
        generation,
    }
}

/// A `PTTL` reply as a remaining time (`None` for "no expiry" or "absent").
fn remaining(pttl: &Value) -> Option<Duration> {
    match pttl {
        Value::Int(ms) => u64::try_from(*ms).ok().map(Duration::from_millis),
        _ => None,
    }
}

/// A version returned by [`scripts::TAG_VERSIONS`]; `None` if it is not one.
fn tag_version(reply: &Value) -> Option<Arc<str>> {
    match reply {
        Value::BulkString(version) if is_version(version) => {
            std::str::from_utf8(version).ok().map(Arc::from)
        }
        _ => None,
    }
}

/// The tail of a backplane message about `key` from `origin`; the scripts
/// put the kind letter in front.
fn message(origin: Origin, key: &str) -> String {
    format!("|{}|{key}", origin.to_hex())
}

fn int(what: &str, reply: &Value) -> Result<i64, StoreError> {
    match reply {
        Value::Int(n) => Ok(*n),
        other => Err(unexpected(what, other)),
    }
}

impl Store for RedisStore {
    fn get_or_lease<'a>(
        &'a self,
        key: &'a StoreKey,
        request: &'a LeaseRequest,
    ) -> BoxFuture<'a, Result<Lookup, StoreError>> {
        Box::pin(async move {
            let (mode, expected): (&[u8], &[u8]) = match &request.grant {
                Grant::IfNoValue => (b"0", b""),
                Grant::OverAnyValue => (b"1", b""),
                Grant::OverGeneration(generation) => {
                    (b"2", generation.as_deref().map_or(&b""[..], str::as_bytes))
                }
            };
            let ahead = self.ahead_of_backplane(key.namespace()).await;
            let names = KeyNames::new(key);
            let token = self.token();
            let lease_ms = millis(request.lease_ttl);
            let fence_ms = millis(request.fence_ttl);
            let clear = self.clear_copy(key);
            let asked = std::time::Instant::now();
            let reply = self
                .inner
                .connection
                .invoke_on(
                    &scripts::GET_OR_LEASE,
                    &[&names.value, &names.lease, &names.fence, &clear],
                    &[
                        token.as_bytes(),
                        lease_ms.as_bytes(),
                        fence_ms.as_bytes(),
                        mode,
                        expected,
                    ],
                    self.inner.config.op_timeout,
                )
                .await?;
            match reply {
                Value::Array(mut items) => match items.as_mut_slice() {
                    [Value::Int(1), Value::BulkString(bytes), pttl] => {
                        let found = stored(std::mem::take(bytes), pttl);
                        // Remembered as a plain read's is: the next read of
                        // this value may be a plain GET.
                        let id = keys::ValueName::new(key).id();
                        self.inner.expiries.learn_read(id, &found, asked);
                        let hit = Ok(Lookup::Hit(found));
                        self.went_ahead(ahead, &hit);
                        hit
                    }
                    [Value::Int(2)] => Ok(Lookup::Granted(Lease::new(token))),
                    [Value::Int(3), pttl] => Ok(Lookup::Held {
                        remaining: remaining(pttl),
                    }),
                    [Value::Int(4)] => Ok(Lookup::Changed),
                    _ => Err(unexpected("get_or_lease", &Value::Array(items))),
                },
                other => Err(unexpected("get_or_lease", &other)),
            }
        })
    }

    /// A key whose value this store read and whose time to live, as
    /// remembered from that read, is not over.
    fn recalls(&self, key: &StoreKey) -> bool {
        let id = keys::ValueName::new(key).id();
        self.inner
            .expiries
            .get(id)
            .is_some_and(|known| known.is_live())
    }

    fn get<'a>(&'a self, key: &'a StoreKey) -> BoxFuture<'a, Result<Option<Stored>, StoreError>> {
        Box::pin(self.read(key))
    }

    fn get_many<'a>(
        &'a self,
        keys: &'a [StoreKey],
    ) -> BoxFuture<'a, Result<Vec<Option<Stored>>, StoreError>> {
        Box::pin(async move {
            let ahead = match keys.first() {
                Some(key) => self.ahead_of_backplane(key.namespace()).await,
                None => None,
            };
            let found = self.read_many(keys).await;
            self.went_ahead(ahead, &found);
            found
        })
    }

    fn renew<'a>(
        &'a self,
        key: &'a StoreKey,
        lease: &'a Lease,
        request: &'a LeaseRequest,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let names = KeyNames::new(key);
            let lease_ms = millis(request.lease_ttl);
            let fence_ms = millis(request.fence_ttl);
            let reply = self
                .run(
                    &scripts::RENEW,
                    &names,
                    &[
                        lease.token().as_bytes(),
                        lease_ms.as_bytes(),
                        fence_ms.as_bytes(),
                    ],
                )
                .await?;
            Ok(int("renew", &reply)? == 1)
        })
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
            let names = KeyNames::new(key);
            let (verb, channel) = self.key_channel(key.namespace(), &names);
            let message = message(origin, key.key());
            let ttl_ms = millis(ttl);
            let framed = frame::frame(lease.token(), bytes);
            let clear = self.clear_copy(key);
            let reply = self
                .inner
                .connection
                .invoke_on(
                    &scripts::COMMIT,
                    &[&names.value, &names.lease, &names.fence, &clear],
                    &[
                        lease.token().as_bytes(),
                        &framed,
                        ttl_ms.as_bytes(),
                        verb,
                        channel.as_bytes(),
                        message.as_bytes(),
                    ],
                    self.inner.config.op_timeout,
                )
                .await?;
            Ok(if int("commit", &reply)? == 1 {
                Commit::Stored
            } else {
                Commit::Refused
            })
        })
    }

    fn release<'a>(
        &'a self,
        key: &'a StoreKey,
        lease: &'a Lease,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let names = KeyNames::new(key);
            let (verb, channel) = self.key_channel(key.namespace(), &names);
            let message = message(Origin::new(0), key.key());
            let reply = self
                .run(
                    &scripts::RELEASE,
                    &names,
                    &[
                        lease.token().as_bytes(),
                        verb,
                        channel.as_bytes(),
                        message.as_bytes(),
                    ],
                )
                .await?;
            int("release", &reply).map(drop)
        })
    }

    fn set<'a>(
        &'a self,
        key: &'a StoreKey,
        bytes: &'a [u8],
        ttl: Duration,
        origin: Origin,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            // The writer keeps the value in its L1: after the first
            // subscription, like a read.
            let ahead = self.ahead_of_backplane(key.namespace()).await;
            let names = KeyNames::new(key);
            let (verb, channel) = self.key_channel(key.namespace(), &names);
            let message = message(origin, key.key());
            let ttl_ms = millis(ttl);
            let generation = self.token();
            let framed = frame::frame(&generation, bytes);
            let clear = self.clear_copy(key);
            let reply = self
                .inner
                .connection
                .invoke_on(
                    &scripts::SET,
                    &[&names.value, &names.lease, &names.fence, &clear],
                    &[
                        &framed,
                        ttl_ms.as_bytes(),
                        generation.as_bytes(),
                        verb,
                        channel.as_bytes(),
                        message.as_bytes(),
                    ],
                    self.inner.config.op_timeout,
                )
                .await?;
            let written = int("set", &reply).map(drop);
            self.went_ahead(ahead, &written);
            written
        })
    }

    fn invalidate<'a>(
        &'a self,
        key: &'a StoreKey,
        origin: Origin,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let names = KeyNames::new(key);
            let (verb, channel) = self.key_channel(key.namespace(), &names);
            let message = message(origin, key.key());
            let reply = self
                .run(
                    &scripts::INVALIDATE,
                    &names,
                    &[verb, channel.as_bytes(), message.as_bytes()],
                )
                .await?;
            int("invalidate", &reply).map(drop)
        })
    }

    /// On a cluster, `key`'s bucket: each bucket holds its own copy of the
    /// versions, in its slot (a shard holds the copies that guard its own
    /// entries). On one server, 0: one copy.
    fn version_home(&self, key: &StoreKey) -> u32 {
        match self.inner.connection {
            Connection::Cluster(_) => keys::bucket_of(key),
            Connection::Standalone(_) => 0,
        }
    }

    fn tag_versions<'a>(
        &'a self,
        namespace: &'a str,
        home: u32,
        tags: &'a [Arc<str>],
        retention: Duration,
        origin: Origin,
    ) -> BoxFuture<'a, Result<Vec<Arc<str>>, StoreError>> {
        Box::pin(async move {
            if tags.is_empty() {
                return Ok(Vec::new());
            }
            let ahead = self.ahead_of_backplane(namespace).await;
            let names: Vec<String> = tags
                .iter()
                .map(|tag| self.version_key(namespace, home, tag))
                .collect();
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            let fresh: Vec<Arc<str>> = {
                let mut rng = self
                    .inner
                    .rng
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                tags.iter().map(|_| new_version(&mut rng)).collect()
            };
            let retention_ms = millis(retention);
            // A copy created anew is announced in its own slot.
            let (verb, channel) = self.announcement(namespace, || {
                keys::bucket_channel(namespace, keys::home_tag(home))
            });
            let origin = origin.to_hex();
            let mut args: Vec<&[u8]> = vec![
                retention_ms.as_bytes(),
                verb,
                channel.as_bytes(),
                origin.as_bytes(),
            ];
            for (tag, version) in tags.iter().zip(&fresh) {
                args.push(tag.as_bytes());
                args.push(version.as_bytes());
            }
            let reply = self
                .inner
                .connection
                .invoke_on(
                    &scripts::TAG_VERSIONS,
                    &names,
                    &args,
                    self.inner.config.op_timeout,
                )
                .await?;
            let versions = match &reply {
                Value::Array(items) if items.len() == tags.len() => {
                    items.iter().map(tag_version).collect::<Option<Vec<_>>>()
                }
                _ => None,
            };
            let versions = versions.ok_or_else(|| unexpected("tag versions", &reply));
            self.went_ahead(ahead, &versions);
            versions
        })
    }

    fn invalidate_tag<'a>(
        &'a self,
        namespace: &'a str,
        tag: &'a str,
        retention: Duration,
        origin: Origin,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let (verb, channel) = self.tag_channel(namespace);
            let kind = if tag.is_empty() { 'x' } else { 't' };
            let message = format!("{kind}|{}|{tag}", origin.to_hex());
            let version = new_version(
                &mut self
                    .inner
                    .rng
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner),
            );
            let retention_ms = millis(retention);
            if let Connection::Cluster(cluster) = &self.inner.connection {
                let timeout = self.inner.config.op_timeout;
                let copies: Vec<String> = (0..keys::BUCKETS as u32)
                    .map(|home| keys::copy_key(namespace, home, tag))
                    .collect();
                let moves = cluster::MoveCopies {
                    copies: &copies,
                    version: &version,
                    retention_ms: &retention_ms,
                };
                bounded(timeout, "invalidate tag", cluster.move_copies(moves)).await?;
                let mut announce = ::redis::cmd("SPUBLISH");
                announce.arg(&channel).arg(&message);
                bounded(timeout, "invalidate tag", cluster.query(&announce)).await?;
                return Ok(());
            }
            let key = keys::tag_key(namespace, tag);
            let reply = self
                .inner
                .connection
                .invoke_on(
                    &scripts::INVALIDATE_TAG,
                    &[key.as_str()],
                    &[
                        version.as_bytes(),
                        retention_ms.as_bytes(),
                        verb,
                        channel.as_bytes(),
                        message.as_bytes(),
                    ],
                    self.inner.config.op_timeout,
                )
                .await?;
            int("invalidate tag", &reply).map(drop)
        })
    }

    fn backplane(&self, namespace: &str, sink: Weak<dyn ChangeSink>) -> bool {
        self.inner
            .subscriber
            .attach_sink(&keys::channel(namespace), sink);
        true
    }

    fn call_bound(&self) -> Option<Duration> {
        Some(self.inner.config.op_timeout)
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.inner.connection.ping(self.inner.config.op_timeout))
    }

    fn attach(&self, namespace: &str) {
        self.inner.subscriber.subscribe(&keys::channel(namespace));
    }

    fn listen(&self, key: &StoreKey) -> Listener {
        let channel = keys::channel(key.namespace());
        let id = keys::listener_id(key.namespace(), key.key());
        self.inner.subscriber.listen(&channel, id.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millis_is_clamped() {
        assert_eq!(millis(Duration::ZERO), "1");
        assert_eq!(millis(Duration::from_micros(1500)), "1");
        assert_eq!(millis(Duration::from_secs(2)), "2000");
        assert_eq!(millis(Duration::MAX), MAX_TTL_MS.to_string());
    }

    #[test]
    fn remaining_reads_pttl() {
        assert_eq!(
            remaining(&Value::Int(1500)),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(remaining(&Value::Int(-1)), None);
        assert_eq!(remaining(&Value::Int(-2)), None);
    }

    #[test]
    fn config_defaults_are_documented_ones() {
        let config = RedisConfig::default();
        assert_eq!(config.op_timeout, Duration::from_secs(1));
        assert_eq!(config.connect_timeout, Duration::from_secs(1));
        assert_eq!(config.reconnect_max_delay, Duration::from_secs(1));
        let zero = RedisConfig::default()
            .op_timeout(Duration::ZERO)
            .connect_timeout(Duration::ZERO)
            .normalized();
        assert_eq!(zero.op_timeout, Duration::from_millis(1));
        assert_eq!(zero.connect_timeout, Duration::from_millis(1));
    }
}

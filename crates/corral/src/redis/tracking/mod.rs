//! Redis client tracking: the server tells the store when a key this
//! process read changes — by any client — and the store hands that on to
//! the caches' sinks, so their in-process copies are dropped.
//!
//! - **Where.** The command connection speaks RESP3 and has tracking on
//!   (`CLIENT TRACKING on NOLOOP`) before it serves its first call, so
//!   every read it makes is tracked; the invalidations arrive as push
//!   messages on that same
//!   connection, after the replies that preceded them, and are handed on
//!   by redis-rs's reader as it reads them ([`pushes`]). The batched reads'
//!   own connections (lanes) are not tracked: reads of namespaces whose
//!   caches keep copies go through the command connection instead
//!   ([`Tracker::tracked_reads`]). A lane lives a second when idle and is a
//!   client of its own, so a lane's tracking would die with it, and
//!   `NOLOOP` could not keep this process's own writes from coming back as
//!   invalidations of what it read there.
//! - **`NOLOOP`.** The server reports no write made on the command
//!   connection itself: this process's own commits and sets do not evict
//!   what they just kept. A write still ends the server's tracking of the
//!   key, so the scripts that write a value read it back last, which tracks
//!   it again. The price: when the server's tracking table is full, the
//!   keys it forgets while running this connection's own command are not
//!   reported to it either (Redis 7.0), and their copies live until their
//!   TTL (see the `RedisStore` docs, "Coherence").
//! - **Flushes.** Tracking lives and dies with its connection: a new one
//!   (the old one lost, silent, or left for a failover) tracks nothing read
//!   before, so the store flushes every sink ([`ChangeSink::flushed`]);
//!   so does a null invalidation (`FLUSHALL`, `FLUSHDB`). A cache resets
//!   its flight table then, so no read started before keeps its value.
//! - **Silence.** A tracked connection that gives no answer to a health
//!   check may be partitioned: what the server pushes on it may be held up
//!   or lost, whether or not a new connection can be made. At the first
//!   such check of a silence ([`Tracker::silent`]) every sink drops what it
//!   holds on the store's word and keeps what it filled without the store
//!   (`FlushReason::Silence`); an answered check or a new connection ends
//!   the silence.
//! - **Fallback.** Where the server refuses RESP3 (Redis before 6, a
//!   proxy) or `CLIENT TRACKING` (an ACL), the store runs without tracking
//!   and says why once, at INFO level ([`enable`]): the backplane still
//!   brings corral's own writes to every cache.
//! - **Cluster.** redis-rs's cluster connection cannot have tracking
//!   turned on for each node connection it makes, so a cluster store keeps
//!   a listening connection of its own on each master, by prefix
//!   (`BCAST`, in either mode), reads the slot map every health interval,
//!   and flushes on a lost listener, a failover or a moved slot
//!   ([`nodes`]). Its own writes come back to it as invalidations.
//!
//! [`ChangeSink::flushed`]: crate::store::ChangeSink::flushed

mod bcast;
mod enable;
mod nodes;
mod pushes;

pub(in crate::redis) use self::enable::Made;
pub(in crate::redis) use self::nodes::{cluster_mode, Seeds};

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_utils::sync::ShardedLock;

use super::read::expiries::Expiries;
use crate::data::tracking::Tracking;
use crate::store::{FlushReason, Sinks};
use crate::sync::{lock_std, read, write};

/// A store's client tracking. Clones share it.
#[derive(Clone)]
pub(in crate::redis) struct Tracker {
    shared: Arc<Shared>,
}

struct Shared {
    /// What the store's settings ask for.
    mode: Tracking,
    /// The store's name in logs.
    store: Arc<str>,
    /// The caches' sinks, by their namespace's channel (shared with the
    /// subscriber).
    sinks: Arc<Sinks>,
    /// The store's remembered expiries: a changed key's is forgotten.
    expiries: Arc<Expiries>,
    /// Whether the command connection in use has tracking on.
    on: AtomicBool,
    /// Set once the server refused RESP3: connections are made with RESP2
    /// (and no tracking) from then on.
    resp2: AtomicBool,
    /// Why tracking is off, once said (logged again only when it changes).
    off: Mutex<Option<String>>,
    /// The namespaces with sinks, and whether one of them keeps copies
    /// (`None`: not asked yet; a sink attached while its cache is being
    /// built cannot be asked): their reads go through the tracked
    /// connection.
    copying: ShardedLock<HashMap<Arc<str>, Option<bool>>>,
    /// Whether `copying` holds any namespace: one load for a store whose
    /// caches attached no sink.
    any_copying: AtomicBool,
    /// The server of the connection in use, when known (a Sentinel's
    /// master): a new connection to another one is a failover.
    server: Mutex<Option<String>>,
    /// `BCAST` mode: the namespaces' prefixes and where they are
    /// registered.
    prefixes: bcast::Prefixes,
    /// Where prefixes of namespaces attached later are registered from.
    runtime: tokio::runtime::Handle,
    /// The bound of such a registration.
    timeout: Duration,
    /// Wakes a cluster store's listeners' task ([`nodes`]): a namespace
    /// attached, a listener ended, the store dropped.
    masters: Arc<tokio::sync::Notify>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // A cluster store's listeners' task ends at once.
        self.masters.notify_one();
    }
}

impl Tracker {
    /// Tracking as `mode` asks, for the store named `store` (in logs),
    /// handing changes to `sinks` and forgetting changed keys' `expiries`;
    /// prefixes added later are registered on `runtime`, each bounded by
    /// `timeout`.
    pub(in crate::redis) fn new(
        (mode, timeout): (Tracking, Duration),
        store: &str,
        (sinks, expiries): (Arc<Sinks>, Arc<Expiries>),
        runtime: tokio::runtime::Handle,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                mode,
                store: store.into(),
                sinks,
                expiries,
                on: AtomicBool::new(false),
                resp2: AtomicBool::new(false),
                off: Mutex::new(None),
                copying: ShardedLock::new(HashMap::new()),
                any_copying: AtomicBool::new(false),
                server: Mutex::new(None),
                prefixes: bcast::Prefixes::default(),
                runtime,
                timeout,
                masters: Arc::default(),
            }),
        }
    }

    /// Whether the connection in use has client tracking on.
    pub(in crate::redis) fn is_on(&self) -> bool {
        self.shared.on.load(Ordering::Acquire)
    }

    /// A cache on `namespace` attached its sink: whether its reads must be
    /// tracked is asked at the namespace's next read (default mode); its
    /// prefixes are registered (`BCAST`).
    pub(in crate::redis) fn attach(&self, namespace: &str) {
        match self.shared.mode {
            Tracking::Keys => {
                write(&self.shared.copying).insert(namespace.into(), None);
                self.shared.any_copying.store(true, Ordering::Release);
            }
            Tracking::Broadcast => {
                self.attach_broadcast(namespace);
                self.wake_masters();
            }
            Tracking::Off => {}
        }
    }

    /// Whether reads of `namespace` must go through the tracked command
    /// connection (not a lane): the server tracks keys by the connection
    /// that read them, and a cache of the namespace keeps what it reads.
    #[inline]
    pub(in crate::redis) fn tracked_reads(&self, namespace: &str) -> bool {
        if !self.shared.any_copying.load(Ordering::Acquire) || !self.is_on() {
            return false;
        }
        match read(&self.shared.copying).get(namespace) {
            Some(Some(copies)) => return *copies,
            Some(None) => {}
            None => return false,
        }
        self.ask_copying(namespace)
    }

    /// Asks the sinks of `namespace` whether one keeps copies, and
    /// remembers it.
    #[cold]
    fn ask_copying(&self, namespace: &str) -> bool {
        let sinks = self.shared.sinks.live(&super::keys::channel(namespace));
        let copies = sinks.iter().any(|sink| sink.keeps_copies());
        write(&self.shared.copying).insert(namespace.into(), Some(copies));
        copies
    }

    /// A new command connection is in use, made by [`connect`](Self::connect)
    /// (which said whether the one before was tracked: `was_on`), to
    /// `server` if known; `failover`: the old one was left because its
    /// server became a replica. Unless it is the store's `first`, and if
    /// the old or the new one is tracked, what was read before is no longer
    /// tracked: every sink is flushed.
    pub(in crate::redis) fn connected(
        &self,
        was_on: bool,
        first: bool,
        server: Option<String>,
        failover: bool,
    ) {
        self.answered();
        let moved = {
            let mut known = lock_std(&self.shared.server);
            let moved = matches!((&*known, &server), (Some(old), Some(new)) if old != new);
            if server.is_some() {
                *known = server;
            }
            moved
        };
        if !first && (was_on || self.is_on()) {
            let reason = if failover || moved {
                FlushReason::Failover
            } else {
                FlushReason::Reconnected
            };
            self.flush(reason);
        }
    }

    /// The tracked connection gave no answer to a health check: what the
    /// server reports on it may be held up or lost. The first time in a
    /// silence, every sink drops what it holds on the store's word
    /// ([`FlushReason::Silence`]), whether or not a new connection can be
    /// made.
    pub(in crate::redis) fn silent(&self) {
        if self.is_on() && self.shared.sinks.silenced() {
            tracing::debug!(
                store = %self.shared.store,
                reason = FlushReason::Silence.name(),
                "redis client tracking: caches drop what they hold on the store's word"
            );
        }
    }

    /// The tracked connection answered a health check: the next silence
    /// flushes again.
    pub(in crate::redis) fn answered(&self) {
        self.shared.sinks.answered();
    }

    /// Tells every sink to drop what it keeps, for `reason`.
    pub(in crate::redis) fn flush(&self, reason: FlushReason) {
        tracing::debug!(
            store = %self.shared.store,
            reason = reason.name(),
            "redis client tracking: caches drop their L1"
        );
        for sink in self.shared.sinks.all_live() {
            sink.flushed(reason);
        }
    }
}

impl std::fmt::Debug for Tracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracker")
            .field("mode", &self.shared.mode)
            .field("on", &self.is_on())
            .finish_non_exhaustive()
    }
}

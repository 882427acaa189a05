//! What a store's subscriber and its background task share: the listeners'
//! notifier, the channels asked for, the backplane sinks and where each
//! channel stands (see the module docs of `subscriber`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{mpsc, watch, Notify};

use super::super::keys;
use super::ShardedClient;
use crate::redis::conn::sentinel::Source;
use crate::store::{Change, Notifier, Sinks};
use crate::sync::lock_std;

/// The first reconnect delay; it doubles up to the configured maximum.
pub(super) const MIN_BACKOFF: Duration = Duration::from_millis(50);

/// What the store and the task share.
pub(super) struct Shared {
    pub(super) notifier: Notifier,
    /// Every channel asked for so far; subscribed again after a reconnect.
    pub(super) channels: Mutex<BTreeSet<Arc<str>>>,
    /// Channels the server's ACL refused (`NOPERM`): not asked for again,
    /// their waiters rely on polling.
    pub(super) denied: Mutex<BTreeSet<Arc<str>>>,
    /// The backplane sinks of each channel (the store's, shared with its
    /// client tracking).
    pub(super) sinks: Arc<Sinks>,
    /// Where each channel with sinks stands (see the module docs), and
    /// which channels the current connection has subscribed.
    pub(super) book: Mutex<Book>,
    /// How many channels are [`Standing::Pending`]: reads wait only while
    /// it is not 0, so a settled store pays one atomic load per read.
    pub(super) pending: AtomicUsize,
    /// Whether the last connection attempt failed (reads do not wait then:
    /// there is nothing to wait for).
    pub(super) failing: AtomicBool,
    /// Woken when a subscription is confirmed or a connection attempt
    /// fails.
    pub(super) settled: Notify,
}

/// The subscriptions' standing.
#[derive(Debug, Default)]
pub(super) struct Book {
    /// Each channel with sinks.
    pub(super) standing: BTreeMap<Arc<str>, Standing>,
    /// The channels subscribed on the current connection (empty while it
    /// is down).
    pub(super) live: BTreeSet<Arc<str>>,
}

/// Where a channel with sinks stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Standing {
    /// Never confirmed, and every read so far waited for it.
    Pending,
    /// Never confirmed, and a read went ahead: what it kept may miss a
    /// message published before the subscription.
    ReadAhead,
    /// Confirmed at least once.
    Confirmed,
    /// Refused by the ACL: never confirmed, nothing to wait for.
    Denied,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("channels", &*self.channels())
            .finish_non_exhaustive()
    }
}

impl Shared {
    /// Nothing asked for yet; messages go to `sinks`.
    pub(super) fn new(sinks: Arc<Sinks>) -> Self {
        Self {
            notifier: Notifier::new(),
            channels: Mutex::new(BTreeSet::new()),
            denied: Mutex::new(BTreeSet::new()),
            sinks,
            book: Mutex::new(Book::default()),
            pending: AtomicUsize::new(0),
            failing: AtomicBool::new(false),
            settled: Notify::new(),
        }
    }

    /// Every channel asked for so far.
    pub(super) fn channels(&self) -> MutexGuard<'_, BTreeSet<Arc<str>>> {
        lock_std(&self.channels)
    }

    /// The channels the ACL refused.
    pub(super) fn denied(&self) -> MutexGuard<'_, BTreeSet<Arc<str>>> {
        lock_std(&self.denied)
    }

    pub(super) fn book(&self) -> MutexGuard<'_, Book> {
        lock_std(&self.book)
    }

    /// A subscription of `channels` was confirmed: notices published
    /// before it may have been missed, so every waiter re-checks; sinks
    /// distrust what the backplane kept current only if messages may have
    /// been lost for them (a re-subscription, or a read that went ahead of
    /// the first one).
    pub(super) fn subscribed(&self, channels: &[Arc<str>]) {
        self.notifier.notify_all();
        self.sinks.answered();
        for channel in channels {
            let lost = {
                let mut book = self.book();
                book.live.insert(Arc::clone(channel));
                match book.standing.get_mut(channel) {
                    None | Some(Standing::Denied) => false,
                    Some(state @ Standing::Pending) => {
                        *state = Standing::Confirmed;
                        self.pending.fetch_sub(1, Ordering::Release);
                        false
                    }
                    Some(state @ (Standing::ReadAhead | Standing::Confirmed)) => {
                        *state = Standing::Confirmed;
                        true
                    }
                }
            };
            if lost {
                for sink in self.sinks.live(channel) {
                    sink.lost();
                }
            }
        }
        self.settled.notify_waiters();
    }

    /// A read of `channel`'s namespace did not wait for its first
    /// subscription: its confirmation will tell the sinks.
    pub(super) fn read_ahead(&self, channel: &str) {
        let mut book = self.book();
        if let Some(state @ Standing::Pending) = book.standing.get_mut(channel) {
            *state = Standing::ReadAhead;
            self.pending.fetch_sub(1, Ordering::Release);
        }
    }

    /// Whether `channel` still waits for its first confirmation.
    pub(super) fn is_pending(&self, channel: &str) -> bool {
        self.book().standing.get(channel) == Some(&Standing::Pending)
    }

    /// Records whether the last connection attempt failed; reads stop
    /// waiting for a subscription that cannot come now.
    pub(super) fn set_failing(&self, failing: bool) {
        self.failing.store(failing, Ordering::Release);
        if failing {
            self.settled.notify_waiters();
        }
    }

    /// The connection in use lost its subscriptions: messages may be lost
    /// until they are confirmed again. If it held any, the sinks drop what
    /// they hold on the store's word, once per silence
    /// ([`Sinks::silenced`]).
    pub(super) fn interrupted(&self) {
        let was_live = {
            let mut book = self.book();
            let was_live = !book.live.is_empty();
            book.live.clear();
            was_live
        };
        if was_live {
            self.sinks.silenced();
        }
    }

    /// The ACL refused `channel`: it is logged, remembered (never asked for
    /// again; its waiters poll), and reads stop waiting for it.
    pub(super) fn deny(&self, channel: &Arc<str>, refusal: &str) {
        tracing::warn!(
            channel = &**channel,
            "corral: redis refused SUBSCRIBE by ACL ({refusal}); waiters on this channel poll \
             instead of being notified"
        );
        self.denied().insert(Arc::clone(channel));
        let mut book = self.book();
        if let Some(state) = book.standing.get_mut(channel) {
            if *state == Standing::Pending {
                self.pending.fetch_sub(1, Ordering::Release);
            }
            *state = Standing::Denied;
        }
        drop(book);
        self.settled.notify_waiters();
    }

    /// Wakes the waiters of the key a message of `namespace` names and
    /// hands backplane messages to the sinks of `channel` (the namespace's
    /// channel). Messages of another shape are ignored.
    pub(super) fn deliver(&self, channel: &str, namespace: &str, payload: &[u8]) {
        let Ok(text) = std::str::from_utf8(payload) else {
            return;
        };
        let Some((kind, rest)) = text.split_once('|') else {
            return;
        };
        let Some((_origin, key)) = rest.split_once('|') else {
            return;
        };
        if matches!(kind, "c" | "r" | "s" | "i") {
            self.notifier.notify(&keys::listener_id(namespace, key));
        }
        if let Some(change) = Change::decode(text) {
            for sink in self.sinks.live(channel) {
                sink.changed(&change);
            }
        }
    }
}

/// Where the subscriber listens.
#[derive(Debug, Clone)]
pub(in crate::redis) enum Feed {
    /// One server (a Sentinel source names the current master at each
    /// connect): one connection, plain `SUBSCRIBE`; made anew when the
    /// receiver (the command connection's `Standalone::moves`) ticks, as a
    /// demoted master relays its new master's messages only while its
    /// replication link is up.
    Server(Source, watch::Receiver<u64>),
    /// A cluster: the subscriber's own cluster connection, which
    /// subscribes the sharded channels at the nodes owning their slots.
    Cluster(ShardedClient),
}

/// Settings of the subscriber task.
#[derive(Debug, Clone)]
pub(in crate::redis) struct Settings {
    pub(in crate::redis) connect_timeout: Duration,
    pub(in crate::redis) op_timeout: Duration,
    pub(in crate::redis) max_backoff: Duration,
    /// How often the connection is pinged.
    pub(in crate::redis) health_interval: Duration,
    /// The store's name in logs (its URL or seeds, without passwords).
    pub(in crate::redis) store: Arc<str>,
}

/// Consumes requests (their channels are already in the shared set) until
/// the store is dropped.
pub(super) async fn drain_until_closed(requests: &mut mpsc::UnboundedReceiver<Arc<str>>) {
    while requests.recv().await.is_some() {}
}

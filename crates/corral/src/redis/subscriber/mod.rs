//! The one subscriber connection of a store: it subscribes to the channel of
//! every namespace this process listens on and turns each message into a
//! wake-up of the local listeners of that key.
//!
//! [`Subscriber::listen`] is synchronous: it registers the listener with the
//! store's [`Notifier`] at once and, the first time a namespace is seen
//! (there or in [`Subscriber::subscribe`], called when a cache attaches to
//! the store), hands its channel to the background task, which sends
//! `SUBSCRIBE`. Once a
//! subscription is confirmed — a new channel, or all of them after a
//! (re)connect — the task wakes every listener ([`Notifier::notify_all`]),
//! because a notice published before the subscription landed was not seen.
//!
//! The task connects only once a channel is wanted: a store that nothing
//! listens on opens no subscriber connection. It ends when the last clone
//! of the store is dropped (the request channel closes). When Redis goes
//! away it reconnects with jittered, doubling backoff (a Sentinel group
//! is asked for its master again), and re-subscribes every channel; it
//! does the same when the command connection left a server demoted to a
//! replica (which relays the new master's messages only while its
//! replication link is up). A `PING`
//! every `health_interval`, bounded by the operation timeout, finds a
//! connection that died silently: it is dropped like a failed one, and the
//! re-subscription tells the sinks that messages may have been lost. A
//! connection that held subscriptions and ends (silent or failed) tells
//! them at once too, once per silence: they drop what they hold on the
//! store's word ([`Sinks::silenced`]), however long no new connection can
//! be made.
//!
//! [`Sinks::silenced`]: crate::store::Sinks::silenced
//!
//! **Backplane sinks and lost messages.** A channel with sinks (caches
//! keeping L1 copies or tag versions current through it) is *pending*
//! until its first subscription is confirmed. Reads of its namespace wait
//! for that, bounded by the store's operation timeout
//! ([`Subscriber::ready`]), so a healthy start keeps what it reads. Sinks
//! are told that messages may have been lost ([`ChangeSink::lost`]) only
//! when that can be so: at a re-subscription after the connection was
//! interrupted, or at the first confirmation of a channel that a read
//! went ahead of (it did not wait, or waited in vain).
//!
//! The books (`shared`) are the same for both kinds of task: one server's
//! (`plain`: one connection, `SUBSCRIBE` of each namespace's channel) and a
//! cluster's (`sharded`: `SSUBSCRIBE` of each namespace's sharded
//! channels, at the nodes owning their slots).

mod plain;
mod sharded;
mod shared;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::mpsc;

pub(in crate::redis) use self::sharded::ShardedClient;
pub(in crate::redis) use self::shared::{Feed, Settings};
use self::shared::{Shared, Standing};
use super::keys;
use crate::store::{ChangeSink, Listener, Sinks};

/// What the store keeps: the listeners' notifier and the way to ask the
/// task for a subscription. Dropping it stops the task.
#[derive(Debug)]
pub(super) struct Subscriber {
    shared: Arc<Shared>,
    requests: mpsc::UnboundedSender<Arc<str>>,
}

impl Subscriber {
    /// Spawns the task listening on `feed` on `runtime`, handing backplane
    /// messages to `sinks`.
    pub(super) fn spawn(
        runtime: &tokio::runtime::Handle,
        feed: Feed,
        settings: Settings,
        sinks: Arc<Sinks>,
    ) -> Self {
        let shared = Arc::new(Shared::new(sinks));
        let (requests, receiver) = mpsc::unbounded_channel();
        match feed {
            Feed::Server(source, moves) => {
                let task = plain::Task::new(Arc::clone(&shared), receiver, source, moves, settings);
                drop(runtime.spawn(task.run()));
            }
            Feed::Cluster(client) => {
                let task = sharded::run(Arc::clone(&shared), receiver, client, settings);
                drop(runtime.spawn(task));
            }
        }
        Self { shared, requests }
    }

    /// A listener for notices published with message `id` on `channel`;
    /// if `channel` is not subscribed yet, it is when the listener first
    /// waits (a fill that needs no wait subscribes nothing).
    pub(super) fn listen(&self, channel: &str, id: Arc<str>) -> Listener {
        let listener = self.shared.notifier.listen(id);
        if self.shared.channels().contains(channel) {
            return listener;
        }
        let (shared, requests) = (Arc::clone(&self.shared), self.requests.clone());
        let channel: Arc<str> = channel.into();
        listener.on_first_wait(move || request(&shared, &requests, channel))
    }

    /// Delivers the backplane messages of `channel` to `sink` while it
    /// lives, subscribing to `channel` if needed.
    pub(super) fn attach_sink(&self, channel: &str, sink: Weak<dyn ChangeSink>) {
        self.shared.sinks.attach(channel, sink);
        {
            let mut book = self.shared.book();
            if !book.standing.contains_key(channel) {
                // Subscribed already (by a waiter): messages flow now.
                let standing = if book.live.contains(channel) {
                    Standing::Confirmed
                } else {
                    self.shared.pending.fetch_add(1, Ordering::Release);
                    Standing::Pending
                };
                book.standing.insert(channel.into(), standing);
            }
        }
        self.subscribe(channel);
    }

    /// Waits, at most `bound`, until the channel of `namespace` has had its
    /// first subscription confirmed, if it has sinks and none has been yet
    /// (not while connecting fails). Returns the channel if a read made now
    /// goes ahead of that subscription: should the read keep anything,
    /// pass it to [`went_ahead`](Self::went_ahead). A settled store answers
    /// `None` at once.
    #[inline]
    pub(super) async fn ready(&self, namespace: &str, bound: Duration) -> Option<Arc<str>> {
        if self.shared.pending.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.wait_confirmed(namespace, bound).await
    }

    #[cold]
    async fn wait_confirmed(&self, namespace: &str, bound: Duration) -> Option<Arc<str>> {
        let channel: Arc<str> = keys::channel(namespace).into();
        let waiting =
            || self.shared.is_pending(&channel) && !self.shared.failing.load(Ordering::Acquire);
        crate::sync::until_settled(&self.shared.settled, bound, waiting).await;
        self.shared.is_pending(&channel).then_some(channel)
    }

    /// A read of `channel`'s namespace went ahead of its first
    /// subscription and kept what it read.
    pub(super) fn went_ahead(&self, channel: &str) {
        self.shared.read_ahead(channel);
    }

    /// Subscribes to `channel` (in the background) unless it already is.
    pub(super) fn subscribe(&self, channel: &str) {
        if !self.shared.channels().contains(channel) {
            request(&self.shared, &self.requests, channel.into());
        }
    }
}

/// Asks the task to subscribe `channel` unless it was asked already.
fn request(shared: &Shared, requests: &mpsc::UnboundedSender<Arc<str>>, channel: Arc<str>) {
    let mut channels = shared.channels();
    if channels.insert(Arc::clone(&channel)) {
        drop(channels);
        // Fails only when the task has ended (its runtime shut down);
        // listeners then rely on polling.
        let _ = requests.send(channel);
    }
}

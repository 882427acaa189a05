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
//! away it reconnects with jittered, doubling backoff, trying the
//! configured nodes in turn, and re-subscribes every channel. A `PING`
//! every `health_interval`, bounded by the operation timeout, finds a
//! connection that died silently: it is dropped like a failed one, and the
//! re-subscription tells the sinks that messages may have been lost.
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

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use ::redis::aio::PubSubSink;
use ::redis::{Msg, Value};
use futures_util::StreamExt as _;
use tokio::sync::{mpsc, Notify};
use tokio::time::MissedTickBehavior;

use super::backoff::Backoff;
use super::keys;
use super::sentinel::Source;
use super::sharded::{self, ShardedClient};
use crate::store::{Change, ChangeSink, Listener, Notifier, Sinks};

/// The first reconnect delay; it doubles up to the configured maximum.
pub(super) const MIN_BACKOFF: Duration = Duration::from_millis(50);

/// What the store keeps: the listeners' notifier and the way to ask the
/// task for a subscription. Dropping it stops the task.
#[derive(Debug)]
pub(super) struct Subscriber {
    shared: Arc<Shared>,
    requests: mpsc::UnboundedSender<Arc<str>>,
}

/// What the store and the task share.
pub(super) struct Shared {
    notifier: Notifier,
    /// Every channel asked for so far; subscribed again after a reconnect.
    channels: Mutex<BTreeSet<Arc<str>>>,
    /// Channels the server's ACL refused (`NOPERM`): not asked for again,
    /// their waiters rely on polling.
    denied: Mutex<BTreeSet<Arc<str>>>,
    /// The backplane sinks of each channel.
    sinks: Sinks,
    /// Where each channel with sinks stands (see the module docs), and
    /// which channels the current connection has subscribed.
    book: Mutex<Book>,
    /// How many channels are [`Standing::Pending`]: reads wait only while
    /// it is not 0, so a settled store pays one atomic load per read.
    pending: AtomicUsize,
    /// Whether the last connection attempt failed (reads do not wait then:
    /// there is nothing to wait for).
    failing: AtomicBool,
    /// Woken when a subscription is confirmed or a connection attempt
    /// fails.
    settled: Notify,
}

/// The subscriptions' standing.
#[derive(Debug, Default)]
struct Book {
    /// Each channel with sinks.
    standing: BTreeMap<Arc<str>, Standing>,
    /// The channels subscribed on the current connection (empty while it
    /// is down).
    live: BTreeSet<Arc<str>>,
}

/// Where a channel with sinks stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
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
    /// Every channel asked for so far.
    pub(super) fn channels(&self) -> MutexGuard<'_, BTreeSet<Arc<str>>> {
        self.channels.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The channels the ACL refused.
    pub(super) fn denied(&self) -> MutexGuard<'_, BTreeSet<Arc<str>>> {
        self.denied.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn book(&self) -> MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A subscription of `channels` was confirmed: notices published
    /// before it may have been missed, so every waiter re-checks; sinks
    /// distrust what the backplane kept current only if messages may have
    /// been lost for them (a re-subscription, or a read that went ahead of
    /// the first one).
    pub(super) fn subscribed(&self, channels: &[Arc<str>]) {
        self.notifier.notify_all();
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
    fn read_ahead(&self, channel: &str) {
        let mut book = self.book();
        if let Some(state @ Standing::Pending) = book.standing.get_mut(channel) {
            *state = Standing::ReadAhead;
            self.pending.fetch_sub(1, Ordering::Release);
        }
    }

    /// Whether `channel` still waits for its first confirmation.
    fn is_pending(&self, channel: &str) -> bool {
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

    /// The connection in use lost its subscriptions.
    pub(super) fn interrupted(&self) {
        self.book().live.clear();
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

/// Settings of the subscriber task.
#[derive(Debug, Clone)]
pub(super) struct Settings {
    /// Nodes to connect to, tried in turn (one server: plain `SUBSCRIBE`);
    /// a Sentinel source names the current master at each connect.
    pub(super) clients: Vec<Source>,
    /// On a cluster: the subscriber's own cluster connection, which
    /// subscribes the sharded channels on the nodes owning their slots
    /// (then `clients` is not used).
    pub(super) sharded: Option<ShardedClient>,
    pub(super) connect_timeout: Duration,
    pub(super) op_timeout: Duration,
    pub(super) max_backoff: Duration,
    /// How often the connection is pinged.
    pub(super) health_interval: Duration,
}

impl Subscriber {
    /// Spawns the task on `runtime`.
    pub(super) fn spawn(runtime: &tokio::runtime::Handle, settings: Settings) -> Self {
        let shared = Arc::new(Shared {
            notifier: Notifier::new(),
            channels: Mutex::new(BTreeSet::new()),
            denied: Mutex::new(BTreeSet::new()),
            sinks: Sinks::default(),
            book: Mutex::new(Book::default()),
            pending: AtomicUsize::new(0),
            failing: AtomicBool::new(false),
            settled: Notify::new(),
        });
        let (requests, receiver) = mpsc::unbounded_channel();
        if let Some(client) = settings.sharded.clone() {
            let task = sharded::run(Arc::clone(&shared), receiver, client, settings);
            drop(runtime.spawn(task));
        } else {
            let task = Task {
                shared: Arc::clone(&shared),
                requests: receiver,
                settings,
            };
            drop(runtime.spawn(task.run()));
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
        let confirmed = async {
            loop {
                let settled = self.shared.settled.notified();
                tokio::pin!(settled);
                // Registered before the state is read: a confirmation after
                // the read wakes it.
                settled.as_mut().enable();
                if !self.shared.is_pending(&channel) || self.shared.failing.load(Ordering::Acquire)
                {
                    return;
                }
                settled.await;
            }
        };
        let _ = tokio::time::timeout(bound, confirmed).await;
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

/// Why a session with one connection ended.
enum Ended {
    /// The store was dropped.
    StoreDropped,
    /// The connection failed; `established` tells whether it had been
    /// subscribed (then the backoff starts again from the minimum).
    Lost { established: bool },
}

struct Task {
    shared: Arc<Shared>,
    requests: mpsc::UnboundedReceiver<Arc<str>>,
    settings: Settings,
}

impl Task {
    async fn run(mut self) {
        // No connection until something is to be subscribed (the request's
        // channel is in the shared set, which the session subscribes).
        if self.shared.channels().is_empty() && self.requests.recv().await.is_none() {
            return;
        }
        let mut backoff = Backoff::new(MIN_BACKOFF, MIN_BACKOFF, self.settings.max_backoff);
        let mut node = 0usize;
        loop {
            let Some(client) = self
                .settings
                .clients
                .get(node % self.settings.clients.len().max(1))
            else {
                return;
            };
            let client = client.clone();
            node = node.wrapping_add(1);
            let ended = self.session(&client).await;
            self.shared.interrupted();
            match ended {
                Ended::StoreDropped => return,
                Ended::Lost { established } => {
                    if established {
                        backoff.reset();
                    }
                    tracing::debug!("corral: redis subscriber connection lost; reconnecting");
                }
            }
            let pause = backoff.next_pause();
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = drain_until_closed(&mut self.requests) => return,
            }
        }
    }

    /// Connects, subscribes every channel asked for so far, wakes every
    /// listener, then dispatches messages and new subscriptions until the
    /// connection fails or the store is dropped.
    async fn session(&mut self, client: &Source) -> Ended {
        let connect = client.pubsub(self.settings.connect_timeout);
        let pubsub = tokio::select! {
            connected = connect => match connected {
                Ok(pubsub) => Some(pubsub),
                Err(_) => {
                    self.shared.set_failing(true);
                    None
                }
            },
            () = drain_until_closed(&mut self.requests) => return Ended::StoreDropped,
        };
        let Some(pubsub) = pubsub else {
            return Ended::Lost { established: false };
        };
        self.shared.set_failing(false);
        let (mut sink, mut stream) = pubsub.split();

        let wanted: Vec<Arc<str>> = {
            let denied = self.shared.denied();
            let channels = self.shared.channels();
            channels.difference(&denied).cloned().collect()
        };
        let subscribed = if wanted.is_empty() {
            Vec::new()
        } else {
            match self.subscribe(&mut sink, &wanted).await {
                Some(subscribed) => subscribed,
                None => return Ended::Lost { established: false },
            }
        };
        // Each channel is subscribed once per connection: a request queued
        // before the connection was made is already in `wanted`.
        let mut current: BTreeSet<Arc<str>> = subscribed.iter().cloned().collect();
        self.shared.subscribed(&subscribed);

        let mut ping = tokio::time::interval(self.settings.health_interval);
        ping.set_missed_tick_behavior(MissedTickBehavior::Delay);
        ping.tick().await;
        loop {
            tokio::select! {
                request = self.requests.recv() => match request {
                    None => return Ended::StoreDropped,
                    Some(channel) if current.contains(&channel) => {}
                    Some(channel) => {
                        match self.subscribe(&mut sink, &[channel]).await {
                            Some(subscribed) => {
                                current.extend(subscribed.iter().cloned());
                                self.shared.subscribed(&subscribed);
                            }
                            None => return Ended::Lost { established: true },
                        }
                    }
                },
                message = stream.next() => match message {
                    None => return Ended::Lost { established: true },
                    Some(message) => self.dispatch(&message),
                },
                _ = ping.tick() => {
                    let pong = tokio::time::timeout(self.settings.op_timeout, sink.ping::<Value>()).await;
                    if !matches!(pong, Ok(Ok(_))) {
                        return Ended::Lost { established: true };
                    }
                }
            }
        }
    }

    /// Subscribes `channels` and returns those Redis confirmed in time, or
    /// `None` when the connection is not usable (an error or no answer).
    ///
    /// A channel the ACL refuses (`NOPERM`) is not an outage: it is logged,
    /// remembered as denied (never asked for again; its waiters poll) and
    /// left out, and the others are subscribed one by one (Redis refuses a
    /// whole `SUBSCRIBE` if one of its channels is denied).
    async fn subscribe(
        &self,
        sink: &mut PubSubSink,
        channels: &[Arc<str>],
    ) -> Option<Vec<Arc<str>>> {
        match self.subscribe_all(sink, channels).await? {
            Ok(()) => return Some(channels.to_vec()),
            Err(refusal) if channels.len() == 1 => {
                self.shared.deny(&channels[0], &refusal);
                return Some(Vec::new());
            }
            Err(_) => {}
        }
        let mut subscribed = Vec::with_capacity(channels.len());
        for channel in channels {
            match self
                .subscribe_all(sink, std::slice::from_ref(channel))
                .await?
            {
                Ok(()) => subscribed.push(Arc::clone(channel)),
                Err(refusal) => self.shared.deny(channel, &refusal),
            }
        }
        Some(subscribed)
    }

    /// One `SUBSCRIBE` of `channels`: `None` if the connection failed or
    /// did not answer in time, `Some(Err(message))` if the ACL refused it.
    async fn subscribe_all(
        &self,
        sink: &mut PubSubSink,
        channels: &[Arc<str>],
    ) -> Option<Result<(), String>> {
        let names: Vec<&str> = channels.iter().map(|c| &**c).collect();
        match tokio::time::timeout(self.settings.op_timeout, sink.subscribe(names)).await {
            Ok(Ok(())) => Some(Ok(())),
            Ok(Err(e)) if super::conn::refusal(&e).is_some() => Some(Err(e.to_string())),
            Ok(Err(_)) | Err(_) => None,
        }
    }

    /// Wakes the waiters of the key a message names and hands backplane
    /// messages to the channel's sinks. Messages of another shape are
    /// ignored.
    fn dispatch(&self, message: &Msg) {
        let channel = message.get_channel_name();
        if let Some(namespace) = keys::namespace_of(channel) {
            self.shared
                .deliver(channel, namespace, message.get_payload_bytes());
        }
    }
}

/// Consumes requests (their channels are already in the shared set) until
/// the store is dropped.
pub(super) async fn drain_until_closed(requests: &mut mpsc::UnboundedReceiver<Arc<str>>) {
    while requests.recv().await.is_some() {}
}

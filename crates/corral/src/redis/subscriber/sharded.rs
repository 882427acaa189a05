//! The subscriber of a cluster store: sharded pub/sub.
//!
//! A cluster store announces each change with `SPUBLISH` on a sharded
//! channel in the changed key's own slot (one channel per bucket of keys,
//! and one per namespace for tags and clears: [`keys::shard_channels`]), so
//! a message is handled by the nodes of that key's shard only, where a
//! plain `PUBLISH` is broadcast to every node of the cluster.
//!
//! This task keeps one cluster connection of its own (RESP3, pushes sent
//! to the task) and `SSUBSCRIBE`s every sharded channel of each namespace
//! asked for; redis-rs sends each to the node owning the channel's slot and
//! subscribes them again after a reconnect or a new slot map; when a
//! node's connection is lost, this task also subscribes every channel
//! again itself, so that the channels of a dead master follow the replica
//! promoted in its place. The books
//! stay under the namespace's channel name, as for one server: a namespace
//! is subscribed once every one of its sharded channels is confirmed. When
//! a node's connection is lost (every channel is then subscribed again) or
//! the server drops a subscription with `SUNSUBSCRIBE` (its slot moved; it
//! is subscribed again, at the new owner), the namespace is subscribed
//! again once all of its channels are confirmed anew, and that counts as
//! possible message loss for its sinks.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use ::redis::cluster::ClusterClient;
use ::redis::cluster_async::ClusterConnection;
use ::redis::cluster_routing::{MultipleNodeRoutingInfo, ResponsePolicy, RoutingInfo};
use ::redis::{PushInfo, PushKind, RedisError, Value};
use futures_util::future::BoxFuture;
use futures_util::stream::{FuturesUnordered, StreamExt as _};
use tokio::sync::mpsc;
use tokio::time::MissedTickBehavior;

use super::super::errors::refusal;
use super::super::keys;
use super::shared::{drain_until_closed, Settings, Shared, MIN_BACKOFF};
use crate::backoff::Backoff;
use crate::data::error::StoreError;

/// Builds a cluster client (RESP3) that sends its pushes to the given
/// sender.
type Build =
    dyn Fn(mpsc::UnboundedSender<PushInfo>) -> Result<ClusterClient, StoreError> + Send + Sync;

/// How the sharded subscriber makes its cluster client.
#[derive(Clone)]
pub(in crate::redis) struct ShardedClient(Arc<Build>);

impl ShardedClient {
    /// A maker of clients built by `build`.
    pub(in crate::redis) fn new(
        build: impl Fn(mpsc::UnboundedSender<PushInfo>) -> Result<ClusterClient, StoreError>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        Self(Arc::new(build))
    }
}

impl fmt::Debug for ShardedClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ShardedClient")
    }
}

/// One `SSUBSCRIBE` in flight: the sharded channel, its namespace's
/// channel, and how it ended.
type Subscribing = BoxFuture<'static, (String, Arc<str>, Result<(), RedisError>)>;

/// Failed ticks in a row (a retried `SSUBSCRIBE` failed again) after which
/// the connection is made anew from the seeds, reading the current slot
/// map: after a master dies, redis-rs can keep routing its slots toward the
/// dead node.
const REBUILD_AFTER: u32 = 3;

/// What the task knows of the sharded channels.
#[derive(Default)]
struct Book {
    /// Sharded channels confirmed since the last interruption.
    live: HashSet<String>,
    /// For each namespace channel asked for, how many of its sharded
    /// channels are live: when all are, the namespace is (again)
    /// subscribed.
    counts: HashMap<Arc<str>, usize>,
    /// Sharded channels to subscribe again at the next tick (a failed
    /// `SSUBSCRIBE`).
    retry: Vec<(String, Arc<str>)>,
    /// Ticks in a row at which a retried `SSUBSCRIBE` had failed again.
    failed_ticks: u32,
}

/// Runs the sharded subscriber until the store is dropped.
pub(super) async fn run(
    shared: Arc<Shared>,
    mut requests: mpsc::UnboundedReceiver<Arc<str>>,
    client: ShardedClient,
    settings: Settings,
) {
    // No connection until something is to be subscribed.
    if shared.channels().is_empty() && requests.recv().await.is_none() {
        return;
    }
    let (pushes_to, mut pushes) = mpsc::unbounded_channel();
    let cluster = match (client.0)(pushes_to) {
        Ok(cluster) => cluster,
        Err(error) => {
            tracing::warn!(
                store = %settings.store,
                %error,
                "corral: redis cluster subscriber not started; waiters poll"
            );
            shared.set_failing(true);
            drain_until_closed(&mut requests).await;
            return;
        }
    };
    let Some(connection) = connect(&shared, &mut requests, &cluster, &settings).await else {
        return;
    };
    let mut task = Task {
        shared,
        cluster,
        connection,
        settings,
        book: Book::default(),
        subscribing: FuturesUnordered::new(),
    };
    // Denied channels are left out there.
    let wanted: Vec<Arc<str>> = task.shared.channels().iter().cloned().collect();
    for channel in wanted {
        task.subscribe_namespace(&channel);
    }
    task.serve(&mut requests, &mut pushes).await;
}

/// Connects with backoff until the cluster answers; `None` when the store
/// was dropped meanwhile.
async fn connect(
    shared: &Shared,
    requests: &mut mpsc::UnboundedReceiver<Arc<str>>,
    cluster: &ClusterClient,
    settings: &Settings,
) -> Option<ClusterConnection> {
    let mut backoff = Backoff::new(MIN_BACKOFF, MIN_BACKOFF, settings.max_backoff);
    loop {
        let connect =
            tokio::time::timeout(settings.connect_timeout, cluster.get_async_connection());
        tokio::select! {
            connected = connect => {
                if let Ok(Ok(connection)) = connected {
                    shared.set_failing(false);
                    return Some(connection);
                }
                shared.set_failing(true);
            }
            () = drain_until_closed(requests) => return None,
        }
        tokio::select! {
            () = tokio::time::sleep(backoff.next_pause()) => {}
            () = drain_until_closed(requests) => return None,
        }
    }
}

struct Task {
    shared: Arc<Shared>,
    cluster: ClusterClient,
    connection: ClusterConnection,
    settings: Settings,
    book: Book,
    subscribing: FuturesUnordered<Subscribing>,
}

impl Task {
    /// Handles requests, pushes and finished subscriptions until the store
    /// is dropped.
    async fn serve(
        &mut self,
        requests: &mut mpsc::UnboundedReceiver<Arc<str>>,
        pushes: &mut mpsc::UnboundedReceiver<PushInfo>,
    ) {
        let mut tick = tokio::time::interval(self.settings.health_interval);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                request = requests.recv() => match request {
                    None => return,
                    Some(channel) => self.subscribe_namespace(&channel),
                },
                push = pushes.recv() => match push {
                    None => return,
                    Some(push) => self.handle(push),
                },
                Some((channel, namespace, result)) = self.subscribing.next() => {
                    self.subscribed(channel, namespace, result);
                }
                _ = tick.tick() => self.check(requests).await,
            }
        }
    }

    /// The health check, every health interval: a `PING` to every master
    /// (where the subscriptions are; each must answer), and the failed
    /// `SSUBSCRIBE`s sent again. When the `PING` gets no
    /// answer within the operation timeout, or the `SSUBSCRIBE`s kept
    /// failing (see [`REBUILD_AFTER`]), the connection is made anew from
    /// the seeds and every channel subscribed again.
    async fn check(&mut self, requests: &mut mpsc::UnboundedReceiver<Arc<str>>) {
        let mut connection = self.connection.clone();
        let every_master = RoutingInfo::MultiNode((
            MultipleNodeRoutingInfo::AllMasters,
            Some(ResponsePolicy::AllSucceeded),
        ));
        let ping = connection.route_command(::redis::cmd("PING"), every_master);
        let answered = matches!(
            tokio::time::timeout(self.settings.op_timeout, ping).await,
            Ok(Ok(_))
        );
        if self.book.retry.is_empty() {
            self.book.failed_ticks = 0;
        } else {
            self.book.failed_ticks += 1;
        }
        if answered && self.book.failed_ticks < REBUILD_AFTER {
            for (channel, namespace) in std::mem::take(&mut self.book.retry) {
                self.subscribe(channel, namespace);
            }
            return;
        }
        self.book.failed_ticks = 0;
        let Some(connection) = connect(&self.shared, requests, &self.cluster, &self.settings).await
        else {
            return;
        };
        tracing::debug!("corral: redis cluster subscriber connected anew");
        self.connection = connection;
        self.book.retry.clear();
        self.resubscribe_all();
    }

    /// Subscribes every sharded channel of the namespace whose channel is
    /// `channel`, unless it was already.
    fn subscribe_namespace(&mut self, channel: &Arc<str>) {
        if self.book.counts.contains_key(channel) || self.shared.denied().contains(channel) {
            return;
        }
        let Some(namespace) = keys::namespace_of(channel) else {
            return;
        };
        self.book.counts.insert(Arc::clone(channel), 0);
        for sharded in keys::shard_channels(namespace) {
            self.subscribe(sharded, Arc::clone(channel));
        }
    }

    /// Starts one `SSUBSCRIBE`, bounded by the operation timeout.
    fn subscribe(&mut self, channel: String, namespace: Arc<str>) {
        let mut connection = self.connection.clone();
        let timeout = self.settings.op_timeout;
        self.subscribing.push(Box::pin(async move {
            let result = match tokio::time::timeout(timeout, connection.ssubscribe(&channel)).await
            {
                Ok(result) => result,
                Err(_) => Err(RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "SSUBSCRIBE: no answer in time",
                ))),
            };
            (channel, namespace, result)
        }));
    }

    /// An `SSUBSCRIBE` ended: refused by the ACL (the namespace is denied),
    /// failed (tried again at the next tick), or answered (its confirmation
    /// arrives as a push).
    fn subscribed(&mut self, channel: String, namespace: Arc<str>, result: Result<(), RedisError>) {
        match result {
            Ok(()) => {}
            Err(error) if refusal(&error).is_some() => {
                self.shared.deny(&namespace, &error.to_string());
            }
            Err(error) => {
                tracing::debug!(
                    channel,
                    "corral: redis SSUBSCRIBE failed ({error}); retrying"
                );
                self.book.retry.push((channel, namespace));
            }
        }
    }

    /// One push from the cluster connection.
    fn handle(&mut self, push: PushInfo) {
        if push.kind == PushKind::Disconnection {
            self.resubscribe_all();
            return;
        }
        let channel = match push.data.first() {
            Some(Value::BulkString(name)) => String::from_utf8_lossy(name).into_owned(),
            _ => return,
        };
        let Some(namespace) = keys::namespace_of(&channel) else {
            return;
        };
        let books: Arc<str> = keys::channel(namespace).into();
        match push.kind {
            PushKind::SMessage => {
                if let Some(Value::BulkString(payload)) = push.data.get(1) {
                    self.shared.deliver(&books, namespace, payload);
                }
            }
            PushKind::SSubscribe => self.confirmed(channel, books),
            PushKind::SUnsubscribe => {
                // The server dropped the subscription (its slot moved):
                // subscribe again, at the slot's new owner.
                tracing::debug!(channel, "corral: redis dropped a sharded subscription");
                if self.book.live.remove(&channel) {
                    if let Some(count) = self.book.counts.get_mut(&books) {
                        *count = count.saturating_sub(1);
                    }
                }
                if !self.shared.denied().contains(&books) {
                    self.subscribe(channel, books);
                }
            }
            _ => {}
        }
    }

    /// A node's connection was lost: subscribes every sharded channel
    /// again. Each is sent to the node that owns its slot now; one whose
    /// node is gone fails, which makes redis-rs read the slot map again,
    /// and is retried at the next tick, so the channels of a failed-over
    /// shard follow its promoted replica. Every confirmation counts as a
    /// re-subscription (messages may have been lost meanwhile).
    fn resubscribe_all(&mut self) {
        tracing::debug!("corral: redis cluster subscriber lost a node; subscribing again");
        self.book.live.clear();
        for count in self.book.counts.values_mut() {
            *count = 0;
        }
        self.shared.interrupted();
        let denied = self.shared.denied().clone();
        let namespaces: Vec<Arc<str>> = self
            .book
            .counts
            .keys()
            .filter(|channel| !denied.contains(*channel))
            .cloned()
            .collect();
        for channel in namespaces {
            if let Some(namespace) = keys::namespace_of(&channel) {
                for sharded in keys::shard_channels(namespace) {
                    self.subscribe(sharded, Arc::clone(&channel));
                }
            }
        }
    }

    /// A confirmation of sharded `channel` of the namespace whose channel is
    /// `books`: once every sharded channel of the namespace is live, the
    /// namespace is subscribed — for the first time, or again after an
    /// interruption, when messages may have been lost.
    fn confirmed(&mut self, channel: String, books: Arc<str>) {
        if !self.book.live.insert(channel) {
            return;
        }
        let count = self.book.counts.entry(Arc::clone(&books)).or_insert(0);
        *count += 1;
        if *count == keys::BUCKETS + 1 {
            self.shared.subscribed(&[books]);
        }
    }
}

//! Client tracking for a Redis Cluster store: one listening connection per
//! master, made by the store itself.
//!
//! The cluster's reads and writes go through redis-rs's cluster connection,
//! which offers no way to run a command on each node connection it makes,
//! so tracking cannot live on the reading connections. Instead a task of
//! the store keeps one RESP3 connection to each master — a *listener* —
//! with `CLIENT TRACKING on BCAST` and the prefixes of every attached
//! namespace ([`bcast`](super::bcast)); a listener writes nothing. Its
//! invalidation pushes go to the same handling as a standalone store's
//! ([`pushes`](super::pushes)). Hence:
//!
//! - **`BCAST` only.** The server tracks keys by the connection that read
//!   them; the reading connections are redis-rs's. A cluster store asked
//!   for the default mode ([`Tracking::Keys`]) runs its listeners by prefix
//!   and says so once.
//! - **Own writes come back.** `NOLOOP` hides a client's own writes from
//!   it, and the listener is not the writer: this process's commits and
//!   sets are reported to it like anyone's, and evict the copies they
//!   just kept (the next read of the key reads the store again). Telling
//!   them apart by name would risk swallowing an outside write of the same
//!   key.
//! - **Replies and invalidations race.** A read's reply comes on redis-rs's
//!   connection, the invalidation of its key on the listener, in either
//!   order; a read marks its key in flight before it is sent, and an
//!   invalidation acted on meanwhile keeps the read's value out of the L1
//!   (the flight table's detach).
//! - **Readiness.** A namespace's prefixes count as registered once every
//!   master of the slot map read has a listener with them: until then its
//!   reads wait, bounded ([`Tracker::ready`]).
//! - **Flushes.** Every health interval the task pings each listener and
//!   reads the slot map (`CLUSTER SLOTS`, from a listener or else a seed);
//!   a listener that broke is dropped and the caches flush at once
//!   ([`FlushReason::Reconnected`]); one that did not answer is dropped
//!   and they drop what they hold on the store's word, once per silence
//!   ([`FlushReason::Silence`]), as for a standalone store; once every master has a
//!   listener again, they flush for what was kept meanwhile: for the
//!   listener made anew, a master set that changed (a failover, a node
//!   added or removed: [`FlushReason::Failover`]) or slots that moved
//!   between masters ([`FlushReason::Topology`]). A listener that breaks
//!   wakes the task at once.
//! - **Fallback.** A server that answers `HELLO 3` or `CLIENT TRACKING`
//!   with an error stops the task: the store runs on the backplane, and one
//!   INFO line says why.
//!
//! [`Tracking::Keys`]: crate::data::tracking::Tracking::Keys
//! [`FlushReason::Reconnected`]: crate::store::FlushReason::Reconnected
//! [`FlushReason::Failover`]: crate::store::FlushReason::Failover
//! [`FlushReason::Topology`]: crate::store::FlushReason::Topology
//! [`FlushReason::Silence`]: crate::store::FlushReason::Silence

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use ::redis::aio::MultiplexedConnection;
use ::redis::{
    AsyncConnectionConfig, Client, ConnectionAddr, ProtocolVersion, PushInfo, PushKind, RedisError,
    RedisResult, Value,
};
use tokio::sync::Notify;

use super::enable::answered_with_error;
use super::{Shared, Tracker};
use crate::backoff::Backoff;
use crate::data::tracking::Tracking;
use crate::redis::conn::client::{speaking, within};
use crate::redis::conn::cluster::{self, Master};
use crate::store::FlushReason;

/// How a cluster store's listeners are reached and checked.
pub(in crate::redis) struct Seeds {
    /// A client per seed node (the store's URLs, user, TLS).
    pub(in crate::redis) clients: Vec<Client>,
    /// Each connect, bounded.
    pub(in crate::redis) connect_timeout: Duration,
    /// Between checks of the listeners and the slot map.
    pub(in crate::redis) health_interval: Duration,
    /// The backoff between attempts while a master has no listener.
    pub(in crate::redis) backoff: (Duration, Duration),
}

/// The mode a cluster store's tracking runs in, for the `mode` asked by
/// the store named `store`: the default mode cannot be had (the reading
/// connections are redis-rs's), so it runs by prefix, said once.
pub(in crate::redis) fn cluster_mode(mode: Tracking, store: &str) -> Tracking {
    if mode != Tracking::Keys {
        return mode;
    }
    tracing::info!(
        store = %store,
        "redis client tracking on a cluster: by prefix (BCAST), on one listening connection \
         per master; the default mode needs tracking on the reading connections, which the \
         cluster client does not offer"
    );
    Tracking::Broadcast
}

/// One master's listening connection.
struct Listener {
    node: (String, u16),
    conn: MultiplexedConnection,
    /// Set when redis-rs reports the connection ended.
    dead: Arc<AtomicBool>,
    /// How many of the attached namespaces (in the order attached) have
    /// their prefixes registered on it.
    done: usize,
}

/// The task's view: the listeners, the slot map last read, how many
/// namespaces are registered on every master, and the flush owed once
/// every master has a listener.
#[derive(Default)]
struct Nodes {
    listeners: Vec<Listener>,
    map: Option<Vec<Master>>,
    complete: usize,
    owed: Option<FlushReason>,
}

/// What a round of the task left.
enum Round {
    /// Every master has a listener with every prefix.
    Settled,
    /// Some master has none (or a call failed): try again soon.
    Short,
    /// The server refused tracking: the task ends.
    Off,
}

/// How a listener fared at a check.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Health {
    Answered,
    /// redis-rs reported its end.
    Ended,
    /// No answer in time.
    Silent,
}

/// Why a listener was not made.
enum Refusal {
    /// The server answered `HELLO 3` or `CLIENT TRACKING` with an error.
    Off,
    /// It could not be reached, or broke.
    Failed(RedisError),
}

impl Tracker {
    /// Starts the task that keeps a listener on each master of the cluster
    /// `seeds` lead to (unless tracking is off). It holds the store's
    /// tracking weakly and ends when the store is dropped.
    pub(in crate::redis) fn listen_on_masters(&self, seeds: Seeds) {
        if self.shared.mode == Tracking::Off {
            return;
        }
        let wake = Arc::clone(&self.shared.masters);
        let weak = Arc::downgrade(&self.shared);
        self.shared.runtime.spawn(listening(weak, wake, seeds));
    }

    /// Wakes the listeners' task (a namespace attached).
    pub(super) fn wake_masters(&self) {
        self.shared.masters.notify_one();
    }

    /// One round: drops broken listeners, reads the slot map, makes the
    /// missing listeners, registers new prefixes, and flushes what is owed
    /// once every master has a listener.
    async fn round(&self, nodes: &mut Nodes, seeds: &Seeds) -> Round {
        self.check_listeners(nodes).await;
        let Some(map) = self.read_map(nodes, seeds).await else {
            return Round::Short;
        };
        if let Some(old) = &nodes.map {
            if addresses(old) != addresses(&map) {
                owe(nodes, FlushReason::Failover);
            } else if *old != map {
                owe(nodes, FlushReason::Topology);
            }
        }
        let masters = addresses(&map);
        nodes.listeners.retain(|l| masters.contains(&l.node));
        let mut short = false;
        for node in masters {
            if nodes.listeners.iter().any(|l| l.node == node) {
                continue;
            }
            match self.listener(seeds, node).await {
                Ok(listener) => {
                    if nodes.map.is_some() {
                        owe(nodes, FlushReason::Reconnected);
                    }
                    nodes.listeners.push(listener);
                }
                Err(Refusal::Off) => return Round::Off,
                Err(Refusal::Failed(error)) => {
                    short = true;
                    tracing::debug!(store = %self.shared.store, %error, "redis cluster tracking: no listener");
                }
            }
        }
        nodes.map = Some(map);
        match self.register_all(nodes).await {
            Ok(true) => {}
            Ok(false) => return Round::Off,
            Err(()) => short = true,
        }
        if short {
            return Round::Short;
        }
        self.settle(nodes);
        Round::Settled
    }

    /// Every master has a listener with every prefix registered: the
    /// namespaces newly registered everywhere go on, and what is owed is
    /// flushed.
    fn settle(&self, nodes: &mut Nodes) {
        let everywhere = nodes.listeners.iter().map(|l| l.done).min().unwrap_or(0);
        if everywhere > nodes.complete {
            let fresh = self.namespaces_from(nodes.complete);
            let count = everywhere - nodes.complete;
            self.registered(fresh.get(..count).unwrap_or_default());
            nodes.complete = everywhere;
        }
        self.shared.on.store(true, Ordering::Release);
        if let Some(reason) = nodes.owed.take() {
            self.flush(reason);
        }
    }

    /// Drops the listeners redis-rs saw end (whose end flushed the caches
    /// at once) and those that do not answer a `PING` in time (the caches
    /// drop what they hold on the store's word now, as for a standalone
    /// store's silent connection: [`Tracker::silent`]); either way a flush
    /// is owed for the listener made anew.
    async fn check_listeners(&self, nodes: &mut Nodes) {
        let timeout = self.shared.timeout;
        let pings = nodes.listeners.iter().map(|listener| {
            let mut conn = listener.conn.clone();
            let dead = listener.dead.load(Ordering::Acquire);
            async move {
                if dead {
                    return Health::Ended;
                }
                let ping = ::redis::cmd("PING");
                match tokio::time::timeout(timeout, ping.query_async::<Value>(&mut conn)).await {
                    Ok(Ok(_)) => Health::Answered,
                    _ => Health::Silent,
                }
            }
        });
        let health = futures_util::future::join_all(pings).await;
        if health.iter().all(|h| *h == Health::Answered) {
            self.answered();
            return;
        }
        if health.contains(&Health::Silent) {
            self.silent();
        }
        owe(nodes, FlushReason::Reconnected);
        let mut health = health.into_iter();
        nodes
            .listeners
            .retain(|_| health.next() == Some(Health::Answered));
    }

    /// The cluster's masters (`CLUSTER SLOTS`), asked of a listener, else
    /// of each seed in turn: `None` if none answered with one.
    async fn read_map(&self, nodes: &Nodes, seeds: &Seeds) -> Option<Vec<Master>> {
        let timeout = self.shared.timeout;
        for listener in &nodes.listeners {
            if let Some(map) = slot_map(&mut listener.conn.clone(), timeout).await {
                return Some(map);
            }
        }
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(seeds.connect_timeout))
            .set_response_timeout(Some(timeout));
        for seed in &seeds.clients {
            let made = within(
                seeds.connect_timeout,
                seed.get_multiplexed_async_connection_with_config(&config),
            )
            .await;
            if let Ok(mut conn) = made {
                if let Some(map) = slot_map(&mut conn, timeout).await {
                    return Some(map);
                }
            }
        }
        None
    }

    /// A listener on the master at `node`, with the prefixes of every
    /// namespace attached so far registered.
    async fn listener(&self, seeds: &Seeds, node: (String, u16)) -> Result<Listener, Refusal> {
        let client = seeds.client_for(&node.0, node.1).map_err(Refusal::Failed)?;
        let dead = Arc::new(AtomicBool::new(false));
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(seeds.connect_timeout))
            .set_response_timeout(Some(self.shared.timeout))
            .set_push_sender(self.listener_pushes(Arc::clone(&dead)));
        let made = within(
            seeds.connect_timeout,
            client.get_multiplexed_async_connection_with_config(&config),
        )
        .await;
        let conn = match made {
            Ok(conn) => conn,
            // A node that closes the connection in the handshake is taken
            // for a dying one, not for one refusing RESP3.
            Err(error) if answered_with_error(&error) => {
                self.off(format!("a cluster node refused RESP3 (HELLO 3: {error})"));
                self.broadcast_off();
                return Err(Refusal::Off);
            }
            Err(error) => return Err(Refusal::Failed(error)),
        };
        let mut listener = Listener {
            node,
            conn,
            dead,
            done: 0,
        };
        match self.catch_up(&mut listener).await {
            Ok(true) => Ok(listener),
            Ok(false) => Err(Refusal::Off),
            Err(error) => Err(Refusal::Failed(error)),
        }
    }

    /// Registers on every listener the namespaces attached since its last
    /// registration: `Ok(false)` if the server refused tracking, `Err` if
    /// a listener failed (it is dropped at the next check).
    async fn register_all(&self, nodes: &mut Nodes) -> Result<bool, ()> {
        let mut failed = false;
        for listener in &mut nodes.listeners {
            match self.catch_up(listener).await {
                Ok(true) => {}
                Ok(false) => return Ok(false),
                Err(_) => {
                    listener.dead.store(true, Ordering::Release);
                    failed = true;
                }
            }
        }
        if failed {
            Err(())
        } else {
            Ok(true)
        }
    }

    /// Registers on `listener` the prefixes of the namespaces attached
    /// since its last registration (each sent once: Redis refuses a prefix
    /// registered twice on a connection): whether the server took them.
    async fn catch_up(&self, listener: &mut Listener) -> RedisResult<bool> {
        loop {
            let todo = self.namespaces_from(listener.done);
            if todo.is_empty() {
                return Ok(true);
            }
            if !self
                .register(&mut listener.conn, &todo, self.shared.timeout)
                .await?
            {
                self.broadcast_off();
                return Ok(false);
            }
            listener.done += todo.len();
        }
    }

    /// What receives a listener's pushes: the store's push handling, and
    /// the listener's end marked (`dead`) and its task woken.
    fn listener_pushes(
        &self,
        dead: Arc<AtomicBool>,
    ) -> impl Fn(PushInfo) -> Result<(), super::pushes::Dropped> + Send + Sync + 'static {
        let pushes = self.push_sender();
        let wake = Arc::downgrade(&self.shared.masters);
        move |push| {
            if push.kind == PushKind::Disconnection {
                dead.store(true, Ordering::Release);
                if let Some(wake) = wake.upgrade() {
                    wake.notify_one();
                }
            }
            pushes(push)
        }
    }
}

impl Seeds {
    /// A client for the node at `host:port`, as the seeds reach theirs
    /// (user, database, TLS), speaking RESP3.
    fn client_for(&self, host: &str, port: u16) -> RedisResult<Client> {
        let seed = self.clients.first().ok_or_else(|| {
            RedisError::from((::redis::ErrorKind::InvalidClientConfig, "no cluster seed"))
        })?;
        let info = seed.get_connection_info().clone();
        let addr = match info.addr() {
            ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => ConnectionAddr::TcpTls {
                host: host.to_owned(),
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => ConnectionAddr::Tcp(host.to_owned(), port),
        };
        speaking(&Client::open(info.set_addr(addr))?, ProtocolVersion::RESP3)
    }
}

/// Keeps a listener on each master while the store lives: a round at
/// once, then one per health interval, or sooner when a listener ends or
/// a namespace is attached; after a short round, with backoff.
async fn listening(weak: Weak<Shared>, wake: Arc<Notify>, seeds: Seeds) {
    let mut nodes = Nodes::default();
    let (min, max) = seeds.backoff;
    let mut backoff = Backoff::new(min, min, max);
    loop {
        let pause = {
            let Some(shared) = weak.upgrade() else {
                return;
            };
            let tracker = Tracker { shared };
            match tracker.round(&mut nodes, &seeds).await {
                Round::Settled => {
                    backoff.reset();
                    seeds.health_interval
                }
                Round::Short => backoff.next_pause(),
                Round::Off => {
                    tracker.shared.on.store(false, Ordering::Release);
                    return;
                }
            }
        };
        tokio::select! {
            () = wake.notified() => {}
            () = tokio::time::sleep(pause) => {}
        }
    }
}

/// Owes the caches a flush for `reason` once every master has a listener
/// (the strongest reason owed is counted).
fn owe(nodes: &mut Nodes, reason: FlushReason) {
    let rank = |reason: FlushReason| match reason {
        FlushReason::Failover => 3,
        FlushReason::Topology => 2,
        _ => 1,
    };
    if nodes.owed.is_none_or(|owed| rank(reason) > rank(owed)) {
        nodes.owed = Some(reason);
    }
}

/// The masters' addresses of a slot map, in its order.
fn addresses(map: &[Master]) -> Vec<(String, u16)> {
    map.iter()
        .map(|(_, host, port)| (host.clone(), *port))
        .collect()
}

/// The slot map `conn`'s node answers (`CLUSTER SLOTS`), masters sorted by
/// address and their ranges sorted, so two readings of one map compare
/// equal; `None` if it did not answer with one in time.
async fn slot_map(conn: &mut MultiplexedConnection, timeout: Duration) -> Option<Vec<Master>> {
    let mut slots = ::redis::cmd("CLUSTER");
    slots.arg("SLOTS");
    let reply = tokio::time::timeout(timeout, slots.query_async::<Value>(conn))
        .await
        .ok()?
        .ok()?;
    let mut map = cluster::masters(&reply);
    if map.is_empty() {
        return None;
    }
    for (ranges, _, _) in &mut map {
        ranges.sort_unstable();
    }
    map.sort_by(|a, b| (&a.1, a.2).cmp(&(&b.1, b.2)));
    Some(map)
}

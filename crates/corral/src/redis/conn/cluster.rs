//! A Redis Cluster command connection, rebuilt from the seed nodes when its
//! calls keep failing.
//!
//! redis-rs's cluster client refreshes its slot map on `MOVED` and on some
//! connection errors, but after a master is killed it can go on sending a
//! slot's commands toward the dead node until each call times out — for as
//! long as the process lives, though the cluster promoted a replica long
//! ago. So after [`REBUILD_AFTER`] consecutive failed calls (a timeout, an
//! unreachable node, or a call abandoned before its answer, as the store's
//! own timeout abandons it), one task builds a new connection from the
//! seeds — which reads the cluster's current slot map — and swaps it in.
//! Calls go on through the old connection meanwhile.
//!
//! A lazy connection ([`Cluster::lazy`]) starts without one: a task
//! connects from the seeds, with backoff, until the cluster answers; calls
//! wait for its first attempt, then fail at once as unavailable until it
//! succeeds.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::sync::{Arc, Weak};
use std::time::Duration;

use ::redis::cluster::ClusterClient;
use ::redis::cluster_async::ClusterConnection;
use ::redis::cluster_routing::SingleNodeRoutingInfo;
use ::redis::{Cmd, Pipeline, RedisError, RedisResult, Value};
use crossbeam_utils::sync::ShardedLock;
use tokio::runtime::Handle;

use tokio::sync::Notify;

use crate::throttle::{warn_throttled, Throttle};

use crate::backoff::Backoff;

use crate::sync::{read, write};

/// Consecutive failed calls after which the connection is rebuilt.
const REBUILD_AFTER: u32 = 3;

/// A cluster connection that is rebuilt when it stops answering. Clones
/// share it.
#[derive(Clone)]
pub(in crate::redis) struct Cluster {
    shared: Arc<Shared>,
}

struct Shared {
    client: ClusterClient,
    connect_timeout: Duration,
    runtime: Handle,
    /// `None` until a lazy connection's first success.
    connection: ShardedLock<Option<ClusterConnection>>,
    /// Whether a lazy connection's first attempt ended.
    attempted: AtomicBool,
    /// Woken when a lazy connection's attempt ends.
    settled: Notify,
    /// Calls failed in a row (any answer resets it).
    failures: AtomicU32,
    /// Whether a rebuild is running.
    rebuilding: AtomicBool,
    /// The store's name in logs (its seeds, without passwords).
    store: Arc<str>,
    /// Rations the warnings of calls that keep failing.
    failing: Throttle,
}

impl Cluster {
    /// Wraps `connection`, made by `client`; rebuilds run on `runtime`
    /// (outside one) and each is bounded by `connect_timeout`.
    pub(in crate::redis) fn new(
        client: ClusterClient,
        connection: ClusterConnection,
        connect_timeout: Duration,
        runtime: Handle,
        store: &str,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                client,
                connect_timeout,
                runtime,
                connection: ShardedLock::new(Some(connection)),
                attempted: AtomicBool::new(true),
                settled: Notify::new(),
                failures: AtomicU32::new(0),
                store: store.into(),
                failing: Throttle::default(),
                rebuilding: AtomicBool::new(false),
            }),
        }
    }

    /// A connection made by `client` in the background: returns at once,
    /// with the task that connects — and keeps trying, the backoff doubling
    /// from `min_delay` to `max_delay`, until the cluster answers — started
    /// on `runtime`.
    pub(in crate::redis) fn lazy(
        client: ClusterClient,
        connect_timeout: Duration,
        runtime: Handle,
        (min_delay, max_delay): (Duration, Duration),
        store: &str,
    ) -> Self {
        let shared = Arc::new(Shared {
            client,
            connect_timeout,
            runtime: runtime.clone(),
            connection: ShardedLock::new(None),
            attempted: AtomicBool::new(false),
            settled: Notify::new(),
            failures: AtomicU32::new(0),
            store: store.into(),
            failing: Throttle::default(),
            // No rebuild while the first connection is being made.
            rebuilding: AtomicBool::new(true),
        });
        runtime.spawn(connecting(Arc::downgrade(&shared), min_delay, max_delay));
        Self { shared }
    }

    /// Sends one command, routed by its key, and reads its reply.
    pub(in crate::redis) async fn query(&self, cmd: &Cmd) -> RedisResult<Value> {
        let mut connection = self.current().await?;
        let mut call = Call::new(self);
        let reply = cmd.query_async(&mut connection).await;
        call.ended(&reply);
        reply
    }

    /// Sends a pipeline (its keys in one slot) and reads its replies.
    pub(in crate::redis) async fn query_pipeline(&self, pipe: &Pipeline) -> RedisResult<Value> {
        let mut connection = self.current().await?;
        let mut call = Call::new(self);
        let reply = pipe.query_async::<Value>(&mut connection).await;
        call.ended(&reply);
        reply
    }

    /// Moves every copy of a version ([`MoveCopies`]) with one pipeline per
    /// master: the slot map (`CLUSTER SLOTS`, one round trip), then each
    /// master's `SET ... XX`s at once (one round trip). A copy its master
    /// did not take (the slot moved meanwhile) or whose master the map does
    /// not name is sent again alone, routed by its slot. Each of these is a
    /// call of its own, counted toward a rebuild as [`query`](Self::query)'s
    /// are.
    pub(in crate::redis) async fn move_copies(&self, moves: MoveCopies<'_>) -> RedisResult<()> {
        let set = |copy: &str| {
            let mut cmd = ::redis::cmd("SET");
            cmd.arg(copy)
                .arg(moves.version)
                .arg("PX")
                .arg(moves.retention_ms)
                .arg("XX");
            cmd
        };
        let masters = match self
            .query(&::redis::cmd("CLUSTER").arg("SLOTS").clone())
            .await
        {
            Ok(reply) => masters(&reply),
            Err(_) => Vec::new(),
        };
        let mut by_master: Vec<Vec<&str>> = vec![Vec::new(); masters.len()];
        let mut alone: Vec<&str> = Vec::new();
        for copy in moves.copies {
            let slot = crate::redis::keys::slot(copy);
            match masters
                .iter()
                .position(|(ranges, _, _)| ranges.iter().any(|&(a, b)| (a..=b).contains(&slot)))
            {
                Some(at) => by_master[at].push(copy),
                None => alone.push(copy),
            }
        }
        let connection = self.current().await?;
        let pipelines = masters
            .iter()
            .zip(&by_master)
            .filter(|(_, copies)| !copies.is_empty());
        let sends = pipelines.map(|((_, host, port), copies)| {
            let mut pipe = ::redis::pipe();
            for copy in copies {
                pipe.add_command(set(copy));
            }
            pipe.ignore_errors();
            let route = SingleNodeRoutingInfo::ByAddress {
                host: host.clone(),
                port: *port,
            };
            let connection = connection.clone();
            async move {
                let count = copies.len();
                let replies = self.route_pipeline(connection, pipe, count, route).await;
                match replies {
                    Ok(replies) if replies.len() == count => copies
                        .iter()
                        .zip(replies)
                        .filter(|(_, reply)| matches!(reply, Value::ServerError(_)))
                        .map(|(copy, _)| *copy)
                        .collect(),
                    _ => copies.clone(),
                }
            }
        });
        let refused: Vec<Vec<&str>> = futures_util::future::join_all(sends).await;
        alone.extend(refused.into_iter().flatten());
        let retries = alone.iter().map(|copy| {
            let cmd = set(copy);
            async move { self.query(&cmd).await }
        });
        for reply in futures_util::future::join_all(retries).await {
            reply?;
        }
        Ok(())
    }

    /// Sends `pipe` (`count` commands) to the node `route` names, on
    /// `connection`, and reads its replies: a call as any other, counted
    /// toward a rebuild when it fails.
    async fn route_pipeline(
        &self,
        mut connection: ClusterConnection,
        pipe: Pipeline,
        count: usize,
        route: SingleNodeRoutingInfo,
    ) -> RedisResult<Vec<Value>> {
        let mut call = Call::new(self);
        let replies = connection.route_pipeline(pipe, 0, count, route).await;
        call.ended(&replies);
        replies
    }

    /// The connection; while a lazy one is not made yet, waits for its
    /// first attempt, then fails at once.
    async fn current(&self) -> RedisResult<ClusterConnection> {
        if let Some(connection) = &*read(&self.shared.connection) {
            return Ok(connection.clone());
        }
        loop {
            let settled = self.shared.settled.notified();
            tokio::pin!(settled);
            // Registered before the state is read: an attempt that ends
            // after this read wakes it.
            settled.as_mut().enable();
            if let Some(connection) = &*read(&self.shared.connection) {
                return Ok(connection.clone());
            }
            if self.shared.attempted.load(Relaxed) {
                return Err(RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::NotConnected,
                    "redis cluster: not connected yet (connecting in the background)",
                )));
            }
            settled.await;
        }
    }

    /// Counts a failed call; the [`REBUILD_AFTER`]th in a row starts a
    /// rebuild unless one runs.
    fn failed(&self) {
        let failures = self.shared.failures.fetch_add(1, Relaxed) + 1;
        if failures >= REBUILD_AFTER && !self.shared.rebuilding.swap(true, Relaxed) {
            let store = &self.shared.store;
            warn_throttled!(
                self.shared.failing,
                { store = %store, failures },
                "redis cluster calls keep failing: rebuilding the connection"
                    + " from the seed nodes"
            );
            let runtime = Handle::try_current().unwrap_or_else(|_| self.shared.runtime.clone());
            runtime.spawn(rebuild(Arc::downgrade(&self.shared)));
        }
    }

    /// An answered call: the connection works.
    fn answered(&self) {
        // Read first: a working connection's calls write nothing shared.
        if self.shared.failures.load(Relaxed) != 0 {
            self.shared.failures.store(0, Relaxed);
        }
    }
}

/// The copies of one version to move ([`Cluster::move_copies`]): their
/// keys, the new version and how long to keep it (ms).
pub(in crate::redis) struct MoveCopies<'a> {
    pub(in crate::redis) copies: &'a [String],
    pub(in crate::redis) version: &'a str,
    pub(in crate::redis) retention_ms: &'a str,
}

/// A master in a `CLUSTER SLOTS` reply: the slot ranges it serves, its
/// host and port.
pub(in crate::redis) type Master = (Vec<(u16, u16)>, String, u16);

/// The masters of a `CLUSTER SLOTS` reply (a reply of another shape:
/// none).
pub(in crate::redis) fn masters(reply: &Value) -> Vec<Master> {
    let Value::Array(ranges) = reply else {
        return Vec::new();
    };
    let mut masters: Vec<Master> = Vec::new();
    for range in ranges {
        let Value::Array(fields) = range else {
            continue;
        };
        let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(node))) =
            (fields.first(), fields.get(1), fields.get(2))
        else {
            continue;
        };
        let host = match node.first() {
            Some(Value::BulkString(host)) => String::from_utf8_lossy(host).into_owned(),
            Some(Value::SimpleString(host)) => host.clone(),
            _ => continue,
        };
        let (Some(Value::Int(port)), Ok(start), Ok(end)) =
            (node.get(1), u16::try_from(*start), u16::try_from(*end))
        else {
            continue;
        };
        let Ok(port) = u16::try_from(*port) else {
            continue;
        };
        match masters
            .iter_mut()
            .find(|(_, h, p)| *h == host && *p == port)
        {
            Some((ranges, _, _)) => ranges.push((start, end)),
            None => masters.push((vec![(start, end)], host, port)),
        }
    }
    masters
}

/// One call in progress: counted as failed if it ends in a connection-level
/// error or is dropped before it ends (its timeout passed).
struct Call<'a> {
    cluster: &'a Cluster,
    ended: bool,
}

impl<'a> Call<'a> {
    fn new(cluster: &'a Cluster) -> Self {
        Self {
            cluster,
            ended: false,
        }
    }

    fn ended<T>(&mut self, reply: &RedisResult<T>) {
        self.ended = true;
        match reply {
            Err(e) if e.is_timeout() || e.is_io_error() || e.is_unrecoverable_error() => {
                self.cluster.failed();
            }
            _ => self.cluster.answered(),
        }
    }
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        if !self.ended {
            self.cluster.failed();
        }
    }
}

/// Builds a new connection from the seeds and swaps it in.
async fn rebuild(weak: Weak<Shared>) {
    let Some(shared) = weak.upgrade() else {
        return;
    };
    let built =
        tokio::time::timeout(shared.connect_timeout, shared.client.get_async_connection()).await;
    match built {
        Ok(Ok(connection)) => {
            *write(&shared.connection) = Some(connection);
            shared.failures.store(0, Relaxed);
            shared.failing.reset();
            tracing::info!(store = %shared.store, "redis cluster connection rebuilt");
        }
        Ok(Err(error)) => {
            tracing::debug!(store = %shared.store, %error, "redis cluster connection not rebuilt");
        }
        Err(_) => tracing::debug!(
            store = %shared.store,
            "redis cluster connection not rebuilt: no connection in time"
        ),
    }
    shared.rebuilding.store(false, Relaxed);
}

/// Makes a lazy connection's first connection, retrying with jittered,
/// doubling backoff until it succeeds or the store is dropped (the task
/// holds the store only during an attempt, not across its backoff).
async fn connecting(weak: Weak<Shared>, min_delay: Duration, max_delay: Duration) {
    let mut backoff = Backoff::new(Duration::ZERO, min_delay, max_delay);
    loop {
        tokio::time::sleep(backoff.next_pause()).await;
        let Some(shared) = weak.upgrade() else {
            return;
        };
        let built =
            tokio::time::timeout(shared.connect_timeout, shared.client.get_async_connection())
                .await;
        let connected = matches!(built, Ok(Ok(_)));
        if let Ok(Ok(connection)) = built {
            *write(&shared.connection) = Some(connection);
            shared.rebuilding.store(false, Relaxed);
            tracing::info!(store = %shared.store, "redis cluster connected");
        }
        shared.attempted.store(true, Relaxed);
        shared.settled.notify_waiters();
        if connected {
            return;
        }
    }
}

//! One server's command connection: a redis-rs `MultiplexedConnection`,
//! replaced by a background task when it breaks.
//!
//! A call clones the current connection under its own thread's slice of a
//! sharded lock, so concurrent calls write nothing shared but the
//! connection's own reference counts, as a bare `MultiplexedConnection`
//! does. (redis-rs's `ConnectionManager` holds an `arc_swap` guard across
//! each call, which with many calls in flight per thread falls back to a
//! slow shared path, and awaits a shared future per call: about a twentieth
//! of an L2 hit's cost.)
//!
//! States:
//! - **up**: calls use the connection; a call that fails as a broken
//!   connection (redis-rs's "unrecoverable" errors: I/O, dropped), or —
//!   when the [`Source`] follows failovers (Sentinel) — is answered
//!   `READONLY`, marks it down and starts one reconnecting task, which
//!   asks the source where to connect;
//! - **reconnecting**: calls wait for the task's first attempt (bounded by
//!   the caller's own timeout); once an attempt has failed, calls fail at
//!   once with its error, until an attempt succeeds. The task tries again
//!   after a backoff that doubles up to the configured maximum (with
//!   jitter), and ends with the store.
//!
//! A connection can also die silently (a partitioned host, a dropped NAT
//! entry: no FIN, no RST), and then its calls only time out, one by one.
//! So a heartbeat task `PING`s the connection every `health_interval`
//! while it is up; after a `PING` without an answer within
//! `health_timeout` it connects anew (bounded by the connect timeout) and
//! swaps the new connection in. Calls go on through the old connection
//! until then, and keep it if no new connection can be made: a server
//! that is only stalled (frozen, busy) answers on it again as soon as it
//! resumes. The heartbeat holds the store only while it checks, and ends
//! with the store.

use std::sync::{Arc, Weak};
use std::time::Duration;

use ::redis::aio::{ConnectionLike, MultiplexedConnection};
use ::redis::{
    AsyncConnectionConfig, Cmd, ErrorKind, Pipeline, RedisError, RedisResult, ServerErrorKind,
    Value,
};
use crossbeam_utils::sync::ShardedLock;
use tokio::runtime::Handle;
use tokio::sync::Notify;

use super::backoff::Backoff;
use super::sentinel::Source;
use crate::sync::{read, write};

/// How to connect and reconnect.
#[derive(Debug, Clone)]
pub(super) struct Reconnect {
    /// Bound on one connection attempt.
    pub(super) connect_timeout: Duration,
    /// Attempts made by [`Standalone::connect`] before it gives up.
    pub(super) initial_attempts: usize,
    /// The first backoff between attempts; it doubles up to `max_delay`.
    pub(super) min_delay: Duration,
    /// The longest backoff between attempts.
    pub(super) max_delay: Duration,
    /// How often the heartbeat pings the connection.
    pub(super) health_interval: Duration,
    /// How long the heartbeat's `PING` may wait for its answer.
    pub(super) health_timeout: Duration,
}

/// A connection to one server that reconnects by itself. Clones share it.
#[derive(Clone)]
pub(super) struct Standalone {
    shared: Arc<Shared>,
}

struct Shared {
    /// What each (re)connection connects to.
    source: Source,
    config: AsyncConnectionConfig,
    reconnect: Reconnect,
    runtime: Handle,
    state: ShardedLock<State>,
    /// Woken whenever a reconnection attempt ends, either way.
    settled: Notify,
}

enum State {
    /// Connected; `epoch` counts the connections made.
    Up {
        conn: MultiplexedConnection,
        epoch: u64,
    },
    /// The connection broke and a task is connecting anew. `failed` is the
    /// error of its last failed attempt, if any.
    Reconnecting { failed: Option<RedisError> },
}

impl Standalone {
    /// Connects to `source`'s server, trying up to
    /// `reconnect.initial_attempts` times while the server cannot be
    /// reached (any other error — refused authentication, say — is
    /// returned at once). Reconnections run on the runtime of the call that
    /// found the connection broken, or on `runtime`.
    pub(super) async fn connect(
        source: Source,
        reconnect: Reconnect,
        runtime: Handle,
    ) -> RedisResult<Self> {
        // Every call is bounded by the store's own timeout around it; a
        // second timer per call inside redis-rs would cost each read another
        // lock of tokio's timer wheel.
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(reconnect.connect_timeout))
            .set_response_timeout(None);
        let mut delay = reconnect.min_delay;
        let mut attempt = 1;
        let conn = loop {
            match source.connect(&config, reconnect.connect_timeout).await {
                Ok(conn) => break conn,
                Err(e) if attempt < reconnect.initial_attempts && e.is_unrecoverable_error() => {
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(reconnect.max_delay);
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        };
        let shared = Arc::new(Shared {
            source,
            config,
            reconnect,
            runtime: runtime.clone(),
            state: ShardedLock::new(State::Up { conn, epoch: 0 }),
            settled: Notify::new(),
        });
        runtime.spawn(heartbeat(Arc::downgrade(&shared)));
        Ok(Self { shared })
    }

    /// A connection to `source`'s server made in the background: returns at
    /// once, in the reconnecting state, with the task that connects (and
    /// keeps trying, with backoff, until the server answers) already
    /// started on `runtime`. Meanwhile calls wait for its first attempt,
    /// then fail at once with the last attempt's error.
    pub(super) fn lazy(source: Source, reconnect: Reconnect, runtime: Handle) -> Self {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(reconnect.connect_timeout))
            .set_response_timeout(None);
        let shared = Arc::new(Shared {
            source,
            config,
            reconnect,
            runtime: runtime.clone(),
            state: ShardedLock::new(State::Reconnecting { failed: None }),
            settled: Notify::new(),
        });
        runtime.spawn(reconnecting(Arc::downgrade(&shared), 0));
        runtime.spawn(heartbeat(Arc::downgrade(&shared)));
        Self { shared }
    }

    /// Sends one command and reads its reply; a server error reply is an
    /// `Err`.
    pub(super) async fn query(&self, cmd: &Cmd) -> RedisResult<Value> {
        let (mut conn, epoch) = self.current().await?;
        // Boxed (`ConnectionLike`): inline, redis-rs's future would make
        // every future around it several times larger, and each of their
        // moves a copy of it.
        let reply = conn
            .req_packed_command(cmd)
            .await
            .and_then(Value::extract_error);
        self.check(&reply, epoch);
        reply
    }

    /// Sends a pipeline and reads its replies (as one array).
    pub(super) async fn query_pipeline(&self, pipe: &Pipeline) -> RedisResult<Value> {
        let (mut conn, epoch) = self.current().await?;
        let reply = pipe.query_async::<Value>(&mut conn).await;
        self.check(&reply, epoch);
        reply
    }

    /// The current connection and its epoch; waits while a reconnection's
    /// first attempt runs.
    async fn current(&self) -> RedisResult<(MultiplexedConnection, u64)> {
        if let State::Up { conn, epoch } = &*read(&self.shared.state) {
            return Ok((conn.clone(), *epoch));
        }
        loop {
            let settled = self.shared.settled.notified();
            tokio::pin!(settled);
            // Registered before the state is read: an attempt that ends
            // after this read wakes it.
            settled.as_mut().enable();
            match &*read(&self.shared.state) {
                State::Up { conn, epoch } => return Ok((conn.clone(), *epoch)),
                State::Reconnecting {
                    failed: Some(error),
                } => return Err(error.clone()),
                State::Reconnecting { failed: None } => {}
            }
            settled.await;
        }
    }

    /// Starts a reconnection if `reply` shows the connection of `epoch`
    /// broken, or (for a source that follows failovers) its server
    /// demoted to a replica.
    fn check<T>(&self, reply: &RedisResult<T>, epoch: u64) {
        let demoted = |e: &RedisError| {
            e.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly)
                && self.shared.source.follows_failover()
        };
        if matches!(reply, Err(e) if e.is_unrecoverable_error() || demoted(e)) {
            self.reconnect(epoch);
        }
    }

    /// Marks the connection of `epoch` down and starts the task that
    /// replaces it, unless that already happened.
    fn reconnect(&self, epoch: u64) {
        {
            let mut state = write(&self.shared.state);
            if !matches!(&*state, State::Up { epoch: current, .. } if *current == epoch) {
                return;
            }
            *state = State::Reconnecting { failed: None };
        }
        tracing::warn!("redis connection lost: reconnecting");
        let shared = Arc::downgrade(&self.shared);
        // On the caller's runtime, where the new connection's driver task
        // will run too; the store's own runtime when called outside one.
        let runtime = Handle::try_current().unwrap_or_else(|_| self.shared.runtime.clone());
        runtime.spawn(reconnecting(shared, epoch));
    }
}

/// Connects anew until it succeeds or the store is dropped (the task
/// holds the store only during an attempt, not across its backoff).
async fn reconnecting(weak: Weak<Shared>, epoch: u64) {
    let mut backoff = match weak.upgrade() {
        Some(shared) => Backoff::new(
            Duration::ZERO,
            shared.reconnect.min_delay,
            shared.reconnect.max_delay,
        ),
        None => return,
    };
    loop {
        tokio::time::sleep(backoff.next_pause()).await;
        let Some(shared) = weak.upgrade() else {
            return;
        };
        let attempt = shared
            .source
            .connect(&shared.config, shared.reconnect.connect_timeout)
            .await;
        let restored = attempt.is_ok();
        *write(&shared.state) = match attempt {
            Ok(conn) => State::Up {
                conn,
                epoch: epoch + 1,
            },
            Err(error) => State::Reconnecting {
                failed: Some(error),
            },
        };
        shared.settled.notify_waiters();
        if restored {
            tracing::info!("redis connection restored");
            return;
        }
    }
}

/// `PING`s the connection every `health_interval` while it is up; when a
/// `PING` gets no answer (an error reply is an answer) within
/// `health_timeout`, replaces the connection ([`replace`]). Ends with the
/// store (the task holds it only while it checks or replaces, not across
/// its pauses or the `PING`).
async fn heartbeat(weak: Weak<Shared>) {
    let Some(interval) = weak.upgrade().map(|s| s.reconnect.health_interval) else {
        return;
    };
    let ping = ::redis::cmd("PING");
    loop {
        tokio::time::sleep(interval).await;
        let (mut conn, epoch, timeout) = {
            let Some(shared) = weak.upgrade() else {
                return;
            };
            let State::Up { conn, epoch } = &*read(&shared.state) else {
                continue;
            };
            (conn.clone(), *epoch, shared.reconnect.health_timeout)
        };
        let answer = tokio::time::timeout(timeout, conn.req_packed_command(&ping)).await;
        if matches!(answer, Ok(Ok(_))) {
            continue;
        }
        drop(conn);
        let Some(shared) = weak.upgrade() else {
            return;
        };
        tracing::warn!(
            "redis connection gave no answer to PING within {timeout:?}: connecting anew"
        );
        replace(&shared, epoch).await;
    }
}

/// Makes a new connection and swaps it in for the connection of `epoch`,
/// if that is still the current one. If none can be made within the
/// connect timeout, the current one stays (calls go on through it).
async fn replace(shared: &Shared, epoch: u64) {
    let timeout = shared.reconnect.connect_timeout;
    let attempt =
        tokio::time::timeout(timeout, shared.source.connect(&shared.config, timeout)).await;
    match attempt {
        Ok(Ok(conn)) => {
            let mut state = write(&shared.state);
            if matches!(&*state, State::Up { epoch: current, .. } if *current == epoch) {
                *state = State::Up {
                    conn,
                    epoch: epoch + 1,
                };
                tracing::info!("redis connection replaced");
            }
        }
        Ok(Err(error)) => {
            tracing::warn!(%error, "redis connection not replaced: calls go on through it");
        }
        Err(_) => tracing::warn!(
            "redis connection not replaced (no connection within {timeout:?}): calls go on \
             through it"
        ),
    }
}

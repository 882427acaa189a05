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
//!   connection (redis-rs's "unrecoverable" errors: I/O, dropped), or is
//!   answered `READONLY` (the server was demoted to a replica), marks it
//!   down and starts one reconnecting task, which asks the source where to
//!   connect. For a fixed address, a demotion does so only on a connection
//!   at least `max_delay` old: the address may now reach the promoted
//!   server (a managed service's failover moves its DNS name), but a
//!   server that stays a replica costs at most one connection per
//!   `max_delay`, not one per write. Once a connection made because of a
//!   demotion is up, [`Standalone::moves`] ticks: the subscriber, which a
//!   demoted master feeds only through its replication link (late, and
//!   not at all while the link is down), connects anew too;
//! - **reconnecting**: calls wait for the task's first attempt (bounded by
//!   the caller's own timeout); once an attempt has failed, calls fail at
//!   once with its error, until an attempt succeeds. The task tries again
//!   after a backoff that doubles up to the configured maximum (with
//!   jitter), and ends with the store.
//!
//! A connection can also die silently (a partitioned host, a dropped NAT
//! entry: no FIN, no RST), and then its calls only time out, one by one.
//! So a heartbeat task asks the server its `ROLE` every `health_interval`
//! while the connection is up (a `PING` instead, once the server refused
//! `ROLE`): an answer that names a replica is a demotion, found even by a
//! store that writes nothing; after a check without an answer within
//! `health_timeout` it tells the tracker (the caches drop what they hold
//! on the store's word, once per silence: its reports may be lost), then
//! connects anew (bounded by the connect timeout) and swaps the new
//! connection in. Calls go on through the old connection
//! until then, and keep it if no new connection can be made: a server
//! that is only stalled (frozen, busy) answers on it again as soon as it
//! resumes. The heartbeat holds the store only while it checks, and ends
//! with the store.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use ::redis::aio::{ConnectionLike, MultiplexedConnection};
use ::redis::{
    AsyncConnectionConfig, Cmd, ErrorKind, Pipeline, RedisError, RedisResult, ServerErrorKind,
    Value,
};
use crossbeam_utils::sync::ShardedLock;
use tokio::runtime::Handle;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use super::sentinel::{is_master, Source};
use crate::backoff::{doubled, Backoff};
use crate::redis::clock::ServerClock;
use crate::redis::tracking::{Made, Tracker};
use crate::sync::{read, write};
use crate::throttle::{warn_throttled, Throttle};

/// How to connect and reconnect.
#[derive(Debug, Clone)]
pub(in crate::redis) struct Reconnect {
    /// Bound on one connection attempt.
    pub(in crate::redis) connect_timeout: Duration,
    /// Attempts made by [`Standalone::connect`] before it gives up.
    pub(in crate::redis) initial_attempts: u32,
    /// The first backoff between attempts; it doubles up to `max_delay`.
    pub(in crate::redis) min_delay: Duration,
    /// The longest backoff between attempts.
    pub(in crate::redis) max_delay: Duration,
    /// How often the heartbeat pings the connection.
    pub(in crate::redis) health_interval: Duration,
    /// How long the heartbeat's `PING` may wait for its answer.
    pub(in crate::redis) health_timeout: Duration,
    /// The store's name in logs: its server's URL without password.
    pub(in crate::redis) store: Arc<str>,
}

/// A connection to one server that reconnects by itself. Clones share it.
#[derive(Clone)]
pub(in crate::redis) struct Standalone {
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
    /// Ticks when a connection made because the server was demoted is up.
    moves: watch::Sender<u64>,
    /// Set once the server refused `ROLE`: the heartbeat sends `PING`.
    role_refused: AtomicBool,
    /// Set once the server refused `TIME`: the heartbeat reads no clock.
    time_refused: AtomicBool,
    /// Rations the heartbeat's warnings while the server stays silent.
    unanswered: Throttle,
    /// Client tracking, turned on for each connection made.
    tracker: Tracker,
}

enum State {
    /// Connected; `epoch` counts the connections made, `since` is when
    /// this one was.
    Up {
        conn: MultiplexedConnection,
        epoch: u64,
        since: Instant,
        /// Its server's clock, read as it was made and at each answered
        /// health check.
        clock: Option<ServerClock>,
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
    pub(in crate::redis) async fn connect(
        source: Source,
        reconnect: Reconnect,
        runtime: Handle,
        tracker: Tracker,
    ) -> RedisResult<Self> {
        // Every call is bounded by the store's own timeout around it; a
        // second timer per call inside redis-rs would cost each read another
        // lock of tokio's timer wheel.
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(reconnect.connect_timeout))
            .set_response_timeout(None);
        let mut attempt = 1;
        let time_refused = AtomicBool::new(false);
        let (made, clock) = loop {
            let timeout = reconnect.connect_timeout;
            match connect_once(&tracker, &source, &config, timeout, &time_refused).await {
                Ok(made) => break made,
                Err(e) if attempt < reconnect.initial_attempts && e.is_unrecoverable_error() => {
                    let pause = doubled(reconnect.min_delay, attempt - 1, reconnect.max_delay);
                    tokio::time::sleep(pause).await;
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
            state: ShardedLock::new(State::Up {
                conn: made.conn,
                epoch: 0,
                since: Instant::now(),
                clock,
            }),
            settled: Notify::new(),
            moves: watch::Sender::new(0),
            role_refused: AtomicBool::new(false),
            time_refused,
            unanswered: Throttle::default(),
            tracker,
        });
        shared
            .tracker
            .connected(made.was_on, true, made.server, false);
        tracing::info!(store = %shared.reconnect.store, "redis connected");
        runtime.spawn(heartbeat(Arc::downgrade(&shared)));
        Ok(Self { shared })
    }

    /// A connection to `source`'s server made in the background: returns at
    /// once, in the reconnecting state, with the task that connects (and
    /// keeps trying, with backoff, until the server answers) already
    /// started on `runtime`. Meanwhile calls wait for its first attempt,
    /// then fail at once with the last attempt's error.
    pub(in crate::redis) fn lazy(
        source: Source,
        reconnect: Reconnect,
        runtime: Handle,
        tracker: Tracker,
    ) -> Self {
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
            moves: watch::Sender::new(0),
            role_refused: AtomicBool::new(false),
            time_refused: AtomicBool::new(false),
            unanswered: Throttle::default(),
            tracker,
        });
        runtime.spawn(reconnecting(Arc::downgrade(&shared), 0, Reason::First));
        runtime.spawn(heartbeat(Arc::downgrade(&shared)));
        Self { shared }
    }

    /// Sends one command and reads its reply; a server error reply is an
    /// `Err`.
    pub(in crate::redis) async fn query(&self, cmd: &Cmd) -> RedisResult<Value> {
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
    pub(in crate::redis) async fn query_pipeline(&self, pipe: &Pipeline) -> RedisResult<Value> {
        let (mut conn, epoch) = self.current().await?;
        let reply = pipe.query_async::<Value>(&mut conn).await;
        self.check(&reply, epoch);
        reply
    }

    /// The current connection and its epoch; waits while a reconnection's
    /// first attempt runs.
    async fn current(&self) -> RedisResult<(MultiplexedConnection, u64)> {
        if let State::Up { conn, epoch, .. } = &*read(&self.shared.state) {
            return Ok((conn.clone(), *epoch));
        }
        loop {
            let settled = self.shared.settled.notified();
            tokio::pin!(settled);
            // Registered before the state is read: an attempt that ends
            // after this read wakes it.
            settled.as_mut().enable();
            match &*read(&self.shared.state) {
                State::Up { conn, epoch, .. } => return Ok((conn.clone(), *epoch)),
                State::Reconnecting {
                    failed: Some(error),
                } => return Err(error.clone()),
                State::Reconnecting { failed: None } => {}
            }
            settled.await;
        }
    }

    /// The current connection's epoch (it counts the connections made);
    /// `None` while a reconnection runs.
    pub(in crate::redis) fn epoch(&self) -> Option<u64> {
        match &*read(&self.shared.state) {
            State::Up { epoch, .. } => Some(*epoch),
            State::Reconnecting { .. } => None,
        }
    }

    /// The current connection's reading of its server's clock, if it has
    /// one.
    pub(in crate::redis) fn server_clock(&self) -> Option<ServerClock> {
        match &*read(&self.shared.state) {
            State::Up { clock, .. } => *clock,
            State::Reconnecting { .. } => None,
        }
    }

    /// The server's address and credentials, when it is a fixed one (not
    /// a Sentinel group's master).
    pub(in crate::redis) fn fixed_info(&self) -> Option<&::redis::ConnectionInfo> {
        match &self.shared.source {
            Source::Fixed(client) => Some(client.get_connection_info()),
            Source::Sentinel(_) => None,
        }
    }

    /// Ticks each time a connection made because the server was found
    /// demoted to a replica is up: whatever else was connected to the old
    /// server should connect anew.
    pub(in crate::redis) fn moves(&self) -> watch::Receiver<u64> {
        self.shared.moves.subscribe()
    }

    /// Starts a reconnection if `reply` shows the connection of `epoch`
    /// broken, or its server demoted to a replica (`READONLY`).
    fn check<T>(&self, reply: &RedisResult<T>, epoch: u64) {
        let Err(error) = reply else {
            return;
        };
        if error.is_unrecoverable_error() {
            reconnect(&self.shared, epoch, Why::Lost(error));
        } else if error.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly) {
            leave_replica(&self.shared, epoch, "READONLY");
        }
    }
}

/// The connection of `epoch` reached a replica (`found` tells how): it is
/// made anew at once when the source follows failovers (it names and
/// checks the master), else once it is `max_delay` old.
fn leave_replica(shared: &Arc<Shared>, epoch: u64, found: &str) {
    let due = shared.source.follows_failover()
        || matches!(
            &*read(&shared.state),
            State::Up { epoch: current, since, .. }
                if *current == epoch && since.elapsed() >= shared.reconnect.max_delay
        );
    if due && reconnect(shared, epoch, Why::Demoted) {
        tracing::warn!(
            store = %shared.reconnect.store,
            "redis server is a replica now ({found}): reconnecting"
        );
    }
}

/// Why a connection is made anew.
enum Why<'a> {
    /// The connection broke, with this error.
    Lost(&'a RedisError),
    /// Its server became a replica.
    Demoted,
}

/// Why [`reconnecting`] connects.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reason {
    /// A lazy store's first connection.
    First,
    /// The connection before broke.
    Lost,
    /// The server of the connection before became a replica.
    Demoted,
}

/// Marks the connection of `epoch` down and starts the task that replaces
/// it (`why`: lost or demoted); returns whether it did, rather than
/// another call before it.
fn reconnect(shared: &Arc<Shared>, epoch: u64, why: Why<'_>) -> bool {
    {
        let mut state = write(&shared.state);
        if !matches!(&*state, State::Up { epoch: current, .. } if *current == epoch) {
            return false;
        }
        *state = State::Reconnecting { failed: None };
    }
    if let Why::Lost(error) = &why {
        tracing::warn!(
            store = %shared.reconnect.store,
            %error,
            "redis connection lost: reconnecting"
        );
    }
    // On the caller's runtime, where the new connection's driver task
    // will run too; the store's own runtime when called outside one.
    let runtime = Handle::try_current().unwrap_or_else(|_| shared.runtime.clone());
    let reason = match why {
        Why::Lost(_) => Reason::Lost,
        Why::Demoted => Reason::Demoted,
    };
    runtime.spawn(reconnecting(Arc::downgrade(shared), epoch, reason));
    true
}

/// Connects anew until it succeeds or the store is dropped (the task
/// holds the store only during an attempt, not across its backoff): the
/// first connection of a lazy store, or the one after the connection of
/// `epoch`, for `reason`. When that one was left because its server was
/// demoted, [`Standalone::moves`] ticks once the new one is up. Logs the
/// first failed attempt (with its error) and the connection made:
/// "connected" the first time, "restored" after a loss or a demotion, with
/// how long it took.
async fn reconnecting(weak: Weak<Shared>, epoch: u64, reason: Reason) {
    let began = Instant::now();
    let mut failures = 0_u64;
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
        let attempt = connect_once(
            &shared.tracker,
            &shared.source,
            &shared.config,
            shared.reconnect.connect_timeout,
            &shared.time_refused,
        )
        .await;
        if let Err(error) = &attempt {
            failures += 1;
            if failures == 1 {
                tracing::warn!(
                    store = %shared.reconnect.store,
                    %error,
                    "redis connection attempt failed: retrying with backoff until it answers"
                );
            }
        }
        let made = install(&shared, epoch, attempt);
        shared.settled.notify_waiters();
        if let Some((was_on, server)) = made {
            let (first, demoted) = (reason == Reason::First, reason == Reason::Demoted);
            shared.tracker.connected(was_on, first, server, demoted);
            say_connected(&shared.reconnect.store, reason, failures, began);
            if demoted {
                shared.moves.send_modify(|moves| *moves += 1);
            }
            return;
        }
    }
}

/// One connection to `source`'s server, made by `tracker` (tracking on
/// where it can be), and its server's clock read on it before it serves a
/// call (unless `TIME` was refused before: `time_refused`, which a refusal
/// sets), each step bounded by `timeout`.
async fn connect_once(
    tracker: &Tracker,
    source: &Source,
    config: &AsyncConnectionConfig,
    timeout: Duration,
    time_refused: &AtomicBool,
) -> RedisResult<(Made, Option<ServerClock>)> {
    let mut made = tracker.connect(source, config, timeout).await?;
    let clock = ServerClock::read(&mut made.conn, timeout, time_refused).await;
    Ok((made, clock))
}

/// Keeps `clock`, a reading taken on the connection of `epoch`, if that is
/// still the current one.
fn keep_reading(shared: &Shared, epoch: u64, clock: ServerClock) {
    if let State::Up {
        epoch: current,
        clock: kept,
        ..
    } = &mut *write(&shared.state)
    {
        if *current == epoch {
            *kept = Some(clock);
        }
    }
}

/// Puts the connection `attempt` made in use (as epoch `epoch + 1`), or
/// its error for calls to fail with: whether the connection before was
/// tracked, and its server, if one was made.
fn install(
    shared: &Shared,
    epoch: u64,
    attempt: RedisResult<(Made, Option<ServerClock>)>,
) -> Option<(bool, Option<String>)> {
    let (state, made) = match attempt {
        Ok((made, clock)) => {
            let up = State::Up {
                conn: made.conn,
                epoch: epoch + 1,
                since: Instant::now(),
                clock,
            };
            (up, Some((made.was_on, made.server)))
        }
        Err(error) => {
            let failed = State::Reconnecting {
                failed: Some(error),
            };
            (failed, None)
        }
    };
    *write(&shared.state) = state;
    made
}

/// Logs a connection made for `reason` after `failures` failed attempts
/// since `began`.
fn say_connected(store: &str, reason: Reason, failures: u64, began: Instant) {
    if reason == Reason::First && failures == 0 {
        tracing::info!(store = %store, "redis connected");
    } else if reason == Reason::First {
        tracing::info!(
            store = %store,
            failed_attempts = failures,
            waited_ms = began.elapsed().as_millis(),
            "redis connected"
        );
    } else {
        tracing::info!(
            store = %store,
            failed_attempts = failures,
            down_ms = began.elapsed().as_millis(),
            "redis connection restored"
        );
    }
}

/// Checks the connection every `health_interval` while it is up, asking
/// its server's `ROLE` (`PING` once the server refused `ROLE`): an answer
/// that names a replica leaves it ([`leave_replica`]); no answer (an error
/// reply is an answer) within `health_timeout` replaces it ([`replace`]).
/// Ends with the store (the task holds it only while it reads the
/// server's clock, judges or replaces, not across its pauses or the
/// check).
async fn heartbeat(weak: Weak<Shared>) {
    let Some(interval) = weak.upgrade().map(|s| s.reconnect.health_interval) else {
        return;
    };
    let (role, ping) = (::redis::cmd("ROLE"), ::redis::cmd("PING"));
    loop {
        tokio::time::sleep(interval).await;
        let (mut conn, epoch, timeout, asks_role) = {
            let Some(shared) = weak.upgrade() else {
                return;
            };
            let State::Up { conn, epoch, .. } = &*read(&shared.state) else {
                continue;
            };
            (
                conn.clone(),
                *epoch,
                shared.reconnect.health_timeout,
                !shared.role_refused.load(Ordering::Relaxed),
            )
        };
        let check = if asks_role { &role } else { &ping };
        let answer = tokio::time::timeout(timeout, conn.req_packed_command(check)).await;
        let Some(shared) = weak.upgrade() else {
            return;
        };
        let fine = matches!(answer, Ok(Ok(_)));
        // The one rule of `unanswered`: it starts afresh when the server
        // answers a health check (an error reply is an answer), the silence
        // it warns of being over. Nothing else resets it: a connection made
        // anew, after a loss or a silence, is reset by its first answered
        // check like any other.
        let answered = match &answer {
            Ok(Ok(_)) => true,
            Ok(Err(error)) => !error.is_unrecoverable_error(),
            Err(_) => false,
        };
        if answered {
            shared.unanswered.reset();
            shared.tracker.answered();
        }
        match answer {
            Ok(Ok(reply)) if asks_role => judge_role(&shared, epoch, reply.extract_error()),
            // An error reply: the server answered.
            Ok(Err(error)) if asks_role && !error.is_unrecoverable_error() => {
                judge_role(&shared, epoch, Err(error));
            }
            Ok(Ok(_)) => {}
            // The connection is broken (the error says how): made anew, as
            // when a call finds it so.
            Ok(Err(error)) if error.is_unrecoverable_error() => {
                reconnect(&shared, epoch, Why::Lost(&error));
            }
            Ok(Err(_)) => {}
            Err(_) => {
                let store = &shared.reconnect.store;
                warn_throttled!(
                    shared.unanswered,
                    { store = %store },
                    "redis connection gave no answer to a health check within {:?}"
                        + ": connecting anew",
                    timeout
                );
                // Its reports may be held up or lost: what the caches hold
                // on the store's word goes now, not once a new connection
                // is made (none may be, for as long as a partition lasts).
                shared.tracker.silent();
                replace(&shared, epoch).await;
            }
        }
        // A fresh reading of the server's clock keeps the drift between
        // the clocks to one interval's.
        if fine {
            if let Some(clock) = ServerClock::read(&mut conn, timeout, &shared.time_refused).await {
                keep_reading(&shared, epoch, clock);
            }
        }
    }
}

/// Acts on the heartbeat's `ROLE` answer on the connection of `epoch`: a
/// replica is left; a refusal (`NOPERM`: an ACL without `+role`; `ERR`: a
/// renamed or unknown command; an answer of another shape) turns the
/// heartbeat to `PING`; another error (`LOADING`, `BUSY`, ...) passes, and
/// `ROLE` is asked again next time.
fn judge_role(shared: &Arc<Shared>, epoch: u64, reply: RedisResult<Value>) {
    let refusal = match reply {
        Ok(Value::Array(items)) if is_master(items.first()) => return,
        Ok(Value::Array(_)) => return leave_replica(shared, epoch, "ROLE"),
        Ok(other) => format!("{other:?}"),
        Err(error)
            if matches!(
                error.kind(),
                ErrorKind::Server(ServerErrorKind::NoPerm | ServerErrorKind::ResponseError)
            ) =>
        {
            error.to_string()
        }
        Err(_) => return,
    };
    shared.role_refused.store(true, Ordering::Relaxed);
    tracing::info!(
        store = %shared.reconnect.store,
        %refusal,
        "redis refused ROLE: the health check sends PING (a demoted server is found by its \
         READONLY answers alone)"
    );
}

/// Makes a new connection and swaps it in for the connection of `epoch`,
/// if that is still the current one. If none can be made within the
/// connect timeout, the current one stays (calls go on through it).
async fn replace(shared: &Shared, epoch: u64) {
    let timeout = shared.reconnect.connect_timeout;
    let connect = connect_once(
        &shared.tracker,
        &shared.source,
        &shared.config,
        timeout,
        &shared.time_refused,
    );
    let attempt = tokio::time::timeout(timeout, connect).await;
    match attempt {
        Ok(Ok((made, clock))) => {
            let mut state = write(&shared.state);
            if matches!(&*state, State::Up { epoch: current, .. } if *current == epoch) {
                *state = State::Up {
                    conn: made.conn,
                    epoch: epoch + 1,
                    since: Instant::now(),
                    clock,
                };
                drop(state);
                tracing::info!(store = %shared.reconnect.store, "redis connection replaced");
                shared
                    .tracker
                    .connected(made.was_on, false, made.server, false);
            }
        }
        // The heartbeat's warning said the connection is being replaced;
        // a failure to is logged at debug level.
        Ok(Err(error)) => tracing::debug!(
            store = %shared.reconnect.store,
            %error,
            "redis connection not replaced: calls go on through it"
        ),
        Err(_) => tracing::debug!(
            store = %shared.reconnect.store,
            "redis connection not replaced (no connection within {timeout:?}): calls go on \
             through it"
        ),
    }
}

//! The batched reads' own connections (*lanes*) to a standalone server at a
//! fixed TCP address: each batch's pipeline of `PTTL`s, `MGET` and
//! `TOUCH`es is written to a lane and its replies are read back with
//! [`resp`], corral's own RESP2 reader. redis-rs's general parser costs an
//! `MGET` about as much per value as a whole `GET`, which kept a batched
//! read from being cheaper than the plain `GET` it replaces.
//!
//! - **One batch per lane at a time**: a driver takes an idle lane,
//!   writes its pipeline, reads every reply, and gives the lane back. A
//!   read of many keys at once (`Store::get_many`: a `PTTL` and a `GET` per
//!   key) takes one the same way. A lane whose exchange did not end (a
//!   timeout, a dropped driver, a broken or garbled reply) is closed, never
//!   reused: no reply is ever read as another batch's.
//! - **Opened in the background, never waited for**: a batch that finds no
//!   idle lane goes through the command connection, and starts opening one
//!   (bounded by the connect timeout) for the batches after it. At most
//!   [`MAX_OPEN`] are open or opening, one per batch in flight (see
//!   [`batch`](super::batch)); none is opened for a lone read. A lane that
//!   could not be opened makes lanes rest for `reconnect_max_delay`.
//! - **The same server as the command connection**: a lane is opened to
//!   the address of the store's URL, with its user, password and database,
//!   and belongs to the command connection's current *epoch*. Once that
//!   connection is made anew (lost, silent, or its server demoted), lanes
//!   of the old epoch are no longer used (the next batch closes them), and
//!   while it is down batches go through it (and fail or wait as it does).
//!   The health check watches only the command connection, so a lane idle
//!   for longer than its interval is closed rather than trusted with a
//!   batch.
//! - **Never worse than without**: a batch waits for no lane to open, and
//!   one whose lane breaks mid-exchange goes through the command connection
//!   with the time left.
//! - TLS (`rediss://`), Unix sockets, Sentinel and cluster stores have no
//!   lanes: their batches go through the command connection as before.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ::redis::{ConnectionAddr, ConnectionInfo, Pipeline, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::runtime::Handle;

use super::resp;
use crate::data::error::StoreError;
use crate::redis::conn::client::KeepaliveTimes;
use crate::redis::conn::Connection;
use crate::redis::errors::timed_out;
use crate::sync::lock_std;

/// The lanes of a store on `connection` with `config` (see [`Lanes::new`]),
/// opened on `runtime` when no read's runtime is at hand.
pub(in crate::redis) fn for_connection(
    connection: &Connection,
    config: &crate::redis::RedisConfig,
    runtime: &Handle,
) -> Option<Lanes> {
    match connection {
        Connection::Standalone(conn) => Lanes::new(
            conn.fixed_info()?,
            Settings {
                connect_timeout: config.connect_timeout,
                keepalive: config.tcp_keepalive,
                rest: config.reconnect_max_delay,
                idle: config.health_interval,
            },
            runtime.clone(),
        ),
        Connection::Cluster(_) => None,
    }
}

/// A lane's read buffer, and what it grows by.
const BUFFER: usize = 16 * 1024;

/// The largest read buffer a lane keeps between exchanges.
const KEPT_BUFFER: usize = 1 << 20;

/// The name lanes give their connections (`CLIENT SETNAME`).
const LANE_NAME: &str = "corral:reads";

/// Lanes open at once (in use or idle), at most: one per batch in flight.
/// A read that finds them all in use goes through the command connection.
const MAX_OPEN: usize = 2;

/// The batched reads' lanes of one store.
pub(in crate::redis) struct Lanes {
    shared: Arc<Shared>,
}

struct Shared {
    target: Target,
    settings: Settings,
    /// Where lanes are opened when no read's runtime is at hand.
    runtime: Handle,
    state: Mutex<Pool>,
    /// Lanes open or being opened (each [`Opened`] counts one).
    open: Arc<AtomicUsize>,
}

/// How lanes are opened and kept.
pub(in crate::redis) struct Settings {
    /// Bound on opening one.
    pub(in crate::redis) connect_timeout: Duration,
    /// [`RedisConfig::tcp_keepalive`](crate::redis::RedisConfig::tcp_keepalive).
    pub(in crate::redis) keepalive: Option<Duration>,
    /// How long no lane is tried after one could not be opened.
    pub(in crate::redis) rest: Duration,
    /// The longest a lane is kept idle: one unused for longer is closed
    /// instead of used (the command connection's health is checked that
    /// often; a lane that died silently while idle is not trusted).
    pub(in crate::redis) idle: Duration,
}

/// Where and as whom a lane connects.
struct Target {
    host: String,
    port: u16,
    username: Option<String>,
    password: Option<String>,
    db: i64,
}

struct Pool {
    idle: Vec<Lane>,
    /// No lane is opened before this (one could not be, lately).
    resting_until: Option<Instant>,
}

/// One open lane.
struct Lane {
    stream: TcpStream,
    _counted: Opened,
    /// The command connection's epoch when it was opened.
    epoch: u64,
    /// When its last exchange ended.
    used: Instant,
    /// Replies read and not yet used (empty between exchanges).
    buf: Vec<u8>,
}

/// One of [`Shared::open`]'s count, given back when dropped.
struct Opened(Arc<AtomicUsize>);

impl Drop for Opened {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A batch goes through the command connection instead: no lane could be
/// opened (or none is tried now), or the lane broke or answered something
/// that is not RESP2.
#[derive(Debug)]
struct Fallback;

impl Lanes {
    /// Lanes for a standalone store whose server is at `info` (none for a
    /// TLS or Unix-socket address).
    pub(in crate::redis) fn new(
        info: &ConnectionInfo,
        settings: Settings,
        runtime: Handle,
    ) -> Option<Self> {
        let ConnectionAddr::Tcp(host, port) = info.addr() else {
            return None;
        };
        let auth = info.redis_settings();
        Some(Self {
            shared: Arc::new(Shared {
                target: Target {
                    host: host.clone(),
                    port: *port,
                    username: auth.username().map(str::to_owned),
                    password: auth.password().map(str::to_owned),
                    db: auth.db(),
                },
                settings,
                runtime,
                state: Mutex::new(Pool {
                    idle: Vec::with_capacity(MAX_OPEN),
                    resting_until: None,
                }),
                open: Arc::new(AtomicUsize::new(0)),
            }),
        })
    }

    /// Sends `pipe` (whose first `kept` commands' replies are kept, the
    /// rest dropped, as redis-rs does with ignored commands) on an idle
    /// lane and reads its replies, within `timeout`: the same reply as
    /// [`Connection::pipelined`], which gets the batch instead when no lane
    /// is idle (one is then opened in the background, for the batches
    /// after it) or the lane breaks.
    pub(in crate::redis) async fn pipelined(
        &self,
        connection: &Connection,
        pipe: &Pipeline,
        kept: usize,
        timeout: Duration,
    ) -> Result<Value, StoreError> {
        let lane = connection.epoch().and_then(|epoch| self.shared.take(epoch));
        let Some(mut lane) = lane else {
            return connection.pipelined(pipe, timeout).await;
        };
        let started = Instant::now();
        match tokio::time::timeout(timeout, lane.exchange(pipe, kept)).await {
            Ok(Ok(replies)) => {
                self.shared.give_back(lane);
                Ok(Value::Array(replies))
            }
            Ok(Err(Fallback)) => {
                drop(lane);
                let left = timeout.saturating_sub(started.elapsed());
                connection.pipelined(pipe, left).await
            }
            Err(_) => Err(timed_out("read", timeout)),
        }
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Pool> {
        lock_std(&self.state)
    }

    /// An idle lane of `epoch` (closing those of older epochs and those
    /// idle too long); if there is none, starts opening one in the
    /// background unless [`MAX_OPEN`] are open or opening, or lanes rest.
    fn take(self: &Arc<Self>, epoch: u64) -> Option<Lane> {
        {
            let mut pool = self.lock();
            let idle = self.settings.idle;
            pool.idle
                .retain(|lane| lane.epoch == epoch && lane.used.elapsed() < idle);
            if let Some(lane) = pool.idle.pop() {
                return Some(lane);
            }
            if pool
                .resting_until
                .is_some_and(|until| Instant::now() < until)
            {
                return None;
            }
        }
        let reserved = self
            .open
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |open| {
                (open < MAX_OPEN).then_some(open + 1)
            });
        if reserved.is_ok() {
            let counted = Opened(Arc::clone(&self.open));
            let runtime = Handle::try_current().unwrap_or_else(|_| self.runtime.clone());
            runtime.spawn(Arc::clone(self).open(epoch, counted));
        }
        None
    }

    /// Opens a lane of `epoch` (counted by `counted`) and leaves it idle;
    /// if it cannot be opened within the connect timeout, lanes rest.
    async fn open(self: Arc<Self>, epoch: u64, counted: Opened) {
        let opened =
            tokio::time::timeout(self.settings.connect_timeout, self.connect(epoch, counted));
        match opened.await {
            Ok(Ok(lane)) => self.lock().idle.push(lane),
            Ok(Err(error)) => {
                tracing::debug!(%error, "redis read lane not opened: batches use the command connection");
                self.lock().resting_until = Some(Instant::now() + self.settings.rest);
            }
            Err(_) => {
                tracing::debug!(
                    "redis read lane not opened in time: batches use the command connection"
                );
                self.lock().resting_until = Some(Instant::now() + self.settings.rest);
            }
        }
    }

    fn give_back(&self, mut lane: Lane) {
        lane.used = Instant::now();
        self.lock().idle.push(lane);
    }

    /// Connects, authenticates and selects the database: a lane counted
    /// by `counted`.
    async fn connect(&self, epoch: u64, counted: Opened) -> std::io::Result<Lane> {
        let target = &self.target;
        let stream = TcpStream::connect((target.host.as_str(), target.port)).await?;
        stream.set_nodelay(true)?;
        if let Some(idle) = self.settings.keepalive {
            keep_alive(&stream, idle)?;
        }
        let mut lane = Lane {
            stream,
            _counted: counted,
            epoch,
            used: Instant::now(),
            buf: Vec::with_capacity(BUFFER),
        };
        let mut hello = ::redis::pipe();
        if let Some(password) = &target.password {
            hello.cmd("AUTH").arg(&target.username).arg(password);
        }
        if target.db != 0 {
            hello.cmd("SELECT").arg(target.db);
        }
        let musts = hello.len();
        // Named for whoever reads `CLIENT LIST`; a user whose ACL refuses
        // `CLIENT` still gets its lane.
        hello.cmd("CLIENT").arg("SETNAME").arg(LANE_NAME);
        lane.stream.write_all(&hello.get_packed_pipeline()).await?;
        let replies = lane.read(musts + 1).await.map_err(std::io::Error::other)?;
        if !replies[..musts]
            .iter()
            .all(|reply| matches!(reply, Value::Okay))
        {
            // Not shown: a refusal may echo what was sent.
            return Err(std::io::Error::other("the server refused AUTH or SELECT"));
        }
        match replies.last() {
            Some(Value::Okay) => {}
            Some(Value::ServerError(refused)) if refused.code() == "NOPERM" => {}
            // `-ERR max number of clients reached`, say: the server is
            // about to close it.
            _ => return Err(std::io::Error::other("the server refused a new connection")),
        }
        Ok(lane)
    }
}

impl Lane {
    /// Writes `pipe` and reads all its replies, keeping the first `kept`.
    async fn exchange(&mut self, pipe: &Pipeline, kept: usize) -> Result<Vec<Value>, Fallback> {
        let packed = pipe.get_packed_pipeline();
        self.stream.write_all(&packed).await.map_err(|_| Fallback)?;
        let mut replies = self.read(pipe.len()).await.map_err(|_| Fallback)?;
        replies.truncate(kept);
        Ok(replies)
    }

    /// Reads `count` whole replies.
    async fn read(&mut self, count: usize) -> Result<Vec<Value>, LaneError> {
        let mut replies = Vec::with_capacity(count);
        let mut at = 0;
        // Whether the reply at `at` was found cut short: then it is read
        // only once `resp::complete` finds it whole.
        let mut cut = false;
        while replies.len() < count {
            if !cut || resp::complete(&self.buf, at)?.is_some() {
                match resp::read(&self.buf, at)? {
                    Some((reply, end)) => {
                        replies.push(reply);
                        at = end;
                        cut = false;
                        continue;
                    }
                    None => cut = true,
                }
            }
            if self.buf.capacity() - self.buf.len() < 4096 {
                self.buf.reserve(BUFFER);
            }
            match self.stream.read_buf(&mut self.buf).await {
                Ok(0) => return Err(LaneError::Closed),
                Ok(_) => {}
                Err(error) => return Err(LaneError::Io(error)),
            }
        }
        if at < self.buf.len() {
            // The server sent more than was asked.
            return Err(LaneError::Malformed("replies nobody asked for"));
        }
        self.buf.clear();
        if self.buf.capacity() > KEPT_BUFFER {
            // A batch of large values is not held for the lane's life.
            self.buf = Vec::with_capacity(BUFFER);
        }
        Ok(replies)
    }
}

/// What ended a lane.
#[derive(Debug)]
enum LaneError {
    Closed,
    Io(std::io::Error),
    Malformed(&'static str),
}

impl std::fmt::Display for LaneError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Closed => f.write_str("the server closed the connection"),
            Self::Io(error) => write!(f, "{error}"),
            Self::Malformed(what) => write!(f, "not a RESP2 reply: {what}"),
        }
    }
}

impl std::error::Error for LaneError {}

impl From<resp::Malformed> for LaneError {
    fn from(malformed: resp::Malformed) -> Self {
        Self::Malformed(malformed.0)
    }
}

/// The keepalive of [`RedisConfig::tcp_keepalive`](crate::redis::RedisConfig::tcp_keepalive)
/// on `stream`, as on the store's other connections.
fn keep_alive(stream: &TcpStream, idle: Duration) -> std::io::Result<()> {
    let times = KeepaliveTimes::new(idle);
    let socket = socket2::SockRef::from(stream);
    let keepalive = socket2::TcpKeepalive::new().with_time(times.idle);
    #[cfg(target_os = "linux")]
    let keepalive = {
        socket.set_tcp_user_timeout(Some(times.user_timeout))?;
        keepalive.with_interval(times.interval).with_retries(3)
    };
    socket.set_tcp_keepalive(&keepalive)
}

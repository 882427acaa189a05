//! Auto-batched reads of value keys: reads that arrive while the store's
//! reads are in flight wait for one of them to end, then go out together.
//!
//! - A read that finds fewer than [`IN_FLIGHT`] round trips of reads in
//!   flight goes out at once, alone, as the command it would be unbatched
//!   (`GET`, or `PTTL` + `GET` pipelined): a lone read pays two
//!   uncontended lock operations, no timer, no task.
//! - A read that finds [`IN_FLIGHT`] of them in flight is queued. When one
//!   ends (answered, failed, timed out or its caller dropped), the queue
//!   is taken by one spawned *driver* task, which sends it as one pipeline
//!   per hash slot — the `PTTL`s of the keys that need one, then one
//!   `MGET` of all the keys — hands every read its answer, and goes on
//!   with whatever queued meanwhile until the queue is empty. The round
//!   trip that ended hands its place to the driver, so at most
//!   [`IN_FLIGHT`] round trips of lone reads and batches are in flight per
//!   store (reads sent again alone, below, take no place), and a read
//!   waits for at most a round trip ahead of it and its own. Two in
//!   flight keep both the server and this process busy: while one batch
//!   is on the wire, the answers of the other are being used.
//! - `MGET` answers nil both for an absent key and for one holding another
//!   Redis type (where `GET` answers `WRONGTYPE`, which the store reads as
//!   foreign data). A batched read of a key whose `PTTL` says it exists
//!   (or that had no `PTTL` asked) and that `MGET` answers nil is sent
//!   again alone, with what is left of its timeout, so it answers exactly
//!   as an unbatched read would.
//! - A user whose ACL refuses `MGET` (set up before reads were batched)
//!   keeps working: the reads of that batch are sent again alone, and the
//!   store stops batching (every read goes alone, as unbatched).
//! - Every read ends by its own timeout, from the moment it was asked,
//!   and no timer is armed per queued read:
//!   - a batch is bounded by the timeout of its oldest read (reads queue
//!     in the order they are asked, so the first): what it has not
//!     answered by then fails with a timeout. Every other read in it was
//!     asked later, so it too ends within its own timeout;
//!   - a read that no batch took within half its timeout is taken out of
//!     the queue and sent alone with what is left of it, by the store's
//!     *watchdog*: one task per store, alive only while reads queue. It
//!     sleeps until the oldest queued read's half is over (so it wakes at
//!     most once per half timeout while batches take the queue in time),
//!     and ends when it wakes to find no read queued since it last woke;
//!     the next read queued starts it again. It runs on the runtime of
//!     the read that started it (the store's own outside one); if it is
//!     dropped (that runtime shut down), the next read queued starts
//!     another, on its own runtime.
//! - A caller that is dropped or gives up leaves its slot in the batch
//!   unread, and nobody else's read depends on it. A batch that fails
//!   fails every read in its pipeline with the same error.
//! - A lone read's place is given back when its caller's future ends or is
//!   dropped, so a caller that stops polling its read (holding the future
//!   without polling it) would hold its place. No read waits on that: the
//!   reads queued behind it are sent alone after half their timeout (the
//!   watchdog), and when no round trip began or ended for a whole timeout
//!   while every place is taken (a read in flight ends by its own timeout
//!   when polled), the next read takes the places back.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ::redis::{Cmd, RedisError, Value};
use tokio::runtime::Handle;
use tokio::sync::oneshot;

use super::lanes::Lanes;
use super::touches::Touches;
use crate::redis::conn::{answered, Connection};
use crate::redis::errors::{refusal, unexpected};
use crate::redis::keys::{ClearCopy, ValueName};
use crate::sync::lock_std;

mod watch;

use crate::data::error::{StoreError, StoreErrorKind};
use crate::store::StoreKey;
use watch::{after, left_of, watch, Reply, Watching};

/// The most reads one batch sends; more wait for the next round trip.
const MAX_BATCH: usize = 512;

/// Round trips of reads in flight at once, per store: more reads queue.
const IN_FLIGHT: usize = 2;

/// `PTTL`'s answer for a key that does not exist.
const ABSENT: i64 = -2;

/// A store's batched reads over its command connection. Clones share the
/// queue.
#[derive(Clone)]
pub(in crate::redis) struct Reads {
    shared: Arc<Shared>,
}

struct Shared {
    connection: Connection,
    /// Where drivers run when the read that hands its queue on is dropped
    /// outside a runtime.
    runtime: Handle,
    /// The bound on one batch's round trip (the store's `op_timeout`).
    timeout: Duration,
    state: Mutex<State>,
    /// Whether the server refused `MGET` (an ACL): every read goes alone.
    unbatched: AtomicBool,
    /// Whose turn it is to touch each clear version.
    touches: Touches,
    /// The batches' own connections, where the store has them.
    lanes: Option<Lanes>,
}

struct State {
    /// Round trips of reads in flight (lone reads and drivers' batches),
    /// at most [`IN_FLIGHT`]. While they are that many, reads queue.
    in_flight: usize,
    queue: Vec<Queued>,
    /// A whole timeout after a round trip last began or ended: past it,
    /// with every place taken, the places are taken back.
    stale_at: Instant,
    /// Whether a watchdog runs for this queue.
    watched: bool,
    /// Whether a read queued since the watchdog last woke.
    recent: bool,
}

/// One read waiting for the next batch.
struct Queued {
    /// The key whose value key is read: a copy (inline for the usual
    /// lengths, so queueing a read builds no name; the batch writes the
    /// name straight into its commands).
    key: StoreKey,
    /// Whether the read needs the key's `PTTL` too.
    pttl: bool,
    /// Whether the read must go through the command connection, whose
    /// reads the server tracks (not a lane).
    tracked: bool,
    /// When it was asked: its timeout runs from then.
    asked: Instant,
    reply: Reply,
}

/// What a batch answers one read.
enum Answer {
    /// The `PTTL` (`Nil` when not asked) and the value (`Nil`: absent).
    Read(Value, Value),
    /// `MGET` answered nil for a key that may hold another type: read it
    /// alone.
    Alone,
    /// No batch took the read within half its timeout: send it alone with
    /// what is left.
    Late,
}

/// What a read of a value key asks: its value alone ([`Get`]) or its
/// `PTTL` with it ([`WithPttl`]). [`Reads::fetch`] is written once for
/// both and compiled for each, so neither pays for the other.
trait Ask {
    /// What the read returns.
    type Out;
    /// Whether a batch reads the key's `PTTL` too.
    const PTTL: bool;
    /// The read sent alone, bounded by `timeout`.
    fn alone<'a>(
        connection: &'a Connection,
        name: ValueName<'a>,
        touch: Option<ClearCopy<'a>>,
        timeout: Duration,
    ) -> impl Future<Output = Result<Self::Out, StoreError>> + 'a;
    /// The read out of a batch's answer.
    fn batched(pttl: Value, value: Value) -> Self::Out;
}

/// A plain `GET` ([`Connection::get`]).
struct Get;

impl Ask for Get {
    type Out = Value;
    const PTTL: bool = false;

    #[inline]
    fn alone<'a>(
        connection: &'a Connection,
        name: ValueName<'a>,
        touch: Option<ClearCopy<'a>>,
        timeout: Duration,
    ) -> impl Future<Output = Result<Value, StoreError>> + 'a {
        connection.get(name, touch, timeout)
    }

    #[inline]
    fn batched(_pttl: Value, value: Value) -> Value {
        value
    }
}

/// `PTTL` + `GET` ([`Connection::read`]).
struct WithPttl;

impl Ask for WithPttl {
    type Out = (Value, Value);
    const PTTL: bool = true;

    #[inline]
    fn alone<'a>(
        connection: &'a Connection,
        name: ValueName<'a>,
        touch: Option<ClearCopy<'a>>,
        timeout: Duration,
    ) -> impl Future<Output = Result<(Value, Value), StoreError>> + 'a {
        connection.read(name, touch, timeout)
    }

    #[inline]
    fn batched(pttl: Value, value: Value) -> (Value, Value) {
        (pttl, value)
    }
}

/// How a read goes out.
enum Entry {
    /// Alone, at once; the guard hands the queue on when it ends (`None`:
    /// the store does not batch).
    Alone(Option<Flight>),
    /// In the next batch; asked then.
    Queued(oneshot::Receiver<Result<Answer, StoreError>>, Instant),
}

impl Reads {
    /// Batched reads over `connection` (the batches over `lanes`, if
    /// any), each batch bounded by `timeout`; drivers run on the runtime of
    /// the read that starts them, or on `runtime`.
    pub(in crate::redis) fn new(
        connection: Connection,
        lanes: Option<Lanes>,
        timeout: Duration,
        runtime: Handle,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                connection,
                runtime,
                timeout,
                state: Mutex::new(State {
                    in_flight: 0,
                    queue: Vec::new(),
                    stale_at: after(Instant::now(), timeout),
                    watched: false,
                    recent: false,
                }),
                unbatched: AtomicBool::new(false),
                touches: Touches::new(),
                lanes,
            }),
        }
    }

    /// A plain `GET` of a value key (one whose expiry the store
    /// remembers), bounded by `timeout`; `tracked`: on the command
    /// connection, whose reads the server tracks, even in a batch.
    pub(in crate::redis) fn get<'a>(
        &'a self,
        name: ValueName<'a>,
        timeout: Duration,
        tracked: bool,
    ) -> impl Future<Output = Result<Value, StoreError>> + 'a {
        self.fetch::<Get>(name, timeout, tracked)
    }

    /// A value key's `PTTL` and value (see [`Connection::read`]), bounded
    /// by `timeout`; `tracked` as for [`get`](Self::get).
    pub(in crate::redis) fn read<'a>(
        &'a self,
        name: ValueName<'a>,
        timeout: Duration,
        tracked: bool,
    ) -> impl Future<Output = Result<(Value, Value), StoreError>> + 'a {
        self.fetch::<WithPttl>(name, timeout, tracked)
    }

    /// One read of a value key: sent alone, or queued for the next batch
    /// (and then sent alone after all if the batch says so). The command's
    /// own future is boxed where it is sent, so a queued read's future
    /// (and the store's, which holds it) stays small: a size the allocator
    /// serves from its thread cache.
    async fn fetch<A: Ask>(
        &self,
        name: ValueName<'_>,
        timeout: Duration,
        tracked: bool,
    ) -> Result<A::Out, StoreError> {
        let connection = &self.shared.connection;
        match self.enter(name, A::PTTL, tracked) {
            Entry::Alone(_flight) => {
                let touch = self.touch(&name);
                Box::pin(A::alone(connection, name, touch, timeout)).await
            }
            Entry::Queued(reply, asked) => match waited(reply).await? {
                Answer::Read(pttl, value) => Ok(A::batched(pttl, value)),
                Answer::Alone => {
                    let left = left_of(timeout, asked);
                    Box::pin(A::alone(connection, name, None, left)).await
                }
                Answer::Late => {
                    let touch = self.touch(&name);
                    let left = left_of(timeout, asked);
                    Box::pin(A::alone(connection, name, touch, left)).await
                }
            },
        }
    }

    /// The clear version's copy a lone read (or a script) of `name`
    /// touches, if its turn is due ([`Touches`]).
    #[inline]
    pub(in crate::redis) fn touch<'a>(&self, name: &ValueName<'a>) -> Option<ClearCopy<'a>> {
        let copy = ClearCopy::of(name, self.shared.connection.is_cluster());
        copy.due(|base| self.shared.touches.due(base))
            .then_some(copy)
    }

    /// The `PTTL` and value of each of `names` (value keys of one hash
    /// slot), in one pipeline with the touches due of their clear
    /// versions, sent at once (not queued) on a lane where the store has
    /// them (unless `tracked`: on the command connection, whose reads the
    /// server tracks): what a batch read of several keys asks.
    pub(in crate::redis) async fn read_many(
        &self,
        names: &[ValueName<'_>],
        timeout: Duration,
        tracked: bool,
    ) -> Result<Vec<(Value, Value)>, StoreError> {
        let mut pipe = ::redis::Pipeline::with_capacity(2 * names.len() + 1);
        for name in names {
            pipe.cmd("PTTL").arg(*name).cmd("GET").arg(*name);
        }
        touch_clear_copies(&self.shared, &mut pipe, names);
        pipe.ignore_errors();
        match self
            .shared
            .pipelined(&pipe, 2 * names.len(), timeout, tracked)
            .await?
        {
            Value::Array(items) if items.len() == 2 * names.len() => {
                let mut items = items.into_iter();
                let mut pairs = Vec::with_capacity(names.len());
                while let (Some(pttl), Some(value)) = (items.next(), items.next()) {
                    pairs.push((answered(pttl)?, answered(value)?));
                }
                Ok(pairs)
            }
            other => Err(unexpected("read", &other)),
        }
    }

    /// Sends the read alone if fewer than [`IN_FLIGHT`] round trips are in
    /// flight (taking a place), else queues it (starting the watchdog if
    /// none runs).
    fn enter(&self, name: ValueName<'_>, pttl: bool, tracked: bool) -> Entry {
        if self.shared.unbatched.load(Relaxed) {
            return Entry::Alone(None);
        }
        let mut state = self.shared.lock();
        let now = Instant::now();
        if state.in_flight >= IN_FLIGHT && now > state.stale_at {
            // Every place is held by a read whose caller stopped polling
            // it (a polled one ends by its timeout): take them back.
            state.in_flight = 0;
        }
        if state.in_flight < IN_FLIGHT {
            state.in_flight += 1;
            state.stale_at = after(now, self.shared.timeout);
            drop(state);
            return Entry::Alone(Some(Flight {
                shared: Arc::clone(&self.shared),
            }));
        }
        let (sender, answer) = oneshot::channel();
        state.queue.push(Queued {
            key: name.key().clone(),
            pttl,
            tracked,
            asked: now,
            reply: Reply {
                sender: Some(sender),
                deadline: None,
            },
        });
        state.recent = true;
        let unwatched = !state.watched;
        state.watched = true;
        drop(state);
        if unwatched {
            let first = after(now, self.shared.timeout / 2);
            let watching = Watching {
                shared: Arc::downgrade(&self.shared),
                done: false,
            };
            // On the runtime of the read that queues (alive: it polls
            // this read), as the drivers are; the store's own only outside
            // one.
            let runtime = Handle::try_current().unwrap_or_else(|_| self.shared.runtime.clone());
            runtime.spawn(watch(watching, first));
        }
        Entry::Queued(answer, now)
    }
}

impl Shared {
    /// Sends `pipe` (whose first `kept` commands' replies are kept; the
    /// others are ignored touches) on a lane if the store has them and the
    /// reads need not be `tracked`, else on the command connection, within
    /// `timeout`.
    async fn pipelined(
        &self,
        pipe: &::redis::Pipeline,
        kept: usize,
        timeout: Duration,
        tracked: bool,
    ) -> Result<Value, StoreError> {
        match &self.lanes {
            Some(lanes) if !tracked => lanes.pipelined(&self.connection, pipe, kept, timeout).await,
            _ => self.connection.pipelined(pipe, timeout).await,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        lock_std(&self.state)
    }

    /// Ends a round trip: frees its place if nothing queued, else takes
    /// the next batch (which keeps the place).
    fn next_batch(&self) -> Option<Vec<Queued>> {
        let mut state = self.lock();
        state.stale_at = after(Instant::now(), self.timeout);
        if state.queue.is_empty() {
            state.in_flight = state.in_flight.saturating_sub(1);
            return None;
        }
        let queued = state.queue.len();
        let batch = if queued <= MAX_BATCH {
            // The next queue is likely about as long: room for it at once.
            std::mem::replace(&mut state.queue, Vec::with_capacity(queued))
        } else {
            let later = state.queue.split_off(MAX_BATCH);
            std::mem::replace(&mut state.queue, later)
        };
        Some(batch)
    }
}

/// A lone read in flight: when it ends, either way, the reads queued
/// behind it go to a driver.
struct Flight {
    shared: Arc<Shared>,
}

impl Drop for Flight {
    fn drop(&mut self) {
        if let Some(batch) = self.shared.next_batch() {
            let runtime = Handle::try_current().unwrap_or_else(|_| self.shared.runtime.clone());
            runtime.spawn(drive(Arc::clone(&self.shared), batch));
        }
    }
}

/// Sends batches until the queue is empty.
async fn drive(shared: Arc<Shared>, mut batch: Vec<Queued>) {
    let mut driving = Driving {
        shared: &shared,
        done: false,
    };
    loop {
        // Callers that gave up need no answer.
        batch.retain(|read| !read.reply.is_closed());
        // The reads queued in the order asked: the first is the oldest,
        // whose timeout bounds the batch.
        if let Some(oldest) = batch.first() {
            let deadline = after(oldest.asked, shared.timeout);
            for read in &mut batch {
                read.reply.deadline = Some(deadline);
            }
            // Past the deadline the batch is dropped: each read still
            // unanswered then answers a timeout (`Reply`'s drop).
            let _ = tokio::time::timeout_at(deadline.into(), send(&shared, batch)).await;
        }
        match shared.next_batch() {
            Some(next) => batch = next,
            None => {
                driving.done = true;
                return;
            }
        }
    }
}

/// A driver running: if it is dropped before the queue is empty (its
/// runtime shuts down), it gives its place up, and unless another round
/// trip is in flight to take the queue on, the queued reads fail at once
/// (their answers are dropped).
struct Driving<'a> {
    shared: &'a Shared,
    done: bool,
}

impl Drop for Driving<'_> {
    fn drop(&mut self) {
        if !self.done {
            let queue = {
                let mut state = self.shared.lock();
                state.in_flight = state.in_flight.saturating_sub(1);
                // Nobody else in flight takes the queue on.
                if state.in_flight == 0 {
                    std::mem::take(&mut state.queue)
                } else {
                    Vec::new()
                }
            };
            drop(queue);
        }
    }
}

/// Sends `batch`, one pipeline per hash slot on a cluster, all at once,
/// and answers every read.
async fn send(shared: &Shared, batch: Vec<Queued>) {
    let groups = shared
        .connection
        .by_slot(batch, |read| ValueName::new(&read.key).slot());
    let sends = groups.into_iter().map(|group| send_group(shared, group));
    futures_util::future::join_all(sends).await;
}

/// Sends the reads of one slot (on one server, any slots) as one
/// pipeline — the `PTTL`s asked for, then one `MGET` — and answers each.
async fn send_group(shared: &Shared, group: Vec<Queued>) {
    // Each key hashed once for the whole pipeline.
    let names: Vec<ValueName<'_>> = group.iter().map(|read| ValueName::new(&read.key)).collect();
    let pttls = group.iter().filter(|read| read.pttl).count();
    let mut pipe = ::redis::Pipeline::with_capacity(pttls + 1);
    for (read, name) in group.iter().zip(&names) {
        if read.pttl {
            pipe.cmd("PTTL").arg(*name);
        }
    }
    let bytes = names.iter().map(ValueName::len).sum::<usize>();
    let mut mget = Cmd::with_capacity(group.len() + 1, bytes + 4);
    mget.arg("MGET");
    for name in &names {
        mget.arg(*name);
    }
    pipe.add_command(mget);
    touch_clear_copies(shared, &mut pipe, &names);
    pipe.ignore_errors();
    let tracked = group.iter().any(|read| read.tracked);
    let answers = match shared
        .pipelined(&pipe, pttls + 1, shared.timeout, tracked)
        .await
    {
        Ok(reply) if mget_refused(&reply) => {
            if !shared.unbatched.swap(true, Relaxed) {
                tracing::warn!(
                    "redis refused MGET (ACL): reads are no longer batched; \
                     allow +mget for the cache's user to batch them"
                );
            }
            Ok(group.iter().map(|_| Ok(Answer::Alone)).collect())
        }
        Ok(reply) => answers(reply, &group),
        Err(error) => Err(error),
    };
    match answers {
        Ok(answers) => {
            for (read, answer) in group.into_iter().zip(answers) {
                // A caller that gave up no longer listens.
                let _ = read.reply.send(answer);
            }
        }
        Err(error) => {
            for read in group {
                let _ = read.reply.send(Err(error.clone()));
            }
        }
    }
}

/// Adds the touches of the clear versions guarding the entries `names` (one
/// per namespace; on a cluster, the group's bucket's copy) whose turn is
/// due ([`Touches`]) to `pipe`.
fn touch_clear_copies(shared: &Shared, pipe: &mut ::redis::Pipeline, names: &[ValueName<'_>]) {
    let cluster = shared.connection.is_cluster();
    let mut named: Vec<ClearCopy<'_>> = Vec::new();
    for name in names {
        let copy = ClearCopy::of(name, cluster);
        if named.contains(&copy) {
            continue;
        }
        named.push(copy);
        if copy.due(|base| shared.touches.due(base)) {
            shared.connection.touch(pipe, copy);
        }
    }
}

/// Whether the `MGET` of a group's pipeline reply (its last) is an ACL
/// refusal.
fn mget_refused(reply: &Value) -> bool {
    match reply {
        Value::Array(items) => matches!(
            items.last(),
            Some(Value::ServerError(error)) if refusal(&RedisError::from(error.clone())).is_some()
        ),
        _ => false,
    }
}

/// Each read's answer from a group's pipeline reply.
fn answers(reply: Value, group: &[Queued]) -> Result<Vec<Result<Answer, StoreError>>, StoreError> {
    let asked = group.iter().filter(|read| read.pttl).count();
    let Value::Array(mut items) = reply else {
        return Err(unexpected("read", &reply));
    };
    if items.len() != asked + 1 {
        return Err(unexpected("read", &Value::Array(items)));
    }
    let values = match items.pop().map(answered) {
        Some(Ok(Value::Array(values))) if values.len() == group.len() => values,
        Some(Ok(other)) => return Err(unexpected("read", &other)),
        Some(Err(error)) => return Err(error),
        None => return Err(unexpected("read", &Value::Nil)),
    };
    let mut pttls = items.into_iter();
    let answers = group
        .iter()
        .zip(values)
        .map(|(read, value)| {
            let pttl = if read.pttl {
                answered(pttls.next().unwrap_or(Value::Nil))?
            } else {
                Value::Nil
            };
            Ok(match (value, &pttl) {
                (Value::Nil, Value::Int(ABSENT)) => Answer::Read(pttl, Value::Nil),
                (Value::Nil, _) => Answer::Alone,
                (value, _) => Answer::Read(pttl, value),
            })
        })
        .collect();
    Ok(answers)
}

/// A queued read's answer: its batch's, or [`Answer::Late`].
async fn waited(
    reply: oneshot::Receiver<Result<Answer, StoreError>>,
) -> Result<Answer, StoreError> {
    match reply.await {
        Ok(answer) => answer,
        // Every `Reply` answers before it is dropped; kept for safety.
        Err(_) => Err(StoreError::new(
            StoreErrorKind::Unavailable,
            "redis read: its batch was dropped (the runtime is shutting down)",
        )),
    }
}

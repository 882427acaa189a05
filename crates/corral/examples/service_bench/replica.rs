//! A replica: this example run again as `service_bench replica <json>`.
//! It serves requests from `concurrency` client tasks in a closed loop,
//! through corral or through plain cache-aside, and takes its orders from
//! the coordinator on stdin (`corral-testkit`'s `Worker` protocol):
//! `warm N` serves N requests (`@warm`); `measure N SECS` serves N more
//! within at most SECS seconds, the measured period, and answers
//! `@report <json>`. Between orders the client tasks wait, so nothing
//! reaches Redis but corral's own upkeep.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use corral::{Cache, Capacity, RedisConfig, RedisStore};
use corral_testkit::{cpu_micros, micros};
use redis::aio::MultiplexedConnection;
use redis::AsyncCommands as _;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncBufReadExt as _;
use tokio::sync::{watch, Barrier};

use crate::args::{Scenario, Side};
use crate::db::{Db, User};
use crate::histogram::{Histogram, Sparse};
use crate::zipf::Zipf;

/// What a replica is told, as the JSON of its one argument.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ReplicaConfig {
    pub(crate) index: usize,
    pub(crate) side: Side,
    pub(crate) scenario: Scenario,
    pub(crate) redis: String,
    pub(crate) db: String,
    pub(crate) pool: usize,
    pub(crate) concurrency: usize,
    /// Requests per second this replica starts on a schedule (open loop);
    /// `None`: `concurrency` tasks in a closed loop.
    #[serde(default)]
    pub(crate) rate: Option<f64>,
    pub(crate) ttl: Duration,
}

/// What a replica measured over its measured period.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct ReplicaReport {
    /// Requests answered (reads and writes).
    pub(crate) requests: u64,
    /// Of them, writes.
    pub(crate) writes: u64,
    /// Requests that failed (not in `requests`).
    pub(crate) errors: u64,
    pub(crate) first_error: Option<String>,
    /// Database reads (`SELECT`s).
    pub(crate) db_queries: u64,
    /// This process's user + system CPU, in microseconds.
    pub(crate) cpu_us: u64,
    /// The measured period, in microseconds.
    pub(crate) wall_us: u64,
    /// Whether it reached its cap (and stopped short of its requests).
    pub(crate) capped: bool,
    pub(crate) latencies: Sparse,
    /// corral's counters that moved (its `Stats`, after less before).
    pub(crate) stats: BTreeMap<String, u64>,
}

/// How a request reaches the cache.
#[derive(Clone)]
enum Service {
    Corral(Cache<String>),
    CacheAside(MultiplexedConnection, Duration),
}

/// What the client tasks share with the order loop.
struct Load {
    service: Service,
    db: Db,
    zipf: Zipf,
    writes_share: f64,
    /// Requests still to start in this phase (below 0: none).
    remaining: AtomicI64,
    /// Set when the measured period reached its cap.
    stop: AtomicBool,
    /// Each client task and the order loop meet here at a phase's end.
    finished: Barrier,
    writes: AtomicU64,
    errors: AtomicU64,
    first_error: Mutex<Option<String>>,
    /// One per client task, locked by it once per request.
    latencies: Vec<Mutex<Histogram>>,
}

/// Runs the replica described by `config` until its stdin closes.
pub(crate) fn run(config: &str) -> anyhow::Result<()> {
    let config: ReplicaConfig = serde_json::from_str(config).context("the replica's config")?;
    tokio::runtime::Runtime::new()?.block_on(serve(config))
}

async fn connect(config: &ReplicaConfig) -> anyhow::Result<Service> {
    let url = config.redis.as_str();
    Ok(match config.side {
        Side::Corral => {
            let store = RedisStore::connect(url, RedisConfig::default()).await?;
            let cache = Cache::<String>::builder("svc")
                .ttl(config.ttl)
                .capacity(Capacity::Entries(config.scenario.l1))
                .store(store)
                .build()?;
            Service::Corral(cache)
        }
        Side::CacheAside => {
            let client = redis::Client::open(url)?;
            let conn = client.get_multiplexed_async_connection().await?;
            Service::CacheAside(conn, config.ttl)
        }
    })
}

/// The shortest time between two requests of one pacing task: tokio's
/// timers tick in milliseconds.
const PACE: Duration = Duration::from_millis(2);

async fn serve(config: ReplicaConfig) -> anyhow::Result<()> {
    // Open loop: enough pacing tasks that each starts a request at most
    // every `PACE`.
    let (tasks, period) = match config.rate {
        Some(rate) => {
            let tasks = ((rate * PACE.as_secs_f64()).ceil() as usize).max(config.concurrency);
            (tasks, Some(Duration::from_secs_f64(tasks as f64 / rate)))
        }
        None => (config.concurrency, None),
    };
    let load = Arc::new(Load {
        service: connect(&config).await?,
        db: Db::open(&config.db, config.pool).await?,
        zipf: Zipf::new(config.scenario.keys),
        writes_share: config.scenario.writes,
        remaining: AtomicI64::new(0),
        stop: AtomicBool::new(false),
        finished: Barrier::new(tasks + 1),
        writes: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        first_error: Mutex::new(None),
        latencies: (0..tasks).map(|_| Mutex::default()).collect(),
    });
    let (phase, phases) = watch::channel(0_u64);
    for task in 0..tasks {
        // The same draws on both sides: the seed is the task's place.
        let seed = (config.index as u64) << 32 | task as u64;
        let load = Arc::clone(&load);
        match period {
            Some(period) => {
                // Spread over the period, so the tasks' starts interleave.
                let offset = period.mul_f64(task as f64 / tasks as f64);
                tokio::spawn(pacer(load, phases.clone(), task, seed, period, offset))
            }
            None => tokio::spawn(client(load, phases.clone(), task, seed)),
        };
    }
    println!("@ready");
    let mut orders = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    while let Some(order) = orders.next_line().await? {
        let words: Vec<&str> = order.split_whitespace().collect();
        match words.as_slice() {
            ["warm", n] => {
                load.remaining.store(n.parse()?, Relaxed);
                phase.send_modify(|p| *p += 1);
                load.finished.wait().await;
                println!("@warm");
            }
            ["measure", n, cap] => {
                let mark = Mark::take(&load);
                load.remaining.store(n.parse()?, Relaxed);
                phase.send_modify(|p| *p += 1);
                let cap = Duration::from_secs_f64(cap.parse()?);
                if tokio::time::timeout(cap, load.finished.wait())
                    .await
                    .is_err()
                {
                    load.stop.store(true, Relaxed);
                    load.finished.wait().await;
                }
                let report = mark.report(&load);
                println!("@report {}", serde_json::to_string(&report)?);
            }
            _ => anyhow::bail!("unknown order {order:?}"),
        }
    }
    Ok(())
}

/// The start of the measured period: the counters then (the latencies are
/// emptied instead).
struct Mark {
    at: Instant,
    cpu_us: u64,
    db_queries: u64,
    writes: u64,
    errors: u64,
    stats: BTreeMap<String, u64>,
}

impl Mark {
    fn take(load: &Load) -> Self {
        for histogram in &load.latencies {
            *lock(histogram) = Histogram::default();
        }
        Self {
            at: Instant::now(),
            cpu_us: cpu_us_now(),
            db_queries: load.db.queries(),
            writes: load.writes.load(Relaxed),
            errors: load.errors.load(Relaxed),
            stats: stats(&load.service),
        }
    }

    /// What happened since the mark.
    fn report(&self, load: &Load) -> ReplicaReport {
        let mut latencies = Histogram::default();
        for histogram in &load.latencies {
            latencies.merge(&lock(histogram));
        }
        let mut stats = stats(&load.service);
        for (name, after) in &mut stats {
            *after -= self.stats.get(name).copied().unwrap_or(0);
        }
        stats.retain(|_, n| *n > 0);
        ReplicaReport {
            requests: latencies.total(),
            writes: load.writes.load(Relaxed) - self.writes,
            errors: load.errors.load(Relaxed) - self.errors,
            first_error: lock(&load.first_error).clone(),
            db_queries: load.db.queries() - self.db_queries,
            cpu_us: cpu_us_now().saturating_sub(self.cpu_us),
            wall_us: micros(self.at.elapsed()),
            capped: load.stop.load(Relaxed),
            latencies: latencies.sparse(),
            stats,
        }
    }
}

/// Nanoseconds, saturated.
fn nanos(elapsed: Duration) -> u64 {
    u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// corral's counters by name (none for cache-aside).
fn stats(service: &Service) -> BTreeMap<String, u64> {
    let Service::Corral(cache) = service else {
        return BTreeMap::new();
    };
    let json = serde_json::to_value(cache.stats()).unwrap_or_default();
    let counters = json.as_object().into_iter().flatten();
    counters
        .filter_map(|(name, n)| Some((name.clone(), n.as_u64()?)))
        .collect()
}

/// One client task: each phase, requests back to back while the phase
/// has some left to start (and is not stopped), then the meeting at its end.
///
/// The task yields between requests, as a service's task does while it
/// waits for the next request on its socket: a request answered without
/// waiting (an L1 hit) would otherwise run the next one at once, and a
/// task whose requests all hit could keep a worker thread while the
/// replies other tasks wait for sit unread.
async fn client(load: Arc<Load>, mut phases: watch::Receiver<u64>, task: usize, seed: u64) {
    let mut rng = fastrand::Rng::with_seed(seed);
    while phases.changed().await.is_ok() {
        while load.remaining.fetch_sub(1, Relaxed) > 0 && !load.stop.load(Relaxed) {
            request(&load, task, &mut rng).await;
            tokio::task::yield_now().await;
        }
        load.finished.wait().await;
    }
}

/// One pacing task of the open loop: each phase, one request started
/// every `period` (first after `offset`), each a task of its own, while
/// the phase has some left to start (and is not stopped); then, once its
/// requests finished, the meeting at the phase's end.
async fn pacer(
    load: Arc<Load>,
    mut phases: watch::Receiver<u64>,
    task: usize,
    seed: u64,
    period: Duration,
    offset: Duration,
) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut running = tokio::task::JoinSet::new();
    while phases.changed().await.is_ok() {
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + offset, period);
        while load.remaining.fetch_sub(1, Relaxed) > 0 && !load.stop.load(Relaxed) {
            ticks.tick().await;
            let (id, write) = draw(&load, &mut rng);
            running.spawn(answer(Arc::clone(&load), task, id, write));
            while running.try_join_next().is_some() {}
        }
        while running.join_next().await.is_some() {}
        load.finished.wait().await;
    }
}

/// The user a request reads (or updates), and whether it updates it.
fn draw(load: &Load, rng: &mut fastrand::Rng) -> (u64, bool) {
    let id = load.zipf.draw(rng);
    let write = load.writes_share > 0.0 && rng.f64() < load.writes_share;
    (id, write)
}

/// [`request`] as a task of its own.
async fn answer(load: Arc<Load>, task: usize, id: u64, write: bool) {
    serve_one(&load, task, id, write).await;
}

/// One request: a read, or with the write share an update.
async fn request(load: &Load, task: usize, rng: &mut fastrand::Rng) {
    let (id, write) = draw(load, rng);
    serve_one(load, task, id, write).await;
}

/// Serves a read of user `id` (or, if `write`, an update), recording its
/// latency (or its error).
async fn serve_one(load: &Load, task: usize, id: u64, write: bool) {
    let started = Instant::now();
    let outcome = if write {
        load.writes.fetch_add(1, Relaxed);
        update(load, id).await
    } else {
        read(load, id).await.map(|user| {
            std::hint::black_box(user);
        })
    };
    match outcome {
        Ok(()) => lock(&load.latencies[task]).record(nanos(started.elapsed())),
        Err(e) => {
            load.errors.fetch_add(1, Relaxed);
            lock(&load.first_error).get_or_insert_with(|| format!("{e:#}"));
        }
    }
}

/// A read: the user through the cache, decoded.
async fn read(load: &Load, id: u64) -> anyhow::Result<User> {
    let json = match &load.service {
        Service::Corral(cache) => {
            let db = load.db.clone();
            let key = format!("user:{id}");
            cache
                .get_or_fill(&key, move || async move { db.user_json(id).await })
                .await?
        }
        Service::CacheAside(conn, ttl) => {
            let mut conn = conn.clone();
            let key = format!("svc:user:{id}");
            let cached: Option<String> = conn.get(&key).await?;
            match cached {
                Some(json) => json,
                None => {
                    let json = load.db.user_json(id).await?;
                    let _: () = conn.set_ex(&key, &json, ttl.as_secs().max(1)).await?;
                    json
                }
            }
        }
    };
    Ok(serde_json::from_str(&json)?)
}

/// A write: the row updated, then its key invalidated.
async fn update(load: &Load, id: u64) -> anyhow::Result<()> {
    load.db.update(id).await?;
    match &load.service {
        Service::Corral(cache) => cache.invalidate(&format!("user:{id}")).await?,
        Service::CacheAside(conn, _) => {
            let _: () = conn.clone().del(format!("svc:user:{id}")).await?;
        }
    }
    Ok(())
}

/// This process's user + system CPU so far, in microseconds.
fn cpu_us_now() -> u64 {
    cpu_micros("self") as u64
}

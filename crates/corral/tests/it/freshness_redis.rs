//! Freshness and failure policies across real OS processes sharing a real
//! Redis, with short real TTLs: stale-while-revalidate with one refresh
//! across processes, stand-down, the refresh limiter, eager refresh,
//! fail-safe (error, panic, hard timeout; throttled; never past its max),
//! soft timeout, negative and adaptive answers, invalidation winning over
//! grace, fail-safe and racing refreshes, and processes whose clocks are
//! minutes apart agreeing on what is fresh.
//!
//! Like `processes.rs`, the test binary re-runs itself as worker processes
//! (the ignored test `fresh_worker`), each configured by environment
//! variables and driven by lines `<tag> <json command>` on its stdin; it
//! answers each with a line `@<tag> <json>`. Fills count their calls in Redis
//! (`INCR`), and the age of an entry is read from Redis (`PTTL`), never from
//! a local clock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use corral::clock::{Clock, TokioClock};
use corral::{Answer, Cache, Cached, Error, Freshness, RedisConfig, RedisStore, Stats};
use corral_testkit::{RedisServer, Worker};
use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::watch;

/// The name of every cache here: processes share its keys in Redis.
const CACHE: &str = "fresh";

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

// ------------------------------------------------------------------ settings

/// The cache settings of one process, handed to a worker by environment.
#[derive(Debug, Clone, Copy)]
struct Config {
    ttl: Duration,
    grace: Duration,
    fail_safe: Duration,
    throttle: Duration,
    soft_timeout: Option<Duration>,
    eager: Option<f64>,
    fill_timeout: Duration,
    refresh_limit: usize,
    negative_ttl: Duration,
    /// How far this process's clock is set from everyone else's, in seconds.
    skew_secs: i64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            ttl: ms(300),
            grace: Duration::ZERO,
            fail_safe: Duration::ZERO,
            throttle: Duration::from_secs(30),
            soft_timeout: None,
            eager: None,
            fill_timeout: Duration::from_secs(10),
            refresh_limit: 16,
            negative_ttl: Duration::from_secs(60),
            skew_secs: 0,
        }
    }
}

const ENV_URL: &str = "CORRAL_FRESH_URL";
const ENV_TTL: &str = "CORRAL_FRESH_TTL_MS";
const ENV_GRACE: &str = "CORRAL_FRESH_GRACE_MS";
const ENV_FAIL_SAFE: &str = "CORRAL_FRESH_FAIL_SAFE_MS";
const ENV_THROTTLE: &str = "CORRAL_FRESH_THROTTLE_MS";
const ENV_SOFT: &str = "CORRAL_FRESH_SOFT_TIMEOUT_MS";
const ENV_EAGER: &str = "CORRAL_FRESH_EAGER";
const ENV_FILL_TIMEOUT: &str = "CORRAL_FRESH_FILL_TIMEOUT_MS";
const ENV_REFRESH_LIMIT: &str = "CORRAL_FRESH_REFRESH_LIMIT";
const ENV_NEGATIVE: &str = "CORRAL_FRESH_NEGATIVE_TTL_MS";
const ENV_SKEW: &str = "CORRAL_FRESH_SKEW_S";

impl Config {
    /// How long an entry filled with these settings stays in Redis: its TTL
    /// plus the longer of the grace period and the fail-safe maximum.
    fn physical(&self) -> Duration {
        self.ttl + self.grace.max(self.fail_safe)
    }

    fn env(&self, url: String) -> Vec<(&'static str, String)> {
        let millis = |d: Duration| d.as_millis().to_string();
        vec![
            (ENV_URL, url),
            (ENV_TTL, millis(self.ttl)),
            (ENV_GRACE, millis(self.grace)),
            (ENV_FAIL_SAFE, millis(self.fail_safe)),
            (ENV_THROTTLE, millis(self.throttle)),
            (ENV_SOFT, self.soft_timeout.map(millis).unwrap_or_default()),
            (
                ENV_EAGER,
                self.eager.map(|f| f.to_string()).unwrap_or_default(),
            ),
            (ENV_FILL_TIMEOUT, millis(self.fill_timeout)),
            (ENV_REFRESH_LIMIT, self.refresh_limit.to_string()),
            (ENV_NEGATIVE, millis(self.negative_ttl)),
            (ENV_SKEW, self.skew_secs.to_string()),
        ]
    }

    /// The worker's URL and settings.
    fn from_env() -> (String, Self) {
        let var =
            |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("the worker needs {name}"));
        let millis = |name: &str| ms(var(name).parse().expect("milliseconds"));
        let optional = |name: &str| Some(var(name)).filter(|v| !v.is_empty());
        let config = Self {
            ttl: millis(ENV_TTL),
            grace: millis(ENV_GRACE),
            fail_safe: millis(ENV_FAIL_SAFE),
            throttle: millis(ENV_THROTTLE),
            soft_timeout: optional(ENV_SOFT).map(|v| ms(v.parse().expect("milliseconds"))),
            eager: optional(ENV_EAGER).map(|v| v.parse().expect("a fraction")),
            fill_timeout: millis(ENV_FILL_TIMEOUT),
            refresh_limit: var(ENV_REFRESH_LIMIT).parse().expect("a limit"),
            negative_ttl: millis(ENV_NEGATIVE),
            skew_secs: var(ENV_SKEW).parse().expect("seconds"),
        };
        (var(ENV_URL), config)
    }

    /// This process's cache on its own `RedisStore`.
    async fn build(&self, url: &str, clock: SkewedClock) -> Cache<String> {
        let store = RedisStore::connect(url, RedisConfig::default())
            .await
            .expect("connect to redis");
        // Freshness here is the store's, judged by Redis' clock in every
        // process: no L1 copy judged by a process's own clock.
        let mut builder = Cache::<String>::builder(CACHE)
            .store(store)
            .l1(false)
            .ttl(self.ttl)
            .grace(self.grace)
            .fail_safe(self.fail_safe)
            .fail_safe_throttle(self.throttle)
            .fill_timeout(self.fill_timeout)
            .refresh_limit(self.refresh_limit)
            .negative_ttl(self.negative_ttl)
            .clock(clock);
        builder = match self.soft_timeout {
            Some(soft) => builder.soft_timeout(soft),
            None => builder.no_soft_timeout(),
        };
        if let Some(fraction) = self.eager {
            builder = builder.eager_refresh(fraction);
        }
        builder.build().expect("cache settings")
    }
}

/// A clock set `skew` away from this host's: it reads like wall-clock
/// milliseconds since the Unix epoch, shifted by the skew, and advances with
/// tokio's monotonic clock (so it never goes backwards).
#[derive(Debug, Clone)]
struct SkewedClock {
    base: Arc<TokioClock>,
    origin: u64,
}

impl SkewedClock {
    fn new(skew_secs: i64) -> Self {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("the wall clock is after 1970");
        let wall = u64::try_from(wall.as_millis()).expect("milliseconds fit u64");
        Self {
            base: Arc::new(TokioClock::new()),
            origin: wall.saturating_add_signed(skew_secs.saturating_mul(1_000)),
        }
    }
}

impl Clock for SkewedClock {
    fn now_millis(&self) -> u64 {
        self.origin.saturating_add(self.base.now_millis())
    }
}

// ------------------------------------------------------------------ protocol

/// One command to a worker.
#[derive(Debug, Serialize, Deserialize)]
enum Command {
    /// `callers` concurrent calls of `key`, each bringing `fill`.
    Call {
        key: String,
        mode: Mode,
        callers: usize,
        fill: Fill,
    },
    Lookup {
        key: String,
    },
    Get {
        key: String,
    },
    Invalidate {
        key: String,
    },
    Stats,
    /// Answers once no flight (fill or refresh) is in progress.
    Idle,
    /// Opens a gate fills may wait on.
    Open {
        gate: String,
    },
    /// The worker's clock reading.
    Clock,
}

/// Which read-through call a caller makes.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
enum Mode {
    /// `get_or_fill` with a fill answering an `Answer`.
    Fetch,
    /// `get_or_fill` with a fill answering `Option<V>`.
    Optional,
    /// `get_or_fill`.
    GetOrFill,
}

/// What the source answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum Source {
    Value(String),
    NotFound,
    Error,
    Panic,
    Hang,
}

/// A fill: `INCR`s `counter` in Redis when called, waits for its gate and its
/// delay, then answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Fill {
    source: Source,
    counter: String,
    delay_us: u64,
    gate: Option<String>,
    ttl_ms: Option<u64>,
    dont_cache: bool,
}

impl Fill {
    fn of(source: Source) -> Self {
        Self {
            source,
            counter: "fills".to_owned(),
            delay_us: 0,
            gate: None,
            ttl_ms: None,
            dont_cache: false,
        }
    }

    fn value(value: &str) -> Self {
        Self::of(Source::Value(value.to_owned()))
    }

    fn error() -> Self {
        Self::of(Source::Error)
    }

    fn counter(mut self, counter: &str) -> Self {
        counter.clone_into(&mut self.counter);
        self
    }

    fn delay(mut self, delay: Duration) -> Self {
        self.delay_us = micros(delay);
        self
    }

    fn gate(mut self, gate: &str) -> Self {
        self.gate = Some(gate.to_owned());
        self
    }

    fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl_ms = Some(u64::try_from(ttl.as_millis()).expect("ttl in ms"));
        self
    }

    fn dont_cache(mut self) -> Self {
        self.dont_cache = true;
        self
    }
}

/// A serializable [`Freshness`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum Is {
    Fresh,
    Stale,
    FailSafe,
}

impl From<Freshness> for Is {
    fn from(freshness: Freshness) -> Self {
        match freshness {
            Freshness::Fresh => Self::Fresh,
            Freshness::Stale => Self::Stale,
            Freshness::FailSafe => Self::FailSafe,
            other => panic!("a freshness this test does not know: {other:?}"),
        }
    }
}

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum Failure {
    Fill,
    Panicked,
    Timeout,
    NotFound,
    Other(String),
}

/// What one caller got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum Got {
    /// From `get_or_fill` with a fill answering an `Answer`: the value (`None`: not found) and its freshness.
    Fetched(Option<String>, Is),
    /// From `get_or_fill` (a fill answering `V` or `Option<V>`).
    Value(Option<String>),
    Failed(Failure),
}

fn fetched(value: &str, is: Is) -> Got {
    Got::Fetched(Some(value.to_owned()), is)
}

/// One caller's result and how long its call took.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Served {
    got: Got,
    micros: u64,
}

/// A serializable [`Cached`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum Looked {
    Value(String, Is),
    NotFound(Is),
    Miss,
}

impl From<Cached<String>> for Looked {
    fn from(cached: Cached<String>) -> Self {
        match cached {
            Cached::Value { value, freshness } => Self::Value(value, freshness.into()),
            Cached::NotFound { freshness } => Self::NotFound(freshness.into()),
            Cached::Miss => Self::Miss,
            other => panic!("an answer this test does not know: {other:?}"),
        }
    }
}

fn value(value: &str, is: Is) -> Looked {
    Looked::Value(value.to_owned(), is)
}

/// The counters the tests look at.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
struct Counts {
    fills: u64,
    coalesced: u64,
    commits: u64,
    commits_refused: u64,
    refreshes: u64,
    refreshes_stood_down: u64,
    refreshes_skipped: u64,
    stale_hits: u64,
    fail_safe_hits: u64,
    soft_timeouts: u64,
    fill_errors: u64,
    fill_panics: u64,
    fill_timeouts: u64,
}

impl From<Stats> for Counts {
    fn from(stats: Stats) -> Self {
        Self {
            fills: stats.fills,
            coalesced: stats.coalesced,
            commits: stats.commits,
            commits_refused: stats.commits_refused,
            refreshes: stats.refreshes,
            refreshes_stood_down: stats.refreshes_stood_down,
            refreshes_skipped: stats.refreshes_skipped,
            stale_hits: stats.stale_hits,
            fail_safe_hits: stats.fail_safe_hits,
            soft_timeouts: stats.soft_timeouts,
            fill_errors: stats.fill_errors,
            fill_panics: stats.fill_panics,
            fill_timeouts: stats.fill_timeouts,
        }
    }
}

// --------------------------------------------------------------- worker side

/// The source's error.
#[derive(Debug)]
struct SourceDown;

impl std::fmt::Display for SourceDown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the source is down")
    }
}

impl std::error::Error for SourceDown {}

/// The payload of a fill that panics on purpose.
const DELIBERATE_PANIC: &str = "the source exploded (a fill panicking on purpose)";

/// Gates fills wait on, opened by the `Open` command.
#[derive(Clone, Default)]
struct Gates(Arc<Mutex<HashMap<String, watch::Sender<bool>>>>);

impl Gates {
    fn get(&self, name: &str) -> watch::Sender<bool> {
        self.0
            .lock()
            .expect("gates lock")
            .entry(name.to_owned())
            .or_insert_with(|| watch::channel(false).0)
            .clone()
    }
}

#[derive(Clone)]
struct Ctx {
    cache: Cache<String>,
    counters: MultiplexedConnection,
    gates: Gates,
    clock: SkewedClock,
}

impl Fill {
    /// The source: counts the call, waits for the gate and the delay, answers.
    async fn run(
        self,
        mut counters: MultiplexedConnection,
        gates: Gates,
    ) -> Result<Option<String>, SourceDown> {
        let _: u64 = counters
            .incr(&self.counter, 1)
            .await
            .expect("INCR the fill counter");
        if let Some(gate) = &self.gate {
            let mut open = gates.get(gate).subscribe();
            let _ = open.wait_for(|open| *open).await;
        }
        if self.delay_us > 0 {
            tokio::time::sleep(Duration::from_micros(self.delay_us)).await;
        }
        match self.source {
            Source::Value(value) => Ok(Some(value)),
            Source::NotFound => Ok(None),
            Source::Error => Err(SourceDown),
            Source::Panic => std::panic::panic_any(DELIBERATE_PANIC),
            Source::Hang => std::future::pending().await,
        }
    }
}

fn failure(error: &Error<SourceDown>) -> Failure {
    match error {
        Error::Fill(_) => Failure::Fill,
        Error::FillPanicked { .. } => Failure::Panicked,
        Error::Timeout { .. } => Failure::Timeout,
        Error::NotFound => Failure::NotFound,
        other => Failure::Other(format!("{other:?}")),
    }
}

async fn call_once(ctx: &Ctx, key: &str, mode: Mode, fill: Fill) -> Got {
    let ttl = fill.ttl_ms.map(ms);
    let dont_cache = fill.dont_cache;
    let (counters, gates) = (ctx.counters.clone(), ctx.gates.clone());
    let source = move || fill.run(counters, gates);
    match mode {
        Mode::Fetch => {
            let answered = move || async move {
                let mut answer = Answer::from_option(source().await?);
                if let Some(ttl) = ttl {
                    answer = answer.ttl(ttl);
                }
                if dont_cache {
                    answer = answer.dont_cache();
                }
                Ok(answer)
            };
            match ctx.cache.get_or_fill_answer(key, answered).await {
                Ok(fetched) => Got::Fetched(fetched.value, fetched.freshness.into()),
                Err(error) => Got::Failed(failure(&error)),
            }
        }
        Mode::Optional => match ctx.cache.get_or_fill_option(key, source).await {
            Ok(value) => Got::Value(value),
            Err(error) => Got::Failed(failure(&error)),
        },
        Mode::GetOrFill => {
            let required = move || async move { source().await?.ok_or(SourceDown) };
            match ctx.cache.get_or_fill(key, required).await {
                Ok(value) => Got::Value(Some(value)),
                Err(error) => Got::Failed(failure(&error)),
            }
        }
    }
}

fn json<T: Serialize>(answer: &T) -> String {
    serde_json::to_string(answer).expect("answer json")
}

async fn run_command(ctx: &Ctx, command: Command) -> String {
    match command {
        Command::Call {
            key,
            mode,
            callers,
            fill,
        } => {
            let tasks: Vec<_> = (0..callers)
                .map(|_| {
                    let (ctx, key, fill) = (ctx.clone(), key.clone(), fill.clone());
                    tokio::spawn(async move {
                        let started = Instant::now();
                        let got = call_once(&ctx, &key, mode, fill).await;
                        Served {
                            got,
                            micros: micros(started.elapsed()),
                        }
                    })
                })
                .collect();
            let mut served = Vec::with_capacity(callers);
            for task in tasks {
                served.push(task.await.expect("caller task"));
            }
            json(&served)
        }
        Command::Lookup { key } => {
            let looked: Looked = ctx.cache.peek_entry(&key).await.expect("lookup").into();
            json(&looked)
        }
        Command::Get { key } => json(&ctx.cache.peek(&key).await.expect("get")),
        Command::Invalidate { key } => {
            ctx.cache.invalidate(&key).await.expect("invalidate");
            json(&true)
        }
        Command::Stats => json(&Counts::from(ctx.cache.stats())),
        Command::Idle => {
            let deadline = Instant::now() + Duration::from_secs(20);
            while ctx.cache.flights_in_progress() > 0 && Instant::now() < deadline {
                tokio::time::sleep(ms(1)).await;
            }
            json(&(ctx.cache.flights_in_progress() == 0))
        }
        Command::Open { gate } => {
            ctx.gates.get(&gate).send_replace(true);
            json(&true)
        }
        Command::Clock => json(&ctx.clock.now_millis()),
    }
}

/// The worker process: builds its cache from the environment, says
/// `@ready`, then runs each command from stdin on its own task.
#[test]
#[ignore = "a worker process for the cross-process freshness tests, started by them"]
fn fresh_worker() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    // Deliberate panics are not reported: printing them (with a backtrace,
    // under RUST_BACKTRACE) would make the panicking fill slow and noisy.
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if info.payload().downcast_ref::<&str>() != Some(&DELIBERATE_PANIC) {
            report(info);
        }
    }));
    runtime.block_on(async {
        let (url, config) = Config::from_env();
        let clock = SkewedClock::new(config.skew_secs);
        let cache = config.build(&url, clock.clone()).await;
        let counters = redis::Client::open(url)
            .expect("client")
            .get_multiplexed_async_connection()
            .await
            .expect("connection");
        let ctx = Ctx {
            cache,
            counters,
            gates: Gates::default(),
            clock,
        };
        println!("@ready");
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let (tag, command) = line.split_once(' ').expect("<tag> <command>");
            let command: Command = serde_json::from_str(command).expect("command json");
            let (ctx, tag) = (ctx.clone(), tag.to_owned());
            tokio::spawn(async move {
                let answer = run_command(&ctx, command).await;
                println!("@{tag} {answer}");
            });
        }
    });
}

// ----------------------------------------------------------------- test side

/// The Redis key holding the value of `key` (see `RedisStore`'s key layout).
fn value_key(key: &str) -> String {
    corral::RedisStore::keys_of(&corral::store::StoreKey::new(
        format!("{CACHE}:v0").as_str(),
        key,
    ))
    .value
}

fn give_up_at(deadline: Instant, what: &str) {
    assert!(Instant::now() < deadline, "gave up waiting until {what}");
}

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(10)
}

/// A Redis server, a connection to it, and the processes sharing it.
struct Lab {
    server: RedisServer,
    conn: MultiplexedConnection,
}

impl Lab {
    async fn start() -> Self {
        let server = RedisServer::start();
        let conn = redis::Client::open(server.url())
            .expect("client")
            .get_multiplexed_async_connection()
            .await
            .expect("connection");
        Self { server, conn }
    }

    /// A cache of this test process with its own `RedisStore`.
    async fn cache(&self, config: Config) -> Cache<String> {
        config
            .build(&self.server.url(), SkewedClock::new(config.skew_secs))
            .await
    }

    async fn worker(&self, config: Config) -> Proc {
        let worker = Worker::start(
            &crate::support::test_name(module_path!(), "fresh_worker"),
            &config.env(self.server.url()),
        )
        .await;
        Proc {
            worker,
            next: 0,
            early: HashMap::new(),
        }
    }

    async fn counter(&self, name: &str) -> u64 {
        let mut conn = self.conn.clone();
        conn.get::<_, Option<u64>>(name)
            .await
            .expect("GET")
            .unwrap_or(0)
    }

    async fn wait_counter(&self, name: &str, at_least: u64) {
        let deadline = soon();
        while self.counter(name).await < at_least {
            give_up_at(deadline, &format!("{name} reaches {at_least}"));
            tokio::time::sleep(ms(1)).await;
        }
    }

    /// The remaining time to live of `key`'s value in Redis (`PTTL`: −2 when
    /// absent).
    async fn pttl(&self, key: &str) -> i64 {
        let mut conn = self.conn.clone();
        conn.pttl(value_key(key)).await.expect("PTTL")
    }

    /// The age of `key`'s value by Redis's clock: its physical TTL minus its
    /// remaining `PTTL` (`None` when absent).
    async fn age(&self, key: &str, physical: Duration) -> Option<Duration> {
        let remaining = u64::try_from(self.pttl(key).await).ok()?;
        Some(physical.saturating_sub(ms(remaining)))
    }

    /// Waits until `key`'s value is at least `age` old by Redis's clock.
    async fn wait_age(&self, key: &str, physical: Duration, age: Duration) {
        let deadline = soon();
        loop {
            match self.age(key, physical).await {
                Some(now) if now >= age => return,
                Some(_) => {}
                None => panic!("{key} vanished before it was {age:?} old"),
            }
            give_up_at(deadline, &format!("{key} is {age:?} old"));
            tokio::time::sleep(ms(2)).await;
        }
    }

    /// Waits until `key`'s value is physically gone from Redis.
    async fn wait_gone(&self, key: &str) {
        let deadline = soon();
        while self.pttl(key).await != -2 {
            give_up_at(deadline, &format!("{key} is gone"));
            tokio::time::sleep(ms(2)).await;
        }
    }
}

/// A worker process and its answers not yet asked for.
struct Proc {
    worker: Worker,
    next: u64,
    early: HashMap<String, String>,
}

impl Proc {
    /// Sends `command`; returns the tag its answer will carry.
    async fn send(&mut self, command: &Command) -> String {
        self.next += 1;
        let tag = format!("t{}", self.next);
        let line = format!("{tag} {}", serde_json::to_string(command).expect("json"));
        self.worker.send(&line).await;
        tag
    }

    /// The answer tagged `tag`, keeping others that arrive first.
    async fn answer<T: DeserializeOwned>(&mut self, tag: &str) -> T {
        let json = loop {
            if let Some(json) = self.early.remove(tag) {
                break json;
            }
            let line = self.worker.expect("@").await;
            let (got, json) = line.split_once(' ').unwrap_or((line.as_str(), ""));
            if got == tag {
                break json.to_owned();
            }
            self.early.insert(got.to_owned(), json.to_owned());
        };
        serde_json::from_str(&json).unwrap_or_else(|e| panic!("answer {tag} {json:?}: {e}"))
    }

    async fn ask<T: DeserializeOwned>(&mut self, command: &Command) -> T {
        let tag = self.send(command).await;
        self.answer(&tag).await
    }

    fn call_command(key: &str, mode: Mode, callers: usize, fill: &Fill) -> Command {
        Command::Call {
            key: key.to_owned(),
            mode,
            callers,
            fill: fill.clone(),
        }
    }

    async fn call(&mut self, key: &str, mode: Mode, callers: usize, fill: &Fill) -> Vec<Served> {
        self.ask(&Self::call_command(key, mode, callers, fill))
            .await
    }

    /// One `fetch` of `key`.
    async fn fetch(&mut self, key: &str, fill: &Fill) -> Got {
        self.fetch_timed(key, fill).await.got
    }

    async fn fetch_timed(&mut self, key: &str, fill: &Fill) -> Served {
        let mut served = self.call(key, Mode::Fetch, 1, fill).await;
        served.pop().expect("one caller")
    }

    async fn peek_entry(&mut self, key: &str) -> Looked {
        self.ask(&Command::Lookup {
            key: key.to_owned(),
        })
        .await
    }

    async fn peek(&mut self, key: &str) -> Option<String> {
        self.ask(&Command::Get {
            key: key.to_owned(),
        })
        .await
    }

    async fn invalidate(&mut self, key: &str) {
        let done: bool = self
            .ask(&Command::Invalidate {
                key: key.to_owned(),
            })
            .await;
        assert!(done);
    }

    async fn stats(&mut self) -> Counts {
        self.ask(&Command::Stats).await
    }

    /// Waits until the worker's flights (fills and refreshes) have retired.
    async fn idle(&mut self) {
        let idle: bool = self.ask(&Command::Idle).await;
        assert!(idle, "the worker's flights did not retire");
    }

    async fn open(&mut self, gate: &str) {
        let opened: bool = self
            .ask(&Command::Open {
                gate: gate.to_owned(),
            })
            .await;
        assert!(opened);
    }

    async fn clock(&mut self) -> u64 {
        self.ask(&Command::Clock).await
    }
}

async fn peek_entry(cache: &Cache<String>, key: &str) -> Looked {
    cache.peek_entry(key).await.expect("peek_entry").into()
}

/// Sleeps until an entry written now with `config` is stale.
async fn sleep_past_ttl(config: &Config) {
    tokio::time::sleep(config.ttl + ms(50)).await;
}

// --------------------------------------------------------------------- tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_readers_in_two_processes_are_served_at_once_while_one_refresh_runs() {
    const CALLERS: usize = 100;
    let refresh_takes = ms(300);
    let lab = Lab::start().await;
    let config = Config {
        grace: Duration::from_secs(30),
        ..Config::default()
    };
    let here = lab.cache(config).await;
    let (a, b) = tokio::join!(lab.worker(config), lab.worker(config));
    let mut procs = [a, b];
    here.set("hot", "old".into()).await.expect("set");
    sleep_past_ttl(&config).await;
    assert_eq!(peek_entry(&here, "hot").await, value("old", Is::Stale));

    let refresh = Fill::value("new").delay(refresh_takes);
    let command = Proc::call_command("hot", Mode::Fetch, CALLERS, &refresh);
    let mut tags = Vec::new();
    for proc in &mut procs {
        tags.push(proc.send(&command).await);
    }
    let mut slowest = 0;
    for (proc, tag) in procs.iter_mut().zip(&tags) {
        let served: Vec<Served> = proc.answer(tag).await;
        assert_eq!(served.len(), CALLERS);
        for caller in served {
            assert_eq!(caller.got, fetched("old", Is::Stale));
            slowest = slowest.max(caller.micros);
        }
    }
    eprintln!(
        "slowest of {} stale readers: {slowest} µs (the refresh takes {refresh_takes:?})",
        2 * CALLERS
    );
    assert!(
        Duration::from_micros(slowest) < refresh_takes / 3,
        "a stale reader waited {slowest} µs for a {refresh_takes:?} refresh"
    );

    for proc in &mut procs {
        proc.idle().await;
    }
    assert_eq!(lab.counter("fills").await, 1, "exactly one refresh ran");
    for proc in &mut procs {
        assert_eq!(
            proc.fetch("hot", &Fill::value("unused")).await,
            fetched("new", Is::Fresh)
        );
    }
    assert_eq!(peek_entry(&here, "hot").await, value("new", Is::Fresh));
    assert_eq!(lab.counter("fills").await, 1);
    let mut refreshes = 0;
    for proc in &mut procs {
        refreshes += proc.stats().await.refreshes;
    }
    assert_eq!(refreshes, 1, "refreshes summed over the processes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_stands_down_while_another_process_holds_the_lease() {
    let lab = Lab::start().await;
    let config = Config {
        grace: Duration::from_secs(30),
        ..Config::default()
    };
    let here = lab.cache(config).await;
    let (mut a, mut b) = tokio::join!(lab.worker(config), lab.worker(config));
    here.set("k", "old".into()).await.expect("set");
    sleep_past_ttl(&config).await;

    // A serves stale and refreshes; its refresh holds the lease until the
    // gate opens.
    assert_eq!(
        a.fetch("k", &Fill::value("new").gate("g")).await,
        fetched("old", Is::Stale)
    );
    lab.wait_counter("fills", 1).await;

    // B's readers get the stale value; its refresh finds the lease held.
    let served = b.call("k", Mode::Fetch, 20, &Fill::value("other")).await;
    assert!(served.iter().all(|s| s.got == fetched("old", Is::Stale)));
    b.idle().await;
    let b_stats = b.stats().await;
    assert!(b_stats.refreshes_stood_down >= 1, "{b_stats:?}");
    assert_eq!(b_stats.refreshes, 0, "{b_stats:?}");
    assert_eq!(b_stats.fills, 0, "{b_stats:?}");
    assert_eq!(lab.counter("fills").await, 1);

    a.open("g").await;
    a.idle().await;
    assert_eq!(a.stats().await.refreshes, 1);
    assert_eq!(
        b.fetch("k", &Fill::value("other")).await,
        fetched("new", Is::Fresh)
    );
    assert_eq!(lab.counter("fills").await, 1, "one refresh in all");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_refresh_limiter_skips_and_a_later_read_retries() {
    let lab = Lab::start().await;
    let config = Config {
        grace: Duration::from_secs(30),
        refresh_limit: 1,
        ..Config::default()
    };
    let here = lab.cache(config).await;
    let mut p = lab.worker(config).await;
    for key in ["k1", "k2"] {
        here.set(key, "old".into()).await.expect("set");
    }
    sleep_past_ttl(&config).await;

    assert_eq!(
        p.fetch("k1", &Fill::value("new1").gate("g")).await,
        fetched("old", Is::Stale)
    );
    lab.wait_counter("fills", 1).await;
    // The one permit is held by k1's refresh: k2's is skipped.
    assert_eq!(
        p.fetch("k2", &Fill::value("new2")).await,
        fetched("old", Is::Stale)
    );
    let deadline = soon();
    while p.stats().await.refreshes_skipped < 1 {
        give_up_at(deadline, "k2's refresh is skipped");
    }
    p.open("g").await;
    p.idle().await;
    assert_eq!(lab.counter("fills").await, 1, "k2 was not refreshed");
    assert_eq!(peek_entry(&here, "k1").await, value("new1", Is::Fresh));
    assert_eq!(peek_entry(&here, "k2").await, value("old", Is::Stale));

    // A later read of k2 refreshes it.
    assert_eq!(
        p.fetch("k2", &Fill::value("new2")).await,
        fetched("old", Is::Stale)
    );
    p.idle().await;
    assert_eq!(lab.counter("fills").await, 2, "the later read refreshed");
    assert_eq!(peek_entry(&here, "k2").await, value("new2", Is::Fresh));
    let stats = p.stats().await;
    assert_eq!(
        (stats.refreshes, stats.refreshes_skipped),
        (2, 1),
        "{stats:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eager_refresh_starts_before_the_entry_goes_stale_judged_by_redis_pttl() {
    let lab = Lab::start().await;
    let config = Config {
        ttl: ms(1_000),
        eager: Some(0.5),
        ..Config::default()
    };
    let (mut a, mut b) = tokio::join!(lab.worker(config), lab.worker(config));
    assert_eq!(
        a.fetch("k", &Fill::value("old")).await,
        fetched("old", Is::Fresh)
    );
    assert_eq!(lab.counter("fills").await, 1);

    // Before half the TTL (by Redis's PTTL): no refresh, in a process that
    // never saw the entry written.
    let age = lab.age("k", config.physical()).await.expect("present");
    assert!(age < ms(400), "{age:?}");
    assert_eq!(
        b.fetch("k", &Fill::value("new")).await,
        fetched("old", Is::Fresh)
    );
    b.idle().await;
    assert_eq!(lab.counter("fills").await, 1, "not due before half the TTL");

    // Past half the TTL, still fresh: the read is served at once and starts
    // the one refresh.
    lab.wait_age("k", config.physical(), ms(600)).await;
    assert_eq!(
        b.fetch("k", &Fill::value("new")).await,
        fetched("old", Is::Fresh)
    );
    b.idle().await;
    let age_after_refresh = lab.age("k", config.physical()).await.expect("present");
    assert_eq!(lab.counter("fills").await, 2);
    assert_eq!(b.stats().await.refreshes, 1);
    assert_eq!(a.peek_entry("k").await, value("new", Is::Fresh));
    // The refreshed entry lives a full TTL from its refresh.
    assert!(
        age_after_refresh < ms(300),
        "the refresh rewrote the entry: age {age_after_refresh:?}"
    );
    assert_eq!(a.stats().await.refreshes, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_safe_across_processes_serves_the_old_value_throttles_and_never_outlives_its_max() {
    let lab = Lab::start().await;
    let config = Config {
        fail_safe: ms(2_000),
        throttle: ms(500),
        fill_timeout: ms(300),
        ..Config::default()
    };
    let here = lab.cache(config).await;
    let (mut a, mut b) = tokio::join!(lab.worker(config), lab.worker(config));
    // "k" meets errors (fast failures); "p" a panic, "h" a fill that hangs.
    for key in ["k", "p", "h"] {
        assert_eq!(
            a.fetch(key, &Fill::value("kept")).await,
            fetched("kept", Is::Fresh)
        );
    }
    let filled = Instant::now();
    sleep_past_ttl(&config).await;
    assert_eq!(
        peek_entry(&here, "k").await,
        Looked::Miss,
        "only fail-safe now"
    );

    // An erroring fill in B: the old value, as fail-safe.
    let remaining_before = lab.pttl("k").await;
    assert_eq!(
        b.fetch("k", &Fill::error()).await,
        fetched("kept", Is::FailSafe)
    );
    assert_eq!(lab.counter("fills").await, 4);
    let remaining_after = lab.pttl("k").await;
    assert!(
        0 < remaining_after && remaining_after <= remaining_before,
        "the re-cache never extends the entry: {remaining_before} ms, then {remaining_after} ms"
    );
    // Within the throttle window, other processes read it without calling
    // the source.
    assert_eq!(peek_entry(&here, "k").await, value("kept", Is::FailSafe));
    assert_eq!(
        a.fetch("k", &Fill::error()).await,
        fetched("kept", Is::FailSafe)
    );
    assert_eq!(lab.counter("fills").await, 4, "throttled: no source call");

    // After the throttle window the source is called again: an error in A,
    // a panicking fill in B, and a fill that passes the hard timeout in A.
    tokio::time::sleep(config.throttle + ms(50)).await;
    let (error, panic, hang) = (
        Fill::error(),
        Fill::of(Source::Panic),
        Fill::of(Source::Hang),
    );
    let ((errored, hung), panicked) = tokio::join!(
        async { (a.fetch("k", &error).await, a.fetch_timed("h", &hang).await) },
        b.fetch("p", &panic),
    );
    assert_eq!(errored, fetched("kept", Is::FailSafe));
    assert_eq!(panicked, fetched("kept", Is::FailSafe));
    assert_eq!(hung.got, fetched("kept", Is::FailSafe));
    assert!(
        Duration::from_micros(hung.micros) >= config.fill_timeout,
        "served after the hard timeout: {} µs",
        hung.micros
    );
    assert_eq!(lab.counter("fills").await, 7);

    // Never past TTL + fail_safe_max: then the error shows. ("p" and "h"
    // are not timed: see `a_slow_failure_does_not_extend_the_fail_safe_entry`.)
    lab.wait_gone("k").await;
    let gone_after = filled.elapsed();
    assert!(
        gone_after < config.physical() + ms(150),
        "kept {gone_after:?}, past TTL + fail-safe max {:?}",
        config.physical()
    );
    assert_eq!(
        b.fetch("k", &Fill::error()).await,
        Got::Failed(Failure::Fill)
    );
    let (a_stats, b_stats) = (a.stats().await, b.stats().await);
    assert_eq!(
        (
            a_stats.fail_safe_hits + b_stats.fail_safe_hits,
            a_stats.fill_errors + b_stats.fill_errors,
            a_stats.fill_panics + b_stats.fill_panics,
            a_stats.fill_timeouts + b_stats.fill_timeouts,
        ),
        (5, 3, 1, 1),
        "{a_stats:?} {b_stats:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_failure_does_not_extend_the_fail_safe_entry() {
    let lab = Lab::start().await;
    let config = Config {
        fail_safe: ms(2_000),
        throttle: ms(500),
        fill_timeout: ms(400),
        ..Config::default()
    };
    let here = lab.cache(config).await;
    let mut p = lab.worker(config).await;
    for key in ["slow-error", "hang"] {
        here.set(key, "kept".into()).await.expect("set");
    }
    sleep_past_ttl(&config).await;
    let slow_error = Fill::error().delay(ms(300));
    let hang = Fill::of(Source::Hang);
    for (key, fill) in [("slow-error", slow_error), ("hang", hang)] {
        let before = lab.pttl(key).await;
        let served = p.fetch_timed(key, &fill).await;
        let after = lab.pttl(key).await;
        assert_eq!(served.got, fetched("kept", Is::FailSafe), "{key}");
        let took = i64::try_from(served.micros / 1_000).expect("ms");
        assert!(
            after <= before - took + 20,
            "{key}: {before} ms to live before a failing fill of {took} ms, \
             {after} ms after its fail-safe re-cache: extended by {} ms",
            after - (before - took)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_soft_timeout_serves_stale_and_the_background_fill_lands_for_every_process() {
    let lab = Lab::start().await;
    let soft = ms(100);
    let fill_takes = ms(600);
    let config = Config {
        fail_safe: Duration::from_secs(10),
        soft_timeout: Some(soft),
        fill_timeout: Duration::from_secs(5),
        ..Config::default()
    };
    let here = lab.cache(config).await;
    let (mut a, mut b) = tokio::join!(lab.worker(config), lab.worker(config));
    here.set("k", "old".into()).await.expect("set");
    sleep_past_ttl(&config).await;

    let started = Instant::now();
    let slow = a
        .fetch_timed("k", &Fill::value("new").delay(fill_takes))
        .await;
    assert_eq!(slow.got, fetched("old", Is::Stale));
    let waited = Duration::from_micros(slow.micros);
    assert!(
        soft <= waited && waited < fill_takes - ms(200),
        "stale served after {waited:?} (soft timeout {soft:?}, fill {fill_takes:?})"
    );
    assert_eq!(lab.counter("fills").await, 1);
    assert_eq!(
        peek_entry(&here, "k").await,
        Looked::Miss,
        "nothing servable until the fill lands"
    );
    // Another process, finding the lease held, also gets the stale value at
    // its soft timeout and calls no source.
    let other = b.fetch_timed("k", &Fill::value("other")).await;
    assert_eq!(other.got, fetched("old", Is::Stale));
    assert!(Duration::from_micros(other.micros) < fill_takes - ms(200));

    // The background fill lands, visible from every process.
    let deadline = soon();
    while peek_entry(&here, "k").await != value("new", Is::Fresh) {
        give_up_at(deadline, "the background fill lands");
        tokio::time::sleep(ms(5)).await;
    }
    assert!(started.elapsed() >= fill_takes);
    assert_eq!(b.peek_entry("k").await, value("new", Is::Fresh));
    assert_eq!(lab.counter("fills").await, 1);
    a.idle().await;
    assert_eq!(a.stats().await.soft_timeouts, 1);
    assert_eq!(b.stats().await.soft_timeouts, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_found_and_adaptive_answers_are_cached_as_the_fill_says() {
    let lab = Lab::start().await;
    let negative_ttl = ms(400);
    let config = Config {
        ttl: Duration::from_secs(60),
        negative_ttl,
        ..Config::default()
    };
    let here = lab.cache(config).await;
    let (mut a, mut b) = tokio::join!(lab.worker(config), lab.worker(config));

    // Negative caching across processes.
    let missing = Fill::of(Source::NotFound).counter("missing");
    assert_eq!(
        a.call("missing", Mode::Optional, 1, &missing).await[0].got,
        Got::Value(None)
    );
    assert_eq!(
        b.call("missing", Mode::Optional, 1, &missing).await[0].got,
        Got::Value(None)
    );
    assert_eq!(
        lab.counter("missing").await,
        1,
        "the negative answer is cached"
    );
    assert_eq!(b.peek_entry("missing").await, Looked::NotFound(Is::Fresh));
    assert_eq!(b.peek_entry("never-filled").await, Looked::Miss);
    assert_eq!(b.peek("missing").await, None);
    assert_eq!(
        a.call(
            "missing",
            Mode::GetOrFill,
            1,
            &Fill::value("x").counter("missing")
        )
        .await[0]
            .got,
        Got::Failed(Failure::NotFound)
    );
    assert_eq!(lab.counter("missing").await, 1);
    let pttl = lab.pttl("missing").await;
    assert!(0 < pttl && pttl <= 400, "negative TTL: {pttl} ms");

    // An answer with its own TTL.
    assert_eq!(
        a.fetch("short", &Fill::value("v").ttl(ms(300))).await,
        fetched("v", Is::Fresh)
    );
    let pttl = lab.pttl("short").await;
    assert!(0 < pttl && pttl <= 300, "the answer's TTL: {pttl} ms");
    assert_eq!(b.peek_entry("short").await, value("v", Is::Fresh));

    tokio::time::sleep(negative_ttl + ms(50)).await;
    assert_eq!(b.peek_entry("short").await, Looked::Miss);
    assert_eq!(b.peek_entry("missing").await, Looked::Miss);
    assert_eq!(
        b.call("missing", Mode::Optional, 1, &missing).await[0].got,
        Got::Value(None)
    );
    assert_eq!(lab.counter("missing").await, 2);

    // "Don't cache": one fill for 50 concurrent callers, nothing stored.
    let before = a.stats().await.coalesced;
    let volatile = Fill::value("once")
        .dont_cache()
        .gate("g")
        .counter("volatile");
    let tag = a
        .send(&Proc::call_command("volatile", Mode::Fetch, 50, &volatile))
        .await;
    let deadline = soon();
    while a.stats().await.coalesced < before + 49 {
        give_up_at(deadline, "49 callers join the fill");
    }
    a.open("g").await;
    let served: Vec<Served> = a.answer(&tag).await;
    assert!(served.iter().all(|s| s.got == fetched("once", Is::Fresh)));
    assert_eq!(lab.counter("volatile").await, 1, "still one fill");
    a.idle().await;
    assert_eq!(lab.pttl("volatile").await, -2, "nothing stored");
    assert_eq!(peek_entry(&here, "volatile").await, Looked::Miss);
    assert_eq!(b.peek_entry("volatile").await, Looked::Miss);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalidated_key_is_served_by_neither_grace_nor_fail_safe() {
    let lab = Lab::start().await;
    let config = Config {
        grace: ms(300),
        fail_safe: Duration::from_secs(10),
        ..Config::default()
    };
    let here = lab.cache(config).await;
    let (mut a, mut b) = tokio::join!(lab.worker(config), lab.worker(config));
    for key in ["graced", "graced-control", "kept", "kept-control"] {
        here.set(key, "old".into()).await.expect("set");
    }
    sleep_past_ttl(&config).await;

    // Within the grace period: served stale unless invalidated elsewhere.
    assert_eq!(
        a.peek_entry("graced-control").await,
        value("old", Is::Stale)
    );
    b.invalidate("graced").await;
    assert_eq!(a.peek_entry("graced").await, Looked::Miss);
    assert_eq!(
        a.fetch("graced", &Fill::value("new")).await,
        fetched("new", Is::Fresh)
    );

    // Past the grace period: fail-safe serves the old value unless
    // invalidated elsewhere.
    lab.wait_age(
        "kept",
        config.physical(),
        config.ttl + config.grace + ms(20),
    )
    .await;
    assert_eq!(
        a.fetch("kept-control", &Fill::error()).await,
        fetched("old", Is::FailSafe)
    );
    b.invalidate("kept").await;
    assert_eq!(
        a.fetch("kept", &Fill::error()).await,
        Got::Failed(Failure::Fill),
        "no fail-safe after an invalidation"
    );
    assert_eq!(a.peek_entry("kept").await, Looked::Miss);
    assert_eq!(lab.pttl("kept").await, -2);
}

/// Spins (a sleep is too coarse) for `micros` microseconds.
fn spin_for(micros: u64) {
    let until = Instant::now() + Duration::from_micros(micros);
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_racing_an_invalidate_from_another_process_never_brings_the_old_value_back() {
    const RUNS: usize = 150;
    let lab = Lab::start().await;
    // A long grace keeps every key stale for the whole test; fail-safe lets
    // a failing refresh try to re-cache the old value.
    let config = Config {
        grace: Duration::from_secs(600),
        fail_safe: Duration::from_secs(1_200),
        ..Config::default()
    };
    let here = lab.cache(config).await;
    let mut p = lab.worker(config).await;
    for run in 0..RUNS {
        here.set(&format!("race-{run}"), "old".into())
            .await
            .expect("set");
    }
    sleep_past_ttl(&config).await;

    let mut rng = fastrand::Rng::with_seed(0x5EED_F4E5);
    for run in 0..RUNS {
        let key = format!("race-{run}");
        let started = format!("started-{run}");
        let fail = rng.bool();
        let fill_delay = rng.u64(0..3_000);
        let invalidate_delay = rng.u64(0..3_000);
        let fill = if fail {
            Fill::error()
        } else {
            Fill::value("refreshed")
        };
        let fill = fill
            .counter(&started)
            .delay(Duration::from_micros(fill_delay));
        assert_eq!(
            p.fetch(&key, &fill).await,
            fetched("old", Is::Stale),
            "run {run}"
        );
        // The refresh holds the lease and its fill is running.
        lab.wait_counter(&started, 1).await;
        spin_for(invalidate_delay);
        here.invalidate(&key).await.expect("invalidate");
        p.idle().await;
        assert_eq!(
            peek_entry(&here, &key).await,
            Looked::Miss,
            "run {run}: a {} refresh (fill {fill_delay} µs) raced an invalidate \
             ({invalidate_delay} µs after the fill started)",
            if fail { "failing" } else { "succeeding" }
        );
    }
    let stats = p.stats().await;
    eprintln!(
        "{RUNS} races: {} commits landed before the invalidate, {} were refused after it",
        stats.commits, stats.commits_refused
    );
    assert_eq!(stats.refreshes, RUNS as u64, "{stats:?}");
    assert!(
        stats.commits > 0 && stats.commits_refused > 0,
        "both orders were exercised: {stats:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_with_clocks_ten_minutes_apart_agree_on_freshness() {
    let lab = Lab::start().await;
    let config = Config {
        ttl: ms(500),
        grace: ms(500),
        fail_safe: ms(1_500),
        throttle: ms(500),
        ..Config::default()
    };
    let physical = config.physical();
    let ahead = Config {
        skew_secs: 300,
        ..config
    };
    let behind = Config {
        skew_secs: -300,
        ..config
    };
    let (mut a, mut b) = tokio::join!(lab.worker(ahead), lab.worker(behind));
    let (clock_a, clock_b) = tokio::join!(a.clock(), b.clock());
    let apart = clock_a.abs_diff(clock_b);
    assert!(
        apart.abs_diff(600_000) < 10_000,
        "the clocks are {apart} ms apart"
    );

    assert_eq!(
        a.fetch("k", &Fill::value("v")).await,
        fetched("v", Is::Fresh)
    );

    // At each point, both processes look at the entry at once; its age by
    // Redis is read before and after, and both must say what that age means.
    for (at, expected) in [
        (Duration::ZERO, value("v", Is::Fresh)),
        (config.ttl + ms(200), value("v", Is::Stale)),
        (config.ttl + config.grace + ms(300), Looked::Miss),
    ] {
        lab.wait_age("k", physical, at).await;
        let before = lab.age("k", physical).await.expect("present");
        let (seen_a, seen_b) = tokio::join!(a.peek_entry("k"), b.peek_entry("k"));
        let after = lab.age("k", physical).await.expect("present");
        let place = |age: Duration| (age >= config.ttl, age >= config.ttl + config.grace);
        assert_eq!(
            place(before),
            place(after),
            "the sample straddled a boundary: {before:?} .. {after:?}"
        );
        assert_eq!(seen_a, seen_b, "the two processes disagree at {before:?}");
        assert_eq!(seen_a, expected, "at age {before:?} .. {after:?}");
    }
    // Fetches agree too: past the grace period a failing fill in the process
    // ahead serves fail-safe, and the process behind sees that, throttled.
    assert_eq!(
        a.fetch("k", &Fill::error()).await,
        fetched("v", Is::FailSafe)
    );
    assert_eq!(b.peek_entry("k").await, value("v", Is::FailSafe));
    assert_eq!(
        b.fetch("k", &Fill::error()).await,
        fetched("v", Is::FailSafe)
    );
    assert_eq!(lab.counter("fills").await, 2, "b called no source");

    // Past the physical end, both miss.
    lab.wait_gone("k").await;
    let (seen_a, seen_b) = tokio::join!(a.peek_entry("k"), b.peek_entry("k"));
    assert_eq!((seen_a, seen_b), (Looked::Miss, Looked::Miss));
    assert_eq!(
        b.fetch("k", &Fill::error()).await,
        Got::Failed(Failure::Fill)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_in_flight_before_an_invalidate_or_set_elsewhere_never_stores_over_it() {
    const RUNS: usize = 200;
    let lab = Lab::start().await;
    let config = Config {
        grace: Duration::from_secs(600),
        fail_safe: Duration::from_secs(1_200),
        ..Config::default()
    };
    let here = lab.cache(config).await;
    let mut p = lab.worker(config).await;
    for run in 0..RUNS {
        here.set(&format!("window-{run}"), "old".into())
            .await
            .expect("set");
    }
    sleep_past_ttl(&config).await;

    // The invalidate or set is sent while the worker's call is on its way,
    // without waiting for it: it lands before the stale read, between the
    // read and the lease grant, or during the refresh.
    let mut rng = fastrand::Rng::with_seed(0x0DD_B17E);
    let (mut in_flight, mut violations) = (0, Vec::new());
    for run in 0..RUNS {
        let key = format!("window-{run}");
        let (overwrite, fail) = (rng.bool(), rng.bool());
        let fill = if fail {
            Fill::error()
        } else {
            Fill::value("refreshed")
        };
        let tag = p
            .send(&Proc::call_command(&key, Mode::Fetch, 1, &fill))
            .await;
        spin_for(rng.u64(0..1_500));
        if overwrite {
            here.set(&key, "newer".into()).await.expect("set");
        } else {
            here.invalidate(&key).await.expect("invalidate");
        }
        let served: Vec<Served> = p.answer(&tag).await;
        p.idle().await;
        let after = peek_entry(&here, &key).await;
        if served[0].got != fetched("old", Is::Stale) {
            // The read came after the write: a plain fill, nothing to check
            // but that the old value is gone.
            assert!(
                !matches!(&after, Looked::Value(v, _) if v == "old"),
                "run {run}: {after:?}"
            );
            continue;
        }
        // The refresh was in flight when the write landed: it may hand its
        // value to its callers but must not store it.
        in_flight += 1;
        let expected = if overwrite {
            value("newer", Is::Fresh)
        } else {
            Looked::Miss
        };
        if after != expected {
            violations.push(format!(
                "run {run}: a {} refresh then {} from elsewhere left {after:?}",
                if fail { "failing" } else { "succeeding" },
                if overwrite { "a set" } else { "an invalidate" },
            ));
        }
    }
    assert!(
        in_flight > 0,
        "no write landed while a refresh was in flight"
    );
    assert!(
        violations.is_empty(),
        "{} of {in_flight} refreshes in flight stored over a newer write:\n{}",
        violations.len(),
        violations.join("\n")
    );
}

//! L2 hit throughput: how close a read of `RedisStore` comes to a bare
//! redis-rs `GET`, measured interleaved round by round in one run.
//!
//! ```text
//! cargo run --release -p corral-cache --example l2_hits -- [ROUNDS] [MS_PER_LOOP]
//! ```
//!
//! It starts its own `redis-server` (the test fixture), seeds 50 keys
//! through a `Cache<String>` on a `RedisStore`, and then, every round, runs
//! each variant below once, in a rotating order: 50 tokio tasks (on a
//! 2-worker multi-thread runtime), each hammering its own key for
//! MS_PER_LOOP. Every variant reads the same 50 value keys the cache
//! wrote. It prints, per variant, the median over rounds of reads per
//! second and of the per-round ratio to the bare `GET` of the same round
//! (these machines are noisy: only ratios taken moments apart compare).
//! `L2_HITS_TASKS=N` runs N tasks instead of 50 (at most 50; `1`: one
//! task alone, the latency of a lone read).
//! `L2_HITS_VARIANTS=store,cache` runs only the variants whose names start
//! with one of the given prefixes, beside the baseline (more rounds in the
//! same time); `L2_HITS_PROFILE=<prefix>` runs one variant alone, for a
//! profiler, and prints its rate and how many reads it made (two runs of
//! different lengths under callgrind give instructions per read without
//! the setup: the difference of their totals over that of their reads).
//!
//! Variants:
//! - `get/mux`: bare `GET` on a redis-rs `MultiplexedConnection` (the
//!   baseline);
//! - `get/mgr`: bare `GET` on a `ConnectionManager` (what the store uses);
//! - `get/mux in timeout`: the baseline inside `tokio::time::timeout`, as
//!   every call of the store is bounded;
//! - `evalsha/get3`: `EVALSHA` of the store's former read script (`GET`
//!   value, `PTTL` value, `GET` of a third key in its slot, as the former
//!   fence);
//! - `evalsha/get2`: `EVALSHA` of a script doing only `GET` + `PTTL`;
//! - `fcall_ro/get2`: `FCALL_RO` of a function doing `GET` + `PTTL`;
//! - `pipe/pttl+get`: a pipeline of `PTTL` and `GET` (one round trip), on
//!   the `ConnectionManager`; `... on mux`: the same on the
//!   `MultiplexedConnection`; `... in timeout`: on the `ConnectionManager`
//!   inside `tokio::time::timeout` (as the store bounds every call);
//! - `multi/pttl+get`: `MULTI`, `PTTL`, `GET`, `EXEC` pipelined;
//! - `store.get`: `corral::RedisStore` through `Store::get`;
//! - `store.get_or_lease`: `Store::get_or_lease` (`Grant::IfNoValue`) on a
//!   present value, what a cache's leader asks;
//! - `cache.peek`: `Cache::peek` (reads through `Store::get`, decodes; no
//!   flight);
//! - `cache.get_or_fill`: `Cache::get_or_fill` on warm keys of a cache
//!   built with `.l1(false)` (each caller reads through `Store::get`
//!   before it claims a flight);
//! - `cache+l1.get_or_fill, L1 miss`: `Cache::get_or_fill` of a cache with
//!   an L1 of 16 entries, each task rotating over 64 warm keys of its own,
//!   so that (almost) every read misses the L1 and hits the L2 (the flight's
//!   first request: `Store::get_or_lease`); the share of L1 hits is
//!   printed;
//! - `store.get, tracking off` and `cache+l1 L1 miss, tracking off`: the
//!   same as `store.get` and the L1-miss variant, on a store with
//!   `Tracking::Off` (RESP2, no client tracking; the others' store has
//!   the default, `Tracking::Keys`); `..., tracking bcast`: the same on a
//!   store with `Tracking::Broadcast` (reads through the lanes, no key
//!   tracked per read);
//! - `raw/mget (floor)`: not corral — a hand-written RESP client
//!   (`raw.rs`) that batches the reads queued into `MGET`s, two in flight,
//!   on its own connection, and does nothing else per read: no key names
//!   built, no redis-rs, no decoding (each read bounded by a timeout, as
//!   the store's are). What it reaches against
//!   the bare `GET` bounds what any batched read can reach on this
//!   machine.

mod raw;

use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use corral::store::{Grant, LeaseRequest, Lookup, Store, StoreKey};
use corral::{Cache, Capacity, RedisConfig, RedisStore, Tracking};
use corral_testkit::{cpu_micros, RedisServer};
use redis::aio::{ConnectionManager, MultiplexedConnection};
use redis::Value;

/// The keys seeded, and the tasks run unless `L2_HITS_TASKS` says fewer.
const TASKS: usize = 50;
/// Keys per task of the L1-miss variant, and its L1's entries.
const ROTATION: usize = 64;
const L1_ENTRIES: u64 = 16;
const NAMESPACE_NAME: &str = "l2hits";

/// The store's read script before values carried their generation.
const GET3: &str = r"
local value = redis.call('GET', KEYS[1])
if value then
  return {value, redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[3])}
end
return {}
";

/// Only the value and its remaining time to live.
const GET2: &str = r"
local value = redis.call('GET', KEYS[1])
if value then
  return {value, redis.call('PTTL', KEYS[1])}
end
return {}
";

const LIBRARY: &str = r"#!lua name=l2hits
redis.register_function{
  function_name = 'get2',
  callback = function(keys)
    local value = redis.call('GET', keys[1])
    if value then
      return {value, redis.call('PTTL', keys[1])}
    end
    return {}
  end,
  flags = {'no-writes'},
}
";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    GetMux,
    GetMgr,
    GetMuxTimeout,
    EvalshaGet3,
    EvalshaGet2,
    FcallRoGet2,
    PipePttlGet,
    PipeMuxPttlGet,
    PipeTimeoutPttlGet,
    MultiPttlGet,
    StoreGet,
    StoreGetOrLease,
    CacheGet,
    CacheGetOrFill,
    CacheL1Miss,
    StoreGetUntracked,
    CacheL1MissUntracked,
    StoreGetBcast,
    CacheL1MissBcast,
    RawMget,
}

const VARIANTS: [Variant; 20] = [
    Variant::GetMux,
    Variant::GetMgr,
    Variant::GetMuxTimeout,
    Variant::EvalshaGet3,
    Variant::EvalshaGet2,
    Variant::FcallRoGet2,
    Variant::PipePttlGet,
    Variant::PipeMuxPttlGet,
    Variant::PipeTimeoutPttlGet,
    Variant::MultiPttlGet,
    Variant::StoreGet,
    Variant::StoreGetOrLease,
    Variant::CacheGet,
    Variant::CacheGetOrFill,
    Variant::CacheL1Miss,
    Variant::StoreGetUntracked,
    Variant::CacheL1MissUntracked,
    Variant::StoreGetBcast,
    Variant::CacheL1MissBcast,
    Variant::RawMget,
];

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Self::GetMux => "get/mux (baseline)",
            Self::GetMgr => "get/mgr",
            Self::GetMuxTimeout => "get/mux in timeout",
            Self::EvalshaGet3 => "evalsha/get3 (old read)",
            Self::EvalshaGet2 => "evalsha/get2",
            Self::FcallRoGet2 => "fcall_ro/get2",
            Self::PipePttlGet => "pipe/pttl+get",
            Self::PipeMuxPttlGet => "pipe/pttl+get on mux",
            Self::PipeTimeoutPttlGet => "pipe/pttl+get in timeout",
            Self::MultiPttlGet => "multi/pttl+get",
            Self::StoreGet => "store.get",
            Self::StoreGetOrLease => "store.get_or_lease",
            Self::CacheGet => "cache.peek",
            Self::CacheGetOrFill => "cache.get_or_fill",
            Self::CacheL1Miss => "cache+l1.get_or_fill, L1 miss",
            Self::StoreGetUntracked => "store.get, tracking off",
            Self::CacheL1MissUntracked => "cache+l1 L1 miss, tracking off",
            Self::StoreGetBcast => "store.get, tracking bcast",
            Self::CacheL1MissBcast => "cache+l1 L1 miss, tracking bcast",
            Self::RawMget => "raw/mget (floor)",
        }
    }
}

/// The names of one seeded key.
struct Names {
    user: String,
    store_key: StoreKey,
    value: String,
    lease: String,
    /// A third key in the slot, for `evalsha/get3`.
    third: String,
}

struct Ctx {
    mux: MultiplexedConnection,
    mgr: ConnectionManager,
    store: RedisStore,
    cache: Cache<String>,
    keys: Vec<Names>,
    /// The L1-miss variant: its cache, each task's keys and next key.
    l1_cache: Cache<String>,
    /// A store without client tracking, and an L1 cache on it.
    untracked: RedisStore,
    l1_untracked: Cache<String>,
    /// A store with client tracking in `BCAST` mode, and an L1 cache on it.
    bcast: RedisStore,
    l1_bcast: Cache<String>,
    l1_keys: Vec<Vec<String>>,
    l1_next: Vec<AtomicUsize>,
    get3: String,
    get2: String,
    request: LeaseRequest,
    raw: Arc<raw::RawReads>,
}

fn names(namespace: &str, user: String) -> Names {
    let store_key = StoreKey::new(namespace, &user);
    let keys = corral::RedisStore::keys_of(&store_key);
    Names {
        store_key,
        value: keys.value,
        lease: keys.lease,
        third: keys.waiters,
        user,
    }
}

fn expect_bytes(value: Option<Vec<u8>>) {
    assert!(
        value.is_some_and(|v| !v.is_empty()),
        "a seeded key is missing"
    );
}

impl Ctx {
    async fn op(&self, variant: Variant, i: usize) {
        let k = &self.keys[i];
        match variant {
            Variant::GetMux => {
                let v: Option<Vec<u8>> = redis::cmd("GET")
                    .arg(&k.value)
                    .query_async(&mut self.mux.clone())
                    .await
                    .expect("GET");
                expect_bytes(v);
            }
            Variant::GetMuxTimeout => {
                let mut cmd = redis::cmd("GET");
                cmd.arg(&k.value);
                let mut mux = self.mux.clone();
                let get = cmd.query_async::<Option<Vec<u8>>>(&mut mux);
                let v = tokio::time::timeout(Duration::from_secs(1), get)
                    .await
                    .expect("in time")
                    .expect("GET");
                expect_bytes(v);
            }
            Variant::GetMgr => {
                let v: Option<Vec<u8>> = redis::cmd("GET")
                    .arg(&k.value)
                    .query_async(&mut self.mgr.clone())
                    .await
                    .expect("GET");
                expect_bytes(v);
            }
            Variant::EvalshaGet3 => {
                let v: Value = redis::cmd("EVALSHA")
                    .arg(&self.get3)
                    .arg(3)
                    .arg(&k.value)
                    .arg(&k.lease)
                    .arg(&k.third)
                    .query_async(&mut self.mgr.clone())
                    .await
                    .expect("EVALSHA");
                assert!(matches!(v, Value::Array(ref items) if items.len() == 3));
            }
            Variant::EvalshaGet2 => {
                let v: Value = redis::cmd("EVALSHA")
                    .arg(&self.get2)
                    .arg(1)
                    .arg(&k.value)
                    .query_async(&mut self.mgr.clone())
                    .await
                    .expect("EVALSHA");
                assert!(matches!(v, Value::Array(ref items) if items.len() == 2));
            }
            Variant::FcallRoGet2 => {
                let v: Value = redis::cmd("FCALL_RO")
                    .arg("get2")
                    .arg(1)
                    .arg(&k.value)
                    .query_async(&mut self.mgr.clone())
                    .await
                    .expect("FCALL_RO");
                assert!(matches!(v, Value::Array(ref items) if items.len() == 2));
            }
            Variant::PipePttlGet => {
                let (pttl, v): (i64, Option<Vec<u8>>) = redis::pipe()
                    .cmd("PTTL")
                    .arg(&k.value)
                    .cmd("GET")
                    .arg(&k.value)
                    .query_async(&mut self.mgr.clone())
                    .await
                    .expect("pipe");
                assert!(pttl > 0);
                expect_bytes(v);
            }
            Variant::PipeMuxPttlGet => {
                let (pttl, v): (i64, Option<Vec<u8>>) = redis::pipe()
                    .cmd("PTTL")
                    .arg(&k.value)
                    .cmd("GET")
                    .arg(&k.value)
                    .query_async(&mut self.mux.clone())
                    .await
                    .expect("pipe");
                assert!(pttl > 0);
                expect_bytes(v);
            }
            Variant::PipeTimeoutPttlGet => {
                let mut pipe = redis::pipe();
                pipe.cmd("PTTL").arg(&k.value).cmd("GET").arg(&k.value);
                let mut conn = self.mgr.clone();
                let (pttl, v): (i64, Option<Vec<u8>>) =
                    tokio::time::timeout(Duration::from_secs(1), pipe.query_async(&mut conn))
                        .await
                        .expect("in time")
                        .expect("pipe");
                assert!(pttl > 0);
                expect_bytes(v);
            }
            Variant::MultiPttlGet => {
                let (pttl, v): (i64, Option<Vec<u8>>) = redis::pipe()
                    .atomic()
                    .cmd("PTTL")
                    .arg(&k.value)
                    .cmd("GET")
                    .arg(&k.value)
                    .query_async(&mut self.mgr.clone())
                    .await
                    .expect("multi");
                assert!(pttl > 0);
                expect_bytes(v);
            }
            Variant::StoreGet => {
                let stored = self.store.get(&k.store_key).await.expect("store.get");
                assert!(stored.is_some_and(|s| s.generation.is_some()));
            }
            Variant::StoreGetOrLease => {
                let lookup = self
                    .store
                    .get_or_lease(&k.store_key, &self.request)
                    .await
                    .expect("get_or_lease");
                assert!(matches!(lookup, Lookup::Hit(_)));
            }
            Variant::CacheGet => {
                let value = self.cache.peek(&k.user).await.expect("cache.peek");
                assert!(value.is_some());
            }
            Variant::CacheGetOrFill => {
                let value = self
                    .cache
                    .get_or_fill(&k.user, || async {
                        Err::<String, _>(std::io::Error::other("warm keys never fill"))
                    })
                    .await
                    .expect("get_or_fill");
                assert!(!value.is_empty());
            }
            Variant::RawMget => {
                assert!(!self.raw.get(i).await.is_empty(), "a seeded key is missing");
            }
            Variant::StoreGetUntracked | Variant::StoreGetBcast => {
                let store = match variant {
                    Variant::StoreGetUntracked => &self.untracked,
                    _ => &self.bcast,
                };
                let stored = store.get(&k.store_key).await.expect("store.get");
                assert!(stored.is_some_and(|s| s.generation.is_some()));
            }
            Variant::CacheL1Miss | Variant::CacheL1MissUntracked | Variant::CacheL1MissBcast => {
                let next = self.l1_next[i].fetch_add(1, Ordering::Relaxed);
                let key = &self.l1_keys[i][next % ROTATION];
                let cache = match variant {
                    Variant::CacheL1Miss => &self.l1_cache,
                    Variant::CacheL1MissBcast => &self.l1_bcast,
                    _ => &self.l1_untracked,
                };
                let value = cache
                    .get_or_fill(key, || async {
                        Err::<String, _>(std::io::Error::other("warm keys never fill"))
                    })
                    .await
                    .expect("get_or_fill");
                assert!(!value.is_empty());
            }
        }
    }
}

/// One timed loop: reads per second, and CPU microseconds per read spent
/// by this process and by the server.
struct Sample {
    reads: u64,
    rate: f64,
    client_us: f64,
    server_us: f64,
}

/// How many tasks read at once: `L2_HITS_TASKS`, 1 to `TASKS` (default).
fn tasks() -> usize {
    std::env::var("L2_HITS_TASKS")
        .ok()
        .and_then(|n| n.parse().ok())
        .map_or(TASKS, |n: usize| n.clamp(1, TASKS))
}

/// Reads per second of [`tasks`] tasks each reading its own key for `ms`.
async fn measure(ctx: &Arc<Ctx>, variant: Variant, ms: u64, server_pid: &str) -> Sample {
    let (client0, server0) = (cpu_micros("self"), cpu_micros(server_pid));
    let start = Instant::now();
    let deadline = start + Duration::from_millis(ms);
    let tasks: Vec<_> = (0..tasks())
        .map(|i| {
            let ctx = Arc::clone(ctx);
            tokio::spawn(async move {
                let mut reads = 0u64;
                while Instant::now() < deadline {
                    ctx.op(variant, i).await;
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    let mut reads = 0;
    for task in tasks {
        reads += task.await.expect("reader task");
    }
    let elapsed = start.elapsed().as_secs_f64();
    let (client1, server1) = (cpu_micros("self"), cpu_micros(server_pid));
    let count = reads;
    let reads = reads as f64;
    Sample {
        reads: count,
        rate: reads / elapsed,
        client_us: (client1 - client0) / reads,
        server_us: (server1 - server0) / reads,
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

async fn setup(server: &RedisServer) -> Ctx {
    let client = redis::Client::open(server.url()).expect("client");
    let mux = client
        .get_multiplexed_async_connection()
        .await
        .expect("multiplexed connection");
    let mut mgr = ConnectionManager::new(client).await.expect("manager");
    let store = RedisStore::connect(&server.url(), RedisConfig::default())
        .await
        .expect("store");
    // No L1, said so: every read of it is an L2 hit.
    let cache = Cache::<String>::builder(NAMESPACE_NAME)
        .ttl(Duration::from_secs(3600))
        .store(store.clone())
        .l1(false)
        .build()
        .expect("cache");
    let mut keys = Vec::new();
    for i in 0..TASKS {
        let user = format!("user:{i:04}");
        cache
            .set(&user, format!("value of {user}, 32 bytes long.."))
            .await
            .expect("seed");
        keys.push(names(cache.namespace(), user));
    }
    let l1_on = |store: &RedisStore| {
        Cache::<String>::builder(NAMESPACE_NAME)
            .ttl(Duration::from_secs(3600))
            .store(store.clone())
            .l1(true)
            .capacity(Capacity::Entries(L1_ENTRIES))
            .build()
            .expect("cache")
    };
    let l1_cache = l1_on(&store);
    let untracked_config = RedisConfig::default().tracking(Tracking::Off);
    let untracked = RedisStore::connect(&server.url(), untracked_config)
        .await
        .expect("store");
    let l1_untracked = l1_on(&untracked);
    let bcast_config = RedisConfig::default().tracking(Tracking::Broadcast);
    let bcast = RedisStore::connect(&server.url(), bcast_config)
        .await
        .expect("store");
    let l1_bcast = l1_on(&bcast);
    let mut l1_keys = Vec::new();
    for i in 0..TASKS {
        let mut own = Vec::new();
        for j in 0..ROTATION {
            let user = format!("l1miss:{i:04}:{j:03}");
            cache
                .set(&user, format!("value of {user}, 32 bytes"))
                .await
                .expect("seed");
            own.push(user);
        }
        l1_keys.push(own);
    }
    let load = |source: &str| {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(source);
        cmd
    };
    let get3: String = load(GET3).query_async(&mut mgr).await.expect("load");
    let get2: String = load(GET2).query_async(&mut mgr).await.expect("load");
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(LIBRARY)
        .query_async(&mut mgr)
        .await
        .expect("function load");
    let values = keys.iter().map(|k| k.value.clone()).collect();
    let raw = raw::RawReads::connect(server.port(), values).await;
    Ctx {
        mux,
        mgr,
        store,
        cache,
        keys,
        l1_cache,
        untracked,
        l1_untracked,
        bcast,
        l1_bcast,
        l1_keys,
        l1_next: (0..TASKS).map(|_| AtomicUsize::new(0)).collect(),
        get3,
        get2,
        raw,
        request: LeaseRequest {
            lease_ttl: Duration::from_secs(5),
            fence_ttl: Duration::from_secs(10),
            grant: Grant::IfNoValue,
        },
    }
}

fn arg(args: &[String], at: usize, default: u64) -> Result<u64, String> {
    args.get(at).map_or(Ok(default), |s| {
        s.parse().map_err(|e| format!("{s:?}: {e}"))
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (rounds, ms) = match (arg(&args, 1, 9), arg(&args, 2, 300)) {
        (Ok(rounds), Ok(ms)) if rounds > 0 && ms > 0 => (rounds, ms),
        _ => {
            eprintln!("usage: l2_hits [ROUNDS > 0] [MS_PER_LOOP > 0]");
            return ExitCode::FAILURE;
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run(rounds, ms));
    ExitCode::SUCCESS
}

async fn run(rounds: u64, ms: u64) {
    let server = RedisServer::start();
    let pid = server.pid().map(|p| p.to_string()).unwrap_or_default();
    let ctx = Arc::new(setup(&server).await);
    // `L2_HITS_PROFILE=<variant name, or a prefix>`: run only that variant
    // (or those), for a profiler, and print the rate.
    if let Ok(prefix) = std::env::var("L2_HITS_PROFILE") {
        let exact = VARIANTS.iter().any(|v| v.name() == prefix);
        let chosen = VARIANTS.iter().filter(|v| {
            if exact {
                v.name() == prefix
            } else {
                v.name().starts_with(&prefix)
            }
        });
        for variant in chosen {
            let sample = measure(&ctx, *variant, ms * rounds, &pid).await;
            println!(
                "{}: {:.0} reads/s ({} reads)",
                variant.name(),
                sample.rate,
                sample.reads
            );
        }
        return;
    }
    // `L2_HITS_VARIANTS=<prefix>,<prefix>...`: only the variants whose
    // names start so (and the baseline), for more rounds in the same time.
    let chosen: Vec<Variant> = match std::env::var("L2_HITS_VARIANTS") {
        Ok(prefixes) => VARIANTS
            .into_iter()
            .enumerate()
            .filter(|(at, v)| {
                *at == 0 || prefixes.split(',').any(|p| v.name().starts_with(p.trim()))
            })
            .map(|(_, v)| v)
            .collect(),
        Err(_) => VARIANTS.to_vec(),
    };
    // Warm-up: connections, script caches, allocator.
    for &variant in &chosen {
        measure(&ctx, variant, ms / 4 + 1, &pid).await;
    }
    let n = chosen.len();
    let (mut rates, mut ratios) = (vec![Vec::new(); n], vec![Vec::new(); n]);
    let (mut client_us, mut server_us) = (vec![Vec::new(); n], vec![Vec::new(); n]);
    for round in 0..rounds {
        let mut this = Vec::with_capacity(n);
        this.resize_with(n, || None);
        for step in 0..n {
            let at = (step + round as usize) % n;
            this[at] = Some(measure(&ctx, chosen[at], ms, &pid).await);
        }
        let this: Vec<Sample> = this.into_iter().flatten().collect();
        for (at, sample) in this.iter().enumerate() {
            rates[at].push(sample.rate);
            ratios[at].push(sample.rate / this[0].rate);
            client_us[at].push(sample.client_us);
            server_us[at].push(sample.server_us);
        }
        eprintln!("round {}/{rounds} done", round + 1);
    }
    println!(
        "{} tasks x own key, {rounds} rounds x {ms} ms per variant, redis-server {}",
        tasks(),
        server
            .cli(&["INFO", "server"])
            .lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .unwrap_or("?")
            .trim()
    );
    println!(
        "{:<26} {:>10} {:>8} {:>14} {:>10} {:>10}",
        "variant", "reads/s", "ratio", "ratio min..max", "client us", "server us"
    );
    for (at, variant) in chosen.iter().enumerate() {
        let rate = median(&mut rates[at]);
        let lo = ratios[at].iter().copied().fold(f64::INFINITY, f64::min);
        let hi = ratios[at].iter().copied().fold(0.0, f64::max);
        let ratio = median(&mut ratios[at]);
        println!(
            "{:<26} {:>10.0} {:>7.2}x {:>6.2}..{:<6.2} {:>10.2} {:>10.2}",
            variant.name(),
            rate,
            ratio,
            lo,
            hi,
            median(&mut client_us[at]),
            median(&mut server_us[at]),
        );
    }
    let stats = ctx.l1_cache.stats();
    if stats.hits > 0 {
        println!(
            "L1-miss variant: {} hits, {} of them L2 hits, {} fills",
            stats.hits, stats.l2_hits, stats.fills
        );
    }
}

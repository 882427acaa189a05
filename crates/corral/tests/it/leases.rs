//! Leases never outlive their purpose, and foreign data heals, against
//! real `redis-server` and `memcached` processes (several OS processes
//! where the claim is about other processes):
//! - a commit refused before the write (a value over `max_value_bytes`, an
//!   item over memcached's size limit) releases its lease, so the next
//!   caller in another process is answered at once;
//! - a lease key with no expiry, or with contents that are not a lease
//!   token, is taken over instead of holding the key until `fill_timeout`;
//! - a batch fill renews its leases, so a loader slower than the lease TTL
//!   runs once per key across processes;
//! - a value key of another Redis type (or garbage in a memcached item) is
//!   a counted miss that keeps single flight and is replaced by one fill.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use corral::store::StoreKey;
use corral::{Cache, MemcachedConfig, MemcachedStore, RedisConfig, RedisStore};
use corral_testkit::{
    MemcachedServer, RedisCluster, RedisServer, Stampede, StampedeReport, Worker,
};
use redis::AsyncCommands;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::support::{memcached_incr, redis_conn, redis_count, run_stampede};

/// The cache name every process uses.
const NAME: &str = "leases";

// ---------------------------------------------------------------- shared

/// Where the shared counters live: a Redis server or a memcached server.
#[derive(Clone)]
enum Counters {
    Redis(redis::aio::MultiplexedConnection),
    Memcached(String),
}

impl Counters {
    /// Adds 1 to the counter `name` (created at 0 by the test for
    /// memcached); its new value.
    async fn incr(&self, name: &str) -> Result<u64, String> {
        match self {
            Self::Redis(conn) => conn.clone().incr(name, 1).await.map_err(|e| e.to_string()),
            Self::Memcached(addr) => memcached_incr(addr, name).await,
        }
    }
}

/// The Redis key of `user`'s `kind` (`v` value, `l` lease) in
/// `namespace`.
fn redis_key(namespace: &str, kind: char, user: &str) -> String {
    let names = corral::RedisStore::keys_of(&corral::store::StoreKey::new(namespace, user));
    match kind {
        'v' => names.value,
        _ => names.lease,
    }
}

/// What a worker reports for a `timed` command.
#[derive(Debug, Serialize, Deserialize)]
struct Timed {
    micros: u64,
    value: Result<String, String>,
}

/// What a worker reports for a `stats` command.
#[derive(Debug, Serialize, Deserialize)]
struct WorkerStats {
    fills: u64,
    decode_failures: u64,
    store_errors: u64,
    lease_waits: u64,
}

// ---------------------------------------------------------------- worker side

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// A worker process: builds a cache named [`NAME`] with default settings
/// (but `max_value_bytes` from `CORRAL_WORKER_MAX_VALUE`, if set) on the
/// Redis at `CORRAL_WORKER_REDIS` or the memcached at
/// `CORRAL_WORKER_MEMCACHED` (with `max_item_bytes` from
/// `CORRAL_WORKER_MAX_ITEM`, if set), says `@ready`, then runs commands
/// from stdin concurrently, answering each with an `@` line:
/// - `big <key> <bytes>`: `get_or_fill` of a value that long → `@big <ok>`;
/// - `timed <key> <counter>`: a timed `get_or_fill` whose fill counts
///   itself → `@timed <json>`;
/// - a [`Stampede`] → `@report <json>`;
/// - `batch <k1,k2,...> <fill_ms> <counter prefix>`: one
///   `get_many_or_fill` whose loader counts each key it loads in
///   `<prefix><key>` → `@batch <json>`;
/// - `stats` → `@stats <json>`.
#[test]
#[ignore = "a worker process for the multi-process tests, started by them"]
fn worker() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let mut builder = Cache::<String>::builder(NAME);
        let counters = if let Some(url) = env("CORRAL_WORKER_REDIS") {
            let store = RedisStore::connect(&url, RedisConfig::default())
                .await
                .expect("connect");
            builder = builder.store(store);
            let client = redis::Client::open(url).expect("client");
            Counters::Redis(
                client
                    .get_multiplexed_async_connection()
                    .await
                    .expect("connection"),
            )
        } else {
            let addr = env("CORRAL_WORKER_MEMCACHED").expect("a store address");
            let mut config = MemcachedConfig::default();
            if let Some(max) = env("CORRAL_WORKER_MAX_ITEM") {
                config.max_item_bytes = max.parse().expect("bytes");
            }
            let store = MemcachedStore::connect(&[addr.as_str()], config)
                .await
                .expect("connect");
            builder = builder.store(store);
            Counters::Memcached(addr)
        };
        if let Some(max) = env("CORRAL_WORKER_MAX_VALUE") {
            builder = builder.max_value_bytes(max.parse().expect("bytes"));
        }
        let cache = builder.build().expect("config");
        println!("@ready");
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let words: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
            let (cache, counters) = (cache.clone(), counters.clone());
            tokio::spawn(async move { run_command(&words, cache, counters).await });
        }
    });
}

async fn run_command(words: &[String], cache: Cache<String>, counters: Counters) {
    match words.first().map(String::as_str) {
        Some("big") => {
            let len: usize = words[2].parse().expect("bytes");
            let result = cache
                .get_or_fill(&words[1], move || async move {
                    Ok::<_, String>("x".repeat(len))
                })
                .await;
            println!("@big {}", matches!(&result, Ok(v) if v.len() == len));
        }
        Some("timed") => {
            let counter = words[2].clone();
            let started = Instant::now();
            let value = cache
                .get_or_fill(&words[1], move || async move {
                    let n = counters.incr(&counter).await?;
                    Ok::<_, String>(format!("filled by {} (#{n})", std::process::id()))
                })
                .await
                .map_err(|e| format!("{e:?}"));
            let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
            let timed = Timed { micros, value };
            println!("@timed {}", serde_json::to_string(&timed).expect("json"));
        }
        Some("stampede") => {
            let stampede = Stampede::parse(&words[1..]);
            let incr = move |counter: String| {
                let counters = counters.clone();
                async move { counters.incr(&counter).await }
            };
            run_stampede(&cache, stampede, incr).await.print();
        }
        Some("batch") => {
            let keys: Vec<String> = words[1].split(',').map(str::to_owned).collect();
            let fill = Duration::from_millis(words[2].parse().expect("ms"));
            let prefix = words[3].clone();
            let batch = cache
                .get_many_or_fill(&keys, move |wanted: Vec<String>| {
                    let (counters, prefix) = (counters.clone(), prefix.clone());
                    async move {
                        for key in &wanted {
                            counters.incr(&format!("{prefix}{key}")).await?;
                        }
                        tokio::time::sleep(fill).await;
                        let pid = std::process::id();
                        Ok::<_, String>(
                            wanted
                                .into_iter()
                                .map(|key| {
                                    let value = format!("{key} loaded by {pid}");
                                    (key, value)
                                })
                                .collect::<HashMap<_, _>>(),
                        )
                    }
                })
                .await;
            let answers: BTreeMap<String, Result<String, String>> = batch
                .into_map()
                .into_iter()
                .map(|(key, answer)| (key, answer.map_err(|e| format!("{e:?}"))))
                .collect();
            println!("@batch {}", serde_json::to_string(&answers).expect("json"));
        }
        Some("stats") => {
            let stats = cache.stats();
            let stats = WorkerStats {
                fills: stats.fills,
                decode_failures: stats.decode_failures,
                store_errors: stats.store_errors,
                lease_waits: stats.lease_waits,
            };
            println!("@stats {}", serde_json::to_string(&stats).expect("json"));
        }
        other => panic!("unknown worker command {other:?}"),
    }
}

// ---------------------------------------------------------------- test side

async fn redis_worker(server: &RedisServer, max_value: Option<usize>) -> Worker {
    let mut env = vec![("CORRAL_WORKER_REDIS", server.url())];
    if let Some(max) = max_value {
        env.push(("CORRAL_WORKER_MAX_VALUE", max.to_string()));
    }
    Worker::start(&crate::support::test_name(module_path!(), "worker"), &env).await
}

async fn memcached_worker(server: &MemcachedServer, max_item: Option<usize>) -> Worker {
    let mut env = vec![("CORRAL_WORKER_MEMCACHED", server.addr())];
    if let Some(max) = max_item {
        env.push(("CORRAL_WORKER_MAX_ITEM", max.to_string()));
    }
    Worker::start(&crate::support::test_name(module_path!(), "worker"), &env).await
}

async fn big(worker: &mut Worker, key: &str, len: usize) {
    worker.send(&format!("big {key} {len}")).await;
    assert_eq!(
        worker.expect("@big").await,
        "true",
        "the oversized fill answers its caller"
    );
}

async fn timed(worker: &mut Worker, key: &str, counter: &str) -> Timed {
    worker.send(&format!("timed {key} {counter}")).await;
    serde_json::from_str(&worker.expect("@timed").await).expect("timed json")
}

async fn stats(worker: &mut Worker) -> WorkerStats {
    worker.send("stats").await;
    serde_json::from_str(&worker.expect("@stats").await).expect("stats json")
}

fn memcached_count(server: &MemcachedServer, key: &str) -> u64 {
    server
        .request(format!("incr {key} 0\r\n").as_bytes())
        .parse()
        .unwrap_or_else(|_| panic!("counter {key}"))
}

/// The namespace of the workers' caches.
fn namespace() -> String {
    let cache = Cache::<String>::builder(NAME).build().expect("config");
    cache.namespace().to_owned()
}

/// The next caller after an oversized fill is answered well within 50 ms:
/// no lease left behind (the default lease TTL is 3 s, so a leftover one
/// would cost seconds).
const PROMPT: Duration = Duration::from_millis(50);

/// On memcached, a fill whose item the server refuses as too large
/// (`SERVER_ERROR`: the store was configured with a larger limit than the
/// server's `-I`), and one the store refuses before sending (over
/// `MemcachedConfig::max_item_bytes`), are answered and release their
/// lease: the next caller of the key in another process is answered in
/// under 50 ms, by one fill of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memcached_an_oversized_fill_leaves_no_lease_for_the_next_process() {
    let server = MemcachedServer::start();
    // The server's limit is memcached's default 1 MiB.
    // [lenient, strict]
    let mut workers = [
        memcached_worker(&server, Some(4 << 20)).await,
        memcached_worker(&server, None).await,
    ];
    let probe = MemcachedStore::connect(&[server.addr()], MemcachedConfig::default())
        .await
        .expect("connect");
    let len = 2 << 20;
    for (key, filler) in [("server-refused", 0), ("store-refused", 1)] {
        let [lenient, strict] = &mut workers;
        let (filler, next) = if filler == 0 {
            (lenient, strict)
        } else {
            (strict, lenient)
        };
        let counter = format!("fills-{key}");
        server.set_raw(&counter, b"0", 0);
        big(filler, key, len).await;
        let lease = probe.lease_item(&StoreKey::new(namespace(), key));
        assert!(!server.exists(&lease), "{key}: the lease was left behind");
        let answer = timed(next, key, &counter).await;
        assert!(answer.value.is_ok(), "{key}: {answer:?}");
        assert!(
            Duration::from_micros(answer.micros) < PROMPT,
            "{key}: the next process waited {:?}",
            Duration::from_micros(answer.micros)
        );
        assert_eq!(memcached_count(&server, &counter), 1, "{key}");
    }
}

/// On Redis, a fill whose value is over `max_value_bytes` is answered and
/// releases its lease: the next caller of the key in another process is
/// answered in under 50 ms, by one fill of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_value_over_max_value_bytes_leaves_no_lease_for_the_next_process() {
    let server = RedisServer::start();
    let mut filler = redis_worker(&server, Some(1024)).await;
    let mut next = redis_worker(&server, Some(1024)).await;
    let mut conn = redis_conn(&server.url()).await;
    big(&mut filler, "huge", 4096).await;
    let lease: bool = conn
        .exists(redis_key(&namespace(), 'l', "huge"))
        .await
        .expect("EXISTS");
    assert!(!lease, "the lease was left behind");
    let answer = timed(&mut next, "huge", "fills").await;
    assert!(answer.value.is_ok(), "{answer:?}");
    assert!(
        Duration::from_micros(answer.micros) < PROMPT,
        "the next process waited {:?}",
        Duration::from_micros(answer.micros)
    );
    assert_eq!(redis_count(&mut conn, "fills").await, 1);
}

/// The lease TTL of [`patient`] caches.
const LEASE: Duration = Duration::from_millis(500);

/// A cache with a long `fill_timeout` (30 s) and a short lease
/// ([`LEASE`]) whose fills count themselves.
fn patient<S: corral::store::Store>(store: S, name: &str) -> Cache<String> {
    Cache::<String>::builder(name)
        .store(store)
        .lease_ttl(LEASE)
        .fill_timeout(Duration::from_secs(30))
        .build()
        .expect("config")
}

/// `get_or_fill` of `key` on `cache`: the value, counting fills in
/// `fills`; fails the test unless it returns within `limit` (far below
/// the 30 s `fill_timeout`).
async fn fill_within(
    limit: Duration,
    cache: &Cache<String>,
    key: &str,
    fills: &Arc<AtomicUsize>,
) -> String {
    let fills = Arc::clone(fills);
    let started = Instant::now();
    let value = tokio::time::timeout(
        limit,
        cache.get_or_fill(key, move || async move {
            fills.fetch_add(1, Ordering::SeqCst);
            Ok::<_, std::io::Error>("fresh".to_owned())
        }),
    )
    .await
    .unwrap_or_else(|_| panic!("{key}: still waiting after {limit:?}"))
    .unwrap_or_else(|e| panic!("{key}: {e:?}"));
    eprintln!("{key}: filled in {:?}", started.elapsed());
    value
}

/// Broken lease keys planted on Redis: no expiry, or contents that are not
/// a lease (a token, a dot and a hold), or another type.
async fn broken_redis_leases(url: &str, cache: &Cache<String>) {
    let mut conn = redis_conn(url).await;
    let ns = cache.namespace().to_owned();
    let fills = Arc::new(AtomicUsize::new(0));
    let token = "0123456789abcdef0123456789abcdef.5000";
    let cases: [(&str, &[&str]); 7] = [
        ("junk-no-ttl", &["SET", "{lease}", "junk"]),
        ("lease-no-ttl", &["SET", "{lease}", token]),
        // A token without its hold.
        (
            "bare-token-with-ttl",
            &["SET", "{lease}", &token[..32], "EX", "60"],
        ),
        // A hold that is not a number.
        (
            "token-and-junk-with-ttl",
            &["SET", "{lease}", "0123456789abcdef.x", "EX", "60"],
        ),
        (
            "junk-with-ttl",
            &["SET", "{lease}", "not a token", "EX", "60"],
        ),
        (
            "long-hex-with-ttl",
            &["SET", "{lease}", &"a".repeat(65), "EX", "60"],
        ),
        ("hash", &["HSET", "{lease}", "field", "value"]),
    ];
    for (i, (key, command)) in cases.iter().enumerate() {
        let lease = redis_key(&ns, 'l', key);
        let mut cmd = redis::cmd(command[0]);
        for arg in &command[1..] {
            cmd.arg(if *arg == "{lease}" {
                lease.as_str()
            } else {
                arg
            });
        }
        let _: redis::Value = cmd.query_async(&mut conn).await.expect("plant the lease");
        assert_eq!(
            fill_within(LEASE, cache, key, &fills).await,
            "fresh",
            "{key}"
        );
        assert_eq!(fills.load(Ordering::SeqCst), i + 1, "{key}: one fill");
        let left: bool = conn.exists(&lease).await.expect("EXISTS");
        assert!(!left, "{key}: the commit dropped the taken-over lease");
        assert_eq!(
            cache.peek(key).await.expect("get"),
            Some("fresh".to_owned())
        );
    }
}

/// A lease key with no expiry, or with contents that are not a lease token
/// (another string, another type), is taken over by the next
/// `get_or_fill`, which fills within one lease TTL instead of waiting for
/// the 30 s `fill_timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_broken_lease_is_taken_over() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), RedisConfig::default())
        .await
        .expect("connect");
    let cache = patient(store, "broken");
    broken_redis_leases(&server.url(), &cache).await;
}

/// Memcached: a lease item with no expiry, or whose contents are not a
/// lease token, is taken over the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memcached_a_broken_lease_is_taken_over() {
    let server = MemcachedServer::start();
    let store = MemcachedStore::connect(&[server.addr()], MemcachedConfig::default())
        .await
        .expect("connect");
    let cache = patient(store.clone(), "broken");
    let fills = Arc::new(AtomicUsize::new(0));
    let token = "0123456789abcdef0123456789abcdef";
    let cases: [(&str, &[u8], u32); 4] = [
        ("junk-no-ttl", b"junk", 0),
        ("token-no-ttl", token.as_bytes(), 0),
        ("junk-with-ttl", b"not a token", 60),
        ("binary-with-ttl", &[0xC1, 0, 0xff, b'\n'], 60),
    ];
    for (i, (key, data, ttl)) in cases.iter().enumerate() {
        let lease = store.lease_item(&StoreKey::new(cache.namespace(), key));
        server.set_raw(&lease, data, *ttl);
        assert_eq!(
            fill_within(LEASE, &cache, key, &fills).await,
            "fresh",
            "{key}"
        );
        assert_eq!(fills.load(Ordering::SeqCst), i + 1, "{key}: one fill");
        assert!(
            !server.exists(&lease),
            "{key}: the commit dropped the lease"
        );
        assert_eq!(
            cache.peek(key).await.expect("get"),
            Some("fresh".to_owned())
        );
    }
}

/// A live lease (a token with a TTL) is still honoured: the caller waits
/// for it (here until it lapses) instead of taking it over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_live_lease_is_still_waited_for() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), RedisConfig::default())
        .await
        .expect("connect");
    let cache = patient(store, "live");
    let mut conn = redis_conn(&server.url()).await;
    let lease = redis_key(cache.namespace(), 'l', "k");
    // Another process's lease: its token, and a hold of 0 (live for as long
    // as its key lives).
    let token = "0123456789abcdef0123456789abcdef.0";
    let _: () = redis::cmd("SET")
        .arg(&lease)
        .arg(token)
        .arg("PX")
        .arg(800)
        .query_async(&mut conn)
        .await
        .expect("SET");
    let started = Instant::now();
    let fills = Arc::new(AtomicUsize::new(0));
    assert_eq!(
        fill_within(Duration::from_secs(5), &cache, "k", &fills).await,
        "fresh"
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(500),
        "took a live lease over after {waited:?}"
    );
    assert!(cache.stats().lease_waits >= 1);
}

/// Writes a hash over `user`'s value key in `namespace`.
async fn plant_hash(conn: &mut redis::aio::MultiplexedConnection, namespace: &str, user: &str) {
    let name = redis_key(namespace, 'v', user);
    let _: i64 = conn.del(&name).await.expect("DEL");
    let _: i64 = conn.hset(&name, "field", "foreign").await.expect("HSET");
}

/// A value key of another Redis type is a counted miss (not a store error,
/// so the breaker stays closed and the fill keeps its lease): 2 processes
/// × 100 callers run 1 fill in total, and the key reads normally after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_value_key_of_another_type_heals_with_one_fill_across_processes() {
    let server = RedisServer::start();
    let mut conn = redis_conn(&server.url()).await;
    plant_hash(&mut conn, &namespace(), "typed").await;
    let mut workers = vec![
        redis_worker(&server, None).await,
        redis_worker(&server, None).await,
    ];
    let command = Stampede {
        key: "typed".into(),
        callers: 100,
        fill: Duration::from_millis(200),
        counter: "fills".into(),
    }
    .to_string();
    for worker in &mut workers {
        worker.send(&command).await;
    }
    let mut values = BTreeSet::new();
    for worker in &mut workers {
        let report = StampedeReport::read(worker).await;
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        assert_eq!(report.ok, 100);
        values.extend(report.values);
    }
    assert_eq!(redis_count(&mut conn, "fills").await, 1, "{values:?}");
    assert_eq!(values.len(), 1, "{values:?}");
    let mut decode_failures = 0;
    for worker in &mut workers {
        let stats = stats(worker).await;
        assert_eq!(stats.store_errors, 0, "{stats:?}");
        decode_failures += stats.decode_failures;
    }
    assert!(decode_failures >= 1, "the foreign value was counted");
    let kind: String = redis::cmd("TYPE")
        .arg(redis_key(&namespace(), 'v', "typed"))
        .query_async(&mut conn)
        .await
        .expect("TYPE");
    assert_eq!(kind, "string");
    let store = RedisStore::connect(&server.url(), RedisConfig::default())
        .await
        .expect("connect");
    let fresh = Cache::<String>::builder(NAME)
        .store(store)
        .l1(false)
        .build()
        .expect("config");
    let read = fresh.peek("typed").await.expect("get");
    assert_eq!(read.as_ref(), values.iter().next());
    assert_eq!(fresh.stats().decode_failures, 0);
}

/// Every read path treats a value key of another type as a counted miss:
/// `get` (plain and after the store remembered the key's expiry),
/// `get_or_fill`, `get_many_or_fill`, and `set` replaces it.
async fn wrong_type_reads(url: &str, cache: &Cache<String>) {
    let mut conn = redis_conn(url).await;
    let ns = cache.namespace().to_owned();
    let before = cache.stats();
    plant_hash(&mut conn, &ns, "a").await;
    assert_eq!(cache.peek("a").await.expect("get is a miss"), None);
    let filled = cache
        .get_or_fill("a", || async { Ok::<_, std::io::Error>("A".to_owned()) })
        .await
        .expect("fill over a hash");
    assert_eq!(filled, "A");
    assert_eq!(cache.peek("a").await.expect("get"), Some("A".to_owned()));
    // Known to the store now (its expiry remembered): replaced by a hash
    // again, the next read is still a miss.
    plant_hash(&mut conn, &ns, "a").await;
    assert_eq!(cache.peek("a").await.expect("get is a miss"), None);

    plant_hash(&mut conn, &ns, "b").await;
    let keys = ["a", "b", "c"];
    let batch = cache
        .get_many_or_fill(&keys, |wanted: Vec<String>| async move {
            Ok::<_, std::io::Error>(
                wanted
                    .into_iter()
                    .map(|k| (k.clone(), k.to_uppercase()))
                    .collect::<HashMap<_, _>>(),
            )
        })
        .await;
    for key in keys {
        let answer = batch.get(key).expect("answered").as_ref().expect("value");
        assert_eq!(answer, &key.to_uppercase());
        assert_eq!(
            cache.peek(key).await.expect("get"),
            Some(key.to_uppercase())
        );
    }
    plant_hash(&mut conn, &ns, "d").await;
    cache
        .set("d", "D".to_owned())
        .await
        .expect("set over a hash");
    assert_eq!(cache.peek("d").await.expect("get"), Some("D".to_owned()));
    let stats = cache.stats();
    assert_eq!(stats.store_errors, before.store_errors, "{stats:?}");
    assert_eq!(stats.fail_open_fills, before.fail_open_fills, "{stats:?}");
    assert!(
        stats.decode_failures >= before.decode_failures + 3,
        "{stats:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_value_key_of_another_type_is_a_counted_miss_on_every_read_path() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), RedisConfig::default())
        .await
        .expect("connect");
    let cache = Cache::<String>::builder("typed")
        .store(store)
        .l1(false)
        .build()
        .expect("config");
    wrong_type_reads(&server.url(), &cache).await;
}

/// The same on a Redis Cluster: broken leases are taken over and values of
/// another type are counted misses, on every master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_broken_leases_and_foreign_types_heal() {
    let cluster = RedisCluster::start();
    let store = RedisStore::connect_cluster(&cluster.urls(), RedisConfig::default())
        .await
        .expect("connect");
    let cache = patient(store.clone(), "broken");
    broken_cluster_leases(&cluster, &cache).await;
    let typed = Cache::<String>::builder("typed")
        .store(store)
        .l1(false)
        .build()
        .expect("config");
    wrong_type_cluster_reads(&cluster, &typed).await;
}

async fn cluster_conn(cluster: &RedisCluster) -> redis::cluster_async::ClusterConnection {
    redis::cluster::ClusterClient::new(cluster.urls())
        .expect("cluster client")
        .get_async_connection()
        .await
        .expect("cluster connection")
}

async fn broken_cluster_leases(cluster: &RedisCluster, cache: &Cache<String>) {
    let mut conn = cluster_conn(cluster).await;
    let ns = cache.namespace().to_owned();
    let fills = Arc::new(AtomicUsize::new(0));
    for i in 0..6 {
        let key = format!("broken-{i}");
        let lease = redis_key(&ns, 'l', &key);
        if i % 2 == 0 {
            let _: () = conn.set(&lease, "junk").await.expect("SET");
        } else {
            let _: i64 = conn.hset(&lease, "f", "v").await.expect("HSET");
        }
        assert_eq!(
            fill_within(LEASE, cache, &key, &fills).await,
            "fresh",
            "{key}"
        );
        assert_eq!(fills.load(Ordering::SeqCst), i + 1, "{key}: one fill");
        let left: bool = conn.exists(&lease).await.expect("EXISTS");
        assert!(!left, "{key}: the commit dropped the taken-over lease");
    }
}

async fn wrong_type_cluster_reads(cluster: &RedisCluster, cache: &Cache<String>) {
    let mut conn = cluster_conn(cluster).await;
    let ns = cache.namespace().to_owned();
    let keys: Vec<String> = (0..12).map(|i| format!("typed-{i}")).collect();
    for key in &keys {
        let _: i64 = conn
            .hset(redis_key(&ns, 'v', key), "field", "foreign")
            .await
            .expect("HSET");
    }
    assert_eq!(cache.peek(&keys[0]).await.expect("get is a miss"), None);
    let filled = cache
        .get_or_fill(&keys[0], || async {
            Ok::<_, std::io::Error>("one".to_owned())
        })
        .await
        .expect("fill over a hash");
    assert_eq!(filled, "one");
    let batch = cache
        .get_many_or_fill(&keys[1..], |wanted: Vec<String>| async move {
            Ok::<_, std::io::Error>(
                wanted
                    .into_iter()
                    .map(|k| (k.clone(), format!("{k}!")))
                    .collect::<HashMap<_, _>>(),
            )
        })
        .await;
    for key in &keys[1..] {
        let answer = batch.get(key).expect("answered").as_ref().expect("value");
        assert_eq!(answer, &format!("{key}!"));
    }
    let stats = cache.stats();
    assert_eq!(stats.store_errors, 0, "{stats:?}");
    assert_eq!(stats.fail_open_fills, 0, "{stats:?}");
}

/// Memcached has no types, but garbage in a value item is the same: a
/// counted miss, filled once under a lease, replaced by the commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memcached_garbage_in_a_value_item_is_a_counted_miss_healed_by_one_fill() {
    let server = MemcachedServer::start();
    let store = MemcachedStore::connect(&[server.addr()], MemcachedConfig::default())
        .await
        .expect("connect");
    let cache = patient(store.clone(), "garbage");
    let fills = Arc::new(AtomicUsize::new(0));
    let cases: [(&str, &[u8], u32); 3] = [
        ("text", b"garbage", 60),
        ("no-ttl", b"garbage", 0),
        ("bad-frame", &[0xC1, 70, 1, 2, 3], 60),
    ];
    for (i, (key, data, ttl)) in cases.iter().enumerate() {
        let slot = store.slot_item(&StoreKey::new(cache.namespace(), key));
        server.set_raw(&slot, data, *ttl);
        let before = cache.stats();
        assert_eq!(cache.peek(key).await.expect("get is a miss"), None, "{key}");
        assert_eq!(
            fill_within(LEASE, &cache, key, &fills).await,
            "fresh",
            "{key}"
        );
        assert_eq!(fills.load(Ordering::SeqCst), i + 1, "{key}: one fill");
        assert_eq!(
            cache.peek(key).await.expect("get"),
            Some("fresh".to_owned())
        );
        let stats = cache.stats();
        assert!(
            stats.decode_failures > before.decode_failures,
            "{key}: {stats:?}"
        );
        assert_eq!(stats.leases_acquired, before.leases_acquired + 1, "{key}");
        assert_eq!(stats.store_errors, 0, "{key}: {stats:?}");
    }
}

/// `get_many_or_fill` with a 4 s loader in two processes at once, default
/// settings (lease TTL 3 s): the batch's leases are renewed while the
/// loader runs, so each key is loaded once in total (counted in Redis).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_slow_batch_in_two_processes_loads_each_key_once() {
    let server = RedisServer::start();
    let mut workers = vec![
        redis_worker(&server, None).await,
        redis_worker(&server, None).await,
    ];
    let keys = ["a", "b", "c"];
    let command = format!("batch {} 4000 loads:", keys.join(","));
    for worker in &mut workers {
        worker.send(&command).await;
    }
    let mut answers = Vec::new();
    for worker in &mut workers {
        let answer: BTreeMap<String, Result<String, String>> =
            serde_json::from_str(&worker.expect("@batch").await).expect("batch json");
        answers.push(answer);
    }
    let mut conn = redis_conn(&server.url()).await;
    for key in keys {
        assert_eq!(
            redis_count(&mut conn, &format!("loads:{key}")).await,
            1,
            "{key} loaded once across processes: {answers:?}"
        );
        let values: BTreeSet<_> = answers
            .iter()
            .map(|answer| answer.get(key).expect("answered").clone())
            .collect();
        assert_eq!(values.len(), 1, "{key}: one value everywhere: {values:?}");
        assert!(values.iter().all(Result::is_ok), "{values:?}");
    }
    let mut waits = 0;
    for worker in &mut workers {
        waits += stats(worker).await.lease_waits;
    }
    assert!(waits >= 1, "one process waited on the other's leases");
}

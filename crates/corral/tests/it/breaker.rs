//! The circuit breaker in front of a Redis-backed cache, against a real
//! `redis-server` frozen with SIGSTOP: it opens after consecutive store
//! calls that got no answer, then calls stop paying the timeout; after the
//! cool-down one probe goes through; it closes once Redis answers again.
//! Reads wait for a silent store for a lease's life before they fill
//! without a lease.

use std::collections::HashMap;
use std::time::Duration;

use corral::{Cache, RedisConfig, RedisStore, StoreErrorKind};
use corral_testkit::RedisServer;
use tokio::time::Instant;

const OP_TIMEOUT: Duration = Duration::from_millis(300);
const FAILURES: u32 = 3;
const COOL_DOWN: Duration = Duration::from_millis(600);
/// The lease TTL: how long a flight waits for a silent store.
const LEASE: Duration = Duration::from_millis(800);
/// Far below the store timeout: what a call costs while the breaker is
/// open (a generous margin over the ~0.1 ms measured).
const SKIPPED: Duration = Duration::from_millis(50);

fn config() -> RedisConfig {
    RedisConfig::default()
        .op_timeout(OP_TIMEOUT)
        .connect_timeout(OP_TIMEOUT)
}

async fn store(server: &RedisServer) -> RedisStore {
    RedisStore::connect(&server.url(), config())
        .await
        .expect("connect")
}

fn cache(store: &RedisStore, l1: bool) -> Cache<String> {
    Cache::<String>::builder("breaker")
        .store(store.clone())
        .l1(l1)
        .store_timeout(OP_TIMEOUT)
        .lease_ttl(LEASE)
        .circuit_breaker(FAILURES, COOL_DOWN)
        .build()
        .expect("config")
}

fn ok(value: &str) -> impl FnOnce() -> std::future::Ready<Result<String, String>> + Send + 'static {
    let value = value.to_owned();
    move || std::future::ready(Ok(value))
}

/// One `get_or_fill` of `key` filled with `value`: its answer and how long
/// it took.
async fn timed_read(cache: &Cache<String>, key: &str, value: &str) -> (String, Duration) {
    let started = Instant::now();
    let answer = cache.get_or_fill(key, ok(value)).await.expect("answers");
    (answer, started.elapsed())
}

fn summary(latencies: &[Duration]) -> String {
    let min = latencies.iter().min().copied().unwrap_or_default();
    let max = latencies.iter().max().copied().unwrap_or_default();
    format!("{} calls, {min:?} to {max:?}", latencies.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opens_on_a_frozen_redis_probes_once_and_closes_after_thaw() {
    let server = RedisServer::start();
    let store = store(&server).await;
    let cache = cache(&store, false);
    cache.set("warm", "up".into()).await.expect("set");
    assert_eq!(cache.peek("warm").await.expect("get"), Some("up".into()));

    server.reset_stats();
    server.freeze();
    // Closed: the first cold read waits for the silent store — its read
    // times out, its lease request waits out the rest of a lease's life —
    // then fills without a lease.
    let (answer, first) = timed_read(&cache, "before0", "filled").await;
    assert_eq!(answer, "filled");
    assert!(first >= LEASE, "the first read waited {first:?}");
    // The store has been silent for a lease's life: the next read pays its
    // own read's timeout (the third silent failure opens the breaker), and
    // fills at once.
    let (answer, second) = timed_read(&cache, "before1", "filled").await;
    assert_eq!(answer, "filled");
    assert!(second >= OP_TIMEOUT, "{second:?}");
    assert!(second < LEASE, "{second:?}");
    let before = vec![first, second];
    let opened_by = Instant::now();
    let stats = cache.stats();
    assert_eq!(stats.breaker_opened, 1, "{stats:?}");
    assert_eq!(stats.store_errors, u64::from(FAILURES));

    // Open: calls are skipped at once (a read's and its lease request's);
    // reads still answer by filling.
    let mut open = Vec::new();
    for i in 0..20 {
        let (answer, took) = timed_read(&cache, &format!("open{i}"), "filled open").await;
        assert_eq!(answer, "filled open");
        assert!(took < SKIPPED, "a call while open took {took:?}");
        open.push(took);
    }
    let batch = cache
        .get_many_or_fill(&["b1", "b2"], |keys: Vec<String>| async move {
            Ok::<_, String>(
                keys.into_iter()
                    .map(|k| (k, "batch".to_owned()))
                    .collect::<HashMap<_, _>>(),
            )
        })
        .await;
    assert_eq!(batch.get("b1").expect("b1").as_deref().ok(), Some("batch"));
    let writes_started = Instant::now();
    let refused = [
        cache.set("warm", "x".into()).await.expect_err("open"),
        cache.invalidate("warm").await.expect_err("open"),
        cache.invalidate_tag("t").await.expect_err("open"),
        cache.clear().await.expect_err("open"),
        cache.peek("warm").await.expect_err("open"),
    ];
    let writes_took = writes_started.elapsed();
    for error in &refused {
        assert!(error.is_breaker_open(), "{error}");
        match error {
            corral::Error::Store(e) => assert_eq!(e.kind(), StoreErrorKind::BreakerOpen),
            other => panic!("expected a store error: {other}"),
        }
    }
    assert!(
        writes_took < SKIPPED,
        "5 refused operations took {writes_took:?}"
    );
    let stats = cache.stats();
    // 20 reads and their lease requests, the second read's lease request,
    // the batch read and its keys' lease requests, 5 operations.
    assert_eq!(stats.store_calls_skipped, 2 * 20 + 1 + 3 + 5, "{stats:?}");
    assert_eq!(
        stats.store_errors,
        u64::from(FAILURES),
        "skips are no errors"
    );
    assert_eq!(stats.fail_open_fills, 2 + 20 + 2);
    assert_eq!(stats.breaker_opened, 1);

    // Half-open, Redis still frozen: of 50 concurrent reads exactly one is
    // the probe (and pays the timeout); its failure opens the breaker again.
    // None waits for the store: it has been silent for longer than a lease.
    tokio::time::sleep_until(opened_by + COOL_DOWN).await;
    let skipped = cache.stats().store_calls_skipped;
    let calls: Vec<_> = (0..50)
        .map(|i| {
            let cache = cache.clone();
            tokio::spawn(async move { timed_read(&cache, &format!("half{i}"), "filled").await })
        })
        .collect();
    let mut half_open = Vec::new();
    for call in calls {
        let (answer, took) = call.await.expect("task");
        assert_eq!(answer, "filled");
        half_open.push(took);
    }
    let reopened_by = Instant::now();
    let paid = half_open.iter().filter(|took| **took >= OP_TIMEOUT).count();
    assert_eq!(paid, 1, "one probe paid the timeout: {half_open:?}");
    let stats = cache.stats();
    // The 49 other reads and all 50 lease requests.
    assert_eq!(stats.store_calls_skipped - skipped, 49 + 50, "{stats:?}");
    assert_eq!(stats.breaker_opened, 1, "the failed probe kept it open");

    server.thaw();
    // Redis got 2 reads that timed out, 1 lease request and 1 probe while
    // frozen (each read is one plain GET: a value names its expiry; the
    // lease request is plain too, a `SET NX` and a `GET`), and nothing
    // from the skipped calls.
    let commands = server.command_stats();
    assert_eq!(commands.get("get"), Some(&4), "{commands:?}");
    assert_eq!(commands.get("set"), Some(&1), "{commands:?}");
    assert_eq!(commands.get("evalsha"), None, "{commands:?}");

    // After the cool-down the probe finds Redis answering (unless the
    // store's subscription came back first, which closes it): closed.
    tokio::time::sleep_until(reopened_by + COOL_DOWN).await;
    let (probe, probe_took) = timed_read(&cache, "warm", "not filled").await;
    assert_eq!(probe, "up", "read from Redis");
    cache
        .set("after", "thaw".into())
        .await
        .expect("writes again");
    assert_eq!(cache.peek("after").await.expect("get"), Some("thaw".into()));
    let (filled, _) = timed_read(&cache, "new", "stored").await;
    assert_eq!(filled, "stored");
    let stats = cache.stats();
    assert_eq!(stats.breaker_opened, 1);
    assert!(stats.commits >= 1, "fills are stored again: {stats:?}");
    let other = cache_on_new_store(&server).await;
    assert_eq!(other.peek("new").await.expect("get"), Some("stored".into()));

    eprintln!(
        "closed, frozen Redis (op timeout {OP_TIMEOUT:?}): {}",
        summary(&before)
    );
    eprintln!("open: {}", summary(&open));
    eprintln!("open: set + invalidate + invalidate_tag + clear + get refused in {writes_took:?}");
    eprintln!("half-open, 50 concurrent calls: {}", summary(&half_open));
    eprintln!("closed again after thaw: the probe read took {probe_took:?}");
}

async fn cache_on_new_store(server: &RedisServer) -> Cache<String> {
    cache(&store(server).await, false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l1_hits_do_not_ask_the_breaker() {
    let server = RedisServer::start();
    // No health check while it runs: the first one the frozen server left
    // unanswered would drop what the L1 holds on the store's word, "hot"
    // with it (`RedisStore` docs, "Coherence": "Silence").
    let config = config().health_interval(Duration::from_secs(60));
    let store = RedisStore::connect(&server.url(), config)
        .await
        .expect("connect");
    let cache = cache(&store, true);
    cache.set("hot", "in L1".into()).await.expect("set");
    assert_eq!(cache.local_len(), 1);
    server.freeze();
    for i in 0..FAILURES {
        timed_read(&cache, &format!("cold{i}"), "filled").await;
    }
    assert_eq!(cache.stats().breaker_opened, 1);
    let skipped = cache.stats().store_calls_skipped;
    let (answer, took) = timed_read(&cache, "hot", "not filled").await;
    assert_eq!(answer, "in L1");
    assert!(took < SKIPPED, "{took:?}");
    assert_eq!(cache.stats().store_calls_skipped, skipped);
    // A miss of the L1 fills without a lease, and the value is kept in
    // process (no store to fence it against).
    let (answer, took) = timed_read(&cache, "cold-open", "filled open").await;
    assert_eq!(answer, "filled open");
    assert!(took < SKIPPED, "{took:?}");
    assert_eq!(cache.stats().store_calls_skipped, skipped + 1);
    server.thaw();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turned_off_every_call_pays_the_timeout() {
    let server = RedisServer::start();
    let store = store(&server).await;
    let cache = Cache::<String>::builder("no-breaker")
        .store(store.clone())
        .store_timeout(OP_TIMEOUT)
        .no_circuit_breaker()
        .build()
        .expect("config");
    server.freeze();
    for i in 0..FAILURES + 2 {
        let (_, took) = timed_read(&cache, &format!("k{i}"), "filled").await;
        assert!(took >= OP_TIMEOUT, "{took:?}");
    }
    let error = cache.set("k", "v".into()).await.expect_err("frozen");
    assert!(error.is_timeout(), "{error}");
    let stats = cache.stats();
    assert_eq!((stats.breaker_opened, stats.store_calls_skipped), (0, 0));
    server.thaw();
}

#[tokio::test]
async fn without_a_store_nothing_changes() {
    let cache = Cache::<String>::builder("memory")
        .circuit_breaker(1, Duration::from_millis(1))
        .build()
        .expect("config");
    cache.set("k", "v".into()).await.expect("set");
    assert_eq!(cache.get_or_fill("k", ok("other")).await.expect("hit"), "v");
    cache.invalidate("k").await.expect("invalidate");
    cache.clear().await.expect("clear");
    let stats = cache.stats();
    assert_eq!((stats.breaker_opened, stats.store_calls_skipped), (0, 0));
    assert_eq!(stats.store_errors, 0);
}

#[test]
fn a_breaker_that_cannot_work_is_refused() {
    for (failures, cool_down) in [(0, Duration::from_secs(1)), (1, Duration::ZERO)] {
        let built = Cache::<String>::builder("bad")
            .circuit_breaker(failures, cool_down)
            .build();
        assert!(built.is_err(), "{failures} failures, {cool_down:?}");
    }
}

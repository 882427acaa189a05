//! The core contract in real time, against every tier: the in-process tier,
//! the embedded `MemoryStore`, a real standalone `redis-server` and a real
//! 3-master Redis Cluster, and (feature `memcached`) a real `memcached`.
//! Each backend runs every scenario in turn, on its own cache names. One
//! does not apply to Memcached: `entries_expire` (a 100 ms TTL), because
//! memcached keeps time in whole seconds; `tests/memcached.rs` checks expiry
//! there with whole-second TTLs.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use corral::store::MemoryStore;
use corral::store::StoreKey;
use corral::{Cache, CacheBuilder, Error, RedisConfig, RedisStore, MAX_KEY_LEN};
use corral_testkit::{until, Gate, RedisCluster, RedisServer};
use futures_util::FutureExt;
use redis::AsyncCommands;

enum Fixture {
    Local,
    Memory(MemoryStore),
    Redis(RedisServer, RedisStore),
    Cluster(RedisCluster, RedisStore),
    #[cfg(feature = "memcached")]
    Memcached(corral_testkit::MemcachedServer, corral::MemcachedStore),
    /// Another fixture's store with an L1 in front of it.
    Tiered(Box<Fixture>),
}

impl Fixture {
    async fn redis() -> Self {
        let server = RedisServer::start();
        let store = RedisStore::connect(&server.url(), RedisConfig::default())
            .await
            .expect("connect");
        Self::Redis(server, store)
    }

    async fn cluster() -> Self {
        let cluster = RedisCluster::start();
        let store = RedisStore::connect_cluster(&cluster.urls(), RedisConfig::default())
            .await
            .expect("connect cluster");
        Self::Cluster(cluster, store)
    }

    #[cfg(feature = "memcached")]
    async fn memcached() -> Self {
        let server = corral_testkit::MemcachedServer::start();
        let store =
            corral::MemcachedStore::connect(&[server.addr()], corral::MemcachedConfig::default())
                .await
                .expect("connect");
        Self::Memcached(server, store)
    }

    /// Whether expiry below a second can be observed.
    fn subsecond_expiry(&self) -> bool {
        match self {
            #[cfg(feature = "memcached")]
            Self::Memcached(..) => false,
            Self::Tiered(inner) => inner.subsecond_expiry(),
            _ => true,
        }
    }

    fn builder(&self, name: &str) -> CacheBuilder<String> {
        let builder = Cache::<String>::builder(name)
            .ttl(Duration::from_secs(60))
            .fill_timeout(Duration::from_secs(5))
            .lease_ttl(Duration::from_millis(500));
        match self {
            Self::Local => builder,
            Self::Memory(store) => builder.store(store.clone()).l1(false),
            Self::Redis(_, store) | Self::Cluster(_, store) => {
                builder.store(store.clone()).l1(false)
            }
            Self::Tiered(inner) => inner.builder(name).l1(true),
            #[cfg(feature = "memcached")]
            Self::Memcached(_, store) => builder.store(store.clone()).l1(false),
        }
    }

    fn cache(&self, name: &str) -> Cache<String> {
        self.builder(name).build().expect("config")
    }

    fn shared(&self) -> bool {
        !matches!(self, Self::Local)
    }

    /// Writes raw bytes as the stored value of `key`.
    async fn plant(&self, cache: &Cache<String>, key: &str, bytes: &[u8]) {
        let store_key = StoreKey::new(cache.namespace(), key);
        let name = corral::RedisStore::keys_of(&store_key).value;
        match self {
            Self::Local => unreachable!("no bytes in the in-process tier"),
            Self::Tiered(inner) => Box::pin(inner.plant(cache, key, bytes)).await,
            Self::Memory(store) => {
                store.put_raw(&store_key, bytes.to_vec(), Duration::from_secs(60))
            }
            Self::Redis(server, _) => {
                let client = redis::Client::open(server.url()).expect("client");
                let mut conn = client
                    .get_multiplexed_async_connection()
                    .await
                    .expect("conn");
                let _: () = conn.set_ex(&name, bytes, 60).await.expect("SET");
            }
            Self::Cluster(cluster, _) => {
                let client = redis::cluster::ClusterClient::new(cluster.urls()).expect("client");
                let mut conn = client.get_async_connection().await.expect("conn");
                let _: () = conn.set_ex(&name, bytes, 60).await.expect("SET");
            }
            #[cfg(feature = "memcached")]
            Self::Memcached(server, store) => {
                server.set_raw(&store.slot_item(&store_key), bytes, 60);
            }
        }
    }

    fn logs(&self) -> String {
        match self {
            Self::Redis(server, _) => corral_testkit::log_tail(&server.log()),
            Self::Cluster(cluster, _) => cluster.logs(),
            Self::Tiered(inner) => inner.logs(),
            #[cfg(feature = "memcached")]
            Self::Memcached(server, _) => corral_testkit::log_tail(&server.log()),
            _ => String::new(),
        }
    }
}

#[derive(Debug, PartialEq)]
struct SourceDown(u32);

impl std::fmt::Display for SourceDown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the source is down")
    }
}

impl std::error::Error for SourceDown {}

type Fill = std::pin::Pin<Box<dyn Future<Output = Result<String, SourceDown>> + Send>>;

fn gated(
    fills: &Arc<AtomicUsize>,
    gate: &Gate,
    value: &str,
) -> impl FnOnce() -> Fill + Send + 'static {
    let (fills, gate, value) = (Arc::clone(fills), gate.clone(), value.to_owned());
    move || {
        Box::pin(async move {
            fills.fetch_add(1, SeqCst);
            gate.wait().await;
            Ok(value)
        })
    }
}

async fn many_callers_one_fill(fx: &Fixture) {
    const CALLERS: usize = 1_000;
    let cache = fx.cache("many");
    let fills = Arc::new(AtomicUsize::new(0));
    let gate = Gate::new();
    let callers: Vec<_> = (0..CALLERS)
        .map(|_| {
            let (cache, fill) = (cache.clone(), gated(&fills, &gate, "v"));
            tokio::spawn(async move { cache.get_or_fill("hot", fill).await })
        })
        .collect();
    until("all callers joined", || {
        cache.stats().coalesced == CALLERS as u64 - 1
    })
    .await;
    gate.open();
    for caller in callers {
        assert_eq!(caller.await.expect("task").expect("value"), "v");
    }
    assert_eq!(fills.load(SeqCst), 1);
    until("flights retired", || cache.flights_in_progress() == 0).await;
    assert_eq!(cache.peek("hot").await.expect("get"), Some("v".into()));
}

async fn typed_errors_are_shared_and_retried(fx: &Fixture) {
    let cache = fx.cache("errors");
    let gate = Gate::new();
    let callers: Vec<_> = (0..50)
        .map(|_| {
            let (cache, gate) = (cache.clone(), gate.clone());
            tokio::spawn(async move {
                cache
                    .get_or_fill("k", move || async move {
                        gate.wait().await;
                        Err::<String, _>(SourceDown(7))
                    })
                    .await
            })
        })
        .collect();
    until("all callers joined", || cache.stats().coalesced == 49).await;
    gate.open();
    for caller in callers {
        match caller.await.expect("task") {
            Err(Error::Fill(error)) => assert_eq!(*error, SourceDown(7)),
            other => panic!("expected the typed fill error, got {other:?}"),
        }
    }
    assert_eq!(cache.peek("k").await.expect("get"), None);
    let value = cache
        .get_or_fill("k", || async { Ok::<_, SourceDown>("ok".to_owned()) })
        .await;
    assert_eq!(value.expect("retry"), "ok");
    until("flights retired", || cache.flights_in_progress() == 0).await;
}

async fn panics_are_typed_and_retried(fx: &Fixture) {
    let cache = fx.cache("panics");
    let result = cache
        .get_or_fill("k", || async {
            if true {
                panic!("boom");
            }
            Ok::<String, SourceDown>(String::new())
        })
        .await;
    assert!(result.expect_err("panicked").is_panic());
    let value = cache
        .get_or_fill("k", || async { Ok::<_, SourceDown>("ok".to_owned()) })
        .await;
    assert_eq!(value.expect("retry"), "ok");
    assert_eq!(cache.stats().fill_panics, 1);
}

async fn cancelled_callers_do_not_cancel_the_fill(fx: &Fixture) {
    let cache = fx.cache("cancel");
    let fills = Arc::new(AtomicUsize::new(0));
    let gate = Gate::new();
    let leader = {
        let (cache, fill) = (cache.clone(), gated(&fills, &gate, "kept"));
        tokio::spawn(async move { cache.get_or_fill("k", fill).await })
    };
    until("the fill started", || fills.load(SeqCst) == 1).await;
    let waiter = {
        let (cache, fill) = (cache.clone(), gated(&fills, &gate, "never"));
        tokio::spawn(async move { cache.get_or_fill("k", fill).await })
    };
    until("the waiter joined", || cache.stats().coalesced == 1).await;
    leader.abort();
    assert!(leader.await.expect_err("aborted").is_cancelled());
    gate.open();
    assert_eq!(waiter.await.expect("task").expect("value"), "kept");
    // Every caller gone: the value is still stored.
    let orphan_gate = Gate::new();
    let orphan = {
        let (cache, fill) = (cache.clone(), gated(&fills, &orphan_gate, "orphan"));
        tokio::spawn(async move { cache.get_or_fill("o", fill).await })
    };
    until("the orphan fill started", || fills.load(SeqCst) == 2).await;
    orphan.abort();
    let _ = orphan.await;
    orphan_gate.open();
    until("the flight retired", || cache.flights_in_progress() == 0).await;
    assert_eq!(cache.peek("o").await.expect("get"), Some("orphan".into()));
    assert_eq!(fills.load(SeqCst), 2);
}

struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, SeqCst);
    }
}

async fn fill_timeout_frees_the_key(fx: &Fixture) {
    let cache = fx
        .builder("timeout")
        .fill_timeout(Duration::from_millis(300))
        .build()
        .expect("config");
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = DropFlag(Arc::clone(&dropped));
    let started = Instant::now();
    let result = cache
        .get_or_fill("k", move || async move {
            let _flag = flag;
            std::future::pending::<()>().await;
            Ok::<String, SourceDown>("never".into())
        })
        .await;
    let elapsed = started.elapsed();
    assert!(result.expect_err("timed out").is_timeout());
    assert!(
        elapsed >= Duration::from_millis(300) && elapsed < Duration::from_secs(3),
        "{elapsed:?}"
    );
    until("the fill was dropped", || dropped.load(SeqCst)).await;
    until("flights retired", || cache.flights_in_progress() == 0).await;
    assert_eq!(cache.peek("k").await.expect("get"), None);
    let value = cache
        .get_or_fill("k", || async { Ok::<_, SourceDown>("fresh".to_owned()) })
        .await;
    assert_eq!(value.expect("a new fill"), "fresh");
}

async fn writes_during_a_flight_win(fx: &Fixture) {
    for invalidate in [true, false] {
        let cache = fx.cache(if invalidate { "invalidate" } else { "set" });
        let fills = Arc::new(AtomicUsize::new(0));
        let gate = Gate::new();
        let flight = {
            let (cache, fill) = (cache.clone(), gated(&fills, &gate, "old"));
            tokio::spawn(async move { cache.get_or_fill("k", fill).await })
        };
        until("the fill started", || fills.load(SeqCst) == 1).await;
        let expected = if invalidate {
            cache.invalidate("k").await.expect("invalidate");
            let open = Gate::new();
            open.open();
            let new = cache.get_or_fill("k", gated(&fills, &open, "new")).await;
            assert_eq!(new.expect("a new flight"), "new");
            "new"
        } else {
            cache.set("k", "written".into()).await.expect("set");
            "written"
        };
        gate.open();
        assert_eq!(flight.await.expect("task").expect("value"), "old");
        until("flights retired", || cache.flights_in_progress() == 0).await;
        assert_eq!(
            cache.peek("k").await.expect("get").as_deref(),
            Some(expected)
        );
    }
}

async fn entries_expire(fx: &Fixture) {
    let cache = fx.cache("expiry");
    cache
        .set_with_ttl("k", "v".into(), Duration::from_millis(100))
        .await
        .expect("set");
    assert_eq!(cache.peek("k").await.expect("get"), Some("v".into()));
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(cache.peek("k").await.expect("get"), None);
}

async fn invalid_keys_are_rejected(fx: &Fixture) {
    let cache = fx.cache("keys");
    let long = "k".repeat(MAX_KEY_LEN + 1);
    for key in ["", "a\rb", long.as_str()] {
        let result = cache
            .get_or_fill(key, || async { Ok::<_, SourceDown>("x".to_owned()) })
            .await;
        assert!(result.expect_err("rejected").is_invalid_key());
        assert!(cache
            .set(key, "v".into())
            .await
            .expect_err("rejected")
            .is_invalid_key());
    }
    for key in [
        "}starts-with-brace",
        "{tag}inside",
        "a}b{c",
        &"k".repeat(MAX_KEY_LEN),
    ] {
        cache
            .set(key, format!("value of {key}"))
            .await
            .expect("set");
        assert_eq!(
            cache.peek(key).await.expect("get"),
            Some(format!("value of {key}"))
        );
        cache.invalidate(key).await.expect("invalidate");
        let value = cache
            .get_or_fill(key, || async { Ok::<_, SourceDown>("filled".to_owned()) })
            .await;
        assert_eq!(value.expect("fill"), "filled");
    }
}

async fn corrupt_bytes_are_a_counted_miss(fx: &Fixture) {
    let cache = fx.cache("corrupt");
    for (i, garbage) in [&b""[..], b"garbage", &[0xff; 100]].into_iter().enumerate() {
        let key = format!("k{i}");
        fx.plant(&cache, &key, garbage).await;
        assert_eq!(cache.peek(&key).await.expect("get"), None);
        let value = cache
            .get_or_fill(&key, || async { Ok::<_, SourceDown>("fixed".to_owned()) })
            .await;
        assert_eq!(value.expect("fill over garbage"), "fixed");
        assert_eq!(cache.peek(&key).await.expect("get"), Some("fixed".into()));
    }
    assert_eq!(cache.stats().decode_failures, 6);
}

/// Runs one scenario; on failure, prints the servers' logs before the panic
/// goes on.
async fn step(fx: &Fixture, name: &str, scenario: impl Future<Output = ()>) {
    let started = Instant::now();
    if let Err(panic) = AssertUnwindSafe(scenario).catch_unwind().await {
        eprintln!("scenario {name} failed; server logs:\n{}", fx.logs());
        std::panic::resume_unwind(panic);
    }
    eprintln!("{name:<45} {:?}", started.elapsed());
}

async fn run(fx: Fixture) {
    step(&fx, "many_callers_one_fill", many_callers_one_fill(&fx)).await;
    step(
        &fx,
        "typed_errors",
        typed_errors_are_shared_and_retried(&fx),
    )
    .await;
    step(&fx, "panics", panics_are_typed_and_retried(&fx)).await;
    step(
        &fx,
        "cancelled_callers",
        cancelled_callers_do_not_cancel_the_fill(&fx),
    )
    .await;
    step(&fx, "fill_timeout", fill_timeout_frees_the_key(&fx)).await;
    step(
        &fx,
        "writes_during_a_flight",
        writes_during_a_flight_win(&fx),
    )
    .await;
    if fx.subsecond_expiry() {
        step(&fx, "entries_expire", entries_expire(&fx)).await;
    }
    step(&fx, "invalid_and_odd_keys", invalid_keys_are_rejected(&fx)).await;
    if fx.shared() {
        step(&fx, "corrupt_bytes", corrupt_bytes_are_a_counted_miss(&fx)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_tier() {
    run(Fixture::Local).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store() {
    run(Fixture::Memory(MemoryStore::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_behind_an_l1() {
    run(Fixture::Tiered(Box::new(Fixture::Memory(
        MemoryStore::new(),
    ))))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_redis_behind_an_l1() {
    run(Fixture::Tiered(Box::new(Fixture::redis().await))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_redis() {
    run(Fixture::redis().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster() {
    run(Fixture::cluster().await).await;
}

#[cfg(feature = "memcached")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memcached() {
    run(Fixture::memcached().await).await;
}

#[cfg(feature = "memcached")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memcached_behind_an_l1() {
    run(Fixture::Tiered(Box::new(Fixture::memcached().await))).await;
}

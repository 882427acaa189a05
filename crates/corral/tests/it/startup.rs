//! A service's start during a Redis outage: the cache is built while Redis
//! is down, serves fail-open, and uses Redis once it is back — in the same
//! process, without a restart.

use std::time::{Duration, Instant};

use corral::{CacheConfig, StoreErrorKind, StoreHealth};
use corral_testkit::{RedisCluster, RedisServer};

/// Calls `attempt` until it answers `Some`, for at most 10 s (Redis and the
/// store's background reconnection run on their own).
async fn eventually<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    mut attempt: impl FnMut() -> F,
) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(found) = attempt().await {
            return found;
        }
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::task::yield_now().await;
    }
}

/// While Redis is down: reads fail open (the fill runs, its value is
/// returned), writes report a typed store error worth retrying, and the
/// health check says the store failed.
async fn serves_fail_open(cache: &corral::Cache<String>) {
    let value = cache
        .get_or_fill("user:1", || async {
            Ok::<_, std::io::Error>("filled without Redis".to_owned())
        })
        .await
        .expect("fail-open read");
    assert_eq!(value, "filled without Redis");
    assert!(cache.stats().fail_open_fills >= 1, "{:?}", cache.stats());
    let error = cache
        .set("user:2", "x".to_owned())
        .await
        .expect_err("Redis is down");
    let store_error = match &error {
        corral::Error::Store(store) => store,
        other => panic!("not a store error: {other:?}"),
    };
    assert!(
        matches!(
            store_error.kind(),
            StoreErrorKind::Unavailable | StoreErrorKind::Timeout | StoreErrorKind::BreakerOpen
        ),
        "{error}"
    );
    assert!(store_error.is_retryable(), "{error}");
    assert!(matches!(
        cache.health().await.store,
        StoreHealth::Failed { .. }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_starts_while_redis_is_down_and_uses_it_once_it_is_up() {
    let mut server = RedisServer::start();
    server.kill();
    assert!(!server.is_running());

    // What a service does at start: settings from its environment.
    let config = CacheConfig::from_vars(
        "CORRAL_",
        [
            ("CORRAL_REDIS_URL", server.url().as_str()),
            ("CORRAL_REDIS_CLUSTER_URLS", ""),
            ("CORRAL_L1", "true"),
            ("CORRAL_TTL", "60s"),
            ("CORRAL_STORE_TIMEOUT", "200ms"),
            ("CORRAL_BREAKER_COOL_DOWN", "100ms"),
        ],
    )
    .expect("valid settings");
    let cache = config
        .build::<String>("startup")
        .await
        .expect("built while Redis is down");
    serves_fail_open(&cache).await;

    // Redis comes up: the same cache, in the same process, uses it.
    server.restart();
    eventually("a write reaches Redis", || {
        let cache = cache.clone();
        async move { cache.set("user:3", "in Redis".to_owned()).await.ok() }
    })
    .await;
    let keys = server.cli(&["KEYS", "*"]);
    assert!(keys.contains(&value_key("user:3")), "{keys}");

    // Another replica, started now, reads what the first one wrote, and a
    // fill of the first one lands in Redis for the other to read.
    let other = config.build::<String>("startup").await.expect("second");
    assert_eq!(
        other.peek("user:3").await.expect("read").as_deref(),
        Some("in Redis")
    );
    let filled = cache
        .get_or_fill("user:4", || async {
            Ok::<_, std::io::Error>("filled with Redis".to_owned())
        })
        .await
        .expect("read");
    assert_eq!(filled, "filled with Redis");
    assert_eq!(
        other.peek("user:4").await.expect("read").as_deref(),
        Some("filled with Redis"),
        "the fill was stored in Redis"
    );
    assert!(matches!(
        cache.health().await.store,
        StoreHealth::Answered { .. }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_starts_while_its_cluster_is_down_and_uses_it_once_it_is_up() {
    let mut cluster = RedisCluster::start();
    for node in 0..cluster.nodes().len() {
        cluster.kill(node);
    }
    let urls = cluster.urls().join(",");
    let config = CacheConfig::from_vars(
        "CORRAL_",
        [
            ("CORRAL_REDIS_CLUSTER_URLS", urls.as_str()),
            ("CORRAL_TTL", "60s"),
            ("CORRAL_STORE_TIMEOUT", "200ms"),
            ("CORRAL_BREAKER_COOL_DOWN", "100ms"),
        ],
    )
    .expect("valid settings");
    let cache = config
        .build::<String>("startup")
        .await
        .expect("built while the cluster is down");
    serves_fail_open(&cache).await;

    // The cluster comes back: the same cache uses it, and another replica
    // started now reads what it wrote.
    cluster.restart_all();
    eventually("a write reaches the cluster", || {
        let cache = cache.clone();
        async move { cache.set("user:3", "in Redis".to_owned()).await.ok() }
    })
    .await;
    let other = config.build::<String>("startup").await.expect("second");
    let read = eventually("the other replica reads it", || {
        let other = other.clone();
        async move { other.peek("user:3").await.ok() }
    })
    .await;
    assert_eq!(read.as_deref(), Some("in Redis"));
    assert!(matches!(
        cache.health().await.store,
        StoreHealth::Answered { .. }
    ));
}

/// The Redis key of cache `startup`'s value of `key` (see `RedisStore`'s
/// key layout).
fn value_key(key: &str) -> String {
    corral::RedisStore::keys_of(&corral::store::StoreKey::new("startup:v0", key)).value
}

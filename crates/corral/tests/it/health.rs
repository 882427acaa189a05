//! `Cache::health`: whether the store answers, and how fast.

use std::time::Duration;

use corral::{Cache, RedisConfig, RedisStore, StoreErrorKind, StoreHealth};
use corral_testkit::RedisServer;

const OP_TIMEOUT: Duration = Duration::from_millis(300);

#[tokio::test]
async fn an_in_process_cache_is_healthy_without_a_store() {
    let cache = Cache::<String>::builder("local").build().expect("config");
    let health = cache.health().await;
    assert!(health.is_ok());
    assert!(matches!(health.store, StoreHealth::None));
    assert_eq!(health.flights_in_progress, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_answering_frozen_and_killed() {
    let mut server = RedisServer::start();
    let config = RedisConfig::default()
        .op_timeout(OP_TIMEOUT)
        .connect_timeout(OP_TIMEOUT);
    let store = RedisStore::connect(&server.url(), config)
        .await
        .expect("store");
    let cache = Cache::<String>::builder("health")
        .store(store)
        .build()
        .expect("config");

    let health = cache.health().await;
    assert!(health.is_ok(), "{health:?}");
    match health.store {
        StoreHealth::Answered { latency } => assert!(latency < OP_TIMEOUT, "{latency:?}"),
        other => panic!("expected an answer: {other:?}"),
    }

    server.freeze();
    let health = cache.health().await;
    server.thaw();
    assert!(!health.is_ok());
    match health.store {
        StoreHealth::Failed { latency, error } => {
            assert_eq!(error.kind(), StoreErrorKind::Timeout, "{error}");
            assert!(latency >= OP_TIMEOUT, "{latency:?}");
        }
        other => panic!("expected a timeout: {other:?}"),
    }
    assert!(cache.health().await.is_ok(), "answers again once thawed");

    server.kill();
    let health = cache.health().await;
    assert!(!health.is_ok(), "{health:?}");
}

//! Two tiers on a real Redis: the backplane reaches another store's caches
//! (as it reaches another process's) over Redis pub/sub.

use std::time::Duration;

use corral::{Cache, RedisConfig, RedisStore};
use corral_testkit::RedisServer;

async fn store(server: &RedisServer) -> RedisStore {
    RedisStore::connect(&server.url(), RedisConfig::default())
        .await
        .expect("connect")
}

fn cache(store: &RedisStore, name: &str) -> Cache<String> {
    Cache::<String>::builder(name)
        .store(store.clone())
        .l1(true)
        .ttl(Duration::from_secs(60))
        .build()
        .expect("config")
}

/// Reads `key` through `cache` until it answers `want`, within 5 s.
async fn read_until(cache: &Cache<String>, key: &str, want: Option<&str>) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let got = cache.get(key).await.expect("read");
        if got.as_deref() == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{key}: still {got:?}, want {want:?}"
        );
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn a_set_through_another_store_evicts_this_l1() {
    let server = RedisServer::start();
    let (one, two) = (store(&server).await, store(&server).await);
    let (a, b) = (cache(&one, "bp"), cache(&two, "bp"));
    // Wait until both subscriptions are live: a message from each side
    // reaches the other.
    b.set("warm", "1".into()).await.expect("set");
    read_until(&a, "warm", Some("1")).await;

    b.set("k", "v1".into()).await.expect("set");
    read_until(&a, "k", Some("v1")).await;
    let l2_reads = a.stats().l2_hits;
    for _ in 0..20 {
        assert_eq!(a.get("k").await.expect("read").as_deref(), Some("v1"));
    }
    assert_eq!(a.stats().l2_hits, l2_reads, "served from the L1");

    b.set("k", "v2".into()).await.expect("set");
    read_until(&a, "k", Some("v2")).await;
    b.invalidate("k").await.expect("invalidate");
    read_until(&a, "k", None).await;
    assert!(a.stats().backplane_messages >= 3);
    assert_eq!(b.stats().backplane_messages, 0, "b only heard itself");
}

//! Two tiers on a real Redis: the backplane reaches another store's caches
//! (as it reaches another process's) over Redis pub/sub.

use std::time::Duration;

use corral::{Cache, RedisConfig, RedisStore};
use corral_testkit::RedisServer;

mod support;
use support::until_heard;

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
        let got = cache.peek(key).await.expect("read");
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

/// Waits until `done()` holds, within 5 s.
async fn until(done: impl Fn() -> bool, what: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within 5 s"
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

    // The message of this set must have reached `a` before `a` reads the
    // key into its L1: a message handled after that read would evict the
    // fresh copy and send the next read to the L2.
    let heard = a.stats().backplane_messages;
    b.set("k", "v1".into()).await.expect("set");
    until(
        || a.stats().backplane_messages > heard,
        "the set of k reached a",
    )
    .await;
    read_until(&a, "k", Some("v1")).await;
    let l2_reads = a.stats().l2_hits;
    for _ in 0..20 {
        assert_eq!(a.peek("k").await.expect("read").as_deref(), Some("v1"));
    }
    assert_eq!(a.stats().l2_hits, l2_reads, "served from the L1");

    b.set("k", "v2".into()).await.expect("set");
    read_until(&a, "k", Some("v2")).await;
    b.invalidate("k").await.expect("invalidate");
    read_until(&a, "k", None).await;
    assert!(a.stats().backplane_messages >= 3);
    assert_eq!(b.stats().backplane_messages, 0, "b only heard itself");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cancelled_during_its_first_read_leaves_the_flight_to_a_spawned_leader() {
    let server = RedisServer::start();
    let store = store(&server).await;
    // A cache with an L1 reads the store under its flight (one without
    // reads before claiming one, and a cancelled read leaves no flight).
    let cache = Cache::<String>::builder("first-read")
        .store(store.clone())
        .l1(true)
        .ttl(Duration::from_secs(60))
        .build()
        .expect("config");
    let writer = Cache::<String>::builder("first-read")
        .store(store.clone())
        .build()
        .expect("config");
    writer.set("k", "stored".into()).await.expect("set");
    assert_eq!(cache.local_len(), 0);

    server.freeze();
    let leader = {
        let cache = cache.clone();
        tokio::spawn(async move {
            cache
                .get_or_fill("k", || async {
                    Ok::<_, std::io::Error>("filled".to_string())
                })
                .await
        })
    };
    corral_testkit::until("the leader's first read is in flight", || {
        cache.flights_in_progress() == 1
    })
    .await;
    let joiner = {
        let cache = cache.clone();
        tokio::spawn(async move {
            cache
                .get_or_fill("k", || async {
                    Ok::<_, std::io::Error>("joiner".to_string())
                })
                .await
        })
    };
    corral_testkit::until("the joiner joined", || cache.stats().coalesced == 1).await;
    leader.abort();
    assert!(leader.await.expect_err("aborted").is_cancelled());
    server.thaw();
    assert_eq!(joiner.await.expect("task").expect("value"), "stored");
    corral_testkit::until("the flight ended", || cache.flights_in_progress() == 0).await;
    assert_eq!(cache.stats().fills, 0);
}

#[tokio::test]
async fn a_subscriber_reconnect_drops_the_l1() {
    let server = RedisServer::start();
    let store = store(&server).await;
    let cache = cache(&store, "reconnect");
    // A message from another cache of the namespace: the subscription is
    // up, and its first confirmation was no reset.
    let other = self::cache(&store, "reconnect");
    until_heard(&other, &cache).await;
    let resets = cache.stats().backplane_resets;
    assert_eq!(resets, 0, "a healthy start");
    for key in ["a", "b", "c"] {
        cache.set(key, key.into()).await.expect("set");
    }
    assert_eq!(cache.local_len(), 3);

    // Messages published while the subscription is down are lost: the
    // cache must not trust what it kept.
    let killed = server.cli(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    assert_eq!(killed.trim(), "1", "one subscriber connection");
    corral_testkit::until("resubscribed", || cache.stats().backplane_resets > resets).await;
    assert_eq!(cache.local_len(), 0, "the L1 was dropped");
    assert_eq!(cache.peek("b").await.expect("read").as_deref(), Some("b"));
}

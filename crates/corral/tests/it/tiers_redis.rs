//! Two tiers on a real Redis: the backplane reaches another store's caches
//! (as it reaches another process's) over Redis pub/sub.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use corral::{Cache, RedisConfig, RedisStore};
use corral_testkit::RedisServer;

use crate::support::{l1_cache, until_heard};

async fn store(server: &RedisServer) -> RedisStore {
    RedisStore::connect(&server.url(), RedisConfig::default())
        .await
        .expect("connect")
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
    let (a, b) = (l1_cache(&one, "bp"), l1_cache(&two, "bp"));
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
    // A cache with an L1 asks the store for the value or the lease under
    // its flight (one without reads before claiming one, and a cancelled
    // read leaves no flight).
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
    corral_testkit::until("the leader's first request is in flight", || {
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
    let cache = l1_cache(&store, "reconnect");
    // A message from another cache of the namespace: the subscription is
    // up, and its first confirmation was no reset.
    let other = l1_cache(&store, "reconnect");
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

/// A caller cancelled while its flight's first request (value or lease)
/// is out — received by Redis, held by `CLIENT PAUSE WRITE` — leaves that
/// request to the flight's leader: the lease Redis grants it is the
/// flight's, so the caller that joined gets the one fill's value without
/// waiting for that lease to lapse (30 s here) as if another process held
/// it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cancelled_while_its_lease_request_is_out_leaves_the_lease_to_its_flight() {
    let server = RedisServer::start();
    let slow = Duration::from_secs(10);
    let store = RedisStore::connect(
        &server.url(),
        RedisConfig::default()
            .op_timeout(slow)
            .connect_timeout(slow),
    )
    .await
    .expect("connect");
    let cache = Cache::<String>::builder("cancelled")
        .store(store)
        .l1(true)
        .store_timeout(slow)
        .lease_ttl(Duration::from_secs(30))
        .fill_timeout(Duration::from_secs(60))
        .build()
        .expect("config");
    let channel = format!("corral:{}:filled", cache.namespace());
    until(
        || server.cli(&["PUBSUB", "NUMSUB", &channel]).lines().nth(1) == Some("1"),
        "the store subscribed",
    )
    .await;

    server.cli(&["CLIENT", "PAUSE", "20000", "WRITE"]);
    let fills = Arc::new(AtomicUsize::new(0));
    let call = |cache: &Cache<String>| {
        let (cache, fills) = (cache.clone(), Arc::clone(&fills));
        tokio::spawn(async move {
            cache
                .get_or_fill("k", move || async move {
                    fills.fetch_add(1, SeqCst);
                    Ok::<_, String>("v".to_owned())
                })
                .await
        })
    };
    let leader = call(&cache);
    let joined = call(&cache);
    until(|| cache.stats().coalesced == 1, "the second caller joined").await;
    // The lease script reached the server and waits there.
    until(
        || {
            server
                .cli(&["INFO", "clients"])
                .contains("blocked_clients:1")
        },
        "the lease request is held by the pause",
    )
    .await;
    leader.abort();
    let cancelled = leader.await.expect_err("cancelled");
    assert!(cancelled.is_cancelled());
    server.cli(&["CLIENT", "UNPAUSE"]);

    let value = tokio::time::timeout(Duration::from_secs(10), joined)
        .await
        .expect("answered before the lease could lapse")
        .expect("task")
        .expect("value");
    assert_eq!(value, "v");
    assert_eq!(fills.load(SeqCst), 1, "one fill");
    let stats = cache.stats();
    assert_eq!(stats.leases_acquired, 1, "{stats:?}");
    assert_eq!(stats.lease_waits, 0, "the flight's own lease: {stats:?}");
    assert_eq!(stats.commits, 1, "{stats:?}");
}

//! Counters that mean what their docs say: a lease wait is one wait,
//! however many polls it takes; a backplane reset is a possible loss of
//! messages, never a healthy start.

use std::time::Duration;

use corral::store::MemoryStore;
use corral::{Cache, RedisConfig, RedisStore};
use corral_testkit::RedisServer;
use tokio::sync::oneshot;

use crate::support::until_heard;

#[tokio::test(start_paused = true)]
async fn one_wait_for_another_fill_is_counted_once() {
    let store = MemoryStore::new();
    let build = || {
        Cache::<String>::builder("waits")
            .store(store.clone())
            .poll_interval(Duration::from_millis(50))
            .build()
            .expect("valid config")
    };
    let (leader, waiter) = (build(), build());
    let (started, filling) = oneshot::channel();
    let leading = tokio::spawn({
        let leader = leader.clone();
        async move {
            leader
                .get_or_fill("k", || async move {
                    let _ = started.send(());
                    // 20 poll intervals of the waiter.
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    Ok::<_, std::io::Error>("from the leader".to_owned())
                })
                .await
        }
    });
    filling.await.expect("the leader's fill started");
    let value = waiter
        .get_or_fill("k", || async {
            Ok::<_, std::io::Error>("from the waiter".to_owned())
        })
        .await
        .expect("value");
    assert_eq!(value, "from the leader");
    assert_eq!(
        leading.await.expect("joined").expect("value"),
        "from the leader"
    );
    let stats = waiter.stats();
    assert_eq!(stats.fills, 0, "{stats:?}");
    assert_eq!(stats.lease_waits, 1, "{stats:?}");
}

fn on(store: &RedisStore) -> Cache<String> {
    Cache::<String>::builder("resets")
        .store(store.clone())
        .l1(true)
        .build()
        .expect("valid config")
}

async fn connect(server: &RedisServer) -> RedisStore {
    RedisStore::connect(&server.url(), RedisConfig::default())
        .await
        .expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_start_is_no_backplane_reset() {
    let server = RedisServer::start();
    let other = on(&connect(&server).await);
    for start in 0..100 {
        let cache = on(&connect(&server).await);
        let key = format!("user:{start}");
        let value = cache
            .get_or_fill(&key, || async {
                Ok::<_, std::io::Error>("filled".to_owned())
            })
            .await
            .expect("value");
        assert_eq!(value, "filled");
        until_heard(&other, &cache).await;
        let stats = cache.stats();
        assert_eq!(stats.backplane_resets, 0, "start {start}: {stats:?}");
        assert_eq!(
            cache.local_len(),
            1,
            "start {start}: the first fill's L1 copy"
        );
        assert_eq!(
            cache.peek(&key).await.expect("read").as_deref(),
            Some("filled")
        );
        assert_eq!(cache.stats().l2_hits, stats.l2_hits, "an L1 hit");
    }
    assert_eq!(other.stats().backplane_resets, 0);
    // One SUBSCRIBE per store: the namespace was never subscribed twice.
    let subscribes = server.command_stats().get("subscribe").copied();
    assert_eq!(subscribes, Some(101), "{:?}", server.command_stats());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_disconnect_is_one_reset() {
    let server = RedisServer::start();
    let (a, b) = (on(&connect(&server).await), on(&connect(&server).await));
    a.set("k", "v".to_owned()).await.expect("set");
    assert_eq!(a.peek("k").await.expect("read").as_deref(), Some("v"));
    until_heard(&b, &a).await;
    until_heard(&a, &b).await;
    assert_eq!(a.stats().backplane_resets, 0);

    let killed = server.cli(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    assert_eq!(killed.trim(), "2", "both subscribers: {killed}");
    corral_testkit::until("a re-subscribed", || a.stats().backplane_resets >= 1).await;
    corral_testkit::until("b re-subscribed", || b.stats().backplane_resets >= 1).await;
    // The L1 was dropped: messages may have been lost meanwhile.
    assert_eq!(a.local_len(), 0);
    until_heard(&b, &a).await;
    until_heard(&a, &b).await;
    assert_eq!(a.stats().backplane_resets, 1, "{:?}", a.stats());
    assert_eq!(b.stats().backplane_resets, 1, "{:?}", b.stats());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_that_listens_to_nothing_opens_no_subscriber() {
    let server = RedisServer::start();
    let store = connect(&server).await;
    let quiet = Cache::<String>::builder("quiet")
        .store(store.clone())
        .l1(false)
        .backplane(false)
        .build()
        .expect("valid config");
    quiet.set("k", "v".to_owned()).await.expect("set");
    assert_eq!(quiet.peek("k").await.expect("read").as_deref(), Some("v"));
    let filled = quiet
        .get_or_fill("k2", || async { Ok::<_, std::io::Error>("v2".to_owned()) })
        .await
        .expect("value");
    assert_eq!(filled, "v2");
    let subscribers = server.cli(&["CLIENT", "LIST", "TYPE", "pubsub"]);
    assert_eq!(subscribers.trim(), "", "no subscriber connection");

    // A cache that listens makes the store subscribe.
    let listening = Cache::<String>::builder("listening")
        .store(store.clone())
        .build()
        .expect("valid config");
    let value = listening
        .get_or_fill("k", || async { Ok::<_, std::io::Error>("v".to_owned()) })
        .await
        .expect("value");
    assert_eq!(value, "v");
    let subscribers = server.cli(&["CLIENT", "LIST", "TYPE", "pubsub"]);
    assert_eq!(subscribers.trim().lines().count(), 1, "{subscribers}");
}

#[test]
fn an_l1_without_backplane_or_lifetime_is_warned_about() {
    let (captured, _guard) = corral_testkit::capture(tracing::Level::WARN);
    let store = MemoryStore::new();
    let builder = || {
        Cache::<String>::builder("warned")
            .store(store.clone())
            .l1(true)
    };
    let _bounded = builder()
        .backplane(false)
        .l1_lifetime(Duration::from_secs(5))
        .build()
        .expect("valid config");
    let _coherent = builder().build().expect("valid config");
    // (Built outside a runtime, a cache with the feature `metrics` also
    // warns that its exporter cannot start: not what is checked here.)
    let text = captured.text();
    assert!(
        !text.contains("l1_lifetime"),
        "nothing to warn about: {text}"
    );
    let _unbounded = builder().backplane(false).build().expect("valid config");
    let text = captured.text();
    assert!(text.contains("l1_lifetime"), "{text}");
    assert!(text.contains("warned"), "{text}");
}

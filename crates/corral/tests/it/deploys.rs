//! Rolling deploys across a `version` bump: two builds of one cache, each
//! in its own namespace on one Redis, and invalidations that reach the
//! other build with `also_invalidate_versions`.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

use corral::{Cache, RedisConfig, RedisStore, WriteOptions};
use corral_testkit::{until, RedisServer};

/// One build's process: its own store (connections) and cache `users`
/// of `version`, whose invalidations also go to `also`.
async fn build(server: &RedisServer, version: u32, also: &[u32]) -> Cache<String> {
    let store = RedisStore::connect(&server.url(), RedisConfig::default())
        .await
        .expect("connect");
    Cache::<String>::builder("users")
        .store(store)
        .l1(true)
        .version(version)
        .also_invalidate_versions(also.iter().copied())
        .build()
        .expect("valid config")
}

/// Serves `key` through `cache`, counting the fills in `fills`.
async fn serve(cache: &Cache<String>, key: &str, fills: &Arc<AtomicUsize>) -> String {
    let (fills, value) = (Arc::clone(fills), format!("{key} filled"));
    cache
        .get_or_fill(key, move || async move {
            fills.fetch_add(1, SeqCst);
            Ok::<_, std::io::Error>(value)
        })
        .await
        .expect("value")
}

/// `key` is gone from `cache`: from its L1 (by the backplane message) and
/// from its namespace in the store, so the next read fills again.
async fn gone(cache: &Cache<String>, key: &str) {
    until(&format!("{key} left the L1"), || cache.local_len() == 0).await;
    assert_eq!(cache.peek(key).await.expect("read"), None, "{key}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_build_invalidates_what_the_other_serves() {
    let server = RedisServer::start();
    // Version 2 was shipped knowing version 3 comes; version 3 knows 2.
    let old = build(&server, 2, &[3]).await;
    let new = build(&server, 3, &[2]).await;
    let (old_fills, new_fills) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));

    // Each build serves the key from its own namespace.
    serve(&old, "user:1", &old_fills).await;
    serve(&new, "user:1", &new_fills).await;
    assert_eq!((old_fills.load(SeqCst), new_fills.load(SeqCst)), (1, 1));

    // The new build invalidates: the old one stops serving it.
    new.invalidate("user:1").await.expect("invalidate");
    gone(&old, "user:1").await;
    serve(&old, "user:1", &old_fills).await;
    assert_eq!(old_fills.load(SeqCst), 2, "the old build filled again");

    // And the other way round.
    serve(&new, "user:1", &new_fills).await;
    assert_eq!(new_fills.load(SeqCst), 2);
    old.invalidate("user:1").await.expect("invalidate");
    gone(&new, "user:1").await;
    serve(&new, "user:1", &new_fills).await;
    assert_eq!(new_fills.load(SeqCst), 3, "the new build filled again");

    // A tag invalidation from either build reaches the other's entries.
    old.clear().await.expect("clear");
    gone(&new, "user:1").await;
    let tagged = || WriteOptions::new().tags(["tenant:acme"]);
    old.set("old:1", "a".to_owned())
        .options(tagged())
        .await
        .expect("set");
    new.set("new:1", "b".to_owned())
        .options(tagged())
        .await
        .expect("set");
    new.invalidate_tag("tenant:acme")
        .await
        .expect("invalidate tag");
    gone(&old, "old:1").await;
    gone(&new, "new:1").await;

    // A `set` in one build drops the other build's copy of the key.
    serve(&old, "user:2", &old_fills).await;
    new.set("user:2", "from the new build".to_owned())
        .await
        .expect("set");
    gone(&old, "user:2").await;

    // `clear` from the new build empties the old build too.
    serve(&old, "user:3", &old_fills).await;
    new.clear().await.expect("clear");
    gone(&old, "user:3").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_it_an_invalidation_stays_in_its_own_build() {
    let server = RedisServer::start();
    let old = build(&server, 2, &[]).await;
    let new = build(&server, 3, &[]).await;
    let fills = Arc::new(AtomicUsize::new(0));
    serve(&old, "user:1", &fills).await;
    new.invalidate("user:1").await.expect("invalidate");
    // The old build's namespace still holds the value: it serves it.
    assert_eq!(
        old.peek("user:1").await.expect("read").as_deref(),
        Some("user:1 filled")
    );
    let keys = server.cli(&["KEYS", "corral:v:users:v2:*"]);
    assert!(keys.contains("}:user:1"), "{keys}");
}

//! Tags and clear: invalidating groups of entries without scanning keys,
//! across caches sharing a store, and fencing fills that run meanwhile.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use corral::clock::TokioClock;
use corral::store::MemoryStore;
use corral::{Cache, Error, FillOptions, InvalidKey, RedisConfig, RedisStore};
use corral_testkit::RedisServer;

fn on(store: &MemoryStore, l1: bool) -> Cache<String> {
    Cache::<String>::builder("tags")
        .store(store.clone())
        .l1(l1)
        .clock(TokioClock::new())
        .ttl(Duration::from_secs(60))
        .build()
        .expect("config")
}

fn tagged(tags: &[&str]) -> FillOptions {
    FillOptions::new().tags(tags)
}

/// Fills `key` with `value` under `tags` through `cache`, counting calls.
async fn fill(
    cache: &Cache<String>,
    key: &str,
    tags: &[&str],
    value: &str,
    calls: &Arc<AtomicUsize>,
) -> String {
    let (calls, value) = (Arc::clone(calls), value.to_owned());
    cache
        .get_or_fill(key, move || async move {
            calls.fetch_add(1, SeqCst);
            Ok::<_, std::io::Error>(value)
        })
        .options(tagged(tags))
        .await
        .expect("fill")
}

#[tokio::test(start_paused = true)]
async fn a_tag_invalidation_in_one_cache_is_seen_by_the_others_next_read() {
    for (l1_a, l1_b) in [(true, true), (false, false), (true, false)] {
        let store = MemoryStore::new();
        let (a, b) = (on(&store, l1_a), on(&store, l1_b));
        let calls = Arc::new(AtomicUsize::new(0));
        fill(&a, "user:1", &["team:7"], "ada", &calls).await;
        fill(&a, "user:2", &["team:7", "admins"], "bob", &calls).await;
        fill(&a, "user:3", &["team:8"], "cy", &calls).await;
        for key in ["user:1", "user:2", "user:3"] {
            assert!(b.peek(key).await.expect("read").is_some(), "{key}");
        }

        b.invalidate_tag("team:7").await.expect("invalidate tag");
        for reader in [&a, &b] {
            assert_eq!(reader.peek("user:1").await.expect("read"), None);
            assert_eq!(reader.peek("user:2").await.expect("read"), None);
            assert_eq!(
                reader.peek("user:3").await.expect("read").as_deref(),
                Some("cy")
            );
        }
        // The next fill stores anew, under the new version.
        assert_eq!(
            fill(&a, "user:1", &["team:7"], "ada2", &calls).await,
            "ada2"
        );
        assert_eq!(
            b.peek("user:1").await.expect("read").as_deref(),
            Some("ada2")
        );
        assert_eq!(calls.load(SeqCst), 4, "l1 {l1_a}/{l1_b}");
        assert!(a.stats().tag_misses + b.stats().tag_misses >= 1);
    }
}

#[tokio::test(start_paused = true)]
async fn clear_makes_every_entry_a_miss_everywhere() {
    let store = MemoryStore::new();
    let (a, b) = (on(&store, true), on(&store, false));
    let calls = Arc::new(AtomicUsize::new(0));
    fill(&a, "x", &[], "1", &calls).await;
    fill(&a, "y", &["t"], "2", &calls).await;
    a.set("z", "3".into()).await.expect("set");
    b.clear().await.expect("clear");
    assert_eq!(a.local_len(), 0);
    for reader in [&a, &b] {
        for key in ["x", "y", "z"] {
            assert_eq!(reader.peek(key).await.expect("read"), None, "{key}");
        }
    }
    // Writes after the clear are served.
    a.set("z", "4".into()).await.expect("set");
    assert_eq!(b.peek("z").await.expect("read").as_deref(), Some("4"));
}

/// A fill running in a task, its "started" signal and its release.
type Gated = (
    tokio::task::JoinHandle<Result<String, Error<std::io::Error>>>,
    tokio::sync::oneshot::Receiver<()>,
    tokio::sync::oneshot::Sender<()>,
);

/// Runs a fill of `key` tagged `tags` through `cache` that waits for
/// `release` once started.
fn gated_fill(cache: &Cache<String>, key: &'static str, tags: &'static [&'static str]) -> Gated {
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
    let cache = cache.clone();
    let task = tokio::spawn(async move {
        cache
            .get_or_fill(key, move || async move {
                let _ = started_tx.send(());
                let _ = release_rx.await;
                Ok::<_, std::io::Error>("filled before".to_string())
            })
            .options(tagged(tags))
            .await
    });
    (task, started_rx, release_tx)
}

#[tokio::test(start_paused = true)]
async fn a_tag_invalidation_or_clear_during_a_fill_fences_it() {
    for (l1, by_clear) in [(true, false), (false, false), (true, true), (false, true)] {
        let store = MemoryStore::new();
        let (a, b) = (on(&store, l1), on(&store, l1));
        let (task, started, release) = gated_fill(&a, "k", &["t"]);
        started.await.expect("fill started");
        if by_clear {
            b.clear().await.expect("clear");
        } else {
            b.invalidate_tag("t").await.expect("invalidate tag");
        }
        release.send(()).expect("release");
        assert_eq!(task.await.expect("task").expect("fill"), "filled before");
        assert_eq!(a.stats().commits_refused, 1, "l1 {l1}, clear {by_clear}");
        assert_eq!(a.peek("k").await.expect("read"), None);
        assert_eq!(b.peek("k").await.expect("read"), None);
        assert_eq!(a.flights_in_progress(), 0);
    }
}

#[tokio::test(start_paused = true)]
async fn tags_work_in_process_without_a_store() {
    let cache = Cache::<String>::builder("local-tags")
        .clock(TokioClock::new())
        .build()
        .expect("config");
    let calls = Arc::new(AtomicUsize::new(0));
    fill(&cache, "a", &["t"], "1", &calls).await;
    fill(&cache, "b", &["u"], "2", &calls).await;
    cache.invalidate_tag("t").await.expect("invalidate tag");
    assert_eq!(cache.peek("a").await.expect("read"), None);
    assert_eq!(cache.peek("b").await.expect("read").as_deref(), Some("2"));

    let (task, started, release) = gated_fill(&cache, "c", &["u"]);
    started.await.expect("fill started");
    cache.invalidate_tag("u").await.expect("invalidate tag");
    release.send(()).expect("release");
    assert_eq!(task.await.expect("task").expect("fill"), "filled before");
    assert_eq!(cache.peek("c").await.expect("read"), None, "fenced");
    assert_eq!(cache.peek("b").await.expect("read"), None);
    cache.clear().await.expect("clear");
}

#[tokio::test(start_paused = true)]
async fn bad_tags_are_refused_clearly() {
    let store = MemoryStore::new();
    let cache = on(&store, true);
    let fill = || async { Ok::<_, std::io::Error>("v".to_string()) };
    let error = cache
        .get_or_fill("k", fill)
        .options(tagged(&[""]))
        .await
        .expect_err("empty tag");
    assert!(matches!(error, Error::InvalidKey(InvalidKey::Empty)));
    let many: Vec<String> = (0..64).map(|i| format!("t{i}")).collect();
    let error = cache
        .get_or_fill("k", fill)
        .options(FillOptions::new().tags(&many))
        .await
        .expect_err("too many");
    assert!(matches!(
        error,
        Error::InvalidKey(InvalidKey::TooManyTags { count: 64 })
    ));
    assert!(cache.invalidate_tag("bad\u{0}tag").await.is_err());
    assert_eq!(cache.flights_in_progress(), 0);
}

#[tokio::test]
async fn tags_and_clear_across_redis_connections() {
    let server = RedisServer::start();
    let url = server.url();
    let one = RedisStore::connect(&url, RedisConfig::default())
        .await
        .expect("connect");
    let two = RedisStore::connect(&url, RedisConfig::default())
        .await
        .expect("connect");
    let build = |store: &RedisStore| {
        Cache::<String>::builder("tags-redis")
            .store(store.clone())
            .l1(true)
            .ttl(Duration::from_secs(60))
            .build()
            .expect("config")
    };
    let (a, b) = (build(&one), build(&two));
    let calls = Arc::new(AtomicUsize::new(0));
    fill(&a, "k1", &["t"], "v1", &calls).await;
    fill(&a, "k2", &[], "v2", &calls).await;
    assert_eq!(b.peek("k1").await.expect("read").as_deref(), Some("v1"));

    let heard = a.stats().backplane_messages;
    b.invalidate_tag("t").await.expect("invalidate tag");
    // The next read of `a` after the message reached it misses. A tag
    // invalidation is two messages on the namespace's channel, in order:
    // the version that tells fills a tag moved, then the tag's own; `a`
    // must have acted on the second.
    corral_testkit::until("a hears the tag invalidation", || {
        a.stats().backplane_messages >= heard + 2
    })
    .await;
    assert_eq!(a.peek("k1").await.expect("read"), None);
    assert_eq!(b.peek("k1").await.expect("read"), None);
    assert_eq!(a.peek("k2").await.expect("read").as_deref(), Some("v2"));

    let heard = a.stats().backplane_messages;
    b.clear().await.expect("clear");
    corral_testkit::until("a hears the clear", || a.stats().backplane_messages > heard).await;
    assert_eq!(a.peek("k2").await.expect("read"), None);
    assert_eq!(a.local_len(), 0);

    // A fresh cache with no L1 and no remembered versions sees it too.
    let c = Cache::<String>::builder("tags-redis")
        .store(one.clone())
        .backplane(false)
        .build()
        .expect("config");
    assert_eq!(c.peek("k2").await.expect("read"), None);
    fill(&c, "k2", &[], "v3", &calls).await;
    assert_eq!(b.peek("k2").await.expect("read").as_deref(), Some("v3"));
}

//! Two tiers on the embedded store, in paused time: an L1 in front of a
//! shared store, kept coherent by the store's backplane.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use corral::clock::TokioClock;
use corral::store::MemoryStore;
use corral::{Cache, CacheBuilder};

const TTL: Duration = Duration::from_secs(10);

fn builder(store: &MemoryStore) -> CacheBuilder<String> {
    Cache::<String>::builder("tiers")
        .store(store.clone())
        .l1(true)
        .clock(TokioClock::new())
        .ttl(TTL)
}

fn cache(store: &MemoryStore) -> Cache<String> {
    builder(store).build().expect("config")
}

/// A fill that counts its calls and answers `value`.
fn counted(
    calls: &Arc<AtomicUsize>,
    value: &str,
) -> impl FnOnce() -> std::future::Ready<Result<String, std::io::Error>> + Send + 'static {
    let (calls, value) = (Arc::clone(calls), value.to_owned());
    move || {
        calls.fetch_add(1, SeqCst);
        std::future::ready(Ok(value))
    }
}

#[tokio::test(start_paused = true)]
async fn an_l2_hit_fills_the_l1_and_later_reads_stay_in_process() {
    let store = MemoryStore::new();
    let (a, b) = (cache(&store), cache(&store));
    b.set("k", "v1".into()).await.expect("set");
    let calls = Arc::new(AtomicUsize::new(0));

    assert_eq!(
        a.get_or_fill("k", counted(&calls, "x"))
            .await
            .expect("read"),
        "v1"
    );
    assert_eq!(a.stats().l2_hits, 1);
    assert_eq!(a.local_len(), 1);
    for _ in 0..10 {
        assert_eq!(
            a.get_or_fill("k", counted(&calls, "x"))
                .await
                .expect("read"),
            "v1"
        );
    }
    let stats = a.stats();
    assert_eq!((stats.hits, stats.l2_hits, stats.fills), (11, 1, 0));
    assert_eq!(calls.load(SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn a_fill_lands_in_both_tiers_once() {
    let store = MemoryStore::new();
    let (a, b) = (cache(&store), cache(&store));
    let calls = Arc::new(AtomicUsize::new(0));
    let callers: Vec<_> = (0..50)
        .map(|_| {
            let (a, fill) = (a.clone(), counted(&calls, "filled"));
            tokio::spawn(async move { a.get_or_fill("cold", fill).await })
        })
        .collect();
    for caller in callers {
        assert_eq!(caller.await.expect("task").expect("read"), "filled");
    }
    assert_eq!(calls.load(SeqCst), 1);
    assert_eq!(a.local_len(), 1);
    assert_eq!(a.stats().commits, 1);
    // The other cache finds it in the L2 without filling.
    assert_eq!(
        b.get_or_fill("cold", counted(&calls, "x"))
            .await
            .expect("read"),
        "filled"
    );
    assert_eq!(calls.load(SeqCst), 1);
    assert_eq!(b.stats().l2_hits, 1);
}

#[tokio::test(start_paused = true)]
async fn an_l1_copy_is_never_fresher_than_its_l2_original() {
    let store = MemoryStore::new();
    let (a, b) = (
        builder(&store).backplane(false).build().expect("config"),
        cache(&store),
    );
    b.set("k", "v1".into()).await.expect("set");
    tokio::time::advance(Duration::from_secs(6)).await;
    assert_eq!(a.peek("k").await.expect("read").as_deref(), Some("v1"));
    assert_eq!(a.local_len(), 1);
    // 6 s old when copied: the copy is fresh for 4 s more, not 10.
    tokio::time::advance(Duration::from_millis(3_900)).await;
    assert_eq!(a.peek("k").await.expect("read").as_deref(), Some("v1"));
    let hits = a.stats().l2_hits;
    tokio::time::advance(Duration::from_millis(200)).await;
    assert_eq!(
        a.peek("k").await.expect("read"),
        None,
        "expired in both tiers"
    );
    assert_eq!(a.stats().l2_hits, hits, "no servable copy left anywhere");
}

#[tokio::test(start_paused = true)]
async fn writes_elsewhere_reach_the_l1_through_the_backplane() {
    let store = MemoryStore::new();
    let (a, b) = (cache(&store), cache(&store));
    let calls = Arc::new(AtomicUsize::new(0));
    b.set("k", "v1".into()).await.expect("set");
    assert_eq!(a.peek("k").await.expect("read").as_deref(), Some("v1"));

    b.set("k", "v2".into()).await.expect("set");
    assert_eq!(a.peek("k").await.expect("read").as_deref(), Some("v2"));

    b.invalidate("k").await.expect("invalidate");
    assert_eq!(a.peek("k").await.expect("read"), None);

    // A fill committed by the other cache evicts the old copy too.
    a.set("k", "mine".into()).await.expect("set");
    b.invalidate("k").await.expect("invalidate");
    assert_eq!(
        b.get_or_fill("k", counted(&calls, "theirs"))
            .await
            .expect("fill"),
        "theirs"
    );
    assert_eq!(a.peek("k").await.expect("read").as_deref(), Some("theirs"));
    assert!(a.stats().backplane_messages >= 4);
}

#[tokio::test(start_paused = true)]
async fn a_cache_ignores_its_own_messages() {
    let store = MemoryStore::new();
    let a = cache(&store);
    let _b = cache(&store);
    a.set("k", "v1".into()).await.expect("set");
    assert_eq!(a.local_len(), 1);
    assert_eq!(a.peek("k").await.expect("read").as_deref(), Some("v1"));
    let stats = a.stats();
    assert_eq!((stats.backplane_messages, stats.l2_hits), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn without_the_backplane_a_stale_copy_lasts_until_the_l1_lifetime() {
    let store = MemoryStore::new();
    let a = builder(&store)
        .backplane(false)
        .l1_lifetime(Duration::from_secs(2))
        .build()
        .expect("config");
    let b = cache(&store);
    b.set("k", "v1".into()).await.expect("set");
    assert_eq!(a.peek("k").await.expect("read").as_deref(), Some("v1"));
    b.set("k", "v2".into()).await.expect("set");
    tokio::time::advance(Duration::from_millis(1_900)).await;
    assert_eq!(
        a.peek("k").await.expect("read").as_deref(),
        Some("v1"),
        "unseen"
    );
    tokio::time::advance(Duration::from_millis(200)).await;
    assert_eq!(a.peek("k").await.expect("read").as_deref(), Some("v2"));
    assert_eq!(a.stats().backplane_messages, 0);
}

#[tokio::test(start_paused = true)]
async fn lost_messages_drop_the_whole_l1() {
    let store = MemoryStore::new();
    let a = cache(&store);
    for key in ["a", "b", "c"] {
        a.set(key, key.into()).await.expect("set");
    }
    assert_eq!(a.local_len(), 3);
    store.simulate_lost_messages();
    assert_eq!(a.local_len(), 0);
    assert_eq!(a.stats().backplane_resets, 1);
    // The values are still in the L2.
    assert_eq!(a.peek("b").await.expect("read").as_deref(), Some("b"));
}

#[tokio::test(start_paused = true)]
async fn a_fill_in_flight_does_not_overwrite_a_newer_write_from_elsewhere_in_the_l1() {
    let store = MemoryStore::new();
    let (a, b) = (cache(&store), cache(&store));
    let (entered_tx, entered_rx) = tokio::sync::oneshot::channel();
    let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
    let filling = {
        let a = a.clone();
        tokio::spawn(async move {
            a.get_or_fill("k", move || async move {
                let _ = entered_tx.send(());
                let _ = release_rx.await;
                Ok::<_, std::io::Error>("old".to_string())
            })
            .await
        })
    };
    entered_rx.await.expect("fill started");
    b.set("k", "new".into()).await.expect("set");
    release_tx.send(()).expect("release");
    assert_eq!(filling.await.expect("task").expect("fill"), "old");
    assert_eq!(a.peek("k").await.expect("read").as_deref(), Some("new"));
    assert_eq!(a.stats().commits_refused, 1);
}

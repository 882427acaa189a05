//! Freshness and failure policies under paused tokio time, in the
//! in-process tier and through a shared `MemoryStore` (whose clock is
//! tokio's): stale-while-revalidate, eager refresh, refresh limits,
//! fail-safe, soft timeout, negative and adaptive answers, and invalidation
//! winning over all of them.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use corral::clock::TokioClock;
use corral::store::MemoryStore;
use corral::{Answer, Cache, CacheBuilder, Cached, Error, Fetched, Freshness};
use corral_testkit::{until_yielding, Gate};
use tokio::time::{advance, Instant};

#[derive(Debug, PartialEq)]
struct SourceDown;

impl std::fmt::Display for SourceDown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the source is down")
    }
}

impl std::error::Error for SourceDown {}

/// The tiers judged by tokio's paused clock: in process only, a shared
/// store only, and an L1 in front of a shared store.
#[derive(Clone, Copy, Debug)]
enum Tier {
    Local,
    Memory,
    Tiered,
}

const TIERS: [Tier; 3] = [Tier::Local, Tier::Memory, Tier::Tiered];

/// Builds caches of one tier; caches of the Memory tier share one store,
/// like processes sharing a Redis.
struct Caches {
    tier: Tier,
    store: MemoryStore,
}

impl Caches {
    fn new(tier: Tier) -> Self {
        Self {
            tier,
            store: MemoryStore::new(),
        }
    }

    fn build(
        &self,
        configure: impl FnOnce(CacheBuilder<String>) -> CacheBuilder<String>,
    ) -> Cache<String> {
        let builder = Cache::<String>::builder("fresh")
            .ttl(Duration::from_secs(10))
            .fill_timeout(Duration::from_secs(30))
            .clock(TokioClock::new());
        let builder = match self.tier {
            Tier::Local => builder,
            Tier::Memory => builder.store(self.store.clone()).l1(false),
            Tier::Tiered => builder.store(self.store.clone()).l1(true),
        };
        configure(builder).build().expect("config")
    }
}

type BoxFill = Pin<Box<dyn Future<Output = Result<String, SourceDown>> + Send>>;

/// A fill that counts its calls, waits for the gate and returns `value`.
fn gated(
    calls: &Arc<AtomicUsize>,
    gate: &Gate,
    value: &str,
) -> impl FnOnce() -> BoxFill + Send + 'static {
    let (calls, gate, value) = (Arc::clone(calls), gate.clone(), value.to_owned());
    move || {
        Box::pin(async move {
            calls.fetch_add(1, SeqCst);
            gate.wait().await;
            Ok(value)
        })
    }
}

fn value(value: &str) -> impl FnOnce() -> BoxFill + Send + 'static {
    let value = value.to_owned();
    move || Box::pin(async move { Ok(value) })
}

fn failing(calls: &Arc<AtomicUsize>) -> impl FnOnce() -> BoxFill + Send + 'static {
    let calls = Arc::clone(calls);
    move || {
        Box::pin(async move {
            calls.fetch_add(1, SeqCst);
            Err(SourceDown)
        })
    }
}

async fn fetch(
    cache: &Cache<String>,
    fill: impl FnOnce() -> BoxFill + Send + 'static,
) -> Result<Fetched<String>, Error<SourceDown>> {
    cache
        .get_or_fill_answer("k", move || async move { fill().await.map(Answer::value) })
        .await
}

#[tokio::test(start_paused = true)]
async fn stale_readers_are_served_at_once_while_one_refresh_runs() {
    for tier in TIERS {
        let caches = Caches::new(tier);
        // Two instances: two processes for the shared tier.
        let replicas = [
            caches.build(|b| b.grace(Duration::from_secs(10))),
            caches.build(|b| b.grace(Duration::from_secs(10))),
        ];
        let replicas = match tier {
            Tier::Local => vec![replicas[0].clone()],
            Tier::Memory | Tier::Tiered => replicas.to_vec(),
        };
        replicas[0]
            .get_or_fill("k", value("old"))
            .await
            .expect("fill");
        advance(Duration::from_secs(11)).await;
        let calls = Arc::new(AtomicUsize::new(0));
        let gate = Gate::new();
        let readers: Vec<_> = (0..200)
            .map(|i| {
                let cache = replicas[i % replicas.len()].clone();
                let fill = gated(&calls, &gate, "new");
                tokio::spawn(async move { fetch(&cache, fill).await })
            })
            .collect();
        for reader in readers {
            let fetched = reader.await.expect("task").expect("served");
            assert_eq!(
                fetched,
                Fetched::new(Some("old".into()), Freshness::Stale),
                "{tier:?}"
            );
        }
        assert_eq!(calls.load(SeqCst), 1, "{tier:?}: exactly one refresh");
        gate.open();
        until_yielding(|| replicas.iter().all(|r| r.flights_in_progress() == 0)).await;
        for replica in &replicas {
            let fresh = fetch(replica, value("unused")).await.expect("fresh");
            assert_eq!(
                fresh,
                Fetched::new(Some("new".into()), Freshness::Fresh),
                "{tier:?}"
            );
        }
        assert_eq!(calls.load(SeqCst), 1);
        let refreshes: u64 = replicas.iter().map(|r| r.stats().refreshes).sum();
        assert_eq!(refreshes, 1, "{tier:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_refresh_stands_down_while_another_process_holds_the_lease() {
    let caches = Caches::new(Tier::Memory);
    let a = caches.build(|b| b.grace(Duration::from_secs(10)));
    let b = caches.build(|b| b.grace(Duration::from_secs(10)));
    a.get_or_fill("k", value("old")).await.expect("fill");
    advance(Duration::from_secs(11)).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let gate = Gate::new();
    assert_eq!(
        fetch(&a, gated(&calls, &gate, "new"))
            .await
            .expect("stale")
            .freshness,
        Freshness::Stale
    );
    until_yielding(|| calls.load(SeqCst) == 1).await;
    assert_eq!(
        fetch(&b, gated(&calls, &gate, "other"))
            .await
            .expect("stale")
            .value
            .as_deref(),
        Some("old")
    );
    until_yielding(|| b.flights_in_progress() == 0).await;
    assert_eq!(b.stats().refreshes_stood_down, 1);
    gate.open();
    until_yielding(|| a.flights_in_progress() == 0).await;
    assert_eq!(calls.load(SeqCst), 1);
    assert_eq!(b.peek("k").await.expect("get").as_deref(), Some("new"));
}

#[tokio::test(start_paused = true)]
async fn a_full_refresh_limiter_skips_and_a_later_read_retries() {
    for tier in TIERS {
        let caches = Caches::new(tier);
        let cache = caches.build(|b| b.grace(Duration::from_secs(30)).refresh_limit(1));
        for key in ["k1", "k2"] {
            cache.get_or_fill(key, value("old")).await.expect("fill");
        }
        advance(Duration::from_secs(11)).await;
        let calls = Arc::new(AtomicUsize::new(0));
        let gate = Gate::new();
        let read = |key: &'static str, fill: Box<dyn FnOnce() -> BoxFill + Send>| {
            let cache = cache.clone();
            async move {
                cache
                    .get_or_fill_answer(key, move || async move { fill().await.map(Answer::value) })
                    .await
                    .expect("stale")
            }
        };
        assert_eq!(
            read("k1", Box::new(gated(&calls, &gate, "new1")))
                .await
                .freshness,
            Freshness::Stale
        );
        until_yielding(|| calls.load(SeqCst) == 1).await;
        assert_eq!(
            read("k2", Box::new(gated(&calls, &gate, "new2")))
                .await
                .freshness,
            Freshness::Stale
        );
        assert_eq!(cache.stats().refreshes_skipped, 1, "{tier:?}");
        gate.open();
        until_yielding(|| cache.flights_in_progress() == 0).await;
        assert_eq!(
            read("k2", Box::new(gated(&calls, &gate, "new2")))
                .await
                .freshness,
            Freshness::Stale
        );
        until_yielding(|| cache.flights_in_progress() == 0).await;
        assert_eq!(calls.load(SeqCst), 2, "{tier:?}: the later read refreshed");
        assert_eq!(
            cache.peek("k2").await.expect("get").as_deref(),
            Some("new2")
        );
    }
}

#[tokio::test(start_paused = true)]
async fn eager_refresh_starts_before_the_entry_goes_stale() {
    for tier in TIERS {
        let caches = Caches::new(tier);
        let cache = caches.build(|b| b.eager_refresh(0.5));
        cache.get_or_fill("k", value("old")).await.expect("fill");
        let calls = Arc::new(AtomicUsize::new(0));
        let gate = Gate::new();
        advance(Duration::from_secs(4)).await;
        assert_eq!(
            fetch(&cache, gated(&calls, &gate, "new"))
                .await
                .expect("fresh")
                .value
                .as_deref(),
            Some("old")
        );
        assert_eq!(
            calls.load(SeqCst),
            0,
            "{tier:?}: not due before half the TTL"
        );
        advance(Duration::from_secs(2)).await;
        let fetched = fetch(&cache, gated(&calls, &gate, "new"))
            .await
            .expect("fresh");
        assert_eq!(fetched, Fetched::new(Some("old".into()), Freshness::Fresh));
        until_yielding(|| calls.load(SeqCst) == 1).await;
        gate.open();
        until_yielding(|| cache.flights_in_progress() == 0).await;
        assert_eq!(
            cache.peek("k").await.expect("get").as_deref(),
            Some("new"),
            "{tier:?}"
        );
        assert_eq!(cache.stats().refreshes, 1);
        // The refreshed entry lives a full TTL from its refresh.
        advance(Duration::from_secs(9)).await;
        assert_eq!(cache.peek("k").await.expect("get").as_deref(), Some("new"));
    }
}

#[tokio::test(start_paused = true)]
async fn past_ttl_and_grace_the_key_is_a_cold_miss() {
    for tier in TIERS {
        let caches = Caches::new(tier);
        let cache = caches.build(|b| b.grace(Duration::from_secs(5)));
        cache.get_or_fill("k", value("old")).await.expect("fill");
        advance(Duration::from_secs(16)).await;
        assert_eq!(
            cache.peek_entry("k").await.expect("lookup"),
            Cached::Miss,
            "{tier:?}"
        );
        let fetched = fetch(&cache, value("new")).await.expect("filled");
        assert_eq!(fetched, Fetched::new(Some("new".into()), Freshness::Fresh));
    }
}

#[tokio::test(start_paused = true)]
async fn fail_safe_serves_the_old_value_throttles_and_never_outlives_its_max() {
    for tier in TIERS {
        let caches = Caches::new(tier);
        // Without a soft timeout: callers wait for the failure itself.
        let cache = caches.build(|b| {
            b.fail_safe(Duration::from_secs(60))
                .fail_safe_throttle(Duration::from_secs(5))
                .fill_timeout(Duration::from_secs(1))
                .no_soft_timeout()
        });
        cache.get_or_fill("k", value("kept")).await.expect("fill");
        advance(Duration::from_secs(11)).await;
        let calls = Arc::new(AtomicUsize::new(0));
        let kept = Fetched::new(Some("kept".to_owned()), Freshness::FailSafe);

        // An erroring fill: the old value, once; then throttled.
        assert_eq!(
            fetch(&cache, failing(&calls)).await.expect("fail-safe"),
            kept,
            "{tier:?}"
        );
        assert_eq!(calls.load(SeqCst), 1);
        assert_eq!(
            fetch(&cache, failing(&calls)).await.expect("throttled"),
            kept
        );
        assert_eq!(
            calls.load(SeqCst),
            1,
            "{tier:?}: within the throttle the source is not called"
        );

        // A panicking fill.
        advance(Duration::from_secs(6)).await;
        let panicking = || -> BoxFill { Box::pin(async { panic!("source exploded") }) };
        assert_eq!(
            fetch(&cache, panicking)
                .await
                .expect("fail-safe after a panic"),
            kept
        );

        // A fill that passes the hard timeout.
        advance(Duration::from_secs(6)).await;
        let hanging = || -> BoxFill { Box::pin(std::future::pending()) };
        let started = Instant::now();
        assert_eq!(
            fetch(&cache, hanging)
                .await
                .expect("fail-safe after a timeout"),
            kept
        );
        assert_eq!(started.elapsed(), Duration::from_secs(1));

        // Never past fail_safe_max (10 s TTL + 60 s): then the error shows.
        advance(Duration::from_secs(60)).await;
        let result = fetch(&cache, failing(&calls)).await;
        assert!(
            matches!(result, Err(Error::Fill(_))),
            "{tier:?}: {result:?}"
        );
        let stats = cache.stats();
        assert_eq!(stats.fail_safe_hits, 4, "{tier:?}");
        assert_eq!(
            (stats.fill_errors, stats.fill_panics, stats.fill_timeouts),
            (2, 1, 1)
        );
    }
}

#[tokio::test(start_paused = true)]
async fn the_soft_timeout_serves_stale_and_the_fill_lands_later() {
    for tier in TIERS {
        let caches = Caches::new(tier);
        let cache = caches.build(|b| {
            b.fail_safe(Duration::from_secs(60))
                .soft_timeout(Duration::from_millis(100))
        });
        cache.get_or_fill("k", value("old")).await.expect("fill");
        advance(Duration::from_secs(11)).await;
        let slow = || -> BoxFill {
            Box::pin(async {
                tokio::time::sleep(Duration::from_secs(2)).await;
                Ok("new".to_owned())
            })
        };
        let started = Instant::now();
        let fetched = fetch(&cache, slow)
            .await
            .expect("stale at the soft timeout");
        assert_eq!(started.elapsed(), Duration::from_millis(100), "{tier:?}");
        assert_eq!(fetched, Fetched::new(Some("old".into()), Freshness::Stale));
        until_yielding(|| cache.stats().soft_timeouts == 1).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        until_yielding(|| cache.flights_in_progress() == 0).await;
        assert_eq!(
            cache.peek("k").await.expect("get").as_deref(),
            Some("new"),
            "{tier:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn fail_safe_comes_with_a_soft_timeout_unless_one_is_set() {
    // A source that fails after a second, as a database timing out does.
    let slow_failure = || -> BoxFill {
        Box::pin(async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Err(SourceDown)
        })
    };
    for tier in TIERS {
        let caches = Caches::new(tier);
        let paired = caches.build(|b| b.fail_safe(Duration::from_secs(60)));
        let waiting = caches.build(|b| {
            b.fail_safe(Duration::from_secs(60))
                .soft_timeout(Duration::from_millis(1_500))
        });
        for (cache, waited) in [
            (&paired, corral::FAIL_SAFE_SOFT_TIMEOUT),
            (&waiting, Duration::from_secs(1)),
        ] {
            cache.invalidate("k").await.expect("invalidate");
            cache.get_or_fill("k", value("old")).await.expect("fill");
            advance(Duration::from_secs(11)).await;
            let started = Instant::now();
            let fetched = fetch(cache, slow_failure).await.expect("the old value");
            assert_eq!(started.elapsed(), waited, "{tier:?}");
            assert_eq!(fetched.value.as_deref(), Some("old"), "{tier:?}");
            // The failing fill ends a second after it started.
            tokio::time::sleep_until(started + Duration::from_secs(1)).await;
            until_yielding(|| cache.flights_in_progress() == 0).await;
        }
    }
}

#[tokio::test(start_paused = true)]
async fn not_found_is_cached_with_its_own_ttl() {
    for tier in TIERS {
        let caches = Caches::new(tier);
        let cache = caches.build(|b| b.negative_ttl(Duration::from_secs(2)));
        let calls = Arc::new(AtomicUsize::new(0));
        let missing = || {
            let calls = Arc::clone(&calls);
            move || async move {
                calls.fetch_add(1, SeqCst);
                Ok::<Option<String>, SourceDown>(None)
            }
        };
        assert_eq!(
            cache
                .get_or_fill_option("k", missing())
                .await
                .expect("answer"),
            None
        );
        assert_eq!(
            cache
                .get_or_fill_option("k", missing())
                .await
                .expect("cached"),
            None
        );
        assert_eq!(
            calls.load(SeqCst),
            1,
            "{tier:?}: the negative answer is cached"
        );
        assert_eq!(
            cache.peek_entry("k").await.expect("lookup"),
            Cached::NotFound {
                freshness: Freshness::Fresh
            }
        );
        assert_eq!(cache.peek("k").await.expect("get"), None);
        assert!(cache
            .get_or_fill("k", value("x"))
            .await
            .expect_err("not found")
            .is_not_found());
        advance(Duration::from_secs(3)).await;
        assert_eq!(
            cache.peek_entry("k").await.expect("lookup"),
            Cached::Miss,
            "{tier:?}"
        );
        assert_eq!(
            cache
                .get_or_fill_option("k", missing())
                .await
                .expect("refetched"),
            None
        );
        assert_eq!(calls.load(SeqCst), 2);
    }
}

#[tokio::test(start_paused = true)]
async fn the_fill_chooses_its_ttl_or_not_to_be_cached() {
    for tier in TIERS {
        let caches = Caches::new(tier);
        let cache = caches.build(|b| b);
        let short = cache
            .get_or_fill_answer("short", || async {
                Ok::<_, SourceDown>(Answer::value("v".to_owned()).ttl(Duration::from_secs(1)))
            })
            .await
            .expect("answer");
        assert_eq!(short.value.as_deref(), Some("v"));
        advance(Duration::from_millis(1_100)).await;
        assert_eq!(
            cache.peek_entry("short").await.expect("lookup"),
            Cached::Miss,
            "{tier:?}"
        );

        let calls = Arc::new(AtomicUsize::new(0));
        let gate = Gate::new();
        let callers: Vec<_> = (0..50)
            .map(|_| {
                let (cache, calls, gate) = (cache.clone(), Arc::clone(&calls), gate.clone());
                tokio::spawn(async move {
                    cache
                        .get_or_fill_answer("volatile", move || async move {
                            calls.fetch_add(1, SeqCst);
                            gate.wait().await;
                            Ok::<_, SourceDown>(Answer::value("once".to_owned()).dont_cache())
                        })
                        .await
                })
            })
            .collect();
        until_yielding(|| cache.stats().coalesced == 49).await;
        gate.open();
        for caller in callers {
            assert_eq!(
                caller
                    .await
                    .expect("task")
                    .expect("answer")
                    .value
                    .as_deref(),
                Some("once")
            );
        }
        assert_eq!(calls.load(SeqCst), 1, "{tier:?}: still one fill");
        until_yielding(|| cache.flights_in_progress() == 0).await;
        assert_eq!(
            cache.peek_entry("volatile").await.expect("lookup"),
            Cached::Miss
        );
    }
}

#[tokio::test(start_paused = true)]
async fn an_invalidated_key_is_served_by_neither_grace_nor_fail_safe() {
    for tier in TIERS {
        let caches = Caches::new(tier);
        let cache = caches.build(|b| {
            b.grace(Duration::from_secs(10))
                .fail_safe(Duration::from_secs(60))
        });
        cache.get_or_fill("k", value("old")).await.expect("fill");
        advance(Duration::from_secs(12)).await;
        cache.invalidate("k").await.expect("invalidate");
        let fetched = fetch(&cache, value("new")).await.expect("filled");
        assert_eq!(
            fetched,
            Fetched::new(Some("new".into()), Freshness::Fresh),
            "{tier:?}"
        );

        advance(Duration::from_secs(25)).await;
        cache.invalidate("k").await.expect("invalidate");
        let calls = Arc::new(AtomicUsize::new(0));
        let result = fetch(&cache, failing(&calls)).await;
        assert!(
            matches!(result, Err(Error::Fill(_))),
            "{tier:?}: no fail-safe after invalidate: {result:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_refresh_racing_an_invalidate_never_brings_the_old_value_back() {
    for tier in TIERS {
        let caches = Caches::new(tier);
        let cache = caches.build(|b| b.grace(Duration::from_secs(100)));
        let mut rng = fastrand::Rng::with_seed(42);
        for run in 0..300 {
            let key = format!("k{run}");
            cache.set(&key, "old".into()).await.expect("set");
            advance(Duration::from_secs(11)).await;
            let (fill_yields, invalidate_yields) = (rng.usize(0..6), rng.usize(0..6));
            let fetched = cache
                .get_or_fill_answer(&key, move || async move {
                    for _ in 0..fill_yields {
                        tokio::task::yield_now().await;
                    }
                    Ok::<_, SourceDown>(Answer::value(
                        "refreshed from before the invalidate".to_owned(),
                    ))
                })
                .await
                .expect("stale");
            assert_eq!(fetched.freshness, Freshness::Stale);
            for _ in 0..invalidate_yields {
                tokio::task::yield_now().await;
            }
            cache.invalidate(&key).await.expect("invalidate");
            until_yielding(|| cache.flights_in_progress() == 0).await;
            assert_eq!(
                cache.peek_entry(&key).await.expect("lookup"),
                Cached::Miss,
                "{tier:?} run {run}: fill yields {fill_yields}, invalidate yields {invalidate_yields}"
            );
        }
    }
}

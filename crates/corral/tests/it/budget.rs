//! Fill budgets through the public API: the queue's order, cancellation,
//! sharing, bounded waits (`Error::Overloaded` or the value at hand), and
//! fleet budgets across stores on a real Redis and a real memcached.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use corral::clock::TokioClock;
use corral::{Answer, Cache, Error, FillBudget, Freshness};
use corral_testkit::{until_yielding, Gate};

#[derive(Debug)]
struct SourceDown;

impl std::fmt::Display for SourceDown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the source is down")
    }
}

impl std::error::Error for SourceDown {}

fn cache(name: &str, budget: &FillBudget) -> Cache<String> {
    Cache::<String>::builder(name)
        .ttl(Duration::from_secs(60))
        .clock(TokioClock::new())
        .fill_budget(budget.clone())
        .build()
        .expect("valid config")
}

/// A call of `key` whose fill records the key in `order`, then waits for
/// `gate`.
fn call(
    cache: &Cache<String>,
    key: &str,
    order: &Arc<Mutex<Vec<String>>>,
    gate: &Gate,
) -> tokio::task::JoinHandle<Result<String, Error<SourceDown>>> {
    let (cache, key) = (cache.clone(), key.to_owned());
    let (order, gate) = (Arc::clone(order), gate.clone());
    tokio::spawn(async move {
        cache
            .get_or_fill(&key.clone(), move || async move {
                order.lock().expect("order").push(key.clone());
                gate.wait().await;
                Ok::<_, SourceDown>(format!("value of {key}"))
            })
            .await
    })
}

#[tokio::test(start_paused = true)]
async fn the_key_with_the_most_waiting_callers_fills_first() {
    let budget = FillBudget::new(1);
    let cache = cache("order", &budget);
    let order = Arc::new(Mutex::new(Vec::new()));
    let (blocker, open) = (Gate::new(), Gate::new());
    open.open();
    let first = call(&cache, "blocker", &order, &blocker);
    until_yielding(|| budget.stats().in_use == 1).await;
    let mut calls = vec![
        call(&cache, "cold-1", &order, &open),
        call(&cache, "cold-2", &order, &open),
    ];
    for _ in 0..5 {
        calls.push(call(&cache, "hot", &order, &open));
    }
    until_yielding(|| budget.stats().queued == 3 && cache.stats().coalesced == 4).await;
    // Nothing queued reached the source.
    assert_eq!(*order.lock().expect("order"), ["blocker"]);
    blocker.open();
    assert_eq!(
        first.await.expect("task").expect("value"),
        "value of blocker"
    );
    for call in calls {
        call.await.expect("task").expect("value");
    }
    let order = order.lock().expect("order").clone();
    assert_eq!(order, ["blocker", "hot", "cold-1", "cold-2"]);
    let stats = budget.stats();
    assert_eq!((stats.in_use, stats.queued, stats.peak_in_use), (0, 0, 1));
    assert_eq!((stats.granted, stats.waited), (4, 3));
    assert_eq!(cache.stats().fills_queued, 3);
}

#[tokio::test(start_paused = true)]
async fn a_queue_emptied_by_cancellation_holds_no_permit() {
    let budget = FillBudget::new(1);
    let cache = cache("cancel", &budget);
    let order = Arc::new(Mutex::new(Vec::new()));
    let (blocker, open) = (Gate::new(), Gate::new());
    open.open();
    let first = call(&cache, "blocker", &order, &blocker);
    until_yielding(|| budget.stats().in_use == 1).await;
    let cancelled = [
        call(&cache, "gone", &order, &open),
        call(&cache, "gone", &order, &open),
    ];
    until_yielding(|| budget.stats().queued == 1 && cache.stats().coalesced == 1).await;
    for call in &cancelled {
        call.abort();
    }
    until_yielding(|| budget.stats().queued == 0).await;
    assert_eq!(budget.stats().abandoned, 1);
    until_yielding(|| cache.flights_in_progress() == 1).await;
    blocker.open();
    first.await.expect("task").expect("value");
    assert_eq!(budget.stats().in_use, 0);
    // The abandoned fill never ran; the key fills anew on its next call.
    assert_eq!(*order.lock().expect("order"), ["blocker"]);
    let again = call(&cache, "gone", &order, &open).await.expect("task");
    assert_eq!(again.expect("value"), "value of gone");
    assert_eq!(*order.lock().expect("order"), ["blocker", "gone"]);
    assert_eq!(budget.stats().in_use, 0);
}

#[tokio::test(start_paused = true)]
async fn one_budget_bounds_two_caches() {
    let budget = FillBudget::new(1);
    let (users, orders) = (cache("users", &budget), cache("orders", &budget));
    let order = Arc::new(Mutex::new(Vec::new()));
    let (blocker, open) = (Gate::new(), Gate::new());
    open.open();
    let first = call(&users, "u1", &order, &blocker);
    until_yielding(|| budget.stats().in_use == 1).await;
    let second = call(&orders, "o1", &order, &open);
    until_yielding(|| budget.stats().queued == 1).await;
    assert_eq!(*order.lock().expect("order"), ["u1"]);
    blocker.open();
    first.await.expect("task").expect("value");
    assert_eq!(second.await.expect("task").expect("value"), "value of o1");
    assert_eq!(budget.stats().peak_in_use, 1);
    assert_eq!(orders.stats().fills_queued, 1);
}

#[tokio::test(start_paused = true)]
async fn a_full_budget_answers_overloaded_without_calling_the_source() {
    let budget = FillBudget::new(1).max_wait(Duration::from_secs(2));
    let cache = cache("overload", &budget);
    let order = Arc::new(Mutex::new(Vec::new()));
    let (blocker, open) = (Gate::new(), Gate::new());
    open.open();
    let first = call(&cache, "blocker", &order, &blocker);
    until_yielding(|| budget.stats().in_use == 1).await;
    let started = tokio::time::Instant::now();
    let late = call(&cache, "late", &order, &open);
    until_yielding(|| budget.stats().queued == 1).await;
    assert!(cache.health().await.is_budget_saturated());
    let error = late.await.expect("task").expect_err("overloaded");
    assert!(
        matches!(error, Error::Overloaded { waited } if waited == Duration::from_secs(2)),
        "{error:?}"
    );
    assert!(error.is_overloaded() && error.is_retryable() && !error.is_fill_error());
    assert_eq!(started.elapsed(), Duration::from_secs(2));
    assert_eq!(*order.lock().expect("order"), ["blocker"]);
    assert_eq!((cache.stats().overloads, budget.stats().overloaded), (1, 1));
    assert!(!cache.health().await.is_budget_saturated());
    blocker.open();
    first.await.expect("task").expect("value");
    // Not poisoned: the next call fills.
    let again = call(&cache, "late", &order, &open).await.expect("task");
    assert_eq!(again.expect("value"), "value of late");
}

/// A cache built by `builder` with a budget of 1 (TTL 1 s), key "k" filled
/// and 2 s old, and the budget's one permit held by the fill of "blocker"
/// until its gate opens.
struct ExpiredBehindBlocker {
    budget: FillBudget,
    cache: Cache<String>,
    order: Arc<Mutex<Vec<String>>>,
    blocker: Gate,
    open: Gate,
    first: tokio::task::JoinHandle<Result<String, Error<SourceDown>>>,
}

async fn expired_behind_blocker(builder: corral::CacheBuilder<String>) -> ExpiredBehindBlocker {
    let budget = FillBudget::new(1).max_wait(Duration::from_secs(60));
    let cache = builder
        .ttl(Duration::from_secs(1))
        .clock(TokioClock::new())
        .fill_budget(budget.clone())
        .build()
        .expect("valid config");
    let order = Arc::new(Mutex::new(Vec::new()));
    let (blocker, open) = (Gate::new(), Gate::new());
    open.open();
    call(&cache, "k", &order, &open)
        .await
        .expect("task")
        .expect("value");
    tokio::time::advance(Duration::from_secs(2)).await;
    let first = call(&cache, "blocker", &order, &blocker);
    until_yielding(|| budget.stats().in_use == 1).await;
    ExpiredBehindBlocker {
        budget,
        cache,
        order,
        blocker,
        open,
        first,
    }
}

#[tokio::test(start_paused = true)]
async fn a_full_budget_serves_the_fail_safe_value_at_once_and_refreshes_later() {
    let builder = Cache::<String>::builder("fail-safe").fail_safe(Duration::from_secs(3600));
    let ExpiredBehindBlocker {
        budget,
        cache,
        blocker,
        first,
        ..
    } = expired_behind_blocker(builder).await;
    let fetched = cache
        .get_or_fill_answer("k", || async {
            Ok::<_, SourceDown>(Answer::value("new".to_owned()))
        })
        .await
        .expect("served at once");
    assert_eq!(fetched.value.as_deref(), Some("value of k"));
    assert_eq!(fetched.freshness, Freshness::FailSafe);
    // The fill stays queued behind the blocker, then refreshes the value.
    assert_eq!(budget.stats().queued, 1);
    blocker.open();
    first.await.expect("task").expect("value");
    until_yielding(|| budget.stats().granted == 3 && budget.stats().in_use == 0).await;
    until_yielding(|| cache.flights_in_progress() == 0).await;
    let now = cache
        .get_or_fill("k", || async { Ok::<_, SourceDown>("unused".to_owned()) })
        .await
        .expect("value");
    assert_eq!(now, "new");
}

#[tokio::test(start_paused = true)]
async fn a_background_refresh_queues_behind_a_full_budget_and_serves_nobody() {
    let builder = Cache::<String>::builder("refresh").grace(Duration::from_secs(60));
    let ExpiredBehindBlocker {
        budget,
        cache,
        order,
        blocker,
        open,
        first,
    } = expired_behind_blocker(builder).await;
    // The stale value at once; its refresh queues behind the blocker.
    let stale = call(&cache, "k", &order, &open).await.expect("task");
    assert_eq!(stale.expect("stale value"), "value of k");
    until_yielding(|| budget.stats().queued == 1).await;
    let stats = cache.stats();
    assert_eq!((stats.stale_hits, stats.fail_safe_hits), (1, 0));
    assert_eq!(*order.lock().expect("order"), ["k", "blocker"]);
    blocker.open();
    first.await.expect("task").expect("value");
    until_yielding(|| budget.stats().queued == 0 && budget.stats().in_use == 0).await;
    until_yielding(|| cache.flights_in_progress() == 0).await;
    assert_eq!(*order.lock().expect("order"), ["k", "blocker", "k"]);
    assert_eq!(cache.stats().fail_safe_hits, 0);
}

/// A source that counts the fills running at once and the most it saw.
#[derive(Clone, Default)]
struct Source {
    running: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
    calls: Arc<AtomicUsize>,
}

impl Source {
    async fn query(&self, key: String, hold: Duration) -> Result<String, SourceDown> {
        let now = self.running.fetch_add(1, SeqCst) + 1;
        self.most.fetch_max(now, SeqCst);
        self.calls.fetch_add(1, SeqCst);
        tokio::time::sleep(hold).await;
        self.running.fetch_sub(1, SeqCst);
        Ok(format!("value of {key}"))
    }
}

/// Two caches on two stores (two processes, as far as the store can
/// tell), each with its own fleet budget of `limit` named alike, filling
/// 12 keys each at once: the source never sees more than `limit`.
async fn fleet_bounds_the_source(stores: [Arc<dyn corral::store::Store>; 2], limit: usize) {
    let source = Source::default();
    let mut calls = Vec::new();
    for (index, store) in stores.into_iter().enumerate() {
        let budget = FillBudget::new(limit)
            .max_wait(Duration::from_secs(20))
            .fleet("fleet-test-db")
            .expect("name");
        let cache = Cache::<String>::builder("fleet")
            .ttl(Duration::from_secs(60))
            .store(store)
            .fill_budget(budget)
            .build()
            .expect("valid config");
        for key in 0..12 {
            let (cache, source) = (cache.clone(), source.clone());
            let key = format!("p{index}-k{key}");
            calls.push(tokio::spawn(async move {
                cache
                    .get_or_fill(&key.clone(), move || async move {
                        source.query(key, Duration::from_millis(20)).await
                    })
                    .await
            }));
        }
    }
    for call in calls {
        call.await.expect("task").expect("every caller answered");
    }
    assert_eq!(source.calls.load(SeqCst), 24);
    let most = source.most.load(SeqCst);
    assert!(most <= limit, "{most} fills ran at once, budget {limit}");
    assert!(most >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_budget_bounds_fills_across_redis_stores() {
    let server = corral_testkit::RedisServer::start();
    let url = server.url();
    let connect = || corral::RedisStore::connect(&url, corral::RedisConfig::default());
    let (a, b) = (
        connect().await.expect("store"),
        connect().await.expect("store"),
    );
    fleet_bounds_the_source([Arc::new(a), Arc::new(b)], 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_budget_bounds_fills_of_caches_sharing_a_memory_store() {
    let store = corral::store::MemoryStore::new();
    fleet_bounds_the_source([Arc::new(store.clone()), Arc::new(store)], 2).await;
}

/// Two stores on one memcached server: two processes, as far as it can
/// tell.
#[cfg(feature = "memcached")]
async fn two_memcached_stores(
    server: &corral_testkit::MemcachedServer,
) -> [corral::MemcachedStore; 2] {
    use corral::{MemcachedConfig, MemcachedStore};
    let addr = [server.addr()];
    let connect = || MemcachedStore::connect(&addr, MemcachedConfig::default());
    [
        connect().await.expect("store"),
        connect().await.expect("store"),
    ]
}

#[cfg(feature = "memcached")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_budget_bounds_fills_across_memcached_stores() {
    let server = corral_testkit::MemcachedServer::start();
    let [a, b] = two_memcached_stores(&server).await;
    fleet_bounds_the_source([Arc::new(a), Arc::new(b)], 2).await;
}

#[cfg(feature = "memcached")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_fleet_answers_overloaded_on_memcached() {
    use corral::MemcachedStore;
    let server = corral_testkit::MemcachedServer::start();
    let [a, b] = two_memcached_stores(&server).await;
    let build = |store: MemcachedStore| {
        let budget = FillBudget::new(1)
            .max_wait(Duration::from_millis(300))
            .fleet("overload-db")
            .expect("name");
        Cache::<String>::builder("fleet-overload")
            .ttl(Duration::from_secs(60))
            .store(store)
            .fill_budget(budget)
            .build()
            .expect("valid config")
    };
    let (holder, other) = (build(a), build(b));
    let order = Arc::new(Mutex::new(Vec::new()));
    let (blocker, open) = (Gate::new(), Gate::new());
    open.open();
    let held = call(&holder, "held", &order, &blocker);
    corral_testkit::until("the holder fills", || {
        order.lock().expect("order").len() == 1
    })
    .await;
    let error = call(&other, "waits", &order, &open)
        .await
        .expect("task")
        .expect_err("the fleet's one permit is held");
    assert!(error.is_overloaded(), "{error:?}");
    assert_eq!(*order.lock().expect("order"), ["held"]);
    blocker.open();
    held.await.expect("task").expect("value");
    let later = call(&other, "waits", &order, &open).await.expect("task");
    assert_eq!(later.expect("value"), "value of waits");
    assert_eq!(other.stats().fleet_permits, 1);
}

/// A holder that died mid-fill leaves its fleet permit — one slot's lease
/// in the store, never renewed or released — exactly as taking the lease
/// by hand and walking away does. The next fill waits for it to lapse
/// (within its lease TTL), then runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_holder_s_fleet_permit_lapses_within_its_lease_ttl() {
    use corral::store::{Grant, LeaseRequest, Lookup, Store, StoreKey};
    let server = corral_testkit::RedisServer::start();
    let store = corral::RedisStore::connect(&server.url(), corral::RedisConfig::default())
        .await
        .expect("store");
    let lease_ttl = Duration::from_millis(600);
    let slot = StoreKey::new("lapse-db.fill-budget:v1", "permit:0");
    let request = LeaseRequest {
        lease_ttl,
        fence_ttl: lease_ttl,
        grant: Grant::OverAnyValue,
    };
    let taken = std::time::Instant::now();
    let dead = store.get_or_lease(&slot, &request).await.expect("lease");
    assert!(matches!(dead, Lookup::Granted(_)), "{dead:?}");
    let budget = FillBudget::new(1)
        .max_wait(Duration::from_secs(10))
        .fleet("lapse-db")
        .expect("name");
    let cache = Cache::<String>::builder("lapse")
        .ttl(Duration::from_secs(60))
        .store(store)
        .fill_budget(budget)
        .build()
        .expect("valid config");
    let filled_at = Arc::new(Mutex::new(None));
    let at = Arc::clone(&filled_at);
    let value = cache
        .get_or_fill("k", move || async move {
            *at.lock().expect("at") = Some(taken.elapsed());
            Ok::<_, SourceDown>("v".to_owned())
        })
        .await
        .expect("answered once the permit lapsed");
    assert_eq!(value, "v");
    let after = filled_at.lock().expect("at").expect("filled");
    // Redis's clock and ours differ by a round trip at most.
    assert!(after >= lease_ttl - Duration::from_millis(50), "{after:?}");
    assert!(after <= lease_ttl + Duration::from_secs(1), "{after:?}");
    assert_eq!(cache.stats().fills_queued, 1);
    assert_eq!(cache.stats().fleet_permits, 1);
}

//! The in-process contract of `get_or_fill`, under paused tokio time.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use corral::clock::TokioClock;
use corral::codec::Postcard;
use corral::store::MemoryStore;
use corral::store::StoreKey;
use corral::{Answer, Cache, Capacity, Error, Fetched, FillOptions, Freshness, MAX_KEY_LEN};
use corral_testkit::{until_yielding, Gate};
use tokio::task::JoinHandle;

#[derive(Debug, PartialEq)]
struct SourceDown {
    code: u32,
}

impl std::fmt::Display for SourceDown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the source is down ({})", self.code)
    }
}

impl std::error::Error for SourceDown {}

fn cache(name: &str) -> Cache<String> {
    Cache::<String>::builder(name)
        .ttl(Duration::from_secs(60))
        .clock(TokioClock::new())
        .build()
        .expect("valid config")
}

fn counting_fill(
    fills: &Arc<AtomicUsize>,
    gate: &Gate,
    value: &str,
) -> impl FnOnce() -> std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<String, SourceDown>> + Send>,
> + Send
       + 'static {
    let fills = Arc::clone(fills);
    let gate = gate.clone();
    let value = value.to_owned();
    move || {
        Box::pin(async move {
            fills.fetch_add(1, SeqCst);
            gate.wait().await;
            Ok(value)
        })
    }
}

#[tokio::test(start_paused = true)]
async fn ten_thousand_callers_on_a_cold_key_run_one_fill() {
    const CALLERS: usize = 10_000;
    let cache = cache("herd");
    let fills = Arc::new(AtomicUsize::new(0));
    let gate = Gate::new();
    let callers: Vec<JoinHandle<_>> = (0..CALLERS)
        .map(|_| {
            let cache = cache.clone();
            let fill = counting_fill(&fills, &gate, "value");
            tokio::spawn(async move { cache.get_or_fill("hot", fill).await })
        })
        .collect();
    until_yielding(|| cache.stats().coalesced == CALLERS as u64 - 1).await;
    gate.open();
    for caller in callers {
        assert_eq!(caller.await.expect("caller task").expect("value"), "value");
    }
    assert_eq!(fills.load(SeqCst), 1);
    let stats = cache.stats();
    assert_eq!(stats.fills, 1);
    assert_eq!(stats.misses, CALLERS as u64);
    assert_eq!(cache.flights_in_progress(), 0);
    assert_eq!(
        cache.peek("hot").await.expect("get"),
        Some("value".to_owned())
    );
}

#[tokio::test(start_paused = true)]
async fn every_waiter_gets_the_leaders_typed_error_and_the_next_call_retries() {
    let cache = cache("errors");
    let gate = Gate::new();
    let fills = Arc::new(AtomicUsize::new(0));
    let callers: Vec<_> = (0..100)
        .map(|_| {
            let cache = cache.clone();
            let gate = gate.clone();
            let fills = Arc::clone(&fills);
            tokio::spawn(async move {
                cache
                    .get_or_fill("k", move || async move {
                        fills.fetch_add(1, SeqCst);
                        gate.wait().await;
                        Err::<String, _>(SourceDown { code: 503 })
                    })
                    .await
            })
        })
        .collect();
    // A call site with another error type never joins that flight: it runs
    // its own, and gets its own error.
    let other = {
        let cache = cache.clone();
        let gate = gate.clone();
        let fills = Arc::clone(&fills);
        tokio::spawn(async move {
            cache
                .get_or_fill("k", move || async move {
                    fills.fetch_add(1, SeqCst);
                    gate.wait().await;
                    Err::<String, std::io::Error>(std::io::Error::other("other source down"))
                })
                .await
        })
    };
    until_yielding(|| cache.stats().coalesced == 99 && cache.flights_in_progress() == 2).await;
    gate.open();
    let mut errors = Vec::new();
    for caller in callers {
        match caller.await.expect("caller task") {
            Err(Error::Fill(error)) => errors.push(error),
            other => panic!("expected the fill's error, got {other:?}"),
        }
    }
    assert_eq!(*errors[0], SourceDown { code: 503 });
    assert!(
        errors.iter().all(|e| Arc::ptr_eq(e.arc(), errors[0].arc())),
        "one shared error"
    );
    match other.await.expect("task") {
        Err(Error::Fill(error)) => assert_eq!(error.to_string(), "other source down"),
        other => panic!("expected its own fill's error, got {other:?}"),
    }
    assert_eq!(fills.load(SeqCst), 2, "one fill per error type");
    assert_eq!(cache.stats().fill_errors, 2);
    assert_eq!(cache.flights_in_progress(), 0);
    assert_eq!(
        cache.peek("k").await.expect("get"),
        None,
        "an error stores nothing"
    );
    let value = cache
        .get_or_fill("k", || async {
            Ok::<_, SourceDown>("recovered".to_owned())
        })
        .await
        .expect("retry");
    assert_eq!(value, "recovered");
}

#[tokio::test(start_paused = true)]
async fn fills_of_two_error_types_on_one_key_share_the_stores_lease() {
    let store = MemoryStore::new();
    let cache = shared("error-types", &store);
    let gate = Gate::new();
    let fills = Arc::new(AtomicUsize::new(0));
    let first = {
        let cache = cache.clone();
        let fill = counting_fill(&fills, &gate, "value");
        tokio::spawn(async move { cache.get_or_fill("k", fill).await })
    };
    until_yielding(|| fills.load(SeqCst) == 1).await;
    // Its own in-process flight, which finds the lease held by the first
    // and waits for its value instead of filling.
    let second = {
        let cache = cache.clone();
        let fills = Arc::clone(&fills);
        tokio::spawn(async move {
            cache
                .get_or_fill("k", move || async move {
                    fills.fetch_add(1, SeqCst);
                    Ok::<_, std::io::Error>("second".to_owned())
                })
                .await
        })
    };
    until_yielding(|| cache.stats().lease_waits == 1).await;
    assert_eq!(cache.flights_in_progress(), 2);
    gate.open();
    assert_eq!(first.await.expect("task").expect("value"), "value");
    assert_eq!(second.await.expect("task").expect("value"), "value");
    assert_eq!(fills.load(SeqCst), 1, "one fill per key across error types");
    assert_eq!(cache.stats().coalesced, 0);
    assert_eq!(cache.flights_in_progress(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_panicking_fill_is_a_typed_error_and_stores_nothing() {
    let cache = cache("panics");
    let result = cache
        .get_or_fill("k", || async {
            if true {
                panic!("source exploded");
            }
            Ok::<String, SourceDown>(String::new())
        })
        .await;
    match result {
        Err(Error::FillPanicked { message }) => assert_eq!(&*message, "source exploded"),
        other => panic!("expected FillPanicked, got {other:?}"),
    }
    assert!(cache
        .get_or_fill("k", || async { Ok::<_, SourceDown>("ok".to_owned()) })
        .await
        .is_ok());
    let stats = cache.stats();
    assert_eq!((stats.fill_panics, stats.fills), (1, 2));
    assert_eq!(cache.flights_in_progress(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_leader_does_not_cancel_the_fill() {
    let cache = cache("cancel");
    let gate = Gate::new();
    let fills = Arc::new(AtomicUsize::new(0));
    // The leading caller is cancelled after its fill started (its only await
    // point is the wait for the flight's outcome).
    let leader = {
        let cache = cache.clone();
        let fill = counting_fill(&fills, &gate, "survives");
        tokio::spawn(async move { cache.get_or_fill("k", fill).await })
    };
    until_yielding(|| fills.load(SeqCst) == 1).await;
    let waiter = {
        let cache = cache.clone();
        let fill = counting_fill(&fills, &gate, "never");
        tokio::spawn(async move { cache.get_or_fill("k", fill).await })
    };
    until_yielding(|| cache.stats().coalesced == 1).await;
    leader.abort();
    assert!(leader.await.expect_err("aborted").is_cancelled());
    gate.open();
    assert_eq!(waiter.await.expect("task").expect("value"), "survives");
    assert_eq!(fills.load(SeqCst), 1);
    assert_eq!(cache.flights_in_progress(), 0);
    assert_eq!(cache.peek("k").await.expect("get"), Some("survives".into()));
}

#[tokio::test(start_paused = true)]
async fn a_leader_cancelled_before_its_first_poll_starts_nothing() {
    let cache = cache("cancel-early");
    let fills = Arc::new(AtomicUsize::new(0));
    let gate = Gate::new();
    gate.open();
    drop(cache.get_or_fill("k", counting_fill(&fills, &gate, "v")));
    assert_eq!(cache.flights_in_progress(), 0);
    assert_eq!(
        cache
            .get_or_fill("k", counting_fill(&fills, &gate, "v"))
            .await
            .expect("value"),
        "v"
    );
    assert_eq!(fills.load(SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn when_every_caller_is_cancelled_the_value_is_still_stored() {
    let cache = cache("orphan");
    let gate = Gate::new();
    let fills = Arc::new(AtomicUsize::new(0));
    let callers: Vec<_> = (0..10)
        .map(|_| {
            let cache = cache.clone();
            let fill = counting_fill(&fills, &gate, "kept");
            tokio::spawn(async move { cache.get_or_fill("k", fill).await })
        })
        .collect();
    until_yielding(|| cache.stats().coalesced == 9 && fills.load(SeqCst) == 1).await;
    for caller in &callers {
        caller.abort();
    }
    for caller in callers {
        assert!(caller.await.expect_err("aborted").is_cancelled());
    }
    gate.open();
    until_yielding(|| cache.flights_in_progress() == 0).await;
    assert_eq!(cache.peek("k").await.expect("get"), Some("kept".into()));
    assert_eq!(fills.load(SeqCst), 1);
}

/// Sets a flag when the fill future is dropped.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, SeqCst);
    }
}

#[tokio::test(start_paused = true)]
async fn fill_timeout_aborts_the_fill_frees_the_key_and_stores_nothing() {
    let cache = Cache::<String>::builder("timeouts")
        .ttl(Duration::from_secs(600))
        .fill_timeout(Duration::from_secs(1))
        .clock(TokioClock::new())
        .build()
        .expect("config");
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = DropFlag(Arc::clone(&dropped));
    let started = tokio::time::Instant::now();
    let result = cache
        .get_or_fill("k", move || async move {
            let _flag = flag;
            tokio::time::sleep(Duration::from_secs(10)).await;
            Ok::<_, SourceDown>("late".to_owned())
        })
        .await;
    assert!(matches!(result, Err(ref e) if e.is_timeout()), "{result:?}");
    assert_eq!(started.elapsed(), Duration::from_secs(1));
    until_yielding(|| dropped.load(SeqCst)).await;
    assert_eq!(cache.flights_in_progress(), 0);
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(
        cache.peek("k").await.expect("get"),
        None,
        "the aborted fill stored nothing"
    );
    let fresh = cache
        .get_or_fill("k", || async { Ok::<_, SourceDown>("fresh".to_owned()) })
        .await
        .expect("a new fill after the timeout");
    assert_eq!(fresh, "fresh");
    assert_eq!(cache.stats().fill_timeouts, 1);
}

#[tokio::test(start_paused = true)]
async fn a_hung_fill_never_pins_the_key() {
    let cache = Cache::<String>::builder("hung")
        .fill_timeout(Duration::from_millis(200))
        .build()
        .expect("config");
    for _ in 0..3 {
        let result = cache
            .get_or_fill("k", std::future::pending::<Result<String, SourceDown>>)
            .await;
        assert!(result.expect_err("times out").is_timeout());
        assert_eq!(cache.flights_in_progress(), 0);
    }
    assert_eq!(cache.stats().fill_timeouts, 3);
}

#[tokio::test(start_paused = true)]
async fn invalidate_during_a_flight_wins() {
    let cache = cache("invalidate");
    let old_gate = Gate::new();
    let fills = Arc::new(AtomicUsize::new(0));
    let old = {
        let cache = cache.clone();
        let fill = counting_fill(&fills, &old_gate, "old");
        tokio::spawn(async move { cache.get_or_fill("k", fill).await })
    };
    until_yielding(|| fills.load(SeqCst) == 1).await;
    cache.invalidate("k").await.expect("invalidate");
    assert_eq!(cache.flights_in_progress(), 0, "the flight is detached");
    let new_gate = Gate::new();
    new_gate.open();
    let new = cache
        .get_or_fill("k", counting_fill(&fills, &new_gate, "new"))
        .await
        .expect("a call after invalidate starts a new flight");
    assert_eq!(new, "new");
    old_gate.open();
    assert_eq!(
        old.await.expect("task").expect("value"),
        "old",
        "its callers still get it"
    );
    assert_eq!(
        cache.peek("k").await.expect("get"),
        Some("new".into()),
        "old did not overwrite"
    );
    assert_eq!(fills.load(SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn set_during_a_flight_wins() {
    let cache = cache("set");
    let gate = Gate::new();
    let fills = Arc::new(AtomicUsize::new(0));
    let flight = {
        let cache = cache.clone();
        let fill = counting_fill(&fills, &gate, "filled");
        tokio::spawn(async move { cache.get_or_fill("k", fill).await })
    };
    until_yielding(|| fills.load(SeqCst) == 1).await;
    cache.set("k", "written".into()).await.expect("set");
    gate.open();
    assert_eq!(flight.await.expect("task").expect("value"), "filled");
    assert_eq!(cache.peek("k").await.expect("get"), Some("written".into()));
}

#[tokio::test(start_paused = true)]
async fn entries_expire_after_their_ttl() {
    let cache = Cache::<String>::builder("ttl")
        .ttl(Duration::from_secs(10))
        .clock(TokioClock::new())
        .build()
        .expect("config");
    let fill = || async { Ok::<_, SourceDown>("v".to_owned()) };
    cache.get_or_fill("k", fill).await.expect("fill");
    tokio::time::advance(Duration::from_millis(9_990)).await;
    assert_eq!(cache.peek("k").await.expect("get"), Some("v".into()));
    tokio::time::advance(Duration::from_millis(20)).await;
    assert_eq!(cache.peek("k").await.expect("get"), None);
    cache.get_or_fill("k", fill).await.expect("refill");
    assert_eq!(cache.stats().fills, 2);
    // A per-call TTL applies to that fill.
    cache
        .get_or_fill("short", fill)
        .options(FillOptions::new().ttl(Duration::from_secs(1)))
        .await
        .expect("fill");
    tokio::time::advance(Duration::from_millis(1_010)).await;
    assert_eq!(cache.peek("short").await.expect("get"), None);
}

#[tokio::test(start_paused = true)]
async fn jittered_ttls_stay_within_bounds_and_spread() {
    let cache = Cache::<String>::builder("jitter")
        .ttl(Duration::from_secs(100))
        .jitter(0.2)
        .seed(7)
        .clock(TokioClock::new())
        .build()
        .expect("config");
    let keys: Vec<String> = (0..200).map(|i| format!("k{i}")).collect();
    for key in &keys {
        cache.set(key, "v".into()).await.expect("set");
    }
    let live = |cache: Cache<String>, keys: Vec<String>| async move {
        let mut n = 0;
        for key in &keys {
            n += usize::from(cache.peek(key).await.expect("get").is_some());
        }
        n
    };
    tokio::time::advance(Duration::from_millis(79_990)).await;
    assert_eq!(
        live(cache.clone(), keys.clone()).await,
        200,
        "none before ttl·0.8"
    );
    tokio::time::advance(Duration::from_secs(20)).await;
    let middle = live(cache.clone(), keys.clone()).await;
    assert!(
        (20..180).contains(&middle),
        "about half expire by ttl: {middle}"
    );
    tokio::time::advance(Duration::from_millis(20_020)).await;
    assert_eq!(
        live(cache.clone(), keys.clone()).await,
        0,
        "all gone after ttl·1.2"
    );
}

#[test]
fn bad_configuration_is_rejected() {
    for jitter in [f64::NAN, -0.1, 1.5, f64::INFINITY] {
        let error = Cache::<String>::builder("c")
            .jitter(jitter)
            .build()
            .expect_err("rejected");
        assert!(error.to_string().contains("jitter"), "{error}");
    }
    assert!(Cache::<String>::builder("c")
        .ttl(Duration::ZERO)
        .build()
        .is_err());
    assert!(Cache::<String>::builder("bad{name}").build().is_err());
    assert!(Cache::<String>::builder("").build().is_err());
    assert!(Cache::<String>::builder("c")
        .capacity(corral::Capacity::Entries(0))
        .build()
        .is_err());
    assert!(Cache::<String>::builder("c").jitter(1.0).build().is_ok());
}

#[tokio::test(start_paused = true)]
async fn invalid_keys_are_rejected_before_anything_runs() {
    let cache = cache("keys");
    let long = "k".repeat(MAX_KEY_LEN + 1);
    for key in ["", "a\nb", "nul\0", long.as_str()] {
        let result = cache
            .get_or_fill(key, || async {
                Ok::<String, SourceDown>("must not run".into())
            })
            .await;
        assert!(result.expect_err("rejected").is_invalid_key(), "{key:?}");
        assert!(cache
            .peek(key)
            .await
            .expect_err("rejected")
            .is_invalid_key());
        assert!(cache
            .set(key, "v".into())
            .await
            .expect_err("rejected")
            .is_invalid_key());
        assert!(cache
            .invalidate(key)
            .await
            .expect_err("rejected")
            .is_invalid_key());
    }
    assert_eq!(cache.stats().fills, 0);
    let longest = "k".repeat(MAX_KEY_LEN);
    assert!(cache.set(&longest, "v".into()).await.is_ok());
}

fn shared(name: &str, store: &MemoryStore) -> Cache<String> {
    Cache::<String>::builder(name)
        .ttl(Duration::from_secs(60))
        .store(store.clone())
        .l1(false)
        .build()
        .expect("config")
}

#[tokio::test(start_paused = true)]
async fn corrupt_bytes_in_the_store_are_a_counted_miss_and_get_overwritten() {
    let store = MemoryStore::new();
    let cache = shared("corrupt", &store);
    let key = StoreKey::new(cache.namespace(), "k");
    for garbage in [Vec::new(), b"not an envelope".to_vec(), vec![0xff; 64]] {
        store.put_raw(&key, garbage, Duration::from_secs(60));
        assert_eq!(cache.peek("k").await.expect("get"), None);
        let value = cache
            .get_or_fill("k", || async { Ok::<_, SourceDown>("fixed".to_owned()) })
            .await
            .expect("fill over corrupt bytes");
        assert_eq!(value, "fixed");
        assert_eq!(cache.peek("k").await.expect("get"), Some("fixed".into()));
    }
    // A valid envelope written with another codec is foreign too.
    let json = Cache::<String>::builder("corrupt")
        .codec(corral::codec::Json)
        .store(store.clone())
        .build()
        .expect("config");
    json.set("k", "from json".into()).await.expect("set");
    assert_eq!(cache.peek("k").await.expect("get"), None);
    let stats = cache.stats();
    assert_eq!(stats.decode_failures, 7);
    assert_eq!(stats.fills, 3);
}

#[tokio::test(start_paused = true)]
async fn a_schema_version_reads_only_its_own_keys() {
    let store = MemoryStore::new();
    let v1 = Cache::<String>::builder("schema")
        .version(1)
        .store(store.clone())
        .build()
        .expect("config");
    let v2 = Cache::<u64>::builder("schema")
        .version(2)
        .store(store.clone())
        .build()
        .expect("config");
    v1.set("k", "text".into()).await.expect("set");
    assert_eq!(v2.peek("k").await.expect("get"), None);
    assert_eq!(v2.stats().decode_failures, 0, "not even read");
}

#[tokio::test(start_paused = true)]
async fn caches_sharing_a_store_run_one_fill_between_them() {
    let store = MemoryStore::new();
    let replicas: Vec<Cache<String>> = (0..4).map(|_| shared("replicas", &store)).collect();
    let gate = Gate::new();
    let fills = Arc::new(AtomicUsize::new(0));
    let mut callers = Vec::new();
    for replica in &replicas {
        for _ in 0..100 {
            let cache = replica.clone();
            let fill = counting_fill(&fills, &gate, "shared");
            callers.push(tokio::spawn(
                async move { cache.get_or_fill("k", fill).await },
            ));
        }
    }
    until_yielding(|| {
        replicas.iter().map(|r| r.stats().coalesced).sum::<u64>() == 396
            && replicas.iter().map(|r| r.stats().lease_waits).sum::<u64>() >= 3
    })
    .await;
    gate.open();
    for caller in callers {
        assert_eq!(caller.await.expect("task").expect("value"), "shared");
    }
    assert_eq!(fills.load(SeqCst), 1);
    assert!(replicas.iter().all(|r| r.flights_in_progress() == 0));
}

#[tokio::test(start_paused = true)]
async fn a_dropped_cache_goes_away_while_its_fill_runs() {
    let cache = cache("dropped");
    let weak = cache.downgrade();
    let gate = Gate::new();
    let fills = Arc::new(AtomicUsize::new(0));
    let fill = counting_fill(&fills, &gate, "v");
    let caller = {
        let cache = cache.clone();
        tokio::spawn(async move { cache.get_or_fill("k", fill).await })
    };
    until_yielding(|| fills.load(SeqCst) == 1).await;
    caller.abort();
    let _ = caller.await;
    drop(cache);
    assert!(
        weak.upgrade().is_none(),
        "the fill task does not keep the cache alive"
    );
    gate.open();
}

#[test]
fn get_or_fill_outside_a_runtime_is_an_error_not_a_panic() {
    let cache = Cache::<String>::builder("no-runtime")
        .build()
        .expect("config");
    let result = block_on_without_runtime(
        cache.get_or_fill("k", || async { Ok::<_, SourceDown>("v".to_owned()) }),
    );
    assert!(matches!(result, Err(Error::NoRuntime)), "{result:?}");
}

/// Polls a future to completion on this thread, outside any tokio runtime.
fn block_on_without_runtime<F: std::future::Future>(future: F) -> F::Output {
    use std::task::{Context, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut context = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
        std::thread::park();
    }
}

/// A value serde cannot encode: a handle to shared state.
#[derive(Clone, Debug)]
struct Handle(Arc<AtomicUsize>);

#[tokio::test(start_paused = true)]
async fn an_in_process_cache_holds_values_serde_cannot_encode() {
    let cache = Cache::<Handle>::builder("handles")
        .clock(TokioClock::new())
        .build()
        .expect("config");
    let handle = Handle(Arc::new(AtomicUsize::new(7)));
    let fill = {
        let handle = handle.clone();
        move || async move { Ok::<_, SourceDown>(handle) }
    };
    let filled = cache.get_or_fill("h", fill).await.expect("fill");
    assert!(Arc::ptr_eq(&filled.0, &handle.0));
    let again = cache.peek("h").await.expect("get").expect("cached");
    assert!(
        Arc::ptr_eq(&again.0, &handle.0),
        "the same value, not a copy"
    );
    assert_eq!(cache.stats().fills, 1);
    // A bound in bytes weighs encoded values: it needs a codec.
    let error = Cache::<Handle>::builder("handles")
        .capacity(Capacity::Bytes(1 << 20))
        .build()
        .expect_err("no codec to weigh with");
    assert!(error.to_string().contains("codec"), "{error}");
    Cache::<String>::builder("weighed")
        .codec(Postcard)
        .capacity(Capacity::Bytes(1 << 20))
        .build()
        .expect("a codec weighs");
}

#[tokio::test(start_paused = true)]
async fn per_call_options_apply_whatever_the_fill_answers() {
    let cache = cache("answer-forms");
    let short = || FillOptions::new().ttl(Duration::from_secs(1));
    let plain: String = cache
        .get_or_fill("plain", || async { Ok::<_, SourceDown>("p".to_owned()) })
        .options(short())
        .await
        .expect("plain");
    let optional: Option<String> = cache
        .get_or_fill_option("optional", || async {
            Ok::<_, SourceDown>(Some("o".to_owned()))
        })
        .options(short())
        .await
        .expect("optional");
    let detailed: Fetched<String> = cache
        .get_or_fill_answer("detailed", || async {
            Ok::<_, SourceDown>(Answer::value("d".to_owned()))
        })
        .options(short())
        .await
        .expect("detailed");
    assert_eq!(plain, "p");
    assert_eq!(optional.as_deref(), Some("o"));
    assert_eq!(
        detailed,
        Fetched::new(Some("d".to_owned()), Freshness::Fresh)
    );
    for key in ["plain", "optional", "detailed"] {
        assert!(cache.peek(key).await.expect("peek").is_some(), "{key}");
    }
    tokio::time::advance(Duration::from_secs(2)).await;
    for key in ["plain", "optional", "detailed"] {
        assert_eq!(
            cache.peek(key).await.expect("peek"),
            None,
            "{key}: the per-call TTL, not the cache's 60 s"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn per_call_options_given_as_a_closure_are_built_only_on_a_miss() {
    let cache = cache("lazy-options");
    let builds = AtomicUsize::new(0);
    let tenant = 7;
    for _ in 0..3 {
        let value = cache
            .get_or_fill("user:1", || async { Ok::<_, SourceDown>("u".to_owned()) })
            .options(|| {
                builds.fetch_add(1, SeqCst);
                FillOptions::new().tags([format!("tenant:{tenant}")])
            })
            .await
            .expect("value");
        assert_eq!(value, "u");
    }
    assert_eq!(builds.load(SeqCst), 1, "built by the one miss");
    assert_eq!(cache.stats().hits, 2);
    cache
        .invalidate_tag("tenant:7")
        .await
        .expect("invalidate tag");
    assert_eq!(
        cache.peek("user:1").await.expect("peek"),
        None,
        "the tag applied"
    );
}

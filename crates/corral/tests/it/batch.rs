//! Batch read-through: one fill call for exactly the missing keys, per-key
//! single-flight shared with single calls, and the store's round trips per
//! batch — on the embedded store, a real Redis and a real Redis Cluster.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use corral::store::MemoryStore;
use corral::store::Store;
use corral::{Cache, Error, InvalidKey, RedisConfig, RedisStore};
use corral_testkit::{until, Gate, RedisCluster, RedisServer};

/// What a batch fill was asked, call by call.
#[derive(Clone, Default)]
struct Calls(Arc<Mutex<Vec<Vec<String>>>>);

impl Calls {
    fn all(&self) -> Vec<Vec<String>> {
        self.0.lock().expect("calls").clone()
    }

    /// A batch fill that records its keys and answers `value of <key>`
    /// for every key but those starting with `absent`.
    fn fill(
        &self,
    ) -> impl Fn(Vec<String>) -> std::future::Ready<Result<HashMap<String, String>, std::io::Error>>
           + Send
           + Sync
           + 'static {
        let calls = self.clone();
        move |keys: Vec<String>| {
            calls.0.lock().expect("calls").push(keys.clone());
            let found = keys
                .into_iter()
                .filter(|key| !key.starts_with("absent"))
                .map(|key| {
                    let value = format!("value of {key}");
                    (key, value)
                })
                .collect();
            std::future::ready(Ok(found))
        }
    }
}

fn keys(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("k{i:04}")).collect()
}

async fn half_present_one_fill(cache: &Cache<String>) {
    let all = keys(0..1000);
    for key in all.iter().step_by(2) {
        cache
            .set(key, format!("value of {key}"))
            .await
            .expect("set");
    }
    let calls = Calls::default();
    let batch = cache.get_many_or_fill(&all, calls.fill()).await;
    assert_eq!(batch.len(), 1000);
    for key in &all {
        let got = batch.get(key).expect("answered").as_ref().expect("value");
        assert_eq!(got, &format!("value of {key}"));
    }
    let calls = calls.all();
    assert_eq!(calls.len(), 1, "one fill call");
    let asked: BTreeSet<&String> = calls[0].iter().collect();
    let missing: BTreeSet<&String> = all.iter().skip(1).step_by(2).collect();
    assert_eq!(asked, missing, "exactly the missing half");
    assert_eq!(cache.flights_in_progress(), 0);
    // Everything is cached now: a second batch fills nothing.
    let again = Calls::default();
    let batch = cache.get_many_or_fill(&all, again.fill()).await;
    assert!(batch.iter().all(|(_, result)| result.is_ok()));
    assert!(again.all().is_empty());
}

/// A cache named `name` on `store` (none: in process only), with an L1 if
/// `l1`.
fn cache_on(name: &str, store: Option<Arc<dyn Store>>, l1: bool) -> Cache<String> {
    let builder = Cache::<String>::builder(name);
    let builder = match store {
        Some(store) => builder.store(store).l1(l1),
        None => builder,
    };
    builder.build().expect("config")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_present_fills_exactly_the_other_half_once_in_process() {
    half_present_one_fill(&cache_on("batch-local", None, true)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_present_fills_exactly_the_other_half_once_on_the_embedded_store() {
    let store = Arc::new(MemoryStore::new());
    half_present_one_fill(&cache_on("batch-mem", Some(store), true)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_present_fills_exactly_the_other_half_once_on_redis() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), RedisConfig::default())
        .await
        .expect("connect");
    half_present_one_fill(&cache_on("batch-redis", Some(Arc::new(store)), false)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_present_fills_exactly_the_other_half_once_on_a_cluster() {
    let cluster = RedisCluster::start();
    let store = RedisStore::connect_cluster(&cluster.urls(), RedisConfig::default())
        .await
        .expect("connect");
    half_present_one_fill(&cache_on("batch-cluster", Some(Arc::new(store)), true)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_batches_and_single_calls_fill_no_key_twice() {
    let store = MemoryStore::new();
    let cache = Cache::<String>::builder("batch-overlap")
        .store(store)
        .build()
        .expect("config");
    let gate = Gate::new();
    let filled: Arc<Mutex<Vec<String>>> = Arc::default();
    let fill = {
        let (gate, filled) = (gate.clone(), Arc::clone(&filled));
        move |keys: Vec<String>| {
            let (gate, filled) = (gate.clone(), Arc::clone(&filled));
            async move {
                filled.lock().expect("filled").extend(keys.iter().cloned());
                gate.wait().await;
                Ok::<_, std::io::Error>(keys.into_iter().map(|k| (k.clone(), k)).collect())
            }
        }
    };
    let fill = Arc::new(fill);
    let mut tasks = Vec::new();
    // Batches over 0..60, 30..90, 60..120, and single calls across them.
    for range in [0..60, 30..90, 60..120] {
        let (cache, fill) = (cache.clone(), Arc::clone(&fill));
        tasks.push(tokio::spawn(async move {
            let keys = keys(range);
            let batch = cache.get_many_or_fill(&keys, move |keys| fill(keys)).await;
            let mut answers = batch.into_map();
            keys.iter()
                .map(|key| {
                    answers
                        .remove(key)
                        .expect("answered")
                        .map_err(|e| e.to_string())
                })
                .collect::<Vec<_>>()
        }));
    }
    for i in (0..120).step_by(7) {
        let (cache, fill) = (cache.clone(), Arc::clone(&fill));
        tasks.push(tokio::spawn(async move {
            let key = format!("k{i:04}");
            let fill = move || async move {
                let mut found = fill(vec![key.clone()]).await?;
                Ok::<_, std::io::Error>(found.remove(&key).expect("filled"))
            };
            vec![cache
                .get_or_fill(&format!("k{i:04}"), fill)
                .await
                .map_err(|e| e.to_string())]
        }));
    }
    until("every key is in flight", || {
        cache.flights_in_progress() == 120
    })
    .await;
    gate.open();
    for task in tasks {
        for answer in task.await.expect("task") {
            let value = answer.expect("value");
            assert!(value.starts_with('k'), "{value}");
        }
    }
    let filled = filled.lock().expect("filled").clone();
    let distinct: BTreeSet<&String> = filled.iter().collect();
    assert_eq!(filled.len(), 120, "no key filled twice: {filled:?}");
    assert_eq!(distinct.len(), 120);
    assert_eq!(cache.flights_in_progress(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_round_trips_per_batch() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), RedisConfig::default())
        .await
        .expect("connect");
    let cache = Cache::<String>::builder("batch-trips")
        .store(store)
        .l1(false)
        .build()
        .expect("config");
    // Learn the clear version once, so the counts below are the batch's.
    let warm = Calls::default();
    let _ = cache.get_many_or_fill(&["warm"], warm.fill()).await;

    let present = keys(0..100);
    for key in &present {
        cache
            .set(key, format!("value of {key}"))
            .await
            .expect("set");
    }
    server.reset_stats();
    let calls = Calls::default();
    let batch = cache.get_many_or_fill(&present, calls.fill()).await;
    assert!(batch.iter().all(|(_, result)| result.is_ok()));
    let stats = server.command_stats();
    // One pipeline: a PTTL and a GET per key, no script.
    assert_eq!(stats.get("pttl"), Some(&100), "{stats:?}");
    assert_eq!(stats.get("get"), Some(&100), "{stats:?}");
    assert_eq!(stats.get("evalsha"), None, "{stats:?}");
    assert!(calls.all().is_empty());

    let mixed: Vec<String> = keys(50..150);
    server.reset_stats();
    let calls = Calls::default();
    let batch = cache.get_many_or_fill(&mixed, calls.fill()).await;
    assert!(batch.iter().all(|(_, result)| result.is_ok()));
    let stats = server.command_stats();
    // The read of all 100, then a lease and a commit per missing key (50),
    // each sent concurrently: three rounds. The lease requests go in
    // plain commands (a `SET NX` and a `GET` each), the commits are the
    // scripts (each running its own `SET`).
    assert_eq!(stats.get("pttl").copied(), Some(100), "{stats:?}");
    assert_eq!(stats.get("evalsha").copied(), Some(50), "{stats:?}");
    assert_eq!(stats.get("set").copied(), Some(100), "{stats:?}");
    assert_eq!(calls.all().len(), 1);
    assert_eq!(calls.all()[0].len(), 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_per_key_and_nothing_is_stored() {
    let store = MemoryStore::new();
    let cache = Cache::<String>::builder("batch-errors")
        .store(store)
        .l1(true)
        .build()
        .expect("config");
    cache.set("present", "here".into()).await.expect("set");

    let failing = |_keys: Vec<String>| async {
        Err::<HashMap<String, String>, _>(std::io::Error::other("source down"))
    };
    let batch = cache
        .get_many_or_fill(&["present", "a", "b", "bad\u{1}key", "a"], failing)
        .await;
    assert_eq!(batch.len(), 4, "duplicates answered once");
    assert_eq!(
        batch.get("present").expect("asked").as_deref().ok(),
        Some("here")
    );
    for key in ["a", "b"] {
        match batch.get(key).expect("asked") {
            Err(Error::Fill(error)) => assert_eq!(error.to_string(), "source down"),
            other => panic!("{key}: {other:?}"),
        }
    }
    assert!(matches!(
        batch.get("bad\u{1}key").expect("asked"),
        Err(Error::InvalidKey(InvalidKey::ControlCharacter { .. }))
    ));
    assert_eq!(cache.peek("a").await.expect("read"), None, "nothing stored");

    let panicking = |_keys: Vec<String>| async {
        if true {
            panic!("batch boom");
        }
        Ok::<HashMap<String, String>, std::io::Error>(HashMap::new())
    };
    let batch = cache.get_many_or_fill(&["c"], panicking).await;
    assert!(batch
        .get("c")
        .expect("asked")
        .as_ref()
        .expect_err("panicked")
        .is_panic());

    // A key the fill leaves out is "not found", cached as such.
    let calls = Calls::default();
    let batch = cache
        .get_many_or_fill(&["absent-1", "d"], calls.fill())
        .await;
    assert!(matches!(
        batch.get("absent-1").expect("asked"),
        Err(Error::NotFound)
    ));
    assert!(batch.get("d").expect("asked").is_ok());
    let batch = cache.get_many_or_fill(&["absent-1"], calls.fill()).await;
    assert!(matches!(
        batch.get("absent-1").expect("asked"),
        Err(Error::NotFound)
    ));
    assert_eq!(calls.all().len(), 1, "the negative answer was cached");
    assert_eq!(cache.flights_in_progress(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_batch_fill_is_bounded_by_the_fill_timeout() {
    let cache = Cache::<String>::builder("batch-timeout")
        .store(MemoryStore::new())
        .fill_timeout(Duration::from_millis(100))
        .build()
        .expect("config");
    let never = |_keys: Vec<String>| async {
        std::future::pending::<()>().await;
        Ok::<HashMap<String, String>, std::io::Error>(HashMap::new())
    };
    let batch = cache.get_many_or_fill(&["x", "y"], never).await;
    for key in ["x", "y"] {
        assert!(batch
            .get(key)
            .expect("asked")
            .as_ref()
            .expect_err("timed out")
            .is_timeout());
    }
    assert_eq!(cache.flights_in_progress(), 0);
}

//! The Memcached store against real `memcached` processes: one fill across
//! OS processes, fences, faults failing open within bounds, whole-second
//! expiry, the item size limit and several servers.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use corral::store::Store;
use corral::store::{Commit, Grant, LeaseRequest, Lookup, Origin, StoreKey};
use corral::{Cache, MemcachedConfig, MemcachedStore, StoreErrorKind};
use corral_testkit::{MemcachedServer, Stampede, StampedeReport, Worker};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::support::{memcached_incr, run_stampede};

// ---------------------------------------------------------------- worker side

/// A worker process: connects to `CORRAL_WORKER_ADDR`, says `@ready`, and
/// runs `stampede <key> <callers> <fill_ms> <counter>` commands.
#[test]
#[ignore = "a worker process for the multi-process tests, started by them"]
fn worker() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let addr = std::env::var("CORRAL_WORKER_ADDR").expect("address");
        let store = MemcachedStore::connect(&[addr.as_str()], MemcachedConfig::default())
            .await
            .expect("connect");
        let cache = Cache::<String>::builder("procs")
            .store(store)
            .ttl(Duration::from_secs(60))
            .lease_ttl(Duration::from_secs(3))
            .fill_timeout(Duration::from_secs(60))
            .build()
            .expect("config");
        println!("@ready");
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let words: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
            let incr = {
                let addr = addr.clone();
                move |counter: String| {
                    let addr = addr.clone();
                    async move { memcached_incr(&addr, &counter).await }
                }
            };
            run_stampede(&cache, Stampede::parse(&words[1..]), incr)
                .await
                .print();
        }
    });
}

// ---------------------------------------------------------------- test side

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_of_250_callers_run_one_fill() {
    const PROCESSES: usize = 4;
    const CALLERS: usize = 250;
    let server = MemcachedServer::start();
    server.set_raw("fills", b"0", 0);
    let mut workers = Vec::new();
    for _ in 0..PROCESSES {
        workers.push(
            Worker::start(
                &crate::support::test_name(module_path!(), "worker"),
                &[("CORRAL_WORKER_ADDR", server.addr())],
            )
            .await,
        );
    }
    for worker in &mut workers {
        let stampede = Stampede {
            key: "hot".into(),
            callers: CALLERS,
            fill: Duration::from_millis(200),
            counter: "fills".into(),
        };
        worker.send(&stampede.to_string()).await;
    }
    let mut values = BTreeSet::new();
    for worker in &mut workers {
        let report = StampedeReport::read(worker).await;
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        assert_eq!(report.ok, CALLERS);
        values.extend(report.values);
    }
    let count = memcached_incr(&server.addr(), "fills").await.expect("incr") - 1;
    eprintln!("fills for {PROCESSES} x {CALLERS} callers: {count}");
    assert_eq!(
        count, 1,
        "one fill across {PROCESSES} processes; values {values:?}"
    );
    assert_eq!(
        values.len(),
        1,
        "every caller got the one value: {values:?}"
    );
}

fn request(lease: Duration) -> LeaseRequest {
    LeaseRequest {
        lease_ttl: lease,
        fence_ttl: lease,
        grant: Grant::IfNoValue,
    }
}

async fn store(server: &MemcachedServer, config: MemcachedConfig) -> MemcachedStore {
    MemcachedStore::connect(&[server.addr()], config)
        .await
        .expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fence_refuses_an_expired_leaders_commit() {
    let server = MemcachedServer::start();
    let store = store(&server, MemcachedConfig::default()).await;
    let key = StoreKey::new("fence:v1", "k");
    let short = request(Duration::from_millis(100));
    let Lookup::Granted(first) = store.get_or_lease(&key, &short).await.expect("lease") else {
        panic!("the first caller gets the lease");
    };
    assert!(matches!(
        store.get_or_lease(&key, &short).await.expect("lookup"),
        Lookup::Held { .. }
    ));
    // Polling for a state: the lease and its fence lapse by memcached's clock.
    let started = Instant::now();
    let second = loop {
        match store.get_or_lease(&key, &short).await.expect("lookup") {
            Lookup::Granted(lease) => break lease,
            Lookup::Held { .. } => {
                assert!(
                    started.elapsed() < Duration::from_secs(5),
                    "the lease never lapsed"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => panic!("unexpected {other:?}"),
        }
    };
    eprintln!("lease of 100 ms lapsed after {:?}", started.elapsed());
    let ttl = Duration::from_secs(60);
    let late = store
        .commit(&key, &first, b"stale", ttl, Origin::new(1))
        .await;
    assert_eq!(late.expect("commit"), Commit::Refused);
    let on_time = store
        .commit(&key, &second, b"new", ttl, Origin::new(1))
        .await;
    assert_eq!(on_time.expect("commit"), Commit::Stored);
    let stored = store.get(&key).await.expect("get").expect("a value");
    assert_eq!(stored.bytes, b"new");
    assert_eq!(stored.generation.as_deref(), Some(second.token()));
    // An invalidation moves the fence: a refresh over the old generation
    // is told the value changed, and an old lease cannot commit.
    store
        .invalidate(&key, Origin::new(1))
        .await
        .expect("invalidate");
    let again = store
        .commit(&key, &second, b"again", ttl, Origin::new(1))
        .await;
    assert_eq!(again.expect("commit"), Commit::Refused);
    let over = LeaseRequest {
        grant: Grant::OverGeneration(Some(second.token().into())),
        ..request(Duration::from_secs(1))
    };
    assert_eq!(
        store.get_or_lease(&key, &over).await.expect("lookup"),
        Lookup::Changed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_during_a_fill_wins_and_a_refresh_keeps_the_value() {
    let server = MemcachedServer::start();
    let store = store(&server, MemcachedConfig::default()).await;
    let key = StoreKey::new("set:v1", "k");
    let lease_req = request(Duration::from_secs(2));
    let Lookup::Granted(lease) = store.get_or_lease(&key, &lease_req).await.expect("lease") else {
        panic!("granted");
    };
    let ttl = Duration::from_secs(30);
    store
        .set(&key, b"written", ttl, Origin::new(1))
        .await
        .expect("set");
    let refused = store
        .commit(&key, &lease, b"old", ttl, Origin::new(1))
        .await;
    assert_eq!(refused.expect("commit"), Commit::Refused);
    let stored = store.get(&key).await.expect("get").expect("value");
    assert_eq!(stored.bytes, b"written");
    let remaining = stored.remaining.expect("remaining");
    assert!(remaining <= ttl + Duration::from_secs(1) && remaining >= ttl - Duration::from_secs(2));
    // A refresh over the generation read: the value stays readable meanwhile.
    let refresh = LeaseRequest {
        grant: Grant::OverGeneration(stored.generation.clone()),
        ..lease_req
    };
    let Lookup::Granted(refresher) = store.get_or_lease(&key, &refresh).await.expect("lease")
    else {
        panic!("refresh granted");
    };
    let during = store.get(&key).await.expect("get").expect("still there");
    assert_eq!(during.bytes, b"written");
    let done = store
        .commit(&key, &refresher, b"refreshed", ttl, Origin::new(1))
        .await;
    assert_eq!(done.expect("commit"), Commit::Stored);
    assert_eq!(
        store.get(&key).await.expect("get").expect("v").bytes,
        b"refreshed"
    );
}

/// How long a flight waits for a silent store before it fills without a
/// lease (the lease TTL).
const PATIENCE: Duration = Duration::from_millis(500);

async fn stampede_during_a_fault(server: &MemcachedServer, store: MemcachedStore) -> Duration {
    let cache = Cache::<String>::builder("faults")
        .store(store)
        .lease_ttl(PATIENCE)
        .fill_timeout(Duration::from_secs(10))
        .build()
        .expect("config");
    let started = Instant::now();
    let callers: Vec<_> = (0..100)
        .map(|i| {
            let cache = cache.clone();
            tokio::spawn(async move {
                cache
                    .get_or_fill(&format!("k{}", i % 10), || async {
                        Ok::<_, String>("v".to_owned())
                    })
                    .await
            })
        })
        .collect();
    for caller in callers {
        assert_eq!(caller.await.expect("task").expect("a value"), "v");
    }
    let took = started.elapsed();
    let stats = cache.stats();
    eprintln!(
        "100 callers on 10 keys answered in {took:?}: {} fail-open fills, {} store errors (pid {:?})",
        stats.fail_open_fills,
        stats.store_errors,
        server.pid()
    );
    // Every caller is answered; each flight filled without a lease (flights
    // that end before the next caller arrives fill again: nothing is stored).
    assert!((10..=100).contains(&stats.fail_open_fills), "{stats:?}");
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_fails_open_after_a_lease_of_silence() {
    let mut server = MemcachedServer::start();
    let store = store(&server, MemcachedConfig::default()).await;
    server.kill();
    let took = stampede_during_a_fault(&server, store).await;
    assert!(took >= PATIENCE, "{took:?}");
    assert!(took < Duration::from_secs(2), "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_server_fails_open_after_a_lease_of_silence() {
    let server = MemcachedServer::start();
    let config = MemcachedConfig {
        op_timeout: Duration::from_millis(200),
        ..MemcachedConfig::default()
    };
    let store = store(&server, config).await;
    server.freeze();
    let took = stampede_during_a_fault(&server, store.clone()).await;
    assert!(took >= PATIENCE, "{took:?}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    let error = store.ping().await.expect_err("frozen");
    assert_eq!(error.kind(), StoreErrorKind::Timeout);
    server.thaw();
    store.ping().await.expect("answers again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_expire_in_whole_seconds() {
    let server = MemcachedServer::start();
    let cache = Cache::<String>::builder("expiry")
        .store(store(&server, MemcachedConfig::default()).await)
        .build()
        .expect("config");
    let started = Instant::now();
    cache
        .set_with_ttl("k", "v".into(), Duration::from_secs(1))
        .await
        .expect("set");
    assert_eq!(cache.peek("k").await.expect("get"), Some("v".into()));
    while cache.peek("k").await.expect("get").is_some() {
        assert!(started.elapsed() < Duration::from_secs(4), "never expired");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let lived = started.elapsed();
    eprintln!("a 1 s entry was served for {lived:?}");
    assert!(lived >= Duration::from_millis(900), "{lived:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_beyond_the_item_size_limit_are_refused_clearly() {
    let server = MemcachedServer::start();
    let store = store(&server, MemcachedConfig::default()).await;
    let key = StoreKey::new("size:v1", "big");
    let ttl = Duration::from_secs(30);
    let big = vec![7u8; 1024 * 1024];
    let error = store
        .set(&key, &big, ttl, Origin::new(1))
        .await
        .expect_err("too big");
    assert!(error.to_string().contains("item size limit"), "{error}");
    let fits = vec![7u8; 512 * 1024];
    store
        .set(&key, &fits, ttl, Origin::new(1))
        .await
        .expect("fits");
    assert_eq!(
        store.get(&key).await.expect("get").expect("v").bytes.len(),
        fits.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_spread_over_several_servers_and_odd_keys_fit() {
    let servers = [
        MemcachedServer::start(),
        MemcachedServer::start(),
        MemcachedServer::start(),
    ];
    let addrs: Vec<String> = servers.iter().map(MemcachedServer::addr).collect();
    let store = MemcachedStore::connect(&addrs, MemcachedConfig::default())
        .await
        .expect("connect");
    let cache = Cache::<String>::builder("ring")
        .store(store.clone())
        .build()
        .expect("config");
    let long = "é ".repeat(300);
    let mut keys: Vec<String> = (0..60).map(|i| format!("key-{i}")).collect();
    keys.extend(["with space".into(), "#hash".into(), long]);
    for key in &keys {
        cache
            .set(key, format!("value of {key}"))
            .await
            .expect("set");
    }
    let mut per_server = [0usize; 3];
    for key in &keys {
        assert_eq!(
            cache.peek(key).await.expect("get"),
            Some(format!("value of {key}"))
        );
        let item = store.slot_item(&StoreKey::new(cache.namespace(), key));
        assert!(
            item.len() <= 250 && item.bytes().all(|b| b.is_ascii_graphic()),
            "{item}"
        );
        let holders: Vec<usize> = (0..3).filter(|&i| servers[i].exists(&item)).collect();
        assert_eq!(holders.len(), 1, "{item} on {holders:?}");
        per_server[holders[0]] += 1;
    }
    eprintln!("items per server: {per_server:?}");
    assert!(per_server.iter().all(|&n| n >= 5), "{per_server:?}");
}

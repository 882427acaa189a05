//! A Redis Cluster under faults: three masters with one replica each
//! (`--cluster-node-timeout 1000`); a master is killed with SIGKILL and its
//! replica promoted while caches on separate `connect_cluster` connections
//! keep working. Every wait is for an event (a counter, the cluster's own
//! state) and bounded; the figures are printed for the issue note.
#![cfg(feature = "redis")]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corral::{Cache, RedisConfig, RedisStore};
use corral_testkit::{until, Gate, RedisCluster};

use crate::support::until_heard;

const OP_TIMEOUT: Duration = Duration::from_millis(300);
const FILL_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on a recovery after the cluster says it is healthy again.
const RECOVERY: Duration = Duration::from_secs(10);

pub(crate) fn config() -> RedisConfig {
    RedisConfig::default()
        .op_timeout(OP_TIMEOUT)
        .connect_timeout(Duration::from_millis(500))
        .reconnect_max_delay(Duration::from_millis(200))
}

async fn store(cluster: &RedisCluster) -> RedisStore {
    RedisStore::connect_cluster(&cluster.urls(), config())
        .await
        .unwrap_or_else(|e| panic!("connect_cluster: {e}\n{}", cluster.logs()))
}

pub(crate) fn cache(store: &RedisStore, name: &str, ttl: Duration, l1: bool) -> Cache<String> {
    Cache::<String>::builder(name)
        .store(store.clone())
        .ttl(ttl)
        .lease_ttl(Duration::from_secs(3))
        .store_timeout(OP_TIMEOUT)
        .fill_timeout(FILL_TIMEOUT)
        // The breaker stays on, as in production, with a short cool-down:
        // calls failing through the failover open it, and the waits below
        // are for the cluster's recovery, not for the breaker's 5 s default.
        .circuit_breaker(5, Duration::from_millis(200))
        .l1(l1)
        .build()
        .expect("config")
}

/// A name in the slot of a cache key's value, lease and fence (see
/// `RedisStore`, "Key layout"; the slot depends on the key alone): naming it
/// to `CLUSTER KEYSLOT` gives the key's slot.
pub(crate) fn tag(key: &str) -> String {
    corral::RedisStore::keys_of(&corral::store::StoreKey::new("any:v1", key)).value
}

/// The first `prefix<i>` whose slot node `node` serves.
pub(crate) fn key_on(cluster: &RedisCluster, node: usize, prefix: &str) -> String {
    (0..1000)
        .map(|i| format!("{prefix}{i}"))
        .find(|key| cluster.master_of(&tag(key)) == node)
        .unwrap_or_else(|| panic!("no {prefix}* key on node {node}"))
}

/// Retries `set` until the store takes it (after a failover), bounded.
pub(crate) async fn set_until_ok(cache: &Cache<String>, key: &str, value: &str) {
    let started = Instant::now();
    while let Err(e) = cache.set(key, value.to_owned()).await {
        assert!(started.elapsed() < RECOVERY, "set never worked again: {e}");
        tokio::task::yield_now().await;
    }
}

/// Reads `key` until the read works (a cache whose calls failed through
/// the failover may have opened its circuit breaker: its reads are refused
/// until the cool-down ends), within [`RECOVERY`].
pub(crate) async fn get_until_ok(cache: &Cache<String>, key: &str) -> Option<String> {
    let started = Instant::now();
    loop {
        match cache.peek(key).await {
            Ok(value) => return value,
            Err(e) => assert!(started.elapsed() < RECOVERY, "get never worked again: {e}"),
        }
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn master_killed_mid_fill() {
    let mut cluster = RedisCluster::start_with_replicas();
    let stores = [store(&cluster).await, store(&cluster).await];
    let caches: Vec<Cache<String>> = stores
        .iter()
        .map(|s| cache(s, "faults", Duration::from_secs(60), false))
        .collect();
    let tiers: Vec<Cache<String>> = stores
        .iter()
        .map(|s| cache(s, "tiers", Duration::from_secs(60), true))
        .collect();
    // Each tier hears the other: both subscriptions are up.
    for (index, tier) in tiers.iter().enumerate() {
        until_heard(&tiers[1 - index], tier).await;
    }
    // Each store's subscriber listens on the first seed, node 0: killing
    // the master of a key on node 0 also kills both subscriptions.
    let dead = 0;
    let key = key_on(&cluster, dead, "cold-");
    let gate = Gate::new();
    let fills: Arc<[AtomicUsize; 2]> = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let mut callers = Vec::new();
    for (instance, cache) in caches.iter().enumerate() {
        for _ in 0..200 {
            let (cache, gate, fills, key) =
                (cache.clone(), gate.clone(), Arc::clone(&fills), key.clone());
            callers.push(tokio::spawn(async move {
                let started = Instant::now();
                let answer = cache
                    .get_or_fill(&key, move || async move {
                        fills[instance].fetch_add(1, SeqCst);
                        gate.wait().await;
                        Ok::<_, String>(format!("from-{instance}"))
                    })
                    .await;
                (answer, started.elapsed())
            }));
        }
    }
    let total_fills = |fills: &[AtomicUsize; 2]| fills[0].load(SeqCst) + fills[1].load(SeqCst);
    until("the leader's fill started", || total_fills(&fills) == 1).await;
    let leader = usize::from(fills[1].load(SeqCst) == 1);
    let other = 1 - leader;
    until("the other instance waits on the held lease", || {
        caches[other].stats().lease_waits >= 1
    })
    .await;

    let resets: Vec<u64> = tiers.iter().map(|t| t.stats().backplane_resets).collect();
    let killed = Instant::now();
    cluster.kill(dead);
    let promoted = tokio::task::block_in_place(|| cluster.wait_for_failover(&tag(&key), dead));
    let failover = killed.elapsed();
    // A newer value, written by the other instance after the failover: the
    // leader's commit (its fence on the dead master, or moved) must not
    // overwrite it.
    set_until_ok(&caches[other], &key, "newer").await;
    let writable = killed.elapsed();
    gate.open();

    let mut answers: BTreeMap<String, usize> = BTreeMap::new();
    let mut slowest = Duration::ZERO;
    for caller in callers {
        let (answer, took) = caller.await.expect("caller task");
        let value = answer.unwrap_or_else(|e| panic!("a caller got no value: {e}"));
        *answers.entry(value).or_default() += 1;
        slowest = slowest.max(took);
    }
    assert!(
        answers
            .keys()
            .all(|v| ["from-0", "from-1", "newer"].contains(&v.as_str())),
        "{answers:?}"
    );
    assert!(
        slowest < FILL_TIMEOUT + failover,
        "slowest caller {slowest:?}"
    );
    let fills_by = [fills[0].load(SeqCst), fills[1].load(SeqCst)];
    assert!(
        fills_by.iter().all(|&n| n <= 1),
        "at most one fill per instance: {fills_by:?}"
    );
    let stats = [caches[0].stats(), caches[1].stats()];
    assert_eq!(
        stats[0].commits + stats[1].commits,
        0,
        "no fill committed over the newer value"
    );
    for cache in &caches {
        assert_eq!(get_until_ok(cache, &key).await, Some("newer".into()));
    }

    // Notifications resume: both subscribers lost node 0; once they are
    // subscribed again (each L1 is dropped then), a write by one instance
    // evicts the other's L1 copy through the backplane.
    for (tier, resets) in tiers.iter().zip(resets) {
        until("the subscriber is back", || {
            tier.stats().backplane_resets > resets
        })
        .await;
    }
    let resubscribed = killed.elapsed();
    let probe = key_on(&cluster, promoted, "probe-");
    set_until_ok(&tiers[1], &probe, "one").await;
    let read = tiers[0]
        .get_or_fill(&probe, || async { Ok::<String, String>("filled".into()) })
        .await
        .expect("read");
    assert_eq!(read, "one");
    let messages = tiers[0].stats().backplane_messages;
    set_until_ok(&tiers[1], &probe, "two").await;
    until("the eviction arrived", || {
        tiers[0].stats().backplane_messages > messages
    })
    .await;
    // What the store holds now, read by a third cache with no L1 (on
    // the other store): the evicted instance must serve that, not its old
    // copy.
    let reader = cache(&stores[1], "tiers", Duration::from_secs(60), false);
    let stored = reader.peek(&probe).await.expect("read");
    if stored.as_deref() != Some("two") {
        // A `set` of "one" that timed out right after the failover landed
        // after "two": a write reported as failed may still happen.
        eprintln!("the store holds {stored:?} after set(\"two\") returned");
    }
    let served = tiers[0].peek(&probe).await.expect("read");
    assert_eq!(
        served,
        stored,
        "the evicted L1 served {served:?}, the store holds {stored:?} ({:?})",
        tiers[0].stats()
    );

    eprintln!(
        "master killed mid-fill: 400 callers answered {answers:?}, slowest {slowest:?}; \
         fills per instance {fills_by:?} (leader: instance {leader}); \
         leader commits {} refused {} store errors {}; other instance fail-open fills {} store errors {}; \
         failover (cluster_state:ok, slot on the replica) after {failover:?}, \
         set worked after {writable:?}, subscriber back after {resubscribed:?}",
        stats[leader].commits,
        stats[leader].commits_refused,
        stats[leader].store_errors,
        stats[other].fail_open_fills,
        stats[other].store_errors,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steady_traffic_through_a_failover() {
    const KEYS: usize = 8;
    const WORKERS: usize = 8;
    let mut cluster = RedisCluster::start_with_replicas();
    let store = store(&cluster).await;
    // A short TTL keeps keys expiring, so leases and commits run throughout.
    let cache = cache(&store, "steady", Duration::from_millis(300), false);
    let keys: Vec<String> = (0..KEYS).map(|i| format!("steady-{i}")).collect();
    let dead = cluster.master_of(&tag(&keys[0]));
    let on_dead = keys
        .iter()
        .filter(|k| cluster.master_of(&tag(k)) == dead)
        .count();

    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicUsize::new(0));
    let fills: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (cache, keys, stop, calls, fills) = (
                cache.clone(),
                keys.clone(),
                Arc::clone(&stop),
                Arc::clone(&calls),
                Arc::clone(&fills),
            );
            tokio::spawn(async move {
                let mut slowest = Duration::ZERO;
                let mut i = w;
                while !stop.load(SeqCst) {
                    let key = &keys[i % keys.len()];
                    i += 1;
                    let fills = Arc::clone(&fills);
                    let owned = key.clone();
                    let started = Instant::now();
                    let value = cache
                        .get_or_fill(key, move || async move {
                            *fills.lock().expect("fills").entry(owned).or_default() += 1;
                            Ok::<_, String>("v".to_owned())
                        })
                        .await
                        .unwrap_or_else(|e| panic!("{key}: no value: {e}"));
                    assert_eq!(value, "v");
                    slowest = slowest.max(started.elapsed());
                    calls.fetch_add(1, SeqCst);
                }
                slowest
            })
        })
        .collect();

    until("traffic flows", || calls.load(SeqCst) >= 200).await;
    let before = cache.stats();
    let killed = Instant::now();
    cluster.kill(dead);
    tokio::task::block_in_place(|| {
        for key in &keys {
            cluster.wait_for_failover(&tag(key), dead);
        }
    });
    let failover = killed.elapsed();
    let at_ok = cache.stats();

    // After the cluster is healthy again, store errors stop: wait for a
    // quiet window (a fixed number of calls with no new error), bounded.
    const QUIET_CALLS: usize = 500;
    let mut errors = cache.stats().store_errors;
    let mut quiet_from = calls.load(SeqCst);
    let mut recovered = killed.elapsed();
    loop {
        let now = cache.stats().store_errors;
        if now != errors {
            errors = now;
            quiet_from = calls.load(SeqCst);
            recovered = killed.elapsed();
        } else if calls.load(SeqCst) >= quiet_from + QUIET_CALLS {
            break;
        }
        assert!(
            killed.elapsed() < failover + RECOVERY,
            "store errors kept growing after the failover: {:?}",
            cache.stats()
        );
        tokio::task::yield_now().await;
    }
    stop.store(true, SeqCst);
    let mut slowest = Duration::ZERO;
    for worker in workers {
        slowest = slowest.max(worker.await.expect("worker"));
    }
    let after = cache.stats();
    assert!(slowest < FILL_TIMEOUT, "slowest call {slowest:?}");
    let fills = fills.lock().expect("fills").clone();
    eprintln!(
        "steady traffic through a failover: {} calls on {KEYS} keys ({on_dead} on the killed master), \
         slowest {slowest:?}; fills per key {fills:?}; \
         store errors {} before the kill, {} at cluster_state:ok ({failover:?} after the kill), \
         {} at the end (last new error {recovered:?} after the kill); \
         fail-open fills {} during the failover, {} in all",
        calls.load(SeqCst),
        before.store_errors,
        at_ok.store_errors,
        after.store_errors,
        at_ok.fail_open_fills - before.fail_open_fills,
        after.fail_open_fills,
    );
}

/// An invalidation's writes to a master that no longer answers (the copies
/// of its slots, as one pipeline, then each alone) are calls like any
/// other: their failures count toward a rebuild of the connection, so the
/// invalidation that finds a master dead starts one. (Killed without a
/// replica: the cluster stays `ok`, the master only unreachable, for the
/// node timeout, far longer than this test's calls.)
#[tokio::test]
async fn invalidations_failing_on_a_dead_master_rebuild_the_connection() {
    // A current-thread runtime: this thread's subscriber sees every task.
    let (captured, _default) = corral_testkit::capture(tracing::Level::INFO);
    let mut cluster = RedisCluster::start();
    let store = store(&cluster).await;
    let cache = Cache::<String>::builder("moves")
        .store(store)
        .store_timeout(OP_TIMEOUT)
        .no_circuit_breaker()
        .build()
        .expect("config");
    let rebuilding = |text: &str| {
        text.lines()
            .filter(|line| line.contains("WARN") && line.contains("calls keep failing"))
            .count()
    };
    cache
        .invalidate_tag("t")
        .await
        .expect("every master answers");
    assert_eq!(rebuilding(&captured.text()), 0, "{}", captured.text());

    cluster.kill(1);
    let failed = cache.invalidate_tag("t").await;
    assert!(failed.is_err(), "a master is dead: {failed:?}");
    let text = captured.text();
    assert_eq!(rebuilding(&text), 1, "{text}");
}

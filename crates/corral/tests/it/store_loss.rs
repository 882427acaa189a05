//! Invalidation survives a store that forgets. Each scenario fills 200
//! tagged entries, starts 50 more fills that wait on a gate, invalidates
//! the tag (or clears the namespace), then makes the store lose the
//! version — evicted under `allkeys-lru` / `volatile-lru`, `DEL`,
//! `FLUSHALL`, a restart without persistence, memcached's slab eviction —
//! and lets the gated fills finish. Every entry is then read by the cache
//! that filled it and by a cache built after the loss: none may come back
//! with a value from before the invalidation, and none of the gated fills'
//! late values may be served.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use corral::clock::TokioClock;
use corral::store::{
    Commit, Grant, Lease, LeaseRequest, Lookup, MemoryStore, Origin, Store, StoreKey,
};
use corral::{Cache, FillOptions, MemcachedConfig, MemcachedStore, RedisConfig, RedisStore};
use corral_testkit::{until, Gate, MemcachedServer, RedisCluster, RedisServer};
use tokio::task::JoinHandle;

const ENTRIES: usize = 200;
const LATE: usize = 50;
const TAG: &str = "team";
const NAME: &str = "loss";

/// What is invalidated: one tag, or the whole namespace.
#[derive(Clone, Copy, Debug)]
enum Target {
    Tag,
    Clear,
}

impl Target {
    /// The tag whose version the store loses (the empty tag: clear).
    fn tag(self) -> &'static str {
        match self {
            Target::Tag => TAG,
            Target::Clear => "",
        }
    }
}

/// The Redis key holding the version of `target`'s tag in `cache`'s
/// namespace (see the Redis store's key layout).
fn redis_version_key(cache: &Cache<String>, target: Target) -> String {
    let namespace = cache.namespace();
    format!("corral:t:{namespace}:{{{namespace}}}:{}", target.tag())
}

/// The memcached item holding the version of `target`'s tag.
fn memcached_version_item(cache: &Cache<String>, target: Target) -> String {
    format!("corral:t:{}:{}", cache.namespace(), target.tag())
}

fn builder() -> corral::CacheBuilder<String> {
    Cache::<String>::builder(NAME)
        .l1(false)
        .ttl(Duration::from_secs(600))
        .fill_timeout(Duration::from_secs(20))
}

async fn redis_cache(url: &str) -> Cache<String> {
    let store = RedisStore::connect(url, RedisConfig::default())
        .await
        .expect("connect");
    builder().store(store).l1(false).build().expect("config")
}

async fn memcached_cache(server: &MemcachedServer) -> Cache<String> {
    let store = MemcachedStore::connect(&[server.addr()], MemcachedConfig::default())
        .await
        .expect("connect");
    builder().store(store).l1(false).build().expect("config")
}

fn options() -> FillOptions {
    FillOptions::new().tags([TAG])
}

/// Fills taken before the loss and still running: their handles and the
/// gate they wait on.
struct Late {
    gate: Gate,
    fills: Vec<JoinHandle<String>>,
}

/// Fills the entries, starts the gated fills, and invalidates `target`.
async fn before_loss(cache: &Cache<String>, target: Target) -> Late {
    for i in 0..ENTRIES {
        let value = cache
            .get_or_fill(&format!("e{i}"), move || async move {
                Ok::<_, std::io::Error>(format!("before-{i}"))
            })
            .options(options())
            .await
            .expect("fill");
        assert_eq!(value, format!("before-{i}"));
    }
    // Stored: a read without a fill finds each in the store (no L1).
    for i in 0..ENTRIES {
        let stored = cache.peek(&format!("e{i}")).await.expect("read");
        assert_eq!(stored, Some(format!("before-{i}")));
    }
    let gate = Gate::new();
    let started = Arc::new(AtomicUsize::new(0));
    let fills = (0..LATE)
        .map(|i| {
            let (cache, gate, started) = (cache.clone(), gate.clone(), Arc::clone(&started));
            tokio::spawn(async move {
                cache
                    .get_or_fill(&format!("late{i}"), move || async move {
                        // The fill's stamps were read before it started.
                        started.fetch_add(1, SeqCst);
                        gate.wait().await;
                        Ok::<_, std::io::Error>(format!("late-{i}"))
                    })
                    .options(options())
                    .await
                    .expect("late fill")
            })
        })
        .collect();
    until("every late fill started", || started.load(SeqCst) == LATE).await;
    match target {
        Target::Tag => cache.invalidate_tag(TAG).await.expect("invalidate tag"),
        Target::Clear => cache.clear().await.expect("clear"),
    }
    Late { gate, fills }
}

/// Lets the gated fills finish and reads every entry through `old` and
/// `fresh` (each the first reader of half of them). Returns how many
/// invalidated values and late values were served.
async fn after_loss(old: &Cache<String>, fresh: &Cache<String>, late: Late) -> (usize, usize) {
    late.gate.open();
    for (i, fill) in late.fills.into_iter().enumerate() {
        // The callers of a fenced fill still get its value.
        assert_eq!(fill.await.expect("task"), format!("late-{i}"));
    }
    let mut invalidated = 0;
    for pass in 0..2 {
        for i in 0..ENTRIES {
            let reader = if (i + pass) % 2 == 0 { fresh } else { old };
            let value = reader
                .get_or_fill(&format!("e{i}"), move || async move {
                    Ok::<_, std::io::Error>(format!("after-{i}"))
                })
                .options(options())
                .await
                .expect("read");
            invalidated += usize::from(value.starts_with("before-"));
        }
    }
    let mut late_served = 0;
    for i in 0..LATE {
        for reader in [fresh, old] {
            let value = reader
                .get_or_fill(&format!("late{i}"), move || async move {
                    Ok::<_, std::io::Error>(format!("refilled-{i}"))
                })
                .options(options())
                .await
                .expect("read");
            late_served += usize::from(value.starts_with("late-"));
        }
    }
    (invalidated, late_served)
}

fn assert_nothing_served(what: &str, target: Target, (invalidated, late): (usize, usize)) {
    eprintln!(
        "{what}, {target:?}: {invalidated} of {} invalidated reads served, {late} of {} late values served",
        2 * ENTRIES,
        2 * LATE
    );
    assert_eq!(
        invalidated, 0,
        "{what}, {target:?}: invalidated values served"
    );
    assert_eq!(late, 0, "{what}, {target:?}: late commits served");
}

/// Writes 1 KiB values (with a TTL, so `volatile-lru` may evict them too)
/// through one connection until `key` is gone; `EXISTS` does not touch
/// the key's LRU clock.
async fn flood_redis_until_gone(server: &RedisServer, key: &str) {
    let client = redis::Client::open(server.url()).expect("url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("flood connection");
    let value = vec![b'x'; 1024];
    for batch in 0..400 {
        let exists: i64 = redis::cmd("EXISTS")
            .arg(key)
            .query_async(&mut conn)
            .await
            .expect("exists");
        if exists == 0 {
            eprintln!("{key} evicted after {batch} batches of 500 writes");
            return;
        }
        let mut pipe = redis::pipe();
        for n in 0..500 {
            pipe.cmd("SET")
                .arg(format!("flood:{batch}:{n}"))
                .arg(&value)
                .arg("EX")
                .arg(3600)
                .ignore();
        }
        let () = pipe.query_async(&mut conn).await.expect("flood");
    }
    panic!("{key} survived 200,000 writes of 1 KiB");
}

async fn redis_evicted(policy: &str, target: Target) {
    let server = RedisServer::start_with(&["--maxmemory", "4mb", "--maxmemory-policy", policy]);
    let old = redis_cache(&server.url()).await;
    let late = before_loss(&old, target).await;
    flood_redis_until_gone(&server, &redis_version_key(&old, target)).await;
    let fresh = redis_cache(&server.url()).await;
    let outcome = after_loss(&old, &fresh, late).await;
    assert_nothing_served(&format!("redis {policy}"), target, outcome);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_allkeys_lru_evicts_the_version() {
    for target in [Target::Tag, Target::Clear] {
        redis_evicted("allkeys-lru", target).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_volatile_lru_evicts_the_version() {
    for target in [Target::Tag, Target::Clear] {
        redis_evicted("volatile-lru", target).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_del_of_the_version_key() {
    for target in [Target::Tag, Target::Clear] {
        let server = RedisServer::start();
        let old = redis_cache(&server.url()).await;
        let late = before_loss(&old, target).await;
        let key = redis_version_key(&old, target);
        assert_eq!(server.cli(&["DEL", &key]), "1", "{key} existed");
        let fresh = redis_cache(&server.url()).await;
        assert_nothing_served("redis DEL", target, after_loss(&old, &fresh, late).await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_flushall() {
    for target in [Target::Tag, Target::Clear] {
        let server = RedisServer::start();
        let old = redis_cache(&server.url()).await;
        let late = before_loss(&old, target).await;
        assert_eq!(server.cli(&["FLUSHALL"]), "OK");
        let fresh = redis_cache(&server.url()).await;
        assert_nothing_served(
            "redis FLUSHALL",
            target,
            after_loss(&old, &fresh, late).await,
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restart_without_persistence() {
    for target in [Target::Tag, Target::Clear] {
        let mut server = RedisServer::start();
        let old = redis_cache(&server.url()).await;
        let late = before_loss(&old, target).await;
        server.restart();
        // The old cache's store reconnects in the background; a read before
        // then fails open (fills without storing), which serves nothing old
        // either, so wait until it answers to test the reconnected path.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !old.health().await.is_ok() {
            assert!(std::time::Instant::now() < deadline, "no reconnection");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let fresh = redis_cache(&server.url()).await;
        assert_nothing_served(
            "redis restart",
            target,
            after_loss(&old, &fresh, late).await,
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_del_of_the_version_key() {
    let cluster = RedisCluster::start();
    for target in [Target::Tag, Target::Clear] {
        let connect = || async {
            let store = RedisStore::connect_cluster(&cluster.urls(), RedisConfig::default())
                .await
                .expect("connect");
            builder().store(store).l1(false).build().expect("config")
        };
        let old = connect().await;
        let late = before_loss(&old, target).await;
        // Each bucket holds its own copy of the version, beside its
        // entries: every copy is lost.
        let pattern = format!("corral:t:{}:{{*}}:{}", old.namespace(), target.tag());
        let mut deleted = 0;
        for node in cluster.nodes() {
            let Ok(found) = node.try_cli(&["KEYS", &pattern]) else {
                continue;
            };
            for copy in found.lines().filter(|line| !line.is_empty()) {
                deleted += usize::from(node.cli(&["DEL", copy]) == "1");
            }
        }
        assert!(deleted > 0, "no copy of {pattern} found");
        let fresh = connect().await;
        assert_nothing_served("cluster DEL", target, after_loss(&old, &fresh, late).await);
        // The next target starts from an empty namespace.
        for node in cluster.nodes() {
            let _ = node.try_cli(&["FLUSHALL"]);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memcached_evicts_the_version_with_its_slab_class() {
    for target in [Target::Tag, Target::Clear] {
        let server = MemcachedServer::start_with(&["-m", "4"]);
        let old = memcached_cache(&server).await;
        let late = before_loss(&old, target).await;
        let item = memcached_version_item(&old, target);
        let value_len = server.value_len(&item).expect("the version exists");
        // Items of the version item's own size: memcached evicts per slab
        // class, so larger fillers would never reach it.
        let mut written = 0;
        while server.exists(&item) {
            assert!(written < 2_000_000, "{item} survived {written} items");
            server.flood(&format!("f{written}:"), 20_000, item.len(), value_len);
            written += 20_000;
        }
        eprintln!("{item} evicted after {written} items of its size");
        let fresh = memcached_cache(&server).await;
        assert_nothing_served(
            "memcached eviction",
            target,
            after_loss(&old, &fresh, late).await,
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memcached_delete_of_the_version_item() {
    for target in [Target::Tag, Target::Clear] {
        let server = MemcachedServer::start();
        let old = memcached_cache(&server).await;
        let late = before_loss(&old, target).await;
        let item = memcached_version_item(&old, target);
        assert_eq!(server.request(format!("md {item}\r\n").as_bytes()), "HD");
        let fresh = memcached_cache(&server).await;
        assert_nothing_served(
            "memcached delete",
            target,
            after_loss(&old, &fresh, late).await,
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memcached_flush_all() {
    for target in [Target::Tag, Target::Clear] {
        let server = MemcachedServer::start();
        let old = memcached_cache(&server).await;
        let late = before_loss(&old, target).await;
        server.flush_all();
        let fresh = memcached_cache(&server).await;
        assert_nothing_served(
            "memcached flush_all",
            target,
            after_loss(&old, &fresh, late).await,
        );
    }
}

/// Three servers, each with its own copies of the versions: the gated
/// fills of keys spread over them are fenced by the copies of their own
/// servers, and one server flushed loses only its copies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memcached_three_servers_fence_fills_at_each_servers_copy() {
    let servers = [
        MemcachedServer::start(),
        MemcachedServer::start(),
        MemcachedServer::start(),
    ];
    let addrs: Vec<String> = servers.iter().map(MemcachedServer::addr).collect();
    let connect = || async {
        let store = MemcachedStore::connect(&addrs, MemcachedConfig::default())
            .await
            .expect("connect");
        builder().store(store).build().expect("config")
    };
    for target in [Target::Tag, Target::Clear] {
        let old = connect().await;
        let late = before_loss(&old, target).await;
        let item = memcached_version_item(&old, target);
        assert!(
            servers.iter().all(|server| server.exists(&item)),
            "every server holds a copy of {item}"
        );
        servers[1].flush_all();
        let fresh = connect().await;
        assert_nothing_served(
            "memcached, 3 servers, one flushed",
            target,
            after_loss(&old, &fresh, late).await,
        );
        for server in &servers {
            server.flush_all();
        }
    }
}

fn memory_cache(store: &MemoryStore) -> Cache<String> {
    builder()
        .store(store.clone())
        .l1(false)
        .clock(TokioClock::new())
        .build()
        .expect("config")
}

#[tokio::test(start_paused = true)]
async fn memory_store_forgets_versions_or_everything() {
    for target in [Target::Tag, Target::Clear] {
        for flush in [false, true] {
            let store = MemoryStore::new();
            let old = memory_cache(&store);
            let late = before_loss(&old, target).await;
            if flush {
                store.flush();
            } else {
                store.forget_tag_versions();
            }
            let fresh = memory_cache(&store);
            let what = if flush {
                "memory flush"
            } else {
                "memory lost versions"
            };
            assert_nothing_served(what, target, after_loss(&old, &fresh, late).await);
        }
    }
}

/// A cache that knows a version keeps it only while the backplane says
/// nothing: a version recreated by another cache after a loss is announced
/// like an invalidation, so caches do not keep refilling each other's
/// entries under two versions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recreated_version_is_announced_to_other_caches() {
    let server = RedisServer::start();
    let a = redis_cache(&server.url()).await;
    let b = redis_cache(&server.url()).await;
    let fills = Arc::new(AtomicUsize::new(0));
    let read = |cache: Cache<String>, fills: Arc<AtomicUsize>| async move {
        cache
            .get_or_fill("k", move || async move {
                fills.fetch_add(1, SeqCst);
                Ok::<_, std::io::Error>("v".to_owned())
            })
            .options(options())
            .await
            .expect("read")
    };
    read(a.clone(), Arc::clone(&fills)).await;
    read(b.clone(), Arc::clone(&fills)).await;
    assert_eq!(fills.load(SeqCst), 1, "b read a's entry");
    // Both know the versions now; the store loses the tag's.
    assert_eq!(
        server.cli(&["DEL", &redis_version_key(&a, Target::Tag)]),
        "1"
    );
    let c = redis_cache(&server.url()).await;
    let messages = a.stats().backplane_messages;
    read(c.clone(), Arc::clone(&fills)).await;
    assert_eq!(fills.load(SeqCst), 2, "c recreated the version: a miss");
    until("a heard of the new version", || {
        a.stats().backplane_messages > messages
    })
    .await;
    read(a.clone(), Arc::clone(&fills)).await;
    assert_eq!(
        fills.load(SeqCst),
        2,
        "a reads c's entry under the new version"
    );
}

// A `MemoryStore` at its bound drops expired keys first, then the least
// recently used values, and a fill in flight only when every key holds one;
// whatever it drops follows the rules above.

const SECOND: Duration = Duration::from_secs(1);

fn lease_request() -> LeaseRequest {
    LeaseRequest {
        lease_ttl: 30 * SECOND,
        fence_ttl: 60 * SECOND,
        grant: Grant::IfNoValue,
    }
}

fn skey(key: &str) -> StoreKey {
    StoreKey::new("bound:v0", key)
}

async fn grant(store: &MemoryStore, key: &str) -> Lease {
    match store.get_or_lease(&skey(key), &lease_request()).await {
        Ok(Lookup::Granted(lease)) => lease,
        other => panic!("{key}: no lease granted: {other:?}"),
    }
}

async fn commit(store: &MemoryStore, key: &str, lease: &Lease) -> Commit {
    store
        .commit(&skey(key), lease, b"filled", 600 * SECOND, Origin::new(0))
        .await
        .expect("commit")
}

async fn set(store: &MemoryStore, key: &str, ttl: Duration) {
    store
        .set(&skey(key), key.as_bytes(), ttl, Origin::new(0))
        .await
        .expect("set");
}

async fn has_value(store: &MemoryStore, key: &str) -> bool {
    store.get(&skey(key)).await.expect("get").is_some()
}

/// A cache fills ten times the bound of new keys while another of its
/// fills holds a lease: the bound holds, the oldest values go, and the
/// leaseholder's commit lands.
#[tokio::test(start_paused = true)]
async fn a_fill_in_flight_commits_while_its_memory_store_overflows() {
    let store = MemoryStore::with_max_keys(100);
    let cache = memory_cache(&store);
    let gate = Gate::new();
    let started = Arc::new(AtomicUsize::new(0));
    let held = {
        let (cache, gate, started) = (cache.clone(), gate.clone(), Arc::clone(&started));
        tokio::spawn(async move {
            cache
                .get_or_fill("held", move || async move {
                    started.fetch_add(1, SeqCst);
                    gate.wait().await;
                    Ok::<_, std::io::Error>("held-value".to_owned())
                })
                .await
                .expect("held fill")
        })
    };
    until("the held fill started", || started.load(SeqCst) == 1).await;
    for i in 0..1_000 {
        let value = cache
            .get_or_fill(&format!("k{i}"), move || async move {
                Ok::<_, std::io::Error>(format!("v{i}"))
            })
            .await
            .expect("fill");
        assert_eq!(value, format!("v{i}"));
        assert!(
            store.len() <= 100,
            "{} keys past a bound of 100",
            store.len()
        );
    }
    let fresh = memory_cache(&store);
    assert_eq!(
        fresh.peek("k0").await.expect("peek"),
        None,
        "the least recently used value was dropped"
    );
    assert_eq!(
        fresh.peek("k999").await.expect("peek"),
        Some("v999".to_owned())
    );
    gate.open();
    assert_eq!(held.await.expect("join"), "held-value");
    let stats = cache.stats();
    assert_eq!(stats.commits_refused, 0, "{stats:?}");
    assert_eq!(
        fresh.peek("held").await.expect("peek"),
        Some("held-value".to_owned()),
        "the leaseholder's commit landed"
    );
}

/// Expired keys go before the least recently used value, and values before
/// a fill in flight even when that fill is the least recently used key.
#[tokio::test(start_paused = true)]
async fn a_full_memory_store_drops_expired_keys_then_lru_values_then_fills() {
    let store = MemoryStore::with_max_keys(3);
    let fill = grant(&store, "fill").await;
    set(&store, "short", SECOND).await;
    set(&store, "long", 600 * SECOND).await;
    tokio::time::advance(2 * SECOND).await;
    set(&store, "new", 600 * SECOND).await;
    assert_eq!(store.len(), 3);
    assert!(!has_value(&store, "short").await, "expired first");
    assert!(has_value(&store, "long").await);
    // "new" is now the least recently used value; "fill" is older still.
    set(&store, "newer", 600 * SECOND).await;
    assert_eq!(store.len(), 3);
    assert!(!has_value(&store, "new").await, "the LRU value went");
    assert!(has_value(&store, "long").await && has_value(&store, "newer").await);
    assert_eq!(commit(&store, "fill", &fill).await, Commit::Stored);
    assert!(has_value(&store, "fill").await);
}

/// When every key holds a fill in flight, the least recently used fill
/// loses its lease and fence: its commit is refused, and its key can be
/// leased again.
#[tokio::test(start_paused = true)]
async fn a_memory_store_full_of_fills_refuses_the_dropped_fills_commit() {
    let store = MemoryStore::with_max_keys(3);
    assert_eq!(format!("{store:?}"), "MemoryStore { max_keys: 3, .. }");
    let mut leases = Vec::new();
    for key in ["f0", "f1", "f2", "f3"] {
        leases.push(grant(&store, key).await);
    }
    assert_eq!(store.len(), 3);
    assert_eq!(commit(&store, "f0", &leases[0]).await, Commit::Refused);
    assert!(!has_value(&store, "f0").await);
    assert_eq!(commit(&store, "f3", &leases[3]).await, Commit::Stored);
    let again = grant(&store, "f0").await;
    assert_ne!(again, leases[0]);
    assert_eq!(commit(&store, "f0", &again).await, Commit::Stored);
    assert!(has_value(&store, "f0").await);
}

/// A `MemoryStore` keeps a tag version for its retention from its last
/// read, and forgets one unread for as long.
#[tokio::test(start_paused = true)]
async fn a_memory_store_forgets_a_tag_version_a_retention_after_its_last_read() {
    let store = MemoryStore::new();
    let tags = [Arc::<str>::from(TAG)];
    let retention = 10 * SECOND;
    let read = || async {
        store
            .tag_versions("bound:v0", 0, &tags, retention, Origin::new(0))
            .await
            .expect("tag versions")
            .remove(0)
    };
    let first = read().await;
    tokio::time::advance(6 * SECOND).await;
    assert_eq!(read().await, first);
    tokio::time::advance(6 * SECOND).await;
    assert_eq!(read().await, first, "the read 6 s ago kept it");
    tokio::time::advance(retention).await;
    assert_ne!(read().await, first, "unread for its retention: forgotten");
}

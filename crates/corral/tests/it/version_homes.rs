//! A lost server costs only its own keys: tag and clear versions live
//! beside the entries they guard (a copy per memcached server, per Redis
//! Cluster bucket), and reads keep them as warm as the entries under LRU.
//!
//! - memcached, 3 servers: one server is removed from the list; exactly
//!   the keys it held are refilled, and a tag invalidated before the
//!   removal stays invalidated on the other two (quick here: 150 keys, one
//!   removal per server; the full measurement, 1,000 keys and 10 runs per
//!   server with at most 40% refilled in each, is `#[ignore]`d).
//! - Redis Cluster, 3 masters: one master is flushed; only its shard's
//!   entries are refilled, and a `clear()` and an `invalidate_tag` made
//!   before stay in force on every shard.
//! - Redis `allkeys-lru`: memory pressure evicts about 40% of the entries
//!   each round, 10 rounds; refills equal the entries evicted, never the
//!   whole namespace (the clear version guards every entry, and every read
//!   touches it).

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use corral::store::StoreKey;
use corral::{
    Cache, Capacity, FillOptions, MemcachedConfig, MemcachedStore, RedisConfig, RedisStore,
};
use corral_testkit::{MemcachedServer, RedisCluster, RedisServer};

/// The tag invalidated before the loss, and the tag left alone.
const DROPPED: &str = "dropped";
const KEPT: &str = "kept";

fn builder(name: &str) -> corral::CacheBuilder<String> {
    Cache::<String>::builder(name)
        .l1(false)
        .ttl(Duration::from_secs(600))
        .fill_timeout(Duration::from_secs(20))
}

/// Reads `keys` under `tag` through `cache`, filling a miss with
/// `<round>:<key>`; returns the keys filled (refilled) and the values
/// served that were written in `stale_round`.
async fn read_all(
    cache: &Cache<String>,
    keys: &[String],
    tag: &str,
    round: &str,
    stale_round: Option<&str>,
) -> (HashSet<String>, usize) {
    let filled = Arc::new(std::sync::Mutex::new(HashSet::new()));
    let mut stale = 0;
    for key in keys {
        let (filled, key_owned, round) = (Arc::clone(&filled), key.clone(), round.to_owned());
        let value = cache
            .get_or_fill(key, move || async move {
                let value = format!("{round}:{key_owned}");
                filled.lock().expect("lock").insert(key_owned);
                Ok::<_, std::io::Error>(value)
            })
            .options(FillOptions::new().tags([tag]))
            .await
            .expect("get_or_fill");
        if stale_round.is_some_and(|old| value.starts_with(&format!("{old}:"))) {
            stale += 1;
        }
    }
    let filled = std::mem::take(&mut *filled.lock().expect("lock"));
    (filled, stale)
}

async fn memcached_cache(
    servers: &[&MemcachedServer],
    name: &str,
) -> (Cache<String>, MemcachedStore) {
    let addrs: Vec<String> = servers.iter().map(|s| s.addr()).collect();
    let store = MemcachedStore::connect(&addrs, MemcachedConfig::default())
        .await
        .expect("connect");
    let cache = builder(name).store(store.clone()).build().expect("config");
    (cache, store)
}

/// What one removal cost: the kept (not invalidated) keys refilled, those
/// the removed server held, and invalidated values served.
struct Removal {
    refilled: HashSet<String>,
    on_removed: HashSet<String>,
    stale: usize,
}

/// Fills `keys` keys tagged [`KEPT`] and a fifth as many tagged
/// [`DROPPED`] on three servers, invalidates [`DROPPED`], removes server
/// `removed` from the list and reads every key again through a store on
/// the other two.
async fn remove_one(
    servers: &[MemcachedServer],
    removed: usize,
    keys: usize,
    name: &str,
) -> Removal {
    let all: Vec<&MemcachedServer> = servers.iter().collect();
    let (before, store) = memcached_cache(&all, name).await;
    let kept: Vec<String> = (0..keys).map(|i| format!("k{i}")).collect();
    let dropped: Vec<String> = (0..keys / 5).map(|i| format!("d{i}")).collect();
    let (filled, _) = read_all(&before, &dropped, DROPPED, "old", None).await;
    assert_eq!(filled.len(), dropped.len());
    let (filled, _) = read_all(&before, &kept, KEPT, "old", None).await;
    assert_eq!(filled.len(), kept.len());
    before
        .invalidate_tag(DROPPED)
        .await
        .expect("invalidate_tag");
    let on_removed: HashSet<String> = kept
        .iter()
        .filter(|key| {
            let item = store.slot_item(&StoreKey::new(before.namespace().to_owned(), key));
            servers[removed].exists(&item)
        })
        .cloned()
        .collect();

    let left: Vec<&MemcachedServer> = (0..servers.len())
        .filter(|&i| i != removed)
        .map(|i| &servers[i])
        .collect();
    let (after, _) = memcached_cache(&left, name).await;
    let (refilled_dropped, stale) = read_all(&after, &dropped, DROPPED, "new", Some("old")).await;
    assert_eq!(
        refilled_dropped.len(),
        dropped.len(),
        "every invalidated key is refilled"
    );
    let (refilled, stale_kept) = read_all(&after, &kept, KEPT, "new", None).await;
    assert_eq!(stale_kept, 0);
    Removal {
        refilled,
        on_removed,
        stale,
    }
}

/// Runs `runs` removals of each of three servers, each run in its own
/// namespace (so its versions' copies fall anew), and checks every one.
async fn removals(keys: usize, runs: usize, max_share: f64) {
    let servers = [
        MemcachedServer::start(),
        MemcachedServer::start(),
        MemcachedServer::start(),
    ];
    for removed in 0..servers.len() {
        let mut shares = Vec::new();
        for run in 0..runs {
            let name = format!("homes-{removed}-{run}");
            let removal = remove_one(&servers, removed, keys, &name).await;
            let share = removal.refilled.len() as f64 / keys as f64;
            shares.push(format!("{:.1}%", share * 100.0));
            assert_eq!(removal.stale, 0, "invalidated values served: {name}");
            assert!(
                !removal.on_removed.is_empty(),
                "{name}: server {removed} held no key"
            );
            assert_eq!(
                removal.refilled, removal.on_removed,
                "{name}: the refilled keys are those server {removed} held"
            );
            assert!(
                share <= max_share,
                "{name}: {} of {keys} keys refilled after server {removed} left",
                removal.refilled.len(),
            );
        }
        eprintln!("server {removed} removed, {keys} keys: refilled {shares:?} of the kept keys");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memcached_a_removed_server_costs_only_its_keys() {
    removals(150, 1, 0.5).await;
}

/// The full measurement: `cargo test -p corral-cache --all-features --test
/// it version_homes::memcached_removals_measured -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: 3 servers × 10 runs × 1,000 keys"]
async fn memcached_removals_measured() {
    removals(1_000, 10, 0.4).await;
}

/// The master (node index) holding `key`'s entry in `cache`'s namespace.
fn master_of(cluster: &RedisCluster, cache: &Cache<String>, key: &str) -> usize {
    let names = RedisStore::keys_of(&StoreKey::new(cache.namespace().to_owned(), key));
    cluster.master_of(&names.value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_a_flushed_master_costs_only_its_shard() {
    let cluster = RedisCluster::start();
    let connect = |name: &'static str| {
        let urls = cluster.urls();
        async move {
            let store = RedisStore::connect_cluster(&urls, RedisConfig::default())
                .await
                .expect("connect");
            builder(name).store(store).build().expect("config")
        }
    };
    let keys = |prefix: &str| -> Vec<String> { (0..90).map(|i| format!("{prefix}{i}")).collect() };
    // One namespace for the tag: `dropped` invalidated, `kept` not.
    let tagged = connect("homes-tag").await;
    let (dropped, kept) = (keys("d"), keys("k"));
    read_all(&tagged, &dropped, DROPPED, "old", None).await;
    read_all(&tagged, &kept, KEPT, "old", None).await;
    tagged
        .invalidate_tag(DROPPED)
        .await
        .expect("invalidate_tag");
    // Another for the clear: `cleared` filled before it, `after` since.
    let cleared_ns = connect("homes-clear").await;
    let (cleared, after) = (keys("c"), keys("a"));
    read_all(&cleared_ns, &cleared, KEPT, "old", None).await;
    cleared_ns.clear().await.expect("clear");
    let (filled, _) = read_all(&cleared_ns, &after, KEPT, "old", None).await;
    assert_eq!(filled.len(), after.len());

    let flushed = master_of(&cluster, &tagged, &kept[0]);
    assert_eq!(cluster.nodes()[flushed].cli(&["FLUSHALL"]), "OK");

    // Fresh caches: nothing remembered in process.
    let tagged = connect("homes-tag").await;
    let cleared_ns = connect("homes-clear").await;
    let (refilled, stale) = read_all(&tagged, &dropped, DROPPED, "new", Some("old")).await;
    assert_eq!(
        (refilled.len(), stale),
        (dropped.len(), 0),
        "invalidate_tag in force"
    );
    let (refilled, stale) = read_all(&cleared_ns, &cleared, KEPT, "new", Some("old")).await;
    assert_eq!(
        (refilled.len(), stale),
        (cleared.len(), 0),
        "clear in force"
    );
    for (cache, keys) in [(&tagged, &kept), (&cleared_ns, &after)] {
        let on_flushed: HashSet<String> = keys
            .iter()
            .filter(|key| master_of(&cluster, cache, key) == flushed)
            .cloned()
            .collect();
        let (refilled, _) = read_all(cache, keys, KEPT, "new", None).await;
        eprintln!(
            "{}: {} of {} refilled, {} on the flushed master",
            cache.namespace(),
            refilled.len(),
            keys.len(),
            on_flushed.len()
        );
        assert!(!on_flushed.is_empty() && on_flushed.len() < keys.len());
        assert_eq!(refilled, on_flushed, "only the flushed shard's entries");
    }
}

/// How many of `names` exist (`EXISTS` touches no key's LRU clock).
fn existing(server: &RedisServer, names: &[String]) -> usize {
    let mut args = vec!["EXISTS"];
    args.extend(names.iter().map(String::as_str));
    server.cli(&args).parse().expect("a count")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lru_evicts_entries_before_the_versions_guarding_them() {
    lru_rounds(2).await;
}

/// The full measurement: `cargo test -p corral-cache --all-features --test
/// it version_homes::lru_rounds_measured -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: 10 rounds of about 2.3 s"]
async fn lru_rounds_measured() {
    lru_rounds(10).await;
}

/// `rounds` rounds of: read every entry (half of them a tick of Redis'
/// LRU clock after the other half), press until about half are evicted,
/// let another process read the clear version, count the refills.
async fn lru_rounds(rounds: usize) {
    const ENTRIES: usize = 600;
    const L1_ENTRIES: usize = 16;
    const LRU_TICK: Duration = Duration::from_millis(1100);
    let server =
        RedisServer::start_with(&["--maxmemory", "3mb", "--maxmemory-policy", "allkeys-lru"]);
    let store = RedisStore::connect(&server.url(), RedisConfig::default())
        .await
        .expect("connect");
    // An L1 too small to hold the entries, so (almost) every read is an
    // L2 read, and versions remembered in process (the backplane keeps
    // them current, as for any cache with an L1): the cache itself reads
    // the clear version once, and only the reads' touches keep it warm.
    let cache = builder("homes-lru")
        .l1(true)
        .capacity(Capacity::Entries(L1_ENTRIES as u64))
        .store(store.clone())
        .build()
        .expect("config");
    let keys: Vec<String> = (0..ENTRIES)
        .map(|i| format!("e{i:04}-{}", "x".repeat(64)))
        .collect();
    let names: Vec<String> = keys
        .iter()
        .map(|key| RedisStore::keys_of(&StoreKey::new(cache.namespace().to_owned(), key)).value)
        .collect();
    let value = "v".repeat(1024);
    let fills = Arc::new(AtomicUsize::new(0));
    let read_round = |round: usize| {
        let (cache, keys, value, fills) = (
            cache.clone(),
            keys.clone(),
            value.clone(),
            Arc::clone(&fills),
        );
        async move {
            let before = fills.load(SeqCst);
            let read = |key: &String| {
                let (cache, key) = (cache.clone(), key.clone());
                let (value, fills) = (value.clone(), Arc::clone(&fills));
                async move {
                    cache
                        .get_or_fill(&key, move || async move {
                            fills.fetch_add(1, SeqCst);
                            Ok::<_, std::io::Error>(format!("{round}{value}"))
                        })
                        .await
                        .expect("get_or_fill");
                }
            };
            for (i, key) in keys.iter().enumerate() {
                if i == keys.len() / 2 {
                    // Redis keeps idle time to the second: the second half
                    // is read a tick of its LRU clock after the first, so
                    // the pressure evicts the first half (the entries not
                    // read since) — and, were it not touched since, the
                    // clear version read with it.
                    tokio::time::sleep(LRU_TICK).await;
                }
                read(key).await;
            }
            // Traffic goes on: a read a tick later (of an entry the small
            // L1 no longer holds) touches the clear version again, so it is
            // younger than every entry but one. Were it last touched in the
            // second half's tick, Redis' sampled LRU could pick it among
            // that half's entries once the first half runs short.
            tokio::time::sleep(LRU_TICK).await;
            read(&keys[keys.len() / 2]).await;
            fills.load(SeqCst) - before
        }
    };
    assert_eq!(read_round(0).await, ENTRIES);
    let client = redis::Client::open(server.url()).expect("url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connection");
    let (mut total_evicted, mut total_refills) = (0, 0);
    for round in 1..=rounds {
        // Pressure: new keys until 40% of the entries are gone (most of
        // the half not read for a tick, see `read_round`), then the filler
        // is deleted so the refills fit. Redis keeps idle time to the
        // second and samples its eviction candidates, so pressure that
        // reaches into the second half's entries takes a few of them, but
        // not the clear version, touched a tick after them.
        let mut filler = 0;
        while existing(&server, &names) > ENTRIES * 60 / 100 {
            let mut pipe = redis::pipe();
            for _ in 0..50 {
                pipe.cmd("SET")
                    .arg(format!("filler:{round}:{filler}"))
                    .arg(&value)
                    .ignore();
                filler += 1;
            }
            let () = pipe.query_async(&mut conn).await.expect("filler");
            assert!(filler < 100_000, "entries survived {filler} filler keys");
        }
        let _: i64 = redis::cmd("EVAL")
            .arg("local n = 0 for _, k in ipairs(redis.call('KEYS', ARGV[1])) do n = n + redis.call('DEL', k) end return n")
            .arg(0)
            .arg(format!("filler:{round}:*"))
            .query_async(&mut conn)
            .await
            .expect("delete filler");
        let evicted = ENTRIES - existing(&server, &names);
        // Another process starts and reads an entry: it reads the clear
        // version, and would create it anew (and announce it, making every
        // entry a miss for every cache) had the pressure evicted it.
        let newcomer = builder("homes-lru")
            .store(store.clone())
            .build()
            .expect("config");
        let _ = newcomer.peek(&keys[ENTRIES - 1]).await.expect("peek");
        let refills = read_round(round).await;
        eprintln!("round {round}: {evicted} of {ENTRIES} entries evicted, {refills} refilled");
        assert!(evicted > 0, "no entry evicted");
        // The L1's few entries may still serve some of the evicted ones;
        // a lost clear version would refill all of them.
        assert!(
            refills <= evicted && refills + L1_ENTRIES >= evicted,
            "round {round}: {refills} refills for {evicted} entries evicted"
        );
        total_evicted += evicted;
        total_refills += refills;
    }
    eprintln!("{rounds} rounds: {total_evicted} entries evicted, {total_refills} refilled");
}

//! How long an L1 serves a value after a client outside corral changed it,
//! and how many invalidations a write costs the fleet.
//!
//! ```text
//! cargo run --release -p corral-cache --example outside_writes -- [KEYS] [ROUNDS]
//! ```
//!
//! It starts its own `redis-server` (the test fixture) and three caches
//! with an L1, each on a `RedisStore` of its own (three connections to the
//! server, as three processes have). Each cache holds the same KEYS keys
//! (default 200). A plain redis-rs client then changes them, one event
//! kind at a time: `DEL`, `UNLINK`, `SET` of a foreign value, `EXPIRE key
//! 0` (each key by key), `FLUSHDB` and `FLUSHALL` (ROUNDS times each,
//! default 20), and evictions under `maxmemory` (filler writes until every
//! key was evicted). For each change it reports the time from the moment
//! the command was sent until none of the three caches serves the old
//! value from its L1 (`get_local`, polled from a thread of its own), as
//! p50, p99 and max. The same is then
//! done with `Tracking::Off` (corral before client tracking), where an L1
//! serves the old value until the entry's TTL: it reports how many keys
//! every cache still serves one second after a `DEL`.
//!
//! Last, the fan-out: eight caches, one holding a key, the others holding
//! other keys; another cache writes that key. It reports, per write, the
//! invalidations acted on across the eight caches (`tracking_invalidations`
//! and `backplane_messages` in their stats): client tracking in its
//! default mode tells the one cache that read the key; in `BCAST` mode,
//! and the backplane, every cache. With each mode it prints the server's
//! tracking counters (`tracking_total_keys`: the per-key table, which
//! `BCAST` does not keep; `tracking_total_prefixes`).
//!
//! ```text
//! cargo run --release -p corral-cache --example outside_writes -- cluster [KEYS]
//! ```
//!
//! runs on a three-master Redis Cluster instead (the test fixture): the
//! time until no cache serves a key's old value after a `DEL` sent through
//! a redis-rs cluster client, heard by each store's listening connections;
//! then what the store's own writes cost: of KEYS keys a cache just wrote,
//! how many its L1 still holds a moment later (its own writes come back
//! to it as invalidations on a cluster), with tracking and without.

use std::time::{Duration, Instant};

use corral::store::StoreKey;
use corral::{Cache, RedisConfig, RedisStore, Tracking};
use corral_testkit::{RedisCluster, RedisServer};
use redis::aio::MultiplexedConnection;

/// How long one change may take to reach every L1 before the run fails.
const BOUND: Duration = Duration::from_secs(5);

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::args().nth(1).as_deref() == Some("cluster") {
        let keys = std::env::args()
            .nth(2)
            .map_or(200, |a| a.parse().expect("a number"));
        return on_cluster(keys).await;
    }
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("a number"))
        .collect();
    let keys = args.first().copied().unwrap_or(200);
    let rounds = args.get(1).copied().unwrap_or(20);
    let server = RedisServer::start();
    let mut plain = plain(&server).await;
    let caches = fleet(&server, Tracking::Keys, 3).await;
    let names: Vec<String> = (0..keys).map(|i| format!("k{i}")).collect();

    println!("time until no cache serves the old value ({keys} keys, 3 caches):");
    for command in ["DEL", "UNLINK", "SET", "EXPIRE"] {
        hold(&caches, &names).await;
        let mut took = Vec::with_capacity(keys);
        for name in &names {
            let mut cmd = redis::cmd(command);
            cmd.arg(value_key(&caches[0], name));
            match command {
                "SET" => drop(cmd.arg("foreign")),
                "EXPIRE" => drop(cmd.arg(0)),
                _ => {}
            }
            let sent = Instant::now();
            let _: redis::Value = cmd.query_async(&mut plain).await.expect("command");
            until_dropped(&caches, std::slice::from_ref(name)).await;
            took.push(sent.elapsed());
        }
        report(command, took);
    }
    assert_eq!(flushes(&caches), 0, "a whole L1 was dropped");
    for command in ["FLUSHDB", "FLUSHALL"] {
        let mut took = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            hold(&caches, &names).await;
            let sent = Instant::now();
            let _: () = redis::cmd(command)
                .query_async(&mut plain)
                .await
                .expect("flush");
            until_dropped(&caches, &names).await;
            took.push(sent.elapsed());
        }
        report(command, took);
    }
    let flushed = flushes(&caches);
    report(
        "eviction",
        evictions(&server, &mut plain, &caches, &names).await,
    );
    println!(
        "  (whole-L1 drops during the evictions: {})",
        flushes(&caches) - flushed
    );
    drop(caches);

    let untracked = fleet(&server, Tracking::Off, 3).await;
    hold(&untracked, &names).await;
    for name in &names {
        let _: u64 = redis::cmd("DEL")
            .arg(value_key(&untracked[0], name))
            .query_async(&mut plain)
            .await
            .expect("DEL");
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let served = names
        .iter()
        .filter(|name| untracked.iter().all(|c| c.get_local(name).is_some()))
        .count();
    println!(
        "  tracking off: 1 s after a DEL of each, every cache still serves \
         {served} of {keys} keys (until the entry's TTL, 600 s here)"
    );
    drop(untracked);
    fan_out().await;
}

async fn plain(server: &RedisServer) -> MultiplexedConnection {
    redis::Client::open(server.url())
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect")
}

/// `count` caches with an L1, each on a store of its own, with `tracking`.
async fn fleet(server: &RedisServer, tracking: Tracking, count: usize) -> Vec<Cache<String>> {
    let mut stores = Vec::with_capacity(count);
    for _ in 0..count {
        let config = RedisConfig::default().tracking(tracking);
        let store = RedisStore::connect(&server.url(), config)
            .await
            .expect("connect");
        stores.push(store);
    }
    fleet_on(stores).await
}

/// A cache with an L1 on each of `stores`, their backplane subscriptions
/// up.
async fn fleet_on(stores: Vec<RedisStore>) -> Vec<Cache<String>> {
    let count = stores.len();
    let mut caches = Vec::with_capacity(count);
    for store in stores {
        let cache = Cache::<String>::builder("outside")
            .store(store)
            .l1(true)
            .ttl(Duration::from_secs(600))
            .build()
            .expect("config");
        caches.push(cache);
    }
    // Each backplane subscription up before anything is read: one
    // confirmed after a read would drop the whole L1 (and look like an
    // invalidation).
    let deadline = Instant::now() + BOUND;
    // (A cache alone hears none of its own messages.)
    for (i, cache) in caches.iter().enumerate().filter(|_| count > 1) {
        let from = &caches[(i + 1) % count];
        while cache.stats().backplane_messages == 0 {
            from.invalidate("warm").await.expect("invalidate");
            assert!(Instant::now() < deadline, "no subscription");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    caches
}

/// Whole-L1 drops so far (a drop would evict every key at once).
fn flushes(caches: &[Cache<String>]) -> u64 {
    caches
        .iter()
        .map(|c| {
            let s = c.stats();
            s.backplane_resets + s.l1_flushes_reconnect + s.l1_flushes_server_flush
        })
        .sum()
}

fn value_key(cache: &Cache<String>, key: &str) -> String {
    RedisStore::keys_of(&StoreKey::new(cache.namespace(), key)).value
}

/// The first cache writes every key, every cache reads each until its L1
/// holds it.
async fn hold(caches: &[Cache<String>], names: &[String]) {
    for name in names {
        caches[0].set(name, "v".into()).await.expect("set");
    }
    hold_read(caches, names).await;
}

/// Waits until no cache serves any of `names` from its L1: polled from a
/// thread of its own, so that the runtime's workers stay free to read the
/// invalidations (a task spinning on them would delay their I/O).
async fn until_dropped(caches: &[Cache<String>], names: &[String]) {
    let (caches, names) = (caches.to_vec(), names.to_vec());
    let polled = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + BOUND;
        while names
            .iter()
            .any(|name| caches.iter().any(|c| c.get_local(name).is_some()))
        {
            assert!(Instant::now() < deadline, "an L1 kept an old value");
            std::thread::yield_now();
        }
    });
    polled.await.expect("the poll");
}

/// Fills the server past `maxmemory` until every held key was evicted: the
/// time from each filler write to the drop of the keys it evicted (found
/// by one `EXISTS` pipeline after it, included in the time).
async fn evictions(
    server: &RedisServer,
    plain: &mut MultiplexedConnection,
    caches: &[Cache<String>],
    names: &[String],
) -> Vec<Duration> {
    hold(caches, names).await;
    let used: u64 = server
        .cli(&["MEMORY", "STATS"])
        .lines()
        .skip_while(|line| *line != "total.allocated")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("total.allocated");
    let limit = (used + (1 << 20)).to_string();
    server.cli(&["CONFIG", "SET", "maxmemory-policy", "allkeys-random"]);
    server.cli(&["CONFIG", "SET", "maxmemory", &limit]);
    let filler = "x".repeat(16 * 1024);
    let mut left: Vec<String> = names.to_vec();
    let mut took = Vec::with_capacity(names.len());
    for i in 0.. {
        if left.is_empty() || i > 100_000 {
            break;
        }
        let sent = Instant::now();
        let _: () = redis::cmd("SET")
            .arg(format!("filler:{i}"))
            .arg(&filler)
            .query_async(plain)
            .await
            .expect("SET");
        let mut pipe = redis::pipe();
        for name in &left {
            pipe.exists(value_key(&caches[0], name));
        }
        let exists: Vec<bool> = pipe.query_async(plain).await.expect("EXISTS");
        let (gone, kept): (Vec<_>, Vec<_>) = left.into_iter().zip(exists).partition(|(_, e)| !e);
        left = kept.into_iter().map(|(name, _)| name).collect();
        let gone: Vec<String> = gone.into_iter().map(|(name, _)| name).collect();
        if !gone.is_empty() {
            until_dropped(caches, &gone).await;
            took.extend(std::iter::repeat_n(sent.elapsed(), gone.len()));
        }
    }
    server.cli(&["CONFIG", "SET", "maxmemory", "0"]);
    took
}

/// Invalidations acted on across eight caches per write of a key one of
/// them holds: with client tracking in each mode, and with the backplane
/// (counted in the default mode's run); and what the server's tracking
/// table holds meanwhile. Each mode on a server of its own, so that its
/// counters are the mode's alone.
async fn fan_out() {
    println!("fan-out: invalidations acted on per write of a key 1 of 8 caches holds:");
    let (keys, messages, keys_table) = fan_out_with(&RedisServer::start(), Tracking::Keys).await;
    let bcast_server = RedisServer::start();
    let (bcast, _, bcast_table) = fan_out_with(&bcast_server, Tracking::Broadcast).await;
    println!("  client tracking (default mode): {keys:.2}");
    println!("  client tracking (BCAST):        {bcast:.2}");
    println!("  backplane (pub/sub):            {messages:.2}");
    println!("server tracking table with 9 stores (INFO stats):");
    println!("  default mode: {keys_table}");
    println!("  BCAST:        {bcast_table}");
}

/// The fan-out with client tracking in `mode`: tracking invalidations and
/// backplane messages per write, and the server's tracking counters.
async fn fan_out_with(server: &RedisServer, mode: Tracking) -> (f64, f64, String) {
    const WRITES: u64 = 100;
    let caches = fleet(server, mode, 9).await;
    let (writer, caches) = caches.split_first().expect("nine");
    let others: Vec<String> = (1..caches.len()).map(|i| format!("other{i}")).collect();
    hold(&caches[..1], &["hot".to_owned()]).await;
    for (cache, other) in caches[1..].iter().zip(&others) {
        hold(std::slice::from_ref(cache), std::slice::from_ref(other)).await;
    }
    let sum =
        |read: fn(&corral::Stats) -> u64| -> u64 { caches.iter().map(|c| read(&c.stats())).sum() };
    let (tracked, messages) = (
        sum(|s| s.tracking_invalidations),
        sum(|s| s.backplane_messages),
    );
    for round in 0..WRITES {
        let heard = sum(|s| s.backplane_messages);
        writer.set("hot", format!("v{round}")).await.expect("set");
        let deadline = Instant::now() + BOUND;
        while sum(|s| s.backplane_messages) < heard + caches.len() as u64 {
            assert!(Instant::now() < deadline, "backplane messages lost");
            tokio::task::yield_now().await;
        }
        // Read back into the L1, tracked again for the next write.
        caches[0].peek("hot").await.expect("read");
    }
    let per_write = |now: u64, before: u64| (now - before) as f64 / WRITES as f64;
    let table: Vec<String> = server
        .cli(&["INFO", "stats"])
        .lines()
        .filter(|line| line.starts_with("tracking_total_"))
        .map(|line| line.trim().to_owned())
        .collect();
    (
        per_write(sum(|s| s.tracking_invalidations), tracked),
        per_write(sum(|s| s.backplane_messages), messages),
        table.join(" "),
    )
}

/// The cluster run (see the module docs).
async fn on_cluster(keys: usize) {
    let cluster = RedisCluster::start();
    let stores = |count: usize, tracking: Tracking| {
        let urls = cluster.urls();
        async move {
            let mut stores = Vec::with_capacity(count);
            for _ in 0..count {
                let config = RedisConfig::default().tracking(tracking);
                let store = RedisStore::connect_cluster(&urls, config).await;
                stores.push(store.expect("connect_cluster"));
            }
            stores
        }
    };
    let caches = fleet_on(stores(3, Tracking::Keys).await).await;
    let names: Vec<String> = (0..keys).map(|i| format!("k{i}")).collect();
    let mut plain = redis::cluster::ClusterClient::new(cluster.urls())
        .expect("cluster client")
        .get_async_connection()
        .await
        .expect("connect");
    hold(&caches, &names).await;
    // The writes of `hold` come back as invalidations (the listener is not
    // the writer): let them land, then read every key back.
    tokio::time::sleep(Duration::from_millis(200)).await;
    hold_read(&caches, &names).await;
    println!("cluster: time until no cache serves the old value ({keys} keys, 3 caches):");
    let mut took = Vec::with_capacity(keys);
    for name in &names {
        assert!(caches.iter().all(|c| c.get_local(name).is_some()), "{name}");
        let sent = Instant::now();
        let _: u64 = redis::cmd("DEL")
            .arg(value_key(&caches[0], name))
            .query_async(&mut plain)
            .await
            .expect("DEL");
        until_dropped(&caches, std::slice::from_ref(name)).await;
        took.push(sent.elapsed());
    }
    report("DEL", took);
    assert_eq!(flushes(&caches), 0, "a whole L1 was dropped");
    drop(caches);
    println!("cluster: of {keys} keys a cache wrote, held in its L1 200 ms later:");
    for tracking in [Tracking::Keys, Tracking::Off] {
        let writer = fleet_on(stores(1, tracking).await).await;
        for name in &names {
            writer[0].set(name, "v".into()).await.expect("set");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let held = names
            .iter()
            .filter(|name| writer[0].get_local(name).is_some())
            .count();
        let stats = writer[0].stats();
        println!(
            "  tracking {tracking:<5}: {held:>5} (invalidations heard: {})",
            stats.tracking_invalidations
        );
    }
}

/// Every cache reads each of `names` until its L1 holds it.
async fn hold_read(caches: &[Cache<String>], names: &[String]) {
    let deadline = Instant::now() + BOUND;
    for cache in caches {
        for name in names {
            while cache.get_local(name).is_none() {
                cache.peek(name).await.expect("read");
                assert!(Instant::now() < deadline, "{name} never held");
            }
        }
    }
}

fn report(what: &str, mut took: Vec<Duration>) {
    took.sort();
    let at = |p: f64| {
        let last = took.len().saturating_sub(1) as f64;
        took.get((last * p).round() as usize)
            .copied()
            .unwrap_or_default()
    };
    println!(
        "  {what:<9} n={:<5} p50 {:>9.1?}  p99 {:>9.1?}  max {:>9.1?}",
        took.len(),
        at(0.5),
        at(0.99),
        at(1.0)
    );
}

//! Redis client tracking on a cluster store: one listening connection per
//! master with the namespaces' prefixes (`BCAST`). A plain client's `DEL`,
//! foreign `SET`, `EXPIRE key 0` and `FLUSHALL` on any master reach the L1
//! of every cache (each on a store of its own, as another process has); a
//! failover flushes the L1s and the new master's changes are heard; a read
//! racing an invalidation never keeps an old value; a namespace attached
//! later is covered. Without the listeners a cluster's L1s heard only
//! corral's own writes.
//!
//! This process's own writes come back to it as invalidations (the
//! listener is not the writer): before an outside change, each test waits
//! until every master's invalidations so far were heard ([`Heard::drain`])
//! and reads its keys again, so the change alone can drop them. Every wait
//! is bounded, never a fixed time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use corral::store::{Change, ChangeSink, Event, Store, StoreKey};
use corral::{Cache, RedisConfig, RedisStore};
use corral_testkit::{until, RedisCluster};
use redis::aio::MultiplexedConnection;

use crate::cluster_faults::{get_until_ok, key_on, set_until_ok, tag};
use crate::coherence_tracking::{
    delete_later, hold, prepare, race, tracked_ids, until_dropped, value_key, RACERS,
};
use crate::support::{l1_cache, redis_conn, until_heard};

/// The caches' name.
const NAME: &str = "clustered";

/// Masters in a test cluster.
const MASTERS: usize = 3;

async fn store(cluster: &RedisCluster, config: &RedisConfig) -> RedisStore {
    RedisStore::connect_cluster(&cluster.urls(), config.clone())
        .await
        .unwrap_or_else(|e| panic!("connect_cluster: {e}\n{}", cluster.logs()))
}

/// The invalidations a store's server reported for one namespace, counted
/// by key: a sink attached to the store beside its caches.
#[derive(Default)]
struct Seen(Mutex<HashMap<String, usize>>);

impl Seen {
    fn count(&self, key: &str) -> usize {
        self.0.lock().expect("lock").get(key).copied().unwrap_or(0)
    }
}

impl ChangeSink for Seen {
    fn changed(&self, _: &Change) {}

    fn lost(&self) {}

    fn invalidated(&self, event: &Event) {
        if let Event::Removed(key) = event {
            *self
                .0
                .lock()
                .expect("lock")
                .entry(key.to_string())
                .or_default() += 1;
        }
    }
}

/// What each store's listeners heard, and a plain connection to each
/// master with a key of its own: a write of that key, once heard, comes
/// after every invalidation its master sent before.
struct Heard {
    seen: Vec<Arc<Seen>>,
    /// Per master: its index in the cluster's nodes, a plain connection
    /// to it, the key and its value key.
    masters: Vec<(usize, MultiplexedConnection, String, String)>,
}

impl Heard {
    /// For `namespace` on `stores`, on the first [`MASTERS`] nodes of
    /// `cluster` (its masters, before any failover).
    async fn new(cluster: &RedisCluster, stores: &[RedisStore], namespace: &str) -> Self {
        let masters: Vec<usize> = (0..MASTERS).collect();
        Self::on(cluster, &masters, stores, namespace).await
    }

    /// For `namespace` on `stores`, on the nodes `masters` of `cluster`.
    async fn on(
        cluster: &RedisCluster,
        masters: &[usize],
        stores: &[RedisStore],
        namespace: &str,
    ) -> Self {
        let seen: Vec<Arc<Seen>> = stores
            .iter()
            .map(|store| {
                let seen = Arc::new(Seen::default());
                let weak: Weak<dyn ChangeSink> = Arc::downgrade(&seen) as Weak<dyn ChangeSink>;
                assert!(store.backplane(namespace, weak));
                seen
            })
            .collect();
        let mut nodes = Vec::new();
        for &node in masters {
            let key = key_on(cluster, node, "drain");
            let name = RedisStore::keys_of(&StoreKey::new(namespace, &key)).value;
            let conn = redis_conn(&cluster.nodes()[node].url()).await;
            nodes.push((node, conn, key, name));
        }
        Self {
            seen,
            masters: nodes,
        }
    }

    /// Writes each master's own key until every store heard it: every
    /// invalidation any master sent before has been acted on.
    async fn drain(&self) {
        for &(node, ..) in &self.masters {
            self.drain_node(node).await;
        }
    }

    /// [`drain`](Self::drain) of the master at node `index` alone.
    async fn drain_node(&self, index: usize) {
        for (_, conn, key, name) in self.masters.iter().filter(|m| m.0 == index) {
            let before: Vec<usize> = self.seen.iter().map(|s| s.count(key)).collect();
            corral_testkit::until_repeating(
                "every store hears a master's write",
                || {
                    let mut conn = conn.clone();
                    async move {
                        let _: () = redis::cmd("SET")
                            .arg(name)
                            .arg("drain")
                            .query_async(&mut conn)
                            .await
                            .expect("SET");
                    }
                },
                || {
                    self.seen
                        .iter()
                        .zip(&before)
                        .all(|(s, &b)| s.count(key) > b)
                },
            )
            .await;
        }
    }
}

/// `count` caches with an L1, each on a store of its own, their
/// backplane subscriptions up; with what their stores hear.
async fn fleet(
    cluster: &RedisCluster,
    config: &RedisConfig,
    count: usize,
) -> (Vec<Cache<String>>, Heard) {
    let mut stores = Vec::with_capacity(count);
    for _ in 0..count {
        stores.push(store(cluster, config).await);
    }
    let caches: Vec<Cache<String>> = stores.iter().map(|s| l1_cache(s, NAME)).collect();
    for (i, cache) in caches.iter().enumerate() {
        until_heard(&caches[(i + 1) % count], cache).await;
    }
    let heard = Heard::new(cluster, &stores, caches[0].namespace()).await;
    (caches, heard)
}

/// Every cache holds each of `keys` (written by the first), with nothing
/// of this process's own writes still on its way to evict them.
async fn hold_still(caches: &[Cache<String>], heard: &Heard, keys: &[&str]) {
    hold(caches, keys).await;
    heard.drain().await;
    for key in keys {
        keep(caches, key).await;
    }
}

/// Reads `key` through every cache until each keeps it (reads may fail
/// for a while after a failover).
async fn keep(caches: &[Cache<String>], key: &str) {
    for cache in caches {
        let mut tries = 0;
        while cache.get_local(key).is_none() {
            assert!(get_until_ok(cache, key).await.is_some(), "{key}");
            tries += 1;
            assert!(tries < 1000, "{key} never kept: {:?}", cache.stats());
        }
    }
}

/// Asserts no cache flushed its L1 for a lost connection, a failover or a
/// moved slot.
fn no_flushes(caches: &[Cache<String>]) {
    for cache in caches {
        let stats = cache.stats();
        assert_eq!(stats.backplane_resets, 0, "{stats:?}");
        assert_eq!(stats.l1_flushes_reconnect, 0, "{stats:?}");
        assert_eq!(stats.l1_flushes_failover, 0, "{stats:?}");
        assert_eq!(stats.l1_flushes_topology, 0, "{stats:?}");
    }
}

/// A plain client's `DEL`, foreign `SET` and `EXPIRE key 0` of keys on
/// every master, then `FLUSHALL` on every master: no cache serves an old
/// value afterwards, and the foreign value reads as a miss. Then a slot
/// moved to another master flushes every L1, and its new master is heard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_outside_changes_reach_every_l1() {
    let cluster = RedisCluster::start();
    let config = RedisConfig::default().health_interval(Duration::from_millis(50));
    let (caches, heard) = fleet(&cluster, &config, 3).await;
    let keys: Vec<String> = ["del", "set", "expire"]
        .iter()
        .flat_map(|kind| (0..MASTERS).map(|node| key_on(&cluster, node, kind)))
        .collect();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    hold_still(&caches, &heard, &keys).await;
    let node_of = |key: &str| &cluster.nodes()[cluster.master_of(&tag(key))];
    for key in &keys {
        let name = value_key(&caches[0], key);
        let node = node_of(key);
        let (command, reply) = match &key[..3] {
            "del" => (vec!["DEL", &name], "1"),
            "set" => (vec!["SET", &name, "foreign"], "OK"),
            _ => (vec!["EXPIRE", &name, "0"], "1"),
        };
        assert_eq!(node.cli(&command), reply, "{command:?}");
        until_dropped(&caches, key, command[0]).await;
    }
    for cache in &caches {
        for key in &keys {
            assert_eq!(cache.peek(key).await.expect("read"), None, "{key}");
        }
        let stats = cache.stats();
        assert!(
            stats.tracking_invalidations >= keys.len() as u64,
            "{stats:?}"
        );
        assert_eq!(stats.l1_flushes_server_flush, 0, "{stats:?}");
    }
    no_flushes(&caches);

    let keys = &keys[..MASTERS];
    hold_still(&caches, &heard, keys).await;
    for node in &cluster.nodes()[..MASTERS] {
        assert_eq!(node.cli(&["FLUSHALL"]), "OK");
    }
    for key in keys {
        until_dropped(&caches, key, "FLUSHALL").await;
    }
    for cache in &caches {
        until("a flush per master counted", || {
            cache.stats().l1_flushes_server_flush >= MASTERS as u64
        })
        .await;
    }
    no_flushes(&caches);

    // A slot moved between live masters: every L1 is flushed (counted),
    // and the key's new master is heard.
    let key = keys[0];
    hold_still(&caches, &heard, &[key]).await;
    let to = (cluster.master_of(&tag(key)) + 1) % MASTERS;
    cluster.move_slot(cluster.slot_of(&tag(key)), to);
    for cache in &caches {
        until("a topology flush", || {
            cache.stats().l1_flushes_topology >= 1
        })
        .await;
        assert!(cache.get_local(key).is_none(), "{:?}", cache.stats());
    }
    hold_still(&caches, &heard, &[key]).await;
    let name = value_key(&caches[0], key);
    assert_eq!(cluster.nodes()[to].cli(&["DEL", &name]), "1");
    until_dropped(&caches, key, "DEL on the slot's new master").await;
}

/// A master killed and its replica promoted: every cache flushes its L1
/// (counted as a failover), and the new master's changes are heard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_failover_flushes_and_the_new_master_is_heard() {
    let mut cluster = RedisCluster::start_with_replicas();
    let config = crate::cluster_faults::config().health_interval(Duration::from_millis(50));
    let mut stores = Vec::new();
    for _ in 0..2 {
        stores.push(store(&cluster, &config).await);
    }
    let caches: Vec<Cache<String>> = stores
        .iter()
        .map(|s| crate::cluster_faults::cache(s, NAME, Duration::from_secs(60), true))
        .collect();
    until_heard(&caches[0], &caches[1]).await;
    until_heard(&caches[1], &caches[0]).await;
    let key = key_on(&cluster, 0, "k");
    let other = key_on(&cluster, 1, "other");
    hold(&caches, &[&key, &other]).await;
    let dead = cluster.master_of(&tag(&key));
    cluster.kill(dead);
    let promoted = cluster.wait_for_failover(&tag(&key), dead);
    for cache in &caches {
        until("a failover flush", || {
            cache.stats().l1_flushes_failover >= 1
        })
        .await;
        assert!(cache.get_local(&other).is_none(), "{:?}", cache.stats());
    }
    // Heard again: a plain DEL on the new master reaches both L1s.
    set_until_ok(&caches[0], &key, "after").await;
    let masters: Vec<usize> = (0..MASTERS)
        .map(|node| if node == dead { promoted } else { node })
        .collect();
    let heard = Heard::on(&cluster, &masters, &stores, caches[0].namespace()).await;
    heard.drain().await;
    keep(&caches, &key).await;
    let node = &cluster.nodes()[promoted];
    assert_eq!(node.cli(&["DEL", &value_key(&caches[0], &key)]), "1");
    until_dropped(&caches, &key, "DEL on the promoted master").await;
    for cache in &caches {
        assert_eq!(cache.peek(&key).await.expect("read"), None);
    }
}

/// A read, a batch, a fill and a write of a key, each racing a plain
/// client's `DEL` of it on its master: its reply comes on the cluster
/// connection, the invalidation on the listener, in either order. Once
/// the master's invalidations up to the `DEL` were heard, the L1 holds
/// nothing or what the store holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_invalidations_racing_reads_and_writes_leave_nothing_stale() {
    let cluster = RedisCluster::start();
    let config = RedisConfig::default();
    let (caches, heard) = fleet(&cluster, &config, 2).await;
    let (reader, writer) = (&caches[0], &caches[1]);
    let checker = Cache::<String>::builder(NAME)
        .store(store(&cluster, &config).await)
        .l1(false)
        .ttl(Duration::from_secs(60))
        .build()
        .expect("config");
    let node = cluster.master_of(&tag("k"));
    let mut plain = redis_conn(&cluster.nodes()[node].url()).await;
    let name = value_key(reader, "k");
    let mut kept = [0_usize; 4];
    let mut found = 0_usize;
    for round in 0..400 {
        let racer = RACERS[round % 4];
        let messages = reader.stats().backplane_messages;
        prepare(writer, racer, round).await;
        // That write's message and invalidation landed: no eviction of it
        // is to come.
        until("the write's message", || {
            reader.stats().backplane_messages > messages
        })
        .await;
        heard.drain_node(node).await;
        let (_, read) = tokio::join!(delete_later(&mut plain, &name, round), race(reader, racer));
        found += usize::from(read);
        heard.drain_node(node).await;
        if let Some(held) = reader.get_local("k") {
            kept[round % 4] += 1;
            let truth = checker.peek("k").await.expect("read");
            assert_eq!(Some(held), truth, "{racer:?}, round {round}");
        }
    }
    eprintln!(
        "reads that found the value the DEL then removed: {found}; rounds that kept a \
         copy (peek, batch, fill, set): {kept:?}"
    );
}

/// A namespace whose caches attach once the listeners run (and carry
/// another namespace's prefixes) is covered: its prefixes are added to
/// the same listeners, one per master and store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_a_namespace_attached_later_is_covered() {
    let cluster = RedisCluster::start();
    let config = RedisConfig::default();
    let stores = [
        store(&cluster, &config).await,
        store(&cluster, &config).await,
    ];
    let first: Vec<Cache<String>> = stores.iter().map(|s| l1_cache(s, "first")).collect();
    until_heard(&first[0], &first[1]).await;
    until_heard(&first[1], &first[0]).await;
    let first_heard = Heard::new(&cluster, &stores, first[0].namespace()).await;
    let keys: Vec<String> = (0..MASTERS).map(|n| key_on(&cluster, n, "k")).collect();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    hold_still(&first, &first_heard, &keys).await;
    let tracked = |node: usize| tracked_ids(&cluster.nodes()[node]);
    let before: Vec<Vec<String>> = (0..MASTERS).map(tracked).collect();
    for ids in &before {
        assert_eq!(ids.len(), 2, "a listener per store on each master");
    }

    let later: Vec<Cache<String>> = stores.iter().map(|s| l1_cache(s, "later")).collect();
    until_heard(&later[0], &later[1]).await;
    until_heard(&later[1], &later[0]).await;
    let later_heard = Heard::new(&cluster, &stores, later[0].namespace()).await;
    hold_still(&later, &later_heard, &keys).await;
    for key in &keys {
        let node = &cluster.nodes()[cluster.master_of(&tag(key))];
        assert_eq!(node.cli(&["DEL", &value_key(&later[0], key)]), "1");
        until_dropped(&later, key, "DEL in the namespace attached later").await;
        // The first namespace's copies are of other keys: kept.
        for cache in &first {
            assert!(cache.get_local(key).is_some(), "{:?}", cache.stats());
        }
    }
    for (node, before) in before.iter().enumerate() {
        let stats = cluster.nodes()[node].cli(&["INFO", "stats"]);
        assert!(stats.contains("tracking_total_prefixes:4"), "{stats}");
        let mut now = tracked(node);
        now.sort();
        let mut before = before.clone();
        before.sort();
        assert_eq!(now, before, "the same listeners on node {node}");
    }
    no_flushes(&first);
    no_flushes(&later);
}

/// A user the nodes' ACL refuses `CLIENT`: each cluster store runs
/// without tracking, says so in one INFO line, and corral's own writes
/// still reach the other cache's L1 (the backplane).
#[tokio::test]
async fn cluster_tracking_refused_by_acl_falls_back_to_the_backplane() {
    let cluster = RedisCluster::start();
    let user = ["ACL", "SETUSER", "no-client", "on", ">pw-5d2b", "~*", "&*"];
    let user = [&user[..], &["+@all", "-client"]].concat();
    for node in cluster.nodes() {
        assert_eq!(node.cli(&user), "OK");
    }
    let urls: Vec<String> = cluster
        .nodes()
        .iter()
        .map(|node| format!("redis://no-client:pw-5d2b@127.0.0.1:{}/", node.port()))
        .collect();
    // This runtime runs every task on this thread: the capture sees them.
    let (traces, _guard) = corral_testkit::capture(tracing::Level::INFO);
    let mut caches = Vec::new();
    for _ in 0..2 {
        let store = RedisStore::connect_cluster(&urls, RedisConfig::default())
            .await
            .expect("connect_cluster");
        caches.push(l1_cache(&store, NAME));
    }
    until_heard(&caches[0], &caches[1]).await;
    until_heard(&caches[1], &caches[0]).await;
    let said = || {
        let text = traces.text();
        let lines: Vec<String> = text
            .lines()
            .filter(|line| line.contains("redis client tracking off"))
            .map(str::to_owned)
            .collect();
        lines
    };
    until("each store says tracking is off", || said().len() >= 2).await;
    let lines = said();
    assert_eq!(lines.len(), 2, "one line per store: {lines:?}");
    for line in lines {
        assert!(line.contains(" INFO "), "{line}");
        assert!(line.contains("CLIENT TRACKING"), "says why: {line}");
        assert!(line.to_lowercase().contains("noperm"), "says why: {line}");
    }
    hold(&caches, &["k"]).await;
    caches[1].set("k", "v2".into()).await.expect("set");
    crate::support::read_until(&caches[0], "k", Some("v2")).await;
    for node in &cluster.nodes()[..MASTERS] {
        assert!(tracked_ids(node).is_empty(), "no client tracked");
    }
    for cache in &caches {
        assert_eq!(cache.stats().store_errors, 0, "{:?}", cache.stats());
        assert_eq!(cache.stats().tracking_invalidations, 0);
    }
    no_flushes(&caches);
}

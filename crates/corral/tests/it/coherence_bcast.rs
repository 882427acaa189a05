//! Redis client tracking in `BCAST` mode ([`Tracking::Broadcast`]): the
//! server reports every change under each attached namespace's prefixes
//! (its values and versions) to every store with a cache of it, read or
//! not, and keeps nothing per key. The same outside changes reach every L1
//! as in the default mode; a namespace's prefixes never take in another
//! namespace's keys; a namespace attached to a connection already in use
//! is covered; a new connection registers every prefix again.
//!
//! Each test waits for a condition with a bounded deadline (a short poll),
//! never for a fixed time.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use corral::store::{Change, ChangeSink, Event, Store, StoreKey};
use corral::{Cache, RedisConfig, RedisStore, Tracking};
use corral_testkit::RedisServer;

use crate::coherence_tracking::{
    a_lost_tracking_connection_flushes_the_l1_with, hold,
    invalidations_racing_reads_and_writes_with, no_flushes,
    outside_key_changes_reach_every_l1_with, store, tracked_ids, until_dropped, value_key,
};
use crate::support::{l1_cache, until_heard};

const DEADLINE: Duration = Duration::from_secs(2);

fn bcast() -> RedisConfig {
    RedisConfig::default().tracking(Tracking::Broadcast)
}

/// `DEL`, `UNLINK`, a foreign `SET`, `EXPIRE` and `PEXPIRE` of a key reach
/// the L1 of all 3 caches (each on a store of its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bcast_outside_key_changes_reach_every_l1() {
    outside_key_changes_reach_every_l1_with(&bcast()).await;
}

/// A killed connection flushes the L1 (counted) and the new one has every
/// prefix registered again: a later `DEL` reaches the L1 again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bcast_a_lost_connection_flushes_and_registers_again() {
    a_lost_tracking_connection_flushes_the_l1_with(bcast()).await;
}

/// Reads of a namespace with an L1 go through the read lanes in `BCAST`
/// mode while the invalidations come on the command connection: racing a
/// plain client's `DEL`, nothing stale stays in the L1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bcast_invalidations_racing_reads_and_writes_leave_nothing_stale() {
    invalidations_racing_reads_and_writes_with(&bcast()).await;
}

/// A cache of a namespace attached to a store whose connection is in use
/// (and already registered another namespace's prefixes) is covered: its
/// prefixes are added to that connection, no new one is made, and the
/// server keeps no key tracked per client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bcast_a_namespace_attached_later_is_covered() {
    let server = RedisServer::start();
    let stores = [
        store(&server.url(), bcast()).await,
        store(&server.url(), bcast()).await,
    ];
    let first: Vec<Cache<String>> = stores.iter().map(|s| l1_cache(s, "first")).collect();
    until_heard(&first[0], &first[1]).await;
    until_heard(&first[1], &first[0]).await;
    hold(&first, &["k"]).await;
    let before = tracked_ids(&server);
    assert_eq!(before.len(), 2, "a tracked connection per store");
    // A second namespace on each store, attached now.
    let later: Vec<Cache<String>> = stores.iter().map(|s| l1_cache(s, "later")).collect();
    until_heard(&later[0], &later[1]).await;
    until_heard(&later[1], &later[0]).await;
    hold(&later, &["k"]).await;
    let stats = server.cli(&["INFO", "stats"]);
    // Two prefixes per namespace, shared by the clients registering them;
    // no key tracked per client.
    assert!(stats.contains("tracking_total_prefixes:4"), "{stats}");
    assert!(stats.contains("tracking_total_keys:0"), "{stats}");
    server.cli(&["DEL", &value_key(&later[0], "k")]);
    until_dropped(&later, "k", "DEL in the namespace attached later").await;
    let mut now = tracked_ids(&server);
    now.sort();
    let mut before = before;
    before.sort();
    assert_eq!(now, before, "the same connections");
    // The first namespace's copies are of another key: kept.
    for cache in &first {
        assert!(cache.get_local("k").is_some(), "{:?}", cache.stats());
    }
    server.cli(&["DEL", &value_key(&first[0], "k")]);
    until_dropped(&first, "k", "DEL in the first namespace").await;
    no_flushes(&first);
    no_flushes(&later);
}

/// What a sink attached straight to the store heard.
#[derive(Default)]
struct Heard(Mutex<Vec<Event>>);

impl Heard {
    fn events(&self) -> Vec<Event> {
        self.0.lock().expect("lock").clone()
    }
}

impl ChangeSink for Heard {
    fn changed(&self, _: &Change) {}

    fn lost(&self) {}

    fn invalidated(&self, event: &Event) {
        self.0.lock().expect("lock").push(event.clone());
    }
}

/// Two namespaces on one store, one's name the start of the other's
/// (`ns` and `ns:x`): each one's prefixes are registered (Redis refuses
/// prefixes of one client where one starts another), and an outside change
/// of a key of one reaches that namespace alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bcast_prefixes_keep_namespaces_that_start_alike_apart() {
    let server = RedisServer::start();
    let store = store(&server.url(), bcast()).await;
    let (short, long) = (Arc::new(Heard::default()), Arc::new(Heard::default()));
    for (namespace, sink) in [("ns", &short), ("ns:x", &long)] {
        let weak: Weak<dyn ChangeSink> = Arc::downgrade(sink) as Weak<dyn ChangeSink>;
        assert!(store.backplane(namespace, weak));
    }
    let plain = crate::support::redis_conn(&server.url()).await;
    let set = |namespace: &str, key: &str| {
        let name = RedisStore::keys_of(&StoreKey::new(namespace, key)).value;
        let mut command = redis::cmd("SET");
        command.arg(name).arg("foreign");
        let mut plain = plain.clone();
        async move {
            let _: () = command.query_async(&mut plain).await.expect("SET");
        }
    };
    let deadline = tokio::time::Instant::now() + DEADLINE;
    // Repeated until heard: the prefixes are registered in the background.
    while long.events().is_empty() {
        set("ns:x", "a").await;
        assert!(tokio::time::Instant::now() < deadline, "ns:x not tracked");
        tokio::task::yield_now().await;
    }
    while short.events().is_empty() {
        set("ns", "b").await;
        assert!(tokio::time::Instant::now() < deadline, "ns not tracked");
        tokio::task::yield_now().await;
    }
    // Its push comes after those of every write before it.
    set("ns:x", "last").await;
    while !long.events().contains(&Event::Removed("last".into())) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "ns:x last not heard"
        );
        tokio::task::yield_now().await;
    }
    let only =
        |events: Vec<Event>, key: &str| events.iter().all(|e| *e == Event::Removed(key.into()));
    assert!(only(short.events(), "b"), "{:?}", short.events());
    let long_events = long.events();
    assert!(
        long_events
            .iter()
            .all(|e| matches!(e, Event::Removed(k) if &**k == "a" || &**k == "last")),
        "{long_events:?}"
    );
    let info = server.cli(&["INFO", "stats"]);
    assert!(info.contains("tracking_total_prefixes:4"), "{info}");
    drop(store);
}

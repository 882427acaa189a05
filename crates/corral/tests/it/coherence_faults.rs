//! Client tracking under faults: three caches with the L1, each on a store
//! of its own (its own connections, as another process has), hold the same
//! keys; two reach Redis through a [`FaultProxy`] each. While a fault lasts
//! (the connections frozen, cut, or Redis killed and restarted) a plain
//! client changes every key, and the caches keep reading. Once the bound the
//! `RedisStore` docs give has passed since the fault began, no cache serves
//! an old value of any key: not from its L1, not through a read.
//!
//! Real time, short settings (those of `dead_connections`); waits are
//! bounded polls for events, and the one measured wait is the documented
//! bound itself, counted from the fault's start.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use corral::{Cache, RedisConfig, RedisStore, Stats};
use corral_testkit::{until, FaultProxy, RedisServer};

use crate::coherence_tracking::{hold, value_key};
use crate::support::{l1_cache, redis_conn, until_heard};

const OP_TIMEOUT: Duration = Duration::from_millis(300);
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
const HEALTH_INTERVAL: Duration = Duration::from_millis(300);
/// How many keys every cache holds.
const KEYS: usize = 50;
/// What a fill returns in the final reads: any other value is a stale read
/// (the plain client left no corral value behind).
const MARKER: &str = "filled after the fault";

fn config() -> RedisConfig {
    RedisConfig::default()
        .op_timeout(OP_TIMEOUT)
        .connect_timeout(CONNECT_TIMEOUT)
        .health_interval(HEALTH_INTERVAL)
}

/// [`fleet`] holding [`keys`] in every L1, with a reader per cache
/// started.
async fn reading_fleet(
    server: &RedisServer,
) -> (Vec<FaultProxy>, Vec<Cache<String>>, Vec<String>, Readers) {
    let (proxies, caches) = fleet(server).await;
    let keys = keys();
    let names: Vec<&str> = keys.iter().map(String::as_str).collect();
    hold(&caches, &names).await;
    let readers = Readers::start(&caches, &keys);
    (proxies, caches, keys, readers)
}

/// Waits until every proxy accepted a connection more than `accepted`
/// says it had: each faulted store connects anew.
async fn until_connecting_anew(proxies: &[FaultProxy], accepted: &[usize], what: &str) {
    until(what, || {
        proxies.iter().zip(accepted).all(|(p, &a)| p.accepted() > a)
    })
    .await;
}

/// The bound after which no L1 may serve what a change made during the
/// fault replaced (`RedisStore` docs, "Coherence" and "Dead connections"):
/// the L1 of every cache on a store is dropped when its tracked connection
/// ends (at once) and again once a new one is made, and a command
/// connection that went silent is replaced within `health_interval +
/// op_timeout + connect_timeout` as long as the server answers a new one.
fn bound() -> Duration {
    HEALTH_INTERVAL + OP_TIMEOUT + CONNECT_TIMEOUT
}

/// Three caches with the L1: the first two on stores through a proxy each
/// (returned in the same order), the third on a store straight to `server`,
/// their backplane subscriptions up.
async fn fleet(server: &RedisServer) -> (Vec<FaultProxy>, Vec<Cache<String>>) {
    let proxies = vec![
        FaultProxy::start(server.port()),
        FaultProxy::start(server.port()),
    ];
    let mut urls: Vec<String> = proxies.iter().map(FaultProxy::url).collect();
    urls.push(server.url());
    let mut caches = Vec::new();
    for url in &urls {
        let store = RedisStore::connect(url, config()).await.expect("connect");
        caches.push(l1_cache(&store, "faults"));
    }
    for (i, cache) in caches.iter().enumerate() {
        until_heard(&caches[(i + 1) % caches.len()], cache).await;
    }
    (proxies, caches)
}

fn keys() -> Vec<String> {
    (0..KEYS).map(|i| format!("k{i}")).collect()
}

/// The caches held every key (`hold`: the value `<key>=v`) and keep reading
/// them, as the services would, until [`Readers::stop`].
struct Readers {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Readers {
    fn start(caches: &[Cache<String>], keys: &[String]) -> Readers {
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = caches
            .iter()
            .map(|cache| {
                let (cache, keys, stop) = (cache.clone(), keys.to_vec(), Arc::clone(&stop));
                tokio::spawn(async move {
                    while !stop.load(Ordering::SeqCst) {
                        for key in &keys {
                            // Errors while the fault lasts are expected.
                            let _ = cache.peek(key).await;
                        }
                        tokio::task::yield_now().await;
                    }
                })
            })
            .collect();
        Readers { stop, tasks }
    }

    async fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        for task in self.tasks {
            task.await.expect("reader");
        }
    }
}

/// A plain client, straight to `server`, changes every key: deletes the
/// even ones, writes a foreign value (not corral's encoding) over the odd.
async fn change_every_key(server: &RedisServer, cache: &Cache<String>, keys: &[String]) {
    let mut plain = redis_conn(&server.url()).await;
    let mut pipe = redis::pipe();
    for (i, key) in keys.iter().enumerate() {
        let name = value_key(cache, key);
        if i % 2 == 0 {
            pipe.cmd("DEL").arg(name).ignore();
        } else {
            pipe.cmd("SET").arg(name).arg("foreign").ignore();
        }
    }
    let () = pipe.query_async(&mut plain).await.expect("plain writes");
}

/// Waits until `bound()` has passed since `began`, then asserts that no
/// cache serves an old value of any key: none is in an L1, and a read that
/// fills on a miss returns the fill (a foreign value reads as a miss).
async fn assert_nothing_old(caches: &[Cache<String>], keys: &[String], began: Instant) {
    tokio::time::sleep_until((began + bound()).into()).await;
    let mut old = Vec::new();
    for (i, cache) in caches.iter().enumerate() {
        for key in keys {
            if let Some(held) = cache.get_local(key) {
                old.push(format!("cache {i} keeps {key} = {held:?} in its L1"));
            }
        }
    }
    for (i, cache) in caches.iter().enumerate() {
        for key in keys {
            let fill = || async { Ok::<_, Infallible>(MARKER.to_owned()) };
            match cache.get_or_fill(key, fill).await {
                Ok(value) if value == MARKER => {}
                got => old.push(format!("cache {i} reads {key} as {got:?}")),
            }
        }
    }
    let stats: Vec<_> = caches.iter().map(Cache::stats).collect();
    assert!(
        old.is_empty(),
        "{} stale reads {:?} after the fault began (bound {:?}): {old:#?}\n{stats:#?}",
        old.len(),
        began.elapsed(),
        bound()
    );
}

/// The faulted caches dropped their L1 (counted by `flushes`: for a lost
/// or replaced tracked connection, or a silent one); the third heard every
/// change by tracking.
fn flushed_for_the_fault(caches: &[Cache<String>], flushes: fn(&Stats) -> u64) {
    for cache in &caches[..2] {
        let stats = cache.stats();
        assert!(flushes(&stats) > 0, "{stats:?}");
    }
    let stats = caches[2].stats();
    assert!(stats.tracking_invalidations >= KEYS as u64, "{stats:?}");
}

/// The faulted stores' connections go silent (no replies, no invalidation
/// pushes: the proxy drops them) while a plain client changes every key;
/// new connections get through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_connections_serve_nothing_old_after_the_bound() {
    let server = RedisServer::start();
    let (proxies, caches, keys, readers) = reading_fleet(&server).await;

    let began = Instant::now();
    let accepted: Vec<usize> = proxies.iter().map(FaultProxy::accepted).collect();
    for proxy in &proxies {
        assert!(proxy.blackhole() >= 2, "the command and subscriber links");
    }
    change_every_key(&server, &caches[0], &keys).await;
    // The health checks find the silent connections and replace them.
    until_connecting_anew(&proxies, &accepted, "both faulted stores connect anew").await;
    readers.stop().await;
    assert_nothing_old(&caches, &keys, began).await;
    flushed_for_the_fault(&caches, |s| s.l1_flushes_reconnect);
}

/// The faulted stores' connections are closed (both ends told) and the
/// network stays down for a while (new connections hang) while a plain
/// client changes every key; then it comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_connections_serve_nothing_old_after_the_bound() {
    let server = RedisServer::start();
    let (proxies, caches, keys, readers) = reading_fleet(&server).await;

    let began = Instant::now();
    let accepted: Vec<usize> = proxies.iter().map(FaultProxy::accepted).collect();
    for proxy in &proxies {
        proxy.hold_new(true);
        assert!(proxy.cut() >= 2, "the command and subscriber links");
    }
    change_every_key(&server, &caches[0], &keys).await;
    // Down until a store tried to connect anew (and hung), then back.
    until_connecting_anew(
        &proxies,
        &accepted,
        "both faulted stores try to connect anew",
    )
    .await;
    for proxy in &proxies {
        proxy.hold_new(false);
    }
    readers.stop().await;
    assert_nothing_old(&caches, &keys, began).await;
    flushed_for_the_fault(&caches, |s| s.l1_flushes_reconnect);
}

/// Redis is killed and started again on the same port (empty), and a plain
/// client writes foreign values over every key once it is back, while the
/// stores reconnect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_and_restarted_redis_serves_nothing_old_after_the_bound() {
    let mut server = RedisServer::start();
    let (_proxies, caches, keys, readers) = reading_fleet(&server).await;

    let began = Instant::now();
    server.restart();
    change_every_key(&server, &caches[0], &keys).await;
    readers.stop().await;
    assert_nothing_old(&caches, &keys, began).await;
    for cache in &caches {
        let stats = cache.stats();
        assert!(stats.l1_flushes_reconnect > 0, "{stats:?}");
    }
}

/// The faulted stores' connections go silent and new ones hang too (the
/// host unreachable, not just its connections) for longer than the bound,
/// while a plain client changes every key; then the network comes back.
///
/// No new connection can be made, so the silent one stays: the first
/// health check it does not answer drops what each faulted L1 holds on the
/// store's word, once however many checks follow unanswered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_longer_than_the_bound_serves_nothing_old_after_it() {
    let server = RedisServer::start();
    let (proxies, caches, keys, readers) = reading_fleet(&server).await;

    let began = Instant::now();
    let accepted: Vec<usize> = proxies.iter().map(FaultProxy::accepted).collect();
    for proxy in &proxies {
        proxy.hold_new(true);
        assert!(proxy.blackhole() >= 2, "the command and subscriber links");
    }
    change_every_key(&server, &caches[0], &keys).await;
    until_connecting_anew(
        &proxies,
        &accepted,
        "both faulted stores try to connect anew",
    )
    .await;
    tokio::time::sleep_until((began + bound()).into()).await;
    // Still partitioned: nothing has answered since the silence began.
    for cache in &caches[..2] {
        let stats = cache.stats();
        assert_eq!(stats.l1_flushes_silence, 1, "once per silence: {stats:?}");
    }
    for proxy in &proxies {
        proxy.hold_new(false);
    }
    readers.stop().await;
    assert_nothing_old(&caches, &keys, began).await;
    flushed_for_the_fault(&caches, |s| s.l1_flushes_silence);
}

/// A cache with the L1 on a store through `proxy` with `config`, that
/// waits for a silent store for 100 ms (its lease) before it fills without
/// it; it holds `held`, written through the store.
async fn held_through(proxy: &FaultProxy, config: RedisConfig) -> Cache<String> {
    let store = RedisStore::connect(&proxy.url(), config)
        .await
        .expect("connect");
    let cache = Cache::<String>::builder("silence")
        .store(store)
        .store_timeout(OP_TIMEOUT)
        .lease_ttl(Duration::from_millis(100))
        .build()
        .expect("config");
    hold(std::slice::from_ref(&cache), &["held"]).await;
    cache
}

/// The store's connections go silent and new ones hang: `cache` fills
/// `fresh` from the source; `drop` (run after the fill) brings on the drop,
/// waited for. Then the L1 keeps that fill and nothing in `dropped`.
async fn fill_while_silent_then_drop(
    proxy: &FaultProxy,
    cache: &Cache<String>,
    drop: impl FnOnce(),
    dropped: &[&str],
) {
    proxy.hold_new(true);
    assert!(proxy.blackhole() >= 2, "the command and subscriber links");
    let fill = || async { Ok::<_, Infallible>(MARKER.to_owned()) };
    let fresh = cache.get_or_fill("fresh", fill).await.expect("a value");
    assert_eq!(fresh, MARKER);
    drop();
    until("the silence is noticed", || {
        cache.stats().l1_flushes_silence > 0
    })
    .await;
    let stats = cache.stats();
    assert_eq!(stats.fail_open_fills, 1, "{stats:?}");
    assert_eq!(stats.l1_flushes_reconnect, 0, "{stats:?}");
    for key in dropped {
        assert_eq!(cache.get_local(key), None, "{key}: {stats:?}");
    }
    let kept = cache.get_local("fresh");
    assert_eq!(kept.as_deref(), Some(MARKER), "{stats:?}");
    proxy.hold_new(false);
}

/// A store whose tracked connection goes silent (no new connection can be
/// made either): the first unanswered health check drops what the L1 holds
/// on the store's word and keeps the fill made from the source while the
/// store did not answer, whichever of the two comes first (a flight
/// claimed before the drop still keeps a fill made without the store; the
/// fill is at most a health interval and an operation timeout old at the
/// check, within the second such a fill is kept).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_store_drops_what_the_l1_holds_on_its_word_and_keeps_fills_made_without_it() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let cache = held_through(&proxy, config()).await;
    fill_while_silent_then_drop(&proxy, &cache, || {}, &["held"]).await;
}

/// A warm cache (it knows the store's versions) whose store goes silent
/// fills a key from the source under the versions it knows; then the
/// backplane's subscription is lost (no health check runs meanwhile: the
/// fill is kept before the drop). The drop takes what the L1 held on the
/// store's word and keeps that fill, for its whole TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fill_made_without_the_store_under_known_versions_outlives_the_drop() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    // No health check during the test: the subscription's loss is the
    // drop, and it comes after the fill.
    let config = config().health_interval(Duration::from_secs(60));
    let cache = held_through(&proxy, config).await;
    // Filled under a lease: the cache reads (and keeps) the versions.
    let fill = || async { Ok::<_, Infallible>(MARKER.to_owned()) };
    cache.get_or_fill("warm", fill).await.expect("a value");
    // The command connection, then the subscriber's.
    assert_eq!(proxy.accepted(), 2, "no other connection");
    let cut = || assert!(proxy.cut_connection(1), "the subscriber's link");
    fill_while_silent_then_drop(&proxy, &cache, cut, &["held", "warm"]).await;
}

//! Connections that die without an error (a partitioned host, a dropped NAT
//! entry: no FIN, no RST) are found and replaced within the bound the
//! `RedisStore` docs give ("Dead connections"), through a relay that
//! blackholes them ([`FaultProxy`]).
//!
//! Real time, short settings: each bound is the documented one for the
//! settings below; the waits are bounded by events (the relay accepting
//! the replacement, a counter moving), not by sleeps.

use std::time::{Duration, Instant};

use corral::{Cache, RedisConfig, RedisStore, StoreErrorKind};
use corral_testkit::{until, FaultProxy, RedisCluster, RedisServer};

mod support;
use support::{l1_cache, read_until, until_heard};

const OP_TIMEOUT: Duration = Duration::from_millis(300);
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
const HEALTH_INTERVAL: Duration = Duration::from_millis(300);
/// The subscriber's pause before it reconnects (at most).
const RESUBSCRIBE_PAUSE: Duration = Duration::from_millis(50);

fn config() -> RedisConfig {
    RedisConfig::default()
        .op_timeout(OP_TIMEOUT)
        .connect_timeout(CONNECT_TIMEOUT)
        .health_interval(HEALTH_INTERVAL)
}

/// The documented bound on replacing a silent command connection:
/// `health_interval + op_timeout + connect_timeout`.
fn command_bound() -> Duration {
    HEALTH_INTERVAL + OP_TIMEOUT + CONNECT_TIMEOUT
}

/// The documented bound on re-subscribing after the subscriber's
/// connection went silent: `health_interval + op_timeout + 50 ms +
/// connect_timeout + op_timeout`.
fn subscriber_bound() -> Duration {
    HEALTH_INTERVAL + OP_TIMEOUT + RESUBSCRIBE_PAUSE + CONNECT_TIMEOUT + OP_TIMEOUT
}

/// Reads `key` through `cache` until it answers `want` from its L1 (a
/// second read that does not go to the L2): a backplane message still on
/// its way when the first read kept the value would evict it.
async fn until_in_l1(cache: &Cache<String>, key: &str, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        read_until(cache, key, Some(want)).await;
        let l2_hits = cache.stats().l2_hits;
        let again = cache.peek(key).await.expect("read");
        if again.as_deref() == Some(want) && cache.stats().l2_hits == l2_hits {
            return;
        }
        assert!(Instant::now() < deadline, "{key}: not kept in the L1");
    }
}

/// A store on `server` through a fault proxy (started first, so its
/// connections are the store's, in the order they were made).
async fn through_proxy(server: &RedisServer) -> (FaultProxy, RedisStore) {
    let proxy = FaultProxy::start(server.port());
    let store = RedisStore::connect(&proxy.url(), config())
        .await
        .expect("connect");
    (proxy, store)
}

#[tokio::test]
async fn a_silent_command_connection_is_replaced_within_the_bound() {
    let server = RedisServer::start();
    let (proxy, store) = through_proxy(&server).await;
    // No backplane and no waiter: the command connection is the store's
    // only connection.
    let cache = Cache::<String>::builder("quiet")
        .store(store.clone())
        .backplane(false)
        .build()
        .expect("config");
    cache.set("k", "before".into()).await.expect("set");
    assert_eq!(proxy.accepted(), 1, "one connection: the command one");

    let silent = Instant::now();
    assert!(proxy.blackhole_connection(0));
    // A call on the silent connection fails with a timeout, not a hang.
    let error = cache
        .set("k", "lost".into())
        .await
        .expect_err("no answer on a silent connection");
    let took = silent.elapsed();
    assert!(
        matches!(&error, corral::Error::Store(e) if e.kind() == StoreErrorKind::Timeout),
        "{error}"
    );
    assert!(took < OP_TIMEOUT * 2, "failed after {took:?}");

    // The store is left alone now: the health check alone finds the
    // silent connection and connects anew.
    until("the command connection is replaced", || {
        proxy.accepted() == 2
    })
    .await;
    let replaced = silent.elapsed();
    assert!(
        replaced <= command_bound(),
        "replaced after {replaced:?}, bound {:?}",
        command_bound()
    );

    // Calls work again, through the new connection, and saw nothing of the
    // call that was lost (its SET never reached Redis).
    read_until(&cache, "k", Some("before")).await;
    let working = silent.elapsed();
    cache.set("k", "after".into()).await.expect("set");
    assert_eq!(
        cache.peek("k").await.expect("read").as_deref(),
        Some("after")
    );
    assert!(
        working <= command_bound() + OP_TIMEOUT,
        "first successful call after {working:?}"
    );
    assert_eq!(proxy.accepted(), 2, "replaced once");
    eprintln!(
        "quiet store: call failed after {took:?}, connection replaced after {replaced:?}, \
         calls work after {working:?} (bound {:?})",
        command_bound()
    );
}

#[tokio::test]
async fn a_busy_store_replaces_a_silent_command_connection_within_the_bound() {
    let server = RedisServer::start();
    let (proxy, store) = through_proxy(&server).await;
    // Without a breaker every call goes to the store, however many fail.
    let cache = Cache::<String>::builder("busy")
        .store(store.clone())
        .backplane(false)
        .no_circuit_breaker()
        .build()
        .expect("config");
    cache.set("k", "v".into()).await.expect("set");

    let silent = Instant::now();
    assert!(proxy.blackhole_connection(0));
    // Calls keep coming, each bounded by the operation timeout; the first
    // that succeeds does so within the bound plus one call's timeout.
    let mut failures = 0;
    loop {
        match cache.peek("k").await {
            Ok(value) => {
                assert_eq!(value.as_deref(), Some("v"));
                break;
            }
            Err(error) => {
                failures += 1;
                assert!(
                    silent.elapsed() < command_bound() + OP_TIMEOUT * 2,
                    "still failing after {:?}: {error}",
                    silent.elapsed()
                );
            }
        }
    }
    let working = silent.elapsed();
    assert!(failures >= 1, "the silent connection failed a call");
    assert!(
        working <= command_bound() + OP_TIMEOUT,
        "first successful call after {working:?}, bound {:?}",
        command_bound() + OP_TIMEOUT
    );
    assert_eq!(proxy.accepted(), 2, "replaced once");
    eprintln!("busy store: {failures} calls failed, calls work after {working:?}");
}

#[tokio::test]
async fn a_silent_subscriber_is_replaced_within_the_bound_and_loses_no_invalidation() {
    let server = RedisServer::start();
    let (proxy, here) = through_proxy(&server).await;
    let there = RedisStore::connect(&server.url(), config())
        .await
        .expect("connect");
    let (a, b) = (l1_cache(&here, "bp"), l1_cache(&there, "bp"));
    until_heard(&b, &a).await;
    assert_eq!(
        proxy.accepted(),
        2,
        "the command and the subscriber connection"
    );

    // `a` keeps k in its L1, kept current by the backplane.
    b.set("k", "v1".into()).await.expect("set");
    until_in_l1(&a, "k", "v1").await;
    let resets = a.stats().backplane_resets;

    // The subscriber goes silent; a change published now never reaches
    // `a` over it.
    let silent = Instant::now();
    assert!(proxy.blackhole_connection(1), "the subscriber's connection");
    b.set("k", "during".into()).await.expect("set");

    // Found, replaced and re-subscribed: the L1 is distrusted (a reset)...
    until("the subscriber is replaced", || {
        a.stats().backplane_resets > resets
    })
    .await;
    let replaced = silent.elapsed();
    assert!(
        replaced <= subscriber_bound(),
        "re-subscribed after {replaced:?}, bound {:?}",
        subscriber_bound()
    );
    assert_eq!(proxy.accepted(), 3, "one new connection: the subscriber's");
    eprintln!(
        "subscriber: re-subscribed after {replaced:?} (bound {:?})",
        subscriber_bound()
    );
    assert_eq!(a.stats().backplane_resets, resets + 1);
    // ... so the change made while it was silent is seen, not the L1 copy.
    assert_eq!(a.peek("k").await.expect("read").as_deref(), Some("during"));

    // And the backplane works again: a change after the recovery reaches
    // the L1 of `a` (which now holds "during").
    until_in_l1(&a, "k", "during").await;
    let heard = a.stats().backplane_messages;
    b.invalidate("k").await.expect("invalidate");
    until("the invalidation reached a", || {
        a.stats().backplane_messages > heard
    })
    .await;
    assert_eq!(
        a.peek("k").await.expect("read"),
        None,
        "evicted from the L1"
    );
    b.set("k", "v2".into()).await.expect("set");
    read_until(&a, "k", Some("v2")).await;
}

/// The `(remote port, timer kind)` of each established TCP connection over
/// IPv4, from `/proc/net/tcp` (timer kind 2: the keepalive timer).
#[cfg(target_os = "linux")]
fn tcp_timers() -> Vec<(u16, u8)> {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("read /proc/net/tcp");
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let remote = fields.get(2)?;
            let state = fields.get(3)?;
            let timer = fields.get(5)?;
            let port = u16::from_str_radix(remote.split(':').nth(1)?, 16).ok()?;
            let kind = u8::from_str_radix(timer.split(':').next()?, 16).ok()?;
            (*state == "01").then_some((port, kind))
        })
        .collect()
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn every_connection_keeps_tcp_keepalive_on() {
    let server = RedisServer::start();
    // No health check PINGs during the test: every connection is idle, so
    // its socket runs the keepalive timer if it has keepalive, none if not.
    let quiet = || config().health_interval(Duration::from_secs(600));
    let here = RedisStore::connect(
        &server.url(),
        quiet().tcp_keepalive(Some(Duration::from_secs(30))),
    )
    .await
    .expect("connect");
    let there = RedisStore::connect(&server.url(), quiet().tcp_keepalive(None))
        .await
        .expect("connect");
    let a = l1_cache(&here, "ka");
    let b = Cache::<String>::builder("ka")
        .store(there.clone())
        .l1(true)
        .ttl(Duration::from_secs(60))
        .backplane(false)
        .build()
        .expect("config");
    // `here`'s subscriber is connected once `a` hears a message.
    until_heard(&b, &a).await;

    let mut timers: Vec<u8> = tcp_timers()
        .into_iter()
        .filter(|(port, _)| *port == server.port())
        .map(|(_, kind)| kind)
        .collect();
    timers.sort_unstable();
    assert_eq!(
        timers,
        [0, 2, 2],
        "keepalive timers (2) on the command and subscriber connections of \
         `here`, none (0) on the command connection of `there`"
    );
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cluster_node_connection_keeps_tcp_keepalive_on() {
    let cluster = RedisCluster::start();
    let config = config()
        .health_interval(Duration::from_secs(600))
        .tcp_keepalive(Some(Duration::from_secs(30)));
    let store = RedisStore::connect_cluster(&cluster.urls(), config)
        .await
        .expect("connect");
    // No backplane: the node connections are the store's only ones.
    let cache = Cache::<String>::builder("ka")
        .store(store.clone())
        .backplane(false)
        .build()
        .expect("config");
    for i in 0..30 {
        cache.set(&format!("k{i}"), "v".into()).await.expect("set");
    }
    let ports: Vec<u16> = cluster.nodes().iter().map(RedisServer::port).collect();
    let timers: Vec<u8> = tcp_timers()
        .into_iter()
        .filter(|(port, _)| ports.contains(port))
        .map(|(_, kind)| kind)
        .collect();
    assert!(
        timers.len() >= ports.len(),
        "a connection per node: {timers:?}"
    );
    assert!(
        timers.iter().all(|kind| *kind == 2),
        "keepalive timers: {timers:?}"
    );
}

#[tokio::test]
async fn a_stalled_server_keeps_its_connection_and_answers_when_it_resumes() {
    let server = RedisServer::start();
    let (proxy, store) = through_proxy(&server).await;
    let cache = Cache::<String>::builder("stalled")
        .store(store.clone())
        .backplane(false)
        .no_circuit_breaker()
        .build()
        .expect("config");
    cache.set("k", "v".into()).await.expect("set");

    // Frozen: the health check finds the connection silent and tries new
    // connections, which the frozen server cannot complete.
    server.freeze();
    until("two connections tried while frozen", || {
        proxy.accepted() >= 3
    })
    .await;
    server.thaw();

    // The first call after the thaw is answered (on the connection kept,
    // or one whose handshake the thawed server completed): no call waits
    // for a reconnection or fails at once for a failed attempt.
    let started = Instant::now();
    assert_eq!(cache.peek("k").await.expect("read").as_deref(), Some("v"));
    assert!(started.elapsed() < OP_TIMEOUT, "{:?}", started.elapsed());
}

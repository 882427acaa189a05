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

use crate::support::{l1_cache, read_until, until_heard};

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

/// A cache on `store` that listens to nothing (the command connection is
/// the store's only one) and has no breaker (every call reaches the store).
fn unguarded_cache(store: &RedisStore, name: &str) -> Cache<String> {
    Cache::<String>::builder(name)
        .store(store.clone())
        .backplane(false)
        .no_circuit_breaker()
        .build()
        .expect("config")
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
    let cache = unguarded_cache(&store, "busy");
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

/// The `(remote port, timer kind, clock ticks until it fires)` of each
/// established TCP connection over IPv4, from `/proc/net/tcp` (timer kind
/// 2: the keepalive timer; ticks of `USER_HZ`, 100 a second).
#[cfg(target_os = "linux")]
fn tcp_timers() -> Vec<(u16, u8, u64)> {
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
            let (kind, ticks) = timer.split_once(':')?;
            let kind = u8::from_str_radix(kind, 16).ok()?;
            let ticks = u64::from_str_radix(ticks, 16).ok()?;
            (*state == "01").then_some((port, kind, ticks))
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
        .filter(|(port, _, _)| *port == server.port())
        .map(|(_, kind, _)| kind)
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
        .filter(|(port, _, _)| ports.contains(port))
        .map(|(_, kind, _)| kind)
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

/// A store with `tcp_keepalive(Some(idle))` (1 s and 2 s: a third of
/// either, the probe interval, is below the kernel's whole second) connects,
/// its connection runs a keepalive timer of at most `idle`, and a
/// blackholed command connection is found and replaced by one that carries
/// calls again.
async fn a_short_keepalive_connects_and_finds_a_blackholed_connection(idle: Duration) {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let store = RedisStore::connect(&proxy.url(), config().tcp_keepalive(Some(idle)))
        .await
        .unwrap_or_else(|e| panic!("connect with a keepalive of {idle:?}: {e}"));
    let cache = unguarded_cache(&store, "keepalive");
    cache.set("k", "v".into()).await.expect("set");
    assert_eq!(proxy.accepted(), 1, "one connection: the command one");

    // The kernel took the setting: the connection's keepalive timer (not
    // the system default of hours) fires within `idle`.
    #[cfg(target_os = "linux")]
    {
        let within = idle.as_secs() * 100;
        let mut seen = None;
        until("the command connection's keepalive timer shows", || {
            seen = tcp_timers()
                .into_iter()
                .find(|(port, kind, _)| *port == proxy.port() && *kind == 2)
                .map(|(_, _, ticks)| ticks);
            seen.is_some()
        })
        .await;
        let ticks = seen.unwrap_or(u64::MAX);
        assert!(
            ticks <= within,
            "keepalive fires in {ticks} ticks, idle {idle:?}"
        );
    }

    let silent = Instant::now();
    assert!(proxy.blackhole_connection(0));
    until("the command connection is replaced", || {
        proxy.accepted() == 2
    })
    .await;
    read_until(&cache, "k", Some("v")).await;
    let working = silent.elapsed();
    assert!(
        working <= command_bound() + OP_TIMEOUT,
        "calls work after {working:?}, bound {:?}",
        command_bound() + OP_TIMEOUT
    );
    cache.set("k", "after".into()).await.expect("set");
    assert_eq!(
        cache.peek("k").await.expect("read").as_deref(),
        Some("after")
    );
    assert_eq!(proxy.accepted(), 2, "replaced once");
}

#[tokio::test]
async fn a_one_second_keepalive_connects_and_finds_a_blackholed_connection() {
    a_short_keepalive_connects_and_finds_a_blackholed_connection(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_two_second_keepalive_connects_and_finds_a_blackholed_connection() {
    a_short_keepalive_connects_and_finds_a_blackholed_connection(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn a_stalled_server_keeps_its_connection_and_answers_when_it_resumes() {
    let server = RedisServer::start();
    let (proxy, store) = through_proxy(&server).await;
    let cache = unguarded_cache(&store, "stalled");
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

/// The reconnect delay of the failover tests below: a fixed address
/// answered `READONLY` is connected to anew once its connection is this
/// old.
const REPLICA_RECHECK: Duration = Duration::from_millis(200);

/// A number in `server`'s `INFO replication` (0 while absent).
fn replication(server: &RedisServer, field: &str) -> i64 {
    let info = server.cli(&["INFO", "replication"]);
    info.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0)
}

/// A store on `url` with the failover tests' settings.
async fn store_at(url: &str) -> RedisStore {
    RedisStore::connect(url, config().reconnect_max_delay(REPLICA_RECHECK))
        .await
        .expect("connect")
}

/// One address whose server can fail over: `old` behind a relay, and
/// `new` replicating it.
fn one_address() -> (RedisServer, RedisServer, FaultProxy) {
    let old = RedisServer::start();
    let new = RedisServer::start();
    new.cli(&["REPLICAOF", "127.0.0.1", &old.port().to_string()]);
    let proxy = FaultProxy::start(old.port());
    (old, new, proxy)
}

/// The failover of a managed service: once `new` holds every write `old`
/// took, `new` is promoted, `old` becomes its replica, and the address
/// moves to `new` (connections already open stay with `old`).
async fn fail_over(old: &RedisServer, new: &RedisServer, proxy: &FaultProxy) {
    let written = replication(old, "master_repl_offset");
    until("the replica holds every write", || {
        replication(new, "slave_repl_offset") >= written
    })
    .await;
    new.cli(&["REPLICAOF", "NO", "ONE"]);
    old.cli(&["REPLICAOF", "127.0.0.1", &new.port().to_string()]);
    proxy.retarget(new.port());
}

/// A failover behind one address (a managed service moving its DNS name):
/// the old master, now a replica of the new one, answers the store's open
/// connection `READONLY`; the store connects to the address anew, which
/// reaches the new master. Its subscriber stays on the old node, which
/// relays what the new master publishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_behind_one_address_moves_writes_to_the_new_master() {
    let (old, new, proxy) = one_address();
    let store = store_at(&proxy.url()).await;
    let here = Cache::<String>::builder("moved")
        .store(store.clone())
        .l1(true)
        .ttl(Duration::from_secs(60))
        .no_circuit_breaker()
        .build()
        .expect("config");
    here.set("k", "before".into()).await.expect("set");

    let accepted = proxy.accepted();
    fail_over(&old, &new, &proxy).await;

    let failover = Instant::now();
    while let Err(error) = here.set("k", "after".into()).await {
        assert!(
            failover.elapsed() < Duration::from_secs(10),
            "writes never reached the new master: {error}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let took = failover.elapsed();
    let bound = REPLICA_RECHECK + CONNECT_TIMEOUT + OP_TIMEOUT;
    assert!(
        took <= bound,
        "writes moved after {took:?}, bound {bound:?}"
    );
    eprintln!("failover behind one address: writes on the new master after {took:?}");
    let held = new.cli(&["KEYS", "corral:v:moved*:k"]);
    assert!(held.contains("}:k"), "value on the new master: {held:?}");

    // The subscriber follows the writes (a demoted master relays messages
    // only while its replication link is up; see the resync test): it
    // connects anew (the L1 is distrusted) and hears the new master.
    until("the subscriber connects anew", || {
        proxy.accepted() == accepted + 2
    })
    .await;
    let there = l1_cache(&store_at(&new.url()).await, "moved");
    until_heard(&there, &here).await;
    assert_eq!(
        proxy.accepted(),
        accepted + 2,
        "the command and subscriber connections"
    );
    until_in_l1(&here, "k", "after").await;
    there.set("k", "third".into()).await.expect("set");
    read_until(&here, "k", Some("third")).await;
}

/// A store that writes nothing finds the demotion with its health check
/// (`ROLE`) and moves both connections, so invalidations made at the new
/// master keep reaching its L1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_only_reads_follows_a_failover_behind_one_address() {
    let (old, new, proxy) = one_address();
    let store = store_at(&proxy.url()).await;
    let here = l1_cache(&store, "reader");
    here.set("k", "before".into()).await.expect("set");
    until_in_l1(&here, "k", "before").await;
    let (accepted, resets) = (proxy.accepted(), here.stats().backplane_resets);
    assert_eq!(accepted, 2, "the command and subscriber connections");

    fail_over(&old, &new, &proxy).await;
    let failover = Instant::now();
    until("both connections are made anew", || {
        proxy.accepted() == accepted + 2 && here.stats().backplane_resets > resets
    })
    .await;
    eprintln!(
        "failover behind one address, no writes: both connections moved after {:?}",
        failover.elapsed()
    );
    let there = l1_cache(&store_at(&new.url()).await, "reader");
    until_heard(&there, &here).await;
    there.set("k", "after".into()).await.expect("set");
    read_until(&here, "k", Some("after")).await;
}

/// A demoted master relays its new master's messages only once it has
/// resynchronized with it; after a full resynchronization (held back 5 s
/// here, Redis's default `repl-diskless-sync-delay`) what was published
/// before it never reaches the demoted node. A subscriber left there would
/// keep a stale L1 copy without a sign; it moves to the new master
/// instead, and the move drops the L1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_published_while_the_demoted_master_resyncs_does_not_leave_the_l1_stale() {
    let old = RedisServer::start();
    let new = RedisServer::start_with(&["--repl-diskless-sync-delay", "5"]);
    let proxy = FaultProxy::start(old.port());
    let here = l1_cache(&store_at(&proxy.url()).await, "resync");
    here.set("k", "before".into()).await.expect("set");
    until_in_l1(&here, "k", "before").await;

    // A failover to a server that did not replicate `old`: `old` needs a
    // full resynchronization, seconds away.
    old.cli(&["REPLICAOF", "127.0.0.1", &new.port().to_string()]);
    proxy.retarget(new.port());
    let there = l1_cache(&store_at(&new.url()).await, "resync");
    there.set("k", "after".into()).await.expect("set");
    read_until(&here, "k", Some("after")).await;
    let link = old.cli(&["INFO", "replication"]);
    assert!(
        !link.contains("master_link_status:up"),
        "the change was seen before the demoted master resynchronized: {link}"
    );
}

/// A fixed address that reaches a replica for good (a misconfiguration,
/// or a failover whose name has not moved yet) costs its server one new
/// connection per reconnect delay, not one per refused write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_that_stays_a_replica_is_reconnected_to_sparingly() {
    let master = RedisServer::start();
    let replica = RedisServer::start();
    replica.cli(&["REPLICAOF", "127.0.0.1", &master.port().to_string()]);
    let proxy = FaultProxy::start(replica.port());
    let store = store_at(&proxy.url()).await;
    let cache = unguarded_cache(&store, "replica");
    let first = proxy.accepted();
    assert_eq!(first, 1, "the command connection");

    // Refused writes, as fast as they come back, until the store has made
    // two more connections.
    let started = Instant::now();
    let mut refused = 0u64;
    while proxy.accepted() < first + 2 {
        let error = cache
            .set("k", "v".into())
            .await
            .expect_err("a replica refuses writes");
        let said = format!("{:#}", anyhow::Error::from(error));
        assert!(said.contains("read only replica"), "{said}");
        refused += 1;
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no reconnection after {refused} refused writes"
        );
    }
    let took = started.elapsed();
    assert!(
        took >= REPLICA_RECHECK,
        "two reconnections within {took:?}: at most one per {REPLICA_RECHECK:?}"
    );
    assert!(
        refused > 10,
        "{refused} refused writes: reconnections are not per write"
    );
    eprintln!("replica for good: {refused} refused writes, 2 reconnections in {took:?}");
}

/// The documented bound on re-subscribing after a cluster subscriber's
/// node connection went silent: `health_interval + op_timeout +
/// connect_timeout + op_timeout` (the `PING` to every master, a new
/// connection from the seeds, the `SSUBSCRIBE`s).
fn cluster_subscriber_bound() -> Duration {
    HEALTH_INTERVAL + OP_TIMEOUT + CONNECT_TIMEOUT + OP_TIMEOUT
}

/// The first `key<i>` whose value lives on master `node`.
fn key_on(cluster: &RedisCluster, node: usize) -> String {
    (0..1000)
        .map(|i| format!("key{i}"))
        .find(|key| {
            let name = RedisStore::keys_of(&corral::store::StoreKey::new("any:v1", key)).value;
            cluster.master_of(&name) == node
        })
        .expect("a key on the node")
}

/// A cluster store's subscriber whose connection to one master goes
/// silent finds it by its health check (a `PING` to every master) and
/// subscribes anew within the documented bound; changes on that master
/// reach the L1 again afterwards. Master 0 announces itself at a relay
/// (`cluster-announce-port`), so every client reaches it through the relay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_cluster_node_is_found_by_the_subscriber_within_the_bound() {
    let cluster = RedisCluster::start();
    let key = key_on(&cluster, 0);
    let node = &cluster.nodes()[0];
    let proxy = FaultProxy::start(node.port());
    let bus_port = (node.port() + 10_000).to_string();
    node.cli(&["CONFIG", "SET", "cluster-announce-bus-port", &bus_port]);
    node.cli(&[
        "CONFIG",
        "SET",
        "cluster-announce-port",
        &proxy.port().to_string(),
    ]);
    let relayed = format!("\n{}\n", proxy.port());
    until("every node names master 0 at the relay", || {
        cluster
            .nodes()
            .iter()
            .all(|n| format!("\n{}\n", n.cli(&["CLUSTER", "SLOTS"])).contains(&relayed))
    })
    .await;

    // Seeds other than master 0: the store reaches it through the relay.
    let seeds: Vec<String> = cluster.urls().into_iter().skip(1).collect();
    let connect = || async {
        RedisStore::connect_cluster(&seeds, config())
            .await
            .expect("connect")
    };
    let here = l1_cache(&connect().await, "silent");
    let probe = l1_cache(&connect().await, "silent");
    until_heard(&probe, &here).await;
    probe.set(&key, "v1".into()).await.expect("set");
    until_in_l1(&here, &key, "v1").await;
    let resets = here.stats().backplane_resets;

    let silent = Instant::now();
    assert!(
        proxy.blackhole() >= 2,
        "the stores' connections to master 0"
    );
    until("the subscriber subscribes anew", || {
        here.stats().backplane_resets > resets
    })
    .await;
    let replaced = silent.elapsed();
    eprintln!(
        "cluster subscriber: subscribed anew after {replaced:?} (bound {:?})",
        cluster_subscriber_bound()
    );
    assert!(
        replaced <= cluster_subscriber_bound(),
        "subscribed anew after {replaced:?}, bound {:?}",
        cluster_subscriber_bound()
    );

    // A change on master 0, made by a store connected after the silence,
    // reaches the L1 of `here` again.
    let there = l1_cache(&connect().await, "silent");
    read_until(&here, &key, Some("v1")).await;
    until_in_l1(&here, &key, "v1").await;
    there.set(&key, "v2".into()).await.expect("set");
    read_until(&here, &key, Some("v2")).await;
}

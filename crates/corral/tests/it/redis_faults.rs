//! Round trips and failure behaviour of a Redis-backed cache against a real
//! `redis-server`: commands counted with `INFO commandstats`, the server
//! killed, restarted and frozen with SIGSTOP.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use corral::{Cache, RedisConfig, RedisStore};
use corral_testkit::{until, Gate, RedisServer};
use redis::AsyncCommands;

const OP_TIMEOUT: Duration = Duration::from_millis(300);

async fn store(server: &RedisServer) -> RedisStore {
    let config = RedisConfig::default()
        .op_timeout(OP_TIMEOUT)
        .connect_timeout(OP_TIMEOUT);
    RedisStore::connect(&server.url(), config)
        .await
        .expect("connect")
}

fn cache(store: &RedisStore, lease: Duration) -> Cache<String> {
    Cache::<String>::builder("faults")
        .store(store.clone())
        .l1(false)
        .ttl(Duration::from_secs(60))
        .lease_ttl(lease)
        .store_timeout(OP_TIMEOUT)
        .fill_timeout(Duration::from_secs(10))
        .build()
        .expect("config")
}

/// Commands Redis counts when corral's scripts run them: not round trips.
/// (`get` is also the plain read and the plain lease's check, `pttl` the
/// read of bytes that name no expiry: see [`round_trips`]; `touch`, of the
/// clear version, rides in a read's pipeline or in the lease script.)
const INSIDE_SCRIPTS: [&str; 8] = [
    "get", "set", "del", "pexpire", "pttl", "publish", "touch", "exists",
];
/// Not an operation's traffic: the health checks (the subscriber's `PING`,
/// the command connection's `ROLE` and its reading of the server's clock,
/// `TIME`) and the fixture's own `CONFIG RESETSTAT`.
const NOT_OPERATIONS: [&str; 5] = ["ping", "role", "time", "subscribe", "config|resetstat"];

/// Round trips since the last reset: top-level commands (scripts, `MGET`
/// batches), plus the reads of bytes that name no expiry — one pipelined
/// `PTTL` + `GET` each, counted by their `PTTL` — plus `plain`, the plain
/// requests the caller knows were made: reads sent alone (a `GET`) and
/// plain lease requests (`SET NX` + `GET`, one pipeline each: a leader's
/// request right after its own read found the key absent), which
/// commandstats cannot tell from the scripts' own `GET` and `SET`. A
/// script answering "lease held" runs one `PTTL` too, and the versions
/// script one per version it finds: `held` is how many such `PTTL`s there
/// were.
fn round_trips(stats: &BTreeMap<String, u64>, held: u64, plain: u64) -> u64 {
    let scripts: u64 = stats
        .iter()
        .filter(|(name, _)| {
            !INSIDE_SCRIPTS.contains(&name.as_str()) && !NOT_OPERATIONS.contains(&name.as_str())
        })
        .map(|(_, calls)| calls)
        .sum();
    let reads = stats.get("pttl").copied().unwrap_or(0).saturating_sub(held);
    scripts + reads + plain
}

fn ok(value: &str) -> impl FnOnce() -> std::future::Ready<Result<String, String>> + Send + 'static {
    let value = value.to_owned();
    move || std::future::ready(Ok(value))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trips_per_operation() {
    let server = RedisServer::start();
    let store = store(&server).await;
    let cache = cache(&store, Duration::from_secs(3));
    // Once subscribed, the cache keeps the clear version it reads during
    // the warm-up (a confirmation after it would make it read it again).
    subscribed(&server, &cache, 1).await;
    cache
        .get_or_fill("warm-up", ok("v"))
        .await
        .expect("warm-up");

    server.reset_stats();
    cache.get_or_fill("cold", ok("v")).await.expect("cold miss");
    let stats = server.command_stats();
    assert_eq!(
        round_trips(&stats, 0, 2),
        3,
        "leader cold miss: the first read, lease + commit; {stats:?}"
    );
    // The first read's `GET`, the plain lease's and the commit's own (its
    // fence); no `PTTL` anywhere.
    assert_eq!(
        (stats.get("get"), stats.get("pttl")),
        (Some(&3), None),
        "{stats:?}"
    );
    assert_eq!(
        stats.get("evalsha"),
        Some(&1),
        "the commit is a script; the lease of a key just read absent is not"
    );
    assert_eq!(stats.get("set"), Some(&2), "SET NX and the commit's SET");

    server.reset_stats();
    cache.get_or_fill("cold", ok("other")).await.expect("hit");
    let stats = server.command_stats();
    assert_eq!(
        (stats.get("get"), stats.get("pttl")),
        (Some(&1), None),
        "L2 hit: one plain GET, without PTTL (the store's own commit taught \
         it the value's expiry); {stats:?}"
    );
    assert_eq!(stats.get("evalsha"), None, "an L2 hit runs no script");

    // 10,000 concurrent callers in one process: one lease and one commit.
    // Without an L1 each caller reads the store before it joins the flight
    // (reads of a store-only cache are not coalesced); with one, only the
    // flight's leader talks to Redis.
    let (store_only, herd) = cold_herd(&server, &cache, "herd", (0, 1)).await;
    // The leader's lease request follows its own read of the absent key:
    // plain commands (`SET NX`); the commit is the one script.
    assert_eq!(store_only.get("evalsha"), Some(&1), "{store_only:?}");
    assert!(herd <= 10_002, "10,000 callers cost {herd} round trips");
    let with_l1 = Cache::<String>::builder("faults")
        .store(store.clone())
        .l1(true)
        .build()
        .expect("config");
    // Its versions script reads the expiry of the two versions it finds
    // (the clear version's and the one a tag move changes).
    let (with_l1, herd) = cold_herd(&server, &with_l1, "herd-l1", (2, 1)).await;
    // The flight's first step is the lease request, in plain commands
    // (`SET NX` + `GET`, one pipeline: its `GET` would have returned a
    // present value; no plain read before it); the cache is new, so it
    // reads the namespace's clear version once (the versions script)
    // before the fill; then the commit. `tests/round_trips.rs` names each
    // one with `MONITOR`.
    assert_eq!(
        herd, 3,
        "10,000 callers behind an L1 cost {herd} round trips: {with_l1:?}"
    );
    assert_eq!(with_l1.get("evalsha"), Some(&2), "{with_l1:?}");
    assert_eq!(with_l1.get("pttl"), Some(&2), "no plain read: {with_l1:?}");
    eprintln!("10,000 concurrent callers on one cold key behind an L1: {herd} round trips");

    // A waiter in another process (another store, another connection).
    let other = cache_on_new_store(&server).await;
    // Its subscription is confirmed (which wakes every listener once to
    // re-check) before the measured waiter starts listening.
    subscribed(&server, &other, 2).await;
    server.reset_stats();
    let gate = Gate::new();
    let leader = {
        let (cache, gate) = (cache.clone(), gate.clone());
        tokio::spawn(async move {
            cache
                .get_or_fill("shared", move || async move {
                    gate.wait().await;
                    Ok::<_, String>("from the leader".to_owned())
                })
                .await
        })
    };
    until("the leader holds the lease", || cache.stats().fills == 4).await;
    let waiter = {
        let other = other.clone();
        tokio::spawn(async move { other.get_or_fill("shared", ok("never")).await })
    };
    until("the waiter found the lease held", || {
        other.stats().lease_waits == 1
    })
    .await;
    gate.open();
    assert_eq!(
        waiter.await.expect("task").expect("value"),
        "from the leader"
    );
    assert_eq!(
        leader.await.expect("task").expect("value"),
        "from the leader"
    );
    let stats = server.command_stats();
    // The leader: its first read, the lease (plain commands: the read
    // found the key absent), the commit. The waiter: its first read, the
    // plain lease request, whose `SET NX` finds the lease key taken, so the
    // lease script decides (held: it sets the waiters mark), and — woken by
    // the commit — the lease script again, which finds the value. Its cache
    // is new, so it also reads the namespace's clear version once (the
    // versions script), then keeps it while the backplane keeps it current.
    assert_eq!(other.stats().lease_waits, 1);
    assert_eq!(stats.get("evalsha"), Some(&4), "{stats:?}");
    assert_eq!(stats.get("mget"), None, "{stats:?}");
    // PTTL: one inside each script that found the lease held or the value
    // present, and one in the versions script, which found the clear
    // version; the plain reads (each a lone `GET`) need none.
    assert_eq!(stats.get("pttl"), Some(&3), "{stats:?}");
    assert_eq!(
        round_trips(&stats, 3, 4),
        3 + 5,
        "leader and waiter: {stats:?}"
    );
    eprintln!("waiter in another process: 5 round trips");
}

/// Waits until `subscribers` stores listen on `cache`'s channel.
/// 10,000 concurrent `get_or_fill` calls of the cold `key`, whose one fill
/// waits until every caller joined its flight: Redis's command counts and
/// round trips meanwhile.
/// 10,000 callers of `key` on a cold key: the commands the server ran,
/// and the round trips, knowing that the scripts ran `script_pttls`
/// `PTTL`s (not plain reads) and that `plain` requests were plain commands
/// (see [`round_trips`]).
async fn cold_herd(
    server: &RedisServer,
    cache: &Cache<String>,
    key: &'static str,
    (script_pttls, plain): (u64, u64),
) -> (BTreeMap<String, u64>, u64) {
    server.reset_stats();
    let (coalesced, fills) = (cache.stats().coalesced, cache.stats().fills);
    let gate = Gate::new();
    let callers: Vec<_> = (0..10_000)
        .map(|_| {
            let (cache, gate) = (cache.clone(), gate.clone());
            tokio::spawn(async move {
                cache
                    .get_or_fill(key, move || async move {
                        gate.wait().await;
                        Ok::<_, String>("v".to_owned())
                    })
                    .await
            })
        })
        .collect();
    until("every caller joined", || {
        cache.stats().coalesced >= coalesced + 9_999
    })
    .await;
    gate.open();
    for caller in callers {
        assert_eq!(caller.await.expect("task").expect("value"), "v");
    }
    assert_eq!(cache.stats().fills, fills + 1, "one fill");
    let stats = server.command_stats();
    let trips = round_trips(&stats, script_pttls, plain);
    (stats, trips)
}

async fn subscribed(server: &RedisServer, cache: &Cache<String>, subscribers: usize) {
    let channel = format!("corral:{}:filled", cache.namespace());
    let want = subscribers.to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.cli(&["PUBSUB", "NUMSUB", &channel]).lines().nth(1) != Some(want.as_str()) {
        assert!(
            Instant::now() < deadline,
            "{subscribers} stores never subscribed"
        );
        tokio::task::yield_now().await;
    }
}

async fn cache_on_new_store(server: &RedisServer) -> Cache<String> {
    let store = store(server).await;
    cache(&store, Duration::from_secs(3))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_fill_costs_three_round_trips_plus_renewals() {
    let server = RedisServer::start();
    let store = store(&server).await;
    let cache = cache(&store, Duration::from_millis(150));
    subscribed(&server, &cache, 1).await;
    cache
        .get_or_fill("warm-up", ok("v"))
        .await
        .expect("warm-up");
    server.reset_stats();
    let value = cache
        .get_or_fill("slow", || async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            Ok::<_, String>("v".to_owned())
        })
        .await;
    assert_eq!(value.expect("value"), "v");
    let renewals = cache.stats().lease_renewals;
    assert!(renewals >= 3, "a fill of 3+ leases was renewed: {renewals}");
    let stats = server.command_stats();
    // The first read and the plain lease: plain requests.
    assert_eq!(round_trips(&stats, 0, 2), 3 + renewals, "{stats:?}");
    // The plain lease's `SET NX` and the commit's `SET`.
    assert_eq!(stats.get("set"), Some(&2), "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_mid_fill_then_restarted() {
    let mut server = RedisServer::start();
    let store = store(&server).await;
    let cache = cache(&store, Duration::from_secs(3));
    let gate = Gate::new();
    let fills = Arc::new(AtomicUsize::new(0));
    let callers: Vec<_> = (0..100)
        .map(|_| {
            let (cache, gate, fills) = (cache.clone(), gate.clone(), Arc::clone(&fills));
            tokio::spawn(async move {
                cache
                    .get_or_fill("k", move || async move {
                        fills.fetch_add(1, SeqCst);
                        gate.wait().await;
                        Ok::<_, String>("v".to_owned())
                    })
                    .await
            })
        })
        .collect();
    until("the fill started", || fills.load(SeqCst) == 1).await;
    server.kill();
    gate.open();
    for caller in callers {
        assert_eq!(caller.await.expect("task").expect("fail-open value"), "v");
    }
    assert!(
        cache.stats().store_errors >= 1,
        "the failed commit is counted"
    );

    // Writes do not pretend while Redis is down.
    let started = Instant::now();
    assert!(cache
        .set("k", "x".into())
        .await
        .expect_err("down")
        .is_store());
    assert!(cache.invalidate("k").await.expect_err("down").is_store());
    assert!(cache.peek("k").await.expect_err("down").is_store());
    assert!(started.elapsed() < OP_TIMEOUT * 3 + Duration::from_secs(1));
    // Reads still answer, by filling without a lease.
    let value = cache.get_or_fill("down", ok("fail-open")).await;
    assert_eq!(value.expect("fail-open"), "fail-open");
    assert!(cache.stats().fail_open_fills >= 1);

    // The failures above opened the circuit breaker (on by default): calls
    // reach Redis again when its 5 s cool-down ends and its probe answers.
    server.restart();
    let restarted = Instant::now();
    loop {
        let value = cache.get_or_fill("after", ok("v")).await.expect("value");
        assert_eq!(value, "v");
        if cache.peek("after").await.ok().flatten().is_some() {
            break;
        }
        assert!(
            restarted.elapsed() < Duration::from_secs(10),
            "never recovered"
        );
        tokio::task::yield_now().await;
    }
    eprintln!(
        "calls worked again {:?} after the restart",
        restarted.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_frozen_for_five_seconds_bounds_every_call() {
    const FILL: Duration = Duration::from_millis(50);
    let server = RedisServer::start();
    let store = store(&server).await;
    const LEASE: Duration = Duration::from_secs(1);
    let cache = cache(&store, LEASE);
    cache
        .get_or_fill("warm-up", ok("v"))
        .await
        .expect("warm-up");
    // The bound: the flights wait for the silent store for a lease's life
    // (their reads and lease requests get no answer), then fill without a
    // lease; nothing else waits on the frozen server.
    let bound = LEASE + FILL + Duration::from_millis(500);
    server.freeze();
    let frozen_at = Instant::now();
    let calls: Vec<_> = (0..200)
        .map(|i| {
            let cache = cache.clone();
            tokio::spawn(async move {
                let started = Instant::now();
                let result = cache
                    .get_or_fill(&format!("k{}", i % 5), || async {
                        tokio::time::sleep(FILL).await;
                        Ok::<_, String>("v".to_owned())
                    })
                    .await;
                (result, started.elapsed())
            })
        })
        .collect();
    let mut slowest = Duration::ZERO;
    for call in calls {
        let (result, took) = call.await.expect("task");
        assert_eq!(result.expect("fail-open value"), "v");
        slowest = slowest.max(took);
    }
    assert!(
        slowest <= bound,
        "slowest read {slowest:?} > bound {bound:?}"
    );
    // The 200 reads that timed out opened the circuit breaker (on by
    // default: 5 failures, 5 s cool-down), so the write is refused at once
    // instead of paying its own timeout (`tests/breaker.rs` shows a write
    // timing out with the breaker off).
    let started = Instant::now();
    let refused = cache.set("k0", "x".into()).await.expect_err("frozen");
    assert!(refused.is_breaker_open(), "{refused}");
    assert!(started.elapsed() <= OP_TIMEOUT + Duration::from_millis(500));
    assert!(cache.stats().breaker_opened >= 1);
    eprintln!("frozen: slowest read {slowest:?} (bound {bound:?})");
    // Keep the server frozen for the full 5 s, then it serves again.
    tokio::time::sleep(Duration::from_secs(5).saturating_sub(frozen_at.elapsed())).await;
    server.thaw();
    let thawed = Instant::now();
    // Writes are refused until the breaker's cool-down ends (~0.3 s after
    // the thaw: it opened ~0.3 s into the 5 s freeze); its probe then
    // closes it.
    loop {
        if cache.set("k0", "after".into()).await.is_ok() {
            break;
        }
        assert!(thawed.elapsed() < Duration::from_secs(5), "never recovered");
        tokio::task::yield_now().await;
    }
    assert_eq!(cache.peek("k0").await.expect("get"), Some("after".into()));
    eprintln!("thawed: writes work again after {:?}", thawed.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_leaders_late_commit_is_refused() {
    let server = RedisServer::start();
    let first = cache(&store(&server).await, Duration::from_secs(3));
    let second = cache(&store(&server).await, Duration::from_secs(3));
    let gate = Gate::new();
    let late = {
        let (first, gate) = (first.clone(), gate.clone());
        tokio::spawn(async move {
            first
                .get_or_fill("k", move || async move {
                    gate.wait().await;
                    Ok::<_, String>("late".to_owned())
                })
                .await
        })
    };
    until("the first leader holds the lease", || {
        first.stats().fills == 1
    })
    .await;
    // The first leader's lease is lost (as if it had stalled past its
    // fill timeout).
    let names = corral::RedisStore::keys_of(&corral::store::StoreKey::new(first.namespace(), "k"));
    let client = redis::Client::open(server.url()).expect("client");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("conn");
    let _: () = conn.del(&names.lease).await.expect("DEL");
    let next = second
        .get_or_fill("k", ok("next"))
        .await
        .expect("next leader");
    assert_eq!(next, "next");
    gate.open();
    assert_eq!(
        late.await.expect("task").expect("its callers get it"),
        "late"
    );
    until("the late flight retired", || {
        first.flights_in_progress() == 0
    })
    .await;
    assert_eq!(first.stats().commits_refused, 1);
    assert_eq!(second.peek("k").await.expect("get"), Some("next".into()));
}

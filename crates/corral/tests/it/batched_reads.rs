//! Auto-batched reads of `RedisStore` against a real `redis-server` and a
//! three-master Redis Cluster: reads that arrive while one is in flight go
//! out together (`PTTL`s + one `MGET` per slot), answer exactly as lone
//! reads do, and stay bounded by the operation timeout.
//!
//! The tests run on tokio's current-thread runtime, where the order is
//! fixed: of reads started together (`join_all`), the first [`LONE`] polled
//! go out alone (a store keeps that many round trips of reads in flight)
//! and the others queue behind them, so each test knows which reads share
//! a batch. Value key names are found on the server (the one key
//! holding a marker the test wrote), not computed, so the tests do not
//! depend on the key layout.
#![cfg(feature = "redis")]

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};

use corral::store::{Origin, Store, StoreKey, Stored};
use corral::{RedisConfig, RedisStore, StoreErrorKind};
use corral_testkit::{log_tail, RedisCluster, RedisServer};
use futures_util::future::join_all;

const NS: &str = "batch:v1";
const TTL: Duration = Duration::from_secs(60);
/// Operation timeout of the stores under test.
const OP_TIMEOUT: Duration = Duration::from_millis(300);
/// Slack allowed over `OP_TIMEOUT` for a read that times out.
const SLACK: Duration = Duration::from_millis(250);
/// Bound on any wait that should end promptly.
const PROMPT: Duration = Duration::from_secs(5);
/// Reads of one store that go out alone before others queue: the round
/// trips of reads a store keeps in flight.
const LONE: u64 = 2;

fn config() -> RedisConfig {
    RedisConfig::default()
        .op_timeout(OP_TIMEOUT)
        .connect_timeout(Duration::from_millis(500))
        .reconnect_max_delay(Duration::from_millis(200))
}

async fn connect(server: &RedisServer, config: RedisConfig) -> RedisStore {
    RedisStore::connect(&server.url(), config)
        .await
        .unwrap_or_else(|e| panic!("connect: {e}\n{}", log_tail(&server.log())))
}

fn key(name: &str) -> StoreKey {
    StoreKey::new(NS, name)
}

/// The bytes `set` stores for `name` (unique per key).
fn bytes_of(name: &str) -> Vec<u8> {
    format!("value of <{name}>").into_bytes()
}

async fn seed(store: &RedisStore, names: &[String]) {
    for name in names {
        store
            .set(&key(name), &bytes_of(name), TTL, Origin::new(0))
            .await
            .unwrap_or_else(|e| panic!("set {name}: {e}"));
    }
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}:{i:03}")).collect()
}

/// Awaits `future`, failing the test if it takes longer than `limit`.
async fn within<T>(limit: Duration, what: &str, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(limit, future).await {
        Ok(value) => value,
        Err(_) => panic!("{what}: not done within {limit:?}"),
    }
}

fn count(stats: &BTreeMap<String, u64>, command: &str) -> u64 {
    stats.get(command).copied().unwrap_or(0)
}

/// The Redis name of the key holding `marker` (written by `set`).
fn value_key_name(server: &RedisServer, marker: &[u8]) -> String {
    let marker = String::from_utf8_lossy(marker).into_owned();
    let all = server.cli(&["--scan", "--pattern", "corral:*"]);
    let found: Vec<&str> = all
        .lines()
        .filter(|name| server.cli(&["GET", name]).contains(&marker))
        .collect();
    match found.as_slice() {
        [name] => (*name).to_owned(),
        other => panic!("{marker:?} is held by {other:?}, not by one key"),
    }
}

/// What a read answered, compared between a lone and a batched read: the
/// bytes, the generation, and whether a time to live came with it.
fn shape(read: &Result<Option<Stored>, corral::StoreError>) -> String {
    match read {
        Ok(Some(stored)) => format!(
            "bytes {:?}, generation {:?}, remaining {}",
            String::from_utf8_lossy(&stored.bytes),
            stored.generation,
            stored.remaining.is_some()
        ),
        Ok(None) => "absent".into(),
        Err(e) => format!("error {:?}", e.kind()),
    }
}

/// A read of a store.
type Read<'a> = corral::store::BoxFuture<'a, Result<Option<Stored>, corral::StoreError>>;

/// Lone reads of `keys`, each polled once (sent) and then never again: they
/// hold their places until dropped.
fn held_reads<'a>(store: &'a RedisStore, keys: &'a [StoreKey]) -> Vec<Read<'a>> {
    let waker = futures_util::task::noop_waker();
    let mut context = std::task::Context::from_waker(&waker);
    let mut held: Vec<Read<'a>> = keys.iter().map(|k| store.get(k)).collect();
    for read in &mut held {
        assert!(read.as_mut().poll(&mut context).is_pending());
    }
    held
}

/// Reads `names` at once (queued behind held places) and checks each is
/// answered its own value within the timeout.
async fn answered_in_time(store: &RedisStore, names: &[String], what: &str) {
    let started = Instant::now();
    let reads = within(
        PROMPT,
        what,
        join_all(
            names
                .iter()
                .map(|n| async move { store.get(&key(n)).await }),
        ),
    )
    .await;
    for (name, read) in names.iter().zip(&reads) {
        let stored = read
            .as_ref()
            .unwrap_or_else(|e| panic!("{what}: {name}: {e}"));
        let bytes = stored.as_ref().map(|s| s.bytes.clone());
        assert_eq!(bytes, Some(bytes_of(name)), "{what}: {name}");
    }
    assert!(
        started.elapsed() < OP_TIMEOUT + SLACK,
        "{what}: answered within the timeout: {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn concurrent_reads_of_distinct_keys_take_fewer_commands_than_reads() {
    let server = RedisServer::start();
    let store = connect(&server, config()).await;
    let names = names("distinct", 50);
    seed(&store, &names).await;
    // Read once each: the store remembers every expiry, so each read
    // alone would be a plain GET.
    for name in &names {
        assert!(store.get(&key(name)).await.expect("read").is_some());
    }
    server.reset_stats();
    let keys: Vec<StoreKey> = names.iter().map(|name| key(name)).collect();
    let reads = within(
        PROMPT,
        "50 reads",
        join_all(keys.iter().map(|k| store.get(k))),
    )
    .await;
    for (name, read) in names.iter().zip(&reads) {
        let stored = read
            .as_ref()
            .unwrap_or_else(|e| panic!("read {name}: {e}"))
            .as_ref()
            .unwrap_or_else(|| panic!("{name} absent"));
        assert_eq!(stored.bytes, bytes_of(name), "{name}");
        assert!(stored.generation.is_some() && stored.remaining.is_some());
    }
    let stats = server.command_stats();
    // The first reads alone, the 48 behind them in one MGET.
    assert_eq!(
        (
            count(&stats, "get"),
            count(&stats, "mget"),
            count(&stats, "pttl")
        ),
        (LONE, 1, 0),
        "{stats:?}"
    );

    // Keys read for the first time, written by another process's store:
    // this one remembers none of their expiries, and needs none — each
    // value names its own — so they are batched as plain reads.
    let writer = connect(&server, config()).await;
    let fresh = names_seeded(&writer, "fresh", 20).await;
    server.reset_stats();
    let keys: Vec<StoreKey> = fresh.iter().map(|name| key(name)).collect();
    let reads = within(
        PROMPT,
        "20 reads",
        join_all(keys.iter().map(|k| store.get(k))),
    )
    .await;
    for (name, read) in fresh.iter().zip(&reads) {
        let stored = read.as_ref().expect("read").as_ref().expect("present");
        assert_eq!(stored.bytes, bytes_of(name));
        assert!(stored.remaining.is_some_and(|left| left <= TTL));
    }
    let stats = server.command_stats();
    assert_eq!(
        (
            count(&stats, "get"),
            count(&stats, "mget"),
            count(&stats, "pttl")
        ),
        (LONE, 1, 0),
        "{stats:?}"
    );
}

async fn names_seeded(store: &RedisStore, prefix: &str, n: usize) -> Vec<String> {
    let names = names(prefix, n);
    seed(store, &names).await;
    names
}

#[tokio::test]
async fn a_lone_read_is_the_command_it_was() {
    let server = RedisServer::start();
    let store = connect(&server, config()).await;
    let writer = connect(&server, config()).await;
    let names = names_seeded(&writer, "lone", 1).await;
    let k = key(&names[0]);
    server.reset_stats();
    // First read of another process's write: a plain GET (the value names
    // its expiry).
    assert!(store.get(&k).await.expect("read").is_some());
    let stats = server.command_stats();
    assert_eq!(
        (
            count(&stats, "get"),
            count(&stats, "pttl"),
            count(&stats, "mget")
        ),
        (1, 0, 0),
        "{stats:?}"
    );
    server.reset_stats();
    // Read again, one after the other: a plain GET each.
    for _ in 0..3 {
        assert!(store.get(&k).await.expect("read").is_some());
    }
    let stats = server.command_stats();
    assert_eq!(
        (
            count(&stats, "get"),
            count(&stats, "pttl"),
            count(&stats, "mget")
        ),
        (3, 0, 0),
        "{stats:?}"
    );
}

#[tokio::test]
async fn a_batch_answers_every_kind_of_key_as_a_lone_read_does() {
    let server = RedisServer::start();
    let writer = connect(&server, config()).await;
    // Recalled keys (read before, so a plain GET): one present, one deleted
    // since, one replaced by a hash since. Unknown keys (read with their
    // PTTL): present, absent, a hash, a foreign string, a key without TTL.
    let kinds = [
        "recalled",
        "recalled-deleted",
        "recalled-hash",
        "present",
        "absent",
        "hash",
        "foreign-string",
        "no-ttl",
    ];
    let all: Vec<String> = kinds.iter().map(|kind| (*kind).to_owned()).collect();
    seed(&writer, &all).await;
    let mut raw = BTreeMap::new();
    for kind in kinds {
        raw.insert(kind, value_key_name(&server, &bytes_of(kind)));
    }
    // Two stores that remember the same: the recalled keys read once.
    let lone = connect(&server, config()).await;
    let batched = connect(&server, config()).await;
    for kind in ["recalled", "recalled-deleted", "recalled-hash"] {
        for store in [&lone, &batched] {
            assert!(store.get(&key(kind)).await.expect("read").is_some());
        }
    }
    server.cli(&["DEL", &raw["recalled-deleted"], &raw["absent"]]);
    for kind in ["recalled-hash", "hash"] {
        server.cli(&["DEL", &raw[kind]]);
        server.cli(&["HSET", &raw[kind], "field", "value"]);
    }
    server.cli(&["SET", &raw["foreign-string"], "not a frame", "PX", "60000"]);
    server.cli(&["PERSIST", &raw["no-ttl"]]);

    let mut expected = Vec::new();
    for kind in kinds {
        expected.push(shape(&lone.get(&key(kind)).await));
    }
    server.reset_stats();
    // A first read to be in flight, the others queued behind it.
    let first = names_seeded(&writer, "first", 1).await;
    let mut keys = vec![key(&first[0])];
    keys.extend(kinds.iter().map(|kind| key(kind)));
    let reads = within(
        PROMPT,
        "reads",
        join_all(keys.iter().map(|k| batched.get(k))),
    )
    .await;
    let got: Vec<String> = reads[1..].iter().map(shape).collect();
    for ((kind, want), got) in kinds.iter().zip(&expected).zip(&got) {
        assert_eq!(got, want, "{kind}: batched vs lone");
    }
    assert_eq!(expected[2], "bytes \"\", generation None, remaining false");
    assert_eq!(expected[4], "absent");
    let stats = server.command_stats();
    assert!(count(&stats, "mget") >= 1, "not batched: {stats:?}");
}

#[tokio::test]
async fn a_dropped_caller_in_a_queued_batch_does_not_affect_the_others() {
    let server = RedisServer::start();
    let store = connect(&server, config().op_timeout(Duration::from_secs(5))).await;
    let names = names_seeded(&store, "dropped", LONE as usize + 3).await;
    // Queued between two others.
    let dropped = LONE as usize + 1;
    // Frozen: the first reads stay in flight, the others queue behind them.
    server.freeze();
    let tasks: Vec<_> = names
        .iter()
        .map(|name| {
            let store = store.clone();
            let k = key(name);
            tokio::spawn(async move { store.get(&k).await })
        })
        .collect();
    // Each task runs until it waits (current-thread: in spawn order).
    for _ in 0..3 {
        tokio::task::yield_now().await;
    }
    tasks[dropped].abort();
    server.thaw();
    for (at, (name, task)) in names.iter().zip(tasks).enumerate() {
        let joined = within(PROMPT, name, task).await;
        if at == dropped {
            assert!(
                joined.is_err_and(|e| e.is_cancelled()),
                "{name} was aborted"
            );
            continue;
        }
        let stored = joined
            .expect("task")
            .unwrap_or_else(|e| panic!("read {name}: {e}"))
            .unwrap_or_else(|| panic!("{name} absent"));
        assert_eq!(stored.bytes, bytes_of(name));
    }
    // The store goes on: a batch after the aborted caller's.
    let keys: Vec<StoreKey> = names.iter().map(|name| key(name)).collect();
    let reads = within(PROMPT, "reads", join_all(keys.iter().map(|k| store.get(k)))).await;
    for (name, read) in names.iter().zip(reads) {
        assert_eq!(read.expect("read").expect("present").bytes, bytes_of(name));
    }
    let stats = server.command_stats();
    assert!(count(&stats, "mget") >= 2, "not batched: {stats:?}");
}

#[tokio::test]
async fn a_batch_against_a_frozen_server_times_out_within_op_timeout_and_recovers() {
    let server = RedisServer::start();
    let store = connect(&server, config()).await;
    let names = names_seeded(&store, "frozen", 10).await;
    let keys: Vec<StoreKey> = names.iter().map(|name| key(name)).collect();
    server.freeze();
    let reads = keys.iter().map(|k| async {
        let start = Instant::now();
        (store.get(k).await, start.elapsed())
    });
    let reads = within(PROMPT, "frozen reads", join_all(reads)).await;
    server.thaw();
    for (name, (read, took)) in names.iter().zip(reads) {
        match read {
            Err(e) => assert_eq!(e.kind(), StoreErrorKind::Timeout, "{name}: {e}"),
            Ok(found) => panic!("{name}: a frozen server answered {found:?}"),
        }
        assert!(took < OP_TIMEOUT + SLACK, "{name} took {took:?}");
    }
    // Thawed: the reads in flight are answered, and new ones, alone or
    // batched, read the values.
    let again = async {
        loop {
            let reads = join_all(keys.iter().map(|k| store.get(k))).await;
            if reads.iter().all(Result::is_ok) {
                return reads;
            }
        }
    };
    let reads = within(PROMPT, "reads after thaw", again).await;
    for (name, read) in names.iter().zip(reads) {
        assert_eq!(read.expect("read").expect("present").bytes, bytes_of(name));
    }
}

#[tokio::test]
async fn a_cluster_batch_spanning_several_slots_answers_every_key() {
    let cluster = RedisCluster::start();
    let store = RedisStore::connect_cluster(&cluster.urls(), config())
        .await
        .unwrap_or_else(|e| panic!("connect_cluster: {e}\n{}", cluster.logs()));
    let names = names("cluster", 30);
    seed(&store, &names).await;
    cluster.reset_stats();
    let keys: Vec<StoreKey> = names.iter().map(|name| key(name)).collect();
    let reads = within(PROMPT, "reads", join_all(keys.iter().map(|k| store.get(k)))).await;
    for (name, read) in names.iter().zip(reads) {
        let stored = read
            .unwrap_or_else(|e| panic!("read {name}: {e}\n{}", cluster.logs()))
            .unwrap_or_else(|| panic!("{name} absent"));
        assert_eq!(stored.bytes, bytes_of(name));
        assert!(stored.remaining.is_some());
    }
    let with_mget = cluster
        .nodes()
        .iter()
        .filter(|node| count(&node.command_stats(), "mget") > 0)
        .count();
    assert!(
        with_mget >= 2,
        "the batch did not reach several masters: {:?}",
        cluster.command_stats()
    );
}

#[tokio::test]
async fn a_user_whose_acl_refuses_mget_reads_alone() {
    let server = RedisServer::start();
    // The commands a cache user needed before reads were batched.
    let acl = [
        "ACL",
        "SETUSER",
        "old-user",
        "on",
        ">secret",
        "resetkeys",
        "~corral:?:batch:*",
        "resetchannels",
        "&corral:batch:*",
        "-@all",
        "+get",
        "+pttl",
        "+set",
        "+del",
        "+pexpire",
        "+publish",
        "+evalsha",
        "+eval",
        "+script|load",
        "+subscribe",
        "+unsubscribe",
        "+ping",
    ];
    assert_eq!(server.cli(&acl), "OK");
    let url = format!("redis://old-user:secret@127.0.0.1:{}/", server.port());
    let store = RedisStore::connect(&url, config())
        .await
        .unwrap_or_else(|e| panic!("connect: {e}\n{}", log_tail(&server.log())));
    let names = names_seeded(&store, "acl", 10).await;
    let keys: Vec<StoreKey> = names.iter().map(|name| key(name)).collect();
    for round in 0..2 {
        server.reset_stats();
        let reads = within(PROMPT, "reads", join_all(keys.iter().map(|k| store.get(k)))).await;
        for (name, read) in names.iter().zip(reads) {
            let stored = read
                .unwrap_or_else(|e| panic!("round {round}, read {name}: {e}"))
                .unwrap_or_else(|| panic!("{name} absent"));
            assert_eq!(stored.bytes, bytes_of(name));
        }
        let stats = server.command_stats();
        if round == 1 {
            // No longer batched: every read a lone GET.
            assert_eq!(count(&stats, "get"), 10, "{stats:?}");
        }
    }
}

/// Two reads whose callers poll them once and then hold them without
/// polling take both places; no other read waits on them: the queued ones
/// go alone after half their timeout, and once no round trip began or
/// ended for a whole timeout the next reads take the places back and
/// batch again.
#[tokio::test]
async fn callers_that_stop_polling_their_reads_hold_up_no_other_read() {
    let server = RedisServer::start();
    let store = connect(&server, config()).await;
    let all = names("held", 12);
    seed(&store, &all).await;
    let (held, others) = all.split_at(2);

    // Both lone reads are sent, then never polled again (not dropped).
    let held_keys: Vec<StoreKey> = held.iter().map(|n| key(n)).collect();
    let stuck = held_reads(&store, &held_keys);

    // Reads queued behind them are answered, after half their timeout.
    answered_in_time(&store, others, "reads queued behind held ones").await;

    // After a whole timeout without a round trip, reads batch again.
    tokio::time::sleep(OP_TIMEOUT).await;
    server.reset_stats();
    let started = Instant::now();
    let reads = join_all(others.iter().map(|n| {
        let store = &store;
        async move { store.get(&key(n)).await }
    }))
    .await;
    assert!(reads.iter().all(Result::is_ok), "{reads:?}");
    assert!(
        started.elapsed() < OP_TIMEOUT / 2,
        "{:?}",
        started.elapsed()
    );
    let stats = server.command_stats();
    assert_eq!(count(&stats, "mget"), 1, "{stats:?}");
    drop(stuck);
}

/// A batch is bounded by the timeout of its oldest read, not by a round
/// trip counted from when it is sent: reads that queued behind two lone
/// reads stuck on a frozen server, and that a batch takes only when those
/// time out (with most of their own timeout gone), still end within their
/// own timeout. (A batch bounded from its sending would end them at 1.25 ×
/// the timeout.)
#[tokio::test]
async fn a_batch_sent_late_ends_within_the_timeout_of_its_reads() {
    let timeout = Duration::from_secs(2);
    let server = RedisServer::start();
    let store = connect(&server, config().op_timeout(timeout)).await;
    let names = names_seeded(&store, "late", LONE as usize + 4).await;
    let (lone, queued) = names.split_at(LONE as usize);
    server.freeze();
    // Sent alone when the test next waits, they hold both places until
    // their own timeout.
    let lone_reads: Vec<_> = lone
        .iter()
        .map(|name| {
            let store = store.clone();
            let k = key(name);
            tokio::spawn(async move { store.get(&k).await })
        })
        .collect();
    // Queued at 75% of the lone reads' timeout: taken by a batch when those
    // end (at 100%), well before the watchdog would send them alone (125%).
    tokio::time::sleep(timeout * 3 / 4).await;
    let reads = queued.iter().map(|name| {
        let store = &store;
        async move {
            let asked = Instant::now();
            (store.get(&key(name)).await, asked.elapsed())
        }
    });
    let reads = within(PROMPT, "queued reads", join_all(reads)).await;
    for (name, (read, took)) in queued.iter().zip(reads) {
        match read {
            Err(e) => assert_eq!(e.kind(), StoreErrorKind::Timeout, "{name}: {e}"),
            Ok(found) => panic!("{name}: a frozen server answered {found:?}"),
        }
        assert!(took < timeout + SLACK, "{name} took {took:?}");
    }
    for (name, task) in lone.iter().zip(lone_reads) {
        let read = within(PROMPT, name, task).await.expect("task");
        assert!(read.is_err(), "{name}: a frozen server answered {read:?}");
    }
    server.thaw();
    // What the frozen server was sent: the lone reads' GETs and one batch
    // (no read of the batch was sent alone).
    let stats = within(PROMPT, "the batch reaching the server", async {
        loop {
            let stats = server.command_stats();
            if count(&stats, "mget") > 0 {
                return stats;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert_eq!(
        (count(&stats, "get"), count(&stats, "mget")),
        (LONE, 1),
        "{stats:?}"
    );
}

/// The watchdog that sends late queued reads alone runs only while reads
/// queue, and the next queued read starts it again: reads queued behind
/// unpolled lone reads are answered within their timeout after the queue
/// was idle for longer than the watchdog lives without reads.
#[tokio::test]
async fn queued_reads_stay_bounded_after_the_queue_was_idle() {
    let server = RedisServer::start();
    let store = connect(&server, config()).await;
    let all = names("idle", 8);
    seed(&store, &all).await;
    let (held, others) = all.split_at(LONE as usize);
    let held_keys: Vec<StoreKey> = held.iter().map(|n| key(n)).collect();
    for round in 0..2 {
        // Both places taken by reads sent, then never polled again.
        let stuck = held_reads(&store, &held_keys);
        answered_in_time(&store, others, &format!("round {round}")).await;
        // Dropped, they give their places back.
        drop(stuck);
        // Nothing queues for two timeouts: the watchdog ends (it lives at
        // most one timeout past the last read queued).
        tokio::time::sleep(OP_TIMEOUT * 2).await;
    }
}

/// A store used after the runtime it was connected on is gone: its queued
/// reads are still bounded (the watchdog runs on the runtime of the reads
/// that queue, not on the dead one).
#[test]
fn queued_reads_stay_bounded_when_the_stores_own_runtime_is_gone() {
    let server = RedisServer::start();
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    };
    let first = runtime();
    let store = first.block_on(connect(&server, config()));
    drop(first);
    runtime().block_on(async {
        let all = names("orphan", 8);
        // The command connection's task ended with its runtime: write until
        // the store has connected anew.
        let deadline = Instant::now() + PROMPT;
        for name in &all {
            while let Err(e) = store
                .set(&key(name), &bytes_of(name), TTL, Origin::new(0))
                .await
            {
                assert!(Instant::now() < deadline, "no reconnect: {e}");
                tokio::task::yield_now().await;
            }
        }
        let (held, others) = all.split_at(LONE as usize);
        // Both lone reads are sent, then never polled again.
        let held_keys: Vec<StoreKey> = held.iter().map(|n| key(n)).collect();
        let stuck = held_reads(&store, &held_keys);
        answered_in_time(&store, others, "reads queued behind held ones").await;
        drop(stuck);
    });
}

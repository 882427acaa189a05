//! Redis client tracking: changes made outside corral — a plain client's
//! `DEL`, `UNLINK`, `SET`, `EXPIRE`, `FLUSHDB`, `FLUSHALL`, an eviction
//! under `maxmemory` — reach the L1 of every cache that holds the key, each
//! cache on a store (a connection, as another process has) of its own.
//! Without tracking, each L1 served its copy until the entry's TTL.
//!
//! Each test waits for a condition with a bounded deadline (a short poll
//! of the L1), never for a fixed time.

use std::time::Duration;

use corral::store::StoreKey;
use corral::{Cache, RedisConfig, RedisStore, Tracking};
use corral_testkit::RedisServer;

use crate::support::{l1_cache, until_heard};

/// How long a change may take to reach every L1 before a test fails.
const DEADLINE: Duration = Duration::from_secs(2);

/// The caches' name.
const NAME: &str = "tracked";

pub(crate) async fn store(url: &str, config: RedisConfig) -> RedisStore {
    RedisStore::connect(url, config).await.expect("connect")
}

/// `count` caches with an L1, each on a store of its own, their
/// backplane subscriptions up (so no later confirmation of one drops an
/// L1, which would hide whether tracking did).
pub(crate) async fn fleet(url: &str, config: &RedisConfig, count: usize) -> Vec<Cache<String>> {
    let mut caches = Vec::with_capacity(count);
    for _ in 0..count {
        caches.push(l1_cache(&store(url, config.clone()).await, NAME));
    }
    for (i, cache) in caches.iter().enumerate() {
        until_heard(&caches[(i + 1) % count], cache).await;
    }
    caches
}

/// Asserts that no cache dropped its whole L1 because the backplane's or
/// the server's reports may have been lost (which would evict every key,
/// whatever tracking did).
pub(crate) fn no_flushes(caches: &[Cache<String>]) {
    for cache in caches {
        let stats = cache.stats();
        assert_eq!(stats.backplane_resets, 0, "{stats:?}");
        assert_eq!(stats.l1_flushes_reconnect, 0, "{stats:?}");
        assert_eq!(stats.l1_flushes_failover, 0, "{stats:?}");
    }
}

/// The Redis key holding `key`'s value in `cache`'s namespace.
pub(crate) fn value_key(cache: &Cache<String>, key: &str) -> String {
    RedisStore::keys_of(&StoreKey::new(cache.namespace(), key)).value
}

/// The first cache writes each of `keys` (its value is the key's name
/// with `=v`), every cache reads it: each L1 holds every key once this
/// returns, and no message of those writes is still on its way.
pub(crate) async fn hold(caches: &[Cache<String>], keys: &[&str]) {
    let heard: Vec<u64> = caches
        .iter()
        .map(|c| c.stats().backplane_messages)
        .collect();
    for key in keys {
        caches[0].set(key, format!("{key}=v")).await.expect("set");
    }
    let deadline = tokio::time::Instant::now() + DEADLINE;
    for (cache, heard) in caches.iter().zip(heard).skip(1) {
        // The writes' backplane messages, which evict the key, have landed.
        while cache.stats().backplane_messages < heard + keys.len() as u64 {
            assert!(tokio::time::Instant::now() < deadline, "messages lost");
            tokio::task::yield_now().await;
        }
    }
    for cache in caches {
        for key in keys {
            // A read whose reply an invalidation overtook keeps no copy:
            // read again until one does.
            while cache.get_local(key).is_none() {
                let got = cache.peek(key).await.expect("read");
                assert_eq!(got, Some(format!("{key}=v")));
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{key} not kept in the L1: {:?}",
                    cache.stats()
                );
            }
        }
    }
}

/// Waits, within [`DEADLINE`], until no cache serves `key` from its L1.
pub(crate) async fn until_dropped(caches: &[Cache<String>], key: &str, what: &str) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    loop {
        let holding: Vec<usize> = (0..caches.len())
            .filter(|&i| caches[i].get_local(key).is_some())
            .collect();
        if holding.is_empty() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: caches {holding:?} still serve {key} from their L1 after {DEADLINE:?}: {:?}",
            caches
                .iter()
                .map(|c| c.stats().tracking_invalidations)
                .collect::<Vec<_>>()
        );
        tick.tick().await;
    }
}

/// Every key-level change a plain client makes drops the key from every
/// L1 that held it (the writer's own too), and a foreign value written
/// over a corral key reads as a miss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outside_key_changes_reach_every_l1() {
    outside_key_changes_reach_every_l1_with(&RedisConfig::default()).await;
}

/// [`outside_key_changes_reach_every_l1`] with `config`.
pub(crate) async fn outside_key_changes_reach_every_l1_with(config: &RedisConfig) {
    let server = RedisServer::start();
    let caches = fleet(&server.url(), config, 3).await;
    let keys = ["del", "unlink", "set", "expire", "pexpire"];
    hold(&caches, &keys).await;
    let name = |key: &str| value_key(&caches[0], key);

    assert_eq!(server.cli(&["DEL", &name("del")]), "1");
    until_dropped(&caches, "del", "DEL").await;
    assert_eq!(server.cli(&["UNLINK", &name("unlink")]), "1");
    until_dropped(&caches, "unlink", "UNLINK").await;
    assert_eq!(server.cli(&["SET", &name("set"), "foreign"]), "OK");
    until_dropped(&caches, "set", "SET").await;
    assert_eq!(server.cli(&["EXPIRE", &name("expire"), "0"]), "1");
    until_dropped(&caches, "expire", "EXPIRE key 0").await;
    assert_eq!(server.cli(&["PEXPIRE", &name("pexpire"), "1"]), "1");
    until_dropped(&caches, "pexpire", "PEXPIRE key 1").await;

    for cache in &caches {
        for key in keys {
            assert_eq!(cache.peek(key).await.expect("read"), None, "{key}");
        }
        let stats = cache.stats();
        assert!(stats.tracking_invalidations >= 5, "{stats:?}");
        assert_eq!(stats.l1_flushes_server_flush, 0, "{stats:?}");
    }
    no_flushes(&caches);
}

/// `FLUSHDB` and `FLUSHALL` drop every L1 (a null invalidation), counted
/// as a flush by the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_flushes_drop_every_l1() {
    let server = RedisServer::start();
    let caches = fleet(&server.url(), &RedisConfig::default(), 3).await;
    let keys = ["a", "b", "c"];
    for (round, command) in ["FLUSHDB", "FLUSHALL"].into_iter().enumerate() {
        hold(&caches, &keys).await;
        assert_eq!(server.cli(&[command]), "OK");
        for key in keys {
            until_dropped(&caches, key, command).await;
        }
        for cache in &caches {
            let flushes = cache.stats().l1_flushes_server_flush;
            assert!(flushes > round as u64, "{command}: {:?}", cache.stats());
        }
    }
    no_flushes(&caches);
}

/// A key Redis evicts under `maxmemory` is dropped from every L1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evicted_keys_leave_every_l1() {
    let server =
        RedisServer::start_with(&["--maxmemory", "4mb", "--maxmemory-policy", "allkeys-random"]);
    let caches = fleet(&server.url(), &RedisConfig::default(), 3).await;
    hold(&caches, &["evicted"]).await;
    let name = value_key(&caches[0], "evicted");
    let filler = "x".repeat(64 * 1024);
    let mut client = crate::support::redis_conn(&server.url()).await;
    for i in 0.. {
        let exists: u64 = redis::cmd("EXISTS")
            .arg(&name)
            .query_async(&mut client)
            .await
            .expect("EXISTS");
        if exists == 0 {
            break;
        }
        assert!(i < 10_000, "the key was never evicted");
        let _: () = redis::cmd("SET")
            .arg(format!("filler:{i}"))
            .arg(&filler)
            .query_async(&mut client)
            .await
            .expect("SET");
    }
    until_dropped(&caches, "evicted", "eviction").await;
    for cache in &caches {
        assert_eq!(cache.peek("evicted").await.expect("read"), None);
    }
    no_flushes(&caches);
}

/// The tracked connections killed: what the server tracked for them is
/// gone, so the stores' caches drop their L1 (counted) once they are made
/// anew, and the new connections are tracked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_tracking_connection_flushes_the_l1() {
    a_lost_tracking_connection_flushes_the_l1_with(RedisConfig::default()).await;
}

/// [`a_lost_tracking_connection_flushes_the_l1`] with `config`.
pub(crate) async fn a_lost_tracking_connection_flushes_the_l1_with(config: RedisConfig) {
    let server = RedisServer::start();
    let config = config.health_interval(Duration::from_millis(20));
    let caches = fleet(&server.url(), &config, 2).await;
    hold(&caches, &["k"]).await;
    let before = tracked_ids(&server);
    assert_eq!(before.len(), 2, "a tracked connection per store");
    for id in &before {
        assert_eq!(server.cli(&["CLIENT", "KILL", "ID", id]), "1");
    }
    until_dropped(&caches, "k", "connection lost").await;
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    // Two flushes each: when the connection ended, and once it was made
    // anew (what was kept meanwhile was not tracked).
    while caches.iter().any(|c| c.stats().l1_flushes_reconnect < 2) {
        assert!(tokio::time::Instant::now() < deadline, "no flush counted");
        tick.tick().await;
    }
    // Both stores connected anew, with tracking on.
    loop {
        let now = tracked_ids(&server);
        if now.len() == 2 && now.iter().all(|id| !before.contains(id)) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "not tracked again");
        tick.tick().await;
    }
    hold(&caches, &["k"]).await;
    let heard: Vec<u64> = caches
        .iter()
        .map(|c| c.stats().tracking_invalidations)
        .collect();
    server.cli(&["DEL", &value_key(&caches[0], "k")]);
    until_dropped(&caches, "k", "DEL after the reconnect").await;
    for (cache, heard) in caches.iter().zip(heard) {
        assert!(
            cache.stats().tracking_invalidations > heard,
            "{:?}",
            cache.stats()
        );
    }
}

/// The ids of the server's clients with tracking on.
pub(crate) fn tracked_ids(server: &RedisServer) -> Vec<String> {
    server
        .cli(&["CLIENT", "LIST"])
        .lines()
        .filter(|line| {
            line.split(' ').any(|field| {
                field
                    .strip_prefix("flags=")
                    .is_some_and(|f| f.contains('t'))
            })
        })
        .filter_map(|line| line.split(' ').find_map(|f| f.strip_prefix("id=")))
        .map(str::to_owned)
        .collect()
}

/// With tracking off, an outside `DEL` does not reach the L1 (the L1 keeps
/// serving its copy), while corral's own writes still do (the backplane).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tracking_off_leaves_the_backplane() {
    let server = RedisServer::start();
    let config = RedisConfig::default().tracking(Tracking::Off);
    let caches = fleet(&server.url(), &config, 2).await;
    hold(&caches, &["k"]).await;
    server.cli(&["DEL", &value_key(&caches[0], "k")]);
    // A read answered after the DEL on the second cache's connection:
    // with tracking on, the DEL's invalidation would have come before it.
    caches[0].set("other", "1".into()).await.expect("set");
    crate::support::read_until(&caches[1], "other", Some("1")).await;
    assert!(
        caches[1].get_local("k").is_some(),
        "no tracking, no eviction"
    );
    caches[0].set("k", "v2".into()).await.expect("set");
    crate::support::read_until(&caches[1], "k", Some("v2")).await;
    assert_eq!(caches[1].stats().tracking_invalidations, 0);
    no_flushes(&caches);
}

/// A user the server's ACL refuses `CLIENT`: the stores run without
/// tracking, each says so in one INFO line, and corral's own writes still
/// reach the other cache's L1 (the backplane).
#[tokio::test]
async fn tracking_refused_by_acl_falls_back_to_the_backplane() {
    let server = RedisServer::start();
    let user = ["ACL", "SETUSER", "no-client", "on", ">pw-4c1a", "~*", "&*"];
    let user = [&user[..], &["+@all", "-client"]].concat();
    assert_eq!(server.cli(&user), "OK");
    let url = format!("redis://no-client:pw-4c1a@127.0.0.1:{}/", server.port());
    // This runtime runs every task on this thread: the capture sees them.
    let (traces, _guard) = corral_testkit::capture(tracing::Level::INFO);
    let caches = fleet(&url, &RedisConfig::default(), 2).await;
    hold(&caches, &["k"]).await;
    caches[1].set("k", "v2".into()).await.expect("set");
    crate::support::read_until(&caches[0], "k", Some("v2")).await;

    let text = traces.text();
    let said: Vec<&str> = text
        .lines()
        .filter(|line| line.contains("redis client tracking off"))
        .collect();
    assert_eq!(said.len(), 2, "one line per store: {text}");
    for line in said {
        assert!(line.contains(" INFO "), "{line}");
        assert!(line.contains("CLIENT TRACKING"), "says why: {line}");
        assert!(line.to_lowercase().contains("noperm"), "says why: {line}");
    }
    let clients = server.cli(&["CLIENT", "LIST"]);
    assert!(
        !clients.lines().any(|line| line.contains(" flags=t")),
        "{clients}"
    );
    for cache in &caches {
        assert_eq!(cache.stats().store_errors, 0, "{:?}", cache.stats());
        assert_eq!(cache.stats().tracking_invalidations, 0);
    }
    no_flushes(&caches);
}

/// What a racing round does on the reading cache while a plain client
/// deletes the key.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Racer {
    /// A read (an L2 hit kept in the L1).
    Peek,
    /// A batch read of the key and another.
    Batch,
    /// A fill that commits (the key absent).
    Fill,
    /// A write.
    Set,
}

/// A read, a batch, a fill and a write of a key, each racing a plain
/// client's `DEL` of it, never leave in the L1 a value the store no longer
/// holds: whichever reaches the server first, once a later reply came on
/// the tracked connection (which the `DEL`'s invalidation precedes), the
/// L1 holds nothing or what the store holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalidations_racing_reads_and_writes_leave_nothing_stale() {
    invalidations_racing_reads_and_writes_with(&RedisConfig::default()).await;
}

/// [`invalidations_racing_reads_and_writes_leave_nothing_stale`] with
/// `config`.
pub(crate) async fn invalidations_racing_reads_and_writes_with(config: &RedisConfig) {
    let server = RedisServer::start();
    let caches = fleet(&server.url(), config, 2).await;
    let (reader, writer) = (&caches[0], &caches[1]);
    let checker = Cache::<String>::builder(NAME)
        .store(store(&server.url(), config.clone()).await)
        .l1(false)
        .ttl(Duration::from_secs(60))
        .build()
        .expect("config");
    let mut plain = crate::support::redis_conn(&server.url()).await;
    let name = value_key(reader, "k");
    let mut kept = [0_usize; 4];
    for round in 0..400 {
        let racer = RACERS[round % 4];
        let heard = reader.stats().backplane_messages;
        prepare(writer, racer, round).await;
        // The message of that write landed: no eviction of it is to come.
        while reader.stats().backplane_messages == heard {
            tokio::task::yield_now().await;
        }
        tokio::join!(delete_later(&mut plain, &name, round), race(reader, racer));
        // A reply on the reader's tracked connection after the DEL's
        // (a write: reads may go through other connections).
        reader.set("barrier", "b".into()).await.expect("set");
        if let Some(held) = reader.get_local("k") {
            kept[round % 4] += 1;
            let truth = checker.peek("k").await.expect("read");
            assert_eq!(Some(held), truth, "{racer:?}, round {round}");
        }
    }
    eprintln!("rounds that kept a copy (peek, batch, fill, set): {kept:?}");
}

/// The racers, in the order the rounds take them.
pub(crate) const RACERS: [Racer; 4] = [Racer::Peek, Racer::Batch, Racer::Fill, Racer::Set];

/// Before round `round`: `writer` writes the key `k` (before a read) or
/// invalidates it (before a fill or a write).
pub(crate) async fn prepare(writer: &Cache<String>, racer: Racer, round: usize) {
    match racer {
        Racer::Peek | Racer::Batch => {
            writer.set("k", format!("v{round}")).await.expect("set");
        }
        Racer::Fill | Racer::Set => writer.invalidate("k").await.expect("invalidate"),
    }
}

/// A plain client's `DEL` of `name`, sent a little later each round, so
/// that it lands before, during and after the race's own round trips.
pub(crate) async fn delete_later(
    plain: &mut redis::aio::MultiplexedConnection,
    name: &str,
    round: usize,
) {
    for _ in 0..round / 4 % 16 {
        tokio::task::yield_now().await;
    }
    let _: u64 = redis::cmd("DEL")
        .arg(name)
        .query_async(plain)
        .await
        .expect("DEL");
}

/// One racing call of `racer` on `reader` (of the key `k`): whether a
/// read (`Peek`) found the value written before the round (it read ahead
/// of the `DEL`).
pub(crate) async fn race(reader: &Cache<String>, racer: Racer) -> bool {
    match racer {
        Racer::Peek => reader.peek("k").await.expect("read").is_some(),
        Racer::Batch => {
            let fill = |keys: Vec<String>| async move {
                let filled = keys.into_iter().map(|k| (k, "filled".to_owned()));
                Ok::<_, std::io::Error>(filled.collect())
            };
            drop(reader.get_many_or_fill(&["k", "other"], fill).await);
            false
        }
        Racer::Fill => {
            let fill = || async { Ok::<_, std::io::Error>("filled".to_owned()) };
            reader.get_or_fill("k", fill).await.expect("fill");
            false
        }
        Racer::Set => {
            reader.set("k", "mine".into()).await.expect("set");
            false
        }
    }
}

/// A tracking table smaller than what the caches read: the server forgets
/// keys to make room and invalidates them as it does, so an L1 never keeps
/// a key the server no longer tracks for it — an outside `DEL` of every key
/// then leaves nothing in any L1.
///
/// Fails on Redis 7.0: the server does not tell a `NOLOOP` client of the
/// keys it forgets while running that client's own command (it takes them
/// for the client's own changes), so those copies stay until their TTL.
/// Tracking without `NOLOOP` passes it, but then every write of a process
/// evicts its own copy (see the `redis` module docs, "Coherence").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "known gap: NOLOOP hides the tracking table's evictions caused by a client's own commands"]
async fn a_full_tracking_table_leaves_nothing_untracked_in_the_l1() {
    let server = RedisServer::start();
    let caches = fleet(&server.url(), &RedisConfig::default(), 3).await;
    assert_eq!(
        server.cli(&["CONFIG", "SET", "tracking-table-max-keys", "10"]),
        "OK"
    );
    let keys: Vec<String> = (0..30).map(|i| format!("k{i}")).collect();
    for key in &keys {
        caches[0].set(key, "v".into()).await.expect("set");
    }
    for cache in &caches {
        for key in &keys {
            cache.peek(key).await.expect("read");
        }
    }
    let held = |caches: &[Cache<String>]| {
        keys.iter()
            .filter(|key| caches.iter().any(|c| c.get_local(key).is_some()))
            .count()
    };
    assert!(held(&caches) > 0, "the L1s hold some keys");
    for key in &keys {
        server.cli(&["DEL", &value_key(&caches[0], key)]);
    }
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    while held(&caches) > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} keys still served after their DEL",
            held(&caches)
        );
        tick.tick().await;
    }
    no_flushes(&caches);
}

/// Deletes every key of kind `kind` of the caches' namespace whose name
/// matches `pattern` (after the namespace), as a plain client would.
fn delete_matching(
    server: &RedisServer,
    cache: &Cache<String>,
    kind: &str,
    pattern: &str,
) -> usize {
    let namespace = cache.namespace();
    let found = server.cli(&["KEYS", &format!("corral:{kind}:{namespace}:{pattern}")]);
    let names: Vec<&str> = found.lines().filter(|l| !l.is_empty()).collect();
    for name in &names {
        assert_eq!(server.cli(&["DEL", name]), "1", "{name}");
    }
    names.len()
}

/// A plain client deleting a tag's version drops the entries it guards
/// from every L1; deleting the clear version drops every entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outside_changes_of_versions_drop_what_they_guard() {
    let server = RedisServer::start();
    let caches = fleet(&server.url(), &RedisConfig::default(), 3).await;
    let heard: Vec<u64> = caches
        .iter()
        .map(|c| c.stats().backplane_messages)
        .collect();
    caches[0]
        .set("tagged", "t".into())
        .options(corral::WriteOptions::new().tags(["team"]))
        .await
        .expect("set");
    caches[0].set("plain", "p".into()).await.expect("set");
    let deadline = tokio::time::Instant::now() + DEADLINE;
    for (cache, heard) in caches.iter().zip(heard).skip(1) {
        while cache.stats().backplane_messages < heard + 2 {
            assert!(tokio::time::Instant::now() < deadline, "messages lost");
            tokio::task::yield_now().await;
        }
    }
    for cache in &caches {
        for key in ["tagged", "plain"] {
            while cache.get_local(key).is_none() {
                assert!(cache.peek(key).await.expect("read").is_some());
                assert!(tokio::time::Instant::now() < deadline, "{key} not kept");
            }
        }
    }
    assert!(delete_matching(&server, &caches[0], "t", "{*}:team") > 0);
    until_dropped(&caches, "tagged", "DEL of the tag's version").await;
    for cache in &caches {
        assert!(cache.get_local("plain").is_some(), "{:?}", cache.stats());
    }
    assert!(delete_matching(&server, &caches[0], "t", "{*}:") > 0);
    until_dropped(&caches, "plain", "DEL of the clear version").await;
    no_flushes(&caches);
}

/// Reading a version is no change: another cache reading the clear
/// version (as its first read does) leaves every other L1 as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_a_version_drops_nothing_elsewhere() {
    let server = RedisServer::start();
    let caches = fleet(&server.url(), &RedisConfig::default(), 2).await;
    hold(&caches, &["k"]).await;
    let late = l1_cache(&store(&server.url(), RedisConfig::default()).await, NAME);
    until_heard(&caches[0], &late).await;
    assert_eq!(late.peek("k").await.expect("read").as_deref(), Some("k=v"));
    late.set("other", "o".into()).await.expect("set");
    for cache in &caches {
        // A reply after any invalidation that read could have caused.
        cache.peek("barrier").await.expect("read");
        assert!(cache.get_local("k").is_some(), "{:?}", cache.stats());
        assert_eq!(cache.stats().tracking_invalidations, 0);
    }
}

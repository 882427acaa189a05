//! The batched reads' own connections ("lanes") of a standalone
//! `RedisStore`, against a real `redis-server`: batches go out on a
//! connection named `corral:reads`, opened in the background (the first
//! batch goes through the command connection) with the store's user,
//! password and database; a lane that breaks hands its batch to the
//! command connection, and a new one takes over.
//!
//! The tests run on tokio's current-thread runtime, where of reads started
//! together (`join_all`) the first two go out alone and the others queue
//! into one batch (see `batched_reads`).
#![cfg(feature = "redis")]

use std::time::Duration;

use corral::store::{Origin, Store, StoreKey};
use corral::{RedisConfig, RedisStore};
use corral_testkit::{log_tail, RedisServer};
use futures_util::future::join_all;

const NS: &str = "lanes:v1";
const TTL: Duration = Duration::from_secs(60);
const PROMPT: Duration = Duration::from_secs(5);

fn config() -> RedisConfig {
    RedisConfig::default()
        .op_timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_millis(500))
        .reconnect_max_delay(Duration::from_millis(200))
}

/// A server and a store on it.
async fn started(config: RedisConfig) -> (RedisServer, RedisStore) {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), config)
        .await
        .unwrap_or_else(|e| panic!("connect: {e}\n{}", log_tail(&server.log())));
    (server, store)
}

fn key(name: &str) -> StoreKey {
    StoreKey::new(NS, name)
}

fn bytes_of(name: &str) -> Vec<u8> {
    format!("value of <{name}>").into_bytes()
}

async fn seeded(store: &RedisStore, prefix: &str, n: usize) -> Vec<String> {
    let names: Vec<String> = (0..n).map(|i| format!("{prefix}:{i:03}")).collect();
    for name in &names {
        store
            .set(&key(name), &bytes_of(name), TTL, Origin::new(0))
            .await
            .unwrap_or_else(|e| panic!("set {name}: {e}"));
    }
    names
}

/// Reads every name at once and checks each answer is its own value.
async fn read_all(store: &RedisStore, names: &[String]) {
    let keys: Vec<StoreKey> = names.iter().map(|name| key(name)).collect();
    let reads = tokio::time::timeout(PROMPT, join_all(keys.iter().map(|k| store.get(k))))
        .await
        .expect("reads within 5 s");
    for (name, read) in names.iter().zip(reads) {
        let stored = read
            .unwrap_or_else(|e| panic!("read {name}: {e}"))
            .unwrap_or_else(|| panic!("{name} absent"));
        assert_eq!(stored.bytes, bytes_of(name), "{name}");
    }
}

/// The `CLIENT LIST` lines of the store's lanes.
fn lanes(server: &RedisServer) -> Vec<String> {
    server
        .cli(&["CLIENT", "LIST"])
        .lines()
        .filter(|line| line.contains(" name=corral:reads "))
        .map(str::to_owned)
        .collect()
}

/// Whether the lane of this `CLIENT LIST` line has served a batch (its
/// last command is the batch's `MGET`, or a `TOUCH` after it; a lane just
/// opened shows `CLIENT SETNAME`).
fn served(lane: &str) -> bool {
    matches!(field(lane, "cmd"), "mget" | "touch")
}

/// Runs `round` until the `CLIENT LIST` line of a lane passes `done` (a
/// store's first batch goes through the command connection and opens a
/// lane in the background): that line.
async fn until_a_lane<F: std::future::Future<Output = ()>>(
    server: &RedisServer,
    mut round: impl FnMut() -> F,
    done: impl Fn(&str) -> bool,
) -> String {
    let deadline = tokio::time::Instant::now() + PROMPT;
    loop {
        round().await;
        let lanes = lanes(server);
        if let Some(lane) = lanes.iter().find(|lane| done(lane)) {
            return lane.clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no lane as awaited: {lanes:?}"
        );
    }
}

/// Reads `names` at once until a batch has gone out on a lane: that lane's
/// `CLIENT LIST` line.
async fn serving_lane(server: &RedisServer, store: &RedisStore, names: &[String]) -> String {
    until_a_lane(server, || read_all(store, names), served).await
}

fn field<'a>(line: &'a str, name: &str) -> &'a str {
    line.split(' ')
        .find_map(|part| part.strip_prefix(name)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {name} in {line}"))
}

#[tokio::test]
async fn a_batch_goes_out_on_a_lane_with_the_stores_user_and_database() {
    let server = RedisServer::start();
    server.cli(&[
        "ACL",
        "SETUSER",
        "reader",
        "on",
        ">lane-secret",
        "~*",
        "&*",
        "+@all",
    ]);
    let url = format!("redis://reader:lane-secret@127.0.0.1:{}/3", server.port());
    let store = RedisStore::connect(&url, config())
        .await
        .unwrap_or_else(|e| panic!("connect: {e}\n{}", log_tail(&server.log())));
    let names = seeded(&store, "creds", 30).await;
    assert!(lanes(&server).is_empty(), "a lane before any batch");
    let lane = serving_lane(&server, &store, &names).await;
    assert_eq!(field(&lane, "user"), "reader", "{lane}");
    assert_eq!(field(&lane, "db"), "3", "{lane}");
    // Its batches read db 3, where the store wrote (checked by `read_all`).
    assert_eq!(server.cli(&["-n", "0", "DBSIZE"]), "0");
    assert!(lanes(&server).len() <= 2);
}

#[tokio::test]
async fn a_killed_lane_hands_its_batch_to_the_command_connection_and_is_replaced() {
    let (server, store) = started(config()).await;
    let names = seeded(&store, "killed", 30).await;
    let lane = serving_lane(&server, &store, &names).await;
    let id = field(&lane, "id").to_owned();
    assert_eq!(server.cli(&["CLIENT", "KILL", "ID", &id]), "1");

    // The idle lane is dead: its batch answers through the command
    // connection, every read right and none failed.
    server.reset_stats();
    read_all(&store, &names).await;
    let stats = server.command_stats();
    assert_eq!(stats.get("mget"), Some(&1), "{stats:?}");

    // A new lane takes over.
    let lane = serving_lane(&server, &store, &names).await;
    assert_ne!(field(&lane, "id"), id, "the killed lane is back?");
}

#[tokio::test]
async fn a_restarted_server_gets_new_lanes_once_the_store_reconnects() {
    let (mut server, store) = started(config()).await;
    let names = seeded(&store, "restart", 30).await;
    serving_lane(&server, &store, &names).await;

    server.restart();
    // The restarted server is empty: write again until the store's command
    // connection is back (its first calls fail while it reconnects).
    let deadline = tokio::time::Instant::now() + PROMPT;
    loop {
        let written = store
            .set(&key(&names[0]), &bytes_of(&names[0]), TTL, Origin::new(0))
            .await;
        if written.is_ok() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no reconnect: {written:?}"
        );
        tokio::task::yield_now().await;
    }
    let names = seeded(&store, "restart", 30).await;
    serving_lane(&server, &store, &names).await;
    assert!(lanes(&server).len() <= 2);
}

#[tokio::test]
async fn a_server_refusing_new_connections_leaves_batches_on_the_command_connection() {
    let (server, store) = started(config()).await;
    let names = seeded(&store, "full", 30).await;
    // Opened before the server is full: the test's own way in.
    let client = redis::Client::open(server.url()).expect("client");
    let mut admin = client
        .get_multiplexed_async_connection()
        .await
        .expect("admin connection");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxclients")
        .arg(1)
        .query_async(&mut admin)
        .await
        .expect("CONFIG SET maxclients");
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut admin)
        .await
        .expect("CONFIG RESETSTAT");
    // Each round's batch goes through the command connection, and its
    // lane, refused, is not retried for the rest (200 ms).
    for _ in 0..3 {
        read_all(&store, &names).await;
    }
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut admin)
        .await
        .expect("INFO");
    assert!(info.contains("cmdstat_mget:calls=3,"), "{info}");
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut admin)
        .await
        .expect("CLIENT LIST");
    assert!(!clients.contains("name=corral:reads"), "{clients}");

    // Once the server takes connections again, a lane opens after the
    // rest (`reconnect_max_delay`) and takes the batches.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxclients")
        .arg(1000)
        .query_async(&mut admin)
        .await
        .expect("CONFIG SET maxclients");
    serving_lane(&server, &store, &names).await;
}

#[tokio::test]
async fn a_read_of_many_keys_goes_out_on_a_lane() {
    let (server, store) = started(config()).await;
    let names = seeded(&store, "many", 20).await;
    let keys: Vec<StoreKey> = names.iter().map(|name| key(name)).collect();
    let round = || async {
        server.reset_stats();
        let found = store.get_many(&keys).await.expect("get_many");
        for (name, stored) in names.iter().zip(found) {
            let stored = stored.unwrap_or_else(|| panic!("{name} absent"));
            assert_eq!(stored.bytes, bytes_of(name), "{name}");
            assert!(stored.remaining.is_some_and(|left| left <= TTL));
        }
        // One pipeline of a PTTL and a GET per key.
        let stats = server.command_stats();
        assert_eq!(
            (stats.get("pttl"), stats.get("get")),
            (Some(&20), Some(&20)),
            "{stats:?}"
        );
    };
    // The first goes through the command connection and opens a lane; a
    // later one goes out on it.
    until_a_lane(&server, round, |lane| {
        matches!(field(lane, "cmd"), "get" | "touch")
    })
    .await;
}

#[tokio::test]
async fn a_lane_idle_longer_than_the_health_interval_is_closed_not_used() {
    let idle = Duration::from_millis(300);
    let (server, store) = started(config().health_interval(idle)).await;
    let names = seeded(&store, "idle", 30).await;
    let lane = serving_lane(&server, &store, &names).await;
    let id = field(&lane, "id").to_owned();
    // Idle for longer than the command connection goes unchecked: a lane
    // that might have died unseen is not trusted with the next batch.
    tokio::time::sleep(idle + Duration::from_millis(100)).await;
    read_all(&store, &names).await;
    let deadline = tokio::time::Instant::now() + PROMPT;
    loop {
        let now = lanes(&server);
        let ids: Vec<&str> = now.iter().map(|line| field(line, "id")).collect();
        if ids.len() == 1 && ids[0] != id {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the idle lane {id} is still there: {now:?}"
        );
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn a_batch_of_large_values_arrives_whole_in_many_reads() {
    let (server, store) = started(config()).await;
    // 24 values of 200 KiB: a 4.7 MiB reply, read off the lane in many
    // pieces, each value whole and its own.
    let names: Vec<String> = (0..24).map(|i| format!("large:{i:02}")).collect();
    let value_of = |name: &str| -> Vec<u8> {
        let mut value = format!("<{name}>").into_bytes();
        value.resize(200 * 1024, name.as_bytes()[name.len() - 1]);
        value
    };
    for name in &names {
        store
            .set(&key(name), &value_of(name), TTL, Origin::new(0))
            .await
            .expect("set");
    }
    let keys: Vec<StoreKey> = names.iter().map(|name| key(name)).collect();
    let round = || async {
        let reads = tokio::time::timeout(PROMPT, join_all(keys.iter().map(|k| store.get(k))))
            .await
            .expect("reads within 5 s");
        for (name, read) in names.iter().zip(reads) {
            let stored = read
                .unwrap_or_else(|e| panic!("read {name}: {e}"))
                .unwrap_or_else(|| panic!("{name} absent"));
            assert!(stored.bytes == value_of(name), "{name}: wrong bytes");
        }
    };
    // The first batch goes through the command connection and opens a
    // lane; the rounds end once a batch went out on it.
    until_a_lane(&server, round, served).await;
}

#[tokio::test]
async fn a_lane_that_hangs_while_opening_delays_no_batch() {
    let server = RedisServer::start();
    let proxy = corral_testkit::FaultProxy::start(server.port());
    let store = RedisStore::connect(&proxy.url(), config())
        .await
        .expect("connect");
    let names = seeded(&store, "hang", 30).await;
    // New connections through the proxy now hang: a lane being opened
    // never answers its handshake. Batches do not wait for it.
    proxy.hold_new(true);
    server.reset_stats();
    // (A batch that waited would outlast its reads' timeout: they would
    // fail, and `read_all` with them.)
    for _ in 0..4 {
        read_all(&store, &names).await;
    }
    let stats = server.command_stats();
    assert_eq!(stats.get("mget"), Some(&4), "{stats:?}");
    assert!(lanes(&server).is_empty());
    assert!(proxy.accepted() >= 2, "no lane was tried");
}

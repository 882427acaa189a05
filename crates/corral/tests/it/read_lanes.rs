//! The batched reads' own connections ("lanes") of a standalone
//! `RedisStore`, against a real `redis-server`: batches go out on a
//! connection named `corral:reads`, opened with the store's user, password
//! and database; a lane that breaks hands its batch to the command
//! connection, and a new one takes over.
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

/// The `CLIENT LIST` line of the store's one lane.
fn one_lane(server: &RedisServer) -> String {
    match <[String; 1]>::try_from(lanes(server)) {
        Ok([lane]) => lane,
        Err(lanes) => panic!("not one lane: {lanes:?}"),
    }
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
    server.reset_stats();
    read_all(&store, &names).await;
    let lane = one_lane(&server);
    assert_eq!(field(&lane, "user"), "reader", "{lane}");
    assert_eq!(field(&lane, "db"), "3", "{lane}");
    assert_eq!(field(&lane, "cmd"), "mget", "{lane}");
    // The 28 queued reads went out as one MGET (on the lane), in db 3,
    // where the store wrote them.
    let stats = server.command_stats();
    assert_eq!(stats.get("mget"), Some(&1), "{stats:?}");
    assert_eq!(server.cli(&["-n", "0", "DBSIZE"]), "0");
}

#[tokio::test]
async fn a_killed_lane_hands_its_batch_to_the_command_connection_and_is_replaced() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), config())
        .await
        .expect("connect");
    let names = seeded(&store, "killed", 30).await;
    read_all(&store, &names).await;
    let lane = one_lane(&server);
    let id = field(&lane, "id").to_owned();
    assert_eq!(server.cli(&["CLIENT", "KILL", "ID", &id]), "1");
    assert!(lanes(&server).is_empty());

    // The pooled lane is dead: its batch answers through the command
    // connection, every read right and none failed.
    server.reset_stats();
    read_all(&store, &names).await;
    let stats = server.command_stats();
    assert_eq!(stats.get("mget"), Some(&1), "{stats:?}");

    // The next batch opens a new lane.
    read_all(&store, &names).await;
    let lane = one_lane(&server);
    assert_ne!(field(&lane, "id"), id, "the killed lane is back?");
    assert_eq!(field(&lane, "cmd"), "mget", "{lane}");
}

#[tokio::test]
async fn a_restarted_server_gets_new_lanes_once_the_store_reconnects() {
    let mut server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), config())
        .await
        .expect("connect");
    let names = seeded(&store, "restart", 30).await;
    read_all(&store, &names).await;
    assert_eq!(lanes(&server).len(), 1);

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
    // The restarted server holds new writes, which the store reads with
    // their PTTLs: more than one batch, up to two at once, each on a lane.
    let names = seeded(&store, "restart", 30).await;
    read_all(&store, &names).await;
    let lanes = lanes(&server);
    assert!(
        (1..=2).contains(&lanes.len()),
        "not one or two lanes on the new server: {lanes:?}"
    );
}

#[tokio::test]
async fn a_server_refusing_new_connections_leaves_batches_on_the_command_connection() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), config())
        .await
        .expect("connect");
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
    read_all(&store, &names).await;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut admin)
        .await
        .expect("INFO");
    assert!(info.contains("cmdstat_mget:calls=1,"), "{info}");
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut admin)
        .await
        .expect("CLIENT LIST");
    assert!(!clients.contains("name=corral:reads"), "{clients}");

    // Once the server takes connections again, a batch after the rest
    // (`reconnect_max_delay`) opens a lane.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxclients")
        .arg(1000)
        .query_async(&mut admin)
        .await
        .expect("CONFIG SET maxclients");
    let deadline = tokio::time::Instant::now() + PROMPT;
    while lanes(&server).is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "no lane opened");
        read_all(&store, &names).await;
    }
}

#[tokio::test]
async fn a_read_of_many_keys_goes_out_on_a_lane() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), config())
        .await
        .expect("connect");
    let names = seeded(&store, "many", 20).await;
    let keys: Vec<StoreKey> = names.iter().map(|name| key(name)).collect();
    server.reset_stats();
    let found = store.get_many(&keys).await.expect("get_many");
    for (name, stored) in names.iter().zip(found) {
        let stored = stored.unwrap_or_else(|| panic!("{name} absent"));
        assert_eq!(stored.bytes, bytes_of(name), "{name}");
        assert!(stored.remaining.is_some_and(|left| left <= TTL));
    }
    // One pipeline of a PTTL and a GET per key, on the store's lane.
    let stats = server.command_stats();
    assert_eq!(
        (stats.get("pttl"), stats.get("get")),
        (Some(&20), Some(&20)),
        "{stats:?}"
    );
    assert_eq!(lanes(&server).len(), 1);
}

#[tokio::test]
async fn a_lane_idle_longer_than_the_health_interval_is_closed_not_used() {
    let server = RedisServer::start();
    let idle = Duration::from_millis(300);
    let store = RedisStore::connect(&server.url(), config().health_interval(idle))
        .await
        .expect("connect");
    let names = seeded(&store, "idle", 30).await;
    read_all(&store, &names).await;
    let lane = one_lane(&server);
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
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), config())
        .await
        .expect("connect");
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
    server.reset_stats();
    let keys: Vec<StoreKey> = names.iter().map(|name| key(name)).collect();
    let reads = tokio::time::timeout(PROMPT, join_all(keys.iter().map(|k| store.get(k))))
        .await
        .expect("reads within 5 s");
    for (name, read) in names.iter().zip(reads) {
        let stored = read
            .unwrap_or_else(|e| panic!("read {name}: {e}"))
            .unwrap_or_else(|| panic!("{name} absent"));
        assert!(stored.bytes == value_of(name), "{name}: wrong bytes");
    }
    let stats = server.command_stats();
    assert_eq!(stats.get("mget"), Some(&1), "{stats:?}");
    let lane = one_lane(&server);
    assert_eq!(field(&lane, "cmd"), "mget", "{lane}");
}

//! How `RedisStore` reads: a write names its value's expiry on the
//! server's clock in its generation, so every read of it, by any process,
//! is a plain `GET`; bytes that name none (written by something else) are
//! read with their `PTTL`. On a real redis-server.

use std::time::Duration;

use corral::store::{Origin, Store, StoreKey};
use corral::{RedisConfig, RedisStore};
use corral_testkit::RedisServer;

const ORIGIN: Origin = Origin::new(1);

async fn store(server: &RedisServer, config: RedisConfig) -> RedisStore {
    RedisStore::connect(&server.url(), config)
        .await
        .expect("connect")
}

fn count(server: &RedisServer, command: &str) -> u64 {
    server.command_stats().get(command).copied().unwrap_or(0)
}

#[tokio::test]
async fn a_write_read_again_is_a_plain_get_until_it_changes() {
    let server = RedisServer::start();
    // Two processes' stores: the writer knows the expiry of what it wrote,
    // the reader finds it named in the value.
    let writer = store(&server, RedisConfig::default()).await;
    let reader = store(&server, RedisConfig::default()).await;
    let key = StoreKey::new("reads:v1", "k");
    writer
        .set(&key, b"first", Duration::from_secs(60), ORIGIN)
        .await
        .expect("set");

    server.reset_stats();
    let own = writer.get(&key).await.expect("read").expect("present");
    assert_eq!(own.bytes, b"first");
    let left = own.remaining.expect("ttl");
    assert!(
        left <= Duration::from_secs(60) && left > Duration::from_secs(55),
        "{left:?}"
    );
    assert_eq!(
        (count(&server, "pttl"), count(&server, "get")),
        (0, 1),
        "its own write: a plain GET"
    );

    server.reset_stats();
    let first = reader.get(&key).await.expect("read").expect("present");
    assert_eq!(first.generation, own.generation);
    let left = first.remaining.expect("ttl");
    assert!(
        left <= Duration::from_secs(60) && left > Duration::from_secs(55),
        "the named expiry, on the reader's clock: {left:?}"
    );
    assert_eq!(
        (count(&server, "pttl"), count(&server, "get")),
        (0, 1),
        "another process's write: a plain GET too"
    );
    for _ in 0..5 {
        let again = reader.get(&key).await.expect("read").expect("present");
        assert_eq!(again.bytes, b"first");
        assert_eq!(again.generation, first.generation);
        let (left, before) = (again.remaining.expect("ttl"), first.remaining.expect("ttl"));
        assert!(left <= before && left > Duration::from_secs(55), "{left:?}");
    }
    assert_eq!(
        (count(&server, "pttl"), count(&server, "get")),
        (0, 6),
        "read again: plain GETs"
    );

    // Another write: its generation is new and names its own expiry.
    writer
        .set(&key, b"second", Duration::from_secs(5), ORIGIN)
        .await
        .expect("set");
    server.reset_stats();
    let second = reader.get(&key).await.expect("read").expect("present");
    assert_eq!(second.bytes, b"second");
    assert_ne!(second.generation, first.generation);
    let left = second.remaining.expect("ttl");
    assert!(
        left <= Duration::from_secs(5) && left > Duration::from_secs(4),
        "the new write's TTL: {left:?}"
    );
    let _ = reader.get(&key).await.expect("read");
    let own = writer.get(&key).await.expect("read").expect("present");
    assert_eq!(own.generation, second.generation);
    assert!(own.remaining.expect("ttl") <= Duration::from_secs(5));
    assert_eq!(count(&server, "pttl"), 0, "plain GETs only");

    writer.invalidate(&key, ORIGIN).await.expect("invalidate");
    assert!(reader.get(&key).await.expect("read").is_none());
}

#[tokio::test]
async fn without_read_memory_a_named_expiry_still_spares_the_pttl() {
    let server = RedisServer::start();
    let store = store(&server, RedisConfig::default().read_memory(0)).await;
    let key = StoreKey::new("reads:v1", "k");
    store
        .set(&key, b"v", Duration::from_secs(60), ORIGIN)
        .await
        .expect("set");
    server.reset_stats();
    for _ in 0..3 {
        assert!(store.get(&key).await.expect("read").is_some());
    }
    assert_eq!((count(&server, "pttl"), count(&server, "get")), (0, 3));
}

#[tokio::test]
async fn bytes_written_by_something_else_are_always_read_with_their_pttl() {
    let server = RedisServer::start();
    let store = store(&server, RedisConfig::default()).await;
    let key = StoreKey::new("reads:v1", "foreign");
    let name = RedisStore::keys_of(&key).value;
    server.cli(&["SET", &name, "not a frame", "PX", "60000"]);
    server.reset_stats();
    for _ in 0..3 {
        let read = store.get(&key).await.expect("read").expect("present");
        assert_eq!(read.generation, None);
    }
    assert_eq!(
        (count(&server, "pttl"), count(&server, "get")),
        (3, 6),
        "no generation, nothing remembered: each read a plain GET, then \
         PTTL + GET"
    );
}

//! A value type the codec cannot round-trip fails loudly on its first
//! write, naming the type and the codec, with one ERROR; a service that
//! then picks a self-describing codec gets its L2 back.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use corral::codec::Json;
use corral::{Cache, Error, RedisConfig, RedisStore};
use corral_testkit::RedisServer;
use serde::{Deserialize, Serialize};

/// A typical API type: optional fields left out of the JSON it is also
/// served as. postcard cannot carry `skip_serializing_if`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct User {
    id: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    email: Option<String>,
    name: String,
}

fn user(id: u64) -> User {
    User {
        id,
        email: None,
        name: format!("user {id}"),
    }
}

/// One instance of the service: its cache of users on the shared Redis.
async fn instance(server: &RedisServer, json: bool) -> Cache<User> {
    let store = RedisStore::connect(&server.url(), RedisConfig::default())
        .await
        .expect("connect");
    let builder = Cache::<User>::builder(if json { "users-json" } else { "users" })
        .store(store)
        .ttl(Duration::from_secs(60));
    let builder = if json { builder.codec(Json) } else { builder };
    builder.build().expect("config")
}

/// The service's handler: `GET /users/{id}`, read through the cache.
async fn get_user(cache: &Cache<User>, id: u64, loads: &Arc<AtomicUsize>) -> User {
    let loads = Arc::clone(loads);
    cache
        .get_or_fill(&format!("user:{id}"), move || async move {
            loads.fetch_add(1, SeqCst);
            Ok::<_, std::io::Error>(user(id))
        })
        .await
        .expect("get user")
}

#[tokio::test(flavor = "current_thread")]
async fn a_type_postcard_cannot_carry_is_refused_on_the_first_write_and_json_brings_the_l2_back() {
    let server = RedisServer::start();
    let (captured, _default) = corral_testkit::capture(tracing::Level::ERROR);

    // With the default codec: the first write is refused, naming the type
    // and the codec, with one ERROR however many writes follow.
    let (a, b) = (
        instance(&server, false).await,
        instance(&server, false).await,
    );
    let refused = a.set("user:1", user(1)).await;
    let Err(Error::Encode { message }) = refused else {
        panic!("the write was not refused: {refused:?}");
    };
    assert!(message.contains("User"), "{message}");
    assert!(message.contains("postcard"), "{message}");
    assert!(message.contains("Json"), "says what to do: {message}");
    assert!(
        a.set("user:1", user(1)).await.is_err(),
        "refused every time"
    );
    // Fills still answer, uncached: each instance loads every time.
    let loads = Arc::new(AtomicUsize::new(0));
    for _ in 0..3 {
        for cache in [&a, &b] {
            assert_eq!(get_user(cache, 2, &loads).await, user(2));
        }
    }
    assert_eq!(loads.load(SeqCst), 6, "nothing reached the L2");
    let errors = captured.text();
    let count = errors.matches("do not round-trip").count();
    assert_eq!(count, 2, "one ERROR per cache instance:\n{errors}");

    // The same service with the JSON codec: one load, then L2 hits in the
    // other instance.
    let (a, b) = (instance(&server, true).await, instance(&server, true).await);
    a.set("user:1", user(1)).await.expect("set");
    let loads = Arc::new(AtomicUsize::new(0));
    for _ in 0..3 {
        for cache in [&a, &b] {
            assert_eq!(get_user(cache, 2, &loads).await, user(2));
        }
    }
    assert_eq!(loads.load(SeqCst), 1, "filled once, then read from the L2");
    assert!(b.stats().l2_hits >= 1, "{:?}", b.stats());
    assert_eq!(b.stats().decode_failures, 0);
    assert_eq!(b.peek("user:1").await.expect("read"), Some(user(1)));
}

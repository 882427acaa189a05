//! Values encrypted in shared stores (feature `encryption`): only
//! ciphertext reaches the store, bytes bound to another key, cache or
//! master key fail closed (a counted miss, then refilled), and master keys
//! rotate.

use std::collections::HashMap;
use std::time::Duration;

use corral::store::MemoryStore;
use corral::store::StoreKey;
use corral::{Cache, Encryption};
use corral_testkit::RedisServer;

const SECRET: &str = "the plaintext nobody may read in the store";
const OLD: [u8; 32] = [0x11; 32];
const NEW: [u8; 32] = [0x22; 32];

#[derive(Debug)]
struct Never;

impl std::fmt::Display for Never {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the source is down")
    }
}

impl std::error::Error for Never {}

fn encrypted(name: &str, store: &MemoryStore, encryption: Encryption) -> Cache<String> {
    Cache::<String>::builder(name)
        .ttl(Duration::from_secs(60))
        .store(store.clone())
        .encryption(encryption)
        .build()
        .expect("config")
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

/// Sealed bytes: the format byte, not corral's plain envelope, no
/// plaintext.
fn assert_sealed(bytes: &[u8]) {
    assert_eq!(bytes.first(), Some(&0xE1), "sealed format byte");
    assert!(
        !contains(bytes, SECRET.as_bytes()),
        "plaintext in the store"
    );
    assert!(!contains(bytes, b"CRL\0"), "a plain envelope in the store");
}

async fn fill_with(cache: &Cache<String>, key: &str, value: &str) -> String {
    let value = value.to_owned();
    cache
        .get_or_fill(key, move || async move { Ok::<_, Never>(value) })
        .await
        .expect("fill")
}

#[tokio::test]
async fn values_round_trip_and_the_store_holds_only_ciphertext() {
    let store = MemoryStore::new();
    let cache = encrypted("enc", &store, Encryption::new(NEW));
    cache.set("set", SECRET.to_owned()).await.expect("set");
    assert_eq!(fill_with(&cache, "filled", SECRET).await, SECRET);
    let batch = cache
        .get_many_or_fill(&["batch"], |keys: Vec<String>| async move {
            Ok::<_, Never>(
                keys.into_iter()
                    .map(|k| (k, SECRET.to_owned()))
                    .collect::<HashMap<_, _>>(),
            )
        })
        .await;
    assert_eq!(
        batch.get("batch").map(|r| r.as_ref().ok()),
        Some(Some(&SECRET.to_owned()))
    );
    for key in ["set", "filled", "batch"] {
        let raw = store
            .raw(&StoreKey::new(cache.namespace(), key))
            .expect("stored");
        assert_sealed(&raw);
        assert_eq!(cache.peek(key).await.expect("get").as_deref(), Some(SECRET));
    }
    // Another instance with the same master key (another process) reads
    // them; one without encryption reads nothing it could serve.
    let other = encrypted("enc", &store, Encryption::new(NEW));
    assert_eq!(
        other.peek("set").await.expect("get").as_deref(),
        Some(SECRET)
    );
    let plain = Cache::<String>::builder("enc")
        .store(store.clone())
        .build()
        .expect("config");
    assert_eq!(plain.peek("set").await.expect("get"), None);
    assert_eq!(plain.stats().decode_failures, 1);
    let stats = cache.stats();
    assert_eq!(
        (stats.decrypt_failures, stats.decode_failures),
        (0, 0),
        "{stats:?}"
    );
}

#[tokio::test]
async fn an_l1_keeps_decoded_values_and_the_store_ciphertext() {
    let store = MemoryStore::new();
    let cache = Cache::<String>::builder("enc-l1")
        .store(store.clone())
        .l1(true)
        .encryption(Encryption::new(NEW))
        .build()
        .expect("config");
    assert_eq!(fill_with(&cache, "k", SECRET).await, SECRET);
    assert_eq!(cache.peek("k").await.expect("get").as_deref(), Some(SECRET));
    assert_eq!(cache.local_len(), 1);
    assert_sealed(
        &store
            .raw(&StoreKey::new(cache.namespace(), "k"))
            .expect("stored"),
    );
}

#[tokio::test]
async fn ciphertext_copied_to_another_key_or_cache_is_a_counted_miss_then_refilled() {
    let store = MemoryStore::new();
    let cache = encrypted("enc", &store, Encryption::new(NEW));
    cache.set("a", SECRET.to_owned()).await.expect("set");
    let sealed = store
        .raw(&StoreKey::new(cache.namespace(), "a"))
        .expect("stored");
    store.put_raw(
        &StoreKey::new(cache.namespace(), "b"),
        sealed.clone(),
        Duration::from_secs(60),
    );
    assert_eq!(cache.peek("b").await.expect("get"), None);
    assert_eq!(cache.stats().decrypt_failures, 1);
    assert_eq!(fill_with(&cache, "b", "refilled").await, "refilled");
    let stats = cache.stats();
    assert_eq!((stats.fills, stats.decrypt_failures), (1, 2), "{stats:?}");
    assert_eq!(
        cache.peek("b").await.expect("get").as_deref(),
        Some("refilled")
    );
    assert_sealed(
        &store
            .raw(&StoreKey::new(cache.namespace(), "b"))
            .expect("stored"),
    );

    // The same key in another cache with the same master key.
    let other = encrypted("enc-other", &store, Encryption::new(NEW));
    store.put_raw(
        &StoreKey::new(other.namespace(), "a"),
        sealed,
        Duration::from_secs(60),
    );
    assert_eq!(other.peek("a").await.expect("get"), None);
    assert_eq!(other.stats().decrypt_failures, 1);
    let stats = cache.stats();
    assert_eq!(stats.decode_failures, 0, "{stats:?}");
}

#[tokio::test]
async fn a_wrong_master_key_or_plaintext_fails_closed() {
    let store = MemoryStore::new();
    let writer = encrypted("enc", &store, Encryption::new(OLD));
    writer.set("k", SECRET.to_owned()).await.expect("set");
    let reader = encrypted("enc", &store, Encryption::new(NEW));
    assert_eq!(reader.peek("k").await.expect("get"), None);
    assert_eq!(reader.stats().decrypt_failures, 1);
    // The next fill overwrites it, under the reader's key.
    assert_eq!(fill_with(&reader, "k", "mine").await, "mine");
    // The fill's leader read the bytes once more before it filled.
    assert_eq!(reader.stats().decrypt_failures, 2);
    assert_eq!(
        reader.peek("k").await.expect("get").as_deref(),
        Some("mine")
    );
    assert_eq!(writer.peek("k").await.expect("get"), None);
    assert_eq!(writer.stats().decrypt_failures, 1);

    // A plain envelope (written without encryption) is never served.
    let plain = Cache::<String>::builder("enc")
        .store(store.clone())
        .build()
        .expect("config");
    plain.set("p", SECRET.to_owned()).await.expect("set");
    assert_eq!(reader.peek("p").await.expect("get"), None);
    assert_eq!(reader.stats().decrypt_failures, 3);
}

#[tokio::test]
async fn rotation_reads_old_values_and_writes_under_the_new_key() {
    let store = MemoryStore::new();
    let old = encrypted("rot", &store, Encryption::new(OLD));
    old.set("before", "old value".to_owned())
        .await
        .expect("set");

    let rotated = encrypted("rot", &store, Encryption::new(NEW).previous_key(OLD));
    assert_eq!(
        rotated.peek("before").await.expect("get").as_deref(),
        Some("old value")
    );
    rotated
        .set("after", "new value".to_owned())
        .await
        .expect("set");
    assert_eq!(fill_with(&rotated, "filled", "new fill").await, "new fill");
    assert_eq!(rotated.stats().decrypt_failures, 0);

    // New writes use the new key: the old key alone cannot read them, the
    // new key alone can.
    let new_only = encrypted("rot", &store, Encryption::new(NEW));
    for (key, value) in [("after", "new value"), ("filled", "new fill")] {
        assert_eq!(old.peek(key).await.expect("get"), None, "{key}");
        assert_eq!(
            new_only.peek(key).await.expect("get").as_deref(),
            Some(value),
            "{key}"
        );
    }
    assert_eq!(old.stats().decrypt_failures, 2);
    assert_eq!(new_only.peek("before").await.expect("get"), None);
    assert_eq!(new_only.stats().decrypt_failures, 1);
}

#[tokio::test]
async fn master_keys_of_the_wrong_length_are_refused() {
    let error = Encryption::from_bytes(&[0x5A; 16]).expect_err("short key");
    assert!(error.to_string().contains("32 bytes"), "{error}");
    let encryption = Encryption::from_bytes(&NEW)
        .and_then(|e| e.previous_key_from_bytes(&OLD))
        .expect("32-byte keys");
    assert_eq!(format!("{encryption:?}"), "Encryption { keys: 2 }");
    let mut too_many = Encryption::new(NEW);
    for i in 0..9u8 {
        too_many = too_many.previous_key([i; 32]);
    }
    let built = Cache::<String>::builder("enc")
        .store(MemoryStore::new())
        .encryption(too_many)
        .build();
    assert!(built.is_err());
}

/// The value key of `key` in Redis (see `src/redis/keys.rs`).
fn value_key(namespace: &str, key: &str) -> String {
    corral::RedisStore::keys_of(&corral::store::StoreKey::new(namespace, key)).value
}

/// The sealed bytes inside a Redis value's frame (tag, token length,
/// token).
fn unframe(framed: &[u8]) -> &[u8] {
    assert_eq!(framed.first(), Some(&0xC0), "framed");
    &framed[2 + usize::from(framed[1])..]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_redis_only_ciphertext_is_stored_and_copies_fail_closed() {
    let server = RedisServer::start();
    let url = server.url();
    let connect = || corral::RedisStore::connect(&url, corral::RedisConfig::default());
    let build = |store: corral::RedisStore, l1: bool| {
        Cache::<String>::builder("enc-redis")
            .ttl(Duration::from_secs(60))
            .store(store)
            .l1(l1)
            .encryption(Encryption::new(NEW).previous_key(OLD))
            .build()
            .expect("config")
    };
    let cache = build(connect().await.expect("connect"), false);
    let reader = build(connect().await.expect("connect"), true);
    cache.set("set", SECRET.to_owned()).await.expect("set");
    assert_eq!(fill_with(&cache, "filled", SECRET).await, SECRET);

    let client = redis::Client::open(server.url()).expect("client");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connection");
    for key in ["set", "filled"] {
        let framed: Vec<u8> = redis::cmd("GET")
            .arg(value_key(cache.namespace(), key))
            .query_async(&mut conn)
            .await
            .expect("GET");
        assert_sealed(unframe(&framed));
        assert_eq!(
            reader.peek(key).await.expect("get").as_deref(),
            Some(SECRET)
        );
    }
    let copied: Vec<u8> = redis::cmd("GET")
        .arg(value_key(cache.namespace(), "set"))
        .query_async(&mut conn)
        .await
        .expect("GET");
    let () = redis::cmd("SET")
        .arg(value_key(cache.namespace(), "copy"))
        .arg(copied.as_slice())
        .arg("EX")
        .arg(60)
        .query_async(&mut conn)
        .await
        .expect("SET");
    assert_eq!(cache.peek("copy").await.expect("get"), None);
    assert_eq!(cache.stats().decrypt_failures, 1);
    assert_eq!(fill_with(&cache, "copy", "refilled").await, "refilled");
    assert_eq!(
        reader.peek("copy").await.expect("get").as_deref(),
        Some("refilled")
    );
    let stats = cache.stats();
    assert_eq!((stats.fills, stats.decode_failures), (2, 0), "{stats:?}");
    assert_eq!(reader.stats().decrypt_failures, 0, "{:?}", reader.stats());
}

//! Values compressed in the shared store (feature `compression`), against
//! real servers: caches with and without compression (and with the other
//! algorithm) read each other's values; forged, truncated and oversized
//! frames are counted misses, then refilled; memcached stores a value
//! that compresses under its item limit.

use std::time::Duration;

use corral::store::{Origin, Store, StoreKey};
use corral::{Cache, Compression, RedisConfig, RedisStore};
use corral_testkit::RedisServer;

/// Offset of the flags in the envelope header, of the value length, and
/// the header's length (see `src/data/entry.rs`).
const FLAGS: usize = 6;
const LEN: usize = 36;
const HEADER: usize = 40;
/// The envelope's "compressed" flag.
const COMPRESSED: u16 = 8;

#[derive(Debug)]
struct Down;

impl std::fmt::Display for Down {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the source is down")
    }
}

impl std::error::Error for Down {}

/// JSON orders of about `len` bytes, with realistic field names and
/// numbers that vary.
fn orders(len: usize) -> String {
    let mut out = String::from("[");
    let mut i = 0u64;
    while out.len() < len {
        i += 1;
        out.push_str(&format!(
            r#"{{"order_id":{},"customer_id":{},"status":"{}","currency":"EUR","total_cents":{},"created_at":"2024-05-{:02}T{:02}:{:02}:00Z","lines":[{{"sku":"SKU-{:05}","quantity":{},"unit_price_cents":{}}}]}},"#,
            100_000 + i * 7919 % 90_000,
            i * 31 % 5000,
            ["shipped", "pending", "delivered", "refunded"][(i % 4) as usize],
            i * 7793 % 100_000,
            i % 28 + 1,
            i % 24,
            i * 7 % 60,
            i * 104_729 % 100_000,
            i % 5 + 1,
            i * 613 % 10_000,
        ));
    }
    out.pop();
    out.push(']');
    out
}

async fn redis(server: &RedisServer) -> RedisStore {
    RedisStore::connect(&server.url(), RedisConfig::default())
        .await
        .expect("connect")
}

/// A cache named `name` on `store`, without an L1 (every read asks the
/// store), compressing with `compression`.
fn cache(name: &str, store: &RedisStore, compression: Compression) -> Cache<String> {
    Cache::<String>::builder(name)
        .ttl(Duration::from_secs(60))
        .store(store.clone())
        .l1(false)
        .compression(compression)
        .build()
        .expect("config")
}

/// The envelope stored for `key` of `cache`.
async fn stored(store: &RedisStore, cache: &Cache<String>, key: &str) -> Vec<u8> {
    store
        .get(&StoreKey::new(cache.namespace(), key))
        .await
        .expect("get")
        .expect("stored")
        .bytes
}

fn flags(envelope: &[u8]) -> u16 {
    u16::from_le_bytes([envelope[FLAGS], envelope[FLAGS + 1]])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caches_with_and_without_compression_read_each_others_values() {
    let server = RedisServer::start();
    let value = orders(10_000);
    let settings = [
        ("none", Compression::none()),
        ("lz4", Compression::lz4()),
        ("zstd", Compression::zstd(3)),
    ];
    let mut caches = Vec::new();
    for (label, compression) in settings {
        // One store (connection) each, as separate processes have.
        let store = redis(&server).await;
        caches.push((label, cache("mixed", &store, compression), store));
    }
    let mut sizes = Vec::new();
    for (label, writer, store) in &caches {
        let key = format!("written-by-{label}");
        writer.set(&key, value.clone()).await.expect("set");
        let envelope = stored(store, writer, &key).await;
        assert_eq!(
            flags(&envelope) & COMPRESSED != 0,
            *label != "none",
            "{label}"
        );
        sizes.push((*label, envelope.len()));
        for (reader_label, reader, _) in &caches {
            let read = reader
                .get_or_fill(&key, || async { Err::<String, _>(Down) })
                .await;
            assert_eq!(
                read.as_deref().ok(),
                Some(value.as_str()),
                "{reader_label} reading what {label} wrote"
            );
        }
    }
    for (label, reader, _) in &caches {
        let stats = reader.stats();
        assert_eq!(
            (stats.fills, stats.decode_failures),
            (0, 0),
            "{label}: {stats:?}"
        );
        assert_eq!(stats.l2_hits, 3, "{label}: {stats:?}");
    }
    eprintln!(
        "stored bytes of a {} byte JSON value: {sizes:?}",
        value.len()
    );
    assert!(
        sizes[1].1 < sizes[0].1 / 2 && sizes[2].1 < sizes[1].1,
        "{sizes:?}"
    );
    let writer = caches[2].1.stats();
    assert_eq!(writer.compressed_values, 1, "{writer:?}");
    assert_eq!(writer.compression_bytes_before, value.len() as u64 + 2);
    assert!(
        writer.compression_ratio().is_some_and(|ratio| ratio > 4.0),
        "{writer:?}"
    );
}

/// `len` random bytes: nothing compresses them.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..len).map(|_| rng.u8(..)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_and_incompressible_values_are_stored_as_they_are() {
    let server = RedisServer::start();
    let store = redis(&server).await;
    let cache = Cache::<Vec<u8>>::builder("plain")
        .store(store.clone())
        .l1(false)
        .compression(Compression::zstd(3).min_bytes(2048))
        .build()
        .expect("config");
    for (key, value) in [
        ("small", orders(1000).into_bytes()),
        ("noise", noise(8192, 42)),
    ] {
        cache.set(key, value.clone()).await.expect("set");
        let envelope = store
            .get(&StoreKey::new(cache.namespace(), key))
            .await
            .expect("get")
            .expect("stored")
            .bytes;
        assert_eq!(flags(&envelope) & COMPRESSED, 0, "{key}");
        assert_eq!(cache.peek(key).await.expect("peek"), Some(value));
    }
    let stats = cache.stats();
    assert_eq!(
        (stats.compressed_values, stats.compression_skipped),
        (0, 1),
        "the small value is under the threshold, the noise does not shrink by an eighth: {stats:?}"
    );
    assert_eq!(stats.compression_ratio(), None);
}

/// `envelope` with its value bytes replaced by `body` (its length too).
fn with_body(envelope: &[u8], body: &[u8]) -> Vec<u8> {
    let mut out = envelope[..HEADER].to_vec();
    out[LEN..LEN + 4].copy_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// `frame` with the decompressed length in its prefix set to `len`.
fn claiming(frame: &[u8], len: u32) -> Vec<u8> {
    let mut out = frame.to_vec();
    out[1..5].copy_from_slice(&len.to_le_bytes());
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_truncated_and_oversized_frames_are_counted_misses_then_refilled() {
    let server = RedisServer::start();
    let store = redis(&server).await;
    const LIMIT: usize = 1 << 20;
    let reader = Cache::<String>::builder("forged")
        .ttl(Duration::from_secs(60))
        .store(store.clone())
        .l1(false)
        .max_value_bytes(LIMIT)
        .build()
        .expect("config");
    // A writer with a larger limit: its 4 MiB value compresses to a few
    // KB, and unpacks past the reader's limit.
    let writer = Cache::<String>::builder("forged")
        .store(store.clone())
        .l1(false)
        .max_value_bytes(8 << 20)
        .compression(Compression::zstd(3))
        .build()
        .expect("config");
    let json = orders(20_000);
    writer.set("json", json.clone()).await.expect("set");
    writer.set("bomb", "a".repeat(4 << 20)).await.expect("set");
    let valid = stored(&store, &writer, "json").await;
    let bomb = stored(&store, &writer, "bomb").await;
    assert!(bomb.len() < 64 << 10, "a bomb of {} bytes", bomb.len());
    let (frame, bomb_frame) = (&valid[HEADER..], &bomb[HEADER..]);
    let json_len = json.len() as u32 + 3; // postcard: a 3-byte varint length
    let forged = [
        (
            "truncated frame",
            with_body(&valid, &frame[..frame.len() / 2]),
        ),
        ("prefix only", with_body(&valid, &frame[..5])),
        ("cut in the prefix", with_body(&valid, &frame[..3])),
        (
            "length too long",
            with_body(&valid, &claiming(frame, json_len + 1)),
        ),
        (
            "length too short",
            with_body(&valid, &claiming(frame, json_len - 1)),
        ),
        (
            "length past the limit",
            with_body(&valid, &claiming(frame, u32::MAX)),
        ),
        (
            "unknown algorithm",
            with_body(&valid, &[[7].as_slice(), &frame[1..]].concat()),
        ),
        ("altered bytes", {
            let mut altered = frame.to_vec();
            let middle = altered.len() / 2;
            altered[middle] ^= 0x5a;
            with_body(&valid, &altered)
        }),
        ("bomb past the limit", bomb.clone()),
        (
            "bomb claiming 1 KiB",
            with_body(&bomb, &claiming(bomb_frame, 1024)),
        ),
    ];
    for (at, (what, bytes)) in forged.iter().enumerate() {
        let key = format!("forged-{at}");
        store
            .set(
                &StoreKey::new(reader.namespace(), &key),
                bytes,
                Duration::from_secs(60),
                Origin::new(1),
            )
            .await
            .expect("write forged bytes");
        let before = reader.stats().decode_failures;
        assert_eq!(reader.peek(&key).await.expect("peek"), None, "{what}");
        assert_eq!(
            reader.stats().decode_failures,
            before + 1,
            "{what}: counted once"
        );
        let refilled = reader
            .get_or_fill(&key, || async { Ok::<_, Down>("refilled".to_owned()) })
            .await
            .expect("fill");
        assert_eq!(refilled, "refilled", "{what}");
        assert_eq!(
            reader.peek(&key).await.expect("peek").as_deref(),
            Some("refilled")
        );
    }
    // The valid frame reads whole, and the bomb only where the limit allows it.
    assert_eq!(reader.peek("json").await.expect("peek"), Some(json));
    assert_eq!(
        writer.peek("bomb").await.expect("peek").map(|v| v.len()),
        Some(4 << 20)
    );
    let stats = reader.stats();
    assert_eq!(stats.fills, forged.len() as u64, "{stats:?}");
}

#[cfg(feature = "encryption")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_are_compressed_before_they_are_sealed() {
    let server = RedisServer::start();
    let store = redis(&server).await;
    let build = |compression| {
        Cache::<String>::builder("sealed")
            .store(store.clone())
            .l1(false)
            .encryption(corral::Encryption::new([3; 32]))
            .compression(compression)
            .build()
            .expect("config")
    };
    let (plain, compressed) = (build(Compression::none()), build(Compression::lz4()));
    let value = orders(10_000);
    plain.set("plain", value.clone()).await.expect("set");
    compressed
        .set("compressed", value.clone())
        .await
        .expect("set");
    let sealed_plain = stored(&store, &plain, "plain").await;
    let sealed_compressed = stored(&store, &compressed, "compressed").await;
    assert_eq!(sealed_compressed.first(), Some(&0xE1), "sealed");
    assert!(
        sealed_compressed.len() < sealed_plain.len() / 2,
        "{} sealed compressed, {} sealed plain",
        sealed_compressed.len(),
        sealed_plain.len()
    );
    for key in ["plain", "compressed"] {
        for cache in [&plain, &compressed] {
            assert_eq!(cache.peek(key).await.expect("peek").as_ref(), Some(&value));
        }
    }
}

#[cfg(feature = "memcached")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memcached_stores_and_serves_a_3_mib_value_that_compresses_under_its_item_limit() {
    use corral::{Error, MemcachedConfig, MemcachedStore};
    let server = corral_testkit::MemcachedServer::start();
    let addr = server.addr();
    let connect =
        || MemcachedStore::connect(std::slice::from_ref(&addr), MemcachedConfig::default());
    let writer_store = connect().await.expect("connect");
    let writer = Cache::<String>::builder("big")
        .store(writer_store.clone())
        .compression(Compression::zstd(3))
        .build()
        .expect("config");
    let reader = Cache::<String>::builder("big")
        .store(connect().await.expect("connect"))
        .build()
        .expect("config");
    let value = orders(3 << 20);
    writer
        .set("orders", value.clone())
        .await
        .expect("a 3 MiB value that compresses fits");
    let item = writer_store
        .get(&StoreKey::new(writer.namespace(), "orders"))
        .await
        .expect("get")
        .expect("stored")
        .bytes;
    eprintln!(
        "{} bytes of JSON stored in {} bytes",
        value.len(),
        item.len()
    );
    assert!(item.len() < 1 << 20, "{}", item.len());
    assert_eq!(reader.peek("orders").await.expect("peek"), Some(value));
    // What does not compress under the limit is refused as before.
    let blobs = Cache::<Vec<u8>>::builder("blobs")
        .store(writer_store)
        .compression(Compression::zstd(3))
        .build()
        .expect("config");
    let error = blobs
        .set("noise", noise(3 << 20, 9))
        .await
        .expect_err("too big");
    let Error::Store(store_error) = &error else {
        panic!("not a store error: {error:?}");
    };
    assert!(
        store_error.to_string().contains("item size limit"),
        "{store_error}"
    );
    assert_eq!(blobs.peek("noise").await.expect("peek"), None);
}

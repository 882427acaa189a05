//! An L2 hit of `RedisStore` against a bare redis-rs `GET`, side by side in
//! one run: `cargo bench -p corral-cache --bench l2_hit`.
//!
//! It starts its own `redis-server` (the test fixture) and seeds 50 keys
//! through `RedisStore::set`. One iteration is one batch: 50 tokio tasks (on
//! a 2-worker multi-thread runtime), each reading its own key 20 times in a
//! row, awaited to the end — 1,000 reads. `bare_get_mux` reads the value
//! keys with `GET` on one redis-rs `MultiplexedConnection`;
//! `redis_store_get` reads them through `Store::get` (a plain `GET` of a
//! value it read before, or reads batched into one `MGET` while two round
//! trips of reads are in flight; the frame split off, the generation
//! compared with the one remembered); `cache_get_or_fill`
//! reads 50 other keys through a `Cache<String>` on the same store built
//! with `.l1(false)` (the whole L2 hit: the flight, the read, the decode,
//! the tag check);
//! `cache_get_or_fill_3_tags` the same on entries filled with three tags
//! (what tags cost an L2 hit: the stamps in the envelope and their check
//! against the versions the cache keeps).
//! The ratios to `bare_get_mux` are the figures to read; each time alone
//! moves with the machine's load.
//! `examples/l2_hits.rs` interleaves more variants round by round.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use corral::store::{Store, StoreKey};
use corral::{Cache, FillOptions, RedisConfig, RedisStore};
use corral_testkit::RedisServer;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use redis::aio::MultiplexedConnection;

const TASKS: usize = 50;
const READS_PER_TASK: usize = 20;
const NAMESPACE: &str = "l2bench:v1";

struct Target {
    mux: MultiplexedConnection,
    store: RedisStore,
    /// Per task: its store key and the Redis name of its value key.
    keys: Vec<(StoreKey, String)>,
    cache: Cache<String>,
    /// The same cache's entries filled with three tags.
    tagged: Cache<String>,
    /// Per task: its key in `cache` and `tagged`.
    cache_keys: Vec<String>,
}

async fn cache_batch(target: &Arc<Target>, tagged: bool) {
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| {
            let target = Arc::clone(target);
            tokio::spawn(async move {
                let key = &target.cache_keys[i];
                let cache = if tagged {
                    &target.tagged
                } else {
                    &target.cache
                };
                for _ in 0..READS_PER_TASK {
                    let value = cache
                        .get_or_fill(key, || async {
                            Err::<String, _>("every key was seeded: never filled")
                        })
                        .await
                        .expect("an L2 hit");
                    assert_eq!(value.len(), 32);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task");
    }
}

async fn bare_batch(target: &Arc<Target>) {
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| {
            let target = Arc::clone(target);
            tokio::spawn(async move {
                let name = &target.keys[i].1;
                for _ in 0..READS_PER_TASK {
                    let value: Option<Vec<u8>> = redis::cmd("GET")
                        .arg(name)
                        .query_async(&mut target.mux.clone())
                        .await
                        .expect("GET");
                    assert!(value.is_some());
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task");
    }
}

async fn store_batch(target: &Arc<Target>) {
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| {
            let target = Arc::clone(target);
            tokio::spawn(async move {
                let key = &target.keys[i].0;
                for _ in 0..READS_PER_TASK {
                    let stored = target.store.get(key).await.expect("store.get");
                    assert!(stored.is_some());
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task");
    }
}

fn l2_hit(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let server = RedisServer::start();
    let target = runtime.block_on(async {
        let client = redis::Client::open(server.url()).expect("client");
        let mux = client
            .get_multiplexed_async_connection()
            .await
            .expect("connection");
        let store = RedisStore::connect(&server.url(), RedisConfig::default())
            .await
            .expect("store");
        let mut keys = Vec::new();
        for i in 0..TASKS {
            let user = format!("user:{i:04}");
            let key = StoreKey::new(NAMESPACE, &user);
            // An envelope-sized value: 40-byte header + a 32-byte value.
            store
                .set(
                    &key,
                    &[b'x'; 72],
                    Duration::from_secs(3600),
                    corral::store::Origin::new(0),
                )
                .await
                .expect("seed");
            let name = RedisStore::keys_of(&key).value;
            keys.push((key, name));
        }
        let cache = Cache::<String>::builder("l2cache")
            .store(store.clone())
            .l1(false)
            .ttl(Duration::from_secs(3600))
            .l1(false)
            .build()
            .expect("cache");
        let tagged = Cache::<String>::builder("l2tagged")
            .store(store.clone())
            .l1(false)
            .ttl(Duration::from_secs(3600))
            .l1(false)
            .build()
            .expect("cache");
        let mut cache_keys = Vec::new();
        for i in 0..TASKS {
            let key = format!("user:{i:04}");
            cache.set(&key, "v".repeat(32)).await.expect("seed");
            let tags =
                FillOptions::new().tags([format!("team:{}", i % 5), "org:1".into(), "all".into()]);
            tagged
                .get_or_fill(&key, || async { Ok::<_, Infallible>("v".repeat(32)) })
                .options(tags)
                .await
                .expect("seed tagged");
            cache_keys.push(key);
        }
        Arc::new(Target {
            mux,
            store,
            keys,
            cache,
            tagged,
            cache_keys,
        })
    });

    let mut group = c.benchmark_group("l2_hit_50_tasks");
    group.throughput(Throughput::Elements((TASKS * READS_PER_TASK) as u64));
    group.bench_function("bare_get_mux", |b| {
        b.to_async(&runtime).iter(|| bare_batch(&target));
    });
    group.bench_function("redis_store_get", |b| {
        b.to_async(&runtime).iter(|| store_batch(&target));
    });
    group.bench_function("cache_get_or_fill", |b| {
        b.to_async(&runtime).iter(|| cache_batch(&target, false));
    });
    group.bench_function("cache_get_or_fill_3_tags", |b| {
        b.to_async(&runtime).iter(|| cache_batch(&target, true));
    });
    group.finish();
    drop(server);
}

criterion_group!(benches, l2_hit);
criterion_main!(benches);

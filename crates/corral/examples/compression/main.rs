//! Compression measured: stored bytes, CPU per encode and decode, and L2
//! hit throughput against no compression, on loopback and through a slow
//! link, for values of real shape.
//!
//! ```text
//! cargo run --release -p corral-cache --features compression --example compression -- [PARTS] [ROUNDS] [MS_PER_LOOP]
//! ```
//!
//! PARTS is `cpu`, `l2`, `slow` or `all` (the default), comma-separated:
//!
//! - `cpu`: for each value and setting, the bytes a cache stores (the
//!   envelope: 40 bytes of header, then the value) and the CPU time of one
//!   encode (codec, compression, envelope) and one decode, on one thread,
//!   read from the thread's own CPU clock (`/proc/thread-self/schedstat`):
//!   every round times a batch of at least MS_PER_LOOP of each per
//!   setting, the settings in a rotating order; the medians over ROUNDS
//!   rounds, and of the per-round differences to no compression.
//! - `l2`: L2 hits (`Cache::get_or_fill` of a cache without an L1, on a
//!   `RedisStore` on loopback): `COMPRESSION_TASKS` tasks (default 16) on a
//!   2-worker runtime, each reading its own warm key for MS_PER_LOOP, every
//!   setting once per round in a rotating order; the median reads per
//!   second, and of the per-round ratio to no compression (these machines
//!   are noisy: only figures taken moments apart compare), and the CPU
//!   time per read of this process and of `redis-server`.
//! - `slow`: the same through the testkit's `FaultProxy` limited to
//!   `COMPRESSION_LINK` bytes per second each way (default 12,500,000:
//!   100 Mbit/s), for the 10 KB and 100 KB documents and the blob, each
//!   loop three times as long.
//!
//! The values: a user's orders as JSON (`corral::codec::Json`) of about
//! 1 KB, 10 KB and 100 KB (field names and numbers as a shop's API
//! returns them, see `payloads.rs`), and 100 KB of random bytes (postcard)
//! that nothing compresses. Settings: none, LZ4, zstd level 1 and level 3,
//! each with `min_bytes(0)` so that every value is offered to the
//! compressor.

mod payloads;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use corral::codec::{Codec, Json, Postcard};
use corral::store::MemoryStore;
use corral::{Cache, Compression, RedisConfig, RedisStore};
use corral_testkit::{cpu_micros, FaultProxy, RedisServer};
use serde::{de::DeserializeOwned, Serialize};

use payloads::{blob, orders, Blob, Order};

const SETTINGS: [(&str, Compression); 4] = [
    ("none", Compression::none()),
    ("lz4", Compression::lz4()),
    ("zstd1", Compression::zstd(1)),
    ("zstd3", Compression::zstd(3)),
];

/// The values measured.
struct Payloads {
    json: [(&'static str, Vec<Order>); 3],
    blob: (&'static str, Blob),
}

fn payloads() -> Payloads {
    Payloads {
        json: [
            ("json 1 KB", orders(1_000, 1)),
            ("json 10 KB", orders(10_000, 2)),
            ("json 100 KB", orders(100_000, 3)),
        ],
        blob: ("blob 100 KB", blob(100_000, 4)),
    }
}

/// CPU time of the calling thread so far, in nanoseconds.
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// CPU µs per call of `op` over a batch of at least `ms` of this
/// thread's CPU time.
fn cpu_us_per_op(ms: u64, mut op: impl FnMut()) -> f64 {
    let start = thread_cpu_ns();
    let mut ops = 0u64;
    while thread_cpu_ns() - start < ms * 1_000_000 {
        for _ in 0..8 {
            op();
        }
        ops += 8;
    }
    (thread_cpu_ns() - start) as f64 / 1e3 / ops as f64
}

/// A cache of `V` with `codec` on `store`, without an L1, compressing
/// with `compression`.
fn cache<V>(
    name: &str,
    store: impl corral::store::IntoStore,
    codec: impl Codec<V>,
    compression: Compression,
) -> Cache<V>
where
    V: Clone + Send + Sync + Serialize + DeserializeOwned + 'static,
{
    Cache::<V>::builder(name)
        .ttl(Duration::from_secs(3600))
        .store(store)
        .codec(codec)
        .l1(false)
        .compression(compression.min_bytes(0))
        .build()
        .expect("cache")
}

/// The `cpu` rows of one value: every round times one batch of encodes
/// and one of decodes per setting, the settings in a rotating order;
/// the medians over rounds, and of the per-round differences to none.
fn cpu_rows<V, C>(label: &str, value: &V, codec: C, rounds: u64, ms: u64)
where
    V: Clone + Send + Sync + Serialize + DeserializeOwned + PartialEq + 'static,
    C: Codec<V> + Clone,
{
    let mut encoded = Vec::new();
    codec.encode(value, &mut encoded).expect("encodes");
    let ttl = Duration::from_secs(60);
    let setups: Vec<(Cache<V>, Vec<u8>)> = SETTINGS
        .iter()
        .map(|(_, setting)| {
            let cache = cache("cpu", MemoryStore::new(), codec.clone(), *setting);
            let bytes = cache.encode_for_store("k", value, ttl).expect("encodes");
            assert!(cache.decode_from_store("k", &bytes).as_ref() == Some(value));
            (cache, bytes)
        })
        .collect();
    let n = setups.len();
    let mut samples = vec![(Vec::new(), Vec::new(), Vec::new(), Vec::new()); n];
    for round in 0..rounds as usize {
        let mut this = vec![(0.0, 0.0); n];
        for step in 0..n {
            let at = (step + round) % n;
            let (cache, bytes) = &setups[at];
            this[at] = (
                cpu_us_per_op(ms, || {
                    std::hint::black_box(cache.encode_for_store("k", value, ttl).expect("encodes"));
                }),
                cpu_us_per_op(ms, || {
                    std::hint::black_box(cache.decode_from_store("k", bytes).expect("decodes"));
                }),
            );
        }
        for (at, (encode, decode)) in this.iter().enumerate() {
            samples[at].0.push(*encode);
            samples[at].1.push(*decode);
            samples[at].2.push(encode - this[0].0);
            samples[at].3.push(decode - this[0].1);
        }
    }
    for (((name, _), (_, bytes)), (encode, decode, more_encode, more_decode)) in
        SETTINGS.iter().zip(&setups).zip(&mut samples)
    {
        println!(
            "{label:<12} {:>9} {name:<6} {:>9} {:>6.2}x {:>10.1} {:>10.1} {:>+10.1} {:>+10.1}",
            encoded.len(),
            bytes.len(),
            (encoded.len() + 40) as f64 / bytes.len() as f64,
            median(encode),
            median(decode),
            median(more_encode),
            median(more_decode),
        );
    }
}

fn cpu(payloads: &Payloads, rounds: u64, ms: u64) {
    println!("== stored bytes and CPU per value (one thread; µs of its CPU clock, medians of {rounds} rounds of {ms} ms batches)");
    println!(
        "{:<12} {:>9} {:<6} {:>9} {:>7} {:>10} {:>10} {:>10} {:>10}",
        "value",
        "encoded",
        "set",
        "stored",
        "ratio",
        "encode us",
        "decode us",
        "+enc us",
        "+dec us"
    );
    for (label, value) in &payloads.json {
        cpu_rows(label, value, Json, rounds, ms);
    }
    let (label, value) = &payloads.blob;
    cpu_rows(label, value, Postcard, rounds, ms);
}

type Read<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// What a task reads: its own warm key of one cache.
trait Reader: Send + Sync {
    fn read(&self, task: usize) -> Read<'_>;
}

struct Warm<V> {
    cache: Cache<V>,
    keys: Vec<String>,
}

impl<V: Clone + Send + Sync + 'static> Reader for Warm<V> {
    fn read(&self, task: usize) -> Read<'_> {
        Box::pin(async move {
            let value = self
                .cache
                .get_or_fill(&self.keys[task], || async {
                    Err::<V, _>(std::io::Error::other("warm keys never fill"))
                })
                .await
                .expect("an L2 hit");
            std::hint::black_box(value);
        })
    }
}

/// How many tasks read at once: `COMPRESSION_TASKS` (default 16).
fn tasks() -> usize {
    std::env::var("COMPRESSION_TASKS")
        .ok()
        .and_then(|n| n.parse().ok())
        .map_or(16, |n: usize| n.clamp(1, 256))
}

/// One reader per setting for `value`, each cache named after the value
/// and the setting, its keys seeded.
async fn readers<V, C>(store: &RedisStore, label: &str, value: &V, codec: C) -> Vec<Arc<dyn Reader>>
where
    V: Clone + Send + Sync + Serialize + DeserializeOwned + 'static,
    C: Codec<V> + Clone,
{
    let mut readers: Vec<Arc<dyn Reader>> = Vec::new();
    for (name, setting) in SETTINGS {
        let cache_name: String = format!("{label}-{name}")
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let cache = cache(&cache_name, store.clone(), codec.clone(), setting);
        let keys: Vec<String> = (0..tasks()).map(|i| format!("user:{i:04}")).collect();
        for key in &keys {
            cache.set(key, value.clone()).await.expect("seed");
        }
        readers.push(Arc::new(Warm { cache, keys }));
    }
    readers
}

/// Reads per second of [`tasks`] tasks each reading its own key for `ms`,
/// and CPU µs per read of this process and of the server.
async fn measure(reader: &Arc<dyn Reader>, ms: u64, server_pid: &str) -> (f64, f64, f64) {
    let (client0, server0) = (cpu_micros("self"), cpu_micros(server_pid));
    let start = Instant::now();
    let deadline = start + Duration::from_millis(ms);
    let tasks: Vec<_> = (0..tasks())
        .map(|task| {
            let reader = Arc::clone(reader);
            tokio::spawn(async move {
                let mut reads = 0u64;
                while Instant::now() < deadline {
                    reader.read(task).await;
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    let mut reads = 0;
    for task in tasks {
        reads += task.await.expect("reader task");
    }
    let elapsed = start.elapsed().as_secs_f64();
    let reads = reads.max(1) as f64;
    (
        reads / elapsed,
        (cpu_micros("self") - client0) / reads,
        (cpu_micros(server_pid) - server0) / reads,
    )
}

/// Runs every reader of one value `rounds` times in a rotating order and
/// prints its rows.
async fn rows(label: &str, readers: &[Arc<dyn Reader>], rounds: u64, ms: u64, pid: &str) {
    for reader in readers {
        measure(reader, ms / 4 + 1, pid).await;
    }
    let n = readers.len();
    let mut samples = vec![(Vec::new(), Vec::new(), Vec::new(), Vec::new()); n];
    for round in 0..rounds as usize {
        let mut this = vec![(0.0, 0.0, 0.0); n];
        for step in 0..n {
            let at = (step + round) % n;
            this[at] = measure(&readers[at], ms, pid).await;
        }
        for (at, (rate, client, server)) in this.iter().enumerate() {
            samples[at].0.push(*rate);
            samples[at].1.push(rate / this[0].0);
            samples[at].2.push(*client);
            samples[at].3.push(*server);
        }
    }
    for ((name, _), (rates, ratios, client, server)) in SETTINGS.iter().zip(&mut samples) {
        let lo = ratios.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = ratios.iter().copied().fold(0.0, f64::max);
        println!(
            "{label:<12} {name:<6} {:>10.0} {:>7.2}x {:>6.2}..{:<6.2} {:>10.1} {:>10.1}",
            median(rates),
            median(ratios),
            lo,
            hi,
            median(client),
            median(server),
        );
    }
}

fn header() {
    println!(
        "{:<12} {:<6} {:>10} {:>8} {:>14} {:>10} {:>10}",
        "value", "set", "reads/s", "ratio", "ratio min..max", "client us", "server us"
    );
}

/// The `l2` part, or with `link` the `slow` part through a proxy of that
/// many bytes per second.
async fn l2(payloads: &Payloads, rounds: u64, ms: u64, link: Option<u64>) {
    let server = RedisServer::start();
    let pid = server.pid().map(|p| p.to_string()).unwrap_or_default();
    let proxy = link.map(|_| FaultProxy::start(server.port()));
    let url = proxy.as_ref().map_or_else(|| server.url(), FaultProxy::url);
    let store = RedisStore::connect(&url, RedisConfig::default())
        .await
        .expect("store");
    let mut groups = Vec::new();
    let json = if link.is_some() {
        &payloads.json[1..]
    } else {
        &payloads.json[..]
    };
    for (label, value) in json {
        groups.push((*label, readers(&store, label, value, Json).await));
    }
    let (label, value) = &payloads.blob;
    groups.push((*label, readers(&store, label, value, Postcard).await));
    let ms = match (&proxy, link) {
        (Some(proxy), Some(rate)) => {
            proxy.limit_bandwidth(Some(rate));
            println!(
                "== L2 hits through a link of {:.1} MB/s ({} Mbit/s) each way, {} tasks, {rounds} rounds x {} ms",
                rate as f64 / 1e6,
                rate * 8 / 1_000_000,
                tasks(),
                ms * 3
            );
            ms * 3
        }
        _ => {
            println!(
                "== L2 hits on loopback, {} tasks, {rounds} rounds x {ms} ms",
                tasks()
            );
            ms
        }
    };
    header();
    for (label, readers) in &groups {
        rows(label, readers, rounds, ms, &pid).await;
    }
}

fn arg(args: &[String], at: usize, default: u64) -> u64 {
    args.get(at)
        .and_then(|s| s.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let parts = args.get(1).map_or("all", String::as_str).to_owned();
    let (rounds, ms) = (arg(&args, 2, 5), arg(&args, 3, 300));
    let wants = |part: &str| parts == "all" || parts.split(',').any(|p| p.trim() == part);
    let payloads = payloads();
    if wants("cpu") {
        cpu(&payloads, rounds, ms);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    if wants("l2") {
        runtime.block_on(l2(&payloads, rounds, ms, None));
    }
    if wants("slow") {
        let link = std::env::var("COMPRESSION_LINK")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(12_500_000);
        runtime.block_on(l2(&payloads, rounds, ms, Some(link)));
    }
}

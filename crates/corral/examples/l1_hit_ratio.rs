//! Hit ratios of the L1 on generated workloads at several shard counts,
//! against one unsharded S3-FIFO of the same capacity (see
//! `BENCHMARKS.md`).
//!
//! ```text
//! cargo run --release -p corral-cache --example l1_hit_ratio -- [CAPACITY] [REQUESTS]
//! ```
//!
//! Each workload (`src/bounded_map/workloads.rs`: Zipf at skews 0.8 and
//! 1.2, a loop that fits the capacity, a loop of twice the capacity, a
//! Zipf core interrupted by scans; seeded) is replayed, request by request
//! (a hit, or a miss followed by an insert), through:
//!
//! - one unsharded `quick_cache::unsync` cache (S3-FIFO) of CAPACITY
//!   entries: the baseline;
//! - the layout corral's L1 had before it evicted in one order over all
//!   its shards: N `quick_cache::unsync` caches of CAPACITY / N entries
//!   each (rounded down), a key's shard picked by its hash, each evicting
//!   on its own (corral capped N at CAPACITY / 32, so N = 64 applied from
//!   2,048 entries up; the column shows the layout itself);
//! - corral's in-process tier: a `Cache` of CAPACITY entries built with
//!   N shards (`CacheBuilder::l1_shards`, the setting a 2-CPU machine uses
//!   to show a 64-shard layout), each request a `peek` and, on a miss, a
//!   `set`.
//!
//! It prints hit ratios in percent, the difference from the baseline in
//! points, and how many entries each held at the end.

use std::hash::BuildHasher;
use std::time::Duration;

use corral::{Cache, Capacity};
use foldhash::fast::RandomState;
use quick_cache::unsync;
use quick_cache::UnitWeighter;

#[path = "../src/bounded_map/workloads.rs"]
mod workloads;

const SHARD_COUNTS: [usize; 4] = [1, 8, 32, 64];

type Unsync = unsync::Cache<u64, (), UnitWeighter, RandomState>;

fn unsync_cache(capacity: u64) -> Unsync {
    unsync::Cache::with(
        capacity as usize,
        capacity,
        UnitWeighter,
        RandomState::default(),
        unsync::DefaultLifecycle::default(),
    )
}

/// (hits, entries held at the end) of one unsharded S3-FIFO.
fn unsharded(capacity: u64, keys: &[u64]) -> (usize, usize) {
    let mut cache = unsync_cache(capacity);
    let hits = keys
        .iter()
        .filter(|&&key| {
            let hit = cache.get(&key).is_some();
            if !hit {
                cache.insert(key, ());
            }
            hit
        })
        .count();
    (hits, cache.len())
}

/// (hits, entries held) of the former layout: `shards` S3-FIFOs of
/// `capacity / shards` entries, each evicting on its own.
fn former_layout(capacity: u64, shards: usize, keys: &[u64]) -> (usize, usize) {
    let each = (capacity / shards as u64).max(1);
    let mut caches: Vec<Unsync> = (0..shards).map(|_| unsync_cache(each)).collect();
    let hasher = RandomState::default();
    let hits = keys
        .iter()
        .filter(|&&key| {
            let shard = &mut caches[(hasher.hash_one(key) >> 32) as usize & (shards - 1)];
            let hit = shard.get(&key).is_some();
            if !hit {
                shard.insert(key, ());
            }
            hit
        })
        .count();
    (hits, caches.iter().map(Unsync::len).sum())
}

/// (hits, entries held) of corral's in-process tier with `shards` shards.
async fn corral_l1(capacity: u64, shards: usize, keys: &[u64]) -> (usize, usize) {
    let cache: Cache<u64> = Cache::builder("l1-hit-ratio")
        .capacity(Capacity::Entries(capacity))
        .ttl(Duration::from_secs(3_600))
        .l1_shards(shards)
        .build()
        .expect("cache");
    let mut hits = 0;
    let mut name = String::new();
    for &key in keys {
        name.clear();
        use std::fmt::Write;
        write!(name, "k{key}").expect("a key name");
        if cache.peek(&name).await.expect("peek").is_some() {
            hits += 1;
        } else {
            cache.set(&name, key).await.expect("set");
        }
    }
    (hits, cache.local_len())
}

fn percent(hits: usize, requests: usize) -> f64 {
    hits as f64 * 100.0 / requests as f64
}

fn main() {
    let mut args = std::env::args().skip(1);
    let capacity: u64 = args.next().map_or(1_024, |a| a.parse().expect("CAPACITY"));
    let requests: usize = args
        .next()
        .map_or(400_000, |a| a.parse().expect("REQUESTS"));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    println!("capacity {capacity} entries, {requests} requests per workload\n");
    println!(
        "| workload | unsharded S3-FIFO | shards | before: per-shard S3-FIFOs | Δ | held | after: corral L1 | Δ | held |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut worst_before: f64 = 0.0;
    let mut worst_after: f64 = 0.0;
    for workload in workloads::standard(capacity, requests, 42) {
        let (base_hits, base_held) = unsharded(capacity, &workload.keys);
        let base = percent(base_hits, requests);
        for shards in SHARD_COUNTS {
            let (before_hits, before_held) = former_layout(capacity, shards, &workload.keys);
            let (after_hits, after_held) =
                runtime.block_on(corral_l1(capacity, shards, &workload.keys));
            let before = percent(before_hits, requests);
            let after = percent(after_hits, requests);
            worst_before = worst_before.max((before - base).abs());
            worst_after = worst_after.max((after - base).abs());
            println!(
                "| {} | {base:.2} (held {base_held}) | {shards} | {before:.2} | {:+.2} | {before_held} | {after:.2} | {:+.2} | {after_held} |",
                workload.name,
                before - base,
                after - base,
            );
        }
    }
    println!(
        "\nlargest |Δ| from the unsharded S3-FIFO: before {worst_before:.2} points, after {worst_after:.2} points"
    );
}

//! The load a fleet of caches puts on one Redis, measured, to check the
//! capacity model in `BENCHMARKS.md`:
//! `cargo run --release -p corral-cache --example capacity -- N K R SECONDS TTL_MS [L1]`
//! (`L1` 1 or 0, default 1).
//!
//! Starts its own `redis-server` (the test fixture), then N cache
//! instances, each with its own `RedisStore` (its own command connection
//! and subscriber) and an L1 (unless `L1` is 0), standing for N service
//! replicas: Redis sees from them what it would see from N processes. Each reads K
//! hot keys round-robin at R reads per second for SECONDS, values living
//! TTL_MS. Prints, per second: the commands Redis executed (from `INFO
//! commandstats`, this program's own `INFO` left out), how many of them
//! were announcements (`PUBLISH` from the scripts), the backplane messages
//! the instances received (pub/sub deliveries), and fills.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use corral::{Cache, RedisConfig, RedisStore};
use corral_testkit::RedisServer;

fn arg(index: usize, default: u64) -> u64 {
    std::env::args()
        .nth(index)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

fn calls(server: &RedisServer) -> BTreeMap<String, u64> {
    server.command_stats()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let instances = arg(1, 2) as usize;
    let keys = arg(2, 100) as usize;
    let rate = arg(3, 1000);
    let seconds = arg(4, 5);
    let ttl = Duration::from_millis(arg(5, 1000));
    let l1 = arg(6, 1) != 0;
    let server = tokio::task::block_in_place(RedisServer::start);

    let mut caches = Vec::new();
    for _ in 0..instances {
        let store = RedisStore::connect(&server.url(), RedisConfig::default())
            .await
            .expect("connect");
        let cache = Cache::<String>::builder("capacity")
            .store(store)
            .l1(l1)
            .ttl(ttl)
            .build()
            .expect("cache");
        caches.push(cache);
    }
    let names: Vec<String> = (0..keys).map(|k| format!("hot:{k}")).collect();
    // Warm up: every key present, every subscriber up.
    for cache in &caches {
        for name in &names {
            let _ = cache
                .get_or_fill(name, || async { Ok::<_, String>("v".repeat(100)) })
                .await;
        }
    }

    let before = tokio::task::block_in_place(|| calls(&server));
    let heard: u64 = caches.iter().map(|c| c.stats().backplane_messages).sum();
    let fills: u64 = caches.iter().map(|c| c.stats().fills).sum();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for (i, cache) in caches.iter().enumerate() {
        let cache = cache.clone();
        let names = names.clone();
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1) / rate.max(1) as u32);
            let mut next = i;
            while Instant::now() < deadline {
                tick.tick().await;
                let name = &names[next % names.len()];
                next += 1;
                let _ = cache
                    .get_or_fill(name, || async { Ok::<_, String>("v".repeat(100)) })
                    .await;
            }
        }));
    }
    for task in tasks {
        task.await.expect("reader");
    }
    let elapsed = started.elapsed().as_secs_f64();
    let after = tokio::task::block_in_place(|| calls(&server));
    let heard = caches
        .iter()
        .map(|c| c.stats().backplane_messages)
        .sum::<u64>()
        - heard;
    let fills = caches.iter().map(|c| c.stats().fills).sum::<u64>() - fills;
    let mut total = 0;
    let mut by_command = Vec::new();
    for (command, count) in &after {
        if command == "info" {
            continue;
        }
        let delta = count - before.get(command).copied().unwrap_or(0);
        if delta > 0 {
            total += delta;
            by_command.push(format!("{command}={:.0}/s", delta as f64 / elapsed));
        }
    }
    let publishes =
        after.get("publish").copied().unwrap_or(0) - before.get("publish").copied().unwrap_or(0);
    println!(
        "instances={instances} keys={keys} reads/s/instance={rate} ttl={ttl:?} l1={l1}: \
         commands/s={:.0} publishes/s={:.0} deliveries/s={:.0} fills/s={:.0} reads/s={:.0} [{}]",
        total as f64 / elapsed,
        publishes as f64 / elapsed,
        heard as f64 / elapsed,
        fills as f64 / elapsed,
        (instances as u64 * rate) as f64,
        by_command.join(" ")
    );
}

//! Client CPU and Redis time per cold miss: `Cache::get_or_fill` of keys no
//! one read before (a trivial fill) against plain cache-aside (`GET`, then
//! `SET EX`), 16 tasks each, in one run.
//!
//! ```text
//! cargo run --release -p corral-cache --example fill_cost -- [MISSES] [corral,aside]
//! ```
//!
//! Each side runs twice, alternately, on one `redis-server` the example
//! starts. Under `valgrind --tool=callgrind`, two runs of different
//! lengths of one side give its instructions per miss.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use corral::{Cache, RedisConfig, RedisStore};
use corral_testkit::{cpu_micros, RedisServer};
use redis::AsyncCommands as _;

const TASKS: u64 = 16;
/// Pads each value to about 190 bytes.
const PADDING: &str = "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000";

fn config() -> RedisConfig {
    match std::env::var("TRACKING").as_deref() {
        Ok("off") => RedisConfig::default().tracking(corral::Tracking::Off),
        Ok("bcast") => RedisConfig::default().tracking(corral::Tracking::Broadcast),
        _ => RedisConfig::default(),
    }
}

async fn run_side(label: &str, misses: u64, server: &RedisServer, corral: bool) {
    let next = Arc::new(AtomicU64::new(0));
    let cache = if corral {
        let store = RedisStore::connect(&server.url(), config())
            .await
            .expect("store");
        Some(
            Cache::<String>::builder(label)
                .ttl(Duration::from_secs(600))
                .store(store)
                .build()
                .expect("cache"),
        )
    } else {
        None
    };
    let client = redis::Client::open(server.url()).expect("client");
    let conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("conn");
    server.reset_stats();
    let server_pid = server.pid().map(|p| p.to_string()).unwrap_or_default();
    let (cpu0, rcpu0, t0) = (cpu_micros("self"), cpu_micros(&server_pid), Instant::now());
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let (next, cache, mut conn) = (Arc::clone(&next), cache.clone(), conn.clone());
        let label = label.to_owned();
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= misses {
                    break;
                }
                let key = format!("k:{i}");
                let value = format!("value of {key}, about 190 bytes: {PADDING}");
                if let Some(cache) = &cache {
                    let got = cache
                        .get_or_fill(&key, move || async move { Ok::<_, String>(value) })
                        .await
                        .expect("fill");
                    std::hint::black_box(got);
                } else {
                    let name = format!("{label}:{key}");
                    let got: Option<String> = conn.get(&name).await.expect("get");
                    if got.is_none() {
                        let _: () = conn.set_ex(&name, &value, 600).await.expect("set");
                    }
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    let wall = t0.elapsed();
    let cpu = cpu_micros("self") - cpu0;
    let rcpu = cpu_micros(&server_pid) - rcpu0;
    println!(
        "{label:12} {:>8.0} misses/s  client CPU {:>6.1} µs/miss  redis CPU {:>6.1} µs/miss",
        misses as f64 / wall.as_secs_f64(),
        cpu / misses as f64,
        rcpu / misses as f64
    );
    if std::env::var("STATS").is_ok() {
        for (name, time) in server.command_times() {
            println!(
                "    cmdstat_{name:20} {:6.2}/miss {:6.2} µs/call",
                time.calls as f64 / misses as f64,
                time.usec_per_call()
            );
        }
    }
}

fn main() {
    let misses: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let server = RedisServer::start();
        let sides = std::env::args()
            .nth(2)
            .unwrap_or_else(|| "corral,aside".into());
        for round in 0..2 {
            for side in sides.split(',') {
                let corral = side == "corral";
                run_side(&format!("{side}{round}"), misses, &server, corral).await;
            }
        }
    });
}

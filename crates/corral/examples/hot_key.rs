//! One hot key on Redis: the Redis commands per second it costs when N
//! processes read it at R requests per second each, first through caches
//! with an L1 and the backplane, then through caches that read Redis on
//! every request (L2 only).
//!
//! ```text
//! cargo run --release -p corral-cache --example hot_key -- [PROCESSES] [RATE] [SECONDS] [TTL_MS]
//! ```
//!
//! Defaults: 4 processes, 1,000 requests/s each, 5 s per side, a 1,000 ms
//! TTL. It starts its own `redis-server` (`corral-testkit`'s fixture, on a
//! free port) and its worker processes (this example run again as
//! `hot_key worker`, driven through `corral-testkit`'s `Worker`). Commands
//! are counted by the server (`INFO commandstats` after `CONFIG RESETSTAT`
//! at the start of each side's window; commands run inside scripts count
//! too, and so do the subscribers' `PING`s, one a second per process).
//!
//! With an L1, each process reads Redis about once per TTL (when its copy
//! ends, or when another process's committed refill evicts it), whatever R
//! is; without one, every request is a read. `cargo test -p corral-cache
//! --example hot_key` runs a short check of exactly that.

use std::time::Duration;

use corral::{Cache, RedisConfig, RedisStore};
use corral_testkit::{RedisServer, Worker};
use tokio::io::AsyncBufReadExt as _;

/// What one run measures: `processes` × `rate` requests/s for `seconds`.
#[derive(Debug, Clone, Copy)]
struct Load {
    processes: u64,
    rate: u64,
    seconds: u64,
    ttl_ms: u64,
}

/// One side's figures, summed over its processes.
#[derive(Debug, Default, Clone, Copy)]
struct Side {
    requests: u64,
    errors: u64,
    l1_hits: u64,
    l2_hits: u64,
    fills: u64,
    redis_commands: u64,
    seconds: f64,
}

impl Side {
    fn commands_per_second(&self) -> f64 {
        self.redis_commands as f64 / self.seconds
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let first = args.next();
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    if first.as_deref() == Some("worker") {
        runtime.block_on(worker());
        return;
    }
    let mut numbers = first.into_iter().chain(args).map(|a| a.parse::<u64>());
    let mut next = |default| numbers.next().map_or(default, |n| n.expect("a number"));
    let load = Load {
        processes: next(4),
        rate: next(1000),
        seconds: next(5),
        ttl_ms: next(1000),
    };
    let server = RedisServer::start();
    let spawn = |env: Vec<(&'static str, String)>| {
        let exe = std::env::current_exe().expect("this example's path");
        let mut command = tokio::process::Command::new(exe);
        command.arg("worker").envs(env);
        async move { Worker::spawn(command).await.expect("a worker process") }
    };
    let with_l1 = runtime.block_on(side(&server, load, true, spawn));
    let l2_only = runtime.block_on(side(&server, load, false, spawn));
    print(load, &with_l1, &l2_only);
}

/// Prints both sides as a table.
fn print(load: Load, with_l1: &Side, l2_only: &Side) {
    println!(
        "one hot key, {} processes x {} requests/s, TTL {} ms, {} s per side\n",
        load.processes, load.rate, load.ttl_ms, load.seconds
    );
    println!(
        "{:<16} {:>9} {:>7} {:>9} {:>9} {:>6} {:>11} {:>13}",
        "side", "requests", "errors", "L1 hits", "L2 hits", "fills", "redis cmds", "redis cmds/s"
    );
    for (label, side) in [("L1 + backplane", with_l1), ("L2 only", l2_only)] {
        println!(
            "{label:<16} {:>9} {:>7} {:>9} {:>9} {:>6} {:>11} {:>13.1}",
            side.requests,
            side.errors,
            side.l1_hits,
            side.l2_hits,
            side.fills,
            side.redis_commands,
            side.commands_per_second()
        );
    }
    let per_ttl =
        with_l1.commands_per_second() * load.ttl_ms as f64 / 1000.0 / load.processes.max(1) as f64;
    println!("\nwith the L1: {per_ttl:.1} Redis commands per process per TTL");
}

/// Runs one side: starts its workers (through `spawn`, which is given the
/// worker's environment), waits until all are connected, resets the
/// server's counters, lets them read for the window and sums their reports.
async fn side<F, Fut>(server: &RedisServer, load: Load, l1: bool, spawn: F) -> Side
where
    F: Fn(Vec<(&'static str, String)>) -> Fut,
    Fut: std::future::Future<Output = Worker>,
{
    let name = format!(
        "hot-{}-{}",
        std::process::id(),
        if l1 { "l1" } else { "l2" }
    );
    let mut workers = Vec::new();
    for _ in 0..load.processes {
        let env = vec![
            ("HOT_KEY_REDIS", server.url()),
            ("HOT_KEY_NAME", name.clone()),
            ("HOT_KEY_RATE", load.rate.to_string()),
            ("HOT_KEY_SECONDS", load.seconds.to_string()),
            ("HOT_KEY_TTL_MS", load.ttl_ms.to_string()),
            ("HOT_KEY_L1", l1.to_string()),
        ];
        workers.push(spawn(env).await);
    }
    server.reset_stats();
    let started = std::time::Instant::now();
    for worker in &mut workers {
        worker.send("go").await;
    }
    let mut side = Side::default();
    for worker in &mut workers {
        let report = worker
            .answer("@report", Duration::from_secs(load.seconds + 60))
            .await
            .expect("a worker's report");
        let figures: Vec<u64> = report
            .split_whitespace()
            .map(|n| n.parse().expect("a figure"))
            .collect();
        let [requests, errors, hits, l2_hits, fills] = figures[..] else {
            panic!("a worker's report: {report}");
        };
        side.requests += requests;
        side.errors += errors;
        side.l1_hits += hits - l2_hits;
        side.l2_hits += l2_hits;
        side.fills += fills;
    }
    side.seconds = started.elapsed().as_secs_f64();
    let commands = server.command_stats().into_iter();
    // The reset itself is the harness's, not the workers'.
    side.redis_commands = commands
        .filter(|(name, _)| name != "config|resetstat")
        .map(|(_, n)| n)
        .sum();
    side
}

/// One worker process: connects, says `@ready`, waits for `go`, reads the
/// hot key at its rate for the window, then prints `@report` with its
/// requests, errors, hits, L2 hits and fills.
async fn worker() {
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is set"));
    let number = |name: &str| var(name).parse::<u64>().expect("a number");
    let store = RedisStore::connect(&var("HOT_KEY_REDIS"), RedisConfig::default())
        .await
        .expect("connect to Redis");
    let cache = Cache::<String>::builder(&var("HOT_KEY_NAME"))
        .store(store)
        .l1(var("HOT_KEY_L1") == "true")
        .ttl(Duration::from_millis(number("HOT_KEY_TTL_MS")))
        .build()
        .expect("a cache");
    println!("@ready");
    let mut go = String::new();
    tokio::io::BufReader::new(tokio::io::stdin())
        .read_line(&mut go)
        .await
        .expect("go");

    let period = Duration::from_secs_f64(1.0 / number("HOT_KEY_RATE") as f64);
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let window = Duration::from_secs(number("HOT_KEY_SECONDS"));
    let started = tokio::time::Instant::now();
    let (mut requests, mut errors) = (0, 0);
    while started.elapsed() < window {
        ticks.tick().await;
        requests += 1;
        let value = cache
            .get_or_fill("hot", || async {
                Ok::<_, std::io::Error>("hot value".to_owned())
            })
            .await;
        if value.is_err() {
            errors += 1;
        }
    }
    let stats = cache.stats();
    println!(
        "@report {requests} {errors} {} {} {}",
        stats.hits, stats.l2_hits, stats.fills
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worker entry when this example runs as a test binary.
    #[tokio::test]
    #[ignore = "a worker process of an_l1_takes_a_hot_key_off_redis"]
    async fn hot_key_worker() {
        worker().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_l1_takes_a_hot_key_off_redis() {
        let server = RedisServer::start();
        let load = Load {
            processes: 2,
            rate: 500,
            seconds: 1,
            ttl_ms: 500,
        };
        let spawn = |env: Vec<(&'static str, String)>| async move {
            Worker::start("tests::hot_key_worker", &env).await
        };
        let with_l1 = side(&server, load, true, spawn).await;
        let l2_only = side(&server, load, false, spawn).await;
        let report = format!("with L1: {with_l1:?}\nL2 only: {l2_only:?}");
        for side in [&with_l1, &l2_only] {
            assert_eq!(side.errors, 0, "{report}");
            // The pacing may fall behind on a loaded machine, never far.
            assert!(side.requests >= load.processes * load.rate / 2, "{report}");
        }
        // Without an L1 every request is a read of Redis.
        assert_eq!(l2_only.l1_hits, 0, "{report}");
        assert!(l2_only.redis_commands >= l2_only.l2_hits, "{report}");
        // With one, most requests never reach it.
        assert!(
            with_l1.redis_commands * 10 < l2_only.redis_commands,
            "{report}"
        );
        assert!(with_l1.l1_hits > 9 * with_l1.l2_hits, "{report}");
    }
}

//! A service over the cache, end to end: N replica processes serve reads
//! (and, in the write mix, updates) of a Zipf key space over a SQLite
//! database through corral, then the same replicas through plain redis-rs
//! cache-aside, on one Redis, back to back in one run.
//!
//! ```text
//! cargo run --release -p corral-cache --example service_bench -- \
//!     [--replicas 3] [--concurrency 16 | --rate R] [--space fit,20x] [--mix read,write] \
//!     [--writes 0.01] [--keys N --l1 N] [--warmup REQUESTS] [--requests REQUESTS] \
//!     [--cap 60] [--ttl 60] [--sides corral,aside] [--pool 4] [--redis URL] [--json FILE]
//! ```
//!
//! It starts its own `redis-server` on a free loopback port
//! (`corral-testkit`'s fixture) unless `--redis` names one (which it
//! empties with `FLUSHALL`), and seeds a SQLite file in a temporary
//! directory with one row per user (about 190 bytes of JSON each).
//!
//! Scenarios, each read-only (`read`) and with `--writes` of the requests
//! updating a row and then invalidating its key (`write`):
//! - `fit`: 5,000 users, an L1 of 10,000 entries: the key space fits the
//!   L1; 200,000 requests of warm-up, 2,000,000 measured;
//! - `20x`: 100,000 users, an L1 of 5,000: the key space is 20 times the
//!   L1; 500,000 requests of warm-up, 1,000,000 measured;
//! - or one key space of `--keys` users with an L1 of `--l1` entries (5
//!   and 10 requests per user).
//!
//! Per scenario and side, the coordinator empties Redis (`FLUSHALL`,
//! `CONFIG RESETSTAT`) and starts `--replicas` replica processes (this
//! example run again as `service_bench replica <json>`, driven through
//! `corral-testkit`'s `Worker`). Each replica is the service: it runs
//! `--concurrency` client tasks in a closed loop, each drawing user ids
//! from Zipf(1.0) (the same seeds on both sides) and asking the cache for
//! the user's JSON, which it then decodes (the same per-request work on
//! both sides):
//! - corral: `Cache<String>` with its defaults on a `RedisStore` with
//!   `RedisConfig::default()`, the L1 bounded at the scenario's entries,
//!   `get_or_fill` over the SQLite query; a write is the `UPDATE` and
//!   `cache.invalidate(key)`;
//! - cache-aside: one redis-rs `MultiplexedConnection`; `GET`, and on a
//!   miss the query and `SET EX`; a write is the `UPDATE` and `DEL`.
//!
//! With `--rate R`, the load is an open loop instead: each replica starts
//! R / replicas requests per second on a schedule (pacing tasks at least
//! 2 ms apart each, as many as that takes), each request a task of its
//! own, whether or not earlier ones finished, and a request's latency runs
//! from its start. At a rate both sides sustain, the latencies are the
//! service's own; a closed loop on a saturated machine measures its
//! queues (the replicas, the Redis server and the database share the
//! cores).
//!
//! Both sides serve the same number of requests, first the warm-up (not
//! counted), then the measured period (at most `--cap` seconds): in a
//! closed loop over a key space that never fully warms, a side that served
//! more requests has seen more keys, so a period of fixed length would
//! give the faster side fewer misses. Both use the same TTL (`--ttl`, 60
//! s). Between the two periods the replicas stand still while the
//! server's counters are reset.
//!
//! Which regime a period measures is set by its place in the key space's
//! warming and by the TTL, and the report says it: under the table, the
//! first reads of a key expected per 1,000 requests measured (Zipf model,
//! nothing expiring), which every side must fill. Over 100,000 keys the
//! default 20x period (requests 500,000 to 1,500,000) is the space still
//! filling, 27 first reads per 1,000; `--warmup 4500000` measures it warm
//! (under 1 per 1,000); a period longer than the TTL, or a shorter
//! `--ttl`, adds refills of expired keys (database queries above the
//! model). The fills are where corral pays for its lease: see
//! BENCHMARKS.md.
//!
//! Per side it prints: requests/s (all requests over the longest
//! replica's period), p50 and p99 latency of a request (log-linear
//! buckets, within 1.6%), database queries, Redis commands and command
//! time (`INFO commandstats`: calls and `usec`, but the benchmark's own
//! `INFO`, `CONFIG` and `FLUSHALL`; commands run inside scripts count in
//! their own names too, and their time is also in the script's), the Redis
//! server's CPU (`INFO cpu`), the replicas' CPU per request
//! (`/proc/self/stat`), corral's counters per replica (backplane messages
//! and tracking invalidations acted on, fills, L2 hits, ...), and the
//! commands by name. The ratios are corral over cache-aside. `--json FILE`
//! also writes every figure as JSON.

mod args;
mod coordinator;
mod db;
mod histogram;
mod redis_info;
mod replica;
mod report;
mod zipf;

use std::process::ExitCode;

use anyhow::Context as _;
use corral_testkit::RedisServer;

use crate::args::Args;
use crate::report::ScenarioResult;

fn main() -> ExitCode {
    let mut argv = std::env::args().skip(1).peekable();
    let outcome = if argv.peek().map(String::as_str) == Some("replica") {
        let config = argv.nth(1).unwrap_or_default();
        replica::run(&config)
    } else {
        Args::parse(argv).and_then(|args| coordinate(&args))
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("service_bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Starts Redis (unless given one) and the database, runs every scenario's
/// sides and prints the tables.
fn coordinate(args: &Args) -> anyhow::Result<()> {
    let server = args.redis.is_none().then(RedisServer::start);
    let url = match (&args.redis, &server) {
        (Some(url), _) => url.clone(),
        (None, Some(server)) => server.url(),
        (None, None) => unreachable!("a server is started without --redis"),
    };
    let dir = tempfile::tempdir().context("a temporary directory")?;
    let db = dir.path().join("users.db");
    eprintln!("seeding {} users in {}", args.rows(), db.display());
    db::seed(&db, args.rows()).context("seeding the database")?;
    let db = db.to_str().context("a UTF-8 temporary path")?.to_owned();
    let load_before = load_average();
    let runtime = tokio::runtime::Runtime::new()?;
    let results = runtime.block_on(async {
        let client = redis::Client::open(url.as_str()).context("the Redis URL")?;
        // `FLUSHALL` of a side's keys may take longer than redis-rs's
        // default of 500 ms on a loaded machine.
        let patient = Some(std::time::Duration::from_secs(30));
        let config = redis::AsyncConnectionConfig::new().set_response_timeout(patient);
        let conn = client.get_multiplexed_async_connection_with_config(&config);
        let mut conn = conn.await.context("connecting to Redis")?;
        let mut results = Vec::new();
        for scenario in &args.scenarios {
            let mut sides = Vec::new();
            for &side in &args.sides {
                eprintln!("{}: {} ...", scenario.name, side.label());
                let urls = (url.as_str(), db.as_str());
                let result = coordinator::run_side(args, scenario, side, urls, &mut conn).await;
                sides.push(result.with_context(|| format!("{}: {}", scenario.name, side.label()))?);
            }
            results.push(ScenarioResult {
                scenario: scenario.clone(),
                sides,
            });
        }
        anyhow::Ok(results)
    })?;
    print!("{}", report::markdown(args, &results));
    println!(
        "load average (1, 5, 15 min) before: {load_before}; after: {}",
        load_average()
    );
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&results)?)
            .with_context(|| format!("writing {path}"))?;
    }
    Ok(())
}

/// The machine's load averages (`/proc/loadavg`), or `?`.
fn load_average() -> String {
    let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let averages: Vec<&str> = loadavg.split_whitespace().take(3).collect();
    if averages.is_empty() {
        "?".to_owned()
    } else {
        averages.join(", ")
    }
}

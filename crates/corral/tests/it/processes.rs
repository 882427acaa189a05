//! One fill per key across real OS processes sharing a real Redis.
//!
//! The test binary re-runs itself as worker processes (the ignored test
//! `worker`, driven by commands on its stdin); fills are counted in Redis.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use corral::{Cache, RedisConfig, RedisStore};
use corral_testkit::{RedisServer, Stampede, StampedeReport, Worker};
use redis::AsyncCommands;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::support::{redis_conn, redis_count, run_stampede};

/// What a worker reports for a `stats` command.
#[derive(Debug, Serialize, Deserialize)]
struct WorkerStats {
    lease_waits: u64,
    fills: u64,
}

// ---------------------------------------------------------------- worker side

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("worker needs {name}"))
}

fn env_ms(name: &str) -> Duration {
    Duration::from_millis(env(name).parse().expect("milliseconds"))
}

/// The worker process: connects, says `@ready`, then runs commands from
/// stdin concurrently, answering each on stdout with an `@` line.
#[test]
#[ignore = "a worker process for the multi-process tests, started by them"]
fn worker() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let url = env("CORRAL_WORKER_URL");
        let store = RedisStore::connect(&url, RedisConfig::default())
            .await
            .expect("connect");
        let cache = Cache::<String>::builder("procs")
            .store(store)
            .ttl(Duration::from_secs(60))
            .lease_ttl(env_ms("CORRAL_WORKER_LEASE_MS"))
            .fill_timeout(Duration::from_secs(120))
            .build()
            .expect("config");
        let client = redis::Client::open(url).expect("client");
        let counters = client
            .get_multiplexed_async_connection()
            .await
            .expect("connection");
        println!("@ready");
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let words: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
            let (cache, counters) = (cache.clone(), counters.clone());
            tokio::spawn(async move { run_command(&words, cache, counters).await });
        }
    });
}

async fn run_command(
    words: &[String],
    cache: Cache<String>,
    counters: redis::aio::MultiplexedConnection,
) {
    match words.first().map(String::as_str) {
        // stampede <key> <callers> <fill_ms> <counter key>
        Some("stampede") => {
            let stampede = Stampede::parse(&words[1..]);
            let incr = move |counter: String| {
                let mut counters = counters.clone();
                async move {
                    counters
                        .incr::<_, _, u64>(&counter, 1)
                        .await
                        .map_err(|e| e.to_string())
                }
            };
            run_stampede(&cache, stampede, incr).await.print();
        }
        // fill <key> <started key> <delay_us>: one fill that marks its start,
        // then waits the delay before returning "old".
        Some("fill") => {
            let (key, started, delay) = (
                words[1].clone(),
                words[2].clone(),
                words[3].parse::<u64>().expect("us"),
            );
            let mut counters = counters.clone();
            let result = cache
                .get_or_fill(&key, move || async move {
                    let _: u64 = counters
                        .incr(&started, 1)
                        .await
                        .map_err(|e| e.to_string())?;
                    tokio::time::sleep(Duration::from_micros(delay)).await;
                    Ok::<_, String>("old".to_owned())
                })
                .await;
            println!("@filled {}", result.is_ok());
        }
        Some("stats") => {
            let stats = cache.stats();
            let stats = WorkerStats {
                lease_waits: stats.lease_waits,
                fills: stats.fills,
            };
            println!("@stats {}", serde_json::to_string(&stats).expect("json"));
        }
        other => panic!("unknown worker command {other:?}"),
    }
}

// ---------------------------------------------------------------- test side

/// Starts a worker process sharing `server`, with lease TTL `lease`.
async fn start_worker(server: &RedisServer, lease: Duration) -> Worker {
    let env = [
        ("CORRAL_WORKER_URL", server.url()),
        ("CORRAL_WORKER_LEASE_MS", lease.as_millis().to_string()),
    ];
    Worker::start(&crate::support::test_name(module_path!(), "worker"), &env).await
}

async fn report(worker: &mut Worker) -> StampedeReport {
    StampedeReport::read(worker).await
}

async fn stats(worker: &mut Worker) -> WorkerStats {
    worker.send("stats").await;
    serde_json::from_str(&worker.expect("@stats").await).expect("stats json")
}

async fn stampede(processes: usize, callers: usize, fill: Duration, lease: Duration) {
    let server = RedisServer::start();
    let mut workers = Vec::new();
    for _ in 0..processes {
        workers.push(start_worker(&server, lease).await);
    }
    let command = Stampede {
        key: "hot".into(),
        callers,
        fill,
        counter: "fills".into(),
    }
    .to_string();
    for worker in &mut workers {
        worker.send(&command).await;
    }
    let mut values = BTreeSet::new();
    for worker in &mut workers {
        let report = report(worker).await;
        assert!(
            report.errors.is_empty(),
            "{:?}\n{}",
            report.errors,
            server.log()
        );
        assert_eq!(report.ok, callers);
        values.extend(report.values);
    }
    let fills = redis_count(&mut redis_conn(&server.url()).await, "fills").await;
    assert_eq!(
        fills, 1,
        "one fill across {processes} processes; values {values:?}"
    );
    assert_eq!(
        values.len(),
        1,
        "every caller got the one value: {values:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_of_250_callers_run_one_fill() {
    stampede(4, 250, Duration::from_millis(200), Duration::from_secs(3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fill_lasting_three_leases_is_renewed_and_still_runs_once() {
    stampede(
        4,
        250,
        Duration::from_millis(900),
        Duration::from_millis(300),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_leader_process_dies_one_waiter_takes_the_lapsed_lease() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(400);
    let mut conn = redis_conn(&server.url()).await;
    let mut doomed = start_worker(&server, lease).await;
    doomed.send("stampede k 1 600000 fills").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while redis_count(&mut conn, "fills").await < 1 {
        assert!(Instant::now() < deadline, "the first fill never started");
        tokio::task::yield_now().await;
    }
    let mut survivors = vec![
        start_worker(&server, lease).await,
        start_worker(&server, lease).await,
    ];
    for worker in &mut survivors {
        worker.send("stampede k 50 100 fills").await;
    }
    // Both survivors found the lease held (and renewed by the doomed leader).
    for worker in &mut survivors {
        let deadline = Instant::now() + Duration::from_secs(10);
        while stats(worker).await.lease_waits == 0 {
            assert!(
                Instant::now() < deadline,
                "a survivor never waited on the lease"
            );
        }
    }
    let killed_at = Instant::now();
    doomed.kill().await;
    let mut values = BTreeSet::new();
    for worker in &mut survivors {
        let report = report(worker).await;
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        assert_eq!(report.ok, 50);
        values.extend(report.values);
    }
    let took_over = killed_at.elapsed();
    assert_eq!(
        redis_count(&mut conn, "fills").await,
        2,
        "exactly one survivor filled"
    );
    assert_eq!(values.len(), 1, "{values:?}");
    let fills: u64 = {
        let mut total = 0;
        for worker in &mut survivors {
            total += stats(worker).await.fills;
        }
        total
    };
    assert_eq!(fills, 1);
    eprintln!("takeover after the leader died: {took_over:?} (lease {lease:?})");
    assert!(
        took_over < lease * 3 + Duration::from_secs(2),
        "{took_over:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalidation_during_another_processs_fill_always_wins() {
    const RUNS: usize = 150;
    let server = RedisServer::start();
    let mut conn = redis_conn(&server.url()).await;
    let mut filler = start_worker(&server, Duration::from_secs(3)).await;
    let store = RedisStore::connect(&server.url(), RedisConfig::default())
        .await
        .expect("connect");
    let here = Cache::<String>::builder("procs")
        .store(store)
        .build()
        .expect("config");
    let mut rng = fastrand::Rng::with_seed(0xC0FFEE);
    for run in 0..RUNS {
        let key = format!("race-{run}");
        let started = format!("started-{run}");
        let fill_delay = rng.u64(0..3_000);
        let invalidate_delay = rng.u64(0..3_000);
        filler
            .send(&format!("fill {key} {started} {fill_delay}"))
            .await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while redis_count(&mut conn, &started).await < 1 {
            assert!(
                Instant::now() < deadline,
                "run {run}: the fill never started"
            );
        }
        tokio::time::sleep(Duration::from_micros(invalidate_delay)).await;
        here.invalidate(&key).await.expect("invalidate");
        assert_eq!(filler.expect("@filled").await, "true");
        assert_eq!(
            here.peek(&key).await.expect("get"),
            None,
            "run {run}: the fill that started before the invalidation overwrote it \
             (fill delay {fill_delay} µs, invalidate delay {invalidate_delay} µs)"
        );
    }
}

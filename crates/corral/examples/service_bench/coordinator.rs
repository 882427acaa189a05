//! The coordinator: per scenario and side, empties Redis, starts the
//! replicas, warms them up, measures, and adds up what they and the server
//! report.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context as _;
use corral_testkit::Worker;
use redis::aio::MultiplexedConnection;
use serde::Serialize;

use crate::args::{Args, Scenario, Side};
use crate::histogram::Histogram;
use crate::redis_info::{self, CommandStat};
use crate::replica::{ReplicaConfig, ReplicaReport};

/// How long a replica may take to start, or to answer an order beyond
/// the measured period's cap.
const ANSWER: Duration = Duration::from_secs(600);

/// One side of one scenario, over all its replicas.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SideResult {
    pub(crate) side: &'static str,
    pub(crate) replicas: usize,
    /// Requests answered in the measured period (reads and writes).
    pub(crate) requests: u64,
    pub(crate) writes: u64,
    pub(crate) errors: u64,
    pub(crate) first_error: Option<String>,
    /// The requests over the longest replica's measured period.
    pub(crate) requests_per_sec: f64,
    /// The longest replica's measured period, in seconds.
    pub(crate) secs: f64,
    /// Whether a replica reached the cap (the period is shorter than asked).
    pub(crate) capped: bool,
    pub(crate) p50_us: f64,
    pub(crate) p90_us: f64,
    pub(crate) p99_us: f64,
    pub(crate) p999_us: f64,
    /// Database reads (`SELECT`s).
    pub(crate) db_queries: u64,
    /// The replicas' user + system CPU, in microseconds.
    pub(crate) client_cpu_us: u64,
    /// The server's user + system CPU over the period, in seconds.
    pub(crate) redis_cpu_s: f64,
    /// `INFO commandstats` over the period, by command.
    pub(crate) redis: BTreeMap<String, CommandStat>,
    /// corral's counters that moved, added up over the replicas.
    pub(crate) stats: BTreeMap<String, u64>,
}

impl SideResult {
    pub(crate) fn redis_calls(&self) -> u64 {
        self.redis.values().map(|s| s.calls).sum()
    }

    pub(crate) fn redis_usec(&self) -> u64 {
        self.redis.values().map(|s| s.usec).sum()
    }

    /// The scripts' calls and time (`EVALSHA`, `EVAL`, `FCALL` and their
    /// read-only forms), which include the commands they ran.
    pub(crate) fn script(&self) -> CommandStat {
        let scripts = [
            "evalsha",
            "eval",
            "evalsha_ro",
            "eval_ro",
            "fcall",
            "fcall_ro",
        ];
        let mut total = CommandStat::default();
        for name in scripts {
            let stat = self.redis.get(name).copied().unwrap_or_default();
            total.calls += stat.calls;
            total.usec += stat.usec;
        }
        total
    }

    /// `per` times `n` over the requests (0 without requests).
    pub(crate) fn per_request(&self, n: f64, per: f64) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            n * per / self.requests as f64
        }
    }
}

/// Runs `side` on `scenario`: a fresh Redis (`FLUSHALL`), fresh replicas,
/// the warm-up, then the measured period.
pub(crate) async fn run_side(
    args: &Args,
    scenario: &Scenario,
    side: Side,
    urls: (&str, &str),
    conn: &mut MultiplexedConnection,
) -> anyhow::Result<SideResult> {
    let (redis, db) = urls;
    redis_info::flush(conn).await?;
    let mut replicas = Vec::new();
    for index in 0..args.replicas {
        let config = ReplicaConfig {
            index,
            side,
            scenario: scenario.clone(),
            redis: redis.to_owned(),
            db: db.to_owned(),
            pool: args.pool,
            concurrency: args.concurrency,
            rate: args.rate.map(|rate| rate / args.replicas as f64),
            ttl: args.ttl,
        };
        let exe = std::env::current_exe().context("this example's path")?;
        let mut command = tokio::process::Command::new(exe);
        command.args(["replica", &serde_json::to_string(&config)?]);
        let replica = Worker::spawn(command).await;
        replicas.push(replica.with_context(|| format!("starting replica {index}"))?);
    }
    let share = |total: u64| total.div_ceil(args.replicas as u64);
    let warm = format!("warm {}", share(scenario.warmup));
    order(&mut replicas, &warm, "@warm").await?;
    redis_info::reset_stats(conn).await?;
    let cpu_before = redis_info::server_cpu(conn).await?;
    let cap = args.cap.as_secs_f64();
    let measure = format!("measure {} {cap}", share(scenario.requests));
    let reports = order(&mut replicas, &measure, "@report").await?;
    let redis = redis_info::command_stats(conn).await?;
    let redis_cpu_s = redis_info::server_cpu(conn).await? - cpu_before;
    drop(replicas);
    let mut reports = reports.iter().map(|line| serde_json::from_str(line));
    let reports: Vec<ReplicaReport> = reports.by_ref().collect::<Result<_, _>>()?;
    Ok(add_up(side, &reports, redis, redis_cpu_s))
}

/// Sends `command` to every replica, then reads each one's `answer`.
async fn order(
    replicas: &mut [Worker],
    command: &str,
    answer: &str,
) -> anyhow::Result<Vec<String>> {
    for replica in replicas.iter_mut() {
        replica.tell(command).await.context("a replica exited")?;
    }
    let mut answers = Vec::new();
    for replica in replicas.iter_mut() {
        answers.push(replica.answer(answer, ANSWER).await?);
    }
    Ok(answers)
}

fn add_up(
    side: Side,
    reports: &[ReplicaReport],
    redis: BTreeMap<String, CommandStat>,
    redis_cpu_s: f64,
) -> SideResult {
    let mut latencies = Histogram::default();
    let mut stats = BTreeMap::new();
    for report in reports {
        latencies.merge(&Histogram::from_sparse(&report.latencies));
        for (name, n) in &report.stats {
            *stats.entry(name.clone()).or_insert(0) += n;
        }
    }
    let sum = |f: fn(&ReplicaReport) -> u64| reports.iter().map(f).sum::<u64>();
    let wall_us = reports.iter().map(|r| r.wall_us).max().unwrap_or(0).max(1);
    let requests = sum(|r| r.requests);
    SideResult {
        side: side.label(),
        replicas: reports.len(),
        requests,
        writes: sum(|r| r.writes),
        errors: sum(|r| r.errors),
        first_error: reports.iter().find_map(|r| r.first_error.clone()),
        requests_per_sec: requests as f64 * 1e6 / wall_us as f64,
        secs: wall_us as f64 / 1e6,
        capped: reports.iter().any(|r| r.capped),
        p50_us: latencies.quantile_us(0.5),
        p90_us: latencies.quantile_us(0.9),
        p99_us: latencies.quantile_us(0.99),
        p999_us: latencies.quantile_us(0.999),
        db_queries: sum(|r| r.db_queries),
        client_cpu_us: sum(|r| r.cpu_us),
        redis_cpu_s,
        redis,
        stats,
    }
}

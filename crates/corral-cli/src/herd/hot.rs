//! `corral herd --redis URL --hot-rate R`: one hot key read by N processes
//! at R requests per second each, first through caches with an L1 and the
//! backplane, then through caches that read Redis on every request (L2
//! only), and the Redis commands per second each side cost.
//!
//! With an L1, each process reads Redis about once per TTL (when its copy
//! ends, or when another process's committed refill evicts it), whatever R
//! is; without one, every request is a read. Commands are counted from the
//! server's `INFO commandstats` before and after each side's window (the
//! coordinator's own `INFO` calls left out; the processes' subscriber
//! `PING`s included).

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use corral::{Cache, RedisConfig, RedisStore};

/// Flags of the hot-key run (with `--redis`).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct HotArgs {
    /// Run the hot-key comparison instead of the stampede: each process
    /// reads one key at this many requests per second (with --redis).
    #[arg(long, requires = "redis",
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub(crate) hot_rate: Option<u64>,
    /// Seconds each side of the hot-key run lasts.
    #[arg(long, default_value_t = 5, requires = "hot_rate",
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub(crate) hot_seconds: u64,
    /// TTL of the hot key, in milliseconds.
    #[arg(long, default_value_t = 1000, requires = "hot_rate",
          value_parser = clap::value_parser!(u64).range(10..=3_600_000))]
    pub(crate) hot_ttl_ms: u64,
}

/// Flags of `corral hot-worker` (set by the coordinator).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct HotWorkerArgs {
    #[arg(long)]
    redis: String,
    #[arg(long)]
    rate: u64,
    #[arg(long)]
    seconds: u64,
    #[arg(long)]
    ttl_ms: u64,
    /// Keep an L1 in front of Redis, with the backplane.
    #[arg(long)]
    l1: bool,
    /// The hot key's namespace (cache name), fresh per run.
    #[arg(long)]
    name: String,
}

/// What one worker process did in its window.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct WorkerFigures {
    requests: u64,
    errors: u64,
    hits: u64,
    l2_hits: u64,
    fills: u64,
    backplane_messages: u64,
}

/// One side of the comparison.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct HotSide {
    l1: bool,
    processes: u64,
    rate_per_process: u64,
    seconds: f64,
    requests: u64,
    errors: u64,
    l1_hits: u64,
    l2_hits: u64,
    fills: u64,
    backplane_messages: u64,
    redis_commands: u64,
    redis_commands_per_second: f64,
    /// Commands by name (lower case), as `INFO commandstats` counted them.
    commands: BTreeMap<String, u64>,
}

/// Both sides, L1 + backplane first.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct HotComparison {
    mode: &'static str,
    ttl_ms: u64,
    with_l1: HotSide,
    l2_only: HotSide,
}

impl HotComparison {
    /// The table printed without `--json`.
    pub(crate) fn table(&self) -> String {
        let mut out = format!(
            "one hot key, {} processes x {} requests/s, TTL {} ms, {:.1} s per side\n\n",
            self.with_l1.processes,
            self.with_l1.rate_per_process,
            self.ttl_ms,
            self.with_l1.seconds
        );
        out.push_str(&format!(
            "{:<22} {:>10} {:>10} {:>10} {:>7} {:>14} {:>16}\n",
            "side", "requests", "L1 hits", "L2 hits", "fills", "redis cmds", "redis cmds/s"
        ));
        for (label, side) in [
            ("L1 + backplane", &self.with_l1),
            ("L2 only", &self.l2_only),
        ] {
            out.push_str(&format!(
                "{:<22} {:>10} {:>10} {:>10} {:>7} {:>14} {:>16.1}\n",
                label,
                side.requests,
                side.l1_hits,
                side.l2_hits,
                side.fills,
                side.redis_commands,
                side.redis_commands_per_second
            ));
        }
        let per_ttl = self.with_l1.redis_commands_per_second * self.ttl_ms as f64
            / 1000.0
            / self.with_l1.processes.max(1) as f64;
        out.push_str(&format!(
            "\nwith the L1: {per_ttl:.1} Redis commands per process per TTL (a read is a GET, with \
             PTTL the first time a write is read; each process's subscriber PINGs once a second)\n"
        ));
        out
    }

    /// Errors of both sides.
    pub(crate) fn failures(&self) -> u64 {
        self.with_l1.errors + self.l2_only.errors
    }
}

/// Runs both sides against `url` with `processes` workers.
///
/// # Errors
///
/// If Redis cannot be reached or a worker fails.
pub(crate) async fn run(
    url: &str,
    processes: u64,
    hot: &HotArgs,
    rate: u64,
) -> anyhow::Result<HotComparison> {
    let client = redis::Client::open(url).context("opening the Redis URL")?;
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .context("connecting to Redis")?;
    let run_id = std::process::id();
    let with_l1 = side(url, &mut conn, processes, hot, rate, true, run_id).await?;
    let l2_only = side(url, &mut conn, processes, hot, rate, false, run_id).await?;
    Ok(HotComparison {
        mode: "redis-hot-key",
        ttl_ms: hot.hot_ttl_ms,
        with_l1,
        l2_only,
    })
}

/// One side: starts the workers, waits until all are connected, counts
/// the commands of their window.
async fn side(
    url: &str,
    conn: &mut redis::aio::MultiplexedConnection,
    processes: u64,
    hot: &HotArgs,
    rate: u64,
    l1: bool,
    run_id: u32,
) -> anyhow::Result<HotSide> {
    let name = format!("hot-{run_id}-{}", if l1 { "l1" } else { "l2" });
    let exe = std::env::current_exe().context("finding the corral binary")?;
    let mut workers = Vec::new();
    for _ in 0..processes {
        let mut command = tokio::process::Command::new(&exe);
        command
            .arg("hot-worker")
            .args(["--redis", url, "--name", &name])
            .args(["--rate", &rate.to_string()])
            .args(["--seconds", &hot.hot_seconds.to_string()])
            .args(["--ttl-ms", &hot.hot_ttl_ms.to_string()]);
        if l1 {
            command.arg("--l1");
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("starting a hot-worker process")?;
        let stdin = child.stdin.take().context("worker stdin")?;
        let lines = BufReader::new(child.stdout.take().context("worker stdout")?).lines();
        workers.push((child, stdin, lines));
    }
    for (_, _, lines) in &mut workers {
        expect(lines, "@ready").await?;
    }
    let before = command_stats(conn).await?;
    let started = Instant::now();
    for (_, stdin, _) in &mut workers {
        stdin
            .write_all(b"go\n")
            .await
            .context("starting a worker")?;
        stdin.flush().await.context("starting a worker")?;
    }
    let mut figures = Vec::new();
    for (_, _, lines) in &mut workers {
        let report = expect(lines, "@report").await?;
        figures.push(serde_json::from_str::<WorkerFigures>(&report).context("a worker's report")?);
    }
    let seconds = started.elapsed().as_secs_f64();
    let after = command_stats(conn).await?;
    for (mut child, _, _) in workers {
        child.wait().await.context("waiting for a worker")?;
    }
    let mut commands = BTreeMap::new();
    for (name, calls) in &after {
        let delta = calls.saturating_sub(before.get(name).copied().unwrap_or(0));
        // The coordinator's own INFO calls are not the workers'.
        if delta > 0 && name != "info" {
            commands.insert(name.clone(), delta);
        }
    }
    let redis_commands: u64 = commands.values().sum();
    let sum = |f: fn(&WorkerFigures) -> u64| figures.iter().map(f).sum::<u64>();
    let (hits, l2_hits) = (sum(|f| f.hits), sum(|f| f.l2_hits));
    Ok(HotSide {
        l1,
        processes,
        rate_per_process: rate,
        seconds,
        requests: sum(|f| f.requests),
        errors: sum(|f| f.errors),
        l1_hits: hits.saturating_sub(l2_hits),
        l2_hits,
        fills: sum(|f| f.fills),
        backplane_messages: sum(|f| f.backplane_messages),
        redis_commands,
        redis_commands_per_second: redis_commands as f64 / seconds,
        commands,
    })
}

/// The rest of the next line of `lines` that starts with `prefix`.
async fn expect(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    prefix: &str,
) -> anyhow::Result<String> {
    let read = async {
        while let Some(line) = lines.next_line().await.context("reading a worker")? {
            if let Some(rest) = line.strip_prefix(prefix) {
                return Ok(rest.trim().to_owned());
            }
        }
        anyhow::bail!("a worker exited before saying {prefix}")
    };
    tokio::time::timeout(Duration::from_secs(3600), read)
        .await
        .context("a worker stalled")?
}

/// Calls per command from `INFO commandstats`.
async fn command_stats(
    conn: &mut redis::aio::MultiplexedConnection,
) -> anyhow::Result<BTreeMap<String, u64>> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .context("INFO commandstats")?;
    let mut stats = BTreeMap::new();
    for line in info.lines() {
        let Some((name, fields)) = line
            .strip_prefix("cmdstat_")
            .and_then(|rest| rest.split_once(':'))
        else {
            continue;
        };
        let calls = fields
            .split(',')
            .find_map(|field| field.strip_prefix("calls="))
            .and_then(|calls| calls.parse::<u64>().ok());
        if let Some(calls) = calls {
            stats.insert(name.to_owned(), calls);
        }
    }
    Ok(stats)
}

/// Runs one worker: connects, says `@ready`, waits for `go`, reads the hot
/// key at the rate for the window, then prints `@report` with its figures.
///
/// # Errors
///
/// If Redis cannot be reached or the cache cannot be built.
pub(crate) fn run_worker(args: HotWorkerArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(async {
        let store = RedisStore::connect(&args.redis, RedisConfig::default())
            .await
            .context("connecting to Redis")?;
        let cache = Cache::<String>::builder(&args.name)
            .store(store)
            .l1(args.l1)
            .ttl(Duration::from_millis(args.ttl_ms))
            .build()
            .context("building the cache")?;
        println!("@ready");
        let mut go = String::new();
        BufReader::new(tokio::io::stdin())
            .read_line(&mut go)
            .await
            .context("waiting for go")?;

        let period = Duration::from_secs_f64(1.0 / args.rate as f64);
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let window = Duration::from_secs(args.seconds);
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
        let figures = WorkerFigures {
            requests,
            errors,
            hits: stats.hits,
            l2_hits: stats.l2_hits,
            fills: stats.fills,
            backplane_messages: stats.backplane_messages,
        };
        println!("@report {}", serde_json::to_string(&figures)?);
        Ok(())
    })
}

//! `corral`: the stampede demo of the corral cache. `corral herd` runs a
//! stampede — many concurrent callers on a few cold keys — through corral
//! and through a naive cache-aside, side by side, and reports how many
//! times each one called the source of truth.
//!
//! - [`scenario`]: the caches under test and the callers of a round,
//!   released together; [`source`]: the source of truth they fill from
//!   (SQLite behind a bounded pool, or sleeping), counted;
//! - [`local`]: both sides in this process: the default run, and
//!   `--outage`, the source failing for a while (fail-safe);
//! - [`redis`]: `--redis URL --processes N`, both sides in worker
//!   processes sharing Redis, their fills calling one source server;
//! - [`report`]: the figures as a table or JSON; [`plot`]: each side over
//!   time, as a picture and as sparklines.

#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]
#![forbid(unsafe_code)]

mod local;
mod plot;
mod redis;
mod report;
mod scenario;
mod source;

use std::path::PathBuf;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

/// The `corral` command line: its subcommands.
#[derive(Debug, clap::Parser)]
#[command(name = "corral", version, about = "The corral cache's stampede demo")]
enum Cli {
    /// Runs a stampede of concurrent callers on cold keys through corral and
    /// through a naive cache-aside, and compares fills and latencies.
    Herd(HerdArgs),
    /// One worker process of `corral herd --redis` (started by it, with its
    /// config as JSON; takes orders on stdin, answers on stdout).
    #[command(hide = true)]
    HerdWorker {
        /// The worker's config, as JSON.
        config: String,
    },
}

fn main() -> anyhow::Result<()> {
    match <Cli as clap::Parser>::parse() {
        Cli::Herd(args) => herd(args),
        Cli::HerdWorker { config } => redis::run_worker(&config),
    }
}

/// Flags of `corral herd` (a worker process gets them as JSON).
#[derive(Debug, Clone, clap::Args, Serialize, Deserialize)]
struct HerdArgs {
    /// Concurrent callers per round (caller i asks for key i % keys).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    callers: u64,
    /// Cold keys per round.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    keys: u64,
    /// How long one call of the sleeping source of truth takes, in
    /// milliseconds (with --redis or --outage; the default run queries
    /// SQLite instead).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(0..=600_000))]
    fill_ms: u64,
    /// Rounds; each round asks for fresh keys, so every round starts cold.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    rounds: u64,
    /// Print the figures as one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Also draw both sides over time to this SVG file: calls at the
    /// source, callers answered and failed.
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
    /// Run the outage scenario instead: the source fails for `--rounds`
    /// rounds between a good round and a recovered one; corral serves the
    /// last good value (fail-safe) while the naive cache-aside fails.
    #[arg(long, conflicts_with = "redis")]
    outage: bool,
    /// corral's fill budget, the most fills at once against the source
    /// (0: none) [default: the pool's size; with --redis: none]. With
    /// --redis it is each process's, unless --fleet.
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    budget: Option<u64>,
    /// Default run: callers ask for keys Zipf-distributed with this
    /// exponent (key k with weight 1/k^s, drawn with a fixed seed), so a
    /// few keys are hot and many cold; 0 (the default): caller i asks for
    /// key i % keys.
    #[arg(long, default_value_t = 0.0)]
    zipf: f64,
    /// Default run: corral's fill budget adapts by itself between 1 and
    /// this, starting from --budget (`FillBudget::adaptive`).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    adaptive_max: Option<u64>,
    /// Default run: the SQLite file to create and seed (its `users` and
    /// `orders` tables are replaced) [default: a file in a fresh temporary
    /// directory].
    #[arg(long, value_name = "PATH")]
    db: Option<PathBuf>,
    /// Default run: orders to seed; each fill's query scans all of them.
    #[arg(long, default_value_t = 400_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    rows: u64,
    /// Default run: users the orders belong to; each key names one of them.
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    users: u64,
    /// Default run: connections in the SQLite pool of each side.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pool_size: u64,
    /// Default run: how long a call waits for a pooled connection before
    /// it gives up (counted as a timeout), in milliseconds.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pool_wait_ms: u64,
    /// Run the stampede across --processes OS processes sharing this Redis
    /// (e.g. redis://127.0.0.1:6379/) instead of in this process.
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
    /// Worker processes per side (with --redis); caller i runs in process
    /// (i / keys) % processes, so every process asks for every key.
    #[arg(long, default_value_t = 4, requires = "redis",
          value_parser = clap::value_parser!(u64).range(1..=256))]
    processes: u64,
    /// With --redis and --budget: one fill budget for every process,
    /// counted in Redis (`FillBudget::fleet`), instead of one per process.
    #[arg(long, requires = "budget")]
    fleet: bool,
    /// With --redis: SIGKILL corral's worker 0 while one of its fills runs
    /// at the source, in the first measured round; its leases and fleet
    /// permits lapse within the lease TTL (3 s) and the other processes'
    /// callers are still answered (its own callers are not counted).
    #[arg(long, requires = "redis")]
    kill_one: bool,
}

/// Runs `corral herd`: prints the table and sparklines, or the JSON with
/// `--json`, and draws the picture with `--plot`; fails on invalid flags, a
/// runtime that cannot start, Redis or a worker process that fails, a
/// caller task that panicked, or corral's calls that failed (reported after
/// the figures).
fn herd(mut args: HerdArgs) -> anyhow::Result<()> {
    let (keys, callers, zipf) = (args.keys, args.callers, args.zipf);
    anyhow::ensure!(
        keys <= callers,
        "--keys {keys} is more than --callers {callers}: some keys would never be asked for",
    );
    anyhow::ensure!(
        zipf.is_finite() && (0.0..=10.0).contains(&zipf),
        "--zipf {zipf} is not an exponent from 0 to 10",
    );
    // The outage's callers ask for their keys in turn.
    args.zipf = if args.outage { 0.0 } else { zipf };
    let runtime = tokio::runtime::Runtime::new().context("starting the tokio runtime")?;
    let report = runtime.block_on(async {
        match &args.redis {
            _ if args.outage => local::outage(&args).await,
            Some(url) => redis::run(url, &args).await,
            None => local::run(&args).await,
        }
    })?;
    if args.json {
        let json = serde_json::to_string(&report).context("encoding the report as JSON")?;
        println!("{json}");
    } else {
        print!("{}\n{}", report.table(), plot::sparklines(report.sides()));
    }
    if let Some(path) = &args.plot {
        let drawn = report.plot(path);
        drawn.with_context(|| format!("drawing {}", path.display()))?;
    }
    match report.corral.failures {
        0 => Ok(()),
        failed => anyhow::bail!("{failed} of corral's calls failed (see the report)"),
    }
}

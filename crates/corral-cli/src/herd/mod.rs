//! `corral herd`: a stampede on cold keys, through corral and through a
//! naive cache-aside, side by side.
//!
//! - [`scenario`]: the sources, the two caches under test, and the callers
//!   of one round, released together;
//! - [`embedded`]: both sides in this process over [`sqlite`], a seeded
//!   SQLite file behind a bounded pool (the default);
//! - [`redis`]: `--redis URL --processes N`, both sides in worker
//!   processes ([`worker`]) sharing Redis;
//! - [`outage`]: `--outage`, the source failing for a while (fail-safe);
//! - [`timeline`]: each side over time, in 10 ms buckets;
//! - [`report`]: the figures, the tables and the JSON; [`plot`]: the
//!   picture (`--plot FILE`) and the terminal's sparklines.

mod embedded;
mod outage;
mod plot;
mod redis;
mod remote;
mod report;
mod scenario;
mod sqlite;
mod timeline;
mod worker;

pub(crate) use worker::run as run_worker;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;

use report::Report;
use scenario::Scenario;

/// Flags of `corral herd`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct HerdArgs {
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
    #[command(flatten)]
    sqlite: sqlite::SqliteArgs,
    #[command(flatten)]
    redis: redis::RedisArgs,
}

/// Runs `corral herd`: prints the table, or the JSON with `--json`; fails on
/// invalid flags, a runtime that cannot start, Redis or a worker process that
/// fails, a caller task that panicked, or calls that failed (reported after the
/// figures).
pub(crate) fn run(args: HerdArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.keys <= args.callers,
        "--keys {} is more than --callers {}: some keys would never be asked for",
        args.keys,
        args.callers
    );
    let scenario = Scenario {
        callers: args.callers,
        keys: args.keys,
        rounds: args.rounds,
        fill: Duration::from_millis(args.fill_ms),
    };
    let runtime = tokio::runtime::Runtime::new().context("starting the tokio runtime")?;
    if args.outage {
        let report = runtime.block_on(outage::run(scenario));
        return emit(&report?, &args);
    }
    let report = match &args.redis.redis {
        None => {
            anyhow::ensure!(
                args.zipf.is_finite() && (0.0..=10.0).contains(&args.zipf),
                "--zipf {} is not an exponent from 0 to 10",
                args.zipf
            );
            let shape = embedded::Shape {
                budget: args.budget,
                zipf: args.zipf,
                adaptive_max: args.adaptive_max,
            };
            runtime.block_on(embedded::run(scenario, args.sqlite.clone(), shape))
        }
        Some(url) => {
            let fleet = redis::Fleet {
                processes: args.redis.processes,
                budget: args.budget.unwrap_or(0),
                fleet: args.redis.fleet,
                upset: if args.redis.kill_one {
                    redis::Upset::KillOne
                } else {
                    redis::Upset::None
                },
            };
            runtime.block_on(redis::run(url, fleet, scenario))
        }
    };
    emit(&report?, &args)
}

/// Prints `report` as one line of JSON or as its table and sparklines, and
/// draws it with `--plot`; fails, after printing, if any call failed.
fn emit<R: Report>(report: &R, args: &HerdArgs) -> anyhow::Result<()> {
    let picture = report.picture();
    if args.json {
        let json = serde_json::to_string(report).context("encoding the report as JSON")?;
        println!("{json}");
    } else {
        print!("{}\n{}", report.table(), plot::sparklines(picture.sides));
    }
    if let Some(path) = &args.plot {
        plot::svg(&picture, path).with_context(|| format!("drawing {}", path.display()))?;
    }
    let failures = report.failures();
    anyhow::ensure!(failures == 0, "{failures} calls failed (see the report)");
    Ok(())
}

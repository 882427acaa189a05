//! `corral herd`: a stampede on cold keys, through corral and through a
//! naive cache-aside, side by side.
//!
//! - [`scenario`]: the callers of one round released together, what they
//!   measured, and the sleeping source of the Redis and outage runs;
//! - [`sqlite`]: the default run's source of truth, a seeded SQLite file
//!   behind a bounded connection pool;
//! - [`embedded`]: both sides in this process (the default);
//! - [`shared`]: `--redis URL[,URL...] --processes N` (several URLs: a
//!   Redis Cluster, see [`redis_conn`]), the stampede across worker
//!   processes ([`worker`]) sharing Redis, coordinated over [`wire`], with
//!   round trips and commits observed by [`metered`];
//! - [`outage`]: `--outage`, the source failing for a while (fail-safe);
//! - [`report`], [`shared_report`]: the figures, the tables and the JSON.

mod embedded;
mod hot;
mod metered;
mod outage;
mod redis_conn;
mod report;
mod scenario;
mod shared;
mod shared_report;
mod sqlite;
mod wire;
mod worker;

pub(crate) use hot::HotWorkerArgs;
pub(crate) use worker::WorkerArgs;

use std::io::IsTerminal as _;
use std::time::Duration;

use anyhow::Context as _;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

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
    /// Run the outage scenario instead: the source fails for `--rounds`
    /// rounds between a good round and a recovered one; corral serves the
    /// last good value (fail-safe) while the naive cache-aside fails.
    #[arg(long, conflicts_with = "redis")]
    outage: bool,
    /// Worker threads of the tokio runtime (of each process) [default: one
    /// per CPU].
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,
    #[command(flatten)]
    sqlite: sqlite::SqliteArgs,
    #[command(flatten)]
    shared: shared::SharedArgs,
    #[command(flatten)]
    hot: hot::HotArgs,
}

impl HerdArgs {
    fn scenario(&self) -> anyhow::Result<Scenario> {
        anyhow::ensure!(
            self.keys <= self.callers,
            "--keys {} is more than --callers {}: some keys would never be asked for",
            self.keys,
            self.callers
        );
        Ok(Scenario {
            callers: self.callers,
            keys: self.keys,
            rounds: self.rounds,
            fill: Duration::from_millis(self.fill_ms),
        })
    }
}

/// Runs `corral herd`: prints the table, or the JSON with `--json`.
///
/// # Errors
///
/// Invalid flags, a runtime that cannot start, Redis or a worker process
/// that fails, a caller task that panicked, or calls that failed (reported
/// after the figures).
pub(crate) fn run(args: HerdArgs) -> anyhow::Result<()> {
    let scenario = args.scenario()?;
    let runtime = runtime(args.threads)?;
    if args.outage {
        let progress = Progress::new(scenario.rounds * 2 + 4, !args.json);
        let report = runtime.block_on(outage::run(scenario, &progress));
        progress.finish();
        return emit(&report?, args.json);
    }
    if let (Some(url), Some(rate)) = (&args.shared.redis, args.hot.hot_rate) {
        anyhow::ensure!(
            !redis_conn::is_cluster(url),
            "--hot-rate runs on one Redis server; --redis names several (a cluster)"
        );
        let comparison = runtime.block_on(hot::run(url, args.shared.processes, &args.hot, rate))?;
        if args.json {
            let line = serde_json::to_string(&comparison).context("encoding the report as JSON")?;
            println!("{line}");
        } else {
            print!("{}", comparison.table());
        }
        let failures = comparison.failures();
        anyhow::ensure!(failures == 0, "{failures} requests failed (see the report)");
        return Ok(());
    }
    match &args.shared.redis {
        None => {
            let progress = Progress::new(scenario.rounds * 2, !args.json);
            let comparison = runtime.block_on(embedded::run(scenario, &args.sqlite, &progress));
            progress.finish();
            emit(&comparison?, args.json)
        }
        Some(url) => {
            let sides = args.shared.wake.sides();
            let progress = Progress::new(scenario.rounds * sides, !args.json);
            let comparison = runtime.block_on(shared::run(
                url,
                &args.shared,
                scenario,
                args.threads,
                &progress,
            ));
            progress.finish();
            emit(&comparison?, args.json)
        }
    }
}

/// Prints `report` as one line of JSON or as its table; fails, after
/// printing, if any call failed.
fn emit<R: Report>(report: &R, json: bool) -> anyhow::Result<()> {
    if json {
        let line = serde_json::to_string(report).context("encoding the report as JSON")?;
        println!("{line}");
    } else {
        print!("{}", report.table());
    }
    let failures = report.failures();
    anyhow::ensure!(failures == 0, "{failures} calls failed (see the report)");
    Ok(())
}

/// Runs one worker process of `corral herd --redis --hot-rate`.
///
/// # Errors
///
/// See [`hot::run_worker`].
pub(crate) fn run_hot_worker(args: HotWorkerArgs) -> anyhow::Result<()> {
    hot::run_worker(args)
}

/// Runs one worker process of `corral herd --redis`.
///
/// # Errors
///
/// See [`worker::run`].
pub(crate) fn run_worker(args: WorkerArgs) -> anyhow::Result<()> {
    worker::run(args)
}

/// A multi-thread tokio runtime with `threads` workers (default: one per CPU).
fn runtime(threads: Option<u16>) -> anyhow::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    if let Some(threads) = threads {
        builder.worker_threads(usize::from(threads));
    }
    builder.build().context("starting the tokio runtime")
}

/// A progress bar over rounds on stderr; hidden when not wanted or when
/// stdout or stderr is not a terminal.
pub(crate) struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar of `rounds` steps, drawn only if `visible` and both stdout and
    /// stderr are terminals.
    pub(crate) fn new(rounds: u64, visible: bool) -> Self {
        if !visible || !std::io::stdout().is_terminal() || !std::io::stderr().is_terminal() {
            return Self {
                bar: ProgressBar::hidden(),
            };
        }
        let bar = ProgressBar::with_draw_target(Some(rounds), ProgressDrawTarget::stderr());
        if let Ok(style) =
            ProgressStyle::with_template("{spinner} [{bar:30}] {pos}/{len} rounds  {msg}")
        {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.enable_steady_tick(Duration::from_millis(80));
        Self { bar }
    }

    /// Announces round `round` (from 0) of `rounds` of `label`.
    pub(crate) fn round(&self, label: &str, round: u64, rounds: u64) {
        self.bar
            .set_message(format!("{label}: round {} of {rounds}", round + 1));
    }

    /// Shows what is happening between rounds.
    pub(crate) fn note(&self, message: &str) {
        self.bar.set_message(message.to_owned());
    }

    /// Marks a round done.
    pub(crate) fn done_round(&self) {
        self.bar.inc(1);
    }

    /// Removes the bar.
    pub(crate) fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

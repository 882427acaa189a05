//! `corral herd --redis URL --processes N`: the stampede across OS
//! processes that share one Redis, corral against a naive cache-aside on
//! Redis.
//!
//! For each side, this process starts N `corral herd-worker` processes of
//! the same binary (through `corral-testkit`'s [`Worker`]). Caller `i` of a
//! round asks for key `i % keys` and runs in worker `(i / keys) % N`, so
//! every worker asks for every key. Each round, every worker arms its
//! callers (spawned, waiting at a gate), then all are released together and
//! report what they measured and how often they called the source. An
//! uncounted warm-up round first opens connections and subscriptions. The
//! commands each side cost are read from `INFO commandstats` around its
//! rounds.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use corral_testkit::Worker;

use super::report::{Comparison, Setting, SideReport};
use corral_testkit::{micros, Tally};

use super::scenario::Scenario;
use super::worker::{ProcessRound, SideKind};

/// Flags of `corral herd` for the run across processes.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct RedisArgs {
    /// Run the stampede across --processes OS processes sharing this Redis
    /// (e.g. redis://127.0.0.1:6379/) instead of in this process.
    #[arg(long, value_name = "URL")]
    pub(crate) redis: Option<String>,
    /// Worker processes per side (with --redis); caller i runs in process
    /// (i / keys) % processes, so every process asks for every key.
    #[arg(long, default_value_t = 4, requires = "redis",
          value_parser = clap::value_parser!(u64).range(1..=256))]
    pub(crate) processes: u64,
}

/// Runs the scenario through corral, then through the naive cache-aside,
/// each side in its own worker processes.
///
/// # Errors
///
/// If Redis cannot be reached, or a worker cannot start, fails or stalls.
pub(crate) async fn run(
    url: &str,
    processes: u64,
    scenario: Scenario,
    threads: Option<u16>,
) -> anyhow::Result<Comparison> {
    anyhow::ensure!(
        processes.saturating_mul(scenario.keys) <= scenario.callers,
        "--processes {processes} × --keys {} is more than --callers {}: not every process could ask for every key",
        scenario.keys,
        scenario.callers
    );
    let mut stats = CommandStats::connect(url).await?;
    let run = format!("{:x}-{:x}", std::process::id(), fastrand::u64(..));
    let side = |kind| Side {
        url,
        kind,
        run: &run,
        processes,
        scenario,
        threads,
    };
    let corral = side(SideKind::Corral).run(&mut stats).await?;
    let naive = side(SideKind::Naive).run(&mut stats).await?;
    let setting = Setting::Redis {
        processes,
        fill_ms: u64::try_from(scenario.fill.as_millis()).unwrap_or(u64::MAX),
    };
    Ok(Comparison::new(scenario, setting, corral, naive))
}

/// One side's run: its workers, rounds and figures.
struct Side<'a> {
    url: &'a str,
    kind: SideKind,
    run: &'a str,
    processes: u64,
    scenario: Scenario,
    threads: Option<u16>,
}

impl Side<'_> {
    async fn run(&self, stats: &mut CommandStats) -> anyhow::Result<SideReport> {
        let mut workers = Vec::new();
        for index in 0..self.processes {
            workers.push(self.spawn(index).await?);
        }
        self.play(&mut workers, "warm-up").await?;
        let before = stats.read().await?;
        let (mut tally, mut fills) = (Tally::default(), 0);
        for round in 0..self.scenario.rounds {
            let (round, round_fills) = self.play(&mut workers, &format!("r{round}")).await?;
            tally.absorb(round);
            fills += round_fills;
        }
        let mut report = SideReport::new(self.kind.name(), self.scenario, fills, tally);
        report.redis_commands = Some(commands_since(&stats.read().await?, &before));
        Ok(report)
    }

    /// Starts worker `index` and waits until it is connected.
    async fn spawn(&self, index: u64) -> anyhow::Result<Worker> {
        let exe = std::env::current_exe().context("finding the corral binary")?;
        let mut command = tokio::process::Command::new(exe);
        command
            .args([
                "herd-worker",
                "--redis",
                self.url,
                "--side",
                self.kind.name(),
            ])
            .args(["--run", &format!("{}:{}", self.run, self.kind.name())])
            .args([
                "--index",
                &index.to_string(),
                "--processes",
                &self.processes.to_string(),
            ])
            .args(["--callers", &self.scenario.callers.to_string()])
            .args(["--keys", &self.scenario.keys.to_string()])
            .args(["--fill-ms", &self.scenario.fill.as_millis().to_string()]);
        if let Some(threads) = self.threads {
            command.args(["--threads", &threads.to_string()]);
        }
        Worker::spawn(command).await.with_context(|| {
            format!(
                "starting {} worker {index} (its error is above)",
                self.kind.name()
            )
        })
    }

    /// Arms every worker on the round `label`, releases them together and
    /// puts their reports together: the round's tally (its wall from the
    /// release to the last report, as this process saw it) and its fills.
    async fn play(&self, workers: &mut [Worker], label: &str) -> anyhow::Result<(Tally, u64)> {
        let arm = format!("arm {label}");
        for worker in workers.iter_mut() {
            worker.tell(&arm).await.context("arming a worker")?;
        }
        for worker in workers.iter_mut() {
            let armed = worker.answer("@armed", Duration::from_secs(30)).await;
            armed.context("arming a worker")?;
        }
        let started = Instant::now();
        for worker in workers.iter_mut() {
            worker.tell("go").await.context("releasing a worker")?;
        }
        let within = self.scenario.fill * 2 + Duration::from_secs(120);
        let (mut tally, mut fills) = (Tally::default(), 0);
        for worker in workers.iter_mut() {
            let line = worker
                .answer("@report", within)
                .await
                .context("a worker's round")?;
            let report: ProcessRound = serde_json::from_str(&line).context("a worker's report")?;
            fills += report.fills;
            tally.absorb(Tally {
                wall_us: 0,
                ..report.tally
            });
        }
        tally.wall_us = micros(started.elapsed());
        Ok((tally, fills))
    }
}

/// Calls per command, from one server's `INFO commandstats`.
struct CommandStats(redis::aio::MultiplexedConnection);

impl CommandStats {
    async fn connect(url: &str) -> anyhow::Result<Self> {
        let client = redis::Client::open(url).context("parsing the Redis URL")?;
        let conn = client.get_multiplexed_async_connection().await;
        Ok(Self(conn.context("connecting to Redis")?))
    }

    async fn read(&mut self) -> anyhow::Result<BTreeMap<String, u64>> {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut self.0)
            .await
            .context("INFO commandstats")?;
        Ok(parse_command_stats(&info))
    }
}

/// `cmdstat_get:calls=12,usec=...` lines as command → calls.
fn parse_command_stats(info: &str) -> BTreeMap<String, u64> {
    info.lines()
        .filter_map(|line| {
            let (name, fields) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = fields.split(',').find_map(|f| f.strip_prefix("calls="))?;
            Some((name.to_owned(), calls.parse().ok()?))
        })
        .collect()
}

/// Commands run between two readings, but this process's own `INFO` calls.
fn commands_since(after: &BTreeMap<String, u64>, before: &BTreeMap<String, u64>) -> u64 {
    after
        .iter()
        .filter(|(name, _)| *name != "info")
        .map(|(name, calls)| calls.saturating_sub(before.get(name).copied().unwrap_or(0)))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_commands_since_a_reading_without_info() {
        let before = parse_command_stats(
            "# Commandstats\r\ncmdstat_get:calls=10,usec=5\r\ncmdstat_info:calls=1,usec=9\r\n",
        );
        let after = parse_command_stats("cmdstat_get:calls=15,usec=8\r\ncmdstat_set:calls=2,usec=1\r\ncmdstat_info:calls=3,usec=9\r\n");
        assert_eq!(after.get("get"), Some(&15));
        assert_eq!(commands_since(&after, &before), 5 + 2);
    }
}

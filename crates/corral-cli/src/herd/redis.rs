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

use std::time::{Duration, Instant};

use anyhow::Context as _;
use corral_testkit::{micros, Tally, Worker};

use super::report::{Comparison, Setting, SideReport};
use super::scenario::Scenario;
use super::worker::{ProcessRound, SideKind, WorkerConfig};

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

/// Runs the scenario through corral, then through the naive cache-aside, each
/// side in its own worker processes; fails if Redis cannot be reached, or a
/// worker cannot start, fails or stalls.
pub(crate) async fn run(
    redis: &str,
    processes: u64,
    scenario: Scenario,
) -> anyhow::Result<Comparison> {
    anyhow::ensure!(
        processes.saturating_mul(scenario.keys) <= scenario.callers,
        "--processes {processes} × --keys {} is more than --callers {}: not every process could ask for every key",
        scenario.keys,
        scenario.callers
    );
    let mut commands = CommandCount::connect(redis).await?;
    let run = format!("{:x}-{:x}", std::process::id(), fastrand::u64(..));
    let mut sides = [SideKind::Corral, SideKind::Naive].map(|side| WorkerConfig {
        redis: redis.to_owned(),
        side,
        run: format!("{run}:{side:?}"),
        index: 0,
        processes,
        scenario,
    });
    let [corral, naive] = &mut sides;
    let corral = play_side(corral, &mut commands).await?;
    let naive = play_side(naive, &mut commands).await?;
    let fill_ms = u64::try_from(scenario.fill.as_millis()).unwrap_or(u64::MAX);
    let setting = Setting::Redis { processes, fill_ms };
    Ok(Comparison::new(scenario, setting, corral, naive))
}

/// One side's run: starts its workers, plays an uncounted warm-up round and
/// the measured ones, and reads the commands they cost.
async fn play_side(
    config: &mut WorkerConfig,
    commands: &mut CommandCount,
) -> anyhow::Result<SideReport> {
    let exe = std::env::current_exe().context("finding the corral binary")?;
    let mut workers = Vec::new();
    for index in 0..config.processes {
        config.index = index;
        let mut command = tokio::process::Command::new(&exe);
        command
            .arg("herd-worker")
            .arg(serde_json::to_string(config)?);
        let worker = Worker::spawn(command).await;
        workers
            .push(worker.with_context(|| format!("starting worker {index} (its error is above)"))?);
    }
    let within = config.scenario.fill * 2 + Duration::from_secs(120);
    play(&mut workers, "warm-up", within).await?;
    let before = commands.read().await?;
    let (mut tally, mut fills) = (Tally::default(), 0);
    for round in 0..config.scenario.rounds {
        let (round, round_fills) = play(&mut workers, &format!("r{round}"), within).await?;
        tally.absorb(round);
        fills += round_fills;
    }
    let side = if config.side == SideKind::Corral {
        "corral"
    } else {
        "naive"
    };
    let mut report = SideReport::new(side, config.scenario, fills, tally);
    report.redis_commands = Some(commands.read().await? - before);
    Ok(report)
}

/// Arms every worker on the round `label`, releases them together and puts
/// their reports together: the round's tally (its wall from the release to
/// the last report, as this process saw it) and its fills.
async fn play(
    workers: &mut [Worker],
    label: &str,
    within: Duration,
) -> anyhow::Result<(Tally, u64)> {
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

/// The commands one Redis server ran so far, from `INFO commandstats`,
/// but `INFO` itself (which this process sends).
struct CommandCount(redis::aio::MultiplexedConnection);

impl CommandCount {
    async fn connect(url: &str) -> anyhow::Result<Self> {
        let client = redis::Client::open(url).context("parsing the Redis URL")?;
        let conn = client.get_multiplexed_async_connection().await;
        Ok(Self(conn.context("connecting to Redis")?))
    }

    async fn read(&mut self) -> anyhow::Result<u64> {
        let info: redis::RedisResult<String> = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut self.0)
            .await;
        Ok(count_commands(&info.context("INFO commandstats")?))
    }
}

/// The calls of `cmdstat_<name>:calls=N,...` lines, but `INFO`'s.
fn count_commands(info: &str) -> u64 {
    let counts = info.lines().filter_map(|line| {
        let (name, fields) = line.strip_prefix("cmdstat_")?.split_once(':')?;
        let calls = fields.split(',').find_map(|f| f.strip_prefix("calls="))?;
        (name != "info").then(|| calls.parse::<u64>().ok())?
    });
    counts.sum()
}

#[cfg(test)]
mod tests {
    #[test]
    fn counts_every_command_but_info() {
        let info = "# Commandstats\r\ncmdstat_get:calls=10,usec=5\r\n\
                    cmdstat_info:calls=3,usec=9\r\ncmdstat_set:calls=2,usec=1,usec_per_call=0.5\r\n";
        assert_eq!(super::count_commands(info), 12);
    }
}

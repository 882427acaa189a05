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

use super::remote::SourceServer;
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
    /// With --redis and --budget: one fill budget for every process,
    /// counted in Redis (`FillBudget::fleet`), instead of one per process.
    #[arg(long, requires = "budget")]
    pub(crate) fleet: bool,
    /// With --redis: SIGKILL corral's worker 0 while one of its fills runs
    /// at the source, in the first measured round; its leases and fleet
    /// permits lapse within the lease TTL (3 s) and the other processes'
    /// callers are still answered (its own callers are not counted).
    #[arg(long, requires = "redis")]
    pub(crate) kill_one: bool,
}

/// How corral's side of a run across processes is set up.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fleet {
    pub(crate) processes: u64,
    /// Each process's fill budget (0: none).
    pub(crate) budget: u64,
    /// Whether the budget is one fleet budget.
    pub(crate) fleet: bool,
    /// What befalls corral's side in its first measured round.
    pub(crate) upset: Upset,
}

/// What befalls a side while its first measured round runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Upset {
    /// Nothing.
    None,
    /// Worker 0 is killed (SIGKILL) while one of its fills runs at the
    /// source: a process holding leases and fleet permits mid-fill. Its
    /// callers are not counted, in any round.
    KillOne,
}

/// Runs the scenario through corral, then through the naive cache-aside, each
/// side in its own worker processes; fails if Redis cannot be reached, or a
/// worker cannot start, fails or stalls.
pub(crate) async fn run(
    redis: &str,
    fleet: Fleet,
    scenario: Scenario,
) -> anyhow::Result<Comparison> {
    let processes = fleet.processes;
    let source = SourceServer::start(scenario.fill).await?;
    anyhow::ensure!(
        processes.saturating_mul(scenario.keys) <= scenario.callers,
        "--processes {processes} × --keys {} is more than --callers {}: not every process could ask for every key",
        scenario.keys,
        scenario.callers
    );
    let mut commands = CommandCount::connect(redis).await?;
    let run = format!("{:x}-{:x}", std::process::id(), fastrand::u64(..));
    let side = |side, budget| WorkerConfig {
        redis: redis.to_owned(),
        side,
        run: format!("{run}:{side:?}"),
        index: 0,
        processes,
        scenario,
        source: source.addr(),
        budget,
        fleet: fleet.fleet,
    };
    let corral = side(SideKind::Corral, fleet.budget);
    let corral = play_side(corral, &mut commands, &source, fleet.upset).await?;
    let naive = side(SideKind::Naive, 0);
    let naive = play_side(naive, &mut commands, &source, Upset::None).await?;
    let fill_ms = u64::try_from(scenario.fill.as_millis()).unwrap_or(u64::MAX);
    let (budget, fleet) = (fleet.budget, fleet.fleet);
    let setting = Setting::Redis {
        processes,
        fill_ms,
        budget,
        fleet,
    };
    Ok(Comparison::new(scenario, setting, corral, naive))
}

/// One side's run: starts its workers, plays an uncounted warm-up round and
/// the measured ones, and reads the commands they cost.
async fn play_side(
    mut config: WorkerConfig,
    commands: &mut CommandCount,
    source: &SourceServer,
    upset: Upset,
) -> anyhow::Result<SideReport> {
    let exe = std::env::current_exe().context("finding the corral binary")?;
    let mut workers = Vec::new();
    for index in 0..config.processes {
        config.index = index;
        let mut command = tokio::process::Command::new(&exe);
        command
            .arg("herd-worker")
            .arg(serde_json::to_string(&config)?);
        let worker = Worker::spawn(command).await;
        let worker =
            worker.with_context(|| format!("starting worker {index} (its error is above)"));
        workers.push(worker?);
    }
    let Scenario {
        callers,
        keys,
        rounds,
        fill,
    } = config.scenario;
    let within = fill * 2 + Duration::from_secs(120);
    play(&mut workers, "warm-up", within, source, Upset::None).await?;
    source.take();
    let before = commands.read().await?;
    let mut tally = Tally::default();
    for round in 0..rounds {
        let upset = if round == 0 { upset } else { Upset::None };
        tally.absorb(play(&mut workers, &format!("r{round}"), within, source, upset).await?);
    }
    // Counted by the source itself, a killed worker's calls included.
    let (fills, timeline) = source.take();
    let mut report = SideReport::new(config.side.name(), config.scenario, fills, tally, timeline);
    report.redis_commands = Some(commands.read().await? - before);
    if upset == Upset::KillOne {
        let killed = (0..callers).filter(|c| (c / keys) % config.processes == 0);
        report.calls = report.calls.saturating_sub(killed.count() as u64 * rounds);
    }
    Ok(report)
}

/// Arms every worker on the round `label`, releases them together, lets
/// `upset` happen, and puts their reports together: the round's tally (its
/// wall from the release to the last report, as this process saw it), and
/// their callers in the source's timeline.
async fn play(
    workers: &mut Vec<Worker>,
    label: &str,
    within: Duration,
    source: &SourceServer,
    upset: Upset,
) -> anyhow::Result<Tally> {
    let arm = format!("arm {label}");
    for worker in workers.iter_mut() {
        worker.tell(&arm).await.context("arming a worker")?;
    }
    for worker in workers.iter_mut() {
        let armed = worker.answer("@armed", Duration::from_secs(30)).await;
        armed.context("arming a worker")?;
    }
    let (started, at) = (Instant::now(), source.timeline().begin_round());
    for worker in workers.iter_mut() {
        worker.tell("go").await.context("releasing a worker")?;
    }
    if upset == Upset::KillOne {
        let deadline = Instant::now() + within;
        while !source.first_worker_filling() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        if !workers.is_empty() {
            workers.remove(0).kill().await;
        }
    }
    let mut tally = Tally::default();
    for worker in workers.iter_mut() {
        let line = worker.answer("@report", within).await;
        let line = line.context("a worker's round")?;
        let report: ProcessRound = serde_json::from_str(&line).context("a worker's report")?;
        source.timeline().add(at, &report.timeline);
        tally.absorb(Tally {
            wall_us: 0,
            ..report.tally
        });
    }
    source.timeline().end_round();
    tally.wall_us = micros(started.elapsed());
    Ok(tally)
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

//! `corral herd --redis URL --processes N`: the stampede across OS
//! processes that share one Redis.
//!
//! The coordinator (this process) starts N `corral herd-worker` processes
//! of the same binary. Caller `i` of a round asks for key `i % keys` and
//! runs in worker `(i / keys) % N`, so every worker asks for every key. Each
//! round the coordinator arms every worker (its callers are spawned and
//! wait at a gate), then releases them all at once, then collects what
//! they measured. An uncounted warm-up round first opens connections and
//! subscriptions. Fills are counted in Redis (`INCR`), so they add up across
//! processes. Wake latency compares wall clocks of one host: from the
//! moment the leading process sent its commit to the moment each caller in
//! another process that was waiting for it returned.

use std::time::Duration;

use anyhow::Context as _;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::redis_conn::Conn;
use super::report::{CallFigures, Latency};
use super::scenario::{wall_clock_us, RoundTally, Scenario};
use super::shared_report::{SharedComparison, SharedSideReport};
use super::wire::{Event, Order, ProcessRound};
use super::worker::{fills_counter, Wake};
use super::Progress;

/// Which waiters to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum WakeChoice {
    /// Waiters woken by Redis pub/sub (corral's default).
    Notify,
    /// Waiters that only poll, every `--poll-ms`.
    Poll,
    /// Both, one after the other, side by side in the report.
    Both,
}

impl WakeChoice {
    /// How many sides the run has.
    pub(crate) fn sides(self) -> u64 {
        self.modes().len() as u64
    }

    fn modes(self) -> &'static [Wake] {
        match self {
            Self::Notify => &[Wake::Notify],
            Self::Poll => &[Wake::Poll],
            Self::Both => &[Wake::Notify, Wake::Poll],
        }
    }
}

/// Flags of `corral herd` for the multi-process run on Redis.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct SharedArgs {
    /// Run the stampede across --processes OS processes sharing this Redis
    /// (e.g. redis://127.0.0.1:6379/) instead of in this process; several
    /// comma-separated URLs name the nodes of one Redis Cluster.
    #[arg(long, value_name = "URL")]
    pub(crate) redis: Option<String>,
    /// Worker processes sharing Redis (with --redis); caller i runs in
    /// process (i / keys) % processes, so every process asks for every key.
    #[arg(long, default_value_t = 4, requires = "redis",
          value_parser = clap::value_parser!(u64).range(1..=256))]
    pub(crate) processes: u64,
    /// How waiters in other processes learn that the value landed (with
    /// --redis): pub/sub notification, polling only, or both side by side.
    #[arg(long, value_enum, default_value_t = WakeChoice::Both, requires = "redis")]
    pub(crate) wake: WakeChoice,
    /// Poll interval of the polling waiters, in milliseconds (with --redis).
    #[arg(long, default_value_t = 100, requires = "redis",
          value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub(crate) poll_ms: u64,
}

/// How long a worker may take to connect, or to arm a round.
const STEP_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs the scenario on Redis for each chosen wake mode.
///
/// # Errors
///
/// If Redis cannot be reached, a worker cannot start, fails or stalls.
pub(crate) async fn run(
    url: &str,
    shared: &SharedArgs,
    scenario: Scenario,
    threads: Option<u16>,
    progress: &Progress,
) -> anyhow::Result<SharedComparison> {
    anyhow::ensure!(
        shared.processes.saturating_mul(scenario.keys) <= scenario.callers,
        "--processes {} × --keys {} is more than --callers {}: not every process could ask for every key",
        shared.processes,
        scenario.keys,
        scenario.callers
    );
    let mut redis = Conn::connect(url)
        .await
        .with_context(|| format!("connecting to Redis at {}", redact(url)))?;
    redis
        .query::<()>(&redis::cmd("PING"))
        .await
        .with_context(|| format!("Redis at {} does not answer PING", redact(url)))?;

    let run_id = format!("{:x}-{:x}", std::process::id(), wall_clock_us());
    let mut comparison = SharedComparison::new(redact(url), shared, scenario);
    for &wake in shared.wake.modes() {
        let side = Side {
            url,
            run: format!("{run_id}-{}", wake.as_str()),
            wake,
            poll_ms: shared.poll_ms,
            processes: shared.processes,
            scenario,
            threads,
        };
        let report = side.run(&mut redis, progress).await?;
        match wake {
            Wake::Notify => comparison.notify = Some(report),
            Wake::Poll => comparison.poll = Some(report),
        }
    }
    comparison.write_verdict();
    Ok(comparison)
}

/// One wake mode's run: its workers, rounds and figures.
struct Side<'a> {
    url: &'a str,
    run: String,
    wake: Wake,
    poll_ms: u64,
    processes: u64,
    scenario: Scenario,
    threads: Option<u16>,
}

impl Side<'_> {
    async fn run(&self, redis: &mut Conn, progress: &Progress) -> anyhow::Result<SharedSideReport> {
        progress.note(&format!(
            "redis, {}: starting {} worker processes",
            self.wake.as_str(),
            self.processes
        ));
        let mut workers = Vec::new();
        for index in 0..self.processes {
            workers.push(self.spawn(index)?);
        }
        for worker in &mut workers {
            match worker.event(STEP_TIMEOUT).await? {
                Event::Ready { .. } => {}
                other => anyhow::bail!("worker {}: expected ready, got {other:?}", worker.index),
            }
        }
        let round_timeout = self.scenario.fill * 2 + Duration::from_secs(60);
        let label = format!("redis, {}", self.wake.as_str());
        play_round(&mut workers, 0, true, round_timeout).await?;
        let mut figures = Figures::default();
        for round in 0..self.scenario.rounds {
            progress.round(&label, round, self.scenario.rounds);
            let reports = play_round(&mut workers, round, false, round_timeout).await?;
            figures.absorb(&reports);
            progress.done_round();
        }
        for worker in workers {
            worker.finish().await?;
        }
        let fills = self.count_fills(redis).await?;
        Ok(figures.report(self, fills))
    }

    /// Starts worker `index` of this side.
    fn spawn(&self, index: u64) -> anyhow::Result<Worker> {
        let exe = std::env::current_exe().context("finding the corral binary")?;
        let mut command = tokio::process::Command::new(exe);
        command
            .arg("herd-worker")
            .args(["--redis", self.url, "--run", &self.run])
            .args(["--index", &index.to_string()])
            .args(["--processes", &self.processes.to_string()])
            .args(["--callers", &self.scenario.callers.to_string()])
            .args(["--keys", &self.scenario.keys.to_string()])
            .args(["--fill-ms", &self.scenario.fill.as_millis().to_string()])
            .args(["--wake", self.wake.as_str()]);
        if self.wake == Wake::Poll {
            command.args(["--poll-ms", &self.poll_ms.to_string()]);
        }
        if let Some(threads) = self.threads {
            command.args(["--threads", &threads.to_string()]);
        }
        let mut child = command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("starting a herd-worker process")?;
        let stdin = child.stdin.take().context("worker stdin")?;
        let stdout = child.stdout.take().context("worker stdout")?;
        Ok(Worker {
            index,
            child,
            stdin: Some(stdin),
            events: BufReader::new(stdout).lines(),
        })
    }

    /// Sums the fill counters of the measured rounds' keys, and deletes every
    /// counter of this side (warm-up included).
    async fn count_fills(&self, redis: &mut Conn) -> anyhow::Result<u64> {
        let warm_up = format!("{}-warm-up", self.run);
        let measured: Vec<String> = (0..self.scenario.rounds)
            .flat_map(|round| (0..self.scenario.keys).map(move |k| (round, k)))
            .map(|(round, k)| fills_counter(&Scenario::key(&self.run, round, k)))
            .collect();
        let mut fills = 0;
        for chunk in measured.chunks(1000) {
            let counts = redis
                .take_counts(chunk)
                .await
                .context("reading and deleting the fill counters")?;
            fills += counts.into_iter().flatten().sum::<u64>();
        }
        let warm_up: Vec<String> = (0..self.scenario.keys)
            .map(|k| fills_counter(&Scenario::key(&warm_up, 0, k)))
            .collect();
        for chunk in warm_up.chunks(1000) {
            redis
                .take_counts(chunk)
                .await
                .context("deleting the warm-up fill counters")?;
        }
        Ok(fills)
    }
}

/// Arms every worker, releases them together, and collects their reports.
async fn play_round(
    workers: &mut [Worker],
    round: u64,
    warm_up: bool,
    timeout: Duration,
) -> anyhow::Result<Vec<ProcessRound>> {
    for worker in workers.iter_mut() {
        worker.order(&Order::Arm { round, warm_up }).await?;
    }
    for worker in workers.iter_mut() {
        match worker.event(STEP_TIMEOUT).await? {
            Event::Armed => {}
            other => anyhow::bail!("worker {}: expected armed, got {other:?}", worker.index),
        }
    }
    for worker in workers.iter_mut() {
        worker.order(&Order::Go).await?;
    }
    let mut reports = Vec::with_capacity(workers.len());
    for worker in workers.iter_mut() {
        match worker.event(timeout).await? {
            Event::Done(report) => reports.push(report),
            other => anyhow::bail!("worker {}: expected its round, got {other:?}", worker.index),
        }
    }
    Ok(reports)
}

/// A running worker process and its pipes.
struct Worker {
    index: u64,
    child: Child,
    stdin: Option<ChildStdin>,
    events: Lines<BufReader<ChildStdout>>,
}

impl Worker {
    async fn order(&mut self, order: &Order) -> anyhow::Result<()> {
        let mut line = serde_json::to_vec(order).context("encoding an order")?;
        line.push(b'\n');
        let stdin = self.stdin.as_mut().context("worker stdin closed")?;
        stdin
            .write_all(&line)
            .await
            .with_context(|| format!("writing to worker {}", self.index))?;
        stdin
            .flush()
            .await
            .with_context(|| format!("writing to worker {}", self.index))
    }

    async fn event(&mut self, within: Duration) -> anyhow::Result<Event> {
        let line = tokio::time::timeout(within, self.events.next_line())
            .await
            .map_err(|_| anyhow::anyhow!("worker {} said nothing for {within:?}", self.index))?
            .with_context(|| format!("reading worker {}", self.index))?;
        let Some(line) = line else {
            let status = self.child.wait().await;
            anyhow::bail!(
                "worker {} exited ({}); its error is above",
                self.index,
                status.map_or_else(|e| e.to_string(), |s| s.to_string())
            );
        };
        serde_json::from_str(&line)
            .with_context(|| format!("worker {} sent a bad event {line:?}", self.index))
    }

    /// Closes the worker's stdin and waits for it to exit.
    async fn finish(mut self) -> anyhow::Result<()> {
        drop(self.stdin.take());
        let status = tokio::time::timeout(STEP_TIMEOUT, self.child.wait())
            .await
            .map_err(|_| anyhow::anyhow!("worker {} did not exit", self.index))?
            .with_context(|| format!("waiting for worker {}", self.index))?;
        anyhow::ensure!(status.success(), "worker {} exited ({status})", self.index);
        Ok(())
    }
}

/// What the workers of one side measured, over its rounds.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Figures {
    /// The callers' outcomes and latencies; walls summed over rounds, no
    /// spans.
    tally: RoundTally,
    wake_us: Vec<u64>,
    process_wake_us: Vec<u64>,
    round_trips: u64,
    max_leader_round_trips: u64,
    max_waiter_round_trips: u64,
    process_fills: u64,
}

impl Figures {
    /// Adds one round's worker reports (indexed by worker).
    pub(crate) fn absorb(&mut self, reports: &[ProcessRound]) {
        // Per key: the worker that committed it and when (the earliest, if
        // several did).
        let keys = reports.iter().map(|r| r.keys.len()).max().unwrap_or(0);
        let commits: Vec<Option<(usize, u64)>> = (0..keys)
            .map(|k| {
                reports
                    .iter()
                    .enumerate()
                    .filter_map(|(w, r)| Some((w, r.keys.get(k)?.committed_at_us?)))
                    .min_by_key(|&(_, at)| at)
            })
            .collect();
        let mut first_start = u64::MAX;
        let mut last_end = 0;
        for (worker, report) in reports.iter().enumerate() {
            let tally = &mut self.tally;
            tally.successes += report.successes;
            tally.failures += report.failures;
            if tally.first_failure.is_none() {
                tally.first_failure.clone_from(&report.first_failure);
            }
            tally.latencies_us.extend(&report.latencies_us);
            self.process_fills += report.fills;
            for (k, key) in report.keys.iter().enumerate() {
                self.round_trips += key.round_trips;
                let led = matches!(commits.get(k), Some(Some((w, _))) if *w == worker);
                let slot = if led {
                    &mut self.max_leader_round_trips
                } else {
                    &mut self.max_waiter_round_trips
                };
                *slot = (*slot).max(key.round_trips);
            }
            // Per key: this process's first waiter back after the commit.
            let mut first_back: Vec<Option<u64>> = vec![None; keys];
            for span in &report.spans {
                first_start = first_start.min(span.start_us);
                last_end = last_end.max(span.end_us);
                let Ok(k) = usize::try_from(span.key) else {
                    continue;
                };
                // A waiter: in another process than the leader's, and
                // started before the commit (later callers simply hit).
                if let Some(Some((leader, at))) = commits.get(k) {
                    if *leader != worker && span.start_us < *at {
                        let wake = span.end_us.saturating_sub(*at);
                        self.wake_us.push(wake);
                        if let Some(first) = first_back.get_mut(k) {
                            *first = Some(first.map_or(wake, |f| f.min(wake)));
                        }
                    }
                }
            }
            self.process_wake_us
                .extend(first_back.into_iter().flatten());
        }
        if first_start < last_end {
            self.tally.wall += Duration::from_micros(last_end - first_start);
        }
    }

    fn report(self, side: &Side<'_>, fills: u64) -> SharedSideReport {
        let scenario = side.scenario;
        let calls = scenario.callers * scenario.rounds;
        SharedSideReport {
            side: side.wake.as_str(),
            wake: match side.wake {
                Wake::Notify => "pub/sub notification".to_owned(),
                Wake::Poll => format!("poll every {} ms", side.poll_ms),
            },
            processes: side.processes,
            figures: CallFigures::new(scenario, fills, self.tally),
            fills_counted_by_processes: self.process_fills,
            cross_process_waiters: self.wake_us.len() as u64,
            wake_latency_ms: (!self.wake_us.is_empty()).then(|| Latency::from_micros(self.wake_us)),
            process_wake_latency_ms: (!self.process_wake_us.is_empty())
                .then(|| Latency::from_micros(self.process_wake_us)),
            round_trips: self.round_trips,
            round_trips_per_caller: self.round_trips as f64 / calls.max(1) as f64,
            max_round_trips_leader_flight: self.max_leader_round_trips,
            max_round_trips_waiting_flight: self.max_waiter_round_trips,
        }
    }
}

/// `url` without its password.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
            format!("{}{user}:***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::herd::scenario::CallSpan;
    use crate::herd::wire::KeyRound;

    fn span(key: u32, start_us: u64, end_us: u64) -> CallSpan {
        CallSpan {
            key,
            start_us,
            end_us,
        }
    }

    #[test]
    fn wake_latency_counts_only_waiters_in_other_processes() {
        let leader = ProcessRound {
            successes: 2,
            latencies_us: vec![50_000, 50_100],
            spans: vec![span(0, 1_000, 51_000), span(0, 1_010, 51_020)],
            keys: vec![KeyRound {
                round_trips: 2,
                committed_at_us: Some(50_900),
            }],
            fills: 1,
            ..ProcessRound::default()
        };
        let other = ProcessRound {
            successes: 2,
            latencies_us: vec![50_500, 10],
            // One waiter woken 600 µs after the commit; one late hit.
            spans: vec![span(0, 1_005, 51_500), span(0, 60_000, 60_010)],
            keys: vec![KeyRound {
                round_trips: 2,
                committed_at_us: None,
            }],
            ..ProcessRound::default()
        };
        let mut figures = Figures::default();
        figures.absorb(&[leader, other]);
        assert_eq!(figures.wake_us, vec![600]);
        assert_eq!(figures.process_wake_us, vec![600]);
        assert_eq!(figures.tally.successes, 4);
        assert_eq!(figures.round_trips, 4);
        assert_eq!(figures.max_leader_round_trips, 2);
        assert_eq!(figures.max_waiter_round_trips, 2);
        assert_eq!(figures.process_fills, 1);
        assert_eq!(figures.tally.wall, Duration::from_micros(60_010 - 1_000));
    }

    #[test]
    fn redacts_passwords() {
        assert_eq!(redact("redis://u:secret@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact("redis://:secret@h"), "redis://:***@h");
        assert_eq!(redact("redis://127.0.0.1:6379/"), "redis://127.0.0.1:6379/");
    }
}

//! `corral herd-worker`: one process of a multi-process herd. It builds a
//! corral cache on the shared Redis, and on the coordinator's orders arms
//! and releases its share of each round's callers, then reports what they
//! measured (see [`wire`](super::wire)).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

use super::metered::MeteredStore;
use super::redis_conn::Conn;
use super::scenario::{arm, ArmedRound, Contender, Scenario, Source};
use super::wire::{Event, Order, ProcessRound};

/// How waiters learn that another process's fill landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Wake {
    /// Redis pub/sub notifications (corral's default), polling as fallback.
    Notify,
    /// Polling only, every `--poll-ms`.
    Poll,
}

impl Wake {
    /// The flag value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Notify => "notify",
            Self::Poll => "poll",
        }
    }
}

/// Flags of `corral herd-worker` (set by the coordinator).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct WorkerArgs {
    /// The shared Redis: one URL, or a cluster's comma-separated node URLs.
    #[arg(long, value_name = "URL")]
    redis: String,
    /// Names this run's keys.
    #[arg(long)]
    run: String,
    /// This worker's index, from 0.
    #[arg(long)]
    index: u64,
    /// Worker processes in the run.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    processes: u64,
    /// Callers per round over all processes; this one runs those that
    /// [`Scenario::process_of`] gives it.
    #[arg(long)]
    callers: u64,
    /// Cold keys per round.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    keys: u64,
    /// Duration of one source call, in milliseconds.
    #[arg(long)]
    fill_ms: u64,
    /// How waiters wake.
    #[arg(long, value_enum)]
    wake: Wake,
    /// Poll interval of waiters, in milliseconds [default: corral's].
    #[arg(long)]
    poll_ms: Option<u64>,
    /// Worker threads of the tokio runtime.
    #[arg(long)]
    threads: Option<u16>,
}

/// The name of the Redis counter of fills of `key`.
pub(crate) fn fills_counter(key: &str) -> String {
    format!("{key}:fills")
}

/// corral's `get_or_fill` on the shared Redis; each fill also counts itself
/// in Redis (`INCR` on the key's fills counter) so fills add up across
/// processes.
struct SharedSide {
    cache: corral::Cache<String>,
    source: Arc<Source>,
    counter: Conn,
}

impl Contender for SharedSide {
    async fn get(&self, key: &str) -> anyhow::Result<String> {
        let source = Arc::clone(&self.source);
        let mut counter = self.counter.clone();
        let owned = key.to_owned();
        self.cache
            .get_or_fill(key, move || async move {
                counter
                    .query::<i64>(redis::cmd("INCR").arg(fills_counter(&owned)))
                    .await?;
                Ok::<_, redis::RedisError>(source.load(&owned).await)
            })
            .await
            .with_context(|| format!("corral get_or_fill({key}) on Redis"))
    }
}

/// Runs the worker until its stdin closes.
///
/// # Errors
///
/// If Redis cannot be reached, the coordinator speaks out of turn, or a
/// caller task panicked.
pub(crate) fn run(args: WorkerArgs) -> anyhow::Result<()> {
    super::runtime(args.threads)?.block_on(serve(args))
}

async fn serve(args: WorkerArgs) -> anyhow::Result<()> {
    let fill = Duration::from_millis(args.fill_ms);
    let store = super::redis_conn::store(&args.redis).await?;
    let metered = MeteredStore::new(store, args.wake == Wake::Notify);
    let counter = Conn::connect(&args.redis)
        .await
        .with_context(|| format!("connecting the fill counter to {}", args.redis))?;
    let mut builder = corral::Cache::<String>::builder("herd")
        .shared_store(Arc::clone(&metered) as Arc<dyn corral::Store>)
        // An L1, as in production: every caller of a process joins its
        // one flight (without one, each caller would read the store first).
        .l1(true)
        .ttl(Duration::from_secs(60))
        .fill_timeout(fill + Duration::from_secs(30));
    if let Some(poll_ms) = args.poll_ms {
        builder = builder.poll_interval(Duration::from_millis(poll_ms.max(1)));
    }
    let cache = builder.build().context("building the corral cache")?;
    let side = Arc::new(SharedSide {
        cache,
        source: Arc::new(Source::new(fill)),
        counter,
    });

    let mut orders = BufReader::new(tokio::io::stdin()).lines();
    let mut events = tokio::io::stdout();
    send(
        &mut events,
        &Event::Ready {
            pid: std::process::id(),
        },
    )
    .await?;

    let mut armed: Option<(ArmedRound, Vec<String>, u64)> = None;
    while let Some(line) = orders.next_line().await.context("reading orders")? {
        let order: Order =
            serde_json::from_str(&line).with_context(|| format!("bad order {line:?}"))?;
        match order {
            Order::Arm { round, warm_up } => {
                anyhow::ensure!(armed.is_none(), "armed twice");
                let run = if warm_up {
                    format!("{}-warm-up", args.run)
                } else {
                    args.run.clone()
                };
                let keys: Vec<String> = (0..args.keys)
                    .map(|k| Scenario::key(&run, round, k))
                    .collect();
                let callers = (0..args.callers).filter(|&caller| {
                    Scenario::process_of(caller, args.keys, args.processes) == args.index
                });
                metered.take();
                let fills_before = side.source.calls();
                armed = Some((arm(&side, &keys, callers)?, keys, fills_before));
                send(&mut events, &Event::Armed).await?;
            }
            Order::Go => {
                let (round, keys, fills_before) = armed.take().context("go before arm")?;
                let tally = round.release().await?;
                let mut meters = metered.take();
                let keys = keys
                    .iter()
                    .map(|key| meters.remove(key).unwrap_or_default())
                    .collect();
                let report = ProcessRound {
                    successes: tally.successes,
                    failures: tally.failures,
                    first_failure: tally.first_failure,
                    latencies_us: tally.latencies_us,
                    spans: tally.spans,
                    keys,
                    fills: side.source.calls() - fills_before,
                };
                send(&mut events, &Event::Done(report)).await?;
            }
        }
    }
    Ok(())
}

/// Writes one event as a line of JSON and flushes it.
async fn send(out: &mut tokio::io::Stdout, event: &Event) -> anyhow::Result<()> {
    let mut line = serde_json::to_vec(event).context("encoding an event")?;
    line.push(b'\n');
    out.write_all(&line)
        .await
        .context("writing to the coordinator")?;
    out.flush().await.context("writing to the coordinator")
}

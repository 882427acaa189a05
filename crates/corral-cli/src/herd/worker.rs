//! `corral herd-worker`: one process of `corral herd --redis`, speaking
//! `corral-testkit`'s worker protocol: it says `@ready` once connected, then
//! on `arm <round>` spawns its share of the round's callers (`@armed`), and
//! on `go` releases them and prints `@report <json>` ([`ProcessRound`]).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use redis::aio::MultiplexedConnection;
use redis::AsyncCommands as _;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt as _, BufReader};

use corral_testkit::Tally;

use super::scenario::{arm, round_keys, Contender, CorralSide, Source};

/// Which cache a worker runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum SideKind {
    /// corral's `get_or_fill` on a `RedisStore`, with an L1.
    Corral,
    /// `GET`; on a miss, call the source and `SET`.
    Naive,
}

impl SideKind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Corral => "corral",
            Self::Naive => "naive",
        }
    }
}

/// Flags of `corral herd-worker` (set by `corral herd --redis`).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct WorkerArgs {
    /// The shared Redis.
    #[arg(long)]
    redis: String,
    #[arg(long, value_enum)]
    side: SideKind,
    /// Names this run's keys.
    #[arg(long)]
    run: String,
    /// This worker's index, from 0.
    #[arg(long)]
    index: u64,
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    processes: u64,
    /// Callers per round over all processes.
    #[arg(long)]
    callers: u64,
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    keys: u64,
    #[arg(long)]
    fill_ms: u64,
    #[arg(long)]
    threads: Option<u16>,
}

/// What one worker measured in one round.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct ProcessRound {
    pub(crate) tally: Tally,
    /// Calls of the source this process made.
    pub(crate) fills: u64,
}

/// The usual cache-aside on Redis: `GET`; on a miss call the source and
/// `SET` with a TTL. Nothing stops concurrent misses from all filling.
struct NaiveSide {
    conn: MultiplexedConnection,
    source: Arc<Source>,
}

impl Contender for NaiveSide {
    async fn get(&self, key: &str) -> anyhow::Result<String> {
        let mut conn = self.conn.clone();
        let cached: Option<String> = conn.get(key).await?;
        if let Some(value) = cached {
            return Ok(value);
        }
        let value = self.source.load(key).await;
        let () = conn.set_ex(key, &value, 600).await?;
        Ok(value)
    }
}

/// Runs the worker until its stdin closes.
///
/// # Errors
///
/// If Redis cannot be reached, an order is not understood, or a caller
/// task panicked.
pub(crate) fn run(args: WorkerArgs) -> anyhow::Result<()> {
    super::runtime(args.threads)?.block_on(async {
        let source = Arc::new(Source::new(Duration::from_millis(args.fill_ms)));
        let url = args.redis.as_str();
        match args.side {
            SideKind::Corral => {
                let store = corral::RedisStore::connect(url, corral::RedisConfig::default()).await;
                let cache = corral::Cache::<String>::builder("herd")
                    .store(store.with_context(|| format!("connecting corral to {url}"))?)
                    .l1(true)
                    .ttl(Duration::from_secs(60))
                    .fill_timeout(Duration::from_millis(args.fill_ms) + Duration::from_secs(30))
                    .build()
                    .context("building the corral cache")?;
                let load = {
                    let source = Arc::clone(&source);
                    move |key: String| {
                        let source = Arc::clone(&source);
                        async move { Ok(source.load(&key).await) }
                    }
                };
                serve(&args, Arc::new(CorralSide { cache, load }), &source).await
            }
            SideKind::Naive => {
                let client = redis::Client::open(url).context("the Redis URL")?;
                let conn = client.get_multiplexed_async_connection().await;
                let conn = conn.with_context(|| format!("connecting to {url}"))?;
                let side = NaiveSide {
                    conn,
                    source: Arc::clone(&source),
                };
                serve(&args, Arc::new(side), &source).await
            }
        }
    })
}

/// Takes orders on stdin until it closes.
async fn serve<C: Contender>(
    args: &WorkerArgs,
    side: Arc<C>,
    source: &Source,
) -> anyhow::Result<()> {
    println!("@ready");
    let mut orders = BufReader::new(tokio::io::stdin()).lines();
    let mut armed = None;
    while let Some(order) = orders.next_line().await.context("reading orders")? {
        match order.split_once(' ') {
            Some(("arm", round)) => {
                let keys = round_keys(&format!("{}:{round}", args.run), args.keys);
                let mine =
                    (0..args.callers).filter(|c| (c / args.keys) % args.processes == args.index);
                armed = Some((arm(&side, &keys, mine), source.calls()));
                println!("@armed");
            }
            None if order == "go" => {
                let (round, calls_before) = armed.take().context("go before arm")?;
                let tally = round.release().await?;
                let report = ProcessRound {
                    tally,
                    fills: source.calls() - calls_before,
                };
                println!("@report {}", serde_json::to_string(&report)?);
            }
            _ => anyhow::bail!("unknown order {order:?}"),
        }
    }
    Ok(())
}

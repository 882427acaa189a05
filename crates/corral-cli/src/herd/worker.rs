//! `corral herd-worker CONFIG`: one process of `corral herd --redis`,
//! speaking `corral-testkit`'s worker protocol: `@ready` once connected;
//! on `arm <round>` it spawns its share of the round's callers (`@armed`);
//! on `go` it releases them and prints `@report <json>` ([`ProcessRound`]).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use corral_testkit::Tally;
use redis::AsyncCommands as _;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncBufReadExt as _;

use super::remote::RemoteSource;
use super::scenario::{arm, release, round_keys, Contender, CorralSide, Load, Scenario};
use super::timeline::{Series, Timeline};

/// Which cache a worker runs: corral's `get_or_fill` on a `RedisStore` with
/// an L1, or a naive cache-aside on Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum SideKind {
    Corral,
    Naive,
}

impl SideKind {
    /// The side's name in reports.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Corral => "corral",
            Self::Naive => "naive",
        }
    }
}

/// What a worker is told, as the JSON of its one argument.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct WorkerConfig {
    pub(crate) redis: String,
    pub(crate) side: SideKind,
    /// Names this run's keys.
    pub(crate) run: String,
    /// This worker's index, from 0, of `processes`: it runs caller `i`
    /// when `(i / keys) % processes == index`.
    pub(crate) index: u64,
    pub(crate) processes: u64,
    pub(crate) scenario: Scenario,
    /// The source server's address (`host:port`).
    pub(crate) source: String,
    /// corral's fill budget in each process (0: none).
    pub(crate) budget: u64,
    /// Whether that budget is a fleet budget, counted in Redis.
    pub(crate) fleet: bool,
}

/// What one worker measured in one round: its callers, and over time.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct ProcessRound {
    pub(crate) tally: Tally,
    pub(crate) timeline: Series,
}

/// The usual cache-aside on Redis: `GET`; on a miss call the source and
/// `SETEX`. Nothing stops concurrent misses from all filling.
struct NaiveSide {
    conn: redis::aio::MultiplexedConnection,
    source: Arc<RemoteSource>,
}

impl Contender for NaiveSide {
    async fn get(&self, key: &str) -> anyhow::Result<String> {
        let mut conn = self.conn.clone();
        if let Some(value) = conn.get::<_, Option<String>>(key).await? {
            return Ok(value);
        }
        let value = self.source.load(key).await?;
        let () = conn.set_ex(key, &value, 600).await?;
        Ok(value)
    }
}

/// Runs the worker described by `config` (JSON) until its stdin closes; fails
/// on a bad config, Redis out of reach, an order not understood, or a caller
/// task that panicked.
pub(crate) fn run(config: &str) -> anyhow::Result<()> {
    let config: WorkerConfig = serde_json::from_str(config).context("the worker's config")?;
    let source = Arc::new(RemoteSource(config.source.clone(), config.index));
    tokio::runtime::Runtime::new()?.block_on(async {
        let url = config.redis.as_str();
        if config.side == SideKind::Naive {
            let client = redis::Client::open(url).context("the Redis URL")?;
            let conn = client.get_multiplexed_async_connection().await?;
            let naive = NaiveSide { conn, source };
            return serve(&config, Arc::new(naive)).await;
        }
        let store = corral::RedisStore::connect(url, corral::RedisConfig::default()).await?;
        let mut builder = corral::Cache::<String>::builder("herd")
            .store(store)
            .l1(true)
            .ttl(Duration::from_secs(60))
            .fill_timeout(config.scenario.fill + Duration::from_secs(30));
        if config.budget > 0 {
            let limit = usize::try_from(config.budget)?;
            let mut budget = corral::FillBudget::new(limit).max_wait(Duration::from_secs(600));
            if config.fleet {
                budget = budget.fleet("herd-source")?;
            }
            builder = builder.fill_budget(budget);
        }
        let cache = builder.build()?;
        serve(&config, Arc::new(CorralSide { cache, source })).await
    })
}

/// Takes orders on stdin until it closes.
async fn serve<C: Contender>(config: &WorkerConfig, side: Arc<C>) -> anyhow::Result<()> {
    let WorkerConfig {
        index,
        processes,
        scenario,
        ..
    } = *config;
    println!("@ready");
    let mut orders = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let (mut armed, timeline) = (None, Arc::new(Timeline::default()));
    while let Some(order) = orders.next_line().await? {
        match order.split_once(' ') {
            Some(("arm", round)) => {
                let keys = round_keys(&format!("{}:{round}", config.run), scenario.keys);
                let callers = 0..scenario.callers;
                let mine = callers.filter(|c| (c / scenario.keys) % processes == index);
                armed = Some(arm(&side, &keys, mine, &timeline));
                println!("@armed");
            }
            None if order == "go" => {
                let round = armed.take().context("go before arm")?;
                let tally = release(round, &timeline).await?;
                let report = ProcessRound {
                    tally,
                    timeline: timeline.take(),
                };
                println!("@report {}", serde_json::to_string(&report)?);
            }
            _ => anyhow::bail!("unknown order {order:?}"),
        }
    }
    Ok(())
}

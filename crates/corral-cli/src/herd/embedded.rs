//! The in-process herd: corral's embedded tier against a naive cache-aside
//! over a plain shared map, on the same scenario, each side reading the
//! same seeded SQLite file through its own bounded pool.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use anyhow::Context as _;

use super::report::{Comparison, SideReport};
use super::scenario::{run_round, Contender, RoundTally, Scenario};
use super::sqlite::{Database, SqliteArgs, SqliteSource};
use super::Progress;

/// corral's `get_or_fill` on its default in-process tier.
struct CorralSide {
    cache: corral::Cache<String>,
    source: Arc<SqliteSource>,
}

impl Contender for CorralSide {
    async fn get(&self, key: &str) -> anyhow::Result<String> {
        let source = Arc::clone(&self.source);
        let owned = key.to_owned();
        self.cache
            .get_or_fill(key, move || async move { source.load(&owned).await })
            .await
            .with_context(|| format!("corral get_or_fill({key})"))
    }

    fn is_value_of(&self, key: &str, value: &str) -> bool {
        self.source.is_value_of(key, value)
    }
}

/// The usual cache-aside: read the map; on a miss query the database and
/// write the map. Nothing stops concurrent misses of one key from all
/// querying.
struct NaiveSide {
    map: RwLock<HashMap<String, String>>,
    source: Arc<SqliteSource>,
}

impl Contender for NaiveSide {
    async fn get(&self, key: &str) -> anyhow::Result<String> {
        let cached = self
            .map
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .cloned();
        if let Some(value) = cached {
            return Ok(value);
        }
        let value = self
            .source
            .load(key)
            .await
            .with_context(|| format!("naive get({key})"))?;
        self.map
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.to_owned(), value.clone());
        Ok(value)
    }

    fn is_value_of(&self, key: &str, value: &str) -> bool {
        self.source.is_value_of(key, value)
    }
}

/// Seeds the database, then runs the scenario through corral, then through
/// the naive cache-aside.
///
/// # Errors
///
/// If the database cannot be created, the cache cannot be built or a
/// caller task panicked.
pub(crate) async fn run(
    scenario: Scenario,
    sqlite: &SqliteArgs,
    progress: &Progress,
) -> anyhow::Result<Comparison> {
    progress.note("seeding the SQLite database");
    let args = sqlite.clone();
    let db = tokio::task::spawn_blocking(move || Database::create(&args))
        .await
        .context("the seeding task panicked")??;

    let corral_source = Arc::new(db.source(sqlite)?);
    let cache = corral::Cache::<String>::builder("herd")
        .ttl(Duration::from_secs(600))
        .max_entries(scenario.cold_keys().max(1024))
        .fill_timeout(sqlite.pool_wait() + Duration::from_secs(30))
        .build()
        .context("building the corral cache")?;
    let corral = Arc::new(CorralSide {
        cache,
        source: Arc::clone(&corral_source),
    });
    warm_up(&corral, scenario).await?;
    let (counts_before, coalesced_before) =
        (corral_source.counts(), corral.cache.stats().coalesced);
    let corral_tally = run_side("corral", &corral, scenario, progress).await?;
    let counts = corral_source.counts().since(counts_before);
    let mut corral_report = SideReport::new("corral", scenario, counts, corral_tally);
    corral_report.coalesced = Some(corral.cache.stats().coalesced - coalesced_before);

    let naive_source = Arc::new(db.source(sqlite)?);
    let naive = Arc::new(NaiveSide {
        map: RwLock::new(HashMap::new()),
        source: Arc::clone(&naive_source),
    });
    warm_up(&naive, scenario).await?;
    let counts_before = naive_source.counts();
    let naive_tally = run_side("naive", &naive, scenario, progress).await?;
    let counts = naive_source.counts().since(counts_before);
    let naive_report = SideReport::new("naive", scenario, counts, naive_tally);

    Ok(Comparison::new(
        scenario,
        db.info().clone(),
        corral_report,
        naive_report,
    ))
}

/// Uncounted: one call fills a key of its own, then a round of callers
/// hits it, so that neither side's first measured round pays for starting
/// threads, opening a connection and growing allocations — without a
/// stampede of its own.
async fn warm_up<C: Contender>(contender: &Arc<C>, scenario: Scenario) -> anyhow::Result<()> {
    let key = Scenario::key("local-warm-up", 0, 0);
    let keys = [key];
    run_round(contender, 1, &keys).await?;
    run_round(contender, scenario.callers.min(1000), &keys).await?;
    Ok(())
}

/// Runs every round of the scenario through one contender.
async fn run_side<C: Contender>(
    label: &str,
    contender: &Arc<C>,
    scenario: Scenario,
    progress: &Progress,
) -> anyhow::Result<RoundTally> {
    let mut total = RoundTally::default();
    for round in 0..scenario.rounds {
        progress.round(label, round, scenario.rounds);
        let keys: Vec<String> = (0..scenario.keys)
            .map(|k| Scenario::key("local", round, k))
            .collect();
        let tally = run_round(contender, scenario.callers, &keys).await?;
        total.absorb(tally);
        progress.done_round();
    }
    Ok(total)
}

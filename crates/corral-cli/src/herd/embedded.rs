//! The default run, in process: corral's `get_or_fill` against a naive
//! cache-aside over a map, each reading the same seeded SQLite file through
//! its own bounded pool.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use corral_testkit::Tally;

use super::report::{Comparison, Setting, SideReport};
use super::scenario::{round_keys, run_round, Contender, CorralSide, NaiveSide, Scenario};
use super::sqlite::{Database, SqliteArgs};

/// Seeds the database, then runs the scenario through corral, then through the
/// naive cache-aside; fails if the database cannot be created, the cache cannot
/// be built or a caller task panicked.
pub(crate) async fn run(scenario: Scenario, sqlite: SqliteArgs) -> anyhow::Result<Comparison> {
    let db = tokio::task::spawn_blocking(move || Database::create(&sqlite)).await??;

    let source = Arc::new(db.source()?);
    let cache = corral::Cache::<String>::builder("herd")
        .ttl(Duration::from_secs(600))
        .capacity(corral::Capacity::Entries(scenario.cold_keys().max(1024)))
        .fill_timeout(Duration::from_millis(db.pool_wait_ms) + Duration::from_secs(30))
        .build()
        .context("building the corral cache")?;
    let corral = Arc::new(CorralSide {
        cache,
        source: Arc::clone(&source),
    });
    warm_up(&corral, scenario).await?;
    let (_, coalesced) = (source.take_counts(), corral.cache.stats().coalesced);
    let tally = run_side(&corral, scenario).await?;
    let mut corral_report = SideReport::sqlite("corral", scenario, source.take_counts(), tally);
    corral_report.coalesced = Some(corral.cache.stats().coalesced - coalesced);

    let source = Arc::new(db.source()?);
    let naive = Arc::new(NaiveSide::new(Duration::from_secs(600), &source));
    warm_up(&naive, scenario).await?;
    source.take_counts();
    let tally = run_side(&naive, scenario).await?;
    let naive_report = SideReport::sqlite("naive", scenario, source.take_counts(), tally);

    let setting = Setting::Embedded { database: db };
    Ok(Comparison::new(
        scenario,
        setting,
        corral_report,
        naive_report,
    ))
}

/// Uncounted: one call fills a key of its own, then callers hit it, so
/// neither side's first round pays for starting threads, opening a
/// connection and growing allocations — without a stampede of its own.
async fn warm_up<C: Contender>(contender: &Arc<C>, scenario: Scenario) -> anyhow::Result<()> {
    let keys = round_keys("local-warm-up", 1);
    run_round(contender, 1, &keys).await?;
    run_round(contender, scenario.callers.min(1000), &keys).await?;
    Ok(())
}

/// Every round of the scenario through one contender.
async fn run_side<C: Contender>(contender: &Arc<C>, scenario: Scenario) -> anyhow::Result<Tally> {
    let mut total = Tally::default();
    for round in 0..scenario.rounds {
        let keys = round_keys(&format!("local:r{round}"), scenario.keys);
        total.absorb(run_round(contender, scenario.callers, &keys).await?);
    }
    Ok(total)
}

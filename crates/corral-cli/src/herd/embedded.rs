//! The in-process herd: corral's embedded tier against a naive cache-aside
//! over a plain shared map, on the same scenario and the same kind of source.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use anyhow::Context as _;

use super::report::{Comparison, SideReport};
use super::scenario::{run_round, Contender, RoundTally, Scenario, Source};
use super::Progress;

/// corral's `get_or_fill` on its default in-process tier.
struct CorralSide {
    cache: corral::Cache<String>,
    source: Arc<Source>,
}

impl Contender for CorralSide {
    async fn get(&self, key: &str) -> anyhow::Result<String> {
        let source = Arc::clone(&self.source);
        let owned = key.to_owned();
        self.cache
            .get_or_fill(key, move || async move {
                Ok::<_, Infallible>(source.load(&owned).await)
            })
            .await
            .with_context(|| format!("corral get_or_fill({key})"))
    }
}

/// The usual cache-aside: read the map; on a miss call the source and write
/// the map. Nothing stops concurrent misses of one key from all calling the
/// source.
struct NaiveSide {
    map: RwLock<HashMap<String, String>>,
    source: Arc<Source>,
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
        let value = self.source.load(key).await;
        self.map
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.to_owned(), value.clone());
        Ok(value)
    }
}

/// Runs the scenario through corral, then through the naive cache-aside.
///
/// # Errors
///
/// If the cache cannot be built or a caller task panicked.
pub(crate) async fn run(scenario: Scenario, progress: &Progress) -> anyhow::Result<Comparison> {
    let corral_source = Arc::new(Source::new(scenario.fill));
    let cache = corral::Cache::<String>::builder("herd")
        .ttl(Duration::from_secs(600))
        .max_entries(scenario.cold_keys().max(1024))
        .fill_timeout(scenario.fill + Duration::from_secs(30))
        .build()
        .context("building the corral cache")?;
    let corral = Arc::new(CorralSide {
        cache,
        source: Arc::clone(&corral_source),
    });
    warm_up(&corral, scenario).await?;
    let (fills_before, coalesced_before) = (corral_source.calls(), corral.cache.stats().coalesced);
    let corral_tally = run_side("corral", &corral, scenario, progress).await?;
    let fills = corral_source.calls() - fills_before;
    let mut corral_report = SideReport::new("corral", scenario, fills, corral_tally);
    corral_report.coalesced = Some(corral.cache.stats().coalesced - coalesced_before);

    let naive_source = Arc::new(Source::new(scenario.fill));
    let naive = Arc::new(NaiveSide {
        map: RwLock::new(HashMap::new()),
        source: Arc::clone(&naive_source),
    });
    warm_up(&naive, scenario).await?;
    let fills_before = naive_source.calls();
    let naive_tally = run_side("naive", &naive, scenario, progress).await?;
    let fills = naive_source.calls() - fills_before;
    let naive_report = SideReport::new("naive", scenario, fills, naive_tally);

    Ok(Comparison::new(scenario, corral_report, naive_report))
}

/// One small uncounted round on its own key, so that neither side's first
/// measured round pays for starting threads and growing allocations.
async fn warm_up<C: Contender>(contender: &Arc<C>, scenario: Scenario) -> anyhow::Result<()> {
    let key = Scenario::key("local-warm-up", 0, 0);
    run_round(contender, scenario.callers.min(1000), &[key]).await?;
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

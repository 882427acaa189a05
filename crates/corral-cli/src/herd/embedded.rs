//! The default run, in process: corral's `get_or_fill` against a naive
//! cache-aside over a map, each reading the same seeded SQLite file through
//! its own bounded pool. corral's fills share a fill budget (by default of
//! the pool's size); callers ask for keys in turn or Zipf-distributed.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use corral_testkit::Tally;

use super::report::{Comparison, Setting, SideReport};
use super::scenario::{round_keys, run_round, Contender, CorralSide, NaiveSide, Scenario};
use super::sqlite::{Database, SqliteArgs};

/// Seeds the database, then runs the scenario through corral, then through the
/// naive cache-aside; fails if the database cannot be created, the cache cannot
/// be built or a caller task panicked.
pub(crate) async fn run(
    scenario: Scenario,
    sqlite: SqliteArgs,
    shape: Shape,
) -> anyhow::Result<Comparison> {
    let db = tokio::task::spawn_blocking(move || Database::create(&sqlite)).await??;
    let budget = shape.budget.unwrap_or(db.pool_size);

    let source = Arc::new(db.source()?);
    let mut builder = corral::Cache::<String>::builder("herd")
        .ttl(Duration::from_secs(600))
        .capacity(corral::Capacity::Entries(scenario.cold_keys().max(1024)))
        .fill_timeout(Duration::from_millis(db.pool_wait_ms) + Duration::from_secs(30));
    let mut adaptive = None;
    if budget > 0 {
        let limit = usize::try_from(budget)?;
        // Queued fills wait as long as the run may take: the demo counts
        // callers answered, not callers turned away.
        let mut fills = corral::FillBudget::new(limit).max_wait(Duration::from_secs(600));
        if let Some(max) = shape.adaptive_max {
            fills = fills.adaptive(1, usize::try_from(max)?);
        }
        adaptive = Some(fills.clone()).filter(|_| shape.adaptive_max.is_some());
        builder = builder.fill_budget(fills);
    }
    let cache = builder.build().context("building the corral cache")?;
    let corral = Arc::new(CorralSide {
        cache,
        source: Arc::clone(&source),
    });
    warm_up(&corral, scenario).await?;
    let (_, coalesced) = (source.take_counts(), corral.cache.stats().coalesced);
    // An adaptive budget's limit, sampled every 20 ms while fills queue.
    let limits: Arc<Mutex<Vec<u64>>> = Arc::default();
    let sampler = adaptive.clone().map(|fills: corral::FillBudget| {
        let limits = Arc::clone(&limits);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(20)).await;
                let stats = fills.stats();
                if stats.queued > 0 {
                    let mut limits = limits.lock().unwrap_or_else(PoisonError::into_inner);
                    limits.push(stats.limit as u64);
                }
            }
        })
    });
    let (tally, hot) = run_side(&corral, scenario, shape.zipf).await?;
    if let Some(sampler) = sampler {
        sampler.abort();
    }
    let mut limits = std::mem::take(&mut *limits.lock().unwrap_or_else(PoisonError::into_inner));
    limits.sort_unstable();
    let quantile = |q: f64| {
        limits
            .get(((limits.len() as f64 - 1.0) * q).round() as usize)
            .copied()
    };
    let settled = (quantile(0.1), quantile(0.5), quantile(0.9));
    let mut corral_report = SideReport::sqlite("corral", scenario, source.take_counts(), tally);
    corral_report.coalesced = Some(corral.cache.stats().coalesced - coalesced);
    hot.fill(&mut corral_report);

    let source = Arc::new(db.source()?);
    let naive = Arc::new(NaiveSide::new(Duration::from_secs(600), &source));
    warm_up(&naive, scenario).await?;
    source.take_counts();
    let (tally, hot) = run_side(&naive, scenario, shape.zipf).await?;
    let mut naive_report = SideReport::sqlite("naive", scenario, source.take_counts(), tally);
    hot.fill(&mut naive_report);

    let setting = Setting::Embedded {
        database: db,
        budget,
        zipf: shape.zipf,
        adaptive: match (shape.adaptive_max, settled) {
            (Some(max), (Some(p10), Some(p50), Some(p90))) => Some((max, [p10, p50, p90])),
            _ => None,
        },
    };
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

/// How the default run's corral side and callers are set up.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    /// corral's fill budget (`None`: the pool's size; 0: none).
    pub(crate) budget: Option<u64>,
    /// The Zipf exponent of the keys asked for (0: each in turn).
    pub(crate) zipf: f64,
    /// The adaptive budget's maximum, if it adapts.
    pub(crate) adaptive_max: Option<u64>,
}

/// Every round of the scenario through one contender, and what the callers
/// of the hottest keys measured (Zipf runs).
async fn run_side<C: Contender>(
    contender: &Arc<C>,
    scenario: Scenario,
    zipf: f64,
) -> anyhow::Result<(Tally, Hot)> {
    let mut total = Tally::default();
    let mut hot = Hot::default();
    for round in 0..scenario.rounds {
        let keys = round_keys(&format!("local:r{round}"), scenario.keys);
        if zipf == 0.0 {
            total.absorb(run_round(contender, scenario.callers, &keys).await?);
            continue;
        }
        // Caller i asks for asked[i]; the 10 first keys are the hottest.
        let asked = zipf_keys(&keys, scenario.callers, zipf, round);
        let timed = Arc::new(Timed {
            inner: Arc::clone(contender),
            hot: keys.iter().take(10).cloned().collect(),
            hot_us: Mutex::default(),
        });
        total.absorb(run_round(&timed, scenario.callers, &asked).await?);
        hot.distinct += asked.iter().collect::<HashSet<_>>().len() as u64;
        let mut samples = timed.hot_us.lock().unwrap_or_else(PoisonError::into_inner);
        hot.samples_us.append(&mut samples);
    }
    Ok((total, hot))
}

/// `callers` keys drawn from `keys` with weight 1/k^s for the k-th (a fixed
/// seed per round, so both sides get the same draws).
fn zipf_keys(keys: &[String], callers: u64, s: f64, round: u64) -> Vec<String> {
    let mut cumulative = Vec::with_capacity(keys.len());
    let mut total = 0.0;
    for k in 1..=keys.len() {
        total += 1.0 / (k as f64).powf(s);
        cumulative.push(total);
    }
    let mut rng = fastrand::Rng::with_seed(0x5eed_0000 + round);
    (0..callers)
        .map(|_| {
            let draw = rng.f64() * total;
            let k = cumulative
                .partition_point(|&c| c < draw)
                .min(keys.len() - 1);
            keys[k].clone()
        })
        .collect()
}

/// A contender whose callers of the hottest keys are timed apart.
struct Timed<C> {
    inner: Arc<C>,
    hot: HashSet<String>,
    hot_us: Mutex<Vec<u64>>,
}

impl<C: Contender> Contender for Timed<C> {
    async fn get(&self, key: &str) -> anyhow::Result<String> {
        let started = Instant::now();
        let value = self.inner.get(key).await;
        if self.hot.contains(key) {
            let took = corral_testkit::micros(started.elapsed());
            let mut hot_us = self.hot_us.lock().unwrap_or_else(PoisonError::into_inner);
            hot_us.push(took);
        }
        value
    }
}

/// The Zipf runs' extra figures.
#[derive(Default)]
struct Hot {
    samples_us: Vec<u64>,
    distinct: u64,
}

impl Hot {
    /// Adds the figures to a side's report (nothing for uniform runs).
    fn fill(self, report: &mut SideReport) {
        if self.distinct == 0 {
            return;
        }
        let hot = Tally {
            latencies_us: self.samples_us,
            ..Tally::default()
        };
        report.hot_p50_ms = Some(hot.latency_ms(0.5));
        report.distinct_keys = Some(self.distinct);
    }
}

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
use super::sqlite::{Database, SqliteArgs, SqliteSource};
use super::timeline::Timeline;

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
    let mut builder = corral::Cache::<String>::builder("herd")
        .ttl(Duration::from_secs(600))
        .capacity(corral::Capacity::Entries(
            (scenario.keys * scenario.rounds).max(1024),
        ))
        .fill_timeout(Duration::from_millis(db.pool_wait_ms) + Duration::from_secs(30));
    let mut adaptive = None;
    if budget > 0 {
        // Queued fills wait as long as the run may take: the demo counts
        // callers answered, not callers turned away.
        let mut fills = corral::FillBudget::new(usize::try_from(budget)?);
        fills = fills.max_wait(Duration::from_secs(600));
        if let Some(max) = shape.adaptive_max {
            fills = fills.adaptive(1, usize::try_from(max)?);
            adaptive = Some(fills.clone());
        }
        builder = builder.fill_budget(fills);
    }
    let cache = builder.build().context("building the corral cache")?;
    let timeline = Arc::default();
    let source = Arc::new(db.source(&timeline)?);
    let corral = Arc::new(CorralSide {
        cache,
        source: Arc::clone(&source),
    });
    warm_up(&corral, scenario, &timeline).await?;
    let coalesced = corral.cache.stats().coalesced;
    // An adaptive budget's limit, sampled every 20 ms while fills queue.
    let mut limits = Vec::new();
    let sample = async {
        let Some(fills) = &adaptive else {
            return std::future::pending().await;
        };
        loop {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let stats = fills.stats();
            if stats.queued > 0 {
                limits.push(stats.limit as u64);
            }
        }
    };
    let measured = measure("corral", &corral, &source, &timeline, scenario, shape.zipf);
    let mut corral_report = tokio::select! {
        report = measured => report?,
        () = sample => unreachable!("sampling never ends"),
    };
    corral_report.coalesced = Some(corral.cache.stats().coalesced - coalesced);
    limits.sort_unstable();
    let quantile = |q: f64| limits[((limits.len() - 1) as f64 * q).round() as usize];
    let adaptive = shape.adaptive_max.filter(|_| !limits.is_empty());
    let adaptive = adaptive.map(|max| (max, [0.1, 0.5, 0.9].map(quantile)));

    let timeline = Arc::default();
    let source = Arc::new(db.source(&timeline)?);
    let naive = Arc::new(NaiveSide::new(Duration::from_secs(600), &source));
    warm_up(&naive, scenario, &timeline).await?;
    let naive_report = measure("naive", &naive, &source, &timeline, scenario, shape.zipf).await?;
    let zipf = shape.zipf;
    let (database, corral, naive) = (db, corral_report, naive_report);
    let setting = Setting::Embedded {
        database,
        budget,
        zipf,
        adaptive,
    };
    Ok(Comparison::new(scenario, setting, corral, naive))
}

/// Uncounted: one call fills a key of its own, then callers hit it, so
/// neither side's first round pays for starting threads, opening a
/// connection and growing allocations — without a stampede of its own.
async fn warm_up<C: Contender>(
    contender: &Arc<C>,
    scenario: Scenario,
    timeline: &Arc<Timeline>,
) -> anyhow::Result<()> {
    let keys = round_keys("local-warm-up", 1);
    run_round(contender, 1, &keys, timeline).await?;
    run_round(contender, scenario.callers.min(1000), &keys, timeline).await?;
    Ok(())
}

/// Every round of the scenario through one side (counted from here on);
/// Zipf runs time the callers of each round's 10 hottest keys apart.
async fn measure<C: Contender>(
    side: &'static str,
    contender: &Arc<C>,
    source: &SqliteSource,
    timeline: &Arc<Timeline>,
    scenario: Scenario,
    zipf: f64,
) -> anyhow::Result<SideReport> {
    source.take_counts();
    timeline.take();
    let (mut total, mut hot_us, mut distinct) = (Tally::default(), Vec::new(), 0);
    for round in 0..scenario.rounds {
        let keys = round_keys(&format!("local:r{round}"), scenario.keys);
        let (asked, hot) = match zipf {
            0.0 => (keys, HashSet::new()),
            s => {
                let hot = keys.iter().take(10).cloned().collect();
                (zipf_keys(&keys, scenario.callers, s, round), hot)
            }
        };
        distinct += asked.iter().collect::<HashSet<_>>().len() as u64;
        let timed = Arc::new(Timed {
            inner: Arc::clone(contender),
            hot,
            hot_us: Mutex::default(),
        });
        total.absorb(run_round(&timed, scenario.callers, &asked, timeline).await?);
        hot_us.append(&mut timed.hot_us.lock().unwrap_or_else(PoisonError::into_inner));
    }
    let counts = source.take_counts();
    let mut report = SideReport::sqlite(side, scenario, counts, total, timeline.take());
    if zipf != 0.0 {
        let hot = Tally {
            latencies_us: hot_us,
            ..Tally::default()
        };
        (report.hot_p50_ms, report.distinct_keys) = (Some(hot.latency_ms(0.5)), Some(distinct));
    }
    Ok(report)
}

/// `callers` keys drawn from `keys` with weight 1/k^s for the k-th (a fixed
/// seed per round, so both sides get the same draws).
fn zipf_keys(keys: &[String], callers: u64, s: f64, round: u64) -> Vec<String> {
    let cumulative: Vec<f64> = (1..=keys.len())
        .scan(0.0, |total, k| {
            *total += 1.0 / (k as f64).powf(s);
            Some(*total)
        })
        .collect();
    let total = cumulative.last().copied().unwrap_or(0.0);
    let mut rng = fastrand::Rng::with_seed(0x5eed_0000 + round);
    let mut draw = || {
        let at = rng.f64() * total;
        cumulative.partition_point(|&c| c < at)
    };
    (0..callers)
        .map(|_| keys[draw().min(keys.len() - 1)].clone())
        .collect()
}

/// A contender whose callers of the `hot` keys are timed apart.
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

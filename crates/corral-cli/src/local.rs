//! The runs in this process: corral's read-through against a naive
//! cache-aside over a map, each over a source of its own.
//!
//! - The default run: both read the same seeded SQLite file, each through
//!   its own bounded pool; corral's fills share a fill budget (by default
//!   of the pool's size); callers ask for keys in turn or Zipf-distributed.
//! - `--outage`: the sleeping source fails for a while. Entries expire
//!   between rounds; corral (with fail-safe) keeps answering with the last
//!   good value while the naive cache-aside passes the failures on. Rounds:
//!   one with the source up (cold fill), `--rounds` with it down, one with
//!   it back up, further apart than the TTL, so every round finds its keys
//!   expired and asks the source again.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use corral_testkit::Tally;

use crate::plot::group;
use crate::report::{Comparison, SideReport};
use crate::scenario::{fill_budget, round_keys, run_round, Side};
use crate::source::{seed, Source};
use crate::HerdArgs;

/// How long a value is fresh in the outage.
const TTL: Duration = Duration::from_millis(100);
/// The outage's pause between rounds: past the TTL, so each round is a
/// refill.
const BETWEEN_ROUNDS: Duration = Duration::from_millis(150);
/// How long a fail-safe value is re-served after a failed fill: shorter
/// than the pause, so every outage round tries the source once per key.
const THROTTLE: Duration = Duration::from_millis(50);

/// Seeds the database, then runs the scenario through corral, then through the
/// naive cache-aside; fails if the database cannot be created, the cache cannot
/// be built or a caller task panicked.
pub(crate) async fn run(args: &HerdArgs) -> anyhow::Result<Comparison> {
    let seeding = args.clone();
    let (_dir, db) = tokio::task::spawn_blocking(move || seed(&seeding)).await??;
    let budget = args.budget.unwrap_or(args.pool_size);
    let entries = (args.keys * args.rounds).max(1024);
    let mut cache = corral::Cache::<String>::builder("herd")
        .ttl(Duration::from_secs(600))
        .capacity(corral::Capacity::Entries(entries))
        .fill_timeout(Duration::from_millis(args.pool_wait_ms) + Duration::from_secs(30));
    if let Some(fills) = fill_budget(args, budget)? {
        cache = cache.fill_budget(fills);
    }
    let (corral, naive) = sides(cache, Duration::from_secs(600), Some(&db), args).await?;
    let setting = setting(args, &db, budget);
    Ok(Comparison::new(args, setting, corral, naive))
}

/// Runs the outage through corral, then through the naive side; fails if
/// the cache cannot be built or a caller task panicked.
pub(crate) async fn outage(args: &HerdArgs) -> anyhow::Result<Comparison> {
    let cache = corral::Cache::<String>::builder("herd-outage")
        .ttl(TTL)
        .fail_safe(Duration::from_secs(3600))
        .fail_safe_throttle(THROTTLE)
        .fill_timeout(Duration::from_millis(args.fill_ms) + Duration::from_secs(30))
        .capacity(corral::Capacity::Entries(args.keys.max(1024)));
    let (corral, naive) = sides(cache, TTL, None, args).await?;
    let (callers, keys, rounds) = (group(args.callers), group(args.keys), args.rounds);
    let title = format!(
        "corral herd --outage: {callers} callers on {keys} keys per round; TTL {} ms, rounds {} ms \
         apart\nsource: each call {} ms, up in round 1, down in rounds 2 to {}, up in round {}",
        TTL.as_millis(),
        BETWEEN_ROUNDS.as_millis(),
        args.fill_ms,
        rounds + 1,
        rounds + 2,
    );
    let setting = (serde_json::json!({ "mode": "outage" }), title, Vec::new());
    Ok(Comparison::new(args, setting, corral, naive))
}

/// Every round through corral's side (`cache`), then through the naive
/// side (entries fresh for `ttl`), each over a source of its own: the
/// SQLite file `db`, or else the sleeping source.
async fn sides(
    cache: corral::CacheBuilder<String>,
    ttl: Duration,
    db: Option<&std::path::Path>,
    args: &HerdArgs,
) -> anyhow::Result<(SideReport, SideReport)> {
    let cache = cache.build().context("building the corral cache")?;
    let on = Arc::new(Source::new(args, db)?);
    let corral = measure("corral", &Arc::new(Side::corral(cache, &on)), &on, args).await?;
    let on = Arc::new(Source::new(args, db)?);
    let naive = measure("naive", &Arc::new(Side::naive(ttl, &on)), &on, args).await?;
    Ok((corral, naive))
}

/// Every round through one side, after an uncounted warm-up: one call
/// fills a key of its own, then callers hit it, so the first round pays
/// nothing for starting threads, opening a connection and growing
/// allocations. The outage's rounds are up, down ×`--rounds`, up; each
/// round is counted apart too.
async fn measure(
    name: &'static str,
    side: &Arc<Side<Source>>,
    source: &Source,
    args: &HerdArgs,
) -> anyhow::Result<SideReport> {
    let (warm, timeline) = (round_keys("local-warm-up", 1), &source.timeline);
    run_round(side, 1, &warm, timeline).await?;
    run_round(side, args.callers.min(1000), &warm, timeline).await?;
    let (_, _, before) = (source.take_counts(), timeline.take(), side.counted());
    let rounds = args.rounds + if args.outage { 2 } else { 0 };
    let (mut tally, mut hot, mut figures) = (Tally::default(), Tally::default(), Vec::new());
    let fail_safe = || side.counted().map_or(0, |[_, fail_safe]| fail_safe);
    for round in 0..rounds {
        let source_up = !args.outage || round == 0 || round == rounds - 1;
        source.down.store(!source_up, Relaxed);
        if args.outage && round > 0 {
            tokio::time::sleep(BETWEEN_ROUNDS).await;
        }
        let (keys, asked) = asked(args, round);
        let ran = || source.counts[0].load(Relaxed);
        let (calls, served) = (ran(), fail_safe());
        let played = run_round(side, args.callers, &asked, timeline).await?;
        let (source_calls, fail_safe) = (ran() - calls, fail_safe() - served);
        figures.push(serde_json::json!({
            "source_up": source_up, "answered": played.successes, "errors": played.failures,
            "source_calls": source_calls, "fail_safe": fail_safe,
        }));
        // The latencies of the callers of the round's 10 hottest keys.
        let hottest = &keys[..keys.len().min(10)];
        let asked = asked.iter().zip(&played.latencies_us);
        let hot_us = asked.filter(|(key, _)| hottest.contains(key));
        hot.latencies_us.extend(hot_us.map(|(_, us)| us));
        tally.absorb(played);
    }
    let [ran, timeouts, errors] = source.take_counts();
    let (calls, fills) = (args.callers * rounds, ran + timeouts + errors);
    let mut report = SideReport::new(name, calls, fills, tally, timeline.take());
    if source.pool.is_some() {
        (report.sqlite_queries, report.timeouts, report.errors) =
            (Some(ran), Some(timeouts), Some(errors));
    }
    if let (Some([coalesced, fail_safe]), Some([then, _])) = (side.counted(), before) {
        report.coalesced = Some(coalesced - then);
        report.fail_safe = Some(fail_safe).filter(|_| args.outage);
    }
    report.hot_p50_ms = (args.zipf != 0.0).then(|| hot.latency_ms(0.5));
    report.rounds = figures;
    Ok(report)
}

/// A round's keys (fresh ones, but the outage's: the same every round),
/// and the key each of its callers asks for: caller `i` key `i % keys`, or
/// with `--zipf s` a key drawn with weight 1/k^s for the k-th (a fixed seed
/// per round, so both sides get the same draws).
fn asked(args: &HerdArgs, round: u64) -> (Vec<String>, Vec<String>) {
    let fresh = if args.outage { 0 } else { round };
    let keys = round_keys(&format!("local:r{fresh}"), args.keys);
    let cumulative: Vec<f64> = (1..=keys.len())
        .scan(0.0, |total, k| {
            *total += 1.0 / (k as f64).powf(args.zipf);
            Some(*total)
        })
        .collect();
    let total = cumulative.last().copied().unwrap_or(0.0);
    let mut rng = fastrand::Rng::with_seed(0x5eed_0000 + round);
    let mut pick = |caller: usize| {
        let at = rng.f64() * total;
        match args.zipf {
            0.0 => caller % keys.len(),
            _ => cumulative.partition_point(|&c| c < at),
        }
    };
    let asked = (0..args.callers as usize).map(|i| keys[pick(i).min(keys.len() - 1)].clone());
    (keys.clone(), asked.collect())
}

/// The run's JSON setting, title and limits at the source: the pool,
/// and corral's `budget` (adaptive up to `--adaptive-max`).
fn setting(
    args: &HerdArgs,
    db: &std::path::Path,
    budget: u64,
) -> (serde_json::Value, String, Vec<(String, u64)>) {
    let (pool, wait) = (args.pool_size, group(args.pool_wait_ms));
    let mut limits = vec![(format!("pool of {pool} connections"), pool)];
    let corral_budget = match (budget, args.adaptive_max) {
        (0, _) => "none".to_owned(),
        (n, None) => {
            limits.push((format!("corral's budget of {n}"), n));
            format!("{n} fills at once")
        }
        (n, Some(max)) => {
            limits.push((format!("corral's budget, at most {max}"), max));
            format!("adaptive from {n} (1 to {max})")
        }
    };
    let keys = match args.zipf {
        0.0 => "uniform".to_owned(),
        s => format!("Zipf s = {s}"),
    };
    let title = format!(
        "corral herd: {} callers on {} cold keys, {} rounds (in process, keys {keys})\n\
         source: SQLite, {} orders of {} users; pool of {pool} connections per side, wait ≤ \
         {wait} ms; corral's fill budget: {corral_budget}",
        group(args.callers),
        group(args.keys),
        group(args.rounds),
        group(args.rows),
        group(args.users),
    );
    let setting = serde_json::json!({
        "mode": "embedded", "budget": budget, "zipf": args.zipf, "adaptive_max": args.adaptive_max,
        "database": { "path": db, "rows": args.rows, "users": args.users, "pool_size": pool,
            "pool_wait_ms": args.pool_wait_ms },
    });
    (setting, title, limits)
}

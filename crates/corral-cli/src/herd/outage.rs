//! `corral herd --outage`: the source of truth fails for a while. Entries
//! expire between rounds; corral (with fail-safe) keeps answering with the
//! last good value while the naive cache-aside passes the failures on.
//!
//! Rounds: one with the source up (cold fill), `--rounds` with it down, one
//! with it back up. Rounds are further apart than the TTL, so every round
//! finds its keys expired and asks the source again.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use corral_testkit::Tally;
use serde::Serialize;

use super::report::{group, Comparison, SideReport};
use super::scenario::{round_keys, run_round, Contender, CorralSide, NaiveSide, Source};
use super::HerdArgs;

/// How long a value is fresh in this scenario.
const TTL: Duration = Duration::from_millis(100);
/// The pause between rounds: past the TTL, so each round is a refill.
const BETWEEN_ROUNDS: Duration = Duration::from_millis(150);
/// How long a fail-safe value is re-served after a failed fill: shorter
/// than the pause, so every outage round tries the source once per key.
const THROTTLE: Duration = Duration::from_millis(50);

/// One round's figures on one side.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Round {
    pub(crate) source_up: bool,
    /// Calls answered with the key's value.
    pub(crate) answered: u64,
    pub(crate) errors: u64,
    /// Calls of the source in this round.
    pub(crate) source_calls: u64,
    /// Answers served by fail-safe (corral only).
    pub(crate) fail_safe: u64,
}

/// Runs the outage scenario through corral, then through the naive side; fails
/// if the cache cannot be built or a caller task panicked.
pub(crate) async fn run(args: &HerdArgs) -> anyhow::Result<Comparison> {
    let cache = corral::Cache::<String>::builder("herd-outage")
        .ttl(TTL)
        .fail_safe(Duration::from_secs(3600))
        .fail_safe_throttle(THROTTLE)
        .fill_timeout(args.fill() + Duration::from_secs(30))
        .capacity(corral::Capacity::Entries(args.keys.max(1024)))
        .build()
        .context("building the corral cache")?;
    let fill = args.fill();
    let source = || {
        Arc::new(Source {
            fill,
            ..Source::default()
        })
    };
    let (for_corral, for_naive) = (source(), source());
    let corral = Arc::new(CorralSide::new(cache, &for_corral));
    let corral = play("corral", &corral, &for_corral, args).await?;
    let naive = Arc::new(NaiveSide::new(TTL, &for_naive));
    let naive = play("naive", &naive, &for_naive, args).await?;
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

/// The up, down ×`--rounds`, up rounds through one side.
async fn play<C: Contender>(
    side: &'static str,
    contender: &Arc<C>,
    source: &Source,
    args: &HerdArgs,
) -> anyhow::Result<SideReport> {
    let keys = round_keys("outage", args.keys);
    let (total, mut tally, mut rounds) = (args.rounds + 2, Tally::default(), Vec::new());
    let fail_safe = || contender.fail_safe().unwrap_or(0);
    for round in 0..total {
        let source_up = round == 0 || round == total - 1;
        source.down.store(!source_up, Relaxed);
        if round > 0 {
            tokio::time::sleep(BETWEEN_ROUNDS).await;
        }
        let before = (source.calls.load(Relaxed), fail_safe());
        let played = run_round(contender, args.callers, &keys, &source.timeline).await?;
        rounds.push(Round {
            source_up,
            answered: played.successes,
            errors: played.failures,
            source_calls: source.calls.load(Relaxed) - before.0,
            fail_safe: fail_safe() - before.1,
        });
        tally.absorb(played);
    }
    let (calls, fills) = (args.callers * total, source.calls.load(Relaxed));
    let mut report = SideReport::new(side, calls, fills, tally);
    report.fail_safe = contender.fail_safe();
    report.rounds = rounds;
    Ok(report.over(source.timeline.take()))
}

//! `corral herd --outage`: the source of truth fails for a while. Entries
//! expire between rounds; corral (with fail-safe) keeps answering with the
//! last good value while the naive cache-aside passes the failures on.
//!
//! Rounds: one with the source up (cold fill), `--rounds` with it down, one
//! with it back up. Rounds are further apart than the TTL, so every round
//! finds its keys expired and asks the source again.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use serde::Serialize;

use super::plot::Picture;
use super::report::{failure_line, group, render, Report};
use super::scenario::{round_keys, run_round, Contender, Load, NaiveSide, Scenario};
use super::timeline::{Gauge, Series, Timeline};

/// How long a value is fresh in this scenario.
const TTL: Duration = Duration::from_millis(100);
/// The pause between rounds: past the TTL, so each round is a refill.
const BETWEEN_ROUNDS: Duration = Duration::from_millis(150);
/// How long a fail-safe value is re-served after a failed fill: shorter
/// than the pause, so every outage round tries the source once per key.
const THROTTLE: Duration = Duration::from_millis(50);

/// A sleeping source that counts its calls and can be switched off.
#[derive(Default)]
struct FlakySource {
    calls: AtomicU64,
    fill: Duration,
    down: AtomicBool,
    timeline: Arc<Timeline>,
}

impl Load for FlakySource {
    async fn load(&self, key: &str) -> anyhow::Result<String> {
        self.calls.fetch_add(1, Relaxed);
        let _running = self.timeline.enter(Gauge::Running);
        tokio::time::sleep(self.fill).await;
        anyhow::ensure!(!self.down.load(Relaxed), "the source is down");
        Ok(format!("{key} → its value"))
    }
}

/// corral with fail-safe over its source, counting the answers it served
/// by fail-safe.
struct CorralSide(corral::Cache<String>, Arc<FlakySource>, AtomicU64);

impl Contender for CorralSide {
    async fn get(&self, key: &str) -> anyhow::Result<String> {
        let CorralSide(cache, source, fail_safe_answers) = self;
        let (source, owned) = (Arc::clone(source), key.to_owned());
        let fill = || async move { source.load(&owned).await.map(corral::Answer::value) };
        let fetched = cache.get_or_fill_answer(key, fill).await;
        let fetched = fetched.map_err(|e| anyhow::anyhow!("corral fetch({key}): {e}"))?;
        if fetched.freshness == corral::Freshness::FailSafe {
            fail_safe_answers.fetch_add(1, Relaxed);
        }
        fetched.value.context("no value")
    }
}

/// One round's figures on one side.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct OutageRound {
    pub(crate) source_up: bool,
    /// Calls answered with the key's value.
    pub(crate) answered: u64,
    pub(crate) errors: u64,
    /// Calls of the source in this round.
    pub(crate) source_calls: u64,
    /// Answers served by fail-safe (corral only).
    pub(crate) fail_safe: u64,
}

/// The outage scenario's report.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct OutageReport {
    /// Always `outage`.
    mode: &'static str,
    callers: u64,
    keys: u64,
    corral: Vec<OutageRound>,
    naive: Vec<OutageRound>,
    corral_errors: u64,
    first_corral_failure: Option<String>,
    verdict: String,
    /// Each side over time, its rounds end to end.
    corral_timeline: Series,
    naive_timeline: Series,
}

impl Report for OutageReport {
    /// Only corral's failures count: the naive side's are the comparison.
    fn failures(&self) -> u64 {
        self.corral_errors
    }

    fn title(&self) -> String {
        let (ttl, apart) = (TTL.as_millis(), BETWEEN_ROUNDS.as_millis());
        let (callers, keys) = (group(self.callers), group(self.keys));
        format!(
            "corral herd --outage: {callers} callers on {keys} keys per round; \
             TTL {ttl} ms, rounds {apart} ms apart"
        )
    }

    fn table(&self) -> String {
        let header = "|corral ok|fail-safe|errors|source calls|naive ok|errors|source calls";
        let rows = self.corral.iter().zip(&self.naive).enumerate();
        let rows = rows.map(|(i, (c, n))| {
            let state = if c.source_up { "up" } else { "DOWN" };
            let corral = [c.answered, c.fail_safe, c.errors, c.source_calls];
            let naive = [n.answered, n.errors, n.source_calls];
            let figures = corral.into_iter().chain(naive).map(group);
            let label = format!("round {} (source {state})", i + 1);
            std::iter::once(label).chain(figures).collect()
        });
        let first = self.first_corral_failure.as_deref();
        let failures = failure_line("corral", self.corral_errors, first);
        let (title, table) = (self.title(), render(header, rows));
        format!("{title}\n\n{table}\n{}\n{failures}", self.verdict)
    }

    fn picture(&self) -> Picture<'_> {
        let sides = [
            ("corral", &self.corral_timeline),
            ("naive", &self.naive_timeline),
        ];
        let (title, limits) = (self.title(), Vec::new());
        Picture {
            title,
            sides,
            limits,
        }
    }
}

/// Runs the outage scenario through corral, then through the naive side; fails
/// if the cache cannot be built or a caller task panicked.
pub(crate) async fn run(scenario: Scenario) -> anyhow::Result<OutageReport> {
    let cache = corral::Cache::<String>::builder("herd-outage")
        .ttl(TTL)
        .fail_safe(Duration::from_secs(3600))
        .fail_safe_throttle(THROTTLE)
        .fill_timeout(scenario.fill + Duration::from_secs(30))
        .capacity(corral::Capacity::Entries(scenario.keys.max(1024)))
        .build()
        .context("building the corral cache")?;
    let source = || {
        let fill = scenario.fill;
        Arc::new(FlakySource {
            fill,
            ..FlakySource::default()
        })
    };
    let flaky = source();
    let corral = Arc::new(CorralSide(cache, Arc::clone(&flaky), AtomicU64::new(0)));
    let fail_safe = || corral.2.swap(0, Relaxed);
    let (corral_rounds, first_failure) = run_side(&corral, &flaky, scenario, fail_safe).await?;
    let corral_timeline = flaky.timeline.take();
    let flaky = source();
    let naive = Arc::new(NaiveSide::new(TTL, &flaky));
    let (naive_rounds, _) = run_side(&naive, &flaky, scenario, || 0).await?;
    let naive_timeline = flaky.timeline.take();

    let down = |rounds: &[OutageRound], f: fn(&OutageRound) -> u64| {
        rounds.iter().filter(|r| !r.source_up).map(f).sum::<u64>()
    };
    let verdict = format!(
        "source down for {} calls: corral answered {} of them ({} errors); naive: {} errors",
        group(scenario.callers * scenario.rounds),
        group(down(&corral_rounds, |r| r.answered)),
        group(down(&corral_rounds, |r| r.errors)),
        group(down(&naive_rounds, |r| r.errors)),
    );
    Ok(OutageReport {
        mode: "outage",
        callers: scenario.callers,
        keys: scenario.keys,
        corral_errors: corral_rounds.iter().map(|r| r.errors).sum(),
        corral: corral_rounds,
        naive: naive_rounds,
        first_corral_failure: first_failure,
        verdict,
        corral_timeline,
        naive_timeline,
    })
}

/// The up, down ×`scenario.rounds`, up rounds through one side: their
/// figures and the side's first failure.
async fn run_side<C: Contender>(
    contender: &Arc<C>,
    source: &FlakySource,
    scenario: Scenario,
    mut fail_safe: impl FnMut() -> u64,
) -> anyhow::Result<(Vec<OutageRound>, Option<String>)> {
    let keys = round_keys("outage", scenario.keys);
    let total = scenario.rounds + 2;
    let (mut rounds, mut first_failure) = (Vec::new(), None);
    for round in 0..total {
        let source_up = round == 0 || round == total - 1;
        source.down.store(!source_up, Relaxed);
        if round > 0 {
            tokio::time::sleep(BETWEEN_ROUNDS).await;
        }
        let calls_before = source.calls.load(Relaxed);
        let tally = run_round(contender, scenario.callers, &keys, &source.timeline).await?;
        first_failure = first_failure.or(tally.first_failure);
        let (answered, errors) = (tally.successes, tally.failures);
        let source_calls = source.calls.load(Relaxed) - calls_before;
        rounds.push(OutageRound {
            source_up,
            answered,
            errors,
            source_calls,
            fail_safe: fail_safe(),
        });
    }
    Ok((rounds, first_failure))
}

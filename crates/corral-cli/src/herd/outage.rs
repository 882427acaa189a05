//! `corral herd --outage`: the source of truth fails for a while. Entries
//! expire between rounds; corral (with fail-safe) keeps answering with the
//! last good value while the naive cache-aside passes the failures on.
//!
//! Rounds: one with the source up (cold fill), `--rounds` with the source
//! down, one with it back up. Between rounds the callers wait past the TTL,
//! so every round finds its keys expired and asks the source again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::Serialize;

use super::report::{failure_line, group, render_table, Report};
use super::scenario::{run_round, Contender, Scenario, Source};
use super::Progress;

/// How long a value is fresh in this scenario.
const TTL: Duration = Duration::from_millis(100);
/// The pause between rounds: past the TTL, so each round is a refill.
const BETWEEN_ROUNDS: Duration = Duration::from_millis(150);
/// How long a fail-safe value is re-cached after a failed fill: shorter
/// than the pause, so every outage round tries the source once per key.
const THROTTLE: Duration = Duration::from_millis(50);

/// A source of truth that can be switched off.
struct FlakySource {
    source: Source,
    down: AtomicBool,
    failed: AtomicU64,
}

#[derive(Debug)]
struct SourceDown;

impl std::fmt::Display for SourceDown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the source is down")
    }
}

impl FlakySource {
    fn new(fill: Duration) -> Self {
        Self {
            source: Source::new(fill),
            down: AtomicBool::new(false),
            failed: AtomicU64::new(0),
        }
    }

    async fn load(&self, key: &str) -> Result<String, SourceDown> {
        let value = self.source.load(key).await;
        if self.down.load(Relaxed) {
            self.failed.fetch_add(1, Relaxed);
            return Err(SourceDown);
        }
        Ok(value)
    }
}

/// corral with fail-safe, counting what freshness each caller got.
struct CorralSide {
    cache: corral::Cache<String>,
    source: Arc<FlakySource>,
    fail_safe_answers: AtomicU64,
}

impl Contender for CorralSide {
    async fn get(&self, key: &str) -> anyhow::Result<String> {
        let source = Arc::clone(&self.source);
        let owned = key.to_owned();
        let fetched = self
            .cache
            .fetch(key, corral::FillOptions::new(), move || async move {
                source.load(&owned).await.map(corral::Answer::value)
            })
            .await
            .map_err(|e| anyhow::anyhow!("corral fetch({key}): {e}"))?;
        if fetched.freshness == corral::Freshness::FailSafe {
            self.fail_safe_answers.fetch_add(1, Relaxed);
        }
        fetched.value.context("no value")
    }
}

/// The usual cache-aside with a TTL: on a miss or an expired entry call the
/// source; its failure is the caller's failure.
struct NaiveSide {
    map: RwLock<HashMap<String, (String, Instant)>>,
    source: Arc<FlakySource>,
}

impl Contender for NaiveSide {
    async fn get(&self, key: &str) -> anyhow::Result<String> {
        let cached = self
            .map
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .filter(|(_, expires)| *expires > Instant::now())
            .map(|(value, _)| value.clone());
        if let Some(value) = cached {
            return Ok(value);
        }
        let value = self
            .source
            .load(key)
            .await
            .map_err(|e| anyhow::anyhow!("naive get({key}): {e}"))?;
        self.map
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.to_owned(), (value.clone(), Instant::now() + TTL));
        Ok(value)
    }
}

/// One round's figures on one side.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct OutageRound {
    /// Whether the source was up.
    pub(crate) source_up: bool,
    /// Calls answered with the key's value.
    pub(crate) answered: u64,
    /// Calls that failed.
    pub(crate) errors: u64,
    /// Calls of the source in this round.
    pub(crate) source_calls: u64,
    /// Answers served by fail-safe (corral only).
    pub(crate) fail_safe: Option<u64>,
}

/// The outage scenario's report.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct OutageReport {
    /// Always `outage`.
    pub(crate) mode: &'static str,
    /// Concurrent callers per round.
    pub(crate) callers: u64,
    /// Keys.
    pub(crate) keys: u64,
    /// corral's rounds.
    pub(crate) corral: Vec<OutageRound>,
    /// The naive cache-aside's rounds.
    pub(crate) naive: Vec<OutageRound>,
    /// corral's failed calls over the run.
    pub(crate) corral_errors: u64,
    /// The naive side's failed calls over the run.
    pub(crate) naive_errors: u64,
    /// The first corral failure, if any.
    pub(crate) first_corral_failure: Option<String>,
    /// One line that says what the figures mean.
    pub(crate) verdict: String,
}

impl Report for OutageReport {
    /// Only corral's failures count: the naive side's are the comparison.
    fn failures(&self) -> u64 {
        self.corral_errors
    }

    fn table(&self) -> String {
        let mut out = format!(
            "corral herd --outage: {} callers on {} keys per round; TTL {} ms, rounds {} ms apart\n\n",
            group(self.callers),
            group(self.keys),
            TTL.as_millis(),
            BETWEEN_ROUNDS.as_millis(),
        );
        let labels: Vec<String> = self
            .corral
            .iter()
            .enumerate()
            .map(|(i, round)| {
                format!(
                    "round {} (source {})",
                    i + 1,
                    if round.source_up { "up" } else { "DOWN" }
                )
            })
            .collect();
        let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
        let column = |rounds: &[OutageRound], f: &dyn Fn(&OutageRound) -> String| -> Vec<String> {
            rounds.iter().map(f).collect()
        };
        out.push_str(&render_table(
            &[
                "",
                "corral ok",
                "fail-safe",
                "errors",
                "source calls",
                "naive ok",
                "errors",
                "source calls",
            ],
            &labels,
            &[
                column(&self.corral, &|r| group(r.answered)),
                column(&self.corral, &|r| group(r.fail_safe.unwrap_or(0))),
                column(&self.corral, &|r| group(r.errors)),
                column(&self.corral, &|r| group(r.source_calls)),
                column(&self.naive, &|r| group(r.answered)),
                column(&self.naive, &|r| group(r.errors)),
                column(&self.naive, &|r| group(r.source_calls)),
            ],
        ));
        out.push('\n');
        out.push_str(&self.verdict);
        out.push('\n');
        out.push_str(&failure_line(
            "corral",
            self.corral_errors,
            self.first_corral_failure.as_deref(),
        ));
        out
    }
}

/// Runs the outage scenario through corral, then through the naive side.
///
/// # Errors
///
/// If the cache cannot be built or a caller task panicked.
pub(crate) async fn run(scenario: Scenario, progress: &Progress) -> anyhow::Result<OutageReport> {
    let source = Arc::new(FlakySource::new(scenario.fill));
    let cache = corral::Cache::<String>::builder("herd-outage")
        .ttl(TTL)
        .fail_safe(Duration::from_secs(3600))
        .fail_safe_throttle(THROTTLE)
        .fill_timeout(scenario.fill + Duration::from_secs(30))
        .max_entries(scenario.keys.max(1024))
        .build()
        .context("building the corral cache")?;
    let corral = Arc::new(CorralSide {
        cache,
        source: Arc::clone(&source),
        fail_safe_answers: AtomicU64::new(0),
    });
    let (corral_rounds, first_failure) =
        run_side("corral", &corral, &source, scenario, progress, || {
            Some(corral.fail_safe_answers.swap(0, Relaxed))
        })
        .await?;

    let naive_source = Arc::new(FlakySource::new(scenario.fill));
    let naive = Arc::new(NaiveSide {
        map: RwLock::new(HashMap::new()),
        source: Arc::clone(&naive_source),
    });
    let (naive_rounds, _) =
        run_side("naive", &naive, &naive_source, scenario, progress, || None).await?;

    let corral_errors = corral_rounds.iter().map(|r| r.errors).sum();
    let naive_errors = naive_rounds.iter().map(|r| r.errors).sum();
    let down_calls = scenario.callers * scenario.rounds;
    let verdict = format!(
        "source down for {} calls: corral answered {} of them ({} errors); naive: {} errors",
        group(down_calls),
        group(
            corral_rounds
                .iter()
                .filter(|r| !r.source_up)
                .map(|r| r.answered)
                .sum()
        ),
        group(
            corral_rounds
                .iter()
                .filter(|r| !r.source_up)
                .map(|r| r.errors)
                .sum()
        ),
        group(
            naive_rounds
                .iter()
                .filter(|r| !r.source_up)
                .map(|r| r.errors)
                .sum()
        ),
    );
    Ok(OutageReport {
        mode: "outage",
        callers: scenario.callers,
        keys: scenario.keys,
        corral: corral_rounds,
        naive: naive_rounds,
        corral_errors,
        naive_errors,
        first_corral_failure: first_failure,
        verdict,
    })
}

/// Runs the up, down ×`scenario.rounds`, up rounds through one side; returns
/// their figures and the side's first failure.
async fn run_side<C: Contender>(
    label: &str,
    contender: &Arc<C>,
    source: &FlakySource,
    scenario: Scenario,
    progress: &Progress,
    mut fail_safe: impl FnMut() -> Option<u64>,
) -> anyhow::Result<(Vec<OutageRound>, Option<String>)> {
    let keys: Vec<String> = (0..scenario.keys)
        .map(|k| Scenario::key("outage", 0, k))
        .collect();
    let total = scenario.rounds + 2;
    let mut rounds = Vec::new();
    let mut first_failure = None;
    for round in 0..total {
        let source_up = round == 0 || round == total - 1;
        source.down.store(!source_up, Relaxed);
        progress.round(label, round, total);
        if round > 0 {
            tokio::time::sleep(BETWEEN_ROUNDS).await;
        }
        let calls_before = source.source.calls();
        let tally = run_round(contender, scenario.callers, &keys).await?;
        if first_failure.is_none() {
            first_failure = tally.first_failure.clone();
        }
        rounds.push(OutageRound {
            source_up,
            answered: tally.successes,
            errors: tally.failures,
            source_calls: source.source.calls() - calls_before,
            fail_safe: fail_safe(),
        });
        progress.done_round();
    }
    Ok((rounds, first_failure))
}

//! Stampedes: concurrent [`Callers`] released together, timing their calls
//! ([`Tally`]); and a stampede in a worker process: the command the test
//! side sends (`stampede <key> <callers> <fill_ms> <counter>`), and what the
//! worker reports back in one line of its stdout (`@report <json>`).

use std::collections::BTreeSet;
use std::fmt::{self, Debug};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::Barrier;
use tokio::task::{JoinError, JoinHandle, JoinSet};

use crate::Worker;

/// One stampede: `callers` concurrent reads of `key`, whose fill counts
/// itself in the shared counter `counter` and then takes `fill`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stampede {
    /// The key every caller reads.
    pub key: String,
    /// How many callers read it at once.
    pub callers: usize,
    /// How long the fill takes.
    pub fill: Duration,
    /// The shared counter each fill increments.
    pub counter: String,
}

impl Stampede {
    /// The command's words after `stampede`; panics (it is a test's) on
    /// anything else.
    pub fn parse(words: &[String]) -> Self {
        let word = |at: usize| {
            words
                .get(at)
                .unwrap_or_else(|| panic!("stampede: word {at}"))
        };
        Self {
            key: word(0).clone(),
            callers: word(1).parse().expect("stampede: callers"),
            fill: Duration::from_millis(word(2).parse().expect("stampede: fill ms")),
            counter: word(3).clone(),
        }
    }
}

impl fmt::Display for Stampede {
    /// The command line a worker reads.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "stampede {} {} {} {}",
            self.key,
            self.callers,
            self.fill.as_millis(),
            self.counter
        )
    }
}

/// The callers of one stampede in one worker: how many got a value, the
/// distinct values they got, and the errors of the others.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct StampedeReport {
    /// Callers that got a value.
    pub ok: usize,
    /// The distinct values they got.
    pub values: BTreeSet<String>,
    /// The other callers' errors, formatted with `Debug`.
    pub errors: Vec<String>,
}

impl StampedeReport {
    /// Awaits every caller task and sums up what they got.
    pub async fn collect<E: Debug>(tasks: Vec<JoinHandle<Result<String, E>>>) -> Self {
        let mut report = Self::default();
        for task in tasks {
            match task.await.expect("caller task") {
                Ok(value) => {
                    report.ok += 1;
                    report.values.insert(value);
                }
                Err(error) => report.errors.push(format!("{error:?}")),
            }
        }
        report
    }

    /// Prints the report as the worker's `@report` line.
    pub fn print(&self) {
        println!("@report {}", serde_json::to_string(self).expect("json"));
    }

    /// Reads the next `@report` line of `worker`.
    pub async fn read(worker: &mut Worker) -> Self {
        serde_json::from_str(&worker.expect("@report").await).expect("report json")
    }
}

/// Concurrent callers, spawned at once and held at a gate so that they all
/// start together when [`Callers::release`] opens it; each times its own
/// call.
pub struct Callers {
    gate: Arc<Barrier>,
    tasks: JoinSet<(usize, Instant, Duration, Result<(), String>)>,
}

impl Callers {
    /// Spawns one task per call on the current tokio runtime. Each waits at
    /// the gate, then runs its call, which says whether the caller got what
    /// it should (`Err` with why not).
    pub fn arm<C, F>(calls: impl IntoIterator<Item = C>) -> Self
    where
        C: FnOnce() -> F + Send + 'static,
        F: Future<Output = Result<(), String>> + Send,
    {
        let calls: Vec<C> = calls.into_iter().collect();
        // Every caller and the releaser meet at the gate.
        let gate = Arc::new(Barrier::new(calls.len() + 1));
        let mut tasks = JoinSet::new();
        for (index, call) in calls.into_iter().enumerate() {
            let gate = Arc::clone(&gate);
            tasks.spawn(async move {
                gate.wait().await;
                let start = Instant::now();
                let outcome = call().await;
                (index, Instant::now(), start.elapsed(), outcome)
            });
        }
        Self { gate, tasks }
    }

    /// Opens the gate and waits for every call; the tally's latencies and
    /// ends are in the order of the calls.
    ///
    /// # Errors
    ///
    /// If a caller task panicked (a failed call is counted, not an error).
    pub async fn release(mut self) -> Result<Tally, JoinError> {
        let started = Instant::now();
        self.gate.wait().await;
        let mut tally = Tally {
            latencies_us: vec![0; self.tasks.len()],
            ends_us: vec![(0, false); self.tasks.len()],
            ..Tally::default()
        };
        while let Some(joined) = self.tasks.join_next().await {
            let (index, end, latency, outcome) = joined?;
            tally.latencies_us[index] = micros(latency);
            tally.ends_us[index] = (micros(end - started), outcome.is_ok());
            match outcome {
                Ok(()) => tally.successes += 1,
                Err(failure) => {
                    tally.failures += 1;
                    tally.first_failure.get_or_insert(failure);
                }
            }
        }
        tally.wall_us = micros(started.elapsed());
        Ok(tally)
    }
}

/// What released [`Callers`] measured (or several rounds of them, absorbed).
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tally {
    /// Each call's latency, in microseconds, in the order of the calls
    /// (absorbed rounds one after the other).
    pub latencies_us: Vec<u64>,
    /// When each call ended, in microseconds from the release of its
    /// round, and whether it got what it should; in the same order.
    pub ends_us: Vec<(u64, bool)>,
    /// Calls that got what they should.
    pub successes: u64,
    /// Calls that did not.
    pub failures: u64,
    /// Why the first failed call failed.
    pub first_failure: Option<String>,
    /// From the release to the last call's end (summed over absorbed
    /// rounds), in microseconds.
    pub wall_us: u64,
}

impl Tally {
    /// Adds another tally's calls and wall.
    pub fn absorb(&mut self, other: Self) {
        self.latencies_us.extend(other.latencies_us);
        self.ends_us.extend(other.ends_us);
        self.successes += other.successes;
        self.failures += other.failures;
        self.first_failure = self.first_failure.take().or(other.first_failure);
        self.wall_us += other.wall_us;
    }

    /// The nearest-rank `quantile` (0 to 1) of the latencies, in
    /// milliseconds; 0 without calls.
    pub fn latency_ms(&self, quantile: f64) -> f64 {
        let mut sorted = self.latencies_us.clone();
        sorted.sort_unstable();
        let rank = (quantile * sorted.len() as f64).ceil() as usize;
        sorted
            .get(rank.max(1) - 1)
            .map_or(0.0, |&us| us as f64 / 1000.0)
    }
}

/// Microseconds, saturated.
pub fn micros(elapsed: Duration) -> u64 {
    u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callers_run_at_once_after_the_release_and_are_counted_in_order() {
        // Each caller waits for all the others: the round finishes only if
        // every call is in flight at the same time. Then the odd ones take
        // 200 ms more, end after the even ones, and fail.
        let all_in = Arc::new(Barrier::new(6));
        let calls = (0..6_u64).map(|i| {
            let all_in = Arc::clone(&all_in);
            move || async move {
                all_in.wait().await;
                tokio::time::sleep(Duration::from_millis(200 * (i % 2))).await;
                if i % 2 == 0 {
                    Ok(())
                } else {
                    Err(format!("caller {i}"))
                }
            }
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        let tally =
            runtime.block_on(async { Callers::arm(calls).release().await.expect("no panic") });
        assert_eq!((tally.successes, tally.failures), (3, 3));
        let first = tally.first_failure.as_deref();
        assert!(first.is_some_and(|f| f.starts_with("caller ")), "{first:?}");
        let slow = |us: &u64| *us >= 200_000;
        let latencies: Vec<bool> = tally.latencies_us.iter().map(slow).collect();
        assert_eq!(latencies, [false, true].repeat(3), "{tally:?}");
        let ends = tally.ends_us.iter().map(|(us, ok)| (slow(us), *ok));
        let expected = [(false, true), (true, false)].repeat(3);
        assert_eq!(ends.collect::<Vec<_>>(), expected, "{tally:?}");
        let mut total = tally.clone();
        total.absorb(tally);
        assert_eq!((total.successes, total.ends_us.len()), (6, 12));
    }

    #[test]
    fn latency_quantiles_are_nearest_rank() {
        let tally = Tally {
            latencies_us: (1..=100).rev().map(|ms| ms * 1000).collect(),
            ..Tally::default()
        };
        let quantiles = [0.5, 0.99, 1.0].map(|q| tally.latency_ms(q));
        assert_eq!(quantiles, [50.0, 99.0, 100.0]);
        assert_eq!(Tally::default().latency_ms(0.5), 0.0);
    }
}

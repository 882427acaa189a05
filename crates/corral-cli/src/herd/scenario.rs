//! The stampede itself: a counted source of truth, the caller tasks of one
//! round released together, and what they measured.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tokio::sync::Barrier;
use tokio::task::JoinSet;

/// The shape of a stampede: `callers` concurrent callers per round spread
/// over `keys` cold keys (caller `i` asks for key `i % keys`), `rounds`
/// times, each round on fresh keys.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scenario {
    /// Concurrent callers per round.
    pub(crate) callers: u64,
    /// Cold keys per round.
    pub(crate) keys: u64,
    /// Rounds, each on its own fresh keys.
    pub(crate) rounds: u64,
    /// How long one call of the source of truth takes.
    pub(crate) fill: Duration,
}

impl Scenario {
    /// The name of cold key `key_index` of round `round`; `run` separates
    /// runs that share a store (a Redis server outlives one run).
    pub(crate) fn key(run: &str, round: u64, key_index: u64) -> String {
        format!("herd:{run}:r{round}:k{key_index}")
    }

    /// The process that runs caller `caller` when `processes` share the
    /// callers: consecutive runs of `keys` callers (one per key) are dealt
    /// out in turn, so every process asks for every key when
    /// `callers ≥ keys × processes`.
    pub(crate) fn process_of(caller: u64, keys: u64, processes: u64) -> u64 {
        (caller / keys.max(1)) % processes.max(1)
    }

    /// Cold keys over the whole run.
    pub(crate) fn cold_keys(&self) -> u64 {
        self.keys * self.rounds
    }
}

/// The source of truth both sides read through: every call is counted and
/// takes the scenario's fill time.
#[derive(Debug)]
pub(crate) struct Source {
    calls: AtomicU64,
    fill: Duration,
}

impl Source {
    /// A source whose calls take `fill`.
    pub(crate) fn new(fill: Duration) -> Self {
        Self {
            calls: AtomicU64::new(0),
            fill,
        }
    }

    /// The value the source holds for `key`.
    pub(crate) fn value_of(key: &str) -> String {
        format!("value of {key}")
    }

    /// One (slow, counted) call of the source.
    pub(crate) async fn load(&self, key: &str) -> String {
        self.calls.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(self.fill).await;
        Self::value_of(key)
    }

    /// How many times the source was called.
    pub(crate) fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }
}

/// A cache under test: anything that answers a read of `key`, filling it
/// from the source on a miss.
pub(crate) trait Contender: Send + Sync + 'static {
    /// Reads `key` through the cache.
    fn get(&self, key: &str) -> impl Future<Output = anyhow::Result<String>> + Send;

    /// Whether `value` is the source's value for `key`.
    fn is_value_of(&self, key: &str, value: &str) -> bool {
        value == Source::value_of(key)
    }
}

/// What the callers of one round measured.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct RoundTally {
    /// Latency of each call, in microseconds.
    pub(crate) latencies_us: Vec<u64>,
    /// Calls that returned the source's value for their key.
    pub(crate) successes: u64,
    /// Calls that failed or returned a wrong value.
    pub(crate) failures: u64,
    /// The first failure seen, for the report.
    pub(crate) first_failure: Option<String>,
    /// From the first call's start to the last call's end.
    pub(crate) wall: Duration,
    /// Each call's key and wall-clock span, to compare with events in other
    /// processes of the same host.
    pub(crate) spans: Vec<CallSpan>,
}

impl RoundTally {
    /// Adds another round's figures to these; walls add up.
    pub(crate) fn absorb(&mut self, other: RoundTally) {
        self.latencies_us.extend(other.latencies_us);
        self.successes += other.successes;
        self.failures += other.failures;
        if self.first_failure.is_none() {
            self.first_failure = other.first_failure;
        }
        self.wall += other.wall;
        self.spans.extend(other.spans);
    }
}

/// When one call ran, by the host's wall clock (microseconds since the Unix
/// epoch), and which key of its round it asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct CallSpan {
    /// Index of the key in its round.
    pub(crate) key: u32,
    /// Wall-clock start.
    pub(crate) start_us: u64,
    /// Wall-clock end.
    pub(crate) end_us: u64,
}

/// Microseconds since the Unix epoch by this host's wall clock (0 if the
/// clock is before 1970).
pub(crate) fn wall_clock_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
        })
}

/// One caller's call.
struct Call {
    start: Instant,
    end: Instant,
    span: CallSpan,
    outcome: Result<(), String>,
}

/// The callers of one round, spawned and waiting at a gate.
pub(crate) struct ArmedRound {
    gate: Arc<Barrier>,
    tasks: JoinSet<Call>,
    callers: usize,
}

/// Spawns the callers of one round: caller `i` (for each `i` in `callers`)
/// asks for `keys[i % keys.len()]`. They wait until
/// [`ArmedRound::release`] opens the gate, then each times its own call.
///
/// # Errors
///
/// If `keys` is empty or the key indices do not fit.
pub(crate) fn arm<C: Contender>(
    contender: &Arc<C>,
    keys: &[String],
    callers: impl IntoIterator<Item = u64>,
) -> anyhow::Result<ArmedRound> {
    let callers: Vec<u64> = callers.into_iter().collect();
    anyhow::ensure!(!keys.is_empty(), "a round needs at least one key");
    let key_count = u64::try_from(keys.len()).context("too many keys")?;
    u32::try_from(keys.len()).context("too many keys")?;
    let count = callers.len();
    // Every caller and the releaser meet at the gate.
    let gate = Arc::new(Barrier::new(count + 1));
    let mut tasks = JoinSet::new();
    for caller in callers {
        let index = usize::try_from(caller % key_count).context("key index")?;
        let key = keys[index].clone();
        let span_key = u32::try_from(index).context("key index")?;
        let contender = Arc::clone(contender);
        let gate = Arc::clone(&gate);
        tasks.spawn(async move {
            gate.wait().await;
            let start_us = wall_clock_us();
            let start = Instant::now();
            let result = contender.get(&key).await;
            let end = Instant::now();
            let end_us = wall_clock_us();
            let outcome = match result {
                Ok(value) if contender.is_value_of(&key, &value) => Ok(()),
                Ok(value) => Err(format!("caller {caller}: wrong value {value:?} for {key}")),
                Err(error) => Err(format!("caller {caller}: {error:#}")),
            };
            Call {
                start,
                end,
                span: CallSpan {
                    key: span_key,
                    start_us,
                    end_us,
                },
                outcome,
            }
        });
    }
    Ok(ArmedRound {
        gate,
        tasks,
        callers: count,
    })
}

impl ArmedRound {
    /// Opens the gate: every caller starts at once. Returns what they
    /// measured when the last one is done.
    ///
    /// # Errors
    ///
    /// If a caller task panicked (a failed call is counted, not an error).
    pub(crate) async fn release(mut self) -> anyhow::Result<RoundTally> {
        self.gate.wait().await;
        let mut tally = RoundTally {
            latencies_us: Vec::with_capacity(self.callers),
            spans: Vec::with_capacity(self.callers),
            ..RoundTally::default()
        };
        let mut first_start: Option<Instant> = None;
        let mut last_end: Option<Instant> = None;
        while let Some(joined) = self.tasks.join_next().await {
            let call = joined.context("a caller task panicked")?;
            first_start = Some(first_start.map_or(call.start, |t| t.min(call.start)));
            last_end = Some(last_end.map_or(call.end, |t| t.max(call.end)));
            let micros = call.end.duration_since(call.start).as_micros();
            tally
                .latencies_us
                .push(u64::try_from(micros).unwrap_or(u64::MAX));
            tally.spans.push(call.span);
            match call.outcome {
                Ok(()) => tally.successes += 1,
                Err(failure) => {
                    tally.failures += 1;
                    tally.first_failure.get_or_insert(failure);
                }
            }
        }
        if let (Some(start), Some(end)) = (first_start, last_end) {
            tally.wall = end.duration_since(start);
        }
        Ok(tally)
    }
}

/// Runs one round in this process: callers `0..callers`, released together.
///
/// # Errors
///
/// As [`arm`] and [`ArmedRound::release`].
pub(crate) async fn run_round<C: Contender>(
    contender: &Arc<C>,
    callers: u64,
    keys: &[String],
) -> anyhow::Result<RoundTally> {
    arm(contender, keys, 0..callers)?.release().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_process_asks_for_every_key() {
        let (callers, keys, processes) = (40_u64, 4, 3);
        for process in 0..processes {
            let mut asked: Vec<u64> = (0..callers)
                .filter(|&c| Scenario::process_of(c, keys, processes) == process)
                .map(|c| c % keys)
                .collect();
            asked.sort_unstable();
            asked.dedup();
            assert_eq!(asked, vec![0, 1, 2, 3], "process {process}");
        }
    }
}

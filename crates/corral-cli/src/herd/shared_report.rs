//! The report of a multi-process run on Redis: per wake mode, fills across
//! processes, caller and wake latencies, round trips.

use serde::Serialize;

use super::report::{group, render_table, CallFigures, Latency, Report};
use super::scenario::Scenario;
use super::shared::SharedArgs;

/// The figures of one wake mode of a multi-process run on Redis.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SharedSideReport {
    /// `notify` or `poll`.
    pub(crate) side: &'static str,
    /// How waiters in other processes learned the value landed.
    pub(crate) wake: String,
    /// Worker processes sharing Redis.
    pub(crate) processes: u64,
    /// Calls, fills (counted in Redis, `INCR` per fill) and latencies over
    /// all processes.
    #[serde(flatten)]
    pub(crate) figures: CallFigures,
    /// The fills as the processes counted them (a cross-check).
    pub(crate) fills_counted_by_processes: u64,
    /// Callers in another process than their key's leader that were waiting
    /// when its commit was sent.
    pub(crate) cross_process_waiters: u64,
    /// From the leader sending its commit to each cross-process waiter's
    /// return (wall clocks of one host); absent without such waiters.
    pub(crate) wake_latency_ms: Option<Latency>,
    /// From the leader sending its commit to the first return of a waiter,
    /// per key and waiting process: how fast a process learns of the value,
    /// without its fan-out to local waiters.
    pub(crate) process_wake_latency_ms: Option<Latency>,
    /// Store round trips of all processes (each store call is one).
    pub(crate) round_trips: u64,
    /// `round_trips / calls`.
    pub(crate) round_trips_per_caller: f64,
    /// Most round trips one leading process spent on one key in a round.
    pub(crate) max_round_trips_leader_flight: u64,
    /// Most round trips one waiting process spent on one key in a round.
    pub(crate) max_round_trips_waiting_flight: u64,
}

/// Row labels of a shared side's column.
const SHARED_ROWS: [&str; 23] = [
    "wake-up",
    "processes",
    "callers per round (all processes)",
    "cold keys per round",
    "rounds",
    "calls answered",
    "fills run (counted in Redis)",
    "fills per cold key per round",
    "latency p50 (ms)",
    "latency p99 (ms)",
    "latency max (ms)",
    "cross-process waiters",
    "wake after commit p50 (ms)",
    "wake after commit p99 (ms)",
    "wake after commit max (ms)",
    "first waiter per process p50 (ms)",
    "first waiter per process p99 (ms)",
    "first waiter per process max (ms)",
    "store round trips",
    "round trips per caller",
    "round trips, leader flight (max)",
    "round trips, waiting flight (max)",
    "wall time (ms)",
];

impl SharedSideReport {
    fn column(&self) -> Vec<String> {
        let ms = |latency: &Option<Latency>, pick: fn(&Latency) -> f64| {
            latency
                .as_ref()
                .map_or_else(|| "-".to_owned(), |l| format!("{:.2}", pick(l)))
        };
        let (wake, process_wake) = (&self.wake_latency_ms, &self.process_wake_latency_ms);
        let mut cells = vec![self.wake.clone(), group(self.processes)];
        cells.extend(self.figures.call_cells());
        cells.extend(self.figures.latency_cells());
        cells.extend([
            group(self.cross_process_waiters),
            ms(wake, |l| l.p50),
            ms(wake, |l| l.p99),
            ms(wake, |l| l.max),
            ms(process_wake, |l| l.p50),
            ms(process_wake, |l| l.p99),
            ms(process_wake, |l| l.max),
            group(self.round_trips),
            format!("{:.4}", self.round_trips_per_caller),
            group(self.max_round_trips_leader_flight),
            group(self.max_round_trips_waiting_flight),
            format!("{:.0}", self.figures.wall_ms),
        ]);
        cells
    }

    /// This side's part of the verdict.
    fn summary(&self) -> String {
        let fills = self.figures.fills_phrase();
        let wake = self.wake_latency_ms.as_ref().map_or_else(String::new, |l| {
            format!(
                ", waiters back p50 {:.2} ms / p99 {:.2} ms after the commit",
                l.p50, l.p99
            )
        });
        format!("{}: {fills}{wake}", self.wake)
    }
}

/// A multi-process run on Redis: corral with notified waiters beside
/// corral with polling waiters (either may be left out).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SharedComparison {
    /// `redis`.
    pub(crate) mode: &'static str,
    /// The Redis URL, without its password.
    pub(crate) redis: String,
    /// Worker processes per side.
    pub(crate) processes: u64,
    /// Concurrent callers per round, over all processes.
    pub(crate) callers: u64,
    /// Cold keys per round.
    pub(crate) keys: u64,
    /// Rounds per side.
    pub(crate) rounds: u64,
    /// Duration of one source call.
    pub(crate) fill_ms: u64,
    /// Poll interval of the polling side.
    pub(crate) poll_ms: u64,
    /// Waiters woken by pub/sub.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) notify: Option<SharedSideReport>,
    /// Waiters that only poll.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) poll: Option<SharedSideReport>,
    /// One line that says what the figures mean.
    pub(crate) verdict: String,
}

impl SharedComparison {
    /// A comparison with no sides yet.
    pub(crate) fn new(redis: String, shared: &SharedArgs, scenario: Scenario) -> Self {
        Self {
            mode: "redis",
            redis,
            processes: shared.processes,
            callers: scenario.callers,
            keys: scenario.keys,
            rounds: scenario.rounds,
            fill_ms: u64::try_from(scenario.fill.as_millis()).unwrap_or(u64::MAX),
            poll_ms: shared.poll_ms,
            notify: None,
            poll: None,
            verdict: String::new(),
        }
    }

    fn sides(&self) -> impl Iterator<Item = &SharedSideReport> {
        self.notify.iter().chain(&self.poll)
    }

    /// Writes the verdict from the sides present.
    pub(crate) fn write_verdict(&mut self) {
        let parts: Vec<String> = self.sides().map(SharedSideReport::summary).collect();
        self.verdict = format!(
            "corral on Redis, {} processes — {}",
            group(self.processes),
            parts.join("; ")
        );
    }
}

impl Report for SharedComparison {
    fn failures(&self) -> u64 {
        self.sides().map(|side| side.figures.failures).sum()
    }

    fn table(&self) -> String {
        let mut out = format!(
            "corral herd: {} callers in {} processes on {} cold keys, {} rounds, {} ms fill (Redis at {})\n\n",
            group(self.callers),
            group(self.processes),
            group(self.keys),
            group(self.rounds),
            group(self.fill_ms),
            self.redis,
        );
        let mut headers = vec![""];
        let mut columns = Vec::new();
        for side in self.sides() {
            headers.push(match side.side {
                "notify" => "corral, notified",
                _ => "corral, polling",
            });
            columns.push(side.column());
        }
        out.push_str(&render_table(&headers, &SHARED_ROWS, &columns));
        out.push('\n');
        out.push_str(&self.verdict);
        out.push('\n');
        for side in self.sides() {
            out.push_str(&side.figures.failure_line(side.side));
        }
        out
    }
}

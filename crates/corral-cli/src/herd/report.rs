//! What a herd run reports: per-side figures, the verdict, an aligned table
//! for people and one JSON object for programs.

use serde::Serialize;

use super::scenario::{RoundTally, Scenario};
use super::sqlite::{DatabaseInfo, SourceCounts};

/// A finished run's report: serialized for `--json`, else printed as a table.
pub(crate) trait Report: Serialize {
    /// The report as an aligned table, with a title and the verdict.
    fn table(&self) -> String;
    /// Calls that failed, on every side.
    fn failures(&self) -> u64;
}

/// Per-call latency percentiles, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub(crate) struct Latency {
    /// Median.
    pub(crate) p50: f64,
    /// 99th percentile.
    pub(crate) p99: f64,
    /// Slowest call.
    pub(crate) max: f64,
}

impl Latency {
    /// Nearest-rank percentiles of latencies given in microseconds.
    pub(crate) fn from_micros(mut micros: Vec<u64>) -> Self {
        if micros.is_empty() {
            return Self::default();
        }
        micros.sort_unstable();
        let at = |quantile: f64| {
            let rank = (quantile * micros.len() as f64).ceil() as usize;
            micros[rank.clamp(1, micros.len()) - 1] as f64 / 1000.0
        };
        Self {
            p50: at(0.50),
            p99: at(0.99),
            max: at(1.0),
        }
    }
}

/// What every side of every run reports: its scenario, how its calls went,
/// how often it called the source, and how long calls took.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct CallFigures {
    /// Concurrent callers per round (over all processes).
    pub(crate) callers: u64,
    /// Cold keys per round.
    pub(crate) keys: u64,
    /// Rounds run.
    pub(crate) rounds: u64,
    /// Calls made: callers × rounds.
    pub(crate) calls: u64,
    /// Calls that returned the right value.
    pub(crate) successes: u64,
    /// Calls that failed or returned a wrong value.
    pub(crate) failures: u64,
    /// The first failure, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) first_failure: Option<String>,
    /// Calls of the source of truth.
    pub(crate) fills: u64,
    /// `fills / (keys × rounds)`.
    pub(crate) fills_per_cold_key_per_round: f64,
    /// Per-call latency.
    pub(crate) latency_ms: Latency,
    /// Sum over rounds of the time from the first call's start to the last
    /// call's end.
    pub(crate) wall_ms: f64,
}

impl CallFigures {
    /// The figures of a side that ran `scenario`, called its source `fills`
    /// times and measured `tally` (its spans are not reported).
    pub(crate) fn new(scenario: Scenario, fills: u64, tally: RoundTally) -> Self {
        Self {
            callers: scenario.callers,
            keys: scenario.keys,
            rounds: scenario.rounds,
            calls: scenario.callers * scenario.rounds,
            successes: tally.successes,
            failures: tally.failures,
            first_failure: tally.first_failure,
            fills,
            fills_per_cold_key_per_round: fills as f64 / scenario.cold_keys().max(1) as f64,
            latency_ms: Latency::from_micros(tally.latencies_us),
            wall_ms: tally.wall.as_micros() as f64 / 1000.0,
        }
    }

    /// Table cells: callers, keys, rounds, calls answered, fills, fills per
    /// cold key per round.
    pub(crate) fn call_cells(&self) -> [String; 6] {
        [
            group(self.callers),
            group(self.keys),
            group(self.rounds),
            format!("{}/{}", group(self.successes), group(self.calls)),
            group(self.fills),
            decimal(self.fills_per_cold_key_per_round),
        ]
    }

    /// Table cells: latency p50, p99, max.
    pub(crate) fn latency_cells(&self) -> [String; 3] {
        [
            format!("{:.1}", self.latency_ms.p50),
            format!("{:.1}", self.latency_ms.p99),
            format!("{:.1}", self.latency_ms.max),
        ]
    }

    /// `1 fill per cold key per round (N total)`, or the rate when it is
    /// not one.
    pub(crate) fn fills_phrase(&self) -> String {
        if self.fills == self.keys * self.rounds {
            format!(
                "1 fill per cold key per round ({} total)",
                group(self.fills)
            )
        } else {
            format!(
                "{} fills per cold key per round ({} total for {} cold keys)",
                decimal(self.fills_per_cold_key_per_round),
                group(self.fills),
                group(self.keys * self.rounds)
            )
        }
    }

    /// [`failure_line`] of these figures.
    pub(crate) fn failure_line(&self, side: &str) -> String {
        failure_line(side, self.failures, self.first_failure.as_deref())
    }
}

/// The figures of one side (one cache under test) of an in-process run.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SideReport {
    /// Which cache: `corral` or `naive`.
    pub(crate) side: &'static str,
    /// Its calls, fill attempts (calls of the source, whether or not they
    /// got a connection) and latencies.
    #[serde(flatten)]
    pub(crate) figures: CallFigures,
    /// Queries SQLite actually ran.
    pub(crate) sqlite_queries: u64,
    /// `sqlite_queries / (keys × rounds)`.
    pub(crate) queries_per_cold_key_per_round: f64,
    /// Source calls that found no free pooled connection in time.
    pub(crate) timeouts: u64,
    /// Source calls that failed otherwise.
    pub(crate) errors: u64,
    /// Callers that waited for a fill in flight (corral only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) coalesced: Option<u64>,
}

impl SideReport {
    /// The report of a side that ran `scenario`, whose source calls came
    /// to `counts`, and whose callers measured `tally`.
    pub(crate) fn new(
        side: &'static str,
        scenario: Scenario,
        counts: SourceCounts,
        tally: RoundTally,
    ) -> Self {
        let attempts = counts.queries + counts.timeouts + counts.errors;
        Self {
            side,
            figures: CallFigures::new(scenario, attempts, tally),
            sqlite_queries: counts.queries,
            queries_per_cold_key_per_round: counts.queries as f64
                / scenario.cold_keys().max(1) as f64,
            timeouts: counts.timeouts,
            errors: counts.errors,
            coalesced: None,
        }
    }

    /// The rows of this side in the table, in [`SIDE_ROWS`] order.
    fn column(&self) -> Vec<String> {
        let figures = &self.figures;
        let [callers, keys, rounds, answered, attempts, _] = figures.call_cells();
        let mut cells = vec![
            callers,
            keys,
            rounds,
            answered,
            attempts,
            group(self.sqlite_queries),
            decimal(self.queries_per_cold_key_per_round),
            group(self.timeouts),
            group(self.errors),
            self.coalesced.map_or_else(|| "-".to_owned(), group),
        ];
        cells.extend(figures.latency_cells());
        cells.push(format!("{:.0}", figures.wall_ms));
        cells
    }

    /// `1 SQLite query per cold key per round (N total)`, or the rate when
    /// it is not one.
    fn queries_phrase(&self) -> String {
        let cold_keys = self.figures.keys * self.figures.rounds;
        if self.sqlite_queries == cold_keys {
            format!(
                "1 SQLite query per cold key per round ({} total)",
                group(self.sqlite_queries)
            )
        } else {
            format!(
                "{} SQLite queries per cold key per round ({} total for {} cold keys)",
                decimal(self.queries_per_cold_key_per_round),
                group(self.sqlite_queries),
                group(cold_keys)
            )
        }
    }
}

/// Row labels of a side's column.
const SIDE_ROWS: [&str; 14] = [
    "callers per round",
    "cold keys per round",
    "rounds",
    "calls answered",
    "source calls (fill attempts)",
    "SQLite queries run",
    "queries per cold key per round",
    "timeouts (no pooled connection)",
    "other errors",
    "callers coalesced",
    "latency p50 (ms)",
    "latency p99 (ms)",
    "latency max (ms)",
    "wall time (ms)",
];

/// corral against the naive cache-aside on one scenario.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Comparison {
    /// Where the values live: `embedded` (in process).
    pub(crate) mode: &'static str,
    /// Concurrent callers per round.
    pub(crate) callers: u64,
    /// Cold keys per round.
    pub(crate) keys: u64,
    /// Rounds run.
    pub(crate) rounds: u64,
    /// The source of truth both sides read.
    pub(crate) database: DatabaseInfo,
    /// corral's figures.
    pub(crate) corral: SideReport,
    /// The naive cache-aside's figures.
    pub(crate) naive: SideReport,
    /// One line that says what the figures mean.
    pub(crate) verdict: String,
}

impl Comparison {
    /// Puts the two sides together and writes the verdict.
    pub(crate) fn new(
        scenario: Scenario,
        database: DatabaseInfo,
        corral: SideReport,
        naive: SideReport,
    ) -> Self {
        let verdict = verdict(&corral, &naive);
        Self {
            mode: "embedded",
            callers: scenario.callers,
            keys: scenario.keys,
            rounds: scenario.rounds,
            database,
            corral,
            naive,
            verdict,
        }
    }
}

impl Report for Comparison {
    /// corral's failed calls, and the naive side's failures other than
    /// timeouts waiting for a connection (those are the comparison).
    fn failures(&self) -> u64 {
        self.corral.figures.failures
            + self
                .naive
                .figures
                .failures
                .saturating_sub(self.naive.timeouts)
    }

    fn table(&self) -> String {
        let db = &self.database;
        let mut out = format!(
            "corral herd: {} callers on {} cold keys, {} rounds (in process)\n\
             source: SQLite, {} orders of {} users (seeded in {:.0} ms); one fill query {:.1} ms; \
             pool of {} connections per side, wait ≤ {} ms\n\n",
            group(self.callers),
            group(self.keys),
            group(self.rounds),
            group(db.rows),
            group(db.users),
            db.seed_ms,
            db.query_ms,
            group(db.pool_size),
            group(db.pool_wait_ms),
        );
        out.push_str(&render_table(
            &["", "corral", "naive cache-aside"],
            &SIDE_ROWS,
            &[self.corral.column(), self.naive.column()],
        ));
        out.push('\n');
        out.push_str(&self.verdict);
        out.push('\n');
        for side in [&self.corral, &self.naive] {
            out.push_str(&side.figures.failure_line(side.side));
        }
        out
    }
}

/// One line: SQLite queries per cold key per round on each side, the
/// naive side's timeouts, and the ratio.
fn verdict(corral: &SideReport, naive: &SideReport) -> String {
    let ratio = if corral.sqlite_queries == 0 {
        String::new()
    } else {
        format!(
            " — {}x the queries",
            decimal(naive.sqlite_queries as f64 / corral.sqlite_queries as f64)
        )
    };
    format!(
        "corral: {}, {} timeouts; naive: {} SQLite queries ({} per cold key per round), {} timeouts{ratio}",
        corral.queries_phrase(),
        group(corral.timeouts),
        group(naive.sqlite_queries),
        decimal(naive.queries_per_cold_key_per_round),
        group(naive.timeouts),
    )
}

/// `side: N calls failed; first: ...` and a newline, or nothing.
pub(crate) fn failure_line(side: &str, failures: u64, first: Option<&str>) -> String {
    match first {
        Some(first) => format!("{side}: {} calls failed; first: {first}\n", group(failures)),
        None if failures > 0 => format!("{side}: {} calls failed\n", group(failures)),
        None => String::new(),
    }
}

/// An aligned table: `headers` over the label column and one column per
/// entry of `columns`; labels left-aligned, figures right-aligned.
pub(crate) fn render_table(headers: &[&str], labels: &[&str], columns: &[Vec<String>]) -> String {
    let label_width = labels
        .iter()
        .map(|l| l.chars().count())
        .chain(headers.first().map(|h| h.chars().count()))
        .max()
        .unwrap_or(0);
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(i, column)| {
            column
                .iter()
                .map(|cell| cell.chars().count())
                .chain(headers.get(i + 1).map(|h| h.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    let mut line = |label: &str, cells: Vec<&str>| {
        let mut row = format!("{label:<label_width$}");
        for (cell, width) in cells.into_iter().zip(&widths) {
            row.push_str(&format!("   {cell:>width$}"));
        }
        out.push_str(row.trim_end());
        out.push('\n');
    };
    line(
        headers.first().copied().unwrap_or(""),
        headers.iter().skip(1).copied().collect(),
    );
    for (row, label) in labels.iter().enumerate() {
        line(
            label,
            columns
                .iter()
                .map(|column| column.get(row).map_or("", String::as_str))
                .collect(),
        );
    }
    out
}

/// `12345678` as `12,345,678`.
pub(crate) fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// A ratio: whole numbers and numbers from 1,000 up grouped, others with
/// two decimals.
pub(crate) fn decimal(x: f64) -> String {
    if x.is_finite() && x >= 0.0 && (x.fract() == 0.0 || x >= 1000.0) {
        group(x.round() as u64)
    } else {
        format!("{x:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_thousands() {
        assert_eq!(group(0), "0");
        assert_eq!(group(999), "999");
        assert_eq!(group(1000), "1,000");
        assert_eq!(group(29_876), "29,876");
        assert_eq!(group(1_234_567), "1,234,567");
    }

    #[test]
    fn nearest_rank_percentiles() {
        let latency = Latency::from_micros((1..=100).map(|ms| ms * 1000).collect());
        assert_eq!(latency.p50, 50.0);
        assert_eq!(latency.p99, 99.0);
        assert_eq!(latency.max, 100.0);
        assert_eq!(Latency::from_micros(vec![]), Latency::default());
    }

    #[test]
    fn table_aligns_columns() {
        let table = render_table(
            &["", "a", "bb"],
            &["x", "longer"],
            &[
                vec!["1".into(), "22".into()],
                vec!["333".into(), "4".into()],
            ],
        );
        assert_eq!(
            table,
            "          a    bb\nx         1   333\nlonger   22     4\n"
        );
    }
}

//! What a herd run reports: per-side figures, the verdict, an aligned table
//! for people and one JSON object for programs.

use serde::Serialize;

use super::scenario::{RoundTally, Scenario};

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
    /// Its calls, fills and latencies.
    #[serde(flatten)]
    pub(crate) figures: CallFigures,
    /// Callers that waited for a fill in flight (corral only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) coalesced: Option<u64>,
}

impl SideReport {
    /// The report of a side that ran `scenario`, called its source `fills`
    /// times and measured `tally`.
    pub(crate) fn new(
        side: &'static str,
        scenario: Scenario,
        fills: u64,
        tally: RoundTally,
    ) -> Self {
        Self {
            side,
            figures: CallFigures::new(scenario, fills, tally),
            coalesced: None,
        }
    }

    /// The rows of this side in the table, in [`SIDE_ROWS`] order.
    fn column(&self) -> Vec<String> {
        let figures = &self.figures;
        let mut cells = Vec::from(figures.call_cells());
        cells.push(self.coalesced.map_or_else(|| "-".to_owned(), group));
        cells.extend(figures.latency_cells());
        cells.push(format!("{:.0}", figures.wall_ms));
        cells
    }
}

/// Row labels of a side's column.
const SIDE_ROWS: [&str; 11] = [
    "callers per round",
    "cold keys per round",
    "rounds",
    "calls answered",
    "fills run (source calls)",
    "fills per cold key per round",
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
    /// Duration of one source call.
    pub(crate) fill_ms: u64,
    /// corral's figures.
    pub(crate) corral: SideReport,
    /// The naive cache-aside's figures.
    pub(crate) naive: SideReport,
    /// One line that says what the figures mean.
    pub(crate) verdict: String,
}

impl Comparison {
    /// Puts the two sides together and writes the verdict.
    pub(crate) fn new(scenario: Scenario, corral: SideReport, naive: SideReport) -> Self {
        let verdict = verdict(&corral.figures, &naive.figures);
        Self {
            mode: "embedded",
            callers: scenario.callers,
            keys: scenario.keys,
            rounds: scenario.rounds,
            fill_ms: u64::try_from(scenario.fill.as_millis()).unwrap_or(u64::MAX),
            corral,
            naive,
            verdict,
        }
    }
}

impl Report for Comparison {
    fn failures(&self) -> u64 {
        self.corral.figures.failures + self.naive.figures.failures
    }

    fn table(&self) -> String {
        let title = format!(
            "corral herd: {} callers on {} cold keys, {} rounds, {} ms fill (in process)",
            group(self.callers),
            group(self.keys),
            group(self.rounds),
            group(self.fill_ms),
        );
        let mut out = title;
        out.push_str("\n\n");
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

/// One line: fills per cold key per round on each side, and the ratio.
fn verdict(corral: &CallFigures, naive: &CallFigures) -> String {
    let corral_part = corral.fills_phrase();
    let ratio = if corral.fills == 0 {
        String::new()
    } else {
        format!(
            " — {}x the source calls",
            decimal(naive.fills as f64 / corral.fills as f64)
        )
    };
    format!(
        "corral: {corral_part}; naive: {} fills ({} per cold key per round){ratio}",
        group(naive.fills),
        decimal(naive.fills_per_cold_key_per_round),
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

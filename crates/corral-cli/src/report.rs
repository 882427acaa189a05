//! What a herd run reports: each side's figures and a verdict, as a table
//! for people (rendered by `comfy-table`) or one JSON object for programs.

use comfy_table::{presets, CellAlignment, Table};
use corral_testkit::Tally;
use serde::Serialize;

use crate::plot::{self, group, Bucket};
use crate::HerdArgs;

/// Per-call latency percentiles, in milliseconds.
#[derive(Debug, Default, Serialize)]
struct Latency {
    p50: f64,
    p99: f64,
    max: f64,
}

/// One side (one cache under test) of a run; a figure that is `None` was
/// not measured.
#[derive(Debug, Default, Serialize)]
pub(crate) struct SideReport {
    /// `corral` or `naive`.
    pub(crate) side: &'static str,
    /// Calls made (and counted): callers × rounds.
    pub(crate) calls: u64,
    pub(crate) successes: u64,
    pub(crate) failures: u64,
    pub(crate) first_failure: Option<String>,
    /// Calls of the source of truth (fill attempts), over every process.
    pub(crate) fills: u64,
    latency_ms: Latency,
    /// Sum over rounds of the release to the last call's end.
    pub(crate) wall_ms: f64,
    /// The SQLite source's queries run, calls that found no pooled
    /// connection in time, and calls that failed otherwise.
    pub(crate) sqlite_queries: Option<u64>,
    pub(crate) timeouts: Option<u64>,
    pub(crate) errors: Option<u64>,
    /// The most calls running at the source at once, as it counted them.
    pub(crate) most_at_once: u64,
    /// Callers that waited for a fill in flight (corral, in process).
    pub(crate) coalesced: Option<u64>,
    /// Callers answered by fail-safe (corral, in the outage).
    pub(crate) fail_safe: Option<u64>,
    /// Commands the Redis server ran for this side's rounds.
    pub(crate) redis_commands: Option<u64>,
    /// The p50 latency of the callers of the 10 hottest keys (Zipf runs).
    pub(crate) hot_p50_ms: Option<f64>,
    /// Each round's figures (in process): whether the source was up, calls
    /// answered and failed, calls of the source and answers by fail-safe.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) rounds: Vec<serde_json::Value>,
    /// The side over time, in buckets of 10 ms.
    pub(crate) timeline: Vec<Bucket>,
}

impl SideReport {
    /// A side whose `calls` called its source `fills` times, measured
    /// `tally` and recorded `timeline`.
    pub(crate) fn new(
        side: &'static str,
        calls: u64,
        fills: u64,
        tally: Tally,
        timeline: Vec<Bucket>,
    ) -> Self {
        let [p50, p99, max] = [0.5, 0.99, 1.0].map(|q| tally.latency_ms(q));
        Self {
            side,
            calls,
            successes: tally.successes,
            failures: tally.failures,
            first_failure: tally.first_failure,
            fills,
            latency_ms: Latency { p50, p99, max },
            wall_ms: tally.wall_us as f64 / 1000.0,
            most_at_once: timeline.iter().map(|b| b.running).max().unwrap_or(0),
            timeline,
            ..Self::default()
        }
    }

    /// The rows of the table: label and figure (`None`: not measured).
    fn cells(&self) -> [(&'static str, Option<String>); 13] {
        let ms = |ms: f64| Some(format!("{ms:.1}"));
        let answered = format!("{}/{}", group(self.successes), group(self.calls));
        let (fills, most) = (group(self.fills), group(self.most_at_once));
        let hot = self.hot_p50_ms.and_then(ms);
        [
            ("calls answered", Some(answered)),
            ("source calls (fill attempts)", Some(fills)),
            ("SQLite queries run", self.sqlite_queries.map(group)),
            ("timeouts (no pooled connection)", self.timeouts.map(group)),
            ("most fills at once (at the source)", Some(most)),
            ("callers coalesced", self.coalesced.map(group)),
            ("callers answered by fail-safe", self.fail_safe.map(group)),
            ("Redis commands run", self.redis_commands.map(group)),
            ("latency p50 (ms)", ms(self.latency_ms.p50)),
            ("latency p50, 10 hottest keys (ms)", hot),
            ("latency p99 (ms)", ms(self.latency_ms.p99)),
            ("latency max (ms)", ms(self.latency_ms.max)),
            ("wall time (ms)", Some(format!("{:.0}", self.wall_ms))),
        ]
    }
}

/// corral against the naive cache-aside on one scenario.
#[derive(Debug, Serialize)]
pub(crate) struct Comparison {
    /// The run's callers, keys and rounds, its mode (`embedded`, `redis`,
    /// `outage`) and its setting.
    #[serde(flatten)]
    setting: serde_json::Value,
    pub(crate) corral: SideReport,
    naive: SideReport,
    /// One line that says what the figures mean.
    verdict: String,
    /// What ran, in a line, then its source.
    #[serde(skip)]
    title: String,
    /// The levels that bound the calls at the source, named.
    #[serde(skip)]
    limits: Vec<(String, u64)>,
}

impl Comparison {
    /// Puts the sides of a run of `setting` together, with the verdict.
    pub(crate) fn new(
        args: &HerdArgs,
        (mut setting, title, limits): (serde_json::Value, String, Vec<(String, u64)>),
        corral: SideReport,
        naive: SideReport,
    ) -> Self {
        let rounds = args.rounds + if args.outage { 2 } else { 0 };
        let verdict = verdict(&corral, &naive, args.keys * rounds);
        setting["callers"] = args.callers.into();
        (setting["keys"], setting["rounds"]) = (args.keys.into(), rounds.into());
        Self {
            setting,
            corral,
            naive,
            verdict,
            title,
            limits,
        }
    }

    /// The title, the table and the verdict.
    pub(crate) fn table(&self) -> String {
        let (c, n) = (&self.corral, &self.naive);
        let mut table = Table::new();
        table.load_style(presets::ASCII_MARKDOWN);
        table.set_header(["", "corral", "naive cache-aside"]);
        // A row measured on the naive side is measured on corral's.
        for ((label, c), (_, n)) in c.cells().into_iter().zip(n.cells()) {
            if let Some(c) = c {
                table.add_row([label.into(), c, n.unwrap_or_else(|| "-".into())]);
            }
        }
        for column in table.column_iter_mut().skip(1) {
            column.set_cell_alignment(CellAlignment::Right);
        }
        let mut out = format!("{}\n\n{table}\n\n{}\n", self.title, self.verdict);
        for side in [c, n].into_iter().filter(|side| side.failures > 0) {
            let first = side.first_failure.as_deref().unwrap_or("?");
            let (name, failed) = (side.side, group(side.failures));
            out.push_str(&format!("{name}: {failed} calls failed; first: {first}\n"));
        }
        out
    }

    /// Draws the sides over time to `path` (SVG).
    pub(crate) fn plot(&self, path: &std::path::Path) -> anyhow::Result<()> {
        let title = self.title.lines().next().unwrap_or_default();
        plot::svg(title, self.sides(), &self.limits, path)
    }

    /// Each side's name and timeline, corral's first.
    pub(crate) fn sides(&self) -> [(&str, &[Bucket]); 2] {
        [&self.corral, &self.naive].map(|side| (side.side, &side.timeline[..]))
    }
}

/// What the figures mean: each side's calls of the source per cold key
/// per round (one, for corral).
fn verdict(corral: &SideReport, naive: &SideReport, cold_keys: u64) -> String {
    let says = |side: &SideReport| {
        let (n, [one, many]) = match side.sqlite_queries {
            Some(queries) => (queries, ["SQLite query", "SQLite queries"]),
            None => (side.fills, ["fill", "fills"]),
        };
        let (name, rate) = (side.side, n as f64 / cold_keys as f64);
        match rate {
            1.0 => format!("{name}: 1 {one} per cold key per round"),
            _ if rate.fract() == 0.0 => format!("{name}: {rate} {many} per cold key per round"),
            _ => format!("{name}: {rate:.2} {many} per cold key per round"),
        }
    };
    format!("{}; {}", says(corral), says(naive))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_are_grouped() {
        let groups = [0, 999, 1000, 1_234_567].map(group);
        assert_eq!(groups, ["0", "999", "1,000", "1,234,567"]);
    }

    #[test]
    fn the_verdict_counts_calls_of_the_source_per_cold_key() {
        #[derive(clap::Parser)]
        struct Herd {
            #[command(flatten)]
            args: HerdArgs,
        }
        let flags = ["herd", "--callers", "100", "--keys", "2"];
        let args = <Herd as clap::Parser>::parse_from(flags).args;
        let side = |side, fills| SideReport::new(side, 300, fills, Tally::default(), Vec::new());
        let says = |corral, naive| verdict(&side("corral", corral), &side("naive", naive), 6);
        let (one, many) = (
            "1 fill per cold key per round",
            "fills per cold key per round",
        );
        assert_eq!(says(6, 61), format!("corral: {one}; naive: 10.17 {many}"));
        assert_eq!(
            says(12, 6000),
            format!("corral: 2 {many}; naive: 1000 {many}")
        );
        let setting = (serde_json::Value::Null, "title".to_owned(), Vec::new());
        let report = Comparison::new(&args, setting, side("corral", 6), side("naive", 61));
        assert_eq!(report.verdict, says(6, 61), "2 keys × 3 rounds");
        let table = report.table();
        let fills = "| source calls (fill attempts)       |      6 |                61 |";
        assert!(
            table.contains(fills) && !table.contains("SQLite"),
            "{table}"
        );
    }
}

//! What a herd run reports: each side's figures and a verdict, as a table
//! for people (rendered by `comfy-table`) or one JSON object for programs.

use comfy_table::{presets, CellAlignment, Table};
use corral_testkit::Tally;
use serde::Serialize;

use super::plot::Picture;
use super::scenario::Scenario;
use super::sqlite::{Database, SourceCounts};
use super::timeline::Series;

/// A finished run: serialized for `--json`, else printed as a table; drawn
/// with `--plot`.
pub(crate) trait Report: Serialize {
    /// What ran, in a line.
    fn title(&self) -> String;
    /// The title, the table and the verdict.
    fn table(&self) -> String;
    /// Calls that failed and should not have.
    fn failures(&self) -> u64;
    /// The sides over time.
    fn picture(&self) -> Picture<'_>;
}

/// Per-call latency percentiles, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub(crate) struct Latency {
    pub(crate) p50: f64,
    pub(crate) p99: f64,
    pub(crate) max: f64,
}

impl Latency {
    fn of(tally: &Tally) -> Self {
        let [p50, p99, max] = [0.5, 0.99, 1.0].map(|q| tally.latency_ms(q));
        Self { p50, p99, max }
    }
}

/// One side (one cache under test) of a run.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct SideReport {
    /// `corral` or `naive`.
    pub(crate) side: &'static str,
    /// Calls made: callers × rounds.
    pub(crate) calls: u64,
    pub(crate) successes: u64,
    pub(crate) failures: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) first_failure: Option<String>,
    /// Calls of the source of truth (fill attempts), over every process.
    pub(crate) fills: u64,
    pub(crate) latency_ms: Latency,
    /// Sum over rounds of the release to the last call's end.
    pub(crate) wall_ms: f64,
    /// What the SQLite source's calls came to (the default run).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub(crate) sqlite: Option<SourceCounts>,
    /// The most calls running at the source at once, as it counted them.
    pub(crate) most_at_once: u64,
    /// Callers that waited for a fill in flight (corral, in process).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) coalesced: Option<u64>,
    /// Commands the Redis server ran for this side's rounds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) redis_commands: Option<u64>,
    /// The p50 latency of the callers of the 10 hottest keys (Zipf runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) hot_p50_ms: Option<f64>,
    /// Distinct keys the callers asked for (Zipf runs leave some out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) distinct_keys: Option<u64>,
    /// The side over time.
    pub(crate) timeline: Series,
}

impl SideReport {
    /// A side that called its source `fills` times, measured `tally` and
    /// recorded `timeline`.
    pub(crate) fn new(
        side: &'static str,
        scenario: Scenario,
        fills: u64,
        tally: Tally,
        timeline: Series,
    ) -> Self {
        let (latency_ms, calls) = (Latency::of(&tally), scenario.callers * scenario.rounds);
        let most_at_once = timeline.running.iter().copied().max().unwrap_or(0);
        let mut report = Self {
            side,
            calls,
            fills,
            latency_ms,
            most_at_once,
            timeline,
            ..Self::default()
        };
        (report.successes, report.failures) = (tally.successes, tally.failures);
        report.first_failure = tally.first_failure;
        report.wall_ms = tally.wall_us as f64 / 1000.0;
        report
    }

    /// A side of the SQLite run: every call of the source is a fill
    /// attempt, whether or not it got a connection.
    pub(crate) fn sqlite(
        side: &'static str,
        scenario: Scenario,
        n: SourceCounts,
        tally: Tally,
        timeline: Series,
    ) -> Self {
        let fills = n.sqlite_queries + n.timeouts + n.errors;
        let mut report = Self::new(side, scenario, fills, tally, timeline);
        report.sqlite = Some(n);
        report
    }

    /// The rows of the table: label and figure (absent: not measured).
    fn cells(&self) -> [(&'static str, Option<String>); 13] {
        let sqlite = self.sqlite;
        let ms = |ms: f64| Some(format!("{ms:.1}"));
        let answered = format!("{}/{}", group(self.successes), group(self.calls));
        let (queries, timeouts) = (sqlite.map(|s| s.sqlite_queries), sqlite.map(|s| s.timeouts));
        [
            ("calls answered", Some(answered)),
            ("distinct keys asked", self.distinct_keys.map(group)),
            ("source calls (fill attempts)", Some(group(self.fills))),
            ("SQLite queries run", queries.map(group)),
            ("timeouts (no pooled connection)", timeouts.map(group)),
            (
                "most fills at once (at the source)",
                Some(group(self.most_at_once)),
            ),
            ("callers coalesced", self.coalesced.map(group)),
            ("Redis commands run", self.redis_commands.map(group)),
            ("latency p50 (ms)", ms(self.latency_ms.p50)),
            (
                "latency p50, 10 hottest keys (ms)",
                self.hot_p50_ms.and_then(ms),
            ),
            ("latency p99 (ms)", ms(self.latency_ms.p99)),
            ("latency max (ms)", ms(self.latency_ms.max)),
            ("wall time (ms)", Some(format!("{:.0}", self.wall_ms))),
        ]
    }

    /// What this side is judged by: SQLite queries or fills, and their
    /// name, singular and plural.
    fn judged(&self) -> (u64, [&'static str; 2]) {
        match self.sqlite {
            Some(counts) => (counts.sqlite_queries, ["SQLite query", "SQLite queries"]),
            None => (self.fills, ["fill", "fills"]),
        }
    }
}

/// Where a run's values and source live: its `mode`.
#[derive(Debug, Serialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub(crate) enum Setting {
    /// In process, over a seeded SQLite file.
    Embedded {
        database: Database,
        /// corral's fill budget (0: none).
        budget: u64,
        /// The Zipf exponent of the keys callers ask for (0: uniform).
        zipf: f64,
        /// An adaptive budget's maximum, and its limit while fills queued
        /// (p10, p50, p90 of samples every 20 ms).
        #[serde(skip_serializing_if = "Option::is_none")]
        adaptive: Option<(u64, [u64; 3])>,
    },
    /// Worker processes sharing Redis, over a sleeping source server.
    Redis {
        processes: u64,
        fill_ms: u64,
        /// corral's fill budget in each process (0: none), or in all of
        /// them if `fleet`.
        budget: u64,
        fleet: bool,
    },
}

impl Setting {
    /// The levels that bound the calls at the source, named.
    fn limits(&self) -> Vec<(String, u64)> {
        match *self {
            Self::Embedded {
                ref database,
                budget,
                adaptive,
                ..
            } => {
                let pool = database.pool_size;
                let mut limits = vec![(format!("pool of {pool} connections"), pool)];
                match adaptive {
                    Some((max, _)) => {
                        limits.push((format!("corral's adaptive budget, at most {max}"), max))
                    }
                    None if budget > 0 => {
                        limits.push((format!("corral's fill budget of {budget}"), budget))
                    }
                    None => {}
                }
                limits
            }
            Self::Redis { budget: 0, .. } => Vec::new(),
            Self::Redis {
                budget,
                fleet: true,
                ..
            } => vec![(format!("corral's fleet budget of {budget}"), budget)],
            Self::Redis {
                processes, budget, ..
            } => vec![(
                format!("corral's budget, {budget} in each of {processes} processes"),
                budget * processes,
            )],
        }
    }
}

/// corral against the naive cache-aside on one scenario.
#[derive(Debug, Serialize)]
pub(crate) struct Comparison {
    callers: u64,
    keys: u64,
    rounds: u64,
    #[serde(flatten)]
    setting: Setting,
    corral: SideReport,
    naive: SideReport,
    /// One line that says what the figures mean.
    verdict: String,
}

impl Comparison {
    /// Puts the sides together and writes the verdict.
    pub(crate) fn new(
        scenario: Scenario,
        at: Setting,
        corral: SideReport,
        naive: SideReport,
    ) -> Self {
        let cold_keys = (scenario.keys * scenario.rounds).max(1) as f64;
        let judged = |side: &SideReport| {
            let (n, [one, many]) = side.judged();
            let rate = match n as f64 / cold_keys {
                1.0 => format!("1 {one}"),
                rate => format!("{} {many}", decimal(rate)),
            };
            let timeouts = side
                .sqlite
                .map(|s| format!(", {} timeouts", group(s.timeouts)));
            let (name, n, timeouts) = (side.side, group(n), timeouts.unwrap_or_default());
            format!("{name}: {rate} per cold key per round ({n} total){timeouts}")
        };
        let (ours, [_, what]) = corral.judged();
        let ran = more("ran", what, ours, naive.judged().0);
        let answered = |side: &SideReport| (side.successes, side.calls);
        let answered = answered_words(answered(&corral), answered(&naive));
        let verdict = format!(
            "{}; {} — {ran}; {answered}",
            judged(&corral),
            judged(&naive)
        );
        Self {
            callers: scenario.callers,
            keys: scenario.keys,
            rounds: scenario.rounds,
            verdict,
            setting: at,
            corral,
            naive,
        }
    }
}

/// Which side `verb` more `what`, in words true whichever it is.
fn more(verb: &str, what: &str, corral: u64, naive: u64) -> String {
    let ratio = |a: u64, b: u64| decimal(a as f64 / b as f64);
    match (corral, naive) {
        (c, n) if c == n => format!("both {verb} {} {what}", group(c)),
        (c, 0) => format!("corral {verb} {} {what}, the naive side none", group(c)),
        (0, n) => format!("the naive side {verb} {} {what}, corral none", group(n)),
        (c, n) if c > n => format!(
            "corral {verb} {}x as many {what} as the naive side",
            ratio(c, n)
        ),
        (c, n) => format!(
            "the naive side {verb} {}x as many {what} as corral",
            ratio(n, c)
        ),
    }
}

/// Who answered every call, and how many of theirs the others answered.
fn answered_words((a, of_a): (u64, u64), (b, of_b): (u64, u64)) -> String {
    let share = |n, of| format!("{} of {}", group(n), group(of));
    match (a == of_a, b == of_b) {
        (true, true) => "both answered every call".to_owned(),
        (true, false) => format!(
            "corral answered every call, the naive side {}",
            share(b, of_b)
        ),
        (false, true) => format!(
            "the naive side answered every call, corral {}",
            share(a, of_a)
        ),
        (false, false) => {
            let (a, b) = (share(a, of_a), share(b, of_b));
            format!("corral answered {a} calls, the naive side {b}")
        }
    }
}

impl Report for Comparison {
    /// Every failed call, but the naive side's timeouts waiting for a
    /// connection: those are the comparison.
    fn failures(&self) -> u64 {
        let timeouts = self.naive.sqlite.map_or(0, |s| s.timeouts);
        self.corral.failures + self.naive.failures.saturating_sub(timeouts)
    }

    fn title(&self) -> String {
        let (callers, keys, rounds) = (group(self.callers), group(self.keys), group(self.rounds));
        let shape = format!("corral herd: {callers} callers on {keys} cold keys, {rounds} rounds");
        match &self.setting {
            Setting::Embedded { zipf: 0.0, .. } => format!("{shape} (in process, keys uniform)"),
            Setting::Embedded { zipf, .. } => format!("{shape} (in process, keys Zipf s = {zipf})"),
            Setting::Redis { processes, .. } => {
                format!("{shape}, in {processes} processes per side sharing one Redis")
            }
        }
    }

    fn table(&self) -> String {
        let (c, n) = (&self.corral, &self.naive);
        let source = match &self.setting {
            Setting::Embedded {
                database: db,
                budget,
                adaptive,
                ..
            } => format!(
                "source: SQLite, {} orders of {} users (seeded in {:.0} ms); one fill query {:.1} ms; \
                 pool of {} connections per side, wait ≤ {} ms; corral's fill budget: {}",
                group(db.rows),
                group(db.users),
                db.seed_ms,
                db.query_ms,
                db.pool_size,
                group(db.pool_wait_ms),
                match (budget, adaptive) {
                    (0, _) => "none".to_owned(),
                    (n, None) => format!("{n} fills at once"),
                    (n, Some((max, [p10, p50, p90]))) => format!(
                        "adaptive from {n} (1 to {max}), while fills queued {p50} (p10 {p10}, p90 {p90})"
                    ),
                },
            ),
            Setting::Redis {
                fill_ms,
                budget,
                fleet,
                ..
            } => format!(
                "source: a server holding each call {fill_ms} ms; corral's fill budget: {}",
                match (budget, fleet) {
                    (0, _) => "none".to_owned(),
                    (n, true) => format!("one fleet budget of {n}"),
                    (n, false) => format!("{n} per process"),
                }
            ),
        };
        let dash = || "-".to_owned();
        // A row measured on the naive side is measured on corral's.
        let rows = c.cells().into_iter().zip(n.cells());
        let rows = rows.filter_map(|((label, c), (_, n))| {
            Some(vec![label.into(), c?, n.unwrap_or_else(dash)])
        });
        let table = render("|corral|naive cache-aside", rows);
        let mut out = format!("{}\n{source}\n\n{table}\n{}\n", self.title(), self.verdict);
        for side in [c, n] {
            let first = side.first_failure.as_deref();
            out.push_str(&failure_line(side.side, side.failures, first));
        }
        out
    }

    fn picture(&self) -> Picture<'_> {
        let sides = [
            ("corral", &self.corral.timeline),
            ("naive", &self.naive.timeline),
        ];
        let (title, limits) = (self.title(), self.setting.limits());
        Picture {
            title,
            sides,
            limits,
        }
    }
}

/// `side: N calls failed; first: ...` and a newline, or nothing.
pub(crate) fn failure_line(side: &str, failures: u64, first: Option<&str>) -> String {
    match first {
        Some(first) => format!("{side}: {} calls failed; first: {first}\n", group(failures)),
        None if failures > 0 => format!("{side}: {} calls failed\n", group(failures)),
        None => String::new(),
    }
}

/// A table under `header` (cells separated by `|`): labels left-aligned,
/// figures right-aligned.
pub(crate) fn render(header: &str, rows: impl IntoIterator<Item = Vec<String>>) -> String {
    let mut table = Table::new();
    let header: Vec<&str> = header.split('|').collect();
    table
        .load_style(presets::ASCII_MARKDOWN)
        .set_header(header)
        .add_rows(rows);
    for column in table.column_iter_mut().skip(1) {
        column.set_cell_alignment(CellAlignment::Right);
    }
    format!("{table}\n")
}

/// `12345678` as `12,345,678`.
pub(crate) fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// A ratio: grouped when whole or from 1,000 up, else with two decimals.
fn decimal(x: f64) -> String {
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
    fn figures_are_grouped() {
        let groups = [0, 999, 1000, 1_234_567].map(group);
        assert_eq!(groups, ["0", "999", "1,000", "1,234,567"]);
        assert_eq!([15.25, 2500.4].map(decimal), ["15.25", "2,500"]);
    }

    #[test]
    fn the_verdict_stays_true_whichever_side_wins() {
        let scenario = Scenario {
            callers: 100,
            keys: 2,
            rounds: 3,
            fill: std::time::Duration::ZERO,
        };
        let side = |side, fills, successes| {
            let tally = Tally {
                successes,
                failures: 300 - successes,
                ..Tally::default()
            };
            SideReport::new(side, scenario, fills, tally, Series::default())
        };
        let verdict = |corral, naive| {
            let (processes, fill_ms, budget, fleet) = (2, 0, 0, false);
            let setting = Setting::Redis {
                processes,
                fill_ms,
                budget,
                fleet,
            };
            Comparison::new(scenario, setting, corral, naive)
        };
        let won = verdict(side("corral", 6, 300), side("naive", 300, 100));
        assert_eq!(
            won.verdict,
            "corral: 1 fill per cold key per round (6 total); naive: 50 fills per cold key \
             per round (300 total) — the naive side ran 50x as many fills as corral; corral \
             answered every call, the naive side 100 of 300"
        );
        let table = won.table();
        let fills = "| source calls (fill attempts)       |       6 |               300 |";
        assert!(table.contains(fills), "{table}");
        assert!(
            !table.contains("SQLite"),
            "no SQLite rows without SQLite: {table}"
        );
        let lost = verdict(side("corral", 24, 299), side("naive", 12, 300)).verdict;
        let words = "corral ran 2x as many fills as the naive side; the naive side answered \
                     every call, corral 299 of 300";
        assert!(lost.ends_with(words), "{lost}");
        let even = verdict(side("corral", 6, 300), side("naive", 6, 300)).verdict;
        assert!(
            even.ends_with("both ran 6 fills; both answered every call"),
            "{even}"
        );
        let neither = verdict(side("corral", 0, 1), side("naive", 7, 2)).verdict;
        let words = "the naive side ran 7 fills, corral none; corral answered 1 of 300 calls, \
                     the naive side 2 of 300";
        assert!(neither.ends_with(words), "{neither}");
    }
}

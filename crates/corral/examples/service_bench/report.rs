//! The markdown tables (and the JSON) of a run.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use serde::Serialize;

use crate::args::{Args, Scenario};
use crate::coordinator::SideResult;
use crate::zipf::Zipf;

/// One scenario's sides, in the order they ran.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ScenarioResult {
    pub(crate) scenario: Scenario,
    pub(crate) sides: Vec<SideResult>,
}

/// A row of the main table: its label and each side's figure.
type Row = (&'static str, fn(&SideResult) -> f64, Format);

#[derive(Clone, Copy)]
enum Format {
    Count,
    Fixed(usize),
}

const ROWS: [Row; 16] = [
    ("requests/s", |s| s.requests_per_sec, Format::Count),
    ("p50 (µs)", |s| s.p50_us, Format::Fixed(1)),
    ("p90 (µs)", |s| s.p90_us, Format::Fixed(1)),
    ("p99 (µs)", |s| s.p99_us, Format::Fixed(1)),
    ("p99.9 (µs)", |s| s.p999_us, Format::Fixed(1)),
    ("requests measured", |s| s.requests as f64, Format::Count),
    ("measured period (s)", |s| s.secs, Format::Fixed(1)),
    ("database queries", |s| s.db_queries as f64, Format::Count),
    (
        "database queries per 1k requests",
        |s| s.per_request(s.db_queries as f64, 1000.0),
        Format::Fixed(1),
    ),
    (
        "Redis commands (scripts' own counted too)",
        |s| s.redis_calls() as f64,
        Format::Count,
    ),
    (
        "Redis commands per request",
        |s| s.per_request(s.redis_calls() as f64, 1.0),
        Format::Fixed(2),
    ),
    (
        "Redis command time (s)",
        |s| s.redis_usec() as f64 / 1e6,
        Format::Fixed(2),
    ),
    (
        "of it in scripts (EVALSHA, EVAL, FCALL) (s)",
        |s| s.script().usec as f64 / 1e6,
        Format::Fixed(2),
    ),
    (
        "scripts run per request",
        |s| s.per_request(s.script().calls as f64, 1.0),
        Format::Fixed(3),
    ),
    ("Redis server CPU (s)", |s| s.redis_cpu_s, Format::Fixed(2)),
    (
        "client CPU per request (µs)",
        |s| s.per_request(s.client_cpu_us as f64, 1.0),
        Format::Fixed(1),
    ),
];

/// `n` with thousands separators.
fn count(n: f64) -> String {
    let digits = format!("{:.0}", n.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn show(n: f64, format: Format) -> String {
    match format {
        Format::Count => count(n),
        Format::Fixed(places) => format!("{n:.places$}"),
    }
}

/// The run's markdown: the settings, then per scenario its table, corral's
/// counters per replica and the commands by name.
pub(crate) fn markdown(args: &Args, results: &[ScenarioResult]) -> String {
    let mut out = String::new();
    let load = match args.rate {
        Some(rate) => format!("requests started at {rate:.0}/s in all (open loop)"),
        None => format!("{} client tasks each (closed loop)", args.concurrency),
    };
    let _ = writeln!(
        out,
        "{} replicas, {load}, Zipf(1.0) keys, TTL {} s, SQLite pool of {} per \
         replica; each side serves the same requests (warm-up, then measured, at most {} s)\n",
        args.replicas,
        args.ttl.as_secs_f64(),
        args.pool,
        args.cap.as_secs_f64(),
    );
    let closed = args
        .rate
        .is_none()
        .then_some(args.replicas * args.concurrency);
    for result in results {
        scenario(&mut out, result, closed);
    }
    out
}

/// In a closed loop of `tasks` client tasks, Little's law: a side serving
/// X requests/s spends `tasks / X` on a request on average. A side with an
/// L1 answers its hits in about a microsecond, so the requests that left
/// the L1 (a share `m`: L2 hits, fills, callers that joined a fill, writes)
/// carry nearly all of that time: about `tasks / (m · X)` each. At equal
/// throughput that is `1 / m` times cache-aside's mean, and the p99 (a
/// request of that share whenever `m` > 1%) follows it: the closed loop
/// itself sets the tail's ratio, whatever the cache does. The open loop
/// (`--rate`) measures latency instead.
fn closed_loop_tail(out: &mut String, tasks: usize, sides: &[SideResult]) {
    let Some(cached) = sides.iter().find(|side| side.stats.contains_key("hits")) else {
        return;
    };
    let counter = |name: &str| cached.stats.get(name).copied().unwrap_or(0) as f64;
    let left = counter("l2_hits") + counter("misses") + counter("coalesced") + cached.writes as f64;
    let share = left / cached.requests.max(1) as f64;
    let tasks = tasks as f64;
    let mean = |side: &SideResult| tasks / side.requests_per_sec.max(1.0) * 1e6;
    let _ = write!(
        out,
        "\nclosed loop: {:.1}% of {}'s requests left the L1; with {tasks} client tasks at \
         {} requests/s their mean latency is about {:.0} µs (Little's law: tasks / (share × \
         rate)), the p99's order",
        share * 100.0,
        cached.side,
        count(cached.requests_per_sec),
        mean(cached) / share.max(1e-9),
    );
    if let Some(aside) = sides.iter().find(|side| !side.stats.contains_key("hits")) {
        let _ = write!(
            out,
            "; every request of {} is such a request, at {:.0} µs on average",
            aside.side,
            mean(aside)
        );
    }
    out.push('\n');
}

/// How many of the measured requests are a key's first read (and so a
/// fill on either side) if nothing expires: the measured period's regime.
/// Over the default 20x period (requests 500,000 to 1,500,000) that is 27
/// per 1,000; measured from 4,500,000 on, under 1. Database queries above
/// it are refills: expiries (a period longer than the TTL), writes'
/// invalidations, Redis evictions.
fn first_reads(out: &mut String, s: &Scenario) {
    let zipf = Zipf::new(s.keys);
    let first = zipf.first_reads(s.warmup, s.warmup + s.requests);
    let _ = writeln!(
        out,
        "\nfirst reads of a key: about {:.1} per 1k requests measured (Zipf(1.0) over {} keys, \
         every replica's draws pooled, nothing expiring); database queries above that are refills",
        first / s.requests.max(1) as f64 * 1000.0,
        count(s.keys as f64),
    );
}

fn scenario(out: &mut String, result: &ScenarioResult, closed: Option<usize>) {
    let (s, sides) = (&result.scenario, &result.sides);
    let _ = writeln!(
        out,
        "### {}: {} writes; {} requests of warm-up, {} measured\n",
        s.name,
        s.writes,
        count(s.warmup as f64),
        count(s.requests as f64)
    );
    let ratio = sides.len() == 2;
    let names: Vec<&str> = sides.iter().map(|side| side.side).collect();
    let _ = write!(out, "| | {} |", names.join(" | "));
    let _ = writeln!(
        out,
        "{}",
        if ratio {
            format!(" {} / {} |", names[0], names[1])
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        out,
        "|---|{}{}",
        "---:|".repeat(sides.len()),
        if ratio { "---:|" } else { "" }
    );
    for (label, figure, format) in ROWS {
        let figures: Vec<f64> = sides.iter().map(figure).collect();
        let shown: Vec<String> = figures.iter().map(|&n| show(n, format)).collect();
        let _ = write!(out, "| {label} | {} |", shown.join(" | "));
        if ratio {
            let r = figures[0] / figures[1];
            let places = if r.abs() < 0.1 { 3 } else { 2 };
            if r.is_finite() {
                let _ = write!(out, " {r:.places$}x |");
            } else {
                out.push_str(" - |");
            }
        }
        out.push('\n');
    }
    let errors: Vec<String> = sides
        .iter()
        .map(|side| {
            format!(
                "{} / {}",
                count(side.writes as f64),
                count(side.errors as f64)
            )
        })
        .collect();
    let _ = writeln!(
        out,
        "| writes / errors | {} |{}",
        errors.join(" | "),
        if ratio { " |" } else { "" }
    );
    first_reads(out, s);
    if let Some(tasks) = closed {
        closed_loop_tail(out, tasks, sides);
    }
    for side in sides {
        if side.capped {
            let _ = writeln!(out, "\n{}'s measured period reached the cap", side.side);
        }
        if let Some(error) = &side.first_error {
            let _ = writeln!(out, "\n{}'s first error: {error}", side.side);
        }
        counters(out, side);
    }
    commands(out, sides);
}

/// corral's counters that moved, per replica.
fn counters(out: &mut String, side: &SideResult) {
    if side.stats.is_empty() {
        return;
    }
    let replicas = side.replicas.max(1) as f64;
    let list: Vec<String> = side
        .stats
        .iter()
        .map(|(name, n)| format!("{name} {}", count(*n as f64 / replicas)))
        .collect();
    let _ = writeln!(
        out,
        "\n{} counters per replica over the period: {}",
        side.side,
        list.join(", ")
    );
    let counter = |name: &str| side.stats.get(name).copied().unwrap_or(0) as f64;
    let messages = counter("backplane_messages") + counter("tracking_invalidations");
    let elsewhere = counter("fills") * (replicas - 1.0) / replicas;
    if elsewhere > 0.0 {
        let _ = writeln!(
            out,
            "\nbackplane messages and tracking invalidations acted on per replica per fill made \
             in another replica: {:.2}",
            messages / replicas / elsewhere
        );
    }
}

/// `INFO commandstats` by command: calls and µs per call of each side.
fn commands(out: &mut String, sides: &[SideResult]) {
    let names: BTreeSet<&String> = sides.iter().flat_map(|side| side.redis.keys()).collect();
    let _ = write!(out, "\n| command |");
    for side in sides {
        let _ = write!(out, " {0} calls | {0} µs/call | {0} s |", side.side);
    }
    let _ = writeln!(out, "\n|---|{}", "---:|".repeat(3 * sides.len()));
    for name in names {
        let _ = write!(out, "| {name} |");
        for side in sides {
            let stat = side.redis.get(name).copied().unwrap_or_default();
            let _ = write!(
                out,
                " {} | {:.1} | {:.2} |",
                count(stat.calls as f64),
                stat.usec_per_call(),
                stat.usec as f64 / 1e6
            );
        }
        out.push('\n');
    }
    out.push('\n');
}

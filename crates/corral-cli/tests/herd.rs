//! Runs the built `corral herd` binary on small stampedes (a small SQLite
//! file by default; the outage; worker processes sharing a real
//! `redis-server` the test starts on a free port) and checks its JSON
//! report, its timelines against its totals, and its picture in a real SVG
//! renderer (`rsvg-convert`, which `scripts/install-deps` installs).

use std::path::Path;
use std::process::Command;

use corral_testkit::RedisServer;
use serde_json::Value;

const CALLERS: u64 = 500;
const KEYS: u64 = 3;
const ROUNDS: u64 = 2;

fn herd_json(extra: &[&str]) -> Value {
    let output = Command::new(env!("CARGO_BIN_EXE_corral"))
        .args([
            "herd",
            "--callers",
            "500",
            "--keys",
            "3",
            "--rounds",
            "2",
            "--fill-ms",
            "20",
            "--rows",
            "20000",
            "--users",
            "200",
            "--pool-size",
            "4",
            "--pool-wait-ms",
            "300",
            "--json",
        ])
        .args(extra)
        .output()
        .expect("run corral herd");
    json_of(&output, "")
}

/// The one JSON object a successful `corral herd --json` printed, and
/// nothing on stderr; `context` goes into the failure message.
fn json_of(output: &std::process::Output, context: &str) -> Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "corral herd failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}{context}",
        output.status
    );
    assert!(
        stderr.trim().is_empty(),
        "--json writes nothing to stderr, got:\n{stderr}"
    );
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("not one JSON object ({e}):\n{stdout}"))
}

fn figure(report: &Value, side: &str, name: &str) -> u64 {
    report[side][name]
        .as_u64()
        .unwrap_or_else(|| panic!("{side}.{name} missing in {report:#}"))
}

/// Each side's timeline sums to its totals: callers answered and failed,
/// calls run at the source (`ran`: SQLite queries or fills), and its most
/// at once is the table's.
fn timelines_sum_to_the_totals(report: &Value, ran: &str) {
    for side in ["corral", "naive"] {
        let buckets = report[side]["timeline"].as_array().expect("a timeline");
        let column =
            |name: &'static str| buckets.iter().map(move |b| b[name].as_u64().expect(name));
        let sum = |name: &'static str| column(name).sum::<u64>();
        assert!(!buckets.is_empty(), "{side}: {report:#}");
        assert_eq!(sum("answered"), figure(report, side, "successes"), "{side}");
        assert_eq!(sum("failed"), figure(report, side, "failures"), "{side}");
        assert_eq!(sum("started"), figure(report, side, ran), "{side}");
        let most = column("running").max();
        assert_eq!(most, Some(figure(report, side, "most_at_once")), "{side}");
    }
}

/// `rsvg-convert` renders the SVG at `svg` to a PNG of the picture's size,
/// and the picture names both sides.
fn renders(svg: &Path) {
    let text = std::fs::read_to_string(svg).expect("the SVG");
    for words in ["corral herd", "corral: ", "naive: ", "calls at the source"] {
        assert!(text.contains(words), "{words:?} not in {}", svg.display());
    }
    let png = svg.with_extension("png");
    let rendered = Command::new("rsvg-convert")
        .arg("--format=png")
        .arg("--output")
        .arg(&png)
        .arg(svg)
        .output()
        .expect("rsvg-convert (librsvg2-bin; scripts/install-deps installs it)");
    let stderr = String::from_utf8_lossy(&rendered.stderr);
    assert!(rendered.status.success(), "rsvg-convert: {stderr}");
    let png = std::fs::read(&png).expect("the PNG");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let size = |at: usize| u32::from_be_bytes(png[at..at + 4].try_into().expect("4 bytes"));
    assert_eq!((size(16), size(20)), (1000, 760), "width and height");
}

#[test]
fn corral_queries_sqlite_once_per_cold_key_and_naive_stampedes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("herd.sqlite3");
    let db_arg = db.to_str().expect("utf-8 path");
    let svg = dir.path().join("herd.svg");
    let report = herd_json(&["--db", db_arg, "--plot", svg.to_str().expect("utf-8")]);
    timelines_sum_to_the_totals(&report, "sqlite_queries");
    renders(&svg);
    assert_eq!(report["mode"], "embedded");
    assert_eq!(report["callers"], CALLERS);
    assert_eq!(report["keys"], KEYS);
    assert_eq!(report["rounds"], ROUNDS);
    let database = &report["database"];
    assert_eq!(database["path"], db_arg);
    assert_eq!(database["rows"], 20_000);
    assert_eq!(database["pool_size"], 4);
    assert!(db.is_file(), "--db keeps the seeded file");

    let corral_queries = figure(&report, "corral", "sqlite_queries");
    let naive_queries = figure(&report, "naive", "sqlite_queries");
    assert_eq!(
        corral_queries,
        KEYS * ROUNDS,
        "corral: exactly one SQLite query per cold key per round\n{report:#}"
    );
    assert_eq!(figure(&report, "corral", "fills"), KEYS * ROUNDS);
    assert!(
        naive_queries > corral_queries,
        "the naive cache-aside stampedes the database\n{report:#}"
    );
    assert_eq!(figure(&report, "corral", "timeouts"), 0, "{report:#}");
    assert_eq!(
        figure(&report, "corral", "successes"),
        CALLERS * ROUNDS,
        "corral: every caller got its user's totals\n{report:#}"
    );
    assert_eq!(figure(&report, "corral", "failures"), 0);
    // Every naive caller missed; each either ran a query or timed out
    // waiting for a connection, and only a timeout fails a call.
    let naive_timeouts = figure(&report, "naive", "timeouts");
    assert_eq!(
        figure(&report, "naive", "fills"),
        naive_queries + naive_timeouts
    );
    assert_eq!(figure(&report, "naive", "failures"), naive_timeouts);
    assert_eq!(
        figure(&report, "naive", "successes") + naive_timeouts,
        CALLERS * ROUNDS
    );

    for side in ["corral", "naive"] {
        assert_eq!(figure(&report, side, "calls"), CALLERS * ROUNDS);
        assert_eq!(figure(&report, side, "errors"), 0, "{side}\n{report:#}");
        let latency = &report[side]["latency_ms"];
        let (p50, p99, max) = (
            latency["p50"].as_f64().expect("p50"),
            latency["p99"].as_f64().expect("p99"),
            latency["max"].as_f64().expect("max"),
        );
        assert!(
            p50 <= p99 && p99 <= max,
            "{side}: percentiles ordered: {latency}"
        );
        assert!(report[side]["wall_ms"].as_f64().expect("wall_ms") > 0.0);
    }
    // A query of this small file takes about a millisecond: callers that
    // arrive after it landed are hits rather than waiters, so only the
    // bound is exact.
    let coalesced = figure(&report, "corral", "coalesced");
    assert!(
        coalesced > 0 && coalesced <= (CALLERS - KEYS) * ROUNDS,
        "callers joined the fill in flight instead of querying\n{report:#}"
    );
    assert!(report["verdict"]
        .as_str()
        .expect("verdict")
        .starts_with("corral: 1 SQLite query per cold key"));
}

/// A Zipf draw asks for each key by its weight: for the hot ones often,
/// for most cold ones at least once.
#[test]
fn zipf_callers_ask_for_keys_by_their_weight() {
    let output = Command::new(env!("CARGO_BIN_EXE_corral"))
        .args(["herd", "--zipf", "1", "--keys", "300", "--callers", "3000"])
        .args([
            "--rounds", "1", "--rows", "2000", "--users", "200", "--json",
        ])
        .output()
        .expect("run corral herd --zipf");
    let report = json_of(&output, "");
    // corral queries once per key asked: a Zipf(1) draw of 3,000 callers
    // over 300 keys asks for about 281 of them (the seed is fixed).
    let asked = figure(&report, "corral", "sqlite_queries");
    assert!(
        (260..=300).contains(&asked),
        "{asked} keys asked\n{report:#}"
    );
    assert_eq!(figure(&report, "corral", "successes"), 3000);
    let hot = report["corral"]["hot_p50_ms"].as_f64();
    assert!(hot.is_some(), "the hottest keys' p50\n{report:#}");
}

#[test]
fn rejects_more_keys_than_callers() {
    let output = Command::new(env!("CARGO_BIN_EXE_corral"))
        .args(["herd", "--callers", "2", "--keys", "3"])
        .output()
        .expect("run corral herd");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--keys 3 is more than --callers 2"),
        "{stderr}"
    );
}

#[test]
fn during_an_outage_corral_serves_fail_safe_values_with_no_errors() {
    let dir = tempfile::tempdir().expect("temp dir");
    let svg = dir.path().join("outage.svg");
    let report = herd_json(&["--outage", "--plot", svg.to_str().expect("utf-8")]);
    assert_eq!(report["mode"], "outage");
    timelines_sum_to_the_totals(&report, "fills");
    renders(&svg);
    assert_eq!(figure(&report, "corral", "failures"), 0, "{report:#}");
    let corral = report["corral"]["rounds"]
        .as_array()
        .expect("corral rounds");
    let naive = report["naive"]["rounds"].as_array().expect("naive rounds");
    assert_eq!(corral.len(), ROUNDS as usize + 2, "up, {ROUNDS} down, up");
    for (round, figures) in corral.iter().enumerate() {
        assert_eq!(
            figures["answered"].as_u64(),
            Some(CALLERS),
            "round {round}: {report:#}"
        );
        let down = figures["source_up"] == false;
        let fail_safe = figures["fail_safe"].as_u64().expect("fail-safe count");
        assert_eq!(fail_safe, if down { CALLERS } else { 0 }, "round {round}");
        assert_eq!(
            figures["source_calls"].as_u64(),
            Some(KEYS),
            "round {round}: one source call per key, up or down"
        );
    }
    let naive_down_errors: u64 = naive
        .iter()
        .filter(|r| r["source_up"] == false)
        .map(|r| r["errors"].as_u64().expect("errors"))
        .sum();
    assert_eq!(
        naive_down_errors,
        CALLERS * ROUNDS,
        "the naive side fails every call while down"
    );
}

/// Callers per round across the worker processes of the Redis run.
const REDIS_CALLERS: u64 = 300;
const PROCESSES: u64 = 3;

#[test]
fn across_processes_corral_fills_once_per_cold_key_and_naive_stampedes() {
    let server = RedisServer::start();
    server.reset_stats();
    let dir = tempfile::tempdir().expect("temp dir");
    let svg = dir.path().join("redis.svg");
    let output = Command::new(env!("CARGO_BIN_EXE_corral"))
        .args(["herd", "--redis", &server.url()])
        .args(["--processes", &PROCESSES.to_string()])
        .args(["--callers", &REDIS_CALLERS.to_string()])
        .args(["--keys", &KEYS.to_string()])
        .args(["--rounds", &ROUNDS.to_string()])
        .args(["--fill-ms", "30", "--json", "--plot"])
        .arg(&svg)
        .output()
        .expect("run corral herd --redis");
    let report = json_of(&output, &format!("\nserver log:\n{}", server.log()));
    assert_eq!(report["mode"], "redis");
    assert_eq!(report["processes"], PROCESSES);
    timelines_sum_to_the_totals(&report, "fills");
    renders(&svg);

    for side in ["corral", "naive"] {
        assert_eq!(figure(&report, side, "calls"), REDIS_CALLERS * ROUNDS);
        assert_eq!(
            figure(&report, side, "successes"),
            REDIS_CALLERS * ROUNDS,
            "{side}: every caller got its key's value\n{report:#}"
        );
        assert_eq!(figure(&report, side, "failures"), 0, "{report:#}");
    }
    // Every process asks for every key at once: corral runs one fill per
    // cold key across all of them; the naive side one per caller that
    // missed, and every caller of a process released before the first
    // fill landed 30 ms later missed.
    let corral_fills = figure(&report, "corral", "fills");
    let naive_fills = figure(&report, "naive", "fills");
    assert_eq!(
        corral_fills,
        KEYS * ROUNDS,
        "one fill per cold key per round across every process\n{report:#}"
    );
    assert!(
        naive_fills >= 10 * corral_fills,
        "the naive cache-aside stampedes across processes\n{report:#}"
    );

    // The server agrees. A naive call is a GET, and each of its fills a
    // SETEX (the warm-up round's fills add more); corral's processes read
    // each key about once per process, so they cost Redis far less.
    let naive_commands = figure(&report, "naive", "redis_commands");
    let corral_commands = figure(&report, "corral", "redis_commands");
    assert!(
        naive_commands >= REDIS_CALLERS * ROUNDS + naive_fills,
        "{report:#}"
    );
    assert!(corral_commands * 5 < naive_commands, "{report:#}");
    let stats = server.command_stats();
    assert!(
        stats.get("setex").copied().unwrap_or(0) >= naive_fills,
        "{stats:?}"
    );
    assert!(
        stats.get("get").copied().unwrap_or(0) >= REDIS_CALLERS * ROUNDS,
        "{stats:?}"
    );
}

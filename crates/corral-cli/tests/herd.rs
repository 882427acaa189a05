//! Runs the built `corral herd` binary on a small stampede (a small SQLite
//! file by default) and checks its JSON report.

use std::process::Command;

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
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "corral herd failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
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

#[test]
fn corral_queries_sqlite_once_per_cold_key_and_naive_stampedes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("herd.sqlite3");
    let db_arg = db.to_str().expect("utf-8 path");
    let report = herd_json(&["--db", db_arg]);
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
    let report = herd_json(&["--outage"]);
    assert_eq!(report["mode"], "outage");
    assert_eq!(report["corral_errors"].as_u64(), Some(0), "{report:#}");
    let corral = report["corral"].as_array().expect("corral rounds");
    let naive = report["naive"].as_array().expect("naive rounds");
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

//! Runs the built `corral herd --redis` across worker processes sharing a
//! real `redis-server` (started by the test on a free port) and checks its
//! JSON report against the server's own command counts.

use std::process::Command;

use corral_testkit::RedisServer;
use serde_json::Value;

const CALLERS: u64 = 300;
const KEYS: u64 = 3;
const ROUNDS: u64 = 2;
const PROCESSES: u64 = 3;

fn u64_of(report: &Value, side: &str, name: &str) -> u64 {
    report[side][name]
        .as_u64()
        .unwrap_or_else(|| panic!("{side}.{name} missing in {report:#}"))
}

#[test]
fn across_processes_corral_fills_once_per_cold_key_and_naive_stampedes() {
    let server = RedisServer::start();
    server.reset_stats();
    let output = Command::new(env!("CARGO_BIN_EXE_corral"))
        .args(["herd", "--redis", &server.url()])
        .args(["--processes", &PROCESSES.to_string()])
        .args(["--callers", &CALLERS.to_string()])
        .args(["--keys", &KEYS.to_string()])
        .args(["--rounds", &ROUNDS.to_string()])
        .args(["--fill-ms", "30", "--json"])
        .output()
        .expect("run corral herd --redis");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "corral herd --redis failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}\nserver log:\n{}",
        output.status,
        server.log()
    );
    let report: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("not one JSON object ({e}):\n{stdout}"));
    assert_eq!(report["mode"], "redis");
    assert_eq!(report["processes"], PROCESSES);

    for side in ["corral", "naive"] {
        assert_eq!(u64_of(&report, side, "calls"), CALLERS * ROUNDS);
        assert_eq!(
            u64_of(&report, side, "successes"),
            CALLERS * ROUNDS,
            "{side}: every caller got its key's value\n{report:#}"
        );
        assert_eq!(u64_of(&report, side, "failures"), 0, "{report:#}");
    }
    // Every process asks for every key at once: corral runs one fill per
    // cold key across all of them; the naive side one per caller that
    // missed, and every caller of a process released before the first
    // fill landed 30 ms later missed.
    let corral_fills = u64_of(&report, "corral", "fills");
    let naive_fills = u64_of(&report, "naive", "fills");
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
    let naive_commands = u64_of(&report, "naive", "redis_commands");
    let corral_commands = u64_of(&report, "corral", "redis_commands");
    assert!(
        naive_commands >= CALLERS * ROUNDS + naive_fills,
        "{report:#}"
    );
    assert!(corral_commands * 5 < naive_commands, "{report:#}");
    let stats = server.command_stats();
    assert!(
        stats.get("setex").copied().unwrap_or(0) >= naive_fills,
        "{stats:?}"
    );
    assert!(
        stats.get("get").copied().unwrap_or(0) >= CALLERS * ROUNDS,
        "{stats:?}"
    );
}

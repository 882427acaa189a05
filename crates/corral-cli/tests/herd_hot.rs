//! Runs the built `corral herd --redis --hot-rate` against a real
//! `redis-server` (started by the test on a free port): with an L1 and the
//! backplane, a hot key costs Redis a few commands per process per TTL;
//! without, every request is a read.

use std::process::Command;

use corral_testkit::RedisServer;
use serde_json::Value;

const PROCESSES: u64 = 2;
const RATE: u64 = 500;

fn u64_of(report: &Value, side: &str, name: &str) -> u64 {
    report[side][name]
        .as_u64()
        .unwrap_or_else(|| panic!("{side}.{name} missing in {report:#}"))
}

#[test]
fn an_l1_takes_a_hot_key_off_redis() {
    let server = RedisServer::start();
    let output = Command::new(env!("CARGO_BIN_EXE_corral"))
        .args(["herd", "--redis", &server.url()])
        .args(["--processes", &PROCESSES.to_string()])
        .args(["--hot-rate", &RATE.to_string()])
        .args(["--hot-seconds", "1", "--hot-ttl-ms", "500", "--json"])
        .output()
        .expect("run corral herd --redis --hot-rate");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "corral herd --hot-rate failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}\nserver log:\n{}",
        output.status,
        server.log()
    );
    let report: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("not one JSON object ({e}):\n{stdout}"));
    assert_eq!(report["mode"], "redis-hot-key");
    for side in ["with_l1", "l2_only"] {
        assert_eq!(u64_of(&report, side, "errors"), 0, "{report:#}");
        // The pacing may fall behind on a loaded machine, never far.
        assert!(
            u64_of(&report, side, "requests") >= PROCESSES * RATE / 2,
            "{report:#}"
        );
    }
    // Without an L1 every request is a read (a GET, with its PTTL the
    // first time a write is read).
    let l2_only = u64_of(&report, "l2_only", "redis_commands");
    assert!(
        l2_only >= u64_of(&report, "l2_only", "l2_hits"),
        "{report:#}"
    );
    assert_eq!(u64_of(&report, "l2_only", "l1_hits"), 0);
    // With one, most requests never reach Redis.
    let with_l1 = u64_of(&report, "with_l1", "redis_commands");
    assert!(with_l1 * 10 < l2_only, "{with_l1} vs {l2_only}\n{report:#}");
    assert!(
        u64_of(&report, "with_l1", "l1_hits") > 9 * u64_of(&report, "with_l1", "l2_hits"),
        "{report:#}"
    );
}

//! Runs the built `corral herd --redis` across worker processes sharing a
//! real `redis-server` (started by the test on a free port) and checks its
//! JSON report against the server's own command counts.

use std::process::Command;

use corral_testkit::{RedisCluster, RedisServer};
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
fn one_fill_per_cold_key_across_processes_notified_and_polling() {
    let server = RedisServer::start();
    server.reset_stats();
    let output = Command::new(env!("CARGO_BIN_EXE_corral"))
        .args(["herd", "--redis", &server.url()])
        .args(["--processes", &PROCESSES.to_string()])
        .args(["--callers", &CALLERS.to_string()])
        .args(["--keys", &KEYS.to_string()])
        .args(["--rounds", &ROUNDS.to_string()])
        .args(["--fill-ms", "30", "--poll-ms", "100", "--json"])
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

    let mut round_trips = 0;
    let mut fills = 0;
    for side in ["notify", "poll"] {
        assert_eq!(
            u64_of(&report, side, "fills"),
            KEYS * ROUNDS,
            "{side}: one fill per cold key per round across every process\n{report:#}"
        );
        assert_eq!(
            u64_of(&report, side, "fills_counted_by_processes"),
            KEYS * ROUNDS
        );
        assert_eq!(
            u64_of(&report, side, "successes"),
            CALLERS * ROUNDS,
            "{side}: every caller got its value\n{report:#}"
        );
        assert_eq!(u64_of(&report, side, "failures"), 0);
        // Every process asks for every key; all but the leader's wait.
        assert!(
            u64_of(&report, side, "cross_process_waiters") > 0,
            "{report:#}"
        );
        let wake = &report[side]["wake_latency_ms"];
        assert!(wake["p50"].as_f64().expect("wake p50") <= wake["max"].as_f64().expect("wake max"));
        // A leading process: its first read, the lease, the commit. A
        // waiting one: its first read, its lease request, then one more
        // when woken (fill 30 ms, first poll at 100 ms).
        assert_eq!(
            u64_of(&report, side, "max_round_trips_leader_flight"),
            3,
            "{report:#}"
        );
        assert!(
            u64_of(&report, side, "max_round_trips_waiting_flight") <= 3,
            "{report:#}"
        );
        // Only one flight per key and process touches Redis.
        let side_round_trips = u64_of(&report, side, "round_trips");
        assert!(
            side_round_trips <= 3 * KEYS * ROUNDS * PROCESSES,
            "{side}: {side_round_trips} round trips\n{report:#}"
        );
        round_trips += side_round_trips;
        fills += u64_of(&report, side, "fills");
    }

    // The server agrees: every fill (and the two warm-up rounds' fills) hit
    // the INCR counter once, and each of corral's calls runs a script or a
    // plain read (`PTTL` + `GET`, counted by its `PTTL`): at least as many
    // as the measured rounds' round trips (the warm-up rounds add more).
    let stats = server.command_stats();
    assert_eq!(
        stats.get("incr").copied().unwrap_or(0),
        fills + 2 * KEYS,
        "{stats:?}"
    );
    let count = |name: &str| stats.get(name).copied().unwrap_or(0);
    assert!(count("evalsha") + count("pttl") >= round_trips, "{stats:?}");
}

/// `--redis` with several comma-separated URLs runs on a Redis Cluster:
/// still one fill per cold key per round across every process.
#[test]
fn one_fill_per_cold_key_on_a_cluster() {
    let cluster = RedisCluster::start();
    cluster.reset_stats();
    let (callers, keys, rounds, processes) = (60_u64, 6_u64, 2_u64, 2_u64);
    let output = Command::new(env!("CARGO_BIN_EXE_corral"))
        .args(["herd", "--redis", &cluster.urls().join(",")])
        .args(["--processes", &processes.to_string()])
        .args(["--callers", &callers.to_string()])
        .args(["--keys", &keys.to_string()])
        .args(["--rounds", &rounds.to_string()])
        .args(["--fill-ms", "30", "--wake", "notify", "--json"])
        .output()
        .expect("run corral herd --redis URL,URL,URL");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "corral herd on a cluster failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}\n{}",
        output.status,
        cluster.logs()
    );
    let report: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("not one JSON object ({e}):\n{stdout}"));
    assert_eq!(
        u64_of(&report, "notify", "fills"),
        keys * rounds,
        "one fill per cold key per round\n{report:#}"
    );
    assert_eq!(u64_of(&report, "notify", "successes"), callers * rounds);
    assert_eq!(u64_of(&report, "notify", "failures"), 0);
    // The fill counters were spread over the masters: the cluster agrees.
    let stats = cluster.command_stats();
    assert_eq!(
        stats.get("incr").copied().unwrap_or(0),
        keys * rounds + keys,
        "measured fills plus the warm-up round's: {stats:?}"
    );
    eprintln!(
        "herd on a 3-master cluster: {} fills for {} cold keys",
        u64_of(&report, "notify", "fills"),
        keys * rounds
    );
}

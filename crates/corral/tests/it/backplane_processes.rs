//! The backplane across real OS processes: three processes share a real
//! Redis, each with an L1 in front of it; a `set` in one is seen by the
//! others' next read once the backplane message arrives. With the backplane
//! off, the old value is read until the L1 lifetime ends.
//!
//! The test binary re-runs itself as worker processes (the ignored test
//! `backplane_worker`). Latency is measured on this host's wall clock,
//! which every process reads (no clock of another host is involved): the
//! writer stamps when its `set` returned, each reader when its first read
//! returned the new value; readers poll every 100 µs from a thread of their
//! own while the runtime's worker handles the subscription.
//!
//! With the backplane off, the bound is checked on the start of the last
//! read that still returned the old value: it began before the L1 copy's
//! lifetime ended, however late the scheduler ran it, so the check does not
//! depend on the machine's load.
//!
//! Run with `--nocapture` to see the figures.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use corral::{Cache, RedisConfig, RedisStore};
use corral_testkit::{RedisServer, Worker};

/// Microseconds since the Unix epoch on this host's clock.
fn wall_clock_us() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_micros()).unwrap_or(i64::MAX)
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("worker needs {name}"))
}

// ---------------------------------------------------------------- worker side

/// A worker: one cache with an L1 on a Redis store; commands on stdin, one
/// at a time, answered with `@` lines.
#[test]
#[ignore = "a worker process for the backplane tests, started by them"]
fn backplane_worker() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let cache = runtime.block_on(async {
        let store = RedisStore::connect(&env("CORRAL_WORKER_URL"), RedisConfig::default())
            .await
            .expect("connect");
        let backplane = env("CORRAL_WORKER_BACKPLANE") == "on";
        let mut builder = Cache::<String>::builder("backplane")
            .store(store)
            .l1(true)
            .ttl(Duration::from_secs(600))
            .backplane(backplane);
        if !backplane {
            let lifetime: u64 = env("CORRAL_WORKER_L1_MS").parse().expect("ms");
            builder = builder.l1_lifetime(Duration::from_millis(lifetime));
        }
        builder.build().expect("config")
    });
    println!("@ready");
    let stdin = std::io::stdin();
    let mut line = String::new();
    while stdin.read_line(&mut line).unwrap_or(0) > 0 {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            // set <key> <value>: answers when the set returned, with its time.
            ["set", key, value] => {
                runtime
                    .block_on(cache.set(key, (*value).to_owned()))
                    .expect("set");
                println!("@set {}", wall_clock_us());
            }
            // read <key>: one read, answered with the value.
            ["read", key] => {
                let value = runtime.block_on(cache.peek(key)).expect("read");
                println!("@read {}", value.unwrap_or_default());
            }
            // watch <key> <value>: answers `@watching`, then polls until the
            // read returns the value and answers when it first did, and when
            // the last read that did not return it started.
            ["watch", key, value] => {
                println!("@watching");
                let deadline = std::time::Instant::now() + Duration::from_secs(10);
                let mut last_stale_start = 0;
                loop {
                    let started = wall_clock_us();
                    let got = runtime.block_on(cache.peek(key)).expect("read");
                    if got.as_deref() == Some(*value) {
                        println!("@seen {} {last_stale_start}", wall_clock_us());
                        break;
                    }
                    last_stale_start = started;
                    if std::time::Instant::now() > deadline {
                        println!("@seen never");
                        break;
                    }
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
            _ => panic!("unknown worker command {line:?}"),
        }
        line.clear();
    }
}

// ---------------------------------------------------------------- test side

/// What the readers saw of one set, in microseconds after it returned.
struct Seen {
    /// When each reader's first read returned the new value.
    latencies: Vec<i64>,
    /// When each reader's last read that returned something else started.
    last_stale_starts: Vec<i64>,
}

/// What readers saw over `rounds` sets by process 0 read by processes 1
/// and 2.
async fn measure(server: &RedisServer, backplane: bool, l1_ms: u64, rounds: usize) -> Seen {
    let env = [
        ("CORRAL_WORKER_URL", server.url()),
        (
            "CORRAL_WORKER_BACKPLANE",
            if backplane { "on" } else { "off" }.to_owned(),
        ),
        ("CORRAL_WORKER_L1_MS", l1_ms.to_string()),
    ];
    let mut workers = Vec::new();
    for _ in 0..3 {
        workers.push(
            Worker::start(
                &crate::support::test_name(module_path!(), "backplane_worker"),
                &env,
            )
            .await,
        );
    }
    let key = if backplane { "k-on" } else { "k-off" };
    // Every reader holds the key in its L1 before each set.
    workers[0].send(&format!("set {key} v0")).await;
    workers[0].expect("@set").await;
    let mut seen = Seen {
        latencies: Vec::new(),
        last_stale_starts: Vec::new(),
    };
    for round in 1..=rounds {
        let (old, new) = (format!("v{}", round - 1), format!("v{round}"));
        for reader in &mut workers[1..] {
            loop {
                reader.send(&format!("read {key}")).await;
                if reader.expect("@read").await == old {
                    break;
                }
            }
            reader.send(&format!("watch {key} {new}")).await;
            reader.expect("@watching").await;
        }
        workers[0].send(&format!("set {key} {new}")).await;
        let set_at: i64 = workers[0].expect("@set").await.parse().expect("us");
        for reader in &mut workers[1..] {
            let answer = reader.expect("@seen").await;
            let times: Vec<i64> = answer
                .split(' ')
                .map(|us| us.parse())
                .collect::<Result<_, _>>()
                .unwrap_or_else(|_| panic!("round {round}: a reader never saw {new}"));
            let [first_new, last_stale_start] = times[..] else {
                panic!("round {round}: {answer:?}");
            };
            seen.latencies.push(first_new - set_at);
            if last_stale_start != 0 {
                seen.last_stale_starts.push(last_stale_start - set_at);
            }
        }
    }
    seen
}

/// p50, p99 and max of `latencies` (µs), negative ones (seen before the
/// writer's call returned) counted as 0.
fn percentiles(latencies: &[i64]) -> (i64, i64, i64) {
    let mut sorted: Vec<i64> = latencies.iter().map(|us| (*us).max(0)).collect();
    sorted.sort_unstable();
    let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99), at(1.0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_in_one_process_reaches_the_others_l1_through_the_backplane() {
    const ROUNDS: usize = 200;
    const L1_MS: u64 = 200;
    let server = RedisServer::start();

    let on = measure(&server, true, L1_MS, ROUNDS).await.latencies;
    assert_eq!(on.len(), 2 * ROUNDS, "every reader saw every set");
    let (p50, p99, max) = percentiles(&on);
    println!(
        "backplane on:  {} reads of a new value, after the set returned: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        on.len(),
        p50 as f64 / 1e3,
        p99 as f64 / 1e3,
        max as f64 / 1e3
    );
    // The target is 5 ms p99 on an idle loopback; the bound here leaves room
    // for a loaded CI machine.
    assert!(p99 < 50_000, "p99 {p99} µs");

    let off = measure(&server, false, L1_MS, 20).await;
    let (p50_off, p99_off, max_off) = percentiles(&off.latencies);
    println!(
        "backplane off: {} reads of a new value, after the set returned: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms (L1 lifetime {L1_MS} ms)",
        off.latencies.len(),
        p50_off as f64 / 1e3,
        p99_off as f64 / 1e3,
        max_off as f64 / 1e3
    );
    // Without messages the old value is read until the L1 copy's lifetime
    // ends (it was copied before the set), never longer: every read that
    // returned it started before then (20 ms for the L1's coarse clock).
    let last_stale = off.last_stale_starts.iter().max().copied().unwrap_or(0);
    println!(
        "backplane off: the last read returning the old value started {:.2} ms after the set returned",
        last_stale as f64 / 1e3
    );
    assert!(
        last_stale <= (L1_MS as i64 + 20) * 1_000,
        "a read started {last_stale} µs after the set returned the old value"
    );
    assert!(
        p50_off > p50,
        "stale reads last longer without the backplane"
    );
    assert!(
        max_off >= 20_000,
        "some stale read lasted a while: {max_off} µs"
    );
}

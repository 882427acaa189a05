//! Redis under Sentinel: a master, one replica and three real
//! `redis-sentinel` processes ([`RedisSentinel`]). Stores built with
//! `RedisStore::connect_sentinel` find the master through the sentinels
//! and follow a failover: the master killed mid-fill with two worker
//! processes of 200 callers each, and a manual failover that leaves the
//! old master alive as a replica (`READONLY`). Every wait is for an event
//! and bounded; the figures are printed for the issue note.
#![cfg(feature = "redis")]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corral::{Cache, RedisConfig, RedisStore, StoreErrorKind};
use corral_testkit::{RedisSentinel, Worker};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::Semaphore;

use crate::support;

const OP_TIMEOUT: Duration = Duration::from_millis(300);
const FILL_TIMEOUT: Duration = Duration::from_secs(20);
/// Bound on anything that waits for the failover (generous: the sentinels
/// need `down-after-milliseconds`, an election and the promotion).
const RECOVERY: Duration = Duration::from_secs(30);
/// Callers per worker process.
const CALLERS: usize = 200;

fn config() -> RedisConfig {
    RedisConfig::default()
        .op_timeout(OP_TIMEOUT)
        .connect_timeout(Duration::from_millis(500))
        .reconnect_max_delay(Duration::from_millis(200))
}

async fn store(group: &RedisSentinel) -> RedisStore {
    RedisStore::connect_sentinel(group.master_name(), &group.sentinel_urls(), config())
        .await
        .unwrap_or_else(|e| panic!("connect_sentinel: {e}\n{}", group.logs()))
}

fn cache(store: &RedisStore, name: &str, l1: bool) -> Cache<String> {
    Cache::<String>::builder(name)
        .store(store.clone())
        .ttl(Duration::from_secs(60))
        .lease_ttl(Duration::from_secs(5))
        .store_timeout(OP_TIMEOUT)
        .fill_timeout(FILL_TIMEOUT)
        // The breaker stays on, with a short cool-down: calls failing
        // through the failover open it, and the waits below are for the
        // failover, not for the breaker's default cool-down.
        .circuit_breaker(5, Duration::from_millis(200))
        .l1(l1)
        .build()
        .expect("config")
}

/// Retries `set` until the store takes it (after a failover), bounded;
/// returns how long it took.
async fn set_until_ok(cache: &Cache<String>, key: &str, value: &str) -> Duration {
    let started = Instant::now();
    while let Err(e) = cache.set(key, value.to_owned()).await {
        assert!(started.elapsed() < RECOVERY, "set never worked again: {e}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    started.elapsed()
}

// ---------------------------------------------------------------- worker side

/// What a worker reports for `stats`.
#[derive(Debug, Serialize, Deserialize)]
struct WorkerStats {
    /// Fills this process started.
    fills: u64,
    lease_waits: u64,
    commits: u64,
    commits_refused: u64,
    store_errors: u64,
    fail_open_fills: u64,
    backplane_messages: u64,
    backplane_resets: u64,
}

/// What a worker's stampede callers got.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Answers {
    values: BTreeMap<String, usize>,
    errors: Vec<String>,
    slowest_ms: u128,
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("worker needs {name}"))
}

/// The worker process: one store through the sentinels, a cache without
/// L1 (`held`) whose fills wait for `release`, and a cache with L1
/// (`tier`) kept current by the backplane. Commands run concurrently.
#[test]
#[ignore = "a worker process for the sentinel tests, started by them"]
fn sentinel_worker() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let urls: Vec<String> = env("CORRAL_SENTINEL_URLS")
            .split(',')
            .map(str::to_owned)
            .collect();
        let store = RedisStore::connect_sentinel(&env("CORRAL_SENTINEL_MASTER"), &urls, config())
            .await
            .expect("connect_sentinel");
        let state = Arc::new(WorkerState {
            held: cache(&store, "held", false),
            tier: cache(&store, "tier", true),
            released: Semaphore::new(0),
            fills: AtomicU64::new(0),
            answers: Mutex::new(None),
        });
        println!("@ready");
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let words: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
            let state = Arc::clone(&state);
            tokio::spawn(async move { state.run(&words).await });
        }
    });
}

struct WorkerState {
    held: Cache<String>,
    tier: Cache<String>,
    /// Fills wait for a permit; `release` adds plenty.
    released: Semaphore,
    fills: AtomicU64,
    /// The stampede's callers, tallied once every one is answered: told
    /// on `answers` (not when ready, so the line never races another
    /// command's answer).
    answers: Mutex<Option<tokio::task::JoinHandle<Answers>>>,
}

impl WorkerState {
    async fn run(self: Arc<Self>, words: &[String]) {
        let arg = |i: usize| words[i].clone();
        match words.first().map(String::as_str) {
            // stampede <key>: CALLERS callers of `held` on one key; each
            // fill counts itself and waits for `release`.
            Some("stampede") => {
                let key = arg(1);
                let callers: Vec<_> = (0..CALLERS)
                    .map(|_| {
                        let (state, key) = (Arc::clone(&self), key.clone());
                        tokio::spawn(async move {
                            let started = Instant::now();
                            let fill_state = Arc::clone(&state);
                            let answer = state
                                .held
                                .get_or_fill(&key, move || async move {
                                    fill_state.fills.fetch_add(1, SeqCst);
                                    let _permit = fill_state.released.acquire().await;
                                    Ok::<_, String>(format!("from-{}", std::process::id()))
                                })
                                .await;
                            (answer, started.elapsed())
                        })
                    })
                    .collect();
                let tally = async move {
                    let mut answers = Answers::default();
                    for caller in callers {
                        let (answer, took) = caller.await.expect("caller task");
                        match answer {
                            Ok(value) => *answers.values.entry(value).or_default() += 1,
                            Err(e) => answers.errors.push(e.to_string()),
                        }
                        answers.slowest_ms = answers.slowest_ms.max(took.as_millis());
                    }
                    answers
                };
                *self.answers.lock().expect("answers") = Some(tokio::spawn(tally));
            }
            // answers: the stampede's tally, once every caller is answered.
            Some("answers") => {
                let tally = self.answers.lock().expect("answers").take();
                let answers = tally.expect("a stampede").await.expect("tally");
                println!(
                    "@answers {}",
                    serde_json::to_string(&answers).expect("json")
                );
            }
            Some("release") => {
                self.released.add_permits(Semaphore::MAX_PERMITS / 2);
                println!("@released");
            }
            // set <held|tier> <key> <value>: retried until it works; answers
            // the milliseconds that took.
            Some("set") => {
                let cache = if arg(1) == "tier" {
                    &self.tier
                } else {
                    &self.held
                };
                let took = set_until_ok(cache, &arg(2), &arg(3)).await;
                println!("@set {}", took.as_millis());
            }
            // get <key>: a read of `tier` (kept in its L1).
            Some("get") => {
                let value = self
                    .tier
                    .get_or_fill(&arg(1), || async { Ok::<_, String>("filled".to_owned()) })
                    .await
                    .expect("tier read");
                println!("@got {value}");
            }
            // peek <held|tier> <key>
            Some("peek") => {
                let cache = if arg(1) == "tier" {
                    &self.tier
                } else {
                    &self.held
                };
                let value = cache.peek(&arg(2)).await.expect("peek");
                println!("@peeked {}", value.unwrap_or_else(|| "-".to_owned()));
            }
            Some("invalidate") => {
                let result = self.tier.invalidate(&arg(1)).await;
                println!("@invalidated {}", result.is_ok());
            }
            Some("stats") => {
                let (held, tier) = (self.held.stats(), self.tier.stats());
                let stats = WorkerStats {
                    fills: self.fills.load(SeqCst),
                    lease_waits: held.lease_waits,
                    commits: held.commits,
                    commits_refused: held.commits_refused,
                    store_errors: held.store_errors,
                    fail_open_fills: held.fail_open_fills,
                    backplane_messages: tier.backplane_messages,
                    backplane_resets: tier.backplane_resets,
                };
                println!("@stats {}", serde_json::to_string(&stats).expect("json"));
            }
            other => panic!("unknown worker command {other:?}"),
        }
    }
}

// ---------------------------------------------------------------- test side

async fn start_worker(group: &RedisSentinel) -> Worker {
    let env = [
        ("CORRAL_SENTINEL_URLS", group.sentinel_urls().join(",")),
        ("CORRAL_SENTINEL_MASTER", group.master_name().to_owned()),
    ];
    Worker::start(
        &crate::support::test_name(module_path!(), "sentinel_worker"),
        &env,
    )
    .await
}

async fn stats(worker: &mut Worker) -> WorkerStats {
    worker.send("stats").await;
    serde_json::from_str(&worker.expect("@stats").await).expect("stats json")
}

/// Asks both workers for their stats until `done` holds, for at most
/// [`RECOVERY`].
async fn until_stats(
    workers: &mut [Worker; 2],
    what: &str,
    done: impl Fn(&[WorkerStats; 2]) -> bool,
) -> [WorkerStats; 2] {
    let deadline = Instant::now() + RECOVERY;
    loop {
        let [a, b] = workers;
        let now = [stats(a).await, stats(b).await];
        if done(&now) {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "waited {RECOVERY:?} for {what}: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Invalidates a probe key in `from` until `to` hears a backplane message.
async fn until_heard(workers: &mut [Worker; 2], from: usize) {
    let to = 1 - from;
    let heard = stats(&mut workers[to]).await.backplane_messages;
    let deadline = Instant::now() + RECOVERY;
    loop {
        workers[from].send("invalidate probe-subscribed").await;
        workers[from].expect("@invalidated").await;
        if stats(&mut workers[to]).await.backplane_messages > heard {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "worker {to} never heard worker {from}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_and_writes_through_the_sentinels() {
    let group = RedisSentinel::start();
    let store = store(&group).await;
    assert!(
        format!("{store:?}").contains("sentinel[corral-master@redis://127.0.0.1:"),
        "{store:?}"
    );
    let cache = cache(&store, "plain", false);
    let value = cache
        .get_or_fill("k", || async { Ok::<_, String>("v".to_owned()) })
        .await
        .expect("fill");
    assert_eq!(value, "v");
    // Written on the master the sentinels name.
    let keys = group.master().cli(&["KEYS", "corral:v:plain*:k"]);
    assert!(keys.contains("}:k"), "value key on the master: {keys:?}");
    // A second store through the same sentinels reads it.
    let other = cache_on_new_store(&group, "plain").await;
    assert_eq!(other.peek("k").await.expect("peek"), Some("v".to_owned()));
}

async fn cache_on_new_store(group: &RedisSentinel, name: &str) -> Cache<String> {
    cache(&store(group).await, name, false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_master_name_is_a_clear_error() {
    let group = RedisSentinel::start();
    let urls = group.sentinel_urls();
    let error = RedisStore::connect_sentinel("no-such-master", &urls, config())
        .await
        .expect_err("unknown master");
    let text = error.to_string();
    eprintln!("unknown master: {text}");
    assert_eq!(error.kind(), StoreErrorKind::Protocol, "{text}");
    assert!(text.contains("no-such-master"), "{text}");
    for url in &urls {
        assert!(
            text.contains(url.trim_end_matches('/')),
            "names {url}: {text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_sentinel_answering_is_unavailable_and_shows_no_password() {
    let closed = |port: u16| format!("redis://:sentinel-secret@127.0.0.1:{port}/");
    // Ports nothing listens on: bound, then released.
    let ports: Vec<u16> = (0..2)
        .map(|_| {
            std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("probe port")
                .port()
        })
        .collect();
    let urls: Vec<String> = ports.iter().map(|&p| closed(p)).collect();
    let config = config().master_auth(Some("app"), "master-secret");
    let error = RedisStore::connect_sentinel("corral-master", &urls, config.clone())
        .await
        .expect_err("no sentinel");
    let text = error.to_string();
    eprintln!("no sentinel: {text}");
    assert_eq!(error.kind(), StoreErrorKind::Unavailable, "{text}");
    assert!(text.contains("corral-master"), "{text}");
    assert!(
        text.contains(&ports[0].to_string()) && text.contains(&ports[1].to_string()),
        "{text}"
    );
    assert!(!text.contains("secret"), "{text}");
    assert!(!format!("{config:?}").contains("secret"), "{config:?}");
    // The lazy store builds, and its calls fail the same way.
    let store = RedisStore::connect_sentinel_lazy("corral-master", &urls, config).expect("lazy");
    assert!(!format!("{store:?}").contains("secret"), "{store:?}");
    let lazy = Cache::<String>::builder("lazy")
        .store(store)
        .circuit_breaker(1000, Duration::from_millis(10))
        .build()
        .expect("config");
    let error = lazy.set("k", "v".to_owned()).await.expect_err("no master");
    let said = format!("{:#}", anyhow::Error::from(error));
    assert!(!said.contains("secret"), "{said}");
}

/// The master is reached with the configured user, password and
/// database; a refused password is a `Denied` error that does not show it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_master_is_reached_with_the_configured_user_password_and_db() {
    let group = RedisSentinel::start();
    for node in group.nodes() {
        node.cli(&[
            "ACL",
            "SETUSER",
            "app",
            "on",
            ">right-pw",
            "~*",
            "&*",
            "+@all",
        ]);
    }
    let (name, urls) = (group.master_name(), group.sentinel_urls());
    let wrong = config().master_auth(Some("app"), "wrong-pw");
    let error = RedisStore::connect_sentinel(name, &urls, wrong)
        .await
        .expect_err("wrong password");
    let text = error.to_string();
    assert_eq!(error.kind(), StoreErrorKind::Denied, "{text}");
    assert!(!text.contains("wrong-pw"), "{text}");

    let right = config().master_auth(Some("app"), "right-pw").master_db(3);
    let store = RedisStore::connect_sentinel(name, &urls, right)
        .await
        .unwrap_or_else(|e| panic!("connect_sentinel: {e}\n{}", group.logs()));
    let cache = cache(&store, "authed", false);
    cache.set("k", "v".to_owned()).await.expect("set");
    let in_db3 = group
        .master()
        .cli(&["-n", "3", "KEYS", "corral:v:authed*:k"]);
    assert!(in_db3.contains("}:k"), "value key in db 3: {in_db3:?}");
    let in_db0 = group.master().cli(&["KEYS", "corral:*:authed*"]);
    assert!(in_db0.is_empty(), "nothing in db 0: {in_db0:?}");
    let clients = group.master().cli(&["CLIENT", "LIST"]);
    assert!(clients.contains("user=app"), "{clients}");
}

/// A master demoted to a replica while the store's connections to it stay
/// up answers writes with `READONLY`: the store must ask the sentinels
/// again and move to the new master, its subscriber too (a demoted master
/// relays the new master's messages only while its replication link is
/// up).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demoted_master_answering_readonly_is_left_for_the_new_one() {
    let mut group = RedisSentinel::start();
    let store = store(&group).await;
    let cache = cache(&store, "demoted", false);
    let listening = self::cache(&store, "demoted-l1", true);
    cache.set("k", "before".to_owned()).await.expect("set");
    listening.set("k", "old".to_owned()).await.expect("set");
    assert_eq!(listening.get_local("k"), Some("old".to_owned()));
    let old = group.master().port();
    tokio::task::block_in_place(|| group.swap_roles_by_hand());
    let took = set_until_ok(&cache, "k", "after").await;
    let demoted = group
        .nodes()
        .iter()
        .find(|node| node.port() == old)
        .expect("old master");
    let errors = demoted.cli(&["INFO", "errorstats"]);
    assert!(
        errors.contains("errorstat_READONLY"),
        "the write reached the demoted master first: {errors}"
    );
    let held = group.master().cli(&["KEYS", "corral:v:demoted*:k"]);
    assert!(held.contains("}:k"), "value on the new master: {held:?}");
    assert_eq!(
        cache.peek("k").await.expect("peek"),
        Some("after".to_owned())
    );
    eprintln!("demoted master: the write was on the new master after {took:?}");
    // The new master tracked nothing read before: the L1 was dropped.
    let stats = listening.stats();
    assert!(stats.l1_flushes_failover >= 1, "{stats:?}");
    assert_eq!(
        listening.get_local("k"),
        None,
        "no copy outlives the failover"
    );
    // Messages published at the new master reach the store's L1 cache.
    let there = self::cache(&self::store(&group).await, "demoted-l1", true);
    support::until_heard(&there, &listening).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn master_killed_mid_fill_with_two_processes() {
    let mut group = RedisSentinel::start();
    let mut workers = [start_worker(&group).await, start_worker(&group).await];
    // Each tier hears the other: both subscriptions are up.
    until_heard(&mut workers, 0).await;
    until_heard(&mut workers, 1).await;

    for worker in &mut workers {
        worker.send("stampede hot").await;
    }
    let started = until_stats(&mut workers, "one fill and a lease wait elsewhere", |s| {
        s[0].fills + s[1].fills == 1 && s[usize::from(s[0].fills == 1)].lease_waits >= 1
    })
    .await;
    let leader = usize::from(started[1].fills == 1);
    let other = 1 - leader;

    let killed = Instant::now();
    group.kill_master();
    // The other process writes a newer value as soon as the store takes it:
    // the first write through corral after the master's death.
    workers[other].send("set held hot newer").await;
    tokio::task::block_in_place(|| group.wait_failover());
    let failover = killed.elapsed();
    // From the command (sent right after the kill) to the write's success,
    // as the worker measured it.
    let first_write: u64 = workers[other].expect("@set").await.parse().expect("ms");
    let first_write = Duration::from_millis(first_write);
    // The leader's store is on the new master too before its fill ends, so
    // its commit reaches the new master (and is refused there).
    workers[leader].send("set held warm x").await;
    workers[leader].expect("@set").await;
    for worker in &mut workers {
        worker.send("release").await;
        worker.expect("@released").await;
    }

    let mut values: BTreeMap<String, usize> = BTreeMap::new();
    let mut slowest = 0;
    for worker in &mut workers {
        let answers: Answers = serde_json::from_str(&{
            worker.send("answers").await;
            worker.expect("@answers").await
        })
        .expect("answers json");
        assert!(
            answers.errors.is_empty(),
            "callers got errors: {:?}",
            answers.errors
        );
        assert_eq!(
            answers.values.values().sum::<usize>(),
            CALLERS,
            "{answers:?}"
        );
        for (value, n) in answers.values {
            *values.entry(value).or_default() += n;
        }
        slowest = slowest.max(answers.slowest_ms);
    }
    let after = [stats(&mut workers[0]).await, stats(&mut workers[1]).await];
    let fills = after[0].fills + after[1].fills;
    assert!(fills <= 2, "at most two fills: {after:?}");
    assert_eq!(
        after[leader].commits, 0,
        "the old leader's commit was not stored: {after:?}"
    );
    assert!(
        after[leader].commits_refused >= 1,
        "the old leader's late commit was fenced: {after:?}"
    );
    for worker in &mut workers {
        worker.send("peek held hot").await;
        assert_eq!(worker.expect("@peeked").await, "newer");
    }

    // The backplane is back: both subscribers lost the old master; once
    // each re-subscribed (its L1 dropped), a write in one process evicts
    // the other's L1 copy.
    until_stats(&mut workers, "both subscribers are back", |s| {
        s[0].backplane_resets >= 1 && s[1].backplane_resets >= 1
    })
    .await;
    let resubscribed = killed.elapsed();
    workers[1].send("set tier probe one").await;
    workers[1].expect("@set").await;
    workers[0].send("get probe").await;
    assert_eq!(workers[0].expect("@got").await, "one");
    let heard = stats(&mut workers[0]).await.backplane_messages;
    workers[1].send("set tier probe two").await;
    workers[1].expect("@set").await;
    until_stats(&mut workers, "the eviction arrived", |s| {
        s[0].backplane_messages > heard
    })
    .await;
    workers[0].send("peek tier probe").await;
    assert_eq!(workers[0].expect("@peeked").await, "two");

    assert!(first_write < RECOVERY, "first write after {first_write:?}");
    eprintln!(
        "sentinel: master killed mid-fill, {} callers in 2 processes answered {values:?} \
         (slowest {slowest} ms); fills {fills} (leader: process {leader}); \
         leader commits {} refused {}; other process lease waits {} fail-open fills {} store errors {}; \
         sentinels agreed on the new master {failover:?} after the kill, \
         first write through corral {first_write:?} after the kill, \
         subscribers back by {resubscribed:?}",
        2 * CALLERS,
        after[leader].commits,
        after[leader].commits_refused,
        after[other].lease_waits,
        after[other].fail_open_fills,
        after[other].store_errors,
    );
}

/// `CacheConfig` with the Sentinel settings builds a cache on the group's
/// master (lazily: the build does not wait for it).
#[cfg(feature = "config")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_config_with_sentinel_settings_uses_the_master() {
    let group = RedisSentinel::start();
    let urls = group.sentinel_urls().join(",");
    let config = corral::CacheConfig::from_vars(
        "CORRAL_",
        [
            ("CORRAL_REDIS_SENTINEL_MASTER", group.master_name()),
            ("CORRAL_REDIS_SENTINEL_URLS", urls.as_str()),
            ("CORRAL_STORE_TIMEOUT", "300ms"),
            ("CORRAL_BREAKER_COOL_DOWN", "100ms"),
        ],
    )
    .expect("valid settings");
    let cache = config.build::<String>("configured").await.expect("build");
    set_until_ok(&cache, "k", "v").await;
    let keys = group.master().cli(&["KEYS", "corral:v:configured*:k"]);
    assert!(keys.contains("}:k"), "value key on the master: {keys:?}");
}

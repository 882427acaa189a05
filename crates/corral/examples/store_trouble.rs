//! A mass cold start across processes while the shared store is in
//! trouble: how many times the source is called, how many at once, and
//! whether every caller is answered.
//!
//! ```sh
//! cargo run --release --example store_trouble -- [SCENE ...]
//! ```
//!
//! SCENE is `healthy`, `slow` (every reply held 1.5 s by a proxy for 3 s),
//! `freeze` (`SIGSTOP` for 3 s, then `SIGCONT`), `kill` (killed, back
//! after 2 s, empty) or `all` (the default). Each scene starts its own
//! `redis-server` behind a fault proxy and `PROCESSES` worker processes (4)
//! of this example, each a cache built with the default builder on the
//! proxy's URL; `CALLERS` callers per process (2,500) ask together for
//! `KEYS` cold keys (2,000; caller `i` asks for key `i % KEYS`), each key's
//! fill taking `FILL_MS` (20 ms). The trouble starts `AT_MS` (50 ms) after
//! the callers are released. The source is counted in each process around
//! the fill: its calls and the most running at once.
//!
//! After the burst, each process reports its breaker (closed or not), its
//! flights in progress and its counters, and the server its clients, so
//! that recovery shows: nothing left queued, connections back to their
//! usual number.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use corral::{Cache, RedisConfig, RedisStore};
use corral_testkit::{Callers, FaultProxy, RedisServer, Tally, Worker};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncBufReadExt as _;

/// A scene's trouble, started `AT_MS` after the callers are released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scene {
    Healthy,
    Slow,
    Freeze,
    Kill,
}

impl Scene {
    fn parse(name: &str) -> Option<Vec<Scene>> {
        Some(match name {
            "healthy" => vec![Scene::Healthy],
            "slow" => vec![Scene::Slow],
            "freeze" => vec![Scene::Freeze],
            "kill" => vec![Scene::Kill],
            "all" => vec![Scene::Healthy, Scene::Slow, Scene::Freeze, Scene::Kill],
            _ => return None,
        })
    }
}

/// What one worker measured in the burst.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Burst {
    tally: Tally,
    source_calls: u64,
    peak_at_source: u64,
}

/// What one worker reports once the burst is over.
#[derive(Debug, Default, Serialize, Deserialize)]
struct After {
    breaker_opened: u64,
    store_calls_skipped: u64,
    fail_open_fills: u64,
    store_errors: u64,
    lease_waits: u64,
    store_waits: u64,
    leases_acquired: u64,
    commits: u64,
    commits_refused: u64,
    overloads: u64,
    flights_in_progress: usize,
    store_answers: bool,
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--worker") {
        return worker(&args[1]);
    }
    let mut scenes = Vec::new();
    for arg in if args.is_empty() {
        vec!["all".to_owned()]
    } else {
        args
    } {
        scenes.extend(Scene::parse(&arg).ok_or_else(|| anyhow::anyhow!("unknown scene {arg}"))?);
    }
    let runtime = tokio::runtime::Runtime::new()?;
    println!(
        "| scene | source calls | most at once in one process (sum) | answered | failed | p99 ms | max ms | breaker opened | fail-open fills | left in flight | breaker closed after |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for scene in scenes {
        runtime.block_on(run_scene(scene))?;
    }
    Ok(())
}

async fn run_scene(scene: Scene) -> anyhow::Result<()> {
    let processes = env_u64("PROCESSES", 4);
    let keys = env_u64("KEYS", 2_000);
    let callers = env_u64("CALLERS", 2_500);
    let fill_ms = env_u64("FILL_MS", 20);
    let at = Duration::from_millis(env_u64("AT_MS", 50));
    let mut server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let exe = std::env::current_exe()?;
    let mut workers = Vec::new();
    for _ in 0..processes {
        let mut command = tokio::process::Command::new(&exe);
        command.args(["--worker", &proxy.url()]);
        command.env("FILL_MS", fill_ms.to_string());
        workers.push(Worker::spawn(command).await?);
    }
    for worker in &mut workers {
        worker.send(&format!("arm {keys} {callers}")).await;
        worker.expect("@armed").await;
    }
    for worker in &mut workers {
        worker.send("go").await;
    }
    tokio::time::sleep(at).await;
    match scene {
        Scene::Healthy => {}
        Scene::Slow => {
            proxy.delay_replies(Duration::from_millis(1_500));
            tokio::time::sleep(Duration::from_secs(3)).await;
            proxy.delay_replies(Duration::ZERO);
        }
        Scene::Freeze => {
            server.freeze();
            tokio::time::sleep(Duration::from_secs(3)).await;
            server.thaw();
        }
        Scene::Kill => {
            server.kill();
            tokio::time::sleep(Duration::from_secs(2)).await;
            server.restart();
        }
    }
    let mut bursts = Vec::new();
    for worker in &mut workers {
        let line = worker.expect("@burst").await;
        bursts.push(serde_json::from_str::<Burst>(&line)?);
    }
    let recovered = Instant::now();
    let mut afters = Vec::new();
    for worker in &mut workers {
        worker.send("after").await;
        afters.push(serde_json::from_str::<After>(
            &worker.expect("@after").await,
        )?);
    }
    let took = recovered.elapsed();
    let mut tally = Tally::default();
    let (mut calls, mut peak, mut peaks) = (0, 0, 0);
    for burst in bursts {
        calls += burst.source_calls;
        peak = peak.max(burst.peak_at_source);
        peaks += burst.peak_at_source;
        tally.absorb(burst.tally);
    }
    let sum = |f: fn(&After) -> u64| afters.iter().map(f).sum::<u64>();
    let in_flight: usize = afters.iter().map(|a| a.flights_in_progress).sum();
    let answering = afters.iter().all(|a| a.store_answers);
    println!(
        "| {scene:?} | {calls} | {peak} ({peaks}) | {} | {} | {:.0} | {:.0} | {} | {} | {in_flight} | {} |",
        tally.successes,
        tally.failures,
        tally.latency_ms(0.99),
        tally.latency_ms(1.0),
        sum(|a| a.breaker_opened),
        sum(|a| a.fail_open_fills),
        if answering { format!("yes ({} ms)", took.as_millis()) } else { "no".to_owned() },
    );
    if let Some(why) = &tally.first_failure {
        println!("  first failure: {why}");
    }
    println!(
        "  leases {} · commits {} (refused {}) · lease waits {} · store waits {} · store errors {} · calls skipped {} · overloads {}",
        sum(|a| a.leases_acquired),
        sum(|a| a.commits),
        sum(|a| a.commits_refused),
        sum(|a| a.lease_waits),
        sum(|a| a.store_waits),
        sum(|a| a.store_errors),
        sum(|a| a.store_calls_skipped),
        sum(|a| a.overloads),
    );
    println!(
        "  clients on the server after the burst: {}",
        clients(&server)
    );
    Ok(())
}

/// `CLIENT LIST`, one count per client name.
fn clients(server: &RedisServer) -> String {
    let list = server.cli(&["CLIENT", "LIST"]);
    let mut names = std::collections::BTreeMap::<String, u32>::new();
    for line in list.lines() {
        let name = line
            .split(' ')
            .find_map(|field| field.strip_prefix("name="))
            .unwrap_or("");
        let name = if name.is_empty() { "(unnamed)" } else { name };
        *names.entry(name.to_owned()).or_default() += 1;
    }
    names
        .iter()
        .map(|(name, n)| format!("{name}: {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The source: counts its calls and the most running at once.
#[derive(Default)]
struct Source {
    calls: AtomicU64,
    running: AtomicU64,
    peak: AtomicU64,
}

impl Source {
    async fn load(&self, key: String, fill: Duration) -> String {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(fill).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        format!("value of {key}")
    }
}

fn worker(url: &str) -> anyhow::Result<()> {
    let fill = Duration::from_millis(env_u64("FILL_MS", 20));
    tokio::runtime::Runtime::new()?.block_on(async {
        let store = RedisStore::connect(url, RedisConfig::default()).await?;
        let cache = Cache::<String>::builder("trouble").store(store).build()?;
        let source = Arc::new(Source::default());
        println!("@ready");
        let mut orders = tokio::io::BufReader::new(tokio::io::stdin()).lines();
        let mut armed = None;
        while let Some(order) = orders.next_line().await? {
            let words: Vec<&str> = order.split(' ').collect();
            match words.as_slice() {
                ["arm", keys, callers] => {
                    let (keys, callers): (u64, u64) = (keys.parse()?, callers.parse()?);
                    let calls = (0..callers).map(|i| {
                        let (cache, source) = (cache.clone(), Arc::clone(&source));
                        move || async move {
                            let key = format!("k{}", i % keys);
                            let fill_key = key.clone();
                            let value = cache
                                .get_or_fill(&key, move || async move {
                                    Ok::<_, std::io::Error>(source.load(fill_key, fill).await)
                                })
                                .await
                                .map_err(|e| e.to_string())?;
                            if value == format!("value of {key}") {
                                Ok(())
                            } else {
                                Err(format!("{key}: wrong value {value:?}"))
                            }
                        }
                    });
                    armed = Some(Callers::arm(calls));
                    println!("@armed");
                }
                ["go"] => {
                    let callers = armed
                        .take()
                        .ok_or_else(|| anyhow::anyhow!("go before arm"))?;
                    let tally = callers.release().await?;
                    let burst = Burst {
                        tally,
                        source_calls: source.calls.load(Ordering::SeqCst),
                        peak_at_source: source.peak.load(Ordering::SeqCst),
                    };
                    println!("@burst {}", serde_json::to_string(&burst)?);
                }
                ["after"] => {
                    // Recovered once the store answers again.
                    let deadline = Instant::now() + Duration::from_secs(30);
                    let mut answers = cache.health().await.is_ok();
                    while !answers && Instant::now() < deadline {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        answers = cache.health().await.is_ok();
                    }
                    let stats = cache.stats();
                    let after = After {
                        breaker_opened: stats.breaker_opened,
                        store_calls_skipped: stats.store_calls_skipped,
                        fail_open_fills: stats.fail_open_fills,
                        store_errors: stats.store_errors,
                        lease_waits: stats.lease_waits,
                        store_waits: stats.store_waits,
                        leases_acquired: stats.leases_acquired,
                        commits: stats.commits,
                        commits_refused: stats.commits_refused,
                        overloads: stats.overloads,
                        flights_in_progress: cache.health().await.flights_in_progress,
                        store_answers: answers,
                    };
                    println!("@after {}", serde_json::to_string(&after)?);
                }
                _ => anyhow::bail!("unknown order {order:?}"),
            }
        }
        Ok(())
    })
}

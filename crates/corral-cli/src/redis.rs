//! `corral herd --redis URL --processes N`: the stampede across OS
//! processes that share one Redis, corral against a naive cache-aside on
//! Redis.
//!
//! For each side, this process starts N `corral herd-worker` processes of
//! the same binary (`corral-testkit`'s [`Worker`]). Caller `i` of a round
//! asks for key `i % keys` and runs in worker `(i / keys) % N`, so every
//! worker asks for every key. A worker says `@ready` once connected; on
//! `arm <round>` it spawns its share of the round's callers (`@armed`); on
//! `go` it releases them and prints `@report <json>` (their tally).
//! Their fills call one source server in this process, which counts them
//! where they land: a call is a connection that sends the key and a
//! newline, and gets the value and a newline after the fill time. An
//! uncounted warm-up round first opens connections and subscriptions; the
//! commands each side cost are read from `INFO commandstats`.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use corral_testkit::{micros, Tally, Worker};
use redis::aio::MultiplexedConnection;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{TcpListener, TcpStream};

use crate::plot::group;
use crate::report::{Comparison, SideReport};
use crate::scenario::{arm, fill_budget, round_keys, Load, Side};
use crate::source::Source;
use crate::HerdArgs;

/// Runs the scenario through corral, then through the naive cache-aside, each
/// side in its own worker processes; fails if Redis cannot be reached, or a
/// worker cannot start, fails or stalls.
pub(crate) async fn run(redis: &str, args: &HerdArgs) -> anyhow::Result<Comparison> {
    let (processes, keys, callers) = (args.processes, args.keys, args.callers);
    anyhow::ensure!(
        processes.saturating_mul(keys) <= callers,
        "--processes {processes} × --keys {keys} is more than --callers {callers}: \
         not every process could ask for every key",
    );
    let listener = TcpListener::bind("127.0.0.1:0").await;
    let listener = listener.context("binding the source server")?;
    let addr = listener.local_addr()?.to_string();
    let source = Arc::new(Source::new(args, None)?);
    tokio::spawn(serve_source(listener, Arc::clone(&source)));
    let client = redis::Client::open(redis).context("parsing the Redis URL")?;
    let conn = client.get_multiplexed_async_connection().await;
    let mut conn = conn.context("connecting to Redis")?;
    let run = format!("{:x}-{:x}", std::process::id(), fastrand::u64(..));
    let mut config = WorkerConfig {
        args: args.clone(),
        corral: true,
        index: 0,
        server: addr,
    };
    let corral = play_side(&mut config, &run, &mut conn, &source).await?;
    config.corral = false;
    let naive = play_side(&mut config, &run, &mut conn, &source).await?;
    let (fill_ms, budget, fleet) = (args.fill_ms, args.budget.unwrap_or(0), args.fleet);
    let (corral_budget, limits) = match (budget, fleet) {
        (0, _) => ("none".to_owned(), Vec::new()),
        (n, true) => {
            let limit = (format!("corral's fleet budget of {n}"), n);
            (format!("one fleet budget of {n}"), vec![limit])
        }
        (n, false) => {
            let label = format!("corral's budget, {n} in each of {processes} processes");
            (format!("{n} per process"), vec![(label, n * processes)])
        }
    };
    let (callers, keys, rounds) = (group(callers), group(keys), group(args.rounds));
    let title = format!(
        "corral herd: {callers} callers on {keys} cold keys, {rounds} rounds, in {processes} \
         processes per side sharing one Redis\nsource: a server holding each call {fill_ms} ms; \
         corral's fill budget: {corral_budget}",
    );
    let setting = serde_json::json!({
        "mode": "redis", "processes": processes, "fill_ms": fill_ms, "budget": budget,
        "fleet": fleet,
    });
    let setting = (setting, title, limits);
    Ok(Comparison::new(args, setting, corral, naive))
}

/// One side's run: starts its workers, plays an uncounted warm-up round and
/// the measured ones, and reads the commands they cost. With `--kill-one`,
/// corral's worker 0 is killed (SIGKILL) in the first measured round once
/// one of its fills reached the source: a process holding leases and fleet
/// permits mid-fill. Its callers are not counted, in any round.
async fn play_side(
    config: &mut WorkerConfig,
    run: &str,
    redis: &mut MultiplexedConnection,
    source: &Source,
) -> anyhow::Result<SideReport> {
    let exe = std::env::current_exe().context("finding the corral binary")?;
    let mut workers = Vec::new();
    for index in 0..config.args.processes {
        config.index = index;
        let mut command = tokio::process::Command::new(&exe);
        command.args(["herd-worker", &serde_json::to_string(config)?]);
        let worker = Worker::spawn(command).await;
        let context = || format!("starting worker {index} (its error is above)");
        workers.push(worker.with_context(context)?);
    }
    let (args, side) = (&config.args, if config.corral { "corral" } else { "naive" });
    // Its keys: `herd:{run}:{side}:{round}:k{key}`.
    let keys = format!("{run}:{side}");
    let within = Duration::from_millis(args.fill_ms) * 2 + Duration::from_secs(120);
    let kill = args.kill_one && config.corral;
    let warm_up = format!("{keys}:warm-up");
    play(&mut workers, &warm_up, within, source, false).await?;
    source.take_counts();
    source.timeline.take();
    let before = commands(redis).await?;
    let mut tally = Tally::default();
    for round in 0..args.rounds {
        let label = format!("{keys}:r{round}");
        tally.absorb(play(&mut workers, &label, within, source, kill && round == 0).await?);
    }
    let mut calls = args.callers;
    if kill {
        let first = (0..args.callers).filter(|c| (c / args.keys).is_multiple_of(args.processes));
        calls -= first.count() as u64;
    }
    // Counted by the source itself, a killed worker's calls included.
    let [fills, _, _] = source.take_counts();
    let timeline = source.timeline.take();
    let mut report = SideReport::new(side, calls * args.rounds, fills, tally, timeline);
    report.redis_commands = Some(commands(redis).await? - before);
    Ok(report)
}

/// Arms every worker on the round `label`, releases them together, kills
/// worker 0 once it is filling if `kill`, and puts their reports together:
/// the round's tally (its wall from the release to the last report, as this
/// process saw it), and their callers in the source's timeline.
async fn play(
    workers: &mut Vec<Worker>,
    label: &str,
    within: Duration,
    source: &Source,
    kill: bool,
) -> anyhow::Result<Tally> {
    for worker in workers.iter_mut() {
        let order = if kill { "arm-announcing" } else { "arm" };
        worker.tell(&format!("{order} {label}")).await?;
        let armed = worker.answer("@armed", Duration::from_secs(30)).await;
        armed.context("arming a worker")?;
    }
    let (started, at) = (Instant::now(), source.timeline.release());
    for worker in workers.iter_mut() {
        worker.tell("go").await.context("releasing a worker")?;
    }
    if kill && !workers.is_empty() {
        let filling = workers[0].answer("@filling", within).await;
        filling.context("waiting for worker 0 to fill")?;
        workers.remove(0).kill().await;
    }
    let mut tally = Tally::default();
    for worker in workers.iter_mut() {
        let line = worker.answer("@report", within).await;
        let line = line.context("a worker's round")?;
        let mut round: Tally = serde_json::from_str(&line)?;
        source.timeline.answers(at, &round);
        round.wall_us = 0;
        tally.absorb(round);
    }
    tally.wall_us = micros(started.elapsed());
    Ok(tally)
}

/// The commands the Redis server ran so far, but the `INFO` that asks.
async fn commands(redis: &mut MultiplexedConnection) -> anyhow::Result<u64> {
    let mut info = redis::cmd("INFO");
    let info: String = info.arg("commandstats").query_async(redis).await?;
    let stats = corral_testkit::parse_command_stats(&info).into_iter();
    let calls = stats.filter(|(name, _)| name != "info").map(|(_, n)| n);
    Ok(calls.sum())
}

/// Serves the source's calls until the runtime shuts down (the run's end).
async fn serve_source(listener: TcpListener, source: Arc<Source>) {
    while let Ok((conn, _)) = listener.accept().await {
        let source = Arc::clone(&source);
        tokio::spawn(async move {
            let (read, mut write) = conn.into_split();
            let mut key = String::new();
            if BufReader::new(read).read_line(&mut key).await.is_ok() {
                if let Ok(value) = source.load(key.trim_end()).await {
                    let _ = write.write_all(format!("{value}\n").as_bytes()).await;
                }
            }
        });
    }
}

/// What a worker is told, as the JSON of its one argument.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct WorkerConfig {
    /// The run's flags (its Redis, scenario and budget).
    args: HerdArgs,
    /// corral's `get_or_fill` on a `RedisStore` with an L1, or else a naive
    /// cache-aside on Redis.
    corral: bool,
    /// This worker's index, from 0: it runs caller `i` when
    /// `(i / keys) % processes == index`.
    index: u64,
    /// The source server's address (`host:port`).
    server: String,
}

/// A fill's call of the source server, at this address; says `@filling`
/// once a call reached it while `announce` (set in a round in which it is
/// to be killed).
struct RemoteSource {
    addr: String,
    announce: AtomicBool,
}

impl Load for RemoteSource {
    async fn load(&self, key: &str) -> anyhow::Result<String> {
        let conn = TcpStream::connect(&self.addr).await;
        let (read, mut write) = conn.context("calling the source")?.into_split();
        write.write_all(format!("{key}\n").as_bytes()).await?;
        if self.announce.swap(false, Relaxed) {
            println!("@filling");
        }
        let mut value = String::new();
        BufReader::new(read).read_line(&mut value).await?;
        anyhow::ensure!(value.ends_with('\n'), "the source hung up");
        value.pop();
        Ok(value)
    }
}

/// Runs the worker described by `config` (JSON) until its stdin closes; fails
/// on a bad config, Redis out of reach, an order not understood, or a caller
/// task that panicked.
pub(crate) fn run_worker(config: &str) -> anyhow::Result<()> {
    let config: WorkerConfig = serde_json::from_str(config).context("the worker's config")?;
    let args = &config.args;
    let url = args.redis.as_deref().context("no Redis URL")?;
    let (addr, announce) = (config.server.clone(), AtomicBool::new(false));
    let source = Arc::new(RemoteSource { addr, announce });
    tokio::runtime::Runtime::new()?.block_on(async {
        if !config.corral {
            let client = redis::Client::open(url).context("the Redis URL")?;
            let conn = client.get_multiplexed_async_connection().await?;
            let naive = Side::Redis(conn, Arc::clone(&source));
            return serve(&config, Arc::new(naive), &source).await;
        }
        let store = corral::RedisStore::connect(url, corral::RedisConfig::default()).await?;
        let mut builder = corral::Cache::<String>::builder("herd")
            .store(store)
            .l1(true)
            .ttl(Duration::from_secs(60))
            .fill_timeout(Duration::from_millis(args.fill_ms) + Duration::from_secs(30));
        if let Some(budget) = fill_budget(args, args.budget.unwrap_or(0))? {
            builder = builder.fill_budget(budget);
        }
        let cache = builder.build()?;
        serve(&config, Arc::new(Side::corral(cache, &source)), &source).await
    })
}

/// Takes orders on stdin until it closes.
async fn serve(
    config: &WorkerConfig,
    side: Arc<Side<RemoteSource>>,
    source: &RemoteSource,
) -> anyhow::Result<()> {
    let (args, index) = (&config.args, config.index);
    println!("@ready");
    let mut orders = BufReader::new(tokio::io::stdin()).lines();
    let mut armed = None;
    while let Some(order) = orders.next_line().await? {
        match order.split_once(' ') {
            Some((arming @ ("arm" | "arm-announcing"), round)) => {
                let keys = round_keys(round, args.keys);
                let callers = 0..args.callers;
                let mine = callers.filter(|c| (c / args.keys) % args.processes == index);
                armed = Some(arm(&side, &keys, mine));
                let announce = arming == "arm-announcing" && index == 0;
                source.announce.store(announce, Relaxed);
                println!("@armed");
            }
            None if order == "go" => {
                let round = armed.take().context("go before arm")?;
                let tally = round.release().await.context("a caller task panicked")?;
                let report = serde_json::to_string(&tally)?;
                println!("@report {report}");
            }
            _ => anyhow::bail!("unknown order {order:?}"),
        }
    }
    Ok(())
}

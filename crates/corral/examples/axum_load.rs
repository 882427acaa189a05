//! A small load generator for the `axum_service` example: the same load on
//! `/uncached/users/{id}` and on `/users/{id}` (through corral), and how
//! many SQLite queries each caused, read from the service's `/metrics`.
//!
//! ```sh
//! cargo run --release -p corral-cache --example axum_load -- [--url http://127.0.0.1:3000]
//!     [--requests 2000] [--concurrency 32] [--ids 50] [--routes uncached,cached]
//! ```
//!
//! Request `n` asks for user `n % ids + 1`; `--concurrency` connections
//! send requests back to back until `--requests` have been sent per route.
//! Only loopback or your own hosts: this sends as fast as the service
//! answers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt as _, Empty};
use hyper::body::Bytes;
use hyper::StatusCode;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type HttpClient = Client<HttpConnector, Empty<Bytes>>;

struct Args {
    url: String,
    requests: u64,
    concurrency: u64,
    ids: u64,
    routes: Vec<String>,
}

impl Args {
    fn parse() -> Result<Self, BoxError> {
        let mut args = Self {
            url: "http://127.0.0.1:3000".to_owned(),
            requests: 2_000,
            concurrency: 32,
            ids: 50,
            routes: vec!["uncached".to_owned(), "cached".to_owned()],
        };
        let mut flags = std::env::args().skip(1);
        while let Some(flag) = flags.next() {
            let value = flags
                .next()
                .ok_or_else(|| format!("{flag} needs a value"))?;
            match flag.as_str() {
                "--url" => args.url = value.trim_end_matches('/').to_owned(),
                "--requests" => args.requests = value.parse()?,
                "--concurrency" => args.concurrency = value.parse::<u64>()?.max(1),
                "--ids" => args.ids = value.parse::<u64>()?.max(1),
                "--routes" => args.routes = value.split(',').map(str::to_owned).collect(),
                _ => return Err(format!("unknown flag {flag}").into()),
            }
        }
        Ok(args)
    }
}

/// The path of user `id` on `route` (`cached` or `uncached`).
fn path_of(route: &str, id: u64) -> Result<String, BoxError> {
    match route {
        "cached" => Ok(format!("/users/{id}")),
        "uncached" => Ok(format!("/uncached/users/{id}")),
        other => Err(format!("unknown route {other:?}: cached or uncached").into()),
    }
}

/// One GET: its status and body.
async fn get(client: &HttpClient, url: &str) -> Result<(StatusCode, Bytes), BoxError> {
    let response = client.get(url.parse()?).await?;
    let status = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    Ok((status, body))
}

/// `app_sqlite_queries_total` per route label, from the service's
/// Prometheus text.
async fn sqlite_queries(client: &HttpClient, base: &str) -> Result<HashMap<String, f64>, BoxError> {
    let (status, body) = get(client, &format!("{base}/metrics")).await?;
    if status != StatusCode::OK {
        return Err(format!("/metrics answered {status}").into());
    }
    let text = String::from_utf8_lossy(&body);
    let mut counts = HashMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("app_sqlite_queries_total{route=\"") else {
            continue;
        };
        let mut parts = rest.splitn(2, "\"}");
        if let (Some(route), Some(value)) = (parts.next(), parts.next()) {
            counts.insert(route.to_owned(), value.trim().parse().unwrap_or(0.0));
        }
    }
    Ok(counts)
}

/// What one route's load came to.
struct RouteLoad {
    route: String,
    ok: u64,
    unavailable: u64,
    other: u64,
    latencies_us: Vec<u64>,
    elapsed: Duration,
    queries: f64,
}

async fn load(client: &HttpClient, args: &Args, route: &str) -> Result<RouteLoad, BoxError> {
    path_of(route, 1)?;
    let before = sqlite_queries(client, &args.url).await?;
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..args.concurrency {
        let (client, next) = (client.clone(), Arc::clone(&next));
        let (base, route, requests, ids) =
            (args.url.clone(), route.to_owned(), args.requests, args.ids);
        workers.spawn(async move {
            let (mut ok, mut unavailable, mut other, mut latencies) = (0, 0, 0, Vec::new());
            loop {
                let n = next.fetch_add(1, Relaxed);
                if n >= requests {
                    break;
                }
                let url = format!("{base}{}", path_of(&route, n % ids + 1).unwrap_or_default());
                let sent = Instant::now();
                let outcome = get(&client, &url).await;
                latencies.push(u64::try_from(sent.elapsed().as_micros()).unwrap_or(u64::MAX));
                match outcome {
                    Ok((StatusCode::OK, _)) => ok += 1,
                    Ok((StatusCode::SERVICE_UNAVAILABLE, _)) => unavailable += 1,
                    _ => other += 1,
                }
            }
            (ok, unavailable, other, latencies)
        });
    }
    let mut result = RouteLoad {
        route: route.to_owned(),
        ok: 0,
        unavailable: 0,
        other: 0,
        latencies_us: Vec::new(),
        elapsed: Duration::ZERO,
        queries: 0.0,
    };
    while let Some(worker) = workers.join_next().await {
        let (ok, unavailable, other, latencies) = worker?;
        result.ok += ok;
        result.unavailable += unavailable;
        result.other += other;
        result.latencies_us.extend(latencies);
    }
    result.elapsed = started.elapsed();
    let after = sqlite_queries(client, &args.url).await?;
    result.queries =
        after.get(route).copied().unwrap_or(0.0) - before.get(route).copied().unwrap_or(0.0);
    Ok(result)
}

/// Nearest-rank percentile, in milliseconds.
fn percentile(sorted_us: &[u64], q: f64) -> f64 {
    if sorted_us.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted_us.len() as f64).ceil() as usize;
    sorted_us[rank.clamp(1, sorted_us.len()) - 1] as f64 / 1000.0
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = Args::parse()?;
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    println!(
        "{} requests per route, {} at a time, over {} user ids, against {}\n",
        args.requests, args.concurrency, args.ids, args.url
    );
    println!(
        "{:<22} {:>8} {:>6} {:>5} {:>6} {:>8} {:>8} {:>8} {:>15}",
        "route", "requests", "ok", "503", "other", "p50 ms", "p99 ms", "req/s", "SQLite queries"
    );
    for route in &args.routes {
        let mut result = load(&client, &args, route).await?;
        result.latencies_us.sort_unstable();
        let sent = result.ok + result.unavailable + result.other;
        println!(
            "{:<22} {:>8} {:>6} {:>5} {:>6} {:>8.1} {:>8.1} {:>8.0} {:>15.0}",
            path_of(&result.route, 0)?.replace("/0", "/{id}"),
            sent,
            result.ok,
            result.unavailable,
            result.other,
            percentile(&result.latencies_us, 0.50),
            percentile(&result.latencies_us, 0.99),
            sent as f64 / result.elapsed.as_secs_f64().max(1e-9),
            result.queries,
        );
    }
    Ok(())
}

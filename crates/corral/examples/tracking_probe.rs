//! Temporary probe: RESP2 vs RESP3 GET throughput, with and without client
//! tracking, and invalidation latency by RESP3 push vs RESP2 redirect.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use corral_testkit::RedisServer;
use futures_util::StreamExt;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, ProtocolVersion, PushInfo, Value};

const TASKS: usize = 50;

async fn conn(url: &str, resp3: bool, tracking: bool) -> MultiplexedConnection {
    let info = redis::IntoConnectionInfo::into_connection_info(url).unwrap();
    let redis_settings = info.redis_settings().clone().set_protocol(if resp3 {
        ProtocolVersion::RESP3
    } else {
        ProtocolVersion::RESP2
    });
    let info = info.set_redis_settings(redis_settings);
    let client = Client::open(info).unwrap();
    let mut config = AsyncConnectionConfig::new();
    if resp3 {
        let counted = Arc::new(AtomicUsize::new(0));
        config = config.set_push_sender(move |_push: PushInfo| {
            counted.fetch_add(1, Ordering::Relaxed);
            Ok::<(), ()>(())
        });
    }
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap();
    if tracking {
        let _: Value = redis::cmd("CLIENT")
            .arg("TRACKING")
            .arg("ON")
            .arg("NOLOOP")
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    conn
}

async fn rate(conn: &MultiplexedConnection, ms: u64) -> f64 {
    let done = Arc::new(AtomicUsize::new(0));
    let until = Instant::now() + Duration::from_millis(ms);
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let (mut conn, done) = (conn.clone(), Arc::clone(&done));
        tasks.push(tokio::spawn(async move {
            let key = format!("k{t}");
            while Instant::now() < until {
                let _: Value = redis::cmd("GET")
                    .arg(&key)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / (ms as f64 / 1000.0)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

async fn throughput(server: &RedisServer, rounds: usize, ms: u64) {
    let url = server.url();
    let mut setter = conn(&url, false, false).await;
    for t in 0..TASKS {
        let _: Value = redis::cmd("SET")
            .arg(format!("k{t}"))
            .arg("x".repeat(64))
            .query_async(&mut setter)
            .await
            .unwrap();
    }
    let variants = [
        ("resp2", conn(&url, false, false).await),
        ("resp3", conn(&url, true, false).await),
        ("resp3+tracking", conn(&url, true, true).await),
    ];
    let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    for round in 0..rounds {
        let mut got = vec![0.0; variants.len()];
        for i in 0..variants.len() {
            let at = (i + round) % variants.len();
            got[at] = rate(&variants[at].1, ms).await;
        }
        for i in 0..variants.len() {
            ratios[i].push(got[i] / got[0]);
            rates[i].push(got[i]);
        }
    }
    for (i, (name, _)) in variants.iter().enumerate() {
        println!(
            "{name:>16}: {:>9.0} GET/s  median ratio to resp2 {:.3}",
            median(rates[i].clone()),
            median(ratios[i].clone())
        );
    }
    println!(
        "{}",
        server
            .cli(&["INFO", "commandstats"])
            .lines()
            .filter(|l| l.contains("cmdstat_get:"))
            .collect::<String>()
    );
}

fn pct(mut v: Vec<Duration>) -> String {
    v.sort();
    let at = |p: f64| v[((v.len() as f64 - 1.0) * p) as usize];
    format!(
        "p50 {:?} p99 {:?} max {:?}",
        at(0.5),
        at(0.99),
        v[v.len() - 1]
    )
}

async fn latency(server: &RedisServer, n: usize) {
    let url = server.url();
    let mut writer = conn(&url, false, false).await;
    // RESP3 push on the reading connection.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let info = redis::IntoConnectionInfo::into_connection_info(url.as_str()).unwrap();
    let s = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    let client = Client::open(info.set_redis_settings(s)).unwrap();
    let config = AsyncConnectionConfig::new().set_push_sender(move |push: PushInfo| {
        if push.kind == redis::PushKind::Invalidate {
            let _ = tx.send(Instant::now());
        }
        Ok::<(), ()>(())
    });
    let mut reader = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap();
    let _: Value = redis::cmd("CLIENT")
        .arg("TRACKING")
        .arg("ON")
        .query_async(&mut reader)
        .await
        .unwrap();
    let mut push = Vec::new();
    for _ in 0..n {
        let _: Value = redis::cmd("SET")
            .arg("lk")
            .arg("v")
            .query_async(&mut writer)
            .await
            .unwrap();
        let _: Value = redis::cmd("GET")
            .arg("lk")
            .query_async(&mut reader)
            .await
            .unwrap();
        let sent = Instant::now();
        let _: Value = redis::cmd("DEL")
            .arg("lk")
            .query_async(&mut writer)
            .await
            .unwrap();
        let got = rx.recv().await.unwrap();
        push.push(got.saturating_duration_since(sent));
    }
    println!("resp3 push:     {}", pct(push));
    // RESP2 redirect to a pub/sub connection.
    let plain = Client::open(url.as_str()).unwrap();
    let mut pubsub = plain.get_async_pubsub().await.unwrap();
    // The pub/sub connection's id: asked before it subscribes.
    let mut idconn = plain.get_multiplexed_async_connection().await.unwrap();
    drop(idconn.clone());
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut idconn)
        .await
        .unwrap();
    pubsub.subscribe("__redis__:invalidate").await.unwrap();
    let clients2: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut idconn)
        .await
        .unwrap();
    let sub_id = clients2
        .lines()
        .filter(|l| !clients.contains(l.split(' ').next().unwrap()))
        .chain(clients2.lines().filter(|l| l.contains("sub=1")))
        .find(|l| l.contains("sub=1"))
        .and_then(|l| l.split(' ').next())
        .and_then(|f| f.strip_prefix("id="))
        .unwrap()
        .to_string();
    let mut reader2 = conn(&url, false, false).await;
    let _: Value = redis::cmd("CLIENT")
        .arg("TRACKING")
        .arg("ON")
        .arg("REDIRECT")
        .arg(&sub_id)
        .query_async(&mut reader2)
        .await
        .unwrap();
    let mut stream = pubsub.into_on_message();
    let mut redirect = Vec::new();
    for _ in 0..n {
        let _: Value = redis::cmd("SET")
            .arg("lk2")
            .arg("v")
            .query_async(&mut writer)
            .await
            .unwrap();
        let _: Value = redis::cmd("GET")
            .arg("lk2")
            .query_async(&mut reader2)
            .await
            .unwrap();
        let sent = Instant::now();
        let _: Value = redis::cmd("DEL")
            .arg("lk2")
            .query_async(&mut writer)
            .await
            .unwrap();
        let _msg = stream.next().await.unwrap();
        redirect.push(Instant::now().saturating_duration_since(sent));
    }
    println!("resp2 redirect: {}", pct(redirect));
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rounds = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(9);
    let ms = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(300);
    let server = RedisServer::start();
    latency(&server, 2000).await;
    throughput(&server, rounds, ms).await;
}

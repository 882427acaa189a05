//! Helpers shared by the integration tests (`crate::support` in each module
//! that needs them): counters in Redis and memcached that fills bump, a
//! worker process's side of a [`Stampede`], and waiting until a cache hears
//! the backplane.

// The modules left out without some features use parts of this one.
#![allow(dead_code)]

use std::future::Future;

use corral::{Cache, RedisStore};
use corral_testkit::{Stampede, StampedeReport};
use redis::AsyncCommands as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// A multiplexed connection to the Redis at `url`, for counters and raw
/// commands.
pub(crate) async fn redis_conn(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .expect("client")
        .get_multiplexed_async_connection()
        .await
        .expect("connection")
}

/// The counter at `key` (0 while absent).
pub(crate) async fn redis_count(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> u64 {
    conn.get::<_, Option<u64>>(key)
        .await
        .expect("GET")
        .unwrap_or(0)
}

/// Adds 1 to the counter item `key` (created at 0 by the test) on the
/// memcached at `addr`.
pub(crate) async fn memcached_incr(addr: &str, key: &str) -> Result<u64, String> {
    let mut conn = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    conn.write_all(format!("incr {key} 1\r\n").as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut buf = [0u8; 64];
    let n = conn.read(&mut buf).await.map_err(|e| e.to_string())?;
    let reply = String::from_utf8_lossy(&buf[..n]);
    reply.trim().parse().map_err(|_| format!("incr: {reply}"))
}

/// Sends backplane messages from `from` until `to` acts on one: `to`'s
/// subscription is then up.
pub(crate) async fn until_heard(from: &Cache<String>, to: &Cache<String>) {
    let heard = to.stats().backplane_messages;
    corral_testkit::until_repeating(
        "a backplane message is heard",
        || async {
            from.invalidate("probe-subscribed")
                .await
                .expect("invalidate");
        },
        || to.stats().backplane_messages > heard,
    )
    .await;
}

/// Reads `key` through `cache` until it answers `want` (`None`: gone;
/// read errors included: a connection may be being replaced), within 10 s.
pub(crate) async fn read_until(cache: &Cache<String>, key: &str, want: Option<&str>) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let got = cache.peek(key).await;
        if matches!(&got, Ok(value) if value.as_deref() == want) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{key}: still {got:?}, want {want:?}"
        );
        tokio::task::yield_now().await;
    }
}

/// Runs `stampede` in a worker process: its callers read its key through
/// `cache` at once, and each fill bumps the shared counter with `incr`,
/// then takes the stampede's fill time. Reports what the callers got.
pub(crate) async fn run_stampede<I, Fut>(
    cache: &Cache<String>,
    stampede: Stampede,
    incr: I,
) -> StampedeReport
where
    I: Fn(String) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<u64, String>> + Send + 'static,
{
    let Stampede {
        key,
        callers,
        fill,
        counter,
    } = stampede;
    let tasks: Vec<_> = (0..callers)
        .map(|_| {
            let (cache, key, counter, incr) =
                (cache.clone(), key.clone(), counter.clone(), incr.clone());
            tokio::spawn(async move {
                cache
                    .get_or_fill(&key, move || async move {
                        let n = incr(counter).await?;
                        tokio::time::sleep(fill).await;
                        Ok::<_, String>(format!("filled by {} (#{n})", std::process::id()))
                    })
                    .await
            })
        })
        .collect();
    StampedeReport::collect(tasks).await
}

/// A cache of `String`s with an L1 on `store`: the defaults, a 60 s TTL.
pub(crate) fn l1_cache(store: &RedisStore, name: &str) -> Cache<String> {
    Cache::<String>::builder(name)
        .store(store.clone())
        .l1(true)
        .ttl(std::time::Duration::from_secs(60))
        .build()
        .expect("config")
}

/// The name the test harness gives the test function `name` of the module
/// at `module` (its `module_path!()`): the path without the test crate's
/// name, as `Worker::start` selects it with `--exact`.
pub(crate) fn test_name(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_, path)) => format!("{path}::{name}"),
        None => name.to_owned(),
    }
}

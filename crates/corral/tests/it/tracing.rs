//! Traces of fills: a span per flight with events for its outcome, and no
//! raw key unless the cache opts in.

use corral::Cache;

const SECRET: &str = "user:ada@example.com";

/// Runs a fill that succeeds, one that errors and one that panics on a
/// cache built by `build`, and returns what was traced (this test's runtime
/// is single-threaded, so the thread's default subscriber sees the spawned
/// leaders too).
async fn traced(build: impl Fn() -> Cache<String>) -> String {
    let (captured, _default) = corral_testkit::capture(tracing::Level::DEBUG);
    let cache = build();
    let ok = cache
        .get_or_fill(SECRET, || async { Ok::<_, std::io::Error>("v".to_owned()) })
        .await;
    assert_eq!(ok.expect("value"), "v");
    let failed = cache
        .get_or_fill(&format!("{SECRET}/2"), || async {
            Err::<String, _>(std::io::Error::other("db down"))
        })
        .await;
    assert!(failed.is_err());
    let panicked = cache
        .get_or_fill(&format!("{SECRET}/3"), || async {
            if SECRET.is_empty() {
                return Ok(String::new());
            }
            panic!("bug in the fill")
        })
        .await;
    assert!(matches!(
        panicked,
        Err::<String, corral::Error<std::io::Error>>(corral::Error::FillPanicked { .. })
    ));
    captured.text()
}

#[tokio::test]
async fn fills_are_traced_with_hashed_keys_by_default() {
    let text = traced(|| Cache::<String>::builder("users").build().expect("config")).await;
    assert!(text.contains("corral.flight"), "{text}");
    assert!(text.contains("cache=users"), "{text}");
    assert!(text.contains("fill returned a value"), "{text}");
    assert!(text.contains("fill returned an error"), "{text}");
    assert!(text.contains("fill panicked"), "{text}");
    assert!(!text.contains(SECRET), "the raw key leaked:\n{text}");
    // The label is FNV-1a: the same in every process and build.
    assert!(text.contains("key=h:"), "{text}");
}

#[tokio::test]
async fn raw_keys_appear_only_when_asked_for() {
    let text = traced(|| {
        Cache::<String>::builder("users")
            .trace_raw_keys(true)
            .build()
            .expect("config")
    })
    .await;
    assert!(text.contains(&format!("key={SECRET}")), "{text}");
}

/// The lines of `text` at `level` that contain `what`.
fn lines<'a>(text: &'a str, level: &str, what: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|line| line.contains(level) && line.contains(what))
        .collect()
}

/// A Redis store's life in its logs: a first connection says "connected"
/// (not "restored"); a lost one names the store and keeps the error that
/// ended it and the one that keeps it down; a hundred fills during the
/// outage warn once; the connection that comes back says "restored".
#[tokio::test]
async fn redis_logs_name_the_store_and_keep_the_errors_once() {
    use std::time::Duration;

    use corral::{RedisConfig, RedisStore};
    use corral_testkit::{until, RedisServer};

    let (captured, _default) = corral_testkit::capture(tracing::Level::DEBUG);
    let mut server = RedisServer::start();
    let store_label = format!("store=redis://127.0.0.1:{}/", server.port());
    let config = RedisConfig::default().health_interval(Duration::from_millis(20));
    let store = RedisStore::connect_lazy(&server.url(), config).expect("store");
    let cache = Cache::<String>::builder("logged")
        .store(store)
        .no_circuit_breaker()
        .build()
        .expect("config");
    cache.set("k", "v".to_owned()).await.expect("set");
    let text = captured.text();
    let connected = lines(&text, "INFO", "redis connected");
    assert_eq!(connected.len(), 1, "{text}");
    assert!(connected[0].contains(&store_label), "{text}");
    assert!(!text.contains("restored"), "{text}");

    server.kill();
    until("the heartbeat found the connection lost", || {
        captured.text().contains("redis connection attempt failed")
    })
    .await;
    for i in 0..100 {
        let value = cache
            .get_or_fill(&format!("k{i}"), || async {
                Ok::<_, std::io::Error>("filled".to_owned())
            })
            .await
            .expect("a fill without a lease");
        assert_eq!(value, "filled");
    }
    server.restart();
    until("the connection came back", || {
        captured.text().contains("redis connection restored")
    })
    .await;

    let text = captured.text();
    // The error that ended the connection, and the one that kept it down.
    let lost = lines(&text, "WARN", "redis connection lost");
    assert_eq!(lost.len(), 1, "{text}");
    assert!(
        lost[0].contains(&store_label) && lost[0].contains("error="),
        "{text}"
    );
    let refused = lines(&text, "WARN", "redis connection attempt failed");
    assert_eq!(refused.len(), 1, "one warning for the whole outage: {text}");
    assert!(refused[0].to_lowercase().contains("refused"), "{text}");
    assert!(!text.contains("gave no answer"), "{text}");
    // A hundred fills without a lease: one warning, naming the cache.
    let failed = lines(&text, "WARN", "store call failed");
    assert_eq!(failed.len(), 1, "{text}");
    assert!(failed[0].contains("cache=logged"), "{text}");
    let restored = lines(&text, "INFO", "redis connection restored");
    assert_eq!(restored.len(), 1, "{text}");
    assert!(restored[0].contains(&store_label), "{text}");
    assert!(restored[0].contains("down_ms="), "{text}");
    println!("{text}");
}

/// A silent server (frozen: connections accepted, nothing answered) fails
/// every health check: the warning is logged once, the repeats at debug
/// level, and the connection that answers again is kept. A check answered
/// ends the silence: the next one warns again.
#[tokio::test]
async fn a_silent_servers_health_checks_warn_once_per_silence() {
    use std::time::Duration;

    use corral::{RedisConfig, RedisStore};
    use corral_testkit::{until, RedisServer};

    let (captured, _default) = corral_testkit::capture(tracing::Level::DEBUG);
    let server = RedisServer::start();
    let config = RedisConfig::default()
        .health_interval(Duration::from_millis(10))
        .op_timeout(Duration::from_millis(30))
        .connect_timeout(Duration::from_millis(30));
    let store = RedisStore::connect(&server.url(), config)
        .await
        .expect("store");
    server.freeze();
    let unanswered = |text: &str| lines(text, "DEBUG", "gave no answer").len();
    until("three health checks went unanswered", || {
        unanswered(&captured.text()) >= 3
    })
    .await;
    server.thaw();
    let text = captured.text();
    let warned = lines(&text, "WARN", "gave no answer");
    assert_eq!(warned.len(), 1, "{text}");
    assert!(warned[0].contains("store=redis://127.0.0.1:"), "{text}");
    assert!(warned[0].contains("repeats_left_out=0"), "{text}");
    assert!(lines(&text, "WARN", "not replaced").is_empty(), "{text}");

    // The heartbeat sends its next check only after the answer to the one
    // before: two more `ROLE`s served mean one was answered.
    let roles = || server.command_stats().get("role").copied().unwrap_or(0);
    let served = roles();
    until("a health check was answered", || roles() >= served + 2).await;
    let silences = unanswered(&captured.text());
    server.freeze();
    until("the server is silent again", || {
        unanswered(&captured.text()) > silences
    })
    .await;
    server.thaw();
    let text = captured.text();
    assert_eq!(lines(&text, "WARN", "gave no answer").len(), 2, "{text}");
    drop(store);
}

/// A source that is down fails every fill: the first failure is a warning
/// naming the cache, the repeats within the window are debug lines.
#[tokio::test]
async fn failing_fills_warn_once_per_window() {
    let (captured, _default) = corral_testkit::capture(tracing::Level::DEBUG);
    let cache = Cache::<String>::builder("orders").build().expect("config");
    for i in 0..5 {
        let failed = cache
            .get_or_fill(&format!("order:{i}"), || async {
                Err::<String, _>(std::io::Error::other("db down"))
            })
            .await;
        assert!(failed.is_err());
    }
    let text = captured.text();
    let warned = lines(&text, "WARN", "fill returned an error");
    assert_eq!(warned.len(), 1, "{text}");
    assert!(warned[0].contains("cache=orders"), "{text}");
    assert!(warned[0].contains("repeats_left_out=0"), "{text}");
    assert_eq!(
        lines(&text, "DEBUG", "fill returned an error").len(),
        4,
        "{text}"
    );
}

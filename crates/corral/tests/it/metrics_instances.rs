//! Two instances of one cache name in a process (as the backplane docs
//! allow) export counters that sum and gauges that sum, each with its HELP
//! text, scraped over HTTP from a Prometheus exporter served as a service
//! serves it; a dropped instance takes its gauge readings back. The
//! recorder is process-wide, so the scenario runs in a worker process of
//! its own (this binary again), where no other test's caches export.

use std::time::Duration;

use axum::routing::get;
use axum::Router;
use corral::Cache;
use metrics_exporter_prometheus::PrometheusBuilder;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The value of the sample `name{labels}` in Prometheus text.
fn sample(text: &str, name_and_labels: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(name_and_labels)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no sample {name_and_labels} in:\n{text}"))
}

/// `GET /metrics` over HTTP/1.0: the body.
async fn scrape(addr: std::net::SocketAddr) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .await
        .expect("request");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .await
        .expect("response");
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(
        head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
        "{head}"
    );
    body.to_owned()
}

async fn hits(cache: &Cache<String>, key: &str, times: usize) {
    for _ in 0..times {
        cache
            .get_or_fill(key, || async { Ok::<_, std::io::Error>("v".to_owned()) })
            .await
            .expect("value");
    }
}

#[tokio::test]
async fn two_instances_of_one_cache_sum_on_the_prometheus_endpoint_with_help_text() {
    let entry = crate::support::test_name(module_path!(), "instances_worker");
    let mut worker = corral_testkit::Worker::start(&entry, &[]).await;
    let passed = worker.answer("@passed", Duration::from_secs(120)).await;
    passed.expect("the worker's scenario passed (its panic is above)");
}

/// The worker process of the test above: installs the recorder and runs
/// the scenario; `@passed` once every assertion held.
#[test]
#[ignore = "a worker process for the metrics test above, started by it"]
fn instances_worker() {
    println!("@ready");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(scenario());
    println!("@passed");
}

async fn scenario() {
    // Built outside a runtime, the exporter cannot start: a warning says so.
    let warned = std::thread::spawn(|| {
        let (captured, _default) = corral_testkit::capture(tracing::Level::WARN);
        let cache = Cache::<String>::builder("offside")
            .metrics_interval(Some(Duration::from_secs(1)))
            .build()
            .expect("config");
        drop(cache);
        captured.text()
    })
    .join()
    .expect("thread");
    assert!(warned.contains("outside a tokio runtime"), "{warned}");
    assert!(warned.contains("cache=offside"), "{warned}");

    let handle = PrometheusBuilder::new()
        .install_recorder()
        .expect("the only recorder of this test binary");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    let app = Router::new().route("/metrics", get(move || async move { handle.render() }));
    tokio::spawn(async move { axum::serve(listener, app).await });

    let build = || {
        Cache::<String>::builder("users")
            .metrics_interval(None)
            .build()
            .expect("config")
    };
    let (a, b) = (build(), build());
    // One fill each, then 9 hits in one and 4 in the other.
    hits(&a, "user:1", 10).await;
    hits(&b, "user:1", 5).await;
    a.export_metrics();
    b.export_metrics();
    let text = scrape(addr).await;
    assert_eq!(
        sample(&text, r#"corral_hits_total{cache="users",tier="l1"} "#),
        13.0
    );
    assert_eq!(sample(&text, r#"corral_fills_total{cache="users"} "#), 2.0);
    assert_eq!(sample(&text, r#"corral_l1_entries{cache="users"} "#), 2.0);
    assert_eq!(
        sample(&text, r#"corral_flights_in_progress{cache="users"} "#),
        0.0
    );
    assert_eq!(sample(&text, r#"corral_breaker_open{cache="users"} "#), 0.0);
    for metric in [
        "corral_hits_total",
        "corral_misses_total",
        "corral_fills_total",
        "corral_commits_refused_total",
        "corral_store_calls_skipped_total",
        "corral_l1_entries",
        "corral_flights_in_progress",
        "corral_breaker_open",
        "corral_fill_duration_seconds",
    ] {
        assert!(
            text.contains(&format!("# HELP {metric} ")),
            "no HELP for {metric}:\n{text}"
        );
    }

    // Exporting again adds only what changed since.
    hits(&b, "user:1", 2).await;
    a.export_metrics();
    b.export_metrics();
    b.export_metrics();
    let text = scrape(addr).await;
    assert_eq!(
        sample(&text, r#"corral_hits_total{cache="users",tier="l1"} "#),
        15.0
    );

    // A dropped instance's gauge readings leave the sum; its counts stay.
    drop(b);
    let text = scrape(addr).await;
    assert_eq!(sample(&text, r#"corral_l1_entries{cache="users"} "#), 1.0);
    assert_eq!(
        sample(&text, r#"corral_hits_total{cache="users",tier="l1"} "#),
        15.0
    );
}

//! The `metrics` export: after a stampede, the Prometheus text holds the
//! expected counters, labelled with the cache's name. (One test: the
//! recorder is process-wide, installed by the test as an application
//! would; the caches' names are this module's own, so the caches of the
//! tests running beside it in this process add nothing to what it reads.)

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use corral::Cache;
use corral_testkit::{Gate, RedisServer};
use metrics_exporter_prometheus::PrometheusBuilder;

/// The value of the sample `name{labels}` in Prometheus text, labels in
/// the exporter's order.
fn sample(text: &str, name_and_labels: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(name_and_labels)?.trim().parse().ok())
}

async fn stampede(cache: &Cache<String>, key: &'static str, callers: usize) -> usize {
    let fills = Arc::new(AtomicUsize::new(0));
    let gate = Gate::new();
    let tasks: Vec<_> = (0..callers)
        .map(|_| {
            let (cache, gate, fills) = (cache.clone(), gate.clone(), Arc::clone(&fills));
            tokio::spawn(async move {
                cache
                    .get_or_fill(key, move || async move {
                        fills.fetch_add(1, Ordering::SeqCst);
                        gate.wait().await;
                        Ok::<_, std::io::Error>("v".to_owned())
                    })
                    .await
            })
        })
        .collect();
    corral_testkit::until("every caller joined", || {
        cache.stats().coalesced >= (callers - 1) as u64
    })
    .await;
    gate.open();
    for task in tasks {
        assert_eq!(task.await.expect("task").expect("value"), "v");
    }
    fills.load(Ordering::SeqCst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stampede_shows_on_the_prometheus_endpoint() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).expect("the only recorder of this test binary");

    // In process.
    let users = Cache::<String>::builder("metrics_users")
        .build()
        .expect("config");
    assert_eq!(stampede(&users, "user:1", 1_000).await, 1);
    for _ in 0..5 {
        users
            .get_or_fill("user:1", || async {
                Ok::<String, std::io::Error>("x".into())
            })
            .await
            .expect("hit");
    }
    // Through Redis, with an L1.
    let server = RedisServer::start();
    let store = corral::RedisStore::connect(&server.url(), corral::RedisConfig::default())
        .await
        .expect("store");
    let orders = Cache::<String>::builder("metrics_orders")
        .store(store)
        .l1(true)
        .ttl(Duration::from_secs(60))
        .build()
        .expect("config");
    assert_eq!(stampede(&orders, "order:1", 200).await, 1);
    users.export_metrics();
    orders.export_metrics();

    let text = handle.render();
    let get =
        |name: &str| sample(&text, name).unwrap_or_else(|| panic!("no sample {name} in:\n{text}"));
    assert_eq!(get(r#"corral_fills_total{cache="metrics_users"}"#), 1.0);
    assert_eq!(
        get(r#"corral_coalesced_total{cache="metrics_users"}"#),
        999.0
    );
    assert_eq!(
        get(r#"corral_misses_total{cache="metrics_users"}"#),
        1_000.0
    );
    assert_eq!(
        get(r#"corral_hits_total{cache="metrics_users",tier="l1"}"#),
        5.0
    );
    assert_eq!(
        get(r#"corral_hits_total{cache="metrics_users",tier="l2"}"#),
        0.0
    );
    assert_eq!(get(r#"corral_fills_total{cache="metrics_orders"}"#), 1.0);
    assert_eq!(
        get(r#"corral_coalesced_total{cache="metrics_orders"}"#),
        199.0
    );
    assert_eq!(
        get(r#"corral_leases_total{cache="metrics_orders",outcome="acquired"}"#),
        1.0
    );
    assert_eq!(get(r#"corral_commits_total{cache="metrics_orders"}"#), 1.0);
    assert_eq!(
        get(r#"corral_store_errors_total{cache="metrics_orders"}"#),
        0.0
    );
    // Durations: one fill per cache; every coalesced caller's wait.
    assert_eq!(
        get(r#"corral_fill_duration_seconds_count{cache="metrics_users"}"#),
        1.0
    );
    assert_eq!(
        get(r#"corral_wait_duration_seconds_count{cache="metrics_users"}"#),
        999.0
    );
    assert_eq!(
        get(r#"corral_fill_duration_seconds_count{cache="metrics_orders"}"#),
        1.0
    );
    #[cfg(feature = "compression")]
    compression_shows(&handle).await;
}

/// A compressing cache's bytes before and after, and its values by outcome.
#[cfg(feature = "compression")]
async fn compression_shows(handle: &metrics_exporter_prometheus::PrometheusHandle) {
    let pages = Cache::<String>::builder("metrics_pages")
        .store(corral::store::MemoryStore::new())
        .compression(corral::Compression::lz4())
        .build()
        .expect("config");
    pages
        .set("page", "<p>corral</p>".repeat(1000))
        .await
        .expect("set");
    pages
        .set("small", "<p>corral</p>".to_owned())
        .await
        .expect("set");
    pages.export_metrics();
    let stats = pages.stats();
    let text = handle.render();
    let get =
        |name: &str| sample(&text, name).unwrap_or_else(|| panic!("no sample {name} in:\n{text}"));
    assert_eq!(
        get(r#"corral_compression_values_total{cache="metrics_pages",outcome="compressed"}"#),
        1.0
    );
    assert_eq!(
        get(r#"corral_compression_bytes_total{cache="metrics_pages",stage="before"}"#),
        stats.compression_bytes_before as f64
    );
    assert_eq!(
        stats.compression_bytes_before, 13_002,
        "a 2-byte length, the text"
    );
    let after = get(r#"corral_compression_bytes_total{cache="metrics_pages",stage="after"}"#);
    assert_eq!(after, stats.compression_bytes_after as f64);
    assert!(after < 1_000.0, "{after}");
}

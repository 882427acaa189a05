//! `CacheConfig`: TOML, environment variables, presets, and building a
//! cache from them.

use std::time::Duration;

use corral::{CacheConfig, StoreHealth};
use corral_testkit::RedisServer;

fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn toml_sets_what_it_names() {
    let config = CacheConfig::from_toml(
        r#"
        redis_url = "redis://app:hunter2@cache.internal:6379/0"
        l1 = true
        ttl = "5m"
        jitter = 0.1
        grace = "1m"
        fail_safe = "1h"
        fill_timeout = "10s"
        soft_timeout = "250ms"
        max_entries = 50000
        "#,
    )
    .expect("valid");
    assert_eq!(config.ttl, Some(Duration::from_secs(300)));
    assert_eq!(config.soft_timeout, Some(Duration::from_millis(250)));
    assert_eq!(config.l1, Some(true));
    assert_eq!(config.max_entries, Some(50_000));
    assert_eq!(config.lease_ttl, None, "unset fields keep the defaults");
    let shown = format!("{config:?}");
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(
        shown.contains("redis://app:***@cache.internal:6379/0"),
        "{shown}"
    );
}

#[test]
fn toml_mistakes_are_named() {
    let unknown = CacheConfig::from_toml("tll = \"5m\"").expect_err("typo");
    assert!(unknown.to_string().contains("tll"), "{unknown}");
    let unitless = CacheConfig::from_toml("ttl = \"60\"").expect_err("no unit");
    assert!(unitless.to_string().contains("no unit"), "{unitless}");
    let wrong_type = CacheConfig::from_toml("l1 = \"maybe\"").expect_err("not a bool");
    assert!(wrong_type.to_string().contains("l1"), "{wrong_type}");
}

#[test]
fn environment_variables_and_overlay() {
    let env = CacheConfig::from_vars(
        "CORRAL_",
        vars(&[
            ("CORRAL_REDIS_URL", "redis://127.0.0.1:6379/"),
            ("CORRAL_L1", "yes"),
            ("CORRAL_TTL", "90s"),
            ("CORRAL_JITTER", "0.2"),
            ("CORRAL_MAX_ENTRIES", "1000"),
            ("CORRAL_BREAKER_FAILURES", "3"),
            ("CORRAL_BREAKER_COOL_DOWN", "2s"),
            ("CORRAL_REDIS_CLUSTER_URLS", ""),
            ("PATH", "/usr/bin"),
        ]),
    )
    .expect("valid");
    assert_eq!(env.redis_url.as_deref(), Some("redis://127.0.0.1:6379/"));
    assert_eq!(env.l1, Some(true));
    assert_eq!(env.ttl, Some(Duration::from_secs(90)));
    assert_eq!(env.jitter, Some(0.2));
    assert_eq!(env.max_entries, Some(1000));
    assert_eq!(env.breaker_failures, Some(3));
    assert_eq!(env.breaker_cool_down, Some(Duration::from_secs(2)));

    let file = CacheConfig::from_toml("ttl = \"5m\"\ngrace = \"1m\"").expect("valid");
    let merged = file.overlay(env);
    assert_eq!(
        merged.ttl,
        Some(Duration::from_secs(90)),
        "the environment wins"
    );
    assert_eq!(
        merged.grace,
        Some(Duration::from_secs(60)),
        "the file fills in"
    );

    let typo = CacheConfig::from_vars("CORRAL_", vars(&[("CORRAL_TLL", "5m")])).expect_err("typo");
    assert!(typo.to_string().contains("CORRAL_TLL"), "{typo}");
    let bad = CacheConfig::from_vars("CORRAL_", vars(&[("CORRAL_L1", "maybe")])).expect_err("bool");
    assert!(bad.to_string().contains("CORRAL_L1"), "{bad}");
    let unitless =
        CacheConfig::from_vars("CORRAL_", vars(&[("CORRAL_TTL", "60")])).expect_err("unit");
    assert!(unitless.to_string().contains("no unit"), "{unitless}");
}

#[tokio::test]
async fn the_in_memory_preset_builds_a_working_cache() {
    let cache = CacheConfig::in_memory()
        .build::<String>("users")
        .await
        .expect("cache");
    let value = cache
        .get_or_fill("k", || async { Ok::<_, std::io::Error>("v".to_owned()) })
        .await
        .expect("value");
    assert_eq!(value, "v");
    assert!(matches!(cache.health().await.store, StoreHealth::None));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_production_preset_shares_values_through_redis() {
    let server = RedisServer::start();
    let config = CacheConfig::production(&server.url());
    let a = config.build::<String>("users").await.expect("cache a");
    let b = config.build::<String>("users").await.expect("cache b");
    a.set("k", "from a".to_owned()).await.expect("set");
    assert_eq!(b.get("k").await.expect("read").as_deref(), Some("from a"));
    assert!(a.health().await.is_ok());

    let refused = CacheConfig::production("redis://app:hunter2@127.0.0.1:1/")
        .overlay(CacheConfig::from_toml("store_timeout = \"200ms\"").expect("valid"))
        .build::<String>("users")
        .await
        .expect_err("nothing listens on port 1");
    let message = refused.to_string();
    assert!(message.contains("127.0.0.1:1"), "{message}");
    assert!(!message.contains("hunter2"), "{message}");
}

//! `CacheConfig`: TOML, environment variables, presets, and building a
//! cache from them.

use std::time::Duration;

use corral::{CacheConfig, RedisConfig, StoreErrorKind, StoreHealth};
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
    assert_eq!(b.peek("k").await.expect("read").as_deref(), Some("from a"));
    assert!(a.health().await.is_ok());

    let malformed = CacheConfig::production("redis://app:hunter2@127.0.0.1:notaport/")
        .build::<String>("users")
        .await
        .expect_err("a malformed URL is a configuration error");
    let message = malformed.to_string();
    assert!(message.contains("redis_url"), "{message}");
    assert!(!message.contains("hunter2"), "{message}");
    assert_eq!(
        malformed.store_error().map(|e| e.kind()),
        Some(StoreErrorKind::Configuration),
        "{message}"
    );
    assert!(
        malformed.store_error().is_some_and(|e| !e.is_retryable()),
        "a bad URL is not worth retrying"
    );
}

#[test]
fn empty_variables_count_as_unset() {
    let config = CacheConfig::from_vars(
        "CORRAL_",
        [
            ("CORRAL_REDIS_URL", "redis://127.0.0.1:6379/"),
            ("CORRAL_REDIS_CLUSTER_URLS", ""),
            ("CORRAL_TTL", ""),
            ("CORRAL_L1", "  "),
            ("CORRAL_JITTER", ""),
        ],
    )
    .expect("empty values are unset");
    assert_eq!(config.redis_url.as_deref(), Some("redis://127.0.0.1:6379/"));
    assert_eq!(config.redis_cluster_urls, None);
    assert_eq!(config.ttl, None);
    assert_eq!(config.l1, None);
    assert_eq!(config.jitter, None);

    let nothing = CacheConfig::from_vars("CORRAL_", [("CORRAL_REDIS_URL", "")]).expect("unset");
    assert_eq!(nothing, CacheConfig::default());
}

#[tokio::test]
async fn empty_urls_build_an_in_process_cache() {
    let cache = CacheConfig::default()
        .redis_url("")
        .redis_cluster_urls([" ", ""])
        .build::<String>("users")
        .await
        .expect("no store set");
    assert!(matches!(cache.health().await.store, StoreHealth::None));
}

#[test]
fn variable_errors_name_the_variable_and_the_form_on_one_line() {
    let cases: [(&str, &str, &[&str]); 4] = [
        ("CORRAL_TTL", "60", &["CORRAL_TTL", "\"60s\"", "\"60\""]),
        ("CORRAL_L1", "maybe", &["CORRAL_L1", "true or false"]),
        ("CORRAL_JITTER", "a lot", &["CORRAL_JITTER", "a number"]),
        ("CORRAL_MAX_ENTRIES", "-1", &["CORRAL_MAX_ENTRIES", "-1"]),
    ];
    for (name, value, shows) in cases {
        let error = CacheConfig::from_vars("CORRAL_", [(name, value)]).expect_err(name);
        let text = error.to_string();
        for shown in shows {
            assert!(text.contains(shown), "{name}: {text:?} lacks {shown}");
        }
        assert!(!text.contains('\n'), "{name}: more than one line: {text:?}");
    }
}

#[test]
fn toml_errors_name_the_key_and_the_form_on_one_line() {
    let cases: [(&str, &[&str]); 4] = [
        ("ttl = 60", &["`ttl`", "\"60s\""]),
        ("l1 = true\ngrace = \"60\"", &["`grace`", "\"60s\""]),
        ("l1 = \"maybe\"", &["`l1`"]),
        ("tll = \"5m\"", &["tll"]),
    ];
    for (text, shows) in cases {
        let error = CacheConfig::from_toml(text).expect_err(text);
        let message = error.to_string();
        for shown in shows {
            assert!(message.contains(shown), "{text}: {message:?} lacks {shown}");
        }
        assert!(
            !message.contains('\n'),
            "{text}: more than one line: {message:?}"
        );
    }
}

#[test]
fn from_vars_takes_any_pairs_of_strings() {
    let slice: &[(&str, &str)] = &[("CORRAL_TTL", "90s")];
    let from_slice = CacheConfig::from_vars("CORRAL_", slice).expect("a slice of &str pairs");
    let owned = vec![("CORRAL_TTL".to_owned(), "90s".to_owned())];
    let from_owned = CacheConfig::from_vars("CORRAL_", owned).expect("owned pairs");
    assert_eq!(from_slice, from_owned);
    assert_eq!(from_slice.ttl, Some(Duration::from_secs(90)));
}

#[test]
fn a_config_is_built_in_code_with_setters() {
    let config = CacheConfig::default()
        .redis_url("redis://cache.internal/")
        .l1(true)
        .ttl(Duration::from_secs(300))
        .jitter(0.1)
        .fail_safe(Duration::from_secs(3600))
        .max_entries(10_000);
    let same = CacheConfig::from_toml(
        r#"
        redis_url = "redis://cache.internal/"
        l1 = true
        ttl = "5m"
        jitter = 0.1
        fail_safe = "1h"
        max_entries = 10000
        "#,
    )
    .expect("valid");
    assert_eq!(config, same);
}

#[test]
fn sentinel_settings_are_read_and_their_password_never_shown() {
    let config = CacheConfig::from_vars(
        "CORRAL_",
        vars(&[
            ("CORRAL_REDIS_SENTINEL_MASTER", "orders"),
            (
                "CORRAL_REDIS_SENTINEL_URLS",
                "redis://:s-secret@10.0.0.1:26379, redis://10.0.0.2:26379",
            ),
            ("CORRAL_REDIS_MASTER_USER", "app"),
            ("CORRAL_REDIS_MASTER_PASSWORD", "m-secret"),
        ]),
    )
    .expect("valid");
    assert_eq!(config.redis_sentinel_master.as_deref(), Some("orders"));
    assert_eq!(
        config.redis_sentinel_urls.as_deref(),
        Some(
            &[
                "redis://:s-secret@10.0.0.1:26379".to_owned(),
                "redis://10.0.0.2:26379".to_owned()
            ][..]
        )
    );
    assert_eq!(config.redis_master_password.as_deref(), Some("m-secret"));
    let shown = format!("{config:?}");
    assert!(!shown.contains("secret"), "{shown}");
    assert!(shown.contains("redis_sentinel_master"), "{shown}");
    let toml = CacheConfig::from_toml(
        r#"
        redis_sentinel_master = "orders"
        redis_sentinel_urls = ["redis://:s-secret@10.0.0.1:26379", "redis://10.0.0.2:26379"]
        redis_master_user = "app"
        redis_master_password = "m-secret"
        "#,
    )
    .expect("toml");
    assert_eq!(toml, config);
    let in_code = CacheConfig::default()
        .redis_sentinel(
            "orders",
            ["redis://:s-secret@10.0.0.1:26379", "redis://10.0.0.2:26379"],
        )
        .redis_master_auth(Some("app"), "m-secret");
    assert_eq!(in_code, config);
}

#[tokio::test]
async fn sentinel_settings_that_do_not_fit_are_refused_clearly() {
    let sentinels = ["redis://127.0.0.1:26379"];
    let cases = [
        (
            CacheConfig::default().redis_sentinel("orders", [" "]),
            "redis_sentinel_urls is not",
        ),
        (
            CacheConfig::default().redis_sentinel("", sentinels),
            "redis_sentinel_master is not",
        ),
        (
            CacheConfig::default()
                .redis_sentinel("orders", sentinels)
                .redis_url("redis://127.0.0.1:6379/"),
            "not both",
        ),
        (
            CacheConfig::default().redis_master_auth(None, "m-secret"),
            "only with",
        ),
    ];
    for (config, says) in cases {
        let error = config.build::<String>("users").await.expect_err("refused");
        let text = error.to_string();
        assert!(text.contains(says), "{config:?}: {text}");
        assert!(!text.contains("m-secret"), "{text}");
    }
}

#[test]
fn redis_connection_settings_are_read_and_reach_the_store_settings() {
    let toml = CacheConfig::from_toml(
        r#"
        store_timeout = "300ms"
        redis_connect_timeout = "2s"
        redis_health_interval = "250ms"
        redis_tcp_keepalive = "30s"
        redis_tracking = false
        "#,
    )
    .expect("valid");
    let env = CacheConfig::from_vars(
        "CORRAL_",
        vars(&[
            ("CORRAL_STORE_TIMEOUT", "300ms"),
            ("CORRAL_REDIS_CONNECT_TIMEOUT", "2s"),
            ("CORRAL_REDIS_HEALTH_INTERVAL", "250ms"),
            ("CORRAL_REDIS_TCP_KEEPALIVE", "30s"),
            ("CORRAL_REDIS_TRACKING", "false"),
        ]),
    )
    .expect("valid");
    let code = CacheConfig::default()
        .store_timeout(Duration::from_millis(300))
        .redis_connect_timeout(Duration::from_secs(2))
        .redis_health_interval(Duration::from_millis(250))
        .redis_tcp_keepalive(Duration::from_secs(30))
        .redis_tracking(corral::Tracking::Off);
    assert_eq!(toml, env);
    assert_eq!(toml, code);

    let redis = toml.redis_config();
    assert_eq!(redis.op_timeout, Duration::from_millis(300));
    assert_eq!(redis.connect_timeout, Duration::from_secs(2));
    assert_eq!(redis.health_interval, Duration::from_millis(250));
    assert_eq!(redis.tcp_keepalive, Some(Duration::from_secs(30)));
    assert_eq!(redis.tracking, corral::Tracking::Off);
    let shown = format!("{toml:?}");
    assert!(
        shown.contains(r#""redis_health_interval": "250ms""#),
        "{shown}"
    );

    for (text, mode) in [
        ("\"bcast\"", corral::Tracking::Broadcast),
        ("\"keys\"", corral::Tracking::Keys),
        ("true", corral::Tracking::Keys),
        ("\"off\"", corral::Tracking::Off),
    ] {
        let read = CacheConfig::from_toml(&format!("redis_tracking = {text}")).expect("valid");
        assert_eq!(read.redis_config().tracking, mode, "{text}");
    }
    let bad = CacheConfig::from_toml("redis_tracking = \"bcats\"").map(drop);
    let bad = bad.err().map(|error| error.to_string()).unwrap_or_default();
    assert!(
        bad.contains(r#"expected "keys", "bcast" or "off""#),
        "{bad}"
    );

    let off = CacheConfig::from_toml("redis_tcp_keepalive = \"0s\"").expect("valid");
    assert_eq!(off.redis_config().tcp_keepalive, None, "zero turns it off");
    assert_eq!(
        CacheConfig::default().redis_config(),
        RedisConfig::default()
    );

    let unitless =
        CacheConfig::from_vars("CORRAL_", vars(&[("CORRAL_REDIS_HEALTH_INTERVAL", "5")]))
            .expect_err("no unit");
    let message = unitless.to_string();
    assert!(
        message.contains("CORRAL_REDIS_HEALTH_INTERVAL") && message.contains("no unit"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_health_interval_paces_the_stores_pings() {
    let server = RedisServer::start();
    let cache = CacheConfig::production(&server.url())
        .redis_health_interval(Duration::from_millis(20))
        .build::<String>("users")
        .await
        .expect("cache");
    cache.set("k", "v".to_owned()).await.expect("set");
    server.reset_stats();
    // At the default interval (1 s) the command and subscriber connections
    // send two health checks a second (`ROLE` and `PING`): six in 3 s at
    // most.
    let start = std::time::Instant::now();
    loop {
        let stats = server.command_stats();
        let checks = ["ping", "role"]
            .iter()
            .map(|name| stats.get(*name).copied().unwrap_or(0))
            .sum::<u64>();
        if checks >= 20 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "{checks} health checks in 3 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[test]
fn a_caches_section_overlays_the_global_settings() {
    let file = CacheConfig::from_toml(
        r#"
        ttl = "5m"
        grace = "1m"

        [cache.users]
        ttl = "1m"
        version = 3

        [cache.user-sessions]
        negative_ttl = "5s"
        "#,
    )
    .expect("valid");
    let env = CacheConfig::from_vars(
        "CORRAL_",
        vars(&[
            ("CORRAL_TTL", "10m"),
            ("CORRAL_USERS_TTL", "30s"),
            ("CORRAL_USER_SESSIONS_FILL_TIMEOUT", "2s"),
            ("CORRAL_ORDERS_ALSO_INVALIDATE_VERSIONS", "1, 2"),
        ]),
    )
    .expect("valid");
    let config = file.overlay(env);
    let users = config.for_cache("users");
    assert_eq!(users.ttl, Some(Duration::from_secs(30)), "env over file");
    assert_eq!(users.version, Some(3), "the file's section fills in");
    assert_eq!(
        users.grace,
        Some(Duration::from_secs(60)),
        "globals fill in"
    );
    let sessions = config.for_cache("user-sessions");
    assert_eq!(sessions.negative_ttl, Some(Duration::from_secs(5)));
    assert_eq!(sessions.fill_timeout, Some(Duration::from_secs(2)));
    assert_eq!(sessions.ttl, Some(Duration::from_secs(600)));
    let orders = config.for_cache("orders");
    assert_eq!(orders.also_invalidate_versions, Some(vec![1, 2]));
    assert_eq!(orders.ttl, Some(Duration::from_secs(600)));
    assert!(
        orders.cache.is_empty(),
        "a cache's settings have no sections"
    );

    // Process-wide settings stay global: the caches share one store.
    let per_cache_url = CacheConfig::from_vars(
        "CORRAL_",
        vars(&[("CORRAL_USERS_REDIS_URL", "redis://a:hunter2@h/")]),
    )
    .expect_err("per-cache URL");
    let message = per_cache_url.to_string();
    assert!(message.contains("CORRAL_USERS_REDIS_URL"), "{message}");
    assert!(message.contains("whole process"), "{message}");
    assert!(!message.contains("hunter2"), "{message}");
    let in_toml = CacheConfig::from_toml("[cache.users]\nredis_health_interval = \"1s\"")
        .expect_err("per-cache connection setting");
    assert!(in_toml.to_string().contains("users"), "{in_toml}");
    assert!(
        in_toml.to_string().contains("redis_health_interval"),
        "{in_toml}"
    );
}

#[tokio::test]
async fn every_builder_setting_that_config_names_reaches_the_builder() {
    let config = CacheConfig::from_vars(
        "CORRAL_",
        vars(&[
            ("CORRAL_FAIL_SAFE_THROTTLE", "7s"),
            ("CORRAL_POLL_INTERVAL", "40ms"),
            ("CORRAL_TAG_RETENTION", "2d"),
            ("CORRAL_TRACE_RAW_KEYS", "on"),
            ("CORRAL_REFRESH_LIMIT", "4"),
            ("CORRAL_METRICS_INTERVAL", "0s"),
            ("CORRAL_USERS_VERSION", "3"),
        ]),
    )
    .expect("valid");
    let store = std::sync::Arc::new(corral::store::MemoryStore::new());
    let caches = corral::Caches::on_store(config, Some(store.clone()));
    let shown = format!("{:?}", caches.builder::<String>("users"));
    for expected in [
        "fail_safe_throttle: 7s",
        "poll_interval: 40ms",
        "tag_retention: 172800s",
        "trace_raw_keys: true",
        "version: 3",
    ] {
        assert!(shown.contains(expected), "{expected} in {shown}");
    }
    // The version names the namespace: a cache of version 3 reads what
    // the configured one wrote, one of version 0 does not.
    let users = caches.build::<String>("users").expect("cache");
    users.set("k", "v3".to_owned()).await.expect("set");
    let v3 = corral::Cache::<String>::builder("users")
        .store(store.clone())
        .version(3)
        .build()
        .expect("cache");
    assert_eq!(v3.peek("k").await.expect("read").as_deref(), Some("v3"));
    let v0 = corral::Cache::<String>::builder("users")
        .store(store)
        .build()
        .expect("cache");
    assert_eq!(v0.peek("k").await.expect("read"), None);
}

/// `CLIENT LIST` without redis-cli's own connection: (command, subscriber)
/// connections.
fn connections(server: &RedisServer) -> (usize, usize, String) {
    let list = server.cli(&["CLIENT", "LIST"]);
    let others: Vec<&str> = list
        .lines()
        .filter(|line| !line.contains("cmd=client|list"))
        .collect();
    let subscribers = others
        .iter()
        .filter(|line| {
            line.split(' ')
                .any(|field| field.starts_with("flags=") && field.contains('P'))
        })
        .count();
    (others.len() - subscribers, subscribers, list)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_caches_from_one_config_share_one_store_and_its_two_connections() {
    let server = RedisServer::start();
    let caches = CacheConfig::production(&server.url())
        .cache(
            "orders",
            CacheConfig::default().ttl(Duration::from_secs(30)),
        )
        .caches()
        .expect("valid");
    let users = caches.build::<String>("users").expect("users");
    let orders = caches.build::<u64>("orders").expect("orders");
    let user = users
        .get_or_fill("1", || async { Ok::<_, std::io::Error>("Ada".to_owned()) })
        .await
        .expect("value");
    let order = orders
        .get_or_fill("1", || async { Ok::<_, std::io::Error>(7) })
        .await
        .expect("value");
    assert_eq!((user.as_str(), order), ("Ada", 7));
    users.invalidate("1").await.expect("invalidate");
    orders.set("2", 8).await.expect("set");
    // Both caches listen: the one subscriber connection holds both
    // namespaces' channels.
    let channels = server.cli(&["PUBSUB", "CHANNELS"]);
    assert!(
        channels.contains("users:v0") && channels.contains("orders:v0"),
        "{channels}"
    );
    let (commands, subscribers, list) = connections(&server);
    assert_eq!((commands, subscribers), (1, 1), "{list}");

    // `build` opens a store per call: what `caches` is for.
    let config = CacheConfig::production(&server.url());
    let apart = config.build::<String>("apart").await.expect("cache");
    apart.set("k", "v".to_owned()).await.expect("set");
    let (commands, _, list) = connections(&server);
    assert_eq!(commands, 2, "{list}");
}

#[test]
fn a_bad_compression_names_its_variable_and_the_forms_it_takes() {
    let bad = CacheConfig::from_vars("CORRAL_", vars(&[("CORRAL_COMPRESSION", "gzip")]))
        .expect_err("unknown algorithm");
    let message = bad.to_string();
    assert!(
        message.contains("CORRAL_COMPRESSION") && message.contains("zstd:<level>"),
        "{message}"
    );
    let bad = CacheConfig::from_toml("compression = \"zstd:x\"").expect_err("bad level");
    assert!(bad.to_string().contains("compression"), "{bad}");
}

#[cfg(feature = "compression")]
#[tokio::test]
async fn a_configured_compression_compresses() {
    let config = CacheConfig::from_toml("compression = \"lz4\"").expect("valid");
    let cache = config
        .apply(
            corral::Cache::<String>::builder("configured").store(corral::store::MemoryStore::new()),
        )
        .build()
        .expect("config");
    cache.set("k", "corral ".repeat(500)).await.expect("set");
    assert_eq!(cache.stats().compressed_values, 1);
}

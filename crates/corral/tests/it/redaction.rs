//! Secrets never appear in `Debug`, `Display`, errors or logs: Redis URL
//! passwords (in the userinfo or a `pass` query parameter), through
//! `RedisStore`, its connect errors and `CacheConfig`; encryption keys.

use std::time::Duration;

use corral::{Cache, RedisConfig, RedisStore};
use corral_testkit::{Captured, RedisServer};

const PASSWORD: &str = "s3cr3t-hunter2";

/// Captures every trace of this (single-threaded) test runtime.
fn capture() -> (Captured, tracing::subscriber::DefaultGuard) {
    corral_testkit::capture(tracing::Level::TRACE)
}

fn assert_hidden(what: &str, text: &str) {
    assert!(
        !text.contains(PASSWORD),
        "{what} shows the password: {text}"
    );
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("address").port()
}

fn quick() -> RedisConfig {
    RedisConfig::default()
        .connect_timeout(Duration::from_millis(300))
        .op_timeout(Duration::from_millis(300))
}

/// URLs with the password in every place a Redis URL can hold one, to a
/// closed port or a missing socket.
fn unreachable_urls() -> Vec<String> {
    let port = closed_port();
    vec![
        format!("redis://user:{PASSWORD}@127.0.0.1:{port}/"),
        format!("redis://:{PASSWORD}@127.0.0.1:{port}/0"),
        format!("redis://user:{PASSWORD}@127.0.0.1:notaport/"),
        format!("redis://user:{PASSWORD}/x@127.0.0.1:{port}/"),
        format!("unix:///nonexistent/corral.sock?db=0&pass={PASSWORD}"),
    ]
}

#[tokio::test]
async fn redis_urls_never_show_their_password() {
    let (captured, _guard) = capture();
    for url in unreachable_urls() {
        let error = RedisStore::connect(&url, quick())
            .await
            .expect_err("nothing listens");
        assert_hidden(&url, &format!("{error} / {error:?}"));
        let error = RedisStore::connect_cluster(std::slice::from_ref(&url), quick())
            .await
            .expect_err("nothing listens");
        assert_hidden(&url, &format!("{error} / {error:?}"));
    }

    // A server whose user `app` has a password.
    let server = RedisServer::start();
    let acl_password = format!(">{PASSWORD}");
    server.cli(&[
        "ACL",
        "SETUSER",
        "app",
        "on",
        &acl_password,
        "~*",
        "&*",
        "+@all",
    ]);
    let url = format!("redis://app:{PASSWORD}@127.0.0.1:{}/", server.port());
    let store = RedisStore::connect(&url, quick())
        .await
        .expect("connect with a password");
    let shown = format!("{store:?}");
    assert_hidden("RedisStore", &shown);
    assert!(shown.contains("redis://app:***@127.0.0.1"), "{shown}");
    let cache = Cache::<String>::builder("redaction")
        .store(store.clone())
        .build()
        .expect("config");
    cache.set("k", "v".to_owned()).await.expect("set");
    assert_eq!(cache.peek("k").await.expect("get").as_deref(), Some("v"));
    assert_hidden("Cache", &format!("{cache:?} {:?}", cache.health().await));
    assert_hidden(
        "CacheBuilder",
        &format!("{:?}", Cache::<String>::builder("b").store(store.clone())),
    );

    let wrong = format!("redis://app:{PASSWORD}-wrong@127.0.0.1:{}/", server.port());
    let error = RedisStore::connect(&wrong, quick())
        .await
        .expect_err("wrong password");
    assert_hidden("wrong password", &format!("{error} / {error:?}"));

    drop(cache);
    drop(store);
    assert_hidden("traces", &captured.text());
}

#[cfg(feature = "config")]
#[tokio::test]
async fn cache_config_never_shows_the_password() {
    let (captured, _guard) = capture();
    for url in unreachable_urls() {
        let config = corral::CacheConfig::default()
            .redis_url(url.clone())
            .store_timeout(Duration::from_millis(300));
        assert_hidden("CacheConfig", &format!("{config:?}"));
        // A standalone store connects in the background: the cache may be
        // built; then its calls report the store's errors.
        match config.build::<String>("redaction").await {
            Ok(cache) => {
                let error = cache.set("k", "v".to_owned()).await.expect_err("no server");
                assert_hidden(&url, &format!("{error} / {error:?} / {cache:?}"));
            }
            Err(error) => assert_hidden(&url, &format!("{error} / {error:?}")),
        }

        let cluster = corral::CacheConfig::default()
            .redis_cluster_urls([url.clone()])
            .store_timeout(Duration::from_millis(300));
        assert_hidden("CacheConfig", &format!("{cluster:?}"));
        // A cluster connects in the background too.
        match cluster.build::<String>("redaction").await {
            Ok(cache) => {
                let error = cache.set("k", "v".to_owned()).await.expect_err("no server");
                assert_hidden(&url, &format!("{error} / {error:?} / {cache:?}"));
            }
            Err(error) => assert_hidden(&url, &format!("{error} / {error:?}")),
        }
    }
    assert_hidden("traces", &captured.text());
}

/// A password holding every printable ASCII byte, in an order drawn from
/// `rng`: `?`, `#`, `@`, `/`, `:` and `%` unencoded among them.
#[cfg(feature = "config")]
fn every_printable_byte(rng: &mut fastrand::Rng) -> String {
    let mut bytes: Vec<u8> = (0x20..=0x7e).collect();
    rng.shuffle(&mut bytes);
    String::from_utf8(bytes).expect("ASCII")
}

/// Whether `text` shows `password` or any 6 bytes of it in a row.
#[cfg(feature = "config")]
fn shows_any_of(text: &str, password: &str) -> Option<String> {
    password
        .as_bytes()
        .windows(6)
        .map(|window| String::from_utf8_lossy(window).into_owned())
        .find(|piece| text.contains(piece.as_str()))
}

#[cfg(feature = "config")]
#[tokio::test]
async fn passwords_of_any_printable_bytes_are_never_shown() {
    let (captured, _guard) = capture();
    let mut rng = fastrand::Rng::with_seed(19);
    let port = closed_port();
    for round in 0..20 {
        let password = every_printable_byte(&mut rng);
        let url = format!("redis://user:{password}@127.0.0.1:{port}/0");
        let config = corral::CacheConfig::default()
            .redis_url(url.clone())
            .store_timeout(Duration::from_millis(200));
        let shown = format!("{config:?}");
        assert_eq!(
            shows_any_of(&shown, &password),
            None,
            "round {round}: {shown}"
        );
        let cluster = corral::CacheConfig::default().redis_cluster_urls([url.clone()]);
        let shown = format!("{cluster:?}");
        assert_eq!(
            shows_any_of(&shown, &password),
            None,
            "round {round}: {shown}"
        );

        let shown = match config.build::<String>("redaction").await {
            Ok(cache) => {
                let error = cache.set("k", "v".to_owned()).await.expect_err("no server");
                format!("{error} / {error:?} / {cache:?}")
            }
            Err(error) => format!("{error} / {error:?}"),
        };
        assert_eq!(
            shows_any_of(&shown, &password),
            None,
            "round {round}: {shown}"
        );
        let shown = match cluster.build::<String>("redaction").await {
            Ok(cache) => format!("{cache:?}"),
            Err(error) => format!("{error} / {error:?}"),
        };
        assert_eq!(
            shows_any_of(&shown, &password),
            None,
            "round {round}: {shown}"
        );
        let traces = captured.text();
        assert_eq!(
            shows_any_of(&traces, &password),
            None,
            "round {round}: traces"
        );
    }
}

#[cfg(feature = "encryption")]
#[tokio::test]
async fn encryption_keys_never_show() {
    use corral::store::MemoryStore;
    use corral::store::StoreKey;
    use corral::Encryption;

    const KEY: [u8; 32] = *b"0123456789abcdef0123456789abcdef";
    const OTHER: [u8; 32] = *b"fedcba9876543210fedcba9876543210";
    // How a key's bytes would look if formatted: as text, as `Debug` of
    // the array, or in hex.
    let leaks = |text: &str| {
        text.contains("0123456789abcdef")
            || text.contains("fedcba9876543210")
            || text.contains("48, 49, 50")
            || text.contains("30313233")
    };
    let (captured, _guard) = capture();
    let encryption = Encryption::new(KEY).previous_key(OTHER);
    let shown = format!("{encryption:?}");
    assert_eq!(shown, "Encryption { keys: 2 }");
    let error = Encryption::from_bytes(&KEY[..31]).expect_err("short");
    assert!(!leaks(&format!("{error} / {error:?}")), "{error:?}");

    let store = MemoryStore::new();
    let builder = Cache::<String>::builder("keys")
        .store(store.clone())
        .encryption(encryption);
    let shown = format!("{builder:?}");
    assert!(!leaks(&shown), "{shown}");
    let cache = builder.build().expect("config");
    assert!(!leaks(&format!("{cache:?}")));
    // A decrypt failure is logged without key material.
    store.put_raw(
        &StoreKey::new(cache.namespace(), "k"),
        vec![0xE1; 64],
        Duration::from_secs(60),
    );
    assert_eq!(cache.peek("k").await.expect("get"), None);
    assert_eq!(cache.stats().decrypt_failures, 1);
    let traces = captured.text();
    assert!(traces.contains("did not decrypt"), "{traces}");
    assert!(!leaks(&traces), "{traces}");
}

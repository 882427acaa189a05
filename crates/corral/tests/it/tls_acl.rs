//! TLS (`rediss://` trusting a test CA made at run time) and ACL users,
//! against real `redis-server` processes: round trips and the backplane
//! over TLS, clear errors for a plain client on the TLS port and for an
//! untrusted certificate, a user restricted to one namespace, and secrets
//! that never show in `Debug`/`Display` output.
#![cfg(feature = "tls")]

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use corral::store::{Store, StoreKey};
use corral::{Cache, Error, RedisConfig, RedisStore, StoreErrorKind};
use corral_testkit::{log_tail, RedisServer, TlsFiles};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};

const OP_TIMEOUT: Duration = Duration::from_millis(500);
const CONNECT_TIMEOUT: Duration = Duration::from_millis(800);
/// Bound on any wait that should end promptly.
const PROMPT: Duration = Duration::from_secs(5);
/// The ACL user's password; must never appear in output.
const PASSWORD: &str = "pw-7f3a91c2e5";

fn config() -> RedisConfig {
    RedisConfig::default()
        .op_timeout(OP_TIMEOUT)
        .connect_timeout(CONNECT_TIMEOUT)
        .reconnect_max_delay(Duration::from_millis(200))
}

/// A test CA and a server certificate for `127.0.0.1` signed by it, as PEM
/// files in a temp dir.
struct Pki {
    _dir: tempfile::TempDir,
    files: TlsFiles,
    ca_pem: String,
}

fn make_pki() -> Pki {
    let ca_key = KeyPair::generate().expect("CA key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "corral test CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key).expect("CA certificate");
    let issuer = Issuer::new(ca_params, ca_key);

    let server_key = KeyPair::generate().expect("server key");
    let mut server_params =
        CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .expect("server params");
    server_params
        .distinguished_name
        .push(DnType::CommonName, "corral test server");
    let server_cert = server_params
        .signed_by(&server_key, &issuer)
        .expect("server certificate");

    let dir = tempfile::Builder::new()
        .prefix("corral-tls-")
        .tempdir()
        .expect("temp dir");
    let write = |name: &str, pem: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, pem).expect("write PEM");
        path
    };
    let ca_pem = ca_cert.pem();
    let files = TlsFiles {
        ca: write("ca.pem", &ca_pem),
        cert: write("server.pem", &server_cert.pem()),
        key: write("server.key", &server_key.serialize_pem()),
    };
    Pki {
        _dir: dir,
        files,
        ca_pem,
    }
}

/// Awaits `future`, failing the test if it takes longer than `limit`.
async fn within<T>(limit: Duration, what: &str, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(limit, future).await {
        Ok(value) => value,
        Err(_) => panic!("{what}: not done within {limit:?}"),
    }
}

async fn connect(server: &RedisServer, url: &str, config: RedisConfig) -> RedisStore {
    RedisStore::connect(url, config)
        .await
        .unwrap_or_else(|e| panic!("connect: {e}\n{}", log_tail(&server.log())))
}

fn cache(store: &RedisStore, name: &str, l1: bool) -> Cache<String> {
    Cache::<String>::builder(name)
        .store(store.clone())
        .l1(l1)
        .ttl(Duration::from_secs(60))
        .build()
        .expect("cache config")
}

/// Fills `key` with `value`, counting the fill in `fills`.
async fn fill(
    cache: &Cache<String>,
    key: &str,
    value: &str,
    fills: &Arc<AtomicUsize>,
) -> Result<String, Error<std::io::Error>> {
    let fills = Arc::clone(fills);
    let value = value.to_owned();
    cache
        .get_or_fill(key, move || async move {
            fills.fetch_add(1, Ordering::SeqCst);
            Ok::<_, std::io::Error>(value)
        })
        .await
}

/// The channel of `cache`'s namespace.
fn channel(cache: &Cache<String>) -> String {
    format!("corral:{}:filled", cache.namespace())
}

/// Waits until `server` reports `count` subscribers of `channel`.
async fn subscribed(server: &RedisServer, channel: &str, count: usize) {
    let begun = Instant::now();
    loop {
        let numsub = server.cli(&["PUBSUB", "NUMSUB", channel]);
        if numsub.lines().nth(1) == Some(count.to_string().as_str()) {
            return;
        }
        assert!(
            begun.elapsed() < PROMPT,
            "{channel} not subscribed: {numsub:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Reads `key` through `cache` until it answers `want`, within 5 s.
async fn read_until(cache: &Cache<String>, key: &str, want: &str) {
    within(PROMPT, "read the new value", async {
        loop {
            let got = cache.peek(key).await.expect("read");
            if got.as_deref() == Some(want) {
                return;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
}

// ---------------------------------------------------------------------------
// TLS
// ---------------------------------------------------------------------------

/// Two stores over TLS: one fills, the other reads it without filling, and
/// the backplane (the subscriber connection, TLS too) drops the second
/// one's L1 copy when the first writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_round_trip_and_backplane() {
    let pki = make_pki();
    let server = RedisServer::start_tls(&pki.files, &[]);
    let url = server.url();
    assert!(url.starts_with("rediss://"), "{url}");
    let tls = config().tls_root_ca(pki.ca_pem.as_bytes());
    let a = connect(&server, &url, tls.clone()).await;
    let b = connect(&server, &url, tls).await;

    let writer = cache(&a, "tls", false);
    let reader = cache(&b, "tls", true);
    let fills = Arc::new(AtomicUsize::new(0));
    assert_eq!(fill(&writer, "k", "v1", &fills).await.expect("fill"), "v1");
    assert_eq!(
        fill(&reader, "k", "other", &fills).await.expect("read"),
        "v1"
    );
    assert_eq!(
        fills.load(Ordering::SeqCst),
        1,
        "one fill across both stores"
    );

    // The reader's subscriber is connected (over TLS) and subscribed; its
    // L1 now holds v1, and only a backplane message can drop it (60 s TTL).
    subscribed(&server, &channel(&reader), 2).await;
    assert_eq!(reader.peek("k").await.expect("read").as_deref(), Some("v1"));
    writer
        .set("k", "v2".to_owned())
        .await
        .expect("set over TLS");
    read_until(&reader, "k", "v2").await;
    assert_eq!(reader.stats().store_errors, 0, "{:?}", reader.stats());
    assert_eq!(writer.stats().store_errors, 0, "{:?}", writer.stats());
}

/// A plain `redis://` client on the TLS port gets a `StoreError` within the
/// connect timeout (plus the script load's operation timeout), not a hang.
#[tokio::test]
async fn plain_client_on_the_tls_port_fails_promptly() {
    let pki = make_pki();
    let server = RedisServer::start_tls(&pki.files, &[]);
    let plain = format!("redis://127.0.0.1:{}/", server.port());
    let begun = Instant::now();
    let error = within(
        PROMPT,
        "plain connect",
        RedisStore::connect(&plain, config()),
    )
    .await
    .expect_err("a plain client cannot talk to a TLS port");
    let took = begun.elapsed();
    eprintln!("plain client on the TLS port: {error} after {took:?}");
    assert!(
        took < CONNECT_TIMEOUT + OP_TIMEOUT + Duration::from_millis(500),
        "{took:?}"
    );
    assert!(
        matches!(
            error.kind(),
            StoreErrorKind::Unavailable | StoreErrorKind::Timeout
        ),
        "{error}"
    );
}

/// Without the test CA, the server's certificate is not trusted: a prompt
/// error, and the same for a `rediss://` URL whose host the certificate
/// does not name.
#[tokio::test]
async fn untrusted_certificates_are_refused() {
    let pki = make_pki();
    let server = RedisServer::start_tls(&pki.files, &[]);
    let begun = Instant::now();
    let error = within(
        PROMPT,
        "connect without the CA",
        RedisStore::connect(&server.url(), config()),
    )
    .await
    .expect_err("the test CA is not a webpki root");
    eprintln!("untrusted CA: {error} after {:?}", begun.elapsed());
    assert!(begun.elapsed() < CONNECT_TIMEOUT + OP_TIMEOUT, "{error}");

    let other_ca = make_pki();
    let error = within(
        PROMPT,
        "connect with another CA",
        RedisStore::connect(
            &server.url(),
            config().tls_root_ca(other_ca.ca_pem.as_bytes()),
        ),
    )
    .await
    .expect_err("signed by another CA");
    eprintln!("other CA: {error}");

    // TLS material with a plain URL is a configuration mistake.
    let error = RedisStore::connect(
        &format!("redis://127.0.0.1:{}/", server.port()),
        config().tls_root_ca(pki.ca_pem.as_bytes()),
    )
    .await
    .expect_err("TLS material needs rediss://");
    assert_eq!(error.kind(), StoreErrorKind::Configuration, "{error}");

    let error = RedisStore::connect(&server.url(), config().tls_root_ca("not PEM"))
        .await
        .expect_err("an unreadable CA");
    assert_eq!(error.kind(), StoreErrorKind::Configuration, "{error}");
    assert!(error.to_string().contains("tls_root_ca"), "{error}");
}

// ---------------------------------------------------------------------------
// ACL
// ---------------------------------------------------------------------------

/// The least a cache user needs: its namespace's keys and channel, and the
/// commands corral sends (reads, the scripts and what they call, pub/sub,
/// `PING`, client tracking; not `ROLE`, which the health check does
/// without).
const CACHE_USER_ACL: &[&str] = &[
    "resetkeys",
    "~corral:?:allowed:*",
    "resetchannels",
    "&corral:allowed:*",
    "-@all",
    "+get",
    "+mget",
    "+pttl",
    "+set",
    "+del",
    "+pexpire",
    "+publish",
    "+evalsha",
    "+eval",
    "+script|load",
    "+subscribe",
    "+unsubscribe",
    "+ping",
    "+client|tracking",
    "+exists",
];

fn add_cache_user(server: &RedisServer) {
    let mut args = vec!["ACL", "SETUSER", "cache-user", "on"];
    let password = format!(">{PASSWORD}");
    args.push(&password);
    args.extend_from_slice(CACHE_USER_ACL);
    assert_eq!(server.cli(&args), "OK");
}

fn user_url(server: &RedisServer, password: &str) -> String {
    format!("redis://cache-user:{password}@127.0.0.1:{}/", server.port())
}

/// A user restricted to `corral:allowed:*` uses the `allowed` cache fully
/// (fills, reads from another store, writes, notifications); on another
/// namespace every call is refused with a clear `Denied` error, which
/// `get_or_fill` counts and fails open on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_user_is_limited_to_its_namespace() {
    let server = RedisServer::start();
    add_cache_user(&server);
    let url = user_url(&server, PASSWORD);
    let a = connect(&server, &url, config()).await;
    let b = connect(&server, &url, config()).await;

    // Allowed: fill on one store, read from the other, write, invalidate,
    // and the backplane (the subscriber authenticates as the user too).
    let writer = cache(&a, "allowed", false);
    let reader = cache(&b, "allowed", true);
    let fills = Arc::new(AtomicUsize::new(0));
    assert_eq!(fill(&writer, "k", "v1", &fills).await.expect("fill"), "v1");
    assert_eq!(fill(&reader, "k", "x", &fills).await.expect("read"), "v1");
    assert_eq!(fills.load(Ordering::SeqCst), 1);
    subscribed(&server, &channel(&reader), 2).await;
    assert_eq!(reader.peek("k").await.expect("read").as_deref(), Some("v1"));
    writer.set("k", "v2".to_owned()).await.expect("set");
    read_until(&reader, "k", "v2").await;
    writer.invalidate("k").await.expect("invalidate");
    writer.invalidate_tag("t").await.expect("invalidate a tag");
    assert_eq!(writer.stats().store_errors, 0, "{:?}", writer.stats());
    let clients = server.cli(&["CLIENT", "LIST"]);
    let user_subscribers = clients
        .lines()
        .filter(|l| l.contains(" user=cache-user ") && l.contains(" sub=1 "))
        .count();
    assert_eq!(user_subscribers, 2, "{clients}");

    // Denied: the same user on another namespace (a cache on the same store).
    let denied = cache(&b, "forbidden", false);
    for (op, result) in [
        ("set", denied.set("k", "v".to_owned()).await),
        ("invalidate", denied.invalidate("k").await),
    ] {
        match result {
            Err(Error::Store(e)) => {
                assert_eq!(e.kind(), StoreErrorKind::Denied, "{op}: {e}");
                let text = e.to_string();
                assert!(text.contains("refused by Redis ACL"), "{op}: {text}");
                assert!(text.contains("NOPERM"), "{op}: {text}");
                assert!(!text.contains(PASSWORD), "{op}: {text}");
            }
            other => panic!("{op}: expected a denied store error, got {other:?}"),
        }
    }
    let fills = Arc::new(AtomicUsize::new(0));
    assert_eq!(
        fill(&denied, "k", "open", &fills)
            .await
            .expect("fails open"),
        "open"
    );
    assert_eq!(fills.load(Ordering::SeqCst), 1);
    assert!(denied.stats().store_errors >= 1, "{:?}", denied.stats());

    // The refused SUBSCRIBE of that namespace's channel did not break the
    // subscriber: the allowed namespace is still notified.
    writer.set("k", "v3".to_owned()).await.expect("set");
    read_until(&reader, "k", "v3").await;
    let forbidden = channel(&denied);
    assert_eq!(
        server.cli(&["PUBSUB", "NUMSUB", &forbidden]),
        format!("{forbidden}\n0")
    );
}

/// A user refused `ROLE` (as [`CACHE_USER_ACL`] is) is asked it once: the
/// health check turns to `PING` and the store works on.
#[tokio::test]
async fn a_user_refused_role_is_checked_with_ping() {
    let server = RedisServer::start();
    add_cache_user(&server);
    let url = user_url(&server, PASSWORD);
    let store = connect(
        &server,
        &url,
        config().health_interval(Duration::from_millis(20)),
    )
    .await;
    // No cache listens: the command connection is the store's only one,
    // and its health checks the only PINGs.
    corral_testkit::until("five health checks by PING", || {
        server.command_stats().get("ping").copied().unwrap_or(0) >= 5
    })
    .await;
    let errors = server.cli(&["INFO", "errorstats"]);
    assert!(
        errors
            .lines()
            .any(|line| line.trim() == "errorstat_NOPERM:count=2"),
        "ROLE refused once, and TIME (asked as the connection was made): {errors:?}"
    );
    let cache = cache(&store, "allowed", false);
    cache.set("k", "v".into()).await.expect("set");
    // Without the server's clock, a value names no expiry: read with its
    // `PTTL`.
    server.reset_stats();
    let other = connect(&server, &url, config()).await;
    let read = other
        .get(&StoreKey::new(cache.namespace(), "k"))
        .await
        .expect("read")
        .expect("present");
    assert!(read.remaining.is_some());
    assert_eq!(server.command_stats().get("pttl"), Some(&1));
}

/// A wrong password fails `connect` with `Denied`, and nothing shows it.
#[tokio::test]
async fn wrong_password_is_denied() {
    let server = RedisServer::start();
    add_cache_user(&server);
    let wrong = "wrong-pw-5d1e88";
    let error = RedisStore::connect(&user_url(&server, wrong), config())
        .await
        .expect_err("wrong password");
    assert_eq!(error.kind(), StoreErrorKind::Denied, "{error}");
    let shown = format!("{error} {error:?}");
    assert!(shown.contains("authentication refused"), "{shown}");
    assert!(!shown.contains(wrong), "{shown}");
}

// ---------------------------------------------------------------------------
// Secrets
// ---------------------------------------------------------------------------

/// `Debug` of a store and of a config holding a CA and a client key, and
/// errors about a bad client key, show no password and no key material.
#[tokio::test]
async fn secrets_are_never_shown() {
    let pki = make_pki();
    let server = RedisServer::start();
    add_cache_user(&server);
    let store = connect(&server, &user_url(&server, PASSWORD), config()).await;
    let shown = format!("{store:?}");
    assert!(!shown.contains(PASSWORD), "{shown}");
    assert!(shown.contains("cache-user:***@"), "{shown}");

    let client_key = KeyPair::generate().expect("client key").serialize_pem();
    let key_body = client_key.lines().nth(1).expect("a PEM body line");
    let config = config()
        .tls_root_ca(pki.ca_pem.as_bytes())
        .tls_client_auth(pki.ca_pem.as_bytes(), client_key.as_bytes());
    let shown = format!("{config:?}");
    assert!(!shown.contains(key_body), "{shown}");
    assert!(!shown.contains("PRIVATE KEY"), "{shown}");
    assert!(!shown.contains("BEGIN CERTIFICATE"), "{shown}");

    // A key that does not fit its certificate, and a broken key.
    let tls_server = RedisServer::start_tls(&pki.files, &[]);
    let url = format!(
        "rediss://cache-user:{PASSWORD}@127.0.0.1:{}/",
        tls_server.port()
    );
    for config in [
        config,
        RedisConfig::default().tls_client_auth(pki.ca_pem.as_bytes(), &client_key[..60]),
    ] {
        let error = RedisStore::connect(&url, config.connect_timeout(CONNECT_TIMEOUT))
            .await
            .expect_err("no usable client key");
        assert_eq!(error.kind(), StoreErrorKind::Configuration, "{error}");
        let shown = format!("{error} {error:?}");
        assert!(!shown.contains(PASSWORD), "{shown}");
        assert!(!shown.contains(key_body), "{shown}");
    }
}

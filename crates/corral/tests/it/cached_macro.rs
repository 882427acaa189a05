//! `#[corral::cached]` at run time: a herd of 1,000 calls runs the body once
//! (in process, and across two caches sharing a real Redis), `Err` is not
//! cached while `Ok` is, and keys are the formatted templates.
#![cfg(feature = "macros")]

use std::num::ParseIntError;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use corral::{Cache, Error, FillOptions};
use corral_testkit::{until, Gate};

const CALLERS: usize = 1_000;

fn cache<V>(name: &str) -> Cache<V>
where
    V: serde::Serialize + serde::de::DeserializeOwned + Clone + Send + Sync + 'static,
{
    Cache::builder(name)
        .ttl(Duration::from_secs(60))
        .build()
        .expect("valid config")
}

/// A source that may have nothing, read through a `Cache<String>` (not a
/// `Cache<Option<String>>`): counts its runs.
#[corral::cached(cache = users, key = "user:{id}")]
async fn find_user(
    users: Cache<String>,
    runs: Arc<AtomicUsize>,
    id: u64,
) -> Result<Option<String>, std::io::Error> {
    runs.fetch_add(1, SeqCst);
    Ok((id == 42).then(|| "Ada".to_owned()))
}

#[tokio::test(start_paused = true)]
async fn an_option_result_caches_none_as_not_found_for_the_negative_ttl() {
    let users: Cache<String> = Cache::builder("find_user")
        .ttl(Duration::from_secs(60))
        .negative_ttl(Duration::from_secs(5))
        .clock(corral::clock::TokioClock::new())
        .build()
        .expect("valid config");
    let runs = Arc::new(AtomicUsize::new(0));
    let find = |id| find_user(users.clone(), Arc::clone(&runs), id);

    let found: Result<Option<String>, Error<std::io::Error>> = find(42).await;
    assert_eq!(found.expect("found").as_deref(), Some("Ada"));
    assert_eq!(find(7).await.expect("looked up"), None);
    assert_eq!(runs.load(SeqCst), 2);
    // Both answers are cached: the value, and the "not found".
    assert_eq!(find(42).await.expect("hit").as_deref(), Some("Ada"));
    assert_eq!(find(7).await.expect("hit"), None);
    assert_eq!(runs.load(SeqCst), 2);
    assert!(matches!(
        users.peek_entry("user:7").await.expect("peek"),
        corral::Cached::NotFound { .. }
    ));

    // Past the negative TTL (with jitter), within the TTL of values: only
    // the "not found" is asked again.
    tokio::time::advance(Duration::from_secs(10)).await;
    assert_eq!(find(7).await.expect("looked up again"), None);
    assert_eq!(runs.load(SeqCst), 3);
    assert_eq!(
        find(42).await.expect("still cached").as_deref(),
        Some("Ada")
    );
    assert_eq!(runs.load(SeqCst), 3);
}

static HERD: LazyLock<Cache<String>> = LazyLock::new(|| cache("herd"));
static HERD_RUNS: AtomicUsize = AtomicUsize::new(0);

/// Waits at `gate` so the test can gather every caller first.
#[corral::cached(cache = HERD, key = "user:{id}")]
async fn herd_user(id: u64, gate: Gate) -> String {
    HERD_RUNS.fetch_add(1, SeqCst);
    gate.wait().await;
    format!("user {id}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_calls_run_the_body_once_in_process() {
    let gate = Gate::new();
    let calls: Vec<_> = (0..CALLERS)
        .map(|_| tokio::spawn(herd_user(7, gate.clone())))
        .collect();
    until(
        "the body runs and every other call joined its flight",
        || HERD_RUNS.load(SeqCst) == 1 && HERD.stats().coalesced == CALLERS as u64 - 1,
    )
    .await;
    assert_eq!(HERD_RUNS.load(SeqCst), 1);
    gate.open();
    for call in calls {
        assert_eq!(call.await.expect("caller task").expect("value"), "user 7");
    }
    assert_eq!(HERD_RUNS.load(SeqCst), 1);
    assert_eq!(HERD.stats().fills, 1);
    // Cached now: a call with a closed gate returns at once.
    assert_eq!(herd_user(7, Gate::new()).await.expect("hit"), "user 7");
    assert_eq!(HERD_RUNS.load(SeqCst), 1);
}

/// What a service would hold: its cache and its source of truth.
#[cfg(feature = "redis")]
struct App {
    users: Cache<String>,
    runs: Arc<AtomicUsize>,
    gate: Gate,
}

/// The cache is a field of an argument that the body also uses.
#[cfg(feature = "redis")]
#[corral::cached(cache = app.users, key = "user:{id}")]
async fn redis_user(app: Arc<App>, id: u64) -> String {
    app.runs.fetch_add(1, SeqCst);
    app.gate.wait().await;
    format!("user {id}")
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_calls_through_two_caches_on_redis_run_the_body_once() {
    use corral::{RedisConfig, RedisStore};
    use corral_testkit::{log_tail, RedisServer};

    let server = RedisServer::start();
    let runs = Arc::new(AtomicUsize::new(0));
    let gate = Gate::new();
    // Two caches on two connections: in-process coalescing cannot join
    // them, only the fill lease in Redis can.
    let mut apps = Vec::new();
    for _ in 0..2 {
        let store = RedisStore::connect(&server.url(), RedisConfig::default())
            .await
            .unwrap_or_else(|e| panic!("connect: {e}\n{}", log_tail(&server.log())));
        let users = Cache::builder("users")
            .store(store)
            .fill_timeout(Duration::from_secs(20))
            .build()
            .expect("valid config");
        apps.push(Arc::new(App {
            users,
            runs: Arc::clone(&runs),
            gate: gate.clone(),
        }));
    }
    let calls: Vec<_> = (0..CALLERS)
        .map(|i| tokio::spawn(redis_user(Arc::clone(&apps[i % 2]), 42)))
        .collect();
    let per_cache = (CALLERS / 2) as u64;
    until(
        "one body runs, every call joined a flight, a leader waits on the lease",
        || {
            let (a, b) = (apps[0].users.stats(), apps[1].users.stats());
            runs.load(SeqCst) == 1
                && a.coalesced == per_cache - 1
                && b.coalesced == per_cache - 1
                && a.lease_waits + b.lease_waits >= 1
        },
    )
    .await;
    assert_eq!(runs.load(SeqCst), 1);
    gate.open();
    for call in calls {
        assert_eq!(call.await.expect("caller task").expect("value"), "user 42");
    }
    assert_eq!(runs.load(SeqCst), 1, "{}", log_tail(&server.log()));
    let fills: u64 = apps.iter().map(|app| app.users.stats().fills).sum();
    assert_eq!(fills, 1);
    for app in &apps {
        assert_eq!(
            app.users.peek("user:42").await.expect("get"),
            Some("user 42".to_owned())
        );
    }
}

#[derive(Debug, PartialEq)]
enum Down {
    FirstCall,
    NotANumber,
}

impl std::fmt::Display for Down {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}")
    }
}

impl std::error::Error for Down {}

impl From<ParseIntError> for Down {
    fn from(_: ParseIntError) -> Self {
        Self::NotANumber
    }
}

static FLAKY: LazyLock<Cache<u32>> = LazyLock::new(|| cache("flaky"));
static FLAKY_RUNS: AtomicUsize = AtomicUsize::new(0);

/// Fails on its first run; `return` and `?` work as in any `async fn`.
#[corral::cached(cache = FLAKY, key = "flaky:{text}")]
async fn flaky(text: String) -> Result<u32, Down> {
    if FLAKY_RUNS.fetch_add(1, SeqCst) == 0 {
        return Err(Down::FirstCall);
    }
    let number: u32 = text.parse()?;
    Ok(number * 10)
}

#[tokio::test]
async fn an_err_is_not_cached_and_an_ok_is() {
    match flaky("4".to_owned()).await {
        Err(Error::Fill(error)) => assert_eq!(*error, Down::FirstCall),
        other => panic!("expected the body's error, got {other:?}"),
    }
    assert_eq!(FLAKY.peek("flaky:4").await.expect("get"), None);
    assert_eq!(flaky("4".to_owned()).await.expect("second run"), 40);
    assert_eq!(FLAKY_RUNS.load(SeqCst), 2);
    assert_eq!(flaky("4".to_owned()).await.expect("hit"), 40);
    assert_eq!(FLAKY_RUNS.load(SeqCst), 2, "the Ok was cached");
    assert_eq!(FLAKY.peek("flaky:4").await.expect("get"), Some(40));

    // `?` converted the error with `From`; nothing cached.
    let error = flaky("four".to_owned()).await.expect_err("not a number");
    assert_eq!(error.fill_error().map(|e| &**e), Some(&Down::NotANumber));
    assert_eq!(FLAKY.peek("flaky:four").await.expect("get"), None);
}

static KEYS: LazyLock<Cache<String>> = LazyLock::new(|| cache("keys"));

#[corral::cached(cache = KEYS)]
async fn by_default(org: String, id: u64) -> String {
    format!("default {org}/{id}")
}

#[corral::cached(cache = KEYS, key = "{org}/user/{id}{{v1}}")]
async fn by_template(id: u64, org: String) -> String {
    format!("template {org}/{id}")
}

#[corral::cached(cache = KEYS)]
async fn no_arguments() -> String {
    "constant".to_owned()
}

#[corral::cached(
    cache = KEYS,
    key = "tagged:{id}",
    options = FillOptions::new().ttl(Duration::from_secs(30)).tags([format!("org:{org}")])
)]
async fn tagged(org: String, id: u64) -> String {
    format!("tagged {org}/{id}")
}

#[tokio::test]
async fn keys_are_the_formatted_templates() {
    let value: Result<String, Error> = by_default("acme".to_owned(), 7).await;
    assert_eq!(value.expect("value"), "default acme/7");
    by_template(7, "acme".to_owned()).await.expect("value");
    no_arguments().await.expect("value");
    tagged("acme".to_owned(), 9).await.expect("value");

    let get = |key: &'static str| async move { KEYS.peek(key).await.expect("get") };
    assert_eq!(
        get("by_default:acme:7").await.as_deref(),
        Some("default acme/7")
    );
    assert_eq!(
        get("acme/user/7{v1}").await.as_deref(),
        Some("template acme/7")
    );
    assert_eq!(get("no_arguments").await.as_deref(), Some("constant"));
    assert_eq!(get("tagged:9").await.as_deref(), Some("tagged acme/9"));
    // The options built from the arguments applied: the entry has the tag.
    KEYS.invalidate_tag("org:acme")
        .await
        .expect("invalidate tag");
    assert_eq!(get("tagged:9").await, None);
    assert_eq!(KEYS.stats().fills, 4);
}

static OPTION_BUILDS: AtomicUsize = AtomicUsize::new(0);

fn counted_options(org: &str) -> FillOptions {
    OPTION_BUILDS.fetch_add(1, SeqCst);
    FillOptions::new().tags([format!("org:{org}")])
}

#[corral::cached(cache = cache, key = "lazy:{id}", options = counted_options(&org))]
async fn lazily_tagged(cache: Cache<String>, org: String, id: u64) -> String {
    format!("lazy {org}/{id}")
}

#[tokio::test]
async fn options_are_built_only_by_a_call_that_misses() {
    let cache: Cache<String> = cache("lazy_options");
    for _ in 0..3 {
        let value = lazily_tagged(cache.clone(), "acme".to_owned(), 1).await;
        assert_eq!(value.expect("value"), "lazy acme/1");
    }
    assert_eq!(OPTION_BUILDS.load(SeqCst), 1, "built by the one miss");
    assert_eq!(cache.stats().hits, 2);
    // They applied: the entry carries the tag.
    cache
        .invalidate_tag("org:acme")
        .await
        .expect("invalidate tag");
    assert_eq!(cache.peek("lazy:1").await.expect("peek"), None);
}

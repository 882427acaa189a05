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

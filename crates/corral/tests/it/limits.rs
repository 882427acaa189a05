//! Limits on every path: oversized values on write (a clear error) and on
//! read (a counted miss, refilled), and key rules on every operation.

use std::collections::HashMap;
use std::time::Duration;

use corral::store::{MemoryStore, Store};
use corral::{Answer, Cache, Error, FillOptions, InvalidKey, RedisConfig, RedisStore};
use corral_testkit::RedisServer;

const LIMIT: usize = 1024;

fn big() -> String {
    "x".repeat(4 * LIMIT)
}

fn ok(
    value: String,
) -> impl FnOnce() -> std::future::Ready<Result<String, std::io::Error>> + Send + 'static {
    move || std::future::ready(Ok(value))
}

/// A cache of `name` on `store` refusing values over `max` bytes.
fn cache(store: &(impl Store + Clone), name: &str, max: usize) -> Cache<String> {
    Cache::<String>::builder(name)
        .store(store.clone())
        .l1(false)
        .max_value_bytes(max)
        .ttl(Duration::from_secs(60))
        .build()
        .expect("config")
}

async fn oversized_values_on_both_paths(store: &(impl Store + Clone)) {
    let small = cache(store, "limits", LIMIT);

    // Write: a clear error naming the limit; nothing stored.
    let refused = small.set("k", big()).await.expect_err("too big");
    match &refused {
        Error::Encode { message } => assert!(message.contains(&LIMIT.to_string()), "{message}"),
        other => panic!("expected Encode, got {other:?}"),
    }
    assert_eq!(small.peek("k").await.expect("read"), None);

    // A fill answering an oversized value: the callers get it, the store
    // does not (counted), so the next call fills again.
    let encode_failures = small.stats().encode_failures;
    let value = small.get_or_fill("f", ok(big())).await.expect("value");
    assert_eq!(value.len(), 4 * LIMIT);
    assert_eq!(small.stats().encode_failures, encode_failures + 1);
    let fills = small.stats().fills;
    small.get_or_fill("f", ok(big())).await.expect("value");
    assert_eq!(
        small.stats().fills,
        fills + 1,
        "not stored, so filled again"
    );

    // Read: a cache allowing more writes a value this one refuses to read:
    // a counted miss, and a fill overwrites it.
    let large = cache(store, "limits", 16 * LIMIT);
    large.set("r", big()).await.expect("within its limit");
    let decode_failures = small.stats().decode_failures;
    assert_eq!(
        small.peek("r").await.expect("read"),
        None,
        "over the reader's limit"
    );
    assert_eq!(small.stats().decode_failures, decode_failures + 1);
    let refilled = small
        .get_or_fill("r", ok("small".into()))
        .await
        .expect("value");
    assert_eq!(refilled, "small");
    assert_eq!(
        large.peek("r").await.expect("read").as_deref(),
        Some("small"),
        "overwritten"
    );
}

#[tokio::test]
async fn oversized_values_embedded_store() {
    oversized_values_on_both_paths(&MemoryStore::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_values_redis() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), RedisConfig::default())
        .await
        .expect("store");
    oversized_values_on_both_paths(&store).await;
}

#[tokio::test]
async fn invalid_keys_are_refused_on_every_path() {
    let cache = cache(&MemoryStore::new(), "keys", LIMIT);
    let long = "k".repeat(corral::MAX_KEY_LEN + 1);
    for key in ["", "a\nb", "nul\0", long.as_str()] {
        let invalid = |e: &Error<std::io::Error>| e.is_invalid_key();
        assert!(
            cache.peek(key).await.expect_err("get").is_invalid_key(),
            "{key:?}"
        );
        assert!(cache
            .peek_entry(key)
            .await
            .expect_err("lookup")
            .is_invalid_key());
        assert!(cache
            .set(key, "v".into())
            .await
            .expect_err("set")
            .is_invalid_key());
        assert!(cache
            .set_with_ttl(key, "v".into(), Duration::from_secs(1))
            .await
            .expect_err("set_with_ttl")
            .is_invalid_key());
        assert!(cache
            .invalidate(key)
            .await
            .expect_err("invalidate")
            .is_invalid_key());
        assert!(cache
            .invalidate_tag(key)
            .await
            .expect_err("tag")
            .is_invalid_key());
        assert!(invalid(
            &cache
                .get_or_fill(key, ok("v".into()))
                .await
                .expect_err("get_or_fill")
        ));
        assert!(invalid(
            &cache
                .get_or_fill(key, ok("v".into()))
                .await
                .expect_err("get_or_fill with options")
        ));
        let tagged = FillOptions::new().tags([key]);
        assert!(invalid(
            &cache
                .get_or_fill("fine", ok("v".into()))
                .options(tagged)
                .await
                .expect_err("a bad tag")
        ));
        assert!(invalid(
            &cache
                .get_or_fill_option(key, || async {
                    Ok::<_, std::io::Error>(Some("v".to_owned()))
                })
                .await
                .expect_err("optional")
        ));
        assert!(invalid(
            &cache
                .get_or_fill_answer(key, || async {
                    Ok::<_, std::io::Error>(Answer::value("v".to_owned()))
                })
                .await
                .expect_err("fetch")
        ));
        let batch = cache
            .get_many_or_fill(&[key, "fine"], |keys: Vec<String>| async move {
                Ok::<_, std::io::Error>(
                    keys.into_iter()
                        .map(|k| (k, "v".to_owned()))
                        .collect::<HashMap<_, _>>(),
                )
            })
            .await;
        assert!(batch
            .get(key)
            .expect("an answer per key")
            .as_ref()
            .expect_err("batch")
            .is_invalid_key());
        assert_eq!(
            batch.get("fine").expect("answered").as_deref().ok(),
            Some("v")
        );
    }
    let too_many: Vec<String> = (0..100).map(|i| format!("t{i}")).collect();
    let refused = cache
        .get_or_fill("k", ok("v".into()))
        .options(FillOptions::new().tags(too_many))
        .await
        .expect_err("too many tags");
    assert!(
        matches!(refused, Error::InvalidKey(InvalidKey::TooManyTags { .. })),
        "{refused:?}"
    );
    assert_eq!(
        cache.stats().fills,
        1,
        "only the valid batch key was filled"
    );
}

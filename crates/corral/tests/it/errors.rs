//! Errors as a Rust service consumes them: `?` into `anyhow` and
//! `Box<dyn Error>` whatever the fill's error type (a std error, an
//! `anyhow::Error`, a boxed error, a message), a source chain down to the
//! fill's own error with each cause said once, and fills that cannot fail.

use std::convert::Infallible;
use std::io;

use corral::{Cache, Error};

#[derive(Debug)]
struct DbError(io::Error);

impl std::fmt::Display for DbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "database: {}", self.0)
    }
}

impl std::error::Error for DbError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// A fill's answer that must never be asked for.
fn never_called() -> Result<String, Infallible> {
    unreachable!("cached")
}

fn cache() -> Cache<String> {
    Cache::builder("errors").build().expect("valid config")
}

async fn failing(cache: &Cache<String>) -> Result<String, Error<DbError>> {
    cache
        .get_or_fill("k", || async {
            Err::<String, _>(DbError(io::Error::new(
                io::ErrorKind::TimedOut,
                "no answer",
            )))
        })
        .await
}

#[tokio::test]
async fn anyhow_chain_reaches_the_fills_io_error() {
    let cache = cache();
    let outcome: anyhow::Result<String> = async { Ok(failing(&cache).await?) }.await;
    let error = outcome.expect_err("the fill failed");
    let chain: Vec<String> = error.chain().map(ToString::to_string).collect();
    assert_eq!(chain, ["fill failed", "database: no answer", "no answer"],);
    let io = error
        .chain()
        .find_map(|cause| cause.downcast_ref::<io::Error>())
        .expect("the io::Error is in the chain");
    assert_eq!(io.kind(), io::ErrorKind::TimedOut);
    assert!(error.chain().any(|cause| cause.is::<DbError>()));
}

#[tokio::test]
async fn box_dyn_error_keeps_the_source() {
    let cache = cache();
    let outcome: Result<String, Box<dyn std::error::Error + Send + Sync>> =
        async { Ok(failing(&cache).await?) }.await;
    let error = outcome.expect_err("the fill failed");
    let fill = error.source().expect("the fill's error");
    assert!(fill.is::<DbError>(), "{fill:?}");
    let io = fill.source().expect("the io error");
    assert_eq!(
        io.downcast_ref::<io::Error>().map(io::Error::kind),
        Some(io::ErrorKind::TimedOut)
    );
}

#[tokio::test]
async fn an_infallible_fill_returns_its_value() {
    let cache = cache();
    let value = cache
        .get_or_fill("k", || async { Ok::<_, Infallible>("computed".to_owned()) })
        .await
        .expect("value");
    assert_eq!(value, "computed");
    let again = cache
        .get_or_fill("k", || async { never_called() })
        .await
        .expect("cached value");
    assert_eq!(again, "computed");
    let invalid: Result<String, Error> = cache
        .get_or_fill("", || async { Ok::<_, Infallible>(String::new()) })
        .await;
    assert!(invalid.expect_err("an empty key").is_invalid_key());
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

async fn anyhow_fill(cache: &Cache<String>) -> anyhow::Result<String> {
    use anyhow::Context as _;
    let name = cache
        .get_or_fill("anyhow", || async {
            let port: u16 = "x".parse().map_err(anyhow::Error::from)?;
            Err(anyhow::anyhow!("db down on port {port}"))
        })
        .await
        .context("loading a user")?;
    Ok(name)
}

#[tokio::test]
async fn a_fill_failing_with_anyhow_composes_into_anyhow() {
    let cache = cache();
    let error = anyhow_fill(&cache).await.expect_err("the fill failed");
    let chain: Vec<String> = error.chain().map(ToString::to_string).collect();
    assert_eq!(
        chain,
        [
            "loading a user",
            "fill failed",
            "invalid digit found in string"
        ],
    );
    assert!(error
        .chain()
        .any(|cause| cause.is::<std::num::ParseIntError>()));
}

#[tokio::test]
async fn a_fill_failing_with_a_boxed_error_composes_into_a_box() {
    let cache = cache();
    let outcome: Result<String, BoxError> = async {
        let value = cache
            .get_or_fill("boxed", || async {
                Err::<String, BoxError>(Box::new(DbError(io::Error::other("reset"))))
            })
            .await?;
        Ok(value)
    }
    .await;
    let error = outcome.expect_err("the fill failed");
    assert_eq!(error.to_string(), "fill failed");
    let cause = error.source().expect("the boxed error");
    assert!(cause.is::<DbError>(), "{cause:?}");
    assert_eq!(cause.to_string(), "database: reset");
}

#[tokio::test]
async fn a_message_is_said_by_the_display_and_has_no_source() {
    let cache = cache();
    let outcome: Result<String, BoxError> = async {
        Ok(cache
            .get_or_fill("message", || async {
                Err::<String, _>("db down".to_owned())
            })
            .await?)
    }
    .await;
    let error = outcome.expect_err("the fill failed");
    assert_eq!(error.to_string(), "fill failed: db down");
    assert!(error.source().is_none());
}

#[tokio::test]
async fn errors_without_a_fill_widen_into_a_fills_error() {
    let cache = cache();
    async fn refresh(cache: &Cache<String>) -> Result<String, Error<DbError>> {
        cache.invalidate("").await.map_err(Error::widen)?;
        cache
            .get_or_fill("k", || async { Ok("v".to_owned()) })
            .await
    }
    let error = refresh(&cache).await.expect_err("an empty key");
    assert!(error.is_invalid_key());
    // Display says what happened; the cause is the source, said once.
    assert_eq!(error.to_string(), "key rejected");
    let cause = std::error::Error::source(&error).expect("the key's error");
    assert!(cause.is::<corral::InvalidKey>());
    assert_eq!(
        format!("{:#}", anyhow::Error::from(error)),
        "key rejected: invalid key: empty"
    );
}

#[cfg(all(feature = "config", feature = "redis"))]
#[tokio::test]
async fn a_store_refusal_is_said_once_in_a_config_error() {
    let refused = corral::CacheConfig::production("redis://127.0.0.1:notaport/")
        .build::<String>("users")
        .await
        .expect_err("a malformed URL");
    let store = refused
        .store_error()
        .expect("the store's error")
        .to_string();
    assert!(!refused.to_string().contains(&store), "{refused}");
    let chain = format!("{:#}", anyhow::Error::from(refused));
    assert_eq!(chain.matches(&store).count(), 1, "{chain}");
}

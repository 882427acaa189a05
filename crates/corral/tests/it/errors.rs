//! Errors as a Rust service consumes them: `?` into `anyhow` and
//! `Box<dyn Error>`, a source chain down to the fill's own error, and fills
//! that cannot fail.

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
    assert_eq!(
        chain,
        [
            "fill failed: database: no answer",
            "database: no answer",
            "no answer"
        ],
    );
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

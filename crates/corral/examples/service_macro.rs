//! A cached function: `#[corral::cached]` turns an `async fn` into a
//! read-through call of a cache, keyed by its arguments.
//!
//! ```sh
//! cargo run -p corral-cache --example service_macro
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::LazyLock;
use std::time::Duration;

use corral::Cache;

static PROFILES: LazyLock<Cache<String>> =
    LazyLock::new(|| Cache::builder("profiles").build().expect("valid config"));

/// Queries made, to show how many the cache saved.
static QUERIES: AtomicUsize = AtomicUsize::new(0);

#[derive(Debug)]
struct DbError;

impl std::fmt::Display for DbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the database did not answer")
    }
}

impl std::error::Error for DbError {}

/// A user's profile: the body runs once per user per minute, however many
/// requests ask at once.
#[corral::cached(cache = PROFILES, key = "profile:{id}", ttl = Duration::from_secs(60))]
async fn profile(id: u64) -> Result<String, DbError> {
    QUERIES.fetch_add(1, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(50)).await; // the query
    Ok(format!("profile of user {id}"))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A hundred concurrent requests for the same user: one query.
    let requests = (0..100).map(|_| tokio::spawn(profile(7)));
    for request in requests {
        request.await??;
    }
    println!("{}", profile(7).await?);
    println!("queries: {}", QUERIES.load(Ordering::Relaxed));
    Ok(())
}

//! Errors rustc reports in the expansion, pointing at the user's code.
use std::sync::LazyLock;

use corral::Cache;

static NAMES: LazyLock<Cache<String>> =
    LazyLock::new(|| Cache::builder("names").build().expect("valid config"));

struct Opaque;

// An argument in the key must implement `Display`.
#[corral::cached(cache = NAMES)]
async fn not_display(id: Opaque) -> String {
    let _ = id;
    String::new()
}

// The cache's value type must be the function's.
#[corral::cached(cache = NAMES, key = "n:{n}")]
async fn wrong_cache(n: u32) -> u32 {
    n
}

// The body's future must be `Send`: it runs on its own task.
#[corral::cached(cache = NAMES, key = "rc:{n}")]
async fn not_send(n: u32) -> String {
    let rc = std::rc::Rc::new(n);
    std::future::ready(()).await;
    rc.to_string()
}

fn main() {}

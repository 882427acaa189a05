use std::sync::LazyLock;

use corral::Cache;

static CACHE: LazyLock<Cache<u32>> =
    LazyLock::new(|| Cache::builder("c").build().expect("valid config"));

#[corral::cached(key = "n:{n}")]
async fn missing_cache(n: u32) -> u32 {
    n
}

#[corral::cached(cache = CACHE, ttl_secs = 5)]
async fn unknown_argument(n: u32) -> u32 {
    n
}

#[corral::cached(cache = CACHE, key = "user:{id}")]
async fn unknown_name(user_id: u32, org: String) -> u32 {
    user_id + org.len() as u32
}

#[corral::cached(cache = CACHE, key = "n:{n:>4}")]
async fn format_spec(n: u32) -> u32 {
    n
}

#[corral::cached(cache = CACHE, key = "n:{n")]
async fn unclosed(n: u32) -> u32 {
    n
}

#[corral::cached(cache = CACHE, key = format!("n:{n}"))]
async fn key_not_a_literal(n: u32) -> u32 {
    n
}

#[corral::cached(cache = CACHE, options = corral::FillOptions::new(), ttl = std::time::Duration::from_secs(1))]
async fn options_and_ttl(n: u32) -> u32 {
    n
}

#[corral::cached(cache = CACHE, cache = CACHE)]
async fn twice(n: u32) -> u32 {
    n
}

fn main() {}

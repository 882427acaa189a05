use std::borrow::Cow;
use std::sync::LazyLock;

use corral::Cache;

static CACHE: LazyLock<Cache<u32>> =
    LazyLock::new(|| Cache::builder("c").build().expect("valid config"));

#[corral::cached(cache = CACHE)]
fn not_async(id: u32) -> u32 {
    id
}

struct Repo;

impl Repo {
    #[corral::cached(cache = CACHE)]
    async fn with_self(&self, id: u32) -> u32 {
        id
    }
}

#[corral::cached(cache = CACHE)]
async fn borrowed(name: &str) -> u32 {
    name.len() as u32
}

#[corral::cached(cache = CACHE)]
async fn with_lifetime<'a>(name: Cow<'a, str>) -> u32 {
    name.len() as u32
}

#[corral::cached(cache = CACHE)]
async fn pattern((a, b): (u32, u32)) -> u32 {
    a + b
}

#[corral::cached(cache = CACHE)]
async fn impl_trait(n: impl Into<u32>) -> u32 {
    n.into()
}

#[corral::cached(cache = CACHE)]
async fn generic<T: Into<u32>>(n: T) -> u32 {
    n.into()
}

#[corral::cached(cache = CACHE)]
async fn alias(n: u32) -> std::io::Result<u32> {
    Ok(n)
}

#[corral::cached(cache = CACHE)]
async fn nothing(n: u32) {
    let _ = n;
}

fn main() {}

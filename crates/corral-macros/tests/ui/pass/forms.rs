//! Every accepted form compiles, keeps its docs and visibility, and runs.
#![deny(missing_docs, unused_mut)]

use std::borrow::Cow;
use std::num::ParseIntError;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use corral::{Cache, Error, FillOptions};

static NUMBERS: LazyLock<Cache<u32>> =
    LazyLock::new(|| Cache::builder("numbers").build().expect("valid config"));

/// A public API whose functions are cached.
pub mod api {
    use super::*;

    /// `?` converts with `From`, `return` leaves the body early.
    #[corral::cached(cache = NUMBERS, key = "parsed:{text}", ttl = Duration::from_secs(5))]
    pub async fn parsed(text: String) -> std::result::Result<u32, ParseIntError> {
        if text.is_empty() {
            return Ok(0);
        }
        let number: u32 = text.parse()?;
        Ok(number)
    }

    /// A `&'static` argument, a `mut` argument and a raw identifier.
    #[corral::cached(cache = &NUMBERS)]
    #[allow(clippy::needless_pass_by_value)]
    pub async fn mixed(label: &'static str, mut count: u32, r#type: Cow<'static, str>) -> u32 {
        count += 1;
        count + label.len() as u32 + r#type.len() as u32
    }

    /// An `Option` value, read through a `Cache<u32>` (`None` is cached as
    /// "not found"): `?` on options inside an infallible body.
    #[corral::cached(cache = OPTIONAL, key = "half:{n}")]
    pub async fn half(n: u32) -> Option<u32> {
        let even = (n % 2 == 0).then_some(n)?;
        Some(even / 2)
    }

    static OPTIONAL: LazyLock<Cache<u32>> =
        LazyLock::new(|| Cache::builder("optional").build().expect("valid config"));
}

/// State handed to handlers.
pub struct State {
    numbers: Cache<u32>,
}

impl State {
    /// An associated fn (no `self`) may name `Self` and use its argument's
    /// field as the cache.
    #[corral::cached(
        cache = state.numbers,
        key = "doubled:{n}",
        options = FillOptions::new().tags([format!("n:{n}")]),
    )]
    pub async fn doubled(state: Arc<Self>, n: u32) -> Result<u32, std::io::Error> {
        Ok(Self::double(&state, n))
    }

    fn double(_: &Self, n: u32) -> u32 {
        n * 2
    }
}

/// The cache passed by value, left out of the key.
#[corral::cached(cache = cache, key = "tripled:{n}")]
pub async fn tripled(cache: Cache<u32>, n: u32) -> u32 {
    n * 3
}

fn assert_send<T: Send + 'static>(future: T) -> T {
    future
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let parsed: Result<u32, Error<ParseIntError>> =
        assert_send(api::parsed("12".to_owned())).await;
    assert_eq!(parsed.expect("parsed"), 12);
    assert!(api::parsed("x".to_owned()).await.expect_err("not a number").is_fill_error());

    let mixed: Result<u32, Error> = api::mixed("ab", 1, Cow::Borrowed("xyz")).await;
    assert_eq!(mixed.expect("mixed"), 7);
    assert_eq!(NUMBERS.peek("mixed:ab:1:xyz").await.expect("get"), Some(7));

    assert_eq!(api::half(4).await.expect("half"), Some(2));
    assert_eq!(api::half(3).await.expect("half"), None);
    assert_eq!(api::half(3).await.expect("half"), None);

    let state = Arc::new(State { numbers: NUMBERS.clone() });
    assert_eq!(State::doubled(Arc::clone(&state), 21).await.expect("doubled"), 42);
    assert_eq!(tripled(NUMBERS.clone(), 5).await.expect("tripled"), 15);
    assert_eq!(NUMBERS.peek("tripled:5").await.expect("get"), Some(15));
}

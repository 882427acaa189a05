//! The future of [`Cache::get_or_fill`]: a fresh in-process hit answers on
//! the first poll through a small, inlinable path; anything else starts the
//! boxed slow path out of line.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::policy::FillOptions;
use crate::{Cache, Error};

/// The rest of a call that found no quiet value in process.
pub(crate) type SlowFill<'a, V, E> = Pin<Box<dyn Future<Output = Result<V, Error<E>>> + Send + 'a>>;

/// A pending `get_or_fill`: like the `async fn` it stands for, it does
/// nothing until first polled.
pub(crate) struct GetOrFill<'a, V, F, E> {
    cache: &'a Cache<V>,
    key: &'a str,
    options: FillOptions,
    /// Taken when the slow path starts.
    fill: Option<F>,
    slow: Option<SlowFill<'a, V, E>>,
}

// Nothing is ever pinned in place: `fill` is only moved out by value and the
// slow path is boxed.
impl<V, F, E> Unpin for GetOrFill<'_, V, F, E> {}

impl<'a, V, F, Fut, E> GetOrFill<'a, V, F, E>
where
    V: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<V, E>> + Send + 'static,
    E: Send + Sync + 'static,
{
    pub(crate) fn new(cache: &'a Cache<V>, key: &'a str, options: FillOptions, fill: F) -> Self {
        Self {
            cache,
            key,
            options,
            fill: Some(fill),
            slow: None,
        }
    }

    /// Starts the slow path with `fill` and polls it once.
    #[cold]
    #[inline(never)]
    fn start_slow(&mut self, fill: F, cx: &mut Context<'_>) -> Poll<Result<V, Error<E>>> {
        let slow = self
            .slow
            .insert(self.cache.slow_fill(self.key, self.options, fill));
        slow.as_mut().poll(cx)
    }
}

impl<V, F, Fut, E> Future for GetOrFill<'_, V, F, E>
where
    V: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<V, E>> + Send + 'static,
    E: Send + Sync + 'static,
{
    type Output = Result<V, Error<E>>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Some(slow) = &mut this.slow {
            return slow.as_mut().poll(cx);
        }
        if let Some(value) = this.cache.local_hit(this.key) {
            return Poll::Ready(Ok(value));
        }
        match this.fill.take() {
            Some(fill) => this.start_slow(fill, cx),
            // Unreachable: `fill` is only taken to set `slow`.
            None => Poll::Ready(Err(Error::Aborted)),
        }
    }
}

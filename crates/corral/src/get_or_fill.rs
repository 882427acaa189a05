//! The future of [`Cache::get_or_fill`]: a fresh in-process hit answers on
//! the first poll through a small, inlinable path; anything else starts the
//! boxed slow path out of line.
//!
//! The hit path must not hand the future's own address to out-of-line code,
//! nor move per-call options around: either costs the caller's state machine
//! a third of a hit (see `BENCHMARKS.md`). So a hit only reads the future,
//! the slow path starts from plain arguments taken by value, and
//! `get_or_fill` carries zero-sized default options. And `poll` is
//! `#[inline(always)]`: as a mere hint the compiler inlined it for some fill
//! types and not for others (a closure fill against a `fn` item fill), and a
//! hit that is a call costs half as much again.

use std::future::Future;
use std::mem;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::policy::FillOptions;
use crate::{Cache, Error};

/// The rest of a call that found no quiet value in process.
pub(crate) type SlowFill<'a, V, E> = Pin<Box<dyn Future<Output = Result<V, Error<E>>> + Send + 'a>>;

/// Per-call settings as a `GetOrFill` holds them.
pub(crate) trait CallOptions: Clone + Send {
    /// The settings the slow path applies.
    fn resolve(self) -> FillOptions;
}

/// The cache's defaults, known without storing anything.
#[derive(Clone, Copy)]
pub(crate) struct Defaults;

impl CallOptions for Defaults {
    fn resolve(self) -> FillOptions {
        FillOptions::default()
    }
}

impl CallOptions for FillOptions {
    fn resolve(self) -> FillOptions {
        self
    }
}

enum State<'a, V, F, E> {
    /// Not polled yet.
    Start(F),
    /// The slow path is running.
    Slow(SlowFill<'a, V, E>),
    /// The output was returned.
    Done,
}

/// A pending `get_or_fill`: like the `async fn` it stands for, it does
/// nothing until first polled.
pub(crate) struct GetOrFill<'a, V, F, E, O> {
    cache: &'a Cache<V>,
    key: &'a str,
    options: O,
    state: State<'a, V, F, E>,
}

// Nothing is ever pinned in place: `fill` is only moved out by value and the
// slow path is boxed.
impl<V, F, E, O> Unpin for GetOrFill<'_, V, F, E, O> {}

impl<'a, V, F, E, O> GetOrFill<'a, V, F, E, O> {
    pub(crate) fn new(cache: &'a Cache<V>, key: &'a str, options: O, fill: F) -> Self {
        Self {
            cache,
            key,
            options,
            state: State::Start(fill),
        }
    }
}

/// The slow path after its first poll.
enum Started<'a, V, E> {
    Finished(Result<V, Error<E>>),
    Running(SlowFill<'a, V, E>),
}

/// Starts the slow path and polls it once.
#[cold]
#[inline(never)]
fn start_slow<'a, V, F, Fut, E, O>(
    cache: &'a Cache<V>,
    key: &'a str,
    options: O,
    fill: F,
    cx: &mut Context<'_>,
) -> Started<'a, V, E>
where
    V: Clone + Send + Sync + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<V, E>> + Send + 'static,
    E: Send + Sync + 'static,
    O: CallOptions,
{
    let mut slow = cache.slow_fill(key, options.resolve(), fill);
    match slow.as_mut().poll(cx) {
        Poll::Ready(output) => Started::Finished(output),
        Poll::Pending => Started::Running(slow),
    }
}

impl<V, F, Fut, E, O> Future for GetOrFill<'_, V, F, E, O>
where
    V: Clone + Send + Sync + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<V, E>> + Send + 'static,
    E: Send + Sync + 'static,
    O: CallOptions,
{
    type Output = Result<V, Error<E>>;

    #[inline(always)]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        // A hit leaves the state as it is (the fill is dropped with the
        // future): nothing is written to the future on the hit path.
        if let State::Start(_) = this.state {
            if let Some(value) = this.cache.local_hit(this.key) {
                return Poll::Ready(Ok(value));
            }
        }
        match mem::replace(&mut this.state, State::Done) {
            State::Start(fill) => {
                match start_slow(this.cache, this.key, this.options.clone(), fill, cx) {
                    Started::Finished(output) => Poll::Ready(output),
                    Started::Running(slow) => {
                        this.state = State::Slow(slow);
                        Poll::Pending
                    }
                }
            }
            State::Slow(mut slow) => {
                let poll = slow.as_mut().poll(cx);
                if poll.is_pending() {
                    this.state = State::Slow(slow);
                }
                poll
            }
            // A future polled after it returned its output; the contract
            // allows anything but a panic is not wanted in library code.
            State::Done => Poll::Ready(Err(Error::Aborted)),
        }
    }
}

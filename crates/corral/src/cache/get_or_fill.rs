//! The future of [`Cache::get_or_fill`] and its kin: a fresh in-process
//! hit answers on the first poll through a small, inlinable path; anything
//! else starts the boxed slow path out of line. Per-call options are set on
//! the future ([`GetOrFill::options`]), and built only by a call that
//! misses; the method called fixes what the fill answers ([`FillOutput`])
//! and so what the caller gets.
//!
//! The hit path must not hand the future's own address to out-of-line code,
//! nor move per-call options around: either costs the caller's state machine
//! a third of a hit (see `BENCHMARKS.md`). So a hit only reads the future,
//! the slow path starts from plain arguments taken by value,
//! `get_or_fill` carries zero-sized default options, and options given as a
//! closure are built on the slow path, called through `&mut` from the
//! field that holds them (moving them into the state the hit reads cost a
//! lazy option's hit twice a plain one's). And `poll` is
//! `#[inline(always)]`: as a mere hint the compiler inlined it for some fill
//! types and not for others (a closure fill against a `fn` item fill), and a
//! hit that is a call costs half as much again.

use std::future::Future;
use std::marker::PhantomData;
use std::mem;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::Cache;
use crate::data::cause::FillCause;
use crate::data::error::Error;
use crate::data::freshness::{Answer, Fetched};
use crate::data::policy::FillOptions;

/// The rest of a call that found no quiet value in process.
pub(crate) type SlowFill<'a, T, E> = Pin<Box<dyn Future<Output = Result<T, Error<E>>> + Send + 'a>>;

/// What a fill answers (inside its `Result`), and so what its caller gets;
/// fixed by the method called, so a fill's `Ok(..)` needs no annotation:
///
/// | method | the fill answers | the caller gets | a "not found" |
/// |---|---|---|---|
/// | [`get_or_fill`](Cache::get_or_fill) | `V` | `V` | a cached "not found" is [`Error::NotFound`] |
/// | [`get_or_fill_option`](Cache::get_or_fill_option) | `Option<V>` | `Option<V>` | `None` is cached for the negative TTL and returned as `None` |
/// | [`get_or_fill_answer`](Cache::get_or_fill_answer) | [`Answer<V>`] | [`Fetched<V>`]: the value with its [`Freshness`](crate::Freshness) | as the answer says, with its own TTL or not cached |
///
/// Sealed: these three are all.
pub trait FillOutput<V>: sealed::Sealed<V> + Send + 'static {
    /// What the caller of `get_or_fill` receives.
    type Output;

    /// Whether a quiet in-process value answers the call on its first poll
    /// (no freshness to report; a re-cached fail-safe value is quiet too).
    #[doc(hidden)]
    const QUICK_HIT: bool = true;

    /// The answer to cache.
    #[doc(hidden)]
    fn into_answer(self) -> Answer<V>;

    /// What the caller receives for a quiet in-process hit (asked only
    /// with [`QUICK_HIT`](Self::QUICK_HIT)).
    #[doc(hidden)]
    fn hit(value: V) -> Self::Output;

    /// What the caller receives for what the slow path found or filled.
    #[doc(hidden)]
    fn output<E>(fetched: Fetched<V>) -> Result<Self::Output, Error<E>>;
}

impl<V: Send + 'static> FillOutput<V> for V {
    type Output = V;

    fn into_answer(self) -> Answer<V> {
        Answer::value(self)
    }

    #[inline(always)]
    fn hit(value: V) -> V {
        value
    }

    fn output<E>(fetched: Fetched<V>) -> Result<V, Error<E>> {
        fetched.value.ok_or(Error::NotFound)
    }
}

impl<V: Send + 'static> FillOutput<V> for Option<V> {
    type Output = Option<V>;

    fn into_answer(self) -> Answer<V> {
        Answer::from_option(self)
    }

    #[inline(always)]
    fn hit(value: V) -> Option<V> {
        Some(value)
    }

    fn output<E>(fetched: Fetched<V>) -> Result<Option<V>, Error<E>> {
        Ok(fetched.value)
    }
}

impl<V: Send + 'static> FillOutput<V> for Answer<V> {
    type Output = Fetched<V>;

    /// The caller learns the freshness, which the slow path judges.
    const QUICK_HIT: bool = false;

    fn into_answer(self) -> Answer<V> {
        self
    }

    #[inline(always)]
    fn hit(value: V) -> Fetched<V> {
        Fetched::new(Some(value), crate::data::freshness::Freshness::Fresh)
    }

    fn output<E>(fetched: Fetched<V>) -> Result<Fetched<V>, Error<E>> {
        Ok(fetched)
    }
}

mod sealed {
    use crate::data::freshness::Answer;

    /// Keeps [`FillOutput`](super::FillOutput) to its three forms.
    pub trait Sealed<V> {}

    impl<V> Sealed<V> for V {}
    impl<V> Sealed<V> for Option<V> {}
    impl<V> Sealed<V> for Answer<V> {}

    /// Keeps [`CallOptions`](super::CallOptions) to its three forms.
    pub trait SealedOptions {}

    impl SealedOptions for super::Defaults {}
    impl SealedOptions for crate::data::policy::FillOptions {}
    impl<F: FnMut() -> crate::data::policy::FillOptions> SealedOptions for F {}
}

/// Per-call settings as a [`GetOrFill`] holds them: the cache's defaults
/// (zero-sized), a [`FillOptions`], or a closure that builds them — called
/// only by a call that misses, so options that allocate (tags made with
/// `format!`) cost nothing on a hit. Sealed.
pub trait CallOptions: sealed::SealedOptions + Send {
    /// The settings the slow path applies (asked once).
    #[doc(hidden)]
    fn resolve(&mut self) -> FillOptions;
}

/// The options of a [`GetOrFill`] without [`options`](GetOrFill::options):
/// the cache's defaults, known without storing anything.
#[derive(Debug, Clone, Copy)]
pub struct Defaults;

impl CallOptions for Defaults {
    fn resolve(&mut self) -> FillOptions {
        FillOptions::default()
    }
}

impl CallOptions for FillOptions {
    fn resolve(&mut self) -> FillOptions {
        std::mem::take(self)
    }
}

impl<F: FnMut() -> FillOptions + Send> CallOptions for F {
    fn resolve(&mut self) -> FillOptions {
        self()
    }
}

enum State<'a, F, T, E> {
    /// Not polled yet.
    Start(F),
    /// The slow path is running.
    Slow(SlowFill<'a, T, E>),
    /// The output was returned.
    Done,
}

/// A pending [`Cache::get_or_fill`]: like the `async fn` it stands for, it
/// does nothing until first polled. Await it, after setting per-call
/// [`options`](GetOrFill::options) if the cache's defaults do not fit.
///
/// Its output is `Result<T::Output, Error<E>>` where the fill answers
/// `Result<T, E>` (see [`FillOutput`]). It borrows the cache and the key and
/// is `Send`. `M` is the [`FillCause`](crate::FillCause) marker of `E`,
/// inferred.
#[must_use = "futures do nothing unless awaited"]
pub struct GetOrFill<'a, V, F, T: FillOutput<V>, E, M, O = Defaults> {
    cache: &'a Cache<V>,
    key: &'a str,
    options: O,
    state: State<'a, F, T::Output, E>,
    marker: PhantomData<fn() -> M>,
}

// Nothing is ever pinned in place: `fill` is only moved out by value and the
// slow path is boxed.
impl<V, F, T: FillOutput<V>, E, M, O> Unpin for GetOrFill<'_, V, F, T, E, M, O> {}

impl<'a, V, F, T: FillOutput<V>, E, M> GetOrFill<'a, V, F, T, E, M, Defaults> {
    pub(crate) fn new(cache: &'a Cache<V>, key: &'a str, fill: F) -> Self {
        Self {
            cache,
            key,
            options: Defaults,
            state: State::Start(fill),
            marker: PhantomData,
        }
    }
}

impl<'a, V, F, T: FillOutput<V>, E, M, O> GetOrFill<'a, V, F, T, E, M, O> {
    /// Per-call settings (TTL, timeouts, tags; see [`FillOptions`]) for
    /// this call's fill, instead of the cache's: a `FillOptions`, or a
    /// closure returning one (`FnMut`, called once) — built only if the
    /// call misses, so a hit pays no allocation for tags made with
    /// `format!`:
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// use std::time::Duration;
    /// use corral::{Cache, FillOptions};
    ///
    /// let users = Cache::<String>::builder("users").build()?;
    /// let tenant = 7;
    /// let name = users
    ///     .get_or_fill("user:42", || async { Ok::<_, std::io::Error>("Ada".to_owned()) })
    ///     .options(|| FillOptions::new().ttl(Duration::from_secs(5)).tags([format!("tenant:{tenant}")]))
    ///     .await?;
    /// assert_eq!(name, "Ada");
    /// # Ok(()) }
    /// ```
    ///
    /// They apply when this call leads the key's flight; a call that joins
    /// a flight in progress, or finds a value, gets what that flight or
    /// value gives. Set them before the first poll: the future starts with
    /// what it holds then.
    pub fn options<P: CallOptions>(self, options: P) -> GetOrFill<'a, V, F, T, E, M, P> {
        GetOrFill {
            cache: self.cache,
            key: self.key,
            options,
            state: self.state,
            marker: PhantomData,
        }
    }
}

impl<V, F, T: FillOutput<V>, E, M, O> std::fmt::Debug for GetOrFill<'_, V, F, T, E, M, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GetOrFill")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

/// The slow path after its first poll.
enum Started<'a, T, E> {
    Finished(Result<T, Error<E>>),
    Running(SlowFill<'a, T, E>),
}

/// Starts the slow path and polls it once.
#[cold]
#[inline(never)]
fn start_slow<'a, V, F, Fut, T, E, M>(
    cache: &'a Cache<V>,
    key: &'a str,
    options: FillOptions,
    fill: F,
    cx: &mut Context<'_>,
) -> Started<'a, T::Output, E>
where
    V: Clone + Send + Sync + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, E>> + Send + 'static,
    T: FillOutput<V>,
    E: FillCause<M>,
{
    let mut slow = cache.slow_fill::<F, Fut, T, E, M>(key, options, fill);
    match slow.as_mut().poll(cx) {
        Poll::Ready(output) => Started::Finished(output),
        Poll::Pending => Started::Running(slow),
    }
}

impl<V, F, Fut, T, E, M, O> Future for GetOrFill<'_, V, F, T, E, M, O>
where
    V: Clone + Send + Sync + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, E>> + Send + 'static,
    T: FillOutput<V>,
    E: FillCause<M>,
    O: CallOptions,
{
    type Output = Result<T::Output, Error<E>>;

    #[inline(always)]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        // A hit leaves the state as it is (the fill is dropped with the
        // future): nothing is written to the future on the hit path.
        if let State::Start(_) = this.state {
            if T::QUICK_HIT {
                if let Some(value) = this.cache.local_hit(this.key) {
                    return Poll::Ready(Ok(T::hit(value)));
                }
            }
        }
        match mem::replace(&mut this.state, State::Done) {
            State::Start(fill) => {
                let options = this.options.resolve();
                match start_slow::<V, F, Fut, T, E, M>(this.cache, this.key, options, fill, cx) {
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

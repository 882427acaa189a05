//! [`Cache::get_many_or_fill`]: many keys answered with one read of each
//! tier and one call of the batch fill (the flights it leads are settled by
//! [`BatchLeader`](crate::flight::batch::BatchLeader)).

use std::any::TypeId;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::runtime::Handle;

use super::{validate_tags, Cache};
use crate::cache::get_or_fill::{CallOptions, FillOutput};
use crate::data::cause::{cause_fn, CauseFn, FillCause, FillError};
use crate::data::error::Error;
use crate::data::freshness::Answer;
use crate::data::freshness::{Fetched, Judged, Standing};
use crate::data::key::validate_key;
use crate::data::policy::FillOptions;
use crate::flight::batch::{BatchLeader, Led};
use crate::state::flight::{Claim, Flight};
use crate::state::inner::outcome_to_result;
use crate::stats::Counters;

/// The answers of one [`Cache::get_many_or_fill`] call: one result per
/// distinct key asked.
#[derive(Debug)]
pub struct Batch<V, E> {
    results: HashMap<String, Result<V, Error<E>>>,
}

impl<V, E> Batch<V, E> {
    /// Every key of `keys` answered with `error()`.
    fn every(keys: Vec<String>, error: impl Fn() -> Error<E>) -> Self {
        let results = keys.into_iter().map(|key| (key, Err(error()))).collect();
        Self { results }
    }

    /// The answer for `key`, if it was asked.
    pub fn get(&self, key: &str) -> Option<&Result<V, Error<E>>> {
        self.results.get(key)
    }

    /// How many distinct keys were asked.
    pub fn len(&self) -> usize {
        self.results.len()
    }

    /// Whether no key was asked.
    pub fn is_empty(&self) -> bool {
        self.results.is_empty()
    }

    /// Every key with its answer.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Result<V, Error<E>>)> {
        self.results
            .iter()
            .map(|(key, result)| (key.as_str(), result))
    }

    /// The answers by key.
    pub fn into_map(self) -> HashMap<String, Result<V, Error<E>>> {
        self.results
    }
}

impl<V> Cache<V>
where
    V: Clone + Send + Sync + 'static,
{
    /// Returns the cached values of `keys`, filling the missing ones with
    /// **one** call of `fill_many`, which gets exactly the keys still
    /// missing after the L1, the L2 and the flights already running, and
    /// answers a value per key it found (a key it leaves out is cached as
    /// "not found" for the negative TTL, and answered
    /// [`Error::NotFound`]). Each key is cached as
    /// [`get_or_fill`](Cache::get_or_fill) caches it (TTL with jitter,
    /// grace, fail-safe window), and fenced the same way.
    ///
    /// `fill_many` answers a map of the values it found; to give a key its
    /// own TTL, leave it uncached, or [tag](crate::Answer::tags) it by what
    /// was loaded for it, call
    /// [`get_many_or_fill_answers`](Cache::get_many_or_fill_answers).
    /// Per-call settings are set on the returned future with
    /// [`options`](GetMany::options): the TTL, the hard fill timeout and the
    /// tags of every entry it fills (the soft timeout does not apply to
    /// batches).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// use std::collections::HashMap;
    /// use corral::{Cache, FillOptions};
    ///
    /// async fn load_names(keys: Vec<String>) -> Result<HashMap<String, String>, std::io::Error> {
    ///     Ok(keys.into_iter().map(|key| { let name = format!("name of {key}"); (key, name) }).collect())
    /// }
    ///
    /// let users = Cache::<String>::builder("users").build()?;
    /// let batch = users
    ///     .get_many_or_fill(&["user:1", "user:2"], load_names)
    ///     .options(|| FillOptions::new().tags(["users"]))
    ///     .await;
    /// assert_eq!(batch.len(), 2);
    /// assert_eq!(batch.get("user:1").expect("asked").as_deref().ok(), Some("name of user:1"));
    /// # Ok(()) }
    /// ```
    ///
    /// Duplicate keys are answered once. An L1 hit costs what a single L1
    /// hit costs; the rest is one read of the shared store, then — for the
    /// keys it did not find — one concurrent round of lease requests and,
    /// after the fill, one concurrent round of commits.
    ///
    /// # Concurrent calls on the same keys
    ///
    /// Every key is its own flight: a key another call (single or batch) is
    /// already filling in this process is not filled again — this batch
    /// waits for that flight — and a key this batch fills is joined by the
    /// calls that ask for it meanwhile. Across processes each key has its
    /// own lease: a key whose lease another process holds is waited for
    /// (woken when its value lands), and if that lease lapses this process
    /// fills it, calling `fill_many` with that one key. That is the only
    /// case in which `fill_many` is called more than once, and then never
    /// twice for the same key. Keys with a stale value (within the grace
    /// period) are answered as a single call answers them: the stale value,
    /// refreshed in the background through `fill_many` with that key.
    ///
    /// The batch fill runs on its own task, bounded by the hard
    /// `fill_timeout`; a caller that is cancelled does not cancel it. Its
    /// leases are renewed while it runs, as a single fill's are, so a
    /// fill longer than the lease TTL is not duplicated by another process.
    ///
    /// # Errors
    ///
    /// Per key, in the [`Batch`]: [`Error::InvalidKey`] for a key that
    /// breaks the key rules (the other keys are still answered); the fill's
    /// error as [`Error::Fill`] (shared, typed) for every key it was to
    /// fill; [`Error::FillPanicked`]; [`Error::Timeout`]; [`Error::NotFound`];
    /// [`Error::NoRuntime`] for every key outside a tokio runtime;
    /// [`Error::InvalidKey`] for every key if the options' tags are invalid.
    pub fn get_many_or_fill<K, F, Fut, E, M>(
        &self,
        keys: &[K],
        fill_many: F,
    ) -> GetMany<'_, V, F, E, M>
    where
        K: AsRef<str>,
        F: Fn(Vec<String>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<HashMap<String, V>, E>> + Send + 'static,
        E: FillCause<M>,
    {
        GetMany::new(self, keys, fill_many)
    }

    /// [`get_many_or_fill`](Cache::get_many_or_fill) whose fill answers
    /// each key with an [`Answer`](crate::Answer): a value or "not found"
    /// with its own TTL, not to be cached, or
    /// [tagged](crate::Answer::tags) by what was loaded for that key.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// use std::collections::HashMap;
    /// use corral::{Answer, Cache, FillOptions};
    ///
    /// let users = Cache::<String>::builder("users").build()?;
    /// let batch = users
    ///     .get_many_or_fill_answers(&["user:1", "user:2"], |keys| async move {
    ///         let found: HashMap<String, Answer<String>> = keys
    ///             .into_iter()
    ///             .map(|key| {
    ///                 let answer = Answer::value(format!("name of {key}")).tags(["tenant:acme"]);
    ///                 (key, answer)
    ///             })
    ///             .collect();
    ///         Ok::<_, std::io::Error>(found)
    ///     })
    ///     .options(FillOptions::new().tags(["users"]))
    ///     .await;
    /// assert_eq!(batch.len(), 2);
    /// users.invalidate_tag("tenant:acme").await?;
    /// assert_eq!(users.peek("user:1").await?, None);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`get_many_or_fill`](Cache::get_many_or_fill): a key answered
    /// "not found" is [`Error::NotFound`] in the [`Batch`].
    pub fn get_many_or_fill_answers<K, F, Fut, E, M>(
        &self,
        keys: &[K],
        fill_many: F,
    ) -> GetMany<'_, V, F, E, M>
    where
        K: AsRef<str>,
        F: Fn(Vec<String>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<HashMap<String, Answer<V>>, E>> + Send + 'static,
        E: FillCause<M>,
    {
        GetMany::new(self, keys, fill_many)
    }

    /// Answers `keys`: at once where the L1 or a flight just finished
    /// answers, otherwise by the flights this call joins or leads (those it
    /// leads settled by one [`BatchLeader`] filling through `fill_many`).
    async fn fill_many<F, Fut, A, E>(
        &self,
        keys: Vec<String>,
        options: FillOptions,
        fill_many: F,
        cause: CauseFn<E>,
    ) -> Batch<V, E>
    where
        F: Fn(Vec<String>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<HashMap<String, A>, E>> + Send + 'static,
        A: FillOutput<V>,
        E: Send + Sync + 'static,
    {
        let Ok(runtime) = Handle::try_current() else {
            return Batch::every(keys, || Error::NoRuntime);
        };
        if let Some(Err(invalid)) = options.tags.as_deref().map(validate_tags) {
            return Batch::every(keys, || invalid.into());
        }
        let Claims {
            mut results,
            waits,
            led,
        } = self.claim_each::<E>(&keys);
        if !led.is_empty() {
            // The batch fill as the leader calls it: its values or answers
            // read as `Answer`s, its error typed by `cause`.
            let fill_many = Arc::new(move |keys| {
                let filling = fill_many(keys);
                async move {
                    let found = filling
                        .await
                        .map_err(|error| FillError::with_cause(Arc::new(error), cause))?;
                    let answers: HashMap<String, Answer<V>> = found
                        .into_iter()
                        .map(|(key, found)| (key, found.into_answer()))
                        .collect();
                    Ok::<_, FillError<E>>(answers)
                }
            });
            BatchLeader::spawn(&self.inner, &runtime, fill_many, &options, led);
        }
        for (key, flight) in waits {
            let answer = outcome_to_result(flight.wait().await)
                .and_then(|fetched: Fetched<V>| fetched.value.ok_or(Error::NotFound));
            results.insert(key, answer);
        }
        Batch { results }
    }

    /// Each distinct key of `keys` answered at once (invalid, an L1 hit, a
    /// flight that just finished) or claimed: a flight joined, or led.
    fn claim_each<E>(&self, keys: &[String]) -> Claims<V, E>
    where
        E: Send + Sync + 'static,
    {
        let inner = &self.inner;
        let mut claims = Claims {
            results: HashMap::with_capacity(keys.len()),
            waits: Vec::new(),
            led: Vec::new(),
        };
        let mut seen = HashSet::with_capacity(keys.len());
        for key in keys {
            let key = key.as_str();
            if !seen.insert(key) {
                continue;
            }
            if let Err(invalid) = validate_key(key) {
                claims.results.insert(key.to_owned(), Err(invalid.into()));
                continue;
            }
            if let Some(value) = self.local_hit(key) {
                claims.results.insert(key.to_owned(), Ok(value));
                continue;
            }
            let recheck = || {
                self.inner
                    .judge_in_l1(key)
                    .filter(|judged| judged.standing == Standing::Fresh)
                    .map(Judged::into_fetched)
            };
            match inner.flights().claim(key, TypeId::of::<E>(), recheck) {
                Claim::Ready(fetched) => {
                    inner.counters().served(fetched.freshness);
                    let answer = fetched.value.ok_or(Error::NotFound);
                    claims.results.insert(key.to_owned(), answer);
                }
                Claim::Join(flight) => {
                    Counters::bump(&inner.counters().coalesced);
                    claims.waits.push((key.to_owned(), flight));
                }
                Claim::Lead(leadership) => {
                    claims
                        .waits
                        .push((key.to_owned(), Arc::clone(leadership.flight())));
                    claims.led.push((key.to_owned(), leadership));
                }
            }
        }
        claims
    }
}

/// What [`Cache::claim_each`] made of a batch's keys.
struct Claims<V: Clone, E> {
    /// The keys answered at once.
    results: HashMap<String, Result<V, Error<E>>>,
    /// The flights to wait for (joined or led), by key.
    waits: Vec<(String, Arc<Flight<Fetched<V>>>)>,
    /// The flights this call leads.
    led: Led<V>,
}

type Filling<'a, V, E> = Pin<Box<dyn Future<Output = Batch<V, E>> + Send + 'a>>;

/// A pending [`Cache::get_many_or_fill`]: it does nothing until first
/// polled. Await it, after setting per-call [`options`](GetMany::options)
/// if the cache's defaults do not fit. `M` is the
/// [`FillCause`](crate::FillCause) marker of `E`, inferred.
#[must_use = "futures do nothing unless awaited"]
pub struct GetMany<'a, V, F, E, M> {
    cache: &'a Cache<V>,
    /// The keys and the batch fill, taken by the first poll.
    start: Option<(Vec<String>, F)>,
    options: FillOptions,
    running: Option<Filling<'a, V, E>>,
    marker: PhantomData<fn() -> M>,
}

impl<'a, V, F, E, M> GetMany<'a, V, F, E, M> {
    fn new<K: AsRef<str>>(cache: &'a Cache<V>, keys: &[K], fill_many: F) -> Self {
        GetMany {
            cache,
            start: Some((
                keys.iter().map(|key| key.as_ref().to_owned()).collect(),
                fill_many,
            )),
            options: FillOptions::default(),
            running: None,
            marker: PhantomData,
        }
    }
}

// Nothing is pinned in place: the fill is moved out by value and the call
// is boxed.
impl<V, F, E, M> Unpin for GetMany<'_, V, F, E, M> {}

impl<V, F, E, M> std::fmt::Debug for GetMany<'_, V, F, E, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GetMany")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl<V, F, E, M> GetMany<'_, V, F, E, M> {
    /// Per-call settings for the entries this call fills: TTL (jitter
    /// still applies), hard fill timeout and tags (see [`FillOptions`]; the
    /// soft timeout does not apply to batches), given as for
    /// [`GetOrFill::options`](crate::GetOrFill::options): a `FillOptions`
    /// or a closure returning one (a batch builds them when it is set).
    /// Keys this call joins (already in flight elsewhere) get what their
    /// flight gives. Set them before the first poll.
    pub fn options(mut self, mut options: impl CallOptions) -> Self {
        self.options = options.resolve();
        self
    }
}

impl<'a, V, F, Fut, A, E, M> Future for GetMany<'a, V, F, E, M>
where
    V: Clone + Send + Sync + 'static,
    F: Fn(Vec<String>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<HashMap<String, A>, E>> + Send + 'static,
    A: FillOutput<V>,
    E: FillCause<M>,
{
    type Output = Batch<V, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Some((keys, fill_many)) = this.start.take() {
            let options = std::mem::take(&mut this.options);
            let filling = this
                .cache
                .fill_many(keys, options, fill_many, cause_fn::<E, M>());
            this.running = Some(Box::pin(filling));
        }
        match this.running.as_mut() {
            Some(running) => {
                let poll = running.as_mut().poll(cx);
                if poll.is_ready() {
                    this.running = None;
                }
                poll
            }
            // Polled after it returned its output: no panic in library
            // code, and no answers left to give.
            None => Poll::Ready(Batch {
                results: HashMap::new(),
            }),
        }
    }
}

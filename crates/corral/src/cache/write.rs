//! [`Cache::set`] and [`Cache::set_with_ttl`]: writes through both tiers,
//! with their tags ([`WriteOptions`]) set on the returned future.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use super::{validate_tags, Cache};
use crate::data::error::Error;
use crate::data::key::validate_key;
use crate::data::policy::WriteOptions;
use crate::data::tags::Stamps;
use crate::state::inner::weight;
use crate::stats::Counters;
use crate::tier::local::InL1;

type Writing<'a> = Pin<Box<dyn Future<Output = Result<(), Error>> + Send + 'a>>;

/// A pending [`Cache::set`] or [`Cache::set_with_ttl`]: it does nothing
/// until first polled. Await it, after setting its
/// [`options`](Set::options) (tags) if the entry is to carry any.
#[must_use = "futures do nothing unless awaited"]
pub struct Set<'a, V> {
    cache: &'a Cache<V>,
    key: &'a str,
    /// Taken by the first poll.
    value: Option<V>,
    /// `None`: the cache's TTL, with jitter.
    ttl: Option<Duration>,
    options: WriteOptions,
    writing: Option<Writing<'a>>,
}

// Nothing is pinned in place: the value is moved out by value and the write
// is boxed.
impl<V> Unpin for Set<'_, V> {}

impl<V> std::fmt::Debug for Set<'_, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Set")
            .field("key", &self.key)
            .field("ttl", &self.ttl)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl<'a, V> Set<'a, V> {
    /// This write's tags (see [`WriteOptions`]). Without them the entry
    /// carries no tags, even if the one it replaces did. Set them before
    /// the first poll.
    pub fn options(mut self, options: WriteOptions) -> Self {
        self.options = options;
        self
    }
}

impl<'a, V> Future for Set<'a, V>
where
    V: Clone + Send + Sync + 'static,
{
    type Output = Result<(), Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if this.writing.is_none() {
            // A future polled after it returned its output: no panic in
            // library code.
            let Some(value) = this.value.take() else {
                return Poll::Ready(Err(Error::Aborted));
            };
            let cache = this.cache;
            let ttl = this
                .ttl
                .unwrap_or_else(|| cache.inner.draw_ttl(cache.inner.policy().ttl));
            let tags = this.options.tags.take().unwrap_or_else(|| Arc::new([]));
            this.writing = Some(Box::pin(cache.write(this.key, value, ttl, tags)));
        }
        match this.writing.as_mut() {
            Some(writing) => {
                let poll = writing.as_mut().poll(cx);
                if poll.is_ready() {
                    this.writing = None;
                }
                poll
            }
            None => Poll::Ready(Err(Error::Aborted)),
        }
    }
}

impl<V> Cache<V>
where
    V: Clone + Send + Sync + 'static,
{
    /// Stores `value` under `key` for the cache's TTL (with jitter, grace and
    /// fail-safe as configured), tagged with the tags of its
    /// [`options`](Set::options) — none without them: a write replaces the
    /// entry with its tags.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use corral::{Cache, WriteOptions};
    ///
    /// let users = Cache::<String>::builder("users").build()?;
    /// users
    ///     .set("user:3", "Cy".to_owned())
    ///     .options(WriteOptions::new().tags(["tenant:acme"]))
    ///     .await?;
    /// users.invalidate_tag("tenant:acme").await?;
    /// assert_eq!(users.peek("user:3").await?, None);
    /// # Ok(()) }
    /// ```
    ///
    /// A fill or refresh of `key` in flight — in this or, with a shared
    /// store, any process — still hands its value to its callers but does not
    /// store it over this write; calls made after this one returns start a
    /// new flight or read this value.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidKey`] (for the key or a tag); [`Error::Encode`] if
    /// the value cannot be encoded or exceeds `max_value_bytes`;
    /// [`Error::Store`] if the shared store did not confirm the write (it
    /// may or may not have happened — and while a Redis Cluster fails over,
    /// a write sent before the error may still land after a later one:
    /// after such an error, write again or invalidate once the store
    /// answers).
    pub fn set<'a>(&'a self, key: &'a str, value: V) -> Set<'a, V> {
        Set {
            cache: self,
            key,
            value: Some(value),
            ttl: None,
            options: WriteOptions::default(),
            writing: None,
        }
    }

    /// Stores `value` under `key` fresh for exactly `ttl` (no jitter); tags
    /// as [`set`](Cache::set).
    ///
    /// # Errors
    ///
    /// As [`set`](Cache::set); a zero `ttl` is stored for 1 ms.
    pub fn set_with_ttl<'a>(&'a self, key: &'a str, value: V, ttl: Duration) -> Set<'a, V> {
        Set {
            cache: self,
            key,
            value: Some(value),
            ttl: Some(ttl.max(Duration::from_millis(1))),
            options: WriteOptions::default(),
            writing: None,
        }
    }

    async fn write(
        &self,
        key: &str,
        value: V,
        ttl: Duration,
        tags: Arc<[Arc<str>]>,
    ) -> Result<(), Error> {
        validate_key(key)?;
        validate_tags(&tags)?;
        let inner = &self.inner;
        let ttls = inner.policy().ttls(ttl);
        let weight = match &inner.tiers().l1 {
            Some(_) => weight(inner, key, Some(&value))?,
            None => 0,
        };
        let wanted = Stamps::wanted(&tags);
        let home = inner.home(key);
        let stamps = Stamps::zip(&wanted, inner.current_versions(home, &wanted).await?);
        let mut others = Ok(());
        // A change of the key reported while the write is on its way to the
        // store is newer than it: the write keeps no copy then.
        let mark = inner
            .tiers()
            .l2
            .as_ref()
            .map(|_| inner.flights().write_mark());
        if let Some(store) = &inner.tiers().l2 {
            let bytes = inner
                .encode(key, Some(&value), ttls, 0, &stamps)
                .map_err(|message| {
                    Counters::bump(&inner.counters().encode_failures);
                    Error::Encode {
                        message: message.into(),
                    }
                })?;
            let skey = inner.store_key(key);
            let written = store
                .call(store.set(&skey, &bytes, ttls.physical, inner.origin()))
                .await;
            if let Err(error) = written {
                inner.counters().store_failed(&error);
                // The write may or may not have landed: keep no copy of
                // either value in process.
                inner.flights().detach(key, || inner.remove_from_l1(key));
                return Err(error.into());
            }
            // A build of another version drops its copy: it cannot read
            // this one. This write landed whatever that drop gives.
            others = self.invalidate_other_versions(key).await;
        }
        let keep = |overtaken: bool| {
            let entry = InL1 {
                value: Some(value),
                ttls,
                fail_safe: false,
                weight,
                age: Duration::ZERO,
            };
            if overtaken || !inner.insert_in_l1(key, home, &stamps, entry) {
                inner.remove_from_l1(key);
            }
        };
        match mark {
            Some(mark) => inner.flights().detach_since(key, mark, keep),
            None => inner.flights().detach(key, || keep(false)),
        }
        others.map_err(|error| {
            inner.counters().store_failed(&error);
            error.into()
        })
    }
}

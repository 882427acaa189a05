//! The stampede itself: what a source of truth is ([`Load`]), the caches
//! under test (corral and a naive cache-aside: [`Side`]), and the callers
//! of one round, released together (`corral-testkit`'s [`Callers`]).

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use corral_testkit::{Callers, Tally};

use crate::plot::Timeline;
use crate::HerdArgs;
use corral::FillBudget;
use redis::aio::MultiplexedConnection;
use redis::AsyncCommands as _;

/// The `keys` keys of one round; `prefix` keeps runs, sides and rounds apart.
pub(crate) fn round_keys(prefix: &str, keys: u64) -> Vec<String> {
    (0..keys).map(|k| format!("herd:{prefix}:k{k}")).collect()
}

/// corral's fill budget of `limit` fills at once (none for 0). Queued fills
/// wait as long as the run may take: the demo counts callers answered, not
/// callers turned away. In process it adapts up to `--adaptive-max`; with
/// `--redis --fleet` it is one budget for every process, counted in Redis.
pub(crate) fn fill_budget(args: &HerdArgs, limit: u64) -> anyhow::Result<Option<FillBudget>> {
    if limit == 0 {
        return Ok(None);
    }
    let budget = FillBudget::new(usize::try_from(limit)?).max_wait(Duration::from_secs(600));
    Ok(Some(match (&args.redis, args.adaptive_max) {
        (None, Some(max)) => budget.adaptive(1, usize::try_from(max)?),
        (Some(_), _) if args.fleet => budget.fleet("herd-source")?,
        _ => budget,
    }))
}

/// A source of truth: what a fill calls. Its values start with their key.
pub(crate) trait Load: Send + Sync + 'static {
    fn load(&self, key: &str) -> impl Future<Output = anyhow::Result<String>> + Send;
}

/// Whether `value` answers `key`: a caller handed another key's value is
/// caught.
fn is_value_of(key: &str, value: &str) -> bool {
    let rest = value.strip_prefix(key);
    rest.is_some_and(|rest| rest.starts_with(" → "))
}

/// A cache under test, over its source.
pub(crate) enum Side<S> {
    /// corral's read-through; counts the callers it answered with a
    /// fail-safe value.
    Corral(corral::Cache<String>, Arc<S>, AtomicU64),
    /// The usual cache-aside over a map: read it; on a miss (or an entry
    /// older than the TTL) call the source and write the map. Nothing stops
    /// concurrent misses of one key from all calling it.
    Naive(RwLock<HashMap<String, (String, Instant)>>, Duration, Arc<S>),
    /// The same on Redis: `GET`; on a miss call the source and `SETEX`.
    Redis(MultiplexedConnection, Arc<S>),
}

impl<S: Load> Side<S> {
    pub(crate) fn corral(cache: corral::Cache<String>, source: &Arc<S>) -> Self {
        Self::Corral(cache, Arc::clone(source), AtomicU64::new(0))
    }

    pub(crate) fn naive(ttl: Duration, source: &Arc<S>) -> Self {
        Self::Naive(RwLock::default(), ttl, Arc::clone(source))
    }

    /// Reads `key`, filling it from the source on a miss.
    async fn get(&self, key: &str) -> anyhow::Result<String> {
        match self {
            Self::Corral(cache, source, fail_safe) => {
                let (source, owned) = (Arc::clone(source), key.to_owned());
                let fill = || async move { source.load(&owned).await.map(corral::Answer::value) };
                let fetched = cache.get_or_fill_answer(key, fill).await;
                let fetched = fetched.with_context(|| format!("corral get_or_fill({key})"))?;
                let served = fetched.freshness == corral::Freshness::FailSafe;
                fail_safe.fetch_add(u64::from(served), Relaxed);
                fetched.value.context("no value")
            }
            Self::Naive(entries, ttl, source) => {
                let fresh = entries.read().ok().and_then(|map| map.get(key).cloned());
                if let Some((value, _)) = fresh.filter(|(_, until)| *until > Instant::now()) {
                    return Ok(value);
                }
                let value = source.load(key).await;
                let value = value.with_context(|| format!("naive get({key})"))?;
                let mut map = entries.write().unwrap_or_else(PoisonError::into_inner);
                map.insert(key.to_owned(), (value.clone(), Instant::now() + *ttl));
                Ok(value)
            }
            Self::Redis(conn, source) => {
                let mut conn = conn.clone();
                if let Some(value) = conn.get::<_, Option<String>>(key).await? {
                    return Ok(value);
                }
                let value = source.load(key).await?;
                let () = conn.set_ex(key, &value, 600).await?;
                Ok(value)
            }
        }
    }

    /// What corral counted of its callers so far: those that joined a fill
    /// in flight, and those answered with a fail-safe value.
    pub(crate) fn counted(&self) -> Option<[u64; 2]> {
        let Self::Corral(cache, _, fail_safe) = self else {
            return None;
        };
        Some([cache.stats().coalesced, fail_safe.load(Relaxed)])
    }
}

/// Spawns a caller for each `i` in `callers`, asking `side` for
/// `keys[i % keys.len()]` once released; a caller succeeds if it gets its
/// key's value.
pub(crate) fn arm<S: Load>(
    side: &Arc<Side<S>>,
    keys: &[String],
    callers: impl Iterator<Item = u64>,
) -> Callers {
    Callers::arm(callers.map(|caller| {
        let key = keys[usize::try_from(caller).unwrap_or(0) % keys.len().max(1)].clone();
        let side = Arc::clone(side);
        move || async move {
            match side.get(&key).await {
                Ok(value) if is_value_of(&key, &value) => Ok(()),
                Ok(value) => Err(format!("caller {caller}: wrong value {value:?} for {key}")),
                Err(error) => Err(format!("caller {caller}: {error:#}")),
            }
        }
    }))
}

/// One round in this process: callers `0..callers`, released together,
/// their answers added to `timeline`.
pub(crate) async fn run_round<S: Load>(
    on: &Arc<Side<S>>,
    callers: u64,
    keys: &[String],
    timeline: &Timeline,
) -> anyhow::Result<Tally> {
    let callers = arm(on, keys, 0..callers);
    let at = timeline.release();
    let tally = callers.release().await.context("a caller task panicked")?;
    timeline.answers(at, &tally);
    Ok(tally)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source that fails for k2 and answers k1 with k0's value.
    struct Echo;

    impl Load for Echo {
        async fn load(&self, key: &str) -> anyhow::Result<String> {
            anyhow::ensure!(!key.ends_with("k2"), "no {key}");
            Ok(format!("{} → v", key.replace("k1", "k0")))
        }
    }

    #[tokio::test]
    async fn a_caller_fails_on_an_error_or_another_key_s_value() {
        let (keys, timeline) = (round_keys("t", 3), Timeline::default());
        let side = Side::naive(Duration::from_secs(60), &Arc::new(Echo));
        let tally = run_round(&Arc::new(side), 7, &keys, &timeline).await;
        let tally = tally.expect("round");
        // Callers 0, 3, 6 ask for k0 (right), 1 and 4 for k1 (handed
        // k0's value), 2 and 5 for k2 (an error).
        assert_eq!((tally.successes, tally.failures), (3, 4));
        let first = tally.first_failure.expect("a failure");
        let either = first.contains("wrong value") || first.contains("no herd:t:k2");
        assert!(either, "{first}");
    }
}

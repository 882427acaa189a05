//! The read pipeline: one way to read a key's entry from the shared store
//! and one way to finish a flight with it, used by every path that reads
//! the store — a caller's first read, a store-only cache's read-ahead, the
//! spawned leader (single keys and refreshes), the batch leader and
//! [`Cache::peek_entry`](crate::Cache::peek_entry).
//!
//! 1. [`read_current`]: the store's `GET`, then [`judge_current`].
//! 2. [`judge_current`]: decode and judge the bytes on this cache's clock,
//!    and check the entry's tag stamps against the current versions. An
//!    entry a tag invalidation or `clear` left behind is no entry.
//! 3. [`finish_hit`]: a fresh entry ends the flight — counted as an L2 hit,
//!    copied into the L1 under the flight (so no newer write is
//!    overwritten) and handed to the flight's callers.
//!
//! Which looks count what: a [`Look::Counted`] look is the one whose
//! verdict stands, so an undecodable entry and a tag miss are counted
//! there; a [`Look::Peek`] is followed by the leader's own look when it
//! finds nothing servable, and counts nothing, so nothing is counted twice.

use crate::data::error::StoreError;
use crate::data::freshness::{Fetched, Judged};
use crate::data::tags::Home;
use crate::state::flight::{Leadership, Outcome};
use crate::state::inner::Inner;
use crate::stats::Counters;
use crate::store::{StoreKey, Stored};
use crate::tier::shared::SharedTier;

/// Whether a look at an entry counts what it finds wrong with it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Look {
    /// The look whose verdict stands: undecodable bytes and stale tag
    /// stamps are counted.
    Counted,
    /// A look another one follows if it finds nothing servable: nothing is
    /// counted.
    Peek,
}

/// Reads `key`'s entry from `store`, where its address is `skey`
/// ([`Inner::store_key`]), and judges it ([`judge_current`]).
pub(crate) async fn read_current<V>(
    inner: &Inner<V>,
    store: &SharedTier,
    key: &str,
    skey: &StoreKey,
    look: Look,
) -> Result<Option<Judged<V>>, StoreError>
where
    V: Clone + Send + Sync + 'static,
{
    match store.call(store.get(skey)).await? {
        // The key's version home from the address already built.
        Some(stored) => {
            let home = store.version_home(skey);
            Ok(judge_at(inner, key, home, &stored, look).await)
        }
        None => Ok(None),
    }
}

/// `stored`, decoded and judged, if it decodes and its tag stamps are
/// current.
pub(crate) async fn judge_current<V>(
    inner: &Inner<V>,
    key: &str,
    stored: &Stored,
    look: Look,
) -> Option<Judged<V>>
where
    V: Clone + Send + Sync + 'static,
{
    judge_at(inner, key, inner.home(key), stored, look).await
}

/// [`judge_current`], the key's stamps checked at `home`, its version home.
async fn judge_at<V>(
    inner: &Inner<V>,
    key: &str,
    home: Home,
    stored: &Stored,
    look: Look,
) -> Option<Judged<V>>
where
    V: Clone + Send + Sync + 'static,
{
    let counted = look == Look::Counted;
    let mut judged = inner.judge_stored(key, stored, counted)?;
    // Versions the cache knows are checked in place, without awaiting the
    // (larger) future that reads unknown ones from the store.
    let current = match inner.tags().check(home, &judged.stamps) {
        Some(current) => current,
        None => inner.stamps_read_current(home, &judged.stamps).await,
    };
    judged.home = Some(home);
    if !current {
        if counted {
            // A tag invalidation or clear made it a miss.
            Counters::bump(&inner.counters().tag_misses);
        }
        return None;
    }
    Some(judged)
}

/// Counts a value read from the store and served: an L2 hit.
pub(crate) fn count_l2_hit<V: 'static>(inner: &Inner<V>, judged: &Judged<V>) {
    inner.counters().l2_hits.incr();
    inner.counters().served(judged.freshness);
}

/// Ends `flight` with `judged`, a fresh entry read from the store: counted
/// as an L2 hit, copied into the L1 as the flight retires, and handed to
/// its callers unless they were answered already (a refresh served them
/// the stale value). Returns what they were handed.
pub(crate) fn finish_hit<V>(
    inner: &Inner<V>,
    flight: &mut Leadership<Fetched<V>>,
    judged: Judged<V>,
) -> Fetched<V>
where
    V: Clone + 'static,
{
    inner.counters().l2_hits.incr();
    match inner.l1_copy(flight.key(), &judged) {
        Some(copy) => flight.retire_with_key(copy),
        None => flight.retire(|| ()),
    };
    let fetched = judged.into_fetched();
    if !flight.has_published() {
        inner.counters().served(fetched.freshness);
        flight.publish(Outcome::Value(fetched.clone()));
    }
    fetched
}

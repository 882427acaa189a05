//! The answer kept: in the shared store under the lease (fenced), in the
//! L1 once the store took it, then handed to the flight's callers.

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::{Flight, LeaseGuard};
use crate::data::entry::{Ttls, FLAG_FAIL_SAFE};
use crate::data::freshness::{Answer, Fetched, Freshness};
use crate::data::tags::{Home, Stamps};
use crate::state::flight::Outcome;
use crate::state::inner::{weight, Inner};
use crate::stats::Counters;
use crate::tier::local::InL1;

/// Stores the fill's answer (unless it asked not to be cached), retires the
/// flight and hands the answer to its callers.
pub(crate) async fn succeed<V>(
    inner: &Weak<Inner<V>>,
    flight: &mut Flight<V>,
    key: &str,
    ttl: Duration,
    answer: Answer<V>,
    kept: Kept,
) where
    V: Clone + Send + Sync + 'static,
{
    let Answer {
        value,
        ttl: answer_ttl,
        cache: keep,
        tags,
    } = answer;
    if let (Some(cache), true) = (inner.upgrade(), keep) {
        let stamps = cache
            .settle_stamps(cache.home(key), kept.stamps, tags.as_deref())
            .await;
        let mut kept = Kept { stamps, ..kept };
        if let (Some(unverified), Some(declared)) = (&mut kept.unverified, &tags) {
            *unverified = unverified.iter().chain(declared.iter()).cloned().collect();
        }
        let base = match (&value, answer_ttl) {
            (_, Some(ttl)) => ttl,
            (Some(_), None) => ttl,
            (None, None) => cache.policy().negative_ttl,
        };
        let ttls = cache.policy().ttls(cache.draw_ttl(base));
        keep_value(&cache, flight, key, value.clone(), ttls, false, kept).await;
    } else {
        flight.retire(|| ());
    }
    flight.publish(Outcome::Value(Fetched {
        value,
        freshness: Freshness::Fresh,
    }));
}

/// What a leader stores its answer with: the lease it holds (if any) and
/// the tag versions read before its fill ran (`None`: unknown, store
/// nothing).
pub(crate) struct Kept {
    pub(crate) lease: Option<LeaseGuard>,
    pub(crate) stamps: Option<Stamps>,
    /// The fill ran without a lease while the store did not answer, so its
    /// versions could not be read: with these tags, the answer is kept in
    /// the L1 for [`UNVERIFIED_LIFETIME`] at most (an invalidation of one
    /// of them still evicts it).
    pub(crate) unverified: Option<Arc<[Arc<str>]>>,
}

/// The longest an answer filled while the store does not answer is kept
/// in the L1 (its TTL if shorter): long enough that the reads of a hot key
/// during an outage, or just after one, do not each call the source; short
/// enough that what the store could not tell (a write or invalidation
/// elsewhere) is not missed for long.
pub(crate) const UNVERIFIED_LIFETIME: Duration = Duration::from_secs(1);

impl Kept {
    /// Only `lease` (if any), no stamps: nothing to store.
    pub(crate) fn leased(lease: Option<LeaseGuard>) -> Self {
        Self {
            lease,
            stamps: None,
            unverified: None,
        }
    }
}

/// Writes an answer into the cache's tiers and retires the flight: in the
/// L2 only under the lease, fenced, and only while no tag or clear it was
/// stamped with moved; in the L1 only if the L2 took it (or the fill ran
/// without a lease because the L2 was unreachable: then marked as filled
/// without the store, which a silence of the store keeps) and no newer
/// write detached the flight or moved its stamps meanwhile.
pub(super) async fn keep_value<V>(
    cache: &Inner<V>,
    flight: &mut Flight<V>,
    key: &str,
    value: Option<V>,
    ttls: Ttls,
    fail_safe: bool,
    kept: Kept,
) where
    V: Clone + Send + Sync + 'static,
{
    let Kept {
        lease,
        stamps,
        unverified,
    } = kept;
    let Some(mut stamps) = stamps else {
        // Filled while the store did not answer: kept in the L1 alone, for
        // UNVERIFIED_LIFETIME at most, indexed under its tags.
        let entry = match unverified {
            Some(tags) if lease.is_none() => {
                let ttls = ttls.capped(UNVERIFIED_LIFETIME);
                in_l1(cache, key, value, ttls, fail_safe).map(|entry| (entry, tags))
            }
            _ => None,
        };
        flight.retire_unverified(|| {
            if let Some((entry, tags)) = entry {
                cache.insert_unverified_in_l1(key, &tags, entry);
            }
        });
        return;
    };
    stamps.take_moved();
    let home = cache.home(key);
    // Filled without a lease while the store did not answer, but under
    // versions this cache knew: kept as what it is, fresh from the source.
    let alone = lease.is_none() && cache.tiers().l2.is_some();
    let keep_local = match (&cache.tiers().l2, lease) {
        (None, _) => true,
        (Some(_), None) => true,
        (Some(_), Some(lease)) => {
            let answer = (key, value.as_ref(), ttls, fail_safe);
            commit_under(cache, lease, answer, home, &stamps).await
        }
    };
    let entry = keep_local
        .then(|| in_l1(cache, key, value, ttls, fail_safe))
        .flatten();
    let Some(entry) = entry else {
        flight.retire(|| ());
        return;
    };
    if alone {
        flight.retire_unverified(|| {
            cache.insert_filled_alone(key, home, &stamps, entry, UNVERIFIED_LIFETIME);
        });
    } else {
        flight.retire(|| {
            cache.insert_in_l1(key, home, &stamps, entry);
        });
    }
}

/// Commits an answer (`key`, value, TTLs, whether it is a fail-safe
/// re-cache) to the store under `lease`, fenced, unless a tag or clear it
/// was stamped with moved or it cannot be encoded (then the lease is
/// released unused). Whether the store took it.
async fn commit_under<V>(
    cache: &Inner<V>,
    lease: LeaseGuard,
    (key, value, ttls, fail_safe): (&str, Option<&V>, Ttls, bool),
    home: Home,
    stamps: &Stamps,
) -> bool
where
    V: Clone + Send + Sync + 'static,
{
    if !cache.stamps_current(home, stamps).await {
        // A tag or clear moved while the fill ran.
        Counters::bump(&cache.counters().commits_refused);
        Box::pin(lease.release()).await;
        return false;
    }
    let flags = if fail_safe { FLAG_FAIL_SAFE } else { 0 };
    match cache.encode(key, value, ttls, flags, stamps) {
        Ok(bytes) => lease.commit(cache, &bytes, ttls.physical).await,
        Err(message) => {
            // Too large or not encodable: nothing to store, and the lease
            // is released before the callers hear.
            Counters::bump(&cache.counters().encode_failures);
            tracing::warn!(cache = %cache.name(), %message, "filled value not stored");
            Box::pin(lease.release()).await;
            false
        }
    }
}

/// The L1 entry of an answer, if the cache has an L1 and the answer can be
/// weighed.
fn in_l1<V>(
    cache: &Inner<V>,
    key: &str,
    value: Option<V>,
    ttls: Ttls,
    fail_safe: bool,
) -> Option<InL1<V>>
where
    V: Clone + Send + Sync + 'static,
{
    cache.tiers().l1.as_ref()?;
    let weight = weight(cache, key, value.as_ref()).ok()?;
    Some(InL1 {
        value,
        ttls,
        fail_safe,
        weight,
        age: Duration::ZERO,
    })
}

//! Freshness: what a fill may answer, what a caller is told, and how an
//! entry's age places it — fresh, due for an eager refresh, stale but
//! servable, kept only for fail-safe, or gone.
//!
//! Age is always measured by one clock: the store's own (Redis: the entry's
//! physical TTL minus its remaining `PTTL`, read with the value; in process:
//! the cache's injected [`Clock`](crate::clock::Clock)). No timestamp written
//! by one host is compared with another host's clock.

use std::sync::Arc;
use std::time::Duration;

use crate::data::entry::Ttls;
use crate::data::policy::tag_list;
use crate::data::tags::{Home, Stamps};

/// How fresh a value handed to a caller is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Freshness {
    /// Within its TTL (or just filled).
    Fresh,
    /// Past its TTL but within the grace period (stale-while-revalidate), or
    /// served after the soft timeout while the fill goes on.
    Stale,
    /// Past its TTL and served because the fill failed (error, panic or hard
    /// timeout), or re-cached by fail-safe after such a failure.
    FailSafe,
}

/// A value with its freshness: what
/// [`Cache::get_or_fill_answer`](crate::Cache::get_or_fill_answer) returns.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Fetched<V> {
    /// The value; `None` when the source answered "not found" (a cached
    /// negative answer).
    pub value: Option<V>,
    /// How fresh it is.
    pub freshness: Freshness,
}

impl<V> Fetched<V> {
    /// A value (`None`: "not found") with its freshness, e.g. to compare
    /// with what [`Cache::get_or_fill_answer`](crate::Cache::get_or_fill_answer) returned.
    pub fn new(value: Option<V>, freshness: Freshness) -> Self {
        Self { value, freshness }
    }
}

/// What a fill of [`Cache::get_or_fill_answer`](crate::Cache::get_or_fill_answer)
/// (or of [`Cache::get_many_or_fill_answers`](crate::Cache::get_many_or_fill_answers),
/// per key) answers instead of a plain value: a value or "not found", how
/// long to keep it (or not to keep it at all), and the tags it learnt from
/// what it loaded ([`tags`](Answer::tags)).
///
/// Every caller coalesced onto the fill receives the answer, whether it is
/// cached or not.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct Answer<V> {
    pub(crate) value: Option<V>,
    pub(crate) ttl: Option<Duration>,
    pub(crate) cache: bool,
    /// Tags declared from what the fill loaded, added to the call's.
    pub(crate) tags: Option<Arc<[Arc<str>]>>,
}

impl<V> Answer<V> {
    /// The source has this value; cached for the call's TTL.
    pub fn value(value: V) -> Self {
        Self::from_option(Some(value))
    }

    /// The source has nothing for the key; cached for the negative TTL.
    pub fn not_found() -> Self {
        Self::from_option(None)
    }

    /// `Some` is a value, `None` is "not found".
    pub fn from_option(value: Option<V>) -> Self {
        Self {
            value,
            ttl: None,
            cache: true,
            tags: None,
        }
    }

    /// Keep this answer for `ttl` (jitter still applies) instead of the
    /// cache's TTL.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Hand this answer to the waiting callers but store nothing.
    pub fn dont_cache(mut self) -> Self {
        self.cache = false;
        self
    }

    /// Tags the entry with `tags` as well as the call's
    /// ([`FillOptions::tags`](crate::FillOptions::tags)): tags the fill
    /// learnt from what it loaded (a user's tenant, say), so that
    /// [`Cache::invalidate_tag`](crate::Cache::invalidate_tag) of any of
    /// them makes the entry a miss in every process.
    ///
    /// Fenced like the call's tags, conservatively: their versions can only
    /// be read after the fill, so if *any* tag of the cache was invalidated
    /// while the fill ran (it may have been one of these, over data the
    /// fill had already read), the answer is handed to its callers but not
    /// stored, and counted in
    /// [`commits_refused`](crate::stats::Stats::commits_refused). Tags that
    /// break the key rules, or more than 63 in all, likewise keep the
    /// answer out of the cache (with a warning): a fill cannot fail over
    /// its tags.
    pub fn tags<I, T>(mut self, tags: I) -> Self
    where
        I: IntoIterator<Item = T>,
        T: AsRef<str>,
    {
        self.tags = Some(tag_list(tags));
        self
    }
}

/// What [`Cache::peek_entry`](crate::Cache::peek_entry) finds.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cached<V> {
    /// A servable value.
    Value {
        /// The value.
        value: V,
        /// Fresh or stale (within the grace period).
        freshness: Freshness,
    },
    /// A cached "not found".
    NotFound {
        /// Fresh or stale.
        freshness: Freshness,
    },
    /// Nothing servable (absent, or expired and kept only for fail-safe).
    Miss,
}

/// Where an entry of a given age stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    /// Fresh; nothing to do.
    Fresh,
    /// Fresh, but old enough for an eager background refresh.
    RefreshDue,
    /// Stale within the grace period: serve it and refresh in the background.
    Stale,
    /// Past the grace period: a fill must run; the value is only a fail-safe
    /// fallback (and the soft-timeout answer).
    FailSafeOnly,
    /// Past everything.
    Gone,
}

/// How old an entry may grow before it needs anything: its eager-refresh
/// point (`eager`, a fraction of the fresh TTL), else its fresh TTL. A value
/// re-cached by fail-safe is never refreshed eagerly.
pub(crate) fn quiet_for(ttls: Ttls, fail_safe: bool, eager: Option<f64>) -> Duration {
    match eager {
        Some(fraction) if !fail_safe => ttls.fresh.mul_f64(fraction),
        _ => ttls.fresh,
    }
}

/// Places an entry written with `ttls` at `age`; from `quiet` on (at most
/// the fresh TTL) a fresh entry is due for a refresh.
pub(crate) fn standing(age: Duration, ttls: Ttls, quiet: Duration) -> Standing {
    if age >= ttls.physical {
        Standing::Gone
    } else if age >= ttls.stale {
        Standing::FailSafeOnly
    } else if age >= ttls.fresh {
        Standing::Stale
    } else if age >= quiet {
        Standing::RefreshDue
    } else {
        Standing::Fresh
    }
}

/// An entry judged at its age, by whichever clock its tier trusts: its
/// value, where it stands, what a caller is told, and how much of its life
/// is left.
pub(crate) struct Judged<V> {
    pub(crate) value: Option<V>,
    pub(crate) standing: Standing,
    pub(crate) freshness: Freshness,
    pub(crate) remaining: Duration,
    /// What the entry was written with, and its age: enough to copy it into
    /// another tier with the same life.
    pub(crate) ttls: Ttls,
    pub(crate) age: Duration,
    pub(crate) fail_safe: bool,
    /// The tag versions it was filled under (entries read from a shared
    /// store; empty for in-process entries, checked when they got there).
    pub(crate) stamps: Stamps,
    /// Where the versions guarding it live in the store, once its stamps
    /// were checked there (see `read_current`): what copying it into the
    /// L1 checks them against again.
    pub(crate) home: Option<Home>,
}

impl<V> Judged<V> {
    /// Judges an entry written with `ttls`, `age` old; `fail_safe` if it was
    /// re-cached by fail-safe (it is then told as such).
    pub(crate) fn new(
        value: Option<V>,
        age: Duration,
        ttls: Ttls,
        fail_safe: bool,
        eager: Option<f64>,
    ) -> Self {
        let standing = standing(age, ttls, quiet_for(ttls, fail_safe, eager));
        let freshness = match standing {
            _ if fail_safe => Freshness::FailSafe,
            Standing::Stale => Freshness::Stale,
            _ => Freshness::Fresh,
        };
        Self {
            value,
            standing,
            freshness,
            remaining: ttls.physical.saturating_sub(age),
            ttls,
            age,
            fail_safe,
            stamps: Stamps::default(),
            home: None,
        }
    }

    /// Whether a reader is served it without waiting for a fill.
    pub(crate) fn is_servable(&self) -> bool {
        matches!(
            self.standing,
            Standing::Fresh | Standing::RefreshDue | Standing::Stale
        )
    }

    /// What a reader served it gets.
    pub(crate) fn into_fetched(self) -> Fetched<V> {
        Fetched {
            value: self.value,
            freshness: self.freshness,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ttls(fresh: u64, stale: u64, physical: u64) -> Ttls {
        Ttls {
            fresh: Duration::from_millis(fresh),
            stale: Duration::from_millis(stale),
            physical: Duration::from_millis(physical),
        }
    }

    #[test]
    fn places_ages() {
        let t = ttls(100, 150, 400);
        let at = |ms| standing(Duration::from_millis(ms), t, quiet_for(t, false, Some(0.8)));
        assert_eq!(at(0), Standing::Fresh);
        assert_eq!(at(79), Standing::Fresh);
        assert_eq!(at(80), Standing::RefreshDue);
        assert_eq!(at(100), Standing::Stale);
        assert_eq!(at(150), Standing::FailSafeOnly);
        assert_eq!(at(400), Standing::Gone);
        let never_eager = |fail_safe, eager| {
            standing(Duration::from_millis(99), t, quiet_for(t, fail_safe, eager))
        };
        assert_eq!(never_eager(false, None), Standing::Fresh);
        assert_eq!(never_eager(true, Some(0.8)), Standing::Fresh);
    }

    proptest! {
        #[test]
        fn standing_only_ages_forward(fresh in 1u64..1000, grace in 0u64..1000, keep in 0u64..1000, a in 0u64..4000, b in 0u64..4000) {
            let t = ttls(fresh, fresh + grace, fresh + grace + keep);
            let (young, old) = (a.min(b), a.max(b));
            let rank = |s| match s {
                Standing::Fresh => 0, Standing::RefreshDue => 1, Standing::Stale => 2, Standing::FailSafeOnly => 3, Standing::Gone => 4,
            };
            let quiet = quiet_for(t, false, Some(0.5));
            prop_assert!(rank(standing(Duration::from_millis(young), t, quiet)) <= rank(standing(Duration::from_millis(old), t, quiet)));
        }
    }
}

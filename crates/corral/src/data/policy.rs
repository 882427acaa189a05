//! Time-to-live, jitter, timeouts and lease settings.

use std::sync::Arc;
use std::time::Duration;

use crate::data::entry::Ttls;
use crate::data::error::ConfigError;

/// The settings a cache instance applies to every fill unless a call
/// overrides them with [`FillOptions`].
#[derive(Debug, Clone)]
pub(crate) struct Policy {
    pub(crate) ttl: Duration,
    pub(crate) jitter: f64,
    pub(crate) fill_timeout: Duration,
    pub(crate) lease_ttl: Duration,
    pub(crate) poll_interval: Duration,
    pub(crate) store_timeout: Duration,
    pub(crate) max_value_bytes: usize,
    /// How long past its TTL a value is served stale while one refresh runs.
    pub(crate) grace: Duration,
    /// The fraction of the TTL after which a background refresh starts.
    pub(crate) eager_refresh: Option<f64>,
    /// How long past its TTL a value is kept as a fail-safe fallback.
    pub(crate) fail_safe_max: Duration,
    /// How long a fail-safe value is re-cached after a failed fill.
    pub(crate) fail_safe_throttle: Duration,
    /// With a fallback at hand, how long callers wait for a fill before
    /// getting the fallback while the fill goes on.
    pub(crate) soft_timeout: Option<Duration>,
    /// Whether fail-safe without a soft timeout gets
    /// [`FAIL_SAFE_SOFT_TIMEOUT`] (see [`Policy::paired`]).
    pub(crate) pair_soft_timeout: bool,
    /// The TTL of a cached "not found".
    pub(crate) negative_ttl: Duration,
    /// How long a tag's (or clear's) version is kept in the store; no
    /// entry lives longer.
    pub(crate) tag_retention: Duration,
    /// Whether traces show raw keys rather than their stable hash.
    pub(crate) trace_raw_keys: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(60),
            jitter: 0.0,
            fill_timeout: Duration::from_secs(30),
            lease_ttl: Duration::from_secs(3),
            poll_interval: Duration::from_millis(250),
            store_timeout: Duration::from_secs(1),
            max_value_bytes: 8 << 20,
            grace: Duration::ZERO,
            eager_refresh: None,
            fail_safe_max: Duration::ZERO,
            fail_safe_throttle: Duration::from_secs(30),
            soft_timeout: None,
            pair_soft_timeout: true,
            negative_ttl: Duration::from_secs(60),
            tag_retention: Duration::from_secs(7 * 24 * 3600),
            trace_raw_keys: false,
        }
    }
}

/// With fail-safe on and no soft timeout set, how long callers with a
/// value at hand wait for a fill before they get that value (the fill goes
/// on in the background): a fill slower than this is a source in trouble,
/// exactly when the value kept for fail-safe is worth serving.
pub const FAIL_SAFE_SOFT_TIMEOUT: Duration = Duration::from_millis(100);

impl Policy {
    /// This policy with fail-safe paired with a soft timeout: with
    /// `fail_safe_max` set and no `soft_timeout`, [`FAIL_SAFE_SOFT_TIMEOUT`]
    /// (at most half the fill timeout).
    pub(crate) fn paired(mut self) -> Self {
        if self.pair_soft_timeout && !self.fail_safe_max.is_zero() && self.soft_timeout.is_none() {
            let soft = FAIL_SAFE_SOFT_TIMEOUT.min(self.fill_timeout / 2);
            self.soft_timeout = Some(soft).filter(|soft| !soft.is_zero());
        }
        self
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.ttl.is_zero() {
            return Err(ConfigError::new("ttl must be greater than zero"));
        }
        validate_jitter(self.jitter)?;
        for (name, value) in [
            ("fill_timeout", self.fill_timeout),
            ("lease_ttl", self.lease_ttl),
            ("poll_interval", self.poll_interval),
            ("store_timeout", self.store_timeout),
        ] {
            if value.is_zero() {
                return Err(ConfigError::new(format!(
                    "{name} must be greater than zero"
                )));
            }
        }
        if let Some(fraction) = self.eager_refresh {
            if fraction.is_nan() || fraction <= 0.0 || fraction >= 1.0 {
                return Err(ConfigError::new(format!(
                    "eager_refresh must be a fraction in (0, 1), got {fraction}"
                )));
            }
        }
        if self.negative_ttl.is_zero() || self.fail_safe_throttle.is_zero() {
            return Err(ConfigError::new(
                "negative_ttl and fail_safe_throttle must be greater than zero",
            ));
        }
        if self
            .soft_timeout
            .is_some_and(|soft| soft.is_zero() || soft >= self.fill_timeout)
        {
            return Err(ConfigError::new(
                "soft_timeout must be greater than zero and less than fill_timeout",
            ));
        }
        if self.tag_retention.is_zero() {
            return Err(ConfigError::new("tag_retention must be greater than zero"));
        }
        if self.lease_ttl < Duration::from_millis(30) {
            return Err(ConfigError::new("lease_ttl must be at least 30 ms"));
        }
        Ok(())
    }

    /// The TTLs of an answer kept for `ttl`: fresh for `ttl`, servable
    /// stale for the grace period after it, and kept for fail-safe up to
    /// `fail_safe_max` after it.
    ///
    /// No entry outlives `tag_retention`: a tag version forgotten by the
    /// store must not make an entry filled before its invalidation current
    /// again.
    pub(crate) fn ttls(&self, ttl: Duration) -> Ttls {
        let cap = self.tag_retention;
        let stale = ttl.saturating_add(self.grace);
        Ttls {
            fresh: ttl.min(cap),
            stale: stale.min(cap),
            physical: stale.max(ttl.saturating_add(self.fail_safe_max)).min(cap),
        }
    }

    /// The TTLs of a fail-safe value re-cached after a failed fill, when
    /// `remaining` is left of its physical life: fresh for the throttle
    /// window, never kept past its original end.
    pub(crate) fn fail_safe_ttls(&self, remaining: Duration) -> Ttls {
        let fresh = self.fail_safe_throttle.min(remaining);
        Ttls {
            fresh,
            stale: fresh,
            physical: remaining,
        }
    }

    /// How long a fence outlives its lease grant: a leader may commit until
    /// its hard timeout, even if a renewal was lost.
    pub(crate) fn fence_ttl(&self, fill_timeout: Duration) -> Duration {
        fill_timeout.saturating_add(self.lease_ttl)
    }
}

/// Checks a jitter fraction: a number in `[0, 1]`.
pub(crate) fn validate_jitter(jitter: f64) -> Result<(), ConfigError> {
    if jitter.is_nan() || !(0.0..=1.0).contains(&jitter) {
        return Err(ConfigError::new(format!(
            "jitter must be a fraction in [0, 1], got {jitter}"
        )));
    }
    Ok(())
}

/// Draws a TTL uniformly from `[ttl·(1−jitter), ttl·(1+jitter)]`, using
/// `unit`, a number in `[0, 1)`. The result is never zero (at least 1 ms).
pub(crate) fn jittered(ttl: Duration, jitter: f64, unit: f64) -> Duration {
    if jitter <= 0.0 || jitter.is_nan() {
        return ttl.max(Duration::from_millis(1));
    }
    let factor = 1.0 - jitter + 2.0 * jitter * unit.clamp(0.0, 1.0);
    ttl.mul_f64(factor.max(0.0)).max(Duration::from_millis(1))
}

/// Per-call settings of a [`get_or_fill`](crate::Cache::get_or_fill), set
/// with [`GetOrFill::options`](crate::GetOrFill::options).
///
/// When concurrent calls on one key pass different options, the options of
/// the call that leads the flight (the first one) apply to the fill; the
/// others only wait for its outcome.
#[derive(Debug, Clone, Default, PartialEq)]
#[must_use]
pub struct FillOptions {
    pub(crate) ttl: Option<Duration>,
    pub(crate) fill_timeout: Option<Duration>,
    pub(crate) soft_timeout: Option<Duration>,
    pub(crate) tags: Option<Arc<[Arc<str>]>>,
}

impl FillOptions {
    /// The cache's defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// The TTL of the filled value (jitter still applies).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// The hard timeout of this fill.
    pub fn fill_timeout(mut self, timeout: Duration) -> Self {
        self.fill_timeout = Some(timeout);
        self
    }

    /// The soft timeout of this fill: with a stale or fail-safe value at
    /// hand, callers get it after this long while the fill goes on.
    pub fn soft_timeout(mut self, timeout: Duration) -> Self {
        self.soft_timeout = Some(timeout);
        self
    }

    /// The tags of the filled entry: [`Cache::invalidate_tag`] of any of
    /// them makes it a miss in every process sharing the store, and fences
    /// the fill if it is still running. Tags follow the key rules
    /// ([`validate_key`](crate::validate_key)); at most 63 per entry
    /// (duplicates count once); invalid tags make a call that reads past
    /// the L1 fail with [`Error::InvalidKey`](crate::Error::InvalidKey). A
    /// hit in the L1 does not look at the call's options (they may not
    /// even be built: see `GetOrFill::options`), so a key already held in
    /// process is answered whatever its call's tags.
    ///
    /// [`Cache::invalidate_tag`]: crate::Cache::invalidate_tag
    pub fn tags<I, T>(mut self, tags: I) -> Self
    where
        I: IntoIterator<Item = T>,
        T: AsRef<str>,
    {
        self.tags = Some(tag_list(tags));
        self
    }
}

/// Per-call settings of a [`set`](crate::Cache::set) or
/// [`set_with_ttl`](crate::Cache::set_with_ttl), set with
/// [`Set::options`](crate::Set::options).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use]
pub struct WriteOptions {
    pub(crate) tags: Option<Arc<[Arc<str>]>>,
}

impl WriteOptions {
    /// No tags.
    pub fn new() -> Self {
        Self::default()
    }

    /// The tags of the written entry, as [`FillOptions::tags`]: an
    /// [`invalidate_tag`](crate::Cache::invalidate_tag) of any of them
    /// makes it a miss in every process. A write replaces the entry with
    /// its tags: one written without tags carries none, whatever the entry
    /// it replaces carried.
    pub fn tags<I, T>(mut self, tags: I) -> Self
    where
        I: IntoIterator<Item = T>,
        T: AsRef<str>,
    {
        self.tags = Some(tag_list(tags));
        self
    }
}

/// Tags as a cache keeps them: shared, in the order given.
pub(crate) fn tag_list<I, T>(tags: I) -> Arc<[Arc<str>]>
where
    I: IntoIterator<Item = T>,
    T: AsRef<str>,
{
    tags.into_iter()
        .map(|tag| Arc::from(tag.as_ref()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn jitter_validation() {
        assert!(validate_jitter(0.0).is_ok());
        assert!(validate_jitter(1.0).is_ok());
        assert!(validate_jitter(f64::NAN).is_err());
        assert!(validate_jitter(-0.1).is_err());
        assert!(validate_jitter(1.01).is_err());
        assert!(validate_jitter(f64::INFINITY).is_err());
    }

    proptest! {
        #[test]
        fn jittered_ttl_stays_in_bounds(ttl_ms in 1u64..10_000_000, jitter in 0.0f64..=1.0, unit in 0.0f64..1.0) {
            let ttl = Duration::from_millis(ttl_ms);
            let drawn = jittered(ttl, jitter, unit);
            let low = ttl.mul_f64(1.0 - jitter).max(Duration::from_millis(1));
            let high = ttl.mul_f64(1.0 + jitter).max(Duration::from_millis(1));
            prop_assert!(drawn + Duration::from_nanos(1) >= low, "{drawn:?} < {low:?}");
            prop_assert!(drawn <= high + Duration::from_nanos(1), "{drawn:?} > {high:?}");
        }
    }
}

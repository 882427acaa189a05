//! Clocks that judge the freshness of in-process entries.
//!
//! A clock belongs to a cache instance (or is injected); nothing here is
//! global. Shared stores judge freshness by their own clock (see
//! [`crate::store`]), never by this one.

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A monotonic millisecond clock, read on every in-process hit.
///
/// Implementations must be cheap (a hit reads it once) and never go
/// backwards.
pub trait Clock: Send + Sync + Debug + 'static {
    /// Milliseconds since an arbitrary, fixed origin.
    fn now_millis(&self) -> u64;
}

/// The default clock: the kernel's coarse monotonic clock.
///
/// Reading it costs a few nanoseconds instead of the ~25 ns of
/// `Instant::now()`; its resolution is one scheduler tick (1–4 ms on Linux),
/// so TTLs are honoured to within a tick.
///
/// A read writes no shared memory: it uses
/// `coarsetime::Instant::now_without_cache_update`, because
/// `coarsetime::Instant::now` also stores the reading into a process-wide
/// atomic, which made every hit write one cache line shared by every thread
/// (measured in `BENCHMARKS.md`).
#[derive(Debug)]
pub struct CoarseClock {
    origin: coarsetime::Instant,
}

impl CoarseClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        Self {
            origin: coarsetime::Instant::now_without_cache_update(),
        }
    }
}

impl Default for CoarseClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for CoarseClock {
    #[inline]
    fn now_millis(&self) -> u64 {
        coarsetime::Instant::now_without_cache_update()
            .duration_since(self.origin)
            .as_millis()
    }
}

/// tokio's clock: follows `tokio::time::pause()` and `advance()`, for tests
/// of TTL behaviour under paused time.
#[derive(Debug)]
pub struct TokioClock {
    origin: tokio::time::Instant,
}

impl TokioClock {
    /// A clock whose origin is tokio's now.
    pub fn new() -> Self {
        Self {
            origin: tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    #[inline]
    fn now_millis(&self) -> u64 {
        millis(tokio::time::Instant::now().duration_since(self.origin))
    }
}

/// A clock moved only by hand, for deterministic tests.
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicU64,
}

impl ManualClock {
    /// A manual clock at zero, shared so a test can keep moving it.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.now.fetch_add(millis(by), Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_millis(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }
}

impl Clock for Arc<ManualClock> {
    fn now_millis(&self) -> u64 {
        self.as_ref().now_millis()
    }
}

/// Converts a duration to whole milliseconds, saturating.
#[inline]
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Sleeps until `deadline` (tokio's clock), or forever without one.
pub(crate) async fn sleep_until_some(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coarse_clock_reads_write_no_shared_memory() {
        // `coarsetime::Instant::now` would store each reading in the
        // process-wide cache that `recent()` returns; our reads must not.
        let clock = CoarseClock::new();
        let recent = coarsetime::Instant::recent();
        let start = clock.now_millis();
        while clock.now_millis() < start + 20 {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(coarsetime::Instant::recent(), recent);
    }
}

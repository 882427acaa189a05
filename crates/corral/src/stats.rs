//! Per-instance counters and their plain snapshot.
//!
//! Hits are counted on striped, cache-line padded cells chosen by the
//! current thread, so concurrent hits on one hot key do not contend on one
//! shared cache line; [`Cache::stats`](crate::Cache::stats) sums the stripes.

use crossbeam_utils::CachePadded;

use crate::freshness::Freshness;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Number of stripes of a striped counter (a power of two).
const STRIPES: usize = 16;

/// A counter split over cache-line padded stripes.
pub(crate) struct StripedCounter {
    stripes: Box<[CachePadded<AtomicU64>; STRIPES]>,
}

impl StripedCounter {
    fn new() -> Self {
        Self {
            stripes: Box::new(std::array::from_fn(|_| CachePadded::new(AtomicU64::new(0)))),
        }
    }

    #[inline]
    pub(crate) fn incr(&self) {
        self.stripes[stripe_index()].fetch_add(1, Relaxed);
    }

    fn sum(&self) -> u64 {
        self.stripes.iter().map(|cell| cell.load(Relaxed)).sum()
    }
}

/// The stripe of the calling thread: derived from the address of a
/// thread-local, which differs per thread, so no shared counter hands out
/// indices.
#[inline]
fn stripe_index() -> usize {
    thread_local! {
        static ANCHOR: u8 = const { 0 };
    }
    ANCHOR.with(|anchor| {
        let address = std::ptr::from_ref(anchor) as usize;
        (address.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) & (STRIPES - 1)
    })
}

macro_rules! counters {
    ($( $(#[$doc:meta])* $name:ident ),* $(,)?) => {
        /// A plain snapshot of one cache instance's counters.
        ///
        /// Counters only grow; subtract two snapshots to get the activity in
        /// between.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        #[non_exhaustive]
        pub struct Stats {
            /// Reads answered from the cache.
            pub hits: u64,
            $( $(#[$doc])* pub $name: u64, )*
        }

        /// The live counters of one cache instance.
        pub(crate) struct Counters {
            pub(crate) hits: StripedCounter,
            $( pub(crate) $name: AtomicU64, )*
        }

        impl Counters {
            pub(crate) fn new() -> Self {
                Self { hits: StripedCounter::new(), $( $name: AtomicU64::new(0), )* }
            }

            pub(crate) fn snapshot(&self) -> Stats {
                Stats { hits: self.hits.sum(), $( $name: self.$name.load(Relaxed), )* }
            }
        }
    };
}

counters! {
    /// Reads that found no servable value (each caller counts once).
    misses,
    /// Fills started (the source of truth was called).
    fills,
    /// Callers that joined a fill already in flight instead of starting one.
    coalesced,
    /// Fills that returned an error.
    fill_errors,
    /// Fills that panicked.
    fill_panics,
    /// Flights stopped by the hard `fill_timeout`.
    fill_timeouts,
    /// Stored bytes that could not be decoded (treated as a miss).
    decode_failures,
    /// Values that could not be encoded or were over the size limit (returned, not stored).
    encode_failures,
    /// Values written to the store by a fill.
    commits,
    /// Fill commits the store refused because the key was written, invalidated or leased anew meanwhile.
    commits_refused,
    /// Store calls that failed or timed out.
    store_errors,
    /// Fills run without a lease because the store was unreachable.
    fail_open_fills,
    /// Times a flight leader found the lease held by another process and waited.
    lease_waits,
    /// Lease renewals sent while a long fill ran.
    lease_renewals,
    /// Callers served a stale value (within the grace period, or at the soft timeout).
    stale_hits,
    /// Callers served a fail-safe value because the fill failed.
    fail_safe_hits,
    /// Flights that served their fallback at the soft timeout and went on filling.
    soft_timeouts,
    /// Background refreshes started (stale-while-revalidate or eager).
    refreshes,
    /// Background refreshes skipped because the refresh limiter was full.
    refreshes_skipped,
    /// Background refreshes not started because a fill of the key was already running, here or in another process.
    refreshes_stood_down,
}

impl Counters {
    #[inline]
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }

    /// Counts one value served with `freshness`.
    pub(crate) fn served(&self, freshness: Freshness) {
        match freshness {
            Freshness::Fresh => self.hits.incr(),
            Freshness::Stale => Self::bump(&self.stale_hits),
            Freshness::FailSafe => Self::bump(&self.fail_safe_hits),
        }
    }
}

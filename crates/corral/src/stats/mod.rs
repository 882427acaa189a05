//! Per-instance counters and their plain snapshot.
//!
//! Hits are counted on striped, cache-line padded cells, each owned by one
//! thread until that thread exits, so concurrent hits on one hot key write
//! no shared cache line and take no locked instruction;
//! [`Cache::stats`](crate::Cache::stats) sums the stripes.

#[cfg(feature = "metrics")]
pub(crate) mod export;
pub(crate) mod health;

use std::cell::{Cell, RefCell};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, Weak};

use crossbeam_utils::CachePadded;

use crate::data::compression::Packing;
use crate::data::freshness::Freshness;

/// Every this many counts on its own stripe, [`StripedCounter::incr`]
/// tells the calling thread it passed a milestone (a power of two).
pub(crate) const MILESTONE: u64 = 4096;

/// One stripe: a count written by its owner thread alone.
#[derive(Default)]
struct Stripe {
    /// The owner's thread identity (see [`thread_identity`]); 0 while
    /// unowned. Claimed with an acquiring compare-exchange, released by the
    /// owner when it exits (see [`OwnedStripes`]).
    owner: AtomicUsize,
    /// Written only by the owner, with a plain load and store: no other
    /// thread writes it meanwhile, so no increment is lost and none needs a
    /// locked instruction.
    count: AtomicU64,
}

/// The stripes of one counter, shared weakly with the threads that own one
/// (an owned stripe does not keep a dropped cache's counters alive).
type Stripes = [CachePadded<Stripe>];

/// A counter split over cache-line padded stripes.
///
/// A thread counts on the stripe its probe (a per-thread number, see
/// [`thread_probe`]) selects. If the stripe is free the thread claims it
/// and from then on bumps it without a read-modify-write, until it exits.
/// If another thread owns it, the count goes to the shared `overflow` cell
/// with `fetch_add`, and the thread moves its probe on, so that threads
/// that collide spread out over the free stripes.
pub(crate) struct StripedCounter {
    stripes: Arc<Stripes>,
    /// `stripes.len() - 1`; the length is a power of two.
    mask: usize,
    overflow: CachePadded<AtomicU64>,
}

impl StripedCounter {
    fn new() -> Self {
        // Enough stripes that the threads hitting one cache rarely collide,
        // as LongAdder sizes its cells by the CPUs.
        let cpus = std::thread::available_parallelism().map_or(4, usize::from);
        let len = (4 * cpus).next_power_of_two().clamp(16, 256);
        Self {
            stripes: (0..len)
                .map(|_| CachePadded::new(Stripe::default()))
                .collect(),
            mask: len - 1,
            overflow: CachePadded::new(AtomicU64::new(0)),
        }
    }

    /// Counts one. Returns true once every [`MILESTONE`] counts of the
    /// calling thread on its own stripe (never for overflow counts): a cheap
    /// sign of a high rate for whoever needs one.
    #[inline]
    pub(crate) fn incr(&self) -> bool {
        let me = thread_identity();
        let probe = PROBE.with(Cell::get);
        if let Some(stripe) = self.stripes.get(probe & self.mask) {
            if stripe.owner.load(Relaxed) == me {
                let count = stripe.count.load(Relaxed) + 1;
                stripe.count.store(count, Relaxed);
                return count.is_multiple_of(MILESTONE);
            }
        }
        self.incr_unowned(me);
        false
    }

    /// [`incr`](Self::incr) for a thread that does not own the stripe its
    /// probe selects: claims it if it is free; else counts on the overflow
    /// cell and moves the probe on.
    #[cold]
    #[inline(never)]
    fn incr_unowned(&self, me: usize) {
        let probe = match PROBE.with(Cell::get) {
            0 => first_probe(me),
            probe => probe,
        };
        PROBE.with(|cell| cell.set(probe));
        let index = probe & self.mask;
        let stripe = &self.stripes[index];
        let claimed = match stripe.owner.compare_exchange(0, me, Acquire, Relaxed) {
            Ok(_) => true,
            // Its own stripe, once the first probe is set.
            Err(owner) => owner == me,
        };
        if !claimed {
            self.overflow.fetch_add(1, Relaxed);
            PROBE.with(|cell| cell.set(next_probe(probe)));
            return;
        }
        // Owned: a previous owner's last count happened before its release,
        // which the claim acquired.
        stripe.count.fetch_add(1, Relaxed);
        let registered = OWNED.try_with(|owned| owned.register(&self.stripes, index));
        if registered.is_err() {
            // This thread is exiting: nothing would release the stripe.
            stripe.owner.store(0, Release);
        }
    }

    fn sum(&self) -> u64 {
        let owned: u64 = self
            .stripes
            .iter()
            .map(|stripe| stripe.count.load(Relaxed))
            .sum();
        owned + self.overflow.load(Relaxed)
    }
}

thread_local! {
    /// The current thread's probe; 0 until its first unowned count.
    static PROBE: Cell<usize> = const { Cell::new(0) };
    /// The stripes the current thread owns, released when it exits.
    static OWNED: OwnedStripes = const { OwnedStripes(RefCell::new(Vec::new())) };
}

/// The stripes one thread owns, across counters.
struct OwnedStripes(RefCell<Vec<(Weak<Stripes>, usize)>>);

impl OwnedStripes {
    fn register(&self, stripes: &Arc<Stripes>, index: usize) {
        let mut owned = self.0.borrow_mut();
        // Forget the stripes of counters since dropped.
        owned.retain(|(stripes, _)| stripes.strong_count() > 0);
        owned.push((Arc::downgrade(stripes), index));
    }
}

impl Drop for OwnedStripes {
    fn drop(&mut self) {
        for (stripes, index) in self.0.get_mut().drain(..) {
            if let Some(stripes) = stripes.upgrade() {
                // After this thread's last count: the next owner acquires it.
                stripes[index].owner.store(0, Release);
            }
        }
    }
}

/// A number that differs between live threads and is never 0: the address
/// of a thread-local. Nothing shared hands it out.
#[inline]
fn thread_identity() -> usize {
    thread_local! {
        static ANCHOR: u8 = const { 0 };
    }
    ANCHOR.with(|anchor| std::ptr::from_ref(anchor) as usize)
}

/// A thread's first probe: its identity, mixed (splitmix64's finalizer) so
/// that threads whose identities differ by a fixed stride spread evenly.
fn first_probe(me: usize) -> usize {
    let mut z = (me as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) as usize | 1
}

/// The probe after `probe` (xorshift): another stripe to try.
fn next_probe(probe: usize) -> usize {
    let mut x = probe;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x.max(1)
}

macro_rules! counters {
    (
        $( $(#[$doc:meta])* $name:ident ),* $(,)?
        ; kept by the breaker: $( $(#[$bdoc:meta])* $bname:ident ),* $(,)?
    ) => {
        /// A plain snapshot of one cache instance's counters.
        ///
        /// Counters only grow; subtract two snapshots to get the activity in
        /// between. It serializes (serde) as an object of its counters, for
        /// a JSON health or stats endpoint.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
        #[non_exhaustive]
        pub struct Stats {
            /// Reads answered from the cache.
            pub hits: u64,
            /// Of the hits, those read from the shared store (L2) because the L1 had no servable copy (or there is no L1).
            pub l2_hits: u64,
            $( $(#[$doc])* pub $name: u64, )*
            $( $(#[$bdoc])* pub $bname: u64, )*
        }

        /// The live counters of one cache instance.
        pub(crate) struct Counters {
            pub(crate) hits: StripedCounter,
            /// Striped too: every L2 hit counts here.
            pub(crate) l2_hits: StripedCounter,
            $( pub(crate) $name: AtomicU64, )*
        }

        impl Counters {
            pub(crate) fn new() -> Self {
                Self {
                    hits: StripedCounter::new(),
                    l2_hits: StripedCounter::new(),
                    $( $name: AtomicU64::new(0), )*
                }
            }

            /// The snapshot of these counters; the breaker's are added by
            /// `Inner::stats`.
            pub(crate) fn snapshot(&self) -> Stats {
                Stats {
                    hits: self.hits.sum(),
                    l2_hits: self.l2_hits.sum(),
                    $( $name: self.$name.load(Relaxed), )*
                    $( $bname: 0, )*
                }
            }
        }
    };
}

counters! {
    /// Reads that found no servable value (each caller counts once).
    misses,
    /// Entries read from the shared store that a tag invalidation or a clear had made a miss.
    tag_misses,
    /// Backplane messages from other caches that this cache acted on: a key evicted from the L1, or a tag or clear version forgotten (and its L1 entries evicted).
    backplane_messages,
    /// Times the cache dropped its whole L1 and forgot its tag versions because backplane messages may have been lost: the store's subscription was confirmed anew after its connection was interrupted, or confirmed for the first time after a read had gone ahead of it. 0 after a healthy start.
    backplane_resets,
    /// Changes the store's server reported (Redis client tracking: a write by any client, a delete, an expiry, an eviction of a key this process read) that this cache acted on: a key evicted from the L1, or a tag or clear version forgotten (and its L1 entries evicted).
    tracking_invalidations,
    /// Times the cache dropped its whole L1 and forgot its tag versions because the connection its store's server tracked reads on was lost or replaced (what it tracked is gone with it).
    l1_flushes_reconnect,
    /// Times the cache dropped its whole L1 and forgot its tag versions because its store moved to another server (a failover), which tracked nothing read before.
    l1_flushes_failover,
    /// Times the cache dropped its whole L1 and forgot its tag versions because the store's server dropped its data (`FLUSHALL`, `FLUSHDB`).
    l1_flushes_server_flush,
    /// Times the cache dropped its whole L1 and forgot its tag versions because its Redis Cluster's slot map changed while its masters stayed (a slot moved between them).
    l1_flushes_topology,
    /// Times the cache dropped what its L1 holds on the store's word (read from the store, or kept once the store took it) and forgot its tag versions because a connection carrying the server's reports (the tracked connection, the backplane's subscription) gave no answer to a health check or was lost: reports may be getting lost. Once per silence; the copies filled from the source while the store did not answer are kept.
    l1_flushes_silence,
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
    /// Stored bytes that did not decrypt (feature `encryption`): tampered, copied from another key or cache, sealed under an unknown master key, or unencrypted. Treated as a miss, never served.
    decrypt_failures,
    /// Values that could not be encoded or were over the size limit (returned, not stored).
    encode_failures,
    /// Values written to the store by a fill.
    commits,
    /// Fill commits the store refused because the key was written, invalidated or leased anew meanwhile.
    commits_refused,
    /// Store calls that failed or timed out (calls the circuit breaker skipped are counted in `store_calls_skipped` instead).
    store_errors,
    /// Fills run without a lease because the store did not answer (it stayed silent for as long as a lease lives) or refused: each held a permit of the fail-open budget.
    fail_open_fills,
    /// Flights whose lease request the store did not answer, or refused: each waited for the store (one per flight, however many retries) before it got an answer, served a stale value, or filled without a lease.
    store_waits,
    /// Fill leases granted by the shared store (a fill or refresh that will run under it).
    leases_acquired,
    /// Waits of a flight leader for another process's fill (the lease held
    /// elsewhere): one per wait, however many polls and wake-ups it takes.
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
    /// Fills that waited in the fill budget's queue (its permits were all out, here or in the fleet).
    fills_queued,
    /// Flights that got no fill-budget permit within its `max_wait`: their callers got `Error::Overloaded` (or a stale or fail-safe value), and the source was not called.
    overloads,
    /// Fleet permits taken from the shared store for a fill.
    fleet_permits,
    /// Fills that ran on this process's budget permit alone because the store did not answer for a fleet permit.
    fleet_fail_open,
    /// Values written to the shared store compressed (see [`CacheBuilder::compression`](crate::CacheBuilder::compression)).
    compressed_values,
    /// Values at or over the compression threshold written as they are, because compressing did not save an eighth of their bytes (already compressed data, say).
    compression_skipped,
    /// Encoded bytes of the values written compressed, before compression (see [`compression_ratio`](Stats::compression_ratio)).
    compression_bytes_before,
    /// Bytes of the values written compressed, after compression (their frames).
    compression_bytes_after,
    ; kept by the breaker:
    /// Times the store's circuit breaker opened after consecutive failed store calls (a failed probe keeps it open: an outage counts once).
    breaker_opened,
    /// Store calls not made because the circuit breaker was open (or its one half-open probe was in flight); not counted in `store_errors`.
    store_calls_skipped,
}

impl Stats {
    /// Bytes before over bytes after compression of the values this cache
    /// wrote compressed ([`compression_bytes_before`](Self::compression_bytes_before)
    /// over [`compression_bytes_after`](Self::compression_bytes_after)):
    /// 4.0 when they take a quarter of their encoded size. `None` before
    /// the first value written compressed. Of two snapshots'
    /// difference, the ratio over that stretch.
    pub fn compression_ratio(&self) -> Option<f64> {
        (self.compression_bytes_after > 0)
            .then(|| self.compression_bytes_before as f64 / self.compression_bytes_after as f64)
    }
}

impl Counters {
    #[inline]
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }

    /// Counts what compression did to a value written.
    pub(crate) fn packed(&self, packing: Packing) {
        match packing {
            Packing::Plain => {}
            Packing::Skipped => Self::bump(&self.compression_skipped),
            Packing::Packed { before, after } => {
                Self::bump(&self.compressed_values);
                self.compression_bytes_before
                    .fetch_add(before as u64, Relaxed);
                self.compression_bytes_after
                    .fetch_add(after as u64, Relaxed);
            }
        }
    }

    /// Counts a failed store call in `store_errors`, unless the circuit
    /// breaker skipped it (counted by the breaker).
    pub(crate) fn store_failed(&self, error: &crate::data::error::StoreError) {
        if !error.is_breaker_open() {
            Self::bump(&self.store_errors);
        }
    }

    /// Counts one value served with `freshness`.
    pub(crate) fn served(&self, freshness: Freshness) {
        match freshness {
            Freshness::Fresh => {
                self.hits.incr();
            }
            Freshness::Stale => Self::bump(&self.stale_hits),
            Freshness::FailSafe => Self::bump(&self.fail_safe_hits),
        }
    }
}

#[cfg(all(test, not(shuttle)))]
mod tests {
    use super::*;

    #[test]
    fn stats_serialize_as_an_object_of_their_counters() {
        let stats = Stats {
            fills: 3,
            store_waits: 2,
            ..Stats::default()
        };
        let json = serde_json::to_value(stats).expect("serializes");
        assert_eq!(json["fills"], 3);
        assert_eq!(json["store_waits"], 2);
        assert_eq!(json["breaker_opened"], 0);
    }

    #[test]
    fn counts_from_many_threads_add_up_exactly() {
        // More threads than stripes: some own a stripe, the rest share the
        // overflow cell; none may lose a count.
        let counter = StripedCounter::new();
        let threads: u64 = 48;
        let per_thread: u64 = 20_000;
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| {
                    for _ in 0..per_thread {
                        counter.incr();
                    }
                });
            }
        });
        assert_eq!(counter.sum(), threads * per_thread);
    }

    #[test]
    fn a_stripe_is_released_when_its_owner_exits() {
        // One thread after another: each finds its stripe free (never
        // claimed, or released by an exited owner), so none overflows.
        // (`join`, not a scope: a joined thread has run its thread-local
        // destructors.)
        let counter = Arc::new(StripedCounter::new());
        for _ in 0..40 {
            let counter = Arc::clone(&counter);
            let thread = std::thread::spawn(move || {
                for _ in 0..100 {
                    counter.incr();
                }
            });
            thread.join().expect("counting thread");
        }
        assert_eq!(counter.overflow.load(Relaxed), 0);
        assert_eq!(counter.sum(), 40 * 100);
    }

    #[test]
    fn concurrent_threads_settle_on_stripes_of_their_own() {
        // Threads whose probes collide move on to free stripes instead of
        // counting on the shared overflow cell.
        let counter = StripedCounter::new();
        let per_thread: u64 = 100_000;
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    for _ in 0..per_thread {
                        counter.incr();
                    }
                });
            }
        });
        assert!(counter.overflow.load(Relaxed) < 64);
        assert_eq!(counter.sum(), 4 * per_thread);
    }

    #[test]
    fn a_thread_on_its_own_stripe_passes_a_milestone_every_milestone_counts() {
        let counter = StripedCounter::new();
        let milestones = (0..3 * MILESTONE + 7).filter(|_| counter.incr()).count();
        assert_eq!(milestones, 3);
        assert_eq!(counter.sum(), 3 * MILESTONE + 7);
    }
}

//! The default clock of the in-process tier: the coarse clock, plus a
//! reading kept current by a background thread while the cache is hot, so
//! that a hit compares its entry's deadline with one load instead of
//! calling the clock.
//!
//! Reading the clock (`clock_gettime` through the vDSO and the conversion
//! to milliseconds) is about 5 ns, a tenth of a whole hit. A ticking thread
//! costs a wake-up per tick (tens of microseconds of CPU each on a VM), so
//! it only pays for itself on caches that take hundreds of thousands of
//! hits a second. Hence:
//!
//! - No thread exists until the cache is hot: hits read the coarse clock.
//! - Hot means [`HOT_GAP`] or less between two hit-counter milestones
//!   ([`MILESTONE`] hits of one thread), i.e. about 500,000 hits a second.
//!   The first such gap starts the ticker thread (or wakes it).
//! - While it ticks, the thread stores a reading every [`TICK`], the
//!   coarse clock's own resolution on most kernels, and every [`WINDOW`]
//!   checks that the cache is still hot; if not, it stops ticking (hits go
//!   back to the clock) and parks until the next hot gap. A cooled cache
//!   costs no wake-ups.
//! - The thread holds none of the cache; dropping the cache ends it.
//!
//! A ticked reading is never ahead of the clock, so an entry is never
//! judged expired early; it is behind by at most a tick while the thread
//! runs on time. If the thread is starved of CPU while hits go on, each
//! milestone (every [`MILESTONE`] hits of a thread) catches the reading up
//! to the clock.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::clock::{Clock, CoarseClock};
#[cfg(doc)]
use crate::stats::MILESTONE;

/// How often a hot cache's reading is refreshed.
pub(crate) const TICK: Duration = Duration::from_millis(4);
/// The longest gap between two hit milestones of a hot cache.
pub(crate) const HOT_GAP: Duration = Duration::from_millis(8);
/// How often a ticking thread checks that its cache is still hot.
pub(crate) const WINDOW: Duration = Duration::from_millis(256);
/// Milestones per [`WINDOW`] that keep a cache hot: a rate of one per
/// [`HOT_GAP`].
const HOT_MILESTONES_PER_WINDOW: u64 = (WINDOW.as_millis() / HOT_GAP.as_millis()) as u64;
/// Ticks per [`WINDOW`].
const TICKS_PER_WINDOW: u32 = (WINDOW.as_millis() / TICK.as_millis()) as u32;
/// A ticked reading this far behind the clock at a milestone is caught up.
const CATCH_UP_MS: u64 = 2 * TICK.as_millis() as u64;

/// No ticker thread has been started.
const THREAD_NONE: u8 = 0;
/// The ticker thread was started.
const THREAD_STARTED: u8 = 1;
/// The ticker thread could not be started; hits read the clock.
const THREAD_FAILED: u8 = 2;

/// What the cache and its ticker thread share.
struct Shared {
    /// The latest ticked reading, or 0 while not ticking. Only the ticker
    /// thread stores a reading or 0; a milestone may only replace the exact
    /// reading it saw with a later one.
    ticked: CachePadded<AtomicU64>,
    clock: CoarseClock,
    /// Milestones reported so far.
    milestones: AtomicU64,
    /// The reading at the latest milestone.
    last_milestone: AtomicU64,
    /// A hot gap was seen while not ticking: the thread should tick.
    wanted: AtomicBool,
    /// Tick however cool the cache gets (see [`TickedClock::keep_ticking`]).
    pinned: AtomicBool,
    /// The cache is gone: the thread should end.
    closed: AtomicBool,
}

impl Shared {
    /// The clock's reading, plus one so that no reading is 0.
    fn read(&self) -> u64 {
        self.clock.now_millis().saturating_add(1)
    }
}

/// The coarse clock with a ticked reading for hot caches. One per cache
/// instance.
pub(crate) struct TickedClock {
    shared: Arc<Shared>,
    /// The name the ticker thread is given.
    thread_name: String,
    state: AtomicU8,
    thread: OnceLock<Thread>,
}

impl TickedClock {
    /// A clock whose origin is now; `cache_name` names its ticker thread.
    pub(crate) fn new(cache_name: &str) -> Self {
        Self {
            shared: Arc::new(Shared {
                ticked: CachePadded::new(AtomicU64::new(0)),
                clock: CoarseClock::new(),
                milestones: AtomicU64::new(0),
                last_milestone: AtomicU64::new(0),
                wanted: AtomicBool::new(false),
                pinned: AtomicBool::new(false),
                closed: AtomicBool::new(false),
            }),
            thread_name: format!("corral-tick-{cache_name}"),
            state: AtomicU8::new(THREAD_NONE),
            thread: OnceLock::new(),
        }
    }

    /// Milliseconds since the origin, plus one: the clock itself.
    #[inline]
    pub(crate) fn now_millis(&self) -> u64 {
        self.shared.read()
    }

    /// The reading a hit compares with: the ticked one while ticking, else
    /// the clock's. Never ahead of [`now_millis`](Self::now_millis).
    #[inline]
    pub(crate) fn hit_now(&self) -> u64 {
        match self.shared.ticked.load(Relaxed) {
            0 => self.shared.read(),
            ticked => ticked,
        }
    }

    /// Whether hits currently use a ticked reading.
    #[cfg(any(test, feature = "test-hooks"))]
    pub(crate) fn ticking(&self) -> bool {
        self.shared.ticked.load(Relaxed) != 0
    }

    /// A thread passed a hit-counter milestone: starts ticking if the last
    /// one was recent enough, or catches a lagging reading up.
    #[cold]
    #[inline(never)]
    pub(crate) fn milestone(&self) {
        let shared = &*self.shared;
        let now = shared.read();
        let previous = shared.last_milestone.swap(now, Relaxed);
        shared.milestones.fetch_add(1, Relaxed);
        let ticked = shared.ticked.load(Relaxed);
        if ticked != 0 {
            if now.saturating_sub(ticked) > CATCH_UP_MS {
                // Fails if the thread stored a newer reading or stopped
                // ticking meanwhile: either way nothing to catch up.
                let _ = shared
                    .ticked
                    .compare_exchange(ticked, now, Relaxed, Relaxed);
            }
            return;
        }
        // `previous` is 0 before the first milestone: no gap yet.
        if previous != 0 && now.saturating_sub(previous) <= crate::clock::millis(HOT_GAP) {
            self.start_ticking();
        }
    }

    /// Starts ticking now and never stops for a cool cache, only when the
    /// clock is dropped: for measuring and testing a hot cache's hits where
    /// hits cannot come fast enough to keep it hot (under valgrind).
    #[cfg(any(test, feature = "test-hooks"))]
    pub(crate) fn keep_ticking(&self) {
        self.shared.pinned.store(true, Relaxed);
        self.start_ticking();
    }

    fn start_ticking(&self) {
        self.shared.wanted.store(true, Relaxed);
        match self
            .state
            .compare_exchange(THREAD_NONE, THREAD_STARTED, Relaxed, Relaxed)
        {
            Ok(_) => self.spawn(),
            Err(THREAD_STARTED) => {
                // Not yet set while another thread is still spawning it;
                // that thread starts ticking on its own.
                if let Some(thread) = self.thread.get() {
                    thread.unpark();
                }
            }
            Err(_) => {}
        }
    }

    fn spawn(&self) {
        let shared = Arc::clone(&self.shared);
        let spawned = std::thread::Builder::new()
            .name(self.thread_name.clone())
            .stack_size(64 * 1024)
            .spawn(move || run(&shared));
        match spawned {
            Ok(handle) => {
                let _ = self.thread.set(handle.thread().clone());
            }
            Err(error) => {
                self.state.store(THREAD_FAILED, Relaxed);
                tracing::warn!(
                    thread = %self.thread_name,
                    %error,
                    "corral could not start its clock ticker; hits read the clock"
                );
            }
        }
    }
}

impl Drop for TickedClock {
    fn drop(&mut self) {
        self.shared.closed.store(true, Relaxed);
        if let Some(thread) = self.thread.get() {
            thread.unpark();
        }
    }
}

/// The ticker thread: parks while the cache is cool, ticks while it is hot,
/// ends when the cache is dropped.
fn run(shared: &Shared) {
    loop {
        while !shared.wanted.swap(false, Relaxed) {
            if shared.closed.load(Relaxed) {
                return;
            }
            std::thread::park();
        }
        if !tick_while_hot(shared) {
            return;
        }
    }
}

/// Ticks until a window passes with too few milestones (returns true) or
/// the cache is dropped (returns false). Leaves the reading at 0.
fn tick_while_hot(shared: &Shared) -> bool {
    let mut window_start = shared.milestones.load(Relaxed);
    let mut ticks = 0;
    loop {
        shared.ticked.store(shared.read(), Relaxed);
        std::thread::park_timeout(TICK);
        if shared.closed.load(Relaxed) {
            shared.ticked.store(0, Relaxed);
            return false;
        }
        ticks += 1;
        if ticks == TICKS_PER_WINDOW {
            let milestones = shared.milestones.load(Relaxed);
            let cool = milestones - window_start < HOT_MILESTONES_PER_WINDOW;
            if cool && !shared.pinned.load(Relaxed) {
                shared.ticked.store(0, Relaxed);
                return true;
            }
            window_start = milestones;
            ticks = 0;
        }
    }
}

#[cfg(all(test, not(shuttle)))]
mod tests {
    use super::*;
    use std::time::Instant;

    /// Waits (bounded) until `condition` holds.
    fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !condition() {
            assert!(Instant::now() < deadline, "timed out waiting: {what}");
            std::thread::yield_now();
        }
    }

    /// Reports milestones as a very hot cache would.
    fn heat(clock: &TickedClock) {
        clock.milestone();
        clock.milestone();
    }

    #[test]
    fn a_cool_clock_has_no_thread_and_hits_read_the_clock() {
        let clock = TickedClock::new("cool");
        clock.milestone();
        assert!(!clock.ticking());
        assert!(clock.thread.get().is_none());
        let before = clock.now_millis();
        assert!(clock.hit_now() >= before);
    }

    #[test]
    fn a_hot_clock_ticks_and_its_reading_follows_the_clock_without_passing_it() {
        let clock = TickedClock::new("hot");
        heat(&clock);
        eventually("ticking", || clock.ticking());
        let first = clock.hit_now();
        assert!(first <= clock.now_millis());
        // The ticked reading moves on by itself.
        eventually("a later tick", || clock.hit_now() > first);
        assert!(clock.hit_now() <= clock.now_millis());
    }

    #[test]
    fn a_clock_that_cools_down_stops_ticking_and_restarts_when_hot_again() {
        let clock = TickedClock::new("cooling");
        heat(&clock);
        eventually("ticking", || clock.ticking());
        // No more milestones: the next window finds the cache cool.
        eventually("cooled down", || !clock.ticking());
        heat(&clock);
        eventually("ticking again", || clock.ticking());
    }

    #[test]
    fn a_clock_kept_ticking_ticks_on_through_cool_windows() {
        let clock = TickedClock::new("kept");
        clock.keep_ticking();
        eventually("ticking", || clock.ticking());
        let first = clock.hit_now();
        // Two whole windows without a milestone: an unpinned clock stops
        // within one.
        let horizon = first + 2 * WINDOW.as_millis() as u64;
        while clock.hit_now() < horizon {
            assert!(clock.ticking(), "stopped ticking while kept ticking");
            std::thread::yield_now();
        }
    }

    #[test]
    fn a_milestone_catches_up_a_reading_left_behind() {
        let clock = TickedClock::new("lagging");
        // As if the thread had stored this long ago and then been starved.
        clock.shared.ticked.store(1, Relaxed);
        eventually("the clock passing the stale reading", || {
            clock.now_millis() > 1 + CATCH_UP_MS
        });
        clock.milestone();
        assert!(clock.hit_now() + CATCH_UP_MS >= clock.now_millis());
        assert!(clock.hit_now() <= clock.now_millis());
    }

    #[test]
    fn dropping_the_clock_ends_its_thread() {
        let clock = TickedClock::new("dropped");
        heat(&clock);
        eventually("ticking", || clock.ticking());
        let shared = Arc::downgrade(&clock.shared);
        drop(clock);
        // The thread held the last other reference.
        eventually("thread ended", || shared.strong_count() == 0);
    }
}

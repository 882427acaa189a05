//! The circuit breaker in front of one cache's shared store.
//!
//! A sick store (frozen, unreachable) would make every call pay the store
//! timeout. The breaker counts consecutive calls that failed in silence —
//! timed out or found the store unreachable while no other call got an
//! answer since they started (see [`Pulse`](crate::tier::pulse::Pulse)) — and, at the threshold,
//! opens. A call that timed out while answers kept coming (queued behind
//! many others in this process, say) is not a sign of a sick store and is
//! not counted; an error the store *answered* with is an answer.
//!
//! - **closed**: every call goes to the store; an answer resets the count;
//! - **open** for the cool-down: every call is refused at once with a
//!   [`StoreErrorKind::BreakerOpen`] error, no timeout paid (flights then
//!   wait for the store, up to their patience, before they fill without a
//!   lease; writes report the error);
//! - **half-open** after the cool-down: the first call to come is the one
//!   probe let through, the others are still refused until it ends; an
//!   answer closes the breaker, a silent failure opens it for another
//!   cool-down. A probe dropped before it ended (its caller cancelled)
//!   proved nothing: the next call probes instead. A patient call (a
//!   flight's, waiting for the store anyway) probes an open breaker at
//!   once, without waiting for the cool-down.
//! - The store's subscription coming back (its connection was lost and is
//!   up again) closes the breaker at once: [`Breaker::store_heard`].
//!
//! State, deadline and counts are atomics of this one instance; a closed
//! breaker costs a call one atomic load before and, on an answer, one
//! load after. Time is tokio's clock, so paused-time tests drive it.

use std::sync::atomic::AtomicU32;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::data::error::{StoreError, StoreErrorKind};
use crate::throttle::{warn_throttled, Throttle};

/// The breaker's settings: open after `failures` consecutive failed store
/// calls, for `cool_down`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BreakerSettings {
    pub(crate) failures: u32,
    pub(crate) cool_down: Duration,
}

impl Default for BreakerSettings {
    fn default() -> Self {
        Self {
            failures: 5,
            cool_down: Duration::from_secs(5),
        }
    }
}

/// How often a failed probe is logged as a warning at most.
const PROBE_WARN_WINDOW: Duration = Duration::from_secs(60);

/// The low two bits of the state word.
const STATE: u64 = 0b11;
const CLOSED: u64 = 0;
/// Open: the bits above the state hold when the cool-down ends, in
/// nanoseconds since the breaker's epoch.
const OPEN: u64 = 1;
/// Half-open with the probe in flight.
const PROBING: u64 = 2;
/// The latest deadline the word can hold (about 146 years).
const MAX_NANOS: u64 = u64::MAX >> 2;

/// One cache's circuit breaker.
pub(crate) struct Breaker {
    cache: Arc<str>,
    settings: BreakerSettings,
    epoch: Instant,
    /// The state, and while open the end of the cool-down.
    word: AtomicU64,
    /// Consecutive failed calls while closed.
    failures: AtomicU32,
    /// Times the breaker opened from closed (a failed probe keeps it open).
    opened: AtomicU64,
    /// Calls refused while open or half-open.
    skipped: AtomicU64,
    /// The message of every refusal, allocated once.
    refusal: Arc<str>,
    /// Rations the warnings of failed probes (one per cool-down while the
    /// store stays down).
    probe_warnings: Throttle,
}

/// The breaker's say on one call it let through.
#[must_use]
pub(crate) enum Pass<'a> {
    /// The breaker is closed.
    Closed(&'a Breaker),
    /// The one probe of a half-open breaker: its outcome closes or opens
    /// it; dropped unfinished, it hands the probe to the next call.
    Probe(Probe<'a>),
}

/// The probe of a half-open breaker.
pub(crate) struct Probe<'a> {
    breaker: &'a Breaker,
    finished: bool,
}

impl Breaker {
    /// A closed breaker of the cache named `cache`.
    pub(crate) fn new(cache: Arc<str>, settings: BreakerSettings) -> Self {
        let refusal = format!(
            "circuit breaker open after {} consecutive store failures: call skipped \
             (the store is tried again {:?} after it opened)",
            settings.failures, settings.cool_down
        )
        .into();
        Self {
            cache,
            settings,
            epoch: Instant::now(),
            word: AtomicU64::new(CLOSED),
            failures: AtomicU32::new(0),
            opened: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            refusal,
            probe_warnings: Throttle::new(PROBE_WARN_WINDOW),
        }
    }

    /// Times the breaker opened.
    pub(crate) fn opened(&self) -> u64 {
        self.opened.load(Relaxed)
    }

    /// Calls refused without reaching the store.
    pub(crate) fn skipped(&self) -> u64 {
        self.skipped.load(Relaxed)
    }

    /// Whether calls go to the store now (closed), as opposed to being
    /// refused or waiting on a probe.
    #[cfg(test)]
    pub(super) fn is_closed(&self) -> bool {
        self.word.load(Acquire) & STATE == CLOSED
    }

    /// Whether the breaker is open or half-open (a gauge's reading).
    #[cfg(feature = "metrics")]
    pub(crate) fn is_open(&self) -> bool {
        self.word.load(Acquire) & STATE != CLOSED
    }

    fn now(&self) -> u64 {
        let since = Instant::now().saturating_duration_since(self.epoch);
        u64::try_from(since.as_nanos()).unwrap_or(MAX_NANOS)
    }

    /// The state word of a breaker open until `cool_down` from now.
    fn open_word(&self, cool_down: Duration) -> u64 {
        let cool_down = u64::try_from(cool_down.as_nanos()).unwrap_or(MAX_NANOS);
        let until = self.now().saturating_add(cool_down).min(MAX_NANOS);
        (until << 2) | OPEN
    }

    /// Lets a call through, or refuses it (counted) while the breaker is
    /// open or its probe is in flight. An `eager` call (a flight's, still
    /// waiting for the store to answer) probes an open breaker at once,
    /// cool-down or not: the flights waiting keep one call in flight at
    /// most, and the first answer closes the breaker.
    pub(crate) fn admit(&self, eager: bool) -> Result<Pass<'_>, StoreError> {
        let word = self.word.load(Acquire);
        match word & STATE {
            CLOSED => Ok(Pass::Closed(self)),
            OPEN if eager || self.now() >= word >> 2 => {
                match self.word.compare_exchange(word, PROBING, AcqRel, Acquire) {
                    Ok(_) => {
                        tracing::debug!(cache = %self.cache, "circuit breaker half-open: one probe call goes to the store");
                        Ok(Pass::Probe(Probe {
                            breaker: self,
                            finished: false,
                        }))
                    }
                    Err(_) => Err(self.refuse()),
                }
            }
            _ => Err(self.refuse()),
        }
    }

    fn refuse(&self) -> StoreError {
        self.skipped.fetch_add(1, Relaxed);
        StoreError::new(StoreErrorKind::BreakerOpen, Arc::clone(&self.refusal))
    }

    /// A call let through while closed ended; `failed`: the store did not
    /// answer.
    fn closed_call_ended(&self, failed: bool) {
        if !failed {
            // Read first: answers on a healthy store write nothing shared.
            if self.failures.load(Relaxed) != 0 {
                self.failures.store(0, Relaxed);
            }
            return;
        }
        let failures = self.failures.fetch_add(1, AcqRel).saturating_add(1);
        if failures < self.settings.failures {
            return;
        }
        let open = self.open_word(self.settings.cool_down);
        if self
            .word
            .compare_exchange(CLOSED, open, AcqRel, Acquire)
            .is_ok()
        {
            self.failures.store(0, Relaxed);
            self.opened.fetch_add(1, Relaxed);
            tracing::warn!(
                cache = %self.cache,
                failures,
                cool_down_ms = self.settings.cool_down.as_millis(),
                "circuit breaker opened: store calls are skipped until the cool-down ends"
            );
        }
    }

    /// The probe ended; `failed`: the store did not answer.
    fn probe_ended(&self, failed: bool) {
        if failed {
            // Still open, not opened anew: an outage is one opening however
            // many probes it fails.
            self.word
                .store(self.open_word(self.settings.cool_down), Release);
            warn_throttled!(
                self.probe_warnings,
                { cache = %self.cache }
                [cool_down_ms = self.settings.cool_down.as_millis()],
                "circuit breaker probe failed: opened again"
            );
        } else {
            self.failures.store(0, Relaxed);
            self.word.store(CLOSED, Release);
            self.probe_warnings.reset();
            tracing::info!(cache = %self.cache, "circuit breaker closed: the store answered the probe");
        }
    }
}

impl Breaker {
    /// The store answered outside any call (its subscription came back
    /// after its connection was lost): an open or half-open breaker closes
    /// at once, so the calls waiting for the store go ahead.
    pub(crate) fn store_heard(&self) {
        if self.word.swap(CLOSED, AcqRel) & STATE != CLOSED {
            self.failures.store(0, Relaxed);
            self.probe_warnings.reset();
            tracing::info!(cache = %self.cache, "circuit breaker closed: the store's subscription is back");
        }
    }
}

/// Whether a call's outcome says the store is sick: it did not answer in
/// time or could not be reached. An error it answered with is an answer.
pub(crate) fn failed<T>(result: &Result<T, StoreError>) -> bool {
    matches!(
        result,
        Err(error) if matches!(error.kind(), StoreErrorKind::Timeout | StoreErrorKind::Unavailable)
    )
}

impl Pass<'_> {
    /// Records the outcome of the call this pass let through; `failed`:
    /// it failed in silence (see [`Pulse::unanswered`](crate::tier::pulse::Pulse::unanswered)).
    pub(crate) fn ended(self, failed: bool) {
        match self {
            Pass::Closed(breaker) => breaker.closed_call_ended(failed),
            Pass::Probe(mut probe) => {
                probe.finished = true;
                probe.breaker.probe_ended(failed);
            }
        }
    }
}

impl Drop for Probe<'_> {
    fn drop(&mut self) {
        if !self.finished {
            // Cancelled: no verdict; the next call probes.
            self.breaker
                .word
                .store(self.breaker.open_word(Duration::ZERO), Release);
        }
    }
}

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
    fn is_closed(&self) -> bool {
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

#[cfg(all(test, not(shuttle)))]
mod tests {
    use super::*;
    use crate::tier::call::Guarded;
    use crate::tier::pulse::Pulse;
    use std::future::Future;

    /// Runs one store call through `breaker` (if any) under `timeout` (if
    /// any), as a cache's calls outside a flight run: refused at once while
    /// the breaker is open, its outcome recorded otherwise, in the breaker
    /// and in the store's `pulse`.
    fn guarded<'a, T, F>(
        breaker: Option<&'a Breaker>,
        pulse: &'a Pulse,
        timeout: Option<Duration>,
        call: F,
    ) -> Guarded<'a, F>
    where
        F: Future<Output = Result<T, StoreError>>,
    {
        Guarded::new(breaker, pulse, timeout, call)
    }

    const COOL_DOWN: Duration = Duration::from_secs(5);

    fn breaker(failures: u32) -> Breaker {
        Breaker::new(
            "unit".into(),
            BreakerSettings {
                failures,
                cool_down: COOL_DOWN,
            },
        )
    }

    fn timeout() -> Result<(), StoreError> {
        Err(StoreError::new(StoreErrorKind::Timeout, "t"))
    }

    fn unavailable() -> Result<(), StoreError> {
        Err(StoreError::new(StoreErrorKind::Unavailable, "u"))
    }

    fn answered() -> Result<(), StoreError> {
        Ok(())
    }

    fn call(breaker: &Breaker, result: Result<(), StoreError>) -> Result<(), StoreError> {
        let pass = breaker.admit(false)?;
        pass.ended(failed(&result));
        result
    }

    fn refused(result: &Result<(), StoreError>) -> bool {
        matches!(result, Err(e) if e.kind() == StoreErrorKind::BreakerOpen)
    }

    fn open(breaker: &Breaker, failures: u32) {
        for _ in 0..failures {
            assert!(!refused(&call(breaker, timeout())));
        }
        assert!(!breaker.is_closed());
        assert_eq!(breaker.opened(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn opens_after_consecutive_failures_only() {
        let breaker = breaker(3);
        // An answer, or an error the store answered with, resets the count.
        for _ in 0..5 {
            call(&breaker, timeout()).ok();
            call(&breaker, unavailable()).ok();
            call(&breaker, answered()).ok();
            call(&breaker, timeout()).ok();
            call(
                &breaker,
                Err(StoreError::new(StoreErrorKind::Protocol, "p")),
            )
            .ok();
        }
        assert!(breaker.is_closed());
        assert_eq!(breaker.opened(), 0);
        open(&breaker, 3);
        assert!(refused(&call(&breaker, answered())));
        assert_eq!(breaker.skipped(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn refuses_for_the_cool_down_then_lets_one_probe_through() {
        let breaker = breaker(2);
        open(&breaker, 2);
        tokio::time::advance(COOL_DOWN - Duration::from_millis(1)).await;
        assert!(refused(&call(&breaker, answered())), "still cooling down");
        tokio::time::advance(Duration::from_millis(1)).await;
        let probe = breaker.admit(false).expect("the probe");
        assert!(matches!(probe, Pass::Probe(_)));
        for _ in 0..10 {
            assert!(
                refused(&breaker.admit(false).map(|_| ())),
                "one probe at a time"
            );
        }
        assert_eq!(breaker.skipped(), 11);
        probe.ended(false);
        assert!(breaker.is_closed());
        assert!(matches!(breaker.admit(false), Ok(Pass::Closed(_))));
        // Closed afresh: the count starts again from zero.
        call(&breaker, timeout()).ok();
        assert!(breaker.is_closed());
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_probe_opens_for_another_cool_down() {
        let breaker = breaker(1);
        open(&breaker, 1);
        tokio::time::advance(COOL_DOWN).await;
        assert!(!refused(&call(&breaker, unavailable())), "the probe ran");
        assert_eq!(breaker.opened(), 1, "still the one opening");
        tokio::time::advance(COOL_DOWN - Duration::from_millis(1)).await;
        assert!(refused(&call(&breaker, answered())));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(!refused(&call(&breaker, answered())), "the next probe");
        assert!(breaker.is_closed());
        assert_eq!(breaker.opened(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_probe_hands_the_probe_to_the_next_call() {
        let breaker = breaker(1);
        open(&breaker, 1);
        tokio::time::advance(COOL_DOWN).await;
        drop(breaker.admit(false).expect("the probe"));
        let next = breaker.admit(false).expect("the next call probes");
        assert!(matches!(next, Pass::Probe(_)));
        next.ended(false);
        assert!(breaker.is_closed());
    }

    #[tokio::test(start_paused = true)]
    async fn late_outcomes_of_calls_let_through_before_it_opened_change_nothing() {
        let breaker = breaker(2);
        let late_failure = breaker.admit(false).expect("closed");
        let late_answer = breaker.admit(false).expect("closed");
        open(&breaker, 2);
        late_failure.ended(true);
        late_answer.ended(false);
        assert!(!breaker.is_closed());
        assert_eq!(breaker.opened(), 1);
        tokio::time::advance(COOL_DOWN).await;
        assert!(matches!(breaker.admit(false), Ok(Pass::Probe(_))));
    }

    #[tokio::test(start_paused = true)]
    async fn guarded_calls_skip_the_call_and_its_timeout_while_open() {
        let breaker = breaker(1);
        let pulse = Pulse::new();
        let hang = || std::future::pending::<Result<(), StoreError>>();
        let started = Instant::now();
        let first = guarded(Some(&breaker), &pulse, Some(Duration::from_secs(1)), hang()).await;
        assert!(first.expect_err("timed out").is_timeout());
        assert_eq!(started.elapsed(), Duration::from_secs(1));
        let started = Instant::now();
        let second = guarded(Some(&breaker), &pulse, Some(Duration::from_secs(1)), hang()).await;
        assert!(second.expect_err("refused").is_breaker_open());
        assert_eq!(started.elapsed(), Duration::ZERO, "no timeout paid");
        // A probe cancelled mid-call leaves the probe to the next call.
        tokio::time::advance(COOL_DOWN).await;
        let cancelled = tokio::time::timeout(
            Duration::from_millis(10),
            guarded(Some(&breaker), &pulse, Some(Duration::from_secs(1)), hang()),
        )
        .await;
        assert!(cancelled.is_err());
        let answered = guarded(Some(&breaker), &pulse, None, async { Ok(()) }).await;
        assert!(answered.is_ok());
        assert!(breaker.is_closed());
    }

    #[tokio::test(start_paused = true)]
    async fn calls_that_time_out_while_others_are_answered_do_not_open_it() {
        // A long queue: each call waits behind the ones before it and the
        // last ones time out, while the store answers the others.
        let breaker = breaker(2);
        let pulse = Pulse::new();
        let timeout = Some(Duration::from_millis(100));
        let queued = (0u64..20).map(|place| {
            let (breaker, pulse) = (&breaker, &pulse);
            async move {
                let call = async move {
                    tokio::time::sleep(Duration::from_millis(10 * place + 5)).await;
                    Ok::<(), StoreError>(())
                };
                guarded(Some(breaker), pulse, timeout, call).await
            }
        });
        let results = futures_util::future::join_all(queued).await;
        assert_eq!(
            results.iter().filter(|r| r.is_err()).count(),
            10,
            "the tail timed out"
        );
        assert!(breaker.is_closed());
        assert_eq!(breaker.opened(), 0);
        // A store that answers nothing opens it.
        let hang = || std::future::pending::<Result<(), StoreError>>();
        for _ in 0..2 {
            let _ = guarded(Some(&breaker), &pulse, timeout, hang()).await;
        }
        assert!(!breaker.is_closed());
        assert_eq!(breaker.opened(), 1);
        assert_eq!(pulse.silence(), Duration::from_millis(200));
    }

    #[tokio::test(start_paused = true)]
    async fn an_eager_call_probes_an_open_breaker_before_its_cool_down() {
        let breaker = breaker(1);
        open(&breaker, 1);
        assert!(refused(&breaker.admit(false).map(|_| ())), "cooling down");
        let probe = breaker.admit(true).expect("an eager call probes");
        assert!(matches!(probe, Pass::Probe(_)));
        assert!(
            refused(&breaker.admit(true).map(|_| ())),
            "one probe at a time"
        );
        probe.ended(true);
        assert!(breaker.is_open(), "its failure keeps it open");
        assert_eq!(breaker.opened(), 1, "one opening however many probes fail");
        let probe = breaker.admit(true).expect("the next eager call probes");
        probe.ended(false);
        assert!(breaker.is_closed());
    }

    #[tokio::test(start_paused = true)]
    async fn the_store_heard_again_closes_it_at_once() {
        let breaker = breaker(1);
        open(&breaker, 1);
        breaker.store_heard();
        assert!(breaker.is_closed());
        assert!(matches!(breaker.admit(false), Ok(Pass::Closed(_))));
        assert_eq!(breaker.opened(), 1);
    }
}

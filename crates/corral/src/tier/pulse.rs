//! Whether the shared store is answering: when a call last got an answer,
//! and since when the store has said nothing to calls that waited for it.
//!
//! A call that fails without an answer is *silent* only if no other call
//! was answered since it started. A call that timed out while answers
//! kept coming for the calls around it (a long queue in this process, a
//! starved client, one slow command) says nothing about the store: it is
//! not silence. The breaker counts only silent failures, and a flight
//! fills without a lease only once the store has been silent for as long
//! as a lease lives.
//!
//! Times are tokio's clock (paused-time tests drive them), in nanoseconds
//! since the pulse's epoch. An answer writes shared memory at most once a
//! millisecond; a failure writes only while the store is silent.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// `silent_since` while the store is not silent.
const NOT_SILENT: u64 = u64::MAX;
/// Answers closer together than this write `last_answer` once.
const RESOLUTION_NANOS: u64 = 1_000_000;

/// One store's pulse, as one cache's calls see it.
pub(crate) struct Pulse {
    epoch: Instant,
    /// When a call last got an answer (see [`Pulse::now`]; 0: never).
    last_answer: AtomicU64,
    /// When the oldest call that failed unanswered since the last answer
    /// started ([`NOT_SILENT`]: none).
    silent_since: AtomicU64,
    /// Woken when the store answers after a silence.
    revived: Notify,
}

/// When a call started, as [`Pulse::started`] took it.
#[derive(Clone, Copy)]
pub(crate) struct Started(u64);

impl Pulse {
    pub(crate) fn new() -> Self {
        Self {
            epoch: Instant::now(),
            last_answer: AtomicU64::new(0),
            silent_since: AtomicU64::new(NOT_SILENT),
            revived: Notify::new(),
        }
    }

    /// Now, in nanoseconds since the epoch, plus one: 0 is "never".
    fn now(&self) -> u64 {
        let since = Instant::now().saturating_duration_since(self.epoch);
        u64::try_from(since.as_nanos())
            .unwrap_or(NOT_SILENT - 2)
            .saturating_add(1)
            .min(NOT_SILENT - 1)
    }

    /// Marks the start of a call.
    #[inline]
    pub(crate) fn started(&self) -> Started {
        Started(self.now())
    }

    /// The store answered a call (any answer, an error reply included).
    #[inline]
    pub(crate) fn answered(&self) {
        let now = self.now();
        if now.saturating_sub(self.last_answer.load(Relaxed)) >= RESOLUTION_NANOS {
            self.last_answer.fetch_max(now, Relaxed);
        }
        if self.silent_since.load(Acquire) != NOT_SILENT {
            self.heard();
        }
    }

    /// The store answered after a silence, to a call or otherwise (its
    /// subscription came back): the silence ends and waiters wake.
    #[cold]
    pub(crate) fn heard(&self) {
        self.last_answer.fetch_max(self.now(), Relaxed);
        if self.silent_since.swap(NOT_SILENT, AcqRel) != NOT_SILENT {
            tracing::debug!("the store answers again");
            self.revived.notify_waiters();
        }
    }

    /// A call that started at `started` failed without an answer. Returns
    /// whether it failed in silence: no call was answered since it started.
    pub(crate) fn unanswered(&self, started: Started) -> bool {
        // An answer at or after the start shows the store alive.
        if self.last_answer.load(Relaxed) >= started.0 {
            return false;
        }
        self.silent_since.fetch_min(started.0, AcqRel);
        true
    }

    /// When a call last got an answer, if ever (to within a millisecond).
    pub(crate) fn last_answer(&self) -> Option<Instant> {
        match self.last_answer.load(Relaxed) {
            0 => None,
            at => Some(self.epoch + Duration::from_nanos(at - 1)),
        }
    }

    /// How long the store has been silent: since the start of the oldest
    /// call that failed unanswered with no answer after it; zero if the
    /// store answered since.
    pub(crate) fn silence(&self) -> Duration {
        let since = self.silent_since.load(Acquire);
        // An answer that landed while a failure was being recorded.
        if since == NOT_SILENT || self.last_answer.load(Relaxed) >= since {
            return Duration::ZERO;
        }
        Duration::from_nanos(self.now().saturating_sub(since))
    }

    /// Resolves when the store next answers after a silence. Register
    /// (create the future) before checking [`silence`](Self::silence):
    /// a revival in between still wakes it.
    pub(crate) fn revived(&self) -> tokio::sync::futures::Notified<'_> {
        self.revived.notified()
    }
}

#[cfg(all(test, not(shuttle)))]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[tokio::test(start_paused = true)]
    async fn a_failure_amid_answers_is_not_silence() {
        let pulse = Pulse::new();
        tokio::time::advance(10 * MS).await;
        let slow = pulse.started();
        tokio::time::advance(5 * MS).await;
        pulse.answered();
        tokio::time::advance(MS).await;
        assert!(!pulse.unanswered(slow), "answered after it started");
        assert_eq!(pulse.silence(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn silence_lasts_from_the_oldest_unanswered_call_until_an_answer() {
        let pulse = Pulse::new();
        tokio::time::advance(10 * MS).await;
        pulse.answered();
        tokio::time::advance(5 * MS).await;
        let first = pulse.started();
        tokio::time::advance(5 * MS).await;
        let second = pulse.started();
        tokio::time::advance(100 * MS).await;
        assert!(pulse.unanswered(second));
        assert!(pulse.unanswered(first));
        assert_eq!(pulse.silence(), 105 * MS);
        let revived = pulse.revived();
        tokio::pin!(revived);
        assert!(futures_util::poll!(&mut revived).is_pending());
        pulse.answered();
        assert_eq!(pulse.silence(), Duration::ZERO);
        assert!(futures_util::poll!(&mut revived).is_ready());
        // The silence before the answer is forgotten.
        tokio::time::advance(MS).await;
        let late = pulse.started();
        tokio::time::advance(MS).await;
        assert!(pulse.unanswered(late));
        assert_eq!(pulse.silence(), MS);
        pulse.heard();
        assert_eq!(pulse.silence(), Duration::ZERO);
    }
}

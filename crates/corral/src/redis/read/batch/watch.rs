//! How queued reads stay bounded without a timer each (see the parent
//! module's docs): the [`Reply`] that answers a read its batch dropped
//! past its deadline, and the store's watchdog, which sends alone the reads
//! that no batch took within half their timeout.

use std::sync::Weak;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::{Answer, Queued, Shared};
use crate::data::error::{StoreError, StoreErrorKind};

/// Where a queued read's answer goes. Dropped unanswered — its batch ran
/// past its deadline, or its driver was dropped — it answers the read with
/// an error itself.
pub(super) struct Reply {
    pub(super) sender: Option<oneshot::Sender<Result<Answer, StoreError>>>,
    /// The deadline of the batch carrying the read, once sent.
    pub(super) deadline: Option<Instant>,
}

impl Reply {
    /// Answers the read (an `Err` gives the answer back if its caller is
    /// gone).
    pub(super) fn send(
        mut self,
        answer: Result<Answer, StoreError>,
    ) -> Result<(), Result<Answer, StoreError>> {
        match self.sender.take() {
            Some(sender) => sender.send(answer),
            None => Err(answer),
        }
    }

    /// Whether the read's caller is gone.
    pub(super) fn is_closed(&self) -> bool {
        self.sender.as_ref().is_none_or(oneshot::Sender::is_closed)
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        let Some(sender) = self.sender.take() else {
            return;
        };
        let error = match self.deadline {
            Some(deadline) if Instant::now() >= deadline => StoreError::new(
                StoreErrorKind::Timeout,
                "redis read: its batch was not answered within the timeout of its oldest read",
            ),
            _ => StoreError::new(
                StoreErrorKind::Unavailable,
                "redis read: its batch was dropped (the runtime is shutting down)",
            ),
        };
        let _ = sender.send(Err(error));
    }
}

/// How far ahead a deadline may be: about 30 years, as tokio's own
/// "far future".
const FAR: Duration = Duration::from_secs(86_400 * 365 * 30);

/// `by` after `at`, at most [`FAR`] (an `op_timeout` of `Duration::MAX`
/// overflows no deadline).
pub(super) fn after(at: Instant, by: Duration) -> Instant {
    at.checked_add(by.min(FAR)).unwrap_or(at)
}

/// What is left of `timeout` for a read asked at `asked`.
pub(super) fn left_of(timeout: Duration, asked: Instant) -> Duration {
    timeout.saturating_sub(asked.elapsed())
}

/// The store's watchdog while it runs: if it is dropped before it ended
/// by itself (its runtime shut down), the next read queued starts another.
pub(super) struct Watching {
    pub(super) shared: Weak<Shared>,
    pub(super) done: bool,
}

impl Drop for Watching {
    fn drop(&mut self) {
        if let (false, Some(shared)) = (self.done, self.shared.upgrade()) {
            shared.lock().watched = false;
        }
    }
}

/// The watchdog: at `first`, then whenever the oldest queued read's half
/// timeout is over, answers the reads queued for half their timeout
/// [`Answer::Late`]; ends when it wakes to find the queue empty and no read
/// queued since it last woke (or the store gone).
pub(super) async fn watch(mut watching: Watching, first: Instant) {
    let mut next = first;
    loop {
        tokio::time::sleep_until(next.into()).await;
        let Some(shared) = watching.shared.upgrade() else {
            watching.done = true;
            return;
        };
        let half = shared.timeout / 2;
        let now = Instant::now();
        let (late, end) = {
            let mut state = shared.lock();
            // Queued in the order asked: the late ones lead.
            let due = state
                .queue
                .partition_point(|read| after(read.asked, half) <= now);
            let late: Vec<Queued> = state.queue.drain(..due).collect();
            let end = match state.queue.first() {
                Some(read) => {
                    next = after(read.asked, half);
                    false
                }
                None if state.recent => {
                    // A read queued after now is late after this.
                    next = after(now, half);
                    false
                }
                None => {
                    state.watched = false;
                    true
                }
            };
            state.recent = false;
            (late, end)
        };
        for read in late {
            let _ = read.reply.send(Ok(Answer::Late));
        }
        if end {
            watching.done = true;
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_do_not_overflow() {
        let now = Instant::now();
        assert_eq!(
            after(now, Duration::from_millis(5)),
            now + Duration::from_millis(5)
        );
        assert!(after(now, Duration::MAX) > now + Duration::from_secs(86_400 * 365));
        assert!(after(now, Duration::MAX / 2) >= after(now, Duration::from_secs(1)));
    }
}

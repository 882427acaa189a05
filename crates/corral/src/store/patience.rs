//! How long the caller of a store call waits for its answer, when it waits
//! longer than the store's own timeout.
//!
//! A flight that holds (or asks for) a lease waits for a late answer
//! rather than fill without a lease, or fill in vain: its lease request,
//! the versions it reads before its fill and its commit wait while the
//! store keeps answering, and fail only once the store has been silent for
//! a while (the cache bounds them so, up to the flight's deadline). The
//! cache says so for the calls it makes within [`patiently`]; a store that
//! bounds its calls reads [`patience`] and lets such a call run that long.
//! It is scoped to the call (a task-local, set for the polls of that one
//! future), never shared.

use std::future::Future;
use std::time::Duration;

use futures_util::future::Either;
use tokio::task::futures::TaskLocalFuture;

/// How a patient caller bounds a store call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Patience {
    /// The call fails once the store has answered nothing, to any call,
    /// for this long since it started.
    pub(crate) silence: Duration,
    /// It fails after this long whatever happens: the most its caller
    /// waits.
    pub(crate) limit: Duration,
    /// Its caller is still waiting for the store to answer (the store has
    /// not been silent for long): the call may probe an open breaker at
    /// once rather than after its cool-down.
    pub(crate) probe: bool,
}

tokio::task_local! {
    static PATIENCE: Patience;
}

/// How long the caller of the store call being made waits for its answer
/// at most, if it bounds the call itself: a store should then let the
/// call run that long rather than time it out after its own operation
/// timeout. `None`: the store's own timeout bounds it.
pub fn patience() -> Option<Duration> {
    current().map(|patience| patience.limit)
}

/// `timeout`, stretched to the caller's [`patience`] if that is longer.
pub fn stretched(timeout: Duration) -> Duration {
    patience().map_or(timeout, |limit| limit.max(timeout))
}

/// The patience of the store call being made, if its caller set one.
pub(crate) fn current() -> Option<Patience> {
    PATIENCE.try_with(|patience| *patience).ok()
}

/// Runs `work` (store calls) with its caller waiting as `patience` says.
///
/// A plain function, not an `async` one: the returned future holds `work`
/// once (an `async` layer would keep a second copy of it, and these
/// futures nest into every leader's task).
pub(crate) fn patiently<W: Future>(patience: Patience, work: W) -> TaskLocalFuture<Patience, W> {
    PATIENCE.scope(patience, work)
}

/// [`patiently`] if there is a `patience`; otherwise `work` as it is.
pub(crate) fn patiently_if<W: Future>(
    patience: Option<Patience>,
    work: W,
) -> Either<TaskLocalFuture<Patience, W>, W> {
    match patience {
        Some(patience) => Either::Left(patiently(patience, work)),
        None => Either::Right(work),
    }
}

#[cfg(all(test, not(shuttle)))]
mod tests {
    use super::*;

    #[tokio::test]
    async fn patience_is_scoped_to_the_call() {
        assert_eq!(patience(), None);
        let second = Duration::from_secs(1);
        let patience = Patience {
            silence: second,
            limit: 3 * second,
            probe: true,
        };
        let inside = patiently(patience, async { (current(), stretched(second)) }).await;
        assert_eq!(inside, (Some(patience), 3 * second));
        assert_eq!(stretched(5 * second), 5 * second);
        assert_eq!(current(), None);
    }
}

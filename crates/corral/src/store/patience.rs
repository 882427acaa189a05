//! How long the caller of a store call waits for its answer, when it waits
//! longer than the store's own timeout.
//!
//! A flight that holds (or asks for) a lease waits for a late answer
//! rather than fill without a lease: its lease request, the versions it
//! reads before its fill and its commit wait as long as a lease lives. The
//! cache says so for the calls it makes within [`patiently`]; a store that
//! bounds its calls reads [`patience`] and bounds such a call by the longer
//! of it and its own timeout. It is scoped to the call (a task-local, set
//! for the poll of that one future), never shared.

use std::future::Future;
use std::time::Duration;

tokio::task_local! {
    static PATIENCE: Duration;
}

/// How long the caller of the store call being made waits for its answer,
/// if it said: a store should bound the call by the longer of this and its
/// own operation timeout. `None`: the store's own timeout.
pub fn patience() -> Option<Duration> {
    PATIENCE.try_with(|patience| *patience).ok()
}

/// `timeout`, stretched to the caller's [`patience`] if that is longer.
pub fn stretched(timeout: Duration) -> Duration {
    patience().map_or(timeout, |patience| patience.max(timeout))
}

/// Runs `call` (a store call) with its caller waiting up to `bound`.
pub(crate) async fn patiently<T>(bound: Duration, call: impl Future<Output = T>) -> T {
    PATIENCE.scope(bound, call).await
}

#[cfg(all(test, not(shuttle)))]
mod tests {
    use super::*;

    #[tokio::test]
    async fn patience_is_scoped_to_the_call() {
        assert_eq!(patience(), None);
        let second = Duration::from_secs(1);
        let inside = patiently(3 * second, async { (patience(), stretched(second)) }).await;
        assert_eq!(inside, (Some(3 * second), 3 * second));
        assert_eq!(stretched(5 * second), 5 * second);
        assert_eq!(patience(), None);
    }
}

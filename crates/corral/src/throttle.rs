//! [`Throttle`]: at most one warning of a kind per window, so an outage
//! that repeats the same failure many times a second logs it once, then
//! once per window with the number of repeats left out.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How often a repeated warning is logged at most.
pub(crate) const WARN_WINDOW: Duration = Duration::from_secs(10);

/// Rations one kind of warning of one instance (a store, a cache): the
/// first is logged, the repeats within the window are not (they can be
/// logged at debug level) and are counted, and the next one logged after
/// the window carries their count.
#[derive(Debug)]
pub(crate) struct Throttle {
    window: Duration,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// When a warning was last logged.
    logged: Option<Instant>,
    /// Repeats not logged since.
    suppressed: u64,
}

impl Throttle {
    /// A throttle of one warning per `window`.
    pub(crate) fn new(window: Duration) -> Self {
        Self {
            window,
            state: Mutex::new(State::default()),
        }
    }

    /// `Some(repeats left out since the last one logged)` if this warning
    /// is to be logged now; `None` if it is a repeat within the window.
    pub(crate) fn admit(&self) -> Option<u64> {
        let now = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match state.logged {
            Some(logged) if now.duration_since(logged) < self.window => {
                state.suppressed += 1;
                None
            }
            _ => {
                state.logged = Some(now);
                Some(std::mem::take(&mut state.suppressed))
            }
        }
    }

    /// Starts afresh: the next warning is logged (after the condition it
    /// warns of ended, e.g. a connection came back).
    pub(crate) fn reset(&self) {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = State::default();
    }
}

impl Default for Throttle {
    fn default() -> Self {
        Self::new(WARN_WINDOW)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_within_the_window_are_counted_not_logged() {
        let throttle = Throttle::new(Duration::from_secs(3600));
        assert_eq!(throttle.admit(), Some(0));
        assert_eq!(throttle.admit(), None);
        assert_eq!(throttle.admit(), None);
        throttle.reset();
        assert_eq!(throttle.admit(), Some(0));

        let every_time = Throttle::new(Duration::ZERO);
        assert_eq!(every_time.admit(), Some(0));
        assert_eq!(every_time.admit(), Some(0));
    }

    #[test]
    fn the_next_warning_logged_carries_the_count() {
        let throttle = Throttle::new(Duration::from_secs(3600));
        throttle.admit();
        throttle.admit();
        throttle.state.lock().expect("lock").logged = None;
        assert_eq!(throttle.admit(), Some(1));
    }
}

//! [`Throttle`]: at most one warning of a kind per window, so an outage
//! that repeats the same failure many times a second logs it once, then
//! once per window with the number of repeats left out; [`warn_throttled!`]
//! logs through one.

use crate::sync::lock_std;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often a repeated warning is logged at most, by default.
const WARN_WINDOW: Duration = Duration::from_secs(10);

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
        let mut state = lock_std(&self.state);
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

    /// How often its warning is logged at most.
    pub(crate) fn window(&self) -> Duration {
        self.window
    }

    /// Starts afresh: the next warning is logged (after the condition it
    /// warns of ended, e.g. a connection came back).
    pub(crate) fn reset(&self) {
        *lock_std(&self.state) = State::default();
    }
}

impl Default for Throttle {
    fn default() -> Self {
        Self::new(WARN_WINDOW)
    }
}

/// Logs a warning rationed by a [`Throttle`]: when the throttle admits it,
/// at warning level with the field `repeats_left_out` and, after the
/// message, how long repeats are logged at debug level (the throttle's
/// window); otherwise at debug level, with the message alone.
///
/// `warn_throttled!(throttle, { fields } [warn-only fields], "message" +
/// "warn-only text", args...)`: `fields` (tracing's field syntax, comma
/// separated, no trailing comma) go in both events; the bracketed fields
/// and the text after `+`, both optional, only in the warning. The message
/// takes positional `{}` arguments (`args`), not captured names.
macro_rules! warn_throttled {
    (
        $throttle:expr,
        { $($field:tt)* }
        $([ $($warn_field:tt)* ])?,
        $message:literal $(+ $warn_text:literal)?
        $(, $arg:expr)*
    ) => {{
        let throttle: &$crate::throttle::Throttle = &$throttle;
        match throttle.admit() {
            Some(left_out) => tracing::warn!(
                $($field)*,
                $($($warn_field)*,)?
                repeats_left_out = left_out,
                concat!(
                    $message,
                    $($warn_text,)?
                    " (repeats are logged at debug level for {}s)"
                ),
                $($arg,)*
                throttle.window().as_secs()
            ),
            None => tracing::debug!($($field)*, $message $(, $arg)*),
        }
    }};
}
pub(crate) use warn_throttled;

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
    fn the_macro_warns_with_the_count_and_window_then_debugs() {
        let (captured, _default) = corral_testkit::capture(tracing::Level::DEBUG);
        let throttle = Throttle::new(Duration::from_secs(3600));
        let (name, n) = ("c", 7);
        for _ in 0..2 {
            warn_throttled!(
                throttle,
                { cache = %name, n }
                [extra = 1],
                "failed {} times" + ": retrying",
                n
            );
        }
        let text = captured.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(
            lines[0].contains(
                "WARN corral::throttle::tests: failed 7 times: retrying (repeats are logged at \
                 debug level for 3600s) cache=c n=7 extra=1 repeats_left_out=0"
            ),
            "{text}"
        );
        assert!(
            lines[1].contains("DEBUG corral::throttle::tests: failed 7 times cache=c n=7")
                && lines[1].trim_end().ends_with("n=7"),
            "{text}"
        );
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

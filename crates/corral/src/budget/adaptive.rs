//! An adaptive limit for a fill budget: additive increase while fills keep
//! their usual latency, multiplicative decrease when they slow down or fail,
//! always between a minimum and a maximum.
//!
//! - The **usual latency** is the lowest fill time seen, drifting up by 1%
//!   of the gap on each fill slower than it but not slow (below), so a
//!   source that became slower for good is learnt again. A slow fill does
//!   not move it (overload must not become the norm), but at the minimum
//!   limit, where no other fill runs beside it, it is the new usual.
//! - A fill that takes more than twice the usual latency, or fails, cuts
//!   the limit to 80% — at most once per window (as many finished fills
//!   as the limit), so one burst of slow fills is one cut, not many.
//! - Any other fill adds `1 / limit`: about one more permit per window.
//!
//! The limit is a plain number the budget reads when it hands out permits;
//! it is visible in [`FillBudget::limit`](super::FillBudget::limit), the
//! budget's stats and the `corral_fill_budget_limit` gauge.

use std::time::Duration;

use crate::sync::{lock, Mutex};

/// Latency past this many times the usual latency is a sign of overload.
const SLOW: f64 = 2.0;
/// What a cut keeps of the limit.
const CUT: f64 = 0.8;

pub(crate) struct Adaptive {
    min: usize,
    max: usize,
    state: Mutex<State>,
}

struct State {
    limit: f64,
    usual: Option<Duration>,
    since_cut: usize,
}

impl Adaptive {
    /// An adaptive limit between `min` and `max` (`min` ≥ 1), starting at
    /// `start` (clamped into the bounds).
    pub(crate) fn new(min: usize, max: usize, start: usize) -> Self {
        let min = min.max(1);
        let max = max.max(min);
        Self {
            min,
            max,
            state: Mutex::new(State {
                limit: start.clamp(min, max) as f64,
                usual: None,
                since_cut: 0,
            }),
        }
    }

    /// The bounds.
    pub(crate) fn bounds(&self) -> (usize, usize) {
        (self.min, self.max)
    }

    /// Learns from one finished fill; returns the new limit.
    pub(crate) fn finished(&self, took: Duration, ok: bool) -> usize {
        let mut state = lock(&self.state);
        let usual = state.usual.unwrap_or(took);
        let slow = took.as_secs_f64() > usual.as_secs_f64() * SLOW;
        let at_min = state.limit <= self.min as f64;
        state.usual = Some(match usual {
            usual if took <= usual => took,
            // A slow fill is a sign of overload, not a new usual latency —
            // unless nothing runs beside it: then the source itself slowed.
            _ if slow && at_min => took,
            usual if slow => usual,
            usual => usual + (took - usual) / 100,
        });
        state.since_cut += 1;
        if !ok || slow {
            if state.since_cut >= state.limit as usize {
                state.limit = (state.limit * CUT).max(self.min as f64);
                state.since_cut = 0;
            }
        } else {
            state.limit = (state.limit + 1.0 / state.limit).min(self.max as f64);
        }
        state.limit.round() as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn grows_while_latency_holds_and_stays_bounded() {
        let adaptive = Adaptive::new(2, 10, 2);
        let mut limit = 2;
        for _ in 0..1_000 {
            limit = adaptive.finished(20 * MS, true);
        }
        assert_eq!(limit, 10);
    }

    #[test]
    fn backs_off_when_fills_slow_down_or_fail_once_per_window() {
        let adaptive = Adaptive::new(1, 64, 20);
        for _ in 0..20 {
            adaptive.finished(10 * MS, true);
        }
        // A burst of slow fills: one cut per window of finished fills.
        let after_burst: Vec<usize> = (0..20).map(|_| adaptive.finished(50 * MS, true)).collect();
        let mut cuts = after_burst.clone();
        cuts.dedup();
        // 21 → 17 at once, then 17 → 13 a window (17 fills) later.
        assert_eq!(cuts, [17, 13], "{after_burst:?}");
        let mut limit = 13;
        for _ in 0..200 {
            limit = adaptive.finished(10 * MS, false);
        }
        assert_eq!(limit, 1, "failures cut it to its minimum");
    }
}

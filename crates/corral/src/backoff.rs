//! Waits that double: [`doubled`], a wait after some number of tries, and
//! [`Backoff`], the pause between connection attempts, each pause jittered
//! to 50–100% so that processes that lost one server together do not all
//! knock at once when it is back.

use std::time::Duration;

/// `first` doubled `times` times, at most `max` (saturating: no overflow
/// however many times).
pub(crate) fn doubled(first: Duration, times: u32, max: Duration) -> Duration {
    let factor = 1u32.checked_shl(times).unwrap_or(u32::MAX);
    first.saturating_mul(factor).min(max)
}

/// One connection's backoff: doubling from a minimum up to a maximum,
/// jittered.
pub(crate) struct Backoff {
    rng: fastrand::Rng,
    delay: Duration,
    min: Duration,
    max: Duration,
}

impl Backoff {
    /// A backoff whose first pause is `first` (zero: the first attempt goes
    /// at once), then doubling from `min` up to `max`.
    pub(crate) fn new(first: Duration, min: Duration, max: Duration) -> Self {
        Self {
            rng: crate::rng::seeded(),
            delay: first,
            min,
            max: max.max(min),
        }
    }

    /// The pause before the next attempt, jittered; the delay doubles
    /// after it.
    pub(crate) fn next_pause(&mut self) -> Duration {
        let pause = self.delay.mul_f64(0.5 + self.rng.f64() / 2.0);
        self.delay = (self.delay * 2).max(self.min).min(self.max);
        pause
    }

    /// Starts again from the minimum (a connection was made and lasted).
    pub(crate) fn reset(&mut self) {
        self.delay = self.min;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_from_the_minimum_up_to_the_maximum_jittered() {
        let ms = Duration::from_millis;
        let mut backoff = Backoff::new(Duration::ZERO, ms(50), ms(300));
        assert_eq!(backoff.next_pause(), Duration::ZERO);
        for full in [50, 100, 200, 300, 300] {
            let pause = backoff.next_pause();
            assert!(
                pause >= ms(full) / 2 && pause <= ms(full),
                "{pause:?} for {full} ms"
            );
        }
        backoff.reset();
        assert!(backoff.next_pause() <= ms(50));
    }

    #[test]
    fn doubled_saturates_at_the_maximum() {
        let ms = Duration::from_millis;
        assert_eq!(doubled(ms(10), 0, ms(500)), ms(10));
        assert_eq!(doubled(ms(10), 3, ms(500)), ms(80));
        assert_eq!(doubled(ms(10), 6, ms(500)), ms(500));
        assert_eq!(doubled(ms(10), 40, Duration::MAX), ms(10) * u32::MAX);
    }
}

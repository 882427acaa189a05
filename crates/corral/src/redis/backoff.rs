//! The pause between connection attempts: doubling from a minimum up to a
//! maximum, each pause jittered to 50–100% so that processes that lost one
//! server together do not all knock at once when it is back.

use std::time::Duration;

/// One connection's backoff.
pub(super) struct Backoff {
    rng: fastrand::Rng,
    delay: Duration,
    min: Duration,
    max: Duration,
}

impl Backoff {
    /// A backoff whose first pause is `first` (zero: the first attempt goes
    /// at once), then doubling from `min` up to `max`.
    pub(super) fn new(first: Duration, min: Duration, max: Duration) -> Self {
        Self {
            rng: fastrand::Rng::with_seed(super::random_seed()),
            delay: first,
            min,
            max: max.max(min),
        }
    }

    /// The pause before the next attempt, jittered; the delay doubles
    /// after it.
    pub(super) fn next_pause(&mut self) -> Duration {
        let pause = self.delay.mul_f64(0.5 + self.rng.f64() / 2.0);
        self.delay = (self.delay * 2).max(self.min).min(self.max);
        pause
    }

    /// Starts again from the minimum (a connection was made and lasted).
    pub(super) fn reset(&mut self) {
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
}

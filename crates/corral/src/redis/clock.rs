//! The server's clock as this process sees it, from one `TIME` exchange:
//! how a write names its expiry on the server's clock, and how a reader
//! turns that back into a deadline on its own monotonic clock, so a read of
//! a value needs no `PTTL` (see [`frame`](super::frame)).
//!
//! A `TIME` sent at `sent` and answered at `answered` read the server's
//! clock at some instant between them. Both directions err early:
//!
//! - a write sent at `at` runs at a server time of at least
//!   `server + (at - answered)`, so its expiry is at least that plus its
//!   time to live ([`ServerClock::expiry`], the reading rounded down to
//!   the millisecond): the deadline it names comes no later than the
//!   server's own;
//! - the server's clock reaches `expiry` no sooner than
//!   `sent + (expiry - server)` on this process's clock
//!   ([`ServerClock::deadline`], the reading rounded up).
//!
//! Between readings the server's wall clock and this process's monotonic
//! one may drift apart: a kernel slews a clock by at most 500 parts per
//! million, and both directions take that much of the time since the
//! reading off ([`MAX_DRIFT`]), so they err early while the clocks are
//! only slewed. The error is then one `TIME` round trip, the rounding to
//! whole milliseconds, and that allowance, renewed with the reading at
//! every health check (`health_interval`); a clock stepped by more is not
//! allowed for. (What the clocks may drift after the deadline is placed
//! is not either, as for a remaining time read with `PTTL` and aged on
//! this process's clock.) A reading belongs to one connection: a new one (a
//! failover reaches another server) reads the clock again. Redis keeps a
//! key's expiry as an absolute time of its own clock, and hands it to its
//! replicas as such, so a value's named expiry holds on a promoted replica
//! as it does on the server that wrote it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ::redis::aio::{ConnectionLike, MultiplexedConnection};
use ::redis::Value;

/// The most two clocks drift apart, as a fraction of the time since a
/// reading: 500 parts per million, 1/2000 (the most a kernel slews).
const MAX_DRIFT: u32 = 2000;

/// One reading of the server's clock.
#[derive(Clone, Copy, Debug)]
pub(in crate::redis) struct ServerClock {
    sent: Instant,
    answered: Instant,
    /// The server's time, in microseconds since the Unix epoch: rounded
    /// down to a millisecond for a write's expiry, up for a reader's
    /// deadline, so both err early.
    server_us: u64,
}

impl ServerClock {
    /// The server's clock, read with `TIME` on `conn` within `timeout`;
    /// `None` where no reading came: no answer in time, a broken
    /// connection (which its next call finds out), or a server that
    /// refuses `TIME` (an ACL without `+time`), which sets `refused`, and
    /// then is not asked again. Without a reading, values are read with
    /// their `PTTL`.
    pub(in crate::redis) async fn read(
        conn: &mut MultiplexedConnection,
        timeout: Duration,
        refused: &AtomicBool,
    ) -> Option<Self> {
        if refused.load(Ordering::Relaxed) {
            return None;
        }
        let sent = Instant::now();
        let reply = tokio::time::timeout(timeout, conn.req_packed_command(&::redis::cmd("TIME")))
            .await
            .ok()?;
        match reply.and_then(Value::extract_error) {
            Ok(reply) => Self::of_reply(sent, Instant::now(), &reply),
            Err(error) => {
                if !error.is_unrecoverable_error() {
                    refused.store(true, Ordering::Relaxed);
                }
                None
            }
        }
    }

    /// The reading of a `TIME` reply (`[seconds, microseconds]`), sent at
    /// `sent` and answered at `answered`; `None` for any other reply.
    pub(in crate::redis) fn of_reply(
        sent: Instant,
        answered: Instant,
        reply: &Value,
    ) -> Option<Self> {
        let Value::Array(parts) = reply else {
            return None;
        };
        let [seconds, micros] = parts.as_slice() else {
            return None;
        };
        let number = |value: &Value| match value {
            Value::BulkString(bytes) => std::str::from_utf8(bytes).ok()?.parse::<u64>().ok(),
            Value::Int(n) => u64::try_from(*n).ok(),
            _ => None,
        };
        let server_us = number(seconds)?
            .checked_mul(1_000_000)?
            .checked_add(number(micros)?)?;
        Some(Self {
            sent,
            answered: answered.max(sent),
            server_us,
        })
    }

    /// The server time (ms) at which a value written with `ttl`, sent at
    /// `at`, expires at the earliest.
    pub(in crate::redis) fn expiry(&self, ttl_ms: u64, at: Instant) -> u64 {
        let server_ms = self.server_us / 1000;
        let server_at = if at >= self.answered {
            let since = millis(at.duration_since(self.answered));
            server_ms
                .saturating_add(since)
                .saturating_sub(since.div_ceil(u64::from(MAX_DRIFT)))
        } else {
            server_ms.saturating_sub(millis_up(self.answered.duration_since(at)))
        };
        server_at.saturating_add(ttl_ms)
    }

    /// When, on this process's clock, the server's clock reaches `expiry`
    /// (ms) at the earliest, as placed at `now`; `None` if that was before
    /// the reading.
    pub(in crate::redis) fn deadline(&self, expiry_ms: u64, now: Instant) -> Option<Instant> {
        let left = expiry_ms.checked_sub(self.server_us.div_ceil(1000))?;
        let since = now.saturating_duration_since(self.sent);
        self.sent
            .checked_add(Duration::from_millis(left))?
            .checked_sub(since / MAX_DRIFT)
    }
}

/// Whole milliseconds of `duration`, rounded down.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Whole milliseconds of `duration`, rounded up.
fn millis_up(duration: Duration) -> u64 {
    let whole = millis(duration);
    if duration > Duration::from_millis(whole) {
        whole.saturating_add(1)
    } else {
        whole
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn time(seconds: &str, micros: &str) -> Value {
        Value::Array(vec![
            Value::BulkString(seconds.as_bytes().to_vec()),
            Value::BulkString(micros.as_bytes().to_vec()),
        ])
    }

    #[test]
    fn a_reading_errs_early_both_ways() {
        let sent = Instant::now();
        let answered = sent + Duration::from_millis(4);
        let clock = ServerClock::of_reply(sent, answered, &time("1700000000", "250999"))
            .expect("a TIME reply");
        assert_eq!(clock.server_us, 1_700_000_000_250_999);
        // A write sent 10 ms after the answer runs at server time 260 at
        // the earliest (the reading rounded down), less the drift allowed
        // in 10 ms (rounded up to 1 ms).
        let at = answered + Duration::from_millis(10);
        assert_eq!(clock.expiry(1000, at), 1_700_000_001_259);
        let later = answered + Duration::from_secs(10);
        assert_eq!(clock.expiry(0, later), 1_700_000_010_245, "10 s: 5 ms");
        // Sent before the answer: the time between is taken off, rounded up.
        let early = answered - Duration::from_micros(1500);
        assert_eq!(clock.expiry(1000, early), 1_700_000_001_248);
        // The server reaches 1 s past its reading (rounded up to 251) 1 s
        // after `sent` at the earliest: never later than it does. Placed
        // 10 s after the reading, the drift allowed in those 10 s is taken
        // off.
        assert_eq!(
            clock.deadline(1_700_000_001_251, sent),
            Some(sent + Duration::from_secs(1))
        );
        assert_eq!(
            clock.deadline(1_700_000_011_251, sent + Duration::from_secs(10)),
            Some(sent + Duration::from_secs(11) - Duration::from_millis(5))
        );
        assert_eq!(clock.deadline(1_700_000_000_251, sent), Some(sent));
        assert_eq!(
            clock.deadline(1_700_000_000_250, sent),
            None,
            "before the reading: 250.999 ms is past 250"
        );
        // The round trip of a write and read back, through one reading: the
        // reader's deadline is no later than `at + ttl`, and earlier by at
        // most the reading's round trip and a millisecond of rounding each
        // way.
        let deadline = clock.deadline(clock.expiry(1000, at), at).expect("ahead");
        assert!(deadline <= at + Duration::from_secs(1));
        assert!(deadline >= at + Duration::from_secs(1) - Duration::from_millis(4 + 2 + 2));
        // A reading on a whole millisecond rounds neither way.
        let whole = ServerClock::of_reply(sent, answered, &time("1700000000", "250000"))
            .expect("a TIME reply");
        assert_eq!(whole.deadline(1_700_000_000_250, sent), Some(sent));
        assert_eq!(whole.expiry(0, answered), 1_700_000_000_250);
    }

    #[test]
    fn other_replies_are_no_reading() {
        let now = Instant::now();
        for reply in [
            Value::Nil,
            Value::Array(vec![]),
            time("x", "1"),
            time("1", "-1"),
            Value::Array(vec![Value::Int(1), Value::Int(2), Value::Int(3)]),
        ] {
            assert!(
                ServerClock::of_reply(now, now, &reply).is_none(),
                "{reply:?}"
            );
        }
        assert!(
            ServerClock::of_reply(now, now, &Value::Array(vec![Value::Int(5), Value::Int(0)]))
                .is_some()
        );
    }
}

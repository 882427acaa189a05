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
//!   time to live ([`ServerClock::expiry`]): the deadline it names comes
//!   no later than the server's own;
//! - the server's clock reaches `expiry` no sooner than
//!   `sent + (expiry - server)` on this process's clock
//!   ([`ServerClock::deadline`]).
//!
//! The error is one `TIME` round trip, plus the drift between the two
//! clocks since the reading, which the health check renews every
//! `health_interval`. A reading belongs to one connection: a new one (a
//! failover reaches another server) reads the clock again. Redis keeps a
//! key's expiry as an absolute time of its own clock, and hands it to its
//! replicas as such, so a value's named expiry holds on a promoted replica
//! as it does on the server that wrote it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ::redis::aio::{ConnectionLike, MultiplexedConnection};
use ::redis::Value;

/// One reading of the server's clock.
#[derive(Clone, Copy, Debug)]
pub(in crate::redis) struct ServerClock {
    sent: Instant,
    answered: Instant,
    /// The server's time, in milliseconds since the Unix epoch.
    server_ms: u64,
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
        let server_ms = number(seconds)?
            .checked_mul(1000)?
            .checked_add(number(micros)? / 1000)?;
        Some(Self {
            sent,
            answered: answered.max(sent),
            server_ms,
        })
    }

    /// The server time (ms) at which a value written with `ttl`, sent at
    /// `at`, expires at the earliest.
    pub(in crate::redis) fn expiry(&self, ttl_ms: u64, at: Instant) -> u64 {
        let server_at = if at >= self.answered {
            self.server_ms
                .saturating_add(millis(at.duration_since(self.answered)))
        } else {
            self.server_ms
                .saturating_sub(millis_up(self.answered.duration_since(at)))
        };
        server_at.saturating_add(ttl_ms)
    }

    /// When, on this process's clock, the server's clock reaches `expiry`
    /// (ms) at the earliest; `None` if that was before the reading.
    pub(in crate::redis) fn deadline(&self, expiry_ms: u64) -> Option<Instant> {
        let left = expiry_ms.checked_sub(self.server_ms)?;
        self.sent.checked_add(Duration::from_millis(left))
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
        assert_eq!(clock.server_ms, 1_700_000_000_250);
        // A write sent 10 ms after the answer runs at server time 260 at
        // the earliest.
        let at = answered + Duration::from_millis(10);
        assert_eq!(clock.expiry(1000, at), 1_700_000_001_260);
        // Sent before the answer: the time between is taken off, rounded up.
        let early = answered - Duration::from_micros(1500);
        assert_eq!(clock.expiry(1000, early), 1_700_000_001_248);
        // The server reaches 1 s past its reading 1 s after `sent` at the
        // earliest: never later than it does.
        assert_eq!(
            clock.deadline(1_700_000_001_250),
            Some(sent + Duration::from_secs(1))
        );
        assert_eq!(clock.deadline(1_700_000_000_250), Some(sent));
        assert_eq!(
            clock.deadline(1_700_000_000_249),
            None,
            "before the reading"
        );
        // The round trip of a write and read back, through one reading: the
        // reader's deadline is no later than `at + ttl` plus the reading's
        // round trip.
        let deadline = clock.deadline(clock.expiry(1000, at)).expect("ahead");
        assert!(deadline <= at + Duration::from_secs(1));
        assert!(deadline >= at + Duration::from_secs(1) - Duration::from_millis(4));
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

//! What the `corral herd --redis` coordinator and its worker processes say
//! to each other: one JSON object per line, orders on the worker's stdin,
//! events on its stdout.

use serde::{Deserialize, Serialize};

use super::scenario::CallSpan;

/// An order from the coordinator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "order", rename_all = "snake_case")]
pub(crate) enum Order {
    /// Spawn this process's callers of a round; they wait for [`Order::Go`].
    Arm {
        /// The round (from 0).
        round: u64,
        /// An uncounted round on keys of its own that warms connections and
        /// subscriptions.
        warm_up: bool,
    },
    /// Release the armed callers.
    Go,
}

/// An event from a worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub(crate) enum Event {
    /// Connected to Redis; waiting for orders.
    Ready {
        /// The worker's process id.
        pid: u32,
    },
    /// The round's callers are spawned and waiting at the gate.
    Armed,
    /// The round is over in this process.
    Done(ProcessRound),
}

/// What one worker process measured in one round.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ProcessRound {
    /// Calls that returned the right value.
    pub(crate) successes: u64,
    /// Calls that failed or returned a wrong value.
    pub(crate) failures: u64,
    /// The first failure, if any.
    pub(crate) first_failure: Option<String>,
    /// Per-call latency in microseconds (by the monotonic clock).
    pub(crate) latencies_us: Vec<u64>,
    /// Per-call key and wall-clock span.
    pub(crate) spans: Vec<CallSpan>,
    /// Per key of the round (by index): this process's round trips and
    /// commit.
    pub(crate) keys: Vec<KeyRound>,
    /// Fills this process ran.
    pub(crate) fills: u64,
}

/// One key of a round, seen from one process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct KeyRound {
    /// Store round trips this process spent on the key.
    pub(crate) round_trips: u64,
    /// When this process sent the commit that stored the key's value (wall
    /// clock, microseconds since the Unix epoch), if it did.
    pub(crate) committed_at_us: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_and_events_are_one_line_of_json() {
        let order = Order::Arm {
            round: 2,
            warm_up: false,
        };
        let line = serde_json::to_string(&order).expect("encode");
        assert_eq!(line, r#"{"order":"arm","round":2,"warm_up":false}"#);
        assert_eq!(serde_json::from_str::<Order>(&line).expect("decode"), order);

        let event = Event::Done(ProcessRound {
            successes: 1,
            keys: vec![KeyRound {
                round_trips: 2,
                committed_at_us: Some(7),
            }],
            ..ProcessRound::default()
        });
        let line = serde_json::to_string(&event).expect("encode");
        assert!(!line.contains('\n'));
        assert_eq!(serde_json::from_str::<Event>(&line).expect("decode"), event);
    }
}

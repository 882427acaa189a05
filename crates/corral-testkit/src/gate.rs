//! Ordering events in tests without sleeping: a gate that fills wait on, and
//! bounded waits for a condition on other tasks' progress.

use std::time::{Duration, Instant};

use tokio::sync::watch;

/// A gate that tasks wait on until the test opens it; once open it stays
/// open. Clones share the gate.
#[derive(Clone, Debug)]
pub struct Gate(watch::Sender<bool>);

impl Default for Gate {
    fn default() -> Self {
        Self::new()
    }
}

impl Gate {
    /// A closed gate.
    pub fn new() -> Self {
        Self(watch::channel(false).0)
    }

    /// Opens the gate: every waiter, present and future, goes on.
    pub fn open(&self) {
        self.0.send_replace(true);
    }

    /// Waits until the gate is open.
    pub async fn wait(&self) {
        let mut open = self.0.subscribe();
        let _ = open.wait_for(|open| *open).await;
    }
}

/// Yields until `done` holds — for tests under paused time, where the other
/// tasks progress only when this one yields. Bounded by a number of yields,
/// so a broken protocol fails instead of hanging.
///
/// # Panics
///
/// If `done` never holds.
pub async fn until_yielding(mut done: impl FnMut() -> bool) {
    for _ in 0..1_000_000 {
        if done() {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("condition never held");
}

/// Yields until `done` holds, for at most 10 s of real time.
///
/// # Panics
///
/// If `done` does not hold in time, naming `what`.
pub async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::task::yield_now().await;
    }
}

/// Runs `attempt` and yields until `done` holds, at most 100 ms of real
/// time per attempt, again and again for at most 10 s: for an event that
/// only a repeated action brings about, e.g. a backplane message heard once
/// a subscription is up (a message published before it is not delivered).
///
/// # Panics
///
/// If `done` does not hold in time, naming `what`.
pub async fn until_repeating<F: std::future::Future<Output = ()>>(
    what: &str,
    mut attempt: impl FnMut() -> F,
    mut done: impl FnMut() -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        attempt().await;
        let attempt_ends = Instant::now() + Duration::from_millis(100);
        while Instant::now() < attempt_ends {
            if done() {
                return;
            }
            tokio::task::yield_now().await;
        }
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
    }
}

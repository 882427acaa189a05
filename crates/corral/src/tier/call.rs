//! One guarded store call as a future: admitted by the circuit breaker,
//! bounded by the store timeout or by its caller's patience, its outcome
//! recorded in the breaker and the store's pulse.
//!
//! Written by hand rather than as nested `async fn`s: each `async` layer
//! keeps its own copy of the call it awaits, and these futures nest into
//! every leader's task and every first lease request, so the layers cost
//! kilobytes per fill. This one holds the call, one timer and its bounds.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use crate::data::error::{StoreError, StoreErrorKind};
use crate::store::{current_patience, Patience};
use crate::tier::breaker::{failed, Breaker, Pass};
use crate::tier::pulse::{Pulse, Started};

/// Where a running call stands against its bounds.
enum Limit {
    Unbounded,
    Timeout(Duration),
    /// Fails once the store answered nothing, to any call, for
    /// `patience.silence` since `started`, or at `limit`.
    Silence {
        patience: Patience,
        started: Instant,
        limit: Instant,
    },
}

enum State<'a> {
    /// Not polled yet: bounded by this timeout unless its caller is patient.
    Start(Option<Duration>),
    Running {
        pass: Option<Pass<'a>>,
        started: Started,
        limit: Limit,
    },
    Done,
}

pin_project_lite::pin_project! {
    /// The future of one guarded store call (see the module docs).
    #[must_use = "futures do nothing unless awaited"]
    pub(crate) struct Guarded<'a, F> {
        #[pin]
        call: F,
        #[pin]
        timer: Option<Sleep>,
        breaker: Option<&'a Breaker>,
        pulse: &'a Pulse,
        state: State<'a>,
    }
}

impl<'a, F> Guarded<'a, F> {
    /// `call` through `breaker` (if any), its outcome recorded in `pulse`:
    /// bounded by the patience of the caller that polls it (a task-local,
    /// read on the first poll; such a call may probe an open breaker at
    /// once), or else by `timeout` (none: unbounded).
    pub(crate) fn new(
        breaker: Option<&'a Breaker>,
        pulse: &'a Pulse,
        timeout: Option<Duration>,
        call: F,
    ) -> Self {
        Self {
            call,
            timer: None,
            breaker,
            pulse,
            state: State::Start(timeout),
        }
    }
}

impl<T, F> Future for Guarded<'_, F>
where
    F: Future<Output = Result<T, StoreError>>,
{
    type Output = Result<T, StoreError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if let State::Start(timeout) = *this.state {
            let patience = current_patience();
            let eager = patience.is_some_and(|patience| patience.probe);
            let pass = match this.breaker.map(|b| b.admit(eager)).transpose() {
                Ok(pass) => pass,
                Err(refused) => {
                    *this.state = State::Done;
                    return Poll::Ready(Err(refused));
                }
            };
            let started = this.pulse.started();
            let limit = match (patience, timeout) {
                (Some(patience), _) => {
                    let now = Instant::now();
                    let limit = now + patience.limit;
                    let until = (now + patience.silence).min(limit);
                    this.timer.set(Some(tokio::time::sleep_until(until)));
                    Limit::Silence {
                        patience,
                        started: now,
                        limit,
                    }
                }
                (None, Some(timeout)) => {
                    this.timer.set(Some(tokio::time::sleep(timeout)));
                    Limit::Timeout(timeout)
                }
                (None, None) => Limit::Unbounded,
            };
            *this.state = State::Running {
                pass,
                started,
                limit,
            };
        }
        let State::Running { limit, .. } = &*this.state else {
            return Poll::Ready(Err(StoreError::new(
                StoreErrorKind::Unavailable,
                "store call polled after it returned",
            )));
        };
        let result = match this.call.poll(cx) {
            Poll::Ready(result) => result,
            Poll::Pending => {
                let Some(mut timer) = this.timer.as_mut().as_pin_mut() else {
                    return Poll::Pending;
                };
                ready!(timer.as_mut().poll(cx));
                match *limit {
                    Limit::Unbounded => return Poll::Pending,
                    Limit::Timeout(timeout) => Err(StoreError::new(
                        StoreErrorKind::Timeout,
                        format!("no answer within {timeout:?}"),
                    )),
                    Limit::Silence {
                        patience,
                        started,
                        limit,
                    } => {
                        let heard = this.pulse.last_answer().filter(|at| *at > started);
                        match heard.map(|at| (at + patience.silence).min(limit)) {
                            Some(later) if later > Instant::now() => {
                                timer.as_mut().reset(later);
                                ready!(timer.poll(cx));
                                // Due already (a clock that jumped): the
                                // next poll looks again.
                                cx.waker().wake_by_ref();
                                return Poll::Pending;
                            }
                            _ => Err(StoreError::new(
                                StoreErrorKind::Timeout,
                                format!(
                                    "no answer, to this call or any other, within {:?}",
                                    patience.silence
                                ),
                            )),
                        }
                    }
                }
            }
        };
        if let State::Running { pass, started, .. } = std::mem::replace(this.state, State::Done) {
            let silent = if failed(&result) {
                this.pulse.unanswered(started)
            } else {
                this.pulse.answered();
                false
            };
            if let Some(pass) = pass {
                pass.ended(silent);
            }
        }
        Poll::Ready(result)
    }
}

#[cfg(all(test, not(shuttle)))]
#[path = "breaker_tests.rs"]
mod breaker_tests;

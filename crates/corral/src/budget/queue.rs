//! The local side of a fill budget: at most `limit` permits out at once,
//! and a queue of fills waiting for one, served hottest first.
//!
//! Invariants:
//! - `in_use` counts permits held plus permits granted to a queued fill
//!   that has not picked its permit up yet; it only exceeds `limit` after
//!   the limit was lowered, and then no permit is granted until it is
//!   back under.
//! - A permit is granted to a waiting fill only under the state lock, and
//!   every path that ends a wait (picked up, cancelled while queued,
//!   cancelled after its grant) leaves the state lock with the permit
//!   either held by a [`LocalPermit`] or handed on: no permit is lost.
//! - The queue is ordered when a permit is handed out, not when a fill
//!   joins it: the number of callers a fill serves changes while it waits.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use crate::stats::Counters;
use crate::sync::{lock, Mutex};

/// What a queued fill is worth: read each time a permit is handed out.
pub(crate) trait Demand: Send + Sync {
    /// How many callers wait for this fill now.
    fn callers(&self) -> usize;
    /// Whether its callers were answered already (a background refresh, or
    /// a fill whose callers got a stale value): it yields to every fill
    /// that callers wait for.
    fn answered(&self) -> bool;
}

/// The state of one budget's permits.
pub(crate) struct Permits {
    state: Mutex<State>,
    /// Totals for [`FillBudget::stats`](super::FillBudget::stats).
    pub(crate) totals: Totals,
}

struct State {
    limit: usize,
    in_use: usize,
    next_seq: u64,
    queue: Vec<Queued>,
    /// Tickets granted a permit, not picked up yet.
    granted: Vec<u64>,
}

struct Queued {
    seq: u64,
    demand: Arc<dyn Demand>,
    waker: Option<Waker>,
}

/// Counts kept by a budget over its life.
#[derive(Default)]
pub(crate) struct Totals {
    pub(crate) granted: AtomicU64,
    pub(crate) queued: AtomicU64,
    pub(crate) overloaded: AtomicU64,
    pub(crate) abandoned: AtomicU64,
    pub(crate) wait_nanos: AtomicU64,
    pub(crate) peak_in_use: AtomicU64,
}

impl Totals {
    pub(crate) fn waited(&self, waited: Duration) {
        let nanos = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
        self.wait_nanos.fetch_add(nanos, Ordering::Relaxed);
    }
}

impl Permits {
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            state: Mutex::new(State {
                limit,
                in_use: 0,
                next_seq: 0,
                queue: Vec::new(),
                granted: Vec::new(),
            }),
            totals: Totals::default(),
        }
    }

    /// Permits out now, and fills queued.
    pub(crate) fn load(&self) -> (usize, usize) {
        let state = lock(&self.state);
        (state.in_use, state.queue.len())
    }

    /// The current limit.
    pub(crate) fn limit(&self) -> usize {
        lock(&self.state).limit
    }

    /// Sets the limit; raising it hands permits to queued fills at once.
    pub(crate) fn set_limit(&self, limit: usize) {
        let wakers = {
            let mut state = lock(&self.state);
            state.limit = limit.max(1);
            state.grant_waiting(&self.totals)
        };
        wakers.into_iter().for_each(Waker::wake);
    }

    /// A permit at once if one is free and no fill is queued; otherwise a
    /// place in the queue, whose future resolves to the permit.
    pub(crate) fn acquire(self: &Arc<Self>, demand: Arc<dyn Demand>) -> Acquire {
        let mut state = lock(&self.state);
        if state.queue.is_empty() && state.in_use < state.limit {
            state.take_one(&self.totals);
            return Acquire {
                permits: Arc::clone(self),
                ticket: Ticket::Ready,
            };
        }
        let seq = state.next_seq;
        state.next_seq += 1;
        state.queue.push(Queued {
            seq,
            demand,
            waker: None,
        });
        Counters::bump(&self.totals.queued);
        Acquire {
            permits: Arc::clone(self),
            ticket: Ticket::Queued(seq),
        }
    }

    /// Gives one permit back and hands it on to the most wanted queued
    /// fill.
    fn give_back(&self) {
        let wakers = {
            let mut state = lock(&self.state);
            state.in_use = state.in_use.saturating_sub(1);
            state.grant_waiting(&self.totals)
        };
        wakers.into_iter().for_each(Waker::wake);
    }
}

impl State {
    fn take_one(&mut self, totals: &Totals) {
        self.in_use += 1;
        Counters::bump(&totals.granted);
        totals
            .peak_in_use
            .fetch_max(self.in_use as u64, Ordering::Relaxed);
    }

    /// Grants free permits to queued fills, most wanted first: fills that
    /// callers wait for before answered ones, then by callers waiting,
    /// then oldest first. Returns the wakers to wake outside the lock.
    fn grant_waiting(&mut self, totals: &Totals) -> Vec<Waker> {
        let mut wakers = Vec::new();
        while self.in_use < self.limit {
            let best = self
                .queue
                .iter()
                .enumerate()
                .max_by_key(|(_, queued)| {
                    let demand = &queued.demand;
                    (
                        !demand.answered(),
                        demand.callers(),
                        std::cmp::Reverse(queued.seq),
                    )
                })
                .map(|(index, _)| index);
            let Some(index) = best else {
                break;
            };
            let queued = self.queue.swap_remove(index);
            self.take_one(totals);
            self.granted.push(queued.seq);
            wakers.extend(queued.waker);
        }
        wakers
    }
}

/// A place in a budget's queue, or a permit granted at once.
pub(crate) struct Acquire {
    permits: Arc<Permits>,
    ticket: Ticket,
}

enum Ticket {
    /// Granted when asked; not picked up yet.
    Ready,
    /// In the queue (or granted and not picked up) under this number.
    Queued(u64),
    /// Picked up as a [`LocalPermit`].
    Done,
}

impl Acquire {
    /// Whether the permit was granted when asked (no queue).
    pub(crate) fn is_immediate(&self) -> bool {
        matches!(self.ticket, Ticket::Ready)
    }
}

impl Future for Acquire {
    type Output = LocalPermit;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<LocalPermit> {
        let this = &mut *self;
        let seq = match this.ticket {
            Ticket::Ready => {
                this.ticket = Ticket::Done;
                return Poll::Ready(LocalPermit {
                    permits: Arc::clone(&this.permits),
                });
            }
            Ticket::Queued(seq) => seq,
            Ticket::Done => return Poll::Pending,
        };
        let mut state = lock(&this.permits.state);
        if let Some(at) = state.granted.iter().position(|granted| *granted == seq) {
            state.granted.swap_remove(at);
            drop(state);
            this.ticket = Ticket::Done;
            return Poll::Ready(LocalPermit {
                permits: Arc::clone(&this.permits),
            });
        }
        if let Some(queued) = state.queue.iter_mut().find(|queued| queued.seq == seq) {
            match &queued.waker {
                Some(waker) if waker.will_wake(cx.waker()) => {}
                _ => queued.waker = Some(cx.waker().clone()),
            }
        }
        Poll::Pending
    }
}

impl Drop for Acquire {
    /// A wait given up: its place leaves the queue, and a permit granted
    /// to it meanwhile goes to the next fill.
    fn drop(&mut self) {
        match self.ticket {
            Ticket::Done => {}
            Ticket::Ready => self.permits.give_back(),
            Ticket::Queued(seq) => {
                let mut state = lock(&self.permits.state);
                if let Some(at) = state.queue.iter().position(|queued| queued.seq == seq) {
                    state.queue.swap_remove(at);
                    return;
                }
                if let Some(at) = state.granted.iter().position(|granted| *granted == seq) {
                    state.granted.swap_remove(at);
                    drop(state);
                    self.permits.give_back();
                }
            }
        }
    }
}

/// One permit of a budget, given back when dropped.
pub(crate) struct LocalPermit {
    permits: Arc<Permits>,
}

impl Drop for LocalPermit {
    fn drop(&mut self) {
        self.permits.give_back();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize};
    use std::task::Waker;

    use super::*;

    struct Fixed {
        callers: AtomicUsize,
        answered: AtomicBool,
    }

    fn demand(callers: usize, answered: bool) -> Arc<Fixed> {
        Arc::new(Fixed {
            callers: AtomicUsize::new(callers),
            answered: AtomicBool::new(answered),
        })
    }

    impl Demand for Fixed {
        fn callers(&self) -> usize {
            self.callers.load(Ordering::Relaxed)
        }
        fn answered(&self) -> bool {
            self.answered.load(Ordering::Relaxed)
        }
    }

    fn poll(acquire: &mut Acquire) -> Option<LocalPermit> {
        let mut cx = Context::from_waker(Waker::noop());
        match Pin::new(acquire).poll(&mut cx) {
            Poll::Ready(permit) => Some(permit),
            Poll::Pending => None,
        }
    }

    #[test]
    fn the_most_wanted_fill_goes_first_then_the_oldest() {
        let permits = Arc::new(Permits::new(1));
        let mut first = permits.acquire(demand(1, false));
        let held = poll(&mut first).expect("free permit");
        let mut refresh = permits.acquire(demand(50, true));
        let mut cold = permits.acquire(demand(1, false));
        let hot_demand = demand(1, false);
        let mut hot = permits.acquire(hot_demand.clone());
        let mut cold_later = permits.acquire(demand(1, false));
        // The hot fill gains callers while it waits.
        hot_demand.callers.store(40, Ordering::Relaxed);
        assert!(poll(&mut hot).is_none());
        drop(held);
        let hot_permit = poll(&mut hot).expect("most callers first");
        assert!(poll(&mut cold).is_none() && poll(&mut cold_later).is_none());
        drop(hot_permit);
        let cold_permit = poll(&mut cold).expect("then the oldest");
        assert!(poll(&mut cold_later).is_none());
        drop(cold_permit);
        let later_permit = poll(&mut cold_later).expect("then the next");
        assert!(poll(&mut refresh).is_none(), "answered fills go last");
        drop(later_permit);
        assert!(poll(&mut refresh).is_some());
        assert_eq!(permits.load(), (0, 0));
    }

    #[test]
    fn a_cancelled_wait_holds_no_permit_and_no_place() {
        let permits = Arc::new(Permits::new(1));
        let mut first = permits.acquire(demand(1, false));
        let held = poll(&mut first).expect("free permit");
        let queued = permits.acquire(demand(1, false));
        let mut granted_then_dropped = permits.acquire(demand(9, false));
        assert_eq!(permits.load(), (1, 2));
        drop(queued);
        assert_eq!(permits.load(), (1, 1));
        drop(held);
        // Granted to the waiting fill, which then gives up before picking
        // it up: the permit comes back.
        assert_eq!(permits.load(), (1, 0));
        assert!(poll(&mut granted_then_dropped).is_some());
        drop(granted_then_dropped);
        assert_eq!(permits.load(), (0, 0));
        let unpolled = permits.acquire(demand(1, false));
        assert!(unpolled.is_immediate());
        drop(unpolled);
        assert_eq!(permits.load(), (0, 0));
    }

    #[test]
    fn a_raised_limit_grants_queued_fills_at_once() {
        let permits = Arc::new(Permits::new(1));
        let mut a = permits.acquire(demand(1, false));
        let mut b = permits.acquire(demand(1, false));
        let _a = poll(&mut a).expect("free permit");
        assert!(poll(&mut b).is_none());
        permits.set_limit(2);
        let _b = poll(&mut b).expect("granted by the raised limit");
        assert_eq!(permits.load(), (2, 0));
    }
}

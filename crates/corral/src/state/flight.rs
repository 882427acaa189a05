//! In-process single-flight: one table per cache instance, keyed by the full
//! key and the fill's error type, in which the first caller of a missing key
//! becomes the leader and every later caller with the same error type joins
//! its flight.
//!
//! Invariants:
//! - A key has at most one flight per error type in the table, so a caller
//!   only ever joins a flight whose error it can receive (fills of one key
//!   with different error types run as separate flights; with a shared
//!   store the lease still makes them one fill). Only a flight's
//!   [`Leadership`] removes it, and only while it is still the one in the
//!   table (matched by id), or [`FlightTable::detach`] removes every flight
//!   of the key for a newer write.
//! - A flight's outcome is published exactly once; a [`Leadership`] dropped
//!   before publishing publishes [`Failure::Aborted`], so no waiter hangs.
//! - A leader retires its flight before publishing the outcome, so a caller
//!   that receives an error and calls again starts a new flight rather than
//!   joining the finished one.
//! - A flight's leader writes into the in-process tier only while its flight
//!   is still the table's flight for the key, checked under the table lock
//!   (the same lock `detach` holds while a newer write lands), and only if
//!   no [`FlightTable::reset`] happened since it was claimed (what it read
//!   may have been missed by whatever keeps the tier current) — but for a
//!   fill made without the store, which only a [`Reset::Whole`] stops.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures_util::task::AtomicWaker;

use super::recent::Recent;
use crate::sync::{lock, Mutex};

/// What a flight hands each of its callers.
#[derive(Debug, Clone)]
pub(crate) enum Outcome<V> {
    Value(V),
    Failed(Failure),
}

/// Why a flight produced no value.
#[derive(Debug, Clone)]
pub(crate) enum Failure {
    /// The fill's own error, typed: of the error type the flight is keyed
    /// by.
    Fill(Arc<dyn Any + Send + Sync>),
    Panicked(Arc<str>),
    TimedOut(Duration),
    /// The fill budget gave no permit within its wait: the source was
    /// never called.
    Overloaded(Duration),
    Aborted,
}

/// One fill in progress and the callers waiting for it.
pub(crate) struct Flight<V> {
    id: u64,
    /// The table's [`resets`](FlightTable::resets) when it was claimed.
    resets: u64,
    /// The table's [`whole_resets`](FlightTable::whole_resets) then.
    whole_resets: u64,
    slot: Mutex<Slot<V>>,
    /// How many [`Wait`]s of the flight are alive: callers waiting for it.
    waiting: AtomicUsize,
    /// Whether any caller ever waited (a flight no caller waited for yet
    /// is not abandoned by an empty count).
    waited: AtomicBool,
    /// Set once an outcome is published (a glance without the lock).
    published: AtomicBool,
    /// Woken when the last waiting caller leaves.
    deserted: AtomicWaker,
}

struct Slot<V> {
    outcome: Option<Outcome<V>>,
    wakers: Vec<Waker>,
}

impl<V: Clone> Flight<V> {
    fn new(id: u64, (resets, whole_resets): (u64, u64)) -> Self {
        Self {
            id,
            resets,
            whole_resets,
            slot: Mutex::new(Slot {
                outcome: None,
                wakers: Vec::new(),
            }),
            waiting: AtomicUsize::new(0),
            waited: AtomicBool::new(false),
            published: AtomicBool::new(false),
            deserted: AtomicWaker::new(),
        }
    }

    /// Waits for the flight's outcome. Dropping the future only stops this
    /// caller's wait.
    pub(crate) fn wait(self: &Arc<Self>) -> Wait<V> {
        self.waited.store(true, Ordering::Relaxed);
        self.waiting.fetch_add(1, Ordering::Relaxed);
        Wait {
            flight: Arc::clone(self),
            waker_index: None,
        }
    }
}

impl<V> Flight<V> {
    /// How many callers wait for the flight now (a glance: a caller may
    /// join or leave at once after).
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Whether its outcome was published (its callers were answered).
    pub(crate) fn is_published(&self) -> bool {
        self.published.load(Ordering::Acquire)
    }

    /// Resolves once callers waited for the flight and every one of them
    /// left (cancelled) before an outcome was published.
    pub(crate) async fn deserted(&self) {
        std::future::poll_fn(|cx| {
            self.deserted.register(cx.waker());
            let empty = self.waited.load(Ordering::Relaxed)
                && self.waiting.load(Ordering::Acquire) == 0
                && !self.is_published();
            if empty {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
    }
}

impl<V: Clone> Flight<V> {
    fn publish(&self, outcome: Outcome<V>) {
        let wakers = {
            let mut slot = lock(&self.slot);
            if slot.outcome.is_some() {
                return;
            }
            slot.outcome = Some(outcome);
            self.published.store(true, Ordering::Release);
            std::mem::take(&mut slot.wakers)
        };
        for waker in wakers {
            waker.wake();
        }
    }
}

/// The future of [`Flight::wait`].
pub(crate) struct Wait<V> {
    flight: Arc<Flight<V>>,
    waker_index: Option<usize>,
}

impl<V: Clone> Future for Wait<V> {
    type Output = Outcome<V>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome<V>> {
        let this = &mut *self;
        let mut slot = lock(&this.flight.slot);
        if let Some(outcome) = &slot.outcome {
            return Poll::Ready(outcome.clone());
        }
        match this.waker_index {
            Some(index) if index < slot.wakers.len() => {
                if !slot.wakers[index].will_wake(cx.waker()) {
                    slot.wakers[index] = cx.waker().clone();
                }
            }
            _ => {
                slot.wakers.push(cx.waker().clone());
                this.waker_index = Some(slot.wakers.len() - 1);
            }
        }
        Poll::Pending
    }
}

impl<V> Drop for Wait<V> {
    fn drop(&mut self) {
        if self.flight.waiting.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.flight.deserted.wake();
        }
    }
}

type FlightMap<V> = HashMap<Box<str>, KeyFlights<V>, foldhash::fast::RandomState>;

/// The flights of one key, one per fill error type: nearly always one,
/// held without allocating; more only when call sites with different error
/// types fill the key at once.
struct KeyFlights<V> {
    first: (TypeId, Arc<Flight<V>>),
    others: Vec<(TypeId, Arc<Flight<V>>)>,
}

impl<V> KeyFlights<V> {
    fn get(&self, error: TypeId) -> Option<&Arc<Flight<V>>> {
        std::iter::once(&self.first)
            .chain(&self.others)
            .find(|(of, _)| *of == error)
            .map(|(_, flight)| flight)
    }

    fn get_by_id(&self, id: u64) -> Option<&Arc<Flight<V>>> {
        std::iter::once(&self.first)
            .chain(&self.others)
            .find(|(_, flight)| flight.id == id)
            .map(|(_, flight)| flight)
    }

    /// Removes the flight numbered `id`, which the key holds; returns
    /// whether the key has no flight left.
    fn remove(&mut self, id: u64) -> bool {
        if self.first.1.id == id {
            match self.others.pop() {
                Some(next) => self.first = next,
                None => return true,
            }
        } else {
            self.others.retain(|(_, flight)| flight.id != id);
        }
        false
    }

    fn count(&self) -> usize {
        1 + self.others.len()
    }
}

/// The single-flight table of one cache instance.
pub(crate) struct FlightTable<V> {
    next_id: AtomicU64,
    /// Bumped under the table lock by every [`detach`](Self::detach): a
    /// reader that saw no bump since it started read nothing a newer write
    /// replaced.
    writes: AtomicU64,
    /// Bumped under the table lock by every [`reset`](Self::reset): a
    /// flight claimed before it writes nothing it holds on the store's
    /// word into the tier.
    resets: AtomicU64,
    /// Bumped with `resets` by every [`Reset::Whole`]: a flight claimed
    /// before it writes nothing into the tier, not even a fill made
    /// without the store.
    whole_resets: AtomicU64,
    /// The writes lately detached, by key: locked inside the table lock.
    recent: Mutex<Recent>,
    /// How many flights the table holds, changed under the table lock: a
    /// glance that takes no lock (and may be a moment behind).
    running: AtomicUsize,
    flights: Mutex<FlightMap<V>>,
}

/// What a [`FlightTable::reset`] keeps out of the tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reset {
    /// Everything a flight claimed before it would write: the tier was
    /// dropped whole.
    Whole,
    /// What a flight claimed before it holds on the store's word (read from
    /// it, or kept once the store took it); a fill made without the store
    /// ([`Leadership::retire_unverified`]) is still kept.
    StoreWord,
}

/// The result of [`FlightTable::claim`].
pub(crate) enum Claim<V: Clone> {
    /// This caller leads a new flight and must complete it.
    Lead(Leadership<V>),
    /// A flight for the key is running; wait for it.
    Join(Arc<Flight<V>>),
    /// No flight, but the recheck found a value (a flight finished between
    /// the caller's first look and its claim).
    Ready(V),
}

impl<V: Clone> FlightTable<V> {
    pub(crate) fn new() -> Self {
        Self {
            next_id: AtomicU64::new(1),
            writes: AtomicU64::new(0),
            resets: AtomicU64::new(0),
            whole_resets: AtomicU64::new(0),
            recent: Mutex::new(Recent::new()),
            running: AtomicUsize::new(0),
            flights: Mutex::new(HashMap::default()),
        }
    }

    /// Joins the flight of the key and of `error` (the `TypeId` of the
    /// fill's error type), or — when `recheck`, run under the table lock,
    /// finds no value — starts one and returns its leadership.
    ///
    /// Leaders write and retire under the same lock, so a caller never
    /// starts a second fill for a value that landed after its first look.
    pub(crate) fn claim(
        self: &Arc<Self>,
        key: &str,
        error: TypeId,
        recheck: impl FnOnce() -> Option<V>,
    ) -> Claim<V> {
        let mut flights = lock(&self.flights);
        let of_key = flights.get_mut(key);
        if let Some(flight) = of_key.as_ref().and_then(|of_key| of_key.get(error)) {
            return Claim::Join(Arc::clone(flight));
        }
        if let Some(value) = recheck() {
            return Claim::Ready(value);
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let resets = (
            self.resets.load(Ordering::Relaxed),
            self.whole_resets.load(Ordering::Relaxed),
        );
        let flight = Arc::new(Flight::new(id, resets));
        match of_key {
            Some(of_key) => of_key.others.push((error, Arc::clone(&flight))),
            None => {
                let first = (error, Arc::clone(&flight));
                flights.insert(
                    key.into(),
                    KeyFlights {
                        first,
                        others: Vec::new(),
                    },
                );
            }
        }
        self.running.fetch_add(1, Ordering::Relaxed);
        Claim::Lead(Leadership {
            table: Arc::downgrade(self),
            key: key.into(),
            flight,
            published: false,
            retired: false,
        })
    }

    /// Removes every flight of the key, if any, so later calls start new
    /// ones, and runs `newer_write` under the table lock. The detached
    /// flights still publish their outcome to their callers but no longer
    /// write.
    pub(crate) fn detach<R>(&self, key: &str, newer_write: impl FnOnce() -> R) -> R {
        let mut flights = lock(&self.flights);
        if let Some(of_key) = flights.remove(key) {
            self.running.fetch_sub(of_key.count(), Ordering::Relaxed);
        }
        let number = self.writes.fetch_add(1, Ordering::Relaxed) + 1;
        lock(&self.recent).wrote(key, number);
        newer_write()
    }

    /// [`detach`](Self::detach) for a write made outside any flight and
    /// started at `mark` ([`write_mark`](Self::write_mark)): `newer_write`
    /// is told whether another write of the key (or of every key) was
    /// detached since, which is then newer than this one's answer.
    pub(crate) fn detach_since<R>(
        &self,
        key: &str,
        mark: u64,
        newer_write: impl FnOnce(bool) -> R,
    ) -> R {
        let mut flights = lock(&self.flights);
        if let Some(of_key) = flights.remove(key) {
            self.running.fetch_sub(of_key.count(), Ordering::Relaxed);
        }
        let now = self.writes.load(Ordering::Relaxed);
        let mut recent = lock(&self.recent);
        let overtaken = recent.since(key, mark, now);
        self.writes.store(now + 1, Ordering::Relaxed);
        recent.wrote(key, now + 1);
        drop(recent);
        newer_write(overtaken)
    }

    /// Runs `newer_write` under the table lock for writes that concern every
    /// key (a cleared tier, a tag), so readers started before it do not keep
    /// what they read; flights in progress are left to their own checks.
    pub(crate) fn detach_all<R>(&self, newer_write: impl FnOnce() -> R) -> R {
        let _flights = lock(&self.flights);
        let number = self.writes.fetch_add(1, Ordering::Relaxed) + 1;
        lock(&self.recent).wrote_all(number);
        newer_write()
    }

    /// [`detach_all`](Self::detach_all), and besides, no flight claimed
    /// before it writes into the tier what `what` says: for a tier dropped
    /// (whole, or what it holds on the store's word) because what kept it
    /// current may have missed changes, so nothing read before counts.
    pub(crate) fn reset<R>(&self, what: Reset, newer_write: impl FnOnce() -> R) -> R {
        let _flights = lock(&self.flights);
        let number = self.writes.fetch_add(1, Ordering::Relaxed) + 1;
        lock(&self.recent).wrote_all(number);
        self.resets.fetch_add(1, Ordering::Relaxed);
        if what == Reset::Whole {
            self.whole_resets.fetch_add(1, Ordering::Relaxed);
        }
        newer_write()
    }

    /// A mark to pass to [`keep_if_unchanged`](Self::keep_if_unchanged),
    /// taken before reading.
    pub(crate) fn write_mark(&self) -> u64 {
        let _flights = lock(&self.flights);
        self.writes.load(Ordering::Relaxed)
    }

    /// Runs `keep` under the table lock if no write was detached since
    /// `mark` and no flight of `key` runs (its leader writes what it finds).
    pub(crate) fn keep_if_unchanged(&self, key: &str, mark: u64, keep: impl FnOnce()) {
        let flights = lock(&self.flights);
        if self.writes.load(Ordering::Relaxed) == mark && !flights.contains_key(key) {
            keep();
        }
    }

    /// Whether a flight of `key` is in progress; without taking the lock
    /// while no flight of any key is. A flight claimed meanwhile may be
    /// missed: the answer is a hint, not a claim.
    pub(crate) fn is_running(&self, key: &str) -> bool {
        self.running.load(Ordering::Relaxed) > 0 && lock(&self.flights).contains_key(key)
    }

    /// How many flights are in progress.
    pub(crate) fn len(&self) -> usize {
        let _flights = lock(&self.flights);
        self.running.load(Ordering::Relaxed)
    }
}

/// The right and the duty to finish one flight.
pub(crate) struct Leadership<V: Clone> {
    table: Weak<FlightTable<V>>,
    key: Box<str>,
    flight: Arc<Flight<V>>,
    published: bool,
    retired: bool,
}

impl<V: Clone> Leadership<V> {
    /// The flight this leadership finishes.
    pub(crate) fn flight(&self) -> &Arc<Flight<V>> {
        &self.flight
    }

    /// The key of the flight.
    pub(crate) fn key(&self) -> &str {
        &self.key
    }

    /// Whether an outcome was published already.
    pub(crate) fn has_published(&self) -> bool {
        self.published
    }

    /// Hands the outcome to every caller of the flight, present and future.
    /// Only the first outcome published counts.
    pub(crate) fn publish(&mut self, outcome: Outcome<V>) {
        self.published = true;
        self.flight.publish(outcome);
    }

    /// Removes the flight from the table. `if_current` runs under the table
    /// lock, and only if no newer write detached the flight meanwhile and no
    /// [`reset`](FlightTable::reset) happened since it was claimed; it
    /// returns whether it ran.
    pub(crate) fn retire(&mut self, if_current: impl FnOnce()) -> bool {
        self.retire_with_key(|_| if_current())
    }

    /// [`retire`](Self::retire), `if_current` handed the flight's key.
    pub(crate) fn retire_with_key(&mut self, if_current: impl FnOnce(&str)) -> bool {
        self.retire_if(if_current, |flight, table| {
            flight.resets == table.resets.load(Ordering::Relaxed)
        })
    }

    /// [`retire`](Self::retire) for a fill made without the store (what it
    /// keeps is fresh from the source, on no word of the store's):
    /// `if_current` runs unless a newer write detached the flight or a
    /// [`Reset::Whole`] happened since it was claimed.
    pub(crate) fn retire_unverified(&mut self, if_current: impl FnOnce()) -> bool {
        self.retire_if(
            |_| if_current(),
            |flight, table| flight.whole_resets == table.whole_resets.load(Ordering::Relaxed),
        )
    }

    /// Removes the flight from the table; runs `if_current` under the table
    /// lock if the flight is still the key's and `unreset` (under the same
    /// lock) says no reset since its claim concerns it.
    fn retire_if(
        &mut self,
        if_current: impl FnOnce(&str),
        unreset: impl FnOnce(&Flight<V>, &FlightTable<V>) -> bool,
    ) -> bool {
        self.retired = true;
        let Some(table) = self.table.upgrade() else {
            return false;
        };
        let mut flights = lock(&table.flights);
        let current = flights
            .get(&*self.key)
            .and_then(|of_key| of_key.get_by_id(self.flight.id))
            .is_some();
        let unreset = unreset(&self.flight, &table);
        if current {
            if unreset {
                if_current(&self.key);
            }
            if let Some(of_key) = flights.get_mut(&*self.key) {
                if of_key.remove(self.flight.id) {
                    flights.remove(&*self.key);
                }
            }
            table.running.fetch_sub(1, Ordering::Relaxed);
        }
        current && unreset
    }
}

impl<V: Clone> Drop for Leadership<V> {
    fn drop(&mut self) {
        if !self.retired {
            self.retire(|| ());
        }
        if !self.published {
            self.flight.publish(Outcome::Failed(Failure::Aborted));
        }
    }
}

#[cfg(all(test, shuttle))]
#[path = "flight_model.rs"]
mod model;

#[cfg(all(test, not(shuttle)))]
mod tests {
    use super::*;

    fn lead(table: &Arc<FlightTable<u32>>, key: &str) -> Leadership<u32> {
        match table.claim(key, TypeId::of::<()>(), || None) {
            Claim::Lead(leadership) => leadership,
            _ => panic!("no flight of {key} yet"),
        }
    }

    #[test]
    fn a_store_word_reset_keeps_out_what_came_from_the_store_only() {
        let table = Arc::new(FlightTable::new());
        let (mut read, mut filled) = (lead(&table, "read"), lead(&table, "filled"));
        let mark = table.write_mark();
        table.reset(Reset::StoreWord, || ());
        let mut kept = Vec::new();
        assert!(!read.retire(|| kept.push("read")));
        assert!(filled.retire_unverified(|| kept.push("filled")));
        let mut kept_after = false;
        table.keep_if_unchanged("other", mark, || kept_after = true);
        assert_eq!(kept, ["filled"]);
        assert!(!kept_after, "a read started before keeps nothing");

        let mut filled = lead(&table, "filled");
        table.reset(Reset::Whole, || ());
        assert!(!filled.retire_unverified(|| kept.push("filled again")));
        assert_eq!(kept, ["filled"]);
        assert_eq!(table.len(), 0);
    }
}

//! Randomized model checks of the flight protocol under shuttle, which
//! explores the interleavings of the table and slot locks.
//!
//! Run with `RUSTFLAGS="--cfg shuttle" cargo test -p corral-cache --lib flight::model`.

use std::any::TypeId;
use std::sync::Arc;

use shuttle::future::{block_on, spawn, yield_now};
use shuttle::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};

use super::{Claim, FlightTable, Outcome, Reset};
use crate::sync::{lock, Mutex};

const ITERATIONS: usize = 2_000;

/// The in-process tier of the model: one slot for one key.
type Tier = Arc<Mutex<Option<u32>>>;

async fn read_through(
    table: Arc<FlightTable<u32>>,
    tier: Tier,
    leads: Arc<AtomicUsize>,
) -> Option<u32> {
    if let Some(value) = *lock(&tier) {
        return Some(value);
    }
    match table.claim("k", TypeId::of::<()>(), || *lock(&tier)) {
        Claim::Ready(value) => Some(value),
        Claim::Join(flight) => match flight.wait().await {
            Outcome::Value(value) => Some(value),
            Outcome::Failed(_) => None,
        },
        Claim::Lead(mut leadership) => {
            leads.fetch_add(1, SeqCst);
            yield_now().await;
            leadership.retire(|| *lock(&tier) = Some(7));
            leadership.publish(Outcome::Value(7));
            Some(7)
        }
    }
}

#[test]
fn concurrent_callers_share_one_fill_and_leave_the_table_empty() {
    shuttle::check_random(
        || {
            let table = Arc::new(FlightTable::<u32>::new());
            let tier: Tier = Arc::new(Mutex::new(None));
            let leads = Arc::new(AtomicUsize::new(0));
            let callers: Vec<_> = (0..4)
                .map(|_| {
                    spawn(read_through(
                        Arc::clone(&table),
                        Arc::clone(&tier),
                        Arc::clone(&leads),
                    ))
                })
                .collect();
            block_on(async {
                for caller in callers {
                    assert_eq!(caller.await.ok().flatten(), Some(7));
                }
            });
            assert_eq!(leads.load(SeqCst), 1, "exactly one fill");
            assert_eq!(table.len(), 0);
            assert_eq!(*lock(&tier), Some(7));
        },
        ITERATIONS,
    );
}

#[test]
fn an_abandoned_leader_wakes_its_waiters_and_frees_the_key() {
    shuttle::check_random(
        || {
            let table = Arc::new(FlightTable::<u32>::new());
            let Claim::Lead(leadership) = table.claim("k", TypeId::of::<()>(), || None) else {
                panic!("first claim leads");
            };
            let waiters: Vec<_> = (0..2)
                .map(|_| {
                    let table = Arc::clone(&table);
                    spawn(async move {
                        match table.claim("k", TypeId::of::<()>(), || None) {
                            Claim::Join(flight) => {
                                let failed = matches!(flight.wait().await, Outcome::Failed(_));
                                // A caller told of the failure never rejoins the failed flight.
                                let rejoined = match table.claim("k", TypeId::of::<()>(), || None) {
                                    Claim::Join(again) => again.id == flight.id,
                                    Claim::Lead(_) | Claim::Ready(_) => false,
                                };
                                failed && !rejoined
                            }
                            // Claimed after the abandoned flight was removed.
                            Claim::Lead(_) | Claim::Ready(_) => true,
                        }
                    })
                })
                .collect();
            let abandon = spawn(async move { drop(leadership) });
            block_on(async {
                let _ = abandon.await;
                for waiter in waiters {
                    assert_eq!(waiter.await.ok(), Some(true));
                }
            });
            assert_eq!(table.len(), 0);
        },
        ITERATIONS,
    );
}

#[test]
fn a_write_during_a_flight_is_never_overwritten_by_it() {
    shuttle::check_random(
        || {
            let table = Arc::new(FlightTable::<u32>::new());
            let tier: Tier = Arc::new(Mutex::new(None));
            let claimed = Arc::new(AtomicBool::new(false));
            let leader = {
                let (table, tier, claimed) =
                    (Arc::clone(&table), Arc::clone(&tier), Arc::clone(&claimed));
                spawn(async move {
                    let Claim::Lead(mut leadership) = table.claim("k", TypeId::of::<()>(), || None)
                    else {
                        panic!("first claim leads");
                    };
                    claimed.store(true, SeqCst);
                    yield_now().await;
                    leadership.retire(|| *lock(&tier) = Some(7));
                    leadership.publish(Outcome::Value(7));
                })
            };
            let writer = {
                let (table, tier) = (Arc::clone(&table), Arc::clone(&tier));
                spawn(async move {
                    while !claimed.load(SeqCst) {
                        yield_now().await;
                    }
                    table.detach("k", || *lock(&tier) = Some(99));
                })
            };
            block_on(async {
                let _ = leader.await;
                let _ = writer.await;
            });
            assert_eq!(*lock(&tier), Some(99), "the newer write wins");
            assert_eq!(table.len(), 0);
        },
        ITERATIONS,
    );
}

/// A silence reset racing two leaders claimed before it: whichever comes
/// first, the tier ends up without what was read from the store and with
/// what was filled without it.
#[test]
fn a_store_word_reset_racing_retirements_keeps_only_the_fill_made_without_the_store() {
    shuttle::check_random(
        || {
            let table = Arc::new(FlightTable::<u32>::new());
            // The tier: (key, filled without the store).
            let tier: Arc<Mutex<Vec<(&str, bool)>>> = Arc::new(Mutex::new(Vec::new()));
            let lead = |key| match table.claim(key, TypeId::of::<()>(), || None) {
                Claim::Lead(leadership) => leadership,
                _ => panic!("first claim leads"),
            };
            let (mut read, mut filled) = (lead("read"), lead("filled"));
            let reset = {
                let (table, tier) = (Arc::clone(&table), Arc::clone(&tier));
                spawn(async move {
                    table.reset(Reset::StoreWord, || {
                        lock(&tier).retain(|(_, unverified)| *unverified);
                    });
                })
            };
            let retire = {
                let tier = Arc::clone(&tier);
                spawn(async move {
                    read.retire(|| lock(&tier).push(("read", false)));
                    yield_now().await;
                    filled.retire_unverified(|| lock(&tier).push(("filled", true)));
                })
            };
            block_on(async {
                reset.await.expect("reset");
                retire.await.expect("retire");
            });
            assert_eq!(*lock(&tier), [("filled", true)]);
            assert_eq!(table.len(), 0);
        },
        ITERATIONS,
    );
}

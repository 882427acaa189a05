//! The thin layer of synchronisation primitives used by the flight protocol.
//!
//! Under `--cfg shuttle` these are shuttle's instrumented versions, so the
//! model tests in `tests/flight_model.rs` explore the interleavings of the
//! protocol; in every other build they are `std`'s.

#[cfg(shuttle)]
pub(crate) use shuttle::sync::{Mutex, MutexGuard};
#[cfg(not(shuttle))]
pub(crate) use std::sync::{Mutex, MutexGuard};

/// Locks `mutex`, ignoring poisoning: every critical section in corral leaves
/// its data consistent before any call that could panic.
#[inline]
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

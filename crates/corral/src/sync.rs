//! The thin layer of synchronisation primitives used by the flight protocol.
//!
//! Under `--cfg shuttle` these are shuttle's instrumented versions, so the
//! model tests in `tests/flight_model.rs` explore the interleavings of the
//! protocol; in every other build they are `std`'s. The sharded
//! read-write locks of the hit path's map and of the tag table are
//! crossbeam's in every build.

use std::sync::PoisonError;

use crossbeam_utils::sync::{ShardedLock, ShardedLockReadGuard, ShardedLockWriteGuard};
#[cfg(shuttle)]
pub(crate) use shuttle::sync::{Mutex, MutexGuard};
#[cfg(not(shuttle))]
pub(crate) use std::sync::Mutex;

/// Read-locks `lock` (the calling thread's slice of it), ignoring
/// poisoning: its users (the bounded map's shards, the tag table) leave
/// the guarded state consistent before any call that could panic.
#[inline]
pub(crate) fn read<T>(lock: &ShardedLock<T>) -> ShardedLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

/// Write-locks `lock` (every slice), ignoring poisoning as [`read`] does.
pub(crate) fn write<T>(lock: &ShardedLock<T>) -> ShardedLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

/// Locks `mutex`, ignoring poisoning: every critical section in corral leaves
/// its data consistent before any call that could panic.
#[cfg(shuttle)]
#[inline]
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// [`lock`] of a `std` mutex in every build, for state the shuttle model
/// does not explore (the stores', the throttles').
#[inline]
pub(crate) fn lock_std<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Locks `mutex`, ignoring poisoning: every critical section in corral leaves
/// its data consistent before any call that could panic.
#[cfg(not(shuttle))]
pub(crate) use self::lock_std as lock;

/// Waits, at most `bound`, until `waiting` says no more, re-asking it
/// each time `settled` is notified. The notification is armed before each
/// question, so a change made (and notified) after it is never missed.
pub(crate) async fn until_settled(
    settled: &tokio::sync::Notify,
    bound: std::time::Duration,
    waiting: impl Fn() -> bool,
) {
    let settle = async {
        loop {
            let notified = settled.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if !waiting() {
                return;
            }
            notified.await;
        }
    };
    let _ = tokio::time::timeout(bound, settle).await;
}

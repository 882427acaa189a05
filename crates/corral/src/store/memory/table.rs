//! The store's keys, bounded: each key's [`Slot`], a recency order per
//! [`Class`] and an index of the slots' next expiries, so that making room
//! never scans the keys.
//!
//! When a call leaves more than `max` keys, keys go one at a time until
//! `max` remain (a call adds at most one key, so usually one goes):
//! 1. a key whose next expiry has passed (found in the expiry index) is
//!    expired: emptied, it is dropped; otherwise it is re-filed under its
//!    new class and next expiry, and the next one is looked at;
//! 2. with none left, the least recently used key of class
//!    [`Value`](Class::Value) is dropped — or, when every key holds a fill
//!    in flight, the least recently used [`Fill`](Class::Fill) key. The
//!    key of the call that made room is never its own victim.
//!
//! Every step is a hash-map and ordered-map update (`O(log n)`, no scan).
//! Each expiry in the index was filed by one call, so the expired keys a
//! call sweeps were paid for by earlier calls.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use tokio::time::Instant;

use super::slot::{Class, Slot};
use crate::store::StoreKey;

/// A key's slot and where it is filed.
#[derive(Debug)]
struct Entry {
    slot: Slot,
    /// The class it is filed under in `recency`.
    class: Class,
    /// When it was last used: its key in its class's recency order.
    used: u64,
    /// Its next expiry as filed in `expiries`.
    expiry: Option<Instant>,
    /// Its unique number, which orders equal expiries in `expiries`.
    id: u64,
}

/// Bounded slots with a recency order per class and an expiry index. Each
/// key is held once and shared by its filings, which keeps the ordered
/// maps' nodes small (allocated and freed as keys are used, they stay in
/// the allocator's fast path).
#[derive(Debug)]
pub(super) struct Table {
    slots: HashMap<Arc<StoreKey>, Entry>,
    /// Per [`Class`] (its index), the keys from least to most recently used.
    recency: [BTreeMap<u64, Arc<StoreKey>>; 2],
    /// Every slot's next expiry, earliest first.
    expiries: BTreeMap<(Instant, u64), Arc<StoreKey>>,
    /// The next use or id stamp.
    stamp: u64,
    max: usize,
}

impl Table {
    /// A table of at most `max` keys (at least 1).
    pub(super) fn new(max: usize) -> Self {
        Self {
            slots: HashMap::new(),
            recency: [BTreeMap::new(), BTreeMap::new()],
            expiries: BTreeMap::new(),
            stamp: 0,
            max: max.max(1),
        }
    }

    /// Keys holding a value, lease or fence (expired parts included until
    /// a call or an eviction looks at them).
    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }

    /// The most keys it holds.
    pub(super) fn max(&self) -> usize {
        self.max
    }

    #[cfg(feature = "test-hooks")]
    pub(super) fn clear(&mut self) {
        self.slots.clear();
        self.recency.iter_mut().for_each(BTreeMap::clear);
        self.expiries.clear();
    }

    fn next_stamp(&mut self) -> u64 {
        self.stamp += 1;
        self.stamp
    }

    /// Runs `op` on the slot of `key`, its expired parts dropped first (an
    /// absent key: an empty slot), as a use of the key; then drops the slot
    /// if it became empty, or files it anew and makes room if the table
    /// went over its bound.
    pub(super) fn with<R>(
        &mut self,
        key: &StoreKey,
        now: Instant,
        op: impl FnOnce(&mut Slot) -> R,
    ) -> R {
        let used = self.next_stamp();
        let Some(entry) = self.slots.get_mut(key) else {
            let mut slot = Slot::default();
            let result = op(&mut slot);
            if !slot.is_empty() {
                let shared = Arc::new(key.clone());
                let entry = Entry {
                    class: slot.class(),
                    expiry: slot.next_expiry(),
                    slot,
                    used,
                    id: used,
                };
                self.recency[entry.class as usize].insert(used, Arc::clone(&shared));
                if let Some(at) = entry.expiry {
                    self.expiries.insert((at, entry.id), Arc::clone(&shared));
                }
                self.slots.insert(shared, entry);
                if self.slots.len() > self.max {
                    self.make_room(key, now);
                }
            }
            return result;
        };
        entry.slot.expire(now);
        let result = op(&mut entry.slot);
        if entry.slot.is_empty() {
            self.remove(key);
        } else {
            let (class, old) = (entry.slot.class(), entry.used);
            let filed = self.recency[entry.class as usize].remove(&old);
            let filed = filed.unwrap_or_else(|| Arc::new(key.clone()));
            let shared = Arc::clone(&filed);
            self.recency[class as usize].insert(used, filed);
            entry.class = class;
            entry.used = used;
            refile_expiry(&mut self.expiries, &shared, entry);
        }
        result
    }

    /// Drops `key`'s slot and its filings.
    fn remove(&mut self, key: &StoreKey) {
        if let Some(entry) = self.slots.remove(key) {
            self.recency[entry.class as usize].remove(&entry.used);
            if let Some(at) = entry.expiry {
                self.expiries.remove(&(at, entry.id));
            }
        }
    }

    /// Drops keys until at most `max` remain (see the module docs), never
    /// `keep`.
    fn make_room(&mut self, keep: &StoreKey, now: Instant) {
        while self.slots.len() > self.max {
            if let Some(entry) = self.expiries.first_entry() {
                if entry.key().0 <= now {
                    let key = entry.remove();
                    self.expire(&key, now);
                    continue;
                }
            }
            let victim = self
                .recency
                .iter()
                .find_map(|order| order.values().find(|key| ***key != *keep))
                .cloned();
            let Some(victim) = victim else {
                return;
            };
            self.remove(&victim);
        }
    }

    /// Expires `key`'s slot, whose filed expiry was just taken out of the
    /// index: drops it if emptied, or files its new class and next expiry
    /// (its recency stays).
    fn expire(&mut self, key: &Arc<StoreKey>, now: Instant) {
        let Some(entry) = self.slots.get_mut(&**key) else {
            return;
        };
        entry.expiry = None;
        entry.slot.expire(now);
        if entry.slot.is_empty() {
            self.remove(key);
            return;
        }
        let class = entry.slot.class();
        if class != entry.class {
            if let Some(filed) = self.recency[entry.class as usize].remove(&entry.used) {
                self.recency[class as usize].insert(entry.used, filed);
            }
            entry.class = class;
        }
        refile_expiry(&mut self.expiries, key, entry);
    }
}

/// Files `entry`'s next expiry in `expiries` if it changed.
fn refile_expiry(
    expiries: &mut BTreeMap<(Instant, u64), Arc<StoreKey>>,
    key: &Arc<StoreKey>,
    entry: &mut Entry,
) {
    let next = entry.slot.next_expiry();
    if next == entry.expiry {
        return;
    }
    let filed = entry.expiry.and_then(|at| expiries.remove(&(at, entry.id)));
    if let Some(at) = next {
        expiries.insert((at, entry.id), filed.unwrap_or_else(|| Arc::clone(key)));
    }
    entry.expiry = next;
}

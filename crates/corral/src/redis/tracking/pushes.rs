//! The tracked connection's invalidation pushes, handed to the caches'
//! sinks by redis-rs's reader as it reads them: before the reader hands on
//! any reply that follows them on the connection, so a call answered after
//! an invalidation was sent never finds it unheard.
//!
//! An invalidation names keys: a value key's change evicts that key from
//! the L1s (and forgets its remembered expiry); a tag or clear version's
//! change makes the caches forget the version and evict what it guards;
//! leases and waiters marks, and keys corral does not write, are ignored. A null
//! invalidation (`FLUSHALL`, `FLUSHDB`) flushes every sink, and so does
//! the end of a tracked connection (redis-rs's disconnection push), at
//! once, before the store has made a new one.

use std::sync::Arc;

use ::redis::{PushInfo, PushKind, Value};

use super::{Shared, Tracker};
use crate::redis::keys::{self, Named, ValueName};
use crate::store::{Event, FlushReason, StoreKey};

/// The store was dropped: its connections' pushes go nowhere.
#[derive(Debug)]
pub(in crate::redis) struct Dropped;

impl Tracker {
    /// What receives the pushes of the store's tracked connections.
    pub(in crate::redis) fn push_sender(
        &self,
    ) -> impl Fn(PushInfo) -> Result<(), Dropped> + Send + Sync + 'static {
        let weak = Arc::downgrade(&self.shared);
        move |push| {
            let shared = weak.upgrade().ok_or(Dropped)?;
            Tracker { shared }.on_push(push);
            Ok(())
        }
    }

    fn on_push(&self, push: PushInfo) {
        match push.kind {
            PushKind::Invalidate => {}
            // Tracking ends with the connection: what changes from now on
            // goes unreported, so nothing kept may be served any longer.
            PushKind::Disconnection if self.is_on() => {
                self.flush(FlushReason::Reconnected);
                return;
            }
            _ => return,
        }
        match push.data.first() {
            Some(Value::Array(names)) => {
                for name in names {
                    if let Value::BulkString(name) = name {
                        self.invalidate(name);
                    }
                }
            }
            Some(Value::Nil) => self.flush(FlushReason::ServerFlush),
            _ => {}
        }
    }

    /// Hands the change of the key named `name` to the sinks of its
    /// namespace.
    fn invalidate(&self, name: &[u8]) {
        let shared: &Shared = &self.shared;
        let (namespace, event) = match keys::named(name) {
            Some(Named::Value { namespace, key }) => {
                let id = ValueName::new(&StoreKey::of(namespace, key)).id();
                shared.expiries.forget(id);
                (namespace, Event::Removed(key.into()))
            }
            Some(Named::Version { namespace, tag: "" }) => (namespace, Event::Cleared),
            Some(Named::Version { namespace, tag }) => {
                (namespace, Event::TagInvalidated(tag.into()))
            }
            Some(Named::Guard) | None => return,
        };
        for sink in shared.sinks.live(&keys::channel(namespace)) {
            sink.invalidated(&event);
        }
    }
}

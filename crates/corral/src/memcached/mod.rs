//! The Memcached store: fill leases by `add`, fences by `cas`, waiters that
//! poll with backoff; several servers by rendezvous hashing.
//!
//! # Client
//!
//! A small client of memcached's meta text protocol (`mg`, `ms`, `md`,
//! `mn`; memcached 1.6 or newer) over `tokio::net::TcpStream`, with a
//! bounded pool of connections per server (`conn`). The async crates on
//! crates.io were looked at first: `memcache-async` (0.10) speaks the
//! ASCII protocol (`gets`/`cas`, and a meta set with a few flags) on one
//! stream, without pooling or several servers, and neither its
//! documentation nor `async-memcached`'s shows a meta get returning the
//! remaining time to live (`t`) beside a `cas`-guarded meta set, which this
//! store needs in one round trip each. The five commands used here are a
//! few hundred lines to speak directly.
//!
//! How leases, fences and time work here is documented on
//! [`MemcachedStore`], for its users.

mod config;
mod conn;
mod connect;
mod frame;
mod keys;
mod lease;
mod ring;
mod store;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use conn::Server;
use keys::Items;
use ring::Ring;

pub use self::config::MemcachedConfig;
#[cfg(doc)]
use crate::store::Store;
use crate::store::{new_version, Notifier, StoreKey};
use crate::sync::lock_std;

/// Memcached's longest relative TTL; longer numbers are unix times.
const MAX_TTL_SECS: u64 = 30 * 24 * 3600;

#[doc = include_str!("store.md")]
#[derive(Clone)]
pub struct MemcachedStore {
    inner: Arc<Inner>,
}

struct Inner {
    servers: Vec<Server>,
    ring: Ring,
    config: MemcachedConfig,
    notifier: Notifier,
    rng: Mutex<fastrand::Rng>,
    /// Polls so far per held key (the backoff's exponent).
    waits: Mutex<HashMap<Arc<str>, u32>>,
}

impl std::fmt::Debug for MemcachedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let addrs: Vec<&str> = self.inner.servers.iter().map(Server::addr).collect();
        f.debug_struct("MemcachedStore")
            .field("servers", &addrs)
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// Whole seconds for memcached: `ceil(d) + 1`, at most 30 days.
fn secs(d: Duration) -> u64 {
    let whole = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    (whole + 1).min(MAX_TTL_SECS)
}
impl MemcachedStore {
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    /// The name of `key`'s slot item (value, fence, generation): for tests
    /// that plant foreign bytes.
    pub fn slot_item(&self, key: &StoreKey) -> String {
        self.items(key).slot
    }

    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    /// The name of `key`'s lease item.
    pub fn lease_item(&self, key: &StoreKey) -> String {
        self.items(key).lease
    }

    fn items(&self, key: &StoreKey) -> Items {
        keys::items(&self.inner.config.key_prefix, key)
    }

    fn id(key: &StoreKey) -> Arc<str> {
        format!("{}\u{0}{}", key.namespace(), key.key()).into()
    }

    fn token(&self) -> Arc<str> {
        crate::store::new_token(&mut lock_std(&self.inner.rng)).into()
    }

    fn new_version(&self) -> Arc<str> {
        new_version(&mut lock_std(&self.inner.rng))
    }
}

#[cfg(test)]
mod tests {
    use super::secs;
    use std::time::Duration;

    #[test]
    fn ttls_round_up_to_whole_seconds_plus_one() {
        assert_eq!(secs(Duration::ZERO), 1);
        assert_eq!(secs(Duration::from_millis(1)), 2);
        assert_eq!(secs(Duration::from_secs(1)), 2);
        assert_eq!(secs(Duration::from_millis(1500)), 3);
        assert_eq!(secs(Duration::from_secs(365 * 24 * 3600)), 30 * 24 * 3600);
    }
}

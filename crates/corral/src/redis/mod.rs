//! The Redis store, [`RedisStore`]: standalone Redis, Redis Cluster or a
//! master under Redis Sentinel, through redis-rs and tokio. Key layout,
//! notifications, fences and what it needs from Redis are documented on
//! [`RedisStore`] (`store.md`; this module is private).
//!
//! | file or folder | holds |
//! |---|---|
//! | `config.rs` | [`RedisConfig`] |
//! | `connect.rs` | the constructors: the store assembled around its connection and subscriber |
//! | `store.rs` | `impl Store`: leases, commits, writes, tags, one round trip each |
//! | `grant.rs` | the lease of a key a plain read found absent, in plain commands |
//! | `read/` | the read path: batched reads (`batch/`), their own connections (`lanes.rs`, `resp.rs`), the expiries remembered (`expiries.rs`) and the keys recalled (`recall.rs`) |
//! | `conn/` | the command connection: one server (`standalone.rs`, found through Sentinel in `sentinel.rs`) or a cluster (`cluster.rs`); clients from URLs and TLS (`client.rs`) |
//! | `subscriber/` | the pub/sub connection: wake-ups and backplane messages |
//! | `tracking/` | client tracking: turned on for each command connection, its invalidations handed to the caches, the flushes, the fallback |
//! | `keys.rs`, `frame.rs`, `scripts.rs`, `errors.rs` | key names, the value frame, the Lua scripts, errors |

mod clock;
mod config;
mod conn;
mod connect;
mod errors;
mod frame;
mod grant;
mod keys;
pub(crate) mod read;
mod scripts;
mod store;
mod subscriber;
mod tracking;

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use self::config::RedisConfig;
use self::conn::Connection;
use self::keys::KeyNames;
use self::read::absences::Absences;
use self::read::batch::Reads;
use self::read::expiries::Expiries;
use self::subscriber::Subscriber;
use self::tracking::Tracker;
#[cfg(doc)]
use crate::data::tracking::Tracking;
#[cfg(doc)]
use crate::store::Store;
use crate::store::StoreKey;

/// The longest TTL sent to Redis, in milliseconds (about 139 years); longer
/// ones are capped.
const MAX_TTL_MS: u64 = 1 << 42;

/// The names of the Redis keys of one cache key
/// ([`RedisStore::keys_of`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisKeys {
    /// The key holding the value: `corral:v:<namespace>:{<bucket>}:<key>`.
    pub value: String,
    /// The key holding the fill lease, which is also its fence (its token
    /// and hold: `<token>.<hold_ms>`):
    /// `corral:g:<namespace>:{<bucket>}:<key>`.
    pub lease: String,
    /// The key marking that a caller in another process waits for the
    /// lease's fill: `corral:w:<namespace>:{<bucket>}:<key>`.
    pub waiters: String,
}
#[doc = include_str!("store.md")]
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    target: String,
    connection: Connection,
    /// Reads of value keys, batched while one is in flight.
    reads: Reads,
    config: RedisConfig,
    rng: Mutex<fastrand::Rng>,
    subscriber: Subscriber,
    /// The expiries of the values read (shared with `tracker`, which
    /// forgets a changed key's).
    expiries: Arc<Expiries>,
    /// The keys plain reads lately found absent: their lease requests go
    /// in plain commands.
    absences: Absences,
    /// Client tracking of the reads.
    tracker: Tracker,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("target", &self.inner.target)
            .field("connection", &self.inner.connection)
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// The settings this store runs with.
    pub fn config(&self) -> &RedisConfig {
        &self.inner.config
    }

    /// The names of the Redis keys that hold `key`'s value, fill lease and
    /// waiters mark (see "Key layout"), to inspect them with `redis-cli`. They
    /// share one hash slot.
    ///
    /// ```
    /// use corral::store::StoreKey;
    /// use corral::RedisStore;
    ///
    /// let names = RedisStore::keys_of(&StoreKey::new("users:v1", "user:42"));
    /// assert!(names.value.starts_with("corral:v:users:v1:{"));
    /// assert!(names.value.ends_with("}:user:42"));
    /// assert!(names.lease.starts_with("corral:g:users:v1:{"));
    /// assert!(names.waiters.starts_with("corral:w:users:v1:{"));
    /// ```
    pub fn keys_of(key: &StoreKey) -> RedisKeys {
        let names = KeyNames::new(key);
        RedisKeys {
            value: names.value,
            lease: names.lease,
            waiters: names.waiters,
        }
    }
}

/// The key encoding and value framing on arbitrary input, for
/// [`crate::fuzzing::keys`].
#[cfg(feature = "test-hooks")]
pub(crate) fn fuzz_keys(namespace: &str, key: &str, bytes: &[u8]) {
    let store_key = StoreKey::new(namespace, key);
    let names = keys::KeyNames::new(&store_key);
    let slot = keys::slot(&names.value);
    assert_eq!(keys::slot(&names.lease), slot, "lease in another slot");
    assert_eq!(keys::slot(&names.waiters), slot, "waiters in another slot");
    assert!(
        names.value != names.lease && names.lease != names.waiters && names.value != names.waiters
    );
    assert_eq!(keys::value_name(&store_key), names.value);
    let _ = keys::namespace_of(&keys::channel(namespace));
    let _ = keys::tag_key(namespace, key);
    if !namespace.contains('{') {
        // A BCAST prefix holds the namespace's values, not its guards.
        let [values, _] = keys::bcast_prefixes(namespace);
        assert!(names.value.starts_with(&values), "value outside its prefix");
        assert!(!names.lease.starts_with(&values) && !names.waiters.starts_with(&values));
    }
    let (body, generation) = frame::unframe(bytes.to_vec());
    if let Some(generation) = generation {
        let reframed = frame::frame(&generation, &body);
        let (again, token) = frame::unframe(reframed);
        assert_eq!(again, body, "a value changed on re-framing");
        assert_eq!(
            token.as_deref(),
            Some(&*generation),
            "a generation changed on re-framing"
        );
    }
}

/// Milliseconds for `PX`/`PEXPIRE`: at least 1, at most [`MAX_TTL_MS`].
fn millis(duration: Duration) -> String {
    let mut text = String::with_capacity(20);
    crate::data::key::push_decimal(&mut text, ms(duration));
    text
}

/// `duration` in whole milliseconds as sent to Redis: at least 1, at most
/// [`MAX_TTL_MS`].
fn ms(duration: Duration) -> u64 {
    let ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    ms.clamp(1, MAX_TTL_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millis_is_clamped() {
        assert_eq!(millis(Duration::ZERO), "1");
        assert_eq!(millis(Duration::from_micros(1500)), "1");
        assert_eq!(millis(Duration::from_secs(2)), "2000");
        assert_eq!(millis(Duration::MAX), MAX_TTL_MS.to_string());
    }
}

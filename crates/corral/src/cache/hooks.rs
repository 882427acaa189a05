//! Measurement support (feature `test-hooks`; hidden, not a stable API):
//! a cache's envelope written and read without a store, so the cost of
//! encoding, compressing and sealing is measured alone.

use std::time::Duration;

use crate::cache::Cache;
use crate::data::entry::Ttls;
use crate::data::tags::Stamps;

impl<V> Cache<V>
where
    V: Clone + Send + Sync + 'static,
{
    /// The bytes this cache writes to its store for `value` under `key`
    /// with `ttl`: its envelope, compressed and sealed as the cache is
    /// built to (counted in its stats as a write would be).
    #[doc(hidden)]
    pub fn encode_for_store(&self, key: &str, value: &V, ttl: Duration) -> Result<Vec<u8>, String> {
        let ttls = Ttls::simple(ttl);
        self.inner
            .encode(key, Some(value), ttls, 0, &Stamps::default())
    }

    /// The value in `bytes` read from this cache's store for `key`
    /// (`None`: they do not open, unpack or decode; not counted).
    #[doc(hidden)]
    pub fn decode_from_store(&self, key: &str, bytes: &[u8]) -> Option<V> {
        self.inner.decode(key, bytes, false)?.value
    }
}

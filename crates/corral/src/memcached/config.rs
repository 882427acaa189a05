//! [`MemcachedConfig`]: the timeouts, pool size, polling and item limits
//! of a [`MemcachedStore`](super::MemcachedStore).

use std::time::Duration;

/// Settings of a [`MemcachedStore`](super::MemcachedStore).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemcachedConfig {
    /// The longest any call may take (acquiring a connection, connecting
    /// and all of its round trips) before it fails with a timeout.
    /// Default: 1 s.
    pub op_timeout: Duration,
    /// Connections per server at most. Default: 16.
    pub max_connections: usize,
    /// The first wait of a waiter polling for a held lease. Default: 10 ms.
    pub poll_start: Duration,
    /// The longest wait between two polls (the backoff doubles up to it).
    /// Default: 500 ms. The cache's `poll_interval` bounds it too.
    pub poll_cap: Duration,
    /// The largest item the servers accept (memcached's `-I`). Default:
    /// 1 MiB.
    pub max_item_bytes: usize,
    /// Prepended to every item key: printable ASCII without `#`, at most
    /// 64 bytes. Default: `corral:`.
    pub key_prefix: String,
}

impl Default for MemcachedConfig {
    fn default() -> Self {
        Self {
            op_timeout: Duration::from_secs(1),
            max_connections: 16,
            poll_start: Duration::from_millis(10),
            poll_cap: Duration::from_millis(500),
            max_item_bytes: 1024 * 1024,
            key_prefix: "corral:".into(),
        }
    }
}

//! The constructor of [`MemcachedStore`] and how it reaches its servers:
//! the server of a key on the ring, and one round trip to it bounded by
//! the operation timeout.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::conn::{protocol, Reply, Server};
use super::ring::Ring;
use super::{keys, Inner, MemcachedConfig, MemcachedStore};
use crate::data::error::{StoreError, StoreErrorKind};
use crate::store::{Notifier, Store};

impl MemcachedStore {
    /// A store over the servers at `addrs` (`host:port` each), checking
    /// that each answers.
    ///
    /// # Errors
    ///
    /// No address, a bad `key_prefix`, or a server that does not answer
    /// within `op_timeout`.
    pub async fn connect<S: AsRef<str>>(
        addrs: &[S],
        config: MemcachedConfig,
    ) -> Result<Self, StoreError> {
        if addrs.is_empty() {
            return Err(StoreError::new(
                StoreErrorKind::Configuration,
                "memcached: no server address",
            ));
        }
        if !keys::valid_prefix(&config.key_prefix) {
            return Err(StoreError::new(
                StoreErrorKind::Configuration,
                "memcached: key_prefix must be printable ASCII without '#', at most 64 bytes",
            ));
        }
        let servers = addrs
            .iter()
            .map(|a| {
                Server::new(
                    a.as_ref().to_owned(),
                    config.max_connections,
                    config.max_item_bytes,
                )
            })
            .collect();
        let store = Self {
            inner: Arc::new(Inner {
                servers,
                ring: Ring::new(addrs.iter().map(AsRef::as_ref)),
                config,
                notifier: Notifier::new(),
                rng: Mutex::new(crate::rng::seeded()),
                waits: Mutex::new(HashMap::new()),
            }),
        };
        store.ping().await?;
        Ok(store)
    }
    /// The server of `route` on the ring.
    pub(super) fn server(&self, route: u64) -> &Server {
        self.server_at(self.inner.ring.pick(route))
    }

    /// Sends `requests` to `server` in one round trip, bounded by the
    /// operation timeout.
    pub(super) async fn call(
        &self,
        server: &Server,
        requests: &[Vec<u8>],
    ) -> Result<Vec<Reply>, StoreError> {
        let timeout = self.inner.config.op_timeout;
        match tokio::time::timeout(timeout, server.call(requests)).await {
            Ok(replies) => replies,
            Err(_) => Err(StoreError::new(
                StoreErrorKind::Timeout,
                format!("memcached {}: no answer within {timeout:?}", server.addr()),
            )),
        }
    }

    pub(super) async fn one(&self, server: &Server, request: Vec<u8>) -> Result<Reply, StoreError> {
        let mut replies = self.call(server, &[request]).await?;
        replies
            .pop()
            .ok_or_else(|| protocol(server.addr(), "no reply"))
    }
    /// The server at `index` in the order given (past the end: the last).
    pub(super) fn server_at(&self, index: usize) -> &Server {
        let servers = &self.inner.servers;
        &servers[index.min(servers.len() - 1)]
    }
}

//! `impl Store for MemcachedStore`, and the waiters' polling: each key's
//! polls so far set the delay of its next re-check.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use super::conn::{answered, md, mg, mn, ms, protocol, Server, Status};
use super::frame::Slot;
use super::lease::{cas_or_add, Found, MAX_RACES};
use super::{keys, secs, MemcachedStore};
use crate::backoff::doubled;
use crate::data::error::StoreError;
use crate::store::{
    is_version, BoxFuture, Commit, Lease, LeaseRequest, Listener, Lookup, Origin, Store, StoreKey,
    Stored,
};
use crate::sync::lock_std;

/// The most keys whose backoff is remembered.
const MAX_WAITS: usize = 4096;

impl MemcachedStore {
    pub(super) fn waited(&self, id: &Arc<str>, held: bool) {
        let mut waits = lock_std(&self.inner.waits);
        if held {
            if waits.len() >= MAX_WAITS && !waits.contains_key(id) {
                waits.clear();
            }
            *waits.entry(Arc::clone(id)).or_insert(0) += 1;
        } else {
            waits.remove(id);
        }
    }

    pub(super) fn backoff(&self, id: &str) -> Duration {
        let config = &self.inner.config;
        let waits = lock_std(&self.inner.waits);
        let n = waits
            .get(id)
            .copied()
            .unwrap_or(0)
            .saturating_sub(1)
            .min(20);
        doubled(config.poll_start, n, config.poll_cap.max(config.poll_start))
    }
    /// The version of `tag` as `server`'s copy holds it: read, or created
    /// by add when absent (by cas over an item that is not a version), so
    /// concurrent callers agree on one; kept for `retention` from now
    /// either way. Usually one round trip, two on first use.
    pub(super) async fn tag_version(
        &self,
        namespace: &str,
        server: &Server,
        tag: &str,
        retention: Duration,
    ) -> Result<Arc<str>, StoreError> {
        let item = keys::tag(&self.inner.config.key_prefix, namespace, tag);
        let keep = format!("T{}", secs(retention));
        for _ in 0..MAX_RACES {
            // Read with the retention as the new TTL: a tag in use keeps
            // its version.
            let reply = self.one(server, mg(&item, &format!("v c {keep}"))).await?;
            let cas = reply.cas();
            let replace = match (reply.status, reply.data, cas) {
                (Status::Value, Some(data), _) if is_version(&data) => {
                    if let Ok(version) = std::str::from_utf8(&data) {
                        return Ok(version.into());
                    }
                    cas
                }
                (Status::Value, _, cas) => cas,
                (Status::Miss, _, _) => None,
                (status, _, _) => return Err(answered(server.addr(), "mg", status)),
            };
            let version = self.new_version();
            let flags = format!("{keep} {}", cas_or_add(replace));
            if self
                .write_item(server, &item, version.as_bytes(), &flags)
                .await?
            {
                return Ok(version);
            }
        }
        Err(protocol(
            server.addr(),
            "tag version kept changing while it was created",
        ))
    }
}

impl Store for MemcachedStore {
    fn get_or_lease<'a>(
        &'a self,
        key: &'a StoreKey,
        request: &'a LeaseRequest,
    ) -> BoxFuture<'a, Result<Lookup, StoreError>> {
        Box::pin(async move {
            let lookup = self.lookup(key, request).await;
            let held = matches!(lookup, Ok(Lookup::Held { .. }));
            self.waited(&Self::id(key), held);
            lookup
        })
    }

    fn get<'a>(&'a self, key: &'a StoreKey) -> BoxFuture<'a, Result<Option<Stored>, StoreError>> {
        Box::pin(async move {
            let items = self.items(key);
            let server = self.server(items.route);
            let found = self.read_slot(server, &items.slot).await?;
            Ok(found.as_ref().and_then(Found::stored))
        })
    }

    fn renew<'a>(
        &'a self,
        key: &'a StoreKey,
        lease: &'a Lease,
        request: &'a LeaseRequest,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let items = self.items(key);
            let server = self.server(items.route);
            let token = lease.token().as_bytes();
            let flags = |cas| format!("T{} C{cas}", secs(request.lease_ttl));
            let extend = |cas| ms(&items.lease, token, &flags(cas));
            if !self
                .if_lease_owned(server, &items.lease, lease.token(), extend)
                .await?
            {
                return Ok(false);
            }
            let fence_secs = secs(request.fence_ttl);
            let refenced = |found: &Found| {
                let (slot, ttl) = found.refenced(found.slot.fence.clone(), fence_secs);
                (Cow::Owned(slot), ttl)
            };
            self.write_fenced(server, &items.slot, lease, refenced)
                .await?;
            Ok(true)
        })
    }

    fn commit<'a>(
        &'a self,
        key: &'a StoreKey,
        lease: &'a Lease,
        bytes: &'a [u8],
        ttl: Duration,
        _origin: Origin,
    ) -> BoxFuture<'a, Result<Commit, StoreError>> {
        Box::pin(async move {
            let items = self.items(key);
            let server = self.server(items.route);
            let slot = Slot::written(lease.token().into(), bytes);
            // A commit that fails (too large, a server error) writes
            // nothing and keeps the lease: its cache releases it.
            self.check_size(&items.slot, &slot)?;
            let written = |_: &Found| (Cow::Borrowed(&slot), secs(ttl));
            let commit = self
                .write_fenced(server, &items.slot, lease, written)
                .await?;
            self.drop_lease(server, &items.lease, lease.token()).await?;
            self.inner.notifier.notify(&Self::id(key));
            Ok(commit)
        })
    }

    fn release<'a>(
        &'a self,
        key: &'a StoreKey,
        lease: &'a Lease,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let items = self.items(key);
            let server = self.server(items.route);
            self.drop_lease(server, &items.lease, lease.token()).await?;
            if let Some(found) = self.read_slot(server, &items.slot).await? {
                if found.slot.fence.as_deref() == Some(lease.token())
                    && found.value_left().is_none()
                {
                    self.one(server, md(&items.slot, &format!("C{}", found.cas)))
                        .await?;
                }
            }
            self.inner.notifier.notify(&Self::id(key));
            Ok(())
        })
    }

    fn set<'a>(
        &'a self,
        key: &'a StoreKey,
        bytes: &'a [u8],
        ttl: Duration,
        _origin: Origin,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let items = self.items(key);
            let server = self.server(items.route);
            let slot = Slot::written(self.token(), bytes);
            self.check_size(&items.slot, &slot)?;
            let flags = format!("T{}", secs(ttl));
            let requests = [
                ms(&items.slot, &slot.encode(), &flags),
                md(&items.lease, ""),
            ];
            let replies = self.call(server, &requests).await?;
            if replies.first().map(|r| r.status) != Some(Status::Done) {
                return Err(protocol(server.addr(), "set was not stored"));
            }
            self.inner.notifier.notify(&Self::id(key));
            Ok(())
        })
    }

    fn invalidate<'a>(
        &'a self,
        key: &'a StoreKey,
        _origin: Origin,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let items = self.items(key);
            let server = self.server(items.route);
            self.call(server, &[md(&items.slot, ""), md(&items.lease, "")])
                .await?;
            self.inner.notifier.notify(&Self::id(key));
            Ok(())
        })
    }

    /// The server of `key`'s items: its copies of the versions guard the
    /// entries it holds.
    fn version_home(&self, key: &StoreKey) -> u32 {
        let index = self.inner.ring.pick(keys::route(key));
        u32::try_from(index).unwrap_or(0)
    }

    fn tag_versions<'a>(
        &'a self,
        namespace: &'a str,
        home: u32,
        tags: &'a [Arc<str>],
        retention: Duration,
        _origin: Origin,
    ) -> BoxFuture<'a, Result<Vec<Arc<str>>, StoreError>> {
        Box::pin(async move {
            let server = self.server_at(usize::try_from(home).unwrap_or(usize::MAX));
            let reads = tags
                .iter()
                .map(|tag| self.tag_version(namespace, server, tag, retention));
            futures_util::future::join_all(reads)
                .await
                .into_iter()
                .collect()
        })
    }

    fn invalidate_tag<'a>(
        &'a self,
        namespace: &'a str,
        tag: &'a str,
        retention: Duration,
        _origin: Origin,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            // Every server's copy, one request each, all sent at once.
            let item = keys::tag(&self.inner.config.key_prefix, namespace, tag);
            let version = self.new_version();
            let flags = format!("T{}", secs(retention));
            let request = ms(&item, version.as_bytes(), &flags);
            let moves = self.inner.servers.iter().map(|server| {
                let request = request.clone();
                async move {
                    let reply = self.one(server, request).await?;
                    if reply.status != Status::Done {
                        return Err(protocol(server.addr(), "tag version was not stored"));
                    }
                    Ok(())
                }
            });
            futures_util::future::join_all(moves)
                .await
                .into_iter()
                .collect()
        })
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let pings = self.inner.servers.iter().map(|s| self.one(s, mn()));
            for reply in futures_util::future::join_all(pings).await {
                reply?;
            }
            Ok(())
        })
    }

    fn call_bound(&self) -> Option<Duration> {
        Some(self.inner.config.op_timeout)
    }

    fn listen(&self, key: &StoreKey) -> Listener {
        let id = Self::id(key);
        let delay = self.backoff(&id);
        self.inner.notifier.listen(id).recheck_after(delay)
    }
}

//! Leases and fences on a key's slot item: what a slot read found, writes
//! by compare-and-swap, the lease request (`add` of the lease item, then
//! the fence in the slot) and the fenced commit.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use super::conn::{answered, md, mg, ms, protocol, Server, Status};
use super::frame::Slot;
use super::{secs, MemcachedStore};
use crate::data::error::{StoreError, StoreErrorKind};
use crate::store::{Commit, Grant, Lease, LeaseRequest, Lookup, StoreKey, Stored};

/// Bytes an item needs besides its key and data (memcached's header, with
/// room to spare).
const ITEM_OVERHEAD: usize = 96;
/// How often one call retries after losing a compare-and-swap race.
pub(super) const MAX_RACES: usize = 16;

/// What a slot read found.
pub(super) struct Found {
    pub(super) slot: Slot,
    pub(super) cas: u64,
    /// The item's remaining seconds (`-1`: no expiry).
    pub(super) ttl: i64,
}

impl Found {
    /// The value's remaining whole seconds by the item's TTL, if it has
    /// a value that is still alive (`None` inside: no expiry).
    pub(super) fn value_left(&self) -> Option<Option<i64>> {
        self.slot.value.as_ref()?;
        if self.ttl < 0 {
            return Some(None);
        }
        let left = self.ttl - i64::from(self.slot.extra);
        (left >= 1).then_some(Some(left))
    }

    pub(super) fn stored(&self) -> Option<Stored> {
        let left = self.value_left()?;
        Some(Stored {
            bytes: self.slot.value.clone().unwrap_or_default(),
            remaining: left.map(|s| Duration::from_secs(s.saturating_sub(1).unsigned_abs())),
            generation: self.slot.generation.clone(),
        })
    }

    /// The slot with `fence`, keeping a live value; with the TTL to write it
    /// for so that it lives at least `fence_ttl` and the value no longer
    /// than before.
    pub(super) fn refenced(&self, fence: Option<Arc<str>>, fence_secs: u64) -> (Slot, u64) {
        match self.value_left() {
            Some(Some(left)) => {
                let left = left.unsigned_abs();
                let ttl = left.max(fence_secs);
                let slot = Slot {
                    fence,
                    generation: self.slot.generation.clone(),
                    extra: u32::try_from(ttl - left).unwrap_or(u32::MAX),
                    value: self.slot.value.clone(),
                };
                (slot, ttl)
            }
            Some(None) => {
                let slot = Slot {
                    fence,
                    extra: 0,
                    ..self.slot.clone()
                };
                (slot, fence_secs)
            }
            None => (
                Slot {
                    fence,
                    ..Slot::default()
                },
                fence_secs,
            ),
        }
    }
}
impl MemcachedStore {
    pub(super) async fn read_slot(
        &self,
        server: &Server,
        item: &str,
    ) -> Result<Option<Found>, StoreError> {
        let reply = self.one(server, mg(item, "v c t")).await?;
        let (cas, ttl) = (reply.cas(), reply.ttl());
        match (reply.status, reply.data, cas) {
            (Status::Value, Some(data), Some(cas)) => Ok(Some(Found {
                cas,
                ttl: ttl.unwrap_or(-1),
                slot: Slot::decode(data),
            })),
            (Status::Miss, _, _) => Ok(None),
            (status, _, _) => Err(answered(server.addr(), "mg", status)),
        }
    }

    /// Writes `slot` for `ttl` seconds: by cas over `cas`, or as a new item
    /// (add) without one. Returns whether it was written.
    pub(super) async fn write_slot(
        &self,
        server: &Server,
        item: &str,
        slot: &Slot,
        ttl: u64,
        cas: Option<u64>,
    ) -> Result<bool, StoreError> {
        let flags = format!("T{ttl} {}", cas_or_add(cas));
        self.write_item(server, item, &slot.encode(), &flags).await
    }

    /// Writes `data` to `item` with `flags` (a cas, or an add); returns
    /// whether it was written.
    pub(super) async fn write_item(
        &self,
        server: &Server,
        item: &str,
        data: &[u8],
        flags: &str,
    ) -> Result<bool, StoreError> {
        match self.one(server, ms(item, data, flags)).await?.status {
            Status::Done => Ok(true),
            Status::NotStored | Status::Exists | Status::NotFound => Ok(false),
            status => Err(answered(server.addr(), "ms", status)),
        }
    }

    /// Sends `request(cas)` if the lease item still holds `token`, by the
    /// item's cas; returns whether the server did it.
    pub(super) async fn if_lease_owned(
        &self,
        server: &Server,
        item: &str,
        token: &str,
        request: impl FnOnce(u64) -> Vec<u8>,
    ) -> Result<bool, StoreError> {
        let reply = self.one(server, mg(item, "v c")).await?;
        match (reply.status, reply.cas()) {
            (Status::Value, Some(cas)) if reply.data.as_deref() == Some(token.as_bytes()) => {
                Ok(self.one(server, request(cas)).await?.status == Status::Done)
            }
            _ => Ok(false),
        }
    }

    /// Deletes the lease item if it still holds `token`.
    pub(super) async fn drop_lease(
        &self,
        server: &Server,
        item: &str,
        token: &str,
    ) -> Result<bool, StoreError> {
        let delete = |cas| md(item, &format!("C{cas}"));
        self.if_lease_owned(server, item, token, delete).await
    }
    /// The lease item found by an `add` that failed: a live lease (with
    /// its remaining time), gone meanwhile, or broken — no expiry, or
    /// contents that are not a lease token (written by something else) —
    /// and then replaced by `token`'s lease by compare-and-swap.
    async fn held_lease(
        &self,
        server: &Server,
        item: &str,
        token: &str,
        request: &LeaseRequest,
    ) -> Result<Held, StoreError> {
        let reply = self.one(server, mg(item, "v t c")).await?;
        let (ttl, cas) = (reply.ttl(), reply.cas());
        let (data, cas) = match (reply.status, reply.data, cas) {
            (Status::Value, Some(data), Some(cas)) => (data, cas),
            (Status::Miss, _, _) => return Ok(Held::Gone),
            (status, _, _) => return Err(answered(server.addr(), "mg", status)),
        };
        let remaining = ttl
            .filter(|t| *t >= 0)
            .map(|t| Duration::from_secs(t.unsigned_abs()));
        if remaining.is_some() && lease_token(&data) {
            return Ok(Held::Live(remaining));
        }
        let flags = format!("T{} C{cas}", secs(request.lease_ttl));
        let reply = self.one(server, ms(item, token.as_bytes(), &flags)).await?;
        Ok(match reply.status {
            Status::Done => Held::TakenOver,
            // Replaced or deleted meanwhile: look again.
            _ => Held::Gone,
        })
    }

    /// Refuses an item too large for the servers.
    pub(super) fn check_size(&self, item: &str, slot: &Slot) -> Result<(), StoreError> {
        let size = item.len() + slot.value.as_ref().map_or(0, Vec::len) + 2 * 64 + 8;
        let limit = self.inner.config.max_item_bytes;
        if size + ITEM_OVERHEAD > limit {
            return Err(StoreError::new(
                StoreErrorKind::Protocol,
                format!(
                    "memcached: an item of about {} bytes exceeds the item size limit of {limit} bytes (MemcachedConfig::max_item_bytes, memcached -I)",
                    size + ITEM_OVERHEAD
                ),
            ));
        }
        Ok(())
    }
    /// Writes the slot `item` as `slot` makes it of the one found (with its
    /// TTL in seconds) while its fence still holds `lease`'s token,
    /// retrying lost compare-and-swap races.
    pub(super) async fn write_fenced<'s>(
        &self,
        server: &Server,
        item: &str,
        lease: &Lease,
        slot: impl Fn(&Found) -> (Cow<'s, Slot>, u64),
    ) -> Result<Commit, StoreError> {
        for _ in 0..MAX_RACES {
            let Some(found) = self.read_slot(server, item).await? else {
                break;
            };
            if found.slot.fence.as_deref() != Some(lease.token()) {
                break;
            }
            let (slot, ttl) = slot(&found);
            if self
                .write_slot(server, item, &slot, ttl, Some(found.cas))
                .await?
            {
                return Ok(Commit::Stored);
            }
        }
        Ok(Commit::Refused)
    }

    pub(super) async fn lookup(
        &self,
        key: &StoreKey,
        request: &LeaseRequest,
    ) -> Result<Lookup, StoreError> {
        let items = self.items(key);
        let server = self.server(items.route);
        let fence_secs = secs(request.fence_ttl);
        let mut found = self.read_slot(server, &items.slot).await?;
        let mut granted: Option<Arc<str>> = None;
        for _ in 0..MAX_RACES {
            if let Some(answer) = judge(found.as_ref(), &request.grant) {
                if let Some(token) = &granted {
                    self.drop_lease(server, &items.lease, token).await?;
                }
                return Ok(answer);
            }
            let token = match &granted {
                Some(token) => Arc::clone(token),
                None => {
                    let token = self.token();
                    let flags = format!("T{} ME", secs(request.lease_ttl));
                    let reply = self
                        .one(server, ms(&items.lease, token.as_bytes(), &flags))
                        .await?;
                    match reply.status {
                        Status::Done => {}
                        Status::NotStored => {
                            match self
                                .held_lease(server, &items.lease, &token, request)
                                .await?
                            {
                                Held::Live(remaining) => return Ok(Lookup::Held { remaining }),
                                Held::Gone => continue,
                                Held::TakenOver => {}
                            }
                        }
                        status => return Err(answered(server.addr(), "ms", status)),
                    }
                    granted = Some(Arc::clone(&token));
                    token
                }
            };
            let (slot, ttl) = match &found {
                Some(found) => found.refenced(Some(Arc::clone(&token)), fence_secs),
                None => (
                    Slot {
                        fence: Some(Arc::clone(&token)),
                        ..Slot::default()
                    },
                    fence_secs,
                ),
            };
            let cas = found.as_ref().map(|f| f.cas);
            if self
                .write_slot(server, &items.slot, &slot, ttl, cas)
                .await?
            {
                return Ok(Lookup::Granted(Lease::new(token)));
            }
            found = self.read_slot(server, &items.slot).await?;
        }
        if let Some(token) = &granted {
            self.drop_lease(server, &items.lease, token).await?;
        }
        Err(protocol(server.addr(), "lost every compare-and-swap race"))
    }
}

/// A lease item that an `add` found in place.
enum Held {
    /// A live lease, with its remaining time.
    Live(Option<Duration>),
    /// Deleted or replaced meanwhile.
    Gone,
    /// Broken, and now this caller's lease.
    TakenOver,
}

/// The mode flag of a write: compare-and-swap over `cas`, or add (only
/// if absent) without one.
pub(super) fn cas_or_add(cas: Option<u64>) -> String {
    cas.map_or_else(|| "ME".to_owned(), |cas| format!("C{cas}"))
}

/// Whether `data` is a lease token as this store writes them: 1 to 64
/// lowercase hex digits.
fn lease_token(data: &[u8]) -> bool {
    (1..=64).contains(&data.len())
        && data
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
}

/// The answer `get_or_lease` gives without a lease, for what the slot holds
/// and the grant asked; `None`: a lease may be granted.
fn judge(found: Option<&Found>, grant: &Grant) -> Option<Lookup> {
    let stored = found.and_then(Found::stored);
    match (grant, stored) {
        (Grant::IfNoValue, Some(stored)) => Some(Lookup::Hit(stored)),
        (Grant::OverGeneration(_), None) => Some(Lookup::Changed),
        (Grant::OverGeneration(expected), Some(stored)) if *expected != stored.generation => {
            Some(Lookup::Changed)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::lease_token;

    #[test]
    fn lease_tokens_are_lowercase_hex_of_1_to_64_digits() {
        assert!(lease_token(b"0123456789abcdef0123456789abcdef"));
        assert!(lease_token(b"a"));
        assert!(lease_token("f".repeat(64).as_bytes()));
        for broken in [
            &b""[..],
            b"junk",
            b"ABCDEF",
            b"12 34",
            &[0xC1, 0x00],
            "a".repeat(65).as_bytes(),
        ] {
            assert!(!lease_token(broken), "{broken:?}");
        }
    }
}

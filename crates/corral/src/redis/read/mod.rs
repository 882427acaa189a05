//! The read path of [`RedisStore`]: one key (a plain `GET` of a write that
//! names its expiry or whose expiry is remembered, else `PTTL` + `GET`,
//! batched with the reads in flight) or many (one pipeline per hash slot),
//! after the namespace's first subscription.

pub(in crate::redis) mod absences;
pub(in crate::redis) mod batch;
pub(in crate::redis) mod expiries;
#[cfg(feature = "test-hooks")]
pub(crate) mod fuzz;
pub(in crate::redis) mod lanes;
mod recall;
mod resp;
mod touches;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ::redis::Value;

use crate::data::error::StoreError;
use crate::redis::clock::ServerClock;
use crate::redis::errors::unexpected;
#[cfg(doc)]
use crate::redis::subscriber::Subscriber;
#[cfg(doc)]
use crate::redis::tracking::Tracker;
use crate::redis::{frame, keys, RedisStore};
use crate::store::{StoreKey, Stored};

/// What a read went ahead of ([`RedisStore::ahead_of_backplane`]): its
/// namespace's first subscription (the channel), its first prefix
/// registration (the namespace).
#[derive(Default)]
pub(in crate::redis) struct Ahead {
    channel: Option<Arc<str>>,
    prefixes: Option<Arc<str>>,
}

impl RedisStore {
    /// Waits (briefly) for the first subscription of `namespace`'s channel
    /// if caches keep values current through it, and for the first
    /// registration of its tracking prefixes (`BCAST`); see
    /// [`Subscriber::ready`] and [`Tracker::ready`].
    #[inline]
    pub(in crate::redis) async fn ahead_of_backplane(&self, namespace: &str) -> Ahead {
        let bound = self.inner.config.op_timeout / 2;
        Ahead {
            channel: self.inner.subscriber.ready(namespace, bound).await,
            prefixes: self.inner.tracker.ready(namespace, bound).await,
        }
    }

    /// Records that a read went ahead of its namespace's first
    /// subscription or prefix registration and succeeded.
    pub(in crate::redis) fn went_ahead<T, E>(&self, ahead: Ahead, result: &Result<T, E>) {
        if result.is_err() {
            return;
        }
        if let Some(channel) = ahead.channel {
            self.inner.subscriber.went_ahead(&channel);
        }
        if let Some(namespace) = ahead.prefixes {
            self.inner.tracker.went_ahead(&namespace);
        }
    }

    /// [`read_value`](Self::read_value), after the namespace's first
    /// subscription.
    pub(in crate::redis) async fn read(
        &self,
        key: &StoreKey,
    ) -> Result<Option<Stored>, StoreError> {
        let ahead = self.ahead_of_backplane(key.namespace()).await;
        let read = self.read_value(key).await;
        self.went_ahead(ahead, &read);
        read
    }

    /// The value of `key`, if present: a plain `GET` where the store reads
    /// the server's clock (a generation may name the expiry) or the
    /// write's expiry is remembered, else (or when the `GET` finds a write
    /// that tells neither) a pipelined `PTTL` + `GET`; batched with the
    /// reads in flight.
    async fn read_value(&self, key: &StoreKey) -> Result<Option<Stored>, StoreError> {
        let name = keys::ValueName::new(key);
        let id = name.id();
        let timeout = self.inner.config.op_timeout;
        let tracked = self.inner.tracker.tracked_reads(key.namespace());
        let expiries = &self.inner.expiries;
        let clock = self.inner.connection.server_clock();
        // With the clock, the remembered expiries are looked up only for a
        // value whose frame does not name its own.
        let known = match clock {
            Some(_) => None,
            None => expiries.get(id),
        };
        if known.is_some() || clock.is_some() {
            let bytes = match self.inner.reads.get(name, timeout, tracked).await? {
                Value::Nil => {
                    expiries.forget(id);
                    self.inner.absences.note(id);
                    return Ok(None);
                }
                Value::BulkString(bytes) => bytes,
                other => return Err(unexpected("get", &other)),
            };
            if let Some(clock) = clock {
                let (bytes, generation) = match self.named(&clock, id, bytes) {
                    Ok(stored) => return Ok(Some(stored)),
                    Err(unnamed) => unnamed,
                };
                let remembered = expiries.get(id);
                if let Some(known) =
                    remembered.filter(|known| generation.as_deref() == Some(known.token()))
                {
                    return Ok(Some(known.stored(bytes)));
                }
            } else if let Some(known) = known {
                if let Ok(bytes) = frame::unframe_as(bytes, known.token()) {
                    return Ok(Some(known.stored(bytes)));
                }
            }
        }
        let asked = Instant::now();
        let (pttl, value) = self.inner.reads.read(name, timeout, tracked).await?;
        match value {
            Value::BulkString(bytes) => {
                let stored = stored(bytes, &pttl);
                expiries.learn_read(id, &stored, asked);
                Ok(Some(stored))
            }
            Value::Nil => {
                self.inner.absences.note(id);
                Ok(None)
            }
            other => Err(unexpected("get", &other)),
        }
    }

    /// The values of `keys`, if present: one pipeline of `PTTL` + `GET`
    /// per hash slot.
    pub(in crate::redis) async fn read_many(
        &self,
        keys: &[StoreKey],
    ) -> Result<Vec<Option<Stored>>, StoreError> {
        // Each key hashed once for its slot, its command and its touch.
        let names: Vec<keys::ValueName<'_>> = keys.iter().map(keys::ValueName::new).collect();
        // One pipeline per group (a cluster routes a pipeline to one
        // node), all sent at once.
        let groups = self
            .inner
            .connection
            .by_slot((0..names.len()).collect(), |&i| names[i].slot());
        let timeout = self.inner.config.op_timeout;
        let tracked = keys
            .first()
            .is_some_and(|key| self.inner.tracker.tracked_reads(key.namespace()));
        let reads = groups.iter().map(|group| {
            let group_names: Vec<keys::ValueName<'_>> = group.iter().map(|&i| names[i]).collect();
            async move {
                self.inner
                    .reads
                    .read_many(&group_names, timeout, tracked)
                    .await
            }
        });
        let replies = futures_util::future::join_all(reads).await;
        let mut found: Vec<Option<Stored>> = vec![None; keys.len()];
        for (group, reply) in groups.iter().zip(replies) {
            for (&index, (pttl, value)) in group.iter().zip(reply?) {
                found[index] = match value {
                    Value::BulkString(bytes) => Some(stored(bytes, &pttl)),
                    Value::Nil => None,
                    other => return Err(unexpected("get", &other)),
                };
            }
        }
        Ok(found)
    }
}

impl RedisStore {
    /// A value read with a plain `GET` outside the read path (the plain
    /// lease request's), if its frame names its expiry on the server's
    /// clock: recalled as a plain read's is. `None` if the store reads no
    /// clock or the value names no expiry (another type's `''`, a write
    /// of an older build): its expiry then takes a `PTTL`.
    pub(in crate::redis) fn named_value(&self, id: u64, bytes: Vec<u8>) -> Option<Stored> {
        let clock = self.inner.connection.server_clock()?;
        self.named(&clock, id, bytes).ok()
    }

    /// `bytes` of key `id` read with a plain `GET`, unframed: the value if
    /// its generation names its expiry on `clock` (recalled until then),
    /// else its envelope and generation.
    #[inline]
    fn named(
        &self,
        clock: &ServerClock,
        id: u64,
        bytes: Vec<u8>,
    ) -> Result<Stored, (Vec<u8>, Option<Arc<str>>)> {
        let (bytes, generation) = frame::unframe(bytes);
        let now = Instant::now();
        let Some(deadline) = named_deadline(clock, generation.as_deref(), now) else {
            return Err((bytes, generation));
        };
        self.inner.expiries.recall(id, deadline);
        Ok(Stored {
            bytes,
            remaining: Some(deadline.saturating_duration_since(now)),
            generation,
        })
    }
}

/// A value read with its `PTTL`: envelope bytes, remaining time and the
/// generation from its frame.
pub(in crate::redis) fn stored(bytes: Vec<u8>, pttl: &Value) -> Stored {
    let (bytes, generation) = frame::unframe(bytes);
    Stored {
        bytes,
        remaining: remaining(pttl),
        generation,
    }
}

/// Where a value read without its `PTTL` expires, if its generation (as
/// [`frame::unframe`] gave it) names its expiry on the server's clock:
/// that expiry as `clock` places it on this process's at `now` (`now`, if
/// it was past at the reading).
fn named_deadline(clock: &ServerClock, generation: Option<&str>, now: Instant) -> Option<Instant> {
    let expiry = frame::named_expiry(generation?)?;
    Some(clock.deadline(expiry, now).unwrap_or(now))
}

/// A `PTTL` reply as a remaining time (`None` for "no expiry" or "absent").
pub(in crate::redis) fn remaining(pttl: &Value) -> Option<Duration> {
    match pttl {
        Value::Int(ms) => u64::try_from(*ms).ok().map(Duration::from_millis),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remaining_reads_pttl() {
        assert_eq!(
            remaining(&Value::Int(1500)),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(remaining(&Value::Int(-1)), None);
        assert_eq!(remaining(&Value::Int(-2)), None);
    }
}

//! What a store remembers of the values it read: for each value key, the
//! generation of the value last read and the moment its time to live ends,
//! measured from the `PTTL` read with it on this process's monotonic clock.
//!
//! A generation is a write's random token and a write's time to live never
//! changes afterwards (no script extends a value), so while a key still
//! holds the same generation its expiry is the one remembered. A read can
//! then be a plain `GET`: the value's frame says which generation it is,
//! and a known generation's remaining time is the remembered deadline minus
//! now — Redis's reading, aged on the local clock, as the L1 ages its
//! copies. An unknown generation (a new write, a forgotten key) is read
//! again with its `PTTL`, unless its generation names its expiry on the
//! server's clock ([`frame::with_expiry`]): then the plain `GET` brings
//! all, and only that the key holds a value is remembered.
//!
//! Whether a key is expected to hold a value ([`Expiries::is_live`], the
//! flight's choice of its first request) is kept apart, in a lock-free
//! table ([`Recall`]) that every read and write of a value teaches: a look
//! at it is one or two atomic loads, where the map above costs a lock and
//! a lookup in a table of up to `read_memory` entries.

use std::sync::Arc;
use std::time::{Duration, Instant};

use quick_cache::UnitWeighter;

use super::recall::Recall;
use crate::bounded_map::BoundedMap;
use crate::redis::frame;
use crate::store::Stored;

type Map = BoundedMap<u64, Expiry, UnitWeighter>;

/// When the value of one generation expires. Generations are the tokens
/// `RedisStore` draws (32 lowercase hex digits, and the expiry some
/// name: [`frame::with_expiry`]), kept as the read that
/// learnt them found them: a plain `GET` compares its frame's token with
/// this one byte for byte (no digit checked or parsed again) and hands this
/// one on as the value's generation, so the reads of one write share one
/// token and allocate none (each writes its reference count).
#[derive(Clone)]
pub(in crate::redis) struct Expiry {
    token: Arc<str>,
    deadline: Instant,
}

impl Expiry {
    /// The generation's token.
    pub(in crate::redis) fn token(&self) -> &str {
        &self.token
    }

    /// The value read with `bytes` (its envelope, unframed), this
    /// generation's: what is left of its life and its token.
    pub(in crate::redis) fn stored(self, bytes: Vec<u8>) -> Stored {
        Stored {
            bytes,
            remaining: Some(self.deadline.saturating_duration_since(Instant::now())),
            generation: Some(self.token),
        }
    }
}

/// The remembered expiries of one store, bounded by entries.
pub(in crate::redis) struct Expiries {
    /// Keyed by the FNV-1a hash of the value key's name; a colliding key
    /// holds another generation and is read with its `PTTL`.
    map: Option<Map>,
    /// The keys expected to hold a value, and until when.
    recall: Option<Recall>,
}

impl Expiries {
    /// Remembers up to `entries` keys (0: nothing, every read brings its
    /// `PTTL`).
    pub(in crate::redis) fn new(entries: usize) -> Self {
        Self {
            map: (entries > 0).then(|| Map::new(entries, entries as u64, UnitWeighter)),
            recall: Recall::new(entries),
        }
    }

    /// The expiry remembered for `id`: a read of it may be a plain `GET`.
    pub(in crate::redis) fn get(&self, id: u64) -> Option<Expiry> {
        self.map.as_ref()?.get(&id)
    }

    /// Whether a value of `id` was read or written and its time to live
    /// is not over yet, as far as the store recalls (a hint: see
    /// [`Recall`]).
    pub(in crate::redis) fn is_live(&self, id: u64) -> bool {
        self.recall
            .as_ref()
            .is_some_and(|recall| recall.is_live(id))
    }

    /// Records that a value of `id` lives until `deadline`, without its
    /// generation: a value whose frame names its expiry needs none
    /// remembered to be read with a plain `GET`.
    pub(in crate::redis) fn recall(&self, id: u64, deadline: Instant) {
        if let Some(recall) = &self.recall {
            recall.learn(id, deadline);
        }
    }

    /// Remembers that `generation` of `id` had `remaining` to live when
    /// `asked` (when its `PTTL` was sent: the deadline errs early).
    pub(in crate::redis) fn learn(
        &self,
        id: u64,
        generation: &Arc<str>,
        remaining: Duration,
        asked: Instant,
    ) {
        self.learn_deadline(id, generation, asked + remaining);
    }

    /// Remembers that `generation` of `id` expires at `deadline`.
    pub(in crate::redis) fn learn_deadline(
        &self,
        id: u64,
        generation: &Arc<str>,
        deadline: Instant,
    ) {
        let Some(map) = &self.map else {
            return;
        };
        if !frame::is_written(generation) {
            return;
        }
        self.recall(id, deadline);
        map.insert(
            id,
            Expiry {
                token: Arc::clone(generation),
                deadline,
            },
        );
    }

    /// Remembers the expiry of a value just read (`asked`: when the read
    /// was sent), if the read brought its generation and time to live.
    pub(in crate::redis) fn learn_read(&self, id: u64, stored: &Stored, asked: Instant) {
        if let (Some(generation), Some(remaining)) = (&stored.generation, stored.remaining) {
            self.learn(id, generation, remaining, asked);
        }
    }

    /// Forgets `id` (its value is gone).
    pub(in crate::redis) fn forget(&self, id: u64) {
        if let Some(map) = &self.map {
            map.remove(&id);
        }
        if let Some(recall) = &self.recall {
            recall.forget(id);
        }
    }
}

impl std::fmt::Debug for Expiries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Expiries")
            .field("entries", &self.map.as_ref().map_or(0, Map::len))
            .field("recall", &self.recall)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_known_generation_ages_and_only_drawn_tokens_are_kept() {
        let expiries = Expiries::new(16);
        let token: Arc<str> = format!("{:032x}", 0x1234_u128).into();
        let asked = Instant::now();
        expiries.learn(7, &token, Duration::from_secs(60), asked);
        let expiry = expiries.get(7).expect("remembered");
        assert_eq!(expiry.token(), &*token);
        let stored = expiry.stored(Vec::new());
        let (left, kept) = (
            stored.remaining.expect("a remaining time"),
            stored.generation.expect("a generation"),
        );
        assert!(left <= Duration::from_secs(60) && left > Duration::from_secs(59));
        assert!(Arc::ptr_eq(&kept, &token), "the token read is handed on");
        assert!(frame::is_written(&format!("{:032x}", u128::MAX)));
        assert!(frame::is_written(&frame::with_expiry(
            &token,
            1_700_000_000_000
        )));
        for foreign in [
            "short".to_owned(),
            format!("{:032X}", 0xabc_u128),
            format!("{:031x}g", 0),
            format!("{:031x}", 1),
            format!("{:033x}", 1),
        ] {
            assert!(!frame::is_written(&foreign), "{foreign}");
            expiries.learn(8, &foreign.into(), Duration::from_secs(1), asked);
            assert!(
                expiries.get(8).is_none(),
                "foreign generations are not kept"
            );
        }
        assert!(expiries.is_live(7));
        expiries.forget(7);
        assert!(expiries.get(7).is_none());
        assert!(!expiries.is_live(7));
        assert!(Expiries::new(0).get(7).is_none());
    }
}

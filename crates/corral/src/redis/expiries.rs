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
//! again with its `PTTL`.

use std::time::{Duration, Instant};

use quick_cache::UnitWeighter;

use crate::store::Stored;
use crate::tier::bounded_map::BoundedMap;

type Map = BoundedMap<u64, Expiry, UnitWeighter>;

/// When the value of one generation expires. Generations are the tokens
/// `RedisStore` draws (32 hex digits), kept as the number they spell.
#[derive(Clone, Copy)]
pub(super) struct Expiry {
    generation: u128,
    deadline: Instant,
}

impl Expiry {
    /// Whether the value's time to live is not over yet.
    pub(super) fn is_live(self) -> bool {
        self.deadline > Instant::now()
    }

    /// What is left of the value's life if `generation` is this one's.
    pub(super) fn remaining_of(self, generation: &str) -> Option<Duration> {
        (parse(generation) == Some(self.generation))
            .then(|| self.deadline.saturating_duration_since(Instant::now()))
    }
}

/// A generation token as a number; `None` for one `RedisStore` did not
/// draw.
fn parse(generation: &str) -> Option<u128> {
    let digits = generation.as_bytes();
    if digits.len() != 32 {
        return None;
    }
    // By hand: `u128::from_str_radix` costs a read several hundred
    // instructions more, on every read of a remembered key.
    digits.iter().try_fold(0u128, |n, &digit| {
        let value = match digit {
            b'0'..=b'9' => digit - b'0',
            b'a'..=b'f' => digit - b'a' + 10,
            b'A'..=b'F' => digit - b'A' + 10,
            _ => return None,
        };
        Some(n << 4 | u128::from(value))
    })
}

/// The remembered expiries of one store, bounded by entries.
pub(super) struct Expiries {
    /// Keyed by the FNV-1a hash of the value key's name; a colliding key
    /// holds another generation and is read with its `PTTL`.
    map: Option<Map>,
}

impl Expiries {
    /// Remembers up to `entries` keys (0: nothing, every read brings its
    /// `PTTL`).
    pub(super) fn new(entries: usize) -> Self {
        Self {
            map: (entries > 0).then(|| Map::new(entries, entries as u64, UnitWeighter)),
        }
    }

    /// The expiry remembered for `id`: a read of it may be a plain `GET`.
    pub(super) fn get(&self, id: u64) -> Option<Expiry> {
        self.map.as_ref()?.get(&id)
    }

    /// Remembers that `generation` of `id` had `remaining` to live when
    /// `asked` (when its `PTTL` was sent: the deadline errs early).
    pub(super) fn learn(&self, id: u64, generation: &str, remaining: Duration, asked: Instant) {
        let (Some(map), Some(generation)) = (&self.map, parse(generation)) else {
            return;
        };
        map.insert(
            id,
            Expiry {
                generation,
                deadline: asked + remaining,
            },
        );
    }

    /// Remembers the expiry of a value just read (`asked`: when the read
    /// was sent), if the read brought its generation and time to live.
    pub(super) fn learn_read(&self, id: u64, stored: &Stored, asked: Instant) {
        if let (Some(generation), Some(remaining)) = (&stored.generation, stored.remaining) {
            self.learn(id, generation, remaining, asked);
        }
    }

    /// Forgets `id` (its value is gone).
    pub(super) fn forget(&self, id: u64) {
        if let Some(map) = &self.map {
            map.remove(&id);
        }
    }
}

impl std::fmt::Debug for Expiries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Expiries")
            .field("entries", &self.map.as_ref().map_or(0, Map::len))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_known_generation_ages_and_others_are_unknown() {
        let expiries = Expiries::new(16);
        let token = format!("{:032x}", 0x1234_u128);
        let asked = Instant::now();
        expiries.learn(7, &token, Duration::from_secs(60), asked);
        let expiry = expiries.get(7).expect("remembered");
        let left = expiry.remaining_of(&token).expect("same generation");
        assert!(left <= Duration::from_secs(60) && left > Duration::from_secs(59));
        assert_eq!(expiry.remaining_of(&format!("{:032x}", 0x1235_u128)), None);
        assert_eq!(expiry.remaining_of("not-a-token"), None);
        assert_eq!(parse(&token), Some(0x1234));
        assert_eq!(parse(&format!("{:032x}", u128::MAX)), Some(u128::MAX));
        assert_eq!(parse(&format!("{:032X}", 0xabc_u128)), Some(0xabc));
        assert_eq!(parse(&format!("{:031x}g", 0)), None);
        assert_eq!(parse(&format!("{:031x}", 1)), None);
        expiries.learn(8, "short", Duration::from_secs(1), asked);
        assert!(
            expiries.get(8).is_none(),
            "foreign generations are not kept"
        );
        expiries.forget(7);
        assert!(expiries.get(7).is_none());
        assert!(Expiries::new(0).get(7).is_none());
    }
}

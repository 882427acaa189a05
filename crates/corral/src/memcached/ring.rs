//! Which server holds a key: rendezvous (highest random weight) hashing.
//!
//! Each server's weight for a key is `mix(route ^ seed(server))`, where
//! `route` is 64 bits of the key's SHA-256 (see `keys`), `seed` the FNV-1a
//! 64 hash of the server's address as given (`host:port`) and `mix` the
//! SplitMix64 finaliser; the key lives on the server of highest weight
//! (ties: the address that sorts first). The choice depends on the set of
//! addresses only — not on their order — and is stable across processes
//! and versions; adding or removing one server of `n` moves only about
//! `1/n` of the keys.

use crate::data::key::fnv1a64;

/// The servers' seeds, in the order they were given.
#[derive(Debug, Clone)]
pub(super) struct Ring {
    seeds: Vec<(u64, String)>,
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Ring {
    /// A ring over `addrs`.
    pub(super) fn new<'a>(addrs: impl IntoIterator<Item = &'a str>) -> Self {
        Self {
            seeds: addrs
                .into_iter()
                .map(|a| (fnv1a64(a.as_bytes()), a.to_owned()))
                .collect(),
        }
    }

    /// The index (in the given order) of the server for `route`.
    pub(super) fn pick(&self, route: u64) -> usize {
        let mut best: Option<(u64, &str, usize)> = None;
        for (index, (seed, addr)) in self.seeds.iter().enumerate() {
            let weight = mix(route ^ seed);
            let better = match best {
                None => true,
                Some((w, a, _)) => weight > w || (weight == w && addr.as_str() < a),
            };
            if better {
                best = Some((weight, addr, index));
            }
        }
        best.map_or(0, |(_, _, index)| index)
    }
}

#[cfg(test)]
mod tests {
    use super::Ring;

    #[test]
    fn the_choice_ignores_order_and_moves_few_keys() {
        let abc = Ring::new(["a:1", "b:2", "c:3"]);
        let cba = Ring::new(["c:3", "b:2", "a:1"]);
        let ab = Ring::new(["a:1", "b:2"]);
        let names = ["a:1", "b:2", "c:3"];
        let (mut moved, mut counts) = (0, [0usize; 3]);
        for route in 0..3000u64 {
            let route = route.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let one = names[abc.pick(route)];
            assert_eq!(one, ["c:3", "b:2", "a:1"][cba.pick(route)]);
            counts[abc.pick(route)] += 1;
            if one != "c:3" && one != ["a:1", "b:2"][ab.pick(route)] {
                moved += 1;
            }
        }
        assert_eq!(moved, 0, "keys not on the removed server stay put");
        assert!(counts.iter().all(|&c| c > 800), "{counts:?}");
    }
}

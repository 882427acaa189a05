//! How a flight asks the store for a key this process does not recall:
//! with the read-or-lease request (one round trip whether the value is
//! there or not; on Redis a script's server time for a hit, and for a
//! miss a `SET` and a `GET` where values name their expiry), or with a
//! plain read first (a `GET`'s server time for a hit; a miss then asks for
//! the lease: one round trip more).
//!
//! Which one is cheaper depends on what such reads find. When nearly all
//! miss (a cold start, a herd on new keys, keys that expired), the request
//! that leases at once saves the round trip where it matters. When some
//! hit (a steady state whose key space is bigger than the L1: another
//! process filled the key), each hit costs the read-or-lease request a
//! script on Redis (about ten times a `GET`'s server time), or the release
//! of a lease taken for nothing, where the plain read costs a `GET`; and
//! the miss after a plain read asks for its lease in plain commands too.
//! So the tier keeps a running share of hits among the reads of keys it
//! did not recall, and reads plainly first while at least a quarter of
//! them hit: fewer, and the round trip the misses save is worth the hits'
//! scripts.
//!
//! The share is this cache's alone (no state outside the instance), learnt
//! from both kinds of read, so it follows the traffic either way.

use crate::data::share::Share;

/// Reads of keys not recalled, before the share is trusted.
const TRUSTED_AFTER: u32 = 16;

/// The running share of hits among reads of keys the store did not recall.
#[derive(Debug, Default)]
pub(crate) struct FirstReads {
    hits: Share,
}

impl FirstReads {
    /// Whether a key the store does not recall is best read plainly first:
    /// at least [`TRUSTED_AFTER`] reads seen, and at least a quarter of them
    /// hit.
    #[inline]
    pub(crate) fn read_plainly(&self) -> bool {
        let (reads, hits) = self.hits.counts();
        reads >= TRUSTED_AFTER && hits * 4 >= reads
    }

    /// A read of a key the store did not recall found a value (`hit`) or
    /// none.
    pub(crate) fn found(&self, hit: bool) {
        self.hits.count(hit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_at_once_until_a_quarter_of_reads_hit() {
        let reads = FirstReads::default();
        assert!(!reads.read_plainly(), "nothing learnt: lease at once");
        for _ in 0..TRUSTED_AFTER {
            reads.found(true);
        }
        assert!(reads.read_plainly(), "every read hit");
        for _ in 0..256 {
            reads.found(false);
        }
        assert!(!reads.read_plainly(), "misses took over");
        for i in 0..512 {
            reads.found(i % 3 == 0);
        }
        assert!(reads.read_plainly(), "one in three hit");
        for i in 0..512 {
            reads.found(i % 5 == 0);
        }
        assert!(!reads.read_plainly(), "one in five hit");
    }
}

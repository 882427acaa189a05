//! Latencies in nanoseconds, in log-linear buckets (64 per power of two
//! above 128 ns: within 1.6% of the value), mergeable across tasks and
//! processes.

use serde::{Deserialize, Serialize};

/// Exact buckets below this many nanoseconds.
const EXACT: u64 = 128;
/// Sub-buckets per power of two above `EXACT` (its bits: 6).
const SUB_BITS: u32 = 6;
const BUCKETS: usize = EXACT as usize + (64 - 7) * (1 << SUB_BITS);

/// Counts of latencies per bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Histogram {
    counts: Vec<u64>,
    total: u64,
}

/// A histogram's non-empty buckets, for a report line.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Sparse(Vec<(u32, u64)>);

impl Default for Histogram {
    fn default() -> Self {
        Self {
            counts: vec![0; BUCKETS],
            total: 0,
        }
    }
}

fn bucket(ns: u64) -> usize {
    if ns < EXACT {
        return ns as usize;
    }
    let exp = 63 - ns.leading_zeros();
    let sub = (ns >> (exp - SUB_BITS)) & ((1 << SUB_BITS) - 1);
    EXACT as usize + (exp as usize - 7) * (1 << SUB_BITS) + sub as usize
}

/// The middle of bucket `index`, in nanoseconds.
fn value(index: usize) -> u64 {
    if index < EXACT as usize {
        return index as u64;
    }
    let above = index - EXACT as usize;
    let exp = 7 + (above >> SUB_BITS) as u32;
    let sub = (above & ((1 << SUB_BITS) - 1)) as u64;
    let width = 1u64 << (exp - SUB_BITS);
    ((1 << SUB_BITS) + sub) * width + width / 2
}

impl Histogram {
    /// Counts one latency.
    pub(crate) fn record(&mut self, ns: u64) {
        self.counts[bucket(ns)] += 1;
        self.total += 1;
    }

    /// Latencies counted.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// Adds another histogram's counts.
    pub(crate) fn merge(&mut self, other: &Histogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
        self.total += other.total;
    }

    /// The nearest-rank `quantile` (0 to 1), in microseconds; 0 when empty.
    pub(crate) fn quantile_us(&self, quantile: f64) -> f64 {
        let rank = ((quantile * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (index, count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return value(index) as f64 / 1000.0;
            }
        }
        0.0
    }

    /// Its non-empty buckets.
    pub(crate) fn sparse(&self) -> Sparse {
        let buckets = self.counts.iter().enumerate().filter(|(_, &n)| n > 0);
        Sparse(buckets.map(|(i, &n)| (i as u32, n)).collect())
    }

    /// The histogram of `sparse`'s buckets (those out of range are dropped).
    pub(crate) fn from_sparse(sparse: &Sparse) -> Self {
        let mut histogram = Self::default();
        for &(index, count) in &sparse.0 {
            if let Some(slot) = histogram.counts.get_mut(index as usize) {
                *slot += count;
                histogram.total += count;
            }
        }
        histogram
    }
}

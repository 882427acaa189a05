//! Generated request streams for hit-ratio comparisons of the L1 with one
//! unsharded S3-FIFO: the unit test of the bounded map, and
//! `examples/l1_hit_ratio.rs` (which includes this file). Seeded: every run
//! replays the same keys. Compiled into test builds only.

/// A named stream of key ids.
pub(crate) struct Workload {
    pub(crate) name: &'static str,
    pub(crate) keys: Vec<u64>,
}

/// The workloads for a cache of `capacity` entries, `requests` each:
/// Zipf at skews 0.8 and 1.2 over 10× the capacity, a loop that fits
/// (capacity − 13 keys: 1,011 in 1,024), a loop of twice the capacity, and
/// a Zipf core (skew 1.0 over 4× the capacity) interrupted by scans of
/// keys never seen again.
pub(crate) fn standard(capacity: u64, requests: usize, seed: u64) -> Vec<Workload> {
    let universe = capacity * 10;
    vec![
        Workload {
            name: "zipf 0.8",
            keys: zipf(universe, 0.8, requests, seed),
        },
        Workload {
            name: "zipf 1.2",
            keys: zipf(universe, 1.2, requests, seed + 1),
        },
        Workload {
            name: "loop fits",
            keys: looping(capacity.saturating_sub(13).max(1), requests),
        },
        Workload {
            name: "loop 2x",
            keys: looping(capacity * 2, requests),
        },
        Workload {
            name: "scan + zipf core",
            keys: scan_with_core(capacity, requests, seed + 2),
        },
    ]
}

/// `requests` draws of Zipf(`skew`) over `keys` ids (id 0 the likeliest).
pub(crate) fn zipf(keys: u64, skew: f64, requests: usize, seed: u64) -> Vec<u64> {
    let sampler = Zipf::new(keys, skew);
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..requests).map(|_| sampler.sample(&mut rng)).collect()
}

/// Ids `0..keys` in order, over and over.
pub(crate) fn looping(keys: u64, requests: usize) -> Vec<u64> {
    (0..requests as u64).map(|i| i % keys).collect()
}

/// Blocks of 2× `capacity` Zipf(1.0) draws over 4× `capacity` ids, each
/// followed by a scan of `capacity` / 2 ids never requested before.
pub(crate) fn scan_with_core(capacity: u64, requests: usize, seed: u64) -> Vec<u64> {
    let sampler = Zipf::new(capacity * 4, 1.0);
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut next_scanned = u64::MAX / 2;
    let core = (capacity * 2) as usize;
    let scan = (capacity / 2).max(1) as usize;
    let mut keys = Vec::with_capacity(requests);
    while keys.len() < requests {
        for _ in 0..core {
            keys.push(sampler.sample(&mut rng));
        }
        for _ in 0..scan {
            keys.push(next_scanned);
            next_scanned += 1;
        }
    }
    keys.truncate(requests);
    keys
}

/// Zipf by inverse CDF.
struct Zipf {
    cumulative: Vec<f64>,
}

impl Zipf {
    fn new(keys: u64, skew: f64) -> Self {
        let mut total = 0.0;
        let cumulative = (1..=keys)
            .map(|rank| {
                total += 1.0 / (rank as f64).powf(skew);
                total
            })
            .collect();
        Self { cumulative }
    }

    fn sample(&self, rng: &mut fastrand::Rng) -> u64 {
        let total = self.cumulative.last().copied().unwrap_or(0.0);
        let point = rng.f64() * total;
        self.cumulative.partition_point(|&c| c < point) as u64
    }
}

//! Keys drawn from Zipf(1.0): rank r (from 1) with probability
//! proportional to 1/r.

/// The cumulative distribution over ranks 1..=n, searched per draw.
pub(crate) struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    /// Zipf(1.0) over ranks 1..=`n` (n ≥ 1).
    pub(crate) fn new(n: u64) -> Self {
        let mut total = 0.0;
        let mut cdf: Vec<f64> = (1..=n.max(1))
            .map(|rank| {
                total += 1.0 / rank as f64;
                total
            })
            .collect();
        for p in &mut cdf {
            *p /= total;
        }
        Self { cdf }
    }

    /// One rank, from 1.
    pub(crate) fn draw(&self, rng: &mut fastrand::Rng) -> u64 {
        let u = rng.f64();
        let at = self.cdf.partition_point(|&p| p < u);
        at.min(self.cdf.len() - 1) as u64 + 1
    }

    /// The keys expected to be read for the first time between the
    /// `before`-th and the `after`-th draw (the replicas' draws pooled, as
    /// one Redis sees them; nothing expiring or evicted): the sum over the
    /// ranks of e^(-before·p) - e^(-after·p), each rank drawn with
    /// probability p independently.
    pub(crate) fn first_reads(&self, before: u64, after: u64) -> f64 {
        let mut below = 0.0;
        self.cdf
            .iter()
            .map(|&at| {
                let p = at - below;
                below = at;
                (-(before as f64) * p).exp() - (-(after as f64) * p).exp()
            })
            .sum()
    }
}

//! A log-bucketed histogram: a fixed number of counters whatever the number
//! of samples, and percentiles within [`RELATIVE_ERROR`] of the exact ones.
//!
//! Bucket `k ≥ 1` holds the values in `[LOWEST·e^(0.01·(k−1)), LOWEST·e^(0.01·k))`;
//! bucket 0 holds the values below [`LOWEST`] (zero included). A percentile
//! is the nearest-rank bucket's point of equal relative distance to both of
//! its bounds, so it is off by at most `tanh(0.005)` < 0.5 % of the exact
//! nearest-rank value, then clamped to the exact smallest and largest
//! values (kept, with the exact count and mean, beside the buckets).

use super::{rank, Distribution, Samples};

/// ln of a bucket's upper bound over its lower bound.
const LN_GROWTH: f64 = 0.01;

/// Values below this (in the samples' unit) share one bucket that reads as
/// 0 (then clamped to the smallest value seen): 1 µs for milliseconds.
pub(crate) const LOWEST: f64 = 1e-3;

/// Values above this (in the samples' unit) share the last bucket: 115
/// days for milliseconds, 2.7 hours for microseconds.
#[cfg(test)]
pub(crate) const HIGHEST: f64 = 1e10;

/// Percentiles of values within `[LOWEST, HIGHEST]` are within this
/// fraction of the exact nearest-rank percentile (0.5 %).
#[cfg(test)]
pub(crate) const RELATIVE_ERROR: f64 = 0.005;

/// Bucket 0, then `ceil(ln(HIGHEST / LOWEST) / LN_GROWTH)` log buckets
/// (checked by a test): 2,995 counters, 24 KB.
const BUCKETS: usize = 2_995;

/// Counts of values per log-spaced bucket, plus the exact count, sum,
/// smallest and largest value.
#[derive(Clone)]
pub struct Histogram {
    counts: Box<[u64]>,
    count: u64,
    sum: f64,
    min: f64,
    max: f64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            counts: vec![0; BUCKETS].into_boxed_slice(),
            count: 0,
            sum: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
        }
    }
}

impl Histogram {
    /// Adds one observation of `value`.
    pub fn record(&mut self, value: f64) {
        self.add(value, 1);
    }

    /// The estimated nearest-rank `p`-th percentile; `None` when empty.
    pub(crate) fn percentile(&self, p: u64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let wanted = rank(p, self.count);
        let mut seen = 0;
        let bucket = self
            .counts
            .iter()
            .position(|&n| {
                seen += n;
                seen >= wanted
            })
            .unwrap_or(BUCKETS - 1);
        Some(estimate(bucket).clamp(self.min, self.max))
    }

    /// Bytes held, on the stack and the heap: the same for any number of samples.
    #[cfg(test)]
    pub(crate) fn footprint(&self) -> usize {
        std::mem::size_of::<Self>() + std::mem::size_of_val(&*self.counts)
    }
}

impl Samples for Histogram {
    fn add(&mut self, value: f64, weight: u64) {
        if weight == 0 || !value.is_finite() {
            return;
        }
        self.counts[bucket(value)] += weight;
        self.count += weight;
        self.sum += value * weight as f64;
        self.min = self.min.min(value);
        self.max = self.max.max(value);
    }

    fn distribution(&mut self) -> Option<Distribution> {
        Some(Distribution {
            count: self.count,
            avg: self.sum / self.count as f64,
            min: self.min,
            p50: self.percentile(50)?,
            p90: self.percentile(90)?,
            p99: self.percentile(99)?,
            max: self.max,
        })
    }
}

/// The bucket of a finite `value`.
fn bucket(value: f64) -> usize {
    if value < LOWEST {
        return 0;
    }
    // Non-negative and finite, so the cast floors; beyond HIGHEST it saturates.
    let k = 1 + ((value / LOWEST).ln() / LN_GROWTH) as usize;
    k.min(BUCKETS - 1)
}

/// The value a bucket reads as: the point at equal relative distance from
/// its bounds, `lower × (1 + tanh(LN_GROWTH / 2))`; 0 for bucket 0.
fn estimate(bucket: usize) -> f64 {
    if bucket == 0 {
        return 0.0;
    }
    let lower = LOWEST * ((bucket - 1) as f64 * LN_GROWTH).exp();
    lower * (1.0 + (LN_GROWTH / 2.0).tanh())
}

#[cfg(test)]
pub(super) mod constants {
    //! The constants above, derived, for the tests.
    pub(crate) fn buckets() -> usize {
        1 + ((super::HIGHEST / super::LOWEST).ln() / super::LN_GROWTH).ceil() as usize
    }

    pub(crate) fn error_bound() -> f64 {
        (super::LN_GROWTH / 2.0).tanh()
    }

    pub(crate) const BUCKETS: usize = super::BUCKETS;
}
